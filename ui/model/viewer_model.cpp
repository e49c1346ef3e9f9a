#include "model/viewer_model.hpp"

#include "io/label_descriptions.hpp"
#include "model/gui_mailbox.hpp"

#include <algorithm>
#include <cmath>

#include <QPointer>

namespace tessera::ui {

QColor defaultLabelColor(std::int32_t label) {
    if (label <= 0) return QColor(0, 0, 0, 0);
    const std::array<float, 3> rgb = tessera::default_label_color(label);
    return QColor::fromRgbF(rgb[0], rgb[1], rgb[2]);
}

ViewerModel::ViewerModel(QObject* parent) : QObject(parent), m_mailbox(new GuiMailbox(this)) {}

void ViewerModel::setVolume(std::shared_ptr<const tessera::Volume> volume) {
    std::array<double, 2> value_range{0.0, 1.0};
    if (volume) {
        const float* voxels = volume->voxels.data<float>();
        const auto [lowest, highest] = std::minmax_element(voxels, voxels + volume->geometry.num_voxels());
        value_range = {*lowest, *highest};
    }
    resetFor(std::move(volume), nullptr, value_range);
}

void ViewerModel::setStreamedVolume(std::shared_ptr<const tessera::Volume> overview, std::shared_ptr<StreamedVolume> full) {
    TESSERA_CHECK(overview && full, "a streamed volume needs its overview and its reader");
    const std::array<double, 2> value_range = full->valueRange();
    resetFor(std::move(overview), std::move(full), value_range);
}

std::shared_ptr<StreamedVolume> ViewerModel::makeStreamedVolume(std::shared_ptr<const tessera::VolumeRegionReader> reader,
                                                                const tessera::VolumeOverview& overview, std::size_t cache_bytes) {
    // The mailbox is the model's child: a read finishing after the model is gone delivers nothing.
    QPointer<GuiMailbox> mailbox(m_mailbox);
    return std::make_shared<StreamedVolume>(std::move(reader), overview.factor, std::array<double, 2>{overview.minimum, overview.maximum},
                                            cache_bytes, [this, mailbox] {
                                                if (mailbox) mailbox->post([this] { emit fullResolutionSliceLoaded(); });
                                            });
}

void ViewerModel::resetFor(std::shared_ptr<const tessera::Volume> volume, std::shared_ptr<StreamedVolume> streamed,
                           std::array<double, 2> value_range) {
    m_volume = std::move(volume);
    m_streamed = std::move(streamed);
    m_labels.reset();
    m_prediction.reset();
    m_error_map.reset();
    m_present_labels.clear();
    m_value_range = value_range;
    if (m_volume) {
        const auto& size = geometry().size;
        m_cursor = {size[0] / 2, size[1] / 2, size[2] / 2};
        const WindowLevelPreset preset = windowLevelPresets()[defaultPresetIndex()];
        m_window = preset.is_auto ? autoWindow() : preset.value;
    }
    emit volumeChanged();
    emit labelMapChanged();
    emit windowLevelChanged();
    emit cursorChanged();
}

const tessera::ImageGeometry& ViewerModel::geometry() const {
    static const tessera::ImageGeometry none;
    if (m_streamed) return m_streamed->geometry();
    return m_volume ? m_volume->geometry : none;
}

std::array<std::int64_t, 3> ViewerModel::overviewCursor() const {
    if (!m_streamed) return m_cursor;
    auto voxel = tessera::overview_voxel_of(m_cursor, m_streamed->overviewFactor());
    for (std::size_t axis = 0; axis < 3; ++axis) voxel[axis] = std::min(voxel[axis], m_volume->geometry.size[axis] - 1);
    return voxel;
}

// Label maps and predictions held whole go on images held whole: a streamed image's grid is too large.
void ViewerModel::checkLabelsCanBeShown(const std::string& what) const {
    TESSERA_CHECK(!m_streamed, "cannot show " << what << " held whole on " << m_streamed->sourcePath() << ": that image is read by region ("
                                              << tessera::describe(m_streamed->geometry())
                                              << ", too large to hold), so its labels must be read by region too: an HDF5 dataset or an "
                                                 "uncompressed .nii on the same grid");
}

void ViewerModel::setStreamedLabels(std::shared_ptr<const tessera::LabelMap> overview, std::shared_ptr<const tessera::VolumeRegionReader> reader,
                                    const std::vector<std::int32_t>& present) {
    TESSERA_CHECK(m_streamed != nullptr, "labels read by region go on an image read by region; open the image by region first");
    TESSERA_CHECK(overview && reader, "streamed labels need their overview and their reader");
    tessera::check_same_grid(m_streamed->geometry(), reader->geometry(), reader->source_path());
    tessera::check_same_grid(m_volume->geometry, overview->geometry, reader->source_path() + " (overview)");
    m_streamed->setLabels(std::move(reader));
    m_labels = std::move(overview);
    m_prediction.reset();
    m_error_map.reset();
    m_present_labels.clear();
    for (std::int32_t label : present) {
        if (label != 0) m_present_labels.push_back(label);
    }
    emit labelMapChanged();
}

void ViewerModel::setLabelMap(std::shared_ptr<const tessera::LabelMap> labels) {
    TESSERA_CHECK(m_volume != nullptr, "open an image before opening a label map onto it");
    if (labels) checkLabelsCanBeShown("the label map " + labels->source_path);
    if (labels) check_same_grid(m_volume->geometry, labels->geometry, labels->source_path);
    m_labels = std::move(labels);
    m_error_map.reset();
    m_present_labels.clear();
    if (m_labels) {
        for (std::int32_t label : m_labels->present_labels()) {
            if (label != 0) m_present_labels.push_back(label);
        }
    }
    emit labelMapChanged();
}

void ViewerModel::clearLabelMap() {
    if (m_streamed) m_streamed->setLabels(nullptr);
    setLabelMap(nullptr);
}

void ViewerModel::setPrediction(std::shared_ptr<const tessera::LabelMap> prediction) {
    TESSERA_CHECK(m_volume != nullptr, "open an image before showing a prediction on it");
    if (prediction) checkLabelsCanBeShown("a prediction");
    if (prediction) check_same_grid(m_volume->geometry, prediction->geometry, prediction->source_path);
    m_prediction = std::move(prediction);
    m_error_map.reset();
    emit labelMapChanged();
}

void ViewerModel::setOverlaySource(OverlaySource source) {
    if (source == m_overlay_source) return;
    m_overlay_source = source;
    emit labelMapChanged();  // another label volume: the 2D overlay and the 3D surfaces are rebuilt
}

std::shared_ptr<const tessera::LabelMap> ViewerModel::shownLabels() const {
    switch (m_overlay_source) {
        case OverlaySource::Truth: return m_labels;
        case OverlaySource::Prediction: return m_prediction;
        case OverlaySource::Errors: {
            if (!m_labels || !m_prediction) return nullptr;
            if (!m_error_map) {
                auto errors = std::make_shared<tessera::LabelMap>(make_label_map(m_labels->geometry));
                const std::int32_t* truth = m_labels->labels.data<std::int32_t>();
                const std::int32_t* predicted = m_prediction->labels.data<std::int32_t>();
                std::int32_t* out = errors->labels.data<std::int32_t>();
                for (std::int64_t v = 0; v < errors->geometry.num_voxels(); ++v) {
                    if (truth[v] == predicted[v]) continue;
                    out[v] = truth[v] == 0 ? error_false_positive : predicted[v] == 0 ? error_false_negative : error_wrong_class;
                }
                m_error_map = std::move(errors);
            }
            return m_error_map;
        }
    }
    return nullptr;
}

void ViewerModel::setCursor(std::array<std::int64_t, 3> voxel) {
    if (!m_volume) return;
    for (std::size_t axis = 0; axis < 3; ++axis) {
        voxel[axis] = std::clamp<std::int64_t>(voxel[axis], 0, geometry().size[axis] - 1);
    }
    if (voxel == m_cursor) return;
    m_cursor = voxel;
    emit cursorChanged();
}

void ViewerModel::setWindowLevel(WindowLevel window) {
    window.window = std::max(window.window, 1e-6);
    if (window.window == m_window.window && window.level == m_window.level) return;
    m_window = window;
    emit windowLevelChanged();
}

void ViewerModel::applyPreset(const WindowLevelPreset& preset) {
    setWindowLevel(preset.is_auto ? autoWindow() : preset.value);
}

std::size_t ViewerModel::defaultPresetIndex() const {
    const auto presets = windowLevelPresets();
    const bool looks_like_ct = m_volume && m_value_range[0] < -500.0;
    return looks_like_ct ? 0 : presets.size() - 1;  // first: CT soft tissue; last: MRI auto
}

WindowLevel ViewerModel::autoWindow(double lower_percentile, double upper_percentile) const {
    if (!m_volume) return {};
    // A histogram of 4096 bins over the value range gives percentiles to 1/4096 of the range, fast.
    constexpr int num_bins = 4096;
    const double low = m_value_range[0];
    const double span = std::max(m_value_range[1] - m_value_range[0], 1e-6);
    std::vector<std::int64_t> histogram(num_bins, 0);
    const float* voxels = m_volume->voxels.data<float>();
    const std::int64_t count = m_volume->geometry.num_voxels();
    for (std::int64_t v = 0; v < count; ++v) {
        const int bin = std::clamp(static_cast<int>((voxels[v] - low) / span * num_bins), 0, num_bins - 1);
        ++histogram[static_cast<std::size_t>(bin)];
    }
    auto value_at_percentile = [&](double percentile) {
        const auto target = static_cast<std::int64_t>(percentile / 100.0 * static_cast<double>(count));
        std::int64_t seen = 0;
        for (int bin = 0; bin < num_bins; ++bin) {
            seen += histogram[static_cast<std::size_t>(bin)];
            if (seen > target) return low + (bin + 0.5) * span / num_bins;
        }
        return m_value_range[1];
    };
    const double lower = value_at_percentile(lower_percentile);
    const double upper = std::max(value_at_percentile(upper_percentile), lower + span / num_bins);
    return {upper - lower, (upper + lower) / 2};
}

void ViewerModel::setLabelOpacity(double opacity) {
    opacity = std::clamp(opacity, 0.0, 1.0);
    if (opacity == m_label_opacity) return;
    m_label_opacity = opacity;
    emit labelDisplayChanged();
}

void ViewerModel::setOutlineOnly(bool outline_only) {
    if (outline_only == m_outline_only) return;
    m_outline_only = outline_only;
    emit labelDisplayChanged();
}

QColor ViewerModel::labelColor(std::int32_t label) const {
    const auto found = m_label_colors.find(label);
    return found != m_label_colors.end() ? found->second : defaultLabelColor(label);
}

void ViewerModel::setLabelColor(std::int32_t label, QColor color) {
    m_label_colors[label] = color;
    emit labelDisplayChanged();
}

void ViewerModel::setVisibleLabels(const std::set<std::int32_t>& shown) {
    std::set<std::int32_t> hidden;
    for (std::int32_t label : m_present_labels) {
        if (!shown.contains(label)) hidden.insert(label);
    }
    if (hidden == m_hidden_labels) return;
    m_hidden_labels = std::move(hidden);
    emit labelDisplayChanged();
}

void ViewerModel::setLabelVisible(std::int32_t label, bool visible) {
    if (visible == isLabelVisible(label)) return;
    if (visible) {
        m_hidden_labels.erase(label);
    } else {
        m_hidden_labels.insert(label);
    }
    emit labelDisplayChanged();
}

}  // namespace tessera::ui
