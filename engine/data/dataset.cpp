#include "data/dataset.hpp"

#include "data/sources.hpp"
#include "data/volume_dataset.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>
#include <limits>
#include <cstring>

namespace tessera::data {

LabelRule LabelRule::range(std::int32_t low, std::int32_t high, std::int32_t class_index, std::string key) {
    LabelRule rule(low, class_index);
    rule.high = high;
    rule.key = std::move(key);
    return rule;
}

std::string LabelRule::text() const {
    if (!key.empty()) return key;
    return low == high ? std::to_string(low) : std::to_string(low) + "-" + std::to_string(high);
}

std::optional<LabelRule> parse_label_rule_key(const std::string& key, std::int32_t class_index) {
    constexpr long long lowest = std::numeric_limits<std::int32_t>::min(), highest = std::numeric_limits<std::int32_t>::max();
    // A whole number filling `text` in int32's range.
    auto number = [&](const std::string& text) -> std::optional<long long> {
        if (text.empty() || text.find_first_not_of("-0123456789") != std::string::npos) return std::nullopt;
        std::size_t used = 0;
        long long value = 0;
        try {
            value = std::stoll(text, &used);
        } catch (const std::exception&) {
            return std::nullopt;
        }
        if (used != text.size() || value < lowest || value > highest) return std::nullopt;
        return value;
    };
    auto rule = [&](long long low, long long high) -> std::optional<LabelRule> {
        if (low < lowest || high > highest || low > high) return std::nullopt;
        return LabelRule::range(static_cast<std::int32_t>(low), static_cast<std::int32_t>(high), class_index, key);
    };
    if (const auto single = number(key)) return rule(*single, *single);
    for (const auto& [prefix, low_offset, high_offset, above] :
         {std::tuple{">=", 0, 0, true}, std::tuple{"<=", 0, 0, false}, std::tuple{">", 1, 0, true}, std::tuple{"<", 0, -1, false}}) {
        if (key.rfind(prefix, 0) != 0) continue;
        const auto bound = number(key.substr(std::strlen(prefix)));
        if (!bound) return std::nullopt;
        return above ? rule(*bound + low_offset, highest) : rule(lowest, *bound + high_offset);
    }
    // A range low-high: the separating dash is the first one after the first character (low may be negative).
    const std::size_t dash = key.find('-', 1);
    if (dash == std::string::npos) return std::nullopt;
    const auto low = number(key.substr(0, dash)), high = number(key.substr(dash + 1));
    if (!low || !high) return std::nullopt;
    return rule(*low, *high);
}

std::string_view source_kind_name(SourceKind kind) {
    switch (kind) {
        case SourceKind::SyntheticEm: return "SyntheticEm";
        case SourceKind::SyntheticCt: return "SyntheticCt";
        case SourceKind::FakeImages: return "FakeImages";
        case SourceKind::Folder: return "Folder";
        case SourceKind::ExampleMri: return "ExampleMri";
        case SourceKind::SyntheticShapes: return "SyntheticShapes";
        case SourceKind::Coco: return "Coco";
        case SourceKind::TFRecord: return "TFRecord";
        case SourceKind::Volume: return "Volume";
    }
    return "?";
}

bool is_detection_source(SourceKind kind) {
    return kind == SourceKind::SyntheticShapes || kind == SourceKind::Coco;
}

std::string_view static_shape_name(StaticShape shape) {
    switch (shape) {
        case StaticShape::Crop: return "Crop";
        case StaticShape::Resize: return "Resize";
        case StaticShape::PadToMax: return "PadToMax";
    }
    return "?";
}

std::string_view normalization_name(Normalization normalization) {
    switch (normalization) {
        case Normalization::None: return "None";
        case Normalization::ZScore: return "ZScore";
        case Normalization::Window: return "Window";
    }
    return "?";
}

void validate(const DataConfig& config) {
    TESSERA_CHECK(source_kind_name(config.source) != "?",
                  "data.source " << static_cast<int>(config.source)
                                 << " is not a source: use SyntheticEm, SyntheticCt, FakeImages, Folder, ExampleMri, "
                                    "SyntheticShapes, Coco, TFRecord or Volume");
    TESSERA_CHECK(static_shape_name(config.static_shape) != "?",
                  "data.static_shape " << static_cast<int>(config.static_shape) << " is not one: use Crop, Resize or PadToMax");
    TESSERA_CHECK(normalization_name(config.normalization) != "?",
                  "data.normalization " << static_cast<int>(config.normalization)
                                        << " is not one: use None, ZScore or Window");
    TESSERA_CHECK(config.image_size.empty() || config.image_size.size() == 2 || config.image_size.size() == 3,
                  "data.image_size must be empty, [H, W] or [D, H, W], got " << shape_to_string(config.image_size));
    for (std::int64_t extent : config.image_size) {
        TESSERA_CHECK(extent >= 1, "data.image_size must hold positive extents, got " << shape_to_string(config.image_size));
    }
    TESSERA_CHECK(config.num_train_images >= 1,
                  "data.num_train_images must be at least 1, got " << config.num_train_images);
    TESSERA_CHECK(config.num_eval_images >= 0, "data.num_eval_images must be ≥ 0, got " << config.num_eval_images);
    TESSERA_CHECK(std::isfinite(config.noise), "data.noise must be a number (< 0 for the source's default), got " << config.noise);
    TESSERA_CHECK(config.source != SourceKind::Folder || !config.images_dir.empty(),
                  "data.images is empty: the folder source needs the folder holding the training images");
    const auto& rules = config.label_mapping;
    for (std::size_t a = 0; a < rules.size(); ++a) {
        TESSERA_CHECK(rules[a].low <= rules[a].high, "data.label_mapping's range '" << rules[a].text() << "' is empty: write it low-high");
        TESSERA_CHECK(rules[a].to >= 0, "data.label_mapping maps label " << rules[a].text() << " to class " << rules[a].to
                                                                          << ": classes are ≥ 0");
        for (std::size_t b = 0; b < a; ++b) {
            if (rules[a].high < rules[b].low || rules[b].high < rules[a].low) continue;
            const std::int32_t shared = std::max(rules[a].low, rules[b].low);
            if (rules[a].low == rules[a].high && rules[b].low == rules[b].high) {
                TESSERA_REJECT("data.label_mapping lists label " << shared << " twice: give each file label one class");
            }
            TESSERA_REJECT("data.label_mapping's '" << rules[b].text() << "' and '" << rules[a].text() << "' both cover label " << shared
                                                    << ": give each file label one class (narrow a range, e.g. '1-3' and '5-255' around 4)");
        }
    }
    if (config.normalization == Normalization::Window) {
        TESSERA_CHECK(std::isfinite(config.window_low) && std::isfinite(config.window_high) &&
                          config.window_high > config.window_low,
                      "data.window_high must be above data.window_low, got [" << config.window_low << ", "
                                                                              << config.window_high << "]");
    }
    TESSERA_CHECK(config.foreground_fraction >= 0 && config.foreground_fraction <= 1,
                  "data.foreground_fraction must be in [0, 1], got " << config.foreground_fraction);
    std::set<int> flipped;
    for (int axis : config.augment.flip_axes) {
        TESSERA_CHECK(axis >= 0 && axis <= 2, "data.augment.flip_axes holds " << axis
                                                                              << ": spatial axes are 0, 1 (2D) or 0, 1, 2 (3D)");
        TESSERA_CHECK(flipped.insert(axis).second, "data.augment.flip_axes lists axis " << axis << " twice");
    }
    TESSERA_CHECK(config.augment.intensity_scale >= 0 && config.augment.intensity_scale < 1,
                  "data.augment.intensity_scale must be in [0, 1), got " << config.augment.intensity_scale);
    TESSERA_CHECK(config.augment.intensity_shift >= 0 && std::isfinite(config.augment.intensity_shift),
                  "data.augment.intensity_shift must be ≥ 0, got " << config.augment.intensity_shift);
    TESSERA_CHECK(config.holdout_fraction >= 0 && config.holdout_fraction < 1,
                  "data.holdout_fraction must be in [0, 1), got " << config.holdout_fraction);
    TESSERA_CHECK(config.max_number_of_boxes >= 1 && config.max_number_of_boxes <= 10000,
                  "data.max_number_of_boxes must be in 1..10000, got " << config.max_number_of_boxes);
    const auto [min_objects, max_objects] = config.object_count;
    TESSERA_CHECK((min_objects == -1 && max_objects == -1) || (min_objects >= 0 && max_objects >= min_objects),
                  "data.objects must be [min, max] with 0 ≤ min ≤ max (or absent: automatic), got [" << min_objects << ", "
                                                                                                   << max_objects << "]");
    const auto [min_size, max_size] = config.object_size;
    TESSERA_CHECK(min_size >= 4 && max_size >= min_size && std::isfinite(max_size),
                  "data.object_size must be [min, max] pixels with 4 ≤ min ≤ max, got [" << min_size << ", " << max_size << "]");
    const auto [min_scale, max_scale] = config.scale_jitter;
    TESSERA_CHECK(
        min_scale > 0 && max_scale >= min_scale && max_scale <= 10,
        "data.scale_jitter must be [min, max] with 0 < min ≤ max ≤ 10 (e.g. [0.8, 1.2]; [1, 1] for none), got ["
            << min_scale << ", " << max_scale << "]");
    if (config.source == SourceKind::TFRecord) {
        TESSERA_CHECK(!config.records.empty(),
                      "data.records is empty: a TFRecord source needs its shards, e.g. \"imagenet/train-*-of-01024\"");
    } else {
        TESSERA_CHECK(config.records.empty() && config.eval_records.empty() && config.first_label == 1,
                      "data.records, eval_records and first_label are for a TFRecord source; this source is "
                          << source_kind_name(config.source) << ": remove them");
    }
    if (config.source == SourceKind::Volume) {
        TESSERA_CHECK(!config.image_file.empty() && !config.label_file.empty(),
                      "data.image and data.labels name the volume and its label map for a Volume source, e.g. "
                      "\"sample_A.h5:/volumes/raw\" and \"sample_A.h5:/volumes/labels/clefts\"");
    } else {
        TESSERA_CHECK(config.image_file.empty() && config.label_file.empty() && config.read_by_region == RegionReading::Auto,
                      "data.image and read_by_region are for a Volume source; this source is " << source_kind_name(config.source)
                                                                                                 << ": remove them");
    }
    if (config.source == SourceKind::Coco) {
        TESSERA_CHECK(!config.annotations_file.empty(),
                      "data.annotations is empty: a COCO source needs its instances.json, e.g. "
                      "\"annotations/instances_train2017.json\"");
        TESSERA_CHECK(!config.images_dir.empty(),
                      "data.images is empty: a COCO source needs the folder its annotations' file_name entries are in, "
                      "e.g. \"train2017\"");
        TESSERA_CHECK(
            config.static_shape != StaticShape::Crop,
            "data.static_shape \"crop\" cuts patches, which would cut boxes: a COCO source brings each whole image to "
            "the input, use \"resize\" (fixed shape) or \"pad_to_max\" (aspect ratio kept, padded at the bottom right)");
        TESSERA_CHECK(
            !config.eval_annotations_file.empty() || config.eval_images_dir.empty(),
            "data.eval_images is set without data.eval_annotations: give the held-out images' instances.json too, or "
            "remove data.eval_images (holdout_fraction then holds out the last images)");
    } else {
        TESSERA_CHECK(
            config.annotations_file.empty() && config.eval_annotations_file.empty() && config.eval_images_dir.empty() &&
                config.category_ids.empty() && config.category_names.empty(),
            "data.annotations, eval_annotations, eval_images and categories are for a COCO source; this source is "
                << source_kind_name(config.source) << ": remove them");
        TESSERA_CHECK(config.scale_jitter == (std::array<double, 2>{1, 1}),
                      "data.scale_jitter is for a COCO source; this source is " << source_kind_name(config.source)
                                                                                << ": remove it");
    }
}

std::unique_ptr<Dataset> make_dataset(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes) {
    validate(config);
    TESSERA_CHECK(batch_shape.size() == 4 || batch_shape.size() == 5,
                  "the model input must be [N, C, H, W] or [N, C, D, H, W], got " << shape_to_string(batch_shape));
    for (std::int64_t extent : batch_shape) {
        TESSERA_CHECK(extent >= 1, "the model input must have positive extents, got " << shape_to_string(batch_shape));
    }
    TESSERA_CHECK(num_classes >= 1, "the model must have at least one class, got " << num_classes);
    const int spatial_rank = static_cast<int>(batch_shape.size()) - 2;
    for (int axis : config.augment.flip_axes) {
        TESSERA_CHECK(axis < spatial_rank, "data.augment.flip_axes holds axis "
                                               << axis << " but the model input " << shape_to_string(batch_shape)
                                               << " has " << spatial_rank << " spatial axes (0 to " << spatial_rank - 1 << ")");
    }
    detail::VolumePlan plan;
    switch (config.source) {
        case SourceKind::FakeImages: return detail::make_fake_images(config, batch_shape, num_classes);
        case SourceKind::SyntheticShapes: return detail::make_synthetic_shapes(config, batch_shape, num_classes);
        case SourceKind::Coco: return detail::make_coco(config, batch_shape, num_classes);
        case SourceKind::TFRecord: return detail::make_tfrecord_images(config, batch_shape, num_classes);
        case SourceKind::SyntheticEm: plan = detail::synthetic_em_plan(config, batch_shape, num_classes); break;
        case SourceKind::SyntheticCt: plan = detail::synthetic_ct_plan(config, batch_shape, num_classes); break;
        case SourceKind::Folder: plan = detail::folder_plan(config, batch_shape, num_classes); break;
        case SourceKind::ExampleMri: plan = detail::example_mri_plan(config, batch_shape, num_classes); break;
        case SourceKind::Volume: plan = detail::volume_plan(config, batch_shape, num_classes); break;
    }
    return std::make_unique<detail::VolumeDataset>(config, batch_shape, num_classes, std::move(plan));
}

Volume example_grey_volume(const Example& example) {
    const Shape& shape = example.image.shape();  // [C, H, W]
    TESSERA_CHECK(shape.size() == 3, "a grey volume is made of a 2D example's image [C, H, W], got " << shape_to_string(shape));
    TESSERA_CHECK(example.geometry.size[0] == shape[2] && example.geometry.size[1] == shape[1] && example.geometry.size[2] == 1,
                  "example '" << example.name << "': its geometry (" << describe(example.geometry) << ") is not its image's "
                              << shape[2] << "×" << shape[1]);
    Volume volume = make_volume(example.geometry);
    const std::int64_t channels = shape[0], pixels = shape[1] * shape[2];
    const float* image = example.image.data<float>();
    float* grey = volume.voxels.data<float>();
    for (std::int64_t p = 0; p < pixels; ++p) {
        float sum = 0;
        for (std::int64_t c = 0; c < channels; ++c) sum += image[c * pixels + p];
        grey[p] = sum / static_cast<float>(channels);
    }
    volume.source_scalar_type = "float32";
    volume.source_path = example.name;
    return volume;
}

}  // namespace tessera::data
