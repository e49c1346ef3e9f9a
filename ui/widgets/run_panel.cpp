#include "widgets/run_panel.hpp"

#include "run/model_dir_lock.hpp"

#include "widgets/precision_recall_chart.hpp"
#include "widgets/timeline_chart.hpp"

#include "core/units.hpp"

#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QTimer>
#include <thread>
#include <QFileInfo>
#include <QToolButton>
#include <QTreeWidget>
#include <QVBoxLayout>

namespace tessera::ui {

namespace {

enum RunColumn { NameColumn, StatusColumn, StepColumn, LossColumn, ScoreColumn, DirColumn };

// An evaluation's headline score, as the run list shows it: mean Dice for segmentation, accuracy for a
// classifier, AP@[.5:.95] for a detector.
QString score_text(const tessera::run::EvalRecord& eval) {
    if (eval.is_detection) return QObject::tr("AP %1").arg(eval.detection.ap, 0, 'f', 4);
    if (eval.classes.empty()) return QObject::tr("accuracy %1").arg(eval.accuracy, 0, 'f', 4);
    return QObject::tr("Dice %1").arg(eval.mean_dice, 0, 'f', 4);
}

QString duration_text(double seconds) { return QString::fromStdString(format_duration(seconds)); }

QString path_text(const std::filesystem::path& path) { return QString::fromStdString(path.string()); }

TimelineBar::Kind bar_kind(mesh::EventKind kind) {
    switch (kind) {
        case mesh::EventKind::Compute: return TimelineBar::Kind::Compute;
        case mesh::EventKind::Halo: return TimelineBar::Kind::Halo;
        case mesh::EventKind::AllReduce: return TimelineBar::Kind::AllReduce;
        case mesh::EventKind::Wait: return TimelineBar::Kind::Idle;
    }
    return TimelineBar::Kind::Other;
}

}  // namespace

QString RunPanel::runName(const std::filesystem::path& model_dir) {
    const std::filesystem::path clean = model_dir.has_filename() ? model_dir : model_dir.parent_path();
    return QString::fromStdString(clean.filename().string());
}

RunPanel::RunPanel(PartitionDesign* design, RunController* controller, ViewerModel* viewer, QWidget* parent)
    : QWidget(parent), m_design(design), m_controller(controller), m_viewer(viewer) {
    auto* layout = new QVBoxLayout(this);
    auto* form = new QFormLayout;
    auto* dir_row = new QHBoxLayout;
    m_model_dir = new QLineEdit(this);
    m_model_dir->setToolTip(tr("Checkpoints, metrics and predictions go here; a folder with checkpoints resumes from the latest"));
    auto* browse = new QToolButton(this);
    browse->setText(QStringLiteral("…"));
    browse->setToolTip(tr("Choose the run's model_dir"));
    connect(browse, &QToolButton::clicked, this, &RunPanel::chooseModelDir);
    dir_row->addWidget(m_model_dir, 1);
    dir_row->addWidget(browse);
    form->addRow(tr("model_dir"), dir_row);
    m_steps = new QSpinBox(this);
    m_steps->setRange(1, 100000000);
    m_steps->setToolTip(tr("Steps to train to (the experiment's steps unless changed here)"));
    form->addRow(tr("Steps"), m_steps);
    m_ranks = new QSpinBox(this);
    m_ranks->setRange(1, 256);
    m_ranks->setSpecialValueText(tr("1 (in the studio)"));
    m_ranks->setToolTip(tr("Processes the simulated cores are spread over: 1 trains in the studio's own process; more starts "
                           "mpirun -np K tessera-cli train … --backend mpi on this machine (the saved experiment file), "
                           "bitwise the same run, and watches its model_dir"));
    form->addRow(tr("MPI ranks"), m_ranks);
    layout->addLayout(form);
    m_launcher = new MpiLauncher(this);

    auto* buttons = new QHBoxLayout;
    m_start = new QPushButton(tr("&Train"), this);
    m_start->setToolTip(tr("Train the designed experiment on the simulated cores (resumes from the model_dir's latest checkpoint) — F5"));
    m_start->setShortcut(QKeySequence(Qt::Key_F5));
    m_stop = new QPushButton(tr("&Stop"), this);
    m_stop->setToolTip(tr("Stop after the current step, with a checkpoint (Shift+F5)"));
    m_stop->setShortcut(QKeySequence(Qt::SHIFT | Qt::Key_F5));
    m_stop->setEnabled(false);
    m_open = new QPushButton(tr("&Open Run…"), this);
    m_open->setToolTip(tr("Show a finished run's charts and predictions from its model_dir"));
    m_export_report = new QPushButton(tr("&Report…"), this);
    m_export_report->setToolTip(tr("Export the chosen run as one HTML file: charts, partition, timeline, best and worst cases"));
    m_export_report->setEnabled(false);
    connect(m_export_report, &QPushButton::clicked, this, &RunPanel::requestReport);
    connect(m_start, &QPushButton::clicked, this, &RunPanel::startRun);
    connect(m_stop, &QPushButton::clicked, this, &RunPanel::stopRun);
    connect(m_open, &QPushButton::clicked, this, &RunPanel::chooseRunToOpen);
    buttons->addWidget(m_start);
    buttons->addWidget(m_stop);
    layout->addLayout(buttons);
    // Past runs on a row of their own: four buttons do not fit the dock's default width.
    auto* past_runs = new QHBoxLayout;
    past_runs->addWidget(m_open);
    past_runs->addWidget(m_export_report);
    layout->addLayout(past_runs);

    m_progress = new QProgressBar(this);
    m_progress->setToolTip(tr("Steps done of the run's total"));
    m_progress->setFormat(tr("%v / %m steps"));
    layout->addWidget(m_progress);
    m_status = new QLabel(tr("No run yet."), this);
    m_status->setWordWrap(true);
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_status);
    m_notes = new QLabel(this);
    m_notes->setWordWrap(true);
    m_notes->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_notes->hide();
    layout->addWidget(m_notes);

    m_overlay_row = new QWidget(this);
    auto* overlay_row = new QHBoxLayout(m_overlay_row);
    overlay_row->setContentsMargins(0, 0, 0, 0);
    overlay_row->addWidget(new QLabel(tr("Overlay"), m_overlay_row));
    m_overlay = new QComboBox(m_overlay_row);
    m_overlay->addItems({tr("Ground truth"), tr("Prediction"), tr("Errors (FP red, FN blue, wrong class yellow)")});
    m_overlay->setToolTip(tr("What the label overlay shows in the slice views and as 3D surfaces"));
    connect(m_overlay, &QComboBox::activated, this, [this](int index) { m_viewer->setOverlaySource(static_cast<OverlaySource>(index)); });
    overlay_row->addWidget(m_overlay, 1);
    layout->addWidget(m_overlay_row);

    auto* splitter = new QSplitter(Qt::Vertical, this);
    m_runs = new QTreeWidget(splitter);
    m_runs->setHeaderLabels({tr("Run"), tr("Status"), tr("Step"), tr("Loss"), tr("Score"), tr("model_dir")});
    m_runs->headerItem()->setToolTip(ScoreColumn, tr("The last evaluation's mean Dice (segmentation), accuracy (a "
                                                     "classifier) or AP@[.5:.95] (a detector)"));
    m_runs->setRootIsDecorated(false);
    m_runs->setToolTip(tr("The runs of this session and those opened; double-click to show a run's charts again"));
    connect(m_runs, &QTreeWidget::itemDoubleClicked, this, [this](QTreeWidgetItem* item) {
        emit openRunRequested(item->text(DirColumn).toStdString());
    });
    m_classes = new QTableWidget(0, 3, splitter);
    m_classes->setHorizontalHeaderLabels({tr("Class"), tr("Dice"), tr("IoU")});
    m_classes->horizontalHeader()->setStretchLastSection(true);
    m_classes->verticalHeader()->hide();
    m_classes->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_classes->setToolTip(tr("The last evaluation's scores per class on the held-out images"));
    m_precision_recall = new PrecisionRecallChart(splitter);
    m_precision_recall->hide();
    connect(m_classes, &QTableWidget::currentCellChanged, this, [this](int row) {
        // Row 0 is "all classes" for a detector: no single curve.
        m_precision_recall->highlightClass(row - 1);
    });
    auto* timeline_box = new QWidget(splitter);
    auto* timeline_layout = new QVBoxLayout(timeline_box);
    timeline_layout->setContentsMargins(0, 0, 0, 0);
    auto* step_row = new QHBoxLayout;
    step_row->addWidget(new QLabel(tr("Timeline of step"), timeline_box));
    m_timeline_step = new QSpinBox(timeline_box);
    m_timeline_step->setRange(0, 0);
    m_timeline_step->setSpecialValueText(tr("latest"));
    m_timeline_step->setToolTip(tr("The step whose recorded events the timeline shows (the last %1 steps are kept); "
                                   "\"latest\" follows the run").arg(max_kept_steps));
    connect(m_timeline_step, &QSpinBox::valueChanged, this, &RunPanel::showStepTimeline);
    step_row->addWidget(m_timeline_step, 1);
    timeline_layout->addLayout(step_row);
    m_timeline = new TimelineChart(timeline_box);
    timeline_layout->addWidget(m_timeline, 1);
    m_timeline->setPlaceholderText(tr("The timeline of a real step appears here while a run trains"));
    m_timeline->setMinimumHeight(120);
    layout->addWidget(splitter, 1);

    m_timeline_timer = new QTimer(this);
    m_timeline_timer->setInterval(500);
    connect(m_timeline_timer, &QTimer::timeout, this, &RunPanel::refreshTimeline);

    connect(m_controller, &RunController::started, this, &RunPanel::onStarted);
    connect(m_controller, &RunController::stepFinished, this, &RunPanel::onStep);
    connect(m_controller, &RunController::stepEventsReady, this, &RunPanel::onStepEvents);
    connect(m_controller, &RunController::evaluated, this, &RunPanel::onEvaluated);
    connect(m_controller, &RunController::finished, this, &RunPanel::onFinished);
    connect(m_controller, &RunController::failed, this, &RunPanel::onFailed);
    connect(m_design, &PartitionDesign::experimentChanged, this, &RunPanel::onExperimentChanged);
    connect(m_launcher, &MpiLauncher::runStarted, this, [this](const QString& model_dir) {
        itemFor(m_running_dir)->setText(StatusColumn, tr("training on %1 ranks").arg(m_ranks->value()));
        m_status->setText(tr("Training on %1 MPI ranks (mpirun); its charts follow the model_dir.").arg(m_ranks->value()));
        emit openRunRequested(model_dir.toStdString());
    });
    connect(m_launcher, &MpiLauncher::finished, this, &RunPanel::onMpiRunFinished);
    onExperimentChanged();
}

void RunPanel::onExperimentChanged() {
    const bool trainable = m_design->hasExperiment() && m_design->experiment().is_trainable();
    m_start->setEnabled(trainable && !m_controller->isRunning());
    if (!m_design->hasExperiment()) return;
    const experiment::Experiment& e = m_design->experiment();
    // A detector's boxes are drawn in the Detections tab; the label overlay is a segmentation's.
    m_overlay_row->setVisible(e.model.kind != experiment::ModelKind::RetinaNet);
    if (!trainable) {
        m_status->setText(tr("This experiment is plan-only: add a \"data\" section and \"steps\" to train it."));
        return;
    }
    m_steps->setValue(static_cast<int>(e.training.steps));
    m_model_dir->setText(path_text(std::filesystem::absolute(run::default_model_dir(e))));
}

QTreeWidgetItem* RunPanel::itemFor(const std::filesystem::path& model_dir) {
    const QString dir = path_text(model_dir);
    for (int i = 0; i < m_runs->topLevelItemCount(); ++i) {
        if (m_runs->topLevelItem(i)->text(DirColumn) == dir) return m_runs->topLevelItem(i);
    }
    auto* item = new QTreeWidgetItem(m_runs);
    item->setText(NameColumn, runName(model_dir));
    item->setText(DirColumn, dir);
    m_export_report->setEnabled(true);
    return item;
}

void RunPanel::startRun() {
    if (!m_design->hasExperiment() || m_controller->isRunning() || m_launcher->isRunning()) return;
    try {
        // The design as it stands (grid, fields), exactly what Save would write.
        experiment::Experiment e = experiment::parse_experiment(m_design->experimentText(), m_design->experiment().origin);
        experiment::place_in_directory(e, m_design->experiment().directory);
        experiment::check_trainable(e);
        run::RunOptions options;
        options.steps = m_steps->value();
        options.model_dir = m_model_dir->text().toStdString();
        options.command = "tessera studio";
        // A model_dir another process trains in is watched, not written: two runs would mix their files.
        if (const auto holder = run::ModelDirLock::holder(*options.model_dir)) {
            m_status->setText(tr("%1 is in use by %2: watching it read-only.")
                                  .arg(m_model_dir->text(), QString::fromStdString(holder->describe())));
            emit openRunRequested(std::filesystem::absolute(*options.model_dir));
            return;
        }
        m_running_dir = std::filesystem::absolute(*options.model_dir);
        m_steps_seen = 0;
        m_seconds_sum = 0;
        if (m_ranks->value() > 1) {
            // Every rank reads the experiment from disk: the file as saved, not the studio's edits.
            if (m_design->path().isEmpty() || m_design->isModified()) {
                m_status->setText(tr("Save the experiment first (File ▸ Save): every MPI rank reads it from its file."));
                return;
            }
            const int host_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
            MpiLaunch launch;
            launch.experiment = QFileInfo(m_design->path()).absoluteFilePath();
            launch.model_dir = path_text(m_running_dir);
            launch.steps = m_steps->value();
            launch.ranks = m_ranks->value();
            launch.threads_per_rank = std::max(1, host_cores / launch.ranks);
            if (!m_launcher->start(launch)) {
                m_status->setText(m_launcher->lastError());
                return;
            }
            QTreeWidgetItem* item = itemFor(m_running_dir);
            item->setText(StatusColumn, tr("starting"));
            m_start->setEnabled(false);
            m_stop->setEnabled(true);
            m_status->setText(tr("Starting %1 MPI ranks (mpirun -np %1, %2 thread(s) each)…").arg(launch.ranks).arg(launch.threads_per_rank));
            return;
        }
        if (!m_controller->start(e, options)) {
            m_status->setText(m_controller->lastError());
            return;
        }
    } catch (const std::exception& error) {
        onFailed(QString::fromUtf8(error.what()));
        return;
    }
    QTreeWidgetItem* item = itemFor(m_running_dir);
    item->setText(StatusColumn, tr("starting"));
    m_start->setEnabled(false);
    m_stop->setEnabled(true);
    m_status->setText(tr("Building the simulated cores…"));
    showNotes({});
    m_progress->setRange(0, 0);  // busy until the first report
    emit runStarted(runName(m_running_dir), m_running_dir);
}

void RunPanel::stopRun() {
    if (m_launcher->isRunning()) {
        m_launcher->requestStop();
        m_stop->setEnabled(false);
        m_status->setText(tr("Stopping the MPI run after the current step (a checkpoint is written)…"));
        return;
    }
    m_controller->requestStop();
    m_stop->setEnabled(false);
    m_status->setText(tr("Stopping after the current step (a checkpoint is written)…"));
}

void RunPanel::onStarted(const tessera::run::RunStart& start) {
    m_step_events.clear();
    m_timeline_recorded = false;
    m_total_steps = start.total_steps;
    m_first_step = start.first_step;
    m_progress->setRange(0, static_cast<int>(start.total_steps));
    m_progress->setValue(static_cast<int>(start.first_step));
    itemFor(m_running_dir)->setText(StatusColumn, start.resumed ? tr("resumed") : tr("running"));
    QString host;  // this host's predicted step, when it is calibrated
    if (start.predicted_host_step_seconds > 0) {
        host = tr(" · %1 ms").arg(start.predicted_host_step_seconds * 1e3, 0, 'f', 1);
        if (start.host_prediction_uncertainty_seconds > 0) host += tr(" ± %1").arg(start.host_prediction_uncertainty_seconds * 1e3, 0, 'f', 1);
        host += tr(" here");
    }
    m_status->setText(tr("%1 · %2 simulated cores (%3) · %4 predicted per step on %5%6%7")
                          .arg(QString::fromStdString(start.experiment))
                          .arg(start.num_cores)
                          .arg(QString::fromStdString(start.layout))
                          .arg(QStringLiteral("%1 ms").arg(start.predicted_step_seconds * 1e3, 0, 'f', 1))
                          .arg(QString::fromStdString(start.device))
                          .arg(host)
                          .arg(start.resumed ? tr(" · resumed after step %1").arg(start.first_step) : QString()));
    showNotes(start.notes);
    m_timeline_timer->start();
}

void RunPanel::onStep(const tessera::run::StepRecord& step) {
    ++m_steps_seen;
    m_seconds_sum += step.host_seconds;
    const double per_step = m_seconds_sum / static_cast<double>(m_steps_seen);
    const double eta = per_step * static_cast<double>(m_total_steps - step.step);
    m_progress->setValue(static_cast<int>(step.step));
    m_progress->setFormat(tr("%v / %m steps · ETA %1").arg(duration_text(eta)));
    QTreeWidgetItem* item = itemFor(m_running_dir);
    item->setText(StepColumn, QString::number(step.step));
    item->setText(LossColumn, QString::number(step.loss, 'f', 4));
    item->setText(StatusColumn, tr("running"));
}

void RunPanel::onStepEvents(const tessera::ui::StepEvents& events) {
    m_step_events[events.step] = events;
    while (m_step_events.size() > max_kept_steps) m_step_events.erase(m_step_events.begin());
    m_timeline_step->setMaximum(static_cast<int>(events.step));
    m_timeline_dirty = true;
}

void RunPanel::showRecordedStep(const tessera::ui::StepEvents& events) {
    if (m_controller->isRunning()) return;
    m_step_events.clear();
    m_timeline_recorded = true;
    m_step_events[events.step] = events;
    m_timeline_step->setMaximum(static_cast<int>(events.step));
    m_timeline_step->setValue(0);
    m_timeline_dirty = false;
    showStepTimeline(0);
}

std::vector<std::int64_t> RunPanel::keptSteps() const {
    std::vector<std::int64_t> steps;
    for (const auto& [step, events] : m_step_events) steps.push_back(step);
    return steps;
}

// Draws the newest step at most twice a second while following the run.
void RunPanel::refreshTimeline() {
    if (!m_timeline_dirty || m_timeline_step->value() != 0 || m_step_events.empty()) return;
    m_timeline_dirty = false;
    showStepTimeline(0);
}

void RunPanel::showStepTimeline(int chosen) {
    if (m_step_events.empty()) return;
    // 0 is "latest"; a step no longer kept shows the nearest kept one after it.
    auto it = chosen == 0 ? std::prev(m_step_events.end()) : m_step_events.lower_bound(chosen);
    if (it == m_step_events.end()) it = std::prev(m_step_events.end());
    const StepEvents& step = it->second;
    std::vector<TimelineBar> bars;
    bars.reserve(step.events.size());
    for (const mesh::CoreEvent& event : step.events) {
        TimelineBar bar;
        bar.lane = static_cast<int>(event.core);
        bar.start_ms = event.start_seconds * 1e3;
        bar.end_ms = event.end_seconds * 1e3;
        bar.kind = bar_kind(event.kind);
        bar.backward = event.phase == mesh::StepPhase::Backward;
        bar.label = step.layer_names && event.layer >= 0 && static_cast<std::size_t>(event.layer) < step.layer_names->size()
                        ? QString::fromStdString((*step.layer_names)[static_cast<std::size_t>(event.layer)])
                        : (event.phase == mesh::StepPhase::Update ? tr("update") : tr("loss"));
        QString detail = QString::fromUtf8(mesh::step_phase_name(event.phase).data(),
                                           static_cast<qsizetype>(mesh::step_phase_name(event.phase).size()));
        if (event.flops > 0) detail += tr(", %1 MFLOP").arg(event.flops / 1e6, 0, 'f', 1);
        if (event.bytes > 0) detail += tr(", %1 KiB").arg(static_cast<double>(event.bytes) / 1024.0, 0, 'f', 1);
        if (event.peer >= 0) detail += tr(", with core %1").arg(event.peer);
        bar.detail = detail;
        bars.push_back(std::move(bar));
    }
    m_timeline->setTimeline(std::move(bars), static_cast<int>(step.cores),
                            m_timeline_recorded ? tr("Step %1 on the simulated cores (recorded in step_trace.json)").arg(step.step)
                                                : tr("Step %1 on the simulated cores (measured on this host)").arg(step.step));
}

void RunPanel::onEvaluated(const tessera::run::EvalRecord& eval) {
    itemFor(m_running_dir)->setText(ScoreColumn, score_text(eval));
    showScores(eval);
}

void RunPanel::showScores(const tessera::run::EvalRecord& eval) {
    const QSignalBlocker block(m_classes);
    m_classes->clearContents();
    m_classes->setRowCount(0);
    const auto add_row = [this](const QStringList& cells, const QString& tip = {}) {
        const int row = m_classes->rowCount();
        m_classes->insertRow(row);
        for (int column = 0; column < static_cast<int>(cells.size()); ++column) {
            auto* item = new QTableWidgetItem(cells[column]);
            if (column > 0) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
            if (!tip.isEmpty()) item->setToolTip(tip);
            m_classes->setItem(row, column, item);
        }
    };
    if (eval.is_detection) {
        // A detector: COCO's scores, the means over the classes with held-out objects first, then each class
        // (— where a class has no held-out objects: AP is undefined, not 0).
        const run::DetectionEvalRecord& d = eval.detection;
        const auto score = [this](double value) { return value < 0 ? tr("—") : QString::number(value, 'f', 3); };
        m_classes->setColumnCount(6);
        m_classes->setHorizontalHeaderLabels({tr("Class"), tr("AP"), tr("AP50"), tr("AP75"), tr("Recall"), tr("Objects")});
        add_row({tr("all classes"), score(d.ap), score(d.ap50), score(d.ap75), score(d.ar100), QString::number(d.num_ground_truth)},
                tr("Step %1: AP@[.5:.95] %2 · AP small/medium/large %3 / %4 / %5 · %6 detections, %7 matched at IoU 0.5")
                    .arg(eval.step)
                    .arg(score(d.ap), score(d.ap_small), score(d.ap_medium), score(d.ap_large))
                    .arg(d.num_detections)
                    .arg(d.num_true_positives));
        QFont bold = m_classes->font();
        bold.setBold(true);
        for (int column = 0; column < m_classes->columnCount(); ++column) m_classes->item(0, column)->setFont(bold);
        for (const run::DetectionClassRecord& c : d.classes) {
            add_row({QString::fromStdString(c.name), score(c.ap), score(c.ap50), score(c.ap75), score(c.recall),
                     QString::number(c.num_ground_truth)});
        }
        m_precision_recall->setEvaluation(d.classes, eval.step);
        m_precision_recall->show();
        return;
    }
    m_precision_recall->hide();
    m_classes->setColumnCount(3);
    m_classes->setHorizontalHeaderLabels({tr("Class"), tr("Dice"), tr("IoU")});
    for (const run::ClassRecord& c : eval.classes) {
        add_row({QString::fromStdString(c.name), c.is_present ? QString::number(c.dice, 'f', 4) : tr("—"),
                 c.is_present ? QString::number(c.iou, 'f', 4) : tr("—")});
    }
    if (eval.classes.empty()) add_row({tr("accuracy"), QString::number(eval.accuracy, 'f', 4)});
}

void RunPanel::onFinished(const tessera::run::RunSummary& summary) {
    m_timeline_timer->stop();
    refreshTimeline();
    QTreeWidgetItem* item = itemFor(m_running_dir);
    item->setText(StatusColumn, summary.stopped ? tr("stopped") : tr("finished"));
    item->setText(StepColumn, QString::number(summary.last_step));
    m_progress->setRange(0, static_cast<int>(std::max<std::int64_t>(m_total_steps, 1)));
    m_progress->setValue(static_cast<int>(summary.last_step));
    m_progress->setFormat(tr("%v / %m steps"));
    m_status->setText(summary.stopped ? tr("Stopped after step %1; Train resumes from its checkpoint.").arg(summary.last_step)
                                      : tr("Finished: %1 steps in %2, mean step %3 on this host.")
                                            .arg(summary.last_step)
                                            .arg(duration_text(summary.wall_seconds))
                                            .arg(duration_text(summary.mean_host_step_seconds)));
    m_start->setEnabled(true);
    m_stop->setEnabled(false);
}

void RunPanel::onFailed(const QString& message) {
    m_timeline_timer->stop();
    if (!m_running_dir.empty()) itemFor(m_running_dir)->setText(StatusColumn, tr("failed"));
    m_status->setText(QStringLiteral("<span style='color:#d23c3c'>%1</span>").arg(message.toHtmlEscaped()));
    m_progress->setRange(0, 1);
    m_progress->setValue(0);
    m_start->setEnabled(m_design->hasExperiment() && m_design->experiment().is_trainable());
    m_stop->setEnabled(false);
}

void RunPanel::onMpiRunFinished(int exit_code, const QString& output) {
    QTreeWidgetItem* item = itemFor(m_running_dir);
    const run::MetricsHistory history = run::read_metrics(m_running_dir);
    const std::int64_t last_step = history.steps.empty() ? 0 : history.steps.back().step;
    if (!history.steps.empty()) {
        item->setText(StepColumn, QString::number(last_step));
        item->setText(LossColumn, QString::number(history.steps.back().loss, 'f', 4));
    }
    if (!history.evals.empty()) item->setText(ScoreColumn, score_text(history.evals.back()));
    m_start->setEnabled(true);
    m_stop->setEnabled(false);
    m_progress->setRange(0, std::max(1, m_steps->value()));
    m_progress->setValue(static_cast<int>(std::min<std::int64_t>(last_step, m_steps->value())));
    if (output.contains(QStringLiteral("stopped after step"))) {
        item->setText(StatusColumn, tr("stopped"));
        m_status->setText(tr("Stopped after step %1 on %2 MPI ranks; Train resumes from its checkpoint.").arg(last_step).arg(m_ranks->value()));
    } else if (exit_code == 0) {
        item->setText(StatusColumn, tr("finished"));
        m_status->setText(tr("Finished on %1 MPI ranks: %2 steps.").arg(m_ranks->value()).arg(last_step));
    } else {
        // What the ranks said last: the error a rank printed, or the launcher's report.
        QStringList lines = output.trimmed().split(QLatin1Char('\n'));
        if (lines.size() > 6) lines = lines.mid(lines.size() - 6);
        onFailed(tr("mpirun ended with exit code %1:\n%2").arg(exit_code).arg(lines.join(QLatin1Char('\n'))));
    }
}

void RunPanel::addFinishedRun(const std::filesystem::path& model_dir) {
    QTreeWidgetItem* item = itemFor(model_dir);
    if (item->text(StatusColumn).isEmpty()) item->setText(StatusColumn, tr("opened"));
}

void RunPanel::addOpenedRun(const std::filesystem::path& model_dir, const tessera::run::MetricsHistory& history) {
    // The opened run is the one Train would resume (a model_dir with checkpoints resumes from its latest).
    m_model_dir->setText(path_text(std::filesystem::absolute(model_dir)));
    QTreeWidgetItem* item = itemFor(model_dir);
    item->setText(StatusColumn, tr("opened"));
    QString message = tr("Opened %1").arg(runName(model_dir));
    if (!history.steps.empty()) {
        const tessera::run::StepRecord& last = history.steps.back();
        item->setText(StepColumn, QString::number(last.step));
        item->setText(LossColumn, QString::number(last.loss, 'f', 4));
        message += tr(": trained to step %1 (loss %2)").arg(last.step).arg(last.loss, 0, 'f', 4);
    }
    if (!history.evals.empty()) {
        item->setText(ScoreColumn, score_text(history.evals.back()));
        message += tr(", last evaluated at step %1").arg(history.evals.back().step);
    }
    m_status->setText(message + QStringLiteral("."));
    showNotes(history.starts.empty() ? std::vector<std::string>{} : history.starts.back().notes);  // its last session's
}

void RunPanel::showNotes(const std::vector<std::string>& notes) {
    QStringList lines;
    for (const std::string& note : notes) lines << QStringLiteral("• ") + QString::fromStdString(note);
    m_notes->setText(lines.join(QLatin1Char('\n')));
    // The whole text on hover too: a long path can run past the dock's edge.
    m_notes->setToolTip(lines.isEmpty() ? QString() : lines.join(QLatin1Char('\n')));
    m_notes->setVisible(!lines.isEmpty());
}

void RunPanel::setRunStatus(const std::filesystem::path& model_dir, const QString& status, const QString& message) {
    QTreeWidgetItem* item = itemFor(model_dir);
    // A run this panel launched on MPI ranks ends with its own verdict (finished, stopped, failed); the
    // watcher's "ended" that may follow says less.
    const QString current = item->text(StatusColumn);
    if (status == tr("ended") && (current == tr("finished") || current == tr("stopped") || current == tr("failed"))) return;
    // The other process training it is this panel's mpirun: say so.
    if (m_launcher->isRunning() && std::filesystem::absolute(model_dir) == m_running_dir) {
        item->setText(StatusColumn, tr("training on %1 ranks").arg(m_ranks->value()));
        m_status->setText(message);
        const run::MetricsHistory history = run::read_metrics(model_dir);
        if (!history.steps.empty()) {
            m_progress->setRange(0, m_steps->value());
            m_progress->setValue(static_cast<int>(history.steps.back().step));
            item->setText(StepColumn, QString::number(history.steps.back().step));
            item->setText(LossColumn, QString::number(history.steps.back().loss, 'f', 4));
        }
        return;
    }
    item->setText(StatusColumn, status);
    m_status->setText(message);
}

void RunPanel::chooseModelDir() {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("The run's model_dir"), m_model_dir->text());
    if (!dir.isEmpty()) m_model_dir->setText(dir);
}

std::filesystem::path RunPanel::chosenRunDir() const {
    const QTreeWidgetItem* item = m_runs->currentItem();
    if (!item && m_runs->topLevelItemCount() > 0) item = m_runs->topLevelItem(m_runs->topLevelItemCount() - 1);
    return item ? std::filesystem::path(item->text(DirColumn).toStdString()) : std::filesystem::path();
}

void RunPanel::requestReport() {
    const std::filesystem::path dir = chosenRunDir();
    if (dir.empty()) {
        m_status->setText(tr("No run to report on yet: train one, or open a run's model_dir (Open Run…)"));
        return;
    }
    emit exportReportRequested(dir);
}

void RunPanel::chooseRunToOpen() {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Open a run's model_dir"), m_model_dir->text());
    if (!dir.isEmpty()) emit openRunRequested(dir.toStdString());
}

}  // namespace tessera::ui
