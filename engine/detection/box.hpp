// Boxes for detection, shared by anchors, matching, coding, NMS and evaluation.
//
// A box is its corners in input-image pixels, [x_min, y_min, x_max, y_max] (torchvision's order; x runs
// along W, y along H). As a tensor, M boxes are [M, 4] f32 in that order. A box with x_max ≤ x_min or
// y_max ≤ y_min is empty: area 0, IoU 0 with everything (padding rows of a static-shape ground truth
// are empty boxes).
//
//   Box a{0, 0, 10, 10}, b{5, 0, 15, 10};
//   intersection_over_union(a, b)   // 50 / 150 = 1/3
#pragma once

#include <cstdint>

namespace tessera::detection {

struct Box {
    float x_min = 0, y_min = 0, x_max = 0, y_max = 0;  // pixels

    float width() const { return x_max > x_min ? x_max - x_min : 0.0f; }
    float height() const { return y_max > y_min ? y_max - y_min : 0.0f; }
    float area() const { return width() * height(); }
    bool empty() const { return !(x_max > x_min && y_max > y_min); }
    bool operator==(const Box&) const = default;
};

// A ground-truth object: its box and class (0-based, contiguous; the data source maps dataset ids).
struct LabeledBox {
    Box box;
    std::int32_t class_id = 0;
};

// A detection: box, class and score in [0, 1].
struct ScoredBox {
    Box box;
    std::int32_t class_id = 0;
    float score = 0;
};

// Area of a ∩ b (0 when they do not overlap).
float intersection_area(const Box& a, const Box& b);
// |a ∩ b| / |a ∪ b|; 0 when the union is empty.
float intersection_over_union(const Box& a, const Box& b);

}  // namespace tessera::detection
