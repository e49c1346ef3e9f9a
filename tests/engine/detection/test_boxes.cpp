// Box geometry: areas and IoU on hand-computed cases.
#include "detection/box.hpp"

#include <gtest/gtest.h>

namespace tessera::detection {
namespace {

TEST(Box, AreaAndEmptiness) {
    EXPECT_FLOAT_EQ((Box{0, 0, 10, 4}).area(), 40.0f);
    EXPECT_TRUE((Box{5, 5, 5, 9}).empty());   // zero width
    EXPECT_TRUE((Box{5, 5, 2, 9}).empty());   // inverted: a padding row, not a negative area
    EXPECT_FLOAT_EQ((Box{5, 5, 2, 9}).area(), 0.0f);
}

TEST(Box, IntersectionOverUnion) {
    const Box a{0, 0, 10, 10};
    EXPECT_FLOAT_EQ(intersection_over_union(a, a), 1.0f);
    EXPECT_FLOAT_EQ(intersection_over_union(a, {5, 0, 15, 10}), 50.0f / 150.0f);
    EXPECT_FLOAT_EQ(intersection_over_union(a, {2, 2, 4, 4}), 4.0f / 100.0f);   // contained
    EXPECT_FLOAT_EQ(intersection_over_union(a, {10, 0, 20, 10}), 0.0f);         // touching edges
    EXPECT_FLOAT_EQ(intersection_over_union({}, {}), 0.0f);                      // two empty boxes
}

}  // namespace
}  // namespace tessera::detection
