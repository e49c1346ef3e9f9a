// Numeric gradient check, in the spirit of tiny-dnn's: compare an analytic gradient with central
// differences of a scalar function at sampled indices of every input.
//
// The scalar function is usually L(inputs) = Σ g ⊙ op(inputs) for a fixed random g, so that the
// analytic gradient of L is exactly op's backward applied to dy = g:
//
//   using namespace tessera;
//   Tensor x = reference::random_uniform({2, 3, 5, 5}, /*seed*/ 1);     // [N, C, H, W]
//   Tensor w = reference::random_uniform({4, 3, 3, 3}, 2);              // [C_out, C_in, kH, kW]
//   ops::ConvAttributes conv = ops::ConvAttributes::same(2, 3);
//   Tensor g = reference::random_uniform({2, 4, 5, 5}, 3);              // dy
//   auto loss = [&](const std::vector<Tensor>& in) {
//       return reference::inner_product(g, reference::conv_forward(in[0], in[1], nullptr, conv));
//   };
//   Tensor dx = reference::conv_backward_data(g, w, x.shape(), conv);
//   Tensor dw = reference::conv_backward_weights(x, g, conv, w.shape()).weights;
//   reference::GradientCheckReport report = reference::check_gradients(loss, {x, w}, {dx, dw});
//   EXPECT_LE(report.max_relative_error, 1e-2) << report.describe();
//
// How the numeric gradient is taken, per checked element x_i (f32):
//   h = relative_step · max(|x_i|, 1); x± = float(x_i ± h); numeric = (L(x+) - L(x-)) / (x+ - x-),
// where the denominator is the difference of the two f32 values actually fed to L, taken in double,
// so the rounding of the step itself costs nothing. L should accumulate in double (inner_product does).
// Only one element changes at a time and the ops are deterministic, so the f32 rounding of outputs the
// element does not reach cancels exactly between L(x+) and L(x-); what remains is the rounding of the
// outputs it does reach, about 1e-7 · |y| · √(outputs reached) / h.
//
// Errors: absolute |a - n|; relative |a - n| / max(|a|, |n|, denominator_floor · scale, absolute_floor),
// where scale is the largest |analytic| of the same input. The floor keeps entries whose gradient is
// nearly zero (cancellations) from turning f32 noise into a large relative error.
//
// Tolerances for f32 inputs, gradients and outputs of magnitude ~1 and tensors of a few hundred
// elements. max_relative_error ≤ 1e-2 passes everywhere with a margin of 3 or more; the largest errors
// test_reference_ops saw over 60 sets of random inputs:
//     relu, concat, max pooling          ≤ 1e-7   (outputs copy inputs: no rounding noise)
//     add, global average pool           ≤ 1e-4
//     average pooling, transposed conv   ≤ 1.5e-3
//     dense, conv, softmax               ≤ 3.5e-3
//     batch norm (± fused relu)          ≤ 2e-3 with relative_step = 1e-2; up to 7e-3 with the default
// The step: 3e-3 is a compromise between f32 noise (∝ 1/h) and the margins kinks need (∝ h). With 1e-3
// the noise alone reaches ~1e-2 (conv, batch norm); with 1e-2 smooth ops reach ~1e-4 .. 1e-3, but kinks
// need three times the margins below. Batch norm is the noisiest (a step moves every output of the
// channel) and smooth without the relu: check it with relative_step = 1e-2.
//
// Kinks. Central differences are wrong where the function is not differentiable between x- and x+.
//   - ReLU: keep the relu's input at least a margin m > h away from 0, e.g. push_away_from_zero(x,
//     0.05), which moves every value outward by m (so |x| ≥ m, no new ties); fine for |x| < 15.
//   - Max pooling: no two candidates of a window may lie within h of each other. random_distinct gives
//     every element a different value, spaced `spacing` apart (a shuffled ramp centred on 0). With the
//     default step this needs spacing > h = 3e-3 · max(|x|, 1): spacing ≥ 1e-2 (the default) and fewer
//     than ~600 elements (the largest |x| is num_elements · spacing / 2).
//   - Fused BN + ReLU: the relu's input depends on the whole channel; choose beta so that no normalised
//     value lies within 2 · γ/σ · h of 0 (test_reference_ops spreads x away from the channel mean and
//     puts the kink in the widest gap between the normalised values).
#pragma once

#include "tensor/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tessera::reference {

struct GradientCheckOptions {
    std::int64_t max_samples_per_input = 64;  // K random distinct indices per input ...
    std::int64_t check_all_up_to = 256;       // ... unless it has at most this many elements: then all
    double relative_step = 3e-3;              // h = relative_step · max(|x_i|, 1)
    // relative error = |a - n| / max(|a|, |n|, denominator_floor · max_j |a_j|, absolute_floor), where
    // max_j |a_j| is the largest analytic gradient of the same input: the scale of that gradient.
    double denominator_floor = 1e-2;
    double absolute_floor = 1e-6;
    std::uint64_t seed = 1;                   // for choosing the indices
};

struct GradientCheckReport {
    double max_absolute_error = 0;
    double max_relative_error = 0;
    // The element with the largest relative error:
    std::size_t worst_input = 0;      // position in the inputs list
    std::int64_t worst_offset = -1;   // flat element offset (row-major)
    Shape worst_index;                // the same as a full index
    double worst_analytic = 0;
    double worst_numeric = 0;
    std::int64_t num_checked = 0;     // elements compared, over all inputs

    std::string describe() const;  // one line, for test failure messages
};

// L(inputs); the inputs passed in are perturbed copies, never the caller's tensors.
using ScalarFunction = std::function<double(const std::vector<Tensor>& inputs)>;

// inputs[i] and analytic[i] are f32 with the same shape; analytic[i] is dL/d inputs[i].
GradientCheckReport check_gradients(const ScalarFunction& loss, const std::vector<Tensor>& inputs,
                                    const std::vector<Tensor>& analytic, const GradientCheckOptions& options = {});

// ---- helpers for building losses and inputs ----------------------------------------------------------

double inner_product(const Tensor& a, const Tensor& b);  // Σ a ⊙ b over all elements, in double; same shapes

// f32 values uniform in [low, high), reproducible from the seed on every platform.
Tensor random_uniform(Shape shape, std::uint64_t seed, double low = -1.0, double high = 1.0);
// f32 values (k - (n - 1) / 2) · spacing for k = 0 .. n-1 in a random order: all distinct, no ties.
Tensor random_distinct(Shape shape, std::uint64_t seed, double spacing = 1e-2);
// x += copysign(margin, x) for every element (0 goes to +margin): afterwards |x| ≥ margin.
void push_away_from_zero(Tensor& x, double margin);

}  // namespace tessera::reference
