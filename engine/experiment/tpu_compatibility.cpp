#include "experiment/tpu_compatibility.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <sstream>

namespace tessera::experiment {

namespace {

// From this global batch on a run counts as large-batch: the batch the linear learning-rate scaling rule
// is stated against (Goyal et al.; train::ScheduleConfig's reference_batch_size), below the seed's TPU
// batches (64 per 8 cores and up to 1024).
constexpr std::int64_t k_large_batch = 256;

// The seed's cosine_decay_learning_rate example: 2000 of 25000 steps warm up.
constexpr std::int64_t k_seed_warmup_steps = 2000;
constexpr std::int64_t k_seed_total_steps = 25000;

std::string extents_text(const std::vector<std::int64_t>& extents) {
    std::string text;
    for (std::size_t i = 0; i < extents.size(); ++i) text.append(i ? "×" : "").append(std::to_string(extents[i]));
    return text;
}

// data.source as the file writes it.
std::string_view source_json_name(data::SourceKind kind) {
    switch (kind) {
        case data::SourceKind::SyntheticEm:
            return "synthetic_em";
        case data::SourceKind::SyntheticCt:
            return "synthetic_ct";
        case data::SourceKind::FakeImages:
            return "fake_images";
        case data::SourceKind::Folder:
            return "folder";
        case data::SourceKind::ExampleMri:
            return "example_mri";
        case data::SourceKind::SyntheticShapes:
            return "synthetic_shapes";
        case data::SourceKind::Coco:
            return "coco";
        case data::SourceKind::TFRecord:
            return "tfrecord";
        case data::SourceKind::Volume:
            return "volume";
    }
    TESSERA_FAIL("data source " << static_cast<int>(kind) << " has no name");
}

std::string_view status_label(RuleStatus status) {
    switch (status) {
        case RuleStatus::Pass:
            return "pass";
        case RuleStatus::Fail:
            return "FAIL";
        case RuleStatus::NotApplicable:
            return "n/a ";
    }
    TESSERA_FAIL("rule status " << static_cast<int>(status) << " is not one");
}

CompatibilityRule not_applicable(std::string id, std::string title, std::string detail) {
    return {std::move(id), std::move(title), RuleStatus::NotApplicable, std::move(detail), {}, {}};
}

const char* const k_plan_only = "plan-only (no \"data\" section): no input pipeline to check";

CompatibilityRule static_image_shape(const Experiment& e) {
    CompatibilityRule rule{"static_image_shape", "Images at one static shape", RuleStatus::Pass, {}, {}, {}};
    if (!e.data) return not_applicable(rule.id, rule.title, k_plan_only);
    rule.reason = "TPU training requires every tensor of the graph to have a static shape, the input images included";
    const std::string input = extents_text(e.size);
    const data::DataConfig& d = *e.data;
    if (d.source == data::SourceKind::SyntheticShapes) {
        rule.detail = std::string(source_json_name(d.source)) + " draws every image at the input size " + input;
        return rule;
    }
    if (d.source == data::SourceKind::Coco) {
        // COCO's images come in many sizes; the resizer, and the jitter's crop or pad, make them one.
        rule.detail =
            d.static_shape == data::StaticShape::Resize
                ? "coco: every image is resized to " + input +
                      " (data.static_shape \"resize\", the seed's fixed_shape_resizer)"
                : "coco: every image keeps its aspect ratio, is scaled to fit " + input +
                      " and padded with zeros at the bottom and right (data.static_shape \"pad_to_max\", the seed's "
                      "keep_aspect_ratio_resizer with pad_to_max_dimension: true)";
        if (d.scale_jitter != std::array<double, 2>{1, 1}) {
            std::ostringstream jitter;
            jitter << "; training images are then scaled by " << d.scale_jitter[0] << "–" << d.scale_jitter[1]
                   << " and cropped or zero-padded back to " << input << " (data.scale_jitter)";
            rule.detail += jitter.str();
        }
        return rule;
    }
    switch (d.static_shape) {
        case data::StaticShape::Crop:
            rule.detail = std::string(source_json_name(d.source)) +
                          ": every training example is a patch of the input size " + input +
                          " (data.static_shape \"crop\")";
            return rule;
        case data::StaticShape::Resize:
            rule.detail = "every image is resized to " + input +
                          " (data.static_shape \"resize\", the seed's fixed_shape_resizer)";
            return rule;
        case data::StaticShape::PadToMax:
            rule.detail = "every image keeps its aspect ratio, is scaled to fit " + input +
                          " and padded with zeros at the end (data.static_shape \"pad_to_max\", the seed's "
                          "keep_aspect_ratio_resizer with pad_to_max_dimension: true)";
            return rule;
    }
    TESSERA_FAIL("data.static_shape " << static_cast<int>(d.static_shape) << " is not one");
}

CompatibilityRule static_box_shape(const Experiment& e) {
    CompatibilityRule rule{"static_box_shape", "Ground truth at one static shape", RuleStatus::Pass, {}, {}, {}};
    if (e.model.kind != ModelKind::RetinaNet)
        return not_applicable(rule.id, rule.title, "not a detection model: no boxes");
    if (!e.data) return not_applicable(rule.id, rule.title, k_plan_only);
    rule.reason =
        "images hold different numbers of objects; padding every image's boxes and classes with zeros to "
        "max_number_of_boxes gives the ground truth a static shape (the seed's max_number_of_boxes with "
        "unpad_groundtruth_tensors: false)";
    const data::DataConfig& d = *e.data;
    const std::string g = std::to_string(d.max_number_of_boxes);
    std::string excess;
    switch (d.excess_boxes) {
        case data::ExcessBoxes::Error:
            excess = "stops with an error naming it (data.excess_boxes \"error\")";
            break;
        case data::ExcessBoxes::KeepLargest:
            excess = "keeps its " + g + " largest (data.excess_boxes \"keep_largest\")";
            break;
        case data::ExcessBoxes::KeepFirst:
            excess = "keeps its first " + g + " (data.excess_boxes \"keep_first\")";
            break;
    }
    rule.detail = "every image's ground truth is padded to [" + g + ", 4] boxes and [" + g +
                  "] classes (G = data.max_number_of_boxes = " + g + "); an image with more than " + g + " objects " +
                  excess;
    return rule;
}

CompatibilityRule no_hard_example_mining(const Experiment& e) {
    CompatibilityRule rule{"no_hard_example_mining", "No hard-example mining", RuleStatus::Pass, {}, {}, {}};
    if (e.model.kind != ModelKind::RetinaNet)
        return not_applicable(rule.id, rule.title, "not a detection model: no anchors to sample");
    rule.reason =
        "hard-example mining uses non-max suppression as a subroutine, and non-max suppression is not "
        "supported on TPU";
    const loss::FocalLossOptions& focal = e.detection.detector.loss.focal;
    std::ostringstream focal_text;
    focal_text << "α " << focal.alpha << ", γ " << focal.gamma;
    if (!e.detection.hard_example_mining) {
        rule.detail = "the focal loss (" + focal_text.str() + ") balances positive and negative anchors";
        return rule;
    }
    rule.status = RuleStatus::Fail;
    rule.detail = "detection.hard_example_mining is true";
    std::ostringstream fix;
    fix << "remove \"hard_example_mining\" from \"detection\": the focal loss replaces it (here " << focal_text.str()
        << ", set by \"detection\": {\"loss\": {\"focal_alpha\": " << focal.alpha
        << ", \"focal_gamma\": " << focal.gamma << "}}; the seed's weighted_sigmoid_focal uses α 0.25, γ 2)";
    rule.fix = fix.str();
    return rule;
}

CompatibilityRule argmax_matcher(const Experiment& e) {
    CompatibilityRule rule{"argmax_matcher", "Argmax matcher", RuleStatus::Pass, {}, {}, {}};
    if (e.model.kind != ModelKind::RetinaNet)
        return not_applicable(rule.id, rule.title, "not a detection model: no anchors to match");
    rule.reason =
        "the bipartite matcher is not supported on TPU (its assignment has no static-shaped form); the argmax "
        "matcher is";
    const detection::MatcherOptions& m = e.detection.detector.labeler.matcher;
    if (e.detection.matcher == MatcherKind::Argmax) {
        std::ostringstream detail;
        detail
            << "IoU ≥ " << m.matched_threshold << " matches, below " << m.unmatched_threshold << " is background"
            << (m.force_match_for_each_row ? ", every box forces its best anchor" : "")
            << "; the matched boxes and classes are gathered by a one-hot matmul (the seed's use_matmul_gather: true)";
        rule.detail = detail.str();
        return rule;
    }
    rule.status = RuleStatus::Fail;
    rule.detail = "detection.matcher.kind is \"bipartite\"";
    rule.fix =
        "set \"detection\": {\"matcher\": {\"kind\": \"argmax\", \"matched_threshold\": 0.5, \"unmatched_threshold\": "
        "0.5, "
        "\"negatives_lower_than_unmatched\": true, \"force_match_for_each_row\": true}} (the seed's argmax_matcher); "
        "Tessera always gathers by one-hot matmul, as the seed's use_matmul_gather: true";
    return rule;
}

CompatibilityRule batch_multiple_of_cores(const Experiment& e) {
    CompatibilityRule rule{
        "batch_multiple_of_cores", "Batch split evenly over the replicas", RuleStatus::Pass, {}, {}, {}};
    const std::int64_t replicas = e.partition.num_replicas;
    const std::int64_t cores_per_replica = e.partition.num_cores_per_replica;
    TESSERA_CHECK(replicas >= 1,
                  e.origin << ": expected num_replicas ≥ 1, got " << replicas << "; set \"num_replicas\": 1 or more");
    rule.reason =
        "TPU training is synchronous SGD: every replica takes the same static share of global_batch (the seed "
        "recommends batches 8× a GPU config's on 8 cores, the largest that fits)";
    const std::int64_t per_replica = e.global_batch / replicas;
    const std::int64_t left_over = e.global_batch % replicas;
    const std::string over = "global_batch " + std::to_string(e.global_batch) + " over " + std::to_string(replicas) +
                             (replicas == 1 ? " replica" : " replicas");
    if (left_over == 0) {
        rule.detail = over + ", " + std::to_string(per_replica) + " per replica";
        if (cores_per_replica > 1) {
            rule.detail += ", each split spatially over its " + std::to_string(cores_per_replica) + " cores";
        }
        return rule;
    }
    rule.status = RuleStatus::Fail;
    rule.detail = over + " leaves " + std::to_string(left_over) + " over (" + std::to_string(per_replica) +
                  " per replica and " + std::to_string(left_over) + " more)";
    const std::int64_t below = per_replica * replicas;
    const std::int64_t above = below + replicas;
    rule.fix = "set \"global_batch\" to a multiple of num_replicas (" + std::to_string(replicas) +
               "): " + (below > 0 ? std::to_string(below) + " or " : std::string()) + std::to_string(above) +
               "; on a TPU, the largest multiple that fits in memory";
    return rule;
}

CompatibilityRule warmup_with_large_batch(const Experiment& e) {
    CompatibilityRule rule{
        "warmup_with_large_batch", "Learning-rate warmup with a large batch", RuleStatus::Pass, {}, {}, {}};
    rule.reason =
        "large TPU batches train in fewer steps with a large learning rate, scaled linearly with the batch size, "
        "which needs a warmup to start stably (the seed's TPU training hyperparameters)";
    const train::ScheduleConfig& schedule = e.training.schedule;
    const std::string batch = "global_batch " + std::to_string(e.global_batch);
    if (e.global_batch < k_large_batch) {
        rule.detail = batch + " < " + std::to_string(k_large_batch) + ": warmup optional";
        return rule;
    }
    const bool constant = schedule.kind == train::ScheduleKind::Constant;
    if (!constant && schedule.warmup_steps > 0) {
        rule.detail = batch + " with " + std::to_string(schedule.warmup_steps) + " warmup steps";
        return rule;
    }
    rule.status = RuleStatus::Fail;
    rule.detail = batch + " ≥ " + std::to_string(k_large_batch) +
                  (constant ? std::string(" with a constant learning rate, which has no warmup")
                            : std::string(" with no warmup (schedule.warmup_steps is 0)"));
    std::ostringstream fix;
    fix << "warm the learning rate up, e.g. the seed's cosine_decay_learning_rate: \"schedule\": {\"kind\": "
           "\"cosine\", "
           "\"learning_rate\": 0.04, \"warmup_learning_rate\": 0.013333, \"warmup_steps\": "
        << k_seed_warmup_steps << ", \"total_steps\": " << k_seed_total_steps
        << "}; scale the learning rates linearly with the batch size (\"scale_by_batch_size\": true, with "
           "\"reference_batch_size\" the batch they were tuned for)";
    const std::int64_t steps = e.training.steps;
    if (steps > 0 && steps < k_seed_total_steps) {
        fix << "; for this run's " << steps << " steps, the seed's share (" << k_seed_warmup_steps << " of "
            << k_seed_total_steps << ") is "
            << std::max<std::int64_t>(1, steps * k_seed_warmup_steps / k_seed_total_steps) << " warmup steps";
    }
    rule.fix = fix.str();
    return rule;
}

}  // namespace

std::vector<CompatibilityRule> tpu_compatibility(const Experiment& experiment) {
    return {static_image_shape(experiment), static_box_shape(experiment),        no_hard_example_mining(experiment),
            argmax_matcher(experiment),     batch_multiple_of_cores(experiment), warmup_with_large_batch(experiment)};
}

std::string format_tpu_compatibility(const std::vector<CompatibilityRule>& rules) {
    std::size_t passed = 0, failed = 0, not_applicable_count = 0, id_width = 0;
    for (const CompatibilityRule& rule : rules) {
        passed += rule.status == RuleStatus::Pass;
        failed += rule.status == RuleStatus::Fail;
        not_applicable_count += rule.status == RuleStatus::NotApplicable;
        id_width = std::max(id_width, rule.id.size());
    }
    std::ostringstream text;
    text << "TPU compatibility (the detection seed's rules): " << passed << " pass, " << failed << " fail, "
         << not_applicable_count << " not applicable\n";
    for (const CompatibilityRule& rule : rules) {
        text << "  " << status_label(rule.status) << "  " << rule.id << std::string(id_width - rule.id.size() + 2, ' ')
             << rule.title;
        if (!rule.detail.empty()) text << ": " << rule.detail;
        text << "\n";
        if (rule.status != RuleStatus::Fail) continue;
        text << "        why: " << rule.reason << "\n";
        text << "        fix: " << rule.fix << "\n";
    }
    return text.str();
}

}  // namespace tessera::experiment
