// retain_freed_memory: a step's buffers, freed and taken again, come back without page faults.
#include "core/allocator_policy.hpp"

#include <gtest/gtest.h>

#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

long minor_faults() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
}

// One "step": three 800 KiB buffers written and freed, as a 3D U-Net's step frees its logits' copy,
// loss gradient and staging. Returns the page faults the steps after the first took, each.
long faults_per_repeated_step() {
    constexpr std::size_t k_bytes = 800 * 1024;
    const auto step = [] {
        std::vector<char*> buffers;
        for (int b = 0; b < 3; ++b) {
            auto* buffer = static_cast<char*>(std::malloc(k_bytes));
            std::memset(buffer, b + 1, k_bytes);
            buffers.push_back(buffer);
        }
        long sum = 0;
        for (char* buffer : buffers) sum += buffer[k_bytes / 2];
        for (char* buffer : buffers) std::free(buffer);
        return sum;
    };
    volatile long sink = step();
    const long before = minor_faults();
    constexpr int k_steps = 10;
    for (int s = 0; s < k_steps; ++s) sink = sink + step();
    return (minor_faults() - before) / k_steps;
}

}  // namespace

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
TEST(AllocatorPolicy, AStepsFreedBuffersComeBackWithoutPageFaults) {
    // With glibc's own thresholds (set by a 1 MiB buffer freed first, as a step's larger buffers do)
    // the freed heap top goes back to the kernel at every step: 3 × 200 pages faulted again.
    std::free(std::malloc(1024 * 1024));
    const long by_default = faults_per_repeated_step();
    tessera::retain_freed_memory();
    const long retained = faults_per_repeated_step();
    EXPECT_LT(retained, 16) << "with the policy set, a repeated step still faulted " << retained << " pages";
    if (by_default < 100) GTEST_SKIP() << "this glibc kept the memory by itself (" << by_default << " faults a step)";
    EXPECT_LT(retained * 10, by_default);
}
#endif
