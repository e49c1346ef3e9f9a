// Shared by the fuzz targets (DESIGN.md §6): a per-process scratch folder for the readers that take
// paths, and the one outcome a target accepts besides success — a tessera::Error for bad input.
//
// Everything else is a finding: a crash, a sanitizer report, a leak, a timeout, any other exception
// escaping an engine entry point (std::bad_alloc, std::out_of_range, nlohmann::json::exception …), and
// an *internal* tessera::Error (TESSERA_ASSERT: a Tessera bug by definition, see core/error.hpp).
#pragma once

#include "core/error.hpp"

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace tessera::fuzz {

// /dev/shm/tessera-fuzz-<pid> (or $TMPDIR when /dev/shm is missing), created on first use and removed
// at exit. Each process has its own, so targets may run side by side.
// The path lives as long as the process: a static path would be destroyed before the exit handler
// that removes the folder runs (the handler is registered first, inside its initialiser, so it runs
// last) — a heap-use-after-free at exit that ASan reported, now and then, in every target.
inline const std::filesystem::path& scratch_dir() {
    static const std::filesystem::path* const dir = [] {
        std::filesystem::path base = "/dev/shm";
        if (!std::filesystem::is_directory(base)) base = std::filesystem::temp_directory_path();
        auto* path = new std::filesystem::path(base / ("tessera-fuzz-" + std::to_string(::getpid())));
        std::filesystem::create_directories(*path);
        std::atexit([] {
            std::error_code ignored;
            std::filesystem::remove_all(scratch_dir(), ignored);
        });
        return path;
    }();
    return *dir;
}

inline void write_bytes(const std::filesystem::path& path, const std::uint8_t* data, std::size_t size) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) {
        std::fprintf(stderr, "fuzz harness: cannot write %s\n", path.c_str());
        std::abort();
    }
}

// Writes the input to <scratch>/<name> and returns the path.
inline std::filesystem::path input_file(std::string_view name, const std::uint8_t* data, std::size_t size) {
    const std::filesystem::path path = scratch_dir() / std::string(name);
    write_bytes(path, data, size);
    return path;
}

// Runs `body`; an InvalidInput tessera::Error is the expected way to refuse an input. An internal
// error aborts (a finding); other exceptions propagate to libFuzzer, which reports them (a finding).
template <typename Body>
void expect_success_or_error(Body&& body) {
    try {
        body();
    } catch (const tessera::Error& error) {
        if (error.is_internal()) {
            std::fprintf(stderr, "fuzz finding: internal tessera::Error: %s\n", error.what());
            std::abort();
        }
    }
}

// A property the target checks on accepted inputs (a round trip, say); a failure is a finding.
inline void require(bool condition, const char* what) {
    if (!condition) {
        std::fprintf(stderr, "fuzz finding: %s\n", what);
        std::abort();
    }
}

}  // namespace tessera::fuzz
