// The core mesh over MPI ranks on this host: per step, for one rank of `mpirun -np K`, the step time,
// bytes and messages it sent, its waits on halos and on the gradient all-reduce, and its peak memory;
// or the same mesh in one process (--backend single), to compare. bench/mpi/run.sh runs the 3D U-Net
// preset's mesh on 1, 2, 4 and 8 ranks interleaved with the in-process mesh, and the 2-core mesh on 2
// ranks of one core each.
//
// Usage: [mpirun -np K] bm_mpi [--backend mpi|single] [--pieces 2,2,2] [--steps 8] [--warmup 2]
//        [--threads 1] [--reduction reproducible|fast] [--preset host.json] [--replicas 1] [--overlap 1|0]
//        [--size 64 --depth 3 --width 8 --classes 6 --precision f32|bf16]   (the model: a 3D U-Net on size³)
// Each rank's cores are held to TESSERA_HOST_MEMORY (the mesh measures them as it compiles them and
// refuses a rank whose cores do not fit, naming the rank).
// With --preset (a host preset calibrated for --threads, and for the network: tessera-cli calibrate
// --network), rank 0 then profiles the layers and prints the cost model's prediction of the same step:
//   predicted_ms=<> error=<percent>%
// Prints one line (rank 0):
//   backend=<b> ranks=<K> cores=<T> threads=<t> step_ms=<median> step_ms_min=<> step_ms_max=<>
//   halo_wait_ms=<rank 0's median> gradient_ms=<> sent_kib_per_rank=<per step, each rank>
//   messages_per_rank=<per step, each rank> collectives_per_step=<> collective_kib_per_rank=<per step, each
//   rank's contribution to collectives> peak_rss_mib=<each rank>
// --replicas R: R replicas of the grid (R·cores in all); replica reductions (batch-norm statistics, the
// loss) cross only the ranks holding that replica's cores.
#include "mesh/core_mesh.hpp"
#include "mpi/mpi_transport.hpp"
#include "core/memory_budget.hpp"
#include "core/random.hpp"
#include "cost/cost_model.hpp"
#include "cost/device.hpp"
#include "cost/step_simulation.hpp"
#include "mesh/layer_profile.hpp"
#include "networks/models.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace tessera;

namespace {

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::vector<std::int64_t> parse_list(const std::string& text) {
    std::vector<std::int64_t> values;
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) values.push_back(std::stoll(item));
    return values;
}

// Every rank's value, on every rank.
std::vector<double> gather(mesh::Transport& transport, double value) {
    std::vector<double> values;
    for (const std::vector<std::byte>& bytes : transport.all_gather(std::as_bytes(std::span(&value, 1)))) {
        double v = 0;
        std::memcpy(&v, bytes.data(), sizeof v);
        values.push_back(v);
    }
    return values;
}

std::string joined(const std::vector<double>& values, const char* format) {
    std::string text;
    for (std::size_t i = 0; i < values.size(); ++i) {
        char item[64];
        std::snprintf(item, sizeof item, format, values[i]);
        if (i) text += ',';
        text += item;
    }
    return text;
}

}  // namespace

int main(int argc, char** argv) {
    std::string backend = "mpi", reduction = "reproducible", pieces_text = "2,2,2", preset, precision = "f32";
    int steps = 8, warmup = 2, threads = 1, depth = 3, replicas = 1, overlap = 1;
    std::int64_t size = 64, width = 8, classes = 6;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--backend")) backend = argv[i + 1];
        else if (!std::strcmp(argv[i], "--pieces")) pieces_text = argv[i + 1];
        else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--reduction")) reduction = argv[i + 1];
        else if (!std::strcmp(argv[i], "--preset")) preset = argv[i + 1];
        else if (!std::strcmp(argv[i], "--size")) size = std::atoll(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--depth")) depth = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--width")) width = std::atoll(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--classes")) classes = std::atoll(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--precision")) precision = argv[i + 1];
        else if (!std::strcmp(argv[i], "--replicas")) replicas = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--overlap")) overlap = std::atoi(argv[i + 1]);  // 0: halo messages wait, as before
    }
    std::optional<mpi::Session> session;
    std::shared_ptr<mesh::Transport> transport = std::make_shared<mesh::SingleProcess>();
    if (backend == "mpi") {
        session.emplace(argc, argv);
        transport = mpi::make_transport();
    }
    // By default the unet3d_ct_8way preset's model and input.
    const Shape input{1, 1, size, size, size};
    const graph::Graph model = networks::make_unet({.depth = depth, .base_width = width, .num_classes = classes}, input);
    mesh::MeshConfig config;
    config.host_memory_bytes = static_cast<std::int64_t>(host_memory_budget_bytes());
    config.grid = partition::SpatialGrid::even(input, parse_list(pieces_text));
    config.num_replicas = replicas;
    config.host_threads = threads;
    config.reduction = train::parse_reduction_order(reduction);
    config.overlap_halo_messages = overlap != 0;
    train::TrainerConfig trainer;
    trainer.optimizer = {.kind = train::OptimizerKind::Adam};
    trainer.schedule = {.kind = train::ScheduleKind::Constant, .learning_rate = 0.001};
    trainer.precision = precision == "bf16" ? graph::Precision::BF16 : graph::Precision::F32;
    std::optional<mesh::CoreMesh> built;
    try {
        built.emplace(model, config, trainer, transport);
    } catch (const Error& error) {
        if (transport->rank() == 0) std::printf("refused: %s\n", error.what());
        return 2;
    }
    mesh::CoreMesh& cores = *built;

    SeededRandom random(5);
    Shape batch_shape = input;
    batch_shape[0] = replicas;
    Tensor images = Tensor::empty(batch_shape, DType::F32);
    for (std::int64_t i = 0; i < images.num_elements(); ++i) images.data<float>()[i] = static_cast<float>(random.normal());
    Tensor labels = Tensor::empty({replicas, size, size, size}, DType::I32);
    for (std::int64_t i = 0; i < labels.num_elements(); ++i) labels.data<std::int32_t>()[i] = static_cast<std::int32_t>(i * 7 % classes);

    std::vector<double> step_ms, halo_ms, gradient_ms;
    double sent_bytes = 0, messages = 0, collectives = 0, collective_bytes = 0;
    for (int step = 0; step < warmup + steps; ++step) {
        transport->barrier();  // every rank starts the step together
        const mesh::TransportCounters before = transport->counters();
        const auto start = std::chrono::steady_clock::now();
        cores.train_step(images, labels);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        if (step < warmup) continue;
        step_ms.push_back(ms);
        halo_ms.push_back(cores.summary().rank_halo_wait_seconds * 1e3);
        gradient_ms.push_back(cores.summary().rank_gradient_reduce_seconds * 1e3);
        const mesh::TransportCounters& after = transport->counters();
        sent_bytes += static_cast<double>(after.bytes_sent - before.bytes_sent);
        messages += static_cast<double>(after.messages_sent - before.messages_sent);
        collectives += static_cast<double>(after.collectives - before.collectives);
        collective_bytes += static_cast<double>(after.collective_bytes - before.collective_bytes);
    }
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const std::vector<double> sent = gather(*transport, sent_bytes / steps / 1024.0);
    const std::vector<double> sent_messages = gather(*transport, messages / steps);
    const std::vector<double> collective_kib = gather(*transport, collective_bytes / steps / 1024.0);
    const std::vector<double> rss = gather(*transport, static_cast<double>(usage.ru_maxrss) / 1024.0);
    const std::vector<double> host_bytes = gather(*transport, static_cast<double>(cores.host_bytes()) / (1 << 20));  // MiB, measured
    // Rank 0's step is the job's (every rank ends the step at the gradient broadcast).
    if (transport->rank() == 0) {
        std::printf("host_mib_per_rank=%s budget_gib=%.2f\n", joined(host_bytes, "%.0f").c_str(),
                    static_cast<double>(config.host_memory_bytes) / (1 << 30));
        std::printf("backend=%s ranks=%d cores=%lld threads=%d reduction=%s overlap=%d step_ms=%.1f step_ms_min=%.1f step_ms_max=%.1f "
                    "halo_wait_ms=%.2f gradient_ms=%.2f sent_kib_per_rank=%s messages_per_rank=%s collectives_per_step=%.0f "
                    "collective_kib_per_rank=%s peak_rss_mib=%s\n",
                    backend.c_str(), transport->num_ranks(), static_cast<long long>(cores.num_cores()), threads, reduction.c_str(),
                    overlap, median(step_ms), *std::min_element(step_ms.begin(), step_ms.end()), *std::max_element(step_ms.begin(), step_ms.end()),
                    median(halo_ms), median(gradient_ms), joined(sent, "%.0f").c_str(), joined(sent_messages, "%.0f").c_str(),
                    collectives / steps, joined(collective_kib, "%.0f").c_str(), joined(rss, "%.0f").c_str());
        if (!preset.empty()) {
            // The layers profiled as they run here: ranks × threads kernels side by side, up to the host's cores.
            const int host_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
            const int side_by_side = std::min(host_cores, transport->num_ranks() * threads);
            const cost::Device host = cost::load_device_file(preset);
            cost::SimulationOptions options;
            options.optimizer_slots = 2;
            options.record_timeline = false;
            options.measured_layers = std::make_shared<cost::MeasuredLayers>(mesh::profile_layers(
                model, cores.plan(), {.repeats = 2, .threads = side_by_side, .tasks = cores.num_cores(), .max_tasks = cores.num_cores()}));
            options.spread = cost::SimulationOptions::RankSpread{transport->num_ranks(), host_cores, reduction == "fast"};
            const double predicted = cost::predict_host_step(model, cores.plan(), 1, cost::CostModel(host), options).step_seconds * 1e3;
            std::printf("predicted_ms=%.1f error=%+.1f%%\n", predicted, (predicted / median(step_ms) - 1.0) * 100.0);
        }
    }
    return 0;
}
