// Experiment files: a user's unit of work in one JSON file — the model, the input, how it is split
// across cores (the seeds' TPUConfig fields), the device it is planned for, precision and optimizer.
// Schema version 1 (documented in resources/experiments/README.md):
//
//   {
//     "version": 1,
//     "name": "3D U-Net on 256³ CT, 16 cores",
//     "model": {"kind": "unet", "depth": 4, "base_width": 32, "num_classes": 2, "batch_norm": true},
//     "input": {"channels": 1, "size": [256, 256, 256]},
//     "global_batch": 1,
//     "num_cores_per_replica": 16,
//     "num_replicas": 1,
//     "input_partition_dims": [[1, 2, 2, 4, 1], null],
//     "tile_boundaries": [[0, 128, 256], [0, 120, 256], [0, 64, 128, 192, 256]],   // optional: uneven cuts
//     "per_host_input_for_training": "PER_HOST_V2",
//     "device": "tpu_v3",
//     "precision": "bf16",
//     "optimizer": {"kind": "sgd", "momentum": 0.9},
//     "data": {"source": "synthetic_ct", "normalization": {"window": [-1000, 1000]}},
//     "steps": 200, "steps_per_eval": 50, "model_dir": "runs/unet3d_ct",
//     "schedule": {"kind": "cosine", "learning_rate": 0.01, "warmup_steps": 20}
//   }
//
// Every field is checked; an error gives the file, the JSON path, what is allowed and what came, and an
// unknown field is refused with the closest known one ("modle: unknown field; did you mean "model"?").
//
//   Experiment e = load_experiment("resources/experiments/unet3d_ct_16cores.json");
//   graph::Graph model = build_model(e, replica_input_shape(e));
//   partition::SpatialGrid grid = tile_grid(e);   // tile_boundaries, or even pieces of input_partition_dims
//
// Writing a design back into the file: experiment_edit.hpp; TPUConfig and JAX snippets: export.hpp.
#pragma once

#include "data/dataset.hpp"
#include "data/sliding_window.hpp"
#include "detection/detector.hpp"
#include "detection/postprocess.hpp"
#include "graph/executor.hpp"
#include "partition/partition_spec.hpp"
#include "partition/tiling.hpp"
#include "train/reduction_order.hpp"
#include "train/trainer.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tessera::experiment {

enum class ModelKind { UNet, ResNet, RetinaNet };

struct ModelSpec {
    ModelKind kind = ModelKind::UNet;
    int depth = 4;                    // U-Net levels; ResNet 18…200; RetinaNet: its ResNet backbone's depth
    std::int64_t base_width = 32;     // U-Net and ResNet channels at the first level
    std::int64_t num_classes = 2;
    bool batch_norm = true;           // U-Net
    std::int64_t max_width = 0;       // U-Net: channels capped (0: none; nnU-Net's 3D U-Net caps at 320)
    bool strided_downsampling = false;  // U-Net "downsampling": "strided_conv" (stride-2 first convolutions, no pools)
    std::int64_t head_kernel = 1;     // U-Net: 1 or 3
    std::int64_t fpn_channels = 256;  // RetinaNet
    std::int64_t num_anchors = 9;     // RetinaNet
    bool fpn_batch_norm = true;       // RetinaNet: BN on P3..P7 (TPU); false as torchvision
    bool head_batch_norm = true;      // RetinaNet: BN after each head conv, per level (TPU); false as torchvision
    std::int64_t groups = 1;          // ResNet / RetinaNet backbone: ResNeXt's cardinality (networks::ResNetConfig)
    std::int64_t width_per_group = 0; // ... and its first-stage channels per group (ResNeXt50-32x4d: 32 and 4)
    bool round_up_coarse_levels = false;  // RetinaNet "coarse_levels": "round_up" (torchvision) or "exact" (TPU)
};

// How a run trains: the parts of TPUEstimator's params that are not the model or the layout.
struct TrainingSpec {
    std::int64_t steps = 0;                  // training steps (global batches)
    std::int64_t steps_per_eval = 0;         // evaluate every this many steps (and at the end); 0: at the end only
    std::int64_t steps_per_checkpoint = 0;   // 0: every steps_per_eval (or at the end)
    std::int64_t keep_checkpoints = 3;       // the last K are kept
    // Weight gradients across MPI ranks ("reduction"); one process sums in core order either way.
    train::ReductionOrder reduction = train::ReductionOrder::Reproducible;
    std::filesystem::path model_dir;         // checkpoints, metrics, predictions; relative to the working directory
    std::uint64_t seed = 1;                  // weights, and the data's unless data.seed is given
    train::ScheduleConfig schedule;
    train::LossKind loss = train::LossKind::SoftmaxCrossEntropy;
    bool dice_excludes_background = false;
    train::LossScaleConfig loss_scale;
    // Evaluation over whole held-out images by sliding windows (MONAI's sliding_window_inference).
    double eval_overlap = 0.25;
    data::BlendMode eval_blend = data::BlendMode::Gaussian;
    std::int64_t max_eval_examples = 0;      // 0: all held-out examples
};

// Detection (RetinaNet): the file's "detection" section. Targets, loss and inference as the TPU RetinaNet
// does them; the two GPU-pipeline choices below can be written (e.g. when porting a config) so that
// `tessera-cli validate` can say why they do not suit a TPU, but they are not trained.
enum class MatcherKind { Argmax, Bipartite };
struct DetectionSpec {
    detection::DetectorConfig detector;          // anchors, matcher, box coder, focal and box losses (num_classes: the model's)
    detection::PostprocessOptions postprocess;   // score threshold, top-k per level, NMS, max_detections
    MatcherKind matcher = MatcherKind::Argmax;   // detection.matcher.kind
    bool hard_example_mining = false;            // detection.hard_example_mining
};

struct Experiment {
    int version = 1;
    std::string name;
    std::string origin;                      // the file it came from (for messages)
    std::string text;                        // the JSON as read (kept in a run's model_dir)
    ModelSpec model;
    std::int64_t channels = 1;               // input channels
    std::vector<std::int64_t> size;          // spatial extents: (H, W) or (D, H, W)
    std::int64_t global_batch = 1;
    partition::PartitionSpec partition;      // cores per replica, replicas, input_partition_dims, PER_HOST_V2
    std::string per_host_input = "PER_HOST_V2";  // per_host_input_for_training as written (PER_HOST_V1, BROADCAST, …)
    // tile_boundaries when the file gives them: per spatial axis the cuts 0 = b_0 < … < b_k = extent, each
    // interior cut a multiple of the model's boundary alignment; absent: even pieces (tile_grid()).
    std::optional<partition::SpatialGrid> grid;
    std::string device = "tpu_v3";           // a preset id (resources/devices)
    graph::Precision precision = graph::Precision::F32;
    train::OptimizerConfig optimizer;
    // What the run trains on; absent for a plan-only experiment (e.g. RetinaNet at 2560²).
    std::optional<data::DataConfig> data;
    DetectionSpec detection;                 // RetinaNet only
    TrainingSpec training;
    std::filesystem::path directory;         // of the experiment file: data paths are relative to it
    bool is_trainable() const { return data.has_value() && training.steps > 0; }
};

Experiment parse_experiment(const std::string& json_text, const std::string& origin);
Experiment load_experiment(const std::filesystem::path& path);
// Records the folder the experiment's file is in and resolves its relative data folders and files against it
// (load_experiment does this; callers that parse text they read themselves call it).
void place_in_directory(Experiment& experiment, const std::filesystem::path& directory);

// [global_batch, C, (D,) H, W] and one replica's [global_batch / replicas, …].
Shape global_input_shape(const Experiment& experiment);
Shape replica_input_shape(const Experiment& experiment);
// The model for an input shape (the planner builds it for other batch sizes too).
graph::Graph build_model(const Experiment& experiment, const Shape& input);
// The per-axis pieces of the features' input_partition_dims ({1, …} when not split).
std::vector<std::int64_t> spatial_pieces(const Experiment& experiment);
// How one replica's input is cut: the explicit tile_boundaries, or spatial_pieces split evenly.
partition::SpatialGrid tile_grid(const Experiment& experiment);
// True when `grid` is the even split of these spatial extents (every piece the same size), which
// input_partition_dims alone expresses; false for uneven cuts (they need tile_boundaries).
bool is_even_split(const partition::SpatialGrid& grid, const std::vector<std::int64_t>& size);
// "[[0, 120, 256], [0, 256]]": a grid as tile_boundaries is written.
std::string tile_boundaries_text(const partition::SpatialGrid& grid);
std::string_view precision_name(graph::Precision precision);
// The trainer's settings (optimizer, schedule, loss, precision, loss scaling, seed).
train::TrainerConfig trainer_config(const Experiment& experiment);
// Throws a message naming what is missing when the experiment cannot be trained (plan-only, or a
// detection pipeline that is not the TPU's: bipartite matching, hard-example mining).
void check_trainable(const Experiment& experiment);

// Per-parameter slots its optimizer keeps (SGD: momentum or none; Adam/AdamW: two moments): what the
// memory model and the step simulation count.
std::int64_t optimizer_slots(const Experiment& experiment);

}  // namespace tessera::experiment
