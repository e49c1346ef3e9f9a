// PNG, JPEG and TIFF through OpenCV's imgcodecs: one page is a 2D image {w, h, 1}, the pages of a TIFF
// a stack {w, h, pages}. Colour becomes luminance (OpenCV's grayscale conversion); 16-bit and float
// samples keep their depth. The file's signature is checked first, so a file with the wrong extension
// gets a clear message rather than OpenCV's silent empty image.
#include "io/raw_image.hpp"

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

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

// The first page of a classic TIFF must hold the pixels it declares. OpenCV's decoder returns an image of
// the declared size even when the strips cannot fill it (found by fuzzing: a 192-byte file decoded as
// 1792×65535 pixels of leftovers), so the strips' byte counts are compared with the declared size, times
// the most a codec can expand (none ×1, PackBits ×64, deflate ×1100, LZW and others ×2048), the counts
// capped at the file's size. CCITT fax pages, tiled pages and BigTIFF are left to the decoder.
void check_tiff_strips(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::error_code error;
    const auto file_bytes = static_cast<std::uint64_t>(std::filesystem::file_size(path, error));
    if (error) return;  // the decoder reports an unreadable file
    unsigned char header[8] = {};
    in.read(reinterpret_cast<char*>(header), sizeof header);
    if (in.gcount() != 8 || header[0] != header[1] || (header[0] == 'I' ? header[2] : header[3]) != 42) return;
    const bool little = header[0] == 'I';
    const auto number = [&](const unsigned char* at, int bytes) {
        std::uint64_t value = 0;
        for (int i = 0; i < bytes; ++i) value |= std::uint64_t{at[little ? i : bytes - 1 - i]} << (8 * i);
        return value;
    };
    const auto read_at = [&](std::uint64_t offset, unsigned char* out, std::size_t bytes) {
        if (offset > file_bytes || bytes > file_bytes - offset) return false;
        in.clear();
        in.seekg(static_cast<std::streamoff>(offset));
        in.read(reinterpret_cast<char*>(out), static_cast<std::streamsize>(bytes));
        return static_cast<std::size_t>(in.gcount()) == bytes;
    };
    unsigned char count_bytes[2];
    const std::uint64_t ifd = number(header + 4, 4);
    if (!read_at(ifd, count_bytes, 2)) return;
    const std::uint64_t entries = number(count_bytes, 2);
    std::vector<unsigned char> table(entries * 12);
    if (!read_at(ifd + 2, table.data(), table.size())) return;
    std::uint64_t width = 0, height = 0, bits = 1, samples = 1, compression = 1, strip_bytes = 0;
    bool has_strips = false;
    for (std::uint64_t e = 0; e < entries; ++e) {
        const unsigned char* entry = table.data() + e * 12;
        const std::uint64_t tag = number(entry, 2), type = number(entry + 2, 2), count = number(entry + 4, 4);
        const int size = type == 3 ? 2 : type == 4 ? 4 : 0;  // SHORT or LONG; other types are not used here
        if (size == 0 || count == 0) continue;
        const std::uint64_t first = number(entry + 8, size);  // the first value when it is stored inline
        if (tag == 256) width = first;
        if (tag == 257) height = first;
        if (tag == 258) bits = count * size <= 4 ? first : 0;  // per-sample sizes stored elsewhere: skip the check
        if (tag == 277) samples = first;
        if (tag == 259) compression = first;
        if (tag == 279) {  // StripByteCounts
            has_strips = true;
            if (count * size <= 4) {
                for (std::uint64_t i = 0; i < count; ++i) strip_bytes += number(entry + 8 + i * size, size);
            } else {
                if (count > (std::uint64_t{1} << 24)) return;
                std::vector<unsigned char> values(count * size);
                if (!read_at(number(entry + 8, 4), values.data(), values.size())) return;
                for (std::uint64_t i = 0; i < count; ++i) strip_bytes += number(values.data() + i * size, size);
            }
        }
    }
    // CCITT fax codes (2, 3, 4) code a blank line in a few bits: no useful bound. Other and unknown codecs
    // get LZW's (OpenCV returned a full-size image for an unknown codec too).
    const bool fax = compression >= 2 && compression <= 4;
    const std::uint64_t expansion = compression == 1       ? 1
                                    : compression == 32773 ? 64
                                    : compression == 8 || compression == 32946 ? 1100
                                                                               : 2048;
    if (!has_strips || fax || bits == 0 || width == 0 || height == 0) return;
    strip_bytes = std::min(strip_bytes, file_bytes);  // the counts are read from the file: they may lie
    // In double: damaged headers overflow 64 bits.
    const double declared = std::ceil(static_cast<double>(width) * static_cast<double>(samples) * static_cast<double>(bits) / 8) *
                            static_cast<double>(height);
    TESSERA_CHECK(static_cast<double>(strip_bytes) * static_cast<double>(expansion) >= declared,
                  quoted(path) << " is damaged: its first page declares " << width << "×" << height << " pixels ("
                               << static_cast<std::uint64_t>(std::min(declared, 1e19)) << " bytes of samples) but its strips hold "
                               << strip_bytes << " bytes" << (expansion > 1 ? " of compressed data, which cannot expand that far" : "")
                               << ". The file is truncated or its header is wrong; get a complete copy.");
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
            check_tiff_strips(path);
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
