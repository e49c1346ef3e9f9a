#include "model/run_controller.hpp"

#include "core/error.hpp"

#include <QThread>

#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tessera::ui {

namespace {

// Forwards the run's reports as the controller's signals (emitted on the worker thread, delivered
// queued to receivers on the GUI thread); copies the mesh's events after each step.
class Bridge final : public run::RunObserver {
public:
    Bridge(RunController* controller, run::TrainingRun& training) : m_controller(controller), m_training(training) {
        auto names = std::make_shared<std::vector<std::string>>();
        for (const graph::Node& node : training.mesh().model().nodes()) names->push_back(node.name);
        m_layer_names = std::move(names);
    }
    void on_start(const run::RunStart& start) override { emit m_controller->started(start); }
    void on_step(const run::StepRecord& step) override {
        emit m_controller->stepFinished(step);
        StepEvents events;
        events.step = step.step;
        events.cores = m_training.mesh().num_cores();
        events.events = m_training.mesh().events();
        events.layer_names = m_layer_names;
        emit m_controller->stepEventsReady(events);
    }
    void on_eval(const run::EvalRecord& eval) override { emit m_controller->evaluated(eval); }
    void on_checkpoint(const run::CheckpointRecord& checkpoint) override { emit m_controller->checkpointed(checkpoint); }
    void on_finish(const run::RunSummary& summary) override { emit m_controller->finished(summary); }

private:
    RunController* m_controller;
    run::TrainingRun& m_training;
    std::shared_ptr<const std::vector<std::string>> m_layer_names;
};

}  // namespace

RunController::RunController(QObject* parent) : QObject(parent) {
    qRegisterMetaType<tessera::run::RunStart>();
    qRegisterMetaType<tessera::run::StepRecord>();
    qRegisterMetaType<tessera::run::EvalRecord>();
    qRegisterMetaType<tessera::run::CheckpointRecord>();
    qRegisterMetaType<tessera::run::RunSummary>();
    qRegisterMetaType<tessera::ui::StepEvents>();
}

RunController::~RunController() {
    if (m_thread) {
        m_stop = true;
        m_thread->wait();
        delete m_thread;
    }
}

bool RunController::isRunning() const { return m_thread && m_thread->isRunning(); }

bool RunController::start(const experiment::Experiment& experiment, const run::RunOptions& options) {
    if (isRunning()) {
        m_last_error = tr("A run is in progress; stop it first.");
        return false;
    }
    if (m_thread) {
        m_thread->wait();
        delete m_thread;
    }
    m_stop = false;
    m_last_error.clear();
    m_thread = QThread::create([this, experiment, options] { work(experiment, options); });
    m_thread->setObjectName(QStringLiteral("training run"));
    m_thread->start();
    return true;
}

void RunController::requestStop() { m_stop = true; }

void RunController::work(experiment::Experiment experiment, run::RunOptions options) {
    // The run keeps every core busy; the studio must stay responsive beside it. On Linux a thread's nice
    // value is its own and threads inherit it from the thread that creates them, so lowering this
    // thread's priority before the run builds its thread pool lowers the whole run, and the GUI thread
    // is served first.
#ifdef __linux__
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
#endif
    try {
        run::TrainingRun training(std::move(experiment), options);
        Bridge bridge(this, training);
        training.train(&bridge, &m_stop);
    } catch (const std::exception& error) {
        emit failed(QString::fromUtf8(error.what()));
    }
}

}  // namespace tessera::ui
