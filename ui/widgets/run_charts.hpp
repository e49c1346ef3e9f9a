// RunCharts: a training run's curves as it trains, and finished runs' beside it.
//
// Qt Charts: the loss (each step's raw loss faint, TensorBoard's debiased moving average on top, the
// evaluations' loss as points and their mean Dice — a detector's mAP and AP50 — on a right axis), the step
// time (host-measured and the device's predicted seconds, log axis), the learning rate and loss scale, the
// throughput, the simulated cores' peak memory as bars against a core's capacity, and for detectors the
// boxes of each evaluation (detections, true positives, objects; shown once a detector's run is there). Runs are named (the model_dir's
// folder name, say) and drawn overlaid, each in its own colour; the run list shows or hides them and picks
// the run whose memory is shown. A toolbar row holds the smoothing slider, the loss chart's log scale, the
// x axis (step or seconds since the run's first point) and the export menu (PNG, SVG, CSV of each chart;
// right-click a chart for its own).
//
// Every value is kept (RunSeries); a chart draws at most max_display_points per curve (min/max buckets, so
// spikes stay) and is redrawn at most every refresh_interval_ms however fast steps arrive.
//
//   auto* charts = new RunCharts(this);
//   // in the slots that receive a run's started / stepFinished / evaluated signals (copies, GUI thread):
//   charts->setCoreMemory("unet2d_em", start.core_memory_bytes, start.core_capacity_bytes);
//   charts->addStep("unet2d_em", step);
//   charts->addEval("unet2d_em", eval);
//   // a finished run beside it, and the loss curve's data:
//   charts->loadRun("unet2d_em (last week)", "runs/unet2d_em_old");
//   charts->exportChart(RunCharts::Chart::Loss, "loss.csv");
#pragma once

#include "model/run_series.hpp"

#include <QColor>
#include <QStringList>
#include <QWidget>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

class QAbstractAxis;
class QAreaSeries;
class QChart;
class QChartView;
class QCheckBox;
class QComboBox;
class QLabel;
class QListWidget;
class QTabWidget;
class QListWidgetItem;
class QMenu;
class QSlider;
class QStackedWidget;
class QTimer;
class QToolButton;
class QXYSeries;

namespace tessera::ui {

class RunCharts : public QWidget {
    Q_OBJECT
public:
    enum class Chart { Loss, StepTime, LearningRate, Throughput, Memory, Boxes };
    static constexpr int chart_count = 6;
    enum class XAxis { Step, WallTime };
    // A run's curves (for tests): which chart each is on follows from its name.
    enum class Curve {
        RawLoss,           // Loss: every step, faint
        SmoothedLoss,      // Loss: the moving average
        EvalLoss,          // Loss: points
        EvalDice,          // Loss: the evaluations' mean Dice, right axis
        HostSeconds,       // StepTime
        PredictedSeconds,  // StepTime, dashed
        LearningRate,      // LearningRate
        LossScale,         // LearningRate, right axis (log₂), dashed
        Throughput,        // Throughput
        HostPrediction,    // StepTime: this host's predicted step, dotted, inside its ± band
        EvalAp,            // Loss: a detector's evaluations' AP@[.5:.95], right axis, dash-dot
        EvalAp50,          // Loss: their AP50, right axis, dotted
        EvalDetections,    // Boxes: detections after post-processing, over the held-out images
        EvalTruePositives, // Boxes: of them matched at IoU 0.5, dashed
        EvalObjects        // Boxes: the held-out objects, dotted
    };
    static constexpr int max_display_points = 2000;  // per curve
    static constexpr int refresh_interval_ms = 500;  // the display follows the data at most this often

    explicit RunCharts(QWidget* parent = nullptr);
    ~RunCharts() override;

    // Data. A run named for the first time is added (a colour, a row in the run list). Cheap: the charts
    // are redrawn later, on a timer.
    void addStep(const QString& run, const tessera::run::StepRecord& step);
    void addEval(const QString& run, const tessera::run::EvalRecord& eval);
    // Per-core peak bytes against a core's capacity (bytes): RunStart's core_memory_bytes and
    // core_capacity_bytes. Steps that carry core_peak_bytes update the peaks.
    void setCoreMemory(const QString& run, const std::vector<std::int64_t>& peak_bytes, std::int64_t capacity_bytes);
    // This host's predicted step and its ± (RunStart's predicted_host_step_seconds and
    // host_prediction_uncertainty_seconds): a dotted line across the run's steps inside a shaded band,
    // so the measured curve can be read against it. 0 seconds: none (the host is not calibrated).
    void setHostPrediction(const QString& run, double seconds, double uncertainty_seconds);
    // A finished run's metrics.jsonl (run::read_metrics) under this name, replacing a run of that name.
    // False (and the run list's status says why) when the folder holds no metrics.
    bool loadRun(const QString& run, const std::filesystem::path& model_dir);
    void removeRun(const QString& run);
    void clear();
    QStringList runs() const;                              // in the order they came
    const RunSeries* runSeries(const QString& run) const;  // nullptr: no such run

    // Shown or hidden (the run list's checkboxes).
    void setRunVisible(const QString& run, bool visible);
    bool isRunVisible(const QString& run) const;
    // The run whose per-core memory the memory chart shows: the run list's current one, else the last
    // run that reported memory.
    void setMemoryRun(const QString& run);
    QString memoryRun() const;
    QColor runColor(const QString& run) const;

    // View options, as the toolbar sets them.
    void setSmoothing(double ema_weight);  // 0 … 0.99, TensorBoard's slider
    double smoothing() const { return m_smoothing; }
    void setLogScale(bool log_scale);      // the loss chart's y axis
    bool logScale() const { return m_log_scale; }
    void setXAxis(XAxis axis);
    XAxis xAxis() const { return m_x_axis; }

    // Charts, for tests and export.
    QChartView* chartView(Chart chart) const;
    // The loss chart is always there; the others are tabs beside it, the boxes' only for detectors.
    bool isChartAvailable(Chart chart) const;
    void showChart(Chart chart);  // brings a chart's tab to the front
    QXYSeries* series(const QString& run, Curve curve) const;  // nullptr: no such run
    QAreaSeries* hostPredictionBand(const QString& run) const;  // nullptr: no such run
    QListWidget* runList() const { return m_run_list; }
    QString emptyStateText() const;  // empty while runs are shown
    // Writes the chart to `path` by its suffix: .png (the chart as drawn), .svg (vector), .csv (the data
    // behind it, every step: run,step,wall_time,<columns>). False when it cannot be written.
    bool exportChart(Chart chart, const QString& path);
    static QString chartName(Chart chart);  // "loss", "step_time", …

public slots:
    // Redraws what changed now, rather than at the next tick of the refresh timer.
    void refresh();

signals:
    void refreshed();  // the charts show the data added so far

private slots:
    void onSmoothingSliderMoved(int value);
    void onLogScaleToggled(bool checked);
    void onXAxisChosen(int index);
    void onRunItemChanged(QListWidgetItem* item);
    void onCurrentRunChanged(QListWidgetItem* current, QListWidgetItem* previous);
    void onExportActionTriggered();
    void onChartContextMenu(const QPoint& position);
    void onRemoveRunClicked();
    void onOpenRunClicked();
    void onCurveHovered(const QPointF& point, bool state);

private:
    struct RunState;

    void buildToolbar();
    void buildCharts();
    RunState* findRun(const QString& run) const;
    RunState& ensureRun(const QString& run);
    void createCurves(RunState& state);
    void deleteCurves(RunState& state);
    void scheduleRefresh();
    void markAllDirty();
    void updateCurves(RunState& state);
    void updateAxes();
    void updateMemoryChart();
    void replaceLossAxis();
    void updateEmptyState();
    QColor nextColor() const;
    QMenu* exportMenu(Chart chart, QWidget* parent);
    void exportWithDialog(Chart chart, const QString& format);
    bool exportPng(Chart chart, const QString& path);
    bool exportSvg(Chart chart, const QString& path);
    bool writeSvgByHand(Chart chart, const QString& path) const;  // when Qt's SVG module is missing
    bool exportCsv(Chart chart, const QString& path) const;
    QString xTitle() const;
    double wantedXScale() const;  // display units per second of wall time: 1, 1/60 or 1/3600 as the runs grow

    // Toolbar.
    QSlider* m_smoothing_slider = nullptr;
    QLabel* m_smoothing_value = nullptr;
    QCheckBox* m_log_scale_box = nullptr;
    QComboBox* m_x_axis_box = nullptr;
    QToolButton* m_open_button = nullptr;
    QToolButton* m_export_button = nullptr;
    QLabel* m_status = nullptr;
    // Body.
    QStackedWidget* m_stack = nullptr;
    QLabel* m_empty = nullptr;
    QWidget* m_content = nullptr;
    QListWidget* m_run_list = nullptr;
    QToolButton* m_remove_button = nullptr;
    QChartView* m_views[chart_count] = {};
    QTabWidget* m_chart_tabs = nullptr;  // every chart but the loss
    // Axes that stay while runs come and go (the memory chart's are rebuilt with its bars).
    QAbstractAxis* m_x_axes[chart_count] = {};
    QAbstractAxis* m_loss_axis = nullptr;  // QValueAxis or QLogValueAxis
    QAbstractAxis* m_dice_axis = nullptr;
    QAbstractAxis* m_time_axis = nullptr;
    QAbstractAxis* m_rate_axis = nullptr;
    QAbstractAxis* m_scale_axis = nullptr;
    QAbstractAxis* m_throughput_axis = nullptr;
    QAbstractAxis* m_box_axis = nullptr;
    QTimer* m_refresh_timer = nullptr;

    std::vector<std::unique_ptr<RunState>> m_runs;
    QString m_memory_run;       // chosen in the list ("" follows the last run with memory)
    QString m_last_memory_run;  // the last run that reported memory
    bool m_memory_dirty = true;
    QString m_shown_memory_key;  // what the memory chart draws (run, step, peaks, capacity): unchanged, no rebuild
    double m_x_scale = 1;        // wall-time display units per second
    bool m_axes_dirty = true;
    double m_smoothing = 0.6;
    bool m_log_scale = false;
    XAxis m_x_axis = XAxis::Step;
};

}  // namespace tessera::ui
