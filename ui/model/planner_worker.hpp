// PlannerWorker: the planner's sweep off the GUI thread, as in Qt's mandelbrot example.
//
// plan() hands it a copy of an experiment (under a mutex); its thread ranks every layout for the
// experiment's core budget (cost::plan_layouts), then walks the strong and weak scaling curves one core
// count at a time (cost::scaling_point, the engine's definition of both curves, which `tessera-cli plan
// --sweep` prints too), checking between stages whether it should stop: a newer plan() restarts the
// work, destruction aborts it. predictTimeline() asks for one layout's predicted step with
// its timeline (cost::predict_step). Results leave as copied value types through queued signals, each
// with the request number plan()/predictTimeline() returned, so a receiver drops what it no longer wants.
// The thread and its hand-overs use the C++ library only (std::thread, std::mutex, a GuiMailbox for the
// results), so ThreadSanitizer sees all of them.
//
//   auto* worker = new PlannerWorker(this);
//   connect(worker, &PlannerWorker::planned, this, &Panel::onPlanned);   // (request, PlannerResult)
//   m_request = worker->plan(experiment);
//   result.layouts[0].layout   // "input_partition_dims [1, 2, 8, 1, 1]", best first
#pragma once

#include "experiment/experiment.hpp"

#include <QObject>
#include <QString>
#include <QVector>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace tessera::ui {

// One row of the planner's table: a copy of cost::LayoutPlan without engine types.
struct PlannedLayout {
    int rank = 0;                                       // 1-based position in the planner's order
    std::int64_t replicas = 1;
    std::vector<std::int64_t> pieces;                   // per spatial axis: (D,) H, W
    std::vector<std::vector<std::int64_t>> boundaries;  // the tile grid: per axis 0 = b_0 < … < b_k = extent
    QString layout;                                     // "2 replicas × input_partition_dims [1, 2, 2, 1]"
    bool valid = false;                                 // the partition rules allow it
    bool fits = false;                                  // every core's memory fits the device
    QString verdict;
    std::int64_t peak_memory = 0;                       // bytes, the fullest core
    double step_seconds = 0;
    double samples_per_second = 0;
    double fraction_of_peak = 0;                        // 0..1
    double exposed_communication = 0;                   // fraction of the step
    std::int64_t coresPerReplica() const;
    QString piecesText() const;                         // "2×2×4"
};

// The best layout at one core count of a scaling curve.
struct ScalingSample {
    std::int64_t cores = 0;
    std::int64_t global_batch = 0;
    bool feasible = false;  // some layout is valid and fits
    QString layout;
    double step_seconds = 0;
    double samples_per_second = 0;
};

struct PlannerResult {
    QString experiment_name;
    QString device_id;
    QString device_name;
    std::int64_t memory_per_core = 0;  // bytes, the device's capacity
    std::int64_t core_budget = 0;
    std::int64_t global_batch = 0;
    std::int64_t experiment_replicas = 1;               // the experiment's own layout
    std::vector<std::int64_t> experiment_pieces;
    QVector<PlannedLayout> layouts;                     // the planner's order: fitting fastest first, invalid last
    QVector<ScalingSample> strong_scaling;              // global batch fixed
    QVector<ScalingSample> weak_scaling;                // global batch × cores / budget (whole batches only)
};

enum class PredictedSpanKind { Compute, Halo, AllReduce };

// One span of one core's predicted step (cost::TimelineSpan with names instead of ids).
struct PredictedSpan {
    int core = 0;                 // core of the replica
    double start_seconds = 0;
    double end_seconds = 0;
    PredictedSpanKind kind = PredictedSpanKind::Compute;
    bool backward = false;
    QString layer;                // model node name, or "loss", "gradient all-reduce", "optimizer update"
    QString detail;               // op and output shape; for halos the peer cores
};

struct PredictedTimeline {
    std::int64_t replicas = 1;
    std::vector<std::int64_t> pieces;
    QString layout;
    QString device_name;
    int cores = 0;                // lanes: one replica's cores
    double step_seconds = 0;
    QVector<PredictedSpan> spans;
};

class GuiMailbox;

class PlannerWorker : public QObject {
    Q_OBJECT
public:
    explicit PlannerWorker(QObject* parent = nullptr);
    ~PlannerWorker() override;  // aborts the work in progress and joins the thread

    // Starts planning `experiment` (copied) and returns the request's number. A call while one runs
    // restarts the work; the older request's results are never emitted after its stage ends.
    quint64 plan(const tessera::experiment::Experiment& experiment);
    // Queues the predicted step of one layout of `experiment` (the newest queued request wins; it runs
    // after the sweep in progress). `boundaries` as in PlannedLayout.
    quint64 predictTimeline(const tessera::experiment::Experiment& experiment, std::int64_t replicas,
                            const std::vector<std::vector<std::int64_t>>& boundaries);

signals:  // emitted on the GUI thread
    void progress(quint64 request, int done, int total, QString stage);
    void planned(quint64 request, tessera::ui::PlannerResult result);
    void timelinePredicted(quint64 request, tessera::ui::PredictedTimeline timeline);
    void failed(quint64 request, QString message);

private:
    struct PlanJob {
        quint64 request = 0;
        tessera::experiment::Experiment experiment;
    };
    struct TimelineJob {
        quint64 request = 0;
        tessera::experiment::Experiment experiment;
        std::int64_t replicas = 1;
        std::vector<std::vector<std::int64_t>> boundaries;
    };

    void run();  // the thread: waits for jobs until aborted
    void runPlan(const PlanJob& job);
    void runTimeline(const TimelineJob& job);
    bool shouldStop();  // a newer plan arrived or the worker is going away
    // Worker thread: the signals, emitted on the GUI thread through the mailbox.
    void postProgress(quint64 request, int done, int total, QString stage);
    void postFailure(quint64 request, QString message);
    void startOrWake();

    GuiMailbox* m_mailbox;
    std::mutex m_mutex;
    std::condition_variable m_condition;
    // Guarded by m_mutex:
    std::optional<PlanJob> m_plan_job;          // waiting to run
    std::optional<TimelineJob> m_timeline_job;  // waiting to run
    quint64 m_next_request = 0;
    bool m_restart = false;
    bool m_abort = false;
    std::thread m_thread;  // started by the first request
};

}  // namespace tessera::ui
