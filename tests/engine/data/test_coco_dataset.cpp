// The COCO reader on a small instances.json written here, with PNG and JPEG images written by OpenCV:
// sparse category ids listed out of order, a crowd box, a degenerate box, a box outside its image, one
// past the border, an image without annotations; then every error a user can cause, with its message.
#include "data/coco_dataset.hpp"

#include "data_test_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <fstream>

using namespace tessera;
using namespace tessera::data;
using detection::Box;
using Json = nlohmann::json;
using tessera::data::test::error_message;

namespace {

namespace fs = std::filesystem;

// The fixture: three images in images/ (one in a subfolder) and the JSON that lists them.
//   id 1  a.png      40×30 RGB 8-bit: (200, 100, 50) everywhere but pixel (x 5, y 7) = (10, 20, 30)
//   id 2  b.png      20×10 grey 16-bit: 1000·y + 37·x
//   id 7  sub/c.jpg  16×16 RGB, flat (0, 128, 255); no annotations
// Categories by id: 3 cat, 17 dog, 42 bird, 90 zebra (listed 90, 3, 42, 17): classes 0..3 in id order.
//   ann 0  image 1  cat    [2.5, 3, 10, 5]    → {2.5, 3, 12.5, 8}   class 0, area 40.5 given
//   ann 1  image 1  zebra  [30, 20, 20, 20]   → {30, 20, 40, 30}    class 3 (clipped at 40×30), area 400
//   ann 2  image 1  dog    [1, 1, 5, 5]       iscrowd 1: ignored
//   ann 3  image 2  bird   [0, 0, 0, 4]       w = 0: degenerate
//   ann 4  image 2  dog    [25, 2, 3, 3]      x ≥ 20 = width: outside the image
//   ann 5  image 2  dog    [4, 2, 6, 5]       → {4, 2, 10, 7}       class 1; no iscrowd, no area: w·h = 30
//   ann 6  image 2  bird   [-2, -1, 4, 3]     → {0, 0, 2, 2}        class 2 (clipped), iscrowd false
class CocoFixture : public ::testing::Test {
protected:
    void SetUp() override {
        fs::create_directories(images_dir() / "sub");
        cv::Mat a(30, 40, CV_8UC3, cv::Scalar(50, 100, 200));  // OpenCV's order is B, G, R
        a.at<cv::Vec3b>(7, 5) = cv::Vec3b(30, 20, 10);
        ASSERT_TRUE(cv::imwrite((images_dir() / "a.png").string(), a));
        cv::Mat b(10, 20, CV_16UC1);
        for (int y = 0; y < 10; ++y) {
            for (int x = 0; x < 20; ++x) b.at<std::uint16_t>(y, x) = static_cast<std::uint16_t>(1000 * y + 37 * x);
        }
        ASSERT_TRUE(cv::imwrite((images_dir() / "b.png").string(), b));
        cv::Mat c(16, 16, CV_8UC3, cv::Scalar(255, 128, 0));
        ASSERT_TRUE(cv::imwrite((images_dir() / "sub" / "c.jpg").string(), c, {cv::IMWRITE_JPEG_QUALITY, 100}));

        json = Json::parse(R"({
            "info": {"description": "fixture"},
            "images": [
                {"id": 1, "file_name": "a.png", "width": 40, "height": 30, "license": 1},
                {"id": 2, "file_name": "b.png", "width": 20, "height": 10},
                {"id": 7, "file_name": "sub/c.jpg", "width": 16, "height": 16}
            ],
            "annotations": [
                {"id": 100, "image_id": 1, "category_id": 3, "bbox": [2.5, 3, 10, 5], "iscrowd": 0, "area": 40.5},
                {"id": 101, "image_id": 1, "category_id": 90, "bbox": [30, 20, 20, 20], "iscrowd": 0, "area": 400},
                {"id": 102, "image_id": 1, "category_id": 17, "bbox": [1, 1, 5, 5], "iscrowd": 1, "area": 25},
                {"id": 103, "image_id": 2, "category_id": 42, "bbox": [0, 0, 0, 4], "iscrowd": 0, "area": 0},
                {"id": 104, "image_id": 2, "category_id": 17, "bbox": [25, 2, 3, 3], "iscrowd": 0, "area": 9},
                {"id": 105, "image_id": 2, "category_id": 17, "bbox": [4, 2, 6, 5]},
                {"id": 106, "image_id": 2, "category_id": 42, "bbox": [-2, -1, 4, 3], "iscrowd": false, "area": 12}
            ],
            "categories": [
                {"id": 90, "name": "zebra", "supercategory": "animal"},
                {"id": 3, "name": "cat"},
                {"id": 42, "name": "bird"},
                {"id": 17, "name": "dog"}
            ]
        })");
        write_json();
    }

    fs::path images_dir() const { return scratch.path() / "images"; }
    fs::path json_file() const { return scratch.path() / "instances.json"; }
    void write_json() const { std::ofstream(json_file()) << json.dump(1); }
    CocoOptions options() const {
        CocoOptions result;
        result.annotations_file = json_file();
        result.images_dir = images_dir();
        return result;
    }

    // The message of loading the dataset after `edit` changes the JSON.
    std::string error_after(const std::function<void(Json&)>& edit) {
        edit(json);
        write_json();
        return error_message([&] { CocoDataset dataset(options()); });
    }

    tessera::data::test::ScratchDir scratch;
    Json json;
};

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

}  // namespace

TEST_F(CocoFixture, MapsCategoriesConvertsBoxesAndCountsWhatItDrops) {
    const CocoDataset dataset(options());
    ASSERT_EQ(dataset.num_classes(), 4);
    const std::vector<std::pair<std::int64_t, std::string>> expected{
        {3, "cat"}, {17, "dog"}, {42, "bird"}, {90, "zebra"}};
    for (std::int32_t k = 0; k < 4; ++k) {
        EXPECT_EQ(dataset.categories()[k].class_id, k);
        EXPECT_EQ(dataset.categories()[k].coco_id, expected[k].first);
        EXPECT_EQ(dataset.categories()[k].name, expected[k].second);
    }
    ASSERT_EQ(dataset.size(), 3);
    const CocoImage& a = dataset.image(0);
    EXPECT_EQ(a.coco_id, 1);
    EXPECT_EQ(a.width, 40);
    EXPECT_EQ(a.height, 30);
    ASSERT_EQ(a.objects.size(), 2u);
    EXPECT_EQ(a.objects[0].box, (Box{2.5f, 3, 12.5f, 8}));
    EXPECT_EQ(a.objects[0].class_id, 0);
    EXPECT_EQ(a.objects[1].box, (Box{30, 20, 40, 30}));
    EXPECT_EQ(a.objects[1].class_id, 3);
    EXPECT_EQ(a.areas, (std::vector<float>{40.5f, 400.0f}));

    const CocoImage& b = dataset.image(1);
    EXPECT_EQ(b.coco_id, 2);
    ASSERT_EQ(b.objects.size(), 2u);
    EXPECT_EQ(b.objects[0].box, (Box{4, 2, 10, 7}));
    EXPECT_EQ(b.objects[0].class_id, 1);
    EXPECT_EQ(b.objects[1].box, (Box{0, 0, 2, 2}));
    EXPECT_EQ(b.objects[1].class_id, 2);
    EXPECT_EQ(b.areas, (std::vector<float>{30.0f, 12.0f}));

    EXPECT_EQ(dataset.image(2).coco_id, 7);
    EXPECT_TRUE(dataset.image(2).objects.empty());  // kept: a negative

    const CocoCounts& counts = dataset.counts();
    EXPECT_EQ(counts.annotations, 7);
    EXPECT_EQ(counts.kept, 4);
    EXPECT_EQ(counts.crowd_ignored, 1);
    EXPECT_EQ(counts.degenerate, 1);
    EXPECT_EQ(counts.outside_image, 1);
    EXPECT_EQ(counts.other_category, 0);
    EXPECT_EQ(counts.images_without_objects, 1);
}

TEST_F(CocoFixture, KeepsASubsetOfCategoriesByIdOrName) {
    CocoOptions subset = options();
    subset.keep_category_names = {"zebra"};
    subset.keep_category_ids = {17};
    const CocoDataset dataset(subset);
    // Dog (17) and zebra (90) in id order.
    ASSERT_EQ(dataset.num_classes(), 2);
    EXPECT_EQ(dataset.categories()[0].name, "dog");
    EXPECT_EQ(dataset.categories()[1].coco_id, 90);
    ASSERT_EQ(dataset.image(0).objects.size(), 1u);
    EXPECT_EQ(dataset.image(0).objects[0].class_id, 1);  // zebra
    ASSERT_EQ(dataset.image(1).objects.size(), 1u);
    EXPECT_EQ(dataset.image(1).objects[0].box, (Box{4, 2, 10, 7}));
    EXPECT_EQ(dataset.image(1).objects[0].class_id, 0);  // dog
    // Cat (ann 0) and bird (anns 3 and 6: the category is checked before the box) are other categories;
    // the crowd dog stays a crowd, the dog outside its image stays outside.
    EXPECT_EQ(dataset.counts().other_category, 3);
    EXPECT_EQ(dataset.counts().crowd_ignored, 1);
    EXPECT_EQ(dataset.counts().degenerate, 0);
    EXPECT_EQ(dataset.counts().outside_image, 1);
    EXPECT_EQ(dataset.counts().kept, 2);
    EXPECT_EQ(dataset.counts().images_without_objects, 1);

    CocoOptions unknown = options();
    unknown.keep_category_names = {"Zebra"};
    EXPECT_TRUE(contains(error_message([&] { CocoDataset bad(unknown); }), "category \"Zebra\" asked to keep"));
    unknown = options();
    unknown.keep_category_ids = {5};
    EXPECT_TRUE(contains(error_message([&] { CocoDataset bad(unknown); }), "category id 5 asked to keep"));
}

TEST_F(CocoFixture, LoadsPixelsAsRgbInZeroToOne) {
    const CocoDataset dataset(options());
    // 8-bit RGB: value / 255, channels R, G, B. Exact up to the f32 product (1e-6).
    const DetectionSample a = dataset.load(0);
    ASSERT_EQ(a.image.shape(), (Shape{3, 30, 40}));
    EXPECT_EQ(a.content_size, (std::array<std::int64_t, 2>{30, 40}));
    EXPECT_NEAR(a.image.at<float>({0, 0, 0}), 200.0f / 255, 1e-6f);
    EXPECT_NEAR(a.image.at<float>({1, 0, 0}), 100.0f / 255, 1e-6f);
    EXPECT_NEAR(a.image.at<float>({2, 29, 39}), 50.0f / 255, 1e-6f);
    EXPECT_NEAR(a.image.at<float>({0, 7, 5}), 10.0f / 255, 1e-6f);
    EXPECT_NEAR(a.image.at<float>({1, 7, 5}), 20.0f / 255, 1e-6f);
    EXPECT_NEAR(a.image.at<float>({2, 7, 5}), 30.0f / 255, 1e-6f);
    ASSERT_EQ(a.objects.size(), 2u);
    EXPECT_EQ(a.objects[1].box, (Box{30, 20, 40, 30}));

    // 16-bit grey: value / 65535 in all three channels.
    const DetectionSample b = dataset.load(1);
    ASSERT_EQ(b.image.shape(), (Shape{3, 10, 20}));
    for (const auto& [y, x] : {std::pair{0, 0}, {9, 19}, {4, 7}}) {
        const float expected = static_cast<float>(1000 * y + 37 * x) / 65535.0f;
        for (std::int64_t c = 0; c < 3; ++c)
            EXPECT_NEAR(b.image.at<float>({c, y, x}), expected, 1e-6f) << y << ", " << x;
    }

    // JPEG at quality 100, a flat colour: within 3 / 255 of (0, 128, 255) (chroma rounding).
    const DetectionSample c = dataset.load(2);
    ASSERT_EQ(c.image.shape(), (Shape{3, 16, 16}));
    EXPECT_NEAR(c.image.at<float>({0, 8, 8}), 0.0f, 3.0f / 255);
    EXPECT_NEAR(c.image.at<float>({1, 8, 8}), 128.0f / 255, 3.0f / 255);
    EXPECT_NEAR(c.image.at<float>({2, 8, 8}), 1.0f, 3.0f / 255);
    EXPECT_TRUE(c.objects.empty());

    // Other formats, depths, alpha and the decoder's own errors: tests/engine/io/test_color_image.cpp.
}

TEST_F(CocoFixture, NamesTheFileAndTheJsonPathOfEveryMistake) {
    const std::string file = json_file().string();

    // Malformed JSON.
    std::ofstream(json_file()) << R"({"images": [ {"id": 1,, } ])";
    std::string message = error_message([&] { CocoDataset dataset(options()); });
    EXPECT_TRUE(contains(message, file) && contains(message, "is not valid JSON")) << message;

    // Missing fields.
    message = error_after([](Json& j) { j["annotations"][2].erase("bbox"); });
    EXPECT_TRUE(contains(message, file) && contains(message, "annotations[2] has no \"bbox\" field")) << message;
    SetUp();
    message = error_after([](Json& j) { j.erase("categories"); });
    EXPECT_TRUE(contains(message, "the top level has no \"categories\" field")) << message;
    SetUp();
    message = error_after([](Json& j) { j["images"][1].erase("height"); });
    EXPECT_TRUE(contains(message, "images[1] has no \"height\" field")) << message;

    // Wrong types.
    SetUp();
    message = error_after([](Json& j) { j["images"][1]["width"] = "20"; });
    EXPECT_TRUE(contains(message, file) && contains(message, "expected images[1].width to be an integer, got a string"))
        << message;
    SetUp();
    message = error_after([](Json& j) { j["annotations"][0]["bbox"][2] = "10"; });
    EXPECT_TRUE(contains(message, "expected annotations[0].bbox[2] to be a number, got a string")) << message;
    SetUp();
    message = error_after([](Json& j) { j["annotations"][0]["bbox"] = Json::array({1, 2, 3}); });
    EXPECT_TRUE(contains(message, "expected annotations[0].bbox to be [x, y, width, height], got [1,2,3]")) << message;
    SetUp();
    message = error_after([](Json& j) { j["categories"][0]["name"] = 5; });
    EXPECT_TRUE(contains(message, "expected categories[0].name to be a string, got a number")) << message;
    SetUp();
    message = error_after([](Json& j) { j["annotations"][3]["image_id"] = 2.5; });
    EXPECT_TRUE(contains(message, "expected annotations[3].image_id to be an integer, got 2.5")) << message;
    SetUp();
    message = error_after([](Json& j) { j["annotations"] = Json::object(); });
    EXPECT_TRUE(contains(message, "expected annotations to be an array, got an object")) << message;
    SetUp();
    message = error_after([](Json& j) { j["annotations"][4]["iscrowd"] = 2; });
    EXPECT_TRUE(contains(message, "expected annotations[4].iscrowd to be 0 or 1, got 2")) << message;

    // Unknown image or category, repeated ids.
    SetUp();
    message = error_after([](Json& j) { j["annotations"][4]["image_id"] = 99; });
    EXPECT_TRUE(contains(message, file) && contains(message, "annotations[4].image_id = 99 names no image")) << message;
    SetUp();
    message = error_after([](Json& j) { j["annotations"][1]["category_id"] = 5; });
    EXPECT_TRUE(contains(message, "annotations[1].category_id = 5 names no category")) << message;
    SetUp();
    message = error_after([](Json& j) { j["images"][2]["id"] = 1; });
    EXPECT_TRUE(contains(message, "images[2].id = 1 is given to two images")) << message;
    SetUp();
    message = error_after([](Json& j) { j["images"][0]["width"] = 0; });
    EXPECT_TRUE(contains(message, "images[0] (\"a.png\") is 0×30 pixels")) << message;

    // A missing image file names the file and the folder; so does a missing folder.
    SetUp();
    fs::remove(images_dir() / "b.png");
    message = error_message([&] { CocoDataset dataset(options()); });
    EXPECT_TRUE(contains(message, "image \"b.png\" (images[1] of '" + file + "') is not in the images folder '" +
                                      images_dir().string() + "'"))
        << message;
    CocoOptions no_folder = options();
    no_folder.images_dir = scratch.path() / "nowhere";
    message = error_message([&] { CocoDataset dataset(no_folder); });
    EXPECT_TRUE(contains(message, "images folder '" + no_folder.images_dir.string() + "' does not exist")) << message;
    CocoOptions no_file = options();
    no_file.annotations_file = scratch.path() / "missing.json";
    message = error_message([&] { CocoDataset dataset(no_file); });
    EXPECT_TRUE(contains(message, "missing.json' does not exist")) << message;
}

TEST_F(CocoFixture, LoadChecksTheImageAgainstTheJson) {
    // The JSON says 21×10, the PNG is 20×10.
    json["images"][1]["width"] = 21;
    write_json();
    const CocoDataset wrong_size(options());
    std::string message = error_message([&] { wrong_size.load(1); });
    EXPECT_TRUE(contains(message, (images_dir() / "b.png").string()) &&
                contains(message, "is 20×10 pixels (width × height) but the annotations say 21×10 (images[1] of '" +
                                      json_file().string() + "')") &&
                contains(message, "correct that entry's width and height"))
        << message;

    // Not an image at all, and a PNG cut short after its header.
    SetUp();
    std::ofstream(images_dir() / "a.png") << "hello";
    const CocoDataset text(options());
    message = error_message([&] { text.load(0); });
    EXPECT_TRUE(contains(message, "a.png' is not a PNG, JPEG or BMP file")) << message;
    std::string png;
    {
        std::ifstream in(images_dir() / "b.png", std::ios::binary);
        png.assign(std::istreambuf_iterator<char>(in), {});
    }
    std::ofstream(images_dir() / "b.png", std::ios::binary) << png.substr(0, 40);
    message = error_message([&] { text.load(1); });
    EXPECT_TRUE(contains(message, "b.png' could not be decoded as PNG")) << message;

    EXPECT_TRUE(contains(error_message([&] { text.load(3); }), "index 3 is out of range: the dataset has 3 images"));
}
