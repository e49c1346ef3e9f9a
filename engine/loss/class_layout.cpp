#include "loss/class_layout.hpp"

#include "core/fixed_groups.hpp"

#include <sstream>
#include <vector>

namespace tessera::loss::detail {

namespace {

Shape without_axis_1(const Shape& shape) {
    Shape result;
    for (std::size_t axis = 0; axis < shape.size(); ++axis) {
        if (axis != 1) result.push_back(shape[axis]);
    }
    return result;
}

ClassLayout layout_of(const Shape& shape) {
    ClassLayout layout;
    layout.batch = shape.empty() ? 1 : shape[0];
    layout.classes = shape.size() < 2 ? 1 : shape[1];
    layout.spatial = shape.size() < 3 ? 1 : num_elements_of(std::span(shape).subspan(2));
    return layout;
}

}  // namespace

std::string index_to_string(const Shape& shape, std::int64_t flat_index) {
    Shape index(shape.size(), 0);
    for (std::size_t axis = shape.size(); axis-- > 0;) {
        if (shape[axis] > 0) {
            index[axis] = flat_index % shape[axis];
            flat_index /= shape[axis];
        }
    }
    return shape_to_string(index);
}

ClassLayout check_class_logits(std::string_view what, const Tensor& logits) {
    TESSERA_CHECK(logits.is_defined(), what << ": expected logits [N, C, ...], got an empty tensor");
    TESSERA_CHECK(logits.dtype() == DType::F32,
                  what << ": expected f32 logits, got " << dtype_name(logits.dtype()));
    TESSERA_CHECK(logits.rank() >= 2, what << ": expected logits [N, C, ...] of rank 2 or more, got "
                                           << shape_to_string(logits.shape()));
    TESSERA_CHECK(logits.dim(1) >= 1,
                  what << ": expected at least one class in logits, got " << shape_to_string(logits.shape()));
    return layout_of(logits.shape());
}

ClassLayout check_logits_and_labels(std::string_view what, const Tensor& logits, const Tensor& labels) {
    const ClassLayout layout = check_class_logits(what, logits);
    TESSERA_CHECK(labels.is_defined(), what << ": expected labels [N, ...], got an empty tensor");
    TESSERA_CHECK(labels.dtype() == DType::I32,
                  what << ": expected i32 labels, got " << dtype_name(labels.dtype()));
    const Shape expected = without_axis_1(logits.shape());
    TESSERA_CHECK(labels.shape() == expected,
                  what << ": expected labels of shape " << shape_to_string(expected) << " (logits "
                       << shape_to_string(logits.shape()) << " without the class axis), got "
                       << shape_to_string(labels.shape()));
    return layout;
}

void throw_bad_label(std::string_view what, const Shape& labels_shape, std::int64_t flat_index,
                     std::int32_t label, std::int64_t classes, std::optional<std::int32_t> ignore_label) {
    std::ostringstream message;
    message << what << ": expected labels in [0, " << classes << ") for " << classes << " classes";
    if (ignore_label) message << " or the ignore label " << *ignore_label;
    message << ", got " << label << " at labels" << index_to_string(labels_shape, flat_index);
    TESSERA_REJECT(message.str());
}

LabelTally tally_labels(std::string_view what, const Tensor& labels, std::int64_t classes,
                        std::optional<std::int32_t> ignore_label) {
    const std::int32_t* label = labels.data<std::int32_t>();
    const std::int64_t count = labels.num_elements();
    const std::int32_t ignore = ignore_label.value_or(-1);
    const bool has_ignore = ignore_label.has_value();
    // Counted in fixed groups over the host threads (a 64³ volume's labels took ~0.5 ms of a step on one
    // thread while the other waited); the first bad label found is the first in memory, as one pass finds.
    std::vector<LabelTally> groups(static_cast<std::size_t>(k_fixed_groups));
    std::vector<std::int64_t> first_bad(static_cast<std::size_t>(k_fixed_groups), -1);
    for_fixed_groups(count, count >= 65536, [&](std::int64_t group, std::int64_t begin, std::int64_t end) {
        LabelTally& tally = groups[static_cast<std::size_t>(group)];
        tally.per_class.assign(static_cast<std::size_t>(classes), 0);
        std::int64_t* per_class = tally.per_class.data();
        for (std::int64_t i = begin; i < end; ++i) {
            const std::int32_t y = label[i];
            if (y >= 0 && y < classes) {
                ++per_class[y];
            } else if (has_ignore && y == ignore) {
                ++tally.num_ignored;
            } else {
                first_bad[static_cast<std::size_t>(group)] = i;
                return;
            }
        }
    });
    LabelTally tally;
    tally.per_class.assign(static_cast<std::size_t>(classes), 0);
    for (std::int64_t group = 0; group < k_fixed_groups; ++group) {
        const std::int64_t bad = first_bad[static_cast<std::size_t>(group)];
        if (bad >= 0) throw_bad_label(what, labels.shape(), bad, label[bad], classes, ignore_label);
        const LabelTally& part = groups[static_cast<std::size_t>(group)];
        for (std::int64_t c = 0; c < classes; ++c) tally.per_class[static_cast<std::size_t>(c)] += part.per_class[static_cast<std::size_t>(c)];
        tally.num_ignored += part.num_ignored;
    }
    return tally;
}

ClassLayout check_elementwise(std::string_view what, const Tensor& input, std::string_view input_name,
                              const Tensor& other, std::string_view other_name) {
    TESSERA_CHECK(input.is_defined() && other.is_defined(),
                  what << ": expected " << input_name << " and " << other_name << ", got an empty tensor");
    TESSERA_CHECK(input.dtype() == DType::F32,
                  what << ": expected f32 " << input_name << ", got " << dtype_name(input.dtype()));
    TESSERA_CHECK(other.dtype() == DType::F32,
                  what << ": expected f32 " << other_name << ", got " << dtype_name(other.dtype()));
    TESSERA_CHECK(input.rank() >= 1,
                  what << ": expected " << input_name << " of rank 1 or more, got a rank-0 tensor");
    TESSERA_CHECK(other.shape() == input.shape(),
                  what << ": expected " << other_name << " of the same shape as the " << input_name << " "
                       << shape_to_string(input.shape()) << ", got " << shape_to_string(other.shape()));
    return layout_of(input.shape());
}

WeightLayout check_weights(std::string_view what, const Tensor& input, const Tensor& weights) {
    if (!weights.is_defined()) return WeightLayout::None;
    TESSERA_CHECK(weights.dtype() == DType::F32,
                  what << ": expected f32 weights, got " << dtype_name(weights.dtype()));
    if (weights.shape() == input.shape()) return WeightLayout::PerElement;
    const Shape per_anchor = without_axis_1(input.shape());
    TESSERA_CHECK(input.rank() >= 2 && weights.shape() == per_anchor,
                  what << ": expected weights of shape " << shape_to_string(input.shape())
                       << (input.rank() >= 2 ? " or " + shape_to_string(per_anchor) + " (one per anchor)" : "")
                       << ", got " << shape_to_string(weights.shape()));
    return WeightLayout::PerAnchor;
}

}  // namespace tessera::loss::detail
