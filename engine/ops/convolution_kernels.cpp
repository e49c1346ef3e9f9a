// Convolutions and transposed convolutions: oneDNN primitives for forward, backward-data and
// backward-weights, f32 master weights reordered into each primitive's layout.
#include "ops/kernels.hpp"
#include "ops/narrow_pointwise.hpp"
#include "ops/row_convolution.hpp"
#include "ops/upconvolution.hpp"

#include <cstdint>
#include <cstring>
#include <optional>

namespace tessera::ops {

namespace {

// A windowed op with weights: oneDNN's convolution and deconvolution families share one shape —
// forward, backward-data and backward-weights primitives, the input kept in the forward layout for
// the weights gradient, f32 master weights reordered into each primitive's layout.
template <class Forward, class BackwardData, class BackwardWeights>
class WeightedWindowKernel final : public Kernel {
public:
    // `input_window`, when given: backward_data was described for an input larger than the real one,
    // which sits in it at these offsets (see make_direct_conv_kernel); its gradient is that window's.
    WeightedWindowKernel(const KernelInputs& in, Parameter* weight, Parameter* bias, memory::desc weights_plain,
                         const typename Forward::desc& forward, const typename BackwardData::desc& backward_data,
                         const typename BackwardWeights::desc& backward_weights, const memory::dims& input_window = {})
        : Kernel(in), m_weight(weight), m_bias(bias), m_needs_diff_input(in.needs_gradient[0]), m_weights_plain(weights_plain) {
        m_forward_pd = m_scratchpad.fit(typename Forward::primitive_desc(forward, Scratchpad::attributes(), cpu_engine()));
        m_forward = Forward(m_forward_pd);
        m_output_desc = m_forward_pd.dst_desc();
        m_src = Converted(m_scratchpad, in.descs[0], m_forward_pd.src_desc(), Lifetime::Kept);  // backward reads it
        m_forward_weights = Converted(m_scratchpad, m_weights_plain, m_forward_pd.weights_desc(), Lifetime::Call);
        if (m_needs_diff_input) {
            m_backward_data_pd = m_scratchpad.fit(
                typename BackwardData::primitive_desc(backward_data, Scratchpad::attributes(), cpu_engine(), m_forward_pd));
            m_backward_data = BackwardData(m_backward_data_pd);
            m_backward_data_weights = Converted(m_scratchpad, m_weights_plain, m_backward_data_pd.weights_desc(), Lifetime::Call);
            m_backward_data_diff_dst = Converted(m_scratchpad, m_output_desc, m_backward_data_pd.diff_dst_desc(), Lifetime::Call);
            if (input_window.empty()) {
                m_diff_src = Staged(m_scratchpad, m_backward_data_pd.diff_src_desc(), in.descs[0]);
            } else {
                // The widened input's gradient in the call arena; the real input's window copied out.
                m_widened_diff_src = m_scratchpad.call_buffer(m_backward_data_pd.diff_src_desc());
                m_input_window = m_backward_data_pd.diff_src_desc().submemory_desc(in.descs[0].dims(), input_window);
                m_from_input_window = Copy(m_scratchpad, m_input_window, in.descs[0]);
            }
        }
        m_backward_weights_pd = m_scratchpad.fit(
            typename BackwardWeights::primitive_desc(backward_weights, Scratchpad::attributes(), cpu_engine(), m_forward_pd));
        m_backward_weights = BackwardWeights(m_backward_weights_pd);
        m_backward_weights_src = Converted(m_scratchpad, m_forward_pd.src_desc(), m_backward_weights_pd.src_desc(), Lifetime::Call);
        m_backward_weights_diff_dst = Converted(m_scratchpad, m_output_desc, m_backward_weights_pd.diff_dst_desc(), Lifetime::Call);
        m_diff_weights = Staged(m_scratchpad, m_backward_weights_pd.diff_weights_desc(), m_weights_plain);
        if (bias) m_diff_bias = Staged(m_scratchpad, m_backward_weights_pd.diff_bias_desc(), plain_desc(bias->value.shape()));
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        m_last_src = m_src(inputs[0]);
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, m_last_src},
                                             {DNNL_ARG_WEIGHTS, m_forward_weights(weights(m_weight->value))},
                                             {DNNL_ARG_DST, output}};
        if (m_bias) args[DNNL_ARG_BIAS] = wrap(m_bias->value);
        m_scratchpad.execute(m_forward, args);
    }

    void backward(const std::vector<memory>& inputs, const memory& output, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        backward_weights(inputs, output, diff_output);
        backward_inputs(inputs, output, diff_output, diff_inputs);
    }

    bool splits_backward() const override { return true; }
    // The forward primitive's, and the input gradient's where that differs.
    std::string implementation() const override {
        const std::string forward = m_forward_pd.impl_info_str();
        if (!m_needs_diff_input || m_backward_data_pd.impl_info_str() == forward) return forward;
        return forward + "; input gradient: " + m_backward_data_pd.impl_info_str();
    }

    void backward_weights(const std::vector<memory>&, const memory&, const memory& diff_output) override {
        const memory weight_gradient = weights(m_weight->gradient);
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, m_backward_weights_src(m_last_src)},
                                             {DNNL_ARG_DIFF_DST, m_backward_weights_diff_dst(diff_output)},
                                             {DNNL_ARG_DIFF_WEIGHTS, m_diff_weights.destination(weight_gradient)}};
        memory bias_gradient;
        if (m_bias) {
            bias_gradient = wrap(m_bias->gradient);
            args[DNNL_ARG_DIFF_BIAS] = m_diff_bias.destination(bias_gradient);
        }
        m_scratchpad.execute(m_backward_weights, args);
        m_diff_weights.finish(weight_gradient);
        if (m_bias) m_diff_bias.finish(bias_gradient);
    }

    void backward_inputs(const std::vector<memory>&, const memory&, const memory& diff_output,
                         const std::vector<memory>& diff_inputs) override {
        if (!m_needs_diff_input) return;
        const memory& target = diff_inputs[0];
        const memory diff_src = m_widened_diff_src ? m_widened_diff_src : m_diff_src.destination(target);
        m_scratchpad.execute(m_backward_data, {{DNNL_ARG_DIFF_DST, m_backward_data_diff_dst(diff_output)},
                                               {DNNL_ARG_WEIGHTS, m_backward_data_weights(weights(m_weight->value))},
                                               {DNNL_ARG_DIFF_SRC, diff_src}});
        if (m_widened_diff_src) {
            m_from_input_window(memory(m_input_window, cpu_engine(), m_widened_diff_src.get_data_handle()), target);
        } else {
            m_diff_src.finish(target);
        }
    }

    std::int64_t bytes() const override {
        return m_src.bytes() + m_forward_weights.bytes() + m_backward_data_weights.bytes() +
               m_backward_data_diff_dst.bytes() + m_diff_src.bytes() + m_backward_weights_src.bytes() +
               m_backward_weights_diff_dst.bytes() + m_diff_weights.bytes() + m_diff_bias.bytes();
    }

private:

    // The f32 master (value or gradient) as oneDNN memory in our plain weight layout.
    memory weights(const Tensor& tensor) const {
        return memory(m_weights_plain, cpu_engine(), const_cast<void*>(tensor.raw_data()));
    }

    Parameter* m_weight;
    Parameter* m_bias;
    bool m_needs_diff_input;
    memory::desc m_weights_plain;
    typename Forward::primitive_desc m_forward_pd;
    Forward m_forward;
    typename BackwardData::primitive_desc m_backward_data_pd;
    BackwardData m_backward_data;
    typename BackwardWeights::primitive_desc m_backward_weights_pd;
    BackwardWeights m_backward_weights;
    Converted m_src, m_forward_weights, m_backward_data_weights, m_backward_data_diff_dst, m_backward_weights_src,
        m_backward_weights_diff_dst;
    Staged m_diff_src, m_diff_weights, m_diff_bias;
    memory m_last_src;  // the input in the forward primitive's layout, kept for the weights gradient
    memory m_widened_diff_src;     // backward_data's input gradient, for an input larger than the real one (or none)
    memory::desc m_input_window;   // the real input's place in it
    Copy m_from_input_window;
};

using ConvKernel = WeightedWindowKernel<dnnl::convolution_forward, dnnl::convolution_backward_data,
                                        dnnl::convolution_backward_weights>;
using ConvTransposeKernel = WeightedWindowKernel<dnnl::deconvolution_forward, dnnl::deconvolution_backward_data,
                                                 dnnl::deconvolution_backward_weights>;

// 2D 3×3 stride-1 f32 convolutions with 32 or more channels on both sides run oneDNN's Winograd kernels
// (F(4×4, 3×3), jit_wino_4x3 on AVX-512) where it has them: 2.25× fewer multiplications, and forward
// and both backward passes together measured 1.5–2.4× faster than its direct kernels for every such
// layer of the 2D U-Net (batch 4, Xeon model 207: 128 → 128 at 32² 6.7 against 15.9 ms, 64 → 32 at 128²
// 14.0 against 25.2); at 16 channels it was slower (16 → 16 at 256² 22.0 against 14.5) or the same.
// The values differ from the direct product by rounding (the transforms add and scale f32 values).
// Layers with fewer than 1024 output pixels (batch × H × W) keep the direct kernels: at 512 pixels and
// below Winograd was slower (32 → 32 at 16², batch 2: 0.17 against 0.12 ms; 128 → 128 at 8², batch 4: 1.33
// against 0.80), at 1024 the same or faster (32 → 32 at 32²: 0.28 against 0.26 ms; 128 → 128 at 16², batch
// 4: 2.51 against 3.72), and its workspace is 7–16 MB whatever the layer (oneDNN 2.6), which a small tile's
// memory budget would feel.
bool runs_as_winograd(const ConvAttributes& a, const Shape& output_shape, std::int64_t in_channels, memory::data_type compute,
                      memory::data_type output_type) {
    if (switched_off("TESSERA_WINOGRAD") || compute != memory::data_type::f32 || output_type != memory::data_type::f32) return false;
    const std::int64_t out_channels = output_shape[1];
    if (a.spatial_rank() != 2 || a.groups != 1 || in_channels < 32 || out_channels < 32) return false;
    if (output_shape[0] * output_shape[2] * output_shape[3] < 1024) return false;
    for (std::size_t axis = 0; axis < 2; ++axis)
        if (a.kernel[axis] != 3 || a.stride[axis] != 1 || a.dilation[axis] != 1) return false;
    return true;
}

// oneDNN 2.6's Winograd input gradient accepts padding that differs between the two sides of an axis (a
// tile at the edge of a partitioned image) and computes it wrong (1.3 relative in
// Kernels.WinogradConvolutionsMatchTheReference); its forward and weights' gradient get it right. Such a
// layer's input gradient is computed with the padding made symmetric, the smaller side's on both: the
// zeros the larger side lost become rows of a widened input (the real one at an offset, framed by
// them), so the convolution and its output are unchanged. The widened input's gradient, restricted to
// the real input's window, is the real input gradient. (Widening the output instead, the larger side's
// padding on both, adds an output row: a 16-row edge tile runs 5 Winograd tile rows instead of 4.)
struct SymmetricPadding {
    memory::dims pad;               // both sides of each axis
    memory::dims input_window;      // the real input's offsets in the widened input [N, C, (D,) H, W]
    Shape widened_input;
    bool changed = false;
};
SymmetricPadding symmetric_padding(const ConvAttributes& a, const Shape& input_shape) {
    SymmetricPadding s{.pad = {}, .input_window = memory::dims(input_shape.size(), 0), .widened_input = input_shape};
    for (std::size_t axis = 0; axis < a.pad_begin.size(); ++axis) {
        const std::int64_t pad = std::min(a.pad_begin[axis], a.pad_end[axis]);
        s.pad.push_back(pad);
        s.input_window[axis + 2] = a.pad_begin[axis] - pad;
        s.widened_input[axis + 2] += (a.pad_begin[axis] - pad) + (a.pad_end[axis] - pad);
        s.changed = s.changed || a.pad_begin[axis] != a.pad_end[axis];
    }
    return s;
}

std::unique_ptr<Kernel> make_direct_conv_kernel(const ConvAttributes& a, const Shape& input_shape, const Shape& output_shape,
                                                const KernelInputs& in,
                                         Parameter* weight, Parameter* bias, memory::data_type compute,
                                         memory::data_type output_type) {
    const auto strides = to_dims(a.stride);
    const auto dilates = dnnl_dilation(a.dilation);
    const auto pad_l = to_dims(a.pad_begin);
    const auto pad_r = to_dims(a.pad_end);
    // Layers with fewer than 16 channels (a 3D U-Net's first level) run best channels-last: the blocked
    // layouts oneDNN picks pad them to 16 and its backward-weights falls back to a slow gemm. Source and
    // destination must both be fixed: a fixed layout beside 'any' selects oneDNN's reference kernel.
    // A 1-channel input (the image) with up to 16 outputs runs channels-last on both sides too
    // (oneDNN 2.6: brgconv:avx512_core; a plain source beside it selects the reference kernel): 'any'
    // wrote 16-lane blocks, half of them padding, which the batch norm after it streamed and the next
    // layer's input gradient was reordered into.
    // 16 outputs from at most 32 inputs (a base-16 U-Net's first level) run channels-last too: oneDNN's
    // brgconv there against its blocked kernels, forward and both backward passes at 256², batch 4 (Xeon
    // model 207): 16 → 16 19.2–19.6 against 22.4–22.9 ms, 32 → 16 31–35 against 40.5–41.5, 1 → 16 the same;
    // at 32³ the same time either way.
    const std::int64_t in_channels = input_shape[1], out_channels = output_shape[1];
    const bool one_channel_image = in_channels == 1 && out_channels <= 16 && a.groups == 1;
    const bool first_level = out_channels == 16 && in_channels <= 32;
    const bool channels_last = one_channel_image || (in_channels > 1 && (std::min(in_channels, out_channels) < 16 || first_level));
    auto activation = [&](const Shape& shape, memory::data_type type) {
        return channels_last ? channels_last_desc(shape, type) : any_desc(shape, type);
    };
    const memory::desc src_any = activation(input_shape, compute);
    // Grouped weights are oneDNN's [G, C_out/G, C_in/G, k...]: our [C_out, C_in/G, k...] in the same order.
    Shape weights_shape = weight->value.shape();
    if (a.groups > 1) {
        weights_shape[0] /= a.groups;
        weights_shape.insert(weights_shape.begin(), a.groups);
    }
    const memory::desc weights_any = any_desc(weights_shape, compute);
    const memory::desc dst_any = activation(output_shape, output_type);
    // Gradients flow in the compute type; weight gradients are always f32 (they update f32 masters).
    const memory::desc diff_dst_any = activation(output_shape, compute);
    const memory::desc diff_weights_any = any_desc(weights_shape);
    const auto make = [&](dnnl::algorithm algorithm) {
        const auto forward = dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm, src_any, weights_any,
                                                             optional_bias_desc(bias), dst_any, strides, dilates, pad_l, pad_r);
        const auto backward_weights = dnnl::convolution_backward_weights::desc(
            algorithm, src_any, diff_weights_any, optional_bias_desc(bias), diff_dst_any, strides, dilates, pad_l, pad_r);
        const SymmetricPadding symmetric = symmetric_padding(a, input_shape);
        if (algorithm == dnnl::algorithm::convolution_winograd && symmetric.changed) {
            const auto backward_data = dnnl::convolution_backward_data::desc(
                algorithm, activation(symmetric.widened_input, compute), weights_any, diff_dst_any, strides, dilates, symmetric.pad,
                symmetric.pad);
            return std::make_unique<ConvKernel>(in, weight, bias, plain_desc(weights_shape), forward, backward_data, backward_weights,
                                                symmetric.input_window);
        }
        const auto backward_data =
            dnnl::convolution_backward_data::desc(algorithm, src_any, weights_any, diff_dst_any, strides, dilates, pad_l, pad_r);
        return std::make_unique<ConvKernel>(in, weight, bias, plain_desc(weights_shape), forward, backward_data, backward_weights);
    };
    if (runs_as_winograd(a, output_shape, in_channels, compute, output_type)) {
        try {
            return make(dnnl::algorithm::convolution_winograd);
        } catch (const dnnl::error&) {  // no Winograd kernel for this CPU or shape: the direct one
        }
    }
    return make(dnnl::algorithm::convolution_direct);
}

// ---- 3×3(×3) stride-1 convolutions with few channels: row_convolution.hpp -----------------------

// Reads a oneDNN memory of a plain, channels-last or channel-blocked f32 layout as a SourceLayout.
SourceLayout source_layout(const memory& value, const Shape& shape) {
    const ChannelAddressing at(value.get_desc());
    SourceLayout layout;
    layout.data = static_cast<const float*>(value.get_data_handle());
    layout.batch_stride = at.batch_stride;
    layout.block_stride = at.block_stride;
    layout.block = at.block;
    layout.spatial_stride = at.spatial_stride;
    const bool volume = shape.size() == 5;
    layout.extent = {volume ? shape[2] : 1, shape[shape.size() - 2], shape.back()};
    return layout;
}

// Forward, input gradient and weights' gradient as row convolutions on zero-padded plain copies of
// the input and of the output's gradient. The copies live in the scratchpad's call arena (each call
// makes its own: nothing is kept between forward and backward beyond what the executor keeps).
class RowConvKernel final : public Kernel {
public:
    RowConvKernel(const ConvAttributes& attributes, const Shape& input_shape, const Shape& output_shape, const KernelInputs& in,
                  Parameter* weight, Parameter* bias)
        : Kernel(in), m_weight(weight), m_bias(bias), m_needs_diff_input(in.needs_gradient[0]), m_input_shape(input_shape),
          m_output_shape(output_shape), m_rank(attributes.spatial_rank()), m_pad_begin(attributes.pad_begin.begin(), attributes.pad_begin.end()) {
        // Channels-last out, as oneDNN's kernels gave narrow layers: batch norm and pooling run fast on it.
        m_output_desc = channels_last_desc(output_shape);
        const std::vector<std::int64_t> in_extent(input_shape.begin() + 2, input_shape.end());
        m_out_extent.assign(output_shape.begin() + 2, output_shape.end());
        m_input = padded_rows_for(input_shape[0], input_shape[1], m_out_extent);
        m_input_buffer = m_scratchpad.call_buffer(flat_desc(m_input.elements()));
        // The output's gradient padded for the input gradient's product (a forward convolution with the
        // weights mirrored: 2 − pad before each axis); the weights' gradient reads it at that offset.
        for (std::int64_t pad : m_pad_begin) m_gradient_offset.push_back(2 - pad);
        m_gradient = padded_rows_for(output_shape[0], output_shape[1], in_extent, m_gradient_offset.back());
        m_gradient_buffer = m_scratchpad.call_buffer(flat_desc(m_gradient.elements()));
        // The input's gradient is written in its own layout where that is plain or channels-last.
        m_diff_src_channels_last = in.descs[0] == channels_last_desc(input_shape);
        const memory::desc written = m_diff_src_channels_last ? in.descs[0] : plain_desc(input_shape);
        if (m_needs_diff_input) m_diff_src = Staged(m_scratchpad, written, in.descs[0]);
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        fill_input(inputs[0]);
        const std::vector<float> relaid = relaid_weights(m_weight->value.data<float>(), m_output_shape[1], m_input_shape[1], m_rank, false);
        row_conv_forward(m_input, relaid, m_bias ? m_bias->value.data<float>() : nullptr, m_output_shape[1], m_rank,
                         static_cast<float*>(output.get_data_handle()), true);
    }

    void backward(const std::vector<memory>& inputs, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        fill_gradient(diff_output);
        weights_gradient(inputs[0]);
        inputs_gradient(diff_inputs);
    }

    bool splits_backward() const override { return true; }
    std::string implementation() const override { return "rows:avx512"; }

    void backward_weights(const std::vector<memory>& inputs, const memory&, const memory& diff_output) override {
        fill_gradient(diff_output);
        weights_gradient(inputs[0]);
    }

    void backward_inputs(const std::vector<memory>&, const memory&, const memory& diff_output,
                         const std::vector<memory>& diff_inputs) override {
        if (!m_needs_diff_input) return;
        fill_gradient(diff_output);
        inputs_gradient(diff_inputs);
    }

private:
    static memory::desc flat_desc(std::int64_t elements) {
        return memory::desc({static_cast<memory::dim>(elements)}, memory::data_type::f32, memory::format_tag::a);
    }

    void fill_input(const memory& input) {
        m_input.data = static_cast<float*>(m_input_buffer.get_data_handle());
        fill_padded(m_input, source_layout(input, m_input_shape), m_pad_begin);
    }
    void fill_gradient(const memory& diff_output) {
        m_gradient.data = static_cast<float*>(m_gradient_buffer.get_data_handle());
        fill_padded(m_gradient, source_layout(diff_output, m_output_shape), m_gradient_offset);
    }
    // Expects the output's gradient filled.
    void weights_gradient(const memory& input) {
        fill_input(input);
        row_conv_weights_gradient(m_input, m_gradient, m_gradient_offset, m_out_extent, m_rank, m_weight->gradient.data<float>(),
                                  m_bias ? m_bias->gradient.data<float>() : nullptr);
    }
    void inputs_gradient(const std::vector<memory>& diff_inputs) {
        if (!m_needs_diff_input) return;
        const memory& target = diff_inputs[0];
        const std::vector<float> relaid = relaid_weights(m_weight->value.data<float>(), m_output_shape[1], m_input_shape[1], m_rank, true);
        const memory destination = m_diff_src.destination(target);
        row_conv_forward(m_gradient, relaid, nullptr, m_input_shape[1], m_rank, static_cast<float*>(destination.get_data_handle()),
                         m_diff_src_channels_last);
        m_diff_src.finish(target);
    }

    Parameter* m_weight;
    Parameter* m_bias;
    bool m_needs_diff_input;
    bool m_diff_src_channels_last = false;
    Shape m_input_shape, m_output_shape;
    int m_rank;
    std::vector<std::int64_t> m_pad_begin, m_out_extent, m_gradient_offset;
    PaddedRows m_input, m_gradient;
    memory m_input_buffer, m_gradient_buffer;
    Staged m_diff_src;
};

// Whether a convolution runs as row convolutions: f32 on an AVX-512 CPU, 3 taps per axis, stride and
// dilation 1, one group, padding within the window, input and output channels in blocks of 8 — and
// few output channels, where oneDNN's channel-vectorised kernels leave lanes idle.
bool runs_as_row_convolution(const ConvAttributes& a, const Shape& input_shape, const Shape& output_shape, const KernelInputs& in,
                             memory::data_type compute, memory::data_type output_type) {
    if (!row_convolutions_enabled() || compute != memory::data_type::f32 || output_type != memory::data_type::f32) return false;
    if (in.descs[0].data_type() != memory::data_type::f32 || a.groups != 1) return false;
    if (a.spatial_rank() != 2 && a.spatial_rank() != 3) return false;
    for (std::size_t axis = 0; axis < a.kernel.size(); ++axis) {
        if (a.kernel[axis] != 3 || a.stride[axis] != 1 || a.dilation[axis] != 1) return false;
        if (a.pad_begin[axis] > 2 || a.pad_end[axis] > 2) return false;
    }
    const std::int64_t in_channels = input_shape[1], out_channels = output_shape[1];
    // Both in blocks of 8. A first layer (1 to 4 input channels) stays with oneDNN: its product is small
    // and the padded copies would cost more than they save.
    if (out_channels % 8 != 0 || in_channels % 8 != 0) return false;
    // Fewer than 16 outputs: oneDNN's kernels fill half of every vector there (8 channels of 16). With 16
    // or more outputs they fill them and run as fast (8 → 16 channels at 32³: the same time, measured).
    return out_channels < 16;
}

// Transposed convolutions whose kernel differs from the stride (kernel = stride takes the faster
// UpsampleConvKernel below).
std::unique_ptr<Kernel> make_deconvolution_kernel(const ConvTransposeAttributes& a, const Shape& input_shape,
                                                  const Shape& output_shape, const KernelInputs& in,
                                                   Parameter* weight, Parameter* bias, memory::data_type compute,
                                                   memory::data_type output_type) {
    const auto strides = to_dims(a.stride);
    const memory::dims zeros(a.kernel.size(), 0);
    // Our weights are [C_in, C_out, k...]; oneDNN's deconvolution names dims [C_out, C_in, k...], and the
    // io(d)hw tags describe exactly our physical order.
    memory::dims weight_dims = to_dims(weight->value.shape());
    std::swap(weight_dims[0], weight_dims[1]);
    const memory::desc weights_plain(weight_dims, memory::data_type::f32,
                                     weight_dims.size() == 5 ? memory::format_tag::iodhw : memory::format_tag::iohw);
    const memory::desc src_any = any_desc(input_shape, compute);
    const memory::desc weights_any(weight_dims, compute, memory::format_tag::any);
    const memory::desc diff_weights_any(weight_dims, memory::data_type::f32, memory::format_tag::any);
    const memory::desc dst_any = any_desc(output_shape, output_type);
    const memory::desc diff_dst_any = any_desc(output_shape, compute);
    const auto algorithm = dnnl::algorithm::deconvolution_direct;
    return std::make_unique<ConvTransposeKernel>(
        in, weight, bias, weights_plain,
        dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_training, algorithm, src_any, weights_any,
                                          optional_bias_desc(bias), dst_any, strides, zeros, zeros),
        dnnl::deconvolution_backward_data::desc(algorithm, src_any, weights_any, diff_dst_any, strides, zeros, zeros),
        dnnl::deconvolution_backward_weights::desc(algorithm, src_any, diff_weights_any, optional_bias_desc(bias),
                                                   diff_dst_any, strides, zeros, zeros));
}

// ---- transposed convolution with kernel = stride (U-Net's up-convolution) ----------------------


// Rearranges between the 1×1 convolution's output [N, C·K, (D,) H, W] (any layout; K taps per kernel,
// channel c·K + tap, taps in (kD,) kH, kW order) and the upsampled tensor [N, C, (D·kD,) H·kH, W·kW] in
// a plain or channel-blocked layout. A hand loop: oneDNN's reorder between such strided views takes a
// reference path hundreds of times slower.
template <class Element>
void rearrange_depth_space(Element* wide, const ChannelAddressing& wide_at, Element* upsampled, const ChannelAddressing& up_at,
                           const Shape& input_shape, std::int64_t channels, const Extents& factor, bool to_upsampled) {
    const bool is_3d = factor.size() == 3;
    const std::int64_t batch = input_shape[0];
    const std::int64_t depth = is_3d ? input_shape[2] : 1, height = input_shape[is_3d ? 3 : 2],
                       width = input_shape[is_3d ? 4 : 3];
    const std::int64_t fz = is_3d ? factor[0] : 1, fy = factor[is_3d ? 1 : 0], fx = factor[is_3d ? 2 : 1];
    const std::int64_t taps = fz * fy * fx;
    const std::int64_t wide_channels = channels * taps;
    const std::int64_t block = wide_at.block, num_blocks = (wide_channels + block - 1) / block;
    const auto& up_stride = up_at.spatial_stride;  // (D,) H, W of the upsampled tensor
    // Each wide channel's element of an input pixel, as an offset from the first upsampled element that
    // pixel covers.
    std::vector<std::int64_t> lane_offset(static_cast<std::size_t>(num_blocks * block), 0);
    for (std::int64_t wide_channel = 0; wide_channel < wide_channels; ++wide_channel) {
        const std::int64_t c = wide_channel / taps, tap = wide_channel % taps;
        const std::int64_t kz = tap / (fy * fx), ky = (tap / fx) % fy, kx = tap % fx;
        lane_offset[static_cast<std::size_t>(wide_channel)] =
            up_at.channel_offset(c) + kz * up_stride[0] + ky * up_stride[1] + kx * up_stride[2];
    }
    // Pixel by pixel, every channel block of it: the upsampled pixels it covers are written whole while
    // they are in the cache (block by block, a blocked output's lines would be written once per block).
#pragma omp parallel for collapse(3) schedule(static)
    for (std::int64_t n = 0; n < batch; ++n) {
        for (std::int64_t z = 0; z < depth; ++z) {
            for (std::int64_t y = 0; y < height; ++y) {
                Element* wide_row = wide + n * wide_at.batch_stride + z * wide_at.spatial_stride[0] + y * wide_at.spatial_stride[1];
                Element* up_row = upsampled + n * up_at.batch_stride + z * fz * up_stride[0] + y * fy * up_stride[1];
                for (std::int64_t x = 0; x < width; ++x) {
                    Element* up_pixel = up_row + x * fx * up_stride[2];
                    for (std::int64_t b = 0; b < num_blocks; ++b) {
                        Element* wide_pixel = wide_row + x * wide_at.spatial_stride[2] + b * wide_at.block_stride;
                        const std::int64_t lanes = std::min(block, wide_channels - b * block);
                        const std::int64_t* offsets = lane_offset.data() + b * block;
                        if (to_upsampled) {
                            for (std::int64_t lane = 0; lane < lanes; ++lane) up_pixel[offsets[lane]] = wide_pixel[lane];
                        } else {
                            for (std::int64_t lane = 0; lane < lanes; ++lane) wide_pixel[lane] = up_pixel[offsets[lane]];
                        }
                    }
                }
            }
        }
    }
}

void rearrange_depth_space(const memory& wide, const memory& upsampled, const Shape& input_shape, std::int64_t channels,
                           const Extents& factor, bool to_upsampled) {
    TESSERA_ASSERT(wide.get_desc().data_type() == upsampled.get_desc().data_type(), "depth-to-space needs one type");
    const ChannelAddressing wide_at(wide.get_desc()), up_at(upsampled.get_desc());
    if (wide.get_desc().data_type() == memory::data_type::f32) {
        rearrange_depth_space(static_cast<float*>(wide.get_data_handle()), wide_at, static_cast<float*>(upsampled.get_data_handle()),
                              up_at, input_shape, channels, factor, to_upsampled);
    } else {  // bf16: moved as 16-bit patterns
        rearrange_depth_space(static_cast<std::uint16_t*>(wide.get_data_handle()), wide_at,
                              static_cast<std::uint16_t*>(upsampled.get_data_handle()), up_at, input_shape, channels, factor,
                              to_upsampled);
    }
}

// The upsampled output's layout, as the convolutions hand the skip connection beside it to the
// concatenation, so that it joins runs of channels (ChannelRuns in elementwise_kernels.cpp) where oneDNN
// took its reference kernel for a plain input beside the other: channels-last up to 16 channels (the row
// convolutions' layout, and the first level's of a base-16 U-Net), 16-channel blocks above where the
// channels fill them, plain otherwise.
memory::desc upsampled_desc(const Shape& shape, memory::data_type type) {
    if (shape[1] <= 16) return channels_last_desc(shape, type);
    if (shape[1] % 16 == 0) return channel_blocked_desc(shape, type);
    return plain_desc(shape, type);
}

// With kernel = stride the output blocks do not overlap, so the transposed convolution is a 1×1
// convolution to C_out·K channels (K = taps per kernel) followed by a depth-to-space rearrangement —
// and oneDNN's 1×1 kernels are many times faster than its deconvolution. The rearrangement is one
// reorder between strided views; the outputs are exactly those of the transposed convolution.
class UpsampleConvKernel final : public Kernel {
public:
    UpsampleConvKernel(const ConvTransposeAttributes& attributes, const Shape& input_shape, const Shape& output_shape,
                       const KernelInputs& in, Parameter* weight,
                       Parameter* bias, memory::data_type compute, memory::data_type output_type)
        : Kernel(in), m_weight(weight), m_bias(bias), m_needs_diff_input(in.needs_gradient[0]) {
        const Extents& factor = attributes.kernel;  // = stride
        const int rank = static_cast<int>(factor.size());
        const std::int64_t taps = num_elements_of(factor);
        const std::int64_t out_channels = output_shape[1];
        m_taps = taps;
        Shape wide_shape = input_shape;  // [N, C_out·K, (D,) H, W]
        wide_shape[1] = out_channels * taps;
        const Shape conv_weights{out_channels * taps, input_shape[1]};
        Shape weights_shape = conv_weights;
        weights_shape.insert(weights_shape.end(), static_cast<std::size_t>(rank), 1);
        // Our weights [C_in, C_out, k...] are, read as a matrix, [C_in, C_out·K]: the 1×1 weights
        // [C_out·K, C_in] transposed, which the io(d)hw tags describe without a copy.
        m_weights_plain = memory::desc(to_dims(weights_shape), memory::data_type::f32,
                                       rank == 3 ? memory::format_tag::iodhw : memory::format_tag::iohw);
        // Source and destination layouts left to oneDNN together: mixing a fixed layout with 'any' on a 1×1
        // convolution selects a reference kernel. The rearrangement reads whatever layout comes.
        const memory::desc wide_any = any_desc(wide_shape, compute);
        const memory::desc src_any = any_desc(input_shape, compute);
        const memory::desc weights_any = any_desc(weights_shape, compute);
        const memory::desc diff_weights_any = any_desc(weights_shape);
        const memory::desc bias_desc = bias ? plain_desc({out_channels * taps}) : memory::desc();
        const memory::dims ones(static_cast<std::size_t>(rank), 1), zeros(static_cast<std::size_t>(rank), 0);

        m_forward_pd = m_scratchpad.fit(dnnl::convolution_forward::primitive_desc(
            dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                            src_any, weights_any, bias_desc, wide_any, ones, zeros, zeros, zeros),
            Scratchpad::attributes(), cpu_engine()));
        m_forward = dnnl::convolution_forward(m_forward_pd);
        const memory::desc wide_desc = m_forward_pd.dst_desc();
        m_wide = m_scratchpad.call_buffer(wide_desc);  // forward only
        m_src = Converted(m_scratchpad, in.descs[0], m_forward_pd.src_desc(), Lifetime::Kept);  // backward reads it
        m_forward_weights = Converted(m_scratchpad, m_weights_plain, m_forward_pd.weights_desc(), Lifetime::Call);
        m_output_desc = upsampled_desc(output_shape, output_type);

        m_input_shape = input_shape;
        m_factor = factor;
        m_out_channels = out_channels;
        // Rearranged in the compute type; an output layer's f32 result is converted after.
        const memory::desc upsampled_compute = upsampled_desc(output_shape, compute);
        m_to_output = Staged(m_scratchpad, upsampled_compute, m_output_desc);
        m_upsampled_gradient = Converted(m_scratchpad, m_output_desc, upsampled_compute, Lifetime::Call);
        m_diff_wide = m_scratchpad.call_buffer(wide_desc);  // backward only

        if (m_needs_diff_input) {
            m_backward_data_pd = m_scratchpad.fit(dnnl::convolution_backward_data::primitive_desc(
                dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, src_any, weights_any,
                                                      wide_desc, ones, zeros, zeros, zeros),
                Scratchpad::attributes(), cpu_engine(), m_forward_pd));
            m_backward_data = dnnl::convolution_backward_data(m_backward_data_pd);
            m_backward_data_weights = Converted(m_scratchpad, m_weights_plain, m_backward_data_pd.weights_desc(), Lifetime::Call);
            m_diff_src = Staged(m_scratchpad, m_backward_data_pd.diff_src_desc(), in.descs[0]);
        }
        m_backward_weights_pd = m_scratchpad.fit(dnnl::convolution_backward_weights::primitive_desc(
            dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, src_any, diff_weights_any,
                                                     bias_desc, wide_desc, ones, zeros, zeros, zeros),
            Scratchpad::attributes(), cpu_engine(), m_forward_pd));
        m_backward_weights = dnnl::convolution_backward_weights(m_backward_weights_pd);
        m_backward_weights_src = Converted(m_scratchpad, m_forward_pd.src_desc(), m_backward_weights_pd.src_desc(), Lifetime::Call);
        m_diff_weights = Staged(m_scratchpad, m_backward_weights_pd.diff_weights_desc(), m_weights_plain);
        if (bias) {
            m_wide_bias = Tensor::zeros({out_channels * taps}, DType::F32);
            m_wide_bias_gradient = Tensor::zeros({out_channels * taps}, DType::F32);
        }
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        m_last_src = m_src(inputs[0]);
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, m_last_src},
                                             {DNNL_ARG_WEIGHTS, m_forward_weights(weights(m_weight->value))},
                                             {DNNL_ARG_DST, m_wide}};
        if (m_bias) {  // each output channel's bias, repeated for its K taps
            const float* bias = m_bias->value.data<float>();
            float* wide_bias = m_wide_bias.data<float>();
            for (std::int64_t i = 0; i < m_wide_bias.num_elements(); ++i) wide_bias[i] = bias[i / m_taps];
            args[DNNL_ARG_BIAS] = wrap(m_wide_bias);
        }
        m_scratchpad.execute(m_forward, args);
        rearrange_depth_space(m_wide, m_to_output.destination(output), m_input_shape, m_out_channels, m_factor, true);
        m_to_output.finish(output);
    }

    void backward(const std::vector<memory>&, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        rearrange_depth_space(m_diff_wide, m_upsampled_gradient(diff_output), m_input_shape, m_out_channels, m_factor, false);

        const memory weight_gradient = weights(m_weight->gradient);
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, m_backward_weights_src(m_last_src)},
                                             {DNNL_ARG_DIFF_DST, m_diff_wide},
                                             {DNNL_ARG_DIFF_WEIGHTS, m_diff_weights.destination(weight_gradient)}};
        if (m_bias) args[DNNL_ARG_DIFF_BIAS] = wrap(m_wide_bias_gradient);
        m_scratchpad.execute(m_backward_weights, args);
        m_diff_weights.finish(weight_gradient);
        if (m_bias) {  // a channel's bias gradient sums its K taps
            const float* per_tap = m_wide_bias_gradient.data<float>();
            float* bias_gradient = m_bias->gradient.data<float>();
            for (std::int64_t c = 0; c < m_bias->gradient.num_elements(); ++c) {
                double sum = 0;
                for (std::int64_t k = 0; k < m_taps; ++k) sum += per_tap[c * m_taps + k];
                bias_gradient[c] = static_cast<float>(sum);
            }
        }
        if (m_needs_diff_input) {
            const memory& target = diff_inputs[0];
            m_scratchpad.execute(m_backward_data, {{DNNL_ARG_DIFF_DST, m_diff_wide},
                                                   {DNNL_ARG_WEIGHTS, m_backward_data_weights(weights(m_weight->value))},
                                                   {DNNL_ARG_DIFF_SRC, m_diff_src.destination(target)}});
            m_diff_src.finish(target);
        }
    }

    std::int64_t bytes() const override {
        return m_src.bytes() + m_forward_weights.bytes() +
               m_backward_data_weights.bytes() + m_diff_src.bytes() + m_backward_weights_src.bytes() +
               m_diff_weights.bytes();
    }

private:
    memory weights(const Tensor& tensor) const {
        return memory(m_weights_plain, cpu_engine(), const_cast<void*>(tensor.raw_data()));
    }

    Parameter* m_weight;
    Parameter* m_bias;
    bool m_needs_diff_input;
    std::int64_t m_taps = 1;
    memory::desc m_weights_plain;
    Shape m_input_shape;
    Extents m_factor;
    std::int64_t m_out_channels = 0;
    Staged m_to_output;
    Converted m_upsampled_gradient;
    dnnl::convolution_forward::primitive_desc m_forward_pd;
    dnnl::convolution_forward m_forward;
    dnnl::convolution_backward_data::primitive_desc m_backward_data_pd;
    dnnl::convolution_backward_data m_backward_data;
    dnnl::convolution_backward_weights::primitive_desc m_backward_weights_pd;
    dnnl::convolution_backward_weights m_backward_weights;
    memory m_wide, m_diff_wide, m_last_src;
    Converted m_src, m_forward_weights, m_backward_data_weights, m_backward_weights_src;
    Staged m_diff_src, m_diff_weights;
    Tensor m_wide_bias, m_wide_bias_gradient;
};

// An up-convolution as one product per input pixel written into the upsampled layout
// (ops/upconvolution.hpp): f32 where both layouts have runs of 16 floats; UpsampleConvKernel otherwise.
class UpconvKernel final : public Kernel {
public:
    UpconvKernel(UpconvPlan plan, const KernelInputs& in, const memory::desc& output_desc, Parameter* weight, Parameter* bias)
        : Kernel(in), m_plan(std::move(plan)), m_weight(weight), m_bias(bias), m_needs_diff_input(in.needs_gradient[0]),
          m_input_desc(in.descs[0]) {
        m_output_desc = output_desc;
    }

    // The plan again for the view's strides, into whole 16-channel blocks only: a block range of a blocked
    // concatenation is each batch item's one dense run, while a channels-last range is every other 64 bytes
    // of each pixel. Measured in the 2D U-Net (bm_partition --profile 1, 2 threads, Xeon model 207, two
    // runs): into 32- and 64-channel blocked concatenations their copies took 0.6 and 1.2 ms less a step
    // (the up-convolutions the same); into a 16 + 16 channels-last one the up-convolution took 2.5–3.9 ms
    // more and the copy saved 0.2–0.7.
    bool write_into_channels(const memory::desc& view) override {
        if (!ChannelAddressing::describes(view) || ChannelAddressing(view).block == 1) return false;
        std::optional<UpconvPlan> plan = UpconvPlan::make(m_plan.geometry(), ChannelAddressing(m_input_desc), ChannelAddressing(view));
        if (!plan) return false;
        m_plan = std::move(*plan);
        return true;
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        m_plan.forward(static_cast<const float*>(inputs[0].get_data_handle()), m_weight->value.data<float>(),
                       m_bias ? m_bias->value.data<float>() : nullptr, static_cast<float*>(output.get_data_handle()));
    }

    void backward(const std::vector<memory>& inputs, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        m_plan.backward(static_cast<const float*>(inputs[0].get_data_handle()), static_cast<const float*>(diff_output.get_data_handle()),
                        m_weight->value.data<float>(), m_needs_diff_input ? static_cast<float*>(diff_inputs[0].get_data_handle()) : nullptr,
                        m_weight->gradient.data<float>(), m_bias ? m_bias->gradient.data<float>() : nullptr);
    }

    std::string implementation() const override { return "upconv:avx512"; }

private:
    UpconvPlan m_plan;
    Parameter* m_weight;
    Parameter* m_bias;
    bool m_needs_diff_input;
    memory::desc m_input_desc;
};

// The direct up-convolution's plan for these shapes and layouts, if it applies.
std::optional<UpconvPlan> upconv_plan(const Shape& input_shape, const Shape& output_shape, const KernelInputs& in, const Extents& factor,
                                      memory::data_type compute, memory::data_type output_type) {
    if (switched_off("TESSERA_UPCONVOLUTIONS") || compute != memory::data_type::f32 || output_type != memory::data_type::f32) return std::nullopt;
    const memory::desc& input = in.descs[0];
    if (input.data_type() != memory::data_type::f32 || !ChannelAddressing::describes(input)) return std::nullopt;
    const bool volume = factor.size() == 3;
    UpconvGeometry geometry;
    geometry.batch = input_shape[0];
    geometry.in_channels = input_shape[1];
    geometry.out_channels = output_shape[1];
    geometry.in_extent = {volume ? input_shape[2] : 1, input_shape[input_shape.size() - 2], input_shape.back()};
    geometry.factor = {volume ? factor[0] : 1, factor[factor.size() - 2], factor.back()};
    return UpconvPlan::make(geometry, ChannelAddressing(input), ChannelAddressing(upsampled_desc(output_shape, output_type)));
}

}  // namespace

std::unique_ptr<Kernel> make_conv_kernel(const ConvAttributes& attributes, const Shape& input_shape, const Shape& output_shape,
                                         const KernelInputs& in, Parameter* weight, Parameter* bias,
                                         memory::data_type compute, memory::data_type output_type) {
    if (runs_as_row_convolution(attributes, input_shape, output_shape, in, compute, output_type))
        return std::make_unique<RowConvKernel>(attributes, input_shape, output_shape, in, weight, bias);
    if (runs_as_narrow_pointwise(attributes, input_shape, output_shape, in, compute, output_type))
        return make_narrow_pointwise_kernel(input_shape, output_shape, in, weight, bias);
    return make_direct_conv_kernel(attributes, input_shape, output_shape, in, weight, bias, compute, output_type);
}

std::unique_ptr<Kernel> make_conv_transpose_kernel(const ConvTransposeAttributes& attributes, const Shape& input_shape,
                                                   const Shape& output_shape, const KernelInputs& in, Parameter* weight,
                                                   Parameter* bias, memory::data_type compute, memory::data_type output_type) {
    if (attributes.kernel == attributes.stride) {
        if (auto plan = upconv_plan(input_shape, output_shape, in, attributes.kernel, compute, output_type))
            return std::make_unique<UpconvKernel>(std::move(*plan), in, upsampled_desc(output_shape, output_type), weight, bias);
        return std::make_unique<UpsampleConvKernel>(attributes, input_shape, output_shape, in, weight, bias, compute, output_type);
    }
    return make_deconvolution_kernel(attributes, input_shape, output_shape, in, weight, bias, compute, output_type);
}

}  // namespace tessera::ops
