// Sliding-window prediction: blending reproduces a pointwise model exactly, windows are counted right.
#include "data/sliding_window.hpp"
#include "core/random.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace tessera;
using namespace tessera::data;

namespace {

Tensor random_image(const Shape& shape, std::uint64_t seed) {
    SeededRandom random(seed);
    Tensor image = Tensor::empty(shape, DType::F32);
    for (std::int64_t v = 0; v < image.num_elements(); ++v) image.data<float>()[v] = static_cast<float>(random.normal());
    return image;
}

// logits = [x, -x, 2y] for channels x (and y when there are two): the same at every voxel, wherever the
// window is, so any correct blend gives back the model applied to the whole image.
Tensor pointwise(const Tensor& input) {
    Shape shape = input.shape();
    const std::int64_t batch = shape[0], channels = shape[1];
    shape[1] = 3;
    Tensor output = Tensor::empty(shape, DType::F32);
    const std::int64_t voxels = input.num_elements() / (batch * channels);
    const float* in = input.data<float>();
    float* out = output.data<float>();
    for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t v = 0; v < voxels; ++v) {
            const float x = in[(b * channels) * voxels + v];
            const float y = in[(b * channels + channels - 1) * voxels + v];
            out[(b * 3 + 0) * voxels + v] = x;
            out[(b * 3 + 1) * voxels + v] = -x;
            out[(b * 3 + 2) * voxels + v] = 2 * y;
        }
    }
    return output;
}

}  // namespace

TEST(DataSlidingWindow, BlendingReproducesAPointwiseModel) {
    struct Case {
        Shape image;   // [C, spatial...]
        Shape window;  // spatial
    };
    const std::vector<Case> cases{
        {{1, 64, 64}, {32, 32}},        // divisible
        {{2, 50, 37}, {16, 24}},        // not divisible, two channels
        {{1, 10, 70}, {16, 16}},        // smaller than the window in H
        {{1, 9, 7}, {16, 16}},          // smaller in every axis
        {{1, 20, 33, 17}, {8, 16, 16}}, // 3D
        {{2, 5, 12, 40}, {8, 8, 8}},    // 3D, shallower than the window
    };
    for (const Case& c : cases) {
        const Tensor image = random_image(c.image, 7);
        const Tensor expected = pointwise(image.reshape([&] { Shape s = c.image; s.insert(s.begin(), 1); return s; }()));
        for (const double overlap : {0.0, 0.25, 0.5}) {
            for (const BlendMode blend : {BlendMode::Constant, BlendMode::Gaussian}) {
                SlidingWindowOptions options;
                options.window = c.window;
                options.overlap = overlap;
                options.blend = blend;
                options.window_batch = 3;
                std::int64_t windows_seen = 0;
                const Tensor result = sliding_window_predict(image, options, [&](const Tensor& windows) {
                    EXPECT_LE(windows.dim(0), 3);
                    EXPECT_EQ(windows.dim(1), c.image[0]);
                    EXPECT_EQ(Shape(windows.shape().begin() + 2, windows.shape().end()), c.window);
                    windows_seen += windows.dim(0);
                    return pointwise(windows);
                });
                const std::string what = shape_to_string(c.image) + " window " + shape_to_string(c.window) + " overlap " +
                                         std::to_string(overlap) + (blend == BlendMode::Gaussian ? " gaussian" : " constant");
                Shape expected_shape = c.image;
                expected_shape[0] = 3;
                ASSERT_EQ(result.shape(), expected_shape) << what;
                float worst = 0;
                for (std::int64_t v = 0; v < result.num_elements(); ++v) {
                    worst = std::max(worst, std::abs(result.data<float>()[v] - expected.data<float>()[v]));
                }
                EXPECT_LT(worst, 1e-5f) << what;
                EXPECT_EQ(windows_seen, count_windows(Shape(c.image.begin() + 1, c.image.end()), options)) << what;
            }
        }
    }
}

TEST(DataSlidingWindow, WindowsStepByTheOverlapAndTheLastIsAlignedToTheEnd) {
    EXPECT_EQ(window_starts(100, 32, 0.25), (std::vector<std::int64_t>{0, 24, 48, 68}));
    EXPECT_EQ(window_starts(64, 32, 0.0), (std::vector<std::int64_t>{0, 32}));
    EXPECT_EQ(window_starts(64, 32, 0.5), (std::vector<std::int64_t>{0, 16, 32}));
    EXPECT_EQ(window_starts(20, 32, 0.5), (std::vector<std::int64_t>{0}));  // padded to one window
    EXPECT_EQ(window_starts(13, 10, 0.7), (std::vector<std::int64_t>{0, 3}));  // step 3, not 2
    EXPECT_EQ(window_starts(5, 4, 0.99), (std::vector<std::int64_t>{0, 1}));  // step at least 1
    SlidingWindowOptions options;
    options.window = {32, 32};
    options.overlap = 0.25;
    EXPECT_EQ(count_windows({100, 64}, options), 4 * 3);
    options.window = {32};
    EXPECT_THROW(count_windows({100, 64}, options), Error);
    options.window = {32, 32};
    options.overlap = 1.0;
    EXPECT_THROW(count_windows({100, 64}, options), Error);
}

TEST(DataSlidingWindow, BlendWeightsAverageOverlappingWindows) {
    // Each window predicts its own number everywhere; where two windows overlap, Constant averages them
    // and Gaussian favours the window whose centre is nearer.
    const Tensor image = Tensor::zeros({1, 1, 24}, DType::F32);
    SlidingWindowOptions options;
    options.window = {1, 16};
    options.overlap = 0.5;  // windows at 0 and 8
    float next = 0;
    const auto numbered = [&](const Tensor& windows) {
        Tensor output = Tensor::empty({windows.dim(0), 1, 1, 16}, DType::F32);
        for (std::int64_t b = 0; b < windows.dim(0); ++b) {
            for (std::int64_t x = 0; x < 16; ++x) output.at<float>({b, 0, 0, x}) = next;
            next += 1;
        }
        return output;
    };
    options.blend = BlendMode::Constant;
    const Tensor mean = sliding_window_predict(image, options, numbered);
    EXPECT_FLOAT_EQ(mean.at<float>({0, 0, 3}), 0.0f);
    EXPECT_FLOAT_EQ(mean.at<float>({0, 0, 10}), 0.5f);
    EXPECT_FLOAT_EQ(mean.at<float>({0, 0, 20}), 1.0f);
    next = 0;
    options.blend = BlendMode::Gaussian;
    const Tensor gaussian = sliding_window_predict(image, options, numbered);
    EXPECT_LT(gaussian.at<float>({0, 0, 9}), 0.5f);   // nearer window 0's centre (7.5)
    EXPECT_GT(gaussian.at<float>({0, 0, 14}), 0.5f);  // nearer window 1's centre (15.5)
    EXPECT_NEAR(gaussian.at<float>({0, 0, 9}) + gaussian.at<float>({0, 0, 14}), 1.0f, 1e-5f);  // symmetric about 11.5
}

namespace {

// Logits that depend on where a voxel sits in its window (so seams and blending matter) and on the
// image: 4 classes from sin/cos of value and in-window position. Each window is answered alone, so the
// batch a window comes in does not change its answer.
Tensor position_dependent(const Tensor& input) {
    Shape shape = input.shape();
    const std::int64_t batch = shape[0], channels = shape[1];
    shape[1] = 4;
    Tensor output = Tensor::empty(shape, DType::F32);
    const std::int64_t depth = shape[2], height = shape[3], width = shape[4];
    const std::int64_t voxels = depth * height * width;
    for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t v = 0; v < voxels; ++v) {
            const float x = input.data<float>()[(b * channels) * voxels + v];
            const float z = static_cast<float>(v / (height * width)), y = static_cast<float>(v / width % height);
            for (std::int64_t k = 0; k < 4; ++k) {
                output.data<float>()[(b * 4 + k) * voxels + v] =
                    std::sin(x * static_cast<float>(k + 1) + 0.3f * z) + 0.2f * std::cos(0.7f * y * static_cast<float>(k));
            }
        }
    }
    return output;
}

Tensor argmax_of(const Tensor& logits) {  // [K, D, H, W] -> [D, H, W]
    const std::int64_t classes = logits.dim(0), voxels = logits.num_elements() / classes;
    Tensor labels = Tensor::empty({logits.dim(1), logits.dim(2), logits.dim(3)}, DType::I32);
    for (std::int64_t v = 0; v < voxels; ++v) {
        std::int32_t best = 0;
        for (std::int64_t c = 1; c < classes; ++c) {
            if (logits.data<float>()[c * voxels + v] > logits.data<float>()[best * voxels + v]) best = static_cast<std::int32_t>(c);
        }
        labels.data<std::int32_t>()[v] = best;
    }
    return labels;
}

}  // namespace

TEST(SlidingWindowStreamed, SlabBySlabGivesTheLabelsOfTheWholePrediction) {
    struct Case {
        Shape image;  // [C, D, H, W]
        std::vector<std::int64_t> window;
        double overlap;
        std::int64_t window_batch;
        BlendMode blend;
    };
    for (const Case& c : {Case{{1, 23, 19, 17}, {8, 8, 8}, 0.5, 3, BlendMode::Gaussian},
                          Case{{2, 30, 12, 20}, {7, 12, 9}, 0.25, 1, BlendMode::Constant},
                          Case{{1, 5, 21, 9}, {8, 6, 6}, 0.6, 4, BlendMode::Gaussian}}) {  // D shorter than the window: padded
        const Tensor image = random_image(c.image, 41);
        SlidingWindowOptions options;
        options.window = c.window;
        options.overlap = c.overlap;
        options.window_batch = c.window_batch;
        options.blend = c.blend;
        const Tensor expected = argmax_of(sliding_window_predict(image, options, position_dependent));
        const Shape spatial{c.image[1], c.image[2], c.image[3]};
        Tensor labels = Tensor::full<std::int32_t>(spatial, -1);
        std::int64_t next_slice = 0, largest_read = 0;
        sliding_window_predict_streamed(
            spatial, c.image[0], options,
            [&](std::int64_t first, std::int64_t count, float* out) {
                largest_read = std::max(largest_read, count);
                out = std::copy_n(image.view_box(Shape{0, first, 0, 0}, Shape{c.image[0], count, c.image[2], c.image[3]}).contiguous().data<float>(),
                                  c.image[0] * count * c.image[2] * c.image[3], out);
            },
            position_dependent,
            [&](std::int64_t first, const Tensor& slab) {
                EXPECT_EQ(first, next_slice);
                next_slice += slab.dim(0);
                labels.view_box(Shape{first, 0, 0}, slab.shape()).copy_from(slab);
            });
        EXPECT_EQ(next_slice, c.image[1]);
        EXPECT_LE(largest_read, c.window[0]);  // never more than a window's depth of the image at once
        EXPECT_EQ(std::memcmp(labels.data<std::int32_t>(), expected.data<std::int32_t>(), expected.num_bytes()), 0)
            << shape_to_string(c.image) << " window " << shape_to_string(c.window);
    }
}
