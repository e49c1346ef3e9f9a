// Fuzz target: NIfTI-1/2 (.nii): header fields, dimensions, datatypes, vox_offset, scaling.
// The input is the whole file.
#include "volume_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    return tessera::fuzz::fuzz_volume_file("fuzz.nii", data, size);
}
