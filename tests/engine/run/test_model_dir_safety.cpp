// A model_dir loses nothing: one run at a time (the lock), checkpoints that verify themselves, an index
// rebuilt rather than started over, and index entries that cannot name files outside the folder.
#include "run/model_dir.hpp"
#include "support/error_of.hpp"
#include "run/model_dir_lock.hpp"
#include "run/training_run.hpp"
#include "io/safetensors.hpp"

#include "run_test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

namespace tessera {
namespace {

using test::error_of;

namespace fs = std::filesystem;
using test::TemporaryFolder;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class Recorder final : public run::RunObserver {
public:
    void on_start(const run::RunStart& s) override { starts.push_back(s); }
    void on_step(const run::StepRecord& s) override { losses.push_back(s.loss); }
    std::vector<run::RunStart> starts;
    std::vector<double> losses;
};

// Trains the small EM experiment (6 steps, checkpoints every 2, the last 2 kept) in `dir` up to step
// `steps`: the schedule is always the 6-step one, so a resumed run can equal an uninterrupted one.
Recorder train_to(const fs::path& dir, int steps) {
    run::RunOptions options = test::options_in(dir);
    options.steps = steps;
    run::TrainingRun training(test::small_em(6, 0, 2), options);
    Recorder recorder;
    training.train(&recorder);
    return recorder;
}

void flip_byte(const fs::path& file, std::uint64_t offset_from_end) {
    std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
    stream.seekg(-static_cast<std::streamoff>(offset_from_end), std::ios::end);
    char byte = 0;
    stream.read(&byte, 1);
    stream.seekp(-static_cast<std::streamoff>(offset_from_end), std::ios::end);
    byte = static_cast<char>(byte ^ 0x5a);
    stream.write(&byte, 1);
}

TEST(ModelDirLock, ASecondRunInTheSameFolderIsRefusedAndNamesTheFirst) {
    TemporaryFolder folder("lock_twice");
    run::ModelDir first(folder.path(), run::ModelDirAccess::Write, "tessera-cli train first.json");
    const std::string message = error_of([&] { run::ModelDir second(folder.path(), run::ModelDirAccess::Write, "second"); });
    EXPECT_TRUE(contains(message, "in use by another run")) << message;
    EXPECT_TRUE(contains(message, "pid " + std::to_string(::getpid()))) << message;
    EXPECT_TRUE(contains(message, "tessera-cli train first.json")) << message;
    // Readers see who holds it, and may read.
    const auto holder = run::ModelDirLock::holder(folder.path());
    ASSERT_TRUE(holder.has_value());
    EXPECT_EQ(holder->pid, ::getpid());
    EXPECT_NO_THROW(run::ModelDir(folder.path(), run::ModelDirAccess::ReadOnly));
}

TEST(ModelDirLock, IsReleasedWhenTheRunEnds) {
    TemporaryFolder folder("lock_release");
    { run::ModelDir first(folder.path()); }
    EXPECT_FALSE(run::ModelDirLock::holder(folder.path()).has_value());
    run::ModelDir again(folder.path());
    EXPECT_TRUE(again.notes().empty());  // a clean release leaves nothing to take over
}

TEST(ModelDirLock, HoldsAgainstAnotherProcessAndIsTakenOverWhenItDies) {
    TemporaryFolder folder("lock_process");
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        run::ModelDir held(folder.path(), run::ModelDirAccess::Write, "child run");
        const char byte = 1;
        [[maybe_unused]] const ssize_t written = ::write(ready[1], &byte, 1);
        for (;;) ::pause();  // killed by the parent
    }
    char byte = 0;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1);
    const std::string message = error_of([&] { run::ModelDir second(folder.path()); });
    EXPECT_TRUE(contains(message, "pid " + std::to_string(child))) << message;
    EXPECT_TRUE(contains(message, "child run")) << message;
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ::close(ready[0]);
    ::close(ready[1]);
    // SIGKILL released the kernel's lock; its record names who died holding it.
    run::ModelDir after(folder.path());
    ASSERT_EQ(after.notes().size(), 1u);
    EXPECT_TRUE(contains(after.notes()[0], "took over the lock")) << after.notes()[0];
    EXPECT_TRUE(contains(after.notes()[0], "pid " + std::to_string(child))) << after.notes()[0];
}

TEST(ModelDirSafety, ALostIndexIsRebuiltFromTheCheckpointsAndTheRunResumes) {
    TemporaryFolder folder("lost_index");
    const Recorder whole = train_to(folder.path() / "whole", 6);
    train_to(folder.path() / "cut", 4);
    fs::remove(folder.path() / "cut" / "checkpoint");
    const Recorder resumed = train_to(folder.path() / "cut", 6);
    ASSERT_EQ(resumed.starts.size(), 1u);
    EXPECT_EQ(resumed.starts[0].first_step, 4);  // not 0: nothing started over
    ASSERT_FALSE(resumed.starts[0].notes.empty());
    EXPECT_TRUE(contains(resumed.starts[0].notes[0], "rebuilt from 2 checkpoints")) << resumed.starts[0].notes[0];
    ASSERT_EQ(resumed.losses.size(), 2u);
    EXPECT_EQ(resumed.losses[0], whole.losses[4]);  // bit for bit
    EXPECT_EQ(resumed.losses[1], whole.losses[5]);
}

// Each way a newest checkpoint can be damaged: the run resumes from the older one, says why, and its
// losses are those of a run that was never damaged.
void check_falls_back(const std::string& name, const std::function<void(const fs::path& dir)>& damage, const std::string& reason) {
    TemporaryFolder folder("fallback_" + name);
    const Recorder whole = train_to(folder.path() / "whole", 6);
    const fs::path dir = folder.path() / "damaged";
    train_to(dir, 4);
    damage(dir);
    const Recorder resumed = train_to(dir, 6);
    ASSERT_EQ(resumed.starts.size(), 1u) << name;
    EXPECT_EQ(resumed.starts[0].first_step, 2) << name;
    std::string notes;
    for (const std::string& note : resumed.starts[0].notes) notes += note + "\n";
    EXPECT_TRUE(contains(notes, "skipped the checkpoint of step 4")) << name << ": " << notes;
    EXPECT_TRUE(contains(notes, reason)) << name << ": " << notes;
    ASSERT_EQ(resumed.losses.size(), 4u) << name;
    for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(resumed.losses[i], whole.losses[i + 2]) << name << " step " << i + 3;
}

TEST(ModelDirSafety, ATruncatedNewestCheckpointFallsBackToTheOlderOne) {
    check_falls_back("truncated", [](const fs::path& dir) { fs::resize_file(dir / "model.ckpt-000004.safetensors", 100); }, "truncated");
}

TEST(ModelDirSafety, AFlippedByteInTensorDataIsFoundByTheChecksum) {
    check_falls_back("data_flip", [](const fs::path& dir) { flip_byte(dir / "model.ckpt-000004.safetensors", 40); }, "CRC-32");
}

TEST(ModelDirSafety, AFlippedHeaderByteIsFound) {
    check_falls_back(
        "header_flip",
        [](const fs::path& dir) {
            std::fstream stream(dir / "state.ckpt-000004.safetensors", std::ios::in | std::ios::out | std::ios::binary);
            stream.seekp(9);  // inside the JSON header, after its opening brace
            stream.write("\x01", 1);
        },
        "state.ckpt-000004");
}

TEST(ModelDirSafety, AMissingStateFileFallsBack) {
    check_falls_back("state_missing", [](const fs::path& dir) { fs::remove(dir / "state.ckpt-000004.safetensors"); }, "no such file");
}

TEST(ModelDirSafety, NoCheckpointThatVerifiesIsAnErrorThatDeletesNothing) {
    TemporaryFolder folder("none_verify");
    train_to(folder.path(), 4);
    fs::resize_file(folder.path() / "model.ckpt-000004.safetensors", 50);
    fs::resize_file(folder.path() / "model.ckpt-000002.safetensors", 50);
    const std::string message = error_of([&] {
        run::TrainingRun training(test::small_em(6, 0, 2), test::options_in(folder.path()));
        training.train();
    });
    EXPECT_TRUE(contains(message, "no checkpoint in the model_dir")) << message;
    EXPECT_TRUE(contains(message, "step 4")) << message;
    EXPECT_TRUE(contains(message, "step 2")) << message;
    EXPECT_TRUE(fs::exists(folder.path() / "model.ckpt-000004.safetensors"));
    EXPECT_TRUE(fs::exists(folder.path() / "model.ckpt-000002.safetensors"));
}

TEST(ModelDirSafety, IndexEntriesCannotNameFilesOutsideTheFolder) {
    TemporaryFolder folder("index_escape");
    train_to(folder.path(), 2);
    {
        std::ofstream index(folder.path() / "checkpoint");
        index << R"({"format": "tessera-checkpoints", "version": 1, "checkpoints": [)"
              << R"({"step": 2, "weights": "../../../../etc/passwd", "state": "state.ckpt-000002.safetensors"}]})";
    }
    const std::string message = error_of([&] { (void)run::ModelDir(folder.path(), run::ModelDirAccess::ReadOnly).checkpoints(); });
    EXPECT_TRUE(contains(message, "not a plain file name")) << message;
    // A run sets the damaged index aside and rebuilds it from the files: nothing outside is read.
    run::ModelDir dir(folder.path());
    ASSERT_EQ(dir.checkpoints().size(), 1u);
    EXPECT_EQ(dir.checkpoints()[0].weights.filename(), "model.ckpt-000002.safetensors");
    EXPECT_TRUE(fs::exists(folder.path() / "checkpoint.damaged"));
}

TEST(ModelDirSafety, NonFiniteWeightsMakeACheckpointUnusable) {
    TemporaryFolder folder("nan_weights");
    Tensor weight = Tensor::zeros({4}, DType::F32);
    weight.data<float>()[2] = std::nanf("");
    const std::vector<train::NamedTensor> state = {{"run/next_batch", Tensor::zeros({1}, DType::F32)}};
    {
        // Tessera never writes one: the save reads its checkpoint back and refuses it.
        run::ModelDir dir(folder.path());
        const std::string refused = error_of([&] { dir.save(3, {{"conv.weight", weight}}, state, {}, 2); });
        EXPECT_TRUE(contains(refused, "does not verify")) << refused;
        EXPECT_TRUE(dir.checkpoints().empty());
    }
    // One written by another tool (or an older Tessera) is refused on resume, with the reason.
    io::write_safetensors(folder.path() / "model.ckpt-000003.safetensors", {{{"conv.weight", weight}}, {{"step", "3"}}});
    io::write_safetensors(folder.path() / "state.ckpt-000003.safetensors", {{{"run/next_batch", state[0].value}}, {{"step", "3"}}});
    run::ModelDir dir(folder.path(), run::ModelDirAccess::ReadOnly);
    std::vector<std::string> skipped;
    const std::string message = error_of([&] { dir.load_newest_verified(skipped); });
    EXPECT_TRUE(contains(message, "'conv.weight' holds NaN or infinite values")) << message;
    EXPECT_FALSE(contains(message, "learning rate")) << message;
}

TEST(TrainingRunSafety, EvalAndPredictRefuseAModelDirWithoutACheckpoint) {
    TemporaryFolder folder("no_checkpoint");
    run::RunOptions options = test::options_in(folder.path());
    options.model_dir_access = run::ModelDirAccess::ReadOnly;
    fs::create_directories(folder.path());
    run::TrainingRun training(test::small_em(2, 0, 2), options);
    const std::string message = error_of([&] { training.evaluate(); });
    EXPECT_TRUE(contains(message, "holds no checkpoint")) << message;
    EXPECT_TRUE(contains(message, "--random-weights")) << message;
    options.allow_random_weights = true;
    run::TrainingRun smoke(test::small_em(2, 0, 2), options);
    EXPECT_NO_THROW(smoke.evaluate());
}

TEST(TrainingRunSafety, AnExperimentTooLargeForThisHostIsRefusedBeforeAllocating) {
    std::string text = test::small_em_experiment(2, 0, 2);
    text.replace(text.find("[32, 32]"), 8, "[8192, 8192]");
    text.replace(text.find("[64, 64]"), 8, "[8192, 8192]");
    const experiment::Experiment e = experiment::parse_experiment(text, "huge.json");
    const std::string message = error_of([&] { run::check_fits_host(e); });
    EXPECT_TRUE(contains(message, "more than the")) << message;
    EXPECT_TRUE(contains(message, "TESSERA_HOST_MEMORY")) << message;
    EXPECT_NO_THROW(run::check_fits_host(test::small_em(2, 0, 2)));
}

TEST(TrainingRunSafety, ADivergingRunStopsNamingTheStepAndSavesNothingNonFinite) {
    TemporaryFolder folder("diverge");
    // SGD at a learning rate of 100 without batch norm: the weights blow up within a few steps.
    std::string text = test::small_em_experiment(20, 0, 1);
    text.replace(text.find(R"("kind": "adam")"), 14, R"("kind": "sgd")");
    text.replace(text.find(R"("learning_rate": 0.01)"), 21, R"("learning_rate": 100)");
    text.replace(text.find(R"("num_classes": 2})"), 17, R"("num_classes": 2, "batch_norm": false})");
    const std::string message = error_of([&] {
        run::TrainingRun training(experiment::parse_experiment(text, "diverge.json"), test::options_in(folder.path()));
        training.train();
    });
    EXPECT_TRUE(contains(message, "NaN or infinite")) << message;
    EXPECT_TRUE(contains(message, "step ")) << message;
    EXPECT_TRUE(contains(message, "Nothing of this step was saved")) << message;
    // Whatever was checkpointed before verifies: nothing non-finite reached the disk.
    run::ModelDir dir(folder.path(), run::ModelDirAccess::ReadOnly);
    for (const run::CheckpointInfo& info : dir.checkpoints()) EXPECT_NO_THROW(dir.load(info)) << info.step;
}

}  // namespace
}  // namespace tessera
