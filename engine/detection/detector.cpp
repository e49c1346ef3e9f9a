#include "detection/detector.hpp"

#include "core/error.hpp"

namespace tessera::detection {

Detector::Detector(DetectorConfig config, std::int64_t image_height, std::int64_t image_width)
    : m_config(std::move(config)), m_anchors(make_anchors(image_height, image_width, m_config.anchors)) {
    validate(m_config.labeler.matcher);
}

void Detector::check_outputs(std::span<const Tensor> outputs, std::int64_t batch) const {
    const std::size_t levels = num_levels();
    TESSERA_CHECK(outputs.size() == 2 * levels, "RetinaNet with levels " << m_config.anchors.min_level << ".."
                                                    << m_config.anchors.max_level << " has " << 2 * levels
                                                    << " outputs (class, then box, per level), got " << outputs.size());
    const std::int64_t per_cell = m_anchors.anchors_per_cell();
    for (std::size_t level = 0; level < levels; ++level) {
        const LevelAnchors& anchors = m_anchors.levels[level];
        const Shape classes{batch, per_cell * m_config.labeler.num_classes, anchors.height, anchors.width};
        const Shape boxes{batch, per_cell * 4, anchors.height, anchors.width};
        TESSERA_CHECK(outputs[level].shape() == classes && outputs[levels + level].shape() == boxes,
                      "RetinaNet level " << anchors.level << ": expected class logits " << shape_to_string(classes)
                                         << " and box codes " << shape_to_string(boxes) << " (" << per_cell
                                         << " anchors per cell, " << m_config.labeler.num_classes
                                         << " classes), got " << shape_to_string(outputs[level].shape()) << " and "
                                         << shape_to_string(outputs[levels + level].shape())
                                         << "; the model's num_classes and num_anchors must match the detector's");
    }
}

HeadTargets Detector::targets(std::span<const PaddedGroundTruth> images) const {
    std::vector<AnchorTargets> per_image;
    per_image.reserve(images.size());
    for (const PaddedGroundTruth& image : images) per_image.push_back(label_anchors(image, m_anchors, m_config.labeler));
    return to_head_layout(per_image, m_anchors);
}

DetectorStep Detector::loss_and_gradients(std::span<const Tensor> outputs, std::span<const PaddedGroundTruth> images) const {
    TESSERA_CHECK(!outputs.empty() && outputs[0].rank() == 4 && outputs[0].dim(0) == static_cast<std::int64_t>(images.size()),
                  "RetinaNet step: expected one ground truth per image of the batch ("
                      << (outputs.empty() || outputs[0].rank() == 0 ? 0 : outputs[0].dim(0)) << "), got " << images.size());
    check_outputs(outputs, static_cast<std::int64_t>(images.size()));
    const HeadTargets head_targets = targets(images);
    const std::size_t levels = num_levels();
    DetectorStep step;
    step.loss = detection_loss(outputs.subspan(0, levels), outputs.subspan(levels, levels), head_targets, m_config.loss);
    step.output_gradients = step.loss.class_gradients;
    step.output_gradients.insert(step.output_gradients.end(), step.loss.box_gradients.begin(), step.loss.box_gradients.end());
    return step;
}

}  // namespace tessera::detection
