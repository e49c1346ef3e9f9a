#include "data/region_volume.hpp"

#include "data/transforms.hpp"

#include "core/memory_budget.hpp"
#include "core/units.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

namespace tessera::data::detail {

namespace {

constexpr std::int64_t max_block_voxels = std::int64_t{8} << 20;  // one scan block: 32 MiB of f32

std::string quoted(const std::string& text) {
    std::string out = "'";
    out += text;
    out += '\'';
    return out;
}

}  // namespace

RegionVolume::RegionVolume(std::string name, std::shared_ptr<const VolumeRegionReader> image,
                           std::shared_ptr<const VolumeRegionReader> labels, const DataConfig& config, LabelMapping mapping,
                           int spatial_rank, std::int64_t training_extent)
    : m_name(std::move(name)), m_image(std::move(image)), m_labels(std::move(labels)), m_config(config), m_mapping(std::move(mapping)),
      m_spatial_rank(spatial_rank), m_training_extent(training_extent) {
    TESSERA_ASSERT(spatial_rank == 2 || spatial_rank == 3, "spatial rank " << spatial_rank);
    TESSERA_ASSERT(same_grid(m_image->geometry(), m_labels->geometry()), "image and labels on different grids");
}

std::array<std::int64_t, 3> RegionVolume::training_extent() const {
    const auto& size = m_image->geometry().size;
    return m_spatial_rank == 3 ? std::array<std::int64_t, 3>{m_training_extent, size[1], size[0]}
                               : std::array<std::int64_t, 3>{1, m_training_extent, size[0]};
}

void RegionVolume::scan() const { (void)scanned(); }

const RegionVolume::Scan& RegionVolume::scanned() const {
    std::call_once(m_scan_once, [this] {
        auto scan = std::make_unique<Scan>();
        const auto& size = m_image->geometry().size;  // i, j, k
        const std::array<std::int64_t, 3> training = training_extent();
        scan->cumulative.assign(static_cast<std::size_t>(training[0] * training[1]), 0);
        scan->segments_per_row = (size[0] + segment_width - 1) / segment_width;
        scan->segments.assign(scan->cumulative.size() * static_cast<std::size_t>(scan->segments_per_row), 0);

        // Blocks of whole rows (all i): up to 64 slices deep, as many rows as fit the block budget
        // (a multiple of 64 when it can be: HDF5 chunks of 64³ are then read once each).
        const std::int64_t depth = std::min<std::int64_t>(size[2], 64);
        std::int64_t band = std::max<std::int64_t>(1, max_block_voxels / (depth * size[0]));
        if (band >= 64) band -= band % 64;
        band = std::min(band, size[1]);
        std::vector<float> image(static_cast<std::size_t>(depth * band * size[0]));
        std::vector<std::int32_t> labels(image.size());
        RunningMoments moments;
        std::int64_t num_non_finite = 0;
        std::array<std::int64_t, 3> first_non_finite{-1, -1, -1};
        std::int32_t last_label = 0;
        std::int32_t last_class = m_mapping(0);
        m_mapping.check(0, quoted(m_labels->source_path()));
        for (std::int64_t k0 = 0; k0 < size[2]; k0 += depth) {
            for (std::int64_t j0 = 0; j0 < size[1]; j0 += band) {
                const VoxelBox box{{0, j0, k0}, {size[0], std::min(band, size[1] - j0), std::min(depth, size[2] - k0)}};
                const std::int64_t count = box.num_voxels();
                m_image->read(box, image.data());
                m_labels->read_labels(box, labels.data());
                for (std::int64_t v = 0; v < count; ++v) {
                    if (std::isfinite(image[static_cast<std::size_t>(v)])) [[likely]] continue;
                    if (num_non_finite++ == 0) {
                        first_non_finite = {v % size[0], j0 + (v / size[0]) % box.extent[1], k0 + v / (size[0] * box.extent[1])};
                    }
                    image[static_cast<std::size_t>(v)] = 0.0f;  // refused below unless the policy says zero
                }
                moments.add_block(image.data(), count);

                // Labels: each value checked once per run of equal values (as LabelMapping::apply).
                for (std::int64_t row = 0; row < box.extent[1] * box.extent[2]; ++row) {
                    const std::int64_t j = j0 + row % box.extent[1], k = k0 + row / box.extent[1];
                    const bool in_training = m_spatial_rank == 3 ? k < m_training_extent : j < m_training_extent;
                    std::uint64_t foreground = 0;
                    const std::int32_t* values = labels.data() + row * size[0];
                    const std::int64_t training_row = m_spatial_rank == 3 ? k * size[1] + j : j;
                    std::uint8_t* segment = in_training ? scan->segments.data() + training_row * scan->segments_per_row : nullptr;
                    for (std::int64_t i = 0; i < size[0]; ++i) {
                        if (values[i] != last_label) {
                            last_label = values[i];
                            m_mapping.check(last_label, quoted(m_labels->source_path()));
                            last_class = m_mapping(last_label);
                        }
                        foreground += last_class != 0;
                        if (segment != nullptr && last_class != 0) ++segment[i / segment_width];
                    }
                    if (in_training) scan->cumulative[static_cast<std::size_t>(training_row)] = foreground;
                }
            }
        }
        if (num_non_finite > 0) {
            TESSERA_CHECK(m_config.non_finite == NonFinitePolicy::Zero,
                          quoted(m_image->source_path()) << " holds " << num_non_finite << " NaN or infinite voxel"
                                                         << (num_non_finite == 1 ? "" : "s") << " (the first at i, j, k = " << first_non_finite[0]
                                                         << ", " << first_non_finite[1] << ", " << first_non_finite[2]
                                                         << "): training on them makes every loss NaN. Clean the image, or set "
                                                            "data.non_finite to \"zero\" to read them as 0.");
        }
        for (std::size_t row = 1; row < scan->cumulative.size(); ++row) scan->cumulative[row] += scan->cumulative[row - 1];
        scan->mean = moments.mean();
        scan->scale = moments.scale();
        m_scan = std::move(scan);
    });
    return *m_scan;
}

std::int64_t RegionVolume::num_foreground() const {
    const Scan& scan = scanned();
    return scan.cumulative.empty() ? 0 : static_cast<std::int64_t>(scan.cumulative.back());
}

std::array<std::int64_t, 3> RegionVolume::foreground_voxel(std::int64_t rank) const {
    const Scan& scan = scanned();
    TESSERA_ASSERT(rank >= 0 && rank < num_foreground(), "foreground rank " << rank << " of " << num_foreground());
    const auto row_at = std::upper_bound(scan.cumulative.begin(), scan.cumulative.end(), static_cast<std::uint64_t>(rank));
    const auto row = static_cast<std::int64_t>(row_at - scan.cumulative.begin());
    std::int64_t within = rank - (row > 0 ? static_cast<std::int64_t>(scan.cumulative[static_cast<std::size_t>(row - 1)]) : 0);
    const std::array<std::int64_t, 3> extent = training_extent();
    const std::int64_t d = row / extent[1], h = row % extent[1];
    // The segment that holds it, then only that segment's labels.
    const std::uint8_t* segments = scan.segments.data() + row * scan.segments_per_row;
    std::int64_t segment = 0;
    while (segment + 1 < scan.segments_per_row && within >= segments[segment]) within -= segments[segment++];
    const std::int64_t first = segment * segment_width, width = std::min(segment_width, extent[2] - first);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(width));
    m_labels->read_labels(VoxelBox{{first, h, d}, {width, 1, 1}}, labels.data());
    for (std::int64_t w = 0; w < width; ++w) {
        if (m_mapping(labels[static_cast<std::size_t>(w)]) != 0 && within-- == 0) return {d, h, first + w};
    }
    TESSERA_REJECT(quoted(m_labels->source_path()) << " changed while it was read: row " << h << " of slice " << d
                                                   << " no longer holds the foreground it held when the run opened it. "
                                                      "Do not write a volume while a run trains on it.");
}

void RegionVolume::read_normalised(const VoxelBox& box, float* image, std::int32_t* labels) const {
    const Scan& scan = scanned();
    const std::int64_t count = box.num_voxels();
    m_image->read(box, image);
    m_labels->read_labels(box, labels);
    for (std::int64_t v = 0; v < count; ++v) {
        // Non-finite voxels: the scan refused them unless the policy is zero.
        const float value = std::isfinite(image[v]) ? image[v] : 0.0f;
        image[v] = normalized_value(value, m_config.normalization, scan.mean, scan.scale, m_config.window_low, m_config.window_high);
        labels[v] = m_mapping(labels[v]);
    }
}

void RegionVolume::read_patch(const std::array<std::int64_t, 3>& begin, const std::array<std::int64_t, 3>& extent, float* image,
                              std::int32_t* labels) const {
    const std::array<std::int64_t, 3> training = training_extent();
    const std::int64_t count = extent[0] * extent[1] * extent[2];
    std::array<std::int64_t, 3> first{}, last{};  // [D, H, W], the part inside the training part
    bool empty = false;
    for (std::size_t axis = 0; axis < 3; ++axis) {
        first[axis] = std::max<std::int64_t>(begin[axis], 0);
        last[axis] = std::min(begin[axis] + extent[axis], training[axis]);
        empty = empty || last[axis] <= first[axis];
    }
    const bool inside = !empty && first == begin && last[0] - first[0] == extent[0] && last[1] - first[1] == extent[1] &&
                        last[2] - first[2] == extent[2];
    if (inside) {
        read_normalised(VoxelBox{{begin[2], begin[1], begin[0]}, {extent[2], extent[1], extent[0]}}, image, labels);
        return;
    }
    std::fill(image, image + count, 0.0f);
    std::fill(labels, labels + count, 0);
    if (empty) return;
    const VoxelBox box{{first[2], first[1], first[0]}, {last[2] - first[2], last[1] - first[1], last[0] - first[0]}};
    std::vector<float> part_image(static_cast<std::size_t>(box.num_voxels()));
    std::vector<std::int32_t> part_labels(part_image.size());
    read_normalised(box, part_image.data(), part_labels.data());
    for (std::int64_t d = 0; d < box.extent[2]; ++d) {
        for (std::int64_t h = 0; h < box.extent[1]; ++h) {
            const std::int64_t from = (d * box.extent[1] + h) * box.extent[0];
            const std::int64_t to = ((first[0] - begin[0] + d) * extent[1] + (first[1] - begin[1] + h)) * extent[2] + (first[2] - begin[2]);
            std::memcpy(image + to, part_image.data() + from, static_cast<std::size_t>(box.extent[0]) * sizeof(float));
            std::memcpy(labels + to, part_labels.data() + from, static_cast<std::size_t>(box.extent[0]) * sizeof(std::int32_t));
        }
    }
}

LoadedVolume RegionVolume::held_out(std::string name) const {
    const ImageGeometry& grid = m_image->geometry();
    VoxelBox box{{0, 0, 0}, grid.size};
    const int axis = m_spatial_rank == 3 ? 2 : 1;  // geometry axis k (3D) or j (2D)
    box.begin[axis] = m_training_extent;
    box.extent[axis] = grid.size[axis] - m_training_extent;
    const std::int64_t bytes = box.num_voxels() * 8;
    TESSERA_CHECK(static_cast<std::uint64_t>(bytes) <= max_volume_bytes(),
                  "the held-out part of " << quoted(m_image->source_path()) << " (" << box.extent[0] << "×" << box.extent[1] << "×"
                                          << box.extent[2] << " voxels) would take " << format_gib(bytes)
                                          << " to evaluate, more than the " << format_gib(static_cast<std::int64_t>(max_volume_bytes()))
                                          << " a volume may use here: lower data.holdout_fraction (0 holds out nothing), or raise "
                                             "TESSERA_MAX_VOLUME_BYTES on a machine with that much memory");
    LoadedVolume part;
    part.name = std::move(name);
    part.image = Tensor::empty({1, box.extent[2], box.extent[1], box.extent[0]}, DType::F32);
    part.labels = Tensor::empty({box.extent[2], box.extent[1], box.extent[0]}, DType::I32);
    read_normalised(box, part.image.data<float>(), part.labels.data<std::int32_t>());
    part.geometry = grid;
    part.geometry.size = box.extent;
    part.geometry.origin = grid.world_of(static_cast<double>(box.begin[0]), static_cast<double>(box.begin[1]), static_cast<double>(box.begin[2]));
    return part;
}

std::string RegionVolume::describe() const {
    const std::int64_t voxels = m_image->geometry().num_voxels();
    std::ostringstream text;
    text.precision(3);
    text << static_cast<double>(voxels) / 1e9 << " G voxels read by region";
    if (m_scan) {
        const std::array<std::int64_t, 3> training = training_extent();
        const double training_voxels = static_cast<double>(training[0] * training[1] * training[2]);
        text << " (mean " << m_scan->mean << ", sd " << (m_scan->scale > 0 ? 1.0 / m_scan->scale : 0.0) << "; "
             << 100.0 * static_cast<double>(num_foreground()) / training_voxels << " % foreground in training)";
    }
    return text.str();
}

}  // namespace tessera::data::detail
