// The cost model's verdicts against the seeds, the step simulation's behaviour, and the planner.
#include "cost/planner.hpp"
#include "networks/models.hpp"
#include "networks/retinanet.hpp"

#include <gtest/gtest.h>

#include <chrono>

using namespace tessera;
using namespace tessera::cost;

namespace {

// The seeds' models: the 3D U-Net of the spatial-partitioning example and RetinaNet with a ResNet-50
// FPN backbone, both trained in bfloat16 with SGD and momentum on TPU v3 cores.
graph::Graph unet3d(const Shape& input) { return networks::make_unet({.depth = 4, .base_width = 32, .num_classes = 3}, input); }
graph::Graph retinanet(const Shape& input) { return networks::make_retinanet({}, input); }

SimulationOptions bf16() {
    SimulationOptions options;
    options.precision = graph::Precision::BF16;
    options.optimizer_slots = 1;
    return options;
}

std::int64_t one_core_memory(const graph::Graph& model) {
    const Shape& input = model.node(model.input_node()).output_shape;
    const std::vector<std::int64_t> ones(input.size() - 2, 1);
    const partition::TilingPlan plan(model, partition::SpatialGrid::even(input, ones));
    return estimate_core_memory(model, plan, 0, graph::Precision::BF16, 1).total();
}

}  // namespace

TEST(MemoryVerdicts, RetinaNetAt1280WithBatch8FitsOneV3CoreAndLargerInputsDoNot) {
    const Device v3 = load_device_preset("tpu_v3");
    const std::int64_t at_1280 = one_core_memory(retinanet({8, 3, 1280, 1280}));
    std::printf("RetinaNet batch 8: 1280² %.2f GiB", static_cast<double>(at_1280) / (1 << 30));
    EXPECT_LE(at_1280, v3.memory_per_core);
    for (std::int64_t size : {1408, 1536, 2048, 2560}) {
        const std::int64_t need = one_core_memory(retinanet({8, 3, size, size}));
        std::printf(", %lld² %.2f GiB", static_cast<long long>(size), static_cast<double>(need) / (1 << 30));
        EXPECT_GT(need, v3.memory_per_core) << size;
    }
    std::printf(" (a v3 core holds 16 GiB)\n");
}

TEST(MemoryVerdicts, A3DUNetOn256CubedDoesNotFitOneV3CoreAndFits16Way) {
    const Device v3 = load_device_preset("tpu_v3");
    const Shape input{1, 1, 256, 256, 256};
    const graph::Graph model = unet3d(input);
    const std::int64_t one = one_core_memory(model);
    EXPECT_GT(one, v3.memory_per_core);
    const partition::TilingPlan plan(model, partition::SpatialGrid::even(input, {2, 2, 4}));
    std::int64_t worst = 0;
    for (std::int64_t core = 0; core < 16; ++core) {
        worst = std::max(worst, estimate_core_memory(model, plan, core, graph::Precision::BF16, 1).total());
    }
    std::printf("3D U-Net 256³: one core %.1f GiB, 16-way %.1f GiB per core\n", static_cast<double>(one) / (1 << 30),
                static_cast<double>(worst) / (1 << 30));
    EXPECT_LE(worst, v3.memory_per_core);
}

TEST(StepSimulation, MoreCoresShortenTheStepAndHalosCostSomething) {
    const CostModel v3(load_device_preset("tpu_v3"));
    const Shape input{1, 1, 128, 128, 128};
    const graph::Graph model = unet3d(input);
    double previous = 1e9;
    for (const std::vector<std::int64_t>& pieces : {std::vector<std::int64_t>{1, 1, 1}, {2, 1, 1}, {2, 2, 1}, {2, 2, 2}}) {
        const partition::TilingPlan plan(model, partition::SpatialGrid::even(input, pieces));
        const StepPrediction step = predict_step(model, plan, 1, v3, bf16());
        EXPECT_GT(step.step_seconds, 0);
        EXPECT_LT(step.step_seconds, previous) << pieces[0] << pieces[1] << pieces[2];
        EXPECT_GT(step.forward_seconds, 0);
        EXPECT_LT(step.forward_seconds, step.step_seconds);
        EXPECT_GT(step.achieved_fraction_of_peak, 0);
        EXPECT_LT(step.achieved_fraction_of_peak, 1);
        if (plan.num_cores() > 1) {
            bool halo = false;
            for (const TimelineSpan& span : step.timeline) halo = halo || span.kind == SpanKind::Halo;
            EXPECT_TRUE(halo);
        }
        previous = step.step_seconds;
    }
}

TEST(StepSimulation, OverlappingTheGradientAllReduceNeverSlowsTheStep) {
    const CostModel v3(load_device_preset("tpu_v3"));
    const Shape input{8, 3, 224, 224};
    const graph::Graph model = networks::make_resnet({.depth = 50, .num_classes = 1000}, input);
    const partition::TilingPlan plan(model, partition::SpatialGrid::even(input, {1, 1}));
    SimulationOptions options = bf16();
    const double serial = predict_step(model, plan, 32, v3, options).step_seconds;
    options.overlap_gradient_all_reduce = true;
    const double overlapped = predict_step(model, plan, 32, v3, options).step_seconds;
    EXPECT_LE(overlapped, serial);
}

TEST(StepSimulation, TheLossReadsEveryOutputOfTheModel) {
    // One trunk and two heads (a detector's classes and boxes): the loss is a pass over both heads'
    // logits, so a second head of the same size adds exactly one more loss pass before backward.
    const CostModel a100(load_device_preset("a100_80gb"));
    const Shape input{4, 16, 64, 64};
    const auto model = [&](int heads) {
        graph::Graph g("heads");
        const int trunk = g.conv(g.input(input), 16, ops::ConvAttributes::same(2, 3), "trunk");
        g.set_output(g.conv(trunk, 32, ops::ConvAttributes::same(2, 1), "head0"));
        if (heads == 2) g.add_output(g.conv(trunk, 32, ops::ConvAttributes::same(2, 1), "head1"));
        return g;
    };
    const graph::Graph one = model(1), two = model(2);
    const StepPrediction one_head = predict_step(one, partition::TilingPlan(one, partition::SpatialGrid::even(input, {1, 1})), 1, a100, {});
    const StepPrediction two_heads = predict_step(two, partition::TilingPlan(two, partition::SpatialGrid::even(input, {1, 1})), 1, a100, {});
    const Device& device = a100.device();
    const double loss_pass = 12.0 * 4 * 32 * 64 * 64 / (device.memory_bandwidth * device.efficiency.memory);
    const double head_forward = a100.layer(two, two.output_nodes()[1], nullptr, {}).forward.seconds;
    EXPECT_NEAR(two_heads.forward_seconds - one_head.forward_seconds, head_forward + loss_pass, 1e-3 * loss_pass);
}

TEST(StepSimulation, FrozenStagesRunNoBackwardAndFrozenBatchNormsNoStatistics) {
    const CostModel a100(load_device_preset("a100_80gb"));
    const Shape input{16, 3, 256, 256};
    const graph::Graph model = networks::make_retinanet({.resnet_depth = 50, .num_classes = 8}, input);
    const partition::TilingPlan plan(model, partition::SpatialGrid::even(input, {1, 1}));
    // The prefixes name real nodes: the stem and the first stage, and batch norms all through the backbone.
    int stem_and_stage1 = 0, backbone_batch_norms = 0;
    for (const graph::Node& node : model.nodes()) {
        if (node.name.rfind("stem.", 0) == 0 || node.name.rfind("stage1.", 0) == 0) ++stem_and_stage1;
        if (node.kind == graph::OpKind::BatchNorm && (node.name.rfind("stem.", 0) == 0 || node.name.rfind("stage", 0) == 0)) {
            ++backbone_batch_norms;
        }
    }
    EXPECT_GE(stem_and_stage1, 3 + 3 * 7);  // stem conv, bn, pool; three bottlenecks of ≥ 7 nodes
    EXPECT_GE(backbone_batch_norms, 53);     // ResNet-50: one per convolution

    SimulationOptions options;
    options.precision = graph::Precision::F16;
    options.record_timeline = false;
    options.fusion = ElementwiseFusion::Chains;
    const StepPrediction trained = predict_step(model, plan, 8, a100, options);
    options.untrained = {"stem.", "stage1."};
    const StepPrediction untrained = predict_step(model, plan, 8, a100, options);
    options.frozen_batch_norm = {"stem.", "stage"};
    const StepPrediction frozen = predict_step(model, plan, 8, a100, options);
    // Fewer backward passes, and fewer gradients to all-reduce; a frozen batch norm saves its
    // statistics' pass each way.
    EXPECT_LT(untrained.step_seconds, trained.step_seconds);
    EXPECT_LT(untrained.flops, trained.flops);
    EXPECT_LT(untrained.gradient_all_reduce_seconds, trained.gradient_all_reduce_seconds);
    EXPECT_LT(frozen.step_seconds, untrained.step_seconds);
    EXPECT_LT(frozen.gradient_all_reduce_seconds, untrained.gradient_all_reduce_seconds);
    // The untrained layers' forward still runs: the forward pass is the same length.
    EXPECT_DOUBLE_EQ(untrained.forward_seconds, trained.forward_seconds);
}

// A frozen batch norm's traffic per framework, counted by hand: fused into the convolution (nothing), one
// pass each way (XLA's chains), or eager PyTorch's `x * scale + bias` — two kernels forward (multiply,
// add: each reads and writes the tensor), the multiply's gradient backward.
TEST(CostModel, FrozenBatchNormCostsWhatEachFrameworkRuns) {
    const Device v100 = load_device_preset("v100");
    const CostModel model(v100);
    graph::Graph g("frozen");
    const int x = g.input({2, 64, 96, 128});
    const int conv = g.conv(x, 64, ops::ConvAttributes::same(2, 3), "conv");
    const int bn = g.batch_norm(conv, {}, "bn");
    g.set_output(bn);
    const std::int64_t tensor_bytes = 4 * 2 * 64 * 96 * 128;  // f32
    Execution execution{.precision = graph::Precision::F32, .frozen_batch_norm = true};

    execution.fusion = ElementwiseFusion::IntoConvolutions;
    LayerCost cost = model.layer(g, bn, nullptr, execution);
    EXPECT_EQ(cost.forward.bytes, 0);
    EXPECT_EQ(cost.backward.bytes, 0);

    execution.fusion = ElementwiseFusion::Chains;
    cost = model.layer(g, bn, nullptr, execution);
    EXPECT_EQ(cost.forward.bytes, 2 * tensor_bytes);
    EXPECT_EQ(cost.backward.bytes, 2 * tensor_bytes);
    const double stream = static_cast<double>(tensor_bytes) / (v100.memory_bandwidth * v100.efficiency.memory);  // one read or write
    EXPECT_NEAR(cost.forward.seconds, 2 * stream, 1e-12);  // inside the chain's kernel: no launch of its own

    execution.fusion = ElementwiseFusion::None;
    cost = model.layer(g, bn, nullptr, execution);
    EXPECT_EQ(cost.forward.bytes, 4 * tensor_bytes);
    EXPECT_EQ(cost.backward.bytes, 2 * tensor_bytes);
    EXPECT_NEAR(cost.forward.seconds, 4 * stream + 2 * v100.kernel_overhead, 1e-12);
    EXPECT_NEAR(cost.backward.seconds, 2 * stream + v100.kernel_overhead, 1e-12);
}

TEST(CostModel, SmallChannelCountsWasteTheMatrixUnits) {
    const CostModel v3(load_device_preset("tpu_v3"));
    graph::Graph g("widths");
    int x = g.input({1, 8, 64, 64});
    const int narrow = g.conv(x, 8, ops::ConvAttributes::same(2, 3), "narrow");
    const int pointwise = g.conv(narrow, 8, ops::ConvAttributes::same(2, 1), "pointwise");
    const int wide = g.conv(g.conv(pointwise, 128, ops::ConvAttributes::same(2, 1), "widen"), 128, ops::ConvAttributes::same(2, 3), "wide");
    g.set_output(wide);
    const LayerCost a = v3.layer(g, narrow, nullptr, graph::Precision::BF16);
    const LayerCost p = v3.layer(g, pointwise, nullptr, graph::Precision::BF16);
    const LayerCost b = v3.layer(g, wide, nullptr, graph::Precision::BF16);
    // An implicit GEMM: the 3×3 window folds into the contracting side (8·9 = 72 of 128 rows), the
    // outputs fill 8 of 128 columns; a 1×1 layer has no window to fold.
    EXPECT_NEAR(a.channel_utilisation, (72.0 / 128) * (8.0 / 128), 1e-12);
    EXPECT_NEAR(p.channel_utilisation, (8.0 / 128) * (8.0 / 128), 1e-12);
    EXPECT_DOUBLE_EQ(b.channel_utilisation, 1.0);
    // 256× the FLOPs, but far less than 256× the time: the narrow layer runs at 1/28 of the unit.
    EXPECT_LT(b.forward.seconds / a.forward.seconds, 20.0);
    // The first layer computes no input gradient: its backward is one product, not two.
    EXPECT_DOUBLE_EQ(a.backward.flops, a.forward.flops);
    EXPECT_DOUBLE_EQ(p.backward.flops, 2 * p.forward.flops);
}

TEST(CostModel, FusionDecidesWhatElementwiseOpsCost) {
    const CostModel a100(load_device_preset("a100_80gb"));
    graph::Graph g("block");
    const int x = g.input({8, 64, 56, 56});
    const int conv = g.conv(x, 64, ops::ConvAttributes::same(2, 3), "conv");
    const int bn = g.batch_norm(conv, ops::BatchNormAttributes{}, "bn");
    const int add = g.add(bn, x, "add");
    const int relu = g.relu(add, "relu");
    g.set_output(relu);
    const std::int64_t tensor_bytes = 8 * 64 * 56 * 56 * 2;  // f16 activations: 2 bytes
    auto cost = [&](int node, ElementwiseFusion fusion) {
        return a100.layer(g, node, nullptr, Execution{.precision = graph::Precision::F16, .tf32 = false, .fusion = fusion});
    };
    // Op by op: a batch norm's statistics and normalising passes (3 tensors forward, 5 backward), an
    // add reads two and writes one, a ReLU reads one and writes one.
    EXPECT_EQ(cost(bn, ElementwiseFusion::None).forward.bytes, 3 * tensor_bytes);
    EXPECT_EQ(cost(bn, ElementwiseFusion::None).backward.bytes, 5 * tensor_bytes);
    EXPECT_EQ(cost(add, ElementwiseFusion::None).forward.bytes, 3 * tensor_bytes);
    EXPECT_EQ(cost(relu, ElementwiseFusion::None).forward.bytes, 2 * tensor_bytes);
    // Chains: the batch norm still makes its passes; the add reads only its second operand; the ReLU is free.
    EXPECT_EQ(cost(bn, ElementwiseFusion::Chains).forward.bytes, 3 * tensor_bytes);
    EXPECT_EQ(cost(add, ElementwiseFusion::Chains).forward.bytes, tensor_bytes);
    EXPECT_EQ(cost(relu, ElementwiseFusion::Chains).forward.seconds, 0);
    // Into the convolutions: only the statistics' reductions remain.
    EXPECT_EQ(cost(bn, ElementwiseFusion::IntoConvolutions).forward.bytes, tensor_bytes);
    EXPECT_EQ(cost(bn, ElementwiseFusion::IntoConvolutions).backward.bytes, 2 * tensor_bytes);
    EXPECT_EQ(cost(relu, ElementwiseFusion::IntoConvolutions).backward.seconds, 0);
    // The convolution is the same under every fusion, and f32 moves twice f16's bytes.
    EXPECT_EQ(cost(conv, ElementwiseFusion::None).forward.bytes, cost(conv, ElementwiseFusion::IntoConvolutions).forward.bytes);
    EXPECT_EQ(a100.layer(g, relu, nullptr, Execution{.precision = graph::Precision::F32, .tf32 = false, .fusion = ElementwiseFusion::None})
                  .forward.bytes,
              4 * tensor_bytes);
    // TF32 runs an f32 convolution 8× faster at A100's peaks (156 vs 19.5 TFLOP/s) where it is compute-bound.
    const LayerCost plain = a100.layer(g, conv, nullptr, Execution{.precision = graph::Precision::F32, .tf32 = false});
    const LayerCost tf32 = a100.layer(g, conv, nullptr, Execution{.precision = graph::Precision::F32, .tf32 = true});
    ASSERT_EQ(plain.forward.bound, Bound::Compute);
    EXPECT_LT(tf32.forward.seconds, plain.forward.seconds / 2);
}


// NVIDIA's MXNet ResNet-50 for MLPerf, as its symbol files build a bottleneck (conv1 emits bn1's sums;
// conv2 and conv3 apply bn1 and bn2 in their main loop with mainloop-fl / dbar-fl, or ScaleBiasAddRelu
// kernels apply them with stats-fl; bn3 and the projection's batch norm, the add and the ReLU are one
// kernel; the stem is a plain convolution with a batch norm of its own). Expected passes written out
// from those files, not from batch_norm_passes.
TEST(CostModel, NormConvolutionResNetsKeepTheResidualEndsBatchNormPasses) {
    const graph::Graph model = networks::make_resnet({.depth = 50, .num_classes = 1000}, {8, 3, 224, 224});
    auto passes = [&](const std::string& name, ElementwiseFusion fusion) {
        for (const graph::Node& node : model.nodes())
            if (node.name == name) {
                const BatchNormPasses p = batch_norm_passes(model, node.id, fusion);
                return std::vector<int>{p.forward, p.forward_statistics, p.backward, p.backward_reductions};
            }
        ADD_FAILURE() << "no node " << name;
        return std::vector<int>{};
    };
    using V = std::vector<int>;
    const ElementwiseFusion statistics = ElementwiseFusion::ConvolutionStatistics, main_loop = ElementwiseFusion::ConvolutionMainLoop;
    // The stem: statistics, normalising read and write; backward as op by op, under both.
    EXPECT_EQ(passes("stem.bn", statistics), (V{3, 1, 5, 2}));
    EXPECT_EQ(passes("stem.bn", main_loop), (V{3, 1, 5, 2}));
    for (const std::string block : {"stage1.block0", "stage2.block0", "stage3.block5", "stage4.block2"}) {
        // stats-fl: every bottleneck batch norm has its sums from its convolution, then a read and a write.
        for (const std::string layer : {".a.bn", ".b.bn", ".c.bn"}) EXPECT_EQ(passes(block + layer, statistics), (V{2, 0, 5, 2})) << block + layer;
        // mainloop-fl: bn1 and bn2 ride in the next convolution; backward only their reductions' reads.
        EXPECT_EQ(passes(block + ".a.bn", main_loop), (V{0, 0, 2, 2})) << block;
        EXPECT_EQ(passes(block + ".b.bn", main_loop), (V{0, 0, 2, 2})) << block;
        EXPECT_EQ(passes(block + ".c.bn", main_loop), (V{2, 0, 5, 2})) << block;
    }
    EXPECT_EQ(passes("stage2.block0.projection.bn", main_loop), (V{2, 0, 5, 2}));
    // The existing fusions are unchanged.
    EXPECT_EQ(passes("stage1.block0.a.bn", ElementwiseFusion::Chains), (V{3, 1, 5, 2}));
    EXPECT_EQ(passes("stage1.block0.a.bn", ElementwiseFusion::IntoConvolutions), (V{1, 1, 2, 2}));

    // In the layer costs: a batch norm applied in the main loop moves nothing forward and launches nothing.
    const CostModel h100(load_device_preset("h100"));
    const Execution execution{.precision = graph::Precision::F16, .tf32 = false, .fusion = main_loop};
    double forward_bytes_main_loop = 0, forward_bytes_chains = 0, forward_bytes_into = 0;
    for (const graph::Node& node : model.nodes()) {
        if (node.kind != graph::OpKind::BatchNorm) continue;
        const LayerCost cost = h100.layer(model, node.id, nullptr, execution);
        if (node.name.ends_with(".a.bn")) {
            EXPECT_EQ(cost.forward.seconds, 0) << node.name;
            EXPECT_EQ(cost.backward.bytes, 2 * 2 * num_elements_of(node.output_shape)) << node.name;
        }
        forward_bytes_main_loop += static_cast<double>(cost.forward.bytes);
        Execution other = execution;
        other.fusion = ElementwiseFusion::Chains;
        forward_bytes_chains += static_cast<double>(h100.layer(model, node.id, nullptr, other).forward.bytes);
        other.fusion = ElementwiseFusion::IntoConvolutions;
        forward_bytes_into += static_cast<double>(h100.layer(model, node.id, nullptr, other).forward.bytes);
    }
    EXPECT_GT(forward_bytes_main_loop, forward_bytes_into);
    EXPECT_LT(forward_bytes_main_loop, forward_bytes_chains);
}
TEST(CostModel, WinogradSpeedsUpOnlyPlainF32TwoDimensionalThreeByThreeStrideOneConvolutions) {
    const Device v100_device = load_device_preset("v100");
    ASSERT_DOUBLE_EQ(v100_device.efficiency.winograd_3x3, 2.25);
    Device direct_device = v100_device;
    direct_device.efficiency.winograd_3x3 = 1.0;
    const CostModel v100(v100_device), direct(direct_device);
    graph::Graph g("winograd");
    const int x = g.input({8, 256, 56, 56});
    const int three = g.conv(x, 256, ops::ConvAttributes::same(2, 3), "three");
    ops::ConvAttributes strided = ops::ConvAttributes::same(2, 3);
    strided.stride = {2, 2};
    strided.pad_end = {0, 0};
    const int stride_two = g.conv(three, 256, strided, "stride_two");
    const int one = g.conv(stride_two, 256, ops::ConvAttributes::same(2, 1), "one");
    g.set_output(one);
    graph::Graph volume("winograd3d");
    const int v = volume.input({2, 64, 32, 32, 32});
    const int three_d = volume.conv(v, 64, ops::ConvAttributes::same(3, 3), "three_d");
    volume.set_output(three_d);

    const auto ratio = [&](const graph::Graph& model, int node, graph::Precision precision) {
        const LayerCost fast = v100.layer(model, node, nullptr, precision);
        const LayerCost slow = direct.layer(model, node, nullptr, precision);
        EXPECT_EQ(slow.forward.bound, Bound::Compute);
        EXPECT_DOUBLE_EQ(fast.forward.flops, slow.forward.flops);  // the FLOPs counted stay the direct ones
        return (slow.forward.seconds - v100_device.kernel_overhead) / (fast.forward.seconds - v100_device.kernel_overhead);
    };
    // Compute-bound 3×3 stride-1 f32 layer: forward 2.25× faster, and backward too.
    EXPECT_NEAR(ratio(g, three, graph::Precision::F32), 2.25, 1e-9);
    EXPECT_LT(v100.layer(g, three, nullptr, graph::Precision::F32).backward.seconds,
              direct.layer(g, three, nullptr, graph::Precision::F32).backward.seconds / 2);
    // Strided, 1×1, 3D, or on the f16 tensor cores: implicit GEMM, no change.
    EXPECT_DOUBLE_EQ(ratio(g, stride_two, graph::Precision::F32), 1.0);
    EXPECT_DOUBLE_EQ(ratio(g, one, graph::Precision::F32), 1.0);
    EXPECT_DOUBLE_EQ(ratio(volume, three_d, graph::Precision::F32), 1.0);
    EXPECT_DOUBLE_EQ(v100.layer(g, three, nullptr, graph::Precision::F16).forward.seconds,
                     direct.layer(g, three, nullptr, graph::Precision::F16).forward.seconds);
    // An A100 with TF32 runs f32 on the tensor cores (no Winograd); with TF32 off, on the CUDA cores (Winograd).
    Device a100_direct_device = load_device_preset("a100_80gb");
    const CostModel a100(a100_direct_device);
    a100_direct_device.efficiency.winograd_3x3 = 1.0;
    const CostModel a100_direct(a100_direct_device);
    const Execution tf32{.precision = graph::Precision::F32, .tf32 = true};
    const Execution plain{.precision = graph::Precision::F32, .tf32 = false};
    EXPECT_DOUBLE_EQ(a100.layer(g, three, nullptr, tf32).forward.seconds, a100_direct.layer(g, three, nullptr, tf32).forward.seconds);
    EXPECT_LT(a100.layer(g, three, nullptr, plain).forward.seconds, a100_direct.layer(g, three, nullptr, plain).forward.seconds / 2);
    // TPUs have no such kernels.
    EXPECT_DOUBLE_EQ(load_device_preset("tpu_v3").efficiency.winograd_3x3, 1.0);
}

TEST(CostModel, ChannelsFirstDataOnTensorCoresPaysForTransposesInAndOut) {
    const CostModel a100(load_device_preset("a100_80gb"));
    graph::Graph g("layout");
    const int x = g.input({8, 64, 56, 56});
    const int first = g.conv(x, 64, ops::ConvAttributes::same(2, 3), "first");
    const int second = g.conv(first, 128, ops::ConvAttributes::same(2, 3), "second");
    g.set_output(second);
    graph::Graph volume("layout3d");
    const int v = volume.input({2, 32, 32, 32, 32});
    const int first_3d = volume.conv(v, 32, ops::ConvAttributes::same(3, 3), "first");
    const int second_3d = volume.conv(first_3d, 32, ops::ConvAttributes::same(3, 3), "second");
    volume.set_output(second_3d);

    // Extra bytes over channels-last for the same layer and precision.
    const auto extra = [&](const graph::Graph& model, int node, graph::Precision precision, bool tf32, ConvLayout layout) {
        const LayerCost last = a100.layer(model, node, nullptr, Execution{.precision = precision, .tf32 = tf32, .conv_layout = ConvLayout::ChannelsLast});
        const LayerCost other = a100.layer(model, node, nullptr, Execution{.precision = precision, .tf32 = tf32, .conv_layout = layout});
        EXPECT_GE(other.forward.seconds, last.forward.seconds);
        return std::pair{other.forward.bytes - last.forward.bytes, other.backward.bytes - last.backward.bytes};
    };
    // f16 NCHW: forward reads and writes the input and the output once more; backward's two calls
    // (input gradient, weight gradient) twice. The first layer has no input gradient: one call.
    const std::int64_t second_tensors = 2 * (8 * 64 * 56 * 56 + 8 * 128 * 56 * 56);  // f16: 2 bytes
    EXPECT_EQ(extra(g, second, graph::Precision::F16, false, ConvLayout::ChannelsFirst), std::pair(2 * second_tensors, 4 * second_tensors));
    const std::int64_t first_tensors = 2 * (8 * 64 * 56 * 56 * 2);
    EXPECT_EQ(extra(g, first, graph::Precision::F16, false, ConvLayout::ChannelsFirst), std::pair(2 * first_tensors, 2 * first_tensors));
    EXPECT_GT(a100.layer(g, second, nullptr, Execution{.precision = graph::Precision::F16, .conv_layout = ConvLayout::ChannelsFirst}).forward.seconds,
              a100.layer(g, second, nullptr, Execution{.precision = graph::Precision::F16}).forward.seconds);
    // TF32 runs on the tensor cores too; plain f32 on the CUDA cores takes NCHW as is.
    EXPECT_EQ(extra(g, second, graph::Precision::F32, true, ConvLayout::ChannelsFirst), std::pair(2 * 2 * second_tensors, 4 * 2 * second_tensors));
    EXPECT_EQ(extra(g, second, graph::Precision::F32, false, ConvLayout::ChannelsFirst), std::pair(std::int64_t{0}, std::int64_t{0}));
    // XLA: NHWC for 2D f16 convolutions only; TF32 and 3D stay channels-first.
    EXPECT_EQ(extra(g, second, graph::Precision::F16, false, ConvLayout::Xla), std::pair(std::int64_t{0}, std::int64_t{0}));
    EXPECT_GT(extra(g, second, graph::Precision::F32, true, ConvLayout::Xla).first, 0);
    EXPECT_GT(extra(volume, second_3d, graph::Precision::F16, false, ConvLayout::Xla).first, 0);
    // A TPU has no such kernels to feed.
    const CostModel v3(load_device_preset("tpu_v3"));
    EXPECT_EQ(v3.layer(g, second, nullptr, Execution{.precision = graph::Precision::BF16, .conv_layout = ConvLayout::ChannelsFirst}).forward.bytes,
              v3.layer(g, second, nullptr, Execution{.precision = graph::Precision::BF16}).forward.bytes);
}

TEST(CostModel, GpuAllReducesUseEveryNvlinkInsideANodeAndTheNetworkBeyondIt) {
    const CostModel a100(load_device_preset("a100_80gb"));
    const Device& d = a100.device();
    const std::int64_t bytes = std::int64_t{100} << 20;
    // Inside a node: the ring runs over all 12 NVLinks of each GPU (2·7/8 of the bytes each way).
    const double nvlink = static_cast<double>(d.links_per_chip) * d.link_bandwidth * d.efficiency.link;
    EXPECT_NEAR(a100.all_reduce_seconds(bytes, 8), 2 * 7 * d.link_latency + 2.0 * 7 / 8 * static_cast<double>(bytes) / nvlink, 1e-12);
    // Eight nodes: one ring per InfiniBand port (25 GB/s per GPU), each crossing the network once per
    // node, so the network leg runs at the node's 8 ports together: slower than NVLink alone, far
    // faster than one port.
    const double node_network = static_cast<double>(d.chips_per_node) * d.network_bandwidth * d.efficiency.link;
    ASSERT_LT(node_network, nvlink);
    EXPECT_NEAR(a100.all_reduce_seconds(bytes, 64), 2 * 63 * d.link_latency + 2.0 * 63 / 64 * static_cast<double>(bytes) / node_network, 1e-12);
    EXPECT_GT(a100.all_reduce_seconds(bytes, 64), a100.all_reduce_seconds(bytes, 8));
    EXPECT_LT(a100.all_reduce_seconds(bytes, 64), 2.0 * 63 / 64 * static_cast<double>(bytes) / (d.network_bandwidth * d.efficiency.link) / 4);
}

namespace {

// The breakdown of a predicted step: five parts, none negative, adding up to the step (to rounding).
void expect_breakdown_adds_up(const StepPrediction& step, const std::string& what) {
    const StepBreakdown& parts = step.breakdown;
    for (double part : {parts.peak_compute, parts.efficiency_loss, parts.op_overhead, parts.imbalance, parts.exposed_communication}) {
        EXPECT_GE(part, 0) << what;
    }
    EXPECT_NEAR(parts.total(), step.step_seconds, 1e-9 * step.step_seconds) << what;
    // The FLOPs at peak, against the fraction of peak the simulation counts from its own tasks.
    EXPECT_NEAR(parts.peak_compute / step.step_seconds, step.achieved_fraction_of_peak, 1e-9) << what;
}

// The verdict of the layout `pieces` (one replica) of `model` on `device`, as the planner gives it.
std::string verdict_of(const graph::Graph& model, const std::vector<std::int64_t>& pieces, const Device& device) {
    PlannerRequest request;
    request.global_input = model.node(model.input_node()).output_shape;
    std::int64_t cores = 1;
    for (std::int64_t p : pieces) cores *= p;
    request.core_budget = cores;
    request.simulation = bf16();
    const std::vector<LayoutPlan> plans =
        plan_layouts([&model](const Shape&) { return model; }, request, CostModel(device));
    for (const LayoutPlan& plan : plans) {
        if (plan.replicas == 1 && plan.pieces == pieces) return plan.verdict;
    }
    ADD_FAILURE() << "the planner did not list the layout";
    return {};
}

}  // namespace

TEST(StepBreakdown, ItsPartsAddUpToTheStepForEveryLayout) {
    const CostModel v3(load_device_preset("tpu_v3"));
    const Shape input{1, 1, 128, 128, 128};
    const graph::Graph model = unet3d(input);
    for (const std::vector<std::int64_t>& pieces : {std::vector<std::int64_t>{1, 1, 1}, {2, 1, 1}, {2, 2, 2}, {1, 1, 8}}) {
        const partition::TilingPlan plan(model, partition::SpatialGrid::even(input, pieces));
        expect_breakdown_adds_up(predict_step(model, plan, 1, v3, bf16()), "U-Net " + std::to_string(plan.num_cores()) + " cores");
    }
    const Shape images{8, 3, 224, 224};
    const graph::Graph resnet = networks::make_resnet({.depth = 50, .num_classes = 1000}, images);
    const partition::TilingPlan whole(resnet, partition::SpatialGrid::even(images, {1, 1}));
    expect_breakdown_adds_up(predict_step(resnet, whole, 32, v3, bf16()), "ResNet-50, 32 replicas");
}

TEST(StepBreakdown, EachOverheadDominatesWhereTheModelSaysItShould) {
    const Device v3 = load_device_preset("tpu_v3");
    const Shape input{1, 1, 64, 64, 64};
    const graph::Graph model = unet3d(input);
    const partition::TilingPlan split(model, partition::SpatialGrid::even(input, {2, 2, 2}));

    // Links a million times slower: the exchanges dominate.
    Device slow_links = v3;
    slow_links.link_bandwidth /= 1e6;
    const StepPrediction waits = predict_step(model, split, 1, CostModel(slow_links), bf16());
    expect_breakdown_adds_up(waits, "slow links");
    EXPECT_GT(waits.breakdown.exposed_communication, 0.5 * waits.step_seconds);
    EXPECT_NE(verdict_of(model, {2, 2, 2}, slow_links).find("comm-bound"), std::string::npos);

    // A millisecond per op: the launches dominate.
    Device slow_launch = v3;
    slow_launch.kernel_overhead = 1e-3;
    const StepPrediction launches = predict_step(model, split, 1, CostModel(slow_launch), bf16());
    expect_breakdown_adds_up(launches, "slow launches");
    EXPECT_GT(launches.breakdown.op_overhead, 0.5 * launches.step_seconds);
    EXPECT_NE(verdict_of(model, {2, 2, 2}, slow_launch).find("per-op overhead"), std::string::npos);

    // One core holds 7/8 of the volume: the others wait for it.
    partition::SpatialGrid lopsided = partition::SpatialGrid::even(input, {2, 1, 1});
    lopsided.boundaries[0] = {0, 56, 64};
    const partition::TilingPlan uneven(model, lopsided);
    const StepPrediction waits_for_one = predict_step(model, uneven, 1, CostModel(v3), bf16());
    expect_breakdown_adds_up(waits_for_one, "lopsided");
    EXPECT_GT(waits_for_one.breakdown.imbalance, 0.25 * waits_for_one.step_seconds);

    // The unmodified device on this U-Net (32 channels, a 1-channel first layer, 128-wide matrix units).
    const std::string verdict = verdict_of(model, {2, 2, 2}, v3);
    EXPECT_NE(verdict.find("compute units underused"), std::string::npos) << verdict;
    EXPECT_NE(verdict.find("of the step: peak compute"), std::string::npos) << verdict;
}

TEST(Planner, RanksThe3DUNetLayoutsAndExplainsThem) {
    const CostModel v3(load_device_preset("tpu_v3"));
    PlannerRequest request;
    request.global_input = {1, 1, 256, 256, 256};
    request.core_budget = 16;
    request.simulation = bf16();
    const auto plans = plan_layouts(unet3d, request, v3);
    ASSERT_FALSE(plans.empty());
    EXPECT_TRUE(plans.front().valid);
    EXPECT_TRUE(plans.front().fits);
    EXPECT_NE(plans.front().verdict.find("fastest"), std::string::npos) << plans.front().verdict;
    for (std::size_t i = 1; i < plans.size(); ++i) {
        if (plans[i].valid && plans[i].fits && plans[i - 1].valid && plans[i - 1].fits) {
            EXPECT_LE(plans[i - 1].step_seconds, plans[i].step_seconds);
        }
        EXPECT_FALSE(plans[i].verdict.empty()) << plans[i].layout;
    }
    // 16 cores over 3 axes: every factorisation is listed.
    std::size_t without_replicas = 0;
    for (const auto& plan : plans) without_replicas += plan.replicas == 1 ? 1 : 0;
    EXPECT_EQ(without_replicas, 15u);
}

TEST(Planner, WeakScalingKeepsEachCoresShareOfTheBatchAndCrossesStrongScalingAtTheBudget) {
    const CostModel v3(load_device_preset("tpu_v3"));
    PlannerRequest request;
    request.global_input = {2, 1, 64, 64, 64};
    request.core_budget = 4;
    request.simulation = bf16();
    EXPECT_EQ(scaling_budgets(4), (std::vector<std::int64_t>{1, 2, 4, 8, 16}));
    EXPECT_EQ(scaling_budgets(1), (std::vector<std::int64_t>{1, 2, 4, 8}));
    // 2 samples on 4 cores: half a sample per core, so 1 core has no whole batch.
    const auto weak = scaling_curve(unet3d, request, v3, scaling_budgets(4), Scaling::Weak);
    ASSERT_EQ(weak.size(), 4u);
    const std::vector<std::int64_t> cores{2, 4, 8, 16}, batches{1, 2, 4, 8};
    for (std::size_t i = 0; i < weak.size(); ++i) {
        EXPECT_EQ(weak[i].cores, cores[i]);
        EXPECT_EQ(weak[i].global_batch, batches[i]);
    }
    const auto strong = scaling_curve(unet3d, request, v3, scaling_budgets(4), Scaling::Strong);
    ASSERT_EQ(strong.size(), 5u);
    for (const ScalingPoint& point : strong) EXPECT_EQ(point.global_batch, 2);
    // At the experiment's own budget both curves plan the same request.
    EXPECT_EQ(strong[2].best.layout, weak[1].best.layout);
    EXPECT_DOUBLE_EQ(strong[2].best.step_seconds, weak[1].best.step_seconds);
}

TEST(Planner, RefusesLayoutsTheRulesForbidWithTheRule) {
    const CostModel v3(load_device_preset("tpu_v3"));
    PlannerRequest request;
    request.global_input = {1, 1, 64, 64, 64};
    request.core_budget = 64;
    request.simulation = bf16();
    const auto plans = plan_layouts(unet3d, request, v3);
    bool refused = false;
    for (const auto& plan : plans) {
        if (!plan.valid) {
            refused = true;
            EXPECT_NE(plan.verdict.find("not possible: "), std::string::npos) << plan.verdict;
        }
    }
    EXPECT_TRUE(refused);  // 64 pieces along one axis of 64 voxels cannot work for a 4-level U-Net
}
