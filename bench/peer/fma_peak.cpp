// Measures this machine's fp32 FMA peak (GFLOP/s) on N threads: independent AVX-512 FMA chains, enough
// of them to cover the FMA latency on both pipes. Prints `fma_peak_gflops=<x>`; on a CPU with
// AVX512-BF16, also `bf16_dot_peak_gflops=<x>` (VDPBF16PS chains: 64 FLOPs per instruction), the
// ceiling of oneDNN's bf16 convolutions there without AMX — whether bf16 can beat f32 at all.
#include "fma_chains.hpp"

#include <immintrin.h>

#include <cstdio>
#include <cstdlib>

using tessera::bench::best_rate;
using tessera::bench::sum_of_lanes;

__attribute__((target("avx512f,avx512bf16"))) static double bf16_dot_chains(long iterations) {
    __m512 acc[12];
    for (auto& a : acc) a = _mm512_set1_ps(1.0f);
    const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3380);  // 1, ~6e-8
    for (long i = 0; i < iterations; ++i) {
        for (auto& a : acc) a = _mm512_dpbf16_ps(a, x, y);
    }
    return sum_of_lanes(acc);
}

int main(int argc, char** argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
    if (!__builtin_cpu_supports("avx512f")) {
        std::printf("fma_peak_gflops=nan (no AVX-512 on this CPU)\n");
        return 0;
    }
    const long iterations = 200'000'000 / 12;
    std::printf("fma_peak_gflops=%.1f\n", best_rate(threads, iterations, tessera::bench::k_fma_flops_per_iteration, tessera::bench::fma_chains));
    if (__builtin_cpu_supports("avx512bf16")) {
        std::printf("bf16_dot_peak_gflops=%.1f\n", best_rate(threads, iterations, 2.0 * 32 * 12, bf16_dot_chains));
    }
    return 0;
}
