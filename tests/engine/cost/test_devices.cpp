// Device presets: every shipped preset loads with the figures of the design notes (DESIGN.md §3), and a
// malformed file is refused with a message that names the field.
#include "cost/device.hpp"
#include "core/error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace tessera::cost {
namespace {

namespace fs = std::filesystem;

constexpr double k_gib = 1024.0 * 1024.0 * 1024.0;

const fs::path k_source_devices = fs::path(TESSERA_SOURCE_DIR) / "resources" / "devices";

// Runs each test with $TESSERA_DEVICES_DIR unset (so the source tree's presets are used) and puts
// back whatever the environment had.
class DevicesTest : public ::testing::Test {
protected:
    void SetUp() override {
        if (const char* dir = std::getenv("TESSERA_DEVICES_DIR")) m_saved = dir;
        unsetenv("TESSERA_DEVICES_DIR");
    }
    void TearDown() override {
        if (m_saved) {
            setenv("TESSERA_DEVICES_DIR", m_saved->c_str(), 1);
        } else {
            unsetenv("TESSERA_DEVICES_DIR");
        }
    }

private:
    std::optional<std::string> m_saved;
};

std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// The message of the error `parse_device(text, id)` throws; fails the test when none is thrown.
std::string parse_error(const std::string& text, const std::string& id = "tpu_v3") {
    try {
        parse_device(text, id);
    } catch (const Error& error) {
        EXPECT_FALSE(error.is_internal()) << error.what();
        return error.what();
    }
    ADD_FAILURE() << "no error for:\n" << text;
    return {};
}

// The shipped tpu_v3 preset with `from` replaced by `to` (which must occur exactly once).
std::string edited_v3(const std::string& from, const std::string& to) {
    std::string text = read_text(k_source_devices / "tpu_v3.json");
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << "tpu_v3.json has no " << from;
    EXPECT_EQ(text.find(from, at + 1), std::string::npos) << "tpu_v3.json has " << from << " twice";
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return text;
}

#define EXPECT_MESSAGE_HAS(message, part) \
    EXPECT_NE((message).find(part), std::string::npos) << "expected \"" << (part) << "\" in: " << (message)

// ---- the shipped presets ----------------------------------------------------------------------

struct Expected {
    std::string id;
    std::string kind;
    std::int64_t cores_per_chip;
    double f32, bf16, f16;  // FLOP/s per core
    double tf32;             // FLOP/s per core on TF32 tensor cores; 0: none
    std::int64_t memory;     // bytes per core
    double memory_bandwidth; // bytes/s per core
    double link_bandwidth;   // bytes/s per link, one direction
    double link_latency;     // s
    std::int64_t links_per_chip;
    Topology topology;
    double kernel_overhead;  // s
    EfficiencyModel efficiency;
};

const EfficiencyModel k_tpu_efficiency{128, 8, 0.6, 0.8, 0.7};
const EfficiencyModel k_gpu_efficiency{64, 1, 0.6, 0.8, 0.6, 2.25};  // Winograd on the CUDA cores

std::vector<Expected> expected_presets() {
    return {
        {"tpu_v2", "tpu", 2, 22.5e12 / 4, 22.5e12, 22.5e12 / 4, 0, std::int64_t{8} << 30, 350e9, 62e9, 1e-6, 4,
         Topology::Torus2D, 2e-6, k_tpu_efficiency},
        {"tpu_v3", "tpu", 2, 61.5e12 / 4, 61.5e12, 61.5e12 / 4, 0, std::int64_t{16} << 30, 450e9, 650e9 / 8, 1e-6, 4,
         Topology::Torus2D, 2e-6, k_tpu_efficiency},
        {"tpu_v4", "tpu", 1, 275e12 / 4, 275e12, 275e12 / 4, 0, std::int64_t{32} << 30, 1200e9, 50e9, 1e-6, 6,
         Topology::Torus3D, 2e-6, k_tpu_efficiency},
        {"v100", "gpu", 1, 15.7e12, 15.7e12, 125e12, 0, std::int64_t{16} << 30, 900e9, 25e9, 1e-6, 6,
         Topology::NvlinkNode, 5e-6, k_gpu_efficiency},
        {"a100_40gb", "gpu", 1, 19.5e12, 312e12, 312e12, 156e12, 40'000'000'000, 1555e9, 25e9, 1e-6, 12,
         Topology::NvlinkNode, 5e-6, k_gpu_efficiency},
        {"a100_80gb", "gpu", 1, 19.5e12, 312e12, 312e12, 156e12, 80'000'000'000, 2039e9, 25e9, 1e-6, 12,
         Topology::NvlinkNode, 5e-6, k_gpu_efficiency},
        {"h100", "gpu", 1, 67e12, 989e12, 989e12, 494.7e12, 80'000'000'000, 3350e9, 25e9, 1e-6, 18, Topology::NvlinkNode,
         5e-6, k_gpu_efficiency},
    };
}

const std::vector<std::string> k_figure_paths = {
    "cores_per_chip",         "peak_flops_per_core.f32", "peak_flops_per_core.bf16",
    "peak_flops_per_core.f16", "memory_per_core",        "memory_bandwidth_per_core",
    "link.bandwidth",         "link.latency",            "link.links_per_chip",
    "kernel_overhead",        "efficiency.channel_tile", "efficiency.spatial_tile",
    "efficiency.matmul",      "efficiency.memory",       "efficiency.link",
};

TEST_F(DevicesTest, EveryPresetHasTheFiguresOfTheDesignNotes) {
    for (const Expected& e : expected_presets()) {
        SCOPED_TRACE(e.id);
        const Device d = load_device_preset(e.id);
        EXPECT_EQ(d.id, e.id);
        EXPECT_FALSE(d.name.empty());
        EXPECT_EQ(d.kind, e.kind);
        EXPECT_EQ(d.cores_per_chip, e.cores_per_chip);
        EXPECT_DOUBLE_EQ(d.peak_flops_f32, e.f32);
        EXPECT_DOUBLE_EQ(d.peak_flops_bf16, e.bf16);
        EXPECT_DOUBLE_EQ(d.peak_flops_f16, e.f16);
        EXPECT_DOUBLE_EQ(d.peak_flops(graph::Precision::F32), e.f32);
        EXPECT_DOUBLE_EQ(d.peak_flops(graph::Precision::BF16), e.bf16);
        EXPECT_DOUBLE_EQ(d.peak_flops(graph::Precision::F16), e.f16);
        EXPECT_DOUBLE_EQ(d.peak_flops_tf32, e.tf32);
        // TF32 math changes f32 convolutions only, and only where the device has TF32 tensor cores.
        EXPECT_DOUBLE_EQ(d.peak_flops(graph::Precision::F32, true), e.tf32 > 0 ? e.tf32 : e.f32);
        EXPECT_DOUBLE_EQ(d.peak_flops(graph::Precision::BF16, true), e.bf16);
        EXPECT_EQ(d.memory_per_core, e.memory);
        EXPECT_DOUBLE_EQ(d.memory_bandwidth, e.memory_bandwidth);
        EXPECT_DOUBLE_EQ(d.link_bandwidth, e.link_bandwidth);
        EXPECT_DOUBLE_EQ(d.link_latency, e.link_latency);
        EXPECT_EQ(d.links_per_chip, e.links_per_chip);
        EXPECT_EQ(d.topology, e.topology);
        EXPECT_DOUBLE_EQ(d.kernel_overhead, e.kernel_overhead);
        EXPECT_EQ(d.efficiency.channel_tile, e.efficiency.channel_tile);
        EXPECT_EQ(d.efficiency.spatial_tile, e.efficiency.spatial_tile);
        EXPECT_DOUBLE_EQ(d.efficiency.matmul, e.efficiency.matmul);
        EXPECT_DOUBLE_EQ(d.efficiency.memory, e.efficiency.memory);
        EXPECT_DOUBLE_EQ(d.efficiency.link, e.efficiency.link);
        EXPECT_DOUBLE_EQ(d.efficiency.winograd_3x3, e.efficiency.winograd_3x3);
        EXPECT_TRUE(d.measured.empty());

        // GPUs come in DGX nodes of 8 joined by InfiniBand; a TPU slice is one torus.
        EXPECT_EQ(d.chips_per_node, e.kind == "gpu" ? 8 : 0);
        EXPECT_EQ(d.network_bandwidth > 0, e.kind == "gpu");
        // Every figure names its source, once (the optional TF32 peak, network and Winograd factor too).
        EXPECT_EQ(d.sources.size(), k_figure_paths.size() + (e.tf32 > 0 ? 1 : 0) + (d.chips_per_node > 0 ? 2 : 0) +
                                        (d.efficiency.winograd_3x3 > 1 ? 1 : 0));
        for (const std::string& path : k_figure_paths) {
            const std::string prefix = path + ": ";
            const auto found = std::find_if(d.sources.begin(), d.sources.end(), [&](const std::string& s) {
                return s.rfind(prefix, 0) == 0 && s.size() > prefix.size() + 3;
            });
            EXPECT_NE(found, d.sources.end()) << "no source for " << path;
        }
    }
}

TEST_F(DevicesTest, TpuFiguresArePerCoreOfTheChipFigures) {
    // The design notes give chip figures; the presets hold per-core ones.
    const Device v3 = load_device_preset("tpu_v3");
    EXPECT_DOUBLE_EQ(v3.peak_flops_bf16 * static_cast<double>(v3.cores_per_chip), 123e12);
    EXPECT_EQ(v3.memory_per_core * v3.cores_per_chip, std::int64_t{32} << 30);
    EXPECT_DOUBLE_EQ(v3.memory_bandwidth * static_cast<double>(v3.cores_per_chip), 900e9);
    EXPECT_DOUBLE_EQ(static_cast<double>(v3.memory_per_core), 16 * k_gib);
    const Device v2 = load_device_preset("tpu_v2");
    EXPECT_DOUBLE_EQ(v2.peak_flops_bf16 * static_cast<double>(v2.cores_per_chip), 45e12);
}

TEST_F(DevicesTest, PresetIdsListTheSevenShippedPresets) {
    // The shipped presets; a host.json written by `tessera-cli calibrate` may sit beside them.
    std::vector<std::string> ids = device_preset_ids();
    ids.erase(std::remove(ids.begin(), ids.end(), "host"), ids.end());
    EXPECT_EQ(ids, (std::vector<std::string>{"a100_40gb", "a100_80gb", "h100", "tpu_v2", "tpu_v3", "tpu_v4", "v100"}));
    EXPECT_TRUE(fs::equivalent(devices_directory(), k_source_devices));
}

TEST_F(DevicesTest, TopologyNames) {
    EXPECT_EQ(topology_name(Topology::Torus2D), "torus2d");
    EXPECT_EQ(topology_name(Topology::Torus3D), "torus3d");
    EXPECT_EQ(topology_name(Topology::NvlinkNode), "nvlink_node");
    EXPECT_EQ(topology_name(Topology::Host), "host");
}

TEST_F(DevicesTest, LoadDeviceFileUsesTheFileStemAsId) {
    const Device d = load_device_file(k_source_devices / "h100.json");
    EXPECT_EQ(d.id, "h100");
    const Device parsed = parse_device(read_text(k_source_devices / "h100.json"), "my_h100");
    EXPECT_EQ(parsed.id, "my_h100");
    EXPECT_EQ(parsed.memory_per_core, d.memory_per_core);
}

// ---- malformed files --------------------------------------------------------------------------

TEST_F(DevicesTest, SyntaxErrorGivesTheBytePosition) {
    const std::string message = parse_error(edited_v3("\"kind\": \"tpu\",", "\"kind\": \"tpu\""));
    EXPECT_MESSAGE_HAS(message, "tpu_v3.json");
    EXPECT_MESSAGE_HAS(message, "not valid JSON at byte ");
    EXPECT_MESSAGE_HAS(message, "line 4");
    EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;

    const std::string empty = parse_error("", "empty");
    EXPECT_MESSAGE_HAS(empty, "empty.json: not valid JSON at byte");
}

TEST_F(DevicesTest, MissingFigureIsNamedWithAnExample) {
    const std::string message = parse_error(edited_v3(
        R"(  "memory_per_core": {"value": 16, "unit": "GiB", "source": "Cloud TPU system architecture: 32 GiB HBM per v3 chip, 2 cores"},
)",
        ""));
    EXPECT_MESSAGE_HAS(message, "tpu_v3.json: memory_per_core: missing (every preset needs it, e.g. "
                                R"({"value": 16, "unit": "GiB", "source": "..."}))");

    const std::string nested = parse_error(edited_v3(R"("f16": {)", R"("f17": {)"));
    EXPECT_MESSAGE_HAS(nested, "peak_flops_per_core.f17: unknown key; did you mean \"f16\"?");
}

TEST_F(DevicesTest, WrongUnitListsTheUnitsOfTheDimension) {
    const std::string message = parse_error(edited_v3(R"("value": 650, "unit": "Gb/s")", R"("value": 650, "unit": "GiB")"));
    EXPECT_MESSAGE_HAS(message, R"(tpu_v3.json: link.bandwidth: expected a unit of bandwidth (GB/s, TB/s, MB/s, Gb/s), got "GiB")");

    const std::string memory = parse_error(edited_v3(R"("value": 16, "unit": "GiB")", R"("value": 16, "unit": "GB/s")"));
    EXPECT_MESSAGE_HAS(memory, "memory_per_core: expected a unit of memory size (GiB, GB, MiB, MB), got \"GB/s\"");
}

TEST_F(DevicesTest, UnitsAreConvertedToSi) {
    const Device d = parse_device(edited_v3(R"("value": 16, "unit": "GiB")", R"("value": 16384, "unit": "MiB")"), "x");
    EXPECT_EQ(d.memory_per_core, std::int64_t{16} << 30);
    const Device ns = parse_device(edited_v3(R"("value": 1, "unit": "us")", R"("value": 1500, "unit": "ns")"), "x");
    EXPECT_DOUBLE_EQ(ns.link_latency, 1.5e-6);
    const Device tb = parse_device(edited_v3(R"("value": 450, "unit": "GB/s")", R"("value": 0.45, "unit": "TB/s")"), "x");
    EXPECT_DOUBLE_EQ(tb.memory_bandwidth, 450e9);
    const Device gflops =
        parse_device(edited_v3(R"("value": 61.5, "unit": "TFLOP/s")", R"("value": 61500, "unit": "GFLOP/s")"), "x");
    EXPECT_DOUBLE_EQ(gflops.peak_flops_bf16, 61.5e12);
}

TEST_F(DevicesTest, NegativeValueIsRefused) {
    const std::string message = parse_error(edited_v3(R"("value": 16, "unit": "GiB")", R"("value": -3, "unit": "GiB")"));
    EXPECT_MESSAGE_HAS(message, "tpu_v3.json: memory_per_core: value must be positive, got -3");

    const std::string count = parse_error(edited_v3(R"("value": 4, "unit": "links")", R"("value": 2.5, "unit": "links")"));
    EXPECT_MESSAGE_HAS(count, "link.links_per_chip: value must be a whole number, got 2.5");

    const std::string text = parse_error(edited_v3(R"("value": 450, "unit": "GB/s")", R"("value": "450", "unit": "GB/s")"));
    EXPECT_MESSAGE_HAS(text, "memory_bandwidth_per_core: value must be a number, got the string \"450\"");
}

TEST_F(DevicesTest, AWinogradFactorBelowOneIsRefused) {
    const std::string link = R"("link": {"value": 0.7, "unit": "fraction", "source": "estimate: Calculon-style ~60-70% of the nominal link bandwidth for transfers"})";
    const Device with = parse_device(edited_v3(link, link + R"(, "winograd_3x3": {"value": 2.25, "unit": "x", "source": "Lavin & Gray 2016"})"), "x");
    EXPECT_DOUBLE_EQ(with.efficiency.winograd_3x3, 2.25);
    EXPECT_DOUBLE_EQ(parse_device(read_text(k_source_devices / "tpu_v3.json"), "x").efficiency.winograd_3x3, 1.0);
    const std::string message =
        parse_error(edited_v3(link, link + R"(, "winograd_3x3": {"value": 0.5, "unit": "x", "source": "a typo"})"));
    EXPECT_MESSAGE_HAS(message, "tpu_v3.json: efficiency.winograd_3x3: value must be at least 1");
    EXPECT_MESSAGE_HAS(message, "got 0.5");
}

TEST_F(DevicesTest, MissingOrEmptySourceIsRefused) {
    const std::string missing = parse_error(
        edited_v3(R"(, "source": "Cloud TPU system architecture: 900 GB/s HBM per v3 chip, 2 cores")", ""));
    EXPECT_MESSAGE_HAS(missing, "tpu_v3.json: memory_bandwidth_per_core: source must say where the figure comes from");

    const std::string empty = parse_error(
        edited_v3(R"("source": "Cloud TPU system architecture: 900 GB/s HBM per v3 chip, 2 cores")", R"("source": "  ")"));
    EXPECT_MESSAGE_HAS(empty, "tpu_v3.json: memory_bandwidth_per_core: source must say where the figure comes from");
}

TEST_F(DevicesTest, UnknownKeySuggestsTheClosestKnownOne) {
    const std::string message = parse_error(edited_v3(R"("memory_per_core":)", R"("memory_per_cor":)"));
    EXPECT_MESSAGE_HAS(message, "tpu_v3.json: memory_per_cor: unknown key; did you mean \"memory_per_core\"?");

    const std::string far = parse_error(edited_v3(R"("notes":)", R"("zzzzzzzzzzzz":)"));
    EXPECT_MESSAGE_HAS(far, "zzzzzzzzzzzz: unknown key");
    EXPECT_MESSAGE_HAS(far, "known keys: name, kind,");

    const std::string in_figure = parse_error(edited_v3(R"("value": 16, "unit": "GiB")", R"("valeu": 16, "unit": "GiB")"));
    EXPECT_MESSAGE_HAS(in_figure, "memory_per_core.valeu: unknown key; did you mean \"value\"?");
}

TEST_F(DevicesTest, DuplicateKeyIsRefused) {
    const std::string message = parse_error(edited_v3(R"("kind": "tpu",)", R"("kind": "tpu", "kind": "gpu",)"));
    EXPECT_MESSAGE_HAS(message, "tpu_v3.json: kind: duplicate key");
}

TEST_F(DevicesTest, WrongTopologyListsTheAllowedOnes) {
    const std::string message = parse_error(edited_v3(R"("topology": "torus2d")", R"("topology": "torus")"));
    EXPECT_MESSAGE_HAS(message, R"(tpu_v3.json: topology: expected one of "torus2d", "torus3d", "nvlink_node", "host", got "torus")");

    const std::string kind = parse_error(edited_v3(R"("kind": "tpu")", R"("kind": "npu")"));
    EXPECT_MESSAGE_HAS(kind, R"(kind: expected one of "tpu", "gpu", "host", got "npu")");
}

TEST_F(DevicesTest, EfficiencyFractionAboveOneIsRefused) {
    const std::string message =
        parse_error(edited_v3(R"("value": 0.6, "unit": "fraction")", R"("value": 1.2, "unit": "fraction")"));
    EXPECT_MESSAGE_HAS(message, "tpu_v3.json: efficiency.matmul: value must be a fraction in (0, 1], got 1.2");
}

TEST_F(DevicesTest, MeasuredFiguresAreKept) {
    const Device d = parse_device(edited_v3(R"("topology": "torus2d")",
                                            R"("topology": "torus2d", "measured": {"conv_gflops": 160.5, "copy_gbps": 12})"),
                                  "x");
    ASSERT_EQ(d.measured.size(), 2u);
    EXPECT_DOUBLE_EQ(d.measured.at("conv_gflops"), 160.5);
    EXPECT_DOUBLE_EQ(d.measured.at("copy_gbps"), 12.0);

    const std::string message = parse_error(
        edited_v3(R"("topology": "torus2d")", R"("topology": "torus2d", "measured": {"conv_gflops": "fast"})"));
    EXPECT_MESSAGE_HAS(message, "measured.conv_gflops: expected a number, got the string \"fast\"");
}

TEST_F(DevicesTest, MissingPresetListsTheAvailableOnes) {
    try {
        load_device_preset("tpu_v5");
        ADD_FAILURE() << "no error for a missing preset";
    } catch (const Error& error) {
        const std::string message = error.what();
        EXPECT_MESSAGE_HAS(message, "no device preset \"tpu_v5\"");
        EXPECT_MESSAGE_HAS(message, "available: a100_40gb, a100_80gb, h100, tpu_v2, tpu_v3, tpu_v4, v100");
    }
}

TEST_F(DevicesTest, MissingFileNamesThePath) {
    const fs::path path = k_source_devices / "no_such_device.json";
    try {
        load_device_file(path);
        ADD_FAILURE() << "no error for a missing file";
    } catch (const Error& error) {
        const std::string message = error.what();
        EXPECT_MESSAGE_HAS(message, path.string());
        EXPECT_MESSAGE_HAS(message, "no such file");
    }
}

// ---- an edited copy through $TESSERA_DEVICES_DIR ----------------------------------------------

TEST_F(DevicesTest, EditedPresetInDevicesDirIsHonoured) {
    std::random_device random;
    const fs::path dir = fs::temp_directory_path() / ("tessera_devices_test_" + std::to_string(random()));
    fs::create_directories(dir);
    {
        std::ofstream out(dir / "tpu_v3.json", std::ios::binary);
        out << edited_v3(R"("value": 16, "unit": "GiB")", R"("value": 12, "unit": "GiB")");
    }
    {
        std::ofstream out(dir / "README.txt");  // not a preset
        out << "edited presets\n";
    }
    setenv("TESSERA_DEVICES_DIR", dir.c_str(), 1);

    EXPECT_EQ(devices_directory(), dir);
    EXPECT_EQ(device_preset_ids(), std::vector<std::string>{"tpu_v3"});
    const Device v3 = load_device_preset("tpu_v3");
    EXPECT_EQ(v3.memory_per_core, std::int64_t{12} << 30);
    EXPECT_DOUBLE_EQ(v3.peak_flops_bf16, 61.5e12);
    try {
        load_device_preset("h100");
        ADD_FAILURE() << "h100 is not in the edited directory";
    } catch (const Error& error) {
        EXPECT_MESSAGE_HAS(std::string(error.what()), "available: tpu_v3");
    }

    std::error_code ignored;
    fs::remove_all(dir, ignored);
}

}  // namespace
}  // namespace tessera::cost
