#include "core/memory_budget.hpp"

#include "core/error.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace tessera {

namespace {

std::uint64_t from_environment(const char* variable, std::uint64_t fallback) {
    const char* text = std::getenv(variable);
    if (text == nullptr || *text == '\0') return fallback;
    return parse_byte_count(text, variable);
}

}  // namespace

std::uint64_t physical_memory_bytes() {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page_size = ::sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page_size <= 0) return std::uint64_t{8} << 30;  // unknown: assume a small machine
    return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size);
}

std::uint64_t max_volume_bytes() { return from_environment("TESSERA_MAX_VOLUME_BYTES", physical_memory_bytes() / 2); }

std::uint64_t host_memory_budget_bytes() { return from_environment("TESSERA_HOST_MEMORY", physical_memory_bytes() / 4 * 3); }

std::uint64_t parse_byte_count(std::string_view text, std::string_view variable) {
    const std::string value(text);
    const auto fail = [&] {
        TESSERA_REJECT(variable << " = \"" << value
                                << "\" is not a byte count: expected a positive number of bytes, optionally with a unit "
                                   "(KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. 8GiB");
    };
    char* end = nullptr;
    const double number = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || !std::isfinite(number) || number <= 0) fail();
    std::string unit;
    for (const char* c = end; *c != '\0'; ++c) {
        if (!std::isspace(static_cast<unsigned char>(*c))) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
    }
    double scale = 1;
    if (unit.empty() || unit == "b") scale = 1;
    else if (unit == "kib" || unit == "k") scale = 1024.0;
    else if (unit == "mib" || unit == "m") scale = 1024.0 * 1024;
    else if (unit == "gib" || unit == "g") scale = 1024.0 * 1024 * 1024;
    else if (unit == "tib" || unit == "t") scale = 1024.0 * 1024 * 1024 * 1024;
    else if (unit == "kb") scale = 1e3;
    else if (unit == "mb") scale = 1e6;
    else if (unit == "gb") scale = 1e9;
    else if (unit == "tb") scale = 1e12;
    else fail();
    const double bytes = number * scale;
    if (bytes < 1 || bytes > 1.8e19) fail();
    return static_cast<std::uint64_t>(bytes);
}

}  // namespace tessera
