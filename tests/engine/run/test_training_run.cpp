// The training run end to end on small experiments: what it writes (metrics three ways, checkpoints,
// predictions), stop-and-resume equality, the last-K policy, and bad input before any step.
#include "run/training_run.hpp"

#include "core/json_support.hpp"
#include "mesh/host_calibration.hpp"
#include "cost/device.hpp"
#include "io/safetensors.hpp"
#include "io/tensorboard_events.hpp"
#include "io/volume_io.hpp"
#include "ops/dnnl_support.hpp"
#include "run/detections_file.hpp"
#include "run/metrics_log.hpp"
#include "run_test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>

namespace tessera {
namespace {

namespace fs = std::filesystem;
using test::TemporaryFolder;

// Stops the run after a given step, as Ctrl-C in the CLI or the studio's Stop button would.
class StopAfter final : public run::RunObserver {
public:
    StopAfter(std::int64_t step, std::atomic<bool>& flag) : m_step(step), m_flag(flag) {}
    void on_step(const run::StepRecord& record) override {
        if (record.step == m_step) m_flag = true;
    }

private:
    std::int64_t m_step;
    std::atomic<bool>& m_flag;
};

class Recorder final : public run::RunObserver {
public:
    void on_start(const run::RunStart& s) override { starts.push_back(s); }
    void on_step(const run::StepRecord& s) override { steps.push_back(s); }
    void on_eval(const run::EvalRecord& e) override { evals.push_back(e); }
    void on_checkpoint(const run::CheckpointRecord& c) override { checkpoints.push_back(c); }
    void on_finish(const run::RunSummary& s) override { summaries.push_back(s); }
    std::vector<run::RunStart> starts;
    std::vector<run::StepRecord> steps;
    std::vector<run::EvalRecord> evals;
    std::vector<run::CheckpointRecord> checkpoints;
    std::vector<run::RunSummary> summaries;
};

std::size_t count_lines(const fs::path& path) {
    std::ifstream in(path);
    std::size_t lines = 0;
    for (std::string line; std::getline(in, line);) ++lines;
    return lines;
}

TEST(TrainingRun, ABf16RunOnAHostWhereBf16IsSlowerSaysSo) {
    cost::Device host;
    host.measured["conv2d.bf16_ratio.fwd"] = 0.55;  // f32 time over bf16 time: bf16 slower
    host.measured["conv3d.bf16_ratio.fwd"] = 1.6;   // bf16 faster (a CPU with AMX)
    const std::optional<std::string> slower = run::host_bf16_note(host, graph::Precision::BF16, 2);
    ASSERT_TRUE(slower);
    EXPECT_NE(slower->find("0.55×"), std::string::npos) << *slower;
    EXPECT_NE(slower->find("\"precision\": \"f32\""), std::string::npos) << *slower;
    EXPECT_FALSE(run::host_bf16_note(host, graph::Precision::BF16, 3));  // faster: nothing to say
    EXPECT_FALSE(run::host_bf16_note(host, graph::Precision::F32, 2));   // not a bf16 run
    EXPECT_FALSE(run::host_bf16_note(cost::Device{}, graph::Precision::BF16, 2));  // a preset from before the ratio
}

TEST(TrainingRun, ABf16RunOnACpuWithoutBf16DotProductsSaysItIsEmulated) {
    const std::optional<std::string> note = run::emulated_bf16_note(graph::Precision::BF16);
    EXPECT_EQ(note.has_value(), !ops::has_native_bf16());
    if (note) {
        EXPECT_NE(note->find("AVX512-BF16"), std::string::npos) << *note;
    }
    EXPECT_FALSE(run::emulated_bf16_note(graph::Precision::F32));
    EXPECT_FALSE(run::emulated_bf16_note(graph::Precision::F16));
}

TEST(TrainingRun, WritesMetricsCheckpointsAndPredictions) {
    TemporaryFolder folder("run_outputs");
    run::TrainingRun training(test::small_em(4, 2, 2), test::options_in(folder.path()));
    Recorder recorder;
    const run::RunSummary summary = training.train(&recorder);

    ASSERT_EQ(recorder.steps.size(), 4u);
    ASSERT_EQ(recorder.evals.size(), 2u);
    EXPECT_EQ(recorder.evals[0].step, 2);
    EXPECT_EQ(recorder.evals[1].step, 4);
    EXPECT_EQ(summary.last_step, 4);
    EXPECT_FALSE(summary.stopped);
    EXPECT_GT(recorder.starts.at(0).predicted_step_seconds, 0);
    EXPECT_EQ(recorder.starts[0].num_cores, 4);
    for (const run::StepRecord& s : recorder.steps) {
        EXPECT_TRUE(std::isfinite(s.loss));
        EXPECT_GT(s.host_seconds, 0);
        EXPECT_EQ(s.core_peak_bytes.size(), 4u);
        EXPECT_GT(s.halo_bytes, 0);  // a 2-way split exchanges halos
    }
    // Warmup: the rate rises over the first two steps.
    EXPECT_LT(recorder.steps[0].learning_rate, recorder.steps[2].learning_rate);

    // Metrics three ways, the same numbers.
    const run::MetricsHistory history = run::read_metrics(folder.path());
    ASSERT_EQ(history.steps.size(), 4u);
    ASSERT_EQ(history.evals.size(), 2u);
    for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(history.steps[i].loss, recorder.steps[i].loss);
    EXPECT_EQ(history.evals[1].mean_dice, recorder.evals[1].mean_dice);
    EXPECT_EQ(count_lines(folder.path() / "train.csv"), 5u);
    EXPECT_EQ(count_lines(folder.path() / "eval.csv"), 3u);
    std::vector<float> tensorboard_losses;
    for (const io::ScalarEvent& event : io::read_tensorboard_scalars(folder.path())) {
        if (event.tag == "loss") tensorboard_losses.push_back(event.value);
    }
    ASSERT_EQ(tensorboard_losses.size(), 4u);
    for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(tensorboard_losses[i], static_cast<float>(recorder.steps[i].loss));
    std::size_t eval_dice_points = 0;
    for (const io::ScalarEvent& event : io::read_tensorboard_scalars(folder.path() / "eval")) eval_dice_points += event.tag == "mean_dice";
    EXPECT_EQ(eval_dice_points, 2u);

    // Checkpoints at 2 and 4, the weights readable as plain safetensors with the model's names.
    const auto checkpoints = training.model_dir().checkpoints();
    ASSERT_EQ(checkpoints.size(), 2u);
    EXPECT_EQ(checkpoints[0].step, 2);
    EXPECT_EQ(checkpoints[1].step, 4);
    const io::TensorFile weights = io::read_safetensors(checkpoints[1].weights);
    const auto current = training.mesh().weights();
    ASSERT_EQ(weights.tensors.size(), current.size());
    for (std::size_t i = 0; i < current.size(); ++i) {
        EXPECT_EQ(weights.tensors[i].name, current[i].name);
        EXPECT_EQ(0, std::memcmp(weights.tensors[i].value.raw_data(), current[i].value.raw_data(), current[i].value.num_bytes()));
    }
    EXPECT_EQ(weights.metadata.at("step"), "4");
    EXPECT_TRUE(fs::exists(folder.path() / "experiment.json"));
    std::ifstream summary_file(folder.path() / "summary.json");
    const std::string summary_text((std::istreambuf_iterator<char>(summary_file)), std::istreambuf_iterator<char>());
    EXPECT_NE(summary_text.find("\"last_step\": 4"), std::string::npos) << summary_text;
    EXPECT_NE(summary_text.find("\"mean_dice\""), std::string::npos) << summary_text;

    // Predictions: a label map on the held-out image's grid.
    ASSERT_EQ(recorder.evals[1].predictions.size(), 1u);
    const LabelMap prediction = read_label_map(recorder.evals[1].predictions[0]);
    EXPECT_EQ(prediction.geometry.size[0], 64);
    EXPECT_EQ(prediction.geometry.size[1], 64);
    for (std::int32_t label : prediction.present_labels()) EXPECT_TRUE(label == 0 || label == 1);
}

// The evaluation's classes carry the names the label files give (an MRIcron name file beside each).
TEST(TrainingRun, EvaluationNamesClassesAsTheLabelFilesDo) {
    TemporaryFolder folder("run_class_names");
    ImageGeometry geometry;
    geometry.size = {32, 32, 1};
    for (const char* name : {"a", "b"}) {
        Volume image = make_volume(geometry);
        LabelMap labels = make_label_map(geometry);
        for (std::int64_t i = 0; i < 32 * 32; ++i) {
            image.voxels.data<float>()[i] = static_cast<float>(i % 32);
            labels.labels.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % 32 / 11);  // 0, 1, 2 in bands
        }
        fs::create_directories(folder.path() / "images");
        write_volume(image, folder.path() / "images" / (std::string(name) + ".nii.gz"));
        write_label_map(labels, folder.path() / "images" / (std::string(name) + "_seg.nii.gz"));
        std::ofstream(folder.path() / "images" / (std::string(name) + "_seg.txt")) << "1 Membrane_wall\n2 Vesicle\n";
    }
    const std::string text = R"({"version": 1, "model": {"kind": "unet", "depth": 2, "base_width": 4, "num_classes": 3},
        "input": {"channels": 1, "size": [32, 32]}, "global_batch": 1, "num_cores_per_replica": 2,
        "input_partition_dims": [[1, 2, 1, 1], null], "optimizer": {"kind": "adam"},
        "data": {"source": "folder", "images": ")" + (folder.path() / "images").string() + R"(",
                 "labels": ")" + (folder.path() / "images").string() + R"(", "holdout_fraction": 0.5},
        "steps": 1})";
    run::TrainingRun training(experiment::parse_experiment(text, "named.json"), test::options_in(folder.path() / "run"));
    Recorder recorder;
    training.train(&recorder);
    ASSERT_EQ(recorder.evals.size(), 1u);
    const auto& classes = recorder.evals[0].classes;
    ASSERT_EQ(classes.size(), 3u);
    EXPECT_EQ(classes[0].name, "background");
    EXPECT_EQ(classes[1].name, "Membrane_wall");
    EXPECT_EQ(classes[2].name, "Vesicle");
}

TEST(TrainingRun, StoppedAndResumedGivesExactlyTheUninterruptedLosses) {
    TemporaryFolder whole("run_whole"), split("run_split");
    const int steps = 6;
    std::vector<double> uninterrupted;
    std::vector<train::NamedTensor> final_weights;
    double uninterrupted_dice = 0;
    {
        run::TrainingRun training(test::small_em(steps, 3, 0), test::options_in(whole.path()));
        Recorder recorder;
        training.train(&recorder);
        for (const auto& s : recorder.steps) uninterrupted.push_back(s.loss);
        final_weights = training.mesh().weights();
        uninterrupted_dice = recorder.evals.back().mean_dice;
    }
    {
        run::TrainingRun training(test::small_em(steps, 3, 0), test::options_in(split.path()));
        std::atomic<bool> stop = false;
        StopAfter stopper(2, stop);
        const run::RunSummary summary = training.train(&stopper, &stop);
        EXPECT_TRUE(summary.stopped);
        EXPECT_EQ(summary.last_step, 2);
        ASSERT_TRUE(training.model_dir().latest());
        EXPECT_EQ(training.model_dir().latest()->step, 2);  // the stop wrote a checkpoint
    }
    {
        run::TrainingRun training(test::small_em(steps, 3, 0), test::options_in(split.path()));
        Recorder recorder;
        const run::RunSummary summary = training.train(&recorder);
        EXPECT_EQ(summary.first_step, 2);
        EXPECT_TRUE(recorder.starts.at(0).resumed);
        ASSERT_EQ(recorder.steps.size(), 4u);
        EXPECT_EQ(recorder.steps[0].step, 3);
        EXPECT_EQ(recorder.evals.back().mean_dice, uninterrupted_dice);
        const auto weights = training.mesh().weights();
        ASSERT_EQ(weights.size(), final_weights.size());
        for (std::size_t i = 0; i < weights.size(); ++i) {
            EXPECT_EQ(0, std::memcmp(weights[i].value.raw_data(), final_weights[i].value.raw_data(), weights[i].value.num_bytes()))
                << weights[i].name;
        }
    }
    // The split run's metrics file reads as one run: six steps, the same losses, bit for bit.
    const run::MetricsHistory history = run::read_metrics(split.path());
    ASSERT_EQ(history.steps.size(), static_cast<std::size_t>(steps));
    for (int i = 0; i < steps; ++i) {
        EXPECT_EQ(history.steps[static_cast<std::size_t>(i)].step, i + 1);
        EXPECT_EQ(history.steps[static_cast<std::size_t>(i)].loss, uninterrupted[static_cast<std::size_t>(i)]) << "step " << i + 1;
    }
}

TEST(TrainingRun, KeepsTheLastCheckpointsAndDropsRecordsPastTheResumePoint) {
    TemporaryFolder folder("run_keep");
    {
        run::TrainingRun training(test::small_em(5, 5, 1), test::options_in(folder.path()));
        training.train();
        const auto kept = training.model_dir().checkpoints();
        ASSERT_EQ(kept.size(), 2u);  // keep_checkpoints 2
        EXPECT_EQ(kept[0].step, 4);
        EXPECT_EQ(kept[1].step, 5);
        std::size_t files = 0;
        for (const auto& entry : fs::directory_iterator(folder.path())) files += entry.path().extension() == ".safetensors";
        EXPECT_EQ(files, 4u);
    }
    // A record past the latest checkpoint (as a kill between a step and its checkpoint leaves) is dropped on resume.
    {
        std::ofstream(folder.path() / "metrics.jsonl", std::ios::app) << R"({"kind": "train", "step": 6, "loss": 123.0})" << "\n"
                                                                       << R"({"kind": "tr)";
        std::ofstream(folder.path() / "train.csv", std::ios::app) << "6,123,0,1,1,0,0,0,0,0,0\n";
        run::TrainingRun training(test::small_em(7, 7, 0), test::options_in(folder.path()));
        training.train();
    }
    const run::MetricsHistory history = run::read_metrics(folder.path());
    ASSERT_EQ(history.steps.size(), 7u);
    for (std::size_t i = 0; i < history.steps.size(); ++i) {
        EXPECT_EQ(history.steps[i].step, static_cast<std::int64_t>(i) + 1);
        EXPECT_NE(history.steps[i].loss, 123.0);
    }
    EXPECT_EQ(count_lines(folder.path() / "train.csv"), 8u);
}

TEST(TrainingRun, AFinishedRunHasNothingLeftToDo) {
    TemporaryFolder folder("run_finished");
    {
        run::TrainingRun training(test::small_em(2, 0, 0), test::options_in(folder.path()));
        training.train();
    }
    run::TrainingRun training(test::small_em(2, 0, 0), test::options_in(folder.path()));
    Recorder recorder;
    const run::RunSummary summary = training.train(&recorder);
    EXPECT_TRUE(recorder.steps.empty());
    EXPECT_EQ(summary.first_step, 2);
    EXPECT_EQ(summary.last_step, 2);
    // eval alone uses the latest checkpoint
    const run::EvalRecord eval = training.evaluate();
    EXPECT_EQ(eval.step, 2);
    EXPECT_EQ(eval.num_examples, 1);
}

// A run stopped between evaluations is evaluated by the same object where it stopped (bm_skullstrip and
// bm_detector_shapes do this): the checkpoint the stop wrote counts as trained weights.
TEST(TrainingRun, EvaluatesWhereAStoppedRunEndedInAFreshModelDir) {
    TemporaryFolder folder("run_stop_then_eval");
    run::TrainingRun training(test::small_em(6, 0, 0), test::options_in(folder.path()));
    struct StopAfterTwo final : run::RunObserver {
        std::atomic<bool> stop = false;
        void on_step(const run::StepRecord& s) override { stop = s.step >= 2; }
    } observer;
    const run::RunSummary summary = training.train(&observer, &observer.stop);
    ASSERT_TRUE(summary.stopped);
    ASSERT_EQ(summary.last_step, 2);
    const run::EvalRecord eval = training.evaluate();
    EXPECT_EQ(eval.step, 2);
    EXPECT_EQ(eval.num_examples, 1);
}

// A benchmark over a time budget stops between evaluations: the run evaluates where it stopped and logs
// it with the others (metrics.jsonl, eval.csv), where the studio finds it; without the option it does not.
TEST(TrainingRun, EvaluatesAndLogsWhereItStoppedWhenAsked) {
    struct StopAfterThree final : run::RunObserver {
        std::atomic<bool> stop = false;
        std::vector<std::int64_t> evaluated;
        void on_step(const run::StepRecord& s) override { stop = s.step >= 3; }
        void on_eval(const run::EvalRecord& e) override { evaluated.push_back(e.step); }
    };
    for (const bool asked : {false, true}) {
        TemporaryFolder folder(asked ? "run_stop_eval_asked" : "run_stop_eval_not_asked");
        run::RunOptions options = test::options_in(folder.path());
        options.evaluate_when_stopped = asked;
        run::TrainingRun training(test::small_em(8, 2, 0), options);
        StopAfterThree observer;
        const run::RunSummary summary = training.train(&observer, &observer.stop);
        ASSERT_TRUE(summary.stopped);
        ASSERT_EQ(summary.last_step, 3);
        const std::vector<std::int64_t> expected = asked ? std::vector<std::int64_t>{2, 3} : std::vector<std::int64_t>{2};
        EXPECT_EQ(observer.evaluated, expected);
        std::vector<std::int64_t> logged;
        for (const run::EvalRecord& e : run::read_metrics(folder.path()).evals) logged.push_back(e.step);
        EXPECT_EQ(logged, expected) << (asked ? "asked" : "not asked");
    }
}

TEST(TrainingRun, RefusesACheckpointOfAnotherModel) {
    TemporaryFolder folder("run_other_model");
    {
        run::TrainingRun training(test::small_em(2, 0, 0), test::options_in(folder.path()));
        training.train();
    }
    std::string text = test::small_em_experiment(4, 0, 0);
    text.replace(text.find("\"base_width\": 4"), 15, "\"base_width\": 6");
    run::TrainingRun training(experiment::parse_experiment(text, "wider.json"), test::options_in(folder.path()));
    try {
        training.train();
        FAIL() << "expected an error";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("cannot resume from"), std::string::npos) << error.what();
        EXPECT_NE(std::string(error.what()).find("written for another model"), std::string::npos) << error.what();
    }
}

TEST(TrainingRun, PlanOnlyExperimentsSayWhyTheyCannotTrain) {
    const auto expect_error = [](const std::string& json, const std::string& expected) {
        try {
            run::TrainingRun training(experiment::parse_experiment(json, "plan.json"));
            FAIL() << "expected an error";
        } catch (const Error& error) {
            EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
        }
    };
    expect_error(R"({"version": 1, "model": {"kind": "unet", "depth": 2}, "input": {"size": [32, 32]}, "global_batch": 1})",
                 "no \"data\" section, so it is plan-only");
    expect_error(R"({"version": 1, "model": {"kind": "retinanet"}, "input": {"channels": 3, "size": [256, 256]}, "global_batch": 1})",
                 "\"data\": {\"source\": \"synthetic_shapes\"}");
    // A GPU pipeline's choices can be written (for the TPU check) but are not trained.
    expect_error(R"({"version": 1, "model": {"kind": "retinanet", "depth": 18, "num_classes": 4, "fpn_channels": 8},
                     "input": {"channels": 3, "size": [128, 128]}, "global_batch": 1, "steps": 1,
                     "data": {"source": "synthetic_shapes"}, "detection": {"matcher": {"kind": "bipartite"}}})",
                 "set it to \"argmax\"");
    expect_error(R"({"version": 1, "model": {"kind": "retinanet", "depth": 18, "num_classes": 4, "fpn_channels": 8},
                     "input": {"channels": 3, "size": [128, 128]}, "global_batch": 1, "steps": 1,
                     "data": {"source": "synthetic_shapes"}, "detection": {"hard_example_mining": true}})",
                 "the focal loss replaces hard-example mining");
}

// ---- detection -------------------------------------------------------------------------------------

// A small RetinaNet on synthetic shapes, split in two: its evaluation is COCO scores (the metrics files,
// TensorBoard, summary) and a file of boxes per held-out image with the dataset's own ground truth.
TEST(TrainingRun, TrainsADetectorAndWritesItsScoresAndBoxes) {
    TemporaryFolder folder("run_detection");
    const std::string json = test::small_shapes_detector_experiment();
    run::TrainingRun training(experiment::parse_experiment(json, "shapes.json"), test::options_in(folder.path()));
    Recorder recorder;
    const run::RunSummary summary = training.train(&recorder);
    ASSERT_EQ(recorder.steps.size(), 2u);
    for (const run::StepRecord& s : recorder.steps) EXPECT_TRUE(std::isfinite(s.loss) && s.loss > 0) << s.loss;
    ASSERT_EQ(recorder.evals.size(), 1u);
    const run::EvalRecord& eval = recorder.evals[0];
    ASSERT_TRUE(eval.is_detection);
    EXPECT_EQ(eval.num_examples, 3);  // two batches of two, the last padded with a blank image
    EXPECT_TRUE(std::isfinite(eval.loss) && eval.loss > 0) << eval.loss;
    const run::DetectionEvalRecord& d = eval.detection;
    EXPECT_GE(d.ap, 0.0);
    EXPECT_LE(d.ap, 1.0);
    EXPECT_LE(d.num_true_positives, d.num_detections);
    ASSERT_EQ(d.classes.size(), 4u);
    EXPECT_EQ(d.classes[0].name, "disc");
    // The ground truth counted is the dataset's held-out objects.
    std::int64_t held_out_boxes = 0;
    for (std::int64_t i = 0; i < 3; ++i) held_out_boxes += static_cast<std::int64_t>(training.dataset().eval_example(i).objects.size());
    EXPECT_EQ(d.num_ground_truth, held_out_boxes);
    std::int64_t per_class_boxes = 0;
    for (const run::DetectionClassRecord& c : d.classes) {
        per_class_boxes += c.num_ground_truth;
        if (c.num_ground_truth > 0) {
            EXPECT_EQ(c.precision_at_iou_50.size(), 101u);
        }
    }
    EXPECT_EQ(per_class_boxes, held_out_boxes);

    // The boxes file: every image, its ground truth as the dataset gives it, matches that point at it.
    ASSERT_TRUE(fs::exists(d.detections_file)) << d.detections_file;
    const json::Json boxes = json::Json::parse(std::ifstream(d.detections_file));
    ASSERT_EQ(boxes["images"].size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
        const json::Json& image = boxes["images"][i];
        const data::Example example = training.dataset().eval_example(static_cast<std::int64_t>(i));
        ASSERT_EQ(image["ground_truth"].size(), example.objects.size());
        for (std::size_t g = 0; g < example.objects.size(); ++g) {
            EXPECT_EQ(image["ground_truth"][g]["class"].get<int>(), example.objects[g].class_id);
            EXPECT_FLOAT_EQ(image["ground_truth"][g]["box"][2].get<float>(), example.objects[g].box.x_max);
        }
        for (const json::Json& detection : image["detections"]) {
            const int matched = detection["ground_truth"].get<int>();
            if (matched < 0) continue;
            EXPECT_EQ(image["ground_truth"][static_cast<std::size_t>(matched)]["class"], detection["class"]);
            EXPECT_GE(detection["iou"].get<double>(), 0.5);
        }
        EXPECT_TRUE(fs::exists(folder.path() / "predictions" / image["image"].get<std::string>()));
    }
    // The viewer's reader gives the same boxes, its image files resolved beside the file.
    const run::DetectionsFile read_back = run::read_detections_file(d.detections_file);
    ASSERT_EQ(read_back.images.size(), 3u);
    EXPECT_EQ(read_back.classes.size(), 4u);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(read_back.images[i].ground_truth.size(), boxes["images"][i]["ground_truth"].size());
        EXPECT_EQ(read_back.images[i].detections.size(), boxes["images"][i]["detections"].size());
        EXPECT_TRUE(fs::exists(read_back.images[i].image_file)) << read_back.images[i].image_file;
    }

    // The same scores in metrics.jsonl (read back), eval.csv and TensorBoard.
    const run::MetricsHistory history = run::read_metrics(folder.path());
    ASSERT_EQ(history.evals.size(), 1u);
    EXPECT_TRUE(history.evals[0].is_detection);
    EXPECT_DOUBLE_EQ(history.evals[0].detection.ap, d.ap);
    EXPECT_EQ(history.evals[0].detection.classes.size(), 4u);
    std::ifstream csv(folder.path() / "eval.csv");
    std::string header;
    std::getline(csv, header);
    EXPECT_EQ(header.rfind("step,loss,ap,ap50,ap75,ar100,", 0), 0u) << header;
    EXPECT_NE(header.find("ap_disc"), std::string::npos) << header;
    bool tensorboard_map = false;
    for (const io::ScalarEvent& event : io::read_tensorboard_scalars(folder.path() / "eval")) {
        if (event.tag == "DetectionBoxes_Precision/mAP") tensorboard_map = std::abs(event.value - d.ap) < 1e-6;
    }
    EXPECT_TRUE(tensorboard_map);
    EXPECT_TRUE(summary.has_eval && summary.last_eval.is_detection);
}

// ---- this host's prediction -----------------------------------------------------------------------

// Points $TESSERA_DEVICES_DIR at a folder holding the shipped presets (and whatever the test adds), and
// puts the environment back afterwards.
class HostPresetFolder {
public:
    HostPresetFolder() : m_folder("devices") {
        if (const char* dir = std::getenv("TESSERA_DEVICES_DIR")) m_saved = dir;
        for (const auto& entry : fs::directory_iterator(fs::path(TESSERA_SOURCE_DIR) / "resources" / "devices")) {
            if (entry.path().filename() != "host.json") fs::copy_file(entry.path(), m_folder.path() / entry.path().filename());
        }
        setenv("TESSERA_DEVICES_DIR", m_folder.path().c_str(), 1);
    }
    ~HostPresetFolder() {
        if (m_saved) setenv("TESSERA_DEVICES_DIR", m_saved->c_str(), 1);
        else unsetenv("TESSERA_DEVICES_DIR");
    }
    const fs::path& path() const { return m_folder.path(); }

private:
    TemporaryFolder m_folder;
    std::optional<std::string> m_saved;
};

TEST(TrainingRun, PredictsThisHostsStepWhenCalibratedWithTheCheckedBand) {
    HostPresetFolder devices;
    TemporaryFolder folder("host_prediction");
    run::RunOptions options = test::options_in(folder.path() / "first");
    {  // no host preset: no host prediction
        run::TrainingRun training(test::small_em(2, 0, 0), options);
        Recorder recorder;
        training.train(&recorder);
        EXPECT_EQ(recorder.starts.at(0).predicted_host_step_seconds, 0);
    }
    cost::Device host = mesh::calibrate_host({.threads = options.host_threads, .repeats = 2, .quick = true});
    host.measured["check_rms_error_percent"] = 12.5;
    mesh::write_device_file(host, devices.path() / "host.json");
    options.model_dir = folder.path() / "second";
    run::TrainingRun training(test::small_em(2, 0, 0), options);
    Recorder recorder;
    training.train(&recorder);
    const run::RunStart& start = recorder.starts.at(0);
    EXPECT_GT(start.predicted_host_step_seconds, 0);
    EXPECT_NEAR(start.host_prediction_uncertainty_seconds, 0.125 * start.predicted_host_step_seconds, 1e-12);

    // A preset calibrated for other threads predicts nothing, and says why.
    host.measured["threads"] = options.host_threads + 1;
    mesh::write_device_file(host, devices.path() / "host.json");
    options.model_dir = folder.path() / "third";
    run::TrainingRun other(test::small_em(2, 0, 0), options);
    Recorder other_recorder;
    other.train(&other_recorder);
    EXPECT_EQ(other_recorder.starts.at(0).predicted_host_step_seconds, 0);
    bool explained = false;
    for (const std::string& note : other_recorder.starts[0].notes) explained |= note.find("calibrated for") != std::string::npos;
    EXPECT_TRUE(explained);
}

}  // namespace
}  // namespace tessera
