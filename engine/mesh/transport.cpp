#include "mesh/transport.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cstring>
#include <unistd.h>

namespace tessera::mesh {

std::string SingleProcess::host_name() const {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
    return name;
}

void SingleProcess::post_send(int to_rank, MessageTag, std::span<const std::byte>) {
    TESSERA_FAIL("a single-process mesh has no rank " << to_rank << " to send to");
}

void SingleProcess::post_receive(int from_rank, MessageTag, std::span<std::byte>) {
    TESSERA_FAIL("a single-process mesh has no rank " << from_rank << " to receive from");
}

std::vector<std::vector<std::byte>> SingleProcess::all_gather(std::span<const std::byte> mine) {
    return {std::vector<std::byte>(mine.begin(), mine.end())};
}

std::vector<std::vector<std::byte>> SingleProcess::all_gather(std::span<const std::byte> mine, std::span<const int> group) {
    TESSERA_CHECK(group.size() == 1 && group[0] == 0, "one process is rank 0 alone, got a group of " << group.size() << " ranks");
    return all_gather(mine);
}

std::vector<std::vector<std::byte>> SingleProcess::gather(std::span<const std::byte> mine, int root) {
    TESSERA_CHECK(root == 0, "one process is rank 0 alone, asked to gather on rank " << root);
    return all_gather(mine);
}

CorePlacement::CorePlacement(std::int64_t num_cores, int num_ranks) {
    TESSERA_CHECK(num_ranks >= 1, "a mesh runs on at least one rank, got " << num_ranks);
    TESSERA_CHECK(num_cores >= num_ranks,
                  "the mesh has " << num_cores << " simulated core(s), fewer than the " << num_ranks
                                  << " MPI ranks it was started on: every rank must own at least one core. Start it with at most "
                                  << num_cores << " ranks (mpirun -np " << num_cores << "), or partition the input more ways");
    m_first.resize(static_cast<std::size_t>(num_ranks) + 1);
    const std::int64_t base = num_cores / num_ranks, extra = num_cores % num_ranks;
    for (int rank = 0; rank <= num_ranks; ++rank) {
        m_first[static_cast<std::size_t>(rank)] = rank * base + std::min<std::int64_t>(rank, extra);
    }
}

int CorePlacement::owner(std::int64_t core) const {
    const auto after = std::upper_bound(m_first.begin(), m_first.end(), core);
    TESSERA_ASSERT(core >= 0 && after != m_first.end(), "core " << core << " is outside the mesh");
    return static_cast<int>(after - m_first.begin()) - 1;
}

void SingleProcess::use_grid(const std::optional<RankGrid>& grid) {
    TESSERA_CHECK(!grid, "one process is rank 0 alone, asked for a grid of " << grid->ranks.size() << " ranks");
}

std::optional<RankGrid> rank_grid(const CorePlacement& placement, const std::vector<std::int64_t>& pieces_per_axis, std::int64_t replica) {
    std::int64_t per_replica = 1;
    for (std::int64_t pieces : pieces_per_axis) per_replica *= pieces;
    const std::int64_t first = replica * per_replica, end = first + per_replica;
    TESSERA_CHECK(replica >= 0 && end <= placement.end_core(placement.num_ranks() - 1),
                  "replica " << replica << " of " << per_replica << " cores is outside a mesh of " << placement.end_core(placement.num_ranks() - 1) << " cores");
    const int first_rank = placement.owner(first), last_rank = placement.owner(end - 1);
    if (first_rank == last_rank) return std::nullopt;
    if (placement.first_core(first_rank) != first || placement.end_core(last_rank) != end) return std::nullopt;
    const std::int64_t block = placement.end_core(first_rank) - placement.first_core(first_rank);
    RankGrid grid;
    for (int rank = first_rank; rank <= last_rank; ++rank) {
        if (placement.end_core(rank) - placement.first_core(rank) != block) return std::nullopt;
        grid.ranks.push_back(rank);
    }
    // Consecutive cores are a box when they fill the innermost axes whole and then a divisor of one axis.
    grid.dims.assign(pieces_per_axis.size(), 1);
    std::int64_t remaining = block;  // of a block's cores, what the axes seen so far have not taken
    for (std::size_t axis = pieces_per_axis.size(); axis-- > 0;) {
        const std::int64_t pieces = pieces_per_axis[axis];
        if (remaining >= pieces) {
            if (remaining % pieces != 0) return std::nullopt;
            remaining /= pieces;
        } else {
            if (pieces % remaining != 0) return std::nullopt;
            grid.dims[axis] = static_cast<int>(pieces / remaining);
            remaining = 1;
        }
    }
    TESSERA_ASSERT(remaining == 1, "a block of " << block << " cores divides a replica of " << per_replica);
    return grid;
}

void ByteWriter::put_tensor(const Tensor& tensor) {
    const Tensor plain = tensor.contiguous();
    put(static_cast<std::int32_t>(plain.dtype()));
    put_span(std::span<const std::int64_t>(plain.shape()));
    put_span(std::span<const std::byte>(static_cast<const std::byte*>(plain.raw_data()), plain.num_bytes()));
}

Tensor ByteReader::get_tensor() {
    const auto dtype = static_cast<DType>(get<std::int32_t>());
    Tensor tensor = Tensor::empty(get_vector<std::int64_t>(), dtype);
    const auto size = static_cast<std::size_t>(get<std::int64_t>());
    TESSERA_ASSERT(size == tensor.num_bytes(), "a tensor's message holds " << size << " bytes, its shape " << tensor.num_bytes());
    take(tensor.raw_data(), size);
    return tensor;
}

void broadcast_message(Transport& transport, std::vector<std::byte>& bytes, int root) {
    if (transport.num_ranks() == 1) return;
    auto size = static_cast<std::int64_t>(bytes.size());
    transport.broadcast(std::as_writable_bytes(std::span(&size, 1)), root);
    bytes.resize(static_cast<std::size_t>(size));
    transport.broadcast(bytes, root);
}

void ByteReader::take(void* out, std::size_t size) {
    TESSERA_ASSERT(m_offset + size <= m_bytes.size(),
                   "a message ended after " << m_bytes.size() << " bytes, " << m_offset + size << " expected");
    if (size > 0) std::memcpy(out, m_bytes.data() + m_offset, size);
    m_offset += size;
}

}  // namespace tessera::mesh
