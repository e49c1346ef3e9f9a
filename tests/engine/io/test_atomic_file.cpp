// write_file_atomically and remove_stale_temporaries: whole replacement, cleanup on every failure, and
// a writer SIGKILLed at random moments that never leaves a torn file.
#include "io/atomic_file.hpp"

#include "run_files_test_support.hpp"

#include <chrono>
#include <csignal>
#include <thread>

#include <sys/resource.h>
#include <sys/wait.h>

using namespace tessera;
using namespace tessera::io;
using namespace tessera::test;

namespace {

std::vector<fs::path> files_in(const fs::path& dir) {
    std::vector<fs::path> names;
    for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
    std::sort(names.begin(), names.end());
    return names;
}

std::vector<std::byte> filled(std::size_t size, char value) {
    return std::vector<std::byte>(size, std::byte(value));
}

// A pid that belonged to a process that has exited and been reaped.
pid_t dead_pid() {
    const pid_t child = ::fork();
    if (child == 0) ::_exit(0);
    int status = 0;
    ::waitpid(child, &status, 0);
    return child;
}

}  // namespace

TEST(AtomicFileOperations, TemporaryIsBesideTheTargetAndNamedAfterThePid) {
    EXPECT_EQ(temporary_path_for("run/weights.safetensors"),
              fs::path("run/weights.safetensors.tmp." + std::to_string(::getpid())));
}

TEST(AtomicFileOperations, WritesANewFileAndLeavesNoTemporary) {
    const ScratchDir dir;
    write_file_atomically(dir / "a.bin", bytes_of("hello"));
    EXPECT_EQ(text_of(read_file_bytes(dir / "a.bin")), "hello");
    EXPECT_EQ(files_in(dir.path()), std::vector<fs::path>{"a.bin"});
}

TEST(AtomicFileOperations, ReplacesAnExistingFileWhole) {
    const ScratchDir dir;
    write_file_atomically(dir / "a.bin", filled(1000, 'a'));
    write_file_atomically(dir / "a.bin", bytes_of("short"));
    EXPECT_EQ(text_of(read_file_bytes(dir / "a.bin")), "short");
    write_file_atomically(dir / "a.bin", std::span<const std::byte>());
    EXPECT_TRUE(read_file_bytes(dir / "a.bin").empty());
}

TEST(AtomicFileOperations, RelativePathInTheCurrentFolder) {
    const ScratchDir dir;
    const fs::path previous = fs::current_path();
    fs::current_path(dir.path());
    write_file_atomically("plain.txt", bytes_of("x"));
    fs::current_path(previous);
    EXPECT_EQ(text_of(read_file_bytes(dir / "plain.txt")), "x");
}

TEST(AtomicFileOperations, StreamedWritesSmallAndLargeChunksInOrder) {
    const ScratchDir dir;
    std::vector<std::byte> expected;
    std::uint64_t counted = 0;
    write_file_atomically(dir / "s.bin", [&](FileSink& sink) {
        for (int i = 0; i < 1000; ++i) {  // many small writes go through the buffer
            const std::string line = "line " + std::to_string(i) + "\n";
            sink.write(line);
            const auto bytes = bytes_of(line);
            expected.insert(expected.end(), bytes.begin(), bytes.end());
        }
        const auto big = filled(3 << 20, 'z');  // larger than the buffer: written directly
        sink.write(big);
        expected.insert(expected.end(), big.begin(), big.end());
        sink.write("end");
        expected.insert(expected.end(), {std::byte('e'), std::byte('n'), std::byte('d')});
        counted = sink.num_bytes_written();
    });
    EXPECT_EQ(counted, expected.size());
    EXPECT_EQ(read_file_bytes(dir / "s.bin"), expected);
}

TEST(AtomicFileOperations, WriterThatThrowsLeavesTheOldFileAndNoTemporary) {
    const ScratchDir dir;
    write_file_atomically(dir / "a.bin", bytes_of("old"));
    EXPECT_THROW(write_file_atomically(dir / "a.bin",
                                       [](FileSink& sink) {
                                           sink.write(std::string(5 << 20, 'n'));
                                           throw std::runtime_error("serialisation failed");
                                       }),
                 std::runtime_error);
    EXPECT_EQ(text_of(read_file_bytes(dir / "a.bin")), "old");
    EXPECT_EQ(files_in(dir.path()), std::vector<fs::path>{"a.bin"});
}

TEST(AtomicFileOperations, MissingFolderNamesThePathAndTheReason) {
    const ScratchDir dir;
    const std::string message = error_message([&] { write_file_atomically(dir / "no/such/a.bin", bytes_of("x")); });
    EXPECT_NE(message.find((dir / "no/such/a.bin").string()), std::string::npos) << message;
    EXPECT_NE(message.find("No such file or directory"), std::string::npos) << message;
    EXPECT_NE(message.find("does the folder"), std::string::npos) << message;
}

TEST(AtomicFileOperations, FailedRenameRemovesTheTemporary) {
    const ScratchDir dir;
    fs::create_directories(dir / "target/inside");  // a non-empty folder cannot be renamed over
    const std::string message = error_message([&] { write_file_atomically(dir / "target", bytes_of("x")); });
    EXPECT_NE(message.find("cannot rename"), std::string::npos) << message;
    EXPECT_NE(message.find((dir / "target").string()), std::string::npos) << message;
    EXPECT_EQ(files_in(dir.path()), std::vector<fs::path>{"target"});
}

TEST(AtomicFileOperations, FullDiskIsReportedAndTheOldFileKept) {
    // RLIMIT_FSIZE makes write() fail with EFBIG past the limit, as a full disk fails with ENOSPC.
    const ScratchDir dir;
    write_file_atomically(dir / "a.bin", bytes_of("old"));
    rlimit saved{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
    const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = saved;
    small.rlim_cur = 1 << 20;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    const std::string message = error_message([&] { write_file_atomically(dir / "a.bin", filled(4 << 20, 'n')); });
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, previous_handler);
    EXPECT_NE(message.find("cannot write the temporary file"), std::string::npos) << message;
    EXPECT_NE(message.find("File too large"), std::string::npos) << message;
    EXPECT_EQ(text_of(read_file_bytes(dir / "a.bin")), "old");
    EXPECT_EQ(files_in(dir.path()), std::vector<fs::path>{"a.bin"});
}

TEST(AtomicFileOperations, PathThatNamesAFolderIsRejected) {
    EXPECT_ERROR_CONTAINS(write_file_atomically("some/folder/", bytes_of("x")), "names a folder");
    EXPECT_ERROR_CONTAINS(write_file_atomically("", bytes_of("x")), "empty path");
}

TEST(AtomicFileOperations, KilledWriterLeavesTheOldFileOrTheNewOneNeverATornOne) {
    const ScratchDir dir;
    const fs::path target = dir / "state.bin";
    constexpr std::size_t k_size = 3 << 20;
    write_file_atomically(target, filled(k_size, 'a'));
    for (int round = 0; round < 6; ++round) {
        const pid_t child = ::fork();
        ASSERT_GE(child, 0);
        if (child == 0) {
            // Rewrite the file over and over until killed; the two contents alternate.
            for (int i = 0;; ++i) write_file_atomically(target, filled(k_size, i % 2 ? 'a' : 'b'));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5 + 7 * round));
        ::kill(child, SIGKILL);
        int status = 0;
        ::waitpid(child, &status, 0);
        ASSERT_TRUE(WIFSIGNALED(status));

        const std::vector<std::byte> bytes = read_file_bytes(target);
        ASSERT_EQ(bytes.size(), k_size) << "round " << round;
        const std::byte first = bytes.front();
        EXPECT_TRUE(first == std::byte('a') || first == std::byte('b'));
        EXPECT_EQ(std::count(bytes.begin(), bytes.end(), first), static_cast<std::ptrdiff_t>(k_size))
            << "round " << round << ": a torn file";
        // The killed child may have left its temporary: a resumed run clears it.
        for (const fs::path& removed : remove_stale_temporaries(dir.path()))
            EXPECT_EQ(removed, dir / ("state.bin.tmp." + std::to_string(child)));
        EXPECT_EQ(files_in(dir.path()), std::vector<fs::path>{"state.bin"});
    }
}

TEST(AtomicFileOperations, StaleTemporariesOfDeadProcessesAreRemoved) {
    const ScratchDir dir;
    const std::string dead = std::to_string(dead_pid());
    const std::string alive = std::to_string(::getppid());
    const std::string self = std::to_string(::getpid());
    for (const std::string& name :
         std::vector<std::string>{"a.bin.tmp." + dead, "b.safetensors.tmp." + dead, "c.bin.tmp." + alive,
                                  "d.bin.tmp." + self, "e.bin", "f.tmp.x1", "g.tmp.", "h.tmp.99999999999"})
        write_file_bytes(dir / name, bytes_of("x"));
    fs::create_directories(dir / ("sub.tmp." + dead));  // folders are never touched
    write_file_bytes(dir / ("sub.tmp." + dead) / ("i.bin.tmp." + dead), bytes_of("x"));

    const std::vector<fs::path> removed = remove_stale_temporaries(dir.path());
    // This process's own d.bin.tmp.<pid> is stale too: no write of ours is in progress.
    EXPECT_EQ(removed, (std::vector<fs::path>{dir / ("a.bin.tmp." + dead), dir / ("b.safetensors.tmp." + dead),
                                              dir / ("d.bin.tmp." + self)}));
    EXPECT_EQ(files_in(dir.path()), (std::vector<fs::path>{"c.bin.tmp." + alive, "e.bin", "f.tmp.x1", "g.tmp.",
                                                           "h.tmp.99999999999", "sub.tmp." + dead}));
    EXPECT_TRUE(fs::exists(dir / ("sub.tmp." + dead) / ("i.bin.tmp." + dead)));
    EXPECT_TRUE(remove_stale_temporaries(dir / "missing").empty());
}

TEST(AtomicFileOperations, TemporaryBeingWrittenByThisProcessIsKept) {
    const ScratchDir dir;
    std::vector<fs::path> removed_meanwhile;
    write_file_atomically(dir / "a.bin", [&](FileSink& sink) {
        sink.write("partial");
        // Spelled differently from the writer's path on purpose: files are matched by inode.
        removed_meanwhile = remove_stale_temporaries(dir.path() / "." / "");
        sink.write(" and the rest");
    });
    EXPECT_TRUE(removed_meanwhile.empty());
    EXPECT_EQ(text_of(read_file_bytes(dir / "a.bin")), "partial and the rest");
}
