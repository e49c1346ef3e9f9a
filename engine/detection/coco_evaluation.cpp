#include "detection/coco_evaluation.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

namespace tessera::detection {

namespace {

constexpr std::size_t k_threshold_count = k_coco_iou_threshold_count;
constexpr std::size_t k_point_count = k_coco_recall_point_count;
constexpr std::size_t k_iou_50 = 0;  // index of 0.50 in coco_iou_thresholds()
constexpr std::size_t k_iou_75 = 5;  // index of 0.75

// pycocotools' areaRng: all, small, medium, large, in pixels². Bounds belong to both neighbours.
struct AreaRange {
    double min_area = 0;
    double max_area = 0;
};
constexpr std::size_t k_area_all = 0;
constexpr std::array<AreaRange, 4> k_area_ranges = {
    {{0, 1e10}, {0, 32.0 * 32.0}, {32.0 * 32.0, 96.0 * 96.0}, {96.0 * 96.0, 1e10}}};
constexpr std::size_t k_area_count = k_area_ranges.size();

bool outside(const AreaRange& range, double area) {
    return area < range.min_area || area > range.max_area;
}

// Per detection and threshold, what it counts as in the precision–recall curve.
enum class Outcome : std::uint8_t { FalsePositive, TruePositive, Ignored };

// One class at one area range: its detections over all images, in evaluation order.
struct ClassAccumulator {
    std::vector<float> scores;                  // [D]
    std::vector<Outcome> outcomes;              // [D, T]
    std::int64_t num_counted_ground_truth = 0;  // ground truth in the area range (pycocotools' npig)
};

// One class at one area range, accumulated.
struct ClassCurves {
    bool has_ground_truth = false;
    std::array<std::array<double, k_point_count>, k_threshold_count> precision{};  // [T, R]
    std::array<double, k_threshold_count> final_recall{};                          // [T]
};

// A detection or ground truth of one class in one image, in double as pycocotools computes.
struct EvaluatedBox {
    Box box;
    double area = 0;  // pixels²
};

double width_of(const Box& box) {
    return std::max(0.0, static_cast<double>(box.x_max) - box.x_min);
}
double height_of(const Box& box) {
    return std::max(0.0, static_cast<double>(box.y_max) - box.y_min);
}

// pycocotools' bbIou (maskApi.c) for a non-crowd ground truth, in double.
double box_iou(const EvaluatedBox& detection, const EvaluatedBox& truth) {
    const Box& d = detection.box;
    const Box& g = truth.box;
    const double overlap_width = std::min<double>(d.x_max, g.x_max) - std::max<double>(d.x_min, g.x_min);
    if (overlap_width <= 0) return 0;
    const double overlap_height = std::min<double>(d.y_max, g.y_max) - std::max<double>(d.y_min, g.y_min);
    if (overlap_height <= 0) return 0;
    const double intersection = overlap_width * overlap_height;
    return intersection / (detection.area + truth.area - intersection);
}

EvaluatedBox evaluated(const Box& box) {
    return {box, width_of(box) * height_of(box)};
}

bool is_finite(const Box& box) {
    return std::isfinite(box.x_min) && std::isfinite(box.y_min) && std::isfinite(box.x_max) && std::isfinite(box.y_max);
}

void check_box(const Box& box, std::int32_t class_id, std::int32_t num_classes, std::size_t image_index,
               const char* kind, std::size_t box_index) {
    TESSERA_CHECK(class_id >= 0 && class_id < num_classes,
                  "evaluate_coco: image " << image_index << ", " << kind << " " << box_index << " has class id "
                                          << class_id << "; expected a class id in [0, " << num_classes
                                          << ") (num_classes is " << num_classes
                                          << "; map dataset ids to contiguous 0-based ids)");
    TESSERA_CHECK(is_finite(box), "evaluate_coco: image " << image_index << ", " << kind << " " << box_index
                                                          << " has a non-finite corner; expected finite pixels");
}

void check_inputs(const std::vector<EvaluationImage>& images, std::int32_t num_classes,
                  const CocoEvaluationOptions& options) {
    TESSERA_CHECK(num_classes > 0, "evaluate_coco: expected at least one class, got num_classes " << num_classes);
    TESSERA_CHECK(options.max_detections_per_image > 0, "evaluate_coco: expected max_detections_per_image ≥ 1, got 0");
    for (std::size_t image_index = 0; image_index < images.size(); ++image_index) {
        const EvaluationImage& image = images[image_index];
        for (std::size_t i = 0; i < image.ground_truth.size(); ++i) {
            const LabeledBox& truth = image.ground_truth[i];
            check_box(truth.box, truth.class_id, num_classes, image_index, "ground truth", i);
        }
        for (std::size_t i = 0; i < image.detections.size(); ++i) {
            const ScoredBox& detection = image.detections[i];
            check_box(detection.box, detection.class_id, num_classes, image_index, "detection", i);
            TESSERA_CHECK(!std::isnan(detection.score), "evaluate_coco: image " << image_index << ", detection " << i
                                                                                << " has a NaN score; expected a "
                                                                                   "number (check the detector's "
                                                                                   "output for NaN)");
        }
    }
}

// The ground truth and detections of one class in one image; detections sorted by score (stable) and cut
// to the per-image limit, as pycocotools' evaluateImg.
struct ImageClass {
    std::vector<EvaluatedBox> ground_truth;  // [G]
    std::vector<EvaluatedBox> detections;    // [D]
    std::vector<float> scores;               // [D], non-increasing
    std::vector<double> ious;                // [D, G]
};

std::vector<ImageClass> split_by_class(const EvaluationImage& image, std::int32_t num_classes,
                                       std::size_t max_detections) {
    std::vector<ImageClass> classes(static_cast<std::size_t>(num_classes));
    for (const LabeledBox& truth : image.ground_truth) {
        classes[static_cast<std::size_t>(truth.class_id)].ground_truth.push_back(evaluated(truth.box));
    }
    std::vector<std::size_t> order(image.detections.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return image.detections[a].score > image.detections[b].score;
    });
    for (std::size_t index : order) {
        const ScoredBox& detection = image.detections[index];
        ImageClass& of_class = classes[static_cast<std::size_t>(detection.class_id)];
        if (of_class.detections.size() >= max_detections) continue;
        of_class.detections.push_back(evaluated(detection.box));
        of_class.scores.push_back(detection.score);
    }
    for (ImageClass& of_class : classes) {
        for (const EvaluatedBox& detection : of_class.detections) {
            for (const EvaluatedBox& truth : of_class.ground_truth) of_class.ious.push_back(box_iou(detection, truth));
        }
    }
    return classes;
}

// Ground-truth indices with those in the area range first (stable), and which of that order are ignored.
std::vector<std::size_t> ground_truth_order(const ImageClass& image, const AreaRange& range,
                                            std::vector<std::uint8_t>& ignored) {
    std::vector<std::size_t> order(image.ground_truth.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_partition(order.begin(), order.end(),
                          [&](std::size_t g) { return !outside(range, image.ground_truth[g].area); });
    ignored.clear();
    for (std::size_t g : order) ignored.push_back(outside(range, image.ground_truth[g].area) ? 1 : 0);
    return order;
}

// pycocotools' evaluateImg matching for one class, image and area range; appends to the accumulator.
void match_image_class(const ImageClass& image, const AreaRange& range,
                       const std::array<double, k_threshold_count>& thresholds, ClassAccumulator& accumulator) {
    std::vector<std::uint8_t> gt_ignored;  // [G], in gt_order
    const std::vector<std::size_t> gt_order = ground_truth_order(image, range, gt_ignored);
    const std::size_t gt_count = gt_order.size();
    const std::size_t det_count = image.detections.size();
    accumulator.num_counted_ground_truth += std::count(gt_ignored.begin(), gt_ignored.end(), std::uint8_t{0});
    const std::size_t first = accumulator.scores.size();
    accumulator.scores.insert(accumulator.scores.end(), image.scores.begin(), image.scores.end());
    accumulator.outcomes.resize(accumulator.scores.size() * k_threshold_count, Outcome::FalsePositive);
    constexpr std::size_t k_none = static_cast<std::size_t>(-1);
    for (std::size_t t = 0; t < k_threshold_count; ++t) {
        std::vector<std::uint8_t> gt_taken(gt_count, 0);
        for (std::size_t d = 0; d < det_count; ++d) {
            std::size_t best = k_none;
            double best_iou = std::min(thresholds[t], 1 - 1e-10);
            for (std::size_t g = 0; g < gt_count; ++g) {
                if (gt_taken[g]) continue;
                // Matched to a counted ground truth: ignored ones (all after it) cannot take it.
                if (best != k_none && !gt_ignored[best] && gt_ignored[g]) break;
                const double iou = image.ious[d * gt_count + gt_order[g]];
                if (iou < best_iou) continue;  // so a later ground truth of equal IoU wins, as in pycocotools
                best_iou = iou;
                best = g;
            }
            Outcome& outcome = accumulator.outcomes[(first + d) * k_threshold_count + t];
            if (best == k_none) {
                outcome = outside(range, image.detections[d].area) ? Outcome::Ignored : Outcome::FalsePositive;
            } else {
                gt_taken[best] = 1;
                outcome = gt_ignored[best] ? Outcome::Ignored : Outcome::TruePositive;
            }
        }
    }
}

// pycocotools' accumulate for one class at one area range.
ClassCurves accumulate(const ClassAccumulator& accumulator, const std::array<double, k_point_count>& points) {
    ClassCurves curves;
    curves.has_ground_truth = accumulator.num_counted_ground_truth > 0;
    if (!curves.has_ground_truth) return curves;
    std::vector<std::size_t> order(accumulator.scores.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return accumulator.scores[a] > accumulator.scores[b]; });
    const double counted = static_cast<double>(accumulator.num_counted_ground_truth);
    std::vector<double> recall(order.size());     // [D], non-decreasing
    std::vector<double> precision(order.size());  // [D]
    for (std::size_t t = 0; t < k_threshold_count; ++t) {
        double true_positives = 0;
        double false_positives = 0;
        for (std::size_t i = 0; i < order.size(); ++i) {
            const Outcome outcome = accumulator.outcomes[order[i] * k_threshold_count + t];
            true_positives += outcome == Outcome::TruePositive ? 1 : 0;
            false_positives += outcome == Outcome::FalsePositive ? 1 : 0;
            recall[i] = true_positives / counted;
            const double seen = true_positives + false_positives;  // 0 only before the first counted one
            precision[i] = seen > 0 ? true_positives / seen : 0;
        }
        curves.final_recall[t] = recall.empty() ? 0 : recall.back();
        for (std::size_t i = precision.size(); i-- > 1;) precision[i - 1] = std::max(precision[i - 1], precision[i]);
        for (std::size_t r = 0; r < k_point_count; ++r) {
            const auto reached = std::lower_bound(recall.begin(), recall.end(), points[r]);
            curves.precision[t][r] =
                reached == recall.end() ? 0 : precision[static_cast<std::size_t>(reached - recall.begin())];
        }
    }
    return curves;
}

double mean_of(const double* values, std::size_t count) {
    return std::accumulate(values, values + count, 0.0) / static_cast<double>(count);
}

CocoClassResult class_result(std::int32_t class_id, std::int64_t num_ground_truth, const ClassCurves& curves) {
    CocoClassResult row;
    row.class_id = class_id;
    row.num_ground_truth = num_ground_truth;
    row.ap_per_threshold.fill(-1);
    if (!curves.has_ground_truth) return row;
    for (std::size_t t = 0; t < k_threshold_count; ++t) {
        row.ap_per_threshold[t] = mean_of(curves.precision[t].data(), k_point_count);
    }
    row.ap = mean_of(row.ap_per_threshold.data(), k_threshold_count);
    row.ap50 = row.ap_per_threshold[k_iou_50];
    row.ap75 = row.ap_per_threshold[k_iou_75];
    row.recall = mean_of(curves.final_recall.data(), k_threshold_count);
    row.precision_at_iou_50.assign(curves.precision[k_iou_50].begin(), curves.precision[k_iou_50].end());
    return row;
}

// Mean of a per-class quantity over the classes that have it (≥ 0); -1 when none has it.
template <typename Quantity>
double mean_over_classes(std::size_t num_classes, Quantity quantity) {
    double sum = 0;
    std::size_t count = 0;
    for (std::size_t k = 0; k < num_classes; ++k) {
        const double value = quantity(k);
        if (value < 0) continue;
        sum += value;
        ++count;
    }
    return count > 0 ? sum / static_cast<double>(count) : -1;
}

double sized_ap(const ClassCurves& curves) {
    if (!curves.has_ground_truth) return -1;
    double sum = 0;
    for (const auto& precision : curves.precision) sum += mean_of(precision.data(), k_point_count);
    return sum / static_cast<double>(k_threshold_count);
}

}  // namespace

std::array<double, k_coco_iou_threshold_count> coco_iou_thresholds() {
    std::array<double, k_coco_iou_threshold_count> thresholds{};
    const double step = (0.95 - 0.5) / static_cast<double>(k_coco_iou_threshold_count - 1);
    for (std::size_t i = 0; i < thresholds.size(); ++i) thresholds[i] = static_cast<double>(i) * step + 0.5;
    thresholds.back() = 0.95;
    return thresholds;
}

std::array<double, k_coco_recall_point_count> coco_recall_points() {
    std::array<double, k_coco_recall_point_count> points{};
    const double step = 1.0 / static_cast<double>(k_coco_recall_point_count - 1);
    for (std::size_t i = 0; i < points.size(); ++i) points[i] = static_cast<double>(i) * step + 0.0;
    points.back() = 1.0;
    return points;
}

CocoEvaluation evaluate_coco(const std::vector<EvaluationImage>& images, std::int32_t num_classes,
                             const CocoEvaluationOptions& options) {
    check_inputs(images, num_classes, options);
    const std::size_t class_count = static_cast<std::size_t>(num_classes);
    const auto thresholds = coco_iou_thresholds();
    std::vector<std::array<ClassAccumulator, k_area_count>> accumulators(class_count);  // [K, A]
    std::vector<std::int64_t> ground_truth_counts(class_count, 0);
    for (const EvaluationImage& image : images) {
        const std::vector<ImageClass> by_class = split_by_class(image, num_classes, options.max_detections_per_image);
        for (std::size_t k = 0; k < class_count; ++k) {
            ground_truth_counts[k] += static_cast<std::int64_t>(by_class[k].ground_truth.size());
            if (by_class[k].ground_truth.empty() && by_class[k].detections.empty()) continue;
            for (std::size_t a = 0; a < k_area_count; ++a) {
                match_image_class(by_class[k], k_area_ranges[a], thresholds, accumulators[k][a]);
            }
        }
    }
    const auto points = coco_recall_points();
    CocoEvaluation result;
    std::vector<std::array<ClassCurves, k_area_count>> curves(class_count);
    for (std::size_t k = 0; k < class_count; ++k) {
        for (std::size_t a = 0; a < k_area_count; ++a) curves[k][a] = accumulate(accumulators[k][a], points);
        result.per_class.push_back(
            class_result(static_cast<std::int32_t>(k), ground_truth_counts[k], curves[k][k_area_all]));
        result.num_classes_with_ground_truth += curves[k][k_area_all].has_ground_truth ? 1 : 0;
    }
    const auto& rows = result.per_class;
    result.ap = mean_over_classes(class_count, [&](std::size_t k) { return rows[k].ap; });
    result.ap50 = mean_over_classes(class_count, [&](std::size_t k) { return rows[k].ap50; });
    result.ap75 = mean_over_classes(class_count, [&](std::size_t k) { return rows[k].ap75; });
    result.ar100 = mean_over_classes(class_count, [&](std::size_t k) { return rows[k].recall; });
    result.ap_small = mean_over_classes(class_count, [&](std::size_t k) { return sized_ap(curves[k][1]); });
    result.ap_medium = mean_over_classes(class_count, [&](std::size_t k) { return sized_ap(curves[k][2]); });
    result.ap_large = mean_over_classes(class_count, [&](std::size_t k) { return sized_ap(curves[k][3]); });
    return result;
}

std::vector<DetectionMatch> match_detections(const EvaluationImage& image, double iou_threshold,
                                             std::size_t max_detections_per_image) {
    std::vector<DetectionMatch> matches(image.detections.size());
    std::vector<std::size_t> order(image.detections.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return image.detections[a].score > image.detections[b].score; });
    std::vector<std::uint8_t> taken(image.ground_truth.size(), 0);
    std::map<std::int32_t, std::size_t> used_per_class;
    for (std::size_t d : order) {
        const ScoredBox& detection = image.detections[d];
        if (used_per_class[detection.class_id]++ >= max_detections_per_image) continue;
        const EvaluatedBox candidate = evaluated(detection.box);
        double best_iou = std::min(iou_threshold, 1 - 1e-10);
        std::int32_t best = -1;
        for (std::size_t g = 0; g < image.ground_truth.size(); ++g) {
            if (taken[g] || image.ground_truth[g].class_id != detection.class_id) continue;
            const double iou = box_iou(candidate, evaluated(image.ground_truth[g].box));
            if (iou < best_iou) continue;
            best_iou = iou;
            best = static_cast<std::int32_t>(g);
        }
        if (best >= 0) {
            taken[static_cast<std::size_t>(best)] = 1;
            matches[d] = {best, best_iou};
        }
    }
    return matches;
}

}  // namespace tessera::detection
