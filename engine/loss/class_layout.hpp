// Internal to engine/loss: the layouts the losses and metrics share, and their input checks.
//
// Class logits [N, C, S...] are read as [N, C, S] with S the product of the spatial extents (S = 1
// for [N, C]); their labels [N, S...] as [N, S]. Element-wise losses (focal, smooth L1) read their
// inputs the same way, with C the class or box-code axis, so a weights tensor may either match the
// input or drop axis 1 (one weight per anchor, shared by its C entries).
//
//   ClassLayout layout = check_logits_and_labels("softmax_cross_entropy", logits, labels);
//   // logits [2, 3, 16, 64, 64] → layout {batch 2, classes 3, spatial 65536}
#pragma once

#include "tensor/tensor.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::loss::detail {

struct ClassLayout {
    std::int64_t batch = 0;    // N
    std::int64_t classes = 0;  // C
    std::int64_t spatial = 0;  // S: voxels per image, 1 for [N, C]
    std::int64_t num_voxels() const { return batch * spatial; }
};

// "[1, 3, 5]": the index of the element at `flat_index` of a contiguous tensor of `shape`.
std::string index_to_string(const Shape& shape, std::int64_t flat_index);

// f32 logits of rank ≥ 2 with at least one class.
ClassLayout check_class_logits(std::string_view what, const Tensor& logits);
// ... and i32 labels whose shape is the logits' without axis 1.
ClassLayout check_logits_and_labels(std::string_view what, const Tensor& logits, const Tensor& labels);

// Per-class label counts of a contiguous i32 label tensor. Throws for a label outside [0, classes)
// that is not the ignore label, naming the label, its index and the number of classes.
struct LabelTally {
    std::vector<std::int64_t> per_class;  // voxels of each class
    std::int64_t num_ignored = 0;
};
LabelTally tally_labels(std::string_view what, const Tensor& labels, std::int64_t classes,
                        std::optional<std::int32_t> ignore_label);
[[noreturn]] void throw_bad_label(std::string_view what, const Shape& labels_shape, std::int64_t flat_index,
                                  std::int32_t label, std::int64_t classes,
                                  std::optional<std::int32_t> ignore_label);

// Element-wise losses: f32 `input` of rank ≥ 1 and an f32 `other` (targets) of the same shape.
ClassLayout check_elementwise(std::string_view what, const Tensor& input, std::string_view input_name,
                              const Tensor& other, std::string_view other_name);
// Weights of an element-wise loss: undefined (none), the input's shape, or the input's without axis 1.
enum class WeightLayout { None, PerElement, PerAnchor };
WeightLayout check_weights(std::string_view what, const Tensor& input, const Tensor& weights);

}  // namespace tessera::loss::detail
