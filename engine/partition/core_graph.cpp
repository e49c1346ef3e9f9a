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

namespace {

// Builds one graph per core, node by node in model order: every core gets the same node (so a local id
// names one layer on every core), a Halo node before each convolution or pooling whose tiles need rows
// of their neighbours, and windowed layers padded only at the volume's border.
class CoreGraphBuilder {
public:
    CoreGraphBuilder(const graph::Graph& model, const TilingPlan& plan) : m_model(model), m_plan(plan), m_cores(plan.num_cores()) {
        m_result.graphs.reserve(static_cast<std::size_t>(m_cores));
        for (std::int64_t core = 0; core < m_cores; ++core) {
            m_result.graphs.emplace_back(model.name() + ".core" + std::to_string(core));
        }
        m_result.local_node.assign(model.nodes().size(), -1);
    }

    void add(const Node& node) {
        int id = -1;
        switch (node.kind) {
            case OpKind::Input:
                id = on_every_core([&](std::int64_t core, graph::Graph& g) {
                    return g.input(tile_shape(node.output_shape, m_plan.tile(node.id, core).owned), node.name);
                });
                break;
            case OpKind::Conv:
            case OpKind::Pool: {
                const int source = needs_halo(m_plan, node.id) ? add_halo(node) : local(node.inputs[0]);
                id = add_windowed(node, source);
                break;
            }
            case OpKind::Halo: TESSERA_FAIL("layer '" << node.name << "': the model is already split into core graphs"); break;
            default: id = on_every_core([&](std::int64_t, graph::Graph& g) { return add_local(node, g); }); break;
        }
        m_result.local_node[static_cast<std::size_t>(node.id)] = id;
        m_result.model_node[static_cast<std::size_t>(id)] = node.id;
    }

    CoreGraphs finish() {
        for (graph::Graph& g : m_result.graphs) {
            g.set_output(local(m_model.output_node()));
            for (std::size_t i = 1; i < m_model.output_nodes().size(); ++i) g.add_output(local(m_model.output_nodes()[i]));
        }
        // Initializers and names the model set after building a node (a prior-probability bias, a
        // shared head's weights) carry over.
        for (graph::Graph& g : m_result.graphs) {
            for (std::size_t p = 0; p < std::min(g.parameters().size(), m_model.parameters().size()); ++p) {
                const graph::ParameterSpec& spec = m_model.parameters()[p];
                g.set_initializer(static_cast<int>(p), spec.initializer, spec.constant);
                if (g.parameters()[p].name != spec.name) g.set_parameter_name(static_cast<int>(p), spec.name);
            }
        }
        // Same parameters in the same order as the model: index p is one weight everywhere.
        for (const graph::Graph& g : m_result.graphs) {
            TESSERA_ASSERT(g.parameters().size() == m_model.parameters().size() && g.buffers().size() == m_model.buffers().size(),
                           "core graphs must hold the model's parameters");
        }
        return std::move(m_result);
    }

private:
    // Adds the same node to every core graph (fn(core, graph) returns its id) and checks the ids agree.
    template <class Add>
    int on_every_core(Add&& fn) {
        int id = -1;
        for (std::int64_t core = 0; core < m_cores; ++core) {
            const int made = fn(core, m_result.graphs[static_cast<std::size_t>(core)]);
            TESSERA_ASSERT(id < 0 || made == id, "core graphs diverged");
            id = made;
        }
        if (static_cast<int>(m_result.model_node.size()) <= id) m_result.model_node.resize(static_cast<std::size_t>(id) + 1, -1);
        return id;
    }

    int local(int model_id) const { return m_result.local_node[static_cast<std::size_t>(model_id)]; }

    // The Halo node that widens each core's tile of the layer's input to the rows its windows read, and
    // the exchange that fills it. Returns its local id.
    int add_halo(const Node& node) {
        const int producer = node.inputs[0];
        const std::size_t rank = m_model.node(producer).output_shape.size() - 2;
        HaloExchange exchange;
        exchange.producer_node = local(producer);
        exchange.layer = node.id;
        exchange.carries_gradient = m_model.node(producer).kind != OpKind::Input;
        exchange.transfers.resize(static_cast<std::size_t>(m_cores));
        const int halo = on_every_core([&](std::int64_t core, graph::Graph& g) {
            const NodeTile& tile = m_plan.tile(node.id, core);
            const auto& own = m_plan.tile(producer, core).owned;
            ops::HaloAttributes attributes;
            ops::Extents extent;
            for (std::size_t axis = 0; axis < rank; ++axis) {
                const Interval& needed = tile.needed[axis];
                TESSERA_ASSERT(needed.begin <= own[axis].begin || needed.end <= own[axis].begin, "a tile starts after the rows it needs");
                const std::int64_t begin = std::max(needed.begin, own[axis].begin);
                const std::int64_t end = std::min(needed.end, own[axis].end);
                attributes.interior_offset.push_back(std::max<std::int64_t>(0, begin - needed.begin));
                attributes.interior_extent.push_back(std::max<std::int64_t>(0, end - begin));
                extent.push_back(needed.size());
            }
            exchange.transfers[static_cast<std::size_t>(core)] = incoming_halo(m_model, m_plan, node.id, core);
            return g.halo(exchange.producer_node, extent, attributes, node.name + ".halo");
        });
        exchange.halo_node = halo;
        m_result.halos.push_back(std::move(exchange));
        return halo;
    }

    // A convolution or pooling over `source`, zero-padded only where the tile meets the volume's border.
    int add_windowed(const Node& node, int source) {
        return on_every_core([&](std::int64_t core, graph::Graph& g) {
            const NodeTile& tile = m_plan.tile(node.id, core);
            int made = -1;
            if (node.kind == OpKind::Conv) {
                ops::ConvAttributes attributes = node.conv;
                attributes.pad_begin = tile.pad_before;
                attributes.pad_end = tile.pad_after;
                made = g.conv(source, node.out_channels, attributes, node.name,
                              node.shares_parameters_of >= 0 ? local(node.shares_parameters_of) : -1);
            } else {
                ops::PoolAttributes attributes = node.pool;
                attributes.pad_begin = tile.pad_before;
                attributes.pad_end = tile.pad_after;
                made = g.pool(source, attributes, node.name);
            }
            const Shape expected = tile_shape(node.output_shape, tile.owned);
            TESSERA_ASSERT(g.node(made).output_shape == expected, "core " << core << " of '" << node.name << "' computes "
                                                                           << shape_to_string(g.node(made).output_shape)
                                                                           << ", its tile is " << shape_to_string(expected));
            return made;
        });
    }

    // A layer that needs no rows of other tiles: the model's node over the local inputs.
    int add_local(const Node& node, graph::Graph& g) const {
        switch (node.kind) {
            case OpKind::ConvTranspose: return g.conv_transpose(local(node.inputs[0]), node.out_channels, node.conv_transpose, node.name);
            case OpKind::Upsample: return g.upsample(local(node.inputs[0]), node.upsample_factor, node.name);
            case OpKind::Crop: {
                const Shape& shape = node.output_shape;
                return g.crop(local(node.inputs[0]), node.crop_offset, ops::Extents(shape.begin() + 2, shape.end()), node.name);
            }
            case OpKind::BatchNorm: {
                // A zero-initialised scale is an initializer detail the model graph already recorded.
                const bool zero_scale =
                    m_model.parameters()[static_cast<std::size_t>(node.parameters[0])].initializer == graph::Initializer::Zeros;
                return g.batch_norm(local(node.inputs[0]), node.batch_norm, node.name, zero_scale);
            }
            case OpKind::Relu: return g.relu(local(node.inputs[0]), node.name);
            case OpKind::Add: return g.add(local(node.inputs[0]), local(node.inputs[1]), node.name);
            case OpKind::Concat: {
                std::vector<int> inputs;
                for (int input : node.inputs) inputs.push_back(local(input));
                return g.concat(inputs, node.name);
            }
            case OpKind::GlobalAvgPool: return g.global_average_pool(local(node.inputs[0]), node.name);
            case OpKind::Dense: return g.dense(local(node.inputs[0]), node.out_channels, node.name);
            case OpKind::Input:
            case OpKind::Conv:
            case OpKind::Pool:
            case OpKind::Halo: break;
        }
        TESSERA_FAIL("layer '" << node.name << "' (" << graph::op_name(node.kind) << ") is not a local layer");
    }

    const graph::Graph& m_model;
    const TilingPlan& m_plan;
    std::int64_t m_cores = 1;
    CoreGraphs m_result;
};

}  // namespace

CoreGraphs build_core_graphs(const graph::Graph& model, const TilingPlan& plan) {
    CoreGraphBuilder builder(model, plan);
    for (const Node& node : model.nodes()) builder.add(node);
    return builder.finish();
}

}  // namespace tessera::partition
