// TrainingRun: an experiment run to completion on the simulated cores — the unit of work the CLI's
// `train`, `eval` and `predict` and the studio's Run panel share.
//
// Training takes batch i for step i from the dataset (a pure function of the seed and i, prepared on
// a background thread while the step runs), hands each step's record to the observers and the
// metrics files, evaluates every steps_per_eval steps on the held-out images by sliding windows on
// the same cores, and checkpoints into model_dir. A run started on a model_dir holding checkpoints
// resumes from the latest one and skips the completed steps: its losses are exactly those of a run
// that never stopped. A stop request ends the run after the current step, with a checkpoint.
//
//   Experiment e = load_experiment("resources/experiments/unet2d_em_4way_train.json");
//   TrainingRun run(e, {.model_dir = "runs/em"});
//   std::atomic<bool> stop = false;
//   RunSummary summary = run.train(&observer, &stop);
//   EvalRecord eval = run.evaluate(&observer);          // the latest checkpoint on the held-out data
#pragma once

#include "cost/device.hpp"
#include "mesh/core_mesh.hpp"
#include "data/dataset.hpp"
#include "experiment/experiment.hpp"
#include "run/model_dir.hpp"
#include "run/run_records.hpp"

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tessera::run {

struct RunOptions {
    std::optional<std::int64_t> steps;                // overrides the experiment's steps
    std::optional<std::filesystem::path> model_dir;   // overrides the experiment's model_dir
    int host_threads = 2;                             // threads that run the simulated cores
    int prefetch_depth = 2;                           // batches prepared ahead
    bool write_predictions = true;                    // label volumes of each evaluation
    // Training takes the model_dir's lock (one run at a time); eval without predictions and predict
    // only read it.
    ModelDirAccess model_dir_access = ModelDirAccess::Write;
    std::string command = "tessera";                  // names the run in the model_dir's lock
    // evaluate() and predict() refuse a model_dir without a checkpoint unless this is set (smoke tests).
    bool allow_random_weights = false;
    // A run stopped between evaluations is evaluated where it stopped, and the evaluation logged like
    // the others (a benchmark over a time budget: its last steps count).
    bool evaluate_when_stopped = false;
    // The ranks the simulated cores are spread over (none: this process holds them all). Rank 0 builds
    // the TrainingRun — it reads the data and owns the model_dir — and every other rank calls
    // follow_training_run with the same experiment and options.
    std::shared_ptr<mesh::Transport> transport;
    std::optional<mesh::ReductionOrder> reduction;    // overrides the experiment's partition.reduction
};

// What the simulated cores of `experiment` hold together on this host, estimated from the model and
// its tiling before anything is allocated (bytes; the sum over every core of its weights, gradients,
// optimizer slots and activations). A lower bound: it leaves out the kernels' reordered and converted
// copies, whose layouts oneDNN picks per CPU (measured on an AVX-512 Xeon, the presets' compiled cores
// hold 1.2–1.9 times this); the mesh measures those as it compiles its cores (MeshConfig::host_memory_bytes).
std::int64_t estimate_host_bytes(const experiment::Experiment& experiment);
// Throws a bad-input error when that estimate passes host_memory_budget_bytes() (TESSERA_HOST_MEMORY).
void check_fits_host(const experiment::Experiment& experiment);

// A run in bf16 on a CPU without bf16 dot products (AVX512-BF16 or AMX): the executor emulates bf16
// on f32 kernels (ops::has_native_bf16), which the run says at its start. None otherwise.
std::optional<std::string> emulated_bf16_note(graph::Precision precision);
// A run in bf16 on a host whose preset measured bf16 convolutions slower than f32 ones (the preset's
// conv<rank>d.bf16_ratio.fwd, f32 time over bf16 time, under 0.95): what to tell the user, who keeps bf16's
// numerics and device prediction but trains slower here. None otherwise (f32, no such key, bf16 as fast).
std::optional<std::string> host_bf16_note(const cost::Device& host, graph::Precision precision, int spatial_rank);

// model_dir when neither the experiment nor the options name one: runs/<experiment file stem>.
std::filesystem::path default_model_dir(const experiment::Experiment& experiment);

// The other ranks of a run spread over MPI: builds this rank's cores of the same mesh and steps them as
// rank 0's TrainingRun directs (every train step, evaluation, checkpoint and restore), until it ends.
// Reads no data and writes nothing: rank 0 sends the batches and keeps the model_dir.
void follow_training_run(const experiment::Experiment& experiment, const RunOptions& options);

class TrainingRun {
public:
    // Checks the experiment can be trained, builds the dataset and the simulated cores and checks their
    // memory: every bad input is reported here, before any step.
    TrainingRun(experiment::Experiment experiment, RunOptions options = {});
    ~TrainingRun();

    // Loads the newest checkpoint that verifies into the cores (once; train, evaluate and predict call
    // it too) and returns the completed steps. `need_trained_weights`: a model_dir without a checkpoint
    // is an error unless RunOptions::allow_random_weights. Callers that report bad input before the
    // work starts call it first.
    std::int64_t load_checkpoint(bool need_trained_weights = false);
    // Trains from the latest checkpoint (or from the start) to the last step, or until *stop is set.
    RunSummary train(RunObserver* observer = nullptr, const std::atomic<bool>* stop = nullptr);
    // Evaluates the latest checkpoint (the initial weights when there is none) on the held-out data;
    // writes predictions when the options ask for them.
    EvalRecord evaluate(RunObserver* observer = nullptr);
    // Predicts label volumes for images or volumes of any size (sliding windows), normalised as the
    // training data; writes <output_dir>/<stem>_prediction.nii.gz for each and returns the paths.
    std::vector<std::filesystem::path> predict(const std::vector<std::filesystem::path>& inputs,
                                               const std::filesystem::path& output_dir);

    // What opening the model_dir and restoring found that the user should hear of: checkpoints skipped
    // (and why), an index rebuilt, a stale lock taken over. Filled by the constructor and restore.
    const std::vector<std::string>& notes() const;

    const experiment::Experiment& experiment() const;
    const data::Dataset& dataset() const;
    mesh::CoreMesh& mesh();
    const ModelDir& model_dir() const;
    std::int64_t total_steps() const;
    double predicted_step_seconds() const;  // on the experiment's device

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

}  // namespace tessera::run
