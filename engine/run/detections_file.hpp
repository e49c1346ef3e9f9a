// A detector's evaluation image by image, as TrainingRun writes it (predictions/detections_step_<N>.json):
// every held-out image's ground truth and detections with the matches at IoU 0.5, read back for a viewer,
// and what a viewer shows of one image under a score threshold and a class filter.
//
//   DetectionsFile file = read_detections_file(model_dir / "predictions" / "detections_step_200.json");
//   ShownDetections shown = shown_detections(file.images[0], {.min_score = 0.5});
//   shown.detections[0].outcome;   // BoxOutcome::Matched: a true positive at IoU ≥ 0.5
//   shown.num_missed;              // objects no shown detection found
//
// Why filtering keeps the file's matches right: matching (detection::match_detections, pycocotools' greedy
// rule) runs per class in descending score order, and a detection only takes an object no higher-scored
// detection took. Hiding every detection below a score, or a whole class, leaves the remaining ones'
// matches as they were; an object is found when one of the detections still shown took it.
#pragma once

#include "detection/box.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera::run {

struct DetectionsFileTruth {
    detection::Box box;        // pixels of the image as evaluated (the model input)
    std::int32_t class_id = 0;
    bool found = false;        // a detection above the file's score threshold matched it
};

struct DetectionsFileDetection {
    detection::Box box;             // pixels
    std::int32_t class_id = 0;
    double score = 0;               // [0, 1]
    std::int32_t ground_truth = -1; // index into the image's ground truth it matched; −1: a false positive
    double iou = 0;                 // IoU with that object; 0 when it matched none
};

struct DetectionsFileImage {
    std::string name;                        // the held-out example's name
    std::filesystem::path image_file;        // the PNG written beside the file (absolute, resolved)
    std::int64_t width = 0, height = 0;      // pixels
    std::vector<DetectionsFileTruth> ground_truth;
    std::vector<DetectionsFileDetection> detections;  // as post-processing gave them
};

struct DetectionsFile {
    std::filesystem::path path;
    std::int64_t step = 0;
    std::vector<std::string> classes;   // names by class id
    double match_iou_threshold = 0.5;
    double score_threshold = 0;         // the postprocessing's: no detection below it was kept
    std::vector<DetectionsFileImage> images;

    // A class's name, or "class k" beyond the names.
    std::string class_name(std::int32_t class_id) const;
};

// Reads and checks a detections file; a missing, truncated or malformed one throws tessera::Error naming
// the file and the bad field. Image files are resolved against the file's folder (they need not exist:
// a viewer shows boxes on a blank canvas then).
DetectionsFile read_detections_file(const std::filesystem::path& file);

// The detections file of an evaluation: `recorded` when it exists, else the same name in
// <model_dir>/predictions (a run folder moved or opened from elsewhere). Empty when neither exists.
std::filesystem::path locate_detections_file(const std::filesystem::path& recorded, const std::filesystem::path& model_dir);

struct DetectionFilter {
    double min_score = 0;                  // detections below it are hidden
    std::vector<bool> class_shown{};       // by class id; empty or shorter: the missing classes are shown
    bool shows(std::int32_t class_id) const;
};

enum class BoxOutcome {
    Matched,        // a detection that took an object at IoU ≥ the match threshold
    FalsePositive,  // a detection that took none
    Found,          // an object a shown detection took
    Missed,         // an object none of the shown detections took
};

struct ShownBox {
    detection::Box box;
    std::int32_t class_id = 0;
    double score = -1;        // −1 for ground truth
    double iou = 0;           // a detection's IoU with its object (0 when it has none)
    BoxOutcome outcome = BoxOutcome::Missed;
    std::int32_t index = -1;  // its index among the image's ground truth or detections in the file
};

struct ShownDetections {
    std::vector<ShownBox> ground_truth;   // the shown classes' objects
    std::vector<ShownBox> detections;     // the shown classes' detections at or above min_score
    std::int64_t num_matched = 0, num_false_positives = 0, num_missed = 0;
};

ShownDetections shown_detections(const DetectionsFileImage& image, const DetectionFilter& filter);

std::string_view outcome_name(BoxOutcome outcome);  // "matched", "false positive", "found", "missed"

}  // namespace tessera::run
