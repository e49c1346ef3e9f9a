#include "data/image_shards.hpp"

#include "core/error.hpp"
#include "core/random.hpp"
#include "core/user_files.hpp"
#include "io/color_image.hpp"
#include "io/tf_example.hpp"
#include "io/tfrecord.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>

namespace fs = std::filesystem;

namespace tessera::data {

namespace {

struct ImageFile {
    fs::path path;
    std::int64_t label = 0;
    std::string synset;
};

bool hidden(const fs::path& path) { return path.filename().string().starts_with('.'); }

std::string read_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    TESSERA_CHECK(in.is_open(), "cannot read " << path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// "JPEG" or "PNG" from the file's first bytes (its name may say otherwise).
std::string image_format(const std::string& bytes, const fs::path& path) {
    if (bytes.size() >= 3 && static_cast<unsigned char>(bytes[0]) == 0xFF && static_cast<unsigned char>(bytes[1]) == 0xD8 &&
        static_cast<unsigned char>(bytes[2]) == 0xFF) {
        return "JPEG";
    }
    if (bytes.size() >= 8 && bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0) return "PNG";
    TESSERA_REJECT(path << " is neither a JPEG nor a PNG image (by its first bytes): move it out of the class folder, or convert it");
}

}  // namespace

ShardSummary write_image_shards(const fs::path& folder, const fs::path& prefix, const ImageShardOptions& options) {
    TESSERA_CHECK(file_kind(folder) == FileKind::Folder,
                  "cannot make shards of " << folder << ": it is " << file_kind_name(file_kind(folder)) << ", not a folder of class folders");
    TESSERA_CHECK(options.num_shards >= 1 && options.num_shards <= 100000, "--shards must be from 1 to 100000, got " << options.num_shards);
    ShardSummary summary;
    std::vector<fs::path> class_folders;
    for (const fs::directory_entry& entry : fs::directory_iterator(folder)) {
        if (entry.is_directory() && !hidden(entry.path())) class_folders.push_back(entry.path());
    }
    std::sort(class_folders.begin(), class_folders.end());
    TESSERA_CHECK(!class_folders.empty(), folder << " holds no class folders: put each class's images in a folder named after it "
                                                    "(photos/cat/001.jpg, photos/dog/001.jpg)");
    std::vector<ImageFile> images;
    for (std::size_t c = 0; c < class_folders.size(); ++c) {
        std::vector<fs::path> files;
        for (const fs::directory_entry& entry : fs::directory_iterator(class_folders[c])) {
            if (entry.is_regular_file() && !hidden(entry.path())) files.push_back(entry.path());
        }
        TESSERA_CHECK(!files.empty(), "the class folder " << class_folders[c] << " holds no images: remove it or add its images");
        std::sort(files.begin(), files.end());
        const std::string synset = class_folders[c].filename().string();
        summary.classes.push_back(synset);
        for (const fs::path& file : files) images.push_back({file, options.first_label + static_cast<std::int64_t>(c), synset});
    }
    // A fixed shuffle (Fisher–Yates with the seed), then dealt round-robin: classes spread over the shards.
    SeededRandom random(options.seed);
    for (std::size_t i = images.size(); i > 1; --i) std::swap(images[i - 1], images[static_cast<std::size_t>(random.next() % i)]);

    const auto shard_count = static_cast<std::size_t>(options.num_shards);
    std::vector<std::vector<std::vector<std::byte>>> records(shard_count);
    for (std::size_t i = 0; i < images.size(); ++i) {
        const ImageFile& image = images[i];
        const std::string bytes = read_bytes(image.path);
        const std::string format = image_format(bytes, image.path);
        const std::array<std::int64_t, 2> size = read_color_image_size(image.path);  // [H, W], header only
        io::TFExample example;
        example["image/encoded"] = {.kind = io::TFFeature::Kind::Bytes, .bytes = {bytes}};
        example["image/format"] = {.kind = io::TFFeature::Kind::Bytes, .bytes = {format}};
        example["image/filename"] = {.kind = io::TFFeature::Kind::Bytes, .bytes = {image.path.filename().string()}};
        example["image/class/label"] = {.kind = io::TFFeature::Kind::Int64, .int64s = {image.label}};
        example["image/class/synset"] = {.kind = io::TFFeature::Kind::Bytes, .bytes = {image.synset}};
        example["image/height"] = {.kind = io::TFFeature::Kind::Int64, .int64s = {size[0]}};
        example["image/width"] = {.kind = io::TFFeature::Kind::Int64, .int64s = {size[1]}};
        example["image/channels"] = {.kind = io::TFFeature::Kind::Int64, .int64s = {3}};
        records[i % shard_count].push_back(io::serialize_tf_example(example));
    }
    if (!prefix.parent_path().empty()) fs::create_directories(prefix.parent_path());
    for (std::size_t s = 0; s < shard_count; ++s) {
        char suffix[64];
        std::snprintf(suffix, sizeof suffix, "-%05zu-of-%05zu", s, shard_count);
        const fs::path shard = prefix.string() + suffix;
        io::write_tfrecords(shard, records[s]);
        summary.shards.push_back(shard);
        summary.num_bytes += static_cast<std::uint64_t>(fs::file_size(shard));
    }
    summary.num_images = static_cast<std::int64_t>(images.size());
    return summary;
}

}  // namespace tessera::data
