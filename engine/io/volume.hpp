// Volumes and label maps: voxels on a physical grid.
//
// World coordinates are in millimetres in the LPS frame (+x patient Left, +y Posterior, +z Superior),
// as DICOM and ITK use; NIfTI's RAS is converted on read and write. Voxel (i, j, k) sits at
//   world = origin + direction * (i * spacing[0], j * spacing[1], k * spacing[2])
// where direction's columns are the unit vectors of the i, j and k axes.
//
//   Volume mri = read_volume("head.nii.gz");          // voxels: [D, H, W] = [k, j, i], f32
//   LabelMap mask = read_label_map("mask.nii.gz");    // labels: [D, H, W], i32
//   check_same_grid(mri.geometry, mask.geometry, "mask.nii.gz");
#pragma once

#include "tensor/tensor.hpp"

#include <array>
#include <optional>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

struct ImageGeometry {
    std::array<std::int64_t, 3> size{1, 1, 1};   // voxels along i, j, k (x, y, z)
    std::array<double, 3> spacing{1.0, 1.0, 1.0};  // mm between voxel centres along i, j, k
    std::array<double, 3> origin{0.0, 0.0, 0.0};   // mm, world position of voxel (0, 0, 0)
    std::array<double, 9> direction{1, 0, 0, 0, 1, 0, 0, 0, 1};  // row-major 3×3; columns = axis directions

    std::int64_t num_voxels() const { return size[0] * size[1] * size[2]; }
    bool is_2d() const { return size[2] == 1; }
    std::array<double, 3> world_of(double i, double j, double k) const;       // mm
    std::array<double, 3> continuous_index_of(const std::array<double, 3>& world) const;
};

// Same size, and spacing, origin and direction within tolerance (relative to the spacing).
bool same_grid(const ImageGeometry& a, const ImageGeometry& b, double tolerance = 1e-4);
// Throws a message naming `what`, both grids and how they differ.
void check_same_grid(const ImageGeometry& image, const ImageGeometry& labels, const std::string& what);
std::string describe(const ImageGeometry& geometry);  // "128×128×62 voxels, 2×2×3 mm"

struct Volume {
    ImageGeometry geometry;
    Tensor voxels;                  // [D, H, W] = [k, j, i], f32 (rescale slope/intercept applied)
    std::string source_scalar_type; // element type in the file: "int16", "uint8", "float32", ...
    std::string source_path;
    // What the reader noticed and let through, for the user to see ("pixdim[3] is 0: 1 mm assumed").
    std::vector<std::string> warnings;
    // NaN and ±Inf voxels (also values too large for f32): reported when the volume opens, refused
    // for training unless the experiment says otherwise (data.non_finite).
    std::int64_t num_non_finite = 0;
    std::array<std::int64_t, 3> first_non_finite{-1, -1, -1};  // (i, j, k) of the first, or -1s

    float value_at(std::int64_t i, std::int64_t j, std::int64_t k) const {
        return voxels.data<float>()[(k * geometry.size[1] + j) * geometry.size[0] + i];
    }
};

// What a label value stands for, as the file that holds the labels says it (3D Slicer's .seg.nrrd
// segments): a name and, where given, a display colour.
struct LabelDescription {
    std::int32_t value = 0;
    std::string name;
    std::optional<std::array<float, 3>> color;  // RGB in [0, 1]
};

struct LabelMap {
    ImageGeometry geometry;
    Tensor labels;  // [D, H, W] = [k, j, i], i32; 0 is background
    std::string source_path;
    std::vector<std::string> warnings;  // as Volume::warnings
    std::vector<LabelDescription> descriptions;  // by value; empty when the file names none

    std::int32_t label_at(std::int64_t i, std::int64_t j, std::int64_t k) const {
        return labels.data<std::int32_t>()[(k * geometry.size[1] + j) * geometry.size[0] + i];
    }
    std::vector<std::int32_t> present_labels() const;  // sorted, background included if present
};

// Makes a Volume / LabelMap of the given grid with zeroed voxels.
Volume make_volume(const ImageGeometry& geometry);
LabelMap make_label_map(const ImageGeometry& geometry);

}  // namespace tessera
