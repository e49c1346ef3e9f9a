// ReLU, addition and channel concatenation.
#include "ops/kernels.hpp"

namespace tessera::ops {

namespace {

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
            m_diff_dst = Converted(m_scratchpad, m_output_desc, m_backward_pd.diff_dst_desc(), Lifetime::Call);
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
        m_second = Converted(m_scratchpad, in.descs[1], in.descs[0], Lifetime::Call);
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
    ConcatKernel(const std::vector<Shape>& input_shapes, const Shape& output_shape, const KernelInputs& in)
        : Kernel(in), m_needs_gradient(in.needs_gradient) {
        // oneDNN joins inputs of one type: any other is converted to the first input's.
        std::vector<memory::desc> sources;
        for (const memory::desc& desc : in.descs) {
            memory::desc converted = desc;
            if (desc.data_type() != in.descs[0].data_type()) {
                converted = plain_desc(to_shape(desc.dims()), in.descs[0].data_type());
            }
            m_sources.emplace_back(m_scratchpad, desc, converted, Lifetime::Call);
            sources.push_back(converted);
        }
        const dnnl::concat::primitive_desc pd =
            m_scratchpad.fit(dnnl::concat::primitive_desc(1, sources, cpu_engine(), Scratchpad::attributes()));
        m_concat = dnnl::concat(pd);
        m_output_desc = pd.dst_desc();
        // Backward: each input's channel range of the gradient is copied out. Straight from the gradient's
        // own layout when every range starts on one of its channel blocks (nChw16c with 16-channel inputs:
        // one pass); otherwise the gradient goes to a plain buffer once and the ranges are copied from there.
        m_parts_in_place = parts_fit(m_output_desc, input_shapes);
        const memory::desc plain = plain_desc(output_shape, m_output_desc.data_type());
        if (!m_parts_in_place) m_diff_plain = Converted(m_scratchpad, m_output_desc, plain, Lifetime::Call);
        const memory::desc& whole = m_parts_in_place ? m_output_desc : plain;
        std::int64_t channel_offset = 0;
        for (std::size_t i = 0; i < input_shapes.size(); ++i) {
            memory::dims offsets(input_shapes[i].size(), 0);
            offsets[1] = channel_offset;
            const memory::desc part = whole.submemory_desc(to_dims(input_shapes[i]), offsets);
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
        const memory whole = m_parts_in_place ? diff_output : m_diff_plain(diff_output);
        for (std::size_t i = 0; i < m_parts.size(); ++i) {
            if (!m_needs_gradient[i]) continue;
            const memory part(m_parts[i], cpu_engine(), whole.get_data_handle());
            m_part_copies[i](part, diff_inputs[i]);
        }
    }

    std::int64_t bytes() const override { return m_diff_plain.bytes(); }

private:
    // Whether every input's channel range is a sub-view of `desc` (starts on a channel block): oneDNN's
    // submemory_desc refuses a range that cuts a block.
    static bool parts_fit(const memory::desc& desc, const std::vector<Shape>& input_shapes) {
        const auto& blocking = desc.data.format_desc.blocking;
        std::int64_t block = 1;
        for (int b = 0; b < blocking.inner_nblks; ++b) {
            if (blocking.inner_idxs[b] != 1) return false;  // blocked along another axis
            block *= blocking.inner_blks[b];
        }
        if (desc.data.format_kind != dnnl_blocked) return false;
        std::int64_t channel_offset = 0;
        for (const Shape& shape : input_shapes) {
            if (channel_offset % block != 0) return false;
            channel_offset += shape[1];
        }
        return true;
    }

    bool m_parts_in_place = false;
    std::vector<bool> m_needs_gradient;
    std::vector<Converted> m_sources;
    dnnl::concat m_concat;
    Converted m_diff_plain;
    std::vector<memory::desc> m_parts;
    std::vector<Copy> m_part_copies;
};

}  // namespace

std::unique_ptr<Kernel> make_relu_kernel(const KernelInputs& in) { return std::make_unique<ReluKernel>(in); }

std::unique_ptr<Kernel> make_add_kernel(const KernelInputs& in) { return std::make_unique<AddKernel>(in); }

std::unique_ptr<Kernel> make_concat_kernel(const std::vector<Shape>& input_shapes, const Shape& output_shape,
                                           const KernelInputs& in) {
    return std::make_unique<ConcatKernel>(input_shapes, output_shape, in);
}

}  // namespace tessera::ops
