#include "data/transforms.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

namespace tessera::data {

void normalize(Tensor& image, Normalization normalization, double window_low, double window_high) {
    if (normalization == Normalization::None || image.num_elements() == 0) return;
    TESSERA_ASSERT(image.is_contiguous() && image.dtype() == DType::F32 && image.rank() >= 1,
                   "normalize expects a contiguous f32 [C, ...] tensor, got " << shape_to_string(image.shape()));
    const std::int64_t num_channels = image.dim(0);
    const std::int64_t per_channel = image.num_elements() / num_channels;
    float* values = image.data<float>();
    for (std::int64_t c = 0; c < num_channels; ++c) {
        float* channel = values + c * per_channel;
        if (normalization == Normalization::Window) {
            const double width = window_high - window_low;
            for (std::int64_t v = 0; v < per_channel; ++v) {
                channel[v] = static_cast<float>(std::clamp((channel[v] - window_low) / width, 0.0, 1.0));
            }
            continue;
        }
        // Two passes (mean, then spread about it): one pass loses digits on CT's large offsets.
        double sum = 0;
        for (std::int64_t v = 0; v < per_channel; ++v) sum += channel[v];
        const double mean = sum / static_cast<double>(per_channel);
        double sum_squares = 0;
        for (std::int64_t v = 0; v < per_channel; ++v) sum_squares += (channel[v] - mean) * (channel[v] - mean);
        const double sigma = std::sqrt(sum_squares / static_cast<double>(per_channel));
        const double scale = sigma > 1e-12 ? 1.0 / sigma : 0.0;  // a constant channel becomes 0
        for (std::int64_t v = 0; v < per_channel; ++v) channel[v] = static_cast<float>((channel[v] - mean) * scale);
    }
}

void RunningMoments::add_block(const float* values, std::int64_t count) {
    if (count <= 0) return;
    double sum = 0;
    for (std::int64_t v = 0; v < count; ++v) sum += values[v];
    const double block_mean = sum / static_cast<double>(count);
    double block_m2 = 0;
    for (std::int64_t v = 0; v < count; ++v) block_m2 += (values[v] - block_mean) * (values[v] - block_mean);
    const double block_count = static_cast<double>(count);
    const double total = m_count + block_count;
    const double delta = block_mean - m_mean;
    m_mean += delta * block_count / total;
    m_m2 += block_m2 + delta * delta * m_count * block_count / total;
    m_count = total;
}

double RunningMoments::scale() const {
    const double sigma = m_count > 0 ? std::sqrt(m_m2 / m_count) : 0.0;
    return sigma > 1e-12 ? 1.0 / sigma : 0.0;
}

void augment_intensity(Tensor& image, const AugmentConfig& augment, SeededRandom& random) {
    if (augment.intensity_scale <= 0 && augment.intensity_shift <= 0) return;
    TESSERA_ASSERT(image.is_contiguous() && image.dtype() == DType::F32,
                   "intensity augmentation needs a dense f32 image");
    const auto scale = static_cast<float>(1.0 + augment.intensity_scale * random.symmetric());
    const auto shift = static_cast<float>(augment.intensity_shift * random.symmetric());
    float* values = image.data<float>();
    for (std::int64_t v = 0; v < image.num_elements(); ++v) values[v] = values[v] * scale + shift;
}

Tensor crop_padded(const Tensor& source, std::span<const std::int64_t> begin, std::span<const std::int64_t> extent) {
    const auto rank = static_cast<std::size_t>(source.rank());
    TESSERA_ASSERT(begin.size() == rank && extent.size() == rank,
                   "crop box of rank " << begin.size() << " for a tensor of shape " << shape_to_string(source.shape()));
    Tensor result = Tensor::zeros(Shape(extent.begin(), extent.end()), source.dtype());
    Shape source_begin(rank), result_begin(rank), overlap(rank);
    for (std::size_t axis = 0; axis < rank; ++axis) {
        const std::int64_t low = std::max<std::int64_t>(begin[axis], 0);
        const std::int64_t high = std::min(begin[axis] + extent[axis], source.shape()[axis]);
        if (high <= low) return result;  // the box misses the source: all padding
        source_begin[axis] = low;
        result_begin[axis] = low - begin[axis];
        overlap[axis] = high - low;
    }
    result.view_box(result_begin, overlap).copy_from(source.view_box(source_begin, overlap));
    return result;
}

void flip(Tensor& tensor, int axis) {
    TESSERA_ASSERT(axis >= 0 && axis < tensor.rank() && tensor.is_contiguous(),
                   "flip axis " << axis << " of a tensor of shape " << shape_to_string(tensor.shape()));
    const std::int64_t extent = tensor.dim(axis);
    std::int64_t outer = 1;
    for (int a = 0; a < axis; ++a) outer *= tensor.dim(a);
    const std::size_t inner_bytes =
        static_cast<std::size_t>(tensor.num_elements() / std::max<std::int64_t>(outer * extent, 1)) *
        dtype_size(tensor.dtype());
    if (tensor.num_elements() == 0) return;
    auto* bytes = static_cast<std::byte*>(tensor.raw_data());
    std::vector<std::byte> scratch(inner_bytes);
    for (std::int64_t o = 0; o < outer; ++o) {
        std::byte* block = bytes + static_cast<std::size_t>(o * extent) * inner_bytes;
        for (std::int64_t i = 0, j = extent - 1; i < j; ++i, --j) {
            std::byte* a = block + static_cast<std::size_t>(i) * inner_bytes;
            std::byte* b = block + static_cast<std::size_t>(j) * inner_bytes;
            std::memcpy(scratch.data(), a, inner_bytes);
            std::memcpy(a, b, inner_bytes);
            std::memcpy(b, scratch.data(), inner_bytes);
        }
    }
}

Tensor rotate90(const Tensor& tensor, int turns) {
    TESSERA_ASSERT(tensor.rank() >= 2, "rotate90 needs two axes, got shape " << shape_to_string(tensor.shape()));
    turns = ((turns % 4) + 4) % 4;
    const Tensor source = tensor.contiguous();
    if (turns == 0) return source.clone();
    const std::int64_t rows = tensor.dim(-2);
    const std::int64_t cols = tensor.dim(-1);
    Shape shape = tensor.shape();
    if (turns % 2 == 1) std::swap(shape[shape.size() - 2], shape[shape.size() - 1]);
    Tensor result = Tensor::empty(shape, tensor.dtype());
    const std::size_t element = dtype_size(tensor.dtype());
    const std::int64_t plane = rows * cols;
    const std::int64_t num_planes = plane == 0 ? 0 : tensor.num_elements() / plane;
    const auto* in = static_cast<const std::byte*>(source.raw_data());
    auto* out = static_cast<std::byte*>(result.raw_data());
    const std::int64_t out_cols = shape.back();
    for (std::int64_t p = 0; p < num_planes; ++p) {
        const std::byte* in_plane = in + static_cast<std::size_t>(p * plane) * element;
        std::byte* out_plane = out + static_cast<std::size_t>(p * plane) * element;
        for (std::int64_t r = 0; r < rows; ++r) {
            for (std::int64_t c = 0; c < cols; ++c) {
                // Where input (r, c) lands; numpy.rot90 turns +x towards -y (counter-clockwise as displayed).
                std::int64_t out_r = 0, out_c = 0;
                switch (turns) {
                    case 1: out_r = cols - 1 - c; out_c = r; break;
                    case 2: out_r = rows - 1 - r; out_c = cols - 1 - c; break;
                    default: out_r = c; out_c = rows - 1 - r; break;
                }
                std::memcpy(out_plane + static_cast<std::size_t>(out_r * out_cols + out_c) * element,
                            in_plane + static_cast<std::size_t>(r * cols + c) * element, element);
            }
        }
    }
    return result;
}

namespace {

// Per output voxel of one axis: the two source voxels and the weight of the second.
struct AxisTaps {
    std::vector<std::int64_t> low, high;
    std::vector<float> weight;
};

AxisTaps axis_taps(std::int64_t in, std::int64_t content, Interpolation interpolation) {
    AxisTaps taps;
    const double scale = static_cast<double>(in) / static_cast<double>(content);
    for (std::int64_t o = 0; o < content; ++o) {
        if (interpolation == Interpolation::Nearest) {
            const auto index = std::min(static_cast<std::int64_t>(std::floor((static_cast<double>(o) + 0.5) * scale)), in - 1);
            taps.low.push_back(index);
            taps.high.push_back(index);
            taps.weight.push_back(0.0f);
            continue;
        }
        const double position = std::clamp((static_cast<double>(o) + 0.5) * scale - 0.5, 0.0, static_cast<double>(in - 1));
        const auto low = static_cast<std::int64_t>(std::floor(position));
        taps.low.push_back(low);
        taps.high.push_back(std::min(low + 1, in - 1));
        taps.weight.push_back(static_cast<float>(position - static_cast<double>(low)));
    }
    return taps;
}

template <class T>
void resample_into(const Tensor& source, Tensor& result, const std::array<AxisTaps, 3>& taps) {
    const std::int64_t num_channels = source.dim(0);
    const Shape& in_strides = source.strides();
    const Shape& out_shape = result.shape();
    const T* in = source.data<T>();
    T* out = result.data<T>();
    const std::int64_t depth = static_cast<std::int64_t>(taps[0].low.size());
    const std::int64_t height = static_cast<std::int64_t>(taps[1].low.size());
    const std::int64_t width = static_cast<std::int64_t>(taps[2].low.size());
    for (std::int64_t c = 0; c < num_channels; ++c) {
        for (std::int64_t z = 0; z < depth; ++z) {
            for (std::int64_t y = 0; y < height; ++y) {
                T* row = out + ((c * out_shape[1] + z) * out_shape[2] + y) * out_shape[3];
                const std::int64_t z0 = taps[0].low[z] * in_strides[1], z1 = taps[0].high[z] * in_strides[1];
                const std::int64_t y0 = taps[1].low[y] * in_strides[2], y1 = taps[1].high[y] * in_strides[2];
                const float wz = taps[0].weight[z], wy = taps[1].weight[y];
                const T* channel = in + c * in_strides[0];
                for (std::int64_t x = 0; x < width; ++x) {
                    const std::int64_t x0 = taps[2].low[x] * in_strides[3], x1 = taps[2].high[x] * in_strides[3];
                    if constexpr (std::is_same_v<T, std::int32_t>) {
                        row[x] = channel[z0 + y0 + x0];  // nearest: low == high
                    } else {
                        const float wx = taps[2].weight[x];
                        const auto along_x = [&](std::int64_t zy) {
                            return channel[zy + x0] * (1.0f - wx) + channel[zy + x1] * wx;
                        };
                        const float near_z = along_x(z0 + y0) * (1.0f - wy) + along_x(z0 + y1) * wy;
                        const float far_z = along_x(z1 + y0) * (1.0f - wy) + along_x(z1 + y1) * wy;
                        row[x] = near_z * (1.0f - wz) + far_z * wz;
                    }
                }
            }
        }
    }
}

}  // namespace

Tensor resample(const Tensor& source, const std::array<std::int64_t, 3>& extent,
                const std::array<std::int64_t, 3>& content, Interpolation interpolation) {
    TESSERA_ASSERT(source.rank() == 4, "resample expects [C, D, H, W], got " << shape_to_string(source.shape()));
    TESSERA_ASSERT(interpolation == Interpolation::Nearest || source.dtype() == DType::F32,
                   "linear resampling of " << dtype_name(source.dtype()));
    std::array<AxisTaps, 3> taps;
    for (std::size_t axis = 0; axis < 3; ++axis) {
        TESSERA_ASSERT(content[axis] >= 1 && content[axis] <= extent[axis] && source.dim(static_cast<int>(axis) + 1) >= 1,
                       "resample content " << content[axis] << " of extent " << extent[axis]);
        taps[axis] = axis_taps(source.dim(static_cast<int>(axis) + 1), content[axis], interpolation);
    }
    Tensor result = Tensor::zeros({source.dim(0), extent[0], extent[1], extent[2]}, source.dtype());
    if (source.dtype() == DType::I32) {
        resample_into<std::int32_t>(source, result, taps);
    } else {
        resample_into<float>(source, result, taps);
    }
    return result;
}

ImageGeometry resampled_geometry(const ImageGeometry& geometry, const std::array<std::int64_t, 3>& source_extent,
                                 const std::array<std::int64_t, 3>& extent,
                                 const std::array<std::int64_t, 3>& content) {
    // Tensor axes [D, H, W] are geometry axes k, j, i.
    ImageGeometry result = geometry;
    std::array<double, 3> first_centre{};  // continuous source index (i, j, k) of output voxel 0
    for (std::size_t axis = 0; axis < 3; ++axis) {
        const std::size_t g = 2 - axis;
        const double scale = static_cast<double>(source_extent[axis]) / static_cast<double>(content[axis]);
        result.size[g] = extent[axis];
        result.spacing[g] = geometry.spacing[g] * scale;
        first_centre[g] = 0.5 * scale - 0.5;
    }
    result.origin = geometry.world_of(first_centre[0], first_centre[1], first_centre[2]);
    return result;
}

DetectionSample whole_image_to_input(const DetectionSample& sample, StaticShape static_shape, std::array<std::int64_t, 2> size) {
    TESSERA_CHECK(static_shape != StaticShape::Crop, "whole_image_to_input brings a whole image to the input: Resize or PadToMax, not Crop");
    const auto [height, width] = size;
    if (static_shape == StaticShape::Resize) return resize_fixed_shape(sample, size);
    if (height == width) {
        return resize_keep_aspect_ratio(sample, {.min_dimension = height, .max_dimension = height, .pad_to_max_dimension = true});
    }
    return scale_and_crop(sample, size, 1.0, {0, 0}, 0.0);
}

Tensor mean_of_rgb(const Tensor& rgb) {
    TESSERA_CHECK(rgb.rank() == 3 && rgb.dim(0) == 3 && rgb.dtype() == DType::F32,
                  "mean_of_rgb takes an f32 [3, H, W] image, got " << dtype_name(rgb.dtype()) << " " << shape_to_string(rgb.shape()));
    const Tensor dense = rgb.contiguous();
    const std::int64_t pixels = dense.dim(1) * dense.dim(2);
    Tensor grey = Tensor::empty({1, dense.dim(1), dense.dim(2)}, DType::F32);
    const float* in = dense.data<float>();
    float* out = grey.data<float>();
    for (std::int64_t p = 0; p < pixels; ++p) out[p] = (in[p] + in[pixels + p] + in[2 * pixels + p]) / 3.0f;
    return grey;
}

}  // namespace tessera::data
