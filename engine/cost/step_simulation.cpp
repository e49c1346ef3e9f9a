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
                                  .frozen_batch_norm = training.frozen_batch_norm[id], .conv_layout = options.conv_layout};
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

namespace {

// One device step as a discrete-event schedule, stage by stage: forward (halo receives, layers, the
// batch norms' and global pooling's all-reduces), the loss, backward (halo gradients back to their
// owners, the weight gradients' all-reduce in buckets or at the end), the update; then the step's
// breakdown and the material for the planner's verdict.
std::vector<bool> outputs_of(const graph::Graph& model) {
    std::vector<bool> is_output(model.nodes().size(), false);
    for (int head : model.output_nodes()) is_output[static_cast<std::size_t>(head)] = true;
    return is_output;
}

class DeviceStep {
public:
    DeviceStep(const graph::Graph& model, const partition::TilingPlan& plan, std::int64_t replicas, const CostModel& cost,
               const SimulationOptions& options)
        : m_model(model), m_plan(plan), m_cost(cost), m_device(cost.device()), m_options(options), m_cores(plan.num_cores()),
          m_all_cores(plan.num_cores() * replicas), m_element(activation_bytes(options.precision)),
          m_count(model.nodes().size()), m_has_halo(layers_with_halos(model, plan)), m_incoming(all_incoming(model, plan, m_has_halo)),
          m_layer_cost(costs_per_core(model, plan, cost, options)), m_training(training_of(model, options)),
          m_schedule(static_cast<std::size_t>(2 * m_cores) + 2),
          m_forward_task(static_cast<std::size_t>(m_cores), std::vector<int>(m_count, -1)),
          m_backward_task(static_cast<std::size_t>(m_cores), std::vector<int>(m_count, -1)),
          m_pending(static_cast<std::size_t>(m_cores), std::vector<std::vector<int>>(m_count)),
          m_other_compute(static_cast<std::size_t>(m_cores), 0.0), m_op_count(static_cast<std::size_t>(m_cores), 0.0) {
        m_prediction.cores.resize(static_cast<std::size_t>(m_cores));
        // A batch norm's share of its pass before the statistics' all-reduce: of its own passes, those
        // that read for the statistics (forward) and the reductions (backward). The host runs op by op.
        const ElementwiseFusion fusion = m_device.kind == "host" ? ElementwiseFusion::None : options.fusion;
        for (const Node& node : model.nodes()) {
            if (node.kind != OpKind::BatchNorm) continue;
            const BatchNormPasses passes = batch_norm_passes(model, node.id, fusion);
            const auto n = static_cast<std::size_t>(node.id);
            m_bn_forward_share[n] = passes.forward > 0 ? static_cast<double>(passes.forward_statistics) / passes.forward : 0.0;
            m_bn_backward_share[n] = static_cast<double>(passes.backward_reductions) / passes.backward;
        }
    }

    StepPrediction run() {
        for (const Node& node : m_model.nodes()) {
            if (node.kind != OpKind::Input) schedule_forward(node);
        }
        schedule_loss();
        count_trained_parameters();
        for (std::size_t n = m_count; n-- > 0;) {
            const Node& node = m_model.nodes()[n];
            // Untrained: nothing before it trains either.
            if (node.kind != OpKind::Input && !m_training.untrained[n]) schedule_backward(node);
        }
        schedule_gradient_all_reduce_and_update();
        summarize();
        find_verdict_material();
        return std::move(m_prediction);
    }

private:
    // Resources: each core's compute, each core's incoming links, the replica's collectives for
    // batch-norm statistics and the loss (latency-bound, on the critical path), and the gradient
    // all-reduce (bandwidth-bound, can run beside backward).
    static std::size_t compute_resource(std::int64_t core) { return static_cast<std::size_t>(core); }
    std::size_t link_resource(std::int64_t core) const { return static_cast<std::size_t>(m_cores + core); }
    std::size_t collective() const { return static_cast<std::size_t>(2 * m_cores); }
    std::size_t gradient_collective() const { return collective() + 1; }

    const LayerCost& layer_of(std::int64_t core, int id) const {
        return m_layer_cost[static_cast<std::size_t>(core)][static_cast<std::size_t>(id)];
    }
    const std::vector<HaloTransfer>& incoming_of(int id, std::int64_t core) const {
        return m_incoming[static_cast<std::size_t>(id)][static_cast<std::size_t>(core)];
    }
    void record(int task, std::int64_t core, int layer, SpanKind kind, bool backward, std::int64_t peer = -1) {
        if (m_options.record_timeline) {
            m_prediction.timeline.push_back({core, layer, kind, backward, m_schedule.start(task), m_schedule.end(task), peer});
        }
    }
    // A reduction over the replica: every core's partial, then one collective, then the rest.
    int reduce(const std::vector<int>& partials, std::int64_t bytes, std::int64_t group, int layer, bool backward) {
        if (group <= 1) return partials.front();  // one core: its partial is the total
        const int task = m_schedule.add(collective(), m_cost.all_reduce_seconds(bytes, group), partials);
        for (std::int64_t core = 0; core < m_cores; ++core) record(task, core, layer, SpanKind::AllReduce, backward);
        return task;
    }
    std::int64_t batch_norm_group() const { return m_options.cross_replica_batch_norm ? m_all_cores : m_cores; }
    bool reduced_batch_norm(const Node& node) const {
        return node.kind == OpKind::BatchNorm && !m_training.frozen_batch_norm[static_cast<std::size_t>(node.id)];
    }
    // The parameters that train: those of nodes that are neither untrained nor frozen batch norms.
    bool trains(const Node& node) const {
        const auto id = static_cast<std::size_t>(node.id);
        return !m_training.untrained[id] && !m_training.frozen_batch_norm[id];
    }

    void schedule_forward(const Node& node) {
        const int id = node.id;
        std::vector<std::vector<int>> deps(static_cast<std::size_t>(m_cores));
        if (m_has_halo[static_cast<std::size_t>(id)]) {
            // One receive per core and layer: its neighbours' rows arrive over its links one after another
            // (as a device's collective-permutes do), once every sender has produced them.
            std::vector<int> senders;
            for (std::int64_t core = 0; core < m_cores; ++core) {
                senders.clear();
                double seconds = 0;
                for (const HaloTransfer& in : incoming_of(id, core)) {
                    const int producer_task = m_forward_task[static_cast<std::size_t>(in.peer)][static_cast<std::size_t>(node.inputs[0])];
                    if (producer_task >= 0) senders.push_back(producer_task);
                    seconds += m_cost.transfer_seconds(in.elements * m_element, hops_between(m_plan, m_device, in.peer, core));
                }
                if (seconds == 0) continue;
                const int task = m_schedule.add(link_resource(core), seconds, senders);
                record(task, core, id, SpanKind::Halo, false);
                m_prediction.cores[static_cast<std::size_t>(core)].halo_seconds += seconds;
                deps[static_cast<std::size_t>(core)].push_back(task);
            }
        }
        const bool reduced = reduced_batch_norm(node) || node.kind == OpKind::GlobalAvgPool;
        if (reduced) {
            // Statistics pass, all-reduce, then the normalising pass (global pooling: all of it is the partial).
            std::vector<int> partials;
            for (std::int64_t core = 0; core < m_cores; ++core) {
                const PassCost& pass = layer_of(core, id).forward;
                const double share = node.kind == OpKind::BatchNorm ? m_bn_forward_share[static_cast<std::size_t>(id)] : 1.0;
                const int task = m_schedule.add(compute_resource(core), pass.seconds * share, deps[static_cast<std::size_t>(core)]);
                record(task, core, id, SpanKind::Compute, false);
                partials.push_back(task);
            }
            const std::int64_t channels = node.kind == OpKind::BatchNorm ? node.output_shape[1]
                                                                          : node.output_shape[0] * node.output_shape[1];
            const int all_reduce =
                reduce(partials, 8 * 2 * channels, node.kind == OpKind::BatchNorm ? batch_norm_group() : m_cores, id, false);
            for (std::int64_t core = 0; core < m_cores; ++core) {
                deps[static_cast<std::size_t>(core)] = {all_reduce};
                m_forward_task[static_cast<std::size_t>(core)][static_cast<std::size_t>(id)] = all_reduce;
            }
        }
        for (std::int64_t core = 0; core < m_cores; ++core) {
            const PassCost& pass = layer_of(core, id).forward;
            m_total_flops += pass.flops;
            if (node.kind == OpKind::GlobalAvgPool) continue;  // all of it ran as the partial
            const double seconds =
                reduced && node.kind == OpKind::BatchNorm ? pass.seconds * (1 - m_bn_forward_share[static_cast<std::size_t>(id)]) : pass.seconds;
            const int task = m_schedule.add(compute_resource(core), seconds, deps[static_cast<std::size_t>(core)]);
            record(task, core, id, SpanKind::Compute, false);
            m_forward_task[static_cast<std::size_t>(core)][static_cast<std::size_t>(id)] = task;
        }
    }

    // Loss: a pass over each core's logits — every output's (a detector's heads at every level) — and (for
    // split logits) a reduction of the partial sums.
    void schedule_loss() {
        const int output = m_model.output_node();
        for (std::int64_t core = 0; core < m_cores; ++core) {
            std::int64_t logits = 0;
            for (int head : m_model.output_nodes()) logits += m_plan.tile_elements(head, core);
            const double bytes = static_cast<double>(12 * logits);
            const double loss_seconds = bytes / (m_device.memory_bandwidth * m_device.efficiency.memory) + m_device.kernel_overhead;
            m_other_compute[static_cast<std::size_t>(core)] += loss_seconds;
            m_op_count[static_cast<std::size_t>(core)] += 1;
            const int task = m_schedule.add(compute_resource(core), loss_seconds, {});
            record(task, core, -1, SpanKind::Compute, false);
            m_loss_tasks.push_back(task);
        }
        if (!m_plan.tile(output, 0).replicated && m_cores > 1) m_loss_tasks = {reduce(m_loss_tasks, 64, m_cores, -1, false)};
        m_prediction.forward_seconds = m_schedule.end(m_loss_tasks.back());
    }

    void count_trained_parameters() {
        for (const Node& node : m_model.nodes()) {
            if (!trains(node)) continue;
            if (node.shares_parameters_of >= 0) continue;  // counted at the owner
            for (int p : node.parameters) m_parameter_count += num_elements_of(m_model.parameters()[static_cast<std::size_t>(p)].shape);
        }
    }

    void schedule_backward(const Node& node) {
        const int id = node.id;
        const auto n = static_cast<std::size_t>(id);
        std::vector<int> tasks(static_cast<std::size_t>(m_cores), -1);
        std::vector<int> partials;
        const bool reduced = reduced_batch_norm(node);
        for (std::int64_t core = 0; core < m_cores; ++core) {
            std::vector<int> deps = m_pending[static_cast<std::size_t>(core)][n];
            if (m_is_output[n]) deps.insert(deps.end(), m_loss_tasks.begin(), m_loss_tasks.end());
            const PassCost& pass = layer_of(core, id).backward;
            m_total_flops += pass.flops;
            const int task = m_schedule.add(compute_resource(core), pass.seconds * (reduced ? m_bn_backward_share[n] : 1.0), deps);
            record(task, core, id, SpanKind::Compute, true);
            tasks[static_cast<std::size_t>(core)] = task;
            partials.push_back(task);
        }
        if (reduced) {
            const int all_reduce = reduce(partials, 8 * 2 * node.output_shape[1], batch_norm_group(), id, true);
            for (std::int64_t core = 0; core < m_cores; ++core) {
                const int task = m_schedule.add(compute_resource(core), layer_of(core, id).backward.seconds * (1 - m_bn_backward_share[n]),
                                                {all_reduce});
                record(task, core, id, SpanKind::Compute, true);
                tasks[static_cast<std::size_t>(core)] = task;
            }
        }
        for (std::int64_t core = 0; core < m_cores; ++core) m_backward_task[static_cast<std::size_t>(core)][n] = tasks[static_cast<std::size_t>(core)];
        if (m_has_halo[n] && m_model.node(node.inputs[0]).kind != OpKind::Input) send_halo_gradients(node, tasks);
        // Weight gradients, all-reduced while backward goes on (when overlapped) in buckets of at least
        // 25 MiB, as data-parallel frameworks do: one all-reduce per layer would pay the latency per layer.
        // A shared parameter's gradient is complete at its first user (the last to run backward).
        if (m_options.overlap_gradient_all_reduce && !node.parameters.empty() && node.shares_parameters_of < 0 && trains(node)) {
            for (int p : node.parameters) m_bucket_bytes += 4 * num_elements_of(m_model.parameters()[static_cast<std::size_t>(p)].shape);
            m_bucket_tasks.insert(m_bucket_tasks.end(), tasks.begin(), tasks.end());
            if (m_bucket_bytes >= kBucketBytes) flush_bucket(id);
        }
    }

    // The halo rows' gradients go back to the neighbours that own them: one receive per owner, after
    // every core that used its rows has run this layer's backward.
    void send_halo_gradients(const Node& node, const std::vector<int>& tasks) {
        const auto producer = static_cast<std::size_t>(node.inputs[0]);
        std::vector<double> seconds(static_cast<std::size_t>(m_cores), 0.0);
        std::vector<std::vector<int>> senders(static_cast<std::size_t>(m_cores));
        for (std::int64_t core = 0; core < m_cores; ++core) {
            for (const HaloTransfer& in : incoming_of(node.id, core)) {
                seconds[static_cast<std::size_t>(in.peer)] +=
                    m_cost.transfer_seconds(in.elements * m_element, hops_between(m_plan, m_device, core, in.peer));
                senders[static_cast<std::size_t>(in.peer)].push_back(tasks[static_cast<std::size_t>(core)]);
            }
        }
        for (std::int64_t owner = 0; owner < m_cores; ++owner) {
            if (seconds[static_cast<std::size_t>(owner)] == 0) continue;
            const int task = m_schedule.add(link_resource(owner), seconds[static_cast<std::size_t>(owner)],
                                            senders[static_cast<std::size_t>(owner)]);
            record(task, owner, node.id, SpanKind::Halo, true);
            m_prediction.cores[static_cast<std::size_t>(owner)].halo_seconds += seconds[static_cast<std::size_t>(owner)];
            m_pending[static_cast<std::size_t>(owner)][producer].push_back(task);
        }
    }

    void flush_bucket(int layer) {
        if (m_bucket_bytes == 0) return;
        const int task = m_schedule.add(gradient_collective(), m_cost.all_reduce_seconds(m_bucket_bytes, m_all_cores), m_bucket_tasks);
        for (std::int64_t core = 0; core < m_cores; ++core) record(task, core, layer, SpanKind::AllReduce, true);
        m_gradient_reductions.push_back(task);
        m_prediction.gradient_all_reduce_seconds += m_schedule.end(task) - m_schedule.start(task);
        m_bucket_bytes = 0;
        m_bucket_tasks.clear();
    }

    void schedule_gradient_all_reduce_and_update() {
        flush_bucket(-1);
        if (!m_options.overlap_gradient_all_reduce) {
            std::vector<int> last;
            for (std::int64_t core = 0; core < m_cores; ++core) {
                for (int task : m_backward_task[static_cast<std::size_t>(core)]) {
                    if (task >= 0) last.push_back(task);
                }
            }
            const int task = m_schedule.add(gradient_collective(), m_cost.all_reduce_seconds(4 * m_parameter_count, m_all_cores), last);
            for (std::int64_t core = 0; core < m_cores; ++core) record(task, core, -1, SpanKind::AllReduce, true);
            m_gradient_reductions.push_back(task);
            m_prediction.gradient_all_reduce_seconds = m_schedule.end(task) - m_schedule.start(task);
        }
        for (std::int64_t core = 0; core < m_cores; ++core) {
            const double update_seconds = m_cost.update_seconds(m_parameter_count, m_options.optimizer_slots);
            m_other_compute[static_cast<std::size_t>(core)] += update_seconds;
            m_op_count[static_cast<std::size_t>(core)] += 1;
            const int task = m_schedule.add(compute_resource(core), update_seconds, m_gradient_reductions);
            record(task, core, -1, SpanKind::Compute, true);
        }
    }

    // The step, each core's busy time and memory, and the breakdown whose parts add up to the step.
    void summarize() {
        StepPrediction& prediction = m_prediction;
        prediction.step_seconds = m_schedule.makespan();
        prediction.flops = m_total_flops;
        const double peak = m_device.peak_flops(m_options.precision, m_options.tf32);
        prediction.achieved_fraction_of_peak =
            prediction.step_seconds > 0 ? m_total_flops / (prediction.step_seconds * static_cast<double>(m_cores) * peak) : 0;
        double busiest = 0, busy_sum = 0, peak_sum = 0, overhead_sum = 0;
        for (std::int64_t core = 0; core < m_cores; ++core) {
            double busy = m_other_compute[static_cast<std::size_t>(core)];
            double ops = m_op_count[static_cast<std::size_t>(core)], flops = 0;
            for (const Node& node : m_model.nodes()) {
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
            overhead_sum += ops * m_device.kernel_overhead;
            prediction.memory.push_back(estimate_core_memory(m_model, m_plan, core, m_options.precision, m_options.optimizer_slots));
        }
        const double average_busy = busy_sum / static_cast<double>(m_cores);
        StepBreakdown& parts = prediction.breakdown;
        parts.peak_compute = std::min(peak_sum / static_cast<double>(m_cores), average_busy);
        parts.op_overhead = std::max(0.0, std::min(overhead_sum / static_cast<double>(m_cores), average_busy - parts.peak_compute));
        // Clamped at 0 against rounding (equal cores' busiest − average comes out at −1e-18).
        parts.efficiency_loss = std::max(0.0, average_busy - parts.peak_compute - parts.op_overhead);
        parts.imbalance = std::max(0.0, busiest - average_busy);
        // The schedule never ends before its busiest core's compute, so this is step − busiest.
        parts.exposed_communication = std::max(0.0, prediction.step_seconds - busiest);
    }

    // Verdict material: the largest halo share and the worst-filled heavy layer.
    void find_verdict_material() {
        StepPrediction& prediction = m_prediction;
        double compute_total = 0, worst_share = 0;
        for (const Node& node : m_model.nodes()) compute_total += layer_of(0, node.id).forward.seconds + layer_of(0, node.id).backward.seconds;
        for (const Node& node : m_model.nodes()) {
            if (m_has_halo[static_cast<std::size_t>(node.id)]) {
                const double fraction = static_cast<double>(m_plan.halo_elements(node.id)) /
                                        static_cast<double>(num_elements_of(m_model.node(node.inputs[0]).output_shape));
                if (fraction > prediction.worst_halo_fraction) {
                    prediction.worst_halo_fraction = fraction;
                    prediction.worst_halo_layer = node.id;
                }
            }
            const LayerCost& layer = layer_of(0, node.id);
            const double share = compute_total > 0 ? (layer.forward.seconds + layer.backward.seconds) / compute_total : 0;
            // The heaviest badly filled layer: utilisation weighted by the layer's share of the time.
            if ((node.kind == OpKind::Conv || node.kind == OpKind::ConvTranspose) && share >= 0.05 &&
                layer.channel_utilisation < 0.5 && (prediction.worst_utilisation_layer < 0 || share > worst_share)) {
                worst_share = share;
                prediction.worst_utilisation = layer.channel_utilisation;
                prediction.worst_utilisation_layer = node.id;
            }
        }
    }

    static constexpr std::int64_t kBucketBytes = 25LL << 20;

    const graph::Graph& m_model;
    const partition::TilingPlan& m_plan;
    const CostModel& m_cost;
    const Device& m_device;
    const SimulationOptions& m_options;
    const std::int64_t m_cores, m_all_cores, m_element;
    const std::size_t m_count;
    const std::vector<bool> m_has_halo;
    const std::vector<bool> m_is_output = outputs_of(m_model);  // the loss reads these
    const std::vector<std::vector<std::vector<HaloTransfer>>> m_incoming;
    const std::vector<std::vector<LayerCost>> m_layer_cost;
    const Training m_training;
    std::vector<double> m_bn_forward_share = std::vector<double>(m_count, 1.0);   // by node
    std::vector<double> m_bn_backward_share = std::vector<double>(m_count, 1.0);  // by node

    Schedule m_schedule;
    StepPrediction m_prediction;
    // Per core: each node's forward task (what a neighbour's halo waits for) and backward task.
    std::vector<std::vector<int>> m_forward_task, m_backward_task;
    // Halo gradients that must arrive at a core before it runs a node's backward.
    std::vector<std::vector<std::vector<int>>> m_pending;
    // Per core: compute outside the layers (the loss, the optimizer update) and how many ops paid the
    // device's per-op overhead, for the step's breakdown.
    std::vector<double> m_other_compute, m_op_count;
    std::vector<int> m_loss_tasks, m_gradient_reductions, m_bucket_tasks;
    std::int64_t m_bucket_bytes = 0, m_parameter_count = 0;
    double m_total_flops = 0;
};

}  // namespace

StepPrediction predict_step(const graph::Graph& model, const partition::TilingPlan& plan, std::int64_t replicas,
                            const CostModel& cost, const SimulationOptions& options) {
    TESSERA_CHECK(replicas >= 1, "a step needs at least one replica, got " << replicas);
    return DeviceStep(model, plan, replicas, cost, options).run();
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

// A mesh spread over MPI ranks (SimulationOptions::spread): who holds which core, and what messages and
// collectives cost on the calibrated network. One rank, nothing spread: every cost below is 0.
struct RankNetwork {
    int ranks = 1;
    std::vector<std::int64_t> first;   // [ranks + 1] first mesh core of each rank
    double oversubscription = 1;       // ranks × threads over the host's cores, when they share one host
    double latency = 0, bandwidth = 1, gather_seconds = 0;
    bool fast = false;
    std::vector<std::pair<double, double>> all_reduce;  // bytes → seconds, ascending
    static constexpr double fixed_collectives = 4;      // per step: failures, events, ledgers, the loss's replica values

    RankNetwork(const CostModel& host, const SimulationOptions& options, std::int64_t mesh_cores, int threads) {
        first = {0, mesh_cores};
        if (!options.spread || options.spread->ranks <= 1) return;
        const auto& measured = host.device().measured;
        TESSERA_CHECK(measured.count("cluster_latency_us") && measured.count("cluster_bandwidth_gbs") && measured.count("cluster_gather_us"),
                      "predicting a mesh spread over MPI ranks needs the network between them in the host preset ("
                          << host.device().id << "): run mpirun -np 2 tessera-cli calibrate --network after tessera-cli calibrate");
        ranks = options.spread->ranks;
        TESSERA_CHECK(ranks <= mesh_cores, "a mesh of " << mesh_cores << " cores cannot spread over " << ranks << " ranks");
        first.assign(static_cast<std::size_t>(ranks) + 1, 0);
        const std::int64_t base = mesh_cores / ranks, extra = mesh_cores % ranks;
        for (int rank = 0; rank <= ranks; ++rank) first[static_cast<std::size_t>(rank)] = rank * base + std::min<std::int64_t>(rank, extra);
        if (options.spread->host_cores > 0) {
            oversubscription = std::max(1.0, static_cast<double>(ranks * threads) / static_cast<double>(options.spread->host_cores));
        }
        latency = measured.at("cluster_latency_us") * 1e-6;
        bandwidth = std::max(measured.at("cluster_bandwidth_gbs"), 1e-6) * 1e9;
        gather_seconds = measured.at("cluster_gather_us") * 1e-6;
        fast = options.spread->fast_reduction;
        for (const auto& [name, value] : measured) {
            if (name.rfind("cluster_all_reduce_us_", 0) == 0) all_reduce.emplace_back(std::stod(name.substr(22)), value * 1e-6);
        }
        std::sort(all_reduce.begin(), all_reduce.end());
    }

    int owner(std::int64_t mesh_core) const {
        return static_cast<int>(std::upper_bound(first.begin(), first.end(), mesh_core) - first.begin()) - 1;
    }
    // A reduction over each replica's cores (batch-norm statistics, pooling and loss partials) gathers
    // only among the ranks holding that replica (CoreMesh's replica communicators): nothing when every
    // replica sits on one rank, else a gather (the calibrated one, over every rank: an upper bound).
    double replica_gather_seconds(std::int64_t cores_per_replica) const {
        for (std::int64_t replica_first = 0; replica_first < first.back(); replica_first += cores_per_replica) {
            if (owner(replica_first) != owner(replica_first + cores_per_replica - 1)) return gather_seconds;
        }
        return 0.0;
    }
    double message_seconds(double bytes) const { return latency + bytes / bandwidth; }

    // The weight gradients' sum across the mesh. One process: `in_process` (its cores summed on its
    // threads). Reproducible (CoreMesh's segmented sum): every rank sends each other rank its cores'
    // values of that rank's segment of the buffer, all at once (the busiest rank's bytes, one latency per
    // peer), adds its own segment over every core (its share of the in-process sum), and the ranks
    // gather the summed segments. Fast: the slowest rank's share, then the library's all-reduce.
    double gradient_seconds(double in_process, double buffer_bytes) const {
        if (ranks == 1) return in_process;
        const double mesh_cores = static_cast<double>(first.back());
        double largest = 0;
        for (int rank = 0; rank < ranks; ++rank) largest = std::max(largest, static_cast<double>(first[rank + 1] - first[rank]));
        if (fast) return in_process * oversubscription * largest / mesh_cores + all_reduce_time(buffer_bytes);
        const double segment = buffer_bytes / ranks, others = static_cast<double>(ranks - 1);
        const double sent = largest * segment * others, received = (mesh_cores - 1) * segment;
        const double exchange = others * latency + std::max(sent, received) / bandwidth;
        const double gather = std::ceil(std::log2(static_cast<double>(ranks))) * latency + segment * others / bandwidth;
        return exchange + in_process * oversubscription / ranks + gather;
    }

    // MPI's all-reduce of `bytes`, interpolated over the calibrated sizes (linear beyond them).
    double all_reduce_time(double bytes) const {
        if (all_reduce.empty()) return 2 * std::ceil(std::log2(static_cast<double>(ranks))) * message_seconds(bytes);
        if (bytes <= all_reduce.front().first) return all_reduce.front().second;
        for (std::size_t i = 1; i < all_reduce.size(); ++i) {
            if (bytes <= all_reduce[i].first) {
                const auto& [b0, t0] = all_reduce[i - 1];
                const auto& [b1, t1] = all_reduce[i];
                return t0 + (t1 - t0) * (bytes - b0) / (b1 - b0);
            }
        }
        const auto& [b, t] = all_reduce.back();
        return t * bytes / b;
    }
};

// The simulated cores' step on this host, phase by phase (predict_host_step): the forward layers, the
// loss, the backward layers, then the step's end, each adding its phases' wall time.
class HostStep {
public:
    HostStep(const graph::Graph& model, const partition::TilingPlan& plan, std::int64_t replicas, const CostModel& host,
             const SimulationOptions& options)
        : m_model(model), m_plan(plan), m_replicas(replicas), m_host(host), m_options(options), m_cores(plan.num_cores()),
          m_threads(static_cast<int>(std::max(1.0, host.host_rate("threads")))),
          m_phase_overhead(host.host_rate("phase_overhead_us") * 1e-6),
          m_copy_rate(std::max(host.host_rate("copy"), 1e-3) * 1e9),  // bytes/s
          m_element(host_activation_bytes(options.precision)), m_has_halo(layers_with_halos(model, plan)),
          m_incoming(all_incoming(model, plan, m_has_halo)), m_network(host, options, m_cores * replicas, m_threads) {
        m_prediction.cores.resize(static_cast<std::size_t>(m_cores));
        // Kernels run slower while the other host threads run theirs (measured by calibration); layers
        // profiled side by side already ran under that slowdown.
        const double slowdown = std::max(1.0, host.host_rate("parallel_slowdown"));
        m_concurrent = m_cores * replicas > 1 && m_threads > 1 ? slowdown : 1.0;
        m_layer_concurrent = options.measured_layers ? 1.0 : m_concurrent;
        m_replica_gather = m_network.replica_gather_seconds(m_cores);
        // Batch-norm statistics over every replica's cores (cross-replica BN) gather over every rank.
        m_norm_gather = options.cross_replica_batch_norm ? m_network.gather_seconds : m_replica_gather;
        find_rank_crossings();
        m_costs = costs_per_core(model, plan, host, options);
        take_measured_layers();
    }

    StepPrediction run() {
        // The input tiles: a copy out of the batch and into the executor.
        const int input = m_model.input_node();
        phase([&](std::int64_t core) { return static_cast<double>(8 * m_plan.tile_elements(input, core)) / m_copy_rate; });
        m_prediction.node_forward_seconds.assign(m_model.nodes().size(), 0.0);
        m_prediction.node_backward_seconds.assign(m_model.nodes().size(), 0.0);
        for (const Node& node : m_model.nodes()) {
            const double start = m_wall;
            if (node.kind != OpKind::Input) forward_layer(node);
            m_prediction.node_forward_seconds[static_cast<std::size_t>(node.id)] = m_wall - start;
        }
        loss();
        m_prediction.forward_seconds = m_wall;
        const auto& nodes = m_model.nodes();
        for (std::size_t n = nodes.size(); n-- > 0;) {
            const double start = m_wall;
            if (nodes[n].kind != OpKind::Input) backward_layer(nodes[n]);
            m_prediction.node_backward_seconds[n] = m_wall - start;
        }
        m_prediction.backward_seconds = m_wall;
        end_of_step();
        m_prediction.step_seconds = m_wall;
        for (CoreBreakdown& core : m_prediction.cores) core.idle_seconds = std::max(0.0, m_wall - core.compute_seconds);
        return m_prediction;
    }

private:
    // One phase: task(core) seconds for every core of every replica (replicas repeat the same tiles), on
    // each rank's threads; the phase ends with its slowest rank — or after `measured_wall` seconds where
    // the profile timed the phase itself. Returns its wall time.
    double phase(const std::function<double(std::int64_t)>& task, bool layer = false, double measured_wall = -1) {
        std::vector<std::vector<double>> tasks(static_cast<std::size_t>(m_network.ranks));
        for (std::int64_t r = 0; r < m_replicas; ++r) {
            for (std::int64_t core = 0; core < m_cores; ++core) {
                const double seconds = task(core) * (layer ? m_layer_concurrent : m_concurrent) * m_network.oversubscription;
                tasks[static_cast<std::size_t>(m_network.owner(r * m_cores + core))].push_back(seconds);
                m_prediction.cores[static_cast<std::size_t>(core)].compute_seconds += r == 0 ? seconds : 0;
            }
        }
        double slowest = 0;
        for (const std::vector<double>& rank_tasks : tasks) slowest = std::max(slowest, phase_makespan(rank_tasks, m_threads));
        if (measured_wall >= 0) slowest = measured_wall;
        m_wall += slowest + m_phase_overhead;
        return slowest + m_phase_overhead;
    }

    // Per layer, whether its halo rows cross between ranks (then the mesh sends them before it copies the
    // tiles' interiors, and a convolution's weight gradients run while its halo gradients travel).
    void find_rank_crossings() {
        m_crosses_ranks.assign(m_model.nodes().size(), false);
        for (std::size_t id = 0; id < m_model.nodes().size() && m_network.ranks > 1; ++id) {
            if (!m_has_halo[id]) continue;  // no transfers listed
            for (std::int64_t r = 0; r < m_replicas; ++r) {
                for (std::int64_t core = 0; core < m_cores; ++core) {
                    for (const HaloTransfer& in : m_incoming[id][static_cast<std::size_t>(core)]) {
                        if (m_network.owner(r * m_cores + in.peer) != m_network.owner(r * m_cores + core)) m_crosses_ranks[id] = true;
                    }
                }
            }
        }
    }
    bool crosses_ranks(int id) const { return static_cast<bool>(m_crosses_ranks[static_cast<std::size_t>(id)]); }

    // Layer times measured by a profile, where given, replace the per-class model's.
    void take_measured_layers() {
        const MeasuredLayers* measured = m_options.measured_layers.get();
        if (!measured) return;
        TESSERA_CHECK(measured->size() == static_cast<std::size_t>(m_cores),
                      "measured layer times are for " << measured->size() << " cores, the plan has " << m_cores);
        for (std::int64_t core = 0; core < m_cores; ++core) {
            const auto& times = (*measured)[static_cast<std::size_t>(core)];
            TESSERA_CHECK(times.size() == m_model.nodes().size(),
                          "measured layer times cover " << times.size() << " nodes, the model has " << m_model.nodes().size());
            for (const Node& node : m_model.nodes()) {
                LayerCost& cost = m_costs[static_cast<std::size_t>(core)][static_cast<std::size_t>(node.id)];
                cost.forward.seconds = times[static_cast<std::size_t>(node.id)].forward_seconds;
                cost.backward.seconds = times[static_cast<std::size_t>(node.id)].backward_seconds;
            }
        }
    }

    const LayerCost& cost_of(std::int64_t core, int id) const {
        return m_costs[static_cast<std::size_t>(core)][static_cast<std::size_t>(id)];
    }
    // A layer's phases as the profile timed them whole, every task of the step on this process's
    // threads (cores/layer_profile.hpp); −1 where it did not (no profile, a partial one, or ranks).
    double measured_wall(int id, graph::Pass pass) const {
        const MeasuredLayers* measured = m_options.measured_layers.get();
        if (!measured || m_network.ranks > 1 || measured->empty()) return -1;
        const MeasuredLayer& layer = measured->front()[static_cast<std::size_t>(id)];
        const double wall = pass == graph::Pass::Forward ? layer.forward_wall_seconds : layer.backward_wall_seconds;
        return wall > 0 ? wall : -1;
    }
    double halo_copy_seconds(int id, std::int64_t core) const {
        std::int64_t elements = 0;
        for (const HaloTransfer& in : m_incoming[static_cast<std::size_t>(id)][static_cast<std::size_t>(core)]) elements += in.elements;
        return static_cast<double>(elements * m_element) / m_copy_rate;
    }

    // Halo rows between ranks: each rank waits for its messages (one per transfer from another rank's
    // core), less the work that ran while they travelled (`overlapped` seconds).
    void remote_halos(int id, double overlapped) {
        if (m_network.ranks == 1) return;
        std::vector<double> waits(static_cast<std::size_t>(m_network.ranks), 0.0);
        for (std::int64_t r = 0; r < m_replicas; ++r) {
            for (std::int64_t core = 0; core < m_cores; ++core) {
                const int receiver = m_network.owner(r * m_cores + core);
                for (const HaloTransfer& in : m_incoming[static_cast<std::size_t>(id)][static_cast<std::size_t>(core)]) {
                    if (m_network.owner(r * m_cores + in.peer) == receiver) continue;
                    waits[static_cast<std::size_t>(receiver)] += m_network.message_seconds(static_cast<double>(in.elements * m_element));
                }
            }
        }
        m_wall += std::max(0.0, *std::max_element(waits.begin(), waits.end()) - overlapped);
    }

    void forward_layer(const Node& node) {
        const int id = node.id;
        const bool halo = m_has_halo[static_cast<std::size_t>(id)];
        if (halo && crosses_ranks(id)) {  // the rows other ranks' cores need, packed and sent first
            std::vector<std::int64_t> outgoing(static_cast<std::size_t>(m_cores), 0);
            for (std::int64_t core = 0; core < m_cores; ++core) {
                for (const HaloTransfer& in : m_incoming[static_cast<std::size_t>(id)][static_cast<std::size_t>(core)]) {
                    if (m_network.owner(in.peer) != m_network.owner(core)) outgoing[static_cast<std::size_t>(in.peer)] += in.elements;
                }
            }
            phase([&](std::int64_t core) { return static_cast<double>(outgoing[static_cast<std::size_t>(core)] * m_element) / m_copy_rate; });
        }
        if (halo) {  // the halo node: its interior copy, then the rows pulled from the neighbours
            const double copies = phase([&](std::int64_t core) {
                const Shape& in = m_model.node(node.inputs[0]).output_shape;
                std::int64_t needed = in[0] * in[1];
                for (const partition::Interval& interval : m_plan.tile(id, core).needed) needed *= interval.size();
                return static_cast<double>(2 * m_element * needed) / m_copy_rate + halo_copy_seconds(id, core);
            });
            remote_halos(id, crosses_ranks(id) ? copies : 0.0);  // the rows to other ranks leave first
        }
        const double wall = measured_wall(id, graph::Pass::Forward);  // < 0: none
        const auto share = [&](double fraction) { return wall < 0 ? -1.0 : wall * fraction; };
        if (node.kind == OpKind::BatchNorm) {  // two statistics phases (each reduced over the ranks), then the normalising phase
            for (int p = 0; p < 2; ++p) {
                phase([&](std::int64_t core) { return cost_of(core, id).forward.seconds / 3; }, true, share(1.0 / 3));
                m_wall += m_norm_gather;
            }
            phase([&](std::int64_t core) { return cost_of(core, id).forward.seconds / 3; }, true, share(1.0 / 3));
        } else if (node.kind == OpKind::GlobalAvgPool) {
            phase([&](std::int64_t core) { return cost_of(core, id).forward.seconds; }, true, wall);
            m_wall += m_replica_gather;
            phase([&](std::int64_t) { return 0.0; });
        } else {
            phase([&](std::int64_t core) { return cost_of(core, id).forward.seconds; }, true, wall);
        }
    }

    // Logits out of the executor (every output's) and the partial sums; then each tile's gradient.
    void loss() {
        const auto logits = [&](std::int64_t core) {
            std::int64_t elements = 0;
            for (int head : m_model.output_nodes()) elements += m_plan.tile_elements(head, core);
            return static_cast<double>(8 * elements);
        };
        const double loss_rate = std::max(m_host.host_rate("loss"), 1e-3) * 1e9;
        phase([&](std::int64_t core) { return logits(core) / loss_rate; });
        m_wall += m_replica_gather + m_network.gather_seconds;  // the loss partials (within a replica), each replica's loss (all ranks)
        phase([&](std::int64_t core) { return logits(core) / loss_rate; });
        phase([&](std::int64_t core) { return logits(core) / m_copy_rate; });
    }

    void backward_layer(const Node& node) {
        const int id = node.id;
        const bool halo_gradients = m_has_halo[static_cast<std::size_t>(id)] && m_model.node(node.inputs[0]).kind != OpKind::Input;
        // A convolution whose halo gradients go to another rank computes its input gradients first and
        // its weights' gradients while they travel: the weights' share of its backward, by FLOPs (each
        // part as many as forward).
        const bool weights_later =
            halo_gradients && (node.kind == OpKind::Conv || node.kind == OpKind::ConvTranspose) && crosses_ranks(id);
        const graph::NodeCost& flops = m_model.cost(id);
        const double weights_share =
            weights_later && flops.backward_flops > 0 ? std::clamp(flops.forward_flops / flops.backward_flops, 0.0, 1.0) : 0.0;
        // A phase the profile timed whole (one rank; a split for deferred weights' gradients only across ranks).
        const double wall = weights_share > 0 ? -1.0 : measured_wall(id, graph::Pass::Backward);
        const auto share = [&](double fraction) { return wall < 0 ? -1.0 : wall * fraction; };
        if (node.kind == OpKind::BatchNorm) {
            phase([&](std::int64_t core) { return cost_of(core, id).backward.seconds * 0.6; }, true, share(0.6));
            m_wall += m_norm_gather;
            phase([&](std::int64_t core) { return cost_of(core, id).backward.seconds * 0.4; }, true, share(0.4));
        } else {
            phase([&](std::int64_t core) { return cost_of(core, id).backward.seconds * (1 - weights_share); }, true, wall);
        }
        if (!halo_gradients) return;
        // The halo node's backward (its interior back into the tile's gradient), then the returns. Halo
        // gradients bound for other ranks leave first: the halo node's backward and the deferred weights'
        // gradients run while they travel.
        const double halo_node = phase([&](std::int64_t core) {
            return static_cast<double>(2 * m_element * m_plan.tile_elements(node.inputs[0], core)) / m_copy_rate;
        });
        const double weights =
            weights_later ? phase([&](std::int64_t core) { return cost_of(core, id).backward.seconds * weights_share; }, true) : 0.0;
        remote_halos(id, crosses_ranks(id) ? halo_node + weights : 0.0);
        phase([&](std::int64_t core) { return 1.5 * halo_copy_seconds(id, core); });
    }

    // Per-parameter costs were measured on two model sizes (9 and 59 MB of parameters a core): in
    // log(parameters) between them, flat beyond (the caches' benefit gone, memory speed stays).
    double per_parameter(const std::string& key, std::int64_t parameters) const {
        const auto& measured = m_host.device().measured;
        const double small = m_host.host_rate(key);
        const auto large = measured.find(key + "_large"), small_size = measured.find("end_of_step_parameters"),
                   large_size = measured.find("end_of_step_parameters_large");
        if (large == measured.end() || small_size == measured.end() || large_size == measured.end() ||
            !(large_size->second > small_size->second && small_size->second > 0) || parameters <= 0)
            return small;
        const double position = std::clamp(std::log(static_cast<double>(parameters) / small_size->second) /
                                               std::log(large_size->second / small_size->second),
                                           0.0, 1.0);
        return small + position * (large->second - small);
    }

    // Weight gradients summed over the cores and copied back, one task per parameter tensor over the
    // threads; the finite checks; then the update.
    void end_of_step() {
        std::int64_t parameters = 0;
        for (const graph::ParameterSpec& spec : m_model.parameters()) parameters += num_elements_of(spec.shape);
        const double all_cores = static_cast<double>(m_cores * m_replicas);
        const double extra_cores = all_cores - 1, extra_replicas = static_cast<double>(m_replicas - 1);
        const auto& measured = m_host.device().measured;
        if (!measured.count("gradient_reduce_ns_per_parameter") || !measured.count("update_ns_per_parameter")) {
            // Presets calibrated before round 2: memory passes at the copy rate.
            m_prediction.gradient_all_reduce_seconds = 4.0 * static_cast<double>(parameters) * 3 * all_cores / m_copy_rate / m_threads;
            m_wall += m_prediction.gradient_all_reduce_seconds + m_phase_overhead;
            phase([&](std::int64_t) {
                return static_cast<double>(4 * parameters * (3 + 2 * m_options.optimizer_slots)) / m_copy_rate;
            });
            return;
        }
        // Measured on the mesh by calibration (mesh/host_calibration.cpp).
        const double per_tensor = (m_host.host_rate("gradient_reduce_us_per_tensor") +
                                   m_host.host_rate("gradient_reduce_us_per_tensor_core") * extra_cores +
                                   m_host.host_rate("gradient_reduce_us_per_tensor_replica") * extra_replicas) * 1e-6;
        const double per_element = (per_parameter("gradient_reduce_ns_per_parameter", parameters) +
                                    per_parameter("gradient_reduce_ns_per_parameter_core", parameters) * extra_cores +
                                    per_parameter("gradient_reduce_ns_per_parameter_replica", parameters) * extra_replicas) * 1e-9;
        std::vector<double> reductions;
        for (const graph::ParameterSpec& spec : m_model.parameters())
            reductions.push_back(per_tensor + static_cast<double>(num_elements_of(spec.shape)) * per_element);
        // The checks and the update also cost per tensor: the wall time per tensor measured on many tiny
        // ones over the threads (counted here with the checks).
        const double tensor_count = static_cast<double>(m_model.parameters().size());
        const double per_tensor_end = m_host.host_rate("checks_and_update_us_per_tensor") * 1e-6 * tensor_count;
        m_prediction.finite_check_seconds =
            static_cast<double>(parameters) * per_parameter("finite_checks_ns_per_parameter", parameters) * 1e-9 + per_tensor_end;
        m_prediction.gradient_all_reduce_seconds =
            m_network.gradient_seconds(phase_makespan(reductions, m_threads), 4.0 * static_cast<double>(parameters)) +
            m_prediction.finite_check_seconds;
        m_wall += m_prediction.gradient_all_reduce_seconds + m_phase_overhead;
        // Momentum SGD was measured: Adam's second slot adds to the bytes each update moves. One update
        // per rank (a rank's cores share its first core's weights), its parameters spread over the rank's
        // threads — as calibration timed it.
        const double update_per_parameter = per_parameter("update_ns_per_parameter", parameters) * 1e-9;
        const double update = static_cast<double>(parameters) * update_per_parameter * static_cast<double>(3 + 2 * m_options.optimizer_slots) / 5.0;
        m_prediction.update_seconds = update;
        for (CoreBreakdown& core : m_prediction.cores) core.compute_seconds += update;
        m_wall += update * m_network.oversubscription + m_phase_overhead;
        m_wall += m_network.fixed_collectives * m_network.gather_seconds;  // the step's end: failures, events, ledgers
    }

    const graph::Graph& m_model;
    const partition::TilingPlan& m_plan;
    const std::int64_t m_replicas;
    const CostModel& m_host;
    const SimulationOptions& m_options;
    const std::int64_t m_cores;  // of one replica
    const int m_threads;
    const double m_phase_overhead, m_copy_rate;
    const std::int64_t m_element;  // bytes of an activation
    const std::vector<bool> m_has_halo;
    const std::vector<std::vector<std::vector<HaloTransfer>>> m_incoming;  // [node][core]: the rows it receives
    const RankNetwork m_network;
    double m_concurrent = 1, m_layer_concurrent = 1, m_replica_gather = 0, m_norm_gather = 0;
    std::vector<bool> m_crosses_ranks;
    std::vector<std::vector<LayerCost>> m_costs;  // [core][node]
    StepPrediction m_prediction;
    double m_wall = 0;  // the step so far
};

}  // namespace

StepPrediction predict_host_step(const graph::Graph& model, const partition::TilingPlan& plan, std::int64_t replicas,
                                 const CostModel& host, const SimulationOptions& options) {
    TESSERA_CHECK(host.device().kind == "host",
                  "predict_host_step needs a host preset (from `tessera-cli calibrate`), got '" << host.device().id << "'");
    return HostStep(model, plan, replicas, host, options).run();
}

}  // namespace tessera::cost
