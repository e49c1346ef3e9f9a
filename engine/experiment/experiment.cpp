#include "experiment/experiment.hpp"

#include "core/error.hpp"
#include "core/json_support.hpp"
#include "core/user_files.hpp"
#include "cost/device.hpp"
#include "networks/models.hpp"
#include "networks/retinanet.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

namespace tessera::experiment {

namespace {

using namespace tessera::json;

// Reads fields at JSON paths; every error names the file and the path.
class Reader {
public:
    explicit Reader(std::string origin) : m_origin(std::move(origin)) {}

    [[noreturn]] void fail(std::string_view path, const std::string& message) const {
        TESSERA_REJECT(m_origin << ": " << path << ": " << message);
    }

    void check_fields(const Json& object, std::string_view path, const std::vector<std::string_view>& known) const {
        for (const auto& item : object.items()) {
            if (std::find(known.begin(), known.end(), item.key()) != known.end()) continue;
            fail(join_path(path, item.key()), "unknown field" + did_you_mean_key(item.key(), known));
        }
    }

    const Json* find(const Json& parent, std::string_view key) const {
        const auto it = parent.find(key);
        return it == parent.end() ? nullptr : &*it;
    }

    const Json& object(const Json& parent, std::string_view path, std::string_view key, std::string_view example) const {
        const Json* value = find(parent, key);
        const std::string here = join_path(path, key);
        if (!value) fail(here, "missing; e.g. " + std::string(example));
        if (!value->is_object()) fail(here, "expected an object such as " + std::string(example) + ", got " + type_name(*value));
        return *value;
    }

    std::int64_t integer(const Json& parent, std::string_view path, std::string_view key, std::int64_t minimum,
                         std::int64_t maximum, std::optional<std::int64_t> fallback) const {
        const Json* value = find(parent, key);
        const std::string here = join_path(path, key);
        std::ostringstream range;
        range << "an integer from " << minimum << " to " << maximum;
        if (!value) {
            if (fallback) return *fallback;
            fail(here, "missing; expected " + range.str());
        }
        if (!value->is_number_integer()) fail(here, "expected " + range.str() + ", got " + type_name(*value));
        const auto v = value->get<std::int64_t>();
        if (v < minimum || v > maximum) fail(here, "expected " + range.str() + ", got " + shown(*value));
        return v;
    }

    double number(const Json& parent, std::string_view path, std::string_view key, double minimum, double maximum,
                  double fallback) const {
        const Json* value = find(parent, key);
        if (!value) return fallback;
        const std::string here = join_path(path, key);
        std::ostringstream range;
        range << "a number from " << minimum << " to " << maximum;
        if (!value->is_number()) fail(here, "expected " + range.str() + ", got " + type_name(*value));
        const double v = value->get<double>();
        if (!(v >= minimum && v <= maximum)) fail(here, "expected " + range.str() + ", got " + shown(*value));
        return v;
    }

    bool boolean(const Json& parent, std::string_view path, std::string_view key, bool fallback) const {
        const Json* value = find(parent, key);
        if (!value) return fallback;
        if (!value->is_boolean()) fail(join_path(path, key), "expected true or false, got " + type_name(*value));
        return value->get<bool>();
    }

    std::string choice(const Json& parent, std::string_view path, std::string_view key,
                       const std::vector<std::string_view>& allowed, std::optional<std::string> fallback) const {
        const Json* value = find(parent, key);
        const std::string here = join_path(path, key);
        std::vector<std::string> quoted;
        for (std::string_view a : allowed) quoted.push_back(in_quotes(a));
        const std::string one_of = "one of " + listed(quoted);
        if (!value) {
            if (fallback) return *fallback;
            fail(here, "missing; expected " + one_of);
        }
        if (!value->is_string()) fail(here, "expected " + one_of + ", got " + type_name(*value));
        const std::string text = value->get<std::string>();
        if (std::find(allowed.begin(), allowed.end(), text) == allowed.end()) {
            const Closest best = closest(text, allowed);
            fail(here, "expected " + one_of + ", got " + in_quotes(text) +
                           (best.is_close ? "; did you mean " + in_quotes(best.name) + "?" : std::string()));
        }
        return text;
    }

    std::optional<std::string> string(const Json& parent, std::string_view path, std::string_view key) const {
        const Json* value = find(parent, key);
        if (!value) return std::nullopt;
        if (!value->is_string()) fail(join_path(path, key), "expected a string, got " + type_name(*value));
        return value->get<std::string>();
    }

    // An object at parent[key], or nullptr when absent; its fields checked against `known`.
    const Json* optional_object(const Json& parent, std::string_view path, std::string_view key, std::string_view example,
                                const std::vector<std::string_view>& known) const {
        const Json* value = find(parent, key);
        if (!value) return nullptr;
        const std::string here = join_path(path, key);
        if (!value->is_object()) fail(here, "expected an object such as " + std::string(example) + ", got " + type_name(*value));
        check_fields(*value, here, known);
        return value;
    }

    const std::string& origin() const { return m_origin; }

private:
    std::string m_origin;
};

// JSON's input_partition_dims, written as TPUConfig text for the partition parser: null → None.
std::string partition_text(const Json& value) {
    if (value.is_null()) return "None";
    if (value.is_array()) {
        std::string out = "[";
        for (std::size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + partition_text(value[i]);
        return out + "]";
    }
    if (value.is_object()) {
        std::string out = "{";
        bool first = true;
        for (const auto& item : value.items()) {
            out += (first ? "'" : ", '") + item.key() + "': " + partition_text(item.value());
            first = false;
        }
        return out + "}";
    }
    return value.dump();
}

std::vector<std::int64_t> integer_list(const Reader& read, const Json& parent, std::string_view path, std::string_view key,
                                       std::int64_t minimum, std::string_view example) {
    const Json* value = read.find(parent, key);
    if (!value) return {};
    const std::string here = join_path(path, key);
    if (!value->is_array()) read.fail(here, "expected a list such as " + std::string(example) + ", got " + type_name(*value));
    std::vector<std::int64_t> values;
    for (std::size_t i = 0; i < value->size(); ++i) {
        const Json& item = (*value)[i];
        if (!item.is_number_integer() || item.get<std::int64_t>() < minimum) {
            read.fail(here + "[" + std::to_string(i) + "]",
                      "expected an integer of at least " + std::to_string(minimum) + ", got " + shown(item));
        }
        values.push_back(item.get<std::int64_t>());
    }
    return values;
}

std::string cuts_text(const std::vector<std::int64_t>& cuts) {
    std::string text = "[";
    for (std::size_t i = 0; i < cuts.size(); ++i) text.append(i ? ", " : "").append(std::to_string(cuts[i]));
    return text.append("]");
}

// "D", "H", "W" for a 3D input; "H", "W" for a 2D one.
std::string axis_letter(std::size_t axis, std::size_t rank) {
    static constexpr std::string_view letters = "DHW";
    return std::string(1, letters[axis + 3 - rank]);
}

// tile_boundaries: per spatial axis the cuts from 0 to the extent, as many tiles as input_partition_dims
// gives the axis, every interior cut on the model's boundary alignment; then the model must tile.
partition::SpatialGrid parse_tile_boundaries(const Reader& read, const Json& value, const Experiment& e, const graph::Graph& model) {
    const std::size_t rank = e.size.size();
    const std::vector<std::int64_t> pieces = spatial_pieces(e);
    // An example in the user's own terms: their pieces, cut evenly.
    std::string example = "[";
    for (std::size_t axis = 0; axis < rank; ++axis) {
        std::vector<std::int64_t> cuts;
        for (std::int64_t i = 0; i <= pieces[axis]; ++i) cuts.push_back(e.size[axis] * i / pieces[axis]);
        example.append(axis ? ", " : "").append(cuts_text(cuts));
    }
    example.append("]");
    const std::string input_size = cuts_text(e.size);
    if (!value.is_array() || value.size() != rank) {
        read.fail("tile_boundaries", std::string("expected one list of cuts per spatial axis of input.size ")
                                         .append(input_size)
                                         .append(" (")
                                         .append(std::to_string(rank))
                                         .append(" lists, outermost first, each from 0 to the extent), e.g. ")
                                         .append(example)
                                         .append(", got ")
                                         .append(value.is_array() ? std::to_string(value.size()) + (value.size() == 1 ? " list" : " lists") : type_name(value)));
    }
    const std::vector<std::int64_t> alignment = partition::boundary_alignment(model);
    partition::SpatialGrid grid;
    for (std::size_t axis = 0; axis < rank; ++axis) {
        const std::string here = "tile_boundaries[" + std::to_string(axis) + "]";
        const std::string letter = axis_letter(axis, rank);
        const std::int64_t extent = e.size[axis];
        const Json& list = value[axis];
        if (!list.is_array() || list.size() < 2) {
            read.fail(here, std::string("expected the cuts along ")
                                .append(letter)
                                .append(" from 0 to its extent ")
                                .append(std::to_string(extent))
                                .append(", e.g. [0, ")
                                .append(std::to_string(extent))
                                .append("] for one tile, got ")
                                .append(shown(list)));
        }
        std::vector<std::int64_t> cuts;
        for (std::size_t i = 0; i < list.size(); ++i) {
            const std::string at = here + "[" + std::to_string(i) + "]";
            const Json& item = list[i];
            if (!item.is_number_integer()) read.fail(at, std::string("expected an integer row index, got ").append(type_name(item)));
            const std::int64_t cut = item.get<std::int64_t>();
            if (i == 0 && cut != 0) read.fail(at, std::string("expected 0 (the cuts start at the beginning of the axis), got ").append(shown(item)));
            if (i + 1 == list.size() && cut != extent) {
                read.fail(at, std::string("expected ")
                                  .append(std::to_string(extent))
                                  .append(", the extent of ")
                                  .append(letter)
                                  .append(" (input.size[")
                                  .append(std::to_string(axis))
                                  .append("]), as the last cut, got ")
                                  .append(shown(item)));
            }
            if (i > 0 && cut <= cuts.back()) {
                read.fail(at, std::string("expected more than the previous cut ")
                                  .append(std::to_string(cuts.back()))
                                  .append(" (cuts increase, every tile at least one row), got ")
                                  .append(shown(item)));
            }
            cuts.push_back(cut);
        }
        const auto tiles = static_cast<std::int64_t>(cuts.size()) - 1;
        if (tiles != pieces[axis]) {
            std::string message = std::string("expected ")
                                      .append(std::to_string(pieces[axis]))
                                      .append(pieces[axis] == 1 ? " tile" : " tiles")
                                      .append(" (")
                                      .append(std::to_string(pieces[axis] + 1))
                                      .append(" cuts) along ")
                                      .append(letter)
                                      .append(", as input_partition_dims ");
            message.append(pieces[axis] == 1 ? std::string("does not split it")
                                             : std::string("splits it into ").append(std::to_string(pieces[axis])).append(" pieces"))
                .append(", got ")
                .append(std::to_string(tiles))
                .append(" in ")
                .append(cuts_text(cuts))
                .append("; change input_partition_dims and num_cores_per_replica to match, or the cuts");
            read.fail(here, message);
        }
        const std::int64_t unit = alignment[axis];
        for (std::size_t i = 1; i + 1 < cuts.size(); ++i) {
            if (cuts[i] % unit == 0) continue;
            const std::int64_t lower = cuts[i] / unit * unit, upper = lower + unit;
            // The nearest multiple strictly inside the axis (ties go down).
            std::int64_t nearest = cuts[i] - lower <= upper - cuts[i] ? lower : upper;
            if (nearest <= 0) nearest = upper;
            if (nearest >= extent) nearest = lower;
            std::string message = std::string("expected a multiple of ")
                                      .append(std::to_string(unit))
                                      .append(" (the model's strided layers need every tile boundary along ")
                                      .append(letter)
                                      .append(" on a multiple of ")
                                      .append(std::to_string(unit))
                                      .append("), got ")
                                      .append(std::to_string(cuts[i]));
            if (nearest > 0 && nearest < extent) {
                message.append("; the nearest valid cut is ").append(std::to_string(nearest));
            } else {
                message.append("; no cut inside ").append(letter).append(" is a multiple of ").append(std::to_string(unit))
                    .append(", so this axis cannot be split: give [0, ").append(std::to_string(extent)).append("]");
            }
            read.fail(here + "[" + std::to_string(i) + "]", message);
        }
        grid.boundaries.push_back(std::move(cuts));
    }
    try {
        partition::plan_tiling(model, grid);
    } catch (const Error& error) {
        read.fail("tile_boundaries", error.what());
    }
    return grid;
}

// data.annotations, data.images and the other fields of a "coco" source; refuses the generated sources'.
void parse_coco_fields(const Reader& read, const Json& d, const Experiment& e, data::DataConfig& config) {
    const auto annotations = read.string(d, "data", "annotations");
    const auto images = read.string(d, "data", "images");
    if (!annotations || annotations->empty()) {
        read.fail("data.annotations",
                  "missing; a \"coco\" source needs its instances.json, relative to the experiment file, e.g. "
                  "\"coco/annotations/instances_train2017.json\"");
    }
    if (!images || images->empty()) {
        read.fail("data.images",
                  "missing; a \"coco\" source needs the folder its annotations' file_name entries are in, relative "
                  "to the experiment file, e.g. \"coco/train2017\"");
    }
    config.annotations_file = *annotations;
    config.images_dir = *images;
    for (std::string_view key : {"labels", "label_mapping", "image_size", "num_train_images", "num_eval_images",
                                 "noise", "foreground_fraction"}) {
        if (read.find(d, key)) {
            read.fail(join_path("data", key),
                      "does not apply to a \"coco\" source (its images, sizes and boxes come from "
                      "data.annotations): remove it");
        }
    }
    const auto eval_annotations = read.string(d, "data", "eval_annotations");
    const auto eval_images = read.string(d, "data", "eval_images");
    if (eval_annotations) {
        if (eval_annotations->empty()) {
            read.fail("data.eval_annotations", "expected the held-out images' instances.json, got an empty string");
        }
        if (read.find(d, "holdout_fraction")) {
            read.fail("data.holdout_fraction",
                      "the held-out images are data.eval_annotations': remove holdout_fraction (or "
                      "eval_annotations, to hold out the last images of data.annotations)");
        }
        config.eval_annotations_file = *eval_annotations;
    }
    if (eval_images) {
        if (!eval_annotations) {
            read.fail("data.eval_images",
                      "given without data.eval_annotations: add the held-out images' instances.json, or remove "
                      "eval_images (holdout_fraction then holds out the last images of data.annotations)");
        }
        if (eval_images->empty()) {
            read.fail("data.eval_images", "expected the held-out images' folder, got an empty string");
        }
        config.eval_images_dir = *eval_images;
    }
    if (const Json* categories = read.find(d, "categories")) {
        if (!categories->is_array() || categories->empty()) {
            read.fail(
                "data.categories",
                "expected a non-empty list of COCO category names or ids, e.g. [\"person\", \"dog\"] or [1, 18], got " +
                    shown(*categories));
        }
        for (std::size_t i = 0; i < categories->size(); ++i) {
            const Json& item = (*categories)[i];
            const std::string here = "data.categories[" + std::to_string(i) + "]";
            if (item.is_string() && !item.get<std::string>().empty()) {
                const std::string name = item.get<std::string>();
                if (std::find(config.category_names.begin(), config.category_names.end(), name) !=
                    config.category_names.end()) {
                    read.fail(here, "lists " + in_quotes(name) + " twice: give each category once");
                }
                config.category_names.push_back(name);
            } else if (item.is_number_integer() && item.get<std::int64_t>() >= 0) {
                const auto id = item.get<std::int64_t>();
                if (std::find(config.category_ids.begin(), config.category_ids.end(), id) !=
                    config.category_ids.end()) {
                    read.fail(here, "lists category id " + std::to_string(id) + " twice: give each category once");
                }
                config.category_ids.push_back(id);
            } else {
                read.fail(here, "expected a category name (a string) or a COCO category id (an integer ≥ 0), got " +
                                    shown(item));
            }
        }
        if (static_cast<std::int64_t>(categories->size()) != e.model.num_classes) {
            read.fail("data.categories", "keeps " + std::to_string(categories->size()) +
                                             " categories but model.num_classes is " +
                                             std::to_string(e.model.num_classes) +
                                             ": the detector has one class per kept category, "
                                             "so make them equal");
        }
    }
    if (const Json* jitter = read.find(d, "scale_jitter")) {
        if (!jitter->is_array() || jitter->size() != 2 || !(*jitter)[0].is_number() || !(*jitter)[1].is_number() ||
            !((*jitter)[0].get<double>() > 0) || !((*jitter)[0].get<double>() <= (*jitter)[1].get<double>()) ||
            !((*jitter)[1].get<double>() <= 10)) {
            read.fail("data.scale_jitter",
                      "expected [min, max] scales of the size that fits the input, 0 < min ≤ max ≤ 10, e.g. "
                      "[0.8, 1.2] ([1, 1]: none), got " +
                          shown(*jitter));
        }
        config.scale_jitter = {(*jitter)[0].get<double>(), (*jitter)[1].get<double>()};
    }
}

// data.source, and whether it suits the model: a U-Net segments, a ResNet classifies, a RetinaNet detects.
std::string parse_source(const Reader& read, const Json& d, const Experiment& e, data::DataConfig& config) {
    const std::string source = read.choice(
        d, "data", "source",
        {"synthetic_em", "synthetic_ct", "fake_images", "folder", "example_mri", "synthetic_shapes", "coco", "tfrecord", "volume"},
        std::nullopt);
    config.source = source == "synthetic_em"       ? data::SourceKind::SyntheticEm
                    : source == "synthetic_ct"     ? data::SourceKind::SyntheticCt
                    : source == "fake_images"      ? data::SourceKind::FakeImages
                    : source == "folder"           ? data::SourceKind::Folder
                    : source == "synthetic_shapes" ? data::SourceKind::SyntheticShapes
                    : source == "coco"             ? data::SourceKind::Coco
                    : source == "tfrecord"         ? data::SourceKind::TFRecord
                    : source == "volume"           ? data::SourceKind::Volume
                                                   : data::SourceKind::ExampleMri;
    const bool classifier_source = config.source == data::SourceKind::FakeImages || config.source == data::SourceKind::TFRecord;
    const bool detection = data::is_detection_source(config.source);
    if (e.model.kind == ModelKind::RetinaNet && !detection) {
        read.fail("data.source",
                  "a RetinaNet detects boxes: use \"synthetic_shapes\" or \"coco\", got " + in_quotes(source));
    } else if (e.model.kind == ModelKind::ResNet && !classifier_source) {
        read.fail("data.source", "a ResNet classifies whole images: use \"tfrecord\" (shards of labelled images) or "
                                 "\"fake_images\", got " + in_quotes(source));
    } else if (e.model.kind == ModelKind::UNet && (classifier_source || detection)) {
        read.fail("data.source", "a U-Net segments: use \"synthetic_em\", \"synthetic_ct\", \"folder\", \"volume\" or \"example_mri\", got " +
                                     in_quotes(source));
    }
    return source;
}

// A detection source's boxes (how many an image may hold and what happens past that) and the synthetic
// shapes' objects; nothing of it for any other source.
void parse_boxes(const Reader& read, const Json& d, const std::string& source, data::DataConfig& config) {
    const bool detection = data::is_detection_source(config.source);
    if (!detection) {
        for (std::string_view key : {"max_number_of_boxes", "excess_boxes", "objects", "object_size"}) {
            if (read.find(d, key)) read.fail(join_path("data", key), "only a detection source has boxes; this source is " + in_quotes(source));
        }
    }
    config.max_number_of_boxes = read.integer(d, "data", "max_number_of_boxes", 1, 10000, config.max_number_of_boxes);
    const std::string excess = read.choice(d, "data", "excess_boxes", {"error", "keep_largest", "keep_first"}, "error");
    config.excess_boxes = excess == "error" ? data::ExcessBoxes::Error
                          : excess == "keep_largest" ? data::ExcessBoxes::KeepLargest : data::ExcessBoxes::KeepFirst;
    if (read.find(d, "objects") || read.find(d, "object_size")) {
        if (config.source != data::SourceKind::SyntheticShapes) read.fail("data.objects", "only \"synthetic_shapes\" draws objects");
    }
    if (const Json* objects = read.find(d, "objects")) {
        const std::vector<std::int64_t> count = integer_list(read, d, "data", "objects", 0, "[4, 12]");
        if (count.size() != 2 || count[0] > count[1]) {
            read.fail("data.objects", "expected [min, max] objects per image with min ≤ max, e.g. [4, 12], got " + shown(*objects));
        }
        config.object_count = {count[0], count[1]};
    }
    if (const Json* size = read.find(d, "object_size")) {
        if (!size->is_array() || size->size() != 2 || !(*size)[0].is_number() || !(*size)[1].is_number() ||
            !((*size)[0].get<double>() >= 4) || !((*size)[0].get<double>() <= (*size)[1].get<double>())) {
            read.fail("data.object_size", "expected [min, max] pixels of an object's larger side with 4 ≤ min ≤ max, e.g. [8, 400], got " +
                                              shown(*size));
        }
        config.object_size = {(*size)[0].get<double>(), (*size)[1].get<double>()};
    }
}

// Where a source reads from: a folder pair, a COCO annotation file, one volume, record shards; each
// source's own keys refused elsewhere.
void parse_source_files(const Reader& read, const Json& d, const std::string& source, const Experiment& e, data::DataConfig& config) {
    if (config.source == data::SourceKind::Folder) {
        const auto images = read.string(d, "data", "images");
        const auto labels = read.string(d, "data", "labels");
        if (!images) read.fail("data.images", "missing; a folder source needs the images' folder, e.g. \"data/images\"");
        if (!labels) read.fail("data.labels", "missing; a folder source needs the label maps' folder, e.g. \"data/labels\"");
        config.images_dir = *images;
        config.labels_dir = *labels;
    } else if (config.source == data::SourceKind::Coco) {
        parse_coco_fields(read, d, e, config);
    } else if (config.source == data::SourceKind::Volume) {
        const auto image = read.string(d, "data", "image");
        const auto labels = read.string(d, "data", "labels");
        if (!image || image->empty()) {
            read.fail("data.image", "missing; a \"volume\" source needs its image: a file (\"ct.nii\") or an HDF5 dataset "
                                    "(\"sample_A.h5:/volumes/raw\"), relative to the experiment file");
        }
        if (!labels || labels->empty()) {
            read.fail("data.labels", "missing; a \"volume\" source needs its label map on the image's grid: a file or an HDF5 "
                                     "dataset (\"sample_A.h5:/volumes/labels/clefts\")");
        }
        if (read.find(d, "images")) read.fail("data.images", "a \"volume\" source reads one image: name it with data.image");
        config.image_file = *image;
        config.label_file = *labels;
        if (const Json* by_region = read.find(d, "read_by_region")) {
            if (by_region->is_boolean()) {
                config.read_by_region = by_region->get<bool>() ? data::RegionReading::Always : data::RegionReading::Never;
            } else if (!(by_region->is_string() && by_region->get<std::string>() == "auto")) {
                read.fail("data.read_by_region", "expected true (patches read from the file as batches need them), false (read "
                                                 "whole) or \"auto\" (by region when too large to read whole), got " + shown(*by_region));
            }
        }
    } else {
        for (std::string_view key : {"images", "labels"}) {
            if (read.find(d, key)) {
                read.fail(join_path("data", key),
                          "only a \"folder\" source reads folders (and a \"coco\" source its images' "
                          "folder); this source is " +
                              in_quotes(source));
            }
        }
    }
    if (config.source == data::SourceKind::TFRecord) {
        const auto records = read.string(d, "data", "records");
        if (!records || records->empty()) {
            read.fail("data.records", "missing; a \"tfrecord\" source needs its shards, a file name pattern relative to the "
                                      "experiment file, e.g. \"imagenet/train-*-of-01024\"");
        }
        config.records = *records;
        if (const auto eval_records = read.string(d, "data", "eval_records")) {
            if (eval_records->empty()) read.fail("data.eval_records", "expected the held-out shards' pattern, got an empty string");
            if (read.find(d, "holdout_fraction")) {
                read.fail("data.holdout_fraction", "the held-out images are data.eval_records': remove holdout_fraction (or "
                                                   "eval_records, to hold out the last records of data.records)");
            }
            config.eval_records = *eval_records;
        }
        config.first_label = read.integer(d, "data", "first_label", std::numeric_limits<std::int32_t>::min(),
                                          std::numeric_limits<std::int32_t>::max(), config.first_label);
    } else {
        for (std::string_view key : {"records", "eval_records", "first_label"}) {
            if (read.find(d, key)) {
                read.fail(join_path("data", key), "only a \"tfrecord\" source reads record shards; this source is " + in_quotes(source));
            }
        }
    }
    if (config.source != data::SourceKind::Volume) {
        for (std::string_view key : {"image", "read_by_region"}) {
            if (read.find(d, key)) {
                read.fail(join_path("data", key), "only a \"volume\" source reads one image (\"folder\" reads a folder of "
                                                  "them); this source is " + in_quotes(source));
            }
        }
    }
    if (config.source != data::SourceKind::Coco) {
        for (std::string_view key : {"annotations", "eval_annotations", "eval_images", "categories", "scale_jitter"}) {
            if (read.find(d, key)) {
                read.fail(join_path("data", key),
                          "only a \"coco\" source reads annotation files; this source is " + in_quotes(source));
            }
        }
    }
}

// data.label_mapping: file labels (values, ranges, thresholds) to classes.
void parse_label_mapping(const Reader& read, const Json& d, const Experiment& e, data::DataConfig& config) {
    if (const Json* mapping = read.find(d, "label_mapping")) {
        if (!mapping->is_object()) {
            read.fail("data.label_mapping", "expected an object from file label to class, e.g. {\"4\": 1, \"1-255\": 1, \">0\": 1}, got " +
                                                type_name(*mapping));
        }
        for (const auto& item : mapping->items()) {
            const std::string here = join_path("data.label_mapping", item.key());
            if (!item.value().is_number_integer() || item.value().get<std::int64_t>() < 0 ||
                item.value().get<std::int64_t>() >= e.model.num_classes) {
                read.fail(here, "expected a class from 0 to " + std::to_string(e.model.num_classes - 1) + " (model.num_classes is " +
                                    std::to_string(e.model.num_classes) + "), got " + shown(item.value()));
            }
            const auto rule = data::parse_label_rule_key(item.key(), item.value().get<std::int32_t>());
            if (!rule) {
                // Other ways people write a range or a threshold, offered as what the key was meant to be.
                std::string suggestion = item.key();
                for (const auto& [written, meant] : {std::pair<std::string, std::string>{"..", "-"}, {":", "-"}, {" to ", "-"},
                                                     {"\u2013", "-"}, {"\u2265", ">="}, {"\u2264", "<="}, {"=>", ">="}, {"=<", "<="}, {" ", ""}}) {
                    for (std::size_t at = suggestion.find(written); at != std::string::npos; at = suggestion.find(written, at + meant.size())) {
                        suggestion.replace(at, written.size(), meant);
                    }
                }
                const bool suggested = suggestion != item.key() && data::parse_label_rule_key(suggestion, 0).has_value();
                read.fail(here, "expected a file label as the key — a whole number (\"4\"), a range (\"1-255\", low to high) or a "
                                "threshold (\">0\", \">=1\", \"<10\", \"<=9\") — got " + in_quotes(item.key()) +
                                    (suggested ? "; did you mean " + in_quotes(suggestion) + "?" : ""));
            }
            config.label_mapping.push_back(*rule);
        }
    }
}

// data.normalization: "zscore", "none" or a window ({"window": [low, high]}).
void parse_normalization(const Reader& read, const Json& d, data::DataConfig& config) {
    if (const Json* normalization = read.find(d, "normalization")) {
        const std::string here = "data.normalization";
        if (normalization->is_object()) {
            read.check_fields(*normalization, here, {"window"});
            const Json* window = read.find(*normalization, "window");
            if (!window || !window->is_array() || window->size() != 2 || !(*window)[0].is_number() || !(*window)[1].is_number() ||
                !((*window)[0].get<double>() < (*window)[1].get<double>())) {
                read.fail(here + ".window", "expected [low, high] with low < high, e.g. [-1000, 1000] for CT in HU, got " +
                                                (window ? shown(*window) : std::string("nothing")));
            }
            config.normalization = data::Normalization::Window;
            config.window_low = (*window)[0].get<double>();
            config.window_high = (*window)[1].get<double>();
        } else {
            const std::string kind = read.choice(d, "data", "normalization", {"zscore", "none"}, std::nullopt);
            config.normalization = kind == "zscore" ? data::Normalization::ZScore : data::Normalization::None;
        }
    }
}

// data.augment: flips, rotations by 90° and intensity jitter.
void parse_augment(const Reader& read, const Json& d, const Experiment& e, bool coco, data::DataConfig& config) {
    if (const Json* augment = read.optional_object(d, "data", "augment", R"({"flip_axes": [1, 2], "rotate90": true})",
                                                   {"flip_axes", "rotate90", "intensity_scale", "intensity_shift"})) {
        for (std::int64_t axis : integer_list(read, *augment, "data.augment", "flip_axes", 0, "[0, 1]")) {
            if (axis >= static_cast<std::int64_t>(e.size.size())) {
                read.fail("data.augment.flip_axes", "expected spatial axes from 0 to " + std::to_string(e.size.size() - 1) +
                                                        " (0 is the first of input.size), got " + std::to_string(axis));
            }
            if (coco && axis != 1) {
                read.fail("data.augment.flip_axes",
                          "a \"coco\" source flips left-right only (axis 1; the detection transforms have "
                          "no vertical flip): use [1], got " +
                              std::to_string(axis));
            }
            config.augment.flip_axes.push_back(static_cast<int>(axis));
        }
        config.augment.rotate90 = read.boolean(*augment, "data.augment", "rotate90", false);
        if (config.augment.rotate90 && e.size[e.size.size() - 1] != e.size[e.size.size() - 2]) {
            read.fail("data.augment.rotate90", "rotations by 90° need the last two extents of input.size equal, got " +
                                                   std::to_string(e.size[e.size.size() - 2]) + " and " + std::to_string(e.size.back()));
        }
        config.augment.intensity_scale = read.number(*augment, "data.augment", "intensity_scale", 0.0, 1.0, 0.0);
        config.augment.intensity_shift = read.number(*augment, "data.augment", "intensity_shift", 0.0, 10.0, 0.0);
    }
}

data::DataConfig parse_data(const Reader& read, const Json& root, const Experiment& e, std::uint64_t seed) {
    const Json* object = read.optional_object(
        root, "", "data", R"({"source": "synthetic_em"})",
        {"source", "seed", "image_size", "num_train_images", "num_eval_images", "noise", "images", "labels",
         "label_mapping", "normalization", "static_shape", "foreground_fraction", "augment", "holdout_fraction",
         "non_finite", "max_number_of_boxes", "excess_boxes", "objects", "object_size", "annotations",
         "eval_annotations", "eval_images", "categories", "scale_jitter", "records", "eval_records", "first_label", "image",
         "read_by_region"});
    const Json& d = *object;
    data::DataConfig config;
    const std::string source = parse_source(read, d, e, config);
    parse_boxes(read, d, source, config);
    config.seed = static_cast<std::uint64_t>(read.integer(d, "data", "seed", 0, std::numeric_limits<std::int64_t>::max(),
                                                          static_cast<std::int64_t>(seed)));
    config.image_size = integer_list(read, d, "data", "image_size", 1, "[512, 512]");
    config.num_train_images = read.integer(d, "data", "num_train_images", 1, 100000, config.num_train_images);
    config.num_eval_images = read.integer(d, "data", "num_eval_images", 1, 100000, config.num_eval_images);
    config.noise = read.number(d, "data", "noise", 0.0, 1e6, config.noise);
    parse_source_files(read, d, source, e, config);
    parse_label_mapping(read, d, e, config);
    parse_normalization(read, d, config);
    const bool coco = config.source == data::SourceKind::Coco;
    // A COCO source brings whole images to the input, by default as the detection seed's pad_to_max_dimension.
    const std::string static_shape =
        read.choice(d, "data", "static_shape", {"crop", "resize", "pad_to_max"},
                    coco ? "pad_to_max" : config.source == data::SourceKind::TFRecord ? "resize" : "crop");
    if (coco && static_shape == "crop") {
        read.fail(
            "data.static_shape",
            "\"crop\" cuts patches, which would cut boxes: a \"coco\" source brings each whole image to the "
            "input, use \"resize\" (fixed shape) or \"pad_to_max\" (aspect ratio kept, padded at the bottom right)");
    }
    config.static_shape = static_shape == "crop" ? data::StaticShape::Crop
                          : static_shape == "resize" ? data::StaticShape::Resize : data::StaticShape::PadToMax;
    config.foreground_fraction = read.number(d, "data", "foreground_fraction", 0.0, 1.0, config.foreground_fraction);
    config.holdout_fraction = read.number(d, "data", "holdout_fraction", 0.0, 0.9, config.holdout_fraction);
    config.non_finite = read.choice(d, "data", "non_finite", {"error", "zero"}, "error") == "zero" ? data::NonFinitePolicy::Zero
                                                                                                   : data::NonFinitePolicy::Error;
    parse_augment(read, d, e, coco, config);
    try {
        data::validate(config);
    } catch (const Error& error) {
        read.fail("data", error.what());
    }
    return config;
}

// The "detection" section (RetinaNet only): anchors, matcher, losses, inference.
void parse_detection(const Reader& read, const Json& root, Experiment& e) {
    DetectionSpec& spec = e.detection;
    detection::DetectorConfig& detector = spec.detector;
    const Json* section = read.optional_object(root, "", "detection", R"({"matcher": {"matched_threshold": 0.5}})",
                                               {"anchors", "matcher", "loss", "box_coder_weights", "inference", "hard_example_mining"});
    if (e.model.kind != ModelKind::RetinaNet) {
        if (section) read.fail("detection", "only a RetinaNet has detection settings; this model is a " +
                                                std::string(e.model.kind == ModelKind::UNet ? "U-Net" : "ResNet"));
        return;
    }
    detector.labeler.num_classes = e.model.num_classes;
    if (section) {
        const Json& d = *section;
        if (const Json* anchors = read.optional_object(d, "detection", "anchors", R"({"num_scales": 3, "aspect_ratios": [1, 2, 0.5]})",
                                                       {"num_scales", "aspect_ratios", "anchor_scale"})) {
            const std::string here = "detection.anchors";
            detector.anchors.num_scales = static_cast<int>(read.integer(*anchors, here, "num_scales", 1, 16, 3));
            detector.anchors.anchor_scale = read.number(*anchors, here, "anchor_scale", 0.1, 1000.0, 4.0);
            if (const Json* ratios = read.find(*anchors, "aspect_ratios")) {
                if (!ratios->is_array() || ratios->empty()) {
                    read.fail(here + ".aspect_ratios", "expected a list of widths over heights such as [1, 2, 0.5], got " + shown(*ratios));
                }
                detector.anchors.aspect_ratios.clear();
                for (std::size_t i = 0; i < ratios->size(); ++i) {
                    const Json& ratio = (*ratios)[i];
                    if (!ratio.is_number() || !(ratio.get<double>() > 0 && ratio.get<double>() <= 100)) {
                        read.fail(here + ".aspect_ratios[" + std::to_string(i) + "]", "expected a width / height ratio in (0, 100], got " + shown(ratio));
                    }
                    detector.anchors.aspect_ratios.push_back(ratio.get<double>());
                }
            }
        }
        if (const Json* matcher = read.optional_object(d, "detection", "matcher", R"({"matched_threshold": 0.5, "unmatched_threshold": 0.4})",
                                                       {"kind", "matched_threshold", "unmatched_threshold", "negatives_lower_than_unmatched",
                                                        "force_match_for_each_row"})) {
            const std::string here = "detection.matcher";
            spec.matcher = read.choice(*matcher, here, "kind", {"argmax", "bipartite"}, "argmax") == "argmax" ? MatcherKind::Argmax
                                                                                                            : MatcherKind::Bipartite;
            detection::MatcherOptions& m = detector.labeler.matcher;
            m.matched_threshold = static_cast<float>(read.number(*matcher, here, "matched_threshold", 0.0, 1.0, m.matched_threshold));
            m.unmatched_threshold = static_cast<float>(read.number(*matcher, here, "unmatched_threshold", 0.0, 1.0, m.unmatched_threshold));
            if (m.unmatched_threshold > m.matched_threshold) {
                read.fail(here + ".unmatched_threshold", "expected at most matched_threshold (" + std::to_string(m.matched_threshold) +
                                                             "): anchors between the two are ignored, got " + std::to_string(m.unmatched_threshold));
            }
            m.negatives_lower_than_unmatched = read.boolean(*matcher, here, "negatives_lower_than_unmatched", m.negatives_lower_than_unmatched);
            m.force_match_for_each_row = read.boolean(*matcher, here, "force_match_for_each_row", m.force_match_for_each_row);
        }
        if (const Json* loss = read.optional_object(d, "detection", "loss", R"({"focal_alpha": 0.25, "focal_gamma": 2, "box_loss_weight": 50})",
                                                    {"focal_alpha", "focal_gamma", "huber_delta", "box_loss_weight"})) {
            const std::string here = "detection.loss";
            detector.loss.focal.alpha = read.number(*loss, here, "focal_alpha", 0.0, 1.0, detector.loss.focal.alpha);
            detector.loss.focal.gamma = read.number(*loss, here, "focal_gamma", 0.0, 10.0, detector.loss.focal.gamma);
            detector.loss.box.delta = read.number(*loss, here, "huber_delta", 1e-6, 100.0, detector.loss.box.delta);
            detector.loss.box_loss_weight = read.number(*loss, here, "box_loss_weight", 0.0, 1e6, detector.loss.box_loss_weight);
        }
        if (const Json* weights = read.find(d, "box_coder_weights")) {
            if (!weights->is_array() || weights->size() != 4) {
                read.fail("detection.box_coder_weights", "expected [x, y, width, height] such as [10, 10, 5, 5], got " + shown(*weights));
            }
            std::array<double, 4> values{};
            for (std::size_t i = 0; i < 4; ++i) {
                const Json& w = (*weights)[i];
                if (!w.is_number() || !(w.get<double>() > 0 && w.get<double>() <= 1000)) {
                    read.fail("detection.box_coder_weights[" + std::to_string(i) + "]", "expected a weight in (0, 1000], got " + shown(w));
                }
                values[i] = w.get<double>();
            }
            detector.labeler.box_coder = {values[0], values[1], values[2], values[3]};
        }
        if (const Json* inference = read.optional_object(d, "detection", "inference", R"({"score_threshold": 0.05, "max_detections": 100})",
                                                         {"score_threshold", "top_k_per_level", "nms_iou_threshold", "max_detections"})) {
            const std::string here = "detection.inference";
            detection::PostprocessOptions& p = spec.postprocess;
            p.score_threshold = static_cast<float>(read.number(*inference, here, "score_threshold", 0.0, 1.0, p.score_threshold));
            p.top_k_per_level = static_cast<std::size_t>(
                read.integer(*inference, here, "top_k_per_level", 1, 1000000, static_cast<std::int64_t>(p.top_k_per_level)));
            p.nms_iou_threshold = static_cast<float>(read.number(*inference, here, "nms_iou_threshold", 0.0, 1.0, p.nms_iou_threshold));
            p.max_detections = static_cast<std::size_t>(
                read.integer(*inference, here, "max_detections", 1, 100000, static_cast<std::int64_t>(p.max_detections)));
        }
        spec.hard_example_mining = read.boolean(d, "detection", "hard_example_mining", false);
    }
    spec.postprocess.box_coder_weights = detector.labeler.box_coder;  // inference decodes as the targets were encoded
    const std::int64_t anchors_per_cell =
        static_cast<std::int64_t>(detector.anchors.num_scales) * static_cast<std::int64_t>(detector.anchors.aspect_ratios.size());
    if (anchors_per_cell != e.model.num_anchors) {
        read.fail(section ? "detection.anchors" : "model.num_anchors",
                  "the heads predict model.num_anchors = " + std::to_string(e.model.num_anchors) + " anchors per cell, the anchors are " +
                      std::to_string(detector.anchors.num_scales) + " scales × " + std::to_string(detector.anchors.aspect_ratios.size()) +
                      " aspect ratios = " + std::to_string(anchors_per_cell) + "; make them equal");
    }
}

void parse_training(const Reader& read, const Json& root, Experiment& e) {
    TrainingSpec& t = e.training;
    t.seed = static_cast<std::uint64_t>(read.integer(root, "", "seed", 0, std::numeric_limits<std::int64_t>::max(), 1));
    const bool has_data = read.find(root, "data") != nullptr;
    t.steps = read.integer(root, "", "steps", has_data ? 1 : 0, 100000000, has_data ? std::optional<std::int64_t>() : 0);
    t.steps_per_eval = read.integer(root, "", "steps_per_eval", 0, 100000000, 0);
    t.steps_per_checkpoint = read.integer(root, "", "steps_per_checkpoint", 0, 100000000, 0);
    t.keep_checkpoints = read.integer(root, "", "keep_checkpoints", 1, 1000, 3);
    t.reduction = train::parse_reduction_order(read.choice(root, "", "reduction", {"reproducible", "fast"}, "reproducible"));
    if (const auto model_dir = read.string(root, "", "model_dir")) {
        if (model_dir->empty()) read.fail("model_dir", "expected a folder for checkpoints and metrics, got an empty string");
        t.model_dir = *model_dir;
    }
    if (has_data) e.data = parse_data(read, root, e, t.seed);

    if (const Json* schedule = read.optional_object(
            root, "", "schedule", R"({"kind": "cosine", "learning_rate": 0.01, "warmup_steps": 100})",
            {"kind", "learning_rate", "warmup_steps", "warmup_learning_rate", "hold_steps", "total_steps", "boundaries",
             "scale_by_batch_size", "reference_batch_size"})) {
        train::ScheduleConfig& s = t.schedule;
        const std::string kind = read.choice(*schedule, "schedule", "kind", {"constant", "cosine", "manual"}, "constant");
        s.kind = kind == "constant" ? train::ScheduleKind::Constant
                 : kind == "cosine" ? train::ScheduleKind::CosineDecay : train::ScheduleKind::ManualStep;
        s.learning_rate = read.number(*schedule, "schedule", "learning_rate", 0.0, 100.0, 0.01);
        s.warmup_steps = read.integer(*schedule, "schedule", "warmup_steps", 0, 100000000, 0);
        s.warmup_learning_rate = read.number(*schedule, "schedule", "warmup_learning_rate", 0.0, 100.0, 0.0);
        s.hold_base_rate_steps = read.integer(*schedule, "schedule", "hold_steps", 0, 100000000, 0);
        s.total_steps = read.integer(*schedule, "schedule", "total_steps", 1, 100000000, std::max<std::int64_t>(t.steps, 1));
        s.scale_by_batch_size = read.boolean(*schedule, "schedule", "scale_by_batch_size", false);
        s.reference_batch_size = read.integer(*schedule, "schedule", "reference_batch_size", 1, 1 << 24, 256);
        s.global_batch_size = e.global_batch;
        if (const Json* boundaries = read.find(*schedule, "boundaries")) {
            if (kind != "manual") read.fail("schedule.boundaries", "only a \"manual\" schedule has boundaries; this one is " + in_quotes(kind));
            if (!boundaries->is_array()) read.fail("schedule.boundaries", "expected a list such as [{\"step\": 1000, \"learning_rate\": 0.001}], got " + type_name(*boundaries));
            for (std::size_t i = 0; i < boundaries->size(); ++i) {
                const std::string here = "schedule.boundaries[" + std::to_string(i) + "]";
                const Json& boundary = (*boundaries)[i];
                if (!boundary.is_object()) read.fail(here, "expected {\"step\": …, \"learning_rate\": …}, got " + type_name(boundary));
                read.check_fields(boundary, here, {"step", "learning_rate"});
                s.steps.push_back({read.integer(boundary, here, "step", 1, 100000000, std::nullopt),
                                   read.number(boundary, here, "learning_rate", 0.0, 100.0, 0.0)});
            }
        }
        try {
            train::validate(s);
        } catch (const Error& error) {
            read.fail("schedule", error.what());
        }
    } else {
        t.schedule.kind = train::ScheduleKind::Constant;
        t.schedule.learning_rate = 0.01;
    }

    if (const Json* loss = read.find(root, "loss")) {
        if (e.model.kind != ModelKind::UNet) read.fail("loss", "only segmentation models choose a loss; a classifier trains with cross-entropy");
        const std::string kind = read.choice(root, "", "loss", {"cross_entropy", "dice", "cross_entropy_dice"}, std::nullopt);
        t.loss = kind == "cross_entropy" ? train::LossKind::SoftmaxCrossEntropy
                 : kind == "dice" ? train::LossKind::SoftDice : train::LossKind::CrossEntropyAndDice;
        (void)loss;
    }
    // Half precision needs loss scaling (tiny gradients flush to zero); the U-Net seed's "dynamic" is the default.
    t.loss_scale.kind = e.precision == graph::Precision::F16 ? train::LossScaleKind::Dynamic : train::LossScaleKind::None;
    if (const Json* scale = read.find(root, "loss_scale")) {
        if (scale->is_number()) {
            const double value = scale->get<double>();
            if (!(value >= 1 && value <= 16777216.0)) read.fail("loss_scale", "expected a static scale from 1 to 2^24, \"dynamic\" or \"none\", got " + shown(*scale));
            t.loss_scale.kind = train::LossScaleKind::Static;
            t.loss_scale.static_scale = value;
        } else {
            const std::string kind = read.choice(root, "", "loss_scale", {"dynamic", "none"}, std::nullopt);
            t.loss_scale.kind = kind == "dynamic" ? train::LossScaleKind::Dynamic : train::LossScaleKind::None;
        }
    }
    if (const Json* evaluation = read.optional_object(root, "", "evaluation", R"({"overlap": 0.25, "blend": "gaussian"})",
                                                      {"overlap", "blend", "max_examples", "exclude_background"})) {
        t.eval_overlap = read.number(*evaluation, "evaluation", "overlap", 0.0, 0.95, 0.25);
        const std::string blend = read.choice(*evaluation, "evaluation", "blend", {"gaussian", "constant"}, "gaussian");
        t.eval_blend = blend == "gaussian" ? data::BlendMode::Gaussian : data::BlendMode::Constant;
        t.max_eval_examples = read.integer(*evaluation, "evaluation", "max_examples", 0, 100000, 0);
        t.dice_excludes_background = read.boolean(*evaluation, "evaluation", "exclude_background", false);
    }
    if (!has_data) {
        for (std::string_view key : {"steps", "steps_per_eval", "steps_per_checkpoint", "model_dir", "evaluation"}) {
            if (read.find(root, key) && !(key == "steps" && t.steps == 0)) {
                read.fail(key, "this experiment has no \"data\" section, so it cannot train: add one (e.g. \"data\": {\"source\": "
                               "\"synthetic_em\"}) or remove " + in_quotes(key) + " to keep the experiment plan-only");
            }
        }
    }
    if (t.steps_per_eval > t.steps) {
        read.fail("steps_per_eval", "expected at most steps (" + std::to_string(t.steps) + "), got " + std::to_string(t.steps_per_eval));
    }
}

// The model: its kind and that kind's fields.
void parse_model(const Reader& read, const Json& root, Experiment& e) {
    const Json& model = read.object(root, "", "model", R"({"kind": "unet", "depth": 4, "base_width": 32, "num_classes": 2})");
    const std::string kind = read.choice(model, "model", "kind", {"unet", "resnet", "retinanet"}, std::nullopt);
    if (kind == "unet") {
        read.check_fields(model, "model",
                          {"kind", "depth", "base_width", "num_classes", "batch_norm", "max_width", "downsampling", "head_kernel"});
        e.model.kind = ModelKind::UNet;
        e.model.depth = static_cast<int>(read.integer(model, "model", "depth", 2, 7, 4));
        e.model.base_width = read.integer(model, "model", "base_width", 1, 1024, 32);
        e.model.num_classes = read.integer(model, "model", "num_classes", 2, 1000, 2);
        e.model.batch_norm = read.boolean(model, "model", "batch_norm", true);
        e.model.max_width = read.integer(model, "model", "max_width", 0, 4096, 0);
        e.model.strided_downsampling =
            read.choice(model, "model", "downsampling", {"max_pool", "strided_conv"}, "max_pool") == "strided_conv";
        e.model.head_kernel = read.integer(model, "model", "head_kernel", 1, 3, 1);
        if (e.model.head_kernel == 2) read.fail("model.head_kernel", "expected 1 or 3 (an odd kernel keeps the extent), got 2");
    } else if (kind == "resnet") {
        read.check_fields(model, "model", {"kind", "depth", "base_width", "num_classes", "groups", "width_per_group"});
        e.model.kind = ModelKind::ResNet;
        e.model.depth = static_cast<int>(read.integer(model, "model", "depth", 18, 200, 50));
        e.model.base_width = read.integer(model, "model", "base_width", 1, 1024, 64);
        e.model.num_classes = read.integer(model, "model", "num_classes", 2, 100000, 1000);
        e.model.groups = read.integer(model, "model", "groups", 1, 1024, 1);
        e.model.width_per_group = read.integer(model, "model", "width_per_group", 0, 1024, 0);
    } else {
        read.check_fields(model, "model",
                          {"kind", "depth", "num_classes", "fpn_channels", "num_anchors", "fpn_batch_norm", "head_batch_norm",
                           "groups", "width_per_group", "coarse_levels"});
        e.model.kind = ModelKind::RetinaNet;
        e.model.round_up_coarse_levels = read.choice(model, "model", "coarse_levels", {"exact", "round_up"}, "exact") == "round_up";
        e.model.groups = read.integer(model, "model", "groups", 1, 1024, 1);
        e.model.width_per_group = read.integer(model, "model", "width_per_group", 0, 1024, 0);
        e.model.depth = static_cast<int>(read.integer(model, "model", "depth", 18, 200, 50));
        e.model.num_classes = read.integer(model, "model", "num_classes", 1, 100000, 90);
        e.model.fpn_channels = read.integer(model, "model", "fpn_channels", 1, 4096, 256);
        e.model.num_anchors = read.integer(model, "model", "num_anchors", 1, 100, 9);
        e.model.fpn_batch_norm = read.boolean(model, "model", "fpn_batch_norm", true);
        e.model.head_batch_norm = read.boolean(model, "model", "head_batch_norm", true);
    }
}

// The per-sample input: channels and spatial extents ([H, W], or [D, H, W] for a U-Net).
void parse_input(const Reader& read, const Json& root, Experiment& e) {
    const Json& input = read.object(root, "", "input", R"({"channels": 1, "size": [256, 256, 256]})");
    read.check_fields(input, "input", {"channels", "size"});
    e.channels = read.integer(input, "input", "channels", 1, 4096, 1);
    const Json* size = read.find(input, "size");
    if (!size) read.fail("input.size", "missing; expected the spatial extents, [H, W] or [D, H, W], e.g. [512, 512]");
    const bool volumes_allowed = e.model.kind == ModelKind::UNet;
    if (!size->is_array() || size->size() < 2 || size->size() > (volumes_allowed ? 3u : 2u)) {
        read.fail("input.size", std::string("expected ") + (volumes_allowed ? "[H, W] or [D, H, W]" : "[H, W] (this model is 2D)") +
                                    " as positive integers, got " + shown(*size));
    }
    for (std::size_t axis = 0; axis < size->size(); ++axis) {
        const Json& extent = (*size)[axis];
        if (!extent.is_number_integer() || extent.get<std::int64_t>() < 1) {
            read.fail("input.size[" + std::to_string(axis) + "]", "expected a positive integer, got " + type_name(extent));
        }
        e.size.push_back(extent.get<std::int64_t>());
    }
}

// Cores and batch: replicas, cores per replica and the partition dims, checked against the pipeline's
// tensors (with explicit tile boundaries, on extents every piece count divides).
void parse_partition(const Reader& read, const Json& root, Experiment& e) {
    e.global_batch = read.integer(root, "", "global_batch", 1, 1 << 20, std::nullopt);
    e.partition.num_cores_per_replica = read.integer(root, "", "num_cores_per_replica", 1, 1 << 16, 1);
    e.partition.num_replicas = read.integer(root, "", "num_replicas", 1, 1 << 16, 1);
    if (e.global_batch % e.partition.num_replicas != 0) {
        std::ostringstream message;
        message << "expected a multiple of num_replicas (" << e.partition.num_replicas << ") so every replica gets the same batch, got "
                << e.global_batch << "; use " << (e.global_batch / e.partition.num_replicas + 1) * e.partition.num_replicas;
        read.fail("global_batch", message.str());
    }
    const std::string host_input = read.choice(root, "", "per_host_input_for_training",
                                               {"PER_HOST_V2", "PER_HOST_V1", "PER_SHARD_V1", "BROADCAST"}, "PER_HOST_V2");
    e.partition.per_host_input_v2 = host_input == "PER_HOST_V2";
    e.per_host_input = host_input;
    if (const Json* dims = read.find(root, "input_partition_dims")) {
        if (!dims->is_array() || dims->empty() || dims->size() > 2) {
            read.fail("input_partition_dims", "expected [features_dims, labels_dims] as in TPUConfig, e.g. [[1, 4, 1, 1], null], got " + shown(*dims));
        }
        try {
            const auto [features, labels] = partition::parse_input_partition_dims(partition_text(*dims));
            e.partition.features = features;
            e.partition.labels = labels;
        } catch (const Error& error) {
            read.fail("input_partition_dims", error.what());
        }
    }
    // The pipeline's tensors, channels last as TPUConfig sees them.
    const std::int64_t replica_batch = e.global_batch / e.partition.num_replicas;
    Shape features{replica_batch};  // [N, (D,) H, W, C]
    features.insert(features.end(), e.size.begin(), e.size.end());
    features.push_back(e.channels);
    Shape labels{replica_batch};    // [N, (D,) H, W] for a U-Net, [N] for a classifier
    if (e.model.kind == ModelKind::UNet) labels.insert(labels.end(), e.size.begin(), e.size.end());
    try {
        partition::validate(e.partition, partition::InputSignature::tensor(features), partition::InputSignature::tensor(labels));
    } catch (const Error& error) {
        if (!read.find(root, "tile_boundaries")) read.fail("input_partition_dims", error.what());
        // Explicit tile boundaries allow extents the pieces do not divide: check every other rule on
        // extents that every piece count divides (the product of the dims, num_cores_per_replica).
        for (Shape* shape : {&features, &labels}) {
            for (std::size_t axis = 1; axis < shape->size() && axis <= e.size.size(); ++axis) (*shape)[axis] *= e.partition.num_cores_per_replica;
        }
        try {
            partition::validate(e.partition, partition::InputSignature::tensor(features), partition::InputSignature::tensor(labels));
        } catch (const Error& other) {
            read.fail("input_partition_dims", other.what());
        }
    }
}

// The device preset the plan is for, the precision and the optimizer.
void parse_device_and_optimizer(const Reader& read, const Json& root, Experiment& e) {
    const std::vector<std::string> presets = cost::device_preset_ids();
    std::vector<std::string_view> preset_views(presets.begin(), presets.end());
    e.device = read.choice(root, "", "device", preset_views, "tpu_v3");
    const std::string precision = read.choice(root, "", "precision", {"f32", "bf16", "f16"}, "f32");
    e.precision = precision == "bf16" ? graph::Precision::BF16 : precision == "f16" ? graph::Precision::F16 : graph::Precision::F32;
    if (const Json* optimizer = read.find(root, "optimizer")) {
        if (!optimizer->is_object()) read.fail("optimizer", "expected an object such as {\"kind\": \"sgd\", \"momentum\": 0.9}, got " + type_name(*optimizer));
        read.check_fields(*optimizer, "optimizer", {"kind", "momentum", "nesterov", "beta1", "beta2", "epsilon", "weight_decay"});
        const std::string optimizer_kind = read.choice(*optimizer, "optimizer", "kind", {"sgd", "adam", "adamw"}, "sgd");
        e.optimizer.kind = optimizer_kind == "adam" ? train::OptimizerKind::Adam
                          : optimizer_kind == "adamw" ? train::OptimizerKind::AdamW : train::OptimizerKind::Sgd;
        e.optimizer.momentum = read.number(*optimizer, "optimizer", "momentum", 0.0, 0.999999, 0.9);
        e.optimizer.nesterov = read.boolean(*optimizer, "optimizer", "nesterov", false);
        e.optimizer.beta1 = read.number(*optimizer, "optimizer", "beta1", 0.0, 0.999999, 0.9);
        e.optimizer.beta2 = read.number(*optimizer, "optimizer", "beta2", 0.0, 0.999999, 0.999);
        e.optimizer.epsilon = read.number(*optimizer, "optimizer", "epsilon", 1e-12, 1.0, 1e-8);
        e.optimizer.weight_decay = read.number(*optimizer, "optimizer", "weight_decay", 0.0, 1.0, 0.0);
        try {
            train::validate(e.optimizer);
        } catch (const Error& error) {
            read.fail("optimizer", error.what());
        }
    }
}

}  // namespace

std::string_view precision_name(graph::Precision precision) {
    switch (precision) {
        case graph::Precision::F32: return "f32";
        case graph::Precision::BF16: return "bf16";
        case graph::Precision::F16: return "f16";
    }
    return "?";
}

Experiment parse_experiment(const std::string& json_text, const std::string& origin) {
    const Reader read(origin);
    const Json root = parse_json_strictly(json_text, origin);
    if (!root.is_object()) TESSERA_REJECT(origin << ": expected a JSON object with the experiment's fields, got " << type_name(root));
    read.check_fields(root, "", {"version", "name", "notes", "model", "input", "global_batch", "num_cores_per_replica",
                                 "num_replicas", "input_partition_dims", "tile_boundaries", "per_host_input_for_training", "device",
                                 "precision", "optimizer", "data", "steps", "steps_per_eval", "steps_per_checkpoint",
                                 "keep_checkpoints", "reduction", "model_dir", "seed", "schedule", "loss", "loss_scale", "evaluation", "detection"});
    Experiment e;
    e.origin = origin;
    e.text = json_text;
    e.version = static_cast<int>(read.integer(root, "", "version", 1, 1, std::nullopt));
    if (const Json* name = read.find(root, "name")) {
        if (!name->is_string()) read.fail("name", "expected a string, got " + type_name(*name));
        e.name = name->get<std::string>();
    }

    parse_model(read, root, e);
    parse_input(read, root, e);
    parse_partition(read, root, e);
    parse_device_and_optimizer(read, root, e);
    parse_detection(read, root, e);
    parse_training(read, root, e);
    // The model must build for this input (a U-Net needs extents divisible by 2^(depth−1), …).
    std::optional<graph::Graph> model_graph;
    try {
        model_graph.emplace(build_model(e, replica_input_shape(e)));
    } catch (const Error& error) {
        read.fail("input.size", error.what());
    }
    if (const Json* boundaries = read.find(root, "tile_boundaries")) e.grid = parse_tile_boundaries(read, *boundaries, e, *model_graph);
    return e;
}

std::int64_t optimizer_slots(const Experiment& e) {
    return e.optimizer.kind == train::OptimizerKind::Sgd ? (e.optimizer.momentum > 0 ? 1 : 0) : 2;
}

Experiment load_experiment(const std::filesystem::path& path) {
    // A folder or a FIFO is refused by name (opening a FIFO would block).
    Experiment e = parse_experiment(read_user_text_file(path, "experiment file"), path.filename().string());
    place_in_directory(e, path.has_parent_path() ? path.parent_path() : std::filesystem::path("."));
    return e;
}

void place_in_directory(Experiment& e, const std::filesystem::path& directory) {
    e.directory = directory;
    if (!e.data) return;
    for (std::filesystem::path* folder : {&e.data->images_dir, &e.data->labels_dir, &e.data->annotations_file,
                                          &e.data->eval_annotations_file, &e.data->eval_images_dir, &e.data->records,
                                          &e.data->eval_records, &e.data->image_file, &e.data->label_file}) {
        if (!folder->empty() && folder->is_relative()) *folder = directory / *folder;
    }
}

Shape global_input_shape(const Experiment& e) {
    Shape shape{e.global_batch, e.channels};
    shape.insert(shape.end(), e.size.begin(), e.size.end());
    return shape;
}

Shape replica_input_shape(const Experiment& e) {
    Shape shape = global_input_shape(e);
    shape[0] /= e.partition.num_replicas;
    return shape;
}

graph::Graph build_model(const Experiment& e, const Shape& input) {
    switch (e.model.kind) {
        case ModelKind::UNet:
            return networks::make_unet(
                {.depth = e.model.depth, .base_width = e.model.base_width, .num_classes = e.model.num_classes,
                 .batch_norm = e.model.batch_norm, .max_width = e.model.max_width,
                 .downsampling = e.model.strided_downsampling ? networks::UNetConfig::Downsampling::StridedConv
                                                              : networks::UNetConfig::Downsampling::MaxPool,
                 .head_kernel = e.model.head_kernel},
                input);
        case ModelKind::ResNet:
            return networks::make_resnet({.depth = e.model.depth, .num_classes = e.model.num_classes, .base_width = e.model.base_width,
                                          .groups = e.model.groups, .width_per_group = e.model.width_per_group},
                                         input);
        case ModelKind::RetinaNet: {
            networks::RetinaNetConfig config;
            config.resnet_depth = e.model.depth;
            config.resnet_groups = e.model.groups;
            config.resnet_width_per_group = e.model.width_per_group;
            config.num_classes = e.model.num_classes;
            config.fpn_channels = e.model.fpn_channels;
            config.num_anchors = e.model.num_anchors;
            config.fpn_batch_norm = e.model.fpn_batch_norm;
            config.head_batch_norm = e.model.head_batch_norm;
            config.round_up_coarse_levels = e.model.round_up_coarse_levels;
            return networks::make_retinanet(config, input);
        }
    }
    TESSERA_FAIL("unknown model kind");
}

train::TrainerConfig trainer_config(const Experiment& e) {
    train::TrainerConfig config;
    config.optimizer = e.optimizer;
    config.schedule = e.training.schedule;
    config.loss = e.training.loss;
    config.dice_excludes_background = e.training.dice_excludes_background;
    config.precision = e.precision;
    config.loss_scale = e.training.loss_scale;
    config.seed = e.training.seed;
    if (e.model.kind == ModelKind::RetinaNet) config.detection = e.detection.detector;
    return config;
}

void check_trainable(const Experiment& e) {
    const std::string example_source = e.model.kind == ModelKind::RetinaNet ? "synthetic_shapes"
                                       : e.model.kind == ModelKind::ResNet  ? "fake_images"
                                                                            : "synthetic_em";
    TESSERA_CHECK(e.data.has_value(), e.origin << ": this experiment has no \"data\" section, so it is plan-only; add one, e.g. "
                                                  "\"data\": {\"source\": \"" << example_source << "\"}, with \"steps\" to train it");
    TESSERA_CHECK(e.detection.matcher == MatcherKind::Argmax,
                  e.origin << ": detection.matcher.kind is \"bipartite\": Tessera trains the TPU pipeline, whose argmax matcher "
                              "keeps shapes static (a bipartite matcher's Hungarian assignment does not); set it to \"argmax\"");
    TESSERA_CHECK(!e.detection.hard_example_mining,
                  e.origin << ": detection.hard_example_mining is on: Tessera trains the TPU pipeline, where the focal loss "
                              "replaces hard-example mining (which sorts losses and gathers a dynamic subset); remove it");
}

std::vector<std::int64_t> spatial_pieces(const Experiment& e) {
    std::vector<std::int64_t> pieces(e.size.size(), 1);
    if (e.partition.features.is_dict() || e.partition.features.single().is_none()) return pieces;
    const auto& dims = *e.partition.features.single().dims;  // [N, spatial…, C]
    for (std::size_t axis = 0; axis < pieces.size() && axis + 1 < dims.size(); ++axis) pieces[axis] = dims[axis + 1];
    return pieces;
}

partition::SpatialGrid tile_grid(const Experiment& e) {
    if (e.grid) return *e.grid;
    return partition::SpatialGrid::even(replica_input_shape(e), spatial_pieces(e));
}

bool is_even_split(const partition::SpatialGrid& grid, const std::vector<std::int64_t>& size) {
    if (grid.boundaries.size() != size.size()) return false;
    for (std::size_t axis = 0; axis < size.size(); ++axis) {
        const auto& cuts = grid.boundaries[axis];
        const auto pieces = static_cast<std::int64_t>(cuts.size()) - 1;
        if (pieces < 1 || size[axis] % pieces != 0) return false;
        for (std::int64_t i = 0; i <= pieces; ++i) {
            if (cuts[static_cast<std::size_t>(i)] != size[axis] / pieces * i) return false;
        }
    }
    return true;
}

std::string tile_boundaries_text(const partition::SpatialGrid& grid) {
    std::string text = "[";
    for (std::size_t axis = 0; axis < grid.boundaries.size(); ++axis) text.append(axis ? ", " : "").append(cuts_text(grid.boundaries[axis]));
    return text.append("]");
}

}  // namespace tessera::experiment
