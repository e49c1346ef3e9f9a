// The Faster R-CNN box coder (RetinaNet's regression targets), in torchvision's BoxCoder form with weights
// (10, 10, 5, 5) and its code order (dx, dy, dw, dh).
//
// Boxes are corners in pixels; width = x_max − x_min (no +1), centre = x_min + width / 2. For an anchor a
// and a target g:
//   dx = w_x · (x_g − x_a) / w_a      dy = w_y · (y_g − y_a) / h_a
//   dw = w_w · log(w_g / w_a)         dh = w_h · log(h_g / h_a)
// decode is the inverse, with dw / w_w and dh / w_h clamped from above at log(1000 / 16) (torchvision's
// bbox_xform_clip) so that a wild prediction cannot overflow exp. Arithmetic is in double, results f32.
// (The TF Object Detection API's FasterRcnnBoxCoder is the same map with y before x and a 1e-8 added to
// sizes; its TPU RetinaNet uses no decode clamp.)
//
//   BoxCode code = encode_box(gt_box, anchor_box);          // {dx, dy, dw, dh}
//   Box back = decode_box(code, anchor_box);                 // gt_box within rounding
//   Tensor codes = encode_boxes(targets, anchors);           // [M, 4] each
#pragma once

#include "detection/box.hpp"
#include "tensor/tensor.hpp"

#include <cmath>

namespace tessera::detection {

struct BoxCoderWeights {
    double x = 10, y = 10, width = 5, height = 5;
};

// decode's upper clamp of dw / w_w and dh / w_h: log(1000 / 16) (torchvision's bbox_xform_clip).
inline const double k_box_code_clamp = std::log(1000.0 / 16.0);

struct BoxCode {
    float dx = 0, dy = 0, dw = 0, dh = 0;
};

// Target and anchor must have a positive width and height (log of a size).
BoxCode encode_box(const Box& target, const Box& anchor, const BoxCoderWeights& weights = {});
Box decode_box(const BoxCode& code, const Box& anchor, const BoxCoderWeights& weights = {});

// targets, anchors: [M, 4] f32 corners → [M, 4] f32 codes (dx, dy, dw, dh).
Tensor encode_boxes(const Tensor& targets, const Tensor& anchors, const BoxCoderWeights& weights = {});
// codes: [M, 4] f32, anchors [M, 4] f32 → [M, 4] f32 corners.
Tensor decode_boxes(const Tensor& codes, const Tensor& anchors, const BoxCoderWeights& weights = {});

}  // namespace tessera::detection
