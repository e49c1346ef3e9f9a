// Trainer: one core's training step and evaluation — forward, loss, backward, optimizer update — over
// a compiled graph. The CLI, the tests and (later) each simulated core use it.
//
//   TrainerConfig config;
//   config.optimizer = {.kind = OptimizerKind::Sgd, .momentum = 0.9};
//   config.schedule = {.kind = ScheduleKind::Constant, .learning_rate = 0.05};
//   Trainer trainer(networks::make_unet(unet, {4, 1, 64, 64}), config);
//   StepResult step = trainer.train_step(images, labels);       // images [4, 1, 64, 64], labels [4, 64, 64]
//   EvalResult eval = trainer.evaluate(images, labels);          // loss, Dice/IoU per class, accuracy
//
// Detection: with config.detection set, the graph is a RetinaNet (networks/retinanet.hpp) and a step
// takes each image's padded ground truth; targets and the focal and box losses are computed on the
// core after the forward pass (detection/detector.hpp), every head output gets its gradient.
//
//   config.detection = detection::DetectorConfig{.labeler = {.num_classes = 4}};
//   Trainer trainer(networks::make_retinanet(retinanet, {2, 3, 512, 512}), config);
//   StepResult step = trainer.train_step(images, ground_truth);  // span of 2 PaddedGroundTruth
#pragma once

#include "detection/detector.hpp"
#include "graph/executor.hpp"
#include "loss/cross_entropy.hpp"
#include "loss/metrics.hpp"
#include "train/loss_scale.hpp"
#include "train/optimizer.hpp"
#include "train/schedule.hpp"

#include <memory>
#include <optional>
#include <span>

namespace tessera::train {

enum class LossKind {
    SoftmaxCrossEntropy,  // class weights and ignore label from cross_entropy
    SoftDice,             // 1 − mean soft Dice over classes
    CrossEntropyAndDice,  // their sum, as many medical pipelines train
};

struct TrainerConfig {
    OptimizerConfig optimizer;
    ScheduleConfig schedule;
    LossKind loss = LossKind::SoftmaxCrossEntropy;
    loss::CrossEntropyOptions cross_entropy;
    bool dice_excludes_background = false;
    graph::Precision precision = graph::Precision::F32;
    // F16 needs it (tiny gradients flush to zero in half precision); Dynamic is the usual choice.
    LossScaleConfig loss_scale;
    std::uint64_t seed = 1;  // weight initialisation
    std::optional<detection::DetectorConfig> detection;  // set: a RetinaNet trained on boxes (loss unused)
    // Keep every activation gradient readable after backward (graph::ExecutorOptions): comparisons
    // and tests that inspect them; training shares their memory.
    bool keep_activation_gradients = false;
};

struct StepResult {
    std::int64_t step = 0;       // the step this result is for, counted from 0
    double loss = 0;
    double learning_rate = 0;
    double forward_seconds = 0;  // host time, forward + loss
    double backward_seconds = 0; // host time, backward
    double update_seconds = 0;   // host time, optimizer
    double loss_scale = 1;       // the scale this step's backward pass used
    bool applied = true;         // false: the gradients overflowed, the update was skipped
};

struct EvalResult {
    double loss = 0;
    loss::ConfusionMatrix confusion;
    loss::SegmentationScores scores;  // per-class Dice and IoU, accuracy (classification: accuracy)
    Tensor logits;                    // [N, C, ...] for overlays and predictions
};

class Trainer {
public:
    Trainer(graph::Graph graph, TrainerConfig config);

    StepResult train_step(const Tensor& images, const Tensor& labels);
    // Detection: images [N, C, H, W], one ground truth per image.
    StepResult train_step(const Tensor& images, std::span<const detection::PaddedGroundTruth> ground_truth);
    // The detector of a detection trainer (its anchors, targets and loss); throws for other trainers.
    const detection::Detector& detector() const;
    EvalResult evaluate(const Tensor& images, const Tensor& labels);

    std::int64_t step() const { return m_step; }
    graph::Executor& executor() { return *m_executor; }
    Optimizer& optimizer() { return *m_optimizer; }
    const LearningRateSchedule& schedule() const { return *m_schedule; }
    LossScaler& loss_scaler() { return *m_loss_scaler; }
    const TrainerConfig& config() const { return m_config; }

    // The loss value and d loss / d logits, as train_step computes them.
    std::pair<double, Tensor> loss_and_gradient(const Tensor& logits, const Tensor& labels) const;

private:
    // Loss scaling, backward from every output's gradient, the optimizer update and the step count.
    void backward_and_update(StepResult& result, std::vector<Tensor> output_gradients);

    graph::Graph m_graph;
    TrainerConfig m_config;
    std::unique_ptr<graph::Executor> m_executor;
    std::unique_ptr<Optimizer> m_optimizer;
    std::unique_ptr<LearningRateSchedule> m_schedule;
    std::unique_ptr<LossScaler> m_loss_scaler;
    std::unique_ptr<detection::Detector> m_detector;
    std::int64_t m_step = 0;
};

}  // namespace tessera::train
