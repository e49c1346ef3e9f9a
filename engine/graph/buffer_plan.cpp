#include "graph/buffer_plan.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <numeric>

namespace tessera::graph {

namespace {

std::int64_t round_up(std::int64_t bytes, std::int64_t alignment) { return (bytes + alignment - 1) / alignment * alignment; }

bool live_together(const BufferLifetime& a, const BufferLifetime& b) {
    return a.first_step <= b.last_step && b.first_step <= a.last_step;
}

}  // namespace

ArenaPlan plan_arena(std::span<const BufferLifetime> buffers, std::int64_t alignment) {
    TESSERA_CHECK(alignment > 0, "an arena's alignment must be positive, got " << alignment);
    ArenaPlan plan;
    plan.offsets.assign(buffers.size(), 0);
    std::vector<std::size_t> order(buffers.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    // Largest first, ties by when they start: the big buffers set the arena's shape, the small fill gaps.
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
        return buffers[a].first_step < buffers[b].first_step;
    });
    std::vector<std::size_t> placed;
    std::vector<std::pair<std::int64_t, std::int64_t>> taken;  // [begin, end) of the placed buffers live alongside
    for (std::size_t index : order) {
        const BufferLifetime& buffer = buffers[index];
        TESSERA_CHECK(buffer.bytes >= 0 && buffer.first_step <= buffer.last_step,
                      "a buffer needs a size ≥ 0 and first_step ≤ last_step, got " << buffer.bytes << " bytes over steps "
                                                                                    << buffer.first_step << "–" << buffer.last_step);
        const std::int64_t size = round_up(buffer.bytes, alignment);
        plan.unshared_bytes += size;
        if (size == 0) continue;
        taken.clear();
        for (std::size_t other : placed) {
            if (live_together(buffer, buffers[other])) {
                taken.emplace_back(plan.offsets[other], plan.offsets[other] + round_up(buffers[other].bytes, alignment));
            }
        }
        std::sort(taken.begin(), taken.end());
        std::int64_t offset = 0;
        for (const auto& [begin, end] : taken) {
            if (begin - offset >= size) break;  // the gap before this one fits
            offset = std::max(offset, end);
        }
        plan.offsets[index] = offset;
        plan.bytes = std::max(plan.bytes, offset + size);
        placed.push_back(index);
    }
    return plan;
}

std::vector<BufferLifetime> gradient_lifetimes(const Graph& graph) {
    const std::vector<Node>& nodes = graph.nodes();
    const std::vector<std::vector<int>> consumers = graph.consumers();
    std::vector<BufferLifetime> lifetimes(nodes.size());
    for (std::size_t n = 0; n < nodes.size(); ++n) {
        BufferLifetime& life = lifetimes[n];
        life.last_step = backward_step(nodes.size(), n);
        if (nodes[n].kind == OpKind::Input) {
            life.first_step = life.last_step;
            continue;
        }
        life.bytes = num_elements_of(nodes[n].output_shape) * 4;
        life.first_step = 0;  // an output, or unconsumed: begin_backward sets it
        if (!consumers[n].empty()) {
            const int last_consumer = *std::max_element(consumers[n].begin(), consumers[n].end());
            life.first_step = backward_step(nodes.size(), static_cast<std::size_t>(last_consumer));
        }
        for (int output : graph.output_nodes()) {
            if (static_cast<std::size_t>(output) == n) life.first_step = 0;
        }
        // A convolution reading a halo node may compute its weights' gradients after that node's backward
        // (the core mesh does, while the halo gradients travel to other ranks): they read its output
        // gradient, which lives until then.
        const Node& node = nodes[n];
        if ((node.kind == OpKind::Conv || node.kind == OpKind::ConvTranspose) && !node.inputs.empty() &&
            nodes[static_cast<std::size_t>(node.inputs[0])].kind == OpKind::Halo) {
            life.last_step = backward_step(nodes.size(), static_cast<std::size_t>(node.inputs[0]));
        }
    }
    return lifetimes;
}

ArenaPlan plan_gradient_memory(const Graph& graph) { return plan_arena(gradient_lifetimes(graph)); }

}  // namespace tessera::graph
