#include "render/detection_painter.hpp"

#include "render/partition_overlay.hpp"

#include <QFontMetricsF>
#include <QPen>

#include <algorithm>
#include <array>

namespace tessera::ui {

QPointF DetectionFrame::toScreen(double x, double y) const {
    return {image_rect.left() + x * image_rect.width() / static_cast<double>(image_width),
            image_rect.top() + y * image_rect.height() / static_cast<double>(image_height)};
}

QRectF DetectionFrame::toScreen(const detection::Box& box) const {
    return QRectF(toScreen(box.x_min, box.y_min), toScreen(box.x_max, box.y_max));
}

QPointF DetectionFrame::toImage(QPointF screen) const {
    return {(screen.x() - image_rect.left()) * static_cast<double>(image_width) / image_rect.width(),
            (screen.y() - image_rect.top()) * static_cast<double>(image_height) / image_rect.height()};
}

std::vector<TileAnchors> tileAnchors(const partition::SpatialGrid& grid, const detection::AnchorSet& anchors, int level) {
    std::vector<TileAnchors> tiles;
    const auto found = std::find_if(anchors.levels.begin(), anchors.levels.end(),
                                    [level](const detection::LevelAnchors& l) { return l.level == level; });
    if (grid.boundaries.size() != 2) return tiles;
    for (std::int64_t core = 0; core < grid.num_cores(); ++core) {
        const std::vector<std::int64_t> index = grid.grid_index(core);
        const auto& rows = grid.boundaries[0];
        const auto& columns = grid.boundaries[1];
        const detection::PixelRegion region{.y_begin = rows[static_cast<std::size_t>(index[0])],
                                            .y_end = rows[static_cast<std::size_t>(index[0]) + 1],
                                            .x_begin = columns[static_cast<std::size_t>(index[1])],
                                            .x_end = columns[static_cast<std::size_t>(index[1]) + 1]};
        TileAnchors tile;
        tile.core = core;
        tile.region = QRectF(QPointF(static_cast<double>(region.x_begin), static_cast<double>(region.y_begin)),
                             QPointF(static_cast<double>(region.x_end), static_cast<double>(region.y_end)));
        tiles.push_back(std::move(tile));
        if (found == anchors.levels.end()) continue;  // no such level: the tiles alone
        const double stride = static_cast<double>(found->stride);
        const detection::CellRange owned = detection::cells_in_region(*found, region);
        std::vector<QPointF>& centres = tiles.back().centres;
        centres.reserve(static_cast<std::size_t>(std::max<std::int64_t>(owned.num_cells(), 0)));
        for (std::int64_t row = owned.row_begin; row < owned.row_end; ++row) {
            for (std::int64_t column = owned.column_begin; column < owned.column_end; ++column) {
                centres.emplace_back((static_cast<double>(column) + 0.5) * stride, (static_cast<double>(row) + 0.5) * stride);
            }
        }
    }
    return tiles;
}

QColor DetectionPainter::classColor(std::int32_t class_id) {
    // Ten well-separated hues (the categorical palette plotting tools default to), repeated beyond.
    static const std::array<QColor, 10> palette{QColor(31, 119, 180),  QColor(255, 127, 14), QColor(44, 160, 44),
                                                QColor(214, 39, 40),   QColor(148, 103, 189), QColor(140, 86, 75),
                                                QColor(227, 119, 194), QColor(127, 127, 127), QColor(188, 189, 34),
                                                QColor(23, 190, 207)};
    return palette[static_cast<std::size_t>(std::max(class_id, 0)) % palette.size()];
}

QColor DetectionPainter::outcomeColor(run::BoxOutcome outcome) {
    switch (outcome) {
        case run::BoxOutcome::Matched:
        case run::BoxOutcome::Found: return QColor(40, 200, 70);
        case run::BoxOutcome::FalsePositive: return QColor(235, 40, 40);
        case run::BoxOutcome::Missed: return QColor(255, 150, 0);
    }
    return Qt::white;
}

QColor DetectionPainter::boxColor(const run::ShownBox& box, const DetectionStyle& style) {
    return style.colouring == BoxColouring::ByClass ? classColor(box.class_id) : outcomeColor(box.outcome);
}

QString DetectionPainter::tagText(const run::ShownBox& detection, const DetectionStyle& style) {
    const auto id = static_cast<std::size_t>(std::max(detection.class_id, 0));
    const QString name = id < style.class_names.size() ? style.class_names[id] : QStringLiteral("class %1").arg(detection.class_id);
    return QStringLiteral("%1 %2").arg(name).arg(detection.score, 0, 'f', 2);
}

void DetectionPainter::paintBoxes(QPainter& painter, const DetectionFrame& frame, const run::ShownDetections& shown,
                                  const DetectionStyle& style) {
    painter.save();
    painter.setRenderHint(QPainter::Antialiasing, false);  // crisp one-pixel box edges
    painter.setBrush(Qt::NoBrush);
    if (style.show_ground_truth) {
        for (std::size_t g = 0; g < shown.ground_truth.size(); ++g) {
            const run::ShownBox& truth = shown.ground_truth[g];
            const bool missed = truth.outcome == run::BoxOutcome::Missed && style.colouring == BoxColouring::ByOutcome;
            const bool highlighted = static_cast<std::int32_t>(g) == style.highlighted_truth;
            QPen pen(boxColor(truth, style), (missed ? 3.0 : 2.0) + (highlighted ? 2.0 : 0.0), Qt::DashLine);
            pen.setCosmetic(true);
            painter.setPen(pen);
            painter.drawRect(frame.toScreen(truth.box));
        }
    }
    if (style.show_detections) {
        QFont font = painter.font();
        font.setPointSizeF(std::max(7.0, font.pointSizeF() * 0.85));
        painter.setFont(font);
        const QFontMetricsF metrics(font);
        // Lowest score first, so the most confident boxes and tags end on top.
        std::vector<std::size_t> order(shown.detections.size());
        for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
        std::stable_sort(order.begin(), order.end(),
                         [&](std::size_t a, std::size_t b) { return shown.detections[a].score < shown.detections[b].score; });
        for (const std::size_t k : order) {
            const run::ShownBox& detection = shown.detections[k];
            const QColor color = boxColor(detection, style);
            const bool highlighted = static_cast<std::int32_t>(k) == style.highlighted_detection;
            QPen pen(color, highlighted ? 4.0 : 2.0, Qt::SolidLine);
            pen.setCosmetic(true);
            painter.setPen(pen);
            const QRectF box = frame.toScreen(detection.box);
            painter.drawRect(box);
            if (!style.show_tags) continue;
            const QString text = tagText(detection, style);
            const QSizeF size(metrics.horizontalAdvance(text) + 6, metrics.height() + 2);
            // On the box's top edge, inside the image when the box touches its top.
            QRectF tag(QPointF(box.left(), box.top() - size.height()), size);
            if (tag.top() < frame.image_rect.top()) tag.moveTop(box.top());
            painter.fillRect(tag, color);
            painter.setPen(color.lightnessF() > 0.6 ? Qt::black : Qt::white);
            painter.drawText(tag, Qt::AlignCenter, text);
        }
    }
    painter.restore();
}

void DetectionPainter::paintTiles(QPainter& painter, const DetectionFrame& frame, const std::vector<TileAnchors>& tiles) {
    painter.save();
    painter.setRenderHint(QPainter::Antialiasing, false);
    for (const TileAnchors& tile : tiles) {
        const QColor color = coreColor(tile.core);
        const QRectF region(frame.toScreen(tile.region.left(), tile.region.top()), frame.toScreen(tile.region.right(), tile.region.bottom()));
        QColor fill = color;
        fill.setAlpha(30);
        painter.fillRect(region, fill);
        QPen edge(color, 2.0);
        edge.setCosmetic(true);
        painter.setPen(edge);
        painter.setBrush(Qt::NoBrush);
        painter.drawRect(region);
        // Centres as small dots; at a fine level they merge into a texture that still shows the tile's extent.
        painter.setPen(Qt::NoPen);
        painter.setBrush(color);
        const double radius = std::clamp(frame.image_rect.width() / static_cast<double>(frame.image_width) * 1.5, 1.0, 3.0);
        for (const QPointF& centre : tile.centres) painter.drawEllipse(frame.toScreen(centre.x(), centre.y()), radius, radius);
        painter.setPen(Qt::white);
        painter.setBrush(Qt::NoBrush);
        painter.drawText(region.adjusted(4, 2, -4, -2), Qt::AlignLeft | Qt::AlignTop,
                         QObject::tr("core %1 · %2 cells").arg(tile.core).arg(tile.centres.size()));
    }
    painter.restore();
}

}  // namespace tessera::ui
