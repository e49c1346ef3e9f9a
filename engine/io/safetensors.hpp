// safetensors: the Hugging Face weights format, so that PyTorch, JAX and numpy tools read our weights
// and we read theirs.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON, then the tensors' bytes:
//
//   {"__metadata__": {"step": "1200"},
//    "conv1.weight": {"dtype": "F32", "shape": [8, 1, 3, 3], "data_offsets": [0, 288]}, ...}
//
// Offsets count bytes from the start of the data that follows the header; tensors are packed in it
// with no gaps, row-major, little-endian. We write keys sorted, the data in the order the tensors are
// given, and pad the header with spaces so that the data starts at a multiple of 8 bytes.
//
//   TensorFile file;
//   file.metadata["step"] = "1200";
//   file.tensors.push_back({"conv1.weight", conv1.weight});      // any strides; packed on write
//   write_safetensors("run/step_1200.safetensors", file);        // atomic: old file or new, never torn
//   const TensorFile loaded = read_safetensors("run/step_1200.safetensors");
//   const Tensor& weight = loaded.find("conv1.weight")->value;  // contiguous, its own storage
//
// Reading checks everything (lengths, JSON, every entry, that the tensors tile the data exactly) and
// throws tessera::Error naming the file and the problem.
#pragma once

#include "tensor/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::io {

struct TensorRecord {
    std::string name;  // "enc0.conv1.weight"; any UTF-8 except "__metadata__"
    Tensor value;      // any strides; read tensors are contiguous
};

struct TensorFile {
    std::vector<TensorRecord> tensors;            // file order: write keeps it, read gives data order
    std::map<std::string, std::string> metadata;  // "__metadata__": free-form strings

    // The tensor with this name, or nullptr.
    const TensorRecord* find(std::string_view name) const;
};

// "F32", "BF16", "F16", "I32", "U8": the format's names for Tessera's dtypes.
std::string_view safetensors_dtype_name(DType dtype);
// The DType for a format name, or nullopt for names Tessera has no tensor type for ("F64", "BOOL", ...).
std::optional<DType> dtype_from_safetensors_name(std::string_view name);

std::vector<std::byte> encode_safetensors(const TensorFile& file);
// `origin` names the bytes in error messages (usually the file path).
TensorFile decode_safetensors(std::span<const std::byte> bytes, const std::string& origin);

void write_safetensors(const std::filesystem::path& path, const TensorFile& file);
TensorFile read_safetensors(const std::filesystem::path& path);

}  // namespace tessera::io
