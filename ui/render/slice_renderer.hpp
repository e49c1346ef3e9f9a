// SliceRenderer: turns one slice of a volume (and its labels) into an image. No widget.
//
// Slices are shown in the radiological convention, whatever the order of the voxel axes in the file:
//   axial:    screen right = patient Left,      screen down = Posterior   (looking from the feet)
//   coronal:  screen right = patient Left,      screen down = Inferior
//   sagittal: screen right = patient Posterior, screen down = Inferior
// SliceAxes records which voxel axis runs along the screen's x and y, and whether it is flipped.
// The image has one pixel per voxel; the view scales it by the voxel spacing.
#pragma once

#include "model/viewer_model.hpp"

#include <QImage>

#include <array>
#include <cstdint>

namespace tessera::ui {

enum class SliceOrientation { Axial, Coronal, Sagittal };
QString orientationName(SliceOrientation orientation);

struct SliceAxes {
    int axis_x = 0;       // voxel axis (0 = i, 1 = j, 2 = k) along the screen's x
    bool flip_x = false;  // true: voxel index decreases to the right
    int axis_y = 1;       // voxel axis along the screen's y (downwards)
    bool flip_y = false;
    int axis_normal = 2;  // voxel axis the slice index walks along
    std::array<QString, 4> edge_letters;  // anatomical letters at left, right, top, bottom
};

SliceAxes sliceAxes(const tessera::ImageGeometry& geometry, SliceOrientation orientation);

// Voxel shown at pixel (u, v) of slice `slice_index`.
std::array<std::int64_t, 3> voxelAtPixel(const SliceAxes& axes, const std::array<std::int64_t, 3>& size,
                                         std::int64_t slice_index, std::int64_t u, std::int64_t v);
// Pixel (u, v) where a voxel appears; the inverse of voxelAtPixel within a slice.
std::array<std::int64_t, 2> pixelOfVoxel(const SliceAxes& axes, const std::array<std::int64_t, 3>& size,
                                         const std::array<std::int64_t, 3>& voxel);

struct LabelStyle {
    double opacity = 0.5;  // 0..1
    bool outline_only = false;
};

class SliceRenderer {
public:
    // Greyscale slice with the window applied; Format_RGB32, size = extents along axis_x × axis_y.
    static QImage renderIntensity(const tessera::Volume& volume, const SliceAxes& axes, std::int64_t slice_index,
                                  WindowLevel window);
    // Blends the labels of the same slice into `image` with the model's colours and visibility.
    static void blendLabels(QImage& image, const tessera::LabelMap& labels, const SliceAxes& axes,
                            std::int64_t slice_index, const ViewerModel& model);
    // A slice of the full grid `full_size` drawn from an overview whose voxels stand for blocks of
    // `factor` voxels (nearest block): one pixel per full-resolution voxel, as renderIntensity's.
    static QImage renderOverview(const tessera::Volume& overview, const std::array<std::int64_t, 3>& factor,
                                 const std::array<std::int64_t, 3>& full_size, const SliceAxes& axes,
                                 std::int64_t slice_index, WindowLevel window);
    // The labels of a full-resolution slice (one voxel thick along axes.axis_normal, on the full grid
    // `full_size`) taken from an overview's blocks of `factor` voxels: what blendLabels draws while the
    // slice's own labels are being read.
    static tessera::LabelMap overviewLabelSlice(const tessera::LabelMap& overview, const std::array<std::int64_t, 3>& factor,
                                                const std::array<std::int64_t, 3>& full_size, const SliceAxes& axes, std::int64_t slice_index);
    // Both, from the model's state, at the model's cursor. For a streamed volume: the full-resolution
    // slice and its labels when they have been read (`full_resolution` set true), else the overview's
    // (and the slice is asked for).
    static QImage render(const ViewerModel& model, SliceOrientation orientation, bool* full_resolution = nullptr);
};

}  // namespace tessera::ui
