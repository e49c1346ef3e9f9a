#include "reference/gradient_check.hpp"

#include "core/random.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace tessera::reference {

namespace {

// The engine's seeded generator, plus a bounded draw for shuffles and sampling.
class Random : public SeededRandom {
public:
    using SeededRandom::SeededRandom;
    std::int64_t below(std::int64_t bound) {  // [0, bound); the modulo bias is irrelevant here
        return static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(bound));
    }
};

void shuffle(std::vector<std::int64_t>& values, Random& random) {
    for (std::int64_t i = static_cast<std::int64_t>(values.size()) - 1; i > 0; --i) {
        std::swap(values[static_cast<std::size_t>(i)], values[static_cast<std::size_t>(random.below(i + 1))]);
    }
}

Shape index_of(std::int64_t offset, const Shape& shape) {
    Shape index(shape.size(), 0);
    for (std::size_t a = shape.size(); a-- > 0;) {
        index[a] = offset % shape[a];
        offset /= shape[a];
    }
    return index;
}

}  // namespace

std::string GradientCheckReport::describe() const {
    std::ostringstream out;
    out << "gradient check over " << num_checked << " elements: max abs error " << max_absolute_error
        << ", max rel error " << max_relative_error << " at input " << worst_input << " index "
        << shape_to_string(worst_index) << " (analytic " << worst_analytic << ", numeric " << worst_numeric << ")";
    return out.str();
}

GradientCheckReport check_gradients(const ScalarFunction& loss, const std::vector<Tensor>& inputs,
                                    const std::vector<Tensor>& analytic, const GradientCheckOptions& options) {
    TESSERA_CHECK(inputs.size() == analytic.size(), "gradient check: " << inputs.size() << " inputs but "
                                                                        << analytic.size() << " analytic gradients");
    // Perturbed copies: dense, owned here, restored after every evaluation.
    std::vector<Tensor> work;
    work.reserve(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        TESSERA_CHECK(inputs[i].dtype() == DType::F32 && analytic[i].dtype() == DType::F32,
                      "gradient check: input " << i << " and its gradient must be f32");
        TESSERA_CHECK(inputs[i].shape() == analytic[i].shape(),
                      "gradient check: input " << i << " has shape " << shape_to_string(inputs[i].shape())
                                               << " but its gradient " << shape_to_string(analytic[i].shape()));
        work.push_back(inputs[i].clone());
    }

    GradientCheckReport report;
    Random random(options.seed);
    for (std::size_t input = 0; input < work.size(); ++input) {
        const std::int64_t count = work[input].num_elements();
        std::vector<std::int64_t> offsets(static_cast<std::size_t>(count));
        for (std::int64_t i = 0; i < count; ++i) offsets[static_cast<std::size_t>(i)] = i;
        if (count > options.check_all_up_to) {
            shuffle(offsets, random);
            offsets.resize(static_cast<std::size_t>(std::min(count, options.max_samples_per_input)));
            std::sort(offsets.begin(), offsets.end());
        }
        const Tensor gradient = analytic[input].contiguous();
        double scale = 0;  // the largest |analytic| of this input
        for (std::int64_t i = 0; i < count; ++i) {
            scale = std::max(scale, std::abs(static_cast<double>(gradient.data<float>()[i])));
        }
        const double floor = std::max(options.denominator_floor * scale, options.absolute_floor);
        float* values = work[input].data<float>();
        for (std::int64_t offset : offsets) {
            const float original = values[offset];
            const double h = options.relative_step * std::max(std::abs(static_cast<double>(original)), 1.0);
            const float plus = static_cast<float>(static_cast<double>(original) + h);
            const float minus = static_cast<float>(static_cast<double>(original) - h);
            values[offset] = plus;
            const double loss_plus = loss(work);
            values[offset] = minus;
            const double loss_minus = loss(work);
            values[offset] = original;
            const double numeric = (loss_plus - loss_minus) / (static_cast<double>(plus) - static_cast<double>(minus));
            const double exact = static_cast<double>(gradient.data<float>()[offset]);
            const double absolute = std::abs(exact - numeric);
            const double relative =
                absolute / std::max({std::abs(exact), std::abs(numeric), floor});
            ++report.num_checked;
            report.max_absolute_error = std::max(report.max_absolute_error, absolute);
            if (report.worst_offset < 0 || relative > report.max_relative_error) {
                report.max_relative_error = relative;
                report.worst_input = input;
                report.worst_offset = offset;
                report.worst_index = index_of(offset, work[input].shape());
                report.worst_analytic = exact;
                report.worst_numeric = numeric;
            }
        }
    }
    return report;
}

double inner_product(const Tensor& a, const Tensor& b) {
    TESSERA_CHECK(a.dtype() == DType::F32 && b.dtype() == DType::F32, "inner_product: expected f32 tensors");
    TESSERA_CHECK(a.shape() == b.shape(), "inner_product: shapes differ, " << shape_to_string(a.shape()) << " and "
                                                                           << shape_to_string(b.shape()));
    const Tensor ad = a.contiguous();
    const Tensor bd = b.contiguous();
    const float* ap = ad.data<float>();
    const float* bp = bd.data<float>();
    double sum = 0;
    for (std::int64_t i = 0; i < ad.num_elements(); ++i) sum += static_cast<double>(ap[i]) * static_cast<double>(bp[i]);
    return sum;
}

Tensor random_uniform(Shape shape, std::uint64_t seed, double low, double high) {
    Tensor result = Tensor::empty(std::move(shape), DType::F32);
    Random random(seed);
    float* out = result.data<float>();
    for (std::int64_t i = 0; i < result.num_elements(); ++i) {
        out[i] = static_cast<float>(low + (high - low) * random.uniform());
    }
    return result;
}

Tensor random_distinct(Shape shape, std::uint64_t seed, double spacing) {
    Tensor result = Tensor::empty(std::move(shape), DType::F32);
    const std::int64_t count = result.num_elements();
    std::vector<std::int64_t> ranks(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) ranks[static_cast<std::size_t>(i)] = i;
    Random random(seed);
    shuffle(ranks, random);
    float* out = result.data<float>();
    const double centre = static_cast<double>(count - 1) / 2.0;
    for (std::int64_t i = 0; i < count; ++i) {
        out[i] = static_cast<float>((static_cast<double>(ranks[static_cast<std::size_t>(i)]) - centre) * spacing);
    }
    return result;
}

void push_away_from_zero(Tensor& x, double margin) {
    TESSERA_CHECK(x.dtype() == DType::F32 && x.is_contiguous(), "push_away_from_zero: expected a dense f32 tensor");
    float* values = x.data<float>();
    for (std::int64_t i = 0; i < x.num_elements(); ++i) {
        const double v = static_cast<double>(values[i]);
        values[i] = static_cast<float>(v + (v < 0 ? -margin : margin));
    }
}

}  // namespace tessera::reference
