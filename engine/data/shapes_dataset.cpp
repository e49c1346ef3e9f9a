// The synthetic shapes source (detection): whole images of the model input's size with their boxes.
// Training images and held-out images come from two streams of the seed, each generated once, the first
// time a batch or example needs it, under its own once_flag (training_batch may run on several threads).
#include "data/sources.hpp"

#include "data/synthetic_shapes.hpp"
#include "data/transforms.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <sstream>

namespace tessera::data::detail {

namespace {

// One generated image, made on first use.
struct LazyShapes {
    ShapesOptions options;
    std::once_flag made;
    ShapesImage image;

    const ShapesImage& get() {
        std::call_once(made, [this] { image = make_shapes_image(options); });
        return image;
    }
};

// Mirrors image [C, H, W] and its boxes along spatial axis 0 (rows: y) or 1 (columns: x).
void flip_with_boxes(Tensor& image, std::vector<detection::LabeledBox>& objects, int axis) {
    flip(image, axis + 1);
    const auto extent = static_cast<float>(image.dim(axis + 1));
    for (detection::LabeledBox& object : objects) {
        detection::Box& box = object.box;
        if (axis == 0) {
            box = {box.x_min, extent - box.y_max, box.x_max, extent - box.y_min};
        } else {
            box = {extent - box.x_max, box.y_min, extent - box.x_min, box.y_max};
        }
    }
}

class ShapesDataset final : public Dataset {
public:
    ShapesDataset(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes)
        : Dataset(batch_shape), m_config(config), m_num_classes(num_classes) {
        ShapesOptions options;
        options.size = {batch_shape[2], batch_shape[3]};
        options.channels = batch_shape[1];
        options.min_objects = config.object_count[0];
        options.max_objects = config.object_count[1];
        options.min_object_size = config.object_size[0];
        options.max_object_size = config.object_size[1];
        if (config.noise >= 0) options.noise_sigma = config.noise;
        m_options = options;
        m_train = make_images(options, SeedPurpose::TrainingImage, config.num_train_images);
        m_eval = make_images(options, SeedPurpose::EvalImage, config.num_eval_images);
    }

    Batch training_batch(std::int64_t index) const override {
        TESSERA_CHECK(index >= 0, "training batch indices start at 0, got " << index);
        const std::int64_t num_images = batch_shape()[0];
        Batch batch;
        batch.images = Tensor::empty(batch_shape(), DType::F32);
        const std::uint64_t seed = derived_seed(m_config.seed, SeedPurpose::Batch, static_cast<std::uint64_t>(index));
        for (std::int64_t n = 0; n < num_images; ++n) {
            SeededRandom random(seed, static_cast<std::uint64_t>(n));
            const std::int64_t which = uniform_index(random, static_cast<std::int64_t>(m_train.size()));
            const ShapesImage& source = m_train[static_cast<std::size_t>(which)]->get();
            Tensor image = source.image.clone();
            std::vector<detection::LabeledBox> objects = source.objects;
            // One draw per listed axis, always, so the stream does not depend on earlier outcomes.
            for (int axis : m_config.augment.flip_axes) {
                if (random.uniform() < 0.5) flip_with_boxes(image, objects, axis);
            }
            normalize(image, m_config.normalization, m_config.window_low, m_config.window_high);
            augment_intensity(image, m_config.augment, random);
            std::memcpy(batch.images.data<float>() + n * image.num_elements(), image.data<float>(), image.num_bytes());
            batch.ground_truth.push_back(
                pad_sample_ground_truth(objects, {.max_number_of_boxes = m_config.max_number_of_boxes, .excess_boxes = m_config.excess_boxes},
                                        "synthetic shapes training image " + std::to_string(which)));
        }
        return batch;
    }

    std::int64_t num_eval_examples() const override { return static_cast<std::int64_t>(m_eval.size()); }

    Example eval_example(std::int64_t i) const override {
        TESSERA_CHECK(i >= 0 && i < num_eval_examples(),
                      "eval example " << i << " does not exist: this dataset holds out " << num_eval_examples());
        const ShapesImage& source = m_eval[static_cast<std::size_t>(i)]->get();
        Example example;
        example.name = "shapes_eval_" + std::to_string(i);
        example.image = source.image.clone();
        normalize(example.image, m_config.normalization, m_config.window_low, m_config.window_high);
        example.objects = source.objects;
        example.geometry.size[0] = batch_shape()[3];
        example.geometry.size[1] = batch_shape()[2];
        return example;
    }

    std::int64_t num_classes() const override { return m_num_classes; }
    bool is_detection() const override { return true; }

    // A model with more classes than the four shapes (a COCO-sized head, to train the model that is
    // planned) learns the rest as classes that never occur.
    std::vector<std::string> class_names() const override {
        std::vector<std::string> names;
        for (std::int32_t id = 0; id < num_shape_classes; ++id) names.emplace_back(shape_class_name(id));
        for (std::int64_t id = num_shape_classes; id < m_num_classes; ++id) names.push_back("unused " + std::to_string(id));
        return names;
    }

    std::string describe() const override {
        const std::array<std::int64_t, 2> count = shapes_object_count_range(m_options);
        std::ostringstream text;
        text << "synthetic shapes " << batch_shape()[3] << "×" << batch_shape()[2] << " (" << batch_shape()[1]
             << (batch_shape()[1] == 1 ? " channel" : " channels") << "), " << count[0] << "–" << count[1] << " discs, squares, "
             << "triangles and crosses of " << m_options.min_object_size << "–" << m_options.max_object_size << " px per image, "
             << m_train.size() << " training + " << m_eval.size() << " held out, boxes padded to " << m_config.max_number_of_boxes;
        if (m_num_classes > num_shape_classes) text << "; classes 0–3 of the model's " << m_num_classes;
        return text.str();
    }

private:
    std::vector<std::unique_ptr<LazyShapes>> make_images(const ShapesOptions& options, SeedPurpose purpose, std::int64_t count) const {
        std::vector<std::unique_ptr<LazyShapes>> images;
        for (std::int64_t i = 0; i < count; ++i) {
            auto image = std::make_unique<LazyShapes>();
            image->options = options;
            image->options.seed = derived_seed(m_config.seed, purpose, static_cast<std::uint64_t>(i));
            images.push_back(std::move(image));
        }
        return images;
    }

    DataConfig m_config;
    std::int64_t m_num_classes;
    ShapesOptions m_options;
    std::vector<std::unique_ptr<LazyShapes>> m_train, m_eval;
};

}  // namespace

std::unique_ptr<Dataset> make_synthetic_shapes(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes) {
    TESSERA_CHECK(batch_shape.size() == 4,
                  "synthetic shapes are 2D images: the model input must be [N, C, H, W], got " << shape_to_string(batch_shape));
    TESSERA_CHECK(batch_shape[1] == 1 || batch_shape[1] == 3,
                  "synthetic shapes are drawn in RGB (3 channels) or grey (1): set input.channels to 3 or 1, got "
                      << batch_shape[1]);
    TESSERA_CHECK(num_classes >= num_shape_classes,
                  "synthetic shapes have " << num_shape_classes << " classes (disc, square, triangle, cross): set model.num_classes to "
                                           << num_shape_classes << " or more, got " << num_classes);
    TESSERA_CHECK(config.image_size.empty() ||
                      (config.image_size.size() == 2 && config.image_size[0] == batch_shape[2] && config.image_size[1] == batch_shape[3]),
                  "synthetic shapes are drawn at the model input's size (static shapes), " << batch_shape[2] << "×" << batch_shape[3]
                                                                                         << "; leave data.image_size out, got "
                                                                                         << shape_to_string(config.image_size));
    for (int axis : config.augment.flip_axes) {
        TESSERA_CHECK(axis == 0 || axis == 1, "data.augment.flip_axes holds " << axis << ": a 2D image flips along 0 (rows) or 1 (columns)");
    }
    TESSERA_CHECK(!config.augment.rotate90,
                  "data.augment.rotate90 turns label maps, not boxes; a detection source augments with flip_axes and intensity "
                  "changes: remove rotate90");
    return std::make_unique<ShapesDataset>(config, batch_shape, num_classes);
}

}  // namespace tessera::data::detail
