// The FMA peak measurement shared by fma_peak and tessera_step --peak: independent AVX-512 FMA chains,
// enough of them (12) to cover the FMA latency on both pipes, on every thread at once.
#pragma once

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

namespace tessera::bench {

// The chains' lanes summed: a result the compiler must compute, so it keeps every chain.
__attribute__((target("avx512f"))) inline double sum_of_lanes(const __m512 (&acc)[12]) {
    __m512 sum = acc[0];
    for (int k = 1; k < 12; ++k) sum = _mm512_add_ps(sum, acc[k]);
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, sum);
    double total = 0;
    for (float lane : lanes) total += lane;
    return total;
}

// 12 chains × 16 lanes × 2 FLOPs an iteration.
constexpr double k_fma_flops_per_iteration = 2.0 * 16 * 12;

__attribute__((target("avx512f"))) inline double fma_chains(long iterations) {
    __m512 acc[12];
    for (auto& a : acc) a = _mm512_set1_ps(1.0f);
    const __m512 multiplier = _mm512_set1_ps(0.999999f), addend = _mm512_set1_ps(1e-7f);
    for (long i = 0; i < iterations; ++i) {
        for (auto& a : acc) a = _mm512_fmadd_ps(a, multiplier, addend);
    }
    return sum_of_lanes(acc);
}

// The best of `rounds` rounds of `chains` on every thread, in GFLOP/s (flops_per_iteration per thread
// and iteration).
template <class Chains>
double best_rate(int threads, long iterations, double flops_per_iteration, Chains&& chains, int rounds = 5) {
    double best = 0;
    for (int round = 0; round < rounds; ++round) {
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

// Each CPU this process may run on, measured alone: one thread pinned to it runs the chains (best of
// `rounds`), in GFLOP/s. Under a hypervisor one vCPU can run well below another for seconds (a Xeon
// model 207 VM: 137 against 176); work split evenly between the two then waits for the slow one, so a
// comparison run in such a moment was not run on a quiet machine. Empty without AVX-512F.
inline std::vector<std::pair<int, double>> per_cpu_rates(long iterations, int rounds = 3) {
    std::vector<std::pair<int, double>> rates;
    if (!__builtin_cpu_supports("avx512f")) return rates;
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return rates;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (!CPU_ISSET(cpu, &allowed)) continue;
        double rate = 0;
        std::thread pinned([&] {
            cpu_set_t only;
            CPU_ZERO(&only);
            CPU_SET(cpu, &only);
            if (pthread_setaffinity_np(pthread_self(), sizeof(only), &only) != 0) return;
            rate = best_rate(1, iterations, k_fma_flops_per_iteration, fma_chains, rounds);
        });
        pinned.join();
        if (rate > 0) rates.emplace_back(cpu, rate);
    }
    return rates;
}

}  // namespace tessera::bench
