// Internal to engine/data: the Dataset behind every segmentation source. A source (sources.hpp) only
// says how to load its training and held-out volumes; this class caches them, samples patches (or
// resizes), augments, and cuts evaluation examples.
//
//   VolumePlan plan;                                     // what a source hands over
//   plan.train.push_back([] { return load_case("case01"); });
//   plan.eval.push_back([] { return load_case("case02"); });
//   VolumeDataset dataset(config, {4, 1, 64, 64}, 2, std::move(plan));
//
// Volumes are loaded the first time a batch or example needs them, once, under a per-volume mutex, so
// training_batch() may run on several threads at once.
#pragma once

#include "data/dataset.hpp"
#include "core/random.hpp"

#include <array>
#include <functional>
#include <optional>
#include <mutex>
#include <span>

namespace tessera::data::detail {

class RegionVolume;  // region_volume.hpp

// A source's volume, ready to sample: normalised, labels mapped to classes.
struct LoadedVolume {
    std::string name;        // "em_train_3", "case01", "head_mri slices 47-61"
    Tensor image;            // [C, D, H, W] f32 (D = 1 for 2D)
    Tensor labels;           // [D, H, W] i32, each in [0, num_classes)
    ImageGeometry geometry;  // of image and labels
    // A volume larger than memory (data.read_by_region): image and labels stay empty, patches are read
    // from here (Crop only).
    std::shared_ptr<const RegionVolume> region;
};
using VolumeLoader = std::function<LoadedVolume()>;


// File label -> class as DataConfig::label_mapping says (identity when empty, unless the source
// defaults to non-zero -> 1), with the errors for labels the model has no class for.
class LabelMapping {
public:
    LabelMapping(std::vector<LabelRule> rules, bool nonzero_to_one_when_empty, std::int64_t num_classes);
    std::int32_t operator()(std::int32_t label) const;
    // Throws unless `label` maps into [0, num_classes); `where` names its file or source and `name` is
    // the label's meaning when known ("lesion").
    void check(std::int32_t label, const std::string& where, const std::string& name = "") const;
    // Maps labels [any shape, dense] in place; throws (as check) at the first label without a class.
    void apply(Tensor& labels, const std::string& where) const;
    bool is_identity() const { return m_rules.empty() && !m_nonzero_to_one; }
    std::string describe() const;  // "1→1, 2-255→1, others→0", "non-zero→1"
    // [num_classes] each class's name from the file labels that map to it: one named label gives its
    // name, several their names joined by " + " (at most three, then "…"); "" when none is named.
    std::vector<std::string> class_names(std::span<const LabelDescription> descriptions) const;

private:
    std::vector<LabelRule> m_rules;
    bool m_nonzero_to_one = false;
    std::int64_t m_num_classes = 0;
};

struct VolumePlan {
    std::vector<VolumeLoader> train;
    std::vector<VolumeLoader> eval;
    std::string description;  // the source's part of describe(): "synthetic EM sections 512×512, ..."
    // What the label files name (their own descriptions or sidecars'), by file label value: the
    // classes' names in the evaluation tables (LabelMapping::class_names).
    std::vector<LabelDescription> label_descriptions;
    std::optional<LabelMapping> mapping;  // how those values became classes
};

// A derived seed for member `index` of a family (training images, batches, ...) of `seed`'s streams.
enum class SeedPurpose : std::uint64_t { TrainingImage = 1, EvalImage = 2, Batch = 3, Shuffle = 4 };
std::uint64_t derived_seed(std::uint64_t seed, SeedPurpose purpose, std::uint64_t index);
// Uniform in [0, count).
std::int64_t uniform_index(SeededRandom& random, std::int64_t count);
// "512×512", "128×128×62": spatial extents [(D,) H, W] printed x first, as describe(ImageGeometry) does.
std::string extents_text(std::span<const std::int64_t> spatial);

// The part [begin, begin + count) of `volume` along spatial axis `axis` (0 = D, 1 = H), with its grid.
LoadedVolume slab(const LoadedVolume& volume, int axis, std::int64_t begin, std::int64_t count, std::string name);

class VolumeDataset final : public Dataset {
public:
    VolumeDataset(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes, VolumePlan plan);

    Batch training_batch(std::int64_t index) const override;
    std::int64_t num_eval_examples() const override { return static_cast<std::int64_t>(m_eval.size()); }
    Example eval_example(std::int64_t i) const override;
    std::int64_t num_classes() const override { return m_num_classes; }
    std::string describe() const override { return m_description; }
    std::vector<std::string> class_names() const override { return m_class_names; }

private:
    struct TrainingVolume {
        Tensor image;   // [C, D, H, W] f32, dense; Resize/PadToMax: already at the patch extents
        Tensor labels;  // [D, H, W] i32, dense
        std::vector<std::uint32_t> foreground;  // Crop: flat indices of labels != 0
        std::shared_ptr<const RegionVolume> region;  // instead of image, labels and foreground: read by region
    };
    template <class T> class Lazy {  // made on first use, once, whichever thread asks
    public:
        explicit Lazy(std::function<T()> make) : m_make(std::move(make)) {}
        std::shared_ptr<const T> get() const {
            std::lock_guard lock(m_mutex);
            if (!m_value) m_value = std::make_shared<const T>(m_make());
            return m_value;
        }

    private:
        std::function<T()> m_make;
        mutable std::mutex m_mutex;
        mutable std::shared_ptr<const T> m_value;
    };

    TrainingVolume prepare_training(LoadedVolume volume) const;
    Example prepare_example(LoadedVolume volume) const;
    std::array<std::int64_t, 3> content_extents(const std::array<std::int64_t, 3>& source) const;  // Resize/PadToMax
    void sample(SeededRandom& random, float* image_out, std::int32_t* labels_out) const;
    void augment(SeededRandom& random, Tensor& image, Tensor& labels) const;

    DataConfig m_config;
    std::int64_t m_num_classes;
    std::vector<std::string> m_class_names;  // from the label files' descriptions ("" unnamed); empty: none
    int m_spatial_rank;                   // 2 or 3
    std::int64_t m_num_channels;
    std::array<std::int64_t, 3> m_patch;  // [D, H, W] of one sample; D = 1 for 2D
    std::vector<std::unique_ptr<Lazy<TrainingVolume>>> m_train;
    std::vector<std::unique_ptr<Lazy<Example>>> m_eval;
    std::string m_description;
};

}  // namespace tessera::data::detail
