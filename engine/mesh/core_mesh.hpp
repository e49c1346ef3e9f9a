// CoreMesh: a training step executed the way a spatially partitioned accelerator runs it.
//
// The mesh is num_replicas × (one replica's partition grid) simulated cores. Each core holds its own
// executor over its core graph (partition/core_graph.hpp): its tiles of the activations, a full copy
// of the weights, its own gradients and optimizer state. A step runs the model node by node on every
// core (phases over a host thread pool, a barrier between them):
//   forward   halo exchange before each windowed op that reaches across a tile border; batch-norm
//             statistics and global-pooling sums all-reduced over the replica (or the whole mesh with
//             cross-replica BN); the loss reduced over the replica;
//   backward  halo gradients returned to their owners and added there;
//   update    weight gradients summed over the replica's cores, averaged over replicas; every core
//             applies the same update with its own optimizer.
// Reductions add in a fixed order, so a run is bit-reproducible for a given seed and layout. Every op,
// exchange and reduction is recorded as an event for the timelines and the cost model.
//
// The cores may be spread over processes (mesh/transport.hpp: MPI ranks, each owning a contiguous block
// of cores). Every rank then constructs the mesh and calls every member below in the same order with the
// same arguments (collectively) — except a batch, which the ranks other than 0 may receive as their own
// cores' tiles (send_tiles / receive_tiles); each compiles and steps only its own cores, and what crosses ranks —
// halos, reductions, gradients, events, gathered tiles, checkpoints — goes through the transport. With
// ReductionOrder::Reproducible the result is bitwise that of one process.
//
//   MeshConfig mesh;
//   mesh.grid = partition::SpatialGrid::even({4, 1, 256, 256}, {2, 2});   // 4 cores per replica
//   CoreMesh cores(networks::make_unet(unet, {4, 1, 256, 256}), mesh, trainer_config);
//   train::StepResult step = cores.train_step(images, labels);           // images [4, 1, 256, 256]
//   cores.events();  cores.summary().halo_bytes;  cores.memory()[3].peak();
#pragma once

#include "graph/executor.hpp"
#include "partition/core_graph.hpp"
#include "partition/tiling.hpp"
#include "mesh/transport.hpp"
#include "train/trainer.hpp"

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tessera::mesh {

struct MeshConfig {
    std::int64_t num_replicas = 1;
    partition::SpatialGrid grid;                      // one replica's split of the input's spatial axes
    bool cross_replica_batch_norm = false;            // BN statistics over every replica's cores
    std::int64_t core_memory_bytes = 16LL << 30;      // capacity of one core (a TPU v3 core: 16 GiB HBM)
    int host_threads = 2;                             // threads that run the cores' phases
    // What the simulated cores may hold together in this machine's memory; 0: no limit. The mesh
    // measures each core as it compiles it and refuses, before the rest are built, once the cores
    // cannot fit (a run the kernel would otherwise kill part-way).
    std::int64_t host_memory_bytes = 0;
    // Across ranks (one process: the same either way).
    ReductionOrder reduction = ReductionOrder::Reproducible;
    // Halo messages between ranks overlap work that does not need them: forward, the rows leave before
    // the halo node copies the tiles' interiors; backward, a convolution's weights' gradients run while
    // its halo gradients travel. The same bits either way (bench/bm_mpi compares the two).
    bool overlap_halo_messages = true;
};

enum class EventKind { Compute, Halo, AllReduce, Wait };
enum class StepPhase { Forward, Backward, Update };
std::string_view event_kind_name(EventKind kind);
std::string_view step_phase_name(StepPhase phase);

struct CoreEvent {
    std::int64_t core = 0;        // mesh core: replica · cores_per_replica + core in the replica
    int layer = -1;               // model node; −1 for the loss and the weight update
    EventKind kind = EventKind::Compute;
    StepPhase phase = StepPhase::Forward;
    double start_seconds = 0;     // host time since the step began
    double end_seconds = 0;
    double flops = 0;             // compute: this core's share
    std::int64_t bytes = 0;       // halo: bytes received from `peer`; all-reduce: bytes this core sends
    std::int64_t peer = -1;       // halo: the core the rows came from (forward) or went to (backward)
};

struct LinkTraffic {
    std::int64_t from = 0, to = 0;  // mesh cores
    std::int64_t bytes = 0;         // halo bytes over the last step, both passes
};

struct StepSummary {
    std::int64_t halo_bytes = 0;           // every halo copy of the step, forward and backward
    std::int64_t analytic_halo_bytes = 0;  // what the tiling plan predicts for the same
    std::int64_t all_reduce_bytes = 0;     // sent by all cores, ring all-reduce
    std::vector<LinkTraffic> links;        // halo bytes per directed link, busiest first
    double compute_seconds = 0;            // summed over cores (host)
    double halo_seconds = 0;
    double all_reduce_seconds = 0;
    double halo_fraction_of_compute = 0;   // halo_seconds / compute_seconds
    // This rank's, when the mesh is spread over MPI ranks (0 in one process): waiting for halo messages
    // from other ranks, and the weight-gradient all-reduce (its own cores' sum included).
    double rank_halo_wait_seconds = 0;
    double rank_gradient_reduce_seconds = 0;
    // This rank's host threads over the step's phases (each phase runs the rank's cores on the thread
    // pool and ends when its last task does): the phases' wall time, and the thread time in it that no
    // task used — threads × wall − the tasks' time − the time idle threads spent running the tasks'
    // offered loops, threads as many as the phase had tasks, at most the pool's. A vCPU slower than the
    // other leaves its partner idle at the end of every phase whose work cannot be shared.
    double rank_phase_seconds = 0;
    double rank_idle_thread_seconds = 0;
};

struct MemoryItem {
    std::string name;  // layer, or "weights", "optimizer slots", ...
    std::int64_t bytes = 0;
};

// What one core holds, by kind; all of it lives through the whole step, so the sum is the step's peak.
struct MemoryLedger {
    std::int64_t core = 0;
    std::int64_t weights = 0;               // parameters and BN statistics, f32
    std::int64_t optimizer_slots = 0;       // momentum / Adam moments
    std::int64_t weight_gradients = 0;
    std::int64_t activations = 0;           // layer outputs saved for backward
    std::int64_t halo_buffers = 0;          // widened tiles and their gradients
    std::int64_t activation_gradients = 0;
    std::int64_t workspace = 0;             // kernels' reordered copies, pooling indices, scratch
    std::int64_t capacity = 0;
    std::vector<MemoryItem> largest;        // the biggest layers, largest first
    std::int64_t peak() const {
        return weights + optimizer_slots + weight_gradients + activations + halo_buffers + activation_gradients + workspace;
    }
};

// One rank's share of a batch: per core of that rank, in core order, its tile of the images and of the
// labels. A run spread over ranks reads its data on rank 0, which sends every other rank only these
// (CoreMesh::send_tiles / receive_tiles): a rank of a 16-way split of a 256³ volume receives and holds a
// sixteenth of each batch, not all of it.
struct RankTiles {
    std::vector<Tensor> images;  // [n, C, (D,) H, W] tiles of the model input, with no halo
    std::vector<Tensor> labels;  // the matching label tiles (replicated logits: the replica's labels); empty when not sent
};

class CoreMesh {
public:
    // model: one replica's model (its input's batch is the per-replica batch). transport: the ranks the
    // cores are spread over (none: this process holds them all).
    CoreMesh(graph::Graph model, MeshConfig mesh, train::TrainerConfig config, std::shared_ptr<Transport> transport = {});
    ~CoreMesh();
    CoreMesh(const CoreMesh&) = delete;
    CoreMesh& operator=(const CoreMesh&) = delete;

    // images [R·n, C, (D,) H, W] f32, labels [R·n, (D,) H, W] (segmentation) or [R·n] (classification) i32:
    // replica r takes rows r·n … (r+1)·n − 1, each core its tile. Throws before any work when a core's
    // memory would exceed its capacity.
    train::StepResult train_step(const Tensor& images, const Tensor& labels);
    // Detection (config.detection set, a RetinaNet model): one padded ground truth per image, replica r
    // taking images r·n … (r+1)·n − 1. Every core labels the anchors of its own cells of every level
    // (the cells of its tiles of the head outputs) against its replica's boxes: each box's best anchor
    // (force-matching) and the loss sums, positives included, are reduced over the replica, so the
    // targets and the loss are the whole images' (detection/detection_loss.hpp, the tile contract).
    train::StepResult train_step(const Tensor& images, std::span<const detection::PaddedGroundTruth> ground_truth);
    // Forward in evaluation mode; logits gathered from the tiles, loss and metrics over all replicas.
    // Spread over ranks, the logits are gathered on rank 0 alone: the result is empty on the others.
    train::EvalResult evaluate(const Tensor& images, const Tensor& labels);
    // Forward in evaluation mode on images [R·n, C, (D,) H, W]: every model output (Graph::output_nodes()
    // order) gathered from the tiles, replica r's rows r·n … (r+1)·n − 1. A detector's heads for inference.
    // Spread over ranks, on rank 0 alone (undefined tensors on the others).
    std::vector<Tensor> predict_outputs(const Tensor& images);
    // A detector's loss on the outputs of the last predict_outputs, averaged over replicas, with one padded
    // ground truth per image: computed on each core's tile as a training step does (its anchors' targets,
    // one core per host thread at a time), not on the gathered outputs (at 2560² the whole image's targets
    // and gradients would be 1.3 GB more).
    double detection_loss(std::span<const detection::PaddedGroundTruth> ground_truth);

    // ---- the batch on ranks other than 0 ----
    // Rank 0 holds the whole batch and calls the members above with it; every other rank calls the same
    // member at the same time with only its own cores' tiles, which rank 0 sent it: send_tiles on rank 0
    // and receive_tiles on each other rank, together (point-to-point, rank by rank). Labels are sent when
    // given. The results equal those of every rank holding the whole batch, bit for bit; on a rank other
    // than 0 evaluate's loss and metrics and predict_outputs' tensors are left empty (the gathered
    // outputs are rank 0's).
    void send_tiles(const Tensor& images, const Tensor* labels) const;
    RankTiles receive_tiles() const;
    RankTiles tiles_for_rank(int rank, const Tensor& images, const Tensor* labels) const;
    train::StepResult train_step(const RankTiles& own);
    train::StepResult train_step(const RankTiles& own, std::span<const detection::PaddedGroundTruth> ground_truth);
    void evaluate(const RankTiles& own);
    void predict_outputs(const RankTiles& own);

    // What the cores hold on this host, measured as they were compiled (each core's graph and loss
    // gradients, the shared weights and optimizer slots once, a detector's targets per host thread);
    // 0 when MeshConfig::host_memory_bytes was not set (nothing measured).
    std::int64_t host_bytes() const;  // this rank's
    Transport& transport() const;
    bool owns_core(std::int64_t core) const;  // compiled and stepped by this rank
    const CorePlacement& placement() const;   // which rank owns which cores
    const std::vector<std::string>& rank_hosts() const;  // each rank's host
    std::int64_t num_cores() const;
    std::int64_t cores_per_replica() const;
    std::int64_t num_replicas() const;
    std::int64_t step() const;
    const graph::Graph& model() const;
    const partition::TilingPlan& plan() const;
    const partition::CoreGraphs& core_graphs() const;
    graph::Executor& executor(std::int64_t core);  // one of this rank's cores
    const MeshConfig& config() const;

    const std::vector<CoreEvent>& events() const;  // of the last step, by start time
    const StepSummary& summary() const;            // of the last step
    std::vector<MemoryLedger> memory() const;      // one per core
    // Throws the out-of-memory error train_step would; does nothing when every core fits.
    void check_memory() const;

    // ---- checkpoints ----
    // Every core holds the same weights and optimizer state (each applies the same update to the same
    // summed gradients), so replica 0's first core speaks for all of them. BN running statistics are
    // per replica (without cross-replica BN) and are all kept, so a resumed run evaluates like the
    // uninterrupted one.
    // The model's parameters, then its BN running statistics (replica 0), by name; copies.
    std::vector<train::NamedTensor> weights() const;
    // "optimizer/<parameter>/<slot>" and "optimizer/num_steps", the loss scaler's entries, "mesh/step",
    // and "replica<r>/<buffer>" for replicas 1…R−1; copies.
    std::vector<train::NamedTensor> training_state() const;
    // Loads what weights() and training_state() returned (from this model and layout) into every core.
    // Checks every name and shape first and changes nothing when one is missing or differs.
    void load_checkpoint(const std::vector<train::NamedTensor>& weights, const std::vector<train::NamedTensor>& state);

    // A model node's value (or gradient) on one replica, assembled from its cores' tiles: what the
    // unpartitioned model holds for that replica's batch.
    Tensor gather_activation(int model_node, std::int64_t replica = 0) const;
    Tensor gather_activation_gradient(int model_node, std::int64_t replica = 0) const;

private:
    // only_to_root: assembled on rank 0 alone (undefined elsewhere), the other ranks' tiles sent to it only.
    Tensor gather_tiles(int model_node, std::int64_t replica, bool gradient, bool only_to_root = false) const;
    // A model output of every replica, [R·n, …], on rank 0 (undefined on the others): evaluate's and
    // predict_outputs' gather, which no other rank needs whole.
    Tensor gather_outputs_to_rank_zero(int node) const;

    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

}  // namespace tessera::mesh
