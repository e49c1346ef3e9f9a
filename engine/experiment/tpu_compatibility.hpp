// TPU compatibility: whether an experiment follows the detection seed's "TPU compatible detection pipelines"
// (TensorFlow Object Detection API) — static shapes, TPU-friendly ops, and the hyperparameters of large-batch
// synchronous SGD. Each rule says what it found, why the rule exists and, when it fails, how to fix the file.
// `tessera-cli validate` prints the rules after its own checks; the studio shows them beside the experiment.
//
//   const Experiment e = load_experiment("resources/experiments/retinanet_shapes_4way.json");
//   std::vector<CompatibilityRule> rules = tpu_compatibility(e);   // rules[i].status, .detail, .reason, .fix
//   std::printf("%s", format_tpu_compatibility(rules).c_str());
//
// The rules, in this order (ids are stable: tests and the studio refer to them):
//   static_image_shape       images reach the cores at one static shape (drawn, cropped, resized or padded)
//   static_box_shape         detection: ground truth padded to max_number_of_boxes
//   no_hard_example_mining   detection: hard-example mining needs NMS, which the TPU lacks; the focal loss instead
//   argmax_matcher           detection: the bipartite matcher is not supported on TPU; the argmax matcher is
//   batch_multiple_of_cores  global_batch splits evenly over the replicas (synchronous SGD)
//   warmup_with_large_batch  a global batch of 256 or more warms its learning rate up
// A rule that does not concern the experiment (a detection rule for a U-Net, the data rules of a plan-only
// experiment) is NotApplicable. A Fail is advice about real TPU hardware: Tessera's simulated cores may still
// run the experiment (validate's exit status is decided by its own checks, see app/cli_run.cpp).
#pragma once

#include "experiment/experiment.hpp"

#include <string>
#include <vector>

namespace tessera::experiment {

enum class RuleStatus { Pass, Fail, NotApplicable };

struct CompatibilityRule {
    std::string id;     // "argmax_matcher"
    std::string title;  // "Argmax matcher"
    RuleStatus status = RuleStatus::NotApplicable;
    std::string detail;  // what this experiment does: "detection.matcher.kind is \"bipartite\""
    std::string reason;  // why the rule exists (the seed's words); set for every rule that applies
    std::string fix;     // what to change in the file; set when status is Fail, empty otherwise
};

// The rules above for `experiment`, in that order. Throws tessera::Error for an experiment no parser
// produces (num_replicas < 1).
std::vector<CompatibilityRule> tpu_compatibility(const Experiment& experiment);

// The text validate prints, one rule a line after a count, "why:" and "fix:" lines under each Fail:
//   TPU compatibility (the detection seed's rules): 5 pass, 1 fail, 0 not applicable
//     pass  static_image_shape       Images at one static shape: synthetic_shapes draws every image at the input size
//     256×256 FAIL  argmax_matcher           Argmax matcher: detection.matcher.kind is "bipartite"
//           why: …
//           fix: …
// Ends with a newline; no line starts with "ok" (scripts count validate's "ok    " lines).
std::string format_tpu_compatibility(const std::vector<CompatibilityRule>& rules);

}  // namespace tessera::experiment
