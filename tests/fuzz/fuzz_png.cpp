// Fuzz target: PNG (.png): 2D images through OpenCV, as a volume (read_volume) and as a colour image,
// from the file (read_color_image: COCO) and from memory (decode_color_image: a TFRecord's image/encoded).
// The input is the whole file. The two colour paths must agree: both refuse it, or both give the same pixels.
#include "io/color_image.hpp"
#include "volume_target.hpp"

#include <cstring>
#include <optional>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tessera;
    using namespace tessera::fuzz;
    const std::filesystem::path file = input_file("fuzz.png", data, size);
    read_volume_and_labels(file);
    std::optional<Tensor> from_file, from_memory;
    expect_success_or_error([&] { from_file = read_color_image(file); });
    expect_success_or_error([&] {
        from_memory = decode_color_image(std::span(reinterpret_cast<const std::byte*>(data), size), "the fuzzed image");
    });
    require(from_file.has_value() == from_memory.has_value(), "a PNG decoded from the file but not from memory, or the other way");
    if (from_file) {
        require(from_file->shape() == from_memory->shape() &&
                    std::memcmp(from_file->raw_data(), from_memory->raw_data(), from_file->num_bytes()) == 0,
                "a PNG decoded to other pixels from memory than from the file");
    }
    return 0;
}
