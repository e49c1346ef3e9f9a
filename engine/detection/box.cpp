#include "detection/box.hpp"

#include <algorithm>

namespace tessera::detection {

float intersection_area(const Box& a, const Box& b) {
    const Box overlap{std::max(a.x_min, b.x_min), std::max(a.y_min, b.y_min), std::min(a.x_max, b.x_max),
                      std::min(a.y_max, b.y_max)};
    return overlap.area();
}

float intersection_over_union(const Box& a, const Box& b) {
    const float intersection = intersection_area(a, b);
    const float union_area = a.area() + b.area() - intersection;
    return union_area > 0 ? intersection / union_area : 0.0f;
}

}  // namespace tessera::detection
