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
#include <numeric>
#include <random>

namespace tessera::detection {
namespace {

constexpr double k_exact = 1e-12;

LabeledBox truth(Box box, std::int32_t class_id = 0) {
    return {box, class_id};
}
ScoredBox detection(Box box, float score, std::int32_t class_id = 0) {
    return {box, class_id, score};
}

void expect_every_threshold(const CocoClassResult& row, double expected_ap, const std::string& what) {
    for (std::size_t t = 0; t < k_coco_iou_threshold_count; ++t) {
        EXPECT_NEAR(row.ap_per_threshold[t], expected_ap, k_exact) << what << ", threshold " << t;
    }
    EXPECT_NEAR(row.ap, expected_ap, k_exact) << what;
}

// Printed by numpy 1.24: np.linspace(.5, .95, 10) and np.linspace(0, 1, 101) (pycocotools' iouThrs and
// recThrs). Ten recall points are not the double nearest i/100; they are listed.
constexpr std::array<double, 10> k_numpy_iou_thresholds = {
    0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.8999999999999999, 0.95};

std::array<double, 101> numpy_recall_points() {
    const std::vector<std::pair<std::size_t, double>> off_grid = {
        {35, 0.35000000000000003}, {41, 0.41000000000000003}, {47, 0.47000000000000003}, {57, 0.5700000000000001},
        {69, 0.6900000000000001},  {70, 0.7000000000000001},  {82, 0.8200000000000001},  {83, 0.8300000000000001},
        {94, 0.9400000000000001},  {95, 0.9500000000000001}};
    std::array<double, 101> points{};
    for (std::size_t i = 0; i < points.size(); ++i) points[i] = static_cast<double>(i) / 100.0;
    for (const auto& [index, value] : off_grid) points[index] = value;
    return points;
}

TEST(CocoEvaluation, ThresholdsAndRecallPointsAreNumpysLinspace) {
    const auto thresholds = coco_iou_thresholds();
    for (std::size_t t = 0; t < 10; ++t) EXPECT_EQ(thresholds[t], k_numpy_iou_thresholds[t]) << t;
    const auto points = coco_recall_points();
    const auto expected = numpy_recall_points();
    for (std::size_t i = 0; i < points.size(); ++i) EXPECT_EQ(points[i], expected[i]) << i;
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

TEST(CocoEvaluation, AMatchInTheAreaRangeIsPreferredToABetterIgnoredOne) {
    // S = [0,0,30,30] (area 900, small), M = [0,0,40,40] (area 1600, medium), one detection D = [0,0,36,36]
    // (area 1296, medium): IoU(D, S) = 900/1296 = 0.694, IoU(D, M) = 1296/1600 = 0.81.
    //   small:  S counted, M ignored and sorted after it. t ≤ 0.65 (4): D takes S and stops before M → AP 1.
    //           t = 0.70…0.80: S fails, D takes the ignored M → ignored, nothing counted → 0. t ≥ 0.85: D
    //           unmatched, its area is out of range → ignored → 0. AP_small = 4/10.
    //   medium: M counted: t ≤ 0.80 (7) D takes M → AP 1; t ≥ 0.85 D is a false positive → 0. AP_medium = 7/10.
    //   all:    both counted: D takes M (higher IoU) for t ≤ 0.80: rc = [0.5] → 51/101; then 0.
    std::vector<EvaluationImage> images(1);
    images[0] = {{truth({0, 0, 30, 30}), truth({0, 0, 40, 40})}, {detection({0, 0, 36, 36}, 0.9f)}};
    const CocoEvaluation result = evaluate_coco(images, 1);
    EXPECT_NEAR(result.ap_small, 0.4, k_exact);
    EXPECT_NEAR(result.ap_medium, 0.7, k_exact);
    EXPECT_EQ(result.ap_large, -1.0);
    EXPECT_NEAR(result.ap, 0.7 * 51.0 / 101.0, k_exact);
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

// ---- brute force -----------------------------------------------------------------------------
// A second implementation, written from the definitions rather than from the engine's structure: a
// detection takes, among the unmatched ground truths with IoU ≥ t, one in the area range if there is any,
// of highest IoU, equal IoUs going to the later input index (pycocotools' loop does exactly this); ignored
// detections are dropped rather than kept as zero steps; precision at a recall point r is the maximum
// precision over every prefix whose recall reaches r (not a running maximum and a binary search).

struct BruteEntry {
    float score = 0;
    std::size_t image = 0;
    std::size_t rank = 0;  // position in its image's score order
    bool true_positive = false;
};

// Jittered boxes can come out inverted: box.hpp calls them empty (area 0, IoU 0 with everything).
double brute_area(const Box& box) {
    if (box.x_max <= box.x_min || box.y_max <= box.y_min) return 0;
    return (static_cast<double>(box.x_max) - box.x_min) * (static_cast<double>(box.y_max) - box.y_min);
}

double brute_iou(const Box& a, const Box& b) {
    const double overlap_x = std::max(0.0, std::min<double>(a.x_max, b.x_max) - std::max<double>(a.x_min, b.x_min));
    const double overlap_y = std::max(0.0, std::min<double>(a.y_max, b.y_max) - std::max<double>(a.y_min, b.y_min));
    const double intersection = overlap_x * overlap_y;
    return intersection > 0 ? intersection / (brute_area(a) + brute_area(b) - intersection) : 0.0;
}

bool brute_in_range(const Box& box, double min_area, double max_area) {
    return brute_area(box) >= min_area && brute_area(box) <= max_area;
}

// One class, one threshold, one area range: the counted detections of every image and the counted ground truth.
std::vector<BruteEntry> brute_entries(const std::vector<EvaluationImage>& images, std::int32_t class_id,
                                      double threshold, double min_area, double max_area, std::size_t max_detections,
                                      std::int64_t& counted_truths) {
    std::vector<BruteEntry> entries;
    for (std::size_t i = 0; i < images.size(); ++i) {
        std::vector<const LabeledBox*> truths;
        for (const LabeledBox& t : images[i].ground_truth)
            if (t.class_id == class_id) truths.push_back(&t);
        for (const LabeledBox* t : truths) counted_truths += brute_in_range(t->box, min_area, max_area) ? 1 : 0;
        std::vector<std::pair<float, std::size_t>> ranked;  // (score, input index)
        for (std::size_t d = 0; d < images[i].detections.size(); ++d) {
            if (images[i].detections[d].class_id == class_id) ranked.push_back({images[i].detections[d].score, d});
        }
        std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
            return a.first != b.first ? a.first > b.first : a.second < b.second;
        });
        if (ranked.size() > max_detections) ranked.resize(max_detections);
        std::vector<bool> taken(truths.size(), false);
        for (std::size_t rank = 0; rank < ranked.size(); ++rank) {
            const Box& box = images[i].detections[ranked[rank].second].box;
            std::ptrdiff_t chosen = -1;
            for (bool want_counted : {true, false}) {
                double chosen_iou = -1;
                for (std::size_t g = 0; g < truths.size(); ++g) {
                    const double iou = brute_iou(box, truths[g]->box);
                    if (taken[g] || iou < threshold ||
                        brute_in_range(truths[g]->box, min_area, max_area) != want_counted)
                        continue;
                    if (iou >= chosen_iou) chosen_iou = iou, chosen = static_cast<std::ptrdiff_t>(g);
                }
                if (chosen >= 0) break;
            }
            if (chosen >= 0) taken[static_cast<std::size_t>(chosen)] = true;
            const bool counted = chosen >= 0
                                     ? brute_in_range(truths[static_cast<std::size_t>(chosen)]->box, min_area, max_area)
                                     : brute_in_range(box, min_area, max_area);
            if (counted) entries.push_back({ranked[rank].first, i, rank, chosen >= 0});
        }
    }
    std::sort(entries.begin(), entries.end(), [](const BruteEntry& a, const BruteEntry& b) {
        if (a.score != b.score) return a.score > b.score;
        return a.image != b.image ? a.image < b.image : a.rank < b.rank;
    });
    return entries;
}

struct BruteResult {
    double ap = -1;  // -1 without counted ground truth
    double final_recall = -1;
};

BruteResult brute_force(const std::vector<EvaluationImage>& images, std::int32_t class_id, double threshold,
                        double min_area, double max_area, std::size_t max_detections) {
    std::int64_t counted = 0;
    const std::vector<BruteEntry> entries =
        brute_entries(images, class_id, threshold, min_area, max_area, max_detections, counted);
    if (counted == 0) return {};
    std::vector<double> precision, recall;
    double true_positives = 0;
    for (std::size_t j = 0; j < entries.size(); ++j) {
        true_positives += entries[j].true_positive ? 1 : 0;
        precision.push_back(true_positives / static_cast<double>(j + 1));
        recall.push_back(true_positives / static_cast<double>(counted));
    }
    double sum = 0;
    for (double point : numpy_recall_points()) {
        double best = 0;
        for (std::size_t j = 0; j < entries.size(); ++j)
            if (recall[j] >= point) best = std::max(best, precision[j]);
        sum += best;
    }
    return {sum / 101.0, recall.empty() ? 0.0 : recall.back()};
}

// Random images on an integer grid: ground truth of 3 classes (sides 4–130 px, so every area range
// occurs), detections jittered from it (some twice, some in the wrong class), random false positives,
// and a fourth class with detections only. Scores are multiples of 1/20, so equal scores are common.
std::vector<EvaluationImage> random_images(std::uint32_t seed) {
    std::mt19937 rng(seed);
    auto uniform = [&](int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng); };
    auto random_box = [&]() {
        const int x = uniform(0, 200), y = uniform(0, 200);
        return Box{static_cast<float>(x), static_cast<float>(y), static_cast<float>(x + uniform(4, 130)),
                   static_cast<float>(y + uniform(4, 130))};
    };
    auto jitter = [&](const Box& b) {
        return Box{b.x_min + static_cast<float>(uniform(-5, 5)), b.y_min + static_cast<float>(uniform(-5, 5)),
                   b.x_max + static_cast<float>(uniform(-5, 5)), b.y_max + static_cast<float>(uniform(-5, 5))};
    };
    auto score = [&]() { return static_cast<float>(uniform(1, 20)) / 20.0f; };
    std::vector<EvaluationImage> images(14);
    for (EvaluationImage& image : images) {
        const int truth_count = uniform(0, 9);
        for (int g = 0; g < truth_count; ++g) image.ground_truth.push_back({random_box(), uniform(0, 2)});
        for (const LabeledBox& t : image.ground_truth) {
            const int copies = uniform(0, 9) < 2 ? 0 : (uniform(0, 9) < 2 ? 2 : 1);
            for (int c = 0; c < copies; ++c) {
                const std::int32_t class_id = uniform(0, 9) == 0 ? (t.class_id + 1) % 3 : t.class_id;
                image.detections.push_back({jitter(t.box), class_id, score()});
            }
        }
        const int false_positives = uniform(0, 4);
        for (int f = 0; f < false_positives; ++f) image.detections.push_back({random_box(), uniform(0, 3), score()});
    }
    return images;
}

TEST(CocoEvaluation, AgreesWithABruteForceImplementation) {
    const std::array<std::array<double, 2>, 4> ranges = {
        {{0, 1e10}, {0, 32.0 * 32.0}, {32.0 * 32.0, 96.0 * 96.0}, {96.0 * 96.0, 1e10}}};
    for (std::uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
        const std::vector<EvaluationImage> images = random_images(seed);
        for (std::size_t max_detections : {std::size_t{100}, std::size_t{2}}) {
            const CocoEvaluation result = evaluate_coco(images, 4, {.max_detections_per_image = max_detections});
            std::array<std::vector<double>, 4> class_aps;  // per area range: AP@[.5:.95] of classes that have one
            std::vector<double> class_recalls;
            for (std::int32_t k = 0; k < 4; ++k) {
                const CocoClassResult& row = result.per_class[static_cast<std::size_t>(k)];
                for (std::size_t a = 0; a < ranges.size(); ++a) {
                    double ap_sum = 0, recall_sum = 0;
                    bool counted = true;
                    for (std::size_t t = 0; t < 10; ++t) {
                        const BruteResult brute = brute_force(images, k, k_numpy_iou_thresholds[t], ranges[a][0],
                                                              ranges[a][1], max_detections);
                        counted = brute.ap >= 0;
                        ap_sum += brute.ap;
                        recall_sum += brute.final_recall;
                        if (a == 0) {
                            EXPECT_NEAR(row.ap_per_threshold[t], brute.ap, k_exact)
                                << "seed " << seed << ", max " << max_detections << ", class " << k << ", threshold "
                                << t;
                        }
                    }
                    if (counted) class_aps[a].push_back(ap_sum / 10);
                    if (counted && a == 0) class_recalls.push_back(recall_sum / 10);
                    if (a == 0) {
                        EXPECT_NEAR(row.recall, counted ? recall_sum / 10 : -1.0, k_exact) << "class " << k;
                    }
                }
            }
            auto mean = [](const std::vector<double>& v) {
                return v.empty() ? -1.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
            };
            const std::string what = "seed " + std::to_string(seed) + ", max " + std::to_string(max_detections);
            EXPECT_NEAR(result.ap, mean(class_aps[0]), k_exact) << what;
            EXPECT_NEAR(result.ap_small, mean(class_aps[1]), k_exact) << what;
            EXPECT_NEAR(result.ap_medium, mean(class_aps[2]), k_exact) << what;
            EXPECT_NEAR(result.ap_large, mean(class_aps[3]), k_exact) << what;
            EXPECT_NEAR(result.ar100, mean(class_recalls), k_exact) << what;
            EXPECT_EQ(result.num_classes_with_ground_truth, static_cast<std::int32_t>(class_recalls.size())) << what;
        }
    }
}

}  // namespace
}  // namespace tessera::detection
