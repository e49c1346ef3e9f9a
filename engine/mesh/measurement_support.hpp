// Small helpers the host measurements share (calibration, layer profiles).
#pragma once

#include "core/random.hpp"
#include "tensor/tensor.hpp"
#include "train/trainer.hpp"

#include <algorithm>
#include <vector>

namespace tessera::mesh {

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

// The training the host measurements time: momentum SGD (one optimizer slot, as the host model's
// update is calibrated for) at a constant rate.
inline train::TrainerConfig timing_trainer_config(double learning_rate) {
    train::TrainerConfig config;
    config.optimizer = {.kind = train::OptimizerKind::Sgd, .momentum = 0.9};
    config.schedule = {.kind = train::ScheduleKind::Constant, .learning_rate = learning_rate};
    return config;
}

}  // namespace tessera::mesh
