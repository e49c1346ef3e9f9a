#include "partition/core_graph.hpp"

#include "core/error.hpp"

#include <algorithm>

namespace tessera::partition {

namespace {

using graph::Node;
using graph::OpKind;

bool needs_halo(const TilingPlan& plan, int node) {
    for (std::int64_t core = 0; core < plan.num_cores(); ++core) {
        const NodeTile& tile = plan.tile(node, core);
        for (std::size_t axis = 0; axis < tile.halo_before.size(); ++axis) {
            if (tile.halo_before[axis] > 0 || tile.halo_after[axis] > 0) return true;
        }
    }
    return false;
}

Shape tile_shape(const Shape& full, const std::vector<Interval>& box) {
    Shape shape{full[0], full[1]};
    for (const Interval& interval : box) shape.push_back(interval.size());
    return shape;
}

}  // namespace

std::vector<HaloTransfer> incoming_halo(const graph::Graph& model, const TilingPlan& plan, int node, std::int64_t core) {
    std::vector<HaloTransfer> incoming;
    const int producer = model.node(node).inputs[0];
    const Shape& shape = model.node(producer).output_shape;
    const NodeTile& tile = plan.tile(node, core);
    const auto pieces = plan.grid().pieces_per_axis();
    const auto& index = plan.grid_index(core);
    const std::size_t rank = pieces.size();
    std::int64_t neighbourhood = 1;
    for (std::size_t axis = 0; axis < rank; ++axis) neighbourhood *= 3;
    for (std::int64_t code = 0; code < neighbourhood; ++code) {  // offsets −1, 0, +1 per axis
        std::int64_t peer = 0, rest = code;
        bool inside = true, self = true;
        for (std::size_t axis = 0; axis < rank; ++axis) {
            const std::int64_t step = rest % 3 - 1;
            rest /= 3;
            const std::int64_t at = index[axis] + step;
            inside = inside && at >= 0 && at < pieces[axis];
            self = self && step == 0;
            peer = peer * pieces[axis] + at;
        }
        if (!inside || self) continue;
        const auto& theirs = plan.tile(producer, peer).owned;
        HaloTransfer transfer;
        transfer.peer = peer;
        std::int64_t elements = shape[0] * shape[1];
        for (std::size_t axis = 0; axis < rank; ++axis) {
            const std::int64_t begin = std::max(tile.needed[axis].begin, theirs[axis].begin);
            const std::int64_t end = std::min(tile.needed[axis].end, theirs[axis].end);
            elements *= std::max<std::int64_t>(0, end - begin);
            transfer.peer_origin.push_back(begin - theirs[axis].begin);
            transfer.buffer_origin.push_back(begin - tile.needed[axis].begin);
            transfer.extent.push_back(end - begin);
        }
        if (elements == 0) continue;
        transfer.elements = elements;
        incoming.push_back(std::move(transfer));
    }
    std::sort(incoming.begin(), incoming.end(), [](const HaloTransfer& a, const HaloTransfer& b) { return a.peer < b.peer; });
    return incoming;
}

const HaloExchange* CoreGraphs::halo_for(int local) const {
    for (const HaloExchange& halo : halos) {
        if (halo.halo_node == local) return &halo;
    }
    return nullptr;
}

CoreGraphs build_core_graphs(const graph::Graph& model, const TilingPlan& plan) {
    const std::int64_t cores = plan.num_cores();
    CoreGraphs result;
    result.graphs.reserve(static_cast<std::size_t>(cores));
    for (std::int64_t core = 0; core < cores; ++core) result.graphs.emplace_back(model.name() + ".core" + std::to_string(core));
    const auto& nodes = model.nodes();
    result.local_node.assign(nodes.size(), -1);

    // Adds the same node to every core graph (fn(core) returns its id) and checks the ids agree.
    auto on_every_core = [&](auto&& fn) {
        int id = -1;
        for (std::int64_t core = 0; core < cores; ++core) {
            const int local = fn(core, result.graphs[static_cast<std::size_t>(core)]);
            TESSERA_ASSERT(id < 0 || local == id, "core graphs diverged");
            id = local;
        }
        if (static_cast<int>(result.model_node.size()) <= id) result.model_node.resize(static_cast<std::size_t>(id) + 1, -1);
        return id;
    };
    auto local = [&](int model_id) { return result.local_node[static_cast<std::size_t>(model_id)]; };

    for (const Node& node : nodes) {
        const auto& tiles = [&](std::int64_t core) -> const NodeTile& { return plan.tile(node.id, core); };
        int id = -1;
        switch (node.kind) {
            case OpKind::Input:
                id = on_every_core([&](std::int64_t core, graph::Graph& g) {
                    return g.input(tile_shape(node.output_shape, tiles(core).owned), node.name);
                });
                break;
            case OpKind::Conv:
            case OpKind::Pool: {
                int source = local(node.inputs[0]);
                const int producer = node.inputs[0];
                const Shape& producer_shape = model.node(producer).output_shape;
                const std::size_t rank = producer_shape.size() - 2;
                if (needs_halo(plan, node.id)) {
                    HaloExchange exchange;
                    exchange.producer_node = source;
                    exchange.layer = node.id;
                    exchange.carries_gradient = model.node(producer).kind != OpKind::Input;
                    exchange.transfers.resize(static_cast<std::size_t>(cores));
                    source = on_every_core([&](std::int64_t core, graph::Graph& g) {
                        const NodeTile& tile = tiles(core);
                        const auto& own = plan.tile(producer, core).owned;
                        ops::HaloAttributes attributes;
                        ops::Extents extent;
                        for (std::size_t axis = 0; axis < rank; ++axis) {
                            const Interval& needed = tile.needed[axis];
                            TESSERA_ASSERT(needed.begin <= own[axis].begin || needed.end <= own[axis].begin,
                                           "a tile starts after the rows it needs");
                            const std::int64_t begin = std::max(needed.begin, own[axis].begin);
                            const std::int64_t end = std::min(needed.end, own[axis].end);
                            attributes.interior_offset.push_back(std::max<std::int64_t>(0, begin - needed.begin));
                            attributes.interior_extent.push_back(std::max<std::int64_t>(0, end - begin));
                            extent.push_back(needed.size());
                        }
                        exchange.transfers[static_cast<std::size_t>(core)] = incoming_halo(model, plan, node.id, core);
                        return g.halo(source, extent, attributes, node.name + ".halo");
                    });
                    exchange.halo_node = source;
                    result.halos.push_back(std::move(exchange));
                }
                id = on_every_core([&](std::int64_t core, graph::Graph& g) {
                    const NodeTile& tile = tiles(core);
                    int made = -1;
                    if (node.kind == OpKind::Conv) {
                        ops::ConvAttributes attributes = node.conv;
                        attributes.pad_begin = tile.pad_before;
                        attributes.pad_end = tile.pad_after;
                        made = g.conv(source, node.out_channels, attributes, node.name);
                    } else {
                        ops::PoolAttributes attributes = node.pool;
                        attributes.pad_begin = tile.pad_before;
                        attributes.pad_end = tile.pad_after;
                        made = g.pool(source, attributes, node.name);
                    }
                    const Shape expected = tile_shape(node.output_shape, tile.owned);
                    TESSERA_ASSERT(g.node(made).output_shape == expected,
                                   "core " << core << " of '" << node.name << "' computes "
                                           << shape_to_string(g.node(made).output_shape) << ", its tile is "
                                           << shape_to_string(expected));
                    return made;
                });
                break;
            }
            case OpKind::ConvTranspose:
                id = on_every_core([&](std::int64_t, graph::Graph& g) {
                    return g.conv_transpose(local(node.inputs[0]), node.out_channels, node.conv_transpose, node.name);
                });
                break;
            case OpKind::Upsample:
                id = on_every_core([&](std::int64_t, graph::Graph& g) {
                    return g.upsample(local(node.inputs[0]), node.upsample_factor, node.name);
                });
                break;
            case OpKind::BatchNorm:
                id = on_every_core([&](std::int64_t, graph::Graph& g) {
                    // A zero-initialised scale is an initializer detail the model graph already recorded.
                    const bool zero_scale = model.parameters()[static_cast<std::size_t>(node.parameters[0])].initializer ==
                                            graph::Initializer::Zeros;
                    return g.batch_norm(local(node.inputs[0]), node.batch_norm, node.name, zero_scale);
                });
                break;
            case OpKind::Relu:
                id = on_every_core([&](std::int64_t, graph::Graph& g) { return g.relu(local(node.inputs[0]), node.name); });
                break;
            case OpKind::Add:
                id = on_every_core([&](std::int64_t, graph::Graph& g) {
                    return g.add(local(node.inputs[0]), local(node.inputs[1]), node.name);
                });
                break;
            case OpKind::Concat:
                id = on_every_core([&](std::int64_t, graph::Graph& g) {
                    std::vector<int> inputs;
                    for (int input : node.inputs) inputs.push_back(local(input));
                    return g.concat(inputs, node.name);
                });
                break;
            case OpKind::GlobalAvgPool:
                id = on_every_core([&](std::int64_t, graph::Graph& g) { return g.global_average_pool(local(node.inputs[0]), node.name); });
                break;
            case OpKind::Dense:
                id = on_every_core([&](std::int64_t, graph::Graph& g) {
                    return g.dense(local(node.inputs[0]), node.out_channels, node.name);
                });
                break;
            case OpKind::Halo: TESSERA_FAIL("layer '" << node.name << "': the model is already split into core graphs");
        }
        result.local_node[static_cast<std::size_t>(node.id)] = id;
        result.model_node[static_cast<std::size_t>(id)] = node.id;
    }
    for (graph::Graph& g : result.graphs) g.set_output(local(model.output_node()));
    // Initializers the model set after building a node (a prior-probability bias) carry over.
    for (graph::Graph& g : result.graphs) {
        for (std::size_t p = 0; p < std::min(g.parameters().size(), model.parameters().size()); ++p) {
            const graph::ParameterSpec& spec = model.parameters()[p];
            g.set_initializer(static_cast<int>(p), spec.initializer, spec.constant);
        }
    }
    // Same parameters in the same order as the model: index p is one weight everywhere.
    for (const graph::Graph& g : result.graphs) {
        TESSERA_ASSERT(g.parameters().size() == model.parameters().size() && g.buffers().size() == model.buffers().size(),
                       "core graphs must hold the model's parameters");
    }
    return result;
}

}  // namespace tessera::partition
