// Nearest-neighbour upsampling (an FPN's top-down path).
#include "ops/kernels.hpp"

namespace tessera::ops {

namespace {

// oneDNN's resampling: forward repeats every input element factor[axis] times along each axis;
// backward sums each input element's factor^rank output gradients. No workspace: nothing is saved.
class UpsampleKernel final : public Kernel {
public:
    UpsampleKernel(const Extents& factor, const Shape& output_shape, const KernelInputs& in) : Kernel(in), m_needs_diff_input(in.needs_gradient[0]) {
        const std::vector<float> factors(factor.begin(), factor.end());
        const auto algorithm = dnnl::algorithm::resampling_nearest;
        m_forward_pd = m_scratchpad.fit(dnnl::resampling_forward::primitive_desc(
            dnnl::resampling_forward::desc(dnnl::prop_kind::forward_training, algorithm, factors, in.descs[0],
                                           any_desc(output_shape, in.descs[0].data_type())),
            Scratchpad::attributes(), cpu_engine()));
        m_forward = dnnl::resampling_forward(m_forward_pd);
        m_output_desc = m_forward_pd.dst_desc();
        if (m_needs_diff_input) {
            m_backward_pd = m_scratchpad.fit(dnnl::resampling_backward::primitive_desc(
                dnnl::resampling_backward::desc(algorithm, factors, in.descs[0], m_output_desc),
                Scratchpad::attributes(), cpu_engine(), m_forward_pd));
            m_backward = dnnl::resampling_backward(m_backward_pd);
            m_diff_dst = Converted(m_scratchpad, m_output_desc, m_backward_pd.diff_dst_desc(), Lifetime::Call);
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

}  // namespace

std::unique_ptr<Kernel> make_upsample_kernel(const Extents& factor, const Shape& output_shape, const KernelInputs& in) {
    return std::make_unique<UpsampleKernel>(factor, output_shape, in);
}

}  // namespace tessera::ops
