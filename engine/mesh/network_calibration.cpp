#include "mesh/network_calibration.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>

namespace tessera::mesh {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The fastest of `repeats` timed calls after two warm ones, and how much slower the median ran (percent):
// other work on the machine only adds time (a rank descheduled mid-message adds milliseconds to a
// microsecond message), so the fastest is the network's figure and the spread says how busy it was.
template <class Call>
std::pair<double, double> timed(int repeats, Call&& call) {
    std::vector<double> times;
    for (int r = 0; r < repeats + 2; ++r) {
        const auto start = Clock::now();
        call();
        if (r >= 2) times.push_back(seconds_since(start));
    }
    const double fastest = *std::min_element(times.begin(), times.end());
    const double middle = median(times);
    return {fastest, fastest > 0 ? (middle / fastest - 1.0) * 100.0 : 0.0};
}

}  // namespace

std::map<std::string, double> NetworkCalibration::as_measured() const {
    std::map<std::string, double> measured{{"cluster_ranks", ranks},
                                           {"cluster_latency_us", latency_seconds * 1e6},
                                           {"cluster_bandwidth_gbs", bandwidth_bytes_per_second * 1e-9},
                                           {"cluster_gather_us", gather_seconds * 1e6},
                                           {"cluster_noise_percent", noise_percent}};
    for (const auto& [bytes, seconds] : all_reduce_seconds) {
        measured["cluster_all_reduce_us_" + std::to_string(static_cast<long long>(bytes))] = seconds * 1e6;
    }
    return measured;
}

NetworkCalibration measure_network(Transport& transport, bool quick) {
    TESSERA_CHECK(transport.num_ranks() >= 2, "measuring the network between ranks needs at least 2 of them; start it with mpirun -np 2 (or more)");
    const int repeats = quick ? 10 : 30;
    const int rank = transport.rank();
    NetworkCalibration result;
    result.ranks = transport.num_ranks();
    std::vector<double> spreads;

    // Ping-pong between ranks 0 and 1: a message there and back, half the round trip.
    const std::vector<std::size_t> sizes = quick ? std::vector<std::size_t>{8, 4 << 20} : std::vector<std::size_t>{8, 4096, 1 << 18, 1 << 20, 4 << 20};
    std::vector<double> one_way;
    for (const std::size_t size : sizes) {
        std::vector<std::byte> buffer(size);
        transport.barrier();
        const auto [round_trip, spread] = timed(repeats, [&] {
            if (rank == 0) {
                transport.post_send(1, MessageTag::PingPong, buffer);
                transport.wait_all();
                transport.post_receive(1, MessageTag::PingPong, buffer);
                transport.wait_all();
            } else if (rank == 1) {
                transport.post_receive(0, MessageTag::PingPong, buffer);
                transport.wait_all();
                transport.post_send(0, MessageTag::PingPong, buffer);
                transport.wait_all();
            }
        });
        // Rank 0's figures speak for the pair; every rank learns them.
        double figures[2] = {round_trip / 2, spread};
        transport.broadcast(std::as_writable_bytes(std::span(figures)), 0);
        one_way.push_back(figures[0]);
        spreads.push_back(figures[1]);
    }
    result.latency_seconds = one_way.front();
    const double extra = one_way.back() - one_way.front();
    if (extra > 0.05 * one_way.back()) {
        result.bandwidth_bytes_per_second = static_cast<double>(sizes.back() - sizes.front()) / extra;
    } else {
        // The largest message took no longer than the smallest: the ranks waited for the scheduler, not
        // the network (a busy machine). Its whole time bounds the bandwidth from below.
        result.bandwidth_bytes_per_second = static_cast<double>(sizes.back()) / one_way.back();
        result.too_noisy = true;
    }

    // What a reduction phase waits: an all-gather of 16 bytes per rank.
    {
        std::vector<std::byte> mine(16);
        transport.barrier();
        const auto [seconds, spread] = timed(repeats, [&] { transport.all_gather(mine); });
        double figures[2] = {seconds, spread};
        transport.broadcast(std::as_writable_bytes(std::span(figures)), 0);
        result.gather_seconds = figures[0];
        spreads.push_back(figures[1]);
    }
    // The library's all-reduce over sizes (the fast gradient reduction).
    const std::vector<std::size_t> reduce_sizes = quick ? std::vector<std::size_t>{1 << 20} : std::vector<std::size_t>{4096, 1 << 18, 1 << 20, 4 << 20};
    for (const std::size_t bytes : reduce_sizes) {
        std::vector<float> values(bytes / sizeof(float), 1.0f);
        transport.barrier();
        const auto [seconds, spread] = timed(repeats, [&] { transport.all_reduce_sum(values); });
        double figures[2] = {seconds, spread};
        transport.broadcast(std::as_writable_bytes(std::span(figures)), 0);
        result.all_reduce_seconds.emplace_back(static_cast<double>(bytes), figures[0]);
        spreads.push_back(figures[1]);
    }
    result.noise_percent = median(spreads);
    if (result.noise_percent > 100.0) result.too_noisy = true;
    return result;
}

}  // namespace tessera::mesh
