// Batch normalisation: oneDNN on one executor; on a simulated core, statistics and backward sums
// reduced over the replica (make_batch_norm_kernel).
#include "ops/kernels.hpp"
#include "ops/tile_rows.hpp"

#include <algorithm>
#include <cmath>
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

// Whether tiles of this layout take the AVX2 loops: f32 rows of 1 to 32 lanes dividing 32, an AVX2 CPU
// (and TESSERA_ROW_KERNELS not 0). Asked when the kernel is built.
bool vector_moments(const memory::desc& layout) {
    const std::optional<RowShape> rows = f32_row_shape(layout);
    return rows && flat_rows_fit(rows->lanes) && vector_row_kernels_enabled();
}

// Per-lane Σx (centre null) or Σ(x − centre)² over `pixels` pixels of `lanes` channels, added into sums;
// `vectors`: the layout takes the AVX2 loop (vector_moments).
template <class Element>
void add_sums(const Element* run, std::int64_t lanes, std::int64_t pixels, const float* centre, double* sums, bool vectors) {
    if constexpr (std::is_same_v<Element, float>) {
        if (vectors) {
            add_run_sums(run, lanes, lanes * pixels, centre, sums);
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
                     double* sums, double* squares, float* centre, bool vectors) {
    std::fill(sums, sums + lanes, 0.0);
    std::fill(squares, squares + lanes, 0.0);
    add_sums(run, lanes, pixels, nullptr, sums, vectors);
    for (std::int64_t c = 0; c < lanes; ++c) centre[c] = static_cast<float>(sums[c] / static_cast<double>(pixels));
    add_sums(run, lanes, pixels, centre, squares, vectors);
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

// Batch normalisation. On one executor oneDNN computes the batch statistics and the whole backward pass.
//
// Distributed (a simulated core's tile of a replica): forward (training), Σx then Σ(x − mean)² are
// reduced over the replica's cores, then oneDNN normalises with those statistics. One pass over the
// tile gives both: its own mean and Σ(x − its mean)² (row by row, Chan's update), from which
// Σ(x − mean)² about the replica's mean follows without reading the tile again. Backward: oneDNN with
// the statistics held fixed gives γ/σ·g' and this core's Σg'·x̂ and Σg' (g' the gradient after the
// fused ReLU's mask); once those are summed over the replica, the terms the statistics contribute are
// subtracted by hand: dx = γ/σ·(g' − (Σg' + x̂·Σg'x̂) / M). (Tried: the sums and dx in two hand-written
// AVX2 passes — slower than oneDNN's AVX-512 pass and the correction together, 34.8–35.6 against
// 26.9–29.7 ms of the 2D 4-way step.)
// The layout batch norm runs in: an input of 16 channels channels-last as the one 16-channel block it
// is byte for byte — oneDNN's blocked kernel (what the first level of a base-16 U-Net ran in before its
// convolutions went channels-last) where its channels-last one took ~1.2 ms more per layer at 256², batch 4.
memory::desc batch_norm_layout(const memory::desc& input, const Shape& shape) {
    if (shape[1] != 16 || !ChannelAddressing::describes(input)) return input;
    const memory::desc blocked = channel_blocked_desc(shape, input.data_type());
    return same_placement(input, blocked) ? blocked : input;
}

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
        if (m_attributes.fuse_relu) m_workspace = memory(m_training_pd.workspace_desc(), cpu_engine());
        m_backward_pd = m_scratchpad.fit(dnnl::batch_normalization_backward::primitive_desc(
            dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, m_training_pd.dst_desc(), m_layout, epsilon,
                                                     training),
            Scratchpad::attributes(), cpu_engine(), m_training_pd));
        m_backward = dnnl::batch_normalization_backward(m_backward_pd);
        m_diff_src = Staged(m_scratchpad, m_backward_pd.diff_src_desc(), in.descs[0]);
        if (!m_needs_diff_input) m_discarded = m_scratchpad.call_buffer(m_backward_pd.diff_src_desc());
        m_tile_count = num_elements_of(output_shape) / channels;
        m_vector_moments = vector_moments(in.descs[0]);
        m_count = m_tile_count;
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
            run_backward(inputs[0], diff_output, diff_inputs);
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
        if (!m_distributed) {  // the whole backward pass, with the batch statistics' terms
            run_backward(inputs[0], diff_output, diff_inputs);
            return;
        }
        // Distributed: oneDNN ran in the reduction phase; what remains is the statistics' terms.
        if (!m_needs_diff_input) return;
        const TileBuffer x = tile_buffer_of(inputs[0]);
        const TileBuffer dx = tile_buffer_of(diff_inputs[0]);
        TESSERA_ASSERT(x.dtype == dx.dtype && x.block == dx.block && x.batch_stride == dx.batch_stride &&
                           x.block_stride == dx.block_stride && x.spatial_stride == dx.spatial_stride,
                       "batch norm's input and its gradient share a layout");
        // dx −= γ/(σM)·(Σg' + x̂·Σg'x̂) = offset + slope·x, with x̂ = (x − mean)/σ.
        const std::int64_t channels = m_mean.num_elements();
        const std::int64_t padded = padded_channels(x);
        std::vector<float> offset(static_cast<std::size_t>(padded), 0.0f), slope(static_cast<std::size_t>(padded), 0.0f);
        const auto count = static_cast<double>(m_count);
        for (std::int64_t c = 0; c < channels; ++c) {
            const auto i = static_cast<std::size_t>(c);
            const double inverse_sigma = 1.0 / std::sqrt(static_cast<double>(m_variance.data<float>()[c]) + m_attributes.epsilon);
            const double k = m_scale->value.data<float>()[c] * inverse_sigma / count;
            const double per_xhat = k * m_sum_gradient_xhat[i] * inverse_sigma;
            slope[i] = static_cast<float>(per_xhat);
            offset[i] = static_cast<float>(k * m_sum_gradient[i] - per_xhat * m_mean.data<float>()[c]);
        }
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
        return (m_workspace ? static_cast<std::int64_t>(m_workspace.get_desc().get_size()) : 0) + m_diff_src.bytes();
    }

private:
    // This tile's per-channel mean and Σ(x − that mean)², in one pass.
    void tile_moments(const memory& input) {
        const TileBuffer x = tile_buffer_of(input);
        const auto padded = static_cast<std::size_t>(padded_channels(x));
        m_tile_mean.assign(padded, 0.0);
        m_tile_m2.assign(padded, 0.0);
        std::vector<std::int64_t> merged(padded, 0);  // values merged so far, per channel group (at its first lane)
        const DenormalsFlushed flushed;
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
            std::int64_t run_first = 0, run_lanes = 0, run_pixels = 0;
            const auto merge_run = [&] {
                if (run_pixels == 0) return;
                auto& count = merged[static_cast<std::size_t>(run_first)];
                add_run_moments(run, run_lanes, run_pixels, count, m_tile_mean.data() + run_first, m_tile_m2.data() + run_first,
                                sums.data(), squares.data(), centre.data(), m_vector_moments);
                count += run_pixels;
                run_pixels = 0;
            };
            for_each_row<Element>(x, [&](Element* row, std::int64_t first, std::int64_t lanes, std::int64_t pixels, std::int64_t) {
                const bool follows = run_pixels > 0 && first == run_first && row == run + run_pixels * lanes;
                if (follows && m_vector_moments && (run_pixels + pixels) * lanes <= k_run_floats) {
                    run_pixels += pixels;
                    return;
                }
                merge_run();
                run = row;
                run_first = first;
                run_lanes = lanes;
                run_pixels = pixels;
            });
            merge_run();
        });
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
    bool m_vector_moments = false;  // tile_moments runs the AVX2 loop (vector_moments)
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
