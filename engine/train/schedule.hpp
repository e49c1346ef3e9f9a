// Learning-rate schedules: the rate as a pure function of the global step.
//
// value(step) is the rate for the update that takes the global step from `step` to `step + 1`, as
// TensorFlow evaluates a schedule on global_step before incrementing it. Steps count from 0.
//
//   auto schedule = make_schedule({.kind = ScheduleKind::CosineDecay, .learning_rate = 0.04,
//                                  .total_steps = 25000, .warmup_learning_rate = 0.013333,
//                                  .warmup_steps = 2000});
//   schedule->value(0);      // 0.013333
//   schedule->value(2000);   // 0.04
//   schedule->value(25001);  // 0
//
// The kinds follow the seeds' TPU reference code:
//   constant
//   cosine decay with linear warmup (object detection's cosine_decay_with_warmup):
//       step < warmup_steps:   warmup_learning_rate + (base − warmup_learning_rate)·step / warmup_steps
//       step <= warmup + hold: base
//       step <= total_steps:   0.5·base·(1 + cos(π·(step − warmup − hold) / (total − warmup − hold)))
//       step > total_steps:    0
//   manual steps with linear warmup (ResNet's LR_SCHEDULE; detection's manual_step_learning_rate;
//   RetinaNet's learning_rate_levels / learning_rate_steps):
//       step < warmup_steps:   warmup_learning_rate + (learning_rate − warmup_learning_rate)·step / warmup_steps
//       otherwise:             the rate of the last boundary with boundary.step <= step,
//                              or learning_rate before the first boundary
// Rates are computed in double.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::train {

class LearningRateSchedule {
public:
    virtual ~LearningRateSchedule() = default;
    virtual double value(std::int64_t step) const = 0;  // step >= 0; throws Error otherwise
    virtual std::string describe() const = 0;           // one line for UIs
    double operator()(std::int64_t step) const { return value(step); }
};

// ---- constant ----------------------------------------------------------------------------------

class ConstantSchedule final : public LearningRateSchedule {
public:
    explicit ConstantSchedule(double learning_rate);  // finite, >= 0
    double value(std::int64_t step) const override;
    std::string describe() const override;  // "constant 0.1"

private:
    double m_learning_rate;
};

// ---- cosine decay with linear warmup -----------------------------------------------------------

struct CosineDecayOptions {
    double learning_rate_base = 0.0;        // the peak, reached at the end of warmup
    std::int64_t total_steps = 0;           // > 0; the rate is 0 after it
    double warmup_learning_rate = 0.0;      // <= learning_rate_base
    std::int64_t warmup_steps = 0;          // 0: no warmup
    std::int64_t hold_base_rate_steps = 0;  // steps at the base rate between warmup and decay
};

class CosineDecaySchedule final : public LearningRateSchedule {
public:
    // Checks: rates finite and >= 0, warmup_learning_rate <= learning_rate_base, total_steps > 0,
    // warmup_steps and hold_base_rate_steps >= 0 and warmup_steps + hold_base_rate_steps <= total_steps.
    explicit CosineDecaySchedule(CosineDecayOptions options);
    double value(std::int64_t step) const override;
    std::string describe() const override;
    const CosineDecayOptions& options() const noexcept { return m_options; }

private:
    CosineDecayOptions m_options;
};

// ---- manual steps with linear warmup -----------------------------------------------------------

struct ManualStep {
    std::int64_t step = 0;  // the first step that uses this rate
    double learning_rate = 0.0;
};

struct ManualStepOptions {
    double learning_rate = 0.0;         // after warmup, before the first boundary
    std::vector<ManualStep> steps{};    // boundaries, strictly increasing, each >= max(1, warmup_steps)
    double warmup_learning_rate = 0.0;  // the rate at step 0 when warmup_steps > 0
    std::int64_t warmup_steps = 0;      // 0: no warmup
};

class ManualStepSchedule final : public LearningRateSchedule {
public:
    explicit ManualStepSchedule(ManualStepOptions options);  // validates; throws Error naming the field
    double value(std::int64_t step) const override;
    std::string describe() const override;
    const ManualStepOptions& options() const noexcept { return m_options; }

private:
    ManualStepOptions m_options;
};

// ---- linear scaling with the global batch ------------------------------------------------------

// base_learning_rate · global_batch_size / reference_batch_size (Goyal et al.; the ResNet seed scales
// 0.1 at batch 256 to 0.4 at batch 1024). Both batch sizes must be > 0.
double scale_learning_rate_by_batch(double base_learning_rate, std::int64_t global_batch_size,
                                    std::int64_t reference_batch_size = 256);

// ---- configuration -----------------------------------------------------------------------------

enum class ScheduleKind { Constant, CosineDecay, ManualStep };

std::string_view to_string(ScheduleKind kind);            // "constant", "cosine", "manual"
ScheduleKind parse_schedule_kind(std::string_view text);  // the inverse; throws Error naming the choices

struct ScheduleConfig {
    ScheduleKind kind = ScheduleKind::Constant;
    double learning_rate = 0.1;             // constant: the rate; cosine: learning_rate_base; manual: after warmup
    std::int64_t total_steps = 0;           // cosine
    double warmup_learning_rate = 0.0;      // cosine, manual
    std::int64_t warmup_steps = 0;          // cosine, manual
    std::int64_t hold_base_rate_steps = 0;  // cosine
    std::vector<ManualStep> steps{};        // manual: (boundary step, rate) pairs
    // When set, every rate above (learning_rate, warmup_learning_rate and the manual rates) is
    // multiplied by global_batch_size / reference_batch_size.
    bool scale_by_batch_size = false;
    std::int64_t global_batch_size = 256;
    std::int64_t reference_batch_size = 256;
};

// Throws Error naming the field: "schedule config: expected warmup_steps <= total_steps, got
// warmup_steps 3000 and total_steps 2000". Only the fields the kind uses are checked.
void validate(const ScheduleConfig& config);
std::unique_ptr<LearningRateSchedule> make_schedule(const ScheduleConfig& config);

// The ResNet-50 seed's schedule (tpu/models/official/resnet, after Goyal et al.): base_learning_rate
// scaled by global_batch_size / 256, linear warmup from 0 over 5 epochs, then ×1 until epoch 30, ×0.1
// until 60, ×0.01 until 80, ×0.001 after. Epoch boundaries become the first step at or past them.
ScheduleConfig resnet_imagenet_schedule(double base_learning_rate, std::int64_t global_batch_size,
                                        double steps_per_epoch);

}  // namespace tessera::train
