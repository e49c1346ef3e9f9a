// The seeds' models as graphs: shapes, parameter counts against the published architectures, costs,
// and the configuration errors.
#include "graph/executor.hpp"
#include "model/models.hpp"

#include <gtest/gtest.h>

using namespace tessera;
using namespace tessera::model;

TEST(Models, ResNetParameterCountsMatchThePublishedArchitectures) {
    // torchvision's counts for 1000 classes (same v1.5 layout: stride on the 3×3, BN scale and shift).
    EXPECT_EQ(make_resnet({.depth = 18}, {1, 3, 224, 224}).parameter_count(), 11689512);
    EXPECT_EQ(make_resnet({.depth = 34}, {1, 3, 224, 224}).parameter_count(), 21797672);
    EXPECT_EQ(make_resnet({.depth = 50}, {1, 3, 224, 224}).parameter_count(), 25557032);
    EXPECT_EQ(make_resnet({.depth = 101}, {1, 3, 224, 224}).parameter_count(), 44549160);
    EXPECT_EQ(make_resnet({.depth = 152}, {1, 3, 224, 224}).parameter_count(), 60192808);
}

TEST(Models, ResNetShapesAndForwardCost) {
    const graph::Graph resnet = make_resnet({.depth = 50, .num_classes = 10}, {2, 3, 224, 224});
    EXPECT_EQ(resnet.node(resnet.output_node()).output_shape, (Shape{2, 10}));
    double flops = 0;
    for (const graph::Node& node : resnet.nodes()) flops += resnet.cost(node.id).forward_flops;
    // ResNet-50 is about 4.1 G multiply-adds per 224² image: 8.2 GFLOP, times 2 images.
    EXPECT_NEAR(flops / 2 / 1e9, 8.2, 0.4);
}

TEST(Models, UNetAtWidth64Depth5IsTheSeedsUNet) {
    const graph::Graph unet = make_unet({.depth = 5, .base_width = 64, .num_classes = 2}, {1, 1, 512, 512});
    std::vector<std::int64_t> widths;
    for (const graph::Node& node : unet.nodes()) {
        if (node.kind == graph::OpKind::Pool) widths.push_back(node.output_shape[1]);
    }
    EXPECT_EQ(widths, (std::vector<std::int64_t>{64, 128, 256, 512}));
    const auto& bottleneck = unet.node(unet.nodes().size() > 0 ? [&] {
        for (const graph::Node& node : unet.nodes())
            if (node.name == "bottleneck.conv2") return node.id;
        return 0;
    }() : 0);
    EXPECT_EQ(bottleneck.output_shape, (Shape{1, 1024, 32, 32}));
    EXPECT_EQ(unet.node(unet.output_node()).output_shape, (Shape{1, 2, 512, 512}));
    // Ronneberger's U-Net with padding, BN and transposed-conv biases: 31.0 M weights.
    EXPECT_NEAR(static_cast<double>(unet.parameter_count()) / 1e6, 31.04, 0.05);
}

TEST(Models, UNet3DAndItsErrors) {
    const graph::Graph unet = make_unet({.depth = 3, .base_width = 8, .num_classes = 2}, {1, 1, 64, 64, 64});
    EXPECT_EQ(unet.node(unet.output_node()).output_shape, (Shape{1, 2, 64, 64, 64}));
    EXPECT_EQ(unet.spatial_rank(), 3);
    try {
        make_unet({.depth = 5}, {1, 1, 100, 96});
        FAIL();
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("divisible by 16"), std::string::npos) << error.what();
        EXPECT_NE(std::string(error.what()).find("try 112"), std::string::npos) << error.what();
    }
    EXPECT_THROW(make_resnet({.depth = 42}, {1, 3, 64, 64}), Error);
}

TEST(Models, SmallModelsRunForwardAndBackward) {
    for (const graph::Graph& g : {make_unet({.depth = 3, .base_width = 4, .num_classes = 3}, {2, 1, 16, 16}),
                                  make_unet({.depth = 2, .base_width = 4, .num_classes = 2, .batch_norm = false}, {1, 1, 8, 8, 8}),
                                  make_resnet({.depth = 18, .num_classes = 5, .base_width = 8}, {2, 3, 32, 32})}) {
        graph::Executor executor(g);
        executor.initialize_parameters(1);
        const Shape input_shape = g.node(g.input_node()).output_shape;
        Tensor input = Tensor::zeros(input_shape, DType::F32);
        for (std::int64_t i = 0; i < input.num_elements(); ++i) input.data<float>()[i] = static_cast<float>(i % 7) - 3.0f;
        const Tensor output = executor.forward(input, graph::Mode::Train);
        EXPECT_EQ(output.shape(), g.node(g.output_node()).output_shape) << g.name();
        executor.backward(Tensor::full<float>(output.shape(), 0.01f));
        double gradient_norm = 0;
        for (const Parameter& p : executor.parameters()) {
            for (std::int64_t i = 0; i < p.gradient.num_elements(); ++i) gradient_norm += std::abs(p.gradient.data<float>()[i]);
        }
        EXPECT_GT(gradient_norm, 0.0) << g.name();
        EXPECT_FALSE(summary(g).empty());
    }
}
