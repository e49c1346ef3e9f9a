#include "cost/planner.hpp"

#include "core/error.hpp"
#include "partition/partition_spec.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <cstdio>
#include <sstream>

namespace tessera::cost {

namespace {

std::string gib(std::int64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / static_cast<double>(1LL << 30));
    return text;
}

std::string percent(double fraction) {
    char text[32];
    std::snprintf(text, sizeof text, fraction < 0.01 ? "%.1f%%" : "%.0f%%", 100 * fraction);
    return text;
}

std::string describe_layout(std::int64_t replicas, const std::vector<std::int64_t>& pieces) {
    std::ostringstream out;
    if (replicas > 1) out << replicas << " replicas × ";
    out << "input_partition_dims [1";
    for (std::int64_t p : pieces) out << ", " << p;
    out << ", 1]";
    return out.str();
}

// The grid for `pieces`: even when every extent divides into whole aligned tiles, else aligned.
partition::SpatialGrid grid_for(const graph::Graph& model, const Shape& input, const std::vector<std::int64_t>& pieces,
                                bool allow_uneven) {
    const auto alignment = partition::boundary_alignment(model);
    bool even = true;
    for (std::size_t axis = 0; axis < pieces.size(); ++axis) {
        const std::int64_t extent = input[axis + 2];
        even = even && extent % pieces[axis] == 0 && (extent / pieces[axis]) % alignment[axis] == 0;
    }
    if (even || !allow_uneven) return partition::SpatialGrid::even(input, pieces);
    return partition::SpatialGrid::aligned(input, pieces, alignment);
}

// The cores whose memory can be the largest: along each axis the largest piece nearest the middle
// (the most halo neighbours and the biggest tile) and the first piece — every combination, at most
// 2^rank cores instead of all of them.
std::vector<std::int64_t> fullest_core_candidates(const partition::SpatialGrid& grid) {
    const auto pieces = grid.pieces_per_axis();
    std::vector<std::vector<std::int64_t>> choices;
    for (std::size_t axis = 0; axis < pieces.size(); ++axis) {
        const auto& cuts = grid.boundaries[axis];
        std::int64_t best = 0, best_size = -1, best_distance = 0;
        for (std::int64_t i = 0; i < pieces[axis]; ++i) {
            const std::int64_t size = cuts[static_cast<std::size_t>(i) + 1] - cuts[static_cast<std::size_t>(i)];
            const std::int64_t distance = std::abs(2 * i + 1 - pieces[axis]);
            if (size > best_size || (size == best_size && distance < best_distance)) {
                best = i;
                best_size = size;
                best_distance = distance;
            }
        }
        choices.push_back(best == 0 ? std::vector<std::int64_t>{0} : std::vector<std::int64_t>{0, best});
    }
    std::vector<std::int64_t> cores{0};
    for (std::size_t axis = 0; axis < choices.size(); ++axis) {
        std::vector<std::int64_t> next;
        for (std::int64_t prefix : cores) {
            for (std::int64_t index : choices[axis]) next.push_back(prefix * pieces[axis] + index);
        }
        cores = std::move(next);
    }
    return cores;
}

// The verdict of a layout that fits: its memory, then the overhead that costs its step the most as the
// model computes it (StepBreakdown), with that overhead's share of the step and what causes it, then
// every overhead's share. Below 10% of the step the largest one does not dominate: "compute-bound".
void explain(LayoutPlan& plan, const graph::Graph& model, const StepPrediction& step, const Device& device) {
    std::ostringstream out;
    out << "fits (" << gib(plan.peak_memory) << " of " << gib(device.memory_per_core) << " GiB per core)";
    const StepBreakdown& parts = step.breakdown;
    const double step_seconds = step.step_seconds > 0 ? step.step_seconds : 1;
    enum class Overhead { Communication, Efficiency, PerOp, Imbalance };
    const std::pair<Overhead, double> overheads[] = {{Overhead::Communication, parts.exposed_communication},
                                                     {Overhead::Efficiency, parts.efficiency_loss},
                                                     {Overhead::PerOp, parts.op_overhead},
                                                     {Overhead::Imbalance, parts.imbalance}};
    const auto& [largest, largest_seconds] = *std::max_element(
        std::begin(overheads), std::end(overheads), [](const auto& a, const auto& b) { return a.second < b.second; });
    const std::string share = percent(largest_seconds / step_seconds);
    if (largest_seconds / step_seconds < 0.10) {
        out << "; compute-bound: " << percent(parts.peak_compute / step_seconds) << " of the step at the device's peak";
    } else if (largest == Overhead::Communication) {
        out << "; comm-bound: " << share << " of the step waits for exchanges";
        if (step.worst_halo_layer >= 0) {
            out << " (halos are " << percent(step.worst_halo_fraction) << " of layer '"
                << model.node(step.worst_halo_layer).name << "''s input)";
        }
    } else if (largest == Overhead::Efficiency) {
        out << "; compute units underused: " << share << " of the step is compute below the device's peak";
        if (step.worst_utilisation_layer >= 0 && step.worst_utilisation < 0.5) {
            const graph::Node& layer = model.node(step.worst_utilisation_layer);
            out << " (layer '" << layer.name << "', " << model.node(layer.inputs[0]).output_shape[1] << " → "
                << layer.output_shape[1] << " channels, fills " << percent(step.worst_utilisation) << " of the "
                << device.efficiency.channel_tile << "×" << device.efficiency.channel_tile << " matrix unit)";
        }
    } else if (largest == Overhead::PerOp) {
        out << "; per-op overhead: " << share << " of the step is the device's fixed " << device.kernel_overhead * 1e6
            << " µs per op (tiles too small to hide it)";
    } else {
        out << "; uneven work: the busiest core computes " << share << " of the step longer than the average core";
    }
    out << "; of the step: peak compute " << percent(parts.peak_compute / step_seconds) << ", below peak "
        << percent(parts.efficiency_loss / step_seconds) << ", per-op " << percent(parts.op_overhead / step_seconds)
        << ", imbalance " << percent(parts.imbalance / step_seconds) << ", exposed communication "
        << percent(parts.exposed_communication / step_seconds);
    plan.verdict = out.str();
}

// Plans one layout: its grid (`grid`, or the planner's own for plan.pieces), memory, step time, verdict.
void evaluate_layout(LayoutPlan& plan, const graph::Graph& model, const Shape& replica_input, const partition::SpatialGrid* grid,
                     const PlannerRequest& request, const CostModel& cost) {
    const std::int64_t batch = request.global_input[0];
    try {
        plan.grid = grid ? *grid : grid_for(model, replica_input, plan.pieces, request.allow_uneven);
        const partition::TilingPlan tiling(model, plan.grid);
        plan.valid = true;
        // Memory first: a layout that cannot fit is not simulated.
        for (std::int64_t core : fullest_core_candidates(plan.grid)) {
            const CoreMemory memory =
                estimate_core_memory(model, tiling, core, request.simulation.precision, request.simulation.optimizer_slots);
            if (memory.total() > plan.peak_memory) {
                plan.peak_memory = memory.total();
                plan.memory = memory;
            }
        }
        plan.fits = plan.peak_memory <= cost.device().memory_per_core;
        if (!plan.fits) {
            plan.verdict = "does not fit: a core needs " + gib(plan.peak_memory) + " GiB of " +
                           gib(cost.device().memory_per_core) + " (saved activations " + gib(plan.memory.saved_activations) +
                           ", halo buffers " + gib(plan.memory.halo_buffers) + ", working set " +
                           gib(plan.memory.working_set) + ")";
            return;
        }
        SimulationOptions options = request.simulation;
        options.record_timeline = false;
        const StepPrediction step = predict_step(model, tiling, plan.replicas, cost, options);
        plan.step_seconds = step.step_seconds;
        plan.samples_per_second = step.step_seconds > 0 ? static_cast<double>(batch) / step.step_seconds : 0;
        plan.fraction_of_peak = step.achieved_fraction_of_peak;
        plan.exposed_communication = step.step_seconds > 0 ? step.breakdown.exposed_communication / step.step_seconds : 0;
        explain(plan, model, step, cost.device());
    } catch (const Error& error) {
        plan.valid = false;
        plan.verdict = std::string("not possible: ") + error.what();
    }
}

}  // namespace

std::vector<LayoutPlan> plan_layouts(const ModelFactory& factory, const PlannerRequest& request, const CostModel& cost) {
    const Shape& input = request.global_input;
    TESSERA_CHECK(input.size() == 4 || input.size() == 5,
                  "the planner needs a [N, C, H, W] or [N, C, D, H, W] input, got " << shape_to_string(input));
    TESSERA_CHECK(request.core_budget >= 1, "the core budget must be at least 1, got " << request.core_budget);
    const int rank = static_cast<int>(input.size());  // channels-last rank equals the NCHW rank
    const std::int64_t batch = input[0];
    // Every candidate first (models built once per replica count), then each evaluated on its own.
    struct Candidate {
        const graph::Graph* model = nullptr;
        Shape replica_input;
        LayoutPlan plan;
    };
    std::vector<std::unique_ptr<graph::Graph>> models;
    std::vector<Candidate> candidates;
    for (std::int64_t replicas = 1; replicas <= request.core_budget; ++replicas) {
        if (request.core_budget % replicas != 0 || batch % replicas != 0) continue;
        if (replicas > 1 && !request.allow_replicas) break;
        const std::int64_t cores = request.core_budget / replicas;
        Shape replica_input = input;
        replica_input[0] = batch / replicas;
        models.push_back(std::make_unique<graph::Graph>(factory(replica_input)));
        for (const auto& dims : partition::factorizations(cores, partition::spatial_axes(rank), rank)) {
            Candidate candidate;
            candidate.model = models.back().get();
            candidate.replica_input = replica_input;
            candidate.plan.replicas = replicas;
            candidate.plan.pieces.assign(dims.begin() + 1, dims.end() - 1);
            candidate.plan.layout = describe_layout(replicas, candidate.plan.pieces);
            candidates.push_back(std::move(candidate));
        }
    }
    auto evaluate = [&](Candidate& candidate) {
        evaluate_layout(candidate.plan, *candidate.model, candidate.replica_input, nullptr, request, cost);
    };
    // Candidates are independent: spread them over the host's threads (each writes only its own).
    const std::size_t threads = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 8);
    std::atomic<std::size_t> next{0};
    auto worker = [&] {
        for (std::size_t i = next.fetch_add(1); i < candidates.size(); i = next.fetch_add(1)) evaluate(candidates[i]);
    };
    std::vector<std::thread> pool;
    for (std::size_t t = 1; t < std::min(threads, candidates.size()); ++t) pool.emplace_back(worker);
    worker();
    for (std::thread& thread : pool) thread.join();

    std::vector<LayoutPlan> plans;
    for (Candidate& candidate : candidates) plans.push_back(std::move(candidate.plan));
    std::stable_sort(plans.begin(), plans.end(), [](const LayoutPlan& a, const LayoutPlan& b) {
        const int rank_a = a.valid ? (a.fits ? 0 : 1) : 2, rank_b = b.valid ? (b.fits ? 0 : 1) : 2;
        if (rank_a != rank_b) return rank_a < rank_b;
        if (rank_a == 0) return a.step_seconds < b.step_seconds;
        if (rank_a == 1) return a.peak_memory < b.peak_memory;
        return false;
    });
    if (!plans.empty() && plans.front().valid && plans.front().fits) plans.front().verdict += "; fastest";
    return plans;
}

LayoutPlan plan_layout(const ModelFactory& factory, const PlannerRequest& request, const CostModel& cost, std::int64_t replicas,
                       const partition::SpatialGrid& grid) {
    const Shape& input = request.global_input;
    TESSERA_CHECK(input.size() == 4 || input.size() == 5,
                  "the planner needs a [N, C, H, W] or [N, C, D, H, W] input, got " << shape_to_string(input));
    TESSERA_CHECK(replicas >= 1 && input[0] % replicas == 0,
                  "expected a replica count that divides the global batch " << input[0] << ", got " << replicas);
    TESSERA_CHECK(grid.boundaries.size() + 2 == input.size(),
                  "expected a grid with one list of cuts per spatial axis of " << shape_to_string(input) << ", got "
                                                                               << grid.boundaries.size() << " lists");
    Shape replica_input = input;
    replica_input[0] = input[0] / replicas;
    const graph::Graph model = factory(replica_input);
    LayoutPlan plan;
    plan.replicas = replicas;
    plan.pieces = grid.pieces_per_axis();
    plan.layout = describe_layout(replicas, plan.pieces);
    // Cuts other than the planner's own for these pieces are part of the layout's name.
    try {
        if (grid.boundaries != grid_for(model, replica_input, plan.pieces, request.allow_uneven).boundaries) {
            plan.layout += ", tiles [";
            for (std::size_t axis = 0; axis < grid.boundaries.size(); ++axis) {
                plan.layout += axis ? ", [" : "[";
                for (std::size_t i = 0; i < grid.boundaries[axis].size(); ++i) {
                    plan.layout.append(i ? ", " : "").append(std::to_string(grid.boundaries[axis][i]));
                }
                plan.layout += "]";
            }
            plan.layout += "]";
        }
    } catch (const Error&) {
        // The planner has no grid of its own for these pieces; the name stays the plain layout.
    }
    evaluate_layout(plan, model, replica_input, &grid, request, cost);
    return plan;
}

std::vector<std::int64_t> scaling_budgets(std::int64_t core_budget) {
    std::vector<std::int64_t> budgets;
    for (std::int64_t cores = 1; cores <= std::max<std::int64_t>(core_budget * 4, 8); cores *= 2) budgets.push_back(cores);
    return budgets;
}

std::optional<std::int64_t> weak_scaling_batch(const PlannerRequest& request, std::int64_t cores) {
    const std::int64_t batch = request.global_input[0];
    if ((batch * cores) % request.core_budget != 0) return std::nullopt;
    return batch * cores / request.core_budget;
}

std::optional<ScalingPoint> scaling_point(const ModelFactory& factory, const PlannerRequest& request, const CostModel& cost,
                                          std::int64_t cores, Scaling scaling) {
    PlannerRequest at = request;
    at.core_budget = cores;
    if (scaling == Scaling::Weak) {
        const std::optional<std::int64_t> batch = weak_scaling_batch(request, cores);
        if (!batch) return std::nullopt;
        at.global_input[0] = *batch;
    }
    const std::vector<LayoutPlan> plans = plan_layouts(factory, at, cost);
    ScalingPoint point;
    point.cores = cores;
    point.global_batch = at.global_input[0];
    if (!plans.empty()) point.best = plans.front();
    return point;
}

std::vector<ScalingPoint> scaling_curve(const ModelFactory& factory, const PlannerRequest& request, const CostModel& cost,
                                        const std::vector<std::int64_t>& budgets, Scaling scaling) {
    std::vector<ScalingPoint> curve;
    for (std::int64_t cores : budgets) {
        if (auto point = scaling_point(factory, request, cost, cores, scaling)) curve.push_back(std::move(*point));
    }
    return curve;
}

}  // namespace tessera::cost
