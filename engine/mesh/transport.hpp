// Transport: how the processes that run a mesh's cores talk to each other.
//
// A mesh of T simulated cores runs in K processes (ranks); rank k owns a contiguous block of cores
// (CorePlacement) and runs them on its own host threads. Cores of one rank exchange halos and reduce by
// plain copies; between ranks the mesh uses this interface, which knows nothing of cores, layers or
// tensors — only bytes, ranks and a fixed order. Two implementations: SingleProcess (K = 1, every call
// is trivial; today's in-process mesh) and MPI (engine/mpi, for `mpirun` and Slurm).
//
// Every call is made from the thread that steps the mesh (MPI's "funneled" threading), in the same order
// on every rank; point-to-point messages between two ranks with one tag match in the order they were
// posted, which is what the mesh relies on instead of one tag per transfer.
//
//   auto transport = std::make_shared<mesh::SingleProcess>();
//   CoreMesh cores(model, mesh_config, trainer_config, transport);
#pragma once

#include "tensor/tensor.hpp"
#include "train/reduction_order.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::mesh {

// How weight gradients are summed across ranks (train/reduction_order.hpp); reproducible: each rank adds
// one segment of the buffer over every core in core order, then the segments are gathered.
using train::ReductionOrder;

// Tags keep the mesh's message streams apart (each stream's messages match in posting order).
enum class MessageTag : int { ForwardHalo = 11, BackwardHalo = 12, PingPong = 13, BatchTiles = 14, GradientSegments = 15 };

// What this rank sent and how long it waited, since the transport was made (or reset).
struct TransportCounters {
    std::int64_t messages_sent = 0;     // point-to-point
    std::int64_t bytes_sent = 0;        // point-to-point
    std::int64_t collectives = 0;       // broadcasts, gathers, all-reduces, barriers
    std::int64_t collective_bytes = 0;  // this rank's contribution to them
    double wait_seconds = 0;            // in wait_all: messages not yet arrived
    double collective_seconds = 0;      // inside collectives (their waiting included)
    std::int64_t grid_messages = 0;     // of messages_sent: halos over a Cartesian communicator (use_grid)
};

// The ranks holding one replica's cores when they form a grid over its partition grid: every rank's
// cores are a box of one shape, so the ranks themselves sit on a grid of `dims` (row-major, last axis
// fastest, as cores are numbered and as MPI numbers a Cartesian communicator's ranks).
struct RankGrid {
    std::vector<int> ranks;  // ascending: ranks[i] sits at row-major position i
    std::vector<int> dims;   // ranks per spatial axis, outermost first
};

class Transport {
public:
    virtual ~Transport() = default;
    const TransportCounters& counters() const { return m_counters; }
    void reset_counters() { m_counters = {}; }
    virtual int rank() const = 0;
    virtual int num_ranks() const = 0;
    virtual std::string host_name() const = 0;  // this rank's host, for messages naming a rank
    virtual std::string backend_name() const = 0;  // "single-process", "mpi"

    // Non-blocking: posted now, complete after wait_all(); buffers must live until then.
    virtual void post_send(int to_rank, MessageTag tag, std::span<const std::byte> data) = 0;
    virtual void post_receive(int from_rank, MessageTag tag, std::span<std::byte> data) = 0;
    virtual void wait_all() = 0;

    // Collectives over every rank.
    virtual void broadcast(std::span<std::byte> data, int root) = 0;
    // Every rank's bytes (sizes may differ), indexed by rank.
    virtual std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine) = 0;
    // The same over a group of ranks (ascending, this rank among them), indexed like `group`: only the
    // members call it, each in the same order relative to its other group collectives (MPI: a
    // communicator of the group, made on its first use and kept).
    virtual std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine, std::span<const int> group) = 0;
    // Every rank's bytes on `root` alone, indexed by rank; an empty list on the other ranks.
    virtual std::vector<std::vector<std::byte>> gather(std::span<const std::byte> mine, int root) = 0;
    virtual void all_reduce_sum(std::span<float> values) = 0;       // the library's order
    virtual void all_reduce_min(std::span<std::int64_t> values) = 0;
    virtual void barrier() = 0;

    // From now on, halo messages among `grid`'s ranks travel over a Cartesian communicator of them (MPI:
    // MPI_Cart_create over the replica's ranks, so the library and its tools see the partition grid);
    // none: over the world, point-to-point. A mesh calls it once when built, before any halo message;
    // the first use of a grid is collective over its ranks.
    virtual void use_grid(const std::optional<RankGrid>& grid) = 0;
    // The halo communicator, in words, for logs ("2×2 Cartesian communicator of ranks 0–3").
    virtual std::string halo_topology() const = 0;

protected:
    TransportCounters m_counters;
};

// One process holds every core: nothing to send, every collective returns what it was given.
class SingleProcess final : public Transport {
public:
    int rank() const override { return 0; }
    int num_ranks() const override { return 1; }
    std::string host_name() const override;
    std::string backend_name() const override { return "single-process"; }
    void post_send(int to_rank, MessageTag tag, std::span<const std::byte> data) override;
    void post_receive(int from_rank, MessageTag tag, std::span<std::byte> data) override;
    void wait_all() override {}
    void broadcast(std::span<std::byte>, int) override {}
    std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine) override;
    std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine, std::span<const int> group) override;
    std::vector<std::vector<std::byte>> gather(std::span<const std::byte> mine, int root) override;
    void all_reduce_sum(std::span<float>) override {}
    void all_reduce_min(std::span<std::int64_t>) override {}
    void barrier() override {}
    void use_grid(const std::optional<RankGrid>& grid) override;
    std::string halo_topology() const override { return "one process: halos are copies"; }
};

// Which rank owns which mesh cores: contiguous blocks, as even as the counts allow (the first
// num_cores % num_ranks ranks hold one more).
class CorePlacement {
public:
    CorePlacement(std::int64_t num_cores, int num_ranks);
    int num_ranks() const { return static_cast<int>(m_first.size()) - 1; }
    std::int64_t first_core(int rank) const { return m_first[static_cast<std::size_t>(rank)]; }
    std::int64_t end_core(int rank) const { return m_first[static_cast<std::size_t>(rank) + 1]; }
    int owner(std::int64_t core) const;

private:
    std::vector<std::int64_t> m_first;  // [num_ranks + 1]
};

// The grid the ranks holding `replica`'s cores form (pieces_per_axis: the partition grid), if they do:
// at least two ranks, none of them holding another replica's cores, each a box of the same shape. None
// otherwise (one rank holds the replica; uneven blocks; a block that wraps a row) — halos then go
// point-to-point between the ranks the tiling plan names, which needs no grid.
std::optional<RankGrid> rank_grid(const CorePlacement& placement, const std::vector<std::int64_t>& pieces_per_axis, std::int64_t replica);

// Bytes in and out of plain values, for the collectives' payloads.
class ByteWriter {
public:
    template <class T>
    void put(const T& value) {
        const auto* bytes = reinterpret_cast<const std::byte*>(&value);
        m_bytes.insert(m_bytes.end(), bytes, bytes + sizeof(T));
    }
    template <class T>
    void put_span(std::span<const T> values) {
        put<std::int64_t>(static_cast<std::int64_t>(values.size()));
        const auto* bytes = reinterpret_cast<const std::byte*>(values.data());
        m_bytes.insert(m_bytes.end(), bytes, bytes + values.size_bytes());
    }
    void put_string(const std::string& text) { put_span(std::span<const char>(text.data(), text.size())); }
    void put_tensor(const Tensor& tensor);  // dtype, shape and elements (made contiguous)
    std::span<const std::byte> bytes() const { return m_bytes; }
    std::vector<std::byte>& buffer() { return m_bytes; }

private:
    std::vector<std::byte> m_bytes;
};

class ByteReader {
public:
    explicit ByteReader(std::span<const std::byte> bytes) : m_bytes(bytes) {}
    template <class T>
    T get() {
        T value;
        take(&value, sizeof(T));
        return value;
    }
    template <class T>
    std::vector<T> get_vector() {
        std::vector<T> values(static_cast<std::size_t>(get<std::int64_t>()));
        take(values.data(), values.size() * sizeof(T));
        return values;
    }
    std::string get_string() {
        const std::vector<char> characters = get_vector<char>();
        return {characters.begin(), characters.end()};
    }
    Tensor get_tensor();
    bool done() const { return m_offset == m_bytes.size(); }

private:
    void take(void* out, std::size_t size);
    std::span<const std::byte> m_bytes;
    std::size_t m_offset = 0;
};

// Bytes of any size from `root` to every rank (their size first): on return every rank holds root's.
void broadcast_message(Transport& transport, std::vector<std::byte>& bytes, int root);

}  // namespace tessera::mesh
