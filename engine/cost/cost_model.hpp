// CostModel: what a layer, a transfer and a reduction would take on a device (see device.hpp).
//
// An op on one core takes the longer of its compute time (FLOPs / (peak × efficiency)) and its memory
// time (bytes moved / (bandwidth × efficiency)) — a roofline — plus the device's per-op overhead.
//
// A convolution runs as an implicit GEMM (cuDNN on tensor cores; XLA folds a small input depth's
// kernel window into the contracting dimension on a TPU): forward multiplies a [positions × C_in·taps]
// matrix by [C_in·taps × C_out], backward computes the input's gradient ([C_out·taps × C_in]) and the
// weights' ([C_in·taps × C_out], contracting over positions). Each product keeps the matrix unit as
// busy as its two weight-side extents fill the unit's tile (128 on a TPU's MXU: 64 output channels
// fill half of it), times how well the minor spatial extent fills the spatial tile, times the device's
// base matmul efficiency. The first layer has no input gradient to compute.
//
// How much of the element-wise work (batch norm's normalising, ReLU, adds) runs inside other ops'
// loops depends on the framework, not the chip (ElementwiseFusion below): op by op each reads its
// inputs and writes its output; fused into chains (XLA on a GPU, which calls cuDNN for convolutions)
// a chain between two convolutions makes one pass and a batch norm keeps its statistics' pass; fused
// into the convolutions (XLA on a TPU) a batch norm keeps only its statistics' reduction (one read
// forward, the gradient and the input backward), an add its second operand, a ReLU nothing. NVIDIA's
// fused-convolution ResNets sit between: statistics in the convolutions' epilogues, the normalising
// in chains or in the next convolution's main loop (batch_norm_passes says which passes remain).
//
// A transfer takes latency per hop plus bytes over the link bandwidth; an all-reduce follows the ring
// (or, on a torus, the 2D ring) algorithm.
//
// Costs work on tiles: pass a core's NodeTile (partition/tiling.hpp) to cost one core's share of a
// layer without building its core graph, so a planner can price thousands of layouts.
//
//   CostModel model(load_device_preset("tpu_v3"));
//   LayerCost conv = model.layer(unet, node, &plan.tile(node, core), {.precision = graph::Precision::BF16});
//   conv.forward_seconds, conv.backward_seconds, conv.bound   // "compute" or "memory"
//   model.transfer_seconds(halo_bytes, /*hops*/ 1);
//   model.all_reduce_seconds(gradient_bytes, /*cores*/ 16);
#pragma once

#include "cost/device.hpp"
#include "partition/tiling.hpp"

#include <cstdint>
#include <string>

namespace tessera::cost {

enum class Bound { Compute, Memory };

struct PassCost {
    double seconds = 0;
    double flops = 0;
    std::int64_t bytes = 0;     // memory traffic
    double efficiency = 1;      // of the peak (compute-bound) or the bandwidth (memory-bound)
    Bound bound = Bound::Memory;
};

enum class ElementwiseFusion {
    None,              // one kernel per op (eager PyTorch)
    Chains,            // element-wise chains between convolutions fused into one kernel (XLA on a GPU)
    IntoConvolutions,  // element-wise work inside the convolutions' loops (XLA on a TPU)
    // NVIDIA's MXNet ResNets for MLPerf, built on cuDNN's NormConvolution. Statistics: a batch norm
    // after a convolution gets its sums from that convolution's epilogue (except after the stem, a
    // plain convolution reading the input); normalising, ReLU and a residual add run as one kernel
    // (ScaleBiasAddRelu) — symbol resnet-v1b-stats-fl.
    ConvolutionStatistics,
    // As ConvolutionStatistics, and a batch norm whose output (through its ReLU) feeds only
    // convolutions is applied in their main loop, so only a residual's end (the last batch norm,
    // the shortcut's, the add and the ReLU) stays a kernel of its own — resnet-v1b-mainloop-fl and
    // resnet-v1b-dbar-fl.
    ConvolutionMainLoop,
};
// "none", "chains", "into_convolutions", "convolution_statistics", "convolution_main_loop"
std::string_view fusion_name(ElementwiseFusion fusion);

// A trained batch norm's own passes over its tensor (each a read or a write of it) under a fusion, and
// how many of them come before its statistics' all-reduce (the statistics' read forward; the two
// reductions' reads backward). Passes the fusion runs inside convolutions are not counted.
struct BatchNormPasses {
    int forward = 3, forward_statistics = 1;    // op by op: statistics' read; normalising's read and write
    int backward = 5, backward_reductions = 2;  // op by op: the reductions read dy and x; dx reads them again and writes
};
BatchNormPasses batch_norm_passes(const graph::Graph& model, int batch_norm, ElementwiseFusion fusion);

// The memory layout a GPU's convolutions get their activations in. Tensor-core kernels (f16, bf16,
// TF32) work on channels-last data; given channels-first data, cuDNN transposes every activation
// operand of a call in and its result out, each a separate read and write of the tensor (NVIDIA's
// guidance behind PyTorch's channels_last). CUDA-core f32 kernels and TPUs take either layout as is.
enum class ConvLayout {
    ChannelsLast,   // NHWC / NDHWC (MXNet and PyTorch with channels_last, as NVIDIA's MLPerf code runs)
    ChannelsFirst,  // NCHW / NCDHW (PyTorch's default memory format)
    Xla,            // XLA on a GPU chooses per convolution: channels-last for 2D f16/bf16, else channels-first
};
std::string_view conv_layout_name(ConvLayout layout);  // "channels_last", "channels_first", "xla"

// How a device runs the layers beyond what the chip is: what the framework's step does.
struct Execution {
    graph::Precision precision = graph::Precision::F32;
    bool tf32 = false;  // f32 convolutions on TF32 tensor cores (see Device::peak_flops)
    ElementwiseFusion fusion = ElementwiseFusion::IntoConvolutions;
    // A batch norm frozen into a fixed affine (a pretrained backbone's, as detectors fine-tune it):
    // no statistics, so nothing to reduce; folded into the convolution when fused into it.
    bool frozen_batch_norm = false;
    ConvLayout conv_layout = ConvLayout::ChannelsLast;
};

struct LayerCost {
    PassCost forward, backward;
    double channel_utilisation = 1;  // fraction of the matrix unit's channel tile the layer fills
};

// Keys of a host preset's measured rates (GFLOP/s for convolutions, GB/s for memory-bound ops, as the
// cost model counts their FLOPs and bytes; single-threaded, as a simulated core's kernels run):
//   conv<r>d.k<k>.c<c>.fwd / .bwd        r spatial rank, k kernel (3 or 1), c = min(C_in, C_out);
//                                        k1: kernel = stride transposed convolutions and 1×1 convolutions
//   conv<r>d.first.c<c>.fwd / .bwd       a first layer reading a 1-channel input, c = C_out
//   conv<r>d.head.c<c>.fwd / .bwd        a 1×1 layer to a few outputs (segmentation head), c = C_in
//   <op>.fwd / <op>.bwd                  op: batch_norm, relu, pool, concat, add, upsample
//   copy                                 memory copies (halo buffers, tiles)
//   op_overhead_us, phase_overhead_us    a kernel call; a barrier between the simulated cores' phases
//   <key>_fixed_us                       a measured class's fixed cost per call (with its rate: t = fixed + work / rate)
//   parallel_slowdown                    how much slower a kernel runs while every host thread runs one
//   conv<r>d.width_w0                    narrow tiles: a convolution's rate × W/(W + w0), relative to a wide tile
//   threads                              host threads the simulated cores run on
std::string host_conv_key(int rank, std::int64_t kernel, bool first_layer, std::int64_t channels, bool backward);

// Bytes one element of an activation takes on a device when convolutions compute in `precision`:
// 2 for bf16 and f16 (mixed precision keeps activations in half width), 4 for f32.
std::int64_t activation_bytes(graph::Precision precision);
// What the simulated cores move per element: they round f16 through half but keep it in f32, and bf16
// too on a CPU without bf16 dot products (emulated: ops::has_native_bf16).
std::int64_t host_activation_bytes(graph::Precision precision);

class CostModel {
public:
    explicit CostModel(Device device);

    const Device& device() const { return m_device; }

    // One core's share of `node` (the whole layer when tile is null). Halo nodes cost a copy. A host
    // preset ignores `execution`'s tf32 and fusion: the simulated cores run op by op in f32 storage.
    LayerCost layer(const graph::Graph& model, int node, const partition::NodeTile* tile, const Execution& execution) const;
    LayerCost layer(const graph::Graph& model, int node, const partition::NodeTile* tile, graph::Precision precision) const {
        return layer(model, node, tile, Execution{.precision = precision});
    }
    // Time to move `bytes` between cores `hops` links apart (0 hops: same chip, a memory copy).
    double transfer_seconds(std::int64_t bytes, int hops) const;
    // Ring all-reduce of `bytes` over `cores` cores (2D-torus rings on a torus); 0 for one core.
    double all_reduce_seconds(std::int64_t bytes, std::int64_t cores) const;
    // An optimizer step over `parameters` f32 values with `slots` slots each (memory-bound).
    double update_seconds(std::int64_t parameters, std::int64_t slots) const;

    // Host presets (kind "host", written by `tessera-cli calibrate`): the measured rate of an op class
    // (see host_rate_key), interpolated over channel counts; 0 when the preset has no such figure.
    double host_rate(const std::string& key) const;

private:
    PassCost pass_cost(double flops, std::int64_t bytes, double rate, bool launches_kernel) const;
    // The roofline. `host_counting`: FLOPs and bytes as host calibration counts them (each op its own
    // pass, f16 stored as f32, the first layer's backward as twice its forward, channels unpadded).
    LayerCost roofline_layer(const graph::Graph& model, int node, const partition::NodeTile* tile, const Execution& execution,
                             bool host_counting) const;
    LayerCost host_layer(const graph::Graph& model, int node, const partition::NodeTile* tile, graph::Precision precision) const;
    // Whether the device runs this convolution with Winograd's algorithm (EfficiencyModel::winograd_3x3).
    bool winograd_applies(const ops::ConvAttributes& conv, graph::Precision precision, bool tf32) const;
    // Whether a convolution of `spatial_rank` transposes its activations (ConvLayout).
    bool transposes_layout(const Execution& execution, int spatial_rank) const;

    Device m_device;
};

}  // namespace tessera::cost
