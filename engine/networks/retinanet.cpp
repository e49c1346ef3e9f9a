#include "networks/retinanet.hpp"

#include "networks/models.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessera::networks {

using graph::Graph;

namespace {

constexpr int backbone_max_level = 5;  // C5: the last ResNet stage

std::string level_name(const std::string& prefix, int level) { return prefix + std::to_string(level); }

// A 2D convolution with bias and TF's 'SAME' padding for extents divisible by the stride: total
// max(kernel − stride, 0), the smaller half before.
ops::ConvAttributes same_with_bias(std::int64_t kernel, std::int64_t stride) {
    ops::ConvAttributes conv = ops::ConvAttributes::same(2, kernel);
    const std::int64_t total = std::max<std::int64_t>(kernel - stride, 0);
    conv.stride.assign(2, stride);
    conv.pad_begin.assign(2, total / 2);
    conv.pad_end.assign(2, total - total / 2);
    conv.has_bias = true;
    return conv;
}

void check_config(const RetinaNetConfig& config) {
    TESSERA_CHECK(config.num_classes >= 1, "RetinaNet num_classes must be ≥ 1, got " << config.num_classes);
    TESSERA_CHECK(config.num_anchors >= 1, "RetinaNet num_anchors must be ≥ 1, got " << config.num_anchors);
    TESSERA_CHECK(config.fpn_channels >= 1, "RetinaNet fpn_channels must be ≥ 1, got " << config.fpn_channels);
    TESSERA_CHECK(config.head_convs >= 0, "RetinaNet head_convs must be ≥ 0, got " << config.head_convs);
    TESSERA_CHECK(config.min_level >= 2 && config.min_level <= backbone_max_level,
                  "RetinaNet min_level must be 2..5 (the ResNet's C2..C5), got " << config.min_level);
    TESSERA_CHECK(config.max_level >= backbone_max_level && config.max_level <= 10,
                  "RetinaNet max_level must be 5..10 (P5 is the top of the top-down path), got " << config.max_level);
}

// head_convs × [3×3 conv → BN + ReLU (or ReLU)], then the 3×3 output convolution; returns the output
// node. `owners`: the min_level nodes whose parameters this level's convolutions share (empty: this
// level owns them, and they are appended).
int add_head(Graph& g, int x, const RetinaNetConfig& config, const std::string& subnet, int level,
             std::int64_t outputs, std::vector<int>& owners) {
    const bool owns = owners.empty();
    const std::string prefix = subnet + ".l" + std::to_string(level);
    const auto conv = [&](int source, std::int64_t channels, const std::string& suffix, std::size_t slot) {
        const int made = g.conv(source, channels, same_with_bias(3, 1), prefix + "." + suffix, owns ? -1 : owners[slot]);
        if (owns) {
            owners.push_back(made);
            const std::vector<int>& parameters = g.node(made).parameters;
            g.set_parameter_name(parameters[0], subnet + "." + suffix + ".weight");
            g.set_parameter_name(parameters[1], subnet + "." + suffix + ".bias");
        }
        return made;
    };
    for (int i = 0; i < config.head_convs; ++i) {
        x = conv(x, config.fpn_channels, "conv" + std::to_string(i), static_cast<std::size_t>(i));
        x = config.head_batch_norm ? g.batch_norm(x, {.fuse_relu = true}, prefix + ".bn" + std::to_string(i))
                                   : g.relu(x, prefix + ".relu" + std::to_string(i));
    }
    return conv(x, outputs, "out", static_cast<std::size_t>(config.head_convs));
}

}  // namespace

std::string retinanet_feature_name(const RetinaNetConfig& config, int level) {
    return "fpn.p" + std::to_string(level) + (config.fpn_batch_norm ? ".bn" : "");
}

std::string retinanet_output_name(const std::string& subnet, int level) {
    return subnet + ".l" + std::to_string(level) + ".out";
}

std::size_t retinanet_output_index(const RetinaNetConfig& config, const std::string& subnet, int level) {
    TESSERA_CHECK(subnet == "class" || subnet == "box", "RetinaNet's subnets are 'class' and 'box', got '" << subnet << "'");
    TESSERA_CHECK(level >= config.min_level && level <= config.max_level,
                  "RetinaNet has levels " << config.min_level << ".." << config.max_level << ", got " << level);
    const int levels = config.max_level - config.min_level + 1;
    return static_cast<std::size_t>((subnet == "box" ? levels : 0) + level - config.min_level);
}

Graph make_retinanet(const RetinaNetConfig& config, const Shape& input) {
    check_config(config);
    TESSERA_CHECK(input.size() == 4, "RetinaNet input must be [N, C, H, W], got " << shape_to_string(input));
    const std::int64_t coarsest = std::int64_t{1} << config.max_level;
    const std::int64_t c5_stride = std::int64_t{1} << backbone_max_level;
    for (std::size_t axis = 2; axis < input.size(); ++axis) {
        const auto round_up = [&](std::int64_t stride) { return std::max<std::int64_t>(1, (input[axis] + stride - 1) / stride) * stride; };
        if (config.round_up_coarse_levels) {
            TESSERA_CHECK(input[axis] > 0 && input[axis] % c5_stride == 0,
                          "RetinaNet's top-down path adds P5 upsampled to C4, so H and W must be divisible by C5's stride "
                              << c5_stride << "; got " << shape_to_string(input) << " (try " << round_up(c5_stride) << " on axis "
                              << axis << ")");
        } else {
            TESSERA_CHECK(input[axis] > 0 && input[axis] % coarsest == 0,
                          "RetinaNet's coarsest level P" << config.max_level << " has stride " << coarsest
                                                         << ", so H and W must be divisible by " << coarsest << "; got "
                                                         << shape_to_string(input) << " (try " << round_up(coarsest) << " on axis "
                                                         << axis << ", or let P6.. round up as torchvision does: divisible by "
                                                         << c5_stride << " is enough then)");
        }
    }
    Graph g("retinanet-r" + std::to_string(config.resnet_depth));
    const int x = g.input(input);

    // Backbone: C2..C5 (strides 4..32).
    const std::vector<int> stages = add_resnet_body(
        g, x, {.depth = config.resnet_depth, .groups = config.resnet_groups, .width_per_group = config.resnet_width_per_group});
    const auto c = [&](int level) { return stages[static_cast<std::size_t>(level - 2)]; };

    // Feature pyramid: laterals, the top-down path and the 3×3 output convolutions on min_level..5.
    std::vector<int> lateral(backbone_max_level + 1, -1);
    for (int level = config.min_level; level <= backbone_max_level; ++level) {
        lateral[static_cast<std::size_t>(level)] =
            g.conv(c(level), config.fpn_channels, same_with_bias(1, 1), level_name("fpn.lateral", level));
    }
    std::vector<int> p(static_cast<std::size_t>(config.max_level) + 1, -1);
    int top_down = lateral[backbone_max_level];
    std::vector<int> merged(backbone_max_level + 1, -1);
    merged[backbone_max_level] = top_down;
    for (int level = backbone_max_level - 1; level >= config.min_level; --level) {
        const int up = g.upsample(top_down, {2, 2}, level_name("fpn.upsample", level));
        top_down = g.add(lateral[static_cast<std::size_t>(level)], up, level_name("fpn.merge", level));
        merged[static_cast<std::size_t>(level)] = top_down;
    }
    for (int level = config.min_level; level <= backbone_max_level; ++level) {
        p[static_cast<std::size_t>(level)] = g.conv(merged[static_cast<std::size_t>(level)], config.fpn_channels,
                                                    same_with_bias(3, 1), level_name("fpn.p", level));
    }
    // Coarser levels: P6 from P5 (or C5), then ReLU and a stride-2 convolution per level.
    for (int level = backbone_max_level + 1; level <= config.max_level; ++level) {
        int source = level == backbone_max_level + 1 && config.p6_from_c5 ? c(backbone_max_level)
                                                                           : p[static_cast<std::size_t>(level - 1)];
        if (level > backbone_max_level + 1) source = g.relu(source, level_name("fpn.p", level) + ".relu");
        ops::ConvAttributes coarse = same_with_bias(3, 2);
        if (config.round_up_coarse_levels) {  // PyTorch's padding=1: ⌈n / 2⌉ for odd n as for even
            coarse.pad_begin.assign(2, 1);
            coarse.pad_end.assign(2, 1);
        }
        p[static_cast<std::size_t>(level)] = g.conv(source, config.fpn_channels, coarse, level_name("fpn.p", level));
    }
    // Batch norm on every level (the TPU model's "p<l>-bn"); the heads read these.
    std::vector<int> feature(p);
    if (config.fpn_batch_norm) {
        for (int level = config.min_level; level <= config.max_level; ++level) {
            feature[static_cast<std::size_t>(level)] =
                g.batch_norm(p[static_cast<std::size_t>(level)], {}, retinanet_feature_name(config, level));
        }
    }

    // Heads: the class subnet on every level, then the box subnet (the TPU model's order); each
    // subnet's convolutions are min_level's, shared by the levels above.
    const double prior_bias = -std::log((1 - retinanet_prior_probability) / retinanet_prior_probability);
    std::vector<int> outputs;
    for (const std::string subnet : {"class", "box"}) {
        const std::int64_t channels = config.num_anchors * (subnet == "class" ? config.num_classes : 4);
        std::vector<int> owners;
        for (int level = config.min_level; level <= config.max_level; ++level) {
            outputs.push_back(add_head(g, feature[static_cast<std::size_t>(level)], config, subnet, level, channels, owners));
        }
        // The literature's initialisation of the subnets (Lin et al. 2017; the TPU model and torchvision
        // alike): weights N(0, 0.01²), biases 0, and the class logits' bias at the prior probability.
        for (int owner : owners) g.set_initializer(g.node(owner).parameters[0], graph::Initializer::Normal, retinanet_head_weight_sigma);
        if (subnet == "class") g.set_initializer(g.node(owners.back()).parameters[1], graph::Initializer::Constant, prior_bias);
    }
    g.set_output(outputs.front());
    for (std::size_t i = 1; i < outputs.size(); ++i) g.add_output(outputs[i]);
    return g;
}

}  // namespace tessera::networks
