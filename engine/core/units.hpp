// Figures as people read them, shared by the CLI, the studio and the engine's messages.
//
//   format_gib(1288490188)   // "1.20 GiB"
//   format_duration(0.0354)  // "35 ms";  format_duration(75) "75.0 s";  format_duration(3725) "62:05"
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace tessera {

inline std::string format_gib(std::int64_t bytes, int decimals = 2) {
    char text[48];
    std::snprintf(text, sizeof text, "%.*f GiB", decimals, static_cast<double>(bytes) / static_cast<double>(1LL << 30));
    return text;
}

// Milliseconds below a second, seconds below 90 s, minutes:seconds below 90 min, then hours.
inline std::string format_duration(double seconds) {
    char text[48];
    if (seconds < 1) std::snprintf(text, sizeof text, "%.0f ms", seconds * 1e3);
    else if (seconds < 90) std::snprintf(text, sizeof text, "%.1f s", seconds);
    else if (seconds < 5400) std::snprintf(text, sizeof text, "%d:%02d", static_cast<int>(seconds) / 60, static_cast<int>(seconds) % 60);
    else std::snprintf(text, sizeof text, "%.1f h", seconds / 3600);
    return text;
}

}  // namespace tessera
