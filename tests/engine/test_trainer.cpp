// Training on one core: a 2D U-Net learns a synthetic segmentation task, a ResNet-18 overfits random
// labels, and the same seed gives the same losses bit for bit.
#include "core/random.hpp"
#include "data/synthetic_shapes.hpp"
#include "networks/models.hpp"
#include "networks/retinanet.hpp"
#include "train/trainer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

using namespace tessera;
using namespace tessera::train;

namespace {

// Bright disks on noise; the label is 1 inside a disk. [N, 1, size, size] and [N, size, size].
std::pair<Tensor, Tensor> disks_batch(std::int64_t batch, std::int64_t size, std::uint64_t seed) {
    SeededRandom random(seed);
    Tensor images = Tensor::empty({batch, 1, size, size}, DType::F32);
    Tensor labels = Tensor::zeros({batch, size, size}, DType::I32);
    float* pixels = images.data<float>();
    std::int32_t* classes = labels.data<std::int32_t>();
    for (std::int64_t n = 0; n < batch; ++n) {
        const int num_disks = 1 + static_cast<int>(random.uniform() * 3);
        std::vector<std::array<double, 3>> disks;
        for (int d = 0; d < num_disks; ++d) {
            disks.push_back({random.uniform() * static_cast<double>(size), random.uniform() * static_cast<double>(size),
                             3.0 + random.uniform() * 5.0});
        }
        for (std::int64_t y = 0; y < size; ++y) {
            for (std::int64_t x = 0; x < size; ++x) {
                bool inside = false;
                for (const auto& [cy, cx, radius] : disks) {
                    inside |= (static_cast<double>(y) - cy) * (static_cast<double>(y) - cy) +
                                  (static_cast<double>(x) - cx) * (static_cast<double>(x) - cx) <=
                              radius * radius;
                }
                const std::int64_t i = (n * size + y) * size + x;
                pixels[i] = static_cast<float>((inside ? 1.0 : 0.0) + 0.35 * random.normal());
                classes[i] = inside ? 1 : 0;
            }
        }
    }
    return {images, labels};
}

}  // namespace

TEST(Trainer, UNet2DLearnsASyntheticSegmentationTask) {
    const auto start = std::chrono::steady_clock::now();
    TrainerConfig config;
    config.optimizer.kind = OptimizerKind::Adam;
    config.schedule.kind = ScheduleKind::Constant;
    config.schedule.learning_rate = 3e-3;
    config.seed = 5;
    Trainer trainer(networks::make_unet({.depth = 3, .base_width = 8, .num_classes = 2}, {8, 1, 32, 32}), config);
    double first_loss = 0, last_loss = 0;
    for (int step = 0; step < 200; ++step) {
        const auto [images, labels] = disks_batch(8, 32, 1000 + static_cast<std::uint64_t>(step));
        const StepResult result = trainer.train_step(images, labels);
        if (step == 0) first_loss = result.loss;
        last_loss = result.loss;
    }
    // Held-out images, never trained on (another seed range), evaluated with the running BN statistics.
    double dice = 0;
    for (int batch = 0; batch < 4; ++batch) {
        const auto [images, labels] = disks_batch(8, 32, 900000 + static_cast<std::uint64_t>(batch));
        dice += trainer.evaluate(images, labels).scores.classes[1].dice / 4;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("U-Net 2D: loss %.3f → %.3f, held-out Dice %.3f, %.1f s\n", first_loss, last_loss, dice, seconds);
    EXPECT_LT(last_loss, first_loss * 0.5);
    EXPECT_GE(dice, 0.9);
}

TEST(Trainer, ResNet18OverfitsRandomLabels) {
    TrainerConfig config;
    config.optimizer.kind = OptimizerKind::Adam;
    config.schedule.kind = ScheduleKind::Constant;
    config.schedule.learning_rate = 1e-3;
    Trainer trainer(networks::make_resnet({.depth = 18, .num_classes = 10}, {8, 3, 32, 32}), config);
    SeededRandom random(3);
    Tensor images = Tensor::empty({8, 3, 32, 32}, DType::F32);
    for (std::int64_t i = 0; i < images.num_elements(); ++i) images.data<float>()[i] = static_cast<float>(random.normal());
    Tensor labels = Tensor::empty({8}, DType::I32);
    for (std::int64_t i = 0; i < 8; ++i) labels.data<std::int32_t>()[i] = static_cast<std::int32_t>(random.next() % 10);
    double accuracy = 0;
    int steps = 0;
    for (; steps < 150 && accuracy < 1.0; ++steps) {
        trainer.train_step(images, labels);
        if (steps % 10 == 9) {
            // Train-mode statistics are what the batch was fitted with; evaluate on the same batch.
            accuracy = loss::segmentation_scores(loss::confusion_matrix_from_logits(
                                                     trainer.executor().forward(images, graph::Mode::Train), labels))
                           .accuracy;
        }
    }
    std::printf("ResNet-18: accuracy %.2f after %d steps\n", accuracy, steps);
    EXPECT_EQ(accuracy, 1.0);
}

TEST(Trainer, RetinaNetLearnsBoxesOfSyntheticShapes) {
    // A small RetinaNet (ResNet-18, 16-channel FPN P3..P5, one conv per head) fits two 64² images of
    // shapes: the first step's loss is the detector's on the same initial weights, and the loss falls.
    const networks::RetinaNetConfig model{.resnet_depth = 18, .num_classes = 4, .num_anchors = 9, .fpn_channels = 16,
                                          .max_level = 5, .head_convs = 1};
    TrainerConfig config;
    config.optimizer.kind = OptimizerKind::Adam;
    config.schedule.kind = ScheduleKind::Constant;
    config.schedule.learning_rate = 2e-3;
    detection::DetectorConfig detector;
    detector.anchors.max_level = 5;
    detector.anchors.anchor_scale = 2.0;  // base sizes 16 (P3) .. 64 (P5) for 12–40 px objects
    detector.labeler.num_classes = 4;
    config.detection = detector;
    const graph::Graph graph = networks::make_retinanet(model, {2, 3, 64, 64});
    Trainer trainer(graph, config);
    Tensor images = Tensor::empty({2, 3, 64, 64}, DType::F32);
    std::vector<detection::PaddedGroundTruth> ground_truth;
    for (std::int64_t n = 0; n < 2; ++n) {
        data::ShapesOptions options;
        options.size = {64, 64};
        options.min_objects = 1;
        options.max_objects = 3;
        options.min_object_size = 12;
        options.max_object_size = 40;
        options.seed = static_cast<std::uint64_t>(n + 1);
        const data::ShapesImage shapes = data::make_shapes_image(options);
        std::copy_n(shapes.image.data<float>(), 3 * 64 * 64, images.data<float>() + n * 3 * 64 * 64);
        ground_truth.push_back(detection::pad_ground_truth(shapes.objects, 8));
    }
    // The first loss, from an executor of the same seed.
    graph::Executor fresh(graph);
    fresh.initialize_parameters(config.seed);
    fresh.forward(images, graph::Mode::Train);
    const detection::DetectorStep expected = trainer.detector().loss_and_gradients(fresh.outputs(), ground_truth);
    ASSERT_GT(expected.loss.num_positive, 0);
    const StepResult first = trainer.train_step(images, ground_truth);
    EXPECT_NEAR(first.loss, expected.loss.value, 1e-5 * expected.loss.value);
    // The shared head convolutions got a gradient ("class.conv0.weight"; the per-level batch norms,
    // "box.l5.bn0.scale", get none where a level has no positive anchor).
    int shared = 0;
    for (const Parameter& p : trainer.executor().parameters()) {
        if ((!p.name.starts_with("class.") && !p.name.starts_with("box.")) || p.name.find(".l") != std::string::npos) continue;
        ++shared;
        double norm = 0;
        for (std::int64_t i = 0; i < p.gradient.num_elements(); ++i) norm += std::abs(p.gradient.data<float>()[i]);
        EXPECT_GT(norm, 0.0) << p.name;
    }
    EXPECT_EQ(shared, 2 * 2 * 2);  // class and box: conv0 and out, weight and bias
    double last = first.loss;
    for (int step = 1; step < 20; ++step) last = trainer.train_step(images, ground_truth).loss;
    std::printf("RetinaNet: loss %.4f -> %.4f after 20 steps\n", first.loss, last);
    EXPECT_LT(last, 0.5 * first.loss);
    // Segmentation steps are refused, and so are ground truths of the wrong count.
    EXPECT_THROW(trainer.train_step(images, Tensor::zeros({2, 64, 64}, DType::I32)), Error);
    EXPECT_THROW(trainer.train_step(images, std::span(ground_truth).subspan(0, 1)), Error);
}

TEST(Trainer, SameSeedGivesBitIdenticalLosses) {
    auto losses = [] {
        TrainerConfig config;
        config.optimizer.kind = OptimizerKind::Sgd;
        config.optimizer.momentum = 0.9;
        config.schedule.kind = ScheduleKind::Constant;
        config.schedule.learning_rate = 0.05;
        config.loss = LossKind::CrossEntropyAndDice;
        Trainer trainer(networks::make_unet({.depth = 2, .base_width = 4, .num_classes = 2}, {2, 1, 16, 16}), config);
        std::vector<double> values;
        for (int step = 0; step < 5; ++step) {
            const auto [images, labels] = disks_batch(2, 16, static_cast<std::uint64_t>(step));
            values.push_back(trainer.train_step(images, labels).loss);
        }
        return values;
    };
    EXPECT_EQ(losses(), losses());
}

TEST(Trainer, UNet2DLearnsInBf16) {
    TrainerConfig config;
    config.optimizer.kind = OptimizerKind::Adam;
    config.schedule.kind = ScheduleKind::Constant;
    config.schedule.learning_rate = 3e-3;
    config.precision = graph::Precision::BF16;
    config.seed = 5;
    Trainer trainer(networks::make_unet({.depth = 3, .base_width = 8, .num_classes = 2}, {8, 1, 32, 32}), config);
    for (int step = 0; step < 200; ++step) {
        const auto [images, labels] = disks_batch(8, 32, 1000 + static_cast<std::uint64_t>(step));
        trainer.train_step(images, labels);
    }
    double dice = 0;
    for (int batch = 0; batch < 2; ++batch) {
        const auto [images, labels] = disks_batch(8, 32, 900000 + static_cast<std::uint64_t>(batch));
        dice += trainer.evaluate(images, labels).scores.classes[1].dice / 2;
    }
    std::printf("U-Net 2D bf16: held-out Dice %.3f\n", dice);
    EXPECT_GE(dice, 0.85);
}

// Emulated half precision: activations and their gradients overflow past 65504 and flush when tiny.
// Dynamic loss scaling skips the steps whose gradients overflowed and halves the scale until they fit.
TEST(Trainer, F16WithDynamicLossScalingSkipsOverflowsAndLearns) {
    TrainerConfig config;
    config.optimizer.kind = OptimizerKind::Adam;
    config.schedule.kind = ScheduleKind::Constant;
    config.schedule.learning_rate = 3e-3;
    config.precision = graph::Precision::F16;
    config.loss_scale.kind = LossScaleKind::Dynamic;
    config.loss_scale.dynamic.initial_scale = 1 << 24;  // far too large: the first steps must overflow
    config.loss_scale.dynamic.growth_interval = 50;
    config.seed = 5;
    Trainer trainer(networks::make_unet({.depth = 3, .base_width = 8, .num_classes = 2}, {8, 1, 32, 32}), config);
    int skipped = 0;
    double previous_scale = 0;
    bool previous_skipped = false;
    for (int step = 0; step < 200; ++step) {
        const auto [images, labels] = disks_batch(8, 32, 1000 + static_cast<std::uint64_t>(step));
        const StepResult result = trainer.train_step(images, labels);
        if (previous_skipped) {
            EXPECT_EQ(result.loss_scale, previous_scale / 2) << "step " << step;
        }
        previous_skipped = !result.applied;
        previous_scale = result.loss_scale;
        if (!result.applied) ++skipped;
    }
    EXPECT_GT(skipped, 0);
    EXPECT_EQ(trainer.loss_scaler().skipped_steps(), skipped);
    double dice = 0;
    for (int batch = 0; batch < 2; ++batch) {
        const auto [images, labels] = disks_batch(8, 32, 900000 + static_cast<std::uint64_t>(batch));
        dice += trainer.evaluate(images, labels).scores.classes[1].dice / 2;
    }
    std::printf("U-Net 2D f16: %d steps skipped, final scale %.0f, held-out Dice %.3f\n", skipped,
                trainer.loss_scaler().scale(), dice);
    EXPECT_GE(dice, 0.85);
}

TEST(Trainer, F16ValuesAreRoundedToHalf) {
    graph::Graph graph("half");
    const int x = graph.input({1, 1, 4, 4});
    graph.set_output(graph.conv(x, 1, ops::ConvAttributes::same(2, 1), "scale"));
    graph::Executor executor(graph, {.precision = graph::Precision::F16});
    executor.initialize_parameters(1);
    executor.parameters()[0].value.fill(1.0);
    Tensor input = Tensor::full<float>({1, 1, 4, 4}, 1.0f + 1.0f / 4096);  // not representable in f16
    input.data<float>()[1] = 70000.0f;                                     // past f16's largest finite
    const Tensor output = executor.forward(input, graph::Mode::Train);
    EXPECT_EQ(output.data<float>()[0], 1.0f);
    EXPECT_TRUE(std::isinf(output.data<float>()[1]));
}
