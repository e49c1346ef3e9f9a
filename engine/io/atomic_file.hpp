// Replacing a file so that a crash never leaves half of it.
//
// A checkpoint or a log written in place and interrupted (SIGKILL, power loss, a full disk) leaves a
// torn file, and a resumed run then fails to load it, or worse loads garbage. Here the bytes go to a
// temporary beside the target, `<name>.tmp.<pid>`, which is fsync()ed and then rename()d over the
// target; rename is atomic on POSIX file systems, so a reader sees the old file or the new one. The
// folder is fsync()ed last so the rename itself survives a power loss.
//
//   write_file_atomically("run/weights.safetensors", bytes);            // one buffer
//   write_file_atomically("run/log.csv", [&](FileSink& sink) {          // or streamed
//       for (const std::string& line : lines) sink.write(line);
//   });
//   remove_stale_temporaries("run");   // on resume: drops the *.tmp.<pid> of a killed process
//
// Errors (the folder is missing, the disk is full, the rename fails) throw tessera::Error naming the
// path and the system's reason; the temporary is removed and the old file is left as it was.
// Two threads of one process must not write the same path at the same time (they would share the
// temporary); different paths are fine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

namespace tessera::io {

// Where a streamed write_file_atomically puts its bytes; buffered, so small writes are cheap.
class FileSink {
public:
    virtual ~FileSink() = default;
    virtual void write(std::span<const std::byte> bytes) = 0;
    void write(std::string_view text) { write(std::as_bytes(std::span(text.data(), text.size()))); }
    virtual std::uint64_t num_bytes_written() const = 0;  // bytes
};

// The temporary write_file_atomically uses for `path` in this process: "<path>.tmp.<pid>".
std::filesystem::path temporary_path_for(const std::filesystem::path& path);

void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes);
// `writer` fills the file through the sink; if it throws, nothing is replaced and its error propagates.
void write_file_atomically(const std::filesystem::path& path, const std::function<void(FileSink&)>& writer);

// Deletes the files in `dir` (not its subfolders) named "<anything>.tmp.<pid>" whose process is gone,
// and those of this process that no write_file_atomically is writing now (left by an earlier process
// that had the same pid, which happens in containers). Files of live processes are kept. Returns the
// deleted paths; a missing folder has nothing to delete.
std::vector<std::filesystem::path> remove_stale_temporaries(const std::filesystem::path& dir);

}  // namespace tessera::io
