// Fuzz target: MetaImage header plus a separate data file (.mhd + .raw).
// The input holds both files: the header, then the separator line "#TESSERA-RAW#\n", then the data
// file's bytes (written as fuzz.raw beside fuzz.mhd). Without the separator the data file is empty.
#include "volume_target.hpp"

#include <algorithm>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tessera::fuzz;
    static constexpr std::string_view separator = "#TESSERA-RAW#\n";
    const std::uint8_t* end = data + size;
    const std::uint8_t* cut = std::search(data, end, separator.begin(), separator.end());
    const std::uint8_t* raw = cut == end ? end : cut + separator.size();
    input_file("fuzz.raw", raw, static_cast<std::size_t>(end - raw));
    read_volume_and_labels(input_file("fuzz.mhd", data, static_cast<std::size_t>(cut - data)));
    return 0;
}
