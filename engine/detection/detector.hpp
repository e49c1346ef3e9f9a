// What a RetinaNet training step does between the forward and the backward pass: the anchors of the
// input size (made once), each image's targets from its padded ground truth, the loss, and the gradient
// of every head output. Outputs come in make_retinanet's order (networks/retinanet.hpp): the class
// logits of levels min_level..max_level, then the box codes of the same levels.
//
//   Detector detector({.labeler = {.num_classes = 4}}, /*image_height*/ 512, /*image_width*/ 512);
//   std::vector<Tensor> outputs = executor.outputs();                  // 2 × levels tensors
//   DetectorStep step = detector.loss_and_gradients(outputs, ground_truth);   // one PaddedGroundTruth per image
//   executor.backward(step.output_gradients);                          // same order as outputs
#pragma once

#include "detection/anchor_labeler.hpp"
#include "detection/anchors.hpp"
#include "detection/detection_loss.hpp"

#include <span>
#include <vector>

namespace tessera::detection {

struct DetectorConfig {
    AnchorOptions anchors;     // levels 3..7, 3 scales × 3 aspect ratios
    LabelerOptions labeler;    // num_classes, matcher, box coder
    DetectionLossOptions loss;
};

struct DetectorStep {
    DetectionLossResult loss;
    std::vector<Tensor> output_gradients;  // d loss / d output, in the outputs' order
};

class Detector {
public:
    Detector(DetectorConfig config, std::int64_t image_height, std::int64_t image_width);

    const DetectorConfig& config() const { return m_config; }
    const AnchorSet& anchors() const { return m_anchors; }
    std::size_t num_levels() const { return m_anchors.levels.size(); }

    // The targets of a batch of whole images, in the heads' layout.
    HeadTargets targets(std::span<const PaddedGroundTruth> images) const;
    // outputs: 2 × num_levels() tensors, class levels then box levels, of a batch of images.size().
    DetectorStep loss_and_gradients(std::span<const Tensor> outputs, std::span<const PaddedGroundTruth> images) const;
    // Throws unless outputs fit the anchors: [N, A·K, H_l, W_l] and [N, A·4, H_l, W_l] per level.
    void check_outputs(std::span<const Tensor> outputs, std::int64_t batch) const;

private:
    DetectorConfig m_config;
    AnchorSet m_anchors;
};

}  // namespace tessera::detection
