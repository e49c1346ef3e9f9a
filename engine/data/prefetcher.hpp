// Prefetcher: prepares training batches on a background thread while the caller's step runs.
//
//   Prefetcher prefetcher(*dataset, /*first_index=*/resumed_step, /*depth=*/2);
//   for (int step = 0; step < num_steps; ++step) {
//       Batch batch = prefetcher.next();   // batch number resumed_step + step, as training_batch() gives it
//       ...
//   }
//
// Batches come out in index order and are exactly dataset.training_batch(index): prefetching changes
// when a batch is made, never what it holds. An exception in the producer is rethrown by the next()
// that would have returned that batch (the batches before it are still delivered). The destructor stops
// and joins the thread promptly, even when the queue is full; at most the one batch in flight finishes.
#pragma once

#include "data/dataset.hpp"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

namespace tessera::data {

class Prefetcher {
public:
    // depth: batches prepared ahead (≥ 1). `dataset` must outlive the prefetcher.
    Prefetcher(const Dataset& dataset, std::int64_t first_index, int depth = 2);
    ~Prefetcher();
    Prefetcher(const Prefetcher&) = delete;
    Prefetcher& operator=(const Prefetcher&) = delete;

    Batch next();                       // blocks until batch next_index() is ready
    std::int64_t next_index() const;    // the index the next call to next() returns

private:
    void produce();

    const Dataset& m_dataset;
    const int m_depth;
    mutable std::mutex m_mutex;
    std::condition_variable m_changed;  // a batch was queued or taken, or stop was asked
    std::deque<Batch> m_ready;          // batches next_index(), next_index() + 1, ...
    std::exception_ptr m_failure;       // from the batch after the last one in m_ready
    std::int64_t m_next_index;          // of m_ready.front()
    bool m_stop = false;
    std::thread m_thread;               // last: starts after the members it reads
};

}  // namespace tessera::data
