// Measures this machine's fp32 FMA peak (GFLOP/s) on N threads: independent AVX-512 FMA chains, enough
// of them to cover the FMA latency on both pipes. Prints `fma_peak_gflops=<x>`; on a CPU with
// AVX512-BF16, also `bf16_dot_peak_gflops=<x>` (VDPBF16PS chains: 64 FLOPs per instruction), the
// ceiling of oneDNN's bf16 convolutions there without AMX — whether bf16 can beat f32 at all.
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

// The chains' lanes summed: a result the compiler must compute, so it keeps every chain.
__attribute__((target("avx512f"))) static double sum_of_lanes(const __m512 (&acc)[12]) {
    __m512 sum = acc[0];
    for (int k = 1; k < 12; ++k) sum = _mm512_add_ps(sum, acc[k]);
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, sum);
    double total = 0;
    for (float lane : lanes) total += lane;
    return total;
}

__attribute__((target("avx512f"))) static double fma_chains(long iterations) {
    __m512 acc[12];
    for (auto& a : acc) a = _mm512_set1_ps(1.0f);
    const __m512 multiplier = _mm512_set1_ps(0.999999f), addend = _mm512_set1_ps(1e-7f);
    for (long i = 0; i < iterations; ++i) {
        for (auto& a : acc) a = _mm512_fmadd_ps(a, multiplier, addend);
    }
    return sum_of_lanes(acc);
}

__attribute__((target("avx512f,avx512bf16"))) static double bf16_dot_chains(long iterations) {
    __m512 acc[12];
    for (auto& a : acc) a = _mm512_set1_ps(1.0f);
    const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3380);  // 1, ~6e-8
    for (long i = 0; i < iterations; ++i) {
        for (auto& a : acc) a = _mm512_dpbf16_ps(a, x, y);
    }
    return sum_of_lanes(acc);
}

// The best of 5 rounds of `chains` on every thread, in GFLOP/s (flops_per_iteration per thread and iteration).
template <class Chains>
double best_rate(int threads, long iterations, double flops_per_iteration, Chains&& chains) {
    double best = 0;
    for (int round = 0; round < 5; ++round) {
        std::vector<std::thread> workers;
        std::vector<double> sink(static_cast<std::size_t>(threads));
        const auto start = std::chrono::steady_clock::now();
        for (int t = 0; t < threads; ++t) workers.emplace_back([&, t] { sink[static_cast<std::size_t>(t)] = chains(iterations); });
        for (auto& w : workers) w.join();
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        best = std::max(best, flops_per_iteration * static_cast<double>(iterations) * threads / seconds / 1e9);
        if (sink[0] == 42) std::printf(" ");
    }
    return best;
}

int main(int argc, char** argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
    if (!__builtin_cpu_supports("avx512f")) {
        std::printf("fma_peak_gflops=nan (no AVX-512 on this CPU)\n");
        return 0;
    }
    const long iterations = 200'000'000 / 12;
    std::printf("fma_peak_gflops=%.1f\n", best_rate(threads, iterations, 2.0 * 16 * 12, fma_chains));
    if (__builtin_cpu_supports("avx512bf16")) {
        std::printf("bf16_dot_peak_gflops=%.1f\n", best_rate(threads, iterations, 2.0 * 32 * 12, bf16_dot_chains));
    }
    return 0;
}
