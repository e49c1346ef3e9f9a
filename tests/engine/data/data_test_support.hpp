// Helpers shared by the data tests: scratch folders, small image/label files on disk, and
// comparisons of batches.
#pragma once

#include "support/scratch_dir.hpp"

#include "data/dataset.hpp"
#include "io/volume_io.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <unistd.h>

namespace tessera::data::test {

namespace fs = std::filesystem;

// A fresh folder per test (tests/support/scratch_dir.hpp), named for these tests.
class ScratchDir : public ::tessera::test::ScratchDir {
public:
    ScratchDir() : ::tessera::test::ScratchDir("data_test") {}
};

inline void touch(const fs::path& path) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << "";
}

// Writes an image and its label map on the grid size {W, H, D} (D = 1: a 2D image), the voxels
// given by functions of (z, y, x).
inline void write_pair(const fs::path& image_path, const fs::path& labels_path, std::array<std::int64_t, 3> size,
                       const std::function<float(std::int64_t, std::int64_t, std::int64_t)>& image_of,
                       const std::function<std::int32_t(std::int64_t, std::int64_t, std::int64_t)>& label_of) {
    ImageGeometry geometry;
    geometry.size = size;
    geometry.spacing = {0.5, 0.75, 2.0};
    geometry.origin = {-10.0, 4.0, 30.0};
    Volume volume = make_volume(geometry);
    volume.source_scalar_type = "float32";
    LabelMap labels = make_label_map(geometry);
    float* voxels = volume.voxels.data<float>();
    std::int32_t* label_voxels = labels.labels.data<std::int32_t>();
    std::int64_t v = 0;
    for (std::int64_t z = 0; z < size[2]; ++z) {
        for (std::int64_t y = 0; y < size[1]; ++y) {
            for (std::int64_t x = 0; x < size[0]; ++x, ++v) {
                voxels[v] = image_of(z, y, x);
                label_voxels[v] = label_of(z, y, x);
            }
        }
    }
    fs::create_directories(image_path.parent_path());
    fs::create_directories(labels_path.parent_path());
    write_volume(volume, image_path);
    write_label_map(labels, labels_path);
}

inline bool same_bytes(const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && a.dtype() == b.dtype() &&
           std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0;
}

inline bool same_batch(const Batch& a, const Batch& b) {
    return same_bytes(a.images, b.images) && same_bytes(a.labels, b.labels);
}

// Runs `body`, expects a tessera::Error, and returns its message.
inline std::string error_message(const std::function<void()>& body) {
    try {
        body();
    } catch (const Error& error) {
        return error.what();
    }
    ADD_FAILURE() << "expected a tessera::Error";
    return "";
}

}  // namespace tessera::data::test
