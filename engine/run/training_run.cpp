#include "run/training_run.hpp"

#include "core/error.hpp"
#include "core/json_support.hpp"
#include "core/memory_budget.hpp"
#include "core/units.hpp"
#include "graph/buffer_plan.hpp"
#include "core/user_files.hpp"
#include "cost/memory_model.hpp"
#include "cost/device.hpp"
#include "cost/step_simulation.hpp"
#include "mesh/layer_profile.hpp"
#include "ops/dnnl_support.hpp"
#include "data/phantom.hpp"
#include "data/prefetcher.hpp"
#include "data/sliding_window.hpp"
#include "data/folder_pairs.hpp"
#include "data/transforms.hpp"
#include "detection/coco_evaluation.hpp"
#include "detection/postprocess.hpp"
#include "io/atomic_file.hpp"
#include "io/color_image.hpp"
#include "io/hdf5_volume.hpp"
#include "io/volume_io.hpp"
#include "io/volume_region.hpp"
#include "loss/cross_entropy.hpp"
#include "loss/metrics.hpp"
#include "run/metrics_log.hpp"
#include "run/step_trace.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <numeric>
#include <thread>

namespace tessera::run {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// What rank 0 asks the other ranks' meshes to do, each followed by its arguments (a run spread over MPI).
enum class MeshCommand : std::int32_t {
    TrainStep = 1, Evaluate, Memory, Weights, TrainingState, LoadCheckpoint, Finish,
    TrainDetectionStep, PredictOutputs, DetectionLoss
};

void put_entries(mesh::ByteWriter& out, const std::vector<train::NamedTensor>& entries) {
    out.put(static_cast<std::int64_t>(entries.size()));
    for (const train::NamedTensor& entry : entries) {
        out.put_string(entry.name);
        out.put_tensor(entry.value);
    }
}

std::vector<train::NamedTensor> get_entries(mesh::ByteReader& in) {
    std::vector<train::NamedTensor> entries(static_cast<std::size_t>(in.get<std::int64_t>()));
    for (train::NamedTensor& entry : entries) {
        entry.name = in.get_string();
        entry.value = in.get_tensor();
    }
    return entries;
}

void put_ground_truth(mesh::ByteWriter& out, std::span<const detection::PaddedGroundTruth> truth) {
    out.put(static_cast<std::int64_t>(truth.size()));
    for (const detection::PaddedGroundTruth& image : truth) {
        out.put_tensor(image.boxes);
        out.put_tensor(image.classes);
        out.put(image.num_valid);
    }
}

std::vector<detection::PaddedGroundTruth> get_ground_truth(mesh::ByteReader& in) {
    std::vector<detection::PaddedGroundTruth> truth(static_cast<std::size_t>(in.get<std::int64_t>()));
    for (detection::PaddedGroundTruth& image : truth) {
        image.boxes = in.get_tensor();
        image.classes = in.get_tensor();
        image.num_valid = in.get<std::int64_t>();
    }
    return truth;
}

// The run's mesh, built the same way on every rank.
std::unique_ptr<mesh::CoreMesh> make_run_mesh(const experiment::Experiment& x, const RunOptions& options, const cost::Device& device) {
    check_fits_host(x);  // a first estimate, before the cores allocate anything; the mesh measures them as it compiles them
    mesh::MeshConfig mesh;
    mesh.num_replicas = x.partition.num_replicas;
    mesh.grid = experiment::tile_grid(x);  // tile_boundaries, or input_partition_dims' even pieces
    mesh.core_memory_bytes = device.memory_per_core;
    mesh.host_threads = options.host_threads;
    mesh.host_memory_bytes = static_cast<std::int64_t>(host_memory_budget_bytes());
    mesh.reduction = options.reduction.value_or(x.training.reduction);
    const graph::Graph model = experiment::build_model(x, experiment::replica_input_shape(x));
    auto cores = std::make_unique<mesh::CoreMesh>(model, mesh, experiment::trainer_config(x), options.transport);
    cores->check_memory();  // out of simulated memory: say so before any step
    return cores;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double unix_time() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::vector<std::string> class_names(const experiment::Experiment& e) {
    std::vector<std::string> names;
    const data::SourceKind source = e.data->source;
    for (std::int64_t c = 0; c < e.model.num_classes; ++c) {
        std::string name = c == 0 ? "background" : "class " + std::to_string(c);
        if (source == data::SourceKind::SyntheticEm && c == 1) name = "membrane";
        if (source == data::SourceKind::ExampleMri && c == 1 && e.data->label_mapping.empty()) name = "brain";
        if (source == data::SourceKind::SyntheticCt && e.data->label_mapping.empty() &&
            c < static_cast<std::int64_t>(phantom_label_names().size())) {
            name = phantom_label_names()[static_cast<std::size_t>(c)];
        }
        if (source == data::SourceKind::FakeImages || source == data::SourceKind::TFRecord) name = "class " + std::to_string(c);
        names.push_back(name);
    }
    return names;
}

// [K, spatial…] logits → [1, K, spatial…]; labels [spatial…] → [1, spatial…].
Tensor with_batch_axis(const Tensor& tensor) {
    Shape shape{1};
    shape.insert(shape.end(), tensor.shape().begin(), tensor.shape().end());
    return tensor.contiguous().reshape(shape);
}

// Argmax over the classes of [K, spatial…] logits: i32 [spatial…] (ties to the lowest class).
Tensor argmax_labels(const Tensor& logits) {
    const Tensor dense = logits.contiguous();
    const std::int64_t classes = dense.dim(0);
    const std::int64_t voxels = dense.num_elements() / classes;
    Shape shape(dense.shape().begin() + 1, dense.shape().end());
    Tensor labels = Tensor::empty(shape, DType::I32);
    const float* in = dense.data<float>();
    std::int32_t* out = labels.data<std::int32_t>();
    for (std::int64_t v = 0; v < voxels; ++v) {
        std::int32_t best = 0;
        for (std::int64_t c = 1; c < classes; ++c) {
            if (in[c * voxels + v] > in[best * voxels + v]) best = static_cast<std::int32_t>(c);
        }
        out[v] = best;
    }
    return labels;
}

// A normalised image [C, H, W] rescaled to [0, 1] over all its channels together (colours keep their
// balance), for writing as a picture.
Tensor display_image(const Tensor& image) {
    Tensor shown = image.contiguous().clone();
    float* values = shown.data<float>();
    const auto [low, high] = std::minmax_element(values, values + shown.num_elements());
    const float lowest = *low, range = *high - *low;
    for (std::int64_t i = 0; i < shown.num_elements(); ++i) values[i] = range > 0 ? (values[i] - lowest) / range : 0.0f;
    return shown;
}

std::string safe_file_name(std::string name) {
    for (char& c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
        if (!ok) c = '_';
    }
    return name;
}

// "2 replicas × input_partition_dims [1, 2, 2, 1]", as the planner writes layouts.
std::string layout_description(const experiment::Experiment& e) {
    std::string dims = "[1";
    for (std::int64_t pieces : experiment::spatial_pieces(e)) dims += ", " + std::to_string(pieces);
    dims += ", 1]";
    const std::int64_t replicas = e.partition.num_replicas;
    return (replicas > 1 ? std::to_string(replicas) + " replicas × " : std::string()) + "input_partition_dims " + dims;
}

// summary.json: the end of a session in one file, for scripts and the studio's run list.
void write_summary(const fs::path& path, const RunSummary& s) {
    json::Json eval = nullptr;
    if (s.has_eval) {
        json::Json classes = json::Json::object();
        for (const ClassRecord& c : s.last_eval.classes) {
            if (c.is_present) classes[c.name] = {{"dice", c.dice}, {"iou", c.iou}};
        }
        if (s.last_eval.is_detection) {
            const DetectionEvalRecord& d = s.last_eval.detection;
            for (const DetectionClassRecord& c : d.classes) {
                if (c.ap >= 0) classes[c.name] = {{"ap", c.ap}, {"ap50", c.ap50}, {"ap75", c.ap75}, {"recall", c.recall}};
            }
            eval = {{"step", s.last_eval.step}, {"loss", s.last_eval.loss}, {"ap", d.ap},       {"ap50", d.ap50},
                    {"ap75", d.ap75},           {"ar100", d.ar100},         {"classes", classes}};
        } else {
            eval = {{"step", s.last_eval.step}, {"loss", s.last_eval.loss}, {"mean_dice", s.last_eval.mean_dice},
                    {"mean_iou", s.last_eval.mean_iou}, {"accuracy", s.last_eval.accuracy}, {"classes", classes}};
        }
    }
    const json::Json root = {{"first_step", s.first_step},
                             {"last_step", s.last_step},
                             {"stopped", s.stopped},
                             {"final_loss", s.final_loss},
                             {"mean_host_step_seconds", s.mean_host_step_seconds},
                             {"mean_predicted_step_seconds", s.mean_predicted_step_seconds},
                             {"core_peak_bytes", s.core_peak_bytes},
                             {"wall_seconds", s.wall_seconds},
                             {"last_eval", eval}};
    const std::string text = root.dump(2) + "\n";
    io::write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())));
}

}  // namespace

std::int64_t estimate_host_bytes(const experiment::Experiment& e) {
    const graph::Graph model = experiment::build_model(e, experiment::replica_input_shape(e));
    const partition::TilingPlan plan(model, experiment::tile_grid(e));
    const std::int64_t slots = experiment::optimizer_slots(e);
    // The device model keeps what backward reads; the simulated cores also hold activation gradients,
    // and compute in f32: the f32 estimate of each core, plus its activations again scaled by the share
    // of gradient memory left when gradients share an arena (graph/buffer_plan.hpp; the whole model's
    // packing stands in for each tile's).
    const graph::ArenaPlan gradients = graph::plan_gradient_memory(model);
    const double gradient_share =
        gradients.unshared_bytes > 0 ? static_cast<double>(gradients.bytes) / static_cast<double>(gradients.unshared_bytes) : 1.0;
    std::int64_t total = 0;
    for (std::int64_t core = 0; core < plan.num_cores(); ++core) {
        const cost::CoreMemory memory = cost::estimate_core_memory(model, plan, core, graph::Precision::F32, slots);
        total += memory.total() + static_cast<std::int64_t>(static_cast<double>(memory.saved_activations) * gradient_share);
    }
    return total * e.partition.num_replicas;
}

void check_fits_host(const experiment::Experiment& e) {
    const std::int64_t needed = estimate_host_bytes(e);
    const auto budget = static_cast<std::int64_t>(host_memory_budget_bytes());
    TESSERA_CHECK(needed <= budget,
                  e.origin << ": training this experiment on the simulated cores needs about " << format_gib(needed)
                           << " of this machine's memory (input " << shape_to_string(experiment::global_input_shape(e)) << " on "
                           << e.partition.num_cores() << " core(s)), more than the " << format_gib(budget)
                           << " a run may use here. Train a smaller input (input.size) or batch, plan it instead (tessera-cli plan), "
                              "or raise TESSERA_HOST_MEMORY on a machine with more memory.");
}

std::optional<std::string> emulated_bf16_note(graph::Precision precision) {
    if (precision != graph::Precision::BF16 || ops::has_native_bf16()) return std::nullopt;
    return std::string("this CPU has no bf16 dot products (AVX512-BF16 or AMX): the bf16 layers run on f32 kernels with their values and "
                       "gradients rounded to bfloat16 — a bf16 run's numerics, a little slower than f32 for the rounding (oneDNN's bf16 "
                       "kernels would convert every value in software here, slower still); set \"precision\": \"f32\" to train faster on this host");
}

std::optional<std::string> host_bf16_note(const cost::Device& host, graph::Precision precision, int spatial_rank) {
    if (precision != graph::Precision::BF16) return std::nullopt;
    const auto found = host.measured.find("conv" + std::to_string(spatial_rank) + "d.bf16_ratio.fwd");
    if (found == host.measured.end() || !(found->second > 0) || found->second >= 0.95) return std::nullopt;
    char ratio[16];
    std::snprintf(ratio, sizeof ratio, "%.2f", found->second);
    return std::string("bf16 convolutions run at ") + ratio + "× the speed of f32 ones on this CPU (measured by tessera-cli calibrate), " +
           "so the simulated cores train slower in bf16 than in f32 here; the experiment's precision still sets the numerics and the device prediction — " +
           "set \"precision\": \"f32\" to train faster on this host";
}

fs::path default_model_dir(const experiment::Experiment& e) {
    if (!e.training.model_dir.empty()) return e.training.model_dir;
    std::string stem = fs::path(e.origin).stem().string();
    if (stem.empty()) stem = "experiment";
    return fs::path("runs") / stem;
}

struct TrainingRun::Impl {
    experiment::Experiment experiment;
    RunOptions options;
    std::unique_ptr<data::Dataset> dataset;
    std::unique_ptr<mesh::CoreMesh> mesh;
    std::unique_ptr<ModelDir> model_dir;
    cost::Device device;
    double predicted_step_seconds = 0;
    std::int64_t total_steps = 0;
    std::vector<std::string> classes;
    bool checkpoint_loaded = false;
    bool has_checkpoint = false;
    std::vector<std::string> notes;

    std::unique_ptr<detection::Detector> detector;  // a RetinaNet's anchors and loss, for evaluation

    // ---- the mesh's collective calls: on a run spread over MPI, the other ranks are told first ----
    bool spread() const { return options.transport && options.transport->num_ranks() > 1; }
    void command(MeshCommand what, const std::function<void(mesh::ByteWriter&)>& arguments = {}) {
        if (!spread()) return;
        mesh::ByteWriter out;
        out.put(what);
        if (arguments) arguments(out);
        mesh::broadcast_message(*options.transport, out.buffer(), 0);
    }
    // A batch goes to the other ranks as their cores' tiles (CoreMesh::send_tiles), after the command.
    void send_tiles(const Tensor& images, const Tensor* labels) {
        if (spread()) mesh->send_tiles(images, labels);
    }
    train::StepResult mesh_train_step(const Tensor& images, const Tensor& labels) {
        command(MeshCommand::TrainStep);
        send_tiles(images, &labels);
        return mesh->train_step(images, labels);
    }
    train::EvalResult mesh_evaluate(const Tensor& images, const Tensor& labels) {
        command(MeshCommand::Evaluate);
        send_tiles(images, nullptr);  // the loss and scores are rank 0's
        return mesh->evaluate(images, labels);
    }
    train::StepResult mesh_train_step(const Tensor& images, std::span<const detection::PaddedGroundTruth> truth) {
        command(MeshCommand::TrainDetectionStep, [&](mesh::ByteWriter& out) { put_ground_truth(out, truth); });
        send_tiles(images, nullptr);
        return mesh->train_step(images, truth);
    }
    std::vector<Tensor> mesh_predict_outputs(const Tensor& images) {
        command(MeshCommand::PredictOutputs);
        send_tiles(images, nullptr);
        return mesh->predict_outputs(images);
    }
    double mesh_detection_loss(std::span<const detection::PaddedGroundTruth> truth) {
        command(MeshCommand::DetectionLoss, [&](mesh::ByteWriter& out) { put_ground_truth(out, truth); });
        return mesh->detection_loss(truth);
    }
    std::vector<mesh::MemoryLedger> mesh_memory() {
        command(MeshCommand::Memory);
        return mesh->memory();
    }
    std::vector<train::NamedTensor> mesh_weights() {
        command(MeshCommand::Weights);
        return mesh->weights();
    }
    std::vector<train::NamedTensor> mesh_training_state() {
        command(MeshCommand::TrainingState);
        return mesh->training_state();
    }
    void mesh_load_checkpoint(const std::vector<train::NamedTensor>& weights, const std::vector<train::NamedTensor>& state) {
        command(MeshCommand::LoadCheckpoint, [&](mesh::ByteWriter& out) {
            put_entries(out, weights);
            put_entries(out, state);
        });
        mesh->load_checkpoint(weights, state);
    }

    bool is_segmentation() const { return experiment.model.kind == experiment::ModelKind::UNet; }
    bool is_detection() const { return experiment.model.kind == experiment::ModelKind::RetinaNet; }

    // A detector's held-out images, a global batch at a time on the cores: the heads' outputs, their
    // loss against the padded ground truth, detections after post-processing (on the host, as the seed
    // does), then COCO scores over all images. Writes each image once (PNG) and this evaluation's boxes
    // (predictions/detections_step_<N>.json) when the options ask for predictions.
    EvalRecord evaluate_detection(std::int64_t step, std::int64_t count, Clock::time_point start) {
        EvalRecord record;
        record.step = step;
        record.is_detection = true;
        const Shape batch_shape = experiment::global_input_shape(experiment);
        const std::size_t num_levels = detector->num_levels();
        const data::DataConfig& data_config = *experiment.data;
        std::vector<detection::EvaluationImage> evaluated;
        std::vector<data::Example> examples;
        double loss_sum = 0;
        for (std::int64_t first = 0; first < count; first += batch_shape[0]) {
            const std::int64_t n = std::min(batch_shape[0], count - first);
            // The last batch is padded with blank images (the cores' static shape); their outputs are dropped.
            Tensor images = Tensor::zeros(batch_shape, DType::F32);
            std::vector<detection::PaddedGroundTruth> ground_truth;
            for (std::int64_t i = 0; i < batch_shape[0]; ++i) {
                std::vector<detection::LabeledBox> objects;
                if (i < n) {
                    data::Example example = dataset->eval_example(first + i);
                    std::vector<std::int64_t> begin(batch_shape.size(), 0), extent(batch_shape.begin(), batch_shape.end());
                    begin[0] = i;
                    extent[0] = 1;
                    images.view_box(begin, extent).copy_from(with_batch_axis(example.image));
                    objects = example.objects;
                    examples.push_back(std::move(example));
                }
                ground_truth.push_back(data::pad_sample_ground_truth(
                    objects, {.max_number_of_boxes = data_config.max_number_of_boxes, .excess_boxes = data_config.excess_boxes},
                    i < n ? examples.back().name : "padding"));
            }
            const std::vector<Tensor> outputs = mesh_predict_outputs(images);
            loss_sum += mesh_detection_loss(ground_truth) * static_cast<double>(n);
            const std::vector<Tensor> class_outputs(outputs.begin(), outputs.begin() + static_cast<std::ptrdiff_t>(num_levels));
            const std::vector<Tensor> box_outputs(outputs.begin() + static_cast<std::ptrdiff_t>(num_levels), outputs.end());
            std::vector<std::vector<detection::ScoredBox>> detections =
                detection::postprocess_detections(class_outputs, box_outputs, detector->anchors(), experiment.detection.postprocess);
            for (std::int64_t i = 0; i < n; ++i) {
                evaluated.push_back({examples[static_cast<std::size_t>(first + i)].objects, std::move(detections[static_cast<std::size_t>(i)])});
            }
        }
        const auto num_classes = static_cast<std::int32_t>(experiment.model.num_classes);
        detection::CocoEvaluationOptions coco_options;
        coco_options.max_detections_per_image = experiment.detection.postprocess.max_detections;
        const detection::CocoEvaluation coco = detection::evaluate_coco(evaluated, num_classes, coco_options);
        DetectionEvalRecord& d = record.detection;
        d.ap = coco.ap;
        d.ap50 = coco.ap50;
        d.ap75 = coco.ap75;
        d.ar100 = coco.ar100;
        d.ap_small = coco.ap_small;
        d.ap_medium = coco.ap_medium;
        d.ap_large = coco.ap_large;
        for (const detection::CocoClassResult& c : coco.per_class) {
            DetectionClassRecord cls;
            cls.name = static_cast<std::size_t>(c.class_id) < classes.size() ? classes[static_cast<std::size_t>(c.class_id)]
                                                                             : "class " + std::to_string(c.class_id);
            cls.num_ground_truth = c.num_ground_truth;
            cls.ap = c.ap;
            cls.ap50 = c.ap50;
            cls.ap75 = c.ap75;
            cls.recall = c.recall;
            cls.precision_at_iou_50 = c.precision_at_iou_50;
            d.classes.push_back(std::move(cls));
        }
        json::Json images_json = json::Json::array();
        const fs::path folder = model_dir->path() / "predictions";
        if (options.write_predictions) fs::create_directories(folder);
        for (std::size_t i = 0; i < evaluated.size(); ++i) {
            const detection::EvaluationImage& image = evaluated[i];
            const std::vector<detection::DetectionMatch> matches =
                detection::match_detections(image, 0.5, experiment.detection.postprocess.max_detections);
            d.num_ground_truth += static_cast<std::int64_t>(image.ground_truth.size());
            d.num_detections += static_cast<std::int64_t>(image.detections.size());
            std::vector<bool> found(image.ground_truth.size(), false);
            json::Json detections_json = json::Json::array();
            for (std::size_t k = 0; k < image.detections.size(); ++k) {
                const detection::ScoredBox& box = image.detections[k];
                const bool matched = matches[k].ground_truth >= 0;
                if (matched) found[static_cast<std::size_t>(matches[k].ground_truth)] = true;
                d.num_true_positives += matched ? 1 : 0;
                detections_json.push_back({{"box", {box.box.x_min, box.box.y_min, box.box.x_max, box.box.y_max}},
                                           {"class", box.class_id},
                                           {"score", box.score},
                                           {"ground_truth", matches[k].ground_truth},
                                           {"iou", matches[k].iou}});
            }
            json::Json truth_json = json::Json::array();
            for (std::size_t g = 0; g < image.ground_truth.size(); ++g) {
                const detection::LabeledBox& box = image.ground_truth[g];
                truth_json.push_back({{"box", {box.box.x_min, box.box.y_min, box.box.x_max, box.box.y_max}},
                                      {"class", box.class_id},
                                      {"found", static_cast<bool>(found[g])}});
            }
            const data::Example& example = examples[i];
            const std::string stem = safe_file_name(example.name);
            if (options.write_predictions) {
                const fs::path image_file = folder / (stem + "_image.png");
                if (!fs::exists(image_file)) write_color_png(display_image(example.image), image_file);
            }
            images_json.push_back({{"name", example.name},
                                   {"image", stem + "_image.png"},
                                   {"width", example.image.dim(2)},
                                   {"height", example.image.dim(1)},
                                   {"ground_truth", truth_json},
                                   {"detections", detections_json}});
        }
        if (options.write_predictions) {
            const json::Json document = {{"step", step},
                                         {"classes", classes},
                                         {"match_iou_threshold", 0.5},
                                         {"score_threshold", experiment.detection.postprocess.score_threshold},
                                         {"images", images_json}};
            d.detections_file = folder / ("detections_step_" + std::to_string(step) + ".json");
            const std::string text = document.dump(1) + "\n";
            io::write_file_atomically(d.detections_file, std::as_bytes(std::span(text.data(), text.size())));
        }
        record.loss = loss_sum / static_cast<double>(count);
        record.num_examples = count;
        record.seconds = seconds_since(start);
        record.wall_time = unix_time();
        return record;
    }

    // This host's predicted step, when `tessera-cli calibrate` has written a host preset for as many
    // threads as the run uses: the plan's layers profiled with the cores' kernels, the rest modelled.
    // A missing preset means no host prediction; a broken one is a note, not a failed run.
    void predict_on_host(RunStart& start) {
        const fs::path preset = cost::devices_directory() / "host.json";
        std::error_code error;
        if (!fs::exists(preset, error)) return;
        try {
            const cost::Device host = cost::load_device_file(preset);
            const int spatial_rank = static_cast<int>(mesh->model().node(mesh->model().input_node()).output_shape.size()) - 2;
            if (const auto bf16 = host_bf16_note(host, experiment.precision, spatial_rank)) notes.push_back(*bf16);
            const auto threads = static_cast<int>(host.measured.count("threads") ? host.measured.at("threads") : 0);
            if (threads != options.host_threads) {
                notes.push_back("no prediction for this host: its preset (" + preset.string() + ") was calibrated for " +
                                std::to_string(threads) + " threads, the run uses " + std::to_string(options.host_threads) +
                                " (tessera-cli calibrate --threads " + std::to_string(options.host_threads) + ")");
                return;
            }
            // Spread over MPI ranks: every rank's threads run kernels side by side (up to this host's cores,
            // when every rank runs here), and the network between the ranks is the preset's.
            std::optional<cost::SimulationOptions::RankSpread> spread_over;
            int side_by_side = threads;
            if (spread()) {
                const std::vector<std::string>& hosts = mesh->rank_hosts();
                const bool one_host = std::all_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return h == hosts.front(); });
                const int host_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
                spread_over = cost::SimulationOptions::RankSpread{options.transport->num_ranks(), one_host ? host_cores : 0,
                                                                   mesh->config().reduction == mesh::ReductionOrder::Fast};
                if (one_host) side_by_side = std::min(host_cores, options.transport->num_ranks() * threads);
                if (!host.measured.count("cluster_latency_us")) {
                    notes.push_back("no prediction for this host spread over " + std::to_string(options.transport->num_ranks()) +
                                    " MPI ranks: its preset (" + preset.string() +
                                    ") has no network figures (mpirun -np 2 tessera-cli calibrate --network)");
                    return;
                }
            }
            const mesh::ProfileOptions profile{.precision = experiment.precision,
                                                .repeats = 2,
                                                .threads = side_by_side,
                                                .tasks = mesh->num_cores(),
                                                .max_tasks = std::max<std::int64_t>(2 * side_by_side, spread() ? mesh->num_cores() : 0)};
            // The profile's executors, each about one simulated core's memory, live beside the mesh's:
            // what the compiled cores hold, measured (the estimate undercounts the kernels' workspace).
            std::int64_t run_bytes = 0;
            for (const mesh::MemoryLedger& ledger : mesh_memory()) run_bytes += ledger.peak();
            const std::int64_t profile_bytes =
                run_bytes / mesh->num_cores() * mesh::profiled_executors(profile, mesh->cores_per_replica());
            const auto budget = static_cast<std::int64_t>(host_memory_budget_bytes());
            if (run_bytes + profile_bytes > budget) {
                notes.push_back("no prediction for this host: profiling the layers would need " + format_gib(profile_bytes) +
                                " beside the run, over the " + format_gib(budget) + " a run may use here");
                return;
            }
            cost::SimulationOptions simulation;
            simulation.precision = experiment.precision;
            simulation.optimizer_slots = experiment::optimizer_slots(experiment);
            simulation.record_timeline = false;
            simulation.measured_layers =
                std::make_shared<cost::MeasuredLayers>(mesh::profile_layers(mesh->model(), mesh->plan(), profile));
            simulation.spread = spread_over;
            start.predicted_host_step_seconds =
                cost::predict_host_step(mesh->model(), mesh->plan(), mesh->num_replicas(), cost::CostModel(host), simulation).step_seconds;
            const auto checked = host.measured.find("check_rms_error_percent");
            if (checked != host.measured.end()) {
                start.host_prediction_uncertainty_seconds = start.predicted_host_step_seconds * checked->second / 100.0;
            }
        } catch (const Error& failure) {
            notes.push_back("no prediction for this host: " + std::string(failure.what()));
        }
    }

    // Loads the newest checkpoint that verifies into the cores once; returns the completed steps.
    // `need_weights`: evaluation and prediction, which mean nothing on random weights.
    std::int64_t restore(bool need_weights = false) {
        if (!checkpoint_loaded) {
            checkpoint_loaded = true;
            std::vector<std::string> skipped;
            const std::optional<Checkpoint> checkpoint = model_dir->load_newest_verified(skipped);
            for (const std::string& line : skipped) notes.push_back("skipped the checkpoint of " + line);
            if (checkpoint) {
                try {
                    mesh_load_checkpoint(checkpoint->weights, checkpoint->state);
                } catch (const Error& error) {
                    TESSERA_REJECT("cannot resume from " << checkpoint->info.weights.string() << ": " << error.what());
                }
                has_checkpoint = true;
                if (!skipped.empty()) notes.push_back("resumed from the checkpoint of step " + std::to_string(checkpoint->info.step));
            }
        }
        TESSERA_CHECK(has_checkpoint || !need_weights || options.allow_random_weights,
                      "the model_dir '" << model_dir->path().string()
                                        << "' holds no checkpoint, so there are no trained weights to use: train first (tessera-cli train "
                                        << experiment.origin << "), name the model_dir of a trained run (--model-dir), or pass "
                                                                "--random-weights for a smoke test");
        return mesh->step();
    }

    // Logits [B, K, window…] for B ≤ global batch windows [B, C, window…]: the batch is padded to the
    // cores' static shape (as TPU input pipelines pad the last batch) and the padding dropped.
    Tensor predict_windows(const Tensor& windows) {
        const Shape batch_shape = experiment::global_input_shape(experiment);
        const std::int64_t count = windows.dim(0);
        TESSERA_ASSERT(count <= batch_shape[0], "more windows than the global batch");
        Tensor images = Tensor::zeros(batch_shape, DType::F32);
        std::vector<std::int64_t> begin(batch_shape.size(), 0), extent(batch_shape.begin(), batch_shape.end());
        extent[0] = count;
        images.view_box(begin, extent).copy_from(windows);
        Shape label_shape{batch_shape[0]};
        if (is_segmentation()) label_shape.insert(label_shape.end(), batch_shape.begin() + 2, batch_shape.end());
        const Tensor labels = Tensor::zeros(label_shape, DType::I32);
        const train::EvalResult result = mesh_evaluate(images, labels);
        std::vector<std::int64_t> out_begin(result.logits.rank(), 0), out_extent(result.logits.shape().begin(), result.logits.shape().end());
        out_extent[0] = count;
        return result.logits.view_box(out_begin, out_extent).clone();
    }

    data::SlidingWindowOptions window_options() const {
        data::SlidingWindowOptions window;
        window.window = experiment.size;
        window.overlap = experiment.training.eval_overlap;
        window.window_batch = experiment.global_batch;
        window.blend = experiment.training.eval_blend;
        return window;
    }

    Tensor sliding_window(const Tensor& image) {
        return data::sliding_window_predict(image, window_options(), [this](const Tensor& windows) { return predict_windows(windows); });
    }

    // predict() for a volume too large to read whole: one pass for the normalisation statistics, then
    // slab by slab, the labels written as each slab is finished (HDF5 or uncompressed NIfTI).
    fs::path predict_by_region(const VolumeRegionReader& reader, const fs::path& input, const fs::path& output_dir) {
        const ImageGeometry& grid = reader.geometry();
        TESSERA_CHECK(experiment.size.size() == 3 && !grid.is_2d(),
                      input.string() << " (" << describe(grid) << ") is too large to read whole; predicting it slab by slab needs a "
                                     << "volume and a 3D model");
        const data::DataConfig& config = *experiment.data;
        const std::int64_t plane = grid.size[0] * grid.size[1];
        data::RunningMoments moments;
        if (config.normalization == data::Normalization::ZScore) {
            // Blocks 64 slices deep and as many whole rows as fit 8 Mi voxels (the training scan's): HDF5's 64³
            // chunks are then read once each, not in thin layers through a cache that cannot hold a layer.
            const std::int64_t depth = std::min<std::int64_t>(grid.size[2], 64);
            std::int64_t band = std::max<std::int64_t>(1, (std::int64_t{8} << 20) / (depth * grid.size[0]));
            if (band >= 64) band -= band % 64;
            band = std::min(band, grid.size[1]);
            std::vector<float> block(static_cast<std::size_t>(depth * band * grid.size[0]));
            for (std::int64_t k = 0; k < grid.size[2]; k += depth) {
                for (std::int64_t j = 0; j < grid.size[1]; j += band) {
                    const VoxelBox box{{0, j, k}, {grid.size[0], std::min(band, grid.size[1] - j), std::min(depth, grid.size[2] - k)}};
                    reader.read(box, block.data());
                    for (std::int64_t v = 0; v < box.num_voxels(); ++v) {
                        if (std::isfinite(block[static_cast<std::size_t>(v)])) [[likely]] continue;
                        TESSERA_CHECK(config.non_finite == data::NonFinitePolicy::Zero,
                                      input.string() << " holds NaN or infinite voxels (the first at i, j, k = " << v % grid.size[0] << ", "
                                                     << j + v / grid.size[0] % box.extent[1] << ", " << k + v / (grid.size[0] * box.extent[1])
                                                     << "); a prediction there would be meaningless. Clean the image, or set data.non_finite "
                                                        "to \"zero\" to read them as 0.");
                        block[static_cast<std::size_t>(v)] = 0.0f;
                    }
                    moments.add_block(block.data(), box.num_voxels());
                }
            }
        }
        const fs::path output = is_hdf5_name(input)
                                    ? fs::path((output_dir / (safe_file_name(parse_hdf5_name(input.string())->file.stem().string()) +
                                                               "_prediction.h5"))
                                                   .string() +
                                               ":/volumes/labels/prediction")
                                    : output_dir / (data::volume_file_stem(input) + "_prediction.nii");
        const std::unique_ptr<LabelVolumeWriter> writer =
            create_label_volume_writer(output, grid, static_cast<std::int32_t>(experiment.model.num_classes - 1));
        data::sliding_window_predict_streamed(
            Shape{grid.size[2], grid.size[1], grid.size[0]}, 1, window_options(),
            [&](std::int64_t first, std::int64_t count, float* out) {
                const VoxelBox box{{0, 0, first}, {grid.size[0], grid.size[1], count}};
                reader.read(box, out);
                for (std::int64_t v = 0; v < box.num_voxels(); ++v) {
                    const float value = std::isfinite(out[v]) ? out[v] : 0.0f;
                    TESSERA_CHECK(std::isfinite(out[v]) || config.non_finite == data::NonFinitePolicy::Zero,
                                  input.string() << " holds NaN or infinite voxels in slice " << first + v / plane
                                                 << "; set data.non_finite to \"zero\" to read them as 0.");
                    out[v] = data::normalized_value(value, config.normalization, moments.mean(), moments.scale(), config.window_low,
                                                    config.window_high);
                }
            },
            [this](const Tensor& windows) { return predict_windows(windows); },
            [&](std::int64_t first, const Tensor& labels) { writer->write_slices(first, labels); });
        writer->finish();
        return output;
    }

    EvalRecord evaluate(std::int64_t step) {
        const auto start = Clock::now();
        EvalRecord record;
        record.step = step;
        std::int64_t count = dataset->num_eval_examples();
        if (experiment.training.max_eval_examples > 0) count = std::min(count, experiment.training.max_eval_examples);
        TESSERA_CHECK(count > 0, experiment.origin << ": the dataset holds no example out for evaluation; raise data.holdout_fraction "
                                                      "or data.num_eval_images");
        if (is_detection()) return evaluate_detection(step, count, start);
        loss::ConfusionMatrix confusion;
        double nll_sum = 0, weight_sum = 0;
        if (is_segmentation()) {
            for (std::int64_t i = 0; i < count; ++i) {
                const data::Example example = dataset->eval_example(i);
                const Tensor logits = sliding_window(example.image);  // [K, spatial…]
                const Tensor batch_logits = with_batch_axis(logits);
                const Tensor batch_labels = with_batch_axis(example.labels);
                confusion += loss::confusion_matrix_from_logits(batch_logits, batch_labels);
                const loss::CrossEntropyPartial partial = loss::softmax_cross_entropy_partial(batch_logits, batch_labels);
                nll_sum += partial.weighted_nll_sum;
                weight_sum += partial.weight_sum;
                if (options.write_predictions) {
                    const fs::path folder = model_dir->path() / "predictions";
                    fs::create_directories(folder);
                    LabelMap prediction = make_label_map(example.geometry);
                    prediction.labels.copy_from(argmax_labels(logits).reshape(prediction.labels.shape()));
                    const std::string stem = safe_file_name(example.name);
                    const fs::path file = folder / (stem + ".nii.gz");
                    write_label_map(prediction, file);
                    record.predictions.push_back(file);
                    // The held-out image (first channel, normalised) and its truth, once: what the
                    // prediction is overlaid on.
                    const fs::path image_file = folder / (stem + "_image.nii.gz");
                    const fs::path truth_file = folder / (stem + "_truth.nii.gz");
                    if (!fs::exists(image_file) || !fs::exists(truth_file)) {
                        Volume image = make_volume(example.geometry);
                        const std::int64_t voxels = image.voxels.num_elements();
                        std::copy_n(example.image.contiguous().data<float>(), voxels, image.voxels.data<float>());
                        image.source_scalar_type = "float32";
                        write_volume(image, image_file);
                        LabelMap truth = make_label_map(example.geometry);
                        truth.labels.copy_from(example.labels.contiguous().reshape(truth.labels.shape()));
                        write_label_map(truth, truth_file);
                    }
                    record.images.push_back(image_file);
                    record.truths.push_back(truth_file);
                }
            }
        } else {
            // Classification: whole images, a global batch at a time.
            const Shape batch_shape = experiment::global_input_shape(experiment);
            for (std::int64_t first = 0; first < count; first += batch_shape[0]) {
                const std::int64_t n = std::min(batch_shape[0], count - first);
                Shape window_shape = batch_shape;
                window_shape[0] = n;
                Tensor images = Tensor::empty(window_shape, DType::F32);
                Tensor labels = Tensor::empty({n}, DType::I32);
                for (std::int64_t i = 0; i < n; ++i) {
                    const data::Example example = dataset->eval_example(first + i);
                    std::vector<std::int64_t> begin(window_shape.size(), 0), extent(window_shape.begin(), window_shape.end());
                    begin[0] = i;
                    extent[0] = 1;
                    images.view_box(begin, extent).copy_from(with_batch_axis(example.image));
                    labels.data<std::int32_t>()[i] = example.labels.contiguous().data<std::int32_t>()[0];
                }
                const Tensor logits = predict_windows(images);
                confusion += loss::confusion_matrix_from_logits(logits, labels);
                const loss::CrossEntropyPartial partial = loss::softmax_cross_entropy_partial(logits, labels);
                nll_sum += partial.weighted_nll_sum;
                weight_sum += partial.weight_sum;
            }
        }
        loss::ScoreOptions score_options;
        score_options.exclude_background = experiment.training.dice_excludes_background;
        const loss::SegmentationScores scores = loss::segmentation_scores(confusion, score_options);
        record.loss = weight_sum > 0 ? nll_sum / weight_sum : 0;
        record.mean_dice = scores.mean_dice;
        record.mean_iou = scores.mean_iou;
        record.accuracy = scores.accuracy;
        if (is_segmentation()) {
            for (std::size_t c = 0; c < scores.classes.size(); ++c) {
                record.classes.push_back({c < classes.size() ? classes[c] : "class " + std::to_string(c), scores.classes[c].is_present,
                                          scores.classes[c].dice, scores.classes[c].iou});
            }
        }
        record.num_examples = count;
        record.seconds = seconds_since(start);
        record.wall_time = unix_time();
        return record;
    }

    // The last step's events on every core, with the model's layer names.
    StepTrace step_trace(std::int64_t step) {
        StepTrace trace;
        trace.step = step;
        trace.num_cores = mesh->num_cores();
        trace.events = mesh->events();
        for (const graph::Node& node : mesh->model().nodes()) trace.layer_names.push_back(node.name);
        return trace;
    }

    CheckpointRecord checkpoint() {
        const auto start = Clock::now();
        std::vector<train::NamedTensor> state = mesh_training_state();
        state.push_back(train::make_counter_entry("run/next_batch", mesh->step()));
        const std::map<std::string, std::string> metadata = {
            {"experiment", experiment.name.empty() ? experiment.origin : experiment.name},
            {"data_seed", std::to_string(experiment.data->seed)},
            {"seed", std::to_string(experiment.training.seed)},
            {"layout", layout_description(experiment)},
        };
        const CheckpointInfo info = model_dir->save(mesh->step(), mesh_weights(), state, metadata, experiment.training.keep_checkpoints);
        has_checkpoint = true;  // the weights in the mesh are now saved ones: evaluate() after train() may use them
        return {info.step, info.weights, seconds_since(start)};
    }
};

TrainingRun::TrainingRun(experiment::Experiment e, RunOptions options) : m_impl(std::make_unique<Impl>()) {
    Impl& impl = *m_impl;
    experiment::check_trainable(e);
    impl.experiment = std::move(e);
    impl.options = std::move(options);
    const experiment::Experiment& x = impl.experiment;
    impl.total_steps = impl.options.steps.value_or(x.training.steps);
    TESSERA_CHECK(impl.total_steps >= 1, x.origin << ": expected at least one training step, got " << impl.total_steps);
    impl.classes = class_names(x);
    impl.device = cost::load_device_preset(x.device);

    impl.dataset = data::make_dataset(*x.data, experiment::global_input_shape(x), x.model.num_classes);
    // The dataset's own names (a detector's categories; what the label files name), where it has them.
    const std::vector<std::string> named = impl.dataset->class_names();
    if (!named.empty() && impl.classes.size() < named.size()) impl.classes.resize(named.size());
    for (std::size_t c = 0; c < named.size(); ++c) {
        if (!named[c].empty()) impl.classes[c] = named[c];
    }
    if (impl.is_detection()) {
        const Shape input = experiment::replica_input_shape(x);
        impl.detector = std::make_unique<detection::Detector>(*experiment::trainer_config(x).detection, input[2], input[3]);
    }

    TESSERA_CHECK(!impl.options.transport || impl.options.transport->rank() == 0,
                  "a run spread over MPI is built on rank 0; the other ranks follow it (follow_training_run)");
    impl.mesh = make_run_mesh(x, impl.options, impl.device);

    cost::SimulationOptions simulation;
    simulation.precision = x.precision;
    simulation.optimizer_slots = experiment::optimizer_slots(x);
    simulation.record_timeline = false;
    impl.predicted_step_seconds =
        cost::predict_step(impl.mesh->model(), impl.mesh->plan(), x.partition.num_replicas, cost::CostModel(impl.device), simulation)
            .step_seconds;

    impl.model_dir = std::make_unique<ModelDir>(impl.options.model_dir.value_or(default_model_dir(x)), impl.options.model_dir_access,
                                                impl.options.command);
    impl.notes = impl.model_dir->notes();
    if (const auto bf16 = emulated_bf16_note(x.precision)) impl.notes.push_back(*bf16);
}

TrainingRun::~TrainingRun() {
    // The other ranks wait for rank 0's next command: the last one lets them finish. A run ending by an
    // error leaves them waiting; the launcher's abort (tessera-cli calls it) ends them.
    if (std::uncaught_exceptions() > 0) return;
    try {
        m_impl->command(MeshCommand::Finish);
    } catch (const std::exception&) {
    }
}

void follow_training_run(const experiment::Experiment& x, const RunOptions& options) {
    TESSERA_CHECK(options.transport && options.transport->rank() > 0, "follow_training_run runs on the ranks other than 0 of an MPI run");
    experiment::check_trainable(x);
    const cost::Device device = cost::load_device_preset(x.device);
    std::unique_ptr<mesh::CoreMesh> cores = make_run_mesh(x, options, device);
    mesh::Transport& transport = *options.transport;
    for (;;) {
        std::vector<std::byte> message;
        mesh::broadcast_message(transport, message, 0);
        mesh::ByteReader in(message);
        switch (in.get<MeshCommand>()) {
            case MeshCommand::TrainStep: cores->train_step(cores->receive_tiles()); break;
            case MeshCommand::Evaluate: cores->evaluate(cores->receive_tiles()); break;
            case MeshCommand::TrainDetectionStep: {
                const std::vector<detection::PaddedGroundTruth> truth = get_ground_truth(in);
                cores->train_step(cores->receive_tiles(), truth);
                break;
            }
            case MeshCommand::PredictOutputs: cores->predict_outputs(cores->receive_tiles()); break;
            case MeshCommand::DetectionLoss: cores->detection_loss(get_ground_truth(in)); break;
            case MeshCommand::Memory: cores->memory(); break;
            case MeshCommand::Weights: cores->weights(); break;
            case MeshCommand::TrainingState: cores->training_state(); break;
            case MeshCommand::LoadCheckpoint: {
                const std::vector<train::NamedTensor> weights = get_entries(in);
                const std::vector<train::NamedTensor> state = get_entries(in);
                cores->load_checkpoint(weights, state);
                break;
            }
            case MeshCommand::Finish: return;
        }
    }
}

RunSummary TrainingRun::train(RunObserver* observer, const std::atomic<bool>* stop) {
    Impl& impl = *m_impl;
    const experiment::Experiment& x = impl.experiment;
    const auto run_start = Clock::now();
    const std::int64_t first_step = impl.restore();
    if (!x.text.empty()) impl.model_dir->write_experiment_text(x.text);
    MetricsLog log(impl.model_dir->path(), first_step);

    RunStart start;
    start.experiment = x.name.empty() ? x.origin : x.name;
    start.model_dir = impl.model_dir->path();
    start.first_step = first_step;
    start.total_steps = impl.total_steps;
    start.resumed = first_step > 0;
    start.layout = layout_description(x);
    start.num_cores = impl.mesh->num_cores();
    start.cores_per_replica = impl.mesh->cores_per_replica();
    start.num_replicas = impl.mesh->num_replicas();
    if (impl.spread()) {
        const mesh::CorePlacement& placement = impl.mesh->placement();
        start.ranks = std::to_string(placement.num_ranks()) + " MPI ranks: ";
        for (int rank = 0; rank < placement.num_ranks(); ++rank) {
            const std::int64_t first = placement.first_core(rank), last = placement.end_core(rank) - 1;
            start.ranks += (rank ? ", " : "") + (first == last ? "core " + std::to_string(first) : "cores " + std::to_string(first) + "–" + std::to_string(last)) +
                           " on " + impl.mesh->rank_hosts()[static_cast<std::size_t>(rank)];
        }
        start.ranks += "; rank 0's halos: " + impl.mesh->transport().halo_topology();
    }
    start.device = impl.device.id;
    start.predicted_step_seconds = impl.predicted_step_seconds;
    impl.predict_on_host(start);
    for (const mesh::MemoryLedger& ledger : impl.mesh_memory()) start.core_memory_bytes.push_back(ledger.peak());
    start.core_capacity_bytes = impl.device.memory_per_core;
    start.host_memory_bytes = impl.mesh->host_bytes();
    start.host_memory_budget_bytes = static_cast<std::int64_t>(host_memory_budget_bytes());
    start.data = impl.dataset->describe();
    start.notes = impl.notes;
    if (impl.dataset->num_eval_examples() == 0) start.notes.push_back("nothing is held out (data.holdout_fraction 0): the run is not evaluated");
    log.write(start);
    if (observer) observer->on_start(start);

    RunSummary summary;
    summary.model_dir = impl.model_dir->path();
    summary.first_step = summary.last_step = first_step;
    summary.core_peak_bytes = start.core_memory_bytes;
    const std::int64_t eval_every = x.training.steps_per_eval;
    // Nothing held out (data.holdout_fraction 0): the run trains and checkpoints without evaluations
    // rather than failing at its last step, before its last checkpoint.
    const bool can_evaluate = impl.dataset->num_eval_examples() > 0;
    const std::int64_t checkpoint_every = x.training.steps_per_checkpoint > 0 ? x.training.steps_per_checkpoint : eval_every;
    std::vector<double> host_seconds;
    std::int64_t last_checkpoint = first_step;

    if (first_step < impl.total_steps) {
        data::Prefetcher batches(*impl.dataset, first_step, impl.options.prefetch_depth);
        for (std::int64_t step = first_step; step < impl.total_steps; ++step) {
            data::Batch batch;
            try {
                batch = batches.next();
            } catch (const Error& error) {
                if (error.is_internal()) throw;
                // A damaged file met mid-run (sources that read records or images when a batch needs them):
                // the steps done since the last checkpoint are saved before the run stops.
                if (step > last_checkpoint) {
                    write_step_trace(impl.model_dir->path() / step_trace_file_name, impl.step_trace(step));
                    const CheckpointRecord saved = impl.checkpoint();
                    last_checkpoint = step;
                    if (observer) observer->on_checkpoint(saved);
                    log.flush();
                }
                const std::string kept =
                    last_checkpoint > 0 ? "the checkpoint of step " + std::to_string(last_checkpoint) + " is kept" : "no step had been done";
                TESSERA_REJECT(error.what() << "\nThe run stopped before step " << step + 1 << " (" << kept
                                            << "): repair or remove what is named above and train again to resume.");
            }
            const auto step_start = Clock::now();
            const train::StepResult result = impl.is_detection() ? impl.mesh_train_step(batch.images, batch.ground_truth)
                                                                 : impl.mesh_train_step(batch.images, batch.labels);
            StepRecord record;
            record.host_seconds = seconds_since(step_start);
            record.step = step + 1;
            record.loss = result.loss;
            record.learning_rate = result.learning_rate;
            record.loss_scale = result.loss_scale;
            record.applied = result.applied;
            record.predicted_seconds = impl.predicted_step_seconds;
            record.images_per_second = static_cast<double>(x.global_batch) / record.host_seconds;
            record.halo_bytes = impl.mesh->summary().halo_bytes;
            for (const mesh::MemoryLedger& ledger : impl.mesh_memory()) record.core_peak_bytes.push_back(ledger.peak());
            record.wall_time = unix_time();
            TESSERA_CHECK(std::isfinite(record.loss),
                          "the loss became " << record.loss << " at step " << record.step
                                             << "; lower the learning rate (schedule.learning_rate) or use loss scaling; the last "
                                                "checkpoint is kept in " << impl.model_dir->path().string());
            host_seconds.push_back(record.host_seconds);
            summary.final_loss = record.loss;
            summary.last_step = record.step;
            summary.core_peak_bytes = record.core_peak_bytes;
            log.write(record);
            if (observer) observer->on_step(record);

            const std::int64_t done = record.step;
            const bool last = done == impl.total_steps;
            const bool stopping = stop && stop->load();
            const bool checkpointing = last || stopping || (checkpoint_every > 0 && done % checkpoint_every == 0);
            // Before the evaluation, whose steps on the same cores replace the events.
            if (checkpointing) write_step_trace(impl.model_dir->path() / step_trace_file_name, impl.step_trace(done));
            if (can_evaluate && (last || (eval_every > 0 && done % eval_every == 0) || (stopping && impl.options.evaluate_when_stopped))) {
                const EvalRecord eval = impl.evaluate(done);
                summary.has_eval = true;
                summary.last_eval = eval;
                log.write(eval);
                if (observer) observer->on_eval(eval);
            }
            if (checkpointing) {
                const CheckpointRecord saved = impl.checkpoint();
                last_checkpoint = done;
                if (observer) observer->on_checkpoint(saved);
            }
            log.flush();
            if (stopping && !last) {
                summary.stopped = true;
                break;
            }
        }
    }
    (void)last_checkpoint;
    if (!host_seconds.empty()) {
        // The first step of a session warms caches and compiles kernels' scratch: left out when there are others.
        const std::size_t skip = host_seconds.size() > 1 ? 1 : 0;
        summary.mean_host_step_seconds =
            std::accumulate(host_seconds.begin() + static_cast<std::ptrdiff_t>(skip), host_seconds.end(), 0.0) /
            static_cast<double>(host_seconds.size() - skip);
    }
    summary.mean_predicted_step_seconds = impl.predicted_step_seconds;
    summary.wall_seconds = seconds_since(run_start);
    write_summary(impl.model_dir->path() / "summary.json", summary);
    if (observer) observer->on_finish(summary);
    return summary;
}

EvalRecord TrainingRun::evaluate(RunObserver* observer) {
    Impl& impl = *m_impl;
    const std::int64_t step = impl.restore(true);
    const EvalRecord record = impl.evaluate(step);
    if (observer) observer->on_eval(record);
    return record;
}

std::vector<fs::path> TrainingRun::predict(const std::vector<fs::path>& inputs, const fs::path& output_dir) {
    Impl& impl = *m_impl;
    TESSERA_CHECK(impl.is_segmentation(), impl.experiment.origin << ": predict writes label volumes, so it needs a segmentation model (a U-Net); "
                                                                   "a detector's boxes on its held-out images come from eval (predictions/detections_step_<N>.json)");
    impl.restore(true);
    TESSERA_CHECK(file_kind(output_dir) == FileKind::Missing || file_kind(output_dir) == FileKind::Folder,
                  "cannot write predictions into '" << output_dir.string() << "': it is " << file_kind_name(file_kind(output_dir))
                                                    << ", not a folder. Name a folder with --out (it is created when missing).");
    std::error_code created;
    fs::create_directories(output_dir, created);
    TESSERA_CHECK(!created, "cannot create the folder '" << output_dir.string() << "' for predictions: " << created.message());
    std::vector<fs::path> written;
    for (const fs::path& input : inputs) {
        const experiment::Experiment& x = impl.experiment;
        // A volume read whole takes 4 bytes a voxel, its K logits 4 K more: too large, it is read and
        // written slab by slab when its format allows.
        if (can_read_by_region(input)) {
            const std::unique_ptr<VolumeRegionReader> reader = open_region_reader(input);
            const double whole_bytes = static_cast<double>(reader->geometry().num_voxels()) * 4.0 * static_cast<double>(1 + x.model.num_classes);
            if (whole_bytes > static_cast<double>(max_volume_bytes())) {
                TESSERA_CHECK(x.channels == 1, input.string() << ": predict reads single-channel images and volumes; this model takes "
                                                              << x.channels << " channels");
                written.push_back(impl.predict_by_region(*reader, input, output_dir));
                continue;
            }
        }
        Volume volume = read_volume(input);
        if (volume.num_non_finite > 0) {
            TESSERA_CHECK(x.data->non_finite == data::NonFinitePolicy::Zero,
                          input.string() << ": " << volume.warnings.back()
                                         << "; a prediction there would be meaningless. Clean the image, or set data.non_finite "
                                            "to \"zero\" to read them as 0.");
            float* values = volume.voxels.data<float>();
            for (std::int64_t index = 0; index < volume.voxels.num_elements(); ++index) {
                if (!std::isfinite(values[index])) values[index] = 0.0f;
            }
        }
        const bool volumetric = x.size.size() == 3;
        TESSERA_CHECK(x.channels == 1, input.string() << ": predict reads single-channel images and volumes; this model takes "
                                                      << x.channels << " channels");
        TESSERA_CHECK(volumetric || volume.geometry.is_2d(),
                      input.string() << " is a volume (" << describe(volume.geometry) << ") but the model is 2D; predict its slices as 2D images");
        // [1, (D,) H, W], normalised as the training data.
        Shape shape{1};
        if (volumetric) shape.push_back(volume.geometry.size[2]);
        shape.insert(shape.end(), {volume.geometry.size[1], volume.geometry.size[0]});
        Tensor image = volume.voxels.clone().reshape(shape);
        data::normalize(image, x.data->normalization, x.data->window_low, x.data->window_high);
        const Tensor logits = impl.sliding_window(image);
        LabelMap prediction = make_label_map(volume.geometry);
        prediction.labels.copy_from(argmax_labels(logits).reshape(prediction.labels.shape()));
        const auto hdf5 = parse_hdf5_name(input.string());
        const std::string stem = hdf5 ? safe_file_name(hdf5->file.stem().string()) : data::volume_file_stem(input);
        const fs::path file = output_dir / (stem + "_prediction.nii.gz");
        write_label_map(prediction, file);
        written.push_back(file);
    }
    return written;
}

std::int64_t TrainingRun::load_checkpoint(bool need_trained_weights) { return m_impl->restore(need_trained_weights); }

const std::vector<std::string>& TrainingRun::notes() const { return m_impl->notes; }
const experiment::Experiment& TrainingRun::experiment() const { return m_impl->experiment; }
const data::Dataset& TrainingRun::dataset() const { return *m_impl->dataset; }
mesh::CoreMesh& TrainingRun::mesh() { return *m_impl->mesh; }
const ModelDir& TrainingRun::model_dir() const { return *m_impl->model_dir; }
std::int64_t TrainingRun::total_steps() const { return m_impl->total_steps; }
double TrainingRun::predicted_step_seconds() const { return m_impl->predicted_step_seconds; }

}  // namespace tessera::run
