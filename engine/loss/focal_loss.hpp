// Sigmoid focal loss (RetinaNet; the detection seed's weighted_sigmoid_focal, alpha 0.25, gamma 2).
//
// Every element is its own binary problem: logits x and targets t in {0, 1} have the same shape,
// [N, K, ...spatial] (K classes per anchor) or [M, K]. Per element, with p = sigmoid(x):
//
//   p_t = p if t = 1 else 1 − p,    α_t = α if t = 1 else 1 − α
//   loss = −α_t (1 − p_t)^γ log(p_t)
//   d loss / d x = ±α_t (1 − p_t)^γ (γ p_t log(p_t) − (1 − p_t))      (+ for t = 1, − for t = 0)
//   value = Σ w · loss / max(normalizer, 1)
//
// The normalizer (the number of positive anchors, over the whole batch) comes from the caller and is
// clamped to ≥ 1, so a batch without positives gives a finite value. Weights are optional: of the
// logits' shape, or of the logits' shape without axis 1 (one weight per anchor, shared by its K
// classes); a weight of 0 masks an ignored anchor. log(p_t) and (1 − p_t)^γ are computed from
// softplus(∓x), never from p itself, so |x| = 100 stays finite and exact.
//
//   FocalLossResult loss = sigmoid_focal_loss(logits, targets, /*normalizer*/ 12);  // [8, 90, 64, 64]
//   // loss.value, loss.gradient (like logits), loss.num_positive
//
// On tiles (see loss/losses.hpp): the partial sum is Σ w·loss; the gradient of a tile needs only the
// global normalizer, so finish is exact for any split.
//
//   FocalLossPartial total = sigmoid_focal_loss_partial(logits_a, targets_a) + sigmoid_focal_loss_partial(logits_b, targets_b);
//   FocalLossResult tile_a = finish_sigmoid_focal_loss(total, /*normalizer*/ total.num_positive, logits_a, targets_a);
#pragma once

#include "tensor/tensor.hpp"

#include <cstdint>

namespace tessera::loss {

struct FocalLossOptions {
    double alpha = 0.25;  // weight of positives, in [0, 1]
    double gamma = 2.0;   // focusing exponent, ≥ 0 (0 gives α-weighted binary cross-entropy)
};

struct FocalLossPartial {
    double loss_sum = 0;            // Σ w · loss
    std::int64_t num_positive = 0;  // elements with t = 1 and a non-zero weight
    std::int64_t num_elements = 0;

    FocalLossPartial& operator+=(const FocalLossPartial& other);
};
FocalLossPartial operator+(FocalLossPartial a, const FocalLossPartial& b);

struct FocalLossResult {
    double value = 0;
    Tensor gradient;      // d value / d logits, like the logits (of the tile, in finish)
    double loss_sum = 0;  // Σ w · loss (over everything, in finish)
    double normalizer = 1;  // as used: max(normalizer, 1)
    std::int64_t num_positive = 0;
};

// `weights`: undefined (all 1), the logits' shape, or the logits' shape without axis 1.
FocalLossResult sigmoid_focal_loss(const Tensor& logits, const Tensor& targets, double normalizer,
                                   const FocalLossOptions& options = {}, const Tensor& weights = {});

FocalLossPartial sigmoid_focal_loss_partial(const Tensor& logits, const Tensor& targets,
                                            const FocalLossOptions& options = {}, const Tensor& weights = {});
double sigmoid_focal_loss_value(const FocalLossPartial& total, double normalizer);
FocalLossResult finish_sigmoid_focal_loss(const FocalLossPartial& total, double normalizer, const Tensor& logits,
                                          const Tensor& targets, const FocalLossOptions& options = {},
                                          const Tensor& weights = {});

}  // namespace tessera::loss
