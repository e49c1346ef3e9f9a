// RunPanel: launch, stop and resume the designed experiment on the simulated cores, follow its progress,
// list the runs of this session (and opened ones) with their status, show the last evaluation's Dice and
// IoU per class and the timeline of a real step (the cores' recorded events), and choose what the label
// overlay shows (ground truth, prediction, errors).
#pragma once

#include "model/mpi_launcher.hpp"
#include "model/partition_design.hpp"
#include "model/run_controller.hpp"
#include "model/viewer_model.hpp"

#include "run/metrics_log.hpp"

#include <QWidget>

#include <filesystem>
#include <map>

class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QTimer;
class QTreeWidget;
class QTreeWidgetItem;

namespace tessera::ui {

class PrecisionRecallChart;
class TimelineChart;

class RunPanel : public QWidget {
    Q_OBJECT
public:
    RunPanel(PartitionDesign* design, RunController* controller, ViewerModel* viewer, QWidget* parent = nullptr);

    QPushButton* startButton() const { return m_start; }
    QPushButton* stopButton() const { return m_stop; }
    QPushButton* exportReportButton() const { return m_export_report; }
    // The run a report or an action is for: the run list's current row, else its last run; empty when
    // the list is empty.
    std::filesystem::path chosenRunDir() const;
    QProgressBar* progressBar() const { return m_progress; }
    QTreeWidget* runList() const { return m_runs; }
    QLineEdit* modelDirEdit() const { return m_model_dir; }
    QSpinBox* stepsBox() const { return m_steps; }
    // 1: the run trains in the studio's process; more: on that many MPI ranks on this machine (mpirun).
    QSpinBox* ranksBox() const { return m_ranks; }
    MpiLauncher* mpiLauncher() const { return m_launcher; }
    QTableWidget* classTable() const { return m_classes; }
    QComboBox* overlayBox() const { return m_overlay; }
    QWidget* overlayRow() const { return m_overlay_row; }
    // A detector's precision–recall curves at IoU 0.5 (hidden for other models).
    PrecisionRecallChart* precisionRecallChart() const { return m_precision_recall; }
    TimelineChart* timeline() const { return m_timeline; }
    QSpinBox* timelineStepBox() const { return m_timeline_step; }
    // The steps whose events are kept for the timeline (the last max_kept_steps of the run).
    std::vector<std::int64_t> keptSteps() const;
    static constexpr std::size_t max_kept_steps = 500;
    QLabel* statusLabel() const { return m_status; }
    // What the running run said at its start beside its figures (bf16 emulated on this CPU, the
    // checkpoint it resumed from or skipped, no host prediction, nothing held out); hidden when nothing.
    QLabel* notesLabel() const { return m_notes; }
    // The run's name in charts and lists: its model_dir's folder name.
    static QString runName(const std::filesystem::path& model_dir);

public slots:
    void startRun();
    void stopRun();
    // Adds a finished (or stopped) run from its model_dir to the list; the main window loads its charts.
    void addFinishedRun(const std::filesystem::path& model_dir);
    // An opened run's last step and loss in the list, and what it holds in the status line.
    void addOpenedRun(const std::filesystem::path& model_dir, const tessera::run::MetricsHistory& history);
    // The run list's status for a run, and the panel's status line (a run watched in another process).
    void setRunStatus(const std::filesystem::path& model_dir, const QString& status, const QString& message);
    // An evaluation's scores in the class table (Dice and IoU, or a detector's AP, AP50, AP75, recall and
    // objects per class under an "all classes" row, with its precision–recall chart): the live run's or
    // an opened run's last one.
    void showScores(const tessera::run::EvalRecord& eval);
    // The timeline of a step a run recorded (its step_trace.json), for a run this studio does not train;
    // ignored while the studio trains one itself (its live steps own the timeline).
    void showRecordedStep(const tessera::ui::StepEvents& events);
    // Asks for a run's model_dir and emits openRunRequested (the Open Run… button, Experiment ▸ Open Run…).
    void chooseRunToOpen();
    // Emits exportReportRequested for chosenRunDir() (the Export Report… button, Run ▸ Export Report…).
    void requestReport();

signals:
    void runStarted(const QString& run, const std::filesystem::path& model_dir);
    void openRunRequested(const std::filesystem::path& model_dir);
    void exportReportRequested(const std::filesystem::path& model_dir);

private slots:
    void onExperimentChanged();
    void onStarted(const tessera::run::RunStart& start);
    void onStep(const tessera::run::StepRecord& step);
    void onStepEvents(const tessera::ui::StepEvents& events);
    void onEvaluated(const tessera::run::EvalRecord& eval);
    void onFinished(const tessera::run::RunSummary& summary);
    void onFailed(const QString& message);
    void onMpiRunFinished(int exit_code, const QString& output);
    void refreshTimeline();
    void showStepTimeline(int step);
    void chooseModelDir();

private:
    void showNotes(const std::vector<std::string>& notes);
    QTreeWidgetItem* itemFor(const std::filesystem::path& model_dir);

    PartitionDesign* m_design;
    RunController* m_controller;
    ViewerModel* m_viewer;
    QPushButton* m_start;
    QPushButton* m_stop;
    QPushButton* m_open;
    QPushButton* m_export_report;
    QLineEdit* m_model_dir;
    QSpinBox* m_steps;
    QSpinBox* m_ranks;
    MpiLauncher* m_launcher;
    QProgressBar* m_progress;
    QLabel* m_status;
    QLabel* m_notes;
    QTreeWidget* m_runs;
    QTableWidget* m_classes;
    PrecisionRecallChart* m_precision_recall;
    QComboBox* m_overlay;
    QWidget* m_overlay_row;  // the overlay's label and box, hidden for a detector
    TimelineChart* m_timeline;
    QTimer* m_timeline_timer;
    std::map<std::int64_t, StepEvents> m_step_events;  // the last steps' events, by step
    bool m_timeline_recorded = false;  // shown from a run's step_trace.json, not measured live here
    bool m_follow_latest = true;                       // the timeline shows each new step as it comes
    bool m_timeline_dirty = false;                     // a newer step arrived since the last draw
    QSpinBox* m_timeline_step;
    std::filesystem::path m_running_dir;
    std::int64_t m_total_steps = 0, m_first_step = 0, m_steps_seen = 0;
    double m_seconds_sum = 0;
};

}  // namespace tessera::ui
