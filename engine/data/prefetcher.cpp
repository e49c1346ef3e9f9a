#include "data/prefetcher.hpp"

namespace tessera::data {

Prefetcher::Prefetcher(const Dataset& dataset, std::int64_t first_index, int depth)
    : m_dataset(dataset), m_depth(depth), m_next_index(first_index) {
    TESSERA_CHECK(depth >= 1, "prefetch depth must be at least 1, got " << depth);
    TESSERA_CHECK(first_index >= 0, "the first batch index must be ≥ 0, got " << first_index);
    m_thread = std::thread([this] { produce(); });
}

Prefetcher::~Prefetcher() {
    {
        std::lock_guard lock(m_mutex);
        m_stop = true;
    }
    m_changed.notify_all();
    m_thread.join();
}

void Prefetcher::produce() {
    std::int64_t index = 0;
    {
        std::lock_guard lock(m_mutex);
        index = m_next_index;
    }
    while (true) {
        {
            std::unique_lock lock(m_mutex);
            m_changed.wait(lock, [&] { return m_stop || static_cast<int>(m_ready.size()) < m_depth; });
            if (m_stop) return;
        }
        // Made outside the lock: next() can hand out earlier batches meanwhile.
        try {
            Batch batch = m_dataset.training_batch(index);
            std::lock_guard lock(m_mutex);
            m_ready.push_back(std::move(batch));
        } catch (...) {
            std::lock_guard lock(m_mutex);
            m_failure = std::current_exception();
            m_changed.notify_all();
            return;  // nothing after a failed batch: next() rethrows once the earlier ones are taken
        }
        m_changed.notify_all();
        ++index;
    }
}

Batch Prefetcher::next() {
    std::unique_lock lock(m_mutex);
    m_changed.wait(lock, [&] { return !m_ready.empty() || m_failure; });
    if (m_ready.empty()) std::rethrow_exception(m_failure);
    Batch batch = std::move(m_ready.front());
    m_ready.pop_front();
    ++m_next_index;
    lock.unlock();
    m_changed.notify_all();
    return batch;
}

std::int64_t Prefetcher::next_index() const {
    std::lock_guard lock(m_mutex);
    return m_next_index;
}

}  // namespace tessera::data
