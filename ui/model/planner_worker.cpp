#include "model/planner_worker.hpp"

#include "cost/device.hpp"
#include "cost/planner.hpp"
#include "partition/core_graph.hpp"
#include "partition/tiling.hpp"

#include "model/gui_mailbox.hpp"

#include <algorithm>
#include <exception>
#include <map>
#include <set>

namespace tessera::ui {

namespace {

// As tessera-cli plan builds it: the experiment's input, budget, precision and optimizer slots.
cost::PlannerRequest makeRequest(const experiment::Experiment& experiment) {
    cost::PlannerRequest request;
    request.global_input = experiment::global_input_shape(experiment);
    request.core_budget = experiment.partition.num_cores();
    request.simulation.precision = experiment.precision;
    request.simulation.optimizer_slots = experiment::optimizer_slots(experiment);
    return request;
}

// Core counts of the scaling curves: 1, 2, 4, … up to max(8, 4 × budget).
PlannedLayout copyPlan(const cost::LayoutPlan& plan, int rank) {
    PlannedLayout row;
    row.rank = rank;
    row.replicas = plan.replicas;
    row.pieces = plan.pieces;
    row.boundaries = plan.grid.boundaries;
    row.layout = QString::fromStdString(plan.layout);
    row.valid = plan.valid;
    row.fits = plan.fits;
    row.verdict = QString::fromStdString(plan.verdict);
    row.peak_memory = plan.peak_memory;
    row.step_seconds = plan.step_seconds;
    row.samples_per_second = plan.samples_per_second;
    row.fraction_of_peak = plan.fraction_of_peak;
    row.exposed_communication = plan.exposed_communication;
    return row;
}

ScalingSample copyPoint(const cost::ScalingPoint& point) {
    ScalingSample sample;
    sample.cores = point.cores;
    sample.global_batch = point.global_batch;
    sample.feasible = point.best.valid && point.best.fits;
    sample.layout = QString::fromStdString(point.best.layout);
    sample.step_seconds = point.best.step_seconds;
    sample.samples_per_second = point.best.samples_per_second;
    return sample;
}

QString coreList(const std::set<std::int64_t>& cores) {
    QStringList names;
    for (std::int64_t core : cores) names << QString::number(core);
    return names.join(QStringLiteral(", "));
}

QString tileText(const partition::NodeTile& tile) {
    if (tile.replicated) return QStringLiteral("the whole (replicated) value");
    QStringList extents;
    for (const partition::Interval& interval : tile.owned) extents << QString::number(interval.size());
    return QStringLiteral("a %1 tile").arg(extents.join(QStringLiteral("×")));
}

}  // namespace

std::int64_t PlannedLayout::coresPerReplica() const {
    std::int64_t cores = 1;
    for (std::int64_t p : pieces) cores *= p;
    return cores;
}

QString PlannedLayout::piecesText() const {
    QStringList parts;
    for (std::int64_t p : pieces) parts << QString::number(p);
    return parts.join(QStringLiteral("×"));
}

PlannerWorker::PlannerWorker(QObject* parent) : QObject(parent), m_mailbox(new GuiMailbox(this)) {
    qRegisterMetaType<tessera::ui::PlannerResult>();
    qRegisterMetaType<tessera::ui::PredictedTimeline>();
}

PlannerWorker::~PlannerWorker() {
    {
        const std::lock_guard lock(m_mutex);
        m_abort = true;
    }
    m_condition.notify_one();
    if (m_thread.joinable()) m_thread.join();
}

quint64 PlannerWorker::plan(const experiment::Experiment& experiment) {
    const std::lock_guard lock(m_mutex);
    const quint64 request = ++m_next_request;
    m_plan_job = PlanJob{request, experiment};
    m_timeline_job.reset();  // of the previous experiment
    m_restart = true;
    startOrWake();
    return request;
}

quint64 PlannerWorker::predictTimeline(const experiment::Experiment& experiment, std::int64_t replicas,
                                       const std::vector<std::vector<std::int64_t>>& boundaries) {
    const std::lock_guard lock(m_mutex);
    const quint64 request = ++m_next_request;
    m_timeline_job = TimelineJob{request, experiment, replicas, boundaries};
    startOrWake();
    return request;
}

void PlannerWorker::startOrWake() {
    // Called with m_mutex held, on the GUI thread (the only one that starts the thread).
    if (!m_thread.joinable()) {
        m_thread = std::thread([this] { run(); });
    } else {
        m_condition.notify_one();
    }
}

bool PlannerWorker::shouldStop() {
    const std::lock_guard lock(m_mutex);
    return m_abort || m_restart;
}

void PlannerWorker::run() {
    scheduleThisThreadAsBatch();
    for (;;) {
        std::optional<PlanJob> plan_job;
        std::optional<TimelineJob> timeline_job;
        {
            std::unique_lock lock(m_mutex);
            m_condition.wait(lock, [this] { return m_abort || m_plan_job || m_timeline_job; });
            if (m_abort) return;
            if (m_plan_job) {
                plan_job = std::move(m_plan_job);
                m_plan_job.reset();
            } else {
                timeline_job = std::move(m_timeline_job);
                m_timeline_job.reset();
            }
            m_restart = false;
        }
        if (plan_job) runPlan(*plan_job);
        if (timeline_job) runTimeline(*timeline_job);
    }
}

void PlannerWorker::postProgress(quint64 request, int done, int total, QString stage) {
    m_mailbox->post([this, request, done, total, stage = std::move(stage)] { emit progress(request, done, total, stage); });
}

void PlannerWorker::postFailure(quint64 request, QString message) {
    m_mailbox->post([this, request, message = std::move(message)] { emit failed(request, message); });
}

void PlannerWorker::runPlan(const PlanJob& job) {
    const experiment::Experiment& experiment = job.experiment;
    try {
        const cost::Device device = cost::load_device_preset(experiment.device);
        const cost::CostModel model(device);
        const cost::ModelFactory factory = [&experiment](const Shape& input) { return experiment::build_model(experiment, input); };
        const cost::PlannerRequest request = makeRequest(experiment);
        // Both curves as cost::scaling_curve defines them; walked here a point at a time to report progress.
        const std::int64_t batch = request.global_input[0];
        const std::vector<std::int64_t> budgets = cost::scaling_budgets(request.core_budget);
        std::vector<std::int64_t> weak_budgets;
        for (std::int64_t cores : budgets) {
            if (cost::weak_scaling_batch(request, cores)) weak_budgets.push_back(cores);
        }
        const int total = 1 + static_cast<int>(budgets.size() + weak_budgets.size());
        int done = 0;

        PlannerResult result;
        result.experiment_name = QString::fromStdString(experiment.name);
        result.device_id = QString::fromStdString(device.id);
        result.device_name = QString::fromStdString(device.name);
        result.memory_per_core = device.memory_per_core;
        result.core_budget = request.core_budget;
        result.global_batch = batch;
        result.experiment_replicas = experiment.partition.num_replicas;
        result.experiment_pieces = experiment::spatial_pieces(experiment);

        postProgress(job.request, done, total, tr("Ranking every layout for %1 cores").arg(request.core_budget));
        const std::vector<cost::LayoutPlan> plans = cost::plan_layouts(factory, request, model);
        if (shouldStop()) return;
        for (std::size_t i = 0; i < plans.size(); ++i) result.layouts.push_back(copyPlan(plans[i], static_cast<int>(i) + 1));
        ++done;

        for (const bool weak : {false, true}) {
            for (std::int64_t cores : weak ? weak_budgets : budgets) {
                postProgress(job.request, done, total,
                              (weak ? tr("Weak scaling: %1 cores") : tr("Strong scaling: %1 cores")).arg(cores));
                const std::optional<cost::ScalingPoint> point =
                    cost::scaling_point(factory, request, model, cores, weak ? cost::Scaling::Weak : cost::Scaling::Strong);
                if (shouldStop()) return;
                if (point) (weak ? result.weak_scaling : result.strong_scaling).push_back(copyPoint(*point));
                ++done;
            }
        }
        postProgress(job.request, total, total, tr("Done"));
        m_mailbox->post([this, request = job.request, result = std::move(result)] { emit planned(request, result); });
    } catch (const std::exception& error) {
        if (!shouldStop()) postFailure(job.request, QString::fromStdString(error.what()));
    }
}

void PlannerWorker::runTimeline(const TimelineJob& job) {
    const experiment::Experiment& experiment = job.experiment;
    try {
        const cost::Device device = cost::load_device_preset(experiment.device);
        const cost::CostModel cost_model(device);
        const cost::PlannerRequest request = makeRequest(experiment);
        Shape input = request.global_input;
        input[0] /= std::max<std::int64_t>(job.replicas, 1);
        const graph::Graph model = experiment::build_model(experiment, input);
        partition::SpatialGrid grid;
        grid.boundaries = job.boundaries;
        const partition::TilingPlan tiling(model, grid);
        cost::SimulationOptions options = request.simulation;
        options.record_timeline = true;
        const cost::StepPrediction step = cost::predict_step(model, tiling, job.replicas, cost_model, options);

        PredictedTimeline timeline;
        timeline.replicas = job.replicas;
        timeline.pieces = grid.pieces_per_axis();
        timeline.cores = static_cast<int>(tiling.num_cores());
        timeline.step_seconds = step.step_seconds;
        timeline.device_name = QString::fromStdString(device.name);
        {
            QStringList dims{QStringLiteral("1")};
            for (std::int64_t p : timeline.pieces) dims << QString::number(p);
            dims << QStringLiteral("1");
            timeline.layout = QStringLiteral("input_partition_dims [%1]").arg(dims.join(QStringLiteral(", ")));
            if (job.replicas > 1) timeline.layout = tr("%1 replicas × %2").arg(job.replicas).arg(timeline.layout);
        }

        // Halo peers per layer: who sends to each core (forward) and who sends gradients back (backward).
        std::map<int, std::vector<std::set<std::int64_t>>> senders_of;
        auto senders = [&](int layer) -> const std::vector<std::set<std::int64_t>>& {
            auto found = senders_of.find(layer);
            if (found != senders_of.end()) return found->second;
            std::vector<std::set<std::int64_t>> per_core(static_cast<std::size_t>(tiling.num_cores()));
            for (std::int64_t core = 0; core < tiling.num_cores(); ++core) {
                for (const partition::HaloTransfer& in : partition::incoming_halo(model, tiling, layer, core)) {
                    per_core[static_cast<std::size_t>(core)].insert(in.peer);
                }
            }
            return senders_of.emplace(layer, std::move(per_core)).first->second;
        };
        auto receivers = [&](int layer, std::int64_t owner) {
            std::set<std::int64_t> cores;
            const auto& per_core = senders(layer);
            for (std::size_t core = 0; core < per_core.size(); ++core) {
                if (per_core[core].contains(owner)) cores.insert(static_cast<std::int64_t>(core));
            }
            return cores;
        };

        const QString all_cores = QString::number(tiling.num_cores() * job.replicas);
        timeline.spans.reserve(static_cast<qsizetype>(step.timeline.size()));
        for (const cost::TimelineSpan& span : step.timeline) {
            PredictedSpan out;
            out.core = static_cast<int>(span.core);
            out.start_seconds = span.start_seconds;
            out.end_seconds = span.end_seconds;
            out.backward = span.backward;
            switch (span.kind) {
                case cost::SpanKind::Compute: out.kind = PredictedSpanKind::Compute; break;
                case cost::SpanKind::Halo: out.kind = PredictedSpanKind::Halo; break;
                case cost::SpanKind::AllReduce: out.kind = PredictedSpanKind::AllReduce; break;
            }
            if (span.layer < 0) {
                if (span.kind == cost::SpanKind::AllReduce) {
                    out.layer = span.backward ? tr("gradient all-reduce") : tr("loss reduction");
                    out.detail = span.backward ? tr("weight gradients summed over all %1 cores").arg(all_cores)
                                               : tr("partial loss sums of the replica's cores");
                } else {
                    out.layer = span.backward ? tr("optimizer update") : tr("loss");
                    out.detail = span.backward ? tr("weights updated from the reduced gradients")
                                               : tr("the loss over this core's logits");
                }
            } else {
                const graph::Node& node = model.node(span.layer);
                out.layer = QString::fromStdString(node.name);
                const QString op = QString::fromStdString(std::string(graph::op_name(node.kind)));
                if (span.kind == cost::SpanKind::Compute) {
                    out.detail = tr("%1 on %2 (output %3)")
                                     .arg(op, tileText(tiling.tile(span.layer, span.core)),
                                          QString::fromStdString(shape_to_string(node.output_shape)));
                } else if (span.kind == cost::SpanKind::Halo) {
                    if (span.peer >= 0) {
                        out.detail = tr("halo rows from core %1").arg(span.peer);
                    } else if (span.backward) {
                        out.detail = tr("halo gradients from cores %1").arg(coreList(receivers(span.layer, span.core)));
                    } else {
                        out.detail = tr("halo rows from cores %1").arg(coreList(senders(span.layer)[static_cast<std::size_t>(span.core)]));
                    }
                } else if (node.kind == graph::OpKind::BatchNorm) {
                    out.detail = span.backward ? tr("batch-norm gradient statistics, all-reduced")
                                               : tr("batch-norm statistics, all-reduced");
                } else if (span.backward) {
                    out.detail = tr("a bucket of weight gradients, all-reduced over %1 cores").arg(all_cores);
                } else {
                    out.detail = tr("%1 partial results, all-reduced").arg(op);
                }
            }
            timeline.spans.push_back(std::move(out));
        }
        m_mailbox->post([this, request = job.request, timeline = std::move(timeline)] { emit timelinePredicted(request, timeline); });
    } catch (const std::exception& error) {
        postFailure(job.request, QString::fromStdString(error.what()));
    }
}

}  // namespace tessera::ui
