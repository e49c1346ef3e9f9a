// The seeds' models as graphs: shapes, parameter counts against the published architectures, costs,
// and the configuration errors.
#include "detection/anchors.hpp"
#include "graph/executor.hpp"
#include "networks/models.hpp"
#include "networks/retinanet.hpp"

#include <gtest/gtest.h>

#include <cmath>

using namespace tessera;
using namespace tessera::networks;

TEST(Models, ResNetParameterCountsMatchThePublishedArchitectures) {
    // torchvision's counts for 1000 classes (same v1.5 layout: stride on the 3×3, BN scale and shift).
    EXPECT_EQ(make_resnet({.depth = 18}, {1, 3, 224, 224}).parameter_count(), 11689512);
    EXPECT_EQ(make_resnet({.depth = 34}, {1, 3, 224, 224}).parameter_count(), 21797672);
    EXPECT_EQ(make_resnet({.depth = 50}, {1, 3, 224, 224}).parameter_count(), 25557032);
    EXPECT_EQ(make_resnet({.depth = 101}, {1, 3, 224, 224}).parameter_count(), 44549160);
    EXPECT_EQ(make_resnet({.depth = 152}, {1, 3, 224, 224}).parameter_count(), 60192808);
}

TEST(Models, ResNeXtParameterCountsAndFlopsMatchThePublishedArchitectures) {
    // torchvision's counts (its weights' num_params): ResNeXt50-32x4d and ResNeXt101-32x8d.
    const graph::Graph resnext50 = make_resnet({.depth = 50, .groups = 32, .width_per_group = 4}, {1, 3, 224, 224});
    EXPECT_EQ(resnext50.parameter_count(), 25028904);
    EXPECT_EQ(make_resnet({.depth = 101, .groups = 32, .width_per_group = 8}, {1, 3, 224, 224}).parameter_count(), 88791336);
    // The 3×3 layers are grouped: stage 1's is 128 channels in 32 groups of 4 (weights [128, 4, 3, 3]).
    bool found = false;
    for (const graph::Node& node : resnext50.nodes()) {
        if (node.name != "stage1.block0.b.conv") continue;
        found = true;
        EXPECT_EQ(node.conv.groups, 32);
        EXPECT_EQ(resnext50.parameters()[static_cast<std::size_t>(node.parameters[0])].shape, (Shape{128, 4, 3, 3}));
    }
    EXPECT_TRUE(found) << "no node stage1.block0.b.conv";
    // Forward multiply-adds per 224² image: 4.27 G (torchvision lists 4.23 GFLOPS counting multiply-adds
    // of convolutions and the classifier; the rest is batch norm, ReLU and adds, which this counts as well).
    double forward_flops = 0;
    for (const graph::Node& node : resnext50.nodes()) forward_flops += resnext50.cost(node.id).forward_flops;
    EXPECT_NEAR(forward_flops / 2e9, 4.27, 0.06);
    // Grouped blocks are bottlenecks: ResNet-18's basic blocks refuse, naming the depths that work.
    try {
        (void)make_resnet({.depth = 18, .groups = 32, .width_per_group = 4}, {1, 3, 224, 224});
        FAIL() << "a grouped ResNet-18 was built";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("depth 50, 101, 152 or 200"), std::string::npos) << error.what();
    }
    try {
        (void)make_resnet({.depth = 50, .groups = 32}, {1, 3, 224, 224});
        FAIL() << "groups without a width per group were accepted";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("needs width_per_group"), std::string::npos) << error.what();
    }
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

namespace {

const graph::Node& node_named(const graph::Graph& g, const std::string& name) {
    for (const graph::Node& node : g.nodes())
        if (node.name == name) return node;
    ADD_FAILURE() << "no node " << name << " in " << g.name();
    return g.node(g.output_node());
}

// Parameters of a convolution by hand: weights in·out·k^rank, plus a bias per output channel.
std::int64_t conv_parameters(std::int64_t in, std::int64_t out, std::int64_t kernel, int rank, bool bias) {
    std::int64_t taps = 1;
    for (int axis = 0; axis < rank; ++axis) taps *= kernel;
    return in * out * taps + (bias ? out : 0);
}

}  // namespace

TEST(Models, UnpaddedUNetIsRonnebergersFigureOne) {
    const UNetConfig config{.depth = 5, .base_width = 64, .num_classes = 2, .batch_norm = false,
                            .padding = UNetConfig::Padding::Valid};
    const graph::Graph unet = make_unet(config, {1, 1, 572, 572});
    // Ronneberger et al. 2015, Figure 1: every extent along the contracting and the expansive path.
    const std::vector<std::pair<std::string, std::int64_t>> extents{
        {"down0.conv1", 570}, {"down0.conv2", 568}, {"down1.conv1", 282}, {"down1.conv2", 280}, {"down2.conv1", 138},
        {"down2.conv2", 136}, {"down3.conv1", 66},  {"down3.conv2", 64},  {"bottleneck.conv1", 30}, {"bottleneck.conv2", 28},
        {"up3.upconv", 56},   {"up3.crop", 56},     {"up3.conv1", 54},    {"up3.conv2", 52},    {"up2.crop", 104},
        {"up2.conv2", 100},   {"up1.crop", 200},    {"up1.conv2", 196},   {"up0.crop", 392},    {"up0.conv2", 388}};
    for (const auto& [name, extent] : extents) {
        const Shape& shape = node_named(unet, name).output_shape;
        EXPECT_EQ(shape[2], extent) << name;
        EXPECT_EQ(shape[3], extent) << name;
    }
    // The skip is cut from the centre: 568 → 392 drops 88 rows on each side.
    EXPECT_EQ(node_named(unet, "up0.crop").crop_offset, (ops::Extents{88, 88}));
    EXPECT_EQ(unet.node(unet.output_node()).output_shape, (Shape{1, 2, 388, 388}));
    EXPECT_EQ(valid_unet_output_extent(config, 572), 388);
    // By hand: 3×3 convolutions with biases, 2×2 up-convolutions, a 1×1 head.
    const std::int64_t widths[] = {64, 128, 256, 512, 1024};
    std::int64_t expected = 0, channels = 1;
    for (std::int64_t width : widths) {
        expected += conv_parameters(channels, width, 3, 2, true) + conv_parameters(width, width, 3, 2, true);
        channels = width;
    }
    for (int level = 3; level >= 0; --level) {
        const std::int64_t width = widths[level];
        expected += conv_parameters(channels, width, 2, 2, true) + conv_parameters(2 * width, width, 3, 2, true) +
                    conv_parameters(width, width, 3, 2, true);
        channels = width;
    }
    expected += conv_parameters(64, 2, 1, 2, true);
    EXPECT_EQ(unet.parameter_count(), expected);  // 31,030,658

    // An extent the network cannot halve or runs out of is refused with the next usable one.
    try {
        make_unet(config, {1, 1, 570, 572});
        FAIL();
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("try 572"), std::string::npos) << error.what();
    }
    EXPECT_EQ(valid_unet_input(config, 100), 188);  // the smallest input of a depth-5 unpadded U-Net
    EXPECT_EQ(valid_unet_output_extent(config, 187), 0);
    EXPECT_THROW(make_unet({.depth = 3, .downsampling = UNetConfig::Downsampling::StridedConv,
                            .padding = UNetConfig::Padding::Valid},
                           {1, 1, 64, 64}),
                 Error);
}

TEST(Models, NvidiasTwoDUNetUpsamplesByThreeByThreeTransposedConvolutions) {
    const UNetConfig config{.depth = 5, .base_width = 64, .num_classes = 2, .batch_norm = false,
                            .padding = UNetConfig::Padding::Valid, .up_kernel = 3};
    const graph::Graph unet = make_unet(config, {1, 1, 572, 572});
    // (28 − 1)·2 + 3 = 57 rows, TF's 'same' keeps the first 56.
    EXPECT_EQ(node_named(unet, "up3.upconv").output_shape, (Shape{1, 512, 57, 57}));
    EXPECT_EQ(node_named(unet, "up3.upcrop").output_shape, (Shape{1, 512, 56, 56}));
    EXPECT_EQ(node_named(unet, "up3.upcrop").crop_offset, (ops::Extents{0, 0}));
    EXPECT_EQ(unet.node(unet.output_node()).output_shape, (Shape{1, 2, 388, 388}));
    // NVIDIA's layers.py by hand: as Ronneberger's, with 3×3 up-convolutions.
    EXPECT_EQ(unet.parameter_count(), 31030658 + (9 - 4) * (1024 * 512 + 512 * 256 + 256 * 128 + 128 * 64));
    EXPECT_THROW(make_unet({.depth = 3, .up_kernel = 4}, {1, 1, 64, 64}), Error);
}

TEST(Models, StridedDownsamplingIsTheMlperfThreeDUNet) {
    // MLPerf's reference (image_segmentation/pytorch/model): 32-64-128-256-320-320, a stride-2 first
    // convolution per level, norm without conv biases, 2×2×2 up-convolutions with biases, a 1×1×1 head.
    const UNetConfig config{.depth = 6, .base_width = 32, .num_classes = 3, .max_width = 320,
                            .downsampling = UNetConfig::Downsampling::StridedConv};
    const graph::Graph unet = make_unet(config, {1, 1, 128, 128, 128});
    for (const graph::Node& node : unet.nodes()) EXPECT_NE(node.kind, graph::OpKind::Pool) << node.name;
    EXPECT_EQ(node_named(unet, "down0.conv1").conv.stride, (ops::Extents{1, 1, 1}));
    EXPECT_EQ(node_named(unet, "down1.conv1").conv.stride, (ops::Extents{2, 2, 2}));
    EXPECT_EQ(node_named(unet, "down1.conv1").output_shape, (Shape{1, 64, 64, 64, 64}));
    EXPECT_EQ(node_named(unet, "down1.conv2").conv.stride, (ops::Extents{1, 1, 1}));
    EXPECT_EQ(node_named(unet, "bottleneck.conv1").output_shape, (Shape{1, 320, 4, 4, 4}));
    EXPECT_EQ(unet.node(unet.output_node()).output_shape, (Shape{1, 3, 128, 128, 128}));
    const std::int64_t widths[] = {32, 64, 128, 256, 320, 320};
    const auto norm_conv = [](std::int64_t in, std::int64_t out) { return conv_parameters(in, out, 3, 3, false) + 2 * out; };
    std::int64_t expected = 0, channels = 1;
    for (std::int64_t width : widths) {
        expected += norm_conv(channels, width) + norm_conv(width, width);
        channels = width;
    }
    for (int level = 4; level >= 0; --level) {
        const std::int64_t width = widths[level];
        expected += conv_parameters(channels, width, 2, 3, true) + norm_conv(2 * width, width) + norm_conv(width, width);
        channels = width;
    }
    EXPECT_EQ(unet.parameter_count(), expected + conv_parameters(32, 3, 1, 3, true));  // 31,190,243
    // NVIDIA's BraTS model: 4 input channels, 4 classes, a 3×3×3 head.
    UNetConfig brats = config;
    brats.num_classes = 4;
    brats.head_kernel = 3;
    const graph::Graph nvidia = make_unet(brats, {1, 4, 128, 128, 128});
    EXPECT_EQ(nvidia.parameter_count(), expected - norm_conv(1, 32) + norm_conv(4, 32) + conv_parameters(32, 4, 3, 3, true));
    EXPECT_EQ(nvidia.node(nvidia.output_node()).output_shape, (Shape{1, 4, 128, 128, 128}));
    EXPECT_THROW(make_unet({.depth = 3, .head_kernel = 5}, {1, 1, 64, 64}), Error);
}

TEST(Models, SmallModelsRunForwardAndBackward) {
    for (const graph::Graph& g : {make_unet({.depth = 3, .base_width = 4, .num_classes = 3}, {2, 1, 16, 16}),
                                  make_unet({.depth = 2, .base_width = 4, .num_classes = 2, .batch_norm = false}, {1, 1, 8, 8, 8}),
                                  make_unet({.depth = 3, .base_width = 4, .num_classes = 2, .batch_norm = false,
                                             .padding = UNetConfig::Padding::Valid, .up_kernel = 3},
                                            {2, 1, 44, 44}),
                                  make_unet({.depth = 3, .base_width = 4, .num_classes = 3, .downsampling = UNetConfig::Downsampling::StridedConv,
                                             .head_kernel = 3},
                                            {1, 2, 8, 16, 8}),
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

// ---- RetinaNet ---------------------------------------------------------------------------------

namespace {

const graph::Node& retinanet_node(const graph::Graph& g, const std::string& name) {
    for (const graph::Node& node : g.nodes())
        if (node.name == name) return node;
    ADD_FAILURE() << "no node " << name << " in " << g.name();
    return g.node(g.output_node());
}

}  // namespace

TEST(Models, RetinaNetLevelsHaveTheFpnStridesAndHeadWidths) {
    const RetinaNetConfig config;  // R50-FPN, 90 classes, 9 anchors, P3..P7
    for (const Shape& input : {Shape{8, 3, 1280, 1280}, Shape{1, 3, 640, 640}}) {
        const graph::Graph g = make_retinanet(config, input);
        const std::int64_t n = input[0], h = input[2], w = input[3];
        for (int level = 3; level <= 7; ++level) {
            const std::int64_t stride = std::int64_t{1} << level;
            EXPECT_EQ(retinanet_node(g, retinanet_feature_name(config, level)).output_shape, (Shape{n, 256, h / stride, w / stride}))
                << "P" << level << " " << shape_to_string(input);
            EXPECT_EQ(retinanet_node(g, retinanet_output_name("class", level)).output_shape,
                      (Shape{n, 9 * 90, h / stride, w / stride}))
                << "class P" << level;
            EXPECT_EQ(retinanet_node(g, retinanet_output_name("box", level)).output_shape, (Shape{n, 9 * 4, h / stride, w / stride}))
                << "box P" << level;
        }
        // The backbone's C3..C5 feed the laterals; the outputs are every level's class logits, then
        // every level's box codes.
        EXPECT_EQ(g.node(retinanet_node(g, "fpn.lateral3").inputs[0]).output_shape, (Shape{n, 512, h / 8, w / 8}));
        EXPECT_EQ(g.node(retinanet_node(g, "fpn.lateral5").inputs[0]).output_shape, (Shape{n, 2048, h / 32, w / 32}));
        EXPECT_EQ(g.node(g.output_node()).name, "class.l3.out");
        ASSERT_EQ(g.output_nodes().size(), 10u);
        for (int level = 3; level <= 7; ++level) {
            for (const std::string subnet : {"class", "box"}) {
                EXPECT_EQ(g.node(g.output_nodes()[retinanet_output_index(config, subnet, level)]).name,
                          retinanet_output_name(subnet, level));
            }
        }
        EXPECT_EQ(retinanet_node(g, "fpn.upsample4").kind, graph::OpKind::Upsample);
        EXPECT_EQ(retinanet_node(g, "fpn.upsample3").output_shape, (Shape{n, 256, h / 8, w / 8}));
        EXPECT_EQ(retinanet_node(g, "class.l3.conv0").kind, graph::OpKind::Conv);
        EXPECT_EQ(retinanet_node(g, "class.l7.bn3").kind, graph::OpKind::BatchNorm);
        EXPECT_EQ(retinanet_node(g, "box.l5.out").output_shape, (Shape{n, 36, h / 32, w / 32}));
        EXPECT_EQ(retinanet_node(g, "fpn.p7.relu").kind, graph::OpKind::Relu);
        EXPECT_EQ(retinanet_node(g, "fpn.p6").inputs[0], retinanet_node(g, "fpn.p5").id);  // P6 from P5 (the TPU code)
    }
}

TEST(Models, RetinaNetR50ParameterCountIsTheSharedModelsByHand) {
    // ResNet-50 without its classifier (conv weights, BN γ and β):                       23,508,032
    //   (torchvision's 25,557,032 minus the 2048 × 1000 + 1000 dense layer.)
    // FPN, 256 channels, every conv with a bias:
    //   laterals 1×1: (512 + 1024 + 2048) × 256 + 3 × 256                                    918,272
    //   P3, P4, P5 3×3: 3 × (256 · 9 · 256 + 256) = 3 × 590,080                            1,770,240
    //   P6 (on P5), P7 (on ReLU(P6)), 3×3 stride 2: 2 × 590,080                            1,180,160
    //   BN on P3..P7: 5 × 2 × 256                                                              2,560
    //                                                                                  = 3,871,232
    // Heads, convolutions shared across the five levels, BN per level:
    //   class: 4 × 590,080 + (256 · 9 · 810 + 810) = 2,360,320 + 1,867,050                4,227,370
    //   box:   4 × 590,080 + (256 · 9 · 36 + 36)   = 2,360,320 +    82,980                2,443,300
    //   BN: 2 subnets × 4 × 5 levels × 2 × 256                                                20,480
    //                                                                                  = 6,691,150
    // Total: 23,508,032 + 3,871,232 + 6,691,150                                          = 34,070,414
    const RetinaNetConfig config;
    const graph::Graph g = make_retinanet(config, {1, 3, 640, 640});
    EXPECT_EQ(g.parameter_count(), 34070414);
    std::int64_t backbone = 0;
    for (const graph::Node& node : g.nodes()) {
        if (!node.name.starts_with("fpn.") && !node.name.starts_with("class.") && !node.name.starts_with("box.")) {
            backbone += g.cost(node.id).parameter_count;
        }
    }
    EXPECT_EQ(backbone, 23508032);
    // The nodes' costs add up to the same count: a level that shares a head counts none of it.
    std::int64_t by_node = 0;
    for (const graph::Node& node : g.nodes()) by_node += g.cost(node.id).parameter_count;
    EXPECT_EQ(by_node, 34070414);
    // P6 on C5 (the paper, Detectron): 2048 · 9 · 256 + 256 = 4,718,848 instead of 590,080.
    EXPECT_EQ(make_retinanet({.p6_from_c5 = true}, {1, 3, 128, 128}).parameter_count(), 34070414 + 4718848 - 590080);
    // The class outputs start at the prior 0.01.
    graph::Executor executor(make_retinanet({.resnet_depth = 18, .num_classes = 3, .fpn_channels = 8, .head_convs = 1},
                                            {1, 3, 128, 128}));
    executor.initialize_parameters(2);
    // Both biases must exist: a renamed parameter would otherwise skip the checks silently.
    int checked = 0;
    for (const Parameter& p : executor.parameters()) {
        if (p.name == "class.out.bias") {
            EXPECT_NEAR(p.value.data<float>()[0], -std::log(99.0), 1e-5);
            ++checked;
        }
        if (p.name == "box.out.bias") {
            EXPECT_EQ(p.value.data<float>()[0], 0.0f);
            ++checked;
        }
    }
    EXPECT_EQ(checked, 2) << "class.out.bias or box.out.bias is missing from the RetinaNet graph";
}

TEST(Models, RetinaNetSubnetWeightsStartAsTheLiteraturesNormalWithSigmaOneHundredth) {
    // Lin et al. 2017 (and the TPU model, and torchvision): the subnets' convolutions N(0, 0.01²) with zero
    // biases; the backbone and the pyramid stay He-normal, N(0, 2 / fan_in). The sample σ of tens of
    // thousands of weights is within 3 % of its value (its standard error is under 0.5 %).
    graph::Executor executor(make_retinanet({.resnet_depth = 18, .num_classes = 3, .fpn_channels = 64}, {1, 3, 128, 128}));
    executor.initialize_parameters(5);
    const auto sigma_of = [](const Tensor& t) {
        double sum = 0, squares = 0;
        for (std::int64_t i = 0; i < t.num_elements(); ++i) {
            sum += t.data<float>()[i];
            squares += static_cast<double>(t.data<float>()[i]) * t.data<float>()[i];
        }
        const double n = static_cast<double>(t.num_elements());
        return std::sqrt(squares / n - (sum / n) * (sum / n));
    };
    int heads = 0, others = 0;
    for (const Parameter& p : executor.parameters()) {
        const bool head = p.name.starts_with("class.") || p.name.starts_with("box.");
        if (p.name.ends_with(".weight") && head) {
            EXPECT_NEAR(sigma_of(p.value), 0.01, 0.0003) << p.name;
            ++heads;
        } else if (p.name == "fpn.p3.weight") {  // 3×3 over 64 channels: σ = sqrt(2 / 576)
            EXPECT_NEAR(sigma_of(p.value), std::sqrt(2.0 / 576.0), 0.03 * std::sqrt(2.0 / 576.0)) << p.name;
            ++others;
        } else if (p.name == "box.conv0.bias" || p.name == "class.conv0.bias") {
            EXPECT_EQ(sigma_of(p.value), 0.0) << p.name;
        }
    }
    EXPECT_EQ(heads, 2 * 5) << "four convolutions and an output layer per subnet";
    EXPECT_EQ(others, 1);
}

TEST(Models, RetinaNetInTorchvisionsLayoutHasTorchvisionsParameterCounts) {
    // Counted by torchvision 0.14 (Debian's python3-torchvision) with randomly initialised, trainable
    // batch norms: retinanet_resnet50_fpn(weights=None, weights_backbone=None, num_classes=K), and
    // RetinaNet(_resnet_fpn_extractor(resnet18/34(), 5, [2, 3, 4], LastLevelP6P7(256, 256)), 4).
    // Its FPN has no BN after P3..P7 and its heads none after their convolutions: 23,040 parameters
    // fewer than the TPU layout at 90 classes (5 × 2 × 256 + 2 × 4 × 5 × 2 × 256).
    const RetinaNetConfig torchvision{.fpn_batch_norm = false, .head_batch_norm = false};
    EXPECT_EQ(make_retinanet(torchvision, {1, 3, 128, 128}).parameter_count(), 34047374);
    EXPECT_EQ(make_retinanet({.num_classes = 91, .fpn_batch_norm = false, .head_batch_norm = false}, {1, 3, 128, 128})
                  .parameter_count(),
              34068119);
    EXPECT_EQ(34070414 - 34047374, 5 * 2 * 256 + 2 * 4 * 5 * 2 * 256);
    for (const auto& [depth, count] : {std::pair{18, 19243656}, std::pair{34, 29351816}}) {
        const RetinaNetConfig small{.resnet_depth = depth, .num_classes = 4, .fpn_batch_norm = false, .head_batch_norm = false};
        EXPECT_EQ(make_retinanet(small, {1, 3, 128, 128}).parameter_count(), count) << "ResNet-" << depth;
    }
}

TEST(Models, RetinaNetRejectsInputsTheLevelsCannotDivide) {
    try {
        make_retinanet({}, {1, 3, 600, 640});
        FAIL();
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("divisible by 128"), std::string::npos) << error.what();
        EXPECT_NE(std::string(error.what()).find("try 640"), std::string::npos) << error.what();
    }
    EXPECT_THROW(make_retinanet({}, {1, 3, 64, 64, 64}), Error);            // 2D only
    EXPECT_THROW(make_retinanet({.resnet_depth = 42}, {1, 3, 128, 128}), Error);
    EXPECT_THROW(make_retinanet({.min_level = 6}, {1, 3, 128, 128}), Error);
    EXPECT_THROW(make_retinanet({.num_classes = 0}, {1, 3, 128, 128}), Error);
    // max_level 5: no P6, P7; the input need only divide by 32.
    const graph::Graph three_levels = make_retinanet({.max_level = 5}, {1, 3, 96, 96});
    EXPECT_EQ(retinanet_node(three_levels, "box.l5.out").output_shape, (Shape{1, 36, 3, 3}));
}

// torchvision's and MLPerf's RetinaNet at 800×800: C5 at 25, P6 and P7 rounded up to 13 and 7 (NVIDIA's
// MLPerf code warms its fused head kernels for exactly 100, 50, 25, 13, 7), every level where the
// anchors put it; without round-up the same input is refused, naming both ways out.
TEST(Models, RetinaNetCoarseLevelsRoundUpAsTorchvisions) {
    const RetinaNetConfig config{.resnet_depth = 50, .num_classes = 264, .fpn_batch_norm = false, .head_batch_norm = false,
                                 .round_up_coarse_levels = true};
    const graph::Graph g = make_retinanet(config, {1, 3, 800, 800});
    const detection::AnchorSet anchors = detection::make_anchors(800, 800, {});
    ASSERT_EQ(anchors.levels.size(), 5u);
    const std::int64_t expected[] = {100, 50, 25, 13, 7};
    for (std::size_t i = 0; i < anchors.levels.size(); ++i) {
        const int level = anchors.levels[i].level;
        const Shape& box = retinanet_node(g, "box.l" + std::to_string(level) + ".out").output_shape;
        EXPECT_EQ(box[2], expected[i]) << "P" << level;
        EXPECT_EQ(box[2], anchors.levels[i].height) << "P" << level;
        EXPECT_EQ(box[3], anchors.levels[i].width) << "P" << level;
    }
    // An even extent gives what the exact levels give: 1024 is 8 at P7 either way.
    const graph::Graph even = make_retinanet({.resnet_depth = 18, .round_up_coarse_levels = true}, {1, 3, 1024, 1024});
    EXPECT_EQ(retinanet_node(even, "box.l7.out").output_shape[2], 8);
    try {
        make_retinanet({.resnet_depth = 18}, {1, 3, 800, 800});
        FAIL() << "800 was accepted without rounding up";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("try 896"), std::string::npos) << error.what();
        EXPECT_NE(std::string(error.what()).find("divisible by 32 is enough"), std::string::npos) << error.what();
    }
    try {
        make_retinanet({.resnet_depth = 18, .round_up_coarse_levels = true}, {1, 3, 800, 816});
        FAIL() << "816 was accepted: P5 upsampled cannot meet C4";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("try 832"), std::string::npos) << error.what();
    }
}

TEST(Models, SmallRetinaNetRunsForwardAndBackward) {
    const RetinaNetConfig config{.resnet_depth = 18, .num_classes = 3, .num_anchors = 9, .fpn_channels = 16};
    const graph::Graph g = make_retinanet(config, {2, 3, 128, 128});
    graph::Executor executor(g, {.keep_activation_gradients = true});  // C5's gradient is read below
    executor.initialize_parameters(3);
    Tensor input = Tensor::zeros({2, 3, 128, 128}, DType::F32);
    for (std::int64_t i = 0; i < input.num_elements(); ++i) input.data<float>()[i] = static_cast<float>((i * 7) % 13) / 6.0f - 1.0f;
    const Tensor output = executor.forward(input, graph::Mode::Train);
    ASSERT_EQ(output.shape(), (Shape{2, 27, 16, 16}));
    auto all_finite = [](const Tensor& t) {
        for (std::int64_t i = 0; i < t.num_elements(); ++i)
            if (!std::isfinite(t.data<float>()[i])) return false;
        return true;
    };
    EXPECT_TRUE(all_finite(output));
    for (int level = 3; level <= 7; ++level) {
        const Tensor boxes = executor.activation(retinanet_node(g, retinanet_output_name("box", level)).id);
        EXPECT_EQ(boxes.shape(), (Shape{2, 36, 128 >> level, 128 >> level}));
        EXPECT_TRUE(all_finite(boxes)) << "box P" << level;
    }
    std::vector<Tensor> output_gradients;
    for (const Tensor& value : executor.outputs()) output_gradients.push_back(Tensor::full<float>(value.shape(), 0.01f));
    executor.backward(output_gradients);
    double gradient_norm = 0;
    for (const Parameter& p : executor.parameters()) {
        EXPECT_TRUE(all_finite(p.gradient)) << p.name;
        for (std::int64_t i = 0; i < p.gradient.num_elements(); ++i) gradient_norm += std::abs(p.gradient.data<float>()[i]);
    }
    EXPECT_GT(gradient_norm, 0.0);
    // The gradient reaches the backbone through the top-down path.
    const Tensor c5_gradient = executor.activation_gradient(g.node(retinanet_node(g, "fpn.lateral5").id).inputs[0]);
    EXPECT_TRUE(all_finite(c5_gradient));
    double c5_norm = 0;
    for (std::int64_t i = 0; i < c5_gradient.num_elements(); ++i) c5_norm += std::abs(c5_gradient.data<float>()[i]);
    EXPECT_GT(c5_norm, 0.0);
    EXPECT_FALSE(summary(g).empty());
}
