// Graph: a model as a static graph of ops with fixed shapes (as XLA compiles for TPUs: static shapes).
//
// Nodes are added in topological order and refer to their inputs by id. Every node knows its output
// shape, its parameters and its cost, so the cost model and the partitioner can read a model without
// running it. An Executor (executor.hpp) compiles a Graph into oneDNN kernels and runs it.
//
//   Graph graph("tiny");
//   int x = graph.input({2, 1, 64, 64});                                          // [N, C, H, W]
//   x = graph.conv(x, 16, ops::ConvAttributes::same(2, 3), "conv1");               // [2, 16, 64, 64]
//   x = graph.batch_norm(x, {.fuse_relu = true}, "bn1");
//   x = graph.pool(x, ops::PoolAttributes::max_down(2), "pool1");                 // [2, 16, 32, 32]
//   graph.set_output(graph.conv(x, 2, ops::ConvAttributes::same(2, 1), "head"));  // logits
//
// Weight sharing: a convolution may use an earlier convolution's weight and bias (a detector's heads,
// applied to every pyramid level). The parameter exists once; backward sums its gradient over uses.
//
//   int level3 = graph.conv(p3, 256, ops::ConvAttributes::same(2, 3), "head.l3");
//   int level4 = graph.conv(p4, 256, ops::ConvAttributes::same(2, 3), "head.l4", /*share_parameters_of*/ level3);
//
// Several outputs: add_output after set_output (a detector's class and box logits of every level);
// output_node() is the first.
#pragma once

#include "ops/attributes.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::graph {

// Halo exists only in a simulated core's graph (partition/core_graph.hpp): a tile widened by its
// neighbours' rows before a windowed op. Upsample is nearest-neighbour upsampling by an integer factor
// per spatial axis (an FPN's top-down path); it has no parameters.
enum class OpKind { Input, Conv, ConvTranspose, Pool, BatchNorm, Relu, Add, Concat, GlobalAvgPool, Dense, Halo, Upsample, Crop };
std::string_view op_name(OpKind kind);

enum class Initializer {
    HeNormal,  // N(0, 2 / fan_in): for weights followed by ReLU (He et al., as the seeds' models)
    Zeros,
    Ones,
    Constant,  // every element ParameterSpec::constant (a detector's prior-probability bias)
    Normal,    // N(0, constant²): RetinaNet's head convolutions, σ = 0.01 (the paper, the TPU model, torchvision)
};

struct ParameterSpec {
    std::string name;      // "enc0.conv1.weight"
    Shape shape;
    Initializer initializer = Initializer::HeNormal;
    std::int64_t fan_in = 1;
    bool apply_weight_decay = true;
    double constant = 0;   // the value of Initializer::Constant
};

struct Node {
    int id = -1;
    OpKind kind = OpKind::Input;
    std::string name;
    std::vector<int> inputs;       // node ids
    Shape output_shape;            // [N, C, (D,) H, W], or [N, F] after pooling to a vector
    std::int64_t out_channels = 0; // conv, transposed conv, dense
    ops::ConvAttributes conv;
    ops::ConvTransposeAttributes conv_transpose;
    ops::PoolAttributes pool;
    ops::BatchNormAttributes batch_norm;
    ops::HaloAttributes halo;
    ops::Extents upsample_factor;  // upsample: output rows per input row, per spatial axis (≥ 1)
    ops::Extents crop_offset;      // crop: input row of the output's first row, per spatial axis
    std::vector<int> parameters;   // indices into Graph::parameters(): weight first, then bias / scale, shift
    std::vector<int> buffers;      // indices into Graph::buffers(): BN running mean, running variance
    int shares_parameters_of = -1; // conv: the earlier conv whose parameters this one uses; -1 owns its own
};

// What one node costs; read by the cost model and the studio.
struct NodeCost {
    double forward_flops = 0;        // multiply-add = 2 FLOPs
    double backward_flops = 0;       // data and weight gradients
    std::int64_t parameter_count = 0;
    std::int64_t output_bytes = 0;   // f32 activation this node produces
    std::int64_t saved_bytes = 0;    // activations kept from forward for backward (f32)
};

class Graph {
public:
    explicit Graph(std::string name = "model") : m_name(std::move(name)) {}

    int input(Shape shape, std::string name = "input");
    // share_parameters_of: an earlier conv with the same weight shape and bias whose parameters this
    // one uses (its attributes, padding and strides included, may differ).
    int conv(int x, std::int64_t out_channels, ops::ConvAttributes attributes, std::string name,
             int share_parameters_of = -1);
    int conv_transpose(int x, std::int64_t out_channels, ops::ConvTransposeAttributes attributes, std::string name);
    int pool(int x, ops::PoolAttributes attributes, std::string name);
    // zero_init_scale: the last BN of a residual block starts at γ = 0 (the seeds' ResNet).
    int batch_norm(int x, ops::BatchNormAttributes attributes, std::string name, bool zero_init_scale = false);
    int relu(int x, std::string name);
    int add(int a, int b, std::string name);
    int concat(std::vector<int> inputs, std::string name);  // along channels
    int global_average_pool(int x, std::string name);        // → [N, C]
    int dense(int x, std::int64_t out_features, std::string name);
    // A buffer of `spatial_extent` rows per axis holding x's tile at `attributes` (see HaloAttributes).
    int halo(int x, const ops::Extents& spatial_extent, ops::HaloAttributes attributes, std::string name);
    // Nearest-neighbour upsampling: every input element repeated factor[axis] times along each spatial
    // axis (output extent = input extent × factor). factor has one entry ≥ 1 per spatial axis.
    int upsample(int x, ops::Extents factor, std::string name);
    // The box of x starting at `offset` with `extent` rows per spatial axis (an unpadded U-Net's skip
    // connection, centre-cropped to the upsampled path's extent). Channels and batch are kept.
    int crop(int x, const ops::Extents& offset, const ops::Extents& extent, std::string name);
    // The graph's outputs: set_output makes `node` the only one, add_output appends another. An output
    // must not feed another node (its gradient comes from the loss alone).
    void set_output(int node);
    void add_output(int node);
    // Changes how parameter `parameter` (an index into parameters()) starts, e.g. a classifier's bias
    // at the prior −log((1 − π) / π) (RetinaNet).
    void set_initializer(int parameter, Initializer initializer, double constant = 0);
    // A shared parameter's name says what it is rather than which node made it ("class.conv0.weight").
    void set_parameter_name(int parameter, std::string name);

    const std::string& name() const { return m_name; }
    const std::vector<Node>& nodes() const { return m_nodes; }
    const Node& node(int id) const;
    const std::vector<ParameterSpec>& parameters() const { return m_parameters; }
    const std::vector<ParameterSpec>& buffers() const { return m_buffers; }  // non-trainable state
    int input_node() const { return m_input; }
    int output_node() const { return m_outputs.empty() ? m_input : m_outputs.front(); }
    const std::vector<int>& output_nodes() const { return m_outputs; }
    int spatial_rank() const;  // 2 or 3 for images, taken from the input
    std::int64_t parameter_count() const;  // every parameter once, shared or not

    // A node that shares another's parameters counts none of them (they are the owner's).
    NodeCost cost(int node) const;
    // Consumers of each node (for gradient accumulation and liveness).
    std::vector<std::vector<int>> consumers() const;

private:
    int add_node(Node node);
    int add_parameter(ParameterSpec spec);
    const Node& checked(int id, const char* op) const;
    int checked_parameter(int parameter) const;

    std::string m_name;
    std::vector<Node> m_nodes;
    std::vector<ParameterSpec> m_parameters;
    std::vector<ParameterSpec> m_buffers;
    int m_input = -1;
    std::vector<int> m_outputs;
};

}  // namespace tessera::graph
