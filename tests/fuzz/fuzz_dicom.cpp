// Fuzz target: DICOM, a single file (.dcm): the engine's tag parser and VTK's reader.
// The input is the whole file.
#include "volume_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    return tessera::fuzz::fuzz_volume_file("fuzz.dcm", data, size);
}
