// Experiment files: the presets validate, and every schema mistake gets a message with its JSON path.
#include "experiment/experiment.hpp"

#include "core/error.hpp"

#include <gtest/gtest.h>

#include <filesystem>

using namespace tessera;

namespace {

const std::filesystem::path kPresets = std::filesystem::path(TESSERA_SOURCE_DIR) / "resources" / "experiments";

std::string error_of(const std::string& text) {
    try {
        experiment::parse_experiment(text, "test.json");
    } catch (const Error& error) {
        return error.what();
    }
    return "(no error)";
}

// A valid experiment with one field replaced (or added) by `field`: "\"key\": value".
std::string with(const std::string& field) {
    return R"({"version": 1, "model": {"kind": "unet", "depth": 3, "base_width": 8, "num_classes": 2},
               "input": {"channels": 1, "size": [64, 64]}, "global_batch": 2, )" +
           field + "}";
}

void expect_message(const std::string& field, const std::string& expected) {
    const std::string message = error_of(with(field));
    EXPECT_NE(message.find(expected), std::string::npos) << "for " << field << "\n" << message;
}

}  // namespace

TEST(Experiment, EveryPresetValidates) {
    int count = 0;
    for (const auto& entry : std::filesystem::directory_iterator(kPresets)) {
        if (entry.path().extension() != ".json") continue;
        EXPECT_NO_THROW(experiment::load_experiment(entry.path())) << entry.path();
        ++count;
    }
    EXPECT_GE(count, 4);
}

TEST(Experiment, FieldsAreRead) {
    const experiment::Experiment e = experiment::load_experiment(kPresets / "unet3d_ct_256_16cores.json");
    EXPECT_EQ(e.model.kind, experiment::ModelKind::UNet);
    EXPECT_EQ(e.model.base_width, 32);
    EXPECT_EQ(e.size, (std::vector<std::int64_t>{256, 256, 256}));
    EXPECT_EQ(e.partition.num_cores_per_replica, 16);
    EXPECT_EQ(experiment::spatial_pieces(e), (std::vector<std::int64_t>{2, 2, 4}));
    EXPECT_EQ(e.precision, graph::Precision::BF16);
    EXPECT_EQ(e.device, "tpu_v3");
    EXPECT_EQ(experiment::global_input_shape(e), (Shape{1, 1, 256, 256, 256}));
}

TEST(Experiment, SchemaErrorsNameThePathWhatIsAllowedAndWhatCame) {
    expect_message(R"("modle": 1, "num_cores_per_replica": 1)", "test.json: modle: unknown field; did you mean \"model\"?");
    expect_message(R"("version": 2)", "duplicate key");  // the base text already has a version
    expect_message(R"("precision": "fp16")", "precision: expected one of \"f32\", \"bf16\", \"f16\", got \"fp16\"; did you mean \"f16\"?");
    expect_message(R"("device": "tpu_v9")", "device: expected one of");
    expect_message(R"("num_cores_per_replica": 0)", "num_cores_per_replica: expected an integer from 1 to 65536, got 0");
    expect_message(R"("num_replicas": 4)", "global_batch: expected a multiple of num_replicas (4)");
    expect_message(R"("num_cores_per_replica": 4, "input_partition_dims": [[1, 3, 1, 1], null])",
                   "input_partition_dims: features: dims [1,3,1,1] multiply to 3 but num_cores_per_replica is 4; did you mean [1,4,1,1]");
    expect_message(R"("num_cores_per_replica": 4, "input_partition_dims": [[1, 4, 1, 1], null], "per_host_input_for_training": "PER_HOST_V1")",
                   "input_partition_dims: ");
    expect_message(R"("optimizer": {"kind": "sgd", "momentum": 1.5})", "optimizer.momentum: expected a number from 0 to");
    expect_message(R"("optimizer": {"kind": "rmsprop"})", "optimizer.kind: expected one of \"sgd\", \"adam\", \"adamw\"");
    EXPECT_NE(error_of(R"({"version": 1, "model": {"kind": "unet", "depth": 3}, "input": {"channels": 1, "size": [62, 64]}, "global_batch": 1})")
                  .find("input.size: "),
              std::string::npos);
    EXPECT_NE(error_of(R"({"version": 1, "model": {"kind": "unet"}, "global_batch": 1})").find("input: missing"), std::string::npos);
    EXPECT_NE(error_of("{\"version\": 1,").find("not valid JSON at byte"), std::string::npos);
    EXPECT_NE(error_of(R"({"version": 1, "model": {"kind": "resnet", "depth": 50}, "input": {"channels": 3, "size": [8, 224, 224]}, "global_batch": 1})")
                  .find("input.size: expected [H, W] (this model is 2D)"),
              std::string::npos);
}
