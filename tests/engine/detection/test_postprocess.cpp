// RetinaNet post-processing against torchvision 0.14's RetinaNet.postprocess_detections (fixture from
// reference/make_postprocess_reference.py: 256 × 192 input, levels 3..7, A = 9, K = 5, N = 2, three option
// sets: Tessera's defaults, truncation by top-k and max detections, and torchvision's RetinaNet defaults with
// its box coder weights (1, 1, 1, 1)), hand-computed cases on a tiny anchor set, a brute-force second implementation
// for ties and truncation, and the shape checks.
//
// Tolerances: corners |Δ| ≤ 1e-3 px against torchvision (it decodes in f32, Tessera in double) and 1e-4 px
// against hand values (exact in f32 up to rounding); scores |Δ| ≤ 1e-6 (f32 sigmoids); classes, order
// and counts exact. Anchors against the generator's own formula: |Δ| ≤ 1e-4 px.
#include "detection/nms.hpp"
#include "detection/postprocess.hpp"
#include "support/error_of.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <utility>

namespace tessera::detection {
namespace {

using nlohmann::json;

constexpr double k_corner_tolerance_torchvision = 1e-3;  // px
constexpr double k_corner_tolerance_hand = 1e-4;         // px
constexpr double k_score_tolerance = 1e-6;

// The heads' outputs for an anchor set: per level [N, A·K, H, W] logits and [N, A·4, H, W] codes.
struct HeadOutputs {
    std::vector<Tensor> classes;
    std::vector<Tensor> boxes;
};

HeadOutputs make_outputs(const AnchorSet& anchors, std::int64_t batch_size, std::int64_t num_classes,
                         float background_logit, float background_code = 0.0f) {
    HeadOutputs outputs;
    for (const LevelAnchors& level : anchors.levels) {
        const std::int64_t anchors_per_cell = level.anchors_per_cell();
        outputs.classes.push_back(Tensor::full<float>(
            {batch_size, anchors_per_cell * num_classes, level.height, level.width}, background_logit));
        outputs.boxes.push_back(
            Tensor::full<float>({batch_size, anchors_per_cell * 4, level.height, level.width}, background_code));
    }
    return outputs;
}

// Where one anchor's outputs live: level index into anchors.levels, cell and anchor within the cell.
struct Site {
    std::size_t level = 0;
    std::int64_t row = 0, column = 0, anchor = 0;
};

void set_logit(HeadOutputs& outputs, std::int64_t num_classes, std::int64_t image, const Site& site,
               std::int64_t class_id, float logit) {
    outputs.classes[site.level].at<float>({image, site.anchor * num_classes + class_id, site.row, site.column}) = logit;
}

void set_code(HeadOutputs& outputs, std::int64_t image, const Site& site, const BoxCode& code) {
    const float values[4] = {code.dx, code.dy, code.dw, code.dh};
    for (std::int64_t c = 0; c < 4; ++c) {
        outputs.boxes[site.level].at<float>({image, site.anchor * 4 + c, site.row, site.column}) = values[c];
    }
}

std::vector<std::vector<ScoredBox>> run(const HeadOutputs& outputs, const AnchorSet& anchors,
                                        const PostprocessOptions& options = {}) {
    return postprocess_detections(outputs.classes, outputs.boxes, anchors, options);
}

void expect_detection(const ScoredBox& actual, const Box& box, std::int32_t class_id, double score,
                      const std::string& what) {
    EXPECT_EQ(actual.class_id, class_id) << what;
    EXPECT_NEAR(actual.score, score, k_score_tolerance) << what;
    EXPECT_NEAR(actual.box.x_min, box.x_min, k_corner_tolerance_hand) << what;
    EXPECT_NEAR(actual.box.y_min, box.y_min, k_corner_tolerance_hand) << what;
    EXPECT_NEAR(actual.box.x_max, box.x_max, k_corner_tolerance_hand) << what;
    EXPECT_NEAR(actual.box.y_max, box.y_max, k_corner_tolerance_hand) << what;
}

// ---------------------------------------------------------------------------------------------------------
// torchvision fixture

const json& reference() {
    static const json parsed = [] {
        std::ifstream in(TESSERA_SOURCE_DIR "/tests/engine/detection/reference/postprocess_reference.json");
        EXPECT_TRUE(in.good()) << "missing reference/postprocess_reference.json";
        return json::parse(in);
    }();
    return parsed;
}

AnchorSet fixture_anchors() {
    const json& ref = reference();
    AnchorOptions options;
    options.min_level = ref.at("levels").front().get<int>();
    options.max_level = ref.at("levels").back().get<int>();
    options.num_scales = ref.at("num_scales").get<int>();
    options.aspect_ratios = ref.at("aspect_ratios").get<std::vector<double>>();
    options.anchor_scale = ref.at("anchor_scale").get<double>();
    return make_anchors(ref.at("image_height").get<std::int64_t>(), ref.at("image_width").get<std::int64_t>(), options);
}

// The fixture's inputs: background logits by the generator's formula, NaN codes, then its overrides.
HeadOutputs fixture_outputs(const AnchorSet& anchors) {
    const json& ref = reference();
    const auto batch_size = ref.at("batch_size").get<std::int64_t>();
    const auto num_classes = ref.at("num_classes").get<std::int64_t>();
    HeadOutputs outputs = make_outputs(anchors, batch_size, num_classes, 0.0f, std::nanf(""));
    for (Tensor& level_logits : outputs.classes) {
        float* logits = level_logits.data<float>();
        for (std::int64_t element = 0; element < level_logits.num_elements(); ++element) {
            logits[element] = static_cast<float>(-4.0 - static_cast<double>(element % 89) / 16.0);
        }
    }
    const int min_level = anchors.levels.front().level;
    for (const json& record : ref.at("logits")) {  // [image, level, channel, row, column, logit]
        const auto level = static_cast<std::size_t>(record.at(1).get<int>() - min_level);
        outputs.classes[level].at<float>({record.at(0).get<std::int64_t>(), record.at(2).get<std::int64_t>(),
                                          record.at(3).get<std::int64_t>(), record.at(4).get<std::int64_t>()}) =
            record.at(5).get<float>();
    }
    for (const json& record : ref.at("codes")) {  // [image, level, anchor, row, column, dx, dy, dw, dh]
        const Site site{static_cast<std::size_t>(record.at(1).get<int>() - min_level), record.at(3).get<std::int64_t>(),
                        record.at(4).get<std::int64_t>(), record.at(2).get<std::int64_t>()};
        set_code(outputs, record.at(0).get<std::int64_t>(), site,
                 {record.at(5).get<float>(), record.at(6).get<float>(), record.at(7).get<float>(),
                  record.at(8).get<float>()});
    }
    return outputs;
}

TEST(Postprocess, FixtureAnchorsMatchTheGeneratorsFormula) {
    const AnchorSet anchors = fixture_anchors();
    ASSERT_EQ(anchors.count(), (32 * 24 + 16 * 12 + 8 * 6 + 4 * 3 + 2 * 2) * 9);
    const json& samples = reference().at("anchor_samples");  // [global index, x_min, y_min, x_max, y_max]
    ASSERT_GE(samples.size(), 40u);
    for (const json& sample : samples) {
        const Box& box = anchors.boxes[sample.at(0).get<std::size_t>()];
        const std::string what = "anchor " + std::to_string(sample.at(0).get<std::int64_t>());
        EXPECT_NEAR(box.x_min, sample.at(1).get<double>(), 1e-4) << what;
        EXPECT_NEAR(box.y_min, sample.at(2).get<double>(), 1e-4) << what;
        EXPECT_NEAR(box.x_max, sample.at(3).get<double>(), 1e-4) << what;
        EXPECT_NEAR(box.y_max, sample.at(4).get<double>(), 1e-4) << what;
    }
}

TEST(Postprocess, MatchesTorchvisionPostprocessDetections) {
    const AnchorSet anchors = fixture_anchors();
    const HeadOutputs outputs = fixture_outputs(anchors);
    const json& cases = reference().at("cases");
    ASSERT_EQ(cases.size(), 3u);
    for (const json& reference_case : cases) {
        const json& settings = reference_case.at("options");
        PostprocessOptions options;
        options.score_threshold = settings.at("score_threshold").get<float>();
        options.top_k_per_level = settings.at("top_k_per_level").get<std::size_t>();
        options.nms_iou_threshold = settings.at("nms_iou_threshold").get<float>();
        options.max_detections = settings.at("max_detections").get<std::size_t>();
        const auto weights = settings.at("box_coder_weights").get<std::vector<double>>();
        options.box_coder_weights = {weights.at(0), weights.at(1), weights.at(2), weights.at(3)};
        const auto detections = run(outputs, anchors, options);
        const json& images = reference_case.at("images");
        ASSERT_EQ(detections.size(), images.size());
        for (std::size_t image = 0; image < images.size(); ++image) {
            const json& expected = images[image];
            const std::string what = "options " + settings.dump() + ", image " + std::to_string(image);
            ASSERT_EQ(detections[image].size(), expected.at("labels").size()) << what;
            for (std::size_t i = 0; i < detections[image].size(); ++i) {
                const ScoredBox& actual = detections[image][i];
                const json& box = expected.at("boxes").at(i);
                const std::string at = what + ", detection " + std::to_string(i);
                EXPECT_EQ(actual.class_id, expected.at("labels").at(i).get<int>()) << at;
                EXPECT_NEAR(actual.score, expected.at("scores").at(i).get<double>(), k_score_tolerance) << at;
                EXPECT_NEAR(actual.box.x_min, box.at(0).get<double>(), k_corner_tolerance_torchvision) << at;
                EXPECT_NEAR(actual.box.y_min, box.at(1).get<double>(), k_corner_tolerance_torchvision) << at;
                EXPECT_NEAR(actual.box.x_max, box.at(2).get<double>(), k_corner_tolerance_torchvision) << at;
                EXPECT_NEAR(actual.box.y_max, box.at(3).get<double>(), k_corner_tolerance_torchvision) << at;
            }
        }
    }
}

TEST(Postprocess, DefaultsAreTorchvisionsExceptMaxDetections) {
    const PostprocessOptions options;
    EXPECT_EQ(options.score_threshold, 0.05f);
    EXPECT_EQ(options.top_k_per_level, 1000u);
    EXPECT_EQ(options.nms_iou_threshold, 0.5f);
    EXPECT_EQ(options.max_detections, 100u);  // torchvision: 300
    EXPECT_EQ(options.box_coder_weights.x, 10.0);
    EXPECT_EQ(options.box_coder_weights.height, 5.0);
}

// ---------------------------------------------------------------------------------------------------------
// Hand-computed cases. A 48 × 64 (H × W) input, levels 3..4, one square anchor per cell (A = 1) of
// 4·stride: level 3 has 6 × 8 cells of 32-px anchors, level 4 has 3 × 4 cells of 64-px anchors. The anchor
// of cell (row i, column j) is centred at ((j + 0.5)·stride, (i + 0.5)·stride). K = 2. Background logit −10
// (sigmoid 4.5e-5), codes 0.

constexpr std::int64_t k_hand_classes = 2;

AnchorSet hand_anchors() {
    AnchorOptions options;
    options.min_level = 3;
    options.max_level = 4;
    options.num_scales = 1;
    options.aspect_ratios = {1.0};
    return make_anchors(48, 64, options);
}

HeadOutputs hand_outputs(const AnchorSet& anchors, std::int64_t batch_size = 1) {
    return make_outputs(anchors, batch_size, k_hand_classes, -10.0f);
}

TEST(Postprocess, SingleStrongLogitDecodesToItsAnchor) {
    // Level 3, cell (2, 5), class 1, logit 2: centre (44, 20), 32 px → [28, 4, 60, 36]; 1 / (1 + e^−2).
    const AnchorSet anchors = hand_anchors();
    HeadOutputs outputs = hand_outputs(anchors);
    set_logit(outputs, k_hand_classes, 0, {0, 2, 5, 0}, 1, 2.0f);
    const auto detections = run(outputs, anchors);
    ASSERT_EQ(detections.size(), 1u);
    ASSERT_EQ(detections[0].size(), 1u);
    expect_detection(detections[0][0], {28, 4, 60, 36}, 1, 0.8807970779778823, "strong logit");
}

TEST(Postprocess, CodesMoveTheBoxByTheDocumentedAmount) {
    // Level 3, cell (3, 3): anchor centre (28, 28), 32 × 32.
    // Image 0: dx = 2.5 → +2.5/10·32 = +8 → x 36; dy = −1.25 → −4 → y 24; dw = 5·ln 1.5 → width 48;
    //          dh = 0 → height 32: [12, 8, 60, 40].
    // Image 1: dh = 25 → 25/5 = 5 is clamped to ln(1000/16): height 62.5·32 = 2000, y 28 ± 1000, clipped to
    //          [0, 48]; x unchanged [12, 44].
    const AnchorSet anchors = hand_anchors();
    HeadOutputs outputs = hand_outputs(anchors, 2);
    const Site site{0, 3, 3, 0};
    for (std::int64_t image : {0, 1}) set_logit(outputs, k_hand_classes, image, site, 0, 3.0f);
    set_code(outputs, 0, site, {2.5f, -1.25f, static_cast<float>(5 * std::log(1.5)), 0.0f});
    set_code(outputs, 1, site, {0.0f, 0.0f, 0.0f, 25.0f});
    const auto detections = run(outputs, anchors);
    ASSERT_EQ(detections.size(), 2u);
    ASSERT_EQ(detections[0].size(), 1u);
    ASSERT_EQ(detections[1].size(), 1u);
    expect_detection(detections[0][0], {12, 8, 60, 40}, 0, 0.9525741268224334, "moved box");
    expect_detection(detections[1][0], {12, 0, 44, 48}, 0, 0.9525741268224334, "clamped dh");
}

TEST(Postprocess, ClipsToTheImageWidthAndHeight) {
    // Level 4 (64-px anchors): cell (2, 3) centre (56, 40) → [24, 8, 88, 72] → clipped to the 64-wide,
    // 48-high image: [24, 8, 64, 48]. Cell (0, 0) centre (8, 8) → [−24, −24, 40, 40] → [0, 0, 40, 40].
    // (IoU of the two clipped boxes 512 / 2688: no suppression.)
    const AnchorSet anchors = hand_anchors();
    HeadOutputs outputs = hand_outputs(anchors);
    set_logit(outputs, k_hand_classes, 0, {1, 2, 3, 0}, 0, 3.0f);
    set_logit(outputs, k_hand_classes, 0, {1, 0, 0, 0}, 0, 1.0f);
    const auto detections = run(outputs, anchors);
    ASSERT_EQ(detections[0].size(), 2u);
    expect_detection(detections[0][0], {24, 8, 64, 48}, 0, 0.9525741268224334, "bottom-right corner");
    expect_detection(detections[0][1], {0, 0, 40, 40}, 0, 0.7310585786300049, "top-left corner");
}

TEST(Postprocess, NmsSuppressesWithinAClassOnly) {
    // Level 3 cells (2, 2) and (2, 3): [4, 4, 36, 36] and [12, 4, 44, 36], IoU 24·32 / (2·1024 − 768) = 0.6.
    const AnchorSet anchors = hand_anchors();
    const Site left{0, 2, 2, 0}, right{0, 2, 3, 0};
    HeadOutputs same_class = hand_outputs(anchors);
    set_logit(same_class, k_hand_classes, 0, left, 0, 2.0f);
    set_logit(same_class, k_hand_classes, 0, right, 0, 3.0f);
    const auto one = run(same_class, anchors);
    ASSERT_EQ(one[0].size(), 1u);
    expect_detection(one[0][0], {12, 4, 44, 36}, 0, 0.9525741268224334, "the better of one class");
    // IoU 0.6 is not above 0.7: both stay.
    EXPECT_EQ(run(same_class, anchors, {.nms_iou_threshold = 0.7f})[0].size(), 2u);

    HeadOutputs two_classes = hand_outputs(anchors);
    set_logit(two_classes, k_hand_classes, 0, left, 1, 2.0f);
    set_logit(two_classes, k_hand_classes, 0, right, 0, 3.0f);
    const auto both = run(two_classes, anchors);
    ASSERT_EQ(both[0].size(), 2u);
    expect_detection(both[0][0], {12, 4, 44, 36}, 0, 0.9525741268224334, "class 0");
    expect_detection(both[0][1], {4, 4, 36, 36}, 1, 0.8807970779778823, "class 1");
}

TEST(Postprocess, ScoreThresholdIsStrict) {
    // logit(0.05) = ln(0.05 / 0.95) = −2.944439. Image 0: −2.95 and −2.94445 (sigmoid 0.05 − 5.2e-7): nothing.
    // Image 1: −2.94443 (sigmoid 0.05 + 4.2e-7, far above the f32 rounding of 4e-9) passes, at level 3 cell
    // (1, 1): [−4, −4, 28, 28] → [0, 0, 28, 28].
    const AnchorSet anchors = hand_anchors();
    HeadOutputs outputs = hand_outputs(anchors, 2);
    set_logit(outputs, k_hand_classes, 0, {0, 1, 1, 0}, 0, -2.95f);
    set_logit(outputs, k_hand_classes, 0, {0, 4, 6, 0}, 1, -2.94445f);
    set_logit(outputs, k_hand_classes, 1, {0, 1, 1, 0}, 1, -2.94443f);
    const auto detections = run(outputs, anchors);
    ASSERT_EQ(detections.size(), 2u);
    EXPECT_TRUE(detections[0].empty());
    ASSERT_EQ(detections[1].size(), 1u);
    expect_detection(detections[1][0], {0, 0, 28, 28}, 1, 0.05000042115224586, "just above");
    // A threshold of 1 passes nothing, not even a saturated logit; an empty batch gives no lists.
    set_logit(outputs, k_hand_classes, 1, {0, 1, 1, 0}, 1, 50.0f);
    EXPECT_TRUE(run(outputs, anchors, {.score_threshold = 1.0f})[1].empty());
    const HeadOutputs no_images = hand_outputs(anchors, 0);
    EXPECT_TRUE(run(no_images, anchors).empty());
}

TEST(Postprocess, EqualScoresRankByFlatIndex) {
    // Equal logits 1 at level 3 cell (1, 0) class 0 (flat index (1·8 + 0)·2 + 0 = 16, but channel 0, met
    // first in memory) and cell (0, 5) class 1 (flat index (0·8 + 5)·2 + 1 = 11), and at level 4 cell (0, 0)
    // class 0 (later level). Boxes: [−12, −4, 20, 28] → [0, 0, 20, 28], [28, −12, 60, 20] → [28, 0, 60, 20],
    // level 4 [−24, −24, 40, 40] → [0, 0, 40, 40]; class 0's two overlap by 560 / 1600 = 0.35: no suppression.
    const AnchorSet anchors = hand_anchors();
    HeadOutputs outputs = hand_outputs(anchors);
    set_logit(outputs, k_hand_classes, 0, {0, 1, 0, 0}, 0, 1.0f);
    set_logit(outputs, k_hand_classes, 0, {0, 0, 5, 0}, 1, 1.0f);
    set_logit(outputs, k_hand_classes, 0, {1, 0, 0, 0}, 0, 1.0f);
    const double score = 0.7310585786300049;
    const auto all = run(outputs, anchors);
    ASSERT_EQ(all[0].size(), 3u);
    expect_detection(all[0][0], {28, 0, 60, 20}, 1, score, "flat index 11");
    expect_detection(all[0][1], {0, 0, 20, 28}, 0, score, "flat index 16");
    expect_detection(all[0][2], {0, 0, 40, 40}, 0, score, "level 4");
    // top_k_per_level 1 keeps the lower flat index of level 3.
    const auto top_one = run(outputs, anchors, {.top_k_per_level = 1});
    ASSERT_EQ(top_one[0].size(), 2u);
    expect_detection(top_one[0][0], {28, 0, 60, 20}, 1, score, "level 3's top 1");
    expect_detection(top_one[0][1], {0, 0, 40, 40}, 0, score, "level 4's top 1");
}

TEST(Postprocess, TopKPerLevelThenMaxDetections) {
    // Level 3 (class 0), disjoint 32-px boxes: cells (0, 0), (0, 4), (5, 0) with logits 3, 2, 1.
    // Level 4 (class 1): cells (0, 3), (2, 0) with logits 2.5, 0.5.
    // top_k 2: level 3 keeps 3 and 2, level 4 both; by score 3 (L3), 2.5 (L4), 2 (L3), 0.5 (L4).
    const AnchorSet anchors = hand_anchors();
    HeadOutputs outputs = hand_outputs(anchors);
    set_logit(outputs, k_hand_classes, 0, {0, 5, 0, 0}, 0, 1.0f);
    set_logit(outputs, k_hand_classes, 0, {0, 0, 0, 0}, 0, 3.0f);
    set_logit(outputs, k_hand_classes, 0, {0, 0, 4, 0}, 0, 2.0f);
    set_logit(outputs, k_hand_classes, 0, {1, 0, 3, 0}, 1, 2.5f);
    set_logit(outputs, k_hand_classes, 0, {1, 2, 0, 0}, 1, 0.5f);
    const auto top_two = run(outputs, anchors, {.top_k_per_level = 2});
    ASSERT_EQ(top_two[0].size(), 4u);
    expect_detection(top_two[0][0], {0, 0, 20, 20}, 0, 0.9525741268224334, "L3 (0, 0)");   // [−12, −12, 20, 20]
    expect_detection(top_two[0][1], {24, 0, 64, 40}, 1, 0.9241418199787566, "L4 (0, 3)");  // [24, −24, 88, 40]
    expect_detection(top_two[0][2], {20, 0, 52, 20}, 0, 0.8807970779778823, "L3 (0, 4)");  // [20, −12, 52, 20]
    expect_detection(top_two[0][3], {0, 8, 40, 48}, 1, 0.6224593312018546, "L4 (2, 0)");   // [−24, 8, 40, 72]
    const auto three = run(outputs, anchors, {.top_k_per_level = 2, .max_detections = 3});
    ASSERT_EQ(three[0].size(), 3u);
    EXPECT_NEAR(three[0][2].score, 0.8807970779778823, k_score_tolerance);
    EXPECT_EQ(run(outputs, anchors)[0].size(), 5u);
    EXPECT_TRUE(run(outputs, anchors, {.top_k_per_level = 0})[0].empty());
}

TEST(Postprocess, ReadsStridedOutputs) {
    // The same outputs as views into wider tensors (W + 3 columns): same detections.
    const AnchorSet anchors = hand_anchors();
    HeadOutputs outputs = hand_outputs(anchors);
    set_logit(outputs, k_hand_classes, 0, {0, 2, 5, 0}, 1, 2.0f);
    set_logit(outputs, k_hand_classes, 0, {1, 1, 2, 0}, 0, 1.5f);
    set_code(outputs, 0, {1, 1, 2, 0}, {1.0f, -2.0f, 0.5f, 0.25f});
    HeadOutputs strided;
    for (std::size_t level = 0; level < outputs.classes.size(); ++level) {
        for (auto [source, target] :
             {std::pair{&outputs.classes[level], &strided.classes}, std::pair{&outputs.boxes[level], &strided.boxes}}) {
            Shape wide = source->shape();
            wide[3] += 3;
            const Tensor wider = Tensor::full<float>(wide, std::nanf(""));
            Tensor view = wider.view_box({0, 0, 0, 2}, {wide[0], wide[1], wide[2], source->dim(3)});
            view.copy_from(*source);
            ASSERT_FALSE(view.is_contiguous());
            target->push_back(view);
        }
    }
    const auto expected = run(outputs, anchors);
    const auto actual = run(strided, anchors);
    ASSERT_EQ(expected[0].size(), 2u);
    ASSERT_EQ(actual[0].size(), 2u);
    for (std::size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(actual[0][i].box, expected[0][i].box);
        EXPECT_EQ(actual[0][i].score, expected[0][i].score);
        EXPECT_EQ(actual[0][i].class_id, expected[0][i].class_id);
    }
}

// ---------------------------------------------------------------------------------------------------------
// A brute-force second implementation: every logit in (row, column, anchor, class) order through
// Tensor::at, a full stable sort by score (so equal scores stay in flat order), the first top_k per level,
// then decode_box, clipping and batched NMS (tested on their own). Logits take few distinct values, so
// ties are everywhere, and most pass the threshold, so the bounded selection discards many times.

std::vector<std::vector<ScoredBox>> brute_force(const HeadOutputs& outputs, const AnchorSet& anchors,
                                                std::int64_t num_classes, const PostprocessOptions& options) {
    const std::int64_t batch_size = outputs.classes.front().dim(0);
    std::vector<std::vector<ScoredBox>> result;
    for (std::int64_t image = 0; image < batch_size; ++image) {
        std::vector<ScoredBox> candidates;
        for (std::size_t l = 0; l < anchors.levels.size(); ++l) {
            const LevelAnchors& level = anchors.levels[l];
            std::vector<ScoredBox> level_candidates;  // in flat order
            for (std::int64_t row = 0; row < level.height; ++row) {
                for (std::int64_t column = 0; column < level.width; ++column) {
                    for (std::int64_t anchor = 0; anchor < level.anchors_per_cell(); ++anchor) {
                        for (std::int64_t k = 0; k < num_classes; ++k) {
                            const float logit =
                                outputs.classes[l].at<float>({image, anchor * num_classes + k, row, column});
                            const auto score = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(logit))));
                            if (!(score > options.score_threshold)) continue;
                            const Tensor& codes = outputs.boxes[l];
                            const BoxCode code{codes.at<float>({image, anchor * 4 + 0, row, column}),
                                               codes.at<float>({image, anchor * 4 + 1, row, column}),
                                               codes.at<float>({image, anchor * 4 + 2, row, column}),
                                               codes.at<float>({image, anchor * 4 + 3, row, column})};
                            Box box = decode_box(code, level.box(row, column, anchor));
                            const auto width = static_cast<float>(anchors.image_width);
                            const auto height = static_cast<float>(anchors.image_height);
                            box = {std::min(std::max(box.x_min, 0.0f), width),
                                   std::min(std::max(box.y_min, 0.0f), height),
                                   std::min(std::max(box.x_max, 0.0f), width),
                                   std::min(std::max(box.y_max, 0.0f), height)};
                            level_candidates.push_back({box, static_cast<std::int32_t>(k), score});
                        }
                    }
                }
            }
            std::stable_sort(level_candidates.begin(), level_candidates.end(),
                             [](const ScoredBox& a, const ScoredBox& b) { return a.score > b.score; });
            level_candidates.resize(std::min(level_candidates.size(), options.top_k_per_level));
            candidates.insert(candidates.end(), level_candidates.begin(), level_candidates.end());
        }
        std::vector<ScoredBox> kept;
        for (std::size_t index : batched_non_maximum_suppression(
                 candidates, {.iou_threshold = options.nms_iou_threshold, .max_detections = options.max_detections})) {
            kept.push_back(candidates[index]);
        }
        result.push_back(kept);
    }
    return result;
}

TEST(Postprocess, MatchesABruteForceImplementationWithTies) {
    const AnchorSet anchors = make_anchors(128, 96);  // A = 9, levels 3..7: 2,079 anchors
    constexpr std::int64_t num_classes = 3;
    HeadOutputs outputs = make_outputs(anchors, 2, num_classes, 0.0f);
    std::mt19937 generator(7);
    std::uniform_int_distribution<int> pick(0, 5);
    const float logit_values[6] = {-6.0f, -1.0f, 0.0f, 0.5f, 1.0f, 2.0f};  // one in six below 0.05
    std::normal_distribution<float> code(0.0f, 0.5f);
    for (std::size_t level = 0; level < outputs.classes.size(); ++level) {
        float* logits = outputs.classes[level].data<float>();
        for (std::int64_t i = 0; i < outputs.classes[level].num_elements(); ++i)
            logits[i] = logit_values[pick(generator)];
        float* codes = outputs.boxes[level].data<float>();
        for (std::int64_t i = 0; i < outputs.boxes[level].num_elements(); ++i) codes[i] = code(generator);
    }
    const std::vector<PostprocessOptions> option_sets = {
        {},
        {.top_k_per_level = 50, .max_detections = 20},
        {.score_threshold = 0.6f, .top_k_per_level = 7, .nms_iou_threshold = 0.3f},
        {.top_k_per_level = 1, .max_detections = 1000},
    };
    for (std::size_t set = 0; set < option_sets.size(); ++set) {
        const PostprocessOptions& options = option_sets[set];
        const auto expected = brute_force(outputs, anchors, num_classes, options);
        const auto actual = run(outputs, anchors, options);
        ASSERT_EQ(actual.size(), expected.size());
        for (std::size_t image = 0; image < expected.size(); ++image) {
            const std::string what = "option set " + std::to_string(set) + ", image " + std::to_string(image);
            ASSERT_FALSE(expected[image].empty()) << what;
            ASSERT_EQ(actual[image].size(), expected[image].size()) << what;
            for (std::size_t i = 0; i < expected[image].size(); ++i) {
                const ScoredBox& e = expected[image][i];
                expect_detection(actual[image][i], e.box, e.class_id, e.score,
                                 what + ", detection " + std::to_string(i));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Errors

void expect_error(const std::function<void()>& action, const std::string& expected) {
    const std::string message = test::error_of(action);
    EXPECT_NE(message.find(expected), std::string::npos) << message;
}

TEST(Postprocess, RejectsOutputsThatDoNotFitTheAnchors) {
    const AnchorSet anchors = hand_anchors();
    const HeadOutputs good = hand_outputs(anchors, 2);
    {
        HeadOutputs missing = good;
        missing.classes.pop_back();
        expect_error([&] { run(missing, anchors); },
                     "expected one class output and one box output per anchor level (2, levels 3..4), got 1 class "
                     "and 2 box outputs");
    }
    {
        HeadOutputs transposed = good;
        transposed.classes[1] = Tensor::zeros({2, 2, 4, 3}, DType::F32);
        expect_error([&] { run(transposed, anchors); },
                     "expected the class output of level 4 to have a 3 × 4 feature map (stride 16 on the anchors' "
                     "48 × 64 input), got 4 × 3");
    }
    {
        HeadOutputs flat = good;
        flat.boxes[0] = Tensor::zeros({2, 4, 48}, DType::F32);
        expect_error([&] { run(flat, anchors); },
                     "expected the box output of level 3 as [N, A·4, H, W] f32, got [2, 4, 48]");
    }
    {
        HeadOutputs integers = good;
        integers.classes[0] = Tensor::zeros({2, 2, 6, 8}, DType::I32);
        expect_error([&] { run(integers, anchors); }, "as [N, A·K, H, W] f32, got [2, 2, 6, 8] i32");
    }
    {
        HeadOutputs batch = good;
        batch.boxes[1] = Tensor::zeros({3, 4, 3, 4}, DType::F32);
        expect_error([&] { run(batch, anchors); },
                     "expected batch size 2 (level 3's) on every output, got 2 class and "
                     "3 box rows at level 4");
    }
    {
        HeadOutputs classes = good;
        classes.classes[1] = Tensor::zeros({2, 3, 3, 4}, DType::F32);
        expect_error([&] { run(classes, anchors); },
                     "expected K = 2 classes (level 3's) on every level, got 3 at level 4");
    }
    {
        HeadOutputs codes = good;
        codes.boxes[0] = Tensor::zeros({2, 5, 6, 8}, DType::F32);
        expect_error([&] { run(codes, anchors); },
                     "expected the box output of level 3 to have A·4 = 4 channels (A = 1), got 5");
    }
    expect_error([&] { run(good, anchors, {.score_threshold = 1.5f}); },
                 "expected a score threshold in [0, 1], got 1.5");
    expect_error([&] { run(good, anchors, {.nms_iou_threshold = -0.1f}); },
                 "expected an NMS IoU threshold in [0, 1], got -0.1");
}

TEST(Postprocess, RejectsClassChannelsThatAreNotAMultipleOfA) {
    AnchorOptions options;
    options.min_level = 3;
    options.max_level = 3;
    options.num_scales = 1;
    options.aspect_ratios = {1.0, 2.0};  // A = 2
    const AnchorSet anchors = make_anchors(16, 16, options);
    const std::vector<Tensor> classes = {Tensor::zeros({1, 3, 2, 2}, DType::F32)};
    const std::vector<Tensor> boxes = {Tensor::zeros({1, 8, 2, 2}, DType::F32)};
    expect_error([&] { postprocess_detections(classes, boxes, anchors); },
                 "expected the class output of level 3 to have A·K channels with A = 2 anchors per cell, got 3 "
                 "channels (not a positive multiple of 2)");
}

TEST(Postprocess, NanCodesAreAnErrorOnlyWhereDecoded) {
    // NaN codes everywhere: fine while nothing passes the threshold; the one candidate's NaN is reported.
    const AnchorSet anchors = hand_anchors();
    HeadOutputs outputs = make_outputs(anchors, 1, k_hand_classes, -10.0f, std::nanf(""));
    EXPECT_TRUE(run(outputs, anchors)[0].empty());
    set_logit(outputs, k_hand_classes, 0, {1, 2, 1, 0}, 1, 4.0f);
    expect_error([&] { run(outputs, anchors); }, "of image 0, level 4, cell (2, 1), anchor 0 decode to NaN");
    // A NaN logit never passes the threshold (as in torchvision).
    HeadOutputs nan_logit = hand_outputs(anchors);
    set_logit(nan_logit, k_hand_classes, 0, {0, 0, 0, 0}, 0, std::nanf(""));
    EXPECT_TRUE(run(nan_logit, anchors)[0].empty());
}

}  // namespace
}  // namespace tessera::detection
