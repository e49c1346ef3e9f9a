// Datasets: determinism, shapes, the held-out split, foreground sampling, augmentation and labels.
#include "data/dataset.hpp"
#include "data_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <thread>

using namespace tessera;
using namespace tessera::data;
using namespace tessera::data::test;

namespace {

DataConfig small_em() {
    DataConfig config;
    config.image_size = {96, 112};
    config.num_train_images = 3;
    config.num_eval_images = 1;
    return config;
}

std::set<std::int32_t> label_values(const Tensor& labels) {
    const std::int32_t* values = labels.data<std::int32_t>();
    return std::set<std::int32_t>(values, values + labels.num_elements());
}

// One sample of a batch: images [C, spatial...], labels [spatial...].
Tensor sample_of(const Tensor& batch_tensor, std::int64_t n) {
    Shape begin(batch_tensor.shape().size(), 0), extent = batch_tensor.shape();
    begin[0] = n;
    extent[0] = 1;
    Shape shape(batch_tensor.shape().begin() + 1, batch_tensor.shape().end());
    return batch_tensor.view_box(begin, extent).contiguous().reshape(shape);
}

}  // namespace

TEST(DataDataset, SameIndexIsBitIdenticalInAnyOrderAndFromTwoThreads) {
    const DataConfig config = small_em();
    const Shape input{4, 1, 48, 48};
    constexpr int num_batches = 6;
    std::vector<Batch> forward;
    {
        const auto dataset = make_dataset(config, input, 2);
        for (int i = 0; i < num_batches; ++i) forward.push_back(dataset->training_batch(i));
        EXPECT_TRUE(same_batch(dataset->training_batch(2), forward[2])) << "asked twice";
    }
    {
        const auto dataset = make_dataset(config, input, 2);  // a fresh one, asked backwards
        for (int i = num_batches - 1; i >= 0; --i) EXPECT_TRUE(same_batch(dataset->training_batch(i), forward[static_cast<std::size_t>(i)])) << i;
    }
    // Two threads on a fresh dataset race to generate its images; both must see the same batches.
    const auto dataset = make_dataset(config, input, 2);
    std::vector<Batch> even(num_batches), odd(num_batches);
    std::thread first([&] { for (int i = 0; i < num_batches; ++i) even[static_cast<std::size_t>(i)] = dataset->training_batch(i); });
    std::thread second([&] { for (int i = num_batches - 1; i >= 0; --i) odd[static_cast<std::size_t>(i)] = dataset->training_batch(i); });
    first.join();
    second.join();
    for (std::size_t i = 0; i < num_batches; ++i) {
        EXPECT_TRUE(same_batch(even[i], forward[i])) << i;
        EXPECT_TRUE(same_batch(odd[i], forward[i])) << i;
    }
}

TEST(DataDataset, DifferentIndicesAndSeedsDiffer) {
    DataConfig config = small_em();
    const auto dataset = make_dataset(config, {2, 1, 32, 32}, 2);
    const Batch a = dataset->training_batch(0);
    EXPECT_FALSE(same_bytes(a.images, dataset->training_batch(1).images));
    EXPECT_FALSE(same_bytes(a.images, dataset->training_batch(1000).images));
    // The two samples of one batch differ too.
    EXPECT_FALSE(same_bytes(sample_of(a.images, 0), sample_of(a.images, 1)));
    config.seed = 2;
    EXPECT_FALSE(same_bytes(a.images, make_dataset(config, {2, 1, 32, 32}, 2)->training_batch(0).images));
    // Held-out images are not training images.
    const Example held_out = dataset->eval_example(0);
    EXPECT_EQ(held_out.name, "em_eval_0");
    EXPECT_THROW(dataset->eval_example(1), Error);
    EXPECT_THROW(dataset->training_batch(-1), Error);
}

TEST(DataDataset, ShapesFor2DAnd3DSegmentationAndClassification) {
    {
        const auto em = make_dataset(small_em(), {2, 1, 32, 40}, 2);
        const Batch batch = em->training_batch(0);
        EXPECT_EQ(batch.images.shape(), (Shape{2, 1, 32, 40}));
        EXPECT_EQ(batch.images.dtype(), DType::F32);
        EXPECT_EQ(batch.labels.shape(), (Shape{2, 32, 40}));
        EXPECT_EQ(batch.labels.dtype(), DType::I32);
        EXPECT_EQ(em->batch_shape(), (Shape{2, 1, 32, 40}));
        EXPECT_EQ(em->num_classes(), 2);
        const Example example = em->eval_example(0);
        EXPECT_EQ(example.image.shape(), (Shape{1, 96, 112}));  // the whole held-out section
        EXPECT_EQ(example.labels.shape(), (Shape{96, 112}));
        EXPECT_EQ(example.geometry.size, (std::array<std::int64_t, 3>{112, 96, 1}));
        EXPECT_NE(em->describe().find("synthetic EM sections 112×96, 3 training + 1 held out"), std::string::npos)
            << em->describe();
    }
    {
        DataConfig config;
        config.source = SourceKind::SyntheticCt;
        config.image_size = {20, 24, 28};
        config.num_train_images = 2;
        config.num_eval_images = 1;
        const auto ct = make_dataset(config, {2, 1, 16, 16, 16}, 6);
        const Batch batch = ct->training_batch(3);
        EXPECT_EQ(batch.images.shape(), (Shape{2, 1, 16, 16, 16}));
        EXPECT_EQ(batch.labels.shape(), (Shape{2, 16, 16, 16}));
        for (std::int32_t label : label_values(batch.labels)) EXPECT_TRUE(label >= 0 && label <= 5) << label;
        const Example example = ct->eval_example(0);
        EXPECT_EQ(example.image.shape(), (Shape{1, 20, 24, 28}));
        EXPECT_EQ(example.labels.shape(), (Shape{20, 24, 28}));
        EXPECT_EQ(example.geometry.size, (std::array<std::int64_t, 3>{28, 24, 20}));
        // A 2D model on CT gets sections of the model input's size by default.
        const auto sections = make_dataset(DataConfig{.source = SourceKind::SyntheticCt, .num_train_images = 1}, {1, 1, 24, 32}, 6);
        EXPECT_EQ(sections->eval_example(0).image.shape(), (Shape{1, 24, 32}));
    }
    {
        DataConfig config;
        config.source = SourceKind::FakeImages;
        config.num_eval_images = 3;
        const auto fake = make_dataset(config, {5, 3, 8, 12}, 10);
        const Batch batch = fake->training_batch(0);
        EXPECT_EQ(batch.images.shape(), (Shape{5, 3, 8, 12}));
        EXPECT_EQ(batch.labels.shape(), (Shape{5}));
        for (std::int32_t label : label_values(batch.labels)) EXPECT_TRUE(label >= 0 && label < 10) << label;
        ASSERT_EQ(fake->num_eval_examples(), 3);
        const Example example = fake->eval_example(2);
        EXPECT_EQ(example.image.shape(), (Shape{3, 8, 12}));
        EXPECT_EQ(example.labels.shape(), (Shape{1}));
        EXPECT_EQ(example.geometry.size, (std::array<std::int64_t, 3>{12, 8, 1}));
        EXPECT_TRUE(same_bytes(example.image, fake->eval_example(2).image));
        // Labels over many batches are spread over the classes.
        std::set<std::int32_t> seen;
        for (int i = 0; i < 20; ++i) {
            for (std::int32_t label : label_values(fake->training_batch(i).labels)) seen.insert(label);
        }
        EXPECT_EQ(seen.size(), 10u);
        EXPECT_THROW(make_dataset(DataConfig{.source = SourceKind::FakeImages, .image_size = {16, 16}}, {1, 3, 8, 8}, 10), Error);
    }
}

TEST(DataDataset, TrainingPatchesNeverTouchTheHeldOutSlab) {
    ScratchDir scratch;
    // 20 slices; the label is the slice index + 1, so a label names the slice it came from.
    write_pair(scratch / "images/vol.nii.gz", scratch / "labels/vol_seg.nii.gz", {24, 20, 20},
               [](std::int64_t z, std::int64_t y, std::int64_t x) { return static_cast<float>(z * 100 + y + x); },
               [](std::int64_t z, std::int64_t, std::int64_t) { return static_cast<std::int32_t>(z + 1); });
    DataConfig config;
    config.source = SourceKind::Folder;
    config.images_dir = scratch / "images";
    config.labels_dir = scratch / "labels";
    config.holdout_fraction = 0.25;  // slices 15-19 held out
    config.foreground_fraction = 0.5;
    config.augment.flip_axes = {0};
    for (const Shape& input : {Shape{4, 1, 8, 8, 8}, Shape{2, 1, 24, 8, 8}}) {  // the second is deeper than the training slab
        const auto dataset = make_dataset(config, input, 21);
        std::set<std::int32_t> seen;
        for (int i = 0; i < 60; ++i) {
            for (std::int32_t label : label_values(dataset->training_batch(i).labels)) seen.insert(label);
        }
        EXPECT_LE(*seen.rbegin(), 15) << "a training patch reached the held-out slices, input " << shape_to_string(input);
        EXPECT_EQ(seen.count(1), 1u);
        EXPECT_EQ(seen.count(15), 1u);
        EXPECT_EQ(seen.count(0), input[2] > 15 ? 1u : 0u) << "only a patch deeper than the slab is padded";
        ASSERT_EQ(dataset->num_eval_examples(), 1);
        const Example held_out = dataset->eval_example(0);
        EXPECT_EQ(held_out.name, "vol slices 15-19");
        EXPECT_EQ(held_out.labels.shape(), (Shape{5, 20, 24}));
        EXPECT_EQ(label_values(held_out.labels), (std::set<std::int32_t>{16, 17, 18, 19, 20}));
        EXPECT_EQ(held_out.geometry.size, (std::array<std::int64_t, 3>{24, 20, 5}));
        EXPECT_NEAR(held_out.geometry.origin[2], 30.0 + 15 * 2.0, 1e-9);
        EXPECT_NE(dataset->describe().find("slices 0-14 training + 15-19 held out"), std::string::npos) << dataset->describe();
    }

    // A single 2D image holds out its last rows.
    write_pair(scratch / "flat/img.nii", scratch / "flat/img_label.nii", {16, 40, 1},
               [](std::int64_t, std::int64_t y, std::int64_t) { return static_cast<float>(y); },
               [](std::int64_t, std::int64_t y, std::int64_t) { return static_cast<std::int32_t>(y + 1); });
    config.images_dir = scratch / "flat";
    config.labels_dir.clear();
    config.augment.flip_axes = {0, 1};
    const auto flat = make_dataset(config, {4, 1, 16, 16}, 41);
    std::set<std::int32_t> seen;
    for (int i = 0; i < 40; ++i) {
        for (std::int32_t label : label_values(flat->training_batch(i).labels)) seen.insert(label);
    }
    EXPECT_EQ(*seen.rbegin(), 30);
    EXPECT_EQ(*seen.begin(), 1);
    const Example rows = flat->eval_example(0);
    EXPECT_EQ(rows.name, "img rows 30-39");
    EXPECT_EQ(rows.image.shape(), (Shape{1, 10, 16}));
    EXPECT_EQ(*label_values(rows.labels).begin(), 31);
}

TEST(DataDataset, ForegroundFractionIsAsConfigured) {
    ScratchDir scratch;
    // A 64×64 image whose only foreground is an 8×8 square in the middle.
    write_pair(scratch / "img.nii.gz", scratch / "img_mask.nii.gz", {64, 64, 1},
               [](std::int64_t, std::int64_t y, std::int64_t x) { return static_cast<float>(x + y); },
               [](std::int64_t, std::int64_t y, std::int64_t x) { return y >= 28 && y < 36 && x >= 28 && x < 36 ? 1 : 0; });
    DataConfig config;
    config.source = SourceKind::Folder;
    config.images_dir = scratch.path();
    config.holdout_fraction = 0;
    // Random centres land in the square with probability (8/49)^2 ≈ 0.027 (starts 0..48 per axis).
    const double by_chance = (8.0 / 49.0) * (8.0 / 49.0);
    for (double fraction : {0.0, 0.3, 1.0}) {
        config.foreground_fraction = fraction;
        const auto dataset = make_dataset(config, {16, 1, 16, 16}, 2);
        int centred = 0, total = 0;
        for (int i = 0; i < 125; ++i) {
            const Tensor labels = dataset->training_batch(i).labels;
            for (std::int64_t n = 0; n < 16; ++n, ++total) centred += labels.at<std::int32_t>({n, 8, 8});
        }
        const double expected = fraction + (1 - fraction) * by_chance;
        EXPECT_NEAR(static_cast<double>(centred) / total, expected, 0.035) << "foreground_fraction " << fraction;
        if (fraction == 1.0) {
            EXPECT_EQ(centred, total);
        }
    }
}

TEST(DataDataset, AugmentationMovesImageAndLabelsTogether) {
    ScratchDir scratch;
    // The image is its labels, so any transform applied to one and not the other shows.
    const auto label_of = [](std::int64_t z, std::int64_t y, std::int64_t x) {
        return static_cast<std::int32_t>((x * 7 + y * 3 + z * 5) % 11);
    };
    write_pair(scratch / "2d/a.nii.gz", scratch / "2d/a_seg.nii.gz", {40, 40, 1},
               [&](std::int64_t z, std::int64_t y, std::int64_t x) { return static_cast<float>(label_of(z, y, x)); }, label_of);
    write_pair(scratch / "3d/a.nii.gz", scratch / "3d/a_seg.nii.gz", {20, 20, 20},
               [&](std::int64_t z, std::int64_t y, std::int64_t x) { return static_cast<float>(label_of(z, y, x)); }, label_of);
    for (const bool is_3d : {false, true}) {
        DataConfig plain;
        plain.source = SourceKind::Folder;
        plain.images_dir = scratch / (is_3d ? "3d" : "2d");
        plain.normalization = Normalization::None;
        plain.holdout_fraction = 0;
        DataConfig augmented = plain;
        augmented.augment.flip_axes = is_3d ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
        augmented.augment.rotate90 = true;
        const Shape input = is_3d ? Shape{4, 1, 6, 8, 8} : Shape{4, 1, 12, 12};
        const auto before = make_dataset(plain, input, 11);
        const auto after = make_dataset(augmented, input, 11);
        std::set<int> transforms_seen;
        for (int i = 0; i < 24; ++i) {
            const Batch original = before->training_batch(i);
            const Batch batch = after->training_batch(i);
            // Consistency: every voxel's image value is still its label.
            const Tensor as_float = batch.labels.to(DType::F32);
            ASSERT_EQ(std::memcmp(as_float.raw_data(), batch.images.raw_data(), batch.images.num_bytes()), 0) << i;
            // And the augmented patch is one of the flips/rotations of the plain one (same crop).
            for (std::int64_t n = 0; n < input[0]; ++n) {
                const Tensor source = sample_of(original.labels, n);
                const Tensor result = sample_of(batch.labels, n);
                int found = -1;
                for (int code = 0; code < (is_3d ? 32 : 16) && found < 0; ++code) {
                    Tensor candidate = source.clone();
                    for (int axis = 0; axis < (is_3d ? 3 : 2); ++axis) {
                        if (code >> axis & 1) {
                            // flip() is tested on its own; here it names the transform.
                            Tensor flipped = candidate.clone();
                            const std::int64_t extent = candidate.dim(axis);
                            for (std::int64_t k = 0; k < extent; ++k) {
                                Shape begin(static_cast<std::size_t>(candidate.rank()), 0), box = candidate.shape();
                                begin[static_cast<std::size_t>(axis)] = k;
                                box[static_cast<std::size_t>(axis)] = 1;
                                Shape mirror = begin;
                                mirror[static_cast<std::size_t>(axis)] = extent - 1 - k;
                                flipped.view_box(begin, box).copy_from(candidate.view_box(mirror, box));
                            }
                            candidate = flipped;
                        }
                    }
                    const int turns = code >> (is_3d ? 3 : 2);
                    for (int t = 0; t < turns; ++t) {  // 90° counter-clockwise: out[r][c] = in[c][W-1-r]
                        Tensor turned = candidate.clone();
                        const std::int64_t size = candidate.dim(-1);
                        const std::int64_t planes = candidate.num_elements() / (size * size);
                        for (std::int64_t p = 0; p < planes; ++p) {
                            for (std::int64_t r = 0; r < size; ++r) {
                                for (std::int64_t c = 0; c < size; ++c) {
                                    turned.data<std::int32_t>()[(p * size + r) * size + c] =
                                        candidate.data<std::int32_t>()[(p * size + c) * size + size - 1 - r];
                                }
                            }
                        }
                        candidate = turned;
                    }
                    if (same_bytes(candidate, result)) found = code;
                }
                ASSERT_GE(found, 0) << "sample " << n << " of batch " << i << " is not a flip/rotation of the plain patch";
                transforms_seen.insert(found);
            }
        }
        // Flips and rotations compose, so several codes name one transform; still, most should show up.
        EXPECT_GE(transforms_seen.size(), is_3d ? 10u : 6u);
    }

    // Intensity: image = a·label + b with a in [0.8, 1.2] and b in [-0.5, 0.5], varying per sample.
    DataConfig intensity;
    intensity.source = SourceKind::Folder;
    intensity.images_dir = scratch / "2d";
    intensity.normalization = Normalization::None;
    intensity.holdout_fraction = 0;
    intensity.augment.intensity_scale = 0.2;
    intensity.augment.intensity_shift = 0.5;
    const auto dataset = make_dataset(intensity, {8, 1, 12, 12}, 11);
    const Batch batch = dataset->training_batch(0);
    std::set<float> scales;
    for (std::int64_t n = 0; n < 8; ++n) {
        const float* image = batch.images.data<float>() + n * 144;
        const std::int32_t* labels = batch.labels.data<std::int32_t>() + n * 144;
        const std::int64_t other = std::find_if(labels, labels + 144, [&](std::int32_t l) { return l != labels[0]; }) - labels;
        ASSERT_LT(other, 144);
        const float scale = (image[other] - image[0]) / static_cast<float>(labels[other] - labels[0]);
        const float shift = image[0] - scale * static_cast<float>(labels[0]);
        EXPECT_TRUE(scale >= 0.8f - 1e-5f && scale <= 1.2f + 1e-5f) << scale;
        EXPECT_TRUE(shift >= -0.5f - 1e-4f && shift <= 0.5f + 1e-4f) << shift;
        for (int v = 0; v < 144; ++v) EXPECT_NEAR(image[v], scale * static_cast<float>(labels[v]) + shift, 1e-4);
        scales.insert(scale);
    }
    EXPECT_GE(scales.size(), 7u);
}

TEST(DataDataset, ResizeAndPadToMaxKeepLabelsWholeAndRescaleTheGrid) {
    ScratchDir scratch;
    // 80 wide, 40 high; left half label 1, right half label 2.
    write_pair(scratch / "wide.nii.gz", scratch / "wide_labels.nii.gz", {80, 40, 1},
               [](std::int64_t, std::int64_t, std::int64_t x) { return static_cast<float>(x); },
               [](std::int64_t, std::int64_t, std::int64_t x) { return x < 40 ? 1 : 2; });
    write_pair(scratch / "other.nii.gz", scratch / "other_labels.nii.gz", {80, 40, 1},
               [](std::int64_t, std::int64_t, std::int64_t x) { return static_cast<float>(x); },
               [](std::int64_t, std::int64_t, std::int64_t x) { return x < 40 ? 1 : 2; });
    DataConfig config;
    config.source = SourceKind::Folder;
    config.images_dir = scratch.path();
    config.normalization = Normalization::None;
    config.static_shape = StaticShape::Resize;
    const auto resized = make_dataset(config, {2, 1, 20, 20}, 3);
    const Batch batch = resized->training_batch(0);
    EXPECT_EQ(label_values(batch.labels), (std::set<std::int32_t>{1, 2}));
    EXPECT_EQ(batch.labels.at<std::int32_t>({0, 5, 9}), 1);
    EXPECT_EQ(batch.labels.at<std::int32_t>({0, 5, 10}), 2);
    // Linear: output x samples the source at (x + 0.5) · 4 − 0.5.
    EXPECT_FLOAT_EQ(batch.images.at<float>({0, 0, 3, 7}), 29.5f);
    const Example example = resized->eval_example(0);
    EXPECT_EQ(example.name, "wide");  // sorted: "other" trains, "wide" is held out
    EXPECT_EQ(example.image.shape(), (Shape{1, 20, 20}));
    EXPECT_DOUBLE_EQ(example.geometry.spacing[0], 0.5 * 4);
    EXPECT_DOUBLE_EQ(example.geometry.spacing[1], 0.75 * 2);
    EXPECT_DOUBLE_EQ(example.geometry.origin[0], -10.0 + 1.5 * 0.5);  // output voxel 0 sits at source x = 1.5

    config.static_shape = StaticShape::PadToMax;
    const auto padded = make_dataset(config, {1, 1, 20, 20}, 3);
    const Batch letterboxed = padded->training_batch(0);
    // The 80×40 image becomes 20×10 in the top rows; the bottom rows are padding.
    EXPECT_EQ(letterboxed.labels.at<std::int32_t>({0, 9, 0}), 1);
    EXPECT_EQ(letterboxed.labels.at<std::int32_t>({0, 9, 19}), 2);
    EXPECT_EQ(letterboxed.labels.at<std::int32_t>({0, 10, 0}), 0);
    EXPECT_EQ(letterboxed.images.at<float>({0, 0, 15, 5}), 0.0f);
    EXPECT_EQ(padded->eval_example(0).geometry.size, (std::array<std::int64_t, 3>{20, 20, 1}));
}

TEST(DataDataset, LabelMappingAndLabelsWithoutAClass) {
    DataConfig config;
    config.source = SourceKind::SyntheticCt;
    config.image_size = {24, 32, 32};
    config.num_train_images = 2;
    config.num_eval_images = 1;
    config.foreground_fraction = 1.0;
    // Without a mapping, the phantom's labels 3-5 have no class in a 3-class model.
    const std::string unmapped = error_message([&] { make_dataset(config, {2, 1, 16, 16, 16}, 3); });
    EXPECT_NE(unmapped.find("label 3 (bone)"), std::string::npos) << unmapped;
    EXPECT_NE(unmapped.find("synthetic CT phantoms"), std::string::npos) << unmapped;
    EXPECT_NE(unmapped.find("add it to data.label_mapping"), std::string::npos) << unmapped;

    config.label_mapping = {{1, 1}, {2, 1}, {4, 2}, {5, 2}};  // bone (3) becomes background
    const auto dataset = make_dataset(config, {2, 1, 16, 16, 16}, 3);
    std::set<std::int32_t> seen;
    for (int i = 0; i < 8; ++i) {
        for (std::int32_t label : label_values(dataset->training_batch(i).labels)) seen.insert(label);
    }
    EXPECT_EQ(seen, (std::set<std::int32_t>{0, 1, 2}));
    EXPECT_NE(dataset->describe().find("labels mapped 1→1, 2→1, 4→2, 5→2, others→0"), std::string::npos)
        << dataset->describe();
    const Example example = dataset->eval_example(0);
    EXPECT_EQ(label_values(example.labels), (std::set<std::int32_t>{0, 1, 2}));

    config.label_mapping = {{1, 1}, {2, 7}};
    const std::string too_big = error_message([&] { make_dataset(config, {2, 1, 16, 16, 16}, 3); });
    EXPECT_NE(too_big.find("label 2 (lung)"), std::string::npos) << too_big;
    EXPECT_NE(too_big.find("maps to class 7"), std::string::npos) << too_big;

    // A label in a file: the message names the file.
    ScratchDir scratch;
    write_pair(scratch / "case.nii.gz", scratch / "case_seg.nii.gz", {8, 8, 4}, [](auto, auto, auto) { return 0.0f; },
               [](std::int64_t z, std::int64_t, std::int64_t) { return z == 3 ? 7 : 1; });
    DataConfig folder;
    folder.source = SourceKind::Folder;
    folder.images_dir = scratch.path();
    const std::string in_file = error_message([&] { make_dataset(folder, {1, 1, 4, 4, 4}, 3); });
    EXPECT_NE(in_file.find("label 7 in '" + (scratch / "case_seg.nii.gz").string() + "'"), std::string::npos) << in_file;
    EXPECT_NE(in_file.find("add it to data.label_mapping (e.g. [7, 0]"), std::string::npos) << in_file;
    folder.label_mapping = {{1, 2}};  // 7 is unlisted: background
    const auto mapped = make_dataset(folder, {1, 1, 2, 4, 4}, 3);
    EXPECT_EQ(label_values(mapped->eval_example(0).labels), (std::set<std::int32_t>{0}));  // slice 3 held out
    EXPECT_EQ(label_values(mapped->training_batch(0).labels), (std::set<std::int32_t>{2}));
}

// data.label_mapping keys as the experiment file writes them: single labels, ranges (negative ends too)
// and thresholds, each the labels it covers; keys that are none of them read as nothing.
TEST(DataDataset, LabelMappingKeysCoverSingleLabelsRangesAndThresholds) {
    auto covered = [](const std::string& key) {
        const auto rule = parse_label_rule_key(key, 1);
        EXPECT_TRUE(rule.has_value()) << key;
        return rule ? std::pair{rule->low, rule->high} : std::pair{0, -1};
    };
    constexpr std::int32_t max = std::numeric_limits<std::int32_t>::max(), min = std::numeric_limits<std::int32_t>::min();
    EXPECT_EQ(covered("4"), (std::pair{4, 4}));
    EXPECT_EQ(covered("-2"), (std::pair{-2, -2}));
    EXPECT_EQ(covered("1-255"), (std::pair{1, 255}));
    EXPECT_EQ(covered("-5--1"), (std::pair{-5, -1}));
    EXPECT_EQ(covered(">0"), (std::pair{1, max}));
    EXPECT_EQ(covered(">=1"), (std::pair{1, max}));
    EXPECT_EQ(covered("<10"), (std::pair{min, 9}));
    EXPECT_EQ(covered("<=9"), (std::pair{min, 9}));
    for (const char* bad : {"four", "", "9-3", "1-", "-", ">", ">=x", "1.5", "4 ", "1-2-3", "99999999999", ">2147483647"}) {
        EXPECT_FALSE(parse_label_rule_key(bad, 1).has_value()) << bad;
    }
    EXPECT_EQ(parse_label_rule_key(">0", 1)->text(), ">0");
    EXPECT_EQ(LabelRule::range(1, 255, 1).text(), "1-255");
}

// A range and a threshold map a folder's labels; overlapping rules are refused naming both.
TEST(DataDataset, LabelMappingRangesAndThresholdsMapAFoldersLabels) {
    ScratchDir scratch;
    // Labels 0, 3, 7, 200 by slice: an instance-labelled segmentation.
    write_pair(scratch / "case.nii.gz", scratch / "case_seg.nii.gz", {8, 8, 4}, [](auto, auto, auto) { return 0.0f; },
               [](std::int64_t z, std::int64_t, std::int64_t) { return std::array<int, 4>{0, 3, 7, 200}[static_cast<std::size_t>(z)]; });
    DataConfig folder;
    folder.source = SourceKind::Folder;
    folder.images_dir = scratch.path();
    folder.holdout_fraction = 0;
    folder.label_mapping = {*parse_label_rule_key(">0", 1)};  // every instance: foreground
    EXPECT_EQ(label_values(make_dataset(folder, {1, 1, 4, 8, 8}, 2)->training_batch(0).labels), (std::set<std::int32_t>{0, 1}));
    folder.label_mapping = {*parse_label_rule_key("1-9", 1), *parse_label_rule_key(">=100", 2)};
    const auto two = make_dataset(folder, {1, 1, 4, 8, 8}, 3);
    EXPECT_EQ(label_values(two->training_batch(0).labels), (std::set<std::int32_t>{0, 1, 2}));
    EXPECT_NE(two->describe().find("labels mapped 1-9→1, >=100→2, others→0"), std::string::npos) << two->describe();
    folder.label_mapping = {*parse_label_rule_key("1-9", 1), *parse_label_rule_key(">=5", 2)};
    const std::string overlap = error_message([&] { make_dataset(folder, {1, 1, 4, 8, 8}, 3); });
    EXPECT_NE(overlap.find("data.label_mapping's '1-9' and '>=5' both cover label 5"), std::string::npos) << overlap;
}

TEST(DataDataset, ConfigAndShapeErrorsNameTheFieldAndTheFix) {
    const auto message_for = [](DataConfig config, Shape input = {1, 1, 16, 16}, std::int64_t num_classes = 2) {
        return error_message([&] { make_dataset(config, input, num_classes); });
    };
    EXPECT_NE(message_for(DataConfig{.holdout_fraction = 1.5}).find("data.holdout_fraction must be in [0, 1), got 1.5"),
              std::string::npos);
    EXPECT_NE(message_for(DataConfig{.foreground_fraction = -0.1}).find("data.foreground_fraction"), std::string::npos);
    EXPECT_NE(message_for(DataConfig{.label_mapping = {{1, 1}, {1, 0}}}).find("lists label 1 twice"), std::string::npos);
    EXPECT_NE(message_for(DataConfig{.normalization = Normalization::Window, .window_low = 5, .window_high = 5})
                  .find("data.window_high must be above data.window_low"),
              std::string::npos);
    EXPECT_NE(message_for(DataConfig{.num_train_images = 0}).find("data.num_train_images must be at least 1, got 0"),
              std::string::npos);
    EXPECT_NE(message_for(DataConfig{.source = SourceKind::Folder}).find("data.images is empty"), std::string::npos);
    DataConfig flips;
    flips.augment.flip_axes = {2};
    EXPECT_NE(message_for(flips).find("flip_axes holds axis 2 but the model input [1, 1, 16, 16] has 2 spatial axes"),
              std::string::npos)
        << message_for(flips);
    const std::string em_3d = message_for(DataConfig{}, {1, 1, 8, 16, 16});
    EXPECT_NE(em_3d.find("synthetic EM sections are 2D images"), std::string::npos) << em_3d;
    EXPECT_NE(em_3d.find("use a 2D model"), std::string::npos) << em_3d;
    const std::string channels = message_for(DataConfig{}, {1, 3, 16, 16});
    EXPECT_NE(channels.find("the model takes 3 input channels"), std::string::npos) << channels;
    EXPECT_NE(message_for(DataConfig{}, {1, 1, 16}).find("[N, C, H, W] or [N, C, D, H, W]"), std::string::npos);
    EXPECT_NO_THROW(validate(DataConfig{}));
}

TEST(DataDataset, NonFiniteVoxelsAreRefusedForTrainingUnlessAskedToBeZero) {
    ScratchDir scratch;
    write_pair(scratch / "case.nii.gz", scratch / "case_seg.nii.gz", {8, 8, 4},
               [](std::int64_t z, std::int64_t y, std::int64_t x) {
                   return z == 1 && y == 2 && x == 3 ? std::numeric_limits<float>::quiet_NaN() : (z == 2 && y == 0 && x == 0 ? INFINITY : 1.0f);
               },
               [](std::int64_t, std::int64_t, std::int64_t) { return 1; });
    DataConfig folder;
    folder.source = SourceKind::Folder;
    folder.images_dir = scratch.path();
    const std::string refused = error_message([&] { make_dataset(folder, {1, 1, 2, 4, 4}, 2); });
    EXPECT_NE(refused.find("holds 2 NaN or infinite voxels (the first at i, j, k = 3, 2, 1)"), std::string::npos) << refused;
    EXPECT_NE(refused.find("data.non_finite"), std::string::npos) << refused;
    folder.non_finite = NonFinitePolicy::Zero;
    const auto dataset = make_dataset(folder, {1, 1, 2, 4, 4}, 2);
    for (int i = 0; i < 4; ++i) {
        const Tensor images = dataset->training_batch(i).images;
        for (std::int64_t v = 0; v < images.num_elements(); ++v) ASSERT_TRUE(std::isfinite(images.data<float>()[v]));
    }
}
