// Core graphs: what each simulated core of a replica runs — the model rewritten for one tile.
//
// Every core's graph has the same nodes in the same order (so a driver can run node k on every core
// before node k+1), only the spatial extents differ. Each windowed op whose tiles need rows of a
// neighbour gets a Halo node before it on every core: a buffer of the rows the op reads (own tile plus
// halos), and the op's padding becomes the border padding of that core alone — exactly the padding the
// unsplit op applies there. Parameters and BN buffers come in the model's order, so index p is the
// same weight on every core and in the model.
//
//   TilingPlan plan = plan_tiling(unet, SpatialGrid::even(input_shape, {2, 2}));
//   CoreGraphs cores = build_core_graphs(unet, plan);
//   cores.graphs[3]                        // core 3's graph: input [N, C, H/2, W/2]
//   cores.local_node[model_node]           // the same layer's id in every core graph
//   for (const HaloExchange& h : cores.halos) ... h.transfers[core] ...  // who sends which rows
#pragma once

#include "graph/graph.hpp"
#include "ops/tile_buffer.hpp"
#include "partition/tiling.hpp"

#include <vector>

namespace tessera::partition {

// Rows one core copies from a neighbour's tile into its halo buffer (forward), and whose gradient it
// sends back to be added there (backward).
struct HaloTransfer {
    std::int64_t peer = -1;           // the core owning the rows
    ops::Box peer_origin;           // in the peer's tile of the producer
    ops::Box buffer_origin;         // in this core's halo buffer
    ops::Box extent;
    std::int64_t elements = 0;        // N · C · rows
};

struct HaloExchange {
    int halo_node = -1;      // in the core graphs
    int producer_node = -1;  // the node whose tiles are exchanged (core graphs)
    int layer = -1;          // the model's windowed op the halo feeds
    bool carries_gradient = true;  // false when the producer is the input data
    std::vector<std::vector<HaloTransfer>> transfers;  // [core] → incoming transfers, peers ascending
};

struct CoreGraphs {
    std::vector<graph::Graph> graphs;  // [core]
    std::vector<int> local_node;       // model node → core-graph node
    std::vector<int> model_node;       // core-graph node → model node (−1 for Halo nodes)
    std::vector<HaloExchange> halos;   // in core-graph order
    const HaloExchange* halo_for(int local_node) const;  // null unless it is a Halo node
};

CoreGraphs build_core_graphs(const graph::Graph& model, const TilingPlan& plan);

// The rows core `core` reads from its neighbours before windowed layer `node` of the model, peers
// ascending (corners included: a 2-axis split needs them). Halos never reach past the adjacent tiles
// (plan_tiling refuses that), so only the up to 3^rank − 1 cores around it are looked at.
std::vector<HaloTransfer> incoming_halo(const graph::Graph& model, const TilingPlan& plan, int node, std::int64_t core);

}  // namespace tessera::partition
