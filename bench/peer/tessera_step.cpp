// Tessera side of the peer benchmark: the U-Net training steps of pytorch_step.py, timed per step.
//
// Usage: tessera_step --case unet2d|unet3d [--precision f32|bf16] [--steps N] [--warmup W] [--profile 1]
//                     [--precision-map 1]
// Prints `flops_per_step=<F>` once, then one `step_ms=<ms>` line per timed step. With --precision-map,
// then one `precision layer=<i> name=<name> channels=<in>to<out> compute=<f32|bf16>` line per convolution
// and transposed convolution in forward order, read from the compiled graph (the type of the layer's
// output, which is the type it computes in: only the output layer writes f32 from bf16 arithmetic, and
// in these U-Nets it is narrower than 16 channels, so f32 anyway); pytorch_step.py prints the same.
#include "core/random.hpp"
#include "networks/models.hpp"
#include "ops/dnnl_support.hpp"
#include "train/trainer.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

using namespace tessera;

int main(int argc, char** argv) {
    std::string case_name;
    int steps = 10, warmup = 3, threads = 2;
    bool profile = false, precision_map = false;
    std::string precision = "f32";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--case")) case_name = argv[i + 1];
        else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--precision")) precision = argv[i + 1];
        else if (!std::strcmp(argv[i], "--profile")) profile = std::atoi(argv[i + 1]) != 0;
        else if (!std::strcmp(argv[i], "--precision-map")) precision_map = std::atoi(argv[i + 1]) != 0;
    }
    networks::UNetConfig unet;
    Shape input;
    if (case_name == "unet2d") {
        unet = {.depth = 4, .base_width = 16, .num_classes = 2};
        input = {4, 1, 256, 256};
    } else if (case_name == "unet3d") {
        unet = {.depth = 3, .base_width = 8, .num_classes = 2};
        input = {1, 1, 64, 64, 64};
    } else {
        std::fprintf(stderr, "tessera_step: --case must be unet2d or unet3d, got '%s'\n", case_name.c_str());
        return 2;
    }
    ops::set_num_threads(threads);
    train::TrainerConfig config;
    config.optimizer = {.kind = train::OptimizerKind::Sgd, .momentum = 0.9};
    config.schedule.kind = train::ScheduleKind::Constant;
    config.schedule.learning_rate = 0.01;
    if (precision == "bf16") {
        config.precision = graph::Precision::BF16;
    } else if (precision != "f32") {
        std::fprintf(stderr, "tessera_step: --precision must be f32 or bf16, got '%s'\n", precision.c_str());
        return 2;
    }
    const graph::Graph graph = networks::make_unet(unet, input);
    double flops = 0;
    for (const graph::Node& node : graph.nodes()) {
        const graph::NodeCost cost = graph.cost(node.id);
        flops += cost.forward_flops + cost.backward_flops;
    }
    std::printf("flops_per_step=%.0f\n", flops);
    train::Trainer trainer(graph, config);
    SeededRandom random(1);
    Tensor images = Tensor::empty(input, DType::F32);
    for (std::int64_t i = 0; i < images.num_elements(); ++i) images.data<float>()[i] = static_cast<float>(random.normal());
    Shape label_shape{input[0]};
    label_shape.insert(label_shape.end(), input.begin() + 2, input.end());
    Tensor labels = Tensor::empty(label_shape, DType::I32);
    for (std::int64_t i = 0; i < labels.num_elements(); ++i) labels.data<std::int32_t>()[i] = random.uniform() > 0.5;
    for (int step = 0; step < warmup + steps; ++step) {
        const auto start = std::chrono::steady_clock::now();
        trainer.train_step(images, labels);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        if (step >= warmup) std::printf("step_ms=%.3f\n", ms);
        std::fflush(stdout);
    }
    if (profile) {  // the last step, node by node: where the time goes
        const auto timings = trainer.executor().timings();
        for (const graph::Node& node : graph.nodes()) {
            const graph::NodeCost cost = graph.cost(node.id);
            const auto& t = timings[static_cast<std::size_t>(node.id)];
            std::printf("%-22s %-15s fwd %7.2f ms %6.1f GFLOP/s   bwd %7.2f ms %6.1f GFLOP/s\n", node.name.c_str(),
                        std::string(graph::op_name(node.kind)).c_str(), t.forward_seconds * 1e3,
                        t.forward_seconds > 0 ? cost.forward_flops / t.forward_seconds / 1e9 : 0.0,
                        t.backward_seconds * 1e3,
                        t.backward_seconds > 0 ? cost.backward_flops / t.backward_seconds / 1e9 : 0.0);
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
