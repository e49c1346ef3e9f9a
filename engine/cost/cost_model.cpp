#include "cost/cost_model.hpp"

#include "core/error.hpp"
#include "ops/dnnl_support.hpp"

#include <algorithm>
#include <cmath>

namespace tessera::cost {

namespace {

using graph::Node;
using graph::OpKind;

std::int64_t round_up(std::int64_t value, std::int64_t tile) { return tile <= 1 ? value : (value + tile - 1) / tile * tile; }

double fill(std::int64_t value, std::int64_t tile) {
    return value <= 0 ? 1.0 : static_cast<double>(value) / static_cast<double>(round_up(value, tile));
}

// Spatial extents of a node's output on one core (the whole output without a tile).
std::vector<std::int64_t> output_extent(const Node& node, const partition::NodeTile* tile) {
    std::vector<std::int64_t> extent(node.output_shape.begin() + 2, node.output_shape.end());
    if (tile && !tile->replicated && !tile->owned.empty()) {
        for (std::size_t axis = 0; axis < extent.size(); ++axis) extent[axis] = tile->owned[axis].size();
    }
    return extent;
}

std::int64_t product(const std::vector<std::int64_t>& values) {
    std::int64_t p = 1;
    for (std::int64_t v : values) p *= v;
    return p;
}

}  // namespace

std::int64_t activation_bytes(graph::Precision precision) { return precision == graph::Precision::F32 ? 4 : 2; }

// Emulated bf16 (a CPU without bf16 dot products) keeps its rounded values in f32.
std::int64_t host_activation_bytes(graph::Precision precision) {
    return precision == graph::Precision::BF16 && ops::has_native_bf16() ? 2 : 4;
}

std::string_view fusion_name(ElementwiseFusion fusion) {
    switch (fusion) {
        case ElementwiseFusion::None: return "none";
        case ElementwiseFusion::Chains: return "chains";
        case ElementwiseFusion::IntoConvolutions: return "into_convolutions";
        case ElementwiseFusion::ConvolutionStatistics: return "convolution_statistics";
        case ElementwiseFusion::ConvolutionMainLoop: return "convolution_main_loop";
    }
    return "?";
}

namespace {

// Whether every consumer of `id`, seen through ReLUs, is a convolution (and there is one).
bool feeds_only_convolutions(const graph::Graph& model, int id) {
    bool any = false;
    for (const Node& node : model.nodes()) {
        if (std::find(node.inputs.begin(), node.inputs.end(), id) == node.inputs.end()) continue;
        if (node.kind == OpKind::Relu ? !feeds_only_convolutions(model, node.id) : node.kind != OpKind::Conv) return false;
        any = true;
    }
    return any;
}

}  // namespace

BatchNormPasses batch_norm_passes(const graph::Graph& model, int batch_norm, ElementwiseFusion fusion) {
    switch (fusion) {
        case ElementwiseFusion::None:
        case ElementwiseFusion::Chains:  // the chain's ReLU and add ride in the normalising passes
            return {};
        case ElementwiseFusion::IntoConvolutions:  // the statistics' read; backward the reductions' reads
            return {.forward = 1, .forward_statistics = 1, .backward = 2, .backward_reductions = 2};
        case ElementwiseFusion::ConvolutionStatistics:
        case ElementwiseFusion::ConvolutionMainLoop: {
            const Node& node = model.node(batch_norm);
            const Node& producer = model.node(node.inputs[0]);
            const bool statistics_in_convolution =
                producer.kind == OpKind::Conv && model.node(producer.inputs[0]).kind != OpKind::Input;
            const int statistics = statistics_in_convolution ? 0 : 1;
            if (fusion == ElementwiseFusion::ConvolutionMainLoop && feeds_only_convolutions(model, batch_norm))
                return {.forward = statistics, .forward_statistics = statistics, .backward = 2, .backward_reductions = 2};
            return {.forward = statistics + 2, .forward_statistics = statistics, .backward = 5, .backward_reductions = 2};
        }
    }
    TESSERA_FAIL("unknown fusion " << static_cast<int>(fusion));
}

std::string_view conv_layout_name(ConvLayout layout) {
    switch (layout) {
        case ConvLayout::ChannelsLast: return "channels_last";
        case ConvLayout::ChannelsFirst: return "channels_first";
        case ConvLayout::Xla: return "xla";
    }
    return "?";
}

CostModel::CostModel(Device device) : m_device(std::move(device)) {
    TESSERA_CHECK(m_device.memory_bandwidth > 0 && m_device.peak_flops_f32 > 0,
                  "device '" << m_device.id << "' needs a positive memory bandwidth and f32 peak for the cost model");
}

PassCost CostModel::pass_cost(double flops, std::int64_t bytes, double rate, bool launches_kernel) const {
    PassCost cost;
    cost.flops = flops;
    cost.bytes = bytes;
    const double memory_seconds = static_cast<double>(bytes) / (m_device.memory_bandwidth * m_device.efficiency.memory);
    const double compute_seconds = rate > 0 ? flops / rate : 0;
    if (compute_seconds > memory_seconds) {
        cost.seconds = compute_seconds;
        cost.bound = Bound::Compute;
    } else {
        cost.seconds = memory_seconds;
        cost.bound = Bound::Memory;
    }
    if (launches_kernel) cost.seconds += m_device.kernel_overhead;
    return cost;
}

std::string host_conv_key(int rank, std::int64_t kernel, bool first_layer, std::int64_t channels, bool backward) {
    // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string.
    std::string key("conv");
    key.append(std::to_string(rank)).append("d.");
    if (first_layer) key.append("first");
    else key.append("k").append(std::to_string(kernel));
    key.append(".c").append(std::to_string(channels));
    key.append(backward ? ".bwd" : ".fwd");
    return key;
}

bool CostModel::winograd_applies(const ops::ConvAttributes& conv, graph::Precision precision, bool tf32) const {
    if (m_device.efficiency.winograd_3x3 <= 1.0 || precision != graph::Precision::F32) return false;
    if (tf32 && m_device.peak_flops_tf32 > 0) return false;  // TF32 tensor cores: implicit GEMM
    if (conv.spatial_rank() != 2) return false;               // cuDNN's Winograd kernels are 2D only
    for (int axis = 0; axis < 2; ++axis) {
        const auto a = static_cast<std::size_t>(axis);
        if (conv.kernel[a] != 3 || conv.stride[a] != 1 || conv.dilation[a] != 1) return false;
    }
    return true;
}

bool CostModel::transposes_layout(const Execution& execution, int spatial_rank) const {
    if (m_device.kind != "gpu" || execution.conv_layout == ConvLayout::ChannelsLast) return false;
    // Tensor cores: a faster path than the plain f32 units (f16, bf16 where the GPU has it, TF32).
    if (!(m_device.peak_flops(execution.precision, execution.tf32) > m_device.peak_flops_f32)) return false;
    if (execution.conv_layout == ConvLayout::ChannelsFirst) return true;
    // XLA's GPU layout assignment: NHWC only for 2D convolutions in f16 or bf16.
    const bool half = execution.precision == graph::Precision::F16 || execution.precision == graph::Precision::BF16;
    return !(half && spatial_rank == 2);
}

double CostModel::host_rate(const std::string& key) const {
    const auto found = m_device.measured.find(key);
    return found == m_device.measured.end() ? 0.0 : found->second;
}

LayerCost CostModel::layer(const graph::Graph& model, int id, const partition::NodeTile* tile, const Execution& execution) const {
    if (m_device.kind == "host") return host_layer(model, id, tile, execution.precision);
    return roofline_layer(model, id, tile, execution, false);
}

LayerCost CostModel::roofline_layer(const graph::Graph& model, int id, const partition::NodeTile* tile, const Execution& execution,
                                    bool host_counting) const {
    const Node& node = model.node(id);
    LayerCost result;
    if (node.kind == OpKind::Input) return result;
    const graph::Precision precision = execution.precision;
    const std::int64_t element = host_counting ? host_activation_bytes(precision) : activation_bytes(precision);
    const ElementwiseFusion fusion = host_counting ? ElementwiseFusion::None : execution.fusion;
    const std::int64_t batch = node.output_shape[0];
    const std::int64_t out_channels = node.output_shape.size() > 1 ? node.output_shape[1] : 1;
    const bool spatial = node.output_shape.size() > 2;
    const std::vector<std::int64_t> out_extent = spatial ? output_extent(node, tile) : std::vector<std::int64_t>{};
    const std::int64_t out_elements = batch * out_channels * product(out_extent);
    const Node& source = model.node(node.inputs.empty() ? id : node.inputs[0]);
    const std::int64_t in_channels = source.output_shape.size() > 1 ? source.output_shape[1] : 1;
    // Input elements a core reads: the needed box of windowed ops, else its own tile of the input.
    std::int64_t in_elements = num_elements_of(source.output_shape);
    if (tile && !tile->replicated && source.output_shape.size() > 2) {
        std::vector<std::int64_t> extent;
        if (!tile->needed.empty()) {
            for (const partition::Interval& interval : tile->needed) extent.push_back(interval.size());
        } else if (node.kind == OpKind::ConvTranspose || node.kind == OpKind::Upsample) {
            extent = out_extent;
            const auto& factor = node.kind == OpKind::ConvTranspose ? node.conv_transpose.stride : node.upsample_factor;
            for (std::size_t axis = 0; axis < extent.size(); ++axis) extent[axis] /= factor[axis];
        } else {
            extent = out_extent;
        }
        in_elements = batch * in_channels * product(extent);
    }
    std::int64_t weights = 0;
    for (int p : node.parameters) weights += num_elements_of(model.parameters()[static_cast<std::size_t>(p)].shape);
    const double peak = m_device.peak_flops(precision, execution.tf32);
    const double minor_fill = spatial ? fill(out_extent.back(), m_device.efficiency.spatial_tile) : 1.0;
    const std::int64_t channel_tile = m_device.efficiency.channel_tile;
    // The matrix unit's rate for a product whose weight-side extents are `rows` × `columns`.
    auto matmul_rate = [&](std::int64_t rows, std::int64_t columns) {
        return peak * m_device.efficiency.matmul * fill(rows, channel_tile) * fill(columns, channel_tile) * minor_fill;
    };
    auto memory_pass = [&](double flops, std::int64_t bytes, bool launches_kernel = true) {
        PassCost pass = pass_cost(flops, bytes, 0, launches_kernel);
        pass.efficiency = m_device.efficiency.memory;
        return pass;
    };
    // A matrix op: forward at `forward_rate`; backward as two products of the forward's FLOPs each (the
    // input's gradient at `input_gradient_rate` unless the layer reads the model's input, the weights'
    // at `weight_gradient_rate`). Bytes: forward reads the input and weights and writes the output;
    // backward reads them again with the output's gradient and writes the input's and the weights'.
    // A pass's efficiency: of the peak while it computes, else the memory efficiency.
    const auto set_efficiency = [&](PassCost& pass) {
        pass.efficiency = pass.bound == Bound::Compute ? pass.flops / (pass.seconds - m_device.kernel_overhead) / (peak > 0 ? peak : 1)
                                                       : m_device.efficiency.memory;
    };
    auto matrix_op = [&](double forward_flops, double forward_rate, double input_gradient_rate, double weight_gradient_rate) {
        const bool input_gradient = host_counting || source.kind != OpKind::Input;
        result.forward = pass_cost(forward_flops, element * (in_elements + out_elements) + 4 * weights, forward_rate, true);
        const std::int64_t backward_bytes =
            element * ((input_gradient ? 2 : 1) * in_elements + out_elements) + 8 * weights;
        const double backward_flops = (input_gradient ? 2 : 1) * forward_flops;
        // One rate for the pass whose time is the two products' times added.
        const double backward_seconds = (input_gradient ? forward_flops / input_gradient_rate : 0) + forward_flops / weight_gradient_rate;
        result.backward = pass_cost(backward_flops, backward_bytes, backward_flops / backward_seconds, true);
        for (PassCost* pass : {&result.forward, &result.backward}) set_efficiency(*pass);
        result.channel_utilisation = forward_rate / (peak * m_device.efficiency.matmul * minor_fill);
    };

    // Channels-first data on tensor cores: the forward call transposes its input in and its output
    // out; backward's two calls (input gradient, weight gradient) transpose two tensors each.
    auto layout_transposes = [&](int spatial_rank) {
        if (host_counting || !transposes_layout(execution, spatial_rank)) return;
        const bool input_gradient = source.kind != OpKind::Input;
        const std::int64_t tensors = element * (in_elements + out_elements);
        const auto add = [&](PassCost& pass, std::int64_t bytes, int kernels) {
            pass.bytes += bytes;
            pass.seconds += pass_cost(0, bytes, 0, false).seconds + kernels * m_device.kernel_overhead;
            set_efficiency(pass);
        };
        add(result.forward, 2 * tensors, 2);
        add(result.backward, (input_gradient ? 4 : 2) * tensors, input_gradient ? 4 : 2);
    };

    switch (node.kind) {
        case OpKind::Conv: {
            const std::int64_t taps = product(node.conv.kernel);
            // A grouped convolution's output reads its own group's C_in/groups inputs.
            const double flops = 2.0 * static_cast<double>(out_elements) * static_cast<double>(in_channels / node.conv.groups) *
                                 static_cast<double>(taps);
            if (host_counting) {  // as calibration measured its rates: channels, not the implicit GEMM
                const double rate = matmul_rate(in_channels, out_channels);
                matrix_op(flops, rate, rate, rate);
            } else {
                // Winograd: the same FLOPs counted, done with less arithmetic, so at a higher rate. Groups
                // (a reading, not a measurement): their few channels per group are not priced with
                // Winograd, and the matrix unit is filled as for the whole layer — grouped kernels pack
                // several groups into one tile rather than padding each group to it.
                const double winograd = winograd_applies(node.conv, precision, execution.tf32) && node.conv.groups == 1
                                            ? m_device.efficiency.winograd_3x3
                                            : 1.0;
                matrix_op(flops, winograd * matmul_rate(in_channels * taps, out_channels),
                          winograd * matmul_rate(out_channels * taps, in_channels), winograd * matmul_rate(in_channels * taps, out_channels));
                layout_transposes(node.conv.spatial_rank());
            }
            break;
        }
        case OpKind::ConvTranspose: {  // each input position scatters C_out·taps outputs
            const std::int64_t taps = product(node.conv_transpose.kernel);
            const double flops = 2.0 * static_cast<double>(in_elements) * static_cast<double>(out_channels) * static_cast<double>(taps);
            const double rate = matmul_rate(in_channels, out_channels * taps);
            matrix_op(flops, rate, host_counting ? rate : matmul_rate(out_channels * taps, in_channels), rate);
            layout_transposes(static_cast<int>(node.conv_transpose.kernel.size()));
            break;
        }
        case OpKind::Dense: {
            const double flops = 2.0 * static_cast<double>(out_elements) * static_cast<double>(in_channels);
            matrix_op(flops, matmul_rate(in_channels, out_channels), matmul_rate(out_channels, in_channels),
                      matmul_rate(in_channels, out_channels));
            break;
        }
        case OpKind::BatchNorm:
            if (execution.frozen_batch_norm && !host_counting) {
                // A fixed affine: in the convolution's loop, or one element-wise pass each way.
                if (fusion == ElementwiseFusion::IntoConvolutions) break;
                if (fusion == ElementwiseFusion::None) {
                    // Eager frameworks write it `x * scale + bias` (torchvision's, maskrcnn-benchmark's and
                    // detectron2's FrozenBatchNorm2d — detectron2's whenever its input needs a gradient):
                    // a multiply and an add forward, each reading and writing the tensor; backward only
                    // the multiply's gradient (the add passes its gradient through).
                    result.forward = memory_pass(2.0 * static_cast<double>(out_elements), element * 4 * out_elements);
                    result.forward.seconds += m_device.kernel_overhead;  // the second kernel's launch
                    result.backward = memory_pass(static_cast<double>(out_elements), element * 2 * out_elements);
                    break;
                }
                result.forward = memory_pass(2.0 * static_cast<double>(out_elements), element * 2 * out_elements, false);
                result.backward = memory_pass(static_cast<double>(out_elements), element * 2 * out_elements, false);
            } else {
                // The statistics and normalising (8 FLOPs an element) forward, reductions and gradient (12)
                // backward; bytes for the passes the batch norm makes itself (none forward where its
                // statistics come from a convolution's epilogue and its normalising runs in the next one).
                const BatchNormPasses passes = batch_norm_passes(model, id, fusion);
                if (passes.forward > 0)
                    result.forward = memory_pass(8.0 * static_cast<double>(out_elements), element * passes.forward * out_elements);
                result.backward = memory_pass(12.0 * static_cast<double>(out_elements), element * passes.backward * out_elements);
            }
            break;
        case OpKind::Pool: {
            const double taps = static_cast<double>(product(node.pool.kernel));
            result.forward = memory_pass(taps * static_cast<double>(out_elements), element * (in_elements + out_elements));
            result.backward = memory_pass(taps * static_cast<double>(out_elements), element * (in_elements + 2 * out_elements));
            break;
        }
        case OpKind::Relu:
            if (fusion != ElementwiseFusion::None) break;  // inside its neighbours' loops: nothing of its own
            result.forward = memory_pass(static_cast<double>(out_elements), element * 2 * out_elements);
            result.backward = memory_pass(static_cast<double>(out_elements), element * 3 * out_elements);
            break;
        case OpKind::Add:
            if (fusion != ElementwiseFusion::None) {  // the second operand's read forward; the second branch's gradient backward
                result.forward = memory_pass(static_cast<double>(out_elements), element * out_elements, false);
                result.backward = memory_pass(0, element * out_elements, false);
                break;
            }
            result.forward = memory_pass(static_cast<double>(out_elements), element * 3 * out_elements);
            result.backward = memory_pass(0, element * 3 * out_elements);
            break;
        case OpKind::Concat:
        case OpKind::Upsample:
        case OpKind::Halo:
        case OpKind::Crop:  // reads the box it keeps (its tile's extent), writes it
            result.forward = memory_pass(0, element * (in_elements + out_elements));
            result.backward = memory_pass(0, element * (in_elements + out_elements));
            break;
        case OpKind::GlobalAvgPool:
            result.forward = memory_pass(static_cast<double>(in_elements), element * in_elements);
            result.backward = memory_pass(static_cast<double>(in_elements), element * in_elements);
            break;
        case OpKind::Input: break;
    }
    return result;
}

// On the host, each op class runs at its measured single-threaded rate: convolutions at the GFLOP/s
// measured for their rank, kernel and channel count (interpolated in log-channels between measured
// counts), memory-bound ops at the GB/s measured for them, plus a kernel call's overhead. The device
// roofline supplies FLOPs and bytes.
LayerCost CostModel::host_layer(const graph::Graph& model, int id, const partition::NodeTile* tile,
                                graph::Precision precision) const {
    LayerCost result = roofline_layer(model, id, tile, Execution{.precision = precision, .tf32 = false, .fusion = ElementwiseFusion::None}, true);
    const Node& node = model.node(id);
    if (node.kind == OpKind::Input) return result;
    const double overhead = host_rate("op_overhead_us") * 1e-6;
    // The measured rate at `channels`, interpolated in log2 between the measured channel counts
    // bracketing it (the nearest one outside them).
    auto interpolated_rate = [&](const std::string& stem, std::int64_t channels, bool backward) {
        static const std::int64_t measured_channels[] = {4, 8, 16, 32, 64, 128, 256};
        double below_rate = 0, above_rate = 0;
        std::int64_t below = 0, above = 0;
        for (std::int64_t c : measured_channels) {
            std::string key(stem);
            key.append(".c").append(std::to_string(c)).append(backward ? ".bwd" : ".fwd");
            const double rate = host_rate(key);
            if (rate <= 0) continue;
            if (c <= channels) {
                below = c;
                below_rate = rate;
            }
            if (c >= channels && above == 0) {
                above = c;
                above_rate = rate;
            }
        }
        if (below == 0) return above_rate;
        if (above == 0 || above == below) return below_rate;
        const double t = (std::log2(static_cast<double>(channels)) - std::log2(static_cast<double>(below))) /
                         (std::log2(static_cast<double>(above)) - std::log2(static_cast<double>(below)));
        return below_rate + t * (above_rate - below_rate);
    };
    auto conv_rate = [&](int rank, std::int64_t kernel, bool first, std::int64_t channels, bool backward) {
        const std::string key = host_conv_key(rank, kernel, first, channels, backward);
        return interpolated_rate(key.substr(0, key.find(".c")), channels, backward);
    };
    // The fixed cost measured with the nearest channel count of a convolution class (seconds).
    auto fixed_cost = [&](const std::string& stem, std::int64_t channels, bool backward) {
        static const std::int64_t measured_channels[] = {4, 8, 16, 32, 64, 128, 256};
        double best = 0, distance = 1e300;
        for (std::int64_t c : measured_channels) {
            std::string key(stem);
            key.append(".c").append(std::to_string(c)).append(backward ? ".bwd_fixed_us" : ".fwd_fixed_us");
            const auto found = m_device.measured.find(key);
            if (found == m_device.measured.end()) continue;
            const double d = std::abs(std::log2(static_cast<double>(c)) - std::log2(static_cast<double>(std::max<std::int64_t>(channels, 1))));
            if (d < distance) {
                distance = d;
                best = found->second * 1e-6;
            }
        }
        return best;
    };
    auto set = [&](PassCost& pass, double seconds) {
        pass.seconds = seconds + overhead;
        pass.bound = pass.flops > 0 && (node.kind == OpKind::Conv || node.kind == OpKind::ConvTranspose) ? Bound::Compute
                                                                                                           : Bound::Memory;
    };
    // Fewer than 16 channels, a memory-bound op runs in the layout of the convolution it follows
    // (ops/convolution_kernels.cpp): channels-last behind one reading several channels, oneDNN's own
    // pick behind the first layer or an up-convolution — each measured by calibration (up to 2.6× apart).
    auto layout_variant = [&]() -> std::string {
        if (node.output_shape.size() < 3 || node.output_shape[1] >= 16 || node.inputs.empty()) return "";
        const Node* source = &model.node(node.inputs[0]);
        while (!source->inputs.empty() && (source->kind == OpKind::BatchNorm || source->kind == OpKind::Relu ||
                                           source->kind == OpKind::Pool || source->kind == OpKind::Add ||
                                           source->kind == OpKind::Upsample || source->kind == OpKind::Halo ||
                                           source->kind == OpKind::Crop)) {
            source = &model.node(source->inputs[0]);
        }
        if (source->kind == OpKind::ConvTranspose) return ".narrow_any";
        if (source->kind != OpKind::Conv) return "";
        const std::int64_t in_channels = model.node(source->inputs[0]).output_shape[1], out_channels = source->output_shape[1];
        return in_channels > 1 && std::min(in_channels, out_channels) < 16 ? ".narrow_cl" : ".narrow_any";
    };
    auto memory_op = [&](const std::string& op) {
        const std::string variant = layout_variant();
        const std::string name = !variant.empty() && host_rate(op + variant + ".fwd") > 0 ? op + variant : op;
        // Above the smaller calibrated size, the bytes that fit in a core's L2 and those beyond it at
        // their own calibrated rates (host_calibration.cpp); below it, and for calibrations without
        // them, the one rate.
        auto rate_for = [&](const std::string& pass, double bytes) {
            const double one_rate = host_rate(name + pass);
            const double in_l2 = host_rate(name + pass + "_l2"), beyond_l2 = host_rate(name + pass + "_beyond_l2");
            const double l2_bytes = host_rate("l2_cache_bytes"), from_bytes = host_rate(name + pass + "_l2_from_bytes");
            if (!(in_l2 > 0) || !(beyond_l2 > 0) || !(l2_bytes > 0) || !(bytes > from_bytes)) return one_rate;
            const double in_cache = std::min(1.0, l2_bytes / bytes);
            return 1.0 / (in_cache / in_l2 + (1 - in_cache) / beyond_l2);
        };
        const double forward_rate = rate_for(".fwd", static_cast<double>(result.forward.bytes));
        const double backward_rate = rate_for(".bwd", static_cast<double>(result.backward.bytes));
        const double forward_fixed = host_rate(std::string(name).append(".fwd_fixed_us")) * 1e-6;
        const double backward_fixed = host_rate(std::string(name).append(".bwd_fixed_us")) * 1e-6;
        if (forward_rate > 0) set(result.forward, forward_fixed + static_cast<double>(result.forward.bytes) / (forward_rate * 1e9));
        if (backward_rate > 0) set(result.backward, backward_fixed + static_cast<double>(result.backward.bytes) / (backward_rate * 1e9));
    };
    const int rank = static_cast<int>(node.output_shape.size()) - 2;
    // bf16 convolutions run at the rate calibration measured against f32 (host_calibration.cpp), for
    // the layers the executor computes in bf16: 16 channels or more, not reading the input image.
    auto bf16_factor = [&](std::int64_t in_channels, std::int64_t out_channels, bool backward) {
        if (precision != graph::Precision::BF16 || std::min(in_channels, out_channels) < 16) return 1.0;
        if (model.node(node.inputs[0]).kind == OpKind::Input) return 1.0;
        const double ratio = host_rate("conv" + std::to_string(rank) + "d.bf16_ratio" + (backward ? ".bwd" : ".fwd"));
        return ratio > 0 ? ratio : 1.0;
    };
    switch (node.kind) {
        case OpKind::Conv: {
            const Node& source = model.node(node.inputs[0]);
            // A grouped convolution runs as its groups' narrow convolutions: rates of their channel counts.
            const std::int64_t in_channels = source.output_shape[1] / node.conv.groups, out_channels = node.output_shape[1] / node.conv.groups;
            // A layer reading a few image channels (grey, RGB) runs like the measured first layers.
            const bool first = in_channels <= 4 && out_channels > in_channels;
            // Narrow tiles run below the measured (wide-tile) rates: efficiency W / (W + w0), relative.
            const double w0 = host_rate("conv" + std::to_string(rank) + "d.width_w0");
            const double width = static_cast<double>(output_extent(node, tile).back());
            const double wide = rank == 3 ? 16.0 : 32.0;
            const double narrow_factor = w0 > 0 && width < wide ? (width / (width + w0)) / (wide / (wide + w0)) : 1.0;
            // A 1×1 layer to a few outputs (a segmentation head) has its own measured rates, keyed by its input.
            const bool head = node.conv.kernel[0] == 1 && out_channels < 16 && !first;
            const std::int64_t channels = first ? out_channels : head ? in_channels : std::min(in_channels, out_channels);
            for (bool backward : {false, true}) {
                const std::string head_stem = "conv" + std::to_string(rank) + "d.head";
                double rate = head ? interpolated_rate(head_stem, channels, backward) : 0;
                double fixed = head ? fixed_cost(head_stem, channels, backward) : 0;
                if (rate <= 0) {
                    const std::string key = host_conv_key(rank, node.conv.kernel[0] == 1 ? 1 : 3, first, channels, backward);
                    const std::string stem = key.substr(0, key.find(".c"));
                    rate = interpolated_rate(stem, channels, backward);
                    fixed = fixed_cost(stem, channels, backward);
                }
                PassCost& pass = backward ? result.backward : result.forward;
                rate *= bf16_factor(in_channels, out_channels, backward);
                if (rate > 0) set(pass, fixed + pass.flops / (rate * narrow_factor * 1e9));
            }
            break;
        }
        case OpKind::ConvTranspose: {  // kernel = stride (U-Net's up-convolution), measured as such: key k1
            const Node& source = model.node(node.inputs[0]);
            const std::int64_t channels = std::min(source.output_shape[1], node.output_shape[1]);
            const std::string stem = "conv" + std::to_string(rank) + "d.k1";
            for (bool backward : {false, true}) {
                const double rate = conv_rate(rank, 1, false, channels, backward) *
                                    bf16_factor(source.output_shape[1], node.output_shape[1], backward);
                PassCost& pass = backward ? result.backward : result.forward;
                if (rate > 0) set(pass, fixed_cost(stem, channels, backward) + pass.flops / (rate * 1e9));
            }
            break;
        }
        case OpKind::BatchNorm: memory_op("batch_norm"); break;
        case OpKind::Relu: memory_op("relu"); break;
        case OpKind::Pool: memory_op("pool"); break;
        case OpKind::Concat: memory_op("concat"); break;
        case OpKind::Add: memory_op("add"); break;
        case OpKind::Upsample: memory_op("upsample"); break;
        case OpKind::Halo:
        case OpKind::Crop: {  // both copy boxes of a tile in its own layout (tile_buffer)
            const double copy = host_rate("copy");
            if (copy > 0) {
                set(result.forward, static_cast<double>(result.forward.bytes) / (copy * 1e9));
                set(result.backward, static_cast<double>(result.backward.bytes) / (copy * 1e9));
            }
            break;
        }
        default: break;
    }
    return result;
}

double CostModel::transfer_seconds(std::int64_t bytes, int hops) const {
    if (bytes <= 0) return 0;
    if (hops <= 0 || m_device.link_bandwidth <= 0) {  // on one chip: a copy through memory
        return static_cast<double>(2 * bytes) / (m_device.memory_bandwidth * m_device.efficiency.memory);
    }
    return m_device.link_latency * hops + static_cast<double>(bytes) / (m_device.link_bandwidth * m_device.efficiency.link);
}

double CostModel::all_reduce_seconds(std::int64_t bytes, std::int64_t cores) const {
    if (cores <= 1 || bytes <= 0) return 0;
    const double bandwidth = m_device.link_bandwidth > 0 ? m_device.link_bandwidth * m_device.efficiency.link
                                                         : m_device.memory_bandwidth * m_device.efficiency.memory;
    const double n = static_cast<double>(cores);
    if (m_device.topology == Topology::Torus2D || m_device.topology == Topology::Torus3D) {
        // Rings along each torus dimension in turn: each moves 2(k−1)/k of what remains, and every
        // ring runs on its own links, so a k×k torus costs about one ring of √n cores per dimension
        // over twice the links (both directions).
        const int dims = m_device.topology == Topology::Torus2D ? 2 : 3;
        const double k = std::max(2.0, std::round(std::pow(n, 1.0 / dims)));
        double seconds = 0, remaining = static_cast<double>(bytes);
        for (int d = 0; d < dims; ++d) {
            seconds += 2 * (k - 1) * m_device.link_latency + 2 * (k - 1) / k * remaining / (2 * bandwidth);
            remaining /= k;
        }
        return seconds;
    }
    double ring_bandwidth = bandwidth;
    if (m_device.topology == Topology::NvlinkNode && m_device.links_per_chip > 0) {
        // NCCL's rings use every NVLink of a GPU (through NVSwitch or the cube mesh). Past one node
        // the buffer is split over one ring per network port, each crossing the network once per
        // node: a node's ports carry their rings side by side, so the network leg of the ring runs at
        // the whole node's network bandwidth, not one GPU's share of it.
        ring_bandwidth = bandwidth * static_cast<double>(m_device.links_per_chip);
        if (m_device.chips_per_node > 0 && cores > m_device.chips_per_node && m_device.network_bandwidth > 0) {
            const double node_network = m_device.network_bandwidth * static_cast<double>(m_device.chips_per_node);
            ring_bandwidth = std::min(ring_bandwidth, node_network * m_device.efficiency.link);
        }
    }
    // Ring over all cores: 2(n−1) steps of bytes/n each.
    return 2 * (n - 1) * m_device.link_latency + 2 * (n - 1) / n * static_cast<double>(bytes) / ring_bandwidth;
}

double CostModel::update_seconds(std::int64_t parameters, std::int64_t slots) const {
    // Read value, gradient and slots; write value and slots (f32).
    const auto bytes = static_cast<double>(4 * parameters * (3 + 2 * slots));
    return bytes / (m_device.memory_bandwidth * m_device.efficiency.memory) + m_device.kernel_overhead;
}

}  // namespace tessera::cost
