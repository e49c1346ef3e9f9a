// The TFRecord source (data.source "tfrecord") on shards written from a small folder of class folders.
// Every image is one solid colour that encodes what it is — red: its class, green: its number — so which
// record a batch holds, and whether its label belongs to it, is read back from the pixels (an independent
// reference, not the source's bookkeeping).
#include "data/dataset.hpp"

#include "data/image_shards.hpp"
#include "data_test_support.hpp"
#include "io/tf_example.hpp"
#include "io/tfrecord.hpp"

#include <gtest/gtest.h>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <cmath>
#include <map>
#include <set>
#include <thread>

using namespace tessera;
using namespace tessera::data;
using tessera::data::test::error_message;
using tessera::data::test::same_batch;
using tessera::data::test::same_bytes;

namespace {

namespace fs = std::filesystem;

constexpr int k_classes = 3, k_images_per_class = 4, k_image_height = 12, k_image_width = 16;

// 8-bit channel values: red 20 + 40·class, green 5 + 10·number (number = 0 … 11 over all images).
int red_of(int class_index) { return 20 + 40 * class_index; }
int green_of(int number) { return 5 + 10 * number; }

struct Identity {
    int class_index = -1, number = -1;
};

// What a [3, H, W] image in [0, 1] (normalisation "none", solid) says it is; checks it is solid.
Identity identity_of(const Tensor& image) {
    const Tensor dense = image.contiguous();
    const float red = dense.at<float>({0, 0, 0}), green = dense.at<float>({1, 0, 0});
    for (std::int64_t y = 0; y < dense.dim(1); ++y) {
        for (std::int64_t x = 0; x < dense.dim(2); ++x) {
            EXPECT_NEAR(dense.at<float>({0, y, x}), red, 1e-5) << "not solid at " << y << ", " << x;
            EXPECT_NEAR(dense.at<float>({1, y, x}), green, 1e-5) << "not solid at " << y << ", " << x;
        }
    }
    return {static_cast<int>(std::lround((red * 255.0f - 20.0f) / 40.0f)), static_cast<int>(std::lround((green * 255.0f - 5.0f) / 10.0f))};
}

Tensor image_of(const Tensor& batch, std::int64_t n) {
    return batch.view_box({n, 0, 0, 0}, {1, batch.dim(1), batch.dim(2), batch.dim(3)}).contiguous().reshape({batch.dim(1), batch.dim(2), batch.dim(3)});
}

class TFRecordSource : public ::testing::Test {
protected:
    void SetUp() override {
        // class folders a, b, c: image `number` is in class number / 4.
        for (int number = 0; number < k_classes * k_images_per_class; ++number) {
            const int class_index = number / k_images_per_class;
            const fs::path folder = scratch.path() / "photos" / std::string(1, static_cast<char>('a' + class_index));
            fs::create_directories(folder);
            cv::Mat pixels(k_image_height, k_image_width, CV_8UC3, cv::Scalar(0, green_of(number), red_of(class_index)));  // B, G, R
            ASSERT_TRUE(cv::imwrite((folder / ("image_" + std::to_string(number) + ".png")).string(), pixels));
        }
        summary = write_image_shards(scratch.path() / "photos", scratch.path() / "shards" / "photos", {.num_shards = 3});
        config.source = SourceKind::TFRecord;
        config.records = scratch.path() / "shards" / "photos-*";
        config.normalization = Normalization::None;
        config.static_shape = StaticShape::Resize;
    }

    // Every record's identity in file order (shards sorted, records in order), read with the engine's reader.
    std::vector<Identity> records_in_order() const {
        std::vector<Identity> order;
        for (const fs::path& shard : summary.shards) {
            io::TFRecordReader reader(shard);
            std::vector<std::byte> data;
            while (reader.next(data)) {
                const io::TFExample example = io::parse_tf_example(data);
                const std::string& name = example.at("image/filename").bytes.at(0);  // image_<number>.png
                const int number = std::stoi(name.substr(6));
                order.push_back({number / k_images_per_class, number});
            }
        }
        return order;
    }

    tessera::data::test::ScratchDir scratch;
    ShardSummary summary;
    DataConfig config;
};

TEST_F(TFRecordSource, EachEpochVisitsEveryTrainingRecordOnceWithItsOwnLabel) {
    config.holdout_fraction = 0.25;  // the last 3 of 12 records
    const Shape batch_shape{4, 3, 8, 8};
    const auto dataset = make_dataset(config, batch_shape, k_classes);
    const std::vector<Identity> order = records_in_order();
    ASSERT_EQ(order.size(), 12u);
    std::set<int> held_out;
    for (std::size_t i = 9; i < 12; ++i) held_out.insert(order[i].number);

    std::vector<int> seen;  // numbers, in the order the stream serves them
    for (std::int64_t index = 0; index < 5; ++index) {  // 20 samples: epochs 0, 1 and two of 2
        const Batch batch = dataset->training_batch(index);
        ASSERT_EQ(batch.images.shape(), batch_shape);
        for (std::int64_t n = 0; n < 4; ++n) {
            const Identity identity = identity_of(image_of(batch.images, n));
            EXPECT_EQ(batch.labels.data<std::int32_t>()[n], identity.class_index) << "the label is not its image's class";
            EXPECT_EQ(identity.class_index, identity.number / k_images_per_class);
            seen.push_back(identity.number);
        }
    }
    for (int epoch = 0; epoch < 2; ++epoch) {
        std::set<int> numbers(seen.begin() + 9 * epoch, seen.begin() + 9 * (epoch + 1));
        EXPECT_EQ(numbers.size(), 9u) << "epoch " << epoch << " repeats a record";
        for (int number : numbers) EXPECT_FALSE(held_out.contains(number)) << "held-out image " << number << " trained on";
    }
    EXPECT_NE(std::vector<int>(seen.begin(), seen.begin() + 9), std::vector<int>(seen.begin() + 9, seen.begin() + 18))
        << "two epochs in the same order: not shuffled per epoch";

    // Held out: the last records in file order, whole, with their labels and file names.
    ASSERT_EQ(dataset->num_eval_examples(), 3);
    for (std::int64_t i = 0; i < 3; ++i) {
        const Example example = dataset->eval_example(i);
        const Identity identity = identity_of(example.image);
        EXPECT_EQ(identity.number, order[static_cast<std::size_t>(9 + i)].number);
        EXPECT_EQ(example.labels.data<std::int32_t>()[0], identity.class_index);
        EXPECT_EQ(example.name, "image_" + std::to_string(identity.number) + ".png");
        EXPECT_EQ(example.image.shape(), (Shape{3, 8, 8}));
    }
    EXPECT_NE(dataset->describe().find("9 training images + 3 held out"), std::string::npos) << dataset->describe();
}

TEST_F(TFRecordSource, BatchesArePureFunctionsOfTheStepOnAnyThreadAndFromAnyInstance) {
    config.augment.flip_axes = {0, 1};
    config.augment.intensity_scale = 0.2;
    const Shape batch_shape{4, 3, 8, 8};
    const auto first = make_dataset(config, batch_shape, k_classes);
    const auto second = make_dataset(config, batch_shape, k_classes);
    const Batch late = first->training_batch(7);  // epoch 3 before epochs 0 and 1 are asked for
    Batch from_thread;
    std::thread([&] { from_thread = second->training_batch(7); }).join();
    EXPECT_TRUE(same_batch(late, from_thread));
    EXPECT_TRUE(same_batch(first->training_batch(0), second->training_batch(0)));
    EXPECT_TRUE(same_batch(first->training_batch(7), late));
    config.seed = 2;
    EXPECT_FALSE(same_batch(make_dataset(config, batch_shape, k_classes)->training_batch(7), late));
}

TEST_F(TFRecordSource, StaticShapesAndGreyInputsKeepThePixels) {
    config.holdout_fraction = 0;
    // Crop: an 8×8 window of a 12×16 image; pad_to_max: 16 wide scaled to 8, so 6 rows of content then zeros.
    for (const StaticShape shape : {StaticShape::Crop, StaticShape::PadToMax}) {
        config.static_shape = shape;
        const auto dataset = make_dataset(config, {2, 3, 8, 8}, k_classes);
        const Batch batch = dataset->training_batch(0);
        for (std::int64_t n = 0; n < 2; ++n) {
            const Tensor image = image_of(batch.images, n);
            const std::int64_t content_rows = shape == StaticShape::Crop ? 8 : 6;
            const Identity identity = identity_of(image.view_box({0, 0, 0}, {3, content_rows, 8}));
            EXPECT_EQ(batch.labels.data<std::int32_t>()[n], identity.class_index);
            for (std::int64_t y = content_rows; y < 8; ++y) EXPECT_EQ(image.at<float>({0, y, 3}), 0.0f) << "padding row " << y;
        }
    }
    // A crop larger than the image: the image inside, zeros around.
    config.static_shape = StaticShape::Crop;
    const auto large = make_dataset(config, {1, 3, 20, 20}, k_classes);
    const Tensor padded = image_of(large->training_batch(0).images, 0);
    float nonzero = 0;
    for (std::int64_t y = 0; y < 20; ++y) {
        for (std::int64_t x = 0; x < 20; ++x) nonzero += padded.at<float>({0, y, x}) != 0.0f ? 1.0f : 0.0f;
    }
    EXPECT_EQ(nonzero, static_cast<float>(k_image_height * k_image_width));
}

TEST_F(TFRecordSource, GreyInputIsTheMeanOfTheColours) {
    config.holdout_fraction = 0.25;
    const auto colour = make_dataset(config, {1, 3, 8, 8}, k_classes);
    const auto grey = make_dataset(config, {1, 1, 8, 8}, k_classes);
    const Example rgb = colour->eval_example(0), mean = grey->eval_example(0);
    ASSERT_EQ(mean.image.shape(), (Shape{1, 8, 8}));
    const float expected = (rgb.image.at<float>({0, 2, 2}) + rgb.image.at<float>({1, 2, 2}) + rgb.image.at<float>({2, 2, 2})) / 3.0f;
    EXPECT_NEAR(mean.image.at<float>({0, 2, 2}), expected, 1e-6);
}

TEST_F(TFRecordSource, SeparateHeldOutShardsAndFirstLabel) {
    // The same shards as held-out ones, labels read from 0 with first_label 0: every class moves up one, so
    // four classes are needed and class 0 is never seen.
    config.eval_records = config.records;
    config.first_label = 0;
    const auto dataset = make_dataset(config, {2, 3, 8, 8}, k_classes + 1);
    EXPECT_EQ(dataset->num_eval_examples(), 12);
    const Example example = dataset->eval_example(5);
    EXPECT_EQ(example.labels.data<std::int32_t>()[0], identity_of(example.image).class_index + 1);
    // With three classes, the third class's label 3 has no class: the error names the record and the fix.
    const auto narrow = make_dataset(config, {12, 3, 8, 8}, k_classes);
    const std::string message = error_message([&] { narrow->training_batch(0); });
    EXPECT_NE(message.find("image/class/label 3"), std::string::npos) << message;
    EXPECT_NE(message.find("data.first_label"), std::string::npos) << message;
    EXPECT_NE(message.find("byte offset"), std::string::npos) << message;
}

TEST_F(TFRecordSource, BadShardsAreRefusedNamingTheShardAndTheRecord) {
    const Shape batch_shape{2, 3, 8, 8};
    // No shard matches.
    config.records = scratch.path() / "shards" / "train-*";
    std::string message = error_message([&] { make_dataset(config, batch_shape, k_classes); });
    EXPECT_NE(message.find("matches no file"), std::string::npos) << message;
    EXPECT_NE(message.find("3 other files"), std::string::npos) << message;
    config.records = scratch.path() / "sh*" / "photos-*";
    message = error_message([&] { make_dataset(config, batch_shape, k_classes); });
    EXPECT_NE(message.find("wildcards may only stand in the file name"), std::string::npos) << message;

    // A damaged data byte: indexing reads headers only, the batch that reads the record refuses it.
    const fs::path damaged = scratch.path() / "damaged" / "one-00000-of-00001";
    fs::create_directories(damaged.parent_path());
    fs::copy_file(summary.shards[0], damaged);
    {
        std::fstream file(damaged, std::ios::in | std::ios::out | std::ios::binary);
        file.seekp(40);
        char byte = 0;
        file.read(&byte, 1);
        file.seekp(40);
        byte = static_cast<char>(byte ^ 0x10);
        file.write(&byte, 1);
    }
    config.records = damaged;
    config.holdout_fraction = 0;
    const auto dataset = make_dataset(config, {4, 3, 8, 8}, k_classes);
    message = error_message([&] { dataset->training_batch(0); });
    EXPECT_NE(message.find("one-00000-of-00001"), std::string::npos) << message;
    EXPECT_NE(message.find("corrupt record at byte offset 0"), std::string::npos) << message;

    // A truncated shard: refused when indexed, before training.
    fs::resize_file(damaged, fs::file_size(damaged) - 7);
    message = error_message([&] { make_dataset(config, batch_shape, k_classes); });
    EXPECT_NE(message.find("truncated"), std::string::npos) << message;

    // Records that are not a classifier's: no label; not a tf.Example at all.
    io::TFExample unlabelled;
    unlabelled["image/encoded"] = {.kind = io::TFFeature::Kind::Bytes, .bytes = {"not really an image"}};
    const std::string not_an_example = "\x0a\x05hello";  // field 1 holds 5 bytes that are no Features
    io::write_tfrecords(damaged, {io::serialize_tf_example(unlabelled)});
    const auto no_label = make_dataset(config, {1, 3, 8, 8}, k_classes);
    message = error_message([&] { no_label->training_batch(0); });
    EXPECT_NE(message.find("no single integer label under image/class/label (its features: image/encoded)"), std::string::npos)
        << message;
    const auto bytes = std::as_bytes(std::span(not_an_example.data(), not_an_example.size()));
    io::write_tfrecords(damaged, {std::vector<std::byte>(bytes.begin(), bytes.end())});
    const auto garbage = make_dataset(config, {1, 3, 8, 8}, k_classes);
    message = error_message([&] { garbage->training_batch(0); });
    EXPECT_NE(message.find("is not a tf.Example"), std::string::npos) << message;

    // A label but an image that does not decode.
    unlabelled["image/class/label"] = {.kind = io::TFFeature::Kind::Int64, .int64s = {1}};
    io::write_tfrecords(damaged, {io::serialize_tf_example(unlabelled)});
    const auto undecodable = make_dataset(config, {1, 3, 8, 8}, k_classes);
    message = error_message([&] { undecodable->training_batch(0); });
    EXPECT_NE(message.find("the image of record 0 (byte offset 0)"), std::string::npos) << message;
    EXPECT_NE(message.find("is not a PNG, JPEG or BMP"), std::string::npos) << message;
}

}  // namespace
