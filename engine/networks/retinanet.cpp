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

// head_convs × [3×3 conv → BN + ReLU], then the 3×3 output convolution; returns the output node.
int add_head(Graph& g, int x, const RetinaNetConfig& config, const std::string& subnet, int level,
             std::int64_t outputs) {
    const std::string prefix = subnet + ".l" + std::to_string(level);
    for (int i = 0; i < config.head_convs; ++i) {
        x = g.conv(x, config.fpn_channels, same_with_bias(3, 1), prefix + ".conv" + std::to_string(i));
        x = g.batch_norm(x, {.fuse_relu = true}, prefix + ".bn" + std::to_string(i));
    }
    return g.conv(x, outputs, same_with_bias(3, 1), prefix + ".out");
}

}  // namespace

std::string retinanet_feature_name(int level) { return "fpn.p" + std::to_string(level) + ".bn"; }

std::string retinanet_output_name(const std::string& subnet, int level) {
    return subnet + ".l" + std::to_string(level) + ".out";
}

Graph make_retinanet(const RetinaNetConfig& config, const Shape& input) {
    check_config(config);
    TESSERA_CHECK(input.size() == 4, "RetinaNet input must be [N, C, H, W], got " << shape_to_string(input));
    const std::int64_t coarsest = std::int64_t{1} << config.max_level;
    for (std::size_t axis = 2; axis < input.size(); ++axis) {
        TESSERA_CHECK(input[axis] > 0 && input[axis] % coarsest == 0,
                      "RetinaNet's coarsest level P" << config.max_level << " has stride " << coarsest
                                                     << ", so H and W must be divisible by " << coarsest << "; got "
                                                     << shape_to_string(input) << " (try "
                                                     << std::max<std::int64_t>(1, (input[axis] + coarsest - 1) / coarsest) *
                                                            coarsest
                                                     << " on axis " << axis << ")");
    }
    Graph g("retinanet-r" + std::to_string(config.resnet_depth));
    const int x = g.input(input);

    // Backbone: C2..C5 (strides 4..32).
    const std::vector<int> stages = add_resnet_body(g, x, {.depth = config.resnet_depth});
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
        p[static_cast<std::size_t>(level)] =
            g.conv(source, config.fpn_channels, same_with_bias(3, 2), level_name("fpn.p", level));
    }
    // Batch norm on every level (the TPU model's "p<l>-bn"); the heads read these.
    std::vector<int> feature(p.size(), -1);
    for (int level = config.min_level; level <= config.max_level; ++level) {
        feature[static_cast<std::size_t>(level)] =
            g.batch_norm(p[static_cast<std::size_t>(level)], {}, retinanet_feature_name(level));
    }

    // Heads: the class subnet on every level, then the box subnet (the TPU model's order).
    const double prior_bias = -std::log((1 - retinanet_prior_probability) / retinanet_prior_probability);
    int output = -1;
    for (int level = config.min_level; level <= config.max_level; ++level) {
        const int logits = add_head(g, feature[static_cast<std::size_t>(level)], config, "class", level,
                                    config.num_anchors * config.num_classes);
        g.set_initializer(g.node(logits).parameters[1], graph::Initializer::Constant, prior_bias);
        if (level == config.min_level) output = logits;
    }
    for (int level = config.min_level; level <= config.max_level; ++level) {
        add_head(g, feature[static_cast<std::size_t>(level)], config, "box", level, config.num_anchors * 4);
    }
    g.set_output(output);
    return g;
}

std::int64_t retinanet_shared_parameter_count(const RetinaNetConfig& config) {
    check_config(config);
    const std::int64_t extent = std::int64_t{1} << config.max_level;  // the smallest valid input
    const Graph g = make_retinanet(config, {1, 3, extent, extent});
    // Every parameter once, except the head convolutions of levels above min_level: the model shares
    // those with min_level's (their batch norms stay per level).
    const std::string shared_level = ".l" + std::to_string(config.min_level) + ".";
    std::int64_t count = 0;
    for (const graph::Node& node : g.nodes()) {
        const bool head = node.name.starts_with("class.l") || node.name.starts_with("box.l");
        if (head && node.kind == graph::OpKind::Conv && node.name.find(shared_level) == std::string::npos) continue;
        count += g.cost(node.id).parameter_count;
    }
    return count;
}

}  // namespace tessera::networks
