#include "widgets/planner_panel.hpp"

#include "widgets/timeline_chart.hpp"

#include <QAbstractTableModel>
#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QCursor>
#include <QHeaderView>
#include <QKeyEvent>
#include <QLabel>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QProgressBar>
#include <QScatterSeries>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QStackedWidget>
#include <QTableView>
#include <QToolTip>
#include <QVBoxLayout>
#include <QValueAxis>

#include <algorithm>
#include <cmath>
#include <limits>

namespace tessera::ui {

namespace {

constexpr double bytes_per_gib = 1024.0 * 1024.0 * 1024.0;

QString gib(std::int64_t bytes, int decimals = 2) { return QString::number(static_cast<double>(bytes) / bytes_per_gib, 'f', decimals); }

QString milliseconds(double seconds) { return QString::number(seconds * 1000.0, 'f', 1); }

QString percent(double fraction) { return QString::number(fraction * 100.0, 'f', fraction < 0.01 ? 2 : 1); }

// The layout as a short chart category: "2×2×4", "2 r · 2×2×1" with replicas.
QString shortLayout(const PlannedLayout& layout) {
    if (layout.replicas <= 1) return layout.piecesText();
    return QStringLiteral("%1r·%2").arg(layout.replicas).arg(layout.piecesText());
}

// Planner order groups: 0 valid and fits, 1 valid but too big, 2 invalid.
int groupOf(const PlannedLayout& layout) { return layout.valid ? (layout.fits ? 0 : 1) : 2; }

// Keeps the planner's groups in order whichever column and direction the table is sorted by: layouts that
// fit first, those too big next, invalid ones last.
class PlannerSortProxy : public QSortFilterProxyModel {
public:
    using QSortFilterProxyModel::QSortFilterProxyModel;

protected:
    bool lessThan(const QModelIndex& left, const QModelIndex& right) const override {
        const int group_left = left.data(Qt::UserRole + 1).toInt(), group_right = right.data(Qt::UserRole + 1).toInt();
        if (group_left != group_right) {
            return sortOrder() == Qt::AscendingOrder ? group_left < group_right : group_left > group_right;
        }
        const QVariant a = left.data(Qt::UserRole), b = right.data(Qt::UserRole);
        if (a.typeId() == QMetaType::QString) return QString::localeAwareCompare(a.toString(), b.toString()) < 0;
        return a.toDouble() < b.toDouble();
    }
};

}  // namespace

// ---- the table's model ------------------------------------------------------------------------------------

class PlannerTableModel : public QAbstractTableModel {
public:
    static constexpr int SortRole = Qt::UserRole;
    static constexpr int GroupRole = Qt::UserRole + 1;

    using QAbstractTableModel::QAbstractTableModel;

    void setResult(const PlannerResult& result) {
        beginResetModel();
        m_layouts = result.layouts;
        m_capacity = result.memory_per_core;
        m_own_replicas = result.experiment_replicas;
        m_own_pieces = result.experiment_pieces;
        endResetModel();
    }
    void clear() { setResult({}); }
    const PlannedLayout& layout(int row) const { return m_layouts[row]; }
    bool isOwnLayout(int row) const {
        return m_layouts[row].replicas == m_own_replicas && m_layouts[row].pieces == m_own_pieces;
    }
    int findRow(std::int64_t replicas, const std::vector<std::int64_t>& pieces) const {
        for (int row = 0; row < m_layouts.size(); ++row) {
            if (m_layouts[row].replicas == replicas && m_layouts[row].pieces == pieces) return row;
        }
        return -1;
    }

    int rowCount(const QModelIndex& parent = {}) const override { return parent.isValid() ? 0 : static_cast<int>(m_layouts.size()); }
    int columnCount(const QModelIndex& parent = {}) const override { return parent.isValid() ? 0 : PlannerPanel::ColumnCount; }

    QVariant data(const QModelIndex& index, int role) const override {
        if (!index.isValid() || index.row() >= m_layouts.size()) return {};
        const PlannedLayout& layout = m_layouts[index.row()];
        const int column = index.column();
        const bool simulated = layout.valid && layout.fits;  // the planner predicts the step of these only
        switch (role) {
            case Qt::DisplayRole:
                switch (column) {
                    case PlannerPanel::RankColumn: return layout.rank;
                    case PlannerPanel::LayoutColumn: return layout.layout;
                    case PlannerPanel::ReplicasColumn: return QString::number(layout.replicas);
                    case PlannerPanel::PiecesColumn: return layout.piecesText();
                    case PlannerPanel::MemoryColumn: return layout.valid ? gib(layout.peak_memory) : QStringLiteral("—");
                    case PlannerPanel::StepColumn: return simulated ? milliseconds(layout.step_seconds) : QStringLiteral("—");
                    case PlannerPanel::ThroughputColumn:
                        return simulated ? QString::number(layout.samples_per_second, 'f', 2) : QStringLiteral("—");
                    case PlannerPanel::PeakColumn: return simulated ? percent(layout.fraction_of_peak) : QStringLiteral("—");
                    case PlannerPanel::ExposedColumn: return simulated ? percent(layout.exposed_communication) : QStringLiteral("—");
                    case PlannerPanel::VerdictColumn: return layout.verdict;
                    default: return {};
                }
            case SortRole:
                switch (column) {
                    case PlannerPanel::RankColumn: return layout.rank;
                    case PlannerPanel::LayoutColumn: return layout.layout;
                    case PlannerPanel::ReplicasColumn: return static_cast<double>(layout.replicas);
                    case PlannerPanel::PiecesColumn: return layout.piecesText();
                    case PlannerPanel::MemoryColumn: return static_cast<double>(layout.peak_memory);
                    case PlannerPanel::StepColumn: return layout.step_seconds;
                    case PlannerPanel::ThroughputColumn: return layout.samples_per_second;
                    case PlannerPanel::PeakColumn: return layout.fraction_of_peak;
                    case PlannerPanel::ExposedColumn: return layout.exposed_communication;
                    case PlannerPanel::VerdictColumn: return layout.verdict;
                    default: return {};
                }
            case GroupRole: return groupOf(layout);
            case Qt::ToolTipRole: {
                QString tip = QStringLiteral("<b>%1</b>").arg(layout.layout.toHtmlEscaped());
                if (isOwnLayout(index.row())) tip += QObject::tr(" (the experiment's layout)");
                tip += QStringLiteral("<br>") + layout.verdict.toHtmlEscaped();
                if (column == PlannerPanel::MemoryColumn && layout.valid) {
                    tip += QObject::tr("<br>The fullest core needs %1 GiB of the device's %2 GiB.")
                               .arg(gib(layout.peak_memory), gib(m_capacity, 1));
                }
                return tip;
            }
            case Qt::ForegroundRole:
                if (!layout.valid) return QColor(0x9a, 0x9a, 0x9a);
                if (column == PlannerPanel::MemoryColumn && !layout.fits) return QColor(0xc6, 0x28, 0x28);
                return {};
            case Qt::FontRole:
                if (isOwnLayout(index.row())) {
                    QFont font;
                    font.setBold(true);
                    return font;
                }
                if (!layout.valid) {
                    QFont font;
                    font.setItalic(true);
                    return font;
                }
                return {};
            case Qt::TextAlignmentRole:
                if (column == PlannerPanel::LayoutColumn || column == PlannerPanel::VerdictColumn) {
                    return static_cast<int>(Qt::AlignLeft | Qt::AlignVCenter);
                }
                return static_cast<int>(Qt::AlignRight | Qt::AlignVCenter);
            default: return {};
        }
    }

    QVariant headerData(int section, Qt::Orientation orientation, int role) const override {
        if (orientation != Qt::Horizontal) return {};
        if (role == Qt::DisplayRole) {
            switch (section) {
                case PlannerPanel::RankColumn: return QObject::tr("#");
                case PlannerPanel::LayoutColumn: return QObject::tr("Layout");
                case PlannerPanel::ReplicasColumn: return QObject::tr("Replicas");
                case PlannerPanel::PiecesColumn: return QObject::tr("Pieces");
                case PlannerPanel::MemoryColumn: return QObject::tr("Memory/core (GiB)");
                case PlannerPanel::StepColumn: return QObject::tr("Step (ms)");
                case PlannerPanel::ThroughputColumn: return QObject::tr("Samples/s");
                case PlannerPanel::PeakColumn: return QObject::tr("Of peak (%)");
                case PlannerPanel::ExposedColumn: return QObject::tr("Exposed comm. (%)");
                case PlannerPanel::VerdictColumn: return QObject::tr("Verdict");
                default: return {};
            }
        }
        if (role == Qt::ToolTipRole) {
            switch (section) {
                case PlannerPanel::RankColumn:
                    return QObject::tr("The planner's rank: layouts that fit, fastest first; then those too big for a core, "
                                       "smallest first; then the ones the partition rules forbid");
                case PlannerPanel::LayoutColumn: return QObject::tr("Replicas and input_partition_dims, as in an experiment file");
                case PlannerPanel::ReplicasColumn: return QObject::tr("Data-parallel replicas, each with its own copy of the model");
                case PlannerPanel::PiecesColumn: return QObject::tr("Pieces per spatial axis ((D ×) H × W) of each replica's input");
                case PlannerPanel::MemoryColumn:
                    return QObject::tr("Memory the fullest core needs (weights, optimizer slots, saved activations, halo "
                                       "buffers, working set); red when it exceeds the device's memory per core");
                case PlannerPanel::StepColumn: return QObject::tr("Predicted time of one training step (forward, backward, update)");
                case PlannerPanel::ThroughputColumn: return QObject::tr("Global batch over the predicted step time");
                case PlannerPanel::PeakColumn: return QObject::tr("Achieved FLOP/s over the peak of all the cores used");
                case PlannerPanel::ExposedColumn:
                    return QObject::tr("Share of the step the critical core spends waiting for halos and all-reduces");
                case PlannerPanel::VerdictColumn: return QObject::tr("Why the layout ranks where it does (hover a cell for the full text)");
                default: return {};
            }
        }
        return {};
    }

private:
    QVector<PlannedLayout> m_layouts;
    std::int64_t m_capacity = 0;
    std::int64_t m_own_replicas = 1;
    std::vector<std::int64_t> m_own_pieces;
};

// ---- the panel ----------------------------------------------------------------------------------------------

PlannerPanel::PlannerPanel(QWidget* parent) : QWidget(parent), m_worker(new PlannerWorker(this)) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->setSpacing(4);

    m_summary = new QLabel(this);
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_summary->setToolTip(tr("The experiment being planned, its device and the planner's best layout"));
    layout->addWidget(m_summary);

    m_progress = new QProgressBar(this);
    m_progress->setToolTip(tr("Planning: ranking every layout, then the scaling curves one core count at a time"));
    m_progress->setTextVisible(true);
    m_progress->hide();
    layout->addWidget(m_progress);

    m_stack = new QStackedWidget(this);
    m_empty = new QLabel(m_stack);
    m_empty->setObjectName(QStringLiteral("plannerEmptyState"));
    m_empty->setAlignment(Qt::AlignCenter);
    m_empty->setWordWrap(true);
    m_empty->setMargin(24);
    m_empty->setToolTip(tr("The planner ranks the partition layouts of the experiment that is open"));
    m_stack->addWidget(m_empty);

    m_content = new QWidget(m_stack);
    auto* content_layout = new QVBoxLayout(m_content);
    content_layout->setContentsMargins(0, 0, 0, 0);
    auto* vertical = new QSplitter(Qt::Vertical, m_content);
    vertical->setChildrenCollapsible(false);
    content_layout->addWidget(vertical);
    m_stack->addWidget(m_content);
    layout->addWidget(m_stack, 1);

    buildTable();
    buildCharts();
    // The table beside its two charts, the timeline of the chosen layout below: the dock stays low
    // enough to leave the slice views their room.
    auto* top = new QSplitter(Qt::Horizontal, vertical);
    top->setChildrenCollapsible(false);
    top->addWidget(m_table);
    top->addWidget(m_layout_chart);
    top->addWidget(m_scaling_chart);
    top->setStretchFactor(0, 4);
    top->setStretchFactor(1, 3);
    top->setStretchFactor(2, 3);
    top->setSizes({560, 420, 420});
    vertical->addWidget(top);
    m_timeline = new TimelineChart(vertical);
    vertical->addWidget(m_timeline);
    vertical->setStretchFactor(0, 1);
    vertical->setStretchFactor(1, 1);
    vertical->setSizes({240, 220});

    connect(m_worker, &PlannerWorker::progress, this, &PlannerPanel::onProgress);
    connect(m_worker, &PlannerWorker::planned, this, &PlannerPanel::onPlanned);
    connect(m_worker, &PlannerWorker::timelinePredicted, this, &PlannerPanel::onTimelinePredicted);
    connect(m_worker, &PlannerWorker::failed, this, &PlannerPanel::onFailed);

    m_summary->setText(tr("<b>Planner</b> — no experiment"));
    showEmptyState(tr("Open or design an experiment to plan it: the planner ranks every way to spread its core budget "
                      "over replicas and spatial pieces, predicts each layout's memory and step time on the "
                      "experiment's device, and shows the step of the one you pick, core by core."));
}

PlannerPanel::~PlannerPanel() {
    delete m_worker;  // stops and joins the thread before anything it reports to goes away
    m_worker = nullptr;
}

void PlannerPanel::buildTable() {
    m_model = new PlannerTableModel(this);
    m_proxy = new PlannerSortProxy(this);
    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(PlannerTableModel::SortRole);
    m_table = new QTableView(this);
    m_table->setModel(m_proxy);
    m_table->setSortingEnabled(true);
    m_table->sortByColumn(RankColumn, Qt::AscendingOrder);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->setAlternatingRowColors(true);
    m_table->setWordWrap(false);
    m_table->setTextElideMode(Qt::ElideRight);
    m_table->verticalHeader()->hide();
    m_table->verticalHeader()->setDefaultSectionSize(m_table->fontMetrics().height() + 6);
    m_table->horizontalHeader()->setStretchLastSection(true);
    m_table->horizontalHeader()->setSectionsMovable(true);
    m_table->setToolTip(tr("Every layout for the core budget. Click a row, or move with the arrow keys and press "
                           "Enter, to use it; the charts below show the selected layout's predicted step."));
    m_table->installEventFilter(this);
    connect(m_table->selectionModel(), &QItemSelectionModel::currentRowChanged, this, &PlannerPanel::onCurrentRowChanged);
    connect(m_table, &QTableView::clicked, this, &PlannerPanel::onRowClicked);
}

void PlannerPanel::buildCharts() {
    for (QChartView** view : {&m_layout_chart, &m_scaling_chart}) {
        auto* chart = new QChart();
        chart->setAnimationOptions(QChart::NoAnimation);
        chart->legend()->setAlignment(Qt::AlignBottom);
        chart->setMargins(QMargins(4, 4, 4, 4));
        QFont title = chart->titleFont();
        title.setBold(true);
        chart->setTitleFont(title);
        *view = new QChartView(chart, this);
        (*view)->setRenderHint(QPainter::Antialiasing);
        (*view)->setMinimumSize(260, 200);
    }
    m_layout_chart->setToolTip(tr("Predicted step time (bars) and memory per core (points, right axis) of the fastest "
                                  "layouts that fit, against the device's memory (dashed line). Hover for the layout, "
                                  "click a bar to use it."));
    m_scaling_chart->setToolTip(tr("The best layout's step time as the core count grows: strong scaling keeps the global "
                                   "batch, weak scaling grows it with the cores (each core keeps the experiment's share). Hover a point for its layout."));
}

void PlannerPanel::showEmptyState(const QString& text) {
    m_empty->setText(text);
    m_stack->setCurrentWidget(m_empty);
}

QString PlannerPanel::emptyStateText() const { return m_stack->currentWidget() == m_empty ? m_empty->text() : QString(); }

void PlannerPanel::setExperiment(const experiment::Experiment& experiment) {
    m_experiment = experiment;
    m_busy = true;
    m_wanted = std::make_pair(experiment.partition.num_replicas, experiment::spatial_pieces(experiment));
    m_timeline_request = 0;
    m_plan_request = m_worker->plan(experiment);
    const QString name = experiment.name.empty() ? QString::fromStdString(experiment.origin) : QString::fromStdString(experiment.name);
    m_summary->setText(tr("<b>%1</b> — planning %2 cores on %3…")
                           .arg(name.toHtmlEscaped())
                           .arg(experiment.partition.num_cores())
                           .arg(QString::fromStdString(experiment.device).toHtmlEscaped()));
    m_progress->setRange(0, 0);  // busy until the worker reports its stages
    m_progress->setFormat(tr("Starting…"));
    m_progress->show();
    if (m_result.layouts.isEmpty()) {
        showEmptyState(tr("Planning %1…").arg(name));
    } else {
        m_content->setEnabled(false);  // the previous plan stays in view, greyed, until this one is ready
    }
}

void PlannerPanel::onProgress(quint64 request, int done, int total, const QString& stage) {
    if (request != m_plan_request || !m_busy) return;
    m_progress->setRange(0, total);
    m_progress->setValue(done);
    m_progress->setFormat(QStringLiteral("%1 — %p%").arg(stage));
}

void PlannerPanel::onPlanned(quint64 request, const PlannerResult& result) {
    if (request != m_plan_request) return;  // a restarted sweep's leftovers
    m_busy = false;
    m_progress->hide();
    m_result = result;
    m_timeline_row = -1;
    m_model->setResult(m_result);
    m_table->sortByColumn(m_table->horizontalHeader()->sortIndicatorSection(), m_table->horizontalHeader()->sortIndicatorOrder());
    m_table->resizeColumnsToContents();
    m_table->setColumnWidth(LayoutColumn, std::min(m_table->columnWidth(LayoutColumn), 320));

    int fitting = 0;
    for (const PlannedLayout& layout : m_result.layouts) fitting += layout.valid && layout.fits ? 1 : 0;
    QString summary = tr("<b>%1</b> — %2, %3 GiB per core · %4 cores, global batch %5 · %6 layouts, %7 fit")
                          .arg(m_result.experiment_name.toHtmlEscaped(), m_result.device_name.toHtmlEscaped(),
                               gib(m_result.memory_per_core, 1))
                          .arg(m_result.core_budget)
                          .arg(m_result.global_batch)
                          .arg(m_result.layouts.size())
                          .arg(fitting);
    if (fitting > 0) {
        const PlannedLayout& best = m_result.layouts.front();
        summary += tr(" · best: %1, %2 ms per step").arg(best.layout.toHtmlEscaped(), milliseconds(best.step_seconds));
    } else {
        summary += tr(" · <span style='color:#c62828'>no layout fits: add cores, shrink the input or the model, or use "
                      "bf16</span>");
    }
    m_summary->setText(summary);

    fillLayoutChart();
    fillScalingChart();
    m_timeline->clear();
    m_timeline->setPlaceholderText(tr("Select a layout in the table to see its predicted step, core by core"));
    m_content->setEnabled(true);
    if (m_result.layouts.isEmpty()) {
        showEmptyState(tr("The planner found no way to spread %1 cores over this experiment's input.").arg(m_result.core_budget));
    } else {
        m_stack->setCurrentWidget(m_content);
    }
    selectWanted();
    emit planned();
}

void PlannerPanel::onFailed(quint64 request, const QString& message) {
    if (request == m_timeline_request) {
        m_timeline->clear();
        m_timeline->setPlaceholderText(tr("Cannot predict this layout's step: %1").arg(message));
        return;
    }
    if (request != m_plan_request) return;
    m_busy = false;
    m_progress->hide();
    m_result = {};
    m_model->clear();
    m_content->setEnabled(true);
    m_summary->setText(tr("<b>Planner</b> — the experiment cannot be planned"));
    showEmptyState(tr("Cannot plan this experiment: %1\n\nFix the experiment (or pick another device) to plan it.").arg(message));
    emit planned();
}

std::optional<PlannedLayout> PlannerPanel::selectedLayout() const {
    const int row = sourceRowOf(m_table->currentIndex());
    if (row < 0) return std::nullopt;
    return m_model->layout(row);
}

int PlannerPanel::sourceRowOf(const QModelIndex& proxy_index) const {
    if (!proxy_index.isValid()) return -1;
    return m_proxy->mapToSource(proxy_index).row();
}

void PlannerPanel::showLayout(std::int64_t replicas, const std::vector<std::int64_t>& pieces) {
    m_wanted = std::make_pair(replicas, pieces);
    if (!m_busy) selectWanted();
}

void PlannerPanel::selectWanted() {
    if (m_model->rowCount() == 0) return;
    int row = m_wanted ? m_model->findRow(m_wanted->first, m_wanted->second) : -1;
    if (row < 0 && m_table->currentIndex().isValid()) return;  // not in the table: keep what is selected
    if (row < 0) row = m_proxy->mapToSource(m_proxy->index(0, 0)).row();
    const QModelIndex index = m_proxy->mapFromSource(m_model->index(row, 0));
    m_table->setCurrentIndex(index);  // selects the row (onCurrentRowChanged asks for its timeline)
    m_table->scrollTo(index, QAbstractItemView::EnsureVisible);
    if (m_timeline_row != row) requestTimeline(row);
}

void PlannerPanel::onCurrentRowChanged(const QModelIndex& current, const QModelIndex& /*previous*/) {
    const int row = sourceRowOf(current);
    if (row < 0) return;
    highlightChartBar(row);
    if (row != m_timeline_row) requestTimeline(row);
}

void PlannerPanel::onRowClicked(const QModelIndex& index) { chooseRow(index); }

void PlannerPanel::chooseRow(const QModelIndex& proxy_index) {
    const int row = sourceRowOf(proxy_index);
    if (row < 0) return;
    const PlannedLayout& layout = m_model->layout(row);
    m_wanted = std::make_pair(layout.replicas, layout.pieces);
    emit layoutChosen(layout.replicas, layout.pieces);
}

bool PlannerPanel::eventFilter(QObject* watched, QEvent* event) {
    if (watched == m_table && event->type() == QEvent::KeyPress) {
        const auto* key = static_cast<QKeyEvent*>(event);
        if ((key->key() == Qt::Key_Return || key->key() == Qt::Key_Enter) && m_table->currentIndex().isValid()) {
            chooseRow(m_table->currentIndex());
            return true;
        }
    }
    return QWidget::eventFilter(watched, event);
}

void PlannerPanel::requestTimeline(int source_row) {
    m_timeline_row = source_row;
    const PlannedLayout& layout = m_model->layout(source_row);
    m_timeline->clear();
    if (!layout.valid || !m_experiment) {
        m_timeline_request = 0;
        m_timeline->setPlaceholderText(tr("%1 cannot run: %2").arg(layout.layout, layout.verdict));
        return;
    }
    m_timeline->setPlaceholderText(tr("Predicting the step of %1…").arg(layout.layout));
    m_timeline_request = m_worker->predictTimeline(*m_experiment, layout.replicas, layout.boundaries);
}

void PlannerPanel::onTimelinePredicted(quint64 request, const PredictedTimeline& timeline) {
    if (request != m_timeline_request) return;
    std::vector<TimelineBar> bars;
    bars.reserve(static_cast<std::size_t>(timeline.spans.size()));
    for (const PredictedSpan& span : timeline.spans) {
        TimelineBar bar;
        bar.lane = span.core;
        bar.start_ms = span.start_seconds * 1000.0;
        bar.end_ms = span.end_seconds * 1000.0;
        switch (span.kind) {
            case PredictedSpanKind::Compute: bar.kind = TimelineBar::Kind::Compute; break;
            case PredictedSpanKind::Halo: bar.kind = TimelineBar::Kind::Halo; break;
            case PredictedSpanKind::AllReduce: bar.kind = TimelineBar::Kind::AllReduce; break;
        }
        bar.backward = span.backward;
        bar.label = span.layer;
        bar.detail = span.detail;
        bars.push_back(std::move(bar));
    }
    QString title = tr("Predicted step of %1 on %2: %3 ms").arg(timeline.layout, timeline.device_name, milliseconds(timeline.step_seconds));
    title += timeline.replicas > 1 ? tr(" (one replica's %1 cores of %2)").arg(timeline.cores).arg(timeline.cores * timeline.replicas)
                                   : tr(" (%1 cores)").arg(timeline.cores);
    if (m_timeline_row >= 0 && !m_model->layout(m_timeline_row).fits) title += tr(" — does not fit in memory");
    m_timeline->setTimeline(std::move(bars), timeline.cores, title);
    // Lane names with each core's place in the grid: "core 5 (0,1,1)".
    QStringList names;
    for (int core = 0; core < timeline.cores; ++core) {
        std::vector<std::int64_t> place(timeline.pieces.size());
        std::int64_t rest = core;
        for (std::size_t axis = timeline.pieces.size(); axis-- > 0;) {
            place[axis] = rest % timeline.pieces[axis];
            rest /= timeline.pieces[axis];
        }
        QStringList coordinates;
        for (std::int64_t p : place) coordinates << QString::number(p);
        names << tr("core %1 (%2)").arg(core).arg(coordinates.join(QStringLiteral(",")));
    }
    m_timeline->setLaneNames(names);
}

QString PlannerPanel::layoutToolTip(const PlannedLayout& layout) const {
    QString text = QStringLiteral("<b>%1</b>").arg(layout.layout.toHtmlEscaped());
    if (layout.valid && layout.fits) {
        text += tr("<br>step %1 ms · %2 samples/s · memory %3 GiB per core")
                    .arg(milliseconds(layout.step_seconds), QString::number(layout.samples_per_second, 'f', 2), gib(layout.peak_memory));
    }
    text += QStringLiteral("<br>") + layout.verdict.toHtmlEscaped();
    return text;
}

void PlannerPanel::fillLayoutChart() {
    QChart* chart = m_layout_chart->chart();
    chart->removeAllSeries();
    for (QAbstractAxis* axis : chart->axes()) {
        chart->removeAxis(axis);
        delete axis;
    }
    m_chart_rows.clear();
    for (int row = 0; row < m_result.layouts.size() && static_cast<int>(m_chart_rows.size()) < max_chart_layouts; ++row) {
        if (m_result.layouts[row].valid && m_result.layouts[row].fits) m_chart_rows.push_back(row);
    }
    if (m_chart_rows.empty()) {
        chart->setTitle(tr("No layout fits in %1 GiB per core: see the table's memory column").arg(gib(m_result.memory_per_core, 1)));
        return;
    }
    chart->setTitle(m_chart_rows.size() < static_cast<std::size_t>(m_result.layouts.size())
                        ? tr("The %1 fastest layouts that fit").arg(m_chart_rows.size())
                        : tr("Every layout: step time and memory per core"));

    auto* times = new QBarSet(tr("step (ms)"));
    times->setColor(QColor(0x4a, 0x7e, 0xbb));
    times->setSelectedColor(QColor(0xf0, 0xa0, 0x20));
    auto* memory = new QScatterSeries();
    memory->setName(tr("memory/core"));
    memory->setMarkerSize(9);
    memory->setColor(QColor(0x2e, 0x9d, 0x5b));
    memory->setBorderColor(QColor(0x1d, 0x6b, 0x3d));
    QStringList categories;
    double longest = 0, largest = static_cast<double>(m_result.memory_per_core) / bytes_per_gib;
    for (std::size_t i = 0; i < m_chart_rows.size(); ++i) {
        const PlannedLayout& layout = m_result.layouts[m_chart_rows[i]];
        *times << layout.step_seconds * 1000.0;
        memory->append(static_cast<double>(i), static_cast<double>(layout.peak_memory) / bytes_per_gib);
        categories << shortLayout(layout);
        longest = std::max(longest, layout.step_seconds * 1000.0);
        largest = std::max(largest, static_cast<double>(layout.peak_memory) / bytes_per_gib);
    }
    auto* bars = new QBarSeries();
    bars->append(times);
    bars->setBarWidth(0.7);
    auto* capacity = new QLineSeries();
    capacity->setName(tr("device %1 GiB").arg(gib(m_result.memory_per_core, 1)));
    QPen capacity_pen(QColor(0xc6, 0x28, 0x28));
    capacity_pen.setStyle(Qt::DashLine);
    capacity_pen.setWidthF(1.5);
    capacity->setPen(capacity_pen);
    const double capacity_gib = static_cast<double>(m_result.memory_per_core) / bytes_per_gib;
    capacity->append(-0.5, capacity_gib);
    capacity->append(static_cast<double>(m_chart_rows.size()) - 0.5, capacity_gib);

    chart->addSeries(bars);
    chart->addSeries(memory);
    chart->addSeries(capacity);
    auto* x = new QBarCategoryAxis();
    x->append(categories);
    x->setLabelsAngle(categories.size() > 8 ? -90 : 0);
    x->setTitleText(tr("layout (pieces per axis)"));
    auto* time_axis = new QValueAxis();
    time_axis->setRange(0, longest * 1.1);
    time_axis->setLabelFormat(QStringLiteral("%.0f"));
    time_axis->setTitleText(tr("step (ms)"));
    time_axis->applyNiceNumbers();
    auto* memory_axis = new QValueAxis();
    memory_axis->setRange(0, largest * 1.1);
    memory_axis->setLabelFormat(QStringLiteral("%.1f"));
    memory_axis->setTitleText(tr("GiB per core"));
    memory_axis->applyNiceNumbers();
    chart->addAxis(x, Qt::AlignBottom);
    chart->addAxis(time_axis, Qt::AlignLeft);
    chart->addAxis(memory_axis, Qt::AlignRight);
    bars->attachAxis(x);
    bars->attachAxis(time_axis);
    // The XY series share the category axis: category i sits at x = i.
    for (QAbstractSeries* series : {static_cast<QAbstractSeries*>(memory), static_cast<QAbstractSeries*>(capacity)}) {
        series->attachAxis(x);
        series->attachAxis(memory_axis);
    }

    connect(times, &QBarSet::hovered, this, &PlannerPanel::onLayoutBarHovered);
    connect(times, &QBarSet::clicked, this, &PlannerPanel::onLayoutBarClicked);
    connect(memory, &QScatterSeries::hovered, this, &PlannerPanel::onMemoryPointHovered);
}

void PlannerPanel::highlightChartBar(int source_row) {
    const QList<QAbstractSeries*> series = m_layout_chart->chart()->series();
    if (series.isEmpty()) return;
    auto* bars = qobject_cast<QBarSeries*>(series.front());
    if (!bars || bars->barSets().isEmpty()) return;
    QBarSet* times = bars->barSets().front();
    times->deselectAllBars();
    const auto found = std::find(m_chart_rows.begin(), m_chart_rows.end(), source_row);
    if (found != m_chart_rows.end()) times->selectBar(static_cast<int>(found - m_chart_rows.begin()));
}

void PlannerPanel::onLayoutBarHovered(bool status, int index) {
    if (!status || index < 0 || index >= static_cast<int>(m_chart_rows.size())) {
        QToolTip::hideText();
        return;
    }
    QToolTip::showText(QCursor::pos(), layoutToolTip(m_result.layouts[m_chart_rows[static_cast<std::size_t>(index)]]), m_layout_chart);
}

void PlannerPanel::onLayoutBarClicked(int index) {
    if (index < 0 || index >= static_cast<int>(m_chart_rows.size())) return;
    const QModelIndex proxy_index = m_proxy->mapFromSource(m_model->index(m_chart_rows[static_cast<std::size_t>(index)], 0));
    m_table->setCurrentIndex(proxy_index);
    m_table->scrollTo(proxy_index);
    chooseRow(proxy_index);
}

void PlannerPanel::onMemoryPointHovered(const QPointF& point, bool state) {
    const int index = static_cast<int>(std::lround(point.x()));
    onLayoutBarHovered(state, index);
}

void PlannerPanel::fillScalingChart() {
    QChart* chart = m_scaling_chart->chart();
    chart->removeAllSeries();
    for (QAbstractAxis* axis : chart->axes()) {
        chart->removeAxis(axis);
        delete axis;
    }
    auto* strong = new QLineSeries();
    strong->setName(tr("strong (batch %1)").arg(m_result.global_batch));
    auto* weak = new QLineSeries();
    weak->setName(m_result.global_batch == m_result.core_budget
                      ? tr("weak (batch = cores)")
                      : tr("weak (batch ∝ cores)"));
    strong->setColor(QColor(0x4a, 0x7e, 0xbb));
    weak->setColor(QColor(0xdd, 0x6b, 0x20));
    double low = std::numeric_limits<double>::max(), high = 0;
    std::int64_t most_cores = 1;
    for (const auto& [series, samples] : {std::pair{strong, &m_result.strong_scaling}, std::pair{weak, &m_result.weak_scaling}}) {
        series->setPointsVisible(true);
        QPen pen = series->pen();
        pen.setWidthF(2);
        series->setPen(pen);
        for (const ScalingSample& sample : *samples) {
            most_cores = std::max(most_cores, sample.cores);
            if (!sample.feasible || sample.step_seconds <= 0) continue;
            const double ms = sample.step_seconds * 1000.0;
            series->append(static_cast<double>(sample.cores), ms);
            low = std::min(low, ms);
            high = std::max(high, ms);
        }
        chart->addSeries(series);
        connect(series, &QLineSeries::hovered, this, &PlannerPanel::onScalingPointHovered);
    }
    chart->setTitle(tr("Scaling on %1 (this experiment: %2 cores)").arg(m_result.device_name).arg(m_result.core_budget));
    auto* x = new QLogValueAxis();
    x->setBase(2);
    x->setLabelFormat(QStringLiteral("%d"));
    x->setRange(0.75, static_cast<double>(most_cores) * 1.35);
    x->setTitleText(tr("cores (log₂)"));
    x->setMinorTickCount(0);
    chart->addAxis(x, Qt::AlignBottom);
    QAbstractAxis* y = nullptr;
    if (high > 0 && high / low > 8) {
        auto* log_y = new QLogValueAxis();
        log_y->setBase(10);
        log_y->setLabelFormat(QStringLiteral("%g"));
        log_y->setRange(low / 1.5, high * 1.5);
        log_y->setMinorTickCount(8);
        y = log_y;
    } else {
        auto* linear_y = new QValueAxis();
        linear_y->setRange(0, high > 0 ? high * 1.15 : 1);
        linear_y->setLabelFormat(QStringLiteral("%.0f"));
        linear_y->applyNiceNumbers();
        y = linear_y;
    }
    y->setTitleText(tr("best step (ms)"));
    chart->addAxis(y, Qt::AlignLeft);
    for (QLineSeries* series : {strong, weak}) {
        series->attachAxis(x);
        series->attachAxis(y);
    }
}

void PlannerPanel::onScalingPointHovered(const QPointF& point, bool state) {
    if (!state) {
        QToolTip::hideText();
        return;
    }
    auto* series = qobject_cast<QLineSeries*>(sender());
    const bool weak = series && m_scaling_chart->chart()->series().indexOf(series) == 1;
    const QVector<ScalingSample>& samples = weak ? m_result.weak_scaling : m_result.strong_scaling;
    const auto cores = static_cast<std::int64_t>(std::llround(point.x()));
    for (const ScalingSample& sample : samples) {
        if (sample.cores != cores || !sample.feasible) continue;
        QToolTip::showText(QCursor::pos(),
                           tr("<b>%1 cores</b>, global batch %2 (%3 scaling)<br>best: %4<br>%5 ms per step, %6 samples/s")
                               .arg(sample.cores)
                               .arg(sample.global_batch)
                               .arg(weak ? tr("weak") : tr("strong"), sample.layout.toHtmlEscaped(),
                                    milliseconds(sample.step_seconds), QString::number(sample.samples_per_second, 'f', 2)),
                           m_scaling_chart);
        return;
    }
}

}  // namespace tessera::ui
