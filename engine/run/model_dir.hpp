// ModelDir: a run's folder, as TPUEstimator's model_dir — checkpoints, metrics and predictions.
//
//   runs/unet2d_em/
//     checkpoint                              index (JSON): the kept checkpoints, newest last
//     model.ckpt-000200.safetensors          the weights (parameters, BN statistics): any safetensors reader opens it
//     state.ckpt-000200.safetensors          optimizer slots, loss scale, step, data position, other replicas' BN
//     experiment.json                         the experiment the run was started with
//     metrics.jsonl, train.csv, eval.csv      one record per step / evaluation
//     summary.json                            the end of the last session: final metrics, mean step times, peak memory
//     events.out.tfevents.*, eval/…           TensorBoard scalars
//     predictions/<example>.nii.gz            the latest evaluation's label volumes
//
// A checkpoint is written file by file, each to a temporary name and renamed, and the index last: a
// process killed at any moment leaves the previous checkpoint listed and intact. Files not in the index
// (from such a kill) and temporaries are removed when a run opens the folder again.
//
//   ModelDir dir("runs/unet2d_em");
//   dir.save(200, mesh.weights(), state, {{"experiment", "unet2d_em"}}, /*keep*/ 3);
//   if (auto latest = dir.latest()) { Checkpoint c = dir.load(*latest); ... }
#pragma once

#include "train/named_tensor.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::run {

struct CheckpointInfo {
    std::int64_t step = 0;                 // completed steps
    std::filesystem::path weights, state;  // absolute paths of the two files
};

struct Checkpoint {
    CheckpointInfo info;
    std::vector<train::NamedTensor> weights;
    std::vector<train::NamedTensor> state;
    std::map<std::string, std::string> metadata;  // of the weights file
};

// For crash tests only: called at each stage of a save ("state written", "weights written", before the
// index commits them), so a test can kill the process at exactly that moment.
void set_checkpoint_fault_hook(void (*hook)(std::string_view stage));

class ModelDir {
public:
    // Creates the folder when missing; removes temporaries and files no index lists.
    explicit ModelDir(std::filesystem::path path);

    const std::filesystem::path& path() const { return m_path; }
    std::vector<CheckpointInfo> checkpoints() const;  // oldest first
    std::optional<CheckpointInfo> latest() const;

    // Writes both files, then the index listing them; keeps the newest `keep` and deletes older ones.
    CheckpointInfo save(std::int64_t step, const std::vector<train::NamedTensor>& weights,
                        const std::vector<train::NamedTensor>& state, const std::map<std::string, std::string>& metadata,
                        std::int64_t keep);
    Checkpoint load(const CheckpointInfo& info) const;

    // experiment.json: written at a run's start; compared on resume.
    std::optional<std::string> experiment_text() const;
    void write_experiment_text(const std::string& text) const;

private:
    void write_index(const std::vector<CheckpointInfo>& checkpoints) const;
    void remove_unlisted() const;

    std::filesystem::path m_path;
};

}  // namespace tessera::run
