// The network between a job's ranks, measured for the cost model: a ping-pong between ranks 0 and 1 over
// message sizes (latency and bandwidth fitted), the all-gather of a few bytes over every rank (what each
// of a step's reductions waits), and an all-reduce sweep (the "fast" gradient reduction). Written into the
// host preset's measured figures as "cluster_*" by `mpirun -np K tessera-cli calibrate --network`, and
// read by predict_host_step for a mesh spread over ranks (cost/step_simulation.hpp).
#pragma once

#include "mesh/transport.hpp"

#include <map>
#include <string>
#include <vector>

namespace tessera::mesh {

struct NetworkCalibration {
    int ranks = 1;                       // measured over this many ranks
    double latency_seconds = 0;          // one 8-byte message, one way (half the ping-pong)
    double bandwidth_bytes_per_second = 0;  // from the largest messages' time beyond the latency
    double gather_seconds = 0;           // an all-gather of 16 bytes per rank
    // All-reduce (MPI's, f32 sum) of each size in bytes: seconds.
    std::vector<std::pair<double, double>> all_reduce_seconds;
    double noise_percent = 0;            // median over sizes of (median repeat / fastest − 1); figures are the fastest
    // The machine was too busy for the figures to mean much: the median twice the fastest, or the largest
    // messages no slower than the smallest (the bandwidth is then only a lower bound).
    bool too_noisy = false;
    // As the host preset's measured figures: cluster_ranks, cluster_latency_us, cluster_bandwidth_gbs,
    // cluster_gather_us, cluster_all_reduce_us_<bytes>.
    std::map<std::string, double> as_measured() const;
};

// Collective: every rank calls it (ranks other than 0 and 1 take part in the gathers and all-reduces).
// Needs at least 2 ranks.
NetworkCalibration measure_network(Transport& transport, bool quick = false);

}  // namespace tessera::mesh
