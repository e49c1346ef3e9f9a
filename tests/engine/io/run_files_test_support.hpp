// Helpers shared by the tests of the run files (atomic files, safetensors, TensorBoard events):
// scratch folders, whole-file bytes, and message checks.
#pragma once

#include "support/scratch_dir.hpp"

#include "core/error.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

namespace tessera::test {

namespace fs = std::filesystem;

// ScratchDir: tests/support/scratch_dir.hpp.

inline std::vector<std::byte> read_file_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    const std::vector<char> chars{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::vector<std::byte> bytes(chars.size());
    for (std::size_t i = 0; i < chars.size(); ++i) bytes[i] = static_cast<std::byte>(chars[i]);
    return bytes;
}

inline void write_file_bytes(const fs::path& path, const std::vector<std::byte>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<std::byte> bytes_of(std::string_view text) {
    std::vector<std::byte> bytes(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) bytes[i] = static_cast<std::byte>(text[i]);
    return bytes;
}

inline std::string text_of(const std::vector<std::byte>& bytes) {
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// The message of the tessera::Error `action` throws; a test failure if it throws nothing.
template <class Action>
std::string error_message(const Action& action) {
    try {
        action();
    } catch (const Error& error) {
        return error.what();
    }
    ADD_FAILURE() << "expected a tessera::Error";
    return {};
}

#define EXPECT_ERROR_CONTAINS(action, fragment)                                                       \
    do {                                                                                              \
        const std::string tessera_message_ = ::tessera::test::error_message([&] { action; });         \
        EXPECT_NE(tessera_message_.find(fragment), std::string::npos)                                 \
            << "expected the message to contain \"" << (fragment) << "\", got: " << tessera_message_; \
    } while (false)

}  // namespace tessera::test
