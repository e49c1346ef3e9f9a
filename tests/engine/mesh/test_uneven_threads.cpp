// Simulated cores whose tiles differ in size, trained on several host threads.
//
// A core's oneDNN primitives are created on whichever pool thread compiles that core and run, phase
// after phase, on whichever thread picks the core up. Nothing a primitive uses may belong to a thread:
// oneDNN's default, library-managed scratchpad does (one buffer per thread, sized by the primitives
// created on that thread, freed when that thread's count of them reaches zero), so the executor gives
// every primitive a user scratchpad owned by its core. Uneven tiles make the cores' kernels — and
// their scratchpads — differ in size, and a mesh destroyed on this thread while another lives
// releases primitives this thread never created. These tests are meant for AddressSanitizer (make
// sanitize), where a kernel reaching past a buffer, or into a freed one, stops the run; everywhere
// they check that the thread layout changes no bit of the result.
//
// oneDNN 2.6 gives its thread-owned scratchpad only to its gemm-based kernels (gemm:jit convolutions,
// Winograd); its AVX-512 kernels — what this project's machines run — own one each. On an AVX2 CPU the
// 3D convolutions' backward-weights (and the ResNet stem's backward-data) run as gemm:jit, with an
// im2col scratchpad that grows with the tile. This program caps oneDNN at AVX2 so those kernels run
// here too, whatever the CPU (the other suites cover the native kernels).
#include "mesh/core_mesh.hpp"
#include "mesh_test_support.hpp"
#include "core/random.hpp"
#include "networks/models.hpp"

#include <gtest/gtest.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <cmath>
#include <cstring>

using namespace tessera;

namespace {

using test::expect_identical_weights;
using test::make_batch;

// Before any primitive exists (oneDNN reads the cap once).
const bool kCappedAtAvx2 = dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2) == dnnl::status::success;

enum class Model { UNet2D, UNet3D, ResNet18 };

struct Case {
    const char* name = "";
    Model model = Model::UNet2D;
    Shape input;                                        // [N, C, (D,) H, W]
    std::vector<std::vector<std::int64_t>> boundaries;  // uneven tile boundaries per spatial axis
    int host_threads = 2;
};

graph::Graph make_model(Model kind, const Shape& input) {
    switch (kind) {
        case Model::UNet2D: return networks::make_unet({.depth = 3, .base_width = 8, .num_classes = 2}, input);
        case Model::UNet3D: return networks::make_unet({.depth = 3, .base_width = 4, .num_classes = 2}, input);
        case Model::ResNet18: return networks::make_resnet({.depth = 18, .num_classes = 4, .base_width = 8}, input);
    }
    return graph::Graph("unknown");
}

const Case kCases[] = {
    // 3 cores along H: 8, 16 and 40 rows.
    {"unet2d_h3", Model::UNet2D, {2, 1, 64, 64}, {{0, 8, 24, 64}, {0, 64}}, 2},
    // 2×2 cores of 16/48 rows by 40/24 columns, on three threads.
    {"unet2d_2x2", Model::UNet2D, {2, 1, 64, 64}, {{0, 16, 64}, {0, 40, 64}}, 3},
    // 4 cores along W: 8, 8, 16 and 64 columns.
    {"unet2d_w4", Model::UNet2D, {1, 1, 48, 96}, {{0, 48}, {0, 8, 16, 32, 96}}, 2},
    // 3D: 2×2 cores of 4/12 slices by 16/8 rows.
    {"unet3d_2x2x1", Model::UNet3D, {1, 1, 16, 24, 16}, {{0, 4, 16}, {0, 16, 24}, {0, 16}}, 2},
    // ResNet-18 (strided stem, max pool, global pooling, dense layer): 32 and 96 rows.
    {"resnet18_h2", Model::ResNet18, {2, 3, 128, 64}, {{0, 32, 128}, {0, 64}}, 2},
};

train::TrainerConfig sgd() {
    train::TrainerConfig config;
    config.optimizer = {.kind = train::OptimizerKind::Sgd, .momentum = 0.9};
    config.schedule = {.kind = train::ScheduleKind::Constant, .learning_rate = 0.01};
    return config;
}

mesh::MeshConfig mesh_config(const Case& c, int host_threads) {
    mesh::MeshConfig mesh;
    mesh.grid.boundaries = c.boundaries;
    mesh.host_threads = host_threads;
    return mesh;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

class UnevenTiles : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(UnevenTiles, TrainOnSeveralThreadsExactlyAsOnOne) {
    ASSERT_TRUE(kCappedAtAvx2) << "oneDNN was used before the test could cap its ISA";
    const Case& c = GetParam();
    const bool classification = c.model == Model::ResNet18;
    const graph::Graph model = make_model(c.model, c.input);
    mesh::CoreMesh threaded(model, mesh_config(c, c.host_threads), sgd());
    mesh::CoreMesh single(model, mesh_config(c, 1), sgd());
    ASSERT_GE(threaded.num_cores(), 2);
    for (int step = 0; step < 3; ++step) {
        auto [images, labels] = make_batch(c.input, classification ? 4 : 2, classification, 100 + static_cast<std::uint64_t>(step));
        const double loss = threaded.train_step(images, labels).loss;
        const double reference = single.train_step(images, labels).loss;
        ASSERT_TRUE(std::isfinite(loss)) << "step " << step;
        EXPECT_TRUE(same_bits(loss, reference)) << "step " << step << ": " << loss << " vs " << reference;
    }
    expect_identical_weights(threaded, single, model);
}

// Meshes created and destroyed on this thread while another keeps training: their primitives, made on
// pool threads, are released here; the living mesh's kernels must not notice.
TEST_P(UnevenTiles, MeshesComingAndGoingLeaveALivingMeshIntact) {
    const Case& c = GetParam();
    const bool classification = c.model == Model::ResNet18;
    const graph::Graph model = make_model(c.model, c.input);
    mesh::CoreMesh living(model, mesh_config(c, c.host_threads), sgd());
    std::vector<double> losses;
    for (int step = 0; step < 3; ++step) {
        {
            mesh::CoreMesh passing(model, mesh_config(c, c.host_threads + 1), sgd());
            auto [images, labels] = make_batch(c.input, classification ? 4 : 2, classification, 300 + static_cast<std::uint64_t>(step));
            passing.train_step(images, labels);
        }
        auto [images, labels] = make_batch(c.input, classification ? 4 : 2, classification, 200 + static_cast<std::uint64_t>(step));
        losses.push_back(living.train_step(images, labels).loss);
        ASSERT_TRUE(std::isfinite(losses.back())) << "step " << step;
    }
    mesh::CoreMesh undisturbed(model, mesh_config(c, 1), sgd());
    for (int step = 0; step < 3; ++step) {
        auto [images, labels] = make_batch(c.input, classification ? 4 : 2, classification, 200 + static_cast<std::uint64_t>(step));
        const double reference = undisturbed.train_step(images, labels).loss;
        EXPECT_TRUE(same_bits(losses[static_cast<std::size_t>(step)], reference)) << "step " << step;
    }
}

INSTANTIATE_TEST_SUITE_P(Layouts, UnevenTiles, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& param) { return std::string(param.param.name); });
