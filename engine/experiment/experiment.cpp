#include "experiment/experiment.hpp"

#include "core/error.hpp"
#include "core/json_support.hpp"
#include "cost/device.hpp"
#include "model/models.hpp"
#include "model/retinanet.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace tessera::experiment {

namespace {

using namespace tessera::json;

// Reads fields at JSON paths; every error names the file and the path.
class Reader {
public:
    explicit Reader(std::string origin) : m_origin(std::move(origin)) {}

    [[noreturn]] void fail(std::string_view path, const std::string& message) const {
        TESSERA_FAIL(m_origin << ": " << path << ": " << message);
    }

    void check_fields(const Json& object, std::string_view path, const std::vector<std::string_view>& known) const {
        for (const auto& item : object.items()) {
            if (std::find(known.begin(), known.end(), item.key()) != known.end()) continue;
            fail(join_path(path, item.key()), "unknown field" + did_you_mean_key(item.key(), known));
        }
    }

    const Json* find(const Json& parent, std::string_view key) const {
        const auto it = parent.find(key);
        return it == parent.end() ? nullptr : &*it;
    }

    const Json& object(const Json& parent, std::string_view path, std::string_view key, std::string_view example) const {
        const Json* value = find(parent, key);
        const std::string here = join_path(path, key);
        if (!value) fail(here, "missing; e.g. " + std::string(example));
        if (!value->is_object()) fail(here, "expected an object such as " + std::string(example) + ", got " + type_name(*value));
        return *value;
    }

    std::int64_t integer(const Json& parent, std::string_view path, std::string_view key, std::int64_t minimum,
                         std::int64_t maximum, std::optional<std::int64_t> fallback) const {
        const Json* value = find(parent, key);
        const std::string here = join_path(path, key);
        std::ostringstream range;
        range << "an integer from " << minimum << " to " << maximum;
        if (!value) {
            if (fallback) return *fallback;
            fail(here, "missing; expected " + range.str());
        }
        if (!value->is_number_integer()) fail(here, "expected " + range.str() + ", got " + type_name(*value));
        const auto v = value->get<std::int64_t>();
        if (v < minimum || v > maximum) fail(here, "expected " + range.str() + ", got " + shown(*value));
        return v;
    }

    double number(const Json& parent, std::string_view path, std::string_view key, double minimum, double maximum,
                  double fallback) const {
        const Json* value = find(parent, key);
        if (!value) return fallback;
        const std::string here = join_path(path, key);
        std::ostringstream range;
        range << "a number from " << minimum << " to " << maximum;
        if (!value->is_number()) fail(here, "expected " + range.str() + ", got " + type_name(*value));
        const double v = value->get<double>();
        if (!(v >= minimum && v <= maximum)) fail(here, "expected " + range.str() + ", got " + shown(*value));
        return v;
    }

    bool boolean(const Json& parent, std::string_view path, std::string_view key, bool fallback) const {
        const Json* value = find(parent, key);
        if (!value) return fallback;
        if (!value->is_boolean()) fail(join_path(path, key), "expected true or false, got " + type_name(*value));
        return value->get<bool>();
    }

    std::string choice(const Json& parent, std::string_view path, std::string_view key,
                       const std::vector<std::string_view>& allowed, std::optional<std::string> fallback) const {
        const Json* value = find(parent, key);
        const std::string here = join_path(path, key);
        std::vector<std::string> quoted;
        for (std::string_view a : allowed) quoted.push_back(in_quotes(a));
        const std::string one_of = "one of " + listed(quoted);
        if (!value) {
            if (fallback) return *fallback;
            fail(here, "missing; expected " + one_of);
        }
        if (!value->is_string()) fail(here, "expected " + one_of + ", got " + type_name(*value));
        const std::string text = value->get<std::string>();
        if (std::find(allowed.begin(), allowed.end(), text) == allowed.end()) {
            const Closest best = closest(text, allowed);
            fail(here, "expected " + one_of + ", got " + in_quotes(text) +
                           (best.is_close ? "; did you mean " + in_quotes(best.name) + "?" : std::string()));
        }
        return text;
    }

    const std::string& origin() const { return m_origin; }

private:
    std::string m_origin;
};

// JSON's input_partition_dims, written as TPUConfig text for the partition parser: null → None.
std::string partition_text(const Json& value) {
    if (value.is_null()) return "None";
    if (value.is_array()) {
        std::string out = "[";
        for (std::size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + partition_text(value[i]);
        return out + "]";
    }
    if (value.is_object()) {
        std::string out = "{";
        bool first = true;
        for (const auto& item : value.items()) {
            out += (first ? "'" : ", '") + item.key() + "': " + partition_text(item.value());
            first = false;
        }
        return out + "}";
    }
    return value.dump();
}

}  // namespace

std::string_view precision_name(graph::Precision precision) {
    switch (precision) {
        case graph::Precision::F32: return "f32";
        case graph::Precision::BF16: return "bf16";
        case graph::Precision::F16: return "f16";
    }
    return "?";
}

Experiment parse_experiment(const std::string& json_text, const std::string& origin) {
    const Reader read(origin);
    const Json root = parse_json_strictly(json_text, origin);
    if (!root.is_object()) TESSERA_FAIL(origin << ": expected a JSON object with the experiment's fields, got " << type_name(root));
    read.check_fields(root, "", {"version", "name", "notes", "model", "input", "global_batch", "num_cores_per_replica",
                                 "num_replicas", "input_partition_dims", "per_host_input_for_training", "device",
                                 "precision", "optimizer"});
    Experiment e;
    e.origin = origin;
    e.version = static_cast<int>(read.integer(root, "", "version", 1, 1, std::nullopt));
    if (const Json* name = read.find(root, "name")) {
        if (!name->is_string()) read.fail("name", "expected a string, got " + type_name(*name));
        e.name = name->get<std::string>();
    }

    // model
    const Json& model = read.object(root, "", "model", R"({"kind": "unet", "depth": 4, "base_width": 32, "num_classes": 2})");
    const std::string kind = read.choice(model, "model", "kind", {"unet", "resnet", "retinanet"}, std::nullopt);
    if (kind == "unet") {
        read.check_fields(model, "model", {"kind", "depth", "base_width", "num_classes", "batch_norm"});
        e.model.kind = ModelKind::UNet;
        e.model.depth = static_cast<int>(read.integer(model, "model", "depth", 2, 7, 4));
        e.model.base_width = read.integer(model, "model", "base_width", 1, 1024, 32);
        e.model.num_classes = read.integer(model, "model", "num_classes", 2, 1000, 2);
        e.model.batch_norm = read.boolean(model, "model", "batch_norm", true);
    } else if (kind == "resnet") {
        read.check_fields(model, "model", {"kind", "depth", "base_width", "num_classes"});
        e.model.kind = ModelKind::ResNet;
        e.model.depth = static_cast<int>(read.integer(model, "model", "depth", 18, 200, 50));
        e.model.base_width = read.integer(model, "model", "base_width", 1, 1024, 64);
        e.model.num_classes = read.integer(model, "model", "num_classes", 2, 100000, 1000);
    } else {
        read.check_fields(model, "model", {"kind", "depth", "num_classes", "fpn_channels", "num_anchors"});
        e.model.kind = ModelKind::RetinaNet;
        e.model.depth = static_cast<int>(read.integer(model, "model", "depth", 18, 200, 50));
        e.model.num_classes = read.integer(model, "model", "num_classes", 1, 100000, 90);
        e.model.fpn_channels = read.integer(model, "model", "fpn_channels", 1, 4096, 256);
        e.model.num_anchors = read.integer(model, "model", "num_anchors", 1, 100, 9);
    }

    // input
    const Json& input = read.object(root, "", "input", R"({"channels": 1, "size": [256, 256, 256]})");
    read.check_fields(input, "input", {"channels", "size"});
    e.channels = read.integer(input, "input", "channels", 1, 4096, 1);
    const Json* size = read.find(input, "size");
    if (!size) read.fail("input.size", "missing; expected the spatial extents, [H, W] or [D, H, W], e.g. [512, 512]");
    const bool volumes_allowed = e.model.kind == ModelKind::UNet;
    if (!size->is_array() || size->size() < 2 || size->size() > (volumes_allowed ? 3u : 2u)) {
        read.fail("input.size", std::string("expected ") + (volumes_allowed ? "[H, W] or [D, H, W]" : "[H, W] (this model is 2D)") +
                                    " as positive integers, got " + shown(*size));
    }
    for (std::size_t axis = 0; axis < size->size(); ++axis) {
        const Json& extent = (*size)[axis];
        if (!extent.is_number_integer() || extent.get<std::int64_t>() < 1) {
            read.fail("input.size[" + std::to_string(axis) + "]", "expected a positive integer, got " + type_name(extent));
        }
        e.size.push_back(extent.get<std::int64_t>());
    }

    // cores and batch
    e.global_batch = read.integer(root, "", "global_batch", 1, 1 << 20, std::nullopt);
    e.partition.num_cores_per_replica = read.integer(root, "", "num_cores_per_replica", 1, 1 << 16, 1);
    e.partition.num_replicas = read.integer(root, "", "num_replicas", 1, 1 << 16, 1);
    if (e.global_batch % e.partition.num_replicas != 0) {
        std::ostringstream message;
        message << "expected a multiple of num_replicas (" << e.partition.num_replicas << ") so every replica gets the same batch, got "
                << e.global_batch << "; use " << (e.global_batch / e.partition.num_replicas + 1) * e.partition.num_replicas;
        read.fail("global_batch", message.str());
    }
    const std::string host_input = read.choice(root, "", "per_host_input_for_training",
                                               {"PER_HOST_V2", "PER_HOST_V1", "PER_SHARD_V1", "BROADCAST"}, "PER_HOST_V2");
    e.partition.per_host_input_v2 = host_input == "PER_HOST_V2";
    if (const Json* dims = read.find(root, "input_partition_dims")) {
        if (!dims->is_array() || dims->empty() || dims->size() > 2) {
            read.fail("input_partition_dims", "expected [features_dims, labels_dims] as in TPUConfig, e.g. [[1, 4, 1, 1], null], got " + shown(*dims));
        }
        try {
            const auto [features, labels] = partition::parse_input_partition_dims(partition_text(*dims));
            e.partition.features = features;
            e.partition.labels = labels;
        } catch (const Error& error) {
            read.fail("input_partition_dims", error.what());
        }
    }
    // The pipeline's tensors, channels last as TPUConfig sees them.
    const std::int64_t replica_batch = e.global_batch / e.partition.num_replicas;
    Shape features{replica_batch};
    features.insert(features.end(), e.size.begin(), e.size.end());
    features.push_back(e.channels);
    Shape labels{replica_batch};
    if (e.model.kind == ModelKind::UNet) labels.insert(labels.end(), e.size.begin(), e.size.end());
    try {
        partition::validate(e.partition, partition::InputSignature::tensor(features), partition::InputSignature::tensor(labels));
    } catch (const Error& error) {
        read.fail("input_partition_dims", error.what());
    }

    // device, precision, optimizer
    const std::vector<std::string> presets = cost::device_preset_ids();
    std::vector<std::string_view> preset_views(presets.begin(), presets.end());
    e.device = read.choice(root, "", "device", preset_views, "tpu_v3");
    const std::string precision = read.choice(root, "", "precision", {"f32", "bf16", "f16"}, "f32");
    e.precision = precision == "bf16" ? graph::Precision::BF16 : precision == "f16" ? graph::Precision::F16 : graph::Precision::F32;
    if (const Json* optimizer = read.find(root, "optimizer")) {
        if (!optimizer->is_object()) read.fail("optimizer", "expected an object such as {\"kind\": \"sgd\", \"momentum\": 0.9}, got " + type_name(*optimizer));
        read.check_fields(*optimizer, "optimizer", {"kind", "momentum", "nesterov", "beta1", "beta2", "epsilon", "weight_decay"});
        const std::string optimizer_kind = read.choice(*optimizer, "optimizer", "kind", {"sgd", "adam", "adamw"}, "sgd");
        e.optimizer.kind = optimizer_kind == "adam" ? train::OptimizerKind::Adam
                          : optimizer_kind == "adamw" ? train::OptimizerKind::AdamW : train::OptimizerKind::Sgd;
        e.optimizer.momentum = read.number(*optimizer, "optimizer", "momentum", 0.0, 0.999999, 0.9);
        e.optimizer.nesterov = read.boolean(*optimizer, "optimizer", "nesterov", false);
        e.optimizer.beta1 = read.number(*optimizer, "optimizer", "beta1", 0.0, 0.999999, 0.9);
        e.optimizer.beta2 = read.number(*optimizer, "optimizer", "beta2", 0.0, 0.999999, 0.999);
        e.optimizer.epsilon = read.number(*optimizer, "optimizer", "epsilon", 1e-12, 1.0, 1e-8);
        e.optimizer.weight_decay = read.number(*optimizer, "optimizer", "weight_decay", 0.0, 1.0, 0.0);
        try {
            train::validate(e.optimizer);
        } catch (const Error& error) {
            read.fail("optimizer", error.what());
        }
    }
    // The model must build for this input (a U-Net needs extents divisible by 2^(depth−1), …).
    try {
        build_model(e, replica_input_shape(e));
    } catch (const Error& error) {
        read.fail("input.size", error.what());
    }
    return e;
}

Experiment load_experiment(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    TESSERA_CHECK(in, "cannot read the experiment file '" << path.string() << "': no such file, or not readable");
    std::ostringstream text;
    text << in.rdbuf();
    return parse_experiment(text.str(), path.filename().string());
}

Shape global_input_shape(const Experiment& e) {
    Shape shape{e.global_batch, e.channels};
    shape.insert(shape.end(), e.size.begin(), e.size.end());
    return shape;
}

Shape replica_input_shape(const Experiment& e) {
    Shape shape = global_input_shape(e);
    shape[0] /= e.partition.num_replicas;
    return shape;
}

graph::Graph build_model(const Experiment& e, const Shape& input) {
    switch (e.model.kind) {
        case ModelKind::UNet:
            return model::make_unet({.depth = e.model.depth, .base_width = e.model.base_width,
                                     .num_classes = e.model.num_classes, .batch_norm = e.model.batch_norm},
                                    input);
        case ModelKind::ResNet:
            return model::make_resnet({.depth = e.model.depth, .num_classes = e.model.num_classes, .base_width = e.model.base_width},
                                      input);
        case ModelKind::RetinaNet: {
            model::RetinaNetConfig config;
            config.resnet_depth = e.model.depth;
            config.num_classes = e.model.num_classes;
            config.fpn_channels = e.model.fpn_channels;
            config.num_anchors = e.model.num_anchors;
            return model::make_retinanet(config, input);
        }
    }
    TESSERA_FAIL("unknown model kind");
}

std::vector<std::int64_t> spatial_pieces(const Experiment& e) {
    std::vector<std::int64_t> pieces(e.size.size(), 1);
    if (e.partition.features.is_dict() || e.partition.features.single().is_none()) return pieces;
    const auto& dims = *e.partition.features.single().dims;  // [N, spatial…, C]
    for (std::size_t axis = 0; axis < pieces.size() && axis + 1 < dims.size(); ++axis) pieces[axis] = dims[axis + 1];
    return pieces;
}

}  // namespace tessera::experiment
