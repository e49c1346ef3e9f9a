#include "io/volume_overview.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
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

ImageGeometry overview_geometry(const ImageGeometry& full, const std::array<std::int64_t, 3>& factor) {
    ImageGeometry geometry = full;
    for (std::size_t axis = 0; axis < 3; ++axis) {
        geometry.size[axis] = ceil_div(full.size[axis], factor[axis]);
        geometry.spacing[axis] = full.spacing[axis] * static_cast<double>(factor[axis]);
    }
    // The first block's centre, half a block minus half a voxel in along each axis.
    geometry.origin = full.world_of(static_cast<double>(factor[0] - 1) / 2.0, static_cast<double>(factor[1] - 1) / 2.0,
                                    static_cast<double>(factor[2] - 1) / 2.0);
    return geometry;
}

namespace {

// One band of whole rows, its edges on block edges: where its blocks sit in the overview.
struct Band {
    VoxelBox box;                        // full-resolution voxels of the band
    std::int64_t blocks_j = 0, blocks_k = 0;  // overview rows and slices the band covers
    std::int64_t first_block_j = 0, first_block_k = 0;
    // Index of the first block of the band's row (j, k) (counted from the band's first voxel) among the
    // band's own [blocks_k, blocks_j, overview width] blocks; voxel i of that row is in block + i / factor[0].
    std::int64_t block_of_row(std::int64_t j, std::int64_t k, const std::array<std::int64_t, 3>& factor, std::int64_t overview_width) const {
        return ((k / factor[2]) * blocks_j + j / factor[1]) * overview_width;
    }
};

// Calls visit(band) for each band of the full grid in file order, then progress(fraction read); stops
// (returns false) when progress does.
bool for_each_band(const ImageGeometry& full, const std::array<std::int64_t, 3>& factor, const std::function<void(const Band&)>& visit,
                   const std::function<bool(double)>& progress) {
    const std::int64_t depth_j = band_depth(factor[1], full.size[1]);
    const std::int64_t depth_k = band_depth(factor[2], full.size[2]);
    const double total = static_cast<double>(full.num_voxels());
    double done = 0.0;
    for (std::int64_t k0 = 0; k0 < full.size[2]; k0 += depth_k) {
        for (std::int64_t j0 = 0; j0 < full.size[1]; j0 += depth_j) {
            Band band;
            band.box = VoxelBox{{0, j0, k0}, {full.size[0], std::min(depth_j, full.size[1] - j0), std::min(depth_k, full.size[2] - k0)}};
            band.blocks_j = ceil_div(band.box.extent[1], factor[1]);
            band.blocks_k = ceil_div(band.box.extent[2], factor[2]);
            band.first_block_j = j0 / factor[1];
            band.first_block_k = k0 / factor[2];
            visit(band);
            done += static_cast<double>(band.box.num_voxels());
            if (progress && !progress(done / total)) return false;
        }
    }
    return true;
}

std::size_t max_band_voxels(const ImageGeometry& full, const std::array<std::int64_t, 3>& factor) {
    return static_cast<std::size_t>(full.size[0] * band_depth(factor[1], full.size[1]) * band_depth(factor[2], full.size[2]));
}

// Writes the band's per-block results (computed by `value_of(block index within the band)`) into the
// overview's [k, j, i] buffer.
template <typename T, typename ValueOf>
void store_blocks(const Band& band, const ImageGeometry& overview, T* out, ValueOf value_of) {
    const std::int64_t width = overview.size[0];
    for (std::int64_t bk = 0; bk < band.blocks_k; ++bk) {
        for (std::int64_t bj = 0; bj < band.blocks_j; ++bj) {
            const std::int64_t source = (bk * band.blocks_j + bj) * width;
            T* target = out + ((band.first_block_k + bk) * overview.size[1] + band.first_block_j + bj) * width;
            for (std::int64_t bi = 0; bi < width; ++bi) target[bi] = value_of(static_cast<std::size_t>(source + bi));
        }
    }
}

}  // namespace

std::optional<VolumeOverview> read_overview(const VolumeRegionReader& reader, std::int64_t max_overview_voxels,
                                            const std::function<bool(double)>& progress) {
    const ImageGeometry& full = reader.geometry();
    VolumeOverview overview;
    overview.full_geometry = full;
    overview.factor = overview_factor(full, max_overview_voxels);
    const auto& factor = overview.factor;
    const ImageGeometry geometry = overview_geometry(full, factor);
    overview.volume = make_volume(geometry);
    overview.volume.source_path = reader.source_path();
    overview.volume.source_scalar_type = reader.source_scalar_type();
    float* out = overview.volume.voxels.data<float>();  // [k, j, i] of the overview

    const std::int64_t width = full.size[0];
    const std::int64_t overview_width = geometry.size[0];
    std::vector<float> values(max_band_voxels(full, factor));  // [k, j, i] of one band
    std::vector<double> sums;
    std::vector<std::int64_t> counts;
    double lowest = std::numeric_limits<double>::infinity();
    double highest = -std::numeric_limits<double>::infinity();
    const bool finished = for_each_band(
        full, factor,
        [&](const Band& band) {
            reader.read(band.box, values.data());
            const auto num_blocks = static_cast<std::size_t>(band.blocks_k * band.blocks_j * overview_width);
            sums.assign(num_blocks, 0.0);
            counts.assign(num_blocks, 0);
            for (std::int64_t k = 0; k < band.box.extent[2]; ++k) {
                for (std::int64_t j = 0; j < band.box.extent[1]; ++j) {
                    const float* row = values.data() + (k * band.box.extent[1] + j) * width;
                    const std::int64_t block_row = band.block_of_row(j, k, factor, overview_width);
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
            // A block of non-finite voxels only is shown as 0.
            store_blocks(band, geometry, out, [&](std::size_t block) {
                return counts[block] > 0 ? static_cast<float>(sums[block] / static_cast<double>(counts[block])) : 0.0f;
            });
        },
        progress);
    if (!finished) return std::nullopt;
    overview.minimum = std::isfinite(lowest) ? lowest : 0.0;
    overview.maximum = std::isfinite(highest) ? highest : 0.0;
    return overview;
}

std::optional<LabelOverview> read_label_overview(const VolumeRegionReader& reader, const std::array<std::int64_t, 3>& factor,
                                                 const std::function<bool(double)>& progress) {
    const ImageGeometry& full = reader.geometry();
    LabelOverview overview;
    const ImageGeometry geometry = overview_geometry(full, factor);
    overview.labels = make_label_map(geometry);
    overview.labels.source_path = reader.source_path();
    std::int32_t* out = overview.labels.labels.data<std::int32_t>();

    const std::int64_t width = full.size[0];
    const std::int64_t overview_width = geometry.size[0];
    std::vector<std::int32_t> values(max_band_voxels(full, factor));
    // Per block of the band: the labels seen and how often (blocks hold few labels: a short list each).
    std::vector<std::vector<std::pair<std::int32_t, std::int64_t>>> seen;
    std::set<std::int32_t> present;
    const bool finished = for_each_band(
        full, factor,
        [&](const Band& band) {
            reader.read_labels(band.box, values.data());
            const auto num_blocks = static_cast<std::size_t>(band.blocks_k * band.blocks_j * overview_width);
            seen.resize(num_blocks);
            for (std::size_t block = 0; block < num_blocks; ++block) seen[block].clear();
            for (std::int64_t k = 0; k < band.box.extent[2]; ++k) {
                for (std::int64_t j = 0; j < band.box.extent[1]; ++j) {
                    const std::int32_t* row = values.data() + (k * band.box.extent[1] + j) * width;
                    const std::int64_t block_row = band.block_of_row(j, k, factor, overview_width);
                    for (std::int64_t i = 0; i < width; ++i) {
                        auto& counts = seen[static_cast<std::size_t>(block_row + i / factor[0])];
                        // Runs of one label are the rule: its entry is most often the last one used.
                        if (!counts.empty() && counts.back().first == row[i]) {
                            ++counts.back().second;
                            continue;
                        }
                        const auto found = std::find_if(counts.begin(), counts.end(), [&](const auto& entry) { return entry.first == row[i]; });
                        if (found != counts.end()) {
                            ++found->second;
                            std::iter_swap(found, counts.end() - 1);
                        } else {
                            counts.emplace_back(row[i], 1);
                            present.insert(row[i]);
                        }
                    }
                }
            }
            // The most frequent label of each block; a tie goes to the smaller label.
            store_blocks(band, geometry, out, [&](std::size_t block) {
                const auto& counts = seen[block];
                const auto most = std::min_element(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
                    return a.second != b.second ? a.second > b.second : a.first < b.first;
                });
                return most == counts.end() ? std::int32_t{0} : most->first;
            });
        },
        progress);
    if (!finished) return std::nullopt;
    overview.present_labels.assign(present.begin(), present.end());
    return overview;
}

namespace {

ImageGeometry box_geometry(const ImageGeometry& full, const VoxelBox& box) {
    ImageGeometry geometry = full;
    geometry.origin = full.world_of(static_cast<double>(box.begin[0]), static_cast<double>(box.begin[1]), static_cast<double>(box.begin[2]));
    geometry.size = box.extent;
    return geometry;
}

}  // namespace

Volume read_region_volume(const VolumeRegionReader& reader, const VoxelBox& box) {
    Volume volume = make_volume(box_geometry(reader.geometry(), box));
    reader.read(box, volume.voxels.data<float>());
    volume.source_path = reader.source_path();
    volume.source_scalar_type = reader.source_scalar_type();
    return volume;
}

LabelMap read_region_label_map(const VolumeRegionReader& reader, const VoxelBox& box) {
    LabelMap labels = make_label_map(box_geometry(reader.geometry(), box));
    reader.read_labels(box, labels.labels.data<std::int32_t>());
    labels.source_path = reader.source_path();
    return labels;
}

}  // namespace tessera
