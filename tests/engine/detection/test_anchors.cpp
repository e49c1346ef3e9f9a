// Anchors: counts, coordinates and order worked out by hand (TPU RetinaNet convention), and the cells a
// tile owns. Coordinates are f32 of a double computation: compared within 1e-4 px.
#include "detection/anchors.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace tessera::detection {
namespace {

constexpr float k_pixel_tolerance = 1e-4f;

void expect_box_near(const Box& actual, const Box& expected, const std::string& what) {
    EXPECT_NEAR(actual.x_min, expected.x_min, k_pixel_tolerance) << what;
    EXPECT_NEAR(actual.y_min, expected.y_min, k_pixel_tolerance) << what;
    EXPECT_NEAR(actual.x_max, expected.x_max, k_pixel_tolerance) << what;
    EXPECT_NEAR(actual.y_max, expected.y_max, k_pixel_tolerance) << what;
}

TEST(Anchors, CountsOfDefault256) {
    // 256×256, levels 3..7: maps 32², 16², 8², 4², 2² = 1024 + 256 + 64 + 16 + 4 = 1364 cells, 9 anchors
    // each: 12,276 anchors.
    const AnchorSet anchors = make_anchors(256, 256);
    ASSERT_EQ(anchors.levels.size(), 5u);
    EXPECT_EQ(anchors.count(), 12276);
    EXPECT_EQ(anchors.anchors_per_cell(), 9);
    const std::int64_t expected_sides[] = {32, 16, 8, 4, 2};
    std::int64_t first = 0;
    for (std::size_t l = 0; l < 5; ++l) {
        EXPECT_EQ(anchors.levels[l].stride, std::int64_t{1} << (l + 3));
        EXPECT_EQ(anchors.levels[l].height, expected_sides[l]);
        EXPECT_EQ(anchors.levels[l].width, expected_sides[l]);
        EXPECT_EQ(anchors.levels[l].first_index, first);
        first += expected_sides[l] * expected_sides[l] * 9;
    }
    // 1280×1280 (the TPU's single-core size): 160² + 80² + 40² + 20² + 10² = 34,100 cells → 306,900.
    EXPECT_EQ(make_anchors(1280, 1280).count(), 306900);
}

TEST(Anchors, CoordinatesOfDefault256) {
    const AnchorSet anchors = make_anchors(256, 256);
    // Level 3 (stride 8), cell (0, 0): centre (4, 4). Octave 0, ratio 1: size 4·8 = 32 → [−12, −12, 20, 20].
    expect_box_near(anchors.boxes[0], {-12, -12, 20, 20}, "level 3, anchor 0");
    // Ratio 2 (anchor 1): 32·√2 = 45.254834 wide, 32/√2 = 22.627417 high.
    expect_box_near(anchors.boxes[1], {-18.627417f, -7.3137085f, 26.627417f, 15.3137085f}, "level 3, anchor 1");
    // Ratio 0.5 (anchor 2): the transpose.
    expect_box_near(anchors.boxes[2], {-7.3137085f, -18.627417f, 15.3137085f, 26.627417f}, "level 3, anchor 2");
    // Octave 1, ratio 1 (anchor 3 = 1·3 + 0): size 32·2^(1/3) = 40.317474 → 4 ∓ 20.158737.
    expect_box_near(anchors.boxes[3], {-16.158737f, -16.158737f, 24.158737f, 24.158737f}, "level 3, anchor 3");
    // Row 1, column 2 of level 3: global index (1·32 + 2)·9 = 306, centre (x, y) = (20, 12) → [4, −4, 36, 28].
    EXPECT_EQ(anchors.levels[0].index_of(1, 2, 0), 306);
    expect_box_near(anchors.boxes[306], {4, -4, 36, 28}, "level 3, row 1, column 2");
    // Level 7 (stride 128) starts at 1360·9 = 12,240; its first anchor: centre (64, 64), size 512.
    EXPECT_EQ(anchors.levels[4].first_index, 12240);
    expect_box_near(anchors.boxes[12240], {-192, -192, 320, 320}, "level 7, anchor 0");
    // The last anchor: level 7, cell (1, 1) centre (192, 192), octave 2, ratio 0.5: s = 512·2^(2/3) =
    // 812.74934, width s·√0.5 = 574.70057, height s/√0.5 = 1149.4011.
    expect_box_near(anchors.boxes.back(), {-95.350284f, -382.70057f, 479.35028f, 766.70057f}, "last anchor");
    // The tensor form is the same boxes, [M, 4].
    const Tensor tensor = anchors.box_tensor();
    EXPECT_EQ(tensor.shape(), (Shape{12276, 4}));
    EXPECT_EQ(tensor.at<float>({306, 1}), -4.0f);
}

TEST(Anchors, CeilingFeatureMapsAndExplicitSizes) {
    // 100×60 at levels 3..4: ceil(100/8) = 13 × ceil(60/8) = 8, ceil(100/16) = 7 × ceil(60/16) = 4.
    AnchorOptions options;
    options.min_level = 3;
    options.max_level = 4;
    const AnchorSet anchors = make_anchors(100, 60, options);
    EXPECT_EQ(anchors.levels[0].height, 13);
    EXPECT_EQ(anchors.levels[0].width, 8);
    EXPECT_EQ(anchors.levels[1].height, 7);
    EXPECT_EQ(anchors.levels[1].width, 4);
    EXPECT_EQ(anchors.count(), (13 * 8 + 7 * 4) * 9);

    // Explicit sizes (torchvision's level-3 sizes 32, 40, 50 here), one ratio: anchor 1 is 40 wide at (4, 4).
    AnchorOptions explicit_sizes;
    explicit_sizes.min_level = 3;
    explicit_sizes.max_level = 3;
    explicit_sizes.aspect_ratios = {1.0};
    explicit_sizes.sizes_per_level = {{32, 40, 50}};
    const AnchorSet sized = make_anchors(64, 64, explicit_sizes);
    EXPECT_EQ(sized.anchors_per_cell(), 3);
    expect_box_near(sized.boxes[1], {-16, -16, 24, 24}, "explicit size 40");
    expect_box_near(sized.boxes[2], {-21, -21, 29, 29}, "explicit size 50");
}

TEST(Anchors, RejectsBadOptions) {
    AnchorOptions options;
    options.aspect_ratios = {1.0, -2.0};
    EXPECT_THROW(make_anchors(256, 256, options), Error);
    options = {};
    options.sizes_per_level = {{32}, {64, 80}, {128}, {256}, {512}};  // lengths differ: A would vary by level
    EXPECT_THROW(make_anchors(256, 256, options), Error);
    EXPECT_THROW(make_anchors(0, 256), Error);
}

TEST(Anchors, CellsATileOwns) {
    const AnchorSet anchors = make_anchors(256, 256);
    // Region y ∈ [0, 128), x ∈ [128, 256). Level 3 (stride 8): centres (i + 0.5)·8 ∈ [0, 128) ⇔ i ∈ [0, 16);
    // columns j ∈ [16, 32). Level 7 (stride 128): centres 64 and 192: row 0, column 1.
    const PixelRegion top_right{0, 128, 128, 256};
    const CellRange level3 = cells_in_region(anchors.levels[0], top_right);
    EXPECT_EQ(level3.row_begin, 0);
    EXPECT_EQ(level3.row_end, 16);
    EXPECT_EQ(level3.column_begin, 16);
    EXPECT_EQ(level3.column_end, 32);
    const CellRange level7 = cells_in_region(anchors.levels[4], top_right);
    EXPECT_EQ(level7.row_begin, 0);
    EXPECT_EQ(level7.row_end, 1);
    EXPECT_EQ(level7.column_begin, 1);
    EXPECT_EQ(level7.column_end, 2);
    // A boundary off the stride grid: y ∈ [0, 100) at level 5 (stride 32): centres 16, 48, 80 → rows [0, 3).
    const CellRange level5 = cells_in_region(anchors.levels[2], {0, 100, 0, 256});
    EXPECT_EQ(level5.row_begin, 0);
    EXPECT_EQ(level5.row_end, 3);
    // A centre on the boundary belongs to the region that begins there: level 3, y ∈ [100, 170): centre
    // 100 = (12 + 0.5)·8 is in (row 12), 164 = (20 + 0.5)·8 is in, 172 = (21 + 0.5)·8 is out: rows [12, 21).
    const CellRange band = cells_in_region(anchors.levels[0], {100, 170, 0, 256});
    EXPECT_EQ(band.row_begin, 12);
    EXPECT_EQ(band.row_end, 21);
    // A region past the image owns nothing beyond the map.
    EXPECT_EQ(cells_in_region(anchors.levels[0], {200, 400, 0, 256}).row_end, 32);
}

TEST(Anchors, UnevenTilesPartitionTheAnchors) {
    // Tiles cut at 100 and 170 in y and 60 in x (not multiples of any stride): every anchor is owned once.
    const AnchorSet anchors = make_anchors(256, 256);
    const std::int64_t y_cuts[] = {0, 100, 170, 256};
    const std::int64_t x_cuts[] = {0, 60, 256};
    std::vector<int> owners(static_cast<std::size_t>(anchors.count()), 0);
    for (int ty = 0; ty < 3; ++ty) {
        for (int tx = 0; tx < 2; ++tx) {
            const PixelRegion tile{y_cuts[ty], y_cuts[ty + 1], x_cuts[tx], x_cuts[tx + 1]};
            const std::vector<std::int64_t> owned = anchor_indices_in_region(anchors, tile);
            EXPECT_TRUE(std::is_sorted(owned.begin(), owned.end()));
            for (std::int64_t index : owned) {
                ++owners[static_cast<std::size_t>(index)];
                const Box& box = anchors.boxes[static_cast<std::size_t>(index)];
                const float centre_y = (box.y_min + box.y_max) / 2;
                const float centre_x = (box.x_min + box.x_max) / 2;
                // Centres from f32 corners carry rounding; the exact boundary rule is tested above.
                EXPECT_TRUE(centre_y > static_cast<float>(tile.y_begin) - 1e-3f &&
                            centre_y < static_cast<float>(tile.y_end));
                EXPECT_TRUE(centre_x > static_cast<float>(tile.x_begin) - 1e-3f &&
                            centre_x < static_cast<float>(tile.x_end));
            }
        }
    }
    EXPECT_TRUE(std::all_of(owners.begin(), owners.end(), [](int count) { return count == 1; }));
}

}  // namespace
}  // namespace tessera::detection
