#include "loss/smooth_l1_loss.hpp"

#include "loss/class_layout.hpp"
#include "loss/elementwise_rows.hpp"

#include <algorithm>
#include <cmath>

namespace tessera::loss {

namespace {

constexpr const char* k_name = "smooth_l1_loss";

detail::ElementwiseInputs prepare(const Tensor& prediction, const Tensor& target, const SmoothL1Options& options,
                                  const Tensor& weights) {
    TESSERA_CHECK(std::isfinite(options.delta) && options.delta > 0,
                  k_name << ": expected a positive delta, got " << options.delta);
    return detail::prepare_elementwise(k_name, prediction, "prediction", target, "target", weights);
}

double clamped_normalizer(double normalizer) {
    TESSERA_CHECK(std::isfinite(normalizer), k_name << ": expected a finite normalizer, got " << normalizer);
    return std::max(normalizer, 1.0);
}

struct Sums {
    double loss_sum = 0;
    double weight_sum = 0;
};

template <bool kGradient>
Sums huber_kernel(const detail::ElementwiseInputs& in, float delta, float gradient_scale, float* gradient) {
    const float* prediction = in.input.data<float>();
    const float* target = in.other.data<float>();
    alignas(64) double loss_lanes[detail::k_elementwise_block] = {};
    alignas(64) double weight_lanes[detail::k_elementwise_block] = {};
    const float half_delta = 0.5f * delta;
    detail::for_each_block(in, [&](std::int64_t offset, std::int64_t len, const float* w) {
        const float* p = prediction + offset;
        const float* t = target + offset;
        float* g = kGradient ? gradient + offset : nullptr;
        for (std::int64_t j = 0; j < len; ++j) {
            const float x = p[j] - t[j];
            const float magnitude = std::fabs(x);
            const bool is_quadratic = magnitude <= delta;
            const float loss = is_quadratic ? 0.5f * x * x : delta * (magnitude - half_delta);
            loss_lanes[j] += static_cast<double>(w[j]) * static_cast<double>(loss);
            weight_lanes[j] += static_cast<double>(w[j]);
            if constexpr (kGradient) {
                const float clipped = std::min(std::max(x, -delta), delta);  // x, or ±δ beyond δ
                g[j] = clipped * (w[j] * gradient_scale);
            }
        }
    });
    Sums sums;
    for (std::int64_t j = 0; j < detail::k_elementwise_block; ++j) {
        sums.loss_sum += loss_lanes[j];
        sums.weight_sum += weight_lanes[j];
    }
    return sums;
}

}  // namespace

SmoothL1Partial& SmoothL1Partial::operator+=(const SmoothL1Partial& other) {
    loss_sum += other.loss_sum;
    weight_sum += other.weight_sum;
    num_elements += other.num_elements;
    return *this;
}

SmoothL1Partial operator+(SmoothL1Partial a, const SmoothL1Partial& b) {
    a += b;
    return a;
}

double smooth_l1_loss_value(const SmoothL1Partial& total, double normalizer) {
    return total.loss_sum / clamped_normalizer(normalizer);
}

SmoothL1Partial smooth_l1_loss_partial(const Tensor& prediction, const Tensor& target,
                                       const SmoothL1Options& options, const Tensor& weights) {
    const detail::ElementwiseInputs in = prepare(prediction, target, options, weights);
    const Sums sums = huber_kernel<false>(in, static_cast<float>(options.delta), 0.0f, nullptr);
    SmoothL1Partial partial;
    partial.loss_sum = sums.loss_sum;
    partial.weight_sum = sums.weight_sum;
    partial.num_elements = in.input.num_elements();
    return partial;
}

SmoothL1Result finish_smooth_l1_loss(const SmoothL1Partial& total, double normalizer, const Tensor& prediction,
                                     const Tensor& target, const SmoothL1Options& options, const Tensor& weights) {
    const detail::ElementwiseInputs in = prepare(prediction, target, options, weights);
    SmoothL1Result result;
    result.normalizer = clamped_normalizer(normalizer);
    result.gradient = Tensor::empty(in.input.shape(), DType::F32);
    huber_kernel<true>(in, static_cast<float>(options.delta), static_cast<float>(1.0 / result.normalizer),
                       result.gradient.data<float>());
    result.loss_sum = total.loss_sum;
    result.weight_sum = total.weight_sum;
    result.value = total.loss_sum / result.normalizer;
    return result;
}

SmoothL1Result smooth_l1_loss(const Tensor& prediction, const Tensor& target, double normalizer,
                              const SmoothL1Options& options, const Tensor& weights) {
    const detail::ElementwiseInputs in = prepare(prediction, target, options, weights);
    SmoothL1Result result;
    result.normalizer = clamped_normalizer(normalizer);
    result.gradient = Tensor::empty(in.input.shape(), DType::F32);
    const Sums sums = huber_kernel<true>(in, static_cast<float>(options.delta),
                                         static_cast<float>(1.0 / result.normalizer), result.gradient.data<float>());
    result.loss_sum = sums.loss_sum;
    result.weight_sum = sums.weight_sum;
    result.value = sums.loss_sum / result.normalizer;
    return result;
}

}  // namespace tessera::loss
