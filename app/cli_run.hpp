// tessera-cli's experiment commands: validate, train, eval, predict (plan lives beside the others in
// tessera_cli.cpp). Each returns the process exit code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::cli {

// Exit codes shared by every command.
inline constexpr int exit_ok = 0;
inline constexpr int exit_failure = 1;      // the work started and failed (a diverging loss, a full disk, a bug)
inline constexpr int exit_bad_input = 2;    // a file, an argument or an experiment that cannot run (also out of simulated memory)
inline constexpr int exit_interrupted = 130;  // stopped by Ctrl-C / SIGTERM after a clean checkpoint (128 + SIGINT)

struct RunArguments {
    std::string experiment;
    std::optional<std::int64_t> steps;
    std::string model_dir;
    int threads = 2;
    bool no_predictions = false;
    bool plain = false;  // plain lines even on a terminal
    bool random_weights = false;  // eval/predict without a checkpoint (smoke tests)
    std::string backend = "single-process";  // train: "single-process" or "mpi" (the cores spread over the job's ranks)
    std::string reduction;                   // train: overrides the experiment's "reduction" when set
};

// Checks each file and prints its TPU compatibility; a failed TPU rule alone keeps exit 0 (cli_run.cpp).
int validate_command(const std::vector<std::string>& experiments);
int train_command(const RunArguments& arguments);
int eval_command(const RunArguments& arguments);
int predict_command(const RunArguments& arguments, const std::vector<std::string>& inputs, const std::string& output_dir);

}  // namespace tessera::cli
