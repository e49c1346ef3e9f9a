// Internal to engine/data: a training volume larger than memory, read patch by patch.
//
//   auto image = open_region_reader("sample_A.h5:/volumes/raw");
//   auto labels = open_region_reader("sample_A.h5:/volumes/labels/clefts");
//   RegionVolume volume("sample_A", image, labels, config, mapping, /*spatial_rank=*/3, /*training_extent=*/96);
//   volume.scan();                                  // once: statistics, labels checked, foreground counted
//   volume.read_patch({10, -4, 200}, {16, 64, 64}, image_out, labels_out);  // [D, H, W]; zeros outside
//
// It stands for what a whole read would give (sources.cpp's prepare: normalised over the whole volume,
// labels mapped to classes, then split along D — H for 2D — into a training part and a held-out part),
// with the same sampling: the foreground voxel of rank r is the r-th non-zero class voxel in the
// training part's voxel order, so a patch sampled from a RegionVolume equals the one sampled from the
// whole read (to the last bit of the normalisation statistics, which are accumulated block by block).
// Memory: one block of the scan (at most 8 Mi voxels), one count per row of the training part and one
// byte per 64 voxels of a row.
#pragma once

#include "data/volume_dataset.hpp"
#include "io/volume_region.hpp"

#include <array>
#include <memory>
#include <mutex>

namespace tessera::data::detail {

class RegionVolume {
public:
    // training_extent: slices (3D) or rows (2D) of the training part, counted from the start; the rest is
    // held out. Opens nothing and reads nothing: scan() does, once.
    RegionVolume(std::string name, std::shared_ptr<const VolumeRegionReader> image, std::shared_ptr<const VolumeRegionReader> labels,
                 const DataConfig& config, LabelMapping mapping, int spatial_rank, std::int64_t training_extent);

    // Reads image and labels once, block by block: intensity statistics (z-score) over the whole volume,
    // non-finite voxels (refused unless data.non_finite is "zero"), every label checked against the
    // mapping, the training part's foreground counted per row. Throws as the whole read would. Later
    // calls return at once; every method below calls it.
    void scan() const;

    const std::string& name() const { return m_name; }
    std::array<std::int64_t, 3> training_extent() const;  // [D, H, W] of the training part
    std::int64_t num_foreground() const;                  // non-zero class voxels in the training part
    // The foreground voxel of `rank` in [0, num_foreground()), [D, H, W] in the training part.
    std::array<std::int64_t, 3> foreground_voxel(std::int64_t rank) const;
    // The patch at `begin` (training-part [D, H, W], may reach outside: zeros there, as crop_padded):
    // `image` gets [extent...] normalised f32, `labels` [extent...] classes.
    void read_patch(const std::array<std::int64_t, 3>& begin, const std::array<std::int64_t, 3>& extent, float* image,
                    std::int32_t* labels) const;
    // The held-out part read whole (it must fit TESSERA_MAX_VOLUME_BYTES), normalised like the training part.
    LoadedVolume held_out(std::string name) const;
    // "8.0 G voxels read by region (mean 127.4, sd 73.9; 12.5 % foreground in training)"
    std::string describe() const;

private:
    struct Scan {
        double mean = 0, scale = 1;             // z-score: (v - mean) * scale
        std::vector<std::uint64_t> cumulative;  // foreground voxels in training rows 0..r (inclusive)
        // Per row, the foreground in each run of segment_width voxels: finding a foreground voxel reads one
        // segment of labels (one HDF5 chunk across) instead of the whole row.
        std::vector<std::uint8_t> segments;     // [training row][segment]
        std::int64_t segments_per_row = 0;
    };
    static constexpr std::int64_t segment_width = 64;
    void read_normalised(const VoxelBox& box, float* image, std::int32_t* labels) const;  // file box, in range
    const Scan& scanned() const;

    std::string m_name;
    std::shared_ptr<const VolumeRegionReader> m_image, m_labels;
    DataConfig m_config;
    LabelMapping m_mapping;
    int m_spatial_rank;
    std::int64_t m_training_extent;  // along D (3D) or H (2D)
    mutable std::once_flag m_scan_once;
    mutable std::unique_ptr<Scan> m_scan;
};

}  // namespace tessera::data::detail
