// Equivalence report: the evidence that a partitioned model is the same model, layer by layer and
// tile by tile.
//
// compare_with_single_core trains one replica's model for a few steps twice, from the same seed on the
// same batch: on the simulated cores of a mesh layout (CoreMesh) and on one core (train::Trainer, which
// shares none of the mesh's code: oneDNN's own batch norm, no tiles, no halos). After the last step it
// gathers every layer's forward value and gradient (d loss / d value) from the tiles and compares them
// with the reference's, element by element:
//   per layer  the largest absolute difference, and the relative one: that divided by the largest
//              |reference| of the layer (|a − b| / max(max|ref|, tiny)), so elements near zero do not
//              inflate it;
//   per core   the largest difference inside the region of each layer that the core owns
//              (TilingPlan::tile(node, core).owned): layers at a lower resolution count for the region
//              they cover, so the map over the tiles shows where rounding differences sit;
//   per step   both losses; after the steps, the largest weight difference.
// A ReLU input within rounding of zero can land on opposite sides of the kink in the two runs; the
// report counts such flips, since one of them moves gradients by far more than rounding does.
// Layers are every model node but the input (its value is the data, it has no gradient), in model
// order. Layers after global pooling are replicated on every core: they have a row in `layers` but
// no place in the tile map.
//
//   MeshConfig mesh;
//   mesh.grid = partition::SpatialGrid::even({2, 1, 64, 64}, {2, 2});
//   EquivalenceReport r = compare_with_single_core(networks::make_unet(unet, {2, 1, 64, 64}), mesh, config,
//                                                  images, labels);      // images [2, 1, 64, 64]
//   r.worst_activation, r.worst_gradient    // relative, see below
//   r.tiles[3].max_rel_gradient             // core 3's largest relative gradient difference
//
// What to expect (a depth-3 U-Net of width 8 on [2, 1, 64, 64], 2×2 tiles, seed 7): fp32 values and
// gradients within ~5e-6 of the reference in every layer, losses within 2e-7 — and the same with
// one_tile_baseline, the mesh's code on the whole input: what remains is how its batch norm sums (in
// double, over the tiles) against oneDNN's, not the partitioning. Other seeds and batches can put a
// ReLU input within ~1e-7 of zero; a flip there moves single gradient elements by up to ~0.5 of the
// layer's largest (~1e-2 in norm, through batch norm's backward) while the values stay within ~1e-5.
// bf16: where a bf16 rounding or a ReLU falls the other way on the tiles, values ~1e-2, gradients ~10% in
// norm and up to ~0.8 of a layer's largest at single elements (batch norm's backward cancels heavily in
// bf16), again as much on one tile; where none does, fp32-level agreement (a 2×2×2 3D U-Net on 16³: 1.2e-5
// and 1.7e-6).
//
// One replica only: the single-core reference reproduces a replica's batch norm and update only when
// the replica is the whole batch, so num_replicas > 1 is refused (compare one replica of the layout).
#pragma once

#include "mesh/core_mesh.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tessera::mesh {

struct EquivalenceOptions {
    int steps = 2;            // steps trained before comparing; the comparison is of the last step
    std::uint64_t seed = 1;   // weight initialisation of both runs (replaces the trainer config's seed)
    // Called after every stage (one run's step, then the comparison) with the stages done and in all;
    // on the calling thread.
    std::function<void(int done, int total)> on_progress;
    // Checked between stages: once it holds true the comparison stops with an error saying so.
    const std::atomic<bool>* stop = nullptr;
    // Also train the same mesh code with the whole input on one core and compare it with the reference:
    // what the mesh's own kernels (its batch norm, its reductions) differ by without any partitioning.
    // In bf16 that is most of the difference; the partitioned run is then as far as this, not farther.
    bool one_tile_baseline = false;
};

struct LayerDifference {
    int node = -1;                        // model node id
    std::string name;                     // "down0.conv1"
    std::string op;                       // "conv", "batch_norm", ...
    Shape shape;                          // the node's output [N, C, (D,) H, W], or [N, F]
    bool replicated = false;              // after global pooling: every core holds all of it
    double max_abs_activation = 0, max_rel_activation = 0;  // forward value, partitioned (gathered) vs reference
    double max_abs_gradient = 0, max_rel_gradient = 0;      // d loss / d value
    double reference_scale = 0;           // max |reference| of the activation, for context
    double gradient_scale = 0;            // max |reference| of the gradient
    // ‖partitioned − reference‖ / ‖reference‖ (Euclidean, the whole layer): the typical element, where
    // max_rel_* is the worst one.
    double norm_rel_activation = 0, norm_rel_gradient = 0;
    // With EquivalenceOptions::one_tile_baseline: max_rel_* of the one-tile mesh against the reference.
    double baseline_rel_activation = 0, baseline_rel_gradient = 0;
    std::vector<double> core_abs_activation;  // [core]: max abs difference inside the core's owned region
    std::vector<double> core_abs_gradient;    // (empty when replicated)
    // A ReLU's output (ReLU, batch norm with fused ReLU): elements zero on one side and positive on the
    // other — inputs at the kink that the two runs rounded to opposite sides. The function is not
    // continuous there: a flip changes that element's gradient by O(1), and every layer before it sees
    // that in its gradients, every layer after it in its values.
    std::int64_t relu_flips = 0;
    double max_flip_value = 0;                // the largest positive side of a flip (how close to the kink)
    std::vector<std::int64_t> core_relu_flips;  // [core], ReLU layers only
    // A max pool: windows whose largest input is another element in the two runs (two inputs within
    // rounding of each other changed order); the gradient then goes to the other element, an O(1) change
    // at both, seen in every layer before. Which ones the kernels order differently depends on the CPU.
    std::int64_t pool_flips = 0;
};

// One core of replica 0: the largest difference within its tile, over the layers.
struct TileDifference {
    std::int64_t core = 0;
    std::vector<partition::Interval> owned;  // per spatial axis (D,) H, W: its region of the model input
    double max_abs_activation = 0;
    double max_abs_gradient = 0;
    // Each layer's difference in the tile divided by that layer's reference scale, then the maximum:
    // comparable across layers whose values differ by orders of magnitude.
    double max_rel_activation = 0;
    double max_rel_gradient = 0;
    int worst_activation_node = -1;          // the layer of max_rel_activation (−1: no difference)
    int worst_gradient_node = -1;
    std::int64_t relu_flips = 0;             // over the layers, inside the tile
};

struct EquivalenceReport {
    std::vector<LayerDifference> layers;                       // model order, the input excluded
    std::vector<TileDifference> tiles;                         // one per core of replica 0
    std::vector<double> reference_losses, partitioned_losses;  // per step
    double max_weight_difference = 0;                          // after the steps: parameters and BN statistics, abs
    double worst_activation = 0, worst_gradient = 0;           // over layers, relative
    std::string worst_activation_layer, worst_gradient_layer;
    std::int64_t relu_flips = 0;                               // over all layers (see LayerDifference::relu_flips)
    std::int64_t pool_flips = 0;                               // over all layers (see LayerDifference::pool_flips)
    std::string first_flip_layer;                              // the first layer (model order) with either
    std::string layout;                                        // "2×2 tiles (4 cores) of [2, 1, 64, 64], fp32, 2 steps"
    std::vector<std::int64_t> pieces;                          // per spatial axis
    Shape input;                                               // the model input [N, C, (D,) H, W]
    bool has_baseline = false;                                 // layers carry baseline_rel_* (one_tile_baseline)
    double seconds = 0;                                        // host time of the whole comparison
};

// Windows of max pool `node` whose largest input is a different element in `value_input` than in
// `reference_input` (the pool's input [N, C, (D,) H, W] in two runs; the first of equal maxima counts).
std::int64_t count_max_pool_flips(const graph::Node& node, const Tensor& value_input, const Tensor& reference_input);

// Trains `model` (one replica's graph) for options.steps on the mesh layout and on one core (Trainer)
// from the same seed and batch, then compares every layer's forward value and gradient of the last
// step (gathered over the tiles) with the reference's. images [N, C, (D,) H, W] f32 and labels
// [N, (D,) H, W] or [N] i32 are the model input's shape; the batch is the same at every step.
EquivalenceReport compare_with_single_core(const graph::Graph& model, const MeshConfig& mesh, const train::TrainerConfig& config,
                                           const Tensor& images, const Tensor& labels, const EquivalenceOptions& options = {});

// "2×2×2": the layout's pieces per spatial axis.
std::string pieces_text(const std::vector<std::int64_t>& pieces);

}  // namespace tessera::mesh
