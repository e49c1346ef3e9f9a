// RunReport: one self-contained HTML file that tells a run's story to someone without Tessera — what
// was trained and how it was split, how it learned, what each step cost here and what the cost model
// predicts on the device, each core's memory, one recorded step's timeline, the evaluation and what the
// model got right and wrong on its best and worst held-out cases.
//
//   ReportResult report = write_run_report("runs/unet2d_em", "runs/unet2d_em/report.html");
//   for (const std::string& left_out : report.omissions) std::puts(left_out.c_str());
//
// Everything is inline: charts as SVG, images as base64 PNG, styles in one <style>; no script, and no
// file or network reference, so the file can be mailed, archived or opened offline. Built from the
// model_dir alone (metrics.jsonl, experiment.json, step_trace.json, predictions/), read without taking
// its lock: a report of a run still training shows it up to its last record.
//
// A part the folder cannot give (no evaluation yet, no recorded step, an experiment file this version
// cannot read) is left out with a line in the report saying why and what gives it; those lines are also
// returned as `omissions`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera::report {

struct ReportResult {
    std::string html;
    std::vector<std::string> omissions;  // parts left out, each with its reason
};

// Throws a bad-input error when `model_dir` is not a run's folder (no metrics.jsonl with records).
ReportResult render_run_report(const std::filesystem::path& model_dir);

// Renders and writes `out` atomically (its folder must exist).
ReportResult write_run_report(const std::filesystem::path& model_dir, const std::filesystem::path& out);

// RFC 4648 base64 (with padding), for data: URLs.
std::string base64(const std::vector<std::uint8_t>& bytes);

}  // namespace tessera::report
