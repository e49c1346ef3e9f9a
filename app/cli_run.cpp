#include "cli_run.hpp"

#include "core/error.hpp"
#include "core/units.hpp"
#include "core/user_files.hpp"
#include "cost/device.hpp"
#include "cost/memory_model.hpp"
#include "experiment/experiment.hpp"
#include "experiment/tpu_compatibility.hpp"
#include "io/hdf5_volume.hpp"
#include "mpi/mpi_transport.hpp"
#include "run/training_run.hpp"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <sched.h>
#include <unistd.h>

namespace tessera::cli {

namespace {

// An input to predict exists: a file or folder, or for an HDF5 dataset ("file.h5:/volumes/raw") its file.
void check_prediction_input(const std::string& input) {
    const auto hdf5 = tessera::parse_hdf5_name(input);
    const std::filesystem::path file = hdf5 ? hdf5->file : std::filesystem::path(input);
    TESSERA_CHECK(std::filesystem::exists(file), "cannot predict '" << input << "': " << (hdf5 ? "the HDF5 file '" + file.string() + "' does not exist" : "no such file or folder"));
}

std::atomic<bool> g_stop_requested = false;
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");

// First Ctrl-C / SIGTERM: finish the step, checkpoint, exit. A second one kills at once.
extern "C" void request_stop(int signal_number) {
    g_stop_requested.store(true);
    std::signal(signal_number, SIG_DFL);
}

void install_stop_handlers() {
    g_stop_requested.store(false);
    std::signal(SIGINT, request_stop);
    std::signal(SIGTERM, request_stop);
}

std::string eval_line(const run::EvalRecord& e) {
    std::string line = std::string("eval  step ").append(std::to_string(e.step));
    char text[200];
    if (e.is_detection) {
        const run::DetectionEvalRecord& d = e.detection;
        std::snprintf(text, sizeof text, "  loss %.4f  AP %.4f  AP50 %.4f  AP75 %.4f  AR100 %.4f  (%lld images, %lld boxes, %lld detections, %s)",
                      e.loss, d.ap, d.ap50, d.ap75, d.ar100, static_cast<long long>(e.num_examples),
                      static_cast<long long>(d.num_ground_truth), static_cast<long long>(d.num_detections), format_duration(e.seconds).c_str());
        line += text;
        for (const run::DetectionClassRecord& c : d.classes) {
            if (c.ap < 0) continue;  // no ground truth of this class held out
            std::snprintf(text, sizeof text, "\n      %-14s AP %.4f  AP50 %.4f  (%lld boxes)", c.name.c_str(), c.ap, c.ap50,
                          static_cast<long long>(c.num_ground_truth));
            line += text;
        }
        if (!d.detections_file.empty()) line += "\n      boxes: " + d.detections_file.string();
        return line;
    }
    if (e.classes.empty()) {  // classification: Dice and IoU mean nothing here
        std::snprintf(text, sizeof text, "  loss %.4f  accuracy %.4f  (%lld examples, %s)", e.loss, e.accuracy,
                      static_cast<long long>(e.num_examples), format_duration(e.seconds).c_str());
    } else {
        std::snprintf(text, sizeof text, "  loss %.4f  mean Dice %.4f  mean IoU %.4f  accuracy %.4f  (%lld examples, %s)", e.loss,
                      e.mean_dice, e.mean_iou, e.accuracy, static_cast<long long>(e.num_examples), format_duration(e.seconds).c_str());
    }
    line += text;
    for (const run::ClassRecord& c : e.classes) {
        if (!c.is_present) continue;
        std::snprintf(text, sizeof text, "\n      %-14s Dice %.4f  IoU %.4f", c.name.c_str(), c.dice, c.iou);
        line += text;
    }
    return line;
}

// Prints a run's progress: a bar redrawn in place on a terminal, one line per step otherwise.
class ConsoleObserver final : public run::RunObserver {
public:
    explicit ConsoleObserver(bool interactive) : m_interactive(interactive) {}

    void on_start(const run::RunStart& s) override {
        m_total = s.total_steps;
        m_first = s.first_step;
        std::printf("experiment  %s\n", s.experiment.c_str());
        std::string resumed;
        if (s.resumed) resumed.append(" (resuming after step ").append(std::to_string(s.first_step)).append(")");
        std::printf("model_dir   %s%s\n", s.model_dir.string().c_str(), resumed.c_str());
        std::printf("data        %s\n", s.data.c_str());
        for (const std::string& note : s.notes) std::printf("note        %s\n", note.c_str());
        std::printf("cores       %lld simulated (%s), %s per core at most (capacity %s)\n", static_cast<long long>(s.num_cores),
                    s.layout.c_str(), format_gib(*std::max_element(s.core_memory_bytes.begin(), s.core_memory_bytes.end())).c_str(),
                    format_gib(s.core_capacity_bytes).c_str());
        if (!s.ranks.empty()) std::printf("ranks       %s\n", s.ranks.c_str());
        if (s.host_memory_bytes > 0) {
            std::printf("host        the cores hold %s of the %s a run may use here (TESSERA_HOST_MEMORY)\n",
                        format_gib(s.host_memory_bytes).c_str(), format_gib(s.host_memory_budget_bytes).c_str());
        }
        std::printf("predicted   %s per step on %s\n", format_duration(s.predicted_step_seconds).c_str(), s.device.c_str());
        if (s.predicted_host_step_seconds > 0) {
            std::string band = " (not checked: tessera-cli calibrate --check gives its ±)";
            if (s.host_prediction_uncertainty_seconds > 0) band = " ± " + format_duration(s.host_prediction_uncertainty_seconds);
            std::printf("            %s%s per step on this host's simulated cores\n", format_duration(s.predicted_host_step_seconds).c_str(),
                        band.c_str());
        }
        if (s.first_step >= s.total_steps) std::printf("nothing to do: all %lld steps are done\n", static_cast<long long>(s.total_steps));
        std::fflush(stdout);
    }

    void on_step(const run::StepRecord& s) override {
        m_seconds_sum += s.host_seconds;
        ++m_steps_seen;
        const double per_step = m_seconds_sum / static_cast<double>(m_steps_seen);
        const double eta = per_step * static_cast<double>(m_total - s.step);
        if (m_interactive) {
            constexpr int width = 28;
            const int filled = static_cast<int>(width * static_cast<double>(s.step) / static_cast<double>(std::max<std::int64_t>(m_total, 1)));
            std::string bar(static_cast<std::size_t>(filled), '=');
            if (filled < width) bar += '>';
            bar.resize(width, ' ');
            std::printf("\r[%s] %lld/%lld  loss %.4f  lr %.3g  %s/step  ETA %s\x1b[K", bar.c_str(), static_cast<long long>(s.step),
                        static_cast<long long>(m_total), s.loss, s.learning_rate, format_duration(per_step).c_str(), format_duration(eta).c_str());
            m_line_open = true;
        } else {
            std::printf("step %lld/%lld loss %.6f lr %.6g loss_scale %g host %.3f s predicted %.3f ms%s ETA %s\n",
                        static_cast<long long>(s.step), static_cast<long long>(m_total), s.loss, s.learning_rate, s.loss_scale,
                        s.host_seconds, s.predicted_seconds * 1e3, s.applied ? "" : " (overflow: update skipped)",
                        format_duration(eta).c_str());
        }
        std::fflush(stdout);
    }

    void on_eval(const run::EvalRecord& e) override {
        end_line();
        std::printf("%s\n", eval_line(e).c_str());
        std::fflush(stdout);
    }

    void on_checkpoint(const run::CheckpointRecord& c) override {
        if (!m_interactive) {
            std::printf("checkpoint step %lld: %s (%s)\n", static_cast<long long>(c.step), c.weights.string().c_str(),
                        format_duration(c.seconds).c_str());
            std::fflush(stdout);
        }
    }

    void on_finish(const run::RunSummary& s) override {
        end_line();
        if (s.stopped) std::printf("stopped after step %lld on request; a checkpoint is saved: run the same command to resume\n",
                                   static_cast<long long>(s.last_step));
        std::printf("summary     steps %lld → %lld in %s, final loss %.6f\n", static_cast<long long>(s.first_step),
                    static_cast<long long>(s.last_step), format_duration(s.wall_seconds).c_str(), s.final_loss);
        if (s.mean_host_step_seconds > 0) {
            std::printf("            mean step %s on this host, %s predicted on the device\n", format_duration(s.mean_host_step_seconds).c_str(),
                        format_duration(s.mean_predicted_step_seconds).c_str());
        }
        if (!s.core_peak_bytes.empty()) {
            std::string peaks;
            for (std::size_t c = 0; c < s.core_peak_bytes.size(); ++c) {
                if (c) peaks += ' ';
                peaks += format_gib(s.core_peak_bytes[c]);
            }
            std::printf("            peak memory per core: %s\n", peaks.c_str());
        }
        if (s.has_eval && s.last_eval.is_detection) {
            std::printf("            last eval: AP %.4f, AP50 %.4f\n", s.last_eval.detection.ap, s.last_eval.detection.ap50);
        } else if (s.has_eval && s.last_eval.classes.empty()) std::printf("            last eval: accuracy %.4f\n", s.last_eval.accuracy);
        else if (s.has_eval) std::printf("            last eval: mean Dice %.4f, accuracy %.4f\n", s.last_eval.mean_dice, s.last_eval.accuracy);
        std::fflush(stdout);
    }

private:
    void end_line() {
        if (m_line_open) std::printf("\n");
        m_line_open = false;
    }

    bool m_interactive;
    bool m_line_open = false;
    std::int64_t m_total = 0, m_first = 0, m_steps_seen = 0;
    double m_seconds_sum = 0;
};

run::RunOptions run_options(const RunArguments& arguments, std::string_view command, run::ModelDirAccess access) {
    run::RunOptions options;
    options.model_dir_access = access;
    options.command = "tessera-cli " + std::string(command) + " " + arguments.experiment;
    options.allow_random_weights = arguments.random_weights;
    options.steps = arguments.steps;
    if (!arguments.model_dir.empty()) {
        require_plain_path(arguments.model_dir, "--model-dir");
        options.model_dir = arguments.model_dir;
    }
    options.host_threads = arguments.threads;
    options.write_predictions = !arguments.no_predictions;
    if (!arguments.reduction.empty()) options.reduction = train::parse_reduction_order(arguments.reduction);
    return options;
}

// What restoring found (checkpoints skipped and why), on stderr: the output stays the results.
void print_notes(const run::TrainingRun& training) {
    for (const std::string& note : training.notes()) std::fprintf(stderr, "tessera-cli: note: %s\n", note.c_str());
}

// Bad input is reported before the run starts; after that an error is a failure of the run.
// `work_reads_input`: the work itself reads the user's files (predict), so its caller's mistakes are
// still bad input.
template <class Setup, class Work>
int guarded(Setup&& setup, Work&& work, bool work_reads_input = false) {
    try {
        auto prepared = setup();
        try {
            return work(prepared);
        } catch (const Error& error) {
            std::fprintf(stderr, "\ntessera-cli: %s\n", error.what());
            return work_reads_input && !error.is_internal() ? exit_bad_input : exit_failure;
        }
    } catch (const Error& error) {
        std::fprintf(stderr, "tessera-cli: %s\n", error.what());
        return error.is_internal() ? exit_failure : exit_bad_input;
    }
}

// A plan-only experiment's own layout against its device's memory, as the planner estimates it.
std::string device_memory_verdict(const experiment::Experiment& e) {
    const cost::Device device = cost::load_device_preset(e.device);
    const graph::Graph model = experiment::build_model(e, experiment::replica_input_shape(e));
    const partition::TilingPlan plan(model, experiment::tile_grid(e));
    std::int64_t peak = 0;
    for (std::int64_t core = 0; core < plan.num_cores(); ++core) {
        peak = std::max(peak, cost::estimate_core_memory(model, plan, core, e.precision, experiment::optimizer_slots(e)).total());
    }
    return format_gib(peak) + " per core on " + device.id +
           (peak <= device.memory_per_core ? std::string(" (fits)")
                                           : " — more than its " + format_gib(device.memory_per_core) +
                                                 ": this layout does not fit; tessera-cli plan --sweep ranks the ones that do");
}

}  // namespace

// Each file's verdict line ("ok" or "error" with the message), then, when the file parsed, its TPU
// compatibility (experiment/tpu_compatibility.hpp), indented under it. Exit status: a parse or check error
// makes it 2 (1 for a bug), as before; a failed TPU rule does not change it. The rules are advice about
// real TPU hardware, like the "does not fit" memory verdict of a plan-only experiment (also exit 0): the
// simulated cores still run e.g. a batch of 512 without warmup. The two rules Tessera cannot train past
// (bipartite matcher, hard-example mining) already fail check_trainable for a trainable experiment, so
// there the error line comes with the rule's reason and fix below it.
int validate_command(const std::vector<std::string>& experiments) {
    int worst = exit_ok;
    for (const std::string& path : experiments) {
        std::string tpu_section;
        try {
            const experiment::Experiment e = experiment::load_experiment(path);
            tpu_section = experiment::format_tpu_compatibility(experiment::tpu_compatibility(e));
            std::string what = e.is_trainable() ? std::string("trainable, ").append(std::to_string(e.training.steps)).append(" steps")
                                                : std::string("plan-only; ") + device_memory_verdict(e);
            if (e.is_trainable()) {
                experiment::check_trainable(e);
                run::check_fits_host(e);
                const auto dataset = data::make_dataset(*e.data, experiment::global_input_shape(e), e.model.num_classes);
                what += "; data: " + dataset->describe();
            }
            std::printf("ok    %s: %s (%s)\n", path.c_str(), e.name.empty() ? "unnamed" : e.name.c_str(), what.c_str());
        } catch (const Error& error) {
            std::printf("error %s\n      %s\n", path.c_str(), error.what());
            worst = error.is_internal() ? exit_failure : exit_bad_input;
        }
        std::istringstream lines(tpu_section);
        for (std::string line; std::getline(lines, line);) std::printf("      %s\n", line.c_str());
    }
    return worst;
}

// The number of processes an MPI launcher started this one among (1 when none did).
int launched_processes() {
    for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
        if (const char* value = std::getenv(variable)) {
            try {
                return std::max(1, std::stoi(value));
            } catch (const std::exception&) {
            }
        }
    }
    return 1;
}

int train_in_this_process(const RunArguments& arguments) {
    return guarded(
        [&] {
            auto training = std::make_unique<run::TrainingRun>(experiment::load_experiment(arguments.experiment),
                                                               run_options(arguments, "train", run::ModelDirAccess::Write));
            training->load_checkpoint();  // a model_dir whose checkpoints do not verify is bad input
            return training;
        },
        [&](std::unique_ptr<run::TrainingRun>& training) {
            ConsoleObserver console(!arguments.plain && isatty(STDOUT_FILENO));
            install_stop_handlers();
            const run::RunSummary summary = training->train(&console, &g_stop_requested);
            std::signal(SIGINT, SIG_DFL);
            std::signal(SIGTERM, SIG_DFL);
            return summary.stopped ? exit_interrupted : exit_ok;
        });
}

// One rank of `mpirun -np K tessera-cli train|eval|predict … --backend mpi`: rank 0 builds the run (data,
// model_dir, output) and does the work, the others follow it. Any rank's error ends the whole job at
// once with its exit code, the rank and host named: the others would otherwise wait for it in a
// collective. `work_reads_input`: as guarded's.
template <class Setup, class Work>
int over_mpi(const RunArguments& arguments, std::string_view command, run::ModelDirAccess access, Setup&& setup, Work&& work,
             bool work_reads_input = false) {
    int argc = 0;
    char** argv = nullptr;
    mpi::Session session(argc, argv);
    const std::shared_ptr<mesh::Transport> transport = mpi::make_transport();
    const int rank = transport->rank();
    const auto fail = [&](const Error& error, bool started) {
        std::fprintf(stderr, "tessera-cli: MPI rank %d of %d on %s: %s\n", rank, transport->num_ranks(), transport->host_name().c_str(),
                     error.what());
        mpi::abort_job(error.is_internal() || started ? exit_failure : exit_bad_input);
    };
    run::RunOptions options = run_options(arguments, command, access);
    options.transport = transport;
    // mpirun binds each rank to one core by default (with few ranks): more threads than that share it.
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) < arguments.threads) {
        std::fprintf(stderr,
                     "tessera-cli: note: MPI rank %d may run on %d host core(s) (the launcher bound it) but --threads %d asks for %d: "
                     "its threads will share them. Start mpirun with --bind-to none (or --map-by slot:PE=%d), or pass --threads %d.\n",
                     rank, CPU_COUNT(&allowed), arguments.threads, arguments.threads, arguments.threads, CPU_COUNT(&allowed));
    }
    if (rank > 0) {
        // Ctrl-C or SIGTERM reaches every rank of a local job; rank 0 decides (it stops after the step,
        // with a checkpoint, and then ends the others).
        std::signal(SIGINT, SIG_IGN);
        std::signal(SIGTERM, SIG_IGN);
        try {
            run::follow_training_run(experiment::load_experiment(arguments.experiment), options);
        } catch (const Error& error) {
            fail(error, false);
        }
        return exit_ok;
    }
    std::unique_ptr<run::TrainingRun> training;
    try {
        training = std::make_unique<run::TrainingRun>(experiment::load_experiment(arguments.experiment), options);
        setup(*training);
    } catch (const Error& error) {
        fail(error, false);
    }
    try {
        const int code = work(*training);
        training.reset();  // tells the other ranks the run is over
        return code;
    } catch (const Error& error) {
        fail(error, !work_reads_input);
    }
    return exit_failure;
}

int train_over_mpi(const RunArguments& arguments) {
    return over_mpi(
        arguments, "train", run::ModelDirAccess::Write, [](run::TrainingRun& training) { training.load_checkpoint(); },
        [&](run::TrainingRun& training) {
            ConsoleObserver console(!arguments.plain && isatty(STDOUT_FILENO));
            install_stop_handlers();
            const run::RunSummary summary = training.train(&console, &g_stop_requested);
            return summary.stopped ? exit_interrupted : exit_ok;
        });
}

// Started by an MPI launcher among several processes without --backend mpi: each would run the whole
// mesh into the same model_dir. Returns the exit code when refused.
std::optional<int> refuse_unspread_launch(std::string_view command) {
    const int processes = launched_processes();
    if (processes <= 1) return std::nullopt;
    std::fprintf(stderr,
                 "tessera-cli: started as one of %d processes by an MPI launcher, but without --backend mpi: every process would "
                 "%s the whole mesh with the same model_dir. Add --backend mpi to spread the cores over the %d ranks.\n",
                 processes, std::string(command).c_str(), processes);
    return exit_bad_input;
}

int train_command(const RunArguments& arguments) {
    if (arguments.backend == "mpi") return train_over_mpi(arguments);
    if (const std::optional<int> refused = refuse_unspread_launch("train")) return *refused;
    return train_in_this_process(arguments);
}

// What eval prints of its record.
int print_evaluation(run::TrainingRun& training, const run::EvalRecord& record) {
    print_notes(training);
    std::printf("evaluated step %lld of %s\n", static_cast<long long>(record.step), training.model_dir().path().string().c_str());
    std::printf("%s\n", eval_line(record).c_str());
    for (const auto& file : record.predictions) std::printf("wrote %s\n", file.string().c_str());
    return exit_ok;
}

int eval_command(const RunArguments& arguments) {
    // Predictions are written into the model_dir: that takes its lock; without them eval only reads.
    const auto access = arguments.no_predictions ? run::ModelDirAccess::ReadOnly : run::ModelDirAccess::Write;
    if (arguments.backend == "mpi") {
        return over_mpi(
            arguments, "eval", access, [](run::TrainingRun& training) { training.load_checkpoint(true); },
            [](run::TrainingRun& training) { return print_evaluation(training, training.evaluate()); });
    }
    if (const std::optional<int> refused = refuse_unspread_launch("evaluate")) return *refused;
    return guarded(
        [&] {
            auto training =
                std::make_unique<run::TrainingRun>(experiment::load_experiment(arguments.experiment), run_options(arguments, "eval", access));
            training->load_checkpoint(true);
            return training;
        },
        [&](std::unique_ptr<run::TrainingRun>& training) { return print_evaluation(*training, training->evaluate()); });
}

int predict_command(const RunArguments& arguments, const std::vector<std::string>& inputs, const std::string& output_dir) {
    const auto predict = [&](run::TrainingRun& training) {
        std::vector<std::filesystem::path> files(inputs.begin(), inputs.end());
        const auto written = training.predict(files, output_dir);
        print_notes(training);
        for (const auto& file : written) std::printf("wrote %s\n", file.string().c_str());
        return exit_ok;
    };
    if (arguments.backend == "mpi") {
        return over_mpi(
            arguments, "predict", run::ModelDirAccess::ReadOnly,
            [&](run::TrainingRun& training) {
                for (const std::string& input : inputs) {
                    check_prediction_input(input);
                }
                training.load_checkpoint(true);
            },
            predict, true);
    }
    if (const std::optional<int> refused = refuse_unspread_launch("predict with")) return *refused;
    return guarded(
        [&] {
            for (const std::string& input : inputs) {
                check_prediction_input(input);
            }
            auto training = std::make_unique<run::TrainingRun>(experiment::load_experiment(arguments.experiment),
                                                               run_options(arguments, "predict", run::ModelDirAccess::ReadOnly));
            training->load_checkpoint(true);
            return training;
        },
        [&](std::unique_ptr<run::TrainingRun>& training) { return predict(*training); }, true);
}

}  // namespace tessera::cli
