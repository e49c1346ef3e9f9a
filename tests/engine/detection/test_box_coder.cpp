// The Faster R-CNN box coder (weights 10, 10, 5, 5): a code worked out by hand, the decode clamp, and the
// round trip decode(encode(g)) = g within 1e-4 px on random boxes from 2 px to 1000 px. Codes are f32 of a
// double computation: hand values within 1e-6.
#include "detection/box_coder.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace tessera::detection {
namespace {

constexpr float k_code_tolerance = 1e-6f;
constexpr float k_round_trip_pixels = 1e-4f;

TEST(BoxCoder, HandComputedCode) {
    // Anchor [0, 0, 10, 20]: centre (5, 10), 10 × 20. Target [2, 4, 14, 20]: centre (8, 12), 12 × 16.
    // dx = 10·(8 − 5)/10 = 3, dy = 10·(12 − 10)/20 = 1, dw = 5·log(12/10) = 0.91160778,
    // dh = 5·log(16/20) = −1.1157178.
    const BoxCode code = encode_box({2, 4, 14, 20}, {0, 0, 10, 20});
    EXPECT_NEAR(code.dx, 3.0f, k_code_tolerance);
    EXPECT_NEAR(code.dy, 1.0f, k_code_tolerance);
    EXPECT_NEAR(code.dw, 0.91160778f, k_code_tolerance);
    EXPECT_NEAR(code.dh, -1.1157178f, k_code_tolerance);
    const Box back = decode_box(code, {0, 0, 10, 20});
    EXPECT_NEAR(back.x_min, 2.0f, k_round_trip_pixels);
    EXPECT_NEAR(back.y_min, 4.0f, k_round_trip_pixels);
    EXPECT_NEAR(back.x_max, 14.0f, k_round_trip_pixels);
    EXPECT_NEAR(back.y_max, 20.0f, k_round_trip_pixels);
}

TEST(BoxCoder, DecodeClampsLargeSizeCodes) {
    // dw / 5 = 20 > log(1000/16) = 4.1351666: the width becomes 1000/16 = 62.5 anchor widths, centred on the
    // anchor's (5, 5). Negative codes are not clamped: dh = −10 gives exp(−2)·10 = 1.3533528 px.
    const Box box = decode_box({0, 0, 100, -10}, {0, 0, 10, 10});
    EXPECT_NEAR(box.x_min, 5.0f - 312.5f, k_round_trip_pixels);
    EXPECT_NEAR(box.x_max, 5.0f + 312.5f, k_round_trip_pixels);
    EXPECT_NEAR(box.y_max - box.y_min, 1.3533528f, 1e-5f);
    EXPECT_NEAR(k_box_code_clamp, 4.1351665567423561, 1e-15);
}

TEST(BoxCoder, RoundTripOnRandomBoxes) {
    // Anchors 2..250 px, targets 1/20..20 times their size (capped to 1..400 px) and off-centre by up to half
    // an anchor: the range of matched pairs, inside the clamp (|dw| / 5 ≤ 3 < 4.135). Coordinates stay
    // below 1024 px, where f32 spacing is ≤ 6.1e-5 px, so 1e-4 px holds the f32 rounding of box and code.
    std::mt19937 rng(5);
    std::uniform_real_distribution<double> centre(300, 650), log_size(std::log(2.0), std::log(250.0));
    std::uniform_real_distribution<double> log_ratio(-3.0, 3.0), offset(-0.5, 0.5);
    const std::int64_t count = 200;
    Tensor targets = Tensor::empty({count, 4}, DType::F32);
    Tensor anchors = Tensor::empty({count, 4}, DType::F32);
    for (std::int64_t i = 0; i < count; ++i) {
        const double x = centre(rng), y = centre(rng), w = std::exp(log_size(rng)), h = std::exp(log_size(rng));
        const double tw = std::clamp(w * std::exp(log_ratio(rng)), 1.0, 400.0);
        const double th = std::clamp(h * std::exp(log_ratio(rng)), 1.0, 400.0);
        const double tx = x + offset(rng) * w, ty = y + offset(rng) * h;
        const float anchor[4] = {static_cast<float>(x - w / 2), static_cast<float>(y - h / 2),
                                 static_cast<float>(x + w / 2), static_cast<float>(y + h / 2)};
        const float target[4] = {static_cast<float>(tx - tw / 2), static_cast<float>(ty - th / 2),
                                 static_cast<float>(tx + tw / 2), static_cast<float>(ty + th / 2)};
        std::copy_n(anchor, 4, anchors.data<float>() + 4 * i);
        std::copy_n(target, 4, targets.data<float>() + 4 * i);
    }
    const Tensor codes = encode_boxes(targets, anchors);
    const Tensor back = decode_boxes(codes, anchors);
    for (std::int64_t i = 0; i < 4 * count; ++i) {
        EXPECT_NEAR(back.data<float>()[i], targets.data<float>()[i], k_round_trip_pixels) << "row " << i / 4;
    }
}

TEST(BoxCoder, RejectsEmptyBoxesAndBadShapes) {
    EXPECT_THROW(encode_box({5, 5, 5, 9}, {0, 0, 10, 10}), Error);
    EXPECT_THROW(encode_box({0, 0, 10, 10}, {0, 0, 0, 0}), Error);
    EXPECT_THROW(encode_boxes(Tensor::zeros({3, 4}, DType::F32), Tensor::zeros({2, 4}, DType::F32)), Error);
    EXPECT_THROW(decode_boxes(Tensor::zeros({3, 5}, DType::F32), Tensor::zeros({3, 4}, DType::F32)), Error);
}

}  // namespace
}  // namespace tessera::detection
