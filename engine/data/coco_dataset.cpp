#include "data/coco_dataset.hpp"

#include "core/error.hpp"

#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

namespace tessera::data {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// The largest image load() accepts: 2^27 pixels (1.5 GiB as f32 RGB), far beyond any COCO image.
constexpr std::int64_t max_image_pixels = std::int64_t{1} << 27;

// Appended, not "'" + ... + "'": GCC 12 warns (-Wrestrict) on that operator+ by mistake.
std::string quoted(const fs::path& path) {
    std::string text(1, '\'');
    text.append(path.string()).push_back('\'');
    return text;
}

// Reads values out of the parsed instances.json, naming the file and the JSON path in every error.
class JsonFields {
public:
    explicit JsonFields(const fs::path& file) : m_file(file) {}

    const Json& member(const Json& object, const std::string& path, const char* key) const {
        TESSERA_CHECK(object.is_object(),
                      quoted(m_file) << ": expected " << where(path) << " to be an object, got " << described(object));
        const auto found = object.find(key);
        TESSERA_CHECK(found != object.end(), quoted(m_file) << ": " << where(path) << " has no \"" << key
                                                            << "\" field; a COCO instances file needs it");
        return *found;
    }
    const Json* optional_member(const Json& object, const char* key) const {
        const auto found = object.find(key);
        return found == object.end() ? nullptr : &*found;
    }

    const Json& array(const Json& value, const std::string& path) const {
        TESSERA_CHECK(value.is_array(), quoted(m_file)
                                            << ": expected " << path << " to be an array, got " << described(value));
        return value;
    }

    // Integers; a float with no fraction (640.0, as some exporters write) is accepted.
    std::int64_t integer(const Json& value, const std::string& path) const {
        if (value.is_number_unsigned()) {
            const auto unsigned_value = value.get<std::uint64_t>();
            TESSERA_CHECK(unsigned_value <= static_cast<std::uint64_t>(INT64_MAX),
                          quoted(m_file) << ": " << path << " = " << unsigned_value << " is out of the int64 range");
            return static_cast<std::int64_t>(unsigned_value);
        }
        if (value.is_number_integer()) return value.get<std::int64_t>();
        if (value.is_number_float()) {
            const double number = value.get<double>();
            TESSERA_CHECK(std::trunc(number) == number && std::abs(number) < 0x1p62,
                          quoted(m_file) << ": expected " << path << " to be an integer, got " << value.dump());
            return static_cast<std::int64_t>(number);
        }
        TESSERA_REJECT(quoted(m_file) << ": expected " << path << " to be an integer, got " << described(value));
    }

    double number(const Json& value, const std::string& path) const {
        TESSERA_CHECK(value.is_number(), quoted(m_file)
                                             << ": expected " << path << " to be a number, got " << described(value));
        return value.get<double>();
    }

    std::string string(const Json& value, const std::string& path) const {
        TESSERA_CHECK(value.is_string(), quoted(m_file)
                                             << ": expected " << path << " to be a string, got " << described(value));
        return value.get<std::string>();
    }

private:
    static std::string where(const std::string& path) { return path.empty() ? "the top level" : path; }
    static std::string described(const Json& value) {
        const std::string text = value.dump();
        std::ostringstream out;
        const bool vowel = value.is_object() || value.is_array();
        out << (vowel ? "an " : "a ") << value.type_name() << " ("
            << (text.size() > 40 ? text.substr(0, 37) + "..." : text) << ")";
        return out.str();
    }

    const fs::path& m_file;
};

Json parse_json_file(const fs::path& file) {
    TESSERA_CHECK(fs::is_regular_file(file),
                  "COCO annotations file " << quoted(file) << " does not exist or is not a file");
    std::ifstream in(file, std::ios::binary);
    TESSERA_CHECK(in.good(), "COCO annotations file " << quoted(file) << " cannot be opened for reading");
    try {
        return Json::parse(in);
    } catch (const Json::parse_error& error) {
        TESSERA_REJECT(quoted(file) << " is not valid JSON (at byte " << error.byte << "): " << error.what());
    }
}

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
std::optional<std::array<std::int64_t, 2>> jpeg_size(std::ifstream& in) {
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

ImageHeader read_image_header(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    TESSERA_CHECK(in.good(), "image " << quoted(path) << " cannot be opened for reading");
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
        TESSERA_REJECT("image " << quoted(path)
                                << " is not a PNG, JPEG or BMP file (it does not start with any of their "
                                   "signatures); convert it to one of them");
    }
    return header;
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

}  // namespace

Tensor read_rgb_image(const fs::path& path, std::array<std::int64_t, 2> expected_size) {
    const ImageHeader header = read_image_header(path);
    const char* kind = kind_name(header.kind);
    TESSERA_CHECK(header.size.has_value(),
                  "image " << quoted(path) << " is damaged: its " << kind << " header does not give the image size");
    const auto [height, width] = *header.size;
    const bool check_size = expected_size[0] != 0 || expected_size[1] != 0;
    TESSERA_CHECK(
        !check_size || (height == expected_size[0] && width == expected_size[1]),
        "image " << quoted(path) << " is " << width << "×" << height << " pixels (width × height) but the "
                 << "annotations say " << expected_size[1] << "×" << expected_size[0]
                 << ": the boxes would not fit it. Is it the right file, or was it resized after annotating?");
    TESSERA_CHECK(height >= 1 && width >= 1 && height * width <= max_image_pixels,
                  "image " << quoted(path) << " declares " << width << "×" << height
                           << " pixels: expected at least 1 and at most " << max_image_pixels << " pixels");

    cv::Mat decoded;
    try {
        decoded = cv::imread(path.string(), cv::IMREAD_ANYDEPTH | cv::IMREAD_ANYCOLOR | cv::IMREAD_IGNORE_ORIENTATION);
    } catch (const cv::Exception& error) {
        TESSERA_REJECT("image " << quoted(path) << " could not be decoded as " << kind << ": " << error.err);
    }
    TESSERA_CHECK(!decoded.empty(), "image " << quoted(path) << " could not be decoded as " << kind
                                             << ": the file is damaged or uses a variant OpenCV cannot read");
    TESSERA_CHECK(decoded.rows == height && decoded.cols == width,
                  "image " << quoted(path) << " decodes to " << decoded.cols << "×" << decoded.rows
                           << " pixels but its header says " << width << "×" << height << ": the file is damaged");
    const int channels = decoded.channels();
    TESSERA_CHECK(channels == 1 || channels == 3 || channels == 4,
                  "image " << quoted(path) << " has " << channels << " channels: expected grey, RGB or RGBA");
    Tensor image = Tensor::empty({3, height, width}, DType::F32);
    if (decoded.depth() == CV_8U) {
        copy_to_rgb<std::uint8_t>(decoded, 1.0f / 255.0f, image);
    } else if (decoded.depth() == CV_16U) {
        copy_to_rgb<std::uint16_t>(decoded, 1.0f / 65535.0f, image);
    } else {
        TESSERA_REJECT("image " << quoted(path) << " has samples of OpenCV depth " << decoded.depth()
                                << ": expected 8 or 16 bits unsigned");
    }
    return image;
}

CocoDataset::CocoDataset(const CocoOptions& options) : m_options(options) {
    const fs::path& file = options.annotations_file;
    const Json root = parse_json_file(file);
    const JsonFields fields(file);

    // Categories: COCO id -> name, then the kept ones in ascending id order.
    const Json& categories = fields.array(fields.member(root, "", "categories"), "categories");
    std::map<std::int64_t, std::string> names_by_id;
    for (std::size_t i = 0; i < categories.size(); ++i) {
        const std::string path = "categories[" + std::to_string(i) + "]";
        const std::int64_t id = fields.integer(fields.member(categories[i], path, "id"), path + ".id");
        const std::string name = fields.string(fields.member(categories[i], path, "name"), path + ".name");
        TESSERA_CHECK(names_by_id.emplace(id, name).second,
                      quoted(file) << ": " << path << ".id = " << id << " is given to two categories");
    }
    std::set<std::int64_t> kept_ids;
    const bool keep_all = options.keep_category_ids.empty() && options.keep_category_names.empty();
    for (const std::int64_t id : options.keep_category_ids) {
        TESSERA_CHECK(names_by_id.contains(id), "category id " << id << " asked to keep is not among the "
                                                               << names_by_id.size() << " categories of "
                                                               << quoted(file));
        kept_ids.insert(id);
    }
    for (const std::string& name : options.keep_category_names) {
        const auto found = std::find_if(names_by_id.begin(), names_by_id.end(),
                                        [&](const auto& entry) { return entry.second == name; });
        TESSERA_CHECK(found != names_by_id.end(), "category \"" << name << "\" asked to keep is not among the "
                                                                << names_by_id.size() << " categories of "
                                                                << quoted(file) << " (names are case-sensitive)");
        kept_ids.insert(found->first);
    }
    std::unordered_map<std::int64_t, std::int32_t> class_of_id;  // kept COCO id -> class id
    for (const auto& [id, name] : names_by_id) {
        if (!keep_all && !kept_ids.contains(id)) continue;
        const auto class_id = static_cast<std::int32_t>(m_categories.size());
        m_categories.push_back({class_id, id, name});
        class_of_id.emplace(id, class_id);
    }

    // Images.
    TESSERA_CHECK(fs::is_directory(options.images_dir),
                  "COCO images folder " << quoted(options.images_dir) << " does not exist or is not a folder");
    const Json& images = fields.array(fields.member(root, "", "images"), "images");
    std::unordered_map<std::int64_t, std::size_t> index_of_image_id;
    m_images.reserve(images.size());
    for (std::size_t i = 0; i < images.size(); ++i) {
        const std::string path = "images[" + std::to_string(i) + "]";
        CocoImage image;
        image.coco_id = fields.integer(fields.member(images[i], path, "id"), path + ".id");
        image.file_name = fields.string(fields.member(images[i], path, "file_name"), path + ".file_name");
        image.width = fields.integer(fields.member(images[i], path, "width"), path + ".width");
        image.height = fields.integer(fields.member(images[i], path, "height"), path + ".height");
        TESSERA_CHECK(image.width >= 1 && image.height >= 1 && image.width <= max_image_pixels / image.height,
                      quoted(file) << ": " << path << " (\"" << image.file_name << "\") is " << image.width << "×"
                                   << image.height << " pixels: expected at least 1 and at most " << max_image_pixels
                                   << " pixels");
        TESSERA_CHECK(index_of_image_id.emplace(image.coco_id, i).second,
                      quoted(file) << ": " << path << ".id = " << image.coco_id << " is given to two images");
        const fs::path image_file = options.images_dir / image.file_name;
        TESSERA_CHECK(fs::is_regular_file(image_file),
                      "image \"" << image.file_name << "\" (" << path << " of " << quoted(file)
                                 << ") is not in the images folder " << quoted(options.images_dir) << ": no file "
                                 << quoted(image_file) << ". Is images_dir the right folder?");
        m_images.push_back(std::move(image));
    }

    // Annotations.
    const Json& annotations = fields.array(fields.member(root, "", "annotations"), "annotations");
    m_counts.annotations = static_cast<std::int64_t>(annotations.size());
    for (std::size_t i = 0; i < annotations.size(); ++i) {
        const std::string path = "annotations[" + std::to_string(i) + "]";
        const Json& annotation = annotations[i];
        const std::int64_t image_id = fields.integer(fields.member(annotation, path, "image_id"), path + ".image_id");
        const std::int64_t category_id =
            fields.integer(fields.member(annotation, path, "category_id"), path + ".category_id");
        const Json& bbox = fields.member(annotation, path, "bbox");
        TESSERA_CHECK(bbox.is_array() && bbox.size() == 4, quoted(file) << ": expected " << path
                                                                        << ".bbox to be [x, y, width, height], got "
                                                                        << bbox.dump());
        std::array<double, 4> xywh{};
        for (std::size_t k = 0; k < 4; ++k) xywh[k] = fields.number(bbox[k], path + ".bbox[" + std::to_string(k) + "]");
        std::int64_t is_crowd = 0;
        if (const Json* crowd = fields.optional_member(annotation, "iscrowd")) {
            is_crowd =
                crowd->is_boolean() ? std::int64_t{crowd->get<bool>()} : fields.integer(*crowd, path + ".iscrowd");
            TESSERA_CHECK(is_crowd == 0 || is_crowd == 1,
                          quoted(file) << ": expected " << path << ".iscrowd to be 0 or 1, got " << is_crowd);
        }
        double area = xywh[2] * xywh[3];
        if (const Json* given = fields.optional_member(annotation, "area"))
            area = fields.number(*given, path + ".area");

        const auto image_index = index_of_image_id.find(image_id);
        TESSERA_CHECK(image_index != index_of_image_id.end(), quoted(file)
                                                                  << ": " << path << ".image_id = " << image_id
                                                                  << " names no image (no images[].id has that value)");
        TESSERA_CHECK(names_by_id.contains(category_id),
                      quoted(file) << ": " << path << ".category_id = " << category_id
                                   << " names no category (no categories[].id has that value)");
        if (is_crowd == 1) {
            ++m_counts.crowd_ignored;
            continue;
        }
        const auto class_id = class_of_id.find(category_id);
        if (class_id == class_of_id.end()) {
            ++m_counts.other_category;
            continue;
        }
        if (!(xywh[2] > 0 && xywh[3] > 0)) {
            ++m_counts.degenerate;
            continue;
        }
        CocoImage& image = m_images[image_index->second];
        const auto clip = [](double value, std::int64_t limit) {
            return static_cast<float>(std::clamp(value, 0.0, static_cast<double>(limit)));
        };
        const detection::Box box{clip(xywh[0], image.width), clip(xywh[1], image.height),
                                 clip(xywh[0] + xywh[2], image.width), clip(xywh[1] + xywh[3], image.height)};
        if (box.empty()) {
            ++m_counts.outside_image;
            continue;
        }
        image.objects.push_back({box, class_id->second});
        image.areas.push_back(static_cast<float>(area));
        ++m_counts.kept;
    }
    m_counts.images_without_objects =
        std::count_if(m_images.begin(), m_images.end(), [](const CocoImage& image) { return image.objects.empty(); });
}

const CocoImage& CocoDataset::image(std::int64_t index) const {
    TESSERA_CHECK(index >= 0 && index < size(),
                  "COCO image index " << index << " is out of range: the dataset has " << size() << " images");
    return m_images[static_cast<std::size_t>(index)];
}

fs::path CocoDataset::image_path(std::int64_t index) const {
    return m_options.images_dir / image(index).file_name;
}

DetectionSample CocoDataset::load(std::int64_t index) const {
    const CocoImage& record = image(index);
    return make_detection_sample(read_rgb_image(image_path(index), {record.height, record.width}), record.objects);
}

}  // namespace tessera::data
