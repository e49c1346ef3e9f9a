// PNG, JPEG and TIFF through OpenCV's imgcodecs: one page is a 2D image {w, h, 1}, the pages of a TIFF
// a stack {w, h, pages}. Colour becomes luminance (OpenCV's grayscale conversion); 16-bit and float
// samples keep their depth. The file's signature is checked first, so a file with the wrong extension
// gets a clear message rather than OpenCV's silent empty image.
#include "io/raw_image.hpp"

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <cstring>
#include <fstream>

namespace tessera::io_detail {

namespace {

enum class Codec { Png, Jpeg, Tiff };

Codec codec_of(const std::filesystem::path& path) {
    const std::string extension = full_extension(path);
    if (extension == ".png") return Codec::Png;
    if (extension == ".jpg" || extension == ".jpeg") return Codec::Jpeg;
    TESSERA_ASSERT(extension == ".tif" || extension == ".tiff", "not a 2D image extension: " << extension);
    return Codec::Tiff;
}

std::string_view codec_name(Codec codec) {
    switch (codec) {
        case Codec::Png:
            return "PNG";
        case Codec::Jpeg:
            return "JPEG";
        case Codec::Tiff:
            return "TIFF";
    }
    return "?";
}

bool has_signature(const std::filesystem::path& path, Codec codec) {
    std::ifstream in(path, std::ios::binary);
    unsigned char bytes[8] = {};
    in.read(reinterpret_cast<char*>(bytes), sizeof bytes);
    const auto count = in.gcount();
    switch (codec) {
        case Codec::Png:
            return count >= 8 && std::memcmp(bytes, "\x89PNG\r\n\x1a\n", 8) == 0;
        case Codec::Jpeg:
            return count >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff;
        case Codec::Tiff:
            // Classic TIFF (42) or BigTIFF (43), either byte order.
            return count >= 4 &&
                   ((bytes[0] == 'I' && bytes[1] == 'I' && (bytes[2] == 42 || bytes[2] == 43) && bytes[3] == 0) ||
                    (bytes[0] == 'M' && bytes[1] == 'M' && bytes[2] == 0 && (bytes[3] == 42 || bytes[3] == 43)));
    }
    return false;
}

void check_signature(const std::filesystem::path& path, Codec codec) {
    TESSERA_CHECK(has_signature(path, codec), quoted(path) << " is not a " << codec_name(codec)
                                                           << " image: it does not start with the " << codec_name(codec)
                                                           << " signature. Is it another kind of file saved with a "
                                                           << full_extension(path) << " extension?");
}

bool scalar_type_of(int depth, ScalarType& type) {
    switch (depth) {
        case CV_8U:
            type = ScalarType::U8;
            return true;
        case CV_8S:
            type = ScalarType::I8;
            return true;
        case CV_16U:
            type = ScalarType::U16;
            return true;
        case CV_16S:
            type = ScalarType::I16;
            return true;
        case CV_32S:
            type = ScalarType::I32;
            return true;
        case CV_32F:
            type = ScalarType::F32;
            return true;
        case CV_64F:
            type = ScalarType::F64;
            return true;
        default:
            return false;
    }
}

// Grayscale at the file's own depth (IMREAD_ANYDEPTH without IMREAD_COLOR).
constexpr int read_flags = cv::IMREAD_ANYDEPTH;

}  // namespace

std::size_t count_tiff_pages(const std::filesystem::path& path) {
    check_signature(path, Codec::Tiff);
    try {
        return cv::imcount(path.string(), read_flags);
    } catch (const cv::Exception& error) {
        TESSERA_REJECT(quoted(path) << " could not be read as TIFF: " << error.err);
    }
    return 0;
}

RawImage read_image2d(const std::filesystem::path& path) {
    const Codec codec = codec_of(path);
    check_signature(path, codec);
    std::vector<cv::Mat> pages;
    try {
        if (codec == Codec::Tiff) {
            cv::imreadmulti(path.string(), pages, read_flags);
        } else {
            cv::Mat page = cv::imread(path.string(), read_flags);
            if (!page.empty()) pages.push_back(page);
        }
    } catch (const cv::Exception& error) {
        TESSERA_REJECT(quoted(path) << " could not be decoded as " << codec_name(codec) << ": " << error.err);
    }
    TESSERA_CHECK(!pages.empty() && !pages.front().empty(),
                  quoted(path) << " could not be decoded as " << codec_name(codec)
                               << ": the file is damaged or uses a variant OpenCV cannot read.");

    const cv::Mat& first = pages.front();
    for (std::size_t index = 0; index < pages.size(); ++index) {
        cv::Mat& page = pages[index];
        if (page.depth() == CV_16F) page.convertTo(page, CV_32F);
        TESSERA_CHECK(page.channels() == 1, quoted(path)
                                                << " page " << index << " has " << page.channels()
                                                << " channels after grayscale conversion: an unsupported voxel type.");
        TESSERA_CHECK(page.rows == first.rows && page.cols == first.cols && page.depth() == pages.front().depth(),
                      quoted(path) << " mixes page sizes or sample types (page 0 is " << first.cols << "×" << first.rows
                                   << ", page " << index << " is " << page.cols << "×" << page.rows
                                   << "): a stack needs pages of one size and type.");
    }
    ScalarType type{};
    TESSERA_CHECK(scalar_type_of(first.depth(), type),
                  quoted(path) << " has an unsupported sample type (OpenCV depth " << first.depth() << ").");

    RawImage raw;
    raw.geometry.size = {first.cols, first.rows, static_cast<std::int64_t>(pages.size())};
    raw.scalar_type = type;
    raw.source_scalar_type = std::string(scalar_type_name(type));
    if (pages.size() == 1 && first.isContinuous()) {
        auto owner = std::make_shared<cv::Mat>(first);
        raw.voxels = owner->data;
        raw.owner = owner;
        return raw;
    }
    // A stack: one contiguous block, page after page.
    const std::size_t row_bytes = static_cast<std::size_t>(first.cols) * scalar_type_size(type);
    auto block =
        std::make_shared<std::vector<unsigned char>>(row_bytes * static_cast<std::size_t>(first.rows) * pages.size());
    unsigned char* out = block->data();
    for (const cv::Mat& page : pages) {
        for (int row = 0; row < page.rows; ++row, out += row_bytes) std::memcpy(out, page.ptr(row), row_bytes);
    }
    raw.voxels = block->data();
    raw.owner = block;
    return raw;
}

}  // namespace tessera::io_detail
