// ReLU, addition and channel concatenation.
#include "ops/kernels.hpp"
#include "ops/tile_rows.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

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

// A concatenation's parts written into a halo buffer's interior, one row: with non-temporal stores of
// whole cache lines where they apply, as the halo buffer is not in cache — a part of 16 channels (a line
// per pixel), or two parts of 8 joined into a line per pixel (the 3D U-Net's last join; 8 channels a part
// at a time stored half lines, 7.6x slower than plain stores). On an AVX-512 CPU, aligned lines.
__attribute__((target("avx512f"))) void stream_pixels_16(const float* source, std::int64_t source_stride, float* target,
                                                       std::int64_t target_stride, std::int64_t pixels) {
    for (std::int64_t x = 0; x < pixels; ++x) _mm512_stream_ps(target + x * target_stride, _mm512_loadu_ps(source + x * source_stride));
}
__attribute__((target("avx2"))) void stream_pixels_8_8(const float* first, std::int64_t first_stride, const float* second,
                                                      std::int64_t second_stride, float* target, std::int64_t pixels) {
    for (std::int64_t x = 0; x < pixels; ++x) {  // both halves of the line one after the other: it leaves whole
        _mm256_stream_ps(target + x * 16, _mm256_loadu_ps(first + x * first_stride));
        _mm256_stream_ps(target + x * 16 + 8, _mm256_loadu_ps(second + x * second_stride));
    }
}
bool streams_lines(const float* target, std::int64_t target_stride) {
    static const bool avx512 = __builtin_cpu_supports("avx512f") != 0;
    return avx512 && reinterpret_cast<std::uintptr_t>(target) % 64 == 0 && target_stride % 16 == 0;
}

// Channels side by side. Where every input is in one dense layout of one type — 16-channel blocks with
// whole blocks (what the convolutions around a U-Net's concatenation use at 16 channels and more), or
// channels-last (the row convolutions and up-convolutions below 16) — the output takes that layout and
// joining and splitting are copies of runs of channels: one run per batch item and input for blocks, one
// per pixel and input channels-last. oneDNN's own concat ("simple:any" on blocks, "ref:any" beside
// a plain input) and its reorders of a channel range ran at 3-4 GB/s on a 2-vCPU Xeon (model 207):
// 9.6 ms for the 2D U-Net's 4×32×256×256 join, 4.9 ms for the 3D one's 8 + 8 channels at 64³.
class ChannelRuns {
public:
    static constexpr std::int64_t k_block = 16;

    ChannelRuns() = default;
    // Empty (applies() false) unless every input is in one such layout; the output is then in it too
    // (output_desc).
    ChannelRuns(const std::vector<memory::desc>& inputs, const std::vector<Shape>& input_shapes, const Shape& output_shape) {
        if (inputs.empty() || (output_shape.size() != 4 && output_shape.size() != 5)) return;
        const memory::data_type type = inputs[0].data_type();
        if (type != memory::data_type::f32 && type != memory::data_type::bf16) return;
        const auto blocked_desc = [&](const Shape& shape) { return channel_blocked_desc(shape, type); };
        const auto all = [&](const auto& layout_of, bool whole_blocks) {
            for (std::size_t i = 0; i < inputs.size(); ++i) {
                if (whole_blocks && input_shapes[i][1] % k_block != 0) return false;
                if (inputs[i] != layout_of(input_shapes[i])) return false;
            }
            return true;
        };
        m_element = static_cast<std::int64_t>(memory::data_type_size(type));
        const std::int64_t pixels = num_elements_of(output_shape) / (output_shape[0] * output_shape[1]);  // per batch item
        const std::int64_t channels = output_shape[1];
        if (all(blocked_desc, true)) {
            m_output_desc = blocked_desc(output_shape);
            m_count = output_shape[0];  // batch items; a run is an input's channels of one
            m_whole_stride = channels * pixels;
            for (const Shape& shape : input_shapes) m_parts.push_back({shape[1] * pixels, 0});
        } else if (all([&](const Shape& shape) { return channels_last_desc(shape, type); }, false)) {
            m_output_desc = channels_last_desc(output_shape, type);
            m_count = output_shape[0] * pixels;  // pixels; a run is an input's channels of one
            m_per_pixel = true;
            m_whole_stride = channels;
            for (const Shape& shape : input_shapes) m_parts.push_back({shape[1], 0});
        } else {
            return;
        }
        std::int64_t offset = 0;
        for (Part& part : m_parts) {
            part.whole_offset = offset;
            offset += part.run;
        }
    }
    bool applies() const { return !m_parts.empty(); }
    const memory::desc& output_desc() const { return m_output_desc; }

    // Forward: each input's runs into the output; backward: out of the gradient into the inputs'
    // gradients (the non-empty ones).
    void join(const std::vector<memory>& inputs, const memory& output) const { copy(inputs, output, true); }
    void split(const memory& gradient, const std::vector<memory>& gradients) const { copy(gradients, gradient, false); }

private:
    struct Part {
        std::int64_t run;           // elements
        std::int64_t whole_offset;  // of the run in the whole's (item or pixel)
    };
    void copy(const std::vector<memory>& parts, const memory& whole, bool into_whole) const {
        if (m_element == 2) {
            copy_elements<std::uint16_t>(parts, whole, into_whole);
        } else {
            copy_elements<float>(parts, whole, into_whole);
        }
    }
    template <class Element>
    void copy_elements(const std::vector<memory>& parts, const memory& whole, bool into_whole) const {
        auto* whole_data = static_cast<Element*>(whole.get_data_handle());
        std::vector<Element*> part_data;
        for (const memory& part : parts) part_data.push_back(part ? static_cast<Element*>(part.get_data_handle()) : nullptr);
        const auto copy_run = [&](std::size_t i, std::int64_t k, std::int64_t begin, std::int64_t length) {
            Element* in_whole = whole_data + k * m_whole_stride + m_parts[i].whole_offset + begin;
            Element* in_part = part_data[i] + k * m_parts[i].run + begin;
            if (into_whole) {
                std::copy_n(in_part, length, in_whole);
            } else {
                std::copy_n(in_whole, length, in_part);
            }
        };
        if (m_per_pixel) {  // pixel by pixel, every input: each output pixel's lines written once
#pragma omp parallel for schedule(dynamic, 2048)
            for (std::int64_t k = 0; k < m_count; ++k) {
                for (std::size_t i = 0; i < m_parts.size(); ++i) {
                    if (!part_data[i]) continue;
                    // Runs of 8 and 16 channels (the U-Nets' own) as fixed-size copies the compiler inlines:
                    // a library call per pixel cost more than the copy.
                    const std::int64_t run = m_parts[i].run;
                    Element* in_whole = whole_data + k * m_whole_stride + m_parts[i].whole_offset;
                    Element* in_part = part_data[i] + k * run;
                    Element* to = into_whole ? in_whole : in_part;
                    const Element* from = into_whole ? in_part : in_whole;
                    if (run == 8) {
                        std::memcpy(to, from, 8 * sizeof(Element));
                    } else if (run == 16) {
                        std::memcpy(to, from, 16 * sizeof(Element));
                    } else {
                        copy_run(i, k, 0, run);
                    }
                }
            }
            return;
        }
        // A batch item's blocks are one long run: in pieces, so that every thread copies.
        constexpr std::int64_t k_piece_bytes = 256 * 1024;
        const std::int64_t piece = std::max<std::int64_t>(1, k_piece_bytes / m_element);
        for (std::size_t i = 0; i < m_parts.size(); ++i) {
            if (!part_data[i]) continue;  // no gradient wanted
            const std::int64_t run = m_parts[i].run, pieces = (run + piece - 1) / piece;
#pragma omp parallel for collapse(2) schedule(static)
            for (std::int64_t k = 0; k < m_count; ++k)
                for (std::int64_t p = 0; p < pieces; ++p) copy_run(i, k, p * piece, std::min(piece, run - p * piece));
        }
    }
    std::vector<Part> m_parts;
    std::int64_t m_count = 0, m_whole_stride = 0, m_element = 4;
    bool m_per_pixel = false;
    memory::desc m_output_desc;
};

class ConcatKernel final : public Kernel {
public:
    ConcatKernel(const std::vector<Shape>& input_shapes, const Shape& output_shape, const KernelInputs& in)
        : Kernel(in), m_needs_gradient(in.needs_gradient), m_left(input_shapes.size(), false), m_input_shapes(input_shapes),
          m_channel_runs(in.descs, input_shapes, output_shape) {
        if (m_channel_runs.applies()) {
            m_output_desc = m_channel_runs.output_desc();
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

    void forward(const std::vector<memory>& given, const memory& output, Mode) override {
        std::vector<memory> inputs = given;  // an input left in place: none, its channels skipped
        for (std::size_t i = 0; i < inputs.size(); ++i)
            if (m_left[i]) inputs[i] = memory();
        if (m_channel_runs.applies() && output.get_desc() != m_output_desc) {
            in_place(inputs, output, true);
            return;
        }
        if (m_channel_runs.applies()) {
            m_channel_runs.join(inputs, output);
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
        if (m_channel_runs.applies() && diff_output.get_desc() != m_output_desc) {
            in_place(diff_inputs, diff_output, false);
            return;
        }
        if (m_channel_runs.applies()) {
            std::vector<memory> wanted(diff_inputs.size());
            for (std::size_t i = 0; i < diff_inputs.size(); ++i)
                if (m_needs_gradient[i]) wanted[i] = diff_inputs[i];
            m_channel_runs.split(diff_output, wanted);
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
    std::string implementation() const override { return m_channel_runs.applies() ? "channel runs" : std::string(); }
    bool writes_into_views() const override { return m_channel_runs.applies(); }
    // Channel runs skip an input without memory: its producer writes its channels (and reads their gradient)
    // in place. oneDNN's concatenation joins every input.
    bool leaves_inputs_in_place() const override { return m_channel_runs.applies(); }
    void leave_input_in_place(std::size_t slot) override {
        TESSERA_ASSERT(m_channel_runs.applies(), "only channel runs leave an input's channels in place");
        m_left[slot] = true;
        m_needs_gradient[slot] = false;
    }

private:
    // The output (or its gradient) inside a wider buffer — the interior of the halo buffer the output alone
    // feeds (graph::Executor places it there): each input's channels copied row by row into (or out of)
    // their place in it.
    void in_place(const std::vector<memory>& parts, const memory& whole, bool into_whole) const {
        const TileBuffer whole_buffer = tile_buffer_of(whole);
        if (whole_buffer.block == 1) {
            with_element_type(whole_buffer.dtype, [&](auto element) { join_pixels<decltype(element)>(parts, whole_buffer, into_whole); });
            return;
        }
        std::int64_t first = 0;
        for (std::size_t i = 0; i < parts.size(); ++i) {
            const Shape& shape = m_input_shapes[i];
            if (into_whole ? !m_left[i] : m_needs_gradient[i]) {
                const TileBuffer slice = channel_slice(whole_buffer, first, shape[1]);
                const Box origin(shape.size() - 2, 0), extent(shape.begin() + 2, shape.end());
                if (into_whole) {
                    copy_box(tile_buffer_of(parts[i]), origin, slice, origin, extent);
                } else {
                    copy_box(slice, origin, tile_buffer_of(parts[i]), origin, extent);
                }
            }
            first += shape[1];
        }
    }

    // Channels-last, row by row, each input's channels in turn while the row's lines are in cache: input
    // by input over the whole tile, every line was written twice in halves from memory (the 3D U-Net's
    // last 8 + 8 channels, summed over its 8 cores' tiles, one thread: 5.1 against 2.9 ms a step), and
    // read twice in halves for the gradient. Into the halo buffer with non-temporal stores where they apply
    // (stream_pixels_*): 2D 16 + 16 channels at 64 × 256, batch 4, one thread, 0.93 against 1.58–1.65 ms.
    template <class Element>
    void join_pixels(const std::vector<memory>& parts, const TileBuffer& whole, bool into_whole) const {
        std::vector<TileBuffer> part_buffers;  // an input without a gradient: none, and its channels skipped
        for (std::size_t i = 0; i < parts.size(); ++i)
            part_buffers.push_back((into_whole ? !m_left[i] : m_needs_gradient[i]) ? tile_buffer_of(parts[i]) : TileBuffer{.shape = m_input_shapes[i]});
        const Shape& shape = m_input_shapes[0];
        const bool volume = shape.size() == 5;
        const std::int64_t batch = shape[0], depth = volume ? shape[2] : 1, height = shape[shape.size() - 2], width = shape.back();
        const std::int64_t pixel_stride = whole.spatial_stride[2];
#pragma omp parallel for collapse(3) schedule(static)
        for (std::int64_t n = 0; n < batch; ++n) {
            for (std::int64_t z = 0; z < depth; ++z) {
                for (std::int64_t y = 0; y < height; ++y) {
                    Element* row = static_cast<Element*>(whole.data) + whole.offset(n, 0, z, y, 0);
                    if constexpr (std::is_same_v<Element, float>) {
                        if (into_whole && part_buffers.size() == 2 && part_buffers[0].data && part_buffers[1].data &&
                            part_buffers[0].channels() == 8 && part_buffers[1].channels() == 8 &&
                            pixel_stride == 16 && streams_lines(row, pixel_stride)) {
                            const TileBuffer &a = part_buffers[0], &b = part_buffers[1];
                            stream_pixels_8_8(static_cast<const float*>(a.data) + a.offset(n, 0, z, y, 0), a.spatial_stride[2],
                                              static_cast<const float*>(b.data) + b.offset(n, 0, z, y, 0), b.spatial_stride[2], row, width);
                            continue;
                        }
                    }
                    std::int64_t first = 0;
                    for (std::size_t i = 0; i < part_buffers.size(); ++i) {
                        const TileBuffer& part = part_buffers[i];
                        const std::int64_t channels = part.channels();
                        if (!part.data) {  // no gradient wanted, or written in place
                            first += channels;
                            continue;
                        }
                        auto* in_part = static_cast<Element*>(part.data) + part.offset(n, 0, z, y, 0);
                        if (!into_whole) {
                            if (m_needs_gradient[i]) copy_pixels(row + first, pixel_stride, in_part, part.spatial_stride[2], width, channels);
                        } else if constexpr (std::is_same_v<Element, float>) {
                            if (channels == 16 && streams_lines(row + first, pixel_stride)) {
                                stream_pixels_16(in_part, part.spatial_stride[2], row + first, pixel_stride, width);
                            } else {
                                copy_pixels(in_part, part.spatial_stride[2], row + first, pixel_stride, width, channels);
                            }
                        } else {
                            copy_pixels(in_part, part.spatial_stride[2], row + first, pixel_stride, width, channels);
                        }
                        first += channels;
                    }
                }
            }
        }
        if (into_whole) _mm_sfence();  // stream_pixels' stores reach memory before another host thread reads them
    }

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
    std::vector<bool> m_needs_gradient;  // and not left in place
    std::vector<bool> m_left;            // inputs whose producers write their channels in place (leave_input_in_place)
    std::vector<Shape> m_input_shapes;
    ChannelRuns m_channel_runs;
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
