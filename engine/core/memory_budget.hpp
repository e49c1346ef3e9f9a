// How much host memory input may make Tessera allocate.
//
// A size read from a file or an experiment (a volume header's dimensions, an input size) decides an
// allocation; it is checked against these budgets before the allocation, so that a damaged or hostile
// header, a gzip bomb or a typo in an experiment gets a message instead of std::bad_alloc or the
// kernel's out-of-memory killer.
//
//   TESSERA_MAX_VOLUME_BYTES   what reading one volume may hold at once (its decoded voxels plus the f32
//                              copy): default half of physical memory
//   TESSERA_HOST_MEMORY        what a run's simulated cores may hold together on this host (every core's
//                              activations, weights, gradients and optimizer slots): default 3/4 of
//                              physical memory
// Both take bytes or a number with a unit: "8GiB", "512MiB", "2e9".
#pragma once

#include <cstdint>
#include <string_view>

namespace tessera {

std::uint64_t physical_memory_bytes();
std::uint64_t max_volume_bytes();
std::uint64_t host_memory_budget_bytes();

// "8GiB", "512 MiB", "1.5GB", "2e9" → bytes; throws a bad-input error naming `variable` otherwise.
std::uint64_t parse_byte_count(std::string_view text, std::string_view variable);

}  // namespace tessera
