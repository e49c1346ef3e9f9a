// Small experiments and temporary model_dirs for the training-run tests.
#pragma once

#include "support/scratch_dir.hpp"

#include "experiment/experiment.hpp"
#include "run/training_run.hpp"

#include <filesystem>
#include <string>
#include <unistd.h>

namespace tessera::test {

// A fresh folder per test (tests/support/scratch_dir.hpp), named for these tests.
class TemporaryFolder : public ScratchDir {
public:
    explicit TemporaryFolder(const std::string& name) : ScratchDir("run_" + name) {}
};

// A 2D U-Net on 32×32 crops of 64×64 EM-like sections, 2 replicas × 2 cores: every part of a run
// (halos, BN over a replica, gradients over replicas, Adam, a warmup schedule) in a few milliseconds a step.
inline std::string small_em_experiment(int steps, int steps_per_eval, int steps_per_checkpoint) {
    return R"({
      "version": 1,
      "name": "small EM",
      "model": {"kind": "unet", "depth": 2, "base_width": 4, "num_classes": 2},
      "input": {"channels": 1, "size": [32, 32]},
      "global_batch": 4,
      "num_cores_per_replica": 2,
      "num_replicas": 2,
      "input_partition_dims": [[1, 2, 1, 1], null],
      "optimizer": {"kind": "adam"},
      "data": {"source": "synthetic_em", "image_size": [64, 64], "num_train_images": 3, "num_eval_images": 1,
               "augment": {"flip_axes": [0, 1], "intensity_scale": 0.1}},
      "schedule": {"kind": "cosine", "learning_rate": 0.01, "warmup_steps": 2},
      "steps": )" + std::to_string(steps) + R"(,
      "steps_per_eval": )" + std::to_string(steps_per_eval) + R"(,
      "steps_per_checkpoint": )" + std::to_string(steps_per_checkpoint) + R"(,
      "keep_checkpoints": 2,
      "seed": 7
    })";
}

inline experiment::Experiment small_em(int steps, int steps_per_eval, int steps_per_checkpoint) {
    return experiment::parse_experiment(small_em_experiment(steps, steps_per_eval, steps_per_checkpoint), "small_em.json");
}

// A small RetinaNet on synthetic shapes, split 1 × 2: two steps, then COCO scores and a boxes file for
// three held-out images.
inline std::string small_shapes_detector_experiment() {
    return R"({
      "version": 1,
      "model": {"kind": "retinanet", "depth": 18, "num_classes": 4, "fpn_channels": 8, "num_anchors": 1},
      "input": {"channels": 3, "size": [256, 256]},
      "global_batch": 2, "num_cores_per_replica": 2, "input_partition_dims": [[1, 1, 2, 1], null],
      "data": {"source": "synthetic_shapes", "num_train_images": 2, "num_eval_images": 3, "object_size": [16, 100],
               "normalization": "none", "augment": {"flip_axes": [1]}},
      "detection": {"anchors": {"num_scales": 1, "aspect_ratios": [1.0]}, "inference": {"score_threshold": 0.0}},
      "schedule": {"learning_rate": 0.001}, "steps": 2, "steps_per_eval": 2, "seed": 3
    })";
}

inline run::RunOptions options_in(const std::filesystem::path& model_dir) {
    run::RunOptions options;
    options.model_dir = model_dir;
    return options;
}

}  // namespace tessera::test
