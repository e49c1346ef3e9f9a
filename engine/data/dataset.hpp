// Training data: where the images come from, how patches are cut from them, and the held-out examples.
//
// A Dataset turns a DataConfig into training batches for a model input shape. Batch `i` is a pure
// function of (config, i): the sampler's whole state is the next index, so a resumed run sees exactly
// the batches an uninterrupted one would, and batches can be prepared ahead on another thread
// (Prefetcher, prefetcher.hpp).
//
//   DataConfig config;                                   // synthetic EM sections, 8 + 2 held out
//   config.augment.flip_axes = {0, 1};
//   auto dataset = make_dataset(config, {8, 1, 256, 256}, /*num_classes=*/2);
//   Batch batch = dataset->training_batch(0);            // images [8, 1, 256, 256] f32, labels [8, 256, 256] i32
//   Example held_out = dataset->eval_example(0);         // the whole 512×512 section, for sliding_window_predict
//
// Sources: synthetic EM sections (synthetic_em.hpp), synthetic CT phantoms (phantom.hpp), fake images
// for classification, image/label pairs from folders, the example head MRI (examples.hpp), and for
// detection synthetic shapes (synthetic_shapes.hpp) and COCO-format datasets (coco_dataset.hpp): their
// batches carry boxes instead of label maps.
// Internally every image is [C, D, H, W] with D = 1 for 2D, so one sampler serves 2D and 3D models.
//
// Every random draw comes from tessera::SeededRandom streams derived from (seed, what, index), never
// from std:: distributions, so batches are bit-identical on every machine.
#pragma once

#include "data/detection_transforms.hpp"
#include "detection/anchor_labeler.hpp"
#include "detection/box.hpp"
#include "io/volume.hpp"
#include "tensor/tensor.hpp"

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::data {

struct Batch {
    Tensor images;  // [N, C, (D,) H, W] f32
    Tensor labels;  // [N, (D,) H, W] i32 (segmentation) or [N] i32 (classification); empty for detection
    // Detection: each image's boxes (pixels of `images`) padded to max_number_of_boxes, N entries.
    std::vector<detection::PaddedGroundTruth> ground_truth{};
};

// A whole held-out image or volume for evaluation and prediction (not a patch).
struct Example {
    std::string name;        // "em_eval_0", the file stem, "head_mri slices 47-61"
    Tensor image;            // [C, (D,) H, W] f32, normalised like the training batches
    Tensor labels;           // [(D,) H, W] i32, or [1] i32 for classification; empty for detection
    ImageGeometry geometry;  // of image/labels, so predictions can be written as label volumes
    std::vector<detection::LabeledBox> objects{};  // detection: the image's boxes, pixels, class ids
};

enum class SourceKind { SyntheticEm, SyntheticCt, FakeImages, Folder, ExampleMri, SyntheticShapes, Coco, TFRecord, Volume };
// True for the sources whose examples are boxes (detection) rather than label maps or labels.
bool is_detection_source(SourceKind kind);
// Crop: patches sampled from larger images (default). Resize: the whole image resampled to the model
// input. PadToMax: aspect ratio kept, the longest side scaled to the input, the rest padded at the end
// (the detection seed's static shapes). A COCO source takes Resize or PadToMax, never Crop.
enum class StaticShape { Crop, Resize, PadToMax };
// ZScore: per image/volume and channel, mean 0 and standard deviation 1. Window: [window_low,
// window_high] -> [0, 1], clamped.
enum class Normalization { None, ZScore, Window };
// Volume source: whether the image is read whole or patch by patch (a volume larger than memory). Auto:
// by region when the file can be read so (HDF5 datasets, uncompressed .nii) and reading it whole would
// pass TESSERA_MAX_VOLUME_BYTES; whole otherwise.
enum class RegionReading { Auto, Always, Never };
// What a training image's NaN or infinite voxels do: stop the run before it starts (a NaN in the input
// makes every loss NaN), or become 0 before normalisation.
enum class NonFinitePolicy { Error, Zero };

std::string_view source_kind_name(SourceKind kind);          // "SyntheticEm", ...
std::string_view static_shape_name(StaticShape shape);       // "Crop", ...
std::string_view normalization_name(Normalization normalization);  // "ZScore", ...

struct AugmentConfig {
    std::vector<int> flip_axes{};  // spatial axes (0 = first spatial axis) each flipped with probability 0.5
    bool rotate90 = false;         // a random multiple of 90° in the last two spatial axes, only when they
                                   // are equal (a non-square input is left unrotated)
    double intensity_scale = 0;    // image *= 1 + U(-s, s)
    double intensity_shift = 0;    // image += U(-s, s), after normalisation
    // Fake images (classification) are not augmented: random noise has nothing to learn invariance to.
};

// One entry of data.label_mapping: the file labels [low, high] become class `to`. The experiment file
// writes it as a key — "4", a range "1-255", or a threshold ">0", ">=1", "<10", "<=9" — which `key`
// keeps for messages.
struct LabelRule {
    std::int32_t low = 0, high = 0;  // inclusive
    std::int32_t to = 0;
    std::string key;
    LabelRule() = default;
    LabelRule(std::int32_t label, std::int32_t class_index) : low(label), high(label), to(class_index) {}
    static LabelRule range(std::int32_t low, std::int32_t high, std::int32_t class_index, std::string key = "");
    bool covers(std::int32_t label) const { return label >= low && label <= high; }
    std::string text() const;  // the key, or "4" / "1-255" when built in code
};

// Reads a data.label_mapping key ("4", "1-255", ">0", ">=1", "<10", "<=9"); nothing when it is none of them.
std::optional<LabelRule> parse_label_rule_key(const std::string& key, std::int32_t class_index);

struct DataConfig {
    SourceKind source = SourceKind::SyntheticEm;
    std::uint64_t seed = 1;
    // Synthetic sources.
    std::vector<std::int64_t> image_size{};  // [(D,) H, W] of each generated image; empty: EM 512×512, CT and
                                             // fake images the model input's
    std::int64_t num_train_images = 8;       // distinct synthetic training images (generated once, lazily, cached)
    std::int64_t num_eval_images = 2;        // distinct held-out ones (another stream of the seed)
    double noise = -1;                       // noise sigma in the source's units (EM grey levels, CT HU); < 0: default
    // Folder source: image/label pairs matched by name (same stem after stripping extensions such as
    // .nii.gz, and a suffix _label/_labels/_mask/_seg on the label side). Empty labels_dir: the labels
    // sit beside the images, told apart by that suffix. Coco: images_dir holds the images the
    // annotations' file_name entries name.
    std::filesystem::path images_dir{}, labels_dir{};
    // File label -> class; empty = identity (ExampleMri: non-zero -> 1). Labels not in a non-empty
    // mapping become 0 (background). A rule covers one label or a range of them.
    std::vector<LabelRule> label_mapping{};
    Normalization normalization = Normalization::ZScore;
    double window_low = 0, window_high = 1;
    StaticShape static_shape = StaticShape::Crop;
    double foreground_fraction = 0.5;  // Crop: probability that a patch is centred on a random foreground voxel
    AugmentConfig augment{};
    // Evaluation split. A source with a single image/volume (ExampleMri, a folder with one pair) holds out
    // the last holdout_fraction of the slices along the first spatial axis (D for volumes, H for 2D
    // images), never sampled for training; several pairs hold out the last holdout_fraction of the sorted
    // pairs (at least one), and Coco the last holdout_fraction of the annotation file's images (at least
    // one) unless it has eval_annotations_file. 0 holds out nothing.
    double holdout_fraction = 0.25;
    NonFinitePolicy non_finite = NonFinitePolicy::Error;  // data.non_finite: "error" | "zero"
    // Detection sources.
    std::int64_t max_number_of_boxes = 100;  // G: every image's ground truth padded to [G, 4] (static shapes)
    // What an image with more than G objects does: stop with an error naming it (default), or keep the G
    // largest or the first G (data.excess_boxes).
    ExcessBoxes excess_boxes = ExcessBoxes::Error;
    // Synthetic shapes: objects per image ([-1, -1]: automatic, the density of synthetic_shapes.hpp) and
    // the larger box side's range in pixels.
    std::array<std::int64_t, 2> object_count{-1, -1};
    std::array<double, 2> object_size{8, 400};
    // Coco (coco_dataset.hpp): the instances.json (images from images_dir); optionally a second one for
    // the held-out images (then holdout_fraction is not used) with its folder (empty: images_dir).
    std::filesystem::path annotations_file{};
    std::filesystem::path eval_annotations_file{}, eval_images_dir{};
    // Categories kept, by COCO id and/or name (both empty: all); classes are the kept categories in
    // ascending COCO id order (CocoDataset's rule), whatever the order listed.
    std::vector<std::int64_t> category_ids{};
    std::vector<std::string> category_names{};
    // Training only: each image scaled by U(min, max) × the size that fits the input, then cropped at a
    // random offset or padded at the bottom right (random_scale_jitter). [1, 1]: no jitter (no draws).
    std::array<double, 2> scale_jitter{1, 1};
    // TFRecord (classifiers, tfrecord_source.cpp): shards of tf.Example named by a pattern whose file name
    // may hold * ? [...] ("imagenet/train-*-of-01024"), and optionally the held-out shards' (else the last
    // holdout_fraction of the records is held out). A record's class is image/class/label − first_label
    // (ImageNet's shards count from 1, as `tessera-cli convert` writes by default).
    std::filesystem::path records{}, eval_records{};
    std::int64_t first_label = 1;
    // Volume (one image and its label map, each a file or an HDF5 dataset "sample_A.h5:/volumes/raw"):
    // the last holdout_fraction of its slices (rows for 2D) is held out. Read by region (Crop only),
    // patches come from the file as a batch needs them (io/volume_region.hpp).
    std::filesystem::path image_file{}, label_file{};
    RegionReading read_by_region = RegionReading::Auto;
};

// Checks the config on its own (throws tessera::Error naming the field, the value and what is allowed).
// make_dataset also checks it against the model input.
void validate(const DataConfig& config);

class Dataset {
public:
    virtual ~Dataset() = default;
    Dataset(const Dataset&) = delete;
    Dataset& operator=(const Dataset&) = delete;

    // Training batch number `index` (0, 1, 2, ...): a pure function of (config, index), the same tensors
    // on every call, on every machine, from any thread, in any order.
    virtual Batch training_batch(std::int64_t index) const = 0;
    virtual std::int64_t num_eval_examples() const = 0;
    virtual Example eval_example(std::int64_t i) const = 0;
    virtual std::int64_t num_classes() const = 0;
    virtual std::string describe() const = 0;  // one line: "synthetic EM sections 512×512, 8 training + 2 held out, ..."
    // Names of the classes, by id ("disc", …); empty when the source does not name them.
    virtual std::vector<std::string> class_names() const { return {}; }
    virtual bool is_detection() const { return false; }
    const Shape& batch_shape() const { return m_batch_shape; }  // [N, C, (D,) H, W] of training_batch(i).images

protected:
    explicit Dataset(Shape batch_shape) : m_batch_shape(std::move(batch_shape)) {}

private:
    Shape m_batch_shape;  // [N, C, (D,) H, W]
};

// batch_shape: the model input for one step over all replicas [N, C, (D,) H, W]; num_classes: the
// model's. Throws a clear error when the source cannot feed that shape (a 3D model on 2D images, a
// channel mismatch, a label >= num_classes after mapping, ...). Folder and ExampleMri files are read
// here; synthetic images are generated when first sampled.
std::unique_ptr<Dataset> make_dataset(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes);

// A 2D example's image as a one-slice grey volume on its geometry (the mean of its channels: an RGB
// detection image drawn where a scalar image is expected), named after the example.
Volume example_grey_volume(const Example& example);

}  // namespace tessera::data
