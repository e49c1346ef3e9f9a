#include "model/run_series.hpp"

#include "cost/device.hpp"
#include "experiment/experiment.hpp"
#include "run/metrics_log.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>

namespace tessera::ui {

// ---- RunSeries ---------------------------------------------------------------------------------------------

void RunSeries::addStep(const run::StepRecord& step) {
    if (!m_step_numbers.empty() && step.step <= m_step_numbers.back()) truncateFrom(step.step);
    m_step_numbers.push_back(step.step);
    m_steps.push_back(static_cast<double>(step.step));
    m_wall_times.push_back(step.wall_time);
    m_values[static_cast<int>(Metric::Loss)].push_back(step.loss);
    m_values[static_cast<int>(Metric::LearningRate)].push_back(step.learning_rate);
    m_values[static_cast<int>(Metric::LossScale)].push_back(step.loss_scale);
    m_values[static_cast<int>(Metric::HostSeconds)].push_back(step.host_seconds);
    m_values[static_cast<int>(Metric::PredictedSeconds)].push_back(step.predicted_seconds);
    m_values[static_cast<int>(Metric::ImagesPerSecond)].push_back(step.images_per_second);
    if (!step.core_peak_bytes.empty()) {
        m_core_peak_bytes = step.core_peak_bytes;  // reuses the vector's storage: no allocation per step
        m_memory_step = step.step;
    }
}

void RunSeries::addEval(const run::EvalRecord& eval) {
    if (!m_evals.empty() && eval.step <= m_evals.back().step) {
        std::erase_if(m_evals, [&](const EvalPoint& point) { return point.step >= eval.step; });
    }
    const run::DetectionEvalRecord& d = eval.detection;
    m_evals.push_back({.step = eval.step,
                       .wall_time = eval.wall_time,
                       .loss = eval.loss,
                       .mean_dice = eval.mean_dice,
                       .is_detection = eval.is_detection,
                       .ap = eval.is_detection ? d.ap : -1,
                       .ap50 = eval.is_detection ? d.ap50 : -1,
                       .num_detections = d.num_detections,
                       .num_true_positives = d.num_true_positives,
                       .num_ground_truth = d.num_ground_truth});
}

void RunSeries::setCoreMemory(std::vector<std::int64_t> peak_bytes, std::int64_t capacity_bytes) {
    m_core_peak_bytes = std::move(peak_bytes);
    m_memory_step = -1;
    if (capacity_bytes > 0) m_core_capacity_bytes = capacity_bytes;
}

void RunSeries::clear() { *this = RunSeries(); }

void RunSeries::truncateFrom(std::int64_t step) {
    const auto kept = static_cast<std::size_t>(std::lower_bound(m_step_numbers.begin(), m_step_numbers.end(), step) - m_step_numbers.begin());
    m_step_numbers.resize(kept);
    m_steps.resize(kept);
    m_wall_times.resize(kept);
    for (std::vector<double>& values : m_values) values.resize(kept);
    std::erase_if(m_evals, [&](const EvalPoint& point) { return point.step >= step; });
    if (m_memory_step >= step) m_memory_step = m_step_numbers.empty() ? -1 : m_step_numbers.back();
}

double RunSeries::startWallTime() const {
    double start = std::numeric_limits<double>::infinity();
    if (!m_wall_times.empty()) start = m_wall_times.front();
    if (!m_evals.empty()) start = std::min(start, m_evals.front().wall_time);
    return std::isfinite(start) ? start : 0.0;
}

std::vector<double> RunSeries::relativeWallTimes() const {
    const double start = startWallTime();
    std::vector<double> seconds(m_wall_times.size());
    std::transform(m_wall_times.begin(), m_wall_times.end(), seconds.begin(), [start](double t) { return t - start; });
    return seconds;
}

RunSeries RunSeries::load(const std::filesystem::path& model_dir) {
    const run::MetricsHistory history = run::read_metrics(model_dir);
    RunSeries series;
    for (const run::StepRecord& step : history.steps) series.addStep(step);
    for (const run::EvalRecord& eval : history.evals) series.addEval(eval);
    // The capacity of a core: from the device the run's experiment names, when it can be read.
    try {
        std::ifstream in(model_dir / "experiment.json");
        if (in) {
            std::ostringstream text;
            text << in.rdbuf();
            const experiment::Experiment experiment = experiment::parse_experiment(text.str(), (model_dir / "experiment.json").string());
            series.m_core_capacity_bytes = cost::load_device_preset(experiment.device).memory_per_core;
        }
    } catch (const std::exception&) {
        // an experiment this build cannot read: the memory chart shows no capacity line
    }
    return series;
}

// ---- smoothing and decimation ------------------------------------------------------------------------------

std::vector<double> smoothEma(std::span<const double> values, double weight) {
    std::vector<double> smoothed(values.begin(), values.end());
    weight = std::clamp(weight, 0.0, 0.999);
    if (weight == 0.0 || values.empty()) return smoothed;
    // A constant series stays exactly constant (the debiased average would differ in the last bits).
    if (std::all_of(values.begin(), values.end(), [&](double v) { return v == values.front(); })) return smoothed;
    double last = 0, decay = 1;  // decay = wⁿ over the n finite values so far
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (!std::isfinite(values[i])) continue;
        last = last * weight + (1.0 - weight) * values[i];
        decay *= weight;
        smoothed[i] = last / (1.0 - decay);
    }
    return smoothed;
}

QList<QPointF> decimateMinMax(std::span<const double> x, std::span<const double> y, int max_points, bool positive_only) {
    const std::size_t n = std::min(x.size(), y.size());
    const auto usable = [&](std::size_t i) { return std::isfinite(y[i]) && (!positive_only || y[i] > 0); };
    QList<QPointF> points;
    const std::size_t cap = static_cast<std::size_t>(std::max(max_points, 4));
    if (n <= cap) {
        points.reserve(static_cast<qsizetype>(n));
        for (std::size_t i = 0; i < n; ++i) {
            if (usable(i)) points.append(QPointF(x[i], y[i]));
        }
        return points;
    }
    std::size_t first = 0, end = n;
    while (first < n && !usable(first)) ++first;
    while (end > first && !usable(end - 1)) --end;
    if (first >= end) return points;
    const std::size_t last = end - 1;
    const std::size_t buckets = (cap - 2) / 2;
    points.reserve(static_cast<qsizetype>(2 * buckets + 2));
    points.append(QPointF(x[first], y[first]));
    // The points strictly between the first and the last, in `buckets` runs of (nearly) equal length.
    const std::size_t inner_begin = first + 1, inner = last > first ? last - first - 1 : 0;
    for (std::size_t b = 0; b < buckets && inner > 0; ++b) {
        const std::size_t begin = inner_begin + b * inner / buckets, stop = inner_begin + (b + 1) * inner / buckets;
        std::size_t low = stop, high = stop;
        for (std::size_t i = begin; i < stop; ++i) {
            if (!usable(i)) continue;
            if (low == stop || y[i] < y[low]) low = i;
            if (high == stop || y[i] > y[high]) high = i;
        }
        if (low == stop) continue;
        const std::size_t a = std::min(low, high), c = std::max(low, high);
        points.append(QPointF(x[a], y[a]));
        if (c != a) points.append(QPointF(x[c], y[c]));
    }
    if (last != first) points.append(QPointF(x[last], y[last]));
    return points;
}

// ---- CSV ----------------------------------------------------------------------------------------------------

QString runColumnName(RunColumn column) {
    switch (column) {
        case RunColumn::Loss: return QStringLiteral("loss");
        case RunColumn::SmoothedLoss: return QStringLiteral("smoothed_loss");
        case RunColumn::EvalLoss: return QStringLiteral("eval_loss");
        case RunColumn::EvalMeanDice: return QStringLiteral("eval_mean_dice");
        case RunColumn::EvalAp: return QStringLiteral("eval_ap");
        case RunColumn::EvalAp50: return QStringLiteral("eval_ap50");
        case RunColumn::EvalDetections: return QStringLiteral("eval_detections");
        case RunColumn::EvalTruePositives: return QStringLiteral("eval_true_positives");
        case RunColumn::EvalObjects: return QStringLiteral("eval_objects");
        case RunColumn::LearningRate: return QStringLiteral("learning_rate");
        case RunColumn::LossScale: return QStringLiteral("loss_scale");
        case RunColumn::HostSeconds: return QStringLiteral("host_seconds");
        case RunColumn::PredictedSeconds: return QStringLiteral("predicted_seconds");
        case RunColumn::ImagesPerSecond: return QStringLiteral("images_per_second");
    }
    return {};
}

std::string csvField(const QString& text) {
    const std::string utf8 = text.toStdString();
    if (utf8.find_first_of(",\"\r\n") == std::string::npos) return utf8;
    std::string quoted("\"");
    for (const char c : utf8) {
        if (c == '"') quoted.push_back('"');
        quoted.push_back(c);
    }
    quoted.push_back('"');
    return quoted;
}

std::string exactNumber(double value) {
    if (std::isnan(value)) return {};
    char buffer[64];
    const auto [end, error] = std::to_chars(std::begin(buffer), std::end(buffer), value);
    return error == std::errc() ? std::string(buffer, end) : std::string();
}

namespace {

std::optional<RunSeries::Metric> metricOf(RunColumn column) {
    switch (column) {
        case RunColumn::Loss: return RunSeries::Metric::Loss;
        case RunColumn::LearningRate: return RunSeries::Metric::LearningRate;
        case RunColumn::LossScale: return RunSeries::Metric::LossScale;
        case RunColumn::HostSeconds: return RunSeries::Metric::HostSeconds;
        case RunColumn::PredictedSeconds: return RunSeries::Metric::PredictedSeconds;
        case RunColumn::ImagesPerSecond: return RunSeries::Metric::ImagesPerSecond;
        default: return std::nullopt;
    }
}

bool isEvalColumn(RunColumn column) {
    switch (column) {
        case RunColumn::EvalLoss:
        case RunColumn::EvalMeanDice:
        case RunColumn::EvalAp:
        case RunColumn::EvalAp50:
        case RunColumn::EvalDetections:
        case RunColumn::EvalTruePositives:
        case RunColumn::EvalObjects: return true;
        default: return false;
    }
}

// An evaluation's value in an eval column; empty where it has none (a detector's Dice, a segmenter's AP,
// an AP undefined for want of held-out objects).
std::string evalField(RunColumn column, const RunSeries::EvalPoint& eval) {
    const auto score = [](double value) { return value < 0 ? std::string() : exactNumber(value); };
    switch (column) {
        case RunColumn::EvalLoss: return exactNumber(eval.loss);
        case RunColumn::EvalMeanDice: return eval.is_detection ? std::string() : exactNumber(eval.mean_dice);
        case RunColumn::EvalAp: return eval.is_detection ? score(eval.ap) : std::string();
        case RunColumn::EvalAp50: return eval.is_detection ? score(eval.ap50) : std::string();
        case RunColumn::EvalDetections: return eval.is_detection ? std::to_string(eval.num_detections) : std::string();
        case RunColumn::EvalTruePositives: return eval.is_detection ? std::to_string(eval.num_true_positives) : std::string();
        case RunColumn::EvalObjects: return eval.is_detection ? std::to_string(eval.num_ground_truth) : std::string();
        default: return {};
    }
}

}  // namespace

std::string runsCsv(const std::vector<NamedRunSeries>& runs, const std::vector<RunColumn>& columns, double smoothing) {
    std::string csv("run,step,wall_time");
    for (const RunColumn column : columns) csv.append(",").append(runColumnName(column).toStdString());
    csv.push_back('\n');
    const bool wants_eval = std::any_of(columns.begin(), columns.end(), isEvalColumn);
    for (const NamedRunSeries& named : runs) {
        const RunSeries& series = *named.series;
        const std::string name = csvField(named.name);
        const std::vector<double> smoothed =
            std::find(columns.begin(), columns.end(), RunColumn::SmoothedLoss) != columns.end()
                ? smoothEma(series.values(RunSeries::Metric::Loss), smoothing)
                : std::vector<double>();
        const std::vector<RunSeries::EvalPoint>& evals = series.evals();
        std::size_t next_eval = 0;
        // One row: the step at index `step` (or none), the evaluation `eval` (or none).
        const auto row = [&](const RunSeries::EvalPoint* eval, std::optional<std::size_t> step) {
            csv.append(name).append(",");
            csv.append(std::to_string(step ? series.stepNumbers()[*step] : eval->step)).append(",");
            csv.append(exactNumber(step ? series.wallTimes()[*step] : eval->wall_time));
            for (const RunColumn column : columns) {
                csv.push_back(',');
                if (column == RunColumn::SmoothedLoss) {
                    if (step) csv.append(exactNumber(smoothed[*step]));
                } else if (const auto metric = metricOf(column)) {
                    if (step) csv.append(exactNumber(series.values(*metric)[*step]));
                } else if (eval) {
                    csv.append(evalField(column, *eval));
                }
            }
            csv.push_back('\n');
        };
        for (std::size_t i = 0; i < series.size(); ++i) {
            const std::int64_t step = series.stepNumbers()[i];
            // Evaluations of steps no training record has (before the first step, say): rows of their own.
            while (wants_eval && next_eval < evals.size() && evals[next_eval].step < step) row(&evals[next_eval++], std::nullopt);
            const RunSeries::EvalPoint* eval = nullptr;
            if (wants_eval && next_eval < evals.size() && evals[next_eval].step == step) eval = &evals[next_eval++];
            row(eval, i);
        }
        while (wants_eval && next_eval < evals.size()) row(&evals[next_eval++], std::nullopt);
    }
    return csv;
}

std::string coreMemoryCsv(const std::vector<NamedRunSeries>& runs) {
    std::size_t cores = 0;
    for (const NamedRunSeries& named : runs) cores = std::max(cores, named.series->corePeakBytes().size());
    std::string csv("run,step,wall_time,capacity_bytes");
    for (std::size_t core = 0; core < cores; ++core) csv.append(",core_").append(std::to_string(core)).append("_peak_bytes");
    csv.push_back('\n');
    for (const NamedRunSeries& named : runs) {
        const RunSeries& series = *named.series;
        if (series.corePeakBytes().empty()) continue;
        csv.append(csvField(named.name)).append(",");
        if (series.memoryStep() >= 0) {
            const auto found = std::lower_bound(series.stepNumbers().begin(), series.stepNumbers().end(), series.memoryStep());
            csv.append(std::to_string(series.memoryStep())).append(",");
            if (found != series.stepNumbers().end()) {
                csv.append(exactNumber(series.wallTimes()[static_cast<std::size_t>(found - series.stepNumbers().begin())]));
            }
        } else {
            csv.append(",");
        }
        csv.append(",");
        if (series.coreCapacityBytes() > 0) csv.append(std::to_string(series.coreCapacityBytes()));
        for (std::size_t core = 0; core < cores; ++core) {
            csv.push_back(',');
            if (core < series.corePeakBytes().size()) csv.append(std::to_string(series.corePeakBytes()[core]));
        }
        csv.push_back('\n');
    }
    return csv;
}

}  // namespace tessera::ui
