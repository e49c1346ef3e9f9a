// The core mesh's bookkeeping: events and exchanged bytes, the memory ledger against what the process
// really allocated, the out-of-memory refusal, bit-reproducibility, evaluation and bad input.
#include "mesh/core_mesh.hpp"
#include "mesh_test_support.hpp"
#include "support/error_of.hpp"
#include "mesh/thread_pool.hpp"
#include "ops/dnnl_support.hpp"
#include "ops/fixed_sums.hpp"
#include "ops/row_convolution.hpp"
#include "ops/stolen_ranges.hpp"
#include "core/random.hpp"
#include "networks/models.hpp"
#include "networks/retinanet.hpp"
#include "detection/detector.hpp"

#include <gtest/gtest.h>

#include <malloc.h>

#include <cmath>
#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

using namespace tessera;

namespace {

using test::error_of;

std::pair<Tensor, Tensor> random_batch(const Shape& image_shape, std::uint64_t seed) {
    SeededRandom random(seed);
    Tensor images = Tensor::empty(image_shape, DType::F32);
    for (std::int64_t i = 0; i < images.num_elements(); ++i) images.data<float>()[i] = static_cast<float>(random.normal());
    Shape label_shape{image_shape[0]};
    label_shape.insert(label_shape.end(), image_shape.begin() + 2, image_shape.end());
    Tensor labels = Tensor::empty(label_shape, DType::I32);
    for (std::int64_t i = 0; i < labels.num_elements(); ++i) labels.data<std::int32_t>()[i] = images.data<float>()[i] > 0.3f;
    return {images, labels};
}

train::TrainerConfig sgd() {
    train::TrainerConfig config;
    config.optimizer = {.kind = train::OptimizerKind::Sgd, .momentum = 0.9};
    config.schedule = {.kind = train::ScheduleKind::Constant, .learning_rate = 0.01};
    return config;
}

mesh::MeshConfig grid(const Shape& input, std::vector<std::int64_t> pieces) {
    mesh::MeshConfig mesh;
    mesh.grid = partition::SpatialGrid::even(input, pieces);
    return mesh;
}

const Shape kInput{2, 1, 64, 64};
graph::Graph unet() { return networks::make_unet({.depth = 3, .base_width = 8, .num_classes = 2}, kInput); }

}  // namespace

TEST(CoreMesh, HaloBytesMatchTheTilingPlanAndEventsAreConsistent) {
    const graph::Graph model = unet();
    mesh::CoreMesh mesh(model, grid(kInput, {2, 2}), sgd());
    auto [images, labels] = random_batch(kInput, 1);
    mesh.train_step(images, labels);
    const mesh::StepSummary& summary = mesh.summary();
    EXPECT_GT(summary.halo_bytes, 0);
    EXPECT_EQ(summary.halo_bytes, summary.analytic_halo_bytes);

    std::int64_t halo_bytes = 0, link_bytes = 0;
    double forward_flops = 0, backward_flops = 0;
    std::set<int> reduced_layers;
    for (const mesh::CoreEvent& event : mesh.events()) {
        EXPECT_GE(event.core, 0);
        EXPECT_LT(event.core, 4);
        EXPECT_LE(event.start_seconds, event.end_seconds);
        if (event.kind == mesh::EventKind::Halo) {
            halo_bytes += event.bytes;
            EXPECT_NE(event.peer, event.core);
            EXPECT_GE(event.peer, 0);
        }
        if (event.kind == mesh::EventKind::AllReduce && event.layer >= 0) reduced_layers.insert(event.layer);
        if (event.kind == mesh::EventKind::Compute) {
            (event.phase == mesh::StepPhase::Forward ? forward_flops : backward_flops) += event.flops;
        }
    }
    for (const mesh::LinkTraffic& link : summary.links) link_bytes += link.bytes;
    EXPECT_EQ(halo_bytes, summary.halo_bytes);
    EXPECT_EQ(link_bytes, summary.halo_bytes);
    // Tiles partition every output exactly, so the cores' FLOPs add up to the model's.
    double model_forward = 0, model_backward = 0;
    std::size_t batch_norms = 0;
    for (const graph::Node& node : model.nodes()) {
        model_forward += model.cost(node.id).forward_flops;
        model_backward += model.cost(node.id).backward_flops;
        if (node.kind == graph::OpKind::BatchNorm) ++batch_norms;
    }
    EXPECT_NEAR(forward_flops, model_forward, 1e-9 * model_forward);
    EXPECT_NEAR(backward_flops, model_backward, 1e-9 * model_backward);
    EXPECT_EQ(reduced_layers.size(), batch_norms);  // every BN's statistics went through an all-reduce
    EXPECT_GT(summary.all_reduce_bytes, 0);
}

// Two meshes of one model trained on the same batches (seeds first_seed, first_seed + 1, …): the same
// loss bits at every step and the same weights after.
void expect_same_steps(mesh::CoreMesh& a, mesh::CoreMesh& b, const graph::Graph& model, const Shape& input, std::uint64_t first_seed) {
    for (int step = 0; step < 2; ++step) {
        auto [images, labels] = random_batch(input, first_seed + static_cast<std::uint64_t>(step));
        const double loss_a = a.train_step(images, labels).loss;
        const double loss_b = b.train_step(images, labels).loss;
        EXPECT_EQ(std::memcmp(&loss_a, &loss_b, sizeof loss_a), 0) << "step " << step;
    }
    test::expect_identical_weights(a, b, model);
}

TEST(CoreMesh, RunsAreBitReproducibleForAGivenSeedAndLayout) {
    const graph::Graph model = unet();
    mesh::MeshConfig two_threads = grid(kInput, {2, 2});
    mesh::MeshConfig one_thread = two_threads;
    one_thread.host_threads = 1;
    mesh::CoreMesh a(model, two_threads, sgd()), b(model, one_thread, sgd());
    expect_same_steps(a, b, model, kInput, 10);
}

// The up-convolutions write into their concatenations' channel ranges — inside the halo buffers the
// concatenations feed on a simulated core — and read their gradients there: the same bits as with the
// copies (TESSERA_CONCAT_IN_PLACE=0), whose buffers must live until the up-convolution's backward.
TEST(CoreMesh, UpConvolutionsInPlaceGiveTheCopiesBits) {
    const Shape input{2, 1, 64, 64};
    const graph::Graph model = networks::make_unet({.depth = 3, .base_width = 16, .num_classes = 2}, input);
    mesh::CoreMesh in_place(model, grid(input, {2, 2}), sgd());
    ::setenv("TESSERA_CONCAT_IN_PLACE", "0", 1);
    mesh::CoreMesh copied(model, grid(input, {2, 2}), sgd());
    ::unsetenv("TESSERA_CONCAT_IN_PLACE");
    expect_same_steps(in_place, copied, model, input, 20);
    if (ops::row_convolution_available()) {  // the up-convolutions' bytes counted once, inside the halo buffers
        EXPECT_LT(in_place.executor(0).memory_report().activations, copied.executor(0).memory_report().activations);
    }
}

// Batch norm's row loops on the tiles (16, 32 and 64 channels, channels-last and blocked, with the fused
// ReLU) take their AVX-512 forms on an AVX-512 CPU: the same bits as the AVX2 loops (TESSERA_BN_AVX512=0),
// so a run reproduces on a CPU with AVX2 alone.
TEST(CoreMesh, BatchNormsAvx512RowLoopsGiveTheAvx2Bits) {
    if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512F: the AVX2 loops only";
    const Shape input{2, 1, 64, 64};
    const graph::Graph model = networks::make_unet({.depth = 3, .base_width = 16, .num_classes = 2}, input);
    mesh::CoreMesh avx512(model, grid(input, {4, 1}), sgd());
    ::setenv("TESSERA_BN_AVX512", "0", 1);
    mesh::CoreMesh avx2(model, grid(input, {4, 1}), sgd());
    ::unsetenv("TESSERA_BN_AVX512");
    // Every batch norm (two a block: two levels down, the bottleneck, two up) runs the loops asked for.
    const auto batch_norms_running = [](mesh::CoreMesh& mesh, const std::string& implementation) {
        int count = 0;
        for (const graph::Node& node : mesh.core_graphs().graphs[0].nodes()) {
            if (node.kind != graph::OpKind::BatchNorm) continue;
            EXPECT_EQ(mesh.executor(0).implementation(node.id), implementation) << node.name;
            ++count;
        }
        return count;
    };
    EXPECT_EQ(batch_norms_running(avx512, "rows:avx512"), 10);
    EXPECT_EQ(batch_norms_running(avx2, "rows:avx2"), 10);
    expect_same_steps(avx512, avx2, model, input, 30);
}

// oneDNN fixes a kernel's threads when it creates it. Core 0 was once compiled on the caller's thread
// with its 2-thread team: each of its kernels then opened a team of its own inside a single-threaded
// core task, oversubscribing the host and slowing every core's kernels 2–5× (bm_partition: 1.26× the
// unpartitioned step, 1.03× after).
TEST(CoreMesh, EveryCoresKernelsAreCreatedSingleThreadedWhateverTheCallersTeam) {
    const int callers_threads = ops::num_threads();
    ops::set_num_threads(2);
    const graph::Graph model = unet();
    for (int host_threads : {1, 2}) {
        mesh::MeshConfig config = grid(kInput, {2, 2});
        config.host_threads = host_threads;
        mesh::CoreMesh mesh(model, config, sgd());
        for (std::int64_t core = 0; core < mesh.num_cores(); ++core) {
            EXPECT_EQ(mesh.executor(core).kernel_threads(), 1) << "core " << core << ", " << host_threads << " host thread(s)";
        }
        EXPECT_EQ(ops::num_threads(), 2) << "the caller's team comes back after the mesh compiled";
    }
    ops::set_num_threads(callers_threads);
}

TEST(CoreMesh, EveryCoreHoldsTheSameWeightsAfterAStep) {
    const graph::Graph model = unet();
    mesh::CoreMesh mesh(model, grid(kInput, {1, 4}), sgd());
    auto [images, labels] = random_batch(kInput, 3);
    mesh.train_step(images, labels);
    for (std::int64_t core = 1; core < 4; ++core) {
        for (std::size_t p = 0; p < model.parameters().size(); ++p) {
            const Tensor& x = mesh.executor(0).parameters()[p].value;
            const Tensor& y = mesh.executor(core).parameters()[p].value;
            EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), static_cast<std::size_t>(x.num_elements()) * 4), 0);
        }
    }
}

TEST(CoreMesh, LedgerMatchesWhatTheProcessAllocatedWithinTenPercent) {
    // A model whose activations dominate, as in real use; the mesh is built and stepped inside the
    // measured window, so every allocation it made for its cores is counted.
    const Shape input{2, 1, 128, 128};
    const graph::Graph model = networks::make_unet({.depth = 3, .base_width = 16, .num_classes = 2}, input);
    auto [images, labels] = random_batch(input, 4);
    malloc_trim(0);
    const struct mallinfo2 before = mallinfo2();
    std::int64_t ledger_total = 0;
    double allocated = 0;
    {
        mesh::CoreMesh mesh(model, grid(input, {2, 2}), sgd());
        mesh.train_step(images, labels);
        const struct mallinfo2 after = mallinfo2();
        allocated = static_cast<double>(after.uordblks + after.hblkhd) - static_cast<double>(before.uordblks + before.hblkhd);
        for (const mesh::MemoryLedger& ledger : mesh.memory()) {
            ledger_total += ledger.peak();
            EXPECT_GT(ledger.activations, 0);
            EXPECT_GT(ledger.halo_buffers, 0);
            EXPECT_GT(ledger.optimizer_slots, 0);
            EXPECT_FALSE(ledger.largest.empty());
        }
    }
    // ASan's and TSan's allocators (make sanitize / make tsan) replace glibc's: mallinfo2 sees nothing.
    if (allocated <= 0) GTEST_SKIP() << "mallinfo2 does not see this process's allocator (a sanitizer build)";
    const double ratio = static_cast<double>(ledger_total) / allocated;
    std::printf("ledger %.1f MiB, process allocated %.1f MiB, ratio %.3f\n", static_cast<double>(ledger_total) / 1048576.0,
                allocated / 1048576.0, ratio);
    EXPECT_GT(ratio, 0.9);
    EXPECT_LT(ratio, 1.1);
}

TEST(CoreMesh, ARunThatCannotFitFailsBeforeAnyWorkAndSaysWhatWouldFit) {
    const graph::Graph model = unet();
    mesh::MeshConfig mesh_config = grid(kInput, {2, 1});
    std::int64_t needed = 0;  // what the fullest core holds, measured (it depends on the layouts oneDNN picks)
    for (const mesh::MemoryLedger& ledger : mesh::CoreMesh(model, mesh_config, sgd()).memory()) needed = std::max(needed, ledger.peak());
    ASSERT_GT(needed, 3LL << 20);
    mesh_config.core_memory_bytes = 3LL << 20;  // 3 MiB per core
    mesh::CoreMesh mesh(model, mesh_config, sgd());
    const Tensor before = mesh.executor(0).parameters()[0].value.clone();
    auto [images, labels] = random_batch(kInput, 5);
    const std::string message = error_of([&] { mesh.train_step(images, labels); });
    EXPECT_NE(message.find("out of memory on core"), std::string::npos) << message;
    EXPECT_NE(message.find("but a core holds 3.00 MiB"), std::string::npos) << message;
    EXPECT_NE(message.find("largest: '"), std::string::npos) << message;
    EXPECT_NE(message.find("cores per replica (now 2)"), std::string::npos) << message;
    EXPECT_NE(message.find("or a per-replica batch of 1 (now 2)"), std::string::npos) << message;
    EXPECT_NE(message.find("Nothing ran"), std::string::npos) << message;
    EXPECT_EQ(mesh.step(), 0);
    EXPECT_EQ(std::memcmp(before.raw_data(), mesh.executor(0).parameters()[0].value.raw_data(),
                          static_cast<std::size_t>(before.num_elements()) * 4),
              0);
    EXPECT_THROW(mesh.check_memory(), Error);
}

// The host's memory: the mesh measures each core as it compiles it and refuses once the cores cannot
// fit together, before building the rest (a run the kernel would kill part-way otherwise).
TEST(CoreMesh, RefusesWhenItsCoresCannotFitThisMachinesMemoryBeforeBuildingTheRest) {
    const graph::Graph model = unet();
    // What the host holds: every core's compiled graph with the loss gradients it hands to backward (its
    // outputs, f32), the weights and the optimizer's slots once (the cores share mesh core 0's weights and
    // only it steps; each core's ledger counts its own, as a device core holds them). A budget of exactly
    // that builds, in whatever order the cores compile; one byte less is refused once all are measured.
    std::int64_t cores_total = 0, held_once = 0;
    {
        mesh::CoreMesh unlimited(model, grid(kInput, {2, 2}), sgd());
        std::int64_t weight_bytes = 0;
        for (const graph::ParameterSpec& spec : model.parameters()) weight_bytes += num_elements_of(spec.shape) * 4;
        for (std::int64_t core = 0; core < unlimited.num_cores(); ++core) {
            std::int64_t bytes = unlimited.executor(core).memory_report().total() - weight_bytes;
            const graph::Graph& core_graph = unlimited.core_graphs().graphs[static_cast<std::size_t>(core)];
            for (int output : core_graph.output_nodes()) bytes += num_elements_of(core_graph.node(output).output_shape) * 4;
            cores_total += bytes;
            for (std::size_t p = 0; p < model.parameters().size(); ++p) {  // shared, not copied
                EXPECT_EQ(unlimited.executor(core).parameters()[p].value.raw_data(),
                          unlimited.executor(0).parameters()[p].value.raw_data());
            }
        }
        held_once = weight_bytes + unlimited.memory().front().optimizer_slots;
        cores_total += held_once;
        ASSERT_GT(unlimited.memory().front().optimizer_slots, 0);
        ASSERT_GT(unlimited.memory().back().weights, weight_bytes - 1);  // a core's ledger keeps counting its own copy
    }
    mesh::MeshConfig exact = grid(kInput, {2, 2});
    exact.host_memory_bytes = cores_total;
    EXPECT_EQ(mesh::CoreMesh(model, exact, sgd()).host_bytes(), cores_total);

    mesh::MeshConfig one_byte_short = exact;
    one_byte_short.host_memory_bytes = cores_total - 1;
    const std::string message = error_of([&] { mesh::CoreMesh mesh(model, one_byte_short, sgd()); });
    EXPECT_NE(message.find("the 4 simulated core(s) need "), std::string::npos) << message;
    EXPECT_NE(message.find("measured on every one"), std::string::npos) << message;  // one byte short: known at the end
    EXPECT_NE(message.find("a run may use here"), std::string::npos) << message;
    EXPECT_NE(message.find("kernel workspace"), std::string::npos) << message;
    EXPECT_NE(message.find("TESSERA_HOST_MEMORY"), std::string::npos) << message;

    // Far too little: one thread compiles the first core, sees four cannot fit, and stops there.
    mesh::MeshConfig tiny = exact;
    tiny.host_threads = 1;
    tiny.host_memory_bytes = cores_total / 8;
    const std::string early = error_of([&] { mesh::CoreMesh mesh(model, tiny, sgd()); });
    EXPECT_NE(early.find("measured on the 1 compiled first"), std::string::npos) << early;
}

TEST(CoreMesh, EvaluationGathersTheTilesIntoTheWholeLogits) {
    const graph::Graph model = unet();
    mesh::CoreMesh mesh(model, grid(kInput, {2, 2}), sgd());
    train::Trainer trainer(model, sgd());
    auto [images, labels] = random_batch(kInput, 6);
    const train::EvalResult a = mesh.evaluate(images, labels);
    const train::EvalResult b = trainer.evaluate(images, labels);
    ASSERT_EQ(a.logits.shape(), b.logits.shape());
    double difference = 0, norm = 0;
    for (std::int64_t i = 0; i < a.logits.num_elements(); ++i) {
        const double d = static_cast<double>(a.logits.data<float>()[i]) - b.logits.data<float>()[i];
        difference += d * d;
        norm += static_cast<double>(b.logits.data<float>()[i]) * b.logits.data<float>()[i];
    }
    EXPECT_LT(std::sqrt(difference / norm), 1e-5);
    EXPECT_NEAR(a.loss, b.loss, 1e-5 * b.loss);
    EXPECT_NEAR(a.scores.accuracy, b.scores.accuracy, 1e-6);
}

TEST(CoreMesh, BadInputsAreRejectedWithWhatWasExpected) {
    const graph::Graph model = unet();
    mesh::MeshConfig two_replicas = grid(kInput, {2, 1});
    two_replicas.num_replicas = 2;
    mesh::CoreMesh mesh(model, two_replicas, sgd());
    auto [images, labels] = random_batch(kInput, 7);  // one replica's batch, not two
    const std::string message = error_of([&] { mesh.train_step(images, labels); });
    EXPECT_NE(message.find("expects f32 images [4, 1, 64, 64]"), std::string::npos) << message;
    EXPECT_NE(message.find("batch of 2 per replica"), std::string::npos) << message;

    mesh::MeshConfig no_replicas = grid(kInput, {2, 1});
    no_replicas.num_replicas = 0;
    EXPECT_NE(error_of([&] { mesh::CoreMesh bad(model, no_replicas, sgd()); }).find("at least one replica"), std::string::npos);

    // A layout whose halo is wider than the neighbour's tile is refused before any core exists.
    const std::string halo = error_of([&] { mesh::CoreMesh bad(model, grid(kInput, {1, 32}), sgd()); });
    EXPECT_NE(halo.find("layer '"), std::string::npos) << halo;
}

// A detector on two replicas of a 2×2 split: inference gathers every head output from the tiles (against
// one unpartitioned executor with the same seed's weights), and a batch with the wrong number of ground
// truths, or images of another shape, is refused with what was expected.
TEST(CoreMesh, DetectorOutputsAreGatheredAndBadBatchesRefused) {
    const Shape input{1, 3, 128, 128};
    const graph::Graph model =
        networks::make_retinanet({.resnet_depth = 18, .num_classes = 4, .num_anchors = 1, .fpn_channels = 8, .max_level = 5,
                                  .head_convs = 1},
                                 input);  // P3..P5: at 128², P6 and P7 would be too small to split 2×2
    train::TrainerConfig config = sgd();
    config.seed = 4;
    config.detection = detection::DetectorConfig{};
    config.detection->labeler.num_classes = 4;
    config.detection->anchors.num_scales = 1;
    config.detection->anchors.aspect_ratios = {1.0};
    config.detection->anchors.max_level = 5;
    mesh::MeshConfig layout = grid(input, {2, 2});
    layout.num_replicas = 2;
    mesh::CoreMesh mesh(model, layout, config);
    auto [images, labels] = random_batch({2, 3, 128, 128}, 9);
    const std::vector<Tensor> outputs = mesh.predict_outputs(images);
    ASSERT_EQ(outputs.size(), model.output_nodes().size());

    // The loss of those outputs on the cores' tiles (each core its anchors' targets) against the single-core
    // detector's on one image's whole outputs, averaged over the replicas as a training step averages.
    const std::vector<detection::PaddedGroundTruth> truth = {
        detection::pad_ground_truth(std::vector<detection::LabeledBox>{{{10, 12, 60, 70}, 3}, {{64, 20, 120, 90}, 1}}, 4),
        detection::pad_ground_truth(std::vector<detection::LabeledBox>{{{5, 80, 40, 126}, 0}}, 4)};
    const double mesh_loss = mesh.detection_loss(truth);
    const detection::Detector detector(*config.detection, 128, 128);
    double reference_loss = 0;

    graph::Executor reference(model);
    reference.initialize_parameters(config.seed);
    for (std::int64_t replica = 0; replica < 2; ++replica) {
        reference.forward(images.view_box({replica, 0, 0, 0}, {1, 3, 128, 128}).contiguous(), graph::Mode::Eval);
        const std::vector<Tensor> expected = reference.outputs();
        reference_loss += detector.loss_and_gradients(expected, std::span(&truth[static_cast<std::size_t>(replica)], 1)).loss.value / 2;
        for (std::size_t o = 0; o < outputs.size(); ++o) {
            const std::vector<std::int64_t> begin{replica, 0, 0, 0};
            std::vector<std::int64_t> row(outputs[o].shape().begin(), outputs[o].shape().end());
            row[0] = 1;
            const Tensor got = outputs[o].view_box(begin, row).contiguous();
            double difference = 0, norm = 0;
            for (std::int64_t i = 0; i < got.num_elements(); ++i) {
                const double d = static_cast<double>(got.data<float>()[i]) - expected[o].data<float>()[i];
                difference += d * d;
                norm += static_cast<double>(expected[o].data<float>()[i]) * expected[o].data<float>()[i];
            }
            EXPECT_LT(std::sqrt(difference / norm), 1e-5) << "output " << o << ", replica " << replica;
        }
    }

    EXPECT_NEAR(mesh_loss, reference_loss, 1e-5 * reference_loss);
    EXPECT_GT(reference_loss, 0.0);

    const std::vector<detection::PaddedGroundTruth> one_truth(1, detection::pad_ground_truth({}, 4));
    const std::string eval_count = error_of([&] { mesh.detection_loss(one_truth); });
    EXPECT_NE(eval_count.find("expected one ground truth per image (2), got 1"), std::string::npos) << eval_count;
    const std::string count = error_of([&] { mesh.train_step(images, one_truth); });
    EXPECT_NE(count.find("expected one ground truth per image (2), got 1"), std::string::npos) << count;
    const std::string shape = error_of([&] { mesh.predict_outputs(images.view_box({0, 0, 0, 0}, {1, 3, 128, 128}).contiguous()); });
    EXPECT_NE(shape.find("predicts on f32 images [2, 3, 128, 128]"), std::string::npos) << shape;
}

TEST(CoreMesh, AlignedGridsPlaceBoundariesOnTheModelsStrides) {
    const graph::Graph model = networks::make_unet({.depth = 4, .base_width = 4, .num_classes = 2}, {1, 1, 56, 64});
    const auto alignment = partition::boundary_alignment(model);
    EXPECT_EQ(alignment, (std::vector<std::int64_t>{8, 8}));
    const auto aligned = partition::SpatialGrid::aligned({1, 1, 56, 64}, {4, 1}, alignment);
    EXPECT_EQ(aligned.boundaries[0], (std::vector<std::int64_t>{0, 8, 24, 40, 56}));
    EXPECT_NO_THROW(partition::plan_tiling(model, aligned));
    const std::string message = error_of([&] { partition::SpatialGrid::aligned({1, 1, 56, 64}, {9, 1}, alignment); });
    EXPECT_NE(message.find("has 7 blocks of 8 rows, too few for 9 tiles; use at most 7 cores along it"), std::string::npos)
        << message;
}

TEST(CoreMesh, GridsComeFromTheSeedsInputPartitionDims) {
    const auto grid_h = partition::SpatialGrid::from_partition_dims({8, 3, 512, 512}, {1, 4, 1, 1});  // NHWC
    EXPECT_EQ(grid_h.pieces_per_axis(), (std::vector<std::int64_t>{4, 1}));
    const auto grid_3d = partition::SpatialGrid::from_partition_dims({1, 1, 64, 64, 64}, {1, 2, 2, 4, 1});  // NDHWC
    EXPECT_EQ(grid_3d.pieces_per_axis(), (std::vector<std::int64_t>{2, 2, 4}));
    const std::string channels = error_of([] { partition::SpatialGrid::from_partition_dims({8, 3, 512, 512}, {1, 2, 1, 2}); });
    EXPECT_NE(channels.find("splits the batch or channel axis"), std::string::npos) << channels;
    const std::string rank = error_of([] { partition::SpatialGrid::from_partition_dims({8, 3, 512, 512}, {1, 4, 1}); });
    EXPECT_NE(rank.find("needs one entry per axis"), std::string::npos) << rank;
}

TEST(ThreadPool, EveryTaskRunsExactlyOnceAcrossManyShortPhases) {
    // Short phases back to back are where a thread leaving one phase meets the next; with 3 threads each
    // takes its own tasks (i mod 3) and then the others' that are left, fewer tasks than threads included.
    for (int threads : {2, 3}) {
        mesh::ThreadPool pool(threads);
        std::vector<std::atomic<int>> runs(16);
        for (int phase = 0; phase < 20000; ++phase) {
            const std::int64_t count = 1 + phase % 9;
            pool.run(count, [&](std::int64_t task) { runs[static_cast<std::size_t>(task)].fetch_add(1); });
            for (std::int64_t task = 0; task < 16; ++task) {
                ASSERT_EQ(runs[static_cast<std::size_t>(task)].exchange(0), task < count ? 1 : 0)
                    << threads << " threads, phase " << phase << " task " << task;
            }
        }
    }
}

TEST(ThreadPool, AnExceptionReachesTheCallerAfterThePhase) {
    mesh::ThreadPool pool(2);
    std::atomic<int> finished{0};
    EXPECT_THROW(pool.run(6,
                          [&](std::int64_t task) {
                              if (task == 3) TESSERA_FAIL("task 3 failed");
                              finished.fetch_add(1);
                          }),
                 Error);
    EXPECT_EQ(finished.load(), 5);
    pool.run(2, [&](std::int64_t) { finished.fetch_add(1); });  // the pool still works
    EXPECT_EQ(finished.load(), 7);
}

// Task 1 splits a loop (ops/stolen_ranges.hpp, as a row convolution does); task 0 has nothing to do and
// its thread, once done, must take iterations of task 1's loop from the back. Task 1's thread holds its
// first iteration until another thread has run one (at most `patience`): without helping it gives up.
// Returns the distinct threads that ran iterations; every iteration must run once, all before the loop
// returns.
std::size_t threads_in_a_helped_loop(mesh::ThreadPool& pool, std::chrono::milliseconds patience) {
    constexpr std::int64_t kIterations = 64;
    std::vector<std::atomic<int>> runs(kIterations);
    std::vector<std::thread::id> ran_on(kIterations);
    std::atomic<bool> helped{false}, loop_started{false};
    std::thread::id owner;
    pool.run(2, [&](std::int64_t task) {
        if (task == 0) {
            while (!loop_started.load()) std::this_thread::yield();  // then it waits for the phase's end
            return;
        }
        owner = std::this_thread::get_id();
        loop_started = true;
        ops::for_stolen_ranges(kIterations, 1, [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t i = begin; i < end; ++i) {
                const std::thread::id me = std::this_thread::get_id();
                if (me == owner && i == 0) {
                    const auto deadline = std::chrono::steady_clock::now() + patience;
                    while (!helped.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
                }
                if (me != owner) helped = true;
                ran_on[static_cast<std::size_t>(i)] = me;
                std::this_thread::sleep_for(std::chrono::microseconds(100));
                runs[static_cast<std::size_t>(i)].fetch_add(1);
            }
        });
        for (std::int64_t i = 0; i < kIterations; ++i) EXPECT_EQ(runs[static_cast<std::size_t>(i)].load(), 1) << "iteration " << i;
    });
    EXPECT_EQ(ran_on[0], owner);  // the owner takes the front
    return std::set<std::thread::id>(ran_on.begin(), ran_on.end()).size();
}

TEST(ThreadPool, AThreadWithoutTasksHelpsAnotherTasksLoop) {
    mesh::ThreadPool pool(2);
    // A loaded machine may keep the idle thread off its vCPU past the patience: a few tries.
    std::size_t threads = 0;
    for (int attempt = 0; attempt < 5 && threads < 2; ++attempt) threads = threads_in_a_helped_loop(pool, std::chrono::milliseconds(500));
    EXPECT_EQ(threads, 2u) << "the loop ran on its task's thread alone";
    // Outside the pool's tasks the loop is OpenMP's again: every iteration once.
    std::vector<std::atomic<int>> runs(100);
    ops::for_stolen_ranges(100, 3, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) runs[static_cast<std::size_t>(i)].fetch_add(1);
    });
    for (const std::atomic<int>& r : runs) EXPECT_EQ(r.load(), 1);
}

TEST(ThreadPool, AHelpersExceptionReachesTheCallerAndTheLoopStillEnds) {
    mesh::ThreadPool pool(2);
    std::atomic<int> finished{0};
    const std::string message = error_of([&] {
        pool.run(1, [&](std::int64_t) {
            ops::for_stolen_ranges(40, 1, [&](std::int64_t begin, std::int64_t end) {
                for (std::int64_t i = begin; i < end; ++i) {
                    std::this_thread::sleep_for(std::chrono::microseconds(200));
                    if (i == 39) TESSERA_FAIL("iteration 39 failed");  // the back: the helper's first claim, if it came
                    finished.fetch_add(1);
                }
            });
        });
    });
    EXPECT_NE(message.find("iteration 39 failed"), std::string::npos) << message;
    EXPECT_EQ(finished.load(), 39);  // the other claims still ran
    pool.run(3, [&](std::int64_t) { finished.fetch_add(1); });
    EXPECT_EQ(finished.load(), 42);
}

TEST(ThreadPool, FixedGroupSumsOnThePoolKeepTheirBits) {
    // Sums whose float rounding depends on the order: the groups' results must not depend on which
    // thread ran a group (in a pool's task, with a helper, against OpenMP outside any pool).
    constexpr std::int64_t kItems = 1000, kSize = 4;
    const auto add_item = [](float* partial, std::int64_t item, bool first) {
        for (std::int64_t k = 0; k < kSize; ++k) {
            const float term = 1.0f / static_cast<float>(item + 1 + k) + (item % 7 == 0 ? 1e4f : 0.0f);
            partial[k] = first ? term : partial[k] + term;
        }
    };
    const auto reduce = [](const float* partial, float* result) {
        for (std::int64_t k = 0; k < kSize; ++k) result[k] = partial[k];
    };
    const std::vector<float> expected = ops::fixed_group_results(kItems, kSize, kSize, add_item, reduce);
    mesh::ThreadPool pool(2);
    for (int repeat = 0; repeat < 50; ++repeat) {
        std::vector<float> on_pool;
        pool.run(1, [&](std::int64_t) { on_pool = ops::fixed_group_results(kItems, kSize, kSize, add_item, reduce); });
        ASSERT_EQ(on_pool.size(), expected.size());
        ASSERT_EQ(std::memcmp(on_pool.data(), expected.data(), expected.size() * sizeof(float)), 0) << "repeat " << repeat;
    }
}

TEST(CoreMesh, ADivergedGradientIsTracedToTheCoreItCameFrom) {
    // Core 2's pixels (a W split in four) 1e6 times the others', and a static loss scale of 1e34 that the
    // other cores' gradients survive but core 2's first-layer weight gradient does not (1e32: none
    // overflows): the sum is infinite. The step stops naming the parameter and core 2 — traced on the
    // host threads before the sum overwrites the cores' own gradients — and changes no weight.
    const graph::Graph model = networks::make_unet({.depth = 3, .base_width = 8, .num_classes = 2, .batch_norm = false}, kInput);
    train::TrainerConfig config = sgd();
    config.loss_scale = {.kind = train::LossScaleKind::Static, .static_scale = 1e34};
    mesh::CoreMesh mesh(model, grid(kInput, {1, 4}), config);
    auto [images, labels] = random_batch(kInput, 3);
    for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t y = 0; y < 64; ++y)
            for (std::int64_t x = 32; x < 48; ++x) images.data<float>()[(n * 64 + y) * 64 + x] *= 1e6f;
    const Tensor before = mesh.executor(0).parameters()[0].value.clone();
    const std::string message = error_of([&] { mesh.train_step(images, labels); });
    EXPECT_NE(message.find("the gradient of 'down0.conv1.weight' holds NaN or infinite values on core 2"), std::string::npos) << message;
    const Tensor& after = mesh.executor(0).parameters()[0].value;
    EXPECT_EQ(std::memcmp(before.raw_data(), after.raw_data(), static_cast<std::size_t>(before.num_elements()) * 4), 0);
}

// The pool's idle thread time per step: with one task per phase (one core) or one thread there is
// nothing for a second thread to do or no second thread, so the phases are the tasks' time but for the
// pool's bookkeeping; with 4 cores on 2 threads it lies between none and all of the threads' time.
TEST(CoreMesh, IdleThreadTimeIsThePhasesThreadTimeNoTaskUsed) {
    const graph::Graph model = unet();
    auto [images, labels] = random_batch(kInput, 4);
    const auto step = [&](std::vector<std::int64_t> pieces, int threads) {
        mesh::MeshConfig config = grid(kInput, std::move(pieces));
        config.host_threads = threads;
        mesh::CoreMesh cores(model, config, sgd());
        cores.train_step(images, labels);  // warm-up: first touch, oneDNN's lazily built kernels
        const train::StepResult result = cores.train_step(images, labels);
        const mesh::StepSummary& summary = cores.summary();
        EXPECT_GT(summary.rank_phase_seconds, 0.0);
        EXPECT_LE(summary.rank_phase_seconds, result.forward_seconds + result.backward_seconds + result.update_seconds + 1e-6);
        EXPECT_GE(summary.rank_idle_thread_seconds, 0.0);
        return summary;
    };
    for (const auto& [pieces, threads] : {std::pair{std::vector<std::int64_t>{1, 1}, 2}, std::pair{std::vector<std::int64_t>{2, 2}, 1}}) {
        const mesh::StepSummary summary = step(pieces, threads);
        // Bookkeeping between a task's end and its phase's: microseconds a phase, the phases ~100 µs and more.
        EXPECT_LT(summary.rank_idle_thread_seconds, 0.25 * summary.rank_phase_seconds)
            << pieces[0] << "×" << pieces[1] << " cores on " << threads << " threads";
    }
    const mesh::StepSummary shared = step({2, 2}, 2);
    EXPECT_LE(shared.rank_idle_thread_seconds, 2 * shared.rank_phase_seconds);
}
