// The loss-scaling and update half of a training step, written once for one core (train::Trainer)
// and for a mesh of simulated cores (mesh::CoreMesh), so the two cannot drift apart.
//
// Before backward the loss gradient is multiplied by the scaler's scale. After backward — and, on a
// mesh, after the gradients were reduced over cores and replicas so that every copy holds the same —
// finish_update checks the gradients (a non-finite one stops the run unless the scaler skips such
// steps), unscales every copy by the scale backward used, tells the scaler whether the step
// overflowed, applies the optimizer to every copy and checks the new weights.
//
//   scale_loss_gradient(d_loss, scaler.scale());                  // [N, C, ...] f32
//   executor.backward(d_loss);
//   std::span<Parameter> copies[] = {executor.parameters()};
//   const bool applied = finish_update(scaler, used_scale, copies,
//                                      [&] { optimizer.step(executor.parameters(), lr); }, context);
//   check_statistics(executor.buffers(), executor.graph(), context);
#pragma once

#include "graph/graph.hpp"
#include "tensor/parameter.hpp"
#include "train/loss_scale.hpp"
#include "train/parallel_for.hpp"

#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace tessera::train {

// What an error about this step says beyond the tensor's name.
struct StepContext {
    std::int64_t step = 0;  // counted from 0; messages say step + 1
    double loss = 0;        // the step's loss, for the message about non-finite gradients
    // Where parameter `index`'s non-finite gradient came from (" on core 3"), or nothing.
    std::function<std::string(std::size_t index)> locate;
    std::string aftermath;  // appended to every error: " Nothing of this step was saved."
};

// gradient *= scale, in place (nothing when scale is 1). The gradient is a contiguous f32 tensor.
void scale_loss_gradient(Tensor& gradient, double scale);

// `copies`: every copy of the parameters (one per simulated core; one for a single core), each
// holding the same reduced, still scaled gradients. `apply_optimizers` steps every copy's optimizer
// (a mesh runs them side by side). Returns whether the update was applied (false: the scaler
// skipped an overflowing step). The checks and the unscaling go parameter by parameter through
// `parallel` (the errors still name the first bad parameter in order).
bool finish_update(LossScaler& scaler, double used_scale, std::span<const std::span<Parameter>> copies,
                   const std::function<void()>& apply_optimizers, const StepContext& context,
                   const ParallelFor& parallel = run_in_order);

// Every batch-norm statistic of `graph` finite, else a bad-input error naming it; `where` follows
// the name (" on core 2").
void check_statistics(std::span<const Tensor> statistics, const graph::Graph& graph, const StepContext& context,
                      const std::string& where = "");

}  // namespace tessera::train
