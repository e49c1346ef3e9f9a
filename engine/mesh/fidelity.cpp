#include "mesh/fidelity.hpp"

#include "core/error.hpp"
#include "mesh/layer_profile.hpp"
#include "mesh/measurement_support.hpp"
#include "core/random.hpp"
#include "networks/models.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace tessera::mesh {

std::string_view fidelity_set_name(FidelitySet set) { return set == FidelitySet::Tuning ? "tuning" : "validation"; }

std::vector<FidelityCase> fidelity_cases() {
    auto unet = [](int depth, std::int64_t width, bool norm) {
        return [=](const Shape& input) {
            return networks::make_unet({.depth = depth, .base_width = width, .num_classes = 2, .batch_norm = norm}, input);
        };
    };
    auto resnet = [](int depth, std::int64_t width) {
        return [=](const Shape& input) { return networks::make_resnet({.depth = depth, .num_classes = 10, .base_width = width}, input); };
    };
    constexpr auto T = FidelitySet::Tuning;
    constexpr auto V = FidelitySet::Validation;
    constexpr auto BF16 = graph::Precision::BF16;
    constexpr auto F32 = graph::Precision::F32;
    return {
        {T, "unet2d_256_4way_h", unet(4, 16, true), {4, 1, 256, 256}, {4, 1}},
        {T, "unet2d_128_2x2", unet(3, 16, true), {2, 1, 128, 128}, {2, 2}},
        {T, "unet2d_128_one_core", unet(3, 16, true), {2, 1, 128, 128}, {1, 1}},
        {T, "unet2d_nobn_128_1x4", unet(3, 32, false), {2, 1, 128, 128}, {1, 4}},
        {T, "unet2d_128_2rep_x_h2", unet(3, 16, true), {2, 1, 128, 128}, {2, 1}, 2},
        {T, "unet3d_64_8way", unet(3, 8, true), {1, 1, 64, 64, 64}, {2, 2, 2}},
        {T, "unet3d_48_d2", unet(3, 16, true), {1, 1, 48, 48, 48}, {2, 1, 1}},
        {T, "resnet18_128_2x2", resnet(18, 32), {4, 3, 128, 128}, {2, 2}},
        // Never tuned on.
        {V, "unet2d_w24_192_1x3", unet(3, 24, true), {2, 1, 192, 192}, {1, 3}},
        {V, "unet2d_160_uneven_3x1", unet(3, 16, true), {2, 1, 160, 160}, {3, 1}, 1, {8, 8}},
        {V, "unet2d_d4_w8_256_2x2", unet(4, 8, true), {2, 1, 256, 256}, {2, 2}},
        {V, "unet2d_batch6_96_1x2", unet(3, 16, true), {6, 1, 96, 96}, {1, 2}, 1, {}, F32, true},
        {V, "unet2d_nobn_w48_128_one_core", unet(3, 48, false), {1, 1, 128, 128}, {1, 1}},
        {V, "unet2d_64_4rep", unet(3, 16, true), {1, 1, 64, 64}, {1, 1}, 4, {}, F32, true},
        {V, "unet2d_bf16_128_2x1", unet(3, 16, true), {2, 1, 128, 128}, {2, 1}, 1, {}, BF16, true},
        {V, "unet3d_w16_32x32x64_1x1x2", unet(3, 16, true), {1, 1, 32, 32, 64}, {1, 1, 2}},
        {V, "unet3d_64_4x1x1", unet(3, 8, true), {1, 1, 64, 64, 64}, {4, 1, 1}},
        {V, "unet3d_d2_w16_40_uneven_3way", unet(2, 16, true), {1, 1, 40, 40, 40}, {3, 1, 1}, 1, {4, 4, 4}, F32, true},
        {V, "resnet34_128_2x1", resnet(34, 32), {2, 3, 128, 128}, {2, 1}},
        {V, "resnet50_w16_64_1x2", resnet(50, 16), {2, 3, 64, 64}, {1, 2}, 1, {}, F32, true},
        {V, "resnet18_128_2rep_x_2x1", resnet(18, 32), {2, 3, 128, 128}, {2, 1}, 2},
    };
}

double FidelityResult::measured_fastest() const { return fastest(measured_seconds); }

double FidelityResult::measured_median() const {
    std::vector<double> sorted = measured_seconds;
    std::sort(sorted.begin(), sorted.end());
    return sorted[sorted.size() / 2];
}

double FidelityResult::error_percent() const { return 100.0 * (predicted_seconds - measured_fastest()) / measured_fastest(); }

double FidelityResult::class_error_percent() const {
    return 100.0 * (class_predicted_seconds - measured_fastest()) / measured_fastest();
}

FidelityResult measure_fidelity(const FidelityCase& fidelity_case, const cost::CostModel& host, const FidelityOptions& options) {
    TESSERA_CHECK(options.steps >= 1, "a fidelity check needs at least one timed step, got " << options.steps);
    const graph::Graph g = fidelity_case.model(fidelity_case.input);
    train::TrainerConfig config = timing_trainer_config(0.01);
    config.precision = fidelity_case.precision;
    MeshConfig mesh;
    mesh.num_replicas = fidelity_case.replicas;
    mesh.grid = fidelity_case.alignment.empty()
                    ? partition::SpatialGrid::even(fidelity_case.input, fidelity_case.pieces)
                    : partition::SpatialGrid::aligned(fidelity_case.input, fidelity_case.pieces, fidelity_case.alignment);
    mesh.host_threads = static_cast<int>(std::max(1.0, host.host_rate("threads")));
    CoreMesh cores(g, mesh, config);

    Shape global = fidelity_case.input;
    global[0] *= fidelity_case.replicas;
    const Tensor images = normal_tensor(global, 1);
    Shape label_shape{global[0]};
    if (g.node(g.output_node()).output_shape.size() > 2) label_shape.insert(label_shape.end(), global.begin() + 2, global.end());
    Tensor labels = Tensor::zeros(label_shape, DType::I32);
    SeededRandom random(1);
    for (std::int64_t i = 0; i < labels.num_elements(); ++i) labels.data<std::int32_t>()[i] = random.uniform() > 0.5;

    FidelityResult result;
    std::vector<graph::NodeTiming> fastest_timings;  // core 0's layers in the fastest step
    std::vector<CoreEvent> fastest_events;           // every core's, in the fastest step
    cores.train_step(images, labels);  // warm-up
    // Steps and profile passes interleaved: on a shared machine both sample the same moments.
    const int threads = mesh.host_threads;
    LayerProfiler profiler(g, cores.plan(), {.precision = fidelity_case.precision, .threads = threads, .tasks = cores.num_cores()});
    for (int step = 0; step < options.steps; ++step) {
        const auto start = std::chrono::steady_clock::now();
        const train::StepResult measured = cores.train_step(images, labels);
        result.measured_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        if (result.measured_seconds.back() <= result.measured_fastest()) {
            result.fastest_step = measured;
            const std::span<const graph::NodeTiming> timings = cores.executor(0).timings();
            fastest_timings.assign(timings.begin(), timings.end());
            fastest_events = cores.events();
        }
        profiler.measure(std::max(1, options.profile_repeats / options.steps));
    }

    cost::SimulationOptions simulation;
    simulation.optimizer_slots = 1;
    simulation.precision = fidelity_case.precision;
    simulation.record_timeline = false;
    result.class_predicted_seconds = cost::predict_host_step(g, cores.plan(), fidelity_case.replicas, host, simulation).step_seconds;
    simulation.measured_layers = std::make_shared<cost::MeasuredLayers>(profiler.layers());
    const cost::StepPrediction predicted = cost::predict_host_step(g, cores.plan(), fidelity_case.replicas, host, simulation);
    result.predicted_seconds = predicted.step_seconds;
    if (options.inspect) options.inspect(cores, predicted, *simulation.measured_layers, fastest_timings, fastest_events);
    return result;
}

FidelitySummary summarize_errors(const std::vector<double>& error_percents) {
    FidelitySummary summary;
    summary.cases = error_percents.size();
    if (error_percents.empty()) return summary;
    std::vector<double> magnitudes;
    double squares = 0;
    for (double error : error_percents) {
        magnitudes.push_back(std::abs(error));
        summary.bias_percent += error;
        squares += error * error;
        summary.within_15_percent += std::abs(error) <= 15.0 ? 1 : 0;
    }
    std::sort(magnitudes.begin(), magnitudes.end());
    const std::size_t n = magnitudes.size();
    summary.median_abs_error_percent = n % 2 ? magnitudes[n / 2] : (magnitudes[n / 2 - 1] + magnitudes[n / 2]) / 2;
    summary.bias_percent /= static_cast<double>(n);
    summary.rms_error_percent = std::sqrt(squares / static_cast<double>(n));
    return summary;
}

}  // namespace tessera::mesh
