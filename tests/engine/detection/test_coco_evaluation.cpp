// COCO-style evaluation: hand-computed cases (each worked out beside it), pycocotools' grid of thresholds
// and recall points, input errors, and a brute-force second implementation on random data.
//
// Tolerances: hand-computed AP / recall values are exact rationals; the engine sums 101 and then 10 doubles,
// so they are compared with an absolute 1e-12. The brute force against the engine: absolute 1e-12.
// Notation below: per threshold, tp/fp are the running counts over the detections merged by score,
// rc = tp / number of ground truth, pr = tp / (tp + fp), made non-increasing from the right; the 101
// samples take pr at the first rc ≥ r (0 when no rc reaches r).
#include "detection/coco_evaluation.hpp"
#include "support/error_of.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace tessera::detection {
namespace {

constexpr double k_exact = 1e-12;

LabeledBox truth(Box box, std::int32_t class_id = 0) { return {box, class_id}; }
ScoredBox detection(Box box, float score, std::int32_t class_id = 0) { return {box, class_id, score}; }

void expect_every_threshold(const CocoClassResult& row, double expected_ap, const std::string& what) {
    for (std::size_t t = 0; t < k_coco_iou_threshold_count; ++t) {
        EXPECT_NEAR(row.ap_per_threshold[t], expected_ap, k_exact) << what << ", threshold " << t;
    }
    EXPECT_NEAR(row.ap, expected_ap, k_exact) << what;
}

TEST(CocoEvaluation, ThresholdsAndRecallPointsAreNumpysLinspace) {
    // Printed by numpy 1.24: np.linspace(.5, .95, 10) and np.linspace(0, 1, 101) (the indices whose value
    // is not i/100 in double).
    const auto thresholds = coco_iou_thresholds();
    const std::array<double, 10> expected = {0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.8999999999999999, 0.95};
    for (std::size_t t = 0; t < 10; ++t) EXPECT_EQ(thresholds[t], expected[t]) << t;
    const auto points = coco_recall_points();
    const std::vector<std::pair<std::size_t, double>> off_grid = {
        {35, 0.35000000000000003}, {41, 0.41000000000000003}, {47, 0.47000000000000003}, {57, 0.5700000000000001},
        {69, 0.6900000000000001},  {70, 0.7000000000000001},  {82, 0.8200000000000001},  {83, 0.8300000000000001},
        {94, 0.9400000000000001},  {95, 0.9500000000000001}};
    for (std::size_t i = 0; i < points.size(); ++i) {
        double value = static_cast<double>(i) / 100.0;
        for (const auto& [index, numpy_value] : off_grid) value = index == i ? numpy_value : value;
        EXPECT_EQ(points[i], value) << i;
    }
}

TEST(CocoEvaluation, PerfectDetectionsScoreOne) {
    // Every detection is its ground truth (IoU 1 ≥ every t): rc reaches 1 with pr 1 → all 101 samples 1.
    // Boxes are 10×10 (small, area 100 < 32²) and 100×100 (large, area 10⁴ > 96²): AP_small = AP_large = 1;
    // no ground truth is medium, so AP_medium is -1.
    const Box small_a{0, 0, 10, 10}, small_b{50, 50, 60, 60}, large{100, 100, 200, 200};
    std::vector<EvaluationImage> images(2);
    images[0] = {{truth(small_a), truth(large, 1)}, {detection(large, 0.3f, 1), detection(small_a, 0.9f)}};
    images[1] = {{truth(small_b)}, {detection(small_b, 0.6f)}};
    const CocoEvaluation result = evaluate_coco(images, 2);
    EXPECT_NEAR(result.ap, 1.0, k_exact);
    EXPECT_NEAR(result.ap50, 1.0, k_exact);
    EXPECT_NEAR(result.ap75, 1.0, k_exact);
    EXPECT_NEAR(result.ar100, 1.0, k_exact);
    EXPECT_NEAR(result.ap_small, 1.0, k_exact);
    EXPECT_EQ(result.ap_medium, -1.0);
    EXPECT_NEAR(result.ap_large, 1.0, k_exact);
    EXPECT_EQ(result.num_classes_with_ground_truth, 2);
    ASSERT_EQ(result.per_class.size(), 2u);
    EXPECT_EQ(result.per_class[0].num_ground_truth, 2);
    EXPECT_EQ(result.per_class[1].num_ground_truth, 1);
    for (const CocoClassResult& row : result.per_class) {
        expect_every_threshold(row, 1.0, "class " + std::to_string(row.class_id));
        EXPECT_NEAR(row.recall, 1.0, k_exact);
        ASSERT_EQ(row.precision_at_iou_50.size(), 101u);
        for (double precision : row.precision_at_iou_50) EXPECT_EQ(precision, 1.0);
    }
}

TEST(CocoEvaluation, IouOfExactlyPointSixPassesThreeThresholds) {
    // Ground truth [0,0,10,10] (area 100), detection [0,0,10,6] (area 60, inside it): IoU = 60/100, which
    // in double is the double nearest 0.6 — the same double as numpy's third threshold. pycocotools skips a
    // ground truth only when iou < t, so 0.50, 0.55 and 0.60 match (AP 1 each, recall 1) and 0.65…0.95 do
    // not (the detection is a false positive: pr 0 at rc 0 → every sample 0; recall 0).
    // AP@[.5:.95] = 3/10, AP50 = 1, AP75 = 0, AR = 3/10. Two images, the same geometry shifted.
    std::vector<EvaluationImage> images(2);
    images[0] = {{truth({0, 0, 10, 10})}, {detection({0, 0, 10, 6}, 0.8f)}};
    images[1] = {{truth({20, 30, 30, 40})}, {detection({20, 34, 30, 40}, 0.7f)}};
    const CocoEvaluation result = evaluate_coco(images, 1);
    const CocoClassResult& row = result.per_class[0];
    for (std::size_t t = 0; t < k_coco_iou_threshold_count; ++t) {
        EXPECT_NEAR(row.ap_per_threshold[t], t < 3 ? 1.0 : 0.0, k_exact) << "threshold " << t;
    }
    EXPECT_NEAR(result.ap, 0.3, k_exact);
    EXPECT_NEAR(result.ap50, 1.0, k_exact);
    EXPECT_NEAR(result.ap75, 0.0, k_exact);
    EXPECT_NEAR(result.ar100, 0.3, k_exact);
}

TEST(CocoEvaluation, HalfTheGroundTruthFound) {
    // Two ground truths, one found (IoU 1): rc = [0.5], pr = [1]. The recall points 0, 0.01, …, 0.50 (51 of
    // them; 50·0.01 is exactly 0.5) sample 1, the 50 above 0.5 sample 0 → AP = 51/101 at every threshold,
    // recall 0.5.
    std::vector<EvaluationImage> images(1);
    images[0] = {{truth({0, 0, 10, 10}), truth({20, 20, 30, 30})}, {detection({0, 0, 10, 10}, 0.9f)}};
    const CocoEvaluation result = evaluate_coco(images, 1);
    expect_every_threshold(result.per_class[0], 51.0 / 101.0, "half found");
    EXPECT_NEAR(result.ar100, 0.5, k_exact);
    const std::vector<double>& curve = result.per_class[0].precision_at_iou_50;
    ASSERT_EQ(curve.size(), 101u);
    for (std::size_t r = 0; r < 101; ++r) EXPECT_EQ(curve[r], r <= 50 ? 1.0 : 0.0) << r;
}

TEST(CocoEvaluation, DuplicateDetectionIsAFalsePositive) {
    // Two ground truths G1, G2. Detections: A on G1 (0.9), A' = A again (0.8), B on G2 (0.7), all IoU 1.
    // A takes G1; A' finds G1 taken → false positive; B takes G2.
    //   tp = [1, 1, 2], fp = [0, 1, 1], rc = [0.5, 0.5, 1], pr = [1, 1/2, 2/3] → monotone [1, 2/3, 2/3].
    //   r ≤ 0.5 (51 points) → 1; r > 0.5 (50 points) → first rc ≥ r is the third → 2/3.
    //   AP = (51 + 50·2/3) / 101 = 253/303 at every threshold; recall 1.
    const Box g1{0, 0, 10, 10}, g2{20, 20, 30, 30};
    std::vector<EvaluationImage> images(1);
    images[0] = {{truth(g1), truth(g2)}, {detection(g2, 0.7f), detection(g1, 0.9f), detection(g1, 0.8f)}};
    const CocoEvaluation result = evaluate_coco(images, 1);
    expect_every_threshold(result.per_class[0], 253.0 / 303.0, "duplicate");
    EXPECT_NEAR(result.ar100, 1.0, k_exact);
    EXPECT_NEAR(result.per_class[0].precision_at_iou_50[50], 1.0, k_exact);
    EXPECT_NEAR(result.per_class[0].precision_at_iou_50[51], 2.0 / 3.0, k_exact);
    EXPECT_NEAR(result.per_class[0].precision_at_iou_50[100], 2.0 / 3.0, k_exact);

    // With one detection per image and class, only A counts: rc = [0.5], pr = [1] → AP 51/101, recall 0.5.
    const CocoEvaluation limited = evaluate_coco(images, 1, {.max_detections_per_image = 1});
    expect_every_threshold(limited.per_class[0], 51.0 / 101.0, "max one detection");
    EXPECT_NEAR(limited.ar100, 0.5, k_exact);
}

TEST(CocoEvaluation, FalsePositiveAboveTheTruePositive) {
    // One ground truth; a false positive (0.9, no overlap) above the true positive (0.8).
    //   tp = [0, 1], fp = [1, 1], rc = [0, 1], pr = [0, 1/2] → monotone [1/2, 1/2] → every sample 1/2.
    std::vector<EvaluationImage> images(1);
    images[0] = {{truth({0, 0, 10, 10})}, {detection({50, 50, 60, 60}, 0.9f), detection({0, 0, 10, 10}, 0.8f)}};
    const CocoEvaluation result = evaluate_coco(images, 1);
    expect_every_threshold(result.per_class[0], 0.5, "false positive first");
    EXPECT_NEAR(result.ar100, 1.0, k_exact);
}

TEST(CocoEvaluation, MeanOverTwoClassesWithDifferentAp) {
    // Class 0: perfect (AP 1). Class 1: the false positive above the true positive (AP 1/2).
    // mAP = (1 + 1/2) / 2 = 3/4 at every threshold; AR = 1 for both.
    std::vector<EvaluationImage> images(1);
    images[0] = {{truth({0, 0, 10, 10}, 0), truth({30, 0, 40, 10}, 1)},
                 {detection({0, 0, 10, 10}, 0.5f, 0), detection({60, 60, 70, 70}, 0.9f, 1),
                  detection({30, 0, 40, 10}, 0.8f, 1)}};
    const CocoEvaluation result = evaluate_coco(images, 2);
    expect_every_threshold(result.per_class[0], 1.0, "class 0");
    expect_every_threshold(result.per_class[1], 0.5, "class 1");
    EXPECT_NEAR(result.ap, 0.75, k_exact);
    EXPECT_NEAR(result.ap50, 0.75, k_exact);
    EXPECT_NEAR(result.ap75, 0.75, k_exact);
    EXPECT_NEAR(result.ar100, 1.0, k_exact);
}

TEST(CocoEvaluation, ClassesWithoutGroundTruthAreLeftOutOfTheMean) {
    // Class 0 perfect; class 1 has only a detection (no ground truth anywhere); class 2 has nothing.
    // pycocotools gives -1 to classes 1 and 2 and averages over class 0 alone: AP 1.
    std::vector<EvaluationImage> images(1);
    images[0] = {{truth({0, 0, 10, 10}, 0)}, {detection({0, 0, 10, 10}, 0.5f, 0), detection({0, 0, 10, 10}, 0.9f, 1)}};
    const CocoEvaluation result = evaluate_coco(images, 3);
    EXPECT_EQ(result.num_classes_with_ground_truth, 1);
    EXPECT_NEAR(result.ap, 1.0, k_exact);
    EXPECT_NEAR(result.ar100, 1.0, k_exact);
    for (std::int32_t k : {1, 2}) {
        const CocoClassResult& row = result.per_class[static_cast<std::size_t>(k)];
        EXPECT_EQ(row.class_id, k);
        EXPECT_EQ(row.num_ground_truth, 0);
        EXPECT_EQ(row.ap, -1.0);
        EXPECT_EQ(row.ap50, -1.0);
        EXPECT_EQ(row.recall, -1.0);
        EXPECT_EQ(row.ap_per_threshold[3], -1.0);
        EXPECT_TRUE(row.precision_at_iou_50.empty());
    }
}

TEST(CocoEvaluation, ImagesWithoutDetectionsCountTheirGroundTruth) {
    // Image 0: one ground truth found exactly. Image 1: one ground truth, no detections. Image 2: nothing.
    // Image 3: no ground truth, one detection scored below the true positive (a false positive).
    //   tp = [1, 1], fp = [0, 1], rc = [0.5, 0.5], pr = [1, 1/2] → monotone [1, 1/2]:
    //   r ≤ 0.5 → 1 (51 points), above → 0: AP = 51/101; recall 0.5.
    std::vector<EvaluationImage> images(4);
    images[0] = {{truth({0, 0, 10, 10})}, {detection({0, 0, 10, 10}, 0.9f)}};
    images[1] = {{truth({0, 0, 10, 10})}, {}};
    images[3] = {{}, {detection({0, 0, 10, 10}, 0.4f)}};
    const CocoEvaluation result = evaluate_coco(images, 1);
    expect_every_threshold(result.per_class[0], 51.0 / 101.0, "missed image");
    EXPECT_NEAR(result.ar100, 0.5, k_exact);
    EXPECT_EQ(result.per_class[0].num_ground_truth, 2);
}

TEST(CocoEvaluation, EqualScoresAcrossImagesKeepImageOrder) {
    // Image 0: ground truth, a false positive at 0.5. Image 1: ground truth, its true positive at 0.5.
    // pycocotools merges images in order with a stable sort, so the false positive comes first:
    //   rc = [0, 0.5], pr = [0, 1/2] → monotone [1/2, 1/2]: 51 points at 1/2 → AP = 25.5/101.
    // Images swapped, the true positive comes first: rc = [0.5, 0.5], pr = [1, 1/2] → AP = 51/101.
    const Box box{0, 0, 10, 10};
    const EvaluationImage with_false_positive{{truth(box)}, {detection({40, 40, 50, 50}, 0.5f)}};
    const EvaluationImage with_true_positive{{truth(box)}, {detection(box, 0.5f)}};
    expect_every_threshold(evaluate_coco({with_false_positive, with_true_positive}, 1).per_class[0], 25.5 / 101.0,
                           "false positive first");
    expect_every_threshold(evaluate_coco({with_true_positive, with_false_positive}, 1).per_class[0], 51.0 / 101.0,
                           "true positive first");
}

TEST(CocoEvaluation, EqualIouGoesToTheLaterGroundTruth) {
    // G1 = [0,0,10,10], G2 = [2,0,12,10]. A = [1,0,11,10] (0.9): IoU 90/110 with both (the same double).
    // B = [-2,0,8,10] (0.8): IoU 80/120 = 0.667 with G1, 60/140 = 0.43 with G2.
    // pycocotools replaces its best match when iou ≥ the best so far, so A takes G2 (the later one) and B
    // can take G1 while t ≤ 0.667:
    //   t = 0.50…0.65 (4): two true positives → AP 1.
    //   t = 0.70…0.80 (3): A matched (0.818 ≥ t), B not: rc = [0.5, 0.5], pr = [1, 1/2] → 51/101.
    //   t = 0.85…0.95 (3): nothing matches → 0.
    std::vector<EvaluationImage> images(1);
    images[0] = {{truth({0, 0, 10, 10}), truth({2, 0, 12, 10})},
                 {detection({1, 0, 11, 10}, 0.9f), detection({-2, 0, 8, 10}, 0.8f)}};
    const CocoClassResult row = evaluate_coco(images, 1).per_class[0];
    for (std::size_t t = 0; t < k_coco_iou_threshold_count; ++t) {
        const double expected = t < 4 ? 1.0 : (t < 7 ? 51.0 / 101.0 : 0.0);
        EXPECT_NEAR(row.ap_per_threshold[t], expected, k_exact) << "threshold " << t;
    }
    EXPECT_NEAR(row.ap, (4.0 + 3.0 * 51.0 / 101.0) / 10.0, k_exact);
}

TEST(CocoEvaluation, AreaRangesIgnoreWhatIsOutOfRange) {
    // Ground truth S = [0,0,10,10] (area 100, small) and L = [100,100,200,200] (area 10⁴, large).
    // Detections: S exactly (0.9) and F = [300,300,400,400] (0.8, area 10⁴, no overlap).
    //   all:    2 counted; S tp, F fp: rc = [0.5, 0.5], pr = [1, 1/2] → AP 51/101.
    //   small:  L ignored (1 counted); S tp; F unmatched with an area out of range → ignored: AP 1.
    //   medium: nothing counted → -1.
    //   large:  S ignored (1 counted, L); the detection on S matches an ignored one → ignored; F is a false
    //           positive: tp = [0], fp = [1], rc = [0] → the sample at r = 0 is pr 0, the rest 0: AP 0.
    std::vector<EvaluationImage> images(1);
    images[0] = {{truth({0, 0, 10, 10}), truth({100, 100, 200, 200})},
                 {detection({0, 0, 10, 10}, 0.9f), detection({300, 300, 400, 400}, 0.8f)}};
    const CocoEvaluation result = evaluate_coco(images, 1);
    EXPECT_NEAR(result.ap, 51.0 / 101.0, k_exact);
    EXPECT_NEAR(result.ap_small, 1.0, k_exact);
    EXPECT_EQ(result.ap_medium, -1.0);
    EXPECT_NEAR(result.ap_large, 0.0, k_exact);
}

TEST(CocoEvaluation, EmptyInputs) {
    // No images, or images with nothing: every class lacks ground truth, so every AP and AR is -1.
    for (const auto& images : {std::vector<EvaluationImage>{}, std::vector<EvaluationImage>(3)}) {
        const CocoEvaluation result = evaluate_coco(images, 2);
        EXPECT_EQ(result.ap, -1.0);
        EXPECT_EQ(result.ap50, -1.0);
        EXPECT_EQ(result.ap75, -1.0);
        EXPECT_EQ(result.ar100, -1.0);
        EXPECT_EQ(result.ap_small, -1.0);
        EXPECT_EQ(result.num_classes_with_ground_truth, 0);
        ASSERT_EQ(result.per_class.size(), 2u);
        EXPECT_EQ(result.per_class[1].class_id, 1);
        EXPECT_EQ(result.per_class[1].ap, -1.0);
    }
    // Ground truth but no detections at all: AP 0 and AR 0 (not -1).
    std::vector<EvaluationImage> images(1);
    images[0].ground_truth = {truth({0, 0, 10, 10})};
    const CocoEvaluation result = evaluate_coco(images, 1);
    EXPECT_EQ(result.ap, 0.0);
    EXPECT_EQ(result.ar100, 0.0);
}

TEST(CocoEvaluation, RejectsBadClassIdsAndNanScores) {
    std::vector<EvaluationImage> images(2);
    images[1].detections = {detection({0, 0, 10, 10}, 0.5f, 3)};
    std::string error = test::error_of([&] { evaluate_coco(images, 3); });
    EXPECT_NE(error.find("image 1, detection 0 has class id 3; expected a class id in [0, 3)"), std::string::npos)
        << error;

    images[1].detections.clear();
    images[0].ground_truth = {truth({0, 0, 10, 10}, 0), truth({0, 0, 10, 10}, -1)};
    error = test::error_of([&] { evaluate_coco(images, 3); });
    EXPECT_NE(error.find("image 0, ground truth 1 has class id -1"), std::string::npos) << error;

    images[0].ground_truth.clear();
    images[0].detections = {detection({0, 0, 10, 10}, 0.5f), detection({0, 0, 10, 10}, std::nanf(""))};
    error = test::error_of([&] { evaluate_coco(images, 3); });
    EXPECT_NE(error.find("image 0, detection 1 has a NaN score"), std::string::npos) << error;

    error = test::error_of([&] { evaluate_coco({}, 0); });
    EXPECT_NE(error.find("expected at least one class, got num_classes 0"), std::string::npos) << error;
}

}  // namespace
}  // namespace tessera::detection
