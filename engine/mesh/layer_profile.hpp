// Layer profiles: every layer of every core's graph timed on this host with the simulated cores' own
// kernels, for the host step prediction (cost::predict_host_step with SimulationOptions::measured_layers).
//
// The host preset's per-class rates (cores/host_calibration.hpp) extrapolate from a few measured
// shapes; a profile measures the shapes the plan really has — strided and pointwise convolutions,
// narrow tiles, bf16 kernels, cache effects of large tiles, the ISA oneDNN picks on this CPU — as
// FlexFlow's simulator measures each operator on its device. The step's composition (phases on the
// host threads, barriers, halo copies, reductions, the weight update) is still the model's.
//
// The profile runs the step's layers as the mesh does, without the exchanges: one executor per task of
// a phase (every core of every replica, up to max_tasks), each of a node's reduction phases and then its
// kernel a phase over the host threads, a task's times summed into the layer's. So the layers see the same single-threaded
// kernels, the same contention of kernels side by side and the same cache traffic of several cores
// taking turns on one thread as in the mesh. Where it runs every task of the step, it also times each
// layer's phases whole (MeasuredLayer::*_wall_seconds): the slower thread's share of a phase, which the
// per-task times, averaged over a core's copies, cannot give. The fastest pass is kept, as a whole (other work on a
// shared machine only adds time; bm_cost_fidelity compares with the fastest step); measure() may be called between training steps, so the profile and the
// steps sample the same moments of a noisy machine.
//
//   LayerProfiler profiler(model, plan, {.precision = Precision::F32, .threads = 2, .tasks = 4});
//   profiler.measure(3);
//   options.measured_layers = std::make_shared<cost::MeasuredLayers>(profiler.layers());
//   cost::predict_host_step(model, plan, replicas, host, options);
#pragma once

#include "cost/step_simulation.hpp"
#include "graph/executor.hpp"
#include "partition/tiling.hpp"

#include <memory>

namespace tessera::mesh {

struct ProfileOptions {
    graph::Precision precision = graph::Precision::F32;
    int repeats = 3;             // profile_layers' passes after the warm-up
    int threads = 1;             // host threads, as the mesh's
    std::int64_t tasks = 1;      // tasks per phase in the step: cores per replica × replicas
    std::int64_t max_tasks = 16; // executors the profile holds at most (never fewer than one replica's cores)
};

class LayerProfiler {
public:
    // Compiles an executor per task and runs a pass to warm up.
    LayerProfiler(const graph::Graph& model, const partition::TilingPlan& plan, const ProfileOptions& options);
    ~LayerProfiler();
    LayerProfiler(const LayerProfiler&) = delete;
    LayerProfiler& operator=(const LayerProfiler&) = delete;

    void measure(int passes);  // more passes
    // [core of one replica][model node]: forward and backward seconds of the fastest pass so far (0 for the input).
    cost::MeasuredLayers layers() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

// [core][model node]: each core's layers averaged over the tasks that ran it (task_core[task] is the
// core task `task` ran; a core runs once per replica in the profile).
cost::MeasuredLayers mean_over_copies(const std::vector<std::vector<cost::MeasuredLayer>>& per_task,
                                      const std::vector<std::size_t>& task_core, std::size_t cores);

// The executors a profile of a plan with `cores_per_replica` cores holds (each about one simulated
// core's memory): its tasks up to max_tasks, never fewer than one replica's cores.
std::int64_t profiled_executors(const ProfileOptions& options, std::int64_t cores_per_replica);

// A profiler's layers after options.repeats passes.
cost::MeasuredLayers profile_layers(const graph::Graph& model, const partition::TilingPlan& plan, const ProfileOptions& options);

}  // namespace tessera::mesh
