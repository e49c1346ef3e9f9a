#include "render/slice_renderer.hpp"

#include "io/volume_overview.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessera::ui {

QString orientationName(SliceOrientation orientation) {
    switch (orientation) {
        case SliceOrientation::Axial: return QStringLiteral("Axial");
        case SliceOrientation::Coronal: return QStringLiteral("Coronal");
        case SliceOrientation::Sagittal: return QStringLiteral("Sagittal");
    }
    return {};
}

namespace {

// For each world axis (L, P, S) the voxel axis most aligned with it and that alignment's sign.
struct AnatomicalAxes {
    std::array<int, 3> voxel_axis{0, 1, 2};
    std::array<bool, 3> reversed{false, false, false};
};

AnatomicalAxes anatomicalAxes(const tessera::ImageGeometry& geometry) {
    AnatomicalAxes result;
    std::array<bool, 3> taken{false, false, false};
    // Greedy by strength of alignment, so an oblique scan still gets a permutation.
    std::vector<std::tuple<double, int, int>> candidates;  // |cos|, world axis, voxel axis
    for (int world = 0; world < 3; ++world) {
        for (int voxel = 0; voxel < 3; ++voxel) {
            candidates.emplace_back(std::abs(geometry.direction[static_cast<std::size_t>(world * 3 + voxel)]), world,
                                    voxel);
        }
    }
    std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
    std::array<bool, 3> assigned{false, false, false};
    for (const auto& [strength, world, voxel] : candidates) {
        if (assigned[static_cast<std::size_t>(world)] || taken[static_cast<std::size_t>(voxel)]) continue;
        assigned[static_cast<std::size_t>(world)] = true;
        taken[static_cast<std::size_t>(voxel)] = true;
        result.voxel_axis[static_cast<std::size_t>(world)] = voxel;
        result.reversed[static_cast<std::size_t>(world)] =
            geometry.direction[static_cast<std::size_t>(world * 3 + voxel)] < 0;
    }
    return result;
}

}  // namespace

SliceAxes sliceAxes(const tessera::ImageGeometry& geometry, SliceOrientation orientation) {
    const AnatomicalAxes anatomy = anatomicalAxes(geometry);
    constexpr int left = 0, posterior = 1, superior = 2;
    // screen_x_world: world axis that increases to the right; screen_y_world increases downwards
    // unless `up` says it increases upwards (superior is shown at the top).
    int screen_x_world = left, screen_y_world = posterior, normal_world = superior;
    bool y_increases_upwards = false;
    SliceAxes axes;
    switch (orientation) {
        case SliceOrientation::Axial:
            screen_x_world = left, screen_y_world = posterior, normal_world = superior;
            axes.edge_letters = {QStringLiteral("R"), QStringLiteral("L"), QStringLiteral("A"), QStringLiteral("P")};
            break;
        case SliceOrientation::Coronal:
            screen_x_world = left, screen_y_world = superior, normal_world = posterior, y_increases_upwards = true;
            axes.edge_letters = {QStringLiteral("R"), QStringLiteral("L"), QStringLiteral("S"), QStringLiteral("I")};
            break;
        case SliceOrientation::Sagittal:
            screen_x_world = posterior, screen_y_world = superior, normal_world = left, y_increases_upwards = true;
            axes.edge_letters = {QStringLiteral("A"), QStringLiteral("P"), QStringLiteral("S"), QStringLiteral("I")};
            break;
    }
    axes.axis_x = anatomy.voxel_axis[static_cast<std::size_t>(screen_x_world)];
    axes.flip_x = anatomy.reversed[static_cast<std::size_t>(screen_x_world)];
    axes.axis_y = anatomy.voxel_axis[static_cast<std::size_t>(screen_y_world)];
    axes.flip_y = anatomy.reversed[static_cast<std::size_t>(screen_y_world)] != y_increases_upwards;
    axes.axis_normal = anatomy.voxel_axis[static_cast<std::size_t>(normal_world)];
    return axes;
}

std::array<std::int64_t, 3> voxelAtPixel(const SliceAxes& axes, const std::array<std::int64_t, 3>& size,
                                         std::int64_t slice_index, std::int64_t u, std::int64_t v) {
    std::array<std::int64_t, 3> voxel{};
    const auto ax = static_cast<std::size_t>(axes.axis_x);
    const auto ay = static_cast<std::size_t>(axes.axis_y);
    voxel[ax] = axes.flip_x ? size[ax] - 1 - u : u;
    voxel[ay] = axes.flip_y ? size[ay] - 1 - v : v;
    voxel[static_cast<std::size_t>(axes.axis_normal)] = slice_index;
    return voxel;
}

std::array<std::int64_t, 2> pixelOfVoxel(const SliceAxes& axes, const std::array<std::int64_t, 3>& size,
                                         const std::array<std::int64_t, 3>& voxel) {
    const auto ax = static_cast<std::size_t>(axes.axis_x);
    const auto ay = static_cast<std::size_t>(axes.axis_y);
    return {axes.flip_x ? size[ax] - 1 - voxel[ax] : voxel[ax], axes.flip_y ? size[ay] - 1 - voxel[ay] : voxel[ay]};
}

namespace {

// Walks a slice row by row: calls visit(row_pointer_offset, step_along_u) per screen row, so the inner
// loop over u is a strided walk through the volume without index arithmetic per pixel.
struct SliceWalk {
    std::int64_t width = 0, height = 0;  // pixels
    std::int64_t row_start_of(std::int64_t v) const { return base + v * step_v; }
    std::int64_t base = 0, step_u = 0, step_v = 0;  // elements in the [k, j, i] buffer
};

// A value through the window: grey level (value - lower) × scale, clamped to 0..255, rounded.
QRgb windowedGrey(float value, float lower, float scale) {
    const int level = static_cast<int>(std::clamp((value - lower) * scale, 0.0f, 255.0f) + 0.5f);
    return qRgb(level, level, level);
}

SliceWalk sliceWalk(const SliceAxes& axes, const std::array<std::int64_t, 3>& size, std::int64_t slice_index) {
    const std::array<std::int64_t, 3> stride{1, size[0], size[0] * size[1]};  // elements per step along i, j, k
    const auto ax = static_cast<std::size_t>(axes.axis_x);
    const auto ay = static_cast<std::size_t>(axes.axis_y);
    const auto an = static_cast<std::size_t>(axes.axis_normal);
    SliceWalk walk;
    walk.width = size[ax];
    walk.height = size[ay];
    walk.step_u = axes.flip_x ? -stride[ax] : stride[ax];
    walk.step_v = axes.flip_y ? -stride[ay] : stride[ay];
    walk.base = slice_index * stride[an] + (axes.flip_x ? (size[ax] - 1) * stride[ax] : 0) +
                (axes.flip_y ? (size[ay] - 1) * stride[ay] : 0);
    return walk;
}

}  // namespace

QImage SliceRenderer::renderIntensity(const tessera::Volume& volume, const SliceAxes& axes, std::int64_t slice_index,
                                      WindowLevel window) {
    const SliceWalk walk = sliceWalk(axes, volume.geometry.size, slice_index);
    QImage image(static_cast<int>(walk.width), static_cast<int>(walk.height), QImage::Format_RGB32);
    const float* voxels = volume.voxels.data<float>();
    const float lower = static_cast<float>(window.lower());
    const float scale = static_cast<float>(255.0 / std::max(window.window, 1e-12));
    for (std::int64_t v = 0; v < walk.height; ++v) {
        auto* row = reinterpret_cast<QRgb*>(image.scanLine(static_cast<int>(v)));
        const float* source = voxels + walk.row_start_of(v);
        for (std::int64_t u = 0; u < walk.width; ++u) {
            row[u] = windowedGrey(source[u * walk.step_u], lower, scale);
        }
    }
    return image;
}

void SliceRenderer::blendLabels(QImage& image, const tessera::LabelMap& labels, const SliceAxes& axes,
                                std::int64_t slice_index, const ViewerModel& model) {
    const SliceWalk walk = sliceWalk(axes, labels.geometry.size, slice_index);
    const std::int32_t* values = labels.labels.data<std::int32_t>();
    const double opacity = model.outlineOnly() ? 1.0 : model.labelOpacity();
    const bool outline_only = model.outlineOnly();
    // Colours looked up once per label, not per pixel.
    std::vector<std::int32_t> cached_labels;
    std::vector<QRgb> cached_colors;
    std::vector<bool> cached_visible;
    auto style_of = [&](std::int32_t label, QRgb& color) {
        for (std::size_t c = 0; c < cached_labels.size(); ++c) {
            if (cached_labels[c] == label) {
                color = cached_colors[c];
                return static_cast<bool>(cached_visible[c]);
            }
        }
        cached_labels.push_back(label);
        cached_colors.push_back(model.labelColor(label).rgb());
        cached_visible.push_back(model.isLabelVisible(label));
        color = cached_colors.back();
        return static_cast<bool>(cached_visible.back());
    };
    const auto alpha = static_cast<int>(std::lround(opacity * 256));
    for (std::int64_t v = 0; v < walk.height; ++v) {
        auto* row = reinterpret_cast<QRgb*>(image.scanLine(static_cast<int>(v)));
        const std::int32_t* source = values + walk.row_start_of(v);
        for (std::int64_t u = 0; u < walk.width; ++u) {
            const std::int32_t label = source[u * walk.step_u];
            if (label == 0) continue;
            if (outline_only) {
                // A boundary pixel has a 4-neighbour in the slice with another label (or the slice edge).
                const bool interior = u > 0 && u + 1 < walk.width && v > 0 && v + 1 < walk.height &&
                                      source[(u - 1) * walk.step_u] == label &&
                                      source[(u + 1) * walk.step_u] == label &&
                                      source[u * walk.step_u - walk.step_v] == label &&
                                      source[u * walk.step_u + walk.step_v] == label;
                if (interior) continue;
            }
            QRgb color = 0;
            if (!style_of(label, color)) continue;
            const QRgb under = row[u];
            row[u] = qRgb((qRed(color) * alpha + qRed(under) * (256 - alpha)) >> 8,
                          (qGreen(color) * alpha + qGreen(under) * (256 - alpha)) >> 8,
                          (qBlue(color) * alpha + qBlue(under) * (256 - alpha)) >> 8);
        }
    }
}

QImage SliceRenderer::renderOverview(const tessera::Volume& overview, const std::array<std::int64_t, 3>& factor,
                                     const std::array<std::int64_t, 3>& full_size, const SliceAxes& axes,
                                     std::int64_t slice_index, WindowLevel window) {
    const auto ax = static_cast<std::size_t>(axes.axis_x);
    const auto ay = static_cast<std::size_t>(axes.axis_y);
    const auto an = static_cast<std::size_t>(axes.axis_normal);
    const auto& size = overview.geometry.size;
    const std::array<std::int64_t, 3> stride{1, size[0], size[0] * size[1]};
    auto offset_along = [&](std::size_t axis, std::int64_t full_index) {
        return std::min(full_index / factor[axis], size[axis] - 1) * stride[axis];
    };
    // Where each screen column and row lands in the overview, once, not per pixel.
    std::vector<std::int64_t> column_offset(static_cast<std::size_t>(full_size[ax]));
    for (std::int64_t u = 0; u < full_size[ax]; ++u) {
        column_offset[static_cast<std::size_t>(u)] = offset_along(ax, axes.flip_x ? full_size[ax] - 1 - u : u);
    }
    const std::int64_t base = offset_along(an, slice_index);
    QImage image(static_cast<int>(full_size[ax]), static_cast<int>(full_size[ay]), QImage::Format_RGB32);
    const float* voxels = overview.voxels.data<float>();
    const float lower = static_cast<float>(window.lower());
    const float scale = static_cast<float>(255.0 / std::max(window.window, 1e-12));
    for (std::int64_t v = 0; v < full_size[ay]; ++v) {
        auto* row = reinterpret_cast<QRgb*>(image.scanLine(static_cast<int>(v)));
        const float* source = voxels + base + offset_along(ay, axes.flip_y ? full_size[ay] - 1 - v : v);
        for (std::int64_t u = 0; u < full_size[ax]; ++u) {
            row[u] = windowedGrey(source[column_offset[static_cast<std::size_t>(u)]], lower, scale);
        }
    }
    return image;
}

tessera::LabelMap SliceRenderer::overviewLabelSlice(const tessera::LabelMap& overview, const std::array<std::int64_t, 3>& factor,
                                                    const std::array<std::int64_t, 3>& full_size, const SliceAxes& axes,
                                                    std::int64_t slice_index) {
    tessera::ImageGeometry geometry;
    geometry.size = full_size;
    geometry.size[static_cast<std::size_t>(axes.axis_normal)] = 1;
    tessera::LabelMap slice = tessera::make_label_map(geometry);
    std::int32_t* out = slice.labels.data<std::int32_t>();
    const auto& size = overview.geometry.size;
    std::array<std::int64_t, 3> voxel{};
    voxel[static_cast<std::size_t>(axes.axis_normal)] = slice_index;
    for (std::int64_t k = 0; k < geometry.size[2]; ++k) {
        for (std::int64_t j = 0; j < geometry.size[1]; ++j) {
            for (std::int64_t i = 0; i < geometry.size[0]; ++i) {
                const std::array<std::int64_t, 3> in_slice{i, j, k};
                for (std::size_t axis = 0; axis < 3; ++axis) {
                    if (static_cast<int>(axis) != axes.axis_normal) voxel[axis] = in_slice[axis];
                }
                const auto block = tessera::overview_voxel_of(voxel, factor);
                *out++ = overview.label_at(std::min(block[0], size[0] - 1), std::min(block[1], size[1] - 1), std::min(block[2], size[2] - 1));
            }
        }
    }
    return slice;
}

QImage SliceRenderer::render(const ViewerModel& model, SliceOrientation orientation, bool* full_resolution) {
    if (full_resolution) *full_resolution = !model.isStreamed();
    if (!model.hasVolume()) return {};
    const SliceAxes axes = sliceAxes(model.geometry(), orientation);
    const std::int64_t slice_index = model.cursor()[static_cast<std::size_t>(axes.axis_normal)];
    const auto shown = model.shownLabels();
    if (const auto& streamed = model.streamed()) {
        const auto factor = streamed->overviewFactor();
        const auto& full_size = model.geometry().size;
        const auto slice = streamed->slice(axes.axis_normal, slice_index);
        // Labels at full resolution when the overlay shows them, the slice's own once read.
        std::shared_ptr<const tessera::LabelMap> label_slice;
        const bool want_labels = shown && streamed->hasLabels();
        if (want_labels) label_slice = streamed->labelSlice(axes.axis_normal, slice_index);
        const bool labels_ready = !want_labels || label_slice || streamed->readFailed(axes.axis_normal, slice_index);
        if (slice && labels_ready) {
            if (full_resolution) *full_resolution = true;
            QImage image = renderIntensity(*slice, axes, 0, model.windowLevel());  // the slice is one voxel thick
            if (label_slice) blendLabels(image, *label_slice, axes, 0, model);
            return image;
        }
        QImage image = slice ? renderIntensity(*slice, axes, 0, model.windowLevel())
                             : renderOverview(*model.volume(), factor, full_size, axes, slice_index, model.windowLevel());
        if (shown) blendLabels(image, overviewLabelSlice(*shown, factor, full_size, axes, slice_index), axes, 0, model);
        return image;
    }
    const tessera::Volume& volume = *model.volume();
    QImage image = renderIntensity(volume, axes, slice_index, model.windowLevel());
    if (shown) blendLabels(image, *shown, axes, slice_index, model);
    return image;
}

}  // namespace tessera::ui
