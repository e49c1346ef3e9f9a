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
#include "tensor/parameter.hpp"

#include <memory>
#include <span>
#include <vector>

namespace tessera::graph {

enum class Mode { Train, Eval };

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

    // input: [N, C, (D,) H, W] f32 contiguous, the graph input's shape. Returns the output node's value.
    Tensor forward(const Tensor& input, Mode mode);
    // output_gradient: d loss / d output, the output's shape. Sets every parameter's gradient.
    void backward(const Tensor& output_gradient);

    // Plain copies of a node's forward value and (after backward) the gradient w.r.t. it.
    Tensor activation(int node) const;
    Tensor activation_gradient(int node) const;

    std::span<const NodeTiming> timings() const;  // one per node, in graph order

    // Bytes held by the compiled graph: activations, gradients, workspaces, reordered copies.
    std::int64_t workspace_bytes() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

}  // namespace tessera::graph
