#include "data/volume_dataset.hpp"

#include "data/region_volume.hpp"
#include "data/transforms.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

namespace tessera::data::detail {

// ---- helpers ----------------------------------------------------------------------------------

std::uint64_t derived_seed(std::uint64_t seed, SeedPurpose purpose, std::uint64_t index) {
    SeededRandom family(seed, static_cast<std::uint64_t>(purpose));
    SeededRandom member(family.next(), index);
    return member.next();
}

std::int64_t uniform_index(SeededRandom& random, std::int64_t count) {
    return std::min(count - 1, static_cast<std::int64_t>(random.uniform() * static_cast<double>(count)));
}

std::string extents_text(std::span<const std::int64_t> spatial) {
    std::string text;
    for (std::size_t axis = spatial.size(); axis-- > 0;) {
        text += std::to_string(spatial[axis]) + (axis == 0 ? "" : "×");
    }
    return text;
}

LoadedVolume slab(const LoadedVolume& volume, int axis, std::int64_t begin, std::int64_t count, std::string name) {
    TESSERA_ASSERT(axis == 0 || axis == 1, "slab axis " << axis);
    Shape image_begin{0, 0, 0, 0}, image_extent = volume.image.shape();
    Shape label_begin{0, 0, 0}, label_extent = volume.labels.shape();
    image_begin[static_cast<std::size_t>(axis) + 1] = begin;
    image_extent[static_cast<std::size_t>(axis) + 1] = count;
    label_begin[static_cast<std::size_t>(axis)] = begin;
    label_extent[static_cast<std::size_t>(axis)] = count;
    LoadedVolume part;
    part.name = std::move(name);
    part.image = volume.image.view_box(image_begin, image_extent).contiguous();
    part.labels = volume.labels.view_box(label_begin, label_extent).contiguous();
    part.geometry = volume.geometry;
    // Tensor axis D is geometry k, H is j.
    const std::size_t g = axis == 0 ? 2 : 1;
    part.geometry.size[g] = count;
    part.geometry.origin = axis == 0 ? volume.geometry.world_of(0, 0, static_cast<double>(begin))
                                     : volume.geometry.world_of(0, static_cast<double>(begin), 0);
    return part;
}

// ---- label mapping ----------------------------------------------------------------------------

LabelMapping::LabelMapping(std::vector<LabelRule> rules, bool nonzero_to_one_when_empty, std::int64_t num_classes)
    : m_rules(std::move(rules)), m_nonzero_to_one(m_rules.empty() && nonzero_to_one_when_empty), m_num_classes(num_classes) {}

std::int32_t LabelMapping::operator()(std::int32_t label) const {
    if (m_nonzero_to_one) return label != 0 ? 1 : 0;
    if (m_rules.empty()) return label;
    for (const LabelRule& rule : m_rules) {
        if (rule.covers(label)) return rule.to;  // rules do not overlap (validate_config)
    }
    return 0;  // not in a non-empty mapping: background
}

void LabelMapping::check(std::int32_t label, const std::string& where, const std::string& name) const {
    const std::int32_t mapped = (*this)(label);
    if (mapped >= 0 && mapped < m_num_classes) return;
    const std::string labelled = "label " + std::to_string(label) + (name.empty() ? "" : " (" + name + ")");
    const std::string classes = "the model's " + std::to_string(m_num_classes) + " classes (0-" +
                                std::to_string(m_num_classes - 1) + ")";
    if (!is_identity()) {
        TESSERA_REJECT(labelled << " in " << where << " maps to class " << mapped << " through data.label_mapping, outside "
                                << classes << ": change its entry in data.label_mapping or give the model more classes");
    }
    TESSERA_REJECT(labelled << " in " << where << (label < 0 ? " is negative, outside " : " is outside ") << classes
                            << ": add it to data.label_mapping (e.g. [" << label
                            << ", 0] makes it background; listed labels keep their class, unlisted ones become 0) or "
                               "give the model more classes");
}

void LabelMapping::apply(Tensor& labels, const std::string& where) const {
    if (labels.num_elements() == 0) return;
    TESSERA_ASSERT(labels.is_contiguous(), "mapping labels in place needs a dense tensor");
    std::int32_t* values = labels.data<std::int32_t>();
    // Label maps are mostly runs of one value: remember the last one mapped.
    std::int32_t last_label = values[0];
    check(last_label, where);
    std::int32_t last_class = (*this)(last_label);
    for (std::int64_t v = 0; v < labels.num_elements(); ++v) {
        if (values[v] != last_label) {
            last_label = values[v];
            check(last_label, where);
            last_class = (*this)(last_label);
        }
        values[v] = last_class;
    }
}

std::vector<std::string> LabelMapping::class_names(std::span<const LabelDescription> descriptions) const {
    std::vector<std::vector<std::string>> named(static_cast<std::size_t>(m_num_classes));
    for (const LabelDescription& description : descriptions) {
        if (description.name.empty()) continue;
        // A label no rule names falls to the background: it does not name the background class.
        const bool ruled = m_rules.empty() || description.value == 0 ||
                           std::any_of(m_rules.begin(), m_rules.end(), [&](const LabelRule& rule) { return rule.covers(description.value); });
        if (!ruled) continue;
        const std::int32_t mapped = (*this)(description.value);
        if (mapped >= 0 && mapped < m_num_classes) named[static_cast<std::size_t>(mapped)].push_back(description.name);
    }
    std::vector<std::string> names;
    for (const std::vector<std::string>& labels : named) {
        std::string name;
        for (std::size_t i = 0; i < labels.size() && i < 3; ++i) {
            if (i > 0) name += " + ";
            name += labels[i];
        }
        if (labels.size() > 3) name += " + …";
        names.push_back(std::move(name));
    }
    return names;
}

std::string LabelMapping::describe() const {
    if (m_nonzero_to_one) return "non-zero→1";
    if (m_rules.empty()) return "as in the files";
    std::ostringstream text;
    for (const LabelRule& rule : m_rules) text << rule.text() << "→" << rule.to << ", ";
    text << "others→0";
    return text.str();
}

// ---- the dataset ------------------------------------------------------------------------------

VolumeDataset::VolumeDataset(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes,
                             VolumePlan plan)
    : Dataset(batch_shape), m_config(config), m_num_classes(num_classes),
      m_spatial_rank(static_cast<int>(batch_shape.size()) - 2), m_num_channels(batch_shape[1]), m_patch{1, 1, 1} {
    if (plan.mapping && !plan.label_descriptions.empty()) m_class_names = plan.mapping->class_names(plan.label_descriptions);
    TESSERA_ASSERT(m_spatial_rank == 2 || m_spatial_rank == 3, "batch shape " << shape_to_string(batch_shape));
    TESSERA_ASSERT(!plan.train.empty(), "a source with no training volumes");
    for (int axis = 0; axis < m_spatial_rank; ++axis) {
        m_patch[static_cast<std::size_t>(3 - m_spatial_rank + axis)] = batch_shape[static_cast<std::size_t>(2 + axis)];
    }
    for (VolumeLoader& loader : plan.train) {
        m_train.push_back(std::make_unique<Lazy<TrainingVolume>>(
            [this, load = std::move(loader)] { return prepare_training(load()); }));
    }
    for (VolumeLoader& loader : plan.eval) {
        m_eval.push_back(std::make_unique<Lazy<Example>>([this, load = std::move(loader)] { return prepare_example(load()); }));
    }
    std::ostringstream text;
    text << plan.description << "; ";
    const std::vector<std::int64_t> patch(m_patch.begin() + (3 - m_spatial_rank), m_patch.end());
    switch (config.static_shape) {
        case StaticShape::Crop:
            text << extents_text(patch) << " crops, " << std::lround(100 * config.foreground_fraction)
                 << "% centred on foreground";
            break;
        case StaticShape::Resize: text << "resized to " << extents_text(patch); break;
        case StaticShape::PadToMax: text << "scaled and padded to " << extents_text(patch); break;
    }
    m_description = text.str();
}

std::array<std::int64_t, 3> VolumeDataset::content_extents(const std::array<std::int64_t, 3>& source) const {
    if (m_config.static_shape == StaticShape::Resize) return m_patch;
    // PadToMax: one scale for every axis, the one that makes the longest side (relative to the input) fit.
    double scale = std::numeric_limits<double>::max();
    for (std::size_t axis = static_cast<std::size_t>(3 - m_spatial_rank); axis < 3; ++axis) {
        scale = std::min(scale, static_cast<double>(m_patch[axis]) / static_cast<double>(source[axis]));
    }
    std::array<std::int64_t, 3> content = m_patch;
    for (std::size_t axis = static_cast<std::size_t>(3 - m_spatial_rank); axis < 3; ++axis) {
        content[axis] = std::clamp<std::int64_t>(std::llround(static_cast<double>(source[axis]) * scale), 1, m_patch[axis]);
    }
    return content;
}

VolumeDataset::TrainingVolume VolumeDataset::prepare_training(LoadedVolume volume) const {
    TrainingVolume result;
    if (volume.region) {
        TESSERA_ASSERT(m_config.static_shape == StaticShape::Crop, "a volume read by region is cropped");
        volume.region->scan();
        result.region = std::move(volume.region);
        return result;
    }
    const std::array<std::int64_t, 3> extent{volume.labels.dim(0), volume.labels.dim(1), volume.labels.dim(2)};
    if (m_config.static_shape != StaticShape::Crop) {
        const auto content = content_extents(extent);
        result.image = resample(volume.image, m_patch, content, Interpolation::Linear);
        result.labels = resample(volume.labels.contiguous().reshape({1, extent[0], extent[1], extent[2]}), m_patch, content,
                                 Interpolation::Nearest)
                            .reshape({m_patch[0], m_patch[1], m_patch[2]});
        return result;
    }
    result.image = volume.image.contiguous();
    result.labels = volume.labels.contiguous();
    TESSERA_CHECK(result.labels.num_elements() < std::int64_t{1} << 32,
                  volume.name << " has " << result.labels.num_elements()
                              << " voxels; Tessera samples volumes of fewer than 2^32 voxels");
    const std::int32_t* labels = result.labels.data<std::int32_t>();
    for (std::int64_t v = 0; v < result.labels.num_elements(); ++v) {
        if (labels[v] != 0) result.foreground.push_back(static_cast<std::uint32_t>(v));
    }
    return result;
}

Example VolumeDataset::prepare_example(LoadedVolume volume) const {
    TESSERA_ASSERT(!volume.region, "held-out volumes are read whole (RegionVolume::held_out)");
    Example example;
    example.name = std::move(volume.name);
    example.geometry = volume.geometry;
    std::array<std::int64_t, 3> extent{volume.labels.dim(0), volume.labels.dim(1), volume.labels.dim(2)};
    if (m_config.static_shape == StaticShape::Crop) {
        example.image = volume.image.clone();
        example.labels = volume.labels.clone();
    } else {
        const auto content = content_extents(extent);
        example.image = resample(volume.image, m_patch, content, Interpolation::Linear);
        example.labels = resample(volume.labels.contiguous().reshape({1, extent[0], extent[1], extent[2]}), m_patch, content,
                                  Interpolation::Nearest);
        example.geometry = resampled_geometry(volume.geometry, extent, m_patch, content);
        extent = m_patch;
    }
    if (m_spatial_rank == 2) {
        example.image = example.image.reshape({m_num_channels, extent[1], extent[2]});
        example.labels = example.labels.reshape({extent[1], extent[2]});
    } else {
        example.labels = example.labels.reshape({extent[0], extent[1], extent[2]});
    }
    return example;
}

Batch VolumeDataset::training_batch(std::int64_t index) const {
    TESSERA_CHECK(index >= 0, "training batch indices start at 0, got " << index);
    const Shape& images_shape = batch_shape();
    Shape labels_shape{images_shape[0]};
    labels_shape.insert(labels_shape.end(), images_shape.begin() + 2, images_shape.end());
    Batch batch{Tensor::empty(images_shape, DType::F32), Tensor::empty(labels_shape, DType::I32)};
    const std::int64_t voxels = m_patch[0] * m_patch[1] * m_patch[2];
    // One stream per sample: sample n of batch i depends on (seed, i, n) only.
    const std::uint64_t seed = derived_seed(m_config.seed, SeedPurpose::Batch, static_cast<std::uint64_t>(index));
    for (std::int64_t n = 0; n < images_shape[0]; ++n) {
        SeededRandom random(seed, static_cast<std::uint64_t>(n));
        sample(random, batch.images.data<float>() + n * m_num_channels * voxels, batch.labels.data<std::int32_t>() + n * voxels);
    }
    return batch;
}

void VolumeDataset::sample(SeededRandom& random, float* image_out, std::int32_t* labels_out) const {
    const std::shared_ptr<const TrainingVolume> volume =
        m_train[static_cast<std::size_t>(uniform_index(random, static_cast<std::int64_t>(m_train.size())))]->get();
    Tensor image, labels;
    if (m_config.static_shape == StaticShape::Crop) {
        // The same draws, in the same order, whether the volume is in memory or read by region.
        const RegionVolume* region = volume->region.get();
        const std::array<std::int64_t, 3> extent =
            region ? region->training_extent() : std::array<std::int64_t, 3>{volume->labels.dim(0), volume->labels.dim(1), volume->labels.dim(2)};
        const std::int64_t num_foreground = region ? region->num_foreground() : static_cast<std::int64_t>(volume->foreground.size());
        const bool on_foreground = random.uniform() < m_config.foreground_fraction && num_foreground > 0;
        std::array<std::int64_t, 3> centre{};
        if (on_foreground) {
            const std::int64_t rank = uniform_index(random, num_foreground);
            if (region) {
                centre = region->foreground_voxel(rank);
            } else {
                const auto flat = static_cast<std::int64_t>(volume->foreground[static_cast<std::size_t>(rank)]);
                centre = {flat / (extent[1] * extent[2]), flat / extent[2] % extent[1], flat % extent[2]};
            }
        }
        std::array<std::int64_t, 4> begin{0, 0, 0, 0};
        for (std::size_t axis = 0; axis < 3; ++axis) {
            const std::int64_t room = extent[axis] - m_patch[axis];  // start positions that keep the patch inside
            std::int64_t start = 0;
            if (room < 0) {
                start = -((-room) / 2);  // a volume smaller than the patch sits in its middle, padded with zeros
            } else if (on_foreground) {
                start = std::clamp(centre[axis] - m_patch[axis] / 2, std::int64_t{0}, room);
            } else {
                start = uniform_index(random, room + 1);
            }
            begin[axis + 1] = start;
        }
        if (region) {
            image = Tensor::empty({1, m_patch[0], m_patch[1], m_patch[2]}, DType::F32);
            labels = Tensor::empty({m_patch[0], m_patch[1], m_patch[2]}, DType::I32);
            region->read_patch({begin[1], begin[2], begin[3]}, m_patch, image.data<float>(), labels.data<std::int32_t>());
        } else {
            image = crop_padded(volume->image, begin, std::array<std::int64_t, 4>{m_num_channels, m_patch[0], m_patch[1], m_patch[2]});
            labels = crop_padded(volume->labels, std::span(begin).subspan(1), m_patch);
        }
    } else {
        image = volume->image.clone();
        labels = volume->labels.clone();
    }
    augment(random, image, labels);
    std::memcpy(image_out, image.data<float>(), image.num_bytes());
    std::memcpy(labels_out, labels.data<std::int32_t>(), labels.num_bytes());
}

void VolumeDataset::augment(SeededRandom& random, Tensor& image, Tensor& labels) const {
    const AugmentConfig& augment = m_config.augment;
    const int lead = 3 - m_spatial_rank;  // internal [D, H, W] axis of spatial axis 0
    for (int axis : augment.flip_axes) {
        if (random.uniform() < 0.5) {
            flip(image, lead + axis + 1);
            flip(labels, lead + axis);
        }
    }
    if (augment.rotate90 && m_patch[1] == m_patch[2]) {
        const auto turns = static_cast<int>(uniform_index(random, 4));
        if (turns != 0) {
            image = rotate90(image, turns);
            labels = rotate90(labels, turns);
        }
    }
    augment_intensity(image, augment, random);
}

Example VolumeDataset::eval_example(std::int64_t i) const {
    TESSERA_CHECK(i >= 0 && i < num_eval_examples(),
                  "eval example " << i << " does not exist: this dataset holds out " << num_eval_examples());
    const std::shared_ptr<const Example> cached = m_eval[static_cast<std::size_t>(i)]->get();
    // Copies: the caller may write into its example without touching the cache.
    return Example{cached->name, cached->image.clone(), cached->labels.clone(), cached->geometry};
}

}  // namespace tessera::data::detail
