// Synthetic shapes for detection, checked by measuring the rendered pixels: with noise off, the pixels
// that differ from the background (flat grey, or the same seed's image with no objects) are the objects,
// and their extent, fill and contrast are compared with the boxes and classes the generator reports.
#include "data/synthetic_shapes.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <ctime>
#include <cstring>
#include <limits>
#include <numbers>

using namespace tessera;
using namespace tessera::data;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0;
}

bool same_boxes(const std::vector<detection::LabeledBox>& a, const std::vector<detection::LabeledBox>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (!(a[i].box == b[i].box) || a[i].class_id != b[i].class_id) return false;
    }
    return true;
}

// Objects on flat grey 0.5, no noise, boxes apart: every pixel that is not 0.5 belongs to one object.
ShapesOptions flat_options(std::uint64_t seed) {
    ShapesOptions options;
    options.texture_strength = 0;
    options.noise_sigma = 0;
    options.allow_overlap = false;
    options.seed = seed;
    return options;
}

// The same seed's image without objects: the background, pixel for pixel (noise must be off).
Tensor background_of(ShapesOptions options) {
    options.min_objects = options.max_objects = 0;
    return make_shapes_image(options).image;
}

// [H, W]: 1 where any channel differs from the background.
std::vector<char> object_pixels(const Tensor& image, const Tensor& background) {
    const std::int64_t channels = image.dim(0), plane = image.dim(1) * image.dim(2);
    std::vector<char> differs(static_cast<std::size_t>(plane), 0);
    for (std::int64_t c = 0; c < channels; ++c) {
        for (std::int64_t p = 0; p < plane; ++p) {
            if (image.data<float>()[c * plane + p] != background.data<float>()[c * plane + p]) differs[static_cast<std::size_t>(p)] = 1;
        }
    }
    return differs;
}

struct PixelBox {
    std::int64_t x_min = std::numeric_limits<std::int64_t>::max(), y_min = std::numeric_limits<std::int64_t>::max();
    std::int64_t x_max = -1, y_max = -1;  // exclusive, like detection::Box
    std::int64_t count = 0;
};

// The tight box of the marked pixels inside `box`.
PixelBox marked_extent(const std::vector<char>& marked, std::int64_t width, const detection::Box& box) {
    PixelBox extent;
    for (auto y = static_cast<std::int64_t>(box.y_min); y < static_cast<std::int64_t>(box.y_max); ++y) {
        for (auto x = static_cast<std::int64_t>(box.x_min); x < static_cast<std::int64_t>(box.x_max); ++x) {
            if (!marked[static_cast<std::size_t>(y * width + x)]) continue;
            extent.x_min = std::min(extent.x_min, x), extent.x_max = std::max(extent.x_max, x + 1);
            extent.y_min = std::min(extent.y_min, y), extent.y_max = std::max(extent.y_max, y + 1);
            ++extent.count;
        }
    }
    return extent;
}

bool inside(const detection::Box& box, std::int64_t x, std::int64_t y) {
    return static_cast<float>(x) >= box.x_min && static_cast<float>(x) < box.x_max && static_cast<float>(y) >= box.y_min &&
           static_cast<float>(y) < box.y_max;
}

// Without overlap: each object pixel lies in exactly one box, and the object pixels inside a box span it
// exactly (they reach all four edges and no further).
void expect_tight_separate_boxes(const ShapesImage& sample, const Tensor& background) {
    const std::int64_t height = sample.image.dim(1), width = sample.image.dim(2);
    const std::vector<char> differs = object_pixels(sample.image, background);
    for (std::int64_t y = 0; y < height; ++y) {
        for (std::int64_t x = 0; x < width; ++x) {
            if (!differs[static_cast<std::size_t>(y * width + x)]) continue;
            int boxes = 0;
            for (const auto& object : sample.objects) boxes += inside(object.box, x, y) ? 1 : 0;
            ASSERT_EQ(boxes, 1) << "object pixel (" << x << ", " << y << ") lies in " << boxes << " boxes";
        }
    }
    for (const auto& object : sample.objects) {
        const detection::Box& box = object.box;
        const PixelBox extent = marked_extent(differs, width, box);
        EXPECT_EQ(extent.x_min, box.x_min) << "class " << object.class_id;
        EXPECT_EQ(extent.y_min, box.y_min) << "class " << object.class_id;
        EXPECT_EQ(extent.x_max, box.x_max) << "class " << object.class_id;
        EXPECT_EQ(extent.y_max, box.y_max) << "class " << object.class_id;
    }
}

}  // namespace

TEST(SyntheticShapes, SameSeedSameBitsOtherSeedDiffers) {
    const ShapesImage first = make_shapes_image(ShapesOptions{});
    const ShapesImage again = make_shapes_image(ShapesOptions{});
    ASSERT_EQ(first.image.shape(), (Shape{3, 512, 512}));
    EXPECT_EQ(first.image.dtype(), DType::F32);
    EXPECT_TRUE(same_bits(first.image, again.image));
    EXPECT_TRUE(same_boxes(first.objects, again.objects));

    const ShapesImage other = make_shapes_image(ShapesOptions{.seed = 2});
    EXPECT_FALSE(same_bits(first.image, other.image));
    EXPECT_FALSE(same_boxes(first.objects, other.objects));

    // Values stay in [0, 1] after texture and noise.
    for (std::int64_t i = 0; i < first.image.num_elements(); ++i) {
        ASSERT_GE(first.image.data<float>()[i], 0.0f);
        ASSERT_LE(first.image.data<float>()[i], 1.0f);
    }
}

TEST(SyntheticShapes, BoxesClassesCountsAndLogUniformSizes) {
    // Automatic counts at 512² with sizes 8..400 px: E[s²] = (400² − 8²) / (2 ln 50) = 159936 / 7.824 ≈ 20442 px²,
    // 512² / 20442 ≈ 12.8 boxes' worth of area; 30 % and 90 % of that round to 4 and 12.
    int class_counts[num_shape_classes] = {};
    int smaller_than_32 = 0, larger_than_128 = 0, total = 0;
    for (std::uint64_t seed = 1; seed <= 50; ++seed) {
        const ShapesImage sample = make_shapes_image(ShapesOptions{.seed = seed});
        EXPECT_GE(sample.objects.size(), 4u) << "seed " << seed;
        EXPECT_LE(sample.objects.size(), 12u) << "seed " << seed;
        for (const auto& object : sample.objects) {
            const detection::Box& box = object.box;
            EXPECT_FALSE(box.empty());
            EXPECT_GE(box.x_min, 0.0f);
            EXPECT_GE(box.y_min, 0.0f);
            EXPECT_LE(box.x_max, 512.0f);
            EXPECT_LE(box.y_max, 512.0f);
            EXPECT_EQ(box.x_min, std::floor(box.x_min)) << "whole pixels";
            ASSERT_GE(object.class_id, 0);
            ASSERT_LT(object.class_id, num_shape_classes);
            ++class_counts[object.class_id];
            // The size is the larger side; a pixel of rounding either way.
            const float size = std::max(box.width(), box.height());
            EXPECT_GE(size, 7.0f);
            EXPECT_LE(size, 401.0f);
            smaller_than_32 += size < 32 ? 1 : 0;
            larger_than_128 += size > 128 ? 1 : 0;
            ++total;
        }
    }
    for (int c = 0; c < num_shape_classes; ++c) EXPECT_GT(class_counts[c], total / 8) << shape_class_name(c);
    // Log-uniform on [8, 400]: P(s < 32) = ln 4 / ln 50 = 0.354, P(s > 128) = ln 3.125 / ln 50 = 0.291. With
    // ~400 objects the binomial std is ≤ 0.024; ±0.08 leaves room for the occlusion rule shrinking large ones.
    const double fraction_small = static_cast<double>(smaller_than_32) / total;
    const double fraction_large = static_cast<double>(larger_than_128) / total;
    std::printf("%d objects; %.3f below 32 px, %.3f above 128 px\n", total, fraction_small, fraction_large);
    EXPECT_NEAR(fraction_small, 0.354, 0.08);
    EXPECT_NEAR(fraction_large, 0.291, 0.08);
}

TEST(SyntheticShapes, BoxesAreTightOnAFlatBackground) {
    const Tensor grey = Tensor::full<float>({3, 512, 512}, 0.5f);
    for (std::uint64_t seed = 1; seed <= 10; ++seed) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        const ShapesImage sample = make_shapes_image(flat_options(seed));
        ASSERT_GE(sample.objects.size(), 4u);
        expect_tight_separate_boxes(sample, grey);
    }
    // Turned shapes: the box is still the tight box of the turned pixels.
    for (std::uint64_t seed = 1; seed <= 10; ++seed) {
        SCOPED_TRACE("turned, seed " + std::to_string(seed));
        ShapesOptions options = flat_options(seed);
        options.max_rotation_degrees = 45;
        expect_tight_separate_boxes(make_shapes_image(options), grey);
    }
    // Grey images, not square.
    ShapesOptions options = flat_options(3);
    options.channels = 1;
    options.size = {300, 700};
    const ShapesImage sample = make_shapes_image(options);
    ASSERT_EQ(sample.image.shape(), (Shape{1, 300, 700}));
    expect_tight_separate_boxes(sample, Tensor::full<float>({1, 300, 700}, 0.5f));
}

TEST(SyntheticShapes, BoxesAreTightOnTheTexturedBackground) {
    for (std::uint64_t seed = 1; seed <= 10; ++seed) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        ShapesOptions options;
        options.noise_sigma = 0;
        options.allow_overlap = false;
        options.max_rotation_degrees = seed % 2 == 0 ? 20 : 0;
        options.seed = seed;
        const ShapesImage sample = make_shapes_image(options);
        ASSERT_FALSE(sample.objects.empty());
        expect_tight_separate_boxes(sample, background_of(options));
    }
}

TEST(SyntheticShapes, OverlappingObjectsStillReachTheirBoxEdges) {
    // Where a later object hides an edge of an earlier one, its own pixels are there instead: either way the
    // pixels that differ from the background inside each box reach all four edges.
    int overlapping = 0;
    for (std::uint64_t seed = 1; seed <= 10; ++seed) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        ShapesOptions options;
        options.noise_sigma = 0;
        options.seed = seed;
        const ShapesImage sample = make_shapes_image(options);
        const std::vector<char> differs = object_pixels(sample.image, background_of(options));
        for (std::size_t i = 0; i < sample.objects.size(); ++i) {
            const detection::Box& box = sample.objects[i].box;
            const PixelBox extent = marked_extent(differs, 512, box);
            EXPECT_EQ(extent.x_min, box.x_min);
            EXPECT_EQ(extent.y_min, box.y_min);
            EXPECT_EQ(extent.x_max, box.x_max);
            EXPECT_EQ(extent.y_max, box.y_max);
            for (std::size_t j = 0; j < i; ++j) overlapping += detection::intersection_area(box, sample.objects[j].box) > 0 ? 1 : 0;
        }
        // Every object pixel lies in some box.
        for (std::int64_t p = 0; p < 512 * 512; ++p) {
            if (!differs[static_cast<std::size_t>(p)]) continue;
            bool in_a_box = false;
            for (const auto& object : sample.objects) in_a_box = in_a_box || inside(object.box, p % 512, p / 512);
            ASSERT_TRUE(in_a_box) << "pixel " << p;
        }
    }
    EXPECT_GT(overlapping, 5) << "the default layout lets boxes overlap";
}

TEST(SyntheticShapes, LaterObjectsHideAtMostThirtyPercent) {
    // Flat objects on flat grey, overlap allowed, 12 objects of ≥ 32 px per image. Every shape contains its
    // box's centre pixel, so where no later box covers that pixel its colour is the object's own (random
    // colours do not repeat); the pixels of that colour in the box are the object's visible pixels. Its full
    // mask is fill × box area (fill per class as in FillRatioTellsTheShape, within 5 % for ≥ 32 px), so the
    // visible fraction must be ≥ 0.7 less that 5 %.
    const double expected_fill[num_shape_classes] = {std::numbers::pi / 4, 1.0, 0.5, 0.64};
    int measured = 0, partly_hidden = 0;
    double least_visible = 1;
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
        ShapesOptions options = flat_options(seed);
        options.allow_overlap = true;
        options.min_objects = options.max_objects = 12;
        options.min_object_size = 32;
        const ShapesImage sample = make_shapes_image(options);
        const float* image = sample.image.data<float>();
        const std::int64_t plane = 512 * 512;
        for (std::size_t k = 0; k < sample.objects.size(); ++k) {
            const detection::Box& box = sample.objects[k].box;
            const auto centre_x = static_cast<std::int64_t>((box.x_min + box.x_max) / 2);
            const auto centre_y = static_cast<std::int64_t>((box.y_min + box.y_max) / 2);
            bool covered_later = false;
            for (std::size_t j = k + 1; j < sample.objects.size(); ++j) covered_later = covered_later || inside(sample.objects[j].box, centre_x, centre_y);
            if (covered_later) continue;
            const std::int64_t centre = centre_y * 512 + centre_x;
            std::int64_t visible = 0;
            for (auto y = static_cast<std::int64_t>(box.y_min); y < static_cast<std::int64_t>(box.y_max); ++y) {
                for (auto x = static_cast<std::int64_t>(box.x_min); x < static_cast<std::int64_t>(box.x_max); ++x) {
                    bool same = true;
                    for (std::int64_t c = 0; c < 3; ++c) same = same && image[c * plane + y * 512 + x] == image[c * plane + centre];
                    visible += same ? 1 : 0;
                }
            }
            const double fraction = static_cast<double>(visible) / (expected_fill[sample.objects[k].class_id] * box.area());
            EXPECT_GE(fraction, 0.7 * 0.95) << shape_class_name(sample.objects[k].class_id) << " " << k << ", seed " << seed;
            least_visible = std::min(least_visible, fraction);
            partly_hidden += fraction < 0.95 ? 1 : 0;
            ++measured;
        }
    }
    std::printf("%d objects measured, %d partly hidden, least visible %.3f\n", measured, partly_hidden, least_visible);
    EXPECT_GT(measured, 100);
    EXPECT_GT(partly_hidden, 10) << "the layouts must overlap for this to test anything";
}

TEST(SyntheticShapes, FillRatioTellsTheShape) {
    // The fraction of its box an upright shape fills: disc π/4, square 1, triangle 1/2, cross with bars of
    // 0.4 of its extent 2·0.4 − 0.4² = 0.64. Rasterising at pixel centres makes each row's run of a
    // boundary a pixel long or short, so a side of s ≥ 32 px moves the ratio by up to about 1/s ≈ 0.03 per
    // side pair; ±0.06 (±0 for the square, whose box is its pixels) keeps the four classes apart.
    const double expected_fill[num_shape_classes] = {std::numbers::pi / 4, 1.0, 0.5, 0.64};
    const double tolerance[num_shape_classes] = {0.06, 1e-9, 0.06, 0.06};
    const Tensor grey = Tensor::full<float>({3, 512, 512}, 0.5f);
    int measured[num_shape_classes] = {};
    double worst[num_shape_classes] = {};
    for (std::uint64_t seed = 1; seed <= 30; ++seed) {
        ShapesOptions options = flat_options(seed);
        options.min_object_size = 32;
        const ShapesImage sample = make_shapes_image(options);
        const std::vector<char> differs = object_pixels(sample.image, grey);
        for (const auto& object : sample.objects) {
            const PixelBox extent = marked_extent(differs, 512, object.box);
            const double fill = static_cast<double>(extent.count) / static_cast<double>(object.box.area());
            const int c = object.class_id;
            EXPECT_NEAR(fill, expected_fill[c], tolerance[c]) << shape_class_name(c) << " of " << object.box.width()
                                                              << "×" << object.box.height() << " px, seed " << seed;
            worst[c] = std::max(worst[c], std::abs(fill - expected_fill[c]));
            ++measured[c];
        }
    }
    for (int c = 0; c < num_shape_classes; ++c) {
        std::printf("%s: %d measured, worst fill error %.4f\n", std::string(shape_class_name(c)).c_str(), measured[c], worst[c]);
        EXPECT_GT(measured[c], 10) << shape_class_name(c);
    }
}

TEST(SyntheticShapes, ObjectsStandOutFromWhatSurroundsThem) {
    // Every pair of 8-neighbours across an object's outline (object pixel, background pixel) differs by at
    // least min_contrast = 0.3 (Euclidean over RGB) less what the fine texture changes between two
    // neighbouring pixels: its finest octave (cells of 4 px, amplitude 0.04) moves at most 1.5 · 0.04 / 4 =
    // 0.015 per px and channel, the 14 px one 1.5 · 0.07 / 14 = 0.0075, so √3 · 0.0225 · √2 < 0.06 across a
    // diagonal. The colour is the best of 24 draws, so a few objects may fall short: ≥ 95 % of the pairs pass.
    std::int64_t pairs = 0, passing = 0;
    double weakest = 1e9;
    for (std::uint64_t seed = 1; seed <= 10; ++seed) {
        ShapesOptions options;
        options.noise_sigma = 0;
        options.allow_overlap = false;
        options.seed = seed;
        const ShapesImage sample = make_shapes_image(options);
        const Tensor background = background_of(options);
        const std::vector<char> differs = object_pixels(sample.image, background);
        const float* image = sample.image.data<float>();
        const std::int64_t plane = 512 * 512;
        for (std::int64_t y = 1; y < 511; ++y) {
            for (std::int64_t x = 1; x < 511; ++x) {
                if (!differs[static_cast<std::size_t>(y * 512 + x)]) continue;
                for (std::int64_t dy = -1; dy <= 1; ++dy) {
                    for (std::int64_t dx = -1; dx <= 1; ++dx) {
                        const std::int64_t q = (y + dy) * 512 + x + dx;
                        if (differs[static_cast<std::size_t>(q)]) continue;
                        double squared = 0;
                        for (std::int64_t c = 0; c < 3; ++c) {
                            const double d = image[c * plane + y * 512 + x] - image[c * plane + q];
                            squared += d * d;
                        }
                        ++pairs;
                        passing += std::sqrt(squared) >= 0.3 - 0.06 ? 1 : 0;
                        weakest = std::min(weakest, std::sqrt(squared));
                    }
                }
            }
        }
    }
    std::printf("%lld outline pairs, %.4f pass, weakest %.3f\n", static_cast<long long>(pairs),
                static_cast<double>(passing) / static_cast<double>(pairs), weakest);
    ASSERT_GT(pairs, 1000);
    EXPECT_GE(static_cast<double>(passing) / static_cast<double>(pairs), 0.95);
}

TEST(SyntheticShapes, AutomaticCountsKeepTheDensity) {
    EXPECT_EQ(shapes_object_count_range(ShapesOptions{}), (std::array<std::int64_t, 2>{4, 12}));
    // 2560²: 6553600 / 20442 = 320.6 boxes' worth; 30 % and 90 % round to 96 and 289.
    EXPECT_EQ(shapes_object_count_range(ShapesOptions{.size = {2560, 2560}}), (std::array<std::int64_t, 2>{96, 289}));
    // 64²: sizes clamp to 8..64, E[s²] = (64² − 8²) / (2 ln 8) = 4032 / 4.159 = 969.5; 4096 / 969.5 = 4.22 → 1..4.
    EXPECT_EQ(shapes_object_count_range(ShapesOptions{.size = {64, 64}}), (std::array<std::int64_t, 2>{1, 4}));
    EXPECT_EQ(shapes_object_count_range(ShapesOptions{.min_objects = 0, .max_objects = 3}), (std::array<std::int64_t, 2>{0, 3}));

    // A large image: the same invariants, and the time (informative only; CPU time, as the machine may be shared).
    ShapesImage large;
    double fastest = 1e300;  // of 2 runs
    for (int run = 0; run < 2; ++run) {
        const std::clock_t start = std::clock();
        large = make_shapes_image(ShapesOptions{.size = {2560, 2560}});
        fastest = std::min(fastest, static_cast<double>(std::clock() - start));
    }
    std::printf("2560² with %zu objects: %.0f ms CPU (best of 2 runs)\n", large.objects.size(), 1000.0 * fastest / CLOCKS_PER_SEC);
    EXPECT_GE(large.objects.size(), 96u);
    EXPECT_LE(large.objects.size(), 289u);
    for (const auto& object : large.objects) {
        EXPECT_FALSE(object.box.empty());
        EXPECT_GE(std::min(object.box.x_min, object.box.y_min), 0.0f);
        EXPECT_LE(std::max(object.box.x_max, object.box.y_max), 2560.0f);
    }
    double slowest = 0;
    const std::clock_t small_start = std::clock();
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
        double fastest_run = 1e300;  // of 3 runs: the machine may be shared
        for (int run = 0; run < 3; ++run) {
            const std::clock_t image_start = std::clock();
            make_shapes_image(ShapesOptions{.seed = seed});
            fastest_run = std::min(fastest_run, static_cast<double>(std::clock() - image_start));
        }
        slowest = std::max(slowest, fastest_run);
    }
    std::printf("512²: %.1f ms CPU per image, slowest of 20 %.1f ms (best of 3 runs)\n",
                1000.0 / 60 * static_cast<double>(std::clock() - small_start) / CLOCKS_PER_SEC,
                1000.0 * slowest / CLOCKS_PER_SEC);
}

TEST(SyntheticShapes, InvalidOptionsExplainThemselves) {
    const auto expect_message = [](const ShapesOptions& options, const std::string& part) {
        try {
            make_shapes_image(options);
            ADD_FAILURE() << "expected an error containing: " << part;
        } catch (const Error& error) {
            EXPECT_FALSE(error.is_internal());
            EXPECT_NE(std::string(error.what()).find(part), std::string::npos) << error.what();
        }
    };
    expect_message({.size = {0, 512}}, "size [H, W] must be 1..4096 pixels per side, got [0, 512]");
    expect_message({.size = {512, 5000}}, "got [512, 5000]");
    expect_message({.channels = 2}, "channels must be 3 (RGB) or 1 (grey), got 2");
    expect_message({.min_objects = 5, .max_objects = 2}, "0 ≤ min_objects ≤ max_objects ≤ 100000");
    expect_message({.min_objects = 3}, "or both be automatic (-1), got 3..-1");
    expect_message({.min_object_size = 2}, "4 ≤ min_object_size ≤ max_object_size (px), got 2..400");
    expect_message({.min_object_size = 64, .max_object_size = 32}, "got 64..32");
    expect_message({.max_rotation_degrees = 90}, "max_rotation_degrees must be in [0, 45]");
    expect_message({.min_visible_fraction = 1.5}, "min_visible_fraction must be in [0, 1], got 1.5");
    expect_message({.min_contrast = -0.1}, "min_contrast must be in [0, 1]");
    expect_message({.texture_strength = std::nan("")}, "texture_strength must be in [0, 4], got nan");
    expect_message({.noise_sigma = -1}, "noise_sigma must be in [0, 1], got -1");

    EXPECT_EQ(shape_class_name(0), "disc");
    EXPECT_EQ(shape_class_name(1), "square");
    EXPECT_EQ(shape_class_name(2), "triangle");
    EXPECT_EQ(shape_class_name(3), "cross");
    EXPECT_THROW(shape_class_name(4), Error);
    EXPECT_THROW(shape_class_name(-1), Error);
}
