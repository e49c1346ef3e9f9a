// Tests of the reference ops themselves: every backward against a numeric gradient (2D and 3D, odd
// and even extents, strides 1 and 2, dilation 1 and 2, asymmetric padding, even kernels), and small
// cases computed by hand. TESSERA_GRADIENT_CHECK_VERBOSE=1 prints every gradient check's report.
#include "reference/gradient_check.hpp"
#include "reference/reference_ops.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

using namespace tessera;
using reference::check_gradients;
using reference::GradientCheckReport;
using reference::inner_product;
using reference::random_uniform;

namespace {

// Relative error bound for f32 ops checked with the default options (step 3e-3, floor 1e-2 · scale).
constexpr double gradient_tolerance = 1e-2;

void expect_gradients_match(const reference::ScalarFunction& loss, const std::vector<Tensor>& inputs,
                            const std::vector<Tensor>& analytic, const reference::GradientCheckOptions& options = {}) {
    const GradientCheckReport report = check_gradients(loss, inputs, analytic, options);
    EXPECT_GT(report.num_checked, 0);
    EXPECT_LE(report.max_relative_error, gradient_tolerance) << report.describe();
    if (std::getenv("TESSERA_GRADIENT_CHECK_VERBOSE")) {
        std::printf("  %s %s\n", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                    report.describe().c_str());
    }
}

Tensor from_values(Shape shape, const std::vector<float>& values) {
    Tensor result = Tensor::empty(std::move(shape), DType::F32);
    EXPECT_EQ(result.num_elements(), static_cast<std::int64_t>(values.size()));
    std::copy(values.begin(), values.end(), result.data<float>());
    return result;
}

std::vector<float> values_of(const Tensor& tensor) {
    const Tensor dense = tensor.contiguous();
    return std::vector<float>(dense.data<float>(), dense.data<float>() + dense.num_elements());
}

ops::ConvAttributes conv_attributes(ops::Extents kernel, ops::Extents stride, ops::Extents dilation,
                                    ops::Extents pad_begin, ops::Extents pad_end) {
    ops::ConvAttributes attributes;
    attributes.kernel = std::move(kernel);
    attributes.stride = std::move(stride);
    attributes.dilation = std::move(dilation);
    attributes.pad_begin = std::move(pad_begin);
    attributes.pad_end = std::move(pad_end);
    return attributes;
}

ops::ConvAttributes grouped(ops::ConvAttributes attributes, std::int64_t groups) {
    attributes.groups = groups;
    return attributes;
}

ops::PoolAttributes pool_attributes(ops::PoolKind kind, ops::Extents kernel, ops::Extents stride,
                                    ops::Extents pad_begin, ops::Extents pad_end) {
    ops::PoolAttributes attributes;
    attributes.kind = kind;
    attributes.kernel = std::move(kernel);
    attributes.stride = std::move(stride);
    attributes.pad_begin = std::move(pad_begin);
    attributes.pad_end = std::move(pad_end);
    return attributes;
}

ops::ConvTransposeAttributes conv_transpose_attributes(ops::Extents kernel, ops::Extents stride) {
    ops::ConvTransposeAttributes attributes;
    attributes.kernel = std::move(kernel);
    attributes.stride = std::move(stride);
    return attributes;
}

void expect_all_near(const Tensor& actual, const Tensor& expected, double tolerance) {
    ASSERT_EQ(actual.shape(), expected.shape());
    const std::vector<float> a = values_of(actual);
    const std::vector<float> e = values_of(expected);
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], e[i], tolerance) << "at element " << i;
}

// ---- convolution: gradient checks ----------------------------------------------------------------

struct ConvCase {
    std::string name;
    Shape x;  // [N, C_in, (D,) H, W]
    std::int64_t out_channels = 1;
    ops::ConvAttributes attributes;
    bool has_bias = false;
};

std::ostream& operator<<(std::ostream& out, const ConvCase& c) { return out << c.name; }

class ConvGradient : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvGradient, BackwardMatchesNumericGradient) {
    const ConvCase& c = GetParam();
    const Tensor x = random_uniform(c.x, 11);
    const Tensor w = random_uniform(ops::conv_weight_shape(c.x[1], c.out_channels, c.attributes), 12);
    const Tensor b = random_uniform({c.out_channels}, 13);
    const Shape y_shape = ops::conv_output_shape(c.x, c.out_channels, c.attributes);
    const Tensor g = random_uniform(y_shape, 14);

    const Tensor y = reference::conv_forward(x, w, c.has_bias ? &b : nullptr, c.attributes);
    ASSERT_EQ(y.shape(), y_shape);
    const Tensor dx = reference::conv_backward_data(g, w, x.shape(), c.attributes);
    const reference::ConvWeightGradients dw = reference::conv_backward_weights(x, g, c.attributes, w.shape());
    ASSERT_EQ(dx.shape(), x.shape());
    ASSERT_EQ(dw.weights.shape(), w.shape());
    ASSERT_EQ(dw.bias.shape(), b.shape());

    const bool has_bias = c.has_bias;
    const ops::ConvAttributes attributes = c.attributes;
    auto loss = [&](const std::vector<Tensor>& in) {
        return inner_product(g, reference::conv_forward(in[0], in[1], has_bias ? &in[2] : nullptr, attributes));
    };
    if (has_bias) {
        expect_gradients_match(loss, {x, w, b}, {dx, dw.weights, dw.bias});
    } else {
        expect_gradients_match(loss, {x, w}, {dx, dw.weights});
    }
}

INSTANTIATE_TEST_SUITE_P(
    ReferenceOps, ConvGradient,
    ::testing::Values(
        ConvCase{"conv2d_k3_s1_same_odd", {2, 3, 5, 5}, 4, conv_attributes({3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}), true},
        ConvCase{"conv2d_k3_s2_asym_even", {2, 2, 6, 6}, 3, conv_attributes({3, 3}, {2, 2}, {1, 1}, {1, 0}, {0, 1}), true},
        ConvCase{"conv2d_k3_d2_asym", {1, 2, 7, 6}, 2, conv_attributes({3, 3}, {1, 1}, {2, 2}, {2, 1}, {1, 2}), false},
        ConvCase{"conv2d_even_kernel_mixed", {2, 2, 6, 7}, 3,
                 conv_attributes({2, 4}, {2, 1}, {1, 2}, {0, 3}, {1, 2}), true},
        ConvCase{"conv3d_k3_s1_same_odd", {1, 2, 5, 4, 5}, 3,
                 conv_attributes({3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}), true},
        ConvCase{"conv3d_k2_s2_even", {2, 2, 4, 6, 4}, 2,
                 conv_attributes({2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}), true},
        ConvCase{"conv3d_k3_s2_d2_asym", {1, 2, 7, 6, 5}, 2,
                 conv_attributes({3, 3, 3}, {2, 1, 2}, {2, 2, 1}, {2, 0, 1}, {1, 2, 0}), false},
        ConvCase{"conv2d_k3_s2_groups3", {2, 6, 6, 5}, 9, grouped(conv_attributes({3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}), 3), true},
        ConvCase{"conv3d_k3_groups2", {1, 4, 4, 5, 3}, 2, grouped(conv_attributes({3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}), 2), false},
        ConvCase{"conv3d_even_kernel_mixed", {1, 3, 5, 6, 4}, 2,
                 conv_attributes({4, 2, 2}, {1, 2, 2}, {1, 1, 2}, {2, 0, 1}, {1, 1, 1}), true}),
    [](const ::testing::TestParamInfo<ConvCase>& tested) { return tested.param.name; });

// A grouped convolution is its groups' ordinary convolutions side by side: group g's output channels
// are the convolution of input channels [g·C_in/G, (g+1)·C_in/G) with its rows of the weights.
TEST(ReferenceOps, GroupedConvolutionIsItsGroupsSideBySide) {
    const std::int64_t groups = 3, in_per_group = 2, out_per_group = 4;
    ops::ConvAttributes attributes = grouped(conv_attributes({3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}), groups);
    const Tensor x = random_uniform({2, groups * in_per_group, 5, 6}, 301);  // [N, C_in, H, W]
    const Tensor w = random_uniform(ops::conv_weight_shape(groups * in_per_group, groups * out_per_group, attributes), 302);
    const Tensor y = reference::conv_forward(x, w, nullptr, attributes);
    // Channels [first, first + count) of a [N, C, ...] tensor.
    const auto channels = [](const Tensor& t, std::int64_t first, std::int64_t count) {
        Shape shape = t.shape();
        const std::int64_t plane = num_elements_of(shape) / (shape[0] * shape[1]);
        Tensor part = Tensor::zeros(Shape{shape[0], count, shape[2], shape[3]}, DType::F32);
        for (std::int64_t n = 0; n < shape[0]; ++n) {
            std::copy_n(t.data<float>() + (n * shape[1] + first) * plane, count * plane, part.data<float>() + n * count * plane);
        }
        return part;
    };
    ops::ConvAttributes ordinary = attributes;
    ordinary.groups = 1;
    std::vector<Tensor> parts;
    for (std::int64_t g = 0; g < groups; ++g) {
        // Weights [C_out, C_in/G, 3, 3]: group g's rows are an ordinary [C_out/G, C_in/G, 3, 3] kernel.
        Tensor w_group = Tensor::zeros(Shape{out_per_group, in_per_group, 3, 3}, DType::F32);
        std::copy_n(w.data<float>() + g * out_per_group * in_per_group * 9, out_per_group * in_per_group * 9, w_group.data<float>());
        parts.push_back(reference::conv_forward(channels(x, g * in_per_group, in_per_group), w_group, nullptr, ordinary));
    }
    const Tensor expected = reference::concat_channels(parts);
    ASSERT_EQ(y.shape(), expected.shape());
    for (std::int64_t i = 0; i < y.num_elements(); ++i) ASSERT_EQ(y.data<float>()[i], expected.data<float>()[i]) << "element " << i;
    // And the channel counts must divide: named, with the fix.
    ops::ConvAttributes five = attributes;
    five.groups = 5;
    try {
        (void)ops::conv_output_shape(x.shape(), 12, five);
        FAIL() << "6 input channels in 5 groups were accepted";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("divisible by 5"), std::string::npos) << error.what();
    }
}

// ---- transposed convolution: gradient checks -----------------------------------------------------

struct ConvTransposeCase {
    std::string name;
    Shape x;  // [N, C_in, (D,) H, W]
    std::int64_t out_channels = 1;
    ops::ConvTransposeAttributes attributes;
    bool has_bias = false;
};

std::ostream& operator<<(std::ostream& out, const ConvTransposeCase& c) { return out << c.name; }

class ConvTransposeGradient : public ::testing::TestWithParam<ConvTransposeCase> {};

TEST_P(ConvTransposeGradient, BackwardMatchesNumericGradient) {
    const ConvTransposeCase& c = GetParam();
    const Tensor x = random_uniform(c.x, 21);
    const Tensor w = random_uniform(ops::conv_transpose_weight_shape(c.x[1], c.out_channels, c.attributes), 22);
    const Tensor b = random_uniform({c.out_channels}, 23);
    const Shape y_shape = ops::conv_transpose_output_shape(c.x, c.out_channels, c.attributes);
    const Tensor g = random_uniform(y_shape, 24);

    const Tensor y = reference::conv_transpose_forward(x, w, c.has_bias ? &b : nullptr, c.attributes);
    ASSERT_EQ(y.shape(), y_shape);
    const Tensor dx = reference::conv_transpose_backward_data(g, w, x.shape(), c.attributes);
    const reference::ConvWeightGradients dw =
        reference::conv_transpose_backward_weights(x, g, c.attributes, w.shape());

    const bool has_bias = c.has_bias;
    const ops::ConvTransposeAttributes attributes = c.attributes;
    auto loss = [&](const std::vector<Tensor>& in) {
        return inner_product(g,
                             reference::conv_transpose_forward(in[0], in[1], has_bias ? &in[2] : nullptr, attributes));
    };
    if (has_bias) {
        expect_gradients_match(loss, {x, w, b}, {dx, dw.weights, dw.bias});
    } else {
        expect_gradients_match(loss, {x, w}, {dx, dw.weights});
    }
}

INSTANTIATE_TEST_SUITE_P(
    ReferenceOps, ConvTransposeGradient,
    ::testing::Values(
        ConvTransposeCase{"deconv2d_k2_s2_even", {2, 3, 3, 4}, 2, conv_transpose_attributes({2, 2}, {2, 2}), true},
        ConvTransposeCase{"deconv2d_k3_s2_odd", {1, 2, 3, 3}, 3, conv_transpose_attributes({3, 3}, {2, 2}), false},
        ConvTransposeCase{"deconv2d_mixed_k3x2_s1x2", {2, 2, 4, 3}, 2, conv_transpose_attributes({3, 2}, {1, 2}), true},
        ConvTransposeCase{"deconv3d_k2_s2", {1, 2, 2, 3, 2}, 2, conv_transpose_attributes({2, 2, 2}, {2, 2, 2}), true},
        ConvTransposeCase{"deconv3d_k3_s2_odd", {1, 2, 3, 2, 3}, 2, conv_transpose_attributes({3, 3, 3}, {2, 2, 2}),
                          false},
        ConvTransposeCase{"deconv3d_mixed", {2, 1, 2, 3, 4}, 2, conv_transpose_attributes({2, 3, 1}, {1, 2, 1}),
                          true}),
    [](const ::testing::TestParamInfo<ConvTransposeCase>& tested) { return tested.param.name; });

// ---- pooling: gradient checks --------------------------------------------------------------------

struct PoolCase {
    std::string name;
    Shape x;  // [N, C, (D,) H, W]
    ops::PoolAttributes attributes;
};

std::ostream& operator<<(std::ostream& out, const PoolCase& c) { return out << c.name; }

class PoolGradient : public ::testing::TestWithParam<PoolCase> {};

TEST_P(PoolGradient, BackwardMatchesNumericGradient) {
    const PoolCase& c = GetParam();
    // Max pooling: all values distinct (spacing 1e-2 > step), so no window has a tie within a step.
    const Tensor x = c.attributes.kind == ops::PoolKind::Max ? reference::random_distinct(c.x, 31, 1e-2)
                                                              : random_uniform(c.x, 31);
    ASSERT_LT(x.num_elements(), 600);  // keeps the step 3e-3 · max(|x|, 1) below the spacing
    const Shape y_shape = ops::pool_output_shape(c.x, c.attributes);
    const Tensor g = random_uniform(y_shape, 32);
    const Tensor y = reference::pool_forward(x, c.attributes);
    ASSERT_EQ(y.shape(), y_shape);
    const Tensor dx = reference::pool_backward(g, x, c.attributes);
    const ops::PoolAttributes attributes = c.attributes;
    auto loss = [&](const std::vector<Tensor>& in) { return inner_product(g, reference::pool_forward(in[0], attributes)); };
    expect_gradients_match(loss, {x}, {dx});
}

std::vector<PoolCase> pool_cases() {
    struct Geometry {
        std::string name;
        Shape x;
        ops::Extents kernel, stride, pad_begin, pad_end;
    };
    const std::vector<Geometry> geometries = {
        {"2d_k2_s2_even", {2, 2, 6, 6}, {2, 2}, {2, 2}, {0, 0}, {0, 0}},
        {"2d_k3_s2_pad1_odd", {1, 3, 7, 7}, {3, 3}, {2, 2}, {1, 1}, {1, 1}},
        {"2d_k3_s1_asym", {2, 2, 5, 6}, {3, 3}, {1, 1}, {1, 0}, {0, 1}},
        {"2d_k2x3_s1x2_asym", {1, 2, 5, 7}, {2, 3}, {1, 2}, {0, 1}, {1, 1}},
        {"3d_k2_s2_even", {2, 2, 4, 4, 4}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {0, 0, 0}},
        {"3d_k3_s2_pad1_odd", {1, 2, 5, 5, 5}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}},
        {"3d_mixed_asym", {1, 2, 3, 5, 4}, {1, 2, 3}, {1, 2, 1}, {0, 1, 1}, {0, 0, 1}},
    };
    std::vector<PoolCase> cases;
    for (const ops::PoolKind kind : {ops::PoolKind::Max, ops::PoolKind::Average}) {
        for (const Geometry& geometry : geometries) {
            cases.push_back({std::string(kind == ops::PoolKind::Max ? "max" : "avg") + "pool" + geometry.name,
                             geometry.x,
                             pool_attributes(kind, geometry.kernel, geometry.stride, geometry.pad_begin, geometry.pad_end)});
        }
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(ReferenceOps, PoolGradient, ::testing::ValuesIn(pool_cases()),
                         [](const ::testing::TestParamInfo<PoolCase>& tested) { return tested.param.name; });

// ---- batch norm: gradient checks -----------------------------------------------------------------

struct BatchNormCase {
    std::string name;
    Shape x;  // [N, C, (D,) H, W]
    bool fuse_relu = false;
};

std::ostream& operator<<(std::ostream& out, const BatchNormCase& c) { return out << c.name; }

class BatchNormGradient : public ::testing::TestWithParam<BatchNormCase> {};

// A beta per channel that puts the fused relu's kink in the widest gap between the normalised values
// (among the middle three quarters, so the relu still cuts), and the smallest distance from a value to the kink.
struct KinkFreeBeta {
    Tensor beta;
    double margin = 0;
};

KinkFreeBeta kink_free_beta(const Tensor& x, const Tensor& gamma) {
    const std::int64_t channels = x.dim(1);
    const Tensor zero_beta = Tensor::zeros({channels}, DType::F32);
    const Tensor ones = Tensor::full<float>({channels}, 1.0f);
    ops::BatchNormAttributes plain;
    const Tensor z = reference::batch_norm_forward_training(x, gamma, zero_beta, zero_beta, ones, plain).y;
    const std::int64_t per_channel = x.num_elements() / (x.dim(0) * channels);
    KinkFreeBeta result{Tensor::empty({channels}, DType::F32), 1e30};
    for (std::int64_t c = 0; c < channels; ++c) {
        std::vector<double> values;
        for (std::int64_t n = 0; n < x.dim(0); ++n) {
            for (std::int64_t p = 0; p < per_channel; ++p) {
                values.push_back(static_cast<double>(z.data<float>()[(n * channels + c) * per_channel + p]));
            }
        }
        std::sort(values.begin(), values.end());
        const std::size_t begin = values.size() / 8;
        const std::size_t end = values.size() - values.size() / 8;
        std::size_t widest = begin;
        for (std::size_t i = begin; i + 1 < end; ++i) {
            if (values[i + 1] - values[i] > values[widest + 1] - values[widest]) widest = i;
        }
        const double kink = 0.5 * (values[widest] + values[widest + 1]);
        result.beta.data<float>()[c] = static_cast<float>(-kink);
        result.margin = std::min(result.margin, 0.5 * (values[widest + 1] - values[widest]));
    }
    return result;
}

TEST_P(BatchNormGradient, BackwardMatchesNumericGradient) {
    const BatchNormCase& c = GetParam();
    const std::int64_t channels = c.x[1];
    // Batch norm is the noisiest check (a step moves every output of the channel, each rounded to f32),
    // and smooth apart from the fused relu: a larger step keeps the noise well below the tolerance.
    reference::GradientCheckOptions options;
    options.relative_step = 1e-2;
    Tensor x = random_uniform(c.x, 41, -1.0, 2.0);
    const Tensor gamma = random_uniform({channels}, 42, 0.5, 1.5);
    Tensor beta = random_uniform({channels}, 43);
    KinkFreeBeta kink_free;
    if (c.fuse_relu) {
        // Values in [-1.4, -0.4] ∪ [0.4, 1.4]: a wide gap near each channel's mean to put the kink in.
        x = random_uniform(c.x, 41);
        reference::push_away_from_zero(x, 0.4);
        kink_free = kink_free_beta(x, gamma);
        beta = kink_free.beta;
    }
    const Tensor running_mean = Tensor::zeros({channels}, DType::F32);
    const Tensor running_variance = Tensor::full<float>({channels}, 1.0f);
    ops::BatchNormAttributes attributes;
    attributes.fuse_relu = c.fuse_relu;
    const reference::BatchNormTrainingResult forward =
        reference::batch_norm_forward_training(x, gamma, beta, running_mean, running_variance, attributes);
    if (c.fuse_relu) {
        // A step h moves a normalised value by about γ/σ · h (itself) and much less (the others).
        double largest_step = 0;
        for (float v : values_of(x)) largest_step = std::max(largest_step, options.relative_step * std::max(1.0, std::abs(double{v})));
        double largest_gain = 0;
        for (std::int64_t ch = 0; ch < channels; ++ch) {
            largest_gain = std::max(largest_gain, gamma.data<float>()[ch] / std::sqrt(double{forward.variance.data<float>()[ch]}));
        }
        ASSERT_GT(kink_free.margin, 2 * largest_gain * largest_step) << "the fused relu's kink is too close to a value";
        const std::vector<float> y = values_of(forward.y);
        EXPECT_GT(std::count(y.begin(), y.end(), 0.0f), 0);  // the relu must actually cut somewhere
    }
    const Tensor g = random_uniform(c.x, 44);
    const reference::BatchNormGradients grads =
        reference::batch_norm_backward(g, x, gamma, beta, forward.mean, forward.variance, attributes);
    auto loss = [&](const std::vector<Tensor>& in) {
        return inner_product(
            g, reference::batch_norm_forward_training(in[0], in[1], in[2], running_mean, running_variance, attributes).y);
    };
    expect_gradients_match(loss, {x, gamma, beta}, {grads.x, grads.gamma, grads.beta}, options);
}

INSTANTIATE_TEST_SUITE_P(ReferenceOps, BatchNormGradient,
                         ::testing::Values(BatchNormCase{"bn2d_even", {2, 3, 4, 4}, false},
                                           BatchNormCase{"bn2d_odd", {3, 2, 3, 5}, false},
                                           BatchNormCase{"bn3d_odd", {2, 2, 3, 3, 3}, false},
                                           BatchNormCase{"bn2d_fused_relu", {2, 3, 4, 4}, true},
                                           BatchNormCase{"bn3d_fused_relu", {2, 2, 3, 4, 3}, true}),
                         [](const ::testing::TestParamInfo<BatchNormCase>& tested) { return tested.param.name; });

// ---- the small ops: gradient checks ------------------------------------------------------------

TEST(ReferenceOpsGradient, Relu2dAnd3d) {
    for (const Shape& shape : {Shape{2, 3, 4, 5}, Shape{1, 2, 3, 4, 3}}) {
        Tensor x = random_uniform(shape, 51);
        reference::push_away_from_zero(x, 0.05);  // no element within a step of the kink
        const Tensor g = random_uniform(shape, 52);
        const Tensor dx = reference::relu_backward(g, x);
        auto loss = [&](const std::vector<Tensor>& in) { return inner_product(g, reference::relu_forward(in[0])); };
        expect_gradients_match(loss, {x}, {dx});
    }
}

TEST(ReferenceOpsGradient, Add) {
    const Shape shape{2, 2, 3, 3, 2};
    const Tensor a = random_uniform(shape, 61);
    const Tensor b = random_uniform(shape, 62);
    const Tensor g = random_uniform(shape, 63);
    const reference::AddGradients grads = reference::add_backward(g);
    auto loss = [&](const std::vector<Tensor>& in) { return inner_product(g, reference::add(in[0], in[1])); };
    expect_gradients_match(loss, {a, b}, {grads.a, grads.b});
}

TEST(ReferenceOpsGradient, ConcatChannels2dAnd3d) {
    for (const Shape& spatial : {Shape{3, 4}, Shape{2, 3, 2}}) {
        std::vector<Tensor> parts;
        std::vector<std::int64_t> channels{2, 1, 3};
        for (std::size_t i = 0; i < channels.size(); ++i) {
            Shape shape{2, channels[i]};
            shape.insert(shape.end(), spatial.begin(), spatial.end());
            parts.push_back(random_uniform(shape, 70 + i));
        }
        Shape y_shape{2, 6};
        y_shape.insert(y_shape.end(), spatial.begin(), spatial.end());
        const Tensor g = random_uniform(y_shape, 79);
        const std::vector<Tensor> grads = reference::concat_channels_backward(g, channels);
        auto loss = [&](const std::vector<Tensor>& in) { return inner_product(g, reference::concat_channels(in)); };
        expect_gradients_match(loss, parts, grads);
    }
}

TEST(ReferenceOpsGradient, GlobalAveragePool2dAnd3d) {
    for (const Shape& shape : {Shape{2, 3, 4, 5}, Shape{2, 2, 3, 2, 3}}) {
        const Tensor x = random_uniform(shape, 81);
        const Tensor g = random_uniform({shape[0], shape[1]}, 82);
        const Tensor dx = reference::global_average_pool_backward(g, shape);
        auto loss = [&](const std::vector<Tensor>& in) { return inner_product(g, reference::global_average_pool(in[0])); };
        expect_gradients_match(loss, {x}, {dx});
    }
}

TEST(ReferenceOpsGradient, DenseWithAndWithoutBias) {
    const Tensor x = random_uniform({3, 7}, 91);
    const Tensor w = random_uniform({4, 7}, 92);
    const Tensor b = random_uniform({4}, 93);
    const Tensor g = random_uniform({3, 4}, 94);
    const reference::DenseGradients grads = reference::dense_backward(g, x, w);
    auto with_bias = [&](const std::vector<Tensor>& in) {
        return inner_product(g, reference::dense_forward(in[0], in[1], &in[2]));
    };
    expect_gradients_match(with_bias, {x, w, b}, {grads.x, grads.w, grads.bias});
    auto without_bias = [&](const std::vector<Tensor>& in) {
        return inner_product(g, reference::dense_forward(in[0], in[1], nullptr));
    };
    expect_gradients_match(without_bias, {x, w}, {grads.x, grads.w});
}

TEST(ReferenceOpsGradient, SoftmaxChannelsAnyRank) {
    for (const Shape& shape : {Shape{3, 5}, Shape{2, 4, 3, 3}, Shape{1, 3, 2, 3, 2}}) {
        const Tensor x = random_uniform(shape, 101, -2.0, 2.0);
        const Tensor g = random_uniform(shape, 102);
        const Tensor y = reference::softmax_channels(x);
        const Tensor dx = reference::softmax_channels_backward(g, y);
        auto loss = [&](const std::vector<Tensor>& in) { return inner_product(g, reference::softmax_channels(in[0])); };
        expect_gradients_match(loss, {x}, {dx});
    }
}

TEST(ReferenceOpsGradient, UpsampleNearest2dAnd3d) {
    struct Case {
        Shape x;
        ops::Extents factor;
        Shape y;
    };
    for (const Case& c : {Case{{2, 3, 3, 4}, {2, 2}, {2, 3, 6, 8}}, Case{{1, 2, 3, 2}, {3, 1}, {1, 2, 9, 2}},
                          Case{{1, 2, 2, 3, 2}, {2, 2, 2}, {1, 2, 4, 6, 4}}, Case{{2, 1, 2, 2, 3}, {1, 3, 2}, {2, 1, 2, 6, 6}}}) {
        const Tensor x = random_uniform(c.x, 111);
        const Tensor g = random_uniform(c.y, 112);
        const Tensor dx = reference::upsample_nearest_backward(g, c.factor);
        auto loss = [&](const std::vector<Tensor>& in) {
            return inner_product(g, reference::upsample_nearest_forward(in[0], c.factor));
        };
        expect_gradients_match(loss, {x}, {dx});
    }
}

TEST(ReferenceOpsGradient, Crop2dAnd3d) {
    struct Case {
        Shape x;
        ops::Extents offset, extent;
    };
    for (const Case& c : {Case{{2, 3, 6, 5}, {1, 2}, {4, 2}}, Case{{1, 2, 4, 4}, {0, 0}, {4, 4}},
                          Case{{1, 2, 5, 4, 6}, {1, 0, 2}, {3, 4, 2}}}) {
        const Tensor x = random_uniform(c.x, 121);
        Shape y{c.x[0], c.x[1]};
        y.insert(y.end(), c.extent.begin(), c.extent.end());
        const Tensor g = random_uniform(y, 122);
        const Tensor dx = reference::crop_backward(g, c.x, c.offset);
        auto loss = [&](const std::vector<Tensor>& in) { return inner_product(g, reference::crop_forward(in[0], c.offset, c.extent)); };
        expect_gradients_match(loss, {x}, {dx});
    }
}

// ---- hand-computed cases -----------------------------------------------------------------------

// x = 1..16 on a 4×4 grid (x[i][j] = 4i + j + 1); w = diag(1, 2, 3):
//   y[i][j] = x[i][j] + 2·x[i+1][j+1] + 3·x[i+2][j+2] (+ bias)
TEST(ReferenceOpsByHand, Conv3x3On4x4Valid) {
    std::vector<float> xs(16);
    for (int i = 0; i < 16; ++i) xs[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
    const Tensor x = from_values({1, 1, 4, 4}, xs);
    const Tensor w = from_values({1, 1, 3, 3}, {1, 0, 0, 0, 2, 0, 0, 0, 3});
    const Tensor b = from_values({1}, {0.5f});
    const Tensor y = reference::conv_forward(x, w, &b, ops::ConvAttributes::valid(2, 3));
    ASSERT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
    EXPECT_EQ(values_of(y), (std::vector<float>{46.5f, 52.5f, 70.5f, 76.5f}));
}

TEST(ReferenceOpsByHand, Conv3x3On4x4SameAndStride2) {
    std::vector<float> xs(16);
    for (int i = 0; i < 16; ++i) xs[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
    const Tensor x = from_values({1, 1, 4, 4}, xs);
    const Tensor w = from_values({1, 1, 3, 3}, {1, 0, 0, 0, 2, 0, 0, 0, 3});
    const Tensor same = reference::conv_forward(x, w, nullptr, ops::ConvAttributes::same(2, 3));
    ASSERT_EQ(same.shape(), (Shape{1, 1, 4, 4}));
    // Taps in the zero padding drop out: y[i][j] = x[i-1][j-1] + 2·x[i][j] + 3·x[i+1][j+1].
    EXPECT_EQ(same.at<float>({0, 0, 0, 0}), 2.0f * 1 + 3.0f * 6);   // 20
    EXPECT_EQ(same.at<float>({0, 0, 0, 3}), 2.0f * 4);              // 8: both diagonal neighbours outside
    EXPECT_EQ(same.at<float>({0, 0, 1, 1}), 1.0f + 2.0f * 6 + 3.0f * 11);  // 46, as the valid case
    EXPECT_EQ(same.at<float>({0, 0, 3, 3}), 11.0f + 2.0f * 16);     // 43
    EXPECT_EQ(same.at<float>({0, 0, 3, 0}), 2.0f * 13 + 0.0f);      // 26: (2,-1) and (4,1) outside

    ops::ConvAttributes strided = ops::ConvAttributes::same(2, 3);
    strided.stride = {2, 2};
    const Tensor y = reference::conv_forward(x, w, nullptr, strided);
    ASSERT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
    for (std::int64_t i = 0; i < 2; ++i) {
        for (std::int64_t j = 0; j < 2; ++j) {
            EXPECT_EQ(y.at<float>({0, 0, i, j}), same.at<float>({0, 0, 2 * i, 2 * j}));
        }
    }
}

TEST(ReferenceOpsByHand, ConvBackwardDataIsTheAdjointOfForward) {
    // <conv(x), g> == <x, conv_backward_data(g)> and == <w, conv_backward_weights(x, g)> (no bias).
    const ops::ConvAttributes conv = conv_attributes({3, 2, 3}, {2, 1, 2}, {1, 2, 1}, {1, 0, 2}, {0, 1, 1});
    const Tensor x = random_uniform({2, 3, 5, 6, 7}, 111);
    const Tensor w = random_uniform(ops::conv_weight_shape(3, 2, conv), 112);
    const Tensor g = random_uniform(ops::conv_output_shape(x.shape(), 2, conv), 113);
    const double forward = inner_product(reference::conv_forward(x, w, nullptr, conv), g);
    EXPECT_NEAR(inner_product(x, reference::conv_backward_data(g, w, x.shape(), conv)), forward, 1e-4 * std::abs(forward));
    EXPECT_NEAR(inner_product(w, reference::conv_backward_weights(x, g, conv, w.shape()).weights), forward,
                1e-4 * std::abs(forward));
}

struct AdjointCase {
    Shape x;  // convolution input, [N, C, (D,) H, W], with (extent - kernel) divisible by stride
    std::int64_t out_channels;
    std::int64_t kernel;
    std::int64_t stride;
};

TEST(ReferenceOpsByHand, ConvTransposeIsTheExactAdjointOfConv) {
    // With W [C_out, C_in, k...] used as a convolution's weights and as a transposed convolution's
    // ([C_in' = C_out, C_out' = C_in, k...]): <conv(x), y> == <x, conv_transpose(y)>.
    for (const AdjointCase& c : {AdjointCase{{2, 3, 7, 7}, 2, 3, 2}, AdjointCase{{1, 2, 6, 8}, 3, 2, 2},
                                 AdjointCase{{2, 2, 5, 6}, 2, 2, 1}, AdjointCase{{1, 2, 7, 5, 7}, 2, 3, 2},
                                 AdjointCase{{1, 2, 4, 6, 4}, 3, 2, 2}}) {
        const int rank = static_cast<int>(c.x.size()) - 2;
        const ops::ConvAttributes conv = ops::ConvAttributes::valid(rank, c.kernel, c.stride);
        ops::ConvTransposeAttributes transpose;
        transpose.kernel = conv.kernel;
        transpose.stride = conv.stride;
        const Tensor x = random_uniform(c.x, 121);
        const Tensor w = random_uniform(ops::conv_weight_shape(c.x[1], c.out_channels, conv), 122);
        const Tensor cx = reference::conv_forward(x, w, nullptr, conv);
        const Tensor y = random_uniform(cx.shape(), 123);
        const Tensor ty = reference::conv_transpose_forward(y, w, nullptr, transpose);
        ASSERT_EQ(ty.shape(), x.shape()) << "case must have (extent - kernel) divisible by stride";
        const double lhs = inner_product(cx, y);
        const double rhs = inner_product(x, ty);
        EXPECT_NEAR(lhs, rhs, 1e-5 * std::max(1.0, std::abs(lhs))) << shape_to_string(c.x);
        // The transposed convolution's data gradient is the convolution itself.
        const Tensor back = reference::conv_transpose_backward_data(x, w, y.shape(), transpose);
        expect_all_near(back, cx, 1e-5);
    }
}

TEST(ReferenceOpsByHand, ConvTransposeUpsampleReplicatesWithUnitWeights) {
    const Tensor x = from_values({1, 1, 2, 2}, {1, 2, 3, 4});
    const Tensor w = Tensor::full<float>({1, 1, 2, 2}, 1.0f);
    const Tensor b = from_values({1}, {10});
    const Tensor y = reference::conv_transpose_forward(x, w, &b, ops::ConvTransposeAttributes::upsample(2, 2));
    ASSERT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
    EXPECT_EQ(values_of(y), (std::vector<float>{11, 11, 12, 12, 11, 11, 12, 12, 13, 13, 14, 14, 13, 13, 14, 14}));
    // Kernel 3 stride 2: the overlapping column and row add up.
    const Tensor ones = Tensor::full<float>({1, 1, 3, 3}, 1.0f);
    ops::ConvTransposeAttributes overlap;
    overlap.kernel = {3, 3};
    overlap.stride = {2, 2};
    const Tensor z = reference::conv_transpose_forward(x, ones, nullptr, overlap);
    ASSERT_EQ(z.shape(), (Shape{1, 1, 5, 5}));
    EXPECT_EQ(z.at<float>({0, 0, 0, 0}), 1.0f);
    EXPECT_EQ(z.at<float>({0, 0, 0, 2}), 3.0f);   // 1 + 2
    EXPECT_EQ(z.at<float>({0, 0, 2, 2}), 10.0f);  // all four
    EXPECT_EQ(z.at<float>({0, 0, 4, 4}), 4.0f);
}

TEST(ReferenceOpsByHand, UpsampleNearestRepeatsAndItsBackwardSums) {
    const Tensor x = from_values({1, 1, 2, 2}, {1, 2, 3, 4});
    const Tensor y = reference::upsample_nearest_forward(x, {2, 3});
    ASSERT_EQ(y.shape(), (Shape{1, 1, 4, 6}));
    EXPECT_EQ(values_of(y), (std::vector<float>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}));
    // Each input element receives the sum of its 2 × 3 block.
    std::vector<float> ramp(24);
    for (std::size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i);
    const Tensor dx = reference::upsample_nearest_backward(from_values({1, 1, 4, 6}, ramp), {2, 3});
    ASSERT_EQ(dx.shape(), (Shape{1, 1, 2, 2}));
    // (0+1+2+6+7+8), (3+4+5+9+10+11), (12+13+14+18+19+20), (15+16+17+21+22+23)
    EXPECT_EQ(values_of(dx), (std::vector<float>{24, 42, 96, 114}));
    // Factor 1 is the identity; 3D repeats along D too.
    EXPECT_EQ(values_of(reference::upsample_nearest_forward(x, {1, 1})), values_of(x));
    const Tensor z = reference::upsample_nearest_forward(from_values({1, 1, 1, 1, 2}, {5, 6}), {2, 1, 2});
    ASSERT_EQ(z.shape(), (Shape{1, 1, 2, 1, 4}));
    EXPECT_EQ(values_of(z), (std::vector<float>{5, 5, 6, 6, 5, 5, 6, 6}));
    EXPECT_THROW(reference::upsample_nearest_forward(x, {2}), Error);                  // one factor per axis
    EXPECT_THROW(reference::upsample_nearest_forward(x, {0, 2}), Error);               // factors ≥ 1
    EXPECT_THROW(reference::upsample_nearest_backward(from_values({1, 1, 3, 1}, {1, 2, 3}), {2, 1}), Error);
}

TEST(ReferenceOpsByHand, CropKeepsItsBoxAndItsBackwardZerosTheRest) {
    std::vector<float> ramp(20);
    for (std::size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i);
    const Tensor x = from_values({1, 1, 4, 5}, ramp);  // x[h][w] = 5h + w
    const Tensor y = reference::crop_forward(x, {1, 2}, {2, 3});
    ASSERT_EQ(y.shape(), (Shape{1, 1, 2, 3}));
    EXPECT_EQ(values_of(y), (std::vector<float>{7, 8, 9, 12, 13, 14}));
    const Tensor dx = reference::crop_backward(from_values({1, 1, 2, 3}, {1, 2, 3, 4, 5, 6}), x.shape(), {1, 2});
    EXPECT_EQ(values_of(dx), (std::vector<float>{0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 4, 5, 6, 0, 0, 0, 0, 0}));
    EXPECT_THROW(reference::crop_forward(x, {3, 0}, {2, 2}), Error);  // the box leaves x
}

TEST(ReferenceOpsByHand, BatchNormOutputHasZeroMeanAndUnitVariancePerChannel) {
    for (const Shape& shape : {Shape{3, 2, 4, 5}, Shape{2, 3, 3, 4, 3}}) {
        const std::int64_t channels = shape[1];
        Tensor x = random_uniform(shape, 131, -3.0, 5.0);
        const Tensor gamma = Tensor::full<float>({channels}, 1.0f);
        const Tensor beta = Tensor::zeros({channels}, DType::F32);
        ops::BatchNormAttributes attributes;
        attributes.epsilon = 1e-6;
        const reference::BatchNormTrainingResult r =
            reference::batch_norm_forward_training(x, gamma, beta, beta, gamma, attributes);
        const std::int64_t per_channel = x.num_elements() / (shape[0] * channels);
        for (std::int64_t c = 0; c < channels; ++c) {
            double sum = 0, squares = 0, x_sum = 0;
            for (std::int64_t n = 0; n < shape[0]; ++n) {
                for (std::int64_t p = 0; p < per_channel; ++p) {
                    const std::int64_t i = (n * channels + c) * per_channel + p;
                    sum += r.y.data<float>()[i];
                    squares += static_cast<double>(r.y.data<float>()[i]) * r.y.data<float>()[i];
                    x_sum += x.data<float>()[i];
                }
            }
            const double count = static_cast<double>(shape[0] * per_channel);
            EXPECT_NEAR(sum / count, 0.0, 1e-6);
            EXPECT_NEAR(squares / count, 1.0, 1e-5);
            EXPECT_NEAR(r.mean.data<float>()[c], x_sum / count, 1e-5);
        }
    }
}

TEST(ReferenceOpsByHand, BatchNormRunningStatisticsUseTheUnbiasedVariance) {
    // One channel holding 1, 2, 3, 4: mean 2.5, biased variance 1.25, unbiased 5/3.
    const Tensor x = from_values({1, 1, 2, 2}, {1, 2, 3, 4});
    const Tensor gamma = from_values({1}, {2});
    const Tensor beta = from_values({1}, {0.5f});
    const Tensor running_mean = from_values({1}, {1});
    const Tensor running_variance = from_values({1}, {2});
    ops::BatchNormAttributes attributes;  // momentum 0.9
    attributes.epsilon = 0;
    const reference::BatchNormTrainingResult r =
        reference::batch_norm_forward_training(x, gamma, beta, running_mean, running_variance, attributes);
    EXPECT_FLOAT_EQ(r.mean.data<float>()[0], 2.5f);
    EXPECT_FLOAT_EQ(r.variance.data<float>()[0], 1.25f);
    EXPECT_FLOAT_EQ(r.running_mean.data<float>()[0], 0.9f * 1 + 0.1f * 2.5f);          // 1.15
    EXPECT_FLOAT_EQ(r.running_variance.data<float>()[0], 0.9f * 2 + 0.1f * 5.0f / 3);  // 1.96667
    EXPECT_FLOAT_EQ(r.y.data<float>()[0], 2.0f * (1 - 2.5f) / std::sqrt(1.25f) + 0.5f);
    // The caller's running statistics are not modified.
    EXPECT_EQ(running_mean.data<float>()[0], 1.0f);

    // Inference normalises with the running statistics given.
    const Tensor y = reference::batch_norm_forward_inference(x, gamma, beta, running_mean, running_variance, attributes);
    EXPECT_FLOAT_EQ(y.data<float>()[3], 2.0f * (4 - 1) / std::sqrt(2.0f) + 0.5f);
    EXPECT_FLOAT_EQ(y.data<float>()[0], 0.5f);

    // Fused relu: relu of the unfused output, and the backward pass masks where y <= 0.
    attributes.fuse_relu = true;
    const reference::BatchNormTrainingResult fused =
        reference::batch_norm_forward_training(x, gamma, beta, running_mean, running_variance, attributes);
    const std::vector<float> unfused = values_of(r.y);
    for (std::size_t i = 0; i < unfused.size(); ++i) EXPECT_EQ(values_of(fused.y)[i], std::max(unfused[i], 0.0f));
    const Tensor dy = Tensor::full<float>({1, 1, 2, 2}, 1.0f);
    const reference::BatchNormGradients g =
        reference::batch_norm_backward(dy, x, gamma, beta, fused.mean, fused.variance, attributes);
    EXPECT_FLOAT_EQ(g.beta.data<float>()[0], 2.0f);  // only x = 3 and x = 4 give y > 0
}

TEST(ReferenceOpsByHand, MaxPoolOnAKnownGrid) {
    // 4×4 grid, 2×2 windows, stride 2.
    const Tensor x = from_values({1, 1, 4, 4}, {1, 5, 2, 0,    //
                                                3, 4, 7, 7,    //
                                                -1, -2, 6, 8,  //
                                                -3, -4, 8, 1});
    const ops::PoolAttributes pool = ops::PoolAttributes::max_down(2, 2);
    EXPECT_EQ(values_of(reference::pool_forward(x, pool)), (std::vector<float>{5, 7, -1, 8}));
    const Tensor dy = from_values({1, 1, 2, 2}, {10, 20, 30, 40});
    // The tie 7/7 goes to the first in scan order (row 1, column 2); the tie 8/8 to (row 2, column 3).
    EXPECT_EQ(values_of(reference::pool_backward(dy, x, pool)),
              (std::vector<float>{0, 10, 0, 0,   //
                                  0, 0, 20, 0,   //
                                  30, 0, 0, 40,  //
                                  0, 0, 0, 0}));
}

TEST(ReferenceOpsByHand, MaxPoolPaddingNeverWins) {
    // All values negative: a zero-padded max would return 0 at the border; the reference does not.
    const Tensor x = from_values({1, 1, 3, 3}, {-1, -2, -3, -4, -5, -6, -7, -8, -9});
    const ops::PoolAttributes pool = pool_attributes(ops::PoolKind::Max, {3, 3}, {1, 1}, {1, 1}, {1, 1});
    EXPECT_EQ(values_of(reference::pool_forward(x, pool)),
              (std::vector<float>{-1, -1, -2, -1, -1, -2, -4, -4, -5}));
    const Tensor dy = Tensor::full<float>({1, 1, 3, 3}, 1.0f);
    EXPECT_EQ(values_of(reference::pool_backward(dy, x, pool)), (std::vector<float>{4, 2, 0, 2, 1, 0, 0, 0, 0}));
}

TEST(ReferenceOpsByHand, AveragePoolExcludesPadding) {
    const Tensor x = from_values({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
    const ops::PoolAttributes pool = pool_attributes(ops::PoolKind::Average, {3, 3}, {1, 1}, {1, 1}, {1, 1});
    const Tensor y = reference::pool_forward(x, pool);
    EXPECT_FLOAT_EQ(y.at<float>({0, 0, 0, 0}), (1 + 2 + 4 + 5) / 4.0f);          // 4 taps inside
    EXPECT_FLOAT_EQ(y.at<float>({0, 0, 0, 1}), (1 + 2 + 3 + 4 + 5 + 6) / 6.0f);  // 6 taps inside
    EXPECT_FLOAT_EQ(y.at<float>({0, 0, 1, 1}), 5.0f);                            // all 9
    // A constant input stays constant, border included.
    const Tensor ones = Tensor::full<float>({1, 1, 3, 3}, 1.0f);
    for (float v : values_of(reference::pool_forward(ones, pool))) EXPECT_FLOAT_EQ(v, 1.0f);
    // Backward: x[0][0] is in the windows centred at (0,0) (4 taps), (0,1) and (1,0) (6), (1,1) (9).
    const Tensor dx = reference::pool_backward(ones, x, pool);
    EXPECT_FLOAT_EQ(dx.at<float>({0, 0, 0, 0}), 1.0f / 4 + 2.0f / 6 + 1.0f / 9);
    // The gradient's total equals the output gradient's total.
    EXPECT_NEAR(inner_product(dx, ones), 9.0, 1e-5);
}

TEST(ReferenceOpsByHand, PoolingWindowEntirelyInPaddingIsAnError) {
    const Tensor x = Tensor::zeros({1, 1, 3, 3}, DType::F32);
    const ops::PoolAttributes pool = pool_attributes(ops::PoolKind::Average, {2, 2}, {1, 1}, {0, 0}, {2, 2});
    EXPECT_THROW(reference::pool_forward(x, pool), Error);
}

TEST(ReferenceOpsByHand, SoftmaxConcatGlobalPoolAndDense) {
    // Softmax over channels at each position: [0, ln 3] → [1/4, 3/4], independent of a shift.
    const Tensor x = from_values({1, 2, 1, 2}, {0, 5, std::log(3.0f), 5 + std::log(3.0f)});
    const std::vector<float> s = values_of(reference::softmax_channels(x));
    EXPECT_NEAR(s[0], 0.25f, 1e-6);
    EXPECT_NEAR(s[1], 0.25f, 1e-6);
    EXPECT_NEAR(s[2], 0.75f, 1e-6);
    EXPECT_NEAR(s[3], 0.75f, 1e-6);

    const Tensor a = from_values({2, 1, 1, 2}, {1, 2, 3, 4});
    const Tensor b = from_values({2, 2, 1, 2}, {5, 6, 7, 8, 9, 10, 11, 12});
    const Tensor ab = reference::concat_channels({a, b});
    ASSERT_EQ(ab.shape(), (Shape{2, 3, 1, 2}));
    EXPECT_EQ(values_of(ab), (std::vector<float>{1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12}));
    const std::vector<Tensor> split = reference::concat_channels_backward(ab, {1, 2});
    EXPECT_EQ(values_of(split[0]), values_of(a));
    EXPECT_EQ(values_of(split[1]), values_of(b));

    const Tensor gap = reference::global_average_pool(b);
    ASSERT_EQ(gap.shape(), (Shape{2, 2}));
    EXPECT_EQ(values_of(gap), (std::vector<float>{5.5f, 7.5f, 9.5f, 11.5f}));

    const Tensor in = from_values({1, 3}, {1, 2, 3});
    const Tensor w = from_values({2, 3}, {1, 0, -1, 2, 1, 0});
    const Tensor bias = from_values({2}, {0.5f, -1});
    EXPECT_EQ(values_of(reference::dense_forward(in, w, &bias)), (std::vector<float>{-1.5f, 3}));
    EXPECT_EQ(values_of(reference::add(a, a)), (std::vector<float>{2, 4, 6, 8}));
    EXPECT_EQ(values_of(reference::relu_forward(from_values({4}, {-1, 0, 2, -0.5f}))), (std::vector<float>{0, 0, 2, 0}));
}

TEST(ReferenceOpsByHand, ShapeMistakesThrow) {
    const Tensor x = Tensor::zeros({1, 2, 5, 5}, DType::F32);
    const ops::ConvAttributes conv = ops::ConvAttributes::same(2, 3);
    EXPECT_THROW(reference::conv_forward(x, Tensor::zeros({4, 3, 3, 3}, DType::F32), nullptr, conv), Error);
    EXPECT_THROW(reference::conv_forward(x, Tensor::zeros({4, 2, 3, 3}, DType::F32),
                                         &x, conv), Error);  // bias of the wrong shape
    EXPECT_THROW(reference::conv_forward(Tensor::zeros({1, 2, 5, 5, 5}, DType::F32),
                                         Tensor::zeros({4, 2, 3, 3}, DType::F32), nullptr, conv), Error);
    EXPECT_THROW(reference::add(x, Tensor::zeros({1, 2, 5, 4}, DType::F32)), Error);
    EXPECT_THROW(reference::concat_channels_backward(x, {1, 2}), Error);
    const Tensor one = Tensor::zeros({1, 1, 1, 1}, DType::F32);
    const Tensor c1 = Tensor::zeros({1}, DType::F32);
    EXPECT_THROW(reference::batch_norm_forward_training(one, c1, c1, c1, c1, {}), Error);  // n = 1
}

TEST(GradientCheck, ReportsAWrongGradientAndItsIndex) {
    // L = Σ x², gradient 2x; claim 2x everywhere except one element.
    const Tensor x = random_uniform({3, 4}, 141);
    Tensor wrong = x.clone();
    for (std::int64_t i = 0; i < wrong.num_elements(); ++i) wrong.data<float>()[i] *= 2.0f;
    const Tensor right = wrong.clone();
    wrong.at<float>({2, 1}) += 0.5f;
    auto loss = [](const std::vector<Tensor>& in) { return inner_product(in[0], in[0]); };
    const GradientCheckReport good = check_gradients(loss, {x}, {right});
    EXPECT_EQ(good.num_checked, 12);
    EXPECT_LE(good.max_relative_error, 1e-4) << good.describe();
    const GradientCheckReport bad = check_gradients(loss, {x}, {wrong});
    EXPECT_GT(bad.max_relative_error, 0.1);
    EXPECT_EQ(bad.worst_index, (Shape{2, 1}));
    EXPECT_NEAR(bad.max_absolute_error, 0.5, 1e-3);
    // The caller's tensor is untouched.
    EXPECT_EQ(values_of(x), values_of(random_uniform({3, 4}, 141)));
}

TEST(GradientCheck, CatchesAConvBackwardWithAFlippedKernel) {
    // A classic bug: the data gradient must correlate with the kernel as the forward does, not flip it.
    const ops::ConvAttributes conv = ops::ConvAttributes::same(2, 3);
    const Tensor x = random_uniform({1, 2, 5, 5}, 161);
    const Tensor w = random_uniform({2, 2, 3, 3}, 162);
    const Tensor g = random_uniform({1, 2, 5, 5}, 163);
    Tensor flipped = w.clone();
    for (std::int64_t o = 0; o < 2; ++o) {
        for (std::int64_t i = 0; i < 2; ++i) {
            for (std::int64_t a = 0; a < 3; ++a) {
                for (std::int64_t b = 0; b < 3; ++b) flipped.at<float>({o, i, a, b}) = w.at<float>({o, i, 2 - a, 2 - b});
            }
        }
    }
    auto loss = [&](const std::vector<Tensor>& in) { return inner_product(g, reference::conv_forward(in[0], w, nullptr, conv)); };
    const GradientCheckReport good = check_gradients(loss, {x}, {reference::conv_backward_data(g, w, x.shape(), conv)});
    EXPECT_LE(good.max_relative_error, gradient_tolerance) << good.describe();
    const GradientCheckReport bad =
        check_gradients(loss, {x}, {reference::conv_backward_data(g, flipped, x.shape(), conv)});
    EXPECT_GT(bad.max_relative_error, 0.1) << bad.describe();
}

TEST(GradientCheck, SamplesLargeTensorsAndHelpersAreReproducible) {
    const Tensor x = random_uniform({20, 20}, 151);
    reference::GradientCheckOptions options;
    options.max_samples_per_input = 10;
    auto loss = [](const std::vector<Tensor>& in) { return inner_product(in[0], in[0]); };
    Tensor gradient = x.clone();
    for (std::int64_t i = 0; i < gradient.num_elements(); ++i) gradient.data<float>()[i] *= 2.0f;
    EXPECT_EQ(check_gradients(loss, {x}, {gradient}, options).num_checked, 10);

    const Tensor d = reference::random_distinct({5, 7}, 3, 0.5);
    std::vector<float> sorted = values_of(d);
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < sorted.size(); ++i) EXPECT_FLOAT_EQ(sorted[i], (static_cast<float>(i) - 17) * 0.5f);
    EXPECT_EQ(values_of(d), values_of(reference::random_distinct({5, 7}, 3, 0.5)));

    Tensor near_zero = from_values({4}, {-0.01f, 0, 0.02f, 3});
    reference::push_away_from_zero(near_zero, 0.1);
    const std::vector<float> pushed = values_of(near_zero);
    const std::vector<float> expected{-0.11f, 0.1f, 0.12f, 3.1f};
    for (std::size_t i = 0; i < pushed.size(); ++i) EXPECT_FLOAT_EQ(pushed[i], expected[i]);
}

}  // namespace
