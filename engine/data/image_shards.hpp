// A folder of class folders as TFRecord shards of tf.Example, laid out as TensorFlow's ImageNet builder
// (build_imagenet_data.py) writes them and the ResNet seed reads them:
//
//   photos/                          photos-00000-of-00004 … photos-00003-of-00004
//     cat/001.jpg  cat/002.png  →     image/encoded      the file's bytes as stored (JPEG or PNG, not re-encoded)
//     dog/001.jpg                      image/class/label  first_label + the class folder's index (names sorted)
//                                      image/class/synset the class folder's name; image/filename the file's name
//                                      image/format "JPEG" | "PNG"; image/height, image/width, image/channels (3)
//
//   ShardSummary written = write_image_shards("photos", "out/photos", {.num_shards = 4});
//
// Images go to the shards in a fixed shuffled order (seeded), so every shard holds every class in about
// its share. A file that is no PNG or JPEG, an empty class folder, or a folder without class folders is an
// error naming it; hidden files are skipped. Each shard is written atomically.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera::data {

struct ImageShardOptions {
    std::int64_t num_shards = 1;
    std::int64_t first_label = 1;  // ImageNet's TFRecords count classes from 1 (0 is background); the seed subtracts 1
    std::uint64_t seed = 1;        // the order images are dealt to the shards
};

struct ShardSummary {
    std::vector<std::filesystem::path> shards;
    std::vector<std::string> classes;   // by label − first_label
    std::int64_t num_images = 0;
    std::uint64_t num_bytes = 0;        // of the shards
};

ShardSummary write_image_shards(const std::filesystem::path& folder, const std::filesystem::path& prefix, const ImageShardOptions& options);

}  // namespace tessera::data
