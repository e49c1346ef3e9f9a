// Small helpers the host measurements share (calibration, layer profiles).
#pragma once

#include "core/random.hpp"
#include "tensor/tensor.hpp"

#include <algorithm>
#include <vector>

namespace tessera::cores {

// f32 values drawn from N(0, 1), seeded: inputs and output gradients for timing runs.
inline Tensor normal_tensor(const Shape& shape, std::uint64_t seed) {
    SeededRandom random(seed);
    Tensor tensor = Tensor::empty(shape, DType::F32);
    for (std::int64_t i = 0; i < tensor.num_elements(); ++i) tensor.data<float>()[i] = static_cast<float>(random.normal());
    return tensor;
}

// The fastest of the repeats: on a shared machine other work only ever adds time, so the minimum is
// the host's own figure (bm_cost_fidelity compares it with the fastest measured steps likewise).
inline double fastest(const std::vector<double>& values) { return *std::min_element(values.begin(), values.end()); }

}  // namespace tessera::cores
