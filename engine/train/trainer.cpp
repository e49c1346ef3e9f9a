#include "train/trainer.hpp"

#include "loss/dice_loss.hpp"
#include "train/step_end.hpp"

#include <chrono>
#include <cmath>

namespace tessera::train {

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

Trainer::Trainer(graph::Graph graph, TrainerConfig config)
    : m_graph(std::move(graph)), m_config(std::move(config)) {
    validate(m_config.optimizer);
    validate(m_config.schedule);
    graph::ExecutorOptions options;
    options.precision = m_config.precision;
    options.keep_activation_gradients = m_config.keep_activation_gradients;
    m_executor = std::make_unique<graph::Executor>(m_graph, options);
    m_executor->initialize_parameters(m_config.seed);
    m_optimizer = make_optimizer(m_config.optimizer);
    m_schedule = make_schedule(m_config.schedule);
    m_loss_scaler = make_loss_scaler(m_config.loss_scale);
    if (m_config.detection) {
        const Shape& input = m_graph.node(m_graph.input_node()).output_shape;
        TESSERA_CHECK(input.size() == 4, "a detection trainer needs a 2D image input [N, C, H, W], got " << shape_to_string(input));
        m_detector = std::make_unique<detection::Detector>(*m_config.detection, input[2], input[3]);
        std::vector<Tensor> outputs;
        for (int output : m_graph.output_nodes()) outputs.push_back(Tensor::zeros(m_graph.node(output).output_shape, DType::F32));
        m_detector->check_outputs(outputs, input[0]);
    }
}

const detection::Detector& Trainer::detector() const {
    TESSERA_CHECK(m_detector, "this trainer was not configured for detection (TrainerConfig::detection)");
    return *m_detector;
}

std::pair<double, Tensor> Trainer::loss_and_gradient(const Tensor& logits, const Tensor& labels) const {
    switch (m_config.loss) {
        case LossKind::SoftmaxCrossEntropy: {
            loss::CrossEntropyResult result = loss::softmax_cross_entropy(logits, labels, m_config.cross_entropy);
            return {result.value, std::move(result.gradient)};
        }
        case LossKind::SoftDice:
        case LossKind::CrossEntropyAndDice: {
            loss::DiceLossOptions dice_options;
            dice_options.exclude_background = m_config.dice_excludes_background;
            dice_options.ignore_label = m_config.cross_entropy.ignore_label;
            loss::DiceLossResult dice = loss::dice_loss(logits, labels, dice_options);
            if (m_config.loss == LossKind::SoftDice) return {dice.value, std::move(dice.gradient)};
            loss::CrossEntropyResult ce = loss::softmax_cross_entropy(logits, labels, m_config.cross_entropy);
            float* gradient = ce.gradient.data<float>();
            const float* dice_gradient = dice.gradient.data<float>();
            for (std::int64_t i = 0; i < ce.gradient.num_elements(); ++i) gradient[i] += dice_gradient[i];
            return {ce.value + dice.value, std::move(ce.gradient)};
        }
    }
    TESSERA_FAIL("unknown loss kind");
}

namespace {

void check_finite_loss(double value, std::int64_t step, const Tensor& images) {
    TESSERA_CHECK(std::isfinite(value), "step " << step + 1 << ": the loss is " << value << (tensor_is_finite(images)
                                            ? ": the model's output holds NaN or infinite values. Lower the learning rate, or "
                                              "use loss scaling in reduced precision"
                                            : ": the input images hold NaN or infinite values. Clean the data (data.non_finite)"));
}

}  // namespace

StepResult Trainer::train_step(const Tensor& images, const Tensor& labels) {
    TESSERA_CHECK(!m_detector, "a detection trainer steps on boxes: train_step(images, ground_truth)");
    StepResult result;
    result.step = m_step;
    result.learning_rate = m_schedule->value(m_step);
    const auto start = std::chrono::steady_clock::now();
    const Tensor logits = m_executor->forward(images, graph::Mode::Train);
    auto [value, gradient] = loss_and_gradient(logits, labels);
    result.loss = value;
    check_finite_loss(value, m_step, images);
    result.forward_seconds = seconds_since(start);
    std::vector<Tensor> gradients;
    gradients.push_back(std::move(gradient));
    backward_and_update(result, std::move(gradients));
    return result;
}

StepResult Trainer::train_step(const Tensor& images, std::span<const detection::PaddedGroundTruth> ground_truth) {
    TESSERA_CHECK(m_detector, "this trainer was not configured for detection (TrainerConfig::detection); step it on labels");
    StepResult result;
    result.step = m_step;
    result.learning_rate = m_schedule->value(m_step);
    const auto start = std::chrono::steady_clock::now();
    m_executor->forward(images, graph::Mode::Train);
    detection::DetectorStep step = m_detector->loss_and_gradients(m_executor->outputs(), ground_truth);
    result.loss = step.loss.value;
    check_finite_loss(result.loss, m_step, images);
    result.forward_seconds = seconds_since(start);
    backward_and_update(result, std::move(step.output_gradients));
    return result;
}

void Trainer::backward_and_update(StepResult& result, std::vector<Tensor> output_gradients) {
    auto start = std::chrono::steady_clock::now();
    // Loss scaling: the backward pass runs on scale × d loss, so small gradients survive low precision.
    result.loss_scale = m_loss_scaler->scale();
    for (Tensor& gradient : output_gradients) scale_loss_gradient(gradient, result.loss_scale);
    m_executor->backward(output_gradients);
    result.backward_seconds = seconds_since(start);
    start = std::chrono::steady_clock::now();
    const StepContext context{.step = m_step, .loss = result.loss, .locate = {}, .aftermath = ""};
    const std::span<Parameter> copies[] = {m_executor->parameters()};
    result.applied = finish_update(
        *m_loss_scaler, result.loss_scale, copies,
        [&] { m_optimizer->step(m_executor->parameters(), result.learning_rate); }, context);
    check_statistics(m_executor->buffers(), m_executor->graph(), context);
    result.update_seconds = seconds_since(start);
    ++m_step;
}

EvalResult Trainer::evaluate(const Tensor& images, const Tensor& labels) {
    TESSERA_CHECK(!m_detector, "a detection trainer is evaluated on boxes (mAP), not on labels");
    EvalResult result;
    result.logits = m_executor->forward(images, graph::Mode::Eval);
    result.loss = loss_and_gradient(result.logits, labels).first;
    loss::MetricOptions metric_options;
    metric_options.ignore_label = m_config.cross_entropy.ignore_label;
    result.confusion = loss::confusion_matrix_from_logits(result.logits, labels, metric_options);
    loss::ScoreOptions score_options;
    score_options.exclude_background = m_config.dice_excludes_background;
    result.scores = loss::segmentation_scores(result.confusion, score_options);
    return result;
}

}  // namespace tessera::train
