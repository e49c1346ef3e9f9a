// TimelineChart: a Gantt chart of one training step — one lane per core, a bar per span of work.
//
// It knows nothing of where the spans come from: the planner feeds it a predicted step
// (cost::predict_step's timeline), the training view can feed it the simulated cores' measured events.
// Each lane has two bands: compute on top, communication (halo exchanges, all-reduces) below, since a
// core's links and collectives run beside its compute. Forward bars are a lighter shade of the kind's
// colour than backward ones; idle time is the gaps (or explicit Idle bars, drawn light grey). Hovering a
// bar outlines it and shows its label, kind, start, duration and detail. The wheel zooms the time axis
// around the pointer, dragging pans it, a double click shows the whole step again.
//
//   std::vector<TimelineBar> bars{{.lane = 0, .start_ms = 0, .end_ms = 1.5, .kind = TimelineBar::Kind::Compute,
//                                  .backward = false, .label = "down0.conv1", .detail = "conv on a 128×128×64 tile"}};
//   chart->setTimeline(std::move(bars), /*lanes*/ 16, "Predicted step of input_partition_dims [1, 2, 2, 4, 1]");
#pragma once

#include <QString>
#include <QStringList>
#include <QPixmap>
#include <QWidget>

#include <optional>
#include <vector>

namespace tessera::ui {

struct TimelineBar {
    enum class Kind { Compute, Halo, AllReduce, Idle, Other };
    int lane = 0;           // 0 … lanes − 1
    double start_ms = 0;
    double end_ms = 0;
    Kind kind = Kind::Compute;
    bool backward = false;
    QString label;          // what ran: a layer's name, "loss", "optimizer update"
    QString detail;         // one more line for the tooltip (the op, the tile, a halo's peers)
};

QString timelineKindName(TimelineBar::Kind kind);

class TimelineChart : public QWidget {
    Q_OBJECT
public:
    explicit TimelineChart(QWidget* parent = nullptr);

    // Replaces what is shown. Bars on lanes outside [0, lanes) are dropped.
    void setTimeline(std::vector<TimelineBar> bars, int lanes, QString title);
    void clear();
    // Lane names, "core 0", "core 1", … unless set (after setTimeline).
    void setLaneNames(QStringList names);
    // Shown when there are no bars.
    void setPlaceholderText(const QString& text);

    const std::vector<TimelineBar>& bars() const { return m_bars; }
    int lanes() const { return m_lanes; }
    QString title() const { return m_title; }
    QString placeholderText() const { return m_placeholder; }
    double spanMs() const { return m_end_ms; }  // the whole step: the latest bar end

    // The part of the time axis shown (ms); the whole step after setTimeline or resetZoom.
    void setVisibleRange(double start_ms, double end_ms);
    double visibleStartMs() const { return m_view_start; }
    double visibleEndMs() const { return m_view_end; }
    void resetZoom();

    // The bar under a widget position (−1: none), its rectangle, and the tooltip text there (empty: none).
    int barAt(QPoint position) const;
    QRectF barRect(int index) const;
    QString toolTipAt(QPoint position) const;

    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

protected:
    bool event(QEvent* event) override;
    void paintEvent(QPaintEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void leaveEvent(QEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    void wheelEvent(QWheelEvent* event) override;

    void changeEvent(QEvent* event) override;

private:
    // Everything but the hovered bar's outline: drawn into m_cache when the data, the range or the
    // size changed, so a repaint (a hover, a repaint of the window around it) is one blit.
    void renderChart(QPainter& painter) const;
    QRectF plotArea() const;
    double xOf(double ms) const;
    QRectF laneRect(int lane) const;
    // The same for a plot area computed once (plotArea() measures the lane names' text).
    double xOf(double ms, const QRectF& area) const;
    QRectF laneRect(int lane, const QRectF& area) const;
    QRectF barRect(int index, const QRectF& area) const;
    QColor colorOf(const TimelineBar& bar) const;
    double tickStep() const;

    std::vector<TimelineBar> m_bars;
    std::vector<std::vector<int>> m_by_lane;  // bar indices per lane, in start order
    int m_lanes = 0;
    double m_end_ms = 0;
    double m_view_start = 0;
    double m_view_end = 0;
    std::optional<double> m_drag_x;  // the pointer's x when a pan began
    double m_drag_start = 0;         // m_view_start then
    QString m_title;
    QStringList m_lane_names;
    QString m_placeholder;
    int m_hovered = -1;
    QPixmap m_cache;
    quint64 m_generation = 0;        // bumped by every change of what the chart shows
    quint64 m_cached_generation = ~quint64{0};
    double m_cached_start = 0, m_cached_end = 0;
};

}  // namespace tessera::ui
