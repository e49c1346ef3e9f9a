// RetinaNet (ResNet-18 FPN) on 512² synthetic shapes split 2×2 over 4 simulated cores: how far the
// held-out COCO mAP gets within a time budget on this host (the detection issue's "stated mAP in
// ≤ 15 minutes").
//
// Usage: bm_detector_shapes [--experiment <file>] [--budget-minutes 15] [--model-dir <dir>] [--threads 2]
// The held-out images are the dataset's own eval images (another seed), never trained on. Prints one line
// per evaluation and a summary (budget_run.hpp):
//   eval step=<n> elapsed_s=<s> ap=<x> ap50=<x> ap75=<x> ar100=<x> detections=<n> matched=<n> objects=<n> loss=<x> eval_s=<s>
//   result best_ap50=<x> at_step=<n> elapsed_s=<s> budget_s=<s> steps=<n> steps_per_second=<r>
// The model_dir it leaves behind opens in the studio (`tessera --open-run <dir>`).
#include "budget_run.hpp"

#include <string>

using namespace tessera;

int main(int argc, char** argv) {
    bench::BudgetOptions options;
    options.experiment_path = std::string(TESSERA_SOURCE_DIR) + "/resources/experiments/retinanet_shapes_4way.json";
    options.model_dir = (std::filesystem::temp_directory_path() / "tessera_bm_detector_shapes").string();
    options.score_name = "ap50";
    options.score = [](const run::EvalRecord& e) {
        const run::DetectionEvalRecord& d = e.detection;
        char fields[256];
        std::snprintf(fields, sizeof fields, "ap=%.4f ap50=%.4f ap75=%.4f ar100=%.4f detections=%lld matched=%lld objects=%lld", d.ap,
                      d.ap50, d.ap75, d.ar100, static_cast<long long>(d.num_detections), static_cast<long long>(d.num_true_positives),
                      static_cast<long long>(d.num_ground_truth));
        return bench::BudgetScore{d.ap50, fields};
    };
    bench::read_budget_arguments(argc, argv, options);
    return bench::run_within_budget(options, "bm_detector_shapes");
}
