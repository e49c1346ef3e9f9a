// Activation gradients share memory: backward runs the graph in reverse, and a node's gradient is only
// needed from the moment its last consumer's backward writes it until its own backward has read it.
// Buffers whose lifetimes do not meet are packed into one arena at overlapping offsets (the static
// memory planning XLA and TF do), so a core holds the gradients of a few layers at a time rather
// than of every layer.
//
// Time is counted in backward steps: step 0 is begin_backward (the outputs' gradients arrive), step
// count - n is node n's backward_node. Lifetimes are inclusive at both ends: two buffers live in the
// same step never share bytes (a kernel reads its own gradient while writing its inputs').
#pragma once

#include "graph/graph.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace tessera::graph {

struct BufferLifetime {
    std::int64_t bytes = 0;
    std::int64_t first_step = 0, last_step = 0;  // inclusive
};

struct ArenaPlan {
    std::vector<std::int64_t> offsets;  // per buffer, multiples of the alignment
    std::int64_t bytes = 0;             // the arena's size
    std::int64_t unshared_bytes = 0;    // the same buffers each with its own memory (aligned)
};

// Greedy best-offset packing, largest buffers first: each goes to the lowest offset where it overlaps
// no buffer already placed that is live in a common step.
ArenaPlan plan_arena(std::span<const BufferLifetime> buffers, std::int64_t alignment = 64);

// The backward step in which node `node` of a graph with `num_nodes` nodes runs its backward_node.
inline std::int64_t backward_step(std::size_t num_nodes, std::size_t node) {
    return static_cast<std::int64_t>(num_nodes - node);
}

// Per node, when its activation gradient is live: from the backward step of its last (highest-index)
// consumer — or step 0 for a graph output or a node nothing consumes, whose gradient begin_backward
// sets — to its own backward step (a convolution reading a halo node: to that node's, for its weights'
// gradients computed after it — Executor::backward_node_weights). `bytes` is the output's f32 size; the graph input gets 0 bytes.
std::vector<BufferLifetime> gradient_lifetimes(const Graph& graph);

// Bytes the graph's activation gradients take packed in an arena, and each with its own memory (f32,
// unblocked shapes): the planner's estimate of what sharing saves.
ArenaPlan plan_gradient_memory(const Graph& graph);

}  // namespace tessera::graph
