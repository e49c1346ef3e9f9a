// Fidelity of the host step prediction: training steps measured on the simulated cores against what
// the cost model predicts for them, case by case, in two sets kept apart:
//   tuning      the eight cases the host model's hand-set constants and fitted forms were chosen on
//               (round 1: the per-op fixed costs, the narrow-tile width law, the parallel slowdown);
//   validation  cases no constant was ever fitted on: other widths and depths, batch > 1, 2D and 3D,
//               ResNet-34/50, uneven tiles, replicas × grids, f32 and bf16.
// bm_cost_fidelity runs them all; `tessera-cli calibrate --check` runs the trust-check subset of the
// validation set (small, a few seconds each) and records the residuals in the host preset, from which
// the studio draws its uncertainty band.
//
//   for (const FidelityCase& c : fidelity_cases()) {
//       FidelityResult r = measure_fidelity(c, host, {});
//       r.error_percent();   // profiled prediction vs the fastest measured step
//   }
#pragma once

#include "mesh/core_mesh.hpp"
#include "cost/step_simulation.hpp"

#include <functional>
#include <string>
#include <vector>

namespace tessera::mesh {

enum class FidelitySet { Tuning, Validation };
std::string_view fidelity_set_name(FidelitySet set);

struct FidelityCase {
    FidelitySet set = FidelitySet::Validation;
    std::string name;
    std::function<graph::Graph(const Shape&)> model;
    Shape input;                               // one replica's [N, C, (D,) H, W]
    std::vector<std::int64_t> pieces;          // per spatial axis
    std::int64_t replicas = 1;
    std::vector<std::int64_t> alignment = {};  // per spatial axis: uneven tiles aligned to it; empty: even tiles
    graph::Precision precision = graph::Precision::F32;
    bool trust_check = false;                  // one of `calibrate --check`'s cases
};

// Every case, tuning first.
std::vector<FidelityCase> fidelity_cases();

struct FidelityOptions {
    int steps = 5;           // timed steps after one warm-up, each followed by a profile pass
    int profile_repeats = 5; // profile passes in all (at least one after each step)
    // Called after the measurement with the mesh, the profiled prediction, the profile, and core 0's layer
    // timings and every core's events in the fastest step (the mesh's own are the last step's).
    std::function<void(CoreMesh&, const cost::StepPrediction&, const cost::MeasuredLayers&, const std::vector<graph::NodeTiming>&,
                       const std::vector<CoreEvent>&)>
        inspect;
};

struct FidelityResult {
    double predicted_seconds = 0;        // the host step with this plan's layers profiled
    double class_predicted_seconds = 0;  // the host preset's per-class rates alone (what sweeps use)
    std::vector<double> measured_seconds;  // every timed step, in order
    train::StepResult fastest_step;        // its phases
    double measured_fastest() const;
    double measured_median() const;
    double error_percent() const;        // (predicted − fastest measured) / fastest measured
    double class_error_percent() const;
};

// Builds the case's mesh, times `steps` training steps after a warm-up, profiles the plan's layers and
// predicts the step with `host` (a host preset).
FidelityResult measure_fidelity(const FidelityCase& fidelity_case, const cost::CostModel& host, const FidelityOptions& options);

struct FidelitySummary {
    std::size_t cases = 0;
    double median_abs_error_percent = 0;
    std::size_t within_15_percent = 0;
    double bias_percent = 0;         // mean signed error
    double rms_error_percent = 0;    // the studio's ± band, as a share of the prediction
};
FidelitySummary summarize_errors(const std::vector<double>& error_percents);

}  // namespace tessera::mesh
