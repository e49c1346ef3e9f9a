// The op kernels an Executor compiles a graph into, one factory per op family (each family in its
// own file beside this one). A factory creates its oneDNN primitives for fixed shapes and the layouts
// its inputs arrive in (KernelInputs, kernel.hpp), fitting each to the caller's scratchpad; the kernel's
// output_desc() is the layout it writes. Shapes are logical: [N, C, (D,) H, W], or [N, F] after global
// pooling.
//
//   Scratchpad scratchpad;
//   const KernelInputs in{.descs = {plain_desc(x.shape())}, .needs_gradient = {true}, .scratchpad = &scratchpad};
//   auto conv = make_conv_kernel(ConvAttributes::same(2, 3), x.shape(), {1, 16, 64, 64}, in, &weight, nullptr,
//                                memory::data_type::f32, memory::data_type::f32);
//   scratchpad.allocate();
//   dnnl::memory y(conv->output_desc(), cpu_engine());
//   conv->forward({wrap(x)}, y, Mode::Train);
#pragma once

#include "ops/kernel.hpp"

namespace tessera::ops {

// ---- convolutions (convolution_kernels.cpp) ----
// `compute` is the arithmetic (f32 or bf16) and the type of activation gradients; `output_type` the
// type the output is written in; weights and their gradients are the f32 masters in `weight`/`bias`
// (bias may be null).
std::unique_ptr<Kernel> make_conv_kernel(const ConvAttributes& attributes, const Shape& input_shape, const Shape& output_shape,
                                         const KernelInputs& in, Parameter* weight, Parameter* bias,
                                         memory::data_type compute, memory::data_type output_type);
// kernel = stride runs as a 1×1 convolution and a depth-to-space rearrangement (much faster than
// oneDNN's deconvolution, same outputs); other transposed convolutions as oneDNN's deconvolution.
std::unique_ptr<Kernel> make_conv_transpose_kernel(const ConvTransposeAttributes& attributes, const Shape& input_shape,
                                                   const Shape& output_shape, const KernelInputs& in, Parameter* weight,
                                                   Parameter* bias, memory::data_type compute, memory::data_type output_type);

// ---- pooling (pooling_kernels.cpp) ----
std::unique_ptr<Kernel> make_pool_kernel(const PoolAttributes& attributes, const Shape& output_shape, const KernelInputs& in);
// [N, C, ...] → [N, C]. Distributed: a simulated core's tile, its per-(n, c) sums reduced over the
// replica's cores (one reduction phase forward, none backward) so every core holds the whole mean.
std::unique_ptr<Kernel> make_global_avg_pool_kernel(const Shape& input_shape, const KernelInputs& in, bool distributed);

// ---- nearest-neighbour upsampling (upsample_kernel.cpp) ----
std::unique_ptr<Kernel> make_upsample_kernel(const Extents& factor, const Shape& output_shape, const KernelInputs& in);

// ---- cropping (crop_kernel.cpp) ----
// The box of the input at `offset` with the output's extent; backward writes the output gradient into
// that box of the input gradient and zeros elsewhere.
std::unique_ptr<Kernel> make_crop_kernel(const Extents& offset, const Shape& output_shape, const KernelInputs& in);

// ---- element-wise and concatenation (elementwise_kernels.cpp) ----
std::unique_ptr<Kernel> make_relu_kernel(const KernelInputs& in);
std::unique_ptr<Kernel> make_add_kernel(const KernelInputs& in);
// Along channels.
std::unique_ptr<Kernel> make_concat_kernel(const std::vector<Shape>& input_shapes, const Shape& output_shape,
                                           const KernelInputs& in);

// ---- dense (dense_kernel.cpp) ----
std::unique_ptr<Kernel> make_dense_kernel(const Shape& input_shape, const Shape& output_shape, const KernelInputs& in,
                                          Parameter* weight, Parameter* bias);

// ---- batch normalisation (batch_norm_kernel.cpp) ----
// Distributed: a simulated core's tile; training statistics and the backward pass's sums reduced over
// the replica's cores through reduction phases, so the result equals batch norm over the whole tensor.
std::unique_ptr<Kernel> make_batch_norm_kernel(const BatchNormAttributes& attributes, const Shape& output_shape,
                                               const KernelInputs& in, Parameter* scale, Parameter* shift,
                                               Tensor* running_mean, Tensor* running_variance, bool distributed);

// ---- halo buffers (halo_kernel.cpp) ----
// A simulated core's tile widened to `output_shape`: forward copies the tile into the interior (the
// core mesh writes the rows around it from the neighbours); backward returns the interior's gradient.
std::unique_ptr<Kernel> make_halo_kernel(const HaloAttributes& attributes, const Shape& input_shape, const Shape& output_shape,
                                         const KernelInputs& in);

}  // namespace tessera::ops
