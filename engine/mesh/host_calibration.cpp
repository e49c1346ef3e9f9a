#include "mesh/host_calibration.hpp"

#include "core/error.hpp"
#include "mesh/core_mesh.hpp"
#include "mesh/measurement_support.hpp"
#include "mesh/thread_pool.hpp"
#include "cost/cost_model.hpp"
#include "loss/cross_entropy.hpp"
#include "ops/dnnl_support.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <unistd.h>

namespace tessera::mesh {

namespace {

// This CPU's level-2 cache per core, in bytes (0 when the system does not say).
double level2_cache_bytes() {
    const long size = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (size > 0) return static_cast<double>(size);
    std::ifstream file("/sys/devices/system/cpu/cpu0/cache/index2/size");
    std::string text;
    if (!(file >> text) || text.empty()) return 0;
    const double value = std::atof(text.c_str());
    return text.back() == 'K' ? value * 1024 : text.back() == 'M' ? value * 1024 * 1024 : value;
}

using Clock = std::chrono::steady_clock;

// How much slower than its fastest repeat the median repeat ran: the machine's noise, one figure per
// measurement (steal time and other tenants show here first).
double spread(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2] / std::max(values.front(), 1e-12) - 1.0;
}

// Runs a small graph forward and backward `repeats` times, single-threaded, with the simulated cores'
// kernels, and returns the fastest forward and backward seconds of node `node`; adds the spread of
// the forward-plus-backward times to `spreads`.
std::pair<double, double> time_node(const graph::Graph& g, int node, int repeats, std::vector<double>& spreads,
                                    graph::Precision precision = graph::Precision::F32) {
    graph::ExecutorOptions options;
    options.distributed_reductions = true;
    options.precision = precision;
    graph::Executor executor(g, options);
    executor.initialize_parameters(1);
    const Tensor input = normal_tensor(g.node(g.input_node()).output_shape, 2);
    const Tensor gradient = normal_tensor(g.node(g.output_node()).output_shape, 3);
    std::vector<double> forward, backward;
    for (int r = 0; r < repeats + 1; ++r) {
        executor.forward(input, graph::Mode::Train);
        executor.backward(gradient);
        if (r == 0) continue;  // warm-up: first touch of every buffer
        forward.push_back(executor.timings()[static_cast<std::size_t>(node)].forward_seconds);
        backward.push_back(executor.timings()[static_cast<std::size_t>(node)].backward_seconds);
    }
    std::vector<double> both(forward.size());
    for (std::size_t r = 0; r < forward.size(); ++r) both[r] = forward[r] + backward[r];
    if (both.size() >= 3) spreads.push_back(spread(both));
    return {fastest(forward), fastest(backward)};
}

// A spatial extent giving about `flops` FLOPs for a 3×3 convolution from c_in to c_out channels.
std::int64_t extent_for(int rank, std::int64_t c_in, std::int64_t c_out, double flops) {
    const double per_voxel = 2.0 * static_cast<double>(c_in * c_out) * (rank == 3 ? 27.0 : 9.0);
    const double voxels = std::max(256.0, flops / per_voxel);
    auto extent = static_cast<std::int64_t>(std::pow(voxels, 1.0 / rank));
    extent = std::clamp<std::int64_t>(extent / 8 * 8, 8, rank == 3 ? 64 : 256);
    return extent;
}

// A convolution key without its ".fwd" / ".bwd" suffix.
std::string key_stem(int rank, std::int64_t kernel, bool first, std::int64_t channels) {
    const std::string key = cost::host_conv_key(rank, kernel, first, channels, false);
    return key.substr(0, key.size() - std::strlen(".fwd"));
}

Shape shape_of(int rank, std::int64_t channels, std::int64_t extent) {
    Shape shape{1, channels};
    for (int axis = 0; axis < rank; ++axis) shape.push_back(extent);
    return shape;
}

// Calibration step by step: each measurement writes its figures into the preset's `measured`.
class HostCalibration {
public:
    HostCalibration(const CalibrationOptions& options, const std::function<void(const std::string&)>& progress)
        : m_options(options), m_progress(progress) {
        m_device.id = "host";
        m_device.name = "this host (" + std::to_string(std::thread::hardware_concurrency()) + " hardware threads)";
        m_device.kind = "host";
        m_device.cores_per_chip = 1;
        m_device.topology = cost::Topology::Host;
        m_device.links_per_chip = 0;
        m_device.efficiency = {.channel_tile = 16, .spatial_tile = 1, .matmul = 1.0, .memory = 1.0, .link = 1.0};
        m_device.measured["threads"] = options.threads;
    }

    cost::Device run() {
        measure_copy_bandwidth();
        measure_convolutions();
        measure_narrow_tiles();
        set_peak_from_convolutions();
        measure_bf16_convolutions();
        measure_memory_ops();
        measure_loss();
        measure_phase_overhead();
        measure_parallel_slowdown();
        measure_end_of_step();
        return finish();
    }

private:
    void say(const std::string& text) const {
        if (m_progress) m_progress(text);
    }
    // FLOPs and bytes as a host preset counts them (each op its own pass, CostModel::host_layer), for
    // turning times into rates: a host device with no rates yet.
    cost::CostModel roofline_model() const {
        cost::Device d = m_device;
        d.measured.clear();
        d.peak_flops_f32 = 1;
        d.memory_bandwidth = std::max(d.memory_bandwidth, 1.0);
        return cost::CostModel(d);
    }

    // Memory copy bandwidth: bytes read plus bytes written per second.
    void measure_copy_bandwidth() {
        const CalibrationOptions& options = m_options;
        auto& measured = m_device.measured;
        cost::Device& device = m_device;
        say("memory bandwidth");
        const std::size_t bytes = 64u << 20;
        std::vector<char> from(bytes, 1), to(bytes, 0);
        std::vector<double> seconds;
        for (int r = 0; r < options.repeats + 1; ++r) {
            const auto start = Clock::now();
            std::memcpy(to.data(), from.data(), bytes);
            if (r > 0) seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
        }
        measured["copy"] = 2.0 * static_cast<double>(bytes) / fastest(seconds) / 1e9;
        device.memory_bandwidth = measured["copy"] * 1e9 / 2;
    }

    // A layer's time is a fixed cost plus work over a rate: measured at a large and a small tile (the
    // small one as small as a deep layer's tile on many cores), the two give both.
    void measure_convolutions() {
        const CalibrationOptions& options = m_options;
        auto& measured = m_device.measured;
        const cost::CostModel roofline = roofline_model();
        std::vector<double>& spreads = m_spreads;
        auto conv_rates = [&](int rank, std::int64_t c_in, std::int64_t c_out, bool transposed, bool head, const std::string& key_stem) {
            auto measure = [&](std::int64_t extent) {
                graph::Graph g("calibration");
                const bool first = c_in == 1;
                int x = g.input(shape_of(rank, first ? 1 : 8, extent));
                // Inside a model a layer reads its input in the layout the previous convolution wrote, and
                // computes its input's gradient: a convolution to c_in channels comes first.
                if (!first) x = g.conv(g.relu(x, "relu"), c_in, ops::ConvAttributes::same(rank, 3), "before");
                const int layer = transposed ? g.conv_transpose(x, c_out, ops::ConvTransposeAttributes::upsample(rank, 2), "layer")
                                : head       ? g.conv(x, c_out, ops::ConvAttributes::same(rank, 1), "layer")
                                             : g.conv(x, c_out, ops::ConvAttributes::same(rank, 3), "layer");
                g.set_output(layer);
                const auto [forward, backward] = time_node(g, layer, options.repeats, spreads);
                const cost::LayerCost counted = roofline.layer(g, layer, nullptr, graph::Precision::F32);
                return std::array<double, 4>{counted.forward.flops, forward, counted.backward.flops, backward};
            };
            const auto large = measure(extent_for(rank, c_in, c_out, transposed || head ? 4e7 : 1.5e8));
            const auto small = measure(rank == 3 ? 4 : 8);
            for (int pass = 0; pass < 2; ++pass) {
                const double flops_large = large[2 * pass], time_large = large[2 * pass + 1];
                const double flops_small = small[2 * pass], time_small = small[2 * pass + 1];
                double rate = (flops_large - flops_small) / std::max(time_large - time_small, 1e-9);
                if (!(rate > 0) || rate > 50 * flops_large / time_large) rate = flops_large / time_large;
                const double fixed = std::max(0.0, time_small - flops_small / rate);
                const std::string suffix = pass == 0 ? ".fwd" : ".bwd";
                measured[key_stem + suffix] = rate / 1e9;
                measured[key_stem + suffix + "_fixed_us"] = fixed * 1e6;
            }
        };
        const std::vector<std::int64_t> ladder = options.quick ? std::vector<std::int64_t>{8, 32}
                                                               : std::vector<std::int64_t>{4, 8, 16, 32, 64, 128};
        for (int rank : {2, 3}) {
            for (std::int64_t c : ladder) {
                if (rank == 3 && c > 64) continue;
                say("convolution " + std::to_string(rank) + "D, " + std::to_string(c) + " channels");
                conv_rates(rank, c, c, false, false, key_stem(rank, 3, false, c));
                conv_rates(rank, 2 * c, c, true, false, key_stem(rank, 1, false, c));
                conv_rates(rank, c, 2, false, true, "conv" + std::to_string(rank) + "d.head.c" + std::to_string(c));
            }
            for (std::int64_t c : options.quick ? std::vector<std::int64_t>{8} : std::vector<std::int64_t>{4, 8, 16, 32, 64}) {
                say("first layer " + std::to_string(rank) + "D, " + std::to_string(c) + " channels");
                conv_rates(rank, 1, c, false, false, key_stem(rank, 3, true, c));
            }
        }
    }

    // Narrow tiles: oneDNN's kernels vectorise along the output row, so a tile a few elements wide runs
    // far below the rate of a wide one. A 3×3 layer at widths 2 and 8 (batch 4, as many cores' tiles)
    // gives w0 in efficiency(W) = W / (W + w0), relative to a wide tile.
    void measure_narrow_tiles() {
        const CalibrationOptions& options = m_options;
        auto& measured = m_device.measured;
        const cost::CostModel roofline = roofline_model();
        std::vector<double>& spreads = m_spreads;
        for (int rank : {2, 3}) {
            say("narrow tiles " + std::to_string(rank) + "D");
            const std::int64_t c = 64;
            auto time_at = [&](std::int64_t width) {
                graph::Graph g("narrow");
                Shape shape{4, 8};
                for (int axis = 0; axis < rank; ++axis) shape.push_back(width);
                int x = g.conv(g.relu(g.input(shape), "relu"), c, ops::ConvAttributes::same(rank, 3), "before");
                const int layer = g.conv(x, c, ops::ConvAttributes::same(rank, 3), "layer");
                g.set_output(layer);
                const auto [forward, backward] = time_node(g, layer, options.repeats, spreads);
                const cost::LayerCost counted = roofline.layer(g, layer, nullptr, graph::Precision::F32);
                return (counted.forward.flops + counted.backward.flops) / (forward + backward);  // FLOP/s
            };
            const double wide = time_at(rank == 3 ? 16 : 32), narrow = time_at(2);
            // efficiency(2) / efficiency(wide) = narrow / wide, with efficiency(W) = W / (W + w0).
            const double ratio = std::clamp(narrow / wide, 0.01, 1.0);
            const double w_wide = rank == 3 ? 16 : 32;
            // Solve 2/(2 + w0) = ratio · w_wide/(w_wide + w0) for w0.
            const double a = ratio * w_wide;
            const double w0 = a > 2 ? std::max(0.0, (2 * w_wide - 2 * a) / (a - 2)) : 64.0;
            measured["conv" + std::to_string(rank) + "d.width_w0"] = w0;
        }
    }

    // The largest measured 3×3 rate stands for the peak (the cost model needs one).
    void set_peak_from_convolutions() {
        auto& measured = m_device.measured;
        cost::Device& device = m_device;
        for (const auto& [key, value] : measured) {
            if (key.rfind("conv", 0) == 0) device.peak_flops_f32 = std::max(device.peak_flops_f32, value * 1e9);
        }
        device.peak_flops_bf16 = device.peak_flops_f16 = device.peak_flops_f32;  // bf16: measured next
    }

    // bf16 convolutions against f32 ones of the same shape, interleaved: whether a CPU's bf16 path is
    // faster is measured, not assumed. AVX512-BF16 without AMX can be slower than f32 — on a Xeon
    // model 207 in a VM (no AMX), VDPBF16PS retires at half the rate of f32 FMAs per FLOP, and
    // oneDNN's bf16 convolutions ran at 0.55× their f32 rate. Layers the executor keeps in f32
    // (under 16 channels, the first and the output layer) do not use the ratio.
    void measure_bf16_convolutions() {
        const CalibrationOptions& options = m_options;
        auto& measured = m_device.measured;
        std::vector<double>& spreads = m_spreads;
        double ratio_2d = 1;
        for (int rank : {2, 3}) {
            say("bf16 convolution " + std::to_string(rank) + "D");
            const std::int64_t channels = rank == 3 ? 16 : 32;
            graph::Graph g("calibration");
            int x = g.input(shape_of(rank, 8, extent_for(rank, channels, channels, options.quick ? 3e7 : 1.5e8)));
            x = g.conv(g.relu(x, "relu"), channels, ops::ConvAttributes::same(rank, 3), "before");
            const int layer = g.conv(x, channels, ops::ConvAttributes::same(rank, 3), "layer");
            g.set_output(g.conv(layer, channels, ops::ConvAttributes::same(rank, 3), "after"));
            std::vector<double> f32_forward, f32_backward, bf16_forward, bf16_backward;
            for (int round = 0; round < 2; ++round) {
                const auto [f32_fwd, f32_bwd] = time_node(g, layer, options.repeats, spreads, graph::Precision::F32);
                const auto [bf16_fwd, bf16_bwd] = time_node(g, layer, options.repeats, spreads, graph::Precision::BF16);
                f32_forward.push_back(f32_fwd);
                f32_backward.push_back(f32_bwd);
                bf16_forward.push_back(bf16_fwd);
                bf16_backward.push_back(bf16_bwd);
            }
            const std::string stem = "conv" + std::to_string(rank) + "d.bf16_ratio";
            measured[stem + ".fwd"] = fastest(f32_forward) / std::max(fastest(bf16_forward), 1e-12);
            measured[stem + ".bwd"] = fastest(f32_backward) / std::max(fastest(bf16_backward), 1e-12);
            if (rank == 2) ratio_2d = measured[stem + ".fwd"];
        }
        m_device.peak_flops_bf16 = m_device.peak_flops_f32 * ratio_2d;
    }

    // Memory-bound ops behind a convolution, as inside a model (the activations arrive in the kernels'
    // layouts), at a large and a small size: bytes over a rate plus a fixed cost.
    void measure_memory_ops() {
        const CalibrationOptions& options = m_options;
        auto& measured = m_device.measured;
        const cost::CostModel roofline = roofline_model();
        std::vector<double>& spreads = m_spreads;
        say("memory-bound ops");
        const std::vector<std::string> names{"batch_norm", "relu", "pool", "concat", "add"};
        // The ops after a convolution of `width` channels reading `in_channels`: its output layout is
        // theirs (ops/convolution_kernels.cpp: blocked for 16 channels or more, channels-last for fewer
        // behind a convolution of several input channels, oneDNN's own pick behind the first layer).
        auto measure = [&](std::int64_t extent, std::int64_t in_channels, std::int64_t width) {
            const Shape shape{1, in_channels, extent, extent};
            graph::Graph g("memory ops");
            int x = g.input(shape);
            x = g.relu(x, "relu0");
            x = g.conv(x, width, ops::ConvAttributes::same(2, 3), "conv");
            const int norm = g.batch_norm(x, {.fuse_relu = true}, "batch_norm");
            const int relu = g.relu(norm, "relu");
            const int pool = g.pool(relu, ops::PoolAttributes::max_down(2, 2), "pool");
            const int up = g.conv_transpose(pool, width, ops::ConvTransposeAttributes::upsample(2, 2), "up");
            const int concat = g.concat({up, relu}, "concat");
            // A sum of two tensors, as a residual block's: add(x, x) would read one tensor twice and
            // send its gradient to one place twice (its backward sums them: ~3× a real one's).
            const int add = g.add(concat, g.concat({relu, up}, "concat_b"), "add");
            g.set_output(add);
            graph::ExecutorOptions executor_options;
            executor_options.distributed_reductions = true;
            graph::Executor executor(g, executor_options);
            executor.initialize_parameters(1);
            const Tensor input = normal_tensor(shape, 4);
            const Tensor gradient = normal_tensor(g.node(add).output_shape, 5);
            const std::vector<int> ids{norm, relu, pool, concat, add};
            std::vector<std::vector<double>> forward(ids.size()), backward(ids.size());
            for (int r = 0; r < options.repeats + 1; ++r) {
                executor.forward(input, graph::Mode::Train);
                executor.backward(gradient);
                if (r == 0) continue;
                for (std::size_t i = 0; i < ids.size(); ++i) {
                    forward[i].push_back(executor.timings()[static_cast<std::size_t>(ids[i])].forward_seconds);
                    backward[i].push_back(executor.timings()[static_cast<std::size_t>(ids[i])].backward_seconds);
                }
            }
            std::vector<std::array<double, 4>> result;  // bytes, seconds forward; bytes, seconds backward
            for (std::size_t i = 0; i < ids.size(); ++i) {
                const cost::LayerCost counted = roofline.layer(g, ids[i], nullptr, graph::Precision::F32);
                result.push_back({static_cast<double>(counted.forward.bytes), fastest(forward[i]),
                                  static_cast<double>(counted.backward.bytes), fastest(backward[i])});
            }
            return result;
        };
        // Rate from two sizes, the fixed cost from the small one. `variant` names the layout (cost_model.cpp).
        auto record = [&](const std::vector<std::array<double, 4>>& large, const std::vector<std::array<double, 4>>& small,
                          const std::string& variant, std::size_t count) {
            for (std::size_t i = 0; i < count; ++i) {
                for (int pass = 0; pass < 2; ++pass) {
                    const double bytes_large = large[i][2 * pass], time_large = large[i][2 * pass + 1];
                    const double bytes_small = small[i][2 * pass], time_small = small[i][2 * pass + 1];
                    double rate = (bytes_large - bytes_small) / std::max(time_large - time_small, 1e-9);
                    if (!(rate > 0)) rate = bytes_large / time_large;
                    const std::string suffix = variant + (pass == 0 ? ".fwd" : ".bwd");
                    measured[names[i] + suffix] = rate / 1e9;
                    measured[names[i] + suffix + "_fixed_us"] = std::max(0.0, time_small - bytes_small / rate) * 1e6;
                }
            }
        };
        // Tensors beyond a core's own cache stream at another rate. With this CPU's L2 size, the bytes of
        // an op that fit in it (a share f = min(1, L2 / bytes)) and those beyond it each have a rate:
        //   seconds − fixed = bytes · (f / rate_l2 + (1 − f) / rate_beyond_l2)
        // solved from two sizes, ~1 MB and ~8 MB a tensor (cost_model.cpp prices any size from them).
        const double l2_bytes = level2_cache_bytes();
        measured["l2_cache_bytes"] = l2_bytes;
        auto record_beyond_cache = [&](const std::vector<std::array<double, 4>>& larger, const std::vector<std::array<double, 4>>& large,
                                       const std::string& variant, std::size_t count) {
            if (!(l2_bytes > 0)) return;
            for (std::size_t i = 0; i < count; ++i) {
                for (int pass = 0; pass < 2; ++pass) {
                    const std::string key = names[i] + variant + (pass == 0 ? ".fwd" : ".bwd");
                    const double fixed = measured[key + "_fixed_us"] * 1e-6;
                    const double w1 = large[i][2 * pass], t1 = std::max(large[i][2 * pass + 1] - fixed, 1e-9);
                    const double w2 = larger[i][2 * pass], t2 = std::max(larger[i][2 * pass + 1] - fixed, 1e-9);
                    const double f1 = std::min(1.0, l2_bytes / w1), f2 = std::min(1.0, l2_bytes / w2);
                    // t/w = f·a + (1 − f)·b, a and b seconds per byte in and beyond L2.
                    const double determinant = f1 * (1 - f2) - f2 * (1 - f1);
                    if (std::abs(determinant) < 1e-6) continue;
                    const double a = (t1 / w1 * (1 - f2) - t2 / w2 * (1 - f1)) / determinant;
                    const double b = (f1 * t2 / w2 - f2 * t1 / w1) / determinant;
                    if (!(a > 0) || !(b > 0)) continue;  // noise: keep the one rate
                    measured[key + "_l2"] = 1 / a / 1e9;
                    measured[key + "_beyond_l2"] = 1 / b / 1e9;
                    measured[key + "_l2_from_bytes"] = w1;  // below: the one rate (the in-L2 rate alone is noisy)
                }
            }
        };
        const auto wide = measure(96, 16, 32);
        record(wide, measure(8, 16, 32), "", names.size());
        record_beyond_cache(measure(256, 16, 32), wide, "", names.size());
        // Fewer than 16 channels, as a U-Net's first level: as many bytes at 192² as the wide case at 96².
        // Batch norm, ReLU and pooling only (the concatenation and sum there have 16 channels).
        const auto narrow_cl = measure(192, 8, 8), narrow_any = measure(192, 1, 8);
        record(narrow_cl, measure(16, 8, 8), ".narrow_cl", 3);
        record(narrow_any, measure(16, 1, 8), ".narrow_any", 3);
        record_beyond_cache(measure(512, 8, 8), narrow_cl, ".narrow_cl", 3);
        record_beyond_cache(measure(512, 1, 8), narrow_any, ".narrow_any", 3);
        for (const char* suffix : {".fwd", ".bwd", ".fwd_fixed_us", ".bwd_fixed_us"}) {
            measured[std::string("upsample").append(suffix)] = measured[std::string("relu").append(suffix)];
        }

        // A kernel call on a tiny tensor: the fixed cost of an op.
        graph::Graph tiny("tiny");
        const int t = tiny.relu(tiny.relu(tiny.input({1, 16, 4, 4}), "a"), "b");
        tiny.set_output(t);
        measured["op_overhead_us"] = time_node(tiny, t, options.repeats * 4, spreads).first * 1e6;
    }

    // The loss: softmax cross-entropy's partial sums and gradient over a tile of logits.
    void measure_loss() {
        const CalibrationOptions& options = m_options;
        auto& measured = m_device.measured;
        say("loss");
        const Tensor logits = normal_tensor({1, 2, 256, 256}, 6);
        Tensor labels = Tensor::zeros({1, 256, 256}, DType::I32);
        std::vector<double> seconds;
        for (int r = 0; r < options.repeats + 1; ++r) {
            const auto start = Clock::now();
            const loss::CrossEntropyPartial partial = loss::softmax_cross_entropy_partial(logits, labels);
            const loss::CrossEntropyResult result = loss::finish_softmax_cross_entropy(partial, logits, labels);
            if (r > 0) seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
        }
        // The host step model counts 8 bytes per logit for each of its two loss phases.
        measured["loss"] = 2.0 * 8.0 * static_cast<double>(logits.num_elements()) / fastest(seconds) / 1e9;
    }

    // A phase of the core mesh, beyond its kernels.
    void measure_phase_overhead() {
        const CalibrationOptions& options = m_options;
        auto& measured = m_device.measured;
        say("phase overhead");
        // What a phase of the core mesh costs beyond its kernels: the barrier, the mesh's bookkeeping
        // and each executor's own work around the timed kernel. Two meshes of two cores differ only by
        // 200 ReLU layers (400 phases, forward and backward); their step times, less the extra kernel
        // time the executors report, give it.
        auto step_and_kernels = [&](int layers) {
            const Shape input{1, 4, 4, 4};
            graph::Graph g("phases");
            int x = g.input(input);
            for (int layer = 0; layer < layers; ++layer) x = g.relu(x, "relu" + std::to_string(layer));
            x = g.conv(x, 2, ops::ConvAttributes::same(2, 1), "head");
            g.set_output(x);
            MeshConfig mesh;
            mesh.grid = partition::SpatialGrid::even(input, {2, 1});
            mesh.host_threads = options.threads;
            const train::TrainerConfig config = timing_trainer_config(1e-3);
            CoreMesh cores(g, mesh, config);
            const Tensor images = normal_tensor(input, 10);
            const Tensor labels = Tensor::zeros({1, 4, 4}, DType::I32);
            std::vector<double> beyond_kernels;
            for (int r = 0; r < options.repeats + 1; ++r) {
                const auto start = Clock::now();
                cores.train_step(images, labels);
                const double step = std::chrono::duration<double>(Clock::now() - start).count();
                double kernels = 0;  // the slower core's
                for (std::int64_t core = 0; core < cores.num_cores(); ++core) {
                    double sum = 0;
                    for (const graph::NodeTiming& timing : cores.executor(core).timings()) sum += timing.forward_seconds + timing.backward_seconds;
                    kernels = std::max(kernels, sum);
                }
                if (r > 0) beyond_kernels.push_back(step - kernels);
            }
            return fastest(beyond_kernels);
        };
        const double few = step_and_kernels(20), many = step_and_kernels(220);
        measured["phase_overhead_us"] = std::max(0.0, (many - few) / 400.0) * 1e6;
    }

    // Kernels side by side: with every host thread busy, each runs slower than alone (shared memory
    // bandwidth and caches, lower clocks). The same small training step, alone and on every thread at
    // once, gives the factor.
    void measure_parallel_slowdown() {
        const CalibrationOptions& options = m_options;
        auto& measured = m_device.measured;
        say("kernels side by side");
        graph::Graph g("parallel");
        int x = g.input({1, 16, 64, 64});
        x = g.relu(x, "relu");
        x = g.conv(x, 32, ops::ConvAttributes::same(2, 3), "conv1");
        x = g.batch_norm(x, {.fuse_relu = true}, "bn1");
        x = g.conv(x, 32, ops::ConvAttributes::same(2, 3), "conv2");
        x = g.batch_norm(x, {.fuse_relu = true}, "bn2");
        g.set_output(x);
        graph::ExecutorOptions executor_options;
        executor_options.distributed_reductions = true;
        std::vector<std::unique_ptr<graph::Executor>> executors;
        for (int t = 0; t < options.threads; ++t) {
            executors.push_back(std::make_unique<graph::Executor>(g, executor_options));
            executors.back()->initialize_parameters(1);
        }
        const Tensor input = normal_tensor({1, 16, 64, 64}, 7);
        const Tensor gradient = normal_tensor(g.node(x).output_shape, 8);
        auto step = [&](graph::Executor& executor) {
            executor.forward(input, graph::Mode::Train);
            executor.backward(gradient);
        };
        const int rounds = 10 * options.repeats;
        for (auto& executor : executors) step(*executor);  // warm-up
        std::vector<double> alone_times, together_times;
        ThreadPool pool(options.threads);
        for (int r = 0; r < rounds; ++r) {
            auto start = Clock::now();
            step(*executors[0]);
            alone_times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
            start = Clock::now();
            pool.run(options.threads, [&](std::int64_t t) { step(*executors[static_cast<std::size_t>(t)]); });
            together_times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
        }
        const double alone = fastest(alone_times), together = fastest(together_times);
        measured["parallel_slowdown"] = std::max(1.0, together / alone);
    }

    // The end of a step (core_mesh.cpp): weight gradients summed over every core and handed back, one
    // task per parameter tensor over the threads; the loss scaler's finite checks over core 0's
    // gradients and values; then the optimizer update, once, its parameters spread over the threads.
    // Each part is timed inside the mesh's own step, so it sees the caches as the step leaves them (the
    // checks read gradients the sum has just written to every core: timed apart, after the step, they
    // ran from the caches at twice the speed). Measured on the mesh:
    //   per tensor    t = t0 + t_core·(cores − 1) + t_replica·(replicas − 1)  (a model of many tiny tensors)
    //   per element   e = e0 + e_core·(cores − 1) + e_replica·(replicas − 1)  (2·threads equal large tensors)
    // each on one core, four cores of one replica and four replicas of one core (a replica's sum is a
    // copy of its own first core's); the checks and the update per element and, from the tiny tensors,
    // per tensor.
    void measure_end_of_step() {
        const CalibrationOptions& options = m_options;
        auto& measured = m_device.measured;
        say("gradient reduction and update");
        struct EndOfStep {
            double reduce = 0;  // the gradient sum, its finite check and the copy back to every core
            double update = 0;  // the optimizer step
            double rest = 0;    // the rest of the step's end: the loss scaler's finite checks and the statistics'
            double parameters = 0, tensors = 0;
        };
        // `width`: 0 for many tiny tensors, else 2·threads 3×3 convolutions of that many channels.
        auto end_of_step = [&](std::int64_t width, std::int64_t cores_per_replica, std::int64_t replicas) {
            const bool many_small = width == 0;
            const Shape input = many_small ? Shape{1, 16, 4, 4} : Shape{1, width, 4, 4};
            graph::Graph g("parameters");
            int x = g.input(input);
            if (many_small) {
                for (int block = 0; block < 60; ++block) {
                    x = g.conv(x, 16, ops::ConvAttributes::same(2, 1), "conv" + std::to_string(block));
                    x = g.batch_norm(x, {}, "bn" + std::to_string(block));
                }
            } else {
                for (int layer = 0; layer < 2 * options.threads; ++layer) {
                    x = g.conv(x, width, ops::ConvAttributes::same(2, 3), "conv" + std::to_string(layer));
                }
            }
            x = g.dense(g.global_average_pool(x, "pool"), 10, "dense");
            g.set_output(x);
            MeshConfig mesh;
            mesh.num_replicas = replicas;
            mesh.grid = partition::SpatialGrid::even(input, {cores_per_replica > 1 ? 2 : 1, cores_per_replica > 2 ? 2 : 1});
            mesh.host_threads = options.threads;
            const train::TrainerConfig config = timing_trainer_config(1e-3);
            CoreMesh cores(g, mesh, config);
            Shape batch = input;
            batch[0] = replicas;
            const Tensor images = normal_tensor(batch, 9);
            const Tensor labels = Tensor::zeros({replicas}, DType::I32);
            std::vector<double> reduces, updates, rests;
            for (int r = 0; r < options.repeats + 1; ++r) {
                const train::StepResult step = cores.train_step(images, labels);
                if (r == 0) continue;
                double reduce = 0, update = 0;
                for (const CoreEvent& event : cores.events()) {
                    if (event.phase != StepPhase::Update) continue;
                    const double seconds = event.end_seconds - event.start_seconds;
                    if (event.kind == EventKind::AllReduce) reduce = std::max(reduce, seconds);
                    if (event.kind == EventKind::Compute) update = std::max(update, seconds);
                }
                reduces.push_back(reduce);
                updates.push_back(update);
                rests.push_back(std::max(0.0, step.update_seconds - reduce - update));
            }
            return EndOfStep{fastest(reduces), fastest(updates), fastest(rests), static_cast<double>(g.parameter_count()),
                             static_cast<double>(g.parameters().size())};
        };
        const double threads = options.threads;
        // Per element, from the large tensors: 2·threads of them, two per thread.
        auto per_element = [&](const EndOfStep& large, double per_tensor) {
            const double large_tensors = 2 * threads;
            return std::max(0.0, (large.reduce * threads / large_tensors - per_tensor) / (large.parameters / large_tensors));
        };
        // Per tensor, from the many small ones (their elements take a few percent; the estimate of e
        // from the large model removes them).
        auto per_tensor = [&](const EndOfStep& small, double element) {
            const double reduce = std::max(0.0, small.reduce - small.parameters * element / threads);
            return reduce * threads / small.tensors;
        };
        // Two model sizes: 2.4 M parameters (9 MB a core, mostly in the caches) and 15 M (59 MB a core,
        // ResNet-18/34's range, where the passes run at memory speed). A step between or beyond them
        // interpolates each per-parameter cost in log(parameters) (cost/step_simulation.cpp).
        struct Size {
            std::int64_t width;
            const char* suffix;
        };
        const Size sizes[2] = {{256, ""}, {640, "_large"}};
        const std::pair<std::int64_t, std::int64_t> layouts[3] = {{1, 1}, {4, 1}, {1, 4}};  // cores per replica, replicas
        EndOfStep small[3] = {};
        double tensor_cost[3] = {};
        for (int layout = 0; layout < 3; ++layout) {
            small[layout] = end_of_step(0, layouts[layout].first, layouts[layout].second);
            tensor_cost[layout] = per_tensor(small[layout], 0);
        }
        // The checks' and the update's share per tensor (on the four-core layout, as the per-element
        // costs below: most partitioned steps have several cores), wall time over the threads.
        const double checks_per_tensor = small[1].rest / small[1].tensors, update_per_tensor = small[1].update / small[1].tensors;
        measured["checks_and_update_us_per_tensor"] = (checks_per_tensor + update_per_tensor) * 1e6;
        for (const Size& size : sizes) {
            double element_cost[3] = {};
            EndOfStep four_cores{};  // the second layout's
            for (int layout = 0; layout < 3; ++layout) {
                const EndOfStep wide = end_of_step(size.width, layouts[layout].first, layouts[layout].second);
                if (layout == 1) four_cores = wide;
                element_cost[layout] = per_element(wide, tensor_cost[layout]);
            }
            const std::string suffix = size.suffix;
            measured["gradient_reduce_ns_per_parameter" + suffix] = element_cost[0] * 1e9;
            measured["gradient_reduce_ns_per_parameter_core" + suffix] = std::max(0.0, (element_cost[1] - element_cost[0]) / 3) * 1e9;
            measured["gradient_reduce_ns_per_parameter_replica" + suffix] =
                std::max(0.0, (element_cost[2] - element_cost[0]) / 3 - (element_cost[1] - element_cost[0]) / 3) * 1e9;
            const double per_parameter = 1e9 / four_cores.parameters;
            measured["update_ns_per_parameter" + suffix] =
                std::max(0.0, four_cores.update - four_cores.tensors * update_per_tensor) * per_parameter;
            measured["finite_checks_ns_per_parameter" + suffix] =
                std::max(0.0, four_cores.rest - four_cores.tensors * checks_per_tensor) * per_parameter;
            measured["end_of_step_parameters" + suffix] = four_cores.parameters;
            if (&size == &sizes[0]) {
                // The tensors' share once more, without the elements' (from the small size, as before).
                for (int layout = 0; layout < 3; ++layout) {
                    tensor_cost[layout] = per_tensor(small[layout], element_cost[layout]);
                }
            }
        }
        measured["gradient_reduce_us_per_tensor"] = tensor_cost[0] * 1e6;
        measured["gradient_reduce_us_per_tensor_core"] = std::max(0.0, (tensor_cost[1] - tensor_cost[0]) / 3) * 1e6;
        measured["gradient_reduce_us_per_tensor_replica"] =
            std::max(0.0, (tensor_cost[2] - tensor_cost[0]) / 3 - (tensor_cost[1] - tensor_cost[0]) / 3) * 1e6;
    }

    cost::Device finish() {
        auto& measured = m_device.measured;
        std::vector<double>& spreads = m_spreads;
        cost::Device& device = m_device;
        // The median measurement's spread: above ~10 % the machine is too busy for a trustworthy preset.
        measured["noise_percent"] = spreads.empty() ? 0.0 : 100.0 * [&] {
            std::sort(spreads.begin(), spreads.end());
            return spreads[spreads.size() / 2];
        }();
        device.kernel_overhead = measured["op_overhead_us"] * 1e-6;
        device.memory_per_core = 1LL << 40;  // the host's simulated cores are limited by the mesh's own capacity setting
        device.sources.push_back("every figure: measured by tessera-cli calibrate");
        return device;
    }

    const CalibrationOptions& m_options;
    const std::function<void(const std::string&)>& m_progress;
    cost::Device m_device;
    std::vector<double> m_spreads;  // per timed layer: median over fastest repeat, − 1
};

}  // namespace

cost::Device calibrate_host(const CalibrationOptions& options, const std::function<void(const std::string&)>& progress) {
    TESSERA_CHECK(options.threads >= 1 && options.repeats >= 1,
                  "calibration needs at least one thread and one repeat, got " << options.threads << " and " << options.repeats);
    // Single-threaded kernels, as a simulated core runs them; the caller's setting comes back after.
    const int saved_threads = ops::num_threads();
    ops::set_num_threads(1);
    struct Restore {
        int threads;
        ~Restore() { ops::set_num_threads(threads); }
    } restore{saved_threads};
    return HostCalibration(options, progress).run();
}

void write_device_file(const cost::Device& device, const std::filesystem::path& path) {
    using nlohmann::json;
    const std::string source = "measured on this host by tessera-cli calibrate";
    auto figure = [&](double value, const char* unit) { return json{{"value", value}, {"unit", unit}, {"source", source}}; };
    json j;
    j["name"] = device.name;
    j["kind"] = device.kind;
    j["cores_per_chip"] = figure(static_cast<double>(device.cores_per_chip), "cores");
    j["peak_flops_per_core"] = {{"f32", figure(device.peak_flops_f32 / 1e9, "GFLOP/s")},
                                {"bf16", figure(device.peak_flops_bf16 / 1e9, "GFLOP/s")},
                                {"f16", figure(device.peak_flops_f16 / 1e9, "GFLOP/s")}};
    j["memory_per_core"] = figure(static_cast<double>(device.memory_per_core) / static_cast<double>(1LL << 30), "GiB");
    j["memory_bandwidth_per_core"] = figure(device.memory_bandwidth / 1e9, "GB/s");
    j["link"] = {{"bandwidth", figure(device.memory_bandwidth / 1e9, "GB/s")},
                 {"latency", figure(std::max(device.link_latency, 1e-9) * 1e6, "us")},
                 {"links_per_chip", figure(std::max<std::int64_t>(device.links_per_chip, 1), "links")}};
    j["topology"] = "host";
    j["kernel_overhead"] = figure(std::max(device.kernel_overhead, 1e-9) * 1e6, "us");
    j["efficiency"] = {{"channel_tile", figure(static_cast<double>(device.efficiency.channel_tile), "channels")},
                       {"spatial_tile", figure(static_cast<double>(device.efficiency.spatial_tile), "elements")},
                       {"matmul", figure(device.efficiency.matmul, "fraction")},
                       {"memory", figure(device.efficiency.memory, "fraction")},
                       {"link", figure(device.efficiency.link, "fraction")}};
    j["measured"] = device.measured;
    j["notes"] = "Rates are single-threaded, as the simulated cores run their kernels: convolutions in GFLOP/s, "
                 "memory-bound ops in GB/s of the bytes the cost model counts. Re-run tessera-cli calibrate after "
                 "hardware or library changes.";
    std::filesystem::create_directories(path.parent_path().empty() ? "." : path.parent_path());
    const std::filesystem::path temporary = path.string() + ".tmp";
    {
        std::ofstream out(temporary);
        TESSERA_CHECK(out, "cannot write the device file '" << temporary.string() << "'; check the directory exists and is writable");
        out << j.dump(2) << "\n";
        TESSERA_CHECK(out.good(), "writing the device file '" << temporary.string() << "' failed (disk full?)");
    }
    std::filesystem::rename(temporary, path);
}

}  // namespace tessera::mesh
