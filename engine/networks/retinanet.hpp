// RetinaNet (Lin et al., "Focal Loss for Dense Object Detection") as a graph, laid out as Google's
// Cloud TPU reference implementation (tensorflow/tpu models/official/retinanet, retinanet_architecture.py):
//
//   RetinaNetConfig config;                                          // R50-FPN, 90 classes, 9 anchors
//   Graph g = make_retinanet(config, {8, 3, 1280, 1280});            // P3 .. P7: 160² .. 10²
//   retinanet_shared_parameter_count(config)                         // 34,070,414 (heads counted once)
//
// Architecture (levels min_level..max_level, default 3..7; C_l and P_l have stride 2^l):
//   backbone  ResNet (make_resnet's body: post-activation v1, BN + ReLU, no classifier) → C2..C5.
//   fpn       "fpn.lateral<l>": 1×1 conv with bias to fpn_channels on C_l, l = min_level..5;
//             top-down: P5 = lateral5, then for l = 4 .. min_level "fpn.upsample<l>" (nearest ×2 of
//             the level above) and "fpn.merge<l>" (+ lateral l);
//             "fpn.p<l>": 3×3 conv with bias on every merged level min_level..5;
//             "fpn.p6": 3×3 stride-2 conv with bias on P5 (see below); "fpn.p7.relu" then "fpn.p7":
//             3×3 stride-2 conv on ReLU(P6); levels above 7 repeat that;
//             "fpn.p<l>.bn": batch norm (no ReLU) on every level, as the TPU model's "p<l>-bn".
//   heads     per level l and subnet s ∈ {class, box}: head_convs × ["<s>.l<l>.conv<i>": 3×3 conv with
//             bias to fpn_channels → "<s>.l<l>.bn<i>": BN + ReLU], then "<s>.l<l>.out": 3×3 conv with
//             bias to num_anchors·num_classes (class) or num_anchors·4 (box) channels.
//
// Choices, and where this graph differs from the model it describes:
//   - P6 is computed from P5 (the FPN output), as the current TPU code does (resnet_fpn: feats[5] →
//     'p6'). The paper, the TPU's first RetinaNet (retinanet_50: u5 → 'd6') and Detectron compute it
//     from C5; set p6_from_c5 for that (a 2048-channel input: +4,128,768 parameters with ResNet-50).
//   - Shared heads. The real model shares each subnet's convolutions across levels (the TPU model:
//     one variable scope with AUTO_REUSE); its batch norms are per level ("class-<i>-bn-<level>").
//     A Graph has one parameter set per node and no weight sharing, so every level has its own head
//     convolutions here: Graph::parameter_count() counts the head convolutions once PER LEVEL
//     (60,753,094 for the default config). retinanet_shared_parameter_count() gives the real model's
//     count, heads once. Costs (FLOPs, activations, saved bytes) are per level in the real model too,
//     so they are right as built; only the weights (and their gradients and optimizer slots) are
//     counted (max_level − min_level + 1) times for the head convolutions.
//   - One output. A Graph has one output node: it is the P<min_level> class logits ("class.l3.out").
//     Every level's class and box heads are nodes of the graph and forward runs them all; backward
//     starts the other heads from a zero gradient. This graph is primarily a cost and memory
//     description of the whole network (what a training step computes and keeps), not a detector a
//     loss can be attached to level by level.
//   - Initialisation: the class outputs' bias starts at −log((1 − π)/π) with π = 0.01 (the paper's
//     prior, Initializer::Constant); every other bias at zero. Weights are He-normal (the TPU model
//     draws the head weights from N(0, 0.01²)).
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
    std::int64_t num_classes = 90;
    std::int64_t num_anchors = 9;  // 3 scales × 3 aspect ratios
    std::int64_t fpn_channels = 256;
    int min_level = 3;  // 2..5
    int max_level = 7;  // 5..10
    int head_convs = 4;
    bool p6_from_c5 = false;  // false: P6 from P5 (the TPU code); true: from C5 (the paper, Detectron)
};

inline constexpr double retinanet_prior_probability = 0.01;

// input: [N, C, H, W] (C = 3 for images), H and W divisible by 2^max_level (128 by default).
graph::Graph make_retinanet(const RetinaNetConfig& config, const Shape& input);

// The real model's parameter count, each subnet's convolutions counted once (they are shared across
// levels); the per-level batch norms of the heads count once per level, as in the model.
std::int64_t retinanet_shared_parameter_count(const RetinaNetConfig& config);

// Nodes of the graph make_retinanet builds: "fpn.p<level>.bn" (the feature map P<level> the heads
// read) and "<subnet>.l<level>.out" (subnet "class" or "box").
std::string retinanet_feature_name(int level);
std::string retinanet_output_name(const std::string& subnet, int level);

}  // namespace tessera::networks
