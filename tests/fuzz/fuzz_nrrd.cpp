// Fuzz target: NRRD with its data attached (.nrrd): raw, gzip, text or hex encodings behind the header.
// The input is the whole file.
#include "volume_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    return tessera::fuzz::fuzz_volume_file("fuzz.nrrd", data, size);
}
