#include "detection/anchors.hpp"

#include <algorithm>
#include <cmath>

namespace tessera::detection {

namespace {

constexpr const char* k_name = "make_anchors";

void check_options(std::int64_t image_height, std::int64_t image_width, const AnchorOptions& options) {
    TESSERA_CHECK(image_height > 0 && image_width > 0,
                  k_name << ": expected a positive input size, got " << image_height << "×" << image_width);
    TESSERA_CHECK(options.min_level >= 0 && options.min_level <= options.max_level && options.max_level <= 30,
                  k_name << ": expected 0 ≤ min_level ≤ max_level ≤ 30, got levels " << options.min_level << ".."
                         << options.max_level);
    TESSERA_CHECK(!options.aspect_ratios.empty(), k_name << ": expected at least one aspect ratio, got none");
    for (double ratio : options.aspect_ratios) {
        TESSERA_CHECK(std::isfinite(ratio) && ratio > 0,
                      k_name << ": expected positive aspect ratios (width / height), got " << ratio);
    }
    if (!options.sizes_per_level.empty()) {
        const std::size_t num_levels = static_cast<std::size_t>(options.max_level - options.min_level + 1);
        TESSERA_CHECK(options.sizes_per_level.size() == num_levels, k_name << ": expected one size list per level ("
                                                                           << num_levels << "), got "
                                                                           << options.sizes_per_level.size());
        for (const std::vector<double>& sizes : options.sizes_per_level) {
            TESSERA_CHECK(!sizes.empty() && sizes.size() == options.sizes_per_level.front().size(),
                          k_name << ": expected size lists of one common, non-zero length (the heads share A), got "
                                 << sizes.size() << " and " << options.sizes_per_level.front().size());
            for (double size : sizes) {
                TESSERA_CHECK(std::isfinite(size) && size > 0, k_name << ": expected positive sizes, got " << size);
            }
        }
        return;
    }
    TESSERA_CHECK(options.num_scales >= 1, k_name << ": expected num_scales ≥ 1, got " << options.num_scales);
    TESSERA_CHECK(std::isfinite(options.anchor_scale) && options.anchor_scale > 0,
                  k_name << ": expected a positive anchor_scale, got " << options.anchor_scale);
}

// The A anchor shapes of one level, in anchor-index order (size-major, ratio-minor).
void fill_shapes(LevelAnchors& level, const AnchorOptions& options, int level_offset) {
    std::vector<double> sizes;
    if (!options.sizes_per_level.empty()) {
        sizes = options.sizes_per_level[static_cast<std::size_t>(level_offset)];
    } else {
        for (int octave = 0; octave < options.num_scales; ++octave) {
            const double octave_scale = std::pow(2.0, static_cast<double>(octave) / options.num_scales);
            sizes.push_back(options.anchor_scale * static_cast<double>(level.stride) * octave_scale);
        }
    }
    for (double size : sizes) {
        for (double ratio : options.aspect_ratios) {
            level.anchor_widths.push_back(size * std::sqrt(ratio));
            level.anchor_heights.push_back(size / std::sqrt(ratio));
        }
    }
}

std::int64_t ceil_div(std::int64_t numerator, std::int64_t denominator) {  // denominator > 0, any sign above
    const std::int64_t quotient = numerator / denominator;
    return quotient + ((numerator % denominator != 0) && (numerator > 0) ? 1 : 0);
}

// First cell index whose centre (index + 0.5)·stride is ≥ coordinate, clamped to [0, cells].
std::int64_t first_cell_at_or_after(std::int64_t coordinate, std::int64_t stride, std::int64_t cells) {
    // (i + 0.5)·s ≥ c  ⇔  2·i·s ≥ 2c − s  ⇔  i ≥ ceil((2c − s) / 2s)
    return std::clamp<std::int64_t>(ceil_div(2 * coordinate - stride, 2 * stride), 0, cells);
}

}  // namespace

Box LevelAnchors::box(std::int64_t row, std::int64_t column, std::int64_t anchor) const {
    const double centre_x = (static_cast<double>(column) + 0.5) * static_cast<double>(stride);
    const double centre_y = (static_cast<double>(row) + 0.5) * static_cast<double>(stride);
    const double half_width = anchor_widths[static_cast<std::size_t>(anchor)] / 2;
    const double half_height = anchor_heights[static_cast<std::size_t>(anchor)] / 2;
    return {static_cast<float>(centre_x - half_width), static_cast<float>(centre_y - half_height),
            static_cast<float>(centre_x + half_width), static_cast<float>(centre_y + half_height)};
}

Tensor AnchorSet::box_tensor() const {
    Tensor tensor = Tensor::empty({count(), 4}, DType::F32);
    float* out = tensor.data<float>();
    for (const Box& box : boxes) {
        *out++ = box.x_min;
        *out++ = box.y_min;
        *out++ = box.x_max;
        *out++ = box.y_max;
    }
    return tensor;
}

AnchorSet make_anchors(std::int64_t image_height, std::int64_t image_width, const AnchorOptions& options) {
    check_options(image_height, image_width, options);
    AnchorSet set;
    set.image_height = image_height;
    set.image_width = image_width;
    for (int level_number = options.min_level; level_number <= options.max_level; ++level_number) {
        LevelAnchors level;
        level.level = level_number;
        level.stride = std::int64_t{1} << level_number;
        level.height = ceil_div(image_height, level.stride);
        level.width = ceil_div(image_width, level.stride);
        level.first_index = set.count();
        fill_shapes(level, options, level_number - options.min_level);
        for (std::int64_t row = 0; row < level.height; ++row) {
            for (std::int64_t column = 0; column < level.width; ++column) {
                for (std::int64_t anchor = 0; anchor < level.anchors_per_cell(); ++anchor) {
                    set.boxes.push_back(level.box(row, column, anchor));
                }
            }
        }
        set.levels.push_back(std::move(level));
    }
    return set;
}

CellRange cells_in_region(const LevelAnchors& level, const PixelRegion& region) {
    TESSERA_CHECK(region.y_begin <= region.y_end && region.x_begin <= region.x_end,
                  "cells_in_region: expected begin ≤ end, got rows [" << region.y_begin << ", " << region.y_end
                                                                      << ") and columns [" << region.x_begin << ", "
                                                                      << region.x_end << ")");
    CellRange range;
    range.row_begin = first_cell_at_or_after(region.y_begin, level.stride, level.height);
    range.row_end = first_cell_at_or_after(region.y_end, level.stride, level.height);
    range.column_begin = first_cell_at_or_after(region.x_begin, level.stride, level.width);
    range.column_end = first_cell_at_or_after(region.x_end, level.stride, level.width);
    return range;
}

std::vector<std::int64_t> anchor_indices_in_region(const AnchorSet& anchors, const PixelRegion& region) {
    std::vector<std::int64_t> indices;
    for (const LevelAnchors& level : anchors.levels) {
        const CellRange cells = cells_in_region(level, region);
        for (std::int64_t row = cells.row_begin; row < cells.row_end; ++row) {
            for (std::int64_t column = cells.column_begin; column < cells.column_end; ++column) {
                for (std::int64_t anchor = 0; anchor < level.anchors_per_cell(); ++anchor) {
                    indices.push_back(level.index_of(row, column, anchor));
                }
            }
        }
    }
    return indices;
}

}  // namespace tessera::detection
