// RunController: a training run on a worker thread, as Qt's threading examples do it — the experiment
// goes in as a copy when the run starts, a stop flag is checked after every step, and everything the
// run reports comes out as copied values, handed to the GUI thread through a GuiMailbox and emitted
// there as signals. The GUI never touches the live run.
//
//   RunController controller;
//   connect(&controller, &RunController::stepFinished, charts, &RunCharts::onStep);
//   controller.start(experiment, options);   // trains (or resumes from the model_dir) in the background
//   controller.requestStop();                // after the current step, with a checkpoint
#pragma once

#include "mesh/core_mesh.hpp"
#include "experiment/experiment.hpp"
#include "run/run_records.hpp"
#include "run/training_run.hpp"

#include <QMetaType>
#include <QObject>
#include <QString>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace tessera::ui {

// One step's events of every simulated core, for the timeline of a real step.
struct StepEvents {
    std::int64_t step = 0;
    std::int64_t cores = 0;
    std::vector<mesh::CoreEvent> events;
    // Model node names, indexed by CoreEvent::layer: made once per run and shared by its steps.
    std::shared_ptr<const std::vector<std::string>> layer_names;
};

class GuiMailbox;

class RunController : public QObject {
    Q_OBJECT
public:
    explicit RunController(QObject* parent = nullptr);
    ~RunController() override;  // asks the run to stop and joins its thread

    // Starts training (resuming from the model_dir's latest checkpoint). Returns false with lastError()
    // when a run is already going; errors of the experiment itself arrive as failed().
    bool start(const experiment::Experiment& experiment, const run::RunOptions& options);
    void requestStop();
    // From start() until finished() or failed() is emitted (GUI-thread state: a receiver of either
    // already sees false and may start the next run).
    bool isRunning() const { return m_running; }
    const QString& lastError() const { return m_last_error; }

signals:  // emitted on the GUI thread
    void started(const tessera::run::RunStart& start);
    void stepFinished(const tessera::run::StepRecord& step);
    void stepEventsReady(const tessera::ui::StepEvents& events);
    void evaluated(const tessera::run::EvalRecord& eval);
    void checkpointed(const tessera::run::CheckpointRecord& checkpoint);
    void finished(const tessera::run::RunSummary& summary);
    void failed(const QString& message);

private:
    class Bridge;  // the run's observer, on the worker thread

    // Worker thread: `delivery` (emitting one of the signals) runs on the GUI thread. postEnd's ends run
    // number `run_number` for isRunning() first.
    void post(std::function<void()> delivery);
    void postEnd(quint64 run_number, std::function<void()> delivery);
    void work(quint64 run_number, experiment::Experiment experiment, run::RunOptions options);

    GuiMailbox* m_mailbox;
    std::thread m_thread;
    std::atomic<bool> m_stop = false;
    bool m_running = false;  // GUI thread only
    quint64 m_run = 0;       // GUI thread only: the number of the newest run started
    QString m_last_error;
};

}  // namespace tessera::ui

Q_DECLARE_METATYPE(tessera::run::RunStart)
Q_DECLARE_METATYPE(tessera::run::StepRecord)
Q_DECLARE_METATYPE(tessera::run::EvalRecord)
Q_DECLARE_METATYPE(tessera::run::CheckpointRecord)
Q_DECLARE_METATYPE(tessera::run::RunSummary)
Q_DECLARE_METATYPE(tessera::ui::StepEvents)
