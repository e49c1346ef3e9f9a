// The image operations the data pipeline is made of: normalise, crop (with zero padding), resample,
// flip and rotate. Plain functions on tensors, so the sampler reads as the list of steps it takes.
//
// Images are [C, D, H, W] f32 and label maps [D, H, W] i32 (D = 1 for 2D); crop, flip and rotate work
// on any rank and element type, so one call handles both.
//
//   Tensor patch = crop_padded(image, {0, 10, -4, 20}, {1, 16, 64, 64});   // rows -4..-1 are zeros
//   flip(patch, 3);                                                        // mirror W, in place
//   Tensor turned = rotate90(patch, 1);                                    // as numpy.rot90 in (H, W)
//   Tensor small = resample(image, {1, 32, 32}, {1, 32, 32}, Interpolation::Linear);
#pragma once

#include "core/random.hpp"
#include "data/dataset.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>

namespace tessera::data {

// Normalises image [C, ...] in place, each channel on its own (ZScore: over that channel's voxels; a
// constant channel becomes 0). `image` must be contiguous.
void normalize(Tensor& image, Normalization normalization, double window_low, double window_high);

// normalize()'s z-score statistics for an image seen block by block (a volume read by region): each
// block's mean and squared deviations, merged (Chan et al.), so the result does not depend on the
// blocking beyond the last bits.
class RunningMoments {
public:
    void add_block(const float* values, std::int64_t count);
    double mean() const { return m_mean; }
    double scale() const;  // 1 / standard deviation; 0 for a constant image (it becomes 0, as in normalize())
private:
    double m_count = 0, m_mean = 0, m_m2 = 0;
};
// normalize()'s expression for one value: z-score with (mean, scale), or the window.
inline float normalized_value(float value, Normalization normalization, double mean, double scale, double window_low, double window_high) {
    if (normalization == Normalization::ZScore) return static_cast<float>((value - mean) * scale);
    if (normalization == Normalization::Window) {
        return static_cast<float>(std::clamp((value - window_low) / (window_high - window_low), 0.0, 1.0));
    }
    return value;
}

// The box [begin, begin + extent) of `source` as a new dense tensor; parts of the box outside the source
// (begin may be negative, the box may overhang the end) are 0. Any rank, any dtype, any strides.
Tensor crop_padded(const Tensor& source, std::span<const std::int64_t> begin, std::span<const std::int64_t> extent);

// AugmentConfig's intensity change, in place on f32 `image` (contiguous, after normalisation): every
// value v becomes v · (1 + intensity_scale · U(-1, 1)) + intensity_shift · U(-1, 1). Two draws from
// `random` when either amount is non-zero, none otherwise (turning it off leaves the other draws alone).
void augment_intensity(Tensor& image, const AugmentConfig& augment, SeededRandom& random);

// Mirrors `tensor` along `axis` in place; `tensor` must be contiguous. Any rank and dtype.
void flip(Tensor& tensor, int axis);

// Rotates the last two axes by `turns` × 90° counter-clockwise, as numpy.rot90(x, turns, axes=(-2, -1)):
// a dense copy whose last two extents are swapped when `turns` is odd. Any rank ≥ 2 and dtype.
Tensor rotate90(const Tensor& tensor, int turns);

enum class Interpolation { Linear, Nearest };

// Resamples source [C, D, H, W] onto the first content[a] voxels of each spatial axis a of a new
// [C, extent...] tensor (the rest is 0), as torch's interpolate with align_corners=False: output voxel
// o samples the source at (o + 0.5) · in / content − 0.5, clamped at the borders. Linear: f32 only;
// Nearest: f32 or i32.
Tensor resample(const Tensor& source, const std::array<std::int64_t, 3>& extent,
                const std::array<std::int64_t, 3>& content, Interpolation interpolation);

// The grid of resample()'s output: spacing scaled by in / content, origin at output voxel 0's centre.
ImageGeometry resampled_geometry(const ImageGeometry& geometry, const std::array<std::int64_t, 3>& source_extent,
                                 const std::array<std::int64_t, 3>& extent,
                                 const std::array<std::int64_t, 3>& content);  // extents [D, H, W]

// [3, H, W] → [1, H, W]: grey as the plain mean of R, G and B (a colour photo fed to a one-channel input).
Tensor mean_of_rgb(const Tensor& rgb);

// A whole image brought to the input `size` [H, W] with its boxes: StaticShape::Resize is
// resize_fixed_shape (the aspect ratio changes); PadToMax keeps the aspect ratio, scaled to fit and padded
// with zeros at the bottom and right (for a square input the detection seed's keep_aspect_ratio_resizer
// with pad_to_max_dimension, for a non-square one scale_and_crop at scale 1). Not for Crop.
DetectionSample whole_image_to_input(const DetectionSample& sample, StaticShape static_shape, std::array<std::int64_t, 2> size);

}  // namespace tessera::data
