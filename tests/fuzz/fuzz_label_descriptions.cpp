// Fuzz target: label description files (ITK-SNAP, 3D Slicer / FreeSurfer colour tables, MRIcron's .txt
// and .lut). An input of exactly 768 bytes is read as an MRIcron .lut, any other as a text file.
#include "fuzz_support.hpp"
#include "io/label_descriptions.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto path = tessera::fuzz::input_file(size == 768 ? "fuzz.lut" : "fuzz.txt", data, size);
    tessera::fuzz::expect_success_or_error([&] { (void)tessera::read_label_descriptions(path); });
    return 0;
}
