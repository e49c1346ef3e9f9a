// Volumes read region by region, never whole: training and prediction on volumes larger than memory.
//
//   auto reader = open_region_reader("cremi/sample_A.h5:/volumes/raw");   // geometry only, nothing read yet
//   VoxelBox box{{100, 200, 10}, {64, 64, 16}};                          // begin and extent, (i, j, k)
//   std::vector<float> patch(box.num_voxels());
//   reader->read(box, patch.data());                                     // [16, 64, 64] = [k, j, i], f32
//
// What can be read this way: HDF5 datasets (hyperslabs; the chunks they touch go through a cache
// bounded by `cache_bytes`) and uncompressed NIfTI (.nii) files (rows read with pread: the page cache
// is the kernel's, the process holds only what a region needs). Other formats are read whole
// (read_volume). Readers may be used from several threads at once.
#pragma once

#include "io/volume.hpp"
#include "tensor/tensor.hpp"

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace tessera {

struct VoxelBox {
    std::array<std::int64_t, 3> begin{0, 0, 0};   // first voxel (i, j, k)
    std::array<std::int64_t, 3> extent{1, 1, 1};  // voxels along i, j, k
    std::int64_t num_voxels() const { return extent[0] * extent[1] * extent[2]; }
};

class VolumeRegionReader {
public:
    virtual ~VolumeRegionReader() = default;

    const ImageGeometry& geometry() const { return m_geometry; }
    const std::string& source_scalar_type() const { return m_source_scalar_type; }  // "uint8", ...
    const std::string& source_path() const { return m_source_path; }  // as opened, with its dataset

    // The box's voxels as f32 [extent k, extent j, extent i] (rescale applied). The box must lie inside
    // the grid (an internal error otherwise: callers clip).
    virtual void read(const VoxelBox& box, float* out) const = 0;
    // As i32 labels; throws naming the first voxel that is not a whole number in the int32 range.
    void read_labels(const VoxelBox& box, std::int32_t* out) const;

protected:
    VolumeRegionReader(ImageGeometry geometry, std::string source_scalar_type, std::string source_path);
    void check_box(const VoxelBox& box) const;
    // The box's values as doubles: labels of any integer type up to 2^53 keep their value.
    virtual void read_exact(const VoxelBox& box, double* out) const = 0;
    // Labels read straight into i32 where every stored value is one (integer types of at most 16 bits,
    // and int32, unscaled): no per-voxel check. Returns false where the reader cannot, and read_labels
    // goes through read_exact.
    virtual bool read_int32_directly(const VoxelBox&, std::int32_t*) const { return false; }

private:
    ImageGeometry m_geometry;
    std::string m_source_scalar_type;
    std::string m_source_path;
};

// A label volume written slab by slab, never whole: sliding-window prediction of a volume larger than
// memory. `path` is an HDF5 dataset name ("out.h5:/volumes/labels/prediction": chunked, gzip) or an
// uncompressed NIfTI (.nii). Labels are stored as uint8 when max_label ≤ 255, else int16 or int32. The
// file appears under its name only when finish() succeeds (written beside it first, as "x.nii.partial" or
// "x.partial.h5");
// a writer destroyed unfinished removes its partial file.
class LabelVolumeWriter {
public:
    virtual ~LabelVolumeWriter() = default;
    // labels: [count, H, W] i32 for slices [first, first + count) (2D: [count rows, W] with first a row).
    virtual void write_slices(std::int64_t first, const Tensor& labels) = 0;
    virtual void finish() = 0;
};
std::unique_ptr<LabelVolumeWriter> create_label_volume_writer(const std::filesystem::path& path, const ImageGeometry& geometry,
                                                              std::int32_t max_label);

// Whether `path` can be read by region (an HDF5 dataset name, an uncompressed .nii); looks at the name
// and, for .nii, nothing else.
bool can_read_by_region(const std::filesystem::path& path);

// Opens `path` and checks its header; throws like read_volume for a missing, damaged or unsupported
// file, and for a format that cannot be read by region (naming the ones that can).
std::unique_ptr<VolumeRegionReader> open_region_reader(const std::filesystem::path& path,
                                                       std::size_t cache_bytes = std::size_t{256} << 20);

}  // namespace tessera
