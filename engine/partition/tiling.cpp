#include "partition/tiling.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <string>

namespace tessera::partition {

namespace {

using graph::Node;
using graph::OpKind;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {  // b > 0, any sign of a
    return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

const char* axis_name(std::size_t axis, std::size_t rank) {
    static const char* names_3d[] = {"D", "H", "W"};
    static const char* names_2d[] = {"H", "W"};
    return rank == 3 ? names_3d[axis] : names_2d[axis];
}

// One windowed op along one axis: stride, reach and padding before.
struct Window {
    std::int64_t stride = 1, reach = 1, pad_before = 0;
};

std::vector<Window> windows_of(const Node& node, std::size_t rank) {
    std::vector<Window> windows(rank);
    for (std::size_t axis = 0; axis < rank; ++axis) {
        if (node.kind == OpKind::Conv) {
            windows[axis] = {node.conv.stride[axis], node.conv.dilation[axis] * (node.conv.kernel[axis] - 1) + 1,
                             node.conv.pad_begin[axis]};
        } else {
            windows[axis] = {node.pool.stride[axis], node.pool.kernel[axis], node.pool.pad_begin[axis]};
        }
    }
    return windows;
}

// The grid's boundaries cover each axis of the input from 0 to its extent, in increasing order.
void check_boundaries(const SpatialGrid& grid, const Shape& input_shape) {
    const std::size_t rank = input_shape.size() - 2;
    TESSERA_CHECK(rank >= 1 && grid.boundaries.size() == rank,
                  "the grid cuts " << grid.boundaries.size() << " axes but the model's input "
                                   << shape_to_string(input_shape) << " has " << rank << " spatial axes");
    for (std::size_t axis = 0; axis < rank; ++axis) {
        const auto& cuts = grid.boundaries[axis];
        TESSERA_CHECK(cuts.size() >= 2 && cuts.front() == 0 && cuts.back() == input_shape[axis + 2],
                      "tile boundaries along " << axis_name(axis, rank) << " must run from 0 to the extent "
                                               << input_shape[axis + 2] << ", got " << shape_to_string(cuts));
        for (std::size_t i = 1; i < cuts.size(); ++i) {
            TESSERA_CHECK(cuts[i] > cuts[i - 1], "tile boundaries along " << axis_name(axis, rank)
                                                                          << " must increase (every tile at least one row), got "
                                                                          << shape_to_string(cuts));
        }
    }
}

// Neighbours along an axis: the cores one piece below and above (−1 at the border).
struct GridNeighbours {
    const std::vector<std::vector<std::int64_t>>& grid_indices;  // [core]
    std::vector<std::int64_t> pieces;                            // per axis

    std::int64_t operator()(std::int64_t core, std::size_t axis, int direction) const {
        std::vector<std::int64_t> index = grid_indices[static_cast<std::size_t>(core)];
        index[axis] += direction;
        if (index[axis] < 0 || index[axis] >= pieces[axis]) return -1;
        std::int64_t id = 0;
        for (std::size_t a = 0; a < index.size(); ++a) id = id * pieces[a] + index[a];
        return id;
    }
};

// A local op whose output rows along each axis are its input rows times `factor` (1 for elementwise
// ops; kernel = stride for a transposed convolution or an upsampling: each input row makes its own).
void scale_tiles(const std::vector<NodeTile>& input_tiles, const std::vector<std::int64_t>& factor, std::vector<NodeTile>& tiles) {
    for (std::size_t core = 0; core < tiles.size(); ++core) {
        for (std::size_t axis = 0; axis < factor.size(); ++axis) {
            const Interval in = input_tiles[core].owned[axis];
            tiles[core].owned.push_back({in.begin * factor[axis], in.end * factor[axis]});
        }
    }
}

// Why a stride-s layer cannot start core `core`'s tile where it does, said where the user draws the
// boundary: at the model's input, with the multiple every boundary there must be for this network.
std::string misaligned_boundary_message(const Node& node, std::int64_t stride, std::size_t axis, std::size_t rank, std::int64_t core,
                                        std::int64_t layer_begin, std::int64_t layer_extent, std::int64_t input_begin,
                                        std::int64_t input_extent, std::int64_t alignment) {
    std::ostringstream message;
    const std::string name = axis_name(axis, rank);
    message << "layer '" << node.name << "' has stride " << stride << " along " << name << ", but core " << core
            << "'s tile starts at " << layer_begin << " of the " << layer_extent << " positions that layer reads along " << name
            << ", not a multiple of " << stride << ". ";
    if (input_begin % alignment != 0) {
        const std::int64_t lower = input_begin / alignment * alignment, upper = lower + alignment;
        message << "At the input that boundary is " << input_begin << " of " << input_extent << "; every boundary along " << name
                << " must be a multiple of " << alignment << " there, for every strided layer of this network to find its boundaries on its stride: move it to ";
        if (lower > 0) message << lower << (upper < input_extent ? " or " : "");
        if (upper < input_extent) message << upper;
        if (lower == 0 && upper >= input_extent) message << "another place (no multiple of " << alignment << " lies inside the input; use fewer cores along " << name << ")";
    } else {
        message << "The input's extent " << input_extent << " along " << name << " does not halve evenly down to this layer; "
                << "use an extent that is a multiple of " << alignment << " along " << name << ", or fewer cores along it";
    }
    return message.str();
}

// A convolution's or pooling's tile along one axis, for one core: the outputs whose window centres
// fall in its input rows, the input rows those windows read, and the halo each neighbour must send.
void window_tile_axis(const Node& node, const Window& w, std::size_t axis, std::size_t rank, std::int64_t core,
                      const std::vector<NodeTile>& input_tiles, std::int64_t extent, const GridNeighbours& neighbour,
                      const graph::Graph& graph, const std::vector<NodeTile>& model_input_tiles, NodeTile& tile) {
    const Interval in = input_tiles[static_cast<std::size_t>(core)].owned[axis];
    const std::int64_t out_extent = node.output_shape[axis + 2];
    if (w.stride > 1 && in.begin % w.stride != 0) {
        const std::int64_t input_begin = model_input_tiles[static_cast<std::size_t>(core)].owned[axis].begin;
        const std::int64_t input_extent = graph.node(graph.input_node()).output_shape[axis + 2];
        TESSERA_REJECT(misaligned_boundary_message(node, w.stride, axis, rank, core, in.begin, extent, input_begin, input_extent,
                                                   boundary_alignment(graph)[axis]));
    }
    // Output o's window centre is o·s + q; its owner holds that input row.
    const std::int64_t q = (w.reach - 1) / 2 - w.pad_before;
    auto first_output_at = [&](std::int64_t row) {
        if (row <= 0) return std::int64_t{0};
        if (row >= extent) return out_extent;
        return std::clamp<std::int64_t>(ceil_div(row - q, w.stride), 0, out_extent);
    };
    const Interval owned{first_output_at(in.begin), first_output_at(in.end)};
    TESSERA_CHECK(owned.size() > 0, "layer '" << node.name << "': core " << core << "'s tile along " << axis_name(axis, rank)
                                              << " is " << in.size() << " rows, too few to own any output of this stride-"
                                              << w.stride << " layer; use fewer cores along " << axis_name(axis, rank)
                                              << " or a larger input");
    const std::int64_t start = owned.begin * w.stride - w.pad_before;
    const std::int64_t stop = (owned.end - 1) * w.stride - w.pad_before + w.reach;
    const Interval needed{std::max<std::int64_t>(start, 0), std::min(stop, extent)};
    tile.owned.push_back(owned);
    tile.needed.push_back(needed);
    tile.pad_before.push_back(std::max<std::int64_t>(0, -start));
    tile.pad_after.push_back(std::max<std::int64_t>(0, stop - extent));
    tile.halo_before.push_back(std::max<std::int64_t>(0, in.begin - needed.begin));
    tile.halo_after.push_back(std::max<std::int64_t>(0, needed.end - in.end));
    // Halos come from the immediate neighbours only, as a device's halo exchange does.
    for (int direction : {-1, 1}) {
        const std::int64_t halo = direction < 0 ? tile.halo_before.back() : tile.halo_after.back();
        if (halo == 0) continue;
        const std::int64_t other = neighbour(core, axis, direction);
        TESSERA_ASSERT(other >= 0, "a halo at the border of '" << node.name << "'");
        const std::int64_t available = input_tiles[static_cast<std::size_t>(other)].owned[axis].size();
        TESSERA_CHECK(halo <= available, "layer '" << node.name << "' needs a halo of " << halo << " rows along "
                                                   << axis_name(axis, rank) << " for core " << core << ", but its "
                                                   << (direction < 0 ? "lower" : "upper") << " neighbour (core " << other
                                                   << ") holds only " << available << " rows there; use fewer cores along "
                                                   << axis_name(axis, rank) << " or larger tiles");
    }
}

}  // namespace

// ---- grid -----------------------------------------------------------------------------------

SpatialGrid SpatialGrid::even(const Shape& input, const std::vector<std::int64_t>& pieces_per_axis) {
    TESSERA_CHECK(input.size() >= 3 && pieces_per_axis.size() == input.size() - 2,
                  "a spatial grid needs one piece count per spatial axis of " << shape_to_string(input) << ", got "
                                                                              << shape_to_string(pieces_per_axis));
    SpatialGrid grid;
    for (std::size_t axis = 0; axis < pieces_per_axis.size(); ++axis) {
        const std::int64_t extent = input[axis + 2], pieces = pieces_per_axis[axis];
        TESSERA_CHECK(pieces >= 1 && pieces <= extent, "axis " << axis << " of extent " << extent << " cannot be cut into "
                                                               << pieces << " pieces");
        std::vector<std::int64_t> cuts;
        // Pieces differ by at most one row when the extent does not divide.
        for (std::int64_t piece = 0; piece <= pieces; ++piece) cuts.push_back(extent * piece / pieces);
        grid.boundaries.push_back(std::move(cuts));
    }
    return grid;
}

SpatialGrid SpatialGrid::from_partition_dims(const Shape& input, const std::vector<std::int64_t>& dims) {
    TESSERA_CHECK(input.size() >= 3 && dims.size() == input.size(),
                  "input_partition_dims " << shape_to_string(dims) << " needs one entry per axis of the "
                                          << input.size() - 1 << "-D input (batch, spatial axes, channels last), e.g. "
                                          << (input.size() == 5 ? "[1, 2, 2, 1, 1]" : "[1, 4, 1, 1]"));
    TESSERA_CHECK(dims.front() == 1 && dims.back() == 1,
                  "input_partition_dims " << shape_to_string(dims)
                                          << " splits the batch or channel axis; spatial partitioning splits only "
                                             "the spatial axes (split the batch with replicas), e.g. "
                                          << (input.size() == 5 ? "[1, 2, 2, 1, 1]" : "[1, 4, 1, 1]"));
    const std::vector<std::int64_t> pieces(dims.begin() + 1, dims.end() - 1);
    return even(input, pieces);
}

SpatialGrid SpatialGrid::aligned(const Shape& input, const std::vector<std::int64_t>& pieces_per_axis,
                                 const std::vector<std::int64_t>& alignment) {
    TESSERA_CHECK(input.size() >= 3 && pieces_per_axis.size() == input.size() - 2 && alignment.size() == pieces_per_axis.size(),
                  "an aligned grid needs one piece count and one alignment per spatial axis of " << shape_to_string(input));
    SpatialGrid grid;
    for (std::size_t axis = 0; axis < pieces_per_axis.size(); ++axis) {
        const std::int64_t extent = input[axis + 2], pieces = pieces_per_axis[axis], unit = alignment[axis];
        TESSERA_CHECK(unit >= 1, "alignment must be at least 1, got " << unit);
        const std::int64_t units = (extent + unit - 1) / unit;  // the last unit may be partial
        TESSERA_CHECK(pieces >= 1 && pieces <= units,
                      "axis " << axis << " of extent " << extent << " has " << units << " blocks of " << unit
                              << " rows, too few for " << pieces << " tiles; use at most " << units << " cores along it");
        std::vector<std::int64_t> cuts;
        for (std::int64_t piece = 0; piece <= pieces; ++piece) cuts.push_back(std::min(extent, units * piece / pieces * unit));
        grid.boundaries.push_back(std::move(cuts));
    }
    return grid;
}

std::vector<std::int64_t> boundary_alignment(const graph::Graph& graph) {
    const std::size_t rank = static_cast<std::size_t>(graph.spatial_rank());
    // scale[node][axis]: input rows per row of the node's output (2 after a stride-2 pool).
    std::vector<std::vector<std::int64_t>> scale(graph.nodes().size(), std::vector<std::int64_t>(rank, 1));
    std::vector<std::int64_t> alignment(rank, 1);
    for (const Node& node : graph.nodes()) {
        if (node.kind == OpKind::Input || node.output_shape.size() != rank + 2) continue;
        const auto& in = scale[static_cast<std::size_t>(node.inputs[0])];
        auto& out = scale[static_cast<std::size_t>(node.id)];
        for (std::size_t axis = 0; axis < rank; ++axis) {
            std::int64_t stride = 1;
            if (node.kind == OpKind::Conv) stride = node.conv.stride[axis];
            if (node.kind == OpKind::Pool) stride = node.pool.stride[axis];
            out[axis] = in[axis] * stride;
            if (node.kind == OpKind::ConvTranspose) out[axis] = std::max<std::int64_t>(1, in[axis] / node.conv_transpose.stride[axis]);
            if (node.kind == OpKind::Upsample) out[axis] = std::max<std::int64_t>(1, in[axis] / node.upsample_factor[axis]);
            if (stride > 1) alignment[axis] = std::lcm(alignment[axis], in[axis] * stride);
        }
    }
    return alignment;
}

std::int64_t SpatialGrid::num_cores() const {
    std::int64_t cores = 1;
    for (const auto& cuts : boundaries) cores *= static_cast<std::int64_t>(cuts.size()) - 1;
    return cores;
}

std::vector<std::int64_t> SpatialGrid::pieces_per_axis() const {
    std::vector<std::int64_t> pieces;
    for (const auto& cuts : boundaries) pieces.push_back(static_cast<std::int64_t>(cuts.size()) - 1);
    return pieces;
}

std::vector<std::int64_t> SpatialGrid::grid_index(std::int64_t core) const {
    const auto pieces = pieces_per_axis();
    std::vector<std::int64_t> index(pieces.size());
    for (std::size_t axis = pieces.size(); axis-- > 0;) {
        index[axis] = core % pieces[axis];
        core /= pieces[axis];
    }
    return index;
}

// ---- plan -----------------------------------------------------------------------------------

TilingPlan::TilingPlan(const graph::Graph& graph, SpatialGrid grid) : m_graph(&graph), m_grid(std::move(grid)) {
    const Shape& input_shape = graph.node(graph.input_node()).output_shape;
    check_boundaries(m_grid, input_shape);
    const std::size_t rank = input_shape.size() - 2;
    const std::int64_t cores = m_grid.num_cores();
    const auto& nodes = graph.nodes();
    m_tiles.assign(nodes.size(), std::vector<NodeTile>(static_cast<std::size_t>(cores)));
    // Grid positions, once: a planner builds thousands of plans.
    for (std::int64_t core = 0; core < cores; ++core) m_grid_indices.push_back(m_grid.grid_index(core));
    const GridNeighbours neighbour{m_grid_indices, m_grid.pieces_per_axis()};

    for (const Node& node : nodes) {
        auto& tiles = m_tiles[static_cast<std::size_t>(node.id)];
        if (node.kind == OpKind::Input) {
            for (std::int64_t core = 0; core < cores; ++core) {
                const auto& index = m_grid_indices[static_cast<std::size_t>(core)];
                for (std::size_t axis = 0; axis < rank; ++axis) {
                    const auto& cuts = m_grid.boundaries[axis];
                    tiles[static_cast<std::size_t>(core)].owned.push_back(
                        {cuts[static_cast<std::size_t>(index[axis])], cuts[static_cast<std::size_t>(index[axis]) + 1]});
                }
            }
            continue;
        }
        const auto& input_tiles = m_tiles[static_cast<std::size_t>(node.inputs[0])];
        if (input_tiles[0].replicated || node.kind == OpKind::GlobalAvgPool || node.kind == OpKind::Dense) {
            TESSERA_CHECK(node.kind == OpKind::GlobalAvgPool || node.kind == OpKind::Dense || node.output_shape.size() == 2,
                          "layer '" << node.name << "' (" << graph::op_name(node.kind)
                                    << ") works on spatial tiles but follows a global pooling");
            for (NodeTile& tile : tiles) tile.replicated = true;
            continue;
        }
        switch (node.kind) {
            case OpKind::BatchNorm:
            case OpKind::Relu: scale_tiles(input_tiles, std::vector<std::int64_t>(rank, 1), tiles); break;
            case OpKind::Add:
            case OpKind::Concat:
                for (std::int64_t core = 0; core < cores; ++core) {
                    for (int other : node.inputs) {
                        TESSERA_ASSERT(m_tiles[static_cast<std::size_t>(other)][static_cast<std::size_t>(core)].owned ==
                                           input_tiles[static_cast<std::size_t>(core)].owned,
                                       "inputs of '" << node.name << "' are tiled differently");
                    }
                }
                scale_tiles(input_tiles, std::vector<std::int64_t>(rank, 1), tiles);
                break;
            case OpKind::ConvTranspose: {
                const auto& a = node.conv_transpose;
                if (cores == 1) {  // one core holds the whole output, whatever the kernel
                    for (std::size_t axis = 0; axis < rank; ++axis) tiles[0].owned.push_back({0, node.output_shape[axis + 2]});
                    break;
                }
                TESSERA_CHECK(a.kernel == a.stride, "layer '" << node.name << "': a transposed convolution is split "
                                                              << "across cores only with kernel = stride (each input "
                                                              << "row then makes its own output rows); got kernel "
                                                              << shape_to_string(a.kernel) << ", stride "
                                                              << shape_to_string(a.stride));
                scale_tiles(input_tiles, a.stride, tiles);
                break;
            }
            case OpKind::Upsample: scale_tiles(input_tiles, node.upsample_factor, tiles); break;
            case OpKind::Crop:
                // The box a core keeps lies on other cores' tiles (an unpadded U-Net's skip shifts by up to
                // ~90 rows): moving it is a reshard, not a halo, and the mesh has none.
                TESSERA_CHECK(cores == 1, "layer '" << node.name << "' crops its input (an unpadded U-Net's skip "
                                                    << "connection); such a model cannot be split across cores. "
                                                    << "Use \"padding\": \"same\" to split it spatially, or split "
                                                    << "only the batch (replicas)");
                for (std::size_t axis = 0; axis < rank; ++axis) tiles[0].owned.push_back({0, node.output_shape[axis + 2]});
                break;
            case OpKind::Conv:
            case OpKind::Pool: {
                const std::vector<Window> windows = windows_of(node, rank);
                const Shape& input_node_shape = graph.node(node.inputs[0]).output_shape;
                for (std::int64_t core = 0; core < cores; ++core) {
                    for (std::size_t axis = 0; axis < rank; ++axis) {
                        window_tile_axis(node, windows[axis], axis, rank, core, input_tiles, input_node_shape[axis + 2],
                                         neighbour, graph, m_tiles[static_cast<std::size_t>(graph.input_node())],
                                         tiles[static_cast<std::size_t>(core)]);
                    }
                }
                break;
            }
            case OpKind::Halo:
                TESSERA_FAIL("layer '" << node.name << "': a graph with halo nodes is already split into tiles");
            case OpKind::Input:
            case OpKind::GlobalAvgPool:
            case OpKind::Dense: break;
        }
    }
}

const std::vector<std::int64_t>& TilingPlan::grid_index(std::int64_t core) const {
    TESSERA_CHECK(core >= 0 && core < num_cores(), "no core " << core << " in a plan of " << num_cores());
    return m_grid_indices[static_cast<std::size_t>(core)];
}

const NodeTile& TilingPlan::tile(int node, std::int64_t core) const {
    TESSERA_CHECK(node >= 0 && node < static_cast<int>(m_tiles.size()) && core >= 0 && core < num_cores(),
                  "no tile for node " << node << " on core " << core);
    return m_tiles[static_cast<std::size_t>(node)][static_cast<std::size_t>(core)];
}

std::int64_t TilingPlan::halo_elements(int node) const {
    const graph::Node& n = m_graph->node(node);
    if (n.kind != OpKind::Conv && n.kind != OpKind::Pool) return 0;
    const Shape& input_shape = m_graph->node(n.inputs[0]).output_shape;
    const auto& input_tiles = m_tiles[static_cast<std::size_t>(n.inputs[0])];
    std::int64_t total = 0;
    for (std::int64_t core = 0; core < num_cores(); ++core) {
        const NodeTile& t = tile(node, core);
        if (t.replicated) return 0;
        std::int64_t needed = 1, local = 1;
        for (std::size_t axis = 0; axis < t.needed.size(); ++axis) {
            const Interval own = input_tiles[static_cast<std::size_t>(core)].owned[axis];
            needed *= t.needed[axis].size();
            local *= std::max<std::int64_t>(0, std::min(own.end, t.needed[axis].end) - std::max(own.begin, t.needed[axis].begin));
        }
        total += (needed - local) * input_shape[0] * input_shape[1];
    }
    return total;
}

std::int64_t TilingPlan::total_halo_elements() const {
    std::int64_t total = 0;
    for (const graph::Node& node : m_graph->nodes()) total += halo_elements(node.id);
    return total;
}

std::int64_t TilingPlan::tile_elements(int node, std::int64_t core) const {
    const graph::Node& n = m_graph->node(node);
    const NodeTile& t = tile(node, core);
    if (t.replicated) return num_elements_of(n.output_shape);
    std::int64_t elements = n.output_shape[0] * n.output_shape[1];
    for (const Interval& interval : t.owned) elements *= interval.size();
    return elements;
}

TilingPlan plan_tiling(const graph::Graph& graph, const SpatialGrid& grid) { return TilingPlan(graph, grid); }

}  // namespace tessera::partition
