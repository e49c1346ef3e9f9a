#include "widgets/slice_view.hpp"

#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QWheelEvent>

#include <algorithm>
#include <cmath>

namespace tessera::ui {

SliceView::SliceView(ViewerModel* model, SliceOrientation orientation, QWidget* parent)
    : QWidget(parent), m_model(model), m_orientation(orientation) {
    setMouseTracking(true);
    setFocusPolicy(Qt::StrongFocus);
    setAttribute(Qt::WA_OpaquePaintEvent);
    setToolTip(tr("%1 slice — left: move cursor · right drag: window/level · wheel: slice · Ctrl+wheel: zoom · "
                  "middle drag: pan · Home: reset")
                   .arg(orientationName(orientation)));
    connect(m_model, &ViewerModel::volumeChanged, this, &SliceView::onVolumeChanged);
    connect(m_model, &ViewerModel::cursorChanged, this, &SliceView::rebuildImage);
    connect(m_model, &ViewerModel::windowLevelChanged, this, &SliceView::rebuildImage);
    connect(m_model, &ViewerModel::labelMapChanged, this, &SliceView::rebuildImage);
    connect(m_model, &ViewerModel::labelDisplayChanged, this, &SliceView::rebuildImage);
    connect(m_model, &ViewerModel::fullResolutionSliceLoaded, this, [this] {
        if (!m_full_resolution) rebuildImage();  // perhaps the slice this view waits for
    });
    onVolumeChanged();
}

void SliceView::onVolumeChanged() {
    if (m_model->hasVolume()) m_axes = sliceAxes(m_model->geometry(), m_orientation);
    m_zoom = 1.0;
    m_pan = {0, 0};
    rebuildImage();
}

std::int64_t SliceView::sliceIndex() const {
    return m_model->cursor()[static_cast<std::size_t>(m_axes.axis_normal)];
}

std::int64_t SliceView::numSlices() const {
    return m_model->hasVolume() ? m_model->geometry().size[static_cast<std::size_t>(m_axes.axis_normal)] : 0;
}

void SliceView::setSliceIndex(std::int64_t slice_index) {
    auto cursor = m_model->cursor();
    cursor[static_cast<std::size_t>(m_axes.axis_normal)] = slice_index;
    m_model->setCursor(cursor);
}

void SliceView::rebuildImage() {
    m_image = SliceRenderer::render(*m_model, m_orientation, &m_full_resolution);
    update();
    const std::int64_t slice = m_model->hasVolume() ? sliceIndex() : -1;
    if (slice != m_shown_slice) {
        m_shown_slice = slice;
        if (slice >= 0) emit sliceChanged(slice);
    }
}

void SliceView::setPartitionDesign(PartitionDesign* design) {
    if (m_design) disconnect(m_design, nullptr, this, nullptr);
    m_design = design;
    if (m_design) {
        connect(m_design, &PartitionDesign::designChanged, this, qOverload<>(&SliceView::update));
        connect(m_design, &PartitionDesign::layerChanged, this, qOverload<>(&SliceView::update));
        connect(m_design, &PartitionDesign::experimentChanged, this, qOverload<>(&SliceView::update));
    }
    update();
}

void SliceView::setPartitionVisible(bool visible) {
    m_partition_visible = visible;
    update();
}

SliceFrame SliceView::frame() const {
    SliceFrame frame;
    frame.axes = m_axes;
    frame.image_rect = imageRect();
    if (m_model->hasVolume()) {
        frame.volume_size = m_model->geometry().size;
        frame.slice_index = sliceIndex();
    }
    return frame;
}

std::optional<QPointF> SliceView::cutPosition(int input_axis, int index) const {
    if (!m_design || !m_design->hasExperiment() || !m_model->hasVolume()) return std::nullopt;
    const auto& cuts = m_design->grid().boundaries;
    if (input_axis < 0 || input_axis >= static_cast<int>(cuts.size()) || index < 1 ||
        index + 1 >= static_cast<int>(cuts[static_cast<std::size_t>(input_axis)].size())) {
        return std::nullopt;
    }
    const SliceFrame f = frame();
    const auto screen = PartitionOverlay::screenCoordinate(*m_design, f, input_axis,
                                                           static_cast<double>(cuts[static_cast<std::size_t>(input_axis)][static_cast<std::size_t>(index)]));
    if (!screen) return std::nullopt;
    const int rank = static_cast<int>(cuts.size());
    // A third of the way along the line, away from the crosshair at the centre.
    return PartitionOverlay::runsAlongX(f, input_axis, rank) ? QPointF(*screen, f.image_rect.top() + f.image_rect.height() / 3)
                                                             : QPointF(f.image_rect.left() + f.image_rect.width() / 3, *screen);
}

void SliceView::resetView() {
    m_zoom = 1.0;
    m_pan = {0, 0};
    update();
}

QRectF SliceView::imageRect() const {
    if (m_image.isNull()) return {};
    const auto& spacing = m_model->geometry().spacing;
    // Physical size of the slice, so anisotropic voxels keep their true aspect.
    const double width_mm = m_image.width() * spacing[static_cast<std::size_t>(m_axes.axis_x)];
    const double height_mm = m_image.height() * spacing[static_cast<std::size_t>(m_axes.axis_y)];
    const double fit = std::min(width() / width_mm, height() / height_mm) * m_zoom;
    const QSizeF drawn(width_mm * fit, height_mm * fit);
    const QPointF top_left((width() - drawn.width()) / 2 + m_pan.x(), (height() - drawn.height()) / 2 + m_pan.y());
    return {top_left, drawn};
}

std::optional<std::array<std::int64_t, 3>> SliceView::voxelAt(QPointF position) const {
    const QRectF rect = imageRect();
    if (rect.isEmpty() || !rect.contains(position)) return std::nullopt;
    const auto u = static_cast<std::int64_t>((position.x() - rect.left()) / rect.width() * m_image.width());
    const auto v = static_cast<std::int64_t>((position.y() - rect.top()) / rect.height() * m_image.height());
    return voxelAtPixel(m_axes, m_model->geometry().size, sliceIndex(),
                        std::clamp<std::int64_t>(u, 0, m_image.width() - 1),
                        std::clamp<std::int64_t>(v, 0, m_image.height() - 1));
}

QPointF SliceView::positionOfVoxel(const std::array<std::int64_t, 3>& voxel) const {
    const QRectF rect = imageRect();
    if (rect.isEmpty()) return {};
    const auto pixel = pixelOfVoxel(m_axes, m_model->geometry().size, voxel);
    return {rect.left() + (static_cast<double>(pixel[0]) + 0.5) * rect.width() / m_image.width(),
            rect.top() + (static_cast<double>(pixel[1]) + 0.5) * rect.height() / m_image.height()};
}

void SliceView::paintEvent(QPaintEvent*) {
    QPainter painter(this);
    painter.fillRect(rect(), Qt::black);
    if (m_image.isNull()) {
        painter.setPen(QColor(160, 160, 160));
        painter.drawText(rect(), Qt::AlignCenter, tr("%1\nno image — File ▸ Open").arg(orientationName(m_orientation)));
        return;
    }
    const QRectF target = imageRect();
    painter.setRenderHint(QPainter::SmoothPixmapTransform, false);  // voxels stay voxels
    painter.drawImage(target, m_image);

    if (m_design && m_partition_visible) PartitionOverlay::paint(painter, *m_design, frame(), m_hot_cut);

    // Crosshair through the cursor, in the colour ITK-SNAP users know.
    const QPointF centre = positionOfVoxel(m_model->cursor());
    painter.setPen(QPen(QColor(60, 160, 255, 200), 1));
    painter.drawLine(QPointF(target.left(), centre.y()), QPointF(target.right(), centre.y()));
    painter.drawLine(QPointF(centre.x(), target.top()), QPointF(centre.x(), target.bottom()));

    // Anatomical letters at the edges and the slice number.
    painter.setPen(QColor(255, 210, 80));
    QFont font = painter.font();
    font.setBold(true);
    painter.setFont(font);
    const QRectF frame = rect().adjusted(4, 4, -4, -4);
    painter.drawText(frame, Qt::AlignLeft | Qt::AlignVCenter, m_axes.edge_letters[0]);
    painter.drawText(frame, Qt::AlignRight | Qt::AlignVCenter, m_axes.edge_letters[1]);
    painter.drawText(frame, Qt::AlignTop | Qt::AlignHCenter, m_axes.edge_letters[2]);
    painter.drawText(frame, Qt::AlignBottom | Qt::AlignHCenter, m_axes.edge_letters[3]);
    painter.setPen(QColor(220, 220, 220));
    font.setBold(false);
    painter.setFont(font);
    painter.drawText(frame, Qt::AlignTop | Qt::AlignLeft,
                     tr("%1  %2 / %3").arg(orientationName(m_orientation)).arg(sliceIndex() + 1).arg(numSlices()));
    if (const auto& streamed = m_model->streamed()) {
        // Which picture this is: the overview's blocks until the full-resolution slice has been read.
        const auto factor = streamed->overviewFactor();
        const bool failed = streamed->readFailed(m_axes.axis_normal, sliceIndex());
        const QString note = failed ? tr("cannot read this slice: %1").arg(QString::fromStdString(streamed->lastError()))
                             : m_full_resolution
                                 ? tr("full resolution")
                                 : tr("overview 1:%1 — reading full resolution…").arg(factor[static_cast<std::size_t>(m_axes.axis_x)]);
        painter.setPen(failed ? QColor(255, 90, 90) : m_full_resolution ? QColor(140, 220, 140) : QColor(255, 170, 60));
        painter.drawText(frame, Qt::AlignBottom | Qt::AlignLeft, note);
    }
    if (hasFocus()) {
        painter.setPen(QPen(QColor(60, 160, 255), 2));
        painter.drawRect(rect().adjusted(1, 1, -1, -1));
    }
}

void SliceView::moveCursorTo(QPointF position) {
    const QRectF rect = imageRect();
    if (rect.isEmpty()) return;
    // Clamp into the image so a drag past the edge keeps following along the border.
    const QPointF inside(std::clamp(position.x(), rect.left(), rect.right() - 1e-6),
                         std::clamp(position.y(), rect.top(), rect.bottom() - 1e-6));
    if (const auto voxel = voxelAt(inside)) m_model->setCursor(*voxel);
}

void SliceView::mousePressEvent(QMouseEvent* event) {
    if (!m_model->hasVolume()) return;
    m_drag_start = event->position();
    if (event->button() == Qt::LeftButton && m_design && m_partition_visible) {
        if (const auto cut = PartitionOverlay::cutNear(*m_design, frame(), event->position())) {
            m_drag = Drag::Cut;
            m_hot_cut = cut;
            update();
            return;
        }
    }
    if (event->button() == Qt::LeftButton) {
        m_drag = Drag::Cursor;
        moveCursorTo(event->position());
    } else if (event->button() == Qt::RightButton) {
        m_drag = Drag::WindowLevel;
        m_window_at_drag_start = m_model->windowLevel();
    } else if (event->button() == Qt::MiddleButton) {
        m_drag = Drag::Pan;
        m_pan_at_drag_start = m_pan;
    }
}

void SliceView::mouseMoveEvent(QMouseEvent* event) {
    if (!m_model->hasVolume()) return;
    if (const auto voxel = voxelAt(event->position())) emit hoveredVoxel(*voxel);
    const QPointF delta = event->position() - m_drag_start;
    if (m_drag == Drag::None && m_design && m_partition_visible) {
        // Hovering a cut: show that it can be dragged.
        const auto cut = PartitionOverlay::cutNear(*m_design, frame(), event->position());
        if (cut != m_hot_cut) {
            m_hot_cut = cut;
            const int rank = static_cast<int>(m_design->inputExtent().size());
            setCursor(cut ? (PartitionOverlay::runsAlongX(frame(), cut->input_axis, rank) ? Qt::SplitHCursor : Qt::SplitVCursor)
                          : Qt::ArrowCursor);
            update();
        }
    }
    switch (m_drag) {
        case Drag::Cut: {
            const SliceFrame f = frame();
            const int rank = static_cast<int>(m_design->inputExtent().size());
            const bool along_x = PartitionOverlay::runsAlongX(f, m_hot_cut->input_axis, rank);
            const double position = PartitionOverlay::inputPosition(*m_design, f, m_hot_cut->input_axis,
                                                                    along_x ? event->position().x() : event->position().y());
            m_design->moveBoundary(m_hot_cut->input_axis, m_hot_cut->index, static_cast<std::int64_t>(std::llround(position)), true);
            break;
        }
        case Drag::Cursor: moveCursorTo(event->position()); break;
        case Drag::WindowLevel: {
            // One widget width of drag spans the whole intensity range, as in ITK-SNAP.
            const double range = std::max(m_model->maximumValue() - m_model->minimumValue(), 1e-6);
            const double per_pixel = range / std::max(width(), 1);
            WindowLevel window = m_window_at_drag_start;
            window.window = std::max(window.window + delta.x() * per_pixel, range * 1e-4);
            window.level = window.level - delta.y() * per_pixel;
            m_model->setWindowLevel(window);
            break;
        }
        case Drag::Pan:
            m_pan = m_pan_at_drag_start + delta;
            update();
            break;
        case Drag::None: break;
    }
}

void SliceView::mouseReleaseEvent(QMouseEvent*) {
    if (m_drag == Drag::Cut && m_design) m_design->finishDrag();  // the next drag is a new undo step
    m_drag = Drag::None;
}

void SliceView::wheelEvent(QWheelEvent* event) {
    if (!m_model->hasVolume()) return;
    const int steps = event->angleDelta().y() / 120;
    if (steps == 0) return;
    if (event->modifiers() & Qt::ControlModifier) {
        m_zoom = std::clamp(m_zoom * std::pow(1.2, steps), 0.25, 32.0);
        update();
    } else {
        setSliceIndex(sliceIndex() + steps);
    }
    event->accept();
}

void SliceView::keyPressEvent(QKeyEvent* event) {
    switch (event->key()) {
        case Qt::Key_PageUp:
        case Qt::Key_Up: setSliceIndex(sliceIndex() + 1); break;
        case Qt::Key_PageDown:
        case Qt::Key_Down: setSliceIndex(sliceIndex() - 1); break;
        case Qt::Key_Home: resetView(); break;
        default: QWidget::keyPressEvent(event); return;
    }
    event->accept();
}

}  // namespace tessera::ui
