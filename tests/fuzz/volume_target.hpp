// The volume readers take paths: the input becomes a file with the format's extension, read as a
// volume and, when that succeeds, as a label map (which adds the whole-number and int32-range checks).
#pragma once

#include "fuzz_support.hpp"
#include "io/volume_io.hpp"

namespace tessera::fuzz {

// The volume budget the readers check before allocating, set below libFuzzer's 2 GB memory limit (unless
// the environment sets one): a file within the budget is allowed to be read whole, and a reader that
// allocates past its budget is then a finding, not libFuzzer's out-of-memory.
inline void use_fuzzing_volume_budget() {
    static const bool once = [] { return ::setenv("TESSERA_MAX_VOLUME_BYTES", "256MiB", 0) == 0; }();
    (void)once;
}

inline void read_volume_and_labels(const std::filesystem::path& path) {
    use_fuzzing_volume_budget();
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
