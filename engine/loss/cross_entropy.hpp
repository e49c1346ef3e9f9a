// Softmax cross-entropy over classes, fused: one pass over the logits gives the value and the gradient.
//
//   value = Σ_i w[y_i] · (−log softmax(z_i)[y_i]) / Σ_i w[y_i]        (PyTorch's weighted mean)
//   d value / d z_i[c] = w[y_i] · (softmax(z_i)[c] − [c = y_i]) / Σ_j w[y_j]
//
// i runs over the voxels whose label is not the ignore label; w is 1 for every class unless class
// weights are given. Logits are [N, C, ...spatial] f32 (any spatial rank, [N, C] too), labels
// [N, ...spatial] i32. The log-sum-exp is taken about each voxel's largest logit, so ±100 logits give
// finite values and gradients. When nothing is counted (all voxels ignored, or all weights 0) the
// value and gradient are 0, not NaN.
//
//   CrossEntropyOptions options;
//   options.class_weights = {0.2f, 1.0f, 1.0f};   // one per class
//   options.ignore_label = 255;
//   CrossEntropyResult loss = softmax_cross_entropy(logits, labels, options);  // [4, 3, 256, 256]
//   // loss.value, loss.gradient [4, 3, 256, 256], loss.weight_sum, loss.num_counted
//
// On tiles (see loss/losses.hpp for the contract): the partial sums are Σ w·nll and Σ w; finish
// divides them and, with the global Σ w, gives each tile its block of the whole gradient.
//
//   CrossEntropyPartial total = softmax_cross_entropy_partial(logits_a, labels_a, options)
//                             + softmax_cross_entropy_partial(logits_b, labels_b, options);
//   CrossEntropyResult tile_a = finish_softmax_cross_entropy(total, logits_a, labels_a, options);
//   // tile_a.value == loss.value; tile_a.gradient == the tile-a block of loss.gradient
#pragma once

#include "tensor/tensor.hpp"

#include <cstdint>
#include <optional>
#include <vector>

namespace tessera::loss {

struct CrossEntropyOptions {
    std::vector<float> class_weights;          // empty: every class weighs 1; else one finite w ≥ 0 per class
    std::optional<std::int32_t> ignore_label;  // voxels with this label contribute nothing
};

// Sums over the voxels of a tile; add them over tiles (an all-reduce across cores).
struct CrossEntropyPartial {
    double weighted_nll_sum = 0;   // Σ w[y_i] · (−log p_i[y_i])
    double weight_sum = 0;         // Σ w[y_i]
    std::int64_t num_counted = 0;  // voxels with a label other than the ignore label
    std::int64_t num_ignored = 0;  // voxels with the ignore label

    CrossEntropyPartial& operator+=(const CrossEntropyPartial& other);
};
CrossEntropyPartial operator+(CrossEntropyPartial a, const CrossEntropyPartial& b);

struct CrossEntropyResult {
    double value = 0;
    Tensor gradient;               // d value / d logits: [N, C, ...] like the logits (of the tile, in finish)
    double weighted_nll_sum = 0;   // the numerator ...
    double weight_sum = 0;         // ... and denominator of value (over everything, in finish)
    std::int64_t num_counted = 0;
    std::int64_t num_ignored = 0;
};

// The whole tensor: value and gradient in one fused pass (labels first, for Σ w).
CrossEntropyResult softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                         const CrossEntropyOptions& options = {});

// One tile: its sums only.
CrossEntropyPartial softmax_cross_entropy_partial(const Tensor& logits, const Tensor& labels,
                                                  const CrossEntropyOptions& options = {});
// The value from the summed partials (0 when their weight sum is 0).
double softmax_cross_entropy_value(const CrossEntropyPartial& total);
// The value, the totals, and this tile's gradient given the totals summed over all tiles.
CrossEntropyResult finish_softmax_cross_entropy(const CrossEntropyPartial& total, const Tensor& logits,
                                                const Tensor& labels, const CrossEntropyOptions& options = {});

}  // namespace tessera::loss
