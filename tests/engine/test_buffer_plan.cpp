// Shared gradient memory (graph/buffer_plan.hpp): the packing never puts two buffers live in the same
// backward step on common bytes, and an executor whose gradients share an arena computes bit-identical
// weight gradients to one that gives every gradient its own memory, in f32, bf16 and f16, on graphs with
// skips, concatenations, several outputs and shared heads.
#include "graph/buffer_plan.hpp"
#include "graph/executor.hpp"
#include "networks/models.hpp"
#include "networks/retinanet.hpp"
#include "core/random.hpp"

#include <gtest/gtest.h>

#include <cstring>

using namespace tessera;
using namespace tessera::graph;

namespace {

bool overlap(std::int64_t a_begin, std::int64_t a_bytes, std::int64_t b_begin, std::int64_t b_bytes) {
    return a_begin < b_begin + b_bytes && b_begin < a_begin + a_bytes;
}

void expect_valid(std::span<const BufferLifetime> buffers, const ArenaPlan& plan, std::int64_t alignment) {
    ASSERT_EQ(plan.offsets.size(), buffers.size());
    for (std::size_t i = 0; i < buffers.size(); ++i) {
        EXPECT_EQ(plan.offsets[i] % alignment, 0) << i;
        EXPECT_LE(plan.offsets[i] + buffers[i].bytes, plan.bytes) << i;
        for (std::size_t j = i + 1; j < buffers.size(); ++j) {
            const bool together = buffers[i].first_step <= buffers[j].last_step && buffers[j].first_step <= buffers[i].last_step;
            if (!together || buffers[i].bytes == 0 || buffers[j].bytes == 0) continue;
            EXPECT_FALSE(overlap(plan.offsets[i], buffers[i].bytes, plan.offsets[j], buffers[j].bytes))
                << "buffers " << i << " and " << j << " are live together and share bytes";
        }
    }
}

}  // namespace

TEST(BufferPlan, BuffersLiveApartShareAndBuffersLiveTogetherDoNot) {
    // A chain: each buffer meets only its neighbours in time, so two slots suffice.
    const std::vector<BufferLifetime> chain = {{100, 0, 1}, {100, 1, 2}, {100, 2, 3}, {100, 3, 4}};
    const ArenaPlan plan = plan_arena(chain, 64);
    expect_valid(chain, plan, 64);
    EXPECT_EQ(plan.bytes, 2 * 128);
    EXPECT_EQ(plan.unshared_bytes, 4 * 128);
    EXPECT_EQ(plan.offsets[0], plan.offsets[2]);
    // A long-lived buffer (a skip connection's gradient) keeps its bytes throughout.
    const std::vector<BufferLifetime> skip = {{64, 0, 9}, {64, 0, 1}, {64, 2, 3}, {64, 4, 9}};
    const ArenaPlan with_skip = plan_arena(skip, 64);
    expect_valid(skip, with_skip, 64);
    EXPECT_EQ(with_skip.bytes, 2 * 64);
    // Ends are inclusive: a buffer that dies in the step another is born keeps its own bytes.
    const std::vector<BufferLifetime> touching = {{64, 0, 3}, {64, 3, 5}};
    EXPECT_EQ(plan_arena(touching, 64).bytes, 128);
    EXPECT_THROW(plan_arena(std::vector<BufferLifetime>{{64, 4, 3}}, 64), Error);
}

TEST(BufferPlan, RandomLifetimesNeverCollide) {
    SeededRandom random(11, 0);
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<BufferLifetime> buffers(1 + (random.next() % 40));
        for (BufferLifetime& b : buffers) {
            b.bytes = static_cast<std::int64_t>((random.next() % 5000));
            b.first_step = static_cast<std::int64_t>((random.next() % 30));
            b.last_step = b.first_step + static_cast<std::int64_t>((random.next() % 10));
        }
        const ArenaPlan plan = plan_arena(buffers, 16);
        expect_valid(buffers, plan, 16);
        EXPECT_LE(plan.bytes, plan.unshared_bytes);
    }
}

TEST(BufferPlan, GradientLifetimesFollowTheLastConsumer) {
    Graph graph("lifetimes");
    const int x = graph.input({1, 2, 8, 8});
    const int a = graph.conv(x, 4, ops::ConvAttributes::same(2, 3), "a");
    const int b = graph.relu(a, "b");
    const int c = graph.add(a, b, "c");  // a: consumed by b (node 2) and c (node 3)
    graph.set_output(c);
    const std::vector<BufferLifetime> life = gradient_lifetimes(graph);
    const std::size_t count = graph.nodes().size();
    EXPECT_EQ(life[static_cast<std::size_t>(x)].bytes, 0);
    EXPECT_EQ(life[static_cast<std::size_t>(c)].first_step, 0);  // the output's gradient arrives first
    EXPECT_EQ(life[static_cast<std::size_t>(c)].last_step, backward_step(count, static_cast<std::size_t>(c)));
    EXPECT_EQ(life[static_cast<std::size_t>(a)].first_step, backward_step(count, static_cast<std::size_t>(c)));
    EXPECT_EQ(life[static_cast<std::size_t>(a)].last_step, backward_step(count, static_cast<std::size_t>(a)));
    EXPECT_EQ(life[static_cast<std::size_t>(a)].bytes, 4 * 64 * 4);
}

namespace {

std::vector<Tensor> weight_gradients(const Graph& graph, Precision precision, bool keep, std::int64_t* gradient_bytes) {
    ExecutorOptions options;
    options.precision = precision;
    options.keep_activation_gradients = keep;
    Executor executor(graph, options);
    executor.initialize_parameters(5);
    const Shape& input_shape = graph.node(graph.input_node()).output_shape;
    Tensor input = Tensor::zeros(input_shape, DType::F32);
    SeededRandom random(3, 0);
    for (std::int64_t i = 0; i < input.num_elements(); ++i) input.data<float>()[i] = static_cast<float>(random.normal());
    std::vector<Tensor> gradients;
    for (int step = 0; step < 2; ++step) {  // the second step runs over what the first left in the arena
        executor.forward(input, Mode::Train);
        std::vector<Tensor> output_gradients;
        for (const Tensor& value : executor.outputs()) {
            Tensor g = Tensor::zeros(value.shape(), DType::F32);
            for (std::int64_t i = 0; i < g.num_elements(); ++i) g.data<float>()[i] = static_cast<float>(random.normal() * 0.01);
            output_gradients.push_back(g);
        }
        executor.backward(output_gradients);
    }
    for (const Parameter& p : executor.parameters()) gradients.push_back(p.gradient.clone());
    *gradient_bytes = executor.memory_report().activation_gradients;
    return gradients;
}

void expect_identical_with_less_memory(const Graph& graph, Precision precision) {
    std::int64_t kept_bytes = 0, shared_bytes = 0;
    const std::vector<Tensor> kept = weight_gradients(graph, precision, true, &kept_bytes);
    const std::vector<Tensor> shared = weight_gradients(graph, precision, false, &shared_bytes);
    ASSERT_EQ(kept.size(), shared.size());
    for (std::size_t p = 0; p < kept.size(); ++p) {
        ASSERT_EQ(kept[p].num_elements(), shared[p].num_elements());
        EXPECT_EQ(std::memcmp(kept[p].data<float>(), shared[p].data<float>(), static_cast<std::size_t>(kept[p].num_elements()) * 4), 0)
            << graph.name() << ": parameter " << p << " differs with shared gradient memory";
    }
    EXPECT_LT(shared_bytes, kept_bytes) << graph.name();
    std::printf("%s: activation gradients %.2f MiB kept, %.2f MiB shared\n", graph.name().c_str(), static_cast<double>(kept_bytes) / 1048576.0,
                static_cast<double>(shared_bytes) / 1048576.0);
}

}  // namespace

TEST(BufferPlan, SharedGradientMemoryGivesBitIdenticalWeightGradients) {
    const Graph unet = networks::make_unet({.depth = 3, .base_width = 8, .num_classes = 3}, {2, 1, 32, 32});
    const Graph unet3d = networks::make_unet({.depth = 2, .base_width = 4, .num_classes = 2, .batch_norm = false}, {1, 1, 8, 8, 8});
    const Graph resnet = networks::make_resnet({.depth = 18, .num_classes = 5, .base_width = 8}, {2, 3, 32, 32});
    const Graph retinanet = networks::make_retinanet({.resnet_depth = 18, .num_classes = 3, .num_anchors = 3, .fpn_channels = 8},
                                                     {1, 3, 128, 128});
    for (const Graph* graph : {&unet, &unet3d, &resnet, &retinanet}) expect_identical_with_less_memory(*graph, Precision::F32);
    expect_identical_with_less_memory(unet, Precision::BF16);
    expect_identical_with_less_memory(resnet, Precision::F16);
}

TEST(BufferPlan, ActivationGradientsAreRefusedWhenShared) {
    const Graph unet = networks::make_unet({.depth = 2, .base_width = 4, .num_classes = 2}, {1, 1, 8, 8});
    Executor executor(unet);
    executor.initialize_parameters(1);
    const Tensor output = executor.forward(Tensor::zeros({1, 1, 8, 8}, DType::F32), Mode::Train);
    executor.backward(Tensor::full<float>(output.shape(), 0.1f));
    try {
        executor.activation_gradient(unet.output_node());
        FAIL() << "expected an error";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("keep_activation_gradients"), std::string::npos) << error.what();
    }
}
