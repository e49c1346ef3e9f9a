#include "core/allocator_policy.hpp"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tessera {

void retain_freed_memory() {
    const char* setting = std::getenv("TESSERA_RETAIN_FREED_MEMORY");
    if (setting && std::strcmp(setting, "0") == 0) return;
#if defined(__GLIBC__)
    // Setting either turns off glibc's sliding thresholds, so both are set: requests below 32 MiB (its
    // largest mmap threshold) from the heap, and the heap trimmed only past 256 MiB free.
    mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
    mallopt(M_TRIM_THRESHOLD, 256 * 1024 * 1024);
#endif
}

}  // namespace tessera
