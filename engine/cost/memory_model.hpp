// Memory model: what one core of a device needs for a training step of a partitioned model, from the
// model and its tiling plan alone (before anything runs).
//
// A compiler like XLA keeps, between forward and backward, only what backward reads: a convolution's
// input (its halo-widened tile when it has halos), a batch norm's input and its ReLU mask, a ReLU's
// output, a max pool's indices, a dense layer's input. On top of that live the weights, their
// gradients, the optimizer's slots, and a working set while a layer runs backward: the gradients of its
// output and inputs and the kernel's scratch. The simulated cores (cores/core_mesh.hpp) keep more
// (every output and gradient, for inspection); their ledger is what this host allocates, this is what
// a device would.
//
//   CoreMemory m = estimate_core_memory(unet, plan, /*core*/ 0, graph::Precision::BF16, /*slots*/ 1);
//   m.total() <= device.memory_per_core
#pragma once

#include "graph/executor.hpp"
#include "partition/tiling.hpp"

#include <cstdint>

namespace tessera::cost {

struct CoreMemory {
    std::int64_t weights = 0;            // f32 masters (and BN statistics)
    std::int64_t weight_gradients = 0;
    std::int64_t optimizer_slots = 0;
    std::int64_t saved_activations = 0;  // kept from forward for backward (activation precision)
    std::int64_t halo_buffers = 0;       // widened tiles of layers with halos, kept for backward
    std::int64_t working_set = 0;        // the largest layer's live gradients and scratch in backward
    int largest_layer = -1;              // whose backward sets the working set
    std::int64_t total() const {
        return weights + weight_gradients + optimizer_slots + saved_activations + halo_buffers + working_set;
    }
};

CoreMemory estimate_core_memory(const graph::Graph& model, const partition::TilingPlan& plan, std::int64_t core,
                                graph::Precision precision, std::int64_t optimizer_slots);

}  // namespace tessera::cost
