// Soft Dice loss on softmax probabilities, for segmentation.
//
//   p = softmax over classes of the logits, per voxel
//   dice_c = (2 I_c + ε) / (P_c + G_c + ε),   I_c = Σ_i p_ic [y_i = c],  P_c = Σ_i p_ic,  G_c = Σ_i [y_i = c]
//   value  = 1 − (1/K) Σ_{c in K} dice_c      K: every class, or classes 1..C−1 with exclude_background
//
// The sums run over the whole batch (N and every spatial axis together) and skip voxels with the
// ignore label. The gradient goes back through the softmax: with g_c = d value / d p_c,
// d value / d z_k = p_k (g_k − Σ_c p_c g_c); an excluded background class still moves the other
// probabilities, so its logits get a gradient too. ε = 1e-5 keeps a class that is absent from the
// labels and predicted nowhere at dice ≈ 1 instead of 0/0.
//
//   DiceLossOptions options;
//   options.exclude_background = true;
//   DiceLossResult loss = dice_loss(logits, labels, options);   // logits [2, 4, 32, 64, 64], labels [2, 32, 64, 64]
//   // loss.value, loss.gradient (like logits), loss.class_dice[c]
//
// On tiles (the contract is in loss/losses.hpp) the partial sums are I_c, P_c and G_c; finish needs
// all three summed over every tile before any tile's gradient can be computed.
//
//   DicePartial total = dice_loss_partial(logits_a, labels_a, options) + dice_loss_partial(logits_b, labels_b, options);
//   DiceLossResult tile_a = finish_dice_loss(total, logits_a, labels_a, options);
#pragma once

#include "tensor/tensor.hpp"

#include <cstdint>
#include <optional>
#include <vector>

namespace tessera::loss {

struct DiceLossOptions {
    double epsilon = 1e-5;                     // > 0
    bool exclude_background = false;           // leave class 0 out of the mean (needs C ≥ 2)
    std::optional<std::int32_t> ignore_label;  // voxels with this label are left out of every sum
};

// Per-class sums over the voxels of a tile; add them over tiles. A default-constructed partial is
// empty and adds as zero.
struct DicePartial {
    std::vector<double> intersection;     // [C] I_c = Σ p_c·[y = c]
    std::vector<double> probability_sum;  // [C] P_c = Σ p_c
    std::vector<std::int64_t> label_count;  // [C] G_c = Σ [y = c]
    std::int64_t num_counted = 0;         // voxels with a label other than the ignore label
    std::int64_t num_ignored = 0;

    std::int64_t num_classes() const { return static_cast<std::int64_t>(intersection.size()); }
    DicePartial& operator+=(const DicePartial& other);  // both empty or both of C classes
};
DicePartial operator+(DicePartial a, const DicePartial& b);

struct DiceLossResult {
    double value = 0;
    Tensor gradient;                 // d value / d logits, like the logits (of the tile, in finish)
    std::vector<double> class_dice;  // [C] dice_c of every class, excluded background included
    std::int64_t num_counted = 0;
    std::int64_t num_ignored = 0;
};

DiceLossResult dice_loss(const Tensor& logits, const Tensor& labels, const DiceLossOptions& options = {});

DicePartial dice_loss_partial(const Tensor& logits, const Tensor& labels, const DiceLossOptions& options = {});
// The value (and per-class dice) from the summed partials.
double dice_loss_value(const DicePartial& total, const DiceLossOptions& options = {});
std::vector<double> class_dice(const DicePartial& total, const DiceLossOptions& options = {});
// This tile's gradient given the partials summed over every tile, with the value and class dice.
DiceLossResult finish_dice_loss(const DicePartial& total, const Tensor& logits, const Tensor& labels,
                                const DiceLossOptions& options = {});

}  // namespace tessera::loss
