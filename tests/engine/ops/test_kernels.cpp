// Every op family's kernel called directly through its factory (ops/kernels.hpp), without a graph or
// an executor: forward and backward against the plain-loop references (reference/reference_ops.hpp).
// Tolerance: f32, the largest absolute difference over the largest magnitude of the reference tensor,
// ≤ 2e-5 for every output, input gradient and parameter gradient (the executor tests' bound).
#include "core/random.hpp"
#include "ops/kernels.hpp"
#include "ops/row_convolution.hpp"
#include "ops/stolen_ranges.hpp"
#include "ops/tile_rows.hpp"
#include "reference/reference_ops.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <thread>
#include <mutex>
#include <omp.h>
#include <chrono>
#include <atomic>
#include <limits>
#include <functional>

using namespace tessera;
using dnnl::memory;

namespace {

constexpr double tolerance = 2e-5;

Tensor random_tensor(const Shape& shape, std::uint64_t seed) {
    Tensor tensor = Tensor::empty(shape, DType::F32);
    SeededRandom random(seed);
    for (std::int64_t i = 0; i < tensor.num_elements(); ++i) tensor.data<float>()[i] = static_cast<float>(random.normal());
    return tensor;
}

double relative_difference(const Tensor& actual, const Tensor& expected) {
    EXPECT_EQ(actual.shape(), expected.shape());
    if (actual.shape() != expected.shape()) return INFINITY;
    double worst = 0, scale = 1e-12;
    for (std::int64_t i = 0; i < expected.num_elements(); ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(actual.data<float>()[i]) - expected.data<float>()[i]));
        scale = std::max(scale, std::abs(static_cast<double>(expected.data<float>()[i])));
    }
    return worst / scale;
}

Parameter parameter(const std::string& name, Tensor value) {
    Parameter p{name, value, Tensor::zeros(value.shape(), DType::F32), true};
    return p;
}

struct Ran {
    Tensor output;                        // plain
    std::vector<Tensor> input_gradients;  // plain, one per input
};

// Compiles a kernel for f32 inputs, runs forward (training) and backward with `output_gradient`. The
// inputs arrive plain, or in `input_layout` (nChw16c: what a convolution hands the next op), and their
// gradients are written in the same layout.
Ran run_kernel(const std::vector<Tensor>& inputs, const Tensor& output_gradient,
               const std::function<std::unique_ptr<ops::Kernel>(const ops::KernelInputs&)>& make,
               memory::format_tag input_layout = memory::format_tag::undef, bool inputs_need_gradient = true,
               std::string* implementation = nullptr) {
    ops::Scratchpad scratchpad;
    ops::KernelInputs in;
    in.scratchpad = &scratchpad;
    for (const Tensor& input : inputs) {
        in.descs.push_back(input_layout == memory::format_tag::undef
                               ? ops::plain_desc(input.shape())
                               : memory::desc(memory::dims(input.shape().begin(), input.shape().end()), memory::data_type::f32,
                                              input_layout));
        in.needs_gradient.push_back(inputs_need_gradient);
    }
    std::unique_ptr<ops::Kernel> kernel = make(in);
    if (implementation) *implementation = kernel->implementation();
    scratchpad.allocate();
    std::vector<memory> input_memories;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        memory plain = ops::wrap(inputs[i]);
        memory arrived(in.descs[i], ops::cpu_engine());
        dnnl::reorder(plain, arrived).execute(ops::cpu_stream(), plain, arrived);
        input_memories.push_back(arrived);
    }
    memory output(kernel->output_desc(), ops::cpu_engine());
    kernel->forward(input_memories, output, ops::Mode::Train);
    Ran ran{ops::to_plain_tensor(output), {}};

    memory diff_output(kernel->output_desc(), ops::cpu_engine());
    memory plain_gradient = ops::wrap(output_gradient);
    dnnl::reorder(plain_gradient, diff_output).execute(ops::cpu_stream(), plain_gradient, diff_output);
    // The input gradients start as NaN: a kernel writes all of them (an executor's gradient memory is
    // reused, never zeroed), rows its op never reads included.
    std::vector<memory> diff_inputs;
    for (const memory::desc& desc : in.descs) {
        if (!inputs_need_gradient) {
            diff_inputs.emplace_back();
            continue;
        }
        memory diff(desc, ops::cpu_engine());
        if (desc.data_type() == memory::data_type::f32) {
            std::fill_n(static_cast<float*>(diff.get_data_handle()), desc.get_size() / sizeof(float), std::numeric_limits<float>::quiet_NaN());
        } else {
            std::memset(diff.get_data_handle(), 0xff, desc.get_size());  // bf16 NaN
        }
        diff_inputs.push_back(diff);
    }
    kernel->backward(input_memories, output, diff_output, diff_inputs);
    ops::cpu_stream().wait();
    if (inputs_need_gradient)
        for (const memory& diff : diff_inputs) ran.input_gradients.push_back(ops::to_plain_tensor(diff));
    return ran;
}

}  // namespace

// Kernels' call buffers: one kernel's side by side (live together within a call), every kernel's from
// the arena's start (an executor runs one call at a time); without begin_kernel, nothing is shared.
TEST(Scratchpad, CallBuffersShareOneArenaAcrossKernelsNotWithinOne) {
    const auto floats = [](memory::dim count) { return memory::desc({count}, memory::data_type::f32, memory::format_tag::a); };
    ops::Scratchpad shared;
    shared.begin_kernel();
    memory a = shared.call_buffer(floats(1000));  // 4000 bytes, padded to 4032
    memory b = shared.call_buffer(floats(10));
    shared.begin_kernel();
    memory c = shared.call_buffer(floats(500));
    shared.allocate();
    const auto* base = static_cast<const char*>(a.get_data_handle());
    EXPECT_EQ(static_cast<const char*>(b.get_data_handle()), base + 4032);
    EXPECT_EQ(static_cast<const char*>(c.get_data_handle()), base);
    EXPECT_EQ(shared.bytes(), 4032 + 64);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(base) % 64, 0u);

    ops::Scratchpad unshared;
    memory d = unshared.call_buffer(floats(1000));
    memory e = unshared.call_buffer(floats(500));
    unshared.allocate();
    EXPECT_EQ(static_cast<const char*>(e.get_data_handle()), static_cast<const char*>(d.get_data_handle()) + 4032);
    EXPECT_EQ(unshared.bytes(), 4032 + 2048);
}

TEST(Kernels, ConvolutionWithBiasMatchesTheReference) {
    ops::ConvAttributes attributes = ops::ConvAttributes::same(2, 3);
    attributes.has_bias = true;
    const Tensor x = random_tensor({2, 3, 9, 7}, 1);                                  // [N, C_in, H, W]
    Parameter weight = parameter("w", random_tensor(ops::conv_weight_shape(3, 5, attributes), 2));  // [5, 3, 3, 3]
    Parameter bias = parameter("b", random_tensor({5}, 3));
    const Shape y_shape = ops::conv_output_shape(x.shape(), 5, attributes);
    const Tensor dy = random_tensor(y_shape, 4);
    const Ran ran = run_kernel({x}, dy, [&](const ops::KernelInputs& in) {
        return ops::make_conv_kernel(attributes, x.shape(), y_shape, in, &weight, &bias, memory::data_type::f32,
                                     memory::data_type::f32);
    });
    EXPECT_LE(relative_difference(ran.output, reference::conv_forward(x, weight.value, &bias.value, attributes)), tolerance);
    EXPECT_LE(relative_difference(ran.input_gradients[0], reference::conv_backward_data(dy, weight.value, x.shape(), attributes)),
              tolerance);
    const reference::ConvWeightGradients expected = reference::conv_backward_weights(x, dy, attributes, weight.value.shape());
    EXPECT_LE(relative_difference(weight.gradient, expected.weights), tolerance);
    EXPECT_LE(relative_difference(bias.gradient, expected.bias), tolerance);
}

// 2D 3×3 stride-1 layers with 32 or more channels on both sides and 1024 or more output pixels run oneDNN's
// Winograd kernels where it has them (AVX-512): every padding a tile of a partitioned image gets — both
// sides, none (between two tiles), one side (at an edge) — on either axis, bias, batch 2, rows not a
// multiple of the 4×4 output tiles; a layer of 512 pixels keeps the direct kernel. With
// one-sided padding oneDNN 2.6's Winograd input gradient got it wrong: it runs with the padding made
// symmetric on a widened input, Winograd too (the implementation names no other kernel), and keeps
// no buffer for it: the sixteen paddings of one input shape keep the same bytes.
// Tolerance 2e-4: the transforms round differently from the direct product.
TEST(Kernels, WinogradConvolutionsMatchTheReference) {
    struct Case {
        Shape x;
        std::int64_t out_channels;
        ops::ConvAttributes attributes;
        bool winograd = true;
    };
    std::vector<Case> cases{{{2, 32, 29, 37}, 32, ops::ConvAttributes::same(2, 3)}, {{1, 64, 34, 35}, 48, ops::ConvAttributes::valid(2, 3)}};
    const std::pair<std::int64_t, std::int64_t> paddings[] = {{1, 1}, {0, 0}, {1, 0}, {0, 1}};
    for (const auto& [top, bottom] : paddings) {
        for (const auto& [left, right] : paddings) {
            ops::ConvAttributes attributes = ops::ConvAttributes::valid(2, 3);
            attributes.pad_begin = {top, left};
            attributes.pad_end = {bottom, right};
            cases.push_back({{1, 32, 35, 34}, 32, attributes});
        }
    }
    cases.push_back({{2, 32, 16, 16}, 32, ops::ConvAttributes::same(2, 3), false});
    std::vector<std::int64_t> kept_bytes_of_paddings;  // the sixteen padding cases, input [1, 32, 35, 34]
    for (const Case& c : cases) {
        ops::ConvAttributes attributes = c.attributes;
        attributes.has_bias = true;
        SCOPED_TRACE(shape_to_string(c.x) + " -> " + std::to_string(c.out_channels) + ", " + ops::describe(attributes));
        const Tensor x = random_tensor(c.x, 51);
        Parameter weight = parameter("w", random_tensor(ops::conv_weight_shape(c.x[1], c.out_channels, attributes), 52));
        Parameter bias = parameter("b", random_tensor({c.out_channels}, 53));
        const Shape y_shape = ops::conv_output_shape(c.x, c.out_channels, attributes);
        const Tensor dy = random_tensor(y_shape, 54);
        std::string implementation;
        const Ran ran = run_kernel({x}, dy, [&](const ops::KernelInputs& in) {
            auto kernel = ops::make_conv_kernel(attributes, c.x, y_shape, in, &weight, &bias, memory::data_type::f32, memory::data_type::f32);
            if (c.x == Shape{1, 32, 35, 34}) kept_bytes_of_paddings.push_back(kernel->bytes());
            return kernel;
        }, memory::format_tag::nChw16c, true, &implementation);
        // oneDNN's Winograd kernels need AVX-512 (avx512_core; every AVX-512 Xeon has it).
        EXPECT_EQ(implementation.rfind("jit_wino", 0) == 0,
                  c.winograd && ops::row_convolution_available() && !ops::switched_off("TESSERA_WINOGRAD"))
            << implementation;
        EXPECT_EQ(implementation.find("input gradient"), std::string::npos) << implementation;
        constexpr double winograd_tolerance = 2e-4;
        EXPECT_LE(relative_difference(ran.output, reference::conv_forward(x, weight.value, &bias.value, attributes)), winograd_tolerance);
        EXPECT_LE(relative_difference(ran.input_gradients[0], reference::conv_backward_data(dy, weight.value, c.x, attributes)),
                  winograd_tolerance);
        const reference::ConvWeightGradients expected = reference::conv_backward_weights(x, dy, attributes, weight.value.shape());
        EXPECT_LE(relative_difference(weight.gradient, expected.weights), winograd_tolerance);
        EXPECT_LE(relative_difference(bias.gradient, expected.bias), winograd_tolerance);
    }
    ASSERT_EQ(kept_bytes_of_paddings.size(), 16u);
    for (const std::int64_t bytes : kept_bytes_of_paddings) EXPECT_EQ(bytes, kept_bytes_of_paddings[0]);
}

// A 1-channel image into fewer than 16 channels (the U-Nets' first layer at base width 8): written
// channels-last, as the narrow layers after it read best, and not by oneDNN's reference kernel (which
// a plain source beside a channels-last destination selects). 2D and 3D, against the reference.
TEST(Kernels, OneChannelImageIntoFewChannelsIsWrittenChannelsLast) {
    for (const Shape& x_shape : {Shape{2, 1, 9, 7}, Shape{1, 1, 5, 6, 7}}) {
        const int rank = static_cast<int>(x_shape.size()) - 2;
        const ops::ConvAttributes attributes = ops::ConvAttributes::same(rank, 3);
        const Tensor x = random_tensor(x_shape, 5);
        Parameter weight = parameter("w", random_tensor(ops::conv_weight_shape(1, 8, attributes), 6));  // [8, 1, 3, 3(, 3)]
        const Shape y_shape = ops::conv_output_shape(x_shape, 8, attributes);
        const Tensor dy = random_tensor(y_shape, 7);
        memory::desc written;
        std::string implementation;
        const Ran ran = run_kernel(
            {x}, dy,
            [&](const ops::KernelInputs& in) {
                auto kernel = ops::make_conv_kernel(attributes, x_shape, y_shape, in, &weight, nullptr, memory::data_type::f32,
                                                    memory::data_type::f32);
                written = kernel->output_desc();
                return kernel;
            },
            memory::format_tag::undef, /*inputs_need_gradient*/ false, &implementation);
        EXPECT_TRUE(written == ops::channels_last_desc(y_shape)) << shape_to_string(x_shape) << " not written channels-last";
        EXPECT_EQ(implementation.find("ref"), std::string::npos) << implementation;
        EXPECT_LE(relative_difference(ran.output, reference::conv_forward(x, weight.value, nullptr, attributes)), tolerance);
        const reference::ConvWeightGradients expected = reference::conv_backward_weights(x, dy, attributes, weight.value.shape());
        EXPECT_LE(relative_difference(weight.gradient, expected.weights), tolerance);
    }
}

// 1×1 convolutions into at most 4 channels over 8 or 16 channels side by side (a segmentation head)
// run in register transposes on AVX2 CPUs (ops/narrow_pointwise.hpp), written plain: 2D and 3D,
// channels-last and one 16-lane block, rows of whole 8-pixel runs and with a tail, with and without
// bias; the weights' gradient has the same bits on one thread and two. Other heads stay with oneDNN.
TEST(Kernels, NarrowPointwiseHeadsMatchTheReference) {
    using tag = memory::format_tag;
    struct Case {
        Shape input;
        tag layout;
        std::int64_t outputs;
        bool bias;
    };
    const std::vector<Case> cases = {{{2, 16, 5, 11}, tag::nChw16c, 2, true},
                                     {{2, 8, 3, 9}, tag::nhwc, 3, false},
                                     {{1, 8, 3, 4, 16}, tag::ndhwc, 2, true},
                                     {{1, 16, 2, 13}, tag::nhwc, 4, true},
                                     {{1, 16, 2, 3, 8}, tag::nCdhw16c, 1, false}};
    const bool vectors = ops::vector_row_kernels_enabled();  // AVX2 and FMA, and not TESSERA_ROW_KERNELS=0
    const int threads = ops::num_threads();
    for (const Case& c : cases) {
        const int rank = static_cast<int>(c.input.size()) - 2;
        ops::ConvAttributes attributes = ops::ConvAttributes::same(rank, 1);
        attributes.has_bias = c.bias;
        const Tensor x = random_tensor(c.input, 51);
        const Shape y_shape = ops::conv_output_shape(c.input, c.outputs, attributes);
        const Tensor dy = random_tensor(y_shape, 52);
        std::vector<Tensor> weight_gradients;
        for (int count : {1, 2}) {
            ops::set_num_threads(count);
            Parameter weight = parameter("w", random_tensor(ops::conv_weight_shape(c.input[1], c.outputs, attributes), 53));
            Parameter bias = parameter("b", random_tensor({c.outputs}, 54));
            std::string implementation;
            const Ran ran = run_kernel(
                {x}, dy,
                [&](const ops::KernelInputs& in) {
                    return ops::make_conv_kernel(attributes, c.input, y_shape, in, &weight, c.bias ? &bias : nullptr,
                                                 memory::data_type::f32, memory::data_type::f32);
                },
                c.layout, true, &implementation);
            const std::string name = shape_to_string(c.input) + " → " + std::to_string(c.outputs);
            EXPECT_EQ(implementation == "rows:avx2", vectors) << name << ": " << implementation;
            EXPECT_LE(relative_difference(ran.output, reference::conv_forward(x, weight.value, c.bias ? &bias.value : nullptr, attributes)),
                      tolerance)
                << name;
            EXPECT_LE(relative_difference(ran.input_gradients[0], reference::conv_backward_data(dy, weight.value, c.input, attributes)),
                      tolerance)
                << name;
            const reference::ConvWeightGradients expected = reference::conv_backward_weights(x, dy, attributes, weight.value.shape());
            EXPECT_LE(relative_difference(weight.gradient, expected.weights), tolerance) << name;
            if (c.bias) {
                EXPECT_LE(relative_difference(bias.gradient, expected.bias), tolerance) << name;
            }
            weight_gradients.push_back(weight.gradient.clone());
        }
        if (vectors) {  // the same bits on any thread count: the vector rows' promise, not oneDNN's
            EXPECT_EQ(std::memcmp(weight_gradients[0].raw_data(), weight_gradients[1].raw_data(), weight_gradients[0].num_bytes()), 0)
                << shape_to_string(c.input);
        }
    }
    ops::set_num_threads(threads);
    // Five outputs, a plain input and a 3×3 window are not heads of this kind.
    const auto implementation_of = [](const Shape& x, tag layout, std::int64_t outputs, std::int64_t kernel) {
        ops::Scratchpad scratchpad;
        const ops::KernelInputs in{.descs = {memory::desc(memory::dims(x.begin(), x.end()), memory::data_type::f32, layout)},
                                   .needs_gradient = {true},
                                   .scratchpad = &scratchpad};
        const ops::ConvAttributes attributes = ops::ConvAttributes::same(2, kernel);
        Parameter weight = parameter("w", Tensor::zeros(ops::conv_weight_shape(x[1], outputs, attributes), DType::F32));
        return ops::make_conv_kernel(attributes, x, ops::conv_output_shape(x, outputs, attributes), in, &weight, nullptr,
                                     memory::data_type::f32, memory::data_type::f32)
            ->implementation();
    };
    EXPECT_NE(implementation_of({1, 16, 8, 8}, tag::nhwc, 5, 1), "rows:avx2");
    EXPECT_NE(implementation_of({1, 16, 8, 8}, tag::nchw, 2, 1), "rows:avx2");
    EXPECT_NE(implementation_of({1, 16, 8, 8}, tag::nhwc, 2, 3), "rows:avx2");
    EXPECT_NE(implementation_of({1, 32, 8, 8}, tag::nChw16c, 2, 1), "rows:avx2");  // two blocks
}

// 3×3(×3) stride-1 layers with few channels in blocks of 8 run as row convolutions on AVX-512 CPUs
// (ops/row_convolution.hpp): 2D and 3D, rows ending inside a vector, shorter than one or a few
// positions past whole vectors, one-sided and no padding (a halo-widened tile), bias, inputs plain,
// channels-last and channel-blocked (by 8 and 16), and a layer whose input needs no gradient.
TEST(Kernels, FewChannelConvolutionsRunAsRowsAndMatchTheReference) {
    if (!ops::row_convolutions_enabled()) GTEST_SKIP() << "row convolutions need AVX-512F (and not TESSERA_ROW_CONVOLUTIONS=0); oneDNN runs these layers";
    struct Case {
        Shape x;
        std::int64_t out_channels;
        ops::ConvAttributes attributes;
        bool bias;
        memory::format_tag layout;
        bool input_gradient;
    };
    ops::ConvAttributes one_sided = ops::ConvAttributes::valid(2, 3);
    one_sided.pad_begin = {2, 0};
    one_sided.pad_end = {0, 1};
    // A corner tile of a 2×2×2 split: image padding before, one halo plane after (input 33 wide, output 32).
    ops::ConvAttributes corner = ops::ConvAttributes::valid(3, 3);
    corner.pad_begin = {1, 1, 1};
    const std::vector<Case> cases{
        {{2, 8, 13, 45}, 8, ops::ConvAttributes::same(2, 3), true, memory::format_tag::nhwc, true},
        {{1, 16, 7, 21}, 8, one_sided, false, memory::format_tag::undef, true},
        {{1, 16, 5, 6, 19}, 8, ops::ConvAttributes::same(3, 3), true, memory::format_tag::nCdhw16c, true},
        {{2, 8, 4, 5, 34}, 8, ops::ConvAttributes::valid(3, 3), false, memory::format_tag::ndhwc, true},
        {{1, 8, 6, 7, 18}, 8, ops::ConvAttributes::same(3, 3), true, memory::format_tag::undef, false},
        // Rows of one vector or less (the last 16 positions computed alone): channels-last and plain.
        {{1, 8, 9, 14}, 8, ops::ConvAttributes::same(2, 3), true, memory::format_tag::nhwc, true},
        {{1, 16, 4, 5, 10}, 8, ops::ConvAttributes::same(3, 3), false, memory::format_tag::undef, true},
        // 1 to 4 positions past the last pair of vectors, or a row of 4 (forward_tail, up to 4 rows together): 3 and 4
        // written plain, 4 channels-last, and 1 in a corner tile's input gradient (its 16 channels as 2 blocks).
        {{1, 8, 6, 35}, 8, ops::ConvAttributes::same(2, 3), true, memory::format_tag::undef, true},
        {{1, 8, 5, 36}, 8, ops::ConvAttributes::same(2, 3), false, memory::format_tag::undef, true},
        {{2, 8, 6, 4}, 8, ops::ConvAttributes::same(2, 3), true, memory::format_tag::nhwc, true},
        {{1, 16, 4, 5, 33}, 8, corner, false, memory::format_tag::ndhwc, true},
        // Padded copies 16 channels to a task where 16 lie side by side: two such groups channels-last, and
        // blocks of 8 (8 at a time).
        {{1, 32, 3, 4, 21}, 8, ops::ConvAttributes::same(3, 3), true, memory::format_tag::ndhwc, true},
        {{1, 16, 3, 4, 21}, 8, ops::ConvAttributes::same(3, 3), false, memory::format_tag::nCdhw8c, true},
        // Rows of more than 4 vectors (the weights' gradient's loop that is not unrolled).
        {{1, 8, 5, 70}, 8, ops::ConvAttributes::same(2, 3), true, memory::format_tag::nhwc, true},
    };
    for (const Case& c : cases) {
        ops::ConvAttributes attributes = c.attributes;
        attributes.has_bias = c.bias;
        const std::string name = shape_to_string(c.x) + " -> " + std::to_string(c.out_channels);
        Parameter weight = parameter("w", random_tensor(ops::conv_weight_shape(c.x[1], c.out_channels, attributes), 21));
        Parameter bias = parameter("b", random_tensor({c.out_channels}, 22));
        const Tensor x = random_tensor(c.x, 23);
        const Shape y_shape = ops::conv_output_shape(c.x, c.out_channels, attributes);
        const Tensor dy = random_tensor(y_shape, 24);
        std::string implementation;
        const Ran ran = run_kernel(
            {x}, dy,
            [&](const ops::KernelInputs& in) {
                return ops::make_conv_kernel(attributes, c.x, y_shape, in, &weight, c.bias ? &bias : nullptr, memory::data_type::f32,
                                             memory::data_type::f32);
            },
            c.layout, c.input_gradient, &implementation);
        EXPECT_EQ(implementation, "rows:avx512") << name;
        EXPECT_LE(relative_difference(ran.output, reference::conv_forward(x, weight.value, c.bias ? &bias.value : nullptr, attributes)),
                  tolerance) << name;
        if (c.input_gradient) {
            EXPECT_LE(relative_difference(ran.input_gradients[0], reference::conv_backward_data(dy, weight.value, c.x, attributes)),
                      tolerance) << name;
        }
        const reference::ConvWeightGradients expected = reference::conv_backward_weights(x, dy, attributes, weight.value.shape());
        EXPECT_LE(relative_difference(weight.gradient, expected.weights), tolerance) << name;
        if (c.bias) {
            EXPECT_LE(relative_difference(bias.gradient, expected.bias), tolerance) << name;
        }
    }
}

// Where the channels fill oneDNN's vectors, or the window is not 3 taps at stride 1, oneDNN runs it.
TEST(Kernels, WideOrStridedConvolutionsStayWithOneDnn) {
    const auto implementation_of = [](const Shape& x, std::int64_t out_channels, const ops::ConvAttributes& attributes) {
        ops::Scratchpad scratchpad;
        const ops::KernelInputs in{.descs = {ops::plain_desc(x)}, .needs_gradient = {true}, .scratchpad = &scratchpad};
        Parameter weight = parameter("w", Tensor::zeros(ops::conv_weight_shape(x[1], out_channels, attributes), DType::F32));
        return ops::make_conv_kernel(attributes, x, ops::conv_output_shape(x, out_channels, attributes), in, &weight, nullptr,
                                     memory::data_type::f32, memory::data_type::f32)
            ->implementation();
    };
    EXPECT_NE(implementation_of({1, 32, 16, 16}, 32, ops::ConvAttributes::same(2, 3)), "rows:avx512");
    EXPECT_NE(implementation_of({1, 8, 16, 16}, 8, ops::ConvAttributes::valid(2, 3, 2)), "rows:avx512");
    EXPECT_NE(implementation_of({1, 8, 16, 16}, 8, ops::ConvAttributes::same(2, 3, 2)), "rows:avx512");  // dilated
    EXPECT_NE(implementation_of({1, 4, 16, 16}, 8, ops::ConvAttributes::same(2, 3)), "rows:avx512");     // 4 input channels
    EXPECT_NE(implementation_of({1, 8, 16, 16}, 16, ops::ConvAttributes::same(2, 3)), "rows:avx512");    // 16 outputs fill oneDNN's vectors
    EXPECT_FALSE(implementation_of({1, 32, 16, 16}, 32, ops::ConvAttributes::same(2, 3)).empty());
    // TESSERA_ROW_CONVOLUTIONS=0 hands every layer to oneDNN.
    ::setenv("TESSERA_ROW_CONVOLUTIONS", "0", 1);
    EXPECT_NE(implementation_of({1, 8, 16, 16}, 8, ops::ConvAttributes::same(2, 3)), "rows:avx512");
    ::unsetenv("TESSERA_ROW_CONVOLUTIONS");
    if (ops::row_convolution_available()) {
        EXPECT_EQ(implementation_of({1, 8, 16, 16}, 8, ops::ConvAttributes::same(2, 3)), "rows:avx512");
    }
}

// The weights' gradient sums fixed groups of rows in a fixed order, the bias gradient each channel on one
// thread in a fixed order: the same bits on one thread or two.
TEST(Kernels, RowConvolutionGradientsHaveTheSameBitsOnAnyThreadCount) {
    if (!ops::row_convolutions_enabled()) GTEST_SKIP() << "row convolutions need AVX-512F and not TESSERA_ROW_CONVOLUTIONS=0";
    ops::ConvAttributes attributes = ops::ConvAttributes::same(3, 3);
    attributes.has_bias = true;
    const Tensor x = random_tensor({1, 8, 12, 10, 24}, 31);
    const Shape y_shape = ops::conv_output_shape(x.shape(), 8, attributes);
    const Tensor dy = random_tensor(y_shape, 32);
    std::vector<Tensor> gradients;  // per thread count: weights', input's, bias'
    const int threads = ops::num_threads();
    for (int count : {1, 2}) {
        ops::set_num_threads(count);
        Parameter weight = parameter("w", random_tensor(ops::conv_weight_shape(8, 8, attributes), 33));
        Parameter bias = parameter("b", random_tensor({8}, 34));
        const Ran ran = run_kernel({x}, dy, [&](const ops::KernelInputs& in) {
            return ops::make_conv_kernel(attributes, x.shape(), y_shape, in, &weight, &bias, memory::data_type::f32, memory::data_type::f32);
        });
        gradients.push_back(weight.gradient.clone());
        gradients.push_back(ran.input_gradients[0]);
        gradients.push_back(bias.gradient.clone());
    }
    ops::set_num_threads(threads);
    for (std::size_t k = 0; k < 3; ++k)
        EXPECT_EQ(std::memcmp(gradients[k].raw_data(), gradients[k + 3].raw_data(), gradients[k].num_bytes()), 0) << "gradient " << k;
}

// for_stolen_ranges (the row convolutions' loop): every iteration exactly once, in contiguous ranges,
// on 1 to 3 threads, for counts below, at and above the thread count and chunks of 1 and 3; and with a
// thread held back at its first chunk, the other takes the rest of its range, from its back; past 2^32
// iterations, plain chunks.
TEST(Kernels, StolenRangesRunEveryIterationOnce) {
    const int threads = ops::num_threads();
    for (int count_threads : {1, 2, 3}) {
        ops::set_num_threads(count_threads);
        for (std::int64_t count : {1, 2, 5, 64, 1001}) {
            for (std::int64_t chunk : {1, 3}) {
                std::vector<std::atomic<int>> runs(static_cast<std::size_t>(count));
                std::atomic<bool> bad_range{false};
                ops::for_stolen_ranges(count, chunk, [&](std::int64_t begin, std::int64_t end) {
                    if (begin < 0 || end > count || end <= begin || end - begin > chunk) bad_range = true;
                    for (std::int64_t i = begin; i < end; ++i) runs[static_cast<std::size_t>(i)]++;
                });
                EXPECT_FALSE(bad_range) << count_threads << " threads, " << count << " iterations, chunks of " << chunk;
                for (std::int64_t i = 0; i < count; ++i)
                    ASSERT_EQ(runs[static_cast<std::size_t>(i)].load(), 1) << "iteration " << i << " of " << count << ", " << count_threads << " threads";
            }
        }
    }
    // Past 2^32 − 1 iterations (the cursors' width): plain chunks, still every iteration once.
    {
        const std::int64_t count = (std::int64_t{1} << 32) + 5, chunk = std::int64_t{1} << 30;
        std::atomic<std::int64_t> covered{0};
        std::vector<std::pair<std::int64_t, std::int64_t>> taken;
        std::mutex taken_mutex;
        ops::for_stolen_ranges(count, chunk, [&](std::int64_t begin, std::int64_t end) {
            covered += end - begin;
            const std::lock_guard lock(taken_mutex);
            taken.emplace_back(begin, end);
        });
        std::sort(taken.begin(), taken.end());
        EXPECT_EQ(covered.load(), count);
        for (std::size_t k = 0; k < taken.size(); ++k) EXPECT_EQ(taken[k].first, k == 0 ? 0 : taken[k - 1].second);
    }
    // Two threads: thread 0 (range [0, 50)) holds the first iteration it gets until the other thread has
    // run every other one (or 10 s). Thread 1 runs its own 50..99, then thread 0's from the back, down to 1.
    ops::set_num_threads(2);
    std::atomic<int> team{0}, others_run{0}, order{0};
    std::atomic<std::int64_t> held{-1};
    std::vector<int> thread_of(100, -1), turn_of(100, -1);
    ops::for_stolen_ranges(100, 1, [&](std::int64_t begin, std::int64_t) {
        team = omp_get_num_threads();
        const int me = omp_get_thread_num();
        std::int64_t none = -1;
        if (me == 0 && held.compare_exchange_strong(none, begin)) {
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            while (others_run.load() < 99 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
            return;
        }
        thread_of[static_cast<std::size_t>(begin)] = me;
        turn_of[static_cast<std::size_t>(begin)] = order++;
        others_run++;
    });
    ops::set_num_threads(threads);
    ASSERT_EQ(team.load(), 2) << "the test needs a team of 2 OpenMP threads";
    int previous_turn = std::numeric_limits<int>::max();
    for (std::int64_t i = 0; i < 50; ++i) {
        if (i == held.load()) continue;
        EXPECT_EQ(thread_of[static_cast<std::size_t>(i)], 1) << "iteration " << i << " waited for the held thread";
        // Taken from the back: a lower iteration, a later turn.
        EXPECT_LT(turn_of[static_cast<std::size_t>(i)], previous_turn) << "iteration " << i << " was not taken from the back";
        previous_turn = turn_of[static_cast<std::size_t>(i)];
    }
}

TEST(Kernels, StridedThreeDConvolutionMatchesTheReference) {
    const ops::ConvAttributes attributes = ops::ConvAttributes::valid(3, 3, 2);
    const Tensor x = random_tensor({1, 4, 7, 9, 5}, 5);  // [N, C, D, H, W]
    Parameter weight = parameter("w", random_tensor(ops::conv_weight_shape(4, 16, attributes), 6));
    const Shape y_shape = ops::conv_output_shape(x.shape(), 16, attributes);
    const Tensor dy = random_tensor(y_shape, 7);
    const Ran ran = run_kernel({x}, dy, [&](const ops::KernelInputs& in) {
        return ops::make_conv_kernel(attributes, x.shape(), y_shape, in, &weight, nullptr, memory::data_type::f32,
                                     memory::data_type::f32);
    });
    EXPECT_LE(relative_difference(ran.output, reference::conv_forward(x, weight.value, nullptr, attributes)), tolerance);
    EXPECT_LE(relative_difference(ran.input_gradients[0], reference::conv_backward_data(dy, weight.value, x.shape(), attributes)),
              tolerance);
    EXPECT_LE(relative_difference(weight.gradient, reference::conv_backward_weights(x, dy, attributes, weight.value.shape()).weights),
              tolerance);
}

// Grouped weights go to oneDNN as [G, C_out/G, C_in/G, k...] over the same memory: 2D with a bias and a
// stride, 3D channels-last (fewer than 16 channels per side), ResNeXt's 4-channel groups.
TEST(Kernels, GroupedConvolutionsMatchTheReference) {
    struct Case {
        Shape x;
        std::int64_t out_channels, groups, kernel, stride;
        bool bias;
    };
    for (const Case& c : {Case{{2, 32, 9, 8}, 32, 8, 3, 2, true}, Case{{1, 6, 5, 6, 4}, 9, 3, 3, 1, false},
                          Case{{1, 128, 6, 6}, 128, 32, 3, 1, false}}) {
        SCOPED_TRACE(shape_to_string(c.x) + " in " + std::to_string(c.groups) + " groups");
        ops::ConvAttributes attributes = ops::ConvAttributes::same(static_cast<int>(c.x.size()) - 2, c.kernel);
        attributes.stride.assign(attributes.kernel.size(), c.stride);
        attributes.groups = c.groups;
        attributes.has_bias = c.bias;
        const Tensor x = random_tensor(c.x, 21);
        Parameter weight = parameter("w", random_tensor(ops::conv_weight_shape(c.x[1], c.out_channels, attributes), 22));
        Parameter bias = parameter("b", random_tensor({c.out_channels}, 23));
        const Shape y_shape = ops::conv_output_shape(x.shape(), c.out_channels, attributes);
        const Tensor dy = random_tensor(y_shape, 24);
        const Ran ran = run_kernel({x}, dy, [&](const ops::KernelInputs& in) {
            return ops::make_conv_kernel(attributes, x.shape(), y_shape, in, &weight, c.bias ? &bias : nullptr,
                                         memory::data_type::f32, memory::data_type::f32);
        });
        EXPECT_LE(relative_difference(ran.output, reference::conv_forward(x, weight.value, c.bias ? &bias.value : nullptr, attributes)),
                  tolerance);
        EXPECT_LE(relative_difference(ran.input_gradients[0], reference::conv_backward_data(dy, weight.value, x.shape(), attributes)),
                  tolerance);
        const reference::ConvWeightGradients expected = reference::conv_backward_weights(x, dy, attributes, weight.value.shape());
        EXPECT_LE(relative_difference(weight.gradient, expected.weights), tolerance);
        if (c.bias) {
            EXPECT_LE(relative_difference(bias.gradient, expected.bias), tolerance);
        }
    }
}

namespace {

// A transposed convolution's output and gradients (weights, and bias and input where it has them) against
// the reference.
void expect_transposed_convolution(const Ran& ran, const Tensor& x, const Tensor& dy, const Parameter& weight, const Parameter* bias,
                                   const ops::ConvTransposeAttributes& attributes, bool input_gradient = true) {
    EXPECT_LE(relative_difference(ran.output, reference::conv_transpose_forward(x, weight.value, bias ? &bias->value : nullptr, attributes)),
              tolerance);
    if (input_gradient) {
        EXPECT_LE(relative_difference(ran.input_gradients[0], reference::conv_transpose_backward_data(dy, weight.value, x.shape(), attributes)),
                  tolerance);
    }
    const reference::ConvWeightGradients expected = reference::conv_transpose_backward_weights(x, dy, attributes, weight.value.shape());
    EXPECT_LE(relative_difference(weight.gradient, expected.weights), tolerance);
    if (bias) {
        EXPECT_LE(relative_difference(bias->gradient, expected.bias), tolerance);
    }
}

// An up-convolution (kernel = stride 2) of a random input in `layout` to `out_channels`, run and checked
// against the reference; returns its kernel's implementation and output layout.
struct UpConvolution {
    std::string implementation;
    memory::desc written;
};
UpConvolution check_up_convolution(const Shape& x_shape, std::int64_t out_channels, memory::format_tag layout, bool with_bias = true,
                                   bool input_gradient = true) {
    const int rank = static_cast<int>(x_shape.size()) - 2;
    ops::ConvTransposeAttributes attributes = ops::ConvTransposeAttributes::upsample(rank);
    attributes.has_bias = with_bias;
    const Tensor x = random_tensor(x_shape, 21);
    Parameter weight = parameter("w", random_tensor(ops::conv_transpose_weight_shape(x_shape[1], out_channels, attributes), 22));
    Parameter bias = parameter("b", random_tensor({out_channels}, 23));
    const Shape y_shape = ops::conv_transpose_output_shape(x_shape, out_channels, attributes);
    const Tensor dy = random_tensor(y_shape, 24);
    UpConvolution result;
    const Ran ran = run_kernel({x}, dy, [&](const ops::KernelInputs& in) {
        auto kernel = ops::make_conv_transpose_kernel(attributes, x_shape, y_shape, in, &weight, with_bias ? &bias : nullptr,
                                                      memory::data_type::f32, memory::data_type::f32);
        result.written = kernel->output_desc();
        return kernel;
    }, layout, input_gradient, &result.implementation);
    expect_transposed_convolution(ran, x, dy, weight, with_bias ? &bias : nullptr, attributes, input_gradient);
    return result;
}

}  // namespace

// Kernel = stride runs as a 1×1 convolution and a depth-to-space rearrangement; kernel ≠ stride as
// oneDNN's deconvolution. Both are the same transposed convolution.
TEST(Kernels, TransposedConvolutionMatchesTheReferenceOnBothPaths) {
    for (const std::int64_t kernel_extent : {2, 3}) {
        SCOPED_TRACE("kernel " + std::to_string(kernel_extent) + ", stride 2");
        ops::ConvTransposeAttributes attributes{.kernel = {kernel_extent, kernel_extent}, .stride = {2, 2}, .has_bias = true};
        const Tensor x = random_tensor({2, 6, 5, 4}, 8);
        Parameter weight = parameter("w", random_tensor(ops::conv_transpose_weight_shape(6, 3, attributes), 9));  // [C_in, C_out, k, k]
        Parameter bias = parameter("b", random_tensor({3}, 10));
        const Shape y_shape = ops::conv_transpose_output_shape(x.shape(), 3, attributes);
        const Tensor dy = random_tensor(y_shape, 11);
        const Ran ran = run_kernel({x}, dy, [&](const ops::KernelInputs& in) {
            return ops::make_conv_transpose_kernel(attributes, x.shape(), y_shape, in, &weight, &bias,
                                                   memory::data_type::f32, memory::data_type::f32);
        });
        expect_transposed_convolution(ran, x, dy, weight, &bias, attributes);
    }
}

// An up-convolution (kernel = stride) writes channels-last up to 16 channels and 16-channel blocks above
// where its channels fill them (as the convolutions write the skip connection beside it), so that the
// concatenation after it joins runs of channels; plain otherwise. Against the reference, 2D and 3D,
// inputs blocked or plain.
TEST(Kernels, UpConvolutionsWriteChannelBlocksWhereTheirChannelsFillThem) {
    struct Case {
        Shape x;
        std::int64_t out_channels;
        memory::format_tag input_layout, expected_output;
    };
    const Case cases[] = {
        {{2, 32, 5, 7}, 16, memory::format_tag::nChw16c, memory::format_tag::nhwc},
        {{1, 64, 3, 4}, 32, memory::format_tag::nchw, memory::format_tag::nChw16c},
        {{1, 64, 3, 4, 5}, 32, memory::format_tag::nCdhw16c, memory::format_tag::nCdhw16c},
        {{1, 32, 3, 4, 5}, 16, memory::format_tag::nCdhw16c, memory::format_tag::ndhwc},
        {{1, 16, 3, 4, 5}, 8, memory::format_tag::nCdhw16c, memory::format_tag::ndhwc},
        {{2, 24, 4, 3}, 12, memory::format_tag::nchw, memory::format_tag::nhwc},
        {{1, 48, 3, 4}, 24, memory::format_tag::nChw16c, memory::format_tag::nchw},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(shape_to_string(c.x) + " → " + std::to_string(c.out_channels));
        const UpConvolution ran = check_up_convolution(c.x, c.out_channels, c.input_layout);
        EXPECT_TRUE(ran.written ==
                    memory::desc(memory::dims(ran.written.dims()), memory::data_type::f32, c.expected_output));
    }
}

// Up-convolutions whose layouts have runs of 16 floats (16-channel blocks, or two neighbouring pixels of 8
// channels-last channels; inputs in 16-channel runs) run as one product per input pixel
// (ops/upconvolution.hpp): rows of 6 pixels and a remainder, output runs in groups of 4, 2 and 1, input
// channels in groups of 6 down to 1, batch > 1, with and without bias and input gradient, 2D and 3D.
// Others, and with TESSERA_UPCONVOLUTIONS=0, take the 1×1 route. Against the reference.
TEST(Kernels, UpConvolutionsRunAsOneProductPerPixelWhereTheLayoutsAllow) {
    struct Case {
        Shape x;
        std::int64_t out_channels;
        memory::format_tag input_layout;
        bool bias, input_gradient;
        const char* implementation;
    };
    const char* direct = "upconv:avx512";
    const Case cases[] = {
        {{2, 32, 3, 13}, 16, memory::format_tag::nChw16c, true, true, direct},
        {{1, 64, 4, 7}, 48, memory::format_tag::nChw16c, false, true, direct},  // 12 runs: 4 + 4 + 4
        {{1, 16, 2, 5}, 8, memory::format_tag::nhwc, true, false, direct},      // runs of two 8-channel pixels; 2 runs
        {{1, 16, 3, 4, 9}, 8, memory::format_tag::nCdhw16c, true, true, direct},
        {{2, 48, 2, 3, 7}, 16, memory::format_tag::ndhwc, false, true, direct},
        {{1, 32, 3, 5}, 16, memory::format_tag::nchw, true, true, ""},          // plain input: channels not side by side
        {{1, 24, 3, 5}, 12, memory::format_tag::nhwc, true, true, ""},          // 24 input channels
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(shape_to_string(c.x) + " → " + std::to_string(c.out_channels));
        const UpConvolution ran = check_up_convolution(c.x, c.out_channels, c.input_layout, c.bias, c.input_gradient);
        if (ops::row_convolution_available() && !ops::switched_off("TESSERA_UPCONVOLUTIONS")) {
            EXPECT_EQ(ran.implementation, c.implementation);
        }
    }
    // Switched off: the 1×1 route, the same values.
    ::setenv("TESSERA_UPCONVOLUTIONS", "0", 1);
    ops::Scratchpad scratchpad;
    const Shape x_shape{1, 32, 3, 5};
    const ops::KernelInputs in{.descs = {memory::desc(memory::dims(x_shape.begin(), x_shape.end()), memory::data_type::f32, memory::format_tag::nChw16c)},
                               .needs_gradient = {true}, .scratchpad = &scratchpad};
    const ops::ConvTransposeAttributes attributes = ops::ConvTransposeAttributes::upsample(2);
    Parameter weight = parameter("w", Tensor::zeros(ops::conv_transpose_weight_shape(32, 16, attributes), DType::F32));
    const std::string switched_off = ops::make_conv_transpose_kernel(attributes, x_shape, ops::conv_transpose_output_shape(x_shape, 16, attributes),
                                                                     in, &weight, nullptr, memory::data_type::f32, memory::data_type::f32)
                                         ->implementation();
    ::unsetenv("TESSERA_UPCONVOLUTIONS");
    EXPECT_NE(switched_off, "upconv:avx512");
}

TEST(Kernels, MaxPoolingAndNearestUpsamplingMatchTheReference) {
    const Tensor x = random_tensor({2, 3, 8, 6}, 12);
    const ops::PoolAttributes pool = ops::PoolAttributes::max_down(2, 2);
    const Shape pooled = ops::pool_output_shape(x.shape(), pool);
    const Tensor dy = random_tensor(pooled, 13);
    const Ran pooled_ran = run_kernel({x}, dy, [&](const ops::KernelInputs& in) { return ops::make_pool_kernel(pool, pooled, in); });
    EXPECT_LE(relative_difference(pooled_ran.output, reference::pool_forward(x, pool)), tolerance);
    EXPECT_LE(relative_difference(pooled_ran.input_gradients[0], reference::pool_backward(dy, x, pool)), tolerance);

    const ops::Extents factor{2, 3};
    const Shape upsampled{2, 3, 16, 18};
    const Tensor dz = random_tensor(upsampled, 14);
    const Ran upsampled_ran =
        run_kernel({x}, dz, [&](const ops::KernelInputs& in) { return ops::make_upsample_kernel(factor, upsampled, in); });
    EXPECT_LE(relative_difference(upsampled_ran.output, reference::upsample_nearest_forward(x, factor)), tolerance);
    EXPECT_LE(relative_difference(upsampled_ran.input_gradients[0], reference::upsample_nearest_backward(dz, factor)), tolerance);
}

TEST(Kernels, BatchNormWithFusedReluMatchesTheReferenceAndUpdatesTheRunningStatistics) {
    const ops::BatchNormAttributes attributes{.epsilon = 1e-5, .momentum = 0.9, .fuse_relu = true};
    const Tensor x = random_tensor({2, 4, 5, 6}, 15);
    Parameter gamma = parameter("gamma", random_tensor({4}, 16));
    Parameter beta = parameter("beta", random_tensor({4}, 17));
    Tensor running_mean = Tensor::zeros({4}, DType::F32);
    Tensor running_variance = Tensor::full<float>({4}, 1.0f);
    const Tensor mean_before = running_mean.clone(), variance_before = running_variance.clone();
    const Tensor dy = random_tensor(x.shape(), 18);
    const Ran ran = run_kernel({x}, dy, [&](const ops::KernelInputs& in) {
        return ops::make_batch_norm_kernel(attributes, x.shape(), in, &gamma, &beta, &running_mean, &running_variance, false);
    });
    const reference::BatchNormTrainingResult expected =
        reference::batch_norm_forward_training(x, gamma.value, beta.value, mean_before, variance_before, attributes);
    EXPECT_LE(relative_difference(ran.output, expected.y), tolerance);
    EXPECT_LE(relative_difference(running_mean, expected.running_mean), tolerance);
    EXPECT_LE(relative_difference(running_variance, expected.running_variance), tolerance);
    const reference::BatchNormGradients gradients =
        reference::batch_norm_backward(dy, x, gamma.value, beta.value, expected.mean, expected.variance, attributes);
    EXPECT_LE(relative_difference(ran.input_gradients[0], gradients.x), tolerance);
    EXPECT_LE(relative_difference(gamma.gradient, gradients.gamma), tolerance);
    EXPECT_LE(relative_difference(beta.gradient, gradients.beta), tolerance);
}

// A whole image (not a simulated core's tile) of fewer than 16 channels channels-last runs batch norm's
// own row loops, over the host threads in fixed groups of rows: against the reference (forward, running
// statistics, every gradient), 2D and 3D, with and without the ReLU, one image small enough for one
// thread and one large enough to be split; and the same bits on 1 and 2 threads, and — on an AVX-512 CPU —
// with the AVX2 loops (TESSERA_BN_AVX512=0) as with their AVX-512 forms (rows of 56 and 96 floats: the
// AVX2 code's tails, and rows both on and off 64-byte boundaries). 16 channels keep oneDNN's.
TEST(Kernels, BatchNormOfANarrowChannelsLastImageRunsTheRowLoopsOnAnyThreadCount) {
    struct Case {
        Shape shape;
        bool relu;
    };
    const Case cases[] = {{{2, 8, 5, 7}, true}, {{1, 8, 6, 5, 12}, false}, {{2, 8, 16, 20, 28}, true}, {{3, 4, 80, 72}, true}};
    const int saved_threads = ops::num_threads();
    for (const Case& c : cases) {
        SCOPED_TRACE(shape_to_string(c.shape) + (c.relu ? " with ReLU" : ""));
        const ops::BatchNormAttributes attributes{.epsilon = 1e-5, .momentum = 0.9, .fuse_relu = c.relu};
        const std::int64_t channels = c.shape[1];
        const Tensor x = random_tensor(c.shape, 51);
        const Tensor dy = random_tensor(c.shape, 52);
        const memory::format_tag layout = c.shape.size() == 4 ? memory::format_tag::nhwc : memory::format_tag::ndhwc;
        struct Result {
            Ran ran;
            Tensor running_mean, running_variance, gamma_gradient, beta_gradient;
            std::string implementation;
        };
        const auto run = [&](int threads, bool avx2_only = false) {
            ops::set_num_threads(threads);
            if (avx2_only) setenv("TESSERA_BN_AVX512", "0", 1);  // read when the kernel is built
            Parameter gamma = parameter("gamma", random_tensor({channels}, 53));
            Parameter beta = parameter("beta", random_tensor({channels}, 54));
            Result result{.ran = {}, .running_mean = Tensor::zeros({channels}, DType::F32),
                          .running_variance = Tensor::full<float>({channels}, 1.0f), .gamma_gradient = {}, .beta_gradient = {},
                          .implementation = {}};
            result.ran = run_kernel({x}, dy, [&](const ops::KernelInputs& in) {
                return ops::make_batch_norm_kernel(attributes, c.shape, in, &gamma, &beta, &result.running_mean, &result.running_variance, false);
            }, layout, true, &result.implementation);
            if (avx2_only) unsetenv("TESSERA_BN_AVX512");
            result.gamma_gradient = gamma.gradient.clone();
            result.beta_gradient = beta.gradient.clone();
            return result;
        };
        const bool avx512 = __builtin_cpu_supports("avx512f") != 0;
        const Result one = run(1), two = run(2), avx2 = avx512 ? run(2, true) : run(2);
        ops::set_num_threads(saved_threads);
        if (ops::vector_row_kernels_enabled()) {
            EXPECT_EQ(two.implementation, avx512 ? "rows:avx512" : "rows:avx2");
            EXPECT_EQ(avx2.implementation, "rows:avx2");
        }
        Parameter gamma = parameter("gamma", random_tensor({channels}, 53));
        Parameter beta = parameter("beta", random_tensor({channels}, 54));
        const reference::BatchNormTrainingResult expected = reference::batch_norm_forward_training(
            x, gamma.value, beta.value, Tensor::zeros({channels}, DType::F32), Tensor::full<float>({channels}, 1.0f), attributes);
        const reference::BatchNormGradients gradients =
            reference::batch_norm_backward(dy, x, gamma.value, beta.value, expected.mean, expected.variance, attributes);
        EXPECT_LE(relative_difference(two.ran.output, expected.y), tolerance);
        EXPECT_LE(relative_difference(two.running_mean, expected.running_mean), tolerance);
        EXPECT_LE(relative_difference(two.running_variance, expected.running_variance), tolerance);
        EXPECT_LE(relative_difference(two.ran.input_gradients[0], gradients.x), tolerance);
        EXPECT_LE(relative_difference(two.gamma_gradient, gradients.gamma), tolerance);
        EXPECT_LE(relative_difference(two.beta_gradient, gradients.beta), tolerance);
        for (const Result* other : {&one, &avx2}) {
            for (const auto& [a, b] : {std::pair{&other->ran.output, &two.ran.output},
                                       {&other->ran.input_gradients[0], &two.ran.input_gradients[0]},
                                       {&other->running_mean, &two.running_mean}, {&other->running_variance, &two.running_variance},
                                       {&other->gamma_gradient, &two.gamma_gradient}, {&other->beta_gradient, &two.beta_gradient}}) {
                EXPECT_EQ(std::memcmp(a->raw_data(), b->raw_data(), static_cast<std::size_t>(a->num_elements()) * 4), 0)
                    << (other == &one ? "1 thread against 2" : "AVX2 against AVX-512");
            }
        }
    }
    // 16 channels channels-last: oneDNN's kernel (on the 16-channel block it is byte for byte).
    const Shape wide{2, 16, 5, 7};
    Parameter gamma = parameter("gamma", random_tensor({16}, 55));
    Parameter beta = parameter("beta", random_tensor({16}, 56));
    Tensor running_mean = Tensor::zeros({16}, DType::F32), running_variance = Tensor::full<float>({16}, 1.0f);
    std::string implementation;
    run_kernel({random_tensor(wide, 57)}, random_tensor(wide, 58), [&](const ops::KernelInputs& in) {
        return ops::make_batch_norm_kernel({.epsilon = 1e-5, .momentum = 0.9, .fuse_relu = true}, wide, in, &gamma, &beta, &running_mean,
                                           &running_variance, false);
    }, memory::format_tag::nhwc, true, &implementation);
    EXPECT_EQ(implementation.rfind("rows", 0), std::string::npos) << implementation;
}

// 16 channels channels-last and one 16-channel block are the same bytes: kernels pass such values on
// without a copy, and batch norm runs a channels-last 16-channel input as the block while handing its
// output on in the input's own layout. Padded blocks, other channel counts, plain layouts and views at
// another offset are not alike.
TEST(Kernels, LayoutsThatPlaceEveryElementAlikePassWithoutACopy) {
    for (const Shape& shape : {Shape{2, 16, 5, 7}, Shape{1, 16, 3, 4, 5}}) {
        EXPECT_TRUE(ops::same_placement(ops::channels_last_desc(shape), ops::channel_blocked_desc(shape))) << shape_to_string(shape);
    }
    EXPECT_FALSE(ops::same_placement(ops::channels_last_desc({2, 8, 5, 7}), ops::channel_blocked_desc({2, 8, 5, 7})));    // padded to 16
    EXPECT_FALSE(ops::same_placement(ops::channels_last_desc({2, 32, 5, 7}), ops::channel_blocked_desc({2, 32, 5, 7})));  // two blocks
    EXPECT_FALSE(ops::same_placement(ops::plain_desc({2, 16, 5, 7}), ops::channels_last_desc({2, 16, 5, 7})));
    EXPECT_FALSE(ops::same_placement(ops::channels_last_desc({2, 16, 5, 7}), ops::channel_blocked_desc({2, 16, 7, 5})));
    const memory::desc whole = ops::channel_blocked_desc({1, 32, 4, 4});
    const memory::desc second_block = whole.submemory_desc({1, 16, 4, 4}, {0, 16, 0, 0});
    EXPECT_FALSE(ops::same_placement(second_block, ops::channel_blocked_desc({1, 16, 4, 4})));

    const ops::BatchNormAttributes attributes{.epsilon = 1e-5, .momentum = 0.9, .fuse_relu = true};
    for (const Shape& shape : {Shape{2, 16, 5, 7}, Shape{1, 16, 3, 4, 5}}) {
        SCOPED_TRACE(shape_to_string(shape));
        const Tensor x = random_tensor(shape, 41);
        Parameter gamma = parameter("gamma", random_tensor({16}, 42));
        Parameter beta = parameter("beta", random_tensor({16}, 43));
        Tensor running_mean = Tensor::zeros({16}, DType::F32);
        Tensor running_variance = Tensor::full<float>({16}, 1.0f);
        const Tensor mean_before = running_mean.clone(), variance_before = running_variance.clone();
        const Tensor dy = random_tensor(shape, 44);
        memory::desc written;
        const Ran ran = run_kernel({x}, dy, [&](const ops::KernelInputs& in) {
            auto kernel = ops::make_batch_norm_kernel(attributes, shape, in, &gamma, &beta, &running_mean, &running_variance, false);
            written = kernel->output_desc();
            return kernel;
        }, shape.size() == 4 ? memory::format_tag::nhwc : memory::format_tag::ndhwc);
        EXPECT_TRUE(written == ops::channels_last_desc(shape));
        const reference::BatchNormTrainingResult expected =
            reference::batch_norm_forward_training(x, gamma.value, beta.value, mean_before, variance_before, attributes);
        EXPECT_LE(relative_difference(ran.output, expected.y), tolerance);
        const reference::BatchNormGradients gradients =
            reference::batch_norm_backward(dy, x, gamma.value, beta.value, expected.mean, expected.variance, attributes);
        EXPECT_LE(relative_difference(ran.input_gradients[0], gradients.x), tolerance);
        EXPECT_LE(relative_difference(gamma.gradient, gradients.gamma), tolerance);
    }
}

TEST(Kernels, ReluAddAndConcatMatchTheReference) {
    const Tensor a = random_tensor({2, 3, 4, 5}, 19), b = random_tensor({2, 3, 4, 5}, 20), c = random_tensor({2, 5, 4, 5}, 21);
    const Tensor dy = random_tensor(a.shape(), 22);
    const Ran relu = run_kernel({a}, dy, [](const ops::KernelInputs& in) { return ops::make_relu_kernel(in); });
    EXPECT_LE(relative_difference(relu.output, reference::relu_forward(a)), tolerance);
    EXPECT_LE(relative_difference(relu.input_gradients[0], reference::relu_backward(dy, a)), tolerance);

    const Ran add = run_kernel({a, b}, dy, [](const ops::KernelInputs& in) { return ops::make_add_kernel(in); });
    EXPECT_LE(relative_difference(add.output, reference::add(a, b)), tolerance);
    EXPECT_LE(relative_difference(add.input_gradients[0], dy), tolerance);
    EXPECT_LE(relative_difference(add.input_gradients[1], dy), tolerance);

    const Shape joined{2, 8, 4, 5};
    const Tensor dz = random_tensor(joined, 23);
    const Ran concat = run_kernel({a, c}, dz, [&](const ops::KernelInputs& in) {
        return ops::make_concat_kernel({a.shape(), c.shape()}, joined, in);
    });
    EXPECT_LE(relative_difference(concat.output, reference::concat_channels({a, c})), tolerance);
    const std::vector<Tensor> parts = reference::concat_channels_backward(dz, {3, 5});
    EXPECT_LE(relative_difference(concat.input_gradients[0], parts[0]), tolerance);
    EXPECT_LE(relative_difference(concat.input_gradients[1], parts[1]), tolerance);
}

// Concatenation in the blocked layout convolutions hand it (nChw16c): inputs whose channel ranges start on
// a 16-channel block take their gradients straight from the joined gradient's layout; a range that starts
// inside a block (8 + 16) goes through a plain copy. Both are copies: exact.
TEST(Kernels, ConcatOfBlockedInputsRoutesGradientsWhereverTheBlocksFall) {
    for (const auto& [first, second] : {std::pair<std::int64_t, std::int64_t>{16, 8}, {16, 16}, {8, 16}}) {
        const Tensor a = random_tensor({2, first, 4, 5}, 31), c = random_tensor({2, second, 4, 5}, 32);
        const Shape joined{2, first + second, 4, 5};
        const Tensor dz = random_tensor(joined, 33);
        const Ran concat = run_kernel(
            {a, c}, dz, [&](const ops::KernelInputs& in) { return ops::make_concat_kernel({a.shape(), c.shape()}, joined, in); },
            memory::format_tag::nChw16c);
        EXPECT_EQ(relative_difference(concat.output, reference::concat_channels({a, c})), 0.0) << first << " + " << second;
        const std::vector<Tensor> parts = reference::concat_channels_backward(dz, {first, second});
        EXPECT_EQ(relative_difference(concat.input_gradients[0], parts[0]), 0.0) << first << " + " << second;
        EXPECT_EQ(relative_difference(concat.input_gradients[1], parts[1]), 0.0) << first << " + " << second;
    }
}

// Inputs all in one dense layout — 16-channel blocks of whole blocks, or channels-last — are joined as
// runs of channels ("channel runs"; a batch item's blocks, or a pixel's channels), 2D and 3D, two and
// three inputs, and with no input gradient wanted. Exact; other layouts keep oneDNN's concat.
TEST(Kernels, ConcatOfOneDenseLayoutIsCopiedRunByRun) {
    using tag = memory::format_tag;
    struct Case {
        std::vector<Shape> parts;
        tag layout;
        bool runs;
    };
    const Case cases[] = {
        {{{2, 16, 5, 7}, {2, 32, 5, 7}}, tag::nChw16c, true},
        {{{1, 16, 3, 4, 5}, {1, 16, 3, 4, 5}, {1, 32, 3, 4, 5}}, tag::nCdhw16c, true},
        {{{1, 8, 3, 4, 5}, {1, 8, 3, 4, 5}}, tag::ndhwc, true},
        {{{2, 3, 5, 7}, {2, 16, 5, 7}, {2, 5, 5, 7}}, tag::nhwc, true},
        {{{2, 16, 5, 7}, {2, 8, 5, 7}}, tag::nChw16c, false},  // a part block
        {{{2, 16, 5, 7}, {2, 16, 5, 7}}, tag::nchw, false},
        {{{2, 3, 7}, {2, 5, 7}}, tag::ncw, false},  // a 1D map: oneDNN's
    };
    for (const Case& c : cases) {
        std::vector<Tensor> parts;
        std::vector<std::int64_t> channels;
        Shape joined = c.parts[0];
        joined[1] = 0;
        for (std::size_t i = 0; i < c.parts.size(); ++i) {
            parts.push_back(random_tensor(c.parts[i], 50 + static_cast<std::uint64_t>(i)));
            channels.push_back(c.parts[i][1]);
            joined[1] += c.parts[i][1];
        }
        SCOPED_TRACE(shape_to_string(joined));
        const Tensor dz = random_tensor(joined, 49);
        for (const bool gradients : {true, false}) {
            std::string implementation;
            const Ran ran = run_kernel(
                parts, dz, [&](const ops::KernelInputs& in) { return ops::make_concat_kernel(c.parts, joined, in); }, c.layout, gradients,
                &implementation);
            EXPECT_EQ(implementation == "channel runs", c.runs) << implementation;
            EXPECT_EQ(relative_difference(ran.output, reference::concat_channels(parts)), 0.0);
            if (!gradients) continue;
            const std::vector<Tensor> expected = reference::concat_channels_backward(dz, channels);
            for (std::size_t i = 0; i < parts.size(); ++i) EXPECT_EQ(relative_difference(ran.input_gradients[i], expected[i]), 0.0) << i;
        }
    }
}

// 2×2 (2×2×2) max pooling at stride 2 on the layouts convolutions hand it — channel-blocked (nChw16c, 20
// channels: a padded block) and channels-last (3, 5, 8 and 16 channels; odd extents leave a last row and
// column outside every window), 2D and 3D; ties (ReLU's zeros) go to the first maximum in the window, as
// in the reference. Layouts of 8-lane vectors run the vector rows (on AVX2 CPUs), the others oneDNN's
// kernel; TESSERA_ROW_KERNELS=0 sends all of them to oneDNN. Exact on both.
TEST(Kernels, MaxPoolingMatchesTheReferenceOnBlockedAndChannelsLastInputs) {
    using tag = memory::format_tag;
    const std::vector<std::pair<Shape, tag>> cases = {
        {{2, 20, 8, 6}, tag::nChw16c}, {{2, 3, 8, 6}, tag::nhwc},         {{1, 20, 4, 6, 8}, tag::nCdhw16c},
        {{2, 5, 4, 2, 6}, tag::ndhwc}, {{2, 8, 7, 9}, tag::nhwc},         {{1, 16, 5, 4, 6}, tag::ndhwc},
        {{1, 8, 6, 6, 6}, tag::ndhwc}};
    const bool vectors = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    for (const bool row_kernels : {true, false}) {
        if (!row_kernels) ::setenv("TESSERA_ROW_KERNELS", "0", 1);
        for (const auto& [shape, layout] : cases) {
            Tensor x = random_tensor(shape, 41);
            float* values = x.data<float>();
            for (std::int64_t i = 0; i < x.num_elements(); i += 3) values[i] = 0.0f;  // ties within windows
            for (std::int64_t i = 0; i < x.num_elements(); i += 2) values[i] = std::max(values[i], 0.0f);
            const int rank = static_cast<int>(shape.size()) - 2;
            const ops::PoolAttributes pool = ops::PoolAttributes::max_down(rank, 2);
            const Shape pooled = ops::pool_output_shape(shape, pool);
            const Tensor dy = random_tensor(pooled, 42);
            std::string implementation;
            const Ran ran = run_kernel(
                {x}, dy, [&](const ops::KernelInputs& in) { return ops::make_pool_kernel(pool, pooled, in); }, layout, true,
                &implementation);
            const std::int64_t lanes = layout == tag::nChw16c || layout == tag::nCdhw16c ? 16 : shape[1];
            // Asked of the switch itself: a TESSERA_ROW_KERNELS=0 from outside turns the "on" round off too.
            EXPECT_EQ(implementation == "rows:avx2", ops::vector_row_kernels_enabled() && vectors && lanes % 8 == 0)
                << shape_to_string(shape) << " " << implementation;
            EXPECT_EQ(relative_difference(ran.output, reference::pool_forward(x, pool)), 0.0) << shape_to_string(shape);
            EXPECT_EQ(relative_difference(ran.input_gradients[0], reference::pool_backward(dy, x, pool)), 0.0) << shape_to_string(shape);
        }
    }
    ::unsetenv("TESSERA_ROW_KERNELS");
}

TEST(Kernels, GlobalPoolingAndDenseMatchTheReference) {
    const Tensor x = random_tensor({3, 6, 4, 5}, 24);
    const Tensor dy = random_tensor({3, 6}, 25);
    const Ran pooled = run_kernel({x}, dy, [&](const ops::KernelInputs& in) {
        return ops::make_global_avg_pool_kernel(x.shape(), in, false);
    });
    EXPECT_LE(relative_difference(pooled.output, reference::global_average_pool(x)), tolerance);
    EXPECT_LE(relative_difference(pooled.input_gradients[0], reference::global_average_pool_backward(dy, x.shape())), tolerance);
    // From a convolution's blocked layout (the pooled value then comes in oneDNN's layout and is reordered).
    const Tensor wide = random_tensor({2, 32, 7, 7}, 30);
    const Tensor dwide = random_tensor({2, 32}, 31);
    const Ran blocked = run_kernel(
        {wide}, dwide, [&](const ops::KernelInputs& in) { return ops::make_global_avg_pool_kernel(wide.shape(), in, false); },
        memory::format_tag::nChw16c);
    EXPECT_LE(relative_difference(blocked.output, reference::global_average_pool(wide)), tolerance);
    EXPECT_LE(relative_difference(blocked.input_gradients[0], reference::global_average_pool_backward(dwide, wide.shape())),
              tolerance);

    const Tensor features = random_tensor({3, 6}, 26);
    Parameter weight = parameter("w", random_tensor({4, 6}, 27));
    Parameter bias = parameter("b", random_tensor({4}, 28));
    const Tensor dz = random_tensor({3, 4}, 29);
    const Ran dense = run_kernel({features}, dz, [&](const ops::KernelInputs& in) {
        return ops::make_dense_kernel(features.shape(), {3, 4}, in, &weight, &bias);
    });
    EXPECT_LE(relative_difference(dense.output, reference::dense_forward(features, weight.value, &bias.value)), tolerance);
    const reference::DenseGradients expected = reference::dense_backward(dz, features, weight.value);
    EXPECT_LE(relative_difference(dense.input_gradients[0], expected.x), tolerance);
    EXPECT_LE(relative_difference(weight.gradient, expected.w), tolerance);
    EXPECT_LE(relative_difference(bias.gradient, expected.bias), tolerance);
}

// A halo buffer holds the tile at its interior offset; backward hands the interior's gradient back.
// Here the tile's last row lies outside the buffer (the op never reads it): its gradient is zero.
TEST(Kernels, CropMatchesTheReferenceInPlainAndBlockedLayouts) {
    struct Case {
        Shape x;
        ops::Extents offset, extent;
    };
    // 16 channels: the executor may hand the kernel a channel-blocked layout; 3D as the 3D U-Nets.
    for (const Case& c : {Case{{2, 3, 9, 7}, {2, 1}, {5, 4}}, Case{{1, 16, 6, 6}, {1, 1}, {4, 4}},
                          Case{{1, 4, 6, 5, 7}, {1, 0, 3}, {4, 5, 2}}}) {
        const Tensor x = random_tensor(c.x, 32);
        Shape y{c.x[0], c.x[1]};
        y.insert(y.end(), c.extent.begin(), c.extent.end());
        const Tensor dy = random_tensor(y, 33);
        const Ran ran = run_kernel({x}, dy, [&](const ops::KernelInputs& in) { return ops::make_crop_kernel(c.offset, y, in); });
        EXPECT_EQ(relative_difference(ran.output, reference::crop_forward(x, c.offset, c.extent)), 0.0) << shape_to_string(c.x);
        EXPECT_EQ(relative_difference(ran.input_gradients[0], reference::crop_backward(dy, c.x, c.offset)), 0.0)
            << shape_to_string(c.x);
    }
}

TEST(Kernels, HaloBufferHoldsTheTileAtItsOffsetAndReturnsItsGradient) {
    const Tensor x = random_tensor({1, 2, 4, 3}, 30);  // the core's tile
    const ops::HaloAttributes attributes{.interior_offset = {1, 2}, .interior_extent = {3, 3}};
    const Shape buffer{1, 2, 5, 6};
    const Tensor dy = random_tensor(buffer, 31);
    const Ran ran = run_kernel({x}, dy, [&](const ops::KernelInputs& in) {
        return ops::make_halo_kernel(attributes, x.shape(), buffer, in);
    });
    for (std::int64_t c = 0; c < 2; ++c) {
        for (std::int64_t y = 0; y < 4; ++y) {
            for (std::int64_t w = 0; w < 3; ++w) {
                if (y < 3) {
                    EXPECT_EQ(ran.output.at<float>({0, c, y + 1, w + 2}), x.at<float>({0, c, y, w}));
                }
                const float expected = y < 3 ? dy.at<float>({0, c, y + 1, w + 2}) : 0.0f;
                EXPECT_EQ(ran.input_gradients[0].at<float>({0, c, y, w}), expected) << "c " << c << " y " << y << " x " << w;
            }
        }
    }
}
