// A trainable parameter: its value, the gradient the backward pass accumulates into it, and whether
// weight decay applies (not to batch-norm scales and shifts or biases, as in the seeds' ResNet).
#pragma once

#include "tensor/tensor.hpp"

#include <string>

namespace tessera {

struct Parameter {
    std::string name;   // "enc0.conv1.weight"
    Tensor value;       // f32 master copy
    Tensor gradient;    // f32, same shape; set by each backward pass (summed over cores by the all-reduce)
    bool apply_weight_decay = true;
};

}  // namespace tessera
