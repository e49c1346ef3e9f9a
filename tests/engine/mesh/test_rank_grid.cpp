// Which ranks form a grid over a replica's partition grid (their halos then travel over a Cartesian
// communicator), against grids drawn by hand.
#include "mesh/transport.hpp"

#include "core/error.hpp"

#include <gtest/gtest.h>

namespace tessera::mesh {
namespace {

// dims of the grid `replica`'s ranks form, or {} when they form none.
std::vector<int> grid_dims(std::int64_t cores, int ranks, const std::vector<std::int64_t>& pieces, std::int64_t replica = 0) {
    const std::optional<RankGrid> grid = rank_grid(CorePlacement(cores, ranks), pieces, replica);
    return grid ? grid->dims : std::vector<int>{};
}

TEST(RankGrid, BlocksOfWholeRowsOrOfPartsOfOneRowFormAGrid) {
    EXPECT_EQ(grid_dims(4, 4, {2, 2}), (std::vector<int>{2, 2}));        // a core per rank
    EXPECT_EQ(grid_dims(4, 2, {2, 2}), (std::vector<int>{2, 1}));        // a row of 2 cores per rank
    EXPECT_EQ(grid_dims(4, 2, {1, 4}), (std::vector<int>{1, 2}));        // half a row per rank
    EXPECT_EQ(grid_dims(8, 2, {2, 2, 2}), (std::vector<int>{2, 1, 1}));  // a 1×2×2 slab per rank
    EXPECT_EQ(grid_dims(8, 4, {2, 2, 2}), (std::vector<int>{2, 2, 1}));
    EXPECT_EQ(grid_dims(12, 3, {3, 4}), (std::vector<int>{3, 1}));
    EXPECT_EQ(grid_dims(12, 6, {3, 4}), (std::vector<int>{3, 2}));
}

TEST(RankGrid, RanksOfEachReplicaFormTheirOwnGrid) {
    // 2 replicas × a 4×1 split on 4 ranks: ranks 0, 1 hold replica 0 and ranks 2, 3 replica 1.
    const std::optional<RankGrid> second = rank_grid(CorePlacement(8, 4), {4, 1}, 1);
    ASSERT_TRUE(second);
    EXPECT_EQ(second->ranks, (std::vector<int>{2, 3}));
    EXPECT_EQ(second->dims, (std::vector<int>{2, 1}));
    const std::optional<RankGrid> first = rank_grid(CorePlacement(8, 4), {4, 1}, 0);
    ASSERT_TRUE(first);
    EXPECT_EQ(first->ranks, (std::vector<int>{0, 1}));
}

TEST(RankGrid, NoGridWhereBlocksAreUnevenWrapARowOrOneRankHoldsTheReplica) {
    EXPECT_TRUE(grid_dims(6, 4, {2, 3}).empty());     // blocks of 2 and 1 cores
    EXPECT_TRUE(grid_dims(6, 3, {2, 3}).empty());     // cores 2, 3 wrap from one row into the next
    EXPECT_TRUE(grid_dims(8, 2, {4, 1}, 0).empty());  // 2 replicas on 2 ranks: one rank holds each
    EXPECT_TRUE(grid_dims(6, 4, {3, 1}, 1).empty());  // rank 1 holds cores of both replicas
    EXPECT_TRUE(grid_dims(4, 1, {2, 2}).empty());     // one process
    EXPECT_THROW(rank_grid(CorePlacement(4, 2), {2, 2}, 1), Error);  // no replica 1
}

TEST(RankGrid, OneProcessTakesNoGrid) {
    SingleProcess transport;
    transport.use_grid(std::nullopt);
    EXPECT_THROW(transport.use_grid(RankGrid{{0, 1}, {2}}), Error);
    EXPECT_NE(transport.halo_topology().find("one process"), std::string::npos);
}

}  // namespace
}  // namespace tessera::mesh
