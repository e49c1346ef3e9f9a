#include "ops/row_convolution.hpp"

#include "core/error.hpp"
#include "ops/dnnl_support.hpp"
#include "ops/fixed_sums.hpp"
#include "ops/stolen_ranges.hpp"
#include "ops/vector_transpose.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace tessera::ops {

namespace {

constexpr std::int64_t k_lanes = 16;        // floats in an AVX-512 vector
constexpr std::int64_t k_block = 8;         // output channels a pass accumulates together
constexpr std::int64_t k_gradient_rows = 8; // output rows a weights-gradient item covers at 64 positions (8: ~5 % faster than 4)

std::int64_t round_up(std::int64_t value, std::int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

int taps_of(int rank) { return rank == 3 ? 27 : 9; }

// Lanes of a 16-wide chunk starting at `start` that fall before `end`.
__mmask16 lanes_before(std::int64_t start, std::int64_t end) {
    const std::int64_t count = std::clamp<std::int64_t>(end - start, 0, k_lanes);
    return static_cast<__mmask16>(count == k_lanes ? 0xFFFF : (1u << count) - 1u);
}

// Where one output row of a block of 8 channels goes: channel j, position x at
// base + x · position_stride + j · channel_stride (plain: stride 1 along x; channels-last: 1 along j).
struct OutputRows {
    float* base = nullptr;
    std::int64_t position_stride = 1, channel_stride = 1;
};

// Positions x0 … x0 + 16·Vectors − 1 of one output row (n, z, y) of 8 channels: 8·Vectors accumulators,
// Vectors shifted loads of each input row per tap, one broadcast weight per channel and tap.
template <int Vectors>
__attribute__((target("avx512f"))) inline void forward_chunk(const PaddedRows& input, const float* relaid_block, const float* bias_block,
                                                             int taps_z, std::int64_t n, std::int64_t z, std::int64_t y, std::int64_t x0,
                                                             std::int64_t out_width, const OutputRows& out) {
    const std::int64_t in_channels = input.channels;
    __m512 acc[k_block][Vectors];
#pragma GCC unroll 8
    for (std::int64_t j = 0; j < k_block; ++j) {
        const __m512 start = bias_block ? _mm512_set1_ps(bias_block[j]) : _mm512_setzero_ps();
        for (int v = 0; v < Vectors; ++v) acc[j][v] = start;
    }
    for (std::int64_t i = 0; i < in_channels; ++i) {
        for (int kz = 0; kz < taps_z; ++kz) {
            for (int ky = 0; ky < 3; ++ky) {
                const float* row = input.at(n, i, z + kz, y + ky) + x0;
                const float* w = relaid_block + ((i * taps_z + kz) * 3 + ky) * 3 * k_block;
                // Not unrolled: GCC 12 interleaved the three taps and spilled 16 accumulators to the stack
                // (one thread, 8 → 8 channels, rows of 64, in cache: 158 against 180 µs, 12 % faster).
#pragma GCC unroll 1
                for (int kx = 0; kx < 3; ++kx) {
                    __m512 loaded[Vectors];
                    for (int v = 0; v < Vectors; ++v) loaded[v] = _mm512_loadu_ps(row + kx + v * k_lanes);
#pragma GCC unroll 8
                    for (std::int64_t j = 0; j < k_block; ++j) {
                        const __m512 weight = _mm512_set1_ps(w[kx * k_block + j]);
                        for (int v = 0; v < Vectors; ++v) acc[j][v] = _mm512_fmadd_ps(weight, loaded[v], acc[j][v]);
                    }
                }
            }
        }
    }
    if (out.position_stride == 1) {
#pragma GCC unroll 8
        for (std::int64_t j = 0; j < k_block; ++j) {
            float* row = out.base + j * out.channel_stride + x0;
            for (int v = 0; v < Vectors; ++v) _mm512_mask_storeu_ps(row + v * k_lanes, lanes_before(x0 + v * k_lanes, out_width), acc[j][v]);
        }
        return;
    }
    // Channels-last: each position's 8 channels side by side, 8 positions at a time.
    alignas(64) float staged[k_block][Vectors * k_lanes];
    for (std::int64_t j = 0; j < k_block; ++j)
        for (int v = 0; v < Vectors; ++v) _mm512_store_ps(staged[j] + v * k_lanes, acc[j][v]);
    for (std::int64_t first = 0; first < Vectors * k_lanes && x0 + first < out_width; first += 8) {
        __m256 columns[8];
        for (std::int64_t j = 0; j < k_block; ++j) columns[j] = _mm256_load_ps(staged[j] + first);
        transpose8(columns);
        const std::int64_t count = std::min<std::int64_t>(8, out_width - x0 - first);
        for (std::int64_t k = 0; k < count; ++k) _mm256_storeu_ps(out.base + (x0 + first + k) * out.position_stride, columns[k]);
    }
}

// The last Count (1–4) positions x … x + Count − 1 of Rows (1–4) output rows (n, z, y0 …), 8 channels,
// the channels in one vector: a broadcast input value times the 8 channels' weights (side by side in the
// re-laid block) per input channel and tap. A 16-wide chunk costs as many instructions as 16 such
// positions, so a row's last few positions take this. Rows together: each input row and plane's 9 weight
// vectors are loaded once for all of them (one row at a time, the loads bound it); the products of a
// position sum in up to 3 chains so that they need not wait on each other. One thread, a 16 → 8 corner
// tile 33³ → 32³ (rows of 33), input gradient, fastest 4 of 10 interleaved runs: position by position in
// two chains 2.40–2.59 ms against a row's positions together in 3–9 chains 2.26–2.37; in a later run,
// that 2.06–2.23 against 4 rows together 2.01–2.13, the whole layer's 32³ 1.75–1.87 (33³ holds 10 % more).
template <int Count, int Rows>
__attribute__((target("avx512f,fma"))) void forward_tail(const PaddedRows& input, const float* relaid_block, const float* bias_block,
                                                         int taps_z, std::int64_t n, std::int64_t z, std::int64_t y0, std::int64_t x,
                                                         const OutputRows& out, std::int64_t row_stride) {
    constexpr int k_chains = Count * Rows <= 2 ? 3 : (Count * Rows <= 4 ? 2 : 1);
    __m256 acc[Rows][Count][k_chains];
    for (int r = 0; r < Rows; ++r)
        for (int p = 0; p < Count; ++p)
            for (int c = 0; c < k_chains; ++c) acc[r][p][c] = _mm256_setzero_ps();
    for (std::int64_t i = 0; i < input.channels; ++i) {
        for (int kz = 0; kz < taps_z; ++kz) {
            const float* w = relaid_block + (i * taps_z + kz) * 3 * 3 * k_block;  // [ky][kx][8 channels]
            __m256 weight[3][3];
            for (int ky = 0; ky < 3; ++ky)
                for (int kx = 0; kx < 3; ++kx) weight[ky][kx] = _mm256_loadu_ps(w + (ky * 3 + kx) * k_block);
#pragma GCC unroll 6
            for (int yy = 0; yy < Rows + 2; ++yy) {  // input rows y0 … y0 + Rows + 1
                const float* row = input.at(n, i, z + kz, y0 + yy) + x;
                __m256 value[Count + 2];
                for (int k = 0; k < Count + 2; ++k) value[k] = _mm256_set1_ps(row[k]);
#pragma GCC unroll 3
                for (int ky = 0; ky < 3; ++ky) {
                    const int r = yy - ky;  // the output row this input row feeds through tap ky
                    if (r < 0 || r >= Rows) continue;
                    const int c = ky % k_chains;
                    for (int p = 0; p < Count; ++p)
                        for (int kx = 0; kx < 3; ++kx) acc[r][p][c] = _mm256_fmadd_ps(value[p + kx], weight[ky][kx], acc[r][p][c]);
                }
            }
        }
    }
    const __m256 bias = bias_block ? _mm256_loadu_ps(bias_block) : _mm256_setzero_ps();
    for (int r = 0; r < Rows; ++r) {
        float* base = out.base + r * row_stride;
        for (int p = 0; p < Count; ++p) {
            __m256 sum = bias;
            for (int c = 0; c < k_chains; ++c) sum = _mm256_add_ps(sum, acc[r][p][c]);
            if (out.channel_stride == 1) {
                _mm256_storeu_ps(base + (x + p) * out.position_stride, sum);
                continue;
            }
            alignas(32) float channels[k_block];
            _mm256_store_ps(channels, sum);
            for (std::int64_t j = 0; j < k_block; ++j) base[j * out.channel_stride + (x + p) * out.position_stride] = channels[j];
        }
    }
}

// The tail of `rows` (1–4) output rows: Count positions from x.
template <int Count>
void forward_tail_rows(const PaddedRows& input, const float* relaid_block, const float* bias_block, int taps_z, std::int64_t n,
                       std::int64_t z, std::int64_t y0, std::int64_t rows, std::int64_t x, const OutputRows& out,
                       std::int64_t row_stride) {
    switch (rows) {
        case 1: return forward_tail<Count, 1>(input, relaid_block, bias_block, taps_z, n, z, y0, x, out, row_stride);
        case 2: return forward_tail<Count, 2>(input, relaid_block, bias_block, taps_z, n, z, y0, x, out, row_stride);
        case 3: return forward_tail<Count, 3>(input, relaid_block, bias_block, taps_z, n, z, y0, x, out, row_stride);
        default: return forward_tail<Count, 4>(input, relaid_block, bias_block, taps_z, n, z, y0, x, out, row_stride);
    }
}

constexpr std::int64_t k_positions_alone = 4;  // a row's last 1–4 positions: forward_tail
constexpr std::int64_t k_tail_rows = 4;        // rows forward_tail takes together

// Where a row of out_width positions leaves its last 1–4 to forward_tail (out_width when it does not).
std::int64_t tail_start(std::int64_t out_width) {
    std::int64_t x0 = 0;
    while (x0 + k_lanes < out_width) x0 += 2 * k_lanes;
    const std::int64_t left = out_width - x0;  // past the pairs of vectors (the last pair may end past the row)
    return left > 0 && left <= k_positions_alone ? x0 : out_width;
}

// One output row (n, z, y) of 8 channels, 32 positions at a time and a last 5 to 16 as one more vector;
// a last 1 to 4 are left to forward_tail (row_conv_forward), a few rows at a time. A tile's input gradient
// is its widened width (33 or 34 positions): pairs of vectors computed it as 64, now as 32 and one or two.
__attribute__((target("avx512f"))) void forward_row(const PaddedRows& input, const float* relaid_block, const float* bias_block,
                                                    int taps_z, std::int64_t n, std::int64_t z, std::int64_t y,
                                                    std::int64_t out_width, const OutputRows& out) {
    std::int64_t x0 = 0;
    for (; x0 + k_lanes < out_width; x0 += 2 * k_lanes)
        forward_chunk<2>(input, relaid_block, bias_block, taps_z, n, z, y, x0, out_width, out);
    if (out_width - x0 > k_positions_alone) forward_chunk<1>(input, relaid_block, bias_block, taps_z, n, z, y, x0, out_width, out);
}

// 8 channels of one source row, each position's 8 side by side (channels-last, or inside a channel
// block), into 8 padded rows starting at column `first`.
__attribute__((target("avx512f"))) void transpose_row_in(const float* source, std::int64_t position_stride, std::int64_t width,
                                                         float* const* rows, std::int64_t first) {
    std::int64_t x = 0;
    for (; x + 8 <= width; x += 8) {
        __m256 columns[8];
        for (std::int64_t k = 0; k < 8; ++k) columns[k] = _mm256_loadu_ps(source + (x + k) * position_stride);
        transpose8(columns);
        for (std::int64_t c = 0; c < 8; ++c) _mm256_storeu_ps(rows[c] + first + x, columns[c]);
    }
    for (; x < width; ++x)
        for (std::int64_t c = 0; c < 8; ++c) rows[c][first + x] = source[x * position_stride + c];
}

// The products of one output row's Chunks vectors with one input row, per output channel j of a block
// and tap kx: acc[j][kx] += dy_j · x shifted by kx. dy_j lies at dy + j · channel_stride.
template <int Chunks>
__attribute__((target("avx512f"))) inline void gradient_row_products(const float* x_row, const float* dy, std::int64_t channel_stride,
                                                                     std::int64_t chunks, __m512 (&acc)[k_block][3]) {
    if constexpr (Chunks > 0) chunks = Chunks;
#pragma GCC unroll 4
    for (std::int64_t c = 0; c < chunks; ++c) {
        const std::int64_t x = c * k_lanes;
        const __m512 x0 = _mm512_loadu_ps(x_row + x), x1 = _mm512_loadu_ps(x_row + x + 1), x2 = _mm512_loadu_ps(x_row + x + 2);
#pragma GCC unroll 8
        for (std::int64_t j = 0; j < k_block; ++j) {
            __m512 dy_j = _mm512_loadu_ps(dy + j * channel_stride + x);
            // Kept in a register: GCC would fold it into all three products as a memory
            // operand, loading it three times (the loads, not the products, then bound the
            // loop: 4.2 against 7.8 ms for 8 → 8 channels at 64³, Xeon model 207).
            asm("" : "+v"(dy_j));
            acc[j][0] = _mm512_fmadd_ps(dy_j, x0, acc[j][0]);
            acc[j][1] = _mm512_fmadd_ps(dy_j, x1, acc[j][1]);
            acc[j][2] = _mm512_fmadd_ps(dy_j, x2, acc[j][2]);
        }
    }
}

// One item of the weights' gradient: up to k_gradient_rows output rows of one (n, z), every channel
// pair and tap, added into `partial` ([C_out/8][C_in][taps_z][3][8][3] vectors), or written over it
// when `overwrite` (a group's first item). Chunks: 16-wide vectors a row, 1–4 unrolled (a 3D U-Net's
// rows), 0 for `chunks` of them.
template <int Chunks>
__attribute__((target("avx512f"))) void gradient_item(const PaddedRows& input, const PaddedRows& gradient,
                                                      const std::array<std::int64_t, 3>& offset, int taps_z, std::int64_t n,
                                                      std::int64_t z, std::int64_t y_begin, std::int64_t y_end, std::int64_t chunks,
                                                      bool overwrite, float* partial) {
    if constexpr (Chunks > 0) chunks = Chunks;
    const std::int64_t in_channels = input.channels, blocks = gradient.channels / k_block;
    const std::int64_t channel_stride = gradient.depth * gradient.height * gradient.row;  // between dy's channels
    for (std::int64_t block = 0; block < blocks; ++block) {
        for (std::int64_t i = 0; i < in_channels; ++i) {
            for (int kz = 0; kz < taps_z; ++kz) {
                // The next (channel, plane)'s input rows on their way while this one's products run: 3–15 %
                // faster at 64³ in one harness, 2–7 % in another (8 and 16 input channels, interleaved, Xeon model 207).
                if (kz + 1 < taps_z || i + 1 < in_channels) {
                    const std::int64_t next_i = kz + 1 < taps_z ? i : i + 1, next_kz = kz + 1 < taps_z ? kz + 1 : 0;
                    for (std::int64_t y = y_begin; y < y_end + 2; ++y) {
                        const char* row = reinterpret_cast<const char*>(input.at(n, next_i, z + next_kz, y));
                        for (std::int64_t byte = 0; byte < (chunks * k_lanes + 2) * 4; byte += 64) _mm_prefetch(row + byte, _MM_HINT_T1);
                    }
                }
                for (int ky = 0; ky < 3; ++ky) {
                    float* sums = partial + ((((block * in_channels + i) * taps_z + kz) * 3 + ky) * k_block * 3) * k_lanes;
                    __m512 acc[k_block][3];
#pragma GCC unroll 8
                    for (std::int64_t j = 0; j < k_block; ++j)
                        for (int kx = 0; kx < 3; ++kx) acc[j][kx] = overwrite ? _mm512_setzero_ps() : _mm512_loadu_ps(sums + (j * 3 + kx) * k_lanes);
                    const float* x_row = input.at(n, i, z + kz, y_begin + ky);
                    const float* dy = gradient.at(n, block * k_block, z + offset[0], y_begin + offset[1]) + offset[2];
                    for (std::int64_t y = y_begin; y < y_end; ++y, x_row += input.row, dy += gradient.row)
                        gradient_row_products<Chunks>(x_row, dy, channel_stride, chunks, acc);
#pragma GCC unroll 8
                    for (std::int64_t j = 0; j < k_block; ++j)
                        for (int kx = 0; kx < 3; ++kx) _mm512_storeu_ps(sums + (j * 3 + kx) * k_lanes, acc[j][kx]);
                }
            }
        }
    }
}

// Σ of one channel's output gradient over its rows (the bias gradient), in doubles, in a fixed order: 16
// floats at a time into 4 vectors of 8 doubles, added at the end in order. Each row is read as `chunks`
// whole vectors from its first value: past the values the padded rows hold zeros. One value at a time, the
// additions waited on each other: a layer's bias gradient cost 1.1–1.6 ms beside its 4–5 ms weights'
// gradient (8 → 8 at 64³, 2 threads, Xeon model 207).
__attribute__((target("avx512f"))) double channel_gradient_sum(const PaddedRows& gradient, std::int64_t channel,
                                                               const std::array<std::int64_t, 3>& offset, std::int64_t out_depth,
                                                               std::int64_t out_height, std::int64_t chunks) {
    __m512d sums[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
    int next = 0;  // the pair of sums the next vector goes to
    for (std::int64_t n = 0; n < gradient.batch; ++n)
        for (std::int64_t z = 0; z < out_depth; ++z)
            for (std::int64_t y = 0; y < out_height; ++y) {
                const float* row = gradient.at(n, channel, z + offset[0], y + offset[1]) + offset[2];
                for (std::int64_t c = 0; c < chunks; ++c) {
                    // Zero-masked conversions: the plain ones take GCC 12's _mm512_undefined_pd, which its
                    // -Wmaybe-uninitialized reports.
                    constexpr __mmask8 all = 0xFF;
                    sums[next] = _mm512_add_pd(sums[next], _mm512_maskz_cvtps_pd(all, _mm256_loadu_ps(row + c * k_lanes)));
                    sums[next + 1] = _mm512_add_pd(sums[next + 1], _mm512_maskz_cvtps_pd(all, _mm256_loadu_ps(row + c * k_lanes + 8)));
                    next ^= 2;
                }
            }
    alignas(64) double lanes[4][8];
    for (int k = 0; k < 4; ++k) _mm512_store_pd(lanes[k], sums[k]);
    double total = 0;
    for (int k = 0; k < 4; ++k)
        for (int lane = 0; lane < 8; ++lane) total += lanes[k][lane];
    return total;
}

// A vector's 16 lanes added in a fixed tree (each lane with the one 8 away, then 4, 2, 1): the same bits
// every time. Lane by lane, 16 dependent additions a vector cost ~0.6 ms a 16 → 8 3D layer's call.
__attribute__((target("avx512f"))) inline float lane_sum(const float* lanes) {
    __m512 sum = _mm512_loadu_ps(lanes);
    // 512-bit masked forms with every lane selected: the plain shuffles (and 256-bit extracts) take GCC 12's
    // _mm512_undefined_ps, which its -Wuninitialized reports.
    constexpr __mmask16 all = 0xFFFF;
    sum = _mm512_add_ps(sum, _mm512_mask_shuffle_f32x4(sum, all, sum, sum, _MM_SHUFFLE(1, 0, 3, 2)));
    sum = _mm512_add_ps(sum, _mm512_mask_shuffle_f32x4(sum, all, sum, sum, _MM_SHUFFLE(2, 3, 0, 1)));
    sum = _mm512_add_ps(sum, _mm512_mask_permute_ps(sum, all, sum, _MM_SHUFFLE(1, 0, 3, 2)));
    sum = _mm512_add_ps(sum, _mm512_mask_permute_ps(sum, all, sum, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_cvtss_f32(sum);
}

// sums[v] = lane_sum of vector v, for `vectors` consecutive vectors.
__attribute__((target("avx512f"))) void lane_sums(const float* vectors_data, std::int64_t vectors, float* sums) {
    for (std::int64_t vector = 0; vector < vectors; ++vector) sums[vector] = lane_sum(vectors_data + vector * k_lanes);
}

}  // namespace

bool row_convolution_available() {
    static const bool available = __builtin_cpu_supports("avx512f") != 0;
    return available;
}

bool row_convolutions_enabled() {
    return row_convolution_available() && !switched_off("TESSERA_ROW_CONVOLUTIONS");
}

PaddedRows padded_rows_for(std::int64_t batch, std::int64_t channels, const std::vector<std::int64_t>& out_extent,
                           std::int64_t aligned_column) {
    TESSERA_ASSERT(out_extent.size() == 2 || out_extent.size() == 3, "a row convolution is 2D or 3D");
    const bool volume = out_extent.size() == 3;
    PaddedRows padded;
    padded.batch = batch;
    padded.channels = channels;
    padded.depth = volume ? out_extent[0] + 2 : 1;
    padded.height = out_extent[out_extent.size() - 2] + 2;
    padded.width = out_extent.back() + 2;
    // Rows end after the weights' gradient's 16-wide reads of the input (the outputs' chunks, shifted by up
    // to 2 taps), in whole vectors so that every row keeps the alignment; its reads of the output's
    // gradient, from the aligned column on, then end inside the row too, on zeros past the values. At 64³
    // that is 80 floats a row where "width + 32" took 112, and the row convolution ~9 % faster.
    padded.lead = (k_lanes - aligned_column % k_lanes) % k_lanes;
    const std::int64_t read_width = round_up(out_extent.back(), k_lanes) + 2;
    padded.row = round_up(padded.lead + std::max(padded.width, read_width), k_lanes);
    return padded;
}

void fill_padded(const PaddedRows& padded, const SourceLayout& source, const std::vector<std::int64_t>& pad_begin) {
    const bool volume = pad_begin.size() == 3;
    const std::int64_t margin_z = volume ? pad_begin[0] : 0, margin_y = pad_begin[pad_begin.size() - 2], margin_x = pad_begin.back();
    const std::int64_t depth = source.extent[0], height = source.extent[1], width = source.extent[2];
    TESSERA_ASSERT(margin_x + width <= padded.width && margin_y + height <= padded.height && margin_z + depth <= padded.depth,
                   "the values fit their padded buffer");
    const std::int64_t first = padded.lead + margin_x;  // where the values start in a row
    const auto zero_row_ends = [&](float* row) {
        std::memset(row, 0, static_cast<std::size_t>(first) * sizeof(float));
        std::memset(row + first + width, 0, static_cast<std::size_t>(padded.row - first - width) * sizeof(float));
    };
    // Channels-last, or inside a channel block of 8 or more: 8 channels at a time, transposed. Where 16
    // lie side by side (a position's cache line), one task takes the 16 — two 8-channel passes over the
    // same lines, the second from L1 — rather than two tasks reading every line from memory (16 channels
    // at 64³, 2 threads, fastest of 60: 1.16–1.23 against 1.35–1.38 ms).
    const bool channels_last = source.block == 1 && source.block_stride == 1;
    const bool side_by_side = channels_last || (source.block % 8 == 0 && source.block > 1);
    const bool sixteen_side_by_side = channels_last || source.block % 16 == 0;
    const std::int64_t group = !side_by_side || padded.channels % 8 != 0 || !row_convolution_available() ? 1
                               : sixteen_side_by_side && padded.channels % 16 == 0                  ? 16
                                                                                                    : 8;
    const std::int64_t groups = padded.channels / group;
#pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (std::int64_t n = 0; n < padded.batch; ++n) {
        for (std::int64_t g = 0; g < groups; ++g) {
            for (std::int64_t z = 0; z < padded.depth; ++z) {
                const std::int64_t c0 = g * group;
                const float* channel =
                    source.data + n * source.batch_stride + (c0 / source.block) * source.block_stride + c0 % source.block;
                for (std::int64_t y = 0; y < padded.height; ++y) {
                    float* rows[16];
                    for (std::int64_t c = 0; c < group; ++c) rows[c] = padded.at(n, c0 + c, z, y) - padded.lead;
                    const std::int64_t sz = z - margin_z, sy = y - margin_y;
                    if (sz < 0 || sz >= depth || sy < 0 || sy >= height) {
                        for (std::int64_t c = 0; c < group; ++c) std::memset(rows[c], 0, static_cast<std::size_t>(padded.row) * sizeof(float));
                        continue;
                    }
                    const float* values = channel + sz * source.spatial_stride[0] + sy * source.spatial_stride[1];
                    for (std::int64_t c = 0; c < group; ++c) zero_row_ends(rows[c]);
                    if (group >= 8) {
                        for (std::int64_t eight = 0; eight < group; eight += 8)
                            transpose_row_in(values + eight, source.spatial_stride[2], width, rows + eight, first);
                    } else if (source.spatial_stride[2] == 1) {
                        std::memcpy(rows[0] + first, values, static_cast<std::size_t>(width) * sizeof(float));
                    } else {
                        for (std::int64_t x = 0; x < width; ++x) rows[0][first + x] = values[x * source.spatial_stride[2]];
                    }
                }
            }
        }
    }
}

std::vector<float> relaid_weights(const float* weights, std::int64_t out_channels, std::int64_t in_channels, int rank,
                                  bool flip_transpose) {
    const std::int64_t taps = taps_of(rank);
    // The product's own output and input channels: the input gradient's are the weights' swapped.
    const std::int64_t product_out = flip_transpose ? in_channels : out_channels;
    const std::int64_t product_in = flip_transpose ? out_channels : in_channels;
    TESSERA_ASSERT(product_out % k_block == 0, "row convolutions produce channels in blocks of 8");
    std::vector<float> relaid(static_cast<std::size_t>(product_out * product_in * taps));
    for (std::int64_t o = 0; o < product_out; ++o) {
        for (std::int64_t i = 0; i < product_in; ++i) {
            for (std::int64_t t = 0; t < taps; ++t) {
                const float value = flip_transpose ? weights[(i * in_channels + o) * taps + (taps - 1 - t)]
                                                   : weights[(o * in_channels + i) * taps + t];
                relaid[static_cast<std::size_t>((((o / k_block) * product_in + i) * taps + t) * k_block + o % k_block)] = value;
            }
        }
    }
    return relaid;
}

void row_conv_forward(const PaddedRows& input, const std::vector<float>& relaid, const float* bias, std::int64_t out_channels,
                      int rank, float* output, bool channels_last) {
    TESSERA_ASSERT(out_channels % k_block == 0, "row convolutions produce channels in blocks of 8");
    const int taps_z = rank == 3 ? 3 : 1;
    const std::int64_t out_depth = rank == 3 ? input.depth - 2 : 1, out_height = input.height - 2, out_width = input.width - 2;
    const std::int64_t blocks = out_channels / k_block;
    const std::int64_t block_weights = input.channels * taps_of(rank) * k_block;
    const std::int64_t plane = out_depth * out_height * out_width;  // positions of one channel
    // Where output row (n, z, y) of a block of 8 channels starts.
    const auto rows_of = [&](std::int64_t n, std::int64_t z, std::int64_t y, std::int64_t block) -> OutputRows {
        const std::int64_t position = (z * out_height + y) * out_width;  // of the row's first output
        if (channels_last) return {output + (n * plane + position) * out_channels + block * k_block, out_channels, 1};
        return {output + (n * out_channels + block * k_block) * plane + position, 1, plane};
    };
    const std::int64_t x_tail = tail_start(out_width), tail = out_width - x_tail;
    const std::int64_t row_stride = out_width * (channels_last ? out_channels : 1);  // between output rows
    const auto tail_of = [&](std::int64_t n, std::int64_t z, std::int64_t y0, std::int64_t rows, std::int64_t block) {
        const float* relaid_block = relaid.data() + block * block_weights;
        const float* bias_block = bias ? bias + block * k_block : nullptr;
        const OutputRows first = rows_of(n, z, y0, block);
        switch (tail) {
            case 1: forward_tail_rows<1>(input, relaid_block, bias_block, taps_z, n, z, y0, rows, x_tail, first, row_stride); break;
            case 2: forward_tail_rows<2>(input, relaid_block, bias_block, taps_z, n, z, y0, rows, x_tail, first, row_stride); break;
            case 3: forward_tail_rows<3>(input, relaid_block, bias_block, taps_z, n, z, y0, rows, x_tail, first, row_stride); break;
            default: forward_tail_rows<4>(input, relaid_block, bias_block, taps_z, n, z, y0, rows, x_tail, first, row_stride); break;
        }
    };
    // Groups of k_tail_rows rows (outputs are per row: the same values on any thread), each group's tail
    // right after its vectors while their input rows are in cache (in a pass of its own it read them from
    // memory again: one thread, a corner tile's 33³ input gradient 1–4 % slower).
    // Each thread takes its own contiguous run of planes in order, reusing from its own L2 the input planes
    // the previous one read (a plane feeds three), and at the end takes what is left of the other's from
    // its back (stolen_ranges.hpp). Groups dealt 4 at a time sent a plane's rows to both threads, each
    // reading every plane. In one process, calls alternating, 64³ 2 threads (Xeon model 207), paired
    // median: OpenMP's guided schedule against dynamic,4 8 → 8 0.91/0.91, 16 → 8 0.94/1.03 (guided's first
    // chunk is half the loop, which the other thread cannot share); against static 0.90–0.99; these ranges
    // against guided 0.91/0.91 (8 → 8), 0.94/0.95 (16 → 8), 0.93/0.97 (the input gradient of 16 → 8).
    const std::int64_t groups = (out_height + k_tail_rows - 1) / k_tail_rows;
    const auto run_group = [&](std::int64_t item) {  // item: (n, z, group)
        const std::int64_t group = item % groups, z = (item / groups) % out_depth, n = item / (groups * out_depth);
        const std::int64_t y0 = group * k_tail_rows, rows = std::min(k_tail_rows, out_height - y0);
        for (std::int64_t y = y0; y < y0 + rows; ++y) {
            for (std::int64_t block = 0; block < blocks; ++block) {
                forward_row(input, relaid.data() + block * block_weights, bias ? bias + block * k_block : nullptr, taps_z, n, z, y,
                            out_width, rows_of(n, z, y, block));
            }
        }
        if (tail == 0) return;
        for (std::int64_t block = 0; block < blocks; ++block) tail_of(n, z, y0, rows, block);
    };
    for_stolen_ranges(input.batch * out_depth * groups, 1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t item = begin; item < end; ++item) run_group(item);
    });
}

void row_conv_weights_gradient(const PaddedRows& input, const PaddedRows& gradient, const std::vector<std::int64_t>& gradient_offset,
                               const std::vector<std::int64_t>& out_extent, int rank, float* weights_gradient, float* bias_gradient) {
    const std::int64_t out_channels = gradient.channels, in_channels = input.channels;
    TESSERA_ASSERT(out_channels % k_block == 0, "row convolutions produce channels in blocks of 8");
    const bool volume = rank == 3;
    const int taps_z = volume ? 3 : 1;
    const std::int64_t out_depth = volume ? out_extent[0] : 1, out_height = out_extent[out_extent.size() - 2],
                       out_width = out_extent.back();
    const std::array<std::int64_t, 3> offset{volume ? gradient_offset[0] : 0, gradient_offset[gradient_offset.size() - 2],
                                             gradient_offset.back()};
    const std::int64_t chunks = (out_width + k_lanes - 1) / k_lanes;
    // Rows of up to 2 vectors (a tile's 32 positions) take 16 or 32 rows an item: each item loads and
    // stores its accumulators once, and with 8 rows of 2 vectors that was as much traffic as half the
    // products (one thread, 16 → 8 tile 33³ → 32³, fastest 4 of 8: 2.51–2.62 against 2.80–2.88 ms; 32 rows as 16;
    // at 64 positions, 4 vectors, 16 rows were slower than 8: 23.6–24.7 against 21.8–23.2 ms for 64³).
    const std::int64_t rows_per_item = k_gradient_rows * std::max<std::int64_t>(1, 4 / chunks);
    const std::int64_t row_blocks = (out_height + rows_per_item - 1) / rows_per_item;
    const std::int64_t items = input.batch * out_depth * row_blocks;
    const std::int64_t partial_size = out_channels * in_channels * taps_z * 3 * 3 * k_lanes;
    const std::int64_t vectors = partial_size / k_lanes;
    // Each group's vectors reduced to one float each (lane_sum's fixed tree), then the groups added in
    // order: the same bits on any thread count.
    const std::vector<float> group_sums = fixed_group_results(
        items, partial_size, vectors,
        [&](float* partial, std::int64_t item, bool first) {
            const std::int64_t row_block = item % row_blocks, z = (item / row_blocks) % out_depth, n = item / (row_blocks * out_depth);
            const std::int64_t y_begin = row_block * rows_per_item, y_end = std::min(out_height, y_begin + rows_per_item);
            switch (chunks) {
                case 1: gradient_item<1>(input, gradient, offset, taps_z, n, z, y_begin, y_end, chunks, first, partial); break;
                case 2: gradient_item<2>(input, gradient, offset, taps_z, n, z, y_begin, y_end, chunks, first, partial); break;
                case 3: gradient_item<3>(input, gradient, offset, taps_z, n, z, y_begin, y_end, chunks, first, partial); break;
                case 4: gradient_item<4>(input, gradient, offset, taps_z, n, z, y_begin, y_end, chunks, first, partial); break;
                default: gradient_item<0>(input, gradient, offset, taps_z, n, z, y_begin, y_end, chunks, first, partial); break;
            }
        },
        [&](const float* partial, float* sums) {
            lane_sums(partial, vectors, sums);
        });
    // Vector (block, i, kz, ky, j, kx) → weight (o = block·8 + j, i, kz, ky, kx).
    const std::int64_t taps = taps_of(rank);
    for (std::int64_t o = 0; o < out_channels; ++o) {
        for (std::int64_t i = 0; i < in_channels; ++i) {
            for (std::int64_t t = 0; t < taps; ++t) {
                const std::int64_t kx = t % 3, ky = (t / 3) % 3, kz = t / 9;
                const std::int64_t vector =
                    ((((o / k_block) * in_channels + i) * taps_z + kz) * 3 + ky) * k_block * 3 + (o % k_block) * 3 + kx;
                float sum = 0;
                for (std::int64_t group = 0; group < k_fixed_groups; ++group) sum += group_sums[static_cast<std::size_t>(group * vectors + vector)];
                weights_gradient[(o * in_channels + i) * taps + t] = sum;
            }
        }
    }
    if (bias_gradient == nullptr) return;
#pragma omp parallel for schedule(static)
    for (std::int64_t o = 0; o < out_channels; ++o) {
        bias_gradient[o] = static_cast<float>(channel_gradient_sum(gradient, o, offset, out_depth, out_height, chunks));
    }
}

}  // namespace tessera::ops
