#include "mesh/thread_pool.hpp"

#include "core/error.hpp"
#include "ops/dnnl_support.hpp"

#include <chrono>

namespace tessera::mesh {

namespace {

// How long a thread polls for the next phase (or the end of this one) before it sleeps. The gaps
// between phases (the driver's reductions, halo bookkeeping) often exceed 200 µs, and a sleeping thread
// woke late — under a hypervisor its idle vCPU must be rescheduled — while the caller took its tasks
// alone: the 2D U-Net on 4 cores and 2 threads (10 steps, Xeon model 207 VM) lost 37 ms of thread time a
// step to waiting with 200 µs, 4.8 ms with 2 ms (phases' wall time × 2 − their tasks' time).
constexpr auto kSpin = std::chrono::microseconds(2000);

template <class Ready>
bool spin_until(Ready&& ready) {
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    while (!ready()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::yield();
    }
    return true;
}

// oneDNN single-threaded while this thread runs core tasks; the caller's setting comes back after.
class SingleThreadedKernels {
public:
    SingleThreadedKernels() : m_saved(ops::num_threads()) { ops::set_num_threads(1); }
    ~SingleThreadedKernels() { ops::set_num_threads(m_saved); }
    SingleThreadedKernels(const SingleThreadedKernels&) = delete;
    SingleThreadedKernels& operator=(const SingleThreadedKernels&) = delete;

private:
    int m_saved;
};

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
    TESSERA_CHECK(num_threads >= 1, "a thread pool needs at least one thread, got " << num_threads);
    for (int i = 1; i < num_threads; ++i) m_workers.emplace_back([this] { work(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(m_mutex);
        m_stop = true;
    }
    m_wake.notify_all();
    for (std::thread& worker : m_workers) worker.join();
}

// The cursor's index while a new phase is being set up: no task can be taken.
constexpr std::uint64_t kSettingUp = 0xffffffffu;

void ThreadPool::run_tasks(std::uint64_t generation) {
    while (true) {
        std::uint64_t cursor = m_cursor.load(std::memory_order_acquire);
        if ((cursor >> 32) != generation) return;  // a later phase began: not ours
        const std::uint64_t index = cursor & 0xffffffffu;
        if (index == kSettingUp) {
            std::this_thread::yield();
            continue;
        }
        // m_count belongs to this generation: the cursor was published after it was written, and the
        // phase cannot end (so the next cannot begin) while an index below it is untaken.
        if (static_cast<std::int64_t>(index) >= m_count.load(std::memory_order_relaxed)) return;
        if (!m_cursor.compare_exchange_weak(cursor, cursor + 1, std::memory_order_acq_rel)) continue;
        const std::int64_t count = m_count.load(std::memory_order_relaxed);  // stable until this task is counted
        try {
            (*m_task)(static_cast<std::int64_t>(index));
        } catch (...) {
            std::lock_guard lock(m_mutex);
            if (!m_error) m_error = std::current_exception();
        }
        if (m_finished.fetch_add(1) + 1 == count) {
            std::lock_guard lock(m_mutex);  // the caller may be about to sleep on m_done
            m_done.notify_all();
        }
    }
}

void ThreadPool::run(std::int64_t count, const std::function<void(std::int64_t)>& task) {
    if (count <= 0) return;
    TESSERA_CHECK(count < static_cast<std::int64_t>(kSettingUp), "a phase has fewer than 2^32 - 1 tasks, got " << count);
    const SingleThreadedKernels single;
    std::uint64_t generation = 0;
    {
        std::lock_guard lock(m_mutex);
        // First close the previous phase's cursor: a thread that read it just before can no longer
        // take an index (its compare-exchange fails), whatever m_count becomes next.
        generation = ((m_cursor.load() >> 32) + 1) & 0xffffffffu;
        m_cursor.store((generation << 32) | kSettingUp, std::memory_order_release);
        m_task = &task;
        m_count.store(count, std::memory_order_relaxed);
        m_error = nullptr;
        m_finished = 0;
        m_cursor.store(generation << 32, std::memory_order_release);
    }
    m_wake.notify_all();
    run_tasks(generation);
    if (!spin_until([&] { return m_finished.load() == count; })) {
        std::unique_lock lock(m_mutex);
        m_done.wait(lock, [&] { return m_finished.load() == count; });
    }
    std::exception_ptr error;
    {
        std::lock_guard lock(m_mutex);
        m_task = nullptr;
        error = m_error;
    }
    if (error) std::rethrow_exception(error);
}

void ThreadPool::work() {
    ops::set_num_threads(1);  // this thread's OpenMP team: itself
    std::uint64_t seen = 0;
    auto announced = [&] { return m_stop.load() || (m_cursor.load(std::memory_order_acquire) >> 32) != seen; };
    while (true) {
        if (!spin_until(announced)) {
            std::unique_lock lock(m_mutex);
            m_wake.wait(lock, announced);
        }
        if (m_stop) return;
        seen = m_cursor.load(std::memory_order_acquire) >> 32;
        run_tasks(seen);
    }
}

}  // namespace tessera::mesh
