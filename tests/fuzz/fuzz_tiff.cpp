// Fuzz target: TIFF (.tif): stacks of pages and single-page 2D images, through OpenCV.
// The input is the whole file.
#include "volume_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    return tessera::fuzz::fuzz_volume_file("fuzz.tif", data, size);
}
