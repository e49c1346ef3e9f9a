#include "model/run_controller.hpp"

#include "model/gui_mailbox.hpp"

namespace tessera::ui {

// Forwards the run's reports as the controller's signals (copied on the worker thread, emitted on the GUI
// thread); copies the mesh's events after each step.
class RunController::Bridge final : public run::RunObserver {
public:
    Bridge(RunController* controller, quint64 run_number, run::TrainingRun& training)
        : m_controller(controller), m_run_number(run_number), m_training(training) {
        auto names = std::make_shared<std::vector<std::string>>();
        for (const graph::Node& node : training.mesh().model().nodes()) names->push_back(node.name);
        m_layer_names = std::move(names);
    }
    void on_start(const run::RunStart& start) override {
        m_controller->post([controller = m_controller, start] { emit controller->started(start); });
    }
    void on_step(const run::StepRecord& step) override {
        StepEvents events;
        events.step = step.step;
        events.cores = m_training.mesh().num_cores();
        events.events = m_training.mesh().events();
        events.layer_names = m_layer_names;
        m_controller->post([controller = m_controller, step, events = std::move(events)] {
            emit controller->stepFinished(step);
            emit controller->stepEventsReady(events);
        });
    }
    void on_eval(const run::EvalRecord& eval) override {
        m_controller->post([controller = m_controller, eval] { emit controller->evaluated(eval); });
    }
    void on_checkpoint(const run::CheckpointRecord& checkpoint) override {
        m_controller->post([controller = m_controller, checkpoint] { emit controller->checkpointed(checkpoint); });
    }
    void on_finish(const run::RunSummary& summary) override {
        m_controller->postEnd(m_run_number, [controller = m_controller, summary] { emit controller->finished(summary); });
    }

private:
    RunController* m_controller;
    quint64 m_run_number;
    run::TrainingRun& m_training;
    std::shared_ptr<const std::vector<std::string>> m_layer_names;
};

RunController::RunController(QObject* parent) : QObject(parent), m_mailbox(new GuiMailbox(this)) {
    qRegisterMetaType<tessera::run::RunStart>();
    qRegisterMetaType<tessera::run::StepRecord>();
    qRegisterMetaType<tessera::run::EvalRecord>();
    qRegisterMetaType<tessera::run::CheckpointRecord>();
    qRegisterMetaType<tessera::run::RunSummary>();
    qRegisterMetaType<tessera::ui::StepEvents>();
}

RunController::~RunController() {
    m_stop = true;
    if (m_thread.joinable()) m_thread.join();
}

bool RunController::start(const experiment::Experiment& experiment, const run::RunOptions& options) {
    if (m_running) {
        m_last_error = tr("A run is in progress; stop it first.");
        return false;
    }
    // The previous run has reported its end; its thread is past its last step, releasing the model_dir.
    if (m_thread.joinable()) m_thread.join();
    m_stop = false;
    m_running = true;
    m_last_error.clear();
    m_thread = std::thread([this, run_number = ++m_run, experiment, options] { work(run_number, experiment, options); });
    return true;
}

void RunController::requestStop() { m_stop = true; }

void RunController::post(std::function<void()> delivery) { m_mailbox->post(std::move(delivery)); }

void RunController::postEnd(quint64 run_number, std::function<void()> delivery) {
    m_mailbox->post([this, run_number, delivery = std::move(delivery)] {
        if (run_number == m_run) m_running = false;  // not when a receiver of the end has started the next run
        delivery();
    });
}

void RunController::work(quint64 run_number, experiment::Experiment experiment, run::RunOptions options) {
    // The run keeps every core busy; the studio must stay responsive beside it. Set before the run builds
    // its thread pool and prefetcher, which inherit it.
    scheduleThisThreadAsBatch();
    try {
        run::TrainingRun training(std::move(experiment), options);
        Bridge bridge(this, run_number, training);
        training.train(&bridge, &m_stop);
    } catch (const std::exception& error) {
        postEnd(run_number, [this, message = QString::fromUtf8(error.what())] { emit failed(message); });
    }
    // A run that returned without its summary still ends (nothing is emitted for it).
    postEnd(run_number, [] {});
}

}  // namespace tessera::ui
