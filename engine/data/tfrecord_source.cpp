// The TFRecord source (classifiers): shards of tf.Example holding encoded images and their class, as
// TensorFlow's ImageNet builder writes them and the ResNet seed reads them (image/encoded JPEG or PNG,
// image/class/label counted from data.first_label).
//
// make_tfrecord_images finds the shards (sorted by name) and indexes every record by reading headers only
// (TFRecordReader::skip: the length's CRC is checked, the data is not read); a record's data, its CRC and
// its image are read when a batch or held-out example needs it, on the thread that asks (the prefetch
// thread while a step runs).
//
// Training sample n of batch i is sample s = i·N + n of the stream; the stream visits every training
// record once per epoch (epoch s / R of R records) in an order shuffled per epoch from (seed, epoch), so
// batches stay a pure function of i. Its augmentation draws come from the stream (seed, i, n): the crop
// offset's two draws (static_shape "crop"), one per flip axis, one for rotate90 when asked, the intensity
// change's two. Steps:
//   read record → parse tf.Example → decode → grey if the input has 1 channel → normalise → static shape
//   → flips → rotate90 → intensity change.
// Static shapes: "resize" (default) the whole image to the input (aspect ratio changes); "pad_to_max" the
// aspect ratio kept, padded at the bottom right; "crop" a window of the input's size at a random offset
// (held out: centred), zeros where the image is smaller.
#include "data/sources.hpp"

#include "data/transforms.hpp"
#include "io/color_image.hpp"
#include "io/tf_example.hpp"
#include "io/tfrecord.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <sstream>
#include <system_error>

namespace tessera::data::detail {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view image_key = "image/encoded";
constexpr std::string_view label_key = "image/class/label";
constexpr std::string_view file_name_key = "image/filename";

struct RecordRef {
    std::int32_t shard = 0;   // index into the shard list
    std::int32_t number = 0;  // the record's position in its shard (0 = first), for messages and names
    std::uint64_t offset = 0; // byte offset of its header
};

// The files a pattern names: wildcards (* ? [...]) in its last component only, sorted by name.
std::vector<fs::path> matching_files(const fs::path& pattern, std::string_view field) {
    const fs::path folder = pattern.has_parent_path() ? pattern.parent_path() : fs::path(".");
    const std::string name_pattern = pattern.filename().string();
    TESSERA_CHECK(!name_pattern.empty(), "data." << field << " " << pattern << " names a folder: add the shards' file names, e.g. "
                                                 << (folder / "train-*").string());
    TESSERA_CHECK(folder.string().find_first_of("*?[") == std::string::npos,
                  "data." << field << " " << pattern << " has wildcards in its folder part: wildcards may only stand in the "
                                                        "file name (e.g. \"imagenet/train-*\")");
    std::error_code error;
    TESSERA_CHECK(fs::is_directory(folder, error), "data." << field << " " << pattern << ": the folder " << folder
                                                           << " does not exist; check the path (relative paths start at the "
                                                              "experiment file's folder)");
    std::vector<fs::path> files;
    std::int64_t others = 0;
    for (const fs::directory_entry& entry : fs::directory_iterator(folder)) {
        if (!entry.is_regular_file(error)) continue;
        if (fnmatch(name_pattern.c_str(), entry.path().filename().c_str(), FNM_PERIOD) == 0) {
            files.push_back(entry.path());
        } else {
            ++others;
        }
    }
    TESSERA_CHECK(!files.empty(), "data." << field << " " << pattern << " matches no file in " << folder << " (it holds " << others
                                          << (others == 1 ? " other file" : " other files")
                                          << "): check the pattern, e.g. \"train-*\" for train-00000-of-01024 …");
    std::sort(files.begin(), files.end());
    return files;
}

// One split's shards and records.
struct Split {
    std::vector<fs::path> shards;
    std::vector<RecordRef> records;
};

void index_shards(Split& split) {
    for (std::size_t shard = 0; shard < split.shards.size(); ++shard) {
        io::TFRecordReader reader(split.shards[shard]);
        std::int32_t number = 0;
        while (reader.skip()) {
            split.records.push_back({static_cast<std::int32_t>(shard), number++, reader.record_offset()});
        }
    }
}

std::string percent_text(double fraction) {
    std::ostringstream text;
    text << std::lround(100 * fraction) << " %";
    return text.str();
}

// One decoded record: its image [3, h, w] f32 in [0, 1] and its class.
struct DecodedRecord {
    Tensor image;
    std::int32_t class_index = 0;
    std::string name;
};

class TFRecordImages final : public Dataset {
public:
    TFRecordImages(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes, Split train, Split eval,
                   std::string description)
        : Dataset(batch_shape),
          m_config(config),
          m_num_classes(num_classes),
          m_train(std::move(train)),
          m_eval(std::move(eval)),
          m_description(std::move(description)) {}

    Batch training_batch(std::int64_t index) const override {
        TESSERA_CHECK(index >= 0, "training batch indices start at 0, got " << index);
        const std::int64_t num_images = batch_shape()[0];
        Batch batch{Tensor::empty(batch_shape(), DType::F32), Tensor::empty({num_images}, DType::I32)};
        const std::uint64_t seed = derived_seed(m_config.seed, SeedPurpose::Batch, static_cast<std::uint64_t>(index));
        const auto num_records = static_cast<std::int64_t>(m_train.records.size());
        for (std::int64_t n = 0; n < num_images; ++n) {
            const std::int64_t sample = index * num_images + n;
            const std::int64_t position = sample % num_records;
            const std::shared_ptr<const std::vector<std::int64_t>> order = epoch_order(sample / num_records);
            const RecordRef& record = m_train.records[static_cast<std::size_t>((*order)[static_cast<std::size_t>(position)])];
            SeededRandom random(seed, static_cast<std::uint64_t>(n));
            DecodedRecord decoded = decode(m_train, record);
            Tensor image = to_input(std::move(decoded.image), &random);
            for (int axis : m_config.augment.flip_axes) {
                if (random.uniform() < 0.5) flip(image, axis + 1);
            }
            if (m_config.augment.rotate90) image = rotate90(image, static_cast<int>(uniform_index(random, 4)));
            augment_intensity(image, m_config.augment, random);
            std::memcpy(batch.images.data<float>() + n * image.num_elements(), image.data<float>(), image.num_bytes());
            batch.labels.data<std::int32_t>()[n] = decoded.class_index;
        }
        return batch;
    }

    std::int64_t num_eval_examples() const override { return static_cast<std::int64_t>(m_eval.records.size()); }

    Example eval_example(std::int64_t i) const override {
        TESSERA_CHECK(i >= 0 && i < num_eval_examples(),
                      "eval example " << i << " does not exist: this dataset holds out " << num_eval_examples());
        DecodedRecord decoded = decode(m_eval, m_eval.records[static_cast<std::size_t>(i)]);
        Example example;
        example.name = std::move(decoded.name);
        example.image = to_input(std::move(decoded.image), nullptr);
        example.labels = Tensor::full<std::int32_t>({1}, decoded.class_index);
        example.geometry.size[0] = batch_shape()[3];
        example.geometry.size[1] = batch_shape()[2];
        return example;
    }

    std::int64_t num_classes() const override { return m_num_classes; }
    std::string describe() const override { return m_description; }

private:
    std::array<std::int64_t, 2> input_size() const { return {batch_shape()[2], batch_shape()[3]}; }

    // The training records' order in `epoch`: a permutation of [0, R) shuffled from (seed, epoch). The
    // last two epochs' orders are kept (a batch may straddle two).
    std::shared_ptr<const std::vector<std::int64_t>> epoch_order(std::int64_t epoch) const {
        const std::lock_guard lock(m_orders_mutex);
        if (const auto found = m_orders.find(epoch); found != m_orders.end()) return found->second;
        auto order = std::make_shared<std::vector<std::int64_t>>(m_train.records.size());
        std::iota(order->begin(), order->end(), std::int64_t{0});
        SeededRandom random(derived_seed(m_config.seed, SeedPurpose::Shuffle, static_cast<std::uint64_t>(epoch)));
        for (std::int64_t i = static_cast<std::int64_t>(order->size()) - 1; i > 0; --i) {  // Fisher–Yates
            std::swap((*order)[static_cast<std::size_t>(i)], (*order)[static_cast<std::size_t>(uniform_index(random, i + 1))]);
        }
        m_orders.emplace(epoch, order);
        while (m_orders.size() > 2) {  // drop the epoch farthest from this one
            const auto first = m_orders.begin(), last = std::prev(m_orders.end());
            m_orders.erase(epoch - first->first >= last->first - epoch ? first : last);
        }
        return order;
    }

    // Reads, checks and decodes one record (CRC, tf.Example, image, label).
    DecodedRecord decode(const Split& split, const RecordRef& record) const {
        const fs::path& shard = split.shards[static_cast<std::size_t>(record.shard)];
        std::ostringstream where_text;
        where_text << "record " << record.number << " (byte offset " << record.offset << ") of " << shard;
        const std::string where = where_text.str();
        io::TFRecordReader reader(shard);
        reader.seek(record.offset);
        std::vector<std::byte> data;
        TESSERA_CHECK(reader.next(data), where << " is missing: the shard is shorter than when it was indexed. Was it replaced "
                                                  "while training? Start the run again");
        io::TFExample example;
        try {
            example = io::parse_tf_example(data);
        } catch (const Error& error) {
            TESSERA_REJECT(where << " is not a tf.Example: " << error.what());
        }
        const auto keys_text = [&] {
            std::string keys;
            for (const auto& [key, feature] : example) keys += (keys.empty() ? "" : ", ") + key;
            return keys.empty() ? std::string("none") : keys;
        };
        const auto image_feature = example.find(std::string(image_key));
        TESSERA_CHECK(image_feature != example.end() && image_feature->second.kind == io::TFFeature::Kind::Bytes &&
                          image_feature->second.bytes.size() == 1,
                      where << " has no single encoded image under " << image_key << " (its features: " << keys_text()
                            << "): a classifier's shards hold image/encoded (JPEG or PNG bytes) and image/class/label, as "
                               "`tessera-cli convert --tfrecord` writes them");
        const auto label_feature = example.find(std::string(label_key));
        TESSERA_CHECK(label_feature != example.end() && label_feature->second.kind == io::TFFeature::Kind::Int64 &&
                          label_feature->second.int64s.size() == 1,
                      where << " has no single integer label under " << label_key << " (its features: " << keys_text()
                            << "): a classifier's shards hold image/encoded and image/class/label");
        const std::int64_t label = label_feature->second.int64s.front();
        const std::int64_t class_index = label - m_config.first_label;
        TESSERA_CHECK(class_index >= 0 && class_index < m_num_classes,
                      where << " has image/class/label " << label << ", which is class " << class_index
                            << " with data.first_label " << m_config.first_label << ", but the model has classes 0 to "
                            << m_num_classes - 1 << ": set data.first_label to the label of the first class (ImageNet's "
                                                    "shards: 1) or raise model.num_classes");
        const std::string& encoded = image_feature->second.bytes.front();
        DecodedRecord decoded;
        decoded.image = decode_color_image(std::as_bytes(std::span(encoded.data(), encoded.size())), "the image of " + where);
        decoded.class_index = static_cast<std::int32_t>(class_index);
        const auto file_name = example.find(std::string(file_name_key));
        decoded.name = file_name != example.end() && file_name->second.kind == io::TFFeature::Kind::Bytes &&
                               file_name->second.bytes.size() == 1 && !file_name->second.bytes.front().empty()
                           ? file_name->second.bytes.front()
                           : shard.filename().string() + "#" + std::to_string(record.number);
        return decoded;
    }

    // [3, h, w] in [0, 1] → [C, H, W] of the input, normalised. `random` is the training stream (the
    // crop's two draws, made whether or not the image is larger), null for a held-out image.
    Tensor to_input(Tensor rgb, SeededRandom* random) const {
        Tensor image = batch_shape()[1] == 1 ? mean_of_rgb(rgb) : std::move(rgb);
        normalize(image, m_config.normalization, m_config.window_low, m_config.window_high);
        const auto [height, width] = input_size();
        if (m_config.static_shape != StaticShape::Crop) {
            return whole_image_to_input(make_detection_sample(std::move(image), {}), m_config.static_shape, input_size()).image;
        }
        // A window of the input's size: anywhere it fits (or anywhere the image fits in it), centred when held out.
        std::array<std::int64_t, 2> begin{};
        const std::array<std::int64_t, 2> extent{height, width}, size{image.dim(1), image.dim(2)};
        for (int axis = 0; axis < 2; ++axis) {
            const std::int64_t slack = size[static_cast<std::size_t>(axis)] - extent[static_cast<std::size_t>(axis)];
            const std::int64_t low = std::min<std::int64_t>(0, slack), high = std::max<std::int64_t>(0, slack);
            begin[static_cast<std::size_t>(axis)] = random ? low + uniform_index(*random, high - low + 1) : slack / 2;
        }
        const std::array<std::int64_t, 3> box_begin{0, begin[0], begin[1]}, box_extent{image.dim(0), height, width};
        return crop_padded(image, box_begin, box_extent);
    }

    DataConfig m_config;
    std::int64_t m_num_classes;
    Split m_train, m_eval;
    std::string m_description;
    mutable std::mutex m_orders_mutex;
    mutable std::map<std::int64_t, std::shared_ptr<const std::vector<std::int64_t>>> m_orders;
};

}  // namespace

std::unique_ptr<Dataset> make_tfrecord_images(const DataConfig& config, const Shape& batch_shape, std::int64_t num_classes) {
    TESSERA_CHECK(batch_shape.size() == 4,
                  "TFRecord images are 2D: the model input must be [N, C, H, W], got " << shape_to_string(batch_shape));
    TESSERA_CHECK(batch_shape[1] == 3 || batch_shape[1] == 1,
                  "TFRecord images are read as RGB: set input.channels to 3 (or 1 for grey, the mean of R, G and B), got "
                      << batch_shape[1]);
    TESSERA_CHECK(config.image_size.empty(), "data.image_size sizes generated images; a TFRecord source's images come in their "
                                             "own sizes and are brought to the input by data.static_shape: remove it, got "
                                                 << shape_to_string(config.image_size));
    Split train, eval;
    train.shards = matching_files(config.records, "records");
    index_shards(train);
    const auto count = static_cast<std::int64_t>(train.records.size());
    TESSERA_CHECK(count >= 1, "the shards of data.records " << config.records << " (" << train.shards.size()
                                                            << ") hold no records: nothing to train on");
    std::ostringstream held_out;
    if (!config.eval_records.empty()) {
        eval.shards = matching_files(config.eval_records, "eval_records");
        index_shards(eval);
        held_out << eval.records.size() << " held out in " << eval.shards.size() << (eval.shards.size() == 1 ? " shard" : " shards");
    } else {
        const std::int64_t num_held_out =
            config.holdout_fraction > 0
                ? std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(config.holdout_fraction * static_cast<double>(count))))
                : 0;
        TESSERA_CHECK(num_held_out < count,
                      "the shards of data.records hold " << count << (count == 1 ? " record" : " records") << " and data.holdout_fraction "
                                                         << config.holdout_fraction << " holds out " << num_held_out
                                                         << ", leaving none for training: set data.holdout_fraction to 0, or give "
                                                            "the held-out images their own shards (data.eval_records)");
        eval.shards = train.shards;
        eval.records.assign(train.records.end() - num_held_out, train.records.end());
        train.records.resize(static_cast<std::size_t>(count - num_held_out));
        held_out << num_held_out << " held out (the last " << percent_text(config.holdout_fraction) << ")";
    }
    std::ostringstream text;
    text << "TFRecord '" << config.records.filename().string() << "': " << train.shards.size()
         << (train.shards.size() == 1 ? " shard, " : " shards, ") << train.records.size() << " training images + " << held_out.str()
         << ", classes image/class/label − " << config.first_label << " of " << num_classes << "; "
         << (config.static_shape == StaticShape::Resize     ? "resized to "
             : config.static_shape == StaticShape::PadToMax ? "scaled and padded to "
                                                            : "cropped to ")
         << batch_shape[3] << "×" << batch_shape[2] << (batch_shape[1] == 1 ? " grey" : " RGB");
    return std::make_unique<TFRecordImages>(config, batch_shape, num_classes, std::move(train), std::move(eval), text.str());
}

}  // namespace tessera::data::detail
