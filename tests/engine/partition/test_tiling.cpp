// Tiling plans: owned tiles, halos and border padding through real models, and the layouts that
// cannot work, rejected with the layer named.
#include "model/models.hpp"
#include "partition/tiling.hpp"

#include <gtest/gtest.h>

using namespace tessera;
using namespace tessera::partition;

namespace {

int node_named(const graph::Graph& graph, const std::string& name) {
    for (const graph::Node& node : graph.nodes())
        if (node.name == name) return node.id;
    ADD_FAILURE() << "no node " << name;
    return 0;
}

std::string error_of(const std::function<void()>& action) {
    try {
        action();
    } catch (const Error& error) {
        return error.what();
    }
    return "(no error)";
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
    const graph::Graph unet = model::make_unet({.depth = 3, .base_width = 8, .num_classes = 2}, {1, 1, 64, 64});
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

TEST(Tiling, UnevenBoundariesThatRespectTheStridesWork) {
    const graph::Graph unet = model::make_unet({.depth = 3, .base_width = 8, .num_classes = 2}, {2, 1, 64, 48, 48});
    SpatialGrid grid;
    grid.boundaries = {{0, 24, 64}, {0, 48}, {0, 16, 48}};  // D split 24 | 40, W split 16 | 32
    const TilingPlan plan = plan_tiling(unet, grid);
    EXPECT_EQ(plan.num_cores(), 4);
    expect_tiles_cover_outputs(unet, plan);
    EXPECT_EQ(plan.tile(node_named(unet, "bottleneck.conv1"), 3).owned,
              (std::vector<Interval>{{6, 16}, {0, 12}, {4, 12}}));
}

TEST(Tiling, ResNetSplitsFourWaysAndIsReplicatedAfterPooling) {
    const graph::Graph resnet = model::make_resnet({.depth = 18, .num_classes = 10}, {2, 3, 128, 128});
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
    const graph::Graph unet = model::make_unet({.depth = 3, .base_width = 8, .num_classes = 2}, {1, 1, 64, 64});
    SpatialGrid grid;
    grid.boundaries = {{0, 37, 64}, {0, 64}};
    const std::string message = error_of([&] { plan_tiling(unet, grid); });
    EXPECT_NE(message.find("layer 'down0.pool' has stride 2 along H"), std::string::npos) << message;
    EXPECT_NE(message.find("move that boundary to 36 or 38"), std::string::npos) << message;
}

TEST(Tiling, TilesTooSmallForTheModelAreRejectedNamingTheLayer) {
    // 16 pieces of 2 rows: the second pooling leaves each core half a row.
    const graph::Graph unet = model::make_unet({.depth = 4, .base_width = 4, .num_classes = 2}, {1, 1, 32, 32});
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
    const graph::Graph unet = model::make_unet({.depth = 2, .base_width = 4, .num_classes = 2}, {1, 1, 16, 16});
    SpatialGrid grid;
    grid.boundaries = {{0, 8, 8, 16}, {0, 16}};
    EXPECT_NE(error_of([&] { plan_tiling(unet, grid); }).find("must increase"), std::string::npos);
    grid.boundaries = {{0, 8, 20}, {0, 16}};
    EXPECT_NE(error_of([&] { plan_tiling(unet, grid); }).find("from 0 to the extent 16"), std::string::npos);
    EXPECT_THROW(SpatialGrid::even({1, 1, 16, 16}, {2}), Error);
}
