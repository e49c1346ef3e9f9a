// Experiment files with data.source "coco": the new data keys, their errors (each naming the field),
// paths relative to the experiment file, the TPU static-shape rule, and make_dataset from a parsed file.
#include "experiment/experiment.hpp"
#include "experiment_test_support.hpp"
#include "experiment/tpu_compatibility.hpp"

#include "core/error.hpp"
#include "data_test_support.hpp"
#include "io/color_image.hpp"

#include <gtest/gtest.h>

#include <fstream>

using namespace tessera;

namespace {

namespace fs = std::filesystem;

// A small RetinaNet on 128×128 RGB (P7 needs multiples of 128) with 2 classes and the given data section's fields.
std::string retinanet_with(const std::string& data_fields, std::int64_t num_classes = 2) {
    return R"({"version": 1, "model": {"kind": "retinanet", "depth": 18, "num_classes": )" +
           std::to_string(num_classes) +
           R"(, "fpn_channels": 16, "num_anchors": 9},
               "input": {"channels": 3, "size": [128, 128]}, "global_batch": 2, "steps": 2,
               "data": {"source": "coco", )" +
           data_fields + "}}";
}

const std::string k_files = R"("annotations": "coco/instances.json", "images": "coco/images")";

void expect_message(const std::string& text, const std::string& expected) { data::test::expect_parse_error(text, "coco.json", expected); }

}  // namespace

TEST(CocoExperiment, ReadsTheCocoFieldsAndResolvesPathsAgainstTheFile) {
    experiment::Experiment e = experiment::parse_experiment(
        retinanet_with(k_files +
                       R"(, "eval_annotations": "coco/val.json", "eval_images": "coco/val", "categories": ["dog", 1],
                       "static_shape": "resize", "scale_jitter": [0.8, 1.25], "augment": {"flip_axes": [1]},
                       "max_number_of_boxes": 50, "excess_boxes": "keep_first")"),
        "coco.json");
    experiment::place_in_directory(e, "/data/experiments");
    ASSERT_TRUE(e.data.has_value());
    const data::DataConfig& d = *e.data;
    EXPECT_EQ(d.source, data::SourceKind::Coco);
    EXPECT_TRUE(data::is_detection_source(d.source));
    EXPECT_EQ(d.annotations_file, fs::path("/data/experiments/coco/instances.json"));
    EXPECT_EQ(d.images_dir, fs::path("/data/experiments/coco/images"));
    EXPECT_EQ(d.eval_annotations_file, fs::path("/data/experiments/coco/val.json"));
    EXPECT_EQ(d.eval_images_dir, fs::path("/data/experiments/coco/val"));
    EXPECT_EQ(d.category_names, (std::vector<std::string>{"dog"}));
    EXPECT_EQ(d.category_ids, (std::vector<std::int64_t>{1}));
    EXPECT_EQ(d.static_shape, data::StaticShape::Resize);
    EXPECT_EQ(d.scale_jitter, (std::array<double, 2>{0.8, 1.25}));
    EXPECT_EQ(d.augment.flip_axes, (std::vector<int>{1}));
    EXPECT_EQ(d.max_number_of_boxes, 50);
    EXPECT_EQ(d.excess_boxes, data::ExcessBoxes::KeepFirst);

    // Defaults: pad_to_max (the detection seed's), no jitter, the last quarter held out.
    const experiment::Experiment plain = experiment::parse_experiment(retinanet_with(k_files), "coco.json");
    EXPECT_EQ(plain.data->static_shape, data::StaticShape::PadToMax);
    EXPECT_EQ(plain.data->scale_jitter, (std::array<double, 2>{1, 1}));
    EXPECT_DOUBLE_EQ(plain.data->holdout_fraction, 0.25);
    EXPECT_TRUE(plain.data->eval_annotations_file.empty());
}

TEST(CocoExperiment, EveryNewKeyNamesItselfWhenWrong) {
    expect_message(retinanet_with(R"("images": "coco/images")"),
                   "coco.json: data.annotations: missing; a \"coco\" source needs its instances.json");
    expect_message(retinanet_with(R"("annotations": "coco/instances.json")"),
                   "data.images: missing; a \"coco\" source needs the folder");
    expect_message(retinanet_with(k_files + R"(, "static_shape": "crop")"),
                   "data.static_shape: \"crop\" cuts patches, which would cut boxes");
    expect_message(retinanet_with(k_files + R"(, "scale_jitter": [1.2, 0.8])"),
                   "data.scale_jitter: expected [min, max] scales");
    expect_message(retinanet_with(k_files + R"(, "scale_jitter": [0, 1])"),
                   "data.scale_jitter: expected [min, max] scales");
    expect_message(retinanet_with(k_files + R"(, "scale_jitter": 1.2)"),
                   "data.scale_jitter: expected [min, max] scales");
    expect_message(retinanet_with(k_files + R"(, "categories": ["dog"])"),
                   "data.categories: keeps 1 categories but model.num_classes is 2");
    expect_message(retinanet_with(k_files + R"(, "categories": ["dog", "dog"])"),
                   "data.categories[1]: lists \"dog\" twice");
    expect_message(retinanet_with(k_files + R"(, "categories": [1, 2.5])"),
                   "data.categories[1]: expected a category name (a string) or a COCO category id");
    expect_message(retinanet_with(k_files + R"(, "categories": [])"), "data.categories: expected a non-empty list");
    expect_message(retinanet_with(k_files + R"(, "eval_images": "coco/val")"),
                   "data.eval_images: given without data.eval_annotations");
    expect_message(retinanet_with(k_files + R"(, "eval_annotations": "coco/val.json", "holdout_fraction": 0.2)"),
                   "data.holdout_fraction: the held-out images are data.eval_annotations'");
    expect_message(retinanet_with(k_files + R"(, "eval_annotations": "")"),
                   "data.eval_annotations: expected the held-out images'");
    expect_message(retinanet_with(k_files + R"(, "augment": {"flip_axes": [0]})"),
                   "data.augment.flip_axes: a \"coco\" source flips left-right only");
    expect_message(retinanet_with(k_files + R"(, "labels": "coco/labels")"),
                   "data.labels: does not apply to a \"coco\" source");
    expect_message(retinanet_with(k_files + R"(, "num_train_images": 4)"),
                   "data.num_train_images: does not apply to a \"coco\" source");
    expect_message(retinanet_with(k_files + R"(, "annotation": "x.json")"),
                   "data.annotation: unknown field; did you mean \"annotations\"?");
    // Keys of a COCO source are refused elsewhere, naming the field.
    const std::string shapes =
        R"({"version": 1, "model": {"kind": "retinanet", "depth": 18, "num_classes": 4, "fpn_channels": 16,
        "num_anchors": 9}, "input": {"channels": 3, "size": [128, 128]}, "global_batch": 2, "steps": 2,
        "data": {"source": "synthetic_shapes", )";
    for (const std::string_view field :
         {"\"annotations\": \"a.json\"", "\"eval_annotations\": \"a.json\"", "\"eval_images\": \"v\"",
          "\"categories\": [1]", "\"scale_jitter\": [0.8, 1.2]"}) {
        const std::string key(field.substr(1, field.find('"', 1) - 1));
        expect_message(
            shapes + std::string(field) + "}}",
            "data." + key + ": only a \"coco\" source reads annotation files; this source is \"synthetic_shapes\"");
    }
    expect_message(shapes + R"("images": "imgs"}})",
                   "data.images: only a \"folder\" source reads folders (and a \"coco\" source its images' folder); "
                   "this source is "
                   "\"synthetic_shapes\"");
    // A RetinaNet on a segmentation source: the message names both detection sources.
    expect_message(
        R"({"version": 1, "model": {"kind": "retinanet", "depth": 18, "num_classes": 4, "fpn_channels": 16, "num_anchors": 9},
                       "input": {"channels": 3, "size": [128, 128]}, "global_batch": 2, "steps": 2, "data": {"source": "synthetic_em"}})",
        "data.source: a RetinaNet detects boxes: use \"synthetic_shapes\" or \"coco\", got \"synthetic_em\"");
    // A U-Net cannot train on boxes.
    expect_message(
        R"({"version": 1, "model": {"kind": "unet", "depth": 3, "base_width": 4}, "input": {"size": [128, 128]},
                       "global_batch": 1, "steps": 1, "data": {"source": "coco", "annotations": "a.json", "images": "i"}})",
        "data.source: a U-Net segments");
}

// An experiment file beside a one-image COCO dataset: loaded from disk, its dataset gives batches, and the
// TPU rule explains the static shape.
TEST(CocoExperiment, ALoadedFileMakesADatasetThatGivesBatches) {
    data::test::ScratchDir scratch;
    fs::create_directories(scratch.path() / "coco" / "images");
    Tensor image = Tensor::zeros({3, 30, 50}, DType::F32);
    for (std::int64_t y = 5; y < 20; ++y) {
        for (std::int64_t x = 10; x < 40; ++x) image.at<float>({0, y, x}) = 1.0f;
    }
    write_color_png(image, scratch.path() / "coco" / "images" / "one.png");
    write_color_png(image, scratch.path() / "coco" / "images" / "two.png");
    std::ofstream(scratch.path() / "coco" / "instances.json") << R"({
        "images": [{"id": 1, "file_name": "one.png", "width": 50, "height": 30},
                   {"id": 2, "file_name": "two.png", "width": 50, "height": 30}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [10, 5, 30, 15]},
                        {"id": 2, "image_id": 2, "category_id": 3, "bbox": [10, 5, 30, 15]}],
        "categories": [{"id": 7, "name": "box"}, {"id": 3, "name": "crate"}]})";
    std::ofstream(scratch.path() / "coco.json")
        << retinanet_with(k_files + R"(, "holdout_fraction": 0.5, "scale_jitter": [0.9, 1.1],
                                                                            "augment": {"flip_axes": [1]}, "normalization": "none")");
    const experiment::Experiment e = experiment::load_experiment(scratch.path() / "coco.json");
    ASSERT_TRUE(e.data.has_value());
    const auto dataset = data::make_dataset(*e.data, experiment::global_input_shape(e), e.model.num_classes);
    EXPECT_EQ(dataset->class_names(), (std::vector<std::string>{"crate", "box"}));  // by COCO id: 3, then 7
    const data::Batch batch = dataset->training_batch(0);
    EXPECT_EQ(batch.images.shape(), (Shape{2, 3, 128, 128}));
    ASSERT_EQ(batch.ground_truth.size(), 2u);
    for (const detection::PaddedGroundTruth& truth : batch.ground_truth) {
        EXPECT_EQ(truth.num_valid, 1);
        EXPECT_EQ(truth.classes.at<std::int32_t>({0}), 1);  // one.png (box) trains; two.png is held out
    }
    ASSERT_EQ(dataset->num_eval_examples(), 1);
    EXPECT_EQ(dataset->eval_example(0).name, "two.png");

    std::string rule_detail;
    for (const experiment::CompatibilityRule& rule : experiment::tpu_compatibility(e)) {
        if (rule.id == "static_image_shape") rule_detail = rule.detail;
    }
    EXPECT_NE(rule_detail.find("coco: every image keeps its aspect ratio, is scaled to fit 128×128"), std::string::npos)
        << rule_detail;
    EXPECT_NE(rule_detail.find("scaled by 0.9–1.1 and cropped or zero-padded back to 128×128 (data.scale_jitter)"),
              std::string::npos)
        << rule_detail;

    // model.num_classes against the file's categories, with both numbers.
    std::ofstream(scratch.path() / "three.json") << retinanet_with(k_files, 3);
    const experiment::Experiment three = experiment::load_experiment(scratch.path() / "three.json");
    try {
        data::make_dataset(*three.data, experiment::global_input_shape(three), three.model.num_classes);
        ADD_FAILURE() << "expected an error";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what())
                      .find("model.num_classes is 3 but the COCO source keeps 2 categories of instances.json"),
                  std::string::npos)
            << error.what();
    }
}
