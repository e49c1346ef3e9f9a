#include "model/window_level.hpp"

namespace tessera::ui {

std::vector<WindowLevelPreset> windowLevelPresets() {
    // Standard radiology windows (width / level in HU).
    return {
        {QStringLiteral("CT soft tissue"), {400.0, 40.0}, false},
        {QStringLiteral("CT bone"), {1800.0, 400.0}, false},
        {QStringLiteral("CT lung"), {1500.0, -600.0}, false},
        {QStringLiteral("CT brain"), {80.0, 40.0}, false},
        {QStringLiteral("MRI auto (0.5–99.5 percentile)"), {}, true},
    };
}

}  // namespace tessera::ui
