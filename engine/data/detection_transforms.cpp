#include "data/detection_transforms.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tessera::data {
namespace {

using detection::Box;
using detection::LabeledBox;

// Python's round and tf.round: halves go to the even neighbour (the default floating-point rounding mode).
std::int64_t round_half_even(double value) {
    return static_cast<std::int64_t>(std::nearbyint(value));
}

void check_image(const Tensor& image, const char* caller) {
    TESSERA_CHECK(image.rank() == 3 && image.dtype() == DType::F32 && image.dim(1) >= 1 && image.dim(2) >= 1,
                  caller << ": expected an image [C, H, W] f32 with H, W ≥ 1, got " << shape_to_string(image.shape())
                         << " " << dtype_name(image.dtype()));
}

void check_sample(const DetectionSample& sample, const char* caller) {
    check_image(sample.image, caller);
    const auto [height, width] = sample.content_size;
    TESSERA_CHECK(height >= 1 && width >= 1 && height <= sample.image.dim(1) && width <= sample.image.dim(2),
                  caller << ": expected a content size within the image " << shape_to_string(sample.image.shape())
                         << ", got [" << height << ", " << width
                         << "]; build samples with make_detection_sample, which sets it to the whole image");
}

// The content of a sample, without its padding.
Tensor content_of(const DetectionSample& sample) {
    const auto [height, width] = sample.content_size;
    if (height == sample.image.dim(1) && width == sample.image.dim(2)) return sample.image;
    return sample.image.view_box({0, 0, 0}, {sample.image.dim(0), height, width});
}

// Source taps of one axis: output index o (in the scaled image) samples (o + 0.5) · in / scaled − 0.5,
// clamped to [0, in − 1], between `low` and `high` = low + 1 (or low at the last pixel) with `weight` on high.
struct Taps {
    std::vector<std::int64_t> low, high;
    std::vector<float> weight;
};

Taps axis_taps(std::int64_t in, std::int64_t scaled, std::int64_t begin, std::int64_t extent) {
    Taps taps;
    const double ratio = static_cast<double>(in) / static_cast<double>(scaled);
    for (std::int64_t o = begin; o < begin + extent && o < scaled; ++o) {
        const double position =
            std::clamp((static_cast<double>(o) + 0.5) * ratio - 0.5, 0.0, static_cast<double>(in - 1));
        const auto low = static_cast<std::int64_t>(position);  // ≥ 0: floor
        taps.low.push_back(low);
        taps.high.push_back(std::min(low + 1, in - 1));
        taps.weight.push_back(static_cast<float>(position - static_cast<double>(low)));
    }
    return taps;
}

Box scale_box(const Box& box, double scale_x, double scale_y) {
    return {static_cast<float>(box.x_min * scale_x), static_cast<float>(box.y_min * scale_y),
            static_cast<float>(box.x_max * scale_x), static_cast<float>(box.y_max * scale_y)};
}

// A sample resized to `scaled` [H, W] and placed in an image of `extent`, boxes scaled with it.
DetectionSample resize_into(const DetectionSample& sample, std::array<std::int64_t, 2> scaled,
                            std::array<std::int64_t, 2> extent) {
    const auto [height, width] = sample.content_size;
    DetectionSample result;
    result.image = resize_bilinear_window(content_of(sample), scaled, {0, 0}, extent);
    result.content_size = scaled;
    const double scale_x = static_cast<double>(scaled[1]) / static_cast<double>(width);
    const double scale_y = static_cast<double>(scaled[0]) / static_cast<double>(height);
    result.objects.reserve(sample.objects.size());
    for (const LabeledBox& object : sample.objects) {
        result.objects.push_back({scale_box(object.box, scale_x, scale_y), object.class_id});
    }
    return result;
}

}  // namespace

DetectionSample make_detection_sample(Tensor image, std::vector<detection::LabeledBox> objects) {
    check_image(image, "make_detection_sample");
    DetectionSample sample;
    sample.content_size = {image.dim(1), image.dim(2)};
    sample.image = std::move(image);
    sample.objects = std::move(objects);
    return sample;
}

Tensor resize_bilinear(const Tensor& image, std::array<std::int64_t, 2> size) {
    return resize_bilinear_window(image, size, {0, 0}, size);
}

Tensor resize_bilinear_window(const Tensor& image, std::array<std::int64_t, 2> scaled_size,
                              std::array<std::int64_t, 2> begin, std::array<std::int64_t, 2> extent) {
    check_image(image, "resize_bilinear");
    TESSERA_CHECK(scaled_size[0] >= 1 && scaled_size[1] >= 1 && begin[0] >= 0 && begin[1] >= 0 && extent[0] >= 1 &&
                      extent[1] >= 1,
                  "resize_bilinear: expected a size ≥ 1, a window begin ≥ 0 and extent ≥ 1, got size ["
                      << scaled_size[0] << ", " << scaled_size[1] << "], begin [" << begin[0] << ", " << begin[1]
                      << "], extent [" << extent[0] << ", " << extent[1] << "]");
    const std::int64_t channels = image.dim(0);
    const Taps rows = axis_taps(image.dim(1), scaled_size[0], begin[0], extent[0]);
    const Taps columns = axis_taps(image.dim(2), scaled_size[1], begin[1], extent[1]);
    const auto filled_rows = static_cast<std::int64_t>(rows.low.size());
    const auto filled_columns = static_cast<std::int64_t>(columns.low.size());
    Tensor result = Tensor::zeros({channels, extent[0], extent[1]}, DType::F32);
    const float* in = image.data<float>();
    const Shape& strides = image.strides();  // the input may be a view (a sample's content)
    float* out = result.data<float>();
    for (std::int64_t c = 0; c < channels; ++c) {
        const float* channel = in + c * strides[0];
        for (std::int64_t y = 0; y < filled_rows; ++y) {
            const float* top = channel + rows.low[static_cast<std::size_t>(y)] * strides[1];
            const float* bottom = channel + rows.high[static_cast<std::size_t>(y)] * strides[1];
            const float weight_y = rows.weight[static_cast<std::size_t>(y)];
            float* row = out + (c * extent[0] + y) * extent[1];
            for (std::int64_t x = 0; x < filled_columns; ++x) {
                const auto index = static_cast<std::size_t>(x);
                const std::int64_t left = columns.low[index] * strides[2], right = columns.high[index] * strides[2];
                const float weight_x = columns.weight[index];
                const float upper = top[left] * (1.0f - weight_x) + top[right] * weight_x;
                const float lower = bottom[left] * (1.0f - weight_x) + bottom[right] * weight_x;
                row[x] = upper * (1.0f - weight_y) + lower * weight_y;
            }
        }
    }
    return result;
}

DetectionSample resize_fixed_shape(const DetectionSample& sample, std::array<std::int64_t, 2> size) {
    check_sample(sample, "resize_fixed_shape");
    TESSERA_CHECK(size[0] >= 1 && size[1] >= 1,
                  "resize_fixed_shape: expected a size [H, W] ≥ 1, got [" << size[0] << ", " << size[1] << "]");
    return resize_into(sample, size, size);
}

std::array<std::int64_t, 2> keep_aspect_ratio_size(std::array<std::int64_t, 2> size,
                                                   const KeepAspectRatioOptions& options) {
    TESSERA_CHECK(size[0] >= 1 && size[1] >= 1,
                  "keep_aspect_ratio_size: expected an image size ≥ 1, got [" << size[0] << ", " << size[1] << "]");
    TESSERA_CHECK(
        options.min_dimension >= 1 && (options.max_dimension == 0 || options.max_dimension >= options.min_dimension),
        "keep_aspect_ratio_resizer: expected 1 ≤ min_dimension ≤ max_dimension (or max_dimension 0 for "
        "no limit), got min_dimension "
            << options.min_dimension << ", max_dimension " << options.max_dimension);
    const auto sides_at = [&](double scale) -> std::array<std::int64_t, 2> {
        return {std::max<std::int64_t>(1, round_half_even(static_cast<double>(size[0]) * scale)),
                std::max<std::int64_t>(1, round_half_even(static_cast<double>(size[1]) * scale))};
    };
    const auto short_side = static_cast<double>(std::min(size[0], size[1]));
    const auto long_side = static_cast<double>(std::max(size[0], size[1]));
    const std::array<std::int64_t, 2> large = sides_at(static_cast<double>(options.min_dimension) / short_side);
    if (options.max_dimension > 0 && std::max(large[0], large[1]) > options.max_dimension) {
        return sides_at(static_cast<double>(options.max_dimension) / long_side);
    }
    return large;
}

DetectionSample resize_keep_aspect_ratio(const DetectionSample& sample, const KeepAspectRatioOptions& options) {
    check_sample(sample, "resize_keep_aspect_ratio");
    const std::array<std::int64_t, 2> scaled = keep_aspect_ratio_size(sample.content_size, options);
    const bool pad = options.pad_to_max_dimension && options.max_dimension > 0;
    return resize_into(sample, scaled, pad ? std::array{options.max_dimension, options.max_dimension} : scaled);
}

DetectionSample flip_horizontally(const DetectionSample& sample) {
    check_sample(sample, "flip_horizontally");
    DetectionSample result;
    result.image = sample.image.clone();
    result.content_size = sample.content_size;
    const std::int64_t channels = result.image.dim(0), height = result.image.dim(1), stride = result.image.dim(2);
    const std::int64_t width = sample.content_size[1];
    float* pixels = result.image.data<float>();
    for (std::int64_t row = 0; row < channels * height; ++row) {
        std::reverse(pixels + row * stride, pixels + row * stride + width);
    }
    const auto content_width = static_cast<float>(width);
    result.objects.reserve(sample.objects.size());
    for (const LabeledBox& object : sample.objects) {
        const Box& box = object.box;
        result.objects.push_back(
            {{content_width - box.x_max, box.y_min, content_width - box.x_min, box.y_max}, object.class_id});
    }
    return result;
}

DetectionSample random_horizontal_flip(const DetectionSample& sample, SeededRandom& random, double probability) {
    TESSERA_CHECK(probability >= 0 && probability <= 1,
                  "random_horizontal_flip: expected a probability in [0, 1], got " << probability);
    const bool flip = random.uniform() < probability;
    if (flip) return flip_horizontally(sample);
    check_sample(sample, "random_horizontal_flip");
    return sample;
}

DetectionSample scale_and_crop(const DetectionSample& sample, std::array<std::int64_t, 2> output_size, double scale,
                               std::array<std::int64_t, 2> crop_offset, double min_visible_fraction) {
    check_sample(sample, "scale_and_crop");
    TESSERA_CHECK(output_size[0] >= 1 && output_size[1] >= 1 && std::isfinite(scale) && scale > 0,
                  "scale jitter: expected an output size ≥ 1 and a scale > 0, got output size ["
                      << output_size[0] << ", " << output_size[1] << "], scale " << scale);
    TESSERA_CHECK(min_visible_fraction >= 0 && min_visible_fraction <= 1,
                  "scale jitter: expected min_visible_fraction in [0, 1], got " << min_visible_fraction);
    const auto [height, width] = sample.content_size;
    const double fit = std::min(static_cast<double>(output_size[0]) / static_cast<double>(height),
                                static_cast<double>(output_size[1]) / static_cast<double>(width));
    const std::array<std::int64_t, 2> scaled{
        std::max<std::int64_t>(1, round_half_even(static_cast<double>(height) * scale * fit)),
        std::max<std::int64_t>(1, round_half_even(static_cast<double>(width) * scale * fit))};
    for (std::size_t axis = 0; axis < 2; ++axis) {
        const std::int64_t slack = std::max<std::int64_t>(0, scaled[axis] - output_size[axis]);
        TESSERA_CHECK(crop_offset[axis] >= 0 && crop_offset[axis] <= slack,
                      "scale jitter: expected the crop offset along " << (axis == 0 ? "y" : "x") << " in [0, " << slack
                                                                      << "], got " << crop_offset[axis]);
    }

    DetectionSample result;
    result.image = resize_bilinear_window(content_of(sample), scaled, crop_offset, output_size);
    result.content_size = {std::min(scaled[0] - crop_offset[0], output_size[0]),
                           std::min(scaled[1] - crop_offset[1], output_size[1])};
    const double scale_x = static_cast<double>(scaled[1]) / static_cast<double>(width);
    const double scale_y = static_cast<double>(scaled[0]) / static_cast<double>(height);
    const auto offset_x = static_cast<double>(crop_offset[1]), offset_y = static_cast<double>(crop_offset[0]);
    const auto limit_x = static_cast<double>(result.content_size[1]);
    const auto limit_y = static_cast<double>(result.content_size[0]);
    for (const LabeledBox& object : sample.objects) {
        // In double: the area comparison must not flip on float rounding of the clipped corners.
        const double x_min = object.box.x_min * scale_x - offset_x, x_max = object.box.x_max * scale_x - offset_x;
        const double y_min = object.box.y_min * scale_y - offset_y, y_max = object.box.y_max * scale_y - offset_y;
        const double clipped_x_min = std::clamp(x_min, 0.0, limit_x), clipped_x_max = std::clamp(x_max, 0.0, limit_x);
        const double clipped_y_min = std::clamp(y_min, 0.0, limit_y), clipped_y_max = std::clamp(y_max, 0.0, limit_y);
        if (!(clipped_x_max > clipped_x_min && clipped_y_max > clipped_y_min)) continue;
        const double area = std::max(0.0, x_max - x_min) * std::max(0.0, y_max - y_min);
        const double visible = (clipped_x_max - clipped_x_min) * (clipped_y_max - clipped_y_min);
        if (visible < min_visible_fraction * area) continue;
        result.objects.push_back({{static_cast<float>(clipped_x_min), static_cast<float>(clipped_y_min),
                                   static_cast<float>(clipped_x_max), static_cast<float>(clipped_y_max)},
                                  object.class_id});
    }
    return result;
}

DetectionSample random_scale_jitter(const DetectionSample& sample, const ScaleJitterOptions& options,
                                    SeededRandom& random) {
    check_sample(sample, "random_scale_jitter");
    TESSERA_CHECK(options.min_scale > 0 && options.max_scale >= options.min_scale && std::isfinite(options.max_scale),
                  "random_scale_jitter: expected 0 < min_scale ≤ max_scale, got min_scale "
                      << options.min_scale << ", max_scale " << options.max_scale);
    TESSERA_CHECK(options.output_size[0] >= 1 && options.output_size[1] >= 1,
                  "random_scale_jitter: expected an output size ≥ 1, got [" << options.output_size[0] << ", "
                                                                            << options.output_size[1] << "]");
    const double scale = options.min_scale + (options.max_scale - options.min_scale) * random.uniform();
    // The same scaled size scale_and_crop computes, for the offsets' ranges.
    const auto [height, width] = sample.content_size;
    const double fit = std::min(static_cast<double>(options.output_size[0]) / static_cast<double>(height),
                                static_cast<double>(options.output_size[1]) / static_cast<double>(width));
    const std::array<std::int64_t, 2> scaled{
        std::max<std::int64_t>(1, round_half_even(static_cast<double>(height) * scale * fit)),
        std::max<std::int64_t>(1, round_half_even(static_cast<double>(width) * scale * fit))};
    std::array<std::int64_t, 2> offset{};
    for (std::size_t axis = 0; axis < 2; ++axis) {
        const std::int64_t slack = std::max<std::int64_t>(0, scaled[axis] - options.output_size[axis]);
        // uniform() < 1, so the floor is at most slack.
        offset[axis] = static_cast<std::int64_t>(random.uniform() * static_cast<double>(slack + 1));
    }
    return scale_and_crop(sample, options.output_size, scale, offset, options.min_visible_fraction);
}

detection::PaddedGroundTruth pad_sample_ground_truth(std::span<const detection::LabeledBox> objects,
                                                     const GroundTruthPadding& options, std::string_view image_name) {
    TESSERA_CHECK(options.max_number_of_boxes >= 1,
                  "max_number_of_boxes: expected ≥ 1, got " << options.max_number_of_boxes);
    const auto count = static_cast<std::int64_t>(objects.size());
    if (count <= options.max_number_of_boxes) return detection::pad_ground_truth(objects, options.max_number_of_boxes);
    TESSERA_CHECK(options.excess_boxes != ExcessBoxes::Error,
                  "image '" << image_name << "' has " << count
                            << " objects, more than max_number_of_boxes = " << options.max_number_of_boxes
                            << ": raise max_number_of_boxes, or keep the largest or the first ones (data.excess_boxes: "
                               "\"keep_largest\" or \"keep_first\")");
    std::vector<std::size_t> kept(objects.size());
    std::iota(kept.begin(), kept.end(), std::size_t{0});
    if (options.excess_boxes == ExcessBoxes::KeepLargest) {
        std::stable_sort(kept.begin(), kept.end(),
                         [&](std::size_t a, std::size_t b) { return objects[a].box.area() > objects[b].box.area(); });
    }
    kept.resize(static_cast<std::size_t>(options.max_number_of_boxes));
    std::sort(kept.begin(), kept.end());  // original order
    std::vector<LabeledBox> selected;
    selected.reserve(kept.size());
    for (std::size_t index : kept) selected.push_back(objects[index]);
    return detection::pad_ground_truth(selected, options.max_number_of_boxes);
}

}  // namespace tessera::data
