// RetinaNet (Lin et al., "Focal Loss for Dense Object Detection") as a graph, laid out as Google's
// Cloud TPU reference implementation (tensorflow/tpu models/official/retinanet, retinanet_architecture.py):
//
//   RetinaNetConfig config;                                          // R50-FPN, 90 classes, 9 anchors
//   Graph g = make_retinanet(config, {8, 3, 1280, 1280});            // P3 .. P7: 160² .. 10²
//   g.parameter_count()                                              // 34,070,414 (heads shared)
//   g.output_nodes()          // class P3..P7, then box P3..P7: [8, 9·90, 160, 160] .. [8, 9·4, 10, 10]
//
// Architecture (levels min_level..max_level, default 3..7; C_l and P_l have stride 2^l):
//   backbone  ResNet (make_resnet's body: post-activation v1, BN + ReLU, no classifier) → C2..C5.
//   fpn       "fpn.lateral<l>": 1×1 conv with bias to fpn_channels on C_l, l = min_level..5;
//             top-down: P5 = lateral5, then for l = 4 .. min_level "fpn.upsample<l>" (nearest ×2 of
//             the level above) and "fpn.merge<l>" (+ lateral l);
//             "fpn.p<l>": 3×3 conv with bias on every merged level min_level..5;
//             "fpn.p6": 3×3 stride-2 conv with bias on P5 (see below); "fpn.p7.relu" then "fpn.p7":
//             3×3 stride-2 conv on ReLU(P6); levels above 7 repeat that;
//             "fpn.p<l>.bn": batch norm (no ReLU) on every level, as the TPU model's "p<l>-bn"
//             (fpn_batch_norm; without it the heads read "fpn.p<l>" itself).
//   heads     per level l and subnet s ∈ {class, box}: head_convs × ["<s>.l<l>.conv<i>": 3×3 conv with
//             bias to fpn_channels → "<s>.l<l>.bn<i>": BN + ReLU (or "<s>.l<l>.relu<i>" without
//             head_batch_norm)], then "<s>.l<l>.out": 3×3 conv with bias to num_anchors·num_classes
//             (class) or num_anchors·4 (box) channels. Anchor a's class k is channel a·K + k, its box
//             code channel a·4 + c (detection/anchors.hpp).
//   sharing   each subnet's convolutions are one set of parameters for every level (the TPU model's
//             variable scope with AUTO_REUSE, torchvision's one head module): level min_level's nodes
//             own them, named "<s>.conv<i>.weight" / "<s>.out.bias"; the other levels' nodes share them
//             (Graph::conv's share_parameters_of), and backward sums their gradients. The heads' batch
//             norms stay per level ("class-<i>-bn-<level>" on TPU).
//
// Choices, and where this graph differs from the model it describes:
//   - P6 is computed from P5 (the FPN output), as the current TPU code (resnet_fpn: feats[5] → 'p6')
//     and torchvision's LastLevelP6P7(256, 256) do. The paper, the TPU's first RetinaNet and
//     Detectron compute it from C5; set p6_from_c5 for that (+4,128,768 parameters with ResNet-50).
//   - Parameter counts (ResNet-50, 9 anchors): the TPU layout (BN in the FPN and heads) has 34,070,414
//     parameters with 90 classes. torchvision's retinanet_resnet50_fpn (no BN after the FPN nor in the
//     heads) has 34,047,374 with 90 classes and 34,068,119 with its default 91 (BN trainable, as
//     without pretrained weights); the 23,040 between the layouts are the FPN's 5 × 2 × 256 BN
//     parameters and the heads' 2 subnets × 4 convs × 5 levels × 2 × 256. fpn_batch_norm = false and
//     head_batch_norm = false build torchvision's count exactly.
//   - Outputs. Every level's class logits, then every level's box codes, are the graph's outputs
//     (output_node() is P<min_level>'s class logits). A segmentation-style driver that takes one
//     output trains only that one; the detector's loss gives all of them a gradient.
//   - Initialisation: the class outputs' bias starts at −log((1 − π)/π) with π = 0.01 (the paper's
//     prior, Initializer::Constant); every other bias at zero. Weights are He-normal; the paper, the TPU
//     model and torchvision draw the heads' from N(0, 0.01²), which starts the box
//     loss far lower — not adopted yet: the equivalence suite's floor for an FPN bias under batch norm
//     must first scale with the norm's 1/σ (see the session-11 note on issue #14).
//   - Batch norm uses the engine's defaults (ε = 1e-5, momentum 0.9; the TPU model: 1e-4, 0.997).
//   - Strided FPN convolutions pad as TF's 'SAME' (0 rows before, 1 after on even extents), the
//     backbone as make_resnet (TF's fixed padding).
#pragma once

#include "graph/graph.hpp"

#include <cstdint>
#include <string>

namespace tessera::networks {

struct RetinaNetConfig {
    int resnet_depth = 50;  // 18, 34, 50, 101, 152 or 200 (as make_resnet)
    std::int64_t resnet_groups = 1;           // a ResNeXt backbone (ResNetConfig::groups)
    std::int64_t resnet_width_per_group = 0;  // ... and its ResNetConfig::width_per_group
    std::int64_t num_classes = 90;
    std::int64_t num_anchors = 9;  // 3 scales × 3 aspect ratios
    std::int64_t fpn_channels = 256;
    int min_level = 3;  // 2..5
    int max_level = 7;  // 5..10
    int head_convs = 4;
    bool p6_from_c5 = false;  // false: P6 from P5 (the TPU code); true: from C5 (the paper, Detectron)
    bool fpn_batch_norm = true;   // BN on every pyramid level (TPU); false: none (torchvision)
    bool head_batch_norm = true;  // BN + ReLU after each head conv, per level (TPU); false: ReLU (torchvision)
    // false: H and W divisible by 2^max_level, every level exactly input / stride (the TPU code's
    // static shapes). true: divisible by 32 (C5's stride), and P6.. round up — PyTorch's 3×3 stride-2
    // convolutions padded 1 on both sides, as torchvision and MLPerf's RetinaNet (800 → P6 13, P7 7);
    // the anchors' levels round up the same way.
    bool round_up_coarse_levels = false;
};

inline constexpr double retinanet_prior_probability = 0.01;
// σ of the subnets' convolution weights at initialisation (the backbone and the pyramid stay He-normal).
inline constexpr double retinanet_head_weight_sigma = 0.01;

// input: [N, C, H, W] (C = 3 for images), H and W divisible by 2^max_level (128 by default), or by 32
// with round_up_coarse_levels.
graph::Graph make_retinanet(const RetinaNetConfig& config, const Shape& input);

// Nodes of the graph make_retinanet builds: the feature map P<level> the heads read ("fpn.p<level>.bn",
// or "fpn.p<level>" without fpn_batch_norm) and "<subnet>.l<level>.out" (subnet "class" or "box").
std::string retinanet_feature_name(const RetinaNetConfig& config, int level);
std::string retinanet_output_name(const std::string& subnet, int level);
// Position of a level's class or box output in Graph::output_nodes().
std::size_t retinanet_output_index(const RetinaNetConfig& config, const std::string& subnet, int level);

}  // namespace tessera::networks
