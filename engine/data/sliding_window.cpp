#include "data/sliding_window.hpp"

#include "data/transforms.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace tessera::data {
namespace {

void check_options(std::size_t spatial_rank, const SlidingWindowOptions& options) {
    TESSERA_CHECK(spatial_rank >= 1 && spatial_rank <= 3,
                  "sliding-window prediction takes 1 to 3 spatial axes, got " << spatial_rank);
    TESSERA_CHECK(options.window.size() == spatial_rank,
                  "the window " << shape_to_string(options.window) << " has " << options.window.size()
                                << " axes but the image has " << spatial_rank << " spatial axes");
    for (std::int64_t extent : options.window) {
        TESSERA_CHECK(extent >= 1, "window extents must be positive, got " << shape_to_string(options.window));
    }
    TESSERA_CHECK(options.overlap >= 0 && options.overlap < 1,
                  "sliding-window overlap must be in [0, 1), got " << options.overlap);
    TESSERA_CHECK(options.window_batch >= 1, "window_batch must be at least 1, got " << options.window_batch);
}

// Per-axis blending weights; the window's weight is their product.
std::vector<float> axis_weights(std::int64_t window, BlendMode blend) {
    std::vector<float> weights(static_cast<std::size_t>(window), 1.0f);
    if (blend == BlendMode::Constant || window == 1) return weights;
    const double sigma = 0.125 * static_cast<double>(window);
    const double centre = 0.5 * static_cast<double>(window - 1);
    for (std::int64_t i = 0; i < window; ++i) {
        const double offset = (static_cast<double>(i) - centre) / sigma;
        weights[static_cast<std::size_t>(i)] = static_cast<float>(std::exp(-0.5 * offset * offset));
    }
    return weights;
}

// Adds one window's K outputs (`predicted`: [K, window...]) times its blending weights into `sums` (K
// grids `class_stride` apart) and the weights into `weight_sum`; the window's first voxel lands at `base`
// of grids whose rows and slices are padded[2] and padded[1] × padded[2] long.
void blend_window(const float* predicted, std::int64_t num_classes, const std::array<std::int64_t, 3>& window,
                  const std::array<std::vector<float>, 3>& weights, const std::array<std::int64_t, 3>& padded, std::int64_t base,
                  std::int64_t class_stride, float* sums, float* weight_sum) {
    const std::int64_t window_voxels = window[0] * window[1] * window[2];
    for (std::int64_t z = 0; z < window[0]; ++z) {
        for (std::int64_t y = 0; y < window[1]; ++y) {
            const float wzy = weights[0][static_cast<std::size_t>(z)] * weights[1][static_cast<std::size_t>(y)];
            const std::int64_t row = base + (z * padded[1] + y) * padded[2];
            for (std::int64_t x = 0; x < window[2]; ++x) {
                const float w = wzy * weights[2][static_cast<std::size_t>(x)];
                weight_sum[row + x] += w;
                const std::int64_t in_window = (z * window[1] + y) * window[2] + x;
                for (std::int64_t k = 0; k < num_classes; ++k) sums[k * class_stride + row + x] += w * predicted[k * window_voxels + in_window];
            }
        }
    }
}

}  // namespace

std::vector<std::int64_t> window_starts(std::int64_t extent, std::int64_t window, double overlap) {
    if (extent <= window) return {0};
    // The epsilon keeps 10 × (1 − 0.7) at 3 rather than 2.9999999 → 2.
    const auto step = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(static_cast<double>(window) * (1.0 - overlap) + 1e-9)));
    const std::int64_t count = (extent - window + step - 1) / step + 1;
    std::vector<std::int64_t> starts;
    for (std::int64_t i = 0; i < count; ++i) starts.push_back(std::min(i * step, extent - window));
    return starts;
}

std::int64_t count_windows(const Shape& spatial, const SlidingWindowOptions& options) {
    check_options(spatial.size(), options);
    std::int64_t count = 1;
    for (std::size_t axis = 0; axis < spatial.size(); ++axis) {
        count *= static_cast<std::int64_t>(window_starts(spatial[axis], options.window[axis], options.overlap).size());
    }
    return count;
}

Tensor sliding_window_predict(const Tensor& image, const SlidingWindowOptions& options,
                              const std::function<Tensor(const Tensor&)>& predict) {
    TESSERA_CHECK(image.is_defined() && image.rank() >= 2 && image.dtype() == DType::F32,
                  "sliding-window prediction needs an f32 image [C, spatial...], got "
                      << (image.is_defined() ? shape_to_string(image.shape()) + " " + std::string(dtype_name(image.dtype()))
                                             : std::string("an empty tensor")));
    const auto spatial_rank = static_cast<std::size_t>(image.rank() - 1);
    check_options(spatial_rank, options);
    const std::int64_t num_channels = image.dim(0);
    const Shape spatial(image.shape().begin() + 1, image.shape().end());

    // Work in [C, D, H, W]: missing leading spatial axes are 1, and so is the window along them.
    const std::size_t lead = 3 - spatial_rank;
    std::array<std::int64_t, 3> extent{1, 1, 1}, window{1, 1, 1}, padded{1, 1, 1}, pad_before{0, 0, 0};
    for (std::size_t axis = 0; axis < spatial_rank; ++axis) {
        extent[lead + axis] = spatial[axis];
        window[lead + axis] = options.window[axis];
    }
    bool needs_padding = false;
    for (std::size_t axis = 0; axis < 3; ++axis) {
        padded[axis] = std::max(extent[axis], window[axis]);
        pad_before[axis] = (padded[axis] - extent[axis]) / 2;
        needs_padding = needs_padding || padded[axis] != extent[axis];
    }
    const Tensor volume = image.contiguous().reshape({num_channels, extent[0], extent[1], extent[2]});
    const Tensor source = needs_padding ? crop_padded(volume, std::array<std::int64_t, 4>{0, -pad_before[0], -pad_before[1], -pad_before[2]},
                                                      std::array<std::int64_t, 4>{num_channels, padded[0], padded[1], padded[2]})
                                        : volume;

    std::array<std::vector<std::int64_t>, 3> starts;
    std::array<std::vector<float>, 3> weights;
    for (std::size_t axis = 0; axis < 3; ++axis) {
        starts[axis] = window_starts(padded[axis], window[axis], options.overlap);
        weights[axis] = axis_weights(window[axis], options.blend);
    }
    std::vector<std::array<std::int64_t, 3>> corners;
    for (std::int64_t z : starts[0]) {
        for (std::int64_t y : starts[1]) {
            for (std::int64_t x : starts[2]) corners.push_back({z, y, x});
        }
    }

    Shape window_shape{0, num_channels};  // [B, C, window...] in the caller's rank
    for (std::size_t axis = 0; axis < spatial_rank; ++axis) window_shape.push_back(options.window[axis]);
    const std::int64_t window_voxels = window[0] * window[1] * window[2];
    const std::int64_t padded_voxels = padded[0] * padded[1] * padded[2];
    std::vector<float> weight_sum(static_cast<std::size_t>(padded_voxels), 0.0f);
    std::vector<float> sums;  // [K, padded...], sized once K is known
    std::int64_t num_classes = 0;

    for (std::size_t first = 0; first < corners.size(); first += static_cast<std::size_t>(options.window_batch)) {
        const std::size_t count = std::min(corners.size() - first, static_cast<std::size_t>(options.window_batch));
        Shape batch_shape = window_shape;
        batch_shape[0] = static_cast<std::int64_t>(count);
        // Gathered as [B·C, D, H, W], which has the same layout as [B, C, window...].
        Tensor gathered = Tensor::empty({static_cast<std::int64_t>(count) * num_channels, window[0], window[1], window[2]}, DType::F32);
        for (std::size_t b = 0; b < count; ++b) {
            const auto& corner = corners[first + b];
            gathered.view_box({static_cast<std::int64_t>(b) * num_channels, 0, 0, 0}, {num_channels, window[0], window[1], window[2]})
                .copy_from(source.view_box({0, corner[0], corner[1], corner[2]}, {num_channels, window[0], window[1], window[2]}));
        }
        const Tensor windows = gathered.reshape(batch_shape);
        const Tensor output = predict(windows);
        TESSERA_CHECK(output.is_defined() && output.dtype() == DType::F32 && output.rank() == static_cast<int>(window_shape.size()) &&
                          output.dim(0) == static_cast<std::int64_t>(count),
                      "the predictor returned " << (output.is_defined() ? shape_to_string(output.shape()) : std::string("nothing"))
                                                << " for windows " << shape_to_string(batch_shape)
                                                << "; expected f32 [B, K, window...]");
        if (num_classes == 0) {
            num_classes = output.dim(1);
            TESSERA_CHECK(num_classes >= 1, "the predictor returned no channels: " << shape_to_string(output.shape()));
            sums.assign(static_cast<std::size_t>(num_classes * padded_voxels), 0.0f);
        }
        Shape expected = batch_shape;
        expected[1] = num_classes;
        TESSERA_CHECK(output.shape() == expected, "the predictor returned " << shape_to_string(output.shape())
                                                                            << " for windows " << shape_to_string(batch_shape)
                                                                            << "; expected " << shape_to_string(expected));
        const Tensor dense = output.contiguous();
        const float* predicted = dense.data<float>();
        for (std::size_t b = 0; b < count; ++b) {
            const auto& corner = corners[first + b];
            blend_window(predicted + static_cast<std::int64_t>(b) * num_classes * window_voxels, num_classes, window, weights, padded,
                         (corner[0] * padded[1] + corner[1]) * padded[2] + corner[2], padded_voxels, sums.data(), weight_sum.data());
        }
    }

    // Divide and crop the padding away.
    Shape result_shape{num_classes};
    result_shape.insert(result_shape.end(), spatial.begin(), spatial.end());
    Tensor result = Tensor::empty(result_shape, DType::F32);
    float* out = result.data<float>();
    std::int64_t index = 0;
    for (std::int64_t k = 0; k < num_classes; ++k) {
        for (std::int64_t z = 0; z < extent[0]; ++z) {
            for (std::int64_t y = 0; y < extent[1]; ++y) {
                const std::int64_t row = ((z + pad_before[0]) * padded[1] + y + pad_before[1]) * padded[2] + pad_before[2];
                for (std::int64_t x = 0; x < extent[2]; ++x) {
                    out[index++] = sums[static_cast<std::size_t>(k * padded_voxels + row + x)] /
                                   weight_sum[static_cast<std::size_t>(row + x)];
                }
            }
        }
    }
    return result;
}

void sliding_window_predict_streamed(const Shape& spatial, std::int64_t num_channels, const SlidingWindowOptions& options,
                                     const std::function<void(std::int64_t, std::int64_t, float*)>& read,
                                     const std::function<Tensor(const Tensor&)>& predict,
                                     const std::function<void(std::int64_t, const Tensor&)>& write) {
    TESSERA_CHECK(spatial.size() == 3, "streamed sliding-window prediction runs along D of a volume [D, H, W], got "
                                           << shape_to_string(spatial));
    check_options(3, options);
    TESSERA_CHECK(num_channels >= 1, "an image needs at least one channel, got " << num_channels);
    std::array<std::int64_t, 3> extent{}, window{}, padded{}, pad_before{};
    for (std::size_t axis = 0; axis < 3; ++axis) {
        extent[axis] = spatial[axis];
        window[axis] = options.window[axis];
        padded[axis] = std::max(extent[axis], window[axis]);
        pad_before[axis] = (padded[axis] - extent[axis]) / 2;
    }
    std::array<std::vector<std::int64_t>, 3> starts;
    std::array<std::vector<float>, 3> weights;
    for (std::size_t axis = 0; axis < 3; ++axis) {
        starts[axis] = window_starts(padded[axis], window[axis], options.overlap);
        weights[axis] = axis_weights(window[axis], options.blend);
    }
    const std::int64_t plane = padded[1] * padded[2];           // padded voxels of one slice
    const std::int64_t window_voxels = window[0] * window[1] * window[2];
    // The slab of windows that start at slice `base` (padded D): its image, its sums, its weights.
    std::vector<float> slab(static_cast<std::size_t>(num_channels * window[0] * plane));
    std::vector<float> weight_sum(static_cast<std::size_t>(window[0] * plane), 0.0f);
    std::vector<float> sums;  // [K, window D, padded H, padded W], sized once K is known
    std::int64_t num_classes = 0;
    std::int64_t written = 0;  // image slices handed to write()

    // Slices [base, base + count) of the padded volume are final: argmax, crop the padding, write.
    const auto finish = [&](std::int64_t base, std::int64_t count) {
        const std::int64_t first = std::max(base, pad_before[0]);
        const std::int64_t last = std::min(base + count, pad_before[0] + extent[0]);
        if (last <= first) return;
        Tensor labels = Tensor::empty({last - first, extent[1], extent[2]}, DType::I32);
        std::int32_t* out = labels.data<std::int32_t>();
        for (std::int64_t z = first; z < last; ++z) {
            for (std::int64_t y = 0; y < extent[1]; ++y) {
                const std::int64_t row = (z - base) * plane + (y + pad_before[1]) * padded[2] + pad_before[2];
                for (std::int64_t x = 0; x < extent[2]; ++x) {
                    // The blended mean's argmax; dividing by the weight first keeps ties as sliding_window_predict's.
                    const float weight = weight_sum[static_cast<std::size_t>(row + x)];
                    std::int32_t best = 0;
                    float best_value = sums[static_cast<std::size_t>(row + x)] / weight;
                    for (std::int64_t k = 1; k < num_classes; ++k) {
                        const float value = sums[static_cast<std::size_t>(k * window[0] * plane + row + x)] / weight;
                        if (value > best_value) {
                            best_value = value;
                            best = static_cast<std::int32_t>(k);
                        }
                    }
                    *out++ = best;
                }
            }
        }
        TESSERA_ASSERT(first - pad_before[0] == written, "slices finished out of order");
        write(written, labels);
        written += last - first;
    };
    // Drops the first `count` slices of the slab's sums and weights (finished), zeroing the tail.
    const auto advance = [&](std::int64_t count) {
        const auto keep = static_cast<std::size_t>((window[0] - count) * plane);
        const auto drop = static_cast<std::size_t>(count * plane);
        std::copy(weight_sum.begin() + static_cast<std::ptrdiff_t>(drop), weight_sum.end(), weight_sum.begin());
        std::fill(weight_sum.begin() + static_cast<std::ptrdiff_t>(keep), weight_sum.end(), 0.0f);
        for (std::int64_t k = 0; k < num_classes; ++k) {
            auto begin = sums.begin() + static_cast<std::ptrdiff_t>(k * window[0] * plane);
            std::copy(begin + static_cast<std::ptrdiff_t>(drop), begin + static_cast<std::ptrdiff_t>(window[0] * plane), begin);
            std::fill(begin + static_cast<std::ptrdiff_t>(keep), begin + static_cast<std::ptrdiff_t>(window[0] * plane), 0.0f);
        }
    };

    Shape batch_shape{0, num_channels, window[0], window[1], window[2]};
    for (std::size_t z_index = 0; z_index < starts[0].size(); ++z_index) {
        const std::int64_t base = starts[0][z_index];
        // The slab's image: slices [base, base + window D) of the padded volume, zeros in the padding.
        std::fill(slab.begin(), slab.end(), 0.0f);
        const std::int64_t first = std::max(base, pad_before[0]);
        const std::int64_t last = std::min(base + window[0], pad_before[0] + extent[0]);
        if (last > first && num_channels == 1 && padded[1] == extent[1] && padded[2] == extent[2]) {
            // Rows need no padding: the slices go straight into their place in the slab.
            read(first - pad_before[0], last - first, slab.data() + (first - base) * plane);
        } else if (last > first) {
            std::vector<float> part(static_cast<std::size_t>(num_channels * (last - first) * extent[1] * extent[2]));
            read(first - pad_before[0], last - first, part.data());
            for (std::int64_t c = 0; c < num_channels; ++c) {
                for (std::int64_t z = first; z < last; ++z) {
                    for (std::int64_t y = 0; y < extent[1]; ++y) {
                        const float* from = part.data() + ((c * (last - first) + z - first) * extent[1] + y) * extent[2];
                        float* to = slab.data() + ((c * window[0] + z - base) * padded[1] + y + pad_before[1]) * padded[2] + pad_before[2];
                        std::copy(from, from + extent[2], to);
                    }
                }
            }
        }
        std::vector<std::array<std::int64_t, 2>> corners;  // (y, x) of this slab's windows, in sliding_window_predict's order
        for (std::int64_t y : starts[1]) {
            for (std::int64_t x : starts[2]) corners.push_back({y, x});
        }
        for (std::size_t begin = 0; begin < corners.size(); begin += static_cast<std::size_t>(options.window_batch)) {
            const std::size_t count = std::min(corners.size() - begin, static_cast<std::size_t>(options.window_batch));
            batch_shape[0] = static_cast<std::int64_t>(count);
            Tensor windows = Tensor::empty(batch_shape, DType::F32);
            float* gathered = windows.data<float>();
            for (std::size_t b = 0; b < count; ++b) {
                const auto& corner = corners[begin + b];
                for (std::int64_t c = 0; c < num_channels; ++c) {
                    for (std::int64_t z = 0; z < window[0]; ++z) {
                        for (std::int64_t y = 0; y < window[1]; ++y) {
                            const float* from = slab.data() + ((c * window[0] + z) * padded[1] + corner[0] + y) * padded[2] + corner[1];
                            std::copy(from, from + window[2], gathered + (((static_cast<std::int64_t>(b) * num_channels + c) * window[0] + z) * window[1] + y) * window[2]);
                        }
                    }
                }
            }
            const Tensor output = predict(windows);
            TESSERA_CHECK(output.is_defined() && output.dtype() == DType::F32 && output.rank() == 5 &&
                              output.dim(0) == static_cast<std::int64_t>(count) && output.dim(2) == window[0] &&
                              output.dim(3) == window[1] && output.dim(4) == window[2] && output.dim(1) >= 1 &&
                              (num_classes == 0 || output.dim(1) == num_classes),
                          "the predictor returned " << (output.is_defined() ? shape_to_string(output.shape()) : std::string("nothing"))
                                                    << " for windows " << shape_to_string(batch_shape) << "; expected f32 [B, K, window...]");
            if (num_classes == 0) {
                num_classes = output.dim(1);
                sums.assign(static_cast<std::size_t>(num_classes * window[0] * plane), 0.0f);
            }
            const Tensor dense = output.contiguous();
            const float* predicted = dense.data<float>();
            for (std::size_t b = 0; b < count; ++b) {
                const auto& corner = corners[begin + b];
                blend_window(predicted + static_cast<std::int64_t>(b) * num_classes * window_voxels, num_classes, window, weights, padded,
                             corner[0] * padded[2] + corner[1], window[0] * plane, sums.data(), weight_sum.data());
            }
        }
        // Slices before the next window's start get no more windows.
        const std::int64_t next = z_index + 1 < starts[0].size() ? starts[0][z_index + 1] : base + window[0];
        finish(base, next - base);
        if (z_index + 1 < starts[0].size()) advance(next - base);
    }
    TESSERA_ASSERT(written == extent[0], "wrote " << written << " of " << extent[0] << " slices");
}

}  // namespace tessera::data
