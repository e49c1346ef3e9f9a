// read_color_image and read_color_image_size on PNG, JPEG and BMP files written here by OpenCV with known
// pixels: scaling per bit depth, channel order, grey replication, alpha dropped, sizes from each
// format's header, and every error a user can cause, with its message (the file and the fix).
// Suite names contain "io" so `ctest -R io` selects them (see CMakeLists.txt).
#include "io/color_image.hpp"

#include "support/error_of.hpp"
#include "support/scratch_dir.hpp"

#include <gtest/gtest.h>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <cstring>
#include <fstream>
#include <span>
#include <iterator>
#include <string>

using namespace tessera;
using tessera::test::error_of;

namespace {

namespace fs = std::filesystem;

class ScratchDir : public tessera::test::ScratchDir {
public:
    ScratchDir() : tessera::test::ScratchDir("color_image_test") {}
};

std::string file_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_text(const fs::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A PNG's IHDR width and height are big-endian 32-bit at bytes 16 and 20. The chunk's CRC is left
// stale: the header is read before any decoder sees the file.
void patch_png_size(const fs::path& path, std::uint32_t width, std::uint32_t height) {
    std::string bytes = file_text(path);
    for (int i = 0; i < 4; ++i) {
        bytes[static_cast<std::size_t>(16 + i)] = static_cast<char>((width >> (24 - 8 * i)) & 0xFF);
        bytes[static_cast<std::size_t>(20 + i)] = static_cast<char>((height >> (24 - 8 * i)) & 0xFF);
    }
    write_text(path, bytes);
}

// "'dir/file.png'", as messages name files. Appended piece by piece: GCC 12 warns (-Wrestrict, falsely)
// on "'" + std::string&&.
std::string quoted(const fs::path& path) {
    std::string text = "'";
    text += path.string();
    text += '\'';
    return text;
}

// EXPECT that `message` contains every fragment.
void expect_mentions(const std::string& message, std::initializer_list<std::string> fragments) {
    for (const std::string& fragment : fragments) {
        EXPECT_NE(message.find(fragment), std::string::npos) << "expected \"" << fragment << "\" in: " << message;
    }
}

}  // namespace

TEST(ColorImageConversion, EightBitIsDividedBy255InRgbOrder) {
    ScratchDir scratch;
    // 40×30, (R, G, B) = (200, 100, 50) everywhere but pixel (x 5, y 7) = (10, 20, 30). OpenCV stores B, G, R.
    cv::Mat pixels(30, 40, CV_8UC3, cv::Scalar(50, 100, 200));
    pixels.at<cv::Vec3b>(7, 5) = cv::Vec3b(30, 20, 10);
    for (const char* name : {"a.png", "a.bmp"}) {  // both lossless
        ASSERT_TRUE(cv::imwrite((scratch / name).string(), pixels));
        const Tensor image = read_color_image(scratch / name, {30, 40});
        ASSERT_EQ(image.shape(), (Shape{3, 30, 40})) << name;
        ASSERT_EQ(image.dtype(), DType::F32) << name;
        // Exact up to the f32 product value · (1 / 255): 1e-6.
        EXPECT_NEAR(image.at<float>({0, 0, 0}), 200.0f / 255, 1e-6f) << name;
        EXPECT_NEAR(image.at<float>({1, 0, 0}), 100.0f / 255, 1e-6f) << name;
        EXPECT_NEAR(image.at<float>({2, 29, 39}), 50.0f / 255, 1e-6f) << name;
        EXPECT_NEAR(image.at<float>({0, 7, 5}), 10.0f / 255, 1e-6f) << name;
        EXPECT_NEAR(image.at<float>({1, 7, 5}), 20.0f / 255, 1e-6f) << name;
        EXPECT_NEAR(image.at<float>({2, 7, 5}), 30.0f / 255, 1e-6f) << name;
    }

    // JPEG at quality 100, a flat colour: within 3 / 255 of (R, G, B) = (0, 128, 255) (chroma rounding).
    ASSERT_TRUE(cv::imwrite((scratch / "flat.jpg").string(), cv::Mat(16, 16, CV_8UC3, cv::Scalar(255, 128, 0)),
                            {cv::IMWRITE_JPEG_QUALITY, 100}));
    const Tensor jpeg = read_color_image(scratch / "flat.jpg");
    ASSERT_EQ(jpeg.shape(), (Shape{3, 16, 16}));
    EXPECT_NEAR(jpeg.at<float>({0, 8, 8}), 0.0f, 3.0f / 255);
    EXPECT_NEAR(jpeg.at<float>({1, 8, 8}), 128.0f / 255, 3.0f / 255);
    EXPECT_NEAR(jpeg.at<float>({2, 8, 8}), 1.0f, 3.0f / 255);
}

TEST(ColorImageConversion, GreyIsReplicatedAndSixteenBitIsDividedBy65535) {
    ScratchDir scratch;
    // 8-bit grey 51 everywhere: 51 / 255 = 0.2 in all three channels.
    ASSERT_TRUE(cv::imwrite((scratch / "grey.png").string(), cv::Mat(4, 3, CV_8UC1, cv::Scalar(51))));
    const Tensor grey = read_color_image(scratch / "grey.png");
    ASSERT_EQ(grey.shape(), (Shape{3, 4, 3}));
    for (std::int64_t channel = 0; channel < 3; ++channel) {
        EXPECT_NEAR(grey.at<float>({channel, 3, 2}), 0.2f, 1e-6f);
        EXPECT_NEAR(grey.at<float>({channel, 0, 0}), 0.2f, 1e-6f);
    }

    // 16-bit grey 20×10: 1000·y + 37·x, up to 9703 (beyond 8 bits, so a 255 scale would show).
    cv::Mat ramp(10, 20, CV_16UC1);
    for (int y = 0; y < 10; ++y) {
        for (int x = 0; x < 20; ++x) ramp.at<std::uint16_t>(y, x) = static_cast<std::uint16_t>(1000 * y + 37 * x);
    }
    ASSERT_TRUE(cv::imwrite((scratch / "ramp.png").string(), ramp));
    const Tensor from_ramp = read_color_image(scratch / "ramp.png", {10, 20});
    ASSERT_EQ(from_ramp.shape(), (Shape{3, 10, 20}));
    for (const auto& [y, x] : {std::pair{0, 0}, {9, 19}, {4, 7}}) {
        const float expected = static_cast<float>(1000 * y + 37 * x) / 65535.0f;
        for (std::int64_t channel = 0; channel < 3; ++channel)
            EXPECT_NEAR(from_ramp.at<float>({channel, y, x}), expected, 1e-6f) << y << ", " << x;
    }

    // 16-bit colour: (R, G, B) = (65535, 32768, 1) → (1, 32768 / 65535, 1 / 65535), within 1e-6.
    ASSERT_TRUE(cv::imwrite((scratch / "deep.png").string(), cv::Mat(2, 5, CV_16UC3, cv::Scalar(1, 32768, 65535))));
    const Tensor deep = read_color_image(scratch / "deep.png");
    ASSERT_EQ(deep.shape(), (Shape{3, 2, 5}));
    EXPECT_NEAR(deep.at<float>({0, 1, 4}), 1.0f, 1e-6f);
    EXPECT_NEAR(deep.at<float>({1, 1, 4}), 32768.0f / 65535, 1e-6f);
    EXPECT_NEAR(deep.at<float>({2, 1, 4}), 1.0f / 65535, 1e-6f);
}

TEST(ColorImageConversion, AlphaIsDropped) {
    ScratchDir scratch;
    // RGBA (R, G, B, A) = (40, 80, 120, 0) and, at (x 2, y 1), (250, 0, 5, 255): the colour is kept as
    // stored whatever the alpha (no premultiplication), and no fourth channel appears.
    cv::Mat rgba(3, 4, CV_8UC4, cv::Scalar(120, 80, 40, 0));
    rgba.at<cv::Vec4b>(1, 2) = cv::Vec4b(5, 0, 250, 255);
    ASSERT_TRUE(cv::imwrite((scratch / "rgba.png").string(), rgba));
    const Tensor image = read_color_image(scratch / "rgba.png", {3, 4});
    ASSERT_EQ(image.shape(), (Shape{3, 3, 4}));
    EXPECT_NEAR(image.at<float>({0, 0, 0}), 40.0f / 255, 1e-6f);
    EXPECT_NEAR(image.at<float>({1, 0, 0}), 80.0f / 255, 1e-6f);
    EXPECT_NEAR(image.at<float>({2, 0, 0}), 120.0f / 255, 1e-6f);
    EXPECT_NEAR(image.at<float>({0, 1, 2}), 250.0f / 255, 1e-6f);
    EXPECT_NEAR(image.at<float>({1, 1, 2}), 0.0f, 1e-6f);
    EXPECT_NEAR(image.at<float>({2, 1, 2}), 5.0f / 255, 1e-6f);
}

TEST(ColorImageConversion, HeaderGivesTheSizeOfEachFormat) {
    ScratchDir scratch;
    // Width 37 ≠ height 23 so a swap shows. OpenCV's JPEG has JFIF and quantisation-table segments
    // before its frame header: the reader skips them by length.
    const cv::Mat pixels(23, 37, CV_8UC3, cv::Scalar(9, 99, 199));
    for (const char* name : {"s.png", "s.jpg", "s.bmp"}) {
        ASSERT_TRUE(cv::imwrite((scratch / name).string(), pixels));
        EXPECT_EQ(read_color_image_size(scratch / name), (std::array<std::int64_t, 2>{23, 37})) << name;
    }
    // A BMP with a negative height stores its rows top-down; the size is its magnitude. The height is
    // little-endian signed 32-bit at byte 22: -23 = 0xFFFFFFE9.
    std::string bmp = file_text(scratch / "s.bmp");
    bmp.replace(22, 4, std::string("\xE9\xFF\xFF\xFF", 4));
    write_text(scratch / "top_down.bmp", bmp);
    EXPECT_EQ(read_color_image_size(scratch / "top_down.bmp"), (std::array<std::int64_t, 2>{23, 37}));
}

TEST(ColorImageValidation, NamesTheFileAndTheFixOfEveryMistake) {
    ScratchDir scratch;
    const fs::path missing = scratch / "missing.png";
    expect_mentions(error_of([&] { read_color_image(missing); }),
                    {quoted(missing) + " cannot be opened for reading", "check that the file exists"});

    const fs::path text = scratch / "notes.png";
    write_text(text, "hello");
    expect_mentions(error_of([&] { read_color_image_size(text); }),
                    {quoted(text) + " is not a PNG, JPEG or BMP file", "convert it to one of them"});

    // 20×10 grey PNG; the caller expected 21×10 (width × height).
    const fs::path png = scratch / "b.png";
    ASSERT_TRUE(cv::imwrite(png.string(), cv::Mat(10, 20, CV_8UC1, cv::Scalar(7))));
    const std::string intact = file_text(png);
    const std::string wrong_size = error_of([&] { read_color_image(png, {10, 21}); });
    expect_mentions(wrong_size,
                    {quoted(png) + " is 20×10 pixels (width × height) but 21×10 was expected", "Is it the right file"});

    // Cut inside the IHDR chunk (16 of its first 24 bytes): no size to read.
    const fs::path cut_header = scratch / "cut_header.png";
    write_text(cut_header, intact.substr(0, 16));
    expect_mentions(error_of([&] { read_color_image_size(cut_header); }),
                    {quoted(cut_header) + " is damaged: its PNG header does not give the image size",
                     "replace it with an intact copy"});

    // Cut after the header: the size is read, the pixels are not there.
    const fs::path cut_pixels = scratch / "cut_pixels.png";
    write_text(cut_pixels, intact.substr(0, 40));
    EXPECT_EQ(read_color_image_size(cut_pixels), (std::array<std::int64_t, 2>{10, 20}));
    expect_mentions(error_of([&] { read_color_image(cut_pixels); }),
                    {quoted(cut_pixels) + " could not be decoded as PNG", "intact copy"});

    // A header declaring 100000×100000 (10^10 pixels > 2^27) or 0×10 is refused before decoding; so is
    // 2^32-1 squared, whose product would overflow int64.
    const fs::path huge = scratch / "huge.png";
    write_text(huge, intact);
    patch_png_size(huge, 100000, 100000);
    expect_mentions(error_of([&] { read_color_image(huge); }),
                    {quoted(huge) + " declares 100000×100000 pixels: expected at least 1 and at most 134217728",
                     "split or downscale it"});
    patch_png_size(huge, 0xFFFFFFFFu, 0xFFFFFFFFu);
    expect_mentions(error_of([&] { read_color_image(huge); }), {"declares 4294967295×4294967295 pixels"});
    patch_png_size(huge, 0, 10);
    expect_mentions(error_of([&] { read_color_image(huge); }), {"declares 0×10 pixels"});
    // The expected size is checked first: the stale CRC never reaches the decoder.
    expect_mentions(error_of([&] { read_color_image(huge, {10, 20}); }), {"is 0×10 pixels (width × height) but 20×10"});
}

// Images inside TFRecords are decoded from memory: the same pixels as from the file, header checks included,
// and messages naming the record instead of a file.
TEST(ColorImageConversion, DecodingFromMemoryGivesTheFilesPixels) {
    ScratchDir scratch;
    cv::Mat pixels(9, 14, CV_8UC3, cv::Scalar(50, 100, 200));
    pixels.at<cv::Vec3b>(3, 11) = cv::Vec3b(1, 2, 3);
    for (const char* name : {"m.png", "m.jpg", "m.bmp"}) {
        ASSERT_TRUE(cv::imwrite((scratch / name).string(), pixels));
        const std::string bytes = file_text(scratch / name);
        const Tensor from_file = read_color_image(scratch / name);
        const Tensor from_memory = decode_color_image(std::as_bytes(std::span(bytes.data(), bytes.size())), "record 0");
        ASSERT_EQ(from_memory.shape(), from_file.shape()) << name;
        EXPECT_EQ(std::memcmp(from_memory.raw_data(), from_file.raw_data(), from_file.num_bytes()), 0) << name;
    }
    const std::string jpeg = file_text(scratch / "m.jpg");
    const std::string cut = jpeg.substr(0, jpeg.size() / 2);
    expect_mentions(error_of([&] { decode_color_image(std::as_bytes(std::span(cut.data(), cut.size())), "the image of record 4"); }),
                    {"the image of record 4 could not be decoded as JPEG"});
    const std::string text = "plain text";
    expect_mentions(error_of([&] { decode_color_image(std::as_bytes(std::span(text.data(), text.size())), "the image of record 5"); }),
                    {"the image of record 5 is not a PNG, JPEG or BMP file"});
    // A JPEG cut before its frame header: no size, refused before decoding.
    const std::string headless = jpeg.substr(0, 4);
    expect_mentions(error_of([&] { decode_color_image(std::as_bytes(std::span(headless.data(), headless.size())), "record 6"); }),
                    {"record 6 is damaged: its JPEG header does not give the image size"});
}
