// Step simulation: the predicted step of a partitioned model on a device, by discrete-event simulation
// of every core's ops, halo transfers and reductions — built from the model and its tiling plan alone,
// without running anything.
//
// Each core runs its ops in program order (as the simulated cores do); a windowed op waits for the halo
// rows its neighbours send after producing them; a batch norm waits for the all-reduce of every core's
// statistics; in backward, halo gradients travel back to their owners before the owner's layer runs.
// Weight gradients are all-reduced over every core of every replica — after the backward pass, or
// overlapped with it layer by layer. Every task's start is the latest of its resource becoming free
// (the core's compute, its incoming links, the replica's collective engine) and its inputs being ready.
//
//   CostModel model(load_device_preset("tpu_v3"));
//   StepPrediction step = predict_step(unet, plan_tiling(unet, grid), /*replicas*/ 2, model, {});
//   step.step_seconds; step.timeline;  step.memory[core].total()
#pragma once

#include "cost/cost_model.hpp"
#include "cost/memory_model.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tessera::cost {

// One layer's forward and backward host seconds on one core, measured by running that core's graph
// with the simulated cores' own kernels, side by side on the host threads as the step's phases run
// (cores/layer_profile.hpp): the calibrated slowdown of kernels side by side is not applied to them.
struct MeasuredLayer {
    double forward_seconds = 0;
    double backward_seconds = 0;
    // The layer's phases as a whole (its reduction phases and its kernel), wall time with every task of
    // the step on the host threads: the slower thread's share, which per-task means average away. The
    // same in every core's entry; 0 where the profile did not run every task of the step.
    double forward_wall_seconds = 0;
    double backward_wall_seconds = 0;
};
using MeasuredLayers = std::vector<std::vector<MeasuredLayer>>;  // [core of one replica][model node]

struct SimulationOptions {
    graph::Precision precision = graph::Precision::F32;
    bool tf32 = false;                         // devices: f32 convolutions on TF32 tensor cores
    ElementwiseFusion fusion = ElementwiseFusion::IntoConvolutions;  // devices: as XLA compiles a TPU's step
    ConvLayout conv_layout = ConvLayout::ChannelsLast;               // GPUs: the layout convolutions get
    std::int64_t optimizer_slots = 1;          // SGD with momentum: 1; Adam: 2
    bool overlap_gradient_all_reduce = false;  // all-reduce each layer's gradients while backward goes on
    bool cross_replica_batch_norm = false;
    bool record_timeline = true;               // planners sweeping thousands of layouts turn it off
    // Parts of the model that do not train, by node-name prefix (a detector fine-tuning a pretrained
    // backbone: "stem.", "stage1."): `untrained` nodes run no backward pass and all-reduce no gradient
    // (nothing before them trains); `frozen_batch_norm` batch norms are a fixed affine.
    std::vector<std::string> untrained;
    std::vector<std::string> frozen_batch_norm;
    // predict_host_step only: layer times measured on this host replace the host preset's per-class
    // rates, and in one process their phases' measured wall times the phases' makespans (the rest of the
    // step — barriers, halos, reductions across cores, the loss, the update — is still modelled).
    std::shared_ptr<const MeasuredLayers> measured_layers;
    // predict_host_step only: the mesh spread over MPI ranks (contiguous blocks of cores, as the mesh
    // places them), each rank running its cores on the preset's threads, with the network between them
    // from the preset's cluster_* figures (`mpirun -np K tessera-cli calibrate --network`).
    struct RankSpread {
        int ranks = 1;
        int host_cores = 0;         // cores of the one host every rank runs on (0: each rank has its own)
        bool fast_reduction = false;  // MPI_Allreduce rather than the reproducible segmented sum
    };
    std::optional<RankSpread> spread;
};

enum class SpanKind { Compute, Halo, AllReduce };
std::string_view span_kind_name(SpanKind kind);

struct TimelineSpan {
    std::int64_t core = 0;   // core of the simulated replica
    int layer = -1;          // model node; −1: loss, gradient all-reduce, update
    SpanKind kind = SpanKind::Compute;
    bool backward = false;
    double start_seconds = 0;
    double end_seconds = 0;
    std::int64_t peer = -1;  // halo: the sending core
};

struct CoreBreakdown {
    double compute_seconds = 0;   // busy computing
    double halo_seconds = 0;      // receiving halos (may overlap compute)
    double idle_seconds = 0;      // step − compute
};

// Where one replica's step goes, as the model computes it: the parts add up to the step time. The
// first three are the average core's compute; the busiest core computes `imbalance` longer, and the
// step waits `exposed_communication` beyond that.
struct StepBreakdown {
    double peak_compute = 0;           // the average core's FLOPs at the device's peak
    double efficiency_loss = 0;        // its compute beyond that, less the per-op overhead: matrix units
                                       // padded (channels, minor spatial extent), memory-bound ops, the
                                       // device's base matmul efficiency
    double op_overhead = 0;            // its fixed cost per op (kernel launches)
    double imbalance = 0;              // the busiest core's compute beyond the average core's
    double exposed_communication = 0;  // halo exchanges and all-reduces no core's compute hides
    double total() const { return peak_compute + efficiency_loss + op_overhead + imbalance + exposed_communication; }
};

struct StepPrediction {
    double step_seconds = 0;
    double forward_seconds = 0;              // end of the forward pass (slowest core)
    double backward_seconds = 0;             // end of the backward pass, where the step's end begins (host steps; 0 elsewhere)
    double gradient_all_reduce_seconds = 0;  // its duration, whether exposed or not
    // Host steps: of the step's end, the loss scaler's finite checks (gradients and new values) and the
    // optimizer update (the all-reduce above includes the checks).
    double finite_check_seconds = 0, update_seconds = 0;
    // Host steps: each model node's wall time in forward and in backward (its phases, halo copies,
    // reductions and barriers), [model node], to set beside a measured step's.
    std::vector<double> node_forward_seconds, node_backward_seconds;
    StepBreakdown breakdown;                 // its exposed_communication: step − the busiest core's compute
    double flops = 0;                        // per replica, forward and backward
    double achieved_fraction_of_peak = 0;    // flops / (step · cores · peak)
    std::vector<CoreBreakdown> cores;        // one replica's cores
    std::vector<CoreMemory> memory;          // per core of one replica
    std::vector<TimelineSpan> timeline;      // when recorded
    // For verdicts: the layer whose halo is the largest share of its input, and that share.
    int worst_halo_layer = -1;
    double worst_halo_fraction = 0;
    // The layer that fills the matrix units worst among those taking ≥ 5% of compute, and its fill.
    int worst_utilisation_layer = -1;
    double worst_utilisation = 1;
};

StepPrediction predict_step(const graph::Graph& model, const partition::TilingPlan& plan, std::int64_t replicas,
                            const CostModel& cost, const SimulationOptions& options);

// The same step as the simulated cores run it on this host (cores/core_mesh.hpp), with a host preset
// from `tessera-cli calibrate`: phase after phase (each layer's forward, its reductions, its halo
// copies, then backward likewise), each phase's per-core tasks list-scheduled on the host threads,
// plus the barrier between phases. Returns the predicted host step time (timeline not recorded).
StepPrediction predict_host_step(const graph::Graph& model, const partition::TilingPlan& plan, std::int64_t replicas,
                                 const CostModel& host, const SimulationOptions& options);

}  // namespace tessera::cost
