// The partitioned step against the unpartitioned one on this host: what tiles, halo copies, extra
// kernel calls and reductions cost (the simulated cores run on the same 2 host threads as the
// unpartitioned step's oneDNN kernels). Cases are the peer benchmark's U-Nets.
//
// Usage: bm_partition [--rounds R] [--steps S] [--case unet2d|unet3d] [--threads T (2)] [--profile 1]
// Steps alternate unpartitioned and partitioned, in pairs (the machine's speed drifts; only interleaved
// figures compare); the overhead is the median over rounds of partitioned / unpartitioned (each round's
// medians), the paired overhead the median of every pair's ratio with its quartiles. Prints per-round
// medians, bytes exchanged against the tiling plan's halo volume, per-core memory, and ends with one line
// per case:
//   case=<name> unpartitioned_ms=<median> partitioned_ms=<median> overhead=<ratio> paired_overhead=<ratio>
//   paired_q1=<ratio> paired_q3=<ratio> pairs=<count> vcpu_slowest_over_fastest=<ratio>
//   idle_thread_ms=<median> idle_thread_share=<median>
// vcpu_slowest_over_fastest is how quiet the machine was: each CPU's FMA rate alone (a thread pinned to
// it), before and after the case's steps, the slowest of either measurement over the fastest (1 on a
// quiet machine; a VM's vCPUs can differ by 20 % for seconds, and the partitioned step, whose cores split
// evenly over the threads, then waits for the slow one). 0 when it cannot be measured (no AVX-512F).
// idle_thread_ms / _share: in each partitioned step, the pool's thread time inside its phases that no
// core's task used (StepSummary::rank_idle_thread_seconds), as wall time (÷ threads) and as a share of
// the threads' time in the phases: that much of the step's overhead is waiting at phase ends.
#include "mesh/core_mesh.hpp"
#include "core/allocator_policy.hpp"
#include "core/random.hpp"
#include "networks/models.hpp"
#include "ops/dnnl_support.hpp"
#include "peer/fma_chains.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace tessera;

namespace {

struct BenchCase {
    std::string name;
    networks::UNetConfig unet;
    Shape input;
    std::vector<std::int64_t> pieces;
};

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Times one step after 10 ms of rest: the other side's threads, still spinning for work after its step
// (OpenMP's for the unpartitioned side, the pool's for the partitioned one), would otherwise hold a vCPU
// through this step's first phases — OpenMP's without yielding it: the pool's worker sat out the first
// 4 ms of a partitioned 3D step that followed an unpartitioned one, while the caller ran all 8 cores.
template <class Step>
double time_ms(Step&& step) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const auto start = std::chrono::steady_clock::now();
    step();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
    tessera::retain_freed_memory();  // as the studio and tessera-cli run
    int rounds = 7, steps = 3, threads = 2;
    bool profile = false;
    std::string only;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--case")) only = argv[i + 1];
        else if (!std::strcmp(argv[i], "--profile")) profile = std::atoi(argv[i + 1]) != 0;
        else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    }
    const std::vector<BenchCase> cases = {
        {"unet2d_4way", {.depth = 4, .base_width = 16, .num_classes = 2}, {4, 1, 256, 256}, {4, 1}},
        {"unet3d_8way", {.depth = 3, .base_width = 8, .num_classes = 2}, {1, 1, 64, 64, 64}, {2, 2, 2}},
    };
    ops::set_num_threads(threads);
    std::vector<std::string> summary_lines;
    for (const BenchCase& c : cases) {
        if (!only.empty() && c.name.rfind(only, 0) != 0) continue;
        const graph::Graph model = networks::make_unet(c.unet, c.input);
        train::TrainerConfig config;
        config.optimizer = {.kind = train::OptimizerKind::Sgd, .momentum = 0.9};
        config.schedule = {.kind = train::ScheduleKind::Constant, .learning_rate = 0.01};
        SeededRandom random(1);
        Tensor images = Tensor::empty(c.input, DType::F32);
        for (std::int64_t i = 0; i < images.num_elements(); ++i) images.data<float>()[i] = static_cast<float>(random.normal());
        Shape label_shape{c.input[0]};
        label_shape.insert(label_shape.end(), c.input.begin() + 2, c.input.end());
        Tensor labels = Tensor::empty(label_shape, DType::I32);
        for (std::int64_t i = 0; i < labels.num_elements(); ++i) labels.data<std::int32_t>()[i] = random.uniform() > 0.5;

        train::Trainer unpartitioned(model, config);
        mesh::MeshConfig mesh;
        mesh.grid = partition::SpatialGrid::even(c.input, c.pieces);
        mesh.host_threads = threads;
        mesh::CoreMesh partitioned(model, mesh, config);
        std::printf("%s: input %s, %lld cores, halo layers %zu\n", c.name.c_str(), shape_to_string(c.input).c_str(),
                    static_cast<long long>(partitioned.num_cores()), partitioned.core_graphs().halos.size());
        // Warm-up: first-touch of every buffer, oneDNN's lazily built kernels.
        unpartitioned.train_step(images, labels);
        partitioned.train_step(images, labels);

        std::vector<double> vcpu_rates;
        const auto measure_vcpus = [&](const char* when) {
            const std::vector<std::pair<int, double>> rates = bench::per_cpu_rates(1'000'000);
            if (rates.empty()) return;
            std::printf("  vCPU FMA rates alone %s:", when);
            for (const auto& [cpu, rate] : rates) {
                std::printf(" cpu%d %.1f", cpu, rate);
                vcpu_rates.push_back(rate);
            }
            std::printf(" GFLOP/s\n");
        };
        measure_vcpus("before");

        std::vector<double> round_unpartitioned, round_partitioned, round_ratio, pair_ratio;
        // Per partitioned step: its pool's idle thread time inside the phases, as wall time (÷ threads) and as
        // a share of the threads' time in the phases — the part of the overhead the vCPUs' unequal speed makes.
        std::vector<double> idle_ms, idle_share;
        for (int round = 0; round < rounds; ++round) {
            std::vector<double> a, b;
            // Step by step, in pairs ordered AB, BA, AB, …: the machine's speed drifts within seconds
            // (on the Xeon model 207 VM, 1.6× between neighbouring seconds), so each pair's ratio compares
            // steps run less than a second apart, and the order cancels a drift across the pair.
            for (int s = 0; s < steps; ++s) {
                const auto run_unpartitioned = [&] { a.push_back(time_ms([&] { unpartitioned.train_step(images, labels); })); };
                const auto run_partitioned = [&] {
                    b.push_back(time_ms([&] { partitioned.train_step(images, labels); }));
                    const mesh::StepSummary& step_summary = partitioned.summary();
                    idle_ms.push_back(step_summary.rank_idle_thread_seconds * 1e3 / mesh.host_threads);
                    idle_share.push_back(step_summary.rank_idle_thread_seconds / (mesh.host_threads * step_summary.rank_phase_seconds));
                };
                if (s % 2 == 0) {
                    run_unpartitioned();
                    run_partitioned();
                } else {
                    run_partitioned();
                    run_unpartitioned();
                }
                pair_ratio.push_back(b.back() / a.back());
            }
            round_unpartitioned.push_back(median(a));
            round_partitioned.push_back(median(b));
            round_ratio.push_back(median(b) / median(a));
            std::printf("  round %d: unpartitioned %.1f ms, partitioned %.1f ms (ratio %.3f)\n", round, median(a), median(b),
                        median(b) / median(a));
            std::fflush(stdout);
        }
        const mesh::StepSummary& summary = partitioned.summary();
        std::printf("  halo bytes per step: exchanged %lld, tiling plan %lld (ratio %.3f); all-reduce bytes %lld\n",
                    static_cast<long long>(summary.halo_bytes), static_cast<long long>(summary.analytic_halo_bytes),
                    summary.analytic_halo_bytes ? static_cast<double>(summary.halo_bytes) / static_cast<double>(summary.analytic_halo_bytes) : 0.0,
                    static_cast<long long>(summary.all_reduce_bytes));
        std::printf("  host time summed over cores: compute %.1f ms, halo copies %.1f ms (%.1f%% of compute), reductions %.1f ms\n",
                    summary.compute_seconds * 1e3, summary.halo_seconds * 1e3, 100 * summary.halo_fraction_of_compute,
                    summary.all_reduce_seconds * 1e3);
        {  // the halo nodes' own work, inside compute: each tile copied into (and its gradient out of) the widened buffer
            double interior = 0;
            for (const partition::HaloExchange& halo : partitioned.core_graphs().halos) {
                for (std::int64_t core = 0; core < partitioned.num_cores(); ++core) {
                    const graph::NodeTiming& timing = partitioned.executor(core).timings()[static_cast<std::size_t>(halo.halo_node)];
                    interior += timing.forward_seconds + timing.backward_seconds;
                }
            }
            std::printf("  halo nodes' interior copies (part of compute): %.1f ms (%.1f%% of compute)\n", interior * 1e3,
                        summary.compute_seconds > 0 ? 100 * interior / summary.compute_seconds : 0.0);
        }
        for (const mesh::MemoryLedger& ledger : partitioned.memory()) {
            std::printf("  core %lld: peak %.1f MiB (activations %.1f, halo buffers %.1f, gradients %.1f, weights %.1f, workspace %.1f)\n",
                        static_cast<long long>(ledger.core), static_cast<double>(ledger.peak()) / 1048576.0,
                        static_cast<double>(ledger.activations) / 1048576.0, static_cast<double>(ledger.halo_buffers) / 1048576.0,
                        static_cast<double>(ledger.activation_gradients + ledger.weight_gradients) / 1048576.0,
                        static_cast<double>(ledger.weights) / 1048576.0, static_cast<double>(ledger.workspace) / 1048576.0);
        }
        if (profile) {  // per layer: the unpartitioned node's time against the cores' summed time / host threads
            const auto& graphs = partitioned.core_graphs();
            const auto reference = unpartitioned.executor().timings();
            double total_reference = 0, total_cores = 0;
            for (const graph::Node& node : graphs.graphs[0].nodes()) {
                double forward = 0, backward = 0;
                for (std::int64_t core = 0; core < partitioned.num_cores(); ++core) {
                    forward += partitioned.executor(core).timings()[static_cast<std::size_t>(node.id)].forward_seconds;
                    backward += partitioned.executor(core).timings()[static_cast<std::size_t>(node.id)].backward_seconds;
                }
                const int model_node = graphs.model_node[static_cast<std::size_t>(node.id)];
                const double ref_forward = model_node >= 0 ? reference[static_cast<std::size_t>(model_node)].forward_seconds : 0;
                const double ref_backward = model_node >= 0 ? reference[static_cast<std::size_t>(model_node)].backward_seconds : 0;
                total_reference += ref_forward + ref_backward;
                total_cores += (forward + backward) / threads;
                std::printf("  %-22s %-15s unpartitioned fwd %6.2f bwd %6.2f ms | cores/threads fwd %6.2f bwd %6.2f ms\n", node.name.c_str(),
                            std::string(graph::op_name(node.kind)).c_str(), ref_forward * 1e3, ref_backward * 1e3,
                            forward / threads * 1e3, backward / threads * 1e3);
            }
            std::printf("  total: unpartitioned %.1f ms, cores/threads %.1f ms\n", total_reference * 1e3, total_cores * 1e3);
            const train::StepResult u = unpartitioned.train_step(images, labels);
            const train::StepResult p = partitioned.train_step(images, labels);
            std::printf("  phases (ms): unpartitioned forward+loss %.1f backward %.1f update %.1f | partitioned %.1f %.1f %.1f\n",
                        u.forward_seconds * 1e3, u.backward_seconds * 1e3, u.update_seconds * 1e3, p.forward_seconds * 1e3,
                        p.backward_seconds * 1e3, p.update_seconds * 1e3);
            // That step's events by phase and kind, summed over cores / host threads: where the partitioned
            // step's time goes beyond its layers (waits at the barriers, the loss, halo and reduction copies).
            double by[3][4] = {}, loss_and_update[3] = {};
            for (const mesh::CoreEvent& event : partitioned.events()) {
                const double ms = (event.end_seconds - event.start_seconds) * 1e3 / mesh.host_threads;
                by[static_cast<int>(event.phase)][static_cast<int>(event.kind)] += ms;
                if (event.layer < 0 && event.kind == mesh::EventKind::Compute) loss_and_update[static_cast<int>(event.phase)] += ms;
            }
            for (int phase = 0; phase < 3; ++phase) {
                std::printf("  partitioned %-8s events / threads (ms): compute %.1f (loss or update %.1f), halo %.1f, all-reduce %.1f, wait %.1f\n",
                            std::string(mesh::step_phase_name(static_cast<mesh::StepPhase>(phase))).c_str(), by[phase][0],
                            loss_and_update[phase], by[phase][1], by[phase][2], by[phase][3]);
            }

        }
        measure_vcpus("after");
        const double vcpu_ratio =
            vcpu_rates.empty() ? 0.0 : *std::min_element(vcpu_rates.begin(), vcpu_rates.end()) / *std::max_element(vcpu_rates.begin(), vcpu_rates.end());
        // The overhead is the median of the rounds' ratios: each ratio compares steps run side by side.
        const double u = median(round_unpartitioned), p = median(round_partitioned);
        char line[400];
        std::sort(pair_ratio.begin(), pair_ratio.end());
        const auto quantile = [&](double q) { return pair_ratio[static_cast<std::size_t>(q * static_cast<double>(pair_ratio.size() - 1) + 0.5)]; };
        std::snprintf(line, sizeof line,
                      "case=%s unpartitioned_ms=%.1f partitioned_ms=%.1f overhead=%.3f paired_overhead=%.3f paired_q1=%.3f paired_q3=%.3f pairs=%zu "
                      "vcpu_slowest_over_fastest=%.3f idle_thread_ms=%.1f idle_thread_share=%.3f",
                      c.name.c_str(), u, p, median(round_ratio), median(pair_ratio), quantile(0.25), quantile(0.75), pair_ratio.size(),
                      vcpu_ratio, median(idle_ms), median(idle_share));
        summary_lines.push_back(line);
    }
    for (const std::string& line : summary_lines) std::printf("%s\n", line.c_str());
    return 0;
}
