// The seeds' models as graphs: U-Net (2D and 3D) for segmentation and ResNet for classification.
//
//   UNetConfig unet{.depth = 5, .base_width = 64, .num_classes = 2};       // the seeds' U-Net:
//   Graph g = make_unet(unet, {1, 1, 572, 572});                           // 64-128-256-512, 1024 bottleneck
//   Graph r = make_resnet({.depth = 50, .num_classes = 1000}, {8, 3, 224, 224});
//
// U-Net blocks are [3×3 conv (no bias) → BN → ReLU] × 2, 2× max-pool down (or a stride-2 first convolution,
// UNetConfig::downsampling), 2×2 stride-2 transposed convolution up, skip concatenation, 1×1 (or 3×3) head; the output is logits (softmax is in the
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
    // How a level halves the extent: a 2× max pool after its convolutions (Ronneberger's U-Net), or a stride-2
    // first convolution (Isensee's nnU-Net, MLPerf's and NVIDIA's 3D U-Nets; no pooling layers).
    enum class Downsampling { MaxPool, StridedConv };
    Downsampling downsampling = Downsampling::MaxPool;
    std::int64_t head_kernel = 1;  // 1 or 3: the classifier's kernel (NVIDIA's 3D U-Net uses 3×3×3)
    // Same: padded convolutions, output extent = input extent. Valid: Ronneberger's unpadded convolutions
    // (each 3×3 loses a row at both ends) with centre-cropped skips, so the output is smaller than the
    // input (572² → 388² at depth 5); such a model runs on one core per replica (a crop is not a halo).
    enum class Padding { Same, Valid };
    Padding padding = Padding::Same;
    // 2: a 2×2 stride-2 transposed convolution up (each input row makes two output rows; splits across
    // cores). 3: 3×3 stride 2 with TF's 'same' output (the full output's last row dropped), as NVIDIA's
    // 2D U-Net; one core per replica.
    std::int64_t up_kernel = 2;
};

// Valid padding: the output extent of a valid U-Net for an input extent, or 0 when that extent cannot be
// used (an odd extent before a pool, or nothing left); valid_unet_input suggests the next usable one.
std::int64_t valid_unet_output_extent(const UNetConfig& config, std::int64_t input_extent);
std::int64_t valid_unet_input(const UNetConfig& config, std::int64_t input_extent);

struct ResNetConfig {
    int depth = 50;                // 18, 34, 50, 101, 152 or 200
    std::int64_t num_classes = 1000;
    std::int64_t base_width = 64;  // channels of the first stage
    // ResNeXt (bottleneck depths only): the 3×3 convolution of every block in `groups` groups of
    // width_per_group << stage channels (ResNeXt50-32x4d: 32 and 4, a 128-channel 3×3 in stage 1);
    // block outputs as ResNet's. groups 1 with width_per_group 0 is ResNet.
    std::int64_t groups = 1;
    std::int64_t width_per_group = 0;
};

// input: [N, C, H, W] or [N, C, D, H, W]. Every spatial extent must be divisible by 2^(depth-1) (same
// padding) or usable by the unpadded network (valid_unet_output_extent > 0).
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
