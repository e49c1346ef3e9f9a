#include "train/schedule.hpp"

#include "core/error.hpp"

#include <cmath>
#include <numbers>
#include <sstream>
#include <utility>

namespace tessera::train {

namespace {

bool is_rate(double value) {
    return std::isfinite(value) && value >= 0.0;
}

void check_step(std::int64_t step) {
    TESSERA_CHECK(step >= 0, "learning-rate schedule: expected a step >= 0, got " << step);
}

void check_rate(double value, std::string_view field, std::string_view where) {
    TESSERA_CHECK(is_rate(value), where << ": expected a finite " << field << " >= 0, got " << value);
}

void check_cosine(const CosineDecayOptions& o, std::string_view where, std::string_view base_field) {
    check_rate(o.learning_rate_base, base_field, where);
    check_rate(o.warmup_learning_rate, "warmup_learning_rate", where);
    TESSERA_CHECK(o.total_steps > 0, where << ": expected total_steps > 0, got " << o.total_steps);
    TESSERA_CHECK(o.warmup_steps >= 0, where << ": expected warmup_steps >= 0, got " << o.warmup_steps);
    TESSERA_CHECK(o.hold_base_rate_steps >= 0,
                  where << ": expected hold_base_rate_steps >= 0, got " << o.hold_base_rate_steps);
    TESSERA_CHECK(o.warmup_steps <= o.total_steps, where << ": expected warmup_steps <= total_steps, got warmup_steps "
                                                         << o.warmup_steps << " and total_steps " << o.total_steps);
    TESSERA_CHECK(o.warmup_steps + o.hold_base_rate_steps <= o.total_steps,
                  where << ": expected warmup_steps + hold_base_rate_steps <= total_steps, got " << o.warmup_steps
                        << " + " << o.hold_base_rate_steps << " and total_steps " << o.total_steps);
    TESSERA_CHECK(o.warmup_steps == 0 || o.warmup_learning_rate <= o.learning_rate_base,
                  where << ": expected warmup_learning_rate <= " << base_field << " (warmup rises to the base), got "
                        << o.warmup_learning_rate << " > " << o.learning_rate_base);
}

void check_manual(const ManualStepOptions& o, std::string_view where, std::string_view rate_field) {
    check_rate(o.learning_rate, rate_field, where);
    check_rate(o.warmup_learning_rate, "warmup_learning_rate", where);
    TESSERA_CHECK(o.warmup_steps >= 0, where << ": expected warmup_steps >= 0, got " << o.warmup_steps);
    for (std::size_t i = 0; i < o.steps.size(); ++i) {
        const ManualStep& boundary = o.steps[i];
        TESSERA_CHECK(boundary.step >= 1, where << ": expected steps[" << i << "].step >= 1, got " << boundary.step);
        TESSERA_CHECK(boundary.step >= o.warmup_steps,
                      where << ": expected steps[" << i << "].step >= warmup_steps " << o.warmup_steps
                            << " (boundaries come after warmup), got " << boundary.step);
        TESSERA_CHECK(i == 0 || boundary.step > o.steps[i - 1].step,
                      where << ": expected steps sorted by strictly increasing step, got steps[" << i - 1 << "].step "
                            << (i ? o.steps[i - 1].step : 0) << " then steps[" << i << "].step " << boundary.step);
        TESSERA_CHECK(is_rate(boundary.learning_rate), where << ": expected a finite steps[" << i
                                                             << "].learning_rate >= 0, got " << boundary.learning_rate);
    }
}

double linear_warmup(double from, double to, std::int64_t step, std::int64_t warmup_steps) {
    return from + (to - from) * static_cast<double>(step) / static_cast<double>(warmup_steps);
}

}  // namespace

// ---- constant ----------------------------------------------------------------------------------

ConstantSchedule::ConstantSchedule(double learning_rate) : m_learning_rate(learning_rate) {
    check_rate(learning_rate, "learning_rate", "constant schedule");
}

double ConstantSchedule::value(std::int64_t step) const {
    check_step(step);
    return m_learning_rate;
}

std::string ConstantSchedule::describe() const {
    std::ostringstream out;
    out << "constant " << m_learning_rate;
    return out.str();
}

// ---- cosine decay with linear warmup -----------------------------------------------------------

CosineDecaySchedule::CosineDecaySchedule(CosineDecayOptions options) : m_options(options) {
    check_cosine(options, "cosine decay schedule", "learning_rate_base");
}

double CosineDecaySchedule::value(std::int64_t step) const {
    check_step(step);
    const CosineDecayOptions& o = m_options;
    if (step > o.total_steps) return 0.0;
    if (step < o.warmup_steps) return linear_warmup(o.warmup_learning_rate, o.learning_rate_base, step, o.warmup_steps);
    const std::int64_t decay_begin = o.warmup_steps + o.hold_base_rate_steps;
    if (step <= decay_begin) return o.learning_rate_base;  // also covers an empty decay phase
    const double progress = static_cast<double>(step - decay_begin) / static_cast<double>(o.total_steps - decay_begin);
    return 0.5 * o.learning_rate_base * (1.0 + std::cos(std::numbers::pi * progress));
}

std::string CosineDecaySchedule::describe() const {
    const CosineDecayOptions& o = m_options;
    std::ostringstream out;
    if (o.warmup_steps > 0) {
        out << "linear warmup " << o.warmup_learning_rate << " -> " << o.learning_rate_base << " over "
            << o.warmup_steps << " steps, ";
    }
    if (o.hold_base_rate_steps > 0)
        out << "hold " << o.learning_rate_base << " for " << o.hold_base_rate_steps << " steps, ";
    out << "cosine decay " << o.learning_rate_base << " -> 0 at step " << o.total_steps;
    return out.str();
}

// ---- manual steps with linear warmup -----------------------------------------------------------

ManualStepSchedule::ManualStepSchedule(ManualStepOptions options) : m_options(std::move(options)) {
    check_manual(m_options, "manual step schedule", "learning_rate");
}

double ManualStepSchedule::value(std::int64_t step) const {
    check_step(step);
    const ManualStepOptions& o = m_options;
    if (step < o.warmup_steps) return linear_warmup(o.warmup_learning_rate, o.learning_rate, step, o.warmup_steps);
    double rate = o.learning_rate;
    for (const ManualStep& boundary : o.steps) {
        if (step < boundary.step) break;
        rate = boundary.learning_rate;
    }
    return rate;
}

std::string ManualStepSchedule::describe() const {
    const ManualStepOptions& o = m_options;
    std::ostringstream out;
    if (o.warmup_steps > 0) {
        out << "linear warmup " << o.warmup_learning_rate << " -> " << o.learning_rate << " over " << o.warmup_steps
            << " steps, then ";
    }
    out << o.learning_rate;
    for (const ManualStep& boundary : o.steps) out << ", " << boundary.learning_rate << " from step " << boundary.step;
    return out.str();
}

// ---- linear scaling ----------------------------------------------------------------------------

double scale_learning_rate_by_batch(double base_learning_rate, std::int64_t global_batch_size,
                                    std::int64_t reference_batch_size) {
    TESSERA_CHECK(global_batch_size > 0,
                  "learning-rate scaling: expected global_batch_size > 0, got " << global_batch_size);
    TESSERA_CHECK(reference_batch_size > 0,
                  "learning-rate scaling: expected reference_batch_size > 0, got " << reference_batch_size);
    return base_learning_rate * static_cast<double>(global_batch_size) / static_cast<double>(reference_batch_size);
}

// ---- configuration -----------------------------------------------------------------------------

std::string_view to_string(ScheduleKind kind) {
    switch (kind) {
        case ScheduleKind::Constant:
            return "constant";
        case ScheduleKind::CosineDecay:
            return "cosine";
        case ScheduleKind::ManualStep:
            return "manual";
    }
    TESSERA_ASSERT(false, "unknown ScheduleKind " << static_cast<int>(kind));
}

ScheduleKind parse_schedule_kind(std::string_view text) {
    for (ScheduleKind kind : {ScheduleKind::Constant, ScheduleKind::CosineDecay, ScheduleKind::ManualStep}) {
        if (text == to_string(kind)) return kind;
    }
    TESSERA_REJECT("expected a learning-rate schedule of constant, cosine or manual, got '" << text << "'");
}

namespace {

// The config with every rate multiplied by the batch factor (or unchanged when scaling is off).
ScheduleConfig scaled(const ScheduleConfig& config) {
    ScheduleConfig result = config;
    if (!config.scale_by_batch_size) return result;
    const double factor = scale_learning_rate_by_batch(1.0, config.global_batch_size, config.reference_batch_size);
    result.learning_rate *= factor;
    result.warmup_learning_rate *= factor;
    for (ManualStep& boundary : result.steps) boundary.learning_rate *= factor;
    return result;
}

}  // namespace

void validate(const ScheduleConfig& config) {
    constexpr std::string_view where = "schedule config";
    if (config.scale_by_batch_size) {
        TESSERA_CHECK(
            config.global_batch_size > 0,
            where << ": expected global_batch_size > 0 with scale_by_batch_size, got " << config.global_batch_size);
        TESSERA_CHECK(config.reference_batch_size > 0,
                      where << ": expected reference_batch_size > 0 with scale_by_batch_size, got "
                            << config.reference_batch_size);
    }
    switch (config.kind) {
        case ScheduleKind::Constant:
            check_rate(config.learning_rate, "learning_rate", where);
            return;
        case ScheduleKind::CosineDecay:
            check_cosine({config.learning_rate, config.total_steps, config.warmup_learning_rate, config.warmup_steps,
                          config.hold_base_rate_steps},
                         where, "learning_rate");
            return;
        case ScheduleKind::ManualStep:
            check_manual({config.learning_rate, config.steps, config.warmup_learning_rate, config.warmup_steps}, where,
                         "learning_rate");
            return;
    }
    TESSERA_FAIL(where << ": expected kind constant, cosine or manual, got " << static_cast<int>(config.kind));
}

std::unique_ptr<LearningRateSchedule> make_schedule(const ScheduleConfig& config) {
    validate(config);
    const ScheduleConfig c = scaled(config);
    switch (c.kind) {
        case ScheduleKind::Constant:
            return std::make_unique<ConstantSchedule>(c.learning_rate);
        case ScheduleKind::CosineDecay:
            return std::make_unique<CosineDecaySchedule>(CosineDecayOptions{
                c.learning_rate, c.total_steps, c.warmup_learning_rate, c.warmup_steps, c.hold_base_rate_steps});
        case ScheduleKind::ManualStep:
            return std::make_unique<ManualStepSchedule>(
                ManualStepOptions{c.learning_rate, c.steps, c.warmup_learning_rate, c.warmup_steps});
    }
    TESSERA_FAIL("schedule config: expected kind constant, cosine or manual, got " << static_cast<int>(c.kind));
}

ScheduleConfig resnet_imagenet_schedule(double base_learning_rate, std::int64_t global_batch_size,
                                        double steps_per_epoch) {
    TESSERA_CHECK(std::isfinite(steps_per_epoch) && steps_per_epoch > 0.0,
                  "resnet schedule: expected steps_per_epoch > 0, got " << steps_per_epoch);
    const auto epoch_step = [&](double epoch) { return static_cast<std::int64_t>(std::ceil(epoch * steps_per_epoch)); };
    ScheduleConfig config;
    config.kind = ScheduleKind::ManualStep;
    config.learning_rate = base_learning_rate;
    config.warmup_learning_rate = 0.0;
    config.warmup_steps = epoch_step(5);
    config.steps = {{epoch_step(30), 0.1 * base_learning_rate},
                    {epoch_step(60), 0.01 * base_learning_rate},
                    {epoch_step(80), 0.001 * base_learning_rate}};
    config.scale_by_batch_size = true;
    config.global_batch_size = global_batch_size;
    config.reference_batch_size = 256;
    validate(config);
    return config;
}

}  // namespace tessera::train
