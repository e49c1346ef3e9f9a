#include "reference/reference_ops.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <span>

namespace tessera::reference {

namespace {

using ops::Extents;

// f32 and dense, or a clear error naming the argument.
Tensor dense_f32(const Tensor& tensor, const char* what) {
    TESSERA_CHECK(tensor.is_defined(), "reference op: " << what << " is an empty tensor");
    TESSERA_CHECK(tensor.dtype() == DType::F32,
                  "reference op: " << what << " must be f32, got " << dtype_name(tensor.dtype()));
    return tensor.contiguous();
}

void check_shape(const Tensor& tensor, const Shape& expected, const char* what) {
    TESSERA_CHECK(tensor.shape() == expected, "reference op: expected " << what << " of shape "
                                                                       << shape_to_string(expected) << ", got "
                                                                       << shape_to_string(tensor.shape()));
}

void check_same_shape(const Shape& actual, const Shape& expected, const char* what) {
    TESSERA_CHECK(actual == expected, "reference op: expected " << what << " of shape " << shape_to_string(expected)
                                                                << ", got " << shape_to_string(actual));
}

Tensor tensor_from(const std::vector<double>& values, const Shape& shape) {
    Tensor result = Tensor::empty(shape, DType::F32);
    TESSERA_ASSERT(static_cast<std::int64_t>(values.size()) == result.num_elements(), "size mismatch");
    float* out = result.data<float>();
    for (std::size_t i = 0; i < values.size(); ++i) out[i] = static_cast<float>(values[i]);
    return result;
}

std::vector<double> zeros(std::int64_t count) { return std::vector<double>(static_cast<std::size_t>(count), 0.0); }

// An activation shape [N, C, H, W] or [N, C, D, H, W] seen as [N, C, D, H, W] (D = 1 for 2D).
struct Volume {
    std::int64_t batch = 1;
    std::int64_t channels = 1;
    std::array<std::int64_t, 3> extent{1, 1, 1};  // D, H, W

    std::int64_t spatial() const { return extent[0] * extent[1] * extent[2]; }
    // Element offset of (n, c, flat spatial position) in a dense tensor.
    std::int64_t at(std::int64_t n, std::int64_t c, std::int64_t position) const {
        return (n * channels + c) * spatial() + position;
    }
    std::int64_t num_elements() const { return batch * channels * spatial(); }
};

Volume volume_of(const Shape& shape, const char* what) {
    TESSERA_CHECK(shape.size() == 4 || shape.size() == 5,
                  "reference op: " << what << " must be [N, C, H, W] or [N, C, D, H, W], got " << shape_to_string(shape));
    Volume volume;
    volume.batch = shape[0];
    volume.channels = shape[1];
    if (shape.size() == 5) {
        volume.extent = {shape[2], shape[3], shape[4]};
    } else {
        volume.extent = {1, shape[2], shape[3]};
    }
    return volume;
}

// A sliding window along D, H, W; the D entries are trivial (1, 1, 1, 0) for 2D.
struct Window {
    std::array<std::int64_t, 3> kernel{1, 1, 1};
    std::array<std::int64_t, 3> stride{1, 1, 1};
    std::array<std::int64_t, 3> dilation{1, 1, 1};
    std::array<std::int64_t, 3> pad_begin{0, 0, 0};

    std::int64_t taps() const { return kernel[0] * kernel[1] * kernel[2]; }
};

Window window_of(const Extents& kernel, const Extents& stride, const Extents* dilation, const Extents* pad_begin) {
    Window window;
    const std::size_t rank = kernel.size();
    TESSERA_CHECK(rank == 2 || rank == 3, "reference op: expected 2 or 3 spatial axes, got " << rank);
    const std::size_t offset = 3 - rank;
    for (std::size_t a = 0; a < rank; ++a) {
        window.kernel[a + offset] = kernel[a];
        window.stride[a + offset] = stride[a];
        if (dilation) window.dilation[a + offset] = (*dilation)[a];
        if (pad_begin) window.pad_begin[a + offset] = (*pad_begin)[a];
    }
    return window;
}

// Calls visit(out_position, in_position, tap) for every output position of `out` and every kernel tap
// that lands inside `in` (taps in padding are skipped), where
//   in_coordinate = out_coordinate * stride - pad_begin + tap_coordinate * dilation   (per axis).
// Positions are flat spatial offsets (D, H, W row-major); taps are flat offsets into the kernel.
// For one output position the taps come in window scan order (kD, then kH, then kW).
template <class Visit>
void for_each_tap(const Volume& in, const Volume& out, const Window& window, Visit&& visit) {
    const auto& k = window.kernel;
    for (std::int64_t oz = 0; oz < out.extent[0]; ++oz) {
        for (std::int64_t oy = 0; oy < out.extent[1]; ++oy) {
            for (std::int64_t ox = 0; ox < out.extent[2]; ++ox) {
                const std::int64_t out_position = (oz * out.extent[1] + oy) * out.extent[2] + ox;
                for (std::int64_t kz = 0; kz < k[0]; ++kz) {
                    const std::int64_t iz = oz * window.stride[0] - window.pad_begin[0] + kz * window.dilation[0];
                    if (iz < 0 || iz >= in.extent[0]) continue;
                    for (std::int64_t ky = 0; ky < k[1]; ++ky) {
                        const std::int64_t iy = oy * window.stride[1] - window.pad_begin[1] + ky * window.dilation[1];
                        if (iy < 0 || iy >= in.extent[1]) continue;
                        for (std::int64_t kx = 0; kx < k[2]; ++kx) {
                            const std::int64_t ix =
                                ox * window.stride[2] - window.pad_begin[2] + kx * window.dilation[2];
                            if (ix < 0 || ix >= in.extent[2]) continue;
                            const std::int64_t in_position = (iz * in.extent[1] + iy) * in.extent[2] + ix;
                            const std::int64_t tap = (kz * k[1] + ky) * k[2] + kx;
                            visit(out_position, in_position, tap);
                        }
                    }
                }
            }
        }
    }
}

// Which input channels an output channel of a grouped convolution reads, and the row of its weights
// [C_out, C_in/groups, k...] that pairs them.
struct GroupInputs {
    GroupInputs(std::int64_t in_channels, std::int64_t out_channels, std::int64_t groups)
        : per_group_in(in_channels / groups), per_group_out(out_channels / groups) {}
    std::int64_t first(std::int64_t co) const { return co / per_group_out * per_group_in; }
    std::int64_t end(std::int64_t co) const { return first(co) + per_group_in; }
    std::int64_t weight_row(std::int64_t co, std::int64_t ci) const { return co * per_group_in + (ci - first(co)); }
    std::int64_t per_group_in, per_group_out;
};

Window conv_window(const ops::ConvAttributes& attributes) {
    return window_of(attributes.kernel, attributes.stride, &attributes.dilation, &attributes.pad_begin);
}

// A transposed convolution is a convolution run backwards: its (small) input plays the convolution's
// output, its (large) output the convolution's input, with no padding and no dilation.
Window conv_transpose_window(const ops::ConvTransposeAttributes& attributes) {
    return window_of(attributes.kernel, attributes.stride, nullptr, nullptr);
}

Window pool_window(const ops::PoolAttributes& attributes) {
    return window_of(attributes.kernel, attributes.stride, nullptr, &attributes.pad_begin);
}

void check_bias(const Tensor* bias, std::int64_t channels) {
    if (bias) check_shape(*bias, Shape{channels}, "bias");
}

void check_channel_vector(const Tensor& tensor, std::int64_t channels, const char* what) {
    TESSERA_CHECK(tensor.is_defined(), "reference op: " << what << " is an empty tensor");
    check_shape(tensor, Shape{channels}, what);
}

}  // namespace

// ---- convolution -------------------------------------------------------------------------------

Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor* bias, const ops::ConvAttributes& attributes) {
    const Tensor xd = dense_f32(x, "conv input");
    const Tensor wd = dense_f32(w, "conv weights");
    TESSERA_CHECK(wd.rank() == xd.rank(), "reference conv: weights " << shape_to_string(wd.shape())
                                                                    << " must have the rank of the input "
                                                                    << shape_to_string(xd.shape()));
    const std::int64_t out_channels = wd.dim(0);
    const Shape y_shape = ops::conv_output_shape(xd.shape(), out_channels, attributes);
    check_shape(wd, ops::conv_weight_shape(xd.dim(1), out_channels, attributes), "conv weights");
    check_bias(bias, out_channels);

    const Volume in = volume_of(xd.shape(), "conv input");
    const Volume out = volume_of(y_shape, "conv output");
    const Window window = conv_window(attributes);
    const GroupInputs group_inputs(in.channels, out.channels, attributes.groups);
    const float* xp = xd.data<float>();
    const float* wp = wd.data<float>();
    const Tensor bd = bias ? dense_f32(*bias, "conv bias") : Tensor();
    std::vector<double> y = zeros(out.num_elements());
    for (std::int64_t n = 0; n < out.batch; ++n) {
        for (std::int64_t co = 0; co < out.channels; ++co) {
            for (std::int64_t ci = group_inputs.first(co); ci < group_inputs.end(co); ++ci) {
                const float* wk = wp + group_inputs.weight_row(co, ci) * window.taps();
                for_each_tap(in, out, window, [&](std::int64_t o, std::int64_t i, std::int64_t k) {
                    y[static_cast<std::size_t>(out.at(n, co, o))] +=
                        static_cast<double>(xp[in.at(n, ci, i)]) * static_cast<double>(wk[k]);
                });
            }
            if (bias) {
                const double b = static_cast<double>(bd.data<float>()[co]);
                for (std::int64_t o = 0; o < out.spatial(); ++o) y[static_cast<std::size_t>(out.at(n, co, o))] += b;
            }
        }
    }
    return tensor_from(y, y_shape);
}

Tensor conv_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                          const ops::ConvAttributes& attributes) {
    const Tensor dyd = dense_f32(dy, "conv output gradient");
    const Tensor wd = dense_f32(w, "conv weights");
    TESSERA_CHECK(x_shape.size() >= 2, "reference conv: bad input shape " << shape_to_string(x_shape));
    const std::int64_t out_channels = wd.dim(0);
    check_shape(dyd, ops::conv_output_shape(x_shape, out_channels, attributes), "conv output gradient");
    check_shape(wd, ops::conv_weight_shape(x_shape[1], out_channels, attributes), "conv weights");

    const Volume in = volume_of(x_shape, "conv input");
    const Volume out = volume_of(dyd.shape(), "conv output gradient");
    const Window window = conv_window(attributes);
    const GroupInputs group_inputs(in.channels, out.channels, attributes.groups);
    const float* dyp = dyd.data<float>();
    const float* wp = wd.data<float>();
    std::vector<double> dx = zeros(in.num_elements());
    for (std::int64_t n = 0; n < out.batch; ++n) {
        for (std::int64_t co = 0; co < out.channels; ++co) {
            for (std::int64_t ci = group_inputs.first(co); ci < group_inputs.end(co); ++ci) {
                const float* wk = wp + group_inputs.weight_row(co, ci) * window.taps();
                for_each_tap(in, out, window, [&](std::int64_t o, std::int64_t i, std::int64_t k) {
                    dx[static_cast<std::size_t>(in.at(n, ci, i))] +=
                        static_cast<double>(dyp[out.at(n, co, o)]) * static_cast<double>(wk[k]);
                });
            }
        }
    }
    return tensor_from(dx, x_shape);
}

ConvWeightGradients conv_backward_weights(const Tensor& x, const Tensor& dy, const ops::ConvAttributes& attributes,
                                          const Shape& w_shape) {
    const Tensor xd = dense_f32(x, "conv input");
    const Tensor dyd = dense_f32(dy, "conv output gradient");
    const std::int64_t out_channels = dyd.rank() >= 2 ? dyd.dim(1) : 0;
    check_shape(dyd, ops::conv_output_shape(xd.shape(), out_channels, attributes), "conv output gradient");
    check_same_shape(w_shape, ops::conv_weight_shape(xd.dim(1), out_channels, attributes), "conv weights");

    const Volume in = volume_of(xd.shape(), "conv input");
    const Volume out = volume_of(dyd.shape(), "conv output gradient");
    const Window window = conv_window(attributes);
    const GroupInputs group_inputs(in.channels, out.channels, attributes.groups);
    const float* xp = xd.data<float>();
    const float* dyp = dyd.data<float>();
    std::vector<double> dw = zeros(num_elements_of(w_shape));
    std::vector<double> db = zeros(out_channels);
    for (std::int64_t n = 0; n < out.batch; ++n) {
        for (std::int64_t co = 0; co < out.channels; ++co) {
            for (std::int64_t ci = group_inputs.first(co); ci < group_inputs.end(co); ++ci) {
                double* dwk = dw.data() + group_inputs.weight_row(co, ci) * window.taps();
                for_each_tap(in, out, window, [&](std::int64_t o, std::int64_t i, std::int64_t k) {
                    dwk[k] += static_cast<double>(xp[in.at(n, ci, i)]) * static_cast<double>(dyp[out.at(n, co, o)]);
                });
            }
            for (std::int64_t o = 0; o < out.spatial(); ++o) {
                db[static_cast<std::size_t>(co)] += static_cast<double>(dyp[out.at(n, co, o)]);
            }
        }
    }
    return {tensor_from(dw, w_shape), tensor_from(db, Shape{out_channels})};
}

// ---- transposed convolution ---------------------------------------------------------------------

Tensor conv_transpose_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                              const ops::ConvTransposeAttributes& attributes) {
    const Tensor xd = dense_f32(x, "transposed conv input");
    const Tensor wd = dense_f32(w, "transposed conv weights");
    TESSERA_CHECK(wd.rank() == xd.rank(), "reference transposed conv: weights " << shape_to_string(wd.shape())
                                                                               << " must have the rank of the input "
                                                                               << shape_to_string(xd.shape()));
    const std::int64_t out_channels = wd.dim(1);
    const Shape y_shape = ops::conv_transpose_output_shape(xd.shape(), out_channels, attributes);
    check_shape(wd, ops::conv_transpose_weight_shape(xd.dim(1), out_channels, attributes), "transposed conv weights");
    check_bias(bias, out_channels);

    const Volume small = volume_of(xd.shape(), "transposed conv input");
    const Volume large = volume_of(y_shape, "transposed conv output");
    const Window window = conv_transpose_window(attributes);
    const float* xp = xd.data<float>();
    const float* wp = wd.data<float>();
    const Tensor bd = bias ? dense_f32(*bias, "transposed conv bias") : Tensor();
    std::vector<double> y = zeros(large.num_elements());
    for (std::int64_t n = 0; n < small.batch; ++n) {
        for (std::int64_t ci = 0; ci < small.channels; ++ci) {
            for (std::int64_t co = 0; co < large.channels; ++co) {
                const float* wk = wp + (ci * large.channels + co) * window.taps();
                for_each_tap(large, small, window, [&](std::int64_t s, std::int64_t l, std::int64_t k) {
                    y[static_cast<std::size_t>(large.at(n, co, l))] +=
                        static_cast<double>(xp[small.at(n, ci, s)]) * static_cast<double>(wk[k]);
                });
            }
        }
        if (bias) {
            for (std::int64_t co = 0; co < large.channels; ++co) {
                for (std::int64_t l = 0; l < large.spatial(); ++l) {
                    y[static_cast<std::size_t>(large.at(n, co, l))] += static_cast<double>(bd.data<float>()[co]);
                }
            }
        }
    }
    return tensor_from(y, y_shape);
}

Tensor conv_transpose_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                                    const ops::ConvTransposeAttributes& attributes) {
    const Tensor dyd = dense_f32(dy, "transposed conv output gradient");
    const Tensor wd = dense_f32(w, "transposed conv weights");
    TESSERA_CHECK(x_shape.size() >= 2, "reference transposed conv: bad input shape " << shape_to_string(x_shape));
    const std::int64_t out_channels = wd.rank() >= 2 ? wd.dim(1) : 0;
    check_shape(dyd, ops::conv_transpose_output_shape(x_shape, out_channels, attributes),
                "transposed conv output gradient");
    check_shape(wd, ops::conv_transpose_weight_shape(x_shape[1], out_channels, attributes), "transposed conv weights");

    const Volume small = volume_of(x_shape, "transposed conv input");
    const Volume large = volume_of(dyd.shape(), "transposed conv output gradient");
    const Window window = conv_transpose_window(attributes);
    const float* dyp = dyd.data<float>();
    const float* wp = wd.data<float>();
    std::vector<double> dx = zeros(small.num_elements());
    for (std::int64_t n = 0; n < small.batch; ++n) {
        for (std::int64_t ci = 0; ci < small.channels; ++ci) {
            for (std::int64_t co = 0; co < large.channels; ++co) {
                const float* wk = wp + (ci * large.channels + co) * window.taps();
                for_each_tap(large, small, window, [&](std::int64_t s, std::int64_t l, std::int64_t k) {
                    dx[static_cast<std::size_t>(small.at(n, ci, s))] +=
                        static_cast<double>(dyp[large.at(n, co, l)]) * static_cast<double>(wk[k]);
                });
            }
        }
    }
    return tensor_from(dx, x_shape);
}

ConvWeightGradients conv_transpose_backward_weights(const Tensor& x, const Tensor& dy,
                                                    const ops::ConvTransposeAttributes& attributes,
                                                    const Shape& w_shape) {
    const Tensor xd = dense_f32(x, "transposed conv input");
    const Tensor dyd = dense_f32(dy, "transposed conv output gradient");
    const std::int64_t out_channels = dyd.rank() >= 2 ? dyd.dim(1) : 0;
    check_shape(dyd, ops::conv_transpose_output_shape(xd.shape(), out_channels, attributes),
                "transposed conv output gradient");
    check_same_shape(w_shape, ops::conv_transpose_weight_shape(xd.dim(1), out_channels, attributes),
                     "transposed conv weights");

    const Volume small = volume_of(xd.shape(), "transposed conv input");
    const Volume large = volume_of(dyd.shape(), "transposed conv output gradient");
    const Window window = conv_transpose_window(attributes);
    const float* xp = xd.data<float>();
    const float* dyp = dyd.data<float>();
    std::vector<double> dw = zeros(num_elements_of(w_shape));
    std::vector<double> db = zeros(out_channels);
    for (std::int64_t n = 0; n < small.batch; ++n) {
        for (std::int64_t ci = 0; ci < small.channels; ++ci) {
            for (std::int64_t co = 0; co < large.channels; ++co) {
                double* dwk = dw.data() + (ci * large.channels + co) * window.taps();
                for_each_tap(large, small, window, [&](std::int64_t s, std::int64_t l, std::int64_t k) {
                    dwk[k] += static_cast<double>(xp[small.at(n, ci, s)]) * static_cast<double>(dyp[large.at(n, co, l)]);
                });
            }
        }
        for (std::int64_t co = 0; co < large.channels; ++co) {
            for (std::int64_t l = 0; l < large.spatial(); ++l) {
                db[static_cast<std::size_t>(co)] += static_cast<double>(dyp[large.at(n, co, l)]);
            }
        }
    }
    return {tensor_from(dw, w_shape), tensor_from(db, Shape{out_channels})};
}

// ---- pooling ------------------------------------------------------------------------------------

namespace {

// Per output element: the input position of the first maximum (max) or the number of taps inside the
// input (average). Shared by forward and backward so both agree on ties and divisors.
struct PoolPlan {
    std::vector<double> value;           // [N, C, out spatial]: max or average
    std::vector<std::int64_t> argmax;    // [N, C, out spatial]: input position (max pooling)
    std::vector<std::int64_t> count;     // [out spatial]: taps inside the input
};

PoolPlan plan_pool(const Tensor& xd, const Volume& in, const Volume& out, const ops::PoolAttributes& attributes) {
    const Window window = pool_window(attributes);
    PoolPlan plan;
    plan.count.assign(static_cast<std::size_t>(out.spatial()), 0);
    for_each_tap(in, out, window, [&](std::int64_t o, std::int64_t, std::int64_t) {
        ++plan.count[static_cast<std::size_t>(o)];
    });
    for (std::int64_t o = 0; o < out.spatial(); ++o) {
        TESSERA_CHECK(plan.count[static_cast<std::size_t>(o)] > 0,
                      "reference pooling: output position " << o << " has a window entirely in padding (pad "
                                                            << shape_to_string(attributes.pad_begin) << "/"
                                                            << shape_to_string(attributes.pad_end) << ", kernel "
                                                            << shape_to_string(attributes.kernel) << ")");
    }
    const float* xp = xd.data<float>();
    const bool is_max = attributes.kind == ops::PoolKind::Max;
    plan.value.assign(static_cast<std::size_t>(out.num_elements()),
                      is_max ? -std::numeric_limits<double>::infinity() : 0.0);
    plan.argmax.assign(static_cast<std::size_t>(out.num_elements()), -1);
    for (std::int64_t n = 0; n < in.batch; ++n) {
        for (std::int64_t c = 0; c < in.channels; ++c) {
            for_each_tap(in, out, window, [&](std::int64_t o, std::int64_t i, std::int64_t) {
                const auto slot = static_cast<std::size_t>(out.at(n, c, o));
                const double v = static_cast<double>(xp[in.at(n, c, i)]);
                if (is_max) {
                    if (plan.argmax[slot] < 0 || v > plan.value[slot]) {  // strictly greater: first max wins
                        plan.value[slot] = v;
                        plan.argmax[slot] = i;
                    }
                } else {
                    plan.value[slot] += v;
                }
            });
            if (!is_max) {
                for (std::int64_t o = 0; o < out.spatial(); ++o) {
                    plan.value[static_cast<std::size_t>(out.at(n, c, o))] /=
                        static_cast<double>(plan.count[static_cast<std::size_t>(o)]);
                }
            }
        }
    }
    return plan;
}

}  // namespace

Tensor pool_forward(const Tensor& x, const ops::PoolAttributes& attributes) {
    const Tensor xd = dense_f32(x, "pooling input");
    const Shape y_shape = ops::pool_output_shape(xd.shape(), attributes);
    const Volume in = volume_of(xd.shape(), "pooling input");
    const Volume out = volume_of(y_shape, "pooling output");
    return tensor_from(plan_pool(xd, in, out, attributes).value, y_shape);
}

Tensor pool_backward(const Tensor& dy, const Tensor& x, const ops::PoolAttributes& attributes) {
    const Tensor xd = dense_f32(x, "pooling input");
    const Tensor dyd = dense_f32(dy, "pooling output gradient");
    check_shape(dyd, ops::pool_output_shape(xd.shape(), attributes), "pooling output gradient");
    const Volume in = volume_of(xd.shape(), "pooling input");
    const Volume out = volume_of(dyd.shape(), "pooling output gradient");
    const PoolPlan plan = plan_pool(xd, in, out, attributes);
    const float* dyp = dyd.data<float>();
    std::vector<double> dx = zeros(in.num_elements());
    if (attributes.kind == ops::PoolKind::Max) {
        for (std::int64_t n = 0; n < out.batch; ++n) {
            for (std::int64_t c = 0; c < out.channels; ++c) {
                for (std::int64_t o = 0; o < out.spatial(); ++o) {
                    const std::int64_t slot = out.at(n, c, o);
                    dx[static_cast<std::size_t>(in.at(n, c, plan.argmax[static_cast<std::size_t>(slot)]))] +=
                        static_cast<double>(dyp[slot]);
                }
            }
        }
    } else {
        const Window window = pool_window(attributes);
        for (std::int64_t n = 0; n < out.batch; ++n) {
            for (std::int64_t c = 0; c < out.channels; ++c) {
                for_each_tap(in, out, window, [&](std::int64_t o, std::int64_t i, std::int64_t) {
                    dx[static_cast<std::size_t>(in.at(n, c, i))] +=
                        static_cast<double>(dyp[out.at(n, c, o)]) /
                        static_cast<double>(plan.count[static_cast<std::size_t>(o)]);
                });
            }
        }
    }
    return tensor_from(dx, xd.shape());
}

// ---- batch normalisation ------------------------------------------------------------------------

namespace {

struct Moments {
    std::vector<double> mean;
    std::vector<double> variance;  // biased
    std::int64_t count = 0;        // elements per channel
};

Moments moments_of(const Tensor& xd, const Volume& v) {
    Moments m;
    m.count = v.batch * v.spatial();
    m.mean.assign(static_cast<std::size_t>(v.channels), 0.0);
    m.variance.assign(static_cast<std::size_t>(v.channels), 0.0);
    const float* xp = xd.data<float>();
    for (std::int64_t c = 0; c < v.channels; ++c) {
        double sum = 0;
        for (std::int64_t n = 0; n < v.batch; ++n) {
            for (std::int64_t p = 0; p < v.spatial(); ++p) sum += static_cast<double>(xp[v.at(n, c, p)]);
        }
        const double mean = sum / static_cast<double>(m.count);
        double squares = 0;  // two passes: no cancellation
        for (std::int64_t n = 0; n < v.batch; ++n) {
            for (std::int64_t p = 0; p < v.spatial(); ++p) {
                const double d = static_cast<double>(xp[v.at(n, c, p)]) - mean;
                squares += d * d;
            }
        }
        m.mean[static_cast<std::size_t>(c)] = mean;
        m.variance[static_cast<std::size_t>(c)] = squares / static_cast<double>(m.count);
    }
    return m;
}

std::vector<double> doubles_of(const Tensor& tensor, const char* what) {
    const Tensor dense = dense_f32(tensor, what);
    const float* p = dense.data<float>();
    return std::vector<double>(p, p + dense.num_elements());
}

// y = gamma * (x - mean) / sqrt(variance + epsilon) + beta, then relu if fused.
std::vector<double> normalise(const Tensor& xd, const Volume& v, const std::vector<double>& gamma,
                              const std::vector<double>& beta, const std::vector<double>& mean,
                              const std::vector<double>& variance, const ops::BatchNormAttributes& attributes) {
    std::vector<double> y = zeros(v.num_elements());
    const float* xp = xd.data<float>();
    for (std::int64_t c = 0; c < v.channels; ++c) {
        const auto ch = static_cast<std::size_t>(c);
        const double inv_std = 1.0 / std::sqrt(variance[ch] + attributes.epsilon);
        for (std::int64_t n = 0; n < v.batch; ++n) {
            for (std::int64_t p = 0; p < v.spatial(); ++p) {
                const auto slot = static_cast<std::size_t>(v.at(n, c, p));
                double value = gamma[ch] * (static_cast<double>(xp[slot]) - mean[ch]) * inv_std + beta[ch];
                if (attributes.fuse_relu && value < 0) value = 0;
                y[slot] = value;
            }
        }
    }
    return y;
}

}  // namespace

BatchNormTrainingResult batch_norm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                                    const Tensor& running_mean, const Tensor& running_variance,
                                                    const ops::BatchNormAttributes& attributes) {
    const Tensor xd = dense_f32(x, "batch norm input");
    const Volume v = volume_of(xd.shape(), "batch norm input");
    check_channel_vector(gamma, v.channels, "gamma");
    check_channel_vector(beta, v.channels, "beta");
    check_channel_vector(running_mean, v.channels, "running mean");
    check_channel_vector(running_variance, v.channels, "running variance");
    const Moments m = moments_of(xd, v);
    TESSERA_CHECK(m.count > 1, "reference batch norm: training needs more than one element per channel, got "
                                   << m.count << " (input " << shape_to_string(xd.shape()) << ")");

    BatchNormTrainingResult result;
    result.y = tensor_from(normalise(xd, v, doubles_of(gamma, "gamma"), doubles_of(beta, "beta"), m.mean,
                                     m.variance, attributes),
                           xd.shape());
    result.mean = tensor_from(m.mean, Shape{v.channels});
    result.variance = tensor_from(m.variance, Shape{v.channels});
    const std::vector<double> old_mean = doubles_of(running_mean, "running mean");
    const std::vector<double> old_variance = doubles_of(running_variance, "running variance");
    std::vector<double> new_mean(old_mean.size());
    std::vector<double> new_variance(old_variance.size());
    const double n = static_cast<double>(m.count);
    for (std::size_t c = 0; c < new_mean.size(); ++c) {
        new_mean[c] = attributes.momentum * old_mean[c] + (1 - attributes.momentum) * m.mean[c];
        new_variance[c] =
            attributes.momentum * old_variance[c] + (1 - attributes.momentum) * m.variance[c] * n / (n - 1);
    }
    result.running_mean = tensor_from(new_mean, Shape{v.channels});
    result.running_variance = tensor_from(new_variance, Shape{v.channels});
    return result;
}

Tensor batch_norm_forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    const Tensor& running_mean, const Tensor& running_variance,
                                    const ops::BatchNormAttributes& attributes) {
    const Tensor xd = dense_f32(x, "batch norm input");
    const Volume v = volume_of(xd.shape(), "batch norm input");
    check_channel_vector(gamma, v.channels, "gamma");
    check_channel_vector(beta, v.channels, "beta");
    check_channel_vector(running_mean, v.channels, "running mean");
    check_channel_vector(running_variance, v.channels, "running variance");
    return tensor_from(normalise(xd, v, doubles_of(gamma, "gamma"), doubles_of(beta, "beta"),
                                 doubles_of(running_mean, "running mean"),
                                 doubles_of(running_variance, "running variance"), attributes),
                       xd.shape());
}

BatchNormGradients batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                       const Tensor& mean, const Tensor& variance,
                                       const ops::BatchNormAttributes& attributes) {
    const Tensor xd = dense_f32(x, "batch norm input");
    const Tensor dyd = dense_f32(dy, "batch norm output gradient");
    check_shape(dyd, xd.shape(), "batch norm output gradient");
    const Volume v = volume_of(xd.shape(), "batch norm input");
    check_channel_vector(gamma, v.channels, "gamma");
    check_channel_vector(beta, v.channels, "beta");
    check_channel_vector(mean, v.channels, "mean");
    check_channel_vector(variance, v.channels, "variance");
    const std::vector<double> g = doubles_of(gamma, "gamma");
    const std::vector<double> mu = doubles_of(mean, "mean");
    const std::vector<double> var = doubles_of(variance, "variance");

    // The gradient reaching bn(x): dy, masked by the fused relu.
    std::vector<double> grad = doubles_of(dyd, "batch norm output gradient");
    if (attributes.fuse_relu) {
        const std::vector<double> y = normalise(xd, v, g, doubles_of(beta, "beta"), mu, var, attributes);
        for (std::size_t i = 0; i < grad.size(); ++i) {
            if (y[i] <= 0) grad[i] = 0;
        }
    }

    const float* xp = xd.data<float>();
    const double count = static_cast<double>(v.batch * v.spatial());
    std::vector<double> dx = zeros(v.num_elements());
    std::vector<double> dgamma(static_cast<std::size_t>(v.channels), 0.0);
    std::vector<double> dbeta(static_cast<std::size_t>(v.channels), 0.0);
    for (std::int64_t c = 0; c < v.channels; ++c) {
        const auto ch = static_cast<std::size_t>(c);
        const double inv_std = 1.0 / std::sqrt(var[ch] + attributes.epsilon);
        for (std::int64_t n = 0; n < v.batch; ++n) {
            for (std::int64_t p = 0; p < v.spatial(); ++p) {
                const auto slot = static_cast<std::size_t>(v.at(n, c, p));
                const double x_hat = (static_cast<double>(xp[slot]) - mu[ch]) * inv_std;
                dbeta[ch] += grad[slot];
                dgamma[ch] += grad[slot] * x_hat;
            }
        }
        // dx = gamma / σ · (g - mean(g) - x̂ · mean(g · x̂))
        for (std::int64_t n = 0; n < v.batch; ++n) {
            for (std::int64_t p = 0; p < v.spatial(); ++p) {
                const auto slot = static_cast<std::size_t>(v.at(n, c, p));
                const double x_hat = (static_cast<double>(xp[slot]) - mu[ch]) * inv_std;
                dx[slot] = g[ch] * inv_std * (grad[slot] - dbeta[ch] / count - x_hat * dgamma[ch] / count);
            }
        }
    }
    return {tensor_from(dx, xd.shape()), tensor_from(dgamma, Shape{v.channels}), tensor_from(dbeta, Shape{v.channels})};
}

// ---- element-wise and shape ops -----------------------------------------------------------------

Tensor relu_forward(const Tensor& x) {
    Tensor y = dense_f32(x, "relu input").clone();
    float* p = y.data<float>();
    for (std::int64_t i = 0; i < y.num_elements(); ++i) p[i] = p[i] > 0.0f ? p[i] : 0.0f;
    return y;
}

Tensor relu_backward(const Tensor& dy, const Tensor& x) {
    const Tensor xd = dense_f32(x, "relu input");
    Tensor dx = dense_f32(dy, "relu output gradient").clone();
    check_shape(dx, xd.shape(), "relu output gradient");
    const float* xp = xd.data<float>();
    float* p = dx.data<float>();
    for (std::int64_t i = 0; i < dx.num_elements(); ++i) p[i] = xp[i] > 0.0f ? p[i] : 0.0f;
    return dx;
}

Tensor add(const Tensor& a, const Tensor& b) {
    const Tensor ad = dense_f32(a, "add operand a");
    const Tensor bd = dense_f32(b, "add operand b");
    check_shape(bd, ad.shape(), "add operand b");
    Tensor y = Tensor::empty(ad.shape(), DType::F32);
    const float* ap = ad.data<float>();
    const float* bp = bd.data<float>();
    float* yp = y.data<float>();
    for (std::int64_t i = 0; i < y.num_elements(); ++i) {
        yp[i] = static_cast<float>(static_cast<double>(ap[i]) + static_cast<double>(bp[i]));
    }
    return y;
}

AddGradients add_backward(const Tensor& dy) {
    const Tensor dyd = dense_f32(dy, "add output gradient");
    return {dyd.clone(), dyd.clone()};
}

Tensor concat_channels(const std::vector<Tensor>& parts) {
    TESSERA_CHECK(!parts.empty(), "reference concat: needs at least one part");
    std::vector<Tensor> dense;
    dense.reserve(parts.size());
    for (const Tensor& part : parts) dense.push_back(dense_f32(part, "concat part"));
    const Shape& first = dense.front().shape();
    TESSERA_CHECK(first.size() >= 2, "reference concat: parts need a channel axis, got " << shape_to_string(first));
    Shape y_shape = first;
    y_shape[1] = 0;
    for (const Tensor& part : dense) {
        Shape expected = first;
        expected[1] = part.rank() >= 2 ? part.dim(1) : 0;
        check_shape(part, expected, "concat part");
        y_shape[1] += part.dim(1);
    }
    const std::int64_t batch = first[0];
    const std::int64_t inner = num_elements_of(std::span(first).subspan(2));  // spatial elements
    Tensor y = Tensor::empty(y_shape, DType::F32);
    float* yp = y.data<float>();
    for (std::int64_t n = 0; n < batch; ++n) {
        std::int64_t channel_offset = 0;
        for (const Tensor& part : dense) {
            const std::int64_t channels = part.dim(1);
            const float* pp = part.data<float>();
            for (std::int64_t c = 0; c < channels; ++c) {
                for (std::int64_t i = 0; i < inner; ++i) {
                    yp[(n * y_shape[1] + channel_offset + c) * inner + i] = pp[(n * channels + c) * inner + i];
                }
            }
            channel_offset += channels;
        }
    }
    return y;
}

std::vector<Tensor> concat_channels_backward(const Tensor& dy, const std::vector<std::int64_t>& channels) {
    const Tensor dyd = dense_f32(dy, "concat output gradient");
    TESSERA_CHECK(dyd.rank() >= 2, "reference concat: gradient needs a channel axis, got "
                                       << shape_to_string(dyd.shape()));
    const std::int64_t total = std::accumulate(channels.begin(), channels.end(), std::int64_t{0});
    TESSERA_CHECK(total == dyd.dim(1), "reference concat: part channels " << shape_to_string(channels) << " sum to "
                                                                          << total << ", gradient has "
                                                                          << dyd.dim(1));
    const std::int64_t batch = dyd.dim(0);
    const std::int64_t inner = num_elements_of(std::span(dyd.shape()).subspan(2));
    const float* dp = dyd.data<float>();
    std::vector<Tensor> parts;
    std::int64_t channel_offset = 0;
    for (std::int64_t part_channels : channels) {
        TESSERA_CHECK(part_channels >= 0, "reference concat: negative channel count " << part_channels);
        Shape part_shape = dyd.shape();
        part_shape[1] = part_channels;
        Tensor part = Tensor::empty(part_shape, DType::F32);
        float* pp = part.data<float>();
        for (std::int64_t n = 0; n < batch; ++n) {
            for (std::int64_t c = 0; c < part_channels; ++c) {
                for (std::int64_t i = 0; i < inner; ++i) {
                    pp[(n * part_channels + c) * inner + i] = dp[(n * total + channel_offset + c) * inner + i];
                }
            }
        }
        channel_offset += part_channels;
        parts.push_back(std::move(part));
    }
    return parts;
}

// ---- nearest-neighbour upsampling ---------------------------------------------------------------

namespace {

// The factors along D, H, W (D = 1 for 2D), checked against the activation's rank.
std::array<std::int64_t, 3> upsample_factors(const Shape& shape, const Extents& factor) {
    TESSERA_CHECK(factor.size() + 2 == shape.size(), "reference upsample: needs one factor per spatial axis of "
                                                         << shape_to_string(shape) << ", got " << shape_to_string(factor));
    std::array<std::int64_t, 3> f{1, 1, 1};
    const std::size_t offset = 3 - factor.size();
    for (std::size_t a = 0; a < factor.size(); ++a) {
        TESSERA_CHECK(factor[a] >= 1, "reference upsample: factors must be ≥ 1, got " << shape_to_string(factor));
        f[a + offset] = factor[a];
    }
    return f;
}

// Calls visit(input offset, output offset) for every output element (dense tensors).
template <class Visit>
void for_each_upsampled(const Volume& in, const std::array<std::int64_t, 3>& f, Visit&& visit) {
    const std::array<std::int64_t, 3> out{in.extent[0] * f[0], in.extent[1] * f[1], in.extent[2] * f[2]};
    const std::int64_t out_spatial = out[0] * out[1] * out[2];
    for (std::int64_t n = 0; n < in.batch; ++n) {
        for (std::int64_t c = 0; c < in.channels; ++c) {
            for (std::int64_t z = 0; z < out[0]; ++z) {
                for (std::int64_t y = 0; y < out[1]; ++y) {
                    for (std::int64_t x = 0; x < out[2]; ++x) {
                        const std::int64_t source = ((z / f[0]) * in.extent[1] + y / f[1]) * in.extent[2] + x / f[2];
                        const std::int64_t target = (z * out[1] + y) * out[2] + x;
                        visit(in.at(n, c, source), (n * in.channels + c) * out_spatial + target);
                    }
                }
            }
        }
    }
}

}  // namespace

Tensor upsample_nearest_forward(const Tensor& x, const ops::Extents& factor) {
    const Tensor xd = dense_f32(x, "upsample input");
    const Volume in = volume_of(xd.shape(), "upsample input");
    const auto f = upsample_factors(xd.shape(), factor);
    Shape y_shape{xd.dim(0), xd.dim(1)};
    for (std::size_t a = 0; a < factor.size(); ++a) y_shape.push_back(xd.dim(static_cast<int>(a) + 2) * factor[a]);
    Tensor y = Tensor::empty(y_shape, DType::F32);
    const float* xp = xd.data<float>();
    float* yp = y.data<float>();
    for_each_upsampled(in, f, [&](std::int64_t source, std::int64_t target) { yp[target] = xp[source]; });
    return y;
}

Tensor upsample_nearest_backward(const Tensor& dy, const ops::Extents& factor) {
    const Tensor dyd = dense_f32(dy, "upsample output gradient");
    volume_of(dyd.shape(), "upsample output gradient");
    upsample_factors(dyd.shape(), factor);
    Shape x_shape{dyd.dim(0), dyd.dim(1)};
    for (std::size_t a = 0; a < factor.size(); ++a) {
        const std::int64_t extent = dyd.dim(static_cast<int>(a) + 2);
        TESSERA_CHECK(extent % factor[a] == 0, "reference upsample: output gradient " << shape_to_string(dyd.shape())
                                                                                     << " is not a multiple of the factors "
                                                                                     << shape_to_string(factor));
        x_shape.push_back(extent / factor[a]);
    }
    const Volume in = volume_of(x_shape, "upsample input");
    const float* dp = dyd.data<float>();
    std::vector<double> dx = zeros(in.num_elements());
    for_each_upsampled(in, upsample_factors(x_shape, factor), [&](std::int64_t source, std::int64_t target) {
        dx[static_cast<std::size_t>(source)] += static_cast<double>(dp[target]);
    });
    return tensor_from(dx, x_shape);
}

namespace {

// Calls visit(source, target) for every element of the box: source indexes x (whole), target the box.
template <typename Visit>
void for_each_cropped(const Volume& whole, const Volume& box, const std::array<std::int64_t, 3>& offset, Visit&& visit) {
    for (std::int64_t n = 0; n < box.batch; ++n) {
        for (std::int64_t c = 0; c < box.channels; ++c) {
            for (std::int64_t d = 0; d < box.extent[0]; ++d) {
                for (std::int64_t h = 0; h < box.extent[1]; ++h) {
                    for (std::int64_t w = 0; w < box.extent[2]; ++w) {
                        const std::int64_t source =
                            ((d + offset[0]) * whole.extent[1] + (h + offset[1])) * whole.extent[2] + (w + offset[2]);
                        const std::int64_t target = (d * box.extent[1] + h) * box.extent[2] + w;
                        visit(whole.at(n, c, source), box.at(n, c, target));
                    }
                }
            }
        }
    }
}

// Offsets as D, H, W (a 2D tensor's D offset is 0), checked against both shapes.
std::array<std::int64_t, 3> crop_offsets(const Shape& whole, const Shape& box, const ops::Extents& offset) {
    TESSERA_CHECK(offset.size() + 2 == whole.size() && box.size() == whole.size() && box[0] == whole[0] && box[1] == whole[1],
                  "reference crop: offset " << shape_to_string(offset) << " and box " << shape_to_string(box)
                                            << " do not fit " << shape_to_string(whole));
    std::array<std::int64_t, 3> padded{0, 0, 0};
    const std::size_t first = 3 - offset.size();
    for (std::size_t a = 0; a < offset.size(); ++a) {
        TESSERA_CHECK(offset[a] >= 0 && offset[a] + box[a + 2] <= whole[a + 2],
                      "reference crop: box " << shape_to_string(box) << " at " << shape_to_string(offset)
                                             << " leaves " << shape_to_string(whole));
        padded[first + a] = offset[a];
    }
    return padded;
}

}  // namespace

Tensor crop_forward(const Tensor& x, const ops::Extents& offset, const ops::Extents& extent) {
    const Tensor xd = dense_f32(x, "crop input");
    Shape y_shape{xd.dim(0), xd.dim(1)};
    y_shape.insert(y_shape.end(), extent.begin(), extent.end());
    const auto at = crop_offsets(xd.shape(), y_shape, offset);
    Tensor y = Tensor::empty(y_shape, DType::F32);
    const float* xp = xd.data<float>();
    float* yp = y.data<float>();
    for_each_cropped(volume_of(xd.shape(), "crop input"), volume_of(y_shape, "crop output"), at,
                     [&](std::int64_t source, std::int64_t target) { yp[target] = xp[source]; });
    return y;
}

Tensor crop_backward(const Tensor& dy, const Shape& x_shape, const ops::Extents& offset) {
    const Tensor dyd = dense_f32(dy, "crop output gradient");
    const auto at = crop_offsets(x_shape, dyd.shape(), offset);
    const Volume whole = volume_of(x_shape, "crop input");
    std::vector<double> dx = zeros(whole.num_elements());
    const float* dp = dyd.data<float>();
    for_each_cropped(whole, volume_of(dyd.shape(), "crop output gradient"), at, [&](std::int64_t source, std::int64_t target) {
        dx[static_cast<std::size_t>(source)] = static_cast<double>(dp[target]);
    });
    return tensor_from(dx, x_shape);
}

Tensor global_average_pool(const Tensor& x) {
    const Tensor xd = dense_f32(x, "global average pool input");
    TESSERA_CHECK(xd.rank() >= 3, "reference global average pool: expected [N, C, spatial...], got "
                                      << shape_to_string(xd.shape()));
    const std::int64_t rows = xd.dim(0) * xd.dim(1);
    const std::int64_t inner = num_elements_of(std::span(xd.shape()).subspan(2));
    TESSERA_CHECK(inner > 0, "reference global average pool: empty spatial extent " << shape_to_string(xd.shape()));
    const float* xp = xd.data<float>();
    std::vector<double> y = zeros(rows);
    for (std::int64_t r = 0; r < rows; ++r) {
        double sum = 0;
        for (std::int64_t i = 0; i < inner; ++i) sum += static_cast<double>(xp[r * inner + i]);
        y[static_cast<std::size_t>(r)] = sum / static_cast<double>(inner);
    }
    return tensor_from(y, Shape{xd.dim(0), xd.dim(1)});
}

Tensor global_average_pool_backward(const Tensor& dy, const Shape& x_shape) {
    const Tensor dyd = dense_f32(dy, "global average pool output gradient");
    TESSERA_CHECK(x_shape.size() >= 3, "reference global average pool: expected [N, C, spatial...], got "
                                           << shape_to_string(x_shape));
    check_shape(dyd, Shape{x_shape[0], x_shape[1]}, "global average pool output gradient");
    const std::int64_t rows = x_shape[0] * x_shape[1];
    const std::int64_t inner = num_elements_of(std::span(x_shape).subspan(2));
    const float* dp = dyd.data<float>();
    std::vector<double> dx = zeros(rows * inner);
    for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t i = 0; i < inner; ++i) {
            dx[static_cast<std::size_t>(r * inner + i)] = static_cast<double>(dp[r]) / static_cast<double>(inner);
        }
    }
    return tensor_from(dx, x_shape);
}

// ---- dense --------------------------------------------------------------------------------------

Tensor dense_forward(const Tensor& x, const Tensor& w, const Tensor* bias) {
    const Tensor xd = dense_f32(x, "dense input");
    const Tensor wd = dense_f32(w, "dense weights");
    TESSERA_CHECK(xd.rank() == 2, "reference dense: expected input [N, in], got " << shape_to_string(xd.shape()));
    TESSERA_CHECK(wd.rank() == 2, "reference dense: expected weights [out, in], got " << shape_to_string(wd.shape()));
    const std::int64_t batch = xd.dim(0), in = xd.dim(1), out = wd.dim(0);
    check_shape(wd, Shape{out, in}, "dense weights");
    check_bias(bias, out);
    const float* xp = xd.data<float>();
    const float* wp = wd.data<float>();
    const Tensor bd = bias ? dense_f32(*bias, "dense bias") : Tensor();
    std::vector<double> y = zeros(batch * out);
    for (std::int64_t n = 0; n < batch; ++n) {
        for (std::int64_t o = 0; o < out; ++o) {
            double sum = bias ? static_cast<double>(bd.data<float>()[o]) : 0.0;
            for (std::int64_t i = 0; i < in; ++i) {
                sum += static_cast<double>(xp[n * in + i]) * static_cast<double>(wp[o * in + i]);
            }
            y[static_cast<std::size_t>(n * out + o)] = sum;
        }
    }
    return tensor_from(y, Shape{batch, out});
}

DenseGradients dense_backward(const Tensor& dy, const Tensor& x, const Tensor& w) {
    const Tensor dyd = dense_f32(dy, "dense output gradient");
    const Tensor xd = dense_f32(x, "dense input");
    const Tensor wd = dense_f32(w, "dense weights");
    TESSERA_CHECK(xd.rank() == 2, "reference dense: expected input [N, in], got " << shape_to_string(xd.shape()));
    TESSERA_CHECK(wd.rank() == 2, "reference dense: expected weights [out, in], got " << shape_to_string(wd.shape()));
    const std::int64_t batch = xd.dim(0), in = xd.dim(1), out = wd.dim(0);
    check_shape(wd, Shape{out, in}, "dense weights");
    check_shape(dyd, Shape{batch, out}, "dense output gradient");
    const float* dp = dyd.data<float>();
    const float* xp = xd.data<float>();
    const float* wp = wd.data<float>();
    std::vector<double> dx = zeros(batch * in);
    std::vector<double> dw = zeros(out * in);
    std::vector<double> db = zeros(out);
    for (std::int64_t n = 0; n < batch; ++n) {
        for (std::int64_t o = 0; o < out; ++o) {
            const double g = static_cast<double>(dp[n * out + o]);
            db[static_cast<std::size_t>(o)] += g;
            for (std::int64_t i = 0; i < in; ++i) {
                dx[static_cast<std::size_t>(n * in + i)] += g * static_cast<double>(wp[o * in + i]);
                dw[static_cast<std::size_t>(o * in + i)] += g * static_cast<double>(xp[n * in + i]);
            }
        }
    }
    return {tensor_from(dx, Shape{batch, in}), tensor_from(dw, Shape{out, in}), tensor_from(db, Shape{out})};
}

// ---- softmax ------------------------------------------------------------------------------------

Tensor softmax_channels(const Tensor& x) {
    const Tensor xd = dense_f32(x, "softmax input");
    TESSERA_CHECK(xd.rank() >= 2, "reference softmax: expected [N, C, ...], got " << shape_to_string(xd.shape()));
    const std::int64_t batch = xd.dim(0), channels = xd.dim(1);
    const std::int64_t inner = num_elements_of(std::span(xd.shape()).subspan(2));
    const float* xp = xd.data<float>();
    std::vector<double> y = zeros(xd.num_elements());
    for (std::int64_t n = 0; n < batch; ++n) {
        for (std::int64_t i = 0; i < inner; ++i) {
            const auto at = [&](std::int64_t c) { return (n * channels + c) * inner + i; };
            double largest = -std::numeric_limits<double>::infinity();
            for (std::int64_t c = 0; c < channels; ++c) largest = std::max(largest, static_cast<double>(xp[at(c)]));
            double sum = 0;
            for (std::int64_t c = 0; c < channels; ++c) {
                const double e = std::exp(static_cast<double>(xp[at(c)]) - largest);
                y[static_cast<std::size_t>(at(c))] = e;
                sum += e;
            }
            for (std::int64_t c = 0; c < channels; ++c) y[static_cast<std::size_t>(at(c))] /= sum;
        }
    }
    return tensor_from(y, xd.shape());
}

Tensor softmax_channels_backward(const Tensor& dy, const Tensor& y) {
    const Tensor dyd = dense_f32(dy, "softmax output gradient");
    const Tensor yd = dense_f32(y, "softmax output");
    TESSERA_CHECK(yd.rank() >= 2, "reference softmax: expected [N, C, ...], got " << shape_to_string(yd.shape()));
    check_shape(dyd, yd.shape(), "softmax output gradient");
    const std::int64_t batch = yd.dim(0), channels = yd.dim(1);
    const std::int64_t inner = num_elements_of(std::span(yd.shape()).subspan(2));
    const float* dp = dyd.data<float>();
    const float* yp = yd.data<float>();
    std::vector<double> dx = zeros(yd.num_elements());
    for (std::int64_t n = 0; n < batch; ++n) {
        for (std::int64_t i = 0; i < inner; ++i) {
            const auto at = [&](std::int64_t c) { return (n * channels + c) * inner + i; };
            double dot = 0;
            for (std::int64_t c = 0; c < channels; ++c) {
                dot += static_cast<double>(dp[at(c)]) * static_cast<double>(yp[at(c)]);
            }
            for (std::int64_t c = 0; c < channels; ++c) {
                dx[static_cast<std::size_t>(at(c))] =
                    static_cast<double>(yp[at(c)]) * (static_cast<double>(dp[at(c)]) - dot);
            }
        }
    }
    return tensor_from(dx, yd.shape());
}

}  // namespace tessera::reference
