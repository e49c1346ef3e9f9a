// The anchor labeler on a tiny image worked out by hand (positives, an ignored anchor at exactly the
// unmatched threshold, codes, a padding row), the heads' per-level layout (channel a·K + k, a·4 + c) for a
// batch, that the losses accept the targets in both layouts with the same value, and that labelling a
// tile's anchors gives the whole image's targets of those anchors.
//
// Tolerances: box codes (f32 of a double computation) within 1e-6; loss values across layouts relative 1e-6
// (the same f32 terms summed in a different order).
#include "detection/anchor_labeler.hpp"
#include "loss/focal_loss.hpp"
#include "loss/smooth_l1_loss.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace tessera::detection {
namespace {

constexpr float k_code_tolerance = 1e-6f;

// 64×64 input, level 4 only (stride 16, 4 × 4 cells), one anchor per cell of size 2·16 = 32: the anchor of
// cell (i, j) is [16j − 8, 16i − 8, 16j + 24, 16i + 24], global index 4i + j.
AnchorSet tiny_anchors() {
    AnchorOptions options;
    options.min_level = 4;
    options.max_level = 4;
    options.num_scales = 1;
    options.aspect_ratios = {1.0};
    options.anchor_scale = 2.0;
    return make_anchors(64, 64, options);
}

// g0 = [0, 0, 24, 24] class 1, g1 = [24, 24, 56, 48] class 2, one padding row (G = 3).
PaddedGroundTruth tiny_ground_truth() {
    const std::vector<LabeledBox> objects = {{{0, 0, 24, 24}, 1}, {{24, 24, 56, 48}, 2}};
    return pad_ground_truth(objects, 3);
}

LabelerOptions tiny_options(float unmatched_threshold) {
    LabelerOptions options;
    options.num_classes = 3;
    options.matcher.matched_threshold = 0.5f;
    options.matcher.unmatched_threshold = unmatched_threshold;
    return options;
}

// IoUs worked out (anchor area 1024; g0 area 576, g1 area 768):
//   g0 with cell (0,0) [−8,−8,24,24]: 576 / 1024 = 0.5625 → positive; with (0,1), (1,0): 384 / 1216 = 0.316;
//      (1,1): 256 / 1344 = 0.190.
//   g1 with (2,2) [24,24,56,56]: 768 / 1024 = 0.75 → positive; (1,2) [24,8,56,40]: 32·16 = 512 / 1280 = 0.4
//      exactly → ignored at 0.5 / 0.4 (0.4 ≥ unmatched), negative at 0.5 / 0.5; (2,1), (2,3): 384 / 1408 = 0.273;
//      (1,1), (1,3), (3,2): 256 / 1536 = 0.167; (3,1), (3,3): 128 / 1664 = 0.077.
// Codes: anchor 0 (centre (8, 8), 32²) → g0 (centre (12, 12), 24²): dx = dy = 10·4/32 = 1.25,
//        dw = dh = 5·log(24/32) = −1.4384104.
//        anchor 10 (centre (40, 40)) → g1 (centre (40, 36), 32 × 24): (0, 10·(−4)/32 = −1.25, 0, −1.4384104).
TEST(AnchorLabeler, TinyImageByHand) {
    const AnchorSet anchors = tiny_anchors();
    ASSERT_EQ(anchors.count(), 16);
    const AnchorTargets targets = label_anchors(tiny_ground_truth(), anchors, tiny_options(0.4f));
    std::vector<std::int32_t> expected(16, k_unmatched);
    expected[0] = 0;
    expected[10] = 1;
    expected[6] = k_ignored;
    EXPECT_EQ(targets.matches, expected);
    EXPECT_EQ(targets.num_positive, 2);
    for (std::int64_t i = 0; i < 16; ++i) {
        EXPECT_EQ(targets.class_weights.at<float>({i}), i == 6 ? 0.0f : 1.0f) << i;
        EXPECT_EQ(targets.box_weights.at<float>({i}), i == 0 || i == 10 ? 1.0f : 0.0f) << i;
        for (std::int64_t k = 0; k < 3; ++k) {
            const bool hot = (i == 0 && k == 1) || (i == 10 && k == 2);
            EXPECT_EQ(targets.class_targets.at<float>({i, k}), hot ? 1.0f : 0.0f) << i << ", " << k;
        }
        if (i != 0 && i != 10) {
            for (std::int64_t c = 0; c < 4; ++c) EXPECT_EQ(targets.box_targets.at<float>({i, c}), 0.0f);
        }
    }
    const float log_three_quarters = -1.4384104f;
    const float anchor0[4] = {1.25f, 1.25f, log_three_quarters, log_three_quarters};
    const float anchor10[4] = {0.0f, -1.25f, 0.0f, log_three_quarters};
    for (std::int64_t c = 0; c < 4; ++c) {
        EXPECT_NEAR(targets.box_targets.at<float>({0, c}), anchor0[c], k_code_tolerance) << c;
        EXPECT_NEAR(targets.box_targets.at<float>({10, c}), anchor10[c], k_code_tolerance) << c;
    }
    // The TPU's thresholds (0.5 / 0.5): anchor 6 is a plain negative, weight 1.
    const AnchorTargets tpu = label_anchors(tiny_ground_truth(), anchors, tiny_options(0.5f));
    EXPECT_EQ(tpu.matches[6], k_unmatched);
    EXPECT_EQ(tpu.class_weights.at<float>({6}), 1.0f);
    EXPECT_EQ(tpu.num_positive, 2);
}

TEST(AnchorLabeler, TinyImageInTheHeadsLayout) {
    const AnchorSet anchors = tiny_anchors();
    const std::vector<AnchorTargets> batch = {label_anchors(tiny_ground_truth(), anchors, tiny_options(0.4f))};
    const HeadTargets head = to_head_layout(batch, anchors);
    ASSERT_EQ(head.levels.size(), 1u);
    const LevelTargets& level = head.levels[0];
    EXPECT_EQ(level.class_targets.shape(), (Shape{1, 3, 4, 4}));  // [N, A·K, H, W], A = 1
    EXPECT_EQ(level.box_targets.shape(), (Shape{1, 4, 4, 4}));
    EXPECT_EQ(head.num_positive, 2);
    EXPECT_EQ(level.class_targets.at<float>({0, 1, 0, 0}), 1.0f);  // g0's class 1 at cell (0, 0)
    EXPECT_EQ(level.class_targets.at<float>({0, 2, 2, 2}), 1.0f);  // g1's class 2 at cell (2, 2)
    float hot = 0;
    for (std::int64_t i = 0; i < level.class_targets.num_elements(); ++i) hot += level.class_targets.data<float>()[i];
    EXPECT_EQ(hot, 2.0f);
    EXPECT_EQ(level.class_weights.shape(), (Shape{1, 1, 4, 4}));   // [N, A, H, W]: one weight per anchor
    EXPECT_EQ(level.class_weights.at<float>({0, 0, 1, 2}), 0.0f);  // ignored
    EXPECT_EQ(level.class_weights.at<float>({0, 0, 3, 3}), 1.0f);
    EXPECT_NEAR(level.box_targets.at<float>({0, 1, 2, 2}), -1.25f, k_code_tolerance);  // dy of anchor 10
    EXPECT_NEAR(level.box_targets.at<float>({0, 2, 0, 0}), -1.4384104f, k_code_tolerance);
    EXPECT_EQ(level.box_weights.at<float>({0, 0, 2, 2}), 1.0f);
    EXPECT_EQ(level.box_weights.at<float>({0, 0, 1, 2}), 0.0f);
}

// Two levels, A = 2 (ratios 1, 2), K = 2, a batch of 2 images: every element of the heads' layout equals
// the flat target at global index first_index + (i·W + j)·A + a, channel a·K + k (classes) / a·4 + c (boxes).
TEST(AnchorLabeler, HeadsLayoutOfABatch) {
    AnchorOptions options;
    options.min_level = 3;
    options.max_level = 4;
    options.num_scales = 1;
    options.aspect_ratios = {1.0, 2.0};
    const AnchorSet anchors = make_anchors(64, 64, options);
    LabelerOptions labeler;
    labeler.num_classes = 2;
    labeler.matcher.unmatched_threshold = 0.4f;
    const std::vector<LabeledBox> first = {{{4, 4, 40, 30}, 1}, {{30, 20, 62, 60}, 0}};
    const std::vector<LabeledBox> second = {{{10, 30, 50, 50}, 0}};
    const std::vector<AnchorTargets> batch = {label_anchors(pad_ground_truth(first, 4), anchors, labeler),
                                              label_anchors(pad_ground_truth(second, 4), anchors, labeler)};
    const HeadTargets head = to_head_layout(batch, anchors);
    EXPECT_EQ(head.num_positive, batch[0].num_positive + batch[1].num_positive);
    for (std::size_t l = 0; l < 2; ++l) {
        const LevelAnchors& level = anchors.levels[l];
        const LevelTargets& out = head.levels[l];
        ASSERT_EQ(out.class_targets.shape(), (Shape{2, 4, level.height, level.width}));
        for (std::int64_t n = 0; n < 2; ++n) {
            for (std::int64_t i = 0; i < level.height; ++i) {
                for (std::int64_t j = 0; j < level.width; ++j) {
                    for (std::int64_t a = 0; a < 2; ++a) {
                        const std::int64_t index = level.first_index + (i * level.width + j) * 2 + a;
                        const AnchorTargets& flat = batch[static_cast<std::size_t>(n)];
                        for (std::int64_t k = 0; k < 2; ++k) {
                            EXPECT_EQ(out.class_targets.at<float>({n, a * 2 + k, i, j}),
                                      flat.class_targets.at<float>({index, k}));
                        }
                        EXPECT_EQ(out.class_weights.at<float>({n, a, i, j}), flat.class_weights.at<float>({index}));
                        EXPECT_EQ(out.box_weights.at<float>({n, a, i, j}), flat.box_weights.at<float>({index}));
                        for (std::int64_t c = 0; c < 4; ++c) {
                            EXPECT_EQ(out.box_targets.at<float>({n, a * 4 + c, i, j}),
                                      flat.box_targets.at<float>({index, c}));
                        }
                    }
                }
            }
        }
    }
}

TEST(AnchorLabeler, LossesTakeBothLayoutsAlike) {
    // Random logits laid out per level as the heads' outputs and flat as [M, K]: the focal and smooth L1
    // losses with the labeler's weights give one value (the per-level values summed).
    const AnchorSet anchors = make_anchors(128, 128);  // levels 3..7, 9 anchors per cell
    LabelerOptions labeler;
    labeler.num_classes = 4;
    labeler.matcher.unmatched_threshold = 0.4f;
    const std::vector<LabeledBox> objects = {{{10, 12, 60, 70}, 3}, {{64, 20, 120, 90}, 1}, {{5, 80, 40, 126}, 0}};
    const std::vector<AnchorTargets> batch = {label_anchors(pad_ground_truth(objects, 8), anchors, labeler)};
    const HeadTargets head = to_head_layout(batch, anchors);
    ASSERT_GT(head.num_positive, 0);
    const AnchorTargets& flat = batch[0];
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    double focal_levels = 0, smooth_levels = 0;
    Tensor flat_logits = Tensor::empty({anchors.count(), 4}, DType::F32);
    Tensor flat_boxes = Tensor::empty({anchors.count(), 4}, DType::F32);
    for (std::size_t l = 0; l < anchors.levels.size(); ++l) {
        const LevelAnchors& level = anchors.levels[l];
        Tensor logits = Tensor::empty(head.levels[l].class_targets.shape(), DType::F32);
        Tensor boxes = Tensor::empty(head.levels[l].box_targets.shape(), DType::F32);
        for (std::int64_t i = 0; i < level.height; ++i) {
            for (std::int64_t j = 0; j < level.width; ++j) {
                for (std::int64_t a = 0; a < 9; ++a) {
                    const std::int64_t index = level.index_of(i, j, a);
                    for (std::int64_t c = 0; c < 4; ++c) {  // K = 4 and the 4 box codes share a loop
                        flat_logits.at<float>({index, c}) = logits.at<float>({0, a * 4 + c, i, j}) = normal(rng);
                        flat_boxes.at<float>({index, c}) = boxes.at<float>({0, a * 4 + c, i, j}) = normal(rng) / 4;
                    }
                }
            }
        }
        // [1, A·C, H, W] read as [A, C, H, W], the per-anchor weights [1, A, H, W] as [A, H, W] (detection_loss.cpp).
        const double normalizer = static_cast<double>(head.num_positive);
        const Shape by_anchor{9, 4, level.height, level.width}, weights{9, level.height, level.width};
        focal_levels += loss::sigmoid_focal_loss(logits.reshape(by_anchor), head.levels[l].class_targets.reshape(by_anchor),
                                                 normalizer, {}, head.levels[l].class_weights.reshape(weights))
                            .value;
        smooth_levels += loss::smooth_l1_loss(boxes.reshape(by_anchor), head.levels[l].box_targets.reshape(by_anchor),
                                              4 * normalizer, {}, head.levels[l].box_weights.reshape(weights))
                             .value;
    }
    const double normalizer = static_cast<double>(flat.num_positive);
    const double focal_flat =
        loss::sigmoid_focal_loss(flat_logits, flat.class_targets, normalizer, {}, flat.class_weights).value;
    const double smooth_flat =
        loss::smooth_l1_loss(flat_boxes, flat.box_targets, 4 * normalizer, {}, flat.box_weights).value;
    EXPECT_NEAR(focal_levels, focal_flat, 1e-6 * focal_flat);
    EXPECT_NEAR(smooth_levels, smooth_flat, 1e-6 * smooth_flat);
    EXPECT_EQ(
        loss::sigmoid_focal_loss(flat_logits, flat.class_targets, normalizer, {}, flat.class_weights).num_positive,
        flat.num_positive);
}

TEST(AnchorLabeler, TileTargetsAreTheImageTargetsOfItsAnchors) {
    const AnchorSet anchors = make_anchors(128, 128);
    LabelerOptions labeler;
    labeler.num_classes = 5;
    const std::vector<LabeledBox> objects = {{{10, 12, 60, 70}, 3}, {{64, 20, 120, 90}, 1}, {{50, 50, 53, 54}, 4}};
    const PaddedGroundTruth gt = pad_ground_truth(objects, 6);
    const AnchorTargets whole = label_anchors(gt, anchors, labeler);
    std::vector<Box> gt_boxes;
    for (const LabeledBox& object : objects) gt_boxes.push_back(object.box);
    gt_boxes.resize(6);
    const std::vector<std::vector<std::int64_t>> tiles = {anchor_indices_in_region(anchors, {0, 56, 0, 128}),
                                                          anchor_indices_in_region(anchors, {56, 128, 0, 128})};
    std::vector<std::vector<Box>> tile_boxes(2);
    std::vector<Tensor> tile_iou;
    RowBestPartial all;
    for (std::size_t t = 0; t < 2; ++t) {
        for (std::int64_t index : tiles[t]) tile_boxes[t].push_back(anchors.boxes[static_cast<std::size_t>(index)]);
        tile_iou.push_back(iou_matrix(gt_boxes, tile_boxes[t], gt.num_valid));
        const RowBestPartial partial = row_best_partial(tile_iou[t], tiles[t]);
        all = t == 0 ? partial : combine(all, partial);
    }
    for (std::size_t t = 0; t < 2; ++t) {
        const AnchorTargets tile = targets_from_matches(
            match_anchor_subset(tile_iou[t], tiles[t], all, gt.num_valid, labeler.matcher), gt, tile_boxes[t], labeler);
        for (std::size_t local = 0; local < tiles[t].size(); ++local) {
            const std::int64_t global = tiles[t][local];
            const auto row = static_cast<std::int64_t>(local);
            ASSERT_EQ(tile.matches[local], whole.matches[static_cast<std::size_t>(global)]) << global;
            EXPECT_EQ(tile.class_weights.at<float>({row}), whole.class_weights.at<float>({global}));
            for (std::int64_t c = 0; c < 4; ++c) {
                EXPECT_EQ(tile.box_targets.at<float>({row, c}), whole.box_targets.at<float>({global, c}));
            }
            for (std::int64_t k = 0; k < 5; ++k) {
                EXPECT_EQ(tile.class_targets.at<float>({row, k}), whole.class_targets.at<float>({global, k}));
            }
        }
    }
}

TEST(AnchorLabeler, RejectsBadGroundTruth) {
    const AnchorSet anchors = tiny_anchors();
    const std::vector<LabeledBox> empty_box = {{{5, 5, 5, 20}, 0}};
    EXPECT_THROW(label_anchors(pad_ground_truth(empty_box, 2), anchors, tiny_options(0.4f)), Error);
    const std::vector<LabeledBox> bad_class = {{{5, 5, 25, 20}, 3}};  // K = 3
    EXPECT_THROW(label_anchors(pad_ground_truth(bad_class, 2), anchors, tiny_options(0.4f)), Error);
    EXPECT_THROW(pad_ground_truth(bad_class, 0), Error);  // more objects than max_number_of_boxes
}

}  // namespace
}  // namespace tessera::detection
