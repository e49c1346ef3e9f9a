#include "loss/cross_entropy.hpp"

#include "core/fixed_groups.hpp"
#include "loss/class_layout.hpp"
#include "loss/fast_math.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace tessera::loss {

namespace {

using detail::ClassLayout;

constexpr const char* k_name = "softmax_cross_entropy";
constexpr std::int64_t k_block = 256;  // voxels per block: the block's rows of C logits stay in L1

std::vector<float> class_weights_of(const CrossEntropyOptions& options, std::int64_t classes) {
    if (options.class_weights.empty()) return std::vector<float>(static_cast<std::size_t>(classes), 1.0f);
    TESSERA_CHECK(static_cast<std::int64_t>(options.class_weights.size()) == classes,
                  k_name << ": expected one class weight per class (" << classes << "), got "
                         << options.class_weights.size());
    for (std::size_t c = 0; c < options.class_weights.size(); ++c) {
        const float w = options.class_weights[c];
        TESSERA_CHECK(std::isfinite(w) && w >= 0.0f,
                      k_name << ": expected finite class weights ≥ 0, got " << w << " for class " << c);
    }
    return options.class_weights;
}

struct Prepared {
    Tensor logits;  // contiguous
    Tensor labels;  // contiguous
    ClassLayout layout;
    std::vector<float> class_weights;
    CrossEntropyPartial label_sums;  // weight_sum and counts; no nll yet
};

Prepared prepare(const Tensor& logits, const Tensor& labels, const CrossEntropyOptions& options) {
    Prepared prepared;
    prepared.layout = detail::check_logits_and_labels(k_name, logits, labels);
    prepared.class_weights = class_weights_of(options, prepared.layout.classes);
    prepared.logits = logits.contiguous();
    prepared.labels = labels.contiguous();
    const detail::LabelTally tally =
        detail::tally_labels(k_name, prepared.labels, prepared.layout.classes, options.ignore_label);
    for (std::size_t c = 0; c < tally.per_class.size(); ++c) {
        prepared.label_sums.weight_sum +=
            static_cast<double>(tally.per_class[c]) * static_cast<double>(prepared.class_weights[c]);
        prepared.label_sums.num_counted += tally.per_class[c];
    }
    prepared.label_sums.num_ignored = tally.num_ignored;
    return prepared;
}

// Σ w·nll over blocks [first_block, end_block) of the tile (block b: image b / blocks_per_image, its
// k_block voxels from (b mod blocks_per_image)·k_block); with `gradient`, also writes
// w·(softmax − one-hot)·gradient_scale there. Labels must have been checked (tally_labels). Every inner
// loop runs over up to k_block voxels of one class row, contiguous in memory, and vectorises; only the
// label gathers are scalar.
double fused_kernel(const Prepared& in, std::int32_t ignore, bool has_ignore, float* gradient, float gradient_scale,
                    std::int64_t first_block, std::int64_t end_block) {
    const std::int64_t classes = in.layout.classes;
    const std::int64_t spatial = in.layout.spatial;
    const float* logits = in.logits.data<float>();
    const std::int32_t* labels = in.labels.data<std::int32_t>();
    const float* class_weight = in.class_weights.data();

    alignas(64) std::int32_t label_class[k_block];
    alignas(64) float weight[k_block];
    alignas(64) float label_logit[k_block];
    alignas(64) float max_logit[k_block];
    alignas(64) float sum_exp[k_block];
    alignas(64) double nll_sum[k_block] = {};

    const std::int64_t blocks_per_image = (spatial + k_block - 1) / k_block;
    for (std::int64_t block = first_block; block < end_block; ++block) {
        const std::int64_t n = block / blocks_per_image, s0 = block % blocks_per_image * k_block;
        const float* z_image = logits + n * classes * spatial;
        float* g_image = gradient ? gradient + n * classes * spatial : nullptr;
        const std::int32_t* y_image = labels + n * spatial;
        const std::int64_t len = std::min(k_block, spatial - s0);
        const float* z = z_image + s0;  // z[c * spatial + j]: class c of voxel s0 + j
        const std::int32_t* y = y_image + s0;

        for (std::int64_t j = 0; j < len; ++j) {
            const bool ignored = has_ignore && y[j] == ignore;
            label_class[j] = ignored ? 0 : y[j];
            weight[j] = ignored ? 0.0f : class_weight[label_class[j]];
        }
        for (std::int64_t j = 0; j < len; ++j) label_logit[j] = z[label_class[j] * spatial + j];

        for (std::int64_t j = 0; j < len; ++j) max_logit[j] = z[j];
        for (std::int64_t c = 1; c < classes; ++c) {
            const float* row = z + c * spatial;
            for (std::int64_t j = 0; j < len; ++j) max_logit[j] = detail::max_f32(max_logit[j], row[j]);
        }
        for (std::int64_t j = 0; j < len; ++j) sum_exp[j] = 0.0f;
        if (gradient) {
            for (std::int64_t c = 0; c < classes; ++c) {
                const float* row = z + c * spatial;
                float* g = g_image + s0 + c * spatial;
                for (std::int64_t j = 0; j < len; ++j) {
                    const float e = detail::exp_f32(row[j] - max_logit[j]);
                    g[j] = e;
                    sum_exp[j] += e;
                }
            }
        } else {
            for (std::int64_t c = 0; c < classes; ++c) {
                const float* row = z + c * spatial;
                for (std::int64_t j = 0; j < len; ++j) sum_exp[j] += detail::exp_f32(row[j] - max_logit[j]);
            }
        }
        for (std::int64_t j = 0; j < len; ++j) {
            const float nll = (max_logit[j] - label_logit[j]) + detail::log_f32(sum_exp[j]);
            nll_sum[j] += static_cast<double>(weight[j]) * static_cast<double>(nll);
        }
        if (gradient) {
            // sum_exp becomes the factor that turns e^(z - max) into w·softmax·scale.
            for (std::int64_t j = 0; j < len; ++j) sum_exp[j] = weight[j] * gradient_scale / sum_exp[j];
            for (std::int64_t c = 0; c < classes; ++c) {
                float* g = g_image + s0 + c * spatial;
                for (std::int64_t j = 0; j < len; ++j) g[j] *= sum_exp[j];
            }
            float* g = g_image + s0;
            for (std::int64_t j = 0; j < len; ++j) g[label_class[j] * spatial + j] -= weight[j] * gradient_scale;
        }
    }
    double total = 0;
    for (std::int64_t j = 0; j < k_block; ++j) total += nll_sum[j];
    return total;
}

// The tile's blocks in fixed groups (core/fixed_groups.hpp), in parallel, their sums added in group
// order: the same bits on any thread count. Serial, the loss and its gradient were 2–4 ms of a 3D U-Net
// step (64³, 2 classes) in which the other host thread waited.
double run_kernel(const Prepared& prepared, const CrossEntropyOptions& options, float* gradient,
                  float gradient_scale) {
    const std::int64_t blocks = prepared.layout.batch * ((prepared.layout.spatial + k_block - 1) / k_block);
    std::array<double, k_fixed_groups> group_sums{};
    for_fixed_groups(blocks, blocks >= 4 * k_fixed_groups, [&](std::int64_t group, std::int64_t begin, std::int64_t end) {
        group_sums[static_cast<std::size_t>(group)] = fused_kernel(prepared, options.ignore_label.value_or(0),
                                                                   options.ignore_label.has_value(), gradient, gradient_scale, begin, end);
    });
    double total = 0;
    for (const double sum : group_sums) total += sum;
    return total;
}

float scale_for(double weight_sum) {
    return weight_sum > 0 ? static_cast<float>(1.0 / weight_sum) : 0.0f;
}

}  // namespace

CrossEntropyPartial& CrossEntropyPartial::operator+=(const CrossEntropyPartial& other) {
    weighted_nll_sum += other.weighted_nll_sum;
    weight_sum += other.weight_sum;
    num_counted += other.num_counted;
    num_ignored += other.num_ignored;
    return *this;
}

CrossEntropyPartial operator+(CrossEntropyPartial a, const CrossEntropyPartial& b) {
    a += b;
    return a;
}

double softmax_cross_entropy_value(const CrossEntropyPartial& total) {
    return total.weight_sum > 0 ? total.weighted_nll_sum / total.weight_sum : 0.0;
}

CrossEntropyPartial softmax_cross_entropy_partial(const Tensor& logits, const Tensor& labels,
                                                  const CrossEntropyOptions& options) {
    const Prepared prepared = prepare(logits, labels, options);
    CrossEntropyPartial partial = prepared.label_sums;
    partial.weighted_nll_sum = run_kernel(prepared, options, nullptr, 0.0f);
    return partial;
}

CrossEntropyResult finish_softmax_cross_entropy(const CrossEntropyPartial& total, const Tensor& logits,
                                                const Tensor& labels, const CrossEntropyOptions& options) {
    const Prepared prepared = prepare(logits, labels, options);
    CrossEntropyResult result;
    result.gradient = Tensor::empty(prepared.logits.shape(), DType::F32);
    run_kernel(prepared, options, result.gradient.data<float>(), scale_for(total.weight_sum));
    result.value = softmax_cross_entropy_value(total);
    result.weighted_nll_sum = total.weighted_nll_sum;
    result.weight_sum = total.weight_sum;
    result.num_counted = total.num_counted;
    result.num_ignored = total.num_ignored;
    return result;
}

CrossEntropyResult softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                         const CrossEntropyOptions& options) {
    const Prepared prepared = prepare(logits, labels, options);
    CrossEntropyResult result;
    result.gradient = Tensor::empty(prepared.logits.shape(), DType::F32);
    result.weighted_nll_sum = run_kernel(prepared, options, result.gradient.data<float>(),
                                         scale_for(prepared.label_sums.weight_sum));
    result.weight_sum = prepared.label_sums.weight_sum;
    result.num_counted = prepared.label_sums.num_counted;
    result.num_ignored = prepared.label_sums.num_ignored;
    result.value = result.weight_sum > 0 ? result.weighted_nll_sum / result.weight_sum : 0.0;
    return result;
}

}  // namespace tessera::loss
