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

TEST(Experiment, UNetVariantsAreReadAndBuilt) {
    const experiment::Experiment e = experiment::parse_experiment(
        R"({"version": 1, "model": {"kind": "unet", "depth": 4, "base_width": 16, "num_classes": 3, "max_width": 32,
            "downsampling": "strided_conv", "head_kernel": 3}, "input": {"channels": 1, "size": [32, 32, 32]}, "global_batch": 1})",
        "test.json");
    EXPECT_EQ(e.model.max_width, 32);
    EXPECT_TRUE(e.model.strided_downsampling);
    EXPECT_EQ(e.model.head_kernel, 3);
    const graph::Graph model = experiment::build_model(e, experiment::replica_input_shape(e));
    for (const graph::Node& node : model.nodes()) {
        EXPECT_NE(node.kind, graph::OpKind::Pool) << node.name;
        if (node.kind == graph::OpKind::Conv) {
            EXPECT_LE(node.out_channels, 32) << node.name;
        }
    }
    EXPECT_EQ(model.node(model.output_node()).conv.kernel, (ops::Extents{3, 3, 3}));
    // The defaults are the seeds' U-Net: pools, a 1×1 head, no cap.
    const experiment::Experiment plain = experiment::parse_experiment(with(R"("num_replicas": 1)"), "test.json");
    EXPECT_FALSE(plain.model.strided_downsampling);
    EXPECT_EQ(plain.model.head_kernel, 1);
    EXPECT_EQ(plain.model.max_width, 0);
    const auto unet_with = [](const std::string& field) {
        return error_of(R"({"version": 1, "model": {"kind": "unet", "depth": 3, )" + field +
                        R"(}, "input": {"channels": 1, "size": [64, 64]}, "global_batch": 1})");
    };
    EXPECT_NE(unet_with(R"("downsampling": "strided_cnov")").find("model.downsampling: expected one of \"max_pool\", \"strided_conv\", "
                                                                  "got \"strided_cnov\"; did you mean \"strided_conv\"?"),
              std::string::npos)
        << unet_with(R"("downsampling": "strided_cnov")");
    EXPECT_NE(unet_with(R"("head_kernel": 2)").find("model.head_kernel: expected 1 or 3"), std::string::npos);
    EXPECT_NE(unet_with(R"("head_kernel": 5)").find("model.head_kernel: expected an integer from 1 to 3, got 5"), std::string::npos)
        << unet_with(R"("head_kernel": 5)");
    EXPECT_NE(unet_with(R"("max_widht": 64)").find("did you mean \"max_width\""), std::string::npos);
}

TEST(Experiment, ResNeXtIsReadAndBuilt) {
    const experiment::Experiment e = experiment::parse_experiment(
        R"({"version": 1, "model": {"kind": "resnet", "depth": 50, "num_classes": 10, "groups": 32, "width_per_group": 4},
            "input": {"channels": 3, "size": [64, 64]}, "global_batch": 1})",
        "test.json");
    EXPECT_EQ(e.model.groups, 32);
    EXPECT_EQ(e.model.width_per_group, 4);
    const graph::Graph model = experiment::build_model(e, experiment::replica_input_shape(e));
    int grouped = 0;
    for (const graph::Node& node : model.nodes()) grouped += node.kind == graph::OpKind::Conv && node.conv.groups == 32;
    EXPECT_EQ(grouped, 16);  // one 3×3 per bottleneck: 3 + 4 + 6 + 3
    // A RetinaNet's backbone takes them too.
    const experiment::Experiment detector = experiment::parse_experiment(
        R"({"version": 1, "model": {"kind": "retinanet", "depth": 50, "num_classes": 3, "groups": 32, "width_per_group": 4},
            "input": {"channels": 3, "size": [128, 128]}, "global_batch": 1})",
        "test.json");
    EXPECT_EQ(detector.model.groups, 32);
    EXPECT_FALSE(detector.model.round_up_coarse_levels);
    // MLPerf's RetinaNet: 800×800 with P6, P7 rounded up.
    const experiment::Experiment mlperf = experiment::parse_experiment(
        R"({"version": 1, "model": {"kind": "retinanet", "depth": 18, "num_classes": 3, "coarse_levels": "round_up"},
            "input": {"channels": 3, "size": [800, 800]}, "global_batch": 1})",
        "test.json");
    EXPECT_TRUE(mlperf.model.round_up_coarse_levels);
    const graph::Graph rounded = experiment::build_model(mlperf, experiment::replica_input_shape(mlperf));
    std::int64_t p7_rows = 0;
    for (const graph::Node& node : rounded.nodes()) {
        if (node.name == "box.l7.out") p7_rows = node.output_shape[2];
    }
    EXPECT_EQ(p7_rows, 7);  // 800 / 128 rounded up
    const std::string wrong = error_of(
        R"({"version": 1, "model": {"kind": "resnet", "depth": 50, "groups": 0}, "input": {"channels": 3, "size": [64, 64]}, "global_batch": 1})");
    EXPECT_NE(wrong.find("model.groups: expected an integer from 1 to 1024, got 0"), std::string::npos) << wrong;
}

TEST(Experiment, TrainingFieldsAreRead) {
    const experiment::Experiment e = experiment::load_experiment(kPresets / "unet2d_em_4way.json");
    ASSERT_TRUE(e.is_trainable());
    EXPECT_EQ(e.data->source, data::SourceKind::SyntheticEm);
    EXPECT_EQ(e.data->image_size, (std::vector<std::int64_t>{512, 512}));
    EXPECT_EQ(e.data->augment.flip_axes, (std::vector<int>{0, 1}));
    EXPECT_TRUE(e.data->augment.rotate90);
    EXPECT_EQ(e.data->seed, 1u);  // the experiment's seed when data.seed is absent
    EXPECT_EQ(e.training.steps, 300);
    EXPECT_EQ(e.training.steps_per_eval, 100);
    EXPECT_EQ(e.training.model_dir, "runs/unet2d_em_4way");
    EXPECT_EQ(e.training.schedule.kind, train::ScheduleKind::CosineDecay);
    EXPECT_EQ(e.training.schedule.total_steps, 300);  // the run's steps unless given
    EXPECT_EQ(e.training.schedule.warmup_steps, 20);
    const train::TrainerConfig config = experiment::trainer_config(e);
    EXPECT_EQ(config.optimizer.kind, train::OptimizerKind::Adam);
    EXPECT_EQ(config.loss_scale.kind, train::LossScaleKind::None);

    const experiment::Experiment mri = experiment::load_experiment(kPresets / "unet3d_mri_skullstrip.json");
    EXPECT_EQ(mri.data->source, data::SourceKind::ExampleMri);
    EXPECT_EQ(mri.training.loss, train::LossKind::CrossEntropyAndDice);
    EXPECT_TRUE(mri.training.dice_excludes_background);
    EXPECT_DOUBLE_EQ(mri.training.eval_overlap, 0.5);

    const experiment::Experiment ct = experiment::load_experiment(kPresets / "unet3d_ct_8way.json");
    EXPECT_EQ(ct.data->normalization, data::Normalization::Window);
    EXPECT_DOUBLE_EQ(ct.data->window_low, -1000);
    EXPECT_DOUBLE_EQ(ct.data->window_high, 1000);

    EXPECT_FALSE(experiment::load_experiment(kPresets / "unet3d_ct_256_16cores.json").is_trainable());
    const experiment::Experiment retinanet = experiment::load_experiment(kPresets / "retinanet_2560_8cores.json");
    EXPECT_TRUE(retinanet.is_trainable());  // on synthetic shapes at batch 1: a few steps on a 24 GiB host
    EXPECT_TRUE(retinanet.model.fpn_batch_norm && retinanet.model.head_batch_norm);  // the TPU layout by default
    // torchvision's layout: no batch norm after the pyramid or in the heads.
    const experiment::Experiment torchvision = experiment::parse_experiment(
        R"({"version": 1, "model": {"kind": "retinanet", "depth": 50, "num_classes": 90, "fpn_batch_norm": false, "head_batch_norm": false},
            "input": {"channels": 3, "size": [256, 256]}, "global_batch": 1})",
        "torchvision.json");
    EXPECT_EQ(experiment::build_model(torchvision, experiment::replica_input_shape(torchvision)).parameter_count(), 34047374);
    // f16 gets the U-Net seed's dynamic loss scaling unless told otherwise.
    const experiment::Experiment half = experiment::parse_experiment(with(R"("precision": "f16")"), "half.json");
    EXPECT_EQ(half.training.loss_scale.kind, train::LossScaleKind::Dynamic);
}

TEST(Experiment, TrainingSchemaErrorsNameThePathWhatIsAllowedAndWhatCame) {
    const std::string data = R"("data": {"source": "synthetic_em"}, "steps": 10, )";
    expect_message(R"("data": {"source": "synthetic_em"})", "steps: missing; expected an integer from 1 to");
    expect_message(R"("steps": 10)", "steps: this experiment has no \"data\" section, so it cannot train");
    expect_message(data + R"("stesp": 3)", "stesp: unknown field; did you mean \"steps\"?");
    expect_message(R"("data": {"source": "synthetic_emm"}, "steps": 1)",
                   "data.source: expected one of \"synthetic_em\", \"synthetic_ct\", \"fake_images\", \"folder\", \"example_mri\", \"synthetic_shapes\", \"coco\", \"tfrecord\", \"volume\", got \"synthetic_emm\"; did you mean \"synthetic_em\"?");
    expect_message(R"("data": {"source": "synthetic_shapes"}, "steps": 1)", "data.source: a U-Net segments");
    expect_message(R"("data": {"source": "synthetic_em", "max_number_of_boxes": 5}, "steps": 1)",
                   "data.max_number_of_boxes: only a detection source has boxes; this source is \"synthetic_em\"");
    expect_message(R"("detection": {})", "detection: only a RetinaNet has detection settings; this model is a U-Net");
    expect_message(R"("data": {"source": "fake_images"}, "steps": 1)", "data.source: a U-Net segments");
    expect_message(R"("data": {"source": "folder", "labels": "l"}, "steps": 1)", "data.images: missing; a folder source needs");
    expect_message(R"("data": {"source": "synthetic_em", "images": "x"}, "steps": 1)", "data.images: only a \"folder\" source reads folders");
    expect_message(R"("data": {"source": "synthetic_em", "label_mapping": {"four": 1}}, "steps": 1)",
                   "data.label_mapping.four: expected a file label as the key — a whole number (\"4\"), a range (\"1-255\", low to "
                   "high) or a threshold (\">0\", \">=1\", \"<10\", \"<=9\") — got \"four\"");
    expect_message(R"("data": {"source": "synthetic_em", "label_mapping": {"1..255": 1}}, "steps": 1)",
                   "got \"1..255\"; did you mean \"1-255\"?");
    expect_message(R"("data": {"source": "synthetic_em", "label_mapping": {"≥ 1": 1}}, "steps": 1)", "did you mean \">=1\"?");
    expect_message(R"("data": {"source": "synthetic_em", "label_mapping": {"9-3": 1}}, "steps": 1)", "got \"9-3\"");
    expect_message(R"("data": {"source": "synthetic_em", "label_mapping": {"1-255": 1, "4": 0}}, "steps": 1)",
                   "data.label_mapping's '1-255' and '4' both cover label 4: give each file label one class");
    expect_message(R"("data": {"source": "synthetic_em", "label_mapping": {"4": 2}}, "steps": 1)",
                   "data.label_mapping.4: expected a class from 0 to 1 (model.num_classes is 2), got 2");
    expect_message(R"("data": {"source": "synthetic_em", "normalization": {"window": [5, 1]}}, "steps": 1)",
                   "data.normalization.window: expected [low, high] with low < high");
    expect_message(R"("data": {"source": "synthetic_em", "normalization": "minmax"}, "steps": 1)",
                   "data.normalization: expected one of \"zscore\", \"none\", got \"minmax\"");
    expect_message(R"("data": {"source": "synthetic_em", "static_shape": "pad"}, "steps": 1)",
                   "data.static_shape: expected one of \"crop\", \"resize\", \"pad_to_max\", got \"pad\"");
    expect_message(R"("data": {"source": "synthetic_em", "foreground_fraction": 1.5}, "steps": 1)",
                   "data.foreground_fraction: expected a number from 0 to 1, got 1.5");
    expect_message(R"("data": {"source": "synthetic_em", "augment": {"flip_axes": [0, 2]}}, "steps": 1)",
                   "data.augment.flip_axes: expected spatial axes from 0 to 1");
    expect_message(R"("data": {"source": "synthetic_em", "augment": {"flip": [0]}}, "steps": 1)",
                   "data.augment.flip: unknown field; did you mean \"flip_axes\"?");
    expect_message(R"("data": {"source": "synthetic_em", "image_size": [512, -1]}, "steps": 1)",
                   "data.image_size[1]: expected an integer of at least 1, got -1");
    expect_message(data + R"("steps_per_eval": 20)", "steps_per_eval: expected at most steps (10), got 20");
    expect_message(data + R"("keep_checkpoints": 0)", "keep_checkpoints: expected an integer from 1 to 1000, got 0");
    expect_message(data + R"("model_dir": "")", "model_dir: expected a folder for checkpoints and metrics, got an empty string");
    expect_message(data + R"("model_dir": 3)", "model_dir: expected a string, got");
    expect_message(data + R"("schedule": {"kind": "cosine", "warmup_steps": 20})", "schedule: ");
    expect_message(data + R"("schedule": {"kind": "exponential"})", "schedule.kind: expected one of \"constant\", \"cosine\", \"manual\"");
    expect_message(data + R"("schedule": {"kind": "constant", "boundaries": []})", "schedule.boundaries: only a \"manual\" schedule has boundaries");
    expect_message(data + R"("schedule": {"kind": "manual", "boundaries": [{"step": 5, "learning_rat": 0.1}]})",
                   "schedule.boundaries[0].learning_rat: unknown field; did you mean \"learning_rate\"?");
    expect_message(data + R"("loss": "focal")", "loss: expected one of \"cross_entropy\", \"dice\", \"cross_entropy_dice\", got \"focal\"");
    expect_message(data + R"("loss_scale": 0.5)", "loss_scale: expected a static scale from 1 to 2^24, \"dynamic\" or \"none\", got 0.5");
    expect_message(data + R"("loss_scale": "auto")", "loss_scale: expected one of \"dynamic\", \"none\", got \"auto\"");
    expect_message(data + R"("evaluation": {"overlap": 1.0})", "evaluation.overlap: expected a number from 0 to 0.95, got 1");
    expect_message(data + R"("evaluation": {"blend": "mean"})", "evaluation.blend: expected one of \"gaussian\", \"constant\", got \"mean\"");
    expect_message(data + R"("seed": -1)", "seed: expected an integer from 0 to");
}

// tile_boundaries: uneven cuts of the input (the base experiment: a depth-3 U-Net on 64 × 64, whose two
// pools need every tile boundary on a multiple of 4).
TEST(Experiment, TileBoundariesAreReadAndGiveTheGrid) {
    const std::string split = R"("num_cores_per_replica": 2, "input_partition_dims": [[1, 2, 1, 1], null], )";
    const experiment::Experiment e = experiment::parse_experiment(with(split + R"("tile_boundaries": [[0, 24, 64], [0, 64]])"), "uneven.json");
    ASSERT_TRUE(e.grid.has_value());
    EXPECT_EQ(experiment::tile_grid(e).boundaries, (std::vector<std::vector<std::int64_t>>{{0, 24, 64}, {0, 64}}));
    EXPECT_FALSE(experiment::is_even_split(*e.grid, e.size));
    EXPECT_EQ(experiment::tile_boundaries_text(*e.grid), "[[0, 24, 64], [0, 64]]");

    // Without tile_boundaries the grid is input_partition_dims' even split.
    const experiment::Experiment even = experiment::parse_experiment(with(split + R"("device": "tpu_v3")"), "even.json");
    EXPECT_FALSE(even.grid.has_value());
    EXPECT_EQ(experiment::tile_grid(even).boundaries, (std::vector<std::vector<std::int64_t>>{{0, 32, 64}, {0, 64}}));
    EXPECT_TRUE(experiment::is_even_split(experiment::tile_grid(even), even.size));

    // An extent the pieces do not divide is allowed with explicit boundaries (and only then).
    const std::string three = R"("num_cores_per_replica": 3, "input_partition_dims": [[1, 3, 1, 1], null])";
    expect_message(three, "an uneven split is allowed only with explicit tile boundaries");
    const experiment::Experiment thirds =
        experiment::parse_experiment(with(three + R"(, "tile_boundaries": [[0, 20, 40, 64], [0, 64]])"), "thirds.json");
    EXPECT_EQ(experiment::tile_grid(thirds).pieces_per_axis(), (std::vector<std::int64_t>{3, 1}));

    // The 3D preset's layout with uneven cuts along D and W.
    const experiment::Experiment volume = experiment::parse_experiment(
        R"({"version": 1, "model": {"kind": "unet", "depth": 4, "base_width": 8}, "input": {"size": [64, 64, 64]},
            "global_batch": 1, "num_cores_per_replica": 16, "input_partition_dims": [[1, 2, 2, 4, 1], null],
            "tile_boundaries": [[0, 40, 64], [0, 32, 64], [0, 8, 24, 48, 64]]})",
        "volume.json");
    EXPECT_EQ(experiment::tile_grid(volume).num_cores(), 16);
}

TEST(Experiment, TileBoundaryErrorsNameThePathWhatIsAllowedAndWhatCame) {
    const std::string split = R"("num_cores_per_replica": 2, "input_partition_dims": [[1, 2, 1, 1], null], )";
    expect_message(split + R"("tile_boundarys": [])", "tile_boundarys: unknown field; did you mean \"tile_boundaries\"?");
    expect_message(split + R"("tile_boundaries": 3)",
                   "tile_boundaries: expected one list of cuts per spatial axis of input.size [64, 64] (2 lists, outermost first, "
                   "each from 0 to the extent), e.g. [[0, 32, 64], [0, 64]], got the number 3");
    expect_message(split + R"("tile_boundaries": [[0, 32, 64]])", "tile_boundaries: expected one list of cuts per spatial axis");
    expect_message(split + R"("tile_boundaries": [[0, 32, 64]])", "got 1 list");
    expect_message(split + R"("tile_boundaries": [[0, 32, 64], 5])",
                   "tile_boundaries[1]: expected the cuts along W from 0 to its extent 64, e.g. [0, 64] for one tile, got 5");
    expect_message(split + R"("tile_boundaries": [[0, "a", 64], [0, 64]])",
                   "tile_boundaries[0][1]: expected an integer row index, got the string \"a\"");
    expect_message(split + R"("tile_boundaries": [[4, 32, 64], [0, 64]])",
                   "tile_boundaries[0][0]: expected 0 (the cuts start at the beginning of the axis), got 4");
    expect_message(split + R"("tile_boundaries": [[0, 32, 60], [0, 64]])",
                   "tile_boundaries[0][2]: expected 64, the extent of H (input.size[0]), as the last cut, got 60");
    expect_message(split + R"("tile_boundaries": [[0, 32, 32, 64], [0, 64]])",
                   "tile_boundaries[0][2]: expected more than the previous cut 32 (cuts increase, every tile at least one row), got 32");
    expect_message(split + R"("tile_boundaries": [[0, 16, 32, 64], [0, 64]])",
                   "tile_boundaries[0]: expected 2 tiles (3 cuts) along H, as input_partition_dims splits it into 2 pieces, got 3 "
                   "in [0, 16, 32, 64]; change input_partition_dims and num_cores_per_replica to match, or the cuts");
    expect_message(split + R"("tile_boundaries": [[0, 32, 64], [0, 32, 64]])",
                   "tile_boundaries[1]: expected 1 tile (2 cuts) along W, as input_partition_dims does not split it, got 2 in [0, 32, 64]");
    expect_message(R"("tile_boundaries": [[0, 32, 64], [0, 64]])",
                   "tile_boundaries[0]: expected 1 tile (2 cuts) along H, as input_partition_dims does not split it");
    expect_message(split + R"("tile_boundaries": [[0, 30, 64], [0, 64]])",
                   "tile_boundaries[0][1]: expected a multiple of 4 (the model's strided layers need every tile boundary along H on a "
                   "multiple of 4), got 30; the nearest valid cut is 28");
    expect_message(split + R"("tile_boundaries": [[0, 31, 64], [0, 64]])", "got 31; the nearest valid cut is 32");
    // Other partition mistakes are still reported when boundaries are given.
    expect_message(R"("num_cores_per_replica": 4, "input_partition_dims": [[1, 3, 1, 1], null], "tile_boundaries": [[0, 20, 40, 64], [0, 64]])",
                   "input_partition_dims: features: dims [1,3,1,1] multiply to 3 but num_cores_per_replica is 4");
    // An axis too short for any aligned cut.
    EXPECT_NE(error_of(R"({"version": 1, "model": {"kind": "unet", "depth": 3, "base_width": 4}, "input": {"size": [4, 64]},
                          "global_batch": 1, "num_cores_per_replica": 2, "input_partition_dims": [[1, 2, 1, 1], null],
                          "tile_boundaries": [[0, 2, 4], [0, 64]]})")
                  .find("tile_boundaries[0][1]: expected a multiple of 4 (the model's strided layers need every tile boundary along H "
                        "on a multiple of 4), got 2; no cut inside H is a multiple of 4, so this axis cannot be split: give [0, 4]"),
              std::string::npos)
        << error_of(R"({"version": 1, "model": {"kind": "unet", "depth": 3, "base_width": 4}, "input": {"size": [4, 64]},
                       "global_batch": 1, "num_cores_per_replica": 2, "input_partition_dims": [[1, 2, 1, 1], null],
                       "tile_boundaries": [[0, 2, 4], [0, 64]]})");
}

// A RetinaNet on synthetic shapes: the "detection" section and the detection source's fields.
namespace {
std::string detector_with(const std::string& fields) {
    return R"({"version": 1, "model": {"kind": "retinanet", "depth": 18, "num_classes": 4, "fpn_channels": 16, "num_anchors": 9},
               "input": {"channels": 3, "size": [256, 256]}, "global_batch": 2, "steps": 5, )" +
           fields + "}";
}
void expect_detector_message(const std::string& fields, const std::string& expected) {
    const std::string message = error_of(detector_with(fields));
    EXPECT_NE(message.find(expected), std::string::npos) << "for " << fields << "\n" << message;
}
}  // namespace

TEST(Experiment, DetectionFieldsAreRead) {
    const experiment::Experiment e = experiment::parse_experiment(detector_with(R"(
        "data": {"source": "synthetic_shapes", "max_number_of_boxes": 20, "excess_boxes": "keep_largest", "objects": [2, 6],
                 "object_size": [16, 200], "augment": {"flip_axes": [1]}},
        "detection": {"anchors": {"num_scales": 1, "aspect_ratios": [1.0, 2.0, 0.5, 3.0, 0.33, 4.0, 0.25, 5.0, 0.2], "anchor_scale": 3},
                      "matcher": {"matched_threshold": 0.6, "unmatched_threshold": 0.4, "force_match_for_each_row": false},
                      "loss": {"focal_alpha": 0.3, "focal_gamma": 1.5, "huber_delta": 0.2, "box_loss_weight": 25},
                      "box_coder_weights": [10, 10, 5, 5],
                      "inference": {"score_threshold": 0.1, "top_k_per_level": 500, "nms_iou_threshold": 0.6, "max_detections": 50}})"),
                                                                  "shapes.json");
    ASSERT_TRUE(e.data.has_value());
    EXPECT_EQ(e.data->source, data::SourceKind::SyntheticShapes);
    EXPECT_EQ(e.data->max_number_of_boxes, 20);
    EXPECT_EQ(e.data->excess_boxes, data::ExcessBoxes::KeepLargest);
    EXPECT_EQ(e.data->object_count, (std::array<std::int64_t, 2>{2, 6}));
    EXPECT_EQ(e.data->object_size, (std::array<double, 2>{16, 200}));
    const detection::DetectorConfig& d = e.detection.detector;
    EXPECT_EQ(d.labeler.num_classes, 4);
    EXPECT_EQ(d.anchors.num_scales, 1);
    EXPECT_EQ(d.anchors.aspect_ratios.size(), 9u);
    EXPECT_DOUBLE_EQ(d.anchors.aspect_ratios[4], 0.33);
    EXPECT_DOUBLE_EQ(d.anchors.anchor_scale, 3.0);
    EXPECT_FLOAT_EQ(d.labeler.matcher.matched_threshold, 0.6f);
    EXPECT_FLOAT_EQ(d.labeler.matcher.unmatched_threshold, 0.4f);
    EXPECT_FALSE(d.labeler.matcher.force_match_for_each_row);
    EXPECT_TRUE(d.labeler.matcher.negatives_lower_than_unmatched);
    EXPECT_DOUBLE_EQ(d.loss.focal.alpha, 0.3);
    EXPECT_DOUBLE_EQ(d.loss.focal.gamma, 1.5);
    EXPECT_DOUBLE_EQ(d.loss.box.delta, 0.2);
    EXPECT_DOUBLE_EQ(d.loss.box_loss_weight, 25.0);
    EXPECT_FLOAT_EQ(e.detection.postprocess.score_threshold, 0.1f);
    EXPECT_EQ(e.detection.postprocess.top_k_per_level, 500u);
    EXPECT_EQ(e.detection.postprocess.max_detections, 50u);
    EXPECT_EQ(e.detection.matcher, experiment::MatcherKind::Argmax);
    // The trainer gets the detector; post-processing decodes with the targets' weights.
    const train::TrainerConfig config = experiment::trainer_config(e);
    ASSERT_TRUE(config.detection.has_value());
    EXPECT_EQ(config.detection->labeler.num_classes, 4);
    EXPECT_DOUBLE_EQ(e.detection.postprocess.box_coder_weights.width, 5.0);
    EXPECT_NO_THROW(experiment::check_trainable(e));
}

TEST(Experiment, DetectionErrorsNameThePathWhatIsAllowedAndWhatCame) {
    const std::string shapes = R"("data": {"source": "synthetic_shapes"}, )";
    expect_detector_message(R"("data": {"source": "fake_images"})", "data.source: a RetinaNet detects boxes: use \"synthetic_shapes\"");
    expect_detector_message(shapes + R"("detection": {"anchors": {"num_scales": 2}})",
                            "detection.anchors: the heads predict model.num_anchors = 9 anchors per cell, the anchors are 2 scales × 3 "
                            "aspect ratios = 6; make them equal");
    const std::string three_anchors = error_of(
        R"({"version": 1, "model": {"kind": "retinanet", "depth": 18, "num_classes": 4, "num_anchors": 3},
            "input": {"channels": 3, "size": [256, 256]}, "global_batch": 2})");
    EXPECT_NE(three_anchors.find("model.num_anchors: the heads predict model.num_anchors = 3 anchors per cell, the anchors are 3 "
                                 "scales × 3 aspect ratios = 9"),
              std::string::npos)
        << three_anchors;
    expect_detector_message(shapes + R"("detection": {"anchors": {"num_scales": 3, "aspect_ratios": [1, -2, 0.5]}})",
                            "detection.anchors.aspect_ratios[1]: expected a width / height ratio in (0, 100], got -2");
    expect_detector_message(shapes + R"("detection": {"matcher": {"matched_threshold": 0.4, "unmatched_threshold": 0.5}})",
                            "detection.matcher.unmatched_threshold: expected at most matched_threshold");
    expect_detector_message(shapes + R"("detection": {"matcher": {"kind": "hungarian"}})",
                            "detection.matcher.kind: expected one of \"argmax\", \"bipartite\", got \"hungarian\"");
    expect_detector_message(shapes + R"("detection": {"box_coder_weights": [10, 10, 5]})",
                            "detection.box_coder_weights: expected [x, y, width, height] such as [10, 10, 5, 5]");
    expect_detector_message(shapes + R"("detection": {"loss": {"focal_gama": 2}})",
                            "detection.loss.focal_gama: unknown field; did you mean \"focal_gamma\"?");
    expect_detector_message(shapes + R"("detection": {"inference": {"max_detections": 0}})",
                            "detection.inference.max_detections: expected an integer from 1 to 100000, got 0");
    expect_detector_message(R"("data": {"source": "synthetic_shapes", "excess_boxes": "drop"})",
                            "data.excess_boxes: expected one of \"error\", \"keep_largest\", \"keep_first\", got \"drop\"");
    expect_detector_message(R"("data": {"source": "synthetic_shapes", "objects": [5, 2]})",
                            "data.objects: expected [min, max] objects per image with min ≤ max");
    expect_detector_message(R"("data": {"source": "synthetic_shapes", "object_size": [2, 50]})",
                            "data.object_size: expected [min, max] pixels of an object's larger side with 4 ≤ min ≤ max");
}
