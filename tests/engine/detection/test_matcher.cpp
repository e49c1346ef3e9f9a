// The argmax matcher (TF Object Detection API semantics) on a 3 × 6 IoU matrix worked out by hand for every
// flag, threshold validation, padding rows, the tile contract (matching split anchor sets gives the
// whole-set result exactly) and the one-hot matmul gather. Matches are integers: compared exactly.
#include "detection/anchors.hpp"
#include "detection/matcher.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace tessera::detection {
namespace {

using Matches = std::vector<std::int32_t>;

Tensor matrix_from(std::int64_t rows, std::int64_t columns, const std::vector<float>& values) {
    Tensor t = Tensor::empty({rows, columns}, DType::F32);
    std::copy(values.begin(), values.end(), t.data<float>());
    return t;
}

// Rows are ground truth, columns anchors.
//          a0    a1    a2    a3    a4    a5
//   g0   0.60  0.20  0.05  0.00  0.00  0.00     row best: a0 (0.60)
//   g1   0.80  0.30  0.10  0.00  0.45  0.00     row best: a0 (0.80)
//   g2   0.10  0.35  0.42  0.00  0.00  0.38     row best: a2 (0.42)
// Column max (argmax): a0 0.80 (g1), a1 0.35 (g2), a2 0.42 (g2), a3 0 (all), a4 0.45 (g1), a5 0.38 (g2).
Tensor hand_matrix() {
    return matrix_from(3, 6,
                       {0.60f, 0.20f, 0.05f, 0.00f, 0.00f, 0.00f,  //
                        0.80f, 0.30f, 0.10f, 0.00f, 0.45f, 0.00f,  //
                        0.10f, 0.35f, 0.42f, 0.00f, 0.00f, 0.38f});
}

MatcherOptions options_of(float matched, float unmatched, bool negatives_lower, bool force) {
    MatcherOptions options;
    options.matched_threshold = matched;
    options.unmatched_threshold = unmatched;
    options.negatives_lower_than_unmatched = negatives_lower;
    options.force_match_for_each_row = force;
    return options;
}

TEST(ArgmaxMatcher, TpuRetinaNetSettings) {
    // matched = unmatched = 0.5, negatives lower, force match. Thresholds: only a0 (0.80 ≥ 0.5) → g1; the
    // rest < 0.5 → −1. Force: g0 and g1 both force a0 — TF's argmax over the one-hot indicator's rows picks
    // the first, g0, over g1's higher 0.80; g2 forces a2.
    EXPECT_EQ(match_anchors(hand_matrix(), 3, options_of(0.5f, 0.5f, true, true)), (Matches{0, -1, 2, -1, -1, -1}));
}

TEST(ArgmaxMatcher, ThresholdsWithNegativesLower) {
    // 0.5 / 0.4, no force: a0 0.80 → g1; a1 0.35 < 0.4 → −1; a2 0.42 ∈ [0.4, 0.5) → −2; a3 0 → −1;
    // a4 0.45 → −2; a5 0.38 → −1.
    EXPECT_EQ(match_anchors(hand_matrix(), 3, options_of(0.5f, 0.4f, true, false)), (Matches{1, -1, -2, -1, -2, -1}));
    // With force: a0 → g0 (first forcing row), a2 → g2 (forced over its ignore); a4 stays ignored.
    EXPECT_EQ(match_anchors(hand_matrix(), 3, options_of(0.5f, 0.4f, true, true)), (Matches{0, -1, 2, -1, -2, -1}));
}

TEST(ArgmaxMatcher, ThresholdsWithNegativesBetween) {
    // negatives_lower_than_unmatched false swaps the labels: below 0.4 → −2 (ignored), between → −1.
    EXPECT_EQ(match_anchors(hand_matrix(), 3, options_of(0.5f, 0.4f, false, false)), (Matches{1, -2, -1, -2, -1, -2}));
    EXPECT_EQ(match_anchors(hand_matrix(), 3, options_of(0.5f, 0.4f, false, true)), (Matches{0, -2, 2, -2, -1, -2}));
}

TEST(ArgmaxMatcher, ThresholdEdgesAreInclusiveBelow) {
    // v = matched threshold matches; v = unmatched threshold is "between" (≥ unmatched), so ignored.
    const Tensor iou = matrix_from(1, 3, {0.5f, 0.4f, 0.39999998f});
    EXPECT_EQ(match_anchors(iou, 1, options_of(0.5f, 0.4f, true, false)), (Matches{0, -2, -1}));
}

TEST(ArgmaxMatcher, PaddingRowsTakeNoPart) {
    // Only g0, g1 valid: g2's row is ignored though non-zero here. Column max over g0, g1: a1 0.30, a2 0.10,
    // a5 0 → −1; a4 0.45 → −2; a0 → g1, then forced to g0 (g0 and g1 both force a0). g2 forces nothing.
    EXPECT_EQ(match_anchors(hand_matrix(), 2, options_of(0.5f, 0.4f, true, false)), (Matches{1, -1, -1, -1, -2, -1}));
    EXPECT_EQ(match_anchors(hand_matrix(), 2, options_of(0.5f, 0.4f, true, true)), (Matches{0, -1, -1, -1, -2, -1}));
    // No valid rows: every anchor is a negative (TF's empty-rows case), force or not.
    EXPECT_EQ(match_anchors(hand_matrix(), 0, options_of(0.5f, 0.4f, true, true)), Matches(6, -1));
}

TEST(ArgmaxMatcher, TiesGoToTheLowestIndex) {
    // Column ties → lowest row (a0: g0 and g1 at 0.7 → g0). Row ties → lowest column: g1's best 0.7 is at a0
    // and a2, so it forces a0 (already g0's by the column rule; g0 forces a0 too) and a2 stays as thresholds
    // say: 0.7 → g1 (its column max).  g0: best a0.
    const Tensor iou = matrix_from(2, 3,
                                   {0.7f, 0.1f, 0.2f,  //
                                    0.7f, 0.0f, 0.7f});
    EXPECT_EQ(match_anchors(iou, 2, options_of(0.5f, 0.4f, true, true)), (Matches{0, -1, 1}));
    // A row overlapping nothing (all 0) forces the first anchor, as TF's argmax does.
    const Tensor nothing = matrix_from(2, 3,
                                       {0.0f, 0.9f, 0.0f,  //
                                        0.0f, 0.0f, 0.0f});
    EXPECT_EQ(match_anchors(nothing, 2, options_of(0.5f, 0.4f, true, true)), (Matches{1, 0, -1}));
}

TEST(ArgmaxMatcher, ValidatesThresholds) {
    EXPECT_THROW(match_anchors(hand_matrix(), 3, options_of(0.4f, 0.5f, true, true)), Error);   // unmatched > matched
    EXPECT_THROW(match_anchors(hand_matrix(), 3, options_of(0.5f, 0.5f, false, true)), Error);  // TF forbids equal here
    EXPECT_NO_THROW(validate(options_of(0.5f, 0.5f, true, true)));                              // equal is allowed
    EXPECT_THROW(match_anchors(hand_matrix(), 4, MatcherOptions{}), Error);  // more valid rows than G
}

TEST(IouMatrix, PaddingAndEmptyRowsAreZero) {
    const std::vector<Box> ground_truth = {
        {0, 0, 10, 10}, {5, 5, 5, 20}, {0, 0, 10, 10}};  // row 1 empty, row 2 padding
    const std::vector<Box> anchors = {{0, 0, 10, 10}, {5, 0, 15, 10}, {20, 20, 30, 30}};
    const Tensor iou = iou_matrix(ground_truth, anchors, 2);
    EXPECT_EQ(iou.shape(), (Shape{3, 3}));
    EXPECT_FLOAT_EQ(iou.at<float>({0, 0}), 1.0f);
    EXPECT_FLOAT_EQ(iou.at<float>({0, 1}), 50.0f / 150.0f);
    EXPECT_EQ(iou.at<float>({0, 2}), 0.0f);
    for (std::int64_t row = 1; row < 3; ++row) {
        for (std::int64_t column = 0; column < 3; ++column) EXPECT_EQ(iou.at<float>({row, column}), 0.0f);
    }
}

// Matches the anchors split into subsets (each with its own IoU columns, in shuffled order), with the
// row-best partials combined as an all-reduce would, and scatters the results back to global order.
Matches match_split(const Tensor& iou, std::int64_t num_valid, const MatcherOptions& options,
                    const std::vector<std::vector<std::int64_t>>& subsets) {
    const std::int64_t rows = iou.dim(0), columns = iou.dim(1);
    std::vector<Tensor> subset_iou;
    std::vector<RowBestPartial> partials;
    for (const std::vector<std::int64_t>& subset : subsets) {
        Tensor part = Tensor::empty({rows, static_cast<std::int64_t>(subset.size())}, DType::F32);
        for (std::int64_t r = 0; r < rows; ++r) {
            for (std::size_t c = 0; c < subset.size(); ++c)
                part.at<float>({r, static_cast<std::int64_t>(c)}) = iou.at<float>({r, subset[c]});
        }
        partials.push_back(row_best_partial(part, subset));
        subset_iou.push_back(part);
    }
    RowBestPartial all = partials.front();
    for (std::size_t i = 1; i < partials.size(); ++i) all = combine(all, partials[i]);
    Matches result(static_cast<std::size_t>(columns), 99);
    for (std::size_t s = 0; s < subsets.size(); ++s) {
        const Matches part = match_anchor_subset(subset_iou[s], subsets[s], all, num_valid, options);
        for (std::size_t c = 0; c < subsets[s].size(); ++c) result[static_cast<std::size_t>(subsets[s][c])] = part[c];
    }
    return result;
}

// Random uneven split into `weights.size()` subsets, each shuffled.
std::vector<std::vector<std::int64_t>> random_split(std::int64_t count, const std::vector<double>& weights,
                                                    std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::discrete_distribution<int> pick(weights.begin(), weights.end());
    std::vector<std::vector<std::int64_t>> subsets(weights.size());
    for (std::int64_t i = 0; i < count; ++i) subsets[static_cast<std::size_t>(pick(rng))].push_back(i);
    for (auto& subset : subsets) std::shuffle(subset.begin(), subset.end(), rng);
    return subsets;
}

std::vector<MatcherOptions> all_flag_settings() {
    return {options_of(0.5f, 0.5f, true, true), options_of(0.5f, 0.4f, true, true), options_of(0.5f, 0.4f, false, true),
            options_of(0.5f, 0.4f, true, false)};
}

TEST(ArgmaxMatcherTiles, SplitsOfATiedMatrixGiveTheWholeResult) {
    // IoU in steps of 0.05 (many ties in rows and columns), rows 4..5 padding; a row of equal values.
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> step(0, 19);
    std::vector<float> values(6 * 50);
    for (float& v : values) v = 0.05f * static_cast<float>(step(rng));
    std::fill(values.begin() + 3 * 50, values.begin() + 4 * 50, 0.3f);  // row 3: every anchor ties
    const Tensor iou = matrix_from(6, 50, values);
    for (const MatcherOptions& options : all_flag_settings()) {
        const Matches whole = match_anchors(iou, 4, options);
        EXPECT_EQ(match_split(iou, 4, options, random_split(50, {0.7, 0.3}, 1)), whole);
        EXPECT_EQ(match_split(iou, 4, options, random_split(50, {0.55, 0.3, 0.15}, 2)), whole);
        EXPECT_EQ(match_split(iou, 4, options, random_split(50, {0.1, 0.1, 0.8}, 3)), whole);
    }
}

TEST(ArgmaxMatcherTiles, TilesOfRealAnchorsGiveTheWholeResult) {
    // 128×128, levels 3..5: 3,024 anchors; 6 objects and 2 padding rows; tiles cut unevenly in y and x.
    AnchorOptions anchor_options;
    anchor_options.max_level = 5;
    const AnchorSet anchors = make_anchors(128, 128, anchor_options);
    const std::vector<Box> ground_truth = {{10, 12, 40, 44}, {60, 5, 120, 50},   {30, 70, 34, 73}, {0, 90, 128, 128},
                                           {50, 50, 51, 51}, {90, 60, 126, 100}, {0, 0, 0, 0},     {0, 0, 0, 0}};
    const Tensor iou = iou_matrix(ground_truth, anchors.boxes, 6);
    std::vector<std::vector<std::int64_t>> two = {anchor_indices_in_region(anchors, {0, 40, 0, 128}),
                                                  anchor_indices_in_region(anchors, {40, 128, 0, 128})};
    std::vector<std::vector<std::int64_t>> three = {anchor_indices_in_region(anchors, {0, 128, 0, 24}),
                                                    anchor_indices_in_region(anchors, {0, 72, 24, 128}),
                                                    anchor_indices_in_region(anchors, {72, 128, 24, 128})};
    for (const MatcherOptions& options : all_flag_settings()) {
        const Matches whole = match_anchors(iou, 6, options);
        EXPECT_EQ(match_split(iou, 6, options, two), whole);
        EXPECT_EQ(match_split(iou, 6, options, three), whole);
        EXPECT_EQ(match_split(iou, 6, options, random_split(anchors.count(), {0.2, 0.5, 0.3}, 4)), whole);
    }
    // The tiny boxes (rows 2, 4) reach no threshold: they are matched only by force, which the split keeps.
    const Matches forced = match_anchors(iou, 6, options_of(0.5f, 0.4f, true, true));
    EXPECT_NE(std::find(forced.begin(), forced.end(), 2), forced.end());
    EXPECT_NE(std::find(forced.begin(), forced.end(), 4), forced.end());
}

TEST(ArgmaxMatcherBlocked, BoxesMatchedABlockAtATimeGiveTheMatrixResult) {
    // 320×256 (H × W), levels 3..7: more than three blocks of 4,096 anchors. A box outside the image
    // overlaps no anchor (its row ties at 0 everywhere: force-matched to anchor 0, across every block
    // boundary); a tiny box is matched only by force; two padding rows.
    const AnchorSet anchors = make_anchors(320, 256, AnchorOptions{});
    ASSERT_GT(anchors.count(), 3 * 4096);
    const std::vector<Box> ground_truth = {{10, 12, 40, 44},     {60, 5, 220, 150}, {130, 170, 133, 172},
                                           {900, 900, 910, 910}, {0, 90, 256, 256}, {17, 200, 80, 230},
                                           {0, 0, 0, 0},         {0, 0, 0, 0}};
    const std::int64_t num_valid = 6;
    const Tensor iou = iou_matrix(ground_truth, anchors.boxes, num_valid);
    for (const MatcherOptions& options : all_flag_settings()) {
        const Matches whole = match_anchors(iou, num_valid, options);
        EXPECT_EQ(match_anchors(ground_truth, num_valid, anchors.boxes, options), whole);
        // Shuffled subsets, each spanning blocks: partials from the boxes, combined as the all-reduce does.
        const auto subsets = random_split(anchors.count(), {0.6, 0.4}, 5);
        std::vector<std::vector<Box>> subset_boxes;
        RowBestPartial all;
        for (const auto& subset : subsets) {
            std::vector<Box> boxes;
            for (std::int64_t index : subset) boxes.push_back(anchors.boxes[static_cast<std::size_t>(index)]);
            const RowBestPartial mine = row_best_partial(ground_truth, num_valid, boxes, subset);
            all = all.best_iou.empty() ? mine : combine(all, mine);
            subset_boxes.push_back(std::move(boxes));
        }
        Matches result(whole.size(), 99);
        for (std::size_t s = 0; s < subsets.size(); ++s) {
            const Matches part = match_anchor_subset(ground_truth, num_valid, subset_boxes[s], subsets[s], all, options);
            for (std::size_t c = 0; c < subsets[s].size(); ++c) result[static_cast<std::size_t>(subsets[s][c])] = part[c];
        }
        EXPECT_EQ(result, whole);
    }
    const Matches forced = match_anchors(ground_truth, num_valid, anchors.boxes, options_of(0.5f, 0.5f, true, true));
    EXPECT_EQ(forced[0], 3);  // the box outside the image forces the lowest anchor
}

TEST(OneHotGather, MatchedRowsAndZeros) {
    const Tensor rows = matrix_from(3, 2, {1, 2, 3, 4, 5, 6});
    const Tensor gathered = gather_by_one_hot(Matches{2, -1, 0, -2, 2}, rows);
    const std::vector<float> expected = {5, 6, 0, 0, 1, 2, 0, 0, 5, 6};
    ASSERT_EQ(gathered.shape(), (Shape{5, 2}));
    for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(gathered.data<float>()[i], expected[i]) << i;
    EXPECT_THROW(gather_by_one_hot(Matches{3}, rows), Error);
}

TEST(OneHotGather, ManyBlocksAreExact) {
    // 2,500 anchors (three blocks of the product) against 7 rows of arbitrary floats: the product of a
    // one-hot row with the table is the selected row exactly (1·v + Σ 0·w).
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> value(-1000.0f, 1000.0f);
    std::vector<float> table(7 * 5);
    for (float& v : table) v = value(rng);
    const Tensor rows = matrix_from(7, 5, table);
    std::uniform_int_distribution<int> match(-2, 6);
    Matches matches(2500);
    for (std::int32_t& m : matches) m = match(rng);
    const Tensor gathered = gather_by_one_hot(matches, rows);
    for (std::size_t i = 0; i < matches.size(); ++i) {
        for (std::size_t c = 0; c < 5; ++c) {
            const float expected = matches[i] >= 0 ? table[static_cast<std::size_t>(matches[i]) * 5 + c] : 0.0f;
            ASSERT_EQ(gathered.data<float>()[i * 5 + c], expected) << "anchor " << i << ", column " << c;
        }
    }
}

}  // namespace
}  // namespace tessera::detection
