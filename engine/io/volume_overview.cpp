#include "io/volume_overview.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tessera {

namespace {

std::int64_t ceil_div(std::int64_t value, std::int64_t divisor) { return (value + divisor - 1) / divisor; }

// Rows read per band along an axis: a multiple of the factor, as near 64 as it can be without going over
// (at least one block), and no more than the axis has.
std::int64_t band_depth(std::int64_t factor, std::int64_t axis_size) {
    constexpr std::int64_t chunk_edge = 64;
    const std::int64_t depth = std::max<std::int64_t>(1, chunk_edge / factor) * factor;
    return std::min(depth, ceil_div(axis_size, factor) * factor);
}

}  // namespace

std::array<std::int64_t, 3> overview_factor(const ImageGeometry& full_geometry, std::int64_t max_overview_voxels) {
    TESSERA_CHECK(max_overview_voxels >= 1, "an overview of at least one voxel, got a limit of " << max_overview_voxels);
    const auto& size = full_geometry.size;
    std::int64_t factor = 1;
    auto voxels_at = [&](std::int64_t f) {
        double count = 1.0;
        for (std::int64_t extent : size) count *= static_cast<double>(extent > 1 ? ceil_div(extent, f) : 1);
        return count;
    };
    const std::int64_t longest = *std::max_element(size.begin(), size.end());
    while (factor < longest && voxels_at(factor) > static_cast<double>(max_overview_voxels)) ++factor;
    std::array<std::int64_t, 3> result{};
    for (std::size_t axis = 0; axis < 3; ++axis) result[axis] = size[axis] > 1 ? factor : 1;
    return result;
}

std::array<std::int64_t, 3> overview_voxel_of(const std::array<std::int64_t, 3>& full_voxel,
                                              const std::array<std::int64_t, 3>& factor) {
    return {full_voxel[0] / factor[0], full_voxel[1] / factor[1], full_voxel[2] / factor[2]};
}

std::optional<VolumeOverview> read_overview(const VolumeRegionReader& reader, std::int64_t max_overview_voxels,
                                            const std::function<bool(double)>& progress) {
    const ImageGeometry& full = reader.geometry();
    VolumeOverview overview;
    overview.full_geometry = full;
    overview.factor = overview_factor(full, max_overview_voxels);
    const auto& factor = overview.factor;

    ImageGeometry geometry = full;
    for (std::size_t axis = 0; axis < 3; ++axis) {
        geometry.size[axis] = ceil_div(full.size[axis], factor[axis]);
        geometry.spacing[axis] = full.spacing[axis] * static_cast<double>(factor[axis]);
    }
    // The first block's centre, half a block minus half a voxel in along each axis.
    geometry.origin = full.world_of(static_cast<double>(factor[0] - 1) / 2.0, static_cast<double>(factor[1] - 1) / 2.0,
                                    static_cast<double>(factor[2] - 1) / 2.0);
    overview.volume = make_volume(geometry);
    overview.volume.source_path = reader.source_path();
    overview.volume.source_scalar_type = reader.source_scalar_type();
    float* out = overview.volume.voxels.data<float>();  // [k, j, i] of the overview

    const std::int64_t width = full.size[0];
    const std::int64_t overview_width = geometry.size[0];
    const std::int64_t depth_j = band_depth(factor[1], full.size[1]);
    const std::int64_t depth_k = band_depth(factor[2], full.size[2]);
    std::vector<float> band(static_cast<std::size_t>(width * depth_j * depth_k));  // [k, j, i] of one band
    std::vector<double> sums;
    std::vector<std::int64_t> counts;
    double lowest = std::numeric_limits<double>::infinity();
    double highest = -std::numeric_limits<double>::infinity();
    const double total = static_cast<double>(full.num_voxels());
    double done = 0.0;

    for (std::int64_t k0 = 0; k0 < full.size[2]; k0 += depth_k) {
        for (std::int64_t j0 = 0; j0 < full.size[1]; j0 += depth_j) {
            VoxelBox box{{0, j0, k0}, {width, std::min(depth_j, full.size[1] - j0), std::min(depth_k, full.size[2] - k0)}};
            reader.read(box, band.data());
            // The band's overview voxels: rows [j0 / f, …) and slices [k0 / f, …); band edges are block edges.
            const std::int64_t blocks_j = ceil_div(box.extent[1], factor[1]);
            const std::int64_t blocks_k = ceil_div(box.extent[2], factor[2]);
            const auto num_blocks = static_cast<std::size_t>(blocks_k * blocks_j * overview_width);
            sums.assign(num_blocks, 0.0);
            counts.assign(num_blocks, 0);
            for (std::int64_t k = 0; k < box.extent[2]; ++k) {
                for (std::int64_t j = 0; j < box.extent[1]; ++j) {
                    const float* row = band.data() + (k * box.extent[1] + j) * width;
                    const std::int64_t block_row = ((k / factor[2]) * blocks_j + j / factor[1]) * overview_width;
                    for (std::int64_t i = 0; i < width; ++i) {
                        const float value = row[i];
                        if (!std::isfinite(value)) {
                            ++overview.num_non_finite;
                            continue;
                        }
                        lowest = std::min(lowest, static_cast<double>(value));
                        highest = std::max(highest, static_cast<double>(value));
                        const auto block = static_cast<std::size_t>(block_row + i / factor[0]);
                        sums[block] += value;
                        ++counts[block];
                    }
                }
            }
            for (std::int64_t bk = 0; bk < blocks_k; ++bk) {
                for (std::int64_t bj = 0; bj < blocks_j; ++bj) {
                    const std::int64_t source = (bk * blocks_j + bj) * overview_width;
                    float* target = out + ((k0 / factor[2] + bk) * geometry.size[1] + j0 / factor[1] + bj) * overview_width;
                    for (std::int64_t bi = 0; bi < overview_width; ++bi) {
                        const auto block = static_cast<std::size_t>(source + bi);
                        // A block of non-finite voxels only is shown as 0.
                        target[bi] = counts[block] > 0 ? static_cast<float>(sums[block] / static_cast<double>(counts[block])) : 0.0f;
                    }
                }
            }
            done += static_cast<double>(box.num_voxels());
            if (progress && !progress(done / total)) return std::nullopt;
        }
    }
    overview.minimum = std::isfinite(lowest) ? lowest : 0.0;
    overview.maximum = std::isfinite(highest) ? highest : 0.0;
    overview.volume.num_non_finite = 0;  // the means left them out
    return overview;
}

Volume read_region_volume(const VolumeRegionReader& reader, const VoxelBox& box) {
    ImageGeometry geometry = reader.geometry();
    geometry.origin = geometry.world_of(static_cast<double>(box.begin[0]), static_cast<double>(box.begin[1]),
                                        static_cast<double>(box.begin[2]));
    geometry.size = box.extent;
    Volume volume = make_volume(geometry);
    reader.read(box, volume.voxels.data<float>());
    volume.source_path = reader.source_path();
    volume.source_scalar_type = reader.source_scalar_type();
    return volume;
}

}  // namespace tessera
