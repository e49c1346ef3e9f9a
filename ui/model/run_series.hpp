// RunSeries: one training run's metrics as the studio's charts need them — every step and evaluation a
// run reports (or a finished run's metrics.jsonl holds), kept whole, column by column, so a chart can
// smooth, decimate and export them without touching the run.
//
// The charts never draw all of a long run: decimateMinMax() keeps at most a few thousand points per
// curve, the smallest and largest of each bucket, so a spike of one step stays visible; smoothEma() is
// TensorBoard's smoothing slider. runsCsv() writes the data itself (not what a chart draws).
//
//   RunSeries series;
//   series.addStep(step_record);                     // once per step, cheap
//   const std::vector<double> smooth = smoothEma(series.values(RunSeries::Metric::Loss), 0.6);
//   const QList<QPointF> points = decimateMinMax(series.steps(), smooth, 2000, /*positive_only*/ false);
//   line->replace(points);
#pragma once

#include "run/run_records.hpp"

#include <QList>
#include <QPointF>
#include <QString>

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace tessera::ui {

class RunSeries {
public:
    // The per-step values kept, one vector each.
    enum class Metric { Loss, LearningRate, LossScale, HostSeconds, PredictedSeconds, ImagesPerSecond };
    static constexpr int metric_count = 6;

    struct EvalPoint {
        std::int64_t step = 0;
        double wall_time = 0;  // seconds since the Unix epoch
        double loss = 0;
        double mean_dice = 0;
        bool is_detection = false;  // a detector's evaluation: no Dice, but AP and box counts
        double ap = -1, ap50 = -1;  // AP@[.5:.95] and AP at IoU 0.5 (−1: undefined, no held-out objects)
        std::int64_t num_detections = 0, num_true_positives = 0, num_ground_truth = 0;  // boxes over the held-out images
    };

    // Appends a step. A step at or before the last one (a run resumed from an earlier checkpoint) first
    // drops every step and evaluation from that step on, as TensorBoard does with orphaned points.
    void addStep(const run::StepRecord& step);
    // Appends an evaluation (one at or before the last evaluation's step replaces those from it on).
    void addEval(const run::EvalRecord& eval);
    // The simulated cores' peaks (bytes, one per core) and a core's capacity (bytes; 0: unknown). A step
    // that carries core_peak_bytes updates the peaks; a capacity of 0 keeps the one known.
    void setCoreMemory(std::vector<std::int64_t> peak_bytes, std::int64_t capacity_bytes);
    void clear();

    bool isEmpty() const { return m_step_numbers.empty() && m_evals.empty(); }
    std::size_t size() const { return m_step_numbers.size(); }  // steps
    const std::vector<std::int64_t>& stepNumbers() const { return m_step_numbers; }
    const std::vector<double>& steps() const { return m_steps; }        // the step numbers as x values
    const std::vector<double>& wallTimes() const { return m_wall_times; }  // seconds since the Unix epoch
    const std::vector<double>& values(Metric metric) const { return m_values[static_cast<int>(metric)]; }
    const std::vector<EvalPoint>& evals() const { return m_evals; }
    std::int64_t lastStep() const { return m_step_numbers.empty() ? 0 : m_step_numbers.back(); }
    // The wall time of the run's first point (step or evaluation): "seconds since the start" count from it.
    double startWallTime() const;
    // Seconds since startWallTime() of every step (x values of the wall-time axis).
    std::vector<double> relativeWallTimes() const;

    const std::vector<std::int64_t>& corePeakBytes() const { return m_core_peak_bytes; }  // bytes, per core
    std::int64_t coreCapacityBytes() const { return m_core_capacity_bytes; }               // bytes; 0: unknown
    std::int64_t memoryStep() const { return m_memory_step; }  // the step the peaks are from; −1: the run's start

    // A finished run's metrics.jsonl (run::read_metrics), and a core's capacity from the device of its
    // experiment.json when that can be read (else 0).
    static RunSeries load(const std::filesystem::path& model_dir);

private:
    void truncateFrom(std::int64_t step);

    std::vector<std::int64_t> m_step_numbers;
    std::vector<double> m_steps;
    std::vector<double> m_wall_times;
    std::vector<double> m_values[metric_count];
    std::vector<EvalPoint> m_evals;
    std::vector<std::int64_t> m_core_peak_bytes;
    std::int64_t m_core_capacity_bytes = 0;
    std::int64_t m_memory_step = -1;
};

// TensorBoard's smoothing: an exponential moving average with weight w (0 … <1) debiased by 1 − wⁿ, so
// the first points are not pulled towards zero. Non-finite values are kept as they are and do not enter
// the average. w = 0 returns the values unchanged.
std::vector<double> smoothEma(std::span<const double> values, double weight);

// At most max_points of (x[i], y[i]) for a line series: all of them when they fit, else the first and
// last points and, for each of (max_points − 2) / 2 buckets of consecutive points, its lowest and highest
// point in order — so spikes survive. Non-finite y (and y ≤ 0 when positive_only, for log axes) are left
// out. x must be sorted.
QList<QPointF> decimateMinMax(std::span<const double> x, std::span<const double> y, int max_points, bool positive_only);

// The columns a CSV export can hold, after run,step,wall_time.
enum class RunColumn {
    Loss,
    SmoothedLoss,  // smoothEma of the loss with the export's weight
    EvalLoss,
    EvalMeanDice,
    EvalAp,             // a detector's AP@[.5:.95]
    EvalAp50,
    EvalDetections,     // boxes after post-processing, over the held-out images
    EvalTruePositives,  // of them matched at IoU 0.5
    EvalObjects,        // held-out objects
    LearningRate,
    LossScale,
    HostSeconds,
    PredictedSeconds,
    ImagesPerSecond
};
QString runColumnName(RunColumn column);  // "loss", "smoothed_loss", "eval_loss", …

struct NamedRunSeries {
    QString name;
    const RunSeries* series = nullptr;
};

// "run,step,wall_time,<columns>" and one row per step of each run, in the runs' order; an evaluation
// fills the eval columns of its step's row (a row of its own when no step has its number). Numbers are
// written in the shortest form that reads back exactly; wall_time is seconds since the Unix epoch; an
// empty field is a value the row does not have.
std::string runsCsv(const std::vector<NamedRunSeries>& runs, const std::vector<RunColumn>& columns, double smoothing);

// "run,step,wall_time,capacity_bytes,core_0_peak_bytes,…": each run's latest per-core peaks (step and
// wall_time empty when they are from the run's start).
std::string coreMemoryCsv(const std::vector<NamedRunSeries>& runs);

// A CSV field: quoted when it holds a comma, quote or line break.
std::string csvField(const QString& text);
// The shortest decimal text that reads back as exactly `value` ("" for NaN).
std::string exactNumber(double value);

}  // namespace tessera::ui
