// The host step prediction's measured parts: layer profiles, the end-of-step constants calibration
// measures, and the fidelity summaries. Accuracy against measured steps is bm_cost_fidelity's job
// (timing in unit tests would be noise); here each part is checked against arithmetic done by hand.
#include "mesh/fidelity.hpp"
#include "mesh/host_calibration.hpp"
#include "mesh/layer_profile.hpp"
#include "cost/step_simulation.hpp"
#include "networks/models.hpp"
#include "partition/tiling.hpp"

#include <gtest/gtest.h>

#include <cmath>

using namespace tessera;

namespace {

graph::Graph small_unet(const Shape& input) {
    return networks::make_unet({.depth = 2, .base_width = 8, .num_classes = 2, .batch_norm = true}, input);
}

// A host preset with one thread and no barrier or slowdown, so a phase's wall time is the sum of its tasks.
cost::Device hand_made_host() {
    cost::Device host;
    host.id = "host";
    host.kind = "host";
    host.topology = cost::Topology::Host;
    host.peak_flops_f32 = host.peak_flops_bf16 = host.peak_flops_f16 = 1e10;
    host.memory_bandwidth = 1e10;
    host.measured = {{"threads", 1},         {"copy", 10},
                     {"loss", 10},           {"phase_overhead_us", 0},
                     {"parallel_slowdown", 1}, {"gradient_reduce_ns_per_parameter", 1},
                     {"gradient_reduce_ns_per_parameter_core", 0.5}, {"gradient_reduce_ns_per_parameter_replica", 0.25},
                     {"update_ns_per_parameter", 2}, {"gradient_reduce_us_per_tensor", 0}, {"finite_checks_ns_per_parameter", 0}};
    return host;
}

// Every layer of every core (but the input) measured at `forward` and `backward` seconds, its phases
// at the given walls (0: not timed).
std::shared_ptr<cost::MeasuredLayers> uniform_layers(const graph::Graph& model, std::size_t cores, double forward, double backward,
                                                     double forward_wall = 0, double backward_wall = 0) {
    auto layers = std::make_shared<cost::MeasuredLayers>(cores, std::vector<cost::MeasuredLayer>(model.nodes().size()));
    for (auto& core : *layers) {
        for (std::size_t node = 0; node < core.size(); ++node) {
            if (static_cast<int>(node) != model.input_node()) core[node] = {forward, backward, forward_wall, backward_wall};
        }
    }
    return layers;
}

// Options for a host prediction from measured layers (uniform_layers), without a timeline.
cost::SimulationOptions measured_options(const graph::Graph& model, std::size_t cores, double forward, double backward) {
    cost::SimulationOptions options;
    options.record_timeline = false;
    options.measured_layers = uniform_layers(model, cores, forward, backward);
    return options;
}

// The small U-Net on a 2×1 grid, one host thread, hand-made host: its predicted step from measured
// layers, and the layers per core (every node but the input).
struct TwoCoreUNet {
    Shape input{1, 1, 32, 32};
    graph::Graph model = small_unet(input);
    partition::TilingPlan plan{model, partition::SpatialGrid::even(input, {2, 1})};
    cost::CostModel host{hand_made_host()};
    double layers_per_core() const { return static_cast<double>(model.nodes().size() - 1); }
    double step(std::shared_ptr<cost::MeasuredLayers> layers) const {
        cost::SimulationOptions options;
        options.record_timeline = false;
        options.measured_layers = std::move(layers);
        return cost::predict_host_step(model, plan, 1, host, options).step_seconds;
    }
};

}  // namespace

TEST(LayerProfile, EveryComputingLayerOfEveryCoreIsTimed) {
    const Shape input{1, 1, 32, 32};
    const graph::Graph model = small_unet(input);
    const partition::TilingPlan plan(model, partition::SpatialGrid::even(input, {2, 1}));
    const cost::MeasuredLayers layers = mesh::profile_layers(model, plan, {.repeats = 1});
    ASSERT_EQ(layers.size(), 2u);
    for (const auto& core : layers) {
        ASSERT_EQ(core.size(), model.nodes().size());
        for (const graph::Node& node : model.nodes()) {
            if (node.kind != graph::OpKind::Conv && node.kind != graph::OpKind::ConvTranspose) continue;
            EXPECT_GT(core[static_cast<std::size_t>(node.id)].forward_seconds, 0) << node.name;
            EXPECT_GT(core[static_cast<std::size_t>(node.id)].backward_seconds, 0) << node.name;
        }
    }
    EXPECT_EQ(layers[0][static_cast<std::size_t>(model.input_node())].forward_seconds, 0);
}

TEST(LayerProfile, ACoresLayersAreTheMeanOverItsCopiesInEveryReplica) {
    // Two cores per replica, three replicas: tasks 0..5 run cores 0, 1, 0, 1, 0, 1. Task 0 ran while
    // the other threads were idle (fast); its copies did not: the core's time is the mean, not task 0's.
    std::vector<std::vector<cost::MeasuredLayer>> per_task(6, std::vector<cost::MeasuredLayer>(2));
    const double core_forward[2] = {1e-3, 4e-3};
    for (std::size_t task = 0; task < 6; ++task) {
        per_task[task][1] = {.forward_seconds = core_forward[task % 2], .backward_seconds = 2 * core_forward[task % 2]};
    }
    per_task[0][1] = {.forward_seconds = 0.4e-3, .backward_seconds = 0.8e-3};
    const std::vector<std::size_t> task_core{0, 1, 0, 1, 0, 1};
    const cost::MeasuredLayers mean = mesh::mean_over_copies(per_task, task_core, 2);
    ASSERT_EQ(mean.size(), 2u);
    EXPECT_NEAR(mean[0][1].forward_seconds, (0.4e-3 + 2e-3) / 3, 1e-12);
    EXPECT_NEAR(mean[0][1].backward_seconds, (0.8e-3 + 4e-3) / 3, 1e-12);
    EXPECT_NEAR(mean[1][1].forward_seconds, 4e-3, 1e-12);
    EXPECT_EQ(mean[1][0].forward_seconds, 0.0);
    // A core no task ran is an error, not a zero.
    EXPECT_THROW(mesh::mean_over_copies(per_task, {0, 0, 0, 0, 0, 0}, 2), Error);
}

TEST(HostStepPrediction, MeasuredLayerTimesAreAddedPhaseByPhase) {
    // One host thread, no barrier, no slowdown: every layer's measured time lands in the step once per core.
    const TwoCoreUNet unet;
    const double none = unet.step(uniform_layers(unet.model, 2, 0, 0)), some = unet.step(uniform_layers(unet.model, 2, 1e-3, 2e-3));
    EXPECT_NEAR(some - none, 2 * unet.layers_per_core() * 3e-3, 1e-9);  // 2 cores × layers × (1 + 2) ms

    // A table for the wrong number of cores is refused.
    EXPECT_THROW(unet.step(std::make_shared<cost::MeasuredLayers>(3, std::vector<cost::MeasuredLayer>(unet.model.nodes().size()))),
                 Error);
}

TEST(HostStepPrediction, MeasuredPhaseWallsReplaceTheMakespanOfTheirTasks) {
    // Layers at 1 ms forward and 2 ms backward per core: two cores on one thread make 3 ms a layer.
    // Walls of 5 ms and 7 ms, timed by a profile of every task, take their place: 12 ms a layer (a
    // batch norm's thirds and 0.6/0.4 split add up to the same).
    const TwoCoreUNet unet;
    const double none = unet.step(uniform_layers(unet.model, 2, 0, 0));
    const double makespans = unet.step(uniform_layers(unet.model, 2, 1e-3, 2e-3));
    const double walls = unet.step(uniform_layers(unet.model, 2, 1e-3, 2e-3, 5e-3, 7e-3));
    EXPECT_NEAR(makespans - none, unet.layers_per_core() * 2 * 3e-3, 1e-9);  // no walls: the tasks' makespan
    // The global-average-pool's second (empty) phase and the halo copies are the model's either way.
    EXPECT_NEAR(walls - none, unet.layers_per_core() * 12e-3, 1e-9);
}

TEST(LayerProfile, TimesEachLayersPhasesWholeWhenItRunsEveryTask) {
    const Shape input{1, 1, 32, 32};
    const graph::Graph model = small_unet(input);
    const partition::TilingPlan plan(model, partition::SpatialGrid::even(input, {2, 1}));
    // Two replicas of two cores, every task profiled: each layer's walls, the same in every core's entry.
    const cost::MeasuredLayers every = mesh::profile_layers(model, plan, {.repeats = 1, .threads = 2, .tasks = 4});
    for (const graph::Node& node : model.nodes()) {
        if (node.kind != graph::OpKind::Conv && node.kind != graph::OpKind::BatchNorm) continue;
        const auto id = static_cast<std::size_t>(node.id);
        EXPECT_GT(every[0][id].forward_wall_seconds, 0) << node.name;
        EXPECT_GT(every[0][id].backward_wall_seconds, 0) << node.name;
        EXPECT_EQ(every[1][id].forward_wall_seconds, every[0][id].forward_wall_seconds) << node.name;
    }
    // A profile holding fewer tasks than the step runs cannot time its phases: no walls.
    const cost::MeasuredLayers partial = mesh::profile_layers(model, plan, {.repeats = 1, .threads = 2, .tasks = 8, .max_tasks = 2});
    for (const auto& core : partial) {
        for (const cost::MeasuredLayer& layer : core) EXPECT_EQ(layer.forward_wall_seconds, 0);
    }
}

TEST(HostStepPrediction, GradientReductionAndUpdateFollowTheMeasuredConstants) {
    // 2 cores × 3 replicas on one thread: the reduction takes, per tensor, 3 + 1·5 + 2·2 µs and, per
    // parameter, 1 + 0.5·5 + 0.25·2 ns, plus 0.5 ns per parameter of finite checks; the update, once for
    // the process (its cores share the first one's weights), P·2 ns.
    const Shape input{1, 1, 32, 32};
    const graph::Graph model = small_unet(input);
    const partition::TilingPlan plan(model, partition::SpatialGrid::even(input, {2, 1}));
    cost::SimulationOptions options = measured_options(model, 2, 0, 0);
    cost::Device host = hand_made_host();
    host.measured["gradient_reduce_us_per_tensor"] = 3;
    host.measured["gradient_reduce_us_per_tensor_core"] = 1;
    host.measured["gradient_reduce_us_per_tensor_replica"] = 2;
    host.measured["finite_checks_ns_per_parameter"] = 0.5;
    const cost::StepPrediction step = cost::predict_host_step(model, plan, 3, cost::CostModel(host), options);
    const auto parameters = static_cast<double>(model.parameter_count());
    const auto tensors = static_cast<double>(model.parameters().size());
    EXPECT_NEAR(step.gradient_all_reduce_seconds, tensors * 12e-6 + parameters * (1 + 0.5 * 5 + 0.25 * 2 + 0.5) * 1e-9, 1e-12);
    // The checks' and the update's per-tensor share: wall time per tensor, whatever the thread count.
    host.measured["checks_and_update_us_per_tensor"] = 7;
    const cost::StepPrediction with_tensors = cost::predict_host_step(model, plan, 3, cost::CostModel(host), options);
    EXPECT_NEAR(with_tensors.finite_check_seconds - step.finite_check_seconds, tensors * 7e-6, 1e-12);
    EXPECT_NEAR(with_tensors.step_seconds - step.step_seconds, tensors * 7e-6, 1e-12);
    host.measured.erase("checks_and_update_us_per_tensor");
    host.measured["update_ns_per_parameter"] = 4;
    const double slower_update = cost::predict_host_step(model, plan, 3, cost::CostModel(host), options).step_seconds;
    EXPECT_NEAR(slower_update - step.step_seconds, parameters * 2e-9, 1e-12);  // one update, 2 ns more per parameter
}

TEST(HostStepPrediction, PerParameterCostsFollowTheModelsSizeBetweenTheTwoMeasuredSizes) {
    // Calibration times the end of a step on 2.4 M and 15 M parameters (in the caches, and not). A model
    // with the geometric mean of the two sizes gets the mean cost per parameter; smaller models the
    // small size's, larger ones the large size's (no extrapolation).
    const Shape input{1, 1, 32, 32};
    const graph::Graph model = small_unet(input);
    const partition::TilingPlan plan(model, partition::SpatialGrid::even(input, {1, 1}));
    cost::SimulationOptions options = measured_options(model, 1, 0, 0);
    const auto parameters = static_cast<double>(model.parameter_count());
    const auto reduction_with_sizes = [&](double small_size, double large_size) {
        cost::Device host = hand_made_host();
        host.measured["gradient_reduce_ns_per_parameter"] = 1;
        host.measured["gradient_reduce_ns_per_parameter_large"] = 3;
        host.measured["finite_checks_ns_per_parameter"] = 0.5;
        host.measured["finite_checks_ns_per_parameter_large"] = 1.5;
        host.measured["end_of_step_parameters"] = small_size;
        host.measured["end_of_step_parameters_large"] = large_size;
        return cost::predict_host_step(model, plan, 1, cost::CostModel(host), options).gradient_all_reduce_seconds;
    };
    EXPECT_NEAR(reduction_with_sizes(parameters / 4, parameters * 4), parameters * (2 + 1) * 1e-9, 1e-12);  // no per-tensor cost
    EXPECT_NEAR(reduction_with_sizes(parameters * 2, parameters * 8), parameters * (1 + 0.5) * 1e-9, 1e-12);  // smaller: small's
    EXPECT_NEAR(reduction_with_sizes(parameters / 8, parameters / 2), parameters * (3 + 1.5) * 1e-9, 1e-12);  // larger: large's
}

TEST(HostStepPrediction, Bf16ConvolutionsRunAtTheMeasuredRatioWhereTheExecutorComputesInBf16) {
    // A 3×3 convolution of 32 channels, one of 8 (kept f32 by the executor) and the first layer (reads the
    // f32 image): with bf16_ratio 0.5 only the first costs twice its f32 FLOP time in bf16.
    graph::Graph g("bf16");
    const int image = g.input({1, 1, 32, 32});
    const int first = g.conv(image, 32, ops::ConvAttributes::same(2, 3), "first");
    const int wide = g.conv(first, 32, ops::ConvAttributes::same(2, 3), "wide");
    const int narrow = g.conv(wide, 8, ops::ConvAttributes::same(2, 3), "narrow");
    g.set_output(narrow);
    cost::Device host = hand_made_host();
    for (const char* pass : {".fwd", ".bwd"}) {
        for (std::int64_t c : {8, 16, 32}) host.measured["conv2d.k3.c" + std::to_string(c) + pass] = 10;  // GFLOP/s
        for (std::int64_t c : {8, 16, 32}) host.measured["conv2d.first.c" + std::to_string(c) + pass] = 10;
    }
    auto seconds = [&](int id, graph::Precision precision) {
        const cost::LayerCost layer = cost::CostModel(host).layer(g, id, nullptr, precision);
        return std::pair{layer.forward.seconds, layer.backward.seconds};
    };
    host.measured["conv2d.bf16_ratio.fwd"] = 0.5;
    host.measured["conv2d.bf16_ratio.bwd"] = 0.25;
    const auto [wide_f32_fwd, wide_f32_bwd] = seconds(wide, graph::Precision::F32);
    const auto [wide_bf16_fwd, wide_bf16_bwd] = seconds(wide, graph::Precision::BF16);
    ASSERT_GT(wide_f32_fwd, 0);
    EXPECT_NEAR(wide_bf16_fwd / wide_f32_fwd, 2.0, 1e-9);
    EXPECT_NEAR(wide_bf16_bwd / wide_f32_bwd, 4.0, 1e-9);
    EXPECT_EQ(seconds(narrow, graph::Precision::BF16), seconds(narrow, graph::Precision::F32));
    EXPECT_EQ(seconds(first, graph::Precision::BF16), seconds(first, graph::Precision::F32));
    // Without a measured ratio (a preset from before it was measured), bf16 runs at the f32 rate.
    host.measured.erase("conv2d.bf16_ratio.fwd");
    host.measured.erase("conv2d.bf16_ratio.bwd");
    EXPECT_EQ(seconds(wide, graph::Precision::BF16).first, wide_f32_fwd);
}

TEST(HostStepPrediction, NarrowMemoryBoundOpsRunAtTheRateOfTheirLayout) {
    // Batch norms behind the first convolution (1 → 8 channels: oneDNN's own layout), behind an 8 → 8
    // one (channels-last) and behind a 32-channel one (blocked), each priced at its own measured rate;
    // a ReLU after a batch norm keeps the layout of the convolution before both.
    graph::Graph g("layouts");
    int x = g.input({1, 1, 32, 32});
    x = g.conv(x, 8, ops::ConvAttributes::same(2, 3), "first");
    const int behind_first = g.batch_norm(x, {}, "bn_first");
    x = g.conv(behind_first, 8, ops::ConvAttributes::same(2, 3), "narrow");
    const int behind_narrow = g.batch_norm(x, {}, "bn_narrow");
    const int relu_narrow = g.relu(behind_narrow, "relu_narrow");
    x = g.conv(relu_narrow, 32, ops::ConvAttributes::same(2, 3), "wide");
    const int behind_wide = g.batch_norm(x, {}, "bn_wide");
    g.set_output(behind_wide);
    cost::Device host = hand_made_host();
    host.measured["batch_norm.fwd"] = 10;
    host.measured["batch_norm.narrow_any.fwd"] = 1;
    host.measured["batch_norm.narrow_cl.fwd"] = 2;
    host.measured["relu.fwd"] = 10;
    host.measured["relu.narrow_cl.fwd"] = 5;
    const cost::CostModel model(host);
    const auto forward = [&](int id) { return model.layer(g, id, nullptr, graph::Precision::F32).forward; };
    for (const auto& [id, rate] : std::vector<std::pair<int, double>>{{behind_first, 1}, {behind_narrow, 2}, {relu_narrow, 5}, {behind_wide, 10}}) {
        const cost::PassCost pass = forward(id);
        EXPECT_NEAR(pass.seconds, static_cast<double>(pass.bytes) / (rate * 1e9), 1e-12) << g.node(id).name;
    }
    // A preset from before the narrow rates were measured prices every layout at the one rate.
    host.measured.erase("batch_norm.narrow_any.fwd");
    const cost::PassCost old = cost::CostModel(host).layer(g, behind_first, nullptr, graph::Precision::F32).forward;
    EXPECT_NEAR(old.seconds, static_cast<double>(old.bytes) / 10e9, 1e-12);
}

TEST(HostStepPrediction, MemoryBoundOpsBeyondTheL2RunAtTheRatesOfTheirShares) {
    // Below the smaller calibrated size the one rate; above it, the share of the bytes that fits in
    // L2 (2 MB here) at the in-L2 rate and the rest at the beyond-L2 rate.
    cost::Device host = hand_made_host();
    host.measured["batch_norm.fwd"] = 20;
    host.measured["batch_norm.fwd_l2"] = 40;
    host.measured["batch_norm.fwd_beyond_l2"] = 10;
    host.measured["batch_norm.fwd_l2_from_bytes"] = 3e6;
    host.measured["l2_cache_bytes"] = 2e6;
    const auto forward = [&](const cost::Device& device, std::int64_t extent) {
        graph::Graph g("norm");
        const int norm = g.batch_norm(g.input({1, 32, extent, extent}), {}, "bn");
        g.set_output(norm);
        return cost::CostModel(device).layer(g, norm, nullptr, graph::Precision::F32).forward;
    };
    const cost::PassCost small = forward(host, 64);  // 0.5 MB a tensor
    ASSERT_LT(small.bytes, 3e6);
    EXPECT_NEAR(small.seconds, static_cast<double>(small.bytes) / 20e9, 1e-12);
    const cost::PassCost large = forward(host, 512);  // 33.5 MB a tensor
    const double in_l2 = 2e6 / static_cast<double>(large.bytes);
    EXPECT_NEAR(large.seconds, static_cast<double>(large.bytes) * (in_l2 / 40e9 + (1 - in_l2) / 10e9), 1e-9);
    EXPECT_GT(large.seconds, static_cast<double>(large.bytes) / 20e9);  // slower than the one rate says
    // A preset from before the beyond-L2 rates were measured prices every size at the one rate.
    host.measured.erase("batch_norm.fwd_beyond_l2");
    const cost::PassCost old = forward(host, 512);
    EXPECT_NEAR(old.seconds, static_cast<double>(old.bytes) / 20e9, 1e-9);
}

TEST(HostCalibration, MeasuresTheEndOfAStepAndItsOwnNoise) {
    const cost::Device host = mesh::calibrate_host({.threads = 2, .repeats = 2, .quick = true});
    // Differences of measured times may come out at zero on a noisy machine, never below.
    for (const char* key : {"gradient_reduce_us_per_tensor", "gradient_reduce_us_per_tensor_core", "gradient_reduce_us_per_tensor_replica",
                            "gradient_reduce_ns_per_parameter", "gradient_reduce_ns_per_parameter_core",
                            "gradient_reduce_ns_per_parameter_replica", "finite_checks_ns_per_parameter", "update_ns_per_parameter",
                            "checks_and_update_us_per_tensor",
                            "phase_overhead_us", "noise_percent", "conv2d.bf16_ratio.fwd", "conv2d.bf16_ratio.bwd", "conv3d.bf16_ratio.fwd",
                            "conv3d.bf16_ratio.bwd"}) {
        ASSERT_TRUE(host.measured.count(key)) << key;
        EXPECT_TRUE(std::isfinite(host.measured.at(key))) << key;
        EXPECT_GE(host.measured.at(key), 0) << key;
    }
    // Timed inside the mesh's step on 2.4 M parameters: far above the few tensors' per-tensor share.
    EXPECT_GT(host.measured.at("update_ns_per_parameter"), 0);
    EXPECT_GT(host.measured.at("finite_checks_ns_per_parameter"), 0);
    // The memory-bound ops' rates beyond L2 need this CPU's L2 size (cpuid through sysconf, or sysfs).
    ASSERT_TRUE(host.measured.count("l2_cache_bytes"));
    EXPECT_GT(host.measured.at("l2_cache_bytes"), 0);
}

TEST(Fidelity, SummaryOfErrors) {
    const mesh::FidelitySummary summary = mesh::summarize_errors({-10, 5, 20, -30});
    EXPECT_EQ(summary.cases, 4u);
    EXPECT_DOUBLE_EQ(summary.median_abs_error_percent, 15);  // |errors| 5 10 20 30
    EXPECT_EQ(summary.within_15_percent, 2u);
    EXPECT_DOUBLE_EQ(summary.bias_percent, -3.75);
    EXPECT_NEAR(summary.rms_error_percent, std::sqrt((100.0 + 25 + 400 + 900) / 4), 1e-12);
    EXPECT_EQ(mesh::summarize_errors({}).cases, 0u);
}

TEST(Fidelity, TrustCheckCasesAreValidationCasesAndRun) {
    std::size_t checked = 0;
    for (const mesh::FidelityCase& fidelity_case : mesh::fidelity_cases()) {
        if (!fidelity_case.trust_check) continue;
        ++checked;
        EXPECT_EQ(fidelity_case.set, mesh::FidelitySet::Validation) << fidelity_case.name;  // never tuned on
    }
    EXPECT_GE(checked, 4u);
    // A tiny case end to end: every step timed, both predictions made.
    mesh::FidelityCase tiny{mesh::FidelitySet::Validation, "tiny", small_unet, {1, 1, 32, 32}, {2, 1}};
    cost::Device host = hand_made_host();
    mesh::FidelityOptions options;
    options.steps = 2;
    options.profile_repeats = 1;
    const mesh::FidelityResult result = mesh::measure_fidelity(tiny, cost::CostModel(host), options);
    EXPECT_EQ(result.measured_seconds.size(), 2u);
    EXPECT_GT(result.predicted_seconds, 0);
    EXPECT_GT(result.class_predicted_seconds, 0);
    EXPECT_GT(result.measured_fastest(), 0);
    EXPECT_LE(result.measured_fastest(), result.measured_median());
}

// A mesh spread over MPI ranks (SimulationOptions::spread), on the hand-made host with a network.
namespace {
cost::Device host_with_network() {
    cost::Device host = hand_made_host();
    host.measured["cluster_latency_us"] = 10;
    host.measured["cluster_bandwidth_gbs"] = 1;
    host.measured["cluster_gather_us"] = 100;
    return host;
}
}  // namespace

TEST(HostStepPrediction, RanksRunTheirCoresSideBySideAndPayTheNetwork) {
    // 4 cores of 1 ms per layer each way on one host thread: one process runs them one after another, 2
    // ranks two each at once (each rank its own host core). The network adds: per BN 3 gathers, the loss
    // 2, the step's end 4 (100 µs each); halo messages between the ranks; the chain's hop and broadcast.
    const Shape input{1, 1, 32, 32};
    const graph::Graph model = small_unet(input);
    const partition::TilingPlan plan(model, partition::SpatialGrid::even(input, {4, 1}));
    cost::SimulationOptions options = measured_options(model, 4, 1e-3, 1e-3);
    const cost::CostModel host(host_with_network());
    const double alone = cost::predict_host_step(model, plan, 1, host, options).step_seconds;
    options.spread = cost::SimulationOptions::RankSpread{1, 0, false};
    EXPECT_EQ(cost::predict_host_step(model, plan, 1, host, options).step_seconds, alone);  // one rank: one process

    // Without a network (zero latency, gathers and transfer time), 2 ranks halve every layer phase.
    cost::Device free_network = host_with_network();
    free_network.measured["cluster_latency_us"] = 0;
    free_network.measured["cluster_gather_us"] = 0;
    free_network.measured["cluster_bandwidth_gbs"] = 1e12;
    options.spread = cost::SimulationOptions::RankSpread{2, 0, false};
    const double two_free = cost::predict_host_step(model, plan, 1, cost::CostModel(free_network), options).step_seconds;
    const auto layers_per_core = static_cast<double>(model.nodes().size() - 1);
    EXPECT_NEAR(alone - two_free, 2 * layers_per_core * 2e-3, 0.1 * layers_per_core * 2e-3);

    // The gathers: 3 per batch norm, 2 for the loss, 4 at the step's end.
    std::int64_t batch_norms = 0;
    for (const graph::Node& node : model.nodes()) batch_norms += node.kind == graph::OpKind::BatchNorm ? 1 : 0;
    cost::Device gathers_only = free_network;
    gathers_only.measured["cluster_gather_us"] = 100;
    const double two_gathers = cost::predict_host_step(model, plan, 1, cost::CostModel(gathers_only), options).step_seconds;
    EXPECT_NEAR(two_gathers - two_free, static_cast<double>(3 * batch_norms + 2 + 4) * 100e-6, 1e-9);

    // Replica reductions gather only among the replica's ranks: 2 replicas on 2 ranks (one each) pay the
    // gathers of the step's end and of the replicas' loss, none per batch norm; with cross-replica batch
    // norm the statistics gather over both ranks again.
    {
        cost::SimulationOptions replicas = options;
        replicas.spread = cost::SimulationOptions::RankSpread{2, 0, false};
        const double free_two = cost::predict_host_step(model, plan, 2, cost::CostModel(free_network), replicas).step_seconds;
        const double gathers_two = cost::predict_host_step(model, plan, 2, cost::CostModel(gathers_only), replicas).step_seconds;
        EXPECT_NEAR(gathers_two - free_two, static_cast<double>(1 + 4) * 100e-6, 1e-9);
        replicas.cross_replica_batch_norm = true;
        const double free_cross = cost::predict_host_step(model, plan, 2, cost::CostModel(free_network), replicas).step_seconds;
        const double gathers_cross = cost::predict_host_step(model, plan, 2, cost::CostModel(gathers_only), replicas).step_seconds;
        EXPECT_NEAR(gathers_cross - free_cross, static_cast<double>(3 * batch_norms + 1 + 4) * 100e-6, 1e-9);
    }

    // Sharing one host of 2 cores, 4 single-threaded ranks take twice as long per layer as 2.
    options.spread = cost::SimulationOptions::RankSpread{4, 2, false};
    const double four_on_two_cores = cost::predict_host_step(model, plan, 1, cost::CostModel(free_network), options).step_seconds;
    options.spread = cost::SimulationOptions::RankSpread{4, 0, false};
    const double four_own_cores = cost::predict_host_step(model, plan, 1, cost::CostModel(free_network), options).step_seconds;
    EXPECT_GT(four_on_two_cores, 1.8 * four_own_cores);

    // A preset without the network is refused, naming the command that measures it.
    options.spread = cost::SimulationOptions::RankSpread{2, 0, false};
    try {
        cost::predict_host_step(model, plan, 1, cost::CostModel(hand_made_host()), options);
        FAIL() << "expected a refusal";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("calibrate --network"), std::string::npos) << error.what();
    }
}

TEST(HostStepPrediction, HaloMessagesBetweenRanksOverlapTheWorkThatDoesNotNeedThem) {
    // 2 cores on 2 ranks, every layer 1 ms each way; each 3×3 convolution's halo is one message each way
    // per rank, of latency L. Forward, the message overlaps only the halo node's copies (here ~0): it
    // costs L. Backward, the convolution's weights' gradients (half its backward, 0.5 ms) and the halo
    // node's own copy (~0 here) run while its halo gradients travel: L = 0.3 ms is hidden, L = 2 ms shows
    // 1.5 ms. The first convolution reads the image: no gradient goes back.
    const Shape input{1, 1, 32, 32};
    const graph::Graph model = small_unet(input);
    const partition::TilingPlan plan(model, partition::SpatialGrid::even(input, {2, 1}));
    cost::SimulationOptions options = measured_options(model, 2, 1e-3, 1e-3);
    options.spread = cost::SimulationOptions::RankSpread{2, 0, false};
    std::int64_t halo_layers = 0, halo_gradient_layers = 0;
    for (const graph::Node& node : model.nodes()) {
        if (node.kind != graph::OpKind::Conv || node.conv.kernel[0] == 1) continue;
        ++halo_layers;
        if (model.node(node.inputs[0]).kind != graph::OpKind::Input) ++halo_gradient_layers;
    }
    ASSERT_GE(halo_gradient_layers, 3);
    const auto step_with_latency = [&](double latency_seconds) {
        cost::Device host = host_with_network();
        host.measured["copy"] = 1e6;
        host.measured["cluster_bandwidth_gbs"] = 1e12;
        host.measured["cluster_gather_us"] = 0;
        host.measured["cluster_latency_us"] = latency_seconds * 1e6;
        return cost::predict_host_step(model, plan, 1, cost::CostModel(host), options).step_seconds;
    };
    // The gradient sum's two rounds of messages (to each segment's rank, then the gather) pay it too.
    const double instant = step_with_latency(0);
    EXPECT_NEAR(step_with_latency(0.3e-3) - instant, static_cast<double>(halo_layers + 2) * 0.3e-3, 1e-6);
    EXPECT_NEAR(step_with_latency(2e-3) - instant,
                static_cast<double>(halo_layers + 2) * 2e-3 + static_cast<double>(halo_gradient_layers) * 1.5e-3, 1e-6);
}
