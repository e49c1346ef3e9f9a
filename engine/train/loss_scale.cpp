#include "train/loss_scale.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

namespace tessera::train {

namespace {

constexpr std::string_view scale_entry = "loss_scale/scale";
constexpr std::string_view clean_steps_entry = "loss_scale/clean_steps_since_growth";
constexpr std::string_view skipped_steps_entry = "loss_scale/skipped_steps";

constexpr double max_f32 = static_cast<double>(std::numeric_limits<float>::max());

void check_gradient(const Parameter& parameter, std::size_t index, std::string_view where) {
    const Tensor& gradient = parameter.gradient;
    TESSERA_CHECK(gradient.is_defined(), where << ": expected parameter " << index << " ('" << parameter.name
                                               << "') to have a gradient tensor, got an undefined tensor");
    TESSERA_CHECK(gradient.dtype() == DType::F32, where << ": expected the gradient of parameter " << index << " ('"
                                                        << parameter.name << "') to be f32, got "
                                                        << dtype_name(gradient.dtype()));
    TESSERA_CHECK(gradient.is_contiguous(), where << ": expected the gradient of parameter " << index << " ('"
                                                  << parameter.name << "') to be contiguous, got strides "
                                                  << shape_to_string(gradient.strides()));
}

void multiply(float* data, std::int64_t count, float factor) {
    for (std::int64_t i = 0; i < count; ++i) data[i] = data[i] * factor;
}

}  // namespace

// ---- LossScaler --------------------------------------------------------------------------------

void LossScaler::load_state(const std::vector<NamedTensor>& state) {
    TESSERA_CHECK(state.empty(),
                  "loading " << name() << " loss scaler state: expected no entries, got " << describe_entries(state));
}

namespace {

// The first parameter (in order) for which bad(parameter) holds, or null; the tests run through `parallel`.
template <class Bad>
const Parameter* first_where(std::span<const Parameter> parameters, const ParallelFor& parallel, Bad&& bad) {
    std::vector<char> flagged(parameters.size(), 0);
    parallel(static_cast<std::int64_t>(parameters.size()), [&](std::int64_t index) {
        const auto i = static_cast<std::size_t>(index);
        flagged[i] = bad(parameters[i]) ? 1 : 0;
    });
    const auto first = std::find(flagged.begin(), flagged.end(), 1);
    return first == flagged.end() ? nullptr : &parameters[static_cast<std::size_t>(first - flagged.begin())];
}

}  // namespace

const Parameter* LossScaler::first_non_finite_gradient(std::span<const Parameter> parameters, const ParallelFor& parallel) {
    return first_where(parameters, parallel, [](const Parameter& parameter) {
        return !all_finite(parameter.gradient.data<float>(), parameter.gradient.num_elements());
    });
}

const Parameter* LossScaler::first_non_finite_value(std::span<const Parameter> parameters, const ParallelFor& parallel) {
    return first_where(parameters, parallel, [](const Parameter& parameter) { return !tensor_is_finite(parameter.value); });
}

// An f32 is inf or NaN exactly when all its exponent bits are set. The inner loop has no early exit
// so it vectorises; blocks bound the work done after the first non-finite value.
bool all_finite(const float* data, std::int64_t count) {
    constexpr std::int64_t block = 4096;
    constexpr std::uint32_t exponent_mask = 0x7f800000u;
    for (std::int64_t begin = 0; begin < count; begin += block) {
        const std::int64_t end = std::min(count, begin + block);
        std::uint32_t found = 0;
        for (std::int64_t i = begin; i < end; ++i) {
            found |=
                static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(data[i]) & exponent_mask) == exponent_mask);
        }
        if (found != 0) return false;
    }
    return true;
}

bool tensor_is_finite(const Tensor& tensor) {
    if (tensor.dtype() != DType::F32) return true;
    const Tensor dense = tensor.contiguous();
    return all_finite(dense.data<float>(), dense.num_elements());
}

void LossScaler::check_gradients(std::span<const Parameter> parameters) {
    for (std::size_t i = 0; i < parameters.size(); ++i) check_gradient(parameters[i], i, "finite check");
}

bool LossScaler::gradients_are_finite(std::span<const Parameter> parameters) {
    check_gradients(parameters);
    for (const Parameter& parameter : parameters) {
        if (!all_finite(parameter.gradient.data<float>(), parameter.gradient.num_elements())) return false;
    }
    return true;
}

void LossScaler::unscale(std::span<Parameter> parameters) const {
    for (std::size_t i = 0; i < parameters.size(); ++i) check_gradient(parameters[i], i, "unscale");
    const double current = scale();
    if (current == 1.0) return;
    const float inverse = static_cast<float>(1.0 / current);
    for (Parameter& parameter : parameters) {
        multiply(parameter.gradient.data<float>(), parameter.gradient.num_elements(), inverse);
    }
}

// ---- StaticLossScaler --------------------------------------------------------------------------

StaticLossScaler::StaticLossScaler(double scale) : m_scale(scale) {
    TESSERA_CHECK(std::isfinite(scale) && scale > 0.0 && scale <= max_f32,
                  "static loss scaler: expected a finite scale > 0 within f32 range, got " << scale);
}

std::string StaticLossScaler::describe() const {
    std::ostringstream out;
    out << "static loss scale " << m_scale;
    return out.str();
}

// ---- DynamicLossScaler -------------------------------------------------------------------------

DynamicLossScaler::DynamicLossScaler(DynamicLossScaleOptions options)
    : m_options(options), m_scale(static_cast<float>(options.initial_scale)) {
    constexpr std::string_view where = "dynamic loss scaler";
    const DynamicLossScaleOptions& o = options;
    TESSERA_CHECK(std::isfinite(o.min_scale) && o.min_scale > 0.0,
                  where << ": expected a finite min_scale > 0, got " << o.min_scale);
    TESSERA_CHECK(
        std::isfinite(o.max_scale) && o.max_scale >= o.min_scale && o.max_scale <= max_f32,
        where << ": expected max_scale >= min_scale " << o.min_scale << " and within f32 range, got " << o.max_scale);
    TESSERA_CHECK(std::isfinite(o.initial_scale) && o.initial_scale >= o.min_scale && o.initial_scale <= o.max_scale,
                  where << ": expected initial_scale in [min_scale, max_scale] = [" << o.min_scale << ", "
                        << o.max_scale << "], got " << o.initial_scale);
    TESSERA_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1.0,
                  where << ": expected a finite growth_factor > 1, got " << o.growth_factor);
    TESSERA_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0,
                  where << ": expected backoff_factor in (0, 1), got " << o.backoff_factor);
    TESSERA_CHECK(o.growth_interval >= 1, where << ": expected growth_interval >= 1, got " << o.growth_interval);
}

std::string DynamicLossScaler::describe() const {
    std::ostringstream out;
    out << "dynamic loss scale " << m_scale << " (x" << m_options.growth_factor << " after "
        << m_options.growth_interval << " clean steps, x" << m_options.backoff_factor << " on overflow)";
    return out.str();
}

bool DynamicLossScaler::update(bool found_non_finite) {
    const double current = static_cast<double>(m_scale);
    if (found_non_finite) {
        m_scale = static_cast<float>(std::max(current * m_options.backoff_factor, m_options.min_scale));
        m_clean_steps = 0;
        ++m_skipped_steps;
        return false;
    }
    ++m_clean_steps;
    if (m_clean_steps >= m_options.growth_interval) {
        m_scale = static_cast<float>(std::min(current * m_options.growth_factor, m_options.max_scale));
        m_clean_steps = 0;
    }
    return true;
}

std::vector<NamedTensor> DynamicLossScaler::state() const {
    std::vector<NamedTensor> entries;
    entries.push_back(make_scalar_entry(std::string(scale_entry), m_scale));
    entries.push_back(make_counter_entry(std::string(clean_steps_entry), m_clean_steps));
    entries.push_back(make_counter_entry(std::string(skipped_steps_entry), m_skipped_steps));
    return entries;
}

void DynamicLossScaler::load_state(const std::vector<NamedTensor>& state) {
    constexpr std::string_view where = "loading dynamic loss scaler state";
    for (const NamedTensor& entry : state) {
        TESSERA_CHECK(entry.name == scale_entry || entry.name == clean_steps_entry || entry.name == skipped_steps_entry,
                      where << ": expected entries " << scale_entry << ", " << clean_steps_entry << " and "
                            << skipped_steps_entry << ", got unknown entry '" << entry.name << "'");
    }
    const auto require = [&](std::string_view name) -> const NamedTensor& {
        const NamedTensor* entry = find_entry(state, name);
        TESSERA_CHECK(entry != nullptr,
                      where << ": expected an entry '" << name << "', got " << describe_entries(state));
        return *entry;
    };
    const float loaded_scale = read_scalar_entry(require(scale_entry));
    const std::int64_t clean_steps = read_counter_entry(require(clean_steps_entry));
    const std::int64_t skipped_steps = read_counter_entry(require(skipped_steps_entry));
    TESSERA_CHECK(std::isfinite(loaded_scale) && loaded_scale > 0.0f,
                  where << ": expected a finite scale > 0, got " << loaded_scale);
    m_scale = loaded_scale;
    m_clean_steps = clean_steps;
    m_skipped_steps = skipped_steps;
}

// ---- configuration -----------------------------------------------------------------------------

std::string_view to_string(LossScaleKind kind) {
    switch (kind) {
        case LossScaleKind::None:
            return "none";
        case LossScaleKind::Static:
            return "static";
        case LossScaleKind::Dynamic:
            return "dynamic";
    }
    TESSERA_ASSERT(false, "unknown LossScaleKind " << static_cast<int>(kind));
}

LossScaleKind parse_loss_scale_kind(std::string_view text) {
    for (LossScaleKind kind : {LossScaleKind::None, LossScaleKind::Static, LossScaleKind::Dynamic}) {
        if (text == to_string(kind)) return kind;
    }
    TESSERA_REJECT("expected a loss scaling of none, static or dynamic, got '" << text << "'");
}

std::unique_ptr<LossScaler> make_loss_scaler(const LossScaleConfig& config) {
    switch (config.kind) {
        case LossScaleKind::None:
            return std::make_unique<NoLossScaling>();
        case LossScaleKind::Static:
            return std::make_unique<StaticLossScaler>(config.static_scale);
        case LossScaleKind::Dynamic:
            return std::make_unique<DynamicLossScaler>(config.dynamic);
    }
    TESSERA_FAIL("loss scale config: expected kind none, static or dynamic, got " << static_cast<int>(config.kind));
}

}  // namespace tessera::train
