#include "detection/anchor_labeler.hpp"

#include <cmath>

namespace tessera::detection {

namespace {

// Checks shapes, the valid count, and that valid rows are finite non-empty boxes of a known class.
void check_ground_truth(const PaddedGroundTruth& gt, std::int64_t num_classes) {
    TESSERA_CHECK(num_classes >= 1, "label_anchors: expected num_classes ≥ 1, got " << num_classes);
    TESSERA_CHECK(gt.boxes.is_defined() && gt.boxes.rank() == 2 && gt.boxes.dim(1) == 4 &&
                      gt.boxes.dtype() == DType::F32 && gt.boxes.is_contiguous(),
                  "label_anchors: expected ground-truth boxes as contiguous [G, 4] f32, got "
                      << shape_to_string(gt.boxes.shape()));
    const std::int64_t rows = gt.boxes.dim(0);
    TESSERA_CHECK(gt.classes.is_defined() && gt.classes.rank() == 1 && gt.classes.dim(0) == rows &&
                      gt.classes.dtype() == DType::I32 && gt.classes.is_contiguous(),
                  "label_anchors: expected ground-truth classes as contiguous ["
                      << rows << "] i32, got " << shape_to_string(gt.classes.shape()));
    TESSERA_CHECK(gt.num_valid >= 0 && gt.num_valid <= rows,
                  "label_anchors: expected 0 ≤ num_valid ≤ " << rows << " (G), got " << gt.num_valid);
    for (std::int64_t row = 0; row < gt.num_valid; ++row) {
        const float* c = gt.boxes.data<float>() + 4 * row;
        const Box box{c[0], c[1], c[2], c[3]};
        const bool finite = std::isfinite(c[0]) && std::isfinite(c[1]) && std::isfinite(c[2]) && std::isfinite(c[3]);
        TESSERA_CHECK(finite && !box.empty(), "label_anchors: expected ground-truth row "
                                                  << row << " to be a finite box of positive size, got [" << c[0]
                                                  << ", " << c[1] << ", " << c[2] << ", " << c[3]
                                                  << "] (drop empty boxes, or count them as padding)");
        const std::int32_t class_id = gt.classes.data<std::int32_t>()[row];
        TESSERA_CHECK(class_id >= 0 && class_id < num_classes, "label_anchors: expected ground-truth classes in [0, "
                                                                   << num_classes << "), got " << class_id << " at row "
                                                                   << row);
    }
}

std::vector<Box> boxes_of_rows(const PaddedGroundTruth& gt) {
    std::vector<Box> boxes(static_cast<std::size_t>(gt.boxes.dim(0)));
    const float* c = gt.boxes.data<float>();
    for (Box& box : boxes) {
        box = {c[0], c[1], c[2], c[3]};
        c += 4;
    }
    return boxes;
}

// [G, 5] f32: corners then the class id (exact in f32 below 2^24), the rows the one-hot matmul gathers.
Tensor gatherable_rows(const PaddedGroundTruth& gt) {
    const std::int64_t rows = gt.boxes.dim(0);
    Tensor table = Tensor::empty({rows, 5}, DType::F32);
    for (std::int64_t row = 0; row < rows; ++row) {
        float* out = table.data<float>() + 5 * row;
        for (int c = 0; c < 4; ++c) out[c] = gt.boxes.data<float>()[4 * row + c];
        out[4] = static_cast<float>(gt.classes.data<std::int32_t>()[row]);
    }
    return table;
}

}  // namespace

std::vector<Box> ground_truth_boxes(const PaddedGroundTruth& ground_truth) { return boxes_of_rows(ground_truth); }

PaddedGroundTruth pad_ground_truth(std::span<const LabeledBox> objects, std::int64_t max_number_of_boxes) {
    const auto count = static_cast<std::int64_t>(objects.size());
    TESSERA_CHECK(count <= max_number_of_boxes, "pad_ground_truth: expected at most max_number_of_boxes = "
                                                    << max_number_of_boxes << " objects, got " << count
                                                    << "; raise max_number_of_boxes");
    PaddedGroundTruth gt;
    gt.boxes = Tensor::zeros({max_number_of_boxes, 4}, DType::F32);
    gt.classes = Tensor::zeros({max_number_of_boxes}, DType::I32);
    gt.num_valid = count;
    for (std::int64_t row = 0; row < count; ++row) {
        const LabeledBox& object = objects[static_cast<std::size_t>(row)];
        float* out = gt.boxes.data<float>() + 4 * row;
        out[0] = object.box.x_min;
        out[1] = object.box.y_min;
        out[2] = object.box.x_max;
        out[3] = object.box.y_max;
        gt.classes.data<std::int32_t>()[row] = object.class_id;
    }
    return gt;
}

AnchorTargets targets_from_matches(std::vector<std::int32_t> matches, const PaddedGroundTruth& ground_truth,
                                   std::span<const Box> anchor_boxes, const LabelerOptions& options) {
    check_ground_truth(ground_truth, options.num_classes);
    const auto num_anchors = static_cast<std::int64_t>(anchor_boxes.size());
    TESSERA_CHECK(
        static_cast<std::int64_t>(matches.size()) == num_anchors,
        "targets_from_matches: expected one match per anchor (" << num_anchors << "), got " << matches.size());
    const Tensor gathered = gather_by_one_hot(matches, gatherable_rows(ground_truth));  // [M, 5]
    AnchorTargets targets;
    targets.class_targets = Tensor::zeros({num_anchors, options.num_classes}, DType::F32);
    targets.class_weights = Tensor::full<float>({num_anchors}, 1.0f);
    targets.box_targets = Tensor::zeros({num_anchors, 4}, DType::F32);
    targets.box_weights = Tensor::zeros({num_anchors}, DType::F32);
    for (std::int64_t i = 0; i < num_anchors; ++i) {
        const std::int32_t match = matches[static_cast<std::size_t>(i)];
        TESSERA_CHECK(match < ground_truth.num_valid,
                      "targets_from_matches: expected matches below num_valid = " << ground_truth.num_valid << ", got "
                                                                                  << match << " at anchor " << i);
        if (match == k_ignored) targets.class_weights.data<float>()[i] = 0.0f;
        if (match < 0) continue;
        const float* row = gathered.data<float>() + 5 * i;
        const auto class_id = static_cast<std::int64_t>(row[4]);
        targets.class_targets.data<float>()[i * options.num_classes + class_id] = 1.0f;
        const BoxCode code =
            encode_box({row[0], row[1], row[2], row[3]}, anchor_boxes[static_cast<std::size_t>(i)], options.box_coder);
        float* box_out = targets.box_targets.data<float>() + 4 * i;
        box_out[0] = code.dx;
        box_out[1] = code.dy;
        box_out[2] = code.dw;
        box_out[3] = code.dh;
        targets.box_weights.data<float>()[i] = 1.0f;
        ++targets.num_positive;
    }
    targets.matches = std::move(matches);
    return targets;
}

AnchorTargets label_anchors(const PaddedGroundTruth& ground_truth, const AnchorSet& anchors,
                            const LabelerOptions& options) {
    check_ground_truth(ground_truth, options.num_classes);
    // Matched a block of anchors at a time: the whole [G, M] IoU matrix would be 1.4 GB at 2560² (G = 300).
    std::vector<std::int32_t> matches =
        match_anchors(ground_truth_boxes(ground_truth), ground_truth.num_valid, anchors.boxes, options.matcher);
    return targets_from_matches(std::move(matches), ground_truth, anchors.boxes, options);
}

namespace {

// Writes one image's flat per-anchor values (C = K or 4 per anchor, or C = 1 for a weight per anchor) of
// one level's cells into [N, A·C, rows, columns] at image n. `first` is the position
// of the cells' first anchor in `flat`.
void scatter_level(const LevelAnchors& level, const CellRange& cells, std::int64_t first, std::int64_t n,
                   const Tensor& flat, std::int64_t channels_per_anchor, Tensor& out) {
    const std::int64_t anchors_per_cell = level.anchors_per_cell();
    const std::int64_t rows = cells.row_end - cells.row_begin, columns = cells.column_end - cells.column_begin;
    const std::int64_t plane = rows * columns;
    float* image_out = out.data<float>() + n * anchors_per_cell * channels_per_anchor * plane;
    std::int64_t index = first;
    for (std::int64_t row = 0; row < rows; ++row) {
        for (std::int64_t column = 0; column < columns; ++column) {
            for (std::int64_t anchor = 0; anchor < anchors_per_cell; ++anchor, ++index) {
                for (std::int64_t c = 0; c < channels_per_anchor; ++c) {
                    image_out[(anchor * channels_per_anchor + c) * plane + row * columns + column] =
                        flat.data<float>()[index * channels_per_anchor + c];
                }
            }
        }
    }
}

std::vector<CellRange> whole_levels(const AnchorSet& anchors) {
    std::vector<CellRange> cells;
    for (const LevelAnchors& level : anchors.levels) cells.push_back({0, level.height, 0, level.width});
    return cells;
}

}  // namespace

HeadTargets to_head_layout(std::span<const AnchorTargets> images, const AnchorSet& anchors) {
    const std::vector<CellRange> cells = whole_levels(anchors);
    return to_head_layout(images, anchors, cells);
}

std::vector<std::int64_t> anchor_indices_of_cells(const AnchorSet& anchors, std::span<const CellRange> cells) {
    TESSERA_CHECK(cells.size() == anchors.levels.size(), "anchor_indices_of_cells: expected a cell range for each of the "
                                                             << anchors.levels.size() << " levels, got " << cells.size());
    std::vector<std::int64_t> indices;
    for (std::size_t l = 0; l < cells.size(); ++l) {
        const LevelAnchors& level = anchors.levels[l];
        const CellRange& range = cells[l];
        TESSERA_CHECK(0 <= range.row_begin && range.row_begin <= range.row_end && range.row_end <= level.height &&
                          0 <= range.column_begin && range.column_begin <= range.column_end && range.column_end <= level.width,
                      "anchor_indices_of_cells: level " << level.level << " has " << level.height << " × " << level.width
                                                        << " cells; got rows [" << range.row_begin << ", " << range.row_end
                                                        << ") and columns [" << range.column_begin << ", "
                                                        << range.column_end << ")");
        for (std::int64_t row = range.row_begin; row < range.row_end; ++row) {
            for (std::int64_t column = range.column_begin; column < range.column_end; ++column) {
                for (std::int64_t anchor = 0; anchor < level.anchors_per_cell(); ++anchor) {
                    indices.push_back(level.index_of(row, column, anchor));
                }
            }
        }
    }
    return indices;
}

HeadTargets to_head_layout(std::span<const AnchorTargets> images, const AnchorSet& anchors,
                           std::span<const CellRange> cells) {
    TESSERA_CHECK(!images.empty(), "to_head_layout: expected at least one image's targets, got none");
    TESSERA_CHECK(cells.size() == anchors.levels.size(), "to_head_layout: expected a cell range for each of the "
                                                             << anchors.levels.size() << " levels, got " << cells.size());
    std::int64_t count = 0;
    for (std::size_t l = 0; l < cells.size(); ++l) count += cells[l].num_cells() * anchors.levels[l].anchors_per_cell();
    const auto batch = static_cast<std::int64_t>(images.size());
    const std::int64_t num_classes = images.front().class_targets.dim(1);
    for (const AnchorTargets& image : images) {
        TESSERA_CHECK(image.class_targets.rank() == 2 && image.class_targets.dim(0) == count &&
                          image.class_targets.dim(1) == num_classes,
                      "to_head_layout: expected every image's targets over the "
                          << count << " anchors of the cells with " << num_classes << " classes, got "
                          << shape_to_string(image.class_targets.shape()));
    }
    HeadTargets head;
    std::int64_t first = 0;
    for (std::size_t l = 0; l < cells.size(); ++l) {
        const LevelAnchors& level = anchors.levels[l];
        const std::int64_t a = level.anchors_per_cell();
        const std::int64_t rows = cells[l].row_end - cells[l].row_begin, columns = cells[l].column_end - cells[l].column_begin;
        LevelTargets out;
        out.class_targets = Tensor::empty({batch, a * num_classes, rows, columns}, DType::F32);
        out.class_weights = Tensor::empty({batch, a, rows, columns}, DType::F32);
        out.box_targets = Tensor::empty({batch, a * 4, rows, columns}, DType::F32);
        out.box_weights = Tensor::empty({batch, a, rows, columns}, DType::F32);
        for (std::int64_t n = 0; n < batch; ++n) {
            const AnchorTargets& image = images[static_cast<std::size_t>(n)];
            scatter_level(level, cells[l], first, n, image.class_targets, num_classes, out.class_targets);
            scatter_level(level, cells[l], first, n, image.class_weights, 1, out.class_weights);
            scatter_level(level, cells[l], first, n, image.box_targets, 4, out.box_targets);
            scatter_level(level, cells[l], first, n, image.box_weights, 1, out.box_weights);
        }
        first += cells[l].num_cells() * a;
        head.levels.push_back(std::move(out));
    }
    for (const AnchorTargets& image : images) head.num_positive += image.num_positive;
    return head;
}

}  // namespace tessera::detection
