// bm_ops: every engine op, forward and forward + backward, at the layer shapes of the U-Nets that
// bench/peer/tessera_step.cpp trains, so the per-op figures add up to (and explain) a training step.
//
//   2D U-Net: depth 4, base width 16, input [4, 1, 256, 256]; widths 16/32/64/128 at 256/128/64/32.
//   3D U-Net: depth 3, base width 8,  input [1, 1, 64, 64, 64]; widths 8/16/32 at 64/32/16.
//
// Names are bm_<op>_<variant>_fwd and bm_<op>_<variant>_fwdbwd; each convolution also runs as oneDNN alone,
// bm_onednn_conv…, in the layouts oneDNN picks for itself (see run_onednn_conv): the gap between the two is
// Tessera's, the rest of the gap to the FMA peak is oneDNN's. A variant names the channels and the
// spatial extent of the op's input: conv2d_3x3_c16to32_128 is a 3×3 conv from 16 to 32 channels on
// [4, 16, 128, 128]; c16 alone means 16 in and 16 out; concat2d_c16x2_256 joins two 16-channel maps.
//
// How one op is timed: its kernel alone. The op is compiled in the graph
//
//   input [N, 1, ...] → source (3×3 conv, 1 → C, one per op input) → op (the output)
//
// so that its kernel is built as in the U-Net: it receives an activation in the layout a conv produces
// (nChw16c and friends; an op that prefers another layout pays its reorder inside its kernel, as in the
// model) and computes its input gradient, as every U-Net op except the first conv does. One whole
// forward and backward pass (with a random output gradient) sets every buffer; then each iteration
// runs the op's kernel through Executor::forward_node, and for _fwdbwd also backward_node, and times
// that call alone: no graph input copied in, no output reordered out, nothing subtracted. The U-Net's
// first conv reads the graph input itself, as in the model: no source, and no input gradient. Two
// ResNet-50 ops, which the U-Net lacks, are timed at ResNet-50's shapes: global average pooling, and
// dense on [N, F] with a ReLU for the source.
//
// Counters: GFLOP/s from Graph::cost (forward, or forward + backward; the backward of an op without an
// input gradient counts its weight gradient only), over the op's own time; compare with the machine's
// fp32 FMA peak on 2 threads (bench/peer/fma_peak). GB/s for memory-bound ops, from the least traffic
// the op needs (forward: read the inputs, write the output; backward: read the output gradient and,
// for ReLU and BN, the saved input, write the input gradients). Memory-bound ops run for 0.1 s of op
// time whatever --benchmark_min_time says (see register_all). Losses and optimizers are plain
// functions and are timed directly. Run with OMP_WAIT_POLICY=PASSIVE, as bench/peer/run.sh does.
#include "core/random.hpp"
#include "graph/executor.hpp"
#include "loss/cross_entropy.hpp"
#include "loss/dice_loss.hpp"
#include "loss/focal_loss.hpp"
#include "loss/metrics.hpp"
#include "loss/smooth_l1_loss.hpp"
#include "networks/models.hpp"
#include "ops/dnnl_support.hpp"
#include "train/optimizer.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace {

using namespace tessera;
using graph::Executor;
using graph::Graph;
using graph::Mode;
using graph::OpKind;
using Clock = std::chrono::steady_clock;

// ---- inputs -------------------------------------------------------------------------------------

Tensor random_tensor(const Shape& shape, std::uint64_t seed) {
    Tensor tensor = Tensor::empty(shape, DType::F32);
    SeededRandom random(seed);
    float* data = tensor.data<float>();
    for (std::int64_t i = 0; i < tensor.num_elements(); ++i) data[i] = static_cast<float>(random.normal());
    return tensor;
}

Tensor random_labels(const Shape& shape, std::int32_t num_classes, std::uint64_t seed) {
    Tensor labels = Tensor::empty(shape, DType::I32);
    SeededRandom random(seed);
    std::int32_t* data = labels.data<std::int32_t>();
    for (std::int64_t i = 0; i < labels.num_elements(); ++i) {
        data[i] = static_cast<std::int32_t>(random.uniform() * num_classes);
    }
    return labels;
}

// Joins the parts (GCC 12's -Wrestrict misfires on `"literal" + std::string`).
std::string cat(std::initializer_list<std::string_view> parts) {
    std::string result;
    for (std::string_view part : parts) result.append(part);
    return result;
}

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---- graph ops ----------------------------------------------------------------------------------

enum class Source {
    Conv,  // a 3×3 conv 1 → C (per op input): a blocked activation that needs its gradient
    Relu,  // a ReLU: a plain activation that needs its gradient (dense on [N, F])
    None,  // the graph input itself: no input gradient (the U-Net's first conv)
};

// Adds the op under test to `graph`, reading `inputs`; returns the op's node.
using AddOp = std::function<int(Graph& graph, const std::vector<int>& inputs)>;

struct OpCase {
    std::string name;  // "conv2d_3x3_c16_256": the benchmark is bm_<name>_fwd / _fwdbwd
    Shape input;       // [N, C, (D,) H, W] (or [N, F])
    AddOp add_op;
    int num_inputs = 1;  // op inputs, each from its own source
    Source source = Source::Conv;
    bool memory_bound = false;  // report GB/s
    // Convolutions: also timed as oneDNN alone (bm_onednn_<name>), for the gap between Tessera's kernel and
    // what oneDNN itself reaches on the shape.
    std::int64_t conv_out = 0, conv_kernel = 0;
    bool conv_bias = false;
};

// The op's graph: its sources, then the op as the output.
Graph make_graph(const OpCase& c) {
    Graph graph(c.name);
    const int rank = static_cast<int>(c.input.size()) - 2;
    Shape input_shape = c.input;
    if (c.source == Source::Conv) input_shape[1] = 1;  // one channel in: cheap to copy in, and read in place
    const int x = graph.input(input_shape);
    std::vector<int> sources;
    for (int i = 0; i < c.num_inputs; ++i) {
        const std::string name = cat({"source", std::to_string(i)});
        switch (c.source) {
            case Source::Conv:
                sources.push_back(graph.conv(x, c.input[1], ops::ConvAttributes::same(rank, 3), name));
                break;
            case Source::Relu:
                sources.push_back(graph.relu(x, name));
                break;
            case Source::None:
                sources.push_back(x);
                break;
        }
    }
    graph.set_output(c.add_op(graph, sources));
    return graph;
}

// The compiled graph after one whole training pass, and its op's kernel run on its own.
struct OpRunner {
    Graph graph;
    std::unique_ptr<Executor> executor;
    int op = -1;

    explicit OpRunner(Graph g) : graph(std::move(g)) {
        executor = std::make_unique<Executor>(graph);
        executor->initialize_parameters(42);
        op = graph.output_node();
        executor->forward(random_tensor(graph.node(graph.input_node()).output_shape, 1), Mode::Train);
        executor->backward(random_tensor(graph.node(op).output_shape, 2));
    }

    // The op's forward (training mode), and its backward if asked; returns the wall seconds.
    double run(bool backward) {
        const auto start = Clock::now();
        executor->forward_node(op);
        if (backward) executor->backward_node(op);
        return seconds_since(start);
    }
};

double elements(const Shape& shape) {
    return static_cast<double>(num_elements_of(shape));
}

// The least traffic of the op (f32): see the file comment.
double op_bytes(const Graph& graph, int op, bool backward) {
    const graph::Node& node = graph.node(op);
    double inputs = 0;
    for (int i : node.inputs) inputs += elements(graph.node(i).output_shape);
    const double output = elements(node.output_shape);
    double bytes = 4 * (inputs + output);
    if (backward) {
        bytes += 4 * (output + inputs);
        if (node.kind == OpKind::Relu || node.kind == OpKind::BatchNorm) bytes += 4 * inputs;
    }
    return bytes;
}

void run_op(benchmark::State& state, const OpCase& c, bool backward) {
    OpRunner runner(make_graph(c));
    const graph::Node& node = runner.graph.node(runner.op);
    const graph::NodeCost cost = runner.graph.cost(runner.op);
    double flops = cost.forward_flops;
    if (backward) {
        const bool has_input_gradient = runner.graph.node(node.inputs.front()).kind != OpKind::Input;
        const bool has_weights = node.kind == OpKind::Conv || node.kind == OpKind::ConvTranspose || node.kind == OpKind::Dense;
        // Graph::cost counts data and weight gradients (2× forward); without the data gradient, only the weights'.
        flops += has_weights && !has_input_gradient ? cost.forward_flops : cost.backward_flops;
    }
    if (runner.executor->reduction_phases(runner.op, ops::Pass::Forward) > 0 ||
        runner.executor->reduction_phases(runner.op, ops::Pass::Backward) > 0) {
        state.SkipWithError("the op's kernel needs reductions over cores: it cannot run alone");
        return;
    }
    runner.run(backward);  // oneDNN's lazy setup, first touches of the kernel's own buffers
    for (auto _ : state) state.SetIterationTime(runner.run(backward));
    if (flops > 0) {
        state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    }
    if (c.memory_bound) {
        state.counters["GB/s"] = benchmark::Counter(op_bytes(runner.graph, runner.op, backward) * 1e-9,
                                                    benchmark::Counter::kIsIterationInvariantRate);
    }
}

// ---- oneDNN alone, for the convolutions ---------------------------------------------------------
//
// The same convolution (stride 1, 'same' padding) as oneDNN's own primitives with every layout left to
// oneDNN (format `any`: what it considers its best for the shape), each primitive's operands in the
// layouts it picked for itself (a lower bound: a model would pay reorders where they differ), allocated
// once, nothing reordered in the loop: forward (training), and for _fwdbwd also the data gradient
// (unless the conv reads the graph input) and the weight (and bias) gradient. The label names the
// implementations (forward / weights / data). Tessera's
// bm_<name> over bm_onednn_<name> is what its kernel adds to oneDNN's best.
void run_onednn_conv(benchmark::State& state, const OpCase& c, bool backward) {
    using dnnl::memory;
    const dnnl::engine& engine = ops::cpu_engine();
    const int rank = static_cast<int>(c.input.size()) - 2;
    const memory::dims source_dims(c.input.begin(), c.input.end());
    memory::dims destination_dims = source_dims, weight_dims{c.conv_out, c.input[1]};
    destination_dims[1] = c.conv_out;
    const memory::dims ones(static_cast<std::size_t>(rank), 1), pad(static_cast<std::size_t>(rank), c.conv_kernel / 2);
    for (int axis = 0; axis < rank; ++axis) weight_dims.push_back(c.conv_kernel);
    const auto any = [](const memory::dims& dims) { return memory::desc(dims, memory::data_type::f32, memory::format_tag::any); };
    const memory::desc bias = c.conv_bias ? memory::desc({c.conv_out}, memory::data_type::f32, memory::format_tag::a) : memory::desc();
    const dnnl::convolution_forward::primitive_desc forward_pd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, any(source_dims),
                                        any(weight_dims), bias, any(destination_dims), ones, pad, pad),
        engine);
    const memory source(forward_pd.src_desc(), engine), weights(forward_pd.weights_desc(), engine),
        destination(forward_pd.dst_desc(), engine), bias_value(bias, engine);
    const dnnl::convolution_forward forward(forward_pd);
    std::optional<dnnl::convolution_backward_data> backward_data;
    std::optional<dnnl::convolution_backward_weights> backward_weights;
    // Each backward primitive reads its operands in the layouts it picked (a copy of each, made once).
    memory diff_source, diff_destination, diff_weights, diff_bias, weights_source, data_weights, data_diff_destination;
    std::vector<std::string> labels{forward_pd.impl_info_str()};
    const bool data_gradient = c.source != Source::None;
    if (backward) {
        const dnnl::convolution_backward_weights::primitive_desc weights_pd(
            dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, any(source_dims), any(weight_dims), bias,
                                                     any(destination_dims), ones, pad, pad),
            engine, forward_pd);
        backward_weights.emplace(weights_pd);
        labels.push_back(weights_pd.impl_info_str());
        weights_source = memory(weights_pd.src_desc(), engine);
        diff_destination = memory(weights_pd.diff_dst_desc(), engine);
        diff_weights = memory(weights_pd.diff_weights_desc(), engine);
        if (c.conv_bias) diff_bias = memory(weights_pd.diff_bias_desc(), engine);
        if (data_gradient) {
            const dnnl::convolution_backward_data::primitive_desc data_pd(
                dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, any(source_dims), any(weight_dims),
                                                      any(destination_dims), ones, pad, pad),
                engine, forward_pd);
            backward_data.emplace(data_pd);
            diff_source = memory(data_pd.diff_src_desc(), engine);
            data_weights = memory(data_pd.weights_desc(), engine);
            data_diff_destination = memory(data_pd.diff_dst_desc(), engine);
            labels.push_back(data_pd.impl_info_str());
        }
    }
    // Values: what they hold does not change the time; fill them once so no denormals or NaNs sneak in.
    for (const memory& buffer : {source, weights, destination, diff_destination, weights_source, data_weights, data_diff_destination}) {
        if (!buffer) continue;
        auto* values = static_cast<float*>(buffer.get_data_handle());
        SeededRandom random(7);
        for (std::size_t i = 0; i < buffer.get_desc().get_size() / sizeof(float); ++i) values[i] = static_cast<float>(random.normal() * 0.1);
    }
    dnnl::stream& stream = ops::cpu_stream();
    const auto step = [&] {
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, source}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, destination}};
        if (c.conv_bias) args[DNNL_ARG_BIAS] = bias_value;
        forward.execute(stream, args);
        if (!backward) return;
        if (backward_data) {
            backward_data->execute(stream, {{DNNL_ARG_DIFF_DST, data_diff_destination}, {DNNL_ARG_WEIGHTS, data_weights}, {DNNL_ARG_DIFF_SRC, diff_source}});
        }
        std::unordered_map<int, memory> weight_args{{DNNL_ARG_SRC, weights_source}, {DNNL_ARG_DIFF_DST, diff_destination}, {DNNL_ARG_DIFF_WEIGHTS, diff_weights}};
        if (c.conv_bias) weight_args[DNNL_ARG_DIFF_BIAS] = diff_bias;
        backward_weights->execute(stream, weight_args);
    };
    step();
    stream.wait();
    for (auto _ : state) {
        const auto start = Clock::now();
        step();
        stream.wait();
        state.SetIterationTime(seconds_since(start));
    }
    // The FLOPs Tessera's bm_<name> counts for the same work.
    const Graph graph = make_graph(c);
    const graph::NodeCost cost = graph.cost(graph.output_node());
    const double flops = cost.forward_flops + (backward ? (data_gradient ? cost.backward_flops : cost.forward_flops) : 0.0);
    state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    std::string label;
    for (const std::string& implementation : labels) label = label.empty() ? implementation : cat({label, " / ", implementation});
    state.SetLabel(label);
}

// ---- the cases ----------------------------------------------------------------------------------

struct Net {
    const char* dims;  // "2d", "3d"
    std::int64_t batch;
    int rank;
};
constexpr Net net2d{"2d", 4, 2};
constexpr Net net3d{"3d", 1, 3};

Shape activation(const Net& net, std::int64_t channels, std::int64_t extent) {
    Shape shape{net.batch, channels};
    shape.insert(shape.end(), static_cast<std::size_t>(net.rank), extent);
    return shape;
}

std::string kernel_name(int rank, std::int64_t k) {  // "3x3", "3x3x3"
    std::string name = std::to_string(k);
    for (int i = 1; i < rank; ++i) name = cat({name, "x", std::to_string(k)});
    return name;
}

std::string channels_name(std::int64_t in, std::int64_t out) {
    return in == out ? cat({"c", std::to_string(in)}) : cat({"c", std::to_string(in), "to", std::to_string(out)});
}

OpCase conv_case(const Net& net, std::int64_t in, std::int64_t out, std::int64_t extent, std::int64_t kernel = 3,
                 bool reads_graph_input = false, bool bias = false) {
    OpCase c;
    c.name = cat({"conv", net.dims, "_", kernel_name(net.rank, kernel), "_", channels_name(in, out), "_",
                  std::to_string(extent)});
    c.input = activation(net, in, extent);
    if (reads_graph_input) c.source = Source::None;
    c.conv_out = out;
    c.conv_kernel = kernel;
    c.conv_bias = bias;
    const int rank = net.rank;
    c.add_op = [rank, out, kernel, bias](Graph& graph, const std::vector<int>& inputs) {
        ops::ConvAttributes attributes = ops::ConvAttributes::same(rank, kernel);
        attributes.has_bias = bias;
        return graph.conv(inputs[0], out, attributes, "op");
    };
    return c;
}

// A 3×3(×3) convolution as one simulated core computes it at the edge of a partitioned input: the tile
// widened by a halo of 1 on one side of its first `split_axes` spatial axes and padded only on the
// other (the image's edge), so its output is `extent` along every axis.
OpCase edge_tile_conv_case(const Net& net, std::int64_t in, std::int64_t out, std::int64_t extent, int split_axes) {
    OpCase c = conv_case(net, in, out, extent);
    c.name += cat({"_edge_tile", std::to_string(split_axes)});
    for (int axis = 0; axis < split_axes; ++axis) c.input[static_cast<std::size_t>(axis) + 2] += 1;
    const int rank = net.rank;
    c.add_op = [rank, out, split_axes](Graph& graph, const std::vector<int>& inputs) {
        ops::ConvAttributes attributes = ops::ConvAttributes::same(rank, 3);
        for (int axis = 0; axis < split_axes; ++axis) attributes.pad_end[static_cast<std::size_t>(axis)] = 0;
        return graph.conv(inputs[0], out, attributes, "op");
    };
    return c;
}

OpCase conv_transpose_case(const Net& net, std::int64_t in, std::int64_t out, std::int64_t extent) {
    OpCase c;
    c.name = cat({"conv_transpose", net.dims, "_k2s2_", channels_name(in, out), "_", std::to_string(extent)});
    c.input = activation(net, in, extent);
    const int rank = net.rank;
    c.add_op = [rank, out](Graph& graph, const std::vector<int>& inputs) {
        ops::ConvTransposeAttributes attributes = ops::ConvTransposeAttributes::upsample(rank);
        attributes.has_bias = true;  // as the U-Net's upconvs
        return graph.conv_transpose(inputs[0], out, attributes, "op");
    };
    return c;
}

OpCase max_pool_case(const Net& net, std::int64_t channels, std::int64_t extent) {
    OpCase c;
    c.name = cat({"max_pool", net.dims, "_k2_c", std::to_string(channels), "_", std::to_string(extent)});
    c.input = activation(net, channels, extent);
    c.memory_bound = true;
    const int rank = net.rank;
    c.add_op = [rank](Graph& graph, const std::vector<int>& inputs) {
        return graph.pool(inputs[0], ops::PoolAttributes::max_down(rank), "op");
    };
    return c;
}

OpCase batch_norm_case(const Net& net, std::int64_t channels, std::int64_t extent) {
    OpCase c;
    c.name = cat({"batch_norm", net.dims, "_relu_c", std::to_string(channels), "_", std::to_string(extent)});
    c.input = activation(net, channels, extent);
    c.memory_bound = true;
    c.add_op = [](Graph& graph, const std::vector<int>& inputs) {
        return graph.batch_norm(inputs[0], {.fuse_relu = true}, "op");
    };
    return c;
}

OpCase concat_case(const Net& net, std::int64_t channels, std::int64_t extent) {
    OpCase c;
    c.name = cat({"concat", net.dims, "_c", std::to_string(channels), "x2_", std::to_string(extent)});
    c.input = activation(net, channels, extent);
    c.num_inputs = 2;
    c.memory_bound = true;
    c.add_op = [](Graph& graph, const std::vector<int>& inputs) { return graph.concat(inputs, "op"); };
    return c;
}

OpCase relu_case(const Net& net, std::int64_t channels, std::int64_t extent) {
    OpCase c;
    c.name = cat({"relu", net.dims, "_c", std::to_string(channels), "_", std::to_string(extent)});
    c.input = activation(net, channels, extent);
    c.memory_bound = true;
    c.add_op = [](Graph& graph, const std::vector<int>& inputs) { return graph.relu(inputs[0], "op"); };
    return c;
}

OpCase add_case(const Net& net, std::int64_t channels, std::int64_t extent) {
    OpCase c;
    c.name = cat({"add", net.dims, "_c", std::to_string(channels), "_", std::to_string(extent)});
    c.input = activation(net, channels, extent);
    c.num_inputs = 2;
    c.memory_bound = true;
    c.add_op = [](Graph& graph, const std::vector<int>& inputs) { return graph.add(inputs[0], inputs[1], "op"); };
    return c;
}

// Not in the U-Net: ResNet-50's global average pooling, [32, 2048, 7, 7] → [32, 2048].
OpCase global_average_pool_case() {
    OpCase c;
    c.name = "global_avg_pool2d_c2048_7_n32";
    c.input = {32, 2048, 7, 7};
    c.memory_bound = true;
    c.add_op = [](Graph& graph, const std::vector<int>& inputs) { return graph.global_average_pool(inputs[0], "op"); };
    return c;
}

// Not in the U-Net: a ResNet-50 classifier head, [32, 2048] → [32, 1000].
OpCase dense_case() {
    OpCase c;
    c.name = "dense_2048to1000_n32";
    c.input = {32, 2048};
    c.source = Source::Relu;
    c.add_op = [](Graph& graph, const std::vector<int>& inputs) { return graph.dense(inputs[0], 1000, "op"); };
    return c;
}

std::vector<OpCase> op_cases() {
    std::vector<OpCase> cases;
    // 2D U-Net, in the order a training step runs them (forward).
    cases.push_back(conv_case(net2d, 1, 16, 256, 3, /*reads_graph_input*/ true));
    cases.push_back(conv_case(net2d, 16, 16, 256));
    cases.push_back(conv_case(net2d, 16, 32, 128));
    cases.push_back(conv_case(net2d, 32, 32, 128));
    cases.push_back(conv_case(net2d, 32, 64, 64));
    cases.push_back(conv_case(net2d, 64, 64, 64));
    cases.push_back(conv_case(net2d, 64, 128, 32));
    cases.push_back(conv_case(net2d, 128, 128, 32));
    cases.push_back(conv_case(net2d, 128, 64, 64));  // decoder: after the concat
    cases.push_back(conv_case(net2d, 64, 32, 128));
    cases.push_back(conv_case(net2d, 32, 16, 256));
    cases.push_back(conv_case(net2d, 16, 2, 256, 1, false, /*bias*/ true));  // head
    // A tile at the edge of an H split, as the first and last cores of bench/bm_partition's 4-way split
    // hold (theirs are 4× wider than tall; these square, at the levels' extents).
    cases.push_back(edge_tile_conv_case(net2d, 64, 32, 128, 1));
    cases.push_back(edge_tile_conv_case(net2d, 128, 64, 64, 1));
    cases.push_back(conv_transpose_case(net2d, 128, 64, 32));
    cases.push_back(conv_transpose_case(net2d, 64, 32, 64));
    cases.push_back(conv_transpose_case(net2d, 32, 16, 128));
    cases.push_back(batch_norm_case(net2d, 16, 256));
    cases.push_back(batch_norm_case(net2d, 32, 128));
    cases.push_back(batch_norm_case(net2d, 64, 64));
    cases.push_back(batch_norm_case(net2d, 128, 32));
    cases.push_back(max_pool_case(net2d, 16, 256));
    cases.push_back(max_pool_case(net2d, 32, 128));
    cases.push_back(max_pool_case(net2d, 64, 64));
    cases.push_back(concat_case(net2d, 16, 256));
    cases.push_back(concat_case(net2d, 32, 128));
    cases.push_back(concat_case(net2d, 64, 64));
    // Ops the U-Net with BN does not use, at its largest activation.
    cases.push_back(relu_case(net2d, 16, 256));
    cases.push_back(add_case(net2d, 16, 256));
    cases.push_back(global_average_pool_case());
    cases.push_back(dense_case());
    // 3D U-Net.
    cases.push_back(conv_case(net3d, 1, 8, 64, 3, /*reads_graph_input*/ true));
    cases.push_back(conv_case(net3d, 8, 8, 64));
    cases.push_back(conv_case(net3d, 8, 16, 32));
    cases.push_back(conv_case(net3d, 16, 16, 32));
    cases.push_back(conv_case(net3d, 16, 32, 16));
    cases.push_back(conv_case(net3d, 32, 32, 16));
    cases.push_back(conv_case(net3d, 32, 16, 32));  // decoder: after the concat
    cases.push_back(conv_case(net3d, 16, 8, 64));
    cases.push_back(conv_case(net3d, 8, 2, 64, 1, false, /*bias*/ true));  // head
    // One core's tile of the 2×2×2 split (bench/bm_partition): 32³ outputs from 33³ inputs.
    cases.push_back(edge_tile_conv_case(net3d, 8, 8, 32, 3));
    cases.push_back(edge_tile_conv_case(net3d, 16, 8, 32, 3));
    cases.push_back(conv_transpose_case(net3d, 32, 16, 16));
    cases.push_back(conv_transpose_case(net3d, 16, 8, 32));
    cases.push_back(batch_norm_case(net3d, 8, 64));
    cases.push_back(batch_norm_case(net3d, 16, 32));
    cases.push_back(batch_norm_case(net3d, 32, 16));
    cases.push_back(max_pool_case(net3d, 8, 64));
    cases.push_back(max_pool_case(net3d, 16, 32));
    cases.push_back(concat_case(net3d, 8, 64));
    cases.push_back(concat_case(net3d, 16, 32));
    return cases;
}

// ---- losses: value and gradient in one call, on the U-Nets' logits ----------------------------

// Focal and smooth L1 take [N, K, …] targets of the logits' shape (0/1 for focal); the confusion matrix
// is the evaluation's metric pass.
enum class LossKind { CrossEntropy, Dice, Focal, SmoothL1, ConfusionMatrix };

void run_loss(benchmark::State& state, LossKind kind, const Shape& logits_shape) {
    const Tensor logits = random_tensor(logits_shape, 3);
    Shape label_shape{logits_shape[0]};
    label_shape.insert(label_shape.end(), logits_shape.begin() + 2, logits_shape.end());
    const Tensor labels = random_labels(label_shape, static_cast<std::int32_t>(logits_shape[1]), 4);
    Tensor targets = random_tensor(logits_shape, 5);
    for (std::int64_t i = 0; i < targets.num_elements(); ++i) targets.data<float>()[i] = targets.data<float>()[i] > 0.5f ? 1.0f : 0.0f;
    for (auto _ : state) {
        switch (kind) {
            case LossKind::CrossEntropy: benchmark::DoNotOptimize(loss::softmax_cross_entropy(logits, labels).gradient.raw_data()); break;
            case LossKind::Dice: benchmark::DoNotOptimize(loss::dice_loss(logits, labels).gradient.raw_data()); break;
            case LossKind::Focal: benchmark::DoNotOptimize(loss::sigmoid_focal_loss(logits, targets, 100).gradient.raw_data()); break;
            case LossKind::SmoothL1: benchmark::DoNotOptimize(loss::smooth_l1_loss(logits, targets, 100).gradient.raw_data()); break;
            case LossKind::ConfusionMatrix: benchmark::DoNotOptimize(loss::confusion_matrix_from_logits(logits, labels).total()); break;
        }
    }
    // Read the logits and labels, write the gradient.
    const double bytes = 4 * (2 * elements(logits_shape) + elements(label_shape));
    state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["Gvoxel/s"] =
        benchmark::Counter(elements(label_shape) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- optimizers: one step over a parameter list -------------------------------------------------

std::vector<Parameter> make_parameters(const std::vector<Shape>& shapes) {
    std::vector<Parameter> parameters;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
        parameters.push_back(
            {cat({"p", std::to_string(i)}), random_tensor(shapes[i], 5 + i), random_tensor(shapes[i], 1000 + i), true});
    }
    return parameters;
}

std::vector<Shape> unet2d_parameter_shapes() {
    const Graph unet = networks::make_unet({.depth = 4, .base_width = 16, .num_classes = 2}, {4, 1, 256, 256});
    std::vector<Shape> shapes;
    for (const graph::ParameterSpec& spec : unet.parameters()) shapes.push_back(spec.shape);
    return shapes;
}

// Per element, SGD with momentum (v = μv + g, w −= lr·v) is 4 FLOPs and reads w, g, v and writes w, v
// (20 bytes); Adam's update is about 12 FLOPs (a sqrt and a divide among them) and reads w, g, m, s and
// writes w, m, s (28 bytes). The optimizers' loops are single-threaded.
void run_optimizer(benchmark::State& state, train::OptimizerKind kind, const std::vector<Shape>& shapes) {
    std::vector<Parameter> parameters = make_parameters(shapes);
    auto optimizer = train::make_optimizer({.kind = kind, .momentum = 0.9});
    optimizer->step(parameters, 1e-6);  // creates the slots
    double count = 0;
    for (const Shape& shape : shapes) count += elements(shape);
    for (auto _ : state) {
        optimizer->step(parameters, 1e-6);
        benchmark::ClobberMemory();
    }
    const bool sgd = kind == train::OptimizerKind::Sgd;
    state.counters["params"] = count;
    state.counters["GFLOP/s"] =
        benchmark::Counter((sgd ? 4 : 12) * count * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["GB/s"] =
        benchmark::Counter((sgd ? 20 : 28) * count * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- registration -------------------------------------------------------------------------------

bool register_all() {
    for (const OpCase& c : op_cases()) {
        for (const bool backward : {false, true}) {
            const std::string name = cat({"bm_", c.name, backward ? "_fwdbwd" : "_fwd"});
            auto* bm = benchmark::RegisterBenchmark(
                name.c_str(), [c, backward](benchmark::State& state) { run_op(state, c, backward); });
            bm->UseManualTime()->Unit(benchmark::kMillisecond);
            // Memory-bound ops are short: 0.1 s of op time is hundreds of runs, and keeps the whole program short.
            if (c.memory_bound) bm->MinTime(0.1);
            if (c.conv_out > 0) {
                const std::string alone = cat({"bm_onednn_", c.name, backward ? "_fwdbwd" : "_fwd"});
                benchmark::RegisterBenchmark(alone.c_str(), [c, backward](benchmark::State& state) { run_onednn_conv(state, c, backward); })
                    ->UseManualTime()
                    ->Unit(benchmark::kMillisecond);
            }
        }
    }
    const struct {
        const char* name;
        LossKind kind;
        Shape logits;
    } losses[] = {
        {"bm_softmax_cross_entropy2d_c2_256", LossKind::CrossEntropy, {4, 2, 256, 256}},
        {"bm_dice_loss2d_c2_256", LossKind::Dice, {4, 2, 256, 256}},
        {"bm_softmax_cross_entropy3d_c2_64", LossKind::CrossEntropy, {1, 2, 64, 64, 64}},
        {"bm_dice_loss3d_c2_64", LossKind::Dice, {1, 2, 64, 64, 64}},
        {"bm_sigmoid_focal_loss2d_c2_256", LossKind::Focal, {4, 2, 256, 256}},
        {"bm_smooth_l1_loss2d_c2_256", LossKind::SmoothL1, {4, 2, 256, 256}},
        {"bm_confusion_matrix2d_c2_256", LossKind::ConfusionMatrix, {4, 2, 256, 256}},
    };
    for (const auto& l : losses) {
        const LossKind kind = l.kind;
        const Shape logits = l.logits;
        benchmark::RegisterBenchmark(l.name, [kind, logits](benchmark::State& state) { run_loss(state, kind, logits); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
    }
    const std::vector<Shape> one_million{{1024, 1024}};
    const std::vector<Shape> unet2d = unet2d_parameter_shapes();
    benchmark::RegisterBenchmark(
        "bm_sgd_momentum_1M",
        [one_million](benchmark::State& state) { run_optimizer(state, train::OptimizerKind::Sgd, one_million); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(
        "bm_sgd_momentum_unet2d",
        [unet2d](benchmark::State& state) { run_optimizer(state, train::OptimizerKind::Sgd, unet2d); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(
        "bm_adam_1M",
        [one_million](benchmark::State& state) { run_optimizer(state, train::OptimizerKind::Adam, one_million); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    return true;
}

[[maybe_unused]] const bool registered = register_all();

}  // namespace
