// factorizations() and placements(): the ways to split a core count, and what each core receives.
#include "partition/partition_spec.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

namespace tessera::partition {
namespace {

using Dims = std::vector<std::int64_t>;

std::int64_t product(const Dims& dims) {
    return std::accumulate(dims.begin(), dims.end(), std::int64_t{1}, std::multiplies<>());
}

// ---- factorizations ----------------------------------------------------------------------------

TEST(Factorizations, SixteenCoresOverDepthHeightWidth) {
    const auto all = factorizations(16, {1, 2, 3}, 5);  // NDHWC
    const std::vector<Dims> expected = {
        {1, 4, 2, 2, 1},  {1, 2, 4, 2, 1},  {1, 2, 2, 4, 1},  // 4·2·2
        {1, 4, 4, 1, 1},  {1, 4, 1, 4, 1},  {1, 1, 4, 4, 1},  // 4·4
        {1, 8, 2, 1, 1},  {1, 8, 1, 2, 1},  {1, 2, 8, 1, 1},  {1, 2, 1, 8, 1}, {1, 1, 8, 2, 1}, {1, 1, 2, 8, 1},  // 8·2
        {1, 16, 1, 1, 1}, {1, 1, 16, 1, 1}, {1, 1, 1, 16, 1},                                                     // 16
    };
    EXPECT_EQ(all, expected);
    std::set<Dims> unique(all.begin(), all.end());
    EXPECT_EQ(unique.size(), all.size());
    for (const Dims& dims : all) {
        EXPECT_EQ(product(dims), 16);
        EXPECT_EQ(dims[0], 1);
        EXPECT_EQ(dims[4], 1);
    }
}

TEST(Factorizations, SmallCases) {
    EXPECT_EQ(factorizations(4, {1, 2}, 4), (std::vector<Dims>{{1, 2, 2, 1}, {1, 4, 1, 1}, {1, 1, 4, 1}}));
    EXPECT_EQ(
        factorizations(12, {1, 2}, 4),
        (std::vector<Dims>{{1, 4, 3, 1}, {1, 3, 4, 1}, {1, 6, 2, 1}, {1, 2, 6, 1}, {1, 12, 1, 1}, {1, 1, 12, 1}}));
    EXPECT_EQ(factorizations(1, {1, 2}, 4), (std::vector<Dims>{{1, 1, 1, 1}}));
    EXPECT_EQ(factorizations(1, {}, 3), (std::vector<Dims>{{1, 1, 1}}));
    EXPECT_TRUE(factorizations(6, {}, 2).empty());
    EXPECT_EQ(factorizations(7, {2}, 3), (std::vector<Dims>{{1, 1, 7}}));
    EXPECT_EQ(factorizations(4, {2, 1}, 4), factorizations(4, {1, 2}, 4));  // axes in any order
}

TEST(Factorizations, LargeCoreCountsAreQuick) {
    // 2^40 over 3 axes: C(42, 2) ordered factorizations, found from the divisors alone.
    const auto all = factorizations(std::int64_t{1} << 40, {1, 2, 3}, 5);
    EXPECT_EQ(all.size(), 861u);
    EXPECT_EQ(all.front(), (Dims{1, 16384, 8192, 8192, 1}));
    EXPECT_TRUE(factorizations(1000003, {1, 2}, 4).size() == 2u);  // a prime: all on one axis
}

TEST(Factorizations, RejectsBadArguments) {
    EXPECT_THROW(factorizations(0, {1}, 4), Error);
    EXPECT_THROW(factorizations(4, {4}, 4), Error);
    EXPECT_THROW(factorizations(4, {-1}, 4), Error);
    EXPECT_THROW(factorizations(4, {1, 1}, 4), Error);
}

TEST(SpatialAxes, BetweenBatchAndChannels) {
    EXPECT_EQ(spatial_axes(4), (std::vector<int>{1, 2}));     // NHWC
    EXPECT_EQ(spatial_axes(5), (std::vector<int>{1, 2, 3}));  // NDHWC
    EXPECT_TRUE(spatial_axes(2).empty());
    EXPECT_TRUE(spatial_axes(1).empty());
}

// ---- placements --------------------------------------------------------------------------------

TEST(Placements, FourWayAlongHeightWithLabelsBroadcast) {
    const PartitionSpec spec{.num_cores_per_replica = 4, .features = InputPartition::of({1, 4, 1, 1})};
    const auto placed = placements(spec, InputSignature::tensor({2, 64, 48, 3}), InputSignature::tensor({2}));
    ASSERT_EQ(placed.size(), 2u);

    const TensorPlacement& image = placed[0];
    EXPECT_EQ(image.name, "features");
    EXPECT_FALSE(image.is_label);
    EXPECT_FALSE(image.key.has_value());
    EXPECT_EQ(image.kind, PlacementKind::Split);
    EXPECT_EQ(image.dims, (Dims{1, 4, 1, 1}));
    ASSERT_EQ(image.pieces.size(), 4u);
    for (std::int64_t core = 0; core < 4; ++core) {
        const TensorPiece* piece = image.piece_of_core(core);
        ASSERT_NE(piece, nullptr);
        EXPECT_EQ(piece->core, core);
        EXPECT_EQ(piece->index, (Dims{0, core, 0, 0}));
        EXPECT_EQ(piece->begin, (Shape{0, 16 * core, 0, 0}));
        EXPECT_EQ(piece->extent, (Shape{2, 16, 48, 3}));
    }
    EXPECT_EQ(image.piece_of_core(4), nullptr);

    const TensorPlacement& label = placed[1];
    EXPECT_EQ(label.name, "labels");
    EXPECT_TRUE(label.is_label);
    EXPECT_EQ(label.kind, PlacementKind::Broadcast);
    EXPECT_EQ(label.dims, (Dims{1}));
    ASSERT_EQ(label.pieces.size(), 4u);
    for (std::int64_t core = 0; core < 4; ++core) {
        EXPECT_EQ(label.pieces[static_cast<std::size_t>(core)], (TensorPiece{core, {0}, {0}, {2}}));
    }
}

TEST(Placements, DictTwoByTwoGridIsRowMajorLastAxisFastest) {
    const PartitionSpec spec{
        .num_cores_per_replica = 4,
        .features =
            InputPartition::dict({{"image", TensorPartition::of({1, 2, 2, 1})}, {"mask", TensorPartition::none()}}),
        .labels = InputPartition::dict({{"class_label", TensorPartition::of({1})}}),
    };
    const auto placed = placements(spec, InputSignature::dict({{"mask", {2, 64, 48, 1}}, {"image", {2, 64, 48, 3}}}),
                                   InputSignature::dict({{"class_label", {2}}}));
    ASSERT_EQ(placed.size(), 3u);
    EXPECT_EQ(placed[0].name, "features['image']");  // key order
    EXPECT_EQ(placed[0].key, "image");
    EXPECT_EQ(placed[1].name, "features['mask']");
    EXPECT_EQ(placed[2].name, "labels['class_label']");

    const TensorPlacement& image = placed[0];
    EXPECT_EQ(image.kind, PlacementKind::Split);
    const std::vector<TensorPiece> expected = {
        {0, {0, 0, 0, 0}, {0, 0, 0, 0}, {2, 32, 24, 3}},    // top-left
        {1, {0, 0, 1, 0}, {0, 0, 24, 0}, {2, 32, 24, 3}},   // top-right
        {2, {0, 1, 0, 0}, {0, 32, 0, 0}, {2, 32, 24, 3}},   // bottom-left
        {3, {0, 1, 1, 0}, {0, 32, 24, 0}, {2, 32, 24, 3}},  // bottom-right
    };
    EXPECT_EQ(image.pieces, expected);

    const TensorPlacement& mask = placed[1];
    EXPECT_EQ(mask.kind, PlacementKind::Broadcast);
    ASSERT_EQ(mask.pieces.size(), 4u);
    EXPECT_EQ(mask.piece_of_core(3)->extent, (Shape{2, 64, 48, 1}));

    const TensorPlacement& label = placed[2];
    EXPECT_EQ(label.kind, PlacementKind::CoreZeroOnly);
    EXPECT_TRUE(label.is_label);
    ASSERT_EQ(label.pieces.size(), 1u);
    EXPECT_EQ(label.pieces[0], (TensorPiece{0, {0}, {0}, {2}}));
    EXPECT_EQ(label.piece_of_core(1), nullptr);
}

TEST(Placements, SixteenWay3DPiecesTileTheVolumeExactlyOnce) {
    const PartitionSpec spec{.num_cores_per_replica = 16, .features = InputPartition::of({1, 2, 2, 4, 1})};
    const Shape shape{1, 4, 6, 8, 2};  // [N, D, H, W, C]
    const auto placed = placements(spec, InputSignature::tensor(shape), InputSignature::nothing());
    ASSERT_EQ(placed.size(), 1u);
    const TensorPlacement& volume = placed[0];
    ASSERT_EQ(volume.pieces.size(), 16u);

    // Core 5 = (d 0, h 1, w 1): 5 = 0·8 + 1·4 + 1.
    EXPECT_EQ(volume.pieces[5], (TensorPiece{5, {0, 0, 1, 1, 0}, {0, 0, 3, 2, 0}, {1, 2, 3, 2, 2}}));
    // Core 11 = (d 1, h 0, w 3).
    EXPECT_EQ(volume.pieces[11].index, (Dims{0, 1, 0, 3, 0}));
    EXPECT_EQ(volume.pieces[11].begin, (Shape{0, 2, 0, 6, 0}));

    std::vector<int> covered(static_cast<std::size_t>(num_elements_of(shape)), 0);
    const Shape strides = contiguous_strides(shape);
    for (const TensorPiece& piece : volume.pieces) {
        for (std::int64_t d = 0; d < piece.extent[1]; ++d)
            for (std::int64_t h = 0; h < piece.extent[2]; ++h)
                for (std::int64_t w = 0; w < piece.extent[3]; ++w)
                    for (std::int64_t c = 0; c < piece.extent[4]; ++c) {
                        const std::int64_t flat = (piece.begin[1] + d) * strides[1] +
                                                  (piece.begin[2] + h) * strides[2] +
                                                  (piece.begin[3] + w) * strides[3] + (piece.begin[4] + c) * strides[4];
                        ++covered[static_cast<std::size_t>(flat)];
                    }
    }
    for (int count : covered) EXPECT_EQ(count, 1);
}

TEST(Placements, HeaderExample) {
    PartitionSpec spec{
        .num_cores_per_replica = 4, .features = InputPartition::of({1, 4, 1, 1}), .labels = InputPartition::none()};
    const auto features = InputSignature::tensor({8, 512, 512, 3});
    const auto labels = InputSignature::tensor({8});
    validate(spec, features, labels);
    const auto placed = placements(spec, features, labels);
    for (std::int64_t core = 0; core < 4; ++core) {
        const TensorPiece& piece = placed[0].pieces[static_cast<std::size_t>(core)];
        EXPECT_EQ(piece.begin[1], 128 * core);
        EXPECT_EQ(piece.extent[1], 128);
    }
    EXPECT_EQ(spec.num_cores(), 4);
    spec.num_replicas = 2;
    EXPECT_EQ(spec.num_cores(), 8);
}

TEST(Placements, ValidatesFirst) {
    const PartitionSpec spec{.num_cores_per_replica = 4, .features = InputPartition::of({1, 3, 1, 1})};
    try {
        placements(spec, InputSignature::tensor({2, 64, 48, 3}), InputSignature::nothing());
        FAIL() << "expected an Error";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("multiply to 3 but num_cores_per_replica is 4"), std::string::npos);
    }
}

TEST(Placements, KindNames) {
    EXPECT_EQ(to_string(PlacementKind::Split), "split");
    EXPECT_EQ(to_string(PlacementKind::Broadcast), "broadcast");
    EXPECT_EQ(to_string(PlacementKind::CoreZeroOnly), "core 0 only");
}

}  // namespace
}  // namespace tessera::partition
