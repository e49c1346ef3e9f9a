// How the end of a step spreads independent per-parameter work over threads. A single-core trainer
// runs it in order on the calling thread (oneDNN's threads are busy elsewhere); a core mesh hands its
// host thread pool in. Each task touches one parameter's tensors only, so the bits do not depend on
// which thread runs it or when.
#pragma once

#include <cstdint>
#include <functional>

namespace tessera::train {

// Runs body(0) … body(count − 1), in any order and possibly at once; returns after all have finished
// and rethrows the first exception one threw.
using ParallelFor = std::function<void(std::int64_t count, const std::function<void(std::int64_t)>& body)>;

// In order, on the calling thread.
inline void run_in_order(std::int64_t count, const std::function<void(std::int64_t)>& body) {
    for (std::int64_t i = 0; i < count; ++i) body(i);
}

}  // namespace tessera::train
