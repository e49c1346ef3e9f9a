// SeededRandom: splitmix64 with uniform and normal draws. Small, fast, and the same on every
// platform and standard library (std::normal_distribution is not), so seeded runs are bit-identical.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

namespace tessera {

class SeededRandom {
public:
    explicit SeededRandom(std::uint64_t seed) : m_state(seed) {}
    // A generator for sub-stream `stream` of `seed`, e.g. one per parameter tensor.
    SeededRandom(std::uint64_t seed, std::uint64_t stream) : m_state(seed ^ (0x9e3779b97f4a7c15ull * (stream + 1))) {
        next();
    }

    std::uint64_t next() {
        std::uint64_t z = (m_state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
    double symmetric() { return 2.0 * uniform() - 1.0; }                         // [-1, 1)
    double normal() {  // Box–Muller; one value per call keeps the stream simple to reason about
        const double u1 = std::max(uniform(), 1e-300);
        const double u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    }
    std::uint64_t state() const { return m_state; }
    void set_state(std::uint64_t state) { m_state = state; }

private:
    std::uint64_t m_state;
};

}  // namespace tessera
