// Greedy non-maximum suppression on the host (torchvision.ops.nms and batched_nms).
//
// Boxes are visited by score, highest first (equal scores: lower input index first, so the result is
// deterministic where torchvision's unstable sort is not). A box is kept unless a kept box has
// IoU > iou_threshold with it (strictly greater: IoU equal to the threshold keeps both). The batched
// form does this per class: boxes of different classes never suppress each other. Either returns the
// kept input indices in visiting order, at most max_detections of them (the top k after suppression).
//
//   std::vector<ScoredBox> detections = ...;                          // one image, all classes
//   std::vector<std::size_t> kept = batched_non_maximum_suppression(detections, {.iou_threshold = 0.5f,
//                                                                                .max_detections = 100});
//   for (std::size_t index : kept) use(detections[index]);           // highest score first
#pragma once

#include "detection/box.hpp"

#include <cstddef>
#include <limits>
#include <vector>

namespace tessera::detection {

struct NmsOptions {
    float iou_threshold = 0.5f;                                            // suppress when IoU > this; in [0, 1]
    std::size_t max_detections = std::numeric_limits<std::size_t>::max();  // keep at most this many
};

// Class-agnostic: every box can suppress every other (torchvision.ops.nms; class_id is not read).
std::vector<std::size_t> non_maximum_suppression(const std::vector<ScoredBox>& boxes, const NmsOptions& options = {});

// Per class (torchvision.ops.batched_nms with idxs = class_id).
std::vector<std::size_t> batched_non_maximum_suppression(const std::vector<ScoredBox>& boxes,
                                                         const NmsOptions& options = {});

}  // namespace tessera::detection
