// NamedTensor: one entry of a checkpointable state, as optimizers and loss scalers save them.
//
// State is a flat list of named tensors so one checkpoint writer handles every part of training:
//
//   std::vector<NamedTensor> saved = optimizer.state();   // "conv1.weight/momentum", ..., "num_steps"
//   fresh_optimizer.load_state(saved);                     // resumes bit-identically
//
// Counters (step counts) are stored as one-element i32 tensors, scalars (a loss scale) as one-element
// f32 tensors. The helpers below write and read them with checked errors.
#pragma once

#include "tensor/tensor.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tessera::train {

struct NamedTensor {
    std::string name;  // "enc0.conv1.weight/exp_avg", "num_steps"
    Tensor value;
};

// A count as an i32 tensor of shape [1]; the count must lie in [0, 2^31 - 1].
NamedTensor make_counter_entry(std::string name, std::int64_t count);
// The count held by an entry made by make_counter_entry; checks dtype, shape and sign.
std::int64_t read_counter_entry(const NamedTensor& entry);

// A value as an f32 tensor of shape [1].
NamedTensor make_scalar_entry(std::string name, float value);
float read_scalar_entry(const NamedTensor& entry);

// The entry with this name, or nullptr.
const NamedTensor* find_entry(std::span<const NamedTensor> entries, std::string_view name);

// "a [3], b [2, 2]": the names and shapes of a state, for error messages.
std::string describe_entries(std::span<const NamedTensor> entries);

}  // namespace tessera::train
