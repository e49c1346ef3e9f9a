#include "mesh/thread_pool.hpp"

#include "core/error.hpp"
#include "ops/dnnl_support.hpp"

#include <algorithm>
#include <chrono>

namespace tessera::mesh {

namespace {

// How long a thread polls for the next phase (or the end of this one) before it sleeps. The gaps
// between phases (the driver's reductions, halo bookkeeping) often exceed 200 µs, and a sleeping thread
// woke late — under a hypervisor its idle vCPU must be rescheduled — while the caller took its tasks
// alone: the 2D U-Net on 4 cores and 2 threads (10 steps, Xeon model 207 VM) lost 37 ms of thread time a
// step to waiting with 200 µs, 4.8 ms with 2 ms (phases' wall time × 2 − their tasks' time).
constexpr auto kSpin = std::chrono::microseconds(2000);

// Polls `ready` for up to kSpin, helping offered loops meanwhile (`help`: whether it found one; the
// time spent helping restarts the clock); false when it timed out.
template <class Ready, class Help>
bool spin_until(Ready&& ready, Help&& help) {
    auto deadline = std::chrono::steady_clock::now() + kSpin;
    while (!ready()) {
        if (help()) {
            deadline = std::chrono::steady_clock::now() + kSpin;
            continue;
        }
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

ThreadPool::ThreadPool(int num_threads) : m_cursors(static_cast<std::size_t>(std::max(num_threads, 1))) {
    TESSERA_CHECK(num_threads >= 1, "a thread pool needs at least one thread, got " << num_threads);
    for (int i = 1; i < num_threads; ++i) m_workers.emplace_back([this, i] { work(i); });
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

void ThreadPool::run_tasks(std::uint64_t generation, int thread) {
    const auto threads = static_cast<std::int64_t>(m_cursors.size());
    for (std::int64_t k = 0; k < threads; ++k) {  // its own list first, then the others'
        const std::int64_t owner = (thread + k) % threads;
        std::atomic<std::uint64_t>& cursor_of = m_cursors[static_cast<std::size_t>(owner)].value;
        while (true) {
            std::uint64_t cursor = cursor_of.load(std::memory_order_acquire);
            if ((cursor >> 32) != generation) return;  // a later phase began: not ours
            const std::uint64_t position = cursor & 0xffffffffu;
            if (position == kSettingUp) {
                std::this_thread::yield();
                continue;
            }
            // m_count belongs to this generation: the cursor was published after it was written, and the
            // phase cannot end (so the next cannot begin) while a task below it is untaken.
            const std::int64_t index = owner + static_cast<std::int64_t>(position) * threads;
            if (index >= m_count.load(std::memory_order_relaxed)) break;  // this list is taken
            if (!cursor_of.compare_exchange_weak(cursor, cursor + 1, std::memory_order_acq_rel)) continue;
            const std::int64_t count = m_count.load(std::memory_order_relaxed);  // stable until this task is counted
            try {
                const ScopedLoopHelpers helpers(threads > 1 ? this : nullptr);
                (*m_task)(index);
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
}

void ThreadPool::run(std::int64_t count, const std::function<void(std::int64_t)>& task) {
    if (count <= 0) return;
    TESSERA_CHECK(count < static_cast<std::int64_t>(kSettingUp), "a phase has fewer than 2^32 - 1 tasks, got " << count);
    const SingleThreadedKernels single;
    std::uint64_t generation = 0;
    {
        std::lock_guard lock(m_mutex);
        // First close the previous phase's cursors: a thread that read one just before can no longer
        // take a task (its compare-exchange fails), whatever m_count becomes next. Cursor 0, which
        // announces the phase to the workers, last: a worker that sees it finds every other closed too.
        generation = ((m_cursors[0].value.load() >> 32) + 1) & 0xffffffffu;
        for (auto cursor = m_cursors.rbegin(); cursor != m_cursors.rend(); ++cursor)
            cursor->value.store((generation << 32) | kSettingUp, std::memory_order_release);
        m_task = &task;
        m_count.store(count, std::memory_order_relaxed);
        m_error = nullptr;
        m_finished = 0;
        for (Cursor& cursor : m_cursors) cursor.value.store(generation << 32, std::memory_order_release);
    }
    m_wake.notify_all();
    run_tasks(generation, 0);
    if (!spin_until([&] { return m_finished.load() == count; }, [&] { return help_a_loop(); })) {
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

void ThreadPool::wake_up() {
    {
        const std::lock_guard lock(m_mutex);
        m_wake_ups.fetch_add(1);
    }
    m_wake.notify_all();
}

void ThreadPool::offer(SharedLoop& loop) {
    const std::lock_guard lock(m_offered_mutex);
    m_offered.push_back({&loop, 0, false});
    m_open_loops.fetch_add(1, std::memory_order_release);
}

void ThreadPool::withdraw(SharedLoop& loop) noexcept {
    std::unique_lock lock(m_offered_mutex);
    const auto find = [&] { return std::find_if(m_offered.begin(), m_offered.end(), [&](const Offered& o) { return o.loop == &loop; }); };
    auto offered = find();
    if (!offered->closed) {
        offered->closed = true;
        m_open_loops.fetch_sub(1, std::memory_order_relaxed);
    }
    while (offered->helping > 0) {  // a helper still runs a claim it took: at most one chunk
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
        offered = find();
    }
    m_offered.erase(offered);
}

bool ThreadPool::help_a_loop() {
    if (m_open_loops.load(std::memory_order_acquire) == 0) return false;
    SharedLoop* loop = nullptr;
    {
        const std::lock_guard lock(m_offered_mutex);
        const auto open = std::find_if(m_offered.begin(), m_offered.end(), [](const Offered& o) { return !o.closed; });
        if (open == m_offered.end()) return false;
        ++open->helping;
        loop = open->loop;
    }
    const auto start = std::chrono::steady_clock::now();
    while (loop->help()) {
    }
    m_helping_nanoseconds.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count(),
                                    std::memory_order_relaxed);
    const std::lock_guard lock(m_offered_mutex);
    // Still listed: its owner waits in withdraw() until `helping` is back to zero.
    Offered& offered = *std::find_if(m_offered.begin(), m_offered.end(), [&](const Offered& o) { return o.loop == loop; });
    --offered.helping;
    if (!offered.closed) {
        offered.closed = true;
        m_open_loops.fetch_sub(1, std::memory_order_relaxed);
    }
    return true;
}

void ThreadPool::work(int thread) {
    ops::set_num_threads(1);  // this thread's OpenMP team: itself
    std::uint64_t seen = 0, seen_wake_ups = 0;
    auto announced = [&] {
        return m_stop.load() || (m_cursors[0].value.load(std::memory_order_acquire) >> 32) != seen || m_wake_ups.load() != seen_wake_ups;
    };
    while (true) {
        if (!spin_until(announced, [&] { return help_a_loop(); })) {
            std::unique_lock lock(m_mutex);
            m_wake.wait(lock, announced);
        }
        if (m_stop) return;
        seen_wake_ups = m_wake_ups.load();
        const std::uint64_t generation = m_cursors[0].value.load(std::memory_order_acquire) >> 32;
        if (generation == seen) continue;  // woken ahead of a phase: poll for it
        seen = generation;
        run_tasks(seen, thread);
    }
}

}  // namespace tessera::mesh
