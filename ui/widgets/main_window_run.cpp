// MainWindow's training half: the Run dock (start, stop, resume, the run list, the timeline of a real
// step), the live charts, and the evaluations' overlays on the held-out images.
#include "widgets/main_window.hpp"

#include "io/volume_io.hpp"
#include "report/run_report.hpp"
#include "model/run_controller.hpp"
#include "run/detections_file.hpp"
#include "run/metrics_log.hpp"
#include "run/model_dir_lock.hpp"
#include "run/step_trace.hpp"
#include "widgets/detection_view.hpp"
#include "widgets/equivalence_view.hpp"
#include "widgets/run_charts.hpp"
#include "widgets/run_panel.hpp"

#include <QComboBox>
#include <QApplication>
#include <QDockWidget>
#include <QFileDialog>
#include <QMenu>
#include <QMenuBar>
#include <QPointer>
#include <QPushButton>
#include <QThread>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>

namespace tessera::ui {

void MainWindow::createRunDocks() {
    m_run_controller = new RunController(this);
    m_run_panel = new RunPanel(m_design, m_run_controller, m_model);
    QDockWidget* run_dock = makeDock(tr("Run"), QStringLiteral("runDock"), m_run_panel, true);
    addDockWidget(Qt::LeftDockWidgetArea, run_dock);
    // Designing and training take turns: the Partition and Run docks share the left column as tabs.
    if (auto* partition_dock = findChild<QDockWidget*>(QStringLiteral("partitionDock"))) {
        tabifyDockWidget(partition_dock, run_dock);
        partition_dock->raise();
    }

    m_run_charts = new RunCharts;
    QDockWidget* charts_dock = makeDock(tr("Training"), QStringLiteral("trainingDock"), m_run_charts, true);
    addDockWidget(Qt::BottomDockWidgetArea, charts_dock);
    if (auto* planner_dock = findChild<QDockWidget*>(QStringLiteral("plannerDock"))) tabifyDockWidget(planner_dock, charts_dock);

    // The equivalence view compares the designed layout with one core on the experiment's model.
    m_equivalence_view = new EquivalenceView;
    QDockWidget* equivalence_dock = makeDock(tr("Equivalence"), QStringLiteral("equivalenceDock"), m_equivalence_view, true);
    addDockWidget(Qt::BottomDockWidgetArea, equivalence_dock);
    tabifyDockWidget(charts_dock, equivalence_dock);
    const auto follow_design = [this] {
        if (!m_design->hasExperiment()) return;
        try {
            m_equivalence_view->setExperiment(experiment::parse_experiment(m_design->experimentText(), m_design->experiment().origin));
        } catch (const Error&) {
            // an invalid intermediate design: the view keeps the last valid one
        }
    };
    connect(m_design, &PartitionDesign::experimentChanged, this, follow_design);
    connect(m_design, &PartitionDesign::designChanged, this, follow_design);
    if (auto* planner_dock = findChild<QDockWidget*>(QStringLiteral("plannerDock"))) planner_dock->raise();

    // The charts follow the live run: its earlier sessions from the model_dir, then every step.
    connect(m_run_controller, &RunController::started, this, [this, charts_dock](const tessera::run::RunStart& start) {
        m_run_capacity = start.core_capacity_bytes;
        m_run_charts->removeRun(m_current_run);
        if (start.first_step > 0) m_run_charts->loadRun(m_current_run, start.model_dir);
        if (start.predicted_host_step_seconds > 0) {  // a calibrated host
            m_run_charts->setHostPrediction(m_current_run, start.predicted_host_step_seconds, start.host_prediction_uncertainty_seconds);
        }
        charts_dock->raise();
        if (auto* dock = findChild<QDockWidget*>(QStringLiteral("runDock"))) dock->raise();
    });
    connect(m_run_controller, &RunController::stepFinished, this, [this](const tessera::run::StepRecord& step) {
        m_run_charts->addStep(m_current_run, step);
        m_run_charts->setCoreMemory(m_current_run, step.core_peak_bytes, m_run_capacity);
    });
    connect(m_run_controller, &RunController::evaluated, this, [this](const tessera::run::EvalRecord& eval) {
        m_run_charts->addEval(m_current_run, eval);
    });

    connect(m_run_panel, &RunPanel::runStarted, this, [this](const QString& run, const std::filesystem::path&) {
        m_current_run = run;
    });
    connect(m_run_panel, &RunPanel::openRunRequested, this, [this](const std::filesystem::path& dir) { openRun(dir); });
    connect(m_run_controller, &RunController::evaluated, this, [this](const tessera::run::EvalRecord& eval) { showEvaluation(eval); });
    connect(m_run_panel->overlayBox(), &QComboBox::activated, this, [this] { m_overlay_chosen = true; });
    connect(m_run_panel, &RunPanel::exportReportRequested, this, &MainWindow::chooseReportFile);

}

void MainWindow::createRunActions() {
    // Run ▸ Open Run…, Export Report…: after the Experiment menu.
    auto* run_menu = new QMenu(tr("&Run"), this);
    run_menu->setObjectName(QStringLiteral("runMenu"));
    run_menu->addAction(tr("&Open Run…"), m_run_panel, &RunPanel::chooseRunToOpen);
    QAction* export_report = run_menu->addAction(tr("Export &Report…"), m_run_panel, &RunPanel::requestReport);
    export_report->setObjectName(QStringLiteral("exportReportAction"));
    export_report->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
    export_report->setToolTip(tr("The chosen run (the Run dock's list) as one HTML file for any browser (Ctrl+R)"));
    const QList<QAction*> top = menuBar()->actions();
    QAction* after_experiment = nullptr;
    for (int i = 0; i + 1 < top.size(); ++i) {
        if (top[i]->menu() && top[i]->text() == tr("E&xperiment")) after_experiment = top[i + 1];
    }
    menuBar()->insertMenu(after_experiment, run_menu);
    connect(run_menu, &QMenu::aboutToShow, this, [this, export_report] {
        export_report->setEnabled(!m_run_panel->chosenRunDir().empty() && !m_exporting_report);
    });
}

void MainWindow::chooseReportFile(const std::filesystem::path& model_dir) {
    if (m_exporting_report) {
        statusBar()->showMessage(tr("A report is being written; wait for it to finish"), 5000);
        return;
    }
    const QString suggested = QString::fromStdString((model_dir / "report.html").string());
    const QString file = QFileDialog::getSaveFileName(this, tr("Export the run's report"), suggested, tr("HTML report (*.html)"));
    if (file.isEmpty()) return;
    exportReport(model_dir, file.endsWith(QStringLiteral(".html"), Qt::CaseInsensitive) ? file.toStdString() : (file + QStringLiteral(".html")).toStdString());
}

void MainWindow::exportReport(const std::filesystem::path& model_dir, const std::filesystem::path& out) {
    if (m_exporting_report) return;
    m_exporting_report = true;
    m_run_panel->exportReportButton()->setEnabled(false);
    statusBar()->showMessage(tr("Writing the report of %1…").arg(RunPanel::runName(model_dir)));
    // Reading predictions and encoding images takes seconds for large volumes: off the GUI thread, the
    // result back as copied values.
    QPointer<MainWindow> window(this);
    QThread* worker = QThread::create([window, model_dir, out] {
        QString error;
        QStringList omissions;
        try {
            const report::ReportResult result = report::write_run_report(model_dir, out);
            for (const std::string& omission : result.omissions) omissions << QString::fromStdString(omission);
        } catch (const std::exception& e) {
            error = QString::fromStdString(e.what());
        }
        QMetaObject::invokeMethod(qApp, [window, out, error, omissions] {
            if (!window) return;
            window->m_exporting_report = false;
            window->m_run_panel->exportReportButton()->setEnabled(true);
            if (!error.isEmpty()) {
                window->statusBar()->clearMessage();
                window->showError(tr("Cannot write the report"), error);
                return;
            }
            const QString file = QString::fromStdString(out.string());
            window->statusBar()->showMessage(
                omissions.isEmpty() ? tr("Report written: %1 (open it in any browser)").arg(file)
                                    : tr("Report written: %1; left out: %2").arg(file, omissions.join(QStringLiteral("; "))),
                15000);
            emit window->reportExported(file, omissions);
        }, Qt::QueuedConnection);
    });
    connect(worker, &QThread::finished, worker, &QObject::deleteLater);
    worker->start();
}

bool MainWindow::showEvaluation(const tessera::run::EvalRecord& eval, const std::filesystem::path& model_dir) {
    if (!model_dir.empty()) m_run_panel->showScores(eval);  // an opened run's (the live run's come with its signal)
    if (eval.is_detection) {
        const std::filesystem::path file = run::locate_detections_file(eval.detection.detections_file, model_dir);
        if (file.empty()) return false;  // predictions not written (write_predictions off)
        const bool first = !m_detection_view->hasEvaluation();
        if (!m_detection_view->showEvaluation(file)) {
            statusBar()->showMessage(m_detection_view->statusText(), 8000);
            return false;
        }
        if (first) m_central_tabs->setCurrentWidget(m_detection_view);
        return true;
    }
    if (eval.predictions.empty() || eval.images.empty() || eval.truths.empty()) return false;
    try {
        const std::string image_path = eval.images.front().string();
        // The held-out image once; later evaluations only replace the prediction.
        if (!m_model->hasVolume() || m_model->volume()->source_path != image_path) {
            auto image = std::make_shared<tessera::Volume>(tessera::read_volume(eval.images.front()));
            image->source_path = image_path;
            auto truth = std::make_shared<tessera::LabelMap>(tessera::read_label_map(eval.truths.front()));
            showVolume(std::move(image), std::move(truth));
        }
        m_model->setPrediction(std::make_shared<tessera::LabelMap>(tessera::read_label_map(eval.predictions.front())));
        if (!m_overlay_chosen) {
            m_model->setOverlaySource(OverlaySource::Prediction);
            m_run_panel->overlayBox()->setCurrentIndex(static_cast<int>(OverlaySource::Prediction));
        }
    } catch (const std::exception& error) {
        statusBar()->showMessage(tr("Cannot show the evaluation: %1").arg(QString::fromUtf8(error.what())), 8000);
        return false;
    }
    return true;
}

void MainWindow::watchRun(const std::filesystem::path& model_dir) {
    m_watched_run = model_dir;
    if (!m_watch_timer) {
        m_watch_timer = new QTimer(this);
        m_watch_timer->setInterval(2000);
        connect(m_watch_timer, &QTimer::timeout, this, &MainWindow::refreshWatchedRun);
    }
    m_watch_timer->start();
    refreshWatchedRun();
}

// A run this studio does not train (opened, or trained by another process — MPI ranks, a terminal, a
// cluster job) recorded a step's events in its model_dir before each checkpoint: the Run dock's timeline
// shows the newest, read again when the file changes.
void MainWindow::showRecordedStep(const std::filesystem::path& model_dir) {
    const std::filesystem::path file = model_dir / run::step_trace_file_name;
    std::error_code error;
    const std::filesystem::file_time_type written = std::filesystem::last_write_time(file, error);
    if (error || (model_dir == m_trace_dir && written == m_trace_written)) return;
    m_trace_dir = model_dir;
    m_trace_written = written;
    try {
        run::StepTrace trace = run::read_step_trace(file);
        StepEvents events;
        events.step = trace.step;
        events.cores = trace.num_cores;
        events.events = std::move(trace.events);
        events.layer_names = std::make_shared<const std::vector<std::string>>(std::move(trace.layer_names));
        m_run_panel->showRecordedStep(events);
    } catch (const Error& failure) {
        statusBar()->showMessage(tr("The run's step timeline cannot be shown: %1").arg(QString::fromUtf8(failure.what())), 10000);
    }
}

void MainWindow::refreshWatchedRun() {
    if (m_watched_run.empty()) return;
    const std::optional<run::LockHolder> holder = run::ModelDirLock::holder(m_watched_run);
    m_run_charts->loadRun(RunPanel::runName(m_watched_run), m_watched_run);
    showRecordedStep(m_watched_run);
    const run::MetricsHistory history = run::read_metrics(m_watched_run);
    if (holder) {
        const QString where = QString::fromStdString(holder->describe());
        m_run_panel->setRunStatus(m_watched_run, tr("training elsewhere"),
                                  tr("Watching %1 read-only: it is being trained by %2, step %3.")
                                      .arg(RunPanel::runName(m_watched_run), where)
                                      .arg(history.steps.empty() ? 0 : history.steps.back().step));
        return;
    }
    // The other process let go: one last refresh, and the run is an ordinary finished one.
    m_watch_timer->stop();
    m_run_panel->setRunStatus(m_watched_run, tr("ended"), tr("%1 ended in the other process.").arg(RunPanel::runName(m_watched_run)));
    if (!history.evals.empty()) showEvaluation(history.evals.back(), m_watched_run);
    m_watched_run.clear();
}

bool MainWindow::openRun(const std::filesystem::path& model_dir) {
    if (run::ModelDirLock::holder(model_dir)) {
        bringBackDesignDocks();
        m_run_panel->addFinishedRun(model_dir);
        watchRun(model_dir);
        return true;
    }
    const run::MetricsHistory history = run::read_metrics(model_dir);
    if (history.steps.empty() && history.evals.empty()) {
        showError(tr("Cannot open run"), tr("%1 holds no metrics.jsonl with records: is it a run's model_dir?")
                                             .arg(QString::fromStdString(model_dir.string())));
        return false;
    }
    bringBackDesignDocks();
    m_run_panel->addOpenedRun(model_dir, history);
    m_run_charts->loadRun(RunPanel::runName(model_dir), model_dir);
    if (!history.evals.empty()) showEvaluation(history.evals.back(), model_dir);
    statusBar()->showMessage(tr("Opened run %1").arg(RunPanel::runName(model_dir)), 5000);
    showRecordedStep(model_dir);  // after: a step trace it cannot read says so in the status bar
    return true;
}

}  // namespace tessera::ui
