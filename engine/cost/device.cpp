#include "cost/device.hpp"

#include "core/error.hpp"
#include "core/json_support.hpp"
#include "core/user_files.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>
#include <system_error>
#include <utility>

namespace tessera::cost {

namespace {

using namespace tessera::json;

// ---- units ------------------------------------------------------------------------------------

struct Unit {
    std::string_view name;
    double factor;  // to SI
};

// The units one kind of figure may be written in, e.g. every unit of bandwidth.
struct Dimension {
    std::string_view what;  // "bandwidth": for "expected a unit of bandwidth (...)"
    std::vector<Unit> units;
    // Largest value a real device could have, in SI units (1,000× beyond today's largest): a figure
    // past it is a typo (1e308 FLOP/s) that would make every prediction meaningless.
    double plausible_max = 1e300;
    std::string_view plausible_text = "";
};

const Dimension k_core_count{"core count", {{"cores", 1.0}}};
const Dimension k_link_count{"link count", {{"links", 1.0}}};
const Dimension k_chip_count{"chip count", {{"chips", 1.0}}};
const Dimension k_flops{"compute throughput", {{"TFLOP/s", 1e12}, {"GFLOP/s", 1e9}}, 1e18, "1,000,000 TFLOP/s per core"};
const Dimension k_memory{"memory size",
                         {{"GiB", 1073741824.0}, {"GB", 1e9}, {"MiB", 1048576.0}, {"MB", 1e6}}, 0x1p62, "2^62 bytes"};
const Dimension k_bandwidth{"bandwidth", {{"GB/s", 1e9}, {"TB/s", 1e12}, {"MB/s", 1e6}, {"Gb/s", 1e9 / 8}}, 1e16, "10,000 TB/s"};
const Dimension k_time{"time", {{"us", 1e-6}, {"ns", 1e-9}, {"ms", 1e-3}, {"s", 1.0}, {"µs", 1e-6}}, 60, "60 s"};
const Dimension k_channels{"channel count", {{"channels", 1.0}}};
const Dimension k_elements{"element count", {{"elements", 1.0}}};
const Dimension k_fraction{"fraction", {{"fraction", 1.0}}};
const Dimension k_factor{"factor", {{"x", 1.0}}, 16, "16x"};

// What a figure's value may be.
enum class Range {
    Positive,         // > 0
    NonNegative,      // >= 0 (latencies, overheads: zero is an ideal link)
    PositiveInteger,  // 1, 2, 3 … (counts, tiles)
    Fraction,         // (0, 1]
};

// ---- messages ---------------------------------------------------------------------------------

std::string unit_list(const Dimension& dimension) {
    std::vector<std::string_view> names;
    for (const Unit& unit : dimension.units)
        if (unit.name != "µs") names.push_back(unit.name);  // an alias of "us", not advertised
    return listed(names);
}

// ---- the reader -------------------------------------------------------------------------------

class Reader {
public:
    Reader(std::string file, Device& device) : m_file(std::move(file)), m_device(device) {}

    [[noreturn]] void fail(std::string_view path, const std::string& message) const {
        if (path.empty()) TESSERA_REJECT(m_file << ": " << message);
        TESSERA_REJECT(m_file << ": " << path << ": " << message);
    }

    // Every key of `object` is one of `known`; an unknown one is reported with the closest known key.
    void check_keys(const Json& object, std::string_view path, const std::vector<std::string_view>& known) const {
        for (const auto& item : object.items()) {
            if (std::find(known.begin(), known.end(), item.key()) != known.end()) continue;
            fail(join_path(path, item.key()), "unknown key" + did_you_mean_key(item.key(), known));
        }
    }

    const Json& object_member(const Json& parent, std::string_view path, std::string_view key,
                              std::string_view example) const {
        const std::string here = join_path(path, key);
        const auto it = parent.find(key);
        if (it == parent.end()) fail(here, "missing (every preset needs it, e.g. " + std::string(example) + ")");
        if (!it->is_object()) fail(here, "expected an object like " + std::string(example) + ", got " + type_name(*it));
        return *it;
    }

    std::string string_member(const Json& parent, std::string_view key, std::string_view example) const {
        const auto it = parent.find(key);
        if (it == parent.end()) fail(key, "missing (every preset needs it, e.g. " + std::string(example) + ")");
        if (!it->is_string()) fail(key, "expected a string, got " + type_name(*it));
        return it->get<std::string>();
    }

    // One of a closed set of strings.
    std::string choice_member(const Json& parent, std::string_view key, const std::vector<std::string_view>& allowed) const {
        std::vector<std::string> quoted_allowed;
        for (std::string_view name : allowed) quoted_allowed.push_back(in_quotes(name));
        const std::string one_of = "one of " + listed(quoted_allowed);
        const auto it = parent.find(key);
        if (it == parent.end()) fail(key, "missing (every preset needs it: " + one_of + ")");
        if (!it->is_string()) fail(key, "expected " + one_of + ", got " + type_name(*it));
        const std::string value = it->get<std::string>();
        if (std::find(allowed.begin(), allowed.end(), value) == allowed.end())
            fail(key, "expected " + one_of + ", got " + in_quotes(value));
        return value;
    }

    // A figure {"value": v, "unit": u, "source": s}, converted to SI; its source is recorded.
    double figure(const Json& parent, std::string_view parent_path, std::string_view key, const Dimension& dimension,
                  Range range, std::string_view example) {
        const std::string path = join_path(parent_path, key);
        const auto it = parent.find(key);
        if (it == parent.end()) fail(path, "missing (every preset needs it, e.g. " + std::string(example) + ")");
        const Json& fig = *it;
        if (!fig.is_object())
            fail(path, "expected a figure like " + std::string(example) + ", got " + type_name(fig));
        check_keys(fig, path, {"value", "unit", "source"});

        // Source first: a figure nobody can trace is the mistake presets exist to prevent.
        const auto source = fig.find("source");
        if (source == fig.end())
            fail(path, "source must say where the figure comes from (a data sheet, a paper, or \"estimate: "
                       "<reasoning>\"); \"source\" is missing");
        if (!source->is_string())
            fail(path, "source must say where the figure comes from, as a string; got " + type_name(*source));
        const std::string source_text = source->get<std::string>();
        if (std::all_of(source_text.begin(), source_text.end(),
                        [](unsigned char c) { return std::isspace(c) != 0; }))
            fail(path, "source must say where the figure comes from (a data sheet, a paper, or \"estimate: "
                       "<reasoning>\"); it is empty");

        const auto unit = fig.find("unit");
        if (unit == fig.end())
            fail(path, "missing \"unit\" (expected a unit of " + std::string(dimension.what) + ": " +
                           unit_list(dimension) + ")");
        if (!unit->is_string())
            fail(path, "expected a unit of " + std::string(dimension.what) + " (" + unit_list(dimension) +
                           "), got " + type_name(*unit));
        const std::string unit_name = unit->get<std::string>();
        const auto match = std::find_if(dimension.units.begin(), dimension.units.end(),
                                        [&](const Unit& u) { return u.name == unit_name; });
        if (match == dimension.units.end())
            fail(path, "expected a unit of " + std::string(dimension.what) + " (" + unit_list(dimension) +
                           "), got " + in_quotes(unit_name));

        const auto value = fig.find("value");
        if (value == fig.end()) fail(path, "missing \"value\" (e.g. " + std::string(example) + ")");
        if (!value->is_number()) fail(path, "value must be a number, got " + type_name(*value));
        const double v = value->get<double>();
        if (!std::isfinite(v)) fail(path, "value must be a finite number, got " + shown(*value));
        switch (range) {
            case Range::Positive:
                if (!(v > 0)) fail(path, "value must be positive, got " + shown(*value));
                break;
            case Range::NonNegative:
                if (v < 0) fail(path, "value must not be negative, got " + shown(*value));
                break;
            case Range::PositiveInteger:
                if (!(v > 0)) fail(path, "value must be positive, got " + shown(*value));
                if (v != std::floor(v)) fail(path, "value must be a whole number, got " + shown(*value));
                if (v > 1e9) fail(path, "value is implausibly large, got " + shown(*value));
                break;
            case Range::Fraction:
                if (!(v > 0 && v <= 1)) fail(path, "value must be a fraction in (0, 1], got " + shown(*value));
                break;
        }

        if (v * match->factor > dimension.plausible_max) {
            fail(path, "value " + shown(*value) + " " + unit_name + " is implausibly large for a " + std::string(dimension.what) +
                           " (more than " + std::string(dimension.plausible_text) + "): check the number and its unit");
        }
        m_device.sources.push_back(path + ": " + source_text);
        return v * match->factor;
    }

    std::int64_t count(const Json& parent, std::string_view parent_path, std::string_view key,
                       const Dimension& dimension, std::string_view example) {
        return static_cast<std::int64_t>(
            std::llround(figure(parent, parent_path, key, dimension, Range::PositiveInteger, example)));
    }

    std::int64_t bytes(const Json& parent, std::string_view key, std::string_view example) {
        const double value = figure(parent, "", key, k_memory, Range::Positive, example);
        if (value >= 0x1p62) {
            std::ostringstream shown_bytes;
            shown_bytes << value;
            fail(key, "value is implausibly large (" + shown_bytes.str() + " bytes)");
        }
        return static_cast<std::int64_t>(std::llround(value));
    }

private:
    std::string m_file;
    Device& m_device;
};

Device parse_device_named(const std::string& json_text, const std::string& id, const std::string& file) {
    const Json root = parse_json_strictly(json_text, file);
    Device device;
    device.id = id;
    Reader reader(file, device);
    if (!root.is_object()) reader.fail("", "expected a JSON object {\"name\": …, \"kind\": …, …}, got " + type_name(root));

    reader.check_keys(root, "",
                      {"name", "kind", "cores_per_chip", "peak_flops_per_core", "memory_per_core",
                       "memory_bandwidth_per_core", "link", "network", "topology", "kernel_overhead", "efficiency", "measured",
                       "notes"});

    device.name = reader.string_member(root, "name", "\"name\": \"TPU v3\"");
    if (device.name.empty()) reader.fail("name", "must not be empty (e.g. \"TPU v3\")");
    device.kind = reader.choice_member(root, "kind", {"tpu", "gpu", "host"});

    device.cores_per_chip = reader.count(root, "", "cores_per_chip", k_core_count,
                                         R"({"value": 2, "unit": "cores", "source": "..."})");

    const Json& peak = reader.object_member(root, "", "peak_flops_per_core",
                                            R"({"f32": {...}, "bf16": {...}, "f16": {...}})");
    reader.check_keys(peak, "peak_flops_per_core", {"f32", "bf16", "f16", "tf32"});
    constexpr std::string_view flops_example = R"({"value": 61.5, "unit": "TFLOP/s", "source": "..."})";
    device.peak_flops_f32 = reader.figure(peak, "peak_flops_per_core", "f32", k_flops, Range::Positive, flops_example);
    device.peak_flops_bf16 = reader.figure(peak, "peak_flops_per_core", "bf16", k_flops, Range::Positive, flops_example);
    device.peak_flops_f16 = reader.figure(peak, "peak_flops_per_core", "f16", k_flops, Range::Positive, flops_example);
    // Optional: only devices with TF32 tensor cores (A100, H100) have it.
    if (peak.contains("tf32")) {
        device.peak_flops_tf32 = reader.figure(peak, "peak_flops_per_core", "tf32", k_flops, Range::Positive, flops_example);
    }

    device.memory_per_core =
        reader.bytes(root, "memory_per_core", R"({"value": 16, "unit": "GiB", "source": "..."})");
    device.memory_bandwidth = reader.figure(root, "", "memory_bandwidth_per_core", k_bandwidth, Range::Positive,
                                            R"({"value": 450, "unit": "GB/s", "source": "..."})");

    const Json& link = reader.object_member(root, "", "link",
                                            R"({"bandwidth": {...}, "latency": {...}, "links_per_chip": {...}})");
    reader.check_keys(link, "link", {"bandwidth", "latency", "links_per_chip"});
    device.link_bandwidth = reader.figure(link, "link", "bandwidth", k_bandwidth, Range::Positive,
                                          R"({"value": 650, "unit": "Gb/s", "source": "..."})");
    device.link_latency = reader.figure(link, "link", "latency", k_time, Range::NonNegative,
                                        R"({"value": 1, "unit": "us", "source": "..."})");
    device.links_per_chip = reader.count(link, "link", "links_per_chip", k_link_count,
                                         R"({"value": 4, "unit": "links", "source": "..."})");

    // Optional: GPUs in nodes of a few, nodes joined by a network slower than NVLink.
    if (root.contains("network")) {
        const Json& network = reader.object_member(root, "", "network", R"({"chips_per_node": {...}, "bandwidth_per_chip": {...}})");
        reader.check_keys(network, "network", {"chips_per_node", "bandwidth_per_chip"});
        device.chips_per_node = reader.count(network, "network", "chips_per_node", k_chip_count,
                                             R"({"value": 8, "unit": "chips", "source": "..."})");
        device.network_bandwidth = reader.figure(network, "network", "bandwidth_per_chip", k_bandwidth, Range::Positive,
                                                 R"({"value": 25, "unit": "GB/s", "source": "..."})");
    }

    const std::string topology = reader.choice_member(root, "topology", {"torus2d", "torus3d", "nvlink_node", "host"});
    for (Topology t : {Topology::Torus2D, Topology::Torus3D, Topology::NvlinkNode, Topology::Host})
        if (topology_name(t) == topology) device.topology = t;

    device.kernel_overhead = reader.figure(root, "", "kernel_overhead", k_time, Range::NonNegative,
                                           R"({"value": 5, "unit": "us", "source": "..."})");

    const Json& efficiency = reader.object_member(
        root, "", "efficiency",
        R"({"channel_tile": {...}, "spatial_tile": {...}, "matmul": {...}, "memory": {...}, "link": {...}})");
    reader.check_keys(efficiency, "efficiency", {"channel_tile", "spatial_tile", "matmul", "memory", "link", "winograd_3x3"});
    device.efficiency.channel_tile = reader.count(efficiency, "efficiency", "channel_tile", k_channels,
                                                  R"({"value": 128, "unit": "channels", "source": "..."})");
    device.efficiency.spatial_tile = reader.count(efficiency, "efficiency", "spatial_tile", k_elements,
                                                  R"({"value": 8, "unit": "elements", "source": "..."})");
    constexpr std::string_view fraction_example = R"({"value": 0.6, "unit": "fraction", "source": "..."})";
    device.efficiency.matmul =
        reader.figure(efficiency, "efficiency", "matmul", k_fraction, Range::Fraction, fraction_example);
    device.efficiency.memory =
        reader.figure(efficiency, "efficiency", "memory", k_fraction, Range::Fraction, fraction_example);
    device.efficiency.link = reader.figure(efficiency, "efficiency", "link", k_fraction, Range::Fraction, fraction_example);
    if (efficiency.contains("winograd_3x3")) {  // optional: GPUs with Winograd f32 kernels
        device.efficiency.winograd_3x3 = reader.figure(efficiency, "efficiency", "winograd_3x3", k_factor, Range::Positive,
                                                       R"({"value": 2.25, "unit": "x", "source": "..."})");
        if (device.efficiency.winograd_3x3 < 1)
            reader.fail("efficiency.winograd_3x3",
                        "value must be at least 1 (a factor by which Winograd's algorithm cuts the arithmetic), got " +
                            shown(efficiency.at("winograd_3x3").at("value")));
    }

    if (const auto measured = root.find("measured"); measured != root.end()) {
        if (!measured->is_object())
            reader.fail("measured", "expected an object of name -> number, got " + type_name(*measured));
        for (const auto& item : measured->items()) {
            const std::string path = join_path("measured", item.key());
            if (!item.value().is_number()) reader.fail(path, "expected a number, got " + type_name(item.value()));
            const double v = item.value().get<double>();
            if (!std::isfinite(v) || v < 0)
                reader.fail(path, "expected a finite, non-negative number, got " + shown(item.value()));
            device.measured[item.key()] = v;
        }
    }
    if (const auto notes = root.find("notes"); notes != root.end() && !notes->is_string())
        reader.fail("notes", "expected a string, got " + type_name(*notes));

    return device;
}

bool is_plain_id(const std::string& id) {
    return !id.empty() && id != "." && id != ".." && id.find('/') == std::string::npos &&
           id.find('\\') == std::string::npos;
}

}  // namespace

double Device::peak_flops(graph::Precision precision) const {
    switch (precision) {
        case graph::Precision::F32: return peak_flops_f32;
        case graph::Precision::BF16: return peak_flops_bf16;
        case graph::Precision::F16: return peak_flops_f16;
    }
    TESSERA_FAIL("unknown precision " << static_cast<int>(precision));
}

double Device::peak_flops(graph::Precision precision, bool tf32) const {
    return precision == graph::Precision::F32 && tf32 && peak_flops_tf32 > 0 ? peak_flops_tf32 : peak_flops(precision);
}

std::string_view topology_name(Topology topology) {
    switch (topology) {
        case Topology::Torus2D: return "torus2d";
        case Topology::Torus3D: return "torus3d";
        case Topology::NvlinkNode: return "nvlink_node";
        case Topology::Host: return "host";
    }
    TESSERA_FAIL("unknown topology " << static_cast<int>(topology));
}

Device parse_device(const std::string& json_text, const std::string& id) {
    return parse_device_named(json_text, id, id + ".json");
}

Device load_device_file(const std::filesystem::path& path) {
    return parse_device_named(read_user_text_file(path, "device file"), path.stem().string(), path.filename().string());
}

std::filesystem::path devices_directory() {
    if (const char* dir = std::getenv("TESSERA_DEVICES_DIR"); dir != nullptr && *dir != '\0')
        return std::filesystem::path(dir);
    return std::filesystem::path(TESSERA_RESOURCE_DIR) / "devices";
}

std::vector<std::string> device_preset_ids() {
    const std::filesystem::path dir = devices_directory();
    const char* env = std::getenv("TESSERA_DEVICES_DIR");
    const bool from_env = env != nullptr && *env != '\0';
    std::error_code error;
    TESSERA_CHECK(std::filesystem::is_directory(dir, error),
                  "device preset directory \"" << dir.string() << "\" does not exist"
                                               << (from_env ? " (it comes from $TESSERA_DEVICES_DIR)" : ""));
    std::vector<std::string> ids;
    for (std::filesystem::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
        const std::filesystem::path& file = it->path();
        std::error_code file_error;
        if (file.extension() == ".json" && it->is_regular_file(file_error)) ids.push_back(file.stem().string());
    }
    TESSERA_CHECK(!error, "cannot list device preset directory \"" << dir.string() << "\": " << error.message());
    std::sort(ids.begin(), ids.end());
    return ids;
}

Device load_device_preset(const std::string& id) {
    TESSERA_CHECK(is_plain_id(id), "device preset id " << in_quotes(id)
                                        << " is not a preset name like \"tpu_v3\"; load a file by path with "
                                           "load_device_file");
    const std::vector<std::string> ids = device_preset_ids();
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) {
        const std::filesystem::path dir = devices_directory();
        if (ids.empty()) TESSERA_REJECT("no device preset " << in_quotes(id) << " in \"" << dir.string() << "\": it holds no presets");
        const Closest best = closest(id, std::vector<std::string_view>(ids.begin(), ids.end()));
        TESSERA_REJECT("no device preset " << in_quotes(id) << " in \"" << dir.string() << "\"; available: " << listed(ids)
                                           << (best.is_close ? "; did you mean " + in_quotes(best.name) + "?" : ""));
    }
    return load_device_file(devices_directory() / (id + ".json"));
}

}  // namespace tessera::cost
