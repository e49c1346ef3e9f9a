// The equivalence contract: a partitioned run computes the same function as the unpartitioned one.
//
// Every case trains the same model, data and seed for three steps partitioned and unpartitioned (the
// same mesh with one core per replica) and compares the loss of every step and, after the last, every
// weight gradient, every weight and every BN running statistic on every core. A second suite holds
// the mesh to the single-core Trainer, which shares none of its code. Errors are relative per tensor:
// ‖mesh − reference‖ / ‖reference‖ (‖·‖ the Euclidean norm). Tolerances: fp32 1e-5; bf16 as stated
// on its cases (bf16 keeps 8 bits of mantissa: a different summation order flips roundings).
// Adding a layout or a model is one line in kCases.
#include "cores/core_mesh.hpp"
#include "mesh_test_support.hpp"
#include "core/random.hpp"
#include "model/models.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace tessera;

namespace {

using test::make_batch;

enum class Model { UNet2D, UNet2DNoBN, UNet3D, ResNet18 };

struct Case {
    const char* name = "";
    Model model = Model::UNet2D;
    Shape input;                              // one replica's [N, C, (D,) H, W]
    std::vector<std::int64_t> pieces;         // per spatial axis; empty when `boundaries` is given
    std::vector<std::vector<std::int64_t>> boundaries;  // explicit tile boundaries (uneven layouts)
    std::int64_t replicas = 1;
    graph::Precision precision = graph::Precision::F32;
    double tolerance = 1e-5;
    bool aligned = false;                     // pieces placed on the model's stride alignment
    bool cross_replica_bn = false;
    int steps = 3;
};

graph::Graph make_model(Model kind, const Shape& input) {
    switch (kind) {
        case Model::UNet2D: return model::make_unet({.depth = 3, .base_width = 8, .num_classes = 3}, input);
        case Model::UNet2DNoBN: return model::make_unet({.depth = 3, .base_width = 8, .num_classes = 3, .batch_norm = false}, input);
        case Model::UNet3D: return model::make_unet({.depth = 3, .base_width = 4, .num_classes = 2}, input);
        case Model::ResNet18: return model::make_resnet({.depth = 18, .num_classes = 5, .base_width = 8}, input);
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
// bf16 cases compare one step (see Bf16Equivalence).
Case bf16(Case c, double tolerance) {
    c.precision = graph::Precision::BF16;
    c.tolerance = tolerance;
    c.steps = 1;
    return c;
}

const Case kCases[] = {
    // 2D U-Net: 2-, 4- and 8-way along H, W and both.
    layout("unet2d_h2", Model::UNet2D, {2, 1, 64, 64}, {2, 1}),
    layout("unet2d_w2", Model::UNet2D, {2, 1, 64, 64}, {1, 2}),
    layout("unet2d_h4", Model::UNet2D, {2, 1, 64, 64}, {4, 1}),
    layout("unet2d_2x2", Model::UNet2D, {2, 1, 64, 64}, {2, 2}),
    layout("unet2d_w8", Model::UNet2D, {2, 1, 64, 64}, {1, 8}),
    layout("unet2d_2x4", Model::UNet2D, {2, 1, 64, 64}, {2, 4}),
    layout("unet2d_nobn_2x2", Model::UNet2DNoBN, {2, 1, 64, 64}, {2, 2}),
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
    // ResNet-18: 4-way spatial splits (strided convolutions, a 3×3 stride-2 max pool, global pooling).
    layout("resnet18_2x2", Model::ResNet18, {2, 3, 64, 64}, {2, 2}),
    layout("resnet18_h4", Model::ResNet18, {2, 3, 128, 64}, {4, 1}),
    // Replicas × partitions: BN per replica, and across replicas.
    replicas(layout("unet2d_2rep_x_2x2", Model::UNet2D, {2, 1, 64, 64}, {2, 2}), 2),
    replicas(layout("unet2d_2rep_x_h2_crossbn", Model::UNet2D, {2, 1, 64, 64}, {2, 1}), 2, true),
};

double squared_norm(const Tensor& tensor) {
    const Tensor t = tensor.contiguous();
    double sum = 0;
    for (std::int64_t i = 0; i < t.num_elements(); ++i) sum += static_cast<double>(t.data<float>()[i]) * t.data<float>()[i];
    return sum;
}

template <class Tensors>
double floor_of(const Tensors& tensors) {  // 1% of the norm of all tensors together
    double sum = 0;
    for (const Tensor& t : tensors) sum += squared_norm(t);
    return 0.01 * std::sqrt(sum);
}

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
    return scale == 0 ? std::sqrt(difference) : std::sqrt(difference) / scale;
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
    return config;
}

cores::MeshConfig mesh_config(const Case& c, const graph::Graph& model, bool partitioned) {
    cores::MeshConfig mesh;
    mesh.num_replicas = c.replicas;
    mesh.cross_replica_batch_norm = c.cross_replica_bn;
    const std::size_t rank = c.input.size() - 2;
    if (!partitioned) mesh.grid = partition::SpatialGrid::even(c.input, std::vector<std::int64_t>(rank, 1));
    else if (!c.boundaries.empty()) mesh.grid.boundaries = c.boundaries;
    else if (c.aligned) mesh.grid = partition::SpatialGrid::aligned(c.input, c.pieces, partition::boundary_alignment(model));
    else mesh.grid = partition::SpatialGrid::even(c.input, c.pieces);
    return mesh;
}

// Loss after every step; weight gradients of the last step; then weights and BN statistics.
struct Comparison {
    double worst_loss = 0, worst_gradient = 0, worst_weight = 0, worst_buffer = 0;
    std::string worst_gradient_name;
};

// Compares every core's weight gradients, weights and BN statistics with the reference's. Optimizers
// leave the gradients in place, so the last step's gradients are compared after it.
template <class ReferenceExecutor>
void compare_state(cores::CoreMesh& partitioned, ReferenceExecutor&& reference_executor, Comparison& result) {
    for (std::int64_t core = 0; core < partitioned.num_cores(); ++core) {
        graph::Executor& ref = reference_executor(core);
        std::vector<Tensor> gradients, weights;
        for (const Parameter& p : ref.parameters()) {
            gradients.push_back(p.gradient);
            weights.push_back(p.value);
        }
        const double gradient_floor = floor_of(gradients), weight_floor = floor_of(weights), buffer_floor = floor_of(ref.buffers());
        for (std::size_t p = 0; p < ref.parameters().size(); ++p) {
            const Parameter& mine = partitioned.executor(core).parameters()[p];
            const double error = relative_error(mine.gradient, ref.parameters()[p].gradient, gradient_floor);
            if (core == 0 && std::getenv("TESSERA_EQUIVALENCE_DETAIL")) {
                std::printf("  %-28s |g| %.3e  error %.3e\n", ref.parameters()[p].name.c_str(),
                            std::sqrt(squared_norm(ref.parameters()[p].gradient)), error);
            }
            if (error > result.worst_gradient) {
                result.worst_gradient = error;
                result.worst_gradient_name = ref.parameters()[p].name;
            }
            result.worst_weight = std::max(result.worst_weight, relative_error(mine.value, ref.parameters()[p].value, weight_floor));
        }
        for (std::size_t b = 0; b < ref.buffers().size(); ++b) {
            result.worst_buffer = std::max(result.worst_buffer, relative_error(partitioned.executor(core).buffers()[b],
                                                                               ref.buffers()[b], buffer_floor));
        }
    }
}

// Runs `steps` steps on both and compares the losses of every step and the state after the last.
template <class ReferenceStep, class ReferenceExecutor>
Comparison compare_runs(cores::CoreMesh& partitioned, ReferenceStep&& reference_step, ReferenceExecutor&& reference_executor,
                        const Shape& global_input, std::int64_t num_classes, bool classification, int steps) {
    Comparison result;
    for (int step = 0; step < steps; ++step) {
        auto [images, labels] = make_batch(global_input, num_classes, classification, 100 + static_cast<std::uint64_t>(step));
        const double loss = partitioned.train_step(images, labels).loss;
        const double reference_loss = reference_step(images, labels);
        result.worst_loss = std::max(result.worst_loss, std::abs(loss - reference_loss) / std::abs(reference_loss));
    }
    compare_state(partitioned, reference_executor, result);
    return result;
}

void expect_within(const Comparison& comparison, double tolerance, const std::string& name) {
    EXPECT_LE(comparison.worst_loss, tolerance) << name << ": loss";
    EXPECT_LE(comparison.worst_gradient, tolerance) << name << ": weight gradient '" << comparison.worst_gradient_name << "'";
    EXPECT_LE(comparison.worst_weight, tolerance) << name << ": weights";
    EXPECT_LE(comparison.worst_buffer, tolerance) << name << ": BN running statistics";
    std::printf("%s: loss %.1e, gradients %.1e, weights %.1e, BN statistics %.1e (tolerance %.0e)\n", name.c_str(),
                comparison.worst_loss, comparison.worst_gradient, comparison.worst_weight, comparison.worst_buffer, tolerance);
}

// Partitioned against unpartitioned: the same mesh code, the same kernels, the whole input on one core
// per replica. What differs is exactly the partitioning — tiles, halos, reductions over cores.
class Equivalence : public ::testing::TestWithParam<Case> {};

TEST_P(Equivalence, PartitionedRunMatchesUnpartitioned) {
    const Case& c = GetParam();
    const graph::Graph model = make_model(c.model, c.input);
    const bool classification = c.model == Model::ResNet18;
    const std::int64_t num_classes = model.node(model.output_node()).output_shape[1];
    const train::TrainerConfig config = trainer_config(c, classification);
    cores::CoreMesh partitioned(model, mesh_config(c, model, true), config);
    cores::CoreMesh unpartitioned(model, mesh_config(c, model, false), config);
    Shape global_input = c.input;
    global_input[0] *= c.replicas;
    const Comparison comparison = compare_runs(
        partitioned,
        [&](const Tensor& images, const Tensor& labels) { return unpartitioned.train_step(images, labels).loss; },
        [&](std::int64_t core) -> graph::Executor& { return unpartitioned.executor(core / partitioned.cores_per_replica()); },
        global_input, num_classes, classification, c.steps);
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
    const bool classification = c.model == Model::ResNet18;
    const std::int64_t num_classes = model.node(model.output_node()).output_shape[1];
    Case f32_case = c;
    f32_case.precision = graph::Precision::F32;
    cores::CoreMesh partitioned(model, mesh_config(c, model, true), trainer_config(c, classification));
    cores::CoreMesh unpartitioned(model, mesh_config(c, model, false), trainer_config(c, classification));
    cores::CoreMesh fp32(model, mesh_config(c, model, false), trainer_config(f32_case, classification));
    auto [images, labels] = make_batch(c.input, num_classes, classification, 100);
    const double partitioned_loss = partitioned.train_step(images, labels).loss;
    const double unpartitioned_loss = unpartitioned.train_step(images, labels).loss;
    fp32.train_step(images, labels);
    Comparison partitioned_error, unpartitioned_error;
    auto reference = [&](std::int64_t) -> graph::Executor& { return fp32.executor(0); };
    compare_state(partitioned, reference, partitioned_error);
    compare_state(unpartitioned, reference, unpartitioned_error);
    const double loss_error = std::abs(partitioned_loss - unpartitioned_loss) / std::abs(unpartitioned_loss);
    std::printf("%s: loss %.1e; gradients from fp32: partitioned %.2e, unpartitioned %.2e\n", c.name, loss_error,
                partitioned_error.worst_gradient, unpartitioned_error.worst_gradient);
    EXPECT_LE(loss_error, 1e-4) << c.name;
    EXPECT_LE(partitioned_error.worst_gradient, 1.5 * unpartitioned_error.worst_gradient)
        << c.name << ": '" << partitioned_error.worst_gradient_name << "'";
}

const Case kBf16Cases[] = {
    bf16(layout("unet2d_bf16_2x2", Model::UNet2D, {2, 1, 64, 64}, {2, 2}), 0),
    bf16(layout("unet3d_bf16_2x2x1", Model::UNet3D, {1, 1, 16, 16, 16}, {2, 2, 1}), 0),
};

INSTANTIATE_TEST_SUITE_P(Layouts, Bf16Equivalence, ::testing::ValuesIn(kBf16Cases),
                         [](const ::testing::TestParamInfo<Case>& param) { return std::string(param.param.name); });

// The unpartitioned mesh against the single-core Trainer (oneDNN's own batch norm, no mesh code at
// all), and a partitioned mesh against it directly. Models whose activations have many values near a
// ReLU's kink (the 3D U-Net's first level) are left out: there, the last-bit differences between
// oneDNN's batch-norm statistics and the mesh's two-pass ones flip a few ReLU masks, and one flipped
// element moves a gradient by ~1e-3 — a discontinuity of the function, not an error of either.
struct TrainerCase {
    Case c;
    bool partitioned = false;
};

class MeshAgainstTrainer : public ::testing::TestWithParam<TrainerCase> {};

TEST_P(MeshAgainstTrainer, MatchesTheSingleCoreTrainer) {
    const Case& c = GetParam().c;
    const bool classification = c.model == Model::ResNet18;
    // With cross-replica BN the replicas together compute what one trainer does on the whole batch
    // (cross-entropy: the mean of equal-sized replicas' means is the mean).
    Shape whole = c.input;
    whole[0] *= c.replicas;
    ASSERT_TRUE(c.replicas == 1 || c.cross_replica_bn);
    const graph::Graph model = make_model(c.model, c.input);
    train::TrainerConfig config = trainer_config(c, classification);
    if (c.replicas > 1) config.loss = train::LossKind::SoftmaxCrossEntropy;
    cores::CoreMesh mesh(model, mesh_config(c, model, GetParam().partitioned), config);
    train::Trainer trainer(make_model(c.model, whole), config);
    const std::int64_t num_classes = model.node(model.output_node()).output_shape[1];
    const Comparison comparison = compare_runs(
        mesh, [&](const Tensor& images, const Tensor& labels) { return trainer.train_step(images, labels).loss; },
        [&](std::int64_t) -> graph::Executor& { return trainer.executor(); }, whole, num_classes, classification, 3);
    // Two implementations of batch norm meet here: oneDNN's (f32 accumulation) in the Trainer and the
    // mesh's (f32 rows summed in double). They differ by ~1e-6 in the statistics, which the backward
    // pass through several BN layers turns into up to ~2e-5 on the smallest BN gradients: 3e-5 here.
    expect_within(comparison, 3e-5, std::string(c.name) + (GetParam().partitioned ? " partitioned" : " one core"));
}

const TrainerCase kTrainerCases[] = {
    {layout("unet2d", Model::UNet2D, {2, 1, 64, 64}, {2, 2}), false},
    {layout("unet2d_2x2", Model::UNet2D, {2, 1, 64, 64}, {2, 2}), true},
    {layout("unet2d_nobn_w4", Model::UNet2DNoBN, {2, 1, 64, 64}, {1, 4}), true},
    {layout("resnet18", Model::ResNet18, {2, 3, 64, 64}, {2, 2}), false},
    {layout("resnet18_2x2", Model::ResNet18, {2, 3, 64, 64}, {2, 2}), true},
    {replicas(layout("unet2d_2rep_crossbn", Model::UNet2D, {2, 1, 64, 64}, {2, 1}), 2, true), false},
    {replicas(layout("unet2d_2rep_crossbn", Model::UNet2D, {2, 1, 64, 64}, {2, 1}), 2, true), true},
};

INSTANTIATE_TEST_SUITE_P(Models, MeshAgainstTrainer, ::testing::ValuesIn(kTrainerCases),
                         [](const ::testing::TestParamInfo<TrainerCase>& param) {
                             return std::string(param.param.c.name) + (param.param.partitioned ? "_partitioned" : "_one_core");
                         });

}  // namespace
