#include "cost/memory_model.hpp"

#include "cost/cost_model.hpp"

#include <algorithm>

namespace tessera::cost {

namespace {

using graph::Node;
using graph::OpKind;

// Elements of a windowed layer's widened input tile (its needed box, every channel and image).
std::int64_t needed_elements(const graph::Graph& model, const Node& node, const partition::NodeTile& tile) {
    const Shape& input = model.node(node.inputs[0]).output_shape;
    std::int64_t elements = input[0] * input[1];
    for (const partition::Interval& interval : tile.needed) elements *= interval.size();
    return elements;
}

}  // namespace

CoreMemory estimate_core_memory(const graph::Graph& model, const partition::TilingPlan& plan, std::int64_t core,
                                graph::Precision precision, std::int64_t optimizer_slots) {
    CoreMemory memory;
    const std::int64_t element = activation_bytes(precision);
    std::int64_t parameters = 0, buffers = 0;
    for (const graph::ParameterSpec& spec : model.parameters()) parameters += num_elements_of(spec.shape);
    for (const graph::ParameterSpec& spec : model.buffers()) buffers += num_elements_of(spec.shape);
    memory.weights = 4 * (parameters + buffers);
    memory.weight_gradients = 4 * parameters;
    memory.optimizer_slots = 4 * parameters * optimizer_slots;

    const auto& nodes = model.nodes();
    std::vector<bool> kept(nodes.size(), false);
    auto tile_elements = [&](int id) { return plan.tile_elements(id, core); };
    for (const Node& node : nodes) {
        if (node.kind == OpKind::Input) continue;
        const partition::NodeTile& tile = plan.tile(node.id, core);
        // This core's tile reads rows it does not own: it keeps a widened copy for backward.
        bool has_halo = false;
        for (std::size_t axis = 0; axis < tile.halo_before.size(); ++axis) {
            has_halo = has_halo || tile.halo_before[axis] > 0 || tile.halo_after[axis] > 0;
        }
        switch (node.kind) {
            case OpKind::Conv:
            case OpKind::Pool:
                if (node.kind == OpKind::Pool && node.pool.kind == ops::PoolKind::Average) break;
                if (node.kind == OpKind::Pool) {  // max pooling keeps one index byte per output
                    memory.saved_activations += tile_elements(node.id);
                    break;
                }
                if (has_halo && !tile.replicated) memory.halo_buffers += element * needed_elements(model, node, tile);
                else kept[static_cast<std::size_t>(node.inputs[0])] = true;
                break;
            case OpKind::ConvTranspose:
            case OpKind::Dense:
                kept[static_cast<std::size_t>(node.inputs[0])] = true;
                break;
            case OpKind::BatchNorm:
                kept[static_cast<std::size_t>(node.inputs[0])] = true;
                if (node.batch_norm.fuse_relu) memory.saved_activations += (tile_elements(node.id) + 7) / 8;  // the ReLU mask
                break;
            case OpKind::Relu: kept[static_cast<std::size_t>(node.id)] = true; break;
            default: break;
        }
    }
    for (const Node& node : nodes) {
        if (kept[static_cast<std::size_t>(node.id)]) memory.saved_activations += element * tile_elements(node.id);
    }
    // Backward of one layer: its output's gradient, its inputs' gradients (widened tiles for halos)
    // and a scratch copy of its input in the kernel's layout.
    for (const Node& node : nodes) {
        if (node.kind == OpKind::Input) continue;
        std::int64_t live = tile_elements(node.id);
        for (int input : node.inputs) {
            const partition::NodeTile& tile = plan.tile(node.id, core);
            const bool windowed = (node.kind == OpKind::Conv || node.kind == OpKind::Pool) && !tile.needed.empty();
            const std::int64_t in = windowed ? needed_elements(model, node, tile) : tile_elements(input);
            live += (node.kind == OpKind::Conv ? 2 : 1) * in;
        }
        if (element * live > memory.working_set) {
            memory.working_set = element * live;
            memory.largest_layer = node.id;
        }
    }
    return memory;
}

}  // namespace tessera::cost
