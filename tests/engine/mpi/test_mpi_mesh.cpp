// The core mesh spread over MPI ranks against the same mesh in one process. Run by ctest under
// `mpirun -np K` for K = 1, 2, 4 and 8 (tests/engine/mpi/CMakeLists.txt): every rank steps the MPI mesh
// (collectively), then rank 0 steps the in-process mesh alone and compares. With the reproducible
// reduction the losses, weights, batch-norm statistics and optimizer slots must be bitwise equal, the
// evaluation's logits too; with the fast one within the equivalence tolerance.
#include "mesh/core_mesh.hpp"
#include "mpi/mpi_transport.hpp"
#include "../mesh/mesh_test_support.hpp"
#include "detection/anchor_labeler.hpp"
#include "networks/models.hpp"
#include "networks/retinanet.hpp"
#include "train/named_tensor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

using namespace tessera;

namespace {

std::shared_ptr<mesh::Transport> g_transport;  // MPI_COMM_WORLD, made in main

struct Layout {
    const char* name;
    enum class Model { UNet2D, UNet3D, ResNet18 } model;
    Shape input;                        // one replica's
    std::vector<std::int64_t> pieces;   // the partition grid over the spatial axes
    std::int64_t replicas = 1;
};

std::ostream& operator<<(std::ostream& out, const Layout& layout) { return out << layout.name; }

std::int64_t classes_of(const Layout& layout) {
    return layout.model == Layout::Model::UNet2D ? 3 : layout.model == Layout::Model::UNet3D ? 2 : 4;
}

graph::Graph make_model(const Layout& layout) {
    switch (layout.model) {
        case Layout::Model::UNet2D: return networks::make_unet({.depth = 3, .base_width = 8, .num_classes = classes_of(layout)}, layout.input);
        case Layout::Model::UNet3D: return networks::make_unet({.depth = 2, .base_width = 4, .num_classes = classes_of(layout)}, layout.input);
        case Layout::Model::ResNet18: break;
    }
    return networks::make_resnet({.depth = 18, .num_classes = classes_of(layout), .base_width = 8}, layout.input);
}

// Adam for the bitwise comparison (its slots are compared too). SGD for the fast reduction's tolerance:
// Adam's update of a near-zero gradient is ±lr whatever its size, so the rounding of another summation
// order flips whole updates of some BN shifts (6 % of their norm after 3 steps) and says nothing.
train::TrainerConfig trainer_config(mesh::ReductionOrder reduction) {
    train::TrainerConfig config;
    if (reduction == mesh::ReductionOrder::Reproducible) {
        config.optimizer = {.kind = train::OptimizerKind::Adam};
    } else {
        config.optimizer = {.kind = train::OptimizerKind::Sgd, .momentum = 0.9};
    }
    config.schedule = {.kind = train::ScheduleKind::Constant, .learning_rate = 0.003};
    config.seed = 7;
    return config;
}

mesh::MeshConfig mesh_config(const Layout& layout, mesh::ReductionOrder reduction) {
    mesh::MeshConfig config;
    config.grid = partition::SpatialGrid::even(layout.input, layout.pieces);
    config.num_replicas = layout.replicas;
    config.host_threads = 1;
    config.reduction = reduction;
    return config;
}

std::int64_t cores_of(const Layout& layout) {
    std::int64_t cores = layout.replicas;
    for (std::int64_t pieces : layout.pieces) cores *= pieces;
    return cores;
}

// What a run leaves: every step's loss, the weights and BN statistics, the training state, an evaluation.
struct Outcome {
    std::vector<double> losses;
    std::vector<train::NamedTensor> weights, state;
    Tensor logits;
    double eval_loss = 0;
};

// How the batch reaches the ranks: every rank holds it whole, or rank 0 holds it and sends the others
// their cores' tiles (CoreMesh::send_tiles), as a run reading its data on rank 0 does.
enum class BatchOn { EveryRank, RankZero };

// The optimizer follows `optimizer_for`, the summation order `reduction`.
Outcome run(const Layout& layout, mesh::ReductionOrder reduction, mesh::ReductionOrder optimizer_for,
            std::shared_ptr<mesh::Transport> transport, BatchOn batch_on = BatchOn::EveryRank) {
    const graph::Graph model = make_model(layout);
    mesh::CoreMesh cores(model, mesh_config(layout, reduction), trainer_config(optimizer_for), std::move(transport));
    Shape batch_shape = layout.input;
    batch_shape[0] *= layout.replicas;
    const bool classification = layout.model == Layout::Model::ResNet18;
    Outcome outcome;
    const bool tiles_received = batch_on == BatchOn::RankZero && cores.transport().rank() != 0;
    const bool tiles_sent = batch_on == BatchOn::RankZero && cores.transport().rank() == 0 && cores.transport().num_ranks() > 1;
    for (int step = 0; step < 3; ++step) {
        auto [images, labels] = test::make_batch(batch_shape, classes_of(layout), classification, 100 + static_cast<std::uint64_t>(step));
        if (tiles_received) {
            outcome.losses.push_back(cores.train_step(cores.receive_tiles()).loss);
            continue;
        }
        if (tiles_sent) {
            const std::int64_t sent_before = cores.transport().counters().bytes_sent;
            cores.send_tiles(images, &labels);
            // The other ranks' share of the batch, once: less than the whole batch (rank 0 keeps its own
            // cores' tiles), where a broadcast sends the whole batch to every rank.
            const std::int64_t sent = cores.transport().counters().bytes_sent - sent_before;
            EXPECT_LT(sent, images.num_bytes() + labels.num_bytes()) << "step " << step;
            EXPECT_GT(sent, 0) << "step " << step;
        }
        outcome.losses.push_back(cores.train_step(images, labels).loss);
    }
    auto [images, labels] = test::make_batch(batch_shape, classes_of(layout), classification, 999);
    if (tiles_received) {
        cores.evaluate(cores.receive_tiles());
    } else {
        if (tiles_sent) cores.send_tiles(images, nullptr);
        const train::EvalResult evaluation = cores.evaluate(images, labels);
        // The logits are gathered on rank 0 alone: no other rank holds the whole batch's.
        EXPECT_EQ(evaluation.logits.is_defined(), cores.transport().rank() == 0);
        outcome.logits = evaluation.logits;
        outcome.eval_loss = evaluation.loss;
    }
    outcome.weights = cores.weights();
    outcome.state = cores.training_state();
    // Every rank sees every core's events and ledger.
    std::vector<bool> seen(static_cast<std::size_t>(cores.num_cores()), false);
    for (const mesh::CoreEvent& event : cores.events()) seen[static_cast<std::size_t>(event.core)] = true;
    for (std::size_t core = 0; core < seen.size(); ++core) EXPECT_TRUE(seen[core]) << "no event of core " << core;
    for (const mesh::MemoryLedger& ledger : cores.memory()) EXPECT_GT(ledger.activations, 0) << "core " << ledger.core;
    return outcome;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0;
}

// ‖a − b‖ / ‖b‖ (‖a − b‖ when b is zero).
double relative_difference(const Tensor& a, const Tensor& b) {
    double difference = 0, norm = 0;
    for (std::int64_t i = 0; i < a.num_elements(); ++i) {
        const double d = static_cast<double>(a.data<float>()[i]) - static_cast<double>(b.data<float>()[i]);
        difference += d * d;
        norm += static_cast<double>(b.data<float>()[i]) * static_cast<double>(b.data<float>()[i]);
    }
    return norm > 0 ? std::sqrt(difference / norm) : std::sqrt(difference);
}

void compare_entries(const std::vector<train::NamedTensor>& got, const std::vector<train::NamedTensor>& expected, bool bitwise) {
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].name, expected[i].name);
        if (bitwise || got[i].value.dtype() != DType::F32) {
            EXPECT_TRUE(bitwise_equal(got[i].value, expected[i].value)) << got[i].name;
        } else {
            // Fast: each rank's sum, then MPI's; f32 rounding of a different order, after 3 Adam steps.
            EXPECT_LE(relative_difference(got[i].value, expected[i].value), 1e-3) << got[i].name;
        }
    }
}

class MpiMesh : public ::testing::TestWithParam<Layout> {};

void check_against_one_process(const Layout& layout, mesh::ReductionOrder reduction, BatchOn batch_on = BatchOn::EveryRank) {
    if (cores_of(layout) < g_transport->num_ranks()) GTEST_SKIP() << cores_of(layout) << " cores cannot fill " << g_transport->num_ranks() << " ranks";
    const Outcome spread = run(layout, reduction, reduction, g_transport, batch_on);
    if (g_transport->rank() != 0) return;
    const Outcome alone = run(layout, mesh::ReductionOrder::Reproducible, reduction, nullptr);
    const bool bitwise = reduction == mesh::ReductionOrder::Reproducible || g_transport->num_ranks() == 1;
    ASSERT_EQ(spread.losses.size(), alone.losses.size());
    for (std::size_t step = 0; step < alone.losses.size(); ++step) {
        if (bitwise) {
            EXPECT_EQ(spread.losses[step], alone.losses[step]) << "step " << step;
        } else {
            EXPECT_NEAR(spread.losses[step], alone.losses[step], 1e-4 * std::fabs(alone.losses[step])) << "step " << step;
        }
    }
    compare_entries(spread.weights, alone.weights, bitwise);
    compare_entries(spread.state, alone.state, bitwise);
    if (bitwise) {
        EXPECT_TRUE(bitwise_equal(spread.logits, alone.logits));
        EXPECT_EQ(spread.eval_loss, alone.eval_loss);
    }
}

TEST_P(MpiMesh, ReproducibleReductionGivesTheBitsOfOneProcess) { check_against_one_process(GetParam(), mesh::ReductionOrder::Reproducible); }

TEST_P(MpiMesh, FastReductionStaysWithinTolerance) { check_against_one_process(GetParam(), mesh::ReductionOrder::Fast); }

TEST_P(MpiMesh, TilesSentFromRankZeroGiveTheBitsOfOneProcess) {
    check_against_one_process(GetParam(), mesh::ReductionOrder::Reproducible, BatchOn::RankZero);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, MpiMesh,
    ::testing::Values(Layout{"unet2d_2x2", Layout::Model::UNet2D, {2, 1, 64, 64}, {2, 2}},
                      Layout{"unet2d_uneven_3x1", Layout::Model::UNet2D, {1, 1, 72, 48}, {3, 1}},
                      Layout{"unet2d_2rep_x_4x1", Layout::Model::UNet2D, {1, 1, 64, 64}, {4, 1}, 2},
                      Layout{"unet3d_2x2x2", Layout::Model::UNet3D, {1, 1, 24, 24, 24}, {2, 2, 2}},
                      Layout{"resnet18_2rep_x_2x2", Layout::Model::ResNet18, {2, 3, 64, 64}, {2, 2}, 2}),
    [](const ::testing::TestParamInfo<Layout>& layout) { return std::string(layout.param.name); });

// Replica reductions (batch-norm statistics in both passes, the loss partials) cross only the ranks
// holding that replica's cores: with one replica per rank, a step's collectives are the few every step
// has (the gradient broadcast, the mean loss, agreeing on failure), fewer than its batch norms — where
// one gather over every rank per reduction phase made three per batch norm.
TEST(MpiMeshReplicas, ReductionsStayAmongTheRanksOfTheirReplica) {
    if (g_transport->num_ranks() != 2) GTEST_SKIP() << "one replica per rank needs 2 ranks";
    const Layout layout{"unet2d_2rep_x_4x1", Layout::Model::UNet2D, {1, 1, 64, 64}, {4, 1}, 2};
    const graph::Graph model = make_model(layout);
    mesh::CoreMesh cores(model, mesh_config(layout, mesh::ReductionOrder::Reproducible), trainer_config(mesh::ReductionOrder::Reproducible),
                         g_transport);
    const std::int64_t batch_norms = std::count_if(model.nodes().begin(), model.nodes().end(),
                                                   [](const graph::Node& node) { return node.kind == graph::OpKind::BatchNorm; });
    ASSERT_GT(batch_norms, 4);
    auto [images, labels] = test::make_batch({2, 1, 64, 64}, classes_of(layout), false, 5);
    cores.train_step(images, labels);
    const std::int64_t before = g_transport->counters().collectives;
    const double loss = cores.train_step(images, labels).loss;
    const std::int64_t collectives = g_transport->counters().collectives - before;
    EXPECT_LT(collectives, batch_norms) << "collectives in one step";
    EXPECT_TRUE(std::isfinite(loss));
}

// Where a replica's ranks form a grid over its partition grid, its halos travel over a Cartesian
// communicator of those ranks (the bitwise tests above run through it too); where one rank holds each
// replica, no halo leaves a rank and there is no grid.
TEST(MpiMeshGrid, HalosTravelOverTheCartesianCommunicatorOfAReplicasRanks) {
    const int ranks = g_transport->num_ranks();
    if (ranks == 1) GTEST_SKIP() << "one rank holds every core";
    // 2 ranks: a 2×2 split, a row per rank (grid 2×1); 4 ranks: a core each (2×2); 8 ranks: 2 replicas of
    // a 4×1 split, a core each (each replica's ranks 4×1).
    const Layout layout = ranks == 8 ? Layout{"unet2d_2rep_x_4x1", Layout::Model::UNet2D, {1, 1, 64, 64}, {4, 1}, 2}
                                     : Layout{"unet2d_2x2", Layout::Model::UNet2D, {2, 1, 64, 64}, {2, 2}};
    const std::string expected_dims = ranks == 2 ? "2×1" : ranks == 4 ? "2×2" : "4×1";
    const graph::Graph model = make_model(layout);
    mesh::CoreMesh cores(model, mesh_config(layout, mesh::ReductionOrder::Reproducible), trainer_config(mesh::ReductionOrder::Reproducible),
                         g_transport);
    const std::string topology = g_transport->halo_topology();
    EXPECT_NE(topology.find(expected_dims + " Cartesian communicator"), std::string::npos) << topology;
    Shape batch_shape = layout.input;
    batch_shape[0] *= layout.replicas;
    auto [images, labels] = test::make_batch(batch_shape, classes_of(layout), false, 5);
    const mesh::TransportCounters before = g_transport->counters();
    EXPECT_TRUE(std::isfinite(cores.train_step(images, labels).loss));
    const std::int64_t grid_messages = g_transport->counters().grid_messages - before.grid_messages;
    const std::int64_t messages = g_transport->counters().messages_sent - before.messages_sent;
    EXPECT_GT(grid_messages, 0);
    EXPECT_LT(grid_messages, messages);  // the gradient segments go to every rank, over the world

    if (ranks != 2) return;
    // 2 replicas on 2 ranks: each rank holds one whole replica.
    const Layout replicas{"unet2d_2rep_x_4x1", Layout::Model::UNet2D, {1, 1, 64, 64}, {4, 1}, 2};
    mesh::CoreMesh per_rank(make_model(replicas), mesh_config(replicas, mesh::ReductionOrder::Reproducible),
                            trainer_config(mesh::ReductionOrder::Reproducible), g_transport);
    EXPECT_NE(g_transport->halo_topology().find("point-to-point"), std::string::npos) << g_transport->halo_topology();
    auto [replica_images, replica_labels] = test::make_batch({2, 1, 64, 64}, classes_of(replicas), false, 6);
    const std::int64_t grid_before = g_transport->counters().grid_messages;
    per_rank.train_step(replica_images, replica_labels);
    EXPECT_EQ(g_transport->counters().grid_messages, grid_before);
}

// A RetinaNet (ResNet-18, P3..P5) on 2 replicas of a 2×2 split, 3 steps: the anchor matching's
// reductions (each box's best anchor, the positives, the loss sums) cross ranks too.
struct DetectionOutcome {
    std::vector<double> losses;
    std::vector<train::NamedTensor> weights;
    std::vector<Tensor> outputs;
    double eval_loss = 0;
};

DetectionOutcome run_detector(std::shared_ptr<mesh::Transport> transport, BatchOn batch_on = BatchOn::EveryRank) {
    const Shape input{1, 3, 128, 128};
    const graph::Graph model = networks::make_retinanet(
        {.resnet_depth = 18, .num_classes = 4, .num_anchors = 1, .fpn_channels = 8, .max_level = 5, .head_convs = 1}, input);
    train::TrainerConfig config = trainer_config(mesh::ReductionOrder::Reproducible);
    config.detection = detection::DetectorConfig{};
    config.detection->labeler.num_classes = 4;
    config.detection->anchors.num_scales = 1;
    config.detection->anchors.aspect_ratios = {1.0};
    config.detection->anchors.max_level = 5;
    mesh::MeshConfig layout;
    layout.grid = partition::SpatialGrid::even(input, {2, 2});
    layout.num_replicas = 2;
    layout.host_threads = 1;
    mesh::CoreMesh cores(model, layout, config, std::move(transport));
    const std::vector<detection::PaddedGroundTruth> truth = {
        detection::pad_ground_truth(std::vector<detection::LabeledBox>{{{10, 12, 60, 70}, 3}, {{64, 20, 120, 90}, 1}}, 4),
        detection::pad_ground_truth(std::vector<detection::LabeledBox>{{{5, 80, 40, 126}, 0}}, 4)};
    DetectionOutcome outcome;
    const bool tiles_received = batch_on == BatchOn::RankZero && cores.transport().rank() != 0;
    const bool tiles_sent = batch_on == BatchOn::RankZero && cores.transport().rank() == 0 && cores.transport().num_ranks() > 1;
    for (int step = 0; step < 3; ++step) {
        auto [images, labels] = test::make_batch({2, 3, 128, 128}, 4, true, 300 + static_cast<std::uint64_t>(step));
        if (tiles_received) {
            outcome.losses.push_back(cores.train_step(cores.receive_tiles(), truth).loss);
            continue;
        }
        if (tiles_sent) cores.send_tiles(images, nullptr);
        outcome.losses.push_back(cores.train_step(images, truth).loss);
    }
    auto [images, labels] = test::make_batch({2, 3, 128, 128}, 4, true, 777);
    if (tiles_received) {
        cores.predict_outputs(cores.receive_tiles());
    } else {
        if (tiles_sent) cores.send_tiles(images, nullptr);
        outcome.outputs = cores.predict_outputs(images);
    }
    outcome.eval_loss = cores.detection_loss(truth);
    outcome.weights = cores.weights();
    return outcome;
}

void check_detector_against_one_process(BatchOn batch_on) {
    const DetectionOutcome spread = run_detector(g_transport, batch_on);
    if (g_transport->rank() != 0) return;
    const DetectionOutcome alone = run_detector(nullptr);
    ASSERT_EQ(spread.losses.size(), alone.losses.size());
    for (std::size_t step = 0; step < alone.losses.size(); ++step) EXPECT_EQ(spread.losses[step], alone.losses[step]) << "step " << step;
    compare_entries(spread.weights, alone.weights, true);
    ASSERT_EQ(spread.outputs.size(), alone.outputs.size());
    for (std::size_t i = 0; i < alone.outputs.size(); ++i) EXPECT_TRUE(bitwise_equal(spread.outputs[i], alone.outputs[i])) << "output " << i;
    EXPECT_EQ(spread.eval_loss, alone.eval_loss);
}

TEST(MpiDetector, ReproducibleReductionGivesTheBitsOfOneProcess) { check_detector_against_one_process(BatchOn::EveryRank); }

TEST(MpiDetector, TilesSentFromRankZeroGiveTheBitsOfOneProcess) { check_detector_against_one_process(BatchOn::RankZero); }

}  // namespace

int main(int argc, char** argv) {
    mpi::Session session(argc, argv);
    ::testing::InitGoogleTest(&argc, argv);
    g_transport = mpi::make_transport();
    if (session.rank() != 0) {
        // One report: rank 0's (every rank asserts what it can; a failure anywhere fails mpirun).
        delete ::testing::UnitTest::GetInstance()->listeners().Release(::testing::UnitTest::GetInstance()->listeners().default_result_printer());
    }
    const int result = RUN_ALL_TESTS();
    g_transport.reset();
    return result;
}
