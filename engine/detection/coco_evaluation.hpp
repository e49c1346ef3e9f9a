// COCO-style detection evaluation: pycocotools' COCOeval for boxes (iouType "bbox"), without crowd regions.
//
// Per class and image, detections (the top max_detections_per_image by score) are matched greedily,
// highest score first, at each IoU threshold t in 0.50, 0.55, …, 0.95: a detection takes the unmatched
// ground truth of highest IoU ≥ t (IoU equal to t matches). Per class, the detections of all images are
// merged by score (stable: image order, then score order within an image), give cumulative precision and
// recall, and the precision, made non-increasing from the right, is read at the 101 recall points
// 0, 0.01, …, 1 (0 past the last recall reached). AP is the mean of those 101 values; recall is the
// final recall. Class means cover only classes with ground truth (pycocotools reports -1 for the rest;
// so do these fields). AP_small/medium/large count only ground truth whose box area is < 32², in
// [32², 96²], > 96² pixels²; a detection that matches nothing and has an area out of range is not counted.
// IoUs and areas are computed in double, as pycocotools does. An empty box (box.hpp: x_max ≤ x_min or
// y_max ≤ y_min) has area 0 and IoU 0, so an empty detection is a false positive (pycocotools would give
// a box of negative width a negative area and ignore it).
//
//   std::vector<EvaluationImage> images = ...;     // per image: ground truth and detections
//   CocoEvaluation result = evaluate_coco(images, /*num_classes*/ 20);
//   result.ap;                                      // AP@[.5:.95]; also ap50, ap75, ar100
//   result.per_class[3].precision_at_iou_50;        // [101], for a PR chart against coco_recall_points()
#pragma once

#include "detection/box.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera::detection {

inline constexpr std::size_t k_coco_iou_threshold_count = 10;
inline constexpr std::size_t k_coco_recall_point_count = 101;

// pycocotools' thresholds bit for bit: numpy's linspace gives 0.5 + i·(0.45 / 9), so the 9th is
// 0.8999999999999999, and i·0.01 for the recall points (i·0.01 is not always i/100).
std::array<double, k_coco_iou_threshold_count> coco_iou_thresholds();
std::array<double, k_coco_recall_point_count> coco_recall_points();

struct EvaluationImage {
    std::vector<LabeledBox> ground_truth;  // class ids in [0, num_classes)
    std::vector<ScoredBox> detections;     // class ids in [0, num_classes), scores not NaN
};

struct CocoEvaluationOptions {
    std::size_t max_detections_per_image = 100;  // per image and class, highest scores first (maxDets)
};

struct CocoClassResult {
    std::int32_t class_id = 0;
    std::int64_t num_ground_truth = 0;
    // -1 (as pycocotools) when the class has no ground truth.
    double ap = -1;  // mean of ap_per_threshold
    double ap50 = -1;
    double ap75 = -1;
    double recall = -1;  // final recall at max_detections_per_image, mean over the thresholds (AR)
    std::array<double, k_coco_iou_threshold_count> ap_per_threshold{};  // at coco_iou_thresholds()
    std::vector<double> precision_at_iou_50;  // [101] at coco_recall_points(); empty without ground truth
};

struct CocoEvaluation {
    // Means over the classes with ground truth (in the area range, for the sized ones); -1 when none.
    double ap = -1;  // AP@[.5:.95]
    double ap50 = -1;
    double ap75 = -1;
    double ar100 = -1;  // AR at max_detections_per_image (100 by default)
    double ap_small = -1;
    double ap_medium = -1;
    double ap_large = -1;
    std::int32_t num_classes_with_ground_truth = 0;
    std::vector<CocoClassResult> per_class;  // [num_classes], by class id
};

CocoEvaluation evaluate_coco(const std::vector<EvaluationImage>& images, std::int32_t num_classes,
                             const CocoEvaluationOptions& options = {});

// One detection's outcome at a single IoU threshold, for drawing matched / false-positive / missed boxes:
// the ground truth it matched (an index into EvaluationImage::ground_truth) or -1, and their IoU.
struct DetectionMatch {
    std::int32_t ground_truth = -1;
    double iou = 0;
};
// The matching evaluate_coco does at one threshold, on one image: per class, detections by score (highest
// first, ties in list order), each taking the unmatched ground truth of the same class with the highest IoU
// ≥ iou_threshold (equal IoUs: the later one, as pycocotools). Only each class's max_detections_per_image
// highest-scoring detections take part. Returns one entry per detection, in the detections' order.
std::vector<DetectionMatch> match_detections(const EvaluationImage& image, double iou_threshold = 0.5,
                                             std::size_t max_detections_per_image = 100);

}  // namespace tessera::detection
