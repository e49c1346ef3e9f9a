#include "mesh/equivalence.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

namespace tessera::mesh {

namespace {

// Below this a layer's reference is all zeros: its relative difference is the absolute one over it.
constexpr double tiny = std::numeric_limits<float>::min();

std::string shape_text(const Shape& shape) {
    std::string text("[");
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i > 0) text.append(", ");
        text.append(std::to_string(shape[i]));
    }
    return text.append("]");
}

std::string precision_text(graph::Precision precision) {
    switch (precision) {
        case graph::Precision::F32: return "fp32";
        case graph::Precision::BF16: return "bf16";
        case graph::Precision::F16: return "fp16";
    }
    return "?";
}

// Element-wise |value − reference| of two plain f32 tensors of one shape, with its maximum and the
// reference's largest magnitude. For a ReLU's output also the elements that are zero on one side and
// positive on the other (`flipped`).
struct Differences {
    std::vector<float> abs;            // same layout as the tensors (contiguous)
    std::vector<std::uint8_t> flipped; // ReLU outputs only: 1 where exactly one side is zero
    double max_abs = 0;
    double scale = 0;                  // max |reference|
    double norm_relative = 0;          // ‖value − reference‖ / ‖reference‖
    std::int64_t flips = 0;
    double max_flip_value = 0;         // the largest positive side of a flip: how far from the kink
};

Differences differences(const Tensor& value, const Tensor& reference, const std::string& what, bool relu = false) {
    TESSERA_ASSERT(value.shape() == reference.shape(),
                   what << ": partitioned " << shape_text(value.shape()) << " vs reference " << shape_text(reference.shape()));
    const Tensor a = value.contiguous(), b = reference.contiguous();
    const float* x = a.data<float>();
    const float* y = b.data<float>();
    Differences d;
    const auto count = static_cast<std::size_t>(a.num_elements());
    d.abs.resize(count);
    if (relu) d.flipped.assign(count, 0);
    double squared_difference = 0, squared_reference = 0;
    for (std::size_t i = 0; i < count; ++i) {
        const float difference = std::abs(x[i] - y[i]);
        d.abs[i] = difference;
        squared_difference += static_cast<double>(difference) * difference;
        squared_reference += static_cast<double>(y[i]) * y[i];
        // NaN and inf count as the largest differences (std::max would drop a NaN).
        if (!(difference <= d.max_abs)) d.max_abs = std::isnan(difference) ? std::numeric_limits<double>::infinity() : difference;
        d.scale = std::max(d.scale, static_cast<double>(std::abs(y[i])));
        if (relu && (x[i] == 0) != (y[i] == 0)) {
            d.flipped[i] = 1;
            ++d.flips;
            d.max_flip_value = std::max(d.max_flip_value, static_cast<double>(std::max(x[i], y[i])));
        }
    }
    d.norm_relative = squared_difference == 0 ? 0.0 : std::sqrt(squared_difference / std::max(squared_reference, tiny));
    return d;
}

}  // namespace

std::int64_t count_max_pool_flips(const graph::Node& node, const Tensor& value_input, const Tensor& reference_input) {
    TESSERA_ASSERT(node.kind == graph::OpKind::Pool && node.pool.kind == ops::PoolKind::Max, "'" << node.name << "' is not a max pool");
    const Tensor a = value_input.contiguous(), b = reference_input.contiguous();
    const Shape& in = a.shape();  // [N, C, (D,) H, W]
    const auto spatial = static_cast<std::size_t>(node.pool.spatial_rank());
    std::array<std::int64_t, 3> extent{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1}, pad{0, 0, 0};
    for (std::size_t axis = 0; axis < spatial; ++axis) {
        const std::size_t at = 3 - spatial + axis;
        extent[at] = in[2 + axis];
        out[at] = node.output_shape[2 + axis];
        kernel[at] = node.pool.kernel[axis];
        stride[at] = node.pool.stride[axis];
        pad[at] = node.pool.pad_begin.empty() ? 0 : node.pool.pad_begin[axis];
    }
    const std::int64_t plane = extent[0] * extent[1] * extent[2];
    std::int64_t flips = 0;
    for (std::int64_t p = 0; p < in[0] * in[1]; ++p) {
        const float* x = a.data<float>() + p * plane;
        const float* y = b.data<float>() + p * plane;
        for (std::int64_t oz = 0; oz < out[0]; ++oz)
            for (std::int64_t oy = 0; oy < out[1]; ++oy)
                for (std::int64_t ox = 0; ox < out[2]; ++ox) {
                    std::int64_t best_x = -1, best_y = -1;
                    for (std::int64_t kz = 0; kz < kernel[0]; ++kz)
                        for (std::int64_t ky = 0; ky < kernel[1]; ++ky)
                            for (std::int64_t kx = 0; kx < kernel[2]; ++kx) {
                                const std::int64_t z = oz * stride[0] - pad[0] + kz, row = oy * stride[1] - pad[1] + ky,
                                                   column = ox * stride[2] - pad[2] + kx;
                                if (z < 0 || row < 0 || column < 0 || z >= extent[0] || row >= extent[1] || column >= extent[2]) continue;
                                const std::int64_t i = (z * extent[1] + row) * extent[2] + column;
                                if (best_x < 0 || x[i] > x[best_x]) best_x = i;
                                if (best_y < 0 || y[i] > y[best_y]) best_y = i;
                            }
                    flips += best_x != best_y;
                }
    }
    return flips;
}

namespace {

double relative(double max_abs, double scale) { return max_abs == 0 ? 0.0 : max_abs / std::max(scale, tiny); }

// Calls visit(i) for the flat index i of every element (of a tensor laid out as `shape`
// [N, C, (D,) H, W]) inside the spatial box `owned`, all batch items and channels.
template <class Visit>
void for_each_in_region(const Shape& shape, const std::vector<partition::Interval>& owned, Visit&& visit) {
    const std::size_t rank = owned.size();
    TESSERA_ASSERT(shape.size() == rank + 2 && (rank == 2 || rank == 3), "a spatial layer " << shape_text(shape));
    // As [N·C, D, H, W] with D = 1 in 2D.
    const std::int64_t depth = rank == 3 ? shape[2] : 1, height = shape[shape.size() - 2], width = shape.back();
    const partition::Interval d_range = rank == 3 ? owned[0] : partition::Interval{0, 1};
    const partition::Interval h_range = owned[rank - 2], w_range = owned[rank - 1];
    for (std::int64_t plane = 0; plane < shape[0] * shape[1]; ++plane) {
        for (std::int64_t z = d_range.begin; z < d_range.end; ++z) {
            for (std::int64_t y = h_range.begin; y < h_range.end; ++y) {
                const std::int64_t row = ((plane * depth + z) * height + y) * width;
                for (std::int64_t x = w_range.begin; x < w_range.end; ++x) visit(static_cast<std::size_t>(row + x));
            }
        }
    }
}

// The largest element of `abs` inside the box (NaN counts as infinite).
double max_in_region(const std::vector<float>& abs, const Shape& shape, const std::vector<partition::Interval>& owned) {
    double largest = 0;
    for_each_in_region(shape, owned, [&](std::size_t i) {
        if (!(abs[i] <= largest)) largest = std::isnan(abs[i]) ? std::numeric_limits<double>::infinity() : abs[i];
    });
    return largest;
}

std::int64_t count_in_region(const std::vector<std::uint8_t>& flags, const Shape& shape, const std::vector<partition::Interval>& owned) {
    std::int64_t count = 0;
    if (flags.empty()) return count;
    for_each_in_region(shape, owned, [&](std::size_t i) { count += flags[i]; });
    return count;
}

bool applies_relu(const graph::Node& node) {
    return node.kind == graph::OpKind::Relu || (node.kind == graph::OpKind::BatchNorm && node.batch_norm.fuse_relu);
}

bool is_even(const partition::SpatialGrid& grid, const Shape& input) {
    return grid.boundaries == partition::SpatialGrid::even(input, grid.pieces_per_axis()).boundaries;
}

}  // namespace

std::string pieces_text(const std::vector<std::int64_t>& pieces) {
    std::string text;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        if (i > 0) text.append("×");
        text.append(std::to_string(pieces[i]));
    }
    return text;
}

EquivalenceReport compare_with_single_core(const graph::Graph& model, const MeshConfig& mesh, const train::TrainerConfig& config,
                                           const Tensor& images, const Tensor& labels, const EquivalenceOptions& options) {
    const auto start = std::chrono::steady_clock::now();
    TESSERA_CHECK(mesh.num_replicas == 1,
                  "the single-core comparison takes one replica (num_replicas = 1), got " << mesh.num_replicas
                      << ": a single core reproduces a replica's batch norm and weight update only when that replica is the "
                         "whole batch; compare one replica's layout");
    TESSERA_CHECK(options.steps >= 1, "the comparison trains at least one step, got steps = " << options.steps);
    const Shape& input = model.node(model.input_node()).output_shape;
    TESSERA_CHECK(images.shape() == input, "the images must have the model input's shape " << shape_text(input) << ", got "
                                                                                             << shape_text(images.shape()));

    train::TrainerConfig seeded = config;
    seeded.seed = options.seed;
    seeded.keep_activation_gradients = true;  // activation gradients are compared too
    CoreMesh partitioned(model, mesh, seeded);  // refuses a layout the model cannot take, before any work
    train::Trainer reference(model, seeded);
    std::unique_ptr<CoreMesh> one_tile;
    if (options.one_tile_baseline) {
        MeshConfig whole = mesh;
        whole.grid = partition::SpatialGrid::even(input, std::vector<std::int64_t>(input.size() - 2, 1));
        one_tile = std::make_unique<CoreMesh>(model, whole, seeded);
    }

    EquivalenceReport report;
    report.input = input;
    report.pieces = partitioned.plan().grid().pieces_per_axis();
    {
        std::ostringstream text;
        text << pieces_text(report.pieces) << (is_even(partitioned.plan().grid(), input) ? "" : " uneven") << " tiles ("
             << partitioned.cores_per_replica() << (partitioned.cores_per_replica() == 1 ? " core" : " cores") << ") of "
             << shape_text(input) << ", " << precision_text(config.precision) << ", " << options.steps
             << (options.steps == 1 ? " step" : " steps");
        report.layout = text.str();
    }

    const int total_stages = (one_tile ? 3 : 2) * options.steps + 1;
    int done = 0;
    auto stage_done = [&] {
        ++done;
        if (options.on_progress) options.on_progress(done, total_stages);
        TESSERA_CHECK(done == total_stages || !(options.stop && options.stop->load()), "the comparison was stopped");
    };
    for (int step = 0; step < options.steps; ++step) {
        report.partitioned_losses.push_back(partitioned.train_step(images, labels).loss);
        stage_done();
        report.reference_losses.push_back(reference.train_step(images, labels).loss);
        stage_done();
        if (one_tile) {
            one_tile->train_step(images, labels);
            stage_done();
        }
    }
    report.has_baseline = one_tile != nullptr;

    // Weights and BN statistics after the steps, by name.
    std::map<std::string, Tensor> reference_weights;
    graph::Executor& executor = reference.executor();
    for (const Parameter& parameter : executor.parameters()) reference_weights.emplace(parameter.name, parameter.value);
    const auto buffers = executor.buffers();
    for (std::size_t b = 0; b < buffers.size(); ++b) reference_weights.emplace(model.buffers()[b].name, buffers[b]);
    for (const train::NamedTensor& weight : partitioned.weights()) {
        const auto found = reference_weights.find(weight.name);
        TESSERA_ASSERT(found != reference_weights.end(), "the reference has no weight '" << weight.name << "'");
        report.max_weight_difference = std::max(report.max_weight_difference, differences(weight.value, found->second, weight.name).max_abs);
    }

    // Every layer of the last step, gathered over replica 0's tiles.
    const partition::TilingPlan& plan = partitioned.plan();
    const std::int64_t num_cores = partitioned.cores_per_replica();
    report.tiles.resize(static_cast<std::size_t>(num_cores));
    for (std::int64_t core = 0; core < num_cores; ++core) {
        report.tiles[static_cast<std::size_t>(core)].core = core;
        report.tiles[static_cast<std::size_t>(core)].owned = plan.tile(model.input_node(), core).owned;
    }
    for (const graph::Node& node : model.nodes()) {
        if (node.kind == graph::OpKind::Input) continue;
        LayerDifference layer;
        layer.node = node.id;
        layer.name = node.name;
        layer.op = std::string(graph::op_name(node.kind));
        layer.shape = node.output_shape;
        layer.replicated = plan.tile(node.id, 0).replicated || plan.tile(node.id, 0).owned.empty();
        const Differences value =
            differences(partitioned.gather_activation(node.id), executor.activation(node.id), node.name, applies_relu(node));
        const Differences gradient =
            differences(partitioned.gather_activation_gradient(node.id), executor.activation_gradient(node.id), node.name);
        layer.max_abs_activation = value.max_abs;
        layer.reference_scale = value.scale;
        layer.max_rel_activation = relative(value.max_abs, value.scale);
        layer.norm_rel_activation = value.norm_relative;
        layer.relu_flips = value.flips;
        layer.max_flip_value = value.max_flip_value;
        report.relu_flips += value.flips;
        if (value.flips > 0 && report.first_flip_layer.empty()) report.first_flip_layer = node.name;
        if (node.kind == graph::OpKind::Pool && node.pool.kind == ops::PoolKind::Max) {
            layer.pool_flips = count_max_pool_flips(node, partitioned.gather_activation(node.inputs[0]), executor.activation(node.inputs[0]));
            report.pool_flips += layer.pool_flips;
            if (layer.pool_flips > 0 && report.first_flip_layer.empty()) report.first_flip_layer = node.name;
        }
        layer.max_abs_gradient = gradient.max_abs;
        layer.gradient_scale = gradient.scale;
        layer.max_rel_gradient = relative(gradient.max_abs, gradient.scale);
        layer.norm_rel_gradient = gradient.norm_relative;
        if (one_tile) {
            const Differences baseline_value = differences(one_tile->gather_activation(node.id), executor.activation(node.id), node.name);
            const Differences baseline_gradient =
                differences(one_tile->gather_activation_gradient(node.id), executor.activation_gradient(node.id), node.name);
            layer.baseline_rel_activation = relative(baseline_value.max_abs, baseline_value.scale);
            layer.baseline_rel_gradient = relative(baseline_gradient.max_abs, baseline_gradient.scale);
        }
        if (!layer.replicated) {
            for (std::int64_t core = 0; core < num_cores; ++core) {
                const auto& owned = plan.tile(node.id, core).owned;
                const double in_value = max_in_region(value.abs, node.output_shape, owned);
                const double in_gradient = max_in_region(gradient.abs, node.output_shape, owned);
                layer.core_abs_activation.push_back(in_value);
                layer.core_abs_gradient.push_back(in_gradient);
                const std::int64_t flips = count_in_region(value.flipped, node.output_shape, owned);
                if (applies_relu(node)) layer.core_relu_flips.push_back(flips);
                TileDifference& tile = report.tiles[static_cast<std::size_t>(core)];
                tile.max_abs_activation = std::max(tile.max_abs_activation, in_value);
                tile.max_abs_gradient = std::max(tile.max_abs_gradient, in_gradient);
                tile.relu_flips += flips;
                if (const double r = relative(in_value, value.scale); r > tile.max_rel_activation) {
                    tile.max_rel_activation = r;
                    tile.worst_activation_node = node.id;
                }
                if (const double r = relative(in_gradient, gradient.scale); r > tile.max_rel_gradient) {
                    tile.max_rel_gradient = r;
                    tile.worst_gradient_node = node.id;
                }
            }
        }
        if (report.worst_activation_layer.empty() || layer.max_rel_activation > report.worst_activation) {
            report.worst_activation = layer.max_rel_activation;
            report.worst_activation_layer = layer.name;
        }
        if (report.worst_gradient_layer.empty() || layer.max_rel_gradient > report.worst_gradient) {
            report.worst_gradient = layer.max_rel_gradient;
            report.worst_gradient_layer = layer.name;
        }
        report.layers.push_back(std::move(layer));
    }
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stage_done();
    return report;
}

}  // namespace tessera::mesh
