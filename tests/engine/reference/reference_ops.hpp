// Reference implementations of the engine's ops: plain loops, double accumulation, f32 in and out.
//
// These exist only for tests. Every fast kernel (oneDNN) is checked against them, and they are checked
// themselves by a numeric gradient check (gradient_check.hpp) and by small hand-computed cases
// (test_reference_ops.cpp). They are written to be obviously correct, not fast: one loop nest per op,
// the same code for 2D and 3D (a 4-d tensor [N, C, H, W] is treated as [N, C, 1, H, W] inside).
//
// Conventions:
//   - Activations are [N, C, H, W] or [N, C, D, H, W]; tensors are f32. Inputs with any strides are
//     accepted (they are made contiguous first); outputs are new contiguous tensors.
//   - Convolution weights are [C_out, C_in, k...]; transposed convolution weights [C_in, C_out, k...].
//     Padding is implicit zeros. A bias pointer may be null (no bias); `has_bias` in the attributes is
//     not consulted, the pointer decides.
//   - Transposed convolution has no padding: output extent (in - 1) * stride + kernel. It is the exact
//     adjoint of a 'valid' convolution with the same kernel and stride.
//   - Max pooling: the gradient goes to the FIRST maximal element in window scan order (D, then H,
//     then W, outermost first), i.e. a later tap wins only if strictly greater. Padding never wins:
//     padded taps are skipped, not treated as -inf or 0. pool_backward recomputes the argmax from x.
//   - Average pooling divides by the number of taps inside the unpadded input (padding excluded).
//     A window with no tap inside the input is an error.
//   - Batch norm statistics are per channel over N and all spatial axes. The batch variance is biased
//     (divide by n); the running variance is updated with the UNBIASED one (n / (n - 1)), as PyTorch:
//       running_mean = momentum * running_mean + (1 - momentum) * batch_mean
//       running_var  = momentum * running_var  + (1 - momentum) * batch_var * n / (n - 1)
//     With fuse_relu, y = relu(bn(x)) and the backward pass zeroes dy wherever y <= 0.
//   - ReLU's gradient is 0 at x == 0 (dy passes only where x > 0).
//   - Nearest-neighbour upsampling by integer factors f (one per spatial axis): y[.., o] = x[.., o / f]
//     (integer division per axis); the backward sums the f^rank output gradients of every input element.
//
//   using namespace tessera;
//   ops::ConvAttributes conv = ops::ConvAttributes::same(3, 3);            // 3×3×3, 'same'
//   Tensor x = Tensor::full<float>({1, 2, 8, 8, 8}, 1.0f);                 // [N, C_in, D, H, W]
//   Tensor w = Tensor::full<float>(ops::conv_weight_shape(2, 4, conv), 0.5f);  // [C_out, C_in, 3, 3, 3]
//   Tensor y = reference::conv_forward(x, w, nullptr, conv);              // [1, 4, 8, 8, 8]
//   Tensor dx = reference::conv_backward_data(y, w, x.shape(), conv);     // [1, 2, 8, 8, 8]
#pragma once

#include "ops/attributes.hpp"
#include "tensor/tensor.hpp"

#include <cstdint>
#include <vector>

namespace tessera::reference {

// ---- convolution -------------------------------------------------------------------------------

struct ConvWeightGradients {
    Tensor weights;  // same shape as the weights
    Tensor bias;     // [C_out]: dy summed over N and all spatial axes
};

Tensor conv_forward(const Tensor& x,       // [N, C_in, (D,) H, W]
                    const Tensor& w,       // [C_out, C_in, (kD,) kH, kW]
                    const Tensor* bias,    // [C_out] or null
                    const ops::ConvAttributes& attributes);  // → [N, C_out, (D',) H', W']
Tensor conv_backward_data(const Tensor& dy,     // [N, C_out, (D',) H', W']
                          const Tensor& w,      // [C_out, C_in, (kD,) kH, kW]
                          const Shape& x_shape, // [N, C_in, (D,) H, W]
                          const ops::ConvAttributes& attributes);  // → dx, x_shape
ConvWeightGradients conv_backward_weights(const Tensor& x,   // [N, C_in, (D,) H, W]
                                          const Tensor& dy,  // [N, C_out, (D',) H', W']
                                          const ops::ConvAttributes& attributes,
                                          const Shape& w_shape);  // [C_out, C_in, (kD,) kH, kW]

// ---- transposed convolution ---------------------------------------------------------------------

Tensor conv_transpose_forward(const Tensor& x,     // [N, C_in, (D,) H, W]
                              const Tensor& w,     // [C_in, C_out, (kD,) kH, kW]
                              const Tensor* bias,  // [C_out] or null
                              const ops::ConvTransposeAttributes& attributes);
                              // → [N, C_out, ((D-1)*s+k,) (H-1)*s+k, (W-1)*s+k]
Tensor conv_transpose_backward_data(const Tensor& dy,      // [N, C_out, (D',) H', W']
                                    const Tensor& w,       // [C_in, C_out, (kD,) kH, kW]
                                    const Shape& x_shape,  // [N, C_in, (D,) H, W]
                                    const ops::ConvTransposeAttributes& attributes);  // → dx
ConvWeightGradients conv_transpose_backward_weights(const Tensor& x,   // [N, C_in, (D,) H, W]
                                                    const Tensor& dy,  // [N, C_out, (D',) H', W']
                                                    const ops::ConvTransposeAttributes& attributes,
                                                    const Shape& w_shape);  // [C_in, C_out, k...]

// ---- pooling ------------------------------------------------------------------------------------

Tensor pool_forward(const Tensor& x,  // [N, C, (D,) H, W]
                    const ops::PoolAttributes& attributes);  // → [N, C, (D',) H', W']
Tensor pool_backward(const Tensor& dy,  // [N, C, (D',) H', W']
                     const Tensor& x,   // [N, C, (D,) H, W]: max pooling finds its argmax here
                     const ops::PoolAttributes& attributes);  // → dx, shape of x

// ---- batch normalisation ------------------------------------------------------------------------

struct BatchNormTrainingResult {
    Tensor y;                 // shape of x
    Tensor mean;              // [C] batch mean
    Tensor variance;          // [C] batch variance, biased (divide by n)
    Tensor running_mean;      // [C] updated
    Tensor running_variance;  // [C] updated with the unbiased batch variance
};

struct BatchNormGradients {
    Tensor x;      // shape of x
    Tensor gamma;  // [C]
    Tensor beta;   // [C]
};

// Needs at least two elements per channel (n = N × spatial > 1) for the unbiased variance.
BatchNormTrainingResult batch_norm_forward_training(const Tensor& x,                 // [N, C, (D,) H, W]
                                                    const Tensor& gamma,             // [C]
                                                    const Tensor& beta,              // [C]
                                                    const Tensor& running_mean,      // [C] before
                                                    const Tensor& running_variance,  // [C] before
                                                    const ops::BatchNormAttributes& attributes);
Tensor batch_norm_forward_inference(const Tensor& x,                 // [N, C, (D,) H, W]
                                    const Tensor& gamma,             // [C]
                                    const Tensor& beta,              // [C]
                                    const Tensor& running_mean,      // [C]
                                    const Tensor& running_variance,  // [C]
                                    const ops::BatchNormAttributes& attributes);  // uses epsilon, fuse_relu
// Backward of the training forward: mean and variance are the batch statistics of x (so dx includes
// the paths through them). beta is needed only with fuse_relu, to recompute the mask y > 0.
BatchNormGradients batch_norm_backward(const Tensor& dy,        // [N, C, (D,) H, W]
                                       const Tensor& x,         // [N, C, (D,) H, W]
                                       const Tensor& gamma,     // [C]
                                       const Tensor& beta,      // [C]
                                       const Tensor& mean,      // [C] batch mean
                                       const Tensor& variance,  // [C] batch variance, biased
                                       const ops::BatchNormAttributes& attributes);  // epsilon, fuse_relu

// ---- element-wise and shape ops -----------------------------------------------------------------

Tensor relu_forward(const Tensor& x);                     // any shape
Tensor relu_backward(const Tensor& dy, const Tensor& x);  // dy where x > 0, else 0

Tensor add(const Tensor& a, const Tensor& b);  // same shapes; y = a + b
struct AddGradients {
    Tensor a;  // copy of dy
    Tensor b;  // copy of dy
};
AddGradients add_backward(const Tensor& dy);

// Concatenation along axis 1. All parts have the same rank and the same extents except axis 1.
Tensor concat_channels(const std::vector<Tensor>& parts);  // [N, C_0 + C_1 + ..., ...]
std::vector<Tensor> concat_channels_backward(const Tensor& dy,  // [N, ΣC_i, ...]
                                             const std::vector<std::int64_t>& channels);  // C_i → [N, C_i, ...]

// Nearest-neighbour upsampling; factor has one entry ≥ 1 per spatial axis.
Tensor upsample_nearest_forward(const Tensor& x,                // [N, C, (D,) H, W]
                                const ops::Extents& factor);    // → [N, C, (D·fD,) H·fH, W·fW]
Tensor upsample_nearest_backward(const Tensor& dy,              // [N, C, (D·fD,) H·fH, W·fW]
                                 const ops::Extents& factor);   // → dx [N, C, (D,) H, W]

// The box at `offset` (one entry per spatial axis) with `extent` rows per axis; backward places dy in
// that box of a zero tensor of x's shape.
Tensor crop_forward(const Tensor& x,                  // [N, C, (D,) H, W]
                    const ops::Extents& offset,       // per spatial axis
                    const ops::Extents& extent);      // → [N, C, extent...]
Tensor crop_backward(const Tensor& dy,                // [N, C, extent...]
                     const Shape& x_shape,            // → dx [N, C, (D,) H, W]
                     const ops::Extents& offset);

Tensor global_average_pool(const Tensor& x);  // [N, C, spatial...] → [N, C]
Tensor global_average_pool_backward(const Tensor& dy,        // [N, C]
                                    const Shape& x_shape);  // [N, C, spatial...] → dx

// ---- dense --------------------------------------------------------------------------------------

struct DenseGradients {
    Tensor x;     // [N, in]
    Tensor w;     // [out, in]
    Tensor bias;  // [out]
};

Tensor dense_forward(const Tensor& x,      // [N, in]
                     const Tensor& w,      // [out, in]
                     const Tensor* bias);  // [out] or null → [N, out]
DenseGradients dense_backward(const Tensor& dy,  // [N, out]
                              const Tensor& x,   // [N, in]
                              const Tensor& w);  // [out, in]

// ---- softmax ------------------------------------------------------------------------------------

Tensor softmax_channels(const Tensor& x);  // [N, C, ...] → same; softmax over axis 1 at every position
Tensor softmax_channels_backward(const Tensor& dy,  // [N, C, ...]
                                 const Tensor& y);  // softmax output → dx = y ⊙ (dy - Σ_c dy ⊙ y)

}  // namespace tessera::reference
