#include "networks/models.hpp"

#include <algorithm>

#include <iomanip>
#include <sstream>

namespace tessera::networks {

using graph::Graph;

namespace {

std::string level_name(const char* part, int level) { return std::string(part) + std::to_string(level); }

// [3×3 conv → BN → ReLU] × 2; BN and ReLU fused. first_stride 2: the first convolution halves the extent
// (padding 1 on both sides, as PyTorch's nnU-Net and the ResNet builder pad a strided 3×3).
int double_conv(Graph& g, int x, std::int64_t width, int rank, bool batch_norm, const std::string& prefix,
                std::int64_t first_stride, bool valid) {
    for (int i = 1; i <= 2; ++i) {
        ops::ConvAttributes conv = valid ? ops::ConvAttributes::valid(rank, 3) : ops::ConvAttributes::same(rank, 3);
        if (i == 1) conv.stride.assign(static_cast<std::size_t>(rank), first_stride);
        conv.has_bias = !batch_norm;
        const std::string name = prefix + ".conv" + std::to_string(i);
        x = g.conv(x, width, conv, name);
        x = batch_norm ? g.batch_norm(x, {.fuse_relu = true}, prefix + ".bn" + std::to_string(i))
                       : g.relu(x, prefix + ".relu" + std::to_string(i));
    }
    return x;
}

}  // namespace

std::int64_t valid_unet_output_extent(const UNetConfig& config, std::int64_t extent) {
    const std::int64_t double_conv_loss = 4;  // two unpadded 3×3 convolutions
    std::vector<std::int64_t> skips;
    for (int level = 0; level < config.depth - 1; ++level) {
        extent -= double_conv_loss;
        if (extent < 2 || extent % 2 != 0) return 0;
        skips.push_back(extent);
        extent /= 2;
    }
    extent -= double_conv_loss;
    if (extent < 1) return 0;
    for (int level = config.depth - 2; level >= 0; --level) {
        extent = 2 * extent - double_conv_loss;  // up-convolution, then the level's convolutions
        if (extent < 1 || skips[static_cast<std::size_t>(level)] < extent + double_conv_loss) return 0;
    }
    extent -= config.head_kernel - 1;
    return extent >= 1 ? extent : 0;
}

std::int64_t valid_unet_input(const UNetConfig& config, std::int64_t input_extent) {
    std::int64_t extent = std::max<std::int64_t>(input_extent, 1);
    while (valid_unet_output_extent(config, extent) == 0) ++extent;
    return extent;
}

Graph make_unet(const UNetConfig& config, const Shape& input) {
    TESSERA_CHECK(config.depth >= 1 && config.depth <= 8, "U-Net depth must be 1..8, got " << config.depth);
    TESSERA_CHECK(config.base_width >= 1, "U-Net base_width must be ≥ 1, got " << config.base_width);
    TESSERA_CHECK(config.num_classes >= 1, "U-Net num_classes must be ≥ 1, got " << config.num_classes);
    TESSERA_CHECK(input.size() == 4 || input.size() == 5,
                  "U-Net input must be [N, C, H, W] or [N, C, D, H, W], got " << shape_to_string(input));
    const int rank = static_cast<int>(input.size()) - 2;
    const bool valid = config.padding == UNetConfig::Padding::Valid;
    TESSERA_CHECK(!valid || config.downsampling == UNetConfig::Downsampling::MaxPool,
                  "an unpadded (valid) U-Net downsamples by max pooling (Ronneberger's); strided downsampling "
                  "needs \"padding\": \"same\"");
    const std::int64_t factor = std::int64_t{1} << (config.depth - 1);
    for (std::size_t axis = 2; axis < input.size() && valid; ++axis) {
        TESSERA_CHECK(valid_unet_output_extent(config, input[axis]) > 0,
                      "an unpadded U-Net of depth " << config.depth << " loses 4 rows at every level and halves "
                                                    << "even extents only; " << shape_to_string(input)
                                                    << " does not fit it on axis " << axis << " (try "
                                                    << valid_unet_input(config, input[axis]) << ")");
    }
    for (std::size_t axis = 2; axis < input.size() && !valid; ++axis) {
        TESSERA_CHECK(input[axis] % factor == 0,
                      "a U-Net of depth " << config.depth << " pools " << config.depth - 1 << " times, so every spatial "
                                          << "extent must be divisible by " << factor << "; got "
                                          << shape_to_string(input) << " (try "
                                          << (input[axis] + factor - 1) / factor * factor << " on axis " << axis << ")");
    }
    TESSERA_CHECK(config.max_width >= 0, "U-Net max_width must be ≥ 0 (0: no cap), got " << config.max_width);
    TESSERA_CHECK(config.head_kernel == 1 || config.head_kernel == 3,
                  "U-Net head_kernel must be 1 or 3, got " << config.head_kernel);
    TESSERA_CHECK(config.up_kernel == 2 || config.up_kernel == 3, "U-Net up_kernel must be 2 or 3, got " << config.up_kernel);
    const bool strided = config.downsampling == UNetConfig::Downsampling::StridedConv;
    const auto width = [&config](int level) {
        const std::int64_t doubled = config.base_width << level;
        return config.max_width > 0 ? std::min(doubled, config.max_width) : doubled;
    };
    Graph g(std::to_string(rank) + "d-unet-d" + std::to_string(config.depth) + "-w" + std::to_string(config.base_width));
    int x = g.input(input);
    std::vector<int> skips;
    for (int level = 0; level < config.depth - 1; ++level) {
        const std::int64_t first_stride = strided && level > 0 ? 2 : 1;
        x = double_conv(g, x, width(level), rank, config.batch_norm, level_name("down", level), first_stride, valid);
        skips.push_back(x);
        if (!strided) x = g.pool(x, ops::PoolAttributes::max_down(rank), level_name("down", level) + ".pool");
    }
    x = double_conv(g, x, width(config.depth - 1), rank, config.batch_norm, "bottleneck",
                    strided && config.depth > 1 ? 2 : 1, valid);
    for (int level = config.depth - 2; level >= 0; --level) {
        ops::ConvTransposeAttributes up = ops::ConvTransposeAttributes::upsample(rank);
        up.kernel.assign(static_cast<std::size_t>(rank), config.up_kernel);
        up.has_bias = true;
        x = g.conv_transpose(x, width(level), up, level_name("up", level) + ".upconv");
        if (config.up_kernel == 3) {  // (n − 1)·2 + 3 rows; 'same' keeps the first 2n
            ops::Extents extent;
            const Shape& full = g.node(x).output_shape;
            for (std::size_t axis = 2; axis < full.size(); ++axis) extent.push_back(full[axis] - 1);
            x = g.crop(x, ops::Extents(extent.size(), 0), extent, level_name("up", level) + ".upcrop");
        }
        int skip = skips[static_cast<std::size_t>(level)];
        if (valid) {  // the skip's centre, at the up-convolution's extent (the differences are even)
            const Shape& skip_shape = g.node(skip).output_shape;
            const Shape& up_shape = g.node(x).output_shape;
            ops::Extents offset, extent;
            for (std::size_t axis = 2; axis < up_shape.size(); ++axis) {
                offset.push_back((skip_shape[axis] - up_shape[axis]) / 2);
                extent.push_back(up_shape[axis]);
            }
            skip = g.crop(skip, offset, extent, level_name("up", level) + ".crop");
        }
        x = g.concat({skip, x}, level_name("up", level) + ".concat");
        x = double_conv(g, x, width(level), rank, config.batch_norm, level_name("up", level), 1, valid);
    }
    ops::ConvAttributes head = valid ? ops::ConvAttributes::valid(rank, config.head_kernel)
                                     : ops::ConvAttributes::same(rank, config.head_kernel);
    head.has_bias = true;
    g.set_output(g.conv(x, config.num_classes, head, "head"));
    return g;
}

namespace {

struct ResNetLayout {
    bool bottleneck;
    std::vector<int> blocks;  // per stage
};

ResNetLayout resnet_layout(int depth) {
    switch (depth) {
        case 18: return {false, {2, 2, 2, 2}};
        case 34: return {false, {3, 4, 6, 3}};
        case 50: return {true, {3, 4, 6, 3}};
        case 101: return {true, {3, 4, 23, 3}};
        case 152: return {true, {3, 8, 36, 3}};
        case 200: return {true, {3, 24, 36, 3}};
        default: break;
    }
    TESSERA_REJECT("ResNet depth must be 18, 34, 50, 101, 152 or 200, got " << depth);
}

int conv_bn(Graph& g, int x, std::int64_t width, std::int64_t kernel, std::int64_t stride, bool relu,
            bool zero_init, int rank, const std::string& name, std::int64_t groups = 1) {
    ops::ConvAttributes conv = ops::ConvAttributes::same(rank, kernel);
    conv.groups = groups;
    for (std::size_t a = 0; a < conv.stride.size(); ++a) {
        conv.stride[a] = stride;
        // 'SAME' padding for the stride: total (kernel - 1), as TF pads strided convolutions.
        conv.pad_begin[a] = (kernel - 1) / 2;
        conv.pad_end[a] = kernel - 1 - (kernel - 1) / 2;
    }
    x = g.conv(x, width, conv, name + ".conv");
    return g.batch_norm(x, {.fuse_relu = relu}, name + ".bn", zero_init);
}

}  // namespace

std::vector<int> add_resnet_body(Graph& g, int x, const ResNetConfig& config) {
    const ResNetLayout layout = resnet_layout(config.depth);
    TESSERA_CHECK(config.base_width >= 1, "ResNet base_width must be ≥ 1, got " << config.base_width);
    TESSERA_CHECK(config.groups >= 1 && config.width_per_group >= 0,
                  "ResNeXt groups must be ≥ 1 and width_per_group ≥ 0, got " << config.groups << " and " << config.width_per_group);
    TESSERA_CHECK((config.groups == 1 && config.width_per_group == 0) || layout.bottleneck,
                  "ResNeXt's grouped blocks are bottlenecks: depth 50, 101, 152 or 200, got depth " << config.depth);
    // Groups alone would split ResNet's own width (torchvision reads them with a width of 64 per group):
    // ask for the width rather than guess.
    TESSERA_CHECK(config.groups == 1 || config.width_per_group > 0,
                  "a ResNeXt in " << config.groups << " groups needs width_per_group, its first stage's channels per group "
                                  << "(ResNeXt50-32x4d: groups 32, width_per_group 4), got 0");
    const std::int64_t first_inner_width =
        config.width_per_group > 0 ? config.groups * config.width_per_group : config.base_width;
    const Shape input = g.node(x).output_shape;  // a copy: adding nodes moves the graph's nodes
    TESSERA_CHECK(input.size() == 4 || input.size() == 5,
                  "a ResNet body needs [N, C, H, W] or [N, C, D, H, W], got " << shape_to_string(input));
    const int rank = static_cast<int>(input.size()) - 2;
    ops::ConvAttributes stem = ops::ConvAttributes::valid(rank, 7, 2);
    stem.pad_begin.assign(static_cast<std::size_t>(rank), 3);
    stem.pad_end.assign(static_cast<std::size_t>(rank), 3);
    x = g.batch_norm(g.conv(x, config.base_width, stem, "stem.conv"), {.fuse_relu = true}, "stem.bn");
    ops::PoolAttributes pool;
    pool.kind = ops::PoolKind::Max;
    pool.kernel.assign(static_cast<std::size_t>(rank), 3);
    pool.stride.assign(static_cast<std::size_t>(rank), 2);
    pool.pad_begin.assign(static_cast<std::size_t>(rank), 1);
    pool.pad_end.assign(static_cast<std::size_t>(rank), 1);
    x = g.pool(x, pool, "stem.pool");

    std::vector<int> stage_outputs;
    std::int64_t channels = config.base_width;
    for (std::size_t stage = 0; stage < layout.blocks.size(); ++stage) {
        const std::int64_t width = config.base_width << stage;
        const std::int64_t inner_width = first_inner_width << stage;  // a bottleneck's 3×3 layer
        const std::int64_t out_channels = layout.bottleneck ? 4 * width : width;
        for (int block = 0; block < layout.blocks[stage]; ++block) {
            const std::int64_t stride = (block == 0 && stage > 0) ? 2 : 1;
            const std::string name = "stage" + std::to_string(stage + 1) + ".block" + std::to_string(block);
            int shortcut = x;
            if (stride != 1 || channels != out_channels) {
                shortcut = conv_bn(g, x, out_channels, 1, stride, false, false, rank, name + ".projection");
            }
            int y = x;
            if (layout.bottleneck) {
                y = conv_bn(g, y, inner_width, 1, 1, true, false, rank, name + ".a");
                y = conv_bn(g, y, inner_width, 3, stride, true, false, rank, name + ".b", config.groups);
                y = conv_bn(g, y, out_channels, 1, 1, false, true, rank, name + ".c");
            } else {
                y = conv_bn(g, y, width, 3, stride, true, false, rank, name + ".a");
                y = conv_bn(g, y, out_channels, 3, 1, false, true, rank, name + ".b");
            }
            x = g.relu(g.add(y, shortcut, name + ".add"), name + ".relu");
            channels = out_channels;
        }
        stage_outputs.push_back(x);
    }
    return stage_outputs;
}

Graph make_resnet(const ResNetConfig& config, const Shape& input) {
    resnet_layout(config.depth);  // an unknown depth is reported before anything else
    TESSERA_CHECK(config.num_classes >= 1, "ResNet num_classes must be ≥ 1, got " << config.num_classes);
    TESSERA_CHECK(input.size() == 4 || input.size() == 5,
                  "ResNet input must be [N, C, H, W] or [N, C, D, H, W], got " << shape_to_string(input));
    for (std::size_t axis = 2; axis < input.size(); ++axis) {
        TESSERA_CHECK(input[axis] >= 32, "ResNet downsamples 32×, so spatial extents must be ≥ 32, got "
                                             << shape_to_string(input));
    }
    Graph g("resnet" + std::to_string(config.depth));
    const std::vector<int> stages = add_resnet_body(g, g.input(input), config);
    const int x = g.global_average_pool(stages.back(), "head.pool");
    g.set_output(g.dense(x, config.num_classes, "head.dense"));
    return g;
}

std::string summary(const Graph& graph) {
    std::ostringstream out;
    out << graph.name() << ": " << graph.parameter_count() << " parameters\n";
    out << std::left << std::setw(32) << "node" << std::setw(16) << "op" << std::setw(24) << "output" << std::right
        << std::setw(12) << "params" << std::setw(12) << "GFLOP fwd" << std::setw(12) << "saved MB" << '\n';
    double total_flops = 0, total_saved = 0;
    for (const graph::Node& node : graph.nodes()) {
        const graph::NodeCost cost = graph.cost(node.id);
        total_flops += cost.forward_flops;
        total_saved += static_cast<double>(cost.saved_bytes);
        out << std::left << std::setw(32) << node.name << std::setw(16) << graph::op_name(node.kind) << std::setw(24)
            << shape_to_string(node.output_shape) << std::right << std::setw(12) << cost.parameter_count << std::setw(12)
            << std::fixed << std::setprecision(3) << cost.forward_flops / 1e9 << std::setw(12) << std::setprecision(1)
            << static_cast<double>(cost.saved_bytes) / 1e6 << '\n';
    }
    out << "total: " << std::setprecision(2) << total_flops / 1e9 << " GFLOP forward, " << std::setprecision(1)
        << total_saved / 1e6 << " MB saved for backward\n";
    return out.str();
}

}  // namespace tessera::networks
