// Training an experiment within a wall-time budget and reporting the best held-out score reached: the
// shared body of bm_skullstrip (Dice) and bm_detector_shapes (AP). The budget counts from the first step;
// when it runs out the run stops after that step, writes its checkpoint and is evaluated where it stopped.
//
// Prints:
//   experiment <name>: <steps> steps, <cores> cores (<layout>), data <source>
//   step <n> loss=<x> lr=<r> host_step_s=<s> elapsed_s=<s>             (every 25 steps)
//   eval step=<n> elapsed_s=<s> <score fields> loss=<x> eval_s=<s>      (every evaluation)
//   result best_<score>=<x> at_step=<n> elapsed_s=<s> budget_s=<s> steps=<n> steps_per_second=<r>
#pragma once

#include "experiment/experiment.hpp"
#include "run/training_run.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

namespace tessera::bench {

struct BudgetScore {
    double value = 0;     // the score the result line reports (higher is better)
    std::string fields;   // "name=value" pairs for the eval line
};

struct BudgetOptions {
    std::string experiment_path;
    std::string model_dir;
    double budget_minutes = 15;
    int threads = 2;
    std::string score_name;                                          // e.g. "dice_brain", "ap50"
    std::function<BudgetScore(const run::EvalRecord&)> score;
};

// Reads --experiment, --budget-minutes, --model-dir and --threads over the defaults in `options`;
// --help prints the usage, anything else is refused (a mistyped option must not start a 15-minute run).
inline void read_budget_arguments(int argc, char** argv, BudgetOptions& options) {
    const auto usage = [&](FILE* to) {
        std::fprintf(to, "usage: %s [--experiment <file>] [--budget-minutes %g] [--model-dir <dir>] [--threads %d]\n", argv[0],
                     options.budget_minutes, options.threads);
    };
    for (int i = 1; i < argc; i += 2) {
        const bool known = !std::strcmp(argv[i], "--experiment") || !std::strcmp(argv[i], "--budget-minutes") ||
                           !std::strcmp(argv[i], "--model-dir") || !std::strcmp(argv[i], "--threads");
        if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
            usage(stdout);
            std::exit(0);
        }
        if (!known || i + 1 >= argc) {
            std::fprintf(stderr, "%s: %s\n", argv[0], known ? "expected a value after the last option" : "unknown option");
            std::fprintf(stderr, "  got '%s'\n", argv[i]);
            usage(stderr);
            std::exit(2);
        }
        if (!std::strcmp(argv[i], "--experiment")) options.experiment_path = argv[i + 1];
        else if (!std::strcmp(argv[i], "--budget-minutes")) options.budget_minutes = std::atof(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--model-dir")) options.model_dir = argv[i + 1];
        else options.threads = std::atoi(argv[i + 1]);
    }
    if (!(options.budget_minutes > 0) || options.threads < 1) {
        std::fprintf(stderr, "%s: --budget-minutes must be positive and --threads at least 1, got %g and %d\n", argv[0],
                     options.budget_minutes, options.threads);
        std::exit(2);
    }
}

class BudgetProgress final : public run::RunObserver {
public:
    BudgetProgress(const BudgetOptions& options, std::atomic<bool>& stop) : m_options(options), m_stop(stop) {}

    void on_start(const run::RunStart& s) override {
        std::printf("experiment %s: %lld steps, %lld cores (%s), data %s\n", s.experiment.c_str(), static_cast<long long>(s.total_steps),
                    static_cast<long long>(s.num_cores), s.layout.c_str(), s.data.c_str());
        std::fflush(stdout);
    }
    void on_step(const run::StepRecord& s) override {
        if (s.step % 25 == 0) {
            std::printf("step %lld loss=%.4f lr=%.5f host_step_s=%.3f elapsed_s=%.0f\n", static_cast<long long>(s.step), s.loss,
                        s.learning_rate, s.host_seconds, elapsed());
            std::fflush(stdout);
        }
        if (elapsed() > m_options.budget_minutes * 60) m_stop = true;
    }
    void on_eval(const run::EvalRecord& e) override {
        const BudgetScore score = m_options.score(e);
        std::printf("eval step=%lld elapsed_s=%.0f %s loss=%.4f eval_s=%.1f\n", static_cast<long long>(e.step), elapsed(),
                    score.fields.c_str(), e.loss, e.seconds);
        std::fflush(stdout);
        if (score.value > m_best) {
            m_best = score.value;
            m_best_step = e.step;
            m_best_elapsed = elapsed();
        }
    }
    double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count(); }

    double m_best = -1, m_best_elapsed = 0;
    std::int64_t m_best_step = 0;

private:
    std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
    const BudgetOptions& m_options;
    std::atomic<bool>& m_stop;
};

inline int run_within_budget(const BudgetOptions& options, const char* program) {
    std::filesystem::remove_all(options.model_dir);  // a fresh run: the budget counts from the first step
    try {
        run::RunOptions run_options;
        run_options.model_dir = options.model_dir;
        run_options.host_threads = options.threads;
        run_options.evaluate_when_stopped = true;  // the last steps count, and the studio sees that evaluation
        run::TrainingRun training(experiment::load_experiment(options.experiment_path), run_options);
        std::atomic<bool> stop = false;
        BudgetProgress progress(options, stop);
        const run::RunSummary summary = training.train(&progress, &stop);
        std::printf("result best_%s=%.4f at_step=%lld elapsed_s=%.0f budget_s=%.0f steps=%lld steps_per_second=%.3f\n",
                    options.score_name.c_str(), progress.m_best, static_cast<long long>(progress.m_best_step), progress.m_best_elapsed,
                    options.budget_minutes * 60, static_cast<long long>(summary.last_step),
                    static_cast<double>(summary.last_step - summary.first_step) / summary.wall_seconds);
    } catch (const std::exception& error) {
        std::fprintf(stderr, "%s: %s\n", program, error.what());
        return 1;
    }
    return 0;
}

}  // namespace tessera::bench
