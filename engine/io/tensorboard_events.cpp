#include "io/tensorboard_events.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <system_error>

#include <unistd.h>

namespace tessera::io {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "event files are written as in memory: little-endian");

namespace {

std::string errno_text(int error) {
    return std::generic_category().message(error);
}

// ---- protobuf wire format -------------------------------------------------------------------

enum class WireType : std::uint32_t { Varint = 0, Fixed64 = 1, LengthDelimited = 2, Fixed32 = 5 };

// Fields of TensorFlow's event.proto and summary.proto that we write and read.
namespace field {
constexpr std::uint32_t event_wall_time = 1;     // double
constexpr std::uint32_t event_step = 2;          // int64
constexpr std::uint32_t event_file_version = 3;  // string
constexpr std::uint32_t event_summary = 5;       // Summary
constexpr std::uint32_t event_session_log = 7;   // SessionLog
constexpr std::uint32_t summary_value = 1;       // repeated Summary.Value
constexpr std::uint32_t value_tag = 1;           // string
constexpr std::uint32_t value_simple_value = 2;  // float
constexpr std::uint32_t session_log_status = 1;  // SessionStatus
}  // namespace field
constexpr std::uint64_t k_session_status_start = 1;

class ProtoWriter {
public:
    void add_double(std::uint32_t number, double value) {
        add_tag(number, WireType::Fixed64);
        add_fixed(std::bit_cast<std::uint64_t>(value), 8);
    }
    void add_float(std::uint32_t number, float value) {
        add_tag(number, WireType::Fixed32);
        add_fixed(std::bit_cast<std::uint32_t>(value), 4);
    }
    // int64 and enums: negative numbers take ten bytes, as two's complement, as protobuf does.
    void add_varint_field(std::uint32_t number, std::uint64_t value) {
        add_tag(number, WireType::Varint);
        add_varint(value);
    }
    void add_bytes(std::uint32_t number, std::span<const std::byte> bytes) {
        add_tag(number, WireType::LengthDelimited);
        add_varint(bytes.size());
        m_bytes.insert(m_bytes.end(), bytes.begin(), bytes.end());
    }
    void add_string(std::uint32_t number, std::string_view text) {
        add_bytes(number, std::as_bytes(std::span(text.data(), text.size())));
    }
    void add_message(std::uint32_t number, const ProtoWriter& message) { add_bytes(number, message.m_bytes); }

    std::span<const std::byte> bytes() const { return m_bytes; }

private:
    void add_tag(std::uint32_t number, WireType wire_type) {
        add_varint((std::uint64_t{number} << 3) | static_cast<std::uint32_t>(wire_type));
    }
    void add_varint(std::uint64_t value) {
        while (value >= 0x80) {
            m_bytes.push_back(static_cast<std::byte>((value & 0x7f) | 0x80));
            value >>= 7;
        }
        m_bytes.push_back(static_cast<std::byte>(value));
    }
    void add_fixed(std::uint64_t value, int num_bytes) {
        for (int i = 0; i < num_bytes; ++i) m_bytes.push_back(static_cast<std::byte>(value >> (8 * i)));
    }

    std::vector<std::byte> m_bytes;
};

// Thrown by ProtoReader; the file loop adds the file name and record offset.
struct MalformedEvent {
    std::string what;
};

struct ProtoField {
    std::uint32_t number = 0;
    WireType wire_type = WireType::Varint;
    std::uint64_t scalar = 0;          // Varint, Fixed64 and Fixed32 payloads
    std::span<const std::byte> bytes;  // LengthDelimited payload
};

class ProtoReader {
public:
    explicit ProtoReader(std::span<const std::byte> bytes) : m_bytes(bytes) {}

    bool at_end() const { return m_position == m_bytes.size(); }

    ProtoField next() {
        ProtoField result;
        const std::uint64_t key = read_varint();
        result.number = static_cast<std::uint32_t>(key >> 3);
        if (result.number == 0 || (key >> 3) > 0x1fffffff)
            throw MalformedEvent{"invalid field number " + std::to_string(key >> 3)};
        switch (key & 7) {
            case 0:
                result.wire_type = WireType::Varint;
                result.scalar = read_varint();
                break;
            case 1:
                result.wire_type = WireType::Fixed64;
                result.scalar = read_fixed(8);
                break;
            case 5:
                result.wire_type = WireType::Fixed32;
                result.scalar = read_fixed(4);
                break;
            case 2: {
                result.wire_type = WireType::LengthDelimited;
                const std::uint64_t length = read_varint();
                if (length > m_bytes.size() - m_position)
                    throw MalformedEvent{"field " + std::to_string(result.number) + " is " + std::to_string(length) +
                                         " bytes long but only " + std::to_string(m_bytes.size() - m_position) +
                                         " remain"};
                result.bytes = m_bytes.subspan(m_position, static_cast<std::size_t>(length));
                m_position += static_cast<std::size_t>(length);
                break;
            }
            default:
                throw MalformedEvent{"field " + std::to_string(result.number) + " has wire type " +
                                     std::to_string(key & 7) + ", which proto3 messages do not use"};
        }
        return result;
    }

private:
    std::uint64_t read_varint() {
        std::uint64_t value = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (m_position == m_bytes.size()) throw MalformedEvent{"a varint runs past the end of the message"};
            const auto byte = static_cast<std::uint64_t>(m_bytes[m_position++]);
            value |= (byte & 0x7f) << shift;
            if ((byte & 0x80) == 0) return value;
        }
        throw MalformedEvent{"a varint is longer than 10 bytes"};
    }
    std::uint64_t read_fixed(int num_bytes) {
        if (m_bytes.size() - m_position < static_cast<std::size_t>(num_bytes))
            throw MalformedEvent{"a fixed-size field runs past the end of the message"};
        std::uint64_t value = 0;
        for (int i = 0; i < num_bytes; ++i) value |= static_cast<std::uint64_t>(m_bytes[m_position++]) << (8 * i);
        return value;
    }

    std::span<const std::byte> m_bytes;
    std::size_t m_position = 0;
};

// ---- events -----------------------------------------------------------------------------------

// What read_tensorboard_scalars needs from one Event.
struct DecodedEvent {
    double wall_time = 0;
    std::int64_t step = 0;
    bool is_session_start = false;
    std::vector<std::pair<std::string, float>> scalars;  // tag, simple_value
};

void decode_summary_value(std::span<const std::byte> bytes, DecodedEvent& event) {
    ProtoReader reader(bytes);
    std::string tag;
    std::optional<float> simple_value;
    while (!reader.at_end()) {
        const ProtoField item = reader.next();
        if (item.number == field::value_tag && item.wire_type == WireType::LengthDelimited) {
            tag.assign(reinterpret_cast<const char*>(item.bytes.data()), item.bytes.size());
        } else if (item.number == field::value_simple_value && item.wire_type == WireType::Fixed32) {
            simple_value = std::bit_cast<float>(static_cast<std::uint32_t>(item.scalar));
        }
    }
    if (simple_value) event.scalars.emplace_back(std::move(tag), *simple_value);
}

DecodedEvent decode_event(std::span<const std::byte> bytes) {
    DecodedEvent event;
    ProtoReader reader(bytes);
    // Fields may come in any order (step after summary is legal), so collect first.
    while (!reader.at_end()) {
        const ProtoField item = reader.next();
        if (item.number == field::event_wall_time && item.wire_type == WireType::Fixed64) {
            event.wall_time = std::bit_cast<double>(item.scalar);
        } else if (item.number == field::event_step && item.wire_type == WireType::Varint) {
            event.step = static_cast<std::int64_t>(item.scalar);
        } else if (item.number == field::event_summary && item.wire_type == WireType::LengthDelimited) {
            ProtoReader summary(item.bytes);
            while (!summary.at_end()) {
                const ProtoField value = summary.next();
                if (value.number == field::summary_value && value.wire_type == WireType::LengthDelimited)
                    decode_summary_value(value.bytes, event);
            }
        } else if (item.number == field::event_session_log && item.wire_type == WireType::LengthDelimited) {
            ProtoReader session_log(item.bytes);
            while (!session_log.at_end()) {
                const ProtoField status = session_log.next();
                if (status.number == field::session_log_status && status.wire_type == WireType::Varint)
                    event.is_session_start = status.scalar == k_session_status_start;
            }
        }
    }
    return event;
}

void read_event_file(const fs::path& path, std::vector<ScalarEvent>& scalars) {
    // A process killed mid-write leaves a short last record; TensorBoard skips it, and so do we.
    TFRecordReader records(path, TFRecordReader::TornTail::Ignore);
    std::vector<std::byte> data;
    while (records.next(data)) {
        DecodedEvent event;
        try {
            event = decode_event(data);
        } catch (const MalformedEvent& error) {
            TESSERA_REJECT(path << ": record at byte offset " << records.record_offset() << " is not a valid tensorflow.Event: " << error.what);
        }
        if (event.is_session_start) {
            // TensorBoard's rule for a restarted run: what was logged at or after this step is superseded.
            std::erase_if(scalars, [&](const ScalarEvent& scalar) { return scalar.step >= event.step; });
        }
        for (auto& [tag, value] : event.scalars) scalars.push_back({std::move(tag), event.step, event.wall_time, value});
    }
}

// Name order with digit runs compared as numbers, so that writer 10 of one second follows writer 9.
bool comes_before(const std::string& a, const std::string& b) {
    std::size_t i = 0;
    std::size_t j = 0;
    const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
    while (i < a.size() && j < b.size()) {
        if (is_digit(a[i]) && is_digit(b[j])) {
            std::size_t end_a = i;
            std::size_t end_b = j;
            while (end_a < a.size() && is_digit(a[end_a])) ++end_a;
            while (end_b < b.size() && is_digit(b[end_b])) ++end_b;
            std::string_view run_a = std::string_view(a).substr(i, end_a - i);
            std::string_view run_b = std::string_view(b).substr(j, end_b - j);
            while (run_a.size() > 1 && run_a.front() == '0') run_a.remove_prefix(1);
            while (run_b.size() > 1 && run_b.front() == '0') run_b.remove_prefix(1);
            if (run_a.size() != run_b.size()) return run_a.size() < run_b.size();
            if (run_a != run_b) return run_a < run_b;
            i = end_a;
            j = end_b;
        } else {
            if (a[i] != b[j]) return a[i] < b[j];
            ++i;
            ++j;
        }
    }
    if (a.size() - i != b.size() - j) return a.size() - i < b.size() - j;
    return a < b;  // equal as numbers ("01" and "1"): any fixed order
}

std::string host_name() {
    char name[HOST_NAME_MAX + 1] = {};
    if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
    return name;
}

}  // namespace

// ---- public ---------------------------------------------------------------------------------

double unix_time_now() {
    const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
    return std::chrono::duration<double>(since_epoch).count();
}

void TensorBoardWriter::FileCloser::operator()(std::FILE* file) const {
    std::fclose(file);
}

TensorBoardWriter::TensorBoardWriter(const fs::path& log_dir) {
    std::error_code error;
    fs::create_directories(log_dir, error);
    TESSERA_CHECK(!error, "cannot create the TensorBoard log folder " << log_dir << ": " << error.message());

    // TensorFlow's name: events.out.tfevents.<10-digit seconds>.<host>.<pid>.<n>; the counter keeps two
    // writers of one process in one second apart.
    static std::atomic<int> counter{0};
    const auto seconds = static_cast<long long>(unix_time_now());
    char stamp[32];
    std::snprintf(stamp, sizeof stamp, "%010lld", seconds);
    m_path = log_dir / ("events.out.tfevents." + std::string(stamp) + "." + host_name() + "." +
                        std::to_string(::getpid()) + "." + std::to_string(counter++));
    // "x": never append to or truncate another writer's file.
    m_file.reset(std::fopen(m_path.c_str(), "wbx"));
    TESSERA_CHECK(m_file != nullptr,
                  "cannot create the TensorBoard event file " << m_path << ": " << errno_text(errno));

    ProtoWriter event;
    event.add_double(field::event_wall_time, unix_time_now());
    event.add_string(field::event_file_version, "brain.Event:2");
    write_record(event.bytes());
}

TensorBoardWriter::~TensorBoardWriter() = default;
TensorBoardWriter::TensorBoardWriter(TensorBoardWriter&&) noexcept = default;
TensorBoardWriter& TensorBoardWriter::operator=(TensorBoardWriter&&) noexcept = default;

void TensorBoardWriter::add_scalar(std::string_view tag, double value, std::int64_t step, double wall_time) {
    TESSERA_CHECK(!tag.empty(), "a TensorBoard scalar needs a tag such as \"loss/train\", got an empty one");
    ProtoWriter summary_value;
    summary_value.add_string(field::value_tag, tag);
    // Always written, zero included: simple_value sits in a oneof, where presence is the meaning.
    summary_value.add_float(field::value_simple_value, static_cast<float>(value));
    ProtoWriter summary;
    summary.add_message(field::summary_value, summary_value);
    ProtoWriter event;
    event.add_double(field::event_wall_time, wall_time);
    if (step != 0) event.add_varint_field(field::event_step, static_cast<std::uint64_t>(step));  // proto3 omits 0
    event.add_message(field::event_summary, summary);
    write_record(event.bytes());
}

void TensorBoardWriter::add_session_start(std::int64_t step, double wall_time) {
    ProtoWriter session_log;
    session_log.add_varint_field(field::session_log_status, k_session_status_start);
    ProtoWriter event;
    event.add_double(field::event_wall_time, wall_time);
    if (step != 0) event.add_varint_field(field::event_step, static_cast<std::uint64_t>(step));
    event.add_message(field::event_session_log, session_log);
    write_record(event.bytes());
}

void TensorBoardWriter::flush() {
    TESSERA_CHECK(m_file != nullptr, "this TensorBoardWriter was moved from");
    TESSERA_CHECK(std::fflush(m_file.get()) == 0, "cannot write " << m_path << ": " << errno_text(errno));
    TESSERA_CHECK(::fsync(::fileno(m_file.get())) == 0, "cannot flush " << m_path << " to disk: " << errno_text(errno));
}

void TensorBoardWriter::write_record(std::span<const std::byte> data) {
    TESSERA_CHECK(m_file != nullptr, "this TensorBoardWriter was moved from");
    // One buffered write: a record reaches the file whole unless the process dies mid-flush, and a
    // reader ignores a torn last record.
    const std::vector<std::byte> framed = frame_tfrecord(data);
    TESSERA_CHECK(std::fwrite(framed.data(), 1, framed.size(), m_file.get()) == framed.size(), "cannot write " << m_path << ": " << errno_text(errno));
}

std::vector<ScalarEvent> read_tensorboard_scalars(const fs::path& file_or_dir) {
    std::error_code error;
    const fs::file_status status = fs::status(file_or_dir, error);
    TESSERA_CHECK(fs::exists(status), "cannot read TensorBoard scalars from "
                                          << file_or_dir << ": " << (error ? error.message() : "it does not exist"));
    std::vector<ScalarEvent> scalars;
    if (!fs::is_directory(status)) {
        read_event_file(file_or_dir, scalars);
        return scalars;
    }
    std::vector<fs::path> files;
    fs::directory_iterator it(file_or_dir, error);
    for (; !error && it != fs::directory_iterator(); it.increment(error)) {
        std::error_code type_error;
        if (it->is_regular_file(type_error) && it->path().filename().string().find("tfevents") != std::string::npos)
            files.push_back(it->path());
    }
    TESSERA_CHECK(!error, "cannot list the TensorBoard log folder " << file_or_dir << ": " << error.message());
    std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
        return comes_before(a.filename().string(), b.filename().string());
    });
    for (const fs::path& file : files) read_event_file(file, scalars);
    return scalars;
}

}  // namespace tessera::io
