#include "widgets/run_charts.hpp"

#include <QAction>
#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QCursor>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QLegend>
#include <QLegendMarker>
#include <QAreaSeries>
#include <QLineSeries>
#include <QListWidget>
#include <QLogValueAxis>
#include <QMenu>
#include <QMessageBox>
#include <QPainter>
#include <QPixmap>
#include <QSaveFile>
#include <QScatterSeries>
#include <QSignalBlocker>
#include <QSlider>
#include <QSplitter>
#include <QTabWidget>
#include <QStackedWidget>
#include <QTimer>
#include <QToolButton>
#include <QToolTip>
#include <QVBoxLayout>
#include <QValueAxis>
#ifdef TESSERA_HAVE_QT_SVG
#include <QSvgGenerator>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

namespace tessera::ui {

namespace {

constexpr int curve_count = 15;
constexpr std::size_t palette_size = 10;
constexpr double bytes_per_kib = 1024.0;

using Curve = RunCharts::Curve;
using Chart = RunCharts::Chart;

int index(Chart chart) { return static_cast<int>(chart); }
int index(Curve curve) { return static_cast<int>(curve); }

Chart chartOf(Curve curve) {
    switch (curve) {
        case Curve::RawLoss:
        case Curve::SmoothedLoss:
        case Curve::EvalLoss:
        case Curve::EvalDice:
        case Curve::EvalAp:
        case Curve::EvalAp50: return Chart::Loss;
        case Curve::EvalDetections:
        case Curve::EvalTruePositives:
        case Curve::EvalObjects: return Chart::Boxes;
        case Curve::HostSeconds:
        case Curve::PredictedSeconds:
        case Curve::HostPrediction: return Chart::StepTime;
        case Curve::LearningRate:
        case Curve::LossScale: return Chart::LearningRate;
        case Curve::Throughput: return Chart::Throughput;
    }
    return Chart::Loss;
}

// What the curve is: after the run's name in its hover tooltip, and in the legend of the curves that
// share a chart with the run's main one.
QString curveLabel(Curve curve) {
    switch (curve) {
        case Curve::RawLoss: return QObject::tr("loss (raw)");
        case Curve::SmoothedLoss: return QObject::tr("loss (smoothed)");
        case Curve::EvalLoss: return QObject::tr("eval loss");
        case Curve::EvalDice: return QObject::tr("eval mean Dice");
        case Curve::HostSeconds: return QObject::tr("host s/step");
        case Curve::PredictedSeconds: return QObject::tr("predicted s/step");
        case Curve::LearningRate: return QObject::tr("learning rate");
        case Curve::LossScale: return QObject::tr("loss scale");
        case Curve::Throughput: return QObject::tr("images/s");
        case Curve::HostPrediction: return QObject::tr("predicted on this host s/step");
        case Curve::EvalAp: return QObject::tr("eval mAP");
        case Curve::EvalAp50: return QObject::tr("eval AP50");
        case Curve::EvalDetections: return QObject::tr("detections");
        case Curve::EvalTruePositives: return QObject::tr("true positives");
        case Curve::EvalObjects: return QObject::tr("objects");
    }
    return {};
}

// The curves that name their run in the legend; the others are told apart by their line style, which the
// chart's title explains (the small charts have room for one entry per run).
bool hasLegendEntry(Curve curve) {
    return curve != Curve::RawLoss && curve != Curve::PredictedSeconds && curve != Curve::LossScale && curve != Curve::HostPrediction &&
           curve != Curve::EvalAp50 && curve != Curve::EvalTruePositives && curve != Curve::EvalObjects;
}

// Curves drawn on a log axis leave out values ≤ 0.
bool onLogAxis(Curve curve, bool loss_log_scale) {
    switch (curve) {
        case Curve::RawLoss:
        case Curve::SmoothedLoss:
        case Curve::EvalLoss: return loss_log_scale;
        case Curve::HostSeconds:
        case Curve::PredictedSeconds:
        case Curve::HostPrediction:
        case Curve::LossScale: return true;
        default: return false;
    }
}

// Tableau's ten colours: distinct, and readable on white.
const QColor& paletteColor(std::size_t i) {
    static const QColor colors[] = {QColor(0x4e, 0x79, 0xa7), QColor(0xf2, 0x8e, 0x2b), QColor(0x59, 0xa1, 0x4f), QColor(0xe1, 0x57, 0x59),
                                    QColor(0xb0, 0x7a, 0xa1), QColor(0x76, 0xb7, 0xb2), QColor(0xed, 0xc9, 0x48), QColor(0xff, 0x9d, 0xa7),
                                    QColor(0x9c, 0x75, 0x5f), QColor(0xba, 0xb0, 0xac)};
    static_assert(std::size(colors) == palette_size);
    return colors[i % palette_size];
}

QIcon swatch(const QColor& color) {
    QPixmap pixmap(12, 12);
    pixmap.fill(color);
    return QIcon(pixmap);
}

struct Range {
    double low = std::numeric_limits<double>::infinity();
    double high = -std::numeric_limits<double>::infinity();
    void add(double v) {
        low = std::min(low, v);
        high = std::max(high, v);
    }
    bool isValid() const { return low <= high; }
};

// A log axis over whole powers of `base` around the range, so it always has labelled ticks; values on a
// power of the base (a loss scale of 2¹⁵) get half a power of room rather than sitting on the frame.
void setLogRange(QLogValueAxis* axis, Range range, double fallback_low, double fallback_high) {
    if (!range.isValid() || range.low <= 0) range = {fallback_low, fallback_high};
    const double log_base = std::log(axis->base());
    const double low = std::log(range.low) / log_base, high = std::log(range.high) / log_base;
    double low_power = std::floor(low + 1e-9), high_power = std::ceil(high - 1e-9);
    if (low - low_power < 1e-6) low_power -= 0.5;
    if (high_power - high < 1e-6) high_power += 0.5;
    // A hair wider than the powers themselves, so rounding never drops the first or last label.
    axis->setRange(std::pow(axis->base(), low_power) * (1 - 1e-9), std::pow(axis->base(), high_power) * (1 + 1e-9));
}

// 1, 2, 5 or 10 times a power of ten, the nearest to x (Heckbert's "nice numbers for graph labels").
double niceNumber(double x) {
    const double power = std::pow(10.0, std::floor(std::log10(x)));
    const double fraction = x / power;
    return (fraction < 1.5 ? 1 : fraction < 3 ? 2 : fraction < 7 ? 5 : 10) * power;
}

// A linear axis from a nice number to a nice number, about five ticks; `pad` leaves 4 % of room above
// and below the values (never below 0 for values that are all ≥ 0, such as a loss or a rate).
void setNiceRange(QValueAxis* axis, Range range, bool from_zero, bool pad) {
    if (!range.isValid()) range = {0, 1};
    if (from_zero) range.low = std::min(range.low, 0.0);
    double room = pad ? (range.high - range.low) * 0.04 : 0.0;
    if (range.high - range.low <= 0) room = std::max(std::abs(range.high) * 0.1, 1e-9);
    const double low = range.low >= 0 ? std::max(0.0, range.low - room) : range.low - room;
    const double high = range.high + room;
    const double step = niceNumber((high - low) / 4);
    const double nice_low = std::floor(low / step + 1e-9) * step, nice_high = std::ceil(high / step - 1e-9) * step;
    axis->setRange(nice_low, nice_high);
    axis->setTickCount(std::clamp(static_cast<int>(std::lround((nice_high - nice_low) / step)) + 1, 2, 12));
}

// Bytes in a unit that suits the largest value: (divisor, "GiB").
std::pair<double, QString> memoryUnit(double largest_bytes) {
    if (largest_bytes >= bytes_per_kib * bytes_per_kib * bytes_per_kib) return {bytes_per_kib * bytes_per_kib * bytes_per_kib, QStringLiteral("GiB")};
    if (largest_bytes >= bytes_per_kib * bytes_per_kib) return {bytes_per_kib * bytes_per_kib, QStringLiteral("MiB")};
    return {bytes_per_kib, QStringLiteral("KiB")};
}

QString xmlEscaped(const QString& text) { return text.toHtmlEscaped(); }

QString svgColor(const QColor& color) { return color.name(QColor::HexRgb); }

}  // namespace

// ---- one run ---------------------------------------------------------------------------------------------

struct RunCharts::RunState {
    QString name;
    RunSeries data;
    QColor color;
    bool visible = true;
    bool dirty = true;  // the display series lag the data
    QListWidgetItem* item = nullptr;
    QXYSeries* curves[curve_count] = {};
    double host_prediction = 0;   // s/step on this host; 0: none
    double host_uncertainty = 0;  // ± seconds
    QAreaSeries* host_band = nullptr;  // between host_prediction ∓ host_uncertainty, over the run's steps
};

// ---- construction --------------------------------------------------------------------------------------------

RunCharts::RunCharts(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->setSpacing(4);
    buildToolbar();

    m_stack = new QStackedWidget(this);
    m_empty = new QLabel(m_stack);
    m_empty->setObjectName(QStringLiteral("runChartsEmptyState"));
    m_empty->setAlignment(Qt::AlignCenter);
    m_empty->setWordWrap(true);
    m_empty->setMargin(24);
    m_empty->setText(tr("No run yet — start one from the Run dock or open a finished run's model_dir"));
    m_empty->setToolTip(tr("The charts follow a training run as it trains; finished runs can be opened beside it"));
    m_stack->addWidget(m_empty);

    m_content = new QWidget(m_stack);
    auto* content_layout = new QHBoxLayout(m_content);
    content_layout->setContentsMargins(0, 0, 0, 0);
    auto* horizontal = new QSplitter(Qt::Horizontal, m_content);
    horizontal->setChildrenCollapsible(false);
    content_layout->addWidget(horizontal);

    // The run list: a checkbox per run to show or hide it, the current run's memory in the memory chart.
    auto* runs_panel = new QWidget(horizontal);
    auto* runs_layout = new QVBoxLayout(runs_panel);
    runs_layout->setContentsMargins(0, 0, 0, 0);
    auto* runs_title = new QLabel(tr("<b>Runs</b>"), runs_panel);
    runs_title->setToolTip(tr("Every run shown, in its colour"));
    runs_layout->addWidget(runs_title);
    m_run_list = new QListWidget(runs_panel);
    m_run_list->setObjectName(QStringLiteral("runList"));
    m_run_list->setSelectionMode(QAbstractItemView::SingleSelection);
    m_run_list->setToolTip(tr("Untick a run to hide its curves; select one to show its cores' memory"));
    m_run_list->setMinimumWidth(120);
    runs_layout->addWidget(m_run_list, 1);
    m_remove_button = new QToolButton(runs_panel);
    m_remove_button->setText(tr("Remove"));
    m_remove_button->setToolTip(tr("Take the selected run off the charts (its files stay as they are)"));
    runs_layout->addWidget(m_remove_button);
    horizontal->addWidget(runs_panel);

    buildCharts();
    // Wide and low, as a bottom dock is: the loss on the left, the others as tabs beside it — each
    // then gets half the dock rather than a quarter of it (a quarter cut its ticks and titles short).
    auto* charts = new QSplitter(Qt::Horizontal, horizontal);
    charts->setChildrenCollapsible(false);
    charts->addWidget(m_views[index(Chart::Loss)]);
    m_chart_tabs = new QTabWidget(charts);
    m_chart_tabs->setObjectName(QStringLiteral("chartTabs"));
    m_chart_tabs->setDocumentMode(true);
    m_chart_tabs->addTab(m_views[index(Chart::StepTime)], tr("Step time"));
    m_chart_tabs->addTab(m_views[index(Chart::LearningRate)], tr("Learning rate"));
    m_chart_tabs->addTab(m_views[index(Chart::Throughput)], tr("Throughput"));
    m_chart_tabs->addTab(m_views[index(Chart::Memory)], tr("Memory"));
    m_chart_tabs->addTab(m_views[index(Chart::Boxes)], tr("Boxes"));
    m_chart_tabs->setTabVisible(m_chart_tabs->indexOf(m_views[index(Chart::Boxes)]), false);  // until a detector's evaluation
    charts->addWidget(m_chart_tabs);
    charts->setStretchFactor(0, 2);
    charts->setStretchFactor(1, 3);
    charts->setSizes({500, 750});
    horizontal->addWidget(charts);
    horizontal->setStretchFactor(0, 0);
    horizontal->setStretchFactor(1, 1);
    horizontal->setSizes({160, 1200});

    m_stack->addWidget(m_content);
    layout->addWidget(m_stack, 1);

    m_refresh_timer = new QTimer(this);
    m_refresh_timer->setSingleShot(true);
    m_refresh_timer->setInterval(refresh_interval_ms);
    connect(m_refresh_timer, &QTimer::timeout, this, &RunCharts::refresh);
    connect(m_run_list, &QListWidget::itemChanged, this, &RunCharts::onRunItemChanged);
    connect(m_run_list, &QListWidget::currentItemChanged, this, &RunCharts::onCurrentRunChanged);
    connect(m_remove_button, &QToolButton::clicked, this, &RunCharts::onRemoveRunClicked);

    updateEmptyState();
    refresh();
}

RunCharts::~RunCharts() = default;

void RunCharts::buildToolbar() {
    auto* bar = new QHBoxLayout();
    bar->setSpacing(6);
    const QString smoothing_tip = tr("TensorBoard's smoothing: the bold loss curve is a moving average of the raw losses (faint), "
                                     "each point weighing the previous average by this much (debiased at the start); 0 shows "
                                     "the raw loss");
    auto* smoothing_label = new QLabel(tr("Smoothing"), this);
    smoothing_label->setToolTip(smoothing_tip);
    bar->addWidget(smoothing_label);
    m_smoothing_slider = new QSlider(Qt::Horizontal, this);
    m_smoothing_slider->setObjectName(QStringLiteral("smoothingSlider"));
    m_smoothing_slider->setRange(0, 99);
    m_smoothing_slider->setValue(static_cast<int>(std::lround(m_smoothing * 100)));
    m_smoothing_slider->setFixedWidth(160);
    m_smoothing_slider->setToolTip(smoothing_tip);
    bar->addWidget(m_smoothing_slider);
    m_smoothing_value = new QLabel(QString::number(m_smoothing, 'f', 2), this);
    m_smoothing_value->setMinimumWidth(m_smoothing_value->fontMetrics().horizontalAdvance(QStringLiteral("0.00")) + 4);
    m_smoothing_value->setToolTip(smoothing_tip);
    bar->addWidget(m_smoothing_value);
    bar->addSpacing(12);

    m_log_scale_box = new QCheckBox(tr("Log scale"), this);
    m_log_scale_box->setObjectName(QStringLiteral("logScaleBox"));
    m_log_scale_box->setToolTip(tr("A logarithmic loss axis: the late, slow part of training stays readable"));
    bar->addWidget(m_log_scale_box);
    bar->addSpacing(12);

    auto* x_label = new QLabel(tr("X axis"), this);
    const QString x_tip = tr("What the charts' horizontal axis counts: training steps, or wall-clock time since each run's "
                             "first point (runs started at different times then line up)");
    x_label->setToolTip(x_tip);
    bar->addWidget(x_label);
    m_x_axis_box = new QComboBox(this);
    m_x_axis_box->setObjectName(QStringLiteral("xAxisBox"));
    m_x_axis_box->addItem(tr("Step"));
    m_x_axis_box->addItem(tr("Wall time"));
    m_x_axis_box->setItemData(0, tr("Completed training steps"), Qt::ToolTipRole);
    m_x_axis_box->setItemData(1, tr("Seconds (minutes, hours for long runs) since the run's first point"), Qt::ToolTipRole);
    m_x_axis_box->setToolTip(x_tip);
    bar->addWidget(m_x_axis_box);
    bar->addSpacing(12);

    m_open_button = new QToolButton(this);
    m_open_button->setText(tr("Open run…"));
    m_open_button->setToolTip(tr("Show a finished run beside the others: pick its model_dir (the folder with metrics.jsonl)"));
    bar->addWidget(m_open_button);

    m_export_button = new QToolButton(this);
    m_export_button->setText(tr("Export"));
    m_export_button->setToolTip(tr("Save a chart as a PNG image, an SVG drawing, or its data as CSV (every step, not just "
                                   "the points drawn). Right-click a chart for the same."));
    m_export_button->setPopupMode(QToolButton::InstantPopup);
    auto* menu = new QMenu(m_export_button);
    for (int c = 0; c < chart_count; ++c) menu->addMenu(exportMenu(static_cast<Chart>(c), menu));
    m_export_button->setMenu(menu);
    bar->addWidget(m_export_button);

    bar->addStretch(1);
    m_status = new QLabel(this);
    m_status->setObjectName(QStringLiteral("runChartsStatus"));
    m_status->setToolTip(tr("The latest step of the runs shown"));
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    bar->addWidget(m_status);
    static_cast<QVBoxLayout*>(layout())->addLayout(bar);

    connect(m_smoothing_slider, &QSlider::valueChanged, this, &RunCharts::onSmoothingSliderMoved);
    connect(m_log_scale_box, &QCheckBox::toggled, this, &RunCharts::onLogScaleToggled);
    connect(m_x_axis_box, &QComboBox::currentIndexChanged, this, &RunCharts::onXAxisChosen);
    connect(m_open_button, &QToolButton::clicked, this, &RunCharts::onOpenRunClicked);
}

QMenu* RunCharts::exportMenu(Chart chart, QWidget* parent) {
    static const char* const titles[chart_count] = {QT_TR_NOOP("Loss"), QT_TR_NOOP("Step time"), QT_TR_NOOP("Learning rate"),
                                                    QT_TR_NOOP("Throughput"), QT_TR_NOOP("Memory"),
                                                    QT_TR_NOOP("Boxes")};
    auto* menu = new QMenu(tr(titles[index(chart)]), parent);
    menu->setToolTipsVisible(true);
    const struct {
        QString format, text, tip;
    } entries[] = {{QStringLiteral("png"), tr("PNG image…"), tr("The chart as drawn, pixel for pixel")},
                   {QStringLiteral("svg"), tr("SVG drawing…"), tr("The chart as vectors, for papers and slides")},
                   {QStringLiteral("csv"), tr("CSV data…"), tr("Every step of the runs shown: run, step, wall time and the chart's values")}};
    for (const auto& entry : entries) {
        QAction* action = menu->addAction(entry.text);
        action->setToolTip(entry.tip);
        action->setData(QStringList{QString::number(index(chart)), entry.format});
        connect(action, &QAction::triggered, this, &RunCharts::onExportActionTriggered);
    }
    return menu;
}

void RunCharts::buildCharts() {
    static const char* const titles[chart_count] = {
        // Short enough for the default window; the line styles are in each chart's tooltip, the runs'
        // colours in the run list beside the charts (so the charts need no legend).
        QT_TR_NOOP("Loss and evaluation"), QT_TR_NOOP("Step time: here and on the device"),
        QT_TR_NOOP("Learning rate · loss scale"), QT_TR_NOOP("Throughput"), QT_TR_NOOP("Peak memory per core"),
        QT_TR_NOOP("Boxes per evaluation")};
    static const char* const tips[chart_count] = {
        QT_TR_NOOP("Training loss per step (faint: raw, bold: smoothed with the slider's weight), evaluation loss (points) and "
                   "the evaluations' mean Dice — for a detector its mAP, AP@[.5:.95] (dash-dot), and AP50 (dotted) — on the "
                   "right axis. Right-click to export."),
        QT_TR_NOOP("Seconds per step measured on this machine's simulated cores (solid) and predicted for the experiment's "
                   "device (dashed), on a log axis. When this host is calibrated (tessera-cli calibrate), the dotted line is "
                   "its predicted step and the band its ± from calibrate --check. Right-click to export."),
        QT_TR_NOOP("The learning rate of each step (solid, left axis) and the mixed-precision loss scale (dotted, right axis, "
                   "log₂). Right-click to export."),
        QT_TR_NOOP("Images per second on this machine's simulated cores. Right-click to export."),
        QT_TR_NOOP("Each simulated core's peak memory (bars; red above capacity) against a core's capacity (dashed line), for "
                   "the run selected in the list (else the latest). Right-click to export."),
        QT_TR_NOOP("A detector's boxes at each evaluation, over all held-out images: its detections after NMS and the score "
                   "threshold (solid), those matching an object at IoU 0.5 (dashed) and the objects (dotted). Right-click to "
                   "export.")};
    for (int c = 0; c < chart_count; ++c) {
        auto* chart = new QChart();
        chart->setAnimationOptions(QChart::NoAnimation);
        chart->legend()->setAlignment(Qt::AlignBottom);
        chart->legend()->hide();  // the run list is the legend: a swatch and the name of each run
        chart->setMargins(QMargins(4, 4, 4, 4));
        QFont title = chart->titleFont();
        title.setBold(true);
        chart->setTitleFont(title);
        chart->setTitle(tr(titles[c]));
        auto* view = new QChartView(chart, this);
        // Antialiased curves cost several times more to draw in software; a live chart redraws often.
        view->setRenderHint(QPainter::Antialiasing, false);
        view->setMinimumSize(220, 140);
        view->setToolTip(tr(tips[c]));
        view->setContextMenuPolicy(Qt::CustomContextMenu);
        view->setProperty("tesseraChart", c);
        connect(view, &QChartView::customContextMenuRequested, this, &RunCharts::onChartContextMenu);
        m_views[c] = view;
        if (static_cast<Chart>(c) == Chart::Memory) continue;  // its axes come with its bars
        auto* x = new QValueAxis();
        x->setTitleText(xTitle());
        x->setLabelFormat(QStringLiteral("%.0f"));
        chart->addAxis(x, Qt::AlignBottom);
        m_x_axes[c] = x;
    }
    const auto addAxis = [this](Chart c, QAbstractAxis* axis, Qt::Alignment alignment, const QString& title, const QString& format) {
        axis->setTitleText(title);
        if (auto* value = qobject_cast<QValueAxis*>(axis)) value->setLabelFormat(format);
        if (auto* log = qobject_cast<QLogValueAxis*>(axis)) log->setLabelFormat(format);
        m_views[index(c)]->chart()->addAxis(axis, alignment);
        return axis;
    };
    m_loss_axis = addAxis(Chart::Loss, new QValueAxis(), Qt::AlignLeft, tr("loss"), QStringLiteral("%.3g"));
    m_dice_axis = addAxis(Chart::Loss, new QValueAxis(), Qt::AlignRight, tr("eval Dice · mAP"), QStringLiteral("%.2f"));
    static_cast<QValueAxis*>(m_dice_axis)->setRange(0, 1);
    auto* time_axis = new QLogValueAxis();
    time_axis->setBase(10);
    time_axis->setMinorTickCount(8);
    m_time_axis = addAxis(Chart::StepTime, time_axis, Qt::AlignLeft, tr("s (log)"), QStringLiteral("%g"));
    m_rate_axis = addAxis(Chart::LearningRate, new QValueAxis(), Qt::AlignLeft, tr("learning rate"), QStringLiteral("%.2g"));
    auto* scale_axis = new QLogValueAxis();
    scale_axis->setBase(2);
    m_scale_axis = addAxis(Chart::LearningRate, scale_axis, Qt::AlignRight, tr("scale (log₂)"), QStringLiteral("%g"));
    m_throughput_axis = addAxis(Chart::Throughput, new QValueAxis(), Qt::AlignLeft, tr("images/s"), QStringLiteral("%.3g"));
    m_box_axis = addAxis(Chart::Boxes, new QValueAxis(), Qt::AlignLeft, tr("boxes"), QStringLiteral("%.0f"));
}

// ---- runs --------------------------------------------------------------------------------------------------

RunCharts::RunState* RunCharts::findRun(const QString& run) const {
    for (const auto& state : m_runs) {
        if (state->name == run) return state.get();
    }
    return nullptr;
}

RunCharts::RunState& RunCharts::ensureRun(const QString& run) {
    if (RunState* existing = findRun(run)) return *existing;
    auto state = std::make_unique<RunState>();
    state->name = run;
    state->color = nextColor();
    state->item = new QListWidgetItem(swatch(state->color), run);
    state->item->setData(Qt::UserRole, run);
    state->item->setFlags(Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemIsUserCheckable);
    state->item->setCheckState(Qt::Checked);
    state->item->setToolTip(tr("<b>%1</b><br>Untick to hide its curves; select it to show its cores' memory").arg(run.toHtmlEscaped()));
    {
        const QSignalBlocker blocker(m_run_list);
        m_run_list->addItem(state->item);
    }
    createCurves(*state);
    m_runs.push_back(std::move(state));
    m_axes_dirty = true;
    m_memory_dirty = true;
    updateEmptyState();
    return *m_runs.back();
}

QColor RunCharts::nextColor() const {
    for (std::size_t i = 0; i < palette_size; ++i) {
        const QColor& candidate = paletteColor(i);
        if (std::none_of(m_runs.begin(), m_runs.end(), [&](const auto& state) { return state->color == candidate; })) return candidate;
    }
    return paletteColor(m_runs.size());
}

void RunCharts::createCurves(RunState& state) {
    for (int c = 0; c < curve_count; ++c) {
        const auto curve = static_cast<Curve>(c);
        QXYSeries* series = nullptr;
        if (curve == Curve::EvalLoss) {
            auto* scatter = new QScatterSeries();
            scatter->setMarkerSize(8);
            scatter->setColor(state.color);
            scatter->setBorderColor(state.color.darker(160));
            series = scatter;
        } else {
            series = new QLineSeries();
            QPen pen(state.color);
            pen.setWidthF(1.5);
            switch (curve) {
                case Curve::RawLoss: {
                    QColor faint = state.color;
                    faint.setAlpha(70);
                    pen.setColor(faint);
                    pen.setWidthF(1.0);
                    break;
                }
                case Curve::SmoothedLoss: pen.setWidthF(2.2); break;
                case Curve::EvalDice:
                case Curve::EvalAp:
                case Curve::EvalDetections:
                    if (curve != Curve::EvalDetections) pen.setStyle(Qt::DashDotLine);
                    series->setPointsVisible(true);
                    break;
                case Curve::EvalTruePositives: pen.setStyle(Qt::DashLine); break;
                case Curve::EvalAp50:
                case Curve::EvalObjects: pen.setStyle(Qt::DotLine); break;
                case Curve::PredictedSeconds: pen.setStyle(Qt::DashLine); break;
                case Curve::LossScale:
                case Curve::HostPrediction: pen.setStyle(Qt::DotLine); break;
                default: break;
            }
            series->setPen(pen);
        }
        series->setName(curve == Curve::EvalLoss || curve == Curve::EvalDice || curve == Curve::EvalAp
                            ? QStringLiteral("%1 · %2").arg(state.name, curveLabel(curve))
                        : hasLegendEntry(curve)                             ? state.name
                                                                            : QStringLiteral("%1 · %2").arg(state.name, curveLabel(curve)));
        QChart* chart = m_views[index(chartOf(curve))]->chart();
        chart->addSeries(series);
        series->attachAxis(m_x_axes[index(chartOf(curve))]);
        switch (curve) {
            case Curve::RawLoss:
            case Curve::SmoothedLoss:
            case Curve::EvalLoss: series->attachAxis(m_loss_axis); break;
            case Curve::EvalDice:
            case Curve::EvalAp:
            case Curve::EvalAp50: series->attachAxis(m_dice_axis); break;
            case Curve::EvalDetections:
            case Curve::EvalTruePositives:
            case Curve::EvalObjects: series->attachAxis(m_box_axis); break;
            case Curve::HostSeconds:
            case Curve::PredictedSeconds:
            case Curve::HostPrediction: series->attachAxis(m_time_axis); break;
            case Curve::LearningRate: series->attachAxis(m_rate_axis); break;
            case Curve::LossScale: series->attachAxis(m_scale_axis); break;
            case Curve::Throughput: series->attachAxis(m_throughput_axis); break;
        }
        if (!hasLegendEntry(curve)) {
            for (QLegendMarker* marker : chart->legend()->markers(series)) marker->setVisible(false);
        }
        connect(series, &QXYSeries::hovered, this, &RunCharts::onCurveHovered);
        state.curves[c] = series;
    }
    // The host prediction's band: the run's colour, faint, under its curves.
    QChart* step_chart = m_views[index(Chart::StepTime)]->chart();
    state.host_band = new QAreaSeries(new QLineSeries(), new QLineSeries());
    state.host_band->upperSeries()->setParent(state.host_band);
    state.host_band->lowerSeries()->setParent(state.host_band);
    QColor fill = state.color;
    fill.setAlpha(45);
    state.host_band->setBrush(fill);
    state.host_band->setPen(Qt::NoPen);
    state.host_band->setName(QStringLiteral("%1 · %2").arg(state.name, tr("± of the host prediction")));
    step_chart->addSeries(state.host_band);
    state.host_band->attachAxis(m_x_axes[index(Chart::StepTime)]);
    state.host_band->attachAxis(m_time_axis);
    for (QLegendMarker* marker : step_chart->legend()->markers(state.host_band)) marker->setVisible(false);
}

void RunCharts::deleteCurves(RunState& state) {
    if (state.host_band) {
        m_views[index(Chart::StepTime)]->chart()->removeSeries(state.host_band);
        delete state.host_band;
        state.host_band = nullptr;
    }
    for (int c = 0; c < curve_count; ++c) {
        if (!state.curves[c]) continue;
        m_views[index(chartOf(static_cast<Curve>(c)))]->chart()->removeSeries(state.curves[c]);
        delete state.curves[c];
        state.curves[c] = nullptr;
    }
}

void RunCharts::addStep(const QString& run, const run::StepRecord& step) {
    RunState& state = ensureRun(run);
    const std::vector<std::int64_t> peaks_before = state.data.corePeakBytes();
    state.data.addStep(step);
    state.dirty = true;
    if (!step.core_peak_bytes.empty() && (step.core_peak_bytes != peaks_before || m_last_memory_run != run)) {
        m_last_memory_run = run;
        m_memory_dirty = true;  // the bars change only when the peaks do
    }
    scheduleRefresh();
}

void RunCharts::addEval(const QString& run, const run::EvalRecord& eval) {
    RunState& state = ensureRun(run);
    state.data.addEval(eval);
    state.dirty = true;
    scheduleRefresh();
}

void RunCharts::setHostPrediction(const QString& run, double seconds, double uncertainty_seconds) {
    RunState& state = ensureRun(run);
    state.host_prediction = std::isfinite(seconds) && seconds > 0 ? seconds : 0;
    state.host_uncertainty = std::isfinite(uncertainty_seconds) && uncertainty_seconds > 0 ? uncertainty_seconds : 0;
    state.dirty = true;
    scheduleRefresh();
}

QAreaSeries* RunCharts::hostPredictionBand(const QString& run) const {
    const RunState* state = findRun(run);
    return state ? state->host_band : nullptr;
}

void RunCharts::setCoreMemory(const QString& run, const std::vector<std::int64_t>& peak_bytes, std::int64_t capacity_bytes) {
    RunState& state = ensureRun(run);
    // Sent with every step and almost never different: redraw the bars only when they change.
    if (m_last_memory_run == run && state.data.corePeakBytes() == peak_bytes && state.data.coreCapacityBytes() == capacity_bytes) return;
    state.data.setCoreMemory(peak_bytes, capacity_bytes);
    m_last_memory_run = run;
    m_memory_dirty = true;
    scheduleRefresh();
}

bool RunCharts::loadRun(const QString& run, const std::filesystem::path& model_dir) {
    RunSeries loaded;
    try {
        loaded = RunSeries::load(model_dir);
    } catch (const std::exception& error) {
        m_status->setText(tr("Cannot read %1: %2").arg(QString::fromStdString(model_dir.string()), QString::fromUtf8(error.what())));
        return false;
    }
    if (loaded.isEmpty()) {
        m_status->setText(tr("No metrics in %1 (metrics.jsonl is missing or empty)").arg(QString::fromStdString(model_dir.string())));
        return false;
    }
    RunState& state = ensureRun(run);
    state.data = std::move(loaded);
    state.dirty = true;
    if (!state.data.corePeakBytes().empty()) m_last_memory_run = run;
    m_memory_dirty = true;
    state.item->setToolTip(tr("<b>%1</b> — %2<br>Untick to hide its curves; select it to show its cores' memory")
                               .arg(run.toHtmlEscaped(), QString::fromStdString(model_dir.string()).toHtmlEscaped()));
    scheduleRefresh();
    return true;
}

void RunCharts::removeRun(const QString& name) {
    const QString run = name;  // `name` may be the run's own, which goes with it
    const auto found = std::find_if(m_runs.begin(), m_runs.end(), [&](const auto& state) { return state->name == run; });
    if (found == m_runs.end()) return;
    deleteCurves(**found);
    delete (*found)->item;  // leaves the list
    m_runs.erase(found);
    if (m_memory_run == run) m_memory_run.clear();
    if (m_last_memory_run == run) m_last_memory_run.clear();
    m_axes_dirty = true;
    m_memory_dirty = true;
    updateEmptyState();
    scheduleRefresh();
}

void RunCharts::clear() {
    while (!m_runs.empty()) removeRun(m_runs.back()->name);
}

QStringList RunCharts::runs() const {
    QStringList names;
    for (const auto& state : m_runs) names << state->name;
    return names;
}

const RunSeries* RunCharts::runSeries(const QString& run) const {
    const RunState* state = findRun(run);
    return state ? &state->data : nullptr;
}

void RunCharts::setRunVisible(const QString& run, bool visible) {
    RunState* state = findRun(run);
    if (!state) return;
    state->visible = visible;
    for (int c = 0; c < curve_count; ++c) {
        state->curves[c]->setVisible(visible);
        // Showing a series shows its legend entry again: keep the ones without an entry hidden.
        if (hasLegendEntry(static_cast<Curve>(c))) continue;
        for (QLegendMarker* marker : m_views[index(chartOf(static_cast<Curve>(c)))]->chart()->legend()->markers(state->curves[c])) {
            marker->setVisible(false);
        }
    }
    state->host_band->setVisible(visible);
    for (QLegendMarker* marker : m_views[index(Chart::StepTime)]->chart()->legend()->markers(state->host_band)) marker->setVisible(false);
    {
        const QSignalBlocker blocker(m_run_list);
        state->item->setCheckState(visible ? Qt::Checked : Qt::Unchecked);
    }
    m_axes_dirty = true;
    scheduleRefresh();
}

bool RunCharts::isRunVisible(const QString& run) const {
    const RunState* state = findRun(run);
    return state && state->visible;
}

void RunCharts::setMemoryRun(const QString& run) {
    m_memory_run = run;
    m_memory_dirty = true;
    if (RunState* state = findRun(run)) {
        const QSignalBlocker blocker(m_run_list);
        m_run_list->setCurrentItem(state->item);
    }
    scheduleRefresh();
}

QString RunCharts::memoryRun() const {
    if (!m_memory_run.isEmpty() && findRun(m_memory_run)) return m_memory_run;
    if (!m_last_memory_run.isEmpty() && findRun(m_last_memory_run)) return m_last_memory_run;
    for (auto it = m_runs.rbegin(); it != m_runs.rend(); ++it) {
        if (!(*it)->data.corePeakBytes().empty()) return (*it)->name;
    }
    return m_runs.empty() ? QString() : m_runs.back()->name;
}

QColor RunCharts::runColor(const QString& run) const {
    const RunState* state = findRun(run);
    return state ? state->color : QColor();
}

QXYSeries* RunCharts::series(const QString& run, Curve curve) const {
    const RunState* state = findRun(run);
    return state ? state->curves[index(curve)] : nullptr;
}

QChartView* RunCharts::chartView(Chart chart) const { return m_views[index(chart)]; }

bool RunCharts::isChartAvailable(Chart chart) const {
    if (chart == Chart::Loss) return true;
    return m_chart_tabs->isTabVisible(m_chart_tabs->indexOf(m_views[index(chart)]));
}

void RunCharts::showChart(Chart chart) {
    if (chart != Chart::Loss && isChartAvailable(chart)) m_chart_tabs->setCurrentWidget(m_views[index(chart)]);
}

QString RunCharts::chartName(Chart chart) {
    switch (chart) {
        case Chart::Loss: return QStringLiteral("loss");
        case Chart::StepTime: return QStringLiteral("step_time");
        case Chart::LearningRate: return QStringLiteral("learning_rate");
        case Chart::Throughput: return QStringLiteral("throughput");
        case Chart::Memory: return QStringLiteral("memory");
        case Chart::Boxes: return QStringLiteral("boxes");
    }
    return {};
}

QString RunCharts::emptyStateText() const { return m_stack->currentWidget() == m_empty ? m_empty->text() : QString(); }

void RunCharts::updateEmptyState() {
    m_stack->setCurrentWidget(m_runs.empty() ? static_cast<QWidget*>(m_empty) : m_content);
    m_export_button->setEnabled(!m_runs.empty());
    if (m_runs.empty()) m_status->clear();
}

// ---- view options ------------------------------------------------------------------------------------------

void RunCharts::setSmoothing(double ema_weight) {
    const double weight = std::clamp(std::isfinite(ema_weight) ? ema_weight : 0.0, 0.0, 0.99);
    {
        const QSignalBlocker blocker(m_smoothing_slider);
        m_smoothing_slider->setValue(static_cast<int>(std::lround(weight * 100)));
    }
    m_smoothing_value->setText(QString::number(weight, 'f', 2));
    if (weight == m_smoothing) return;
    m_smoothing = weight;
    markAllDirty();
    scheduleRefresh();
}

void RunCharts::setLogScale(bool log_scale) {
    {
        const QSignalBlocker blocker(m_log_scale_box);
        m_log_scale_box->setChecked(log_scale);
    }
    if (log_scale == m_log_scale) return;
    m_log_scale = log_scale;
    replaceLossAxis();
    markAllDirty();  // a log axis leaves out losses ≤ 0
    scheduleRefresh();
}

void RunCharts::replaceLossAxis() {
    QChart* chart = m_views[index(Chart::Loss)]->chart();
    for (const auto& state : m_runs) {
        for (const Curve curve : {Curve::RawLoss, Curve::SmoothedLoss, Curve::EvalLoss}) state->curves[index(curve)]->detachAxis(m_loss_axis);
    }
    chart->removeAxis(m_loss_axis);
    delete m_loss_axis;
    if (m_log_scale) {
        auto* axis = new QLogValueAxis();
        axis->setBase(10);
        axis->setMinorTickCount(8);
        axis->setLabelFormat(QStringLiteral("%g"));
        axis->setTitleText(tr("loss (log)"));
        m_loss_axis = axis;
    } else {
        auto* axis = new QValueAxis();
        axis->setLabelFormat(QStringLiteral("%.3g"));
        axis->setTitleText(tr("loss"));
        m_loss_axis = axis;
    }
    chart->addAxis(m_loss_axis, Qt::AlignLeft);
    for (const auto& state : m_runs) {
        for (const Curve curve : {Curve::RawLoss, Curve::SmoothedLoss, Curve::EvalLoss}) state->curves[index(curve)]->attachAxis(m_loss_axis);
    }
}

void RunCharts::setXAxis(XAxis axis) {
    {
        const QSignalBlocker blocker(m_x_axis_box);
        m_x_axis_box->setCurrentIndex(axis == XAxis::Step ? 0 : 1);
    }
    if (axis == m_x_axis) return;
    m_x_axis = axis;
    markAllDirty();
    scheduleRefresh();
}

QString RunCharts::xTitle() const {
    if (m_x_axis == XAxis::Step) return tr("step");
    if (m_x_scale < 1.0 / 600) return tr("hours since the run's first point");
    if (m_x_scale < 1.0) return tr("minutes since the run's first point");
    return tr("seconds since the run's first point");
}

double RunCharts::wantedXScale() const {
    if (m_x_axis == XAxis::Step) return 1.0;
    double longest = 0;
    for (const auto& state : m_runs) {
        if (!state->visible || state->data.isEmpty()) continue;
        double end = state->data.wallTimes().empty() ? 0.0 : state->data.wallTimes().back();
        if (!state->data.evals().empty()) end = std::max(end, state->data.evals().back().wall_time);
        longest = std::max(longest, end - state->data.startWallTime());
    }
    if (longest > 2 * 3600.0) return 1.0 / 3600;
    if (longest > 3 * 60.0) return 1.0 / 60;
    return 1.0;
}

void RunCharts::onSmoothingSliderMoved(int value) { setSmoothing(value / 100.0); }

void RunCharts::onLogScaleToggled(bool checked) { setLogScale(checked); }

void RunCharts::onXAxisChosen(int index_chosen) { setXAxis(index_chosen == 1 ? XAxis::WallTime : XAxis::Step); }

void RunCharts::onRunItemChanged(QListWidgetItem* item) {
    const QString run = item->data(Qt::UserRole).toString();
    const bool visible = item->checkState() == Qt::Checked;
    if (isRunVisible(run) != visible) setRunVisible(run, visible);
}

void RunCharts::onCurrentRunChanged(QListWidgetItem* current, QListWidgetItem* /*previous*/) {
    m_memory_run = current ? current->data(Qt::UserRole).toString() : QString();
    m_memory_dirty = true;
    scheduleRefresh();
}

void RunCharts::onRemoveRunClicked() {
    QListWidgetItem* item = m_run_list->currentItem();
    if (item) removeRun(item->data(Qt::UserRole).toString());
}

void RunCharts::onOpenRunClicked() {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Open a finished run's model_dir"));
    if (dir.isEmpty()) return;
    QString name = QFileInfo(dir).fileName();
    // Another run of that name stays: the new one gets a number.
    for (int n = 2; findRun(name); ++n) name = QStringLiteral("%1 (%2)").arg(QFileInfo(dir).fileName()).arg(n);
    if (!loadRun(name, dir.toStdString())) QMessageBox::warning(this, tr("Open run"), m_status->text());
}

void RunCharts::onCurveHovered(const QPointF& point, bool state) {
    if (!state) {
        QToolTip::hideText();
        return;
    }
    for (const auto& run : m_runs) {
        for (int c = 0; c < curve_count; ++c) {
            if (run->curves[c] != sender()) continue;
            const auto curve = static_cast<Curve>(c);
            const QString x = m_x_axis == XAxis::Step ? tr("step %1").arg(std::llround(point.x()))
                                                      : QStringLiteral("%1 (%2)").arg(point.x(), 0, 'g', 4).arg(xTitle());
            QToolTip::showText(QCursor::pos(),
                               QStringLiteral("<b>%1</b> — %2<br>%3: %4")
                                   .arg(run->name.toHtmlEscaped(), curveLabel(curve), x, QString::number(point.y(), 'g', 5)),
                               m_views[index(chartOf(curve))]);
            return;
        }
    }
}

// ---- drawing -----------------------------------------------------------------------------------------------

void RunCharts::scheduleRefresh() {
    if (!m_refresh_timer->isActive()) m_refresh_timer->start();  // not restarted: at most one redraw per interval
}

void RunCharts::markAllDirty() {
    for (const auto& state : m_runs) state->dirty = true;
    m_axes_dirty = true;
}

void RunCharts::refresh() {
    m_refresh_timer->stop();
    const double scale = wantedXScale();
    if (scale != m_x_scale) {
        m_x_scale = scale;
        markAllDirty();
    }
    for (const auto& state : m_runs) {
        if (!state->dirty) continue;
        updateCurves(*state);
        state->dirty = false;
        m_axes_dirty = true;
    }
    if (m_axes_dirty) {
        updateAxes();
        m_axes_dirty = false;
    }
    if (m_memory_dirty) {
        updateMemoryChart();
        m_memory_dirty = false;
    }
    // The status: the latest step of the newest visible run.
    for (auto it = m_runs.rbegin(); it != m_runs.rend(); ++it) {
        const RunSeries& latest = (*it)->data;
        if (!(*it)->visible || latest.size() == 0) continue;
        m_status->setText(tr("%1 · step %2 · loss %3").arg((*it)->name).arg(latest.lastStep()).arg(latest.values(RunSeries::Metric::Loss).back(), 0, 'g', 4));
        break;
    }
    emit refreshed();
}

void RunCharts::updateCurves(RunState& state) {
    const RunSeries& run = state.data;
    std::vector<double> x_wall;
    if (m_x_axis == XAxis::WallTime) {
        x_wall = run.relativeWallTimes();
        for (double& t : x_wall) t *= m_x_scale;
    }
    const std::span<const double> x = m_x_axis == XAxis::Step ? std::span<const double>(run.steps()) : std::span<const double>(x_wall);
    const auto show = [&](Curve curve, std::span<const double> values) {
        state.curves[index(curve)]->replace(decimateMinMax(x, values, max_display_points, onLogAxis(curve, m_log_scale)));
    };
    const std::vector<double>& loss = run.values(RunSeries::Metric::Loss);
    show(Curve::RawLoss, loss);
    show(Curve::SmoothedLoss, smoothEma(loss, m_smoothing));
    show(Curve::HostSeconds, run.values(RunSeries::Metric::HostSeconds));
    show(Curve::PredictedSeconds, run.values(RunSeries::Metric::PredictedSeconds));
    show(Curve::LearningRate, run.values(RunSeries::Metric::LearningRate));
    show(Curve::LossScale, run.values(RunSeries::Metric::LossScale));
    show(Curve::Throughput, run.values(RunSeries::Metric::ImagesPerSecond));

    // This host's prediction: flat across the run's steps (a single step gets a unit-wide span), inside
    // its band; the band's floor stays above 0 for the log axis.
    QList<QPointF> centre, upper, lower;
    if (state.host_prediction > 0 && !x.empty()) {
        const double first = x.front(), last = x.back() > x.front() ? x.back() : x.front() + 1;
        const double high = state.host_prediction + state.host_uncertainty;
        const double low = std::max(state.host_prediction - state.host_uncertainty, 0.05 * state.host_prediction);
        centre = {QPointF(first, state.host_prediction), QPointF(last, state.host_prediction)};
        if (state.host_uncertainty > 0) {
            upper = {QPointF(first, high), QPointF(last, high)};
            lower = {QPointF(first, low), QPointF(last, low)};
        }
    }
    state.curves[index(Curve::HostPrediction)]->replace(centre);
    state.host_band->upperSeries()->replace(upper);
    state.host_band->lowerSeries()->replace(lower);

    // Evaluations: at their step, or their time since the run's first point.
    const std::vector<RunSeries::EvalPoint>& evals = run.evals();
    std::vector<double> eval_x(evals.size()), eval_loss(evals.size()), dice_x, eval_dice;
    std::vector<double> box_x, eval_ap, eval_ap50, detections, true_positives, objects;
    const double start = run.startWallTime();
    for (std::size_t i = 0; i < evals.size(); ++i) {
        eval_x[i] = m_x_axis == XAxis::Step ? static_cast<double>(evals[i].step) : (evals[i].wall_time - start) * m_x_scale;
        eval_loss[i] = evals[i].loss;
        if (evals[i].is_detection) {  // a detector has no Dice, but AP and boxes (an undefined AP, −1, is left out)
            box_x.push_back(eval_x[i]);
            eval_ap.push_back(evals[i].ap >= 0 ? evals[i].ap : std::numeric_limits<double>::quiet_NaN());
            eval_ap50.push_back(evals[i].ap50 >= 0 ? evals[i].ap50 : std::numeric_limits<double>::quiet_NaN());
            detections.push_back(static_cast<double>(evals[i].num_detections));
            true_positives.push_back(static_cast<double>(evals[i].num_true_positives));
            objects.push_back(static_cast<double>(evals[i].num_ground_truth));
            continue;
        }
        dice_x.push_back(eval_x[i]);
        eval_dice.push_back(evals[i].mean_dice);
    }
    state.curves[index(Curve::EvalLoss)]->replace(decimateMinMax(eval_x, eval_loss, max_display_points, m_log_scale));
    state.curves[index(Curve::EvalDice)]->replace(decimateMinMax(dice_x, eval_dice, max_display_points, false));
    state.curves[index(Curve::EvalAp)]->replace(decimateMinMax(box_x, eval_ap, max_display_points, false));
    state.curves[index(Curve::EvalAp50)]->replace(decimateMinMax(box_x, eval_ap50, max_display_points, false));
    state.curves[index(Curve::EvalDetections)]->replace(decimateMinMax(box_x, detections, max_display_points, false));
    state.curves[index(Curve::EvalTruePositives)]->replace(decimateMinMax(box_x, true_positives, max_display_points, false));
    state.curves[index(Curve::EvalObjects)]->replace(decimateMinMax(box_x, objects, max_display_points, false));

    QString tip = QStringLiteral("<b>%1</b><br>").arg(state.name.toHtmlEscaped());
    if (run.size() > 0) {
        tip += tr("%1 steps, the last %2 with loss %3").arg(run.size()).arg(run.lastStep()).arg(loss.back(), 0, 'g', 4);
    }
    if (!evals.empty() && !evals.back().is_detection) {
        tip += tr("<br>%1 evaluations, the last: mean Dice %2").arg(evals.size()).arg(evals.back().mean_dice, 0, 'f', 3);
    } else if (!evals.empty()) {
        tip += tr("<br>%1 evaluations, the last: mAP %2, AP50 %3, %4 of %5 detections matched")
                   .arg(evals.size())
                   .arg(evals.back().ap, 0, 'f', 3)
                   .arg(evals.back().ap50, 0, 'f', 3)
                   .arg(evals.back().num_true_positives)
                   .arg(evals.back().num_detections);
    }
    if (state.host_prediction > 0) {
        tip += tr("<br>Predicted on this host: %1 ms per step").arg(state.host_prediction * 1e3, 0, 'f', 1);
        if (state.host_uncertainty > 0) tip += tr(" ± %1").arg(state.host_uncertainty * 1e3, 0, 'f', 1);
    }
    tip += tr("<br>Untick to hide its curves; select it to show its cores' memory");
    state.item->setToolTip(tip);
}

void RunCharts::updateAxes() {
    const auto rangeOf = [this](std::initializer_list<Curve> curves, bool y) {
        Range range;
        for (const auto& state : m_runs) {
            if (!state->visible) continue;
            for (const Curve curve : curves) {
                for (const QPointF& p : state->curves[index(curve)]->points()) range.add(y ? p.y() : p.x());
            }
        }
        return range;
    };
    // One x range for the four line charts, so a step lines up from chart to chart.
    const Range x = rangeOf({Curve::RawLoss, Curve::EvalLoss, Curve::EvalDice, Curve::EvalAp, Curve::HostSeconds, Curve::PredictedSeconds,
                             Curve::LearningRate, Curve::LossScale, Curve::Throughput, Curve::EvalDetections},
                            false);
    for (int c = 0; c < chart_count; ++c) {
        auto* axis = qobject_cast<QValueAxis*>(m_x_axes[c]);
        if (!axis) continue;
        Range span = x;
        if (!span.isValid()) span = {0, 1};
        if (span.high <= span.low) span.high = span.low + 1;
        setNiceRange(axis, span, false, false);
        axis->setTitleText(xTitle());
        axis->setLabelFormat(m_x_axis == XAxis::Step || axis->max() - axis->min() >= 10 ? QStringLiteral("%.0f") : QStringLiteral("%.3g"));
    }

    const Range loss = rangeOf({Curve::RawLoss, Curve::SmoothedLoss, Curve::EvalLoss}, true);
    if (auto* log = qobject_cast<QLogValueAxis*>(m_loss_axis)) {
        setLogRange(log, loss, 0.1, 10);
    } else {
        setNiceRange(static_cast<QValueAxis*>(m_loss_axis), loss, false, true);
    }
    Range seconds = rangeOf({Curve::HostSeconds, Curve::PredictedSeconds, Curve::HostPrediction}, true);
    for (const auto& state : m_runs) {
        if (!state->visible) continue;
        for (const QPointF& p : state->host_band->upperSeries()->points()) seconds.add(p.y());
        for (const QPointF& p : state->host_band->lowerSeries()->points()) seconds.add(p.y());
    }
    setLogRange(static_cast<QLogValueAxis*>(m_time_axis), seconds, 1e-3, 1);
    setNiceRange(static_cast<QValueAxis*>(m_rate_axis), rangeOf({Curve::LearningRate}, true), true, true);
    setLogRange(static_cast<QLogValueAxis*>(m_scale_axis), rangeOf({Curve::LossScale}, true), 0.5, 2);
    const Range throughput = rangeOf({Curve::Throughput}, true);
    auto* throughput_axis = static_cast<QValueAxis*>(m_throughput_axis);
    setNiceRange(throughput_axis, throughput, true, true);
    throughput_axis->setLabelFormat(throughput.isValid() && throughput.high >= 10 ? QStringLiteral("%.0f") : QStringLiteral("%.2g"));
    setNiceRange(static_cast<QValueAxis*>(m_box_axis), rangeOf({Curve::EvalDetections, Curve::EvalTruePositives, Curve::EvalObjects}, true),
                 true, true);
    // The boxes chart only means something for detectors: shown while a run has a detector's evaluations.
    const bool any_detector = std::any_of(m_runs.begin(), m_runs.end(), [](const auto& state) {
        const auto& evals = state->data.evals();
        return std::any_of(evals.begin(), evals.end(), [](const RunSeries::EvalPoint& e) { return e.is_detection; });
    });
    m_chart_tabs->setTabVisible(m_chart_tabs->indexOf(m_views[index(Chart::Boxes)]), any_detector);
}

void RunCharts::updateMemoryChart() {
    const QString run = memoryRun();
    const RunState* state = findRun(run);
    const std::vector<std::int64_t> no_peaks;
    const std::vector<std::int64_t>& peaks = state ? state->data.corePeakBytes() : no_peaks;
    const std::int64_t capacity = state ? state->data.coreCapacityBytes() : 0;
    QChart* chart = m_views[index(Chart::Memory)]->chart();
    if (peaks.empty()) {
        chart->setTitle(m_runs.empty() ? tr("Peak memory per core") : tr("Peak memory per core — no run has reported its cores yet"));
    } else {
        chart->setTitle(state->data.memoryStep() >= 0 ? tr("Peak memory per core — %1 (step %2)").arg(run).arg(state->data.memoryStep())
                                                      : tr("Peak memory per core — %1").arg(run));
    }
    // The bars change only with the run, its colour, the peaks or the capacity (peaks settle after the
    // first steps): otherwise nothing is rebuilt.
    QString key = QStringLiteral("%1|%2|%3|").arg(run, state ? svgColor(state->color) : QString()).arg(capacity);
    for (const std::int64_t peak : peaks) key += QStringLiteral("%1,").arg(peak);
    if (key == m_shown_memory_key) return;
    m_shown_memory_key = key;

    chart->removeAllSeries();
    for (QAbstractAxis* axis : chart->axes()) {
        chart->removeAxis(axis);
        delete axis;
    }
    if (peaks.empty()) return;
    double largest = static_cast<double>(capacity);
    for (const std::int64_t peak : peaks) largest = std::max(largest, static_cast<double>(peak));
    const auto [divisor, unit] = memoryUnit(largest);

    auto* set = new QBarSet(tr("%1 · peak (%2)").arg(run, unit));
    set->setColor(state->color);
    set->setBorderColor(state->color.darker(140));
    set->setSelectedColor(QColor(0xc6, 0x28, 0x28));
    QStringList categories;
    for (std::size_t core = 0; core < peaks.size(); ++core) {
        *set << static_cast<double>(peaks[core]) / divisor;
        categories << QString::number(core);
    }
    auto* bars = new QBarSeries();
    bars->append(set);
    bars->setBarWidth(0.75);
    chart->addSeries(bars);
    for (std::size_t core = 0; core < peaks.size(); ++core) {
        if (capacity > 0 && peaks[core] > capacity) set->selectBar(static_cast<int>(core));  // over capacity: red
    }
    auto* x = new QBarCategoryAxis();
    x->append(categories);
    x->setTitleText(tr("core"));
    x->setLabelsAngle(categories.size() > 16 ? -90 : 0);
    auto* y = new QValueAxis();
    setNiceRange(y, Range{0, largest / divisor}, true, true);
    y->setLabelFormat(QStringLiteral("%.3g"));
    y->setTitleText(unit);
    chart->addAxis(x, Qt::AlignBottom);
    chart->addAxis(y, Qt::AlignLeft);
    bars->attachAxis(x);
    bars->attachAxis(y);
    if (capacity > 0) {
        auto* line = new QLineSeries();
        line->setName(tr("capacity (%1 %2)").arg(static_cast<double>(capacity) / divisor, 0, 'g', 4).arg(unit));
        QPen pen(QColor(0xc6, 0x28, 0x28));
        pen.setStyle(Qt::DashLine);
        pen.setWidthF(1.5);
        line->setPen(pen);
        const double level = static_cast<double>(capacity) / divisor;
        line->append(-0.5, level);
        line->append(static_cast<double>(peaks.size()) - 0.5, level);
        chart->addSeries(line);
        line->attachAxis(x);
        line->attachAxis(y);
    }
}

// ---- export ------------------------------------------------------------------------------------------------

void RunCharts::onExportActionTriggered() {
    auto* action = qobject_cast<QAction*>(sender());
    if (!action) return;
    const QStringList chart_and_format = action->data().toStringList();
    if (chart_and_format.size() != 2) return;
    exportWithDialog(static_cast<Chart>(chart_and_format[0].toInt()), chart_and_format[1]);
}

void RunCharts::onChartContextMenu(const QPoint& position) {
    auto* view = qobject_cast<QChartView*>(sender());
    if (!view || m_runs.empty()) return;
    QMenu menu(this);
    menu.setToolTipsVisible(true);
    QMenu* chart_menu = exportMenu(static_cast<Chart>(view->property("tesseraChart").toInt()), &menu);
    for (QAction* action : chart_menu->actions()) {
        action->setText(tr("Export as %1").arg(action->text()));
        menu.addAction(action);
    }
    menu.exec(view->mapToGlobal(position));
}

void RunCharts::exportWithDialog(Chart chart, const QString& format) {
    const QString filter = format == QLatin1String("png")   ? tr("PNG images (*.png)")
                           : format == QLatin1String("svg") ? tr("SVG drawings (*.svg)")
                                                            : tr("CSV files (*.csv)");
    QString path = QFileDialog::getSaveFileName(this, tr("Export the %1 chart").arg(chartName(chart)),
                                                QStringLiteral("%1.%2").arg(chartName(chart), format), filter);
    if (path.isEmpty()) return;
    if (QFileInfo(path).suffix().isEmpty()) path += QLatin1Char('.') + format;
    if (!exportChart(chart, path)) QMessageBox::warning(this, tr("Export"), tr("Could not write %1").arg(path));
}

bool RunCharts::exportChart(Chart chart, const QString& path) {
    refresh();  // what is written is what the data holds now
    const QString suffix = QFileInfo(path).suffix().toLower();
    // An exported image leaves the run list behind: it carries the legend the dock does without.
    QLegend* legend = m_views[index(chart)]->chart()->legend();
    const bool image = suffix == QLatin1String("png") || suffix == QLatin1String("svg");
    if (image) legend->show();
    // The charts lay out their new axes and legends in posted events: let them, before drawing.
    QCoreApplication::processEvents(QEventLoop::ExcludeUserInputEvents);
    bool written = false;
    if (suffix == QLatin1String("png")) written = exportPng(chart, path);
    else if (suffix == QLatin1String("svg")) written = exportSvg(chart, path);
    else if (suffix == QLatin1String("csv")) written = exportCsv(chart, path);
    if (image) legend->hide();
    m_status->setText(written ? tr("Wrote %1").arg(path) : tr("Could not write %1").arg(path));
    return written;
}

bool RunCharts::exportPng(Chart chart, const QString& path) {
    QChartView* view = m_views[index(chart)];
    const QPixmap pixmap = view->grab();
    return !pixmap.isNull() && pixmap.save(path, "PNG");
}

bool RunCharts::exportSvg(Chart chart, const QString& path) {
#ifdef TESSERA_HAVE_QT_SVG
    QChartView* view = m_views[index(chart)];
    QSvgGenerator generator;
    generator.setFileName(path);
    generator.setSize(view->size());
    generator.setViewBox(QRect(QPoint(0, 0), view->size()));
    generator.setTitle(view->chart()->title());
    generator.setDescription(tr("Tessera training run chart: %1").arg(runs().join(QStringLiteral(", "))));
    QPainter painter;
    if (!painter.begin(&generator)) return false;
    painter.setRenderHint(QPainter::Antialiasing);
    view->render(&painter);  // the scene, as vectors
    painter.end();
    return QFileInfo(path).size() > 0;
#else
    return writeSvgByHand(chart, path);
#endif
}

// Without Qt's SVG module: the plot area, each visible curve as a polyline (points as circles, bars as
// rectangles), the axes' ends, the title and a legend.
bool RunCharts::writeSvgByHand(Chart chart_id, const QString& path) const {
    QChartView* view = m_views[index(chart_id)];
    QChart* chart = view->chart();
    const QSize size = view->size();
    const auto toView = [&](const QPointF& value, QAbstractSeries* series) {
        return view->mapFromScene(chart->mapToScene(chart->mapToPosition(value, series)));
    };
    const QRectF plot = view->mapFromScene(chart->mapToScene(chart->plotArea())).boundingRect();
    QString svg = QStringLiteral("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                                 "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%1\" height=\"%2\" viewBox=\"0 0 %1 %2\" "
                                 "font-family=\"sans-serif\" font-size=\"11\">\n")
                      .arg(size.width())
                      .arg(size.height());
    svg += QStringLiteral("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
    svg += QStringLiteral("<text x=\"%1\" y=\"18\" text-anchor=\"middle\" font-weight=\"bold\" font-size=\"13\">%2</text>\n")
               .arg(size.width() / 2)
               .arg(xmlEscaped(chart->title()));
    svg += QStringLiteral("<rect x=\"%1\" y=\"%2\" width=\"%3\" height=\"%4\" fill=\"none\" stroke=\"#999\"/>\n")
               .arg(plot.x())
               .arg(plot.y())
               .arg(plot.width())
               .arg(plot.height());
    // The axes' ranges at the plot's corners.
    for (QAbstractAxis* axis : chart->axes()) {
        if (auto* categories = qobject_cast<QBarCategoryAxis*>(axis)) {
            QAbstractSeries* bars = chart->series().isEmpty() ? nullptr : chart->series().front();
            for (int i = 0; bars && i < categories->count(); ++i) {
                svg += QStringLiteral("<text x=\"%1\" y=\"%2\" text-anchor=\"middle\">%3</text>\n")
                           .arg(toView(QPointF(i, 0), bars).x())
                           .arg(plot.bottom() + 14)
                           .arg(xmlEscaped(categories->at(i)));
            }
            continue;
        }
        double low = 0, high = 0;
        if (auto* value = qobject_cast<QValueAxis*>(axis)) std::tie(low, high) = std::pair(value->min(), value->max());
        else if (auto* log = qobject_cast<QLogValueAxis*>(axis)) std::tie(low, high) = std::pair(log->min(), log->max());
        else continue;
        const bool horizontal = axis->orientation() == Qt::Horizontal;
        const bool right = axis->alignment() == Qt::AlignRight;
        const QPointF low_at = horizontal ? QPointF(plot.left(), plot.bottom() + 14) : QPointF(right ? plot.right() + 4 : plot.left() - 4, plot.bottom());
        const QPointF high_at = horizontal ? QPointF(plot.right(), plot.bottom() + 14) : QPointF(right ? plot.right() + 4 : plot.left() - 4, plot.top() + 10);
        const QString anchor = horizontal ? QStringLiteral("middle") : right ? QStringLiteral("start") : QStringLiteral("end");
        for (const auto& [at, value] : {std::pair{low_at, low}, std::pair{high_at, high}}) {
            svg += QStringLiteral("<text x=\"%1\" y=\"%2\" text-anchor=\"%3\">%4</text>\n").arg(at.x()).arg(at.y()).arg(anchor).arg(value, 0, 'g', 4);
        }
        const QPointF title_at(horizontal ? plot.center().x() : (right ? plot.right() + 40 : plot.left() - 34),
                               horizontal ? plot.bottom() + 28 : plot.center().y());
        svg += QStringLiteral("<text x=\"%1\" y=\"%2\" text-anchor=\"middle\" fill=\"#555\"%3>%4</text>\n")
                   .arg(title_at.x())
                   .arg(title_at.y())
                   .arg(horizontal ? QString() : QStringLiteral(" transform=\"rotate(-90 %1 %2)\"").arg(title_at.x()).arg(title_at.y()))
                   .arg(xmlEscaped(axis->titleText()));
    }
    QStringList legend;
    for (QAbstractSeries* series : chart->series()) {
        if (!series->isVisible()) continue;
        if (auto* scatter = qobject_cast<QScatterSeries*>(series)) {
            for (const QPointF& p : scatter->points()) {
                const QPointF at = toView(p, series);
                svg += QStringLiteral("<circle cx=\"%1\" cy=\"%2\" r=\"%3\" fill=\"%4\"/>\n").arg(at.x()).arg(at.y()).arg(scatter->markerSize() / 2).arg(svgColor(scatter->color()));
            }
            legend << QStringLiteral("%1|%2").arg(svgColor(scatter->color()), series->name());
        } else if (auto* line = qobject_cast<QXYSeries*>(series)) {
            QString points;
            for (const QPointF& p : line->points()) {
                const QPointF at = toView(p, series);
                points += QStringLiteral("%1,%2 ").arg(at.x(), 0, 'f', 1).arg(at.y(), 0, 'f', 1);
            }
            const QPen pen = line->pen();
            svg += QStringLiteral("<polyline fill=\"none\" stroke=\"%1\" stroke-opacity=\"%2\" stroke-width=\"%3\"%4 points=\"%5\"/>\n")
                       .arg(svgColor(pen.color()))
                       .arg(pen.color().alphaF(), 0, 'f', 2)
                       .arg(pen.widthF())
                       .arg(pen.style() == Qt::SolidLine ? QString() : QStringLiteral(" stroke-dasharray=\"6,3\""))
                       .arg(points.trimmed());
            if (pen.color().alpha() == 255) legend << QStringLiteral("%1|%2").arg(svgColor(pen.color()), series->name());
        } else if (auto* bars = qobject_cast<QBarSeries*>(series)) {
            for (QBarSet* set : bars->barSets()) {
                for (int i = 0; i < set->count(); ++i) {
                    const QPointF top_left = toView(QPointF(i - 0.375, set->at(i)), series);
                    const QPointF bottom_right = toView(QPointF(i + 0.375, 0), series);
                    const QRectF rect = QRectF(top_left, bottom_right).normalized();
                    svg += QStringLiteral("<rect x=\"%1\" y=\"%2\" width=\"%3\" height=\"%4\" fill=\"%5\"/>\n")
                               .arg(rect.x())
                               .arg(rect.y())
                               .arg(rect.width())
                               .arg(rect.height())
                               .arg(svgColor(set->isBarSelected(i) ? set->selectedColor() : set->color()));
                }
                legend << QStringLiteral("%1|%2").arg(svgColor(set->color()), set->label());
            }
        }
    }
    double legend_x = plot.left();
    for (const QString& entry : legend) {
        const QString color = entry.section(QLatin1Char('|'), 0, 0), name = entry.section(QLatin1Char('|'), 1);
        svg += QStringLiteral("<rect x=\"%1\" y=\"%2\" width=\"10\" height=\"10\" fill=\"%3\"/><text x=\"%4\" y=\"%5\">%6</text>\n")
                   .arg(legend_x)
                   .arg(size.height() - 14)
                   .arg(color)
                   .arg(legend_x + 14)
                   .arg(size.height() - 5)
                   .arg(xmlEscaped(name));
        legend_x += 24 + 6.5 * name.size();
    }
    svg += QStringLiteral("</svg>\n");
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly)) return false;
    file.write(svg.toUtf8());
    return file.commit();
}

bool RunCharts::exportCsv(Chart chart, const QString& path) const {
    std::vector<NamedRunSeries> shown;
    for (const auto& state : m_runs) {
        if (state->visible) shown.push_back({state->name, &state->data});
    }
    std::string csv;
    switch (chart) {
        case Chart::Loss:
        {
            // Dice for segmenters, AP for detectors: a column only when a shown run has such evaluations.
            bool any_detector = false, any_segmenter = false;
            for (const NamedRunSeries& run : shown) {
                for (const RunSeries::EvalPoint& eval : run.series->evals()) (eval.is_detection ? any_detector : any_segmenter) = true;
            }
            std::vector<RunColumn> columns{RunColumn::Loss, RunColumn::SmoothedLoss, RunColumn::EvalLoss};
            if (any_segmenter || !any_detector) columns.push_back(RunColumn::EvalMeanDice);
            if (any_detector) columns.insert(columns.end(), {RunColumn::EvalAp, RunColumn::EvalAp50});
            csv = runsCsv(shown, columns, m_smoothing);
            break;
        }
        case Chart::Boxes:
            csv = runsCsv(shown, {RunColumn::EvalDetections, RunColumn::EvalTruePositives, RunColumn::EvalObjects}, m_smoothing);
            break;
        case Chart::StepTime: csv = runsCsv(shown, {RunColumn::HostSeconds, RunColumn::PredictedSeconds}, m_smoothing); break;
        case Chart::LearningRate: csv = runsCsv(shown, {RunColumn::LearningRate, RunColumn::LossScale}, m_smoothing); break;
        case Chart::Throughput: csv = runsCsv(shown, {RunColumn::ImagesPerSecond}, m_smoothing); break;
        case Chart::Memory: csv = coreMemoryCsv(shown); break;
    }
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly)) return false;
    file.write(csv.data(), static_cast<qint64>(csv.size()));
    return file.commit();
}

}  // namespace tessera::ui
