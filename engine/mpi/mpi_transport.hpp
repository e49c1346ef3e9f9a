// The mesh transport over MPI: one process per rank of MPI_COMM_WORLD, started by `mpirun -np K` or
// Slurm's `srun`. mpi.h stays inside the implementation; callers see mesh::Transport.
//
//   mpi::Session session(argc, argv);             // MPI_Init_thread … MPI_Finalize
//   auto transport = mpi::make_transport();       // MPI_COMM_WORLD, duplicated
//   mesh::CoreMesh cores(model, mesh_config, trainer_config, transport);
#pragma once

#include "mesh/transport.hpp"

#include <memory>

namespace tessera::mpi {

// MPI for the life of the object, with "funneled" threading: the mesh's host threads compute, only the
// thread that made the session calls MPI.
class Session {
public:
    Session(int& argc, char**& argv);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
    int rank() const;
    int num_ranks() const;
};

// Whether this process was started by an MPI launcher (mpirun, mpiexec, srun): the environment they set.
bool launched_by_mpi_launcher();

// The transport over MPI_COMM_WORLD (a duplicate: the mesh's messages stay apart from anything else's).
std::shared_ptr<mesh::Transport> make_transport();

// Ends every rank of the job with this exit code, now (a rank that failed alone would leave the others
// waiting in a collective).
[[noreturn]] void abort_job(int exit_code);

}  // namespace tessera::mpi
