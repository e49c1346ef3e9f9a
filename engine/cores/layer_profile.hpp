// Layer profiles: every layer of every core's graph timed on this host with the simulated cores' own
// kernels, for the host step prediction (cost::predict_host_step with SimulationOptions::measured_layers).
//
// The host preset's per-class rates (cores/host_calibration.hpp) extrapolate from a few measured
// shapes; a profile measures the shapes the plan really has — strided and pointwise convolutions,
// narrow tiles, bf16 kernels, cache effects of large tiles, the ISA oneDNN picks on this CPU — as
// FlexFlow's simulator measures each operator on its device. The step's composition (phases on the
// host threads, barriers, halo copies, reductions, the weight update) is still the model's.
//
// Each distinct core graph (cores whose tiles have the same shapes share one) runs forward and backward
// single-threaded, as a simulated core does, once to warm up and then `repeats` times; each layer
// keeps its fastest pass (other work on a shared machine only adds time).
//
//   auto layers = std::make_shared<cost::MeasuredLayers>(profile_layers(model, plan, Precision::F32));
//   options.measured_layers = layers;
//   cost::predict_host_step(model, plan, replicas, host, options);
#pragma once

#include "cost/step_simulation.hpp"
#include "graph/executor.hpp"
#include "partition/tiling.hpp"

namespace tessera::cores {

struct ProfileOptions {
    graph::Precision precision = graph::Precision::F32;
    int repeats = 3;
};

// [core of one replica][model node]: forward and backward seconds (0 for the input node).
cost::MeasuredLayers profile_layers(const graph::Graph& model, const partition::TilingPlan& plan, const ProfileOptions& options);

}  // namespace tessera::cores
