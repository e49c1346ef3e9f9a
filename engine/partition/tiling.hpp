// Tiling: how a spatial split of a replica's input propagates through every layer of a model.
//
// The input's spatial axes are cut into pieces (even or at explicit boundaries); core c holds one piece
// per axis (row-major over the grid, last axis fastest, as partition_spec.hpp numbers cores). For
// every node the plan says which output rows each core owns and, for windowed ops (convolutions,
// pools), which input rows it needs: its own plus a halo from each neighbour, or zero padding where
// the tile touches the volume's border — exactly as the unsplit op would pad. A layout that cannot
// work is rejected here, before anything runs, naming the layer.
//
//   SpatialGrid grid = SpatialGrid::even({4, 1, 256, 256}, {2, 2});    // [N, C, H, W] → 2 × 2 cores
//   TilingPlan plan = plan_tiling(unet, grid);
//   const NodeTile& t = plan.tile(node_id, /*core*/ 3);                 // owned rows, halo widths
//   plan.halo_elements(node_id)                                         // exchanged per step
//
// Semantics (per spatial axis; s stride, p padding before, r = dilation·(kernel−1)+1 reach):
//   output o reads input [o·s − p, o·s − p + r); its owner is the core holding the window's centre.
//   halo_before = rows read below the core's own input rows, halo_after above; rows below 0 or past
//   the extent are the unsplit op's padding (only border cores have them).
//   A strided layer needs every core boundary at its input to be a multiple of its stride, so tiles
//   stay aligned from level to level; transposed convolutions need kernel = stride (then local);
//   global pooling reduces over all cores and leaves the rest of the model replicated.
#pragma once

#include "graph/graph.hpp"

#include <cstdint>
#include <vector>

namespace tessera::partition {

struct Interval {
    std::int64_t begin = 0;  // first index
    std::int64_t end = 0;    // one past the last
    std::int64_t size() const { return end - begin; }
    bool operator==(const Interval&) const = default;
};

// The cut of the input's spatial axes (outermost first: D, H, W or H, W).
struct SpatialGrid {
    std::vector<std::vector<std::int64_t>> boundaries;  // per axis: 0 = b_0 < b_1 < … < b_k = extent

    static SpatialGrid even(const Shape& input, const std::vector<std::int64_t>& pieces_per_axis);
    // As even as possible with every boundary a multiple of alignment[axis] (see boundary_alignment):
    // extents that do not divide give tiles of unequal size, e.g. 60 rows in 8 pieces aligned to 4 →
    // 8 8 8 8 8 8 8 4. Fails when an axis has fewer aligned units than pieces.
    // From a features tensor's input_partition_dims in the pipeline's channels-last order ([1, 4, 1, 1]
    // over NHWC, [1, 2, 2, 4, 1] over NDHWC) for a model input [N, C, (D,) H, W]: even pieces per axis.
    static SpatialGrid from_partition_dims(const Shape& input, const std::vector<std::int64_t>& channels_last_dims);
    static SpatialGrid aligned(const Shape& input, const std::vector<std::int64_t>& pieces_per_axis,
                               const std::vector<std::int64_t>& alignment);
    std::int64_t num_cores() const;
    std::vector<std::int64_t> pieces_per_axis() const;
    std::vector<std::int64_t> grid_index(std::int64_t core) const;  // row-major, last axis fastest
};

struct NodeTile {
    std::vector<Interval> owned;             // per spatial axis: output rows this core computes
    std::vector<Interval> needed;            // input rows it reads (owned input plus halos, clipped)
    std::vector<std::int64_t> halo_before;   // rows from the lower neighbour (0 for local ops)
    std::vector<std::int64_t> halo_after;    // rows from the upper neighbour
    std::vector<std::int64_t> pad_before;    // zero padding at the volume's border
    std::vector<std::int64_t> pad_after;
    bool replicated = false;                 // after global pooling: every core holds the whole value
};

class TilingPlan {
public:
    TilingPlan(const graph::Graph& graph, SpatialGrid grid);

    const SpatialGrid& grid() const { return m_grid; }
    std::int64_t num_cores() const { return m_grid.num_cores(); }
    // Core `core`'s piece index per axis (SpatialGrid::grid_index, computed once for the plan).
    const std::vector<std::int64_t>& grid_index(std::int64_t core) const;
    const NodeTile& tile(int node, std::int64_t core) const;
    // Elements (all channels, the whole batch) one step's forward halo exchange moves into `node`'s input.
    std::int64_t halo_elements(int node) const;
    std::int64_t total_halo_elements() const;
    // Elements of the node's output a core holds (its owned tile, all channels and batch).
    std::int64_t tile_elements(int node, std::int64_t core) const;

private:
    const graph::Graph* m_graph;
    SpatialGrid m_grid;
    std::vector<std::vector<NodeTile>> m_tiles;  // [node][core]
    std::vector<std::vector<std::int64_t>> m_grid_indices;  // [core]
};

TilingPlan plan_tiling(const graph::Graph& graph, const SpatialGrid& grid);

// Per spatial axis, what every tile boundary at the model's input must be a multiple of so that each
// strided layer finds its boundaries on its stride (a U-Net of depth 4: 8).
std::vector<std::int64_t> boundary_alignment(const graph::Graph& graph);

}  // namespace tessera::partition
