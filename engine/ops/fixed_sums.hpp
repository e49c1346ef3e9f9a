// Sums over many items with the same bits on any thread count: the items are split into a fixed number
// of groups by index (not by thread), each group adds its items in order into its own partial buffer,
// and the caller adds the groups' partials in group order.
//
//   const std::vector<float> partials = fixed_group_partials(items, partial_size, [&](float* partial, std::int64_t item) {...});
//   for (group = 0; group < k_fixed_groups; ++group) total += partials[group * partial_size + entry];
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::ops {

constexpr std::int64_t k_fixed_groups = 8;

// add_item(partial, item) adds item's terms into `partial` (partial_size floats, zero at first).
template <class AddItem>
std::vector<float> fixed_group_partials(std::int64_t items, std::int64_t partial_size, AddItem&& add_item) {
    std::vector<float> partials(static_cast<std::size_t>(k_fixed_groups * partial_size), 0.0f);
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t group = 0; group < k_fixed_groups; ++group) {
        float* partial = partials.data() + group * partial_size;
        for (std::int64_t item = group * items / k_fixed_groups; item < (group + 1) * items / k_fixed_groups; ++item) add_item(partial, item);
    }
    return partials;
}

}  // namespace tessera::ops
