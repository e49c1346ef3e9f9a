#include "loss/dice_loss.hpp"

#include "loss/class_layout.hpp"
#include "loss/fast_math.hpp"

#include <algorithm>
#include <cmath>

namespace tessera::loss {

namespace {

using detail::ClassLayout;

constexpr const char* k_name = "dice_loss";
constexpr std::int64_t k_block = 256;  // voxels per block

void check_options(const DiceLossOptions& options, std::int64_t classes) {
    TESSERA_CHECK(std::isfinite(options.epsilon) && options.epsilon > 0,
                  k_name << ": expected a positive epsilon, got " << options.epsilon);
    TESSERA_CHECK(!options.exclude_background || classes >= 2,
                  k_name << ": expected at least 2 classes to exclude the background class, got " << classes);
}

struct Prepared {
    Tensor logits;
    Tensor labels;
    ClassLayout layout;
    detail::LabelTally tally;
};

Prepared prepare(const Tensor& logits, const Tensor& labels, const DiceLossOptions& options) {
    Prepared prepared;
    prepared.layout = detail::check_logits_and_labels(k_name, logits, labels);
    check_options(options, prepared.layout.classes);
    prepared.logits = logits.contiguous();
    prepared.labels = labels.contiguous();
    prepared.tally = detail::tally_labels(k_name, prepared.labels, prepared.layout.classes, options.ignore_label);
    return prepared;
}

// Per block of voxels: the labels as class index (0 when ignored) and a 0/1 mask.
void read_labels(const std::int32_t* y, std::int64_t len, std::int32_t ignore, bool has_ignore,
                 std::int32_t* label_class, float* mask) {
    for (std::int64_t j = 0; j < len; ++j) {
        const bool ignored = has_ignore && y[j] == ignore;
        label_class[j] = ignored ? 0 : y[j];
        mask[j] = ignored ? 0.0f : 1.0f;
    }
}

// Pass 1: softmax probabilities, written to `probabilities` (the gradient tensor, or a scratch block
// when `probabilities` is null) and, if `partial` is given, summed into I_c and P_c.
void softmax_pass(const Prepared& in, const DiceLossOptions& options, float* probabilities, DicePartial* partial) {
    const std::int64_t classes = in.layout.classes;
    const std::int64_t spatial = in.layout.spatial;
    const float* logits = in.logits.data<float>();
    const std::int32_t* labels = in.labels.data<std::int32_t>();
    const std::int32_t ignore = options.ignore_label.value_or(0);
    const bool has_ignore = options.ignore_label.has_value();

    alignas(64) std::int32_t label_class[k_block];
    alignas(64) float mask[k_block];
    alignas(64) float max_logit[k_block];
    alignas(64) float inverse_sum[k_block];
    std::vector<float> scratch(probabilities ? 0 : static_cast<std::size_t>(classes * k_block));
    // Lane accumulators: [c][j] in double, so the sums vectorise and stay exact enough for big volumes.
    std::vector<double> probability_lanes(partial ? static_cast<std::size_t>(classes * k_block) : 0, 0.0);
    std::vector<double> intersection_lanes(probability_lanes.size(), 0.0);

    for (std::int64_t n = 0; n < in.layout.batch; ++n) {
        for (std::int64_t s0 = 0; s0 < spatial; s0 += k_block) {
            const std::int64_t len = std::min(k_block, spatial - s0);
            const float* z = logits + n * classes * spatial + s0;
            // p[c * p_stride + j]: probability of class c at voxel s0 + j
            float* p = probabilities ? probabilities + n * classes * spatial + s0 : scratch.data();
            const std::int64_t p_stride = probabilities ? spatial : k_block;
            read_labels(labels + n * spatial + s0, len, ignore, has_ignore, label_class, mask);

            for (std::int64_t j = 0; j < len; ++j) max_logit[j] = z[j];
            for (std::int64_t c = 1; c < classes; ++c) {
                const float* row = z + c * spatial;
                for (std::int64_t j = 0; j < len; ++j) max_logit[j] = detail::max_f32(max_logit[j], row[j]);
            }
            for (std::int64_t j = 0; j < len; ++j) inverse_sum[j] = 0.0f;
            for (std::int64_t c = 0; c < classes; ++c) {
                const float* row = z + c * spatial;
                float* p_row = p + c * p_stride;
                for (std::int64_t j = 0; j < len; ++j) {
                    const float e = detail::exp_f32(row[j] - max_logit[j]);
                    p_row[j] = e;
                    inverse_sum[j] += e;
                }
            }
            for (std::int64_t j = 0; j < len; ++j) inverse_sum[j] = 1.0f / inverse_sum[j];
            for (std::int64_t c = 0; c < classes; ++c) {
                float* p_row = p + c * p_stride;
                for (std::int64_t j = 0; j < len; ++j) p_row[j] *= inverse_sum[j];
            }
            if (!partial) continue;
            for (std::int64_t c = 0; c < classes; ++c) {
                const float* p_row = p + c * p_stride;
                double* probability_lane = probability_lanes.data() + c * k_block;
                double* intersection_lane = intersection_lanes.data() + c * k_block;
                for (std::int64_t j = 0; j < len; ++j) {
                    const float counted = mask[j] * p_row[j];
                    probability_lane[j] += static_cast<double>(counted);
                    intersection_lane[j] += static_cast<double>(label_class[j] == c ? counted : 0.0f);
                }
            }
        }
    }
    if (!partial) return;
    for (std::int64_t c = 0; c < classes; ++c) {
        double probability_sum = 0;
        double intersection = 0;
        for (std::int64_t j = 0; j < k_block; ++j) {
            probability_sum += probability_lanes[static_cast<std::size_t>(c * k_block + j)];
            intersection += intersection_lanes[static_cast<std::size_t>(c * k_block + j)];
        }
        partial->probability_sum[static_cast<std::size_t>(c)] = probability_sum;
        partial->intersection[static_cast<std::size_t>(c)] = intersection;
    }
}

bool is_included(std::int64_t c, const DiceLossOptions& options) {
    return !(options.exclude_background && c == 0);
}

std::int64_t num_included(std::int64_t classes, const DiceLossOptions& options) {
    return options.exclude_background ? classes - 1 : classes;
}

// Pass 2, in place: probabilities → d value / d logits, given the global sums.
// With g_c = d value / d p_c = a_c [y = c] + b_c for included classes (0 for excluded):
//   a_c = −2 / (K D_c),  b_c = (2 I_c + ε) / (K D_c²),  D_c = P_c + G_c + ε
//   d value / d z_k = p_k (g_k − t),  t = Σ_c p_c g_c = a_y p_y + Σ_c b_c p_c
void gradient_pass(const Prepared& in, const DicePartial& total, const DiceLossOptions& options, float* gradient) {
    const std::int64_t classes = in.layout.classes;
    const std::int64_t spatial = in.layout.spatial;
    const std::int32_t* labels = in.labels.data<std::int32_t>();
    const double k = static_cast<double>(num_included(classes, options));
    std::vector<float> a(static_cast<std::size_t>(classes), 0.0f);
    std::vector<float> b(static_cast<std::size_t>(classes), 0.0f);
    for (std::int64_t c = 0; c < classes; ++c) {
        if (!is_included(c, options)) continue;
        const auto i = static_cast<std::size_t>(c);
        const double d = total.probability_sum[i] + static_cast<double>(total.label_count[i]) + options.epsilon;
        a[i] = static_cast<float>(-2.0 / (k * d));
        b[i] = static_cast<float>((2.0 * total.intersection[i] + options.epsilon) / (k * d * d));
    }
    const std::int32_t ignore = options.ignore_label.value_or(0);
    const bool has_ignore = options.ignore_label.has_value();

    alignas(64) std::int32_t label_class[k_block];
    alignas(64) float mask[k_block];
    alignas(64) float label_probability[k_block];
    alignas(64) float t[k_block];

    for (std::int64_t n = 0; n < in.layout.batch; ++n) {
        for (std::int64_t s0 = 0; s0 < spatial; s0 += k_block) {
            const std::int64_t len = std::min(k_block, spatial - s0);
            float* g = gradient + n * classes * spatial + s0;  // holds p on entry
            read_labels(labels + n * spatial + s0, len, ignore, has_ignore, label_class, mask);
            for (std::int64_t j = 0; j < len; ++j) {
                label_probability[j] = g[label_class[j] * spatial + j];
                t[j] = a[static_cast<std::size_t>(label_class[j])] * label_probability[j];
            }
            for (std::int64_t c = 0; c < classes; ++c) {
                const float b_c = b[static_cast<std::size_t>(c)];
                const float* p_row = g + c * spatial;
                for (std::int64_t j = 0; j < len; ++j) t[j] += b_c * p_row[j];
            }
            for (std::int64_t c = 0; c < classes; ++c) {
                const float b_c = b[static_cast<std::size_t>(c)];
                float* row = g + c * spatial;
                for (std::int64_t j = 0; j < len; ++j) row[j] = mask[j] * row[j] * (b_c - t[j]);
            }
            for (std::int64_t j = 0; j < len; ++j) {
                g[label_class[j] * spatial + j] +=
                    mask[j] * a[static_cast<std::size_t>(label_class[j])] * label_probability[j];
            }
        }
    }
}

DicePartial empty_partial(std::int64_t classes) {
    DicePartial partial;
    partial.intersection.assign(static_cast<std::size_t>(classes), 0.0);
    partial.probability_sum.assign(static_cast<std::size_t>(classes), 0.0);
    partial.label_count.assign(static_cast<std::size_t>(classes), 0);
    return partial;
}

DicePartial sums_of(const Prepared& prepared, const DiceLossOptions& options, float* probabilities) {
    DicePartial partial = empty_partial(prepared.layout.classes);
    partial.label_count = prepared.tally.per_class;
    partial.num_ignored = prepared.tally.num_ignored;
    for (std::int64_t count : prepared.tally.per_class) partial.num_counted += count;
    softmax_pass(prepared, options, probabilities, &partial);
    return partial;
}

void check_total(const DicePartial& total, std::int64_t classes) {
    TESSERA_CHECK(total.num_classes() == classes && total.probability_sum.size() == total.intersection.size() &&
                      total.label_count.size() == total.intersection.size(),
                  k_name << ": expected summed partials of " << classes << " classes, got " << total.num_classes());
}

}  // namespace

DicePartial& DicePartial::operator+=(const DicePartial& other) {
    if (other.intersection.empty() && other.num_counted == 0 && other.num_ignored == 0) return *this;
    if (intersection.empty()) {
        const std::int64_t counted = num_counted;
        const std::int64_t ignored = num_ignored;
        *this = other;
        num_counted += counted;
        num_ignored += ignored;
        return *this;
    }
    TESSERA_CHECK(other.num_classes() == num_classes(),
                  k_name << ": expected partials of the same number of classes, got " << num_classes() << " and "
                         << other.num_classes());
    for (std::size_t c = 0; c < intersection.size(); ++c) {
        intersection[c] += other.intersection[c];
        probability_sum[c] += other.probability_sum[c];
        label_count[c] += other.label_count[c];
    }
    num_counted += other.num_counted;
    num_ignored += other.num_ignored;
    return *this;
}

DicePartial operator+(DicePartial a, const DicePartial& b) {
    a += b;
    return a;
}

std::vector<double> class_dice(const DicePartial& total, const DiceLossOptions& options) {
    std::vector<double> dice(total.intersection.size(), 0.0);
    for (std::size_t c = 0; c < dice.size(); ++c) {
        const double d = total.probability_sum[c] + static_cast<double>(total.label_count[c]) + options.epsilon;
        dice[c] = (2.0 * total.intersection[c] + options.epsilon) / d;
    }
    return dice;
}

double dice_loss_value(const DicePartial& total, const DiceLossOptions& options) {
    check_options(options, total.num_classes());
    const std::vector<double> dice = class_dice(total, options);
    double sum = 0;
    for (std::size_t c = 0; c < dice.size(); ++c) {
        if (is_included(static_cast<std::int64_t>(c), options)) sum += dice[c];
    }
    const std::int64_t k = num_included(total.num_classes(), options);
    return k > 0 ? 1.0 - sum / static_cast<double>(k) : 0.0;
}

DicePartial dice_loss_partial(const Tensor& logits, const Tensor& labels, const DiceLossOptions& options) {
    const Prepared prepared = prepare(logits, labels, options);
    return sums_of(prepared, options, nullptr);
}

DiceLossResult finish_dice_loss(const DicePartial& total, const Tensor& logits, const Tensor& labels,
                                const DiceLossOptions& options) {
    const Prepared prepared = prepare(logits, labels, options);
    check_total(total, prepared.layout.classes);
    DiceLossResult result;
    result.gradient = Tensor::empty(prepared.logits.shape(), DType::F32);
    softmax_pass(prepared, options, result.gradient.data<float>(), nullptr);
    gradient_pass(prepared, total, options, result.gradient.data<float>());
    result.value = dice_loss_value(total, options);
    result.class_dice = class_dice(total, options);
    result.num_counted = total.num_counted;
    result.num_ignored = total.num_ignored;
    return result;
}

DiceLossResult dice_loss(const Tensor& logits, const Tensor& labels, const DiceLossOptions& options) {
    const Prepared prepared = prepare(logits, labels, options);
    DiceLossResult result;
    result.gradient = Tensor::empty(prepared.logits.shape(), DType::F32);
    const DicePartial total = sums_of(prepared, options, result.gradient.data<float>());
    gradient_pass(prepared, total, options, result.gradient.data<float>());
    result.value = dice_loss_value(total, options);
    result.class_dice = class_dice(total, options);
    result.num_counted = total.num_counted;
    result.num_ignored = total.num_ignored;
    return result;
}

}  // namespace tessera::loss
