// A loop over [0, count) split into one contiguous range per OpenMP thread, each thread taking chunks
// from the front of its own range and, once that is empty, from the back of the others': most
// iterations run in order on one thread (a row convolution's output planes reuse the input planes the
// previous one read, from that host core's L2), and the threads still finish together.
//
//   for_stolen_ranges(planes, 1, [&](std::int64_t begin, std::int64_t end) { for (p = begin; p < end; ++p) ...; });
//
// Every iteration runs once, on some thread; which one depends on timing, so the body's results must
// not (each iteration writes its own outputs). Inside a thread pool's task (a simulated core's kernel,
// OpenMP single-threaded there) the loop is offered to the pool's idle threads instead
// (core/loop_helpers.hpp).
#pragma once

#include "core/loop_helpers.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <omp.h>

namespace tessera::ops {

template <class Body>
void for_stolen_ranges(std::int64_t count, std::int64_t chunk, Body&& body) {
    if (count <= 0) return;
    chunk = std::max<std::int64_t>(1, chunk);
    if (LoopHelpers* helpers = loop_helpers(); helpers != nullptr && !omp_in_parallel()) {
        for_shared_range(*helpers, count, chunk, body);
        return;
    }
    if (count > std::int64_t{0xffffffff}) {  // beyond the 32-bit cursors below: plain dynamic chunks
#pragma omp parallel for schedule(dynamic, 1)
        for (std::int64_t begin = 0; begin < count; begin += chunk) body(begin, std::min(count, begin + chunk));
        return;
    }
    // Per thread: the front (low 32 bits) and back (high 32) of what is left of its range, one word so that
    // the owner's and a thief's claims cannot cross.
    struct alignas(64) Range {
        std::atomic<std::uint64_t> left{0};
    };
    std::unique_ptr<Range[]> ranges;
    const auto pack = [](std::uint64_t front, std::uint64_t back) { return front | (back << 32); };
#pragma omp parallel
    {
        const int threads = omp_get_num_threads(), me = omp_get_thread_num();
#pragma omp single
        {
            ranges.reset(new Range[static_cast<std::size_t>(threads)]);
            for (int t = 0; t < threads; ++t) {
                ranges[t].left.store(pack(static_cast<std::uint64_t>(count * t / threads), static_cast<std::uint64_t>(count * (t + 1) / threads)));
            }
        }  // implicit barrier: every range is set before anyone takes from it
        // Own range from the front.
        while (true) {
            std::uint64_t left = ranges[me].left.load();
            const std::uint64_t front = left & 0xffffffffu, back = left >> 32;
            if (front >= back) break;
            const std::uint64_t end = std::min(back, front + static_cast<std::uint64_t>(chunk));
            if (!ranges[me].left.compare_exchange_weak(left, pack(end, back))) continue;
            body(static_cast<std::int64_t>(front), static_cast<std::int64_t>(end));
        }
        // Then the others' from the back.
        for (int k = 1; k < threads; ++k) {
            Range& other = ranges[(me + k) % threads];
            while (true) {
                std::uint64_t left = other.left.load();
                const std::uint64_t front = left & 0xffffffffu, back = left >> 32;
                if (front >= back) break;
                const std::uint64_t begin = back - std::min(back - front, static_cast<std::uint64_t>(chunk));
                if (!other.left.compare_exchange_weak(left, pack(front, begin))) continue;
                body(static_cast<std::int64_t>(begin), static_cast<std::int64_t>(back));
            }
        }
    }
}

}  // namespace tessera::ops
