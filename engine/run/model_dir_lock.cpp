#include "run/model_dir_lock.hpp"

#include "core/error.hpp"
#include "core/json_support.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <string>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace tessera::run {

namespace fs = std::filesystem;

namespace {

constexpr const char* lock_name = "lock";

std::string read_all(int fd) {
    std::string text;
    char buffer[1024];
    ::lseek(fd, 0, SEEK_SET);
    for (;;) {
        const ssize_t got = ::read(fd, buffer, sizeof buffer);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        text.append(buffer, static_cast<std::size_t>(got));
        if (text.size() > 65536) break;  // a lock record is a line; anything longer is not ours
    }
    return text;
}

std::optional<LockHolder> parse_holder(const std::string& text) {
    if (text.empty()) return std::nullopt;
    LockHolder holder;
    try {
        const json::Json root = json::Json::parse(text);
        holder.pid = root.value("pid", std::int64_t{0});
        holder.host = root.value("host", std::string());
        holder.started = root.value("started", std::string());
        holder.command = root.value("command", std::string());
    } catch (const std::exception&) {
        holder.command = "unreadable lock record";
    }
    return holder;
}

std::string host_name() {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
    return name;
}

std::string local_time_now() {
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm parts{};
    ::localtime_r(&now, &parts);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &parts);
    return text;
}

}  // namespace

std::string LockHolder::describe() const {
    std::string text = "pid " + std::to_string(pid) + " on host " + (host.empty() ? "?" : host);
    if (!started.empty()) text += ", started " + started;
    if (!command.empty()) text += " (" + command + ")";
    return text;
}

ModelDirLock::ModelDirLock(const fs::path& folder, std::string_view command) {
    const fs::path file = folder / lock_name;
    do {
        m_fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    } while (m_fd < 0 && errno == EINTR);
    TESSERA_CHECK(m_fd >= 0, "cannot lock the model_dir '" << folder.string() << "': cannot open " << file.string() << ": "
                                                           << std::strerror(errno) << ". Check that the folder is writable.");
    int status = 0;
    do {
        status = ::flock(m_fd, LOCK_EX | LOCK_NB);
    } while (status != 0 && errno == EINTR);
    if (status != 0) {
        const int error = errno;
        const std::optional<LockHolder> holder = parse_holder(read_all(m_fd));
        ::close(m_fd);
        m_fd = -1;
        TESSERA_CHECK(error != EWOULDBLOCK,
                      "the model_dir '" << folder.string() << "' is in use by another run: "
                                        << (holder ? holder->describe() : std::string("a run that has not written its name yet"))
                                        << ". Two runs in one model_dir would mix their checkpoints and metrics: wait for it to "
                                           "finish, stop it, or choose another model_dir (--model-dir). The studio can watch it "
                                           "read-only.");
        TESSERA_REJECT("cannot lock the model_dir '" << folder.string() << "': " << std::strerror(error));
    }
    // Ours now. A record left in the file belongs to a run that died holding the lock.
    m_taken_over_from = parse_holder(read_all(m_fd));
    const json::Json record = {{"pid", static_cast<std::int64_t>(::getpid())},
                               {"host", host_name()},
                               {"started", local_time_now()},
                               {"command", std::string(command)}};
    const std::string text = record.dump() + "\n";
    if (::ftruncate(m_fd, 0) == 0) {
        ::lseek(m_fd, 0, SEEK_SET);
        [[maybe_unused]] const ssize_t written = ::write(m_fd, text.data(), text.size());
    }
}

ModelDirLock::~ModelDirLock() {
    if (m_fd < 0) return;
    // An empty file says "nobody": a record left behind means its run died.
    [[maybe_unused]] const int truncated = ::ftruncate(m_fd, 0);
    ::flock(m_fd, LOCK_UN);
    ::close(m_fd);
}

std::optional<LockHolder> ModelDirLock::holder(const fs::path& folder) {
    const fs::path file = folder / lock_name;
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return std::nullopt;
    std::optional<LockHolder> result;
    if (::flock(fd, LOCK_SH | LOCK_NB) == 0) {
        ::flock(fd, LOCK_UN);
    } else if (errno == EWOULDBLOCK) {
        result = parse_holder(read_all(fd));
        if (!result) result = LockHolder{};
    }
    ::close(fd);
    return result;
}

}  // namespace tessera::run
