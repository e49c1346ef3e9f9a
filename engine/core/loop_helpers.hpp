// Idle host threads lent to a running task's loop.
//
// The mesh's thread pool (mesh/thread_pool.hpp) runs one task per simulated core and a phase ends when
// its slowest thread does. Under a hypervisor one vCPU often runs slower than the other for seconds
// (fma_peak pinned to each of a Xeon model 207 VM's two: 137 against 176 GFLOP/s), and a thread whose
// tasks are done would wait for the other's last core — 7–10 % of the 3D U-Net's partitioned step.
// Instead it helps: a kernel's loop that may be split (ops/stolen_ranges.hpp, ops/fixed_sums.hpp,
// fixed_groups.hpp) offers its remaining iterations to the pool, the task's own thread takes them from
// the front and a helper from the back, and the loop returns once every claim has finished.
//
//   if (LoopHelpers* helpers = loop_helpers()) for_shared_range(*helpers, planes, 1, body);
//
// Which thread runs an iteration depends on timing, so a loop offered here must give the same results
// on any thread (each iteration writes its own outputs, or sums go by fixed groups).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <type_traits>

namespace tessera {

// A loop whose remaining iterations other threads may run.
class SharedLoop {
public:
    // Runs one claim of the remaining iterations on the calling thread; false when none was left.
    virtual bool help() noexcept = 0;

protected:
    ~SharedLoop() = default;
};

// Threads that help offered loops: a thread pool, for the tasks it runs.
class LoopHelpers {
public:
    virtual void offer(SharedLoop& loop) = 0;
    // After this returns no helper is inside loop.help() and none will enter it.
    virtual void withdraw(SharedLoop& loop) noexcept = 0;

protected:
    ~LoopHelpers() = default;
};

namespace detail {
inline thread_local LoopHelpers* t_loop_helpers = nullptr;
}

// The helpers of the task this thread is running; null outside a pool's task (loops then use OpenMP).
inline LoopHelpers* loop_helpers() { return detail::t_loop_helpers; }

// Sets this thread's helpers for a scope (the pool, around each task).
class ScopedLoopHelpers {
public:
    explicit ScopedLoopHelpers(LoopHelpers* helpers) : m_saved(detail::t_loop_helpers) { detail::t_loop_helpers = helpers; }
    ~ScopedLoopHelpers() { detail::t_loop_helpers = m_saved; }
    ScopedLoopHelpers(const ScopedLoopHelpers&) = delete;
    ScopedLoopHelpers& operator=(const ScopedLoopHelpers&) = delete;

private:
    LoopHelpers* m_saved;
};

// What is left of a range of iterations: its front (low 32 bits) and back (high 32) in one word, so that
// a claim from the front (the range's owner) and one from the back (a helper or thief) can never overlap.
// Also ops/stolen_ranges.hpp's per-thread ranges.
class ClaimableRange {
public:
    void reset(std::uint64_t begin, std::uint64_t end) { m_left.store(begin | (end << 32)); }

    // Up to `chunk` iterations from the front into [begin, end); false when none is left.
    bool claim_front(std::uint64_t chunk, std::uint64_t& begin, std::uint64_t& end) {
        std::uint64_t left = m_left.load();
        while (true) {
            const std::uint64_t front = left & 0xffffffffu, back = left >> 32;
            if (front >= back) return false;
            begin = front;
            end = std::min(back, front + chunk);
            if (m_left.compare_exchange_weak(left, end | (back << 32))) return true;
        }
    }

    // Up to `chunk` iterations from the back into [begin, end); false when none is left.
    bool claim_back(std::uint64_t chunk, std::uint64_t& begin, std::uint64_t& end) {
        std::uint64_t left = m_left.load();
        while (true) {
            const std::uint64_t front = left & 0xffffffffu, back = left >> 32;
            if (front >= back) return false;
            begin = back - std::min(back - front, chunk);
            end = back;
            if (m_left.compare_exchange_weak(left, front | (begin << 32))) return true;
        }
    }

private:
    std::atomic<std::uint64_t> m_left{0};
};

namespace detail {

// [0, count) in chunks: the owner claims from the front, helpers from the back.
template <class Body>
class SharedRange final : public SharedLoop {
public:
    SharedRange(std::int64_t count, std::int64_t chunk, Body& body) : m_chunk(static_cast<std::uint64_t>(chunk)), m_body(body) {
        m_left.reset(0, static_cast<std::uint64_t>(count));
    }

    void run_front() {
        std::uint64_t begin = 0, end = 0;
        while (m_left.claim_front(m_chunk, begin, end)) run(begin, end);
    }

    bool help() noexcept override {
        std::uint64_t begin = 0, end = 0;
        if (!m_left.claim_back(m_chunk, begin, end)) return false;
        run(begin, end);
        return true;
    }

    void rethrow() const {
        if (m_error) std::rethrow_exception(m_error);
    }

private:
    void run(std::uint64_t begin, std::uint64_t end) noexcept {
        try {
            m_body(static_cast<std::int64_t>(begin), static_cast<std::int64_t>(end));
        } catch (...) {
            const std::lock_guard lock(m_error_mutex);
            if (!m_error) m_error = std::current_exception();
        }
    }

    ClaimableRange m_left;
    const std::uint64_t m_chunk;
    Body& m_body;
    std::mutex m_error_mutex;
    std::exception_ptr m_error;  // the first a claim threw; rethrown on the owner's thread
};

}  // namespace detail

// body(begin, end) over [0, count) in chunks of `chunk`, on the calling thread and on whichever helpers
// are idle; returns once every chunk has run, rethrowing the first exception a chunk threw.
template <class Body>
void for_shared_range(LoopHelpers& helpers, std::int64_t count, std::int64_t chunk, Body&& body) {
    if (count <= 0) return;
    chunk = std::max<std::int64_t>(1, chunk);
    if (count > std::int64_t{0xffffffff}) {  // beyond the 32-bit halves of the claim word: alone
        for (std::int64_t begin = 0; begin < count; begin += chunk) body(begin, std::min(count, begin + chunk));
        return;
    }
    detail::SharedRange<std::remove_reference_t<Body>> range(count, chunk, body);
    helpers.offer(range);
    range.run_front();
    helpers.withdraw(range);
    range.rethrow();
}

}  // namespace tessera
