// Editing experiment files in place: partition designs written back keep everything else of the file,
// round-trip through the parser, and single fields are set or removed at JSON paths.
#include "experiment/experiment_edit.hpp"
#include "support/error_of.hpp"

#include "core/error.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

using namespace tessera;
using Ordered = nlohmann::ordered_json;

namespace {

using test::error_of;

const std::filesystem::path kPresets = std::filesystem::path(TESSERA_SOURCE_DIR) / "resources" / "experiments";

std::string read_text(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::vector<std::string> keys_of(const Ordered& object) {
    std::vector<std::string> keys;
    for (const auto& item : object.items()) keys.push_back(item.key());
    return keys;
}

using Grid = std::vector<std::vector<std::int64_t>>;

}  // namespace

TEST(ExperimentEdit, EveryPresetRoundTripsUnchanged) {
    int count = 0;
    for (const auto& entry : std::filesystem::directory_iterator(kPresets)) {
        if (entry.path().extension() != ".json") continue;
        ++count;
        const std::string text = read_text(entry.path());
        const experiment::Experiment before = experiment::parse_experiment(text, entry.path().filename().string());
        const std::string written = experiment::apply_partition_edit(text, experiment::partition_edit_of(before));
        // The same JSON, field for field and in the same order …
        EXPECT_EQ(Ordered::parse(written), Ordered::parse(text)) << entry.path() << "\n" << written;
        // … and the same experiment.
        const experiment::Experiment after = experiment::parse_experiment(written, entry.path().filename().string());
        EXPECT_EQ(after.partition, before.partition) << entry.path();
        EXPECT_EQ(after.size, before.size);
        EXPECT_EQ(after.global_batch, before.global_batch);
        EXPECT_EQ(after.device, before.device);
        EXPECT_EQ(after.precision, before.precision);
        EXPECT_EQ(after.name, before.name);
        EXPECT_EQ(after.training.steps, before.training.steps);
        EXPECT_EQ(after.data.has_value(), before.data.has_value());
        EXPECT_EQ(experiment::tile_grid(after).boundaries, experiment::tile_grid(before).boundaries);
        // The writer lays the presets out as they are written (one wraps a long object by hand).
        if (entry.path().filename() != "resnet50_fake_8replicas.json") {
            EXPECT_EQ(written, text) << entry.path();
        }
    }
    EXPECT_GE(count, 7);
}

TEST(ExperimentEdit, ANewSplitKeepsNotesDataAndFieldOrder) {
    const std::string text = read_text(kPresets / "unet2d_em_4way.json");
    const experiment::Experiment e = experiment::parse_experiment(text, "em.json");
    experiment::PartitionEdit edit = experiment::partition_edit_of(e);
    edit.pieces = {2, 2};
    edit.precision = "bf16";
    edit.num_replicas = 2;
    edit.global_batch = 8;
    edit.num_cores_per_replica = 4;
    const std::string written = experiment::apply_partition_edit(text, edit);
    const Ordered before = Ordered::parse(text), after = Ordered::parse(written);
    EXPECT_EQ(keys_of(after), keys_of(before));
    EXPECT_EQ(after["notes"], before["notes"]);
    EXPECT_EQ(after["data"], before["data"]);
    EXPECT_EQ(after["schedule"], before["schedule"]);
    EXPECT_NE(written.find(R"(  "input_partition_dims": [[1, 2, 2, 1], null],)"), std::string::npos) << written;
    EXPECT_NE(written.find(R"(  "precision": "bf16",)"), std::string::npos) << written;
    EXPECT_NE(written.find(R"(  "num_replicas": 2,)"), std::string::npos) << written;
    EXPECT_NE(written.find(R"(  "global_batch": 8,)"), std::string::npos) << written;
    const experiment::Experiment read_back = experiment::parse_experiment(written, "em.json");
    EXPECT_EQ(experiment::spatial_pieces(read_back), (std::vector<std::int64_t>{2, 2}));
    EXPECT_EQ(read_back.partition.num_replicas, 2);
    EXPECT_EQ(read_back.precision, graph::Precision::BF16);
}

TEST(ExperimentEdit, UnevenGridsAreWrittenAndReadBackAndEvenOnesRemoveThem) {
    const std::string text =
        read_text(kPresets / "unet2d_em_4way.json");  // 256 × 256, a depth-4 U-Net: cuts on multiples of 8
    experiment::PartitionEdit edit = experiment::partition_edit_of(experiment::parse_experiment(text, "em.json"));
    EXPECT_FALSE(edit.uneven.has_value());
    edit.pieces = {2, 1};
    edit.num_cores_per_replica = 2;
    edit.uneven = partition::SpatialGrid{Grid{{0, 120, 256}, {0, 256}}};
    const std::string uneven = experiment::apply_partition_edit(text, edit);
    EXPECT_NE(
        uneven.find(
            "  \"input_partition_dims\": [[1, 2, 1, 1], null],\n  \"tile_boundaries\": [[0, 120, 256], [0, 256]],\n"),
        std::string::npos)
        << uneven;
    const experiment::Experiment read_back = experiment::parse_experiment(uneven, "em.json");
    EXPECT_EQ(experiment::tile_grid(read_back).boundaries, (Grid{{0, 120, 256}, {0, 256}}));
    ASSERT_TRUE(experiment::partition_edit_of(read_back).uneven.has_value());
    EXPECT_EQ(experiment::partition_edit_of(read_back).uneven->boundaries, (Grid{{0, 120, 256}, {0, 256}}));
    // The round trip keeps the boundaries.
    EXPECT_EQ(experiment::apply_partition_edit(uneven, experiment::partition_edit_of(read_back)), uneven);

    // An even grid (or none) removes them.
    edit.uneven = partition::SpatialGrid{Grid{{0, 128, 256}, {0, 256}}};
    const std::string even = experiment::apply_partition_edit(uneven, edit);
    EXPECT_EQ(even.find("tile_boundaries"), std::string::npos) << even;
    EXPECT_FALSE(experiment::parse_experiment(even, "em.json").grid.has_value());
    edit.uneven.reset();
    EXPECT_EQ(experiment::apply_partition_edit(uneven, edit), even);

    // Extents the pieces do not divide need the boundaries: 3 tiles of 256 rows.
    edit.pieces = {3, 1};
    edit.num_cores_per_replica = 3;
    edit.uneven = partition::SpatialGrid{Grid{{0, 88, 176, 256}, {0, 256}}};
    EXPECT_EQ(
        experiment::tile_grid(experiment::parse_experiment(experiment::apply_partition_edit(text, edit), "em.json"))
            .boundaries,
        (Grid{{0, 88, 176, 256}, {0, 256}}));
    // Without them the design cannot be written, and the message says why.
    edit.uneven.reset();
    const std::string message = error_of([&] { experiment::apply_partition_edit(text, edit); });
    EXPECT_NE(message.find("this partition design cannot be written into the experiment: the edited experiment: "
                           "input_partition_dims: "),
              std::string::npos)
        << message;
    // Boundaries off the model's alignment are refused with the field's path.
    edit.uneven = partition::SpatialGrid{Grid{{0, 90, 176, 256}, {0, 256}}};
    EXPECT_NE(error_of([&] {
                  experiment::apply_partition_edit(text, edit);
              }).find("tile_boundaries[0][1]: expected a multiple of 8"),
              std::string::npos);
}

TEST(ExperimentEdit, SplittingAFileWithoutPartitionFieldsAddsThemWhereTheSchemaListsThem) {
    const std::string text = read_text(kPresets / "unet3d_ct_256_1core.json");
    experiment::PartitionEdit edit = experiment::partition_edit_of(experiment::parse_experiment(text, "one.json"));
    edit.pieces = {2, 2, 4};
    edit.num_cores_per_replica = 16;
    edit.uneven = partition::SpatialGrid{Grid{{0, 64, 256}, {0, 128, 256}, {0, 64, 128, 192, 256}}};
    const Ordered after = Ordered::parse(experiment::apply_partition_edit(text, edit));
    EXPECT_EQ(keys_of(after), (std::vector<std::string>{"version", "name", "model", "input", "global_batch",
                                                        "num_cores_per_replica", "input_partition_dims",
                                                        "tile_boundaries", "device", "precision", "optimizer"}));
    EXPECT_EQ(after["input_partition_dims"], Ordered::parse("[[1, 2, 2, 4, 1], null]"));
    EXPECT_FALSE(after.contains("num_replicas"));  // still the default
}

TEST(ExperimentEdit, SplitLabelsAreRecutAndSplittingNeedsPerHostV2) {
    const std::string text = R"({"version": 1, "model": {"kind": "unet", "depth": 3, "base_width": 8},
        "input": {"size": [64, 64]}, "global_batch": 1, "num_cores_per_replica": 2,
        "input_partition_dims": [[1, 2, 1, 1], [1, 2, 1]], "per_host_input_for_training": "PER_HOST_V2"})";
    experiment::PartitionEdit edit = experiment::partition_edit_of(experiment::parse_experiment(text, "labels.json"));
    edit.pieces = {1, 2};
    const Ordered after = Ordered::parse(experiment::apply_partition_edit(text, edit));
    EXPECT_EQ(after["input_partition_dims"], Ordered::parse("[[1, 1, 2, 1], [1, 1, 2]]"));

    const std::string v1 = R"({"version": 1, "model": {"kind": "unet", "depth": 3, "base_width": 8},
        "input": {"size": [64, 64]}, "global_batch": 1, "per_host_input_for_training": "PER_HOST_V1"})";
    edit = experiment::partition_edit_of(experiment::parse_experiment(v1, "v1.json"));
    edit.pieces = {2, 1};
    edit.num_cores_per_replica = 2;
    const Ordered split = Ordered::parse(experiment::apply_partition_edit(v1, edit));
    EXPECT_EQ(split["per_host_input_for_training"], "PER_HOST_V2");
    EXPECT_EQ(split["input_partition_dims"], Ordered::parse("[[1, 2, 1, 1], null]"));
}

TEST(ExperimentEdit, BadEditsAndTextsAreRefused) {
    const std::string text = read_text(kPresets / "unet2d_em_4way.json");
    experiment::PartitionEdit edit = experiment::partition_edit_of(experiment::parse_experiment(text, "em.json"));
    edit.pieces = {4};
    EXPECT_NE(
        error_of([&] {
            experiment::apply_partition_edit(text, edit);
        }).find("a partition edit needs one piece count per spatial axis of input_size [256, 256], got pieces [4]"),
        std::string::npos);
    edit = experiment::partition_edit_of(experiment::parse_experiment(text, "em.json"));
    EXPECT_NE(error_of([&] {
                  experiment::apply_partition_edit("[1, 2]", edit);
              }).find("the experiment to edit: expected a JSON object with the experiment's fields, got an array"),
              std::string::npos);
    EXPECT_NE(error_of([&] { experiment::apply_partition_edit("{\"version\": 1,", edit); }).find("not valid JSON"),
              std::string::npos);
    edit.device = "tpu_v9";
    EXPECT_NE(error_of([&] { experiment::apply_partition_edit(text, edit); }).find("device: expected one of"),
              std::string::npos);
}

TEST(ExperimentEdit, FieldsAreSetAndRemovedAtJsonPaths) {
    const std::string text = read_text(kPresets / "unet2d_em_4way.json");
    const Ordered before = Ordered::parse(text);

    // An existing field keeps its place; the rest of the file is untouched.
    std::string edited = experiment::set_experiment_field(text, "model.base_width", 24);
    EXPECT_NE(edited.find(
                  R"("model": {"kind": "unet", "depth": 4, "base_width": 24, "num_classes": 2, "batch_norm": true},)"),
              std::string::npos)
        << edited;
    EXPECT_EQ(experiment::parse_experiment(edited, "em.json").model.base_width, 24);
    Ordered expected = before;
    expected["model"]["base_width"] = 24;
    EXPECT_EQ(Ordered::parse(edited), expected);

    // null removes; removing what is not there changes nothing.
    edited = experiment::set_experiment_field(text, "notes", nullptr);
    EXPECT_FALSE(Ordered::parse(edited).contains("notes"));
    EXPECT_EQ(experiment::set_experiment_field(text, "evaluation.overlap", nullptr), text);
    EXPECT_EQ(experiment::set_experiment_field(text, "data.augment.flip_axes[7]", nullptr), text);

    // New fields: objects created on the way, top-level ones where the schema lists them.
    edited = experiment::set_experiment_field(text, "evaluation.overlap", 0.5);
    std::vector<std::string> keys = keys_of(Ordered::parse(edited));
    const auto at = std::find(keys.begin(), keys.end(), "evaluation");
    ASSERT_NE(at, keys.end());
    EXPECT_EQ(*(at - 1), "steps_per_eval");
    EXPECT_EQ(*(at + 1), "model_dir");
    EXPECT_DOUBLE_EQ(experiment::parse_experiment(edited, "em.json").training.eval_overlap, 0.5);
    edited = experiment::set_experiment_field(text, "data.augment.flip_axes[2]", 0);  // index == size appends
    EXPECT_EQ(Ordered::parse(edited)["data"]["augment"]["flip_axes"], Ordered::parse("[0, 1, 0]"));
    edited = experiment::set_experiment_field(text, "data.augment.flip_axes[0]", nullptr);
    EXPECT_EQ(Ordered::parse(edited)["data"]["augment"]["flip_axes"], Ordered::parse("[1]"));
    edited = experiment::set_experiment_field(text, "input_partition_dims[1]", nlohmann::json::parse("[1, 4, 1]"));
    EXPECT_EQ(Ordered::parse(edited)["input_partition_dims"], Ordered::parse("[[1, 4, 1, 1], [1, 4, 1]]"));

    // Mistakes.
    auto set_error = [&](std::string_view path) {
        return error_of([&] { experiment::set_experiment_field(text, path, 1); });
    };
    EXPECT_NE(set_error("model..depth").find("the JSON path 'model..depth' is malformed: a key is empty"),
              std::string::npos);
    EXPECT_NE(set_error("").find("is malformed: it is empty"), std::string::npos);
    EXPECT_NE(set_error("model.").find("is malformed: it ends with '.'"), std::string::npos);
    EXPECT_NE(set_error("input.size[x]").find("is malformed: an index is not a whole number"), std::string::npos);
    EXPECT_NE(set_error("input.size[0").find("is malformed: a '[' is not closed"), std::string::npos);
    EXPECT_NE(set_error("name.first").find("cannot set name.first: name is the string"), std::string::npos)
        << set_error("name.first");
    EXPECT_NE(set_error("model[0]").find("cannot set model[0]: model is an object, not a list"), std::string::npos);
    EXPECT_NE(set_error("input.size[5]")
                  .find("cannot set input.size[5]: input.size has 2 elements; use an index from 0 to 2"),
              std::string::npos)
        << set_error("input.size[5]");
    EXPECT_NE(set_error("tile_boundaries[0][1]").find("tile_boundaries does not exist, so it has no element [0]"),
              std::string::npos);
}
