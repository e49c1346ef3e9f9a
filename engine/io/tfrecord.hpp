// TFRecord files, TensorFlow's record container (TensorBoard event files and tf.data input shards):
// each record is a u64 length, a u32 masked CRC-32C of the length, the data, and a u32 masked CRC-32C
// of the data, all little-endian.
//
//   TFRecordReader shard("train-00000-of-01024");
//   std::vector<std::byte> record;
//   while (shard.next(record)) { ... shard.record_offset() ... }
//   while (shard.skip()) offsets.push_back(shard.record_offset());   // headers only: an index
//   shard.seek(offsets[7]); shard.next(record);                       // record 7
//   write_tfrecords("out-00000-of-00001", records);      // atomically
//
// A reader checks both CRCs and the framing; damage throws tessera::Error naming the file and the byte
// offset of the bad record. A torn last record (a writer killed mid-write) is an error for input data,
// and ignored where that is how files end (TornTail::Ignore: TensorBoard's event files).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <vector>

namespace tessera::io {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): crc32c("123456789") == 0xE3069283.
std::uint32_t crc32c(std::span<const std::byte> bytes);
// What TFRecords store: ((crc >> 15) | (crc << 17)) + 0xa282ead8, so that a CRC of data holding
// CRCs does not degenerate.
std::uint32_t masked_crc32c(std::span<const std::byte> bytes);

// One record as it is stored: header, data, footer.
std::vector<std::byte> frame_tfrecord(std::span<const std::byte> data);

// The largest record a reader accepts (a damaged length must not allocate gigabytes).
inline constexpr std::uint64_t max_tfrecord_bytes = std::uint64_t{1} << 30;

class TFRecordReader {
public:
    enum class TornTail { Error, Ignore };
    explicit TFRecordReader(std::filesystem::path path, TornTail torn_tail = TornTail::Error);

    // The next record's data into `data`; false at the end of the file (or at a torn tail ignored).
    bool next(std::vector<std::byte>& data);
    // Steps over the next record reading its header only (its length's CRC is checked, its data's is not):
    // how an index of a shard's record offsets is built without reading the data. False at the end.
    bool skip();
    // The next record read is the one at `offset` (a record_offset() this file returned before).
    void seek(std::uint64_t offset);
    std::uint64_t record_offset() const { return m_record_offset; }  // of the record last returned
    std::int64_t records_read() const { return m_records; }
    const std::filesystem::path& path() const { return m_path; }

private:
    // The next record's data length, its header checked; nothing at the end of the file.
    std::optional<std::uint64_t> next_length();

    std::filesystem::path m_path;
    TornTail m_torn_tail;
    std::ifstream m_in;
    std::uint64_t m_size = 0, m_offset = 0, m_record_offset = 0;
    std::int64_t m_records = 0;
};

// Writes the records as one TFRecord file, replacing `path` atomically.
void write_tfrecords(const std::filesystem::path& path, const std::vector<std::vector<std::byte>>& records);

}  // namespace tessera::io
