// The run report on a real (small) run: every part present and self-contained, its numbers those of the
// run's own files (per-case Dice computed here independently from the label volumes), the step trace
// written by the run and read back, and what is left out said when the folder cannot give it.
#include "report/run_report.hpp"

#include "io/volume_io.hpp"
#include "run/detections_file.hpp"
#include "run/metrics_log.hpp"
#include "run/step_trace.hpp"
#include "run/training_run.hpp"
#include "run_test_support.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

namespace tessera {
namespace {

namespace fs = std::filesystem;
using test::TemporaryFolder;

std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// A 4-step run of the small EM experiment with two held-out images, evaluated and checkpointed at 2 and 4.
fs::path trained_run(const TemporaryFolder& folder) {
    std::string text = test::small_em_experiment(4, 2, 2);
    text = std::regex_replace(text, std::regex("\"num_eval_images\": 1"), "\"num_eval_images\": 2");
    run::TrainingRun training(experiment::parse_experiment(text, "small_em.json"), test::options_in(folder.path() / "run"));
    training.train(nullptr);
    return folder.path() / "run";
}

// The foreground (label 1) Dice of one held-out case, from its files.
double membrane_dice(const fs::path& prediction_file, const fs::path& truth_file) {
    const LabelMap prediction = read_label_map(prediction_file), truth = read_label_map(truth_file);
    std::int64_t both = 0, predicted = 0, actual = 0;
    for (std::int64_t i = 0; i < truth.labels.num_elements(); ++i) {
        const bool p = prediction.labels.data<std::int32_t>()[i] == 1, t = truth.labels.data<std::int32_t>()[i] == 1;
        both += p && t;
        predicted += p;
        actual += t;
    }
    return predicted + actual == 0 ? 1.0 : 2.0 * static_cast<double>(both) / static_cast<double>(predicted + actual);
}

std::string four_decimals(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.4f", value);
    return text;
}

TEST(StepTrace, RoundTripsThroughTheChromeTraceFormat) {
    TemporaryFolder folder("step_trace");
    run::StepTrace trace;
    trace.step = 12;
    trace.num_cores = 2;
    trace.layer_names = {"input", "enc1.conv1"};
    trace.events = {{0, 1, mesh::EventKind::Compute, mesh::StepPhase::Forward, 0.001, 0.0025, 1.5e6, 0, -1},
                    {1, 1, mesh::EventKind::Halo, mesh::StepPhase::Forward, 0.0005, 0.0006, 0, 4096, 0},
                    {0, -1, mesh::EventKind::AllReduce, mesh::StepPhase::Update, 0.003, 0.004, 0, 1 << 20, -1}};
    const fs::path file = folder.path() / "trace.json";
    run::write_step_trace(file, trace);
    // What Perfetto reads: complete events with microsecond times, one named thread per core.
    const std::string text = read_text(file);
    EXPECT_NE(text.find("\"ph\":\"X\""), std::string::npos);
    EXPECT_NE(text.find("\"thread_name\""), std::string::npos);
    EXPECT_NE(text.find("\"ts\":1000.0"), std::string::npos);
    const run::StepTrace back = run::read_step_trace(file);
    EXPECT_EQ(back.step, 12);
    EXPECT_EQ(back.num_cores, 2);
    EXPECT_EQ(back.layer_names, trace.layer_names);
    ASSERT_EQ(back.events.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(back.events[i].core, trace.events[i].core);
        EXPECT_EQ(back.events[i].layer, trace.events[i].layer);
        EXPECT_EQ(back.events[i].kind, trace.events[i].kind);
        EXPECT_EQ(back.events[i].phase, trace.events[i].phase);
        EXPECT_NEAR(back.events[i].start_seconds, trace.events[i].start_seconds, 1e-12);
        EXPECT_NEAR(back.events[i].end_seconds, trace.events[i].end_seconds, 1e-12);
        EXPECT_EQ(back.events[i].bytes, trace.events[i].bytes);
        EXPECT_EQ(back.events[i].peer, trace.events[i].peer);
    }
    EXPECT_EQ(run::event_name(back, back.events[0]), "enc1.conv1");
    EXPECT_EQ(run::event_name(back, back.events[2]), "all-reduce");

    std::ofstream(folder.path() / "other.json") << R"({"traceEvents": []})";
    try {
        run::read_step_trace(folder.path() / "other.json");
        FAIL() << "a trace another tool wrote was read";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("not a step trace Tessera wrote"), std::string::npos) << error.what();
    }
}

TEST(RunReport, HoldsEveryPartSelfContainedWithTheRunsOwnNumbers) {
    TemporaryFolder folder("report_whole");
    const fs::path model_dir = trained_run(folder);

    // What the run wrote for the report: a session start record and the step before the last checkpoint.
    const run::MetricsHistory history = run::read_metrics(model_dir);
    ASSERT_EQ(history.starts.size(), 1u);
    EXPECT_EQ(history.starts[0].num_cores, 4);
    EXPECT_EQ(history.starts[0].layout, "2 replicas × input_partition_dims [1, 2, 1, 1]");
    ASSERT_EQ(history.evals.size(), 2u);
    ASSERT_EQ(history.evals.back().images.size(), 2u);
    const run::StepTrace trace = run::read_step_trace(model_dir / run::step_trace_file_name);
    EXPECT_EQ(trace.step, 4);
    EXPECT_EQ(trace.num_cores, 4);
    std::set<std::int64_t> cores;
    bool has_halo = false;
    for (const mesh::CoreEvent& e : trace.events) {
        cores.insert(e.core);
        has_halo |= e.kind == mesh::EventKind::Halo;
    }
    EXPECT_EQ(cores.size(), 4u);
    EXPECT_TRUE(has_halo);

    const fs::path out = folder.path() / "report.html";
    const report::ReportResult result = report::write_run_report(model_dir, out);
    EXPECT_TRUE(result.omissions.empty()) << result.omissions.front();
    const std::string html = read_text(out);
    EXPECT_EQ(html, result.html);
    for (const char* id : {"overview", "partition", "curves", "step-time", "memory", "timeline", "evaluation", "experiment"}) {
        EXPECT_NE(html.find("<section id=\"" + std::string(id) + "\">"), std::string::npos) << id;
    }
    EXPECT_NE(html.find("Best case"), std::string::npos);
    EXPECT_NE(html.find("Worst case"), std::string::npos);
    EXPECT_NE(html.find("Step 4 on every simulated core"), std::string::npos);
    EXPECT_NE(html.find("input_partition_dims [[1, 2, 1, 1], None]"), std::string::npos);
    // The partition: each of a replica's two cores drawn with its halo band.
    EXPECT_NE(html.find(">core 0</text>"), std::string::npos);
    EXPECT_NE(html.find(">core 1</text>"), std::string::npos);
    EXPECT_NE(html.find("halo read by"), std::string::npos);

    // Self-contained: no script, and every image, style or link inline (the SVG namespace is a name, not a fetch).
    EXPECT_EQ(html.find("<script"), std::string::npos);
    const std::string without_namespace = std::regex_replace(html, std::regex("xmlns=\"http://www.w3.org/2000/svg\""), "");
    EXPECT_EQ(without_namespace.find("http:"), std::string::npos);
    EXPECT_EQ(without_namespace.find("https:"), std::string::npos);
    const std::regex reference("(src|href)=\"([^\"#][^\"]*)\"|url\\(\"?([^\")]*)");
    int inline_images = 0;
    for (auto it = std::sregex_iterator(html.begin(), html.end(), reference); it != std::sregex_iterator(); ++it) {
        const std::string target = (*it)[2].matched ? (*it)[2].str() : (*it)[3].str();
        EXPECT_TRUE(target.starts_with("data:image/png;base64,")) << target.substr(0, 80);
        ++inline_images;
    }
    EXPECT_GE(inline_images, 1 + 2 * 4);  // the partition's backdrop; per case a backdrop and three overlays

    // Each held-out case's Dice as computed here from its files.
    const run::EvalRecord& eval = history.evals.back();
    for (std::size_t i = 0; i < eval.predictions.size(); ++i) {
        const double dice = membrane_dice(eval.predictions[i], eval.truths[i]);
        const std::string row = "<tr><td>" + eval.predictions[i].filename().string() + "</td><td>" + four_decimals(dice) + "</td>";
        EXPECT_NE(html.find(row), std::string::npos) << row;
    }
    // The last step's loss and the class table's scores as metrics.jsonl has them.
    EXPECT_NE(html.find(four_decimals(history.steps.back().loss) + " at step 4"), std::string::npos);
    EXPECT_NE(html.find("<td>" + four_decimals(eval.mean_dice) + "</td>"), std::string::npos);
}

TEST(RunReport, SaysWhatItLeavesOutAndWhy) {
    TemporaryFolder folder("report_partial");
    const fs::path model_dir = trained_run(folder);
    // A folder from before reports: no start records, no step trace; and no evaluation yet.
    std::stringstream kept;
    for (std::istringstream lines(read_text(model_dir / "metrics.jsonl")); !lines.eof();) {
        std::string line;
        std::getline(lines, line);
        if (line.find("\"kind\":\"train\"") != std::string::npos) kept << line << "\n";
    }
    std::ofstream(model_dir / "metrics.jsonl", std::ios::trunc) << kept.str();
    fs::remove(model_dir / run::step_trace_file_name);
    const report::ReportResult result = report::render_run_report(model_dir);
    auto mentions = [&](const std::string& text) {
        for (const std::string& omission : result.omissions) {
            if (omission.find(text) != std::string::npos) return true;
        }
        return false;
    };
    EXPECT_TRUE(mentions("No evaluation yet"));
    EXPECT_TRUE(mentions("No recorded step: step_trace.json is written at each checkpoint"));
    EXPECT_TRUE(mentions("No evaluation table"));
    EXPECT_NE(result.html.find("class=\"omitted\""), std::string::npos);
    // The rest is still there: curves, step times, memory, the partition over a blank input.
    EXPECT_NE(result.html.find("Training loss"), std::string::npos);
    EXPECT_NE(result.html.find("no held-out image in the folder yet"), std::string::npos);
}

// A detector's report: its AP table as the evaluation scored it, and its best and worst held-out images
// with every ground-truth box drawn over the image.
TEST(RunReport, ShowsADetectorsScoresAndBoxes) {
    TemporaryFolder folder("report_detector");
    const std::string json = test::small_shapes_detector_experiment();
    run::TrainingRun training(experiment::parse_experiment(json, "shapes.json"), test::options_in(folder.path() / "run"));
    training.train(nullptr);
    const report::ReportResult result = report::render_run_report(folder.path() / "run");
    EXPECT_TRUE(result.omissions.empty()) << result.omissions.front();
    const run::EvalRecord eval = run::read_metrics(folder.path() / "run").evals.back();
    ASSERT_TRUE(eval.is_detection);
    const std::string& html = result.html;
    EXPECT_NE(html.find("<th>AP50</th>"), std::string::npos);
    EXPECT_NE(html.find("<td>disc</td>"), std::string::npos);
    char ap[32];
    std::snprintf(ap, sizeof ap, "<td>%.3f</td>", eval.detection.ap);
    EXPECT_NE(html.find(ap), std::string::npos) << ap;
    EXPECT_NE(html.find("Best image"), std::string::npos);
    EXPECT_NE(html.find("Worst image"), std::string::npos);
    // Every held-out object of the two images shown is drawn: dashed boxes, one per object.
    const run::DetectionsFile boxes = run::read_detections_file(run::locate_detections_file(eval.detection.detections_file, folder.path() / "run"));
    std::size_t objects_shown = 0;
    for (const run::DetectionsFileImage& image : boxes.images) {
        if (html.find(image.name + " — F1") != std::string::npos) objects_shown += image.ground_truth.size();
    }
    std::size_t dashed = 0;
    for (std::size_t at = html.find("stroke-dasharray=\"5 3\""); at != std::string::npos; at = html.find("stroke-dasharray=\"5 3\"", at + 1)) ++dashed;
    EXPECT_GT(objects_shown, 0u);
    EXPECT_EQ(dashed, objects_shown);
    // The partition is drawn over the first held-out image.
    EXPECT_NE(html.find("over held-out image"), std::string::npos);
}

// A classifier's report: accuracy and macro F1 as the evaluation scored them, and no overlays asked for.
TEST(RunReport, ShowsAClassifiersScores) {
    TemporaryFolder folder("report_classifier");
    const std::string json = R"({"version": 1, "model": {"kind": "resnet", "depth": 18, "base_width": 8, "num_classes": 10},
        "input": {"channels": 3, "size": [32, 32]}, "global_batch": 4, "num_cores_per_replica": 1, "num_replicas": 2,
        "data": {"source": "fake_images", "num_eval_images": 4}, "steps": 2, "steps_per_eval": 2, "seed": 1})";
    run::TrainingRun training(experiment::parse_experiment(json, "classifier.json"), test::options_in(folder.path() / "run"));
    training.train(nullptr);
    const report::ReportResult result = report::render_run_report(folder.path() / "run");
    EXPECT_TRUE(result.omissions.empty()) << result.omissions.front();
    const run::EvalRecord eval = run::read_metrics(folder.path() / "run").evals.back();
    EXPECT_NE(result.html.find("<th>macro F1</th>"), std::string::npos);
    EXPECT_NE(result.html.find("<td>" + four_decimals(eval.accuracy) + "</td><td>" + four_decimals(eval.mean_dice) + "</td>"), std::string::npos);
    EXPECT_EQ(result.html.find("Best case"), std::string::npos);
    EXPECT_EQ(result.html.find("<th>Dice</th>"), std::string::npos);
}

TEST(RunReport, RefusesAFolderThatIsNotARun) {
    TemporaryFolder folder("report_not_a_run");
    try {
        report::render_run_report(folder.path());
        FAIL() << "an empty folder was reported on";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("holds no training steps in metrics.jsonl"), std::string::npos) << error.what();
        EXPECT_NE(std::string(error.what()).find("Train first"), std::string::npos) << error.what();
    }
    EXPECT_THROW(report::render_run_report(folder.path() / "missing"), Error);
}

}  // namespace
}  // namespace tessera
