#include "cores/thread_pool.hpp"

#include "core/error.hpp"
#include "ops/dnnl_support.hpp"

namespace tessera::cores {

ThreadPool::ThreadPool(int num_threads) {
    TESSERA_CHECK(num_threads >= 1, "a thread pool needs at least one thread, got " << num_threads);
    for (int i = 0; i < num_threads; ++i) m_threads.emplace_back([this] { work(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(m_mutex);
        m_stop = true;
    }
    m_wake.notify_all();
    for (std::thread& thread : m_threads) thread.join();
}

void ThreadPool::run(std::int64_t count, const std::function<void(std::int64_t)>& task) {
    if (count <= 0) return;
    std::unique_lock lock(m_mutex);
    m_task = &task;
    m_count = count;
    m_next = 0;
    m_finished = 0;
    m_error = nullptr;
    ++m_generation;
    m_wake.notify_all();
    m_done.wait(lock, [&] { return m_finished == m_count; });
    m_task = nullptr;
    if (m_error) std::rethrow_exception(m_error);
}

void ThreadPool::work() {
    ops::set_num_threads(1);  // this thread's OpenMP team: itself
    std::uint64_t seen = 0;
    std::unique_lock lock(m_mutex);
    while (true) {
        m_wake.wait(lock, [&] { return m_stop || (m_generation != seen && m_task && m_next < m_count); });
        if (m_stop) return;
        while (m_task && m_next < m_count) {
            const std::int64_t index = m_next++;
            const auto* task = m_task;
            lock.unlock();
            try {
                (*task)(index);
            } catch (...) {
                std::lock_guard error_lock(m_mutex);
                if (!m_error) m_error = std::current_exception();
            }
            lock.lock();
            if (++m_finished == m_count) m_done.notify_all();
        }
        seen = m_generation;
    }
}

}  // namespace tessera::cores
