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
//     "per_host_input_for_training": "PER_HOST_V2",
//     "device": "tpu_v3",
//     "precision": "bf16",
//     "optimizer": {"kind": "sgd", "momentum": 0.9}
//   }
//
// Every field is checked; an error gives the file, the JSON path, what is allowed and what came, and an
// unknown field is refused with the closest known one ("modle: unknown field; did you mean "model"?").
//
//   Experiment e = load_experiment("resources/experiments/unet3d_ct_16cores.json");
//   graph::Graph model = build_model(e, replica_input_shape(e));
#pragma once

#include "graph/executor.hpp"
#include "partition/partition_spec.hpp"
#include "train/optimizer.hpp"

#include <filesystem>
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
    std::int64_t fpn_channels = 256;  // RetinaNet
    std::int64_t num_anchors = 9;     // RetinaNet
};

struct Experiment {
    int version = 1;
    std::string name;
    std::string origin;                      // the file it came from (for messages)
    ModelSpec model;
    std::int64_t channels = 1;               // input channels
    std::vector<std::int64_t> size;          // spatial extents: (H, W) or (D, H, W)
    std::int64_t global_batch = 1;
    partition::PartitionSpec partition;      // cores per replica, replicas, input_partition_dims, PER_HOST_V2
    std::string device = "tpu_v3";           // a preset id (resources/devices)
    graph::Precision precision = graph::Precision::F32;
    train::OptimizerConfig optimizer;
};

Experiment parse_experiment(const std::string& json_text, const std::string& origin);
Experiment load_experiment(const std::filesystem::path& path);

// [global_batch, C, (D,) H, W] and one replica's [global_batch / replicas, …].
Shape global_input_shape(const Experiment& experiment);
Shape replica_input_shape(const Experiment& experiment);
// The model for an input shape (the planner builds it for other batch sizes too).
graph::Graph build_model(const Experiment& experiment, const Shape& input);
// The per-axis pieces of the features' input_partition_dims ({1, …} when not split).
std::vector<std::int64_t> spatial_pieces(const Experiment& experiment);
std::string_view precision_name(graph::Precision precision);

}  // namespace tessera::experiment
