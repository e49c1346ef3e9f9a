// Fuzz target: safetensors (engine/io/safetensors.cpp). The input is the file's bytes. A decoded
// file must encode and decode again to the same names, metadata, dtypes, shapes and bytes.
#include "fuzz_support.hpp"
#include "io/safetensors.hpp"

#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tessera;
    using namespace tessera::fuzz;
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    expect_success_or_error([&] {
        const io::TensorFile file = io::decode_safetensors(bytes, "fuzz.safetensors");
        const std::vector<std::byte> encoded = io::encode_safetensors(file);
        const io::TensorFile again = io::decode_safetensors(encoded, "re-encoded fuzz.safetensors");
        require(again.metadata == file.metadata, "metadata changed in a round trip");
        require(again.tensors.size() == file.tensors.size(), "tensor count changed in a round trip");
        for (const io::TensorRecord& record : file.tensors) {
            const io::TensorRecord* other = again.find(record.name);
            require(other != nullptr, "a tensor lost its name in a round trip");
            require(other->value.dtype() == record.value.dtype() && other->value.shape() == record.value.shape(),
                    "a tensor's dtype or shape changed in a round trip");
            const std::size_t count = record.value.num_bytes();
            require(other->value.num_bytes() == count &&
                        (count == 0 || std::memcmp(other->value.raw_data(), record.value.raw_data(), count) == 0),
                    "a tensor's bytes changed in a round trip");
        }
    });
    return 0;
}
