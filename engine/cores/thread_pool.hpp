// ThreadPool: the host threads that run the simulated cores' work, one phase at a time.
//
// run(count, task) calls task(i) for i in [0, count) spread over the pool's threads and returns when
// every call has finished — a barrier per phase, as the cores of a device step together between
// exchanges. Each worker runs oneDNN single-threaded: the parallelism is across cores, and an
// oversubscribed OpenMP team per worker would only fight for the same host cores.
//
//   ThreadPool pool(2);
//   pool.run(num_cores, [&](std::int64_t core) { executors[core]->forward_node(node); });
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::cores {

class ThreadPool {
public:
    explicit ThreadPool(int num_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int num_threads() const { return static_cast<int>(m_threads.size()); }
    // Runs task(0) … task(count − 1); rethrows the first exception a task threw, after all finished.
    void run(std::int64_t count, const std::function<void(std::int64_t)>& task);

private:
    void work();

    std::vector<std::thread> m_threads;
    std::mutex m_mutex;
    std::condition_variable m_wake, m_done;
    const std::function<void(std::int64_t)>* m_task = nullptr;
    std::int64_t m_count = 0, m_next = 0, m_finished = 0;
    std::uint64_t m_generation = 0;
    bool m_stop = false;
    std::exception_ptr m_error;
};

}  // namespace tessera::cores
