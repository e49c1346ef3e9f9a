// RetinaNet's loss: values against the definitions computed here in double, gradients against central
// differences, and the tile contract (any split of the cells gives the whole batch's value and gradient).
#include "detection/detection_loss.hpp"
#include "reference/gradient_check.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace tessera::detection {
namespace {

constexpr std::int64_t kAnchors = 2, kClasses = 3;

// Two levels of a batch of 2: 4×6 and 2×3 cells, A = 2 anchors, K = 3 classes. Every third anchor is a
// positive of class (cell + anchor) % K, every fifth of the others ignored.
struct Batch {
    std::vector<Tensor> class_outputs, box_outputs;
    HeadTargets targets;
};

Batch make_batch(std::uint64_t seed) {
    Batch batch;
    const std::vector<std::pair<std::int64_t, std::int64_t>> sizes = {{4, 6}, {2, 3}};
    std::int64_t anchor_counter = 0;
    for (std::size_t level = 0; level < sizes.size(); ++level) {
        const auto [height, width] = sizes[level];
        const Shape class_shape{2, kAnchors * kClasses, height, width}, box_shape{2, kAnchors * 4, height, width};
        const Shape anchor_shape{2, kAnchors, height, width};  // the weights: one per anchor
        batch.class_outputs.push_back(reference::random_uniform(class_shape, seed + level, -4.0, 2.0));
        batch.box_outputs.push_back(reference::random_uniform(box_shape, seed + 10 + level, -0.3, 0.3));
        LevelTargets target{Tensor::zeros(class_shape, DType::F32), Tensor::zeros(anchor_shape, DType::F32),
                            reference::random_uniform(box_shape, seed + 20 + level, -0.3, 0.3), Tensor::zeros(anchor_shape, DType::F32)};
        for (std::int64_t n = 0; n < 2; ++n) {
            for (std::int64_t y = 0; y < height; ++y) {
                for (std::int64_t x = 0; x < width; ++x) {
                    for (std::int64_t a = 0; a < kAnchors; ++a, ++anchor_counter) {
                        const bool positive = anchor_counter % 3 == 0;
                        const bool ignored = !positive && anchor_counter % 5 == 0;
                        const std::int64_t anchor_offset = ((n * kAnchors + a) * height + y) * width + x;
                        target.class_weights.data<float>()[anchor_offset] = ignored ? 0.0f : 1.0f;
                        target.box_weights.data<float>()[anchor_offset] = positive ? 1.0f : 0.0f;
                        for (std::int64_t k = 0; k < kClasses; ++k) {
                            const std::int64_t channel = a * kClasses + k;
                            const std::int64_t offset = ((n * kAnchors * kClasses + channel) * height + y) * width + x;
                            target.class_targets.data<float>()[offset] = positive && k == (y * width + x + a) % kClasses ? 1.0f : 0.0f;
                        }
                        batch.targets.num_positive += positive;
                    }
                }
            }
        }
        batch.targets.levels.push_back(std::move(target));
    }
    return batch;
}

// The weight of channel entry i of [N, A·C, H, W] from the per-anchor weights [N, A, H, W].
float weight_of(const Tensor& weights, std::int64_t channels_per_anchor, std::int64_t i) {
    const std::int64_t plane = weights.dim(2) * weights.dim(3);
    const std::int64_t channel_block = i / plane;  // n · A·C + a·C + c
    return weights.data<float>()[(channel_block / channels_per_anchor) * plane + i % plane];
}

// The definitions, in double: focal −α_t (1 − p_t)^γ log p_t, huber 0.5x² or δ(|x| − δ/2).
double expected_value(const Batch& batch, const DetectionLossOptions& options) {
    double focal = 0, huber = 0;
    for (std::size_t level = 0; level < batch.targets.levels.size(); ++level) {
        const LevelTargets& target = batch.targets.levels[level];
        for (std::int64_t i = 0; i < target.class_targets.num_elements(); ++i) {
            const double x = batch.class_outputs[level].data<float>()[i];
            const bool positive = target.class_targets.data<float>()[i] == 1.0f;
            const double p = 1 / (1 + std::exp(-x));
            const double p_t = positive ? p : 1 - p;
            const double alpha_t = positive ? options.focal.alpha : 1 - options.focal.alpha;
            focal += weight_of(target.class_weights, kClasses, i) * -alpha_t * std::pow(1 - p_t, options.focal.gamma) * std::log(p_t);
        }
        for (std::int64_t i = 0; i < target.box_targets.num_elements(); ++i) {
            const double residual = std::abs(double{batch.box_outputs[level].data<float>()[i]} - target.box_targets.data<float>()[i]);
            const double delta = options.box.delta;
            huber += weight_of(target.box_weights, 4, i) * (residual <= delta ? 0.5 * residual * residual : delta * (residual - 0.5 * delta));
        }
    }
    const double positives = std::max<double>(static_cast<double>(batch.targets.num_positive), 1.0);
    return focal / positives + options.box_loss_weight * huber / (4 * positives);
}

TEST(DetectionLoss, ValueIsTheTpuModelsNormalisedSum) {
    const Batch batch = make_batch(1);
    ASSERT_GT(batch.targets.num_positive, 10);
    for (const DetectionLossOptions& options :
         {DetectionLossOptions{}, DetectionLossOptions{.focal = {.alpha = 0.5, .gamma = 0}, .box = {.delta = 1.0}, .box_loss_weight = 1}}) {
        const DetectionLossResult result = detection_loss(batch.class_outputs, batch.box_outputs, batch.targets, options);
        EXPECT_NEAR(result.value, expected_value(batch, options), 1e-5 * expected_value(batch, options));
        EXPECT_NEAR(result.value, result.classification_loss + options.box_loss_weight * result.box_loss, 1e-12);
        EXPECT_EQ(result.num_positive, batch.targets.num_positive);
    }
}

TEST(DetectionLoss, GradientsMatchCentralDifferences) {
    const Batch batch = make_batch(2);
    const DetectionLossResult result = detection_loss(batch.class_outputs, batch.box_outputs, batch.targets);
    std::vector<Tensor> inputs = batch.class_outputs, analytic = result.class_gradients;
    inputs.insert(inputs.end(), batch.box_outputs.begin(), batch.box_outputs.end());
    analytic.insert(analytic.end(), result.box_gradients.begin(), result.box_gradients.end());
    auto value = [&](const std::vector<Tensor>& outputs) {
        const std::span<const Tensor> all(outputs);
        return detection_loss(all.subspan(0, 2), all.subspan(2, 2), batch.targets).value;
    };
    // Focal loss is smooth and Huber is C¹ (its derivative is continuous at |residual| = δ), so central
    // differences hold everywhere.
    const reference::GradientCheckReport report = reference::check_gradients(value, inputs, analytic);
    EXPECT_LE(report.max_relative_error, 1e-2) << report.describe();
}

TEST(DetectionLoss, TilesAddUpToTheWholeBatch) {
    const Batch batch = make_batch(3);
    const DetectionLossResult whole = detection_loss(batch.class_outputs, batch.box_outputs, batch.targets);
    // Three tiles over W (columns 0–1, 2–3, 4–5 of level 0; 0, 1, 2 of level 1), uneven in H for none:
    // each with its cells' outputs and targets and its own count of positives.
    struct Tile {
        std::vector<Tensor> class_outputs, box_outputs;
        HeadTargets targets;
    };
    std::vector<Tile> tiles(3);
    const auto columns = [](const Tensor& t, std::int64_t begin, std::int64_t count) {
        return t.view_box({0, 0, 0, begin}, {t.shape()[0], t.shape()[1], t.shape()[2], count}).contiguous();
    };
    for (std::size_t tile = 0; tile < 3; ++tile) {
        for (std::size_t level = 0; level < 2; ++level) {
            const std::int64_t width = level == 0 ? 2 : 1, begin = static_cast<std::int64_t>(tile) * width;
            const LevelTargets& target = batch.targets.levels[level];
            tiles[tile].class_outputs.push_back(columns(batch.class_outputs[level], begin, width));
            tiles[tile].box_outputs.push_back(columns(batch.box_outputs[level], begin, width));
            tiles[tile].targets.levels.push_back({columns(target.class_targets, begin, width), columns(target.class_weights, begin, width),
                                                  columns(target.box_targets, begin, width), columns(target.box_weights, begin, width)});
            const Tensor positives = columns(target.box_weights, begin, width);
            for (std::int64_t i = 0; i < positives.num_elements(); ++i) tiles[tile].targets.num_positive += positives.data<float>()[i] == 1.0f;
        }
    }
    DetectionLossPartial total;
    for (const Tile& tile : tiles) total += detection_loss_partial(tile.class_outputs, tile.box_outputs, tile.targets);
    EXPECT_EQ(total.num_positive, batch.targets.num_positive);
    for (std::size_t tile = 0; tile < 3; ++tile) {
        const DetectionLossResult part =
            finish_detection_loss(total, tiles[tile].class_outputs, tiles[tile].box_outputs, tiles[tile].targets);
        EXPECT_NEAR(part.value, whole.value, 1e-6 * whole.value);
        for (std::size_t level = 0; level < 2; ++level) {
            const std::int64_t width = level == 0 ? 2 : 1, begin = static_cast<std::int64_t>(tile) * width;
            for (const auto& [mine, all] : {std::pair{&part.class_gradients[level], &whole.class_gradients[level]},
                                            std::pair{&part.box_gradients[level], &whole.box_gradients[level]}}) {
                const Tensor expected = columns(*all, begin, width);
                for (std::int64_t i = 0; i < expected.num_elements(); ++i) {
                    ASSERT_NEAR(mine->data<float>()[i], expected.data<float>()[i], 1e-6 * (1 + std::abs(expected.data<float>()[i])))
                        << "tile " << tile << " level " << level << " element " << i;
                }
            }
        }
    }
}

TEST(DetectionLoss, NoPositivesStaysFiniteAndShapesAreChecked) {
    Batch batch = make_batch(4);
    for (LevelTargets& level : batch.targets.levels) {
        level.class_targets.fill(0.0);
        level.box_weights.fill(0.0);
    }
    batch.targets.num_positive = 0;
    const DetectionLossResult result = detection_loss(batch.class_outputs, batch.box_outputs, batch.targets);
    EXPECT_TRUE(std::isfinite(result.value));
    EXPECT_EQ(result.box_loss, 0.0);
    EXPECT_NEAR(result.value, expected_value(batch, {}), 1e-5 * result.value);
    const std::vector<Tensor> one_level(batch.class_outputs.begin(), batch.class_outputs.begin() + 1);
    EXPECT_THROW(detection_loss(one_level, batch.box_outputs, batch.targets), Error);
    std::vector<Tensor> swapped = {batch.class_outputs[1], batch.class_outputs[0]};
    EXPECT_THROW(detection_loss(swapped, batch.box_outputs, batch.targets), Error);
}

}  // namespace
}  // namespace tessera::detection
