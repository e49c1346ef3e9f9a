#include "experiment/experiment_edit.hpp"

#include "core/error.hpp"
#include "core/json_support.hpp"

#include <algorithm>
#include <variant>

namespace tessera::experiment {

namespace {

using Ordered = nlohmann::ordered_json;

constexpr std::size_t k_line_width = 120;  // columns a nested value may fill before it is spread over lines

// Where the schema lists its fields: a new field goes after the last one before it that the file has.
const std::vector<std::string_view>& schema_order(std::string_view parent) {
    static const std::vector<std::string_view> root = {"version",
                                                       "name",
                                                       "notes",
                                                       "model",
                                                       "input",
                                                       "global_batch",
                                                       "num_cores_per_replica",
                                                       "num_replicas",
                                                       "input_partition_dims",
                                                       "tile_boundaries",
                                                       "per_host_input_for_training",
                                                       "device",
                                                       "precision",
                                                       "optimizer",
                                                       "data",
                                                       "schedule",
                                                       "loss",
                                                       "loss_scale",
                                                       "steps",
                                                       "steps_per_eval",
                                                       "steps_per_checkpoint",
                                                       "keep_checkpoints",
                                                       "reduction",
                                                       "evaluation",
                                                       "model_dir",
                                                       "seed"};
    static const std::vector<std::string_view> model = {"kind",         "depth",          "base_width",   "num_classes",
                                                        "batch_norm",   "max_width",      "downsampling", "head_kernel",
                                                        "fpn_channels", "num_anchors",    "fpn_batch_norm", "head_batch_norm",
                                                        "groups",       "width_per_group", "coarse_levels"};
    static const std::vector<std::string_view> input = {"channels", "size"};
    static const std::vector<std::string_view> none;
    if (parent.empty()) return root;
    if (parent == "model") return model;
    if (parent == "input") return input;
    return none;
}

// Sets object[key], keeping its place when present; a new key goes where schema_order puts it (else last).
void put(Ordered& object, const std::string& key, Ordered value, std::string_view parent) {
    if (const auto it = object.find(key); it != object.end()) {
        *it = std::move(value);
        return;
    }
    const auto& order = schema_order(parent);
    const auto position = std::find(order.begin(), order.end(), key);
    if (position == order.end()) {
        object[key] = std::move(value);
        return;
    }
    // The last field of the file that the schema lists before `key`.
    std::string after;
    bool found = false;
    for (const auto& item : object.items()) {
        if (std::find(order.begin(), position, item.key()) != position) {
            after = item.key();
            found = true;
        }
    }
    Ordered rebuilt = Ordered::object();
    if (!found) rebuilt[key] = value;
    for (auto& item : object.items()) {
        rebuilt[item.key()] = std::move(item.value());
        if (found && item.key() == after) rebuilt[key] = value;
    }
    object = std::move(rebuilt);
}

// Sets the field, or leaves it out when the file does not have it and the value is the schema's default.
void put_unless_default(Ordered& object, const std::string& key, const Ordered& value, const Ordered& fallback) {
    if (!object.contains(key) && value == fallback) return;
    put(object, key, value, "");
}

Ordered parse_ordered(const std::string& text, const std::string& what) {
    json::parse_json_strictly(text, what);  // syntax and duplicate keys, with the byte, line and column
    Ordered root = Ordered::parse(text);
    TESSERA_CHECK(root.is_object(), what << ": expected a JSON object with the experiment's fields, got "
                                         << json::type_name(json::Json::parse(text)));
    return root;
}

// ---- the writer ----------------------------------------------------------------------------------

std::size_t display_width(std::string_view text) {
    // UTF-8: count the bytes that start a character.
    return static_cast<std::size_t>(
        std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string scalar_text(const Ordered& value) {
    return value.dump(-1, ' ', false, Ordered::error_handler_t::replace);
}

std::string inline_text(const Ordered& value) {
    if (value.is_object()) {
        if (value.empty()) return "{}";
        std::string out = "{";
        bool first = true;
        for (const auto& item : value.items()) {
            out.append(first ? "" : ", ")
                .append(scalar_text(Ordered(item.key())))
                .append(": ")
                .append(inline_text(item.value()));
            first = false;
        }
        return out.append("}");
    }
    if (value.is_array()) {
        if (value.empty()) return "[]";
        std::string out = "[";
        for (std::size_t i = 0; i < value.size(); ++i) out.append(i ? ", " : "").append(inline_text(value[i]));
        return out.append("]");
    }
    return scalar_text(value);
}

// `used`: columns already taken on the line (indentation and key).
void write_value(std::string& out, const Ordered& value, std::size_t indent, std::size_t used, bool spread) {
    const bool structured = value.is_object() || value.is_array();
    if (!structured || value.empty() || !spread) {
        const std::string text = inline_text(value);
        if (!structured || value.empty() || used + display_width(text) + 1 <= k_line_width) {
            out.append(text);
            return;
        }
    }
    const std::string inner(indent + 2, ' ');
    out.append(value.is_object() ? "{\n" : "[\n");
    std::size_t i = 0;
    if (value.is_object()) {
        for (const auto& item : value.items()) {
            const std::string key = scalar_text(Ordered(item.key())).append(": ");
            out.append(inner).append(key);
            write_value(out, item.value(), indent + 2, indent + 2 + display_width(key), false);
            out.append(++i < value.size() ? ",\n" : "\n");
        }
    } else {
        for (const Ordered& element : value) {
            out.append(inner);
            write_value(out, element, indent + 2, indent + 2, false);
            out.append(++i < value.size() ? ",\n" : "\n");
        }
    }
    out.append(indent, ' ').append(value.is_object() ? "}" : "]");
}

// ---- JSON paths ----------------------------------------------------------------------------------

using Segment = std::variant<std::string, std::size_t>;  // an object key or an array index

std::vector<Segment> parse_path(std::string_view path) {
    auto malformed = [&](std::string_view why) {
        TESSERA_REJECT("the JSON path '" << path << "' is malformed: " << why
                                         << "; write keys separated by dots and array indices in brackets, e.g. "
                                            "\"model.base_width\" or \"tile_boundaries[0][1]\"");
    };
    std::vector<Segment> segments;
    std::size_t i = 0;
    if (path.empty()) malformed("it is empty");
    while (i < path.size()) {
        const std::size_t start = i;
        while (i < path.size() && path[i] != '.' && path[i] != '[') ++i;
        if (i == start) malformed("a key is empty");
        segments.emplace_back(std::string(path.substr(start, i - start)));
        while (i < path.size() && path[i] == '[') {
            const std::size_t close = path.find(']', i);
            if (close == std::string_view::npos) malformed("a '[' is not closed");
            const std::string_view digits = path.substr(i + 1, close - i - 1);
            if (digits.empty() ||
                !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
                digits.size() > 9) {
                malformed("an index is not a whole number");
            }
            segments.emplace_back(static_cast<std::size_t>(std::stoul(std::string(digits))));
            i = close + 1;
        }
        if (i < path.size()) {
            if (path[i] != '.') malformed("expected '.' or '[' after an index");
            ++i;
            if (i == path.size()) malformed("it ends with '.'");
        }
    }
    return segments;
}

std::string segment_text(const Segment& segment) {
    if (const auto* key = std::get_if<std::string>(&segment)) return *key;
    return std::string("[").append(std::to_string(std::get<std::size_t>(segment))).append("]");
}

// ---- partition edits -----------------------------------------------------------------------------

// The spatial piece counts of one side of input_partition_dims as written ([1, p…, 1] or null), or
// nullopt when it is something else.
std::optional<std::vector<std::int64_t>> written_pieces(const Ordered& side, std::size_t rank) {
    if (side.is_null()) return std::vector<std::int64_t>(rank, 1);
    if (!side.is_array() || side.size() != rank + 2) return std::nullopt;
    std::vector<std::int64_t> pieces;
    for (std::size_t axis = 1; axis <= rank; ++axis) {
        if (!side[axis].is_number_integer()) return std::nullopt;
        pieces.push_back(side[axis].get<std::int64_t>());
    }
    return pieces;
}

}  // namespace

std::string format_experiment_json(const nlohmann::ordered_json& root) {
    std::string out;
    write_value(out, root, 0, 0, true);
    return out.append("\n");
}

PartitionEdit partition_edit_of(const Experiment& e) {
    PartitionEdit edit;
    edit.num_cores_per_replica = e.partition.num_cores_per_replica;
    edit.num_replicas = e.partition.num_replicas;
    edit.global_batch = e.global_batch;
    edit.pieces = spatial_pieces(e);
    if (e.grid && !is_even_split(*e.grid, e.size)) edit.uneven = e.grid;
    edit.input_size = e.size;
    edit.device = e.device;
    edit.precision = std::string(precision_name(e.precision));
    return edit;
}

std::string apply_partition_edit(const std::string& experiment_json, const PartitionEdit& edit) {
    const std::size_t rank = edit.input_size.size();
    TESSERA_CHECK(rank == 2 || rank == 3,
                  "a partition edit needs input_size as [H, W] or [D, H, W], got " << shape_to_string(edit.input_size));
    TESSERA_CHECK(edit.pieces.size() == rank, "a partition edit needs one piece count per spatial axis of input_size "
                                                  << shape_to_string(edit.input_size) << ", got pieces "
                                                  << shape_to_string(edit.pieces));
    Ordered root = parse_ordered(experiment_json, "the experiment to edit");

    if (!root.contains("input") || !root["input"].is_object()) put(root, "input", Ordered::object(), "");
    put(root["input"], "size", edit.input_size, "input");
    put(root, "global_batch", edit.global_batch, "");
    put_unless_default(root, "num_cores_per_replica", edit.num_cores_per_replica, 1);
    put_unless_default(root, "num_replicas", edit.num_replicas, 1);

    // input_partition_dims: the features part channels last; the labels part as it was, re-cut when split.
    const bool splits = std::any_of(edit.pieces.begin(), edit.pieces.end(), [](std::int64_t p) { return p > 1; });
    Ordered features = Ordered::array({1});
    for (std::int64_t p : edit.pieces) features.push_back(p);
    features.push_back(1);
    const auto dims = root.find("input_partition_dims");
    if (dims != root.end() && dims->is_array() && !dims->empty() && dims->size() <= 2) {
        Ordered& sides = *dims;
        if (written_pieces(sides[0], rank) != edit.pieces) sides[0] = features;
        if (sides.size() == 2 && sides[1].is_array() && sides[1].size() == rank + 1) {
            bool labels_split = false;
            for (const Ordered& d : sides[1])
                labels_split = labels_split || (d.is_number_integer() && d.get<std::int64_t>() > 1);
            if (labels_split) {
                Ordered labels = Ordered::array({1});
                for (std::int64_t p : edit.pieces) labels.push_back(p);
                sides[1] = labels;
            }
        }
    } else if (dims != root.end() || splits) {
        put(root, "input_partition_dims", Ordered::array({features, nullptr}), "");
    }

    if (edit.uneven && !is_even_split(*edit.uneven, edit.input_size)) {
        put(root, "tile_boundaries", edit.uneven->boundaries, "");
    } else {
        root.erase("tile_boundaries");
    }
    if (splits) {
        const auto host = root.find("per_host_input_for_training");
        if (host != root.end() && *host != "PER_HOST_V2") *host = "PER_HOST_V2";  // spatial partitioning requires it
    }
    put_unless_default(root, "device", edit.device, "tpu_v3");
    put_unless_default(root, "precision", edit.precision, "f32");

    std::string text = format_experiment_json(root);
    try {
        parse_experiment(text, "the edited experiment");
    } catch (const Error& error) {
        TESSERA_REJECT("this partition design cannot be written into the experiment: " << error.what());
    }
    return text;
}

std::string set_experiment_field(const std::string& json, std::string_view json_path, const nlohmann::json& value) {
    const std::vector<Segment> segments = parse_path(json_path);
    Ordered root = parse_ordered(json, "the experiment to edit");
    const Ordered new_value(value);
    const bool removing = value.is_null();
    Ordered* node = &root;
    std::string here;  // the path walked so far, for messages and the schema's field order
    auto not_a = [&](std::string_view wanted) {
        TESSERA_REJECT("cannot set " << json_path << ": " << (here.empty() ? "the experiment" : here) << " is "
                                     << json::type_name(json::Json::parse(node->dump())) << ", not " << wanted << "; set "
                                     << (here.empty() ? "the experiment" : here) << " itself first");
    };
    for (std::size_t i = 0; i < segments.size(); ++i) {
        const bool last = i + 1 == segments.size();
        const std::string parent = here;
        if (const auto* key = std::get_if<std::string>(&segments[i])) {
            if (!node->is_object()) not_a("an object");
            here = json::join_path(here, *key);
            const auto it = node->find(*key);
            if (last) {
                if (removing) {
                    node->erase(*key);
                } else {
                    put(*node, *key, new_value, parent);
                }
                break;
            }
            if (it == node->end()) {
                if (removing) break;  // nothing there to remove
                if (std::holds_alternative<std::size_t>(segments[i + 1])) {
                    TESSERA_REJECT("cannot set " << json_path << ": " << here << " does not exist, so it has no element "
                                                 << segment_text(segments[i + 1]) << "; set " << here
                                                 << " to a list first");
                }
                put(*node, *key, Ordered::object(), parent);
            }
            node = &(*node)[*key];
        } else {
            const std::size_t index = std::get<std::size_t>(segments[i]);
            if (!node->is_array()) not_a("a list");
            const std::string list = here;
            here.append(segment_text(segments[i]));
            if (last) {
                if (removing) {
                    if (index < node->size()) node->erase(index);
                } else if (index < node->size()) {
                    (*node)[index] = new_value;
                } else if (index == node->size()) {
                    node->push_back(new_value);
                } else {
                    TESSERA_REJECT("cannot set " << json_path << ": " << list << " has " << node->size()
                                                 << " elements; use an index from 0 to " << node->size() << " ("
                                                 << node->size() << " appends)");
                }
                break;
            }
            if (index >= node->size()) {
                if (removing) break;
                TESSERA_REJECT("cannot set " << json_path << ": " << list << " has " << node->size()
                                             << " elements, so there is no " << here);
            }
            node = &(*node)[index];
        }
    }
    return format_experiment_json(root);
}

}  // namespace tessera::experiment
