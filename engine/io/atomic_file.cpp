#include "io/atomic_file.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <system_error>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tessera::io {

namespace fs = std::filesystem;

namespace {

std::string errno_text(int error) {
    return std::generic_category().message(error);
}

// Temporaries this process is writing now, by inode (a path can be spelled many ways), so that
// remove_stale_temporaries spares them. The mutex is held from open() to registration, and from stat()
// to unlink() when cleaning, so a cleanup never removes a file that is being created.
struct FileId {
    dev_t device = 0;
    ino_t inode = 0;
    auto operator<=>(const FileId&) const = default;
};
std::mutex g_in_flight_mutex;
std::set<FileId> g_in_flight;

// The temporary's file descriptor; closing and unlinking happen here so every error path cleans up.
class TemporaryFile final : public FileSink {
public:
    TemporaryFile(fs::path target, fs::path temporary) : m_target(std::move(target)), m_path(std::move(temporary)) {
        m_buffer.reserve(k_buffer_size);  // before the file exists: nothing to clean up if this throws
        const std::lock_guard lock(g_in_flight_mutex);
        do {
            m_fd = ::open(m_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        } while (m_fd < 0 && errno == EINTR);
        if (m_fd < 0) {
            const int error = errno;
            const fs::path folder = m_path.parent_path();
            TESSERA_REJECT("cannot write " << m_target << ": cannot create the temporary file " << m_path << ": "
                                           << errno_text(error)
                                           << (error == ENOENT ? " (does the folder " + folder.string() + " exist?)"
                                                               : std::string()));
        }
        struct stat info {};
        if (::fstat(m_fd, &info) == 0) {
            m_id = FileId{info.st_dev, info.st_ino};
            g_in_flight.insert(m_id);
        }
    }

    ~TemporaryFile() override {
        if (m_fd >= 0) ::close(m_fd);
        const std::lock_guard lock(g_in_flight_mutex);
        if (!m_committed) ::unlink(m_path.c_str());
        g_in_flight.erase(m_id);
    }

    TemporaryFile(const TemporaryFile&) = delete;
    TemporaryFile& operator=(const TemporaryFile&) = delete;

    void write(std::span<const std::byte> bytes) override {
        if (m_buffer.size() + bytes.size() > k_buffer_size) flush_buffer();
        if (bytes.size() >= k_buffer_size) {
            write_fully(bytes);  // large blocks bypass the buffer
        } else {
            m_buffer.insert(m_buffer.end(), bytes.begin(), bytes.end());
        }
        m_num_bytes += bytes.size();
    }
    using FileSink::write;

    std::uint64_t num_bytes_written() const override { return m_num_bytes; }

    // Flush, fsync, close, rename over the target, fsync the folder.
    void commit() {
        flush_buffer();
        if (::fsync(m_fd) != 0) fail_with_errno("cannot flush the temporary file to disk");
        const int fd = m_fd;
        m_fd = -1;
        if (::close(fd) != 0) fail_with_errno("cannot close the temporary file");
        if (::rename(m_path.c_str(), m_target.c_str()) != 0)
            fail_with_errno("cannot rename the temporary file over it");
        m_committed = true;
        sync_folder();
    }

private:
    static constexpr std::size_t k_buffer_size = std::size_t{1} << 20;  // bytes

    [[noreturn]] void fail_with_errno(std::string_view what) {
        const int error = errno;
        TESSERA_REJECT("cannot write " << m_target << ": " << what << " (" << m_path << "): " << errno_text(error));
    }

    void flush_buffer() {
        write_fully(m_buffer);
        m_buffer.clear();
    }

    void write_fully(std::span<const std::byte> bytes) {
        while (!bytes.empty()) {
            const ssize_t written = ::write(m_fd, bytes.data(), bytes.size());
            if (written < 0) {
                if (errno == EINTR) continue;
                fail_with_errno("cannot write the temporary file");
            }
            bytes = bytes.subspan(static_cast<std::size_t>(written));
        }
    }

    void sync_folder() {
        const fs::path folder = m_target.parent_path().empty() ? fs::path(".") : m_target.parent_path();
        const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) fail_with_errno("cannot open its folder to flush the rename to disk");
        const int result = ::fsync(fd);
        const int error = errno;
        ::close(fd);
        // Some file systems cannot fsync a folder; the rename is done, durability is what they give.
        if (result != 0 && error != EINVAL && error != ENOTSUP) {
            errno = error;
            fail_with_errno("cannot flush its folder to disk after the rename");
        }
    }

    fs::path m_target;
    fs::path m_path;
    int m_fd = -1;
    FileId m_id;
    bool m_committed = false;
    std::vector<std::byte> m_buffer;
    std::uint64_t m_num_bytes = 0;
};

// The pid in "<anything>.tmp.<pid>", or 0 when the name does not have that form.
pid_t temporary_owner(const std::string& name) {
    static constexpr std::string_view k_marker = ".tmp.";
    const std::size_t at = name.rfind(k_marker);
    if (at == std::string::npos || at == 0) return 0;
    const std::string_view digits = std::string_view(name).substr(at + k_marker.size());
    if (digits.empty() || digits.size() > 10) return 0;
    long long pid = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (error != std::errc() || end != digits.data() + digits.size() || pid <= 0 || pid > INT32_MAX) return 0;
    return static_cast<pid_t>(pid);
}

bool process_is_alive(pid_t pid) {
    // Signal 0 checks existence only; EPERM means it exists but belongs to someone else.
    return ::kill(pid, 0) == 0 || errno == EPERM;
}

}  // namespace

fs::path temporary_path_for(const fs::path& path) {
    fs::path temporary = path;
    temporary += ".tmp." + std::to_string(::getpid());
    return temporary;
}

void write_file_atomically(const fs::path& path, const std::function<void(FileSink&)>& writer) {
    TESSERA_CHECK(!path.empty(), "cannot write a file with an empty path");
    TESSERA_CHECK(path.has_filename(), "cannot write " << path << ": the path names a folder, not a file");
    TemporaryFile file(path, temporary_path_for(path));
    writer(file);
    file.commit();
}

void write_file_atomically(const fs::path& path, std::span<const std::byte> bytes) {
    write_file_atomically(path, [bytes](FileSink& sink) { sink.write(bytes); });
}

std::vector<fs::path> remove_stale_temporaries(const fs::path& dir) {
    std::vector<fs::path> removed;
    std::error_code error;
    if (!fs::is_directory(dir, error)) return removed;
    fs::directory_iterator it(dir, error);
    TESSERA_CHECK(!error, "cannot list " << dir << " to remove stale temporary files: " << error.message());
    const pid_t self = ::getpid();
    for (; it != fs::directory_iterator(); it.increment(error)) {
        if (error) break;
        const fs::directory_entry& entry = *it;
        std::error_code status_error;
        if (!entry.is_regular_file(status_error)) continue;
        const pid_t owner = temporary_owner(entry.path().filename().string());
        if (owner == 0) continue;
        std::unique_lock lock(g_in_flight_mutex, std::defer_lock);
        if (owner == self) {
            lock.lock();
            struct stat info {};
            if (::stat(entry.path().c_str(), &info) != 0) continue;
            if (g_in_flight.contains(FileId{info.st_dev, info.st_ino})) continue;
        } else if (process_is_alive(owner)) {
            continue;
        }
        std::error_code remove_error;
        fs::remove(entry.path(), remove_error);
        TESSERA_CHECK(!remove_error,
                      "cannot remove the stale temporary file " << entry.path() << ": " << remove_error.message());
        removed.push_back(entry.path());
    }
    TESSERA_CHECK(!error, "cannot list " << dir << " to remove stale temporary files: " << error.message());
    std::sort(removed.begin(), removed.end());
    return removed;
}

}  // namespace tessera::io
