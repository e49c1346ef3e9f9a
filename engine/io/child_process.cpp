#include "io/child_process.hpp"

#include "core/error.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <new>
#include <sstream>

// Under a sanitizer (fuzzing): lets a child end without the fuzzer's death report (weak: absent otherwise).
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace tessera::io_detail {

SharedMemory::SharedMemory(std::size_t bytes) : m_bytes(std::max<std::size_t>(bytes, 1)) {
    m_data = ::mmap(nullptr, m_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    TESSERA_CHECK(m_data != MAP_FAILED, "cannot map " << m_bytes << " bytes of memory shared with a reader process: " << std::strerror(errno)
                                                      << ". Free memory, or read a smaller volume.");
}

SharedMemory::~SharedMemory() { ::munmap(m_data, m_bytes); }

ChildOutcome run_in_child(const std::function<void(const std::function<void(char, const std::string&)>&, std::int64_t&)>& work,
                          double seconds, std::uint64_t memory_allowance, const std::string& library) {
    SharedMemory control(sizeof(std::int64_t));
    auto* progress = static_cast<std::int64_t*>(control.data());
    *progress = -1;
    int pipe_ends[2];
    TESSERA_CHECK(::pipe(pipe_ends) == 0, "cannot start the " << library << " reader: pipe() failed: " << std::strerror(errno));
    std::cout.flush();
    std::fflush(nullptr);
    const pid_t child = ::fork();
    if (child < 0) {
        ::close(pipe_ends[0]);
        ::close(pipe_ends[1]);
        TESSERA_REJECT("cannot start the " << library << " reader: fork() failed: " << std::strerror(errno) << ". Free memory and try again.");
    }
    if (child == 0) {
        ::close(pipe_ends[0]);
        // The child dies by the signal, as the parent expects, rather than through handlers it inherited
        // (a fuzzer's or a sanitizer's would report the library's abort as the program's crash).
        for (int signal : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(signal, SIG_DFL);
        // Likewise a sanitizer's report of the library's memory use ends the child without the fuzzer's callback.
        if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(nullptr);
        // GDCM and HDF5 allocate what a damaged length declares before they read: the child may grow by its
        // allowance only, so such an allocation fails (std::bad_alloc, or null) instead of taking the machine's memory.
        std::ifstream statm("/proc/self/statm");
        std::uint64_t mapped_pages = 0;
        if (statm >> mapped_pages) {
            const std::uint64_t limit = mapped_pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) + memory_allowance;
            rlimit address_space{};
            if (::getrlimit(RLIMIT_AS, &address_space) == 0 && (address_space.rlim_max == RLIM_INFINITY || address_space.rlim_max > limit)) {
                address_space.rlim_cur = limit;
                ::setrlimit(RLIMIT_AS, &address_space);
            }
        }
        const int out = pipe_ends[1];
        const auto write_all = [out](const char* bytes, std::size_t count) {
            while (count > 0) {
                const ssize_t written = ::write(out, bytes, count);
                if (written <= 0) {
                    if (written < 0 && errno == EINTR) continue;
                    ::_exit(3);
                }
                bytes += written;
                count -= static_cast<std::size_t>(written);
            }
        };
        const auto send = [&](char kind, const std::string& bytes) {
            const std::uint64_t length = bytes.size();
            write_all(&kind, 1);
            write_all(reinterpret_cast<const char*>(&length), sizeof length);
            write_all(bytes.data(), bytes.size());
        };
        try {
            work(send, *progress);
        } catch (const Error& error) {
            send(error.is_internal() ? 'I' : 'E', error.what());
        } catch (const std::bad_alloc&) {
            std::ostringstream text;
            text << "cannot be read: " << library << " asked for more memory than the file could need (over " << (memory_allowance >> 20)
                 << " MiB), so a length in it is damaged. Replace it with an intact copy.";
            send('M', text.str());
        } catch (const std::exception& error) {
            send('I', error.what());
        }
        send('.', "");
        ::close(out);
        ::_exit(0);
    }
    ::close(pipe_ends[1]);
    ChildOutcome outcome;
    std::string received;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    bool timed_out = false;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        pollfd watched{pipe_ends[0], POLLIN, 0};
        const int ready = ::poll(&watched, 1, static_cast<int>(std::min<long long>(left, 1000)));
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) continue;
        char chunk[65536];
        const ssize_t count = ::read(pipe_ends[0], chunk, sizeof chunk);
        if (count < 0 && errno == EINTR) continue;
        if (count <= 0) break;
        received.append(chunk, static_cast<std::size_t>(count));
    }
    ::close(pipe_ends[0]);
    if (timed_out) ::kill(child, SIGKILL);
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    outcome.progress = *progress;
    // Frames: kind, u64 length, bytes.
    std::size_t at = 0;
    while (received.size() - at >= 9) {
        std::uint64_t length = 0;
        std::memcpy(&length, received.data() + at + 1, sizeof length);
        if (received.size() - at - 9 < length) break;
        outcome.frames.emplace_back(received[at], received.substr(at + 9, static_cast<std::size_t>(length)));
        at += 9 + static_cast<std::size_t>(length);
    }
    outcome.finished = !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0 && !outcome.frames.empty() &&
                       outcome.frames.back().first == '.';
    if (timed_out) {
        std::ostringstream text;
        text << "it did not finish within " << std::lround(seconds) << " s and was stopped";
        outcome.how_it_ended = text.str();
    } else if (WIFSIGNALED(status)) {
        const int signal = WTERMSIG(status);
        outcome.how_it_ended = library + " stopped on it (signal " + std::to_string(signal) +
                               (signal == SIGABRT ? ", SIGABRT: an assertion failed inside " + library + ")" : signal == SIGSEGV ? ", SIGSEGV)" : ")");
    } else if (!outcome.finished) {
        outcome.how_it_ended = "the reader ended unexpectedly (exit status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")";
    }
    return outcome;
}


}  // namespace tessera::io_detail
