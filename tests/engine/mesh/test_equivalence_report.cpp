// The equivalence report (cores/equivalence.hpp): a partitioned run against the single-core Trainer,
// layer by layer and tile by tile. fp32 layouts must agree to 1e-5 relative in every layer's value and
// gradient and 1e-6 in the loss; bf16 differs more, but finitely; the report's shapes (one row per
// layer, one tile per core) and its refusals are checked too.
#include "mesh/equivalence.hpp"
#include "mesh_test_support.hpp"
#include "core/error.hpp"
#include "core/random.hpp"
#include "networks/models.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace tessera;

namespace {

using test::make_batch;

// Images with structure at every scale and labels that follow them (so the loss is not flat).
train::TrainerConfig trainer_config(graph::Precision precision) {
    train::TrainerConfig config;
    config.optimizer = {.kind = train::OptimizerKind::Sgd, .momentum = 0.9};
    config.schedule = {.kind = train::ScheduleKind::Constant, .learning_rate = 0.02};
    config.loss = train::LossKind::CrossEntropyAndDice;
    config.precision = precision;
    return config;
}

struct Comparison {
    graph::Graph model;
    mesh::EquivalenceReport report;
};

Comparison compare(const networks::UNetConfig& unet, const Shape& input, const std::vector<std::int64_t>& pieces,
            graph::Precision precision = graph::Precision::F32, int steps = 2, bool baseline = false) {
    Comparison run{networks::make_unet(unet, input), {}};
    mesh::MeshConfig mesh;
    mesh.grid = partition::SpatialGrid::even(input, pieces);
    auto [images, labels] = make_batch(input, unet.num_classes, false, 100);
    mesh::EquivalenceOptions options;
    options.steps = steps;
    options.seed = 7;
    options.one_tile_baseline = baseline;
    run.report = mesh::compare_with_single_core(run.model, mesh, trainer_config(precision), images, labels, options);
    const mesh::EquivalenceReport& r = run.report;
    std::printf("%s: activations %.2e (%s), gradients %.2e (%s), weights %.2e, loss %.8f vs %.8f, %.2f s\n", r.layout.c_str(),
                r.worst_activation, r.worst_activation_layer.c_str(), r.worst_gradient, r.worst_gradient_layer.c_str(),
                r.max_weight_difference, r.partitioned_losses.back(), r.reference_losses.back(), r.seconds);
    if (r.has_baseline) {
        double activation = 0, gradient = 0;
        for (const mesh::LayerDifference& layer : r.layers) {
            activation = std::max(activation, layer.baseline_rel_activation);
            gradient = std::max(gradient, layer.baseline_rel_gradient);
        }
        std::printf("  the same mesh code on one tile: activations %.2e, gradients %.2e\n", activation, gradient);
    }
    if (std::getenv("TESSERA_EQUIVALENCE_DETAIL")) {
        for (const mesh::LayerDifference& layer : r.layers) {
            std::printf("  %-18s %-14s value %.2e (norm %.1e, one tile %.1e)  gradient %.2e (norm %.1e, one tile %.1e)\n",
                        layer.name.c_str(), layer.op.c_str(), layer.max_rel_activation, layer.norm_rel_activation,
                        layer.baseline_rel_activation, layer.max_rel_gradient, layer.norm_rel_gradient, layer.baseline_rel_gradient);
        }
    }
    return run;
}

// The report's shape: a row per layer (every node but the input), a tile per core covering the input.
void expect_well_formed(const Comparison& run, std::int64_t num_cores, int steps) {
    const mesh::EquivalenceReport& r = run.report;
    ASSERT_EQ(r.layers.size(), run.model.nodes().size() - 1);
    for (std::size_t i = 0; i < r.layers.size(); ++i) {
        const mesh::LayerDifference& layer = r.layers[i];
        EXPECT_EQ(layer.node, run.model.nodes()[i + 1].id);
        EXPECT_EQ(layer.name, run.model.nodes()[i + 1].name);
        EXPECT_FALSE(layer.op.empty());
        EXPECT_GT(layer.reference_scale, 0) << layer.name;
        EXPECT_GT(layer.gradient_scale, 0) << layer.name;
        if (layer.replicated) continue;
        ASSERT_EQ(layer.core_abs_activation.size(), static_cast<std::size_t>(num_cores)) << layer.name;
        // The layer's largest difference sits in some core's region (the regions cover the layer).
        EXPECT_EQ(*std::max_element(layer.core_abs_activation.begin(), layer.core_abs_activation.end()), layer.max_abs_activation);
        EXPECT_EQ(*std::max_element(layer.core_abs_gradient.begin(), layer.core_abs_gradient.end()), layer.max_abs_gradient);
    }
    ASSERT_EQ(static_cast<std::int64_t>(r.tiles.size()), num_cores);
    const Shape& input = run.model.node(run.model.input_node()).output_shape;
    std::int64_t covered = 0;
    for (std::int64_t core = 0; core < num_cores; ++core) {
        const mesh::TileDifference& tile = r.tiles[static_cast<std::size_t>(core)];
        EXPECT_EQ(tile.core, core);
        ASSERT_EQ(tile.owned.size(), input.size() - 2);
        std::int64_t volume = 1;
        for (const partition::Interval& interval : tile.owned) volume *= interval.size();
        covered += volume;
        double activation = 0, gradient = 0;
        for (const mesh::LayerDifference& layer : r.layers) {
            if (layer.replicated) continue;
            activation = std::max(activation, layer.core_abs_activation[static_cast<std::size_t>(core)]);
            gradient = std::max(gradient, layer.core_abs_gradient[static_cast<std::size_t>(core)]);
        }
        EXPECT_EQ(tile.max_abs_activation, activation);
        EXPECT_EQ(tile.max_abs_gradient, gradient);
        EXPECT_LE(tile.max_rel_activation, r.worst_activation);
        EXPECT_LE(tile.max_rel_gradient, r.worst_gradient);
    }
    std::int64_t spatial = 1;
    for (std::size_t axis = 2; axis < input.size(); ++axis) spatial *= input[axis];
    EXPECT_EQ(covered, spatial);
    EXPECT_EQ(r.reference_losses.size(), static_cast<std::size_t>(steps));
    EXPECT_EQ(r.partitioned_losses.size(), static_cast<std::size_t>(steps));
}

// Tolerances are relative to each layer's largest value: `tolerance` for values and weights, three times it
// for gradients, which sum more products (measured, fp32: 1.2e-5 on an AMD EPYC with AVX2 against 3-6e-6 on
// AVX-512 Xeons; the same mesh code on one tile is as far from the Trainer, so it is the kernels' order of
// summation, not the partitioning).
// A ReLU input or a max pool's two largest inputs within rounding of each other, ordered differently by the
// two runs (which ones depends on the CPU's kernels and their threads: seen on an AVX2 EPYC with 2 threads,
// not with 1): that element's gradient changes by O(1), so every layer before it differs at single elements
// by up to O(1) of its largest gradient, while in norm — a few elements of thousands — it stays small. Then
// values are held to 1e-3 (element and norm) and gradients to kFlipNormTolerance in norm.
constexpr double kFlipNormTolerance = 5e-2;
bool flipped(const mesh::EquivalenceReport& r) { return r.relu_flips > 0 || r.pool_flips > 0; }

void expect_equivalent(const mesh::EquivalenceReport& r, double tolerance, double loss_tolerance) {
    if (flipped(r)) {
        std::printf("  %lld ReLU and %lld max-pool flips (first in %s): gradients compared in norm\n", static_cast<long long>(r.relu_flips),
                    static_cast<long long>(r.pool_flips), r.first_flip_layer.c_str());
    }
    for (const mesh::LayerDifference& layer : r.layers) {
        if (flipped(r)) {
            EXPECT_LE(layer.max_rel_activation, 1e-3) << layer.name << " (" << layer.op << ") value";
            EXPECT_LE(layer.norm_rel_gradient, kFlipNormTolerance) << layer.name << " (" << layer.op << ") gradient, in norm";
        } else {
            EXPECT_LE(layer.max_rel_activation, tolerance) << layer.name << " (" << layer.op << ") value";
            EXPECT_LE(layer.max_rel_gradient, 3 * tolerance) << layer.name << " (" << layer.op << ") gradient";
        }
    }
    for (std::size_t step = 0; step < r.reference_losses.size(); ++step) {
        EXPECT_NEAR(r.partitioned_losses[step], r.reference_losses[step], loss_tolerance) << "step " << step;
    }
    EXPECT_LE(r.max_weight_difference, tolerance);
}

TEST(EquivalenceReport, UNet2DSplit2x2MatchesOneCoreInFp32) {
    const Comparison run = compare({.depth = 3, .base_width = 8, .num_classes = 3}, {2, 1, 64, 64}, {2, 2},
                                   graph::Precision::F32, 2, /*baseline*/ true);
    expect_well_formed(run, 4, 2);
    expect_equivalent(run.report, 1e-5, 1e-6);
    // What remains without flips is the mesh's kernels (its batch-norm statistics are summed in another order than
    // oneDNN's), not the partitioning: the same code on one tile is as far from the Trainer.
    double baseline_activation = 0, baseline_gradient = 0;
    for (const mesh::LayerDifference& layer : run.report.layers) {
        baseline_activation = std::max(baseline_activation, layer.baseline_rel_activation);
        baseline_gradient = std::max(baseline_gradient, layer.baseline_rel_gradient);
    }
    if (!flipped(run.report)) {  // flips are the tiled run's own: the one tile has others, or none
        EXPECT_LE(run.report.worst_activation, 2 * baseline_activation);
        EXPECT_LE(run.report.worst_gradient, 2 * baseline_gradient);
    }
    EXPECT_EQ(run.report.pieces, (std::vector<std::int64_t>{2, 2}));
    EXPECT_EQ(run.report.layout, "2×2 tiles (4 cores) of [2, 1, 64, 64], fp32, 2 steps");
    // The regions: core 3 (grid index (1, 1)) owns the lower right quarter of the input.
    EXPECT_EQ(run.report.tiles[3].owned, (std::vector<partition::Interval>{{32, 64}, {32, 64}}));
}

TEST(EquivalenceReport, UNet3DSplit2x2x2MatchesOneCoreInFp32) {
    const Comparison run = compare({.depth = 2, .base_width = 4, .num_classes = 2}, {1, 1, 16, 16, 16}, {2, 2, 2});
    expect_well_formed(run, 8, 2);
    expect_equivalent(run.report, 1e-5, 1e-6);
}

// ResNet: strided layers, and after global pooling layers that every core holds whole (replicated):
// they have a row but no place on the tile map.
TEST(EquivalenceReport, ResNetKeepsReplicatedLayersOffTheTiles) {
    const Shape input{2, 3, 64, 64};
    const graph::Graph model = networks::make_resnet({.depth = 18, .num_classes = 5, .base_width = 8}, input);
    mesh::MeshConfig mesh;
    mesh.grid = partition::SpatialGrid::even(input, {2, 2});
    auto [images, labels] = make_batch(input, 5, true, 100);
    train::TrainerConfig config = trainer_config(graph::Precision::F32);
    config.loss = train::LossKind::SoftmaxCrossEntropy;
    mesh::EquivalenceOptions options;
    options.seed = 7;
    const Comparison run{model, mesh::compare_with_single_core(model, mesh, config, images, labels, options)};
    expect_well_formed(run, 4, 2);
    const mesh::EquivalenceReport& r = run.report;
    std::printf("%s: values %.2e (%s), gradients %.2e (%s), %lld ReLU flips\n", r.layout.c_str(), r.worst_activation,
                r.worst_activation_layer.c_str(), r.worst_gradient, r.worst_gradient_layer.c_str(), static_cast<long long>(r.relu_flips));
    int replicated = 0;
    for (const mesh::LayerDifference& layer : r.layers) {
        if (!layer.replicated) continue;
        ++replicated;
        EXPECT_TRUE(layer.core_abs_activation.empty()) << layer.name;
        EXPECT_EQ(layer.shape.size(), 2u) << layer.name;  // [N, F]
    }
    EXPECT_EQ(replicated, 2);  // global pooling and the classifier
    EXPECT_EQ(r.layers.back().op, "dense");
    expect_equivalent(r, 1e-5, 1e-6);
}

// bf16 keeps 8 mantissa bits: the values differ by a few roundings (~1e-2 of a layer's largest), the
// gradients by ~10% in norm and up to ~80% of a layer's largest at single elements — batch norm's
// backward pass cancels heavily, and the mesh's batch norm (f32 rows summed in double) and oneDNN's
// bf16 one round differently. The one-tile baseline shows it is the kernels, not the partitioning:
// the same mesh code with the whole input on one core is as far from the Trainer, to within the spread
// of two samples of that rounding — the worst single elements sit where a ReLU downstream flipped, and
// which of the two runs lands further depends on the kernels' thread count: measured 4 tiles over one
// tile 1.56 (1 thread) and 1.32 (2 threads) in the worst element, 0.7 and 2.3 in norm, since the Trainer's
// 8-channel batch norm runs the row loops as the mesh's does (1.07 before, with oneDNN's). An error of
// the partitioning itself shows as orders of magnitude (UNet2DSplit2x2MatchesOneCoreInFp32: 1e-5).
TEST(EquivalenceReport, Bf16DiffersMoreButFinitely) {
    const networks::UNetConfig unet{.depth = 3, .base_width = 8, .num_classes = 3};
    const Comparison fp32 = compare(unet, {2, 1, 64, 64}, {2, 2}, graph::Precision::F32, 1);
    const Comparison bf16 = compare(unet, {2, 1, 64, 64}, {2, 2}, graph::Precision::BF16, 1, true);
    expect_well_formed(bf16, 4, 1);
    const mesh::EquivalenceReport& r = bf16.report;
    ASSERT_TRUE(r.has_baseline);
    EXPECT_TRUE(std::isfinite(r.worst_activation) && std::isfinite(r.worst_gradient));
    // Against fp32's rounding alone: an fp32 run with a flip has O(1) differences at single elements itself.
    if (!flipped(fp32.report)) {
        EXPECT_GT(r.worst_activation, 100 * fp32.report.worst_activation);
        EXPECT_GT(r.worst_gradient, 100 * fp32.report.worst_gradient);
    }
    double baseline_activation = 0, baseline_gradient = 0;
    for (const mesh::LayerDifference& layer : r.layers) {
        EXPECT_LE(layer.max_rel_activation, 0.05) << layer.name;
        EXPECT_LE(layer.norm_rel_gradient, 0.25) << layer.name;
        EXPECT_LE(layer.max_rel_gradient, 1.0) << layer.name;
        baseline_activation = std::max(baseline_activation, layer.baseline_rel_activation);
        baseline_gradient = std::max(baseline_gradient, layer.baseline_rel_gradient);
    }
    EXPECT_LE(r.worst_activation, 3 * baseline_activation);
    EXPECT_LE(r.worst_gradient, 3 * baseline_gradient);
    EXPECT_NEAR(r.partitioned_losses[0], r.reference_losses[0], 1e-4 * r.reference_losses[0]);
    for (const mesh::TileDifference& tile : r.tiles) {
        EXPECT_TRUE(std::isfinite(tile.max_rel_activation) && std::isfinite(tile.max_rel_gradient)) << "core " << tile.core;
    }
}

// fp32 differences beyond rounding come from ReLU inputs at the kink, rounded to opposite sides by the
// two runs: then the report names them. Which seeds and batches put an input within ~1e-7 of zero
// depends on the kernels the CPU gets, so this holds the invariant over a few, whichever flip here.
TEST(EquivalenceReport, LargeFp32DifferencesComeWithReluFlips) {
    const Shape input{2, 1, 64, 64};
    const graph::Graph model = networks::make_unet({.depth = 3, .base_width = 8, .num_classes = 3}, input);
    mesh::MeshConfig mesh;
    mesh.grid = partition::SpatialGrid::even(input, {2, 2});
    for (const auto& [seed, data] : {std::pair<std::uint64_t, std::uint64_t>{2, 100}, {3, 2}, {11, 1}, {11, 100}}) {
        auto [images, labels] = make_batch(input, 3, false, data);
        mesh::EquivalenceOptions options;
        options.seed = seed;
        options.steps = 1;
        const mesh::EquivalenceReport r = mesh::compare_with_single_core(model, mesh, trainer_config(graph::Precision::F32), images, labels, options);
        double norm = 0;
        for (const mesh::LayerDifference& layer : r.layers) norm = std::max({norm, layer.norm_rel_activation, layer.norm_rel_gradient});
        std::printf("seed %llu, batch %llu: values %.2e, gradients %.2e, in norm %.2e; %lld ReLU flips (first in %s)\n",
                    static_cast<unsigned long long>(seed), static_cast<unsigned long long>(data), r.worst_activation, r.worst_gradient,
                    norm, static_cast<long long>(r.relu_flips), r.first_flip_layer.c_str());
        std::int64_t per_layer = 0, per_tile = 0;
        for (const mesh::LayerDifference& layer : r.layers) {
            per_layer += layer.relu_flips;
            std::int64_t in_cores = 0;
            for (std::int64_t flips : layer.core_relu_flips) in_cores += flips;
            EXPECT_EQ(in_cores, layer.relu_flips) << layer.name;
            if (layer.relu_flips > 0) {
                EXPECT_LT(layer.max_flip_value, 1e-4) << layer.name << ": a flip far from the kink";
            }
        }
        for (const mesh::TileDifference& tile : r.tiles) per_tile += tile.relu_flips;
        EXPECT_EQ(per_layer, r.relu_flips);
        EXPECT_EQ(per_tile, r.relu_flips);
        if (!flipped(r)) {
            EXPECT_LE(r.worst_activation, 1e-5);
            EXPECT_LE(r.worst_gradient, 3e-5);
        }
        // In norm, a flip is a few elements of thousands.
        for (const mesh::LayerDifference& layer : r.layers) EXPECT_LE(layer.norm_rel_activation, 1e-3) << layer.name;
    }
}

TEST(EquivalenceReport, ReportsProgressAndStops) {
    const Shape input{1, 1, 32, 32};
    const graph::Graph model = networks::make_unet({.depth = 2, .base_width = 4, .num_classes = 2}, input);
    mesh::MeshConfig mesh;
    mesh.grid = partition::SpatialGrid::even(input, {1, 2});
    auto [images, labels] = make_batch(input, 2, false, 1);
    std::vector<std::pair<int, int>> calls;
    mesh::EquivalenceOptions options;
    options.steps = 3;
    options.on_progress = [&](int done, int total) { calls.emplace_back(done, total); };
    mesh::compare_with_single_core(model, mesh, trainer_config(graph::Precision::F32), images, labels, options);
    ASSERT_EQ(calls.size(), 7u);  // two runs × three steps, then the comparison
    EXPECT_EQ(calls.front(), std::make_pair(1, 7));
    EXPECT_EQ(calls.back(), std::make_pair(7, 7));

    std::atomic<bool> stop{true};
    options.stop = &stop;
    try {
        mesh::compare_with_single_core(model, mesh, trainer_config(graph::Precision::F32), images, labels, options);
        FAIL() << "expected the comparison to stop";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("stopped"), std::string::npos) << error.what();
    }
}

TEST(EquivalenceReport, RefusesReplicasAndWrongShapes) {
    const Shape input{2, 1, 32, 32};
    const graph::Graph model = networks::make_unet({.depth = 2, .base_width = 4, .num_classes = 2}, input);
    mesh::MeshConfig mesh;
    mesh.grid = partition::SpatialGrid::even(input, {2, 1});
    mesh.num_replicas = 2;
    auto [images, labels] = make_batch({4, 1, 32, 32}, 2, false, 1);
    try {
        mesh::compare_with_single_core(model, mesh, trainer_config(graph::Precision::F32), images, labels);
        FAIL() << "expected a refusal of two replicas";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("num_replicas = 1"), std::string::npos) << error.what();
    }
    mesh.num_replicas = 1;
    try {
        mesh::compare_with_single_core(model, mesh, trainer_config(graph::Precision::F32), images, labels);
        FAIL() << "expected a refusal of the batch's shape";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("[2, 1, 32, 32]"), std::string::npos) << error.what();
    }
}

}  // namespace
