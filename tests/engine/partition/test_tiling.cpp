// Tiling plans: owned tiles, halos and border padding through real models, and the layouts that
// cannot work, rejected with the layer named.
#include "networks/models.hpp"
#include "support/error_of.hpp"
#include "networks/retinanet.hpp"
#include "partition/core_graph.hpp"
#include "partition/tiling.hpp"

#include <gtest/gtest.h>

using namespace tessera;
using namespace tessera::partition;

namespace {

using test::error_of;

int node_named(const graph::Graph& graph, const std::string& name) {
    for (const graph::Node& node : graph.nodes())
        if (node.name == name) return node.id;
    ADD_FAILURE() << "no node " << name;
    return 0;
}

// Every spatial node's owned tiles cover its output exactly once.
void expect_tiles_cover_outputs(const graph::Graph& graph, const TilingPlan& plan) {
    for (const graph::Node& node : graph.nodes()) {
        if (plan.tile(node.id, 0).replicated) continue;
        std::int64_t covered = 0;
        for (std::int64_t core = 0; core < plan.num_cores(); ++core) covered += plan.tile_elements(node.id, core);
        EXPECT_EQ(covered, num_elements_of(node.output_shape)) << node.name;
        for (std::int64_t core = 0; core < plan.num_cores(); ++core) {
            for (const Interval& interval : plan.tile(node.id, core).owned) EXPECT_GT(interval.size(), 0) << node.name;
        }
    }
}

}  // namespace

TEST(Tiling, UNetOnA2x2GridHasUnitHalosInsideAndPaddingAtTheBorder) {
    const graph::Graph unet = networks::make_unet({.depth = 3, .base_width = 8, .num_classes = 2}, {1, 1, 64, 64});
    const TilingPlan plan = plan_tiling(unet, SpatialGrid::even({1, 1, 64, 64}, {2, 2}));
    ASSERT_EQ(plan.num_cores(), 4);
    expect_tiles_cover_outputs(unet, plan);
    const int first = node_named(unet, "down0.conv1");
    // Core 0 is the top-left tile: padding above and left, halo below and right.
    const NodeTile& top_left = plan.tile(first, 0);
    EXPECT_EQ(top_left.owned, (std::vector<Interval>{{0, 32}, {0, 32}}));
    EXPECT_EQ(top_left.pad_before, (std::vector<std::int64_t>{1, 1}));
    EXPECT_EQ(top_left.halo_after, (std::vector<std::int64_t>{1, 1}));
    EXPECT_EQ(top_left.halo_before, (std::vector<std::int64_t>{0, 0}));
    const NodeTile& bottom_right = plan.tile(first, 3);
    EXPECT_EQ(bottom_right.owned, (std::vector<Interval>{{32, 64}, {32, 64}}));
    EXPECT_EQ(bottom_right.halo_before, (std::vector<std::int64_t>{1, 1}));
    EXPECT_EQ(bottom_right.pad_after, (std::vector<std::int64_t>{1, 1}));
    // (33 × 33 − 32 × 32) input elements per core, one channel, four cores.
    EXPECT_EQ(plan.halo_elements(first), 4 * 65);
    // Pooling halves the tiles and needs no halo; the up-convolution doubles them back.
    const NodeTile& pooled = plan.tile(node_named(unet, "down0.pool"), 3);
    EXPECT_EQ(pooled.owned, (std::vector<Interval>{{16, 32}, {16, 32}}));
    EXPECT_EQ(pooled.halo_before, (std::vector<std::int64_t>{0, 0}));
    EXPECT_EQ(plan.halo_elements(node_named(unet, "down0.pool")), 0);
    EXPECT_EQ(plan.tile(node_named(unet, "up0.upconv"), 3).owned, (std::vector<Interval>{{32, 64}, {32, 64}}));
    EXPECT_GT(plan.total_halo_elements(), 0);
}

TEST(Tiling, UpsampleIsLocalAndMultipliesTheOwnedRowsByItsFactor) {
    // An FPN step: stride-2 pooling, a 3×3 convolution, nearest upsampling back (×2 along H, ×3 along
    // W), added to the full-resolution branch.
    graph::Graph g("fpn_step");
    const int x = g.input({1, 2, 32, 24});
    const int fine = g.conv(x, 4, ops::ConvAttributes::same(2, 3), "fine");
    const int coarse = g.conv(g.pool(fine, ops::PoolAttributes::max_down(2), "down"), 4, ops::ConvAttributes::same(2, 3),
                              "coarse");
    ops::PoolAttributes narrow = ops::PoolAttributes::max_down(2);
    narrow.kernel = {1, 3};
    narrow.stride = {1, 3};
    const int squeezed = g.pool(coarse, narrow, "squeeze");  // [1, 4, 16, 4]
    const int up = g.upsample(squeezed, {2, 6}, "up");        // [1, 4, 32, 24]
    g.set_output(g.add(fine, up, "merge"));
    EXPECT_EQ(boundary_alignment(g), (std::vector<std::int64_t>{2, 6}));

    const TilingPlan plan = plan_tiling(g, SpatialGrid::even({1, 2, 32, 24}, {2, 1}));
    expect_tiles_cover_outputs(g, plan);
    for (std::int64_t core = 0; core < 2; ++core) {
        const NodeTile& in = plan.tile(squeezed, core);
        const NodeTile& out = plan.tile(up, core);
        ASSERT_EQ(out.owned.size(), 2u);
        EXPECT_EQ(out.owned[0], (Interval{in.owned[0].begin * 2, in.owned[0].end * 2})) << core;
        EXPECT_EQ(out.owned[1], (Interval{in.owned[1].begin * 6, in.owned[1].end * 6})) << core;
        EXPECT_EQ(out.owned, plan.tile(fine, core).owned) << core;  // the add's inputs agree
        EXPECT_TRUE(out.halo_before.empty() && out.halo_after.empty()) << "upsampling needs no halo";
    }
    EXPECT_EQ(plan.tile(up, 1).owned, (std::vector<Interval>{{16, 32}, {0, 24}}));
    EXPECT_EQ(plan.halo_elements(up), 0);

    // Each core's graph upsamples its own tile.
    const CoreGraphs cores = build_core_graphs(g, plan);
    for (std::int64_t core = 0; core < 2; ++core) {
        const graph::Graph& local = cores.graphs[static_cast<std::size_t>(core)];
        const graph::Node& node = local.node(cores.local_node[static_cast<std::size_t>(up)]);
        EXPECT_EQ(node.kind, graph::OpKind::Upsample);
        EXPECT_EQ(node.upsample_factor, (ops::Extents{2, 6}));
        EXPECT_EQ(node.output_shape, (Shape{1, 4, 16, 24})) << core;
    }
}

TEST(Tiling, RetinaNetSplitsTwoWaysAndKeepsItsInitializers) {
    const graph::Graph retinanet = networks::make_retinanet(
        {.resnet_depth = 18, .num_classes = 3, .fpn_channels = 8, .head_convs = 1}, {1, 3, 256, 256});
    const TilingPlan plan = plan_tiling(retinanet, SpatialGrid::even({1, 3, 256, 256}, {2, 1}));
    expect_tiles_cover_outputs(retinanet, plan);
    // P4 upsampled to P3's grid: core 1 owns rows 16..32 of the 32-row P3 level.
    EXPECT_EQ(plan.tile(node_named(retinanet, "fpn.upsample3"), 1).owned, (std::vector<Interval>{{16, 32}, {0, 32}}));
    const CoreGraphs cores = build_core_graphs(retinanet, plan);
    const graph::Node& bias_node = retinanet.node(node_named(retinanet, "class.l3.out"));
    const auto bias = static_cast<std::size_t>(bias_node.parameters[1]);
    for (const graph::Graph& core : cores.graphs) {
        EXPECT_EQ(core.parameters()[bias].initializer, graph::Initializer::Constant);
        EXPECT_EQ(core.parameters()[bias].constant, retinanet.parameters()[bias].constant);
        // Shared heads stay shared, under the model's names; every level's outputs are outputs.
        EXPECT_EQ(core.parameter_count(), retinanet.parameter_count());
        EXPECT_EQ(core.output_nodes().size(), retinanet.output_nodes().size());
        const auto local = [&](const char* name) { return cores.local_node[static_cast<std::size_t>(node_named(retinanet, name))]; };
        const graph::Node& shared = core.node(local("box.l6.conv0"));
        EXPECT_EQ(shared.shares_parameters_of, local("box.l3.conv0"));
        EXPECT_EQ(core.parameters()[static_cast<std::size_t>(shared.parameters[0])].name, "box.conv0.weight");
    }
}

TEST(Tiling, UnevenBoundariesThatRespectTheStridesWork) {
    const graph::Graph unet = networks::make_unet({.depth = 3, .base_width = 8, .num_classes = 2}, {2, 1, 64, 48, 48});
    SpatialGrid grid;
    grid.boundaries = {{0, 24, 64}, {0, 48}, {0, 16, 48}};  // D split 24 | 40, W split 16 | 32
    const TilingPlan plan = plan_tiling(unet, grid);
    EXPECT_EQ(plan.num_cores(), 4);
    expect_tiles_cover_outputs(unet, plan);
    EXPECT_EQ(plan.tile(node_named(unet, "bottleneck.conv1"), 3).owned,
              (std::vector<Interval>{{6, 16}, {0, 12}, {4, 12}}));
}

TEST(Tiling, ResNetSplitsFourWaysAndIsReplicatedAfterPooling) {
    const graph::Graph resnet = networks::make_resnet({.depth = 18, .num_classes = 10}, {2, 3, 128, 128});
    const TilingPlan plan = plan_tiling(resnet, SpatialGrid::even({2, 3, 128, 128}, {2, 2}));
    expect_tiles_cover_outputs(resnet, plan);
    EXPECT_TRUE(plan.tile(node_named(resnet, "head.pool"), 2).replicated);
    EXPECT_TRUE(plan.tile(node_named(resnet, "head.dense"), 0).replicated);
    // The 7×7 stride-2 stem needs 3 rows of halo below... and the first core pads 3 at the top.
    const NodeTile& stem = plan.tile(node_named(resnet, "stem.conv"), 3);
    EXPECT_EQ(stem.halo_before, (std::vector<std::int64_t>{3, 3}));
    EXPECT_EQ(plan.tile(node_named(resnet, "stem.conv"), 0).pad_before, (std::vector<std::int64_t>{3, 3}));
}

TEST(Tiling, ABoundaryOffTheStrideIsRejectedNamingTheLayer) {
    const graph::Graph unet = networks::make_unet({.depth = 3, .base_width = 8, .num_classes = 2}, {1, 1, 64, 64});
    SpatialGrid grid;
    grid.boundaries = {{0, 37, 64}, {0, 64}};
    const std::string message = error_of([&] { plan_tiling(unet, grid); });
    EXPECT_NE(message.find("layer 'down0.pool' has stride 2 along H"), std::string::npos) << message;
    // Said where the user draws it: at the input, where a U-Net of depth 3 (two poolings) needs multiples of 4.
    EXPECT_NE(message.find("At the input that boundary is 37 of 64"), std::string::npos) << message;
    EXPECT_NE(message.find("must be a multiple of 4 there"), std::string::npos) << message;
    EXPECT_NE(message.find("move it to 36 or 40"), std::string::npos) << message;
}

TEST(Tiling, ABoundaryOffADeepLayersStrideIsMovedAtTheInput) {
    // ResNet-18 on 224² split at 112 along W: fine for the stem and stages 1-3 (112 is 7 positions of
    // 14 at stage 4's input, odd there). The fix is at the input, in multiples of the network's 32.
    const graph::Graph resnet = networks::make_resnet({.depth = 18, .num_classes = 10}, {1, 3, 224, 224});
    SpatialGrid grid;
    grid.boundaries = {{0, 224}, {0, 112, 224}};
    const std::string message = error_of([&] { plan_tiling(resnet, grid); });
    EXPECT_NE(message.find("has stride 2 along W, but core 1's tile starts at 7 of the 14 positions"), std::string::npos) << message;
    EXPECT_NE(message.find("At the input that boundary is 112 of 224"), std::string::npos) << message;
    EXPECT_NE(message.find("must be a multiple of 32 there"), std::string::npos) << message;
    EXPECT_NE(message.find("move it to 96 or 128"), std::string::npos) << message;
}

TEST(Tiling, UnpaddedUNetRunsWholeOnOneCoreAndIsRefusedSplitNamingTheCrop) {
    using networks::UNetConfig;
    const graph::Graph unet = networks::make_unet(
        {.depth = 3, .base_width = 4, .num_classes = 2, .padding = UNetConfig::Padding::Valid, .up_kernel = 3}, {1, 1, 44, 44});
    const TilingPlan whole = plan_tiling(unet, SpatialGrid::even(unet.node(unet.input_node()).output_shape, {1, 1}));
    for (const graph::Node& node : unet.nodes()) {
        if (node.output_shape.size() != 4) continue;
        EXPECT_EQ(whole.tile(node.id, 0).owned, (std::vector<Interval>{{0, node.output_shape[2]}, {0, node.output_shape[3]}}))
            << node.name;
    }
    const std::string message = error_of([&] { plan_tiling(unet, SpatialGrid::even({1, 1, 44, 44}, {2, 1})); });
    // The 3×3 up-convolution comes first on the way up and is refused by its own rule; 2×2 ones reach the crop.
    EXPECT_NE(message.find("up1.upconv"), std::string::npos) << message;
    const graph::Graph ronneberger = networks::make_unet(
        {.depth = 3, .base_width = 4, .num_classes = 2, .padding = UNetConfig::Padding::Valid}, {1, 1, 44, 44});
    const std::string crop = error_of([&] { plan_tiling(ronneberger, SpatialGrid::even({1, 1, 44, 44}, {1, 2})); });
    EXPECT_NE(crop.find("'up1.crop' crops its input"), std::string::npos) << crop;
    EXPECT_NE(crop.find("\"padding\": \"same\""), std::string::npos) << crop;
}

TEST(Tiling, TilesTooSmallForTheModelAreRejectedNamingTheLayer) {
    // 16 pieces of 2 rows: the second pooling leaves each core half a row.
    const graph::Graph unet = networks::make_unet({.depth = 4, .base_width = 4, .num_classes = 2}, {1, 1, 32, 32});
    const std::string message = error_of([&] { plan_tiling(unet, SpatialGrid::even({1, 1, 32, 32}, {16, 1})); });
    EXPECT_NE(message.find("layer 'down1.pool'"), std::string::npos) << message;

    // A dilated 3×3 convolution reaches 2 rows; tiles of 1 row cannot supply that halo.
    graph::Graph dilated("dilated");
    const int x = dilated.input({1, 1, 8, 8});
    dilated.set_output(dilated.conv(x, 2, ops::ConvAttributes::same(2, 3, 2), "wide"));
    const std::string halo = error_of([&] { plan_tiling(dilated, SpatialGrid::even({1, 1, 8, 8}, {8, 1})); });
    EXPECT_NE(halo.find("layer 'wide' needs a halo of 2 rows along H"), std::string::npos) << halo;
    EXPECT_NE(halo.find("holds only 1 rows"), std::string::npos) << halo;
}

TEST(Tiling, BadGridsAreRejected) {
    const graph::Graph unet = networks::make_unet({.depth = 2, .base_width = 4, .num_classes = 2}, {1, 1, 16, 16});
    SpatialGrid grid;
    grid.boundaries = {{0, 8, 8, 16}, {0, 16}};
    EXPECT_NE(error_of([&] { plan_tiling(unet, grid); }).find("must increase"), std::string::npos);
    grid.boundaries = {{0, 8, 20}, {0, 16}};
    EXPECT_NE(error_of([&] { plan_tiling(unet, grid); }).find("from 0 to the extent 16"), std::string::npos);
    EXPECT_THROW(SpatialGrid::even({1, 1, 16, 16}, {2}), Error);
}
