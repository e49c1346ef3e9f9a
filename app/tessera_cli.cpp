// tessera-cli: the headless entry point. It links the engine alone (no Qt, no rendering).
//
//   tessera-cli                         the default job: describe the example MRI and its mask
//   tessera-cli info <image> [--labels <file>]
//   tessera-cli phantom <out.nii.gz> [--size 128,128,96] [--spacing 1,1,1] [--seed 1] [--labels <out>]
//   tessera-cli convert <in> <out>
//   tessera-cli plan <experiment.json> [--sweep] [--json <out.json>] [--device <preset>] [--overlap]
//                    [--host-ranks 1,2,4 [--host-threads 1] [--host-preset host.json]]
//   tessera-cli calibrate [--out <host.json>] [--threads 2] [--quick] [--check]
//   mpirun -np K tessera-cli calibrate --network [--out <host.json>] [--quick]
//   tessera-cli validate <experiment.json>...
//   tessera-cli train <experiment.json> [--steps N] [--model-dir DIR] [--threads 2] [--plain]
//                     [--backend mpi] [--reduction reproducible|fast]     (under mpirun -np K or srun)
//   tessera-cli eval <experiment.json> [--model-dir DIR] [--backend mpi]
//   tessera-cli predict <experiment.json> <image>... [--out DIR] [--model-dir DIR] [--backend mpi]
//
// Exit codes (cli_run.hpp): 0 success, 2 bad input (a file, an argument, an experiment that cannot run),
// 1 a failure after the work started, 130 a training run stopped by Ctrl-C after its checkpoint.
#include "cli_run.hpp"
#include "core/allocator_policy.hpp"
#include "core/error.hpp"
#include "core/units.hpp"
#include "mesh/fidelity.hpp"
#include "mesh/host_calibration.hpp"
#include "cost/step_simulation.hpp"
#include "mesh/layer_profile.hpp"
#include "mesh/network_calibration.hpp"
#include "mpi/mpi_transport.hpp"
#include "cost/planner.hpp"
#include "data/examples.hpp"
#include "experiment/experiment.hpp"
#include "data/image_shards.hpp"
#include "data/phantom.hpp"
#include "io/dicom_series.hpp"
#include "io/hdf5_volume.hpp"
#include "io/volume_io.hpp"
#include "io/volume_region.hpp"
#include "report/run_report.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

namespace {

using tessera::cli::exit_bad_input;
using tessera::cli::exit_failure;

void describe_volume(const tessera::Volume& volume) {
    const auto& g = volume.geometry;
    const float* voxels = volume.voxels.data<float>();
    // Over the finite voxels: NaN compares false both ways, so it would scramble a plain minmax.
    float lowest_value = std::numeric_limits<float>::infinity(), highest_value = -lowest_value;
    for (std::int64_t v = 0; v < g.num_voxels(); ++v) {
        if (!std::isfinite(voxels[v])) continue;
        lowest_value = std::min(lowest_value, voxels[v]);
        highest_value = std::max(highest_value, voxels[v]);
    }
    const float* lowest = &lowest_value;
    const float* highest = &highest_value;
    std::printf("image    %s\n", volume.source_path.c_str());
    std::printf("grid     %s\n", tessera::describe(g).c_str());
    std::printf("origin   %.3f, %.3f, %.3f mm (LPS)\n", g.origin[0], g.origin[1], g.origin[2]);
    std::printf("direction %.3f %.3f %.3f | %.3f %.3f %.3f | %.3f %.3f %.3f\n", g.direction[0], g.direction[1],
                g.direction[2], g.direction[3], g.direction[4], g.direction[5], g.direction[6], g.direction[7],
                g.direction[8]);
    std::printf("voxels   %s in the file, values %g … %g\n", volume.source_scalar_type.c_str(),
                static_cast<double>(*lowest), static_cast<double>(*highest));
    for (const std::string& warning : volume.warnings) std::printf("warning  %s\n", warning.c_str());
}

// A volume too large to read whole for `info`: its grid, from the header alone.
void describe_region_volume(const tessera::VolumeRegionReader& reader) {
    const auto& g = reader.geometry();
    std::printf("image    %s\n", reader.source_path().c_str());
    std::printf("grid     %s\n", tessera::describe(g).c_str());
    std::printf("origin   %.3f, %.3f, %.3f mm (LPS)\n", g.origin[0], g.origin[1], g.origin[2]);
    std::printf("direction %.3f %.3f %.3f | %.3f %.3f %.3f | %.3f %.3f %.3f\n", g.direction[0], g.direction[1],
                g.direction[2], g.direction[3], g.direction[4], g.direction[5], g.direction[6], g.direction[7],
                g.direction[8]);
    std::printf("voxels   %s in the file (%s; values not scanned: training and prediction read it region by region)\n",
                reader.source_scalar_type().c_str(), tessera::format_gib(g.num_voxels() * 4).c_str());
}

// `text` cut or padded to `width` characters (UTF-8: "×" is one character, two bytes).
std::string padded(const std::string& text, std::size_t width) {
    std::string out;
    std::size_t characters = 0;
    for (std::size_t at = 0; at < text.size() && characters < width; ++characters) {
        std::size_t length = 1;
        const auto lead = static_cast<unsigned char>(text[at]);
        if (lead >= 0xf0) length = 4; else if (lead >= 0xe0) length = 3; else if (lead >= 0xc0) length = 2;
        out.append(text, at, length);
        at += length;
    }
    return out + std::string(width - characters, ' ');
}

// The datasets of an HDF5 file, one per line.
void print_hdf5_datasets(const std::filesystem::path& file, const std::vector<tessera::Hdf5DatasetInfo>& datasets) {
    std::printf("HDF5     %s: %zu dataset%s\n", file.string().c_str(), datasets.size(), datasets.size() == 1 ? "" : "s");
    for (const tessera::Hdf5DatasetInfo& dataset : datasets) {
        std::string shape;
        for (std::int64_t extent : dataset.shape) shape += (shape.empty() ? "" : "×") + std::to_string(extent);
        char spacing[80] = "no resolution attribute";
        if (dataset.spacing_mm) {
            std::snprintf(spacing, sizeof spacing, "%.4g × %.4g × %.4g mm", (*dataset.spacing_mm)[0], (*dataset.spacing_mm)[1], (*dataset.spacing_mm)[2]);
        }
        std::printf("  %s%s%s%s%s\n", padded(dataset.name, 28).c_str(), padded(shape, 18).c_str(),
                    padded(dataset.scalar_type.empty() ? "?" : dataset.scalar_type, 9).c_str(), padded(dataset.storage, 40).c_str(), spacing);
        if (!dataset.readable) std::printf("      cannot be read: %s\n", dataset.problem.c_str());
    }
}

// The series of a DICOM folder, one per line: what a series browser shows.
void print_dicom_series(const std::vector<tessera::DicomSeriesInfo>& series) {
    std::printf("DICOM    %zu series\n", series.size());
    std::printf("  number  %s%s%s%s%s%s%s%s\n", padded("modality", 10).c_str(), padded("description", 30).c_str(), padded("slices", 8).c_str(),
                padded("size", 11).c_str(), padded("spacing (mm)", 19).c_str(), padded("transfer syntax", 26).c_str(),
                padded("patient", 18).c_str(), "study date");
    for (const tessera::DicomSeriesInfo& one : series) {
        char spacing[64];
        std::snprintf(spacing, sizeof spacing, "%.3g × %.3g × %.3g", one.spacing[0], one.spacing[1], one.spacing[2]);
        std::printf("  %6lld  %s%s%s%s%s%s%s%s\n", static_cast<long long>(one.series_number),
                    padded(one.modality.empty() ? "?" : one.modality, 10).c_str(), padded(one.description, 30).c_str(),
                    padded(std::to_string(one.num_slices), 8).c_str(),
                    padded(std::to_string(one.size[0]) + "×" + std::to_string(one.size[1]), 11).c_str(), padded(spacing, 19).c_str(),
                    padded(one.transfer_syntax, 26).c_str(), padded(one.patient_name, 18).c_str(), one.study_date.c_str());
        std::printf("          UID %s, %lld file%s\n", one.series_uid.empty() ? "(none)" : one.series_uid.c_str(),
                    static_cast<long long>(one.num_files), one.num_files == 1 ? "" : "s");
        for (const std::string& warning : one.warnings) std::printf("          warning: %s\n", warning.c_str());
    }
}

void describe_labels(const tessera::LabelMap& labels) {
    std::map<std::int32_t, std::int64_t> counts;
    const std::int32_t* values = labels.labels.data<std::int32_t>();
    for (std::int64_t v = 0; v < labels.geometry.num_voxels(); ++v) ++counts[values[v]];
    std::printf("labels   %s\n", labels.source_path.c_str());
    for (const std::string& warning : labels.warnings) std::printf("warning  %s\n", warning.c_str());
    for (const auto& [label, count] : counts) {
        // The name the file gives the label (a .seg.nrrd's segment), if any.
        const auto named = std::find_if(labels.descriptions.begin(), labels.descriptions.end(),
                                        [label](const tessera::LabelDescription& d) { return d.value == label; });
        const std::string name = named != labels.descriptions.end() && !named->name.empty() ? " '" + named->name + "'" : "";
        std::printf("  label %d%s: %lld voxels (%.1f%%)\n", label, name.c_str(), static_cast<long long>(count),
                    100.0 * static_cast<double>(count) / static_cast<double>(labels.geometry.num_voxels()));
    }
}

std::array<double, 3> parse_triple(const std::string& text, const char* what) {
    std::array<double, 3> values{};
    char separator1 = 0, separator2 = 0;
    std::istringstream in(text);
    in >> values[0] >> separator1 >> values[1] >> separator2 >> values[2];
    TESSERA_CHECK(in && separator1 == ',' && separator2 == ',',
                  "expected " << what << " as three comma-separated numbers such as 128,128,96, got '" << text << "'");
    return values;
}

std::string milliseconds(double seconds) {
    char text[32];
    std::snprintf(text, sizeof text, seconds < 0.01 ? "%.3f ms" : "%.1f ms", seconds * 1e3);
    return text;
}

nlohmann::json plan_json(const tessera::cost::LayoutPlan& plan) {
    return {{"layout", plan.layout},
            {"replicas", plan.replicas},
            {"pieces", plan.pieces},
            {"valid", plan.valid},
            {"fits", plan.fits},
            {"peak_memory_bytes", plan.peak_memory},
            {"step_seconds", plan.step_seconds},
            {"samples_per_second", plan.samples_per_second},
            {"fraction_of_peak", plan.fraction_of_peak},
            {"verdict", plan.verdict}};
}

void print_plan_table(const std::vector<tessera::cost::LayoutPlan>& plans) {
    std::printf("%-44s %12s %12s %10s  %s\n", "layout", "memory/core", "step", "of peak", "verdict");
    for (const auto& plan : plans) {
        const std::string memory = plan.valid ? tessera::format_gib(plan.peak_memory) : "-";
        const std::string step = plan.valid && plan.fits ? milliseconds(plan.step_seconds) : "-";
        char peak[16] = "-";
        if (plan.valid && plan.fits) std::snprintf(peak, sizeof peak, "%.0f%%", 100 * plan.fraction_of_peak);
        std::printf("%-44s %12s %12s %10s  %s\n", plan.layout.c_str(), memory.c_str(), step.c_str(), peak, plan.verdict.c_str());
    }
}

// `plan`: the experiment's own layout on its device, then (with --sweep) every layout for its core
// budget and the best layout at other budgets.
// `calibrate --check`: the trust-check cases trained on the simulated cores with the new preset, the
// prediction against the fastest measured step; the residuals go into the preset ("check_*"), where
// the studio reads its uncertainty band.
void check_host_predictions(tessera::cost::Device& host) {
    namespace mesh = tessera::mesh;
    const tessera::cost::CostModel model(host);
    std::vector<double> errors;
    std::printf("checking host predictions (cases no constant was fitted on; 5 steps each):\n");
    for (const mesh::FidelityCase& fidelity_case : mesh::fidelity_cases()) {
        if (!fidelity_case.trust_check) continue;
        const mesh::FidelityResult result = mesh::measure_fidelity(fidelity_case, model, {});
        errors.push_back(result.error_percent());
        std::printf("  %-30s predicted %8.1f ms  measured %8.1f ms  error %+6.1f%%\n", fidelity_case.name.c_str(),
                    result.predicted_seconds * 1e3, result.measured_fastest() * 1e3, result.error_percent());
        std::fflush(stdout);
    }
    const mesh::FidelitySummary summary = mesh::summarize_errors(errors);
    std::printf("  median |error| %.1f%%, bias %+.1f%%, rms %.1f%%: host predictions on this machine are good to about ±%.0f%%\n",
                summary.median_abs_error_percent, summary.bias_percent, summary.rms_error_percent,
                std::ceil(summary.rms_error_percent));
    host.measured["check_cases"] = static_cast<double>(summary.cases);
    host.measured["check_median_abs_error_percent"] = summary.median_abs_error_percent;
    host.measured["check_bias_percent"] = summary.bias_percent;
    host.measured["check_rms_error_percent"] = summary.rms_error_percent;
}

// `plan --host-ranks 1,2,4`: the experiment's step on this host's simulated cores spread over K MPI ranks on
// this machine, predicted from the host preset (its network from calibrate --network) with the layers
// profiled as they would run: ranks × threads kernels side by side, up to the host's cores.
void print_host_ranks(const tessera::experiment::Experiment& e, const std::vector<int>& ranks, int threads, const std::string& preset_option,
                      nlohmann::json& out) {
    using namespace tessera;
    const std::filesystem::path preset = preset_option.empty() ? cost::devices_directory() / "host.json" : std::filesystem::path(preset_option);
    TESSERA_CHECK(std::filesystem::exists(preset), "--host-ranks predicts from this host's preset, and " << preset.string()
                                                                                                          << " does not exist: run tessera-cli calibrate --threads "
                                                                                                          << threads << ", then mpirun -np 2 tessera-cli calibrate --network");
    const cost::Device host = cost::load_device_file(preset);
    const auto preset_threads = static_cast<int>(host.measured.count("threads") ? host.measured.at("threads") : 0);
    TESSERA_CHECK(preset_threads == threads, "the host preset " << preset.string() << " was calibrated for " << preset_threads
                                                                 << " thread(s) per rank, --threads asks for " << threads
                                                                 << ": calibrate for it (tessera-cli calibrate --threads " << threads << ")");
    const graph::Graph model = experiment::build_model(e, experiment::replica_input_shape(e));
    const partition::TilingPlan plan(model, experiment::tile_grid(e));
    const int host_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    std::printf("\nthis host's simulated cores (%d host cores, %d thread(s) per rank, preset %s):\n", host_cores, threads, preset.string().c_str());
    std::map<int, std::shared_ptr<cost::MeasuredLayers>> profiles;  // by kernels side by side
    nlohmann::json rows = nlohmann::json::array();
    for (const int k : ranks) {
        const int side_by_side = std::min(host_cores, k * threads);
        auto& layers = profiles[side_by_side];
        if (!layers) {
            layers = std::make_shared<cost::MeasuredLayers>(mesh::profile_layers(
                model, plan, {.precision = e.precision, .repeats = 2, .threads = side_by_side, .tasks = plan.num_cores() * e.partition.num_replicas,
                              .max_tasks = std::max<std::int64_t>(2 * side_by_side, plan.num_cores())}));
        }
        cost::SimulationOptions options;
        options.precision = e.precision;
        options.optimizer_slots = experiment::optimizer_slots(e);
        options.record_timeline = false;
        options.measured_layers = layers;
        if (k > 1) options.spread = cost::SimulationOptions::RankSpread{k, host_cores, e.training.reduction == train::ReductionOrder::Fast};
        const double step = cost::predict_host_step(model, plan, e.partition.num_replicas, cost::CostModel(host), options).step_seconds;
        std::printf("%8d %s  predicted %s per step\n", k, k == 1 ? "process" : "ranks  ", milliseconds(step).c_str());
        rows.push_back({{"ranks", k}, {"threads_per_rank", threads}, {"predicted_seconds", step}});
    }
    out["host_ranks"] = rows;
}

int run_plan(const std::string& path, bool sweep, const std::string& json_out, const std::string& device_override, bool overlap,
             const std::vector<int>& host_ranks, int host_threads, const std::string& host_preset) {
    using namespace tessera;
    const experiment::Experiment e = experiment::load_experiment(path);
    const cost::Device device = cost::load_device_preset(device_override.empty() ? e.device : device_override);
    const cost::CostModel model(device);
    const cost::ModelFactory factory = [&](const Shape& input) { return experiment::build_model(e, input); };
    cost::PlannerRequest request;
    request.global_input = experiment::global_input_shape(e);
    request.core_budget = e.partition.num_cores();
    request.simulation.precision = e.precision;
    request.simulation.overlap_gradient_all_reduce = overlap;
    request.simulation.optimizer_slots = experiment::optimizer_slots(e);
    std::printf("experiment %s%s%s\n", path.c_str(), e.name.empty() ? "" : ": ", e.name.c_str());
    std::printf("device     %s (%s, %s per core)\n", device.name.c_str(), device.id.c_str(), tessera::format_gib(device.memory_per_core).c_str());
    std::printf("input      %s, %s, %lld cores (%lld per replica × %lld replicas)\n\n",
                shape_to_string(request.global_input).c_str(), std::string(experiment::precision_name(e.precision)).c_str(),
                static_cast<long long>(request.core_budget), static_cast<long long>(e.partition.num_cores_per_replica),
                static_cast<long long>(e.partition.num_replicas));

    std::vector<cost::LayoutPlan> plans = cost::plan_layouts(factory, request, model);
    // The experiment's own layout: its grid (even, or its tile_boundaries) among the planner's, else planned alone.
    const partition::SpatialGrid grid = experiment::tile_grid(e);
    const auto mine = std::find_if(plans.begin(), plans.end(), [&](const cost::LayoutPlan& p) {
        return p.replicas == e.partition.num_replicas && p.grid.boundaries == grid.boundaries;
    });
    const cost::LayoutPlan own =
        mine != plans.end() ? *mine : cost::plan_layout(factory, request, model, e.partition.num_replicas, grid);
    nlohmann::json out;
    out["experiment"] = path;
    out["device"] = device.id;
    std::printf("the experiment's layout:\n");
    print_plan_table({own});
    out["layout"] = plan_json(own);
    if (sweep) {
        std::printf("\nevery layout for %lld cores, best first:\n", static_cast<long long>(request.core_budget));
        print_plan_table(plans);
        // The curves the studio's planner draws (cost::scaling_curve defines both).
        const std::vector<std::int64_t> budgets = cost::scaling_budgets(request.core_budget);
        for (const cost::Scaling scaling : {cost::Scaling::Strong, cost::Scaling::Weak}) {
            const bool strong = scaling == cost::Scaling::Strong;
            if (strong) {
                std::printf("\nstrong scaling (global batch %lld):\n", static_cast<long long>(request.global_input[0]));
            } else {
                std::printf("\nweak scaling (%lld samples per %lld cores, as the experiment):\n", static_cast<long long>(request.global_input[0]),
                            static_cast<long long>(request.core_budget));
            }
            std::printf("%8s %8s  %-44s %12s %14s\n", "cores", "batch", "best layout", "step", "samples/s");
            nlohmann::json curve = nlohmann::json::array();
            for (const cost::ScalingPoint& point : cost::scaling_curve(factory, request, model, budgets, scaling)) {
                const bool ok = point.best.valid && point.best.fits;
                std::printf("%8lld %8lld  %-44s %12s %14s\n", static_cast<long long>(point.cores), static_cast<long long>(point.global_batch),
                            ok ? point.best.layout.c_str() : "(nothing fits)", ok ? milliseconds(point.best.step_seconds).c_str() : "-",
                            ok ? std::to_string(point.best.samples_per_second).c_str() : "-");
                curve.push_back({{"cores", point.cores}, {"global_batch", point.global_batch}, {"best", plan_json(point.best)}});
            }
            out[strong ? "strong_scaling" : "weak_scaling"] = curve;
        }
        nlohmann::json table = nlohmann::json::array();
        for (const auto& plan : plans) table.push_back(plan_json(plan));
        out["layouts"] = table;
    }
    if (!host_ranks.empty()) print_host_ranks(e, host_ranks, host_threads, host_preset, out);
    if (!json_out.empty()) {
        std::ofstream file(json_out);
        TESSERA_CHECK(file, "cannot write '" << json_out << "'; check the directory exists and is writable");
        file << out.dump(2) << "\n";
        std::printf("\nwrote %s\n", json_out.c_str());
    }
    return 0;
}


// A CLI11 check with a message that names the option and the range ("--steps must be a whole number
// from 1 to 1000000000, got 0"), instead of CLI11's "Value 0 not in range 0.000000 to 1.79e308".
CLI::Validator whole_number_in(const std::string& option, long long lowest, long long highest) {
    return CLI::Validator(
        [=](std::string& text) -> std::string {
            std::size_t used = 0;
            long long value = 0;
            try {
                value = std::stoll(text, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used == text.size() && used > 0 && value >= lowest && value <= highest) return {};
            return option + " must be a whole number from " + std::to_string(lowest) + " to " + std::to_string(highest) + ", got '" +
                   text + "'";
        },
        "INT in [" + std::to_string(lowest) + ", " + std::to_string(highest) + "]");
}

// `mpirun -np K tessera-cli calibrate --network`: the network between the ranks, added to the host preset
// rank 0 reads (calibrated first, for the threads each rank will run).
int calibrate_network_command(const std::string& out_option, bool quick) {
    int argc = 0;
    char** argv = nullptr;
    tessera::mpi::Session session(argc, argv);
    const std::shared_ptr<tessera::mesh::Transport> transport = tessera::mpi::make_transport();
    try {
        const std::filesystem::path out =
            out_option.empty() ? tessera::cost::devices_directory() / "host.json" : std::filesystem::path(out_option);
        const tessera::mesh::NetworkCalibration network = tessera::mesh::measure_network(*transport, quick);
        if (transport->rank() != 0) return tessera::cli::exit_ok;
        TESSERA_CHECK(std::filesystem::exists(out), "no host preset at " << out.string()
                                                                         << " to add the network to: calibrate the host first "
                                                                            "(tessera-cli calibrate --threads <threads per rank>), then the network");
        tessera::cost::Device host = tessera::cost::load_device_file(out);
        for (const auto& [name, value] : network.as_measured()) host.measured[name] = value;
        host.sources.push_back("cluster_*: mpirun -np " + std::to_string(network.ranks) + " tessera-cli calibrate --network (ping-pong, all-gather, all-reduce)");
        tessera::mesh::write_device_file(host, out);
        std::printf("network between %d ranks on %s: latency %.1f us, bandwidth %.2f GB/s, all-gather %.1f us", network.ranks,
                    transport->host_name().c_str(), network.latency_seconds * 1e6, network.bandwidth_bytes_per_second * 1e-9,
                    network.gather_seconds * 1e6);
        for (const auto& [bytes, seconds] : network.all_reduce_seconds) {
            std::printf(", all-reduce %.0f KiB %.1f us", bytes / 1024.0, seconds * 1e6);
        }
        std::printf("\nnoise: the median repeat ran %.1f%% slower than the fastest\n", network.noise_percent);
        if (network.too_noisy) {
            std::printf("warning: this machine is too busy to measure the network between its ranks well (messages waited for "
                        "the scheduler, not the network): the figures are rough. Calibrate again when it is quiet, with no more "
                        "ranks than cores.\n");
        }
        std::printf("wrote %s\n", out.string().c_str());
        return tessera::cli::exit_ok;
    } catch (const tessera::Error& error) {
        // Every rank holds the same figures (broadcast), so every rank fails alike and ends normally;
        // rank 0 says why (only it writes the preset).
        if (transport->rank() == 0) std::fprintf(stderr, "tessera-cli: %s\n", error.what());
        return error.is_internal() ? exit_failure : exit_bad_input;
    }
}

int run(int argc, char** argv) {
    CLI::App app{"tessera-cli: headless Tessera (volumes, phantoms, planning, training)"};
    app.set_version_flag("--version", TESSERA_VERSION);
    app.require_subcommand(0, 1);

    std::string info_image, info_labels, info_series;
    CLI::App* info = app.add_subcommand("info", "Describe an image (and a label map on its grid); a DICOM folder: list its series; an HDF5 file: its datasets");
    info->add_option("image", info_image, "Image file, DICOM folder, or HDF5 dataset (file.h5:/volumes/raw)")->required();
    info->add_option("--labels", info_labels, "Label map to check against the image's grid");
    info->add_option("--series", info_series, "DICOM: the series to describe, by number or UID (a folder with several is listed)");

    std::string phantom_out, phantom_labels, phantom_size = "128,128,96", phantom_spacing = "1,1,1";
    std::uint64_t phantom_seed = 1;
    CLI::App* phantom = app.add_subcommand("phantom", "Write a seeded synthetic CT phantom");
    phantom->add_option("out", phantom_out, "Output image (.nii, .nii.gz, .mha, .mhd, .nrrd, .nhdr, .mgh, .mgz, file.h5:/dataset)")->required();
    phantom->add_option("--labels", phantom_labels, "Output label map");
    phantom->add_option("--size", phantom_size, "Voxels along x,y,z (z = 1 for 2D)")->capture_default_str();
    phantom->add_option("--spacing", phantom_spacing, "Voxel spacing x,y,z in mm")->capture_default_str();
    phantom->add_option("--seed", phantom_seed, "Random seed")->capture_default_str();

    std::string convert_in, convert_out;
    bool convert_as_labels = false;
    CLI::App* convert = app.add_subcommand("convert", "Convert an image between formats");
    convert->add_option("in", convert_in, "Input image or DICOM folder")->required();
    convert->add_option("out", convert_out, "Output image (.nii, .nii.gz, .mha, .mhd, .nrrd, .nhdr, .mgh, .mgz, file.h5:/dataset)")->required();
    convert->add_flag("--labels", convert_as_labels, "Treat the image as a label map (integer values)");
    std::string convert_series;
    convert->add_option("--series", convert_series, "DICOM: the series to convert, by number or UID");
    bool convert_tfrecord = false;
    tessera::data::ImageShardOptions shard_options;
    convert->add_flag("--tfrecord", convert_tfrecord,
                      "in is a folder of class folders (photos/cat/001.jpg): write TFRecord shards of tf.Example named out-00000-of-0000N, "
                      "as TensorFlow's ImageNet builder lays them out");
    convert->add_option("--shards", shard_options.num_shards, "Shards to write (--tfrecord)")->capture_default_str();
    convert->add_option("--first-label", shard_options.first_label,
                        "image/class/label of the first class folder (names sorted); ImageNet's shards count from 1 (--tfrecord)")
        ->capture_default_str();

    std::string plan_experiment, plan_json_out, plan_device;
    bool plan_sweep = false, plan_overlap = false;
    CLI::App* plan = app.add_subcommand("plan", "Predict an experiment's step time and memory on its device; --sweep ranks every layout");
    plan->add_option("experiment", plan_experiment, "Experiment file (JSON)")->required();
    plan->add_flag("--sweep", plan_sweep, "Rank every layout for the core budget and print strong scaling");
    plan->add_option("--json", plan_json_out, "Also write the results as JSON to this file");
    plan->add_option("--device", plan_device, "Plan for this device preset instead of the experiment's");
    plan->add_flag("--overlap", plan_overlap, "Overlap the gradient all-reduce with the backward pass (25 MiB buckets)");
    std::vector<int> plan_host_ranks;
    int plan_host_threads = 1;
    plan->add_option("--host-ranks", plan_host_ranks,
                     "Also predict the step on this host's simulated cores spread over these numbers of MPI ranks (e.g. 1,2,4), "
                     "from the host preset and its network (tessera-cli calibrate; mpirun -np 2 tessera-cli calibrate --network)")
        ->delimiter(',')
        ->check(CLI::Range(1, 4096));
    std::string plan_host_preset;
    plan->add_option("--host-preset", plan_host_preset, "The host preset for --host-ranks (default: the presets directory's host.json)");
    plan->add_option("--host-threads", plan_host_threads, "Threads per rank for --host-ranks (the host preset's)")
        ->capture_default_str()
        ->check(whole_number_in("--host-threads", 1, 256));

    std::string calibrate_out;
    int calibrate_threads = 2;
    bool calibrate_quick = false;
    CLI::App* calibrate = app.add_subcommand("calibrate", "Measure this host for the cost model and write its device preset");
    calibrate->add_option("--out", calibrate_out, "Device file to write (default: the presets directory's host.json)");
    calibrate->add_option("--threads", calibrate_threads, "Host threads the simulated cores run on")
        ->capture_default_str()
        ->check(whole_number_in("--threads", 1, 256));
    calibrate->add_flag("--quick", calibrate_quick, "Fewer measurements (a rougher preset, in a second)");
    bool calibrate_network = false;
    calibrate->add_flag("--network", calibrate_network,
                        "Under mpirun -np K (K >= 2): measure the network between the ranks (ping-pong latency and bandwidth, "
                        "all-gather, all-reduce) and add it to the host preset, for predictions of meshes spread over ranks");
    bool calibrate_check = false;
    calibrate->add_flag("--check", calibrate_check,
                        "Then train a few validation cases on the simulated cores and print predicted against measured step "
                        "times: how far to trust host predictions on this machine (recorded in the preset)");

    std::vector<std::string> validate_files;
    CLI::App* validate = app.add_subcommand("validate", "Check experiment files: every field, the data they name, TPU compatibility");
    validate->add_option("experiments", validate_files, "Experiment files (JSON)")->required();

    // train, eval and predict share the run's options.
    tessera::cli::RunArguments run_arguments;
    std::int64_t steps_override = 0;
    const auto add_run_options = [&](CLI::App* command, bool training) {
        command->add_option("experiment", run_arguments.experiment, "Experiment file (JSON)")->required();
        command->add_option("--model-dir", run_arguments.model_dir, "Checkpoints, metrics and predictions (default: the experiment's model_dir)");
        command->add_option("--threads", run_arguments.threads, "Host threads the simulated cores run on")
            ->capture_default_str()
            ->check(whole_number_in("--threads", 1, 256));
        if (training) {
            command->add_option("--steps", steps_override, "Train this many steps instead of the experiment's")
                ->check(whole_number_in("--steps", 1, 1'000'000'000));
            command->add_flag("--plain", run_arguments.plain, "Plain progress lines even on a terminal");
            command->add_option("--reduction", run_arguments.reduction,
                                "Weight gradients across MPI ranks: reproducible (the bits of one process) or fast (MPI_Allreduce); "
                                "default: the experiment's \"reduction\"")
                ->check(CLI::IsMember({"reproducible", "fast"}));
        } else {
            command->add_flag("--random-weights", run_arguments.random_weights,
                              "Run even when the model_dir holds no checkpoint (random weights: for smoke tests only)");
        }
        command->add_flag("--no-predictions", run_arguments.no_predictions, "Do not write label volumes at evaluations");
        command->add_option("--backend", run_arguments.backend,
                            "Where the simulated cores run: this process, or spread over the ranks of an MPI job "
                            "(mpirun -np K tessera-cli train|eval|predict ... --backend mpi; srun under Slurm)")
            ->check(CLI::IsMember({"single-process", "mpi"}))
            ->capture_default_str();
    };
    CLI::App* train = app.add_subcommand("train", "Train an experiment on the simulated cores; resumes from its model_dir's latest checkpoint");
    add_run_options(train, true);
    CLI::App* eval = app.add_subcommand("eval", "Evaluate the latest checkpoint on the held-out data (Dice, IoU and accuracy; a detector: COCO AP)");
    add_run_options(eval, false);
    std::vector<std::string> predict_inputs;
    std::string predict_out = "predictions";
    CLI::App* predict = app.add_subcommand("predict", "Segment images or volumes of any size with the latest checkpoint (sliding windows)");
    add_run_options(predict, false);
    predict->add_option("inputs", predict_inputs, "Images or volumes to segment")->required();
    predict->add_option("--out", predict_out, "Folder for the label volumes")->capture_default_str();

    std::string report_model_dir, report_out;
    CLI::App* report = app.add_subcommand("report", "Write a run's report: one self-contained HTML file (charts, partition, timeline, best and worst cases)");
    report->add_option("model_dir", report_model_dir, "The run's folder (its model_dir)")->required();
    report->add_option("--out", report_out, "The HTML file to write (default: <model_dir>/report.html)");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& error) {
        return app.exit(error) == 0 ? 0 : exit_bad_input;
    }

    if (steps_override > 0) run_arguments.steps = steps_override;
    if (*validate) return tessera::cli::validate_command(validate_files);
    if (*train) return tessera::cli::train_command(run_arguments);
    if (*eval) return tessera::cli::eval_command(run_arguments);
    if (*predict) return tessera::cli::predict_command(run_arguments, predict_inputs, predict_out);

    try {
        if (*plan) {
            return run_plan(plan_experiment, plan_sweep, plan_json_out, plan_device, plan_overlap, plan_host_ranks, plan_host_threads, plan_host_preset);
        } else if (*calibrate && calibrate_network) {
            return calibrate_network_command(calibrate_out, calibrate_quick);
        } else if (*calibrate) {
            tessera::mesh::CalibrationOptions options;
            options.threads = calibrate_threads;
            options.quick = calibrate_quick;
            tessera::cost::Device host = tessera::mesh::calibrate_host(options, [](const std::string& step) {
                std::printf("measuring %s\n", step.c_str());
                std::fflush(stdout);
            });
            const double noise = host.measured["noise_percent"];
            std::printf("noise: the median measurement's median repeat ran %.1f%% slower than its fastest\n", noise);
            if (noise > 10.0) {
                std::printf("warning: this machine is too busy to calibrate well (over 10%%): other processes, or a shared "
                            "virtual machine's steal time, slow the measurements. Calibrate again when it is quiet.\n");
            }
            if (calibrate_check) check_host_predictions(host);
            const std::filesystem::path out =
                calibrate_out.empty() ? tessera::cost::devices_directory() / "host.json" : std::filesystem::path(calibrate_out);
            tessera::mesh::write_device_file(host, out);
            std::printf("wrote %s\n", out.string().c_str());
        } else if (*report) {
            const std::filesystem::path out = report_out.empty() ? std::filesystem::path(report_model_dir) / "report.html" : std::filesystem::path(report_out);
            const tessera::report::ReportResult written = tessera::report::write_run_report(report_model_dir, out);
            for (const std::string& omission : written.omissions) std::printf("left out: %s\n", omission.c_str());
            std::printf("wrote %s (%.1f MiB)\n", out.string().c_str(), static_cast<double>(written.html.size()) / (1024.0 * 1024.0));
        } else if (*info && tessera::is_hdf5_name(info_image)) {
            const std::optional<tessera::Hdf5DatasetName> name = tessera::parse_hdf5_name(info_image);
            const std::vector<tessera::Hdf5DatasetInfo> datasets = tessera::list_hdf5_datasets(name->file);
            print_hdf5_datasets(name->file, datasets);
            const auto num_readable = std::count_if(datasets.begin(), datasets.end(), [](const auto& d) { return d.readable; });
            const bool cremi = std::any_of(datasets.begin(), datasets.end(), [](const auto& d) { return d.name == "/volumes/raw"; });
            if (name->dataset.empty() && !cremi && num_readable != 1) {
                std::printf("describe one with %s:<dataset>\n", name->file.string().c_str());
                return 0;
            }
            const std::unique_ptr<tessera::VolumeRegionReader> reader = tessera::open_region_reader(info_image);
            // Scanned for its value range when it would be read whole anyway (up to 1 GiB as f32).
            if (reader->geometry().num_voxels() <= (std::int64_t{1} << 28)) {
                describe_volume(tessera::read_volume(reader->source_path()));
            } else {
                describe_region_volume(*reader);
            }
            if (!info_labels.empty()) {
                const std::unique_ptr<tessera::VolumeRegionReader> labels = tessera::open_region_reader(info_labels);
                tessera::check_same_grid(reader->geometry(), labels->geometry(), info_labels);
                std::printf("labels   %s on the same grid\n", labels->source_path().c_str());
            }
        } else if (*info) {
            const bool dicom = tessera::detect_volume_format(info_image) == tessera::VolumeFormat::DicomSeries;
            if (dicom) {
                const std::vector<tessera::DicomSeriesInfo> series = tessera::list_dicom_series(info_image);
                print_dicom_series(series);
                if (series.size() > 1 && info_series.empty()) {
                    std::printf("describe one with --series <number> (or its UID)\n");
                    return 0;
                }
            } else if (!info_series.empty()) {
                std::fprintf(stderr, "tessera-cli: --series picks a DICOM series; %s is not DICOM\n", info_image.c_str());
                return exit_bad_input;
            }
            const tessera::Volume volume = dicom ? tessera::read_dicom_series(info_image, info_series) : tessera::read_volume(info_image);
            describe_volume(volume);
            if (!info_labels.empty()) {
                const tessera::LabelMap labels = tessera::read_label_map(info_labels);
                tessera::check_same_grid(volume.geometry, labels.geometry, info_labels);
                describe_labels(labels);
            }
        } else if (*phantom) {
            tessera::PhantomOptions options;
            const auto size = parse_triple(phantom_size, "--size");
            for (std::size_t axis = 0; axis < 3; ++axis) options.size[axis] = static_cast<std::int64_t>(size[axis]);
            options.spacing = parse_triple(phantom_spacing, "--spacing");
            options.seed = phantom_seed;
            const tessera::Phantom generated = tessera::make_ct_phantom(options);
            tessera::write_volume(generated.volume, phantom_out);
            std::printf("wrote %s (%s)\n", phantom_out.c_str(), tessera::describe(generated.volume.geometry).c_str());
            if (!phantom_labels.empty()) {
                tessera::write_label_map(generated.labels, phantom_labels);
                std::printf("wrote %s\n", phantom_labels.c_str());
            }
        } else if (*convert && convert_tfrecord) {
            const tessera::data::ShardSummary written = tessera::data::write_image_shards(convert_in, convert_out, shard_options);
            std::printf("wrote %lld images of %zu classes into %zu shards (%.1f MiB): %s … %s\n", static_cast<long long>(written.num_images),
                        written.classes.size(), written.shards.size(), static_cast<double>(written.num_bytes) / (1024.0 * 1024.0),
                        written.shards.front().string().c_str(), written.shards.back().string().c_str());
            for (std::size_t c = 0; c < written.classes.size(); ++c) {
                std::printf("  label %lld  %s\n", static_cast<long long>(shard_options.first_label + static_cast<std::int64_t>(c)),
                            written.classes[c].c_str());
            }
        } else if (*convert) {
            if (!convert_series.empty()) {
                TESSERA_CHECK(!convert_as_labels, "--series with --labels: a DICOM series is read as an image; convert it, then read the "
                                                  "result as labels");
                tessera::write_volume(tessera::read_dicom_series(convert_in, convert_series), convert_out);
            } else if (convert_as_labels) {
                tessera::write_label_map(tessera::read_label_map(convert_in), convert_out);
            } else {
                tessera::write_volume(tessera::read_volume(convert_in), convert_out);
            }
            std::printf("wrote %s\n", convert_out.c_str());
        } else {
            // The default job: what `make run` does on a machine without a display.
            const auto example = tessera::find_example_mri();
            if (!example) {
                std::fprintf(stderr,
                             "tessera-cli: the example MRI is not installed (Debian package %s); "
                             "try `tessera-cli phantom phantom.nii.gz`\n",
                             tessera::example_data_package);
                return exit_bad_input;
            }
            const tessera::Volume volume = tessera::read_volume(example->image);
            const tessera::LabelMap labels = tessera::read_label_map(example->labels);
            tessera::check_same_grid(volume.geometry, labels.geometry, example->labels.string());
            describe_volume(volume);
            describe_labels(labels);
        }
    } catch (const tessera::Error& error) {
        std::fprintf(stderr, "tessera-cli: %s\n", error.what());
        return error.is_internal() ? exit_failure : exit_bad_input;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "tessera-cli: %s\n", error.what());
        return exit_failure;
    }
    return 0;
}

}  // namespace

// Every exception ends here: bad input is exit 2, anything else exit 1 with what to report.
int main(int argc, char** argv) {
    tessera::retain_freed_memory();
    std::string context = "tessera-cli";
    for (int index = 1; index < argc; ++index) context.append(" ").append(argv[index]);
    try {
        return run(argc, argv);
    } catch (const tessera::Error& error) {
        if (!error.is_internal()) {
            std::fprintf(stderr, "tessera-cli: %s\n", error.what());
            return exit_bad_input;
        }
        std::fprintf(stderr, "tessera-cli: %s\nThis is a bug in Tessera: please report it with the command (%s) and the files it read.\n",
                     error.what(), context.c_str());
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "tessera-cli: out of memory while running '%s'. Free memory, or give it a smaller input.\n", context.c_str());
    } catch (const std::exception& error) {
        std::fprintf(stderr, "tessera-cli: internal error: %s\nThis is a bug in Tessera: please report it with the command (%s) and the files it read.\n",
                     error.what(), context.c_str());
    } catch (...) {
        std::fprintf(stderr, "tessera-cli: internal error of unknown kind\nThis is a bug in Tessera: please report it with the command (%s).\n",
                     context.c_str());
    }
    return exit_failure;
}

