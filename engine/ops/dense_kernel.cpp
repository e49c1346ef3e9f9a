// Dense layers on [N, F] (a classifier after global pooling).
#include "ops/kernels.hpp"

namespace tessera::ops {

namespace {

class DenseKernel final : public Kernel {
public:
    DenseKernel(const Shape& input_shape, const Shape& output_shape, const KernelInputs& in, Parameter* weight, Parameter* bias)
        : Kernel(in), m_weight(weight), m_bias(bias), m_needs_diff_input(in.needs_gradient[0]) {
        const memory::desc src = plain_desc(input_shape);
        const memory::desc weights = plain_desc(weight->value.shape());
        const memory::desc bias_desc = plain_desc(bias->value.shape());
        const memory::desc dst = plain_desc(output_shape);
        const dnnl::inner_product_forward::primitive_desc forward_pd = m_scratchpad.fit(dnnl::inner_product_forward::primitive_desc(
            dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src, weights, bias_desc, dst),
            Scratchpad::attributes(), cpu_engine()));
        m_forward = dnnl::inner_product_forward(forward_pd);
        m_output_desc = dst;
        m_src = Converted(m_scratchpad, in.descs[0], src, Lifetime::Kept);  // backward reads it
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
                                         {DNNL_ARG_WEIGHTS, wrap(m_weight->value)},
                                         {DNNL_ARG_BIAS, wrap(m_bias->value)},
                                         {DNNL_ARG_DST, output}});
    }

    void backward(const std::vector<memory>&, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        m_scratchpad.execute(m_backward_weights, {{DNNL_ARG_SRC, m_last_src},
                                                  {DNNL_ARG_DIFF_DST, diff_output},
                                                  {DNNL_ARG_DIFF_WEIGHTS, wrap(m_weight->gradient)},
                                                  {DNNL_ARG_DIFF_BIAS, wrap(m_bias->gradient)}});
        if (m_needs_diff_input) {
            const memory& target = diff_inputs[0];
            m_scratchpad.execute(m_backward_data, {{DNNL_ARG_DIFF_DST, diff_output},
                                                   {DNNL_ARG_WEIGHTS, wrap(m_weight->value)},
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

}  // namespace

std::unique_ptr<Kernel> make_dense_kernel(const Shape& input_shape, const Shape& output_shape, const KernelInputs& in,
                                          Parameter* weight, Parameter* bias) {
    return std::make_unique<DenseKernel>(input_shape, output_shape, in, weight, bias);
}

}  // namespace tessera::ops
