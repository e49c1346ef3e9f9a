// Every op the executor compiles, forward and backward, against the plain-loop references, in the
// manner of ggml's test-backend-ops: one table of cases, one harness. The op under test sits behind an
// identity 1×1 convolution so the gradient with respect to its input can be read as that node's
// activation gradient.
//
// Tolerance: oneDNN accumulates in f32 (and may reorder sums), the reference in double; errors are
// measured relative to the largest magnitude of the reference tensor: ≤ 2e-5.
#include "graph/executor.hpp"
#include "ops/dnnl_support.hpp"
#include "ops/row_convolution.hpp"
#include "ops/tile_rows.hpp"
#include "reference/gradient_check.hpp"
#include "reference/reference_ops.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cpuid.h>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <tuple>

using namespace tessera;
using namespace tessera::graph;

namespace {

// These tests read activation gradients after backward, which training does not keep.
ExecutorOptions keeping_gradients() {
    ExecutorOptions options;
    options.keep_activation_gradients = true;
    return options;
}

constexpr double tolerance = 2e-5;

double relative_difference(const Tensor& actual, const Tensor& expected) {
    EXPECT_EQ(actual.shape(), expected.shape());
    if (actual.shape() != expected.shape()) return INFINITY;
    double worst = 0, scale = 1e-12;
    const float* a = actual.data<float>();
    const float* e = expected.data<float>();
    for (std::int64_t i = 0; i < expected.num_elements(); ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(a[i]) - e[i]));
        scale = std::max(scale, std::abs(static_cast<double>(e[i])));
    }
    return worst / scale;
}

struct Expected {
    Tensor output;
    Tensor input_gradient;
    std::vector<Tensor> parameter_gradients;  // the op's own parameters, in graph order
};

struct OpCase {
    std::string name;
    Shape input;  // [N, C, (D,) H, W]
    std::function<int(Graph&, int)> build;
    std::function<Expected(const Tensor& x, const std::vector<Tensor>& parameters, const Tensor& dy)> reference;
    Mode mode = Mode::Train;
};

void PrintTo(const OpCase& c, std::ostream* out) { *out << c.name; }

class ExecutorOps : public testing::TestWithParam<OpCase> {};

// A profile can say which code ran each node: oneDNN's primitive, or a row convolution for 8 outputs.
TEST(Executor, SaysWhichCodeRunsEachConvolution) {
    Graph graph("which");
    const int x = graph.input({1, 1, 6, 8, 40});
    const int first = graph.conv(x, 8, ops::ConvAttributes::same(3, 3), "first");
    const int narrow = graph.conv(first, 8, ops::ConvAttributes::same(3, 3), "narrow");
    const int wide = graph.conv(narrow, 16, ops::ConvAttributes::same(3, 3), "wide");
    graph.set_output(wide);
    const Executor executor(graph);
    EXPECT_EQ(executor.implementation(x), "");
    EXPECT_FALSE(executor.implementation(first).empty());
    EXPECT_NE(executor.implementation(first), "rows:avx512");  // one input channel: oneDNN
    EXPECT_NE(executor.implementation(wide), "rows:avx512");   // 16 outputs: oneDNN
    EXPECT_FALSE(executor.implementation(wide).empty());
    if (ops::row_convolutions_enabled()) {
        EXPECT_EQ(executor.implementation(narrow), "rows:avx512");
    }
}

TEST_P(ExecutorOps, MatchesReferenceForwardAndBackward) {
    const OpCase& c = GetParam();
    Graph graph(c.name);
    const int x = graph.input(c.input);
    const std::int64_t channels = c.input[1];
    const int identity = graph.conv(x, channels, ops::ConvAttributes::same(static_cast<int>(c.input.size()) - 2, 1), "identity");
    const int op = c.build(graph, identity);
    graph.set_output(op);

    Executor executor(graph, keeping_gradients());
    executor.initialize_parameters(7);
    auto parameters = executor.parameters();
    // The identity: weight[o][i] = (o == i).
    parameters[0].value.fill(0.0);
    for (std::int64_t ch = 0; ch < channels; ++ch) parameters[0].value.data<float>()[ch * channels + ch] = 1.0f;
    // The op's parameters: random, so nothing hides behind ones and zeros.
    std::vector<Tensor> op_parameters;
    for (std::size_t p = 1; p < parameters.size(); ++p) {
        parameters[p].value.copy_from(reference::random_uniform(parameters[p].value.shape(), 100 + p, 0.5, 1.5));
        op_parameters.push_back(parameters[p].value.clone());
    }

    const Tensor input = reference::random_distinct(c.input, 11);
    const Tensor output = executor.forward(input, c.mode);
    const Tensor dy = reference::random_uniform(output.shape(), 13);
    const Expected expected = c.reference(input, op_parameters, dy);
    EXPECT_LE(relative_difference(output, expected.output), tolerance) << "forward";
    if (c.mode == Mode::Eval) return;

    executor.backward(dy);
    EXPECT_LE(relative_difference(executor.activation_gradient(identity), expected.input_gradient), tolerance)
        << "gradient w.r.t. the op's input";
    ASSERT_EQ(expected.parameter_gradients.size(), op_parameters.size());
    for (std::size_t p = 0; p < op_parameters.size(); ++p) {
        EXPECT_LE(relative_difference(parameters[p + 1].gradient, expected.parameter_gradients[p]), tolerance)
            << "gradient of " << parameters[p + 1].name;
    }
}

OpCase conv_case(std::string name, Shape input, std::int64_t out_channels, ops::ConvAttributes attributes) {
    OpCase c;
    c.name = std::move(name);
    c.input = std::move(input);
    c.build = [=](Graph& g, int x) { return g.conv(x, out_channels, attributes, "op"); };
    c.reference = [=](const Tensor& x, const std::vector<Tensor>& p, const Tensor& dy) {
        const Tensor* bias = attributes.has_bias ? &p[1] : nullptr;
        Expected e;
        e.output = reference::conv_forward(x, p[0], bias, attributes);
        e.input_gradient = reference::conv_backward_data(dy, p[0], x.shape(), attributes);
        const auto weights = reference::conv_backward_weights(x, dy, attributes, p[0].shape());
        e.parameter_gradients.push_back(weights.weights);
        if (bias) e.parameter_gradients.push_back(weights.bias);
        return e;
    };
    return c;
}

ops::ConvAttributes with(ops::ConvAttributes a, std::function<void(ops::ConvAttributes&)> change) {
    change(a);
    return a;
}

OpCase conv_transpose_case(std::string name, Shape input, std::int64_t out_channels,
                           ops::ConvTransposeAttributes attributes) {
    OpCase c;
    c.name = std::move(name);
    c.input = std::move(input);
    c.build = [=](Graph& g, int x) { return g.conv_transpose(x, out_channels, attributes, "op"); };
    c.reference = [=](const Tensor& x, const std::vector<Tensor>& p, const Tensor& dy) {
        const Tensor* bias = attributes.has_bias ? &p[1] : nullptr;
        Expected e;
        e.output = reference::conv_transpose_forward(x, p[0], bias, attributes);
        e.input_gradient = reference::conv_transpose_backward_data(dy, p[0], x.shape(), attributes);
        const auto weights = reference::conv_transpose_backward_weights(x, dy, attributes, p[0].shape());
        e.parameter_gradients.push_back(weights.weights);
        if (bias) e.parameter_gradients.push_back(weights.bias);
        return e;
    };
    return c;
}

OpCase pool_case(std::string name, Shape input, ops::PoolAttributes attributes) {
    OpCase c;
    c.name = std::move(name);
    c.input = std::move(input);
    c.build = [=](Graph& g, int x) { return g.pool(x, attributes, "op"); };
    c.reference = [=](const Tensor& x, const std::vector<Tensor>&, const Tensor& dy) {
        return Expected{reference::pool_forward(x, attributes), reference::pool_backward(dy, x, attributes), {}};
    };
    return c;
}

ops::PoolAttributes pool_attributes(ops::PoolKind kind, int rank, std::int64_t kernel, std::int64_t stride,
                                    std::int64_t pad) {
    ops::PoolAttributes a;
    a.kind = kind;
    a.kernel.assign(static_cast<std::size_t>(rank), kernel);
    a.stride.assign(static_cast<std::size_t>(rank), stride);
    a.pad_begin.assign(static_cast<std::size_t>(rank), pad);
    a.pad_end.assign(static_cast<std::size_t>(rank), pad);
    return a;
}

OpCase batch_norm_case(std::string name, Shape input, bool fuse_relu, Mode mode) {
    OpCase c;
    c.name = std::move(name);
    c.input = std::move(input);
    c.mode = mode;
    ops::BatchNormAttributes attributes;
    attributes.fuse_relu = fuse_relu;
    c.build = [=](Graph& g, int x) { return g.batch_norm(x, attributes, "op"); };
    c.reference = [=](const Tensor& x, const std::vector<Tensor>& p, const Tensor& dy) {
        const std::int64_t channels = x.dim(1);
        const Tensor zeros = Tensor::zeros({channels}, DType::F32);
        const Tensor ones = Tensor::full<float>({channels}, 1.0f);
        Expected e;
        if (mode == Mode::Eval) {  // fresh running statistics: mean 0, variance 1
            e.output = reference::batch_norm_forward_inference(x, p[0], p[1], zeros, ones, attributes);
            return e;
        }
        const auto forward = reference::batch_norm_forward_training(x, p[0], p[1], zeros, ones, attributes);
        const auto backward = reference::batch_norm_backward(dy, x, p[0], p[1], forward.mean, forward.variance, attributes);
        e.output = forward.y;
        e.input_gradient = backward.x;
        e.parameter_gradients = {backward.gamma, backward.beta};
        return e;
    };
    return c;
}

std::vector<OpCase> all_cases() {
    std::vector<OpCase> cases;
    // Convolution: 2D and 3D, odd and even sizes and kernels, strides, dilations, asymmetric padding, bias.
    cases.push_back(conv_case("conv2d_3x3_same", {2, 3, 9, 8}, 5, ops::ConvAttributes::same(2, 3)));
    cases.push_back(conv_case("conv2d_3x3_bias", {2, 4, 8, 8}, 6, with(ops::ConvAttributes::same(2, 3), [](auto& a) { a.has_bias = true; })));
    cases.push_back(conv_case("conv2d_2x2_even_same", {1, 3, 7, 6}, 4, ops::ConvAttributes::same(2, 2)));
    cases.push_back(conv_case("conv2d_3x3_stride2_valid", {2, 3, 11, 10}, 4, ops::ConvAttributes::valid(2, 3, 2)));
    cases.push_back(conv_case("conv2d_3x3_dilation2", {1, 2, 12, 9}, 3, ops::ConvAttributes::same(2, 3, 2)));
    cases.push_back(conv_case("conv2d_asymmetric_padding", {1, 2, 7, 9}, 3, with(ops::ConvAttributes::valid(2, 3), [](auto& a) {
                                  a.pad_begin = {2, 0};
                                  a.pad_end = {0, 1};
                              })));
    cases.push_back(conv_case("conv2d_7x7_stride2_resnet_stem", {1, 3, 16, 16}, 8, with(ops::ConvAttributes::valid(2, 7, 2), [](auto& a) {
                                  a.pad_begin = {3, 3};
                                  a.pad_end = {3, 3};
                              })));
    cases.push_back(conv_case("conv2d_16ch_blocked", {2, 16, 8, 8}, 32, ops::ConvAttributes::same(2, 3)));
    cases.push_back(conv_case("conv3d_3x3x3_same", {1, 2, 5, 6, 7}, 4, ops::ConvAttributes::same(3, 3)));
    // Few channels in blocks of 8, 3 taps, stride 1: row convolutions on AVX-512 CPUs (row_convolution.hpp),
    // with rows that end inside a vector, padding on one side only, a valid (halo-widened) window and a bias.
    cases.push_back(conv_case("conv2d_rows_8ch", {2, 8, 9, 37}, 8, ops::ConvAttributes::same(2, 3)));
    cases.push_back(conv_case("conv2d_rows_asymmetric_bias", {1, 16, 7, 21}, 8, with(ops::ConvAttributes::valid(2, 3), [](auto& a) {
                                  a.pad_begin = {2, 0};
                                  a.pad_end = {0, 1};
                                  a.has_bias = true;
                              })));
    cases.push_back(conv_case("conv3d_rows_8ch_bias", {1, 8, 5, 6, 19}, 8, with(ops::ConvAttributes::same(3, 3), [](auto& a) { a.has_bias = true; })));
    cases.push_back(conv_case("conv3d_rows_valid_16_to_8", {2, 16, 4, 5, 34}, 8, ops::ConvAttributes::valid(3, 3)));
    cases.push_back(conv_case("conv3d_3x3x3_bias_16ch", {1, 16, 4, 6, 6}, 16, with(ops::ConvAttributes::same(3, 3), [](auto& a) { a.has_bias = true; })));
    cases.push_back(conv_case("conv3d_2x2x2_stride2", {2, 3, 6, 7, 8}, 4, ops::ConvAttributes::valid(3, 2, 2)));
    cases.push_back(conv_case("conv3d_dilation2", {1, 2, 7, 7, 7}, 2, ops::ConvAttributes::same(3, 3, 2)));
    cases.push_back(conv_case("conv3d_1x1x1_head", {1, 8, 4, 5, 6}, 2, ops::ConvAttributes::same(3, 1)));
    // Transposed convolution: kernel = stride = 2 (U-Net), and an overlapping one.
    cases.push_back(conv_transpose_case("conv_transpose2d_k2s2", {2, 8, 5, 6}, 4, ops::ConvTransposeAttributes::upsample(2)));
    cases.push_back(conv_transpose_case("conv_transpose2d_k3s2_bias", {1, 3, 4, 5}, 2, [] {
        ops::ConvTransposeAttributes a{{3, 3}, {2, 2}, true};
        return a;
    }()));
    cases.push_back(conv_transpose_case("conv_transpose3d_k2s2", {1, 16, 3, 4, 5}, 8, ops::ConvTransposeAttributes::upsample(3)));
    cases.push_back(conv_transpose_case("conv_transpose2d_k2s2_bias", {2, 32, 4, 6}, 16, [] {
        ops::ConvTransposeAttributes a = ops::ConvTransposeAttributes::upsample(2);
        a.has_bias = true;
        return a;
    }()));
    cases.push_back(conv_transpose_case("conv_transpose3d_k2s2_bias_8ch", {1, 8, 3, 4, 5}, 8, [] {
        ops::ConvTransposeAttributes a = ops::ConvTransposeAttributes::upsample(3);
        a.has_bias = true;
        return a;
    }()));
    // Pooling.
    cases.push_back(pool_case("max_pool2d_k2s2", {2, 3, 8, 10}, ops::PoolAttributes::max_down(2)));
    cases.push_back(pool_case("max_pool2d_k3s2_pad1", {1, 4, 9, 8}, pool_attributes(ops::PoolKind::Max, 2, 3, 2, 1)));
    cases.push_back(pool_case("avg_pool2d_k3s2_pad1", {1, 4, 9, 8}, pool_attributes(ops::PoolKind::Average, 2, 3, 2, 1)));
    cases.push_back(pool_case("max_pool3d_k2s2", {1, 16, 4, 6, 8}, ops::PoolAttributes::max_down(3)));
    cases.push_back(pool_case("avg_pool3d_k2s2", {2, 3, 4, 4, 6}, pool_attributes(ops::PoolKind::Average, 3, 2, 2, 0)));
    // Batch normalisation, alone and with the fused ReLU, training and inference.
    cases.push_back(batch_norm_case("batch_norm2d", {4, 3, 5, 6}, false, Mode::Train));
    cases.push_back(batch_norm_case("batch_norm2d_relu_16ch", {2, 16, 6, 6}, true, Mode::Train));
    cases.push_back(batch_norm_case("batch_norm3d_relu", {2, 3, 4, 5, 6}, true, Mode::Train));
    cases.push_back(batch_norm_case("batch_norm2d_inference", {2, 3, 5, 6}, true, Mode::Eval));
    // Nearest-neighbour upsampling: 2D and 3D, equal and unequal factors, plain and blocked layouts.
    for (const auto& [name, input, factor] :
         {std::tuple<std::string, Shape, ops::Extents>{"upsample2d_x2", {2, 3, 5, 4}, {2, 2}},
          {"upsample2d_x3x1", {1, 4, 3, 5}, {3, 1}},
          {"upsample2d_x2_16ch_blocked", {2, 16, 4, 3}, {2, 2}},
          {"upsample3d_x2", {1, 3, 2, 3, 4}, {2, 2, 2}},
          {"upsample3d_x1x2x3_16ch", {1, 16, 2, 2, 3}, {1, 2, 3}}}) {
        OpCase c;
        c.name = name;
        c.input = input;
        c.build = [factor](Graph& g, int x) { return g.upsample(x, factor, "op"); };
        c.reference = [factor](const Tensor& x, const std::vector<Tensor>&, const Tensor& dy) {
            return Expected{reference::upsample_nearest_forward(x, factor), reference::upsample_nearest_backward(dy, factor), {}};
        };
        cases.push_back(c);
    }
    // Cropping (an unpadded U-Net's skips): 2D and 3D, plain and blocked layouts.
    for (const auto& [name, input, offset, extent] :
         {std::tuple<std::string, Shape, ops::Extents, ops::Extents>{"crop2d", {2, 3, 7, 6}, {2, 1}, {3, 4}},
          {"crop2d_16ch_blocked", {2, 16, 6, 6}, {1, 1}, {4, 4}},
          {"crop3d", {1, 3, 5, 6, 4}, {1, 2, 0}, {3, 2, 4}}}) {
        OpCase c;
        c.name = name;
        c.input = input;
        c.build = [offset, extent](Graph& g, int x) { return g.crop(x, offset, extent, "op"); };
        c.reference = [offset, extent, input](const Tensor& x, const std::vector<Tensor>&, const Tensor& dy) {
            return Expected{reference::crop_forward(x, offset, extent), reference::crop_backward(dy, input, offset), {}};
        };
        cases.push_back(c);
    }
    // ReLU, global average pooling and the dense classifier.
    {
        OpCase c;
        c.name = "relu";
        c.input = {2, 3, 5, 7};
        c.build = [](Graph& g, int x) { return g.relu(x, "op"); };
        c.reference = [](const Tensor& x, const std::vector<Tensor>&, const Tensor& dy) {
            return Expected{reference::relu_forward(x), reference::relu_backward(dy, x), {}};
        };
        cases.push_back(c);
    }
    {
        OpCase c;
        c.name = "global_average_pool_dense";
        c.input = {3, 5, 4, 6};
        c.build = [](Graph& g, int x) { return g.dense(g.global_average_pool(x, "pool"), 7, "op"); };
        c.reference = [](const Tensor& x, const std::vector<Tensor>& p, const Tensor& dy) {
            const Tensor pooled = reference::global_average_pool(x);
            const auto dense = reference::dense_backward(dy, pooled, p[0]);
            return Expected{reference::dense_forward(pooled, p[0], &p[1]),
                            reference::global_average_pool_backward(dense.x, x.shape()),
                            {dense.w, dense.bias}};
        };
        cases.push_back(c);
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(AllOps, ExecutorOps, testing::ValuesIn(all_cases()),
                         [](const testing::TestParamInfo<OpCase>& case_info) { return case_info.param.name; });

// Add and concat have two inputs: both gradients are checked, including a node feeding two consumers.
TEST(Executor, AddAndConcatRouteGradientsToBothInputs) {
    Graph graph("branches");
    const int x = graph.input({2, 3, 6, 5});
    const int a = graph.conv(x, 3, ops::ConvAttributes::same(2, 1), "a");
    const int b = graph.conv(x, 3, ops::ConvAttributes::same(2, 3), "b");
    const int sum = graph.add(a, b, "sum");
    const int joined = graph.concat({sum, a}, "joined");  // a feeds both add and concat
    graph.set_output(joined);
    Executor executor(graph, keeping_gradients());
    executor.initialize_parameters(3);
    const Tensor input = reference::random_uniform({2, 3, 6, 5}, 5);
    const Tensor output = executor.forward(input, Mode::Train);
    const auto params = executor.parameters();
    const ops::ConvAttributes one = ops::ConvAttributes::same(2, 1), three = ops::ConvAttributes::same(2, 3);
    const Tensor a_value = reference::conv_forward(input, params[0].value, nullptr, one);
    const Tensor b_value = reference::conv_forward(input, params[1].value, nullptr, three);
    const Tensor sum_value = reference::add(a_value, b_value);
    EXPECT_LE(relative_difference(output, reference::concat_channels({sum_value, a_value})), tolerance);

    const Tensor dy = reference::random_uniform(output.shape(), 6);
    executor.backward(dy);
    const auto parts = reference::concat_channels_backward(dy, {3, 3});
    // d/da = d/dsum (through add) + the concat's second part; d/db = d/dsum.
    EXPECT_LE(relative_difference(executor.activation_gradient(sum), parts[0]), tolerance);
    EXPECT_LE(relative_difference(executor.activation_gradient(a), reference::add(parts[0], parts[1])), tolerance);
    EXPECT_LE(relative_difference(executor.activation_gradient(b), parts[0]), tolerance);
    const auto expected_b = reference::conv_backward_weights(input, parts[0], three, params[1].value.shape());
    EXPECT_LE(relative_difference(params[1].gradient, expected_b.weights), tolerance);
}

// An FPN's top-down step in miniature: conv → nearest ×2 upsample → conv, 2D and 3D, every value and
// gradient against the references.
TEST(Executor, ConvUpsampleConvMatchesTheReferences) {
    for (const auto& [input_shape, width] : {std::pair<Shape, std::int64_t>{{2, 3, 6, 5}, 16}, {{1, 2, 3, 4, 5}, 8}}) {
        const int rank = static_cast<int>(input_shape.size()) - 2;
        const ops::Extents factor(static_cast<std::size_t>(rank), 2);
        const ops::ConvAttributes first = ops::ConvAttributes::same(rank, 3);
        ops::ConvAttributes second = ops::ConvAttributes::same(rank, 3);
        second.has_bias = true;
        Graph graph("conv_upsample_conv");
        const int x = graph.input(input_shape);
        const int a = graph.conv(x, width, first, "a");
        const int up = graph.upsample(a, factor, "up");
        graph.set_output(graph.conv(up, 3, second, "b"));
        EXPECT_EQ(graph.node(up).output_shape[2], 2 * input_shape[2]);

        Executor executor(graph, keeping_gradients());
        executor.initialize_parameters(5);
        const auto params = executor.parameters();
        params[2].value.copy_from(reference::random_uniform(params[2].value.shape(), 21));  // a non-zero bias
        const Tensor input = reference::random_uniform(input_shape, 22);
        const Tensor output = executor.forward(input, Mode::Train);
        const Tensor a_value = reference::conv_forward(input, params[0].value, nullptr, first);
        const Tensor up_value = reference::upsample_nearest_forward(a_value, factor);
        EXPECT_LE(relative_difference(executor.activation(up), up_value), tolerance) << shape_to_string(input_shape);
        EXPECT_LE(relative_difference(output, reference::conv_forward(up_value, params[1].value, &params[2].value, second)),
                  tolerance)
            << shape_to_string(input_shape);

        const Tensor dy = reference::random_uniform(output.shape(), 23);
        executor.backward(dy);
        const Tensor d_up = reference::conv_backward_data(dy, params[1].value, up_value.shape(), second);
        const auto second_weights = reference::conv_backward_weights(up_value, dy, second, params[1].value.shape());
        const Tensor d_a = reference::upsample_nearest_backward(d_up, factor);
        const auto first_weights = reference::conv_backward_weights(input, d_a, first, params[0].value.shape());
        EXPECT_LE(relative_difference(executor.activation_gradient(up), d_up), tolerance) << shape_to_string(input_shape);
        EXPECT_LE(relative_difference(executor.activation_gradient(a), d_a), tolerance) << shape_to_string(input_shape);
        EXPECT_LE(relative_difference(params[0].gradient, first_weights.weights), tolerance) << shape_to_string(input_shape);
        EXPECT_LE(relative_difference(params[1].gradient, second_weights.weights), tolerance) << shape_to_string(input_shape);
        EXPECT_LE(relative_difference(params[2].gradient, second_weights.bias), tolerance) << shape_to_string(input_shape);
        EXPECT_EQ(graph.cost(up).forward_flops, 0.0);
        EXPECT_EQ(graph.cost(up).backward_flops, static_cast<double>(num_elements_of(graph.node(up).output_shape)));
        EXPECT_EQ(graph.cost(up).saved_bytes, 0);
    }
}

TEST(Executor, UpsampleRejectsBadFactorsWithClearMessages) {
    Graph graph("bad_upsample");
    const int x = graph.input({1, 2, 4, 4});
    auto message = [&](const ops::Extents& factor) {
        try {
            graph.upsample(x, factor, "up");
        } catch (const Error& error) {
            return std::string(error.what());
        }
        return std::string("(no error)");
    };
    EXPECT_NE(message({2}).find("needs one factor per spatial axis"), std::string::npos) << message({2});
    EXPECT_NE(message({2, 0}).find("needs factors ≥ 1"), std::string::npos) << message({2, 0});
    const int pooled = graph.global_average_pool(x, "pool");
    try {
        graph.upsample(pooled, {2, 2}, "flat");
        FAIL();
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("needs spatial axes"), std::string::npos) << error.what();
    }
    EXPECT_EQ(op_name(OpKind::Upsample), "upsample");
}

// A node nothing consumes (a detector's other heads) gets a zero gradient, not whatever its buffer held.
TEST(Executor, UnconsumedNodesStartBackwardFromZero) {
    Graph graph("two_heads");
    const int x = graph.input({2, 3, 6, 6});
    const int trunk = graph.conv(x, 8, ops::ConvAttributes::same(2, 3), "trunk");
    const int head = graph.conv(trunk, 2, ops::ConvAttributes::same(2, 1), "head");
    const int other = graph.conv(trunk, 4, ops::ConvAttributes::same(2, 1), "other");
    graph.set_output(head);
    Executor executor(graph, keeping_gradients());
    executor.initialize_parameters(8);
    const Tensor input = reference::random_uniform({2, 3, 6, 6}, 31);
    const Tensor dy = reference::random_uniform({2, 2, 6, 6}, 32);
    for (int step = 0; step < 2; ++step) {
        executor.forward(input, Mode::Train);
        executor.backward(dy);
        const Tensor other_gradient = executor.activation_gradient(other);
        for (std::int64_t i = 0; i < other_gradient.num_elements(); ++i) ASSERT_EQ(other_gradient.data<float>()[i], 0.0f);
        const auto params = executor.parameters();
        for (std::int64_t i = 0; i < params[2].gradient.num_elements(); ++i) ASSERT_EQ(params[2].gradient.data<float>()[i], 0.0f);
        const Tensor expected = reference::conv_backward_data(dy, params[1].value, {2, 8, 6, 6}, ops::ConvAttributes::same(2, 1));
        EXPECT_LE(relative_difference(executor.activation_gradient(trunk), expected), tolerance);
    }
}

namespace {

// input [2, 3, 8, 8] → conv "head.l0" (3×3, bias) and, on the 2×-average-pooled input, "head.l1":
// the same convolution on a coarser level, sharing head.l0's parameters or with its own.
Graph two_level_head(bool shared) {
    Graph graph(shared ? "shared_head" : "separate_heads");
    const int x = graph.input({2, 3, 8, 8});
    ops::PoolAttributes average = ops::PoolAttributes::max_down(2);
    average.kind = ops::PoolKind::Average;
    const int coarse = graph.pool(x, average, "coarse");
    ops::ConvAttributes conv = ops::ConvAttributes::same(2, 3);
    conv.has_bias = true;
    const int fine_head = graph.conv(x, 4, conv, "head.l0");
    const int coarse_head = graph.conv(coarse, 4, conv, "head.l1", shared ? fine_head : -1);
    graph.set_output(fine_head);
    graph.add_output(coarse_head);
    return graph;
}

}  // namespace

TEST(Executor, SharedConvolutionGradientIsTheSumOfItsUses) {
    Graph shared_graph = two_level_head(true);
    ASSERT_EQ(shared_graph.parameters().size(), 2u);  // one weight, one bias
    EXPECT_EQ(shared_graph.parameter_count(), 4 * 3 * 9 + 4);
    EXPECT_EQ(shared_graph.cost(shared_graph.output_nodes()[1]).parameter_count, 0);
    Executor shared(shared_graph);
    Executor separate(two_level_head(false));
    shared.initialize_parameters(5);
    for (std::size_t p = 0; p < 4; ++p) {  // separate: l0's weight and bias, then l1's, both the shared values
        separate.parameters()[p].value = shared.parameters()[p % 2].value.clone();
    }
    const Tensor input = reference::random_uniform({2, 3, 8, 8}, 41);
    const std::vector<Tensor> dy = {reference::random_uniform({2, 4, 8, 8}, 42), reference::random_uniform({2, 4, 4, 4}, 43)};
    for (int step = 0; step < 2; ++step) {  // twice: the gradient is set, not accumulated across steps
        shared.forward(input, Mode::Train);
        separate.forward(input, Mode::Train);
        shared.backward(dy);
        separate.backward(dy);
        for (std::size_t p = 0; p < 2; ++p) {
            Tensor sum = separate.parameters()[p].gradient.clone();
            for (std::int64_t i = 0; i < sum.num_elements(); ++i) sum.data<float>()[i] += separate.parameters()[p + 2].gradient.data<float>()[i];
            EXPECT_LE(relative_difference(shared.parameters()[p].gradient, sum), 1e-6) << shared.parameters()[p].name;
        }
        const std::vector<Tensor> shared_outputs = shared.outputs(), separate_outputs = separate.outputs();
        for (std::size_t o = 0; o < 2; ++o) EXPECT_EQ(relative_difference(shared_outputs[o], separate_outputs[o]), 0.0);
    }
    // And against central differences of L = <dy0, head.l0> + <dy1, head.l1> in the shared weight and bias.
    auto loss = [&](const std::vector<Tensor>& parameters) {
        Executor probe(shared_graph);
        for (std::size_t p = 0; p < 2; ++p) probe.parameters()[p].value = parameters[p].clone();
        probe.forward(input, Mode::Train);
        const std::vector<Tensor> outputs = probe.outputs();
        return reference::inner_product(dy[0], outputs[0]) + reference::inner_product(dy[1], outputs[1]);
    };
    const reference::GradientCheckReport report = reference::check_gradients(
        loss, {shared.parameters()[0].value, shared.parameters()[1].value},
        {shared.parameters()[0].gradient, shared.parameters()[1].gradient});
    EXPECT_LE(report.max_relative_error, 1e-2) << report.describe();
}

TEST(Executor, SeveralOutputsTakeOneGradientEach) {
    const Graph graph = two_level_head(false);
    Executor executor(graph);
    executor.initialize_parameters(6);
    const Tensor input = reference::random_uniform({2, 3, 8, 8}, 51);
    executor.forward(input, Mode::Train);
    const std::vector<Tensor> outputs = executor.outputs();
    ASSERT_EQ(outputs.size(), 2u);
    EXPECT_EQ(outputs[1].shape(), (Shape{2, 4, 4, 4}));
    EXPECT_EQ(relative_difference(executor.output(0), outputs[0]), 0.0);
    // One gradient for two outputs: the second output's parameters get none.
    executor.backward(reference::random_uniform({2, 4, 8, 8}, 52));
    for (std::int64_t i = 0; i < executor.parameters()[2].gradient.num_elements(); ++i) {
        ASSERT_EQ(executor.parameters()[2].gradient.data<float>()[i], 0.0f);
    }
    const std::vector<Tensor> wrong_count(3, reference::random_uniform({2, 4, 8, 8}, 53));
    EXPECT_THROW(executor.backward(wrong_count), Error);
    EXPECT_THROW(executor.output(2), Error);
    // An output must end a path; sharing needs a conv of the same weight shape.
    Graph consumed("consumed");
    const int x = consumed.input({1, 3, 8, 8});
    const int a = consumed.conv(x, 4, ops::ConvAttributes::same(2, 3), "a");
    consumed.set_output(a);
    consumed.add_output(consumed.relu(a, "after"));
    EXPECT_THROW(Executor{consumed}, Error);
    EXPECT_THROW(consumed.add_output(a), Error);
    EXPECT_THROW(consumed.conv(x, 8, ops::ConvAttributes::same(2, 3), "wider", a), Error);
    EXPECT_THROW(consumed.conv(x, 4, ops::ConvAttributes::same(2, 3), "on_relu", consumed.output_nodes()[1]), Error);
}

TEST(Executor, BatchNormUpdatesRunningStatistics) {
    Graph graph("bn");
    const int x = graph.input({4, 3, 5, 5});
    graph.set_output(graph.batch_norm(graph.conv(x, 3, ops::ConvAttributes::same(2, 1), "c"), {}, "bn"));
    Executor executor(graph);
    executor.initialize_parameters(1);
    const Tensor input = reference::random_uniform({4, 3, 5, 5}, 2, 0.0, 4.0);
    executor.forward(input, Mode::Train);
    const Tensor conv = reference::conv_forward(input, executor.parameters()[0].value, nullptr, ops::ConvAttributes::same(2, 1));
    const auto expected = reference::batch_norm_forward_training(conv, executor.parameters()[1].value,
                                                                 executor.parameters()[2].value,
                                                                 Tensor::zeros({3}, DType::F32),
                                                                 Tensor::full<float>({3}, 1.0f), {});
    EXPECT_LE(relative_difference(executor.buffers()[0], expected.running_mean), tolerance);
    EXPECT_LE(relative_difference(executor.buffers()[1], expected.running_variance), tolerance);
}

TEST(Executor, SameSeedGivesBitIdenticalResults) {
    auto run = [] {
        Graph graph("seeded");
        const int x = graph.input({2, 2, 12, 12});
        int y = graph.conv(x, 16, ops::ConvAttributes::same(2, 3), "c1");
        y = graph.batch_norm(y, {.fuse_relu = true}, "bn1");
        y = graph.pool(y, ops::PoolAttributes::max_down(2), "p1");
        graph.set_output(graph.conv(y, 2, ops::ConvAttributes::same(2, 3), "c2"));
        Executor executor(graph);
        executor.initialize_parameters(99);
        const Tensor out = executor.forward(reference::random_uniform({2, 2, 12, 12}, 4), Mode::Train);
        executor.backward(reference::random_uniform(out.shape(), 8));
        return std::make_pair(out, executor.parameters()[0].gradient.clone());
    };
    const auto first = run();
    const auto second = run();
    EXPECT_EQ(std::memcmp(first.first.raw_data(), second.first.raw_data(), first.first.num_bytes()), 0);
    EXPECT_EQ(std::memcmp(first.second.raw_data(), second.second.raw_data(), first.second.num_bytes()), 0);
}

TEST(Executor, ABackwardInTwoPartsGivesTheBitsOfOneCall) {
    // The core mesh computes the input gradients of a convolution reading a halo node, sends their halo
    // rows, and computes its weights' gradients while they travel, after the halo node's backward: the
    // same bits as one call (its output gradient kept live that long, not reused by the halo node's).
    Graph graph("split");
    const int x = graph.input({2, 3, 12, 12});
    int y = graph.conv(x, 8, ops::ConvAttributes::same(2, 3), "c1");
    y = graph.relu(y, "r1");
    y = graph.halo(y, {14, 14}, {.interior_offset = {1, 1}, .interior_extent = {12, 12}}, "up.halo");
    const int up = graph.conv_transpose(y, 8, ops::ConvTransposeAttributes::upsample(2), "up");
    y = graph.relu(up, "r2");
    y = graph.halo(y, {26, 26}, {.interior_offset = {1, 1}, .interior_extent = {24, 24}}, "c2.halo");
    const int c2 = graph.conv(y, 4, ops::ConvAttributes::valid(2, 3), "c2");
    graph.set_output(c2);
    const Tensor input = reference::random_uniform({2, 3, 12, 12}, 61);
    const Tensor dy = reference::random_uniform({2, 4, 24, 24}, 62);
    Executor whole(graph), parts(graph);
    whole.initialize_parameters(7);
    parts.initialize_parameters(7);
    whole.forward(input, Mode::Train);
    whole.backward(dy);
    parts.forward(input, Mode::Train);
    parts.begin_backward(dy);
    EXPECT_FALSE(parts.splits_backward(graph.node(up).inputs[0]));  // a halo node runs backward in one call
    EXPECT_THROW(parts.backward_node_inputs(graph.node(up).inputs[0]), Error);
    // Each convolution reading a halo node: input gradients, the halo node's backward, its weights'.
    for (int node = static_cast<int>(graph.nodes().size()); node-- > 1;) {
        const int feeding = graph.node(node).inputs[0];
        if (parts.splits_backward(node) && graph.node(feeding).kind == OpKind::Halo) {
            ASSERT_EQ(feeding, node - 1);
            parts.backward_node_inputs(node);
            parts.backward_node(feeding);
            parts.backward_node_weights(node);
            --node;  // the halo node ran
        } else {
            parts.backward_node(node);
        }
    }
    ASSERT_EQ(whole.parameters().size(), parts.parameters().size());
    for (std::size_t p = 0; p < whole.parameters().size(); ++p) {
        const Tensor& a = whole.parameters()[p].gradient;
        const Tensor& b = parts.parameters()[p].gradient;
        EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()), 0) << whole.parameters()[p].name;
        EXPECT_GT(reference::inner_product(a, a), 0) << whole.parameters()[p].name;
    }
}

// A halo buffer's outer rows belong to the core mesh; on an executor alone they start at zero, as at the
// image border, whatever the memory held before (here: freed buffers of 1e30, which the allocator may
// hand back).
TEST(Executor, HaloBuffersOuterRowsStartAtZero) {
    for (int round = 0; round < 4; ++round) {
        {
            std::vector<float> freed(1 << 16, 1e30f);
            volatile float kept = freed[static_cast<std::size_t>(round)];  // the fill is not optimised away
            (void)kept;
        }
        Graph graph("ring");
        const int x = graph.input({1, 2, 5, 6});
        const int c = graph.conv(x, 16, ops::ConvAttributes::same(2, 3), "c");
        const int halo = graph.halo(c, {7, 8}, {.interior_offset = {1, 1}, .interior_extent = {5, 6}}, "ring");
        graph.set_output(graph.conv(halo, 4, ops::ConvAttributes::valid(2, 3), "after"));
        Executor executor(graph);
        executor.initialize_parameters(3);
        executor.forward(reference::random_uniform({1, 2, 5, 6}, 5), Mode::Train);
        const Tensor widened = executor.activation(halo), tile = executor.activation(c);
        for (std::int64_t ch = 0; ch < 16; ++ch) {
            for (std::int64_t y = 0; y < 7; ++y) {
                for (std::int64_t x_ = 0; x_ < 8; ++x_) {
                    const float value = widened.data<float>()[(ch * 7 + y) * 8 + x_];
                    const bool inside = y >= 1 && y < 6 && x_ >= 1 && x_ < 7;
                    const float expected = inside ? tile.data<float>()[(ch * 5 + y - 1) * 6 + x_ - 1] : 0.0f;
                    ASSERT_EQ(value, expected) << "channel " << ch << " row " << y << " column " << x_;
                }
            }
        }
    }
}

bool same_bits(const Tensor& first, const Tensor& second) {
    return first.shape() == second.shape() && std::memcmp(first.raw_data(), second.raw_data(), first.num_bytes()) == 0;
}

// Two runs' weight gradients, parameter by parameter.
void expect_same_weight_gradients(const std::vector<Tensor>& first, const std::vector<Tensor>& second, const std::string& name) {
    ASSERT_EQ(first.size(), second.size()) << name;
    for (std::size_t p = 0; p < second.size(); ++p) EXPECT_TRUE(same_bits(first[p], second[p])) << name << " parameter " << p;
}

// What the in-place tests compare: one training step of a graph where `producer` feeds `halo` (its tile at
// `offset`) and reads `before`, then an eval forward, every activation gradient kept.
struct HaloStep {
    Tensor output, value, gradient, before_gradient, eval_output;  // value and gradient: the producer's
    std::vector<Tensor> weight_gradients;
    MemoryReport memory;
    std::string implementation;  // the producer's kernel
    bool in_place = false;       // the producer's first element is the halo buffer's at the interior's offset
};
struct HaloGraph {
    Graph graph;
    int before = -1, producer = -1, halo = -1;
    ops::Extents offset;
};
// With the halo nodes' in-place producers on, or off (TESSERA_HALO_IN_PLACE=0: the halo nodes copy).
HaloStep halo_step(const HaloGraph& g, const Tensor& input, bool in_place, bool distributed, std::uint64_t seed) {
    if (!in_place) ::setenv("TESSERA_HALO_IN_PLACE", "0", 1);
    Executor executor(g.graph, {.distributed_reductions = distributed, .keep_activation_gradients = true});
    ::unsetenv("TESSERA_HALO_IN_PLACE");
    executor.initialize_parameters(seed);
    HaloStep r;
    r.output = executor.forward(input, Mode::Train);
    executor.backward(reference::random_uniform(r.output.shape(), seed + 1));
    r.value = executor.activation(g.producer);
    r.gradient = executor.activation_gradient(g.producer);
    r.before_gradient = executor.activation_gradient(g.before);
    for (const Parameter& p : executor.parameters()) r.weight_gradients.push_back(p.gradient.clone());
    r.memory = executor.memory_report();
    r.implementation = executor.implementation(g.producer);
    const ops::TileBuffer tile = executor.value_buffer(g.producer), widened = executor.value_buffer(g.halo);
    const std::size_t rank = g.offset.size();
    const std::int64_t z = rank == 3 ? g.offset[0] : 0;
    r.in_place = tile.data == static_cast<char*>(widened.data) +
                                  widened.offset(0, 0, z, g.offset[rank - 2], g.offset[rank - 1]) * widened.element_size();
    r.eval_output = executor.forward(input, Mode::Eval);
    return r;
}

// The same bits in place as with the copies, and the producer's bytes counted once.
void expect_same_step(const HaloStep& in_place, const HaloStep& copied, std::int64_t producer_bytes, const std::string& name) {
    EXPECT_TRUE(same_bits(in_place.output, copied.output)) << name;
    EXPECT_TRUE(same_bits(in_place.eval_output, copied.eval_output)) << name;
    EXPECT_TRUE(same_bits(in_place.value, copied.value)) << name;
    EXPECT_TRUE(same_bits(in_place.gradient, copied.gradient)) << name;
    EXPECT_TRUE(same_bits(in_place.before_gradient, copied.before_gradient)) << name;
    expect_same_weight_gradients(in_place.weight_gradients, copied.weight_gradients, name);
    EXPECT_EQ(copied.memory.activations - in_place.memory.activations, producer_bytes) << name;
    EXPECT_EQ(copied.memory.halo_buffers, in_place.memory.halo_buffers) << name;
}

// A halo node widening `producer` (of `input`'s batch) to `widened` with its tile at `offset`, then a
// valid convolution.
void widen_and_finish(HaloGraph& g, const Shape& producer_shape, const Shape& widened) {
    const ops::Extents extent(producer_shape.begin() + 2, producer_shape.end());
    g.halo = g.graph.halo(g.producer, ops::Extents(widened.begin(), widened.end()), {.interior_offset = g.offset, .interior_extent = extent},
                          "widened");
    g.graph.set_output(g.graph.conv(g.halo, 4, ops::ConvAttributes::valid(static_cast<int>(extent.size()), 3), "after"));
}

struct InPlaceCase {
    Shape input, widened;
    std::int64_t channels;
    ops::Extents offset;
};

// The start every in-place case shares: `c`'s input and a same-padded convolution "a" to c.channels
// (g.before), the producer's input.
HaloGraph halo_graph_from_convolution(const std::string& name, const InPlaceCase& c) {
    HaloGraph g{.graph = Graph(name), .offset = c.offset};
    const int x = g.graph.input(c.input);
    g.before = g.graph.conv(x, c.channels, ops::ConvAttributes::same(static_cast<int>(c.input.size()) - 2, 3), "a");
    return g;
}

// A concatenation read by a halo node alone is written into the halo buffer's interior (and its gradient
// read from there): the same values and gradients as with the halo node's copies (TESSERA_HALO_IN_PLACE=0),
// its bytes counted once. Blocked 2D (16 + 16 channels, nChw16c where oneDNN picks it) and channels-last
// 3D (8 + 8, the row convolutions' layout on AVX-512).
TEST(Executor, ConcatenationIntoAHaloBufferMatchesTheCopies) {
    const std::vector<InPlaceCase> cases{{{2, 3, 6, 7}, {8, 9}, 16, {1, 2}}, {{1, 2, 5, 6, 7}, {6, 8, 8}, 8, {0, 1, 1}}};
    int in_place_cases = 0;
    for (const InPlaceCase& c : cases) {
        const int rank = static_cast<int>(c.input.size()) - 2;
        const std::string name = shape_to_string(c.input);
        HaloGraph g = halo_graph_from_convolution("join", c);
        const int b = g.graph.conv(g.before, c.channels, ops::ConvAttributes::same(rank, 3), "b");
        g.producer = g.graph.concat({g.before, b}, "joined");
        const Shape joined_shape = g.graph.node(g.producer).output_shape;  // a copy: adding nodes moves them
        widen_and_finish(g, joined_shape, c.widened);
        const Tensor input = reference::random_uniform(c.input, 61);
        const HaloStep copied = halo_step(g, input, false, false, 7), in_place = halo_step(g, input, true, false, 7);
        EXPECT_FALSE(copied.in_place) << name;
        if (in_place.implementation != "channel runs") {
            EXPECT_FALSE(in_place.in_place) << name;
        }
        if (!in_place.in_place) continue;  // oneDNN's concatenation (layouts other than 16-channel blocks or channels-last)
        ++in_place_cases;
        expect_same_step(in_place, copied, num_elements_of(joined_shape) * 4, name);
    }
    if (ops::row_convolution_available()) {
        EXPECT_EQ(in_place_cases, 2) << "both layouts write in place on an AVX-512 CPU";
    }
}

// A simulated core's batch norm (its own row loops) read by a halo node alone normalises into the halo
// buffer's interior and reads its gradient from there: the same bits as with the halo node's copies
// (TESSERA_HALO_IN_PLACE=0), its bytes counted once; and both match oneDNN's batch norm on one executor
// (no reduction phases) within rounding — values within 2e-6 of the largest, gradients (through the
// statistics' terms, summed in another order) within 1e-5 of each tensor's largest (4e-7 seen) — in
// training and in eval. 2D with 16 and 32 channels (one and two channel blocks, or channels-last) and 3D
// with 8 (channels-last, the row convolutions' layout); with and without the fused ReLU; with the AVX2
// loops and with the plain ones (TESSERA_ROW_KERNELS=0, what a CPU without AVX2 runs).
TEST(Executor, BatchNormIntoAHaloBufferMatchesTheCopies) {
    struct Case {
        InPlaceCase shapes;
        bool relu;
    };
    const std::vector<Case> cases{{{{2, 3, 6, 7}, {8, 9}, 16, {1, 2}}, true},
                                  {{{2, 3, 6, 7}, {7, 9}, 32, {1, 1}}, false},
                                  {{{1, 2, 5, 6, 7}, {6, 8, 8}, 8, {0, 1, 1}}, true}};
    int in_place_cases = 0;
    for (const bool vector_loops : {true, false})
    for (const Case& c : cases) {
        const InPlaceCase& shapes = c.shapes;
        const std::string name = shape_to_string(shapes.input) + " x" + std::to_string(shapes.channels) + (vector_loops ? "" : " plain loops");
        if (!vector_loops) ::setenv("TESSERA_ROW_KERNELS", "0", 1);
        HaloGraph g = halo_graph_from_convolution("normalised", shapes);
        g.producer = g.graph.batch_norm(g.before, {.fuse_relu = c.relu}, "bn");
        const Shape normalised_shape = g.graph.node(g.producer).output_shape;
        widen_and_finish(g, normalised_shape, shapes.widened);
        const Tensor input = reference::random_uniform(shapes.input, 71);
        const HaloStep copied = halo_step(g, input, false, true, 9), in_place = halo_step(g, input, true, true, 9),
                       onednn = halo_step(g, input, true, false, 9);
        ::unsetenv("TESSERA_ROW_KERNELS");
        EXPECT_FALSE(copied.in_place) << name;
        EXPECT_FALSE(onednn.in_place) << name;
        EXPECT_TRUE(in_place.in_place) << name;
        if (!in_place.in_place) continue;
        ++in_place_cases;
        expect_same_step(in_place, copied, num_elements_of(normalised_shape) * 4, name);
        EXPECT_LE(relative_difference(in_place.value, onednn.value), 2e-6) << name;
        EXPECT_LE(relative_difference(in_place.output, onednn.output), 2e-6) << name;
        EXPECT_LE(relative_difference(in_place.eval_output, onednn.eval_output), 2e-6) << name;
        EXPECT_LE(relative_difference(in_place.gradient, onednn.gradient), 1e-5) << name;
        EXPECT_LE(relative_difference(in_place.before_gradient, onednn.before_gradient), 1e-5) << name;
        ASSERT_EQ(in_place.weight_gradients.size(), onednn.weight_gradients.size());
        for (std::size_t p = 0; p < onednn.weight_gradients.size(); ++p)
            EXPECT_LE(relative_difference(in_place.weight_gradients[p], onednn.weight_gradients[p]), 1e-5) << name << " parameter " << p;
    }
    EXPECT_EQ(in_place_cases, 6);
}

// Max pooling read by a halo node alone (each U-Net level's first convolution) writes into the halo
// buffer's interior and reads its gradient from there: the same bits as with the halo node's copies,
// its bytes counted once. 2D blocked (16 channels) and 3D channels-last (8), an odd extent (its last row
// in no window) included.
TEST(Executor, PoolingIntoAHaloBufferMatchesTheCopies) {
    const std::vector<InPlaceCase> cases{{{2, 3, 12, 14}, {8, 9}, 16, {1, 2}}, {{1, 2, 10, 11, 12}, {6, 7, 7}, 8, {0, 1, 1}}};
    int in_place_cases = 0;
    for (const InPlaceCase& c : cases) {
        const int rank = static_cast<int>(c.input.size()) - 2;
        const std::string name = shape_to_string(c.input);
        HaloGraph g = halo_graph_from_convolution("pooled", c);
        g.producer = g.graph.pool(g.before, ops::PoolAttributes::max_down(rank), "pool");
        const Shape pooled_shape = g.graph.node(g.producer).output_shape;
        widen_and_finish(g, pooled_shape, c.widened);
        const Tensor input = reference::random_uniform(c.input, 81);
        const HaloStep copied = halo_step(g, input, false, false, 11), in_place = halo_step(g, input, true, false, 11);
        EXPECT_FALSE(copied.in_place) << name;
        if (in_place.implementation != "rows:avx2") {
            EXPECT_FALSE(in_place.in_place) << name;
        }
        if (!in_place.in_place) continue;  // oneDNN's pooling (no AVX2, or a layout of other lanes)
        ++in_place_cases;
        expect_same_step(in_place, copied, num_elements_of(pooled_shape) * 4, name);
    }
    if (ops::vector_row_kernels_enabled()) {
        EXPECT_EQ(in_place_cases, 2) << "both layouts pool in place on an AVX2 CPU";
    }
}

TEST(Executor, RejectsWrongInputsWithClearMessages) {
    Graph graph("checked");
    const int x = graph.input({1, 2, 8, 8});
    graph.set_output(graph.conv(x, 4, ops::ConvAttributes::same(2, 3), "c"));
    Executor executor(graph);
    try {
        executor.forward(Tensor::zeros({1, 3, 8, 8}, DType::F32), Mode::Train);
        FAIL();
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("expects an f32 input of shape [1, 2, 8, 8], got f32 [1, 3, 8, 8]"),
                  std::string::npos)
            << error.what();
    }
    EXPECT_THROW(executor.backward(Tensor::zeros({1, 4, 8, 8}, DType::F32)), Error);  // no forward yet
    try {
        Graph bad("bad");
        const int y = bad.input({1, 2, 4, 4});
        bad.conv(y, 4, ops::ConvAttributes::valid(2, 5), "too_big");
        FAIL();
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("needs at least 5 elements"), std::string::npos) << error.what();
    }
}

}  // namespace

namespace {

// bf16 keeps 8 significant bits (relative rounding 2^-9 ≈ 0.2%); through a few layers of sums the
// outputs of a small U-Net stay within 3% of the f32 run, relative to their largest value. Parameter
// gradients are long sums of bf16 products with cancellation (a BN shift's gradient sums dy over every
// voxel): within 15%.
constexpr double bf16_tolerance = 3e-2;
constexpr double bf16_gradient_tolerance = 0.15;

// bf16 kernels only where the CPU has bf16 dot products, read here from CPUID itself: AVX512-BF16 (leaf 7,
// subleaf 1, EAX bit 5) or AMX-BF16 (leaf 7, subleaf 0, EDX bit 22), on an AVX-512 CPU. Elsewhere oneDNN's
// bf16 kernels convert in software (AVX-512 without BF16) or are missing (AVX2), and BF16 is emulated.
TEST(ExecutorBf16, NativeKernelsOnlyWhereTheCpuHasBf16DotProducts) {
    if (std::getenv("ONEDNN_MAX_CPU_ISA") || std::getenv("TESSERA_BF16_KERNELS")) GTEST_SKIP() << "the choice is set by hand";
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    bool avx512_bf16 = false, amx_bf16 = false;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) amx_bf16 = (edx >> 22) & 1u;
    if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) avx512_bf16 = (eax >> 5) & 1u;
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    EXPECT_EQ(ops::has_native_bf16(), avx512 && (avx512_bf16 || amx_bf16))
        << "AVX512-BF16 " << avx512_bf16 << ", AMX-BF16 " << amx_bf16 << ", AVX-512 " << avx512;
}

TEST(ExecutorBf16, MatchesTheF32RunWithinBf16Precision) {
    // Native bf16 kernels where the CPU has bf16 dot products, emulated everywhere else; both checked below.
    for (const bool emulated : {false, true})
    for (const Shape& input_shape : {Shape{2, 1, 32, 32}, Shape{1, 1, 16, 16, 16}}) {
        Graph graph("bf16");
        const int x = graph.input(input_shape);
        const int rank = static_cast<int>(input_shape.size()) - 2;
        const int c1 = graph.conv(x, 16, ops::ConvAttributes::same(rank, 3), "c1");
        int y = graph.batch_norm(c1, {.fuse_relu = true}, "b1");
        const int skip = y;
        y = graph.pool(y, ops::PoolAttributes::max_down(rank), "p");
        const int c2 = graph.conv(y, 32, ops::ConvAttributes::same(rank, 3), "c2");
        y = graph.batch_norm(c2, {.fuse_relu = true}, "b2");
        ops::ConvTransposeAttributes up = ops::ConvTransposeAttributes::upsample(rank);
        up.has_bias = true;
        y = graph.concat({skip, graph.conv_transpose(y, 16, up, "up")}, "cat");
        graph.set_output(graph.conv(y, 2, ops::ConvAttributes::same(rank, 1), "head"));

        Executor f32(graph);
        Executor bf16(graph, {.precision = Precision::BF16, .emulate_bf16 = emulated});
        f32.initialize_parameters(4);
        bf16.initialize_parameters(4);
        const Tensor input = reference::random_uniform(input_shape, 9);
        const Tensor expected = f32.forward(input, Mode::Train);
        const Tensor actual = bf16.forward(input, Mode::Train);
        if (emulated) {
            // c2 (32 channels, not reading the input) would compute in bf16: its values are bf16 numbers,
            // c1 (it reads the f32 input) keeps f32, as the native mode does.
            const auto is_bf16 = [](const Tensor& t) {
                const Tensor dense = t.contiguous();
                std::int64_t low_bits = 0;
                for (std::int64_t i = 0; i < dense.num_elements(); ++i) {
                    std::uint32_t bits;
                    std::memcpy(&bits, dense.data<float>() + i, 4);
                    low_bits += (bits & 0xffffu) != 0;
                }
                return low_bits == 0;
            };
            EXPECT_TRUE(is_bf16(bf16.activation(c2)));
            EXPECT_FALSE(is_bf16(bf16.activation(c1)));
        }
        EXPECT_LE(relative_difference(actual, expected), bf16_tolerance) << shape_to_string(input_shape);
        EXPECT_GT(relative_difference(actual, expected), 0.0) << "bf16 mode computed in f32";
        const Tensor dy = reference::random_uniform(expected.shape(), 10);
        f32.backward(dy);
        bf16.backward(dy);
        for (std::size_t p = 0; p < f32.parameters().size(); ++p) {
            EXPECT_LE(relative_difference(bf16.parameters()[p].gradient, f32.parameters()[p].gradient),
                      bf16_gradient_tolerance)
                << f32.parameters()[p].name << " " << shape_to_string(input_shape);
        }
    }
}

}  // namespace

// An up-convolution read by a concatenation alone writes its output into the concatenation's channel
// range and reads its gradient from there where that range is whole 16-channel blocks; the concatenation
// copies the skip connection alone. The same values and gradients as with the copy
// (TESSERA_CONCAT_IN_PLACE=0), its bytes counted once: U-Net levels of 32 + 32 channels in blocks, 2D and
// 3D; levels of 16 + 16 channels-last (each range every other 64 bytes of a pixel) keep the copy.
TEST(Executor, UpConvolutionIntoItsConcatenationMatchesTheCopy) {
    struct Case {
        Shape input;
        std::int64_t channels;
        bool in_place;  // on AVX-512 (the up-convolution that writes into views)
    };
    // 4 input channels: the 16-channel convolution writes channels-last; 16: the 32-channel one writes blocks.
    const std::vector<Case> cases{
        {{2, 4, 16, 12}, 16, false}, {{2, 16, 8, 12}, 32, true}, {{1, 4, 6, 8, 8}, 16, false}, {{1, 16, 4, 6, 6}, 32, true}};
    for (const Case& c : cases) {
        const int rank = static_cast<int>(c.input.size()) - 2;
        const std::string name = shape_to_string(c.input) + ", " + std::to_string(c.channels) + " + " + std::to_string(c.channels);
        Graph graph("level");
        const int x = graph.input(c.input);
        const int skip = graph.conv(x, c.channels, ops::ConvAttributes::same(rank, 3), "skip");
        const int pooled = graph.pool(skip, ops::PoolAttributes::max_down(rank), "pool");
        const int deep = graph.conv(pooled, 2 * c.channels, ops::ConvAttributes::same(rank, 3), "deep");
        const int up = graph.conv_transpose(deep, c.channels, ops::ConvTransposeAttributes::upsample(rank), "up");
        const int joined = graph.concat({skip, up}, "joined");
        graph.set_output(graph.conv(joined, 4, ops::ConvAttributes::same(rank, 3), "after"));
        const Tensor input = reference::random_uniform(c.input, 7);
        struct Step {
            Tensor output, up_value, up_gradient, skip_gradient;
            std::vector<Tensor> weight_gradients;
            MemoryReport memory;
            std::string implementation;
        };
        const auto step = [&](bool in_place) {
            if (!in_place) ::setenv("TESSERA_CONCAT_IN_PLACE", "0", 1);
            Executor executor(graph, {.keep_activation_gradients = true});
            ::unsetenv("TESSERA_CONCAT_IN_PLACE");
            executor.initialize_parameters(3);
            Step r;
            r.output = executor.forward(input, Mode::Train);
            executor.backward(reference::random_uniform(r.output.shape(), 8));
            r.up_value = executor.activation(up);
            r.up_gradient = executor.activation_gradient(up);
            r.skip_gradient = executor.activation_gradient(skip);
            for (const Parameter& p : executor.parameters()) r.weight_gradients.push_back(p.gradient.clone());
            r.memory = executor.memory_report();
            r.implementation = executor.implementation(up);
            return r;
        };
        const Step in_place = step(true), copied = step(false);
        EXPECT_TRUE(same_bits(in_place.output, copied.output)) << name;
        EXPECT_TRUE(same_bits(in_place.up_value, copied.up_value)) << name;
        EXPECT_TRUE(same_bits(in_place.up_gradient, copied.up_gradient)) << name;
        EXPECT_TRUE(same_bits(in_place.skip_gradient, copied.skip_gradient)) << name;
        expect_same_weight_gradients(in_place.weight_gradients, copied.weight_gradients, name);
        if (ops::row_convolution_available()) {  // AVX-512: the up-convolution that writes into channel ranges
            EXPECT_EQ(in_place.implementation, "upconv:avx512") << name;
            const std::int64_t up_bytes = num_elements_of(graph.node(up).output_shape) * 4;
            EXPECT_EQ(copied.memory.activations - in_place.memory.activations, c.in_place ? up_bytes : 0) << name;
        }
    }
}
