#include "tensor/tensor.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

using namespace tessera;

TEST(Tensor, ZerosHasShapeStridesAndAlignment) {
    Tensor t = Tensor::zeros({2, 3, 4, 5, 6}, DType::F32);  // [N, C, D, H, W]
    EXPECT_EQ(t.rank(), 5);
    EXPECT_EQ(t.num_elements(), 720);
    EXPECT_EQ(t.num_bytes(), 720u * 4u);
    EXPECT_EQ(t.strides(), (Shape{360, 120, 30, 6, 1}));
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw_data()) % Storage::alignment, 0u);
    for (std::int64_t i = 0; i < t.num_elements(); ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
}

TEST(Tensor, ViewBoxSharesStorageAndWritesThrough) {
    Tensor volume = Tensor::zeros({4, 6, 8}, DType::F32);  // [D, H, W]
    Tensor tile = volume.view_box({1, 3, 2}, {2, 3, 4});
    EXPECT_TRUE(tile.shares_storage_with(volume));
    EXPECT_FALSE(tile.is_contiguous());
    EXPECT_EQ(tile.shape(), (Shape{2, 3, 4}));
    tile.fill(7.0);
    float sum = 0;
    for (std::int64_t i = 0; i < volume.num_elements(); ++i) sum += volume.data<float>()[i];
    EXPECT_EQ(sum, 7.0f * 24);
    EXPECT_EQ(volume.at<float>({1, 3, 2}), 7.0f);
    EXPECT_EQ(volume.at<float>({2, 5, 5}), 7.0f);
    EXPECT_EQ(volume.at<float>({3, 5, 5}), 0.0f);
    EXPECT_EQ(volume.at<float>({1, 2, 2}), 0.0f);
}

TEST(Tensor, ContiguousCopyOfAViewHoldsTheBoxInOrder) {
    Tensor t = Tensor::empty({3, 5}, DType::I32);
    for (int i = 0; i < 15; ++i) t.data<std::int32_t>()[i] = i;
    Tensor box = t.view_box({1, 1}, {2, 3}).contiguous();
    EXPECT_TRUE(box.is_contiguous());
    EXPECT_FALSE(box.shares_storage_with(t));
    const std::int32_t expected[] = {6, 7, 8, 11, 12, 13};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(box.data<std::int32_t>()[i], expected[i]);
}

TEST(Tensor, CopyFromBetweenViews) {
    Tensor a = Tensor::zeros({4, 4}, DType::U8);
    Tensor b = Tensor::full<std::uint8_t>({4, 4}, 9);
    a.view_box({0, 0}, {2, 2}).copy_from(b.view_box({2, 2}, {2, 2}));
    EXPECT_EQ(a.at<std::uint8_t>({1, 1}), 9);
    EXPECT_EQ(a.at<std::uint8_t>({2, 2}), 0);
}

TEST(Tensor, ReshapeNeedsContiguityAndMatchingCount) {
    Tensor t = Tensor::zeros({2, 6}, DType::F32);
    EXPECT_EQ(t.reshape({3, 4}).shape(), (Shape{3, 4}));
    EXPECT_THROW(t.reshape({5}), Error);
    EXPECT_THROW(t.view_box({0, 1}, {2, 4}).reshape({8}), Error);
}

TEST(Tensor, ChecksNameWhatWasExpected) {
    Tensor t = Tensor::zeros({2, 3}, DType::F32);
    try {
        (void)t.data<std::int32_t>();
        FAIL();
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "expected a tensor of i32, got f32");
    }
    try {
        (void)t.view_box({1, 0}, {2, 3});
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("does not fit in shape [2, 3]"), std::string::npos) << e.what();
    }
    EXPECT_THROW(Tensor::zeros({2, -1}, DType::F32), Error);
    EXPECT_THROW((void)t.at<float>({2, 0}), Error);
}

TEST(Tensor, ConversionsRoundTrip) {
    Tensor t = Tensor::empty({5}, DType::F32);
    const float values[] = {0.0f, 1.0f, -2.5f, 65504.0f, 1e-3f};
    for (int i = 0; i < 5; ++i) t.data<float>()[i] = values[i];
    Tensor bf = t.to(DType::BF16).to(DType::F32);
    Tensor hf = t.to(DType::F16).to(DType::F32);
    for (int i = 0; i < 5; ++i) {
        EXPECT_NEAR(bf.data<float>()[i], values[i], std::abs(values[i]) * (1.0f / 128));  // 8-bit mantissa
        EXPECT_NEAR(hf.data<float>()[i], values[i], std::abs(values[i]) * (1.0f / 1024)); // 11-bit mantissa
    }
    EXPECT_EQ(to_float(to_bfloat16(1.0f + 1.0f / 256)), 1.0f);  // ties round to even
    EXPECT_TRUE(std::isinf(to_float(to_float16(1e6f))));
    Tensor labels = t.to(DType::I32);
    EXPECT_EQ(labels.data<std::int32_t>()[2], -3);  // lround: half away from zero
}
