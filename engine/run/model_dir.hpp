// ModelDir: a run's folder, as TPUEstimator's model_dir — checkpoints, metrics and predictions.
//
//   runs/unet2d_em/
//     checkpoint                              index (JSON): the kept checkpoints, newest last
//     model.ckpt-000200.safetensors          the weights (parameters, BN statistics): any safetensors reader opens it
//     state.ckpt-000200.safetensors          optimizer slots, loss scale, step, data position, other replicas' BN
//     experiment.json                         the experiment the run was started with
//     metrics.jsonl, train.csv, eval.csv      one record per step / evaluation (metrics.jsonl also one per session's start)
//     step_trace.json                         the cores' events of the step before the latest checkpoint (Chrome trace)
//     summary.json                            the end of the last session: final metrics, mean step times, peak memory
//     events.out.tfevents.*, eval/…           TensorBoard scalars
//     predictions/<example>.nii.gz            the latest evaluation's label volumes
//
// A checkpoint is written file by file, each to a temporary name and renamed, then read back and
// verified, and the index last: a process killed at any moment leaves the previous checkpoint listed
// and intact, and older checkpoints are deleted only once a newer one has verified. Checkpoint files
// no index lists (from such a kill) and temporaries are removed when a run opens the folder again.
//
// Every safetensors file carries a CRC-32 of its tensor data (io/safetensors.hpp); a checkpoint
// verifies when both files read back whole, match their checksums, carry its step and hold only finite
// values. Resuming takes the newest checkpoint that verifies and names those it skipped and why; a
// folder whose index was lost gets it rebuilt from the checkpoint files that verify (never a fresh
// start over them), and a damaged index is set aside as `checkpoint.damaged`. Index entries are plain
// file names inside the folder.
//
// A writer (a training run) holds the folder's lock for its life (model_dir_lock.hpp); a reader
// (predict, the studio watching a run) takes no lock and changes nothing.
//
//   ModelDir dir("runs/unet2d_em", ModelDirAccess::Write, "tessera-cli train em.json");
//   dir.save(200, mesh.weights(), state, {{"experiment", "unet2d_em"}}, /*keep*/ 3);
//   std::vector<std::string> skipped;
//   if (auto c = dir.load_newest_verified(skipped)) { ... c->weights ... }
#pragma once

#include "run/model_dir_lock.hpp"
#include "train/named_tensor.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
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

enum class ModelDirAccess {
    Write,     // a run: creates the folder, takes its lock, tidies it, rebuilds a lost index
    ReadOnly,  // predict, eval, the studio: the folder must exist; nothing is locked or changed
};

class ModelDir {
public:
    // `command` names the run in the lock ("tessera-cli train em.json"). Throws a bad-input error when
    // another run holds the folder (Write) or the folder does not exist (ReadOnly).
    explicit ModelDir(std::filesystem::path path, ModelDirAccess access = ModelDirAccess::Write, std::string_view command = "tessera");
    ~ModelDir();

    const std::filesystem::path& path() const { return m_path; }
    ModelDirAccess access() const { return m_access; }
    // What opening the folder did that a user should hear of: a stale lock taken over, an index
    // rebuilt, a damaged index set aside.
    const std::vector<std::string>& notes() const { return m_notes; }

    std::vector<CheckpointInfo> checkpoints() const;  // listed, oldest first
    std::optional<CheckpointInfo> latest() const;     // the newest listed (it may not verify)

    // Writes both files, verifies them, then the index listing them; keeps the newest `keep` and
    // deletes older ones. Write access only.
    CheckpointInfo save(std::int64_t step, const std::vector<train::NamedTensor>& weights,
                        const std::vector<train::NamedTensor>& state, const std::map<std::string, std::string>& metadata,
                        std::int64_t keep);
    // Reads and verifies one checkpoint; throws a bad-input error saying what is wrong with it.
    Checkpoint load(const CheckpointInfo& info) const;
    // The newest listed checkpoint that verifies, trying older ones in turn; `skipped` gets one line
    // per checkpoint passed over ("step 300 (model.ckpt-000300.safetensors): the tensor data is
    // damaged …"). None when nothing is listed; throws when checkpoints are listed and none verifies.
    std::optional<Checkpoint> load_newest_verified(std::vector<std::string>& skipped) const;

    // experiment.json: written at a run's start; compared on resume.
    std::optional<std::string> experiment_text() const;
    void write_experiment_text(const std::string& text) const;

private:
    void write_index(const std::vector<CheckpointInfo>& checkpoints) const;
    void remove_unlisted() const;
    void recover_index();
    std::vector<CheckpointInfo> scan_checkpoint_files() const;

    std::filesystem::path m_path;
    ModelDirAccess m_access;
    std::unique_ptr<ModelDirLock> m_lock;
    std::vector<std::string> m_notes;
    std::optional<std::vector<CheckpointInfo>> m_scanned;  // read-only and no index: what the files say
};

}  // namespace tessera::run
