// Detection targets and RetinaNet's losses against torchvision 0.14 / torch 1.13, from the committed
// fixture reference/torchvision_reference.json (written by reference/make_torchvision_reference.py).
// Inputs are f32 in the fixture; torchvision's references are float64 from those inputs (except box_iou,
// run in float32 as torchvision runs it).
//
// Tolerances:
//   box codes (encode_single):     |Δ| ≤ 1e-5·|ref| + 1e-6 (the absolute floor for codes near 0)
//   decoded corners (decode_single): |Δ| ≤ 1e-5·max(|ref|, 1 px)
//   box_iou:                        |Δ| ≤ 1e-6; where torchvision gives NaN (both boxes of zero area: 0 / 0)
//                                   Tessera gives 0, by design (padding rows must give 0)
//   matcher:                        exact
//   focal / smooth L1 values:       relative 1e-5; gradients |Δ| ≤ 1e-6 + 1e-5·|ref|
#include "detection/box_coder.hpp"
#include "detection/matcher.hpp"
#include "loss/focal_loss.hpp"
#include "loss/smooth_l1_loss.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

namespace tessera::detection {
namespace {

using nlohmann::json;

const json& reference() {
    static const json parsed = [] {
        std::ifstream in(TESSERA_SOURCE_DIR "/tests/engine/detection/reference/torchvision_reference.json");
        EXPECT_TRUE(in.good()) << "missing reference/torchvision_reference.json";
        return json::parse(in);
    }();
    return parsed;
}

// A JSON [rows][columns] of numbers as an f32 tensor (the fixture's inputs are exact f32 values).
Tensor tensor_of(const json& rows) {
    const auto count = static_cast<std::int64_t>(rows.size());
    const auto columns = static_cast<std::int64_t>(rows.at(0).size());
    Tensor t = Tensor::empty({count, columns}, DType::F32);
    for (std::int64_t r = 0; r < count; ++r) {
        for (std::int64_t c = 0; c < columns; ++c) t.at<float>({r, c}) = rows.at(r).at(c).get<float>();
    }
    return t;
}

std::vector<Box> boxes_of(const json& rows) {
    std::vector<Box> boxes;
    for (const json& r : rows)
        boxes.push_back({r.at(0).get<float>(), r.at(1).get<float>(), r.at(2).get<float>(), r.at(3).get<float>()});
    return boxes;
}

void expect_close(double actual, double expected, double atol, double rtol, const std::string& what) {
    EXPECT_LE(std::fabs(actual - expected), atol + rtol * std::fabs(expected))
        << what << ": " << actual << " vs torchvision " << expected;
}

TEST(TorchvisionReference, BoxCoderEncode) {
    const json& c = reference().at("box_coder");
    const Tensor codes = encode_boxes(tensor_of(c.at("targets")), tensor_of(c.at("anchors")));
    const json& expected = c.at("codes");
    for (std::int64_t r = 0; r < codes.dim(0); ++r) {
        for (std::int64_t k = 0; k < 4; ++k) {
            expect_close(codes.at<float>({r, k}), expected.at(r).at(k).get<double>(), 1e-6, 1e-5,
                         "code " + std::to_string(r) + "." + std::to_string(k));
        }
    }
    EXPECT_NEAR(k_box_code_clamp, c.at("bbox_xform_clip").get<double>(), 1e-15);
}

TEST(TorchvisionReference, BoxCoderDecodeWithClamp) {
    const json& c = reference().at("box_coder");
    const Tensor boxes = decode_boxes(tensor_of(c.at("decode_codes")), tensor_of(c.at("anchors")));
    const json& expected = c.at("decoded");
    for (std::int64_t r = 0; r < boxes.dim(0); ++r) {
        for (std::int64_t k = 0; k < 4; ++k) {
            const double ref = expected.at(r).at(k).get<double>();
            const double actual = boxes.at<float>({r, k});
            EXPECT_LE(std::fabs(actual - ref), 1e-5 * std::max(1.0, std::fabs(ref)))
                << "decoded " << r << "." << k << ": " << actual << " vs torchvision " << ref;
        }
    }
}

TEST(TorchvisionReference, BoxIou) {
    const json& c = reference().at("box_iou");
    const std::vector<Box> first = boxes_of(c.at("boxes1"));
    const std::vector<Box> second = boxes_of(c.at("boxes2"));
    const Tensor iou = iou_matrix(first, second);
    int nan_cases = 0;
    for (std::size_t r = 0; r < first.size(); ++r) {
        for (std::size_t k = 0; k < second.size(); ++k) {
            const float ours = iou.at<float>({static_cast<std::int64_t>(r), static_cast<std::int64_t>(k)});
            const json& ref = c.at("iou").at(r).at(k);
            if (ref.is_null()) {  // torchvision: 0 / (0 + 0 − 0)
                EXPECT_EQ(first[r].area(), 0.0f);
                EXPECT_EQ(second[k].area(), 0.0f);
                EXPECT_EQ(ours, 0.0f);
                ++nan_cases;
            } else {
                EXPECT_NEAR(ours, ref.get<double>(), 1e-6) << "iou " << r << ", " << k;
            }
        }
    }
    EXPECT_EQ(nan_cases, 4);  // two zero-area boxes on each side
}

std::vector<std::int32_t> ints_of(const json& values) {
    return values.get<std::vector<std::int32_t>>();
}

MatcherOptions torchvision_like(bool force) {
    MatcherOptions options;
    options.matched_threshold = 0.5f;    // torchvision's high_threshold
    options.unmatched_threshold = 0.4f;  // low_threshold
    options.negatives_lower_than_unmatched = true;
    options.force_match_for_each_row = force;
    return options;
}

TEST(TorchvisionReference, MatcherWithoutLowQualityMatches) {
    // Matcher(0.5, 0.4, allow_low_quality_matches=False) is the argmax matcher with negatives below the
    // unmatched threshold and no force match: −1 below 0.4, −2 in [0.4, 0.5), the argmax row above.
    const json& c = reference().at("matcher");
    const Tensor iou = tensor_of(c.at("iou"));
    EXPECT_EQ(match_anchors(iou, iou.dim(0), torchvision_like(false)), ints_of(c.at("matches")));
}

TEST(TorchvisionReference, LowQualityMatchesAgainstForceMatch) {
    // allow_low_quality_matches=True differs from force_match_for_each_row: for each row it takes EVERY
    // anchor tied at that row's maximum and gives it the anchor's own column argmax row; TF's force match
    // takes one anchor per row (the lowest index) and gives it the forcing row (the lowest forcing row).
    const json& c = reference().at("matcher");
    // Where every row's maximum is unique, in its own column, and that column's maximum, they agree.
    const Tensor agree = tensor_of(c.at("agree_iou"));
    EXPECT_EQ(match_anchors(agree, agree.dim(0), torchvision_like(true)), ints_of(c.at("agree_low_quality_matches")));

    //        a0    a1    a2    a3
    //  g0  0.30  0.30  0.10  0.00     row max 0.30 at a0 and a1 (tied)
    //  g1  0.35  0.05  0.20  0.00     row max 0.35 at a0
    // All below 0.4 → −1 before the row rule. torchvision: a0, a1 are tied at a row maximum; each gets its
    // column argmax: a0 → g1, a1 → g0: [1, 0, −1, −1]. TF: g0 forces a0 (lowest of its tie), g1 forces a0;
    // the lowest row wins: [0, −1, −1, −1].
    const Tensor differ = tensor_of(c.at("differ_iou"));
    EXPECT_EQ(ints_of(c.at("differ_low_quality_matches")), (std::vector<std::int32_t>{1, 0, -1, -1}));
    EXPECT_EQ(match_anchors(differ, 2, torchvision_like(true)), (std::vector<std::int32_t>{0, -1, -1, -1}));
}

TEST(TorchvisionReference, SigmoidFocalLoss) {
    const json& c = reference().at("sigmoid_focal_loss");
    const Tensor logits = tensor_of(c.at("logits"));  // [40, 5], in [−8, 8]
    const Tensor targets = tensor_of(c.at("targets"));
    loss::FocalLossOptions options;
    options.alpha = c.at("alpha").get<double>();
    options.gamma = c.at("gamma").get<double>();
    const loss::FocalLossResult result = loss::sigmoid_focal_loss(logits, targets, /*normalizer*/ 1.0, options);
    expect_close(result.value, c.at("value").get<double>(), 0.0, 1e-5, "focal value");
    const json& gradient = c.at("gradient");
    for (std::int64_t r = 0; r < logits.dim(0); ++r) {
        for (std::int64_t k = 0; k < logits.dim(1); ++k) {
            expect_close(result.gradient.at<float>({r, k}), gradient.at(r).at(k).get<double>(), 1e-6, 1e-5,
                         "focal gradient " + std::to_string(r) + "." + std::to_string(k));
        }
    }
}

// Tessera's smooth L1 with δ is δ × PyTorch's smooth_l1_loss with beta = δ (value and gradient).
void check_smooth_l1(const Tensor& prediction, const Tensor& target, double delta, double expected_value,
                     const json& expected_gradient, double gradient_scale, const std::string& what) {
    loss::SmoothL1Options options;
    options.delta = delta;
    const loss::SmoothL1Result result = loss::smooth_l1_loss(prediction, target, /*normalizer*/ 1.0, options);
    expect_close(result.value, expected_value, 0.0, 1e-5, what + " value");
    for (std::int64_t r = 0; r < prediction.dim(0); ++r) {
        for (std::int64_t k = 0; k < prediction.dim(1); ++k) {
            expect_close(result.gradient.at<float>({r, k}),
                         gradient_scale * expected_gradient.at(r).at(k).get<double>(), 1e-6, 1e-5,
                         what + " gradient " + std::to_string(r) + "." + std::to_string(k));
        }
    }
}

TEST(TorchvisionReference, SmoothL1AndL1) {
    const json& c = reference().at("smooth_l1_loss");
    const Tensor prediction = tensor_of(c.at("prediction"));  // [50, 4]
    const Tensor target = tensor_of(c.at("target"));
    const json& beta_small = c.at("beta_0.1");
    check_smooth_l1(prediction, target, 0.1, 0.1 * beta_small.at("value").get<double>(), beta_small.at("gradient"), 0.1,
                    "smooth L1 δ = 0.1");
    const json& beta_one = c.at("beta_1.0");
    check_smooth_l1(prediction, target, 1.0, beta_one.at("value").get<double>(), beta_one.at("gradient"), 1.0,
                    "smooth L1 δ = 1");
    // Residuals all beyond δ = 0.1: Tessera's loss is δ(|x| − δ/2) per element = δ·l1 − n·δ²/2.
    const json& l1 = c.at("l1");
    const double n = static_cast<double>(prediction.num_elements());
    check_smooth_l1(prediction, tensor_of(l1.at("target")), 0.1, 0.1 * l1.at("value").get<double>() - n * 0.01 / 2,
                    l1.at("gradient"), 0.1, "L1 part");
}

}  // namespace
}  // namespace tessera::detection
