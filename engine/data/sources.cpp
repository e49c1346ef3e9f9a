#include "data/sources.hpp"
#include "io/label_descriptions.hpp"

#include "data/examples.hpp"
#include "data/folder_pairs.hpp"
#include "data/phantom.hpp"
#include "data/region_volume.hpp"
#include "data/synthetic_em.hpp"
#include "data/transforms.hpp"
#include "core/memory_budget.hpp"
#include "io/hdf5_volume.hpp"
#include "io/volume_io.hpp"
#include "io/volume_region.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace tessera::data::detail {
namespace {

constexpr double default_em_noise = 0.08;  // grey levels: ISBI's sections look about this noisy
constexpr double default_ct_noise = 15.0;  // HU, the phantom's own default

// Appended rather than "'" + text + "'": GCC 12 reports a false -Wrestrict for the latter.
std::string quoted(const std::filesystem::path& path) {
    std::string text = "'";
    text += path.string();
    text += '\'';
    return text;
}

Shape spatial_of(const Shape& batch_shape) { return Shape(batch_shape.begin() + 2, batch_shape.end()); }

void check_one_channel(const Shape& batch_shape, const char* what) {
    TESSERA_CHECK(batch_shape[1] == 1, "the model takes " << batch_shape[1] << " input channels (input "
                                                          << shape_to_string(batch_shape) << ") but " << what
                                                          << " have 1: set the model's input channels to 1");
}

// The normalised, class-mapped form of a source's volume and labels (same grid).
LoadedVolume prepare(Volume volume, LabelMap labels, std::string name, const DataConfig& config,
                     const LabelMapping& mapping, const std::string& where) {
    LoadedVolume loaded;
    loaded.name = std::move(name);
    loaded.geometry = volume.geometry;
    const auto& size = volume.geometry.size;
    if (volume.num_non_finite > 0) {
        const auto& first = volume.first_non_finite;
        TESSERA_CHECK(config.non_finite == NonFinitePolicy::Zero,
                      quoted(volume.source_path) << " holds " << volume.num_non_finite << " NaN or infinite voxel"
                                                 << (volume.num_non_finite == 1 ? "" : "s") << " (the first at i, j, k = " << first[0]
                                                 << ", " << first[1] << ", " << first[2]
                                                 << "): training on them makes every loss NaN. Clean the image, or set "
                                                    "data.non_finite to \"zero\" to read them as 0.");
        float* values = volume.voxels.data<float>();
        for (std::int64_t index = 0; index < volume.voxels.num_elements(); ++index) {
            if (!std::isfinite(values[index])) values[index] = 0.0f;
        }
    }
    loaded.image = volume.voxels.contiguous().reshape({1, size[2], size[1], size[0]});
    normalize(loaded.image, config.normalization, config.window_low, config.window_high);
    loaded.labels = labels.labels.contiguous();
    mapping.apply(loaded.labels, where);
    return loaded;
}

// How many of a single volume's `extent` slices (rows) are held out: the last holdout_fraction, at least
// one unless it is 0, and never all.
std::int64_t held_out_count(std::int64_t extent, double holdout_fraction, const std::string& base_name, const char* unit) {
    const std::int64_t held =
        holdout_fraction > 0 ? std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(holdout_fraction * static_cast<double>(extent)))) : 0;
    TESSERA_CHECK(held < extent, base_name << " has " << extent << " " << unit << "; holding out " << held
                                           << " leaves none for training: set data.holdout_fraction to 0 or give "
                                              "more images");
    return held;
}

// A source with one image or volume: the last holdout_fraction of its slices (rows for a 2D image) are
// the held-out example, the rest the training volume. Returns "slices 0-46 training + 47-61 held out".
std::string split_single(VolumePlan& plan, std::shared_ptr<const LoadedVolume> whole, int spatial_rank,
                         double holdout_fraction, const std::string& base_name) {
    const int axis = spatial_rank == 3 ? 0 : 1;  // D for volumes, H for 2D images
    const char* unit = axis == 0 ? "slices" : "rows";
    const std::int64_t extent = whole->labels.dim(axis);
    const std::int64_t held = held_out_count(extent, holdout_fraction, base_name, unit);
    const std::int64_t kept = extent - held;
    plan.train.push_back([whole, axis, kept] { return slab(*whole, axis, 0, kept, whole->name); });
    std::ostringstream text;
    text << unit << " 0-" << kept - 1 << " training";
    if (held > 0) {
        const std::string name = base_name + " " + unit + " " + std::to_string(kept) + "-" + std::to_string(extent - 1);
        plan.eval.push_back([whole, axis, kept, held, name] { return slab(*whole, axis, kept, held, name); });
        text << " + " << kept << "-" << extent - 1 << " held out";
    } else {
        text << ", none held out";
    }
    return text.str();
}

std::string mapping_text(const LabelMapping& mapping) {
    return mapping.is_identity() ? std::string() : ", labels mapped " + mapping.describe();
}

// Reads a pair and checks it fits the model's dimensionality.
LoadedVolume read_pair(const FilePair& pair, const DataConfig& config, const LabelMapping& mapping, int spatial_rank,
                       const Shape& batch_shape, std::vector<LabelDescription>& descriptions) {
    Volume volume = read_volume(pair.image);
    LabelMap labels = read_label_map(pair.labels);
    merge_label_descriptions(descriptions, labels.descriptions);
    check_same_grid(volume.geometry, labels.geometry, "the label file " + quoted(pair.labels));
    if (spatial_rank == 2) {
        TESSERA_CHECK(volume.geometry.is_2d(),
                      quoted(pair.image) << " is a volume (" << describe(volume.geometry) << ") but the model is 2D (input "
                                         << shape_to_string(batch_shape)
                                         << "): use a 3D model (input [N, 1, D, H, W]) or a folder of 2D images");
    } else {
        TESSERA_CHECK(!volume.geometry.is_2d(),
                      quoted(pair.image) << " is a 2D image (" << describe(volume.geometry) << ") but the model is 3D (input "
                                         << shape_to_string(batch_shape)
                                         << "): use a 2D model (input [N, 1, H, W]) or a folder of volumes");
    }
    return prepare(std::move(volume), std::move(labels), pair.name, config, mapping, quoted(pair.labels));
}

// ---- fake images --------------------------------------------------------------------------------

class FakeImagesDataset final : public Dataset {
public:
    FakeImagesDataset(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes)
        : Dataset(batch_shape), m_config(config), m_num_classes(num_classes),
          m_image_shape(batch_shape.begin() + 1, batch_shape.end()) {}

    Batch training_batch(std::int64_t index) const override {
        TESSERA_CHECK(index >= 0, "training batch indices start at 0, got " << index);
        const std::int64_t num_images = batch_shape()[0];
        Batch batch{Tensor::empty(batch_shape(), DType::F32), Tensor::empty({num_images}, DType::I32)};
        const std::uint64_t seed = derived_seed(m_config.seed, SeedPurpose::Batch, static_cast<std::uint64_t>(index));
        const std::int64_t image_elements = num_elements_of(m_image_shape);
        for (std::int64_t n = 0; n < num_images; ++n) {
            SeededRandom random(seed, static_cast<std::uint64_t>(n));
            const Tensor image = make_image(random);
            std::memcpy(batch.images.data<float>() + n * image_elements, image.data<float>(), image.num_bytes());
            batch.labels.data<std::int32_t>()[n] = static_cast<std::int32_t>(uniform_index(random, m_num_classes));
        }
        return batch;
    }

    std::int64_t num_eval_examples() const override { return m_config.num_eval_images; }

    Example eval_example(std::int64_t i) const override {
        TESSERA_CHECK(i >= 0 && i < num_eval_examples(),
                      "eval example " << i << " does not exist: this dataset holds out " << num_eval_examples());
        SeededRandom random(derived_seed(m_config.seed, SeedPurpose::EvalImage, static_cast<std::uint64_t>(i)));
        Example example;
        example.name = "fake_eval_" + std::to_string(i);
        example.image = make_image(random);
        example.labels = Tensor::full<std::int32_t>({1}, static_cast<std::int32_t>(uniform_index(random, m_num_classes)));
        const std::size_t rank = m_image_shape.size() - 1;
        for (std::size_t axis = 0; axis < rank; ++axis) example.geometry.size[axis] = m_image_shape[m_image_shape.size() - 1 - axis];
        return example;
    }

    std::int64_t num_classes() const override { return m_num_classes; }

    std::string describe() const override {
        std::ostringstream text;
        const Shape spatial(m_image_shape.begin() + 1, m_image_shape.end());
        text << "fake images " << extents_text(spatial) << " × " << m_image_shape[0]
             << (m_image_shape[0] == 1 ? " channel" : " channels") << " of random normal values, labels uniform over "
             << m_num_classes << " classes, " << m_config.num_eval_images << " held out";
        return text.str();
    }

private:
    Tensor make_image(SeededRandom& random) const {  // [C, spatial...]
        Tensor image = Tensor::empty(m_image_shape, DType::F32);
        float* values = image.data<float>();
        for (std::int64_t v = 0; v < image.num_elements(); ++v) values[v] = static_cast<float>(random.normal());
        normalize(image, m_config.normalization, m_config.window_low, m_config.window_high);
        return image;
    }

    DataConfig m_config;
    std::int64_t m_num_classes;
    Shape m_image_shape;  // [C, (D,) H, W]
};

}  // namespace

VolumePlan synthetic_em_plan(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes) {
    TESSERA_CHECK(batch_shape.size() == 4,
                  "synthetic EM sections are 2D images but the model input " << shape_to_string(batch_shape)
                                                                              << " is 3D: use a 2D model (input [N, 1, H, W]) "
                                                                                 "or data.source SyntheticCt for volumes");
    check_one_channel(batch_shape, "synthetic EM sections");
    const Shape size = config.image_size.empty() ? Shape{512, 512} : config.image_size;
    TESSERA_CHECK(size.size() == 2, "data.image_size for synthetic EM sections needs 2 extents [H, W], got "
                                        << shape_to_string(config.image_size));
    const LabelMapping mapping(config.label_mapping, false, num_classes);
    mapping.check(0, "synthetic EM sections", "cell");
    mapping.check(1, "synthetic EM sections", "membrane");

    VolumePlan plan;
    const auto loader = [config, size, mapping](SeedPurpose purpose, std::int64_t index, std::string name) {
        return [config, size, mapping, purpose, index, name] {
            EmSectionOptions options;
            options.size = {size[0], size[1]};
            options.noise_sigma = config.noise < 0 ? default_em_noise : config.noise;
            options.seed = derived_seed(config.seed, purpose, static_cast<std::uint64_t>(index));
            EmSection section = make_em_section(options);
            return prepare(std::move(section.image), std::move(section.labels), name, config, mapping, "synthetic EM sections");
        };
    };
    for (std::int64_t i = 0; i < config.num_train_images; ++i) {
        plan.train.push_back(loader(SeedPurpose::TrainingImage, i, "em_train_" + std::to_string(i)));
    }
    for (std::int64_t i = 0; i < config.num_eval_images; ++i) {
        plan.eval.push_back(loader(SeedPurpose::EvalImage, i, "em_eval_" + std::to_string(i)));
    }
    plan.description = "synthetic EM sections " + extents_text(size) + ", " + std::to_string(config.num_train_images) +
                       " training + " + std::to_string(config.num_eval_images) + " held out, membranes labelled" +
                       mapping_text(mapping);
    return plan;
}

VolumePlan synthetic_ct_plan(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes) {
    check_one_channel(batch_shape, "synthetic CT phantoms");
    const Shape model_spatial = spatial_of(batch_shape);
    const Shape size = config.image_size.empty() ? model_spatial : config.image_size;
    TESSERA_CHECK(size.size() == model_spatial.size(),
                  "data.image_size " << shape_to_string(config.image_size) << " has " << size.size()
                                     << " extents but the model input " << shape_to_string(batch_shape) << " is "
                                     << model_spatial.size() << "D: give " << (model_spatial.size() == 3 ? "[D, H, W]" : "[H, W]")
                                     << " or leave it empty for the model input's");
    const LabelMapping mapping(config.label_mapping, false, num_classes);
    const std::vector<std::string>& names = phantom_label_names();
    for (std::size_t label = 0; label < names.size(); ++label) {
        mapping.check(static_cast<std::int32_t>(label), "the synthetic CT phantoms", names[label]);
    }

    VolumePlan plan;
    const bool is_3d = size.size() == 3;
    const auto loader = [config, size, is_3d, mapping](SeedPurpose purpose, std::int64_t index, std::string name) {
        return [config, size, is_3d, mapping, purpose, index, name] {
            PhantomOptions options;
            // A 2D phantom (k == 1) is the middle axial section of the 3D one.
            options.size = is_3d ? std::array<std::int64_t, 3>{size[2], size[1], size[0]}
                                 : std::array<std::int64_t, 3>{size[1], size[0], 1};
            options.noise_sigma = config.noise < 0 ? default_ct_noise : config.noise;
            options.seed = derived_seed(config.seed, purpose, static_cast<std::uint64_t>(index));
            Phantom phantom = make_ct_phantom(options);
            return prepare(std::move(phantom.volume), std::move(phantom.labels), name, config, mapping,
                           "the synthetic CT phantoms");
        };
    };
    for (std::int64_t i = 0; i < config.num_train_images; ++i) {
        plan.train.push_back(loader(SeedPurpose::TrainingImage, i, "ct_train_" + std::to_string(i)));
    }
    for (std::int64_t i = 0; i < config.num_eval_images; ++i) {
        plan.eval.push_back(loader(SeedPurpose::EvalImage, i, "ct_eval_" + std::to_string(i)));
    }
    std::ostringstream text;
    text << (is_3d ? "synthetic CT phantoms " : "synthetic CT sections ") << extents_text(size)
         << (is_3d ? "" : " (middle slices)") << ", " << config.num_train_images << " training + "
         << config.num_eval_images << " held out, labels";
    for (std::size_t label = 1; label < names.size(); ++label) text << (label == 1 ? " " : ", ") << label << " " << names[label];
    text << mapping_text(mapping);
    plan.description = text.str();
    return plan;
}

VolumePlan folder_plan(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes) {
    check_one_channel(batch_shape, "folder images (read as one channel)");
    const int spatial_rank = static_cast<int>(batch_shape.size()) - 2;
    const std::vector<FilePair> pairs = match_folder_pairs(config.images_dir, config.labels_dir);
    const LabelMapping mapping(config.label_mapping, false, num_classes);

    std::vector<LabelDescription> descriptions;  // what the label files name, the first file's word kept
    std::vector<std::shared_ptr<const LoadedVolume>> volumes;
    for (const FilePair& pair : pairs) {
        volumes.push_back(std::make_shared<const LoadedVolume>(read_pair(pair, config, mapping, spatial_rank, batch_shape, descriptions)));
    }
    VolumePlan plan;
    plan.label_descriptions = std::move(descriptions);
    plan.mapping = mapping;
    std::ostringstream text;
    text << "folder " << quoted(config.images_dir);
    if (!config.labels_dir.empty() && config.labels_dir != config.images_dir) text << " + " << quoted(config.labels_dir);
    if (volumes.size() == 1) {
        const Shape spatial(volumes.front()->labels.shape().begin() + (3 - spatial_rank), volumes.front()->labels.shape().end());
        text << ": one pair '" << pairs.front().name << "' " << extents_text(spatial) << ", "
             << split_single(plan, volumes.front(), spatial_rank, config.holdout_fraction, pairs.front().name);
    } else {
        const auto count = static_cast<std::int64_t>(volumes.size());
        const std::int64_t held =
            config.holdout_fraction > 0
                ? std::clamp<std::int64_t>(static_cast<std::int64_t>(std::floor(config.holdout_fraction * static_cast<double>(count))), 1, count - 1)
                : 0;
        for (std::int64_t i = 0; i < count; ++i) {
            const std::shared_ptr<const LoadedVolume> volume = volumes[static_cast<std::size_t>(i)];
            (i < count - held ? plan.train : plan.eval).push_back([volume] { return *volume; });
        }
        text << ": " << count << " image/label pairs, " << count - held << " training + " << held << " held out";
    }
    text << ", " << spatial_rank << "D" << mapping_text(mapping);
    plan.description = text.str();
    return plan;
}

namespace {

// A volume source's name for its examples and prediction files: the file's stem, and for an HDF5 dataset
// its last component ("sample_A.h5:/volumes/raw" -> "sample_A_raw").
std::string volume_name(const std::filesystem::path& image) {
    if (const auto hdf5 = parse_hdf5_name(image.string())) {
        const std::string stem = hdf5->file.stem().string();
        const std::string dataset = hdf5->dataset.substr(hdf5->dataset.find_last_of('/') + 1);
        return dataset.empty() ? stem : stem + "_" + dataset;
    }
    const std::string stem = volume_file_stem(image);
    return stem.empty() ? image.stem().string() : stem;
}

void check_dimensionality(const ImageGeometry& geometry, const std::filesystem::path& image, int spatial_rank, const Shape& batch_shape) {
    if (spatial_rank == 2) {
        TESSERA_CHECK(geometry.is_2d(), quoted(image) << " is a volume (" << describe(geometry) << ") but the model is 2D (input "
                                                      << shape_to_string(batch_shape) << "): use a 3D model (input [N, 1, D, H, W])");
    } else {
        TESSERA_CHECK(!geometry.is_2d(), quoted(image) << " is a 2D image (" << describe(geometry) << ") but the model is 3D (input "
                                                       << shape_to_string(batch_shape) << "): use a 2D model (input [N, 1, H, W])");
    }
}

}  // namespace

VolumePlan volume_plan(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes) {
    check_one_channel(batch_shape, "a volume source's images (read as one channel)");
    const int spatial_rank = static_cast<int>(batch_shape.size()) - 2;
    const LabelMapping mapping(config.label_mapping, false, num_classes);
    const std::string name = volume_name(config.image_file);
    const std::string files = quoted(config.image_file) + " + " + quoted(config.label_file);

    bool by_region = config.read_by_region == RegionReading::Always;
    std::shared_ptr<const VolumeRegionReader> image, labels;
    if (config.read_by_region == RegionReading::Always ||
        (config.read_by_region == RegionReading::Auto && can_read_by_region(config.image_file) && can_read_by_region(config.label_file))) {
        image = open_region_reader(config.image_file);
        labels = open_region_reader(config.label_file);
        // Whole, the image and labels take 4 bytes each per voxel (f32, i32) besides the file's own.
        by_region = by_region || static_cast<double>(image->geometry().num_voxels()) * 8.0 > static_cast<double>(max_volume_bytes());
    }
    VolumePlan plan;
    plan.mapping = mapping;
    std::ostringstream text;
    text << "volume " << files;
    if (!by_region) {
        std::vector<LabelDescription> descriptions;
        const FilePair pair{name, config.image_file, config.label_file};
        auto whole = std::make_shared<const LoadedVolume>(read_pair(pair, config, mapping, spatial_rank, batch_shape, descriptions));
        plan.label_descriptions = std::move(descriptions);
        const Shape spatial(whole->labels.shape().begin() + (3 - spatial_rank), whole->labels.shape().end());
        text << " " << extents_text(spatial) << " read whole, " << split_single(plan, whole, spatial_rank, config.holdout_fraction, name);
    } else {
        TESSERA_CHECK(config.static_shape == StaticShape::Crop,
                      "data.static_shape " << static_shape_name(config.static_shape) << " resamples the whole image, which a volume "
                                           << "read by region never is: use \"crop\" (patches), or set data.read_by_region to false");
        check_same_grid(image->geometry(), labels->geometry(), "the label map " + quoted(config.label_file));
        check_dimensionality(image->geometry(), config.image_file, spatial_rank, batch_shape);
        const ImageGeometry& grid = image->geometry();
        const int axis = spatial_rank == 3 ? 2 : 1;  // geometry k (slices) or j (rows of a 2D image)
        const char* unit = spatial_rank == 3 ? "slices" : "rows";
        const std::int64_t extent = grid.size[static_cast<std::size_t>(axis)];
        const std::int64_t held = held_out_count(extent, config.holdout_fraction, name, unit);
        const std::int64_t kept = extent - held;
        auto region = std::make_shared<const RegionVolume>(name, image, labels, config, mapping, spatial_rank, kept);
        ImageGeometry training = grid;
        training.size[static_cast<std::size_t>(axis)] = kept;
        plan.train.push_back([region, name, training] {
            LoadedVolume volume;
            volume.name = name;
            volume.geometry = training;
            volume.region = region;
            return volume;
        });
        text << " " << describe(grid).substr(0, describe(grid).find(',')) << " read by region, " << unit << " 0-" << kept - 1 << " training";
        if (held > 0) {
            const std::string held_name = name + " " + unit + " " + std::to_string(kept) + "-" + std::to_string(extent - 1);
            plan.eval.push_back([region, held_name] { return region->held_out(held_name); });
            text << " + " << kept << "-" << extent - 1 << " held out";
        } else {
            text << ", none held out";
        }
    }
    text << mapping_text(mapping);
    plan.description = text.str();
    return plan;
}

VolumePlan example_mri_plan(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes) {
    const std::optional<ExampleFiles> files = find_example_mri();
    TESSERA_CHECK(files.has_value(), "the example head MRI is not installed: install Debian's "
                                         << example_data_package << " package (sudo apt install " << example_data_package
                                         << "), or set TESSERA_EXAMPLE_DATA to a folder holding "
                                            "KmeansTest_T1UCharRaw.nii.gz and KmeansTest_T1RawSkullStrip.nii.gz");
    TESSERA_CHECK(batch_shape.size() == 5, "the example head MRI is a volume (128×128×62 voxels) but the model input "
                                               << shape_to_string(batch_shape)
                                               << " is 2D: use a 3D model (input [N, 1, D, H, W])");
    check_one_channel(batch_shape, "the example head MRI's voxels");
    // Its mask labels the brain's tissue classes 4/5/6: skull stripping wants brain vs the rest.
    const LabelMapping mapping(config.label_mapping, true, num_classes);
    Volume volume = read_volume(files->image);
    LabelMap labels = read_label_map(files->labels);
    check_same_grid(volume.geometry, labels.geometry, "the example mask " + quoted(files->labels));
    std::vector<LabelDescription> descriptions = labels.descriptions;
    const std::string size = describe(volume.geometry);
    auto whole = std::make_shared<const LoadedVolume>(
        prepare(std::move(volume), std::move(labels), "head_mri", config, mapping, quoted(files->labels)));
    VolumePlan plan;
    plan.label_descriptions = std::move(descriptions);
    plan.mapping = mapping;
    plan.description = "example head MRI " + size.substr(0, size.find(',')) + " (" + example_data_package + "), " +
                       split_single(plan, whole, 3, config.holdout_fraction, "head_mri") + ", labels " + mapping.describe();
    return plan;
}

std::unique_ptr<Dataset> make_fake_images(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes) {
    const Shape spatial = spatial_of(batch_shape);
    TESSERA_CHECK(config.image_size.empty() || config.image_size == spatial,
                  "fake images are made at the model input's size " << shape_to_string(spatial) << ", but data.image_size is "
                                                                    << shape_to_string(config.image_size)
                                                                    << ": leave data.image_size empty");
    return std::make_unique<FakeImagesDataset>(config, batch_shape, num_classes);
}

}  // namespace tessera::data::detail
