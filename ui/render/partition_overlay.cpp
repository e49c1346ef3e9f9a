#include "render/partition_overlay.hpp"

#include "core/units.hpp"

#include <QFontMetricsF>

#include <algorithm>
#include <cmath>

namespace tessera::ui {

namespace {

double volume_extent(const SliceFrame& frame, int voxel_axis) {
    return static_cast<double>(frame.volume_size[static_cast<std::size_t>(voxel_axis)]);
}

double voxels_per_input_voxel(const PartitionDesign& design, const SliceFrame& frame, int input_axis) {
    const Shape input = design.inputExtent();
    const int voxel_axis = PartitionOverlay::voxelAxisOf(input_axis, static_cast<int>(input.size()));
    return volume_extent(frame, voxel_axis) / static_cast<double>(input[static_cast<std::size_t>(input_axis)]);
}

QString gib(std::int64_t bytes) { return QString::fromStdString(format_gib(bytes)); }

QString milliseconds(double seconds) {
    return seconds < 0.01 ? QString::number(seconds * 1e3, 'f', 2) + " ms" : QString::number(seconds * 1e3, 'f', 1) + " ms";
}

}  // namespace

QColor coreColor(std::int64_t core) {
    // Golden-ratio hue steps keep neighbouring core numbers far apart on the colour wheel.
    const double hue = std::fmod(0.08 + 0.618033988749895 * static_cast<double>(core), 1.0);
    return QColor::fromHsvF(static_cast<float>(hue), 0.75f, 0.95f);
}

bool PartitionOverlay::runsAlongX(const SliceFrame& frame, int input_axis, int rank) {
    return voxelAxisOf(input_axis, rank) == frame.axes.axis_x;
}

std::optional<double> PartitionOverlay::screenCoordinate(const PartitionDesign& design, const SliceFrame& frame, int input_axis,
                                                         double position) {
    const int rank = static_cast<int>(design.inputExtent().size());
    const int voxel_axis = voxelAxisOf(input_axis, rank);
    double fraction = position * voxels_per_input_voxel(design, frame, input_axis) / volume_extent(frame, voxel_axis);
    if (voxel_axis == frame.axes.axis_x) {
        if (frame.axes.flip_x) fraction = 1.0 - fraction;
        return frame.image_rect.left() + fraction * frame.image_rect.width();
    }
    if (voxel_axis == frame.axes.axis_y) {
        if (frame.axes.flip_y) fraction = 1.0 - fraction;
        return frame.image_rect.top() + fraction * frame.image_rect.height();
    }
    return std::nullopt;
}

double PartitionOverlay::inputPosition(const PartitionDesign& design, const SliceFrame& frame, int input_axis, double screen) {
    const int rank = static_cast<int>(design.inputExtent().size());
    const int voxel_axis = voxelAxisOf(input_axis, rank);
    double fraction = 0;
    if (voxel_axis == frame.axes.axis_x) {
        fraction = (screen - frame.image_rect.left()) / frame.image_rect.width();
        if (frame.axes.flip_x) fraction = 1.0 - fraction;
    } else {
        fraction = (screen - frame.image_rect.top()) / frame.image_rect.height();
        if (frame.axes.flip_y) fraction = 1.0 - fraction;
    }
    return fraction * volume_extent(frame, voxel_axis) / voxels_per_input_voxel(design, frame, input_axis);
}

std::optional<CutLine> PartitionOverlay::cutNear(const PartitionDesign& design, const SliceFrame& frame, QPointF point,
                                                 double tolerance) {
    if (!design.hasExperiment() || !frame.image_rect.contains(point)) return std::nullopt;
    std::optional<CutLine> best;
    double best_distance = tolerance;
    const auto& boundaries = design.grid().boundaries;
    const int rank = static_cast<int>(boundaries.size());
    for (int axis = 0; axis < rank; ++axis) {
        const auto& cuts = boundaries[static_cast<std::size_t>(axis)];
        for (int index = 1; index + 1 < static_cast<int>(cuts.size()); ++index) {
            const auto screen = screenCoordinate(design, frame, axis, static_cast<double>(cuts[static_cast<std::size_t>(index)]));
            if (!screen) continue;
            const double distance = std::abs((runsAlongX(frame, axis, rank) ? point.x() : point.y()) - *screen);
            if (distance <= best_distance) {
                best_distance = distance;
                best = CutLine{axis, index};
            }
        }
    }
    return best;
}

void PartitionOverlay::paint(QPainter& painter, const PartitionDesign& design, const SliceFrame& frame,
                             std::optional<CutLine> highlighted) {
    if (!design.hasExperiment() || frame.image_rect.isEmpty()) return;
    const Shape input = design.inputExtent();
    const int rank = static_cast<int>(input.size());
    // The input axis the slice cuts through, and where (in input voxels).
    int normal_axis = -1;
    double normal_position = 0;
    for (int a = 0; a < rank; ++a) {
        if (voxelAxisOf(a, rank) == frame.axes.axis_normal) {
            normal_axis = a;
            normal_position = (static_cast<double>(frame.slice_index) + 0.5) / voxels_per_input_voxel(design, frame, a);
        }
    }
    // A rectangle on screen from per-axis input intervals; axes not drawn span the whole image.
    const auto screen_rect = [&](const std::vector<partition::Interval>& box) {
        QRectF r = frame.image_rect;
        for (int a = 0; a < rank; ++a) {
            const auto from = screenCoordinate(design, frame, a, static_cast<double>(box[static_cast<std::size_t>(a)].begin));
            const auto to = screenCoordinate(design, frame, a, static_cast<double>(box[static_cast<std::size_t>(a)].end));
            if (!from || !to) continue;
            const double low = std::min(*from, *to), high = std::max(*from, *to);
            if (runsAlongX(frame, a, rank)) {
                r.setLeft(low);
                r.setRight(high);
            } else {
                r.setTop(low);
                r.setBottom(high);
            }
        }
        return r;
    };
    const auto visible = [&](const std::vector<partition::Interval>& box) {
        if (normal_axis < 0) return true;
        const auto& interval = box[static_cast<std::size_t>(normal_axis)];
        return normal_position >= static_cast<double>(interval.begin) && normal_position < static_cast<double>(interval.end);
    };

    painter.save();
    painter.setRenderHint(QPainter::Antialiasing, false);
    QFont font = painter.font();
    font.setPointSizeF(std::max(7.0, font.pointSizeF() - 1));
    painter.setFont(font);
    const QFontMetricsF metrics(font);

    for (const CoreCost& core : design.cores()) {
        if (!visible(core.owned)) continue;
        const QRectF tile = screen_rect(core.owned);
        QColor fill = coreColor(core.core);
        fill.setAlpha(core.fits ? 45 : 90);
        painter.fillRect(tile, core.fits ? fill : QColor(220, 40, 40, 90));

        // The selected layer's halo: what this core reads from its neighbours, hatched.
        const auto needed = design.neededRegion(core.core);
        if (!needed.empty() && visible(needed)) {
            const QRectF region = screen_rect(needed);
            QColor hatch = coreColor(core.core);
            hatch.setAlpha(200);
            const QBrush brush(hatch, Qt::BDiagPattern);
            const std::array<QRectF, 4> strips{QRectF(QPointF(region.left(), region.top()), QPointF(tile.left(), region.bottom())),
                                               QRectF(QPointF(tile.right(), region.top()), QPointF(region.right(), region.bottom())),
                                               QRectF(QPointF(tile.left(), region.top()), QPointF(tile.right(), tile.top())),
                                               QRectF(QPointF(tile.left(), tile.bottom()), QPointF(tile.right(), region.bottom()))};
            for (const QRectF& strip : strips) {
                if (strip.width() > 0.5 && strip.height() > 0.5) painter.fillRect(strip, brush);
            }
            painter.setPen(QPen(hatch, 1, Qt::DashLine));
            painter.drawRect(region);
        }

        // Core number, memory and compute time, when the tile has room for them.
        const QString title = QObject::tr("core %1").arg(core.core);
        const QString detail = gib(core.memory_bytes) + QStringLiteral(" · ") + milliseconds(core.compute_seconds);
        const double text_width = std::max(metrics.horizontalAdvance(title), metrics.horizontalAdvance(detail)) + 8;
        const double text_height = metrics.height() * 2 + 6;
        if (tile.width() >= text_width && tile.height() >= text_height) {
            const QRectF box(tile.center() - QPointF(text_width / 2, text_height / 2), QSizeF(text_width, text_height));
            painter.fillRect(box, QColor(0, 0, 0, 150));
            painter.setPen(coreColor(core.core).lighter(130));
            painter.drawText(box.adjusted(4, 3, -4, -3), Qt::AlignTop | Qt::AlignHCenter, title);
            painter.setPen(core.fits ? QColor(235, 235, 235) : QColor(255, 90, 90));
            painter.drawText(box.adjusted(4, 3, -4, -3), Qt::AlignBottom | Qt::AlignHCenter, detail);
        } else if (tile.width() >= metrics.horizontalAdvance(QString::number(core.core)) + 4 && tile.height() >= metrics.height()) {
            painter.setPen(core.fits ? QColor(235, 235, 235) : QColor(255, 90, 90));
            painter.drawText(tile, Qt::AlignCenter, QString::number(core.core));
        }
    }

    // The cuts, the dragged or hovered one brighter and wider.
    for (int axis = 0; axis < rank; ++axis) {
        const auto& cuts = design.grid().boundaries[static_cast<std::size_t>(axis)];
        for (int index = 1; index + 1 < static_cast<int>(cuts.size()); ++index) {
            const auto screen = screenCoordinate(design, frame, axis, static_cast<double>(cuts[static_cast<std::size_t>(index)]));
            if (!screen) continue;
            const bool hot = highlighted && *highlighted == CutLine{axis, index};
            painter.setPen(QPen(hot ? QColor(255, 255, 255) : QColor(255, 255, 255, 170), hot ? 3 : 1.5));
            if (runsAlongX(frame, axis, rank)) {
                painter.drawLine(QPointF(*screen, frame.image_rect.top()), QPointF(*screen, frame.image_rect.bottom()));
            } else {
                painter.drawLine(QPointF(frame.image_rect.left(), *screen), QPointF(frame.image_rect.right(), *screen));
            }
        }
    }
    painter.restore();
}

}  // namespace tessera::ui
