#include "graph/executor.hpp"

#include "core/random.hpp"
#include "ops/dnnl_support.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <span>

namespace tessera::graph {

namespace {

using dnnl::memory;
using ops::cpu_engine;
using ops::cpu_stream;

memory::dims to_dims(const ops::Extents& extents) { return memory::dims(extents.begin(), extents.end()); }

memory::dims minus_one(const ops::Extents& dilation) {  // oneDNN counts dilation from 0 (dense)
    memory::dims result;
    for (std::int64_t d : dilation) result.push_back(d - 1);
    return result;
}

// ---- scratchpads ------------------------------------------------------------------------------
//
// oneDNN's default scratchpad (scratchpad_mode::library; Debian's 2.6 is built without
// DNNL_ENABLE_CONCURRENT_EXEC) may belong to a thread: its gemm-based kernels (gemm:jit convolutions,
// which AVX2 CPUs run for 3D backward passes) and Winograd share one buffer per thread, sized by the
// primitives created on that thread and freed when that thread's count of them returns to zero — such
// a primitive must run on the thread that created it. A simulated core's kernels are created on one
// pool thread and run on whichever thread picks the core up next (a kernel reaching past another
// thread's smaller buffer, or into a freed one: tests/engine/cores/test_uneven_threads.cpp). So every
// primitive here is created with a user scratchpad and runs with its executor's own buffer, sized for
// the largest of them: an executor runs one primitive at a time, and the buffer goes where it goes.
class Scratchpad {
public:
    static const dnnl::primitive_attr& attributes() {
        static const dnnl::primitive_attr attributes = [] {
            dnnl::primitive_attr a;
            a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
            return a;
        }();
        return attributes;
    }
    // Widens the buffer for a primitive about to be created; returns its descriptor.
    template <class PrimitiveDesc>
    PrimitiveDesc fit(PrimitiveDesc pd) {
        TESSERA_ASSERT(!m_buffer, "every primitive is created before the scratchpad is allocated");
        m_bytes = std::max(m_bytes, pd.scratchpad_desc().get_size());
        return pd;
    }
    void allocate() {
        if (m_bytes > 0) {
            m_buffer = memory(memory::desc({static_cast<memory::dim>(m_bytes)}, memory::data_type::u8, memory::format_tag::a),
                              cpu_engine());
        }
    }
    // Runs a primitive of this executor on the calling thread.
    void execute(const dnnl::primitive& primitive, std::unordered_map<int, memory> args) const {
        if (m_buffer) args[DNNL_ARG_SCRATCHPAD] = m_buffer;
        primitive.execute(cpu_stream(), args);
    }
    std::int64_t bytes() const { return static_cast<std::int64_t>(m_bytes); }

private:
    std::size_t m_bytes = 0;
    memory m_buffer;
};

// A reorder primitive with a user scratchpad.
dnnl::reorder make_reorder(Scratchpad& scratchpad, const memory::desc& from, const memory::desc& to) {
    return dnnl::reorder(scratchpad.fit(
        dnnl::reorder::primitive_desc(cpu_engine(), from, cpu_engine(), to, Scratchpad::attributes())));
}

// Brings a value into the layout a primitive wants; a no-op (the same memory back) when they agree.
class Converted {
public:
    Converted() = default;
    Converted(Scratchpad& scratchpad, const memory::desc& from, const memory::desc& to)
        : m_scratchpad(&scratchpad), m_needed(from != to) {
        if (!m_needed) return;
        m_target = memory(to, cpu_engine());
        m_reorder = make_reorder(scratchpad, from, to);
    }
    memory operator()(const memory& source) {
        if (!m_needed) return source;
        m_scratchpad->execute(m_reorder, {{DNNL_ARG_FROM, source}, {DNNL_ARG_TO, m_target}});
        return m_target;
    }
    std::int64_t bytes() const { return m_needed ? static_cast<std::int64_t>(m_target.get_desc().get_size()) : 0; }

private:
    Scratchpad* m_scratchpad = nullptr;
    bool m_needed = false;
    memory m_target;
    dnnl::reorder m_reorder;
};

// A value a primitive produces in its own layout that must land in a given memory of another layout:
// written there directly when the layouts agree, else through a scratch buffer and a reorder.
class Staged {
public:
    Staged() = default;
    Staged(Scratchpad& scratchpad, const memory::desc& produced, const memory::desc& target)
        : m_scratchpad(&scratchpad), m_direct(produced == target) {
        if (m_direct) return;
        m_scratch = memory(produced, cpu_engine());
        m_reorder = make_reorder(scratchpad, produced, target);
    }
    memory destination(const memory& target) const { return m_direct ? target : m_scratch; }
    void finish(const memory& target) {
        if (!m_direct) m_scratchpad->execute(m_reorder, {{DNNL_ARG_FROM, m_scratch}, {DNNL_ARG_TO, target}});
    }
    std::int64_t bytes() const { return m_direct ? 0 : static_cast<std::int64_t>(m_scratch.get_desc().get_size()); }

private:
    Scratchpad* m_scratchpad = nullptr;
    bool m_direct = true;
    memory m_scratch;
    dnnl::reorder m_reorder;
};

// A copy between layouts that is always performed (also when the layouts agree).
class Copy {
public:
    Copy() = default;
    Copy(Scratchpad& scratchpad, const memory::desc& from, const memory::desc& to)
        : m_scratchpad(&scratchpad), m_reorder(make_reorder(scratchpad, from, to)) {}
    void operator()(const memory& from, const memory& to) {
        m_scratchpad->execute(m_reorder, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
    }

private:
    Scratchpad* m_scratchpad = nullptr;
    dnnl::reorder m_reorder;
};

struct KernelInputs {
    std::vector<memory::desc> descs;     // layouts the inputs arrive in
    std::vector<bool> needs_gradient;    // false for the graph input
    Scratchpad* scratchpad = nullptr;    // the executor's: every primitive is fitted to it and runs with it
};

class Kernel {
public:
    explicit Kernel(const KernelInputs& in) : m_scratchpad(*in.scratchpad) {}
    virtual ~Kernel() = default;
    const memory::desc& output_desc() const { return m_output_desc; }
    virtual void forward(const std::vector<memory>& inputs, const memory& output, Mode mode) = 0;
    // diff_inputs[i] is in the layout inputs[i] arrived in, or empty when that gradient is not needed.
    virtual void backward(const std::vector<memory>& inputs, const memory& output, const memory& diff_output,
                          const std::vector<memory>& diff_inputs) = 0;
    virtual std::int64_t bytes() const { return 0; }
    // Sums shared across executors (simulated cores) before forward / backward; none by default.
    virtual int reduction_phases(Pass, Mode) const { return 0; }
    virtual std::vector<double> partial(Pass, int, const std::vector<memory>&, const memory&, const memory&,
                                        const std::vector<memory>&) {
        TESSERA_FAIL("this kernel has no reduction phases");
    }
    virtual void total(Pass, int, std::span<const double>) {}

protected:
    Scratchpad& m_scratchpad;
    memory::desc m_output_desc;
};

memory::desc optional_bias_desc(const Parameter* bias) {
    return bias ? ops::plain_desc(bias->value.shape()) : memory::desc();
}

// ---- convolution and transposed convolution -------------------------------------------------

// A windowed op with weights: oneDNN's convolution and deconvolution families share one shape —
// forward, backward-data and backward-weights primitives, the input kept in the forward layout for
// the weights gradient, f32 master weights reordered into each primitive's layout.
template <class Forward, class BackwardData, class BackwardWeights>
class WeightedWindowKernel final : public Kernel {
public:
    WeightedWindowKernel(const KernelInputs& in, Parameter* weight, Parameter* bias, memory::desc weights_plain,
                         const typename Forward::desc& forward, const typename BackwardData::desc& backward_data,
                         const typename BackwardWeights::desc& backward_weights)
        : Kernel(in), m_weight(weight), m_bias(bias), m_needs_diff_input(in.needs_gradient[0]), m_weights_plain(weights_plain) {
        m_forward_pd = m_scratchpad.fit(typename Forward::primitive_desc(forward, Scratchpad::attributes(), cpu_engine()));
        m_forward = Forward(m_forward_pd);
        m_output_desc = m_forward_pd.dst_desc();
        m_src = Converted(m_scratchpad, in.descs[0], m_forward_pd.src_desc());
        m_forward_weights = Converted(m_scratchpad, m_weights_plain, m_forward_pd.weights_desc());
        if (m_needs_diff_input) {
            m_backward_data_pd = m_scratchpad.fit(
                typename BackwardData::primitive_desc(backward_data, Scratchpad::attributes(), cpu_engine(), m_forward_pd));
            m_backward_data = BackwardData(m_backward_data_pd);
            m_backward_data_weights = Converted(m_scratchpad, m_weights_plain, m_backward_data_pd.weights_desc());
            m_backward_data_diff_dst = Converted(m_scratchpad, m_output_desc, m_backward_data_pd.diff_dst_desc());
            m_diff_src = Staged(m_scratchpad, m_backward_data_pd.diff_src_desc(), in.descs[0]);
        }
        m_backward_weights_pd = m_scratchpad.fit(
            typename BackwardWeights::primitive_desc(backward_weights, Scratchpad::attributes(), cpu_engine(), m_forward_pd));
        m_backward_weights = BackwardWeights(m_backward_weights_pd);
        m_backward_weights_src = Converted(m_scratchpad, m_forward_pd.src_desc(), m_backward_weights_pd.src_desc());
        m_backward_weights_diff_dst = Converted(m_scratchpad, m_output_desc, m_backward_weights_pd.diff_dst_desc());
        m_diff_weights = Staged(m_scratchpad, m_backward_weights_pd.diff_weights_desc(), m_weights_plain);
        if (bias) m_diff_bias = Staged(m_scratchpad, m_backward_weights_pd.diff_bias_desc(), ops::plain_desc(bias->value.shape()));
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        m_last_src = m_src(inputs[0]);
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, m_last_src},
                                             {DNNL_ARG_WEIGHTS, m_forward_weights(weights(m_weight->value))},
                                             {DNNL_ARG_DST, output}};
        if (m_bias) args[DNNL_ARG_BIAS] = ops::wrap(m_bias->value);
        m_scratchpad.execute(m_forward, args);
    }

    void backward(const std::vector<memory>&, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        const memory weight_gradient = weights(m_weight->gradient);
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, m_backward_weights_src(m_last_src)},
                                             {DNNL_ARG_DIFF_DST, m_backward_weights_diff_dst(diff_output)},
                                             {DNNL_ARG_DIFF_WEIGHTS, m_diff_weights.destination(weight_gradient)}};
        memory bias_gradient;
        if (m_bias) {
            bias_gradient = ops::wrap(m_bias->gradient);
            args[DNNL_ARG_DIFF_BIAS] = m_diff_bias.destination(bias_gradient);
        }
        m_scratchpad.execute(m_backward_weights, args);
        m_diff_weights.finish(weight_gradient);
        if (m_bias) m_diff_bias.finish(bias_gradient);

        if (m_needs_diff_input) {
            const memory& target = diff_inputs[0];
            m_scratchpad.execute(m_backward_data, {{DNNL_ARG_DIFF_DST, m_backward_data_diff_dst(diff_output)},
                                     {DNNL_ARG_WEIGHTS, m_backward_data_weights(weights(m_weight->value))},
                                     {DNNL_ARG_DIFF_SRC, m_diff_src.destination(target)}});
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
};

using ConvKernel = WeightedWindowKernel<dnnl::convolution_forward, dnnl::convolution_backward_data,
                                        dnnl::convolution_backward_weights>;
using ConvTransposeKernel = WeightedWindowKernel<dnnl::deconvolution_forward, dnnl::deconvolution_backward_data,
                                                 dnnl::deconvolution_backward_weights>;

std::unique_ptr<Kernel> make_conv_kernel(const Node& node, const Shape& input_shape, const KernelInputs& in,
                                         Parameter* weight, Parameter* bias, memory::data_type compute,
                                         memory::data_type output_type) {
    const ops::ConvAttributes& a = node.conv;
    const auto strides = to_dims(a.stride);
    const auto dilates = minus_one(a.dilation);
    const auto pad_l = to_dims(a.pad_begin);
    const auto pad_r = to_dims(a.pad_end);
    // Layers with fewer than 16 channels (a 3D U-Net's first level) run best channels-last: the blocked
    // layouts oneDNN picks pad them to 16 and its backward-weights falls back to a slow gemm. A
    // 1-channel input stays 'any' (channels-last there selects a reference kernel). Source and
    // destination must agree: mixing a fixed layout with 'any' selects a reference kernel too.
    const std::int64_t in_channels = input_shape[1], out_channels = node.output_shape[1];
    const bool channels_last = in_channels > 1 && std::min(in_channels, out_channels) < 16;
    auto activation = [&](const Shape& shape, memory::data_type type) {
        return channels_last ? ops::channels_last_desc(shape, type) : ops::any_desc(shape, type);
    };
    const memory::desc src_any = activation(input_shape, compute);
    const memory::desc weights_any = ops::any_desc(weight->value.shape(), compute);
    const memory::desc dst_any = activation(node.output_shape, output_type);
    // Gradients flow in the compute type; weight gradients are always f32 (they update f32 masters).
    const memory::desc diff_dst_any = activation(node.output_shape, compute);
    const memory::desc diff_weights_any = ops::any_desc(weight->value.shape());
    const auto algorithm = dnnl::algorithm::convolution_direct;
    return std::make_unique<ConvKernel>(
        in, weight, bias, ops::plain_desc(weight->value.shape()),
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm, src_any, weights_any,
                                        optional_bias_desc(bias), dst_any, strides, dilates, pad_l, pad_r),
        dnnl::convolution_backward_data::desc(algorithm, src_any, weights_any, diff_dst_any, strides, dilates, pad_l,
                                              pad_r),
        dnnl::convolution_backward_weights::desc(algorithm, src_any, diff_weights_any, optional_bias_desc(bias),
                                                 diff_dst_any, strides, dilates, pad_l, pad_r));
}

// Transposed convolutions whose kernel differs from the stride (kernel = stride takes the faster
// UpsampleConvKernel below).
std::unique_ptr<Kernel> make_conv_transpose_kernel(const Node& node, const Shape& input_shape, const KernelInputs& in,
                                                   Parameter* weight, Parameter* bias, memory::data_type compute,
                                                   memory::data_type output_type) {
    const ops::ConvTransposeAttributes& a = node.conv_transpose;
    const auto strides = to_dims(a.stride);
    const memory::dims zeros(a.kernel.size(), 0);
    // Our weights are [C_in, C_out, k...]; oneDNN's deconvolution names dims [C_out, C_in, k...], and the
    // io(d)hw tags describe exactly our physical order.
    memory::dims weight_dims = ops::to_dims(weight->value.shape());
    std::swap(weight_dims[0], weight_dims[1]);
    const memory::desc weights_plain(weight_dims, memory::data_type::f32,
                                     weight_dims.size() == 5 ? memory::format_tag::iodhw : memory::format_tag::iohw);
    const memory::desc src_any = ops::any_desc(input_shape, compute);
    const memory::desc weights_any(weight_dims, compute, memory::format_tag::any);
    const memory::desc diff_weights_any(weight_dims, memory::data_type::f32, memory::format_tag::any);
    const memory::desc dst_any = ops::any_desc(node.output_shape, output_type);
    const memory::desc diff_dst_any = ops::any_desc(node.output_shape, compute);
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

// Where element (n, channel, spatial...) of a oneDNN memory lives: the desc's outer strides plus, for
// blocked layouts (nChw16c), the inner channel block. Plain and channels-last layouts have block 1.
struct ChannelAddressing {
    std::int64_t batch_stride = 0, block_stride = 0, block = 1;
    std::array<std::int64_t, 3> spatial_stride{0, 0, 0};  // (D,) H, W; unused entries 0
    explicit ChannelAddressing(const memory::desc& desc) {
        const auto& blocking = desc.data.format_desc.blocking;
        TESSERA_ASSERT(blocking.inner_nblks <= 1 && (blocking.inner_nblks == 0 || blocking.inner_idxs[0] == 1),
                       "expected a plain, channels-last or channel-blocked layout");
        if (blocking.inner_nblks == 1) block = blocking.inner_blks[0];
        batch_stride = blocking.strides[0];
        block_stride = blocking.strides[1];
        const int spatial = desc.data.ndims - 2;
        for (int axis = 0; axis < spatial; ++axis) spatial_stride[static_cast<std::size_t>(3 - spatial + axis)] = blocking.strides[axis + 2];
    }
    std::int64_t channel_offset(std::int64_t channel) const { return (channel / block) * block_stride + channel % block; }
};

// Rearranges between the 1×1 convolution's output [N, C·K, (D,) H, W] (any layout; K taps per kernel,
// channel c·K + tap, taps in (kD,) kH, kW order) and the plain upsampled tensor [N, C, (D·kD,) H·kH, W·kW].
// A hand loop: oneDNN's reorder between such strided views takes a reference path hundreds of times slower.
template <class Element>
void rearrange_depth_space(Element* wide, const ChannelAddressing& at, Element* plain, const Shape& input_shape,
                           std::int64_t channels, const ops::Extents& factor, bool to_plain) {
    const bool is_3d = factor.size() == 3;
    const std::int64_t batch = input_shape[0];
    const std::int64_t depth = is_3d ? input_shape[2] : 1, height = input_shape[is_3d ? 3 : 2],
                       width = input_shape[is_3d ? 4 : 3];
    const std::int64_t fz = is_3d ? factor[0] : 1, fy = factor[is_3d ? 1 : 0], fx = factor[is_3d ? 2 : 1];
    const std::int64_t taps = fz * fy * fx;
    const std::int64_t out_height = height * fy, out_width = width * fx;
    const std::int64_t out_plane = depth * fz * out_height * out_width;  // elements per output channel
    const std::int64_t wide_channels = channels * taps;
    const std::int64_t block = at.block, num_blocks = (wide_channels + block - 1) / block;
    // Walk the wide tensor in its own order (contiguous lanes of a channel block) and look each lane's
    // partner up in the plain tensor through a per-lane offset table.
    std::vector<std::int64_t> lane_offset(static_cast<std::size_t>(num_blocks * block), -1);
    for (std::int64_t wide_channel = 0; wide_channel < wide_channels; ++wide_channel) {
        const std::int64_t c = wide_channel / taps, tap = wide_channel % taps;
        const std::int64_t kz = tap / (fy * fx), ky = (tap / fx) % fy, kx = tap % fx;
        lane_offset[static_cast<std::size_t>(wide_channel)] = c * out_plane + (kz * out_height + ky) * out_width + kx;
    }
#pragma omp parallel for collapse(3) schedule(static)
    for (std::int64_t n = 0; n < batch; ++n) {
        for (std::int64_t b = 0; b < num_blocks; ++b) {
            for (std::int64_t z = 0; z < depth; ++z) {
                const std::int64_t lanes = std::min(block, wide_channels - b * block);
                const std::int64_t* offsets = lane_offset.data() + b * block;
                for (std::int64_t y = 0; y < height; ++y) {
                    Element* wide_row = wide + n * at.batch_stride + b * at.block_stride + z * at.spatial_stride[0] +
                                        y * at.spatial_stride[1];
                    Element* plain_row = plain + n * channels * out_plane + (z * fz * out_height + y * fy) * out_width;
                    for (std::int64_t x = 0; x < width; ++x) {
                        Element* wide_pixel = wide_row + x * at.spatial_stride[2];
                        Element* plain_pixel = plain_row + x * fx;
                        if (to_plain) {
                            for (std::int64_t lane = 0; lane < lanes; ++lane) plain_pixel[offsets[lane]] = wide_pixel[lane];
                        } else {
                            for (std::int64_t lane = 0; lane < lanes; ++lane) wide_pixel[lane] = plain_pixel[offsets[lane]];
                        }
                    }
                }
            }
        }
    }
}

void rearrange_depth_space(const memory& wide, const memory& plain, const Shape& input_shape, std::int64_t channels,
                           const ops::Extents& factor, bool to_plain) {
    TESSERA_ASSERT(wide.get_desc().data_type() == plain.get_desc().data_type(), "depth-to-space needs one type");
    const ChannelAddressing at(wide.get_desc());
    if (wide.get_desc().data_type() == memory::data_type::f32) {
        rearrange_depth_space(static_cast<float*>(wide.get_data_handle()), at, static_cast<float*>(plain.get_data_handle()),
                              input_shape, channels, factor, to_plain);
    } else {  // bf16: moved as 16-bit patterns
        rearrange_depth_space(static_cast<std::uint16_t*>(wide.get_data_handle()), at,
                              static_cast<std::uint16_t*>(plain.get_data_handle()), input_shape, channels, factor, to_plain);
    }
}

// With kernel = stride the output blocks do not overlap, so the transposed convolution is a 1×1
// convolution to C_out·K channels (K = taps per kernel) followed by a depth-to-space rearrangement —
// and oneDNN's 1×1 kernels are many times faster than its deconvolution. The rearrangement is one
// reorder between strided views; the outputs are exactly those of the transposed convolution.
class UpsampleConvKernel final : public Kernel {
public:
    UpsampleConvKernel(const Node& node, const Shape& input_shape, const KernelInputs& in, Parameter* weight,
                       Parameter* bias, memory::data_type compute, memory::data_type output_type)
        : Kernel(in), m_weight(weight), m_bias(bias), m_needs_diff_input(in.needs_gradient[0]) {
        const ops::Extents& factor = node.conv_transpose.kernel;  // = stride
        const int rank = static_cast<int>(factor.size());
        const std::int64_t taps = num_elements_of(factor);
        const std::int64_t out_channels = node.out_channels;
        m_taps = taps;
        Shape wide_shape = input_shape;  // [N, C_out·K, (D,) H, W]
        wide_shape[1] = out_channels * taps;
        const Shape conv_weights{out_channels * taps, input_shape[1]};
        Shape weights_shape = conv_weights;
        weights_shape.insert(weights_shape.end(), static_cast<std::size_t>(rank), 1);
        // Our weights [C_in, C_out, k...] are, read as a matrix, [C_in, C_out·K]: the 1×1 weights
        // [C_out·K, C_in] transposed, which the io(d)hw tags describe without a copy.
        m_weights_plain = memory::desc(ops::to_dims(weights_shape), memory::data_type::f32,
                                       rank == 3 ? memory::format_tag::iodhw : memory::format_tag::iohw);
        // Source and destination layouts left to oneDNN together: mixing a fixed layout with 'any' on a 1×1
        // convolution selects a reference kernel. The rearrangement reads whatever layout comes.
        const memory::desc wide_any = ops::any_desc(wide_shape, compute);
        const memory::desc src_any = ops::any_desc(input_shape, compute);
        const memory::desc weights_any = ops::any_desc(weights_shape, compute);
        const memory::desc diff_weights_any = ops::any_desc(weights_shape);
        const memory::desc bias_desc = bias ? ops::plain_desc({out_channels * taps}) : memory::desc();
        const memory::dims ones(static_cast<std::size_t>(rank), 1), zeros(static_cast<std::size_t>(rank), 0);

        m_forward_pd = m_scratchpad.fit(dnnl::convolution_forward::primitive_desc(
            dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                            src_any, weights_any, bias_desc, wide_any, ones, zeros, zeros, zeros),
            Scratchpad::attributes(), cpu_engine()));
        m_forward = dnnl::convolution_forward(m_forward_pd);
        const memory::desc wide_desc = m_forward_pd.dst_desc();
        m_wide = memory(wide_desc, cpu_engine());
        m_src = Converted(m_scratchpad, in.descs[0], m_forward_pd.src_desc());
        m_forward_weights = Converted(m_scratchpad, m_weights_plain, m_forward_pd.weights_desc());
        m_output_desc = ops::plain_desc(node.output_shape, output_type);

        m_input_shape = input_shape;
        m_factor = factor;
        m_out_channels = out_channels;
        // Rearranged in the compute type; an output layer's f32 result is converted after.
        const memory::desc plain_compute = ops::plain_desc(node.output_shape, compute);
        m_to_output = Staged(m_scratchpad, plain_compute, m_output_desc);
        m_plain_gradient = Converted(m_scratchpad, m_output_desc, plain_compute);
        m_diff_wide = memory(wide_desc, cpu_engine());

        if (m_needs_diff_input) {
            m_backward_data_pd = m_scratchpad.fit(dnnl::convolution_backward_data::primitive_desc(
                dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, src_any, weights_any,
                                                      wide_desc, ones, zeros, zeros, zeros),
                Scratchpad::attributes(), cpu_engine(), m_forward_pd));
            m_backward_data = dnnl::convolution_backward_data(m_backward_data_pd);
            m_backward_data_weights = Converted(m_scratchpad, m_weights_plain, m_backward_data_pd.weights_desc());
            m_diff_src = Staged(m_scratchpad, m_backward_data_pd.diff_src_desc(), in.descs[0]);
        }
        m_backward_weights_pd = m_scratchpad.fit(dnnl::convolution_backward_weights::primitive_desc(
            dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, src_any, diff_weights_any,
                                                     bias_desc, wide_desc, ones, zeros, zeros, zeros),
            Scratchpad::attributes(), cpu_engine(), m_forward_pd));
        m_backward_weights = dnnl::convolution_backward_weights(m_backward_weights_pd);
        m_backward_weights_src = Converted(m_scratchpad, m_forward_pd.src_desc(), m_backward_weights_pd.src_desc());
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
            args[DNNL_ARG_BIAS] = ops::wrap(m_wide_bias);
        }
        m_scratchpad.execute(m_forward, args);
        rearrange_depth_space(m_wide, m_to_output.destination(output), m_input_shape, m_out_channels, m_factor, true);
        m_to_output.finish(output);
    }

    void backward(const std::vector<memory>&, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        rearrange_depth_space(m_diff_wide, m_plain_gradient(diff_output), m_input_shape, m_out_channels, m_factor, false);

        const memory weight_gradient = weights(m_weight->gradient);
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, m_backward_weights_src(m_last_src)},
                                             {DNNL_ARG_DIFF_DST, m_diff_wide},
                                             {DNNL_ARG_DIFF_WEIGHTS, m_diff_weights.destination(weight_gradient)}};
        if (m_bias) args[DNNL_ARG_DIFF_BIAS] = ops::wrap(m_wide_bias_gradient);
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
        return 2 * static_cast<std::int64_t>(m_wide.get_desc().get_size()) + m_src.bytes() + m_forward_weights.bytes() +
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
    ops::Extents m_factor;
    std::int64_t m_out_channels = 0;
    Staged m_to_output;
    Converted m_plain_gradient;
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

// ---- pooling --------------------------------------------------------------------------------

class PoolKernel final : public Kernel {
public:
    PoolKernel(const Node& node, const KernelInputs& in) : Kernel(in), m_needs_diff_input(in.needs_gradient[0]) {
        const ops::PoolAttributes& a = node.pool;
        const auto algorithm = a.kind == ops::PoolKind::Max ? dnnl::algorithm::pooling_max
                                                            : dnnl::algorithm::pooling_avg_exclude_padding;
        const auto strides = to_dims(a.stride);
        const auto kernel = to_dims(a.kernel);
        const auto pad_l = to_dims(a.pad_begin);
        const auto pad_r = to_dims(a.pad_end);
        m_forward_pd = m_scratchpad.fit(dnnl::pooling_forward::primitive_desc(
            dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, algorithm, in.descs[0],
                                        ops::any_desc(node.output_shape, in.descs[0].data_type()), strides, kernel,
                                        pad_l, pad_r),
            Scratchpad::attributes(), cpu_engine()));
        m_forward = dnnl::pooling_forward(m_forward_pd);
        m_output_desc = m_forward_pd.dst_desc();
        if (a.kind == ops::PoolKind::Max) m_workspace = memory(m_forward_pd.workspace_desc(), cpu_engine());
        if (m_needs_diff_input) {
            m_backward_pd = m_scratchpad.fit(dnnl::pooling_backward::primitive_desc(
                dnnl::pooling_backward::desc(algorithm, in.descs[0], m_output_desc, strides, kernel, pad_l, pad_r),
                Scratchpad::attributes(), cpu_engine(), m_forward_pd));
            m_backward = dnnl::pooling_backward(m_backward_pd);
            m_diff_dst = Converted(m_scratchpad, m_output_desc, m_backward_pd.diff_dst_desc());
            m_diff_src = Staged(m_scratchpad, m_backward_pd.diff_src_desc(), in.descs[0]);
        }
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, inputs[0]}, {DNNL_ARG_DST, output}};
        if (m_workspace) args[DNNL_ARG_WORKSPACE] = m_workspace;
        m_scratchpad.execute(m_forward, args);
    }

    void backward(const std::vector<memory>&, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        if (!m_needs_diff_input) return;
        const memory& target = diff_inputs[0];
        std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, m_diff_dst(diff_output)},
                                             {DNNL_ARG_DIFF_SRC, m_diff_src.destination(target)}};
        if (m_workspace) args[DNNL_ARG_WORKSPACE] = m_workspace;
        m_scratchpad.execute(m_backward, args);
        m_diff_src.finish(target);
    }

    std::int64_t bytes() const override {
        return (m_workspace ? static_cast<std::int64_t>(m_workspace.get_desc().get_size()) : 0) + m_diff_dst.bytes() +
               m_diff_src.bytes();
    }

private:
    bool m_needs_diff_input;
    dnnl::pooling_forward::primitive_desc m_forward_pd;
    dnnl::pooling_forward m_forward;
    dnnl::pooling_backward::primitive_desc m_backward_pd;
    dnnl::pooling_backward m_backward;
    memory m_workspace;
    Converted m_diff_dst;
    Staged m_diff_src;
};

// ---- nearest-neighbour upsampling -------------------------------------------------------------

// oneDNN's resampling: forward repeats every input element factor[axis] times along each axis;
// backward sums each input element's factor^rank output gradients. No workspace: nothing is saved.
class UpsampleKernel final : public Kernel {
public:
    UpsampleKernel(const Node& node, const KernelInputs& in) : Kernel(in), m_needs_diff_input(in.needs_gradient[0]) {
        const std::vector<float> factors(node.upsample_factor.begin(), node.upsample_factor.end());
        const auto algorithm = dnnl::algorithm::resampling_nearest;
        m_forward_pd = m_scratchpad.fit(dnnl::resampling_forward::primitive_desc(
            dnnl::resampling_forward::desc(dnnl::prop_kind::forward_training, algorithm, factors, in.descs[0],
                                           ops::any_desc(node.output_shape, in.descs[0].data_type())),
            Scratchpad::attributes(), cpu_engine()));
        m_forward = dnnl::resampling_forward(m_forward_pd);
        m_output_desc = m_forward_pd.dst_desc();
        if (m_needs_diff_input) {
            m_backward_pd = m_scratchpad.fit(dnnl::resampling_backward::primitive_desc(
                dnnl::resampling_backward::desc(algorithm, factors, in.descs[0], m_output_desc),
                Scratchpad::attributes(), cpu_engine(), m_forward_pd));
            m_backward = dnnl::resampling_backward(m_backward_pd);
            m_diff_dst = Converted(m_scratchpad, m_output_desc, m_backward_pd.diff_dst_desc());
            m_diff_src = Staged(m_scratchpad, m_backward_pd.diff_src_desc(), in.descs[0]);
        }
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        m_scratchpad.execute(m_forward, {{DNNL_ARG_SRC, inputs[0]}, {DNNL_ARG_DST, output}});
    }

    void backward(const std::vector<memory>&, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        if (!m_needs_diff_input) return;
        const memory& target = diff_inputs[0];
        m_scratchpad.execute(m_backward, {{DNNL_ARG_DIFF_DST, m_diff_dst(diff_output)},
                                          {DNNL_ARG_DIFF_SRC, m_diff_src.destination(target)}});
        m_diff_src.finish(target);
    }

    std::int64_t bytes() const override { return m_diff_dst.bytes() + m_diff_src.bytes(); }

private:
    bool m_needs_diff_input;
    dnnl::resampling_forward::primitive_desc m_forward_pd;
    dnnl::resampling_forward m_forward;
    dnnl::resampling_backward::primitive_desc m_backward_pd;
    dnnl::resampling_backward m_backward;
    Converted m_diff_dst;
    Staged m_diff_src;
};

// ---- ReLU -----------------------------------------------------------------------------------

class ReluKernel final : public Kernel {
public:
    explicit ReluKernel(const KernelInputs& in) : Kernel(in), m_needs_diff_input(in.needs_gradient[0]) {
        m_forward_pd = m_scratchpad.fit(dnnl::eltwise_forward::primitive_desc(
            dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu, in.descs[0],
                                        0.0f, 0.0f),
            Scratchpad::attributes(), cpu_engine()));
        m_forward = dnnl::eltwise_forward(m_forward_pd);
        m_output_desc = m_forward_pd.dst_desc();
        if (m_needs_diff_input) {
            m_backward_pd = m_scratchpad.fit(dnnl::eltwise_backward::primitive_desc(
                dnnl::eltwise_backward::desc(dnnl::algorithm::eltwise_relu, in.descs[0], in.descs[0], 0.0f, 0.0f),
                Scratchpad::attributes(), cpu_engine(), m_forward_pd));
            m_backward = dnnl::eltwise_backward(m_backward_pd);
            m_diff_dst = Converted(m_scratchpad, m_output_desc, m_backward_pd.diff_dst_desc());
            m_diff_src = Staged(m_scratchpad, m_backward_pd.diff_src_desc(), in.descs[0]);
        }
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        m_scratchpad.execute(m_forward, {{DNNL_ARG_SRC, inputs[0]}, {DNNL_ARG_DST, output}});
    }

    void backward(const std::vector<memory>& inputs, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        if (!m_needs_diff_input) return;
        const memory& target = diff_inputs[0];
        m_scratchpad.execute(m_backward, {{DNNL_ARG_SRC, inputs[0]},
                                          {DNNL_ARG_DIFF_DST, m_diff_dst(diff_output)},
                                          {DNNL_ARG_DIFF_SRC, m_diff_src.destination(target)}});
        m_diff_src.finish(target);
    }

private:
    bool m_needs_diff_input;
    dnnl::eltwise_forward::primitive_desc m_forward_pd;
    dnnl::eltwise_forward m_forward;
    dnnl::eltwise_backward::primitive_desc m_backward_pd;
    dnnl::eltwise_backward m_backward;
    Converted m_diff_dst;
    Staged m_diff_src;
};

// ---- add ------------------------------------------------------------------------------------

class AddKernel final : public Kernel {
public:
    explicit AddKernel(const KernelInputs& in) : Kernel(in), m_needs_gradient(in.needs_gradient) {
        // Both summands in the first one's layout: oneDNN's binary op over two different layouts (a
        // residual shortcut from a pooling in another format) takes a reference path many times slower
        // than one reorder.
        m_second = Converted(m_scratchpad, in.descs[1], in.descs[0]);
        const dnnl::binary::primitive_desc pd = m_scratchpad.fit(dnnl::binary::primitive_desc(
            dnnl::binary::desc(dnnl::algorithm::binary_add, in.descs[0], in.descs[0], in.descs[0]),
            Scratchpad::attributes(), cpu_engine()));
        m_add = dnnl::binary(pd);
        m_output_desc = pd.dst_desc();
        for (std::size_t i = 0; i < 2; ++i) {
            if (m_needs_gradient[i]) m_copies.emplace_back(m_scratchpad, m_output_desc, in.descs[i]);
            else m_copies.emplace_back();
        }
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        m_scratchpad.execute(m_add, {{DNNL_ARG_SRC_0, inputs[0]}, {DNNL_ARG_SRC_1, m_second(inputs[1])}, {DNNL_ARG_DST, output}});
    }

    void backward(const std::vector<memory>&, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        for (std::size_t i = 0; i < 2; ++i) {
            if (m_needs_gradient[i]) m_copies[i](diff_output, diff_inputs[i]);
        }
    }

    std::int64_t bytes() const override { return m_second.bytes(); }

private:
    std::vector<bool> m_needs_gradient;
    Converted m_second;
    dnnl::binary m_add;
    std::vector<Copy> m_copies;
};

// ---- concatenation --------------------------------------------------------------------------

class ConcatKernel final : public Kernel {
public:
    ConcatKernel(const Node& node, const std::vector<Shape>& input_shapes, const KernelInputs& in)
        : Kernel(in), m_needs_gradient(in.needs_gradient) {
        // oneDNN joins inputs of one type: any other is converted to the first input's.
        std::vector<memory::desc> sources;
        for (const memory::desc& desc : in.descs) {
            memory::desc converted = desc;
            if (desc.data_type() != in.descs[0].data_type()) {
                converted = ops::plain_desc(ops::to_shape(desc.dims()), in.descs[0].data_type());
            }
            m_sources.emplace_back(m_scratchpad, desc, converted);
            sources.push_back(converted);
        }
        const dnnl::concat::primitive_desc pd =
            m_scratchpad.fit(dnnl::concat::primitive_desc(1, sources, cpu_engine(), Scratchpad::attributes()));
        m_concat = dnnl::concat(pd);
        m_output_desc = pd.dst_desc();
        // Backward: the gradient goes to a plain buffer once, then each input's channel range is copied out.
        const memory::desc plain = ops::plain_desc(node.output_shape, m_output_desc.data_type());
        m_diff_plain = Converted(m_scratchpad, m_output_desc, plain);
        if (m_output_desc == plain) m_plain_scratch = memory(plain, cpu_engine());
        std::int64_t channel_offset = 0;
        for (std::size_t i = 0; i < input_shapes.size(); ++i) {
            memory::dims offsets(input_shapes[i].size(), 0);
            offsets[1] = channel_offset;
            const memory::desc part = plain.submemory_desc(ops::to_dims(input_shapes[i]), offsets);
            m_parts.push_back(part);
            m_part_copies.emplace_back(m_scratchpad, part, in.descs[i]);
            channel_offset += input_shapes[i][1];
        }
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        std::unordered_map<int, memory> args{{DNNL_ARG_DST, output}};
        for (std::size_t i = 0; i < inputs.size(); ++i) {
            args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = m_sources[i](inputs[i]);
        }
        m_scratchpad.execute(m_concat, args);
    }

    void backward(const std::vector<memory>&, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        const memory plain = m_diff_plain(diff_output);
        for (std::size_t i = 0; i < m_parts.size(); ++i) {
            if (!m_needs_gradient[i]) continue;
            const memory part(m_parts[i], cpu_engine(), plain.get_data_handle());
            m_part_copies[i](part, diff_inputs[i]);
        }
    }

    std::int64_t bytes() const override { return m_diff_plain.bytes(); }

private:
    std::vector<bool> m_needs_gradient;
    std::vector<Converted> m_sources;
    dnnl::concat m_concat;
    Converted m_diff_plain;
    memory m_plain_scratch;
    std::vector<memory::desc> m_parts;
    std::vector<Copy> m_part_copies;
};

// ---- global average pooling -----------------------------------------------------------------

class GlobalAvgPoolKernel final : public Kernel {
public:
    GlobalAvgPoolKernel(const Shape& input_shape, const KernelInputs& in)
        : Kernel(in), m_needs_diff_input(in.needs_gradient[0]) {
        const Shape spatial(input_shape.begin() + 2, input_shape.end());
        Shape pooled_shape{input_shape[0], input_shape[1]};
        pooled_shape.insert(pooled_shape.end(), spatial.size(), 1);
        m_pooled_desc = ops::plain_desc(pooled_shape, in.descs[0].data_type());  // [N, C, 1, 1]: the bytes of [N, C]
        const memory::dims kernel = ops::to_dims(spatial);
        const memory::dims zeros(spatial.size(), 0);
        m_forward_pd = m_scratchpad.fit(dnnl::pooling_forward::primitive_desc(
            dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_avg_include_padding,
                                        in.descs[0], m_pooled_desc, kernel, kernel, zeros, zeros),
            Scratchpad::attributes(), cpu_engine()));
        m_forward = dnnl::pooling_forward(m_forward_pd);
        m_output_desc = ops::plain_desc({input_shape[0], input_shape[1]}, in.descs[0].data_type());
        if (m_needs_diff_input) {
            m_backward_pd = m_scratchpad.fit(dnnl::pooling_backward::primitive_desc(
                dnnl::pooling_backward::desc(dnnl::algorithm::pooling_avg_include_padding, in.descs[0], m_pooled_desc,
                                             kernel, kernel, zeros, zeros),
                Scratchpad::attributes(), cpu_engine(), m_forward_pd));
            m_backward = dnnl::pooling_backward(m_backward_pd);
            m_diff_src = Staged(m_scratchpad, m_backward_pd.diff_src_desc(), in.descs[0]);
        }
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        m_scratchpad.execute(m_forward, {{DNNL_ARG_SRC, inputs[0]}, {DNNL_ARG_DST, pooled(output)}});
    }

    void backward(const std::vector<memory>&, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        if (!m_needs_diff_input) return;
        const memory& target = diff_inputs[0];
        m_scratchpad.execute(m_backward, {{DNNL_ARG_DIFF_DST, pooled(diff_output)}, {DNNL_ARG_DIFF_SRC, m_diff_src.destination(target)}});
        m_diff_src.finish(target);
    }

private:
    memory pooled(const memory& flat) const { return memory(m_pooled_desc, cpu_engine(), flat.get_data_handle()); }

    bool m_needs_diff_input;
    memory::desc m_pooled_desc;
    dnnl::pooling_forward::primitive_desc m_forward_pd;
    dnnl::pooling_forward m_forward;
    dnnl::pooling_backward::primitive_desc m_backward_pd;
    dnnl::pooling_backward m_backward;
    Staged m_diff_src;
};

// ---- dense ----------------------------------------------------------------------------------

class DenseKernel final : public Kernel {
public:
    DenseKernel(const Node& node, const Shape& input_shape, const KernelInputs& in, Parameter* weight, Parameter* bias)
        : Kernel(in), m_weight(weight), m_bias(bias), m_needs_diff_input(in.needs_gradient[0]) {
        const memory::desc src = ops::plain_desc(input_shape);
        const memory::desc weights = ops::plain_desc(weight->value.shape());
        const memory::desc bias_desc = ops::plain_desc(bias->value.shape());
        const memory::desc dst = ops::plain_desc(node.output_shape);
        const dnnl::inner_product_forward::primitive_desc forward_pd = m_scratchpad.fit(dnnl::inner_product_forward::primitive_desc(
            dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src, weights, bias_desc, dst),
            Scratchpad::attributes(), cpu_engine()));
        m_forward = dnnl::inner_product_forward(forward_pd);
        m_output_desc = dst;
        m_src = Converted(m_scratchpad, in.descs[0], src);
        if (m_needs_diff_input) {
            m_backward_data = dnnl::inner_product_backward_data(m_scratchpad.fit(dnnl::inner_product_backward_data::primitive_desc(
                dnnl::inner_product_backward_data::desc(src, weights, dst), Scratchpad::attributes(), cpu_engine(), forward_pd)));
            m_diff_src = Staged(m_scratchpad, src, in.descs[0]);
        }
        m_backward_weights = dnnl::inner_product_backward_weights(m_scratchpad.fit(dnnl::inner_product_backward_weights::primitive_desc(
            dnnl::inner_product_backward_weights::desc(src, weights, bias_desc, dst), Scratchpad::attributes(), cpu_engine(),
            forward_pd)));
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        m_last_src = m_src(inputs[0]);
        m_scratchpad.execute(m_forward, {{DNNL_ARG_SRC, m_last_src},
                                         {DNNL_ARG_WEIGHTS, ops::wrap(m_weight->value)},
                                         {DNNL_ARG_BIAS, ops::wrap(m_bias->value)},
                                         {DNNL_ARG_DST, output}});
    }

    void backward(const std::vector<memory>&, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        m_scratchpad.execute(m_backward_weights, {{DNNL_ARG_SRC, m_last_src},
                                                  {DNNL_ARG_DIFF_DST, diff_output},
                                                  {DNNL_ARG_DIFF_WEIGHTS, ops::wrap(m_weight->gradient)},
                                                  {DNNL_ARG_DIFF_BIAS, ops::wrap(m_bias->gradient)}});
        if (m_needs_diff_input) {
            const memory& target = diff_inputs[0];
            m_scratchpad.execute(m_backward_data, {{DNNL_ARG_DIFF_DST, diff_output},
                                                   {DNNL_ARG_WEIGHTS, ops::wrap(m_weight->value)},
                                                   {DNNL_ARG_DIFF_SRC, m_diff_src.destination(target)}});
            m_diff_src.finish(target);
        }
    }

private:
    Parameter* m_weight;
    Parameter* m_bias;
    bool m_needs_diff_input;
    dnnl::inner_product_forward m_forward;
    dnnl::inner_product_backward_data m_backward_data;
    dnnl::inner_product_backward_weights m_backward_weights;
    Converted m_src;
    Staged m_diff_src;
    memory m_last_src;
};


// ---- tiles: halo buffers and the reductions a simulated core shares with its replica ----------

TileBuffer tile_buffer_of(const memory& m) {
    const memory::desc desc = m.get_desc();
    TileBuffer b;
    b.data = m.get_data_handle();
    TESSERA_ASSERT(desc.data_type() == memory::data_type::f32 || desc.data_type() == memory::data_type::bf16,
                   "tile buffers are f32 or bf16");
    b.dtype = desc.data_type() == memory::data_type::f32 ? DType::F32 : DType::BF16;
    b.shape = ops::to_shape(desc.dims());
    TESSERA_ASSERT(b.shape.size() == 4 || b.shape.size() == 5, "tile buffers are [N, C, (D,) H, W]");
    const ChannelAddressing at(desc);
    b.batch_stride = at.batch_stride;
    b.block_stride = at.block_stride;
    b.block = at.block;
    b.spatial_stride = at.spatial_stride;
    return b;
}

// A desc of `shape` in the same layout family as `like` (nChw16c stays nChw16c at another size).
memory::desc same_layout_desc(const memory::desc& like, const Shape& shape) {
    using tag = memory::format_tag;
    const std::vector<tag> candidates = shape.size() == 5
                                            ? std::vector<tag>{tag::ncdhw, tag::ndhwc, tag::nCdhw16c, tag::nCdhw8c, tag::nCdhw4c}
                                            : std::vector<tag>{tag::nchw, tag::nhwc, tag::nChw16c, tag::nChw8c, tag::nChw4c};
    for (tag candidate : candidates) {
        if (memory::desc(like.dims(), like.data_type(), candidate) == like) {
            return memory::desc(ops::to_dims(shape), like.data_type(), candidate);
        }
    }
    TESSERA_FAIL("a halo buffer needs a plain, channels-last or channel-blocked layout; the producer's layout is none of these");
}

// Calls fn(row, first channel, lanes, pixels, n) for every row of pixels along W of every channel
// group, element (pixel p, lane j) at row[p · lanes + j]: a channel block in blocked layouts (padded
// lanes included; they hold zeros), every channel in channels-last, one channel in plain layouts.
// Rows are walked in memory order, so large tiles stream once.
template <class Element, class Fn>
void for_each_row(const TileBuffer& b, Fn&& fn) {
    const std::int64_t channels = b.channels();
    const bool channels_last = b.block == 1 && b.block_stride == 1 && channels > 1;
    const std::int64_t lanes = channels_last ? channels : b.block;
    const std::int64_t groups = (channels + lanes - 1) / lanes;
    TESSERA_ASSERT(b.spatial_stride[2] == lanes, "rows of a tile are contiguous along W");
    const int rank = b.spatial_rank();
    const std::int64_t depth = rank == 3 ? b.shape[2] : 1, height = b.shape[rank], width = b.shape[rank + 1];
    auto* base = static_cast<Element*>(b.data);
    for (std::int64_t n = 0; n < b.shape[0]; ++n) {
        for (std::int64_t g = 0; g < groups; ++g) {
            for (std::int64_t z = 0; z < depth; ++z) {
                for (std::int64_t y = 0; y < height; ++y) fn(base + b.offset(n, g * lanes, z, y, 0), g * lanes, lanes, width, n);
            }
        }
    }
}

// Channels a row walk can touch: rounded up to whole channel groups (blocked layouts pad to the block).
std::int64_t padded_channels(const TileBuffer& b) {
    const bool channels_last = b.block == 1 && b.block_stride == 1 && b.channels() > 1;
    const std::int64_t lanes = channels_last ? b.channels() : b.block;
    return (b.channels() + lanes - 1) / lanes * lanes;
}

inline float as_float(float v) { return v; }
inline float as_float(BFloat16 v) { return to_float(v); }
inline void assign(float& target, float v) { target = v; }
inline void assign(BFloat16& target, float v) { target = to_bfloat16(v); }

// Per-lane sums over a row: Σx (centre null) or Σ(x − centre)². A fixed lane count lets the compiler
// keep the accumulators in vector registers; rows are short enough for float accumulation, and the
// caller adds the rows in double.
template <int Lanes, class Element>
void add_row_sums(const Element* row, std::int64_t pixels, const float* centre, double* sums) {
    float accumulator[Lanes] = {};
    if (centre) {
        float c[Lanes];
        for (int j = 0; j < Lanes; ++j) c[j] = centre[j];
        for (std::int64_t p = 0; p < pixels; ++p) {
            for (int j = 0; j < Lanes; ++j) {
                const float d = as_float(row[p * Lanes + j]) - c[j];
                accumulator[j] += d * d;
            }
        }
    } else {
        for (std::int64_t p = 0; p < pixels; ++p) {
            for (int j = 0; j < Lanes; ++j) accumulator[j] += as_float(row[p * Lanes + j]);
        }
    }
    for (int j = 0; j < Lanes; ++j) sums[j] += accumulator[j];
}

template <class Element>
void add_row_sums(const Element* row, std::int64_t lanes, std::int64_t pixels, const float* centre, double* sums) {
    switch (lanes) {
        case 16: add_row_sums<16>(row, pixels, centre, sums); return;
        case 8: add_row_sums<8>(row, pixels, centre, sums); return;
        case 4: add_row_sums<4>(row, pixels, centre, sums); return;
        case 1: add_row_sums<1>(row, pixels, centre, sums); return;
        default: break;
    }
    for (std::int64_t j = 0; j < lanes; ++j) {
        float accumulator = 0;
        for (std::int64_t p = 0; p < pixels; ++p) {
            const float v = as_float(row[p * lanes + j]) - (centre ? centre[j] : 0.0f);
            accumulator += centre ? v * v : v;
        }
        sums[j] += accumulator;
    }
}

// row[p, j] −= offset[j] + slope[j] · x[p, j] (batch norm's correction for the replica's statistics).
template <int Lanes, class Element>
void subtract_affine_row(Element* row, const Element* x, std::int64_t pixels, const float* offset, const float* slope) {
    float a[Lanes], b[Lanes];
    for (int j = 0; j < Lanes; ++j) {
        a[j] = offset[j];
        b[j] = slope[j];
    }
    for (std::int64_t p = 0; p < pixels; ++p) {
        for (int j = 0; j < Lanes; ++j) {
            const std::int64_t i = p * Lanes + j;
            assign(row[i], as_float(row[i]) - a[j] - b[j] * as_float(x[i]));
        }
    }
}

template <class Element>
void subtract_affine_row(Element* row, const Element* x, std::int64_t lanes, std::int64_t pixels, const float* offset,
                         const float* slope) {
    switch (lanes) {
        case 16: subtract_affine_row<16>(row, x, pixels, offset, slope); return;
        case 8: subtract_affine_row<8>(row, x, pixels, offset, slope); return;
        case 4: subtract_affine_row<4>(row, x, pixels, offset, slope); return;
        case 1: subtract_affine_row<1>(row, x, pixels, offset, slope); return;
        default: break;
    }
    for (std::int64_t p = 0; p < pixels; ++p) {
        for (std::int64_t j = 0; j < lanes; ++j) {
            const std::int64_t i = p * lanes + j;
            assign(row[i], as_float(row[i]) - offset[j] - slope[j] * as_float(x[i]));
        }
    }
}

template <class Fn>
void with_element_type(DType dtype, Fn&& fn) {
    if (dtype == DType::F32) fn(float{});
    else fn(BFloat16{});
}

// The widened tile before a windowed op on a simulated core: the core's own tile copied into its
// interior here; the rows around it are written by the core mesh from the neighbours' tiles.
class HaloKernel final : public Kernel {
public:
    HaloKernel(const Node& node, const Shape& input_shape, const KernelInputs& in)
        : Kernel(in), m_attributes(node.halo), m_needs_diff_input(in.needs_gradient[0]) {
        m_output_desc = same_layout_desc(in.descs[0], node.output_shape);
        for (std::size_t axis = 0; axis + 2 < input_shape.size(); ++axis) {
            m_covers_input = m_covers_input && m_attributes.interior_extent[axis] == input_shape[axis + 2];
        }
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        const Box origin(m_attributes.interior_offset.size(), 0);
        copy_box(tile_buffer_of(inputs[0]), origin, tile_buffer_of(output), m_attributes.interior_offset,
                 m_attributes.interior_extent);
    }

    void backward(const std::vector<memory>& inputs, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        if (!m_needs_diff_input) return;
        const TileBuffer target = tile_buffer_of(diff_inputs[0]);
        const Box origin(m_attributes.interior_offset.size(), 0);
        // Rows of the tile the op never reads get a zero gradient here (the target may be written, not added).
        if (!m_covers_input) zero_box(target, origin, Box(target.shape.begin() + 2, target.shape.end()));
        (void)inputs;
        copy_box(tile_buffer_of(diff_output), m_attributes.interior_offset, target, origin, m_attributes.interior_extent);
    }

private:
    HaloAttributes m_attributes;
    bool m_needs_diff_input;
    bool m_covers_input = true;
};

// ---- batch normalisation --------------------------------------------------------------------

// running = momentum · running + (1 − momentum) · batch, with the unbiased batch variance (M values per channel).
void update_running_statistics(const float* mean, const float* variance, std::int64_t values_per_channel,
                               double momentum, Tensor& running_mean, Tensor& running_variance) {
    const double bessel = values_per_channel > 1
                              ? static_cast<double>(values_per_channel) / static_cast<double>(values_per_channel - 1)
                              : 1.0;
    float* means = running_mean.data<float>();
    float* variances = running_variance.data<float>();
    for (std::int64_t c = 0; c < running_mean.num_elements(); ++c) {
        means[c] = static_cast<float>(momentum * means[c] + (1 - momentum) * mean[c]);
        variances[c] = static_cast<float>(momentum * variances[c] + (1 - momentum) * variance[c] * bessel);
    }
}

// Batch normalisation. On one executor oneDNN computes the batch statistics and the whole backward pass.
//
// Distributed (a simulated core's tile of a replica): forward (training), Σx then Σ(x − mean)² are
// reduced over the replica's cores (two passes, as oneDNN's own kernel computes them), then oneDNN
// normalises with those statistics. Backward: oneDNN with the statistics held fixed gives γ/σ·g' and
// this core's Σg'·x̂ and Σg' (g' the gradient after the fused ReLU's mask); once those are summed over
// the replica, the terms the statistics contribute are subtracted by hand:
// dx = γ/σ·(g' − (Σg' + x̂·Σg'x̂) / M).
class BatchNormKernel final : public Kernel {
public:
    BatchNormKernel(const Node& node, const KernelInputs& in, Parameter* scale, Parameter* shift, Tensor* running_mean,
                    Tensor* running_variance, bool distributed)
        : Kernel(in), m_attributes(node.batch_norm), m_scale(scale), m_shift(shift), m_running_mean(running_mean),
          m_running_variance(running_variance), m_needs_diff_input(in.needs_gradient[0]), m_distributed(distributed) {
        using flags = dnnl::normalization_flags;
        const auto epsilon = static_cast<float>(m_attributes.epsilon);
        flags normalization = flags::use_scale | flags::use_shift;
        if (m_attributes.fuse_relu) normalization = normalization | flags::fuse_norm_relu;
        const flags training = m_distributed ? normalization | flags::use_global_stats : normalization;
        m_training_pd = m_scratchpad.fit(dnnl::batch_normalization_forward::primitive_desc(
            dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, in.descs[0], epsilon, training),
            Scratchpad::attributes(), cpu_engine()));
        m_training = dnnl::batch_normalization_forward(m_training_pd);
        m_inference = dnnl::batch_normalization_forward(m_scratchpad.fit(dnnl::batch_normalization_forward::primitive_desc(
            dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_inference, in.descs[0], epsilon,
                                                    normalization | flags::use_global_stats),
            Scratchpad::attributes(), cpu_engine())));
        m_output_desc = m_training_pd.dst_desc();
        const std::int64_t channels = node.output_shape[1];
        m_mean = Tensor::zeros({channels}, DType::F32);
        m_variance = Tensor::zeros({channels}, DType::F32);
        if (m_attributes.fuse_relu) m_workspace = memory(m_training_pd.workspace_desc(), cpu_engine());
        m_backward_pd = m_scratchpad.fit(dnnl::batch_normalization_backward::primitive_desc(
            dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, m_output_desc, in.descs[0], epsilon,
                                                     training),
            Scratchpad::attributes(), cpu_engine(), m_training_pd));
        m_backward = dnnl::batch_normalization_backward(m_backward_pd);
        m_diff_src = Staged(m_scratchpad, m_backward_pd.diff_src_desc(), in.descs[0]);
        if (!m_needs_diff_input) m_discarded = memory(m_backward_pd.diff_src_desc(), cpu_engine());
        m_tile_count = num_elements_of(node.output_shape) / channels;
        m_count = m_tile_count;
    }

    int reduction_phases(Pass pass, Mode mode) const override {
        if (!m_distributed) return 0;
        if (pass == Pass::Forward) return mode == Mode::Train ? 2 : 0;
        return 1;
    }

    std::vector<double> partial(Pass pass, int phase, const std::vector<memory>& inputs, const memory&,
                                const memory& diff_output, const std::vector<memory>& diff_inputs) override {
        const std::int64_t channels = m_mean.num_elements();
        if (pass == Pass::Backward) {
            run_backward(inputs[0], diff_output, diff_inputs);
            std::vector<double> sums(static_cast<std::size_t>(2 * channels));
            for (std::int64_t c = 0; c < channels; ++c) {
                sums[static_cast<std::size_t>(c)] = m_scale->gradient.data<float>()[c];            // Σ g'·x̂
                sums[static_cast<std::size_t>(channels + c)] = m_shift->gradient.data<float>()[c];  // Σ g'
            }
            return sums;
        }
        // Phase 0: Σx and the element count; phase 1: Σ(x − mean)².
        const TileBuffer x = tile_buffer_of(inputs[0]);
        const std::int64_t padded = padded_channels(x);
        std::vector<double> sums(static_cast<std::size_t>(padded), 0.0);
        std::vector<float> centre(static_cast<std::size_t>(padded), 0.0f);
        for (std::int64_t c = 0; c < channels; ++c) centre[static_cast<std::size_t>(c)] = m_mean.data<float>()[c];
        with_element_type(x.dtype, [&](auto element) {
            using Element = decltype(element);
            for_each_row<Element>(x, [&](Element* row, std::int64_t first, std::int64_t lanes, std::int64_t pixels, std::int64_t) {
                add_row_sums(row, lanes, pixels, phase == 0 ? nullptr : centre.data() + first, sums.data() + first);
            });
        });
        sums.resize(static_cast<std::size_t>(channels));
        if (phase == 0) sums.push_back(static_cast<double>(m_tile_count));
        return sums;
    }

    void total(Pass pass, int phase, std::span<const double> sums) override {
        const std::int64_t channels = m_mean.num_elements();
        if (pass == Pass::Backward) {
            m_sum_gradient_xhat.assign(sums.begin(), sums.begin() + channels);
            m_sum_gradient.assign(sums.begin() + channels, sums.begin() + 2 * channels);
            return;
        }
        if (phase == 0) {
            m_count = static_cast<std::int64_t>(sums[static_cast<std::size_t>(channels)]);
            for (std::int64_t c = 0; c < channels; ++c) {
                m_mean.data<float>()[c] = static_cast<float>(sums[static_cast<std::size_t>(c)] / static_cast<double>(m_count));
            }
        } else {
            for (std::int64_t c = 0; c < channels; ++c) {
                m_variance.data<float>()[c] =
                    static_cast<float>(sums[static_cast<std::size_t>(c)] / static_cast<double>(m_count));
            }
        }
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode mode) override {
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, inputs[0]},
                                             {DNNL_ARG_DST, output},
                                             {DNNL_ARG_SCALE, ops::wrap(m_scale->value)},
                                             {DNNL_ARG_SHIFT, ops::wrap(m_shift->value)}};
        if (mode == Mode::Eval) {
            args[DNNL_ARG_MEAN] = ops::wrap(*m_running_mean);
            args[DNNL_ARG_VARIANCE] = ops::wrap(*m_running_variance);
            m_scratchpad.execute(m_inference, args);
            return;
        }
        args[DNNL_ARG_MEAN] = ops::wrap(m_mean);
        args[DNNL_ARG_VARIANCE] = ops::wrap(m_variance);
        if (m_workspace) args[DNNL_ARG_WORKSPACE] = m_workspace;
        m_scratchpad.execute(m_training, args);
        cpu_stream().wait();
        // Distributed, the replica's statistics: M counts every core's elements.
        update_running_statistics(m_mean.data<float>(), m_variance.data<float>(), m_count, m_attributes.momentum,
                                  *m_running_mean, *m_running_variance);
    }

    void backward(const std::vector<memory>& inputs, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        if (!m_distributed) {  // the whole backward pass, with the batch statistics' terms
            run_backward(inputs[0], diff_output, diff_inputs);
            return;
        }
        // Distributed: oneDNN ran in the reduction phase; what remains is the statistics' terms.
        if (!m_needs_diff_input) return;
        const TileBuffer x = tile_buffer_of(inputs[0]);
        const TileBuffer dx = tile_buffer_of(diff_inputs[0]);
        TESSERA_ASSERT(x.dtype == dx.dtype && x.block == dx.block && x.batch_stride == dx.batch_stride &&
                           x.block_stride == dx.block_stride && x.spatial_stride == dx.spatial_stride,
                       "batch norm's input and its gradient share a layout");
        // dx −= γ/(σM)·(Σg' + x̂·Σg'x̂) = offset + slope·x, with x̂ = (x − mean)/σ.
        const std::int64_t channels = m_mean.num_elements();
        const std::int64_t padded = padded_channels(x);
        std::vector<float> offset(static_cast<std::size_t>(padded), 0.0f), slope(static_cast<std::size_t>(padded), 0.0f);
        const auto count = static_cast<double>(m_count);
        for (std::int64_t c = 0; c < channels; ++c) {
            const auto i = static_cast<std::size_t>(c);
            const double inverse_sigma = 1.0 / std::sqrt(static_cast<double>(m_variance.data<float>()[c]) + m_attributes.epsilon);
            const double k = m_scale->value.data<float>()[c] * inverse_sigma / count;
            const double per_xhat = k * m_sum_gradient_xhat[i] * inverse_sigma;
            slope[i] = static_cast<float>(per_xhat);
            offset[i] = static_cast<float>(k * m_sum_gradient[i] - per_xhat * m_mean.data<float>()[c]);
        }
        const std::ptrdiff_t shift = static_cast<const char*>(x.data) - static_cast<const char*>(dx.data);
        with_element_type(dx.dtype, [&](auto element) {
            using Element = decltype(element);
            for_each_row<Element>(dx, [&](Element* row, std::int64_t first, std::int64_t lanes, std::int64_t pixels, std::int64_t) {
                const auto* x_row = reinterpret_cast<const Element*>(reinterpret_cast<const char*>(row) + shift);
                subtract_affine_row(row, x_row, lanes, pixels, offset.data() + first, slope.data() + first);
            });
        });
    }

    std::int64_t bytes() const override {
        return (m_workspace ? static_cast<std::int64_t>(m_workspace.get_desc().get_size()) : 0) + m_diff_src.bytes() +
               (m_discarded ? static_cast<std::int64_t>(m_discarded.get_desc().get_size()) : 0);
    }

private:
    void run_backward(const memory& src, const memory& diff_output, const std::vector<memory>& diff_inputs) {
        const memory target = m_needs_diff_input ? diff_inputs[0] : m_discarded;
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src},
                                             {DNNL_ARG_MEAN, ops::wrap(m_mean)},
                                             {DNNL_ARG_VARIANCE, ops::wrap(m_variance)},
                                             {DNNL_ARG_DIFF_DST, diff_output},
                                             {DNNL_ARG_SCALE, ops::wrap(m_scale->value)},
                                             {DNNL_ARG_SHIFT, ops::wrap(m_shift->value)},
                                             {DNNL_ARG_DIFF_SRC, m_needs_diff_input ? m_diff_src.destination(target) : target},
                                             {DNNL_ARG_DIFF_SCALE, ops::wrap(m_scale->gradient)},
                                             {DNNL_ARG_DIFF_SHIFT, ops::wrap(m_shift->gradient)}};
        if (m_workspace) args[DNNL_ARG_WORKSPACE] = m_workspace;
        m_scratchpad.execute(m_backward, args);
        if (m_needs_diff_input) m_diff_src.finish(target);
    }

    ops::BatchNormAttributes m_attributes;
    Parameter* m_scale;
    Parameter* m_shift;
    Tensor* m_running_mean;
    Tensor* m_running_variance;
    bool m_needs_diff_input;
    bool m_distributed;
    std::int64_t m_tile_count = 1;  // elements per channel on this executor
    std::int64_t m_count = 1;       // ... in the statistics (distributed: on the whole replica)
    Tensor m_mean, m_variance;      // [C] f32: the batch's (or, distributed, the replica's) statistics
    std::vector<double> m_sum_gradient, m_sum_gradient_xhat;
    dnnl::batch_normalization_forward::primitive_desc m_training_pd;
    dnnl::batch_normalization_forward m_training;
    dnnl::batch_normalization_forward m_inference;
    dnnl::batch_normalization_backward::primitive_desc m_backward_pd;
    dnnl::batch_normalization_backward m_backward;
    memory m_workspace, m_discarded;
    Staged m_diff_src;
};

// Global average pooling over a replica's tiles: per (n, c) sums of every core's tile are reduced, and
// every core then holds the whole pooled value (the layers after it are replicated).
class DistributedGlobalAvgPoolKernel final : public Kernel {
public:
    DistributedGlobalAvgPoolKernel(const Shape& input_shape, const KernelInputs& in)
        : Kernel(in), m_needs_diff_input(in.needs_gradient[0]), m_batch(input_shape[0]), m_channels(input_shape[1]) {
        m_output_desc = ops::plain_desc({m_batch, m_channels}, in.descs[0].data_type());
        m_tile_count = num_elements_of(input_shape) / (m_batch * m_channels);
        m_pooled.assign(static_cast<std::size_t>(m_batch * m_channels), 0.0);
    }

    int reduction_phases(Pass pass, Mode) const override { return pass == Pass::Forward ? 1 : 0; }

    std::vector<double> partial(Pass, int, const std::vector<memory>& inputs, const memory&, const memory&,
                                const std::vector<memory>&) override {
        const TileBuffer x = tile_buffer_of(inputs[0]);
        const std::int64_t padded = padded_channels(x);
        std::vector<double> padded_sums(static_cast<std::size_t>(m_batch * padded), 0.0);
        with_element_type(x.dtype, [&](auto element) {
            using Element = decltype(element);
            for_each_row<Element>(x, [&](Element* row, std::int64_t first, std::int64_t lanes, std::int64_t pixels, std::int64_t n) {
                add_row_sums(row, lanes, pixels, nullptr, padded_sums.data() + n * padded + first);
            });
        });
        std::vector<double> sums(static_cast<std::size_t>(m_batch * m_channels + 1), 0.0);
        for (std::int64_t n = 0; n < m_batch; ++n) {
            for (std::int64_t c = 0; c < m_channels; ++c) {
                sums[static_cast<std::size_t>(n * m_channels + c)] = padded_sums[static_cast<std::size_t>(n * padded + c)];
            }
        }
        sums.back() = static_cast<double>(m_tile_count);
        return sums;
    }

    void total(Pass, int, std::span<const double> sums) override {
        m_count = static_cast<std::int64_t>(sums.back());
        for (std::size_t i = 0; i < m_pooled.size(); ++i) m_pooled[i] = sums[i] / static_cast<double>(m_count);
    }

    void forward(const std::vector<memory>&, const memory& output, Mode) override {
        const bool f32 = output.get_desc().data_type() == memory::data_type::f32;
        for (std::size_t i = 0; i < m_pooled.size(); ++i) {
            if (f32) static_cast<float*>(output.get_data_handle())[i] = static_cast<float>(m_pooled[i]);
            else static_cast<BFloat16*>(output.get_data_handle())[i] = to_bfloat16(static_cast<float>(m_pooled[i]));
        }
    }

    void backward(const std::vector<memory>&, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        if (!m_needs_diff_input) return;
        const bool f32 = diff_output.get_desc().data_type() == memory::data_type::f32;
        std::vector<float> share(static_cast<std::size_t>(m_batch * m_channels));
        for (std::size_t i = 0; i < share.size(); ++i) {
            const float g = f32 ? static_cast<const float*>(diff_output.get_data_handle())[i]
                                : to_float(static_cast<const BFloat16*>(diff_output.get_data_handle())[i]);
            share[i] = g / static_cast<float>(m_count);
        }
        const TileBuffer dx = tile_buffer_of(diff_inputs[0]);
        const std::int64_t padded = padded_channels(dx);
        std::vector<float> padded_share(static_cast<std::size_t>(m_batch * padded), 0.0f);
        for (std::int64_t n = 0; n < m_batch; ++n) {
            for (std::int64_t c = 0; c < m_channels; ++c) {
                padded_share[static_cast<std::size_t>(n * padded + c)] = share[static_cast<std::size_t>(n * m_channels + c)];
            }
        }
        with_element_type(dx.dtype, [&](auto element) {
            using Element = decltype(element);
            for_each_row<Element>(dx, [&](Element* row, std::int64_t first, std::int64_t lanes, std::int64_t pixels, std::int64_t n) {
                const float* s = padded_share.data() + n * padded + first;
                for (std::int64_t p = 0; p < pixels; ++p) {
                    for (std::int64_t j = 0; j < lanes; ++j) assign(row[p * lanes + j], s[j]);
                }
            });
        });
    }

private:
    bool m_needs_diff_input;
    std::int64_t m_batch, m_channels;
    std::int64_t m_tile_count = 1, m_count = 1;
    std::vector<double> m_pooled;  // [N, C]
};

}  // namespace

// ---- executor -------------------------------------------------------------------------------

struct Executor::Impl {
    Graph graph;
    ExecutorOptions options;
    Scratchpad scratchpad;  // every primitive's, shared by all of them (see Scratchpad)
    std::vector<Parameter> parameters;
    std::vector<Tensor> buffers;
    std::vector<std::unique_ptr<Kernel>> kernels;  // per node; null for the input
    std::vector<memory> outputs;                   // per node, in the kernel's output layout
    std::vector<memory> gradients;                 // per node: d loss / d output, same layout; empty for the input
    // Per node and input slot: where backward writes that input's gradient. Either the producer's gradient
    // itself (the first contribution to arrive) or a scratch buffer that is then added to it.
    std::vector<std::vector<memory>> diff_targets;
    std::vector<std::vector<bool>> diff_is_scratch;
    std::vector<dnnl::binary> accumulate;  // per node: gradient += scratch

    Copy output_to_plain;
    Copy plain_to_output_gradient;
    Copy plain_to_input;
    bool ran_forward_training = false;
    Mode mode = Mode::Eval;
    std::vector<memory> node_inputs;  // scratch: the current node's input memories
    std::vector<NodeTiming> timings;
    // Nodes nothing consumes other than the output (a detector's other heads): no gradient arrives
    // there, so backward starts them at zero.
    std::vector<std::size_t> unconsumed;

    const std::vector<memory>& inputs_of(const Node& node) {
        node_inputs.clear();
        for (int i : node.inputs) node_inputs.push_back(outputs[static_cast<std::size_t>(i)]);
        return node_inputs;
    }


    Impl(const Graph& g, ExecutorOptions o) : graph(g), options(o) {}

    // Rounds a node's value (or its gradient) to f16 and back, in place; any layout (padding included).
    static void round_through_half(std::size_t, const memory& value) {
        TESSERA_ASSERT(value.get_desc().data_type() == memory::data_type::f32, "f16 emulation runs on f32 buffers");
        ops::round_to_half(static_cast<float*>(value.get_data_handle()),
                           static_cast<std::int64_t>(value.get_desc().get_size() / sizeof(float)));
    }
};

Executor::Executor(const Graph& graph, ExecutorOptions options) : m_impl(std::make_unique<Impl>(graph, options)) {
    Impl& impl = *m_impl;
    TESSERA_CHECK(graph.input_node() >= 0, "graph '" << graph.name() << "' has no input");
    TESSERA_CHECK(graph.output_node() != graph.input_node(), "graph '" << graph.name() << "' has no output op");

    for (const ParameterSpec& spec : graph.parameters()) {
        impl.parameters.push_back({spec.name, Tensor::zeros(spec.shape, DType::F32), Tensor::zeros(spec.shape, DType::F32),
                                   spec.apply_weight_decay});
    }
    for (const ParameterSpec& spec : graph.buffers()) impl.buffers.push_back(Tensor::zeros(spec.shape, DType::F32));

    const std::vector<Node>& nodes = graph.nodes();
    const std::size_t count = nodes.size();
    impl.kernels.resize(count);
    impl.timings.resize(count);
    impl.outputs.resize(count);
    impl.gradients.resize(count);
    impl.diff_targets.resize(count);
    impl.diff_is_scratch.resize(count);
    impl.accumulate.resize(count);

    const auto input_id = static_cast<std::size_t>(graph.input_node());
    const memory::desc input_desc = ops::plain_desc(nodes[input_id].output_shape);
    impl.outputs[input_id] = memory(input_desc, cpu_engine());

    auto parameter = [&](const Node& node, std::size_t i) -> Parameter* {
        return i < node.parameters.size() ? &impl.parameters[static_cast<std::size_t>(node.parameters[i])] : nullptr;
    };
    // Data: the graph input, or a simulated core's halo buffer around it. No gradient flows to data, and
    // the first layer reading it keeps f32 in BF16 mode.
    std::vector<bool> is_data(count, false);
    for (const Node& node : nodes) {
        is_data[static_cast<std::size_t>(node.id)] =
            node.kind == OpKind::Input || (node.kind == OpKind::Halo && is_data[static_cast<std::size_t>(node.inputs[0])]);
    }
    for (const Node& node : nodes) {
        if (node.kind == OpKind::Input) continue;
        KernelInputs in;
        in.scratchpad = &impl.scratchpad;
        std::vector<Shape> input_shapes;
        for (int input : node.inputs) {
            in.descs.push_back(impl.outputs[static_cast<std::size_t>(input)].get_desc());
            in.needs_gradient.push_back(!is_data[static_cast<std::size_t>(input)]);
            input_shapes.push_back(nodes[static_cast<std::size_t>(input)].output_shape);
        }
        // Convolutions compute in bf16 in BF16 mode, but the first (it reads the f32 input) stays f32, as
        // do layers with fewer than 16 channels (they cannot fill a bf16 block: oneDNN's bf16 kernels
        // for them, and the batch norms after them, are reference code), and the output layer writes
        // f32 logits. Every other op follows the type of what it is given.
        const bool reads_graph_input = is_data[static_cast<std::size_t>(node.inputs[0])];
        const bool narrow = std::min(input_shapes[0].size() > 1 ? input_shapes[0][1] : 0,
                                     node.output_shape.size() > 1 ? node.output_shape[1] : 0) < 16;
        const memory::data_type compute =
            impl.options.precision == Precision::BF16 && !reads_graph_input && !narrow ? memory::data_type::bf16
                                                                                       : memory::data_type::f32;
        const memory::data_type output_type = node.id == graph.output_node() ? memory::data_type::f32 : compute;
        std::unique_ptr<Kernel> kernel;
        try {
            switch (node.kind) {
                case OpKind::Conv:
                    kernel = make_conv_kernel(node, input_shapes[0], in, parameter(node, 0), parameter(node, 1), compute,
                                              output_type);
                    break;
                case OpKind::ConvTranspose:
                    if (node.conv_transpose.kernel == node.conv_transpose.stride) {
                        kernel = std::make_unique<UpsampleConvKernel>(node, input_shapes[0], in, parameter(node, 0),
                                                                      parameter(node, 1), compute, output_type);
                    } else {
                        kernel = make_conv_transpose_kernel(node, input_shapes[0], in, parameter(node, 0),
                                                            parameter(node, 1), compute, output_type);
                    }
                    break;
                case OpKind::Pool: kernel = std::make_unique<PoolKernel>(node, in); break;
                case OpKind::BatchNorm: {
                    Tensor* running_mean = &impl.buffers[static_cast<std::size_t>(node.buffers[0])];
                    Tensor* running_variance = &impl.buffers[static_cast<std::size_t>(node.buffers[1])];
                    kernel = std::make_unique<BatchNormKernel>(node, in, parameter(node, 0), parameter(node, 1), running_mean,
                                                               running_variance, impl.options.distributed_reductions);
                    break;
                }
                case OpKind::Relu: kernel = std::make_unique<ReluKernel>(in); break;
                case OpKind::Add: kernel = std::make_unique<AddKernel>(in); break;
                case OpKind::Concat: kernel = std::make_unique<ConcatKernel>(node, input_shapes, in); break;
                case OpKind::GlobalAvgPool:
                    if (impl.options.distributed_reductions) {
                        kernel = std::make_unique<DistributedGlobalAvgPoolKernel>(input_shapes[0], in);
                    } else {
                        kernel = std::make_unique<GlobalAvgPoolKernel>(input_shapes[0], in);
                    }
                    break;
                case OpKind::Halo: kernel = std::make_unique<HaloKernel>(node, input_shapes[0], in); break;
                case OpKind::Upsample: kernel = std::make_unique<UpsampleKernel>(node, in); break;
                case OpKind::Dense:
                    kernel = std::make_unique<DenseKernel>(node, input_shapes[0], in, parameter(node, 0), parameter(node, 1));
                    break;
                case OpKind::Input: break;
            }
        } catch (const dnnl::error& error) {
            TESSERA_REJECT("oneDNN cannot compile " << op_name(node.kind) << " '" << node.name << "' for input "
                                                    << shape_to_string(input_shapes[0]) << ": " << error.what());
        }
        const auto id = static_cast<std::size_t>(node.id);
        impl.outputs[id] = memory(kernel->output_desc(), cpu_engine());
        impl.gradients[id] = memory(kernel->output_desc(), cpu_engine());
        impl.accumulate[id] = dnnl::binary(impl.scratchpad.fit(dnnl::binary::primitive_desc(
            dnnl::binary::desc(dnnl::algorithm::binary_add, kernel->output_desc(), kernel->output_desc(),
                               kernel->output_desc()),
            Scratchpad::attributes(), cpu_engine())));
        impl.kernels[id] = std::move(kernel);
    }

    // Backward runs in reverse order: the last consumer of a node writes its gradient first (directly);
    // every later contribution lands in scratch and is added.
    std::vector<bool> written(count, false);
    for (std::size_t n = count; n-- > 0;) {
        const Node& node = nodes[n];
        impl.diff_targets[n].resize(node.inputs.size());
        impl.diff_is_scratch[n].assign(node.inputs.size(), false);
        for (std::size_t slot = 0; slot < node.inputs.size(); ++slot) {
            const auto producer = static_cast<std::size_t>(node.inputs[slot]);
            if (is_data[producer]) continue;
            if (!written[producer]) {
                impl.diff_targets[n][slot] = impl.gradients[producer];
                written[producer] = true;
            } else {
                impl.diff_targets[n][slot] = memory(impl.outputs[producer].get_desc(), cpu_engine());
                impl.diff_is_scratch[n][slot] = true;
            }
        }
    }

    const std::vector<std::vector<int>> consumers = graph.consumers();
    for (std::size_t n = 0; n < count; ++n) {
        if (!is_data[n] && consumers[n].empty() && static_cast<int>(n) != graph.output_node()) impl.unconsumed.push_back(n);
    }

    const auto output_id = static_cast<std::size_t>(graph.output_node());
    const memory::desc output_plain = ops::plain_desc(nodes[output_id].output_shape);
    impl.output_to_plain = Copy(impl.scratchpad, impl.outputs[output_id].get_desc(), output_plain);
    impl.plain_to_output_gradient = Copy(impl.scratchpad, output_plain, impl.gradients[output_id].get_desc());
    impl.plain_to_input = Copy(impl.scratchpad, input_desc, input_desc);
    impl.scratchpad.allocate();
}

Executor::~Executor() = default;


const Graph& Executor::graph() const { return m_impl->graph; }
const ExecutorOptions& Executor::options() const { return m_impl->options; }

std::span<Parameter> Executor::parameters() { return m_impl->parameters; }
std::span<const Parameter> Executor::parameters() const { return m_impl->parameters; }
std::span<Tensor> Executor::buffers() { return m_impl->buffers; }

void Executor::initialize_parameters(std::uint64_t seed) {
    const auto& specs = m_impl->graph.parameters();
    for (std::size_t p = 0; p < specs.size(); ++p) {
        Tensor& value = m_impl->parameters[p].value;
        float* data = value.data<float>();
        const std::int64_t count = value.num_elements();
        switch (specs[p].initializer) {
            case Initializer::Zeros: value.fill(0.0); break;
            case Initializer::Ones: value.fill(1.0); break;
            case Initializer::Constant: value.fill(specs[p].constant); break;
            case Initializer::HeNormal: {
                SeededRandom random(seed, p);  // one stream per parameter: adding a layer leaves the others alone
                const double sigma = std::sqrt(2.0 / static_cast<double>(std::max<std::int64_t>(specs[p].fan_in, 1)));
                for (std::int64_t i = 0; i < count; ++i) data[i] = static_cast<float>(sigma * random.normal());
                break;
            }
        }
        m_impl->parameters[p].gradient.fill(0.0);
    }
    const auto& buffer_specs = m_impl->graph.buffers();
    for (std::size_t b = 0; b < buffer_specs.size(); ++b) {
        m_impl->buffers[b].fill(buffer_specs[b].initializer == Initializer::Ones ? 1.0 : 0.0);
    }
}

Tensor Executor::forward(const Tensor& input, Mode mode) {
    begin_forward(input, mode);
    for (const Node& node : m_impl->graph.nodes()) {
        for (int phase = 0; phase < reduction_phases(node.id, Pass::Forward); ++phase) {
            // One executor: its partial is the total.
            const std::vector<double> sums = reduction_partial(node.id, Pass::Forward, phase);
            reduction_total(node.id, Pass::Forward, phase, sums);
        }
        forward_node(node.id);
    }
    return output();
}

void Executor::backward(const Tensor& output_gradient) {
    begin_backward(output_gradient);
    const auto& nodes = m_impl->graph.nodes();
    for (std::size_t n = nodes.size(); n-- > 0;) {
        const int id = nodes[n].id;
        for (int phase = 0; phase < reduction_phases(id, Pass::Backward); ++phase) {
            const std::vector<double> sums = reduction_partial(id, Pass::Backward, phase);
            reduction_total(id, Pass::Backward, phase, sums);
        }
        backward_node(id);
    }
    cpu_stream().wait();
}

void Executor::begin_forward(const Tensor& input, Mode mode) {
    Impl& impl = *m_impl;
    const std::vector<Node>& nodes = impl.graph.nodes();
    const auto input_id = static_cast<std::size_t>(impl.graph.input_node());
    TESSERA_CHECK(input.shape() == nodes[input_id].output_shape && input.dtype() == DType::F32,
                  "graph '" << impl.graph.name() << "' expects an f32 input of shape "
                            << shape_to_string(nodes[input_id].output_shape) << ", got " << dtype_name(input.dtype())
                            << " " << shape_to_string(input.shape()));
    const Tensor dense_input = input.contiguous();
    impl.plain_to_input(ops::wrap(dense_input), impl.outputs[input_id]);
    impl.mode = mode;
    impl.ran_forward_training = false;
    for (NodeTiming& timing : impl.timings) timing.forward_seconds = 0;
}

void Executor::forward_node(int id) {
    Impl& impl = *m_impl;
    const Node& node = impl.graph.node(id);
    if (node.kind == OpKind::Input) return;
    const auto n = static_cast<std::size_t>(id);
    // oneDNN's CPU stream runs each primitive to completion in this thread, so wall time per node is exact.
    const auto start = std::chrono::steady_clock::now();
    impl.kernels[n]->forward(impl.inputs_of(node), impl.outputs[n], impl.mode);
    if (impl.options.precision == Precision::F16) impl.round_through_half(n, impl.outputs[n]);
    impl.timings[n].forward_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (id == impl.graph.output_node()) impl.ran_forward_training = impl.mode == Mode::Train;
}

Tensor Executor::output() const {
    Impl& impl = *m_impl;
    const auto output_id = static_cast<std::size_t>(impl.graph.output_node());
    Tensor result = Tensor::empty(impl.graph.nodes()[output_id].output_shape, DType::F32);
    impl.output_to_plain(impl.outputs[output_id], ops::wrap(result));
    cpu_stream().wait();
    return result;
}

void Executor::begin_backward(const Tensor& output_gradient) {
    Impl& impl = *m_impl;
    TESSERA_CHECK(impl.ran_forward_training, "backward needs a forward pass in Mode::Train first");
    const std::vector<Node>& nodes = impl.graph.nodes();
    const auto output_id = static_cast<std::size_t>(impl.graph.output_node());
    TESSERA_CHECK(output_gradient.shape() == nodes[output_id].output_shape,
                  "backward expects a gradient of shape " << shape_to_string(nodes[output_id].output_shape) << ", got "
                                                          << shape_to_string(output_gradient.shape()));
    for (std::size_t n : impl.unconsumed) {
        std::memset(impl.gradients[n].get_data_handle(), 0, impl.gradients[n].get_desc().get_size());
    }
    const Tensor dense_gradient = output_gradient.contiguous();
    impl.plain_to_output_gradient(ops::wrap(dense_gradient), impl.gradients[output_id]);
    if (impl.options.precision == Precision::F16) impl.round_through_half(output_id, impl.gradients[output_id]);
    for (NodeTiming& timing : impl.timings) timing.backward_seconds = 0;
}

void Executor::backward_node(int id) {
    Impl& impl = *m_impl;
    const Node& node = impl.graph.node(id);
    if (node.kind == OpKind::Input) return;
    const auto n = static_cast<std::size_t>(id);
    const std::vector<Node>& nodes = impl.graph.nodes();
    const auto start = std::chrono::steady_clock::now();
    impl.kernels[n]->backward(impl.inputs_of(node), impl.outputs[n], impl.gradients[n], impl.diff_targets[n]);
    for (std::size_t slot = 0; slot < node.inputs.size(); ++slot) {
        if (!impl.diff_is_scratch[n][slot]) continue;
        const auto producer = static_cast<std::size_t>(node.inputs[slot]);
        impl.scratchpad.execute(impl.accumulate[producer], {{DNNL_ARG_SRC_0, impl.gradients[producer]},
                                                            {DNNL_ARG_SRC_1, impl.diff_targets[n][slot]},
                                                            {DNNL_ARG_DST, impl.gradients[producer]}});
    }
    if (impl.options.precision == Precision::F16) {  // every gradient this node produced, once complete
        for (int input : node.inputs) {
            const auto producer = static_cast<std::size_t>(input);
            if (nodes[producer].kind != OpKind::Input) impl.round_through_half(producer, impl.gradients[producer]);
        }
    }
    impl.timings[n].backward_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Executor::reduction_phases(int id, Pass pass) const {
    const Node& node = m_impl->graph.node(id);
    if (node.kind == OpKind::Input) return 0;
    return m_impl->kernels[static_cast<std::size_t>(id)]->reduction_phases(pass, m_impl->mode);
}

std::vector<double> Executor::reduction_partial(int id, Pass pass, int phase) {
    Impl& impl = *m_impl;
    const Node& node = impl.graph.node(id);
    TESSERA_CHECK(phase >= 0 && phase < reduction_phases(id, pass),
                  "node '" << node.name << "' has " << reduction_phases(id, pass) << " reduction phases, asked for " << phase);
    const auto n = static_cast<std::size_t>(id);
    const auto start = std::chrono::steady_clock::now();
    std::vector<double> sums =
        impl.kernels[n]->partial(pass, phase, impl.inputs_of(node), impl.outputs[n], impl.gradients[n], impl.diff_targets[n]);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    (pass == Pass::Forward ? impl.timings[n].forward_seconds : impl.timings[n].backward_seconds) += seconds;
    return sums;
}

void Executor::reduction_total(int id, Pass pass, int phase, std::span<const double> total) {
    const Node& node = m_impl->graph.node(id);
    TESSERA_CHECK(phase >= 0 && phase < reduction_phases(id, pass),
                  "node '" << node.name << "' has " << reduction_phases(id, pass) << " reduction phases, got a total for "
                           << phase);
    m_impl->kernels[static_cast<std::size_t>(id)]->total(pass, phase, total);
}

void Executor::gradient_changed(int id) {
    Impl& impl = *m_impl;
    const Node& node = impl.graph.node(id);
    if (impl.options.precision == Precision::F16 && node.kind != OpKind::Input) {
        impl.round_through_half(static_cast<std::size_t>(id), impl.gradients[static_cast<std::size_t>(id)]);
    }
}

TileBuffer Executor::value_buffer(int id) {
    m_impl->graph.node(id);
    return tile_buffer_of(m_impl->outputs[static_cast<std::size_t>(id)]);
}

TileBuffer Executor::gradient_buffer(int id) {
    const Node& node = m_impl->graph.node(id);
    TESSERA_CHECK(node.kind != OpKind::Input, "the graph input has no gradient");
    return tile_buffer_of(m_impl->gradients[static_cast<std::size_t>(id)]);
}

Tensor Executor::activation(int node) const {
    m_impl->graph.node(node);
    return ops::to_plain_tensor(m_impl->outputs[static_cast<std::size_t>(node)]);
}

Tensor Executor::activation_gradient(int node) const {
    const Node& n = m_impl->graph.node(node);
    TESSERA_CHECK(n.kind != OpKind::Input, "the graph input has no gradient (it is data, not a parameter)");
    return ops::to_plain_tensor(m_impl->gradients[static_cast<std::size_t>(node)]);
}

std::span<const NodeTiming> Executor::timings() const { return m_impl->timings; }

std::int64_t Executor::workspace_bytes() const {
    std::int64_t bytes = m_impl->scratchpad.bytes();
    for (std::size_t n = 0; n < m_impl->outputs.size(); ++n) {
        bytes += static_cast<std::int64_t>(m_impl->outputs[n].get_desc().get_size());
        if (m_impl->gradients[n]) bytes += static_cast<std::int64_t>(m_impl->gradients[n].get_desc().get_size());
        if (m_impl->kernels[n]) bytes += m_impl->kernels[n]->bytes();
        for (std::size_t slot = 0; slot < m_impl->diff_targets[n].size(); ++slot) {
            if (m_impl->diff_is_scratch[n][slot]) {
                bytes += static_cast<std::int64_t>(m_impl->diff_targets[n][slot].get_desc().get_size());
            }
        }
    }
    return bytes;
}

MemoryReport Executor::memory_report() const {
    const Impl& impl = *m_impl;
    MemoryReport report;
    for (const Parameter& p : impl.parameters) {
        report.weights += p.value.num_elements() * 4;
        report.weight_gradients += p.gradient.num_elements() * 4;
    }
    for (const Tensor& buffer : impl.buffers) report.weights += buffer.num_elements() * 4;
    report.workspace = impl.scratchpad.bytes();  // the kernels' shared scratchpad (no node's alone)
    const auto& nodes = impl.graph.nodes();
    for (std::size_t n = 0; n < impl.outputs.size(); ++n) {
        const auto value = static_cast<std::int64_t>(impl.outputs[n].get_desc().get_size());
        const std::int64_t gradient = impl.gradients[n] ? static_cast<std::int64_t>(impl.gradients[n].get_desc().get_size()) : 0;
        if (nodes[n].kind == OpKind::Halo) {
            report.halo_buffers += value + gradient;
        } else {
            report.activations += value;
            report.activation_gradients += gradient;
        }
        std::int64_t workspace = impl.kernels[n] ? impl.kernels[n]->bytes() : 0;
        for (std::size_t slot = 0; slot < impl.diff_targets[n].size(); ++slot) {
            if (impl.diff_is_scratch[n][slot]) {
                workspace += static_cast<std::int64_t>(impl.diff_targets[n][slot].get_desc().get_size());
            }
        }
        report.workspace += workspace;
        report.node_bytes.push_back(value + gradient + workspace);
    }
    return report;
}

}  // namespace tessera::graph
