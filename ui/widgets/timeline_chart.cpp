#include "widgets/timeline_chart.hpp"

#include <QHelpEvent>
#include <QWheelEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <cmath>

namespace tessera::ui {

namespace {
constexpr double compute_band = 0.6;  // of a lane's height; communication takes the rest
constexpr int margin = 6;

bool inComputeBand(TimelineBar::Kind kind) {
    return kind == TimelineBar::Kind::Compute || kind == TimelineBar::Kind::Idle || kind == TimelineBar::Kind::Other;
}

QString formatMs(double ms) {
    if (ms == 0) return QStringLiteral("0");
    const double magnitude = std::abs(ms);
    return QString::number(ms, 'f', magnitude >= 100 ? 1 : magnitude >= 1 ? 2 : 3);
}
}  // namespace

QString timelineKindName(TimelineBar::Kind kind) {
    switch (kind) {
        case TimelineBar::Kind::Compute: return QStringLiteral("compute");
        case TimelineBar::Kind::Halo: return QStringLiteral("halo exchange");
        case TimelineBar::Kind::AllReduce: return QStringLiteral("all-reduce");
        case TimelineBar::Kind::Idle: return QStringLiteral("idle");
        case TimelineBar::Kind::Other: return QStringLiteral("other");
    }
    return QStringLiteral("?");
}

TimelineChart::TimelineChart(QWidget* parent)
    : QWidget(parent), m_placeholder(tr("Select a layout to see its predicted step, core by core")) {
    setMouseTracking(true);
    setAttribute(Qt::WA_OpaquePaintEvent);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
    setToolTip(tr("One training step, one lane per core: compute on top of each lane, halo exchanges and "
                  "all-reduces below it; lighter bars are the forward pass. Hover a bar for its layer and times; "
                  "the wheel zooms, dragging pans, a double click shows the whole step."));
}

void TimelineChart::setTimeline(std::vector<TimelineBar> bars, int lanes, QString title) {
    m_lanes = std::max(lanes, 0);
    m_bars.clear();
    m_bars.reserve(bars.size());
    for (TimelineBar& bar : bars) {
        if (bar.lane < 0 || bar.lane >= m_lanes) continue;
        if (bar.end_ms < bar.start_ms) std::swap(bar.start_ms, bar.end_ms);
        m_bars.push_back(std::move(bar));
    }
    m_by_lane.assign(static_cast<std::size_t>(m_lanes), {});
    m_end_ms = 0;
    for (std::size_t i = 0; i < m_bars.size(); ++i) {
        m_by_lane[static_cast<std::size_t>(m_bars[i].lane)].push_back(static_cast<int>(i));
        m_end_ms = std::max(m_end_ms, m_bars[i].end_ms);
    }
    for (auto& lane : m_by_lane) {
        std::stable_sort(lane.begin(), lane.end(), [this](int a, int b) {
            return m_bars[static_cast<std::size_t>(a)].start_ms < m_bars[static_cast<std::size_t>(b)].start_ms;
        });
    }
    m_view_start = 0;
    m_view_end = m_end_ms;
    m_drag_x.reset();
    m_title = std::move(title);
    m_lane_names.clear();
    for (int lane = 0; lane < m_lanes; ++lane) m_lane_names << tr("core %1").arg(lane);
    m_hovered = -1;
    ++m_generation;
    update();
}

void TimelineChart::clear() { setTimeline({}, 0, {}); }

void TimelineChart::setLaneNames(QStringList names) {
    for (int lane = 0; lane < std::min<int>(m_lanes, static_cast<int>(names.size())); ++lane) m_lane_names[lane] = names[lane];
    ++m_generation;
    update();
}

void TimelineChart::setPlaceholderText(const QString& text) {
    m_placeholder = text;
    ++m_generation;
    update();
}

QSize TimelineChart::sizeHint() const { return {640, 320}; }
QSize TimelineChart::minimumSizeHint() const { return {240, 120}; }

QRectF TimelineChart::plotArea() const {
    const QFontMetrics metrics(font());
    int names = 0;
    for (const QString& name : m_lane_names) names = std::max(names, metrics.horizontalAdvance(name));
    const double left = margin + names + 8;
    const double top = margin + metrics.height() + 6;                 // the title
    const double bottom = height() - margin - 2 * metrics.height() - 10;  // tick labels and the legend
    return QRectF(QPointF(left, top), QPointF(std::max<double>(left + 1, width() - margin - 4), std::max(top + 1, bottom)));
}

double TimelineChart::xOf(double ms) const { return xOf(ms, plotArea()); }

double TimelineChart::xOf(double ms, const QRectF& area) const {
    if (m_view_end <= m_view_start) return area.left();
    return area.left() + area.width() * (ms - m_view_start) / (m_view_end - m_view_start);
}

void TimelineChart::setVisibleRange(double start_ms, double end_ms) {
    if (m_end_ms <= 0) return;
    const double smallest = m_end_ms * 1e-5;  // no deeper than this: the bars would be wider than the screen
    double width = std::clamp(end_ms - start_ms, smallest, m_end_ms);
    const double start = std::clamp(start_ms, 0.0, m_end_ms - width);
    m_view_start = start;
    m_view_end = start + width;
    update();
}

void TimelineChart::resetZoom() { setVisibleRange(0, m_end_ms); }

QRectF TimelineChart::laneRect(int lane) const { return laneRect(lane, plotArea()); }

QRectF TimelineChart::laneRect(int lane, const QRectF& area) const {
    const double lane_height = m_lanes > 0 ? area.height() / m_lanes : area.height();
    return QRectF(area.left(), area.top() + lane * lane_height, area.width(), lane_height);
}

QRectF TimelineChart::barRect(int index) const { return barRect(index, plotArea()); }

QRectF TimelineChart::barRect(int index, const QRectF& area) const {
    if (index < 0 || index >= static_cast<int>(m_bars.size())) return {};
    const TimelineBar& bar = m_bars[static_cast<std::size_t>(index)];
    const QRectF lane = laneRect(bar.lane, area);
    if (bar.end_ms < m_view_start || bar.start_ms > m_view_end) return {};  // outside the visible range
    const double gap = lane.height() >= 6 ? 1.0 : 0.0;
    const double split = lane.top() + lane.height() * compute_band;
    const double left = xOf(bar.start_ms, area);
    const double width = std::max(1.0, xOf(bar.end_ms, area) - left);
    if (inComputeBand(bar.kind)) return QRectF(left, lane.top() + gap, width, std::max(1.0, split - lane.top() - gap));
    return QRectF(left, split, width, std::max(1.0, lane.bottom() - split - gap));
}

int TimelineChart::barAt(QPoint position) const {
    if (m_lanes == 0 || m_bars.empty()) return -1;
    const QRectF area = plotArea();
    if (!area.adjusted(-1, 0, 1, 0).contains(position)) return -1;
    const int lane = std::clamp(static_cast<int>((position.y() - area.top()) / (area.height() / m_lanes)), 0, m_lanes - 1);
    const QRectF lane_rect = laneRect(lane, area);
    const bool want_compute = position.y() < lane_rect.top() + lane_rect.height() * compute_band;
    // Among the bars of the band under the pointer, the one whose middle is nearest (thin bars are
    // drawn a pixel wide, so a pixel of slack on each side); the other band when this one has none.
    int best = -1;
    for (const bool compute : {want_compute, !want_compute}) {
        double best_distance = 0;
        for (int index : m_by_lane[static_cast<std::size_t>(lane)]) {
            const TimelineBar& bar = m_bars[static_cast<std::size_t>(index)];
            if (inComputeBand(bar.kind) != compute) continue;
            const QRectF rect = barRect(index, area);
            if (rect.isNull()) continue;
            if (position.x() < rect.left() - 1 || position.x() > rect.right() + 1) continue;
            const double distance = std::abs(rect.center().x() - position.x());
            if (best < 0 || distance < best_distance) {
                best = index;
                best_distance = distance;
            }
        }
        if (best >= 0) break;
    }
    return best;
}

QString TimelineChart::toolTipAt(QPoint position) const {
    const int index = barAt(position);
    if (index < 0) return {};
    const TimelineBar& bar = m_bars[static_cast<std::size_t>(index)];
    QString text = QStringLiteral("<b>%1</b><br>%2, %3 — %4")
                       .arg(bar.label.toHtmlEscaped(), timelineKindName(bar.kind),
                            bar.backward ? tr("backward") : tr("forward"), m_lane_names.value(bar.lane).toHtmlEscaped());
    text += tr("<br>start %1 ms, duration %2 ms").arg(formatMs(bar.start_ms), formatMs(bar.end_ms - bar.start_ms));
    if (!bar.detail.isEmpty()) text += QStringLiteral("<br>") + bar.detail.toHtmlEscaped();
    return text;
}

QColor TimelineChart::colorOf(const TimelineBar& bar) const {
    QColor color;
    switch (bar.kind) {
        case TimelineBar::Kind::Compute: color = QColor(0x2b, 0x6c, 0xb0); break;
        case TimelineBar::Kind::Halo: color = QColor(0xdd, 0x6b, 0x20); break;
        case TimelineBar::Kind::AllReduce: color = QColor(0x80, 0x4d, 0xb3); break;
        case TimelineBar::Kind::Idle: return QColor(0xe2, 0xe2, 0xe2);
        case TimelineBar::Kind::Other: color = QColor(0x70, 0x70, 0x70); break;
    }
    return bar.backward ? color : color.lighter(160);
}

double TimelineChart::tickStep() const {
    // A 1, 2 or 5 × 10^k step giving about one label per 90 pixels.
    const double target = (m_view_end - m_view_start) / std::max(1.0, plotArea().width() / 90.0);
    if (target <= 0) return 1;
    const double power = std::pow(10.0, std::floor(std::log10(target)));
    for (double factor : {1.0, 2.0, 5.0, 10.0}) {
        if (factor * power >= target) return factor * power;
    }
    return 10 * power;
}

void TimelineChart::changeEvent(QEvent* event) {
    if (event->type() == QEvent::PaletteChange || event->type() == QEvent::FontChange) ++m_generation;
    QWidget::changeEvent(event);
}

void TimelineChart::paintEvent(QPaintEvent* /*event*/) {
    const double ratio = devicePixelRatioF();
    const QSize device_size = size() * ratio;
    if (m_cache.size() != device_size || m_cached_generation != m_generation || m_cached_start != m_view_start ||
        m_cached_end != m_view_end) {
        m_cache = QPixmap(device_size);
        m_cache.setDevicePixelRatio(ratio);
        QPainter cache_painter(&m_cache);
        renderChart(cache_painter);
        m_cached_generation = m_generation;
        m_cached_start = m_view_start;
        m_cached_end = m_view_end;
    }
    QPainter painter(this);
    painter.drawPixmap(0, 0, m_cache);
    if (m_hovered >= 0 && m_hovered < static_cast<int>(m_bars.size()) && !barRect(m_hovered).isNull()) {
        painter.save();
        painter.setClipRect(plotArea().adjusted(0, 0, 1, 1));
        painter.setPen(QPen(palette().color(QPalette::Text), 1.5));
        painter.setBrush(Qt::NoBrush);
        painter.drawRect(barRect(m_hovered).adjusted(-1, -1, 1, 1));
        painter.restore();
    }
}

void TimelineChart::renderChart(QPainter& painter) const {
    painter.fillRect(rect(), palette().color(QPalette::Base));
    const QFontMetrics metrics(font());
    const QColor text = palette().color(QPalette::Text);

    if (m_bars.empty() || m_lanes == 0) {
        painter.setPen(palette().color(QPalette::PlaceholderText));
        painter.drawText(rect().adjusted(12, 12, -12, -12), Qt::AlignCenter | Qt::TextWordWrap, m_placeholder);
        return;
    }

    const QRectF area = plotArea();
    painter.setPen(text);
    QFont title_font = font();
    title_font.setBold(true);
    painter.setFont(title_font);
    painter.drawText(QRectF(margin, margin, width() - 2 * margin, metrics.height() + 4), Qt::AlignLeft | Qt::AlignVCenter,
                     QFontMetrics(title_font).elidedText(m_title, Qt::ElideRight, width() - 2 * margin));
    painter.setFont(font());

    // Lanes: alternate shading, names where they fit.
    const double lane_height = area.height() / m_lanes;
    const int name_every = std::max(1, static_cast<int>(std::ceil(metrics.height() / std::max(1.0, lane_height))));
    for (int lane = 0; lane < m_lanes; ++lane) {
        const QRectF lane_rect = laneRect(lane, area);
        painter.fillRect(lane_rect, lane % 2 ? QColor(0xf4, 0xf4, 0xf4) : QColor(0xfb, 0xfb, 0xfb));
        if (lane % name_every == 0) {
            painter.setPen(text);
            painter.drawText(QRectF(margin, lane_rect.top(), area.left() - margin - 6, std::max(lane_height, 1.0 * metrics.height())),
                             Qt::AlignRight | Qt::AlignVCenter, m_lane_names.value(lane));
        }
    }

    // Time grid and tick labels.
    const double step = tickStep();
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
    painter.setPen(QPen(QColor(0xd0, 0xd0, 0xd0), 0));
    for (double ms = std::ceil(m_view_start / step - 1e-9) * step; ms <= m_view_end + step * 1e-9; ms += step) {
        const double x = xOf(ms, area);
        painter.setPen(QPen(QColor(0xd0, 0xd0, 0xd0), 0));
        painter.drawLine(QPointF(x, area.top()), QPointF(x, area.bottom() + 3));
        painter.setPen(text);
        const QString label = QString::number(ms, 'f', decimals);
        const double label_width = metrics.horizontalAdvance(label);
        const double left = std::clamp(x - label_width / 2, 0.0, width() - label_width);
        painter.drawText(QPointF(left, area.bottom() + 4 + metrics.ascent()), label);
    }

    // Bars: thin ones are drawn a pixel wide so a busy lane stays visible. A step has thousands of
    // them, most under a pixel at full view: a thin bar in the pixel column, band and colour the
    // lane's last thin bar already filled is skipped.
    painter.setRenderHint(QPainter::Antialiasing, false);
    painter.save();
    painter.setClipRect(area.adjusted(0, 0, 1, 1));
    struct LastThin {
        double column = -1, top = -1;
        QRgb color = 0;
    };
    std::vector<LastThin> last_thin(static_cast<std::size_t>(std::max(m_lanes, 1)) * 2);
    for (std::size_t i = 0; i < m_bars.size(); ++i) {
        QRectF bar = barRect(static_cast<int>(i), area);
        if (bar.isNull()) continue;
        const QColor color = colorOf(m_bars[i]);
        if (bar.width() < 2) {
            const double column = std::floor(bar.left());
            const int lane = std::clamp(m_bars[i].lane, 0, std::max(m_lanes - 1, 0));
            LastThin& last = last_thin[static_cast<std::size_t>(lane) * 2 + (inComputeBand(m_bars[i].kind) ? 0 : 1)];
            if (last.column == column && last.top == bar.top() && last.color == color.rgb()) continue;
            last = {column, bar.top(), color.rgb()};
            bar = QRectF(column, bar.top(), 1, bar.height());
        }
        painter.fillRect(bar, color);
        // Where one op ends and the next begins, once bars are wide enough to tell apart.
        if (bar.width() >= 4) painter.fillRect(QRectF(bar.left(), bar.top(), 1, bar.height()), color.darker(125));
    }
    painter.restore();
    painter.setPen(QPen(QColor(0x90, 0x90, 0x90), 0));
    painter.setBrush(Qt::NoBrush);
    painter.drawRect(area);

    // Bottom line: the axis' unit on the left, the legend on the right.
    const double legend_y = height() - margin - metrics.height();
    painter.setPen(text);
    const QString axis_title = m_view_end - m_view_start < m_end_ms * 0.999 ? tr("time in step (ms), zoomed: double-click for all")
                                                                             : tr("time in step (ms)");
    painter.drawText(QPointF(area.left(), legend_y + metrics.ascent()), axis_title);
    struct Entry {
        TimelineBar::Kind kind;
        bool backward;
        QString name;
    };
    const std::vector<Entry> entries{{TimelineBar::Kind::Compute, false, tr("compute fwd")},
                                     {TimelineBar::Kind::Compute, true, tr("compute bwd")},
                                     {TimelineBar::Kind::Halo, false, tr("halo fwd")},
                                     {TimelineBar::Kind::Halo, true, tr("halo bwd")},
                                     {TimelineBar::Kind::AllReduce, false, tr("all-reduce fwd")},
                                     {TimelineBar::Kind::AllReduce, true, tr("all-reduce bwd")}};
    double legend_width = 0;
    for (const Entry& entry : entries) legend_width += 14 + metrics.horizontalAdvance(entry.name) + 12;
    double x = std::max(area.left() + metrics.horizontalAdvance(axis_title) + 24, width() - margin - legend_width);
    for (const Entry& entry : entries) {
        TimelineBar sample;
        sample.kind = entry.kind;
        sample.backward = entry.backward;
        painter.fillRect(QRectF(x, legend_y + 2, 10, metrics.height() - 4), colorOf(sample));
        painter.setPen(text);
        painter.drawText(QPointF(x + 14, legend_y + metrics.ascent()), entry.name);
        x += 14 + metrics.horizontalAdvance(entry.name) + 12;
    }
}

bool TimelineChart::event(QEvent* event) {
    if (event->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(event);
        const QString text = toolTipAt(help->pos());
        if (text.isEmpty()) {
            QToolTip::showText(help->globalPos(), toolTip(), this);
        } else {
            QToolTip::showText(help->globalPos(), text, this, barRect(barAt(help->pos())).toAlignedRect());
        }
        return true;
    }
    return QWidget::event(event);
}

void TimelineChart::mouseMoveEvent(QMouseEvent* event) {
    if (m_drag_x && (event->buttons() & Qt::LeftButton)) {
        const double ms_per_pixel = (m_view_end - m_view_start) / std::max(1.0, plotArea().width());
        const double width = m_view_end - m_view_start;
        setVisibleRange(m_drag_start - (event->position().x() - *m_drag_x) * ms_per_pixel,
                        m_drag_start - (event->position().x() - *m_drag_x) * ms_per_pixel + width);
    }
    const int hovered = barAt(event->position().toPoint());
    if (hovered != m_hovered) {
        m_hovered = hovered;
        update();
    }
    QWidget::mouseMoveEvent(event);
}

void TimelineChart::leaveEvent(QEvent* event) {
    if (m_hovered >= 0) {
        m_hovered = -1;
        update();
    }
    QWidget::leaveEvent(event);
}

void TimelineChart::mousePressEvent(QMouseEvent* event) {
    if (event->button() == Qt::LeftButton && !m_bars.empty()) {
        m_drag_x = event->position().x();
        m_drag_start = m_view_start;
        setCursor(Qt::ClosedHandCursor);
    }
    QWidget::mousePressEvent(event);
}

void TimelineChart::mouseReleaseEvent(QMouseEvent* event) {
    if (event->button() == Qt::LeftButton && m_drag_x) {
        m_drag_x.reset();
        unsetCursor();
    }
    QWidget::mouseReleaseEvent(event);
}

void TimelineChart::mouseDoubleClickEvent(QMouseEvent* event) {
    resetZoom();
    QWidget::mouseDoubleClickEvent(event);
}

void TimelineChart::wheelEvent(QWheelEvent* event) {
    if (m_bars.empty() || event->angleDelta().y() == 0) {
        QWidget::wheelEvent(event);
        return;
    }
    // Zoom around the time under the pointer: one wheel notch (120) shows 80% (or 125%) of the range.
    const QRectF area = plotArea();
    const double fraction = std::clamp((event->position().x() - area.left()) / std::max(1.0, area.width()), 0.0, 1.0);
    const double width = m_view_end - m_view_start;
    const double anchor = m_view_start + fraction * width;
    const double new_width = width * std::pow(0.8, event->angleDelta().y() / 120.0);
    setVisibleRange(anchor - fraction * new_width, anchor + (1 - fraction) * new_width);
    event->accept();
}

}  // namespace tessera::ui
