#include "detection/nms.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

namespace tessera::detection {

namespace {

bool is_finite(const Box& box) {
    return std::isfinite(box.x_min) && std::isfinite(box.y_min) && std::isfinite(box.x_max) && std::isfinite(box.y_max);
}

void check_inputs(const char* name, const std::vector<ScoredBox>& boxes, const NmsOptions& options) {
    TESSERA_CHECK(options.iou_threshold >= 0.0f && options.iou_threshold <= 1.0f,
                  name << ": expected an IoU threshold in [0, 1], got " << options.iou_threshold);
    for (std::size_t index = 0; index < boxes.size(); ++index) {
        const ScoredBox& box = boxes[index];
        TESSERA_CHECK(!std::isnan(box.score), name << ": box " << index << " has a NaN score; scores must be "
                                                   << "numbers (check the classifier's output for NaN)");
        TESSERA_CHECK(is_finite(box.box), name << ": box " << index << " has a non-finite corner [" << box.box.x_min
                                               << ", " << box.box.y_min << ", " << box.box.x_max << ", "
                                               << box.box.y_max << "]; expected finite pixels");
    }
}

// Input indices by score, highest first; equal scores by index, lowest first.
std::vector<std::size_t> visiting_order(const std::vector<ScoredBox>& boxes) {
    std::vector<std::size_t> order(boxes.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return boxes[a].score > boxes[b].score; });
    return order;
}

bool is_suppressed(const std::vector<ScoredBox>& boxes, const std::vector<std::size_t>& kept_of_group,
                   std::size_t candidate, float iou_threshold) {
    for (std::size_t kept : kept_of_group) {
        if (intersection_over_union(boxes[kept].box, boxes[candidate].box) > iou_threshold) return true;
    }
    return false;
}

// Greedy NMS where boxes of different groups never meet. Visiting boxes by score and keeping one unless
// an already kept box of its group overlaps it is the same as "keep the best, drop what it overlaps,
// repeat": a box dropped by a suppressed box is never compared with it.
template <typename GroupOf>
std::vector<std::size_t> greedy_suppression(const std::vector<ScoredBox>& boxes, const NmsOptions& options,
                                            GroupOf group_of) {
    std::vector<std::size_t> kept;
    std::unordered_map<std::int32_t, std::vector<std::size_t>> kept_by_group;
    for (std::size_t candidate : visiting_order(boxes)) {
        if (kept.size() >= options.max_detections) break;
        std::vector<std::size_t>& kept_of_group = kept_by_group[group_of(boxes[candidate])];
        if (is_suppressed(boxes, kept_of_group, candidate, options.iou_threshold)) continue;
        kept_of_group.push_back(candidate);
        kept.push_back(candidate);
    }
    return kept;
}

}  // namespace

std::vector<std::size_t> non_maximum_suppression(const std::vector<ScoredBox>& boxes, const NmsOptions& options) {
    check_inputs("non_maximum_suppression", boxes, options);
    return greedy_suppression(boxes, options, [](const ScoredBox&) { return std::int32_t{0}; });
}

std::vector<std::size_t> batched_non_maximum_suppression(const std::vector<ScoredBox>& boxes,
                                                         const NmsOptions& options) {
    check_inputs("batched_non_maximum_suppression", boxes, options);
    return greedy_suppression(boxes, options, [](const ScoredBox& box) { return box.class_id; });
}

}  // namespace tessera::detection
