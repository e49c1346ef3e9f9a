// bm_published: the cost model against published training speeds (resources/validation/).
//
//   build/bench/bm_published [folder] [--case <substring>] [--detail]
//
// One line per case — `case=<name> predicted=<ms> published=<ms> error=<percent>% device=<id> cores=<n>`
// and the approximations its model needed — then the summary: how many within 25 %, the median |error|
// and the bias (median signed error). Nothing is fitted here: the presets' figures come from data
// sheets, and these cases are for checking them. --detail adds, per case, where one core's compute goes
// by op kind (forward and backward seconds, FLOPs, bytes, and how much of it is memory-bound).
#include "cost/cost_model.hpp"
#include "experiment/published.hpp"
#include "partition/tiling.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

using namespace tessera;

// Core 0's layers summed by op kind, as the device's cost model prices them.
void print_detail(const experiment::PublishedCase& c, const experiment::PublishedPrediction& p) {
    if (!p.plan.valid) return;
    const cost::CostModel model(cost::load_device_preset(c.device));
    Shape replica_input = c.global_input;
    replica_input[0] /= p.plan.replicas;
    const graph::Graph graph = experiment::build_published_model(c, replica_input);
    const partition::TilingPlan plan = partition::plan_tiling(graph, p.plan.grid);
    struct Sum {
        double forward = 0, backward = 0, memory_bound = 0, flops = 0, bytes = 0;
        int passes = 0;
    };
    std::map<std::string, Sum> by_kind;
    Sum all;
    for (const graph::Node& node : graph.nodes()) {
        const auto named = [&](const std::vector<std::string>& prefixes) {
            return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& prefix) { return node.name.rfind(prefix, 0) == 0; });
        };
        cost::LayerCost layer = model.layer(graph, node.id, &plan.tile(node.id, 0),
                                            {.precision = c.precision, .tf32 = c.tf32, .fusion = c.fusion,
                                             .frozen_batch_norm = node.kind == graph::OpKind::BatchNorm && named(c.frozen_batch_norm),
                                             .conv_layout = c.conv_layout});
        if (named(c.untrained)) layer.backward = cost::PassCost{};  // as the step simulation prices it
        for (Sum* sum : {&by_kind[std::string(graph::op_name(node.kind))], &all}) {
            sum->forward += layer.forward.seconds;
            sum->backward += layer.backward.seconds;
            for (const cost::PassCost* pass : {&layer.forward, &layer.backward}) {
                if (pass->bound == cost::Bound::Memory) sum->memory_bound += pass->seconds;
                sum->flops += pass->flops;
                sum->bytes += static_cast<double>(pass->bytes);
                if (pass->seconds > 0) ++sum->passes;
            }
        }
    }
    for (const auto& [kind, sum] : by_kind) {
        if (sum.passes == 0) continue;
        std::printf("  kind=%-14s forward_ms=%8.2f backward_ms=%8.2f memory_bound_ms=%8.2f gflop=%9.1f gbyte=%7.2f passes=%d\n",
                    kind.c_str(), sum.forward * 1e3, sum.backward * 1e3, sum.memory_bound * 1e3, sum.flops * 1e-9,
                    sum.bytes * 1e-9, sum.passes);
    }
    std::printf("  kind=%-14s forward_ms=%8.2f backward_ms=%8.2f memory_bound_ms=%8.2f gflop=%9.1f gbyte=%7.2f passes=%d\n",
                "all", all.forward * 1e3, all.backward * 1e3, all.memory_bound * 1e3, all.flops * 1e-9, all.bytes * 1e-9,
                all.passes);
    std::printf("  verdict: %s\n", p.plan.verdict.c_str());
}

}  // namespace

int main(int argc, char** argv) {
    std::filesystem::path folder = TESSERA_SOURCE_DIR "/resources/validation";
    std::string only;
    bool detail = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--detail") == 0) detail = true;
        else if (std::strcmp(argv[i], "--case") == 0 && i + 1 < argc) only = argv[++i];
        else folder = argv[i];
    }
    const std::vector<experiment::PublishedCase> cases = experiment::load_published_cases(folder);
    std::vector<double> errors;
    for (const experiment::PublishedCase& c : cases) {
        if (!only.empty() && c.name.find(only) == std::string::npos) continue;
        const experiment::PublishedPrediction p = experiment::predict_published(c);
        std::string notes;
        for (const std::string& approximation : c.approximations) notes += (notes.empty() ? " approximations: " : "; ") + approximation;
        if (!p.plan.valid || !p.plan.fits) notes += " [planner: " + p.plan.verdict + "]";
        std::printf("case=%s predicted=%.2fms published=%.2fms error=%+.1f%% device=%s cores=%lld%s\n", c.name.c_str(),
                    p.predicted_step_seconds * 1e3, c.published_step_seconds * 1e3, p.error * 100, c.device.c_str(),
                    static_cast<long long>(c.num_cores), notes.c_str());
        if (detail) print_detail(c, p);
        errors.push_back(p.error);
    }
    if (errors.empty()) return 1;
    std::vector<double> magnitudes;
    for (double e : errors) magnitudes.push_back(std::abs(e));
    const auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    };
    const auto within = std::count_if(magnitudes.begin(), magnitudes.end(), [](double m) { return m <= 0.25; });
    std::printf("summary: %zu cases, %lld within 25%% (%.0f%%), median |error| %.1f%%, bias (median error) %+.1f%%\n", errors.size(),
                static_cast<long long>(within), 100.0 * static_cast<double>(within) / static_cast<double>(errors.size()),
                100 * median(magnitudes), 100 * median(errors));
    return 0;
}
