// ModelDirLock: one run at a time in a model_dir.
//
// Two runs writing one model_dir interleave their checkpoints, experiment.json and metrics (two losses
// for one step) and both end "successfully". A run therefore holds an advisory lock (flock) on
// `<model_dir>/lock` for its whole life; the file records who holds it (pid, host, start time, command)
// so that the second run's message names the first. The kernel drops the lock when its process dies,
// however it dies, so a lock left by a killed run is simply taken over (and reported). flock locks
// are per open file, so two runs inside one process (the studio) exclude each other too.
//
//   ModelDirLock lock("runs/em", "tessera-cli train em.json");   // throws if another run holds it
//   if (auto holder = ModelDirLock::holder("runs/em")) { ... watch read-only ... }
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::run {

struct LockHolder {
    std::int64_t pid = 0;
    std::string host;
    std::string started;  // local time, "2026-11-24 21:40:03"
    std::string command;  // what runs there: "tessera-cli train em.json", "studio"

    std::string describe() const;  // "pid 4242 on host gpu1, started 2026-11-24 21:40:03 (tessera-cli train em.json)"
};

class ModelDirLock {
public:
    // `folder` exists. Throws a bad-input error naming the holder when another run holds the lock.
    ModelDirLock(const std::filesystem::path& folder, std::string_view command);
    ~ModelDirLock();
    ModelDirLock(const ModelDirLock&) = delete;
    ModelDirLock& operator=(const ModelDirLock&) = delete;

    // The holder recorded in the file when this lock was taken, if a run died holding it.
    const std::optional<LockHolder>& taken_over_from() const { return m_taken_over_from; }

    // Who holds the lock on `folder` now (another process, or another run of this one), if anyone.
    static std::optional<LockHolder> holder(const std::filesystem::path& folder);

private:
    int m_fd = -1;
    std::optional<LockHolder> m_taken_over_from;
};

}  // namespace tessera::run
