// RetinaNet's loss on its heads' outputs, as the Cloud TPU model computes it (retinanet_model.py):
//
//   classification = Σ_levels Σ w · focal(class logits, one-hot targets)       / N_pos
//   box            = Σ_levels Σ w · huber_δ(box outputs − box targets)         / (4 · N_pos)
//   value          = classification + box_loss_weight · box
//
// α 0.25, γ 2, δ 0.1 and box_loss_weight 50 by default (the TPU configuration). N_pos is the number of
// positive anchors in the whole batch; the class weights are 0 on ignored anchors, the box weights 1 on
// positives only (anchor_labeler.hpp). N_pos is clamped to ≥ 1 as the engine's losses do (the TPU
// model adds 1 instead, which differs by a factor (N_pos + 1) / N_pos).
//
//   HeadTargets targets = to_head_layout(per_image_targets, anchors);
//   DetectionLossResult loss = detection_loss(class_outputs, box_outputs, targets);   // per level
//   executor.backward(...)   // loss.class_gradients[l], loss.box_gradients[l], like the outputs
//
// On tiles (the tile contract of loss/losses.hpp): each core sums its tile's part — its cells' outputs
// against its cells' targets, with its own count of positives — the partials are all-reduced, and each
// core finishes its tile's gradients with the totals. For any split of the cells into tiles,
// finish(Σ partials) gives the whole batch's value and, on each tile, its part of the gradient.
#pragma once

#include "detection/anchor_labeler.hpp"
#include "loss/focal_loss.hpp"
#include "loss/smooth_l1_loss.hpp"
#include "tensor/tensor.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace tessera::detection {

struct DetectionLossOptions {
    loss::FocalLossOptions focal;                       // α 0.25, γ 2
    loss::SmoothL1Options box{.delta = 0.1};            // TF's huber_loss δ
    double box_loss_weight = 50.0;
};

struct DetectionLossPartial {
    double classification_sum = 0;  // Σ w · focal over the tile's class outputs
    double box_sum = 0;             // Σ w · huber over the tile's box outputs
    std::int64_t num_positive = 0;  // the tile's positive anchors

    DetectionLossPartial& operator+=(const DetectionLossPartial& other);
};
DetectionLossPartial operator+(DetectionLossPartial a, const DetectionLossPartial& b);

struct DetectionLossResult {
    double value = 0;
    double classification_loss = 0;  // the focal part, normalised
    double box_loss = 0;             // the box part, normalised, before box_loss_weight
    std::int64_t num_positive = 0;
    std::vector<Tensor> class_gradients;  // per level, d value / d class outputs (of the tile, in finish)
    std::vector<Tensor> box_gradients;    // per level, d value / d box outputs
};

// class_outputs[l]: [N, A·K, H_l, W_l] f32, box_outputs[l]: [N, A·4, H_l, W_l] f32, targets.levels[l]
// of the same shapes (a tile's cells, or the whole maps).
DetectionLossPartial detection_loss_partial(std::span<const Tensor> class_outputs, std::span<const Tensor> box_outputs,
                                            const HeadTargets& targets, const DetectionLossOptions& options = {});
DetectionLossResult finish_detection_loss(const DetectionLossPartial& total, std::span<const Tensor> class_outputs,
                                          std::span<const Tensor> box_outputs, const HeadTargets& targets,
                                          const DetectionLossOptions& options = {});
// A tile's part in one pass, when the batch's positive count is known before its targets are built (a
// mesh all-reduces the count from the matches): the tile's sums for the all-reduce (partial) and its
// gradients, equal to finish_detection_loss's on the tile. The targets need not outlive the call, so a
// mesh never holds every core's at once. (value and the normalised parts stay 0: they need the sums.)
struct DetectionTileLoss {
    DetectionLossPartial partial;
    std::vector<Tensor> class_gradients;  // per level, like finish_detection_loss's
    std::vector<Tensor> box_gradients;
};
DetectionTileLoss detection_loss_on_tile(std::span<const Tensor> class_outputs, std::span<const Tensor> box_outputs,
                                         const HeadTargets& targets, std::int64_t batch_num_positive,
                                         const DetectionLossOptions& options = {});
// The batch's loss from its summed partials (num_positive the batch's), as finish_detection_loss gives it.
DetectionLossResult detection_loss_value(const DetectionLossPartial& total, const DetectionLossOptions& options = {});

DetectionLossResult detection_loss(std::span<const Tensor> class_outputs, std::span<const Tensor> box_outputs,
                                   const HeadTargets& targets, const DetectionLossOptions& options = {});

}  // namespace tessera::detection
