// Helpers shared by the studio's QtTest tests.
#pragma once

#include "widgets/detection_view.hpp"

#include <QImage>

#include <algorithm>
#include <cmath>
#include <map>

namespace tessera::ui::test {

// The share of pixels that differ from the image's most common colour (its background): a grabbed
// widget that drew nothing scores 0.
inline double foregroundFraction(const QImage& grabbed) {
    const QImage image = grabbed.convertToFormat(QImage::Format_RGB32);
    std::map<QRgb, int> counts;
    for (int y = 0; y < image.height(); y += 2) {
        for (int x = 0; x < image.width(); x += 2) ++counts[image.pixel(x, y)];
    }
    int total = 0, background = 0;
    for (const auto& [color, count] : counts) {
        total += count;
        background = std::max(background, count);
    }
    return total > 0 ? 1.0 - static_cast<double>(background) / total : 0.0;
}

// Rows along a box's left edge (image pixels; the rows 4 px from its corners left out, where other edges
// cross) whose drawn pixel, at the edge's column or one beside it, is exactly `color`: a box drawn there in
// that colour gives most rows, a dashed one about two thirds, none gives 0.
inline int pixelsOnLeftEdge(const DetectionView& view, const QImage& drawn, const detection::Box& box, const QColor& color) {
    const QRectF rect = view.canvas()->frame().toScreen(box);
    int count = 0;
    for (int y = static_cast<int>(rect.top()) + 4; y < static_cast<int>(rect.bottom()) - 4; ++y) {
        for (int dx = -1; dx <= 1; ++dx) {
            if (drawn.pixelColor(static_cast<int>(std::lround(rect.left())) + dx, y) == color) {
                ++count;
                break;
            }
        }
    }
    return count;
}

}  // namespace tessera::ui::test
