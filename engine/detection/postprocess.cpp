#include "detection/postprocess.hpp"

#include "core/error.hpp"
#include "detection/nms.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace tessera::detection {

namespace {

constexpr const char* k_name = "postprocess_detections";

void check_options(const PostprocessOptions& options) {
    TESSERA_CHECK(options.score_threshold >= 0.0f && options.score_threshold <= 1.0f,
                  k_name << ": expected a score threshold in [0, 1], got " << options.score_threshold);
    TESSERA_CHECK(options.nms_iou_threshold >= 0.0f && options.nms_iou_threshold <= 1.0f,
                  k_name << ": expected an NMS IoU threshold in [0, 1], got " << options.nms_iou_threshold);
}

std::string map_to_string(std::int64_t height, std::int64_t width) {
    return std::to_string(height) + " × " + std::to_string(width);
}

// Checks one head output of one level: [N, channels, H_l, W_l] f32 with the level's feature-map size.
void check_level_output(const Tensor& output, const char* what, const char* channel_form, const LevelAnchors& level,
                        const AnchorSet& anchors) {
    TESSERA_CHECK(
        output.is_defined() && output.rank() == 4 && output.dtype() == DType::F32,
        k_name << ": expected the " << what << " of level " << level.level << " as [N, " << channel_form
               << ", H, W] f32, got "
               << (output.is_defined() ? shape_to_string(output.shape()) + " " + std::string(dtype_name(output.dtype()))
                                       : std::string("an undefined tensor")));
    TESSERA_CHECK(output.dim(2) == level.height && output.dim(3) == level.width,
                  k_name << ": expected the " << what << " of level " << level.level << " to have a "
                         << map_to_string(level.height, level.width) << " feature map (stride " << level.stride
                         << " on the anchors' " << map_to_string(anchors.image_height, anchors.image_width)
                         << " input), got " << map_to_string(output.dim(2), output.dim(3)) << " (shape "
                         << shape_to_string(output.shape()) << "); make the anchors for the network's input size");
}

// Validates everything and returns K, the number of classes.
std::int64_t check_inputs(const std::vector<Tensor>& class_outputs, const std::vector<Tensor>& box_outputs,
                          const AnchorSet& anchors) {
    const std::size_t num_levels = anchors.levels.size();
    TESSERA_CHECK(num_levels > 0, k_name << ": expected an anchor set with at least one level, got none");
    TESSERA_CHECK(class_outputs.size() == num_levels && box_outputs.size() == num_levels,
                  k_name << ": expected one class output and one box output per anchor level (" << num_levels
                         << ", levels " << anchors.levels.front().level << ".." << anchors.levels.back().level
                         << "), got " << class_outputs.size() << " class and " << box_outputs.size() << " box outputs");
    std::int64_t total_anchors = 0;
    for (const LevelAnchors& level : anchors.levels) total_anchors += level.count();
    TESSERA_CHECK(total_anchors == anchors.count(), k_name << ": expected an anchor set whose levels hold its "
                                                           << anchors.count() << " boxes, got levels of "
                                                           << total_anchors << " anchors (build it with make_anchors)");

    std::int64_t batch_size = -1, num_classes = -1;
    for (std::size_t index = 0; index < num_levels; ++index) {
        const LevelAnchors& level = anchors.levels[index];
        const std::int64_t anchors_per_cell = level.anchors_per_cell();
        const Tensor& classes = class_outputs[index];
        const Tensor& boxes = box_outputs[index];
        check_level_output(classes, "class output", "A·K", level, anchors);
        check_level_output(boxes, "box output", "A·4", level, anchors);
        if (batch_size < 0) batch_size = classes.dim(0);
        TESSERA_CHECK(classes.dim(0) == batch_size && boxes.dim(0) == batch_size,
                      k_name << ": expected batch size " << batch_size << " (level " << anchors.levels.front().level
                             << "'s) on every output, got " << classes.dim(0) << " class and " << boxes.dim(0)
                             << " box rows at level " << level.level);
        TESSERA_CHECK(classes.dim(1) > 0 && classes.dim(1) % anchors_per_cell == 0,
                      k_name << ": expected the class output of level " << level.level
                             << " to have A·K channels with A = " << anchors_per_cell << " anchors per cell, got "
                             << classes.dim(1) << " channels (not a positive multiple of " << anchors_per_cell << ")");
        const std::int64_t level_classes = classes.dim(1) / anchors_per_cell;
        if (num_classes < 0) num_classes = level_classes;
        TESSERA_CHECK(level_classes == num_classes,
                      k_name << ": expected K = " << num_classes << " classes (level " << anchors.levels.front().level
                             << "'s) on every level, got " << level_classes << " at level " << level.level << " ("
                             << classes.dim(1) << " channels / " << anchors_per_cell << " anchors per cell)");
        TESSERA_CHECK(boxes.dim(1) == anchors_per_cell * 4,
                      k_name << ": expected the box output of level " << level.level
                             << " to have A·4 = " << anchors_per_cell * 4 << " channels (A = " << anchors_per_cell
                             << "), got " << boxes.dim(1));
    }
    return num_classes;
}

float sigmoid(float logit) {
    return 1.0f / (1.0f + std::exp(-logit));
}

// A logit bound below which sigmoid(x) > threshold is impossible, so the loop skips exp for the (usually
// overwhelming) background. sigmoid(x) > t ⇔ x > logit(t) in exact arithmetic; the f32 sigmoid is off by
// a few ulps, i.e. ~5e-7·t in the score or ~5e-7 / (1 − t) in the logit, and the margin covers that.
float logit_lower_bound(float threshold) {
    if (threshold <= 0.0f) return -std::numeric_limits<float>::infinity();
    if (threshold >= 1.0f) return std::numeric_limits<float>::infinity();
    const double t = threshold;
    return static_cast<float>(std::log(t / (1.0 - t)) - 1e-3 - 1e-6 / (1.0 - t));
}

struct Candidate {
    float score = 0;
    std::int64_t flat_index = 0;  // ((row·W + column)·A + anchor)·K + class, within the level
};

// Higher score first; equal scores by lower flat index (a strict total order on distinct indices).
bool ranks_before(const Candidate& a, const Candidate& b) {
    return a.score > b.score || (a.score == b.score && a.flat_index < b.flat_index);
}

// The best `capacity` candidates offered so far. Holds at most 2·capacity: when full, it keeps the best
// half (nth_element, linear) and from then on refuses anything ranking after the worst one kept.
class TopCandidates {
public:
    explicit TopCandidates(std::size_t capacity)
        : m_capacity(capacity),
          m_shrink_size(capacity > std::numeric_limits<std::size_t>::max() / 2 ? std::numeric_limits<std::size_t>::max()
                                                                               : 2 * capacity) {}

    void offer(float score, std::int64_t flat_index) {
        const Candidate candidate{score, flat_index};
        if (m_capacity == 0 || (m_has_worst_kept && !ranks_before(candidate, m_worst_kept))) return;
        m_candidates.push_back(candidate);
        if (m_candidates.size() >= m_shrink_size) shrink();
    }

    std::vector<Candidate> take_sorted() {
        shrink();
        std::sort(m_candidates.begin(), m_candidates.end(), ranks_before);
        return std::move(m_candidates);
    }

private:
    void shrink() {
        if (m_candidates.size() <= m_capacity) return;
        const auto last_kept = m_candidates.begin() + static_cast<std::ptrdiff_t>(m_capacity - 1);
        std::nth_element(m_candidates.begin(), last_kept, m_candidates.end(), ranks_before);
        m_worst_kept = *last_kept;
        m_has_worst_kept = true;
        m_candidates.resize(m_capacity);
    }

    std::size_t m_capacity;
    std::size_t m_shrink_size;
    std::vector<Candidate> m_candidates;
    Candidate m_worst_kept;
    bool m_has_worst_kept = false;
};

Box clip_to_image(const Box& box, float image_width, float image_height) {
    return {std::clamp(box.x_min, 0.0f, image_width), std::clamp(box.y_min, 0.0f, image_height),
            std::clamp(box.x_max, 0.0f, image_width), std::clamp(box.y_max, 0.0f, image_height)};
}

bool has_nan(const Box& box) {
    return std::isnan(box.x_min) || std::isnan(box.y_min) || std::isnan(box.x_max) || std::isnan(box.y_max);
}

}  // namespace

std::vector<std::vector<ScoredBox>> postprocess_detections(const std::vector<Tensor>& class_outputs,
                                                           const std::vector<Tensor>& box_outputs,
                                                           const AnchorSet& anchors,
                                                           const PostprocessOptions& options) {
    check_options(options);
    const std::int64_t num_classes = check_inputs(class_outputs, box_outputs, anchors);
    const std::int64_t batch_size = class_outputs.front().dim(0);
    std::vector<Tensor> dense_classes, dense_boxes;  // contiguous views (copies only of strided inputs)
    for (std::size_t index = 0; index < anchors.levels.size(); ++index) {
        dense_classes.push_back(class_outputs[index].contiguous());
        dense_boxes.push_back(box_outputs[index].contiguous());
    }
    const float logit_bound = logit_lower_bound(options.score_threshold);
    const auto image_width = static_cast<float>(anchors.image_width);
    const auto image_height = static_cast<float>(anchors.image_height);

    std::vector<std::vector<ScoredBox>> detections(static_cast<std::size_t>(batch_size));
    for (std::int64_t image = 0; image < batch_size; ++image) {
        std::vector<ScoredBox> candidates;  // all levels, each level's by rank
        for (std::size_t index = 0; index < anchors.levels.size(); ++index) {
            const LevelAnchors& level = anchors.levels[index];
            const std::int64_t num_cells = level.height * level.width;
            const std::int64_t anchors_per_cell = level.anchors_per_cell();
            const std::int64_t channels = anchors_per_cell * num_classes;                             // A·K
            const float* logits = dense_classes[index].data<float>() + image * channels * num_cells;  // [A·K, H·W]
            const float* codes = dense_boxes[index].data<float>() + image * anchors_per_cell * 4 * num_cells;

            // Channel-major, the order of memory; the flat index puts the cell first.
            TopCandidates top(options.top_k_per_level);
            for (std::int64_t channel = 0; channel < channels; ++channel) {
                const float* channel_logits = logits + channel * num_cells;  // [H·W]
                for (std::int64_t cell = 0; cell < num_cells; ++cell) {
                    const float logit = channel_logits[cell];
                    if (!(logit > logit_bound)) continue;
                    const float score = sigmoid(logit);
                    if (score > options.score_threshold) top.offer(score, cell * channels + channel);
                }
            }

            for (const Candidate& candidate : top.take_sorted()) {
                const std::int64_t cell = candidate.flat_index / channels;
                const std::int64_t channel = candidate.flat_index % channels;
                const std::int64_t anchor = channel / num_classes;
                const float* anchor_codes = codes + anchor * 4 * num_cells + cell;  // channels a·4 + c, stride H·W
                const BoxCode code{anchor_codes[0], anchor_codes[num_cells], anchor_codes[2 * num_cells],
                                   anchor_codes[3 * num_cells]};
                const Box& anchor_box =
                    anchors.boxes[static_cast<std::size_t>(level.first_index + cell * anchors_per_cell + anchor)];
                const Box box =
                    clip_to_image(decode_box(code, anchor_box, options.box_coder_weights), image_width, image_height);
                TESSERA_CHECK(!has_nan(box), k_name << ": the box codes (" << code.dx << ", " << code.dy << ", "
                                                    << code.dw << ", " << code.dh << ") of image " << image
                                                    << ", level " << level.level << ", cell (" << cell / level.width
                                                    << ", " << cell % level.width << "), anchor " << anchor
                                                    << " decode to NaN; expected finite box outputs");
                candidates.push_back({box, static_cast<std::int32_t>(channel % num_classes), candidate.score});
            }
        }

        const std::vector<std::size_t> kept = batched_non_maximum_suppression(
            candidates, {.iou_threshold = options.nms_iou_threshold, .max_detections = options.max_detections});
        std::vector<ScoredBox>& image_detections = detections[static_cast<std::size_t>(image)];
        image_detections.reserve(kept.size());
        for (std::size_t index : kept) image_detections.push_back(candidates[index]);
    }
    return detections;
}

}  // namespace tessera::detection
