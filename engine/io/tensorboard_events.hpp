// TensorBoard event files: training curves that `tensorboard --logdir runs/` shows, and that the
// studio reads back to draw past runs.
//
//   TensorBoardWriter writer("runs/unet_2x2");     // runs/unet_2x2/events.out.tfevents.<secs>.<host>.<pid>.<n>
//   writer.add_scalar("loss/train", 0.731, 100);     // tag, value, step; wall time is now
//   writer.flush();                                  // at each evaluation, so a crash loses little
//   ...                                              // killed, then resumed from the checkpoint of step 400:
//   TensorBoardWriter resumed("runs/unet_2x2");      // a second file in the same folder
//   resumed.add_session_start(400);                  // TensorBoard drops the first file's steps >= 400
//   const std::vector<ScalarEvent> curve = read_tensorboard_scalars("runs/unet_2x2");
//
// The file is a sequence of TFRecords: u64 length, u32 masked CRC-32C of the length, the data, u32
// masked CRC-32C of the data (all little-endian). Each data is a serialized tensorflow.Event protobuf,
// encoded here by hand: wall_time (1, double), step (2, int64), then one of file_version (3, string;
// the first record says "brain.Event:2"), summary (5: repeated Summary.Value {tag = 1, simple_value =
// 2 (float)}), session_log (7: SessionLog {status = 1; START = 1}). Field numbers are TensorFlow's
// event.proto and summary.proto.
//
// A writer is not thread-safe; one per run folder and process.
#pragma once

#include "io/tfrecord.hpp"  // the framing, and crc32c for tests that damage files

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::io {

// Seconds since the Unix epoch, with sub-second precision: the wall_time TensorBoard expects.
double unix_time_now();

class TensorBoardWriter {
public:
    // Creates the folder if needed and a new event file in it; writes the file_version record.
    explicit TensorBoardWriter(const std::filesystem::path& log_dir);
    ~TensorBoardWriter();  // flushes (without fsync) and closes
    TensorBoardWriter(TensorBoardWriter&&) noexcept;
    TensorBoardWriter& operator=(TensorBoardWriter&&) noexcept;
    TensorBoardWriter(const TensorBoardWriter&) = delete;
    TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

    // The value is stored as float (simple_value); wall_time is seconds since the epoch.
    void add_scalar(std::string_view tag, double value, std::int64_t step, double wall_time = unix_time_now());
    // SessionLog START at `step`: TensorBoard discards what earlier records (this run folder's older
    // files included) logged at steps >= step. What TensorFlow writes when a run resumes.
    void add_session_start(std::int64_t step, double wall_time = unix_time_now());
    // Everything written so far reaches the disk (fflush + fsync).
    void flush();

    const std::filesystem::path& path() const { return m_path; }

private:
    struct FileCloser {
        void operator()(std::FILE* file) const;
    };

    void write_record(std::span<const std::byte> data);

    std::filesystem::path m_path;
    std::unique_ptr<std::FILE, FileCloser> m_file;
};

struct ScalarEvent {
    std::string tag;
    std::int64_t step = 0;
    double wall_time = 0;  // seconds since the epoch
    float value = 0;
};

// The scalars of one event file, or of every file in a folder whose name contains "tfevents", in
// name order with digit runs compared as numbers, which is creation order (subfolders are other runs
// and are not read). A session start drops the scalars read before it at steps >= its step, as
// TensorBoard does. CRCs are verified: a truncated last record (a run killed mid-write) is ignored,
// any other damage throws tessera::Error naming the file and the byte offset of the bad record.
// Summary values other than simple_value (histograms, images, tensors) are skipped.
std::vector<ScalarEvent> read_tensorboard_scalars(const std::filesystem::path& file_or_dir);

}  // namespace tessera::io
