// ScratchDir: a fresh folder under the system temp folder for one test, removed with everything in it
// when the test ends. Named after the test binary's purpose, the process and a counter, so tests that
// CTest runs side by side never share one.
#pragma once

#include <atomic>
#include <filesystem>
#include <string>

#include <unistd.h>

namespace tessera::test {

class ScratchDir {
public:
    explicit ScratchDir(const std::string& purpose = "test") {
        static std::atomic<int> counter{0};
        m_path = std::filesystem::temp_directory_path() /
                 ("tessera_" + purpose + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        std::filesystem::remove_all(m_path);
        std::filesystem::create_directories(m_path);
    }
    ~ScratchDir() {
        std::error_code ignored;
        std::filesystem::remove_all(m_path, ignored);
    }
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;

    const std::filesystem::path& path() const { return m_path; }
    std::filesystem::path operator/(const std::string& name) const { return m_path / name; }

private:
    std::filesystem::path m_path;
};

}  // namespace tessera::test
