#include "run/metrics_log.hpp"

#include "core/error.hpp"
#include "core/json_support.hpp"
#include "io/atomic_file.hpp"
#include "io/tensorboard_events.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace tessera::run {

namespace fs = std::filesystem;
using json::Json;

namespace {

constexpr const char* jsonl_name = "metrics.jsonl";
constexpr const char* train_csv_name = "train.csv";
constexpr const char* eval_csv_name = "eval.csv";

const std::vector<std::string> train_columns = {"step", "loss", "learning_rate", "loss_scale", "applied", "host_seconds",
                                                "predicted_seconds", "images_per_second", "halo_bytes", "peak_core_bytes",
                                                "wall_time"};

std::vector<std::string> read_lines(const fs::path& path) {
    std::vector<std::string> lines;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

void write_lines(const fs::path& path, const std::vector<std::string>& lines) {
    std::string text;
    for (const std::string& line : lines) text += line + "\n";
    io::write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())));
}

// The leading integer of a CSV row ("120,0.53,…" → 120); −1 for a header or a torn line.
std::int64_t csv_step(const std::string& line) {
    std::int64_t step = 0;
    std::size_t i = 0;
    for (; i < line.size() && line[i] >= '0' && line[i] <= '9'; ++i) step = step * 10 + (line[i] - '0');
    return i > 0 && i < line.size() && line[i] == ',' ? step : -1;
}

// Keeps what a run up to `resumed_at` wrote: every record with step ≤ resumed_at, and the CSV header.
void truncate_after(const fs::path& dir, std::int64_t resumed_at) {
    const fs::path jsonl = dir / jsonl_name;
    if (fs::exists(jsonl)) {
        std::vector<std::string> kept;
        for (const std::string& line : read_lines(jsonl)) {
            try {
                const Json record = Json::parse(line);
                if (record.value("step", std::int64_t{-1}) <= resumed_at) kept.push_back(line);
            } catch (const Json::exception&) {
                // a line torn by a kill mid-write: dropped
            }
        }
        write_lines(jsonl, kept);
    }
    for (const char* name : {train_csv_name, eval_csv_name}) {
        const fs::path csv = dir / name;
        if (!fs::exists(csv)) continue;
        const std::vector<std::string> lines = read_lines(csv);
        std::vector<std::string> kept;
        for (std::size_t i = 0; i < lines.size(); ++i) {
            const std::int64_t step = csv_step(lines[i]);
            if (i == 0 ? lines[i].starts_with("step,") : step >= 0 && step <= resumed_at) kept.push_back(lines[i]);
        }
        if (kept.size() <= 1) fs::remove(csv);  // header only: the next record writes it again
        else write_lines(csv, kept);
    }
}

void append_line(const fs::path& path, const std::string& line) {
    std::ofstream out(path, std::ios::app | std::ios::binary);
    TESSERA_CHECK(out, "cannot append to '" << path.string() << "'; check the model_dir is writable and the disk not full");
    out << line << '\n';
    out.flush();
    TESSERA_CHECK(out, "cannot write '" << path.string() << "'; check the disk is not full");
}

std::string number(double value) {
    std::ostringstream out;
    out.precision(9);
    out << value;
    return out.str();
}

std::string unix_seconds(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3f", value);
    return text;
}

std::string csv_safe(std::string name) {
    for (char& c : name) {
        if (c == ',' || c == ' ' || c == '"' || c == '\n') c = '_';
    }
    return name;
}

}  // namespace

MetricsLog::MetricsLog(const fs::path& model_dir, std::int64_t resumed_at_step) : m_dir(model_dir) {
    truncate_after(m_dir, resumed_at_step);
    m_train_events = std::make_unique<io::TensorBoardWriter>(m_dir);
    m_eval_events = std::make_unique<io::TensorBoardWriter>(m_dir / "eval");
    if (resumed_at_step > 0) {
        m_train_events->add_session_start(resumed_at_step + 1);
        m_eval_events->add_session_start(resumed_at_step + 1);
    }
    const std::vector<std::string> eval_lines = read_lines(m_dir / eval_csv_name);
    if (!eval_lines.empty()) {
        std::istringstream header(eval_lines.front());
        for (std::string column; std::getline(header, column, ',');) m_eval_columns.push_back(column);
    }
}

MetricsLog::~MetricsLog() = default;

void MetricsLog::write(const StepRecord& s) {
    const std::int64_t peak = s.core_peak_bytes.empty() ? 0 : *std::max_element(s.core_peak_bytes.begin(), s.core_peak_bytes.end());
    const Json record = {{"kind", "train"},
                         {"step", s.step},
                         {"loss", s.loss},
                         {"learning_rate", s.learning_rate},
                         {"loss_scale", s.loss_scale},
                         {"applied", s.applied},
                         {"host_seconds", s.host_seconds},
                         {"predicted_seconds", s.predicted_seconds},
                         {"images_per_second", s.images_per_second},
                         {"halo_bytes", s.halo_bytes},
                         {"core_peak_bytes", s.core_peak_bytes},
                         {"wall_time", s.wall_time}};
    append_line(m_dir / jsonl_name, record.dump());

    const fs::path csv = m_dir / train_csv_name;
    if (!fs::exists(csv)) {
        std::string header;
        for (const std::string& column : train_columns) header += (header.empty() ? "" : ",") + column;
        append_line(csv, header);
    }
    append_line(csv, std::to_string(s.step) + "," + number(s.loss) + "," + number(s.learning_rate) + "," + number(s.loss_scale) + "," +
                         (s.applied ? "1" : "0") + "," + number(s.host_seconds) + "," + number(s.predicted_seconds) + "," +
                         number(s.images_per_second) + "," + std::to_string(s.halo_bytes) + "," + std::to_string(peak) + "," +
                         unix_seconds(s.wall_time));

    m_train_events->add_scalar("loss", s.loss, s.step, s.wall_time);
    m_train_events->add_scalar("learning_rate", s.learning_rate, s.step, s.wall_time);
    m_train_events->add_scalar("loss_scale", s.loss_scale, s.step, s.wall_time);
    m_train_events->add_scalar("step_time/host_seconds", s.host_seconds, s.step, s.wall_time);
    m_train_events->add_scalar("step_time/predicted_seconds", s.predicted_seconds, s.step, s.wall_time);
    m_train_events->add_scalar("images_per_second", s.images_per_second, s.step, s.wall_time);
    m_train_events->add_scalar("memory/peak_core_gib", static_cast<double>(peak) / static_cast<double>(1LL << 30), s.step, s.wall_time);
}

namespace {

// -1 (no ground truth) is written as an empty CSV cell.
std::string score_cell(double value) { return value < 0 ? std::string() : number(value); }

Json detection_json(const DetectionEvalRecord& d) {
    Json classes = Json::array();
    for (const DetectionClassRecord& c : d.classes) {
        classes.push_back({{"name", c.name}, {"num_ground_truth", c.num_ground_truth}, {"ap", c.ap}, {"ap50", c.ap50}, {"ap75", c.ap75},
                           {"recall", c.recall}, {"precision_at_iou_50", c.precision_at_iou_50}});
    }
    return {{"ap", d.ap}, {"ap50", d.ap50}, {"ap75", d.ap75}, {"ar100", d.ar100}, {"ap_small", d.ap_small},
            {"ap_medium", d.ap_medium}, {"ap_large", d.ap_large}, {"num_ground_truth", d.num_ground_truth},
            {"num_detections", d.num_detections}, {"num_true_positives", d.num_true_positives}, {"classes", classes},
            {"detections_file", d.detections_file.string()}};
}

}  // namespace

void MetricsLog::write(const RunStart& start) {
    const Json record = {{"kind", "start"},
                         {"step", start.first_step},
                         {"experiment", start.experiment},
                         {"model_dir", start.model_dir.string()},
                         {"total_steps", start.total_steps},
                         {"resumed", start.resumed},
                         {"layout", start.layout},
                         {"num_cores", start.num_cores},
                         {"cores_per_replica", start.cores_per_replica},
                         {"num_replicas", start.num_replicas},
                         {"ranks", start.ranks},
                         {"device", start.device},
                         {"predicted_step_seconds", start.predicted_step_seconds},
                         {"predicted_host_step_seconds", start.predicted_host_step_seconds},
                         {"host_prediction_uncertainty_seconds", start.host_prediction_uncertainty_seconds},
                         {"core_memory_bytes", start.core_memory_bytes},
                         {"core_capacity_bytes", start.core_capacity_bytes},
                         {"host_memory_bytes", start.host_memory_bytes},
                         {"host_memory_budget_bytes", start.host_memory_budget_bytes},
                         {"data", start.data},
                         {"notes", start.notes}};
    append_line(m_dir / jsonl_name, record.dump());
}

void MetricsLog::write(const EvalRecord& e) {
    Json classes = Json::array();
    for (const ClassRecord& c : e.classes) classes.push_back({{"name", c.name}, {"present", c.is_present}, {"dice", c.dice}, {"iou", c.iou}});
    Json predictions = Json::array();
    for (const fs::path& p : e.predictions) predictions.push_back(p.string());
    Json images = Json::array(), truths = Json::array();
    for (const fs::path& p : e.images) images.push_back(p.string());
    for (const fs::path& p : e.truths) truths.push_back(p.string());
    Json record = {{"kind", "eval"},       {"step", e.step},         {"loss", e.loss},
                   {"mean_dice", e.mean_dice}, {"mean_iou", e.mean_iou}, {"accuracy", e.accuracy},
                   {"classes", classes},   {"num_examples", e.num_examples}, {"seconds", e.seconds},
                   {"predictions", predictions}, {"images", images}, {"truths", truths}, {"wall_time", e.wall_time}};
    if (e.is_detection) {
        record.erase("mean_dice");
        record.erase("mean_iou");
        record.erase("accuracy");
        record["detection"] = detection_json(e.detection);
    }
    append_line(m_dir / jsonl_name, record.dump());

    std::vector<std::string> columns = {"step", "loss"};
    std::vector<std::string> values = {std::to_string(e.step), number(e.loss)};
    if (e.is_detection) {
        const DetectionEvalRecord& d = e.detection;
        columns.insert(columns.end(), {"ap", "ap50", "ap75", "ar100", "ap_small", "ap_medium", "ap_large", "num_ground_truth",
                                       "num_detections", "num_true_positives"});
        values.insert(values.end(), {score_cell(d.ap), score_cell(d.ap50), score_cell(d.ap75), score_cell(d.ar100),
                                     score_cell(d.ap_small), score_cell(d.ap_medium), score_cell(d.ap_large),
                                     std::to_string(d.num_ground_truth), std::to_string(d.num_detections),
                                     std::to_string(d.num_true_positives)});
        for (const DetectionClassRecord& c : d.classes) {
            columns.push_back("ap_" + csv_safe(c.name));
            values.push_back(score_cell(c.ap));
            columns.push_back("ap50_" + csv_safe(c.name));
            values.push_back(score_cell(c.ap50));
        }
    } else {
        columns.insert(columns.end(), {"mean_dice", "mean_iou", "accuracy"});
        values.insert(values.end(), {number(e.mean_dice), number(e.mean_iou), number(e.accuracy)});
        for (const ClassRecord& c : e.classes) {
            columns.push_back("dice_" + csv_safe(c.name));
            values.push_back(c.is_present ? number(c.dice) : "");
            columns.push_back("iou_" + csv_safe(c.name));
            values.push_back(c.is_present ? number(c.iou) : "");
        }
    }
    columns.insert(columns.end(), {"num_examples", "seconds", "wall_time"});
    values.insert(values.end(), {std::to_string(e.num_examples), number(e.seconds), unix_seconds(e.wall_time)});
    const fs::path csv = m_dir / eval_csv_name;
    if (m_eval_columns.empty() || !fs::exists(csv)) {
        m_eval_columns = columns;
        std::string header;
        for (const std::string& column : columns) header += (header.empty() ? "" : ",") + column;
        if (fs::exists(csv)) fs::remove(csv);
        append_line(csv, header);
    }
    TESSERA_ASSERT(columns == m_eval_columns, "the evaluation's classes changed during a run");
    std::string row;
    for (std::size_t i = 0; i < values.size(); ++i) row += (i ? "," : "") + values[i];
    append_line(csv, row);

    m_eval_events->add_scalar("loss", e.loss, e.step, e.wall_time);
    if (e.is_detection) {
        const DetectionEvalRecord& d = e.detection;
        // TensorBoard's names for COCO scores, as the TF Object Detection API writes them.
        const std::pair<const char*, double> scores[] = {
            {"DetectionBoxes_Precision/mAP", d.ap},          {"DetectionBoxes_Precision/mAP@.50IOU", d.ap50},
            {"DetectionBoxes_Precision/mAP@.75IOU", d.ap75}, {"DetectionBoxes_Precision/mAP (small)", d.ap_small},
            {"DetectionBoxes_Precision/mAP (medium)", d.ap_medium}, {"DetectionBoxes_Precision/mAP (large)", d.ap_large},
            {"DetectionBoxes_Recall/AR@100", d.ar100}};
        for (const auto& [name, value] : scores) {
            if (value >= 0) m_eval_events->add_scalar(name, value, e.step, e.wall_time);
        }
        m_eval_events->add_scalar("detections/count", static_cast<double>(d.num_detections), e.step, e.wall_time);
        m_eval_events->add_scalar("detections/true_positives", static_cast<double>(d.num_true_positives), e.step, e.wall_time);
        for (const DetectionClassRecord& c : d.classes) {
            if (c.ap >= 0) m_eval_events->add_scalar("DetectionBoxes_PerformanceByCategory/mAP/" + c.name, c.ap, e.step, e.wall_time);
        }
        return;
    }
    m_eval_events->add_scalar("mean_dice", e.mean_dice, e.step, e.wall_time);
    m_eval_events->add_scalar("mean_iou", e.mean_iou, e.step, e.wall_time);
    m_eval_events->add_scalar("accuracy", e.accuracy, e.step, e.wall_time);
    for (const ClassRecord& c : e.classes) {
        if (!c.is_present) continue;
        m_eval_events->add_scalar("dice/" + c.name, c.dice, e.step, e.wall_time);
        m_eval_events->add_scalar("iou/" + c.name, c.iou, e.step, e.wall_time);
    }
}

void MetricsLog::flush() {
    m_train_events->flush();
    m_eval_events->flush();
}

namespace {

// One metrics.jsonl record into the history (throws Json::exception for fields of the wrong type).
void read_record(const Json& record, MetricsHistory& history) {
    const std::string kind = record.value("kind", "");
    if (kind == "train") {
        StepRecord s;
        s.step = record.value("step", std::int64_t{0});
        s.loss = record.value("loss", 0.0);
        s.learning_rate = record.value("learning_rate", 0.0);
        s.loss_scale = record.value("loss_scale", 1.0);
        s.applied = record.value("applied", true);
        s.host_seconds = record.value("host_seconds", 0.0);
        s.predicted_seconds = record.value("predicted_seconds", 0.0);
        s.images_per_second = record.value("images_per_second", 0.0);
        s.halo_bytes = record.value("halo_bytes", std::int64_t{0});
        if (record.contains("core_peak_bytes")) s.core_peak_bytes = record["core_peak_bytes"].get<std::vector<std::int64_t>>();
        s.wall_time = record.value("wall_time", 0.0);
        history.steps.push_back(std::move(s));
    } else if (kind == "eval") {
        EvalRecord e;
        e.step = record.value("step", std::int64_t{0});
        e.loss = record.value("loss", 0.0);
        e.mean_dice = record.value("mean_dice", 0.0);
        e.mean_iou = record.value("mean_iou", 0.0);
        e.accuracy = record.value("accuracy", 0.0);
        e.num_examples = record.value("num_examples", std::int64_t{0});
        e.seconds = record.value("seconds", 0.0);
        e.wall_time = record.value("wall_time", 0.0);
        if (record.contains("classes")) {
            for (const Json& c : record["classes"]) {
                e.classes.push_back({c.value("name", ""), c.value("present", false), c.value("dice", 0.0), c.value("iou", 0.0)});
            }
        }
        if (record.contains("predictions")) {
            for (const Json& p : record["predictions"]) e.predictions.emplace_back(p.get<std::string>());
        }
        if (record.contains("images")) {
            for (const Json& p : record["images"]) e.images.emplace_back(p.get<std::string>());
        }
        if (record.contains("truths")) {
            for (const Json& p : record["truths"]) e.truths.emplace_back(p.get<std::string>());
        }
        if (record.contains("detection")) {
            const Json& d = record["detection"];
            e.is_detection = true;
            DetectionEvalRecord& r = e.detection;
            r.ap = d.value("ap", -1.0);
            r.ap50 = d.value("ap50", -1.0);
            r.ap75 = d.value("ap75", -1.0);
            r.ar100 = d.value("ar100", -1.0);
            r.ap_small = d.value("ap_small", -1.0);
            r.ap_medium = d.value("ap_medium", -1.0);
            r.ap_large = d.value("ap_large", -1.0);
            r.num_ground_truth = d.value("num_ground_truth", std::int64_t{0});
            r.num_detections = d.value("num_detections", std::int64_t{0});
            r.num_true_positives = d.value("num_true_positives", std::int64_t{0});
            r.detections_file = d.value("detections_file", std::string());
            if (d.contains("classes")) {
                for (const Json& c : d["classes"]) {
                    DetectionClassRecord cls;
                    cls.name = c.value("name", "");
                    cls.num_ground_truth = c.value("num_ground_truth", std::int64_t{0});
                    cls.ap = c.value("ap", -1.0);
                    cls.ap50 = c.value("ap50", -1.0);
                    cls.ap75 = c.value("ap75", -1.0);
                    cls.recall = c.value("recall", -1.0);
                    if (c.contains("precision_at_iou_50")) cls.precision_at_iou_50 = c["precision_at_iou_50"].get<std::vector<double>>();
                    r.classes.push_back(std::move(cls));
                }
            }
        }
        history.evals.push_back(std::move(e));
    } else if (kind == "start") {
        RunStart start;
        start.first_step = record.value("step", std::int64_t{0});
        start.experiment = record.value("experiment", "");
        start.model_dir = record.value("model_dir", "");
        start.total_steps = record.value("total_steps", std::int64_t{0});
        start.resumed = record.value("resumed", false);
        start.layout = record.value("layout", "");
        start.num_cores = record.value("num_cores", std::int64_t{1});
        start.cores_per_replica = record.value("cores_per_replica", std::int64_t{1});
        start.num_replicas = record.value("num_replicas", std::int64_t{1});
        start.ranks = record.value("ranks", "");
        start.device = record.value("device", "");
        start.predicted_step_seconds = record.value("predicted_step_seconds", 0.0);
        start.predicted_host_step_seconds = record.value("predicted_host_step_seconds", 0.0);
        start.host_prediction_uncertainty_seconds = record.value("host_prediction_uncertainty_seconds", 0.0);
        start.core_memory_bytes = record.value("core_memory_bytes", std::vector<std::int64_t>{});
        start.core_capacity_bytes = record.value("core_capacity_bytes", std::int64_t{0});
        start.host_memory_bytes = record.value("host_memory_bytes", std::int64_t{0});
        start.host_memory_budget_bytes = record.value("host_memory_budget_bytes", std::int64_t{0});
        start.data = record.value("data", "");
        start.notes = record.value("notes", std::vector<std::string>{});
        history.starts.push_back(std::move(start));
    }
}

}  // namespace

MetricsHistory read_metrics(const fs::path& model_dir) {
    MetricsHistory history;
    for (const std::string& line : read_lines(model_dir / jsonl_name)) {
        // A line torn by a kill, or one with fields of the wrong type (an edited file), is skipped:
        // the studio opens what it can.
        try {
            read_record(Json::parse(line), history);
        } catch (const Json::exception&) {
            continue;
        }
    }
    return history;
}

}  // namespace tessera::run
