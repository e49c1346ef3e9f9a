#include "mpi/mpi_transport.hpp"

#include "core/error.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tessera::mpi {

namespace {

// MPI counts are ints: larger buffers travel in pieces of at most 1 GiB (both sides split alike).
constexpr std::size_t largest_piece = std::size_t{1} << 30;

void check(int code, const char* call) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    MPI_Error_string(code, text, &length);
    TESSERA_REJECT(call << " failed: " << std::string(text, static_cast<std::size_t>(length)));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class MpiTransport final : public mesh::Transport {
public:
    MpiTransport() {
        check(MPI_Comm_dup(MPI_COMM_WORLD, &m_comm), "MPI_Comm_dup");
        // Errors come back as codes (and become engine errors naming the call) rather than aborting inside MPI.
        check(MPI_Comm_set_errhandler(m_comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
        check(MPI_Comm_rank(m_comm, &m_rank), "MPI_Comm_rank");
        check(MPI_Comm_size(m_comm, &m_size), "MPI_Comm_size");
        char name[MPI_MAX_PROCESSOR_NAME] = {};
        int length = 0;
        check(MPI_Get_processor_name(name, &length), "MPI_Get_processor_name");
        m_host.assign(name, static_cast<std::size_t>(length));
    }
    ~MpiTransport() override {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized) return;
        for (auto& [grid, comm] : m_grids) MPI_Comm_free(&comm);
        for (auto& [group, comm] : m_groups) MPI_Comm_free(&comm);
        MPI_Comm_free(&m_comm);
    }

    int rank() const override { return m_rank; }
    int num_ranks() const override { return m_size; }
    std::string host_name() const override { return m_host; }
    std::string backend_name() const override { return "mpi"; }

    void post_send(int to_rank, mesh::MessageTag tag, std::span<const std::byte> data) override {
        const auto [comm, peer] = route(to_rank, tag);
        post_pieces(data.size(), [&](std::size_t offset, int size, MPI_Request* request) {
            check(MPI_Isend(data.data() + offset, size, MPI_BYTE, peer, static_cast<int>(tag), comm, request), "MPI_Isend");
            ++m_counters.messages_sent;
            m_counters.bytes_sent += size;
            m_counters.grid_messages += comm == m_grid_comm ? 1 : 0;
        });
    }

    void post_receive(int from_rank, mesh::MessageTag tag, std::span<std::byte> data) override {
        const auto [comm, peer] = route(from_rank, tag);
        post_pieces(data.size(), [&](std::size_t offset, int size, MPI_Request* request) {
            check(MPI_Irecv(data.data() + offset, size, MPI_BYTE, peer, static_cast<int>(tag), comm, request), "MPI_Irecv");
        });
    }

    void use_grid(const std::optional<mesh::RankGrid>& grid) override {
        m_grid_comm = MPI_COMM_NULL;
        m_grid.reset();
        if (!grid) return;
        int cells = 1;
        for (int extent : grid->dims) cells *= extent;
        TESSERA_CHECK(cells == static_cast<int>(grid->ranks.size()) && !grid->dims.empty(),
                      "a grid of " << grid->ranks.size() << " ranks needs dims whose product is that, got " << cells);
        auto key = std::make_pair(grid->ranks, grid->dims);
        if (const auto found = m_grids.find(key); found != m_grids.end()) {
            m_grid_comm = found->second;
        } else {
            const MPI_Comm members = group_communicator(grid->ranks);
            const std::vector<int> periodic(grid->dims.size(), 0);  // a volume's border is no neighbour
            // No reordering: which rank owns which cores is fixed (CorePlacement), and a rank's position
            // in the grid is its position among the members.
            check(MPI_Cart_create(members, static_cast<int>(grid->dims.size()), grid->dims.data(), periodic.data(), 0, &m_grid_comm),
                  "MPI_Cart_create");
            check(MPI_Comm_set_errhandler(m_grid_comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
            m_grids.emplace(std::move(key), m_grid_comm);
        }
        // MPI numbers a Cartesian communicator's ranks row-major, as the mesh numbers its cores: check it.
        std::vector<int> coordinates(grid->dims.size());
        for (std::size_t member = 0; member < grid->ranks.size(); ++member) {
            check(MPI_Cart_coords(m_grid_comm, static_cast<int>(member), static_cast<int>(coordinates.size()), coordinates.data()), "MPI_Cart_coords");
            int row_major = 0;
            for (std::size_t axis = 0; axis < coordinates.size(); ++axis) row_major = row_major * grid->dims[axis] + coordinates[axis];
            TESSERA_CHECK(row_major == static_cast<int>(member), "the Cartesian communicator puts member " << member << " at row-major position "
                                                                   << row_major << "; the mesh's cores expect " << member);
        }
        m_grid = grid;
    }

    std::string halo_topology() const override {
        if (!m_grid) return "point-to-point between the ranks the tiling plan names (MPI_COMM_WORLD)";
        std::string dims;
        for (int extent : m_grid->dims) dims += (dims.empty() ? "" : "×") + std::to_string(extent);
        return dims + " Cartesian communicator of ranks " + std::to_string(m_grid->ranks.front()) + "–" + std::to_string(m_grid->ranks.back());
    }

    void wait_all() override {
        if (m_requests.empty()) return;
        const auto start = std::chrono::steady_clock::now();
        const int code = MPI_Waitall(static_cast<int>(m_requests.size()), m_requests.data(), MPI_STATUSES_IGNORE);
        m_counters.wait_seconds += seconds_since(start);
        m_requests.clear();
        check(code, "MPI_Waitall");
    }

    void broadcast(std::span<std::byte> data, int root) override {
        const Collective counted(*this, data.size());
        for (std::size_t offset = 0; offset < data.size(); offset += largest_piece) {
            const std::size_t size = std::min(largest_piece, data.size() - offset);
            check(MPI_Bcast(data.data() + offset, static_cast<int>(size), MPI_BYTE, root, m_comm), "MPI_Bcast");
        }
    }

    std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine) override { return gather_over(m_comm, m_size, mine); }

    std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine, std::span<const int> group) override {
        return gather_over(group_communicator(group), static_cast<int>(group.size()), mine);
    }

    std::vector<std::vector<std::byte>> gather(std::span<const std::byte> mine, int root) override {
        TESSERA_CHECK(mine.size() < static_cast<std::size_t>(INT_MAX), "a rank's share of a gather is limited to 2 GiB, got " << mine.size());
        const Collective counted(*this, mine.size());
        const int my_size = static_cast<int>(mine.size());
        const bool is_root = m_rank == root;
        std::vector<int> sizes(is_root ? static_cast<std::size_t>(m_size) : 0), offsets(sizes.size());
        check(MPI_Gather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, m_comm), "MPI_Gather");
        long long total = 0;
        for (std::size_t r = 0; r < sizes.size(); ++r) {
            offsets[r] = static_cast<int>(total);
            total += sizes[r];
        }
        TESSERA_CHECK(total < INT_MAX, "a gather on one rank is limited to 2 GiB, got " << total << " bytes");
        std::vector<std::byte> all(static_cast<std::size_t>(total));
        check(MPI_Gatherv(mine.data(), my_size, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, root, m_comm), "MPI_Gatherv");
        std::vector<std::vector<std::byte>> per_rank(sizes.size());
        for (std::size_t r = 0; r < sizes.size(); ++r) per_rank[r].assign(all.begin() + offsets[r], all.begin() + offsets[r] + sizes[r]);
        return per_rank;
    }

    void all_reduce_sum(std::span<float> values) override {
        const Collective counted(*this, values.size_bytes());
        for (std::size_t offset = 0; offset < values.size(); offset += largest_piece / sizeof(float)) {
            const std::size_t count = std::min(largest_piece / sizeof(float), values.size() - offset);
            check(MPI_Allreduce(MPI_IN_PLACE, values.data() + offset, static_cast<int>(count), MPI_FLOAT, MPI_SUM, m_comm), "MPI_Allreduce");
        }
    }

    void all_reduce_min(std::span<std::int64_t> values) override {
        const Collective counted(*this, values.size_bytes());
        check(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_INT64_T, MPI_MIN, m_comm), "MPI_Allreduce");
    }

    void barrier() override {
        const Collective counted(*this, 0);
        check(MPI_Barrier(m_comm), "MPI_Barrier");
    }

private:
    // Every member's bytes over `comm` (of `size` ranks), indexed by rank in it.
    std::vector<std::vector<std::byte>> gather_over(MPI_Comm comm, int size, std::span<const std::byte> mine) {
        TESSERA_CHECK(mine.size() < static_cast<std::size_t>(INT_MAX), "a rank's share of a gather is limited to 2 GiB, got " << mine.size());
        const Collective counted(*this, mine.size());
        const int my_size = static_cast<int>(mine.size());
        std::vector<int> sizes(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
        check(MPI_Allgather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, comm), "MPI_Allgather");
        long long total = 0;
        for (int r = 0; r < size; ++r) {
            offsets[static_cast<std::size_t>(r)] = static_cast<int>(total);
            total += sizes[static_cast<std::size_t>(r)];
        }
        TESSERA_CHECK(total < INT_MAX, "a gather over " << size << " ranks is limited to 2 GiB, got " << total << " bytes");
        std::vector<std::byte> all(static_cast<std::size_t>(total));
        check(MPI_Allgatherv(mine.data(), my_size, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, comm), "MPI_Allgatherv");
        std::vector<std::vector<std::byte>> per_rank(static_cast<std::size_t>(size));
        for (int r = 0; r < size; ++r) {
            const auto begin = all.begin() + offsets[static_cast<std::size_t>(r)];
            per_rank[static_cast<std::size_t>(r)].assign(begin, begin + sizes[static_cast<std::size_t>(r)]);
        }
        return per_rank;
    }

    // The communicator of a group of ranks (ascending, this one among them): MPI_Comm_create_group is
    // collective over the members only, so ranks outside the group go on undisturbed. Kept for the job.
    MPI_Comm group_communicator(std::span<const int> group) {
        TESSERA_ASSERT(std::is_sorted(group.begin(), group.end()) && std::binary_search(group.begin(), group.end(), m_rank),
                       "a group lists its ranks in order, this rank (" << m_rank << ") among them");
        if (static_cast<int>(group.size()) == m_size) return m_comm;
        std::vector<int> key(group.begin(), group.end());
        if (const auto found = m_groups.find(key); found != m_groups.end()) return found->second;
        MPI_Group everyone = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
        check(MPI_Comm_group(m_comm, &everyone), "MPI_Comm_group");
        check(MPI_Group_incl(everyone, static_cast<int>(key.size()), key.data(), &members), "MPI_Group_incl");
        MPI_Comm comm = MPI_COMM_NULL;
        const int code = MPI_Comm_create_group(m_comm, members, 0, &comm);
        MPI_Group_free(&members);
        MPI_Group_free(&everyone);
        check(code, "MPI_Comm_create_group");
        check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
        m_groups.emplace(std::move(key), comm);
        return comm;
    }

    // Halo messages to or from a rank of this rank's grid go over the Cartesian communicator, addressed by
    // the peer's rank in it; everything else over the world. (Messages of one tag between two ranks stay
    // on one communicator, so they still match in posting order.)
    std::pair<MPI_Comm, int> route(int peer, mesh::MessageTag tag) const {
        const bool halo = tag == mesh::MessageTag::ForwardHalo || tag == mesh::MessageTag::BackwardHalo;
        if (halo && m_grid) {  // a member's rank in the grid is its position among the (ascending) members
            const auto found = std::lower_bound(m_grid->ranks.begin(), m_grid->ranks.end(), peer);
            if (found != m_grid->ranks.end() && *found == peer) return {m_grid_comm, static_cast<int>(found - m_grid->ranks.begin())};
        }
        return {m_comm, peer};
    }

    // One request per piece of at most 1 GiB (at least one, for an empty message: both sides split alike).
    template <class Post>
    void post_pieces(std::size_t bytes, Post&& post) {
        for (std::size_t offset = 0; offset == 0 || offset < bytes; offset += largest_piece) {
            MPI_Request request;
            post(offset, static_cast<int>(std::min(largest_piece, bytes - offset)), &request);
            m_requests.push_back(request);
        }
    }

    // Counts a collective and its time, whatever way it leaves.
    struct Collective {
        Collective(MpiTransport& transport, std::size_t bytes) : owner(transport), start(std::chrono::steady_clock::now()) {
            ++owner.m_counters.collectives;
            owner.m_counters.collective_bytes += static_cast<std::int64_t>(bytes);
        }
        ~Collective() { owner.m_counters.collective_seconds += seconds_since(start); }
        Collective(const Collective&) = delete;
        Collective& operator=(const Collective&) = delete;
        MpiTransport& owner;
        std::chrono::steady_clock::time_point start;
    };

    MPI_Comm m_comm = MPI_COMM_NULL;
    int m_rank = 0, m_size = 1;
    std::string m_host;
    std::vector<MPI_Request> m_requests;
    std::map<std::vector<int>, MPI_Comm> m_groups;  // group communicators, by their ranks
    // Cartesian communicators by (ranks, dims), made on first use and kept: meshes made one after another
    // on this transport may each use one.
    std::map<std::pair<std::vector<int>, std::vector<int>>, MPI_Comm> m_grids;
    MPI_Comm m_grid_comm = MPI_COMM_NULL;           // the current mesh's, for this rank's replica (use_grid)
    std::optional<mesh::RankGrid> m_grid;           // the current mesh's (use_grid), its ranks ascending
};

}  // namespace

Session::Session(int& argc, char**& argv) {
    int provided = 0;
    check(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    TESSERA_CHECK(provided >= MPI_THREAD_FUNNELED,
                  "the MPI library offers no threads beside MPI calls (MPI_THREAD_FUNNELED); the mesh runs its cores on host threads");
}

Session::~Session() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

int Session::rank() const {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

int Session::num_ranks() const {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
}

bool launched_by_mpi_launcher() {
    for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_ID"}) {
        if (std::getenv(variable)) return true;
    }
    return false;
}

std::shared_ptr<mesh::Transport> make_transport() { return std::make_shared<MpiTransport>(); }

void abort_job(int exit_code) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
}

}  // namespace tessera::mpi
