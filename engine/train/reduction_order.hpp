// How a mesh spread over processes sums its weight gradients (the experiment's "reduction", tessera-cli's
// --reduction). Reproducible: in mesh-core order, the bits of the in-process mesh whatever the number of
// ranks. Fast: each rank sums its own cores, then the MPI library's all-reduce (its order, its speed).
#pragma once

#include <string_view>

namespace tessera::train {

enum class ReductionOrder { Reproducible, Fast };
std::string_view reduction_order_name(ReductionOrder order);
ReductionOrder parse_reduction_order(std::string_view text);  // "reproducible" | "fast"

}  // namespace tessera::train
