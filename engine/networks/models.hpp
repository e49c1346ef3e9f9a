// The seeds' models as graphs: U-Net (2D and 3D) for segmentation and ResNet for classification.
//
//   UNetConfig unet{.depth = 5, .base_width = 64, .num_classes = 2};       // the seeds' U-Net:
//   Graph g = make_unet(unet, {1, 1, 572, 572});                           // 64-128-256-512, 1024 bottleneck
//   Graph r = make_resnet({.depth = 50, .num_classes = 1000}, {8, 3, 224, 224});
//
// U-Net blocks are [3×3 conv (no bias) → BN → ReLU] × 2, 2× max-pool down, 2×2 stride-2 transposed
// convolution up, skip concatenation, 1×1 convolution head; the output is logits (softmax is in the
// loss). ResNet is post-activation (v1 with the stride on the 3×3, as the TPU reference model), with
// the last BN of every residual block initialised to γ = 0.
#pragma once

#include "graph/graph.hpp"

#include <string>
#include <vector>

namespace tessera::networks {

struct UNetConfig {
    int depth = 5;                 // levels including the bottleneck: 5 → 4 poolings
    std::int64_t base_width = 64;  // channels at level 0; doubled at every level down
    std::int64_t num_classes = 2;
    bool batch_norm = true;        // false: conv → ReLU blocks with biases (no BN)
    std::int64_t max_width = 0;    // 0: none; else channels never pass it (nnU-Net and MLPerf's 3D U-Net cap at 320)
};

struct ResNetConfig {
    int depth = 50;                // 18, 34, 50, 101, 152 or 200
    std::int64_t num_classes = 1000;
    std::int64_t base_width = 64;  // channels of the first stage
};

// input: [N, C, H, W] or [N, C, D, H, W]. Every spatial extent must be divisible by 2^(depth-1).
graph::Graph make_unet(const UNetConfig& config, const Shape& input);
graph::Graph make_resnet(const ResNetConfig& config, const Shape& input);

// The ResNet body — stem and the four stages, without the classifier — added to `graph` after node x
// ([N, C, (D,) H, W]). Returns the output of every stage: C2, C3, C4, C5 at strides 4, 8, 16, 32
// (a detector's feature pyramid reads C3..C5). make_resnet is this plus global pooling and a dense
// layer; node names are the same ("stem.conv", "stage2.block0.a.conv", ...). config.num_classes is unused.
std::vector<int> add_resnet_body(graph::Graph& graph, int x, const ResNetConfig& config);

// A table of the model, one line per node: name, op, output shape, parameters, GFLOPs, saved MB.
std::string summary(const graph::Graph& graph);

}  // namespace tessera::networks
