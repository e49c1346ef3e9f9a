// A downsampled overview of a volume read by region, and full-resolution regions of it as volumes:
// how the studio shows a volume larger than memory (the overview for navigation and the 3D view,
// full-resolution slices read when they are looked at).
//
//   auto reader = open_region_reader("em.h5:/volumes/raw");
//   std::optional<VolumeOverview> overview = read_overview(*reader, std::int64_t{1} << 25, report_progress);
//   Volume slice = read_region_volume(*reader, {{0, 0, 700}, {size[0], size[1], 1}});  // one axial slice
#pragma once

#include "io/volume.hpp"
#include "io/volume_region.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace tessera {

// The chunk cache a viewer opens its reader with (open_region_reader's cache_bytes): an axial slice of
// a 2048²-voxel plane stored in 64³ float chunks touches 1 GiB of them; held, the next 63 slices read
// from memory instead of the file.
inline constexpr std::size_t viewer_chunk_cache_bytes = std::size_t{1} << 30;
// The chunk cache of the reader an overview pass reads with: its bands hold whole rows of chunks and the
// next band needs at most the rows it shares with the last one (two rows of 2048-wide 64³ f32 chunks),
// so more would only hold chunks never read again. Pass readers are closed before viewer readers open:
// HDF5 gives a dataset open twice in one process the first opening's cache.
inline constexpr std::size_t overview_pass_chunk_cache_bytes = std::size_t{128} << 20;

struct VolumeOverview {
    // Each voxel the mean of a block of factor[0] × factor[1] × factor[2] full-resolution voxels (the
    // last block along an axis may be shorter: the mean of the voxels it has). Geometry: size
    // ceil(size / factor), spacing × factor, voxel (0, 0, 0) at the centre of the first full block.
    Volume volume;                              // [D, H, W] = [k, j, i], f32
    std::array<std::int64_t, 3> factor{1, 1, 1};  // full-resolution voxels per overview voxel, along i, j, k
    ImageGeometry full_geometry;                // the grid the overview summarises
    double minimum = 0.0, maximum = 0.0;         // over every full-resolution finite voxel
    std::int64_t num_non_finite = 0;             // NaN and ±Inf voxels (left out of the means)
};

// The smallest factor, the same along every axis with more than one voxel, that brings the overview
// to at most `max_overview_voxels` voxels.
std::array<std::int64_t, 3> overview_factor(const ImageGeometry& full_geometry, std::int64_t max_overview_voxels);

// Full-resolution voxel → the overview voxel whose block holds it.
std::array<std::int64_t, 3> overview_voxel_of(const std::array<std::int64_t, 3>& full_voxel,
                                              const std::array<std::int64_t, 3>& factor);

// The overview's grid for blocks of `factor` voxels (see VolumeOverview).
ImageGeometry overview_geometry(const ImageGeometry& full_geometry, const std::array<std::int64_t, 3>& factor);

// Reads the whole volume once, in bands of rows whose depth is a multiple of the factor near 64 (HDF5's
// chunk edge: each chunk is decompressed about once), holding one band at a time. `progress` is called
// with the fraction read after each band; returning false stops the pass (the result is then empty).
std::optional<VolumeOverview> read_overview(const VolumeRegionReader& reader, std::int64_t max_overview_voxels,
                                            const std::function<bool(double fraction_read)>& progress = {});

struct LabelOverview {
    LabelMap labels;                           // on overview_geometry(full, factor): each block's most frequent label
    std::vector<std::int32_t> present_labels;  // every label of the full resolution, sorted, 0 included if present
};

// A label volume's overview on the same blocks as its image's (the same bands, one pass): what the 3D
// view's surfaces are built from. Labels must be whole numbers in the int32 range (read_labels).
std::optional<LabelOverview> read_label_overview(const VolumeRegionReader& reader, const std::array<std::int64_t, 3>& factor,
                                                 const std::function<bool(double fraction_read)>& progress = {});

// The box's voxels as a volume of its own: geometry of the box (origin at its first voxel), source
// path and scalar type the reader's.
Volume read_region_volume(const VolumeRegionReader& reader, const VoxelBox& box);
LabelMap read_region_label_map(const VolumeRegionReader& reader, const VoxelBox& box);  // the same, as labels

}  // namespace tessera
