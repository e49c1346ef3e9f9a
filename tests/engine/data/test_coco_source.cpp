// The COCO source (data.source "coco") on a tiny dataset written here: solid rectangles of one colour per
// class on black, so where a box's pixels end up after resize, pad_to_max, flip and scale jitter is read
// back from the pixels themselves (an independent reference, not the transform code).
#include "data/dataset.hpp"

#include "data_test_support.hpp"
#include "io/color_image.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <set>
#include <thread>

using namespace tessera;
using namespace tessera::data;
using detection::Box;
using Json = nlohmann::json;
using tessera::data::test::error_message;
using tessera::data::test::same_bytes;

namespace {

namespace fs = std::filesystem;

// Colour of each class's rectangles, [R, G, B]: cat red, dog green, bird blue, zebra white.
constexpr std::array<std::array<float, 3>, 4> k_class_colours{{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 1, 1}}};

// A box [x_min, y_min, x_max, y_max) in pixels and its class, drawn as a solid rectangle.
struct Rectangle {
    int x_min, y_min, x_max, y_max;
    std::int32_t class_id;
};

// Image [3, height, width] f32: black with the rectangles in their classes' colours.
Tensor draw(std::int64_t height, std::int64_t width, const std::vector<Rectangle>& rectangles) {
    Tensor image = Tensor::zeros({3, height, width}, DType::F32);
    for (const Rectangle& r : rectangles) {
        for (int c = 0; c < 3; ++c) {
            for (int y = r.y_min; y < r.y_max; ++y) {
                for (int x = r.x_min; x < r.x_max; ++x)
                    image.at<float>({c, y, x}) =
                        k_class_colours[static_cast<std::size_t>(r.class_id)][static_cast<std::size_t>(c)];
            }
        }
    }
    return image;
}

// The pixels of image [3, H, W] whose colour is within 0.5 of `colour` in every channel, as the box
// [min x, min y, max x + 1, max y + 1]; empty when there are none.
Box colour_extent(const Tensor& image, const std::array<float, 3>& colour) {
    int x_min = 1 << 30, y_min = 1 << 30, x_max = -1, y_max = -1;
    for (int y = 0; y < image.dim(1); ++y) {
        for (int x = 0; x < image.dim(2); ++x) {
            bool match = true;
            for (int c = 0; c < 3; ++c)
                match = match && std::abs(image.at<float>({c, y, x}) - colour[static_cast<std::size_t>(c)]) < 0.5f;
            if (!match) continue;
            x_min = std::min(x_min, x);
            y_min = std::min(y_min, y);
            x_max = std::max(x_max, x + 1);
            y_max = std::max(y_max, y + 1);
        }
    }
    if (x_max < 0) return {};
    return {static_cast<float>(x_min), static_cast<float>(y_min), static_cast<float>(x_max), static_cast<float>(y_max)};
}

// Image n of batch [N, C, H, W] as [C, H, W].
Tensor image_of(const Tensor& batch, std::int64_t n) {
    return batch.view_box({n, 0, 0, 0}, {1, batch.dim(1), batch.dim(2), batch.dim(3)})
        .contiguous()
        .reshape({batch.dim(1), batch.dim(2), batch.dim(3)});
}

std::vector<detection::LabeledBox> valid_objects(const detection::PaddedGroundTruth& truth) {
    std::vector<detection::LabeledBox> objects;
    for (std::int64_t g = 0; g < truth.num_valid; ++g) {
        objects.push_back({{truth.boxes.at<float>({g, 0}), truth.boxes.at<float>({g, 1}), truth.boxes.at<float>({g, 2}),
                            truth.boxes.at<float>({g, 3})},
                           truth.classes.at<std::int32_t>({g})});
    }
    return objects;
}

// Tolerance of a box edge against its colour's edge, pixels: the colour's extent is whole pixels (a pixel
// counts when bilinear resampling leaves it nearer the colour than not, i.e. its centre is about inside
// the scaled edge), so it is within half a pixel of the true edge, plus a little where two edges blend at
// a corner (0.6 seen); a box one pixel off fails.
constexpr float k_edge_tolerance = 0.75f;

// Every box of `objects` matches the extent of its class's colour in `image` (one rectangle per class
// per image in the fixture).
void expect_boxes_on_their_pixels(const Tensor& image, const std::vector<detection::LabeledBox>& objects,
                                  const std::string& what) {
    for (const detection::LabeledBox& object : objects) {
        const Box seen = colour_extent(image, k_class_colours[static_cast<std::size_t>(object.class_id)]);
        const Box& box = object.box;
        ASSERT_FALSE(seen.empty()) << what << ": class " << object.class_id << "'s colour is nowhere in the image";
        EXPECT_NEAR(box.x_min, seen.x_min, k_edge_tolerance) << what << ", class " << object.class_id;
        EXPECT_NEAR(box.y_min, seen.y_min, k_edge_tolerance) << what << ", class " << object.class_id;
        EXPECT_NEAR(box.x_max, seen.x_max, k_edge_tolerance) << what << ", class " << object.class_id;
        EXPECT_NEAR(box.y_max, seen.y_max, k_edge_tolerance) << what << ", class " << object.class_id;
    }
}

// The fixture: three PNGs in images/ and instances.json listing them, categories listed out of id order
// (20 zebra, 1 cat, 9 bird, 5 dog: classes cat 0, dog 1, bird 2, zebra 3).
//   id 1  wide.png  80×40  cat [10, 5, 30, 25], dog [50, 20, 74, 36], a crowd dog [0, 0, 8, 8] (not drawn)
//   id 2  tall.png  40×60  bird [4, 30, 20, 54], zebra [22, 2, 36, 12]
//   id 4  last.png  48×48  dog [8, 16, 40, 32]
class CocoSourceFixture : public ::testing::Test {
protected:
    void SetUp() override {
        fs::create_directories(scratch.path() / "images");
        write_color_png(draw(40, 80, {{10, 5, 30, 25, 0}, {50, 20, 74, 36, 1}}),
                        scratch.path() / "images" / "wide.png");
        write_color_png(draw(60, 40, {{4, 30, 20, 54, 2}, {22, 2, 36, 12, 3}}), scratch.path() / "images" / "tall.png");
        write_color_png(draw(48, 48, {{8, 16, 40, 32, 1}}), scratch.path() / "images" / "last.png");
        json = Json::parse(R"({
            "images": [
                {"id": 1, "file_name": "wide.png", "width": 80, "height": 40},
                {"id": 2, "file_name": "tall.png", "width": 40, "height": 60},
                {"id": 4, "file_name": "last.png", "width": 48, "height": 48}
            ],
            "annotations": [
                {"id": 10, "image_id": 1, "category_id": 1, "bbox": [10, 5, 20, 20], "iscrowd": 0},
                {"id": 11, "image_id": 1, "category_id": 5, "bbox": [50, 20, 24, 16], "iscrowd": 0},
                {"id": 12, "image_id": 1, "category_id": 5, "bbox": [0, 0, 8, 8], "iscrowd": 1},
                {"id": 13, "image_id": 2, "category_id": 9, "bbox": [4, 30, 16, 24]},
                {"id": 14, "image_id": 2, "category_id": 20, "bbox": [22, 2, 14, 10]},
                {"id": 15, "image_id": 4, "category_id": 5, "bbox": [8, 16, 32, 16]}
            ],
            "categories": [{"id": 20, "name": "zebra"}, {"id": 1, "name": "cat"}, {"id": 9, "name": "bird"}, {"id": 5, "name": "dog"}]
        })");
        std::ofstream(scratch.path() / "instances.json") << json.dump(1);
    }

    // Every image trains (no holdout), pixels as decoded, no augmentation.
    DataConfig config() const {
        DataConfig result;
        result.source = SourceKind::Coco;
        result.annotations_file = scratch.path() / "instances.json";
        result.images_dir = scratch.path() / "images";
        result.static_shape = StaticShape::Resize;
        result.normalization = Normalization::None;
        result.holdout_fraction = 0;
        result.max_number_of_boxes = 10;
        result.seed = 5;
        return result;
    }

    // Writes an annotation file holding only last.png (for a separate held-out split) in eval/.
    fs::path write_eval_file(const std::string& dog_name = "dog") const {
        Json eval = json;
        eval["images"] = Json::array({json["images"][2]});
        eval["annotations"] = Json::array({json["annotations"][5]});
        eval["categories"][3]["name"] = dog_name;
        fs::create_directories(scratch.path() / "eval");
        fs::copy_file(scratch.path() / "images" / "last.png", scratch.path() / "eval" / "last.png",
                      fs::copy_options::overwrite_existing);
        std::ofstream(scratch.path() / "eval.json") << eval.dump(1);
        return scratch.path() / "eval.json";
    }

    tessera::data::test::ScratchDir scratch;
    Json json;
};

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// The classes of a sample's boxes identify which fixture image it is.
std::string which_image(const std::vector<detection::LabeledBox>& objects) {
    std::set<std::int32_t> classes;
    for (const auto& object : objects) classes.insert(object.class_id);
    if (classes == std::set<std::int32_t>{0, 1}) return "wide";
    if (classes == std::set<std::int32_t>{2, 3}) return "tall";
    if (classes == std::set<std::int32_t>{1}) return "last";
    return "?";
}

}  // namespace

TEST_F(CocoSourceFixture, BatchesHaveTheInputShapeAndPaddedGroundTruthWithoutCrowdBoxes) {
    const auto dataset = make_dataset(config(), {4, 3, 64, 64}, 4);
    EXPECT_TRUE(dataset->is_detection());
    EXPECT_EQ(dataset->num_classes(), 4);
    EXPECT_EQ(dataset->class_names(), (std::vector<std::string>{"cat", "dog", "bird", "zebra"}));
    EXPECT_TRUE(contains(dataset->describe(), "3 training images")) << dataset->describe();
    EXPECT_TRUE(contains(dataset->describe(), "1 crowd")) << dataset->describe();
    std::set<std::string> seen;
    for (std::int64_t index = 0; index < 4; ++index) {
        const Batch batch = dataset->training_batch(index);
        EXPECT_EQ(batch.images.shape(), (Shape{4, 3, 64, 64}));
        EXPECT_FALSE(batch.labels.is_defined());
        ASSERT_EQ(batch.ground_truth.size(), 4u);
        for (const detection::PaddedGroundTruth& truth : batch.ground_truth) {
            EXPECT_EQ(truth.boxes.shape(), (Shape{10, 4}));
            EXPECT_EQ(truth.classes.shape(), (Shape{10}));
            const std::string image = which_image(valid_objects(truth));
            seen.insert(image);
            // wide.png's crowd dog is not a box: 2 objects there, as in tall.png; 1 in last.png.
            EXPECT_EQ(truth.num_valid, image == "last" ? 1 : 2) << image;
            for (std::int64_t g = truth.num_valid; g < 10; ++g) {
                for (std::int64_t k = 0; k < 4; ++k) EXPECT_EQ(truth.boxes.at<float>({g, k}), 0.0f);
                EXPECT_EQ(truth.classes.at<std::int32_t>({g}), 0);
            }
        }
    }
    EXPECT_EQ(seen, (std::set<std::string>{"wide", "tall", "last"}));
    EXPECT_EQ(dataset->num_eval_examples(), 0);  // holdout_fraction 0
}

// resize (the aspect ratio changes), pad_to_max on a square and on a non-square input, each with and
// without flips and scale jitter: every box lies on its own pixels, in training batches and held-out
// examples alike.
TEST_F(CocoSourceFixture, BoxesStayOnTheirPixelsThroughResizePadFlipAndJitter) {
    struct Case {
        StaticShape shape;
        Shape input;
        bool flip;
        std::array<double, 2> jitter;
    };
    const std::vector<Case> cases{
        {StaticShape::Resize, {4, 3, 64, 64}, false, {1, 1}},
        {StaticShape::Resize, {4, 3, 48, 96}, true, {1, 1}},
        {StaticShape::PadToMax, {4, 3, 64, 64}, false, {1, 1}},
        {StaticShape::PadToMax, {4, 3, 48, 96}, true, {1, 1}},
        {StaticShape::PadToMax, {4, 3, 64, 64}, true, {0.6, 1.6}},
        {StaticShape::Resize, {4, 3, 56, 64}, true, {0.7, 1.5}},
    };
    for (const Case& c : cases) {
        DataConfig cfg = config();
        cfg.static_shape = c.shape;
        cfg.scale_jitter = c.jitter;
        cfg.holdout_fraction = 0.34;  // last.png held out
        if (c.flip) cfg.augment.flip_axes = {1};
        const auto dataset = make_dataset(cfg, c.input, 4);
        const std::string what = std::string(static_shape_name(c.shape)) + " " + shape_to_string(c.input) +
                                 (c.flip ? " flip" : "") + (c.jitter[0] != 1 ? " jitter" : "");
        std::set<float> cat_x_min, cat_width;
        for (std::int64_t index = 0; index < 6; ++index) {
            const Batch batch = dataset->training_batch(index);
            for (std::int64_t n = 0; n < c.input[0]; ++n) {
                const std::vector<detection::LabeledBox> objects =
                    valid_objects(batch.ground_truth[static_cast<std::size_t>(n)]);
                const Tensor image = image_of(batch.images, n);
                expect_boxes_on_their_pixels(image, objects,
                                             what + ", batch " + std::to_string(index) + " image " + std::to_string(n));
                for (const auto& object : objects) {
                    if (object.class_id != 0) continue;
                    cat_x_min.insert(object.box.x_min);
                    cat_width.insert(object.box.width());
                }
                // pad_to_max without jitter: wide.png (80×40) fills the top half of a square input, zeros below.
                if (c.shape == StaticShape::PadToMax && c.jitter[0] == 1 && c.input[2] == c.input[3] &&
                    which_image(objects) == "wide") {
                    const std::int64_t side = c.input[2];
                    float below = 0;
                    for (std::int64_t ch = 0; ch < 3; ++ch) {
                        for (std::int64_t y = side / 2; y < side; ++y) {
                            for (std::int64_t x = 0; x < side; ++x)
                                below = std::max(below, std::abs(image.at<float>({ch, y, x})));
                        }
                    }
                    EXPECT_EQ(below, 0.0f) << what << ": padding below the content";
                }
            }
        }
        if (c.flip) {
            EXPECT_GT(cat_x_min.size(), 1u) << what << ": the cat never flipped";
        }
        if (c.jitter[0] != 1) {
            EXPECT_GT(cat_width.size(), 2u) << what << ": the jitter never changed the cat's size";
        }
        ASSERT_EQ(dataset->num_eval_examples(), 1) << what;
        const Example held_out = dataset->eval_example(0);
        EXPECT_EQ(held_out.name, "last.png");
        EXPECT_EQ(held_out.image.shape(), (Shape{3, c.input[2], c.input[3]}));
        ASSERT_EQ(held_out.objects.size(), 1u);
        expect_boxes_on_their_pixels(held_out.image, held_out.objects, what + ", held out");
    }
}

TEST_F(CocoSourceFixture, BatchesArePureFunctionsOfTheIndexFromAnyThread) {
    DataConfig cfg = config();
    cfg.static_shape = StaticShape::PadToMax;
    cfg.scale_jitter = {0.8, 1.2};
    cfg.augment.flip_axes = {1};
    cfg.augment.intensity_scale = 0.2;
    cfg.augment.intensity_shift = 0.1;
    const auto dataset = make_dataset(cfg, {4, 3, 64, 64}, 4);
    const Batch first = dataset->training_batch(3);
    // The same index from two threads at once (the prefetcher's and the caller's), and from a new dataset.
    Batch from_thread_a, from_thread_b;
    std::thread a([&] { from_thread_a = dataset->training_batch(3); });
    std::thread b([&] { from_thread_b = dataset->training_batch(3); });
    a.join();
    b.join();
    Batch fresh = make_dataset(cfg, {4, 3, 64, 64}, 4)->training_batch(3);
    for (const Batch* again : {&from_thread_a, &from_thread_b, &fresh}) {
        EXPECT_TRUE(same_bytes(first.images, again->images));
        for (std::size_t n = 0; n < 4; ++n) {
            EXPECT_TRUE(same_bytes(first.ground_truth[n].boxes, again->ground_truth[n].boxes));
            EXPECT_TRUE(same_bytes(first.ground_truth[n].classes, again->ground_truth[n].classes));
        }
    }
    EXPECT_FALSE(same_bytes(first.images, dataset->training_batch(4).images));
    DataConfig reseeded = cfg;
    reseeded.seed = 6;
    EXPECT_FALSE(same_bytes(first.images, make_dataset(reseeded, {4, 3, 64, 64}, 4)->training_batch(3).images));
}

TEST_F(CocoSourceFixture, KeepsACategorySubsetByNameOrId) {
    DataConfig cfg = config();
    cfg.category_names = {"bird"};
    cfg.category_ids = {1};  // cat; classes follow COCO ids: cat 0, bird 1
    const auto dataset = make_dataset(cfg, {4, 3, 64, 64}, 2);
    EXPECT_EQ(dataset->class_names(), (std::vector<std::string>{"cat", "bird"}));
    for (std::int64_t index = 0; index < 3; ++index) {
        const Batch batch = dataset->training_batch(index);
        for (std::size_t n = 0; n < 4; ++n) {
            const auto objects = valid_objects(batch.ground_truth[n]);
            // wide.png: its cat alone; tall.png: its bird alone; last.png: nothing (its dog is not kept).
            EXPECT_LE(objects.size(), 1u);
            const Tensor image = image_of(batch.images, static_cast<std::int64_t>(n));
            for (const auto& object : objects) {
                ASSERT_TRUE(object.class_id == 0 || object.class_id == 1);
                // cat is class 0 and red, bird class 1 and blue.
                expect_boxes_on_their_pixels(image, {{object.box, object.class_id == 0 ? 0 : 2}}, "subset");
            }
        }
    }
    const std::string message = error_message([&] { make_dataset(cfg, {4, 3, 64, 64}, 4); });
    EXPECT_TRUE(contains(message, "model.num_classes is 4 but the COCO source keeps 2 categories")) << message;
    EXPECT_TRUE(contains(message, "cat (1), bird (9)")) << message;
    EXPECT_TRUE(contains(message, "set model.num_classes to 2")) << message;
}

TEST_F(CocoSourceFixture, TooManyBoxesStopsNamingTheImageUnlessAskedToKeepSome) {
    DataConfig cfg = config();
    cfg.max_number_of_boxes = 1;
    const std::string message = error_message([&] { make_dataset(cfg, {2, 3, 64, 64}, 4); });
    EXPECT_TRUE(contains(message,
                         "image 'wide.png' (COCO id 1 in instances.json) has 2 objects, more than "
                         "data.max_number_of_boxes = 1"))
        << message;
    EXPECT_TRUE(contains(message, "keep_largest")) << message;
    cfg.excess_boxes = ExcessBoxes::KeepLargest;
    const auto dataset = make_dataset(cfg, {2, 3, 64, 64}, 4);
    for (const detection::PaddedGroundTruth& truth : dataset->training_batch(0).ground_truth) {
        EXPECT_EQ(truth.boxes.shape(), (Shape{1, 4}));
        EXPECT_EQ(truth.num_valid, 1);
    }
}

TEST_F(CocoSourceFixture, HeldOutImagesComeFromASecondFileWithTheSameClasses) {
    DataConfig cfg = config();
    cfg.eval_annotations_file = write_eval_file();
    cfg.eval_images_dir = scratch.path() / "eval";
    cfg.holdout_fraction = 0.5;  // not used with a held-out file
    const auto dataset = make_dataset(cfg, {2, 3, 64, 64}, 4);
    EXPECT_TRUE(contains(dataset->describe(), "3 training images + 1 held out from eval.json")) << dataset->describe();
    ASSERT_EQ(dataset->num_eval_examples(), 1);
    const Example held_out = dataset->eval_example(0);
    EXPECT_EQ(held_out.name, "last.png");
    ASSERT_EQ(held_out.objects.size(), 1u);
    EXPECT_EQ(held_out.objects[0].class_id, 1);  // dog, as in training
    expect_boxes_on_their_pixels(held_out.image, held_out.objects, "held-out file");

    cfg.eval_annotations_file = write_eval_file("hound");
    const std::string message = error_message([&] { make_dataset(cfg, {2, 3, 64, 64}, 4); });
    EXPECT_TRUE(contains(message, "COCO category 5 is \"dog\" in")) << message;
    EXPECT_TRUE(contains(message, "but \"hound\" in")) << message;

    DataConfig single = config();
    single.holdout_fraction = 0.9;  // floor(0.9 · 3) = 2 held out, 1 left
    EXPECT_EQ(make_dataset(single, {2, 3, 64, 64}, 4)->num_eval_examples(), 2);
}

TEST_F(CocoSourceFixture, GreyInputsAreTheMeanOfRgb) {
    DataConfig cfg = config();
    cfg.holdout_fraction = 0.34;
    const auto dataset = make_dataset(cfg, {2, 1, 48, 48}, 4);
    EXPECT_EQ(dataset->training_batch(0).images.shape(), (Shape{2, 1, 48, 48}));
    const Example held_out = dataset->eval_example(0);  // last.png at its own size: no resampling
    ASSERT_EQ(held_out.image.shape(), (Shape{1, 48, 48}));
    EXPECT_NEAR(held_out.image.at<float>({0, 24, 24}), 1.0f / 3.0f, 1e-6f);  // inside the green dog
    EXPECT_EQ(held_out.image.at<float>({0, 2, 2}), 0.0f);
}

TEST_F(CocoSourceFixture, RefusesWhatItCannotFeedWithTheFix) {
    const auto message_for = [&](const std::function<void(DataConfig&)>& edit, const Shape& input = {2, 3, 64, 64}) {
        DataConfig cfg = config();
        edit(cfg);
        return error_message([&] { make_dataset(cfg, input, 4); });
    };
    EXPECT_TRUE(contains(message_for([](DataConfig& c) { c.static_shape = StaticShape::Crop; }),
                         "use \"resize\" (fixed shape) or \"pad_to_max\""));
    EXPECT_TRUE(
        contains(message_for([](DataConfig& c) { c.augment.flip_axes = {0}; }), "flips left-right only (axis 1"));
    EXPECT_TRUE(contains(message_for([](DataConfig& c) { c.augment.rotate90 = true; }), "remove rotate90"));
    EXPECT_TRUE(contains(message_for([](DataConfig&) {}, {2, 2, 64, 64}), "set input.channels to 3 (or 1 for grey"));
    EXPECT_TRUE(contains(message_for([](DataConfig& c) {
                             c.scale_jitter = {1.5, 1.2};
                         }),
                         "data.scale_jitter must be [min, max]"));
    EXPECT_TRUE(
        contains(message_for([](DataConfig& c) { c.eval_images_dir = "eval"; }), "data.eval_images is set without"));
    EXPECT_TRUE(contains(message_for([](DataConfig& c) { c.annotations_file.clear(); }), "data.annotations is empty"));
    EXPECT_TRUE(contains(message_for([](DataConfig& c) {
                             c.holdout_fraction = 0.5;
                             c.images_dir = "/nonexistent/folder";
                         }),
                         "/nonexistent/folder"));
    DataConfig shapes;
    shapes.source = SourceKind::SyntheticShapes;
    shapes.scale_jitter = {0.8, 1.2};
    EXPECT_TRUE(contains(error_message([&] { validate(shapes); }), "data.scale_jitter is for a COCO source"));
}
