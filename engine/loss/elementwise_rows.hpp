// Internal to engine/loss: how the element-wise losses (focal, smooth L1) walk their inputs.
//
// Inputs [N, C, ...spatial] are read in blocks of at most k_elementwise_block contiguous elements.
// Each block comes with its weights: the weights' own block (per-element weights), the anchors'
// weights shared by the C classes of each anchor (per-anchor weights [N, ...spatial]), or ones.
//
//   for_each_block(in, [&](std::int64_t offset, std::int64_t len, const float* w) {
//       for (j = 0; j < len; ++j) sum[j] += w[j] * f(x[offset + j]);
//   });
#pragma once

#include "loss/class_layout.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>

namespace tessera::loss::detail {

inline constexpr std::int64_t k_elementwise_block = 512;

struct ElementwiseInputs {
    Tensor input;    // contiguous: logits or predictions
    Tensor other;    // contiguous: targets
    Tensor weights;  // contiguous, or undefined
    ClassLayout layout;
    WeightLayout weight_layout = WeightLayout::None;
};

inline ElementwiseInputs prepare_elementwise(std::string_view what, const Tensor& input, std::string_view input_name,
                                             const Tensor& other, std::string_view other_name,
                                             const Tensor& weights) {
    ElementwiseInputs in;
    in.layout = check_elementwise(what, input, input_name, other, other_name);
    in.weight_layout = check_weights(what, input, weights);
    in.input = input.contiguous();
    in.other = other.contiguous();
    if (in.weight_layout != WeightLayout::None) in.weights = weights.contiguous();
    return in;
}

// fn(offset, len, w): elements [offset, offset + len) of the flat input, w[j] the weight of element
// offset + j. Blocks run over the flat tensor, except with per-anchor weights and long rows, where they
// run row by row so each row's weights are read in place; short rows (e.g. [M, K]) get their per-anchor
// weights copied out into a block.
template <class Fn> void for_each_block(const ElementwiseInputs& in, Fn&& fn) {
    constexpr std::int64_t block = k_elementwise_block;
    static const std::array<float, block> ones = [] {
        std::array<float, block> values{};
        values.fill(1.0f);
        return values;
    }();
    const std::int64_t classes = in.layout.classes;
    const std::int64_t spatial = in.layout.spatial;
    const std::int64_t count = in.input.num_elements();
    if (in.weight_layout != WeightLayout::PerAnchor) {
        const float* weights = in.weight_layout == WeightLayout::PerElement ? in.weights.data<float>() : nullptr;
        for (std::int64_t offset = 0; offset < count; offset += block) {
            fn(offset, std::min(block, count - offset), weights ? weights + offset : ones.data());
        }
        return;
    }
    const float* weights = in.weights.data<float>();
    if (spatial >= block / 2) {
        for (std::int64_t n = 0; n < in.layout.batch; ++n) {
            for (std::int64_t c = 0; c < classes; ++c) {
                const std::int64_t row = (n * classes + c) * spatial;
                for (std::int64_t s0 = 0; s0 < spatial; s0 += block) {
                    fn(row + s0, std::min(block, spatial - s0), weights + n * spatial + s0);
                }
            }
        }
        return;
    }
    alignas(64) std::array<float, block> expanded{};
    std::int64_t n = 0, c = 0, s = 0;  // index of the next element
    for (std::int64_t offset = 0; offset < count; offset += block) {
        const std::int64_t len = std::min(block, count - offset);
        for (std::int64_t j = 0; j < len; ++j) {
            expanded[static_cast<std::size_t>(j)] = weights[n * spatial + s];
            if (++s == spatial) {
                s = 0;
                if (++c == classes) {
                    c = 0;
                    ++n;
                }
            }
        }
        fn(offset, len, expanded.data());
    }
}

}  // namespace tessera::loss::detail
