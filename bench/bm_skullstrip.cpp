// Skull-stripping the real head MRI (Debian's insighttoolkit5-examples) with a 3D U-Net split 2×2×2
// over 8 simulated cores: how far the held-out Dice gets within a time budget on this host.
//
// Usage: bm_skullstrip [--experiment <file>] [--budget-minutes 15] [--model-dir <dir>] [--threads 2]
// The held-out slab is the last quarter of the slices, never sampled for training. Prints one line per
// evaluation and a summary (budget_run.hpp):
//   eval step=<n> elapsed_s=<s> dice_brain=<d> mean_dice=<d> loss=<x> eval_s=<s>
//   result best_dice_brain=<d> at_step=<n> elapsed_s=<s> budget_s=<s> steps=<n> steps_per_second=<r>
#include "budget_run.hpp"

#include <string>

using namespace tessera;

int main(int argc, char** argv) {
    bench::BudgetOptions options;
    options.experiment_path = std::string(TESSERA_SOURCE_DIR) + "/resources/experiments/unet3d_mri_skullstrip.json";
    options.model_dir = (std::filesystem::temp_directory_path() / "tessera_bm_skullstrip").string();
    options.score_name = "dice_brain";
    options.score = [](const run::EvalRecord& e) {
        double brain = 0;
        for (const auto& c : e.classes) {
            if (c.name == "brain") brain = c.dice;
        }
        char fields[128];
        std::snprintf(fields, sizeof fields, "dice_brain=%.4f mean_dice=%.4f", brain, e.mean_dice);
        return bench::BudgetScore{brain, fields};
    };
    bench::read_budget_arguments(argc, argv, options);
    return bench::run_within_budget(options, "bm_skullstrip");
}
