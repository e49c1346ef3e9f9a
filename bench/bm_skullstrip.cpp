// Skull-stripping the real head MRI (Debian's insighttoolkit5-examples) with a 3D U-Net split 2×2×2
// over 8 simulated cores: how far the held-out Dice gets within a time budget on this host.
//
// Usage: bm_skullstrip [--experiment <file>] [--budget-minutes 15] [--model-dir <dir>] [--threads 2]
// The held-out slab is the last quarter of the slices, never sampled for training. Prints one line per
// evaluation and a summary:
//   eval step=<n> elapsed_s=<s> dice_brain=<d> mean_dice=<d> loss=<x>
//   result best_dice=<d> at_step=<n> elapsed_s=<s> budget_s=<s> steps_per_second=<r>
#include "experiment/experiment.hpp"
#include "run/training_run.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

using namespace tessera;

namespace {

class Progress final : public run::RunObserver {
public:
    Progress(double budget_seconds, std::atomic<bool>& stop) : m_budget(budget_seconds), m_stop(stop) {}

    void on_start(const run::RunStart& s) override {
        std::printf("experiment %s: %lld steps, %lld cores (%s), data %s\n", s.experiment.c_str(), static_cast<long long>(s.total_steps),
                    static_cast<long long>(s.num_cores), s.layout.c_str(), s.data.c_str());
        std::fflush(stdout);
    }
    void on_step(const run::StepRecord& s) override {
        m_steps = s.step;
        if (s.step % 25 == 0) {
            std::printf("step %lld loss=%.4f lr=%.5f host_step_s=%.3f elapsed_s=%.0f\n", static_cast<long long>(s.step), s.loss,
                        s.learning_rate, s.host_seconds, elapsed());
            std::fflush(stdout);
        }
        if (elapsed() > m_budget) m_stop = true;  // the run ends after this step, with a checkpoint
    }
    void on_eval(const run::EvalRecord& e) override {
        double brain = 0;
        for (const auto& c : e.classes) {
            if (c.name == "brain") brain = c.dice;
        }
        std::printf("eval step=%lld elapsed_s=%.0f dice_brain=%.4f mean_dice=%.4f loss=%.4f eval_s=%.1f\n", static_cast<long long>(e.step),
                    elapsed(), brain, e.mean_dice, e.loss, e.seconds);
        std::fflush(stdout);
        if (brain > m_best) {
            m_best = brain;
            m_best_step = e.step;
            m_best_elapsed = elapsed();
        }
    }
    double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count(); }

    double m_best = 0, m_best_elapsed = 0;
    std::int64_t m_best_step = 0, m_steps = 0;

private:
    std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
    double m_budget;
    std::atomic<bool>& m_stop;
};

}  // namespace

int main(int argc, char** argv) {
    std::string experiment_path = std::string(TESSERA_SOURCE_DIR) + "/resources/experiments/unet3d_mri_skullstrip.json";
    std::string model_dir = (std::filesystem::temp_directory_path() / "tessera_bm_skullstrip").string();
    double budget_minutes = 15;
    int threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--experiment")) experiment_path = argv[i + 1];
        else if (!std::strcmp(argv[i], "--budget-minutes")) budget_minutes = std::atof(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--model-dir")) model_dir = argv[i + 1];
        else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    }
    std::filesystem::remove_all(model_dir);  // a fresh run: the budget counts from the first step
    try {
        run::RunOptions options;
        options.model_dir = model_dir;
        options.host_threads = threads;
        run::TrainingRun training(experiment::load_experiment(experiment_path), options);
        std::atomic<bool> stop = false;
        Progress progress(budget_minutes * 60, stop);
        const run::RunSummary summary = training.train(&progress, &stop);
        if (summary.stopped) {  // the budget ran out between evaluations: evaluate where it stopped
            progress.on_eval(training.evaluate());
        }
        std::printf("result best_dice=%.4f at_step=%lld elapsed_s=%.0f budget_s=%.0f steps=%lld steps_per_second=%.2f\n", progress.m_best,
                    static_cast<long long>(progress.m_best_step), progress.m_best_elapsed, budget_minutes * 60,
                    static_cast<long long>(summary.last_step),
                    static_cast<double>(summary.last_step - summary.first_step) / summary.wall_seconds);
    } catch (const std::exception& error) {
        std::fprintf(stderr, "bm_skullstrip: %s\n", error.what());
        return 1;
    }
    return 0;
}
