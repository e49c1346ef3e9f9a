// A COCO-format detection dataset: an instances.json and the folder of images it lists.
//
//   CocoDataset coco({.annotations_file = "annotations/instances_val2017.json", .images_dir = "val2017"});
//   coco.categories()[0].name;          // "person": class 0 is the smallest COCO category id kept
//   DetectionSample sample = coco.load(0);   // image [3, H, W] f32 in [0, 1], boxes in pixels
//   coco.counts().crowd_ignored;        // what was dropped, and why
//
// What is read (everything else in the file is ignored):
//   images[]       id (integer), file_name (string), width, height (integers ≥ 1)
//   annotations[]  image_id, category_id (integers), bbox [x, y, w, h] (numbers, pixels), iscrowd (0 or 1;
//                  absent = 0, as some exporters leave it out), area (number; absent = w·h)
//   categories[]   id (integer), name (string)
// Classes: the kept categories in ascending COCO id order get class ids 0, 1, … (COCO's 80 sparse ids
// 1..90 become 0..79). CocoOptions can keep a subset by id or by name; annotations of other categories
// are dropped and counted.
// Crowd annotations (iscrowd = 1) are dropped from the ground truth: COCO evaluation treats them as
// neither positives nor negatives (a detection on one is ignored), and as a training target a crowd box
// would teach a box around a group of objects. Boxes [x, y, w, h] become corners [x, y, x + w, y + h],
// clipped to the image [0, width] × [0, height]; a box with w ≤ 0 or h ≤ 0 is degenerate, and one with
// nothing left after clipping is outside: both are dropped and counted. Images with no annotation left
// stay in the dataset (negatives). Images keep the file's order.
//
// Images: PNG, JPEG or BMP, decoded by read_color_image (io/color_image.hpp; engine/io holds all image
// decoding) as stored: EXIF orientation is ignored, as COCO's boxes refer to the stored pixels. 8-bit
// samples are divided by 255, 16-bit by 65535; grey images are replicated to 3 channels, an alpha channel
// is dropped; channels are R, G, B. The size in the file's header must match the JSON's width and height
// (checked by load() before decoding, so a wrong entry cannot make the decoder allocate a huge image).
//
// Every problem throws tessera::Error naming the file, what to fix and, for the JSON, the path of the bad
// value ("annotations[12].bbox[2]"). The JSON and every image file's existence are checked by the
// constructor; the size check and decoding errors come from load().
#pragma once

#include "data/detection_transforms.hpp"
#include "detection/box.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera::data {

struct CocoOptions {
    std::filesystem::path annotations_file{};  // instances.json
    std::filesystem::path images_dir{};        // file_name is relative to it
    // Keep only these categories (by COCO id, by name, or both); both empty: keep all. Unknown ones throw.
    std::vector<std::int64_t> keep_category_ids{};
    std::vector<std::string> keep_category_names{};
};

struct CocoCategory {
    std::int32_t class_id = 0;  // 0-based, contiguous
    std::int64_t coco_id = 0;
    std::string name;
};

struct CocoImage {
    std::int64_t coco_id = 0;
    std::string file_name;
    std::int64_t width = 0, height = 0;          // pixels, from the JSON
    std::vector<detection::LabeledBox> objects;  // corners in pixels, class ids of categories()
    std::vector<float> areas;                    // [objects] COCO's area (segment pixels²) or w·h
};

// Annotations read, and what became of them.
struct CocoCounts {
    std::int64_t annotations = 0;     // in the file
    std::int64_t kept = 0;            // in CocoImage::objects
    std::int64_t crowd_ignored = 0;   // iscrowd = 1
    std::int64_t other_category = 0;  // category not kept by CocoOptions
    std::int64_t degenerate = 0;      // w ≤ 0 or h ≤ 0
    std::int64_t outside_image = 0;   // nothing left after clipping to the image
    std::int64_t images_without_objects = 0;
};

class CocoDataset {
public:
    explicit CocoDataset(const CocoOptions& options);

    std::int64_t size() const { return static_cast<std::int64_t>(m_images.size()); }
    const std::vector<CocoCategory>& categories() const { return m_categories; }  // by class id
    std::int32_t num_classes() const { return static_cast<std::int32_t>(m_categories.size()); }
    const CocoImage& image(std::int64_t index) const;
    const CocoCounts& counts() const { return m_counts; }
    std::filesystem::path image_path(std::int64_t index) const;

    // Decodes image `index`: [3, H, W] f32 in [0, 1] and its objects (copied from image(index)). Throws
    // when the file's size differs from the JSON's width and height.
    DetectionSample load(std::int64_t index) const;

private:
    CocoOptions m_options;
    std::vector<CocoCategory> m_categories;
    std::vector<CocoImage> m_images;
    CocoCounts m_counts;
};

}  // namespace tessera::data
