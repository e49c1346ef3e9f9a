// Helpers shared by the studio's QtTest tests.
#pragma once

#include <QImage>

#include <algorithm>
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

}  // namespace tessera::ui::test
