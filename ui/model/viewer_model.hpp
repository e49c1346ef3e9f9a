// ViewerModel: the state every view of one volume shares (no widgets, no rendering).
//
// It owns the loaded volume and label map as immutable shared values, the cursor (a voxel index),
// the display window and the label overlay settings. A volume too large to hold is "streamed": volume()
// is then its downsampled overview (what the 3D view shows), geometry() and the cursor are the full
// grid's, and streamed() reads full-resolution slices for the slice views. Views read it and call its setters; it emits
// one signal per kind of change so each view redraws only what changed.
#pragma once

#include "io/volume.hpp"
#include "model/streamed_volume.hpp"
#include "model/window_level.hpp"

#include <QColor>
#include <QObject>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <set>

namespace tessera::ui {

class GuiMailbox;

// Default colour of a label value (ITK-SNAP-like palette: 1 red, 2 green, 3 blue, 4 yellow, ...).
QColor defaultLabelColor(std::int32_t label);

// Which labels the overlay shows: the label map (ground truth), a model's prediction on the same grid,
// or where they disagree (false positives, false negatives, wrong classes).
enum class OverlaySource { Truth, Prediction, Errors };

// Error-map values: the colours of the default palette (1 red, 3 blue, 4 yellow).
inline constexpr std::int32_t error_false_positive = 1;  // predicted a class where the truth is background
inline constexpr std::int32_t error_false_negative = 3;  // predicted background where the truth has a class
inline constexpr std::int32_t error_wrong_class = 4;     // both foreground, different classes

class ViewerModel : public QObject {
    Q_OBJECT
public:
    explicit ViewerModel(QObject* parent = nullptr);

    // Replaces the image; drops the label map, centres the cursor and picks an automatic window.
    void setVolume(std::shared_ptr<const tessera::Volume> volume);
    // Replaces the image by one read by region: `overview` summarises `full` (see io/volume_overview).
    void setStreamedVolume(std::shared_ptr<const tessera::Volume> overview, std::shared_ptr<StreamedVolume> full);
    // A streamed volume over `reader` whose finished reads the model hands to the GUI thread (signal
    // fullResolutionSliceLoaded); slices kept within `cache_bytes`.
    std::shared_ptr<StreamedVolume> makeStreamedVolume(std::shared_ptr<const tessera::VolumeRegionReader> reader,
                                                       const tessera::VolumeOverview& overview,
                                                       std::size_t cache_bytes = std::size_t{512} << 20);
    // Labels of a streamed image, read by region too: `overview` on the overview's grid (labelMap() and
    // what the 3D view builds surfaces from), `reader` for full-resolution label slices, `present` every
    // label of the full resolution. Throws naming both grids when the reader's grid differs from the image's.
    void setStreamedLabels(std::shared_ptr<const tessera::LabelMap> overview, std::shared_ptr<const tessera::VolumeRegionReader> reader,
                           const std::vector<std::int32_t>& present);
    const std::shared_ptr<StreamedVolume>& streamed() const { return m_streamed; }
    bool isStreamed() const { return m_streamed != nullptr; }
    // The grid the cursor and the slice views walk: the full-resolution one, also when streamed.
    const tessera::ImageGeometry& geometry() const;
    // The cursor on volume()'s grid (the overview's when streamed).
    std::array<std::int64_t, 3> overviewCursor() const;
    // Throws tessera::Error naming both grids when the label map's grid differs from the image's.
    void setLabelMap(std::shared_ptr<const tessera::LabelMap> labels);
    void clearLabelMap();
    // Throws naming `what` when a label map held whole cannot be shown on the image (a streamed one:
    // its labels must be read by region too, setStreamedLabels).
    void checkLabelsCanBeShown(const std::string& what) const;
    // A prediction on the image's grid (throws naming both grids otherwise); nullptr drops it.
    void setPrediction(std::shared_ptr<const tessera::LabelMap> prediction);
    const std::shared_ptr<const tessera::LabelMap>& prediction() const { return m_prediction; }
    OverlaySource overlaySource() const { return m_overlay_source; }
    void setOverlaySource(OverlaySource source);
    // What the overlay draws for the current source (nullptr when that source is missing); the error map
    // is computed once per truth/prediction pair.
    std::shared_ptr<const tessera::LabelMap> shownLabels() const;

    const std::shared_ptr<const tessera::Volume>& volume() const { return m_volume; }
    const std::shared_ptr<const tessera::LabelMap>& labelMap() const { return m_labels; }
    bool hasVolume() const { return m_volume != nullptr; }

    std::array<std::int64_t, 3> cursor() const { return m_cursor; }  // voxel index (i, j, k)
    void setCursor(std::array<std::int64_t, 3> voxel);                // clamped to the grid

    WindowLevel windowLevel() const { return m_window; }
    void setWindowLevel(WindowLevel window);
    void applyPreset(const WindowLevelPreset& preset);
    // The preset a volume opens with: CT soft tissue when the data look like CT (air near -1000 HU),
    // else MRI auto. An index into windowLevelPresets().
    std::size_t defaultPresetIndex() const;
    WindowLevel autoWindow(double lower_percentile = 0.5, double upper_percentile = 99.5) const;
    double minimumValue() const { return m_value_range[0]; }
    double maximumValue() const { return m_value_range[1]; }

    // Label overlay settings.
    double labelOpacity() const { return m_label_opacity; }  // 0..1
    void setLabelOpacity(double opacity);
    bool outlineOnly() const { return m_outline_only; }
    void setOutlineOnly(bool outline_only);
    QColor labelColor(std::int32_t label) const;
    void setLabelColor(std::int32_t label, QColor color);
    bool isLabelVisible(std::int32_t label) const { return !m_hidden_labels.contains(label); }
    void setLabelVisible(std::int32_t label, bool visible);
    // Every present label shown but `shown` (one change, one signal: the legend's show/hide all and isolate).
    void setVisibleLabels(const std::set<std::int32_t>& shown);
    const std::vector<std::int32_t>& presentLabels() const { return m_present_labels; }  // without 0

signals:
    void volumeChanged();
    void labelMapChanged();
    void cursorChanged();
    void windowLevelChanged();
    void labelDisplayChanged();
    void fullResolutionSliceLoaded();  // a streamed volume read a slice a view asked for

private:
    void resetFor(std::shared_ptr<const tessera::Volume> volume, std::shared_ptr<StreamedVolume> streamed,
                  std::array<double, 2> value_range);
    std::shared_ptr<const tessera::Volume> m_volume;
    std::shared_ptr<StreamedVolume> m_streamed;
    GuiMailbox* m_mailbox;
    std::shared_ptr<const tessera::LabelMap> m_labels;
    std::shared_ptr<const tessera::LabelMap> m_prediction;
    mutable std::shared_ptr<const tessera::LabelMap> m_error_map;  // cache of shownLabels() for Errors
    OverlaySource m_overlay_source = OverlaySource::Truth;
    std::array<std::int64_t, 3> m_cursor{0, 0, 0};
    WindowLevel m_window;
    std::array<double, 2> m_value_range{0.0, 1.0};
    double m_label_opacity = 0.5;
    bool m_outline_only = false;
    std::map<std::int32_t, QColor> m_label_colors;  // overrides of the default palette
    std::set<std::int32_t> m_hidden_labels;
    std::vector<std::int32_t> m_present_labels;
};

}  // namespace tessera::ui
