// Fuzz target: MetaImage with its data inside the file (.mha, ElementDataFile = LOCAL).
// The input is the whole file.
#include "volume_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    return tessera::fuzz::fuzz_volume_file("fuzz.mha", data, size);
}
