#include "cost/step_simulation.hpp"

#include "core/error.hpp"
#include "partition/core_graph.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <initializer_list>
#include <span>

namespace tessera::cost {

namespace {

using graph::Node;
using graph::OpKind;

using partition::HaloTransfer;

// Per node: whether any core of the plan needs a halo for it (computed once per plan).
std::vector<bool> layers_with_halos(const graph::Graph& model, const partition::TilingPlan& plan) {
    std::vector<bool> result(model.nodes().size(), false);
    for (const Node& node : model.nodes()) {
        if (node.kind != OpKind::Conv && node.kind != OpKind::Pool) continue;
        for (std::int64_t core = 0; core < plan.num_cores() && !result[static_cast<std::size_t>(node.id)]; ++core) {
            const partition::NodeTile& tile = plan.tile(node.id, core);
            for (std::size_t axis = 0; axis < tile.halo_before.size(); ++axis) {
                if (tile.halo_before[axis] > 0 || tile.halo_after[axis] > 0) result[static_cast<std::size_t>(node.id)] = true;
            }
        }
    }
    return result;
}

// Links between two cores of a replica: 0 on one chip, else the distance between their grid cells.
int hops_between(const partition::TilingPlan& plan, const Device& device, std::int64_t a, std::int64_t b) {
    if (device.cores_per_chip > 1 && a / device.cores_per_chip == b / device.cores_per_chip) return 0;
    const auto& ia = plan.grid_index(a);
    const auto& ib = plan.grid_index(b);
    int hops = 0;
    for (std::size_t axis = 0; axis < ia.size(); ++axis) hops += static_cast<int>(std::abs(ia[axis] - ib[axis]));
    return std::max(hops, 1);
}

// Every halo layer's incoming transfers, per core, computed once per plan.
std::vector<std::vector<std::vector<HaloTransfer>>> all_incoming(const graph::Graph& model, const partition::TilingPlan& plan,
                                                                 const std::vector<bool>& has_halo) {
    std::vector<std::vector<std::vector<HaloTransfer>>> result(model.nodes().size());
    for (const Node& node : model.nodes()) {
        if (!has_halo[static_cast<std::size_t>(node.id)]) continue;
        auto& per_core = result[static_cast<std::size_t>(node.id)];
        for (std::int64_t core = 0; core < plan.num_cores(); ++core) per_core.push_back(partition::incoming_halo(model, plan, node.id, core));
    }
    return result;
}

bool named_by_any(const std::string& name, const std::vector<std::string>& prefixes) {
    return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& prefix) { return name.rfind(prefix, 0) == 0; });
}

// Per node: whether it trains (SimulationOptions::untrained) and whether it is a frozen batch norm.
struct Training {
    std::vector<bool> untrained, frozen_batch_norm;
};
Training training_of(const graph::Graph& model, const SimulationOptions& options) {
    Training training{std::vector<bool>(model.nodes().size(), false), std::vector<bool>(model.nodes().size(), false)};
    for (const Node& node : model.nodes()) {
        const auto id = static_cast<std::size_t>(node.id);
        training.untrained[id] = named_by_any(node.name, options.untrained);
        training.frozen_batch_norm[id] = node.kind == OpKind::BatchNorm && named_by_any(node.name, options.frozen_batch_norm);
    }
    return training;
}

// Every core's cost of every layer. Cores whose tiles of a layer have the same extents cost the same, so
// each distinct tile is priced once (an even grid has a handful per layer however many cores it has).
std::vector<std::vector<LayerCost>> costs_per_core(const graph::Graph& model, const partition::TilingPlan& plan,
                                                   const CostModel& cost, const SimulationOptions& options) {
    const Training training = training_of(model, options);
    const std::size_t count = model.nodes().size();
    std::vector<std::vector<LayerCost>> result(static_cast<std::size_t>(plan.num_cores()), std::vector<LayerCost>(count));
    std::vector<std::int64_t> key;
    for (const Node& node : model.nodes()) {
        const auto id = static_cast<std::size_t>(node.id);
        const Execution execution{.precision = options.precision, .tf32 = options.tf32, .fusion = options.fusion,
                                  .frozen_batch_norm = training.frozen_batch_norm[id]};
        std::map<std::vector<std::int64_t>, LayerCost> priced;
        for (std::int64_t core = 0; core < plan.num_cores(); ++core) {
            const partition::NodeTile& tile = plan.tile(node.id, core);
            key.clear();
            for (const partition::Interval& interval : tile.owned) key.push_back(interval.size());
            for (const partition::Interval& interval : tile.needed) key.push_back(interval.size());
            auto found = priced.find(key);
            if (found == priced.end()) {
                LayerCost priced_cost = cost.layer(model, node.id, &tile, execution);
                if (training.untrained[id]) priced_cost.backward = PassCost{};
                found = priced.emplace(key, priced_cost).first;
            }
            result[static_cast<std::size_t>(core)][static_cast<std::size_t>(node.id)] = found->second;
        }
    }
    return result;
}

// A list scheduler: tasks are added in each resource's program order; a task starts when its resource
// is free and every task it depends on has ended.
class Schedule {
public:
    explicit Schedule(std::size_t resources) : m_free(resources, 0.0) {}
    int add(std::size_t resource, double duration, std::initializer_list<int> deps) {
        return add(resource, duration, std::span<const int>(deps.begin(), deps.size()));
    }
    int add(std::size_t resource, double duration, const std::vector<int>& deps) {
        return add(resource, duration, std::span<const int>(deps));
    }
    int add(std::size_t resource, double duration, std::span<const int> deps) {
        double start = m_free[resource];
        for (int d : deps) start = std::max(start, m_end[static_cast<std::size_t>(d)]);
        m_start.push_back(start);
        m_end.push_back(start + duration);
        m_free[resource] = start + duration;
        return static_cast<int>(m_end.size()) - 1;
    }
    double start(int task) const { return m_start[static_cast<std::size_t>(task)]; }
    double end(int task) const { return m_end[static_cast<std::size_t>(task)]; }
    double makespan() const { return m_end.empty() ? 0 : *std::max_element(m_end.begin(), m_end.end()); }

private:
    std::vector<double> m_free, m_start, m_end;
};

}  // namespace

std::string_view span_kind_name(SpanKind kind) {
    switch (kind) {
        case SpanKind::Compute: return "compute";
        case SpanKind::Halo: return "halo";
        case SpanKind::AllReduce: return "all-reduce";
    }
    return "?";
}

StepPrediction predict_step(const graph::Graph& model, const partition::TilingPlan& plan, std::int64_t replicas,
                            const CostModel& cost, const SimulationOptions& options) {
    TESSERA_CHECK(replicas >= 1, "a step needs at least one replica, got " << replicas);
    const Device& device = cost.device();
    const std::int64_t cores = plan.num_cores();
    const std::int64_t all_cores = cores * replicas;
    const std::int64_t element = activation_bytes(options.precision);
    const auto& nodes = model.nodes();
    const std::size_t count = nodes.size();
    StepPrediction prediction;
    prediction.cores.resize(static_cast<std::size_t>(cores));
    const std::vector<bool> has_halo = layers_with_halos(model, plan);
    const auto incoming = all_incoming(model, plan, has_halo);
    auto incoming_of = [&](int id, std::int64_t core) -> const std::vector<HaloTransfer>& {
        return incoming[static_cast<std::size_t>(id)][static_cast<std::size_t>(core)];
    };

    // Resources: each core's compute, each core's incoming links, the replica's collectives for
    // batch-norm statistics and the loss (latency-bound, on the critical path), and the gradient
    // all-reduce (bandwidth-bound, can run beside backward).
    const std::size_t collective = static_cast<std::size_t>(2 * cores);
    const std::size_t gradient_collective = collective + 1;
    Schedule schedule(gradient_collective + 1);
    auto compute_resource = [](std::int64_t core) { return static_cast<std::size_t>(core); };
    auto link_resource = [&](std::int64_t core) { return static_cast<std::size_t>(cores + core); };
    auto record = [&](int task, std::int64_t core, int layer, SpanKind kind, bool backward, std::int64_t peer = -1) {
        if (options.record_timeline) {
            prediction.timeline.push_back({core, layer, kind, backward, schedule.start(task), schedule.end(task), peer});
        }
    };

    // Per core: each node's forward task (what a neighbour's halo waits for) and backward task.
    std::vector<std::vector<int>> forward_task(static_cast<std::size_t>(cores), std::vector<int>(count, -1));
    std::vector<std::vector<int>> backward_task(static_cast<std::size_t>(cores), std::vector<int>(count, -1));
    // Halo gradients that must arrive at a core before it runs a node's backward.
    std::vector<std::vector<std::vector<int>>> pending(static_cast<std::size_t>(cores), std::vector<std::vector<int>>(count));
    const std::vector<std::vector<LayerCost>> layer_cost = costs_per_core(model, plan, cost, options);
    auto layer_of = [&](std::int64_t core, int id) -> const LayerCost& {
        return layer_cost[static_cast<std::size_t>(core)][static_cast<std::size_t>(id)];
    };
    const std::int64_t bn_group = options.cross_replica_batch_norm ? all_cores : cores;
    const Training training = training_of(model, options);
    // A batch norm's share of its pass before the statistics' all-reduce: forward the statistics pass
    // (of three), backward the reduction pass (of its traffic); fused into the convolutions, the rest runs
    // in its neighbours.
    const bool bn_reduction_only = options.fusion == ElementwiseFusion::IntoConvolutions && cost.device().kind != "host";
    const double bn_forward_share = bn_reduction_only ? 1.0 : 1.0 / 3.0;
    const double bn_backward_share = bn_reduction_only ? 1.0 : 0.4;

    // A reduction over the replica: every core's partial, then one collective, then the rest.
    auto reduce = [&](const std::vector<int>& partials, std::int64_t bytes, std::int64_t group, int layer, bool backward) {
        if (group <= 1) return partials.front();  // one core: its partial is the total
        const int task = schedule.add(collective, cost.all_reduce_seconds(bytes, group), partials);
        for (std::int64_t core = 0; core < cores; ++core) record(task, core, layer, SpanKind::AllReduce, backward);
        return task;
    };

    // ---- forward ----
    double total_flops = 0;
    for (const Node& node : nodes) {
        if (node.kind == OpKind::Input) continue;
        const int id = node.id;
        const bool halo = has_halo[static_cast<std::size_t>(id)];
        std::vector<std::vector<int>> deps(static_cast<std::size_t>(cores));
        if (halo) {
            // One receive per core and layer: its neighbours' rows arrive over its links one after another
            // (as a device's collective-permutes do), once every sender has produced them.
            std::vector<int> senders;
            for (std::int64_t core = 0; core < cores; ++core) {
                senders.clear();
                double seconds = 0;
                for (const HaloTransfer& in : incoming_of(id, core)) {
                    const int producer_task = forward_task[static_cast<std::size_t>(in.peer)][static_cast<std::size_t>(node.inputs[0])];
                    if (producer_task >= 0) senders.push_back(producer_task);
                    seconds += cost.transfer_seconds(in.elements * element, hops_between(plan, device, in.peer, core));
                }
                if (seconds == 0) continue;
                const int task = schedule.add(link_resource(core), seconds, senders);
                record(task, core, id, SpanKind::Halo, false);
                prediction.cores[static_cast<std::size_t>(core)].halo_seconds += seconds;
                deps[static_cast<std::size_t>(core)].push_back(task);
            }
        }
        const bool frozen_batch_norm = training.frozen_batch_norm[static_cast<std::size_t>(id)];
        const bool reduced = (node.kind == OpKind::BatchNorm && !frozen_batch_norm) || node.kind == OpKind::GlobalAvgPool;
        if (reduced) {
            // Statistics pass, all-reduce, then the normalising pass (global pooling: all of it is the partial).
            std::vector<int> partials;
            for (std::int64_t core = 0; core < cores; ++core) {
                const PassCost& pass = layer_of(core, id).forward;
                const double share = node.kind == OpKind::BatchNorm ? bn_forward_share : 1.0;
                const int task = schedule.add(compute_resource(core), pass.seconds * share, deps[static_cast<std::size_t>(core)]);
                record(task, core, id, SpanKind::Compute, false);
                partials.push_back(task);
            }
            const std::int64_t channels = node.kind == OpKind::BatchNorm ? node.output_shape[1]
                                                                          : node.output_shape[0] * node.output_shape[1];
            const int all_reduce = reduce(partials, 8 * 2 * channels, node.kind == OpKind::BatchNorm ? bn_group : cores, id, false);
            for (std::int64_t core = 0; core < cores; ++core) {
                deps[static_cast<std::size_t>(core)] = {all_reduce};
                forward_task[static_cast<std::size_t>(core)][static_cast<std::size_t>(id)] = all_reduce;
            }
        }
        for (std::int64_t core = 0; core < cores; ++core) {
            const PassCost& pass = layer_of(core, id).forward;
            total_flops += pass.flops;
            if (node.kind == OpKind::GlobalAvgPool) continue;  // all of it ran as the partial
            const double seconds = reduced && node.kind == OpKind::BatchNorm ? pass.seconds * (1 - bn_forward_share) : pass.seconds;
            const int task = schedule.add(compute_resource(core), seconds, deps[static_cast<std::size_t>(core)]);
            record(task, core, id, SpanKind::Compute, false);
            forward_task[static_cast<std::size_t>(core)][static_cast<std::size_t>(id)] = task;
        }
    }
    // Loss: a pass over each core's logits, and (for split logits) a reduction of the partial sums.
    const int output = model.output_node();
    std::vector<int> loss_tasks;
    // Per core: compute outside the layers (the loss, the optimizer update) and how many ops paid the
    // device's per-op overhead, for the step's breakdown.
    std::vector<double> other_compute(static_cast<std::size_t>(cores), 0.0);
    std::vector<double> op_count(static_cast<std::size_t>(cores), 0.0);
    for (std::int64_t core = 0; core < cores; ++core) {
        const double bytes = static_cast<double>(12 * plan.tile_elements(output, core));
        const double loss_seconds = bytes / (device.memory_bandwidth * device.efficiency.memory) + device.kernel_overhead;
        other_compute[static_cast<std::size_t>(core)] += loss_seconds;
        op_count[static_cast<std::size_t>(core)] += 1;
        const int task = schedule.add(compute_resource(core), loss_seconds, {});
        record(task, core, -1, SpanKind::Compute, false);
        loss_tasks.push_back(task);
    }
    if (!plan.tile(output, 0).replicated && cores > 1) loss_tasks = {reduce(loss_tasks, 64, cores, -1, false)};
    for (std::int64_t core = 0; core < cores; ++core) {
        prediction.forward_seconds = std::max(prediction.forward_seconds, schedule.end(loss_tasks.back()));
    }

    // ---- backward ----
    // The parameters that train: those of nodes that are neither untrained nor frozen batch norms.
    auto trains = [&](const Node& node) {
        const auto id = static_cast<std::size_t>(node.id);
        return !training.untrained[id] && !training.frozen_batch_norm[id];
    };
    std::int64_t parameter_bytes = 0, parameter_count = 0;
    for (const Node& node : nodes) {
        if (!trains(node)) continue;
        for (int p : node.parameters) parameter_count += num_elements_of(model.parameters()[static_cast<std::size_t>(p)].shape);
    }
    parameter_bytes = 4 * parameter_count;
    std::vector<int> gradient_reductions;
    constexpr std::int64_t kBucketBytes = 25LL << 20;
    std::int64_t bucket_bytes = 0;
    std::vector<int> bucket_tasks;
    auto flush_bucket = [&](int layer) {
        if (bucket_bytes == 0) return;
        const int task = schedule.add(gradient_collective, cost.all_reduce_seconds(bucket_bytes, all_cores), bucket_tasks);
        for (std::int64_t core = 0; core < cores; ++core) record(task, core, layer, SpanKind::AllReduce, true);
        gradient_reductions.push_back(task);
        prediction.gradient_all_reduce_seconds += schedule.end(task) - schedule.start(task);
        bucket_bytes = 0;
        bucket_tasks.clear();
    };
    for (std::size_t n = count; n-- > 0;) {
        const Node& node = nodes[n];
        if (node.kind == OpKind::Input || training.untrained[n]) continue;  // untrained: nothing before it trains either
        const int id = node.id;
        const bool halo = has_halo[static_cast<std::size_t>(id)];
        std::vector<int> tasks(static_cast<std::size_t>(cores), -1);
        std::vector<int> partials;
        for (std::int64_t core = 0; core < cores; ++core) {
            std::vector<int> deps = pending[static_cast<std::size_t>(core)][n];
            if (id == output) deps.insert(deps.end(), loss_tasks.begin(), loss_tasks.end());
            const PassCost& pass = layer_of(core, id).backward;
            total_flops += pass.flops;
            const bool reduced = node.kind == OpKind::BatchNorm && !training.frozen_batch_norm[n];
            const double share = reduced ? bn_backward_share : 1.0;
            const int task = schedule.add(compute_resource(core), pass.seconds * share, deps);
            record(task, core, id, SpanKind::Compute, true);
            tasks[static_cast<std::size_t>(core)] = task;
            partials.push_back(task);
        }
        if (node.kind == OpKind::BatchNorm && !training.frozen_batch_norm[n]) {
            const int all_reduce = reduce(partials, 8 * 2 * node.output_shape[1], bn_group, id, true);
            for (std::int64_t core = 0; core < cores; ++core) {
                const int task =
                    schedule.add(compute_resource(core), layer_of(core, id).backward.seconds * (1 - bn_backward_share), {all_reduce});
                record(task, core, id, SpanKind::Compute, true);
                tasks[static_cast<std::size_t>(core)] = task;
            }
        }
        for (std::int64_t core = 0; core < cores; ++core) backward_task[static_cast<std::size_t>(core)][n] = tasks[static_cast<std::size_t>(core)];
        if (halo && model.node(node.inputs[0]).kind != OpKind::Input) {
            // The halo rows' gradients go back to the neighbours that own them: one receive per owner,
            // after every core that used its rows has run this layer's backward.
            const auto producer = static_cast<std::size_t>(node.inputs[0]);
            std::vector<double> seconds(static_cast<std::size_t>(cores), 0.0);
            std::vector<std::vector<int>> senders(static_cast<std::size_t>(cores));
            for (std::int64_t core = 0; core < cores; ++core) {
                for (const HaloTransfer& in : incoming_of(id, core)) {
                    seconds[static_cast<std::size_t>(in.peer)] +=
                        cost.transfer_seconds(in.elements * element, hops_between(plan, device, core, in.peer));
                    senders[static_cast<std::size_t>(in.peer)].push_back(tasks[static_cast<std::size_t>(core)]);
                }
            }
            for (std::int64_t owner = 0; owner < cores; ++owner) {
                if (seconds[static_cast<std::size_t>(owner)] == 0) continue;
                const int task = schedule.add(link_resource(owner), seconds[static_cast<std::size_t>(owner)],
                                              senders[static_cast<std::size_t>(owner)]);
                record(task, owner, id, SpanKind::Halo, true);
                prediction.cores[static_cast<std::size_t>(owner)].halo_seconds += seconds[static_cast<std::size_t>(owner)];
                pending[static_cast<std::size_t>(owner)][producer].push_back(task);
            }
        }
        // Weight gradients, all-reduced while backward goes on (when overlapped) in buckets of at least
        // 25 MiB, as data-parallel frameworks do: one all-reduce per layer would pay the latency per layer.
        if (options.overlap_gradient_all_reduce && !node.parameters.empty() && trains(node)) {
            for (int p : node.parameters) bucket_bytes += 4 * num_elements_of(model.parameters()[static_cast<std::size_t>(p)].shape);
            bucket_tasks.insert(bucket_tasks.end(), tasks.begin(), tasks.end());
            if (bucket_bytes >= kBucketBytes) flush_bucket(id);
        }
    }
    flush_bucket(-1);
    if (!options.overlap_gradient_all_reduce) {
        std::vector<int> last;
        for (std::int64_t core = 0; core < cores; ++core) {
            for (std::size_t n = 0; n < count; ++n) {
                if (backward_task[static_cast<std::size_t>(core)][n] >= 0) last.push_back(backward_task[static_cast<std::size_t>(core)][n]);
            }
        }
        const int task = schedule.add(gradient_collective, cost.all_reduce_seconds(parameter_bytes, all_cores), last);
        for (std::int64_t core = 0; core < cores; ++core) record(task, core, -1, SpanKind::AllReduce, true);
        gradient_reductions.push_back(task);
        prediction.gradient_all_reduce_seconds = schedule.end(task) - schedule.start(task);
    }
    for (std::int64_t core = 0; core < cores; ++core) {
        const double update_seconds = cost.update_seconds(parameter_count, options.optimizer_slots);
        other_compute[static_cast<std::size_t>(core)] += update_seconds;
        op_count[static_cast<std::size_t>(core)] += 1;
        const int task = schedule.add(compute_resource(core), update_seconds, gradient_reductions);
        record(task, core, -1, SpanKind::Compute, true);
    }

    // ---- results ----
    prediction.step_seconds = schedule.makespan();
    prediction.flops = total_flops;
    const double peak = device.peak_flops(options.precision, options.tf32);
    prediction.achieved_fraction_of_peak =
        prediction.step_seconds > 0 ? total_flops / (prediction.step_seconds * static_cast<double>(cores) * peak) : 0;
    double busiest = 0, busy_sum = 0, peak_sum = 0, overhead_sum = 0;
    for (std::int64_t core = 0; core < cores; ++core) {
        double busy = other_compute[static_cast<std::size_t>(core)];
        double ops = op_count[static_cast<std::size_t>(core)], flops = 0;
        for (const Node& node : nodes) {
            for (const PassCost* pass : {&layer_of(core, node.id).forward, &layer_of(core, node.id).backward}) {
                busy += pass->seconds;
                flops += pass->flops;
                if (pass->seconds > 0) ops += 1;  // every costed pass carries the per-op overhead
            }
        }
        CoreBreakdown& breakdown = prediction.cores[static_cast<std::size_t>(core)];
        breakdown.compute_seconds = busy;
        breakdown.idle_seconds = std::max(0.0, prediction.step_seconds - busy);
        busiest = std::max(busiest, busy);
        busy_sum += busy;
        peak_sum += flops / peak;
        overhead_sum += ops * device.kernel_overhead;
        prediction.memory.push_back(estimate_core_memory(model, plan, core, options.precision, options.optimizer_slots));
    }
    {
        const double average_busy = busy_sum / static_cast<double>(cores);
        StepBreakdown& parts = prediction.breakdown;
        parts.peak_compute = std::min(peak_sum / static_cast<double>(cores), average_busy);
        parts.op_overhead = std::max(0.0, std::min(overhead_sum / static_cast<double>(cores), average_busy - parts.peak_compute));
        // Clamped at 0 against rounding (equal cores' busiest − average comes out at −1e-18).
        parts.efficiency_loss = std::max(0.0, average_busy - parts.peak_compute - parts.op_overhead);
        parts.imbalance = std::max(0.0, busiest - average_busy);
        // The schedule never ends before its busiest core's compute, so this is step − busiest.
        parts.exposed_communication = std::max(0.0, prediction.step_seconds - busiest);
    }
    // Verdict material: the largest halo share and the worst-filled heavy layer.
    double compute_total = 0, worst_share = 0;
    for (const Node& node : nodes) compute_total += layer_of(0, node.id).forward.seconds + layer_of(0, node.id).backward.seconds;
    for (const Node& node : nodes) {
        if (has_halo[static_cast<std::size_t>(node.id)]) {
            const double fraction = static_cast<double>(plan.halo_elements(node.id)) /
                                    static_cast<double>(num_elements_of(model.node(node.inputs[0]).output_shape));
            if (fraction > prediction.worst_halo_fraction) {
                prediction.worst_halo_fraction = fraction;
                prediction.worst_halo_layer = node.id;
            }
        }
        const LayerCost& layer = layer_of(0, node.id);
        const double share = compute_total > 0 ? (layer.forward.seconds + layer.backward.seconds) / compute_total : 0;
        // The heaviest badly filled layer: utilisation weighted by the layer's share of the time.
        if ((node.kind == OpKind::Conv || node.kind == OpKind::ConvTranspose) && share >= 0.05 &&
            layer.channel_utilisation < 0.5 &&
            (prediction.worst_utilisation_layer < 0 || share > worst_share)) {
            worst_share = share;
            prediction.worst_utilisation = layer.channel_utilisation;
            prediction.worst_utilisation_layer = node.id;
        }
    }
    return prediction;
}

namespace {

// Wall time of one phase: per-core task times handed, in core order, to whichever host thread is free.
double phase_makespan(const std::vector<double>& tasks, int threads) {
    std::vector<double> free(static_cast<std::size_t>(std::max(1, threads)), 0.0);
    for (double task : tasks) {
        auto earliest = std::min_element(free.begin(), free.end());
        *earliest += task;
    }
    return *std::max_element(free.begin(), free.end());
}

}  // namespace

StepPrediction predict_host_step(const graph::Graph& model, const partition::TilingPlan& plan, std::int64_t replicas,
                                 const CostModel& host, const SimulationOptions& options) {
    TESSERA_CHECK(host.device().kind == "host",
                  "predict_host_step needs a host preset (from `tessera-cli calibrate`), got '" << host.device().id << "'");
    const std::int64_t cores = plan.num_cores();
    const int threads = static_cast<int>(std::max(1.0, host.host_rate("threads")));
    const double phase_overhead = host.host_rate("phase_overhead_us") * 1e-6;
    const double copy_rate = std::max(host.host_rate("copy"), 1e-3) * 1e9;  // bytes/s
    const std::int64_t element = host_activation_bytes(options.precision);
    const auto& nodes = model.nodes();
    StepPrediction prediction;
    prediction.cores.resize(static_cast<std::size_t>(cores));
    const std::vector<bool> has_halo = layers_with_halos(model, plan);
    const auto incoming = all_incoming(model, plan, has_halo);
    double wall = 0;
    // Kernels run slower while the other host threads run theirs (measured by calibration).
    const double slowdown = std::max(1.0, host.host_rate("parallel_slowdown"));
    const std::int64_t tasks_per_phase = cores * replicas;
    const double concurrent = tasks_per_phase > 1 && threads > 1 ? slowdown : 1.0;
    // One phase: task(core) seconds for every core of every replica (replicas repeat the same tiles).
    // Layers profiled side by side already ran under that slowdown.
    const double layer_concurrent = options.measured_layers ? 1.0 : concurrent;
    auto phase = [&](const std::function<double(std::int64_t)>& task, bool layer = false) {
        std::vector<double> tasks;
        for (std::int64_t r = 0; r < replicas; ++r) {
            for (std::int64_t core = 0; core < cores; ++core) {
                const double seconds = task(core) * (layer ? layer_concurrent : concurrent);
                tasks.push_back(seconds);
                prediction.cores[static_cast<std::size_t>(core)].compute_seconds += r == 0 ? seconds : 0;
            }
        }
        wall += phase_makespan(tasks, threads) + phase_overhead;
    };
    std::vector<std::vector<LayerCost>> costs = costs_per_core(model, plan, host, options);
    if (const MeasuredLayers* measured = options.measured_layers.get()) {
        TESSERA_CHECK(measured->size() == static_cast<std::size_t>(cores),
                      "measured layer times are for " << measured->size() << " cores, the plan has " << cores);
        for (std::int64_t core = 0; core < cores; ++core) {
            const auto& times = (*measured)[static_cast<std::size_t>(core)];
            TESSERA_CHECK(times.size() == nodes.size(), "measured layer times cover " << times.size() << " nodes, the model has "
                                                                                      << nodes.size());
            for (const Node& node : nodes) {
                LayerCost& cost = costs[static_cast<std::size_t>(core)][static_cast<std::size_t>(node.id)];
                cost.forward.seconds = times[static_cast<std::size_t>(node.id)].forward_seconds;
                cost.backward.seconds = times[static_cast<std::size_t>(node.id)].backward_seconds;
            }
        }
    }
    auto cost_of = [&](std::int64_t core, int id) -> const LayerCost& { return costs[static_cast<std::size_t>(core)][static_cast<std::size_t>(id)]; };
    auto halo_copy_seconds = [&](int id, std::int64_t core) {
        std::int64_t elements = 0;
        for (const HaloTransfer& in : incoming[static_cast<std::size_t>(id)][static_cast<std::size_t>(core)]) elements += in.elements;
        return static_cast<double>(elements * element) / copy_rate;
    };
    const int input = model.input_node();
    // The input tiles: a copy out of the batch and into the executor.
    phase([&](std::int64_t core) { return static_cast<double>(8 * plan.tile_elements(input, core)) / copy_rate; });
    for (const Node& node : nodes) {
        if (node.kind == OpKind::Input) continue;
        const int id = node.id;
        const bool halo = has_halo[static_cast<std::size_t>(id)];
        if (halo) {  // the halo node: its interior copy, then the rows pulled from the neighbours
            phase([&](std::int64_t core) {
                const Shape& in = model.node(node.inputs[0]).output_shape;
                std::int64_t needed = in[0] * in[1];
                for (const partition::Interval& interval : plan.tile(id, core).needed) needed *= interval.size();
                return static_cast<double>(2 * element * needed) / copy_rate + halo_copy_seconds(id, core);
            });
        }
        const bool training_norm = node.kind == OpKind::BatchNorm;
        if (training_norm) {  // two statistics phases, then the normalising phase
            for (int p = 0; p < 2; ++p) phase([&](std::int64_t core) { return cost_of(core, id).forward.seconds / 3; }, true);
            phase([&](std::int64_t core) { return cost_of(core, id).forward.seconds / 3; }, true);
        } else if (node.kind == OpKind::GlobalAvgPool) {
            phase([&](std::int64_t core) { return cost_of(core, id).forward.seconds; }, true);
            phase([&](std::int64_t) { return 0.0; });
        } else {
            phase([&](std::int64_t core) { return cost_of(core, id).forward.seconds; }, true);
        }
    }
    // Loss: logits out of the executor and the partial sums; then each tile's gradient.
    const int output = model.output_node();
    const double loss_rate = std::max(host.host_rate("loss"), 1e-3) * 1e9;
    phase([&](std::int64_t core) { return static_cast<double>(8 * plan.tile_elements(output, core)) / loss_rate; });
    phase([&](std::int64_t core) { return static_cast<double>(8 * plan.tile_elements(output, core)) / loss_rate; });
    phase([&](std::int64_t core) { return static_cast<double>(8 * plan.tile_elements(output, core)) / copy_rate; });
    prediction.forward_seconds = wall;
    for (std::size_t n = nodes.size(); n-- > 0;) {
        const Node& node = nodes[n];
        if (node.kind == OpKind::Input) continue;
        const int id = node.id;
        if (node.kind == OpKind::BatchNorm) {
            phase([&](std::int64_t core) { return cost_of(core, id).backward.seconds * 0.6; }, true);
            phase([&](std::int64_t core) { return cost_of(core, id).backward.seconds * 0.4; }, true);
        } else {
            phase([&](std::int64_t core) { return cost_of(core, id).backward.seconds; }, true);
        }
        const bool halo = has_halo[static_cast<std::size_t>(id)];
        if (halo && model.node(node.inputs[0]).kind != OpKind::Input) {
            // The halo node's backward (its interior back into the tile's gradient), then the returns.
            phase([&](std::int64_t core) {
                return static_cast<double>(2 * element * plan.tile_elements(node.inputs[0], core)) / copy_rate;
            });
            phase([&](std::int64_t core) { return 1.5 * halo_copy_seconds(id, core); });
        }
    }
    // Weight gradients summed over the cores and copied back, one task per parameter tensor over the
    // threads; the finite checks; then each core's update.
    std::int64_t parameters = 0;
    for (const graph::ParameterSpec& spec : model.parameters()) parameters += num_elements_of(spec.shape);
    const double all_cores = static_cast<double>(cores * replicas);
    const double extra_cores = all_cores - 1, extra_replicas = static_cast<double>(replicas - 1);
    const double per_tensor = (host.host_rate("gradient_reduce_us_per_tensor") + host.host_rate("gradient_reduce_us_per_tensor_core") * extra_cores +
                               host.host_rate("gradient_reduce_us_per_tensor_replica") * extra_replicas) * 1e-6;
    const double per_element = (host.host_rate("gradient_reduce_ns_per_parameter") +
                                host.host_rate("gradient_reduce_ns_per_parameter_core") * extra_cores +
                                host.host_rate("gradient_reduce_ns_per_parameter_replica") * extra_replicas) * 1e-9;
    const double update_per_parameter = host.host_rate("update_ns_per_parameter") * 1e-9;
    if (host.device().measured.count("gradient_reduce_ns_per_parameter") && host.device().measured.count("update_ns_per_parameter")) {
        // Measured on the mesh by calibration (cores/host_calibration.cpp).
        std::vector<double> reductions;
        for (const graph::ParameterSpec& spec : model.parameters())
            reductions.push_back(per_tensor + static_cast<double>(num_elements_of(spec.shape)) * per_element);
        prediction.gradient_all_reduce_seconds =
            phase_makespan(reductions, threads) +
            static_cast<double>(parameters) * host.host_rate("finite_checks_ns_per_parameter") * 1e-9;
        wall += prediction.gradient_all_reduce_seconds + phase_overhead;
        // Momentum SGD was measured: Adam's second slot adds to the bytes each update moves.
        const double update = static_cast<double>(parameters) * update_per_parameter *
                              static_cast<double>(3 + 2 * options.optimizer_slots) / 5.0;
        const std::vector<double> updates(static_cast<std::size_t>(cores * replicas), update);
        for (CoreBreakdown& core : prediction.cores) core.compute_seconds += update;
        wall += phase_makespan(updates, threads) + phase_overhead;
    } else {  // presets calibrated before round 2: memory passes at the copy rate
        prediction.gradient_all_reduce_seconds = 4.0 * static_cast<double>(parameters) * 3 * all_cores / copy_rate / threads;
        wall += prediction.gradient_all_reduce_seconds + phase_overhead;
        phase([&](std::int64_t) {
            return static_cast<double>(4 * parameters * (3 + 2 * options.optimizer_slots)) / copy_rate;
        });
    }
    prediction.step_seconds = wall;
    for (CoreBreakdown& core : prediction.cores) core.idle_seconds = std::max(0.0, wall - core.compute_seconds);
    return prediction;
}

}  // namespace tessera::cost
