#include "detection/detection_loss.hpp"

#include "core/error.hpp"

#include <algorithm>

namespace tessera::detection {

namespace {

void check_levels(std::span<const Tensor> class_outputs, std::span<const Tensor> box_outputs, const HeadTargets& targets) {
    TESSERA_CHECK(class_outputs.size() == targets.levels.size() && box_outputs.size() == targets.levels.size(),
                  "detection loss: expected class and box outputs for each of the targets' " << targets.levels.size()
                      << " levels, got " << class_outputs.size() << " class and " << box_outputs.size() << " box outputs");
    for (std::size_t level = 0; level < targets.levels.size(); ++level) {
        const LevelTargets& target = targets.levels[level];
        TESSERA_CHECK(class_outputs[level].shape() == target.class_targets.shape() &&
                          box_outputs[level].shape() == target.box_targets.shape(),
                      "detection loss, level index " << level << ": expected class outputs "
                          << shape_to_string(target.class_targets.shape()) << " and box outputs "
                          << shape_to_string(target.box_targets.shape()) << " (the targets' cells), got "
                          << shape_to_string(class_outputs[level].shape()) << " and "
                          << shape_to_string(box_outputs[level].shape()));
    }
}

double class_normalizer(std::int64_t num_positive) { return std::max<double>(static_cast<double>(num_positive), 1.0); }
double box_normalizer(std::int64_t num_positive) { return std::max<double>(4.0 * static_cast<double>(num_positive), 1.0); }

}  // namespace

DetectionLossPartial& DetectionLossPartial::operator+=(const DetectionLossPartial& other) {
    classification_sum += other.classification_sum;
    box_sum += other.box_sum;
    num_positive += other.num_positive;
    return *this;
}

DetectionLossPartial operator+(DetectionLossPartial a, const DetectionLossPartial& b) { return a += b; }

DetectionLossPartial detection_loss_partial(std::span<const Tensor> class_outputs, std::span<const Tensor> box_outputs,
                                            const HeadTargets& targets, const DetectionLossOptions& options) {
    check_levels(class_outputs, box_outputs, targets);
    DetectionLossPartial partial;
    partial.num_positive = targets.num_positive;
    for (std::size_t level = 0; level < targets.levels.size(); ++level) {
        const LevelTargets& target = targets.levels[level];
        partial.classification_sum +=
            loss::sigmoid_focal_loss_partial(class_outputs[level], target.class_targets, options.focal, target.class_weights)
                .loss_sum;
        partial.box_sum +=
            loss::smooth_l1_loss_partial(box_outputs[level], target.box_targets, options.box, target.box_weights).loss_sum;
    }
    return partial;
}

DetectionLossResult finish_detection_loss(const DetectionLossPartial& total, std::span<const Tensor> class_outputs,
                                          std::span<const Tensor> box_outputs, const HeadTargets& targets,
                                          const DetectionLossOptions& options) {
    check_levels(class_outputs, box_outputs, targets);
    TESSERA_CHECK(options.box_loss_weight >= 0, "detection loss: expected box_loss_weight ≥ 0, got " << options.box_loss_weight);
    DetectionLossResult result;
    result.num_positive = total.num_positive;
    result.classification_loss = total.classification_sum / class_normalizer(total.num_positive);
    result.box_loss = total.box_sum / box_normalizer(total.num_positive);
    result.value = result.classification_loss + options.box_loss_weight * result.box_loss;
    const loss::FocalLossPartial class_total{.loss_sum = total.classification_sum, .num_positive = total.num_positive};
    const loss::SmoothL1Partial box_total{.loss_sum = total.box_sum};
    for (std::size_t level = 0; level < targets.levels.size(); ++level) {
        const LevelTargets& target = targets.levels[level];
        result.class_gradients.push_back(loss::finish_sigmoid_focal_loss(class_total, class_normalizer(total.num_positive),
                                                                         class_outputs[level], target.class_targets,
                                                                         options.focal, target.class_weights)
                                             .gradient);
        Tensor box_gradient = loss::finish_smooth_l1_loss(box_total, box_normalizer(total.num_positive), box_outputs[level],
                                                          target.box_targets, options.box, target.box_weights)
                                  .gradient;
        float* values = box_gradient.data<float>();
        const auto weight = static_cast<float>(options.box_loss_weight);
        for (std::int64_t i = 0; i < box_gradient.num_elements(); ++i) values[i] *= weight;
        result.box_gradients.push_back(std::move(box_gradient));
    }
    return result;
}

DetectionLossResult detection_loss(std::span<const Tensor> class_outputs, std::span<const Tensor> box_outputs,
                                   const HeadTargets& targets, const DetectionLossOptions& options) {
    return finish_detection_loss(detection_loss_partial(class_outputs, box_outputs, targets, options), class_outputs,
                                 box_outputs, targets, options);
}

}  // namespace tessera::detection
