#include "graph/graph.hpp"

#include <algorithm>

namespace tessera::graph {

std::string_view op_name(OpKind kind) {
    switch (kind) {
        case OpKind::Input: return "input";
        case OpKind::Conv: return "conv";
        case OpKind::ConvTranspose: return "conv_transpose";
        case OpKind::Pool: return "pool";
        case OpKind::BatchNorm: return "batch_norm";
        case OpKind::Relu: return "relu";
        case OpKind::Add: return "add";
        case OpKind::Concat: return "concat";
        case OpKind::GlobalAvgPool: return "global_average_pool";
        case OpKind::Dense: return "dense";
        case OpKind::Halo: return "halo";
        case OpKind::Upsample: return "upsample";
        case OpKind::Crop: return "crop";
    }
    return "?";
}

const Node& Graph::node(int id) const {
    TESSERA_CHECK(id >= 0 && id < static_cast<int>(m_nodes.size()),
                  "graph '" << m_name << "' has nodes 0.." << static_cast<int>(m_nodes.size()) - 1 << ", got " << id);
    return m_nodes[static_cast<std::size_t>(id)];
}

const Node& Graph::checked(int id, const char* op) const {
    TESSERA_CHECK(id >= 0 && id < static_cast<int>(m_nodes.size()),
                  op << " refers to node " << id << " but graph '" << m_name << "' has " << m_nodes.size()
                     << " nodes; add inputs before their consumers");
    return m_nodes[static_cast<std::size_t>(id)];
}

int Graph::add_node(Node node) {
    for (const Node& existing : m_nodes) {
        TESSERA_CHECK(existing.name != node.name, "graph '" << m_name << "' already has a node named '" << node.name
                                                            << "'; node names must be unique");
    }
    node.id = static_cast<int>(m_nodes.size());
    m_nodes.push_back(std::move(node));
    return m_nodes.back().id;
}

int Graph::checked_parameter(int parameter) const {
    TESSERA_CHECK(parameter >= 0 && parameter < static_cast<int>(m_parameters.size()),
                  "graph '" << m_name << "' has parameters 0.." << static_cast<int>(m_parameters.size()) - 1 << ", got "
                            << parameter);
    return parameter;
}

int Graph::add_parameter(ParameterSpec spec) {
    m_parameters.push_back(std::move(spec));
    return static_cast<int>(m_parameters.size()) - 1;
}

int Graph::input(Shape shape, std::string name) {
    TESSERA_CHECK(m_input < 0, "graph '" << m_name << "' already has an input; one input per graph");
    TESSERA_CHECK(shape.size() == 4 || shape.size() == 5 || shape.size() == 2,
                  "the input must be [N, C, H, W], [N, C, D, H, W] or [N, F], got " << shape_to_string(shape));
    for (std::int64_t extent : shape) {
        TESSERA_CHECK(extent > 0, "input extents must be positive, got " << shape_to_string(shape));
    }
    Node node;
    node.kind = OpKind::Input;
    node.name = std::move(name);
    node.output_shape = std::move(shape);
    m_input = add_node(std::move(node));
    return m_input;
}

int Graph::conv(int x, std::int64_t out_channels, ops::ConvAttributes attributes, std::string name,
                int share_parameters_of) {
    const Node& source = checked(x, "conv");
    Node node;
    node.kind = OpKind::Conv;
    node.name = std::move(name);
    node.inputs = {x};
    node.out_channels = out_channels;
    node.output_shape = ops::conv_output_shape(source.output_shape, out_channels, attributes);
    const std::int64_t in_channels = source.output_shape[1];
    const Shape weight_shape = ops::conv_weight_shape(in_channels, out_channels, attributes);
    if (share_parameters_of >= 0) {
        const Node& owner = checked(share_parameters_of, "conv sharing parameters");
        TESSERA_CHECK(owner.kind == OpKind::Conv && owner.shares_parameters_of < 0,
                      "conv '" << node.name << "' can share the parameters of a conv that owns its own, not of '"
                               << owner.name << "' (" << op_name(owner.kind) << ")");
        const Shape& owner_weight = m_parameters[static_cast<std::size_t>(owner.parameters[0])].shape;
        TESSERA_CHECK(owner_weight == weight_shape && owner.conv.has_bias == attributes.has_bias,
                      "conv '" << node.name << "' shares the parameters of '" << owner.name << "', so it needs its weight "
                               << shape_to_string(owner_weight) << (owner.conv.has_bias ? " with" : " without")
                               << " a bias; got " << shape_to_string(weight_shape)
                               << (attributes.has_bias ? " with" : " without") << " a bias");
        node.parameters = owner.parameters;
        node.shares_parameters_of = share_parameters_of;
        node.conv = std::move(attributes);
        return add_node(std::move(node));
    }
    std::int64_t taps = 1;
    for (std::int64_t k : attributes.kernel) taps *= k;
    const std::int64_t fan_in = in_channels / attributes.groups * taps;  // an output sees its group's inputs only
    node.parameters.push_back(add_parameter({node.name + ".weight", weight_shape, Initializer::HeNormal, fan_in, true}));
    if (attributes.has_bias) {
        node.parameters.push_back(add_parameter({node.name + ".bias", {out_channels}, Initializer::Zeros, 1, false}));
    }
    node.conv = std::move(attributes);
    return add_node(std::move(node));
}

int Graph::conv_transpose(int x, std::int64_t out_channels, ops::ConvTransposeAttributes attributes, std::string name) {
    const Node& source = checked(x, "conv_transpose");
    Node node;
    node.kind = OpKind::ConvTranspose;
    node.name = std::move(name);
    node.inputs = {x};
    node.out_channels = out_channels;
    node.output_shape = ops::conv_transpose_output_shape(source.output_shape, out_channels, attributes);
    const std::int64_t in_channels = source.output_shape[1];
    // Each output receives in_channels × (taps / stride^rank) products; with kernel = stride that is in_channels.
    node.parameters.push_back(add_parameter({node.name + ".weight",
                                             ops::conv_transpose_weight_shape(in_channels, out_channels, attributes),
                                             Initializer::HeNormal, in_channels, true}));
    if (attributes.has_bias) {
        node.parameters.push_back(add_parameter({node.name + ".bias", {out_channels}, Initializer::Zeros, 1, false}));
    }
    node.conv_transpose = std::move(attributes);
    return add_node(std::move(node));
}

int Graph::pool(int x, ops::PoolAttributes attributes, std::string name) {
    const Node& source = checked(x, "pool");
    Node node;
    node.kind = OpKind::Pool;
    node.name = std::move(name);
    node.inputs = {x};
    node.output_shape = ops::pool_output_shape(source.output_shape, attributes);
    node.pool = std::move(attributes);
    return add_node(std::move(node));
}

int Graph::batch_norm(int x, ops::BatchNormAttributes attributes, std::string name, bool zero_init_scale) {
    const Node& source = checked(x, "batch_norm");
    TESSERA_CHECK(source.output_shape.size() >= 2, "batch_norm needs [N, C, ...], got " << shape_to_string(source.output_shape));
    const std::int64_t channels = source.output_shape[1];
    Node node;
    node.kind = OpKind::BatchNorm;
    node.name = std::move(name);
    node.inputs = {x};
    node.output_shape = source.output_shape;
    node.parameters.push_back(add_parameter({node.name + ".scale", {channels},
                                             zero_init_scale ? Initializer::Zeros : Initializer::Ones, 1, false}));
    node.parameters.push_back(add_parameter({node.name + ".shift", {channels}, Initializer::Zeros, 1, false}));
    m_buffers.push_back({node.name + ".running_mean", {channels}, Initializer::Zeros, 1, false});
    node.buffers.push_back(static_cast<int>(m_buffers.size()) - 1);
    m_buffers.push_back({node.name + ".running_variance", {channels}, Initializer::Ones, 1, false});
    node.buffers.push_back(static_cast<int>(m_buffers.size()) - 1);
    node.batch_norm = attributes;
    return add_node(std::move(node));
}

int Graph::relu(int x, std::string name) {
    const Node& source = checked(x, "relu");
    Node node;
    node.kind = OpKind::Relu;
    node.name = std::move(name);
    node.inputs = {x};
    node.output_shape = source.output_shape;
    return add_node(std::move(node));
}

int Graph::add(int a, int b, std::string name) {
    const Node& left = checked(a, "add");
    const Node& right = checked(b, "add");
    TESSERA_CHECK(left.output_shape == right.output_shape,
                  "add '" << name << "' needs equal shapes, got " << shape_to_string(left.output_shape) << " from '"
                          << left.name << "' and " << shape_to_string(right.output_shape) << " from '" << right.name << "'");
    Node node;
    node.kind = OpKind::Add;
    node.name = std::move(name);
    node.inputs = {a, b};
    node.output_shape = left.output_shape;
    return add_node(std::move(node));
}

int Graph::concat(std::vector<int> inputs, std::string name) {
    TESSERA_CHECK(inputs.size() >= 2, "concat '" << name << "' needs at least two inputs, got " << inputs.size());
    Shape shape = checked(inputs.front(), "concat").output_shape;
    for (std::size_t i = 1; i < inputs.size(); ++i) {
        const Shape& other = checked(inputs[i], "concat").output_shape;
        Shape expected = shape;
        expected[1] = other.size() > 1 ? other[1] : -1;
        TESSERA_CHECK(other.size() == shape.size() && other == expected,
                      "concat '" << name << "' joins along channels and needs every other extent equal; got "
                                 << shape_to_string(shape) << " and " << shape_to_string(other));
        shape[1] += other[1];
    }
    Node node;
    node.kind = OpKind::Concat;
    node.name = std::move(name);
    node.inputs = std::move(inputs);
    node.output_shape = shape;
    return add_node(std::move(node));
}

int Graph::global_average_pool(int x, std::string name) {
    const Node& source = checked(x, "global_average_pool");
    TESSERA_CHECK(source.output_shape.size() >= 3,
                  "global_average_pool needs spatial axes, got " << shape_to_string(source.output_shape));
    Node node;
    node.kind = OpKind::GlobalAvgPool;
    node.name = std::move(name);
    node.inputs = {x};
    node.output_shape = {source.output_shape[0], source.output_shape[1]};
    return add_node(std::move(node));
}

int Graph::dense(int x, std::int64_t out_features, std::string name) {
    const Node& source = checked(x, "dense");
    TESSERA_CHECK(source.output_shape.size() == 2, "dense '" << name << "' needs [N, F] input (pool first), got "
                                                             << shape_to_string(source.output_shape));
    TESSERA_CHECK(out_features > 0, "dense '" << name << "' needs at least one output, got " << out_features);
    Node node;
    node.kind = OpKind::Dense;
    node.name = std::move(name);
    node.inputs = {x};
    node.out_channels = out_features;
    node.output_shape = {source.output_shape[0], out_features};
    const std::int64_t in_features = source.output_shape[1];
    // Glorot-like scale for the classifier: He normal with fan_in keeps logits O(1) at the start.
    node.parameters.push_back(add_parameter({node.name + ".weight", {out_features, in_features}, Initializer::HeNormal,
                                             in_features, true}));
    node.parameters.push_back(add_parameter({node.name + ".bias", {out_features}, Initializer::Zeros, 1, false}));
    return add_node(std::move(node));
}

int Graph::halo(int x, const ops::Extents& spatial_extent, ops::HaloAttributes attributes, std::string name) {
    const Node& source = checked(x, "halo");
    const std::size_t rank = source.output_shape.size() - 2;
    TESSERA_CHECK(source.output_shape.size() >= 3 && spatial_extent.size() == rank &&
                      attributes.interior_offset.size() == rank && attributes.interior_extent.size() == rank,
                  "halo '" << name << "' needs one extent, offset and interior size per spatial axis of "
                           << shape_to_string(source.output_shape));
    Shape shape{source.output_shape[0], source.output_shape[1]};
    for (std::size_t axis = 0; axis < rank; ++axis) {
        const std::int64_t offset = attributes.interior_offset[axis], interior = attributes.interior_extent[axis];
        TESSERA_CHECK(offset >= 0 && interior >= 0 && interior <= source.output_shape[axis + 2] &&
                          offset + interior <= spatial_extent[axis],
                      "halo '" << name << "': an interior of " << interior << " rows at " << offset
                               << " does not fit a buffer of " << spatial_extent[axis] << " rows along axis " << axis);
        shape.push_back(spatial_extent[axis]);
    }
    Node node;
    node.kind = OpKind::Halo;
    node.name = std::move(name);
    node.inputs = {x};
    node.output_shape = std::move(shape);
    node.halo = std::move(attributes);
    return add_node(std::move(node));
}

int Graph::upsample(int x, ops::Extents factor, std::string name) {
    const Node& source = checked(x, "upsample");
    TESSERA_CHECK(source.output_shape.size() >= 3,
                  "upsample '" << name << "' needs spatial axes [N, C, (D,) H, W], got " << shape_to_string(source.output_shape)
                               << " from '" << source.name << "'");
    const std::size_t rank = source.output_shape.size() - 2;
    TESSERA_CHECK(factor.size() == rank, "upsample '" << name << "' needs one factor per spatial axis of "
                                                      << shape_to_string(source.output_shape) << " (" << rank
                                                      << "), got " << shape_to_string(factor));
    Shape shape{source.output_shape[0], source.output_shape[1]};
    for (std::size_t axis = 0; axis < rank; ++axis) {
        TESSERA_CHECK(factor[axis] >= 1, "upsample '" << name << "' needs factors ≥ 1 (nearest neighbour repeats "
                                                      << "each row factor times), got " << shape_to_string(factor));
        shape.push_back(source.output_shape[axis + 2] * factor[axis]);
    }
    Node node;
    node.kind = OpKind::Upsample;
    node.name = std::move(name);
    node.inputs = {x};
    node.output_shape = std::move(shape);
    node.upsample_factor = std::move(factor);
    return add_node(std::move(node));
}

int Graph::crop(int x, const ops::Extents& offset, const ops::Extents& extent, std::string name) {
    const Node& source = checked(x, "crop");
    TESSERA_CHECK(source.output_shape.size() >= 3,
                  "crop '" << name << "' needs spatial axes [N, C, (D,) H, W], got " << shape_to_string(source.output_shape)
                           << " from '" << source.name << "'");
    const std::size_t rank = source.output_shape.size() - 2;
    TESSERA_CHECK(offset.size() == rank && extent.size() == rank,
                  "crop '" << name << "' needs one offset and one extent per spatial axis of "
                           << shape_to_string(source.output_shape) << ", got offset " << shape_to_string(offset)
                           << " and extent " << shape_to_string(extent));
    Shape shape{source.output_shape[0], source.output_shape[1]};
    for (std::size_t axis = 0; axis < rank; ++axis) {
        TESSERA_CHECK(offset[axis] >= 0 && extent[axis] >= 1 && offset[axis] + extent[axis] <= source.output_shape[axis + 2],
                      "crop '" << name << "': the box at " << shape_to_string(offset) << " of extent " << shape_to_string(extent)
                               << " must lie inside the input's spatial extent "
                               << shape_to_string(Shape(source.output_shape.begin() + 2, source.output_shape.end())));
        shape.push_back(extent[axis]);
    }
    Node node;
    node.kind = OpKind::Crop;
    node.name = std::move(name);
    node.inputs = {x};
    node.output_shape = std::move(shape);
    node.crop_offset = offset;
    return add_node(std::move(node));
}

void Graph::set_output(int node) {
    checked(node, "set_output");
    m_outputs = {node};
}

void Graph::add_output(int node) {
    checked(node, "add_output");
    TESSERA_CHECK(!m_outputs.empty(), "graph '" << m_name << "': set_output names the first output, add_output the others");
    TESSERA_CHECK(std::find(m_outputs.begin(), m_outputs.end(), node) == m_outputs.end(),
                  "graph '" << m_name << "': '" << m_nodes[static_cast<std::size_t>(node)].name << "' is already an output");
    m_outputs.push_back(node);
}

void Graph::set_initializer(int parameter, Initializer initializer, double constant) {
    ParameterSpec& spec = m_parameters[static_cast<std::size_t>(checked_parameter(parameter))];
    spec.initializer = initializer;
    spec.constant = constant;
}

void Graph::set_parameter_name(int parameter, std::string name) {
    checked_parameter(parameter);
    for (const ParameterSpec& spec : m_parameters) {
        TESSERA_CHECK(spec.name != name, "graph '" << m_name << "' already has a parameter named '" << name << "'");
    }
    m_parameters[static_cast<std::size_t>(parameter)].name = std::move(name);
}

int Graph::spatial_rank() const {
    TESSERA_CHECK(m_input >= 0, "graph '" << m_name << "' has no input yet");
    return static_cast<int>(m_nodes[static_cast<std::size_t>(m_input)].output_shape.size()) - 2;
}

std::int64_t Graph::parameter_count() const {
    std::int64_t count = 0;
    for (const ParameterSpec& spec : m_parameters) count += num_elements_of(spec.shape);
    return count;
}

std::vector<std::vector<int>> Graph::consumers() const {
    std::vector<std::vector<int>> result(m_nodes.size());
    for (const Node& node : m_nodes) {
        for (int input : node.inputs) result[static_cast<std::size_t>(input)].push_back(node.id);
    }
    return result;
}

NodeCost Graph::cost(int id) const {
    const Node& n = node(id);
    NodeCost cost;
    const auto output_elements = num_elements_of(n.output_shape);
    cost.output_bytes = output_elements * 4;
    if (n.shares_parameters_of < 0) {
        for (int p : n.parameters) cost.parameter_count += num_elements_of(m_parameters[static_cast<std::size_t>(p)].shape);
    }
    const auto input_elements = [&](std::size_t i) {
        return num_elements_of(m_nodes[static_cast<std::size_t>(n.inputs[i])].output_shape);
    };
    switch (n.kind) {
        case OpKind::Input: break;
        case OpKind::Conv: {
            const std::int64_t in_channels = m_nodes[static_cast<std::size_t>(n.inputs[0])].output_shape[1];
            cost.forward_flops = ops::conv_forward_flops(n.output_shape, in_channels, n.conv);
            cost.backward_flops = 2 * cost.forward_flops;  // data and weights gradients
            cost.saved_bytes = input_elements(0) * 4;       // the input, for the weights gradient
            break;
        }
        case OpKind::ConvTranspose: {
            double taps = 1;
            for (std::int64_t k : n.conv_transpose.kernel) taps *= static_cast<double>(k);
            cost.forward_flops = 2.0 * static_cast<double>(input_elements(0)) * static_cast<double>(n.out_channels) * taps;
            cost.backward_flops = 2 * cost.forward_flops;
            cost.saved_bytes = input_elements(0) * 4;
            break;
        }
        case OpKind::Pool:
            cost.forward_flops = static_cast<double>(output_elements) * static_cast<double>(num_elements_of(n.pool.kernel));
            cost.backward_flops = cost.forward_flops;
            cost.saved_bytes = n.pool.kind == ops::PoolKind::Max ? output_elements : 0;  // argmax workspace (bytes)
            break;
        case OpKind::BatchNorm:
            cost.forward_flops = 8.0 * static_cast<double>(output_elements);
            cost.backward_flops = 12.0 * static_cast<double>(output_elements);
            cost.saved_bytes = output_elements * 4 + (n.batch_norm.fuse_relu ? output_elements / 8 : 0);
            break;
        case OpKind::Relu:
            cost.forward_flops = static_cast<double>(output_elements);
            cost.backward_flops = static_cast<double>(output_elements);
            cost.saved_bytes = output_elements * 4;
            break;
        case OpKind::Add:
            cost.forward_flops = static_cast<double>(output_elements);
            break;
        case OpKind::Concat:
        case OpKind::Halo: break;
        case OpKind::GlobalAvgPool:
            cost.forward_flops = static_cast<double>(input_elements(0));
            cost.backward_flops = static_cast<double>(input_elements(0));
            break;
        case OpKind::Dense: {
            const std::int64_t in_features = m_nodes[static_cast<std::size_t>(n.inputs[0])].output_shape[1];
            cost.forward_flops = 2.0 * static_cast<double>(output_elements) * static_cast<double>(in_features);
            cost.backward_flops = 2 * cost.forward_flops;
            cost.saved_bytes = input_elements(0) * 4;
            break;
        }
        case OpKind::Upsample:
            // A copy: no arithmetic forward (memory-bound: it writes output_bytes). Backward sums the
            // factor^rank output gradients of every input element: one add per output element. Nothing
            // is kept for backward.
            cost.backward_flops = static_cast<double>(output_elements);
            break;
        case OpKind::Crop: break;  // a copy each way; nothing kept
    }
    return cost;
}

}  // namespace tessera::graph
