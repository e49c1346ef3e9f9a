// TPU compatibility (the detection seed's rules): each rule passing and failing on experiments written as JSON,
// NotApplicable where it does not concern the model, and the text validate prints. Expected details are worked
// out by hand from the files (batch arithmetic in comments), never from the code under test.
#include "experiment/tpu_compatibility.hpp"

#include "core/error.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace tessera;
using experiment::CompatibilityRule;
using experiment::RuleStatus;

namespace {

// A RetinaNet on synthetic shapes, 3 anchors per cell (3 scales × 1 aspect ratio), with `fields` added.
std::string retinanet_with(const std::string& fields) {
    return R"({"version": 1,
               "model": {"kind": "retinanet", "depth": 18, "num_classes": 4, "fpn_channels": 16, "num_anchors": 3},
               "input": {"channels": 3, "size": [256, 256]}, "data": {"source": "synthetic_shapes"}, )" +
           fields + "}";
}

// The "detection" section with the anchors the model needs and `more` fields after them.
std::string detection_section(const std::string& more = "") {
    return R"("detection": {"anchors": {"num_scales": 3, "aspect_ratios": [1.0]})" + more + "}";
}

std::string unet_with(const std::string& fields) {
    return R"({"version": 1, "model": {"kind": "unet", "depth": 3, "base_width": 8, "num_classes": 2},
               "input": {"channels": 1, "size": [64, 64]}, "steps": 1, )" +
           fields + "}";
}

std::vector<CompatibilityRule> rules_of(const std::string& json_text) {
    return experiment::tpu_compatibility(experiment::parse_experiment(json_text, "test.json"));
}

// A copy: callers often look into the rules of a temporary list.
CompatibilityRule find_rule(const std::vector<CompatibilityRule>& rules, const std::string& id) {
    for (const CompatibilityRule& rule : rules) {
        if (rule.id == id) return rule;
    }
    throw std::runtime_error("no rule " + id);
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// What every rule list must keep: the stable ids in order, a title each, and for a Fail its reason and fix
// (a Pass or NotApplicable has nothing to fix).
void expect_well_formed(const std::vector<CompatibilityRule>& rules) {
    const std::vector<std::string> ids{"static_image_shape", "static_box_shape",        "no_hard_example_mining",
                                       "argmax_matcher",     "batch_multiple_of_cores", "warmup_with_large_batch"};
    ASSERT_EQ(rules.size(), ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
        const CompatibilityRule& rule = rules[i];
        EXPECT_EQ(rule.id, ids[i]);
        EXPECT_FALSE(rule.title.empty()) << rule.id;
        EXPECT_FALSE(rule.detail.empty()) << rule.id;
        if (rule.status == RuleStatus::Fail) {
            EXPECT_FALSE(rule.reason.empty()) << rule.id;
            EXPECT_FALSE(rule.fix.empty()) << rule.id;
        } else {
            EXPECT_TRUE(rule.fix.empty()) << rule.id << ": " << rule.fix;
        }
        if (rule.status != RuleStatus::NotApplicable) {
            EXPECT_FALSE(rule.reason.empty()) << rule.id;
        }
    }
}

std::vector<RuleStatus> statuses(const std::vector<CompatibilityRule>& rules) {
    std::vector<RuleStatus> result;
    for (const CompatibilityRule& rule : rules) result.push_back(rule.status);
    return result;
}

constexpr RuleStatus Pass = RuleStatus::Pass;
constexpr RuleStatus Fail = RuleStatus::Fail;
constexpr RuleStatus NotApplicable = RuleStatus::NotApplicable;

}  // namespace

TEST(TpuCompatibility, TheTpuRetinaNetPassesEveryRule) {
    const auto rules = rules_of(
        retinanet_with(R"("global_batch": 2, "steps": 5, )" +
                       detection_section(R"(, "matcher": {"matched_threshold": 0.5, "unmatched_threshold": 0.4})")));
    expect_well_formed(rules);
    EXPECT_EQ(statuses(rules), (std::vector<RuleStatus>{Pass, Pass, Pass, Pass, Pass, Pass}));
    EXPECT_EQ(find_rule(rules, "static_image_shape").detail,
              "synthetic_shapes draws every image at the input size 256×256");
    // Default G = 100 and excess_boxes "error".
    EXPECT_TRUE(contains(find_rule(rules, "static_box_shape").detail, "padded to [100, 4] boxes and [100] classes"));
    EXPECT_TRUE(contains(find_rule(rules, "static_box_shape").detail, "stops with an error naming it"));
    EXPECT_TRUE(contains(find_rule(rules, "no_hard_example_mining").detail, "α 0.25, γ 2"));
    EXPECT_TRUE(find_rule(rules, "argmax_matcher").detail.starts_with("IoU ≥ 0.5 matches, below 0.4 is background"));
    EXPECT_TRUE(contains(find_rule(rules, "argmax_matcher").detail, "one-hot matmul"));
    EXPECT_EQ(find_rule(rules, "batch_multiple_of_cores").detail, "global_batch 2 over 1 replica, 2 per replica");
    EXPECT_EQ(find_rule(rules, "warmup_with_large_batch").detail, "global_batch 2 < 256: warmup optional");
}

TEST(TpuCompatibility, BoxPaddingNamesGAndWhatExcessBoxesDoes) {
    const std::string text =
        R"({"version": 1,
            "model": {"kind": "retinanet", "depth": 18, "num_classes": 4, "fpn_channels": 16, "num_anchors": 3},
            "input": {"channels": 3, "size": [256, 256]}, "global_batch": 2, "steps": 5,
            "data": {"source": "synthetic_shapes", "max_number_of_boxes": 20, "excess_boxes": "keep_largest"}, )" +
        detection_section() + "}";
    const CompatibilityRule& boxes = find_rule(rules_of(text), "static_box_shape");
    EXPECT_EQ(boxes.status, Pass);
    EXPECT_EQ(boxes.detail,
              "every image's ground truth is padded to [20, 4] boxes and [20] classes (G = data.max_number_of_boxes = "
              "20); an image with more than 20 objects keeps its 20 largest (data.excess_boxes \"keep_largest\")");
}

TEST(TpuCompatibility, ABipartiteMatcherFailsWithTheSeedsArgmaxMatcherAsFix) {
    const auto rules = rules_of(retinanet_with(R"("global_batch": 2, "steps": 5, )" +
                                               detection_section(R"(, "matcher": {"kind": "bipartite"})")));
    expect_well_formed(rules);
    EXPECT_EQ(statuses(rules), (std::vector<RuleStatus>{Pass, Pass, Pass, Fail, Pass, Pass}));
    const CompatibilityRule& matcher = find_rule(rules, "argmax_matcher");
    EXPECT_EQ(matcher.detail, "detection.matcher.kind is \"bipartite\"");
    EXPECT_TRUE(contains(matcher.reason, "bipartite matcher is not supported on TPU"));
    EXPECT_TRUE(contains(matcher.fix,
                         R"("matcher": {"kind": "argmax", "matched_threshold": 0.5, "unmatched_threshold": 0.5, )"
                         R"("negatives_lower_than_unmatched": true, "force_match_for_each_row": true})"));
    EXPECT_TRUE(contains(matcher.fix, "use_matmul_gather"));
}

TEST(TpuCompatibility, HardExampleMiningFailsAndTheFocalLossReplacesIt) {
    const auto rules =
        rules_of(retinanet_with(R"("global_batch": 2, "steps": 5, )" +
                                detection_section(R"(, "hard_example_mining": true, "loss": {"focal_alpha": 0.3})")));
    expect_well_formed(rules);
    EXPECT_EQ(statuses(rules), (std::vector<RuleStatus>{Pass, Pass, Fail, Pass, Pass, Pass}));
    const CompatibilityRule& mining = find_rule(rules, "no_hard_example_mining");
    EXPECT_EQ(mining.detail, "detection.hard_example_mining is true");
    EXPECT_TRUE(contains(mining.reason, "non-max suppression"));
    EXPECT_TRUE(contains(mining.fix, "remove \"hard_example_mining\""));
    // The file's own α (0.3) and the default γ (2), and the seed's values.
    EXPECT_TRUE(contains(mining.fix, R"("focal_alpha": 0.3, "focal_gamma": 2)"));
    EXPECT_TRUE(contains(mining.fix, "α 0.25, γ 2"));
    // Off, written explicitly: passes.
    EXPECT_EQ(find_rule(rules_of(retinanet_with(R"("global_batch": 2, "steps": 5, )" +
                                                detection_section(R"(, "hard_example_mining": false)"))),
                        "no_hard_example_mining")
                  .status,
              Pass);
}

TEST(TpuCompatibility, ALargeBatchWithoutWarmupFails) {
    // Cosine without warmup_steps (0), constant (no warmup at all, even with warmup_steps written), and the
    // boundary: 256 is large, 255 is not.
    const std::string cosine =
        R"("schedule": {"kind": "cosine", "learning_rate": 0.04, "total_steps": 25000}, "steps": 1000, )";
    const auto rules = rules_of(retinanet_with(R"("global_batch": 512, )" + cosine + detection_section()));
    expect_well_formed(rules);
    EXPECT_EQ(statuses(rules), (std::vector<RuleStatus>{Pass, Pass, Pass, Pass, Pass, Fail}));
    const CompatibilityRule& warmup = find_rule(rules, "warmup_with_large_batch");
    EXPECT_EQ(warmup.detail, "global_batch 512 ≥ 256 with no warmup (schedule.warmup_steps is 0)");
    EXPECT_TRUE(contains(warmup.reason, "scaled linearly with the batch size"));
    EXPECT_TRUE(
        contains(warmup.fix,
                 R"("kind": "cosine", "learning_rate": 0.04, "warmup_learning_rate": 0.013333, "warmup_steps": 2000, )"
                 R"("total_steps": 25000})"));
    EXPECT_TRUE(contains(warmup.fix, "\"scale_by_batch_size\": true"));
    // 1000 steps × 2000 / 25000 = 80.
    EXPECT_TRUE(contains(warmup.fix, "for this run's 1000 steps, the seed's share (2000 of 25000) is 80 warmup steps"));

    const std::string constant =
        R"("schedule": {"kind": "constant", "learning_rate": 0.04, "warmup_steps": 100}, "steps": 1000, )";
    const CompatibilityRule& constant_rule =
        find_rule(rules_of(retinanet_with(R"("global_batch": 512, )" + constant + detection_section())),
                  "warmup_with_large_batch");
    EXPECT_EQ(constant_rule.status, Fail);
    EXPECT_EQ(constant_rule.detail, "global_batch 512 ≥ 256 with a constant learning rate, which has no warmup");

    EXPECT_EQ(find_rule(rules_of(retinanet_with(R"("global_batch": 256, )" + cosine + detection_section())),
                        "warmup_with_large_batch")
                  .status,
              Fail);
    const CompatibilityRule& small = find_rule(
        rules_of(retinanet_with(R"("global_batch": 255, )" + cosine + detection_section())), "warmup_with_large_batch");
    EXPECT_EQ(small.status, Pass);
    EXPECT_EQ(small.detail, "global_batch 255 < 256: warmup optional");
}

TEST(TpuCompatibility, ALargeBatchWithWarmupPasses) {
    const auto rules = rules_of(retinanet_with(
        R"("global_batch": 512, "steps": 25000,
            "schedule": {"kind": "cosine", "learning_rate": 0.04, "warmup_learning_rate": 0.013333,
                         "warmup_steps": 2000, "total_steps": 25000}, )" +
        detection_section()));
    expect_well_formed(rules);
    EXPECT_EQ(statuses(rules), (std::vector<RuleStatus>{Pass, Pass, Pass, Pass, Pass, Pass}));
    EXPECT_EQ(find_rule(rules, "warmup_with_large_batch").detail, "global_batch 512 with 2000 warmup steps");
    // A manual schedule warms up too.
    const auto manual = rules_of(retinanet_with(
        R"("global_batch": 1024, "steps": 25000,
            "schedule": {"kind": "manual", "learning_rate": 0.04, "warmup_steps": 2000,
                         "boundaries": [{"step": 15000, "learning_rate": 0.004}]}, )" +
        detection_section()));
    EXPECT_EQ(find_rule(manual, "warmup_with_large_batch").status, Pass);
}

TEST(TpuCompatibility, TheBatchMustSplitEvenlyOverTheReplicas) {
    // 8 over 4 replicas of 2 cores: 2 each.
    const std::string text = unet_with(R"("global_batch": 8, "num_replicas": 4, "num_cores_per_replica": 2,
                                          "input_partition_dims": [[1, 2, 1, 1], null],
                                          "data": {"source": "synthetic_em"})");
    experiment::Experiment e = experiment::parse_experiment(text, "test.json");
    const CompatibilityRule even = find_rule(experiment::tpu_compatibility(e), "batch_multiple_of_cores");
    EXPECT_EQ(even.status, Pass);
    EXPECT_EQ(even.detail, "global_batch 8 over 4 replicas, 2 per replica, each split spatially over its 2 cores");

    // The parser refuses an uneven batch; the rule still reports one made in code (the studio's edits):
    // 10 = 4 · 2 + 2, the multiples around it 8 and 12.
    try {
        experiment::parse_experiment(unet_with(R"("global_batch": 10, "num_replicas": 4)"), "test.json");
        ADD_FAILURE() << "global_batch 10 over 4 replicas was accepted";
    } catch (const Error& error) {
        EXPECT_TRUE(contains(error.what(), "global_batch: expected a multiple of num_replicas (4)")) << error.what();
    }
    e.global_batch = 10;
    const auto rules = experiment::tpu_compatibility(e);
    expect_well_formed(rules);
    const CompatibilityRule& uneven = find_rule(rules, "batch_multiple_of_cores");
    EXPECT_EQ(uneven.status, Fail);
    EXPECT_EQ(uneven.detail, "global_batch 10 over 4 replicas leaves 2 over (2 per replica and 2 more)");
    EXPECT_TRUE(contains(uneven.reason, "synchronous SGD"));
    EXPECT_TRUE(contains(uneven.fix, "multiple of num_replicas (4): 8 or 12"));
    // Fewer images than replicas: only the multiple above.
    e.global_batch = 3;
    EXPECT_TRUE(contains(find_rule(experiment::tpu_compatibility(e), "batch_multiple_of_cores").fix, "(4): 4;"));
    e.partition.num_replicas = 0;
    EXPECT_THROW(experiment::tpu_compatibility(e), Error);
}

TEST(TpuCompatibility, AUNetHasNoDetectionRulesAndNamesItsStaticShape) {
    const auto rules = rules_of(unet_with(R"("global_batch": 2, "data": {"source": "synthetic_em"})"));
    expect_well_formed(rules);
    EXPECT_EQ(statuses(rules),
              (std::vector<RuleStatus>{Pass, NotApplicable, NotApplicable, NotApplicable, Pass, Pass}));
    EXPECT_EQ(find_rule(rules, "static_image_shape").detail,
              "synthetic_em: every training example is a patch of the input size 64×64 (data.static_shape \"crop\")");
    EXPECT_EQ(find_rule(rules, "argmax_matcher").detail, "not a detection model: no anchors to match");
    EXPECT_TRUE(find_rule(rules, "static_box_shape").reason.empty());

    const auto resized =
        rules_of(unet_with(R"("global_batch": 2, "data": {"source": "synthetic_em", "static_shape": "resize"})"));
    EXPECT_EQ(find_rule(resized, "static_image_shape").detail,
              "every image is resized to 64×64 (data.static_shape \"resize\", the seed's fixed_shape_resizer)");
    const auto padded =
        rules_of(unet_with(R"("global_batch": 2, "data": {"source": "synthetic_em", "static_shape": "pad_to_max"})"));
    EXPECT_TRUE(contains(find_rule(padded, "static_image_shape").detail,
                         "keep_aspect_ratio_resizer with pad_to_max_dimension: true"));
}

TEST(TpuCompatibility, APlanOnlyExperimentHasNoInputPipelineToCheck) {
    // A plan-only RetinaNet with a bipartite matcher: the data rules do not apply, the matcher rule still fails.
    const auto rules = rules_of(
        R"({"version": 1,
            "model": {"kind": "retinanet", "depth": 18, "num_classes": 4, "fpn_channels": 16, "num_anchors": 3},
            "input": {"channels": 3, "size": [256, 256]}, "global_batch": 2, )" +
        detection_section(R"(, "matcher": {"kind": "bipartite"})") + "}");
    expect_well_formed(rules);
    EXPECT_EQ(statuses(rules), (std::vector<RuleStatus>{NotApplicable, NotApplicable, Pass, Fail, Pass, Pass}));
    EXPECT_TRUE(contains(find_rule(rules, "static_image_shape").detail, "plan-only"));
}

TEST(TpuCompatibility, TheTextCountsTheRulesAndGivesEachFailsReasonAndFix) {
    const auto rules = rules_of(retinanet_with(R"("global_batch": 2, "steps": 5, )" +
                                               detection_section(R"(, "matcher": {"kind": "bipartite"})")));
    const std::string text = experiment::format_tpu_compatibility(rules);
    EXPECT_TRUE(text.starts_with("TPU compatibility (the detection seed's rules): 5 pass, 1 fail, 0 not applicable\n"))
        << text;
    // Ids padded to the longest ("batch_multiple_of_cores", 23 characters) plus two spaces.
    EXPECT_TRUE(contains(text,
                         "\n  FAIL  argmax_matcher           Argmax matcher: detection.matcher.kind is \"bipartite\"\n"
                         "        why: the bipartite matcher is not supported on TPU"))
        << text;
    EXPECT_TRUE(contains(text, "\n        fix: set \"detection\": {\"matcher\": {\"kind\": \"argmax\"")) << text;
    EXPECT_TRUE(contains(text, "\n  pass  static_image_shape       Images at one static shape: synthetic_shapes draws"))
        << text;
    EXPECT_TRUE(text.ends_with("\n"));
    // One "why:" and one "fix:" (the one Fail), and no line a script would count as validate's "ok".
    EXPECT_EQ(text.find("why:"), text.rfind("why:"));
    EXPECT_EQ(text.find("fix:"), text.rfind("fix:"));
    EXPECT_FALSE(contains(text, "\nok"));

    const std::string unet = experiment::format_tpu_compatibility(
        rules_of(unet_with(R"("global_batch": 2, "data": {"source": "synthetic_em"})")));
    EXPECT_TRUE(contains(unet, ": 3 pass, 0 fail, 3 not applicable\n")) << unet;
    EXPECT_TRUE(contains(unet, "\n  n/a   argmax_matcher ")) << unet;
    EXPECT_FALSE(contains(unet, "why:"));
}
