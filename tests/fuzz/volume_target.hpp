// The volume readers take paths: the input becomes a file with the format's extension, read as a
// volume and, when that succeeds, as a label map (which adds the whole-number and int32-range checks).
#pragma once

#include "fuzz_support.hpp"
#include "io/volume_io.hpp"

namespace tessera::fuzz {

inline void read_volume_and_labels(const std::filesystem::path& path) {
    bool read = false;
    expect_success_or_error([&] {
        (void)read_volume(path);
        read = true;
    });
    if (read) expect_success_or_error([&] { (void)read_label_map(path); });
}

inline int fuzz_volume_file(std::string_view name, const std::uint8_t* data, std::size_t size) {
    read_volume_and_labels(input_file(name, data, size));
    return 0;
}

}  // namespace tessera::fuzz
