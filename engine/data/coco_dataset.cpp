#include "data/coco_dataset.hpp"

#include "core/error.hpp"
#include "io/color_image.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

namespace tessera::data {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

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
    TESSERA_CHECK(fs::is_regular_file(file), "COCO annotations file "
                                                 << quoted(file)
                                                 << " does not exist or is not a file: check annotations_file");
    std::ifstream in(file, std::ios::binary);
    TESSERA_CHECK(in.good(), "COCO annotations file " << quoted(file)
                                                      << " cannot be opened for reading: check that this user may "
                                                         "read it");
    try {
        return Json::parse(in);
    } catch (const Json::parse_error& error) {
        TESSERA_REJECT(quoted(file) << " is not valid JSON (at byte " << error.byte << "): " << error.what());
    }
}

}  // namespace

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
                      quoted(file) << ": " << path << ".id = " << id
                                   << " is given to two categories; give each category its own id");
    }
    std::set<std::int64_t> kept_ids;
    const bool keep_all = options.keep_category_ids.empty() && options.keep_category_names.empty();
    for (const std::int64_t id : options.keep_category_ids) {
        TESSERA_CHECK(names_by_id.contains(id), "category id " << id << " asked to keep is not among the "
                                                               << names_by_id.size() << " categories of "
                                                               << quoted(file) << "; keep only ids it lists");
        kept_ids.insert(id);
    }
    for (const std::string& name : options.keep_category_names) {
        const auto found = std::find_if(names_by_id.begin(), names_by_id.end(),
                                        [&](const auto& entry) { return entry.second == name; });
        TESSERA_CHECK(found != names_by_id.end(), "category \""
                                                      << name << "\" asked to keep is not among the "
                                                      << names_by_id.size() << " categories of " << quoted(file)
                                                      << "; keep only names it lists (they are case-sensitive)");
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
        TESSERA_CHECK(image.width >= 1 && image.height >= 1 && image.width <= max_color_image_pixels / image.height,
                      quoted(file) << ": " << path << " (\"" << image.file_name << "\") is " << image.width << "×"
                                   << image.height << " pixels: expected at least 1 and at most "
                                   << max_color_image_pixels << " pixels");
        TESSERA_CHECK(index_of_image_id.emplace(image.coco_id, i).second,
                      quoted(file) << ": " << path << ".id = " << image.coco_id
                                   << " is given to two images; give each image its own id");
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
    TESSERA_CHECK(index >= 0 && index < size(), "COCO image index " << index << " is out of range: the dataset has "
                                                                    << size() << " images (read from "
                                                                    << quoted(m_options.annotations_file) << ")");
    return m_images[static_cast<std::size_t>(index)];
}

fs::path CocoDataset::image_path(std::int64_t index) const {
    return m_options.images_dir / image(index).file_name;
}

DetectionSample CocoDataset::load(std::int64_t index) const {
    const CocoImage& record = image(index);
    const fs::path path = image_path(index);
    // Checked here, not only by read_color_image, so the message can name the JSON entry to correct.
    const auto [height, width] = read_color_image_size(path);
    TESSERA_CHECK(height == record.height && width == record.width,
                  "image " << quoted(path) << " is " << width << "×" << height
                           << " pixels (width × height) but the annotations say " << record.width << "×"
                           << record.height << " (images[" << index << "] of " << quoted(m_options.annotations_file)
                           << "): the boxes would not fit it. If the file is the one annotated, correct that entry's "
                              "width and height; otherwise put back the image that was annotated");
    return make_detection_sample(read_color_image(path, {record.height, record.width}), record.objects);
}

}  // namespace tessera::data
