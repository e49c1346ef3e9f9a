// The equivalence contract: a partitioned run computes the same function as one core does.
//
// Every layout trains the same model, data and seed for three steps on the simulated cores and on the
// single-core train::Trainer, which shares none of the mesh's code (oneDNN's own batch norm, no tiles,
// no halos, no reductions over cores), and compares the loss of every step and, after the last, every
// tensor of every core on its own: each weight gradient, weight and BN running statistic, as
// ‖mesh − reference‖ / max(‖reference‖, floor) (Euclidean norms). The floor is stated per tensor (see
// floors_of): zero, except for biases and BN shifts, whose gradients are sums that cancel. The worst
// tensor of each layer is printed. Tolerance, f32: 2e-5 per tensor (rounding through two batch-norm
// implementations and three SGD steps; ≤ 6.2e-6 measured on an AVX-512 Xeon), 2e-2 when ReLU inputs
// flipped sides of the kink between the two runs (counted and printed). bf16 as stated on its cases.
// Detection layouts train a small RetinaNet on synthetic shapes: the targets, the focal and box losses
// and their reductions over the cores (detection/detector.hpp) against the Trainer's on whole images.
// Adding a layout or a model is one line in kCases.
#include "mesh/core_mesh.hpp"
#include "mesh/equivalence.hpp"
#include "mesh_test_support.hpp"
#include "core/random.hpp"
#include "data/synthetic_shapes.hpp"
#include "networks/models.hpp"
#include "networks/retinanet.hpp"
#include "train/trainer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <ostream>
#include <map>
#include <memory>
#include <string_view>

using namespace tessera;

namespace {

using test::make_batch;

enum class Model { UNet2D, UNet2DNoBN, UNet2DWide, UNet2DStrided, UNet3D, UNet3DStrided, ResNet18, ResNeXt50, RetinaNet18 };

struct Case {
    const char* name = "";
    Model model = Model::UNet2D;
    Shape input;                              // one replica's [N, C, (D,) H, W]
    std::vector<std::int64_t> pieces;         // per spatial axis; empty when `boundaries` is given
    std::vector<std::vector<std::int64_t>> boundaries;  // explicit tile boundaries (uneven layouts)
    std::int64_t replicas = 1;
    graph::Precision precision = graph::Precision::F32;
    double tolerance = 2e-5;               // per tensor, relative (see the top of the file)
    bool aligned = false;                     // pieces placed on the model's stride alignment
    bool cross_replica_bn = false;
    int steps = 3;
};

// gtest prints a failing case by its name.
void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

graph::Graph make_model(Model kind, const Shape& input) {
    switch (kind) {
        case Model::UNet2D: return networks::make_unet({.depth = 3, .base_width = 8, .num_classes = 3}, input);
        case Model::UNet2DNoBN: return networks::make_unet({.depth = 3, .base_width = 8, .num_classes = 3, .batch_norm = false}, input);
        // 32 channels from the first level: layers large enough for oneDNN's Winograd kernels, on one core and on tiles.
        case Model::UNet2DWide: return networks::make_unet({.depth = 2, .base_width = 32, .num_classes = 3}, input);
        case Model::UNet3D: return networks::make_unet({.depth = 3, .base_width = 4, .num_classes = 2}, input);
        // nnU-Net's and MLPerf's variant: stride-2 first convolutions instead of pools; in 3D with NVIDIA's 3×3×3 head.
        case Model::UNet2DStrided:
            return networks::make_unet({.depth = 3, .base_width = 8, .num_classes = 3,
                                        .downsampling = networks::UNetConfig::Downsampling::StridedConv},
                                       input);
        case Model::UNet3DStrided:
            return networks::make_unet({.depth = 3, .base_width = 4, .num_classes = 2,
                                        .downsampling = networks::UNetConfig::Downsampling::StridedConv, .head_kernel = 3},
                                       input);
        case Model::ResNet18: return networks::make_resnet({.depth = 18, .num_classes = 5, .base_width = 8}, input);
        // Grouped 3×3 convolutions (4 groups of 2 channels in the first stage) on the tiles.
        case Model::ResNeXt50:
            return networks::make_resnet({.depth = 50, .num_classes = 5, .base_width = 8, .groups = 4, .width_per_group = 2}, input);
        case Model::RetinaNet18:
            return networks::make_retinanet({.resnet_depth = 18, .num_classes = 4, .num_anchors = 9, .fpn_channels = 16,
                                             .max_level = 5, .head_convs = 1},
                                            input);
    }
    return graph::Graph("unknown");
}

Case layout(const char* name, Model model, Shape input, std::vector<std::int64_t> pieces) {
    Case c;
    c.name = name;
    c.model = model;
    c.input = std::move(input);
    c.pieces = std::move(pieces);
    return c;
}
Case uneven(const char* name, Model model, Shape input, std::vector<std::vector<std::int64_t>> boundaries) {
    Case c = layout(name, model, std::move(input), {});
    c.boundaries = std::move(boundaries);
    return c;
}
Case aligned(Case c) { c.aligned = true; return c; }
Case replicas(Case c, std::int64_t count, bool cross_replica_bn = false) {
    c.replicas = count;
    c.cross_replica_bn = cross_replica_bn;
    return c;
}
Case two_steps(Case c) {
    c.steps = 2;
    return c;
}
// bf16 cases compare one step (see Bf16Equivalence).
Case bf16(Case c, double tolerance) {
    c.precision = graph::Precision::BF16;
    c.tolerance = tolerance;
    c.steps = 1;
    return c;
}

const Case kCases[] = {
    // One core: the mesh's own code (its batch norm, its reductions) with nothing split.
    layout("unet2d_one_core", Model::UNet2D, {2, 1, 64, 64}, {1, 1}),
    layout("unet3d_one_core", Model::UNet3D, {1, 1, 16, 16, 16}, {1, 1, 1}),
    layout("resnet18_one_core", Model::ResNet18, {2, 3, 64, 64}, {1, 1}),
    // 2D U-Net: 2-, 4- and 8-way along H, W and both.
    layout("unet2d_h2", Model::UNet2D, {2, 1, 64, 64}, {2, 1}),
    layout("unet2d_w2", Model::UNet2D, {2, 1, 64, 64}, {1, 2}),
    layout("unet2d_h4", Model::UNet2D, {2, 1, 64, 64}, {4, 1}),
    layout("unet2d_2x2", Model::UNet2D, {2, 1, 64, 64}, {2, 2}),
    layout("unet2d_w8", Model::UNet2D, {2, 1, 64, 64}, {1, 8}),
    layout("unet2d_2x4", Model::UNet2D, {2, 1, 64, 64}, {2, 4}),
    layout("unet2d_nobn_2x2", Model::UNet2DNoBN, {2, 1, 64, 64}, {2, 2}),
    // Winograd convolutions (32 → 32 channels on 64×64 tiles, ops::make_conv_kernel): forward and weights'
    // gradient with the one-sided padding of every tile of a 2×2 layout, the input gradient direct there.
    layout("unet2d_wide_2x2", Model::UNet2DWide, {1, 1, 128, 128}, {2, 2}),
    // Uneven: explicit boundaries, and extents that the cores cannot share evenly.
    uneven("unet2d_uneven_h", Model::UNet2D, {2, 1, 64, 64}, {{0, 24, 64}, {0, 64}}),
    uneven("unet2d_uneven_2x3", Model::UNet2D, {1, 1, 48, 60}, {{0, 20, 48}, {0, 12, 32, 60}}),
    aligned(layout("unet2d_padded_h8", Model::UNet2D, {1, 1, 60, 36}, {8, 1})),
    // 3D U-Net: 2-, 4-, 8- and 16-way along D, H, W and combinations.
    layout("unet3d_d2", Model::UNet3D, {1, 1, 16, 16, 16}, {2, 1, 1}),
    layout("unet3d_w2", Model::UNet3D, {1, 1, 16, 16, 16}, {1, 1, 2}),
    layout("unet3d_h4", Model::UNet3D, {1, 1, 16, 16, 16}, {1, 4, 1}),
    layout("unet3d_2x2x2", Model::UNet3D, {1, 1, 16, 16, 16}, {2, 2, 2}),
    layout("unet3d_4x2x2", Model::UNet3D, {1, 1, 16, 16, 16}, {4, 2, 2}),
    // Strided downsampling (a halo'd stride-2 convolution where the pool was); the 3D one with a 3×3×3 head.
    layout("unet2d_strided_one_core", Model::UNet2DStrided, {2, 1, 64, 64}, {1, 1}),
    layout("unet2d_strided_2x2", Model::UNet2DStrided, {2, 1, 64, 64}, {2, 2}),
    layout("unet2d_strided_w8", Model::UNet2DStrided, {2, 1, 64, 64}, {1, 8}),
    uneven("unet2d_strided_uneven_h", Model::UNet2DStrided, {2, 1, 64, 64}, {{0, 24, 64}, {0, 64}}),
    layout("unet3d_strided_one_core", Model::UNet3DStrided, {1, 1, 16, 16, 16}, {1, 1, 1}),
    layout("unet3d_strided_2x2x2", Model::UNet3DStrided, {1, 1, 16, 16, 16}, {2, 2, 2}),
    layout("unet3d_strided_h4", Model::UNet3DStrided, {1, 1, 16, 16, 16}, {1, 4, 1}),
    // ResNet-18: 4-way spatial splits (strided convolutions, a 3×3 stride-2 max pool, global pooling).
    layout("resnet18_2x2", Model::ResNet18, {2, 3, 64, 64}, {2, 2}),
    layout("resnet18_h4", Model::ResNet18, {2, 3, 128, 64}, {4, 1}),
    layout("resnext50_2x2", Model::ResNeXt50, {2, 3, 64, 64}, {2, 2}),
    // Replicas × partitions: BN per replica, and across replicas.
    replicas(layout("unet2d_2rep_x_2x2", Model::UNet2D, {2, 1, 64, 64}, {2, 2}), 2),
    replicas(layout("unet2d_2rep_x_h2_crossbn", Model::UNet2D, {2, 1, 64, 64}, {2, 1}), 2, true),
    // RetinaNet (ResNet-18, FPN P3..P5, heads shared across levels): 2-, 4- and 8-way over the image,
    // with and without replicas; two steps of one image per replica (a detection step costs several
    // U-Net steps).
    two_steps(layout("retinanet_one_core", Model::RetinaNet18, {1, 3, 128, 128}, {1, 1})),
    two_steps(layout("retinanet_1x2", Model::RetinaNet18, {1, 3, 128, 128}, {1, 2})),
    two_steps(layout("retinanet_2x2", Model::RetinaNet18, {1, 3, 128, 128}, {2, 2})),
    two_steps(layout("retinanet_4x2", Model::RetinaNet18, {1, 3, 128, 128}, {4, 2})),
    replicas(layout("retinanet_2rep_x_2x1", Model::RetinaNet18, {1, 3, 128, 128}, {2, 1}), 2),
};

// A detection batch: images [N, 3, H, W] of Gaussian noise, as the other cases (the equivalence is of
// the function, not of what it learns; synthetic shapes' flat regions put many ReLU inputs within
// rounding of the kink), and the boxes of synthetic shapes, padded to 8 (objects of 12–48 px, so every
// level has positive anchors at 128²).
struct DetectionBatch {
    Tensor images;
    std::vector<detection::PaddedGroundTruth> ground_truth;
};

DetectionBatch make_detection_batch(const Shape& image_shape, std::uint64_t seed) {
    DetectionBatch batch;
    batch.images = make_batch(image_shape, 2, true, seed).first;
    for (std::int64_t n = 0; n < image_shape[0]; ++n) {
        data::ShapesOptions options;
        options.size = {image_shape[2], image_shape[3]};
        options.min_objects = 2;
        options.max_objects = 5;
        options.min_object_size = 12;
        options.max_object_size = 48;
        options.seed = seed * 100 + static_cast<std::uint64_t>(n);
        const data::ShapesImage shapes = data::make_shapes_image(options);
        batch.ground_truth.push_back(detection::pad_ground_truth(shapes.objects, 8));
    }
    return batch;
}

detection::DetectorConfig detector_config() {
    detection::DetectorConfig config;
    config.anchors.max_level = 5;
    config.anchors.anchor_scale = 2.0;  // base sizes 16 (P3) .. 64 (P5)
    config.labeler.num_classes = data::num_shape_classes;
    config.labeler.matcher.unmatched_threshold = 0.4f;  // some ignored anchors too
    return config;
}

// ‖value − reference‖ / max(‖reference‖, floor) of one tensor (Euclidean norms; 0 when both are 0).
double relative_error(const Tensor& value, const Tensor& reference, double floor = 0) {
    EXPECT_EQ(value.shape(), reference.shape());
    const Tensor a = value.contiguous(), b = reference.contiguous();
    const float* x = a.data<float>();
    const float* y = b.data<float>();
    double difference = 0, norm = 0;
    for (std::int64_t i = 0; i < a.num_elements(); ++i) {
        difference += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
        norm += static_cast<double>(y[i]) * y[i];
    }
    const double scale = std::max(std::sqrt(norm), floor);
    if (scale == 0) return difference == 0 ? 0 : std::numeric_limits<double>::infinity();
    return std::sqrt(difference) / scale;
}

// The per-channel sums of |dy| over every other axis of [N, C, ...] (or [N, F]), added into `sums`:
// the size of the terms a bias's or a BN shift's gradient adds up. Those gradients cancel heavily (the
// layers after them centre their gradient), so their own norm can be far below the rounding of the
// sum; the norm of these sums is the scale the rounding has.
void add_summed_magnitudes(const Tensor& output_gradient, std::vector<double>& sums) {
    const Tensor dy = output_gradient.contiguous();
    const std::int64_t batch = dy.shape()[0], channels = dy.shape()[1];
    const std::int64_t inner = dy.num_elements() / (batch * channels);
    const float* g = dy.data<float>();
    sums.resize(static_cast<std::size_t>(channels), 0.0);
    for (std::int64_t c = 0; c < channels; ++c) {
        double sum = 0;
        for (std::int64_t n = 0; n < batch; ++n) {
            for (std::int64_t i = 0; i < inner; ++i) sum += std::abs(static_cast<double>(g[(n * channels + c) * inner + i]));
        }
        sums[static_cast<std::size_t>(c)] += sum;
    }
}

// Images with structure at every scale (so halos matter) and labels that depend on them.
train::TrainerConfig trainer_config(const Case& c, bool classification) {
    train::TrainerConfig config;
    config.optimizer = {.kind = train::OptimizerKind::Sgd, .momentum = 0.9};
    config.schedule = {.kind = train::ScheduleKind::Constant, .learning_rate = 0.02};
    // Cross-replica BN cases use cross-entropy alone, so the Trainer suite can compare them too.
    config.loss = classification || c.cross_replica_bn ? train::LossKind::SoftmaxCrossEntropy : train::LossKind::CrossEntropyAndDice;
    config.precision = c.precision;
    config.seed = 7;
    if (c.model == Model::RetinaNet18) {
        config.detection = detector_config();
        config.schedule.learning_rate = 0.005;  // box loss weight 50: larger steps diverge
    }
    return config;
}

mesh::MeshConfig mesh_config(const Case& c, const graph::Graph& model, bool partitioned) {
    mesh::MeshConfig mesh;
    mesh.num_replicas = c.replicas;
    mesh.cross_replica_batch_norm = c.cross_replica_bn;
    const std::size_t rank = c.input.size() - 2;
    if (!partitioned) mesh.grid = partition::SpatialGrid::even(c.input, std::vector<std::int64_t>(rank, 1));
    else if (!c.boundaries.empty()) mesh.grid.boundaries = c.boundaries;
    else if (c.aligned) mesh.grid = partition::SpatialGrid::aligned(c.input, c.pieces, partition::boundary_alignment(model));
    else mesh.grid = partition::SpatialGrid::even(c.input, c.pieces);
    return mesh;
}

// One tensor's comparison: a weight gradient (of the last step), a weight, or a BN running statistic.
struct TensorError {
    std::string name;   // "down0.conv1.weight", "down0.bn1.running_mean"
    const char* what = "";  // "gradient", "weight", "statistic"
    std::int64_t core = 0;
    double error = 0;   // relative, see relative_error
};

// The layer a tensor belongs to: its name without the last component ("down0.conv1").
std::string layer_of(const std::string& tensor_name) {
    const std::size_t dot = tensor_name.rfind('.');
    return dot == std::string::npos ? tensor_name : tensor_name.substr(0, dot);
}

struct Comparison {
    double worst_loss = 0;
    std::vector<TensorError> tensors;  // every core's every tensor
    std::int64_t relu_flips = 0;       // in the last step's forward pass, over all ReLU outputs
    std::int64_t pool_flips = 0;       // max-pool windows whose largest input is another element on each side
    std::string first_flip_layer;
    bool flipped() const { return relu_flips > 0 || pool_flips > 0; }

    const TensorError* worst(const char* what) const {
        const TensorError* result = nullptr;
        for (const TensorError& t : tensors) {
            if (std::string_view(t.what) == what && (!result || t.error > result->error)) result = &t;
        }
        return result;
    }
    double worst_error(const char* what) const {
        const TensorError* t = worst(what);
        return t ? t->error : 0;
    }
};

// The floors of one parameter's errors, stated per tensor. A bias or a BN shift (both start at zero)
// has a gradient that is a sum over every position of its layer's output gradient: its floor is the
// norm of the per-channel sums of |dy| (from the reference, over every node that uses it), and its
// value, nothing but the updates so far, has learning rate × steps × that. Every other tensor is held
// to its own norm (floor 0).
struct Floors {
    double gradient = 0, weight = 0;
};

// A shared bias (a detector's head, one parameter for every level) sums over every node that uses it.
// With replicas the gradient compared is their mean: its terms are every replica's (a replica whose
// image gives small gradients would otherwise set a floor far below the rounding of the others' sums).
Floors floors_of(std::size_t parameter, std::span<graph::Executor* const> replicas, double learning_rate, int steps) {
    const std::string& name = replicas.front()->parameters()[parameter].name;
    const std::string component = name.substr(name.rfind('.') + 1);
    if (component != "bias" && component != "shift") return {};
    std::vector<double> sums;
    for (graph::Executor* reference : replicas) {
        for (const graph::Node& node : reference->graph().nodes()) {
            if (std::find(node.parameters.begin(), node.parameters.end(), static_cast<int>(parameter)) == node.parameters.end()) continue;
            add_summed_magnitudes(reference->activation_gradient(node.id), sums);
        }
    }
    EXPECT_FALSE(sums.empty()) << "no layer uses " << name;
    double norm = 0;
    for (double& sum : sums) sum /= static_cast<double>(replicas.size());
    for (double sum : sums) norm += sum * sum;
    const double gradient_floor = std::sqrt(norm);
    return {gradient_floor, learning_rate * steps * gradient_floor};
}

// Every core's weight gradients, weights and BN statistics against the reference executor of its
// replica. Optimizers leave the gradients in place, so the last step's gradients are compared after it.
template <class ReferenceExecutor>
void compare_state(mesh::CoreMesh& mesh, ReferenceExecutor&& reference_executor, double learning_rate, int steps,
                   Comparison& result) {
    const graph::Graph& model = mesh.model();
    std::vector<graph::Executor*> replicas;  // the distinct reference executors
    for (std::int64_t r = 0; r < mesh.num_replicas(); ++r) {
        graph::Executor* executor = &reference_executor(r);
        if (std::find(replicas.begin(), replicas.end(), executor) == replicas.end()) replicas.push_back(executor);
    }
    for (std::int64_t core = 0; core < mesh.num_cores(); ++core) {
        graph::Executor& mine = mesh.executor(core);
        graph::Executor& ref = reference_executor(core / mesh.cores_per_replica());
        for (std::size_t p = 0; p < ref.parameters().size(); ++p) {
            const std::string& name = ref.parameters()[p].name;
            const Floors floors = floors_of(p, replicas, learning_rate, steps);
            result.tensors.push_back(
                {name, "gradient", core, relative_error(mine.parameters()[p].gradient, ref.parameters()[p].gradient, floors.gradient)});
            result.tensors.push_back(
                {name, "weight", core, relative_error(mine.parameters()[p].value, ref.parameters()[p].value, floors.weight)});
        }
        for (std::size_t b = 0; b < ref.buffers().size(); ++b) {
            result.tensors.push_back({model.buffers()[b].name, "statistic", core, relative_error(mine.buffers()[b], ref.buffers()[b])});
        }
    }
}

bool applies_relu(const graph::Node& node) {
    return node.kind == graph::OpKind::Relu || (node.kind == graph::OpKind::BatchNorm && node.batch_norm.fuse_relu);
}

// ReLU outputs that are zero on one side and positive on the other: an input within rounding of the
// kink landed on opposite sides. `reference_activation(node, replica)` gives the reference's value of
// a model node for one replica's batch.
template <class ReferenceActivation>
void count_relu_flips(const mesh::CoreMesh& mesh, ReferenceActivation&& reference_activation, Comparison& result) {
    for (const graph::Node& node : mesh.model().nodes()) {
        if (!applies_relu(node)) continue;
        for (std::int64_t replica = 0; replica < mesh.num_replicas(); ++replica) {
            const Tensor a = mesh.gather_activation(node.id, replica).contiguous();
            const Tensor b = reference_activation(node.id, replica).contiguous();
            const float* x = a.data<float>();
            const float* y = b.data<float>();
            std::int64_t flips = 0;
            for (std::int64_t i = 0; i < a.num_elements(); ++i) flips += (x[i] == 0) != (y[i] == 0);
            if (flips > 0 && result.first_flip_layer.empty()) result.first_flip_layer = node.name;
            result.relu_flips += flips;
        }
    }
}

// Max-pool windows whose maximum is a different element in the mesh's input and the reference's: two
// inputs within rounding of each other changed order (as a ReLU input crosses the kink), and the gradient
// goes to the other one. Which kernels order them so is the CPU's (AVX2 and AVX-512 oneDNN kernels differ).
template <class ReferenceActivation>
void count_pool_flips(const mesh::CoreMesh& mesh, ReferenceActivation&& reference_activation, Comparison& result) {
    for (const graph::Node& node : mesh.model().nodes()) {
        if (node.kind != graph::OpKind::Pool || node.pool.kind != ops::PoolKind::Max) continue;
        for (std::int64_t replica = 0; replica < mesh.num_replicas(); ++replica) {
            const std::int64_t flips = mesh::count_max_pool_flips(node, mesh.gather_activation(node.inputs[0], replica),
                                                                  reference_activation(node.inputs[0], replica));
            if (flips > 0 && result.first_flip_layer.empty()) result.first_flip_layer = node.name;
            result.pool_flips += flips;
        }
    }
}

// The single-core reference of a case: train::Trainer, which shares none of the mesh's code (oneDNN's
// own batch norm, no tiles, no halos, no reductions over cores). One Trainer on the whole batch when the
// batch norm sees the whole batch (one replica, or cross-replica BN); with per-replica BN, one Trainer
// per replica on its share, for one step: the mesh's all-reduce averages the replicas' gradients, so the
// reference gradient is the mean of the Trainers' and, SGD's first step being linear in the gradient
// (no momentum yet), the reference weight the mean of their updated weights. Each replica's BN
// statistics are its own Trainer's.
class Reference {
public:
    Reference(const Case& c, train::TrainerConfig config) : m_replica_batch(c.input[0]) {
        config.keep_activation_gradients = true;  // the floors of biases read them (the mesh under test shares them)
        Shape whole = c.input;
        whole[0] *= c.replicas;
        m_per_replica = c.replicas > 1 && !c.cross_replica_bn;
        for (std::int64_t r = 0; r < (m_per_replica ? c.replicas : 1); ++r) {
            m_trainers.push_back(std::make_unique<train::Trainer>(make_model(c.model, m_per_replica ? c.input : whole), config));
        }
    }

    // One step on the batch of every replica; the mean of the replicas' losses (the mesh's loss).
    double step(const Tensor& images, const Tensor& labels) {
        if (!m_per_replica) return m_trainers[0]->train_step(images, labels).loss;
        double loss = 0;
        for (std::size_t r = 0; r < m_trainers.size(); ++r) {
            loss += m_trainers[r]->train_step(replica_rows(images, r), replica_rows(labels, r)).loss;
        }
        if (++m_steps == 1) average_parameters();
        return loss / static_cast<double>(m_trainers.size());
    }

    // Detection: one step on every replica's images and boxes.
    double step(const DetectionBatch& batch) {
        if (!m_per_replica) return m_trainers[0]->train_step(batch.images, batch.ground_truth).loss;
        double loss = 0;
        for (std::size_t r = 0; r < m_trainers.size(); ++r) {
            const std::span<const detection::PaddedGroundTruth> boxes(batch.ground_truth);
            loss += m_trainers[r]
                        ->train_step(replica_rows(batch.images, r),
                                     boxes.subspan(r * static_cast<std::size_t>(m_replica_batch), static_cast<std::size_t>(m_replica_batch)))
                        .loss;
        }
        if (++m_steps == 1) average_parameters();
        return loss / static_cast<double>(m_trainers.size());
    }

    graph::Executor& executor(std::int64_t replica) {
        return m_trainers[m_per_replica ? static_cast<std::size_t>(replica) : 0]->executor();
    }

    // A model node's value for one replica's batch.
    Tensor activation(int node, std::int64_t replica) {
        const Tensor value = executor(replica).activation(node);
        return m_per_replica ? value : replica_rows(value, static_cast<std::size_t>(replica));
    }

    int max_steps() const { return m_per_replica ? 1 : std::numeric_limits<int>::max(); }

private:
    Tensor replica_rows(const Tensor& whole, std::size_t replica) const {
        std::vector<std::int64_t> begin(whole.shape().size(), 0), extent(whole.shape().begin(), whole.shape().end());
        begin[0] = static_cast<std::int64_t>(replica) * m_replica_batch;
        extent[0] = m_replica_batch;
        return whole.view_box(begin, extent).contiguous();
    }

    void average_parameters() {
        const auto count = static_cast<float>(m_trainers.size());
        for (std::size_t p = 0; p < m_trainers[0]->executor().parameters().size(); ++p) {
            for (Tensor Parameter::*field : {&Parameter::gradient, &Parameter::value}) {
                Tensor mean = (m_trainers[0]->executor().parameters()[p].*field).clone();
                float* m = mean.data<float>();
                for (std::size_t r = 1; r < m_trainers.size(); ++r) {
                    const float* x = (m_trainers[r]->executor().parameters()[p].*field).data<float>();
                    for (std::int64_t i = 0; i < mean.num_elements(); ++i) m[i] += x[i];
                }
                for (std::int64_t i = 0; i < mean.num_elements(); ++i) m[i] /= count;
                for (auto& trainer : m_trainers) (trainer->executor().parameters()[p].*field).copy_from(mean);
            }
        }
    }

    std::int64_t m_replica_batch = 1;
    bool m_per_replica = false;
    int m_steps = 0;
    std::vector<std::unique_ptr<train::Trainer>> m_trainers;
};

// What the last step's forward pass may differ by where a ReLU input sat within rounding of the kink and
// landed on opposite sides: one flipped element changes its gradient by O(1), which moves the weight
// gradients upstream of it by up to ~1e-2 of their norm (the equivalence view shows such flips per tile).
constexpr double kFlipTolerance = 2e-2;

void report(const Comparison& comparison, const std::string& name, double tolerance) {
    // The worst tensor of each layer (any core), in first-seen order.
    std::vector<std::string> layers;
    std::map<std::string, const TensorError*> worst;
    for (const TensorError& t : comparison.tensors) {
        const std::string layer = layer_of(t.name);
        auto [it, inserted] = worst.try_emplace(layer, &t);
        if (inserted) layers.push_back(layer);
        else if (t.error > it->second->error) it->second = &t;
    }
    std::printf("%s: loss %.1e, worst gradient %.1e, weight %.1e, BN statistic %.1e (tolerance %.0e), ReLU flips %lld, max-pool flips %lld%s%s\n",
                name.c_str(), comparison.worst_loss, comparison.worst_error("gradient"), comparison.worst_error("weight"),
                comparison.worst_error("statistic"), tolerance, static_cast<long long>(comparison.relu_flips),
                static_cast<long long>(comparison.pool_flips), comparison.flipped() ? ", first in " : "", comparison.first_flip_layer.c_str());
    for (const std::string& layer : layers) {
        const TensorError& t = *worst[layer];
        std::printf("  %-24s worst %-9s %.2e  (%s, core %lld)\n", layer.c_str(), t.what, t.error, t.name.c_str(),
                    static_cast<long long>(t.core));
    }
}

void expect_within(const Comparison& comparison, double tolerance, const std::string& name) {
    report(comparison, name, tolerance);
    EXPECT_LE(comparison.worst_loss, tolerance) << name << ": loss";
    const double tensor_tolerance = comparison.flipped() ? std::max(tolerance, kFlipTolerance) : tolerance;
    for (const TensorError& t : comparison.tensors) {
        EXPECT_LE(t.error, tensor_tolerance) << name << ": " << t.what << " of '" << t.name << "' on core " << t.core
                                             << (comparison.flipped() ? " (with ReLU or max-pool flips)" : "");
    }
}

// Every layout against the single-core Trainer: the same model, seed and batches, `c.steps` steps; the
// loss of every step and, after the last, every tensor of every core.
class Equivalence : public ::testing::TestWithParam<Case> {};

TEST_P(Equivalence, PartitionedRunMatchesTheSingleCoreTrainer) {
    const Case& c = GetParam();
    const graph::Graph model = make_model(c.model, c.input);
    const bool classification = c.model == Model::ResNet18 || c.model == Model::ResNeXt50;
    const std::int64_t num_classes = model.node(model.output_node()).output_shape[1];
    const train::TrainerConfig config = trainer_config(c, classification);
    mesh::CoreMesh mesh(model, mesh_config(c, model, true), config);
    Reference reference(c, config);
    Shape global_input = c.input;
    global_input[0] *= c.replicas;
    Comparison comparison;
    const int steps = std::min(c.steps, reference.max_steps());
    for (int step = 0; step < steps; ++step) {
        double loss = 0, reference_loss = 0;
        if (c.model == Model::RetinaNet18) {
            const DetectionBatch batch = make_detection_batch(global_input, 100 + static_cast<std::uint64_t>(step));
            loss = mesh.train_step(batch.images, batch.ground_truth).loss;
            reference_loss = reference.step(batch);
        } else {
            auto [images, labels] = make_batch(global_input, num_classes, classification, 100 + static_cast<std::uint64_t>(step));
            loss = mesh.train_step(images, labels).loss;
            reference_loss = reference.step(images, labels);
        }
        comparison.worst_loss = std::max(comparison.worst_loss, std::abs(loss - reference_loss) / std::abs(reference_loss));
    }
    compare_state(mesh, [&](std::int64_t replica) -> graph::Executor& { return reference.executor(replica); },
                  config.schedule.learning_rate, steps, comparison);
    count_relu_flips(mesh, [&](int node, std::int64_t replica) { return reference.activation(node, replica); }, comparison);
    count_pool_flips(mesh, [&](int node, std::int64_t replica) { return reference.activation(node, replica); }, comparison);
    expect_within(comparison, c.tolerance, c.name);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Equivalence, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& param) { return std::string(param.param.name); });

// bf16. The forward pass is bit-identical to the unpartitioned one (the same bf16 convolutions over the
// same rows). In backward, a border row's gradient is the core's own bf16 contribution plus its
// neighbour's bf16 halo gradient — one rounding more than the unsplit op, as a device adds them: the
// activation gradients differ by ~5e-3 (bf16's half-ulp is 2e-3), and weight gradients, sums with
// much cancellation, by up to ~10%. The unpartitioned bf16 run is itself that far from fp32. So the
// stated tolerance is relative to that: after one step, the partitioned bf16 run's gradients are
// within 1.5× of the unpartitioned bf16 run's distance from the fp32 run, and its loss within 1e-4.
class Bf16Equivalence : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16Equivalence, PartitionedIsAsCloseToFp32AsUnpartitioned) {
    const Case& c = GetParam();
    const graph::Graph model = make_model(c.model, c.input);
    const bool classification = c.model == Model::ResNet18 || c.model == Model::ResNeXt50;
    const std::int64_t num_classes = model.node(model.output_node()).output_shape[1];
    Case f32_case = c;
    f32_case.precision = graph::Precision::F32;
    mesh::CoreMesh partitioned(model, mesh_config(c, model, true), trainer_config(c, classification));
    mesh::CoreMesh unpartitioned(model, mesh_config(c, model, false), trainer_config(c, classification));
    train::TrainerConfig fp32_config = trainer_config(f32_case, classification);
    fp32_config.keep_activation_gradients = true;  // the floors of biases read them
    mesh::CoreMesh fp32(model, mesh_config(c, model, false), fp32_config);
    auto [images, labels] = make_batch(c.input, num_classes, classification, 100);
    const double partitioned_loss = partitioned.train_step(images, labels).loss;
    const double unpartitioned_loss = unpartitioned.train_step(images, labels).loss;
    fp32.train_step(images, labels);
    Comparison partitioned_error, unpartitioned_error;
    auto reference = [&](std::int64_t) -> graph::Executor& { return fp32.executor(0); };
    const double learning_rate = trainer_config(c, classification).schedule.learning_rate;
    compare_state(partitioned, reference, learning_rate, 1, partitioned_error);
    compare_state(unpartitioned, reference, learning_rate, 1, unpartitioned_error);
    const double loss_error = std::abs(partitioned_loss - unpartitioned_loss) / std::abs(unpartitioned_loss);
    std::printf("%s: loss %.1e; gradients from fp32: partitioned %.2e, unpartitioned %.2e\n", c.name, loss_error,
                partitioned_error.worst_error("gradient"), unpartitioned_error.worst_error("gradient"));
    EXPECT_LE(loss_error, 1e-4) << c.name;
    EXPECT_LE(partitioned_error.worst_error("gradient"), 1.5 * unpartitioned_error.worst_error("gradient"))
        << c.name << ": '" << partitioned_error.worst("gradient")->name << "'";
}

const Case kBf16Cases[] = {
    bf16(layout("unet2d_bf16_2x2", Model::UNet2D, {2, 1, 64, 64}, {2, 2}), 0),
    bf16(layout("unet3d_bf16_2x2x1", Model::UNet3D, {1, 1, 16, 16, 16}, {2, 2, 1}), 0),
};

INSTANTIATE_TEST_SUITE_P(Layouts, Bf16Equivalence, ::testing::ValuesIn(kBf16Cases),
                         [](const ::testing::TestParamInfo<Case>& param) { return std::string(param.param.name); });

}  // namespace
