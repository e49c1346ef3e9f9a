// Fuzz target: FreeSurfer's MGH volumes. An input starting with the gzip magic (1f 8b) is read as .mgz,
// any other as .mgh, so that both the header and the gzip stream behind it are reached.
#include "volume_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const bool gzipped = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    return tessera::fuzz::fuzz_volume_file(gzipped ? "fuzz.mgz" : "fuzz.mgh", data, size);
}
