// Planner: which partition layout to use for a core budget, and why.
//
// For a budget of n cores it enumerates every way to spend them — replicas r dividing the global batch
// and n, and every factorisation of n / r over the spatial axes (the seeds' input_partition_dims),
// evenly where the extents allow and aligned to the model's strides where they do not — then plans the
// tiles, drops layouts the partition rules forbid or that do not fit a core's memory, predicts the step
// time of the rest (step_simulation.hpp) and ranks them, each with a verdict that says what limits it:
// the overhead of the step's breakdown (StepBreakdown) that costs the most, with its share and cause.
//
//   PlannerRequest request{.global_input = {1, 1, 256, 256, 256}, .core_budget = 16};
//   auto plans = plan_layouts([](const Shape& in) { return make_unet(config, in); }, request, CostModel(v3));
//   plans[0].layout     // "input_partition_dims [1, 2, 2, 4, 1]"
//   plans[0].verdict    // "fits (1.2 of 16.0 GiB per core); compute units underused: 93% of the step is …;
//                       //  of the step: peak compute 6%, below peak 93%, …; fastest"
#pragma once

#include "cost/step_simulation.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tessera::cost {

using ModelFactory = std::function<graph::Graph(const Shape& replica_input)>;

struct PlannerRequest {
    Shape global_input;                   // [global batch, C, (D,) H, W]
    std::int64_t core_budget = 1;
    SimulationOptions simulation;
    bool allow_replicas = true;           // spend cores on data parallelism too
    bool allow_uneven = true;             // aligned uneven tiles when an extent does not divide
};

struct LayoutPlan {
    std::int64_t replicas = 1;
    std::vector<std::int64_t> pieces;     // per spatial axis
    partition::SpatialGrid grid;
    std::string layout;                   // "2 replicas × input_partition_dims [1, 2, 2, 1]"
    bool valid = false;                   // the partition rules allow it
    bool fits = false;                    // every core's memory fits the device
    std::string verdict;                  // the reason it is ranked where it is
    std::int64_t peak_memory = 0;         // the fullest core, bytes
    CoreMemory memory;                    // of that core
    double step_seconds = 0;
    double samples_per_second = 0;
    double fraction_of_peak = 0;          // achieved FLOP/s over the cores' peak
    double exposed_communication = 0;     // fraction of the step
};

// Valid layouts that fit come first, fastest first; then those that do not fit (smallest need first);
// then the invalid ones with the rule they break.
std::vector<LayoutPlan> plan_layouts(const ModelFactory& factory, const PlannerRequest& request, const CostModel& cost);

// One layout on its own: `replicas` replicas, each cut by `grid` (e.g. an experiment's tile_boundaries,
// which the planner's even or aligned grids may not include). The layout's name gives the cuts when they
// are not the planner's own for those pieces: "input_partition_dims [1, 2, 1, 1], tiles [[0, 120, 256], [0, 256]]".
LayoutPlan plan_layout(const ModelFactory& factory, const PlannerRequest& request, const CostModel& cost, std::int64_t replicas,
                       const partition::SpatialGrid& grid);

// Scaling curves: the best layout's step time as the core count changes.
//   Strong: the global batch stays the request's.
//   Weak:   each core keeps its share of the request's batch, so the batch at n cores is
//           batch × n / core_budget and the two curves cross at the request's own budget; core counts
//           where that batch is not whole are left out. (A batch of batch × n would ask every core for a
//           whole sample: never possible for a volume that needs several cores.)
enum class Scaling { Strong, Weak };

struct ScalingPoint {
    std::int64_t cores = 0;
    std::int64_t global_batch = 0;  // the batch planned at this core count
    LayoutPlan best;                // invalid when nothing fits
};

// The core counts a curve visits for a budget: 1, 2, 4, … up to max(8, 4 × budget).
std::vector<std::int64_t> scaling_budgets(std::int64_t core_budget);
// The global batch weak scaling plans at `cores`, or nullopt where it is not whole.
std::optional<std::int64_t> weak_scaling_batch(const PlannerRequest& request, std::int64_t cores);
// One point of a curve (callers that report progress walk the budgets themselves); nullopt where weak
// scaling has no whole batch.
std::optional<ScalingPoint> scaling_point(const ModelFactory& factory, const PlannerRequest& request, const CostModel& cost,
                                          std::int64_t cores, Scaling scaling);
std::vector<ScalingPoint> scaling_curve(const ModelFactory& factory, const PlannerRequest& request, const CostModel& cost,
                                        const std::vector<std::int64_t>& budgets, Scaling scaling);

}  // namespace tessera::cost
