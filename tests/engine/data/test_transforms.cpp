// The image operations: crop with padding, flip, rotate, resample, normalise.
#include "data/transforms.hpp"
#include "data_test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

using namespace tessera;
using namespace tessera::data;
using namespace tessera::data::test;

namespace {

Tensor iota(const Shape& shape) {  // 0, 1, 2, ... in memory order
    Tensor tensor = Tensor::empty(shape, DType::I32);
    std::iota(tensor.data<std::int32_t>(), tensor.data<std::int32_t>() + tensor.num_elements(), 0);
    return tensor;
}

}  // namespace

TEST(DataTransforms, CropPadsOutsideTheSourceWithZeros) {
    const Tensor source = iota({2, 3, 4});
    const Tensor crop = crop_padded(source, std::vector<std::int64_t>{1, -1, 2}, std::vector<std::int64_t>{1, 3, 4});
    EXPECT_EQ(crop.shape(), (Shape{1, 3, 4}));
    // Row -1 is padding; rows 0 and 1 hold columns 2, 3 then padding.
    const std::vector<std::int32_t> expected{0, 0, 0, 0, 14, 15, 0, 0, 18, 19, 0, 0};
    EXPECT_EQ(std::vector<std::int32_t>(crop.data<std::int32_t>(), crop.data<std::int32_t>() + 12), expected);
    const Tensor outside = crop_padded(source, std::vector<std::int64_t>{0, 5, 0}, std::vector<std::int64_t>{2, 2, 2});
    EXPECT_EQ(outside.shape(), (Shape{2, 2, 2}));
    for (std::int64_t v = 0; v < 8; ++v) EXPECT_EQ(outside.data<std::int32_t>()[v], 0);
}

TEST(DataTransforms, FlipAndRotateAreTheirOwnInverses) {
    const Tensor source = iota({2, 3, 5, 5});
    Tensor flipped = source.clone();
    flip(flipped, 2);
    EXPECT_EQ(flipped.at<std::int32_t>({1, 2, 0, 3}), source.at<std::int32_t>({1, 2, 4, 3}));
    flip(flipped, 2);
    EXPECT_TRUE(same_bytes(flipped, source));
    // numpy.rot90(x, 1): out[r][c] = in[c][W - 1 - r].
    const Tensor turned = rotate90(source, 1);
    EXPECT_EQ(turned.at<std::int32_t>({1, 1, 0, 2}), source.at<std::int32_t>({1, 1, 2, 4}));
    EXPECT_TRUE(same_bytes(rotate90(rotate90(turned, 2), 1), source));
    EXPECT_TRUE(same_bytes(rotate90(source, -1), rotate90(source, 3)));
    const Tensor wide = rotate90(iota({2, 3}), 1);  // [[0 1 2] [3 4 5]] -> [[2 5] [1 4] [0 3]]
    EXPECT_EQ(wide.shape(), (Shape{3, 2}));
    EXPECT_EQ(std::vector<std::int32_t>(wide.data<std::int32_t>(), wide.data<std::int32_t>() + 6),
              (std::vector<std::int32_t>{2, 5, 1, 4, 0, 3}));
}

TEST(DataTransforms, ResampleIsExactAtTheSameSizeAndLinearInBetween) {
    Tensor ramp = Tensor::empty({1, 1, 4, 8}, DType::F32);
    for (std::int64_t y = 0; y < 4; ++y) {
        for (std::int64_t x = 0; x < 8; ++x) ramp.at<float>({0, 0, y, x}) = static_cast<float>(10 * y + x);
    }
    EXPECT_TRUE(same_bytes(resample(ramp, {1, 4, 8}, {1, 4, 8}, Interpolation::Linear), ramp));
    const Tensor half = resample(ramp, {1, 2, 4}, {1, 2, 4}, Interpolation::Linear);
    EXPECT_FLOAT_EQ(half.at<float>({0, 0, 0, 0}), 5.5f);  // source (0.5, 0.5)
    EXPECT_FLOAT_EQ(half.at<float>({0, 0, 1, 3}), 31.5f);  // source (2.5, 6.5)
    const Tensor padded = resample(ramp, {1, 4, 6}, {1, 2, 4}, Interpolation::Nearest);
    EXPECT_FLOAT_EQ(padded.at<float>({0, 0, 1, 3}), 37.0f);  // source (3, 7)
    EXPECT_FLOAT_EQ(padded.at<float>({0, 0, 1, 4}), 0.0f);
    EXPECT_FLOAT_EQ(padded.at<float>({0, 0, 2, 0}), 0.0f);
}

TEST(DataTransforms, NormalizeZScoreAndWindow) {
    Tensor image = Tensor::empty({2, 4}, DType::F32);
    const float values[8] = {1, 2, 3, 4, 7, 7, 7, 7};
    std::copy(values, values + 8, image.data<float>());
    Tensor z = image.clone();
    normalize(z, Normalization::ZScore, 0, 1);
    EXPECT_NEAR(z.at<float>({0, 0}), -1.5f / std::sqrt(1.25f), 1e-6);
    EXPECT_EQ(z.at<float>({1, 2}), 0.0f) << "a constant channel becomes 0";
    Tensor window = image.clone();
    normalize(window, Normalization::Window, 2, 6);
    EXPECT_EQ(window.at<float>({0, 0}), 0.0f);
    EXPECT_EQ(window.at<float>({0, 2}), 0.25f);
    EXPECT_EQ(window.at<float>({1, 0}), 1.0f);
}
