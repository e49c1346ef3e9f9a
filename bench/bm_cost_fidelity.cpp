// Fidelity of the cost model on this host: the predicted step time of the simulated cores (from the
// host preset `tessera-cli calibrate` measures, with each plan's layers profiled) against the measured
// one, for the tuning and validation cases of mesh/fidelity.hpp, kept apart.
//
// Usage: bm_cost_fidelity [--host <host.json>] [--steps S] [--set tuning|validation] [--case <case>] [--detail <case>]
// Calibrates first unless --host names an existing preset; prints, per run,
//   set=<tuning|validation> case=<name> predicted_ms=<x> measured_ms=<fastest of the steps> error=<percent>%
// with the per-class model's prediction (what planner sweeps use) and the measured spread beside it;
// then per set and model: median |error|, share within 15 %, bias (mean signed error); and the sweep
// timing: the planner over ≥ 500 layouts of the 3D U-Net on 256³. `--detail <case>` adds, for that case,
// the predicted and measured parts of the fastest step, each op kind's wall time in it against the
// prediction's, and every layer's kernel times measured, profiled and as the per-class model prices them.
#include "mesh/fidelity.hpp"
#include "mesh/host_calibration.hpp"
#include "cost/planner.hpp"
#include "networks/models.hpp"
#include "ops/dnnl_support.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

using namespace tessera;

namespace {

void print_summary(const std::vector<double>& errors, const char* set, const char* model) {
    if (errors.empty()) return;
    const mesh::FidelitySummary s = mesh::summarize_errors(errors);
    std::printf("summary model=%s set=%s cases=%zu median_abs_error=%.1f%% within_15=%zu/%zu (%.0f%%) bias=%+.1f%%\n", model, set,
                s.cases, s.median_abs_error_percent, s.within_15_percent, s.cases,
                100.0 * static_cast<double>(s.within_15_percent) / static_cast<double>(s.cases), s.bias_percent);
}

}  // namespace

int main(int argc, char** argv) {
    std::string host_path, detail, only_set, only_case;
    int steps = 5;
    bool sweep_only = false;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--host")) host_path = argv[i + 1];
        else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--detail")) detail = argv[i + 1];  // a case name: per-layer figures
        else if (!std::strcmp(argv[i], "--case")) only_case = argv[i + 1];
        else if (!std::strcmp(argv[i], "--set")) only_set = argv[i + 1];
        else if (!std::strcmp(argv[i], "--sweep-only")) sweep_only = std::atoi(argv[i + 1]) != 0;
    }
    ops::set_num_threads(2);
    cost::Device host;
    if (sweep_only) {
        host = cost::load_device_preset("tpu_v3");  // unused: the sweep plans for TPU v3
    } else if (!host_path.empty()) {
        host = cost::load_device_file(host_path);
    } else {
        const auto start = std::chrono::steady_clock::now();
        host = mesh::calibrate_host({.threads = 2});
        std::printf("calibrated in %.1f s (again before each run)\n",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    // This VM's speed drifts by tens of percent within minutes; without a given preset, the host is
    // calibrated again just before each run, so prediction and measurement see the same machine.
    const bool recalibrate = host_path.empty();
    cost::CostModel model(host);

    std::vector<double> errors[2], class_errors[2];  // [set]
    for (const mesh::FidelityCase& fidelity_case : mesh::fidelity_cases()) {
        if (sweep_only) break;
        const std::string set_name(mesh::fidelity_set_name(fidelity_case.set));
        if (!only_set.empty() && only_set != set_name) continue;
        if (!only_case.empty() && only_case != fidelity_case.name) continue;
        try {
            if (recalibrate) model = cost::CostModel(mesh::calibrate_host({.threads = 2}));
            mesh::FidelityOptions options;
            options.steps = steps;
            if (fidelity_case.name == detail) {  // the step's phases, then core 0's layers: measured against predicted
                options.inspect = [&](mesh::CoreMesh& mesh, const cost::StepPrediction& predicted, const cost::MeasuredLayers& profile,
                                      const std::vector<graph::NodeTiming>& fastest_timings, const std::vector<mesh::CoreEvent>& fastest_events) {
                    std::printf("  predicted phases: forward %.2f ms, backward %.2f ms, reduction and update %.2f ms (gradient all-reduce %.2f ms), step %.2f ms\n",
                                predicted.forward_seconds * 1e3, (predicted.backward_seconds - predicted.forward_seconds) * 1e3,
                                (predicted.step_seconds - predicted.backward_seconds) * 1e3, predicted.gradient_all_reduce_seconds * 1e3,
                                predicted.step_seconds * 1e3);
                    std::printf("  predicted end of step: gradient sum %.2f ms, finite checks %.2f ms, update %.2f ms\n",
                                (predicted.gradient_all_reduce_seconds - predicted.finite_check_seconds) * 1e3,
                                predicted.finite_check_seconds * 1e3, predicted.update_seconds * 1e3);
                    // The fastest step's events of core 0, summed by pass and kind.
                    for (const mesh::StepPhase phase : {mesh::StepPhase::Forward, mesh::StepPhase::Backward, mesh::StepPhase::Update}) {
                        for (const mesh::EventKind kind : {mesh::EventKind::Compute, mesh::EventKind::Halo, mesh::EventKind::AllReduce,
                                                            mesh::EventKind::Wait}) {
                            double seconds = 0;
                            int count = 0;
                            for (const mesh::CoreEvent& event : fastest_events) {
                                if (event.core != 0 || event.phase != phase || event.kind != kind) continue;
                                seconds += event.end_seconds - event.start_seconds;
                                ++count;
                            }
                            if (count > 0)
                                std::printf("  core 0, %-8s %-10s %4d events %7.2f ms\n", std::string(mesh::step_phase_name(phase)).c_str(),
                                            std::string(mesh::event_kind_name(kind)).c_str(), count, seconds * 1e3);
                        }
                    }
                    // Each node's wall time in the fastest step (core 0: from its first event to the next node's
                    // first), by op kind, beside the prediction's: where the step's time goes that the layers'
                    // kernels do not explain.
                    for (const mesh::StepPhase phase : {mesh::StepPhase::Forward, mesh::StepPhase::Backward}) {
                        std::vector<std::pair<double, int>> first_start;  // (start, model node)
                        std::map<int, double> starts;
                        double phase_end = 0;
                        for (const mesh::CoreEvent& event : fastest_events) {
                            if (event.core != 0 || event.phase != phase) continue;
                            phase_end = std::max(phase_end, event.end_seconds);
                            if (event.layer < 0) continue;
                            auto [at, fresh] = starts.emplace(event.layer, event.start_seconds);
                            if (!fresh) at->second = std::min(at->second, event.start_seconds);
                        }
                        for (const auto& [layer, start] : starts) first_start.emplace_back(start, layer);
                        std::sort(first_start.begin(), first_start.end());
                        std::map<std::string, std::pair<double, double>> by_kind;  // measured, predicted
                        const std::vector<double>& predicted_walls =
                            phase == mesh::StepPhase::Forward ? predicted.node_forward_seconds : predicted.node_backward_seconds;
                        for (std::size_t i = 0; i < first_start.size(); ++i) {
                            const double end = i + 1 < first_start.size() ? first_start[i + 1].first : phase_end;
                            const int node = first_start[i].second;
                            const std::string kind(graph::op_name(mesh.model().node(node).kind));
                            by_kind[kind].first += end - first_start[i].first;
                            by_kind[kind].second += predicted_walls[static_cast<std::size_t>(node)];
                        }
                        for (const auto& [kind, walls] : by_kind) {
                            std::printf("  %-8s %-14s wall in the fastest step %7.2f ms, predicted %7.2f ms\n",
                                        std::string(mesh::step_phase_name(phase)).c_str(), kind.c_str(), walls.first * 1e3, walls.second * 1e3);
                        }
                    }
                    const auto& graphs = mesh.core_graphs();
                    double mesh_sum[2] = {}, profile_sum[2] = {};
                    for (const graph::Node& node : graphs.graphs[0].nodes()) {
                        const graph::NodeTiming timing = fastest_timings[static_cast<std::size_t>(node.id)];
                        const int model_node = graphs.model_node[static_cast<std::size_t>(node.id)];
                        const char* kind = model_node < 0 ? "halo" : graph::op_name(node.kind).data();
                        std::string predicted_text;
                        if (model_node >= 0) {
                            const cost::LayerCost c =
                                model.layer(mesh.model(), model_node, &mesh.plan().tile(model_node, 0), fidelity_case.precision);
                            const cost::MeasuredLayer& alone = profile[0][static_cast<std::size_t>(model_node)];
                            char text[128];
                            std::snprintf(text, sizeof text, "  profiled %7.2f / %7.2f ms  class model %7.2f / %7.2f ms",
                                          alone.forward_seconds * 1e3, alone.backward_seconds * 1e3, c.forward.seconds * 1e3,
                                          c.backward.seconds * 1e3);
                            predicted_text = text;
                            mesh_sum[0] += timing.forward_seconds;
                            mesh_sum[1] += timing.backward_seconds;
                            profile_sum[0] += alone.forward_seconds;
                            profile_sum[1] += alone.backward_seconds;
                        }
                        std::printf("  %-30s %-14s measured %7.2f / %7.2f ms%s\n", node.name.c_str(), kind,
                                    timing.forward_seconds * 1e3, timing.backward_seconds * 1e3, predicted_text.c_str());
                    }
                    std::printf("  core 0's layers (halos apart): in the fastest step %.2f / %.2f ms, profiled %.2f / %.2f ms\n",
                                mesh_sum[0] * 1e3, mesh_sum[1] * 1e3, profile_sum[0] * 1e3, profile_sum[1] * 1e3);
                    // Every core's profile: one slow layer anywhere moves the whole prediction.
                    for (std::size_t core = 0; core < profile.size(); ++core) {
                        double total = 0, slowest = 0;
                        std::size_t slowest_node = 0;
                        for (std::size_t node = 0; node < profile[core].size(); ++node) {
                            const double seconds = profile[core][node].forward_seconds + profile[core][node].backward_seconds;
                            total += seconds;
                            if (seconds > slowest) slowest = seconds, slowest_node = node;
                        }
                        std::printf("  core %zu profiled %.2f ms, slowest layer %s %.2f ms\n", core, total * 1e3,
                                    mesh.model().node(static_cast<int>(slowest_node)).name.c_str(), slowest * 1e3);
                    }
                };
            }
            const mesh::FidelityResult result = mesh::measure_fidelity(fidelity_case, model, options);
            if (fidelity_case.name == detail) {
                const train::StepResult& step = result.fastest_step;
                std::printf("  measured phases (fastest step): forward %.2f ms, backward %.2f ms, reduction and update %.2f ms\n",
                            step.forward_seconds * 1e3, step.backward_seconds * 1e3, step.update_seconds * 1e3);
            }
            std::printf("set=%s case=%s predicted_ms=%.1f measured_ms=%.1f error=%+.1f%%  (class model %.1f ms %+.1f%%; "
                        "measured median %.1f ms)\n",
                        set_name.c_str(), fidelity_case.name.c_str(), result.predicted_seconds * 1e3, result.measured_fastest() * 1e3,
                        result.error_percent(), result.class_predicted_seconds * 1e3, result.class_error_percent(),
                        result.measured_median() * 1e3);
            std::fflush(stdout);
            const std::size_t set = fidelity_case.set == mesh::FidelitySet::Tuning ? 0 : 1;
            errors[set].push_back(result.error_percent());
            class_errors[set].push_back(result.class_error_percent());
        } catch (const std::exception& error) {  // a case that cannot run is reported, not fatal
            std::printf("set=%s case=%s failed: %s\n", set_name.c_str(), fidelity_case.name.c_str(), error.what());
        }
    }
    print_summary(errors[0], "tuning", "profiled");
    print_summary(errors[1], "validation", "profiled");
    print_summary(class_errors[0], "tuning", "class");
    print_summary(class_errors[1], "validation", "class");

    // The planner's sweep: every layout of the 3D U-Net on 256³ CT (global batch 8) for every core
    // budget from 1 to 40 — every spatial factorisation of each, times every replica count dividing
    // the batch, uneven aligned tiles where the extents do not divide — on TPU v3.
    const cost::CostModel v3(cost::load_device_preset("tpu_v3"));
    cost::PlannerRequest request;
    request.global_input = {8, 1, 256, 256, 256};
    request.simulation.precision = graph::Precision::BF16;
    const auto factory = [](const Shape& input) { return networks::make_unet({.depth = 4, .base_width = 32, .num_classes = 3}, input); };
    std::vector<double> sweep_seconds;
    std::size_t layouts = 0, valid = 0;
    for (int round = 0; round < 3; ++round) {
        layouts = valid = 0;
        const auto start = std::chrono::steady_clock::now();
        for (std::int64_t budget = 1; budget <= 40; ++budget) {
            request.core_budget = budget;
            for (const cost::LayoutPlan& plan : cost::plan_layouts(factory, request, v3)) {
                ++layouts;
                valid += plan.valid ? 1 : 0;
            }
        }
        sweep_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(sweep_seconds.begin(), sweep_seconds.end());
    std::printf("sweep: %zu layouts (%zu valid) of the 3D U-Net on 256³, budgets 1-40 cores, planned in %.3f s (median of 3; %.3f-%.3f)\n",
                layouts, valid, sweep_seconds[1], sweep_seconds[0], sweep_seconds[2]);
    return 0;
}
