// The COCO source (detection): a CocoDataset's whole images brought to the model input's static shape,
// with their boxes.
//
// Training image n of batch i, from the stream (seed, i, n): which training image (uniform, with
// replacement, as the synthetic shapes), the scale jitter's three draws (when data.scale_jitter is not
// [1, 1]), one flip draw (when flip_axes lists 1), the intensity change's two draws (when asked). Steps:
//   decode (cached) → grey if the input has 1 channel → normalise → static shape (or scale jitter) →
//   horizontal flip → intensity change → ground truth padded to max_number_of_boxes.
// Normalising the decoded image first makes the statistics the image's own, whatever the padding or the
// crop; padding is then 0 after normalisation (with z-scores: the image's mean).
//
// Static shapes. "resize": resize_fixed_shape to [H, W] (the seed's fixed_shape_resizer; the aspect
// ratio changes). "pad_to_max": aspect ratio kept, scaled so the image fits [H, W], zeros at the bottom
// and right; for a square input this is resize_keep_aspect_ratio with min = max = the side (the seed's
// keep_aspect_ratio_resizer with pad_to_max_dimension), for a non-square one scale_and_crop at scale 1.
// Scale jitter (training only) replaces pad_to_max's resize by random_scale_jitter (one resampling); with
// "resize" it acts on the resized image (the aspect ratio stays the fixed shape's). Boxes less than a
// quarter visible after the jitter's crop are dropped.
//
// Decoded images live in a small LRU cache bounded in bytes and shared by the prefetch thread and the
// evaluation; the annotation files are read once, by make_coco.
#include "data/sources.hpp"

#include "data/coco_dataset.hpp"
#include "data/transforms.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

namespace tessera::data::detail {

namespace {

// Decoded images beyond this many bytes push out the least recently used (COCO's 640×480 RGB images are
// 3.7 MB as f32, so about 70 of them).
constexpr std::int64_t k_decoded_cache_bytes = std::int64_t{256} << 20;

// Boxes with less visible than this fraction of their scaled area after a jitter's crop are dropped.
constexpr double k_min_visible_fraction = 0.25;

// Least recently used images, keyed by (annotation file, image index), bounded by their bytes. Thread-safe;
// decoding runs outside the lock, so two threads asking for the same missing image may both decode it
// (the same pixels: either copy serves).
class DecodedImageCache {
public:
    using Key = std::pair<int, std::int64_t>;

    explicit DecodedImageCache(std::int64_t budget_bytes) : m_budget_bytes(budget_bytes) {}

    std::shared_ptr<const Tensor> get(Key key, const std::function<Tensor()>& decode) {
        {
            const std::lock_guard lock(m_mutex);
            if (const auto found = m_index.find(key); found != m_index.end()) {
                m_recent.splice(m_recent.begin(), m_recent, found->second);
                return found->second->second;
            }
        }
        auto image = std::make_shared<const Tensor>(decode());
        const std::int64_t bytes = image->num_bytes();
        if (bytes > m_budget_bytes) return image;  // larger than the whole cache: not kept
        const std::lock_guard lock(m_mutex);
        if (m_index.contains(key)) return image;  // another thread decoded it meanwhile
        m_recent.emplace_front(key, image);
        m_index.emplace(key, m_recent.begin());
        m_used_bytes += bytes;
        while (m_used_bytes > m_budget_bytes) {
            m_used_bytes -= m_recent.back().second->num_bytes();
            m_index.erase(m_recent.back().first);
            m_recent.pop_back();
        }
        return image;
    }

private:
    using Entry = std::pair<Key, std::shared_ptr<const Tensor>>;
    std::mutex m_mutex;
    std::list<Entry> m_recent;  // most recently used first
    std::map<Key, std::list<Entry>::iterator> m_index;
    std::int64_t m_budget_bytes;
    std::int64_t m_used_bytes = 0;
};

// The images of one split: indices into one annotation file.
struct Split {
    int file = 0;  // 0: data.annotations, 1: data.eval_annotations (the cache's key)
    std::shared_ptr<const CocoDataset> coco;
    std::vector<std::int64_t> indices;
};

std::string percent_text(double fraction) {
    std::ostringstream text;
    text << std::lround(100 * fraction) << " %";
    return text.str();
}

class CocoSource final : public Dataset {
public:
    CocoSource(const DataConfig& config, const Shape& batch_shape, Split train, Split eval, std::string description)
        : Dataset(batch_shape),
          m_config(config),
          m_train(std::move(train)),
          m_eval(std::move(eval)),
          m_description(std::move(description)),
          m_cache(k_decoded_cache_bytes) {}

    Batch training_batch(std::int64_t index) const override {
        TESSERA_CHECK(index >= 0, "training batch indices start at 0, got " << index);
        Batch batch;
        batch.images = Tensor::empty(batch_shape(), DType::F32);
        const std::uint64_t seed = derived_seed(m_config.seed, SeedPurpose::Batch, static_cast<std::uint64_t>(index));
        const auto [min_scale, max_scale] = m_config.scale_jitter;
        const bool jitter = min_scale != 1 || max_scale != 1;
        for (std::int64_t n = 0; n < batch_shape()[0]; ++n) {
            SeededRandom random(seed, static_cast<std::uint64_t>(n));
            const std::int64_t which = m_train.indices[static_cast<std::size_t>(
                uniform_index(random, static_cast<std::int64_t>(m_train.indices.size())))];
            DetectionSample sample = decoded(m_train, which);
            if (jitter) {
                if (m_config.static_shape == StaticShape::Resize) sample = resize_fixed_shape(sample, input_size());
                sample = random_scale_jitter(sample,
                                             {.output_size = input_size(),
                                              .min_scale = min_scale,
                                              .max_scale = max_scale,
                                              .min_visible_fraction = k_min_visible_fraction},
                                             random);
            } else {
                sample = to_static_shape(sample);
            }
            // flip_axes is empty or [1] (make_coco refuses axis 0): one draw whenever it is [1].
            if (!m_config.augment.flip_axes.empty()) sample = random_horizontal_flip(sample, random);
            augment_intensity(sample.image, m_config.augment, random);
            std::memcpy(batch.images.data<float>() + n * sample.image.num_elements(), sample.image.data<float>(),
                        sample.image.num_bytes());
            batch.ground_truth.push_back(pad_sample_ground_truth(
                sample.objects,
                {.max_number_of_boxes = m_config.max_number_of_boxes, .excess_boxes = m_config.excess_boxes},
                m_train.coco->image(which).file_name));
        }
        return batch;
    }

    std::int64_t num_eval_examples() const override { return static_cast<std::int64_t>(m_eval.indices.size()); }

    Example eval_example(std::int64_t i) const override {
        TESSERA_CHECK(i >= 0 && i < num_eval_examples(),
                      "eval example " << i << " does not exist: this dataset holds out " << num_eval_examples());
        const std::int64_t which = m_eval.indices[static_cast<std::size_t>(i)];
        DetectionSample sample = to_static_shape(decoded(m_eval, which));
        Example example;
        example.name = m_eval.coco->image(which).file_name;
        example.image = std::move(sample.image);
        example.objects = std::move(sample.objects);
        example.geometry.size[0] = batch_shape()[3];
        example.geometry.size[1] = batch_shape()[2];
        return example;
    }

    std::int64_t num_classes() const override { return m_train.coco->num_classes(); }
    bool is_detection() const override { return true; }

    std::vector<std::string> class_names() const override {
        std::vector<std::string> names;
        for (const CocoCategory& category : m_train.coco->categories()) names.push_back(category.name);
        return names;
    }

    std::string describe() const override { return m_description; }

private:
    std::array<std::int64_t, 2> input_size() const { return {batch_shape()[2], batch_shape()[3]}; }

    // Image `index` of the split's file: decoded (or from the cache), grey when the input has one
    // channel, normalised; [C, h, w] f32 with its boxes in its pixels.
    DetectionSample decoded(const Split& split, std::int64_t index) const {
        const std::shared_ptr<const Tensor> image = m_cache.get({split.file, index}, [&] {
            Tensor rgb = split.coco->load(index).image;  // [3, h, w] f32 in [0, 1]
            Tensor prepared = batch_shape()[1] == 1 ? mean_of_rgb(rgb) : std::move(rgb);
            normalize(prepared, m_config.normalization, m_config.window_low, m_config.window_high);
            return prepared;
        });
        // The cached tensor is shared: the transforms below copy before they write.
        return make_detection_sample(*image, split.coco->image(index).objects);
    }

    DetectionSample to_static_shape(const DetectionSample& sample) const {
        return whole_image_to_input(sample, m_config.static_shape, input_size());
    }

    DataConfig m_config;
    Split m_train, m_eval;
    std::string m_description;
    mutable DecodedImageCache m_cache;
};

CocoOptions coco_options(const std::filesystem::path& annotations, const std::filesystem::path& images,
                         std::vector<std::int64_t> category_ids, std::vector<std::string> category_names) {
    CocoOptions options;
    options.annotations_file = annotations;
    options.images_dir = images;
    options.keep_category_ids = std::move(category_ids);
    options.keep_category_names = std::move(category_names);
    return options;
}

// With data.excess_boxes "error", an image with more objects than max_number_of_boxes stops the run here,
// before training, naming it (the transforms only ever drop boxes, so the JSON's count is the most a
// batch sees).
void check_box_counts(const DataConfig& config, const Split& split) {
    if (config.excess_boxes != ExcessBoxes::Error) return;
    for (std::int64_t index : split.indices) {
        const CocoImage& image = split.coco->image(index);
        const auto count = static_cast<std::int64_t>(image.objects.size());
        TESSERA_CHECK(
            count <= config.max_number_of_boxes,
            "image '" << image.file_name << "' (COCO id " << image.coco_id << " in "
                      << (split.file == 0 ? config.annotations_file : config.eval_annotations_file).filename().string()
                      << ") has " << count
                      << " objects, more than data.max_number_of_boxes = " << config.max_number_of_boxes
                      << ": raise max_number_of_boxes, or keep the largest or the first ones (data.excess_boxes: "
                         "\"keep_largest\" or \"keep_first\")");
    }
}

}  // namespace

std::unique_ptr<Dataset> make_coco(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes) {
    TESSERA_CHECK(batch_shape.size() == 4,
                  "COCO images are 2D: the model input must be [N, C, H, W], got " << shape_to_string(batch_shape));
    TESSERA_CHECK(batch_shape[1] == 3 || batch_shape[1] == 1,
                  "COCO images are read as RGB: set input.channels to 3 (or 1 for grey, the mean of R, G and B), got "
                      << batch_shape[1]);
    // validate() has refused static_shape Crop and a missing annotations file or image folder.
    TESSERA_CHECK(config.image_size.empty(),
                  "data.image_size sizes generated images; a COCO source reads its images' sizes "
                  "from the annotations: remove it, got "
                      << shape_to_string(config.image_size));
    for (int axis : config.augment.flip_axes) {
        TESSERA_CHECK(
            axis == 1,
            "data.augment.flip_axes holds "
                << axis
                << ": a COCO source flips left-right only (axis 1; the detection transforms "
                   "have no vertical flip, and upside-down photos are rarely what a detector meets): use [1]");
    }
    TESSERA_CHECK(!config.augment.rotate90,
                  "data.augment.rotate90 turns label maps, not boxes; a COCO source augments with flip_axes [1], "
                  "data.scale_jitter and intensity changes: remove rotate90");

    Split train;
    train.coco = std::make_shared<const CocoDataset>(
        coco_options(config.annotations_file, config.images_dir, config.category_ids, config.category_names));
    const CocoDataset& coco = *train.coco;
    std::string class_list;
    for (const CocoCategory& category : coco.categories()) {
        class_list += (class_list.empty() ? "" : ", ") + category.name + " (" + std::to_string(category.coco_id) + ")";
    }
    TESSERA_CHECK(coco.num_classes() == num_classes,
                  "model.num_classes is "
                      << num_classes << " but the COCO source keeps " << coco.num_classes()
                      << (coco.num_classes() == 1 ? " category" : " categories") << " of "
                      << config.annotations_file.filename().string() << ": " << class_list
                      << "; set model.num_classes to " << coco.num_classes()
                      << (num_classes < coco.num_classes()
                              ? ", or keep " + std::to_string(num_classes) + " of them with data.categories"
                              : std::string()));
    const std::int64_t count = coco.size();
    TESSERA_CHECK(count >= 1, config.annotations_file.string()
                                  << " lists no images: a COCO source needs at least one to train on");

    Split eval;
    std::ostringstream held_out;
    if (!config.eval_annotations_file.empty()) {
        train.indices.resize(static_cast<std::size_t>(count));
        for (std::int64_t i = 0; i < count; ++i) train.indices[static_cast<std::size_t>(i)] = i;
        // The held-out file keeps the training classes, by COCO id, so class ids agree.
        std::vector<std::int64_t> kept_ids;
        for (const CocoCategory& category : coco.categories()) kept_ids.push_back(category.coco_id);
        const std::filesystem::path& eval_images =
            config.eval_images_dir.empty() ? config.images_dir : config.eval_images_dir;
        eval.file = 1;
        eval.coco =
            std::make_shared<const CocoDataset>(coco_options(config.eval_annotations_file, eval_images, kept_ids, {}));
        for (const CocoCategory& category : coco.categories()) {
            const CocoCategory& other = eval.coco->categories()[static_cast<std::size_t>(category.class_id)];
            TESSERA_CHECK(other.name == category.name,
                          "COCO category " << category.coco_id << " is \"" << category.name << "\" in "
                                           << config.annotations_file.string() << " but \"" << other.name << "\" in "
                                           << config.eval_annotations_file.string()
                                           << ": training and held-out annotations must use the same category ids");
        }
        eval.indices.resize(static_cast<std::size_t>(eval.coco->size()));
        for (std::int64_t i = 0; i < eval.coco->size(); ++i) eval.indices[static_cast<std::size_t>(i)] = i;
        held_out << eval.coco->size() << " held out from " << config.eval_annotations_file.filename().string();
    } else {
        const std::int64_t num_held_out =
            config.holdout_fraction > 0
                ? std::max<std::int64_t>(
                      1, static_cast<std::int64_t>(std::floor(config.holdout_fraction * static_cast<double>(count))))
                : 0;
        TESSERA_CHECK(num_held_out < count,
                      config.annotations_file.string()
                          << " lists " << count << (count == 1 ? " image" : " images") << " and data.holdout_fraction "
                          << config.holdout_fraction << " holds out " << num_held_out
                          << ", leaving none for training: set data.holdout_fraction to 0, or give the held-out images "
                             "their own file (data.eval_annotations)");
        for (std::int64_t i = 0; i < count; ++i) {
            (i < count - num_held_out ? train.indices : eval.indices).push_back(i);
        }
        eval.file = 0;
        eval.coco = train.coco;
        held_out << num_held_out << " held out (the last " << percent_text(config.holdout_fraction) << ")";
    }
    check_box_counts(config, train);
    check_box_counts(config, eval);

    const CocoCounts& counts = coco.counts();
    std::ostringstream text;
    text << "COCO " << config.annotations_file.filename().string() << ": " << train.indices.size()
         << " training images + " << held_out.str() << ", " << coco.num_classes()
         << (coco.num_classes() == 1 ? " class (" : " classes (") << class_list << "), " << counts.kept << " boxes ("
         << counts.crowd_ignored << " crowd, " << counts.other_category << " of other categories, "
         << counts.degenerate + counts.outside_image << " degenerate or outside dropped); "
         << (config.static_shape == StaticShape::Resize ? "resized to " : "scaled and padded to ") << batch_shape[3]
         << "×" << batch_shape[2] << (batch_shape[1] == 1 ? " grey" : " RGB");
    if (config.scale_jitter != std::array<double, 2>{1, 1}) {
        text << ", scale jitter " << config.scale_jitter[0] << "–" << config.scale_jitter[1];
    }
    text << ", boxes padded to " << config.max_number_of_boxes;
    return std::make_unique<CocoSource>(config, batch_shape, std::move(train), std::move(eval), text.str());
}

}  // namespace tessera::data::detail
