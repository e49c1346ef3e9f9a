#include "mesh/core_mesh.hpp"

#include "mesh/thread_pool.hpp"
#include "loss/dice_loss.hpp"
#include "detection/matcher.hpp"
#include "train/step_end.hpp"
#include "core/units.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <type_traits>

namespace tessera::mesh {

namespace {

using Clock = std::chrono::steady_clock;
using graph::Pass;

std::string format_bytes(std::int64_t bytes) {
    std::ostringstream out;
    out.setf(std::ios::fixed);
    out.precision(2);
    if (bytes >= (1LL << 30)) out << static_cast<double>(bytes) / static_cast<double>(1LL << 30) << " GiB";
    else if (bytes >= (1LL << 20)) out << static_cast<double>(bytes) / static_cast<double>(1LL << 20) << " MiB";
    else if (bytes >= (1LL << 10)) out << static_cast<double>(bytes) / static_cast<double>(1LL << 10) << " KiB";
    else out << bytes << " B";
    return out.str();
}

// Loss partial sums of one core's tile, added over a replica's cores.
struct LossPartial {
    loss::CrossEntropyPartial cross_entropy;
    loss::DicePartial dice;
    LossPartial& operator+=(const LossPartial& other) {
        cross_entropy += other.cross_entropy;
        dice += other.dice;
        return *this;
    }
};

}  // namespace

std::string_view event_kind_name(EventKind kind) {
    switch (kind) {
        case EventKind::Compute: return "compute";
        case EventKind::Halo: return "halo";
        case EventKind::AllReduce: return "all-reduce";
        case EventKind::Wait: return "wait";
    }
    return "?";
}

std::string_view step_phase_name(StepPhase phase) {
    switch (phase) {
        case StepPhase::Forward: return "forward";
        case StepPhase::Backward: return "backward";
        case StepPhase::Update: return "update";
    }
    return "?";
}

struct CoreMesh::Impl {
    graph::Graph model;
    MeshConfig mesh;
    train::TrainerConfig config;
    partition::TilingPlan plan;
    partition::CoreGraphs core_graphs;
    std::int64_t per_replica = 1;  // cores in one replica
    std::int64_t total_cores = 1;
    std::shared_ptr<Transport> transport;
    CorePlacement placement{1, 1};
    std::vector<std::string> rank_hosts;
    std::int64_t first_local = 0, end_local = 1;  // this rank's cores: [first_local, end_local)

    struct Core {
        std::int64_t replica = 0, index = 0;  // index within the replica
        std::unique_ptr<graph::Executor> executor;
        std::unique_ptr<train::Optimizer> optimizer;
        std::vector<CoreEvent> events;
        Tensor images, labels;  // this step's tiles
        std::vector<detection::PaddedGroundTruth> ground_truth;  // detection: its replica's images
    };
    // Detection: the whole input's anchors, and per core of a replica the cells of every level it holds
    // (its tiles of the head outputs) with their anchors, in the order its targets are laid out.
    struct DetectionTile {
        std::vector<detection::CellRange> cells;   // per level
        std::vector<std::int64_t> anchor_indices;  // global
        std::vector<detection::Box> anchor_boxes;
    };
    std::unique_ptr<detection::Detector> detector;
    std::vector<DetectionTile> detection_tiles;
    std::int64_t host_bytes = 0;  // measured when built (CoreMesh::host_bytes)
    std::vector<Core> cores;
    std::unique_ptr<ThreadPool> pool;
    std::unique_ptr<train::LearningRateSchedule> schedule;
    std::unique_ptr<train::LossScaler> loss_scaler;
    std::int64_t step = 0;
    bool output_replicated = false;
    std::vector<bool> replicated_parameter;                  // after global pooling: identical on every core
    std::int64_t parameter_bytes = 0;                        // the model's parameters in f32: one copy's bytes
    // Per halo exchange: for each core, the (receiving core, transfer) pairs whose rows it owns.
    std::vector<std::vector<std::vector<std::pair<std::int64_t, std::size_t>>>> outgoing;
    // Per halo exchange: the transfers between this rank and another, in one order every rank agrees on
    // (owner core, then receiving core, then transfer), each with the bytes it travels in.
    struct RemoteTransfer {
        std::int64_t owner = 0, receiver = 0;  // mesh cores
        std::size_t index = 0;                 // in the receiver's transfers
        bool outgoing = false;                 // this rank owns the rows (forward: sends them)
        std::vector<std::byte> staging;        // header (the sender's layout) + rows
    };
    std::vector<std::vector<RemoteTransfer>> remote;

    std::vector<CoreEvent> events;
    StepSummary summary;
    Clock::time_point step_start;
    double step_halo_wait = 0, step_gradient_reduce = 0;  // this rank's, this step (StepSummary)
    double step_phase_seconds = 0, step_idle_thread_seconds = 0;

    Impl(graph::Graph m, MeshConfig me, train::TrainerConfig c)
        : model(std::move(m)), mesh(std::move(me)), config(std::move(c)), plan(model, mesh.grid),
          core_graphs(partition::build_core_graphs(model, plan)) {}

    double now() const { return std::chrono::duration<double>(Clock::now() - step_start).count(); }

    bool single_rank() const { return transport->num_ranks() == 1; }
    bool is_local(std::int64_t core) const { return core >= first_local && core < end_local; }
    Core& first_local_core() { return cores[static_cast<std::size_t>(first_local)]; }
    const Core& first_local_core() const { return cores[static_cast<std::size_t>(first_local)]; }
    std::span<Core> local_cores() {
        return std::span<Core>(cores).subspan(static_cast<std::size_t>(first_local), static_cast<std::size_t>(end_local - first_local));
    }
    std::span<const Core> local_cores() const {
        return std::span<const Core>(cores).subspan(static_cast<std::size_t>(first_local),
                                                    static_cast<std::size_t>(end_local - first_local));
    }

    // Runs task(core) on this rank's cores over the pool; records each core's wait at the barrier.
    template <class Task>
    void each_core(StepPhase phase, int layer, Task&& task) {
        std::vector<double> finished(cores.size(), 0.0);
        std::vector<double> task_seconds(cores.size(), 0.0);
        const double phase_start = now();
        const double helped_before = pool->helping_seconds();
        pool->run(end_local - first_local, [&](std::int64_t i) {
            const auto c = static_cast<std::size_t>(first_local + i);
            const double task_start = now();
            task(cores[c]);
            finished[c] = now();
            task_seconds[c] = finished[c] - task_start;
        });
        const double end = now();
        const std::int64_t threads = std::min<std::int64_t>(pool->num_threads(), end_local - first_local);
        double busy = pool->helping_seconds() - helped_before;  // idle threads' share of the tasks' loops
        for (const double seconds : task_seconds) busy += seconds;
        step_phase_seconds += end - phase_start;
        step_idle_thread_seconds += std::max(0.0, static_cast<double>(threads) * (end - phase_start) - busy);
        for (auto c = static_cast<std::size_t>(first_local); c < static_cast<std::size_t>(end_local); ++c) {
            if (end - finished[c] > 1e-6) {
                cores[c].events.push_back({static_cast<std::int64_t>(c), layer, EventKind::Wait, phase, finished[c], end, 0, 0, -1});
            }
        }
    }

    // Hands every rank what the others wrote for their own cores: write(core, writer) on this rank's
    // cores, then read(core, reader) for every other rank's, in core order. Nothing moves on one rank.
    // With `only_to_root`, rank 0 alone reads them (the others just write theirs).
    template <class Write, class Read>
    void share_core_values(Write&& write, Read&& read, bool only_to_root = false) {
        if (single_rank()) return;
        ByteWriter writer;
        for (std::int64_t c = first_local; c < end_local; ++c) write(c, writer);
        const std::vector<std::vector<std::byte>> gathered =
            only_to_root ? transport->gather(writer.bytes(), 0) : transport->all_gather(writer.bytes());
        if (gathered.empty()) return;
        for (int rank = 0; rank < transport->num_ranks(); ++rank) {
            if (rank == transport->rank()) continue;
            ByteReader reader(gathered[static_cast<std::size_t>(rank)]);
            for (std::int64_t c = placement.first_core(rank); c < placement.end_core(rank); ++c) read(c, reader);
            TESSERA_ASSERT(reader.done(), "rank " << rank << " sent more than its cores' values");
        }
    }

    // As share_core_values, for values only one replica's cores need (its reductions): each replica's
    // values cross only the ranks holding its cores, over a communicator of those ranks, so a reduction
    // costs the same with 2 replicas as with 64. Replicas in order, on every rank that holds one of
    // their cores; nothing moves for a replica held by one rank.
    template <class Write, class Read>
    void share_replica_values(Write&& write, Read&& read) {
        if (single_rank()) return;
        for (std::int64_t replica = 0; replica < mesh.num_replicas; ++replica) {
            if (!holds_replica(replica)) continue;
            const std::int64_t first = mesh_core(replica, 0), end = first + per_replica;
            const int first_rank = placement.owner(first), last_rank = placement.owner(end - 1);
            if (first_rank == last_rank) continue;
            std::vector<int> group;
            for (int rank = first_rank; rank <= last_rank; ++rank) group.push_back(rank);
            ByteWriter writer;
            for (std::int64_t c = std::max(first, first_local); c < std::min(end, end_local); ++c) write(c, writer);
            const std::vector<std::vector<std::byte>> gathered = transport->all_gather(writer.bytes(), group);
            for (std::size_t member = 0; member < group.size(); ++member) {
                const int rank = group[member];
                if (rank == transport->rank()) continue;
                ByteReader reader(gathered[member]);
                for (std::int64_t c = std::max(first, placement.first_core(rank)); c < std::min(end, placement.end_core(rank)); ++c) read(c, reader);
                TESSERA_ASSERT(reader.done(), "rank " << rank << " sent more than its cores' values of replica " << replica);
            }
        }
    }
    // Whether a core of `replica` is this rank's.
    bool holds_replica(std::int64_t replica) const {
        return mesh_core(replica, 0) < end_local && mesh_core(replica, 0) + per_replica > first_local;
    }

    // Every rank learns whether any failed: the first failure (in rank order) is thrown on all of them,
    // with the rank and host named when it was another's; a rank's own is rethrown as it was.
    void agree_on_failure(const std::exception_ptr& local_failure) {
        if (single_rank()) {
            if (local_failure) std::rethrow_exception(local_failure);
            return;
        }
        ByteWriter writer;
        std::string message;
        if (local_failure) {
            try {
                std::rethrow_exception(local_failure);
            } catch (const std::exception& error) {
                message = error.what();
            }
        }
        writer.put_string(message);
        writer.put_string(transport->host_name());
        const std::vector<std::vector<std::byte>> gathered = transport->all_gather(writer.bytes());
        for (int rank = 0; rank < transport->num_ranks(); ++rank) {
            ByteReader reader(gathered[static_cast<std::size_t>(rank)]);
            const std::string failure = reader.get_string();
            const std::string host = reader.get_string();
            if (failure.empty()) continue;
            if (rank == transport->rank()) std::rethrow_exception(local_failure);
            TESSERA_REJECT(failure << " (on MPI rank " << rank << ", host " << host << ")");
        }
    }

    // Sums each group's partials in core order (a fixed order: bit-reproducible) and hands the totals
    // back. Groups: the replica, or every core (cross-replica). Across ranks the ranks holding a group's
    // cores gather its partials and each adds them in the same order (they are a few numbers per channel).
    void all_reduce(std::vector<std::vector<double>>& partials, bool across_replicas, StepPhase phase, int layer) {
        const double start = now();
        const auto write = [&](std::int64_t c, ByteWriter& out) { out.put_span(std::span<const double>(partials[static_cast<std::size_t>(c)])); };
        const auto read = [&](std::int64_t c, ByteReader& in) { partials[static_cast<std::size_t>(c)] = in.get_vector<double>(); };
        if (across_replicas) {
            share_core_values(write, read);
        } else {
            share_replica_values(write, read);
        }
        const std::int64_t group_size = across_replicas ? total_cores : per_replica;
        for (std::int64_t first = 0; first < total_cores; first += group_size) {
            if (first + group_size <= first_local || first >= end_local) continue;  // no core of this rank's
            std::vector<double> total = partials[static_cast<std::size_t>(first)];
            for (std::int64_t c = first + 1; c < first + group_size; ++c) {
                const auto& part = partials[static_cast<std::size_t>(c)];
                for (std::size_t i = 0; i < total.size(); ++i) total[i] += part[i];
            }
            for (std::int64_t c = first; c < first + group_size; ++c) partials[static_cast<std::size_t>(c)] = total;
        }
        const double end = now();
        const auto bytes = static_cast<std::int64_t>(partials[static_cast<std::size_t>(first_local)].size() * sizeof(double));
        for (std::int64_t c = first_local; c < end_local; ++c) {
            cores[static_cast<std::size_t>(c)].events.push_back(
                {c, layer, EventKind::AllReduce, phase, start, end, 0, ring_bytes(bytes, group_size), -1});
        }
    }

    // Bytes each core sends in a ring all-reduce of `bytes` over `group` cores.
    static std::int64_t ring_bytes(std::int64_t bytes, std::int64_t group) {
        return group > 1 ? 2 * (group - 1) * bytes / group : 0;
    }

    int layer_of(int local) const {
        const int model_node = core_graphs.model_node[static_cast<std::size_t>(local)];
        if (model_node >= 0) return model_node;
        const partition::HaloExchange* halo = core_graphs.halo_for(local);
        return halo ? halo->layer : -1;
    }

    void reductions(int local, Pass pass, StepPhase phase) {
        const int phases = first_local_core().executor->reduction_phases(local, pass);
        const graph::Node& node = core_graphs.graphs[0].node(local);
        const bool across_replicas = node.kind == graph::OpKind::BatchNorm && mesh.cross_replica_batch_norm;
        for (int p = 0; p < phases; ++p) {
            std::vector<std::vector<double>> partials(cores.size());
            each_core(phase, layer_of(local), [&](Core& core) {
                const double start = now();
                partials[static_cast<std::size_t>(core.replica * per_replica + core.index)] =
                    core.executor->reduction_partial(local, pass, p);
                const double flops = pass == Pass::Backward
                                         ? core_graphs.graphs[static_cast<std::size_t>(core.index)].cost(local).backward_flops
                                         : 0.0;
                core.events.push_back({core.replica * per_replica + core.index, layer_of(local), EventKind::Compute, phase,
                                       start, now(), flops, 0, -1});
            });
            all_reduce(partials, across_replicas, phase, layer_of(local));
            for (Core& core : local_cores()) {
                core.executor->reduction_total(local, pass, p, partials[static_cast<std::size_t>(mesh_core(core.replica, core.index))]);
            }
        }
    }

    std::int64_t mesh_core(std::int64_t replica, std::int64_t index) const { return replica * per_replica + index; }

    // Where a step's first non-finite value came from, for the message that stops the run: an input
    // tile, else the first layer (in graph order) whose output holds one, and on which core. Collective:
    // each rank looks at its own cores and the first finding over all ranks wins.
    std::string locate_non_finite_forward() {
        constexpr std::int64_t none = std::numeric_limits<std::int64_t>::max();
        // Found at (node, core); node −1: the input tile.
        std::array<std::int64_t, 2> found{none, none};
        for (const Core& core : local_cores()) {
            if (!train::tensor_is_finite(core.images)) {
                found = {-1, mesh_core(core.replica, core.index)};
                break;
            }
        }
        const auto& nodes = first_local_core().executor->graph().nodes();
        for (std::size_t node = 0; node < nodes.size() && found[0] == none; ++node) {
            for (const Core& core : local_cores()) {
                if (!train::tensor_is_finite(core.executor->activation(static_cast<int>(node)))) {
                    found = {static_cast<std::int64_t>(node), mesh_core(core.replica, core.index)};
                    break;
                }
            }
        }
        if (!single_rank()) {
            ByteWriter writer;
            writer.put(found);
            for (const std::vector<std::byte>& bytes : transport->all_gather(writer.bytes())) {
                ByteReader reader(bytes);
                found = std::min(found, reader.get<std::array<std::int64_t, 2>>());
            }
        }
        if (found[0] == -1) {
            return "the input tile of core " + std::to_string(found[1]) + " holds NaN or infinite voxels. Clean the data (see data.non_finite)";
        }
        if (found[0] != none) {
            return "the output of layer '" + nodes[static_cast<std::size_t>(found[0])].name + "' on core " + std::to_string(found[1]) +
                   " is the first to hold NaN or infinite values: training diverged. Lower the learning rate, or use "
                   "dynamic loss scaling in reduced precision";
        }
        return "every layer's output is finite, the loss overflowed. Lower the learning rate";
    }

    // The rows a remote transfer travels in: the sender's layout, then the box. A receive is posted
    // with room for the largest layout (blocks of 16); the message is as long as the sender's.
    static constexpr std::size_t staging_header = sizeof(ops::PackedLayout);
    static constexpr std::int32_t largest_block = 16;
    static std::size_t staging_bytes(const ops::TileBuffer& like, const ops::Box& extent, ops::PackedLayout layout) {
        return staging_header +
               static_cast<std::size_t>(ops::packed_elements(like.shape[0], like.channels(), layout, extent) * like.element_size());
    }
    static void pack(const ops::TileBuffer& from, const ops::Box& origin, const ops::Box& extent, std::vector<std::byte>& staging) {
        const ops::PackedLayout layout = ops::packed_layout(from);
        TESSERA_ASSERT(layout.block <= largest_block, "halo rows travel in blocks of at most " << largest_block << " channels, the buffer has "
                                                                                              << layout.block);
        staging.resize(staging_bytes(from, extent, layout));
        std::memcpy(staging.data(), &layout, staging_header);
        const ops::TileBuffer packed =
            ops::packed_buffer(from.dtype, from.shape[0], from.channels(), layout, extent, staging.data() + staging_header);
        ops::copy_box(from, origin, packed, ops::Box(extent.size(), 0), extent);
    }
    // The packed rows of `staging` as a buffer shaped like `like`'s box.
    static ops::TileBuffer unpacked(const ops::TileBuffer& like, const ops::Box& extent, std::vector<std::byte>& staging) {
        ops::PackedLayout layout;
        std::memcpy(&layout, staging.data(), staging_header);
        return ops::packed_buffer(like.dtype, like.shape[0], like.channels(), layout, extent, staging.data() + staging_header);
    }

    // Posts the receives of a halo exchange's remote transfers (forward: rows this rank's cores receive;
    // backward: halo gradients coming home to the rows' owners here).
    void post_remote_receives(std::size_t halo_index, bool backward) {
        const partition::HaloExchange& halo = core_graphs.halos[halo_index];
        for (RemoteTransfer& transfer : remote[halo_index]) {
            if (transfer.outgoing != backward) continue;  // forward: receive what others own; backward: what I own
            const Core& here = cores[static_cast<std::size_t>(backward ? transfer.owner : transfer.receiver)];
            const partition::HaloTransfer& rows =
                halo.transfers[static_cast<std::size_t>(transfer.receiver % per_replica)][transfer.index];
            const ops::TileBuffer like = backward ? here.executor->gradient_buffer(halo.producer_node)
                                                  : here.executor->value_buffer(halo.halo_node);
            transfer.staging.resize(staging_bytes(like, rows.extent, ops::PackedLayout{largest_block, 0}));
            const int peer_rank = placement.owner(backward ? transfer.receiver : transfer.owner);
            transport->post_receive(peer_rank, backward ? MessageTag::BackwardHalo : MessageTag::ForwardHalo, transfer.staging);
        }
    }

    // Posts the sends packed by the cores' phase (forward: rows this rank owns; backward: halo gradients
    // its cores received rows for).
    void post_remote_sends(std::size_t halo_index, bool backward) {
        for (RemoteTransfer& transfer : remote[halo_index]) {
            if (transfer.outgoing == backward) continue;
            const int peer_rank = placement.owner(backward ? transfer.owner : transfer.receiver);
            transport->post_send(peer_rank, backward ? MessageTag::BackwardHalo : MessageTag::ForwardHalo, transfer.staging);
        }
    }

    void forward(graph::Mode mode) {
        const auto& local_nodes = core_graphs.graphs[0].nodes();
        for (const graph::Node& node : local_nodes) {
            if (node.kind == graph::OpKind::Input) continue;
            const int local = node.id;
            const int layer = layer_of(local);
            reductions(local, Pass::Forward, StepPhase::Forward);
            const partition::HaloExchange* halo = core_graphs.halo_for(local);
            const auto halo_index = halo ? static_cast<std::size_t>(halo - core_graphs.halos.data()) : 0;
            const bool crosses_ranks = halo && !remote[halo_index].empty();
            // Rows this rank's cores own that cores of other ranks need, sent first (overlapping): they
            // travel while the halo node copies each tile's interior and the neighbours' rows held here.
            const auto send_rows = [&] {
                each_core(StepPhase::Forward, layer, [&](Core& core) {
                    const std::int64_t me = mesh_core(core.replica, core.index);
                    const ops::TileBuffer rows = core.executor->value_buffer(halo->producer_node);
                    for (RemoteTransfer& remote_transfer : remote[halo_index]) {
                        if (!remote_transfer.outgoing || remote_transfer.owner != me) continue;
                        const partition::HaloTransfer& transfer =
                            halo->transfers[static_cast<std::size_t>(remote_transfer.receiver % per_replica)][remote_transfer.index];
                        pack(rows, transfer.peer_origin, transfer.extent, remote_transfer.staging);
                    }
                });
                post_remote_sends(halo_index, false);
            };
            if (crosses_ranks) post_remote_receives(halo_index, false);
            if (crosses_ranks && mesh.overlap_halo_messages) send_rows();
            each_core(StepPhase::Forward, layer, [&](Core& core) {
                const std::int64_t me = mesh_core(core.replica, core.index);
                const graph::Graph& g = core_graphs.graphs[static_cast<std::size_t>(core.index)];
                double start = now();
                core.executor->forward_node(local);
                core.events.push_back({me, layer, EventKind::Compute, StepPhase::Forward, start, now(),
                                       g.cost(local).forward_flops, 0, -1});
                if (!halo) return;
                const ops::TileBuffer buffer = core.executor->value_buffer(local);
                for (const partition::HaloTransfer& transfer : halo->transfers[static_cast<std::size_t>(core.index)]) {
                    const std::int64_t peer = mesh_core(core.replica, transfer.peer);
                    if (!is_local(peer)) continue;  // arrives below
                    start = now();
                    const ops::TileBuffer source =
                        cores[static_cast<std::size_t>(peer)].executor->value_buffer(halo->producer_node);
                    ops::copy_box(source, transfer.peer_origin, buffer, transfer.buffer_origin, transfer.extent);
                    core.events.push_back({me, layer, EventKind::Halo, StepPhase::Forward, start, now(), 0,
                                           transfer.elements * buffer.element_size(), peer});
                }
            });
            if (!crosses_ranks) continue;
            if (!mesh.overlap_halo_messages) send_rows();
            const double wait_start = now();
            transport->wait_all();
            const double wait_end = now();
            step_halo_wait += wait_end - wait_start;
            each_core(StepPhase::Forward, layer, [&](Core& core) {
                const std::int64_t me = mesh_core(core.replica, core.index);
                const ops::TileBuffer buffer = core.executor->value_buffer(local);
                for (RemoteTransfer& remote_transfer : remote[halo_index]) {
                    if (remote_transfer.outgoing || remote_transfer.receiver != me) continue;
                    const partition::HaloTransfer& transfer =
                        halo->transfers[static_cast<std::size_t>(core.index)][remote_transfer.index];
                    const double start = now();
                    ops::copy_box(unpacked(buffer, transfer.extent, remote_transfer.staging), ops::Box(transfer.extent.size(), 0), buffer,
                                  transfer.buffer_origin, transfer.extent);
                    // The message's time on the wire is the wait every core of this rank shared.
                    core.events.push_back({me, layer, EventKind::Halo, StepPhase::Forward, wait_start, wait_end + (now() - start), 0,
                                           transfer.elements * buffer.element_size(), remote_transfer.owner});
                }
            });
        }
        (void)mode;
    }

    // The halo exchange whose halo node feeds `local` and whose gradients cross to another rank, or null.
    const partition::HaloExchange* remote_halo_feeding(int local) const {
        const graph::Node& node = core_graphs.graphs[0].node(local);
        if (node.inputs.empty()) return nullptr;
        const partition::HaloExchange* halo = core_graphs.halo_for(node.inputs[0]);
        if (!halo || !halo->carries_gradient) return nullptr;
        return remote[static_cast<std::size_t>(halo - core_graphs.halos.data())].empty() ? nullptr : halo;
    }

    void backward() {
        const auto& local_nodes = core_graphs.graphs[0].nodes();
        // A convolution whose input gradients go to another rank computes them first; its weights'
        // gradients wait (per halo exchange) and run while those messages travel.
        std::vector<std::vector<int>> deferred_weights(core_graphs.halos.size());
        for (std::size_t n = local_nodes.size(); n-- > 0;) {
            const graph::Node& node = local_nodes[n];
            if (node.kind == graph::OpKind::Input) continue;
            const int local = node.id;
            const int layer = layer_of(local);
            const partition::HaloExchange* halo = core_graphs.halo_for(local);
            if (halo && !halo->carries_gradient) continue;  // the input data needs no gradient
            const auto halo_index = halo ? static_cast<std::size_t>(halo - core_graphs.halos.data()) : 0;
            const bool crosses_ranks = halo && !remote[halo_index].empty();
            const bool has_phases = first_local_core().executor->reduction_phases(local, Pass::Backward) > 0;
            const partition::HaloExchange* feeding = remote_halo_feeding(local);
            const bool inputs_first = mesh.overlap_halo_messages && !halo && !has_phases && feeding &&
                                      first_local_core().executor->splits_backward(local);
            if (inputs_first) deferred_weights[static_cast<std::size_t>(feeding - core_graphs.halos.data())].push_back(local);
            reductions(local, Pass::Backward, StepPhase::Backward);
            if (crosses_ranks) post_remote_receives(halo_index, true);
            const auto run_node = [&](Core& core) {
                const double start = now();
                const graph::NodeCost& cost = core_graphs.graphs[static_cast<std::size_t>(core.index)].cost(local);
                double flops = has_phases ? 0.0 : cost.backward_flops;
                if (inputs_first) {
                    core.executor->backward_node_inputs(local);
                    flops -= cost.forward_flops;  // the weights' gradient: as many FLOPs as forward
                } else {
                    core.executor->backward_node(local);
                }
                core.events.push_back({mesh_core(core.replica, core.index), layer, EventKind::Compute, StepPhase::Backward, start,
                                       now(), flops, 0, -1});
            };
            // The halo gradients of rows owned on other ranks go home.
            const auto pack_returns = [&](Core& core) {
                const std::int64_t me = mesh_core(core.replica, core.index);
                const ops::TileBuffer gradient = core.executor->gradient_buffer(local);
                for (RemoteTransfer& remote_transfer : remote[halo_index]) {
                    if (remote_transfer.outgoing || remote_transfer.receiver != me) continue;
                    const partition::HaloTransfer& transfer = halo->transfers[static_cast<std::size_t>(core.index)][remote_transfer.index];
                    pack(gradient, transfer.buffer_origin, transfer.extent, remote_transfer.staging);
                }
            };
            if (crosses_ranks && mesh.overlap_halo_messages) {
                // Sent first; while they travel, the halo node's own backward (its interior into the tile's
                // gradient) and the deferred weights' gradients of the layer it feeds.
                each_core(StepPhase::Backward, layer, pack_returns);
                post_remote_sends(halo_index, true);
                each_core(StepPhase::Backward, layer, [&](Core& core) {
                    run_node(core);
                    for (const int consumer : deferred_weights[halo_index]) {
                        const double start = now();
                        core.executor->backward_node_weights(consumer);
                        const double flops = core_graphs.graphs[static_cast<std::size_t>(core.index)].cost(consumer).forward_flops;
                        core.events.push_back({mesh_core(core.replica, core.index), layer_of(consumer), EventKind::Compute,
                                               StepPhase::Backward, start, now(), flops, 0, -1});
                    }
                });
                deferred_weights[halo_index].clear();
            } else {
                each_core(StepPhase::Backward, layer, [&](Core& core) {
                    run_node(core);
                    if (crosses_ranks) pack_returns(core);
                });
                if (crosses_ranks) post_remote_sends(halo_index, true);
            }
            if (!halo) continue;
            double wait_start = 0, wait_end = 0;
            if (crosses_ranks) {
                wait_start = now();
                transport->wait_all();
                wait_end = now();
                step_halo_wait += wait_end - wait_start;
            }
            // Halo gradients go home: each owner adds what its neighbours received from it, senders in order
            // (from another rank's core: the rows that came in its message).
            const auto& sends = outgoing[halo_index];
            each_core(StepPhase::Backward, layer, [&](Core& core) {
                const std::int64_t me = mesh_core(core.replica, core.index);
                const ops::TileBuffer target = core.executor->gradient_buffer(halo->producer_node);
                for (const auto& [receiver, index] : sends[static_cast<std::size_t>(core.index)]) {
                    const partition::HaloTransfer& transfer = halo->transfers[static_cast<std::size_t>(receiver)][index];
                    const std::int64_t peer = mesh_core(core.replica, receiver);
                    const double start = now();
                    double event_start = start, waited = 0;
                    if (is_local(peer)) {
                        const ops::TileBuffer source = cores[static_cast<std::size_t>(peer)].executor->gradient_buffer(local);
                        ops::add_box(source, transfer.buffer_origin, target, transfer.peer_origin, transfer.extent);
                    } else {
                        RemoteTransfer& message = find_remote(halo_index, me, peer, index);
                        ops::add_box(unpacked(target, transfer.extent, message.staging), ops::Box(transfer.extent.size(), 0), target,
                                     transfer.peer_origin, transfer.extent);
                        event_start = wait_start;
                        waited = wait_end - wait_start;
                    }
                    core.events.push_back({me, layer, EventKind::Halo, StepPhase::Backward, event_start, event_start + waited + (now() - start), 0,
                                           transfer.elements * target.element_size(), peer});
                }
                core.executor->gradient_changed(halo->producer_node);
            });
        }
        for (const std::vector<int>& waiting : deferred_weights) {
            TESSERA_ASSERT(waiting.empty(), "a layer's weight gradients were deferred to a halo exchange that never ran");
        }
    }

    // Replica r's batch-norm buffer b (a clone), from the rank holding the replica's first core.
    Tensor replica_buffer(std::int64_t replica, std::size_t b) {
        const std::int64_t core = mesh_core(replica, 0);
        Tensor value = is_local(core) ? cores[static_cast<std::size_t>(core)].executor->buffers()[b].clone()
                                      : Tensor::zeros(first_local_core().executor->buffers()[b].shape(), first_local_core().executor->buffers()[b].dtype());
        if (!single_rank()) transport->broadcast(as_bytes(value), placement.owner(core));
        return value;
    }

    RemoteTransfer& find_remote(std::size_t halo_index, std::int64_t owner, std::int64_t receiver, std::size_t index) {
        for (RemoteTransfer& transfer : remote[halo_index]) {
            if (transfer.owner == owner && transfer.receiver == receiver && transfer.index == index) return transfer;
        }
        TESSERA_FAIL("no remote transfer from core " << owner << " to core " << receiver);
    }

    // The transfers of every halo exchange that cross between this rank and another, in the order both
    // sides post them.
    void plan_remote_transfers() {
        remote.assign(core_graphs.halos.size(), {});
        if (single_rank()) return;
        const int me = transport->rank();
        for (std::size_t h = 0; h < core_graphs.halos.size(); ++h) {
            for (std::int64_t owner = 0; owner < total_cores; ++owner) {
                const std::int64_t replica = owner / per_replica;
                for (const auto& [receiver_index, t] : outgoing[h][static_cast<std::size_t>(owner % per_replica)]) {
                    const std::int64_t receiver = mesh_core(replica, receiver_index);
                    const int owner_rank = placement.owner(owner), receiver_rank = placement.owner(receiver);
                    if (owner_rank == receiver_rank || (owner_rank != me && receiver_rank != me)) continue;
                    remote[h].push_back({owner, receiver, t, owner_rank == me, {}});
                }
            }
        }
    }

    // The tile of a [N_total, …] tensor that core `c` of replica `r` holds: its batch rows and, for
    // spatial tensors, its box of the model input (labels have no channel axis).
    Tensor tile_of(const Tensor& whole, std::int64_t replica, std::int64_t index, bool has_channels) const {
        const std::int64_t batch = model.node(model.input_node()).output_shape[0];
        std::vector<std::int64_t> begin(whole.shape().size(), 0), extent(whole.shape().begin(), whole.shape().end());
        begin[0] = replica * batch;
        extent[0] = batch;
        const std::size_t first_spatial = has_channels ? 2 : 1;
        if (whole.shape().size() > first_spatial) {
            const auto& owned = plan.tile(model.input_node(), index).owned;
            for (std::size_t axis = 0; axis < owned.size(); ++axis) {
                begin[first_spatial + axis] = owned[axis].begin;
                extent[first_spatial + axis] = owned[axis].size();
            }
        }
        return whole.view_box(begin, extent).contiguous();
    }

    LossPartial loss_partial(const Tensor& logits, const Tensor& labels) const {
        LossPartial partial;
        if (config.loss != train::LossKind::SoftDice) {
            partial.cross_entropy = loss::softmax_cross_entropy_partial(logits, labels, config.cross_entropy);
        }
        if (config.loss != train::LossKind::SoftmaxCrossEntropy) partial.dice = loss::dice_loss_partial(logits, labels, dice_options());
        return partial;
    }

    loss::DiceLossOptions dice_options() const {
        loss::DiceLossOptions options;
        options.exclude_background = config.dice_excludes_background;
        options.ignore_label = config.cross_entropy.ignore_label;
        return options;
    }

    // The loss value and this tile's block of d loss / d logits, given the replica's summed partials.
    std::pair<double, Tensor> finish_loss(const LossPartial& total, const Tensor& logits, const Tensor& labels) const {
        double value = 0;
        Tensor gradient;
        if (config.loss != train::LossKind::SoftDice) {
            loss::CrossEntropyResult ce = loss::finish_softmax_cross_entropy(total.cross_entropy, logits, labels, config.cross_entropy);
            value += ce.value;
            gradient = std::move(ce.gradient);
        }
        if (config.loss != train::LossKind::SoftmaxCrossEntropy) {
            loss::DiceLossResult dice = loss::finish_dice_loss(total.dice, logits, labels, dice_options());
            value += dice.value;
            if (!gradient.is_defined()) {
                gradient = std::move(dice.gradient);
            } else {
                float* g = gradient.data<float>();
                const float* d = dice.gradient.data<float>();
                for (std::int64_t i = 0; i < gradient.num_elements(); ++i) g[i] += d[i];
            }
        }
        return {value, std::move(gradient)};
    }

    // The stages of one training step, in order (CoreMesh::train_step strings them together).

    // The whole batch the mesh takes: every replica's rows, [R·n, C, (D,) H, W].
    Shape batch_shape() const {
        Shape shape = model.node(model.input_node()).output_shape;
        shape[0] *= mesh.num_replicas;
        return shape;
    }

    // `action` says what the mesh does with them: "expects", "predicts on".
    void check_images(const Tensor& images, const char* action) const {
        const Shape expected = batch_shape();
        TESSERA_CHECK(images.shape() == expected && images.dtype() == DType::F32,
                      "the mesh of " << mesh.num_replicas << " replica(s) " << action << " f32 images " << shape_to_string(expected)
                                     << " (the model's batch of " << expected[0] / mesh.num_replicas << " per replica), got "
                                     << dtype_name(images.dtype()) << " " << shape_to_string(images.shape()));
    }

    void check_batch(const Tensor& images, const Tensor& labels) const {
        check_images(images, "expects");
        const std::int64_t rows = batch_shape()[0];
        TESSERA_CHECK(labels.dtype() == DType::I32 && labels.shape().size() >= 1 && labels.shape()[0] == rows,
                      "labels must be i32 with " << rows << " rows, got " << dtype_name(labels.dtype()) << " "
                                                 << shape_to_string(labels.shape()));
    }

    void check_ground_truth(std::span<const detection::PaddedGroundTruth> ground_truth) const {
        const std::int64_t images = batch_shape()[0];
        TESSERA_CHECK(static_cast<std::int64_t>(ground_truth.size()) == images,
                      "expected one ground truth per image (" << images << "), got " << ground_truth.size());
    }

    // An evaluation-mode forward pass: this rank's cores take their tiles (scatter) and run.
    template <class Scatter>
    void forward_for_evaluation(Scatter&& scatter) {
        step_start = Clock::now();
        for (Core& core : local_cores()) core.events.clear();
        scatter();
        forward(graph::Mode::Eval);
    }

    // The label tile core `index` of `replica` reads: its box of the labels, or its replica's labels
    // whole when the logits are replicated (after global pooling).
    Tensor label_tile(const Tensor& labels, std::int64_t replica, std::int64_t index) const {
        const std::int64_t batch = model.node(model.input_node()).output_shape[0];
        return output_replicated ? tile_of(labels, replica, 0, false).view_box({0}, {batch}).contiguous()
                                 : tile_of(labels, replica, index, false);
    }

    // Every core of this rank takes its tiles and starts its forward pass: tiles(core) gives its images
    // and its labels (undefined when none are needed).
    template <class Tiles>
    void scatter(graph::Mode mode, Tiles&& tiles) {
        each_core(StepPhase::Forward, -1, [&](Core& core) {
            std::pair<Tensor, Tensor> tile = tiles(core);
            core.images = std::move(tile.first);
            core.labels = std::move(tile.second);
            core.executor->begin_forward(core.images, mode);
        });
    }
    void scatter_batch(const Tensor& images, const Tensor* labels, graph::Mode mode) {
        scatter(mode, [&](const Core& core) {
            return std::pair{tile_of(images, core.replica, core.index, true), labels ? label_tile(*labels, core.replica, core.index) : Tensor()};
        });
    }
    void scatter_received(const RankTiles& own, graph::Mode mode) {
        scatter(mode, [&](const Core& core) {
            const auto i = static_cast<std::size_t>(mesh_core(core.replica, core.index) - first_local);
            return std::pair{own.images[i], own.labels.empty() ? Tensor() : own.labels[i]};
        });
    }

    // The shape of core `index`'s tile of one replica's images: the per-replica batch, every channel, its
    // box of the input.
    Shape image_tile_shape(std::int64_t index) const {
        Shape shape = model.node(model.input_node()).output_shape;
        const auto& owned = plan.tile(model.input_node(), index).owned;
        for (std::size_t axis = 0; axis < owned.size(); ++axis) shape[2 + axis] = owned[axis].size();
        return shape;
    }

    // Tiles received from rank 0 are this rank's, in its cores' order and shapes.
    void check_received(const RankTiles& own, bool with_labels) const {
        const auto count = static_cast<std::size_t>(end_local - first_local);
        TESSERA_CHECK(own.images.size() == count && own.labels.size() == (with_labels ? count : 0),
                      "MPI rank " << transport->rank() << " owns " << count << " cores and expected " << count << " image tiles"
                                  << (with_labels ? " and as many label tiles" : "") << ", received " << own.images.size()
                                  << " and " << own.labels.size());
        for (std::size_t i = 0; i < count; ++i) {
            const std::int64_t index = (first_local + static_cast<std::int64_t>(i)) % per_replica;
            TESSERA_CHECK(own.images[i].shape() == image_tile_shape(index) && own.images[i].dtype() == DType::F32,
                          "core " << first_local + static_cast<std::int64_t>(i) << " expects an f32 image tile "
                                  << shape_to_string(image_tile_shape(index)) << ", received " << dtype_name(own.images[i].dtype()) << " "
                                  << shape_to_string(own.images[i].shape()));
            if (with_labels) {
                TESSERA_CHECK(own.labels[i].dtype() == DType::I32, "core " << first_local + static_cast<std::int64_t>(i)
                                                                           << " expects i32 labels, received " << dtype_name(own.labels[i].dtype()));
            }
        }
    }

    // A segmentation or classification step's loss stage: the loss, and d loss / d logits per core.
    double segmentation_loss_stage(std::vector<std::vector<Tensor>>& output_gradients) {
        std::vector<Tensor> logit_gradients;
        const double loss = loss_and_gradients(logit_gradients);
        output_gradients.clear();
        for (Tensor& gradient : logit_gradients) output_gradients.push_back({std::move(gradient)});
        return loss;
    }

    // The loss, averaged over replicas, and each core's tile of d loss / d logits (indexed by mesh core).
    // Partial sums per tile are reduced over the replica in core order, so every core finishes the same
    // loss; replicated logits (after global pooling) let every core compute its replica's whole loss.
    double loss_and_gradients(std::vector<Tensor>& gradients) {
        std::vector<Tensor> logits(cores.size());
        std::vector<LossPartial> partials(cores.size());
        each_core(StepPhase::Forward, -1, [&](Core& core) {
            const std::size_t c = static_cast<std::size_t>(mesh_core(core.replica, core.index));
            const double start = now();
            logits[c] = core.executor->output();
            partials[c] = loss_partial(logits[c], core.labels);
            core.events.push_back({static_cast<std::int64_t>(c), -1, EventKind::Compute, StepPhase::Forward, start, now(), 0, 0, -1});
        });
        std::vector<LossPartial> totals(static_cast<std::size_t>(mesh.num_replicas));
        if (!output_replicated) {
            share_replica_values([&](std::int64_t c, ByteWriter& out) { write_partial(partials[static_cast<std::size_t>(c)], out); },
                                 [&](std::int64_t c, ByteReader& in) { partials[static_cast<std::size_t>(c)] = read_partial(in); });
            for (std::int64_t r = 0; r < mesh.num_replicas; ++r) {
                if (!holds_replica(r)) continue;
                LossPartial total = partials[static_cast<std::size_t>(mesh_core(r, 0))];
                for (std::int64_t i = 1; i < per_replica; ++i) total += partials[static_cast<std::size_t>(mesh_core(r, i))];
                totals[static_cast<std::size_t>(r)] = std::move(total);
            }
        }
        std::vector<double> replica_loss(static_cast<std::size_t>(mesh.num_replicas), 0.0);
        gradients.assign(cores.size(), Tensor());
        each_core(StepPhase::Forward, -1, [&](Core& core) {
            const std::size_t c = static_cast<std::size_t>(mesh_core(core.replica, core.index));
            const LossPartial& total = output_replicated ? partials[c] : totals[static_cast<std::size_t>(core.replica)];
            auto [value, gradient] = finish_loss(total, logits[c], core.labels);
            if (core.index == 0) replica_loss[static_cast<std::size_t>(core.replica)] = value;
            gradients[c] = std::move(gradient);
        });
        // Each replica's loss from whichever rank holds its first core.
        share_core_values(
            [&](std::int64_t c, ByteWriter& out) {
                if (c % per_replica == 0) out.put(replica_loss[static_cast<std::size_t>(c / per_replica)]);
            },
            [&](std::int64_t c, ByteReader& in) {
                if (c % per_replica == 0) replica_loss[static_cast<std::size_t>(c / per_replica)] = in.get<double>();
            });
        double loss_sum = 0;
        for (double value : replica_loss) loss_sum += value;
        return loss_sum / static_cast<double>(mesh.num_replicas);
    }

    static void write_partial(const LossPartial& partial, ByteWriter& out) {
        const loss::CrossEntropyPartial& ce = partial.cross_entropy;
        out.put(ce.weighted_nll_sum);
        out.put(ce.weight_sum);
        out.put(ce.num_counted);
        out.put(ce.num_ignored);
        const loss::DicePartial& dice = partial.dice;
        out.put_span(std::span<const double>(dice.intersection));
        out.put_span(std::span<const double>(dice.probability_sum));
        out.put_span(std::span<const std::int64_t>(dice.label_count));
        out.put(dice.num_counted);
        out.put(dice.num_ignored);
    }

    static LossPartial read_partial(ByteReader& in) {
        LossPartial partial;
        loss::CrossEntropyPartial& ce = partial.cross_entropy;
        ce.weighted_nll_sum = in.get<double>();
        ce.weight_sum = in.get<double>();
        ce.num_counted = in.get<std::int64_t>();
        ce.num_ignored = in.get<std::int64_t>();
        loss::DicePartial& dice = partial.dice;
        dice.intersection = in.get_vector<double>();
        dice.probability_sum = in.get_vector<double>();
        dice.label_count = in.get_vector<std::int64_t>();
        dice.num_counted = in.get<std::int64_t>();
        dice.num_ignored = in.get<std::int64_t>();
        return partial;
    }

    void check_detection_batch(const Tensor& images, std::span<const detection::PaddedGroundTruth> ground_truth) const {
        TESSERA_CHECK(detector, "this mesh was not configured for detection (TrainerConfig::detection); step it on labels");
        check_images(images, "expects");
        check_ground_truth(ground_truth);
    }

    // Each core's replica's padded ground truth.
    void take_ground_truth(std::span<const detection::PaddedGroundTruth> ground_truth) {
        const std::int64_t batch = model.node(model.input_node()).output_shape[0];
        for (Core& core : local_cores()) {
            const auto first = ground_truth.begin() + core.replica * batch;
            core.ground_truth.assign(first, first + batch);
        }
    }

    // The detection loss, averaged over replicas, and each core's gradients of its head-output tiles
    // (class levels, then box levels). Three reductions over the replica, in core order: every box's best
    // anchor (for force-matching), the count of positive anchors (the losses' normalizer), then the loss
    // sums. Between them a core keeps only its matches (an int per anchor): its targets are built after
    // the count is known and dropped with the loss, so at most one core per host thread holds targets
    // (at 2560² with 90 classes a core's are 60 MB, and 8 cores' would sit beside their loss gradients).
    double detection_loss_and_gradients(std::vector<std::vector<Tensor>>& gradients) {
        const detection::DetectorConfig& settings = detector->config();
        const std::size_t levels = detector->num_levels();
        const std::int64_t batch = model.node(model.input_node()).output_shape[0];
        std::vector<std::vector<detection::RowBestPartial>> best(cores.size());
        each_core(StepPhase::Forward, -1, [&](Core& core) {
            const std::size_t c = static_cast<std::size_t>(mesh_core(core.replica, core.index));
            const DetectionTile& tile = detection_tiles[static_cast<std::size_t>(core.index)];
            const double start = now();
            // The IoU is computed in blocks twice (here and when matching) rather than kept between the
            // reductions: every core's [G, M_tile] matrices would be 1.4 GB at 2560² on 8 cores.
            for (const detection::PaddedGroundTruth& image : core.ground_truth) {
                best[c].push_back(detection::row_best_partial(detection::ground_truth_boxes(image), image.num_valid,
                                                              tile.anchor_boxes, tile.anchor_indices));
            }
            core.events.push_back({static_cast<std::int64_t>(c), -1, EventKind::Compute, StepPhase::Forward, start, now(), 0, 0, -1});
        });
        share_replica_values(
            [&](std::int64_t c, ByteWriter& out) {
                for (const detection::RowBestPartial& image : best[static_cast<std::size_t>(c)]) {
                    out.put_span(std::span<const float>(image.best_iou));
                    out.put_span(std::span<const std::int64_t>(image.best_anchor));
                }
            },
            [&](std::int64_t c, ByteReader& in) {
                best[static_cast<std::size_t>(c)].resize(static_cast<std::size_t>(batch));
                for (detection::RowBestPartial& image : best[static_cast<std::size_t>(c)]) {
                    image.best_iou = in.get_vector<float>();
                    image.best_anchor = in.get_vector<std::int64_t>();
                }
            });
        std::vector<std::vector<detection::RowBestPartial>> replica_best(static_cast<std::size_t>(mesh.num_replicas));
        for (std::int64_t r = 0; r < mesh.num_replicas; ++r) {
            if (!holds_replica(r)) continue;
            for (std::int64_t n = 0; n < batch; ++n) {
                detection::RowBestPartial combined = best[static_cast<std::size_t>(mesh_core(r, 0))][static_cast<std::size_t>(n)];
                for (std::int64_t i = 1; i < per_replica; ++i) {
                    combined = detection::combine(combined, best[static_cast<std::size_t>(mesh_core(r, i))][static_cast<std::size_t>(n)]);
                }
                replica_best[static_cast<std::size_t>(r)].push_back(std::move(combined));
            }
        }
        std::vector<std::vector<std::vector<std::int32_t>>> matches(cores.size());  // per core, per image: [M_tile]
        std::vector<std::int64_t> positives(cores.size(), 0);
        each_core(StepPhase::Forward, -1, [&](Core& core) {
            const std::size_t c = static_cast<std::size_t>(mesh_core(core.replica, core.index));
            const DetectionTile& tile = detection_tiles[static_cast<std::size_t>(core.index)];
            const double start = now();
            for (std::size_t n = 0; n < core.ground_truth.size(); ++n) {
                const detection::PaddedGroundTruth& image = core.ground_truth[n];
                matches[c].push_back(detection::match_anchor_subset(
                    detection::ground_truth_boxes(image), image.num_valid, tile.anchor_boxes, tile.anchor_indices,
                    replica_best[static_cast<std::size_t>(core.replica)][n], settings.labeler.matcher));
                positives[c] += std::count_if(matches[c].back().begin(), matches[c].back().end(),
                                              [](std::int32_t match) { return match >= 0; });
            }
            core.events.push_back({static_cast<std::int64_t>(c), -1, EventKind::Compute, StepPhase::Forward, start, now(), 0, 0, -1});
        });
        share_replica_values([&](std::int64_t c, ByteWriter& out) { out.put(positives[static_cast<std::size_t>(c)]); },
                             [&](std::int64_t c, ByteReader& in) { positives[static_cast<std::size_t>(c)] = in.get<std::int64_t>(); });
        std::vector<std::int64_t> replica_positives(static_cast<std::size_t>(mesh.num_replicas), 0);
        for (std::int64_t r = 0; r < mesh.num_replicas; ++r) {
            for (std::int64_t i = 0; i < per_replica; ++i) replica_positives[static_cast<std::size_t>(r)] += positives[static_cast<std::size_t>(mesh_core(r, i))];
        }
        std::vector<detection::DetectionLossPartial> partials(cores.size());
        gradients.assign(cores.size(), {});
        each_core(StepPhase::Forward, -1, [&](Core& core) {
            const std::size_t c = static_cast<std::size_t>(mesh_core(core.replica, core.index));
            const DetectionTile& tile = detection_tiles[static_cast<std::size_t>(core.index)];
            const double start = now();
            std::vector<detection::AnchorTargets> images;
            for (std::size_t n = 0; n < core.ground_truth.size(); ++n) {
                images.push_back(detection::targets_from_matches(std::move(matches[c][n]), core.ground_truth[n],
                                                                 tile.anchor_boxes, settings.labeler));
            }
            const detection::HeadTargets targets = detection::to_head_layout(images, detector->anchors(), tile.cells);
            images.clear();
            const std::vector<Tensor> outputs = core.executor->outputs();
            const std::span<const Tensor> all(outputs);
            detection::DetectionTileLoss tile_loss =
                detection::detection_loss_on_tile(all.subspan(0, levels), all.subspan(levels, levels), targets,
                                                  replica_positives[static_cast<std::size_t>(core.replica)], settings.loss);
            partials[c] = tile_loss.partial;
            gradients[c] = std::move(tile_loss.class_gradients);
            for (Tensor& gradient : tile_loss.box_gradients) gradients[c].push_back(std::move(gradient));
            core.events.push_back({static_cast<std::int64_t>(c), -1, EventKind::Compute, StepPhase::Forward, start, now(), 0, 0, -1});
        });
        share_core_values(
            [&](std::int64_t c, ByteWriter& out) {
                const detection::DetectionLossPartial& partial = partials[static_cast<std::size_t>(c)];
                out.put(partial.classification_sum);
                out.put(partial.box_sum);
                out.put(partial.num_positive);
            },
            [&](std::int64_t c, ByteReader& in) {
                detection::DetectionLossPartial& partial = partials[static_cast<std::size_t>(c)];
                partial.classification_sum = in.get<double>();
                partial.box_sum = in.get<double>();
                partial.num_positive = in.get<std::int64_t>();
            });
        double loss_sum = 0;
        for (std::int64_t r = 0; r < mesh.num_replicas; ++r) {
            detection::DetectionLossPartial total;
            for (std::int64_t i = 0; i < per_replica; ++i) total += partials[static_cast<std::size_t>(mesh_core(r, i))];
            loss_sum += detection::detection_loss_value(total, settings.loss).value;
        }
        return loss_sum / static_cast<double>(mesh.num_replicas);
    }

    // Bytes of a core's graph outputs in f32: the loss gradients it hands to backward (begin_backward
    // copies them into its own buffers, which its ledger counts).
    std::int64_t output_bytes(std::int64_t index) const {
        const graph::Graph& g = core_graphs.graphs[static_cast<std::size_t>(index)];
        std::int64_t bytes = 0;
        for (int output : g.output_nodes()) bytes += num_elements_of(g.node(output).output_shape) * 4;
        return bytes;
    }

    // What one core's detection loss holds while it runs (detection_loss_and_gradients): its anchors'
    // targets flat ([M, K + 4] and two weights) and in the heads' layout, and a plain copy of its outputs.
    std::int64_t largest_target_bytes() const {
        if (!detector) return 0;
        std::size_t largest_tile = 0;
        for (const DetectionTile& tile : detection_tiles) largest_tile = std::max(largest_tile, tile.anchor_indices.size());
        const std::int64_t batch = model.node(model.input_node()).output_shape[0];
        const std::int64_t classes = detector->config().labeler.num_classes;
        return batch * static_cast<std::int64_t>(largest_tile) * 4 * (2 * (classes + 6) + (classes + 4));
    }

    // The cells of every level each core holds: its tiles of the class outputs (the box outputs' are the same).
    void plan_detection_tiles() {
        const std::size_t levels = detector->num_levels();
        const std::vector<int>& output_nodes = model.output_nodes();
        std::vector<Tensor> outputs;
        for (int output : output_nodes) outputs.push_back(Tensor::zeros(model.node(output).output_shape, DType::F32));
        detector->check_outputs(outputs, model.node(model.input_node()).output_shape[0]);
        detection_tiles.resize(static_cast<std::size_t>(per_replica));
        for (std::int64_t index = 0; index < per_replica; ++index) {
            DetectionTile& tile = detection_tiles[static_cast<std::size_t>(index)];
            for (std::size_t l = 0; l < levels; ++l) {
                const auto& owned = plan.tile(output_nodes[l], index).owned;
                TESSERA_ASSERT(owned.size() == 2 && plan.tile(output_nodes[levels + l], index).owned == owned,
                               "a core's tiles of a level's class and box outputs must be the same cells");
                tile.cells.push_back({owned[0].begin, owned[0].end, owned[1].begin, owned[1].end});
            }
            tile.anchor_indices = detection::anchor_indices_of_cells(detector->anchors(), tile.cells);
            for (std::int64_t anchor : tile.anchor_indices) {
                tile.anchor_boxes.push_back(detector->anchors().boxes[static_cast<std::size_t>(anchor)]);
            }
        }
    }

    // One training step around a loss stage: scatter (the batch's tiles), forward, loss(gradients per
    // core, one per graph output), backward on scale × d loss, all-reduce and update.
    template <class Scatter, class Loss>
    train::StepResult run_step(Scatter&& scatter, Loss&& loss_stage) {
        train::StepResult result;
        result.step = step;
        result.learning_rate = schedule->value(step);
        result.loss_scale = loss_scaler->scale();
        step_start = Clock::now();
        for (Core& core : local_cores()) core.events.clear();
        step_halo_wait = step_gradient_reduce = 0;
        step_phase_seconds = step_idle_thread_seconds = 0;

        pool->wake_up();  // to poll while the batch is scattered, not sleep through the first phase
        scatter();
        forward(graph::Mode::Train);
        std::vector<std::vector<Tensor>> output_gradients;  // per mesh core: d loss / d (its tiles of the outputs)
        result.loss = loss_stage(output_gradients);
        result.forward_seconds = now();
        TESSERA_CHECK(std::isfinite(result.loss), "step " << step + 1 << ": the loss is " << result.loss << ": "
                                                          << locate_non_finite_forward() << ". Nothing of this step was saved.");
        // Backward, on scale × d loss (loss scaling); unscaled before the update.
        each_core(StepPhase::Backward, -1, [&](Core& core) {
            std::vector<Tensor>& gradients = output_gradients[static_cast<std::size_t>(mesh_core(core.replica, core.index))];
            for (Tensor& gradient : gradients) train::scale_loss_gradient(gradient, result.loss_scale);
            core.executor->begin_backward(gradients);
            gradients = {};  // the executor holds its copy (in its layout)
        });
        backward();
        const double backward_end = now();
        result.backward_seconds = backward_end - result.forward_seconds;

        const std::vector<std::int64_t> non_finite_core = all_reduce_weight_gradients();
        result.applied = update(result, non_finite_core);
        result.update_seconds = now() - backward_end;
        ++step;
        summarize_step();
        return result;
    }

    // Weight gradients: summed over each replica's cores in core order (core 0's alone for replicated
    // layers), then averaged over replicas; every core receives the result. Returns, per parameter, the
    // first core whose own gradient is not finite (-1 when all are).
    std::vector<std::int64_t> all_reduce_weight_gradients() {
        const std::size_t num_parameters = model.parameters().size();
        const double reduce_start = now();
        std::vector<std::int64_t> non_finite_core(num_parameters, -1);
        std::vector<std::int64_t> first_bad(num_parameters, std::numeric_limits<std::int64_t>::max());
        std::vector<char> total_is_bad(num_parameters, 0);
        if (single_rank()) {
            reduce_in_place(first_bad, total_is_bad);
        } else {
            distribute_totals(mesh.reduction == ReductionOrder::Fast ? fast_gradient_sums() : segmented_gradient_sums(), first_bad,
                              total_is_bad);
        }
        // The same on every rank (every rank holds the same totals), so all of them join the reduction.
        if (std::find(total_is_bad.begin(), total_is_bad.end(), 1) != total_is_bad.end()) {
            transport->all_reduce_min(first_bad);
            for (std::size_t p = 0; p < num_parameters; ++p) {
                if (first_bad[p] != std::numeric_limits<std::int64_t>::max()) non_finite_core[p] = first_bad[p];
            }
        }
        const double reduce_end = now();
        step_gradient_reduce = reduce_end - reduce_start;
        for (std::int64_t c = first_local; c < end_local; ++c) {
            cores[static_cast<std::size_t>(c)].events.push_back({c, -1, EventKind::AllReduce, StepPhase::Update, reduce_start,
                                                                reduce_end, 0, ring_bytes(parameter_bytes, total_cores), -1});
        }
        return non_finite_core;
    }

    // One process (every core here): the parameters in parallel (no flat buffer: for ResNet-34's 22 M
    // parameters clearing and copying one out on one thread cost more than the sum), each a chunk at a
    // time while the chunk is in cache: the sum in core order (add_in_core_order over the chunk: the bits
    // of summing whole tensors), its finiteness, the copy into every core. Each core's gradient is read
    // and written once, where summing whole tensors, checking the totals and copying them out took five
    // more passes over memory. A non-finite total is traced to the first core whose own values in that
    // chunk are not finite (a non-finite value makes its element's total non-finite).
    void reduce_in_place(std::vector<std::int64_t>& first_bad, std::vector<char>& total_is_bad) {
        constexpr std::int64_t k_chunk = 4096;  // floats: each core's 16 KB stay in L1 or L2 between the passes
        const auto& specs = model.parameters();
        pool->run(static_cast<std::int64_t>(specs.size()), [&](std::int64_t parameter) {
            const auto p = static_cast<std::size_t>(parameter);
            const std::int64_t count = num_elements_of(specs[p].shape);
            std::vector<float> sum(static_cast<std::size_t>(std::min(count, k_chunk)));
            std::vector<float> replica_sum(mesh.num_replicas > 1 ? sum.size() : 0);
            for (std::int64_t first = 0; first < count; first += k_chunk) {
                const std::int64_t length = std::min(k_chunk, count - first);
                add_in_core_order(
                    p, first, length, [&](std::int64_t c, std::size_t q, std::int64_t at, std::int64_t) { return local_gradient(c, q, at); },
                    replica_sum.data(), sum.data());
                if (!train::all_finite(sum.data(), length)) {
                    total_is_bad[p] = 1;
                    for (const Core& core : local_cores()) {
                        if (!train::all_finite(core.executor->parameters()[p].gradient.data<float>() + first, length)) {
                            first_bad[p] = std::min(first_bad[p], mesh_core(core.replica, core.index));
                            break;
                        }
                    }
                }
                for (Core& core : local_cores()) std::copy_n(sum.data(), length, core.executor->parameters()[p].gradient.data<float>() + first);
            }
        });
    }

    // Several ranks: a non-finite total is traced to the first local core whose own gradient is not finite
    // (before the total overwrites it), then the total goes to every local core.
    void distribute_totals(const std::vector<Tensor>& totals, std::vector<std::int64_t>& first_bad, std::vector<char>& total_is_bad) {
        const std::size_t num_parameters = model.parameters().size();
        pool->run(static_cast<std::int64_t>(num_parameters), [&](std::int64_t parameter) {
            const auto p = static_cast<std::size_t>(parameter);
            if (!train::tensor_is_finite(totals[p])) {
                total_is_bad[p] = 1;
                for (const Core& core : local_cores()) {
                    if (!train::tensor_is_finite(core.executor->parameters()[p].gradient)) {
                        first_bad[p] = mesh_core(core.replica, core.index);
                        break;
                    }
                }
            }
            for (Core& core : local_cores()) core.executor->parameters()[p].gradient.copy_from(totals[p]);
        });
    }

    // The sum in core order, every replica's cores summed in order and the replicas' sums added in order,
    // then scaled by 1/R (a replicated parameter — one every core of a replica computes whole — taken from
    // the replica's first core). `value(c, p, first, count)` gives core c's gradient values [first, first +
    // count) of parameter p. Element by element the same arithmetic wherever it runs: one process over
    // all its cores, or a rank over its segment (segmented_gradient_sums). The first replica sums straight
    // into `sum`, each later one in `replica_sum` (count values; unused with one replica) and is then
    // added, the last one together with the scaling: per element the same roundings as a copy, an add
    // and a scaling pass, with passes over the values growing by one per core and one per replica (the
    // cost calibration measures, cost/step_simulation.cpp).
    template <class Value>
    void add_in_core_order(std::size_t p, std::int64_t first, std::int64_t count, Value&& value, float* replica_sum, float* sum) const {
        const auto inverse = 1.0f / static_cast<float>(mesh.num_replicas);
        for (std::int64_t c = 0; c < total_cores; ++c) {
            const std::int64_t replica = c / per_replica, index = c % per_replica;
            float* target = replica == 0 ? sum : replica_sum;
            const float* g = value(c, p, first, count);
            if (index == 0) {
                std::copy(g, g + count, target);
            } else if (!replicated_parameter[p]) {
                for (std::int64_t e = 0; e < count; ++e) target[e] += g[e];
            }
            if (index + 1 < per_replica || replica == 0) continue;
            if (replica + 1 < mesh.num_replicas) {
                for (std::int64_t e = 0; e < count; ++e) sum[e] += replica_sum[e];
            } else {
                for (std::int64_t e = 0; e < count; ++e) sum[e] = (sum[e] + replica_sum[e]) * inverse;
            }
        }
    }

    const float* local_gradient(std::int64_t core, std::size_t p, std::int64_t first) const {
        return cores[static_cast<std::size_t>(core)].executor->parameters()[p].gradient.data<float>() + first;
    }

    // Reproducible across ranks: the in-process sum, element for element, with no rank waiting on another's
    // sum. All parameters' gradients are one flat buffer cut into one segment per rank; every rank sends each
    // segment's owner its own cores' values of that segment (point-to-point, all at once), each owner adds
    // every core's values in core order (add_in_core_order: the bits of one process), and every rank gathers
    // the summed segments. Two rounds of messages however many ranks, each rank sending its cores' share
    // of the buffer and receiving the buffer once — where a chain through the ranks in core order would
    // pass the whole buffer one hop per rank.
    std::vector<Tensor> segmented_gradient_sums() {
        const int rank = transport->rank(), ranks = transport->num_ranks();
        const std::vector<std::int64_t> offset = parameter_offsets();
        const std::int64_t size = offset.back();
        const auto segment_begin = [&](int s) { return size * s / ranks; };
        // Calls fn(p, first, count, at) for each parameter's part of the flat range [begin, end): its values
        // [first, first + count) lie at `at` from `begin`.
        const auto for_parameters_in = [&](std::int64_t begin, std::int64_t end, auto&& fn) {
            for (std::size_t p = 0; p + 1 < offset.size(); ++p) {
                const std::int64_t from = std::max(begin, offset[p]), to = std::min(end, offset[p + 1]);
                if (from < to) fn(p, from - offset[p], to - from, from - begin);
            }
        };
        const std::int64_t my_begin = segment_begin(rank), my_size = segment_begin(rank + 1) - my_begin;
        std::vector<std::vector<float>> to_send(static_cast<std::size_t>(ranks)), incoming(static_cast<std::size_t>(ranks));
        for (int other = 0; other < ranks; ++other) {
            if (other == rank) continue;
            const std::int64_t begin = segment_begin(other), length = segment_begin(other + 1) - begin;
            std::vector<float>& out = to_send[static_cast<std::size_t>(other)];
            out.resize(static_cast<std::size_t>((end_local - first_local) * length));
            for (std::int64_t c = first_local; c < end_local; ++c) {
                float* row = out.data() + (c - first_local) * length;
                for_parameters_in(begin, begin + length, [&](std::size_t p, std::int64_t first, std::int64_t count, std::int64_t at) {
                    std::copy_n(local_gradient(c, p, first), count, row + at);
                });
            }
            incoming[static_cast<std::size_t>(other)].resize(static_cast<std::size_t>((placement.end_core(other) - placement.first_core(other)) * my_size));
        }
        for (int other = 0; other < ranks; ++other) {
            if (other != rank) transport->post_receive(other, MessageTag::GradientSegments, std::as_writable_bytes(std::span(incoming[static_cast<std::size_t>(other)])));
        }
        for (int other = 0; other < ranks; ++other) {
            if (other != rank) transport->post_send(other, MessageTag::GradientSegments, std::as_bytes(std::span(to_send[static_cast<std::size_t>(other)])));
        }
        transport->wait_all();
        to_send.clear();
        std::vector<float> segment(static_cast<std::size_t>(my_size)), replica_sum(mesh.num_replicas > 1 ? segment.size() : 0);
        for_parameters_in(my_begin, my_begin + my_size, [&](std::size_t p, std::int64_t first, std::int64_t count, std::int64_t at) {
            const auto value = [&](std::int64_t c, std::size_t q, std::int64_t from, std::int64_t) -> const float* {
                if (is_local(c)) return local_gradient(c, q, from);
                const int owner = placement.owner(c);
                return incoming[static_cast<std::size_t>(owner)].data() + (c - placement.first_core(owner)) * my_size + at;
            };
            add_in_core_order(p, first, count, value, replica_sum.data(), segment.data() + at);
        });
        incoming.clear();
        std::vector<float> total(static_cast<std::size_t>(size));
        const std::vector<std::vector<std::byte>> gathered = transport->all_gather(std::as_bytes(std::span(segment)));
        for (int other = 0; other < ranks; ++other) {
            const std::vector<std::byte>& bytes = gathered[static_cast<std::size_t>(other)];
            TESSERA_ASSERT(static_cast<std::int64_t>(bytes.size()) == (segment_begin(other + 1) - segment_begin(other)) * 4,
                           "rank " << other << " sent a segment of " << bytes.size() << " bytes");
            if (!bytes.empty()) std::memcpy(total.data() + segment_begin(other), bytes.data(), bytes.size());
        }
        return per_parameter(total, offset);
    }

    // Each rank sums its own cores in order, then the library's all-reduce adds the ranks' sums (one
    // flat buffer).
    std::vector<Tensor> fast_gradient_sums() {
        const std::size_t num_parameters = model.parameters().size();
        const std::vector<std::int64_t> offset = parameter_offsets();
        std::vector<float> total(static_cast<std::size_t>(offset.back()), 0.0f);
        pool->run(static_cast<std::int64_t>(num_parameters), [&](std::int64_t parameter) {
            const auto p = static_cast<std::size_t>(parameter);
            float* sum = total.data() + offset[p];
            const std::int64_t count = offset[p + 1] - offset[p];
            for (std::int64_t c = first_local; c < end_local; ++c) {
                if (replicated_parameter[p] && c % per_replica != 0) continue;
                const float* g = cores[static_cast<std::size_t>(c)].executor->parameters()[p].gradient.data<float>();
                for (std::int64_t e = 0; e < count; ++e) sum[e] += g[e];
            }
        });
        transport->all_reduce_sum(total);
        if (mesh.num_replicas > 1) {
            const auto inverse = 1.0f / static_cast<float>(mesh.num_replicas);
            for (float& value : total) value *= inverse;
        }
        return per_parameter(total, offset);
    }

    // Where each parameter's gradient starts in one flat f32 buffer of all of them ([P + 1], the last its size).
    std::vector<std::int64_t> parameter_offsets() const {
        const auto& specs = model.parameters();
        std::vector<std::int64_t> offset(specs.size() + 1, 0);
        for (std::size_t p = 0; p < specs.size(); ++p) offset[p + 1] = offset[p] + num_elements_of(specs[p].shape);
        return offset;
    }

    // The flat buffer back as one tensor per parameter.
    std::vector<Tensor> per_parameter(const std::vector<float>& flat, const std::vector<std::int64_t>& offset) const {
        const auto& specs = model.parameters();
        std::vector<Tensor> tensors(specs.size());
        for (std::size_t p = 0; p < specs.size(); ++p) {
            tensors[p] = Tensor::empty(specs[p].shape, DType::F32);
            std::copy(flat.begin() + offset[p], flat.begin() + offset[p + 1], tensors[p].data<float>());
        }
        return tensors;
    }

    static std::span<std::byte> as_bytes(const Tensor& tensor) {
        auto* data = const_cast<std::byte*>(reinterpret_cast<const std::byte*>(tensor.raw_data()));
        return {data, static_cast<std::size_t>(tensor.num_elements()) * static_cast<std::size_t>(dtype_size(tensor.dtype()))};
    }

    // Update: every core the same (its own optimizer state, the same gradients), as a single core's
    // trainer does it (train/step_end.hpp). Returns whether the update was applied (loss scaling may
    // skip it); then checks every core's batch-norm statistics, which may differ by replica.
    bool update(const train::StepResult& result, const std::vector<std::int64_t>& non_finite_core) {
        train::StepContext context;
        context.step = step;
        context.loss = result.loss;
        context.locate = [&](std::size_t index) {
            return non_finite_core[index] >= 0 ? " on core " + std::to_string(non_finite_core[index]) : std::string();
        };
        context.aftermath = " Nothing of this step was saved.";
        std::vector<std::span<Parameter>> copies;
        for (Core& core : local_cores()) copies.push_back(core.executor->parameters());
        // Per-parameter work (checks, unscaling, the update) spread over the host threads.
        const train::ParallelFor on_pool = [&](std::int64_t count, const std::function<void(std::int64_t)>& body) { pool->run(count, body); };
        const bool applied = train::finish_update(
            *loss_scaler, result.loss_scale, copies,
            [&] {
                // Every core would compute the same bits from the same all-reduced gradients, and on the
                // host a rank's cores share its first core's weights: that core computes the update, once
                // (its parameters spread over the threads), so the host keeps one set of optimizer slots
                // per rank instead of one per core (a core's ledger still counts its own: a device core
                // holds them).
                Core& core = first_local_core();
                const double start = now();
                core.optimizer->step(core.executor->parameters(), result.learning_rate, on_pool);
                core.events.push_back({first_local, -1, EventKind::Compute, StepPhase::Update, start, now(), 0, 0, -1});
            },
            context, on_pool);
        std::exception_ptr failure;
        try {
            for (const Core& core : local_cores()) {
                train::check_statistics(core.executor->buffers(), core.executor->graph(), context,
                                        " on core " + std::to_string(mesh_core(core.replica, core.index)));
            }
        } catch (...) {
            failure = std::current_exception();
        }
        agree_on_failure(failure);  // BN statistics differ by replica, so by rank
        return applied;
    }

    // The step's events by start time, and its summary: time per kind, bytes per link, and the plan's
    // halo volume to compare them with.
    void summarize_step() {
        events.clear();
        for (Core& core : local_cores()) events.insert(events.end(), core.events.begin(), core.events.end());
        if (!single_rank()) {
            static_assert(std::is_trivially_copyable_v<CoreEvent>);
            ByteWriter writer;
            writer.put_span(std::span<const CoreEvent>(events));
            events.clear();
            for (const std::vector<std::byte>& bytes : transport->all_gather(writer.bytes())) {
                ByteReader reader(bytes);
                const std::vector<CoreEvent> rank_events = reader.get_vector<CoreEvent>();
                events.insert(events.end(), rank_events.begin(), rank_events.end());
            }
        }
        std::stable_sort(events.begin(), events.end(),
                         [](const CoreEvent& a, const CoreEvent& b) { return a.start_seconds < b.start_seconds; });
        StepSummary result;
        std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> links;
        for (const CoreEvent& event : events) {
            const double seconds = event.end_seconds - event.start_seconds;
            switch (event.kind) {
                case EventKind::Compute: result.compute_seconds += seconds; break;
                case EventKind::Halo: {
                    result.halo_seconds += seconds;
                    result.halo_bytes += event.bytes;
                    // Forward: peer → core; backward: core's gradient came from peer, so the rows travel peer → core too.
                    links[{event.peer, event.core}] += event.bytes;
                    break;
                }
                case EventKind::AllReduce:
                    result.all_reduce_seconds += seconds;
                    result.all_reduce_bytes += event.bytes;
                    break;
                case EventKind::Wait: break;
            }
        }
        for (const auto& [link, bytes] : links) result.links.push_back({link.first, link.second, bytes});
        std::sort(result.links.begin(), result.links.end(), [](const LinkTraffic& a, const LinkTraffic& b) { return a.bytes > b.bytes; });
        // Forward and (unless the halo holds input data) backward, per replica.
        for (const partition::HaloExchange& halo : core_graphs.halos) {
            const std::int64_t layer_elements = plan.halo_elements(halo.layer);
            result.analytic_halo_bytes += layer_elements * (halo.carries_gradient ? 2 : 1) * mesh.num_replicas *
                                          first_local_core().executor->value_buffer(halo.halo_node).element_size();
        }
        result.halo_fraction_of_compute = result.compute_seconds > 0 ? result.halo_seconds / result.compute_seconds : 0;
        result.rank_phase_seconds = step_phase_seconds;
        result.rank_idle_thread_seconds = step_idle_thread_seconds;
        if (!single_rank()) {
            result.rank_halo_wait_seconds = step_halo_wait;
            result.rank_gradient_reduce_seconds = step_gradient_reduce;
        }
        summary = std::move(result);
    }
};

CoreMesh::CoreMesh(graph::Graph model, MeshConfig mesh, train::TrainerConfig config, std::shared_ptr<Transport> transport)
    : m_impl(std::make_unique<Impl>(std::move(model), std::move(mesh), std::move(config))) {
    Impl& impl = *m_impl;
    impl.transport = transport ? std::move(transport) : std::make_shared<SingleProcess>();
    TESSERA_CHECK(impl.mesh.num_replicas >= 1, "a mesh needs at least one replica, got " << impl.mesh.num_replicas);
    TESSERA_CHECK(impl.mesh.core_memory_bytes > 0, "a core's memory capacity must be positive, got " << impl.mesh.core_memory_bytes);
    train::validate(impl.config.optimizer);
    train::validate(impl.config.schedule);
    impl.per_replica = impl.plan.num_cores();
    impl.total_cores = impl.per_replica * impl.mesh.num_replicas;
    impl.placement = CorePlacement(impl.total_cores, impl.transport->num_ranks());
    impl.first_local = impl.placement.first_core(impl.transport->rank());
    impl.end_local = impl.placement.end_core(impl.transport->rank());
    const std::int64_t local_count = impl.end_local - impl.first_local;
    if (impl.transport->num_ranks() > 1) {  // halos over a Cartesian communicator where this rank's replica's ranks form a grid
        std::optional<RankGrid> grid;
        for (std::int64_t replica = 0; replica < impl.mesh.num_replicas && !grid; ++replica) {
            if (impl.holds_replica(replica)) grid = rank_grid(impl.placement, impl.plan.grid().pieces_per_axis(), replica);
        }
        impl.transport->use_grid(grid);
    }
    impl.pool = std::make_unique<ThreadPool>(std::max(1, impl.mesh.host_threads));
    impl.schedule = train::make_schedule(impl.config.schedule);
    impl.loss_scaler = train::make_loss_scaler(impl.config.loss_scale);
    impl.output_replicated = impl.plan.tile(impl.model.output_node(), 0).replicated;
    if (impl.config.detection) {
        const Shape& input = impl.model.node(impl.model.input_node()).output_shape;
        TESSERA_CHECK(input.size() == 4, "a detection mesh needs a 2D image input [N, C, H, W], got " << shape_to_string(input));
        impl.detector = std::make_unique<detection::Detector>(*impl.config.detection, input[2], input[3]);
        impl.plan_detection_tiles();
    }

    // Parameters of layers after global pooling see the same values on every core: summing them over
    // the replica would count them once per core.
    impl.replicated_parameter.assign(impl.model.parameters().size(), false);
    for (const graph::Node& node : impl.model.nodes()) {
        if (!impl.plan.tile(node.id, 0).replicated) continue;
        for (int p : node.parameters) impl.replicated_parameter[static_cast<std::size_t>(p)] = true;
    }

    graph::ExecutorOptions options;
    options.precision = impl.config.precision;
    options.distributed_reductions = true;
    options.keep_activation_gradients = impl.config.keep_activation_gradients;
    impl.cores.resize(static_cast<std::size_t>(impl.total_cores));
    for (const graph::ParameterSpec& spec : impl.model.parameters()) impl.parameter_bytes += num_elements_of(spec.shape) * 4;
    // What each compiled core holds, measured: the kernels' reordered and converted copies depend on the
    // layouts oneDNN picks for this CPU, which no estimate made before compiling knows. On the host the
    // cores share one copy of the weights (see build below) and one set of optimizer slots (update()); a
    // core also hands its loss gradients to backward as plain tensors beside its own buffers, and a
    // detector's targets exist for one core per host thread at a time (detection_loss_and_gradients).
    std::mutex budget_mutex;
    std::int64_t built_cores = 0, built_bytes = 0, largest_core_bytes = 0;
    std::int64_t smallest_core_bytes = std::numeric_limits<std::int64_t>::max();
    std::optional<graph::MemoryReport> largest_report;
    std::int64_t largest_index = 0;
    std::atomic<bool> over_budget{false};
    const std::int64_t slot_bytes =
        static_cast<std::int64_t>(train::make_optimizer(impl.config.optimizer)->slot_names().size()) * impl.parameter_bytes;
    const std::int64_t target_bytes = std::min<std::int64_t>(impl.mesh.host_threads, local_count) * impl.largest_target_bytes();
    const std::int64_t held_once = impl.parameter_bytes + slot_bytes + target_bytes;
    const auto build = [&](std::int64_t c) {
        if (over_budget) return;
        Impl::Core& core = impl.cores[static_cast<std::size_t>(c)];
        core.replica = c / impl.per_replica;
        core.index = c % impl.per_replica;
        core.executor = std::make_unique<graph::Executor>(impl.core_graphs.graphs[static_cast<std::size_t>(core.index)], options);
        core.executor->initialize_parameters(impl.config.seed);  // and its batch-norm statistics
        if (c > impl.first_local) {
            // Every core holds the same weights (the same initialisation, the same update): on the host a
            // rank's cores share its first core's storage, which the kernels read at each call. A core's
            // ledger still counts its own copy, as a device core holds one.
            const std::span<Parameter> own = core.executor->parameters();
            const std::span<const Parameter> first = impl.first_local_core().executor->parameters();
            for (std::size_t p = 0; p < own.size(); ++p) own[p].value = first[p].value;
        }
        core.optimizer = train::make_optimizer(impl.config.optimizer);
        if (impl.mesh.host_memory_bytes <= 0) return;
        const graph::MemoryReport report = core.executor->memory_report();
        // Its own bytes; the weights it shares are counted once, in held_once.
        const std::int64_t bytes = report.total() - impl.parameter_bytes + impl.output_bytes(core.index);
        const std::lock_guard lock(budget_mutex);
        ++built_cores;
        built_bytes += bytes;
        if (bytes > largest_core_bytes) {
            largest_core_bytes = bytes;
            largest_report = report;
            largest_index = core.index;
        }
        smallest_core_bytes = std::min(smallest_core_bytes, bytes);
        // Building stops once the budget cannot hold the rest, each counted as 90 % of the smallest so far:
        // the cores of a mesh differ by their halos, a few percent (at 2560² core 0 holds 2 % more than
        // the others; counting the rest as the largest refused a mesh that fits). The whole mesh, once
        // built, is checked on what it measured.
        const std::int64_t rest = (local_count - built_cores) * (smallest_core_bytes / 10 * 9);
        if (built_bytes + rest + held_once > impl.mesh.host_memory_bytes) over_budget = true;
    };
    // This rank's first core first (the others take its weights); compiling the others is independent.
    // Every core is compiled on the pool, the first too: oneDNN fixes a kernel's thread count when it
    // creates it, and one created here with the caller's team (2 threads) opened a team of its own at
    // every call inside a single-threaded core task — more threads than host cores, every core's
    // kernels slowed 2–5×.
    std::exception_ptr failure;
    try {
        impl.pool->run(1, [&](std::int64_t) { build(impl.first_local); });
        impl.pool->run(local_count - 1, [&](std::int64_t c) { build(impl.first_local + c + 1); });
    } catch (...) {
        failure = std::current_exception();
    }
    if (!failure && impl.mesh.host_memory_bytes > 0 && !over_budget) impl.host_bytes = built_bytes + held_once;
    if (!failure && over_budget) {
        try {
            const graph::MemoryReport& r = *largest_report;
            const std::int64_t needed = built_bytes + (local_count - built_cores) * (smallest_core_bytes / 10 * 9) + held_once;
            const bool measured_all = built_cores == local_count;
            std::ostringstream detection_part;
            if (target_bytes > 0) detection_part << "; detection targets, " << format_gib(target_bytes);
            std::ostringstream whose;
            if (!impl.single_rank()) whose << " of MPI rank " << impl.transport->rank();
            TESSERA_REJECT("the " << local_count << " simulated core(s)" << whose.str() << " need " << (measured_all ? "" : "at least ") << format_gib(needed)
                              << " of this machine's memory, more than the " << format_gib(impl.mesh.host_memory_bytes)
                              << " a run may use here ("
                              << (measured_all ? "measured on every one" : "measured on the " + std::to_string(built_cores) + " compiled first")
                              << ": the largest holds "
                              << format_gib(largest_core_bytes) << " — activations " << format_gib(r.activations + r.halo_buffers)
                              << ", activation gradients " << format_gib(r.activation_gradients) << ", kernel workspace "
                              << format_gib(r.workspace) << ", weight gradients " << format_gib(r.weight_gradients)
                              << ", loss gradients " << format_gib(impl.output_bytes(largest_index))
                              << "; weights, held once, " << format_gib(impl.parameter_bytes) << "; optimizer slots, held once, "
                              << format_gib(slot_bytes) << detection_part.str()
                              << "). Train a smaller input (input.size) or batch, plan it instead (tessera-cli plan), "
                              << (impl.single_rank() ? "" : "spread the cores over more MPI ranks, ")
                              << "or raise TESSERA_HOST_MEMORY on a machine with more memory.");
        } catch (...) {
            failure = std::current_exception();
        }
    }
    impl.agree_on_failure(failure);
    if (impl.single_rank()) {
        impl.rank_hosts = {impl.transport->host_name()};
    } else {
        const std::string host = impl.transport->host_name();
        for (const std::vector<std::byte>& bytes : impl.transport->all_gather(std::as_bytes(std::span(host.data(), host.size())))) {
            impl.rank_hosts.emplace_back(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        }
        // The initialisation is deterministic, but rank 0's weights and statistics are the ones every
        // rank starts from (hosts with another libm could round an initialiser differently).
        Impl::Core& first = impl.first_local_core();
        for (Parameter& parameter : first.executor->parameters()) impl.transport->broadcast(Impl::as_bytes(parameter.value), 0);
        for (Tensor& buffer : first.executor->buffers()) impl.transport->broadcast(Impl::as_bytes(buffer), 0);
        for (Impl::Core& core : impl.local_cores()) {
            if (&core == &first) continue;
            for (std::size_t b = 0; b < first.executor->buffers().size(); ++b) core.executor->buffers()[b].copy_from(first.executor->buffers()[b]);
        }
    }

    impl.outgoing.resize(impl.core_graphs.halos.size());
    for (std::size_t h = 0; h < impl.core_graphs.halos.size(); ++h) {
        const auto& transfers = impl.core_graphs.halos[h].transfers;
        auto& sends = impl.outgoing[h];
        sends.resize(static_cast<std::size_t>(impl.per_replica));
        for (std::size_t receiver = 0; receiver < transfers.size(); ++receiver) {
            for (std::size_t t = 0; t < transfers[receiver].size(); ++t) {
                sends[static_cast<std::size_t>(transfers[receiver][t].peer)].push_back({static_cast<std::int64_t>(receiver), t});
            }
        }
    }
    impl.plan_remote_transfers();
}

CoreMesh::~CoreMesh() = default;

std::int64_t CoreMesh::host_bytes() const { return m_impl->host_bytes; }
const CorePlacement& CoreMesh::placement() const { return m_impl->placement; }
const std::vector<std::string>& CoreMesh::rank_hosts() const { return m_impl->rank_hosts; }
Transport& CoreMesh::transport() const { return *m_impl->transport; }
bool CoreMesh::owns_core(std::int64_t core) const { return m_impl->is_local(core); }
std::int64_t CoreMesh::num_cores() const { return m_impl->total_cores; }
std::int64_t CoreMesh::cores_per_replica() const { return m_impl->per_replica; }
std::int64_t CoreMesh::num_replicas() const { return m_impl->mesh.num_replicas; }
std::int64_t CoreMesh::step() const { return m_impl->step; }

std::vector<train::NamedTensor> CoreMesh::weights() const {
    Impl& impl = *m_impl;
    graph::Executor& first = *impl.first_local_core().executor;  // every rank holds the same weights
    std::vector<train::NamedTensor> entries;
    for (const Parameter& parameter : first.parameters()) entries.push_back({parameter.name, parameter.value.clone()});
    const auto& buffers = first.graph().buffers();
    for (std::size_t b = 0; b < buffers.size(); ++b) entries.push_back({buffers[b].name, impl.replica_buffer(0, b)});
    return entries;
}

std::vector<train::NamedTensor> CoreMesh::training_state() const {
    Impl& impl = *m_impl;
    std::vector<train::NamedTensor> entries;
    // Every rank's first core stepped the same optimizer on the same gradients.
    for (train::NamedTensor& entry : impl.first_local_core().optimizer->state()) entries.push_back({"optimizer/" + entry.name, std::move(entry.value)});
    for (train::NamedTensor& entry : impl.loss_scaler->state()) entries.push_back(std::move(entry));
    entries.push_back(train::make_counter_entry("mesh/step", impl.step));
    const auto& buffers = impl.first_local_core().executor->graph().buffers();
    for (std::int64_t replica = 1; replica < impl.mesh.num_replicas; ++replica) {
        for (std::size_t b = 0; b < buffers.size(); ++b) {
            entries.push_back({"replica" + std::to_string(replica) + "/" + buffers[b].name, impl.replica_buffer(replica, b)});
        }
    }
    return entries;
}

void CoreMesh::load_checkpoint(const std::vector<train::NamedTensor>& weights, const std::vector<train::NamedTensor>& state) {
    Impl& impl = *m_impl;
    const auto require = [](const std::vector<train::NamedTensor>& entries, const std::string& name, const Tensor& like,
                            const char* part) -> const Tensor& {
        const train::NamedTensor* entry = train::find_entry(entries, name);
        TESSERA_CHECK(entry, "the checkpoint's " << part << " have no '" << name
                                                 << "': it was written for another model; start a new model_dir or restore the experiment it came from");
        TESSERA_CHECK(entry->value.shape() == like.shape() && entry->value.dtype() == like.dtype(),
                      "the checkpoint's '" << name << "' is " << shape_to_string(entry->value.shape()) << ", the model's "
                                           << shape_to_string(like.shape()) << ": it was written for another model");
        return entry->value;
    };
    // Check everything before changing anything.
    graph::Executor& first = *impl.first_local_core().executor;
    const auto& buffer_specs = first.graph().buffers();
    std::vector<const Tensor*> parameter_values, buffer_values;
    for (const Parameter& parameter : first.parameters()) parameter_values.push_back(&require(weights, parameter.name, parameter.value, "weights"));
    for (std::size_t b = 0; b < buffer_specs.size(); ++b) buffer_values.push_back(&require(weights, buffer_specs[b].name, first.buffers()[b], "weights"));
    std::vector<std::vector<const Tensor*>> replica_buffers(static_cast<std::size_t>(impl.mesh.num_replicas), buffer_values);
    for (std::int64_t replica = 1; replica < impl.mesh.num_replicas; ++replica) {
        for (std::size_t b = 0; b < buffer_specs.size(); ++b) {
            replica_buffers[static_cast<std::size_t>(replica)][b] =
                &require(state, "replica" + std::to_string(replica) + "/" + buffer_specs[b].name, first.buffers()[b], "training state");
        }
    }
    const train::NamedTensor* step = train::find_entry(state, "mesh/step");
    TESSERA_CHECK(step, "the checkpoint's training state has no 'mesh/step': the file is not a Tessera checkpoint");
    std::vector<train::NamedTensor> optimizer_state, scaler_state;
    for (const train::NamedTensor& entry : state) {
        if (entry.name.starts_with("optimizer/")) optimizer_state.push_back({entry.name.substr(10), entry.value});
        else if (entry.name.starts_with("loss_scale/")) scaler_state.push_back(entry);
    }
    const std::int64_t step_value = train::read_counter_entry(*step);
    impl.loss_scaler->load_state(scaler_state);
    for (Impl::Core& core : impl.local_cores()) {
        const bool first_core = &core == &impl.first_local_core();
        if (first_core) {  // this rank's other cores share its weights
            for (std::size_t p = 0; p < parameter_values.size(); ++p) core.executor->parameters()[p].value.copy_from(*parameter_values[p]);
        }
        const auto& values = replica_buffers[static_cast<std::size_t>(core.replica)];
        for (std::size_t b = 0; b < values.size(); ++b) core.executor->buffers()[b].copy_from(*values[b]);
        core.optimizer->reset();
        // Only a rank's first core steps its optimizer (update()); the others never hold slots.
        if (!optimizer_state.empty() && first_core) core.optimizer->load_state(optimizer_state);
    }
    impl.step = step_value;
}
const graph::Graph& CoreMesh::model() const { return m_impl->model; }
const partition::TilingPlan& CoreMesh::plan() const { return m_impl->plan; }
const partition::CoreGraphs& CoreMesh::core_graphs() const { return m_impl->core_graphs; }
const MeshConfig& CoreMesh::config() const { return m_impl->mesh; }
const std::vector<CoreEvent>& CoreMesh::events() const { return m_impl->events; }
const StepSummary& CoreMesh::summary() const { return m_impl->summary; }

graph::Executor& CoreMesh::executor(std::int64_t core) {
    TESSERA_CHECK(core >= 0 && core < m_impl->total_cores, "the mesh has cores 0.." << m_impl->total_cores - 1 << ", got " << core);
    TESSERA_CHECK(m_impl->is_local(core), "core " << core << " runs on MPI rank " << m_impl->placement.owner(core) << ", not on this rank ("
                                                  << m_impl->transport->rank() << ")");
    return *m_impl->cores[static_cast<std::size_t>(core)].executor;
}

std::vector<MemoryLedger> CoreMesh::memory() const {
    Impl& impl = *m_impl;
    std::vector<MemoryLedger> ledgers(static_cast<std::size_t>(impl.total_cores));
    for (const Impl::Core& core : impl.local_cores()) {
        const graph::MemoryReport report = core.executor->memory_report();
        MemoryLedger ledger;
        ledger.core = impl.mesh_core(core.replica, core.index);
        ledger.weights = report.weights;
        ledger.optimizer_slots = static_cast<std::int64_t>(core.optimizer->slot_names().size()) * impl.parameter_bytes;
        ledger.weight_gradients = report.weight_gradients;
        ledger.activations = report.activations;
        ledger.halo_buffers = report.halo_buffers;
        ledger.activation_gradients = report.activation_gradients;
        ledger.workspace = report.workspace;
        ledger.capacity = impl.mesh.core_memory_bytes;
        const graph::Graph& g = impl.core_graphs.graphs[static_cast<std::size_t>(core.index)];
        for (std::size_t n = 0; n < report.node_bytes.size(); ++n) {
            if (report.node_bytes[n] > 0) ledger.largest.push_back({g.nodes()[n].name, report.node_bytes[n]});
        }
        ledger.largest.push_back({"weights and their gradients", ledger.weights + ledger.weight_gradients});
        ledger.largest.push_back({"optimizer slots", ledger.optimizer_slots});
        std::sort(ledger.largest.begin(), ledger.largest.end(),
                  [](const MemoryItem& a, const MemoryItem& b) { return a.bytes > b.bytes; });
        if (ledger.largest.size() > 5) ledger.largest.resize(5);
        ledgers[static_cast<std::size_t>(ledger.core)] = std::move(ledger);
    }
    impl.share_core_values(
        [&](std::int64_t c, ByteWriter& out) {
            const MemoryLedger& ledger = ledgers[static_cast<std::size_t>(c)];
            for (std::int64_t value : {ledger.weights, ledger.optimizer_slots, ledger.weight_gradients, ledger.activations, ledger.halo_buffers,
                                       ledger.activation_gradients, ledger.workspace, ledger.capacity}) {
                out.put(value);
            }
            out.put(static_cast<std::int64_t>(ledger.largest.size()));
            for (const MemoryItem& item : ledger.largest) {
                out.put_string(item.name);
                out.put(item.bytes);
            }
        },
        [&](std::int64_t c, ByteReader& in) {
            MemoryLedger& ledger = ledgers[static_cast<std::size_t>(c)];
            ledger.core = c;
            for (std::int64_t* value : {&ledger.weights, &ledger.optimizer_slots, &ledger.weight_gradients, &ledger.activations,
                                        &ledger.halo_buffers, &ledger.activation_gradients, &ledger.workspace, &ledger.capacity}) {
                *value = in.get<std::int64_t>();
            }
            ledger.largest.resize(static_cast<std::size_t>(in.get<std::int64_t>()));
            for (MemoryItem& item : ledger.largest) {
                item.name = in.get_string();
                item.bytes = in.get<std::int64_t>();
            }
        });
    return ledgers;
}

void CoreMesh::check_memory() const {
    Impl& impl = *m_impl;
    const std::vector<MemoryLedger> ledgers = memory();
    const auto worst = std::max_element(ledgers.begin(), ledgers.end(),
                                        [](const MemoryLedger& a, const MemoryLedger& b) { return a.peak() < b.peak(); });
    if (worst->peak() <= worst->capacity) return;
    // What would fit: activations shrink with more cores per replica (tiles) and with a smaller batch;
    // weights, their gradients and optimizer slots do not.
    const std::int64_t fixed = worst->weights + worst->weight_gradients + worst->optimizer_slots;
    const std::int64_t scaling = worst->peak() - fixed;
    std::ostringstream advice;
    if (fixed >= worst->capacity) {
        advice << "the weights, their gradients and optimizer slots alone need " << format_bytes(fixed)
               << "; use a smaller model or an optimizer with fewer slots (SGD without momentum)";
    } else {
        const double factor = static_cast<double>(scaling) / static_cast<double>(worst->capacity - fixed);
        const auto cores_needed = static_cast<std::int64_t>(std::ceil(factor * static_cast<double>(impl.per_replica)));
        const std::int64_t batch = impl.model.node(impl.model.input_node()).output_shape[0];
        const auto batch_fit = static_cast<std::int64_t>(std::floor(static_cast<double>(batch) / factor));
        advice << "it would fit with about " << cores_needed << " cores per replica (now " << impl.per_replica << ")";
        if (batch_fit >= 1) advice << ", or a per-replica batch of " << batch_fit << " (now " << batch << ")";
        else advice << " (a batch of 1 is still too large for " << impl.per_replica << " cores)";
    }
    std::ostringstream items;
    for (std::size_t i = 0; i < worst->largest.size() && i < 3; ++i) {
        items << (i ? ", " : "") << "'" << worst->largest[i].name << "' " << format_bytes(worst->largest[i].bytes);
    }
    TESSERA_REJECT("out of memory on core " << worst->core << ": the step needs " << format_bytes(worst->peak())
                                            << " but a core holds " << format_bytes(worst->capacity) << " (activations "
                                            << format_bytes(worst->activations) << ", halo buffers "
                                            << format_bytes(worst->halo_buffers) << ", gradients "
                                            << format_bytes(worst->activation_gradients + worst->weight_gradients)
                                            << ", weights " << format_bytes(worst->weights) << ", optimizer slots "
                                            << format_bytes(worst->optimizer_slots) << "); largest: " << items.str()
                                            << "; " << advice.str() << ". Nothing ran.");
}

train::StepResult CoreMesh::train_step(const Tensor& images, const Tensor& labels) {
    Impl& impl = *m_impl;
    TESSERA_CHECK(!impl.detector, "a detection mesh steps on boxes: train_step(images, ground_truth)");
    check_memory();
    impl.check_batch(images, labels);
    return impl.run_step([&] { impl.scatter_batch(images, &labels, graph::Mode::Train); },
                         [&](std::vector<std::vector<Tensor>>& output_gradients) { return impl.segmentation_loss_stage(output_gradients); });
}

train::StepResult CoreMesh::train_step(const RankTiles& own) {
    Impl& impl = *m_impl;
    TESSERA_CHECK(!impl.detector, "a detection mesh steps on boxes: train_step(tiles, ground_truth)");
    check_memory();
    impl.check_received(own, true);
    return impl.run_step([&] { impl.scatter_received(own, graph::Mode::Train); },
                         [&](std::vector<std::vector<Tensor>>& output_gradients) { return impl.segmentation_loss_stage(output_gradients); });
}

train::StepResult CoreMesh::train_step(const Tensor& images, std::span<const detection::PaddedGroundTruth> ground_truth) {
    Impl& impl = *m_impl;
    impl.check_detection_batch(images, ground_truth);
    check_memory();
    return impl.run_step(
        [&] {
            impl.take_ground_truth(ground_truth);
            impl.scatter_batch(images, nullptr, graph::Mode::Train);
        },
        [&](std::vector<std::vector<Tensor>>& output_gradients) { return impl.detection_loss_and_gradients(output_gradients); });
}

train::StepResult CoreMesh::train_step(const RankTiles& own, std::span<const detection::PaddedGroundTruth> ground_truth) {
    Impl& impl = *m_impl;
    TESSERA_CHECK(impl.detector, "this mesh was not configured for detection (TrainerConfig::detection); step it on labels");
    impl.check_ground_truth(ground_truth);
    impl.check_received(own, false);
    check_memory();
    return impl.run_step(
        [&] {
            impl.take_ground_truth(ground_truth);
            impl.scatter_received(own, graph::Mode::Train);
        },
        [&](std::vector<std::vector<Tensor>>& output_gradients) { return impl.detection_loss_and_gradients(output_gradients); });
}

Tensor CoreMesh::gather_outputs_to_rank_zero(int node) const {
    Shape shape = model().node(node).output_shape;
    const std::int64_t batch = shape[0];
    shape[0] *= num_replicas();
    const bool here = m_impl->transport->rank() == 0;
    Tensor whole = here ? Tensor::zeros(shape, DType::F32) : Tensor();
    for (std::int64_t r = 0; r < num_replicas(); ++r) {
        const Tensor replica = gather_tiles(node, r, false, true);
        if (!here) continue;
        std::vector<std::int64_t> begin(shape.size(), 0), extent(shape.begin(), shape.end());
        begin[0] = r * batch;
        extent[0] = batch;
        whole.view_box(begin, extent).copy_from(replica);
    }
    return whole;
}

train::EvalResult CoreMesh::evaluate(const Tensor& images, const Tensor& labels) {
    Impl& impl = *m_impl;
    TESSERA_CHECK(!impl.detector, "a detection mesh is evaluated on boxes (mAP), not on labels");
    impl.check_batch(images, labels);
    impl.forward_for_evaluation([&] { impl.scatter_batch(images, nullptr, graph::Mode::Eval); });
    train::EvalResult result;
    result.logits = gather_outputs_to_rank_zero(impl.model.output_node());
    if (!result.logits.is_defined()) return result;  // a rank other than 0: the logits are rank 0's
    const LossPartial total = impl.loss_partial(result.logits, labels);
    result.loss = impl.finish_loss(total, result.logits, labels).first;
    loss::MetricOptions metric_options;
    metric_options.ignore_label = impl.config.cross_entropy.ignore_label;
    result.confusion = loss::confusion_matrix_from_logits(result.logits, labels, metric_options);
    loss::ScoreOptions score_options;
    score_options.exclude_background = impl.config.dice_excludes_background;
    result.scores = loss::segmentation_scores(result.confusion, score_options);
    return result;
}

void CoreMesh::evaluate(const RankTiles& own) {
    Impl& impl = *m_impl;
    TESSERA_CHECK(!impl.detector, "a detection mesh is evaluated on boxes (mAP), not on labels");
    impl.check_received(own, false);
    impl.forward_for_evaluation([&] { impl.scatter_received(own, graph::Mode::Eval); });
    gather_outputs_to_rank_zero(impl.model.output_node());  // rank 0 assembles the logits
}

std::vector<Tensor> CoreMesh::predict_outputs(const Tensor& images) {
    Impl& impl = *m_impl;
    impl.check_images(images, "predicts on");
    impl.forward_for_evaluation([&] { impl.scatter_batch(images, nullptr, graph::Mode::Eval); });
    std::vector<Tensor> outputs;
    for (const int node : impl.model.output_nodes()) outputs.push_back(gather_outputs_to_rank_zero(node));
    return outputs;
}

void CoreMesh::predict_outputs(const RankTiles& own) {
    Impl& impl = *m_impl;
    impl.check_received(own, false);
    impl.forward_for_evaluation([&] { impl.scatter_received(own, graph::Mode::Eval); });
    for (const int node : impl.model.output_nodes()) gather_outputs_to_rank_zero(node);  // rank 0 assembles them
}

RankTiles CoreMesh::tiles_for_rank(int rank, const Tensor& images, const Tensor* labels) const {
    const Impl& impl = *m_impl;
    TESSERA_CHECK(rank >= 0 && rank < impl.placement.num_ranks(), "the mesh runs on ranks 0.." << impl.placement.num_ranks() - 1 << ", got " << rank);
    impl.check_images(images, "expects");
    RankTiles tiles;
    for (std::int64_t core = impl.placement.first_core(rank); core < impl.placement.end_core(rank); ++core) {
        const std::int64_t replica = core / impl.per_replica, index = core % impl.per_replica;
        tiles.images.push_back(impl.tile_of(images, replica, index, true));
        if (labels) tiles.labels.push_back(impl.label_tile(*labels, replica, index));
    }
    return tiles;
}

void CoreMesh::send_tiles(const Tensor& images, const Tensor* labels) const {
    Transport& transport = *m_impl->transport;
    TESSERA_CHECK(transport.rank() == 0, "rank 0 sends a batch's tiles; rank " << transport.rank() << " receives them (receive_tiles)");
    for (int rank = 1; rank < transport.num_ranks(); ++rank) {
        const RankTiles tiles = tiles_for_rank(rank, images, labels);
        ByteWriter out;
        out.put(static_cast<std::int64_t>(tiles.images.size()));
        out.put(static_cast<std::int64_t>(tiles.labels.size()));
        for (const Tensor& tile : tiles.images) out.put_tensor(tile);
        for (const Tensor& tile : tiles.labels) out.put_tensor(tile);
        // Its length first: the receiver sizes its buffer by it (messages of one tag arrive in order).
        const auto length = static_cast<std::int64_t>(out.bytes().size());
        transport.post_send(rank, MessageTag::BatchTiles, std::as_bytes(std::span(&length, 1)));
        transport.post_send(rank, MessageTag::BatchTiles, out.bytes());
        transport.wait_all();  // one rank's tiles in memory at a time
    }
}

RankTiles CoreMesh::receive_tiles() const {
    Transport& transport = *m_impl->transport;
    TESSERA_CHECK(transport.rank() != 0, "rank 0 holds the whole batch and sends the tiles (send_tiles)");
    std::int64_t length = 0;
    transport.post_receive(0, MessageTag::BatchTiles, std::as_writable_bytes(std::span(&length, 1)));
    transport.wait_all();
    std::vector<std::byte> bytes(static_cast<std::size_t>(length));
    transport.post_receive(0, MessageTag::BatchTiles, bytes);
    transport.wait_all();
    ByteReader in(bytes);
    RankTiles tiles;
    tiles.images.resize(static_cast<std::size_t>(in.get<std::int64_t>()));
    tiles.labels.resize(static_cast<std::size_t>(in.get<std::int64_t>()));
    for (Tensor& tile : tiles.images) tile = in.get_tensor();
    for (Tensor& tile : tiles.labels) tile = in.get_tensor();
    return tiles;
}

namespace {
// A model node's tiles on one replica's cores, placed into the whole tensor.
Tensor gather(const CoreMesh& mesh, const std::vector<Tensor>& tiles, int model_node) {
    const graph::Node& node = mesh.model().node(model_node);
    if (mesh.plan().tile(model_node, 0).replicated) return tiles[0];
    Tensor whole = Tensor::zeros(node.output_shape, DType::F32);
    for (std::size_t c = 0; c < tiles.size(); ++c) {
        const auto& owned = mesh.plan().tile(model_node, static_cast<std::int64_t>(c)).owned;
        std::vector<std::int64_t> begin(node.output_shape.size(), 0), extent(node.output_shape.begin(), node.output_shape.end());
        for (std::size_t axis = 0; axis < owned.size(); ++axis) {
            begin[axis + 2] = owned[axis].begin;
            extent[axis + 2] = owned[axis].size();
        }
        whole.view_box(begin, extent).copy_from(tiles[c]);
    }
    return whole;
}
}  // namespace

double CoreMesh::detection_loss(std::span<const detection::PaddedGroundTruth> ground_truth) {
    Impl& impl = *m_impl;
    TESSERA_CHECK(impl.detector, "this mesh was not configured for detection (TrainerConfig::detection)");
    impl.check_ground_truth(ground_truth);
    impl.take_ground_truth(ground_truth);
    std::vector<std::vector<Tensor>> unused_gradients;
    return impl.detection_loss_and_gradients(unused_gradients);
}

Tensor CoreMesh::gather_activation(int model_node, std::int64_t replica) const {
    return gather_tiles(model_node, replica, false);
}

Tensor CoreMesh::gather_activation_gradient(int model_node, std::int64_t replica) const {
    return gather_tiles(model_node, replica, true);
}

Tensor CoreMesh::gather_tiles(int model_node, std::int64_t replica, bool gradient, bool only_to_root) const {
    Impl& impl = *m_impl;
    TESSERA_CHECK(replica >= 0 && replica < impl.mesh.num_replicas,
                  "the mesh has replicas 0.." << impl.mesh.num_replicas - 1 << ", got " << replica);
    const int local = impl.core_graphs.local_node[static_cast<std::size_t>(impl.model.node(model_node).id)];
    std::vector<Tensor> tiles(static_cast<std::size_t>(impl.total_cores));
    for (std::int64_t i = 0; i < impl.per_replica; ++i) {
        const std::int64_t core = impl.mesh_core(replica, i);
        if (!impl.is_local(core)) continue;
        const graph::Executor& executor = *impl.cores[static_cast<std::size_t>(core)].executor;
        tiles[static_cast<std::size_t>(core)] = gradient ? executor.activation_gradient(local) : executor.activation(local);
    }
    // Tiles held by other ranks: each rank writes its own of this replica.
    impl.share_core_values(
        [&](std::int64_t c, ByteWriter& out) {
            const Tensor& tile = tiles[static_cast<std::size_t>(c)];
            if (tile.is_defined()) out.put_tensor(tile);
        },
        [&](std::int64_t c, ByteReader& in) {
            if (c / impl.per_replica == replica) tiles[static_cast<std::size_t>(c)] = in.get_tensor();
        },
        only_to_root);
    if (only_to_root && impl.transport->rank() != 0) return {};
    std::vector<Tensor> replica_tiles(tiles.begin() + impl.mesh_core(replica, 0), tiles.begin() + impl.mesh_core(replica, 0) + impl.per_replica);
    return gather(*this, replica_tiles, model_node);
}

}  // namespace tessera::mesh
