// Published training speeds, and what the cost model predicts for them.
//
// resources/validation/*.json hold measurements from public sources (MLPerf Training logs, vendor
// performance tables) of models Tessera can build, on devices it has presets for: model, input, global
// batch, device × cores, precision, spatial partitioning, and the figure (ms/step, images/s or
// samples/s). Each becomes a planner request for that exact layout — global batch over
// num_cores / num_cores_per_replica replicas, each cut by input_partition_dims — and the prediction
// is compared with the figure as a step time.
//
// The published model is rebuilt as closely as Tessera's builders allow; what they cannot express is
// listed in `approximations` (instance norm read as batch norm, a ResNeXt backbone read as ResNet), so
// a gap can be told apart from a cost-model error. How the framework ran the step is the case's own
// fact: `fusion` ("none" for eager PyTorch, "chains" for XLA on a GPU, "into_convolutions" for XLA on
// a TPU, "convolution_statistics" / "convolution_main_loop" for NVIDIA's NormConvolution ResNets;
// cost_model.hpp), the layout its GPU convolutions got
// (`conv_layout`: channels-first data on tensor cores costs transposes) and TF32 math for "tf32" cases.
//
//   for (const PublishedCase& c : load_published_cases(resources / "validation")) {
//       const PublishedPrediction p = predict_published(c);   // p.error = predicted / published - 1
//   }
#pragma once

#include "cost/planner.hpp"
#include "graph/graph.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace tessera::experiment {

struct PublishedCase {
    std::string name;                           // "resnet50_v100_8gpu_f16_bs1664_mlperf_v07"
    std::string file;                           // the JSON file it came from
    std::string model_kind;                     // "resnet", "unet", "retinanet"
    Shape global_input;                         // [global batch, C, (D,) H, W]
    std::string device;                         // preset id
    std::int64_t num_cores = 1;
    std::int64_t num_cores_per_replica = 1;
    std::vector<std::int64_t> spatial_pieces;   // per spatial axis (outermost first)
    graph::Precision precision = graph::Precision::F32;
    bool tf32 = false;                          // "tf32": f32 storage, convolutions on TF32 tensor cores
    std::string framework;                      // as the source ran it: "TensorFlow 1 + XLA"
    cost::ElementwiseFusion fusion = cost::ElementwiseFusion::IntoConvolutions;  // as the framework ran it
    cost::ConvLayout conv_layout = cost::ConvLayout::ChannelsLast;              // "conv_layout"; absent: channels-last
    double published_step_seconds = 0;          // the figure as a step of the global batch
    std::string measured;                       // the source's figure as written: "1234 images/s"
    std::string source;                         // title, organisation, year
    std::vector<std::string> approximations;    // what Tessera's model differs in
    // The builders' settings.
    int depth = 50;
    std::int64_t base_width = 0, max_width = 0, num_classes = 2, fpn_channels = 256, num_anchors = 9;
    std::int64_t groups = 1, width_per_group = 0;  // ResNeXt ("groups", "width_per_group"; a detector's backbone too)
    // RetinaNet's pyramid: "fpn_batch_norm", "head_batch_norm", "p6_from_c5", "coarse_levels": "round_up".
    bool fpn_batch_norm = true, head_batch_norm = true, p6_from_c5 = false, round_up_coarse_levels = false;
    bool batch_norm = true;
    bool strided_downsampling = false;          // U-Net "downsampling": "strided_conv"
    std::int64_t head_kernel = 1;               // U-Net "head_kernel"
    bool valid_padding = false;                 // U-Net "padding": "valid"
    std::int64_t up_kernel = 2;                 // U-Net "up_kernel"
    // What a fine-tuned detector leaves untrained (node-name prefixes, cost::SimulationOptions).
    std::vector<std::string> untrained, frozen_batch_norm;
};

// Every case of every *.json in `folder`, in file and case order. Throws a bad-input error naming the
// file, the case and the field for anything malformed.
std::vector<PublishedCase> load_published_cases(const std::filesystem::path& folder);

graph::Graph build_published_model(const PublishedCase& published, const Shape& replica_input);

struct PublishedPrediction {
    cost::LayoutPlan plan;                      // the case's own layout on its device
    double predicted_step_seconds = 0;
    double error = 0;                           // predicted / published − 1
};
PublishedPrediction predict_published(const PublishedCase& published);

}  // namespace tessera::experiment
