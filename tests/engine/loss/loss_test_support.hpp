// Test support for engine/loss: random inputs, tile boxes, and plain double-precision references.
//
// The references are written from the formulas in the headers, one voxel at a time, with no attempt
// at speed; finite differences are taken on them in double, so they check the engine's f32 gradients
// without f32 rounding in the difference quotient.
#pragma once

#include "tensor/tensor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace tessera::loss::test_support {

// ---- inputs ---------------------------------------------------------------------------------

inline Tensor random_f32(const Shape& shape, std::uint32_t seed, float low = -3.0f, float high = 3.0f) {
    Tensor t = Tensor::empty(shape, DType::F32);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(low, high);
    for (std::int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = dist(rng);
    return t;
}

// Labels in [0, classes); about `ignore_fraction` of them set to `ignore_label`.
inline Tensor random_labels(const Shape& shape, std::int32_t classes, std::uint32_t seed,
                            std::optional<std::int32_t> ignore_label = std::nullopt, double ignore_fraction = 0.2) {
    Tensor t = Tensor::empty(shape, DType::I32);
    std::mt19937 rng(seed);
    std::uniform_int_distribution<std::int32_t> dist(0, classes - 1);
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    for (std::int64_t i = 0; i < t.num_elements(); ++i) {
        const std::int32_t label = dist(rng);
        t.data<std::int32_t>()[i] = (ignore_label && coin(rng) < ignore_fraction) ? *ignore_label : label;
    }
    return t;
}

// Targets in {0, 1} with about `positive_fraction` ones.
inline Tensor random_binary(const Shape& shape, std::uint32_t seed, double positive_fraction = 0.3) {
    Tensor t = Tensor::empty(shape, DType::F32);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    for (std::int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = coin(rng) < positive_fraction ? 1.0f : 0.0f;
    return t;
}

inline std::vector<double> to_doubles(const Tensor& t) {
    const Tensor dense = t.contiguous();
    std::vector<double> values(static_cast<std::size_t>(dense.num_elements()));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = dense.data<float>()[i];
    return values;
}

inline std::vector<std::int32_t> to_ints(const Tensor& t) {
    const Tensor dense = t.contiguous();
    return std::vector<std::int32_t>(dense.data<std::int32_t>(), dense.data<std::int32_t>() + dense.num_elements());
}

// ---- tiles ----------------------------------------------------------------------------------

struct Box {
    Shape begin;
    Shape extent;
};

// The boxes of `shape` cut at `boundaries` along `axis` (boundaries run from 0 to the extent).
inline std::vector<Box> boxes_along(const Shape& shape, int axis, const std::vector<std::int64_t>& boundaries) {
    std::vector<Box> boxes;
    for (std::size_t i = 0; i + 1 < boundaries.size(); ++i) {
        Box box{Shape(shape.size(), 0), shape};
        box.begin[static_cast<std::size_t>(axis)] = boundaries[i];
        box.extent[static_cast<std::size_t>(axis)] = boundaries[i + 1] - boundaries[i];
        boxes.push_back(box);
    }
    return boxes;
}

// Every box of a grid: each axis cut at its boundaries.
inline std::vector<Box> grid_boxes(const Shape& shape, const std::vector<std::pair<int, std::vector<std::int64_t>>>& cuts) {
    std::vector<Box> boxes{Box{Shape(shape.size(), 0), shape}};
    for (const auto& [axis, boundaries] : cuts) {
        std::vector<Box> next;
        for (const Box& box : boxes) {
            for (std::size_t i = 0; i + 1 < boundaries.size(); ++i) {
                Box cut = box;
                cut.begin[static_cast<std::size_t>(axis)] = boundaries[i];
                cut.extent[static_cast<std::size_t>(axis)] = boundaries[i + 1] - boundaries[i];
                next.push_back(cut);
            }
        }
        boxes = next;
    }
    return boxes;
}

// The same box of a tensor without the class axis (labels, per-anchor weights).
inline Box without_axis_1(const Box& box) {
    Box result;
    for (std::size_t axis = 0; axis < box.begin.size(); ++axis) {
        if (axis == 1) continue;
        result.begin.push_back(box.begin[axis]);
        result.extent.push_back(box.extent[axis]);
    }
    return result;
}

inline Tensor cut(const Tensor& t, const Box& box) {
    return t.view_box(std::span<const std::int64_t>(box.begin), std::span<const std::int64_t>(box.extent)).contiguous();
}

// A named set of tile splits: along H and along D, 2 and 4 tiles, uneven.
struct TileSplit {
    std::string name;
    Shape shape;  // of the input with its class axis, [N, C, ...]
    std::vector<Box> boxes;
};

inline std::vector<TileSplit> standard_splits(std::int64_t classes) {
    std::vector<TileSplit> splits;
    const Shape shape_2d{2, classes, 11, 6};     // [N, C, H, W]
    const Shape shape_3d{2, classes, 7, 6, 5};   // [N, C, D, H, W]
    splits.push_back({"2d H in 2 (5+6)", shape_2d, boxes_along(shape_2d, 2, {0, 5, 11})});
    splits.push_back({"2d H in 4 (2+3+4+2)", shape_2d, boxes_along(shape_2d, 2, {0, 2, 5, 9, 11})});
    splits.push_back({"2d H×W in 2×2", shape_2d, grid_boxes(shape_2d, {{2, {0, 4, 11}}, {3, {0, 1, 6}}})});
    splits.push_back({"3d D in 2 (3+4)", shape_3d, boxes_along(shape_3d, 2, {0, 3, 7})});
    splits.push_back({"3d D in 4 (1+2+3+1)", shape_3d, boxes_along(shape_3d, 2, {0, 1, 3, 6, 7})});
    splits.push_back({"3d H in 2 (4+2)", shape_3d, boxes_along(shape_3d, 3, {0, 4, 6})});
    splits.push_back({"3d H in 4 (1+1+2+2)", shape_3d, boxes_along(shape_3d, 3, {0, 1, 2, 4, 6})});
    splits.push_back({"3d D×H in 2×2", shape_3d, grid_boxes(shape_3d, {{2, {0, 2, 7}}, {3, {0, 3, 6}}})});
    return splits;
}

// ---- comparisons ----------------------------------------------------------------------------

// |a − b| ≤ atol + rtol·|b| for every element.
inline void expect_tensors_near(const Tensor& actual, const Tensor& expected, double atol, double rtol,
                                const std::string& what) {
    ASSERT_EQ(actual.shape(), expected.shape()) << what;
    const std::vector<double> a = to_doubles(actual);
    const std::vector<double> b = to_doubles(expected);
    int failures = 0;
    for (std::size_t i = 0; i < a.size() && failures < 5; ++i) {
        if (!(std::fabs(a[i] - b[i]) <= atol + rtol * std::fabs(b[i]))) {
            ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", expected " << b[i];
            ++failures;
        }
    }
}

inline void expect_all_finite(const Tensor& t, const std::string& what) {
    const std::vector<double> values = to_doubles(t);
    for (std::size_t i = 0; i < values.size(); ++i) {
        ASSERT_TRUE(std::isfinite(values[i])) << what << ": element " << i << " is " << values[i];
    }
}

inline void expect_error_containing(const std::function<void()>& fn, const std::vector<std::string>& parts) {
    try {
        fn();
        ADD_FAILURE() << "expected an Error";
    } catch (const Error& e) {
        const std::string message = e.what();
        for (const std::string& part : parts) {
            EXPECT_NE(message.find(part), std::string::npos) << "message \"" << message << "\" lacks \"" << part << '"';
        }
    }
}

// Central differences of f at x, in double: (f(x + h e_i) − f(x − h e_i)) / 2h.
inline std::vector<double> central_differences(const std::function<double(const std::vector<double>&)>& f,
                                               std::vector<double> x, double h = 1e-5) {
    std::vector<double> gradient(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double saved = x[i];
        x[i] = saved + h;
        const double up = f(x);
        x[i] = saved - h;
        const double down = f(x);
        x[i] = saved;
        gradient[i] = (up - down) / (2 * h);
    }
    return gradient;
}

inline void expect_gradient_matches(const Tensor& gradient, const std::vector<double>& expected, double atol,
                                    double rtol, const std::string& what) {
    const std::vector<double> actual = to_doubles(gradient);
    ASSERT_EQ(actual.size(), expected.size()) << what;
    int failures = 0;
    for (std::size_t i = 0; i < actual.size() && failures < 5; ++i) {
        if (!(std::fabs(actual[i] - expected[i]) <= atol + rtol * std::fabs(expected[i]))) {
            ADD_FAILURE() << what << ": d/dx[" << i << "] is " << actual[i] << ", finite differences give "
                          << expected[i];
            ++failures;
        }
    }
}

// ---- references (double, one voxel at a time) ------------------------------------------------

struct Dims {  // [N, C, S]
    std::int64_t n = 0, c = 0, s = 0;
};

inline Dims dims_of(const Shape& shape) {
    Dims d;
    d.n = shape[0];
    d.c = shape.size() > 1 ? shape[1] : 1;
    d.s = 1;
    for (std::size_t axis = 2; axis < shape.size(); ++axis) d.s *= shape[axis];
    return d;
}

inline std::vector<double> reference_softmax_at(const std::vector<double>& z, const Dims& d, std::int64_t n,
                                                std::int64_t s) {
    double max_z = -INFINITY;
    for (std::int64_t c = 0; c < d.c; ++c) max_z = std::max(max_z, z[static_cast<std::size_t>((n * d.c + c) * d.s + s)]);
    std::vector<double> p(static_cast<std::size_t>(d.c));
    double sum = 0;
    for (std::int64_t c = 0; c < d.c; ++c) {
        p[static_cast<std::size_t>(c)] = std::exp(z[static_cast<std::size_t>((n * d.c + c) * d.s + s)] - max_z);
        sum += p[static_cast<std::size_t>(c)];
    }
    for (double& v : p) v /= sum;
    return p;
}

inline double reference_cross_entropy(const std::vector<double>& z, const std::vector<std::int32_t>& y, const Dims& d,
                                      const std::vector<double>& class_weights, std::optional<std::int32_t> ignore) {
    double numerator = 0;
    double denominator = 0;
    for (std::int64_t n = 0; n < d.n; ++n) {
        for (std::int64_t s = 0; s < d.s; ++s) {
            const std::int32_t label = y[static_cast<std::size_t>(n * d.s + s)];
            if (ignore && label == *ignore) continue;
            const double w = class_weights.empty() ? 1.0 : class_weights[static_cast<std::size_t>(label)];
            const std::vector<double> p = reference_softmax_at(z, d, n, s);
            numerator += w * -std::log(p[static_cast<std::size_t>(label)]);
            denominator += w;
        }
    }
    return denominator > 0 ? numerator / denominator : 0.0;
}

inline double reference_dice_loss(const std::vector<double>& z, const std::vector<std::int32_t>& y, const Dims& d,
                                  double epsilon, bool exclude_background, std::optional<std::int32_t> ignore) {
    std::vector<double> intersection(static_cast<std::size_t>(d.c), 0.0);
    std::vector<double> probability_sum(static_cast<std::size_t>(d.c), 0.0);
    std::vector<double> label_count(static_cast<std::size_t>(d.c), 0.0);
    for (std::int64_t n = 0; n < d.n; ++n) {
        for (std::int64_t s = 0; s < d.s; ++s) {
            const std::int32_t label = y[static_cast<std::size_t>(n * d.s + s)];
            if (ignore && label == *ignore) continue;
            const std::vector<double> p = reference_softmax_at(z, d, n, s);
            for (std::int64_t c = 0; c < d.c; ++c) {
                probability_sum[static_cast<std::size_t>(c)] += p[static_cast<std::size_t>(c)];
                if (c == label) {
                    intersection[static_cast<std::size_t>(c)] += p[static_cast<std::size_t>(c)];
                    label_count[static_cast<std::size_t>(c)] += 1;
                }
            }
        }
    }
    double dice_sum = 0;
    int k = 0;
    for (std::int64_t c = exclude_background ? 1 : 0; c < d.c; ++c, ++k) {
        const auto i = static_cast<std::size_t>(c);
        dice_sum += (2 * intersection[i] + epsilon) / (probability_sum[i] + label_count[i] + epsilon);
    }
    return 1.0 - dice_sum / k;
}

// weights: one per element (already broadcast), or empty.
inline double reference_focal_loss(const std::vector<double>& x, const std::vector<double>& t,
                                   const std::vector<double>& weights, double alpha, double gamma, double normalizer) {
    double sum = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double p = 1.0 / (1.0 + std::exp(-x[i]));
        const bool positive = t[i] == 1.0;
        const double p_t = positive ? p : 1.0 - p;
        const double alpha_t = positive ? alpha : 1.0 - alpha;
        const double w = weights.empty() ? 1.0 : weights[i];
        sum += w * -alpha_t * std::pow(1.0 - p_t, gamma) * std::log(p_t);
    }
    return sum / std::max(normalizer, 1.0);
}

inline double reference_huber(const std::vector<double>& prediction, const std::vector<double>& target,
                              const std::vector<double>& weights, double delta, double normalizer) {
    double sum = 0;
    for (std::size_t i = 0; i < prediction.size(); ++i) {
        const double x = prediction[i] - target[i];
        const double loss = std::fabs(x) <= delta ? 0.5 * x * x : delta * (std::fabs(x) - 0.5 * delta);
        sum += (weights.empty() ? 1.0 : weights[i]) * loss;
    }
    return sum / std::max(normalizer, 1.0);
}

// Per-anchor weights [N, ...] broadcast to [N, C, ...].
inline std::vector<double> broadcast_per_anchor(const Tensor& weights, const Shape& input_shape) {
    const Dims d = dims_of(input_shape);
    const std::vector<double> w = to_doubles(weights);
    std::vector<double> result(static_cast<std::size_t>(d.n * d.c * d.s));
    for (std::int64_t n = 0; n < d.n; ++n)
        for (std::int64_t c = 0; c < d.c; ++c)
            for (std::int64_t s = 0; s < d.s; ++s)
                result[static_cast<std::size_t>((n * d.c + c) * d.s + s)] = w[static_cast<std::size_t>(n * d.s + s)];
    return result;
}

}  // namespace tessera::loss::test_support
