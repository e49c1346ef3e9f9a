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
    // Per thread: what is left of its range (core/loop_helpers.hpp), on its own cache line.
    struct alignas(64) Range {
        ClaimableRange left;
    };
    std::unique_ptr<Range[]> ranges;
    const auto step = static_cast<std::uint64_t>(chunk);
#pragma omp parallel
    {
        const int threads = omp_get_num_threads(), me = omp_get_thread_num();
#pragma omp single
        {
            ranges.reset(new Range[static_cast<std::size_t>(threads)]);
            for (int t = 0; t < threads; ++t)
                ranges[t].left.reset(static_cast<std::uint64_t>(count * t / threads), static_cast<std::uint64_t>(count * (t + 1) / threads));
        }  // implicit barrier: every range is set before anyone takes from it
        std::uint64_t begin = 0, end = 0;
        // Own range from the front, then the others' from the back.
        while (ranges[me].left.claim_front(step, begin, end)) body(static_cast<std::int64_t>(begin), static_cast<std::int64_t>(end));
        for (int k = 1; k < threads; ++k) {
            ClaimableRange& other = ranges[(me + k) % threads].left;
            while (other.claim_back(step, begin, end)) body(static_cast<std::int64_t>(begin), static_cast<std::int64_t>(end));
        }
    }
}

}  // namespace tessera::ops
