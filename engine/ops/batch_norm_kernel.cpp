// Batch normalisation: oneDNN on one executor; on a simulated core, statistics and backward sums
// reduced over the replica (make_batch_norm_kernel).
#include "ops/kernels.hpp"
#include "ops/tile_rows.hpp"

#include <cmath>

namespace tessera::ops {

namespace {

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
// The layout batch norm runs in: an input of 16 channels channels-last as the one 16-channel block it
// is byte for byte — oneDNN's blocked kernel (what the first level of a base-16 U-Net ran in before its
// convolutions went channels-last) where its channels-last one took ~1.2 ms more per layer at 256², batch 4.
memory::desc batch_norm_layout(const memory::desc& input, const Shape& shape) {
    if (shape[1] != 16 || !ChannelAddressing::describes(input)) return input;
    const memory::desc blocked = channel_blocked_desc(shape, input.data_type());
    return same_placement(input, blocked) ? blocked : input;
}

class BatchNormKernel final : public Kernel {
public:
    BatchNormKernel(const BatchNormAttributes& attributes, const Shape& output_shape, const KernelInputs& in, Parameter* scale, Parameter* shift, Tensor* running_mean,
                    Tensor* running_variance, bool distributed)
        : Kernel(in), m_attributes(attributes), m_scale(scale), m_shift(shift), m_running_mean(running_mean),
          m_running_variance(running_variance), m_needs_diff_input(in.needs_gradient[0]), m_distributed(distributed) {
        using flags = dnnl::normalization_flags;
        const auto epsilon = static_cast<float>(m_attributes.epsilon);
        flags normalization = flags::use_scale | flags::use_shift;
        if (m_attributes.fuse_relu) normalization = normalization | flags::fuse_norm_relu;
        const flags training = m_distributed ? normalization | flags::use_global_stats : normalization;
        m_layout = batch_norm_layout(in.descs[0], output_shape);
        m_training_pd = m_scratchpad.fit(dnnl::batch_normalization_forward::primitive_desc(
            dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, m_layout, epsilon, training),
            Scratchpad::attributes(), cpu_engine()));
        m_training = dnnl::batch_normalization_forward(m_training_pd);
        m_inference = dnnl::batch_normalization_forward(m_scratchpad.fit(dnnl::batch_normalization_forward::primitive_desc(
            dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_inference, m_layout, epsilon,
                                                    normalization | flags::use_global_stats),
            Scratchpad::attributes(), cpu_engine())));
        // The output in the input's layout where that is the same bytes: the layers around see no change.
        m_output_desc = same_placement(m_training_pd.dst_desc(), in.descs[0]) ? in.descs[0] : m_training_pd.dst_desc();
        const std::int64_t channels = output_shape[1];
        m_mean = Tensor::zeros({channels}, DType::F32);
        m_variance = Tensor::zeros({channels}, DType::F32);
        if (m_attributes.fuse_relu) m_workspace = memory(m_training_pd.workspace_desc(), cpu_engine());
        m_backward_pd = m_scratchpad.fit(dnnl::batch_normalization_backward::primitive_desc(
            dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, m_training_pd.dst_desc(), m_layout, epsilon,
                                                     training),
            Scratchpad::attributes(), cpu_engine(), m_training_pd));
        m_backward = dnnl::batch_normalization_backward(m_backward_pd);
        m_diff_src = Staged(m_scratchpad, m_backward_pd.diff_src_desc(), in.descs[0]);
        if (!m_needs_diff_input) m_discarded = m_scratchpad.call_buffer(m_backward_pd.diff_src_desc());
        m_tile_count = num_elements_of(output_shape) / channels;
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
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, viewed_as(inputs[0], m_layout)},
                                             {DNNL_ARG_DST, viewed_as(output, m_training_pd.dst_desc())},
                                             {DNNL_ARG_SCALE, wrap(m_scale->value)},
                                             {DNNL_ARG_SHIFT, wrap(m_shift->value)}};
        if (mode == Mode::Eval) {
            args[DNNL_ARG_MEAN] = wrap(*m_running_mean);
            args[DNNL_ARG_VARIANCE] = wrap(*m_running_variance);
            m_scratchpad.execute(m_inference, args);
            return;
        }
        args[DNNL_ARG_MEAN] = wrap(m_mean);
        args[DNNL_ARG_VARIANCE] = wrap(m_variance);
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
        return (m_workspace ? static_cast<std::int64_t>(m_workspace.get_desc().get_size()) : 0) + m_diff_src.bytes();
    }

private:
    void run_backward(const memory& src, const memory& diff_output, const std::vector<memory>& diff_inputs) {
        const memory target = m_needs_diff_input ? diff_inputs[0] : m_discarded;
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, viewed_as(src, m_layout)},
                                             {DNNL_ARG_MEAN, wrap(m_mean)},
                                             {DNNL_ARG_VARIANCE, wrap(m_variance)},
                                             {DNNL_ARG_DIFF_DST, viewed_as(diff_output, m_backward_pd.diff_dst_desc())},
                                             {DNNL_ARG_SCALE, wrap(m_scale->value)},
                                             {DNNL_ARG_SHIFT, wrap(m_shift->value)},
                                             {DNNL_ARG_DIFF_SRC, m_needs_diff_input ? m_diff_src.destination(target) : target},
                                             {DNNL_ARG_DIFF_SCALE, wrap(m_scale->gradient)},
                                             {DNNL_ARG_DIFF_SHIFT, wrap(m_shift->gradient)}};
        if (m_workspace) args[DNNL_ARG_WORKSPACE] = m_workspace;
        m_scratchpad.execute(m_backward, args);
        if (m_needs_diff_input) m_diff_src.finish(target);
    }

    BatchNormAttributes m_attributes;
    Parameter* m_scale;
    Parameter* m_shift;
    Tensor* m_running_mean;
    Tensor* m_running_variance;
    bool m_needs_diff_input;
    bool m_distributed;
    std::int64_t m_tile_count = 1;  // elements per channel on this executor
    std::int64_t m_count = 1;       // ... in the statistics (distributed: on the whole replica)
    Tensor m_mean, m_variance;      // [C] f32: the batch's (or, distributed, the replica's) statistics
    memory::desc m_layout;          // the primitives' (batch_norm_layout)
    std::vector<double> m_sum_gradient, m_sum_gradient_xhat;
    dnnl::batch_normalization_forward::primitive_desc m_training_pd;
    dnnl::batch_normalization_forward m_training;
    dnnl::batch_normalization_forward m_inference;
    dnnl::batch_normalization_backward::primitive_desc m_backward_pd;
    dnnl::batch_normalization_backward m_backward;
    memory m_workspace, m_discarded;
    Staged m_diff_src;
};

}  // namespace

std::unique_ptr<Kernel> make_batch_norm_kernel(const BatchNormAttributes& attributes, const Shape& output_shape,
                                               const KernelInputs& in, Parameter* scale, Parameter* shift,
                                               Tensor* running_mean, Tensor* running_variance, bool distributed) {
    return std::make_unique<BatchNormKernel>(attributes, output_shape, in, scale, shift, running_mean, running_variance,
                                             distributed);
}

}  // namespace tessera::ops
