// Fuzz target: PNG (.png): 2D images through OpenCV.
// The input is the whole file.
#include "volume_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    return tessera::fuzz::fuzz_volume_file("fuzz.png", data, size);
}
