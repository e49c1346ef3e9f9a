#include "run/detections_file.hpp"

#include "core/error.hpp"
#include "core/json_support.hpp"

#include <fstream>
#include <sstream>

namespace tessera::run {

namespace fs = std::filesystem;
using json::Json;

namespace {

// The value at `key` of an object, checked to be of the wanted kind; the message names the field's path.
const Json& field(const fs::path& file, const Json& object, std::string_view path, const char* key, bool (Json::*is_kind)() const,
                  std::string_view expected) {
    TESSERA_CHECK(object.is_object() && object.contains(key),
                  "the detections file " << file << " lacks " << json::join_path(path, key)
                                         << ": is it a detections_step_<N>.json written by a Tessera run? Re-run the evaluation to rewrite it");
    const Json& value = object[key];
    TESSERA_CHECK((value.*is_kind)(), "the detections file " << file << ": " << json::join_path(path, key) << " should be " << expected
                                                             << ", got " << json::type_name(value));
    return value;
}

detection::Box read_box(const fs::path& file, const Json& object, const std::string& path) {
    const Json& box = field(file, object, path, "box", &Json::is_array, "[x_min, y_min, x_max, y_max] in pixels");
    TESSERA_CHECK(box.size() == 4 && box[0].is_number() && box[1].is_number() && box[2].is_number() && box[3].is_number(),
                  "the detections file " << file << ": " << json::join_path(path, "box")
                                         << " should be four numbers [x_min, y_min, x_max, y_max], got " << json::shown(box));
    return {box[0].get<float>(), box[1].get<float>(), box[2].get<float>(), box[3].get<float>()};
}

}  // namespace

std::string DetectionsFile::class_name(std::int32_t class_id) const {
    if (class_id >= 0 && static_cast<std::size_t>(class_id) < classes.size()) return classes[static_cast<std::size_t>(class_id)];
    return "class " + std::to_string(class_id);
}

DetectionsFile read_detections_file(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    TESSERA_CHECK(in, "cannot read the detections file " << file << ": no such file, or not readable");
    std::ostringstream text;
    text << in.rdbuf();
    Json root;
    try {
        root = Json::parse(text.str());
    } catch (const Json::exception& error) {
        TESSERA_REJECT("the detections file " << file << " is not valid JSON (" << error.what()
                                              << "): a run stopped while writing it? Re-run the evaluation to rewrite it");
    }
    DetectionsFile result;
    result.path = file;
    result.step = field(file, root, "", "step", &Json::is_number_integer, "an integer").get<std::int64_t>();
    for (const Json& name : field(file, root, "", "classes", &Json::is_array, "a list of class names")) {
        TESSERA_CHECK(name.is_string(), "the detections file " << file << ": classes should hold names, got " << json::type_name(name));
        result.classes.push_back(name.get<std::string>());
    }
    result.match_iou_threshold = field(file, root, "", "match_iou_threshold", &Json::is_number, "a number").get<double>();
    result.score_threshold = field(file, root, "", "score_threshold", &Json::is_number, "a number").get<double>();
    const Json& images = field(file, root, "", "images", &Json::is_array, "a list of images");
    for (std::size_t i = 0; i < images.size(); ++i) {
        const std::string path = "images[" + std::to_string(i) + "]";
        const Json& entry = images[i];
        DetectionsFileImage image;
        image.name = field(file, entry, path, "name", &Json::is_string, "a string").get<std::string>();
        image.image_file = file.parent_path() / field(file, entry, path, "image", &Json::is_string, "a file name").get<std::string>();
        image.width = field(file, entry, path, "width", &Json::is_number_integer, "an integer").get<std::int64_t>();
        image.height = field(file, entry, path, "height", &Json::is_number_integer, "an integer").get<std::int64_t>();
        TESSERA_CHECK(image.width > 0 && image.height > 0, "the detections file " << file << ": " << path << " is " << image.width << "×"
                                                                                  << image.height << " pixels; expected a positive size");
        const Json& truths = field(file, entry, path, "ground_truth", &Json::is_array, "a list of boxes");
        for (std::size_t g = 0; g < truths.size(); ++g) {
            const std::string truth_path = path + ".ground_truth[" + std::to_string(g) + "]";
            DetectionsFileTruth truth;
            truth.box = read_box(file, truths[g], truth_path);
            truth.class_id = field(file, truths[g], truth_path, "class", &Json::is_number_integer, "a class id").get<std::int32_t>();
            truth.found = field(file, truths[g], truth_path, "found", &Json::is_boolean, "true or false").get<bool>();
            image.ground_truth.push_back(truth);
        }
        const Json& detections = field(file, entry, path, "detections", &Json::is_array, "a list of detections");
        for (std::size_t k = 0; k < detections.size(); ++k) {
            const std::string detection_path = path + ".detections[" + std::to_string(k) + "]";
            DetectionsFileDetection detection;
            detection.box = read_box(file, detections[k], detection_path);
            detection.class_id = field(file, detections[k], detection_path, "class", &Json::is_number_integer, "a class id").get<std::int32_t>();
            detection.score = field(file, detections[k], detection_path, "score", &Json::is_number, "a number").get<double>();
            detection.ground_truth =
                field(file, detections[k], detection_path, "ground_truth", &Json::is_number_integer, "an index or -1").get<std::int32_t>();
            detection.iou = field(file, detections[k], detection_path, "iou", &Json::is_number, "a number").get<double>();
            TESSERA_CHECK(detection.ground_truth >= -1 && detection.ground_truth < static_cast<std::int32_t>(image.ground_truth.size()),
                          "the detections file " << file << ": " << detection_path << ".ground_truth is " << detection.ground_truth
                                                 << " but the image has " << image.ground_truth.size()
                                                 << " ground-truth boxes; expected -1 or an index below that");
            image.detections.push_back(detection);
        }
        result.images.push_back(std::move(image));
    }
    return result;
}

fs::path locate_detections_file(const fs::path& recorded, const fs::path& model_dir) {
    std::error_code error;
    if (!recorded.empty() && fs::is_regular_file(recorded, error)) return recorded;
    if (recorded.empty() || model_dir.empty()) return {};
    const fs::path moved = model_dir / "predictions" / recorded.filename();
    return fs::is_regular_file(moved, error) ? moved : fs::path();
}

bool DetectionFilter::shows(std::int32_t class_id) const {
    if (class_id < 0 || static_cast<std::size_t>(class_id) >= class_shown.size()) return true;
    return class_shown[static_cast<std::size_t>(class_id)];
}

ShownDetections shown_detections(const DetectionsFileImage& image, const DetectionFilter& filter) {
    ShownDetections shown;
    std::vector<bool> found(image.ground_truth.size(), false);
    for (std::size_t k = 0; k < image.detections.size(); ++k) {
        const DetectionsFileDetection& d = image.detections[k];
        if (d.score < filter.min_score || !filter.shows(d.class_id)) continue;
        const bool matched = d.ground_truth >= 0;
        if (matched) found[static_cast<std::size_t>(d.ground_truth)] = true;
        shown.detections.push_back({.box = d.box,
                                    .class_id = d.class_id,
                                    .score = d.score,
                                    .iou = matched ? d.iou : 0.0,
                                    .outcome = matched ? BoxOutcome::Matched : BoxOutcome::FalsePositive,
                                    .index = static_cast<std::int32_t>(k)});
        ++(matched ? shown.num_matched : shown.num_false_positives);
    }
    for (std::size_t g = 0; g < image.ground_truth.size(); ++g) {
        const DetectionsFileTruth& t = image.ground_truth[g];
        if (!filter.shows(t.class_id)) continue;
        shown.ground_truth.push_back({.box = t.box,
                                      .class_id = t.class_id,
                                      .score = -1,
                                      .iou = 0,
                                      .outcome = found[g] ? BoxOutcome::Found : BoxOutcome::Missed,
                                      .index = static_cast<std::int32_t>(g)});
        shown.num_missed += found[g] ? 0 : 1;
    }
    return shown;
}

std::string_view outcome_name(BoxOutcome outcome) {
    switch (outcome) {
        case BoxOutcome::Matched: return "matched";
        case BoxOutcome::FalsePositive: return "false positive";
        case BoxOutcome::Found: return "found";
        case BoxOutcome::Missed: return "missed";
    }
    return "?";
}

}  // namespace tessera::run
