// Tessera side of the peer benchmark: the U-Net and RetinaNet training steps of pytorch_step.py, timed
// per step.
//
// Usage: tessera_step --case unet2d|unet3d|retinanet50 [--precision f32|bf16] [--steps N] [--warmup W]
//                     [--profile 1] [--precision-map 1] [--peak 1]
// --peak 1 measures the FMA peak on the step's threads right before every timed step (best of 3 bursts of
// ~5 ms, fma_peak's chains) and prints `peak_gflops=<x> fraction_of_peak=<f>` after its `step_ms`, then
// `median_fraction_of_peak=<f> best_step_fraction_of_best_peak=<f>`: the machine's speed drifts within
// seconds, so a step compares with the peak measured beside it, not with one taken minutes apart.
// --profile 1 prints the last step node by node: forward and backward time, GFLOP/s, and which code ran
// the node's forward (oneDNN's primitive name, or rows:avx512 for a row convolution).
// Prints `flops_per_step=<F>` and `parameters=<count>` once, then one `step_ms=<ms>` line per timed step
// (retinanet50: `loss=<value>` per step too). With --precision-map, then one `precision layer=<i>
// name=<name> channels=<in>to<out> compute=<f32|bf16>` line per convolution and transposed convolution
// in forward order, read from the compiled graph (the type of the layer's output, which is the type it
// computes in: only the output layer writes f32 from bf16 arithmetic, and in these U-Nets it is narrower
// than 16 channels, so f32 anyway); pytorch_step.py prints the same.
// retinanet50 (f32 only): RetinaNet ResNet-50 FPN in torchvision's layout (no BN after the FPN nor in the
// heads: 34,047,374 parameters, torchvision's count for 90 classes), 1 image of 640² with the fixed boxes
// of retinanet_objects (pytorch_step.py has the same list), the detector's focal + box loss, SGD momentum.
#include "core/allocator_policy.hpp"
#include "core/random.hpp"
#include "detection/anchor_labeler.hpp"
#include "networks/models.hpp"
#include "networks/retinanet.hpp"
#include "ops/dnnl_support.hpp"
#include "train/trainer.hpp"
#include "fma_chains.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace tessera;

namespace {

// retinanet50's ground truth: 3 objects per image, corners in pixels of the 640² input, 0-based classes
// of 90. pytorch_step.py's RETINANET_OBJECTS is the same list.
std::vector<std::vector<detection::LabeledBox>> retinanet_objects() {
    return {
        {{{40, 60, 200, 220}, 0}, {{300, 120, 520, 280}, 17}, {{150, 380, 330, 600}, 61}},
        {{{20, 20, 120, 140}, 2}, {{260, 240, 600, 600}, 44}, {{420, 40, 610, 180}, 89}},
    };
}

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    tessera::retain_freed_memory();  // as the studio and tessera-cli run
    std::string case_name;
    int steps = 10, warmup = 3, threads = 2;
    bool profile = false, precision_map = false, peak = false;
    std::string precision = "f32";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--case")) case_name = argv[i + 1];
        else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--precision")) precision = argv[i + 1];
        else if (!std::strcmp(argv[i], "--profile")) profile = std::atoi(argv[i + 1]) != 0;
        else if (!std::strcmp(argv[i], "--precision-map")) precision_map = std::atoi(argv[i + 1]) != 0;
        else if (!std::strcmp(argv[i], "--peak")) peak = std::atoi(argv[i + 1]) != 0;
    }
    networks::UNetConfig unet;
    Shape input;
    const bool detection = case_name == "retinanet50";
    // torchvision's retinanet_resnet50_fpn layout with num_classes = 90 on both sides: 90 is COCO's
    // class count, and the sigmoid heads need no background class (torchvision's default 91 only keeps
    // COCO's category ids 1..90 as indices); labels are the same 0-based ids on both sides.
    const networks::RetinaNetConfig retinanet{
        .resnet_depth = 50, .num_classes = 90, .fpn_batch_norm = false, .head_batch_norm = false};
    if (detection) {
        // 1 image: 0.58 TFLOP per step (forward + backward), seconds on an idle 2-core machine and still
        // minutes on a shared one, where 2 images took 3 minutes a step. Batch norm (backbone only) still
        // averages 20²..320² positions of the one image.
        input = {1, 3, 640, 640};
    } else if (case_name == "unet2d") {
        unet = {.depth = 4, .base_width = 16, .num_classes = 2};
        input = {4, 1, 256, 256};
    } else if (case_name == "unet3d") {
        unet = {.depth = 3, .base_width = 8, .num_classes = 2};
        input = {1, 1, 64, 64, 64};
    } else {
        std::fprintf(stderr, "tessera_step: --case must be unet2d, unet3d or retinanet50, got '%s'\n",
                     case_name.c_str());
        return 2;
    }
    ops::set_num_threads(threads);
    train::TrainerConfig config;
    config.optimizer = {.kind = train::OptimizerKind::Sgd, .momentum = 0.9};
    config.schedule.kind = train::ScheduleKind::Constant;
    // retinanet50 at 0.01 diverged (loss 3326, then 5e15, then NaN at step 3): its heads start He-normal,
    // not N(0, 0.01²) as torchvision's, so the first loss is thousands of times larger. 1e-5 on both
    // sides keeps it finite; a step's work does not depend on the rate.
    config.schedule.learning_rate = detection ? 1e-5 : 0.01;
    if (precision == "bf16") {
        config.precision = graph::Precision::BF16;
    } else if (precision != "f32") {
        std::fprintf(stderr, "tessera_step: --precision must be f32 or bf16, got '%s'\n", precision.c_str());
        return 2;
    }
    if (detection && precision != "f32") {
        std::fprintf(stderr, "tessera_step: retinanet50 runs in f32 only, got --precision %s\n", precision.c_str());
        return 2;
    }
    if (detection) {  // default anchors (P3..P7, 9 per cell, sizes 32..813 px as torchvision's) and matcher
        detection::DetectorConfig detector;
        detector.labeler.num_classes = retinanet.num_classes;
        config.detection = detector;
    }
    const graph::Graph graph =
        detection ? networks::make_retinanet(retinanet, input) : networks::make_unet(unet, input);
    double flops = 0;
    for (const graph::Node& node : graph.nodes()) {
        const graph::NodeCost cost = graph.cost(node.id);
        flops += cost.forward_flops + cost.backward_flops;
    }
    std::printf("flops_per_step=%.0f\n", flops);
    std::printf("parameters=%lld\n", static_cast<long long>(graph.parameter_count()));
    train::Trainer trainer(graph, config);
    SeededRandom random(1);
    Tensor images = Tensor::empty(input, DType::F32);
    for (std::int64_t i = 0; i < images.num_elements(); ++i) images.data<float>()[i] = static_cast<float>(random.normal());
    Tensor labels;                                           // segmentation: [N, spatial...] i32
    std::vector<detection::PaddedGroundTruth> ground_truth;  // detection: one per image
    if (detection) {
        const auto objects = retinanet_objects();  // the first input[0] images' lists
        for (std::int64_t n = 0; n < input[0]; ++n) {
            ground_truth.push_back(detection::pad_ground_truth(objects.at(n), /*max_number_of_boxes*/ 8));
        }
    } else {
        Shape label_shape{input[0]};
        label_shape.insert(label_shape.end(), input.begin() + 2, input.end());
        labels = Tensor::empty(label_shape, DType::I32);
        for (std::int64_t i = 0; i < labels.num_elements(); ++i) {
            labels.data<std::int32_t>()[i] = random.uniform() > 0.5;
        }
    }
    if (peak && !__builtin_cpu_supports("avx512f")) {
        std::fprintf(stderr, "tessera_step: --peak measures AVX-512 FMA chains; this CPU has no AVX-512F\n");
        return 2;
    }
    std::vector<double> fractions;
    double best_step_ms = 1e300, best_peak_gflops = 0;
    for (int step = 0; step < warmup + steps; ++step) {
        const double peak_gflops =
            peak && step >= warmup ? bench::best_rate(threads, 2'000'000, bench::k_fma_flops_per_iteration, bench::fma_chains, 3) : 0.0;
        const auto start = std::chrono::steady_clock::now();
        train::StepResult result;
        try {
            result = detection ? trainer.train_step(images, ground_truth) : trainer.train_step(images, labels);
        } catch (const Error& error) {  // e.g. a diverged loss: say so rather than abort
            std::fprintf(stderr, "tessera_step: step %d failed: %s\n", step + 1, error.what());
            return 1;
        }
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        if (detection) std::printf("loss=%.6g\n", result.loss);  // a smoke check that the step trains
        if (step >= warmup) std::printf("step_ms=%.3f\n", ms);
        if (peak && step >= warmup) {
            const double fraction = flops / (ms * 1e-3) / (peak_gflops * 1e9);
            fractions.push_back(fraction);
            best_step_ms = std::min(best_step_ms, ms);
            best_peak_gflops = std::max(best_peak_gflops, peak_gflops);
            std::printf("peak_gflops=%.1f fraction_of_peak=%.3f\n", peak_gflops, fraction);
        }
        std::fflush(stdout);
    }
    if (!fractions.empty()) {
        // Where a burst caught the machine slowed (another tenant on the core), the step beside it may not
        // have been: the best step against the best peak of the run says what the step reaches at full speed.
        std::printf("median_fraction_of_peak=%.3f best_step_fraction_of_best_peak=%.3f\n", median(fractions),
                    flops / (best_step_ms * 1e-3) / (best_peak_gflops * 1e9));
    }
    if (profile) {  // the last step, node by node: where the time goes
        const auto timings = trainer.executor().timings();
        for (const graph::Node& node : graph.nodes()) {
            const graph::NodeCost cost = graph.cost(node.id);
            const auto& t = timings[static_cast<std::size_t>(node.id)];
            std::printf("%-22s %-15s fwd %7.2f ms %6.1f GFLOP/s   bwd %7.2f ms %6.1f GFLOP/s   %s\n", node.name.c_str(),
                        std::string(graph::op_name(node.kind)).c_str(), t.forward_seconds * 1e3,
                        t.forward_seconds > 0 ? cost.forward_flops / t.forward_seconds / 1e9 : 0.0,
                        t.backward_seconds * 1e3,
                        t.backward_seconds > 0 ? cost.backward_flops / t.backward_seconds / 1e9 : 0.0,
                        trainer.executor().implementation(node.id).c_str());
        }
    }
    if (precision_map) {
        int layer = 0;
        for (const graph::Node& node : graph.nodes()) {
            if (node.kind != graph::OpKind::Conv && node.kind != graph::OpKind::ConvTranspose) continue;
            const DType computed = trainer.executor().value_buffer(node.id).dtype;
            std::printf("precision layer=%d name=%s channels=%lldto%lld compute=%s\n", layer++, node.name.c_str(),
                        static_cast<long long>(graph.node(node.inputs[0]).output_shape[1]),
                        static_cast<long long>(node.output_shape[1]), computed == DType::BF16 ? "bf16" : "f32");
        }
    }
    return 0;
}
