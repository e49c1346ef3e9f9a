#include "experiment/published.hpp"

#include "core/error.hpp"
#include "core/json_support.hpp"
#include "core/user_files.hpp"
#include "cost/device.hpp"
#include "networks/models.hpp"
#include "networks/retinanet.hpp"
#include "partition/tiling.hpp"

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>

namespace tessera::experiment {

namespace fs = std::filesystem;
using json::Json;

namespace {

// The value among `values` whose name (`name_of`) is `text`; none when no name matches.
template <typename Value, typename NameOf>
std::optional<Value> named_value(const std::string& text, std::initializer_list<Value> values, NameOf name_of) {
    for (Value value : values)
        if (name_of(value) == text) return value;
    return std::nullopt;
}

// Reads one case, naming the file, the case and the field in every error.
class CaseReader {
public:
    CaseReader(std::string where, const Json& value) : m_where(std::move(where)), m_value(value) {}

    const Json& field(const Json& parent, const std::string& key, const std::string& path) const {
        TESSERA_CHECK(parent.is_object() && parent.contains(key), m_where << ": " << path << key << ": missing");
        return parent[key];
    }
    std::string text(const Json& parent, const std::string& key, const std::string& path = "") const {
        const Json& value = field(parent, key, path);
        TESSERA_CHECK(value.is_string(), m_where << ": " << path << key << ": expected a string, got " << json::type_name(value));
        return value.get<std::string>();
    }
    double number(const Json& parent, const std::string& key, const std::string& path = "") const {
        const Json& value = field(parent, key, path);
        TESSERA_CHECK(value.is_number() && value.get<double>() > 0,
                      m_where << ": " << path << key << ": expected a positive number, got " << json::shown(value));
        return value.get<double>();
    }
    std::int64_t count(const Json& parent, const std::string& key, const std::string& path = "") const {
        const double value = number(parent, key, path);
        TESSERA_CHECK(value == static_cast<double>(static_cast<std::int64_t>(value)),
                      m_where << ": " << path << key << ": expected a whole number, got " << value);
        return static_cast<std::int64_t>(value);
    }
    // One of two words: the case's value for `key`, else `fallback`.
    std::string either(const Json& parent, const std::string& key, const std::string& path, const char* first, const char* second,
                       const char* fallback) const {
        if (!parent.contains(key)) return fallback;
        const std::string value = text(parent, key, path);
        TESSERA_CHECK(value == first || value == second, m_where << ": " << path << key << ": expected \"" << first << "\" or \""
                                                                 << second << "\", got \"" << value << "\"");
        return value;
    }
    const Json& root() const { return m_value; }
    const std::string& where() const { return m_where; }

private:
    std::string m_where;
    const Json& m_value;
};

// Tessera's builders need extents divisible by the model's total stride: the published size is rounded
// up (an unpadded U-Net's 572² input, a detector's 800×1333), and the approximation recorded.
std::int64_t rounded_up(std::int64_t extent, std::int64_t multiple) { return (extent + multiple - 1) / multiple * multiple; }

// The model's fields by kind; returns the total stride its builder needs the extents divisible by.
std::int64_t read_model(const CaseReader& read, const Json& model, PublishedCase& c) {
    std::int64_t stride = 1;
    // A ResNeXt (the model itself, or a detector's backbone): its cardinality and first-stage group width.
    const auto read_groups = [&] {
        if (!model.contains("groups") && !model.contains("width_per_group")) return false;
        c.groups = read.count(model, "groups", "model.");
        c.width_per_group = read.count(model, "width_per_group", "model.");
        return true;
    };
    if (c.model_kind == "resnet") {
        c.depth = static_cast<int>(read.count(model, "depth", "model."));
        c.num_classes = read.count(model, "num_classes", "model.");
        read_groups();
        stride = 32;
    } else if (c.model_kind == "unet") {
        c.depth = static_cast<int>(read.count(model, "depth", "model."));
        c.base_width = read.count(model, "base_width", "model.");
        c.num_classes = read.count(model, "num_classes", "model.");
        if (model.contains("max_width")) c.max_width = read.count(model, "max_width", "model.");
        if (model.contains("batch_norm")) c.batch_norm = model["batch_norm"].get<bool>();
        if (model.value("normalization", "batch") == "instance") {
            c.batch_norm = true;
            c.approximations.push_back("instance norm read as batch norm");
        }
        c.valid_padding = read.either(model, "padding", "model.", "same", "valid", "same") == "valid";
        if (model.contains("up_kernel")) c.up_kernel = read.count(model, "up_kernel", "model.");
        c.strided_downsampling = read.either(model, "downsampling", "model.", "max_pool", "strided_conv", "max_pool") == "strided_conv";
        if (model.contains("head_kernel")) c.head_kernel = read.count(model, "head_kernel", "model.");
        stride = c.valid_padding ? 1 : std::int64_t{1} << (c.depth - 1);
    } else if (c.model_kind == "retinanet") {
        c.depth = static_cast<int>(read.count(model, "backbone_depth", "model."));
        c.num_classes = read.count(model, "num_classes", "model.");
        if (model.contains("fpn_channels")) c.fpn_channels = read.count(model, "fpn_channels", "model.");
        if (model.contains("num_anchors")) c.num_anchors = read.count(model, "num_anchors", "model.");
        if (!read_groups() && model.contains("backbone")) {
            c.approximations.push_back("backbone " + model["backbone"].get<std::string>() + " read as ResNet");
        }
        // A pretrained backbone fine-tuned: its first stages train nothing, its batch norms are fixed affines.
        if (model.contains("frozen_stages")) {
            const std::int64_t frozen = read.count(model, "frozen_stages", "model.");
            TESSERA_CHECK(frozen <= 5, read.where() << ": model.frozen_stages: expected 1 (the stem) to 5 (every stage), got " << frozen);
            c.untrained.push_back("stem.");
            for (std::int64_t stage = 1; stage < frozen; ++stage) c.untrained.push_back("stage" + std::to_string(stage) + ".");
        } else if (model.contains("frozen_backbone_stages")) {
            c.approximations.push_back("frozen backbone stages trained");
        }
        if (model.value("frozen_backbone_batch_norm", false)) c.frozen_batch_norm = {"stem.", "stage"};
        // The pyramid as the source builds it: torchvision's and detectron2's have no batch norms.
        c.fpn_batch_norm = model.value("fpn_batch_norm", true);
        c.head_batch_norm = model.value("head_batch_norm", true);
        c.p6_from_c5 = model.value("p6_from_c5", false);
        c.round_up_coarse_levels = read.either(model, "coarse_levels", "model.", "exact", "round_up", "exact") == "round_up";
        stride = c.round_up_coarse_levels ? 32 : 128;
    } else {
        TESSERA_REJECT(read.where() << ": model.kind: expected \"resnet\", \"unet\" or \"retinanet\", got \"" << c.model_kind << "\"");
    }
    return stride;
}

// Extents the builder can use: rounded up to the stride (or to an unpadded U-Net's valid input), the
// approximation recorded.
void round_extents(std::vector<std::int64_t>& extents, std::int64_t stride, PublishedCase& c) {
    bool rounded = false;
    for (std::int64_t& extent : extents) {
        const std::int64_t up = c.valid_padding ? networks::valid_unet_input({.depth = c.depth, .head_kernel = c.head_kernel}, extent)
                                                : rounded_up(extent, stride);
        rounded = rounded || up != extent;
        extent = up;
    }
    if (rounded && c.valid_padding) c.approximations.push_back("input rounded up to an extent the unpadded U-Net can use");
    if (rounded && !c.valid_padding) c.approximations.push_back("input rounded up to a multiple of " + std::to_string(stride));

}

// Devices, cores and the spatial split (input_partition_dims, channels last).
void read_layout(const CaseReader& read, const Json& value, std::size_t spatial_axes, PublishedCase& c) {
    c.device = read.text(value, "device");
    c.num_cores = read.count(value, "num_cores");
    c.num_cores_per_replica = value.contains("num_cores_per_replica") ? read.count(value, "num_cores_per_replica") : 1;
    TESSERA_CHECK(c.num_cores % c.num_cores_per_replica == 0,
                  read.where() << ": num_cores " << c.num_cores << " is not a multiple of num_cores_per_replica " << c.num_cores_per_replica);
    c.spatial_pieces.assign(spatial_axes, 1);
    if (value.contains("input_partition_dims") && !value["input_partition_dims"].is_null()) {
        const Json& dims = value["input_partition_dims"];
        TESSERA_CHECK(dims.is_array() && dims.size() == spatial_axes + 2,
                      read.where() << ": input_partition_dims: expected " << spatial_axes + 2 << " entries (channels last), got "
                                   << json::shown(dims));
        std::int64_t product = 1;
        for (std::size_t axis = 0; axis < spatial_axes; ++axis) {
            c.spatial_pieces[axis] = dims[axis + 1].get<std::int64_t>();
            product *= c.spatial_pieces[axis];
        }
        TESSERA_CHECK(product == c.num_cores_per_replica, read.where() << ": input_partition_dims " << json::shown(dims)
                                                                       << " split into " << product << " pieces, but num_cores_per_replica is "
                                                                       << c.num_cores_per_replica);
    }
}

// Precision (tf32: f32 storage on the TF32 tensor cores), fusion and the convolutions' layout.
void read_numerics(const CaseReader& read, const Json& value, PublishedCase& c) {
    const std::string precision = read.text(value, "precision");
    if (precision == "bf16") c.precision = graph::Precision::BF16;
    else if (precision == "f16") c.precision = graph::Precision::F16;
    else if (precision == "f32") c.precision = graph::Precision::F32;
    else if (precision == "tf32") {  // f32 storage, convolutions on the TF32 tensor cores
        c.precision = graph::Precision::F32;
        c.tf32 = true;
    } else {
        TESSERA_REJECT(read.where() << ": precision: expected bf16, f16, f32 or tf32, got \"" << precision << "\"");
    }

    c.framework = read.text(value, "framework");
    const std::string fusion = read.text(value, "fusion");
    const auto fusion_named =
        named_value(fusion,
                    {cost::ElementwiseFusion::None, cost::ElementwiseFusion::Chains, cost::ElementwiseFusion::IntoConvolutions,
                     cost::ElementwiseFusion::ConvolutionStatistics, cost::ElementwiseFusion::ConvolutionMainLoop},
                    cost::fusion_name);
    if (fusion_named) c.fusion = *fusion_named;
    TESSERA_CHECK(fusion_named, read.where() << ": fusion: expected \"none\" (eager, one kernel per op), \"chains\" (XLA on a GPU), "
                                         "\"into_convolutions\" (XLA on a TPU), \"convolution_statistics\" or \"convolution_main_loop\" "
                                         "(NVIDIA's NormConvolution ResNets), got \"" << fusion << "\"");

    if (value.contains("conv_layout")) {  // optional: channels-last unless the case says otherwise
        const std::string layout = read.text(value, "conv_layout");
        const auto layout_named =
            named_value(layout, {cost::ConvLayout::ChannelsLast, cost::ConvLayout::ChannelsFirst, cost::ConvLayout::Xla}, cost::conv_layout_name);
        if (layout_named) c.conv_layout = *layout_named;
        TESSERA_CHECK(layout_named, read.where() << ": conv_layout: expected \"channels_last\" (NHWC), \"channels_first\" (NCHW) or "
                                                    "\"xla\" (XLA on a GPU chooses per convolution), got \"" << layout << "\"");
    }
}

// The published figure as seconds per step, and its source.
void read_measurement(const CaseReader& read, const Json& value, std::int64_t batch, PublishedCase& c) {
    const Json& measured = read.field(value, "measured", "");
    const double figure = read.number(measured, "value", "measured.");
    const std::string unit = read.text(measured, "unit", "measured.");
    if (unit == "ms/step") c.published_step_seconds = figure * 1e-3;
    else if (unit == "images/s" || unit == "samples/s") c.published_step_seconds = static_cast<double>(batch) / figure;
    else TESSERA_REJECT(read.where() << ": measured.unit: expected ms/step, images/s or samples/s, got \"" << unit << "\"");
    std::ostringstream shown;
    shown << figure << ' ' << unit;
    c.measured = shown.str();
    const Json& source = read.field(value, "source", "");
    c.source = read.text(source, "title", "source.") + " (" + source.value("authors_or_org", "") + ", " +
               std::to_string(source.value("year", 0)) + ")";
}

PublishedCase read_case(const Json& value, const std::string& file) {
    PublishedCase c;
    c.file = file;
    TESSERA_CHECK(value.is_object() && value.contains("name") && value["name"].is_string(),
                  file << ": a case is not an object with a \"name\": " << value.dump().substr(0, 120));
    c.name = value["name"].get<std::string>();
    const CaseReader read(file + ": case \"" + c.name + "\"", value);

    const Json& model = read.field(value, "model", "");
    c.model_kind = read.text(model, "kind", "model.");
    const Json& input = read.field(value, "input", "");
    const std::int64_t channels = read.count(input, "channels", "input.");
    const Json& size = read.field(input, "size", "input.");
    TESSERA_CHECK(size.is_array() && (size.size() == 2 || size.size() == 3),
                  read.where() << ": input.size: expected [H, W] or [D, H, W], got " << json::shown(size));
    std::vector<std::int64_t> extents;
    for (const Json& extent : size) {
        TESSERA_CHECK(extent.is_number_integer() && extent.get<std::int64_t>() > 0,
                      read.where() << ": input.size: expected positive whole numbers, got " << json::shown(size));
        extents.push_back(extent.get<std::int64_t>());
    }

    const std::int64_t stride = read_model(read, model, c);
    round_extents(extents, stride, c);
    const std::int64_t batch = read.count(value, "global_batch");
    c.global_input = {batch, channels};
    c.global_input.insert(c.global_input.end(), extents.begin(), extents.end());
    read_layout(read, value, extents.size(), c);
    read_numerics(read, value, c);
    read_measurement(read, value, batch, c);
    return c;
}

}  // namespace

std::vector<PublishedCase> load_published_cases(const fs::path& folder) {
    TESSERA_CHECK(file_kind(folder) == FileKind::Folder, "'" << folder.string() << "' is not a folder of published cases");
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(folder)) {
        if (entry.path().extension() == ".json") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    std::vector<PublishedCase> cases;
    for (const fs::path& path : files) {
        const std::string name = path.filename().string();
        const Json root = json::parse_json_strictly(read_user_text_file(path, "published-case file"), name);
        TESSERA_CHECK(root.is_object() && root.contains("cases") && root["cases"].is_array(),
                      name << ": expected {\"cases\": [...]}");
        for (const Json& value : root["cases"]) cases.push_back(read_case(value, name));
    }
    return cases;
}

graph::Graph build_published_model(const PublishedCase& c, const Shape& replica_input) {
    if (c.model_kind == "resnet") {
        return networks::make_resnet({.depth = c.depth, .num_classes = c.num_classes, .groups = c.groups, .width_per_group = c.width_per_group},
                                     replica_input);
    }
    if (c.model_kind == "unet") {
        return networks::make_unet({.depth = c.depth, .base_width = c.base_width, .num_classes = c.num_classes, .batch_norm = c.batch_norm,
                                 .max_width = c.max_width,
                                 .downsampling = c.strided_downsampling ? networks::UNetConfig::Downsampling::StridedConv
                                                                        : networks::UNetConfig::Downsampling::MaxPool,
                                 .head_kernel = c.head_kernel,
                                 .padding = c.valid_padding ? networks::UNetConfig::Padding::Valid : networks::UNetConfig::Padding::Same,
                                 .up_kernel = c.up_kernel},
                                replica_input);
    }
    TESSERA_ASSERT(c.model_kind == "retinanet", "unknown published model kind " << c.model_kind);
    return networks::make_retinanet({.resnet_depth = c.depth, .resnet_groups = c.groups, .resnet_width_per_group = c.width_per_group,
                                  .num_classes = c.num_classes, .num_anchors = c.num_anchors, .fpn_channels = c.fpn_channels,
                                  .p6_from_c5 = c.p6_from_c5, .fpn_batch_norm = c.fpn_batch_norm, .head_batch_norm = c.head_batch_norm,
                                  .round_up_coarse_levels = c.round_up_coarse_levels},
                                 replica_input);
}

PublishedPrediction predict_published(const PublishedCase& c) {
    const cost::CostModel model(cost::load_device_preset(c.device));
    cost::PlannerRequest request;
    request.global_input = c.global_input;
    request.core_budget = c.num_cores;
    request.simulation.precision = c.precision;
    request.simulation.tf32 = c.tf32;
    request.simulation.fusion = c.fusion;
    request.simulation.conv_layout = c.conv_layout;
    request.simulation.untrained = c.untrained;
    request.simulation.frozen_batch_norm = c.frozen_batch_norm;
    request.simulation.optimizer_slots = 1;  // SGD with momentum, as every published setup here trains (LARS for MLPerf ResNet)
    // Every framework here all-reduces gradients in buckets while backward goes on (PyTorch DDP,
    // Horovod tensor fusion, MXNet, XLA's asynchronous collectives).
    request.simulation.overlap_gradient_all_reduce = true;
    request.simulation.record_timeline = false;
    const std::int64_t replicas = c.num_cores / c.num_cores_per_replica;
    Shape replica_input = c.global_input;
    TESSERA_CHECK(replica_input[0] % replicas == 0, c.name << ": the global batch " << replica_input[0] << " does not split over "
                                                           << replicas << " replicas");
    replica_input[0] /= replicas;
    const partition::SpatialGrid grid = partition::SpatialGrid::even(replica_input, c.spatial_pieces);
    const cost::ModelFactory factory = [&c](const Shape& input) { return build_published_model(c, input); };
    PublishedPrediction prediction;
    prediction.plan = cost::plan_layout(factory, request, model, replicas, grid);
    prediction.predicted_step_seconds = prediction.plan.step_seconds;
    prediction.error = prediction.predicted_step_seconds / c.published_step_seconds - 1;
    return prediction;
}

}  // namespace tessera::experiment
