// Executor: a Graph compiled into oneDNN kernels for its fixed shapes, run forward and backward.
//
// Compilation creates every primitive once; activations stay in the layouts the kernels prefer
// (blocked formats) from layer to layer, and only the input, the output and the parameters are plain
// tensors. Parameters are f32 master copies owned by the executor; backward sets their gradients.
//
//   graph::Executor executor(graph);
//   executor.initialize_parameters(/*seed*/ 42);
//   Tensor logits = executor.forward(images, graph::Mode::Train);     // [N, classes, H, W]
//   executor.backward(loss_gradient);                                  // d loss / d logits
//   for (Parameter& p : executor.parameters()) ... p.gradient ...
#pragma once

#include "graph/graph.hpp"
#include "ops/tile_buffer.hpp"
#include "tensor/parameter.hpp"

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tessera::graph {

using ops::Mode;
using ops::Pass;

// Arithmetic of the compiled graph. BF16: convolutions compute in bfloat16 with f32 master weights and
// f32 weight gradients; activations between them are bf16. The first layer (it reads the f32 input),
// layers narrower than 16 channels and the output layer's result stay f32, as mixed-precision
// training keeps them.
// F16: the range and precision of IEEE half, emulated (CPUs without AVX512-FP16 have no f16
// convolutions): every activation and activation gradient is rounded to f16 after its op, so values
// past 65504 overflow to inf and tiny gradients flush — what loss scaling exists to handle. Weights
// and weight gradients stay f32 masters.
enum class Precision { F32, BF16, F16 };

struct ExecutorOptions {
    Precision precision = Precision::F32;
    // Set by the core mesh for a simulated core's graph: batch-norm statistics (training) and global
    // pooling sum over every core of the replica. Such nodes then have reduction phases (below) whose
    // partial sums the driver adds across executors before the node runs.
    bool distributed_reductions = false;
    // Every activation gradient in memory of its own, readable after backward (activation_gradient).
    // Otherwise gradients whose lifetimes in backward do not meet share one arena (graph/buffer_plan.hpp)
    // and are gone once their node's backward has run: what training wants, a few layers' gradients
    // at a time instead of every layer's.
    bool keep_activation_gradients = false;
    // BF16 on f32 kernels with every would-be bf16 value and gradient rounded to bf16 (what a CPU without
    // bf16 dot products always gets, ops::has_native_bf16): set to test that path anywhere.
    bool emulate_bf16 = false;
};

// Bytes one compiled graph holds, by what they are for (a simulated core's memory ledger).
struct MemoryReport {
    std::int64_t weights = 0;            // parameter values (f32 masters)
    std::int64_t weight_gradients = 0;
    std::int64_t activations = 0;        // node outputs kept for backward (halo buffers excluded)
    std::int64_t halo_buffers = 0;       // widened tiles of Halo nodes and their gradients
    std::int64_t activation_gradients = 0;
    std::int64_t workspace = 0;          // kernels' reordered copies, pooling indices, scratch sums, oneDNN scratchpad
    std::vector<std::int64_t> node_bytes;  // per node: its value, gradient and kernel bytes
    std::int64_t total() const {
        return weights + weight_gradients + activations + halo_buffers + activation_gradients + workspace;
    }
};

// Host time of each node in the last forward and backward pass (seconds).
struct NodeTiming {
    double forward_seconds = 0;
    double backward_seconds = 0;
};

class Executor {
public:
    explicit Executor(const Graph& graph, ExecutorOptions options = {});
    ~Executor();
    Executor(const Executor&) = delete;
    Executor& operator=(const Executor&) = delete;

    const Graph& graph() const;
    const ExecutorOptions& options() const;

    // He-normal weights, ones/zeros for BN, zeros for biases; the same seed gives the same bits.
    void initialize_parameters(std::uint64_t seed);
    std::span<Parameter> parameters();
    std::span<const Parameter> parameters() const;
    // BN running statistics, in graph.buffers() order.
    std::span<Tensor> buffers();

    // input: [N, C, (D,) H, W] f32 contiguous, the graph input's shape. Returns the (first) output's
    // value; outputs() has all of them.
    Tensor forward(const Tensor& input, Mode mode);
    // output_gradient: d loss / d output, the output's shape. Sets every parameter's gradient (a
    // shared parameter's: the sum over its users). With one gradient for a graph of several outputs,
    // the others start at zero.
    void backward(const Tensor& output_gradient);
    void backward(std::span<const Tensor> output_gradients);  // one per output, in Graph::output_nodes() order

    // ---- stepping, for a driver that runs several executors in lockstep (the core mesh) ----
    // forward() is begin_forward, forward_node for every node in order, then output(); backward()
    // is begin_backward and backward_node in reverse order. A node with reduction phases needs, before
    // forward_node / backward_node, each phase's partial from every executor summed and handed back.
    void begin_forward(const Tensor& input, Mode mode);
    void forward_node(int node);
    Tensor output(std::size_t index = 0) const;  // plain copy of an output's value
    std::vector<Tensor> outputs() const;          // every output, in Graph::output_nodes() order
    void begin_backward(const Tensor& output_gradient);
    void begin_backward(std::span<const Tensor> output_gradients);
    void backward_node(int node);
    // A node whose kernel splits_backward (a convolution) may run backward in two calls, its input
    // gradients first (complete, rounded, added into its producers'), then its weights' gradients — the
    // same bits as backward_node. A driver computes the weights' gradients while the input gradients
    // travel to other processes (mesh/core_mesh.cpp). The weights' part may wait past other nodes'
    // backward only for a convolution reading a halo node, and only until that node's backward: its
    // output gradient is kept live that long (graph/buffer_plan.hpp), no longer.
    bool splits_backward(int node) const;
    void backward_node_inputs(int node);
    void backward_node_weights(int node);
    int reduction_phases(int node, Pass pass) const;
    std::vector<double> reduction_partial(int node, Pass pass, int phase);
    void reduction_total(int node, Pass pass, int phase, std::span<const double> total);
    // After a driver added into a gradient (halo gradients from neighbours): F16 rounds it again.
    void gradient_changed(int node);
    // A node's value and gradient in place, for halo exchange.
    ops::TileBuffer value_buffer(int node);
    ops::TileBuffer gradient_buffer(int node);

    // Plain copies of a node's forward value and (after backward) the gradient w.r.t. it; the gradient
    // needs keep_activation_gradients.
    Tensor activation(int node) const;
    Tensor activation_gradient(int node) const;

    std::span<const NodeTiming> timings() const;  // one per node, in graph order
    // Which code runs a node's forward pass ("jit:avx512_core", "rows:avx512", ...; ops::Kernel::implementation),
    // for profiles; empty for the input and for kernels that do not say.
    std::string implementation(int node) const;

    // Bytes held by the compiled graph: activations, gradients, workspaces, reordered copies.
    std::int64_t workspace_bytes() const;
    MemoryReport memory_report() const;
    // Threads its kernels were created for (oneDNN fixes them then): the caller's OpenMP team size when
    // the executor was compiled. A simulated core's executor must say 1 (mesh/thread_pool.hpp).
    int kernel_threads() const;

private:
    void backward_part(int node, bool inputs, bool weights);  // backward_node, whole or one of its two parts
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

}  // namespace tessera::graph
