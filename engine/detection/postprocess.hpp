// RetinaNet inference post-processing: the heads' outputs of a batch → scored boxes per image, with the
// semantics of torchvision 0.14's RetinaNet.postprocess_detections.
//
// Per image and per level l (anchors and the heads' layout as in anchors.hpp):
//   1. score = sigmoid(logit) for all A·K·H_l·W_l logits, flattened in (cell row, cell column, anchor,
//      class) order: flat index = ((row·W_l + column)·A + anchor)·K + class (torchvision's [HWA, K]);
//   2. keep scores > score_threshold, then the top min(top_k_per_level, kept) by score;
//   3. decode each kept candidate's box from its anchor's codes (box_coder.hpp, with its clamp) and clip
//      it to the image, x to [0, image_width] and y to [0, image_height].
// The levels' candidates are concatenated, suppressed per class (batched NMS, IoU > nms_iou_threshold)
// and the first max_detections are returned, highest score first.
//
// Equal scores (torchvision's topk and sort leave their order unspecified): lower flat index first within
// a level, lower level first across levels, i.e. lower (global anchor index, class). NaN logits never pass
// the threshold (as in torchvision); a candidate whose codes decode to NaN is an error.
// Only the candidates are decoded, and selection keeps at most 2·top_k_per_level of them in memory, so a
// 1280² input (306,900 anchors × K classes) costs one pass over the logits.
//
//   AnchorSet anchors = make_anchors(1280, 1280);
//   std::vector<Tensor> class_outputs = ...;  // per level [N, A·K, H_l, W_l] f32 logits
//   std::vector<Tensor> box_outputs = ...;    // per level [N, A·4, H_l, W_l] f32 codes (dx, dy, dw, dh)
//   std::vector<std::vector<ScoredBox>> detections = postprocess_detections(class_outputs, box_outputs, anchors);
//   for (const ScoredBox& detection : detections[0]) use(detection);  // image 0, highest score first
#pragma once

#include "detection/anchors.hpp"
#include "detection/box.hpp"
#include "detection/box_coder.hpp"
#include "tensor/tensor.hpp"

#include <cstddef>
#include <vector>

namespace tessera::detection {

struct PostprocessOptions {
    float score_threshold = 0.05f;       // keep sigmoid(logit) > this; in [0, 1]
    std::size_t top_k_per_level = 1000;  // candidates per image and level, before NMS (torchvision's topk_candidates)
    float nms_iou_threshold = 0.5f;      // per class, suppress when IoU > this; in [0, 1]
    // Per image after NMS. torchvision's detections_per_img defaults to 300; Tessera's default is 100, the
    // TPU RetinaNet's and COCO evaluation's maxDets.
    std::size_t max_detections = 100;
    // Must be the weights the training targets were encoded with (anchor_labeler's, (10, 10, 5, 5) by
    // default). torchvision's RetinaNet uses (1, 1, 1, 1); its Faster R-CNN uses (10, 10, 5, 5).
    BoxCoderWeights box_coder_weights{};
};

// class_outputs[l]: [N, A·K, H_l, W_l] f32 logits and box_outputs[l]: [N, A·4, H_l, W_l] f32 codes, one
// of each per level of `anchors` (same N and K on every level). Returns N lists of detections (class_id
// 0-based, score = sigmoid(logit)), each sorted by score, highest first.
std::vector<std::vector<ScoredBox>> postprocess_detections(const std::vector<Tensor>& class_outputs,
                                                           const std::vector<Tensor>& box_outputs,
                                                           const AnchorSet& anchors,
                                                           const PostprocessOptions& options = {});

}  // namespace tessera::detection
