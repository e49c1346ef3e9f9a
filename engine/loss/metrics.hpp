// Segmentation and classification metrics: a confusion matrix counted per tile, and the scores
// (per-class Dice and IoU, accuracy) computed from the matrix summed over tiles.
//
// Predictions are either logits [N, C, ...spatial] (the argmax over C; ties go to the lowest class,
// as argmax does in TensorFlow and PyTorch) or i32 predicted labels of the labels' shape. Labels are
// i32 [N, ...spatial]; [N, C] logits with [N] labels is classification. Voxels whose label is the
// ignore label are not counted. From the matrix, for class c:
//
//   TP = M[c][c],  FP = Σ_t M[t][c] − TP,  FN = Σ_p M[c][p] − TP      (M[truth][predicted])
//   dice_c = 2 TP / (2 TP + FP + FN),  iou_c = TP / (TP + FP + FN),   accuracy = Σ_c TP / Σ M
//
// A class absent from both prediction and truth (TP + FP + FN = 0) has no score: it is flagged
// is_present = false, its dice and iou read 0 (never NaN), and it is left out of the means. A mean
// over no present class is 1: nothing was there and nothing was predicted. Accuracy over no counted
// voxel is 0.
//
// Counts add exactly, so tiling changes nothing:
//
//   ConfusionMatrix total = confusion_matrix_from_logits(logits_a, labels_a)
//                         + confusion_matrix_from_logits(logits_b, labels_b);
//   SegmentationScores scores = segmentation_scores(total, {.exclude_background = true});
//   // scores.classes[c].dice, scores.mean_dice, scores.mean_iou, scores.accuracy
#pragma once

#include "tensor/tensor.hpp"

#include <cstdint>
#include <optional>
#include <vector>

namespace tessera::loss {

struct MetricOptions {
    std::optional<std::int32_t> ignore_label;  // voxels with this label are not counted
};

// The partial counts of every metric; add them over tiles. A default-constructed matrix has no
// classes and adds as zero.
struct ConfusionMatrix {
    std::int64_t num_classes = 0;
    std::vector<std::int64_t> counts;  // [truth, predicted]: counts[truth * num_classes + predicted]
    std::int64_t num_ignored = 0;      // voxels with the ignore label

    std::int64_t at(std::int64_t truth, std::int64_t predicted) const;
    std::int64_t total() const;  // voxels counted
    ConfusionMatrix& operator+=(const ConfusionMatrix& other);  // same num_classes, or either empty
};
ConfusionMatrix operator+(ConfusionMatrix a, const ConfusionMatrix& b);

// logits [N, C, ...] f32, labels [N, ...] i32.
ConfusionMatrix confusion_matrix_from_logits(const Tensor& logits, const Tensor& labels,
                                             const MetricOptions& options = {});
// predicted [N, ...] i32 in [0, num_classes), labels [N, ...] i32 of the same shape.
ConfusionMatrix confusion_matrix(const Tensor& predicted, const Tensor& labels, std::int64_t num_classes,
                                 const MetricOptions& options = {});

struct ClassScores {
    bool is_present = false;  // in the truth or in the prediction
    double dice = 0;          // 0 when not present
    double iou = 0;           // 0 when not present
    std::int64_t true_positives = 0;
    std::int64_t false_positives = 0;
    std::int64_t false_negatives = 0;
};

struct ScoreOptions {
    bool exclude_background = false;  // leave class 0 out of mean_dice and mean_iou
};

struct SegmentationScores {
    std::vector<ClassScores> classes;  // [C]
    double mean_dice = 1;              // over present classes (background per options)
    double mean_iou = 1;
    std::int64_t num_classes_in_mean = 0;
    double accuracy = 0;               // correct voxels / counted voxels
};

SegmentationScores segmentation_scores(const ConfusionMatrix& matrix, const ScoreOptions& options = {});
double accuracy(const ConfusionMatrix& matrix);  // 0 when nothing was counted

}  // namespace tessera::loss
