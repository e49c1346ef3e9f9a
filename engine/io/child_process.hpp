// Internal to engine/io: running a third-party reader (GDCM, HDF5) in a forked child, so that a damaged
// file that crashes the library (an assertion, a segfault, a runaway allocation) ends the child, not the
// program, and is reported as the damage it is.
//
//   const ChildOutcome outcome = run_in_child([&](const auto& send, std::int64_t& progress) {
//       send('T', parse(file));                            // frames of (kind, bytes) to the parent
//   }, /*seconds*/ 60, /*memory_allowance*/ 1 << 30, "HDF5");
//   if (!outcome.finished) TESSERA_REJECT(quoted(file) << " cannot be read: " << outcome.how_it_ended);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::io_detail {

// Anonymous memory shared with a child forked after it is made (a decoded volume, a progress counter).
class SharedMemory {
public:
    explicit SharedMemory(std::size_t bytes);
    ~SharedMemory();
    SharedMemory(const SharedMemory&) = delete;
    SharedMemory& operator=(const SharedMemory&) = delete;
    void* data() const { return m_data; }

private:
    std::size_t m_bytes;
    void* m_data;
};

// What a child sent: frames of (kind, bytes), and how it ended.
struct ChildOutcome {
    std::vector<std::pair<char, std::string>> frames;
    bool finished = false;     // exited normally after sending its last frame
    std::string how_it_ended;  // "GDCM stopped on it (signal 6, SIGABRT: an assertion failed inside GDCM)", …
    std::int64_t progress = -1;  // the index of the item it was working on (shared counter)
};

// Runs work(send, progress) in a child. `send(kind, bytes)` writes one frame to the parent; `progress` is
// a counter in shared memory the child sets to the item it starts on. `seconds` bounds the child's time,
// `memory_allowance` how far it may grow; `library` names the reader in messages. A tessera::Error the
// work throws comes back as a frame 'E' (bad input) or 'I' (internal), running out of the allowance as
// 'M'; the last frame of a child that finished is '.'.
ChildOutcome run_in_child(const std::function<void(const std::function<void(char, const std::string&)>&, std::int64_t&)>& work,
                          double seconds, std::uint64_t memory_allowance, const std::string& library);

}  // namespace tessera::io_detail
