#include "loss/metrics.hpp"

#include "loss/class_layout.hpp"

#include <algorithm>

namespace tessera::loss {

namespace {

constexpr std::int64_t k_block = 256;

ConfusionMatrix empty_matrix(std::int64_t num_classes) {
    ConfusionMatrix matrix;
    matrix.num_classes = num_classes;
    matrix.counts.assign(static_cast<std::size_t>(num_classes * num_classes), 0);
    return matrix;
}

// Adds one voxel; the label is checked here, the prediction by the caller.
inline void count_voxel(ConfusionMatrix& matrix, std::int32_t truth, std::int32_t predicted, bool has_ignore,
                        std::int32_t ignore, const char* what, const Shape& labels_shape, std::int64_t flat_index) {
    if (truth >= 0 && truth < matrix.num_classes) {
        ++matrix.counts[static_cast<std::size_t>(truth * matrix.num_classes + predicted)];
    } else if (has_ignore && truth == ignore) {
        ++matrix.num_ignored;
    } else {
        detail::throw_bad_label(what, labels_shape, flat_index, truth, matrix.num_classes,
                                has_ignore ? std::optional<std::int32_t>(ignore) : std::nullopt);
    }
}

}  // namespace

std::int64_t ConfusionMatrix::at(std::int64_t truth, std::int64_t predicted) const {
    TESSERA_CHECK(truth >= 0 && truth < num_classes && predicted >= 0 && predicted < num_classes,
                  "ConfusionMatrix::at: expected classes in [0, " << num_classes << "), got truth " << truth
                                                                   << " and predicted " << predicted);
    return counts[static_cast<std::size_t>(truth * num_classes + predicted)];
}

std::int64_t ConfusionMatrix::total() const {
    std::int64_t sum = 0;
    for (std::int64_t count : counts) sum += count;
    return sum;
}

ConfusionMatrix& ConfusionMatrix::operator+=(const ConfusionMatrix& other) {
    if (other.num_classes == 0) {
        num_ignored += other.num_ignored;
        return *this;
    }
    if (num_classes == 0) {
        const std::int64_t ignored = num_ignored;
        *this = other;
        num_ignored += ignored;
        return *this;
    }
    TESSERA_CHECK(other.num_classes == num_classes,
                  "ConfusionMatrix: expected matrices of the same number of classes, got " << num_classes << " and "
                                                                                            << other.num_classes);
    for (std::size_t i = 0; i < counts.size(); ++i) counts[i] += other.counts[i];
    num_ignored += other.num_ignored;
    return *this;
}

ConfusionMatrix operator+(ConfusionMatrix a, const ConfusionMatrix& b) {
    a += b;
    return a;
}

ConfusionMatrix confusion_matrix_from_logits(const Tensor& logits_in, const Tensor& labels_in,
                                             const MetricOptions& options) {
    constexpr const char* what = "confusion_matrix_from_logits";
    const detail::ClassLayout layout = detail::check_logits_and_labels(what, logits_in, labels_in);
    const Tensor logits = logits_in.contiguous();
    const Tensor labels = labels_in.contiguous();
    ConfusionMatrix matrix = empty_matrix(layout.classes);
    const std::int64_t classes = layout.classes;
    const std::int64_t spatial = layout.spatial;
    const bool has_ignore = options.ignore_label.has_value();
    const std::int32_t ignore = options.ignore_label.value_or(0);
    const float* z_all = logits.data<float>();
    const std::int32_t* y_all = labels.data<std::int32_t>();

    alignas(64) float best[k_block];
    alignas(64) std::int32_t best_class[k_block];
    for (std::int64_t n = 0; n < layout.batch; ++n) {
        for (std::int64_t s0 = 0; s0 < spatial; s0 += k_block) {
            const std::int64_t len = std::min(k_block, spatial - s0);
            const float* z = z_all + n * classes * spatial + s0;
            for (std::int64_t j = 0; j < len; ++j) {
                best[j] = z[j];
                best_class[j] = 0;
            }
            for (std::int64_t c = 1; c < classes; ++c) {
                const float* row = z + c * spatial;
                const auto class_index = static_cast<std::int32_t>(c);
                for (std::int64_t j = 0; j < len; ++j) {
                    const bool is_better = row[j] > best[j];  // strict: ties keep the lower class
                    best[j] = is_better ? row[j] : best[j];
                    best_class[j] = is_better ? class_index : best_class[j];
                }
            }
            const std::int64_t label_offset = n * spatial + s0;
            for (std::int64_t j = 0; j < len; ++j) {
                count_voxel(matrix, y_all[label_offset + j], best_class[j], has_ignore, ignore, what, labels.shape(),
                            label_offset + j);
            }
        }
    }
    return matrix;
}

ConfusionMatrix confusion_matrix(const Tensor& predicted_in, const Tensor& labels_in, std::int64_t num_classes,
                                 const MetricOptions& options) {
    constexpr const char* what = "confusion_matrix";
    TESSERA_CHECK(num_classes >= 1, what << ": expected at least one class, got " << num_classes);
    TESSERA_CHECK(predicted_in.is_defined() && labels_in.is_defined(),
                  what << ": expected predicted and true labels, got an empty tensor");
    TESSERA_CHECK(predicted_in.dtype() == DType::I32,
                  what << ": expected i32 predicted labels, got " << dtype_name(predicted_in.dtype()));
    TESSERA_CHECK(labels_in.dtype() == DType::I32,
                  what << ": expected i32 labels, got " << dtype_name(labels_in.dtype()));
    TESSERA_CHECK(predicted_in.shape() == labels_in.shape(),
                  what << ": expected predicted labels of the labels' shape " << shape_to_string(labels_in.shape())
                       << ", got " << shape_to_string(predicted_in.shape()));
    const Tensor predicted = predicted_in.contiguous();
    const Tensor labels = labels_in.contiguous();
    ConfusionMatrix matrix = empty_matrix(num_classes);
    const bool has_ignore = options.ignore_label.has_value();
    const std::int32_t ignore = options.ignore_label.value_or(0);
    const std::int32_t* p = predicted.data<std::int32_t>();
    const std::int32_t* y = labels.data<std::int32_t>();
    const std::int64_t count = labels.num_elements();
    for (std::int64_t i = 0; i < count; ++i) {
        if (has_ignore && y[i] == ignore) {
            ++matrix.num_ignored;
            continue;
        }
        TESSERA_CHECK(p[i] >= 0 && p[i] < num_classes,
                      what << ": expected predicted labels in [0, " << num_classes << ") for " << num_classes
                           << " classes, got " << p[i] << " at predicted"
                           << detail::index_to_string(predicted.shape(), i));
        count_voxel(matrix, y[i], p[i], has_ignore, ignore, what, labels.shape(), i);
    }
    return matrix;
}

double accuracy(const ConfusionMatrix& matrix) {
    std::int64_t correct = 0;
    for (std::int64_t c = 0; c < matrix.num_classes; ++c) correct += matrix.counts[static_cast<std::size_t>(c * matrix.num_classes + c)];
    const std::int64_t counted = matrix.total();
    return counted > 0 ? static_cast<double>(correct) / static_cast<double>(counted) : 0.0;
}

SegmentationScores segmentation_scores(const ConfusionMatrix& matrix, const ScoreOptions& options) {
    const std::int64_t classes = matrix.num_classes;
    SegmentationScores scores;
    scores.classes.resize(static_cast<std::size_t>(classes));
    double dice_sum = 0;
    double iou_sum = 0;
    for (std::int64_t c = 0; c < classes; ++c) {
        std::int64_t predicted_as_c = 0;
        std::int64_t truly_c = 0;
        for (std::int64_t other = 0; other < classes; ++other) {
            predicted_as_c += matrix.counts[static_cast<std::size_t>(other * classes + c)];
            truly_c += matrix.counts[static_cast<std::size_t>(c * classes + other)];
        }
        ClassScores& score = scores.classes[static_cast<std::size_t>(c)];
        score.true_positives = matrix.counts[static_cast<std::size_t>(c * classes + c)];
        score.false_positives = predicted_as_c - score.true_positives;
        score.false_negatives = truly_c - score.true_positives;
        const std::int64_t union_count = score.true_positives + score.false_positives + score.false_negatives;
        score.is_present = union_count > 0;
        if (!score.is_present) continue;
        const auto tp = static_cast<double>(score.true_positives);
        score.dice = 2.0 * tp / (tp + static_cast<double>(union_count));
        score.iou = tp / static_cast<double>(union_count);
        if (options.exclude_background && c == 0) continue;
        dice_sum += score.dice;
        iou_sum += score.iou;
        ++scores.num_classes_in_mean;
    }
    if (scores.num_classes_in_mean > 0) {
        scores.mean_dice = dice_sum / static_cast<double>(scores.num_classes_in_mean);
        scores.mean_iou = iou_sum / static_cast<double>(scores.num_classes_in_mean);
    }
    scores.accuracy = accuracy(matrix);
    return scores;
}

}  // namespace tessera::loss
