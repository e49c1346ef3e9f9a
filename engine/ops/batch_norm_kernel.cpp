// Batch normalisation: oneDNN on one executor (its own row loops for narrow channels-last images); on a
// simulated core, statistics and backward sums reduced over the replica (make_batch_norm_kernel).
#include "ops/kernels.hpp"
#include "ops/tile_rows.hpp"
#include "core/fixed_groups.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <optional>
#include <immintrin.h>
#include <type_traits>

namespace tessera::ops {

namespace {

// Chan's pairwise update: running moments (mean, Σ(x − mean)²) of `count` values take in a run's
// (centre, Σ(x − centre)²) of `pixels` values.
inline void merge_moments(double centre, double square, std::int64_t pixels, std::int64_t count, double& mean, double& m2) {
    const double total = static_cast<double>(count + pixels);
    const double delta = centre - mean;
    mean += delta * static_cast<double>(pixels) / total;
    m2 += square + delta * delta * static_cast<double>(count) * static_cast<double>(pixels) / total;
}

// add_row_sums (tile_rows.hpp) for f32 runs with AVX2. A run of `lanes` channels per pixel (1, 2, 4, 8, 16
// or 32) is one flat array of floats whose channels repeat every 32 floats: float f holds channel
// f % lanes. It is walked 32 floats (4 vectors) at a time with 4 independent accumulators, each vector
// slot with its own per-channel constants; then whole vectors, then a scalar tail. Rows that follow each
// other in memory can be one run (see tile_moments). No lambdas: a target attribute does not reach them,
// and clang (which builds the fuzzers) ignores GCC's target pragma.
inline bool flat_rows_fit(std::int64_t lanes) { return lanes > 0 && lanes <= 32 && 32 % lanes == 0; }

constexpr int k_slots = 4;

// Per-channel values as the vector in slot `slot` sees them.
__attribute__((target("avx2,fma"))) inline __m256 slot_constants(const float* values, std::int64_t lanes, int slot) {
    alignas(32) float repeated[8];
    for (int k = 0; k < 8; ++k) repeated[k] = values[(slot * 8 + k) % lanes];
    return _mm256_load_ps(repeated);
}

// Adds the slot's 8 lanes into per-channel sums.
__attribute__((target("avx2,fma"))) inline void fold_slot(__m256 v, std::int64_t lanes, int slot, double* sums) {
    alignas(32) float lane[8];
    _mm256_store_ps(lane, v);
    for (int k = 0; k < 8; ++k) sums[(slot * 8 + k) % lanes] += lane[k];
}

// acc + x, or acc + (x − shift)² when centred.
__attribute__((target("avx2,fma"))) inline __m256 accumulate(__m256 acc, __m256 x, __m256 shift, bool centred) {
    if (!centred) return _mm256_add_ps(acc, x);
    const __m256 d = _mm256_sub_ps(x, shift);
    return _mm256_fmadd_ps(d, d, acc);
}

// Σ over a run of floats of x, or of (x − centre)² where `centre` is given, per channel.
__attribute__((target("avx2,fma"))) void add_run_sums(const float* run, std::int64_t lanes, std::int64_t floats, const float* centre, double* sums) {
    const bool centred = centre != nullptr;
    __m256 acc[k_slots], shift[k_slots];
    for (int slot = 0; slot < k_slots; ++slot) {
        acc[slot] = _mm256_setzero_ps();
        shift[slot] = centred ? slot_constants(centre, lanes, slot) : _mm256_setzero_ps();
    }
    std::int64_t i = 0;
    for (; i + 8 * k_slots <= floats; i += 8 * k_slots)
        for (int slot = 0; slot < k_slots; ++slot) acc[slot] = accumulate(acc[slot], _mm256_loadu_ps(run + i + slot * 8), shift[slot], centred);
    for (int slot = 0; i + 8 <= floats; i += 8, ++slot) acc[slot] = accumulate(acc[slot], _mm256_loadu_ps(run + i), shift[slot], centred);
    for (int slot = 0; slot < k_slots; ++slot) fold_slot(acc[slot], lanes, slot, sums);
    for (; i < floats; ++i) {
        const float d = run[i] - (centred ? centre[i % lanes] : 0.0f);
        sums[i % lanes] += centred ? d * d : d;
    }
}

// The row loops' AVX2 code (BatchNormKernel on a simulated core) walks a row as add_run_sums does, with
// per-channel constants given already repeated over 32 floats (value of channel k % lanes at float k, see
// RepeatedConstants): a 3D tile's rows are 256 floats, and building the vectors per row cost as much as
// the row.

// A non-temporal store where `stream` (the address 32-byte aligned), else a plain one.
__attribute__((target("avx2"))) inline void store_vector(float* to, __m256 v, bool stream) {
    if (stream) {
        _mm256_stream_ps(to, v);
    } else {
        _mm256_storeu_ps(to, v);
    }
}

// y = a·x + b per channel; with `mask`, then max(y, 0) and the ReLU's mask (y > 0) one bit per float,
// 8 to a byte (bit k of byte i: float 8i + k). Non-temporal stores where y is aligned: the halo buffer
// a tile is written into is not in cache (at 2 MB, 0.25 against 0.44 ms), as oneDNN's batch norm does.
__attribute__((target("avx2,fma"))) void affine_run(const float* x, float* y, std::int64_t floats, const float* slope32,
                                                    const float* offset32, std::uint8_t* mask) {
    const __m256 zero = _mm256_setzero_ps();
    const bool stream = reinterpret_cast<std::uintptr_t>(y) % 32 == 0;
    std::int64_t i = 0;
    for (; i + 8 <= floats; i += 8) {
        const std::int64_t k = i % 32;
        const __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(slope32 + k), _mm256_loadu_ps(x + i), _mm256_loadu_ps(offset32 + k));
        if (!mask) {
            store_vector(y + i, v, stream);
            continue;
        }
        store_vector(y + i, _mm256_max_ps(v, zero), stream);
        mask[i / 8] = static_cast<std::uint8_t>(_mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_GT_OQ)));
    }
    if (mask && i < floats) mask[i / 8] = 0;
    for (; i < floats; ++i) {
        const float v = slope32[i % 32] * x[i] + offset32[i % 32];
        y[i] = mask ? std::max(v, 0.0f) : v;
        if (mask && v > 0.0f) mask[i / 8] = static_cast<std::uint8_t>(mask[i / 8] | (1u << (i % 8)));
    }
}

// The 8 lanes of a vector whose bits are set in one byte of affine_run's mask.
__attribute__((target("avx2,fma"))) inline __m256 open_lanes(std::uint8_t bits) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits), bit), bit));
}

inline bool mask_bit(const std::uint8_t* mask, std::int64_t i) { return !mask || ((mask[i / 8] >> (i % 8)) & 1u) != 0; }

// Σg' and Σg'·(x − centre) added into float accumulators of 32 (float k: channel k % lanes), g' = g where
// the mask bit is set (every g without a mask): batch norm's backward sums, the gradient read where it
// arrives. The caller folds the accumulators into double sums every few rows.
__attribute__((target("avx2,fma"))) void gradient_run_sums(const float* g, const float* x, const std::uint8_t* mask, std::int64_t floats,
                                                           const float* centre32, float* sum_g32, float* sum_gx32) {
    __m256 acc_g[4], acc_gx[4];
    for (int slot = 0; slot < 4; ++slot) {
        acc_g[slot] = _mm256_loadu_ps(sum_g32 + slot * 8);
        acc_gx[slot] = _mm256_loadu_ps(sum_gx32 + slot * 8);
    }
    __m256 centre[4];
    for (int slot = 0; slot < 4; ++slot) centre[slot] = _mm256_loadu_ps(centre32 + slot * 8);
    std::int64_t i = 0;
    for (; i + 32 <= floats; i += 32) {
        for (int slot = 0; slot < 4; ++slot) {
            __m256 v = _mm256_loadu_ps(g + i + slot * 8);
            if (mask) v = _mm256_and_ps(v, open_lanes(mask[i / 8 + slot]));
            acc_g[slot] = _mm256_add_ps(acc_g[slot], v);
            acc_gx[slot] = _mm256_fmadd_ps(v, _mm256_sub_ps(_mm256_loadu_ps(x + i + slot * 8), centre[slot]), acc_gx[slot]);
        }
    }
    for (int slot = 0; i + 8 <= floats; i += 8, ++slot) {
        __m256 v = _mm256_loadu_ps(g + i);
        if (mask) v = _mm256_and_ps(v, open_lanes(mask[i / 8]));
        acc_g[slot] = _mm256_add_ps(acc_g[slot], v);
        acc_gx[slot] = _mm256_fmadd_ps(v, _mm256_sub_ps(_mm256_loadu_ps(x + i), centre[slot]), acc_gx[slot]);
    }
    for (int slot = 0; slot < 4; ++slot) {
        _mm256_storeu_ps(sum_g32 + slot * 8, acc_g[slot]);
        _mm256_storeu_ps(sum_gx32 + slot * 8, acc_gx[slot]);
    }
    for (; i < floats; ++i) {
        const float v = mask_bit(mask, i) ? g[i] : 0.0f;
        sum_g32[i % 32] += v;
        sum_gx32[i % 32] += v * (x[i] - centre32[i % 32]);
    }
}

// dx = gain·g' − (offset + slope·x) per channel (g' as in gradient_run_sums): batch norm's input gradient
// with the replica's statistics' terms. Non-temporal stores where dx is aligned (2 MB: 0.19 against 0.29 ms).
__attribute__((target("avx2,fma"))) void input_gradient_run(const float* g, const float* x, const std::uint8_t* mask, float* dx,
                                                            std::int64_t floats, const float* gain32, const float* offset32,
                                                            const float* slope32) {
    const bool stream = reinterpret_cast<std::uintptr_t>(dx) % 32 == 0;
    std::int64_t i = 0;
    for (; i + 8 <= floats; i += 8) {
        const std::int64_t k = i % 32;
        __m256 v = _mm256_loadu_ps(g + i);
        if (mask) v = _mm256_and_ps(v, open_lanes(mask[i / 8]));
        const __m256 correction = _mm256_fmadd_ps(_mm256_loadu_ps(slope32 + k), _mm256_loadu_ps(x + i), _mm256_loadu_ps(offset32 + k));
        store_vector(dx + i, _mm256_fmsub_ps(_mm256_loadu_ps(gain32 + k), v, correction), stream);
    }
    for (; i < floats; ++i) {
        const float v = mask_bit(mask, i) ? g[i] : 0.0f;
        dx[i] = gain32[i % 32] * v - (offset32[i % 32] + slope32[i % 32] * x[i]);
    }
}

// The same four loops with AVX-512: 16 floats a vector, two vectors for the 32-float pattern. Every float
// position of the pattern takes the same values in the same order as in the AVX2 loops (whose code runs the
// tails), and each output is the same operation on the same operands: the same bits on either CPU. bm_ops
// with the row loops (TESSERA_BN_ROWS=1), 2 threads, 6 alternating runs (Xeon model 207), forward and
// backward with the ReLU: 16 channels at 256² 3.08 against 3.90 ms (medians; oneDNN's 3.37), 32 at 128²
// 1.52 against 1.55, 8 at 64³ 1.59 against 1.68 — the 2D U-Net's first level on its tiles gains the most.

// Whether a kernel built now takes them: an AVX-512F CPU, and TESSERA_BN_AVX512 not 0 (to compare).
bool avx512_row_loops() { return __builtin_cpu_supports("avx512f") && !switched_off("TESSERA_BN_AVX512"); }

// The 16 lanes whose bits are set in two bytes of affine_run's mask (bit k of byte i: float 8i + k).
inline __mmask16 mask_lanes(const std::uint8_t* mask, std::int64_t byte) {
    return static_cast<__mmask16>(mask[byte] | (mask[byte + 1] << 8));
}

__attribute__((target("avx512f,avx2,fma"))) void add_run_sums_avx512(const float* run, std::int64_t lanes, std::int64_t floats,
                                                                     const float* centre, double* sums) {
    const bool centred = centre != nullptr;
    alignas(64) float pattern[32];
    for (int k = 0; k < 32; ++k) pattern[k] = centred ? centre[k % lanes] : 0.0f;
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    const __m512 shift[2] = {_mm512_load_ps(pattern), _mm512_load_ps(pattern + 16)};
    std::int64_t i = 0;
    for (; i + 32 <= floats; i += 32) {
        for (int half = 0; half < 2; ++half) {
            const __m512 x = _mm512_loadu_ps(run + i + half * 16);
            if (centred) {
                const __m512 d = _mm512_sub_ps(x, shift[half]);
                acc[half] = _mm512_fmadd_ps(d, d, acc[half]);
            } else {
                acc[half] = _mm512_add_ps(acc[half], x);
            }
        }
    }
    // The AVX2 loop's tail from here: its 8-float slots continue the same positions.
    alignas(64) float accumulated[32];
    _mm512_store_ps(accumulated, acc[0]);
    _mm512_store_ps(accumulated + 16, acc[1]);
    __m256 slots[k_slots];
    for (int slot = 0; slot < k_slots; ++slot) slots[slot] = _mm256_load_ps(accumulated + slot * 8);
    for (int slot = 0; i + 8 <= floats; i += 8, ++slot)
        slots[slot] = accumulate(slots[slot], _mm256_loadu_ps(run + i), _mm256_load_ps(pattern + slot * 8), centred);
    for (int slot = 0; slot < k_slots; ++slot) fold_slot(slots[slot], lanes, slot, sums);
    for (; i < floats; ++i) {
        const float d = run[i] - (centred ? centre[i % lanes] : 0.0f);
        sums[i % lanes] += centred ? d * d : d;
    }
}

__attribute__((target("avx512f,avx2,fma"))) void affine_run_avx512(const float* x, float* y, std::int64_t floats, const float* slope32,
                                                                   const float* offset32, std::uint8_t* mask) {
    // A non-temporal store of 64 bytes needs them aligned; rows starting 32 bytes off take the AVX2 loop.
    if (reinterpret_cast<std::uintptr_t>(y) % 64 != 0) {
        affine_run(x, y, floats, slope32, offset32, mask);
        return;
    }
    const __m512 zero = _mm512_setzero_ps();
    std::int64_t i = 0;
    for (; i + 16 <= floats; i += 16) {
        const std::int64_t k = i % 32;
        const __m512 v = _mm512_fmadd_ps(_mm512_loadu_ps(slope32 + k), _mm512_loadu_ps(x + i), _mm512_loadu_ps(offset32 + k));
        if (!mask) {
            _mm512_stream_ps(y + i, v);
            continue;
        }
        // The zero-masked form with every lane: GCC 12's plain _mm512_max_ps reads _mm512_undefined_ps (-Wuninitialized).
        _mm512_stream_ps(y + i, _mm512_maskz_max_ps(static_cast<__mmask16>(0xffff), v, zero));
        const __mmask16 positive = _mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ);
        mask[i / 8] = static_cast<std::uint8_t>(positive & 0xff);
        mask[i / 8 + 1] = static_cast<std::uint8_t>(positive >> 8);
    }
    if (i < floats) affine_run(x + i, y + i, floats - i, slope32 + i % 32, offset32 + i % 32, mask ? mask + i / 8 : nullptr);
}

__attribute__((target("avx512f,avx2,fma"))) void gradient_run_sums_avx512(const float* g, const float* x, const std::uint8_t* mask,
                                                                          std::int64_t floats, const float* centre32, float* sum_g32,
                                                                          float* sum_gx32) {
    __m512 acc_g[2], acc_gx[2], centre[2];
    for (int half = 0; half < 2; ++half) {
        acc_g[half] = _mm512_loadu_ps(sum_g32 + half * 16);
        acc_gx[half] = _mm512_loadu_ps(sum_gx32 + half * 16);
        centre[half] = _mm512_loadu_ps(centre32 + half * 16);
    }
    std::int64_t i = 0;
    for (; i + 32 <= floats; i += 32) {
        for (int half = 0; half < 2; ++half) {
            __m512 v = _mm512_loadu_ps(g + i + half * 16);
            if (mask) v = _mm512_maskz_mov_ps(mask_lanes(mask, i / 8 + half * 2), v);
            acc_g[half] = _mm512_add_ps(acc_g[half], v);
            acc_gx[half] = _mm512_fmadd_ps(v, _mm512_sub_ps(_mm512_loadu_ps(x + i + half * 16), centre[half]), acc_gx[half]);
        }
    }
    for (int half = 0; half < 2; ++half) {
        _mm512_storeu_ps(sum_g32 + half * 16, acc_g[half]);
        _mm512_storeu_ps(sum_gx32 + half * 16, acc_gx[half]);
    }
    // What is left (fewer than 32 floats, starting the pattern anew) as the AVX2 loop adds it.
    if (i < floats) gradient_run_sums(g + i, x + i, mask ? mask + i / 8 : nullptr, floats - i, centre32, sum_g32, sum_gx32);
}

__attribute__((target("avx512f,avx2,fma"))) void input_gradient_run_avx512(const float* g, const float* x, const std::uint8_t* mask,
                                                                           float* dx, std::int64_t floats, const float* gain32,
                                                                           const float* offset32, const float* slope32) {
    if (reinterpret_cast<std::uintptr_t>(dx) % 64 != 0) {
        input_gradient_run(g, x, mask, dx, floats, gain32, offset32, slope32);
        return;
    }
    std::int64_t i = 0;
    for (; i + 16 <= floats; i += 16) {
        const std::int64_t k = i % 32;
        __m512 v = _mm512_loadu_ps(g + i);
        if (mask) v = _mm512_maskz_mov_ps(mask_lanes(mask, i / 8), v);
        const __m512 correction = _mm512_fmadd_ps(_mm512_loadu_ps(slope32 + k), _mm512_loadu_ps(x + i), _mm512_loadu_ps(offset32 + k));
        _mm512_stream_ps(dx + i, _mm512_fmsub_ps(_mm512_loadu_ps(gain32 + k), v, correction));
    }
    if (i < floats) {
        input_gradient_run(g + i, x + i, mask ? mask + i / 8 : nullptr, dx + i, floats - i, gain32 + i % 32, offset32 + i % 32,
                           slope32 + i % 32);
    }
}

// Per-channel constants repeated for the row loops: group g's 32 floats hold channel
// g·lanes + k % lanes at float k (lanes dividing 32).
std::vector<float> repeated_over_32(const std::vector<float>& per_channel, std::int64_t lanes) {
    const std::int64_t groups = static_cast<std::int64_t>(per_channel.size()) / lanes;
    std::vector<float> repeated(static_cast<std::size_t>(groups * 32));
    for (std::int64_t g = 0; g < groups; ++g)
        for (std::int64_t k = 0; k < 32; ++k) repeated[static_cast<std::size_t>(g * 32 + k)] = per_channel[static_cast<std::size_t>(g * lanes + k % lanes)];
    return repeated;
}

// Whether tiles of this layout take the AVX2 loops: f32 rows of 1 to 32 lanes dividing 32, an AVX2 CPU
// (and TESSERA_ROW_KERNELS not 0). Asked when the kernel is built.
bool vector_moments(const memory::desc& layout) {
    const std::optional<RowShape> rows = f32_row_shape(layout);
    return rows && flat_rows_fit(rows->lanes) && vector_row_kernels_enabled();
}

// Per-lane Σx (centre null) or Σ(x − centre)² over `pixels` pixels of `lanes` channels, added into sums;
// `vectors`: the layout takes the AVX2 loop (vector_moments), `avx512` its AVX-512 form.
template <class Element>
void add_sums(const Element* run, std::int64_t lanes, std::int64_t pixels, const float* centre, double* sums, bool vectors, bool avx512) {
    if constexpr (std::is_same_v<Element, float>) {
        if (vectors) {
            (avx512 ? add_run_sums_avx512 : add_run_sums)(run, lanes, lanes * pixels, centre, sums);
            return;
        }
    }
    add_row_sums(run, lanes, pixels, centre, sums);
}

// A run's per-lane mean and Σ(x − that mean)² (two passes over a run in cache), merged into the running
// moments of `count` values per lane: one pass over the tile gives what Σx and then Σ(x − mean)² gave in
// two. `sums`, `squares` and `centre` are scratch of `lanes` entries.
template <class Element>
void add_run_moments(const Element* run, std::int64_t lanes, std::int64_t pixels, std::int64_t count, double* mean, double* m2,
                     double* sums, double* squares, float* centre, bool vectors, bool avx512) {
    std::fill(sums, sums + lanes, 0.0);
    std::fill(squares, squares + lanes, 0.0);
    add_sums(run, lanes, pixels, nullptr, sums, vectors, avx512);
    for (std::int64_t c = 0; c < lanes; ++c) centre[c] = static_cast<float>(sums[c] / static_cast<double>(pixels));
    add_sums(run, lanes, pixels, centre, squares, vectors, avx512);
    for (std::int64_t c = 0; c < lanes; ++c) merge_moments(centre[c], squares[c], pixels, count, mean[c], m2[c]);
}

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

// Batch normalisation. On one executor oneDNN computes the batch statistics and the whole backward pass,
// except for channels-last images of fewer than 16 channels (whole_image_row_loops), which run the row
// loops below with the image's own statistics and sums.
//
// Distributed (a simulated core's tile of a replica): forward (training), Σx then Σ(x − mean)² are
// reduced over the replica's cores, then the tile is normalised with those statistics. One pass over the
// tile gives both: its own mean and Σ(x − its mean)² (row by row, Chan's update), from which
// Σ(x − mean)² about the replica's mean follows without reading the tile again. Backward: this core's
// Σg'·x̂ and Σg' (g' the gradient after the fused ReLU's mask) are summed over the replica; then
// dx = γ/σ·(g' − (Σg' + x̂·Σg'x̂) / M).
// For f32 tiles both run in this kernel's own row loops (AVX2, non-temporal stores; see the constructor),
// which also write into a view inside a halo buffer. Otherwise oneDNN, with the statistics held fixed,
// normalises and gives γ/σ·g' with the two sums, and the statistics' terms are subtracted by hand. (Tried
// before: hand-written AVX2 passes with plain stores — slower than oneDNN's AVX-512 pass and the
// correction together, 34.8–35.6 against 26.9–29.7 ms of the 2D 4-way step.)
// The layout batch norm runs in: an input of 16 channels channels-last as the one 16-channel block it
// is byte for byte — oneDNN's blocked kernel (what the first level of a base-16 U-Net ran in before its
// convolutions went channels-last) where its channels-last one took ~1.2 ms more per layer at 256², batch 4.
memory::desc batch_norm_layout(const memory::desc& input, const Shape& shape) {
    if (shape[1] != 16 || !ChannelAddressing::describes(input)) return input;
    const memory::desc blocked = channel_blocked_desc(shape, input.data_type());
    return same_placement(input, blocked) ? blocked : input;
}

// Whether one executor's batch norm (a whole image, not a simulated core's tile) runs the row loops
// rather than oneDNN's: channels-last f32 with fewer than 16 channels, where oneDNN's kernels fill half a
// vector. The 3D U-Net's first level (8 channels at 64³, bm_ops, 2 threads, Xeon model 207): forward 0.76
// against 1.27 ms, forward and backward 2.60 against 3.57. Wider layers and blocked layouts keep oneDNN's,
// which was as fast or faster there (16 channels at 256², blocked: 3.67 against 5.20 ms forward and
// backward; 16 at 32³ 0.45 against 0.57). TESSERA_BN_ROWS=0 turns this off (=1 takes the row loops
// wherever they fit, to compare).
bool whole_image_row_loops(const std::optional<RowShape>& rows) {
    if (!rows) return false;
    static const char* setting = std::getenv("TESSERA_BN_ROWS");
    if (setting && std::string_view(setting) == "0") return false;
    if (setting && std::string_view(setting) == "1") return true;
    return rows->groups == 1 && rows->lanes > 1 && rows->lanes < 16;
}

// Per channel (padded to whole channel groups): the input gradient is gain·g' − (offset + slope·x).
struct StatisticsTerms {
    std::vector<float> gain, offset, slope;
};

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
        m_backward_pd = m_scratchpad.fit(dnnl::batch_normalization_backward::primitive_desc(
            dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, m_training_pd.dst_desc(), m_layout, epsilon,
                                                     training),
            Scratchpad::attributes(), cpu_engine(), m_training_pd));
        m_backward = dnnl::batch_normalization_backward(m_backward_pd);
        m_diff_src = Staged(m_scratchpad, m_backward_pd.diff_src_desc(), in.descs[0]);
        if (!m_needs_diff_input) m_discarded = m_scratchpad.call_buffer(m_backward_pd.diff_src_desc());
        m_tile_count = num_elements_of(output_shape) / channels;
        m_vector_moments = vector_moments(in.descs[0]);
        m_avx512 = m_vector_moments && avx512_row_loops();
        m_count = m_tile_count;
        // On a simulated core, f32 tiles whose input and output rows match run this kernel's own row loops
        // rather than oneDNN with the replica's statistics: forward normalises row by row and keeps the
        // ReLU's mask (a bit per element, as oneDNN's workspace); backward reads the gradient for its sums,
        // then writes the input gradient with the statistics' terms in one pass (oneDNN's backward and the
        // correction took three over the gradient). oneDNN's batch norm takes one layout for its source and
        // destination (and for both gradients); the row loops take any strides, so the output may be a
        // view inside the halo buffer it alone feeds (writes_into_views), which then copies nothing.
        const std::optional<RowShape> input_rows = f32_row_shape(in.descs[0]), output_rows = f32_row_shape(m_output_desc);
        m_row_loops = (m_distributed || whole_image_row_loops(input_rows)) && input_rows && output_rows &&
                      input_rows->lanes == output_rows->lanes && input_rows->count == output_rows->count;
        if (m_row_loops && m_attributes.fuse_relu) {
            m_relu_mask.assign(static_cast<std::size_t>(input_rows->count * mask_bytes(input_rows->lanes * output_shape.back())), 0);
        }
        if (m_attributes.fuse_relu && !m_row_loops) m_workspace = memory(m_training_pd.workspace_desc(), cpu_engine());
    }

    bool writes_into_views() const override { return m_row_loops && m_distributed; }
    std::string implementation() const override {
        if (m_row_loops) return !m_vector_moments ? "rows" : m_avx512 ? "rows:avx512" : "rows:avx2";
        return m_training_pd.impl_info_str();
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
            if (m_row_loops) {
                gradient_sums(inputs[0], diff_output);
            } else {
                run_backward(inputs[0], diff_output, diff_inputs);
            }
            std::vector<double> sums(static_cast<std::size_t>(2 * channels));
            for (std::int64_t c = 0; c < channels; ++c) {
                sums[static_cast<std::size_t>(c)] = m_scale->gradient.data<float>()[c];            // Σ g'·x̂
                sums[static_cast<std::size_t>(channels + c)] = m_shift->gradient.data<float>()[c];  // Σ g'
            }
            return sums;
        }
        // Phase 0: Σx and the element count, from this tile's moments (one pass over it); phase 1:
        // Σ(x − mean)² about the replica's mean, from the same moments: M2 + n·(tile mean − mean)².
        std::vector<double> sums(static_cast<std::size_t>(channels));
        const auto count = static_cast<double>(m_tile_count);
        if (phase == 0) {
            tile_moments(inputs[0]);
            for (std::int64_t c = 0; c < channels; ++c) sums[static_cast<std::size_t>(c)] = m_tile_mean[static_cast<std::size_t>(c)] * count;
            sums.push_back(count);
            return sums;
        }
        for (std::int64_t c = 0; c < channels; ++c) {
            const auto i = static_cast<std::size_t>(c);
            const double offset = m_tile_mean[i] - m_replica_mean[i];
            sums[i] = m_tile_m2[i] + count * offset * offset;
        }
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
            m_replica_mean.resize(static_cast<std::size_t>(channels));
            for (std::int64_t c = 0; c < channels; ++c) {
                m_replica_mean[static_cast<std::size_t>(c)] = sums[static_cast<std::size_t>(c)] / static_cast<double>(m_count);
                m_mean.data<float>()[c] = static_cast<float>(m_replica_mean[static_cast<std::size_t>(c)]);
            }
        } else {
            for (std::int64_t c = 0; c < channels; ++c) {
                m_variance.data<float>()[c] =
                    static_cast<float>(sums[static_cast<std::size_t>(c)] / static_cast<double>(m_count));
            }
        }
    }

    void forward(const std::vector<memory>& inputs, const memory& output, Mode mode) override {
        if (m_row_loops) {
            if (!m_distributed && mode == Mode::Train) whole_image_statistics(inputs[0]);
            normalize_rows(inputs[0], output, mode);
            return;
        }
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
        if (!m_distributed && !m_row_loops) {  // oneDNN: the whole backward pass, with the batch statistics' terms
            run_backward(inputs[0], diff_output, diff_inputs);
            return;
        }
        if (!m_distributed) {  // the row loops' sums, over this executor's image alone
            gradient_sums(inputs[0], diff_output);
            const std::int64_t channels = m_mean.num_elements();
            m_sum_gradient_xhat.assign(m_scale->gradient.data<float>(), m_scale->gradient.data<float>() + channels);
            m_sum_gradient.assign(m_shift->gradient.data<float>(), m_shift->gradient.data<float>() + channels);
        }
        // Distributed: oneDNN ran in the reduction phase (or, with the row loops, the sums alone); what remains is
        // the statistics' terms.
        if (!m_needs_diff_input) return;
        const TileBuffer x = tile_buffer_of(inputs[0]);
        const StatisticsTerms terms = statistics_terms(padded_channels(x));
        if (m_row_loops) {
            input_gradient(x, diff_output, diff_inputs[0], terms);
            return;
        }
        const TileBuffer dx = tile_buffer_of(diff_inputs[0]);
        TESSERA_ASSERT(x.dtype == dx.dtype && x.block == dx.block && x.batch_stride == dx.batch_stride &&
                           x.block_stride == dx.block_stride && x.spatial_stride == dx.spatial_stride,
                       "batch norm's input and its gradient share a layout");
        const std::vector<float>& offset = terms.offset;
        const std::vector<float>& slope = terms.slope;
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
        return (m_workspace ? static_cast<std::int64_t>(m_workspace.get_desc().get_size()) : 0) + m_diff_src.bytes() +
               static_cast<std::int64_t>(m_relu_mask.size());
    }

private:
    // The batch's mean and (biased) variance from this executor's image alone, in one pass (tile_moments).
    void whole_image_statistics(const memory& input) {
        tile_moments(input);
        const auto count = static_cast<double>(m_tile_count);
        for (std::int64_t c = 0; c < m_mean.num_elements(); ++c) {
            const auto i = static_cast<std::size_t>(c);
            m_mean.data<float>()[c] = static_cast<float>(m_tile_mean[i]);
            m_variance.data<float>()[c] = static_cast<float>(m_tile_m2[i] / count);
        }
    }

    // This tile's (or image's) per-channel mean and Σ(x − that mean)², in one pass.
    void tile_moments(const memory& input) {
        const TileBuffer x = tile_buffer_of(input);
        const auto padded = static_cast<std::size_t>(padded_channels(x));
        // Each fixed group of rows (core/fixed_groups.hpp) its own moments, merged in group order: the same
        // bits on any thread count, and a whole image's rows over the host threads.
        struct Moments {
            std::vector<double> mean, m2;
            std::vector<std::int64_t> merged;  // values merged so far, per channel group (at its first lane)
        };
        std::array<Moments, k_fixed_groups> groups;
        const TileRows rows(x);
        const std::vector<TileRows::RowStart> starts = rows.starts();
        for_fixed_groups(rows.count, parallel_rows(x), [&](std::int64_t group, std::int64_t begin, std::int64_t end) {
            const DenormalsFlushed flushed;  // on the thread that runs the group
            Moments& moments = groups[static_cast<std::size_t>(group)];
            moments.mean.assign(padded, 0.0);
            moments.m2.assign(padded, 0.0);
            moments.merged.assign(padded, 0);
            std::vector<double> sums(padded), squares(padded);  // scratch for one run
            std::vector<float> centre(padded);
            with_element_type(x.dtype, [&](auto element) {
                using Element = decltype(element);
                // Rows that follow each other in memory (one channel group's rows of a dense tile) are one run,
                // up to k_run_floats, where the AVX2 loop takes them: a 3D tile's rows of 32 positions × 8
                // channels spent more time merging per-row moments than summing (0.27–0.34 ms for a 32³ tile,
                // in cache). The lane loop keeps rows: its single float accumulator per lane suits a row's length.
                constexpr std::int64_t k_run_floats = 16384;  // 64 KB of f32: the second pass reads it from L2
                const Element* run = nullptr;
                std::int64_t run_first = 0, run_pixels = 0;
                const auto merge_run = [&] {
                    if (run_pixels == 0) return;
                    auto& count = moments.merged[static_cast<std::size_t>(run_first)];
                    add_run_moments(run, rows.lanes, run_pixels, count, moments.mean.data() + run_first, moments.m2.data() + run_first,
                                    sums.data(), squares.data(), centre.data(), m_vector_moments, m_avx512);
                    count += run_pixels;
                    run_pixels = 0;
                };
                const auto* base = static_cast<const Element*>(x.data);
                const std::int64_t lanes = rows.lanes, pixels = rows.width;
                for (std::int64_t r = begin; r < end; ++r) {
                    const Element* row = base + starts[static_cast<std::size_t>(r)].offset;
                    const std::int64_t first = starts[static_cast<std::size_t>(r)].first_channel;
                    const bool follows = run_pixels > 0 && first == run_first && row == run + run_pixels * lanes;
                    if (follows && m_vector_moments && (run_pixels + pixels) * lanes <= k_run_floats) {
                        run_pixels += pixels;
                        continue;
                    }
                    merge_run();
                    run = row;
                    run_first = first;
                    run_pixels = pixels;
                }
                merge_run();
            });
        });
        m_tile_mean.assign(padded, 0.0);
        m_tile_m2.assign(padded, 0.0);
        std::vector<std::int64_t> merged(padded, 0);
        const auto lanes = static_cast<std::size_t>(rows.lanes);
        for (const Moments& moments : groups) {
            if (moments.mean.empty()) continue;  // a group without rows
            for (std::size_t c = 0; c < padded; ++c) {
                const std::size_t first = c / lanes * lanes;
                const std::int64_t pixels = moments.merged[first];
                if (pixels == 0) continue;
                merge_moments(moments.mean[c], moments.m2[c], pixels, merged[c], m_tile_mean[c], m_tile_m2[c]);
                merged[c] += pixels;
            }
        }
    }

    // Whether a tile's row loops run over the host threads (or, on a simulated core, the pool's idle
    // ones): not for a few thousand values, which take less than waking them.
    static bool parallel_rows(const TileBuffer& x) { return num_elements_of(x.shape) >= 65536; }

    double inverse_sigma(float variance) const { return 1.0 / std::sqrt(static_cast<double>(variance) + m_attributes.epsilon); }
    // The ReLU mask's bytes for a row of `floats` values (a bit each).
    static std::int64_t mask_bytes(std::int64_t floats) { return (floats + 7) / 8; }

    // y = γ·(x − mean)/σ + β (then the ReLU) written into the output, whatever its strides (a view too):
    // the batch's statistics in training (the replica's, from the reduction phases), the running ones in eval.
    void normalize_rows(const memory& input, const memory& output, Mode mode) {
        const DenormalsFlushed flushed;  // as oneDNN's kernels run (see DenormalsFlushed)
        const bool training = mode == Mode::Train;
        const float* mean = training ? m_mean.data<float>() : m_running_mean->data<float>();
        const float* variance = training ? m_variance.data<float>() : m_running_variance->data<float>();
        const TileBuffer x = tile_buffer_of(input), y = tile_buffer_of(output);
        const TileRows x_rows(x), y_rows(y);
        TESSERA_ASSERT(x_rows.lanes == y_rows.lanes && x_rows.count == y_rows.count && x_rows.width == y_rows.width,
                       "batch norm writes an output whose rows match its input's");
        // Padded lanes of a channel block get slope and offset 0: they stay zero.
        const std::int64_t channels = m_mean.num_elements();
        std::vector<float> slope(static_cast<std::size_t>(padded_channels(x)), 0.0f), offset(slope.size(), 0.0f);
        for (std::int64_t c = 0; c < channels; ++c) {
            const auto i = static_cast<std::size_t>(c);
            const double scale = m_scale->value.data<float>()[c] * inverse_sigma(variance[c]);
            slope[i] = static_cast<float>(scale);
            offset[i] = static_cast<float>(m_shift->value.data<float>()[c] - scale * mean[c]);
        }
        const bool relu = m_attributes.fuse_relu;
        const std::int64_t floats = x_rows.lanes * x_rows.width, row_mask_bytes = mask_bytes(floats);
        TESSERA_ASSERT(!relu || static_cast<std::int64_t>(m_relu_mask.size()) == x_rows.count * row_mask_bytes,
                       "batch norm's ReLU mask has a bit per element of its tile");
        const std::vector<float> slope32 = m_vector_moments ? repeated_over_32(slope, x_rows.lanes) : std::vector<float>{};
        const std::vector<float> offset32 = m_vector_moments ? repeated_over_32(offset, x_rows.lanes) : std::vector<float>{};
        const auto* x_base = static_cast<const float*>(x.data);
        auto* y_base = static_cast<float*>(y.data);
        const std::vector<TileRows::RowStart> x_starts = x_rows.starts(), y_starts = y_rows.starts();
        for_fixed_groups(x_rows.count, parallel_rows(x), [&](std::int64_t, std::int64_t begin, std::int64_t end) {
            const DenormalsFlushed flushed_here;  // on the thread that runs the group
            // Eval's mask bits are never read: a row's scratch per group, leaving training's for its backward.
            std::vector<std::uint8_t> eval_mask(training ? 0 : static_cast<std::size_t>(row_mask_bytes));
            for (std::int64_t r = begin; r < end; ++r) {
                const auto row = static_cast<std::size_t>(r);
                const float* from = x_base + x_starts[row].offset;
                float* to = y_base + y_starts[row].offset;
                std::uint8_t* mask = !relu ? nullptr : training ? m_relu_mask.data() + r * row_mask_bytes : eval_mask.data();
                const std::int64_t first = x_starts[row].first_channel;
                if (m_vector_moments) {
                    const std::int64_t group = first / x_rows.lanes;
                    (m_avx512 ? affine_run_avx512 : affine_run)(from, to, floats, slope32.data() + group * 32, offset32.data() + group * 32,
                                                                mask);
                    continue;
                }
                if (mask) std::memset(mask, 0, static_cast<std::size_t>(row_mask_bytes));
                for (std::int64_t i = 0; i < floats; ++i) {
                    const auto lane = static_cast<std::size_t>(first + i % x_rows.lanes);
                    const float v = slope[lane] * from[i] + offset[lane];
                    to[i] = relu ? std::max(v, 0.0f) : v;
                    if (mask && v > 0.0f) mask[i / 8] = static_cast<std::uint8_t>(mask[i / 8] | (1u << (i % 8)));
                }
            }
            _mm_sfence();  // this thread's non-temporal stores reach memory before another thread reads them
        });
        if (training) {
            update_running_statistics(m_mean.data<float>(), m_variance.data<float>(), m_count, m_attributes.momentum,
                                      *m_running_mean, *m_running_variance);
        }
    }

    // The rows of the output's gradient (perhaps a view) and of the input, in step.
    struct PairedRows {
        TileBuffer gradient, input;
        TileRows gradient_rows, input_rows;
        std::vector<TileRows::RowStart> gradient_starts, input_starts;
        PairedRows(const TileBuffer& g, const TileBuffer& x)
            : gradient(g), input(x), gradient_rows(gradient), input_rows(input), gradient_starts(gradient_rows.starts()),
              input_starts(input_rows.starts()) {
            TESSERA_ASSERT(gradient_rows.lanes == input_rows.lanes && gradient_rows.count == input_rows.count && gradient_rows.width == input_rows.width,
                           "batch norm's output gradient has its input's rows");
        }
        std::int64_t floats() const { return input_rows.lanes * input_rows.width; }
        const float* gradient_row(std::int64_t r) const {
            return static_cast<const float*>(gradient.data) + gradient_starts[static_cast<std::size_t>(r)].offset;
        }
        const float* input_row(std::int64_t r) const { return static_cast<const float*>(input.data) + input_starts[static_cast<std::size_t>(r)].offset; }
        std::int64_t first_channel(std::int64_t r) const { return input_starts[static_cast<std::size_t>(r)].first_channel; }
    };

    // The fused ReLU's mask bits of row r (normalize_rows's), or none without the ReLU.
    const std::uint8_t* mask_of_row(std::int64_t r, std::int64_t floats) const {
        if (!m_attributes.fuse_relu) return nullptr;
        return m_relu_mask.data() + r * mask_bytes(floats);
    }

    // What oneDNN's backward gives this core: Σg'·x̂ and Σg' over the tile (the parameters'
    // gradients and the replica's sums), g' the gradient through the ReLU's mask.
    void gradient_sums(const memory& input, const memory& diff_output) {
        const DenormalsFlushed flushed;  // gradients deep in the backward pass hold values below 1e-38
        const PairedRows rows(tile_buffer_of(diff_output), tile_buffer_of(input));
        const std::int64_t floats = rows.floats(), lanes = rows.input_rows.lanes;
        const auto padded = static_cast<std::size_t>(padded_channels(rows.input));
        std::vector<float> centre(padded, 0.0f);
        const std::int64_t channels = m_mean.num_elements();
        for (std::int64_t c = 0; c < channels; ++c) centre[static_cast<std::size_t>(c)] = m_mean.data<float>()[c];
        // Each fixed group of rows its own sums, added in group order (the same bits on any thread count).
        std::array<std::vector<double>, k_fixed_groups> group_gradient, group_centred;
        const std::vector<float> centre32 = m_vector_moments ? repeated_over_32(centre, lanes) : std::vector<float>{};
        for_fixed_groups(rows.input_rows.count, parallel_rows(rows.input), [&](std::int64_t fixed_group, std::int64_t begin, std::int64_t end) {
            const DenormalsFlushed flushed_here;  // on the thread that runs the group
            std::vector<double>& sum_gradient = group_gradient[static_cast<std::size_t>(fixed_group)];
            std::vector<double>& sum_centred = group_centred[static_cast<std::size_t>(fixed_group)];
            sum_gradient.assign(padded, 0.0);
            sum_centred.assign(padded, 0.0);
            if (m_vector_moments) {
                // Float accumulators over rows of one channel group, folded into the double sums every 4096
                // floats (128 additions a lane): a 3D tile's rows are 256 floats.
                std::array<float, 32> accumulated_gradient{}, accumulated_centred{};
                std::int64_t group = -1, pending = 0;
                const auto fold = [&] {
                    for (std::size_t k = 0; k < 32; ++k) {
                        const auto channel = static_cast<std::size_t>(group * lanes) + k % static_cast<std::size_t>(lanes);
                        sum_gradient[channel] += accumulated_gradient[k];
                        sum_centred[channel] += accumulated_centred[k];
                    }
                    accumulated_gradient.fill(0.0f);
                    accumulated_centred.fill(0.0f);
                    pending = 0;
                };
                for (std::int64_t r = begin; r < end; ++r) {
                    const std::int64_t row_group = rows.first_channel(r) / lanes;
                    if (row_group != group || pending >= 4096) {
                        if (group >= 0) fold();
                        group = row_group;
                    }
                    (m_avx512 ? gradient_run_sums_avx512 : gradient_run_sums)(rows.gradient_row(r), rows.input_row(r), mask_of_row(r, floats),
                                                                            floats, centre32.data() + group * 32,
                                                                            accumulated_gradient.data(), accumulated_centred.data());
                    pending += floats;
                }
                if (group >= 0) fold();
                return;
            }
            for (std::int64_t r = begin; r < end; ++r) {
                const float* g = rows.gradient_row(r);
                const float* x = rows.input_row(r);
                const std::uint8_t* mask = mask_of_row(r, floats);
                const std::int64_t first = rows.first_channel(r);
                for (std::int64_t i = 0; i < floats; ++i) {
                    const auto channel = static_cast<std::size_t>(first + i % lanes);
                    const float v = mask_bit(mask, i) ? g[i] : 0.0f;
                    sum_gradient[channel] += v;
                    sum_centred[channel] += v * (x[i] - centre[channel]);
                }
            }
        });
        std::vector<double> sum_gradient(padded, 0.0), sum_centred(padded, 0.0);
        for (std::size_t group = 0; group < k_fixed_groups; ++group) {
            if (group_gradient[group].empty()) continue;  // a group without rows
            for (std::size_t c = 0; c < padded; ++c) {
                sum_gradient[c] += group_gradient[group][c];
                sum_centred[c] += group_centred[group][c];
            }
        }
        for (std::int64_t c = 0; c < channels; ++c) {
            const auto i = static_cast<std::size_t>(c);
            const double inverse = inverse_sigma(m_variance.data<float>()[c]);
            m_scale->gradient.data<float>()[c] = static_cast<float>(sum_centred[i] * inverse);
            m_shift->gradient.data<float>()[c] = static_cast<float>(sum_gradient[i]);
        }
    }

    // The input gradient in one pass: dx = γ/σ·g' − (offset + slope·x).
    void input_gradient(const TileBuffer& x, const memory& diff_output, const memory& diff_input, const StatisticsTerms& terms) {
        const DenormalsFlushed flushed;
        const PairedRows rows(tile_buffer_of(diff_output), x);
        const TileBuffer dx = tile_buffer_of(diff_input);
        const TileRows dx_rows(dx);
        const std::vector<TileRows::RowStart> dx_starts = dx_rows.starts();
        TESSERA_ASSERT(dx_rows.lanes == rows.input_rows.lanes && dx_rows.count == rows.input_rows.count, "batch norm's input gradient has its input's rows");
        const std::int64_t floats = rows.floats(), lanes = rows.input_rows.lanes;
        std::vector<float> gain32, offset32, slope32;
        if (m_vector_moments) {
            gain32 = repeated_over_32(terms.gain, lanes);
            offset32 = repeated_over_32(terms.offset, lanes);
            slope32 = repeated_over_32(terms.slope, lanes);
        }
        for_fixed_groups(rows.input_rows.count, parallel_rows(x), [&](std::int64_t, std::int64_t begin, std::int64_t end) {
            const DenormalsFlushed flushed_here;  // on the thread that runs the group
            for (std::int64_t r = begin; r < end; ++r) {
                const float* g = rows.gradient_row(r);
                const float* x_row = rows.input_row(r);
                float* target = static_cast<float*>(dx.data) + dx_starts[static_cast<std::size_t>(r)].offset;
                const std::uint8_t* mask = mask_of_row(r, floats);
                const std::int64_t first = rows.first_channel(r);
                if (m_vector_moments) {
                    const std::int64_t at = first / lanes * 32;
                    (m_avx512 ? input_gradient_run_avx512 : input_gradient_run)(g, x_row, mask, target, floats, gain32.data() + at,
                                                                              offset32.data() + at, slope32.data() + at);
                    continue;
                }
                const float* gain = terms.gain.data() + first;
                const float* offset = terms.offset.data() + first;
                const float* slope = terms.slope.data() + first;
                for (std::int64_t i = 0; i < floats; ++i) {
                    const float v = mask_bit(mask, i) ? g[i] : 0.0f;
                    target[i] = gain[i % lanes] * v - (offset[i % lanes] + slope[i % lanes] * x_row[i]);
                }
            }
            _mm_sfence();  // this thread's non-temporal stores reach memory before another host thread reads them
        });
    }

    // The replica's statistics' part of the input gradient per channel (padded lanes 0):
    // dx = γ/σ·g' − γ/(σM)·(Σg' + x̂·Σg'x̂) = gain·g' − (offset + slope·x), with x̂ = (x − mean)/σ.
    StatisticsTerms statistics_terms(std::int64_t padded) const {
        const std::int64_t channels = m_mean.num_elements();
        StatisticsTerms terms{.gain = std::vector<float>(static_cast<std::size_t>(padded), 0.0f), .offset = {}, .slope = {}};
        terms.offset = terms.slope = terms.gain;
        const auto count = static_cast<double>(m_count);
        for (std::int64_t c = 0; c < channels; ++c) {
            const auto i = static_cast<std::size_t>(c);
            const double inverse = inverse_sigma(m_variance.data<float>()[c]);
            const double gain = m_scale->value.data<float>()[c] * inverse;
            const double k = gain / count;
            const double per_xhat = k * m_sum_gradient_xhat[i] * inverse;
            terms.gain[i] = static_cast<float>(gain);
            terms.slope[i] = static_cast<float>(per_xhat);
            terms.offset[i] = static_cast<float>(k * m_sum_gradient[i] - per_xhat * m_mean.data<float>()[c]);
        }
        return terms;
    }

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
    bool m_vector_moments = false;  // the row loops run vectors (vector_moments): AVX2, or AVX-512 below
    bool m_avx512 = false;          // the row loops' AVX-512 forms (avx512_row_loops)
    bool m_row_loops = false;       // distributed, with this kernel's own loops (and writes_into_views)
    std::int64_t m_tile_count = 1;  // elements per channel on this executor
    std::int64_t m_count = 1;       // ... in the statistics (distributed: on the whole replica)
    Tensor m_mean, m_variance;      // [C] f32: the batch's (or, distributed, the replica's) statistics
    memory::desc m_layout;          // the primitives' (batch_norm_layout)
    std::vector<double> m_sum_gradient, m_sum_gradient_xhat;
    std::vector<double> m_tile_mean, m_tile_m2;  // this tile's moments per channel (padded to whole groups)
    std::vector<double> m_replica_mean;          // the replica's mean, before rounding to f32
    dnnl::batch_normalization_forward::primitive_desc m_training_pd;
    dnnl::batch_normalization_forward m_training;
    dnnl::batch_normalization_forward m_inference;
    dnnl::batch_normalization_backward::primitive_desc m_backward_pd;
    dnnl::batch_normalization_backward m_backward;
    memory m_workspace, m_discarded;
    std::vector<std::uint8_t> m_relu_mask;  // normalize_rows's, per row of the tile (affine_run)
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
