// The engine's losses and metrics, and how they run on a batch split over several cores.
//
//   softmax_cross_entropy  loss/cross_entropy.hpp   logits [N, C, ...] f32, labels [N, ...] i32
//   dice_loss              loss/dice_loss.hpp       logits [N, C, ...] f32, labels [N, ...] i32
//   sigmoid_focal_loss     loss/focal_loss.hpp      logits, targets [N, K, ...] or [M, K] f32
//   smooth_l1_loss         loss/smooth_l1_loss.hpp  prediction, target [N, 4, ...] or [M, 4] f32
//   confusion_matrix, segmentation_scores           loss/metrics.hpp
//
// Every loss returns a struct with `value`, `gradient` (d value / d input, the input's shape) and
// counts for reporting. Inputs may be views; they are read as if contiguous.
//
// The tile contract. A loss is a reduction over the whole batch, but under spatial partitioning each
// core holds only its tile. So each loss X also comes in two parts:
//
//   XPartial X_partial(tile inputs)                 sums over the tile that add across tiles
//   XResult  finish_X(total, tile inputs)           the value from the summed partials, and the
//                                                   tile's gradient computed with those totals
//
// and for any split of the batch into tiles (along any axis but C, even or uneven):
//
//   X(whole).value                 == finish_X(Σ_tiles X_partial(tile), tile).value
//   X(whole).gradient on a tile    == finish_X(Σ_tiles X_partial(tile), tile).gradient
//
// up to float rounding of the sums (the tests hold it to a relative 1e-5). Metrics are the same with
// integer counts, which add exactly.
//
// Worked example: 2 images of 3 classes, 10 × 8 pixels, split in H into rows 0–5 and 6–9 over two
// cores; each core computes its sums, an all-reduce adds them, and each core finishes its own tile.
//
//   using namespace tessera;
//   Tensor logits = ...;                                 // [2, 3, 10, 8] f32
//   Tensor labels = ...;                                 // [2, 10, 8] i32
//   loss::CrossEntropyOptions options{.class_weights = {0.5f, 1.0f, 2.0f}, .ignore_label = 255};
//
//   Tensor logits_0 = logits.view_box({0, 0, 0, 0}, {2, 3, 6, 8}), labels_0 = labels.view_box({0, 0, 0}, {2, 6, 8});
//   Tensor logits_1 = logits.view_box({0, 0, 6, 0}, {2, 3, 4, 8}), labels_1 = labels.view_box({0, 6, 0}, {2, 4, 8});
//
//   loss::CrossEntropyPartial part_0 = loss::softmax_cross_entropy_partial(logits_0, labels_0, options);  // core 0
//   loss::CrossEntropyPartial part_1 = loss::softmax_cross_entropy_partial(logits_1, labels_1, options);  // core 1
//   loss::CrossEntropyPartial total = part_0 + part_1;                                                  // all-reduce
//   // total.weighted_nll_sum = Σ w·nll over all 160 pixels, total.weight_sum = Σ w
//
//   loss::CrossEntropyResult tile_0 = loss::finish_softmax_cross_entropy(total, logits_0, labels_0, options);
//   loss::CrossEntropyResult tile_1 = loss::finish_softmax_cross_entropy(total, logits_1, labels_1, options);
//
//   loss::CrossEntropyResult whole = loss::softmax_cross_entropy(logits, labels, options);
//   // whole.value == tile_0.value == tile_1.value == total.weighted_nll_sum / total.weight_sum
//   // whole.gradient.view_box({0, 0, 0, 0}, {2, 3, 6, 8}) == tile_0.gradient   ([2, 3, 6, 8])
//   // whole.gradient.view_box({0, 0, 6, 0}, {2, 3, 4, 8}) == tile_1.gradient   ([2, 3, 4, 8])
//
// The Dice loss needs the totals for any gradient (each class's Σ p, Σ [y = c] and intersection), so
// there the partial/finish split is the only way to tile it; the focal and smooth L1 gradients need
// only the caller's global normalizer.
#pragma once

#include "loss/cross_entropy.hpp"
#include "loss/dice_loss.hpp"
#include "loss/focal_loss.hpp"
#include "loss/metrics.hpp"
#include "loss/smooth_l1_loss.hpp"
