// The detections file a viewer reads: values as written, the score and class filters against hand-worked
// outcomes, and errors that name the file and the field.
#include "run/detections_file.hpp"

#include "core/error.hpp"
#include "run_test_support.hpp"

#include <gtest/gtest.h>

#include <fstream>

namespace tessera {
namespace {

namespace fs = std::filesystem;

// One image, classes "disc" (0) and "square" (1). Objects: g0 disc, g1 disc, g2 square. Detections as
// matching at IoU 0.5 left them: d0 disc 0.9 → g0, d1 disc 0.6 → g1, d2 disc 0.4 unmatched, d3 square 0.3 → g2.
constexpr const char* file_text = R"({
 "step": 40, "classes": ["disc", "square"], "match_iou_threshold": 0.5, "score_threshold": 0.05,
 "images": [{"name": "shapes eval 0", "image": "shapes_eval_0_image.png", "width": 64, "height": 48,
   "ground_truth": [{"box": [1, 2, 11, 12], "class": 0, "found": true},
                    {"box": [20, 2, 30, 12], "class": 0, "found": true},
                    {"box": [40, 20, 60, 44], "class": 1, "found": true}],
   "detections": [{"box": [1.5, 2, 11, 12.5], "class": 0, "score": 0.9, "ground_truth": 0, "iou": 0.86},
                  {"box": [21, 3, 30, 12], "class": 0, "score": 0.6, "ground_truth": 1, "iou": 0.81},
                  {"box": [30, 30, 40, 40], "class": 0, "score": 0.4, "ground_truth": -1, "iou": 0},
                  {"box": [41, 21, 60, 44], "class": 1, "score": 0.3, "ground_truth": 2, "iou": 0.91}]}]
})";

fs::path write_text(const fs::path& file, const std::string& text) {
    std::ofstream(file, std::ios::binary) << text;
    return file;
}

TEST(DetectionsFile, ReadsEveryValueAndResolvesImagesBesideTheFile) {
    test::TemporaryFolder folder("detections_read");
    const run::DetectionsFile file = run::read_detections_file(write_text(folder.path() / "detections_step_40.json", file_text));
    EXPECT_EQ(file.step, 40);
    ASSERT_EQ(file.classes.size(), 2u);
    EXPECT_EQ(file.class_name(1), "square");
    EXPECT_EQ(file.class_name(5), "class 5");
    EXPECT_DOUBLE_EQ(file.score_threshold, 0.05);
    ASSERT_EQ(file.images.size(), 1u);
    const run::DetectionsFileImage& image = file.images[0];
    EXPECT_EQ(image.name, "shapes eval 0");
    EXPECT_EQ(image.image_file, folder.path() / "shapes_eval_0_image.png");
    EXPECT_EQ(image.width, 64);
    EXPECT_EQ(image.height, 48);
    ASSERT_EQ(image.ground_truth.size(), 3u);
    EXPECT_EQ(image.ground_truth[2].box, (detection::Box{40, 20, 60, 44}));
    EXPECT_EQ(image.ground_truth[2].class_id, 1);
    ASSERT_EQ(image.detections.size(), 4u);
    EXPECT_EQ(image.detections[0].box, (detection::Box{1.5f, 2, 11, 12.5f}));
    EXPECT_DOUBLE_EQ(image.detections[1].score, 0.6);
    EXPECT_EQ(image.detections[2].ground_truth, -1);
    EXPECT_DOUBLE_EQ(image.detections[3].iou, 0.91);
}

TEST(DetectionsFile, FiltersKeepTheMatchesAndRecountMissedObjects) {
    test::TemporaryFolder folder("detections_filter");
    const run::DetectionsFile file = run::read_detections_file(write_text(folder.path() / "d.json", file_text));
    const run::DetectionsFileImage& image = file.images[0];

    // Everything: 3 matched, d2 a false positive, nothing missed.
    run::ShownDetections all = run::shown_detections(image, {});
    ASSERT_EQ(all.detections.size(), 4u);
    EXPECT_EQ(all.num_matched, 3);
    EXPECT_EQ(all.num_false_positives, 1);
    EXPECT_EQ(all.num_missed, 0);
    EXPECT_EQ(all.detections[2].outcome, run::BoxOutcome::FalsePositive);
    EXPECT_EQ(all.detections[3].outcome, run::BoxOutcome::Matched);
    EXPECT_DOUBLE_EQ(all.detections[3].iou, 0.91);
    EXPECT_EQ(all.ground_truth[2].outcome, run::BoxOutcome::Found);

    // Score ≥ 0.5: d0 and d1 stay (both matched); the square g2 loses its detection d3 and is missed.
    run::ShownDetections confident = run::shown_detections(image, {.min_score = 0.5});
    ASSERT_EQ(confident.detections.size(), 2u);
    EXPECT_EQ(confident.detections[1].index, 1);
    EXPECT_EQ(confident.num_matched, 2);
    EXPECT_EQ(confident.num_false_positives, 0);
    EXPECT_EQ(confident.num_missed, 1);
    EXPECT_EQ(confident.ground_truth[2].outcome, run::BoxOutcome::Missed);
    EXPECT_EQ(confident.ground_truth[0].outcome, run::BoxOutcome::Found);

    // Squares hidden: their object and detection leave the view and the counts.
    run::ShownDetections discs = run::shown_detections(image, {.min_score = 0, .class_shown = {true, false}});
    EXPECT_EQ(discs.detections.size(), 3u);
    EXPECT_EQ(discs.ground_truth.size(), 2u);
    EXPECT_EQ(discs.num_matched, 2);
    EXPECT_EQ(discs.num_false_positives, 1);
    EXPECT_EQ(discs.num_missed, 0);

    // Score exactly at the threshold is shown (≥), as the post-processing keeps it.
    EXPECT_EQ(run::shown_detections(image, {.min_score = 0.3}).detections.size(), 4u);
}

TEST(DetectionsFile, BadFilesNameTheFileAndTheField) {
    test::TemporaryFolder folder("detections_errors");
    const auto message_of = [&](const std::string& text) {
        const fs::path file = write_text(folder.path() / "bad.json", text);
        try {
            run::read_detections_file(file);
        } catch (const Error& error) {
            return std::string(error.what());
        }
        return std::string("no error");
    };
    std::string text = file_text;
    EXPECT_NE(message_of(text.substr(0, text.size() / 2)).find("not valid JSON"), std::string::npos);
    std::string wrong_index = text;
    wrong_index.replace(wrong_index.find("\"ground_truth\": 1,"), 18, "\"ground_truth\": 7,");
    const std::string index_message = message_of(wrong_index);
    EXPECT_NE(index_message.find("images[0].detections[1].ground_truth is 7"), std::string::npos) << index_message;
    std::string no_class = text;
    no_class.replace(no_class.find("\"class\": 1, \"found\""), 11, "\"kind\": 1, ");
    const std::string class_message = message_of(no_class);
    EXPECT_NE(class_message.find("images[0].ground_truth[2].class"), std::string::npos) << class_message;
    std::string short_box = text;
    short_box.replace(short_box.find("[40, 20, 60, 44]"), 16, "[40, 20, 60]");
    EXPECT_NE(message_of(short_box).find("four numbers"), std::string::npos);
    EXPECT_NE(message_of("[]").find("lacks step"), std::string::npos);
    const std::string missing = [&] {
        try {
            run::read_detections_file(folder.path() / "absent.json");
        } catch (const Error& error) {
            return std::string(error.what());
        }
        return std::string("no error");
    }();
    EXPECT_NE(missing.find("absent.json"), std::string::npos);
}

TEST(DetectionsFile, IsFoundInTheModelDirWhenTheRecordedPathMoved) {
    test::TemporaryFolder folder("detections_locate");
    fs::create_directories(folder.path() / "run" / "predictions");
    const fs::path here = write_text(folder.path() / "run" / "predictions" / "detections_step_40.json", file_text);
    EXPECT_EQ(run::locate_detections_file(here, {}), here);
    const fs::path recorded = "/elsewhere/run/predictions/detections_step_40.json";
    EXPECT_EQ(run::locate_detections_file(recorded, folder.path() / "run"), here);
    EXPECT_TRUE(run::locate_detections_file(recorded, folder.path()).empty());
    EXPECT_TRUE(run::locate_detections_file({}, folder.path() / "run").empty());
}

}  // namespace
}  // namespace tessera
