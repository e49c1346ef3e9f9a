// Device presets: what the cost model knows about an accelerator (or this host), read from editable
// JSON files under resources/devices/ (figures and sources: ../shared/DESIGN.md §3).
//
// Every figure in a file is an object with its value, its unit and where it came from, so a preset
// documents itself and a unit mistake is caught on load:
//
//   "memory_per_core": {"value": 16, "unit": "GiB", "source": "Cloud TPU system architecture: 32 GiB per v3 chip, 2 cores"}
//
//   Device v3 = load_device_preset("tpu_v3");                 // resources/devices/tpu_v3.json
//   Device mine = load_device_file("/home/me/my_tpu.json");   // an edited copy
//   v3.peak_flops(graph::Precision::BF16)                     // FLOP/s per core
//   v3.memory_per_core                                        // bytes
#pragma once

#include "graph/executor.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace tessera::cost {

enum class Topology {
    Torus2D,     // TPU v2/v3 slices: each chip linked to 4 neighbours, wrap-around
    Torus3D,     // TPU v4: 6 links per chip
    NvlinkNode,  // GPUs of one node, all-to-all through NVSwitch (or NVLink rings)
    Host,        // the simulated cores on this machine: "links" are memory copies
};

// How well an op's shapes fill the device's compute units. A matrix unit works on tiles of
// `channel_tile` (128 on a TPU's MXU; 64 on a GPU, the smallest output tile of its GEMM kernels): a
// product whose weight-side extents are K × N keeps (K / ⌈K⌉) · (N / ⌈N⌉) of it busy, ⌈·⌉ rounding up
// to the tile (cost_model.hpp says which extents a convolution has). The minor spatial axis
// is padded to `spatial_tile` (8 sublanes on a TPU). The base efficiencies say what a well-shaped op
// reaches of the peak (compute-bound ops) or of the memory bandwidth (memory-bound ops).
struct EfficiencyModel {
    std::int64_t channel_tile = 1;
    std::int64_t spatial_tile = 1;
    double matmul = 1.0;       // convolutions, transposed convolutions, dense: fraction of peak FLOP/s
    double memory = 1.0;       // batch norm, ReLU, pooling, adds, copies: fraction of memory bandwidth
    double link = 1.0;         // fraction of the link bandwidth a transfer reaches
    // GPUs only: how much less arithmetic a 2D 3×3 stride-1 convolution in plain f32 does than its
    // direct FLOPs (cuDNN runs those on the CUDA cores with Winograd's algorithm, F(2×2, 3×3): 4
    // multiplications per output instead of 9, 2.25×); 1 where the device has no such kernels, and for
    // f16, bf16 and TF32, whose tensor-core kernels are implicit GEMMs.
    double winograd_3x3 = 1.0;
};

struct Device {
    std::string id;            // file stem: "tpu_v3"
    std::string name;          // "TPU v3"
    std::string kind;          // "tpu", "gpu" or "host"
    std::int64_t cores_per_chip = 1;
    // Peak dense FLOP/s per core, by the precision convolutions compute in.
    double peak_flops_f32 = 0;
    double peak_flops_bf16 = 0;
    double peak_flops_f16 = 0;
    double peak_flops_tf32 = 0;            // f32 convolutions on TF32 tensor cores; 0: the device has none
    std::int64_t memory_per_core = 0;      // bytes
    double memory_bandwidth = 0;           // bytes/s per core
    double link_bandwidth = 0;             // bytes/s per link, one direction
    double link_latency = 0;               // seconds per transfer (per hop)
    std::int64_t links_per_chip = 0;
    std::int64_t chips_per_node = 0;       // GPUs of one node (NVLink inside); 0: no figure
    double network_bandwidth = 0;          // bytes/s per chip between nodes, one direction; 0: no figure
    Topology topology = Topology::Torus2D;
    double kernel_overhead = 0;            // seconds per op launched on a core
    EfficiencyModel efficiency;
    // Host presets only: measured per-op throughput, from `tessera-cli calibrate` (see host_profile.hpp).
    std::map<std::string, double> measured;
    std::vector<std::string> sources;      // every figure's source, "field: source"

    double peak_flops(graph::Precision precision) const;
    // With `tf32`, f32 convolutions run on the TF32 tensor cores where the device has them (PyTorch's
    // allow_tf32, TensorFlow's default on Ampere and later); elsewhere the plain f32 peak.
    double peak_flops(graph::Precision precision, bool tf32) const;
};

// Reads and checks a device file: every required figure present, a number of the expected unit
// (units are converted: GiB, GB, TFLOP/s, GFLOP/s, GB/s, Gb/s, us, ns …), a non-empty source.
// Errors name the file and the field path: `tpu_v3.json: link.bandwidth: expected a unit of
// bandwidth (GB/s, Gb/s, MB/s), got "GiB"`.
Device load_device_file(const std::filesystem::path& path);
Device parse_device(const std::string& json_text, const std::string& id);

// Presets by id, from the directory devices_directory() names.
Device load_device_preset(const std::string& id);
std::vector<std::string> device_preset_ids();  // sorted
// $TESSERA_DEVICES_DIR if set, else the source tree's resources/devices.
std::filesystem::path devices_directory();

std::string_view topology_name(Topology topology);

}  // namespace tessera::cost
