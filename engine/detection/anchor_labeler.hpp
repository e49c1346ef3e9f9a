// RetinaNet training targets for one image: match anchors to the padded ground truth, gather the matched
// boxes and classes by one-hot matmul, encode the boxes, and lay the targets out as the heads' outputs so
// that loss::sigmoid_focal_loss and loss::smooth_l1_loss consume them directly.
//
// Per anchor (global order, see anchors.hpp), with m its match (matcher.hpp):
//   class target  one-hot of the matched class (all zeros for negatives and ignored anchors)   [M, K]
//   class weight  0 for ignored anchors (m = −2), 1 otherwise                                   [M]
//   box target    encode(matched box, anchor) for positives (m ≥ 0), zeros otherwise            [M, 4]
//   box weight    1 for positives, 0 otherwise                                                  [M]
//   num_positive  the number of anchors with m ≥ 0. (The TPU anchor labeler counts m ≠ −1, which also
//                 counts ignored anchors; with its equal thresholds there are none, so the two agree.)
// The flat layout fits the losses as logits [M, K] / boxes [M, 4] with weights [M] (their "shape without
// axis 1"). The heads' layout (to_head_layout) is per level [N, A·K, H_l, W_l] and [N, A·4, H_l, W_l]
// with channel a·K + k and a·4 + c; its weights are one per anchor, [N, A, H_l, W_l]. (The losses read
// [N, A·K, H, W] as [N·A, K, H, W], whose shape without axis 1 is the weights' [N·A, H, W]: a weight
// per anchor without repeating it K times, 0.4 GB less at 2560² on 8 cores with 90 classes.)
//
//   PaddedGroundTruth gt = pad_ground_truth(objects, /*max_number_of_boxes*/ 100);
//   AnchorTargets targets = label_anchors(gt, anchors, {.num_classes = 90});
//   HeadTargets batch = to_head_layout(std::vector{targets}, anchors);   // batch.levels[0].class_targets ...
//
// Tiles: match a tile's anchors with match_anchor_subset (matcher.hpp), then targets_from_matches on them.
#pragma once

#include "detection/anchors.hpp"
#include "detection/box_coder.hpp"
#include "detection/matcher.hpp"
#include "tensor/tensor.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace tessera::detection {

// Static-shape ground truth (the TPU's max_number_of_boxes): rows ≥ num_valid are padding.
struct PaddedGroundTruth {
    Tensor boxes;    // [G, 4] f32 corners, pixels; padding rows are zeros
    Tensor classes;  // [G] i32, 0-based; padding rows 0
    std::int64_t num_valid = 0;
};
// Throws when there are more objects than max_number_of_boxes.
PaddedGroundTruth pad_ground_truth(std::span<const LabeledBox> objects, std::int64_t max_number_of_boxes);
// The G rows as boxes, padding included (for iou_matrix with num_valid).
std::vector<Box> ground_truth_boxes(const PaddedGroundTruth& ground_truth);

struct LabelerOptions {
    std::int64_t num_classes = 90;  // K
    MatcherOptions matcher;
    BoxCoderWeights box_coder;
};

struct AnchorTargets {
    std::vector<std::int32_t> matches;  // [M] row ≥ 0, k_unmatched or k_ignored
    Tensor class_targets;               // [M, K] f32 one-hot
    Tensor class_weights;               // [M] f32
    Tensor box_targets;                 // [M, 4] f32 (dx, dy, dw, dh)
    Tensor box_weights;                 // [M] f32
    std::int64_t num_positive = 0;
};

AnchorTargets label_anchors(const PaddedGroundTruth& ground_truth, const AnchorSet& anchors,
                            const LabelerOptions& options);
// Targets of the anchors `anchor_boxes` [M_sub] given their matches [M_sub] (e.g. a tile's).
AnchorTargets targets_from_matches(std::vector<std::int32_t> matches, const PaddedGroundTruth& ground_truth,
                                   std::span<const Box> anchor_boxes, const LabelerOptions& options);

// One level of a batch in the heads' layout.
struct LevelTargets {
    Tensor class_targets;  // [N, A·K, H_l, W_l] f32
    Tensor class_weights;  // [N, A, H_l, W_l] f32, per anchor
    Tensor box_targets;    // [N, A·4, H_l, W_l] f32
    Tensor box_weights;    // [N, A, H_l, W_l] f32, per anchor
};
struct HeadTargets {
    std::vector<LevelTargets> levels;  // min_level .. max_level
    std::int64_t num_positive = 0;     // over the batch: the losses' normalizer
};
// images: the N images' targets over all of `anchors`.
HeadTargets to_head_layout(std::span<const AnchorTargets> images, const AnchorSet& anchors);

// A tile's part: cells[l] are the cells of level l it holds (a core's tile of that level's outputs).
// Its anchors, in global order (level, row, column, anchor), are anchor_indices_of_cells; images[n]
// holds the targets of exactly those anchors, and the levels come out [N, A·K, rows, columns].
std::vector<std::int64_t> anchor_indices_of_cells(const AnchorSet& anchors, std::span<const CellRange> cells);
HeadTargets to_head_layout(std::span<const AnchorTargets> images, const AnchorSet& anchors,
                           std::span<const CellRange> cells);

}  // namespace tessera::detection
