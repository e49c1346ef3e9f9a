#include "io/color_image.hpp"

#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "io/raw_image.hpp"

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <istream>
#include <optional>
#include <streambuf>

namespace tessera {
namespace {

namespace fs = std::filesystem;
using io_detail::quoted;

// ---- image headers --------------------------------------------------------------------------------

enum class ImageKind { Png, Jpeg, Bmp };

struct ImageHeader {
    ImageKind kind = ImageKind::Png;
    std::optional<std::array<std::int64_t, 2>> size;  // [H, W]; empty when the header could not be read
};

std::int64_t big_endian(const unsigned char* bytes, int count) {
    std::int64_t value = 0;
    for (int i = 0; i < count; ++i) value = (value << 8) | bytes[i];
    return value;
}

std::int64_t little_endian(const unsigned char* bytes, int count) {
    std::int64_t value = 0;
    for (int i = count - 1; i >= 0; --i) value = (value << 8) | bytes[i];
    return value;
}

// A JPEG's size is in its first start-of-frame segment; the markers before it are skipped by length.
std::optional<std::array<std::int64_t, 2>> jpeg_size(std::istream& in) {
    in.seekg(2);
    unsigned char byte = 0;
    const auto read_byte = [&]() { return static_cast<bool>(in.read(reinterpret_cast<char*>(&byte), 1)); };
    for (int segment = 0; segment < 10000; ++segment) {
        if (!read_byte() || byte != 0xFF) return std::nullopt;
        while (byte == 0xFF) {  // fill bytes
            if (!read_byte()) return std::nullopt;
        }
        const unsigned char marker = byte;
        if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;  // no length
        if (marker == 0xDA || marker == 0xD9) return std::nullopt;  // scan data or the end before any frame
        unsigned char length_bytes[2];
        if (!in.read(reinterpret_cast<char*>(length_bytes), 2)) return std::nullopt;
        const std::int64_t length = big_endian(length_bytes, 2);
        if (length < 2) return std::nullopt;
        const bool start_of_frame =
            marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
        if (start_of_frame) {
            unsigned char frame[5];  // precision, height, width
            if (length < 7 || !in.read(reinterpret_cast<char*>(frame), 5)) return std::nullopt;
            return std::array{big_endian(frame + 1, 2), big_endian(frame + 3, 2)};
        }
        in.seekg(length - 2, std::ios::cur);
    }
    return std::nullopt;
}

// A read-only stream over bytes in memory (an image stored inside a TFRecord), seekable as a file is.
class ByteSpanBuffer final : public std::streambuf {
public:
    explicit ByteSpanBuffer(std::span<const std::byte> bytes) {
        // std::streambuf wants char*; nothing is ever written through it.
        char* begin = const_cast<char*>(reinterpret_cast<const char*>(bytes.data()));
        setg(begin, begin, begin + bytes.size());
    }

protected:
    pos_type seekoff(off_type offset, std::ios_base::seekdir direction, std::ios_base::openmode) override {
        const off_type base = direction == std::ios_base::beg ? 0 : direction == std::ios_base::cur ? gptr() - eback() : egptr() - eback();
        const off_type target = base + offset;
        if (target < 0 || target > egptr() - eback()) return pos_type(off_type(-1));
        setg(eback(), eback() + target, egptr());
        return pos_type(target);
    }
    pos_type seekpos(pos_type position, std::ios_base::openmode mode) override {
        return seekoff(off_type(position), std::ios_base::beg, mode);
    }
};

// `what` names the image in messages: "image 'a.jpg'", "the image of record 3 (byte offset 120) of 'train-00000'".
ImageHeader read_image_header(std::istream& in, const std::string& what) {
    unsigned char bytes[26] = {};
    in.read(reinterpret_cast<char*>(bytes), sizeof bytes);
    const auto count = in.gcount();
    ImageHeader header;
    if (count >= 8 && std::memcmp(bytes, "\x89PNG\r\n\x1a\n", 8) == 0) {
        header.kind = ImageKind::Png;
        if (count >= 24 && std::memcmp(bytes + 12, "IHDR", 4) == 0) {
            header.size = std::array{big_endian(bytes + 20, 4), big_endian(bytes + 16, 4)};
        }
    } else if (count >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) {
        header.kind = ImageKind::Jpeg;
        in.clear();
        header.size = jpeg_size(in);
    } else if (count >= 2 && bytes[0] == 'B' && bytes[1] == 'M') {
        header.kind = ImageKind::Bmp;
        if (count >= 26) {
            if (little_endian(bytes + 14, 4) == 12) {  // OS/2 BITMAPCOREHEADER: 16-bit sizes
                header.size = std::array{little_endian(bytes + 20, 2), little_endian(bytes + 18, 2)};
            } else {
                // Signed 32-bit; a negative height means rows stored top-down.
                const auto width = static_cast<std::int32_t>(little_endian(bytes + 18, 4));
                const auto height = static_cast<std::int32_t>(little_endian(bytes + 22, 4));
                header.size = std::array{std::abs(static_cast<std::int64_t>(height)), static_cast<std::int64_t>(width)};
            }
        }
    } else {
        TESSERA_REJECT(what << " is not a PNG, JPEG or BMP file (it does not start with any of their "
                               "signatures); convert it to one of them");
    }
    return header;
}

ImageHeader read_image_header(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    TESSERA_CHECK(in.good(), "image " << quoted(path)
                                      << " cannot be opened for reading: check that the file exists and that this "
                                         "user may read it");
    return read_image_header(in, "image " + quoted(path));
}

const char* kind_name(ImageKind kind) {
    switch (kind) {
        case ImageKind::Png:
            return "PNG";
        case ImageKind::Jpeg:
            return "JPEG";
        case ImageKind::Bmp:
            return "BMP";
    }
    return "?";
}

// The header's [H, W]; throws when the header does not give it.
std::array<std::int64_t, 2> size_from_header(const std::string& what, const ImageHeader& header) {
    TESSERA_CHECK(header.size.has_value(), what << " is damaged: its " << kind_name(header.kind)
                                                    << " header does not give the image size; replace it with an "
                                                       "intact copy");
    return *header.size;
}

template <class Sample>
void copy_to_rgb(const cv::Mat& decoded, float scale, Tensor& image) {
    const std::int64_t height = decoded.rows, width = decoded.cols, plane = height * width;
    const int channels = decoded.channels();
    float* out = image.data<float>();
    for (std::int64_t y = 0; y < height; ++y) {
        const Sample* row = decoded.ptr<Sample>(static_cast<int>(y));
        for (std::int64_t x = 0; x < width; ++x) {
            const Sample* pixel = row + x * channels;
            const std::int64_t at = y * width + x;
            if (channels == 1) {
                out[at] = out[plane + at] = out[2 * plane + at] = static_cast<float>(pixel[0]) * scale;
            } else {  // OpenCV's B, G, R(, A)
                out[at] = static_cast<float>(pixel[2]) * scale;
                out[plane + at] = static_cast<float>(pixel[1]) * scale;
                out[2 * plane + at] = static_cast<float>(pixel[0]) * scale;
            }
        }
    }
}

// The header's size checked against the expectation and the limit, then `decode` run (OpenCV's imread or
// imdecode) and its result turned into [3, H, W] f32.
Tensor decode_checked(const std::string& what, const ImageHeader& header, std::array<std::int64_t, 2> expected_size,
                      const std::function<cv::Mat()>& decode) {
    const char* kind = kind_name(header.kind);
    const auto [height, width] = size_from_header(what, header);
    const bool check_size = expected_size[0] != 0 || expected_size[1] != 0;
    TESSERA_CHECK(!check_size || (height == expected_size[0] && width == expected_size[1]),
                  what << " is " << width << "×" << height << " pixels (width × height) but " << expected_size[1] << "×"
                       << expected_size[0] << " was expected. Is it the right file, or was it resized after its size was recorded?");
    // Divided, not multiplied: a PNG header's 32-bit sizes multiply past the int64 range.
    TESSERA_CHECK(height >= 1 && width >= 1 && width <= max_color_image_pixels / height,
                  what << " declares " << width << "×" << height << " pixels: expected at least 1 and at most "
                       << max_color_image_pixels
                       << " pixels. Either its header is damaged (replace the file with an intact copy) or the "
                          "image is too large (split or downscale it)");

    cv::Mat decoded;
    try {
        decoded = decode();
    } catch (const cv::Exception& error) {
        TESSERA_REJECT(what << " could not be decoded as " << kind << ": " << error.err
                            << ". The file is damaged: replace it with an intact copy");
    }
    TESSERA_CHECK(!decoded.empty(), what << " could not be decoded as " << kind
                                         << ": the file is damaged or uses a variant OpenCV cannot read. "
                                            "Replace it with an intact copy, or re-save it as an 8-bit PNG");
    TESSERA_CHECK(decoded.rows == height && decoded.cols == width,
                  what << " decodes to " << decoded.cols << "×" << decoded.rows << " pixels but its header says " << width
                       << "×" << height << ": the file is damaged. Replace it with an intact copy");
    const int channels = decoded.channels();
    TESSERA_CHECK(channels == 1 || channels == 3 || channels == 4,
                  what << " has " << channels << " channels: expected grey, RGB or RGBA. Convert it to RGB");
    Tensor image = Tensor::empty({3, height, width}, DType::F32);
    if (decoded.depth() == CV_8U) {
        copy_to_rgb<std::uint8_t>(decoded, 1.0f / 255.0f, image);
    } else if (decoded.depth() == CV_16U) {
        copy_to_rgb<std::uint16_t>(decoded, 1.0f / 65535.0f, image);
    } else {
        TESSERA_REJECT(what << " has samples of OpenCV depth " << decoded.depth()
                            << ": expected 8 or 16 bits unsigned. Convert it to 8-bit RGB");
    }
    return image;
}

constexpr int imread_flags = cv::IMREAD_ANYDEPTH | cv::IMREAD_ANYCOLOR | cv::IMREAD_IGNORE_ORIENTATION;

}  // namespace

std::array<std::int64_t, 2> read_color_image_size(const fs::path& path) {
    return size_from_header("image " + quoted(path), read_image_header(path));
}

Tensor read_color_image(const fs::path& path, std::array<std::int64_t, 2> expected_size) {
    return decode_checked("image " + quoted(path), read_image_header(path), expected_size,
                          [&] { return cv::imread(path.string(), imread_flags); });
}

Tensor decode_color_image(std::span<const std::byte> bytes, const std::string& what) {
    ByteSpanBuffer buffer(bytes);
    std::istream in(&buffer);
    const ImageHeader header = read_image_header(in, what);
    return decode_checked(what, header, {0, 0}, [&] {
        // imdecode only reads the bytes; cv::Mat wants a non-const pointer.
        const cv::Mat encoded(1, static_cast<int>(bytes.size()), CV_8U, const_cast<std::byte*>(bytes.data()));
        return cv::imdecode(encoded, imread_flags);
    });
}

std::vector<std::uint8_t> encode_png(const Tensor& image) {
    TESSERA_CHECK(image.rank() == 3 && (image.dim(0) == 4 || image.dim(0) == 3 || image.dim(0) == 1) && image.dtype() == DType::F32,
                  "a PNG is made of f32 [4, H, W] (RGBA), [3, H, W] or [1, H, W], got " << dtype_name(image.dtype()) << " "
                                                                                       << shape_to_string(image.shape()));
    const Tensor dense = image.contiguous();
    const auto channels = static_cast<int>(dense.dim(0));
    const auto height = static_cast<int>(dense.dim(1));
    const auto width = static_cast<int>(dense.dim(2));
    cv::Mat pixels(height, width, CV_8UC(channels));
    const float* values = dense.data<float>();
    const std::int64_t plane = static_cast<std::int64_t>(height) * width;
    for (int y = 0; y < height; ++y) {
        auto* row = pixels.ptr<std::uint8_t>(y);
        for (int x = 0; x < width; ++x) {
            for (int c = 0; c < channels; ++c) {
                const float value = std::clamp(values[c * plane + static_cast<std::int64_t>(y) * width + x], 0.0f, 1.0f);
                // OpenCV stores colour as B, G, R (then alpha).
                row[x * channels + (channels >= 3 && c < 3 ? 2 - c : c)] = static_cast<std::uint8_t>(std::lround(value * 255.0f));
            }
        }
    }
    std::vector<std::uint8_t> encoded;
    TESSERA_CHECK(cv::imencode(".png", pixels, encoded), "OpenCV could not encode a " << width << "×" << height << " image as PNG");
    return encoded;
}

void write_color_png(const Tensor& image, const fs::path& path) {
    const std::vector<std::uint8_t> encoded = encode_png(image);
    io::write_file_atomically(path, std::as_bytes(std::span(encoded.data(), encoded.size())));
}

}  // namespace tessera
