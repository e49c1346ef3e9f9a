// Detection transforms, checked on the pixels: each channel of a synthetic image holds one solid
// rectangle (1 inside, 0 outside) and its box; after a transform, the pixels above 0.5 in that channel are
// measured and their extent compared with the transformed box. Bilinear resampling puts the 0.5 crossing
// of an edge at exactly the scaled edge, so a measured edge (whole pixels) is within 0.5 px of the box;
// the tolerance is 1 px. Sizes of the TF resizer and the jitter's keep/drop rule are worked out by hand.
#include "data/detection_transforms.hpp"
#include "data/transforms.hpp"

#include "support/error_of.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <optional>

using namespace tessera;
using namespace tessera::data;
using detection::Box;
using detection::LabeledBox;
using tessera::test::error_of;

namespace {

constexpr float k_box_tolerance = 1.0f;  // px, measured rectangle vs transformed box

// One rectangle per channel (integer corners, [x_min, x_max) × [y_min, y_max)), class = channel.
DetectionSample rectangles_sample(std::int64_t height, std::int64_t width, const std::vector<Box>& rectangles) {
    Tensor image = Tensor::zeros({static_cast<std::int64_t>(rectangles.size()), height, width}, DType::F32);
    std::vector<LabeledBox> objects;
    for (std::size_t c = 0; c < rectangles.size(); ++c) {
        const Box& box = rectangles[c];
        for (auto y = static_cast<std::int64_t>(box.y_min); y < static_cast<std::int64_t>(box.y_max); ++y) {
            for (auto x = static_cast<std::int64_t>(box.x_min); x < static_cast<std::int64_t>(box.x_max); ++x) {
                image.at<float>({static_cast<std::int64_t>(c), y, x}) = 1.0f;
            }
        }
        objects.push_back({box, static_cast<std::int32_t>(c)});
    }
    return make_detection_sample(std::move(image), std::move(objects));
}

// The extent of the pixels > 0.5 in `channel`: {min x, min y, max x + 1, max y + 1}; none if no pixel.
std::optional<Box> measured_rectangle(const Tensor& image, std::int64_t channel) {
    std::int64_t x_min = INT64_MAX, y_min = INT64_MAX, x_max = -1, y_max = -1;
    for (std::int64_t y = 0; y < image.dim(1); ++y) {
        for (std::int64_t x = 0; x < image.dim(2); ++x) {
            if (image.at<float>({channel, y, x}) > 0.5f) {
                x_min = std::min(x_min, x), y_min = std::min(y_min, y);
                x_max = std::max(x_max, x), y_max = std::max(y_max, y);
            }
        }
    }
    if (x_max < 0) return std::nullopt;
    return Box{static_cast<float>(x_min), static_cast<float>(y_min), static_cast<float>(x_max + 1),
               static_cast<float>(y_max + 1)};
}

void expect_tight(const DetectionSample& sample, const std::string& what) {
    for (const LabeledBox& object : sample.objects) {
        const std::optional<Box> measured = measured_rectangle(sample.image, object.class_id);
        ASSERT_TRUE(measured.has_value()) << what << ": object " << object.class_id << " has no pixels";
        EXPECT_NEAR(measured->x_min, object.box.x_min, k_box_tolerance) << what << ", object " << object.class_id;
        EXPECT_NEAR(measured->y_min, object.box.y_min, k_box_tolerance) << what << ", object " << object.class_id;
        EXPECT_NEAR(measured->x_max, object.box.x_max, k_box_tolerance) << what << ", object " << object.class_id;
        EXPECT_NEAR(measured->y_max, object.box.y_max, k_box_tolerance) << what << ", object " << object.class_id;
    }
}

// Every pixel outside the content [0, H) × [0, W) is 0.
bool padding_is_zero(const DetectionSample& sample) {
    const Tensor& image = sample.image;
    for (std::int64_t c = 0; c < image.dim(0); ++c) {
        for (std::int64_t y = 0; y < image.dim(1); ++y) {
            for (std::int64_t x = 0; x < image.dim(2); ++x) {
                const bool content = y < sample.content_size[0] && x < sample.content_size[1];
                if (!content && image.at<float>({c, y, x}) != 0.0f) return false;
            }
        }
    }
    return true;
}

bool same_bits(const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0;
}

// 120×160 (H×W) with three rectangles, one touching the top-left corner.
DetectionSample three_rectangles() {
    return rectangles_sample(120, 160, {{0, 0, 30, 24}, {40, 30, 121, 95}, {130, 70, 160, 118}});
}

}  // namespace

TEST(DetectionTransforms, BilinearResizeMatchesHandValuesAndTheVolumeResampler) {
    // [1, 1, 2] = {0, 1} to width 4: sample positions (o + 0.5) / 2 − 0.5 = −0.25 (clamped to 0), 0.25,
    // 0.75, 1.25 (clamped to 1) give 0, 0.25, 0.75, 1. Exact in f32.
    Tensor pair = Tensor::zeros({1, 1, 2}, DType::F32);
    pair.at<float>({0, 0, 1}) = 1.0f;
    const Tensor wide = resize_bilinear(pair, {1, 4});
    const float expected[] = {0.0f, 0.25f, 0.75f, 1.0f};
    for (std::int64_t x = 0; x < 4; ++x) EXPECT_EQ(wide.at<float>({0, 0, x}), expected[x]) << "x = " << x;

    // data::resample (the segmentation pipeline's own trilinear code, a separate implementation of the
    // same torch align_corners=False rule) on a [C, 1, H, W] volume; 1e-5 covers the different order of
    // f32 operations.
    SeededRandom random(3);
    Tensor image = Tensor::empty({2, 13, 17}, DType::F32);
    for (std::int64_t i = 0; i < image.num_elements(); ++i)
        image.data<float>()[i] = static_cast<float>(random.uniform());
    for (const std::array<std::int64_t, 2> size : {std::array<std::int64_t, 2>{29, 8}, {5, 40}, {13, 17}, {1, 1}}) {
        const Tensor ours = resize_bilinear(image, size);
        const Tensor reference = resample(image.reshape({2, 1, 13, 17}), {1, size[0], size[1]}, {1, size[0], size[1]},
                                          Interpolation::Linear);
        ASSERT_EQ(ours.shape(), (Shape{2, size[0], size[1]}));
        for (std::int64_t i = 0; i < ours.num_elements(); ++i) {
            ASSERT_NEAR(ours.data<float>()[i], reference.data<float>()[i], 1e-5f)
                << size[0] << "×" << size[1] << " @" << i;
        }
    }

    // A window is the same pixels as the full resize cut at that place; beyond the resized image, zeros.
    const Tensor full = resize_bilinear(image, {30, 40});
    const Tensor window = resize_bilinear_window(image, {30, 40}, {20, 25}, {16, 16});
    for (std::int64_t c = 0; c < 2; ++c) {
        for (std::int64_t y = 0; y < 16; ++y) {
            for (std::int64_t x = 0; x < 16; ++x) {
                const float inside = y + 20 < 30 && x + 25 < 40 ? full.at<float>({c, y + 20, x + 25}) : 0.0f;
                ASSERT_EQ(window.at<float>({c, y, x}), inside) << c << ", " << y << ", " << x;
            }
        }
    }
}

TEST(DetectionTransforms, FixedShapeKeepsBoxesTight) {
    const DetectionSample sample = three_rectangles();
    expect_tight(sample, "the input");
    for (const std::array<std::int64_t, 2> size :
         {std::array<std::int64_t, 2>{64, 96}, {240, 200}, {120, 40}, {300, 640}}) {
        const DetectionSample resized = resize_fixed_shape(sample, size);
        const std::string what = "fixed_shape " + std::to_string(size[0]) + "×" + std::to_string(size[1]);
        ASSERT_EQ(resized.image.shape(), (Shape{3, size[0], size[1]})) << what;
        EXPECT_EQ(resized.content_size, size) << what;
        // Box 1 {40, 30, 121, 95} scaled per axis by W / 160 and H / 120.
        const double sx = static_cast<double>(size[1]) / 160, sy = static_cast<double>(size[0]) / 120;
        EXPECT_FLOAT_EQ(resized.objects[1].box.x_min, static_cast<float>(40 * sx)) << what;
        EXPECT_FLOAT_EQ(resized.objects[1].box.y_max, static_cast<float>(95 * sy)) << what;
        expect_tight(resized, what);
    }
}

TEST(DetectionTransforms, KeepAspectRatioSizesFollowTheTfRule) {
    const auto size_of = [](std::int64_t height, std::int64_t width, std::int64_t min_dimension,
                            std::int64_t max_dimension) {
        return keep_aspect_ratio_size({height, width},
                                      {.min_dimension = min_dimension, .max_dimension = max_dimension});
    };
    using Size = std::array<std::int64_t, 2>;
    // 640×480 (W×H), min 512 / max 640: 512 / 480 gives 682.7 → 683 wide > 640, so 640 / 640 = 1: unchanged.
    EXPECT_EQ(size_of(480, 640, 512, 640), (Size{480, 640}));
    // The seed's 640 / 640: 640 / 480 gives 853 > 640, so the long side becomes 640: 480×640.
    EXPECT_EQ(size_of(480, 640, 640, 640), (Size{480, 640}));
    // 320×240, min 512 / max 640: 512 / 240 gives 682.7 → 683 > 640, so 640 / 320 = 2: 480×640.
    EXPECT_EQ(size_of(240, 320, 512, 640), (Size{480, 640}));
    // 300×200, min 512 / max 1024: 512 / 200 = 2.56 gives 768 ≤ 1024: 512×768.
    EXPECT_EQ(size_of(200, 300, 512, 1024), (Size{512, 768}));
    // 500×333, min 600 / max 1000: 600 / 333 = 1.8018 gives 900.9 → 901 ≤ 1000: 600×901.
    EXPECT_EQ(size_of(333, 500, 600, 1000), (Size{600, 901}));
    // 1000×100, min 600 / max 1024: 6000 > 1024, so 1024 / 1000 = 1.024: 102.4 → 102 high.
    EXPECT_EQ(size_of(100, 1000, 600, 1024), (Size{102, 1024}));
    // A tie rounds to even: 5×2, min 5: scale 2.5 gives 12.5 → 12 wide (half-up would give 13).
    EXPECT_EQ(size_of(2, 5, 5, 0), (Size{5, 12}));
    // Portrait: 480×640 (W×H), min = max = 640: the long side (H) becomes 640, W stays 480.
    EXPECT_EQ(size_of(640, 480, 640, 640), (Size{640, 480}));

    EXPECT_NE(error_of([&] { size_of(10, 10, 700, 640); }).find("min_dimension ≤ max_dimension"), std::string::npos);
    EXPECT_NE(error_of([&] { size_of(10, 10, 0, 640); }).find("min_dimension"), std::string::npos);
}

TEST(DetectionTransforms, KeepAspectRatioWithPaddingKeepsBoxesTight) {
    const DetectionSample sample = three_rectangles();
    // 160×120, min 100 / max 200: 100 / 120 gives 133.3 → 133 wide ≤ 200: content [100, 133], padded to 200².
    const DetectionSample padded = resize_keep_aspect_ratio(sample, {.min_dimension = 100, .max_dimension = 200});
    ASSERT_EQ(padded.image.shape(), (Shape{3, 200, 200}));
    EXPECT_EQ(padded.content_size, (std::array<std::int64_t, 2>{100, 133}));
    EXPECT_TRUE(padding_is_zero(padded));
    // Box 2 {130, 70, 160, 118}: x by 133 / 160, y by 100 / 120.
    EXPECT_FLOAT_EQ(padded.objects[2].box.x_max, static_cast<float>(160 * (133.0 / 160)));
    EXPECT_FLOAT_EQ(padded.objects[2].box.y_min, static_cast<float>(70 * (100.0 / 120)));
    expect_tight(padded, "keep_aspect_ratio 100/200 padded");

    // The seed's 640/640 (enlarging): content 480×640, padded to 640².
    const DetectionSample seed = resize_keep_aspect_ratio(sample, {.min_dimension = 640, .max_dimension = 640});
    ASSERT_EQ(seed.image.shape(), (Shape{3, 640, 640}));
    EXPECT_EQ(seed.content_size, (std::array<std::int64_t, 2>{480, 640}));
    EXPECT_TRUE(padding_is_zero(seed));
    expect_tight(seed, "keep_aspect_ratio 640/640 padded");

    // Without padding the image is the content.
    const DetectionSample unpadded =
        resize_keep_aspect_ratio(sample, {.min_dimension = 100, .max_dimension = 200, .pad_to_max_dimension = false});
    EXPECT_EQ(unpadded.image.shape(), (Shape{3, 100, 133}));

    // Resizing a padded sample resizes its content only: 133×100 content to 64×64 scales box 2's x by 64 / 133.
    const DetectionSample again = resize_fixed_shape(padded, {64, 64});
    EXPECT_NEAR(again.objects[2].box.x_max, 133 * 64.0 / 133, 1e-4);
    expect_tight(again, "fixed_shape of a padded sample");
}

TEST(DetectionTransforms, HorizontalFlipMirrorsBoxesAndTwiceIsTheIdentity) {
    const DetectionSample sample = three_rectangles();
    const DetectionSample flipped = flip_horizontally(sample);
    // x' = W − x with W = 160: box 1 {40, 30, 121, 95} becomes {39, 30, 120, 95}.
    EXPECT_EQ(flipped.objects[1].box, (Box{39, 30, 120, 95}));
    EXPECT_EQ(flipped.objects[0].box, (Box{130, 0, 160, 24}));
    expect_tight(flipped, "flipped");
    // Pixel (x = 0, y = 0) of channel 0 moves to x = 159.
    EXPECT_EQ(flipped.image.at<float>({0, 0, 159}), 1.0f);
    EXPECT_EQ(flipped.image.at<float>({0, 0, 0}), 0.0f);

    const DetectionSample twice = flip_horizontally(flipped);
    EXPECT_TRUE(same_bits(twice.image, sample.image));
    for (std::size_t i = 0; i < sample.objects.size(); ++i) EXPECT_EQ(twice.objects[i].box, sample.objects[i].box);

    // A padded sample flips its content only: the padding stays at the right and bottom.
    const DetectionSample padded = resize_keep_aspect_ratio(sample, {.min_dimension = 100, .max_dimension = 200});
    const DetectionSample padded_flipped = flip_horizontally(padded);
    EXPECT_TRUE(padding_is_zero(padded_flipped));
    expect_tight(padded_flipped, "padded, flipped");
    EXPECT_FLOAT_EQ(padded_flipped.objects[2].box.x_min, 133.0f - padded.objects[2].box.x_max);

    // Random flips: probability 0 never, 1 always; 0.5 about half of 400 draws (binomial σ = 10, so 160..240
    // is ±4σ); the same seed gives the same flips.
    SeededRandom never(1), always(1);
    EXPECT_TRUE(same_bits(random_horizontal_flip(sample, never, 0.0).image, sample.image));
    EXPECT_TRUE(same_bits(random_horizontal_flip(sample, always, 1.0).image, flipped.image));
    const DetectionSample tiny = rectangles_sample(1, 2, {{0, 0, 1, 1}});
    SeededRandom random(5), replay(5);
    int flips = 0;
    for (int draw = 0; draw < 400; ++draw) {
        const bool was_flipped = random_horizontal_flip(tiny, random).objects[0].box.x_min == 1.0f;
        flips += was_flipped;
        EXPECT_EQ(random_horizontal_flip(tiny, replay).objects[0].box.x_min == 1.0f, was_flipped);
    }
    EXPECT_GE(flips, 160);
    EXPECT_LE(flips, 240);
}

TEST(DetectionTransforms, ScaleAndCropFollowsTheVisibleFractionRule) {
    // 100×100, output 50×50, scale 2: the fit is 0.5, so the scaled image is 100×100 (box factor 1), and the
    // window starts at (50, 50).
    //   A {60, 60, 90, 90} → {10, 10, 40, 40}: wholly inside, kept.
    //   B {40, 40, 60, 60} → {−10, −10, 10, 10}, clipped {0, 0, 10, 10}: visible 100 / 400 = 0.25.
    //   C {0, 0, 40, 40}   → {−50, −50, −10, −10}: nothing inside, always dropped.
    const DetectionSample sample = rectangles_sample(100, 100, {{60, 60, 90, 90}, {40, 40, 60, 60}, {0, 0, 40, 40}});
    const DetectionSample at_quarter = scale_and_crop(sample, {50, 50}, 2.0, {50, 50}, 0.25);
    ASSERT_EQ(at_quarter.image.shape(), (Shape{3, 50, 50}));
    ASSERT_EQ(at_quarter.objects.size(), 2u);
    EXPECT_EQ(at_quarter.objects[0].box, (Box{10, 10, 40, 40}));
    EXPECT_EQ(at_quarter.objects[1].box, (Box{0, 0, 10, 10}));
    expect_tight(at_quarter, "scale 2, crop (50, 50)");
    EXPECT_FALSE(measured_rectangle(at_quarter.image, 2).has_value());  // C's pixels are all outside too

    const DetectionSample stricter = scale_and_crop(sample, {50, 50}, 2.0, {50, 50}, 0.3);
    ASSERT_EQ(stricter.objects.size(), 1u);
    EXPECT_EQ(stricter.objects[0].class_id, 0);
    const DetectionSample everything = scale_and_crop(sample, {50, 50}, 2.0, {50, 50}, 0.0);
    EXPECT_EQ(everything.objects.size(), 2u);  // 0 keeps any non-empty part, but C has none

    // Scale 0.6: 100 × 0.5 × 0.6 = 30 px of content, zero padding to 50; boxes × 0.3.
    const DetectionSample small = scale_and_crop(sample, {50, 50}, 0.6, {0, 0}, 0.25);
    EXPECT_EQ(small.content_size, (std::array<std::int64_t, 2>{30, 30}));
    EXPECT_TRUE(padding_is_zero(small));
    ASSERT_EQ(small.objects.size(), 3u);
    EXPECT_NEAR(small.objects[0].box.x_min, 18.0f, 1e-5f);
    EXPECT_NEAR(small.objects[2].box.y_max, 12.0f, 1e-5f);
    expect_tight(small, "scale 0.6, padded");

    EXPECT_NE(error_of([&] {
                  scale_and_crop(sample, {50, 50}, 2.0, {51, 0}, 0.25);
              }).find("crop offset along y in [0, 50]"),
              std::string::npos);
}

TEST(DetectionTransforms, RandomScaleJitterKeepsBoxesTightAndIsSeeded) {
    // Rectangles of 24..80 px in a 120×160 image, output 128×128, scales 0.5..2: boxes of kept objects must
    // match their pixels wherever the crop falls; a kept object has ≥ 25 % of its scaled area visible,
    // which is at least a few pixels here.
    const DetectionSample sample = three_rectangles();
    const ScaleJitterOptions options{.output_size = {128, 128}, .min_scale = 0.5, .max_scale = 2.0};
    int dropped = 0, padded = 0;
    for (std::uint64_t seed = 1; seed <= 40; ++seed) {
        SeededRandom random(seed);
        const DetectionSample jittered = random_scale_jitter(sample, options, random);
        ASSERT_EQ(jittered.image.shape(), (Shape{3, 128, 128}));
        EXPECT_TRUE(padding_is_zero(jittered)) << "seed " << seed;
        expect_tight(jittered, "jitter seed " + std::to_string(seed));
        for (const LabeledBox& object : jittered.objects) {
            EXPECT_GE(object.box.x_min, 0.0f);
            EXPECT_LE(object.box.x_max, static_cast<float>(jittered.content_size[1]));
            EXPECT_LE(object.box.y_max, static_cast<float>(jittered.content_size[0]));
        }
        dropped += static_cast<int>(sample.objects.size() - jittered.objects.size());
        padded += jittered.content_size[0] < 128 || jittered.content_size[1] < 128;

        SeededRandom replay(seed);
        const DetectionSample again = random_scale_jitter(sample, options, replay);
        EXPECT_TRUE(same_bits(again.image, jittered.image)) << "seed " << seed;
        EXPECT_EQ(again.objects.size(), jittered.objects.size());
    }
    // Both sides of the range happened: some crops lost objects, some scales left padding.
    EXPECT_GT(dropped, 0);
    EXPECT_GT(padded, 0);
}

TEST(DetectionTransforms, PaddingTheGroundTruthErrsOrTruncatesAsAsked) {
    // Areas 4, 100, 25, 100.
    const std::vector<LabeledBox> objects{
        {{0, 0, 2, 2}, 0}, {{0, 0, 10, 10}, 1}, {{0, 0, 5, 5}, 2}, {{10, 10, 20, 20}, 3}};
    const std::string message =
        error_of([&] { pad_sample_ground_truth(objects, {.max_number_of_boxes = 2}, "000000139.jpg"); });
    EXPECT_NE(message.find("'000000139.jpg' has 4 objects, more than max_number_of_boxes = 2"), std::string::npos)
        << message;

    // The two largest (areas 100, 100: classes 1 and 3), in their original order.
    const detection::PaddedGroundTruth largest =
        pad_sample_ground_truth(objects, {.max_number_of_boxes = 2, .excess_boxes = ExcessBoxes::KeepLargest}, "a");
    EXPECT_EQ(largest.num_valid, 2);
    EXPECT_EQ(largest.classes.at<std::int32_t>({0}), 1);
    EXPECT_EQ(largest.classes.at<std::int32_t>({1}), 3);
    EXPECT_EQ(largest.boxes.at<float>({1, 0}), 10.0f);
    // Three largest: ties in area keep the earlier, so 100, 100, then 25 (class 2), in original order 1, 2, 3.
    const detection::PaddedGroundTruth three =
        pad_sample_ground_truth(objects, {.max_number_of_boxes = 3, .excess_boxes = ExcessBoxes::KeepLargest}, "a");
    EXPECT_EQ(three.classes.at<std::int32_t>({0}), 1);
    EXPECT_EQ(three.classes.at<std::int32_t>({1}), 2);
    EXPECT_EQ(three.classes.at<std::int32_t>({2}), 3);

    const detection::PaddedGroundTruth first =
        pad_sample_ground_truth(objects, {.max_number_of_boxes = 2, .excess_boxes = ExcessBoxes::KeepFirst}, "a");
    EXPECT_EQ(first.classes.at<std::int32_t>({0}), 0);
    EXPECT_EQ(first.classes.at<std::int32_t>({1}), 1);

    // Within the limit: all objects, zero rows after them.
    const detection::PaddedGroundTruth roomy = pad_sample_ground_truth(objects, {.max_number_of_boxes = 6}, "a");
    EXPECT_EQ(roomy.num_valid, 4);
    EXPECT_EQ(roomy.boxes.shape(), (Shape{6, 4}));
    EXPECT_EQ(roomy.boxes.at<float>({3, 2}), 20.0f);
    EXPECT_EQ(roomy.boxes.at<float>({5, 2}), 0.0f);
}

TEST(DetectionTransforms, RejectsBadInputs) {
    const DetectionSample sample = three_rectangles();
    EXPECT_NE(error_of([&] { resize_fixed_shape(sample, {0, 10}); }).find("size [H, W] ≥ 1"), std::string::npos);
    DetectionSample no_content = sample;
    no_content.content_size = {0, 0};
    EXPECT_NE(error_of([&] { flip_horizontally(no_content); }).find("make_detection_sample"), std::string::npos);
    EXPECT_NE(error_of([&] {
                  make_detection_sample(Tensor::zeros({4, 4}, DType::F32), {});
              }).find("[C, H, W] f32"),
              std::string::npos);
    SeededRandom random(1);
    EXPECT_NE(error_of([&] {
                  random_scale_jitter(sample, {.min_scale = 2, .max_scale = 1}, random);
              }).find("min_scale ≤ max_scale"),
              std::string::npos);
}
