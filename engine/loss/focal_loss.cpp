#include "loss/focal_loss.hpp"

#include "loss/class_layout.hpp"
#include "loss/elementwise_rows.hpp"
#include "loss/fast_math.hpp"

#include <algorithm>
#include <cmath>

namespace tessera::loss {

namespace {

constexpr const char* k_name = "sigmoid_focal_loss";

struct Prepared {
    detail::ElementwiseInputs inputs;
    float alpha = 0.25f;
    float gamma = 2.0f;
};

Prepared prepare(const Tensor& logits, const Tensor& targets, const FocalLossOptions& options,
                 const Tensor& weights) {
    TESSERA_CHECK(options.alpha >= 0 && options.alpha <= 1,
                  k_name << ": expected alpha in [0, 1], got " << options.alpha);
    TESSERA_CHECK(std::isfinite(options.gamma) && options.gamma >= 0,
                  k_name << ": expected a finite gamma ≥ 0, got " << options.gamma);
    Prepared prepared;
    prepared.inputs = detail::prepare_elementwise(k_name, logits, "logits", targets, "targets", weights);
    prepared.alpha = static_cast<float>(options.alpha);
    prepared.gamma = static_cast<float>(options.gamma);
    return prepared;
}

double clamped_normalizer(double normalizer) {
    TESSERA_CHECK(std::isfinite(normalizer), k_name << ": expected a finite normalizer, got " << normalizer);
    return std::max(normalizer, 1.0);
}

[[noreturn]] void throw_bad_target(const detail::ElementwiseInputs& in, std::int64_t flat_index) {
    const float target = in.other.data<float>()[flat_index];
    TESSERA_REJECT(k_name << ": expected targets of 0 or 1, got " << target << " at targets"
                          << detail::index_to_string(in.input.shape(), flat_index));
}

// Σ w·loss over the tile and the count of weighted positives; with kGradient, also writes
// w·(d loss / d x)·gradient_scale. kSquare: gamma is 2, (1 − p_t)^γ is a product, not an exp.
template <bool kGradient, bool kSquare>
double focal_kernel(const Prepared& prepared, float gradient_scale, float* gradient, std::int64_t* num_positive) {
    const detail::ElementwiseInputs& in = prepared.inputs;
    const float alpha = prepared.alpha;
    const float gamma = prepared.gamma;
    const float* logits = in.input.data<float>();
    const float* targets = in.other.data<float>();
    alignas(64) double loss_lanes[detail::k_elementwise_block] = {};
    std::int64_t positives = 0;

    detail::for_each_block(in, [&](std::int64_t offset, std::int64_t len, const float* w) {
        const float* x = logits + offset;
        const float* t = targets + offset;
        // Counts as int32 with & rather than &&: both keep these loops free of branches.
        std::int32_t bad = 0;
        std::int32_t block_positives = 0;
        for (std::int64_t j = 0; j < len; ++j) {
            bad += static_cast<std::int32_t>(t[j] != 0.0f) & static_cast<std::int32_t>(t[j] != 1.0f);
            block_positives += static_cast<std::int32_t>(t[j] == 1.0f) & static_cast<std::int32_t>(w[j] != 0.0f);
        }
        if (bad != 0) {
            for (std::int64_t j = 0; j < len; ++j) {
                if (t[j] != 0.0f && t[j] != 1.0f) throw_bad_target(in, offset + j);
            }
        }
        positives += block_positives;

        float* g = kGradient ? gradient + offset : nullptr;
        for (std::int64_t j = 0; j < len; ++j) {
            const bool positive = t[j] == 1.0f;
            const float s = positive ? x[j] : -x[j];  // the logit of the true outcome
            const float alpha_t = positive ? alpha : 1.0f - alpha;
            const float e = detail::exp_f32(-std::fabs(s));  // in (0, 1]
            const float softplus_tail = detail::log1p_f32(e);
            const float inverse = 1.0f / (1.0f + e);
            const float p_t = s >= 0.0f ? inverse : e * inverse;
            const float q_t = s >= 0.0f ? e * inverse : inverse;       // 1 − p_t, without cancellation
            const float log_p = -(std::max(-s, 0.0f) + softplus_tail);  // log σ(s) = −softplus(−s)
            const float log_q = -(std::max(s, 0.0f) + softplus_tail);   // log σ(−s)
            const float modulator = kSquare ? q_t * q_t : detail::exp_f32(gamma * log_q);
            const float loss = -alpha_t * modulator * log_p;
            loss_lanes[j] += static_cast<double>(w[j]) * static_cast<double>(loss);
            if constexpr (kGradient) {
                const float d_loss_d_s = alpha_t * modulator * (gamma * p_t * log_p - q_t);
                g[j] = (positive ? d_loss_d_s : -d_loss_d_s) * (w[j] * gradient_scale);
            }
        }
    });
    if (num_positive) *num_positive = positives;
    double total = 0;
    for (double lane : loss_lanes) total += lane;
    return total;
}

template <bool kGradient>
double run_kernel(const Prepared& prepared, float gradient_scale, float* gradient, std::int64_t* num_positive) {
    if (prepared.gamma == 2.0f) return focal_kernel<kGradient, true>(prepared, gradient_scale, gradient, num_positive);
    return focal_kernel<kGradient, false>(prepared, gradient_scale, gradient, num_positive);
}

}  // namespace

FocalLossPartial& FocalLossPartial::operator+=(const FocalLossPartial& other) {
    loss_sum += other.loss_sum;
    num_positive += other.num_positive;
    num_elements += other.num_elements;
    return *this;
}

FocalLossPartial operator+(FocalLossPartial a, const FocalLossPartial& b) {
    a += b;
    return a;
}

double sigmoid_focal_loss_value(const FocalLossPartial& total, double normalizer) {
    return total.loss_sum / clamped_normalizer(normalizer);
}

FocalLossPartial sigmoid_focal_loss_partial(const Tensor& logits, const Tensor& targets,
                                            const FocalLossOptions& options, const Tensor& weights) {
    const Prepared prepared = prepare(logits, targets, options, weights);
    FocalLossPartial partial;
    partial.loss_sum = run_kernel<false>(prepared, 0.0f, nullptr, &partial.num_positive);
    partial.num_elements = prepared.inputs.input.num_elements();
    return partial;
}

FocalLossResult finish_sigmoid_focal_loss(const FocalLossPartial& total, double normalizer, const Tensor& logits,
                                          const Tensor& targets, const FocalLossOptions& options,
                                          const Tensor& weights) {
    const Prepared prepared = prepare(logits, targets, options, weights);
    FocalLossResult result;
    result.normalizer = clamped_normalizer(normalizer);
    result.gradient = Tensor::empty(prepared.inputs.input.shape(), DType::F32);
    run_kernel<true>(prepared, static_cast<float>(1.0 / result.normalizer), result.gradient.data<float>(), nullptr);
    result.loss_sum = total.loss_sum;
    result.value = total.loss_sum / result.normalizer;
    result.num_positive = total.num_positive;
    return result;
}

FocalLossResult sigmoid_focal_loss(const Tensor& logits, const Tensor& targets, double normalizer,
                                   const FocalLossOptions& options, const Tensor& weights) {
    const Prepared prepared = prepare(logits, targets, options, weights);
    FocalLossResult result;
    result.normalizer = clamped_normalizer(normalizer);
    result.gradient = Tensor::empty(prepared.inputs.input.shape(), DType::F32);
    result.loss_sum = run_kernel<true>(prepared, static_cast<float>(1.0 / result.normalizer),
                                       result.gradient.data<float>(), &result.num_positive);
    result.value = result.loss_sum / result.normalizer;
    return result;
}

}  // namespace tessera::loss
