// Synthetic shapes for detection: discs, squares, triangles and crosses of 8–400 px, in random colours on a
// colourful textured background, each with its class and tight box. Sizes are log-uniform, so a detector
// needs every level of its feature pyramid, and the background is as colourful as the objects, so it has to
// learn shape rather than "not grey". Seeded: the same options give bit-identical pixels and boxes on every
// machine (splitmix64 draws, and floats only through + − × ÷ and √: no std:: distributions, no libm
// exp/log/sin, no FMA contraction).
//
//   ShapesOptions options;                        // 512×512 RGB, 4..12 objects of 8..400 px, seed 1
//   ShapesImage sample = make_shapes_image(options);
//   sample.image                                  // [3, H, W] f32, [0, 1]
//   sample.objects[0].box, sample.objects[0].class_id   // pixels; 0 disc, 1 square, 2 triangle, 3 cross
//
// The rules, in the order the generator applies them:
// - Shapes, in a unit square before any turn: disc; square; triangle, isosceles, its base one side of the
//   square and its apex the middle of the opposite side; cross, two bars of width 0.4 crossing at the
//   centre. The fraction of its box an upright shape fills: disc π/4 ≈ 0.785, square 1, triangle 0.5,
//   cross 2·0.4 − 0.4² = 0.64. Triangles point up, down, left or right (quarter turns keep boxes tight on
//   the shape). With max_rotation_degrees > 0 every shape is also turned by an angle uniform in ±that;
//   its box stays the tight box of its pixels, so fill ratios then drop (a square at 45° fills 0.5).
// - Size: the larger side of an object's box (after the turn), log-uniform in [min_object_size,
//   max_object_size], both clamped to the image's shorter side. Rasterising rounds it by up to a pixel.
// - Mask and box: an object's mask is the pixels whose centres lie in the shape. Pixel (x, y) covers
//   [x, x + 1) × [y, y + 1), so the box is {min x, min y, max x + 1, max y + 1} over the mask, measured on
//   the mask itself, never the nominal shape. Objects lie wholly inside the image: boxes are within
//   [0, W] × [0, H], never empty.
// - Occlusion: objects are drawn largest first, so smaller ones lie on top. Each object keeps at least
//   min_visible_fraction of its mask visible: a placement that would hide more of an earlier object is
//   re-drawn at a new position (40 tries), then 15 % smaller (down to the minimum size), and left out if
//   that fails too. The box stays the box of the object's FULL mask, hidden pixels included.
//   allow_overlap = false instead keeps boxes at least 2 px apart: no object hides or touches another.
// - Count: uniform in [min_objects, max_objects]; fewer only when objects cannot be placed under the rules
//   above (crowded layouts without overlap), never more.
// - Colour: uniform in [0, 1] per channel, the first of 24 draws whose distance (Euclidean over channels)
//   from every pixel just outside the object's mask (its 8-neighbours, as drawn so far) is ≥ min_contrast,
//   else the draw farthest from them. Objects carry the background's fine brightness texture, so no
//   region is flat.
// - Background: 0.5 per channel plus smooth value noise (per channel, cells of 160 and 48 px) and a fine
//   brightness texture (cells of 14 and 4 px), all scaled by texture_strength; texture_strength = 0 gives
//   flat grey 0.5 and flat objects. Last, per-pixel noise of std noise_sigma (the sum of two uniforms:
//   triangular, within ±√6 σ) on every channel, then clamping to [0, 1].
#pragma once

#include "detection/box.hpp"
#include "tensor/tensor.hpp"

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace tessera::data {

inline constexpr std::int32_t num_shape_classes = 4;          // 0 disc, 1 square, 2 triangle, 3 cross
inline constexpr std::int64_t max_shapes_image_side = 4096;   // px
inline constexpr std::int64_t automatic_object_count = -1;    // see ShapesOptions::min_objects

struct ShapesOptions {
    std::array<std::int64_t, 2> size{512, 512};  // [H, W] pixels, each in 1..4096
    std::int64_t channels = 3;                   // 3: RGB, 1: grey
    // Objects per image. Both automatic: as many as would cover 30 %..90 % of the image with their boxes
    // on average, so the density is the same at any image size: 4..12 at 512² with the default sizes.
    std::int64_t min_objects = automatic_object_count;
    std::int64_t max_objects = automatic_object_count;
    double min_object_size = 8;         // px, larger side of the box; ≥ 4
    double max_object_size = 400;       // px; both clamped to the image's shorter side
    double max_rotation_degrees = 0;    // 0..45; turns beyond quarter turns
    double min_visible_fraction = 0.7;  // 0..1, of each object's mask, under the objects drawn over it
    bool allow_overlap = true;          // false: boxes at least 2 px apart
    double min_contrast = 0.3;          // colour distance from the pixels around an object, 0..1
    double texture_strength = 1.0;      // 0..4; 0: flat grey background, flat objects
    double noise_sigma = 0.03;          // per-pixel noise std, ≥ 0
    std::uint64_t seed = 1;
};

struct ShapesImage {
    Tensor image;                                // [C, H, W] f32 in [0, 1]
    std::vector<detection::LabeledBox> objects;  // boxes in pixels, drawing order (largest first)
};

ShapesImage make_shapes_image(const ShapesOptions& options);

// The [min, max] object count make_shapes_image uses for these options (resolves automatic counts).
std::array<std::int64_t, 2> shapes_object_count_range(const ShapesOptions& options);

// "disc", "square", "triangle", "cross"; throws for ids outside 0..3.
std::string_view shape_class_name(std::int32_t class_id);

}  // namespace tessera::data
