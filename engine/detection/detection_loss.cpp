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
        const Shape& weights = target.class_weights.shape();
        const bool per_anchor = weights.size() == 4 && target.box_weights.shape() == weights &&
                                target.class_targets.rank() == 4 && target.box_targets.rank() == 4 &&
                                weights[1] > 0 && target.class_targets.dim(1) % weights[1] == 0 &&
                                target.box_targets.dim(1) == 4 * weights[1];
        TESSERA_CHECK(per_anchor, "detection loss, level index " << level << ": expected class targets [N, A·K, H, W], box "
                                      << "targets [N, A·4, H, W] and weights [N, A, H, W] per anchor, got "
                                      << shape_to_string(target.class_targets.shape()) << ", "
                                      << shape_to_string(target.box_targets.shape()) << " and " << shape_to_string(weights));
        TESSERA_CHECK(class_outputs[level].shape() == target.class_targets.shape() &&
                          box_outputs[level].shape() == target.box_targets.shape(),
                      "detection loss, level index " << level << ": expected class outputs "
                          << shape_to_string(target.class_targets.shape()) << " and box outputs "
                          << shape_to_string(target.box_targets.shape()) << " (the targets' cells), got "
                          << shape_to_string(class_outputs[level].shape()) << " and "
                          << shape_to_string(box_outputs[level].shape()));
    }
}

// [N, A·C, H, W] read as [N·A, C, H, W] (channel a·C + c is anchor a's entry c): its shape without axis 1 is
// the per-anchor weights' [N, A, H, W] read as [N·A, H, W], the losses' per-anchor weight layout.
Tensor by_anchor(const Tensor& values, std::int64_t anchors_per_cell) {
    const Shape& shape = values.shape();
    return values.contiguous().reshape(
        {shape[0] * anchors_per_cell, shape[1] / anchors_per_cell, shape[2], shape[3]});
}
Tensor anchor_weights(const Tensor& weights) {
    const Shape& shape = weights.shape();
    return weights.contiguous().reshape({shape[0] * shape[1], shape[2], shape[3]});
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
        const std::int64_t anchors_per_cell = target.class_weights.dim(1);
        partial.classification_sum +=
            loss::sigmoid_focal_loss_partial(by_anchor(class_outputs[level], anchors_per_cell),
                                             by_anchor(target.class_targets, anchors_per_cell), options.focal,
                                             anchor_weights(target.class_weights))
                .loss_sum;
        partial.box_sum += loss::smooth_l1_loss_partial(by_anchor(box_outputs[level], anchors_per_cell),
                                                        by_anchor(target.box_targets, anchors_per_cell), options.box,
                                                        anchor_weights(target.box_weights))
                               .loss_sum;
    }
    return partial;
}

DetectionLossResult finish_detection_loss(const DetectionLossPartial& total, std::span<const Tensor> class_outputs,
                                          std::span<const Tensor> box_outputs, const HeadTargets& targets,
                                          const DetectionLossOptions& options) {
    check_levels(class_outputs, box_outputs, targets);
    TESSERA_CHECK(options.box_loss_weight >= 0, "detection loss: expected box_loss_weight ≥ 0, got " << options.box_loss_weight);
    DetectionLossResult result = detection_loss_value(total, options);
    const loss::FocalLossPartial class_total{.loss_sum = total.classification_sum, .num_positive = total.num_positive};
    const loss::SmoothL1Partial box_total{.loss_sum = total.box_sum};
    for (std::size_t level = 0; level < targets.levels.size(); ++level) {
        const LevelTargets& target = targets.levels[level];
        const std::int64_t anchors_per_cell = target.class_weights.dim(1);
        result.class_gradients.push_back(
            loss::finish_sigmoid_focal_loss(class_total, class_normalizer(total.num_positive),
                                            by_anchor(class_outputs[level], anchors_per_cell),
                                            by_anchor(target.class_targets, anchors_per_cell), options.focal,
                                            anchor_weights(target.class_weights))
                .gradient.reshape(class_outputs[level].shape()));
        Tensor box_gradient = loss::finish_smooth_l1_loss(box_total, box_normalizer(total.num_positive),
                                                          by_anchor(box_outputs[level], anchors_per_cell),
                                                          by_anchor(target.box_targets, anchors_per_cell), options.box,
                                                          anchor_weights(target.box_weights))
                                  .gradient.reshape(box_outputs[level].shape());
        float* values = box_gradient.data<float>();
        const auto weight = static_cast<float>(options.box_loss_weight);
        for (std::int64_t i = 0; i < box_gradient.num_elements(); ++i) values[i] *= weight;
        result.box_gradients.push_back(std::move(box_gradient));
    }
    return result;
}

DetectionTileLoss detection_loss_on_tile(std::span<const Tensor> class_outputs, std::span<const Tensor> box_outputs,
                                         const HeadTargets& targets, std::int64_t batch_num_positive,
                                         const DetectionLossOptions& options) {
    check_levels(class_outputs, box_outputs, targets);
    TESSERA_CHECK(options.box_loss_weight >= 0, "detection loss: expected box_loss_weight ≥ 0, got " << options.box_loss_weight);
    TESSERA_CHECK(batch_num_positive >= targets.num_positive,
                  "detection loss: the batch's positive anchors (" << batch_num_positive << ") cannot be fewer than the tile's ("
                                                                   << targets.num_positive << ")");
    DetectionTileLoss result;
    result.partial.num_positive = targets.num_positive;
    for (std::size_t level = 0; level < targets.levels.size(); ++level) {
        const LevelTargets& target = targets.levels[level];
        const std::int64_t anchors_per_cell = target.class_weights.dim(1);
        loss::FocalLossResult focal = loss::sigmoid_focal_loss(
            by_anchor(class_outputs[level], anchors_per_cell), by_anchor(target.class_targets, anchors_per_cell),
            class_normalizer(batch_num_positive), options.focal, anchor_weights(target.class_weights));
        result.partial.classification_sum += focal.loss_sum;
        result.class_gradients.push_back(focal.gradient.reshape(class_outputs[level].shape()));
        loss::SmoothL1Result box = loss::smooth_l1_loss(
            by_anchor(box_outputs[level], anchors_per_cell), by_anchor(target.box_targets, anchors_per_cell),
            box_normalizer(batch_num_positive), options.box, anchor_weights(target.box_weights));
        result.partial.box_sum += box.loss_sum;
        float* values = box.gradient.data<float>();
        const auto weight = static_cast<float>(options.box_loss_weight);
        for (std::int64_t i = 0; i < box.gradient.num_elements(); ++i) values[i] *= weight;
        result.box_gradients.push_back(box.gradient.reshape(box_outputs[level].shape()));
    }
    return result;
}

DetectionLossResult detection_loss_value(const DetectionLossPartial& total, const DetectionLossOptions& options) {
    DetectionLossResult result;
    result.num_positive = total.num_positive;
    result.classification_loss = total.classification_sum / class_normalizer(total.num_positive);
    result.box_loss = total.box_sum / box_normalizer(total.num_positive);
    result.value = result.classification_loss + options.box_loss_weight * result.box_loss;
    return result;
}

DetectionLossResult detection_loss(std::span<const Tensor> class_outputs, std::span<const Tensor> box_outputs,
                                   const HeadTargets& targets, const DetectionLossOptions& options) {
    return finish_detection_loss(detection_loss_partial(class_outputs, box_outputs, targets, options), class_outputs,
                                 box_outputs, targets, options);
}

}  // namespace tessera::detection
