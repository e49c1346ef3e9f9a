// Optimizers: SGD with momentum, Adam and AdamW, with PyTorch's update rules.
//
// An optimizer updates parameters in place from their gradients. It keeps per-parameter slots
// (momentum, Adam's moments), created on the first step and matched to the parameters by index on
// every later step; a parameter list whose names or shapes changed is an error, not a silent reset.
//
//   auto optimizer = make_optimizer({.kind = OptimizerKind::Sgd, .momentum = 0.9, .weight_decay = 1e-4});
//   for (std::int64_t step = 0; step < num_steps; ++step) {
//       ...  // forward, backward: fills every parameter.gradient
//       optimizer->step(parameters, schedule->value(step));
//   }
//   std::vector<NamedTensor> saved = optimizer->state();  // for a checkpoint
//
// Update rules, per element, with g the gradient, w the weight, lr the learning rate, t the step
// number counted from 1 (torch.optim.SGD / Adam / AdamW; SGD's also equals TensorFlow's
// MomentumOptimizer, which keeps the accumulator the same way):
//   SGD       g += wd·w;  v = μ·v + g  (v = g on the first step);  w -= lr·v
//             Nesterov:   w -= lr·(g + μ·v);   without momentum: w -= lr·g
//   Adam      g += wd·w;  m = m + (1−β1)·(g − m);  s = β2·s + (1−β2)·g·g
//             w -= (lr / (1−β1^t))·m / (sqrt(s) / sqrt(1−β2^t) + ε)
//   AdamW     w *= 1 − lr·wd, then Adam's update without the wd term in g.
// Weight decay (wd) applies only to parameters with apply_weight_decay set. Elementwise arithmetic
// runs in f32 in that order, with the scalar coefficients computed in double and rounded once, as
// PyTorch does for f32 tensors on the CPU. Each parameter's update is a plain sequential loop:
// deterministic, whichever thread runs it.
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

class Optimizer {
public:
    virtual ~Optimizer() = default;
    Optimizer(const Optimizer&) = delete;
    Optimizer& operator=(const Optimizer&) = delete;

    // Updates every parameter in place from its gradient. Values and gradients must be defined,
    // contiguous f32 tensors of equal shape; learning_rate must be finite and >= 0. The first call
    // (or the first after reset()) creates the slots; later calls must pass the same parameters in
    // the same order (checked by name and shape). Nothing is changed when a check fails. Parameters
    // are updated independently, so `parallel` may run them on several threads with the same bits.
    void step(std::span<Parameter> parameters, double learning_rate, const ParallelFor& parallel = run_in_order);

    virtual std::string name() const = 0;      // "sgd", "adam", "adamw"
    virtual std::string describe() const = 0;  // one line for UIs: "sgd momentum 0.9 nesterov, weight decay 0.0001"

    std::int64_t num_steps() const noexcept { return m_num_steps; }  // steps taken (or loaded)
    // Names of the per-parameter slots in state order: {"momentum"}, {"exp_avg", "exp_avg_sq"}, {}.
    const std::vector<std::string>& slot_names() const noexcept { return m_slot_names; }
    // Number of parameters the slots were created for (0 before the first step).
    std::size_t num_slot_parameters() const noexcept { return m_slots.size(); }

    // Checkpoint state: for each parameter in order, one f32 tensor per slot named
    // "<parameter name>/<slot name>" with the parameter's shape, then the counter "num_steps" (i32 [1]).
    // The tensors are copies: later steps do not change a saved state.
    std::vector<NamedTensor> state() const;
    // Restores a state written by state() of the same kind of optimizer. Before the first step any
    // well-formed state is accepted and the next step() checks it against the parameters; once slots
    // exist, the state must match them in names and shapes. Tensors are copied in.
    void load_state(const std::vector<NamedTensor>& state);
    // Forgets the slots and the step count, as if newly made.
    void reset();

protected:
    explicit Optimizer(std::vector<std::string> slot_names);

    // Updates one checked parameter. `slots` holds one tensor per slot name, shaped like the
    // parameter; step_number counts from 1 and includes this step.
    virtual void update(Parameter& parameter, std::span<Tensor> slots, double learning_rate,
                        std::int64_t step_number) = 0;

private:
    struct ParameterSlots {
        std::string parameter_name;
        Shape shape;
        std::vector<Tensor> tensors;  // one per slot name, f32, contiguous
    };

    void check_parameters(std::span<const Parameter> parameters) const;

    std::vector<std::string> m_slot_names;
    std::vector<ParameterSlots> m_slots;  // empty until the first step or a load
    std::int64_t m_num_steps = 0;
};

// ---- SGD ---------------------------------------------------------------------------------------

struct SgdOptions {
    double momentum = 0.0;      // μ in [0, 1); 0 keeps no slot
    bool nesterov = false;      // needs momentum > 0
    double weight_decay = 0.0;  // L2, added to the gradient; >= 0
};

class SgdOptimizer final : public Optimizer {
public:
    explicit SgdOptimizer(SgdOptions options = {});  // validates; throws Error
    std::string name() const override { return "sgd"; }
    std::string describe() const override;
    const SgdOptions& options() const noexcept { return m_options; }

private:
    void update(Parameter& parameter, std::span<Tensor> slots, double learning_rate, std::int64_t step_number) override;
    SgdOptions m_options;
};

// ---- Adam and AdamW ----------------------------------------------------------------------------

struct AdamOptions {
    double beta1 = 0.9;         // in [0, 1)
    double beta2 = 0.999;       // in [0, 1)
    double epsilon = 1e-8;      // > 0
    double weight_decay = 0.0;  // >= 0; Adam: L2 added to the gradient, AdamW: decoupled
};

class AdamOptimizer : public Optimizer {
public:
    explicit AdamOptimizer(AdamOptions options = {});  // validates; throws Error
    std::string name() const override { return m_decoupled_weight_decay ? "adamw" : "adam"; }
    std::string describe() const override;
    const AdamOptions& options() const noexcept { return m_options; }
    bool has_decoupled_weight_decay() const noexcept { return m_decoupled_weight_decay; }

protected:
    AdamOptimizer(AdamOptions options, bool decoupled_weight_decay);

private:
    void update(Parameter& parameter, std::span<Tensor> slots, double learning_rate, std::int64_t step_number) override;
    AdamOptions m_options;
    bool m_decoupled_weight_decay = false;
};

// Adam with decoupled weight decay (Loshchilov & Hutter; torch.optim.AdamW). Note PyTorch's AdamW
// defaults weight_decay to 0.01; here, as for every optimizer, the default is 0.
class AdamWOptimizer final : public AdamOptimizer {
public:
    explicit AdamWOptimizer(AdamOptions options = {}) : AdamOptimizer(options, true) {}
};

// ---- configuration -----------------------------------------------------------------------------

enum class OptimizerKind { Sgd, Adam, AdamW };

std::string_view to_string(OptimizerKind kind);             // "sgd", "adam", "adamw"
OptimizerKind parse_optimizer_kind(std::string_view text);  // the inverse; throws Error naming the choices

struct OptimizerConfig {
    OptimizerKind kind = OptimizerKind::Sgd;
    double momentum = 0.9;      // sgd
    bool nesterov = false;      // sgd
    double beta1 = 0.9;         // adam, adamw
    double beta2 = 0.999;       // adam, adamw
    double epsilon = 1e-8;      // adam, adamw
    double weight_decay = 0.0;  // all
};

// Throws Error naming the field ("optimizer config: expected momentum in [0, 1), got 1.5"). Only the
// fields the kind uses are checked; nesterov with adam/adamw is an error.
void validate(const OptimizerConfig& config);
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config);

}  // namespace tessera::train
