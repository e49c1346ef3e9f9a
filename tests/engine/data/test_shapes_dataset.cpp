// The synthetic shapes source: whole images with boxes, batches that are pure functions of their index,
// flips that move boxes with their pixels, and the ground-truth padding rules.
#include "data/dataset.hpp"

#include "core/error.hpp"
#include "data/synthetic_shapes.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace tessera {
namespace {

data::DataConfig shapes_config() {
    data::DataConfig config;
    config.source = data::SourceKind::SyntheticShapes;
    config.num_train_images = 3;
    config.num_eval_images = 2;
    config.normalization = data::Normalization::None;  // pixels as drawn, in [0, 1]
    config.object_size = {12, 60};
    config.seed = 11;
    return config;
}

bool same_values(const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && std::memcmp(a.contiguous().data<float>(), b.contiguous().data<float>(), a.num_bytes()) == 0;
}

// Image n of a batch [N, C, H, W] as [C, H, W].
Tensor image_of(const Tensor& batch, std::int64_t n) {
    return batch.view_box({n, 0, 0, 0}, {1, batch.dim(1), batch.dim(2), batch.dim(3)}).contiguous().reshape(
        {batch.dim(1), batch.dim(2), batch.dim(3)});
}

// The image mirrored left-right, computed here pixel by pixel.
Tensor mirrored(const Tensor& image) {
    Tensor out = image.clone();
    const std::int64_t channels = image.dim(0), height = image.dim(1), width = image.dim(2);
    for (std::int64_t c = 0; c < channels; ++c)
        for (std::int64_t y = 0; y < height; ++y)
            for (std::int64_t x = 0; x < width; ++x) out.at<float>({c, y, x}) = image.at<float>({c, y, width - 1 - x});
    return out;
}

TEST(ShapesDataset, BatchesAreWholeImagesWithTheirBoxesAndPureFunctionsOfTheIndex) {
    const auto dataset = data::make_dataset(shapes_config(), {2, 3, 96, 128}, data::num_shape_classes);
    EXPECT_TRUE(dataset->is_detection());
    EXPECT_EQ(dataset->class_names(), (std::vector<std::string>{"disc", "square", "triangle", "cross"}));
    const data::Batch batch = dataset->training_batch(4);
    EXPECT_EQ(batch.images.shape(), (Shape{2, 3, 96, 128}));
    EXPECT_FALSE(batch.labels.is_defined());  // boxes, not label maps
    ASSERT_EQ(batch.ground_truth.size(), 2u);
    for (const detection::PaddedGroundTruth& truth : batch.ground_truth) {
        EXPECT_EQ(truth.boxes.shape(), (Shape{100, 4}));  // max_number_of_boxes' default
        EXPECT_GE(truth.num_valid, 1);
        for (std::int64_t g = 0; g < truth.num_valid; ++g) {
            EXPECT_GE(truth.boxes.at<float>({g, 0}), 0.0f);
            EXPECT_LE(truth.boxes.at<float>({g, 2}), 128.0f);  // x within the width
            EXPECT_LE(truth.boxes.at<float>({g, 3}), 96.0f);   // y within the height
        }
    }
    const data::Batch again = dataset->training_batch(4);
    EXPECT_TRUE(same_values(batch.images, again.images));
    EXPECT_TRUE(same_values(batch.ground_truth[1].boxes, again.ground_truth[1].boxes));
    EXPECT_FALSE(same_values(batch.images, dataset->training_batch(5).images));

    ASSERT_EQ(dataset->num_eval_examples(), 2);
    const data::Example held_out = dataset->eval_example(1);
    EXPECT_EQ(held_out.image.shape(), (Shape{3, 96, 128}));
    EXPECT_FALSE(held_out.objects.empty());
    EXPECT_FALSE(held_out.labels.is_defined());
}

// With flips on, every image is its unflipped self (same seed, same image drawn) or its mirror, and the
// boxes follow: x ↦ W − x for the mirrored ones.
TEST(ShapesDataset, AFlipMovesTheBoxesWithThePixels) {
    data::DataConfig plain = shapes_config();
    data::DataConfig flipping = plain;
    flipping.augment.flip_axes = {1};
    const Shape shape{4, 3, 64, 96};
    const auto unflipped = data::make_dataset(plain, shape, 4);
    const auto flipped = data::make_dataset(flipping, shape, 4);
    int mirrored_count = 0, kept_count = 0;
    for (std::int64_t index = 0; index < 3; ++index) {
        const data::Batch a = unflipped->training_batch(index);
        const data::Batch b = flipped->training_batch(index);
        for (std::int64_t n = 0; n < shape[0]; ++n) {
            const Tensor original = image_of(a.images, n);
            const Tensor seen = image_of(b.images, n);
            const detection::PaddedGroundTruth& truth_a = a.ground_truth[static_cast<std::size_t>(n)];
            const detection::PaddedGroundTruth& truth_b = b.ground_truth[static_cast<std::size_t>(n)];
            ASSERT_EQ(truth_a.num_valid, truth_b.num_valid);
            const bool was_mirrored = same_values(seen, mirrored(original));
            ASSERT_TRUE(was_mirrored || same_values(seen, original)) << "batch " << index << " image " << n;
            (was_mirrored ? mirrored_count : kept_count) += 1;
            for (std::int64_t g = 0; g < truth_a.num_valid; ++g) {
                const float x_min = truth_a.boxes.at<float>({g, 0}), x_max = truth_a.boxes.at<float>({g, 2});
                EXPECT_FLOAT_EQ(truth_b.boxes.at<float>({g, 0}), was_mirrored ? 96.0f - x_max : x_min);
                EXPECT_FLOAT_EQ(truth_b.boxes.at<float>({g, 2}), was_mirrored ? 96.0f - x_min : x_max);
                EXPECT_FLOAT_EQ(truth_b.boxes.at<float>({g, 1}), truth_a.boxes.at<float>({g, 1}));
                EXPECT_EQ(truth_b.classes.at<std::int32_t>({g}), truth_a.classes.at<std::int32_t>({g}));
            }
        }
    }
    EXPECT_GT(mirrored_count, 0);  // 12 fair draws: both outcomes occur for this seed
    EXPECT_GT(kept_count, 0);
}

TEST(ShapesDataset, TooManyBoxesNameTheImageAndTheFixOrKeepTheLargest) {
    data::DataConfig config = shapes_config();
    config.object_count = {6, 6};
    config.max_number_of_boxes = 3;
    const auto strict = data::make_dataset(config, {1, 3, 128, 128}, 4);
    try {
        (void)strict->training_batch(0);
        FAIL() << "expected an error";
    } catch (const Error& error) {
        const std::string message = error.what();
        EXPECT_NE(message.find("synthetic shapes training image"), std::string::npos) << message;
        EXPECT_NE(message.find("raise max_number_of_boxes"), std::string::npos) << message;
        EXPECT_NE(message.find("data.excess_boxes"), std::string::npos) << message;
    }
    config.excess_boxes = data::ExcessBoxes::KeepLargest;
    const data::Batch batch = data::make_dataset(config, {1, 3, 128, 128}, 4)->training_batch(0);
    EXPECT_EQ(batch.ground_truth[0].num_valid, 3);
}

TEST(ShapesDataset, RefusesWhatItCannotFeed) {
    const auto expect_error = [](const data::DataConfig& config, const Shape& shape, std::int64_t classes, const std::string& expected) {
        try {
            (void)data::make_dataset(config, shape, classes);
            FAIL() << "expected an error with " << expected;
        } catch (const Error& error) {
            EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
        }
    };
    expect_error(shapes_config(), {1, 3, 64, 64}, 3, "set model.num_classes to 4 or more, got 3");
    expect_error(shapes_config(), {1, 2, 64, 64}, 4, "set input.channels to 3 or 1, got 2");
    expect_error(shapes_config(), {1, 3, 8, 64, 64}, 4, "synthetic shapes are 2D images");
    data::DataConfig turned = shapes_config();
    turned.augment.rotate90 = true;
    expect_error(turned, {1, 3, 64, 64}, 4, "remove rotate90");
}

// A COCO-sized head (the planned 2560² preset's 90 classes) trains on the shapes: the labels stay 0–3,
// the other classes are named and never occur.
TEST(ShapesDataset, FeedsAModelWithMoreClassesThanShapes) {
    const auto four = data::make_dataset(shapes_config(), {2, 3, 128, 128}, 4);
    const auto ninety = data::make_dataset(shapes_config(), {2, 3, 128, 128}, 90);
    EXPECT_EQ(ninety->num_classes(), 90);
    const std::vector<std::string> names = ninety->class_names();
    ASSERT_EQ(names.size(), 90u);
    EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 4), four->class_names());
    EXPECT_EQ(names[4], "unused 4");
    EXPECT_EQ(names[89], "unused 89");
    EXPECT_NE(ninety->describe().find("classes 0–3 of the model's 90"), std::string::npos) << ninety->describe();
    // The same images and boxes as with four classes.
    const data::Batch a = four->training_batch(3), b = ninety->training_batch(3);
    ASSERT_EQ(a.ground_truth.size(), b.ground_truth.size());
    for (std::size_t n = 0; n < a.ground_truth.size(); ++n) {
        EXPECT_EQ(a.ground_truth[n].num_valid, b.ground_truth[n].num_valid);
        const std::int32_t* classes_a = a.ground_truth[n].classes.data<std::int32_t>();
        const std::int32_t* classes_b = b.ground_truth[n].classes.data<std::int32_t>();
        for (std::int64_t i = 0; i < a.ground_truth[n].num_valid; ++i) {
            EXPECT_EQ(classes_a[i], classes_b[i]);
            EXPECT_LT(classes_b[i], 4);
        }
    }
    EXPECT_EQ(std::memcmp(a.images.data<float>(), b.images.data<float>(), a.images.num_bytes()), 0);
}

}  // namespace
}  // namespace tessera
