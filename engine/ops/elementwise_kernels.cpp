// ReLU, addition and channel concatenation.
#include "ops/kernels.hpp"

#include <cstring>

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

// Channel blocks side by side: where every input and the output are dense 16-channel-blocked tensors of
// one type (what the convolutions around a U-Net's concatenation use), one batch item's channels of
// one input are one contiguous run in both, so joining and splitting are plain memory copies. oneDNN's
// own concat ("simple:any") and its reorder of a channel range ran such copies at 3-4 GB/s on a
// 2-vCPU Xeon (model 207): 9.6 ms for the 2D U-Net's 4×32×256×256 join.
class BlockRuns {
public:
    static constexpr std::int64_t k_block = 16;

    BlockRuns() = default;
    // Empty (applies() false) unless every input is in a dense 16-channel-blocked layout of one type; the
    // output is then the same layout (output_desc).
    BlockRuns(const std::vector<memory::desc>& inputs, const std::vector<Shape>& input_shapes, const Shape& output_shape) {
        if (inputs.empty()) return;
        const memory::data_type type = inputs[0].data_type();
        const auto blocked_desc = [&](const Shape& shape) {
            const auto tag = shape.size() == 5 ? memory::format_tag::nCdhw16c
                                               : shape.size() == 4 ? memory::format_tag::nChw16c : memory::format_tag::nCw16c;
            return memory::desc(to_dims(shape), type, tag);
        };
        if (output_shape.size() < 3) return;
        for (std::size_t i = 0; i < inputs.size(); ++i)
            if (input_shapes[i][1] % k_block != 0 || inputs[i] != blocked_desc(input_shapes[i])) return;
        m_output_desc = blocked_desc(output_shape);
        const std::int64_t element = static_cast<std::int64_t>(memory::data_type_size(type));
        const std::int64_t pixels = num_elements_of(output_shape) / (output_shape[0] * output_shape[1]);  // per channel
        const std::int64_t batch = output_shape[0], output_item = output_shape[1] * pixels * element;
        std::int64_t channel_offset = 0;
        for (std::size_t i = 0; i < input_shapes.size(); ++i) {
            const std::int64_t run = input_shapes[i][1] * pixels * element;
            for (std::int64_t n = 0; n < batch; ++n) {
                m_runs.push_back({i, n * run, n * output_item + channel_offset * pixels * element, run});
            }
            channel_offset += input_shapes[i][1];
        }
    }
    bool applies() const { return !m_runs.empty(); }
    const memory::desc& output_desc() const { return m_output_desc; }

    // Forward: each input's runs into the output; backward: out of the gradient into each input's
    // gradient (those with one). Split into pieces so both threads copy.
    void join(const std::vector<memory>& inputs, const memory& output) const {
        copy(inputs, output, true);
    }
    void split(const memory& gradient, const std::vector<memory>& gradients) const { copy(gradients, gradient, false); }

private:
    struct Run {
        std::size_t input;
        std::int64_t input_offset, output_offset, bytes;
    };
    void copy(const std::vector<memory>& parts, const memory& whole, bool into_whole) const {
        constexpr std::int64_t k_piece = 256 * 1024;
        std::vector<Run> pieces;
        for (const Run& run : m_runs) {
            if (!parts[run.input]) continue;  // no gradient wanted
            for (std::int64_t start = 0; start < run.bytes; start += k_piece)
                pieces.push_back({run.input, run.input_offset + start, run.output_offset + start, std::min(k_piece, run.bytes - start)});
        }
        auto* whole_bytes = static_cast<char*>(whole.get_data_handle());
#pragma omp parallel for schedule(static)
        for (std::size_t p = 0; p < pieces.size(); ++p) {
            const Run& piece = pieces[p];
            auto* part_bytes = static_cast<char*>(parts[piece.input].get_data_handle());
            if (into_whole) {
                std::memcpy(whole_bytes + piece.output_offset, part_bytes + piece.input_offset, static_cast<std::size_t>(piece.bytes));
            } else {
                std::memcpy(part_bytes + piece.input_offset, whole_bytes + piece.output_offset, static_cast<std::size_t>(piece.bytes));
            }
        }
    }
    std::vector<Run> m_runs;
    memory::desc m_output_desc;
};

class ConcatKernel final : public Kernel {
public:
    ConcatKernel(const std::vector<Shape>& input_shapes, const Shape& output_shape, const KernelInputs& in)
        : Kernel(in), m_needs_gradient(in.needs_gradient), m_block_runs(in.descs, input_shapes, output_shape) {
        if (m_block_runs.applies()) {
            m_output_desc = m_block_runs.output_desc();
            return;
        }
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
        // own layout when every range starts on one of its channel blocks; otherwise the gradient goes to
        // a plain buffer once and the ranges are copied from there.
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
        if (m_block_runs.applies()) {
            m_block_runs.join(inputs, output);
            return;
        }
        std::unordered_map<int, memory> args{{DNNL_ARG_DST, output}};
        for (std::size_t i = 0; i < inputs.size(); ++i) {
            args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = m_sources[i](inputs[i]);
        }
        m_scratchpad.execute(m_concat, args);
    }

    void backward(const std::vector<memory>&, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        if (m_block_runs.applies()) {
            std::vector<memory> wanted(diff_inputs.size());
            for (std::size_t i = 0; i < diff_inputs.size(); ++i)
                if (m_needs_gradient[i]) wanted[i] = diff_inputs[i];
            m_block_runs.split(diff_output, wanted);
            return;
        }
        const memory whole = m_parts_in_place ? diff_output : m_diff_plain(diff_output);
        for (std::size_t i = 0; i < m_parts.size(); ++i) {
            if (!m_needs_gradient[i]) continue;
            const memory part(m_parts[i], cpu_engine(), whole.get_data_handle());
            m_part_copies[i](part, diff_inputs[i]);
        }
    }

    std::int64_t bytes() const override { return m_diff_plain.bytes(); }
    std::string implementation() const override { return m_block_runs.applies() ? "runs:blocked" : std::string(); }

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
    BlockRuns m_block_runs;
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
