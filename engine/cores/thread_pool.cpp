#include "cores/thread_pool.hpp"

#include "core/error.hpp"
#include "ops/dnnl_support.hpp"

#include <chrono>

namespace tessera::cores {

namespace {

// How long a thread polls for the next phase (or the end of this one) before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(200);

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

void ThreadPool::run_tasks() {
    while (true) {
        const std::int64_t index = m_next.fetch_add(1);
        if (index >= m_count) return;
        try {
            (*m_task)(index);
        } catch (...) {
            std::lock_guard lock(m_mutex);
            if (!m_error) m_error = std::current_exception();
        }
        if (m_finished.fetch_add(1) + 1 == m_count) {
            std::lock_guard lock(m_mutex);  // the caller may be about to sleep on m_done
            m_done.notify_all();
        }
    }
}

void ThreadPool::run(std::int64_t count, const std::function<void(std::int64_t)>& task) {
    if (count <= 0) return;
    const SingleThreadedKernels single;
    {
        std::lock_guard lock(m_mutex);
        m_task = &task;
        m_count = count;
        m_error = nullptr;
        m_finished = 0;
        m_next = 0;
        m_generation.fetch_add(1);
    }
    m_wake.notify_all();
    run_tasks();
    if (!spin_until([&] { return m_finished.load() == m_count; })) {
        std::unique_lock lock(m_mutex);
        m_done.wait(lock, [&] { return m_finished.load() == m_count; });
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
    while (true) {
        if (!spin_until([&] { return m_stop.load() || m_generation.load() != seen; })) {
            std::unique_lock lock(m_mutex);
            m_wake.wait(lock, [&] { return m_stop.load() || m_generation.load() != seen; });
        }
        if (m_stop) return;
        {
            std::lock_guard lock(m_mutex);  // m_task and m_count are published under the lock
            seen = m_generation.load();
        }
        run_tasks();
    }
}

}  // namespace tessera::cores
