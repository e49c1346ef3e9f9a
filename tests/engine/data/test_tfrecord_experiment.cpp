// Experiment files with data.source "tfrecord": the new keys, their errors (each naming the field), the
// shard patterns resolved against the experiment file, and a ResNet trained from a parsed file's dataset.
#include "experiment/experiment.hpp"
#include "experiment_test_support.hpp"
#include "experiment/tpu_compatibility.hpp"

#include "core/error.hpp"

#include <gtest/gtest.h>

using namespace tessera;

namespace {

namespace fs = std::filesystem;

std::string resnet_with(const std::string& data_fields, const std::string& kind = "resnet") {
    return R"({"version": 1, "model": {"kind": ")" + kind + R"(", "depth": )" + (kind == "resnet" ? "18" : "3") + R"(, "num_classes": 10},
               "input": {"channels": 3, "size": [64, 64]}, "global_batch": 4, "steps": 2,
               "data": {)" + data_fields + "}}";
}

void expect_message(const std::string& text, const std::string& expected) { data::test::expect_parse_error(text, "imagenet.json", expected); }

}  // namespace

TEST(TFRecordExperiment, ReadsTheFieldsAndResolvesPatternsAgainstTheFile) {
    experiment::Experiment e = experiment::parse_experiment(
        resnet_with(R"("source": "tfrecord", "records": "imagenet/train-*", "eval_records": "imagenet/validation-*",
                       "first_label": 0, "augment": {"flip_axes": [1]})"),
        "imagenet.json");
    experiment::place_in_directory(e, "/data/experiments");
    ASSERT_TRUE(e.data.has_value());
    EXPECT_EQ(e.data->source, data::SourceKind::TFRecord);
    EXPECT_EQ(e.data->records, fs::path("/data/experiments/imagenet/train-*"));
    EXPECT_EQ(e.data->eval_records, fs::path("/data/experiments/imagenet/validation-*"));
    EXPECT_EQ(e.data->first_label, 0);
    EXPECT_EQ(e.data->static_shape, data::StaticShape::Resize) << "a classifier's whole image by default";

    const experiment::Experiment defaults =
        experiment::parse_experiment(resnet_with(R"("source": "tfrecord", "records": "/abs/train-*")"), "imagenet.json");
    EXPECT_EQ(defaults.data->first_label, 1) << "ImageNet's shards count from 1";
    EXPECT_TRUE(defaults.data->eval_records.empty());
    // The TPU compatibility report names the source as the file writes it.
    const std::string report = experiment::format_tpu_compatibility(experiment::tpu_compatibility(defaults));
    EXPECT_EQ(report.find("has no name"), std::string::npos);
}

TEST(TFRecordExperiment, RefusesWhatDoesNotFitNamingTheField) {
    expect_message(resnet_with(R"("source": "tfrecord")"), "data.records");
    expect_message(resnet_with(R"("source": "tfrecord", "records": "")"), "a \"tfrecord\" source needs its shards");
    expect_message(resnet_with(R"("source": "fake_images", "records": "a/train-*")"),
                   "data.records: only a \"tfrecord\" source reads record shards");
    expect_message(resnet_with(R"("source": "fake_images", "first_label": 0)"), "data.first_label");
    expect_message(resnet_with(R"("source": "tfrecord", "records": "a/t-*", "eval_records": "a/v-*", "holdout_fraction": 0.1)"),
                   "data.holdout_fraction");
    expect_message(resnet_with(R"("source": "tfrecord", "records": "a/t-*", "first_label": 1.5)"), "data.first_label");
    expect_message(resnet_with(R"("source": "tfrecord", "records": "a/t-*")", "unet"), "a U-Net segments");
    expect_message(resnet_with(R"("source": "synthetic_em")"), "use \"tfrecord\" (shards of labelled images) or \"fake_images\"");
}
