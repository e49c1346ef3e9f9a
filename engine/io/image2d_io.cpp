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
#include <optional>
#include <unordered_set>
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

// Every page of a TIFF must hold the pixels it declares, and all pages together must fit the volume
// budget, before OpenCV allocates anything. OpenCV's decoder returns an image of the declared size even
// when the strips cannot fill it (found by fuzzing: a 192-byte file decoded as 1792×65535 pixels of
// leftovers), and libtiff computes the byte counts of a page that has none from its size (a 238-byte file
// declared 10752×29284 pixels of an unknown codec: 1.6 GB and 5 s). So each page's strip or tile byte
// counts, capped at the file size (the whole file when a page has none), times the most its codec can
// expand (none ×1, PackBits ×64, deflate ×1100, LZW and others ×2048; CCITT fax codes a blank row in one
// bit, so its bound is on rows) must reach the declared size. Classic TIFF and BigTIFF, either byte order.
// The compression tags libtiff has codecs for (tiff.h): any other number is a damaged tag or a private
// scheme, and OpenCV would return a page of undecoded bytes for it.
bool known_tiff_compression(std::uint64_t compression) {
    constexpr std::uint64_t known[] = {1,     2,     3,     4,     5,     6,     7,     8,     32766, 32771,
                                       32773, 32809, 32908, 32909, 32946, 34661, 34676, 34677, 34925, 50000, 50001};
    return std::find(std::begin(known), std::end(known), compression) != std::end(known);
}

// A TIFF file's byte order, layout (classic or BigTIFF) and bounded reads of it.
class TiffFile {
public:
    // False when the file is not one this check reads (the decoder reports it).
    bool open(const std::filesystem::path& path) {
        m_in.open(path, std::ios::binary);
        std::error_code error;
        m_file_bytes = static_cast<std::uint64_t>(std::filesystem::file_size(path, error));
        if (error) return false;  // the decoder reports an unreadable file
        unsigned char header[16] = {};
        m_in.read(reinterpret_cast<char*>(header), sizeof header);
        if (m_in.gcount() < 8 || header[0] != header[1]) return false;
        m_little = header[0] == 'I';
        const std::uint64_t version = number(header + 2, 2);
        if (version != 42 && version != 43) return false;  // has_signature refused it already
        m_big = version == 43;
        if (m_big && m_in.gcount() < 16) return false;
        // Classic: 2-byte entry count, 12-byte entries, 4-byte offsets. BigTIFF: 8, 20 and 8.
        count_size = m_big ? 8 : 2, entry_size = m_big ? 20 : 12, offset_size = m_big ? 8 : 4;
        first_directory = number(header + 4 + (m_big ? 4 : 0), offset_size);
        return true;
    }
    std::uint64_t number(const unsigned char* at, int bytes) const {
        std::uint64_t value = 0;
        for (int i = 0; i < bytes; ++i) value |= std::uint64_t{at[m_little ? i : bytes - 1 - i]} << (8 * i);
        return value;
    }
    bool read_at(std::uint64_t offset, unsigned char* out, std::uint64_t bytes) {
        if (offset > m_file_bytes || bytes > m_file_bytes - offset) return false;
        m_in.clear();
        m_in.seekg(static_cast<std::streamoff>(offset));
        m_in.read(reinterpret_cast<char*>(out), static_cast<std::streamsize>(bytes));
        return static_cast<std::uint64_t>(m_in.gcount()) == bytes;
    }
    std::uint64_t file_bytes() const { return m_file_bytes; }
    bool big() const { return m_big; }

    int count_size = 2, entry_size = 12, offset_size = 4;
    std::uint64_t first_directory = 0;

private:
    std::ifstream m_in;
    std::uint64_t m_file_bytes = 0;
    bool m_little = true, m_big = false;
};

// Bytes of one value of an integer TIFF type; 0 for the others. libtiff reads a size from any integer
// type, signed ones included (found by fuzzing: an SSHORT ImageWidth passed unread); a negative
// value reads here as a huge one, and is refused as such.
int tiff_value_size(std::uint64_t type) {
    switch (type) {
        case 1: case 6: return 1;             // BYTE, SBYTE
        case 3: case 8: return 2;             // SHORT, SSHORT
        case 4: case 9: case 13: return 4;    // LONG, SLONG, IFD
        case 16: case 17: case 18: return 8;  // LONG8, SLONG8, IFD8
        default: return 0;
    }
}

// What one page's directory says about its size and storage.
struct TiffDirectory {
    std::uint64_t width = 0, height = 0, bits = 1, samples = 1, compression = 1, counted_bytes = 0;
    std::uint64_t rows_per_strip = 0, tile_width = 0, tile_length = 0;  // 0: not given
    bool has_counts = false;
    std::uint64_t next = 0;  // the next directory's offset; 0: the last page
};

// Reads the directory at `offset`; nullopt where libtiff could not read it either (it stops there).
std::optional<TiffDirectory> read_tiff_directory(TiffFile& file, std::uint64_t offset, std::uint64_t page,
                                                 const std::filesystem::path& path, std::vector<unsigned char>& table) {
    const int entry_size = file.entry_size, offset_size = file.offset_size;
    const std::uint64_t file_bytes = file.file_bytes();
    unsigned char count_bytes[8];
    if (!file.read_at(offset, count_bytes, file.count_size)) return std::nullopt;
    const std::uint64_t entries = file.number(count_bytes, file.count_size);
    // A directory that runs past the end of the file is one libtiff cannot read either: it stops there.
    if (entries > file_bytes / entry_size) return std::nullopt;
    table.resize(entries * entry_size + offset_size);
    if (!file.read_at(offset + file.count_size, table.data(), entries * entry_size)) return std::nullopt;
    // A missing offset of the next directory is, for libtiff, the last page (found by fuzzing: a file
    // three bytes short of it skipped this check).
    if (!file.read_at(offset + file.count_size + entries * entry_size, table.data() + entries * entry_size, offset_size)) {
        std::fill(table.end() - offset_size, table.end(), 0);
    }
    TiffDirectory d;
    std::unordered_set<std::uint64_t> tags;
    for (std::uint64_t e = 0; e < entries; ++e) {
        const unsigned char* entry = table.data() + e * entry_size;
        const std::uint64_t tag = file.number(entry, 2), type = file.number(entry + 2, 2);
        // A second copy of a tag could say what this check did not read (found by fuzzing: a later
        // ImageWidth of 0 hid a page of 12090×64516 from it).
        TESSERA_CHECK(tags.insert(tag).second, quoted(path) << " is damaged: page " << page << " gives TIFF tag "
                                                             << tag << " twice.");
        const std::uint64_t count = file.number(entry + 4, file.big() ? 8 : 4);
        const int size = tiff_value_size(type);
        TESSERA_CHECK(size > 0 || (tag != 256 && tag != 257 && tag != 322 && tag != 323),
                      quoted(path) << " is damaged: page " << page << " gives its size (TIFF tag " << tag
                                   << ") as type " << type << ", not as an integer.");
        if (size == 0 || count == 0) continue;
        const unsigned char* inline_values = entry + (file.big() ? 12 : 8);
        const bool is_inline = count * size <= static_cast<std::uint64_t>(offset_size);
        const std::uint64_t first = file.number(inline_values, size);  // the first value when it is stored inline
        if (tag == 256) d.width = first;
        if (tag == 257) d.height = first;
        if (tag == 258) d.bits = is_inline ? first : 0;  // per-sample sizes stored elsewhere: see below
        if (tag == 277) d.samples = first;
        if (tag == 259) d.compression = first;
        if (tag == 278) d.rows_per_strip = first;
        if (tag == 322) d.tile_width = first;
        if (tag == 323) d.tile_length = first;
        if (tag == 279 || tag == 325) {  // StripByteCounts, TileByteCounts
            d.has_counts = true;  // until they turn out unreadable
            if (is_inline) {
                for (std::uint64_t i = 0; i < count; ++i) d.counted_bytes += file.number(inline_values + i * size, size);
            } else if (count <= file_bytes / static_cast<std::uint64_t>(size)) {
                std::vector<unsigned char> values(count * size);
                if (file.read_at(file.number(inline_values, offset_size), values.data(), values.size())) {
                    for (std::uint64_t i = 0; i < count; ++i) {
                        d.counted_bytes += std::min(file.number(values.data() + i * size, size), file_bytes);
                        d.counted_bytes = std::min(d.counted_bytes, file_bytes);
                    }
                } else {
                    d.has_counts = false;
                }
            } else {
                // Counts that cannot be in the file: libtiff ignores them and computes its own from
                // the page's size (found by fuzzing), so the whole file is the bound, as with none.
                d.has_counts = false;
            }
        }
    }
    d.next = file.number(table.data() + entries * entry_size, offset_size);
    return d;
}

// One sized page: its stored bytes can expand to the samples it declares, and a strip or tile buffer
// is not out of proportion to it. Returns its bytes per row.
double check_tiff_page(const std::filesystem::path& path, std::uint64_t page, TiffDirectory d, std::uint64_t file_bytes) {
    if (d.bits == 0) d.bits = 8;  // per-sample sizes out of line: 8 is the smallest that takes that form
    const std::uint64_t width = d.width, height = d.height, bits = d.bits, samples = d.samples, compression = d.compression;
    const std::uint64_t rows_per_strip = d.rows_per_strip, tile_width = d.tile_width, tile_length = d.tile_length;
    const bool has_counts = d.has_counts;
    // The counts are read from the file: they may lie. Without any, libtiff takes the page's size.
    const std::uint64_t counted_bytes = has_counts ? std::min(d.counted_bytes, file_bytes) : file_bytes;
    const double row_bytes = std::ceil(static_cast<double>(width) * static_cast<double>(samples) *
                                       static_cast<double>(bits) / 8);
    const double declared = row_bytes * static_cast<double>(height);
    TESSERA_CHECK(known_tiff_compression(compression),
                  quoted(path) << " page " << page << " uses TIFF compression scheme " << compression
                               << ", which is not one libtiff decodes (none, CCITT, LZW, JPEG, deflate, PackBits, "
                                  "LZMA, Zstandard, WebP and a few older ones). Save it again uncompressed or with "
                                  "LZW or deflate.");
    const bool fax = compression >= 2 && compression <= 4;
    const double expansion = compression == 1       ? 1
                             : compression == 32773 ? 64
                             : compression == 8 || compression == 32946 ? 1100
                                                                        : 2048;
    const double reachable = fax ? static_cast<double>(counted_bytes) * 8 * row_bytes  // one bit a row
                                 : static_cast<double>(counted_bytes) * expansion;
    TESSERA_CHECK(reachable >= declared,
                  quoted(path) << " is damaged: its page " << page << " declares " << width << "×"
                               << height << " pixels (" << static_cast<std::uint64_t>(std::min(declared, 1e19))
                               << " bytes of samples) but " << (has_counts ? "its strips hold " : "the file holds ")
                               << counted_bytes << " bytes"
                               << (compression != 1 ? " of compressed data, which cannot expand that far" : "")
                               << ". The file is truncated or its header is wrong; get a complete copy.");
    // OpenCV decodes a strip (or tile) at a time into a buffer of the strip's declared size, up to 4
    // values per pixel, without capping RowsPerStrip at the page's height (found by fuzzing: 16739×4
    // pixels with 46775 rows per strip asked for 3.1 GB). A buffer beyond four times the page, and
    // beyond 16 MiB, can only come from a damaged tag. RowsPerStrip 0 or 2^32−1 means one strip.
    const bool tiled = tile_width > 0 || tile_length > 0;
    const double strip_rows = rows_per_strip == 0 || rows_per_strip >= 0xFFFFFFFFu ? static_cast<double>(height)
                                                                                    : static_cast<double>(rows_per_strip);
    const double buffer_pixels = tiled ? static_cast<double>(tile_width) * static_cast<double>(tile_length)
                                       : static_cast<double>(width) * strip_rows;
    const double buffer_bytes = buffer_pixels * 4 * std::max(1.0, std::ceil(static_cast<double>(bits) / 8));
    TESSERA_CHECK(buffer_bytes <= std::max(4 * declared * std::max(1.0, 4.0 / static_cast<double>(samples)), 16.0 * (1 << 20)),
                  quoted(path) << " is damaged: its page " << page << " of " << width << "×" << height << " pixels has "
                               << (tiled ? "tiles of " + std::to_string(tile_width) + "×" + std::to_string(tile_length)
                                         : std::to_string(rows_per_strip) + " rows per strip")
                               << ", so decoding one would take "
                               << static_cast<std::uint64_t>(std::min(buffer_bytes, 1e19))
                               << " bytes. The file's header is wrong; get a good copy.");
    return row_bytes;
}

void check_tiff_pages(const std::filesystem::path& path) {
    TiffFile file;
    if (!file.open(path)) return;
    double total_pixels = 0;  // all pages; in double: damaged headers overflow 64 bits
    std::uint64_t page_count = 0, bytes_per_pixel = 1;
    std::uint64_t first_width = 0, first_height = 0;
    std::unordered_set<std::uint64_t> visited;
    std::uint64_t ifd = file.first_directory;
    std::vector<unsigned char> table;
    while (ifd != 0 && visited.insert(ifd).second) {  // libtiff stops at a loop too
        const std::uint64_t page = visited.size() - 1;
        const std::optional<TiffDirectory> directory = read_tiff_directory(file, ifd, page, path, table);
        if (!directory) return;
        ifd = directory->next;
        const std::uint64_t width = directory->width, height = directory->height;
        if (width == 0 || height == 0) continue;  // the decoder reports a page without a size
        ++page_count;
        if (page_count == 1) first_width = width, first_height = height;
        const double row_bytes = check_tiff_page(path, page, *directory, file.file_bytes());
        total_pixels += static_cast<double>(width) * static_cast<double>(height);
        bytes_per_pixel = std::max(bytes_per_pixel, static_cast<std::uint64_t>(std::min(row_bytes / static_cast<double>(width), 64.0)));
        if (page_count > (std::uint64_t{1} << 20)) break;  // the budget below has refused long before
    }
    if (page_count == 0) return;
    // OpenCV keeps every decoded page, then Tessera copies them into one block (twice the stored bytes).
    check_volume_budget(path,
                        std::to_string(first_width) + "×" + std::to_string(first_height) + "×" + std::to_string(page_count),
                        static_cast<std::uint64_t>(std::min(total_pixels, 0x1p62)), 2 * bytes_per_pixel);
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
            check_tiff_pages(path);
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
