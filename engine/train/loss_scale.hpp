// Loss scaling for fp16 training: keep small gradients representable by scaling the loss up before
// the backward pass and the gradients down before the optimizer step (Micikevicius et al.; the U-Net
// seed's LossScaleOptimizer(optimizer, "dynamic")).
//
// All scalers share one interface, so a training step treats them alike:
//
//   loss = loss * scaler.scale();                    // before backward
//   ...                                              // backward fills the f32 gradients
//   const bool finite = LossScaler::gradients_are_finite(parameters);
//   scaler.unscale(parameters);                      // gradients /= scale
//   if (scaler.update(!finite)) optimizer.step(parameters, learning_rate);
//
// DynamicLossScaler (TensorFlow's DynamicLossScale, PyTorch's GradScaler): a step whose gradients hold
// inf or NaN is skipped and the scale multiplied by backoff_factor (not below min_scale); after
// growth_interval clean steps in a row the scale is multiplied by growth_factor (not above max_scale)
// and the count restarts. The scale is held in f32, as both frameworks do, so checkpoints restore it
// exactly. StaticLossScaler and NoLossScaling never skip a step (TensorFlow's FixedLossScale): a
// caller that wants to stop on non-finite gradients checks gradients_are_finite itself.
#pragma once

#include "tensor/parameter.hpp"
#include "train/named_tensor.hpp"
#include "train/parallel_for.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::train {

class LossScaler {
public:
    virtual ~LossScaler() = default;

    virtual std::string name() const = 0;      // "none", "static", "dynamic"
    virtual std::string describe() const = 0;  // one line for UIs
    virtual double scale() const = 0;          // multiply the loss by this before the backward pass

    // Called once per step after the gradients were checked and unscaled. Returns whether the
    // optimizer step should be applied.
    virtual bool update(bool found_non_finite) = 0;
    virtual std::int64_t skipped_steps() const { return 0; }
    // True when a non-finite gradient is an expected overflow that update() answers by skipping the
    // step (dynamic scaling). Otherwise a non-finite gradient means training diverged or the data
    // holds NaN/Inf: the caller stops the run, naming where, before anything non-finite is saved.
    virtual bool skips_non_finite() const { return false; }

    // Checkpoint state: empty for scalers without state. load_state accepts what state() wrote.
    virtual std::vector<NamedTensor> state() const { return {}; }
    virtual void load_state(const std::vector<NamedTensor>& state);

    // True when no gradient element is inf or NaN. Gradients must be defined, contiguous f32 tensors.
    // Scans in blocks and stops at the first block holding a non-finite value.
    static bool gradients_are_finite(std::span<const Parameter> parameters);
    // Every gradient defined, contiguous and f32, else an error naming the parameter.
    static void check_gradients(std::span<const Parameter> parameters);
    // The first parameter (in order) whose gradient (or value) holds inf or NaN, or nullptr; the
    // parameters are scanned through `parallel` (a mesh's host threads), the answer is the same.
    static const Parameter* first_non_finite_gradient(std::span<const Parameter> parameters,
                                                      const ParallelFor& parallel = run_in_order);
    static const Parameter* first_non_finite_value(std::span<const Parameter> parameters, const ParallelFor& parallel = run_in_order);
    // Multiplies every gradient by 1 / scale() (rounded to f32 once, as TensorFlow and PyTorch do;
    // exact for power-of-two scales). Does nothing when scale() is 1.
    void unscale(std::span<Parameter> parameters) const;
};

// Scale 1, never skips: lets callers without fp16 use the same code path.
class NoLossScaling final : public LossScaler {
public:
    std::string name() const override { return "none"; }
    std::string describe() const override { return "no loss scaling"; }
    double scale() const override { return 1.0; }
    bool update(bool /*found_non_finite*/) override { return true; }
};

// A fixed scale; never skips.
class StaticLossScaler final : public LossScaler {
public:
    explicit StaticLossScaler(double scale);  // finite, > 0, representable in f32
    std::string name() const override { return "static"; }
    std::string describe() const override;  // "static loss scale 128"
    double scale() const override { return m_scale; }
    bool update(bool /*found_non_finite*/) override { return true; }

private:
    double m_scale;
};

struct DynamicLossScaleOptions {
    double initial_scale = 32768.0;       // 2^15, TensorFlow's default
    double growth_factor = 2.0;           // > 1
    double backoff_factor = 0.5;          // in (0, 1)
    std::int64_t growth_interval = 2000;  // clean steps in a row before growing; >= 1
    double min_scale = 1.0;               // > 0
    double max_scale = 16777216.0;        // 2^24; >= min_scale, finite in f32
};

class DynamicLossScaler final : public LossScaler {
public:
    // Checks the options (initial_scale within [min_scale, max_scale], ...); throws Error naming the field.
    explicit DynamicLossScaler(DynamicLossScaleOptions options = {});

    std::string name() const override { return "dynamic"; }
    std::string describe() const override;  // "dynamic loss scale 32768 (x2 after 2000 clean steps, x0.5 on overflow)"
    double scale() const override { return static_cast<double>(m_scale); }
    // found_non_finite: skip, scale = max(scale · backoff, min_scale), count restarts; returns false.
    // Otherwise: count + 1; at growth_interval, scale = min(scale · growth, max_scale), count restarts;
    // returns true.
    bool update(bool found_non_finite) override;
    bool skips_non_finite() const override { return true; }
    std::int64_t skipped_steps() const override { return m_skipped_steps; }
    std::int64_t clean_steps_since_growth() const noexcept { return m_clean_steps; }
    const DynamicLossScaleOptions& options() const noexcept { return m_options; }

    // "loss_scale/scale" (f32 [1]), "loss_scale/clean_steps_since_growth" and
    // "loss_scale/skipped_steps" (i32 [1]).
    std::vector<NamedTensor> state() const override;
    void load_state(const std::vector<NamedTensor>& state) override;

private:
    DynamicLossScaleOptions m_options;
    float m_scale;
    std::int64_t m_clean_steps = 0;
    std::int64_t m_skipped_steps = 0;
};

// ---- configuration -----------------------------------------------------------------------------

enum class LossScaleKind { None, Static, Dynamic };

std::string_view to_string(LossScaleKind kind);              // "none", "static", "dynamic"
LossScaleKind parse_loss_scale_kind(std::string_view text);  // the inverse; throws Error naming the choices

struct LossScaleConfig {
    LossScaleKind kind = LossScaleKind::None;
    double static_scale = 128.0;        // static
    DynamicLossScaleOptions dynamic{};  // dynamic
};

std::unique_ptr<LossScaler> make_loss_scaler(const LossScaleConfig& config);  // validates

// True when no element of an f32 tensor (any strides) is inf or NaN; other dtypes are finite.
bool tensor_is_finite(const Tensor& tensor);
// True when none of `count` f32 values is inf or NaN.
bool all_finite(const float* data, std::int64_t count);

}  // namespace tessera::train
