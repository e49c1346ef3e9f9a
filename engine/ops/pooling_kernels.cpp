// Max and average pooling, and global average pooling (on one executor or over a replica's tiles).
#include "ops/kernels.hpp"
#include "ops/tile_rows.hpp"

#include <immintrin.h>

#include <cstring>

namespace tessera::ops {

namespace {

class PoolKernel final : public Kernel {
public:
    PoolKernel(const PoolAttributes& a, const Shape& output_shape, const KernelInputs& in) : Kernel(in), m_needs_diff_input(in.needs_gradient[0]) {
        const auto algorithm = a.kind == PoolKind::Max ? dnnl::algorithm::pooling_max
                                                            : dnnl::algorithm::pooling_avg_exclude_padding;
        const auto strides = to_dims(a.stride);
        const auto kernel = to_dims(a.kernel);
        const auto pad_l = to_dims(a.pad_begin);
        const auto pad_r = to_dims(a.pad_end);
        m_forward_pd = m_scratchpad.fit(dnnl::pooling_forward::primitive_desc(
            dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, algorithm, in.descs[0],
                                        any_desc(output_shape, in.descs[0].data_type()), strides, kernel,
                                        pad_l, pad_r),
            Scratchpad::attributes(), cpu_engine()));
        m_forward = dnnl::pooling_forward(m_forward_pd);
        m_output_desc = m_forward_pd.dst_desc();
        if (a.kind == PoolKind::Max) m_workspace = memory(m_forward_pd.workspace_desc(), cpu_engine());
        if (m_needs_diff_input) {
            m_backward_pd = m_scratchpad.fit(dnnl::pooling_backward::primitive_desc(
                dnnl::pooling_backward::desc(algorithm, in.descs[0], m_output_desc, strides, kernel, pad_l, pad_r),
                Scratchpad::attributes(), cpu_engine(), m_forward_pd));
            m_backward = dnnl::pooling_backward(m_backward_pd);
            m_diff_dst = Converted(m_scratchpad, m_output_desc, m_backward_pd.diff_dst_desc(), Lifetime::Call);
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

// ---- 2×2(×2) max pooling at stride 2 in vectors of 8 lanes --------------------------------------
//
// The U-Nets' downsampling. oneDNN 2.6 runs it at a fraction of the memory's speed on the narrow
// layers (bm_ops bm_max_pool3d_k2_c8_64: 2.3 ms forward, 5.2 ms with backward, for 8.4 MB read);
// here each output pixel's 8 lanes are the max of the window's 4 (8) vectors, the window position of
// the max kept per lane (first maximum on ties: positions in z, y, x order, replaced only by a greater
// value), and backward writes every input element once — the output gradient where it was the max,
// zero elsewhere. Layouts whose lanes come in eights (channels-last with C a multiple of 8, 8- or
// 16-channel blocks), f32, AVX2; others go to PoolKernel.
struct PoolWindow {
    std::int64_t lanes;                // per pixel of a row
    std::int64_t out_width;            // output pixels per row
    std::array<std::int64_t, 8> taps;  // element offsets of the window's pixels from its first, z-y-x order
    int tap_count;
};

__attribute__((target("avx2"))) void max_pool_row(const float* in, float* out, std::int32_t* argmax, const PoolWindow& w) {
    for (std::int64_t x = 0; x < w.out_width; ++x) {
        const float* window = in + 2 * x * w.lanes;
        for (std::int64_t j = 0; j < w.lanes; j += 8) {
            __m256 best = _mm256_loadu_ps(window + j);
            __m256i position = _mm256_setzero_si256();
            for (int k = 1; k < w.tap_count; ++k) {
                const __m256 v = _mm256_loadu_ps(window + w.taps[static_cast<std::size_t>(k)] + j);
                const __m256 greater = _mm256_cmp_ps(v, best, _CMP_GT_OQ);
                best = _mm256_blendv_ps(best, v, greater);
                position = _mm256_blendv_epi8(position, _mm256_set1_epi32(k), _mm256_castps_si256(greater));
            }
            _mm256_storeu_ps(out + x * w.lanes + j, best);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(argmax + x * w.lanes + j), position);
        }
    }
}

__attribute__((target("avx2"))) void max_pool_gradient_row(const float* dy, const std::int32_t* argmax, float* dx, const PoolWindow& w) {
    for (std::int64_t x = 0; x < w.out_width; ++x) {
        float* window = dx + 2 * x * w.lanes;
        for (std::int64_t j = 0; j < w.lanes; j += 8) {
            const __m256 g = _mm256_loadu_ps(dy + x * w.lanes + j);
            const __m256i position = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(argmax + x * w.lanes + j));
            for (int k = 0; k < w.tap_count; ++k) {
                const __m256 here = _mm256_castsi256_ps(_mm256_cmpeq_epi32(position, _mm256_set1_epi32(k)));
                _mm256_storeu_ps(window + w.taps[static_cast<std::size_t>(k)] + j, _mm256_and_ps(g, here));
            }
        }
    }
}

class VectorMaxPoolKernel final : public Kernel {
public:
    VectorMaxPoolKernel(const Shape& input_shape, const Shape& output_shape, const KernelInputs& in)
        : Kernel(in), m_needs_diff_input(in.needs_gradient[0]) {
        m_output_desc = same_layout_desc(in.descs[0], output_shape);
        m_argmax.resize(static_cast<std::size_t>(m_output_desc.get_size() / sizeof(float)));
        const int rank = static_cast<int>(input_shape.size()) - 2;
        // An odd extent leaves the input's last row (column, plane) outside every window: its gradient is 0.
        for (int axis = 0; axis < rank; ++axis) {
            if (input_shape[static_cast<std::size_t>(axis) + 2] != 2 * output_shape[static_cast<std::size_t>(axis) + 2]) m_uncovered = true;
        }
    }

    // Max pooling with a 2×2(×2) window at stride 2, unpadded, over a layout of 8-lane vectors.
    static bool handles(const PoolAttributes& a, const KernelInputs& in) {
        const std::optional<RowShape> rows = f32_row_shape(in.descs[0]);
        if (a.kind != PoolKind::Max || !vector_row_kernels_enabled() || !rows || rows->lanes % 8 != 0) return false;
        for (std::size_t axis = 0; axis < a.kernel.size(); ++axis) {
            if (a.kernel[axis] != 2 || a.stride[axis] != 2 || a.pad_begin[axis] != 0 || a.pad_end[axis] != 0) return false;
        }
        return true;
    }

    std::string implementation() const override { return "rows:avx2"; }
    // Rows of any strides: the output may be a view inside the halo buffer it alone feeds (the next
    // level's first convolution), the window positions kept densely, row by row.
    bool writes_into_views() const override { return true; }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        const TileBuffer x = tile_buffer_of(inputs[0]), y = tile_buffer_of(output);
        const TileRows out_rows(y);
        const PoolWindow window = window_of(x, out_rows);
        const auto* from = static_cast<const float*>(x.data);
        auto* to = static_cast<float*>(y.data);
        const std::int64_t row_floats = out_rows.lanes * out_rows.width;
#pragma omp parallel for schedule(static)
        for (std::int64_t r = 0; r < out_rows.count; ++r) {
            max_pool_row(from + window_origin(x, out_rows, r), to + out_rows.offset(r), m_argmax.data() + r * row_floats, window);
        }
    }

    void backward(const std::vector<memory>&, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        if (!m_needs_diff_input) return;
        const TileBuffer dy = tile_buffer_of(diff_output), dx = tile_buffer_of(diff_inputs[0]);
        if (m_uncovered) std::memset(dx.data, 0, diff_inputs[0].get_desc().get_size());
        const TileRows out_rows(dy);
        const PoolWindow window = window_of(dx, out_rows);
        const auto* gradient = static_cast<const float*>(dy.data);
        auto* to = static_cast<float*>(dx.data);
        const std::int64_t row_floats = out_rows.lanes * out_rows.width;
#pragma omp parallel for schedule(static)
        for (std::int64_t r = 0; r < out_rows.count; ++r) {
            max_pool_gradient_row(gradient + out_rows.offset(r), m_argmax.data() + r * row_floats, to + window_origin(dx, out_rows, r), window);
        }
    }

    std::int64_t bytes() const override { return static_cast<std::int64_t>(m_argmax.size() * sizeof(std::int32_t)); }

private:
    // The window of output row r starts at input (n, group, 2·z, 2·y, 0).
    static std::int64_t window_origin(const TileBuffer& input, const TileRows& out_rows, std::int64_t r) {
        return input.offset(out_rows.batch(r), out_rows.first_channel(r), 2 * (r / out_rows.height % out_rows.depth),
                            2 * (r % out_rows.height), 0);
    }

    static PoolWindow window_of(const TileBuffer& input, const TileRows& out_rows) {
        PoolWindow w{};
        w.lanes = out_rows.lanes;
        w.out_width = out_rows.width;
        w.tap_count = 0;
        const std::int64_t z_stride = input.spatial_stride[0], y_stride = input.spatial_stride[1], x_stride = input.spatial_stride[2];
        for (int dz = 0; dz < (input.spatial_rank() == 3 ? 2 : 1); ++dz) {
            for (int dy = 0; dy < 2; ++dy) {
                for (int dx = 0; dx < 2; ++dx) w.taps[static_cast<std::size_t>(w.tap_count++)] = dz * z_stride + dy * y_stride + dx * x_stride;
            }
        }
        return w;
    }

    bool m_needs_diff_input;
    bool m_uncovered = false;
    std::vector<std::int32_t> m_argmax;  // per output element, row after row (TileRows): the window position of its max
};

// ---- global average pooling -----------------------------------------------------------------

class GlobalAvgPoolKernel final : public Kernel {
public:
    GlobalAvgPoolKernel(const Shape& input_shape, const KernelInputs& in)
        : Kernel(in), m_needs_diff_input(in.needs_gradient[0]) {
        const Shape spatial(input_shape.begin() + 2, input_shape.end());
        Shape pooled_shape{input_shape[0], input_shape[1]};
        pooled_shape.insert(pooled_shape.end(), spatial.size(), 1);
        m_pooled_desc = plain_desc(pooled_shape, in.descs[0].data_type());  // [N, C, 1, 1]: the bytes of [N, C]
        // The pooled value in a layout oneDNN picks: a plain destination under a blocked source (what a
        // convolution hands over) sends oneDNN 2.6 to its reference kernel, ~100× slower (ResNet-50's
        // [32, 2048, 7, 7]: 50–1100 ms a call on an AVX-512 Xeon). Reordered to plain [N, C] after.
        const memory::desc any_pooled(to_dims(pooled_shape), in.descs[0].data_type(), memory::format_tag::any);
        const memory::dims kernel = to_dims(spatial);
        const memory::dims zeros(spatial.size(), 0);
        m_forward_pd = m_scratchpad.fit(dnnl::pooling_forward::primitive_desc(
            dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_avg_include_padding,
                                        in.descs[0], any_pooled, kernel, kernel, zeros, zeros),
            Scratchpad::attributes(), cpu_engine()));
        m_forward = dnnl::pooling_forward(m_forward_pd);
        m_pooled = Staged(m_scratchpad, m_forward_pd.dst_desc(), m_pooled_desc);
        m_output_desc = plain_desc({input_shape[0], input_shape[1]}, in.descs[0].data_type());
        if (m_needs_diff_input) {
            m_backward_pd = m_scratchpad.fit(dnnl::pooling_backward::primitive_desc(
                dnnl::pooling_backward::desc(dnnl::algorithm::pooling_avg_include_padding, in.descs[0], m_forward_pd.dst_desc(),
                                             kernel, kernel, zeros, zeros),
                Scratchpad::attributes(), cpu_engine(), m_forward_pd));
            m_backward = dnnl::pooling_backward(m_backward_pd);
            m_diff_pooled = Converted(m_scratchpad, m_pooled_desc, m_backward_pd.diff_dst_desc(), Lifetime::Call);
            m_diff_src = Staged(m_scratchpad, m_backward_pd.diff_src_desc(), in.descs[0]);
        }
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        const memory target = pooled(output);
        m_scratchpad.execute(m_forward, {{DNNL_ARG_SRC, inputs[0]}, {DNNL_ARG_DST, m_pooled.destination(target)}});
        m_pooled.finish(target);
    }

    void backward(const std::vector<memory>&, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        if (!m_needs_diff_input) return;
        const memory& target = diff_inputs[0];
        m_scratchpad.execute(m_backward, {{DNNL_ARG_DIFF_DST, m_diff_pooled(pooled(diff_output))},
                                          {DNNL_ARG_DIFF_SRC, m_diff_src.destination(target)}});
        m_diff_src.finish(target);
    }

    std::int64_t bytes() const override { return m_pooled.bytes() + m_diff_pooled.bytes() + m_diff_src.bytes(); }

private:
    memory pooled(const memory& flat) const { return memory(m_pooled_desc, cpu_engine(), flat.get_data_handle()); }

    bool m_needs_diff_input;
    memory::desc m_pooled_desc;
    dnnl::pooling_forward::primitive_desc m_forward_pd;
    dnnl::pooling_forward m_forward;
    dnnl::pooling_backward::primitive_desc m_backward_pd;
    dnnl::pooling_backward m_backward;
    Staged m_pooled;         // the pooled value, oneDNN's layout → plain
    Converted m_diff_pooled; // its gradient, plain → oneDNN's layout
    Staged m_diff_src;
};

// Global average pooling over a replica's tiles: per (n, c) sums of every core's tile are reduced, and
// every core then holds the whole pooled value (the layers after it are replicated).
class DistributedGlobalAvgPoolKernel final : public Kernel {
public:
    DistributedGlobalAvgPoolKernel(const Shape& input_shape, const KernelInputs& in)
        : Kernel(in), m_needs_diff_input(in.needs_gradient[0]), m_batch(input_shape[0]), m_channels(input_shape[1]) {
        m_output_desc = plain_desc({m_batch, m_channels}, in.descs[0].data_type());
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

std::unique_ptr<Kernel> make_pool_kernel(const PoolAttributes& attributes, const Shape& output_shape, const KernelInputs& in) {
    if (VectorMaxPoolKernel::handles(attributes, in)) {
        return std::make_unique<VectorMaxPoolKernel>(to_shape(in.descs[0].dims()), output_shape, in);
    }
    return std::make_unique<PoolKernel>(attributes, output_shape, in);
}

std::unique_ptr<Kernel> make_global_avg_pool_kernel(const Shape& input_shape, const KernelInputs& in, bool distributed) {
    if (distributed) return std::make_unique<DistributedGlobalAvgPoolKernel>(input_shape, in);
    return std::make_unique<GlobalAvgPoolKernel>(input_shape, in);
}

}  // namespace tessera::ops
