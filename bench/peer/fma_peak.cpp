// Measures this machine's fp32 FMA peak (GFLOP/s) on N threads: independent AVX-512 FMA chains, enough
// of them to cover the FMA latency on both pipes. Prints `fma_peak_gflops=<x>`.
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

__attribute__((target("avx512f"))) static double fma_chains(long iterations) {
    __m512 acc[12];
    for (auto& a : acc) a = _mm512_set1_ps(1.0f);
    const __m512 multiplier = _mm512_set1_ps(0.999999f), addend = _mm512_set1_ps(1e-7f);
    for (long i = 0; i < iterations; ++i) {
        for (auto& a : acc) a = _mm512_fmadd_ps(a, multiplier, addend);
    }
    __m512 sum = acc[0];
    for (int k = 1; k < 12; ++k) sum = _mm512_add_ps(sum, acc[k]);
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, sum);
    double total = 0;
    for (float lane : lanes) total += lane;
    return total;
}

int main(int argc, char** argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
    if (!__builtin_cpu_supports("avx512f")) {
        std::printf("fma_peak_gflops=nan (no AVX-512 on this CPU)\n");
        return 0;
    }
    const long iterations = 200'000'000 / 12;
    double best = 0;
    for (int round = 0; round < 5; ++round) {
        std::vector<std::thread> workers;
        std::vector<double> sink(static_cast<std::size_t>(threads));
        const auto start = std::chrono::steady_clock::now();
        for (int t = 0; t < threads; ++t) workers.emplace_back([&, t] { sink[static_cast<std::size_t>(t)] = fma_chains(iterations); });
        for (auto& w : workers) w.join();
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double flops = 2.0 * 16 * 12 * static_cast<double>(iterations) * threads;
        best = std::max(best, flops / seconds / 1e9);
        if (sink[0] == 42) std::printf(" ");
    }
    std::printf("fma_peak_gflops=%.1f\n", best);
    return 0;
}
