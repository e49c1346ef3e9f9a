// PlannerPanel: which layout to use for an experiment's core budget, and why.
//
// setExperiment() plans the experiment on its device off the GUI thread (PlannerWorker): every layout of
// the budget ranked in a sortable table (memory per core, predicted step time, throughput, fraction of
// peak, exposed communication, the planner's verdict), a chart of step time and memory per layout against
// the device's capacity, the strong and weak scaling curves, and the predicted step of the selected layout
// as a Gantt chart of its cores (TimelineChart). Picking a row (click, or arrows then Enter) emits
// layoutChosen; showLayout() follows the experiment editor the other way.
//
//   auto* planner = new PlannerPanel(this);
//   connect(planner, &PlannerPanel::layoutChosen, editor, &Editor::setLayout);
//   planner->setExperiment(tessera::experiment::load_experiment(path));
#pragma once

#include "model/planner_worker.hpp"

#include <QPointF>
#include <QWidget>

#include <cstdint>
#include <optional>
#include <vector>

class QChart;
class QChartView;
class QLabel;
class QModelIndex;
class QProgressBar;
class QSortFilterProxyModel;
class QStackedWidget;
class QTableView;

namespace tessera::ui {

class PlannerTableModel;
class TimelineChart;

class PlannerPanel : public QWidget {
    Q_OBJECT
public:
    // The table's columns.
    enum Column {
        RankColumn,        // the planner's order: fitting layouts fastest first, then too big, then invalid
        LayoutColumn,      // "2 replicas × input_partition_dims [1, 2, 2, 1]"
        ReplicasColumn,
        PiecesColumn,      // "2×2×4"
        MemoryColumn,      // GiB, the fullest core; red when it does not fit
        StepColumn,        // ms
        ThroughputColumn,  // samples/s
        PeakColumn,        // % of the cores' peak FLOP/s
        ExposedColumn,     // % of the step spent waiting for communication
        VerdictColumn,
        ColumnCount
    };
    static constexpr int max_chart_layouts = 10;  // more bars than this do not get readable labels in a bottom dock

    explicit PlannerPanel(QWidget* parent = nullptr);
    ~PlannerPanel() override;

    // Plans `experiment` on its device (a preset id, experiment.device) for its core budget, on a worker
    // thread; a newer call restarts the work (the old result is dropped). A progress bar shows while it runs.
    void setExperiment(const tessera::experiment::Experiment& experiment);
    bool isBusy() const { return m_busy; }

    // For tests: the table and charts.
    QTableView* table() const { return m_table; }
    QChartView* layoutChart() const { return m_layout_chart; }
    QChartView* scalingChart() const { return m_scaling_chart; }
    TimelineChart* timeline() const { return m_timeline; }
    // The plan shown (empty before the first one).
    const PlannerResult& result() const { return m_result; }
    // The layout of the selected row, if any.
    std::optional<PlannedLayout> selectedLayout() const;
    // What the panel says when it has nothing to show (no experiment, or the planner's error).
    QString emptyStateText() const;

    // Selects the row whose layout has these replicas and pieces (when present), as the editor changes.
    // Remembered while a sweep runs. Does not emit layoutChosen.
    void showLayout(std::int64_t replicas, const std::vector<std::int64_t>& pieces);

signals:
    void layoutChosen(std::int64_t replicas, std::vector<std::int64_t> pieces);  // a row picked by the user (click, Enter)
    void planned();                                                             // a sweep's results are shown

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private slots:
    void onProgress(quint64 request, int done, int total, const QString& stage);
    void onPlanned(quint64 request, const tessera::ui::PlannerResult& result);
    void onTimelinePredicted(quint64 request, const tessera::ui::PredictedTimeline& timeline);
    void onFailed(quint64 request, const QString& message);
    void onCurrentRowChanged(const QModelIndex& current, const QModelIndex& previous);
    void onRowClicked(const QModelIndex& index);
    void onLayoutBarHovered(bool status, int index);
    void onLayoutBarClicked(int index);
    void onMemoryPointHovered(const QPointF& point, bool state);
    void onScalingPointHovered(const QPointF& point, bool state);

private:
    void buildTable();
    void buildCharts();
    void fillLayoutChart();
    void fillScalingChart();
    void showEmptyState(const QString& text);
    void selectWanted();
    void chooseRow(const QModelIndex& proxy_index);
    int sourceRowOf(const QModelIndex& proxy_index) const;
    void requestTimeline(int source_row);
    void highlightChartBar(int source_row);
    QString layoutToolTip(const PlannedLayout& layout) const;

    PlannerWorker* m_worker = nullptr;
    PlannerTableModel* m_model = nullptr;
    QSortFilterProxyModel* m_proxy = nullptr;
    QLabel* m_summary = nullptr;
    QProgressBar* m_progress = nullptr;
    QStackedWidget* m_stack = nullptr;
    QLabel* m_empty = nullptr;
    QWidget* m_content = nullptr;
    QTableView* m_table = nullptr;
    QChartView* m_layout_chart = nullptr;
    QChartView* m_scaling_chart = nullptr;
    TimelineChart* m_timeline = nullptr;

    std::optional<tessera::experiment::Experiment> m_experiment;
    PlannerResult m_result;
    std::vector<int> m_chart_rows;  // source rows of the layout chart's bars
    quint64 m_plan_request = 0;
    quint64 m_timeline_request = 0;
    int m_timeline_row = -1;        // source row whose timeline is shown or awaited
    bool m_busy = false;
    std::optional<std::pair<std::int64_t, std::vector<std::int64_t>>> m_wanted;  // replicas, pieces to select
};

}  // namespace tessera::ui
