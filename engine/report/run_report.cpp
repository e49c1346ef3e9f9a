#include "report/run_report.hpp"

#include "core/error.hpp"
#include "core/user_files.hpp"
#include "experiment/experiment.hpp"
#include "io/atomic_file.hpp"
#include "io/color_image.hpp"
#include "io/label_descriptions.hpp"
#include "io/volume_io.hpp"
#include "partition/partition_spec.hpp"
#include "partition/tiling.hpp"
#include "report/svg_chart.hpp"
#include "run/detections_file.hpp"
#include "run/metrics_log.hpp"
#include "run/step_trace.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <optional>
#include <span>

namespace fs = std::filesystem;

namespace tessera::report {

namespace {

using Rgb = std::array<float, 3>;  // [0, 1]

constexpr int figure_width = 560;           // CSS pixels: the widest an image is shown
constexpr double shown_min_score = 0.5;     // detections drawn in the report's snapshots
const std::array<const char*, 10> core_colors = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                                 "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
std::string fixed(double value, int decimals) {
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
    return text;
}

std::string milliseconds(double seconds) {
    const double ms = seconds * 1e3;
    return fixed(ms, ms >= 100 ? 0 : ms >= 10 ? 1 : 2) + " ms";
}

std::string percent(double fraction) { return fixed(fraction * 100, 1) + " %"; }

std::string h(std::string_view text) { return escape_xml(text); }

std::string utc_now() {
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm utc{};
    gmtime_r(&now, &utc);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", &utc);
    return text;
}

std::string utc_of(double unix_seconds) {
    const auto when = static_cast<std::time_t>(unix_seconds);
    std::tm utc{};
    gmtime_r(&when, &utc);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &utc);
    return text;
}

std::string png_url(const Tensor& rgb) { return "data:image/png;base64," + base64(encode_png(rgb)); }

// What the report is built from.
struct RunFolder {
    fs::path dir;
    run::MetricsHistory history;
    std::string experiment_text;
    std::optional<experiment::Experiment> experiment;
    std::vector<std::string> omissions;

    const run::RunStart* last_start() const { return history.starts.empty() ? nullptr : &history.starts.back(); }
    const run::EvalRecord* last_eval() const { return history.evals.empty() ? nullptr : &history.evals.back(); }
    std::string omit(std::string reason) {
        omissions.push_back(reason);
        return "<p class=\"omitted\">" + h(reason) + "</p>\n";
    }
};

// ---- images ---------------------------------------------------------------------------------------

// Grey levels in [0, 1] of `count` values windowed at their 1st and 99th percentiles (NaN: outside the
// image, shown dark).
std::vector<float> windowed(const std::vector<float>& values) {
    std::vector<float> finite;
    finite.reserve(values.size());
    for (float v : values) {
        if (std::isfinite(v)) finite.push_back(v);
    }
    float low = 0, high = 1;
    if (!finite.empty()) {
        const auto at = [&](double q) {
            const auto index = static_cast<std::size_t>(q * static_cast<double>(finite.size() - 1));
            std::nth_element(finite.begin(), finite.begin() + static_cast<std::ptrdiff_t>(index), finite.end());
            return finite[index];
        };
        low = at(0.01);
        high = at(0.99);
        if (!(high > low)) high = low + 1;
    }
    std::vector<float> grey(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
        grey[i] = std::isfinite(values[i]) ? std::clamp((values[i] - low) / (high - low), 0.0f, 1.0f) : 0.08f;
    }
    return grey;
}

// [1, H, W] grey levels.
Tensor grey_image(const std::vector<float>& grey, std::int64_t height, std::int64_t width) {
    Tensor image = Tensor::zeros({1, height, width}, DType::F32);
    std::copy(grey.begin(), grey.end(), image.data<float>());
    return image;
}

// Overlays are [4, H, W] RGBA, transparent where nothing is painted: drawn over one grey image they
// compress to little, where colour images of noisy slices would not.
Tensor transparent_image(std::int64_t height, std::int64_t width) { return Tensor::zeros({4, height, width}, DType::F32); }

void paint(Tensor& rgba, std::int64_t pixel, const Rgb& color, float alpha) {
    float* out = rgba.data<float>();
    const std::int64_t plane = rgba.dim(1) * rgba.dim(2);
    for (std::int64_t c = 0; c < 3; ++c) out[c * plane + pixel] = color[static_cast<std::size_t>(c)];
    out[3 * plane + pixel] = alpha;
}

Rgb label_color(std::int32_t value, const std::vector<LabelDescription>& descriptions) {
    for (const LabelDescription& d : descriptions) {
        if (d.value == value && d.color) return *d.color;
    }
    return default_label_color(value);
}

// The size an image of width × height pixels is shown at: at most figure_width wide and 420 high,
// enlarged (pixelated) when small.
std::pair<double, double> shown_size(std::int64_t width, std::int64_t height, int max_width = figure_width) {
    const double scale = std::min(static_cast<double>(max_width) / static_cast<double>(width), 420.0 / static_cast<double>(height));
    return {static_cast<double>(width) * scale, static_cast<double>(height) * scale};
}

// ---- the run's folder ----------------------------------------------------------------------------

RunFolder read_folder(const fs::path& model_dir) {
    TESSERA_CHECK(file_kind(model_dir) == FileKind::Folder,
                  "cannot report on '" << model_dir.string() << "': it is " << file_kind_name(file_kind(model_dir))
                                       << ", not a run's model_dir. Name the folder a training run wrote (its model_dir).");
    RunFolder folder;
    folder.dir = fs::absolute(model_dir).lexically_normal();
    folder.history = run::read_metrics(folder.dir);
    TESSERA_CHECK(!folder.history.steps.empty(),
                  folder.dir.string() << " holds no training steps in metrics.jsonl: is it a run's model_dir? Train first "
                                         "(tessera-cli train <experiment> --model-dir "
                                      << model_dir.string() << "), then report.");
    const fs::path experiment_file = folder.dir / "experiment.json";
    if (file_kind(experiment_file) == FileKind::Regular) {
        try {
            folder.experiment_text = read_user_text_file(experiment_file, "experiment");
            folder.experiment = experiment::parse_experiment(folder.experiment_text, experiment_file.string());
        } catch (const Error& error) {
            folder.omit("The run's experiment.json could not be read, so the partition and model are left out: " + std::string(error.what()));
        }
    } else {
        folder.omit("The folder has no experiment.json (a run writes it when it starts), so the partition and model are left out.");
    }
    return folder;
}

// The held-out image a prediction file is for: recorded, or "<stem>_image.nii.gz" beside it.
fs::path eval_file(const run::EvalRecord& eval, std::size_t index, bool truth, const fs::path& model_dir) {
    const std::vector<fs::path>& recorded = truth ? eval.truths : eval.images;
    fs::path path;
    if (index < recorded.size()) {
        path = recorded[index];
    } else if (index < eval.predictions.size()) {
        std::string name = eval.predictions[index].filename().string();
        const std::string suffix = ".nii.gz";
        if (name.ends_with(suffix)) name = name.substr(0, name.size() - suffix.size());
        path = eval.predictions[index].parent_path() / (name + (truth ? "_truth" : "_image") + suffix);
    }
    // A run folder moved since: the same name under its predictions folder.
    if (!path.empty() && !fs::exists(path)) path = model_dir / "predictions" / path.filename();
    return path;
}

fs::path prediction_file(const run::EvalRecord& eval, std::size_t index, const fs::path& model_dir) {
    fs::path path = eval.predictions[index];
    if (!fs::exists(path)) path = model_dir / "predictions" / path.filename();
    return path;
}

// ---- sections -------------------------------------------------------------------------------------

std::string model_description(const experiment::Experiment& x) {
    const experiment::ModelSpec& m = x.model;
    switch (m.kind) {
        case experiment::ModelKind::UNet:
            return std::string(x.size.size() == 3 ? "3D" : "2D") + " U-Net, depth " + std::to_string(m.depth) + ", base width " +
                   std::to_string(m.base_width) + ", " + std::to_string(m.num_classes) + " classes" + (m.batch_norm ? ", batch norm" : "");
        case experiment::ModelKind::ResNet: return "ResNet-" + std::to_string(m.depth) + ", " + std::to_string(m.num_classes) + " classes";
        case experiment::ModelKind::RetinaNet:
            return "RetinaNet, ResNet-" + std::to_string(m.depth) + " backbone, " + std::to_string(m.num_classes) + " classes";
    }
    return "?";
}

std::string row(std::string_view name, std::string_view value) {
    return "<tr><th>" + h(name) + "</th><td>" + h(value) + "</td></tr>\n";
}

std::string overview_section(RunFolder& folder) {
    const run::MetricsHistory& history = folder.history;
    const run::StepRecord& last = history.steps.back();
    std::string out = "<section id=\"overview\"><h2>Overview</h2>\n<table class=\"facts\">\n";
    out += row("model_dir", folder.dir.string());
    if (const run::RunStart* start = folder.last_start()) {
        out += row("experiment", start->experiment);
        out += row("layout", start->layout);
        if (!start->ranks.empty()) out += row("MPI ranks", start->ranks);
        out += row("data", start->data);
        out += row("steps", std::to_string(last.step) + " of " + std::to_string(start->total_steps) + " in " +
                                std::to_string(history.starts.size()) + (history.starts.size() == 1 ? " session" : " sessions"));
    } else {
        out += row("steps", std::to_string(last.step));
    }
    if (folder.experiment) {
        const experiment::Experiment& x = *folder.experiment;
        out += row("model", model_description(x));
        std::string input = std::to_string(x.global_batch) + " × " + std::to_string(x.channels);
        for (std::int64_t extent : x.size) input += " × " + std::to_string(extent);
        out += row("global batch [N, C, (D,) H, W]", input);
        out += row("input_partition_dims", partition::input_partition_dims_to_string(x.partition));
        out += row("precision", std::string(experiment::precision_name(x.precision)));
    }
    out += row("final training loss", fixed(last.loss, 4) + " at step " + std::to_string(last.step));
    if (const run::EvalRecord* eval = folder.last_eval()) {
        out += row("last evaluation", eval->is_detection    ? "AP " + fixed(eval->detection.ap, 3) + ", AP50 " + fixed(eval->detection.ap50, 3)
                                      : eval->classes.empty() ? "accuracy " + fixed(eval->accuracy, 4) + ", macro F1 " + fixed(eval->mean_dice, 4)
                                                              : "mean Dice " + fixed(eval->mean_dice, 4) + ", mean IoU " + fixed(eval->mean_iou, 4) +
                                                                    ", accuracy " + fixed(eval->accuracy, 4));
    }
    out += row("first and last step", utc_of(history.steps.front().wall_time) + " → " + utc_of(last.wall_time));
    out += "</table>\n";
    if (const run::RunStart* start = folder.last_start(); start && !start->notes.empty()) {
        out += "<p>When the last session opened the folder:</p><ul>";
        for (const std::string& note : start->notes) out += "<li>" + h(note) + "</li>";
        out += "</ul>\n";
    }
    return out + "</section>\n";
}

// The image the partition is drawn over: one held-out image cropped about its centre to the replica's
// input (the middle slice of a volume), as [H, W] values (NaN outside the image); empty when none.
std::vector<float> partition_backdrop(const RunFolder& folder, const std::vector<std::int64_t>& size, std::string& source) {
    const run::EvalRecord* eval = nullptr;
    for (auto it = folder.history.evals.rbegin(); it != folder.history.evals.rend(); ++it) {
        if (!it->is_detection && !it->predictions.empty()) {
            eval = &*it;
            break;
        }
    }
    fs::path image_file;
    if (eval) {
        image_file = eval_file(*eval, 0, false, folder.dir);
    } else if (const run::EvalRecord* last = folder.last_eval(); last && last->is_detection) {
        // A detector's first held-out image, as its evaluation wrote it beside the boxes.
        const fs::path boxes = run::locate_detections_file(last->detection.detections_file, folder.dir);
        if (!boxes.empty()) {
            const run::DetectionsFile file = run::read_detections_file(boxes);
            if (!file.images.empty()) image_file = file.images.front().image_file;
        }
    }
    if (image_file.empty() || !fs::exists(image_file)) return {};
    const Volume volume = read_volume(image_file);
    const std::int64_t width = size.back(), height = size[size.size() - 2];
    const std::int64_t depth = size.size() == 3 ? size[0] : 1;
    const std::int64_t image_w = volume.geometry.size[0], image_h = volume.geometry.size[1], image_d = volume.geometry.size[2];
    const std::int64_t x0 = (image_w - width) / 2, y0 = (image_h - height) / 2, z0 = (image_d - depth) / 2;
    const std::int64_t z = std::clamp<std::int64_t>(z0 + depth / 2, 0, image_d - 1);
    std::vector<float> plane(static_cast<std::size_t>(width * height), std::nanf(""));
    for (std::int64_t y = 0; y < height; ++y) {
        for (std::int64_t x = 0; x < width; ++x) {
            const std::int64_t i = x0 + x, j = y0 + y;
            if (i >= 0 && i < image_w && j >= 0 && j < image_h) plane[static_cast<std::size_t>(y * width + x)] = volume.value_at(i, j, z);
        }
    }
    source = "held-out image " + image_file.filename().string() + " (" + std::to_string(image_w) + "×" + std::to_string(image_h) +
             (image_d > 1 ? "×" + std::to_string(image_d) : "") + "), its centre cropped to the replica's input" +
             (size.size() == 3 ? ", middle slice" : "");
    return plane;
}

std::string partition_section(RunFolder& folder) {
    std::string out = "<section id=\"partition\"><h2>Partition</h2>\n";
    if (!folder.experiment) return out + folder.omit("No partition: the experiment could not be read.") + "</section>\n";
    const experiment::Experiment& x = *folder.experiment;
    std::optional<graph::Graph> model;
    std::optional<partition::TilingPlan> plan;
    try {
        model.emplace(experiment::build_model(x, experiment::replica_input_shape(x)));
        plan.emplace(*model, experiment::tile_grid(x));
    } catch (const Error& error) {
        return out + folder.omit("No partition: the experiment's layout does not plan here (" + std::string(error.what()) + ").") + "</section>\n";
    }
    const std::vector<std::int64_t>& size = x.size;  // (D,) H, W
    const std::size_t rank = size.size();
    const std::int64_t width = size[rank - 1], height = size[rank - 2];
    const std::int64_t middle_slice = rank == 3 ? size[0] / 2 : 0;

    // The first layer that reads halos at the input's resolution: what its bands show.
    int halo_node = -1;
    for (const graph::Node& node : model->nodes()) {
        if (node.inputs.empty()) continue;
        const Shape& in = model->nodes()[static_cast<std::size_t>(node.inputs[0])].output_shape;
        if (in.size() != rank + 2 || !std::equal(size.begin(), size.end(), in.end() - static_cast<std::ptrdiff_t>(rank))) continue;
        for (std::int64_t core = 0; core < plan->num_cores() && halo_node < 0; ++core) {
            const partition::NodeTile& tile = plan->tile(node.id, core);
            for (std::size_t axis = 0; axis < rank; ++axis) {
                if (tile.halo_before[axis] > 0 || tile.halo_after[axis] > 0) halo_node = node.id;
            }
        }
        if (halo_node >= 0) break;
    }

    std::string source;
    std::vector<float> backdrop;
    try {
        backdrop = partition_backdrop(folder, size, source);
    } catch (const Error& error) {
        folder.omissions.push_back("the partition is drawn without an image: " + std::string(error.what()));
    }
    if (backdrop.empty()) {
        backdrop.assign(static_cast<std::size_t>(width * height), 0.0f);
        source = "no held-out image in the folder yet (evaluations write them): the input drawn blank";
    }
    const auto [shown_w, shown_h] = shown_size(width, height);
    const double scale = shown_w / static_cast<double>(width);
    const auto sx = [&](std::int64_t column) { return fixed(static_cast<double>(column) * scale, 1); };

    std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"figure\" width=\"" + fixed(shown_w, 0) + "\" height=\"" +
                      fixed(shown_h, 0) + "\" viewBox=\"0 0 " + fixed(shown_w, 1) + " " + fixed(shown_h, 1) + "\" font-size=\"12\">";
    svg += "<image width=\"" + fixed(shown_w, 1) + "\" height=\"" + fixed(shown_h, 1) + "\" preserveAspectRatio=\"none\" style=\"image-rendering:pixelated\" href=\"" +
           png_url(grey_image(windowed(backdrop), height, width)) + "\"/>";
    std::string table = "<table><tr><th>core</th><th>tile " + std::string(rank == 3 ? "D × H × W" : "H × W") +
                        "</th><th>halo rows read (before / after, per axis)</th><th>peak memory</th></tr>\n";
    const std::vector<std::int64_t>& peaks = folder.history.steps.back().core_peak_bytes;
    const std::string axis_names = rank == 3 ? "DHW" : "HW";
    for (std::int64_t core = 0; core < plan->num_cores(); ++core) {
        const std::vector<std::int64_t>& index = plan->grid_index(core);
        std::vector<partition::Interval> owned(rank);
        for (std::size_t axis = 0; axis < rank; ++axis) {
            const auto& cuts = plan->grid().boundaries[axis];
            owned[axis] = {cuts[static_cast<std::size_t>(index[axis])], cuts[static_cast<std::size_t>(index[axis]) + 1]};
        }
        const std::string color = core_colors[static_cast<std::size_t>(core) % core_colors.size()];
        std::string extent, halos;
        for (std::size_t axis = 0; axis < rank; ++axis) {
            extent += (axis ? " × " : "") + std::to_string(owned[axis].size());
            if (halo_node >= 0) {
                const partition::NodeTile& tile = plan->tile(halo_node, core);
                halos += (axis ? ", " : "") + std::string(1, axis_names[axis]) + " " + std::to_string(tile.halo_before[axis]) + " / " +
                         std::to_string(tile.halo_after[axis]);
            }
        }
        table += "<tr><td><span class=\"swatch\" style=\"background:" + color + "\"></span>" + std::to_string(core) + "</td><td>" + extent +
                 "</td><td>" + (halos.empty() ? "none" : halos) + "</td><td>" +
                 (static_cast<std::size_t>(core) < peaks.size() ? format_bytes(static_cast<double>(peaks[static_cast<std::size_t>(core)])) : "—") +
                 "</td></tr>\n";
        // Only the cores whose depth piece holds the slice shown.
        if (rank == 3 && (middle_slice < owned[0].begin || middle_slice >= owned[0].end)) continue;
        const partition::Interval rows = owned[rank - 2], columns = owned[rank - 1];
        if (halo_node >= 0) {
            const partition::NodeTile& tile = plan->tile(halo_node, core);
            const partition::Interval need_rows = tile.needed[rank - 2], need_columns = tile.needed[rank - 1];
            const std::string title = "<title>core " + std::to_string(core) + ": halo read by " +
                                      h(model->nodes()[static_cast<std::size_t>(halo_node)].name) + "</title>";
            // A band is drawn at least min_band_px across (a 1-row halo would vanish), from the tile's edge outwards.
            constexpr double min_band_px = 3;
            auto band = [&](std::int64_t x0, std::int64_t y0, std::int64_t x1, std::int64_t y1, int grow_x, int grow_y) {
                if (x1 <= x0 || y1 <= y0) return;
                double left = static_cast<double>(x0) * scale, top = static_cast<double>(y0) * scale;
                double band_w = static_cast<double>(x1 - x0) * scale, band_h = static_cast<double>(y1 - y0) * scale;
                if (grow_x != 0 && band_w < min_band_px) left -= grow_x < 0 ? min_band_px - band_w : 0, band_w = min_band_px;
                if (grow_y != 0 && band_h < min_band_px) top -= grow_y < 0 ? min_band_px - band_h : 0, band_h = min_band_px;
                svg += "<rect x=\"" + fixed(left, 1) + "\" y=\"" + fixed(top, 1) + "\" width=\"" + fixed(band_w, 1) + "\" height=\"" + fixed(band_h, 1) +
                       "\" fill=\"" + color + "\" fill-opacity=\"0.55\">" + title + "</rect>";
            };
            band(need_columns.begin, need_rows.begin, need_columns.end, rows.begin, 0, -1);
            band(need_columns.begin, rows.end, need_columns.end, need_rows.end, 0, 1);
            band(need_columns.begin, rows.begin, columns.begin, rows.end, -1, 0);
            band(columns.end, rows.begin, need_columns.end, rows.end, 1, 0);
        }
        svg += "<rect x=\"" + sx(columns.begin) + "\" y=\"" + sx(rows.begin) + "\" width=\"" + sx(columns.size()) + "\" height=\"" +
               sx(rows.size()) + "\" fill=\"none\" stroke=\"" + color + "\" stroke-width=\"2\"><title>core " + std::to_string(core) +
               ": rows " + std::to_string(rows.begin) + "–" + std::to_string(rows.end - 1) + ", columns " + std::to_string(columns.begin) +
               "–" + std::to_string(columns.end - 1) + "</title></rect>";
        svg += "<text x=\"" + sx(columns.begin) + "\" y=\"" + sx(rows.begin) + "\" dx=\"5\" dy=\"15\" fill=\"#fff\" stroke=\"#000\" stroke-width=\"0.6\" "
               "paint-order=\"stroke\" font-weight=\"700\">core " + std::to_string(core) + "</text>";
    }
    svg += "</svg>";
    table += "</table>\n";

    const run::StepRecord& last = folder.history.steps.back();
    std::string caption = std::to_string(plan->num_cores()) + " cores per replica (input_partition_dims " +
                          partition::input_partition_dims_to_string(x.partition) + ", " + std::to_string(x.partition.num_replicas) +
                          (x.partition.num_replicas == 1 ? " replica" : " replicas") + ") over " + source + ". ";
    caption += halo_node >= 0 ? "Shaded bands: the rows each core reads from its neighbours for " +
                                    model->nodes()[static_cast<std::size_t>(halo_node)].name +
                                    ", the first convolution with halos (drawn at least 3 px wide); "
                              : "No layer at the input's resolution reads halos. ";
    caption += "the whole step exchanges " + format_bytes(static_cast<double>(last.halo_bytes)) + " of halos.";
    if (rank == 3) caption += " Cores whose depth piece does not hold slice " + std::to_string(middle_slice) + " are listed but not drawn.";
    out += "<figure>" + svg + "<figcaption>" + h(caption) + "</figcaption></figure>\n" + table;
    return out + "</section>\n";
}

std::string curves_section(RunFolder& folder) {
    const run::MetricsHistory& history = folder.history;
    std::string out = "<section id=\"curves\"><h2>Training</h2>\n<div class=\"charts\">";
    Series loss{.name = "training loss", .color = "#1f77b4"}, rate{.name = "learning rate", .color = "#9467bd"};
    Series skipped{.name = "update skipped (overflow)", .color = "#d62728", .markers = true};
    double low = INFINITY, high = 0;
    for (const run::StepRecord& s : history.steps) {
        loss.x.push_back(static_cast<double>(s.step));
        loss.y.push_back(s.loss);
        rate.x.push_back(static_cast<double>(s.step));
        rate.y.push_back(s.learning_rate);
        if (!s.applied) {
            skipped.x.push_back(static_cast<double>(s.step));
            skipped.y.push_back(s.loss);
        }
        if (s.loss > 0) low = std::min(low, s.loss), high = std::max(high, s.loss);
    }
    LineChart loss_chart{.title = "Training loss", .x_title = "step", .y_title = "loss"};
    loss_chart.log_y = high > 0 && high / low > 100;
    loss_chart.series.push_back(loss);
    if (!skipped.x.empty()) loss_chart.series.push_back(skipped);
    out += render_line_chart(loss_chart);
    LineChart rate_chart{.title = "Learning rate", .x_title = "step", .y_title = "learning rate"};
    rate_chart.series.push_back(rate);
    out += render_line_chart(rate_chart);
    if (!history.evals.empty()) {
        const double first_step = static_cast<double>(history.steps.front().step), last_step = static_cast<double>(history.steps.back().step);
        LineChart eval_chart{.title = "Held-out scores", .x_title = "step", .y_title = "score"};
        eval_chart.y_min = 0, eval_chart.y_max = 1;
        eval_chart.x_min = first_step, eval_chart.x_max = last_step;
        const bool detection = history.evals.back().is_detection;
        const bool classifier = !detection && history.evals.back().classes.empty();
        std::vector<std::pair<std::string, std::string>> names =
            detection    ? std::vector<std::pair<std::string, std::string>>{{"AP", "#1f77b4"}, {"AP50", "#ff7f0e"}, {"AR100", "#2ca02c"}}
            : classifier ? std::vector<std::pair<std::string, std::string>>{{"macro F1", "#1f77b4"}, {"mean IoU", "#ff7f0e"}, {"accuracy", "#2ca02c"}}
                         : std::vector<std::pair<std::string, std::string>>{{"mean Dice", "#1f77b4"}, {"mean IoU", "#ff7f0e"}, {"accuracy", "#2ca02c"}};
        for (std::size_t k = 0; k < names.size(); ++k) {
            Series series{.name = names[k].first, .color = names[k].second, .markers = true};
            for (const run::EvalRecord& e : history.evals) {
                if (e.is_detection != detection) continue;
                const double value = detection ? (k == 0 ? e.detection.ap : k == 1 ? e.detection.ap50 : e.detection.ar100)
                                               : (k == 0 ? e.mean_dice : k == 1 ? e.mean_iou : e.accuracy);
                series.x.push_back(static_cast<double>(e.step));
                series.y.push_back(value < 0 ? NAN : value);
            }
            eval_chart.series.push_back(series);
        }
        out += render_line_chart(eval_chart);
        LineChart eval_loss{.title = "Held-out loss", .x_title = "step", .y_title = "loss"};
        eval_loss.x_min = first_step, eval_loss.x_max = last_step;
        Series held_out{.name = "held-out loss", .color = "#8c564b", .markers = true};
        for (const run::EvalRecord& e : history.evals) {
            held_out.x.push_back(static_cast<double>(e.step));
            held_out.y.push_back(e.loss);
        }
        eval_loss.series.push_back(held_out);
        out += render_line_chart(eval_loss);
    }
    out += "</div>\n";
    if (history.evals.empty()) out += folder.omit("No evaluation yet: the run evaluates every steps_per_eval steps and at its end.");
    return out + "</section>\n";
}

std::string step_time_section(RunFolder& folder) {
    const run::MetricsHistory& history = folder.history;
    std::string out = "<section id=\"step-time\"><h2>Step time</h2>\n";
    LineChart chart{.title = "Step time: this host and the cost model", .x_title = "step", .y_title = "seconds per step"};
    Series host{.name = "measured on this host", .color = "#1f77b4"};
    Series device{.name = "predicted on the device", .color = "#d62728", .dashed = true};
    Series host_predicted{.name = "predicted on this host", .color = "#2ca02c", .dashed = true};
    std::vector<double> measured;  // every session's steps but its first (warming up)
    std::size_t start_index = 0;
    double low = INFINITY, high = 0;
    for (std::size_t i = 0; i < history.steps.size(); ++i) {
        const run::StepRecord& s = history.steps[i];
        // The session this step belongs to: the last start at or before it.
        while (start_index + 1 < history.starts.size() && history.starts[start_index + 1].first_step < s.step) ++start_index;
        const bool first_of_session = i == 0 || history.steps[i - 1].step >= s.step ||
                                      (start_index < history.starts.size() && history.starts[start_index].first_step + 1 == s.step);
        if (!first_of_session) measured.push_back(s.host_seconds);
        host.x.push_back(static_cast<double>(s.step));
        host.y.push_back(s.host_seconds);
        device.x.push_back(static_cast<double>(s.step));
        device.y.push_back(s.predicted_seconds);
        if (start_index < history.starts.size() && history.starts[start_index].predicted_host_step_seconds > 0) {
            host_predicted.x.push_back(static_cast<double>(s.step));
            host_predicted.y.push_back(history.starts[start_index].predicted_host_step_seconds);
        }
        for (double v : {s.host_seconds, s.predicted_seconds}) {
            if (v > 0) low = std::min(low, v), high = std::max(high, v);
        }
    }
    chart.series = {host, device};
    const run::RunStart* start = folder.last_start();
    if (!host_predicted.x.empty()) {
        chart.series.push_back(host_predicted);
        if (start && start->host_prediction_uncertainty_seconds > 0) {
            chart.bands.push_back({"host prediction ± validation residuals", "#2ca02c",
                                   start->predicted_host_step_seconds - start->host_prediction_uncertainty_seconds,
                                   start->predicted_host_step_seconds + start->host_prediction_uncertainty_seconds});
        }
    }
    chart.log_y = high > 0 && high / low > 20;
    out += render_line_chart(chart);
    if (measured.empty()) measured.push_back(history.steps.front().host_seconds);
    std::sort(measured.begin(), measured.end());
    const double median = measured[measured.size() / 2];
    std::string text = "Median measured step " + milliseconds(median) + " on this host over " + std::to_string(measured.size()) +
                       " steps (each session's first step, which warms up, left out)";
    if (start && start->predicted_host_step_seconds > 0) {
        text += "; the calibrated cost model predicted " + milliseconds(start->predicted_host_step_seconds) +
                (start->host_prediction_uncertainty_seconds > 0 ? " ± " + milliseconds(start->host_prediction_uncertainty_seconds) : "") +
                " (" + (median >= start->predicted_host_step_seconds ? "+" : "") +
                fixed((median / start->predicted_host_step_seconds - 1) * 100, 1) + " % measured against predicted)";
    } else {
        text += "; no host prediction (tessera-cli calibrate writes the host preset that gives one)";
    }
    if (start) text += ". Predicted on " + start->device + ": " + milliseconds(start->predicted_step_seconds) + " per step.";
    if (chart.log_y) text += " The time axis is logarithmic.";
    out += "<p>" + h(text) + "</p>\n";
    return out + "</section>\n";
}

std::string memory_section(RunFolder& folder) {
    std::string out = "<section id=\"memory\"><h2>Memory per core</h2>\n";
    const run::StepRecord& last = folder.history.steps.back();
    const run::RunStart* start = folder.last_start();
    BarChart chart{.title = "Peak memory per simulated core (step " + std::to_string(last.step) + ")", .y_title = "peak", .values_are_bytes = true};
    double peak = 0;
    for (std::size_t core = 0; core < last.core_peak_bytes.size(); ++core) {
        const auto bytes = static_cast<double>(last.core_peak_bytes[core]);
        peak = std::max(peak, bytes);
        chart.bars.push_back({std::to_string(core), bytes, core_colors[core % core_colors.size()], "core " + std::to_string(core) + ": " + format_bytes(bytes)});
    }
    std::string text = "Peaks from the simulated cores' ledgers: activations, weights, gradients and optimizer slots each core holds.";
    if (start && start->core_capacity_bytes > 0) {
        const auto capacity = static_cast<double>(start->core_capacity_bytes);
        // A capacity far above the peaks would flatten the bars: said in words then.
        if (capacity <= 4 * peak) {
            chart.limit = capacity;
            chart.limit_label = start->device + " capacity " + format_bytes(capacity);
        }
        text += " " + start->device + " has " + format_bytes(capacity) + " per core; the largest peak uses " + percent(peak / capacity) + " of it.";
    }
    if (start && start->host_memory_bytes > 0) {
        text += " On this host the cores held " + format_bytes(static_cast<double>(start->host_memory_bytes)) + " (budget " +
                format_bytes(static_cast<double>(start->host_memory_budget_bytes)) + ").";
    }
    out += render_bar_chart(chart) + "<p>" + h(text) + "</p>\n";
    return out + "</section>\n";
}

std::string timeline_section(RunFolder& folder) {
    std::string out = "<section id=\"timeline\"><h2>Timeline of a recorded step</h2>\n";
    const fs::path file = folder.dir / run::step_trace_file_name;
    if (!fs::exists(file)) {
        return out + folder.omit("No recorded step: step_trace.json is written at each checkpoint (runs from before this version have none).") +
               "</section>\n";
    }
    run::StepTrace trace;
    try {
        trace = run::read_step_trace(file);
    } catch (const Error& error) {
        return out + folder.omit("The recorded step could not be read: " + std::string(error.what())) + "</section>\n";
    }
    const std::vector<TimelineLegendEntry> legend = {{"forward", "#4e79a7"}, {"backward", "#59a14f"}, {"update", "#b07aa1"},
                                                     {"halo", "#f28e2b"},    {"all-reduce", "#e15759"}, {"wait", "#bab0ac"}};
    auto color_of = [&](const mesh::CoreEvent& e) -> std::string {
        switch (e.kind) {
            case mesh::EventKind::Halo: return legend[3].color;
            case mesh::EventKind::AllReduce: return legend[4].color;
            case mesh::EventKind::Wait: return legend[5].color;
            case mesh::EventKind::Compute: break;
        }
        return e.phase == mesh::StepPhase::Forward ? legend[0].color : e.phase == mesh::StepPhase::Backward ? legend[1].color : legend[2].color;
    };
    Timeline timeline{.title = "Step " + std::to_string(trace.step) + " on every simulated core", .legend = legend};
    for (std::int64_t core = 0; core < trace.num_cores; ++core) timeline.lane_names.push_back("core " + std::to_string(core));
    // Per core: seconds by kind, for the table under the chart.
    std::vector<std::map<std::string, double>> busy(static_cast<std::size_t>(trace.num_cores));
    double step_end = 0;
    for (const mesh::CoreEvent& e : trace.events) {
        const double duration = e.end_seconds - e.start_seconds;
        std::string tooltip = "core " + std::to_string(e.core) + " · " + run::event_name(trace, e) + " · " +
                              std::string(mesh::event_kind_name(e.kind)) + " " + std::string(mesh::step_phase_name(e.phase)) + " · " +
                              milliseconds(duration);
        if (e.flops > 0) tooltip += " · " + compact_number(e.flops) + " FLOP";
        if (e.bytes > 0) tooltip += " · " + format_bytes(static_cast<double>(e.bytes)) + (e.peer >= 0 ? " with core " + std::to_string(e.peer) : "");
        timeline.spans.push_back({e.core, e.start_seconds * 1e3, e.end_seconds * 1e3, color_of(e), tooltip});
        const std::string kind = e.kind == mesh::EventKind::Compute ? "compute" : std::string(mesh::event_kind_name(e.kind));
        busy[static_cast<std::size_t>(e.core)][kind] += duration;
        step_end = std::max(step_end, e.end_seconds);
    }
    out += render_timeline(timeline);
    out += "<table><tr><th>core</th><th>compute</th><th>halo</th><th>all-reduce</th><th>wait</th><th>share computing</th></tr>\n";
    for (std::size_t core = 0; core < busy.size(); ++core) {
        std::map<std::string, double>& b = busy[core];
        out += "<tr><td>" + std::to_string(core) + "</td><td>" + milliseconds(b["compute"]) + "</td><td>" + milliseconds(b["halo"]) + "</td><td>" +
               milliseconds(b["all-reduce"]) + "</td><td>" + milliseconds(b["wait"]) + "</td><td>" +
               (step_end > 0 ? percent(b["compute"] / step_end) : "—") + "</td></tr>\n";
    }
    out += "</table>\n<p>" +
           h("Measured on this host's simulated cores (each core runs on the host's threads, so cores take turns). The same events are in "
             "step_trace.json, which Perfetto (ui.perfetto.dev) and chrome://tracing open.") +
           "</p>\n";
    return out + "</section>\n";
}

struct CaseScore {
    std::size_t index = 0;
    std::string name;
    double mean_dice = 0;
    std::vector<double> class_dice;  // by class id 1…; NaN where neither truth nor prediction has it
};

// Dice per foreground class of one held-out case, and their mean over the classes either side has.
CaseScore score_case(const LabelMap& prediction, const LabelMap& truth, std::int64_t num_classes) {
    CaseScore score;
    std::vector<std::int64_t> both(static_cast<std::size_t>(num_classes)), predicted(both), actual(both);
    const std::int32_t* p = prediction.labels.data<std::int32_t>();
    const std::int32_t* t = truth.labels.data<std::int32_t>();
    for (std::int64_t i = 0; i < truth.labels.num_elements(); ++i) {
        const std::int32_t a = std::clamp<std::int32_t>(p[i], 0, static_cast<std::int32_t>(num_classes - 1));
        const std::int32_t b = std::clamp<std::int32_t>(t[i], 0, static_cast<std::int32_t>(num_classes - 1));
        ++predicted[static_cast<std::size_t>(a)];
        ++actual[static_cast<std::size_t>(b)];
        if (a == b) ++both[static_cast<std::size_t>(a)];
    }
    double sum = 0;
    int counted = 0;
    for (std::int64_t c = 1; c < num_classes; ++c) {
        const auto k = static_cast<std::size_t>(c);
        const std::int64_t denominator = predicted[k] + actual[k];
        const double dice = denominator == 0 ? NAN : 2.0 * static_cast<double>(both[k]) / static_cast<double>(denominator);
        score.class_dice.push_back(dice);
        if (denominator > 0) sum += dice, ++counted;
    }
    score.mean_dice = counted ? sum / counted : 1.0;
    return score;
}

// Three panels of one case's slice: the truth, the prediction and where they differ.
std::string case_figure(const CaseScore& score, const std::string& label, const Volume& image, const LabelMap& prediction,
                        const LabelMap& truth) {
    const std::int64_t width = image.geometry.size[0], height = image.geometry.size[1], depth = image.geometry.size[2];
    // The slice with the most foreground in truth or prediction (the middle one when there is none).
    std::int64_t slice = depth / 2, best = 0;
    const std::int64_t plane = width * height;
    for (std::int64_t k = 0; k < depth; ++k) {
        std::int64_t count = 0;
        for (std::int64_t i = 0; i < plane; ++i) {
            count += (truth.labels.data<std::int32_t>()[k * plane + i] != 0) + (prediction.labels.data<std::int32_t>()[k * plane + i] != 0);
        }
        if (count > best) best = count, slice = k;
    }
    std::vector<float> values(static_cast<std::size_t>(plane));
    std::copy_n(image.voxels.data<float>() + slice * plane, plane, values.begin());
    Tensor truth_overlay = transparent_image(height, width), prediction_overlay = truth_overlay.clone(), error_overlay = truth_overlay.clone();
    const std::int32_t* p = prediction.labels.data<std::int32_t>() + slice * plane;
    const std::int32_t* t = truth.labels.data<std::int32_t>() + slice * plane;
    // The studio's error map colours (false positive red, missed blue, wrong class yellow), and right in green.
    const Rgb correct{0.17f, 0.63f, 0.17f}, false_positive{0.84f, 0.15f, 0.16f}, missed{0.12f, 0.47f, 0.71f}, wrong_class{1.0f, 0.85f, 0.0f};
    for (std::int64_t i = 0; i < plane; ++i) {
        if (t[i] != 0) paint(truth_overlay, i, label_color(t[i], truth.descriptions), 0.5f);
        if (p[i] != 0) paint(prediction_overlay, i, label_color(p[i], truth.descriptions), 0.5f);
        if (p[i] != 0 && p[i] == t[i]) paint(error_overlay, i, correct, 0.35f);
        else if (p[i] != 0 && t[i] != 0) paint(error_overlay, i, wrong_class, 0.7f);
        else if (p[i] != 0) paint(error_overlay, i, false_positive, 0.7f);
        else if (t[i] != 0) paint(error_overlay, i, missed, 0.7f);
    }
    const auto [shown_w, shown_h] = shown_size(width, height, 300);
    // The slice once, as the background of the three panels; each panel's overlay on top.
    const std::string backdrop_class = "case-" + std::to_string(score.index) + "-" + label.substr(0, 4);
    std::string out = "<h3>" + h(label + ": " + score.name + " — mean Dice " + fixed(score.mean_dice, 4)) + "</h3>\n<style>." + backdrop_class +
                      " { background-image: url(\"" + png_url(grey_image(windowed(values), height, width)) + "\"); }</style>\n<div class=\"panels\">";
    auto panel = [&](const Tensor& overlay, const std::string& caption) {
        return "<figure class=\"panel\"><div class=\"layers " + backdrop_class + "\" style=\"width:" + fixed(shown_w, 0) + "px;height:" + fixed(shown_h, 0) +
               "px\"><img alt=\"" + h(caption) + "\" width=\"" + fixed(shown_w, 0) + "\" height=\"" + fixed(shown_h, 0) + "\" src=\"" + png_url(overlay) +
               "\"></div><figcaption>" + h(caption) + "</figcaption></figure>";
    };
    out += panel(truth_overlay, "ground truth") + panel(prediction_overlay, "prediction") +
           panel(error_overlay, "errors: green right, red false positive, blue missed, yellow wrong class");
    out += "</div>\n<p class=\"note\">" +
           h(depth > 1 ? "Slice " + std::to_string(slice) + " of " + std::to_string(depth) + " (the one with the most foreground)." : "The whole image.") +
           "</p>\n";
    return out;
}

std::string segmentation_evaluation(RunFolder& folder, const run::EvalRecord& eval) {
    std::string out = "<table><tr><th>class</th><th>Dice</th><th>IoU</th></tr>\n";
    for (const run::ClassRecord& c : eval.classes) {
        out += "<tr><td>" + h(c.name) + "</td><td>" + (c.is_present ? fixed(c.dice, 4) : "—") + "</td><td>" + (c.is_present ? fixed(c.iou, 4) : "—") +
               "</td></tr>\n";
    }
    out += "<tr class=\"total\"><td>mean</td><td>" + fixed(eval.mean_dice, 4) + "</td><td>" + fixed(eval.mean_iou, 4) + "</td></tr>\n</table>\n";
    out += "<p>" + h("Step " + std::to_string(eval.step) + ", " + std::to_string(eval.num_examples) + " held-out examples, accuracy " +
                     fixed(eval.accuracy, 4) + ", loss " + fixed(eval.loss, 4) + ", evaluated in " + fixed(eval.seconds, 1) + " s.") +
           "</p>\n";
    if (eval.predictions.empty()) return out + folder.omit("No best and worst cases: the evaluation wrote no predictions.");

    // Every case scored from the files the evaluation wrote.
    const std::int64_t num_classes = std::max<std::int64_t>(2, static_cast<std::int64_t>(eval.classes.size()));
    std::vector<CaseScore> scores;
    for (std::size_t i = 0; i < eval.predictions.size(); ++i) {
        try {
            const LabelMap prediction = read_label_map(prediction_file(eval, i, folder.dir));
            const LabelMap truth = read_label_map(eval_file(eval, i, true, folder.dir));
            CaseScore score = score_case(prediction, truth, num_classes);
            score.index = i;
            score.name = prediction_file(eval, i, folder.dir).filename().string();
            scores.push_back(std::move(score));
        } catch (const Error& error) {
            folder.omissions.push_back("held-out case " + std::to_string(i) + " left out: " + error.what());
        }
    }
    if (scores.empty()) return out + folder.omit("No best and worst cases: none of the evaluation's prediction files could be read.");
    out += "<h3>Every held-out case</h3>\n<table><tr><th>case</th><th>mean Dice</th>";
    for (std::int64_t c = 1; c < num_classes; ++c) {
        const auto k = static_cast<std::size_t>(c);
        out += "<th>" + h(k < eval.classes.size() ? eval.classes[k].name : "class " + std::to_string(c)) + "</th>";
    }
    out += "</tr>\n";
    for (const CaseScore& s : scores) {
        out += "<tr><td>" + h(s.name) + "</td><td>" + fixed(s.mean_dice, 4) + "</td>";
        for (double d : s.class_dice) out += "<td>" + (std::isnan(d) ? std::string("—") : fixed(d, 4)) + "</td>";
        out += "</tr>\n";
    }
    out += "</table>\n";
    const auto [worst, best] = std::minmax_element(scores.begin(), scores.end(), [](const CaseScore& a, const CaseScore& b) { return a.mean_dice < b.mean_dice; });
    std::vector<std::pair<const CaseScore*, std::string>> shown = {{&*best, "Best case"}};
    if (worst != best) shown.emplace_back(&*worst, "Worst case");
    for (const auto& [score, label] : shown) {
        try {
            const Volume image = read_volume(eval_file(eval, score->index, false, folder.dir));
            const LabelMap prediction = read_label_map(prediction_file(eval, score->index, folder.dir));
            const LabelMap truth = read_label_map(eval_file(eval, score->index, true, folder.dir));
            TESSERA_CHECK(image.geometry.size == truth.geometry.size && prediction.geometry.size == truth.geometry.size,
                          score->name << ": the image, its truth and the prediction are not on one grid");
            out += case_figure(*score, label, image, prediction, truth);
        } catch (const Error& error) {
            out += folder.omit(label + " left out: " + error.what());
        }
    }
    return out;
}

std::string detection_figure(const run::DetectionsFile& file, const run::DetectionsFileImage& image, const std::string& label, double f1) {
    const run::ShownDetections shown = run::shown_detections(image, {.min_score = shown_min_score});
    const auto [shown_w, shown_h] = shown_size(image.width, image.height);
    const double scale = shown_w / static_cast<double>(image.width);
    std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"figure\" width=\"" + fixed(shown_w, 0) + "\" height=\"" +
                      fixed(shown_h, 0) + "\" viewBox=\"0 0 " + fixed(shown_w, 1) + " " + fixed(shown_h, 1) + "\" font-size=\"11\">";
    if (fs::exists(image.image_file)) {
        const Tensor rgb = read_color_image(image.image_file);
        svg += "<image width=\"" + fixed(shown_w, 1) + "\" height=\"" + fixed(shown_h, 1) + "\" preserveAspectRatio=\"none\" href=\"" + png_url(rgb) + "\"/>";
    } else {
        svg += "<rect width=\"100%\" height=\"100%\" fill=\"#222\"/>";
    }
    auto box = [&](const run::ShownBox& b, const std::string& color, bool dashed, const std::string& title) {
        svg += "<rect x=\"" + fixed(b.box.x_min * scale, 1) + "\" y=\"" + fixed(b.box.y_min * scale, 1) + "\" width=\"" + fixed(b.box.width() * scale, 1) +
               "\" height=\"" + fixed(b.box.height() * scale, 1) + "\" fill=\"none\" stroke=\"" + color + "\" stroke-width=\"2\"" +
               (dashed ? " stroke-dasharray=\"5 3\"" : "") + "><title>" + h(title) + "</title></rect>";
    };
    for (const run::ShownBox& b : shown.ground_truth) {
        box(b, b.outcome == run::BoxOutcome::Found ? "#2ca02c" : "#ff7f0e", true, file.class_name(b.class_id) + " (truth, " + std::string(run::outcome_name(b.outcome)) + ")");
    }
    for (const run::ShownBox& b : shown.detections) {
        box(b, b.outcome == run::BoxOutcome::Matched ? "#1f77b4" : "#d62728", false,
            file.class_name(b.class_id) + " " + fixed(b.score, 2) + " (" + std::string(run::outcome_name(b.outcome)) + ")");
    }
    svg += "</svg>";
    const std::string caption = label + ": " + image.name + " — F1 " + fixed(f1, 3) + " at score ≥ " + fixed(shown_min_score, 1) + ": " +
                                std::to_string(shown.num_matched) + " matched, " + std::to_string(shown.num_false_positives) + " false positives, " +
                                std::to_string(shown.num_missed) + " missed. Dashed: truth (green found, orange missed); solid: detections "
                                                                   "(blue matched, red false).";
    return "<figure>" + svg + "<figcaption>" + h(caption) + "</figcaption></figure>\n";
}

std::string detection_evaluation(RunFolder& folder, const run::EvalRecord& eval) {
    const run::DetectionEvalRecord& d = eval.detection;
    auto score = [](double v) { return v < 0 ? std::string("—") : fixed(v, 3); };
    std::string out = "<table><tr><th>class</th><th>objects</th><th>AP</th><th>AP50</th><th>AP75</th><th>recall</th></tr>\n";
    for (const run::DetectionClassRecord& c : d.classes) {
        out += "<tr><td>" + h(c.name) + "</td><td>" + std::to_string(c.num_ground_truth) + "</td><td>" + score(c.ap) + "</td><td>" + score(c.ap50) +
               "</td><td>" + score(c.ap75) + "</td><td>" + score(c.recall) + "</td></tr>\n";
    }
    out += "<tr class=\"total\"><td>mean</td><td>" + std::to_string(d.num_ground_truth) + "</td><td>" + score(d.ap) + "</td><td>" + score(d.ap50) +
           "</td><td>" + score(d.ap75) + "</td><td>" + score(d.ar100) + "</td></tr>\n</table>\n";
    out += "<p>" + h("Step " + std::to_string(eval.step) + ", " + std::to_string(eval.num_examples) + " held-out images, " +
                     std::to_string(d.num_detections) + " detections (" + std::to_string(d.num_true_positives) + " true positives at IoU 0.5), AP small / medium / large " +
                     score(d.ap_small) + " / " + score(d.ap_medium) + " / " + score(d.ap_large) + ".") +
           "</p>\n";
    const fs::path file_path = run::locate_detections_file(d.detections_file, folder.dir);
    if (file_path.empty()) return out + folder.omit("No best and worst images: the evaluation wrote no detections file.");
    try {
        const run::DetectionsFile file = run::read_detections_file(file_path);
        if (file.images.empty()) return out + folder.omit("No best and worst images: the detections file lists none.");
        std::vector<double> f1;
        for (const run::DetectionsFileImage& image : file.images) {
            const run::ShownDetections shown = run::shown_detections(image, {.min_score = shown_min_score});
            const double denominator = static_cast<double>(shown.detections.size() + shown.ground_truth.size());
            f1.push_back(denominator == 0 ? 1.0 : 2.0 * static_cast<double>(shown.num_matched) / denominator);
        }
        const auto best = static_cast<std::size_t>(std::max_element(f1.begin(), f1.end()) - f1.begin());
        // The last of the lowest: another image than the best when all score alike.
        std::size_t worst = 0;
        for (std::size_t i = 0; i < f1.size(); ++i) {
            if (f1[i] <= f1[worst]) worst = i;
        }
        out += detection_figure(file, file.images[best], "Best image", f1[best]);
        if (worst != best) out += detection_figure(file, file.images[worst], "Worst image", f1[worst]);
    } catch (const Error& error) {
        out += folder.omit("No best and worst images: " + std::string(error.what()));
    }
    return out;
}

std::string evaluation_section(RunFolder& folder) {
    std::string out = "<section id=\"evaluation\"><h2>Evaluation</h2>\n";
    const run::EvalRecord* eval = folder.last_eval();
    if (!eval) return out + folder.omit("No evaluation table: the run has not evaluated yet.") + "</section>\n";
    if (eval->is_detection) {
        out += detection_evaluation(folder, *eval);
    } else if (eval->classes.empty()) {
        // A classifier: whole images, one label each; its "Dice" over classes is the macro F1 score.
        out += "<table><tr><th>accuracy</th><th>macro F1</th><th>mean IoU (Jaccard)</th><th>loss</th><th>held-out images</th></tr>\n<tr><td>" +
               fixed(eval->accuracy, 4) + "</td><td>" + fixed(eval->mean_dice, 4) + "</td><td>" + fixed(eval->mean_iou, 4) + "</td><td>" +
               fixed(eval->loss, 4) + "</td><td>" + std::to_string(eval->num_examples) + "</td></tr>\n</table>\n<p>" +
               h("Step " + std::to_string(eval->step) + ", evaluated in " + fixed(eval->seconds, 1) + " s. A classifier has no overlays.") + "</p>\n";
    } else {
        out += segmentation_evaluation(folder, *eval);
    }
    return out + "</section>\n";
}

std::string experiment_section(const RunFolder& folder) {
    if (folder.experiment_text.empty()) return {};
    return "<section id=\"experiment\"><h2>Experiment file</h2>\n<details><summary>experiment.json as the run read it</summary><pre>" +
           h(folder.experiment_text) + "</pre></details></section>\n";
}

constexpr const char* style = R"(
body { font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif; color: #222; margin: 0; background: #fafafa; }
main { max-width: 1000px; margin: 0 auto; padding: 16px 28px 48px; background: #fff; }
h1 { font-size: 24px; margin: 12px 0 4px; } h2 { font-size: 18px; border-bottom: 1px solid #ddd; padding-bottom: 4px; margin-top: 32px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.generated { color: #666; margin: 0 0 8px; }
table { border-collapse: collapse; margin: 8px 0; } th, td { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: left; vertical-align: top; }
table.facts th { color: #555; font-weight: 600; white-space: nowrap; }
tr.total td { font-weight: 600; border-top: 1px solid #bbb; }
.charts { display: flex; flex-wrap: wrap; gap: 8px; } .charts svg { flex: 0 0 auto; }
svg { display: block; } figure { margin: 10px 0; } figcaption { color: #444; font-size: 13px; max-width: 880px; }
.panels { display: flex; flex-wrap: wrap; gap: 12px; } .panel img { image-rendering: pixelated; display: block; }
.layers { background-size: 100% 100%; image-rendering: pixelated; border: 1px solid #ccc; }
.panel figcaption { max-width: 300px; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 6px; }
.omitted { color: #8a5a00; background: #fff6e0; border-left: 3px solid #e0a800; padding: 4px 8px; }
.note { color: #555; font-size: 13px; }
pre { background: #f4f4f4; padding: 8px; overflow-x: auto; font-size: 12px; }
nav a { margin-right: 12px; }
)";

}  // namespace

std::string base64(const std::vector<std::uint8_t>& bytes) {
    static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 2 < bytes.size(); i += 3) {
        const std::uint32_t group = (std::uint32_t{bytes[i]} << 16) | (std::uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
        for (int shift : {18, 12, 6, 0}) out += alphabet[(group >> shift) & 63];
    }
    if (i < bytes.size()) {
        const bool two = i + 1 < bytes.size();
        const std::uint32_t group = (std::uint32_t{bytes[i]} << 16) | (two ? std::uint32_t{bytes[i + 1]} << 8 : 0);
        out += alphabet[(group >> 18) & 63];
        out += alphabet[(group >> 12) & 63];
        out += two ? alphabet[(group >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

ReportResult render_run_report(const fs::path& model_dir) {
    RunFolder folder = read_folder(model_dir);
    const run::RunStart* start = folder.last_start();
    const std::string title = "Tessera run report: " + (start && !start->experiment.empty() ? start->experiment : folder.dir.filename().string());
    std::string body = "<h1>" + h(title) + "</h1>\n<p class=\"generated\">" + h("Written " + utc_now() + " by Tessera from " + folder.dir.string()) +
                       "</p>\n<nav><a href=\"#overview\">Overview</a><a href=\"#partition\">Partition</a><a href=\"#curves\">Training</a>"
                       "<a href=\"#step-time\">Step time</a><a href=\"#memory\">Memory</a><a href=\"#timeline\">Timeline</a>"
                       "<a href=\"#evaluation\">Evaluation</a></nav>\n";
    body += overview_section(folder);
    body += partition_section(folder);
    body += curves_section(folder);
    body += step_time_section(folder);
    body += memory_section(folder);
    body += timeline_section(folder);
    body += evaluation_section(folder);
    body += experiment_section(folder);
    ReportResult result;
    result.html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"generator\" content=\"Tessera\"><title>" + h(title) +
                  "</title><style>" + style + "</style></head>\n<body><main>\n" + body + "</main></body></html>\n";
    result.omissions = std::move(folder.omissions);
    return result;
}

ReportResult write_run_report(const fs::path& model_dir, const fs::path& out) {
    ReportResult result = render_run_report(model_dir);
    io::write_file_atomically(out, std::as_bytes(std::span(result.html.data(), result.html.size())));
    return result;
}

}  // namespace tessera::report
