// Tests of engine/loss/metrics.hpp: a hand-counted confusion matrix and its scores, argmax ties,
// classification accuracy, the ignore label, the "not present" convention, tile sums (exact) and
// errors.
#include "loss/metrics.hpp"
#include "loss_test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>

using namespace tessera;
using namespace tessera::loss;
using namespace tessera::loss::test_support;

namespace {

Tensor ints_from(const Shape& shape, const std::vector<std::int32_t>& values) {
    Tensor t = Tensor::empty(shape, DType::I32);
    for (std::size_t i = 0; i < values.size(); ++i) t.data<std::int32_t>()[i] = values[i];
    return t;
}

Tensor floats_from(const Shape& shape, const std::vector<float>& values) {
    Tensor t = Tensor::empty(shape, DType::F32);
    for (std::size_t i = 0; i < values.size(); ++i) t.data<float>()[i] = values[i];
    return t;
}

// The argmax over axis 1 of [N, C, S...] logits, as a plain loop.
Tensor argmax_labels(const Tensor& logits) {
    const Dims d = dims_of(logits.shape());
    Shape shape = logits.shape();
    shape.erase(shape.begin() + 1);
    Tensor result = Tensor::empty(shape, DType::I32);
    for (std::int64_t n = 0; n < d.n; ++n)
        for (std::int64_t s = 0; s < d.s; ++s) {
            std::int32_t best = 0;
            for (std::int64_t c = 1; c < d.c; ++c) {
                if (logits.data<float>()[(n * d.c + c) * d.s + s] > logits.data<float>()[(n * d.c + best) * d.s + s]) {
                    best = static_cast<std::int32_t>(c);
                }
            }
            result.data<std::int32_t>()[n * d.s + s] = best;
        }
    return result;
}

}  // namespace

TEST(Metrics, HandCountedMatrixAndScores) {
    // truth      0 0 1 1 2 2
    // predicted  0 1 1 1 0 2      (class 3 appears nowhere)
    const Tensor truth = ints_from({1, 6}, {0, 0, 1, 1, 2, 2});
    const Tensor predicted = ints_from({1, 6}, {0, 1, 1, 1, 0, 2});
    const ConfusionMatrix m = confusion_matrix(predicted, truth, 4);
    EXPECT_EQ(m.num_classes, 4);
    EXPECT_EQ(m.at(0, 0), 1);
    EXPECT_EQ(m.at(0, 1), 1);
    EXPECT_EQ(m.at(1, 1), 2);
    EXPECT_EQ(m.at(2, 0), 1);
    EXPECT_EQ(m.at(2, 2), 1);
    EXPECT_EQ(m.at(3, 3), 0);
    EXPECT_EQ(m.total(), 6);

    const SegmentationScores scores = segmentation_scores(m);
    ASSERT_EQ(scores.classes.size(), 4u);
    // class 0: TP 1, FP 1, FN 1;  class 1: TP 2, FP 1, FN 0;  class 2: TP 1, FP 0, FN 1
    EXPECT_EQ(scores.classes[0].true_positives, 1);
    EXPECT_EQ(scores.classes[0].false_positives, 1);
    EXPECT_EQ(scores.classes[0].false_negatives, 1);
    EXPECT_DOUBLE_EQ(scores.classes[0].dice, 0.5);
    EXPECT_DOUBLE_EQ(scores.classes[0].iou, 1.0 / 3.0);
    EXPECT_DOUBLE_EQ(scores.classes[1].dice, 0.8);
    EXPECT_DOUBLE_EQ(scores.classes[1].iou, 2.0 / 3.0);
    EXPECT_DOUBLE_EQ(scores.classes[2].dice, 2.0 / 3.0);
    EXPECT_DOUBLE_EQ(scores.classes[2].iou, 0.5);
    EXPECT_TRUE(scores.classes[2].is_present);
    // Class 3: absent from both → flagged, 0 (not NaN), out of the means.
    EXPECT_FALSE(scores.classes[3].is_present);
    EXPECT_EQ(scores.classes[3].dice, 0.0);
    EXPECT_EQ(scores.classes[3].iou, 0.0);
    EXPECT_EQ(scores.num_classes_in_mean, 3);
    EXPECT_DOUBLE_EQ(scores.mean_dice, (0.5 + 0.8 + 2.0 / 3.0) / 3.0);
    EXPECT_DOUBLE_EQ(scores.mean_iou, (1.0 / 3.0 + 2.0 / 3.0 + 0.5) / 3.0);
    EXPECT_DOUBLE_EQ(scores.accuracy, 4.0 / 6.0);
    EXPECT_DOUBLE_EQ(accuracy(m), 4.0 / 6.0);

    const SegmentationScores foreground = segmentation_scores(m, {.exclude_background = true});
    EXPECT_EQ(foreground.num_classes_in_mean, 2);
    EXPECT_DOUBLE_EQ(foreground.mean_dice, (0.8 + 2.0 / 3.0) / 2.0);
    EXPECT_DOUBLE_EQ(foreground.classes[0].dice, 0.5);  // still reported
}

TEST(Metrics, NothingPresentIsPerfectAndNaNFree) {
    const Tensor background = Tensor::zeros({2, 3, 3}, DType::I32);
    const SegmentationScores scores =
        segmentation_scores(confusion_matrix(background, background, 3), {.exclude_background = true});
    EXPECT_EQ(scores.num_classes_in_mean, 0);
    EXPECT_EQ(scores.mean_dice, 1.0);
    EXPECT_EQ(scores.mean_iou, 1.0);
    EXPECT_EQ(scores.accuracy, 1.0);
    for (const ClassScores& c : scores.classes) {
        EXPECT_FALSE(std::isnan(c.dice));
        EXPECT_FALSE(std::isnan(c.iou));
    }
    // Nothing counted at all.
    MetricOptions ignore_all{.ignore_label = 0};
    const ConfusionMatrix empty = confusion_matrix(background, background, 3, ignore_all);
    EXPECT_EQ(empty.total(), 0);
    EXPECT_EQ(empty.num_ignored, 18);
    EXPECT_EQ(accuracy(empty), 0.0);
    EXPECT_EQ(segmentation_scores(empty).mean_dice, 1.0);
}

TEST(Metrics, ArgmaxOfLogitsTiesGoToTheLowerClass) {
    // [N=1, C=3, W=4]: voxel 0 → 2, voxel 1 → tie of 0 and 1 → 0, voxel 2 → tie of 1 and 2 → 1, voxel 3 → 1.
    const Tensor logits = floats_from({1, 3, 4}, {0, 5, 1, 0,   //
                                                  1, 5, 3, 9,   //
                                                  2, 4, 3, -1});
    const Tensor truth = ints_from({1, 4}, {2, 0, 2, 1});
    const ConfusionMatrix m = confusion_matrix_from_logits(logits, truth);
    EXPECT_EQ(m.at(2, 2), 1);
    EXPECT_EQ(m.at(0, 0), 1);
    EXPECT_EQ(m.at(2, 1), 1);
    EXPECT_EQ(m.at(1, 1), 1);
    EXPECT_EQ(m.total(), 4);
}

TEST(Metrics, FromLogitsEqualsFromArgmaxLabels) {
    const Tensor logits = random_f32({2, 4, 5, 6, 3}, 10);
    const Tensor truth = random_labels({2, 5, 6, 3}, 4, 11, 255, 0.2);
    const MetricOptions options{.ignore_label = 255};
    const ConfusionMatrix from_logits = confusion_matrix_from_logits(logits, truth, options);
    const ConfusionMatrix from_labels = confusion_matrix(argmax_labels(logits), truth, 4, options);
    EXPECT_EQ(from_logits.counts, from_labels.counts);
    EXPECT_EQ(from_logits.num_ignored, from_labels.num_ignored);
    EXPECT_GT(from_logits.num_ignored, 0);
    EXPECT_EQ(from_logits.total() + from_logits.num_ignored, truth.num_elements());
}

TEST(Metrics, ClassificationAccuracy) {
    // [N=4, C=3] logits vs [N] labels: predictions 1, 0, 2, 2; labels 1, 0, 1, 2 → 3 of 4.
    const Tensor logits = floats_from({4, 3}, {0, 3, 1,  //
                                               7, 2, 1,  //
                                               0, 1, 2,  //
                                               -5, -4, -3});
    const Tensor labels = ints_from({4}, {1, 0, 1, 2});
    const ConfusionMatrix m = confusion_matrix_from_logits(logits, labels);
    EXPECT_DOUBLE_EQ(accuracy(m), 0.75);
    // Ignoring the wrong one leaves 3 of 3.
    const Tensor with_ignored = ints_from({4}, {1, 0, -1, 2});
    EXPECT_DOUBLE_EQ(accuracy(confusion_matrix_from_logits(logits, with_ignored, {.ignore_label = -1})), 1.0);
}

TEST(Metrics, TileCountsAddExactly) {
    std::uint32_t seed = 50;
    for (const TileSplit& split : standard_splits(4)) {
        Shape label_shape = split.shape;
        label_shape.erase(label_shape.begin() + 1);
        const Tensor logits = random_f32(split.shape, seed++);
        const Tensor truth = random_labels(label_shape, 4, seed++, 9, 0.1);
        const Tensor predicted = random_labels(label_shape, 4, seed++);
        const MetricOptions options{.ignore_label = 9};
        const ConfusionMatrix whole_logits = confusion_matrix_from_logits(logits, truth, options);
        const ConfusionMatrix whole_labels = confusion_matrix(predicted, truth, 4, options);
        ConfusionMatrix tiles_logits;
        ConfusionMatrix tiles_labels;
        for (const Box& box : split.boxes) {
            const Box label_box = without_axis_1(box);
            tiles_logits += confusion_matrix_from_logits(cut(logits, box), cut(truth, label_box), options);
            tiles_labels += confusion_matrix(cut(predicted, label_box), cut(truth, label_box), 4, options);
        }
        EXPECT_EQ(tiles_logits.counts, whole_logits.counts) << split.name;
        EXPECT_EQ(tiles_logits.num_ignored, whole_logits.num_ignored) << split.name;
        EXPECT_EQ(tiles_labels.counts, whole_labels.counts) << split.name;
        const SegmentationScores a = segmentation_scores(tiles_labels, {.exclude_background = true});
        const SegmentationScores b = segmentation_scores(whole_labels, {.exclude_background = true});
        EXPECT_EQ(a.mean_dice, b.mean_dice) << split.name;
        EXPECT_EQ(a.mean_iou, b.mean_iou) << split.name;
        EXPECT_EQ(a.accuracy, b.accuracy) << split.name;
    }
}

TEST(Metrics, Errors) {
    const Tensor logits = random_f32({2, 3, 4, 4}, 60);
    Tensor truth = random_labels({2, 4, 4}, 3, 61);
    truth.at<std::int32_t>({0, 3, 1}) = 3;
    expect_error_containing([&] { confusion_matrix_from_logits(logits, truth); },
                            {"confusion_matrix_from_logits", "expected labels in [0, 3) for 3 classes",
                             "got 3 at labels[0, 3, 1]"});
    expect_error_containing([&] { confusion_matrix(random_labels({2, 4, 4}, 3, 1), truth, 3); },
                            {"confusion_matrix", "got 3 at labels[0, 3, 1]"});
    Tensor predicted = random_labels({2, 4, 4}, 3, 62);
    predicted.at<std::int32_t>({1, 0, 2}) = -2;
    expect_error_containing([&] { confusion_matrix(predicted, random_labels({2, 4, 4}, 3, 63), 3); },
                            {"expected predicted labels in [0, 3)", "got -2 at predicted[1, 0, 2]"});
    expect_error_containing([&] { confusion_matrix(random_labels({2, 4, 5}, 3, 1), random_labels({2, 4, 4}, 3, 1), 3); },
                            {"expected predicted labels of the labels' shape [2, 4, 4], got [2, 4, 5]"});
    expect_error_containing([&] { confusion_matrix_from_logits(logits, random_labels({2, 4, 3}, 3, 1)); },
                            {"expected labels of shape [2, 4, 4]", "got [2, 4, 3]"});
    ConfusionMatrix three = confusion_matrix(random_labels({4}, 3, 1), random_labels({4}, 3, 2), 3);
    const ConfusionMatrix four = confusion_matrix(random_labels({4}, 4, 1), random_labels({4}, 4, 2), 4);
    expect_error_containing([&] { three += four; }, {"same number of classes", "got 3 and 4"});
    expect_error_containing([&] { (void)three.at(3, 0); }, {"expected classes in [0, 3)", "got truth 3"});
}
