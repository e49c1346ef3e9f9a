// 1×1 convolutions into a few channels — a segmentation head's logits — over 8 or 16 channels that lie
// side by side (channels-last, or one 16-lane block), written plain.
//
// oneDNN runs such a head channels-last: the 2D U-Net's 16-channel input arrives in 16-lane blocks and was
// reordered (16.8 MB at 4 × 256²) before it and its gradient after it, and the logits went to the loss
// through another reorder; the products themselves are a few FLOPs per byte. Here each run of 8 pixels
// is transposed in registers (AVX2) so that one vector holds one channel of 8 pixels: the logits are
// FMAs with broadcast weights, written plain where the loss reads them; the input gradient is the same
// product transposed back; the weights' gradient sums per row and then over rows in a fixed order (the
// same bits on any thread count).
#pragma once

#include "ops/kernel.hpp"

namespace tessera::ops {

// A 1×1, stride-1, unpadded, ungrouped f32 convolution into at most 4 channels whose input rows hold
// 8 or 16 channels side by side, on a CPU with AVX2 and FMA (and TESSERA_ROW_KERNELS not 0).
bool runs_as_narrow_pointwise(const ConvAttributes& attributes, const Shape& input_shape, const Shape& output_shape,
                              const KernelInputs& in, memory::data_type compute, memory::data_type output_type);

std::unique_ptr<Kernel> make_narrow_pointwise_kernel(const Shape& input_shape, const Shape& output_shape, const KernelInputs& in,
                                                     Parameter* weight, Parameter* bias);

}  // namespace tessera::ops
