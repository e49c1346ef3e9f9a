// StepTrace: one training step's events on every simulated core, kept in a run's model_dir as
// `step_trace.json` in the Chrome trace event format, so the same file opens in Perfetto
// (ui.perfetto.dev), chrome://tracing and Tessera's report.
//
//   write_step_trace(model_dir / step_trace_file_name, {.step = 200, .num_cores = 4, .events = mesh.events(),
//                                                       .layer_names = names});
//   StepTrace trace = read_step_trace(model_dir / step_trace_file_name);
//
// One process (pid 0) per run, one thread per core ("core 3"); each event a complete event ("ph": "X")
// with its start and duration in microseconds, named after its layer ("enc1.conv2", "loss", "update"),
// its category "<kind>/<phase>" and its flops, bytes and peer as args. A training run writes the step
// before each checkpoint, replacing the previous one (the file is written atomically).
#pragma once

#include "mesh/core_mesh.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera::run {

inline constexpr const char* step_trace_file_name = "step_trace.json";

struct StepTrace {
    std::int64_t step = 0;                 // the completed step the events are of
    std::int64_t num_cores = 0;
    std::vector<mesh::CoreEvent> events;   // by start time
    std::vector<std::string> layer_names;  // model node names, indexed by CoreEvent::layer
};

// The name an event is shown under: its layer's name, else "all-reduce", "update" or "loss".
std::string event_name(const StepTrace& trace, const mesh::CoreEvent& event);

void write_step_trace(const std::filesystem::path& file, const StepTrace& trace);
// Throws a bad-input error naming the file when it is not a step trace Tessera wrote.
StepTrace read_step_trace(const std::filesystem::path& file);

}  // namespace tessera::run
