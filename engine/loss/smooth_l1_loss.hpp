// Smooth L1 (Huber) loss for box regression, in TensorFlow's huber_loss form (the detection seed's
// weighted_smooth_l1; RetinaNet on TPU uses δ = 0.1):
//
//   x = prediction − target
//   loss(x) = 0.5 x²               if |x| ≤ δ
//             δ (|x| − 0.5 δ)      otherwise
//   d loss / d prediction = x if |x| ≤ δ, else δ·sign(x)
//   value = Σ w · loss / max(normalizer, 1)
//
// This is δ times PyTorch's smooth_l1_loss with beta = δ (which divides the quadratic part by β);
// with δ = 1 the two agree. Prediction and target are f32 of the same shape, [N, 4, ...] or [M, 4]
// (the box code on axis 1). Weights are optional: of the prediction's shape, or without axis 1 (one
// per anchor, shared by its box code); a weight of 0 masks an anchor. The normalizer (e.g. 4 × the
// number of positive anchors) comes from the caller and is clamped to ≥ 1, as for the focal loss.
//
//   SmoothL1Result loss = smooth_l1_loss(box_outputs, box_targets, /*normalizer*/ 4.0 * num_positive,
//                                        SmoothL1Options{0.1}, positive_mask);   // mask [N, H, W]
//
// On tiles (see loss/losses.hpp): the partial sum is Σ w·loss; the gradient needs only the normalizer.
//
//   SmoothL1Partial total = smooth_l1_loss_partial(pred_a, target_a) + smooth_l1_loss_partial(pred_b, target_b);
//   SmoothL1Result tile_a = finish_smooth_l1_loss(total, normalizer, pred_a, target_a);
#pragma once

#include "tensor/tensor.hpp"

#include <cstdint>

namespace tessera::loss {

struct SmoothL1Options {
    double delta = 0.1;  // δ > 0: where the quadratic part turns linear
};

struct SmoothL1Partial {
    double loss_sum = 0;    // Σ w · loss
    double weight_sum = 0;  // Σ w (the number of elements without weights)
    std::int64_t num_elements = 0;

    SmoothL1Partial& operator+=(const SmoothL1Partial& other);
};
SmoothL1Partial operator+(SmoothL1Partial a, const SmoothL1Partial& b);

struct SmoothL1Result {
    double value = 0;
    Tensor gradient;        // d value / d prediction, like the prediction (of the tile, in finish)
    double loss_sum = 0;    // Σ w · loss (over everything, in finish)
    double weight_sum = 0;
    double normalizer = 1;  // as used: max(normalizer, 1)
};

// `weights`: undefined (all 1), the prediction's shape, or the prediction's shape without axis 1.
SmoothL1Result smooth_l1_loss(const Tensor& prediction, const Tensor& target, double normalizer,
                              const SmoothL1Options& options = {}, const Tensor& weights = {});

SmoothL1Partial smooth_l1_loss_partial(const Tensor& prediction, const Tensor& target,
                                       const SmoothL1Options& options = {}, const Tensor& weights = {});
double smooth_l1_loss_value(const SmoothL1Partial& total, double normalizer);
SmoothL1Result finish_smooth_l1_loss(const SmoothL1Partial& total, double normalizer, const Tensor& prediction,
                                     const Tensor& target, const SmoothL1Options& options = {},
                                     const Tensor& weights = {});

}  // namespace tessera::loss
