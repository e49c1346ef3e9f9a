// Non-maximum suppression: kept index lists against torchvision 0.14 (exact equality, fixtures from
// reference/make_nms_reference.py), plus hand cases for what the fixtures cannot pin down: equal scores,
// IoU equal to the threshold, suppression that does not chain, classes, max_detections and bad input.
#include "detection/nms.hpp"
#include "support/error_of.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

namespace tessera::detection {
namespace {

using Indices = std::vector<std::size_t>;

struct NmsFixture {
    std::vector<ScoredBox> boxes;
    nlohmann::json cases;
};

NmsFixture load_fixture() {
    std::ifstream file(TESSERA_SOURCE_DIR "/tests/engine/detection/reference/nms_reference.json");
    EXPECT_TRUE(file.good()) << "missing nms_reference.json";
    const nlohmann::json json = nlohmann::json::parse(file);
    NmsFixture fixture;
    const auto& boxes = json.at("boxes");
    for (std::size_t i = 0; i < boxes.size(); ++i) {
        const auto& corners = boxes[i];
        fixture.boxes.push_back(
            {{corners[0].get<float>(), corners[1].get<float>(), corners[2].get<float>(), corners[3].get<float>()},
             json.at("classes")[i].get<std::int32_t>(),
             json.at("scores")[i].get<float>()});
    }
    fixture.cases = json.at("cases");
    return fixture;
}

Indices indices_of(const nlohmann::json& list) {
    return list.get<Indices>();
}

TEST(NonMaximumSuppression, MatchesTorchvisionNms) {
    const NmsFixture fixture = load_fixture();
    ASSERT_EQ(fixture.boxes.size(), 300u);
    ASSERT_EQ(fixture.cases.size(), 3u);
    for (const auto& reference : fixture.cases) {
        const float threshold = reference.at("iou_threshold").get<float>();
        EXPECT_EQ(non_maximum_suppression(fixture.boxes, {.iou_threshold = threshold}), indices_of(reference.at("nms")))
            << "IoU threshold " << threshold;
    }
}

TEST(NonMaximumSuppression, MatchesTorchvisionBatchedNms) {
    const NmsFixture fixture = load_fixture();
    for (const auto& reference : fixture.cases) {
        const float threshold = reference.at("iou_threshold").get<float>();
        EXPECT_EQ(batched_non_maximum_suppression(fixture.boxes, {.iou_threshold = threshold}),
                  indices_of(reference.at("batched_nms")))
            << "IoU threshold " << threshold;
    }
}

TEST(NonMaximumSuppression, MaxDetectionsKeepsTheTopOfTheSuppressedList) {
    // torchvision has no max_detections: the expected list is the first k of batched_nms's result.
    const NmsFixture fixture = load_fixture();
    for (const auto& reference : fixture.cases) {
        const float threshold = reference.at("iou_threshold").get<float>();
        const Indices full = indices_of(reference.at("batched_nms"));
        for (std::size_t limit : {std::size_t{0}, std::size_t{1}, std::size_t{20}, full.size(), full.size() + 5}) {
            const Indices expected(full.begin(),
                                   full.begin() + static_cast<std::ptrdiff_t>(std::min(limit, full.size())));
            EXPECT_EQ(
                batched_non_maximum_suppression(fixture.boxes, {.iou_threshold = threshold, .max_detections = limit}),
                expected)
                << "IoU threshold " << threshold << ", max_detections " << limit;
        }
    }
}

TEST(NonMaximumSuppression, EqualScoresVisitLowerIndexFirst) {
    // Boxes 1 and 2 are the same box with the same score 0.9: box 1 (lower index) is visited first and
    // kept, box 2 has IoU 1 with it and goes. Box 3 (score 0.9, disjoint) is kept after box 1. Box 0 is
    // the same box again at 0.5 and goes. Kept in visiting order: 1, 3.
    const Box square{0, 0, 10, 10};
    const std::vector<ScoredBox> boxes = {
        {square, 0, 0.5f}, {square, 0, 0.9f}, {square, 0, 0.9f}, {{20, 20, 30, 30}, 0, 0.9f}};
    EXPECT_EQ(non_maximum_suppression(boxes, {.iou_threshold = 0.5f}), (Indices{1, 3}));
    EXPECT_EQ(batched_non_maximum_suppression(boxes, {.iou_threshold = 0.5f}), (Indices{1, 3}));
}

TEST(NonMaximumSuppression, IouEqualToTheThresholdKeepsBoth) {
    // [0,0,10,10] and [0,0,10,5]: intersection 50, union 100, IoU exactly 0.5 (exact in f32).
    const std::vector<ScoredBox> boxes = {{{0, 0, 10, 10}, 0, 0.9f}, {{0, 0, 10, 5}, 0, 0.8f}};
    EXPECT_EQ(non_maximum_suppression(boxes, {.iou_threshold = 0.5f}), (Indices{0, 1}));  // 0.5 > 0.5 is false
    EXPECT_EQ(non_maximum_suppression(boxes, {.iou_threshold = 0.49f}), (Indices{0}));
}

TEST(NonMaximumSuppression, SuppressedBoxesSuppressNothing) {
    // A = [0,0,10,10] (0.9), B = [4,0,14,10] (0.8), C = [8,0,18,10] (0.7), threshold 0.3.
    // IoU(A,B) = 60/140 = 0.43 → B goes. IoU(B,C) = 0.43 but B is gone; IoU(A,C) = 20/180 = 0.11 → C stays.
    const std::vector<ScoredBox> boxes = {
        {{8, 0, 18, 10}, 0, 0.7f}, {{0, 0, 10, 10}, 0, 0.9f}, {{4, 0, 14, 10}, 0, 0.8f}};
    EXPECT_EQ(non_maximum_suppression(boxes, {.iou_threshold = 0.3f}), (Indices{1, 0}));
}

TEST(NonMaximumSuppression, ClassesNeverSuppressEachOther) {
    // The same box in classes 0, 1 and 0: batched keeps the best of class 0 and the class-1 box;
    // class-agnostic keeps only the best overall. Results are in score order across classes.
    const Box square{0, 0, 10, 10};
    const std::vector<ScoredBox> boxes = {{square, 0, 0.6f}, {square, 1, 0.7f}, {square, 0, 0.8f}};
    EXPECT_EQ(batched_non_maximum_suppression(boxes, {.iou_threshold = 0.5f}), (Indices{2, 1}));
    EXPECT_EQ(non_maximum_suppression(boxes, {.iou_threshold = 0.5f}), (Indices{2}));
}

TEST(NonMaximumSuppression, EmptyAndDegenerateInputs) {
    EXPECT_TRUE(non_maximum_suppression({}).empty());
    EXPECT_TRUE(batched_non_maximum_suppression({}).empty());
    // Empty (zero-area) boxes have IoU 0 with everything, so they never suppress or get suppressed.
    const std::vector<ScoredBox> empty_boxes = {{{5, 5, 5, 5}, 0, 0.9f}, {{5, 5, 5, 5}, 0, 0.8f}};
    EXPECT_EQ(non_maximum_suppression(empty_boxes, {.iou_threshold = 0.0f}), (Indices{0, 1}));
}

TEST(NonMaximumSuppression, RejectsNanScoresAndBadThresholds) {
    const std::vector<ScoredBox> boxes = {{{0, 0, 10, 10}, 0, 0.9f}, {{0, 0, 10, 10}, 0, std::nanf("")}};
    const std::string nan_error = test::error_of([&] { batched_non_maximum_suppression(boxes); });
    EXPECT_NE(nan_error.find("box 1 has a NaN score"), std::string::npos) << nan_error;
    const std::string threshold_error = test::error_of([&] { non_maximum_suppression({}, {.iou_threshold = 1.5f}); });
    EXPECT_NE(threshold_error.find("expected an IoU threshold in [0, 1], got 1.5"), std::string::npos)
        << threshold_error;
    const std::vector<ScoredBox> infinite = {{{0, 0, INFINITY, 10}, 0, 0.9f}};
    EXPECT_NE(test::error_of([&] { non_maximum_suppression(infinite); }).find("box 0 has a non-finite corner"),
              std::string::npos);
}

}  // namespace
}  // namespace tessera::detection
