// Matching anchors to ground truth: the IoU matrix, the argmax matcher of the TensorFlow Object Detection
// API (argmax_matcher.py, as the Cloud TPU RetinaNet configures it) and the one-hot matmul gather.
//
// iou_matrix gives [G, M] f32 between the (padded) ground truth and the anchors; padding rows (r ≥
// num_valid_rows) and empty boxes give 0, and padding rows take no part in matching.
//
// match_anchors gives, per anchor (column), the matched ground-truth row ≥ 0, k_unmatched (−1, a
// negative) or k_ignored (−2). With v the column's max IoU over valid rows and its argmax row r (ties:
// the lowest row, as tf.argmax):
//   v ≥ matched_threshold                      → r
//   unmatched_threshold ≤ v < matched_threshold → −2 if negatives_lower_than_unmatched, else −1
//   v < unmatched_threshold                     → −1 if negatives_lower_than_unmatched, else −2
//   force_match_for_each_row: every valid row's argmax column (ties: the lowest column) is matched to that
//   row whatever the thresholds, even at IoU 0 (a box overlapping nothing forces anchor 0, as in TF).
//   When several rows force one column, the lowest row wins: TF takes tf.argmax over rows of the one-hot
//   indicator [G, M], i.e. the first row with a 1 — even over a row with a higher IoU there.
// Thresholds compare in f32 (as TF and torchvision compare an f32 tensor with a Python float).
//
//   Tensor iou = iou_matrix(gt_boxes, anchors.boxes, num_valid);          // [G, M]
//   std::vector<std::int32_t> matches = match_anchors(iou, num_valid, MatcherOptions{});
//
// Tiles: when a core holds only its tile's anchors, force_match needs each row's best anchor over ALL
// anchors. Each core computes a RowBestPartial on its columns (with their global anchor indices), the
// partials are all-reduced with combine (max IoU, ties → lowest global index, the global argmax), and
// each core matches its columns against the combined partial. Any split gives the whole-set result.
//
//   RowBestPartial mine = row_best_partial(tile_iou, tile_indices, num_valid);
//   RowBestPartial all = combine(mine, other_cores);                       // the all-reduce
//   auto tile_matches = match_anchor_subset(tile_iou, tile_indices, all, num_valid, options);
#pragma once

#include "detection/box.hpp"
#include "tensor/tensor.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace tessera::detection {

inline constexpr std::int32_t k_unmatched = -1;  // a negative anchor
inline constexpr std::int32_t k_ignored = -2;    // neither positive nor negative

struct MatcherOptions {
    float matched_threshold = 0.5f;
    float unmatched_threshold = 0.5f;  // ≤ matched_threshold; 0.5 in the TPU RetinaNet, 0.4 common elsewhere
    bool negatives_lower_than_unmatched = true;
    bool force_match_for_each_row = true;
};
// Throws unless unmatched ≤ matched (equal only with negatives_lower_than_unmatched, as TF).
void validate(const MatcherOptions& options);

// [G, M] f32; rows ≥ num_valid_rows are 0. num_valid_rows < 0 means all rows are valid.
Tensor iou_matrix(std::span<const Box> ground_truth, std::span<const Box> anchors, std::int64_t num_valid_rows = -1);

// Per ground-truth row: the best IoU seen and its global anchor index (−1 before any anchor).
struct RowBestPartial {
    std::vector<float> best_iou;            // [G]
    std::vector<std::int64_t> best_anchor;  // [G] global anchor index
};
// iou: [G, M_sub] over anchors with global indices global_anchor_index [M_sub].
RowBestPartial row_best_partial(const Tensor& iou, std::span<const std::int64_t> global_anchor_index);
RowBestPartial combine(const RowBestPartial& a, const RowBestPartial& b);

// [M] matches of all anchors (iou [G, M]).
std::vector<std::int32_t> match_anchors(const Tensor& iou, std::int64_t num_valid_rows, const MatcherOptions& options);
// [M_sub] matches of a subset of anchors, given every row's best over all anchors (from combine).
std::vector<std::int32_t> match_anchor_subset(const Tensor& iou, std::span<const std::int64_t> global_anchor_index,
                                              const RowBestPartial& all_anchors, std::int64_t num_valid_rows,
                                              const MatcherOptions& options);

// The same, from the boxes, without holding the [G, M_sub] matrix: the IoU is computed a block of
// anchors at a time ([G, 4096] f32, 4.7 MiB at G = 300), so a 2560² image's 1.2 M anchors never make a
// 1.4 GB matrix. Results equal the matrix versions' on iou_matrix(ground_truth, anchors, num_valid_rows).
RowBestPartial row_best_partial(std::span<const Box> ground_truth, std::int64_t num_valid_rows,
                                std::span<const Box> anchors, std::span<const std::int64_t> global_anchor_index);
std::vector<std::int32_t> match_anchor_subset(std::span<const Box> ground_truth, std::int64_t num_valid_rows,
                                              std::span<const Box> anchors,
                                              std::span<const std::int64_t> global_anchor_index,
                                              const RowBestPartial& all_anchors, const MatcherOptions& options);
std::vector<std::int32_t> match_anchors(std::span<const Box> ground_truth, std::int64_t num_valid_rows,
                                        std::span<const Box> anchors, const MatcherOptions& options);

// The TPU's gather without data-dependent indexing: one_hot(matches, G) [M, G] × rows [G, C] → [M, C] f32,
// a matrix product (Eigen, in blocks of anchors). Unmatched and ignored anchors give zero rows.
Tensor gather_by_one_hot(std::span<const std::int32_t> matches, const Tensor& rows);

}  // namespace tessera::detection
