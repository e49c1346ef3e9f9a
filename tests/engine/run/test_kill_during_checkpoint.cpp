// A run killed with SIGKILL in the middle of writing a checkpoint: the model_dir must still hold the
// previous checkpoint, intact, and no half-written file; the next run resumes from it and produces
// the losses of a run that was never killed.
//
// The child process is forked before this process starts any thread (each test runs in its own
// process under CTest) and kills itself at a precise moment of its second checkpoint.
#include "run/training_run.hpp"

#include "io/safetensors.hpp"
#include "run/metrics_log.hpp"
#include "run_test_support.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <sys/wait.h>

namespace tessera {
namespace {

namespace fs = std::filesystem;

const char* g_kill_stage = nullptr;
int g_kill_at_occurrence = 0;

void kill_at_stage(std::string_view stage) {
    if (stage == g_kill_stage && --g_kill_at_occurrence == 0) std::raise(SIGKILL);
}

void check_kill_and_resume(const char* stage) {
    test::TemporaryFolder killed("kill_" + std::string(stage[0] == 's' ? "state" : "weights"));
    const int steps = 6, checkpoint_every = 2;
    const pid_t child = fork();
    ASSERT_GE(child, 0) << std::strerror(errno);
    if (child == 0) {
        g_kill_stage = stage;
        g_kill_at_occurrence = 2;  // during the checkpoint of step 4
        run::set_checkpoint_fault_hook(kill_at_stage);
        try {
            run::TrainingRun training(test::small_em(steps, 0, checkpoint_every), test::options_in(killed.path()));
            training.train();
        } catch (...) {
            _exit(3);
        }
        _exit(0);  // not reached: the hook kills the process
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child was to be killed, but exited with " << WEXITSTATUS(status);
    ASSERT_EQ(WTERMSIG(status), SIGKILL);

    // What the kill left: step 2 listed and readable; the step-4 files it was writing are gone once a
    // run opens the folder.
    {
        const run::ModelDir dir(killed.path());
        const auto checkpoints = dir.checkpoints();
        ASSERT_EQ(checkpoints.size(), 1u);
        EXPECT_EQ(checkpoints[0].step, 2);
        const run::Checkpoint loaded = dir.load(checkpoints[0]);
        EXPECT_FALSE(loaded.weights.empty());
        for (const auto& entry : fs::directory_iterator(killed.path())) {
            const std::string name = entry.path().filename().string();
            EXPECT_EQ(name.find(".tmp."), std::string::npos) << name;
            EXPECT_EQ(name.find("ckpt-000004"), std::string::npos) << name;
        }
    }

    // Resume, and compare with a run that was never killed.
    std::vector<double> resumed;
    {
        run::TrainingRun training(test::small_em(steps, 0, checkpoint_every), test::options_in(killed.path()));
        const run::RunSummary summary = training.train();
        EXPECT_EQ(summary.first_step, 2);
        EXPECT_EQ(summary.last_step, steps);
    }
    test::TemporaryFolder reference("kill_reference");
    {
        run::TrainingRun training(test::small_em(steps, 0, checkpoint_every), test::options_in(reference.path()));
        training.train();
    }
    const run::MetricsHistory a = run::read_metrics(killed.path()), b = run::read_metrics(reference.path());
    ASSERT_EQ(a.steps.size(), static_cast<std::size_t>(steps));
    ASSERT_EQ(b.steps.size(), static_cast<std::size_t>(steps));
    for (int i = 0; i < steps; ++i) {
        EXPECT_EQ(a.steps[static_cast<std::size_t>(i)].loss, b.steps[static_cast<std::size_t>(i)].loss) << "step " << i + 1;
    }
}

TEST(KillDuringCheckpoint, AfterTheStateFileResumesFromThePreviousCheckpoint) { check_kill_and_resume("state written"); }

TEST(KillDuringCheckpoint, BeforeTheIndexResumesFromThePreviousCheckpoint) { check_kill_and_resume("weights written"); }

}  // namespace
}  // namespace tessera
