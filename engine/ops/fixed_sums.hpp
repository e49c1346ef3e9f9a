// Sums over many items with the same bits on any thread count: the items are split into fixed groups
// (core/fixed_groups.hpp), each group adds its items in order into its own partial buffer, and the
// caller adds the groups' partials in group order.
//
//   const std::vector<float> partials = fixed_group_partials(items, partial_size, [&](float* partial, std::int64_t item) {...});
//   for (group = 0; group < k_fixed_groups; ++group) total += partials[group * partial_size + entry];
#pragma once

#include "core/fixed_groups.hpp"
#include "core/loop_helpers.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <omp.h>
#include <vector>

namespace tessera::ops {

// add_item(partial, item) adds item's terms into `partial` (partial_size floats, zero at first).
template <class AddItem>
std::vector<float> fixed_group_partials(std::int64_t items, std::int64_t partial_size, AddItem&& add_item) {
    std::vector<float> partials(static_cast<std::size_t>(k_fixed_groups * partial_size), 0.0f);
    for_fixed_groups(items, true, [&](std::int64_t group, std::int64_t begin, std::int64_t end) {
        float* partial = partials.data() + group * partial_size;
        for (std::int64_t item = begin; item < end; ++item) add_item(partial, item);
    });
    return partials;
}

// As fixed_group_partials, for items whose terms are wide (vectors per weight, say) but whose group
// sums are narrow: each host thread accumulates a group in its own partial (partial_size floats, reused
// from group to group so it stays in cache), then reduce_group(partial, result) writes the group's
// result_size floats. Returns the groups' results, [k_fixed_groups][result_size] (zero for a group
// without items), for the caller to add in group order. add_item(partial, item, first) writes a group's
// first item's terms over whatever the partial held and adds the others': zeroing the partial first
// cost a memset of it per group (8 per call, 221 KB each for a 16 → 8 3D layer, on every simulated
// core). A buffer of every group's partial (1.8 MB for that layer) was zeroed and read back from memory
// on every call.
template <class AddItem, class ReduceGroup>
std::vector<float> fixed_group_results(std::int64_t items, std::int64_t partial_size, std::int64_t result_size, AddItem&& add_item,
                                       ReduceGroup&& reduce_group) {
    std::vector<float> results(static_cast<std::size_t>(k_fixed_groups * result_size), 0.0f);
    const auto run_group = [&](float* partial, std::int64_t group) {
        const std::int64_t begin = fixed_group_begin(group, items), end = fixed_group_begin(group + 1, items);
        if (begin == end) return;
        for (std::int64_t item = begin; item < end; ++item) add_item(partial, item, item == begin);
        reduce_group(static_cast<const float*>(partial), results.data() + group * result_size);
    };
    if (LoopHelpers* helpers = loop_helpers(); helpers != nullptr && !omp_in_parallel()) {
        // A simulated core's kernel: its groups shared with the pool's idle threads, each with its own partial.
        for_shared_range(*helpers, k_fixed_groups, 1, [&](std::int64_t first, std::int64_t last) {
            thread_local std::vector<float> partial;
            partial.resize(std::max(partial.size(), static_cast<std::size_t>(partial_size)));
            for (std::int64_t group = first; group < last; ++group) run_group(partial.data(), group);
        });
        return results;
    }
#pragma omp parallel
    {
        const std::unique_ptr<float[]> partial(new float[static_cast<std::size_t>(partial_size)]);  // written by each group's first item
#pragma omp for schedule(dynamic, 1)
        for (std::int64_t group = 0; group < k_fixed_groups; ++group) run_group(partial.get(), group);
    }
    return results;
}

}  // namespace tessera::ops
