// Transfer-function presets for volume rendering, kept as data files (resources/transfer_functions).
//
// A preset maps intensity to colour and opacity. CT presets give absolute values (HU); MRI presets
// give fractions between two intensity percentiles of the volume, so one preset fits any scan.
// `resolved` turns a preset into absolute values for one volume; VolumeScene feeds those to VTK.
//
//   auto presets = builtinTransferFunctionPresets();                 // ct_soft_tissue, ct_bone, ...
//   auto intensities = IntensityDistribution::fromVolume(volume);
//   TransferFunctionPreset absolute = presets[2].resolved(intensities);
//   TransferFunctionPreset mine = loadTransferFunctionPreset("my_preset.json");  // throws on errors
//
// Plain data and Qt Core only: no VTK here.
#pragma once

#include "io/volume.hpp"

#include <QByteArray>
#include <QString>

#include <array>
#include <vector>

namespace tessera::ui {

struct ColorPoint {
    double value = 0.0;
    std::array<double, 3> rgb{0.0, 0.0, 0.0};  // 0..1
};

struct OpacityPoint {
    double value = 0.0;
    double opacity = 0.0;  // 0..1
};

enum class TransferFunctionRange {
    Absolute,    // values in the volume's units (HU for CT)
    Percentile,  // 0 = lower_percentile-th percentile of the volume, 1 = upper_percentile-th
};

// Sorted intensities of a volume (a subsample for big ones), answering percentile queries.
class IntensityDistribution {
public:
    IntensityDistribution() = default;
    static IntensityDistribution fromVolume(const tessera::Volume& volume);
    static IntensityDistribution fromValues(std::vector<float> values);  // non-finite values dropped

    bool isEmpty() const { return m_sorted.empty(); }
    double minimum() const;
    double maximum() const;
    double percentile(double percent) const;  // 0..100, linear between samples; 0 when empty

private:
    std::vector<float> m_sorted;
};

struct TransferFunctionPreset {
    QString id;           // file base name: "ct_bone"
    QString name;         // "CT bone"
    QString description;
    TransferFunctionRange range = TransferFunctionRange::Absolute;
    QString unit;                    // informative, absolute mode: "HU"
    double lower_percentile = 1.0;   // percentile mode
    double upper_percentile = 99.0;
    std::vector<ColorPoint> color;               // strictly increasing values
    std::vector<OpacityPoint> opacity;           // scalar opacity
    std::vector<OpacityPoint> gradient_opacity;  // optional: by gradient magnitude (units per mm)
    bool shading = true;
    double ambient = 0.2;
    double diffuse = 0.8;
    double specular = 0.2;
    double specular_power = 10.0;
    double opacity_unit_distance = 1.0;  // mm

    // The same preset in absolute values for a volume of these intensities (a copy with range
    // Absolute; absolute presets come back unchanged).
    TransferFunctionPreset resolved(const IntensityDistribution& intensities) const;
};

// `source` names the data in error messages (a file name). Throws tessera::Error naming the source
// and the field on malformed JSON, missing or mistyped fields, values out of range and unordered
// points.
TransferFunctionPreset loadTransferFunctionPreset(const QByteArray& json, const QString& source);
TransferFunctionPreset loadTransferFunctionPreset(const QString& path);  // id = base name

// The presets embedded in the application (":/transfer_functions/*.json"): the CT ones first.
std::vector<TransferFunctionPreset> builtinTransferFunctionPresets();
// Index of the preset with this id in `presets`, or -1.
int findTransferFunctionPreset(const std::vector<TransferFunctionPreset>& presets, const QString& id);

}  // namespace tessera::ui
