// Image transforms for detection that keep the boxes right: the detection seed's two resizers
// (fixed_shape_resizer; keep_aspect_ratio_resizer with pad_to_max_dimension), random horizontal flip,
// random scale jitter with crop or pad, and padding the ground truth to a static box count.
//
//   DetectionSample sample = coco.load(0);                                       // [3, H, W], boxes in pixels
//   SeededRandom random(7);
//   sample = random_horizontal_flip(sample, random);
//   sample = resize_keep_aspect_ratio(sample, {.min_dimension = 640, .max_dimension = 640});   // [3, 640, 640]
//   PaddedGroundTruth gt = pad_sample_ground_truth(sample.objects, {.max_number_of_boxes = 100}, "000139.jpg");
//
// Geometry. A pixel (x, y) covers [x, x + 1) × [y, y + 1) and boxes are continuous pixel coordinates, so
// an image of width W spans [0, W]. Resizing maps a continuous coordinate u to u · new / old per axis,
// which is exactly where bilinear resampling with half-pixel centres (torch's align_corners=False, TF2,
// OpenCV) puts the content: output pixel o samples the input at (o + 0.5) · old / new − 0.5, clamped at
// the borders. (TF1's resize_images without align_corners samples at o · old / new, shifting content by
// up to half an input pixel against its boxes; we do not copy that.) No antialiasing: shrinking by more
// than 2× skips input pixels, as plain bilinear does.
//
// Padding (to max_dimension, or around a jittered image smaller than the output) is zeros at the bottom
// and right; DetectionSample::content_size says how much of the image is content.
#pragma once

#include "core/random.hpp"
#include "detection/anchor_labeler.hpp"
#include "detection/box.hpp"
#include "tensor/tensor.hpp"

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace tessera::data {

struct DetectionSample {
    Tensor image;                                // [C, H, W] f32
    std::vector<detection::LabeledBox> objects;  // pixels of `image`
    std::array<std::int64_t, 2> content_size{};  // [H, W] pixels of content at the top left; the rest is padding
};

// A sample whose whole image is content.
DetectionSample make_detection_sample(Tensor image, std::vector<detection::LabeledBox> objects);

// Bilinear resize of image [C, h, w] f32 to [C, size[0], size[1]] (half-pixel centres, see above).
Tensor resize_bilinear(const Tensor& image, std::array<std::int64_t, 2> size);

// The window [begin, begin + extent) of `image` resized to scaled_size [H, W], computed without
// building the whole resized image; window pixels outside [0, scaled_size) are 0. `begin` ≥ 0.
Tensor resize_bilinear_window(const Tensor& image, std::array<std::int64_t, 2> scaled_size,
                              std::array<std::int64_t, 2> begin, std::array<std::int64_t, 2> extent);

// fixed_shape_resizer: the content resized to exactly `size` [H, W]; boxes scaled per axis by
// size / content_size. Padding of the input is dropped first (only its content is resized).
DetectionSample resize_fixed_shape(const DetectionSample& sample, std::array<std::int64_t, 2> size);

struct KeepAspectRatioOptions {
    std::int64_t min_dimension = 640;  // pixels, ≥ 1
    std::int64_t max_dimension = 640;  // pixels, ≥ min_dimension; 0: no limit (then no padding either)
    bool pad_to_max_dimension = true;  // zeros at the bottom and right up to [max_dimension, max_dimension]
};

// TF's resize_to_range: scale the shorter side to min_dimension; if the longer side then exceeds
// max_dimension (after rounding), scale the longer side to max_dimension instead. So the scale is
// min(min_dimension / short side, max_dimension / long side) up to rounding, and min = max (the seed's
// 640/640) makes the longer side exactly max_dimension. Each side rounds half to even, as Python's round
// and tf.round do, and is at least 1. size and result are [H, W].
std::array<std::int64_t, 2> keep_aspect_ratio_size(std::array<std::int64_t, 2> size,
                                                   const KeepAspectRatioOptions& options);

// keep_aspect_ratio_resizer: the content resized to keep_aspect_ratio_size, boxes scaled per axis by the
// rounded sizes' ratios, then padded when asked.
DetectionSample resize_keep_aspect_ratio(const DetectionSample& sample, const KeepAspectRatioOptions& options);

// Mirrors the content left-right (padding stays at the right): pixel column c < W moves to W − 1 − c and
// a box [x_min, x_max] becomes [W − x_max, W − x_min], W the content width. Twice is the identity.
DetectionSample flip_horizontally(const DetectionSample& sample);
// flip_horizontally with `probability` (one uniform draw from `random` either way).
DetectionSample random_horizontal_flip(const DetectionSample& sample, SeededRandom& random, double probability = 0.5);

struct ScaleJitterOptions {
    std::array<std::int64_t, 2> output_size{640, 640};  // [H, W] pixels
    double min_scale = 0.8;                             // of the size that fits the output, > 0
    double max_scale = 1.2;                             // ≥ min_scale
    // A box is kept when its part inside the output is not empty and has at least this fraction of its
    // area after scaling (before clipping); 0 keeps every box with a non-empty part, as the TPU
    // RetinaNet's clip-then-drop-empty does.
    double min_visible_fraction = 0.25;
};

// The TPU RetinaNet's resize_and_crop_image: the content is scaled by `scale` × min(out_H / H, out_W / W)
// (keeping its aspect ratio; sides rounded half to even, at least 1), then the output window starts at
// `crop_offset` [y, x] of the scaled image (each within [0, max(0, scaled − output)]); what the window
// holds beyond the scaled image is zero padding. Boxes are scaled per axis by the rounded sizes' ratios,
// moved by −crop_offset, clipped to the output's content, and dropped under the min_visible_fraction
// rule. Used by random_scale_jitter and by tests.
DetectionSample scale_and_crop(const DetectionSample& sample, std::array<std::int64_t, 2> output_size, double scale,
                               std::array<std::int64_t, 2> crop_offset, double min_visible_fraction);

// scale_and_crop with scale uniform in [min_scale, max_scale] and each crop offset a uniform integer in
// its range (three draws from `random`, always).
DetectionSample random_scale_jitter(const DetectionSample& sample, const ScaleJitterOptions& options,
                                    SeededRandom& random);

// What to do when an image has more objects than max_number_of_boxes.
enum class ExcessBoxes {
    Error,        // throw, naming the image (the default: silently losing objects hides a config mistake)
    KeepLargest,  // keep the max_number_of_boxes largest by area (ties: the earlier), in their original order
    KeepFirst,    // keep the first max_number_of_boxes
};

struct GroundTruthPadding {
    std::int64_t max_number_of_boxes = 100;  // G, ≥ 1
    ExcessBoxes excess_boxes = ExcessBoxes::Error;
};

// detection::pad_ground_truth to [G, 4] / [G] after applying `options.excess_boxes`; `image_name` is
// for the message.
detection::PaddedGroundTruth pad_sample_ground_truth(std::span<const detection::LabeledBox> objects,
                                                     const GroundTruthPadding& options, std::string_view image_name);

}  // namespace tessera::data
