// Work split into a fixed number of groups by index, not by thread: each group runs on one thread, its
// items in order, and the caller combines the groups' results in group order — the same bits on any
// thread count. The loss's sums, the label count and the kernels' weight-gradient sums (ops/fixed_sums.hpp)
// all split this way.
//
//   std::array<double, k_fixed_groups> sums{};
//   for_fixed_groups(count, count >= 65536, [&](std::int64_t group, std::int64_t begin, std::int64_t end) { ... });
//   for (double sum : sums) total += sum;
//
// The loop runs over OpenMP's threads where the calling translation unit is built with OpenMP (the
// engine's loss and ops libraries are), else on the calling thread: the groups, and so the results, are
// the same either way; inside a thread pool's task (a simulated core's loss or kernel) the groups are
// shared with the pool's idle threads (loop_helpers.hpp).
#pragma once

#include "core/loop_helpers.hpp"

#include <cstdint>

namespace tessera {

constexpr std::int64_t k_fixed_groups = 8;

// The first of group `group`'s items among `count` (group k_fixed_groups: count).
constexpr std::int64_t fixed_group_begin(std::int64_t group, std::int64_t count) { return group * count / k_fixed_groups; }

// body(group, begin, end) for each group of [0, count), over the host threads when `parallel` (small
// counts are not worth waking them for).
template <class Body>
void for_fixed_groups(std::int64_t count, bool parallel, Body&& body) {
    const auto run_group = [&](std::int64_t group) { body(group, fixed_group_begin(group, count), fixed_group_begin(group + 1, count)); };
    if (LoopHelpers* helpers = loop_helpers(); helpers != nullptr && parallel) {
        for_shared_range(*helpers, k_fixed_groups, 1, [&](std::int64_t first, std::int64_t last) {
            for (std::int64_t group = first; group < last; ++group) run_group(group);
        });
        return;
    }
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
    for (std::int64_t group = 0; group < k_fixed_groups; ++group) run_group(group);
}

}  // namespace tessera
