// ThreadPool: the host threads that run the simulated cores' work, one phase at a time.
//
// run(count, task) calls task(i) for i in [0, count) spread over the pool's threads — the calling
// thread is one of them; task i on thread i mod T unless that thread is late, so a simulated core
// stays on one host core from phase to phase — and returns when every call has finished: a barrier per phase, as the
// cores of a device step together between exchanges. A step has a few hundred short phases, so
// threads spin for up to 2 ms for the next one before they sleep (waking a sleeping thread cost more
// than a small phase). Tasks run oneDNN single-threaded: the parallelism is across cores, and an OpenMP
// team per thread would only fight for the same host cores. A thread whose tasks are done helps the
// loops the others' tasks offer (core/loop_helpers.hpp) until the phase ends: one vCPU running slower
// for a while then costs part of a core's kernel rather than the whole of it.
//
//   ThreadPool pool(2);
//   pool.run(num_cores, [&](std::int64_t core) { executors[core]->forward_node(node); });
#pragma once

#include "core/loop_helpers.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::mesh {

class ThreadPool final : private LoopHelpers {
public:
    explicit ThreadPool(int num_threads);  // threads that run tasks, the caller included
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int num_threads() const { return static_cast<int>(m_workers.size()) + 1; }
    // Runs task(0) … task(count − 1); rethrows the first exception a task threw, after all finished.
    void run(std::int64_t count, const std::function<void(std::int64_t)>& task);
    // Wakes sleeping threads to poll for the next phase: a step's first phase found them asleep after
    // the gap between steps and began with the caller alone.
    void wake_up();
    // Thread time spent so far running claims of other tasks' offered loops (the pool's lifetime, all
    // threads): busy time no task of the helper's own counts.
    double helping_seconds() const { return static_cast<double>(m_helping_nanoseconds.load(std::memory_order_relaxed)) * 1e-9; }

private:
    void work(int thread);
    void run_tasks(std::uint64_t generation, int thread);
    void offer(SharedLoop& loop) override;
    void withdraw(SharedLoop& loop) noexcept override;
    bool help_a_loop();  // helps one offered loop until it has nothing left; false when none was offered

    std::vector<std::thread> m_workers;
    std::mutex m_mutex;
    std::condition_variable m_wake, m_done;
    // The phase's task and size, written before the cursor announces the phase.
    const std::function<void(std::int64_t)>* m_task = nullptr;
    std::atomic<std::int64_t> m_count{0};  // atomic: a thread leaving the last phase may still read it
    // One cursor per thread: thread t's tasks are t, t + T, t + 2T, … (T threads), taken through its
    // cursor first and then, once those are gone, through the others' (so a late thread's tasks still
    // run). The same core on the same thread phase after phase keeps its tiles in that host core's
    // caches. Each cursor holds the phase generation (high 32 bits) and the next position in its list
    // (low 32) in one word: a thread still leaving the previous phase can never take a task of the next.
    struct alignas(64) Cursor {
        std::atomic<std::uint64_t> value{0};
    };
    std::vector<Cursor> m_cursors;
    std::atomic<std::int64_t> m_finished{0};
    std::atomic<bool> m_stop{false};
    std::atomic<std::uint64_t> m_wake_ups{0};
    // Loops the running tasks offered. `helping`: threads inside loop->help(); `closed`: nothing left to
    // claim, or withdrawn — no helper picks it up again.
    struct Offered {
        SharedLoop* loop;
        int helping;
        bool closed;
    };
    std::mutex m_offered_mutex;
    std::vector<Offered> m_offered;
    std::atomic<int> m_open_loops{0};  // offered and not closed: idle threads look only when non-zero
    std::atomic<std::int64_t> m_helping_nanoseconds{0};
    std::exception_ptr m_error;
};

}  // namespace tessera::mesh
