// 1×1 convolutions into a few channels, in 8-pixel register transposes (narrow_pointwise.hpp).
#include "ops/narrow_pointwise.hpp"

#include "ops/tile_rows.hpp"
#include "ops/vector_transpose.hpp"

#include <immintrin.h>

namespace tessera::ops {

namespace {

constexpr std::int64_t k_max_outputs = 4;
constexpr std::int64_t k_max_lanes = 16;

__attribute__((target("avx2,fma"))) inline float lane_sum(__m256 v) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, v);
    float total = 0;
    for (float lane : lanes) total += lane;
    return total;
}

// One row of `pixels` inputs (each `lanes` channels side by side) to `outputs` plain rows `out_stride` apart:
// out[o][p] = bias[o] + Σ_c weights[o·lanes + c]·x[p·lanes + c].
__attribute__((target("avx2,fma"))) void forward_row(const float* x, std::int64_t lanes, std::int64_t pixels, const float* weights,
                                                     const float* bias, std::int64_t outputs, float* out, std::int64_t out_stride) {
    std::int64_t p = 0;
    for (; p + 8 <= pixels; p += 8) {
        __m256 sum[k_max_outputs];
        for (std::int64_t o = 0; o < outputs; ++o) sum[o] = _mm256_set1_ps(bias ? bias[o] : 0.0f);
        for (std::int64_t h = 0; h < lanes; h += 8) {
            __m256 channel[8];
            for (int i = 0; i < 8; ++i) channel[i] = _mm256_loadu_ps(x + (p + i) * lanes + h);
            transpose8(channel);  // channel[c]: channel h + c of the 8 pixels
            for (std::int64_t o = 0; o < outputs; ++o) {
                for (int c = 0; c < 8; ++c) sum[o] = _mm256_fmadd_ps(_mm256_set1_ps(weights[o * lanes + h + c]), channel[c], sum[o]);
            }
        }
        for (std::int64_t o = 0; o < outputs; ++o) _mm256_storeu_ps(out + o * out_stride + p, sum[o]);
    }
    for (; p < pixels; ++p) {
        for (std::int64_t o = 0; o < outputs; ++o) {
            float sum = bias ? bias[o] : 0.0f;
            for (std::int64_t c = 0; c < lanes; ++c) sum += weights[o * lanes + c] * x[p * lanes + c];
            out[o * out_stride + p] = sum;
        }
    }
}

// dx[p·lanes + c] = Σ_o weights[o·lanes + c]·dy[o][p].
__attribute__((target("avx2,fma"))) void input_gradient_row(const float* dy, std::int64_t dy_stride, std::int64_t pixels,
                                                            const float* weights, std::int64_t outputs, std::int64_t lanes, float* dx) {
    std::int64_t p = 0;
    for (; p + 8 <= pixels; p += 8) {
        __m256 gradient[k_max_outputs];
        for (std::int64_t o = 0; o < outputs; ++o) gradient[o] = _mm256_loadu_ps(dy + o * dy_stride + p);
        for (std::int64_t h = 0; h < lanes; h += 8) {
            __m256 channel[8];
            for (int c = 0; c < 8; ++c) {
                channel[c] = _mm256_setzero_ps();
                for (std::int64_t o = 0; o < outputs; ++o) {
                    channel[c] = _mm256_fmadd_ps(_mm256_set1_ps(weights[o * lanes + h + c]), gradient[o], channel[c]);
                }
            }
            transpose8(channel);  // channel[i]: pixel p + i's channels h … h + 7
            for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dx + (p + i) * lanes + h, channel[i]);
        }
    }
    for (; p < pixels; ++p) {
        for (std::int64_t c = 0; c < lanes; ++c) {
            float sum = 0.0f;
            for (std::int64_t o = 0; o < outputs; ++o) sum += weights[o * lanes + c] * dy[o * dy_stride + p];
            dx[p * lanes + c] = sum;
        }
    }
}

// This row's Σ_p dy[o][p]·x[p·lanes + c] into weights_sum[o·lanes + c] and Σ_p dy[o][p] into bias_sum[o].
__attribute__((target("avx2,fma"))) void weights_gradient_row(const float* x, std::int64_t lanes, std::int64_t pixels, const float* dy,
                                                              std::int64_t dy_stride, std::int64_t outputs, float* weights_sum,
                                                              float* bias_sum) {
    __m256 products[k_max_outputs][k_max_lanes];
    __m256 gradients[k_max_outputs];
    for (std::int64_t o = 0; o < outputs; ++o) {
        gradients[o] = _mm256_setzero_ps();
        for (std::int64_t c = 0; c < lanes; ++c) products[o][c] = _mm256_setzero_ps();
    }
    std::int64_t p = 0;
    for (; p + 8 <= pixels; p += 8) {
        __m256 gradient[k_max_outputs];
        for (std::int64_t o = 0; o < outputs; ++o) {
            gradient[o] = _mm256_loadu_ps(dy + o * dy_stride + p);
            gradients[o] = _mm256_add_ps(gradients[o], gradient[o]);
        }
        for (std::int64_t h = 0; h < lanes; h += 8) {
            __m256 channel[8];
            for (int i = 0; i < 8; ++i) channel[i] = _mm256_loadu_ps(x + (p + i) * lanes + h);
            transpose8(channel);
            for (std::int64_t o = 0; o < outputs; ++o) {
                for (int c = 0; c < 8; ++c) products[o][h + c] = _mm256_fmadd_ps(gradient[o], channel[c], products[o][h + c]);
            }
        }
    }
    for (std::int64_t o = 0; o < outputs; ++o) {
        bias_sum[o] = lane_sum(gradients[o]);
        for (std::int64_t c = 0; c < lanes; ++c) weights_sum[o * lanes + c] = lane_sum(products[o][c]);
    }
    for (; p < pixels; ++p) {
        for (std::int64_t o = 0; o < outputs; ++o) {
            const float g = dy[o * dy_stride + p];
            bias_sum[o] += g;
            for (std::int64_t c = 0; c < lanes; ++c) weights_sum[o * lanes + c] += g * x[p * lanes + c];
        }
    }
}

class NarrowPointwiseKernel final : public Kernel {
public:
    NarrowPointwiseKernel(const Shape& input_shape, const Shape& output_shape, const KernelInputs& in, Parameter* weight,
                          Parameter* bias)
        : Kernel(in), m_weight(weight), m_bias(bias), m_needs_diff_input(in.needs_gradient[0]), m_lanes(input_shape[1]),
          m_outputs(output_shape[1]) {
        m_output_desc = plain_desc(output_shape);
        m_plane = num_elements_of(output_shape) / (output_shape[0] * m_outputs);
        m_row_sums.resize(static_cast<std::size_t>(f32_row_shape(in.descs[0])->count * sums_per_row()));
    }

    std::string implementation() const override { return "rows:avx2"; }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode) override {
        const TileBuffer x = tile_buffer_of(inputs[0]);
        const TileRows rows(x);
        const auto* xs = static_cast<const float*>(x.data);
        auto* out = static_cast<float*>(output.get_data_handle());
        const float* weights = m_weight->value.data<float>();
        const float* bias = m_bias ? m_bias->value.data<float>() : nullptr;
#pragma omp parallel for schedule(static)
        for (std::int64_t r = 0; r < rows.count; ++r) {
            forward_row(xs + rows.offset(r), m_lanes, rows.width, weights, bias, m_outputs, out + plain_row(rows, r), m_plane);
        }
    }

    void backward(const std::vector<memory>& inputs, const memory&, const memory& diff_output,
                  const std::vector<memory>& diff_inputs) override {
        const TileBuffer x = tile_buffer_of(inputs[0]);
        const TileRows rows(x);
        const auto* xs = static_cast<const float*>(x.data);
        const auto* dy = static_cast<const float*>(diff_output.get_data_handle());
        const std::int64_t per_row = sums_per_row();
        float* row_sums = m_row_sums.data();
#pragma omp parallel for schedule(static)
        for (std::int64_t r = 0; r < rows.count; ++r) {
            float* sums = row_sums + r * per_row;
            weights_gradient_row(xs + rows.offset(r), m_lanes, rows.width, dy + plain_row(rows, r), m_plane, m_outputs, sums,
                                 sums + m_outputs * m_lanes);
        }
        // Rows in a fixed order, in double: the same bits on any thread count.
        std::vector<double> total(static_cast<std::size_t>(per_row), 0.0);
        for (std::int64_t r = 0; r < rows.count; ++r) {
            for (std::int64_t i = 0; i < per_row; ++i) total[static_cast<std::size_t>(i)] += row_sums[r * per_row + i];
        }
        float* weights_gradient = m_weight->gradient.data<float>();
        for (std::int64_t i = 0; i < m_outputs * m_lanes; ++i) weights_gradient[i] = static_cast<float>(total[static_cast<std::size_t>(i)]);
        if (m_bias) {
            for (std::int64_t o = 0; o < m_outputs; ++o) {
                m_bias->gradient.data<float>()[o] = static_cast<float>(total[static_cast<std::size_t>(m_outputs * m_lanes + o)]);
            }
        }
        if (!m_needs_diff_input) return;
        const TileBuffer dx = tile_buffer_of(diff_inputs[0]);
        const TileRows dx_rows(dx);
        auto* dxs = static_cast<float*>(dx.data);
        const float* weights = m_weight->value.data<float>();
#pragma omp parallel for schedule(static)
        for (std::int64_t r = 0; r < dx_rows.count; ++r) {
            input_gradient_row(dy + plain_row(dx_rows, r), m_plane, dx_rows.width, weights, m_outputs, m_lanes, dxs + dx_rows.offset(r));
        }
    }

    std::int64_t bytes() const override { return static_cast<std::int64_t>(m_row_sums.size() * sizeof(float)); }

private:
    std::int64_t sums_per_row() const { return m_outputs * (m_lanes + 1); }

    // Offset of input row r's first pixel in the plain output's channel 0 (the rows are (n, z, y): one group).
    std::int64_t plain_row(const TileRows& rows, std::int64_t r) const {
        return rows.batch(r) * m_outputs * m_plane + (r % (rows.depth * rows.height)) * rows.width;
    }

    Parameter* m_weight;
    Parameter* m_bias;
    bool m_needs_diff_input;
    std::int64_t m_lanes;    // input channels, side by side in each pixel
    std::int64_t m_outputs;  // ≤ k_max_outputs
    std::int64_t m_plane;    // output elements per (n, channel)
    std::vector<float> m_row_sums;  // [rows, outputs · (lanes + 1)]: each row's weights' and bias's gradient
};

}  // namespace

bool runs_as_narrow_pointwise(const ConvAttributes& a, const Shape& input_shape, const Shape& output_shape, const KernelInputs& in,
                              memory::data_type compute, memory::data_type output_type) {
    if (!vector_row_kernels_enabled()) return false;
    if (compute != memory::data_type::f32 || output_type != memory::data_type::f32 || a.groups != 1) return false;
    for (std::size_t axis = 0; axis < a.kernel.size(); ++axis) {
        if (a.kernel[axis] != 1 || a.stride[axis] != 1 || a.dilation[axis] != 1 || a.pad_begin[axis] != 0 || a.pad_end[axis] != 0) return false;
    }
    if (output_shape[1] > k_max_outputs) return false;
    // Every channel side by side in one row group of 8 or 16 lanes.
    const std::optional<RowShape> rows = f32_row_shape(in.descs[0]);
    return rows && rows->groups == 1 && rows->lanes == input_shape[1] && (rows->lanes == 8 || rows->lanes == 16);
}

std::unique_ptr<Kernel> make_narrow_pointwise_kernel(const Shape& input_shape, const Shape& output_shape, const KernelInputs& in,
                                                     Parameter* weight, Parameter* bias) {
    return std::make_unique<NarrowPointwiseKernel>(input_shape, output_shape, in, weight, bias);
}

}  // namespace tessera::ops
