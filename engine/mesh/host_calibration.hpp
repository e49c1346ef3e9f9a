// Host calibration: a device preset for this machine, measured, so the cost model can predict what the
// simulated cores' steps take here (and a user can see how far this host is from a TPU core).
//
// `tessera-cli calibrate` runs it and writes resources/devices/host.json (or a given path). It measures
// single-threaded, as a simulated core's kernels run: memory copy bandwidth, the FMA-bound throughput
// of convolutions at a ladder of channel counts (2D and 3D, 3×3, first layers, kernel-2 up-convolutions,
// forward and backward), the rate of each memory-bound op, a kernel call's overhead and the barrier
// between two phases of the core mesh — a few seconds in all.
//
//   Device host = calibrate_host({.threads = 2});
//   write_device_file(host, "resources/devices/host.json");
#pragma once

#include "cost/device.hpp"

#include <filesystem>
#include <functional>
#include <string>

namespace tessera::mesh {

struct CalibrationOptions {
    int threads = 2;              // host threads the simulated cores will run on
    int repeats = 5;              // runs per measurement (the fastest is kept; their spread is the noise figure)
    bool quick = false;           // fewer channel counts (tests)
};

cost::Device calibrate_host(const CalibrationOptions& options, const std::function<void(const std::string&)>& progress = {});

// Writes a device file in the preset format (every figure with value, unit and source).
void write_device_file(const cost::Device& device, const std::filesystem::path& path);

}  // namespace tessera::mesh
