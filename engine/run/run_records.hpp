// What a training run reports: plain value types handed to observers (the CLI's progress bar, the
// studio's charts through its bridge, the metrics files) — copies, never views into live tensors.
//
//   class Printer : public RunObserver {
//       void on_step(const StepRecord& s) override { std::printf("step %lld loss %.4f\n", s.step, s.loss); }
//   };
//   TrainingRun run(experiment);
//   Printer printer;
//   run.train(&printer, &stop_requested);
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera::run {

struct RunStart {
    std::string experiment;                      // its name (or file)
    std::filesystem::path model_dir;
    std::int64_t first_step = 0;                 // steps already completed (resumed from a checkpoint)
    std::int64_t total_steps = 0;
    bool resumed = false;
    std::string layout;                          // "2 replicas × input_partition_dims [1, 2, 2, 1]"
    std::int64_t num_cores = 1, cores_per_replica = 1, num_replicas = 1;
    // Spread over MPI ranks: "2 MPI ranks: cores 0–3 on node1, 4–7 on node2" (empty in one process).
    std::string ranks;
    std::string device;                          // the preset the prediction is for
    double predicted_step_seconds = 0;           // on that device
    // The same step on this host's simulated cores, when `tessera-cli calibrate` wrote a host preset for
    // the run's thread count (0: none), and its ± from `calibrate --check`'s residuals (0: not checked).
    double predicted_host_step_seconds = 0;
    double host_prediction_uncertainty_seconds = 0;
    std::vector<std::int64_t> core_memory_bytes; // the simulated cores' peaks (ledger), one per core
    std::int64_t core_capacity_bytes = 0;
    // What the simulated cores hold on this host, as the mesh measured them when it compiled them
    // (CoreMesh::host_bytes), and what a run may use here (TESSERA_HOST_MEMORY).
    std::int64_t host_memory_bytes = 0;
    std::int64_t host_memory_budget_bytes = 0;
    std::string data;                            // the dataset's description
    std::vector<std::string> notes;              // what opening the model_dir found (TrainingRun::notes)
};

struct StepRecord {
    std::int64_t step = 0;                 // completed steps after this one (1 for the first)
    double loss = 0;
    double learning_rate = 0;
    double loss_scale = 1;
    bool applied = true;                   // false: gradients overflowed, update skipped
    double host_seconds = 0;               // the simulated cores' step on this machine
    double predicted_seconds = 0;          // the same step on the experiment's device (cost model)
    double images_per_second = 0;          // host
    std::int64_t halo_bytes = 0;           // exchanged over the step
    std::vector<std::int64_t> core_peak_bytes;  // per core
    double wall_time = 0;                  // seconds since the Unix epoch
};

struct ClassRecord {
    std::string name;      // "background", "membrane", "class 3"
    bool is_present = false;
    double dice = 0, iou = 0;
};

// One class of a detection evaluation (COCO style, detection/coco_evaluation.hpp); -1: no ground truth.
struct DetectionClassRecord {
    std::string name;                         // "disc", "class 3"
    std::int64_t num_ground_truth = 0;
    double ap = -1, ap50 = -1, ap75 = -1;     // AP@[.5:.95], at IoU 0.5, at 0.75
    double recall = -1;                       // AR at max_detections, mean over the IoU thresholds
    std::vector<double> precision_at_iou_50;  // [101] at recall 0, 0.01, …, 1: the precision–recall curve
};

struct DetectionEvalRecord {
    double ap = -1, ap50 = -1, ap75 = -1, ar100 = -1;  // means over the classes with ground truth
    double ap_small = -1, ap_medium = -1, ap_large = -1;
    std::int64_t num_ground_truth = 0;                 // boxes in the held-out images
    std::int64_t num_detections = 0;                   // after NMS and the score threshold
    std::int64_t num_true_positives = 0;               // detections matched at IoU ≥ 0.5
    std::vector<DetectionClassRecord> classes;
    std::filesystem::path detections_file;             // boxes per image: ground truth, detections, matches
};

struct EvalRecord {
    std::int64_t step = 0;          // completed training steps
    double loss = 0;                // cross-entropy over the held-out voxels (images); a detector's focal + box loss
    double mean_dice = 0, mean_iou = 0, accuracy = 0;
    std::vector<ClassRecord> classes;
    bool is_detection = false;      // then `detection` holds the scores (Dice, IoU and accuracy do not apply)
    DetectionEvalRecord detection;
    std::int64_t num_examples = 0;
    double seconds = 0;             // host time of the evaluation
    std::vector<std::filesystem::path> predictions;  // label volumes written
    std::vector<std::filesystem::path> images;       // the held-out images they are for (normalised, first channel)
    std::vector<std::filesystem::path> truths;       // and their label maps
    double wall_time = 0;
};

struct CheckpointRecord {
    std::int64_t step = 0;
    std::filesystem::path weights;
    double seconds = 0;
};

struct RunSummary {
    std::filesystem::path model_dir;
    std::int64_t first_step = 0, last_step = 0;  // completed steps at the start and the end
    bool stopped = false;                        // a stop request ended it early
    double final_loss = 0;
    bool has_eval = false;
    EvalRecord last_eval;
    double mean_host_step_seconds = 0;           // over this session's steps (the first, warming up, excluded when there are more)
    double mean_predicted_step_seconds = 0;
    std::vector<std::int64_t> core_peak_bytes;
    double wall_seconds = 0;
};

class RunObserver {
public:
    virtual ~RunObserver() = default;
    virtual void on_start(const RunStart&) {}
    virtual void on_step(const StepRecord&) {}
    virtual void on_eval(const EvalRecord&) {}
    virtual void on_checkpoint(const CheckpointRecord&) {}
    virtual void on_finish(const RunSummary&) {}
};

}  // namespace tessera::run
