// Sliding-window inference over an image or volume larger than the model input, as MONAI's
// sliding_window_inference: windows of the model's spatial extents overlapping by `overlap`, the last
// window in each axis aligned to the end, their outputs blended with constant (mean) or Gaussian
// weights (sigma = 1/8 of the window, MONAI's default) so seams do not show.
//
//   SlidingWindowOptions options;
//   options.window = {96, 96, 96};                         // the model input's spatial extents
//   options.window_batch = 4;                              // windows per predict() call
//   Tensor logits = sliding_window_predict(example.image, options, [&](const Tensor& windows) {
//       return model_forward(windows);                     // [B, C, 96, 96, 96] -> [B, K, 96, 96, 96]
//   });                                                    // [K, D, H, W] over the whole volume
//
// Windows start every floor(window × (1 − overlap)) voxels (at least 1). An image smaller than the
// window in an axis is padded with zeros on both sides (zero is the mean after z-score normalisation)
// and the output cropped back.
#pragma once

#include "tensor/tensor.hpp"

#include <cstdint>
#include <functional>
#include <vector>

namespace tessera::data {

enum class BlendMode { Constant, Gaussian };

struct SlidingWindowOptions {
    std::vector<std::int64_t> window;  // spatial extents [(D,) H, W] of one window
    double overlap = 0.25;             // fraction of a window shared with its neighbour, in [0, 1)
    std::int64_t window_batch = 1;     // windows per predict() call
    BlendMode blend = BlendMode::Gaussian;
};

// image: [C, spatial...] (1 to 3 spatial axes); predict: [B, C, window...] -> [B, K, window...] f32 with
// B ≤ window_batch. Returns [K, spatial...] f32.
Tensor sliding_window_predict(const Tensor& image, const SlidingWindowOptions& options,
                              const std::function<Tensor(const Tensor&)>& predict);

// The same prediction for a volume larger than memory, slab by slab along D, its labels written as they
// are finished: windows are visited in the order sliding_window_predict visits them and blended alike, so
// the labels are the argmax of its logits (exactly, for a predictor that answers each window the same
// whatever the batch). Memory: one window-deep slab of the image and of the K blended sums.
//   spatial: [D, H, W] of the image (C channels); read(first, count, out): the normalised image's slices
//   [first, first + count) into out, [C, count, H, W] f32; write(first, labels): labels [count, H, W] i32
//   of slices [first, first + count), called with first = 0, then each next slice in order.
void sliding_window_predict_streamed(const Shape& spatial, std::int64_t num_channels, const SlidingWindowOptions& options,
                                     const std::function<void(std::int64_t, std::int64_t, float*)>& read,
                                     const std::function<Tensor(const Tensor&)>& predict,
                                     const std::function<void(std::int64_t, const Tensor&)>& write);

// How many windows sliding_window_predict sends to predict for an image of these spatial extents.
std::int64_t count_windows(const Shape& spatial, const SlidingWindowOptions& options);

// The window starts along one axis of `extent` voxels (after padding an axis shorter than the window).
std::vector<std::int64_t> window_starts(std::int64_t extent, std::int64_t window, double overlap);

}  // namespace tessera::data
