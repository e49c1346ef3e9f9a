#include "io/tfrecord.hpp"

#include "core/error.hpp"
#include "io/atomic_file.hpp"

#include <array>
#include <cstring>
#include <system_error>

namespace fs = std::filesystem;

namespace tessera::io {

namespace {

constexpr std::array<std::uint32_t, 256> make_crc32c_table() {
    std::array<std::uint32_t, 256> table{};
    for (std::uint32_t byte = 0; byte < 256; ++byte) {
        std::uint32_t crc = byte;
        for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
        table[byte] = crc;
    }
    return table;
}

constexpr std::array<std::uint32_t, 256> crc32c_table = make_crc32c_table();
constexpr std::size_t header_bytes = 8 + 4;  // u64 length, u32 masked CRC of it
constexpr std::size_t footer_bytes = 4;      // u32 masked CRC of the data

std::string hex(std::uint32_t value) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string text = "0x00000000";
    for (int i = 0; i < 8; ++i) text[static_cast<std::size_t>(9 - i)] = digits[(value >> (4 * i)) & 0xf];
    return text;
}

}  // namespace

std::uint32_t crc32c(std::span<const std::byte> bytes) {
    std::uint32_t crc = 0xffffffffu;
    for (std::byte byte : bytes) crc = (crc >> 8) ^ crc32c_table[(crc ^ static_cast<std::uint32_t>(byte)) & 0xffu];
    return crc ^ 0xffffffffu;
}

std::uint32_t masked_crc32c(std::span<const std::byte> bytes) {
    const std::uint32_t crc = crc32c(bytes);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::vector<std::byte> frame_tfrecord(std::span<const std::byte> data) {
    std::vector<std::byte> framed(header_bytes + data.size() + footer_bytes);
    const std::uint64_t length = data.size();
    std::memcpy(framed.data(), &length, 8);
    const std::uint32_t length_crc = masked_crc32c(std::span<const std::byte>(framed.data(), 8));
    std::memcpy(framed.data() + 8, &length_crc, 4);
    if (!data.empty()) std::memcpy(framed.data() + header_bytes, data.data(), data.size());
    const std::uint32_t data_crc = masked_crc32c(data);
    std::memcpy(framed.data() + header_bytes + data.size(), &data_crc, 4);
    return framed;
}

TFRecordReader::TFRecordReader(fs::path path, TornTail torn_tail)
    : m_path(std::move(path)), m_torn_tail(torn_tail), m_in(m_path, std::ios::binary) {
    TESSERA_CHECK(m_in.is_open(), "cannot read the TFRecord file " << m_path << ": " << std::generic_category().message(errno));
    std::error_code error;
    m_size = fs::file_size(m_path, error);
    TESSERA_CHECK(!error, "cannot read the TFRecord file " << m_path << ": " << error.message());
}

std::optional<std::uint64_t> TFRecordReader::next_length() {
    if (m_offset == m_size) return std::nullopt;
    const std::uint64_t remaining = m_size - m_offset;
    const auto torn = [&](const char* what) -> std::optional<std::uint64_t> {
        TESSERA_CHECK(m_torn_tail == TornTail::Ignore,
                      m_path << ": the record at byte offset " << m_offset << " is cut short (" << what << "; " << remaining
                                      << " bytes remain): the file is truncated. Copy or write it again.");
        m_offset = m_size;
        return std::nullopt;
    };
    if (remaining < header_bytes) return torn("no whole header");
    std::byte header[header_bytes];
    m_in.read(reinterpret_cast<char*>(header), header_bytes);
    TESSERA_CHECK(m_in.good(), m_path << ": cannot read byte offset " << m_offset);
    std::uint64_t length = 0;
    std::uint32_t length_crc = 0;
    std::memcpy(&length, header, 8);
    std::memcpy(&length_crc, header + 8, 4);
    const std::uint32_t expected_length_crc = masked_crc32c(std::span<const std::byte>(header, 8));
    TESSERA_CHECK(length_crc == expected_length_crc, m_path << ": corrupt record at byte offset " << m_offset << ": the CRC of its length is "
                                                                     << hex(length_crc) << ", expected " << hex(expected_length_crc));
    TESSERA_CHECK(length <= max_tfrecord_bytes, m_path << ": the record at byte offset " << m_offset << " claims " << length
                                                                << " bytes, more than the " << max_tfrecord_bytes << " a record may hold");
    if (length > remaining - header_bytes || remaining - header_bytes - length < footer_bytes) return torn("its data run past the end");
    return length;
}

bool TFRecordReader::next(std::vector<std::byte>& data) {
    const std::optional<std::uint64_t> length = next_length();
    if (!length) return false;
    data.resize(static_cast<std::size_t>(*length));
    std::uint32_t data_crc = 0;
    m_in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(*length));
    m_in.read(reinterpret_cast<char*>(&data_crc), footer_bytes);
    TESSERA_CHECK(m_in.good(), m_path << ": cannot read the record at byte offset " << m_offset);
    const std::uint32_t expected_data_crc = masked_crc32c(data);
    TESSERA_CHECK(data_crc == expected_data_crc, m_path << ": corrupt record at byte offset " << m_offset << ": the CRC of its " << *length
                                                                 << " data bytes is " << hex(data_crc) << ", expected " << hex(expected_data_crc));
    m_record_offset = m_offset;
    m_offset += header_bytes + *length + footer_bytes;
    ++m_records;
    return true;
}

bool TFRecordReader::skip() {
    const std::optional<std::uint64_t> length = next_length();
    if (!length) return false;
    m_record_offset = m_offset;
    m_offset += header_bytes + *length + footer_bytes;
    m_in.seekg(static_cast<std::streamoff>(m_offset));
    TESSERA_CHECK(m_in.good(), m_path << ": cannot seek past the record at byte offset " << m_record_offset);
    ++m_records;
    return true;
}

void TFRecordReader::seek(std::uint64_t offset) {
    TESSERA_CHECK(offset <= m_size, m_path << ": byte offset " << offset << " is past the end of the file (" << m_size
                                           << " bytes): was the shard replaced after it was indexed?");
    m_in.clear();
    m_in.seekg(static_cast<std::streamoff>(offset));
    TESSERA_CHECK(m_in.good(), m_path << ": cannot seek to byte offset " << offset);
    m_offset = offset;
}

void write_tfrecords(const fs::path& path, const std::vector<std::vector<std::byte>>& records) {
    write_file_atomically(path, [&](FileSink& sink) {
        for (const std::vector<std::byte>& record : records) {
            const std::vector<std::byte> framed = frame_tfrecord(record);
            sink.write(framed);
        }
    });
}

}  // namespace tessera::io
