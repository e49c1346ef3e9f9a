#include "ops/upconvolution.hpp"

#include "ops/fixed_sums.hpp"
#include "ops/row_convolution.hpp"

#include <immintrin.h>

#include <algorithm>
#include <utility>

namespace tessera::ops {

namespace {

constexpr std::int64_t k_lanes = 16;  // floats in an AVX-512 vector

// P input pixels × G output runs of the forward product: acc[p][g] = bias + Σ_ci x[p, ci] · w[g][ci].
template <int P, int G>
__attribute__((target("avx512f"))) void forward_block(const float* x, std::int64_t x_step, const std::int64_t* channel_offset,
                                                      std::int64_t in_channels, const float* weights, const float* bias, float* y,
                                                      std::int64_t y_step, const std::int64_t* run_offset) {
    __m512 acc[P][G];
    for (int g = 0; g < G; ++g) {
        const __m512 start = _mm512_loadu_ps(bias + g * k_lanes);
        for (int p = 0; p < P; ++p) acc[p][g] = start;
    }
    const std::int64_t run_stride = in_channels * k_lanes;
    for (std::int64_t ci = 0; ci < in_channels; ++ci) {
        __m512 w[G];
        for (int g = 0; g < G; ++g) w[g] = _mm512_loadu_ps(weights + g * run_stride + ci * k_lanes);
        const float* channel = x + channel_offset[ci];
        for (int p = 0; p < P; ++p) {
            const __m512 value = _mm512_set1_ps(channel[p * x_step]);
            for (int g = 0; g < G; ++g) acc[p][g] = _mm512_fmadd_ps(value, w[g], acc[p][g]);
        }
    }
    for (int p = 0; p < P; ++p)
        for (int g = 0; g < G; ++g) _mm512_storeu_ps(y + p * y_step + run_offset[g], acc[p][g]);
}

// P input pixels × G runs of 16 input channels of the input gradient: acc[p][g] = Σ_(run, lane) dy · w.
template <int P, int G>
__attribute__((target("avx512f"))) void data_block(const float* dy, std::int64_t dy_step, const std::int64_t* run_offset, std::int64_t runs,
                                                   const float* weights, std::int64_t channel_runs, float* dx, std::int64_t dx_step,
                                                   const std::int64_t* channel_offset) {
    __m512 acc[P][G];
    for (int p = 0; p < P; ++p)
        for (int g = 0; g < G; ++g) acc[p][g] = _mm512_setzero_ps();
    for (std::int64_t run = 0; run < runs; ++run) {
        const float* gradient = dy + run_offset[run];
        for (std::int64_t lane = 0; lane < k_lanes; ++lane) {
            const float* w_lane = weights + ((run * k_lanes + lane) * channel_runs) * k_lanes;
            __m512 w[G];
            for (int g = 0; g < G; ++g) w[g] = _mm512_loadu_ps(w_lane + g * k_lanes);
            for (int p = 0; p < P; ++p) {
                const __m512 value = _mm512_set1_ps(gradient[p * dy_step + lane]);
                for (int g = 0; g < G; ++g) acc[p][g] = _mm512_fmadd_ps(value, w[g], acc[p][g]);
            }
        }
    }
    for (int p = 0; p < P; ++p)
        for (int g = 0; g < G; ++g) _mm512_storeu_ps(dx + p * dx_step + channel_offset[g * k_lanes], acc[p][g]);
}

// C input channels × G output runs of the weights' gradient over one row of `width` pixels, added into
// `partial` ([runs][C_in][16]; the block's first entry at `partial`).
template <int C, int G>
__attribute__((target("avx512f"))) void weights_block(const float* x, std::int64_t x_step, const std::int64_t* channel_offset,
                                                      const float* dy, std::int64_t dy_step, const std::int64_t* run_offset,
                                                      std::int64_t width, float* partial, std::int64_t in_channels) {
    __m512 acc[C][G];
    for (int c = 0; c < C; ++c)
        for (int g = 0; g < G; ++g) acc[c][g] = _mm512_loadu_ps(partial + (g * in_channels + c) * k_lanes);
    for (std::int64_t pixel = 0; pixel < width; ++pixel) {
        __m512 gradient[G];
        for (int g = 0; g < G; ++g) gradient[g] = _mm512_loadu_ps(dy + pixel * dy_step + run_offset[g]);
        const float* values = x + pixel * x_step;
        for (int c = 0; c < C; ++c) {
            const __m512 value = _mm512_set1_ps(values[channel_offset[c]]);
            for (int g = 0; g < G; ++g) acc[c][g] = _mm512_fmadd_ps(value, gradient[g], acc[c][g]);
        }
    }
    for (int c = 0; c < C; ++c)
        for (int g = 0; g < G; ++g) _mm512_storeu_ps(partial + (g * in_channels + c) * k_lanes, acc[c][g]);
}

__attribute__((target("avx512f"))) void add_runs(const float* dy, std::int64_t dy_step, const std::int64_t* run_offset, std::int64_t runs,
                                                 std::int64_t width, float* sums) {
    for (std::int64_t run = 0; run < runs; ++run) {
        __m512 sum = _mm512_loadu_ps(sums + run * k_lanes);
        for (std::int64_t pixel = 0; pixel < width; ++pixel) sum = _mm512_add_ps(sum, _mm512_loadu_ps(dy + pixel * dy_step + run_offset[run]));
        _mm512_storeu_ps(sums + run * k_lanes, sum);
    }
}

// Calls `block(count)` over [0, total) in pieces of the largest allowed count that fits, largest first.
template <class Block>
void in_pieces(std::int64_t total, std::initializer_list<int> counts, Block&& block) {
    std::int64_t begin = 0;
    for (int count : counts) {
        for (; begin + count <= total; begin += count) block(begin, count);
    }
}

}  // namespace

std::optional<UpconvPlan> UpconvPlan::make(const UpconvGeometry& geometry, const ChannelAddressing& input_at,
                                           const ChannelAddressing& output_at) {
    if (!row_convolution_available()) return std::nullopt;
    const std::int64_t taps = geometry.taps(), outputs = taps * geometry.out_channels;
    if (geometry.in_channels % k_lanes != 0 || outputs % k_lanes != 0) return std::nullopt;
    UpconvPlan plan(geometry, input_at, output_at);
    for (std::int64_t ci = 0; ci < geometry.in_channels; ++ci) plan.m_channel_offset.push_back(input_at.channel_offset(ci));
    // The input gradient stores 16 channels at a time.
    for (std::int64_t first = 0; first < geometry.in_channels; first += k_lanes)
        for (std::int64_t lane = 0; lane < k_lanes; ++lane)
            if (plan.m_channel_offset[static_cast<std::size_t>(first + lane)] != plan.m_channel_offset[static_cast<std::size_t>(first)] + lane)
                return std::nullopt;
    // Every output of a pixel, (tap, channel), by where it lies from the pixel's first output; then cut into
    // runs of 16 that must be adjacent floats.
    const auto& stride = output_at.spatial_stride;
    std::vector<std::pair<std::int64_t, std::int64_t>> placed;  // (offset, co·K + tap)
    placed.reserve(static_cast<std::size_t>(outputs));
    for (std::int64_t co = 0; co < geometry.out_channels; ++co) {
        for (std::int64_t tap = 0; tap < taps; ++tap) {
            const std::int64_t kx = tap % geometry.factor[2], ky = (tap / geometry.factor[2]) % geometry.factor[1],
                               kz = tap / (geometry.factor[1] * geometry.factor[2]);
            placed.emplace_back(kz * stride[0] + ky * stride[1] + kx * stride[2] + output_at.channel_offset(co), co * taps + tap);
        }
    }
    std::sort(placed.begin(), placed.end());
    for (std::int64_t first = 0; first < outputs; first += k_lanes) {
        const std::int64_t start = placed[static_cast<std::size_t>(first)].first;
        for (std::int64_t lane = 0; lane < k_lanes; ++lane) {
            const auto& [offset, element] = placed[static_cast<std::size_t>(first + lane)];
            if (offset != start + lane) return std::nullopt;
            plan.m_lane_weight.push_back(element);
        }
        plan.m_run_offset.push_back(start);
    }
    plan.m_input_step = input_at.spatial_stride[2];
    plan.m_output_step = geometry.factor[2] * stride[2];
    return plan;
}

std::int64_t UpconvPlan::input_row(std::int64_t n, std::int64_t z, std::int64_t y) const {
    return n * m_input_at.batch_stride + z * m_input_at.spatial_stride[0] + y * m_input_at.spatial_stride[1];
}

std::int64_t UpconvPlan::output_row(std::int64_t n, std::int64_t z, std::int64_t y) const {
    return n * m_output_at.batch_stride + z * m_geometry.factor[0] * m_output_at.spatial_stride[0] +
           y * m_geometry.factor[1] * m_output_at.spatial_stride[1];
}

std::vector<float> UpconvPlan::run_weights(const float* weights) const {
    const std::int64_t runs = static_cast<std::int64_t>(m_run_offset.size()), in_channels = m_geometry.in_channels;
    const std::int64_t row = m_geometry.out_channels * m_geometry.taps();  // one input channel's weights
    std::vector<float> relaid(static_cast<std::size_t>(runs * in_channels * k_lanes));
    for (std::int64_t run = 0; run < runs; ++run)
        for (std::int64_t ci = 0; ci < in_channels; ++ci)
            for (std::int64_t lane = 0; lane < k_lanes; ++lane)
                relaid[static_cast<std::size_t>((run * in_channels + ci) * k_lanes + lane)] =
                    weights[ci * row + m_lane_weight[static_cast<std::size_t>(run * k_lanes + lane)]];
    return relaid;
}

std::vector<float> UpconvPlan::channel_weights(const float* weights) const {
    const std::int64_t lanes = static_cast<std::int64_t>(m_lane_weight.size()), in_channels = m_geometry.in_channels;
    const std::int64_t row = m_geometry.out_channels * m_geometry.taps();
    std::vector<float> relaid(static_cast<std::size_t>(lanes * in_channels));
    for (std::int64_t lane = 0; lane < lanes; ++lane)
        for (std::int64_t ci = 0; ci < in_channels; ++ci)
            relaid[static_cast<std::size_t>(lane * in_channels + ci)] = weights[ci * row + m_lane_weight[static_cast<std::size_t>(lane)]];
    return relaid;
}

void UpconvPlan::forward(const float* x, const float* weights, const float* bias, float* y) const {
    const std::vector<float> relaid = run_weights(weights);
    const std::int64_t runs = static_cast<std::int64_t>(m_run_offset.size()), in_channels = m_geometry.in_channels;
    std::vector<float> run_bias(static_cast<std::size_t>(runs * k_lanes), 0.0f);
    if (bias != nullptr)
        for (std::size_t lane = 0; lane < run_bias.size(); ++lane) run_bias[lane] = bias[m_lane_weight[lane] / m_geometry.taps()];
    const std::int64_t depth = m_geometry.in_extent[0], height = m_geometry.in_extent[1], width = m_geometry.in_extent[2];
#pragma omp parallel for collapse(3) schedule(static)
    for (std::int64_t n = 0; n < m_geometry.batch; ++n) {
        for (std::int64_t z = 0; z < depth; ++z) {
            for (std::int64_t row = 0; row < height; ++row) {
                const float* x_row = x + input_row(n, z, row);
                float* y_row = y + output_row(n, z, row);
                in_pieces(runs, {4, 2, 1}, [&](std::int64_t run, int run_count) {
                    const float* w = relaid.data() + run * in_channels * k_lanes;
                    const float* b = run_bias.data() + run * k_lanes;
                    const std::int64_t* offsets = m_run_offset.data() + run;
                    in_pieces(width, {6, 1}, [&](std::int64_t pixel, int pixel_count) {
                        const float* xp = x_row + pixel * m_input_step;
                        float* yp = y_row + pixel * m_output_step;
                        const std::int64_t* channels = m_channel_offset.data();
                        const auto call = [&]<int P, int G>() {
                            forward_block<P, G>(xp, m_input_step, channels, in_channels, w, b, yp, m_output_step, offsets);
                        };
                        if (pixel_count == 6) {
                            if (run_count == 4) call.template operator()<6, 4>();
                            else if (run_count == 2) call.template operator()<6, 2>();
                            else call.template operator()<6, 1>();
                        } else {
                            if (run_count == 4) call.template operator()<1, 4>();
                            else if (run_count == 2) call.template operator()<1, 2>();
                            else call.template operator()<1, 1>();
                        }
                    });
                });
            }
        }
    }
}

void UpconvPlan::data_row(const float* dy_row, const float* relaid, std::int64_t channel_runs, float* dx_row) const {
    const std::int64_t runs = static_cast<std::int64_t>(m_run_offset.size()), width = m_geometry.in_extent[2];
    in_pieces(channel_runs, {4, 2, 1}, [&](std::int64_t channel_run, int run_count) {
        const float* w = relaid + channel_run * k_lanes;
        const std::int64_t* channels = m_channel_offset.data() + channel_run * k_lanes;
        in_pieces(width, {run_count == 1 ? 12 : 6, 1}, [&](std::int64_t pixel, int pixel_count) {
            const float* dyp = dy_row + pixel * m_output_step;
            float* dxp = dx_row + pixel * m_input_step;
            const auto call = [&]<int P, int G>() {
                data_block<P, G>(dyp, m_output_step, m_run_offset.data(), runs, w, channel_runs, dxp, m_input_step, channels);
            };
            if (pixel_count == 1) {
                if (run_count == 4) call.template operator()<1, 4>();
                else if (run_count == 2) call.template operator()<1, 2>();
                else call.template operator()<1, 1>();
            } else if (run_count == 4) {
                call.template operator()<6, 4>();
            } else if (run_count == 2) {
                call.template operator()<6, 2>();
            } else {
                call.template operator()<12, 1>();
            }
        });
    });
}

void UpconvPlan::backward(const float* x, const float* dy, const float* weights, float* input_gradient, float* weights_gradient,
                          float* bias_gradient) const {
    const std::int64_t runs = static_cast<std::int64_t>(m_run_offset.size()), in_channels = m_geometry.in_channels;
    const std::vector<float> relaid = input_gradient != nullptr ? channel_weights(weights) : std::vector<float>();
    const std::int64_t channel_runs = in_channels / k_lanes;
    const std::int64_t depth = m_geometry.in_extent[0], height = m_geometry.in_extent[1], width = m_geometry.in_extent[2];
    const std::int64_t items = m_geometry.batch * depth * height;  // input rows
    const std::int64_t weights_size = runs * in_channels * k_lanes, partial_size = weights_size + runs * k_lanes;  // + the bias's
    const std::vector<float> partials = fixed_group_partials(items, partial_size, [&](float* partial, std::int64_t item) {
        const std::int64_t row = item % height, z = (item / height) % depth, n = item / (height * depth);
        const float* x_row = x + input_row(n, z, row);
        const float* dy_row = dy + output_row(n, z, row);
        // Both products of the row while its output gradient is in the cache.
        if (input_gradient != nullptr) data_row(dy_row, relaid.data(), channel_runs, input_gradient + input_row(n, z, row));
        in_pieces(runs, {4, 2, 1}, [&](std::int64_t run, int run_count) {
            in_pieces(in_channels, {6, 4, 2, 1}, [&](std::int64_t ci, int channel_count) {
                float* sums = partial + (run * in_channels + ci) * k_lanes;
                const std::int64_t* channels = m_channel_offset.data() + ci;
                const std::int64_t* offsets = m_run_offset.data() + run;
                const auto call = [&]<int C, int G>() {
                    weights_block<C, G>(x_row, m_input_step, channels, dy_row, m_output_step, offsets, width, sums, in_channels);
                };
                const auto with_runs = [&]<int C>() {
                    if (run_count == 4) call.template operator()<C, 4>();
                    else if (run_count == 2) call.template operator()<C, 2>();
                    else call.template operator()<C, 1>();
                };
                switch (channel_count) {
                case 6: with_runs.template operator()<6>(); break;
                case 4: with_runs.template operator()<4>(); break;
                case 2: with_runs.template operator()<2>(); break;
                default: with_runs.template operator()<1>(); break;
                }
            });
        });
        if (bias_gradient != nullptr) add_runs(dy_row, m_output_step, m_run_offset.data(), runs, width, partial + weights_size);
    });
    // Partial (run, ci, lane) → weight (ci, element of the lane); groups summed in order.
    const std::int64_t row = m_geometry.out_channels * m_geometry.taps();
#pragma omp parallel for schedule(static)
    for (std::int64_t ci = 0; ci < in_channels; ++ci) {
        for (std::int64_t lane = 0; lane < runs * k_lanes; ++lane) {
            const std::int64_t run = lane / k_lanes, entry = (run * in_channels + ci) * k_lanes + lane % k_lanes;
            float sum = 0;
            for (std::int64_t group = 0; group < k_fixed_groups; ++group) sum += partials[static_cast<std::size_t>(group * partial_size + entry)];
            weights_gradient[ci * row + m_lane_weight[static_cast<std::size_t>(lane)]] = sum;
        }
    }
    if (bias_gradient == nullptr) return;
    const std::int64_t taps = m_geometry.taps();
    std::vector<double> bias_sums(static_cast<std::size_t>(m_geometry.out_channels), 0.0);
    for (std::int64_t lane = 0; lane < runs * k_lanes; ++lane)
        for (std::int64_t group = 0; group < k_fixed_groups; ++group)
            bias_sums[static_cast<std::size_t>(m_lane_weight[static_cast<std::size_t>(lane)] / taps)] +=
                partials[static_cast<std::size_t>(group * partial_size + weights_size + lane)];
    for (std::int64_t co = 0; co < m_geometry.out_channels; ++co) bias_gradient[co] = static_cast<float>(bias_sums[static_cast<std::size_t>(co)]);
}

}  // namespace tessera::ops
