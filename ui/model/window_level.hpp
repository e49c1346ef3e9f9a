// Intensity window for display: values in [level - width/2, level + width/2] map to black..white.
#pragma once

#include <QString>

#include <vector>

namespace tessera::ui {

struct WindowLevel {
    double window = 400.0;  // width, in the volume's units (HU for CT)
    double level = 40.0;    // centre
    double lower() const { return level - window / 2; }
    double upper() const { return level + window / 2; }
};

struct WindowLevelPreset {
    QString name;        // "CT soft tissue"
    WindowLevel value;   // for fixed presets
    bool is_auto = false;  // MRI auto: from the volume's percentiles
};

std::vector<WindowLevelPreset> windowLevelPresets();

}  // namespace tessera::ui
