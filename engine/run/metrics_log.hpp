// MetricsLog: a run's metrics on disk, three ways — JSON lines (metrics.jsonl, every record), CSV
// (train.csv, eval.csv: one row per step / evaluation) and TensorBoard scalars (events files in the
// model_dir for training, in model_dir/eval for evaluation, as TPUEstimator lays them out).
//
// A run resumed from the checkpoint at step s first drops every record past s from the JSON lines and
// CSV files, and starts its TensorBoard files with a SessionLog START at s + 1 (TensorBoard then
// discards the orphaned points), so the files read as if the run had never stopped.
//
//   MetricsLog log(model_dir, /*resumed_at*/ 0);
//   log.write(step_record);  log.write(eval_record);  log.flush();
#pragma once

#include "run/run_records.hpp"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace tessera::io {
class TensorBoardWriter;
}

namespace tessera::run {

class MetricsLog {
public:
    MetricsLog(const std::filesystem::path& model_dir, std::int64_t resumed_at_step);
    ~MetricsLog();

    // A session's start (kind "start"): layout, device, predictions and memory, for reports.
    void write(const RunStart& start);
    void write(const StepRecord& step);
    void write(const EvalRecord& eval);
    void flush();

private:
    std::filesystem::path m_dir;
    std::unique_ptr<io::TensorBoardWriter> m_train_events, m_eval_events;
    std::vector<std::string> m_eval_columns;  // fixed by the first evaluation
};

// The records of metrics.jsonl, for tests and for the studio to load a past run.
struct MetricsHistory {
    std::vector<StepRecord> steps;
    std::vector<EvalRecord> evals;
    std::vector<RunStart> starts;  // one per session, oldest first
};
MetricsHistory read_metrics(const std::filesystem::path& model_dir);

}  // namespace tessera::run
