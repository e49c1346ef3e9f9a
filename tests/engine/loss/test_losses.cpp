// Tests of engine/loss's losses: hand-computed values, gradients against central finite differences,
// class weights and the ignore label, tile decomposition, input errors and extreme logits.
//
// Tolerances, stated once:
//   values against the double reference:         relative 1e-6
//   analytic f32 gradient against central differences of the double reference (h = 1e-5):
//                                                 |g − fd| ≤ 1e-6 + 1e-4·|fd|
//   analytic gradient against central differences of the engine's own f32 value (h = 5e-3, random
//   elements, tiny-dnn style):                    |g − fd| ≤ 1e-4 + 1e-2·|fd|
//   tiles against the whole tensor (DESIGN.md's contract is relative 1e-5):
//                                                 value relative 1e-5, gradient |Δ| ≤ 1e-9 + 1e-5·|g|
#include "loss/losses.hpp"
#include "loss_test_support.hpp"

#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

using namespace tessera;
using namespace tessera::loss;
using namespace tessera::loss::test_support;

namespace {

constexpr double k_value_rtol = 1e-6;
constexpr double k_fd_atol = 1e-6;
constexpr double k_fd_rtol = 1e-4;
constexpr double k_tile_value_rtol = 1e-5;
constexpr double k_tile_atol = 1e-9;
constexpr double k_tile_rtol = 1e-5;

void expect_relative_near(double actual, double expected, double rtol, const std::string& what) {
    EXPECT_LE(std::fabs(actual - expected), rtol * std::max(1e-12, std::fabs(expected)))
        << what << ": " << actual << " vs " << expected;
}

Tensor labels_from(const Shape& shape, std::vector<std::int32_t> values) {
    Tensor t = Tensor::empty(shape, DType::I32);
    for (std::size_t i = 0; i < values.size(); ++i) t.data<std::int32_t>()[i] = values[i];
    return t;
}

Tensor floats_from(const Shape& shape, std::vector<float> values) {
    Tensor t = Tensor::empty(shape, DType::F32);
    for (std::size_t i = 0; i < values.size(); ++i) t.data<float>()[i] = values[i];
    return t;
}

// Central differences of the engine's own value at a few random elements (f32 inputs).
void check_engine_differences(const Tensor& input, const Tensor& gradient,
                              const std::function<double(const Tensor&)>& value_of, std::uint32_t seed,
                              const std::string& what) {
    constexpr float h = 5e-3f;
    std::mt19937 rng(seed);
    std::uniform_int_distribution<std::int64_t> pick(0, input.num_elements() - 1);
    for (int trial = 0; trial < 12; ++trial) {
        const std::int64_t i = pick(rng);
        Tensor up = input.clone();
        Tensor down = input.clone();
        up.data<float>()[i] += h;
        down.data<float>()[i] -= h;
        const double fd = (value_of(up) - value_of(down)) / (static_cast<double>(up.data<float>()[i]) -
                                                              static_cast<double>(down.data<float>()[i]));
        const double g = gradient.data<float>()[i];
        EXPECT_LE(std::fabs(g - fd), 1e-4 + 1e-2 * std::fabs(fd)) << what << ": element " << i << " gradient " << g
                                                                   << ", engine differences " << fd;
    }
}

}  // namespace

// ---- softmax cross-entropy -------------------------------------------------------------------

TEST(SoftmaxCrossEntropy, HandComputedSingleVoxel) {
    const Tensor logits = floats_from({1, 3}, {1.0f, 2.0f, 3.0f});  // [N, C]
    const Tensor labels = labels_from({1}, {2});
    const CrossEntropyResult loss = softmax_cross_entropy(logits, labels);
    const double sum = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
    expect_relative_near(loss.value, std::log(sum) - 3.0, k_value_rtol, "value");  // 0.4076...
    EXPECT_NEAR(loss.gradient.at<float>({0, 0}), std::exp(1.0) / sum, 1e-7);
    EXPECT_NEAR(loss.gradient.at<float>({0, 1}), std::exp(2.0) / sum, 1e-7);
    EXPECT_NEAR(loss.gradient.at<float>({0, 2}), std::exp(3.0) / sum - 1.0, 1e-7);
    EXPECT_EQ(loss.num_counted, 1);
    EXPECT_EQ(loss.weight_sum, 1.0);
}

TEST(SoftmaxCrossEntropy, HandComputedClassWeightsAndIgnore) {
    // Voxel 0: z = (0, 0), label 0: nll = log 2, weight 1. Voxel 1: z = (0, log 3), label 1: nll =
    // log(4/3), weight 3. Voxel 2: ignored. value = (log 2 + 3 log(4/3)) / 4.
    const Tensor logits = floats_from({1, 2, 3}, {0.0f, 0.0f, 5.0f, 0.0f, static_cast<float>(std::log(3.0)), -7.0f});
    const Tensor labels = labels_from({1, 3}, {0, 1, 255});
    CrossEntropyOptions options;
    options.class_weights = {1.0f, 3.0f};
    options.ignore_label = 255;
    const CrossEntropyResult loss = softmax_cross_entropy(logits, labels, options);
    expect_relative_near(loss.value, (std::log(2.0) + 3.0 * std::log(4.0 / 3.0)) / 4.0, k_value_rtol, "value");
    EXPECT_EQ(loss.weight_sum, 4.0);
    EXPECT_EQ(loss.num_counted, 2);
    EXPECT_EQ(loss.num_ignored, 1);
    EXPECT_NEAR(loss.gradient.at<float>({0, 0, 0}), 1.0 * (0.5 - 1.0) / 4.0, 1e-7);
    EXPECT_NEAR(loss.gradient.at<float>({0, 1, 0}), 1.0 * 0.5 / 4.0, 1e-7);
    EXPECT_NEAR(loss.gradient.at<float>({0, 0, 1}), 3.0 * 0.25 / 4.0, 1e-7);
    EXPECT_NEAR(loss.gradient.at<float>({0, 1, 1}), 3.0 * (0.75 - 1.0) / 4.0, 1e-7);
    EXPECT_EQ(loss.gradient.at<float>({0, 0, 2}), 0.0f);
    EXPECT_EQ(loss.gradient.at<float>({0, 1, 2}), 0.0f);
}

TEST(SoftmaxCrossEntropy, SameBitsOnOneThreadAndTwo) {
    // The tile's voxel blocks run in fixed groups summed in order: the value and every gradient element
    // must not depend on how many threads took the groups. 2 × 3 × 64 × 80 voxels: 20 blocks an image
    // (the groups run in parallel from 32 blocks on).
    const Tensor logits = random_f32({2, 3, 64, 80}, 7);
    const Tensor labels = random_labels({2, 64, 80}, 3, 8, 255, 0.1);
    CrossEntropyOptions options;
    options.class_weights = {0.5f, 1.0f, 2.0f};
    options.ignore_label = 255;
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const CrossEntropyResult one = softmax_cross_entropy(logits, labels, options);
    omp_set_num_threads(2);
    const CrossEntropyResult two = softmax_cross_entropy(logits, labels, options);
    omp_set_num_threads(saved);
    EXPECT_EQ(one.value, two.value);
    EXPECT_EQ(one.weighted_nll_sum, two.weighted_nll_sum);
    ASSERT_EQ(one.gradient.num_elements(), two.gradient.num_elements());
    EXPECT_EQ(std::memcmp(one.gradient.data<float>(), two.gradient.data<float>(),
                          static_cast<std::size_t>(one.gradient.num_elements()) * sizeof(float)),
              0);
}

TEST(SoftmaxCrossEntropy, MatchesReferenceAndFiniteDifferences) {
    struct Case {
        Shape shape;
        std::vector<float> weights;
        std::optional<std::int32_t> ignore;
    };
    const std::vector<Case> cases = {
        {{2, 3, 3, 4}, {}, std::nullopt},
        {{2, 4, 2, 3, 3}, {0.5f, 2.0f, 1.0f, 0.0f}, std::int32_t{-1}},
        {{5, 3}, {1.0f, 2.0f, 3.0f}, std::int32_t{9}},
        {{1, 1, 4, 4}, {}, std::nullopt},  // one class: value 0, gradient 0
    };
    std::uint32_t seed = 1;
    for (const Case& c : cases) {
        const std::string what = "cross-entropy " + shape_to_string(c.shape);
        const Dims d = dims_of(c.shape);
        Shape label_shape = c.shape;
        label_shape.erase(label_shape.begin() + 1);
        const Tensor logits = random_f32(c.shape, seed++);
        const Tensor labels = random_labels(label_shape, static_cast<std::int32_t>(d.c), seed++, c.ignore, 0.25);
        CrossEntropyOptions options{c.weights, c.ignore};
        const CrossEntropyResult loss = softmax_cross_entropy(logits, labels, options);

        const std::vector<double> weights(c.weights.begin(), c.weights.end());
        const std::vector<std::int32_t> y = to_ints(labels);
        auto reference = [&](const std::vector<double>& z) {
            return reference_cross_entropy(z, y, d, weights, c.ignore);
        };
        expect_relative_near(loss.value, reference(to_doubles(logits)), k_value_rtol, what);
        expect_gradient_matches(loss.gradient, central_differences(reference, to_doubles(logits)), k_fd_atol,
                                k_fd_rtol, what);
        check_engine_differences(
            logits, loss.gradient,
            [&](const Tensor& z) { return softmax_cross_entropy(z, labels, options).value; }, seed++, what);
    }
}

TEST(SoftmaxCrossEntropy, IgnoredVoxelsContributeNothing) {
    const Shape shape{2, 3, 4, 5};
    const Tensor logits = random_f32(shape, 11);
    const Tensor labels = random_labels({2, 4, 5}, 3, 12, 255, 0.4);
    CrossEntropyOptions options;
    options.ignore_label = 255;
    const CrossEntropyResult loss = softmax_cross_entropy(logits, labels, options);
    // Changing the logits of ignored voxels changes nothing; their gradient is 0.
    Tensor changed = logits.clone();
    std::int64_t ignored = 0;
    for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t h = 0; h < 4; ++h)
            for (std::int64_t w = 0; w < 5; ++w) {
                if (labels.at<std::int32_t>({n, h, w}) != 255) continue;
                ++ignored;
                for (std::int64_t c = 0; c < 3; ++c) {
                    changed.at<float>({n, c, h, w}) = 50.0f * static_cast<float>(c + 1);
                    EXPECT_EQ(loss.gradient.at<float>({n, c, h, w}), 0.0f);
                }
            }
    ASSERT_GT(ignored, 0);
    EXPECT_EQ(loss.num_ignored, ignored);
    EXPECT_EQ(loss.num_counted, 40 - ignored);
    EXPECT_EQ(softmax_cross_entropy(changed, labels, options).value, loss.value);

    // Everything ignored: 0, not NaN.
    const Tensor all_ignored = Tensor::full<std::int32_t>({2, 4, 5}, 255);
    const CrossEntropyResult none = softmax_cross_entropy(logits, all_ignored, options);
    EXPECT_EQ(none.value, 0.0);
    EXPECT_EQ(none.num_counted, 0);
    for (std::int64_t i = 0; i < none.gradient.num_elements(); ++i) EXPECT_EQ(none.gradient.data<float>()[i], 0.0f);
}

TEST(SoftmaxCrossEntropy, ClassWeightsScaleAsWeightedMean) {
    // Uniform class weights change nothing; a zero weight removes a class.
    const Tensor logits = random_f32({2, 3, 6, 6}, 21);
    const Tensor labels = random_labels({2, 6, 6}, 3, 22);
    const double plain = softmax_cross_entropy(logits, labels).value;
    CrossEntropyOptions uniform;
    uniform.class_weights = {2.5f, 2.5f, 2.5f};
    expect_relative_near(softmax_cross_entropy(logits, labels, uniform).value, plain, 1e-12, "uniform weights");

    CrossEntropyOptions drop_class_1;
    drop_class_1.class_weights = {1.0f, 0.0f, 1.0f};
    Tensor labels_1_ignored = labels.clone();
    for (std::int64_t i = 0; i < labels.num_elements(); ++i) {
        if (labels_1_ignored.data<std::int32_t>()[i] == 1) labels_1_ignored.data<std::int32_t>()[i] = -100;
    }
    CrossEntropyOptions ignore_class_1;
    ignore_class_1.ignore_label = -100;
    expect_relative_near(softmax_cross_entropy(logits, labels, drop_class_1).value,
                         softmax_cross_entropy(logits, labels_1_ignored, ignore_class_1).value, 1e-12,
                         "zero weight = ignored");
}

TEST(SoftmaxCrossEntropy, AcceptsViews) {
    const Tensor logits = random_f32({2, 3, 8, 8}, 31);
    const Tensor labels = random_labels({2, 8, 8}, 3, 32);
    const Tensor logits_view = logits.view_box({0, 0, 2, 0}, {2, 3, 4, 8});
    const Tensor labels_view = labels.view_box({0, 2, 0}, {2, 4, 8});
    ASSERT_FALSE(logits_view.is_contiguous());
    const CrossEntropyResult from_view = softmax_cross_entropy(logits_view, labels_view);
    const CrossEntropyResult from_copy = softmax_cross_entropy(logits_view.contiguous(), labels_view.contiguous());
    EXPECT_EQ(from_view.value, from_copy.value);
    expect_tensors_near(from_view.gradient, from_copy.gradient, 0, 0, "view gradient");
}

// ---- soft Dice ------------------------------------------------------------------------------

TEST(DiceLoss, HandComputed) {
    // Equal logits: p = 0.5 everywhere. Labels (0, 1): per class I = 0.5, P = 1, G = 1.
    const Tensor logits = Tensor::zeros({1, 2, 2}, DType::F32);
    const Tensor labels = labels_from({1, 2}, {0, 1});
    const double eps = 1e-5;
    const DiceLossResult loss = dice_loss(logits, labels);
    const double dice = (2 * 0.5 + eps) / (1 + 1 + eps);
    expect_relative_near(loss.value, 1 - dice, k_value_rtol, "value");
    ASSERT_EQ(loss.class_dice.size(), 2u);
    expect_relative_near(loss.class_dice[0], dice, k_value_rtol, "dice 0");
    // d/dz of the voxel labelled 0: g_0 = −(1/2)(2 D − N)/D², g_1 = (1/2) N / D², with N = 1 + ε, D = 2 + ε;
    // d/dz_0 = p_0 (g_0 − (p_0 g_0 + p_1 g_1)) = 0.25 (g_0 − g_1).
    const double n = 1 + eps, d = 2 + eps;
    const double g0 = -0.5 * (2 * d - n) / (d * d), g1 = 0.5 * n / (d * d);
    EXPECT_NEAR(loss.gradient.at<float>({0, 0, 0}), 0.25 * (g0 - g1), 1e-7);
    EXPECT_NEAR(loss.gradient.at<float>({0, 1, 0}), 0.25 * (g1 - g0), 1e-7);

    // Confident and right: loss ≈ 0; with background excluded, the same.
    const Tensor sure = floats_from({1, 2, 2}, {20.0f, -20.0f, -20.0f, 20.0f});
    EXPECT_NEAR(dice_loss(sure, labels).value, 0.0, 1e-6);
    DiceLossOptions no_background;
    no_background.exclude_background = true;
    EXPECT_NEAR(dice_loss(sure, labels, no_background).value, 0.0, 1e-6);
    // Confident and wrong: loss ≈ 1.
    const Tensor wrong = floats_from({1, 2, 2}, {-20.0f, 20.0f, 20.0f, -20.0f});
    EXPECT_NEAR(dice_loss(wrong, labels).value, 1.0, 1e-5);
}

TEST(DiceLoss, MatchesReferenceAndFiniteDifferences) {
    struct Case {
        Shape shape;
        bool exclude_background;
        std::optional<std::int32_t> ignore;
    };
    const std::vector<Case> cases = {
        {{2, 3, 3, 4}, false, std::nullopt},
        {{2, 3, 3, 4}, true, std::nullopt},
        {{1, 4, 2, 3, 3}, true, std::int32_t{255}},
        {{6, 3}, false, std::int32_t{-1}},
        {{2, 2, 5, 3}, false, std::int32_t{7}},
    };
    std::uint32_t seed = 100;
    for (const Case& c : cases) {
        const std::string what = "dice " + shape_to_string(c.shape) + (c.exclude_background ? " no bg" : "");
        const Dims d = dims_of(c.shape);
        Shape label_shape = c.shape;
        label_shape.erase(label_shape.begin() + 1);
        const Tensor logits = random_f32(c.shape, seed++);
        const Tensor labels = random_labels(label_shape, static_cast<std::int32_t>(d.c), seed++, c.ignore, 0.25);
        DiceLossOptions options;
        options.exclude_background = c.exclude_background;
        options.ignore_label = c.ignore;
        const DiceLossResult loss = dice_loss(logits, labels, options);
        const std::vector<std::int32_t> y = to_ints(labels);
        auto reference = [&](const std::vector<double>& z) {
            return reference_dice_loss(z, y, d, options.epsilon, c.exclude_background, c.ignore);
        };
        expect_relative_near(loss.value, reference(to_doubles(logits)), k_value_rtol, what);
        expect_gradient_matches(loss.gradient, central_differences(reference, to_doubles(logits)), k_fd_atol,
                                k_fd_rtol, what);
        check_engine_differences(
            logits, loss.gradient, [&](const Tensor& z) { return dice_loss(z, labels, options).value; }, seed++,
            what);
        if (c.ignore) {
            EXPECT_EQ(loss.num_counted + loss.num_ignored, labels.num_elements());
            for (std::int64_t n = 0; n < d.n; ++n)
                for (std::int64_t s = 0; s < d.s; ++s) {
                    if (y[static_cast<std::size_t>(n * d.s + s)] != *c.ignore) continue;
                    for (std::int64_t k = 0; k < d.c; ++k) {
                        EXPECT_EQ(loss.gradient.data<float>()[(n * d.c + k) * d.s + s], 0.0f) << what;
                    }
                }
        }
    }
}

// ---- sigmoid focal --------------------------------------------------------------------------

TEST(SigmoidFocalLoss, HandComputed) {
    // x = 0: p = 0.5. t = 1: −0.25·0.5²·log 0.5; t = 0: −0.75·0.5²·log 0.5.
    const Tensor logits = Tensor::zeros({1, 2}, DType::F32);
    const Tensor targets = floats_from({1, 2}, {1.0f, 0.0f});
    const FocalLossResult loss = sigmoid_focal_loss(logits, targets, /*normalizer*/ 1);
    const double log_half = std::log(0.5);
    expect_relative_near(loss.value, -0.25 * 0.25 * log_half - 0.75 * 0.25 * log_half, k_value_rtol, "value");
    EXPECT_EQ(loss.num_positive, 1);
    // d/dx = ±α_t q^γ (γ p log p − q) with p = q = 0.5.
    EXPECT_NEAR(loss.gradient.at<float>({0, 0}), 0.25 * 0.25 * (2 * 0.5 * log_half - 0.5), 1e-7);
    EXPECT_NEAR(loss.gradient.at<float>({0, 1}), -0.75 * 0.25 * (2 * 0.5 * log_half - 0.5), 1e-7);

    // γ = 0, α = 0.5: half the binary cross-entropy; normalizer 4 divides; normalizer 0 is clamped to 1.
    const Tensor x = floats_from({2, 1}, {2.0f, -1.0f});
    const Tensor t = floats_from({2, 1}, {1.0f, 1.0f});
    const double bce = std::log1p(std::exp(-2.0)) + std::log1p(std::exp(1.0));
    expect_relative_near(sigmoid_focal_loss(x, t, 4, {0.5, 0.0}).value, 0.5 * bce / 4, k_value_rtol, "bce / 4");
    expect_relative_near(sigmoid_focal_loss(x, t, 0, {0.5, 0.0}).value, 0.5 * bce, k_value_rtol, "clamped");
}

TEST(SigmoidFocalLoss, MatchesReferenceAndFiniteDifferences) {
    struct Case {
        Shape shape;
        FocalLossOptions options;
        int weights;  // 0 none, 1 per element, 2 per anchor
        double normalizer;
    };
    const std::vector<Case> cases = {
        {{2, 3, 4, 5}, {0.25, 2.0}, 0, 7},
        {{2, 3, 4, 5}, {0.25, 1.5}, 2, 3},
        {{30, 4}, {0.4, 0.0}, 1, 5},
        {{20, 5}, {0.25, 2.0}, 2, 0.5},  // [M, K] with per-anchor weights [M]; normalizer clamped
        {{1, 2, 3, 2, 2}, {0.75, 3.0}, 1, 1},
    };
    std::uint32_t seed = 200;
    for (const Case& c : cases) {
        const std::string what = "focal " + shape_to_string(c.shape);
        const Tensor logits = random_f32(c.shape, seed++, -4.0f, 4.0f);
        const Tensor targets = random_binary(c.shape, seed++);
        Tensor weights;
        std::vector<double> expanded;
        if (c.weights == 1) {
            weights = random_binary(c.shape, seed++, 0.8);
            expanded = to_doubles(weights);
        } else if (c.weights == 2) {
            Shape anchor_shape = c.shape;
            anchor_shape.erase(anchor_shape.begin() + 1);
            weights = random_f32(anchor_shape, seed++, 0.0f, 2.0f);
            expanded = broadcast_per_anchor(weights, c.shape);
        }
        const FocalLossResult loss = sigmoid_focal_loss(logits, targets, c.normalizer, c.options, weights);
        const std::vector<double> t = to_doubles(targets);
        auto reference = [&](const std::vector<double>& x) {
            return reference_focal_loss(x, t, expanded, c.options.alpha, c.options.gamma, c.normalizer);
        };
        expect_relative_near(loss.value, reference(to_doubles(logits)), k_value_rtol, what);
        expect_gradient_matches(loss.gradient, central_differences(reference, to_doubles(logits)), k_fd_atol,
                                k_fd_rtol, what);
        check_engine_differences(
            logits, loss.gradient,
            [&](const Tensor& x) { return sigmoid_focal_loss(x, targets, c.normalizer, c.options, weights).value; },
            seed++, what);
    }
}

// ---- smooth L1 ------------------------------------------------------------------------------

TEST(SmoothL1Loss, HandComputedHuberForm) {
    // δ = 0.1: x = 0.05 → 0.5·0.05² = 0.00125; x = 0.3 → 0.1·(0.3 − 0.05) = 0.025; x = −1 → 0.095.
    const Tensor prediction = floats_from({1, 3}, {0.05f, 1.3f, -1.0f});
    const Tensor target = floats_from({1, 3}, {0.0f, 1.0f, 0.0f});
    const SmoothL1Result loss = smooth_l1_loss(prediction, target, /*normalizer*/ 2);
    EXPECT_NEAR(loss.value, (0.00125 + 0.025 + 0.095) / 2, 1e-7);
    EXPECT_NEAR(loss.gradient.at<float>({0, 0}), 0.05 / 2, 1e-7);
    EXPECT_NEAR(loss.gradient.at<float>({0, 1}), 0.1 / 2, 1e-7);
    EXPECT_NEAR(loss.gradient.at<float>({0, 2}), -0.1 / 2, 1e-7);
    EXPECT_EQ(loss.normalizer, 2.0);
    // δ = 1 is PyTorch's smooth_l1 with β = 1.
    const SmoothL1Result unit = smooth_l1_loss(prediction, target, 1, SmoothL1Options{1.0});
    EXPECT_NEAR(unit.value, 0.5 * 0.05 * 0.05 + 0.5 * 0.09 + 0.5, 1e-6);
}

TEST(SmoothL1Loss, MatchesReferenceAndFiniteDifferences) {
    struct Case {
        Shape shape;
        double delta;
        int weights;  // 0 none, 1 per element, 2 per anchor
    };
    const std::vector<Case> cases = {
        {{2, 4, 3, 5}, 0.1, 0}, {{2, 4, 3, 5}, 0.5, 2}, {{25, 4}, 0.1, 2}, {{2, 4, 2, 2, 3}, 1.0, 1}};
    std::uint32_t seed = 300;
    for (const Case& c : cases) {
        const std::string what = "smooth L1 " + shape_to_string(c.shape);
        const Tensor prediction = random_f32(c.shape, seed++, -1.0f, 1.0f);
        Tensor target = random_f32(c.shape, seed++, -1.0f, 1.0f);
        // Keep every |x| at least 1e-3 away from δ: the central difference must not straddle the kink.
        for (std::int64_t i = 0; i < target.num_elements(); ++i) {
            const float x = prediction.data<float>()[i] - target.data<float>()[i];
            if (std::fabs(std::fabs(x) - static_cast<float>(c.delta)) < 1e-3f) target.data<float>()[i] += 0.01f;
        }
        Tensor weights;
        std::vector<double> expanded;
        if (c.weights == 1) {
            weights = random_binary(c.shape, seed++, 0.7);
            expanded = to_doubles(weights);
        } else if (c.weights == 2) {
            Shape anchor_shape = c.shape;
            anchor_shape.erase(anchor_shape.begin() + 1);
            weights = random_binary(anchor_shape, seed++, 0.5);
            expanded = broadcast_per_anchor(weights, c.shape);
        }
        const double normalizer = 4.0 * 3;
        const SmoothL1Options options{c.delta};
        const SmoothL1Result loss = smooth_l1_loss(prediction, target, normalizer, options, weights);
        const std::vector<double> t = to_doubles(target);
        auto reference = [&](const std::vector<double>& p) {
            return reference_huber(p, t, expanded, c.delta, normalizer);
        };
        expect_relative_near(loss.value, reference(to_doubles(prediction)), k_value_rtol, what);
        expect_gradient_matches(loss.gradient, central_differences(reference, to_doubles(prediction)), k_fd_atol,
                                k_fd_rtol, what);
        double weight_sum = 0;
        for (double w : expanded) weight_sum += w;
        EXPECT_NEAR(loss.weight_sum, expanded.empty() ? static_cast<double>(prediction.num_elements()) : weight_sum,
                    1e-9);
    }
}

// ---- tiles ----------------------------------------------------------------------------------

TEST(TileDecomposition, SoftmaxCrossEntropy) {
    std::uint32_t seed = 400;
    for (const TileSplit& split : standard_splits(4)) {
        Shape label_shape = split.shape;
        label_shape.erase(label_shape.begin() + 1);
        const Tensor logits = random_f32(split.shape, seed++);
        const Tensor labels = random_labels(label_shape, 4, seed++, 255, 0.2);
        CrossEntropyOptions options;
        options.class_weights = {0.3f, 1.0f, 2.0f, 1.5f};
        options.ignore_label = 255;
        const CrossEntropyResult whole = softmax_cross_entropy(logits, labels, options);
        CrossEntropyPartial total;
        for (const Box& box : split.boxes) {
            total += softmax_cross_entropy_partial(cut(logits, box), cut(labels, without_axis_1(box)), options);
        }
        EXPECT_EQ(total.num_counted, whole.num_counted) << split.name;
        EXPECT_EQ(total.num_ignored, whole.num_ignored) << split.name;
        expect_relative_near(softmax_cross_entropy_value(total), whole.value, k_tile_value_rtol, split.name);
        for (const Box& box : split.boxes) {
            const CrossEntropyResult tile =
                finish_softmax_cross_entropy(total, cut(logits, box), cut(labels, without_axis_1(box)), options);
            expect_relative_near(tile.value, whole.value, k_tile_value_rtol, split.name);
            expect_tensors_near(tile.gradient, cut(whole.gradient, box), k_tile_atol, k_tile_rtol,
                                "cross-entropy " + split.name);
        }
    }
}

TEST(TileDecomposition, DiceLoss) {
    std::uint32_t seed = 500;
    for (bool exclude_background : {false, true}) {
        for (const TileSplit& split : standard_splits(3)) {
            Shape label_shape = split.shape;
            label_shape.erase(label_shape.begin() + 1);
            const Tensor logits = random_f32(split.shape, seed++);
            const Tensor labels = random_labels(label_shape, 3, seed++, -1, 0.15);
            DiceLossOptions options;
            options.exclude_background = exclude_background;
            options.ignore_label = -1;
            const DiceLossResult whole = dice_loss(logits, labels, options);
            DicePartial total;
            for (const Box& box : split.boxes) {
                total += dice_loss_partial(cut(logits, box), cut(labels, without_axis_1(box)), options);
            }
            EXPECT_EQ(total.num_counted, whole.num_counted);
            expect_relative_near(dice_loss_value(total, options), whole.value, k_tile_value_rtol, split.name);
            for (const Box& box : split.boxes) {
                const DiceLossResult tile = finish_dice_loss(total, cut(logits, box), cut(labels, without_axis_1(box)), options);
                expect_relative_near(tile.value, whole.value, k_tile_value_rtol, split.name);
                for (std::size_t c = 0; c < 3; ++c) {
                    expect_relative_near(tile.class_dice[c], whole.class_dice[c], k_tile_value_rtol, split.name);
                }
                expect_tensors_near(tile.gradient, cut(whole.gradient, box), k_tile_atol, k_tile_rtol,
                                    "dice " + split.name);
            }
        }
    }
}

TEST(TileDecomposition, SigmoidFocalLoss) {
    std::uint32_t seed = 600;
    for (const TileSplit& split : standard_splits(5)) {
        Shape anchor_shape = split.shape;
        anchor_shape.erase(anchor_shape.begin() + 1);
        const Tensor logits = random_f32(split.shape, seed++, -5.0f, 5.0f);
        const Tensor targets = random_binary(split.shape, seed++, 0.2);
        const Tensor weights = random_binary(anchor_shape, seed++, 0.9);  // per-anchor mask
        const FocalLossResult whole = sigmoid_focal_loss(logits, targets, 9, {}, weights);
        FocalLossPartial total;
        for (const Box& box : split.boxes) {
            total += sigmoid_focal_loss_partial(cut(logits, box), cut(targets, box), {}, cut(weights, without_axis_1(box)));
        }
        EXPECT_EQ(total.num_positive, whole.num_positive) << split.name;
        EXPECT_EQ(total.num_elements, logits.num_elements()) << split.name;
        expect_relative_near(sigmoid_focal_loss_value(total, 9), whole.value, k_tile_value_rtol, split.name);
        for (const Box& box : split.boxes) {
            const FocalLossResult tile = finish_sigmoid_focal_loss(total, 9, cut(logits, box), cut(targets, box), {},
                                                                   cut(weights, without_axis_1(box)));
            expect_relative_near(tile.value, whole.value, k_tile_value_rtol, split.name);
            expect_tensors_near(tile.gradient, cut(whole.gradient, box), k_tile_atol, k_tile_rtol, "focal " + split.name);
        }
    }
}

TEST(TileDecomposition, SmoothL1Loss) {
    std::uint32_t seed = 700;
    for (const TileSplit& split : standard_splits(4)) {
        const Tensor prediction = random_f32(split.shape, seed++, -1.0f, 1.0f);
        const Tensor target = random_f32(split.shape, seed++, -1.0f, 1.0f);
        const Tensor weights = random_binary(split.shape, seed++, 0.6);  // per element
        const SmoothL1Result whole = smooth_l1_loss(prediction, target, 20, {}, weights);
        SmoothL1Partial total;
        for (const Box& box : split.boxes) {
            total += smooth_l1_loss_partial(cut(prediction, box), cut(target, box), {}, cut(weights, box));
        }
        expect_relative_near(total.weight_sum, whole.weight_sum, 1e-12, split.name);
        expect_relative_near(smooth_l1_loss_value(total, 20), whole.value, k_tile_value_rtol, split.name);
        for (const Box& box : split.boxes) {
            const SmoothL1Result tile =
                finish_smooth_l1_loss(total, 20, cut(prediction, box), cut(target, box), {}, cut(weights, box));
            expect_relative_near(tile.value, whole.value, k_tile_value_rtol, split.name);
            expect_tensors_near(tile.gradient, cut(whole.gradient, box), k_tile_atol, k_tile_rtol,
                                "smooth L1 " + split.name);
        }
    }
}

TEST(TileDecomposition, WorkedExampleOfLossesHeader) {
    // loss/losses.hpp, line for line.
    Tensor logits = random_f32({2, 3, 10, 8}, 830);  // [2, 3, 10, 8] f32
    Tensor labels = random_labels({2, 10, 8}, 3, 831, 255, 0.1);
    loss::CrossEntropyOptions options{.class_weights = {0.5f, 1.0f, 2.0f}, .ignore_label = 255};

    Tensor logits_0 = logits.view_box({0, 0, 0, 0}, {2, 3, 6, 8}), labels_0 = labels.view_box({0, 0, 0}, {2, 6, 8});
    Tensor logits_1 = logits.view_box({0, 0, 6, 0}, {2, 3, 4, 8}), labels_1 = labels.view_box({0, 6, 0}, {2, 4, 8});

    loss::CrossEntropyPartial part_0 = loss::softmax_cross_entropy_partial(logits_0, labels_0, options);
    loss::CrossEntropyPartial part_1 = loss::softmax_cross_entropy_partial(logits_1, labels_1, options);
    loss::CrossEntropyPartial total = part_0 + part_1;

    loss::CrossEntropyResult tile_0 = loss::finish_softmax_cross_entropy(total, logits_0, labels_0, options);
    loss::CrossEntropyResult tile_1 = loss::finish_softmax_cross_entropy(total, logits_1, labels_1, options);
    loss::CrossEntropyResult whole = loss::softmax_cross_entropy(logits, labels, options);

    expect_relative_near(tile_0.value, whole.value, k_tile_value_rtol, "tile 0 value");
    expect_relative_near(tile_1.value, whole.value, k_tile_value_rtol, "tile 1 value");
    expect_relative_near(total.weighted_nll_sum / total.weight_sum, whole.value, k_tile_value_rtol, "total");
    EXPECT_EQ(total.num_counted + total.num_ignored, 160);
    expect_tensors_near(tile_0.gradient, whole.gradient.view_box({0, 0, 0, 0}, {2, 3, 6, 8}).contiguous(), k_tile_atol,
                        k_tile_rtol, "tile 0 gradient");
    expect_tensors_near(tile_1.gradient, whole.gradient.view_box({0, 0, 6, 0}, {2, 3, 4, 8}).contiguous(), k_tile_atol,
                        k_tile_rtol, "tile 1 gradient");
}

TEST(TileDecomposition, PerAnchorWeightsOnLongAndShortRows) {
    // The whole tensor has rows of 320 anchors (weights read in place); its tiles have 100 and 220
    // (weights copied out per block). Both ways must agree with each other and with the reference.
    const Shape shape{2, 3, 16, 20};
    const Tensor logits = random_f32(shape, 850, -4.0f, 4.0f);
    const Tensor targets = random_binary(shape, 851, 0.3);
    const Tensor weights = random_f32({2, 16, 20}, 852, 0.0f, 2.0f);
    const FocalLossResult whole = sigmoid_focal_loss(logits, targets, 6, {}, weights);
    const std::vector<double> expanded = broadcast_per_anchor(weights, shape);
    expect_relative_near(whole.value, reference_focal_loss(to_doubles(logits), to_doubles(targets), expanded, 0.25, 2.0, 6),
                         k_value_rtol, "focal, long rows");
    const Tensor target_boxes = random_f32(shape, 853, -1.0f, 1.0f);
    const SmoothL1Result whole_l1 = smooth_l1_loss(logits, target_boxes, 6, SmoothL1Options{0.5}, weights);
    expect_relative_near(whole_l1.value, reference_huber(to_doubles(logits), to_doubles(target_boxes), expanded, 0.5, 6),
                         k_value_rtol, "smooth L1, long rows");
    const std::vector<Box> boxes = boxes_along(shape, 2, {0, 5, 16});
    FocalLossPartial focal_total;
    SmoothL1Partial l1_total;
    for (const Box& box : boxes) {
        focal_total += sigmoid_focal_loss_partial(cut(logits, box), cut(targets, box), {}, cut(weights, without_axis_1(box)));
        l1_total += smooth_l1_loss_partial(cut(logits, box), cut(target_boxes, box), SmoothL1Options{0.5},
                                           cut(weights, without_axis_1(box)));
    }
    expect_relative_near(sigmoid_focal_loss_value(focal_total, 6), whole.value, k_tile_value_rtol, "focal tiles");
    expect_relative_near(smooth_l1_loss_value(l1_total, 6), whole_l1.value, k_tile_value_rtol, "smooth L1 tiles");
    for (const Box& box : boxes) {
        const Tensor tile_weights = cut(weights, without_axis_1(box));
        expect_tensors_near(finish_sigmoid_focal_loss(focal_total, 6, cut(logits, box), cut(targets, box), {}, tile_weights).gradient,
                            cut(whole.gradient, box), k_tile_atol, k_tile_rtol, "focal tile gradient");
        expect_tensors_near(finish_smooth_l1_loss(l1_total, 6, cut(logits, box), cut(target_boxes, box), SmoothL1Options{0.5},
                                                  tile_weights).gradient,
                            cut(whole_l1.gradient, box), k_tile_atol, k_tile_rtol, "smooth L1 tile gradient");
    }
}

TEST(TileDecomposition, EmptyPartialsAddAsZero) {
    const Tensor logits = random_f32({1, 3, 4, 4}, 800);
    const Tensor labels = random_labels({1, 4, 4}, 3, 801);
    const DicePartial partial = dice_loss_partial(logits, labels);
    DicePartial sum;
    sum += partial;
    sum += DicePartial{};
    EXPECT_EQ(dice_loss_value(sum), dice_loss_value(partial));
    // A tile of zero extent adds nothing.
    const DicePartial empty_tile =
        dice_loss_partial(logits.view_box({0, 0, 0, 0}, {1, 3, 0, 4}), labels.view_box({0, 0, 0}, {1, 0, 4}));
    EXPECT_EQ(empty_tile.num_counted, 0);
    EXPECT_EQ(dice_loss_value(partial + empty_tile), dice_loss_value(partial));
    const CrossEntropyPartial ce_empty =
        softmax_cross_entropy_partial(logits.view_box({0, 0, 0, 0}, {1, 3, 0, 4}), labels.view_box({0, 0, 0}, {1, 0, 4}));
    EXPECT_EQ(ce_empty.weight_sum, 0.0);
    EXPECT_EQ(ce_empty.weighted_nll_sum, 0.0);
    // ... and finishing it gives an empty gradient.
    const CrossEntropyResult ce_tile = finish_softmax_cross_entropy(
        softmax_cross_entropy_partial(logits, labels), logits.view_box({0, 0, 0, 0}, {1, 3, 0, 4}),
        labels.view_box({0, 0, 0}, {1, 0, 4}));
    EXPECT_EQ(ce_tile.gradient.shape(), (Shape{1, 3, 0, 4}));
    const DiceLossResult dice_tile =
        finish_dice_loss(partial, logits.view_box({0, 0, 0, 0}, {1, 3, 0, 4}), labels.view_box({0, 0, 0}, {1, 0, 4}));
    EXPECT_EQ(dice_tile.gradient.num_elements(), 0);
    EXPECT_EQ(dice_tile.value, dice_loss_value(partial));
}

// ---- errors ---------------------------------------------------------------------------------

TEST(LossErrors, ShapesAndTypes) {
    const Tensor logits = random_f32({2, 3, 4, 5}, 900);
    const Tensor labels = random_labels({2, 4, 5}, 3, 901);
    expect_error_containing([&] { softmax_cross_entropy(logits, random_labels({2, 4, 6}, 3, 1)); },
                            {"softmax_cross_entropy", "expected labels of shape [2, 4, 5]", "[2, 3, 4, 5]",
                             "got [2, 4, 6]"});
    expect_error_containing([&] { dice_loss(logits, random_labels({2, 3, 4, 5}, 3, 1)); },
                            {"dice_loss", "expected labels of shape [2, 4, 5]", "got [2, 3, 4, 5]"});
    expect_error_containing([&] { softmax_cross_entropy(logits, logits); }, {"expected i32 labels, got f32"});
    expect_error_containing([&] { softmax_cross_entropy(labels, labels); }, {"expected f32 logits, got i32"});
    expect_error_containing([&] { softmax_cross_entropy(random_f32({6}, 1), random_labels({6}, 3, 1)); },
                            {"rank 2 or more", "got [6]"});
    CrossEntropyOptions bad_weights;
    bad_weights.class_weights = {1.0f, 2.0f};
    expect_error_containing([&] { softmax_cross_entropy(logits, labels, bad_weights); },
                            {"one class weight per class (3)", "got 2"});
    bad_weights.class_weights = {1.0f, -2.0f, 1.0f};
    expect_error_containing([&] { softmax_cross_entropy(logits, labels, bad_weights); },
                            {"class weights ≥ 0", "got -2 for class 1"});
    DiceLossOptions bad_dice;
    bad_dice.exclude_background = true;
    expect_error_containing([&] { dice_loss(random_f32({2, 1, 3}, 1), random_labels({2, 3}, 1, 1), bad_dice); },
                            {"at least 2 classes", "got 1"});

    expect_error_containing([&] { sigmoid_focal_loss(logits, random_f32({2, 3, 4, 4}, 1), 1); },
                            {"sigmoid_focal_loss", "expected targets of the same shape as the logits [2, 3, 4, 5]", "got [2, 3, 4, 4]"});
    expect_error_containing(
        [&] { sigmoid_focal_loss(logits, random_binary({2, 3, 4, 5}, 1), 1, {}, random_f32({2, 3, 4}, 1)); },
        {"expected weights of shape [2, 3, 4, 5] or [2, 4, 5] (one per anchor)", "got [2, 3, 4]"});
    expect_error_containing([&] { smooth_l1_loss(logits, random_f32({2, 3, 5, 4}, 1), 1); },
                            {"smooth_l1_loss", "expected target of the same shape as the prediction [2, 3, 4, 5]", "got [2, 3, 5, 4]"});
    expect_error_containing([&] { smooth_l1_loss(logits, logits, 1, SmoothL1Options{0.0}); },
                            {"expected a positive delta, got 0"});
    expect_error_containing([&] { sigmoid_focal_loss(logits, random_binary({2, 3, 4, 5}, 1), NAN); },
                            {"expected a finite normalizer"});
    expect_error_containing([&] { sigmoid_focal_loss(logits, random_binary({2, 3, 4, 5}, 1), 1, {1.5, 2.0}); },
                            {"expected alpha in [0, 1], got 1.5"});

    // Summed partials of another class count.
    const DicePartial two_classes = dice_loss_partial(random_f32({1, 2, 3}, 1), random_labels({1, 3}, 2, 1));
    expect_error_containing([&] { finish_dice_loss(two_classes, logits, labels); },
                            {"expected summed partials of 3 classes, got 2"});
    DicePartial three = dice_loss_partial(logits, labels);
    expect_error_containing([&] { three += two_classes; }, {"same number of classes", "3 and 2"});
}

TEST(LossErrors, BadLabelsNameLabelPositionAndClassCount) {
    const Tensor logits = random_f32({2, 4, 3, 5}, 910);
    Tensor labels = random_labels({2, 3, 5}, 4, 911);
    labels.at<std::int32_t>({1, 2, 3}) = 7;
    expect_error_containing([&] { softmax_cross_entropy(logits, labels); },
                            {"softmax_cross_entropy", "expected labels in [0, 4) for 4 classes", "got 7 at labels[1, 2, 3]"});
    expect_error_containing([&] { dice_loss(logits, labels); }, {"dice_loss", "got 7 at labels[1, 2, 3]"});
    expect_error_containing([&] { softmax_cross_entropy_partial(logits, labels); }, {"got 7 at labels[1, 2, 3]"});
    labels.at<std::int32_t>({1, 2, 3}) = -1;
    CrossEntropyOptions options;
    options.ignore_label = 255;
    expect_error_containing([&] { softmax_cross_entropy(logits, labels, options); },
                            {"[0, 4) for 4 classes or the ignore label 255", "got -1 at labels[1, 2, 3]"});
    options.ignore_label = -1;
    EXPECT_NO_THROW(softmax_cross_entropy(logits, labels, options));

    // Large enough for the labels to be counted in parallel runs: of two bad labels, in different runs,
    // the message names the first in memory whichever thread found which.
    const Tensor wide_logits = random_f32({1, 2, 300, 300}, 914);
    Tensor wide_labels = random_labels({1, 300, 300}, 2, 915);
    wide_labels.at<std::int32_t>({0, 250, 7}) = 9;
    wide_labels.at<std::int32_t>({0, 40, 3}) = 5;
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(2);
    expect_error_containing([&] { softmax_cross_entropy(wide_logits, wide_labels); }, {"got 5 at labels[0, 40, 3]"});
    omp_set_num_threads(saved_threads);

    const Tensor x = random_f32({3, 2}, 912);
    Tensor t = random_binary({3, 2}, 913);
    t.at<float>({2, 1}) = 0.5f;
    expect_error_containing([&] { sigmoid_focal_loss(x, t, 1); },
                            {"sigmoid_focal_loss", "expected targets of 0 or 1, got 0.5 at targets[2, 1]"});
}

// ---- extreme logits -------------------------------------------------------------------------

TEST(ExtremeLogits, FiniteValuesAndGradients) {
    const Shape shape{2, 3, 4, 6};
    Tensor logits = Tensor::empty(shape, DType::F32);
    std::mt19937 rng(1000);
    std::bernoulli_distribution sign(0.5);
    for (std::int64_t i = 0; i < logits.num_elements(); ++i) logits.data<float>()[i] = sign(rng) ? 100.0f : -100.0f;
    const Tensor labels = random_labels({2, 4, 6}, 3, 1001);

    const CrossEntropyResult ce = softmax_cross_entropy(logits, labels);
    EXPECT_TRUE(std::isfinite(ce.value));
    expect_all_finite(ce.gradient, "cross-entropy gradient");
    expect_relative_near(ce.value, reference_cross_entropy(to_doubles(logits), to_ints(labels), dims_of(shape), {}, std::nullopt),
                         1e-6, "cross-entropy at ±100");

    const DiceLossResult dice = dice_loss(logits, labels);
    EXPECT_TRUE(std::isfinite(dice.value));
    expect_all_finite(dice.gradient, "dice gradient");
    expect_relative_near(dice.value, reference_dice_loss(to_doubles(logits), to_ints(labels), dims_of(shape), 1e-5, false, std::nullopt),
                         1e-6, "dice at ±100");

    const Tensor targets = random_binary(shape, 1002, 0.5);
    const FocalLossResult focal = sigmoid_focal_loss(logits, targets, 10);
    EXPECT_TRUE(std::isfinite(focal.value));
    expect_all_finite(focal.gradient, "focal gradient");
    expect_relative_near(focal.value, reference_focal_loss(to_doubles(logits), to_doubles(targets), {}, 0.25, 2.0, 10), 1e-6,
                         "focal at ±100");
    const FocalLossResult focal_general = sigmoid_focal_loss(logits, targets, 10, {0.25, 1.5});
    EXPECT_TRUE(std::isfinite(focal_general.value));
    expect_all_finite(focal_general.gradient, "focal γ = 1.5 gradient");

    // Closed forms: z = (100, −100), label 1 → nll 200, gradient (1, −1).
    const CrossEntropyResult one = softmax_cross_entropy(floats_from({1, 2}, {100.0f, -100.0f}), labels_from({1}, {1}));
    EXPECT_NEAR(one.value, 200.0, 1e-4);
    EXPECT_NEAR(one.gradient.data<float>()[0], 1.0, 1e-7);
    EXPECT_NEAR(one.gradient.data<float>()[1], -1.0, 1e-7);
    // x = 100, t = 0 → loss (1 − α)·100, d/dx = (1 − α); x = −100, t = 0 → loss e^−100-ish, d/dx ≈ 0.
    const FocalLossResult wrong = sigmoid_focal_loss(floats_from({1, 2}, {100.0f, -100.0f}), floats_from({1, 2}, {0.0f, 0.0f}), 1);
    EXPECT_NEAR(wrong.value, 75.0, 1e-4);
    EXPECT_NEAR(wrong.gradient.data<float>()[0], 0.75, 1e-6);
    EXPECT_NEAR(wrong.gradient.data<float>()[1], 0.0, 1e-30);
    // Huber on huge residuals stays linear.
    const SmoothL1Result far = smooth_l1_loss(floats_from({1, 1}, {1e6f}), floats_from({1, 1}, {-1e6f}), 1);
    expect_relative_near(far.value, 0.1 * (2e6 - 0.05), 1e-6, "huber at 2e6");
    EXPECT_EQ(far.gradient.data<float>()[0], 0.1f);
}
