#include "io/safetensors.hpp"

#include "core/error.hpp"
#include "core/json_support.hpp"
#include "core/user_files.hpp"
#include "io/atomic_file.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>
#include <system_error>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

namespace tessera::io {

namespace fs = std::filesystem;
using json::in_quotes;
using json::Json;
using json::type_name;

// The format is little-endian and we copy tensor bytes as they are in memory.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

constexpr std::string_view k_metadata_key = "__metadata__";
// The reference implementation's limit: a larger "header" means the file is not safetensors at all.
constexpr std::uint64_t k_max_header_bytes = 100'000'000;
constexpr DType k_all_dtypes[] = {DType::BF16, DType::F16, DType::F32, DType::I32, DType::U8};

std::string supported_dtype_names() {
    std::string names;
    for (DType dtype : k_all_dtypes) {
        if (!names.empty()) names += ", ";
        names += safetensors_dtype_name(dtype);
    }
    return names;
}

// ---- checksums -----------------------------------------------------------------------------------

constexpr std::string_view k_checksum_key = "tessera.data_crc32";

std::uint32_t crc32_of(const void* bytes, std::size_t size, std::uint32_t crc) {
    return static_cast<std::uint32_t>(crc32_z(crc, static_cast<const Bytef*>(bytes), size));
}

std::string checksum_text(std::uint32_t crc) {
    char text[16];
    std::snprintf(text, sizeof text, "%08x", crc);
    return text;
}

// ---- writing ------------------------------------------------------------------------------------

// The header (padded) and each tensor's dense bytes, in file order.
struct Plan {
    std::string header;
    std::vector<Tensor> packed;
};

Plan plan_file(const TensorFile& file) {
    Json root = Json::object();
    std::uint64_t offset = 0;  // bytes
    Plan plan;
    plan.packed.reserve(file.tensors.size());
    for (const TensorRecord& record : file.tensors) {
        TESSERA_CHECK(record.name != k_metadata_key, "cannot write a tensor named "
                                                         << in_quotes(k_metadata_key)
                                                         << ": safetensors reserves that key for the metadata");
        TESSERA_CHECK(!root.contains(record.name),
                      "cannot write two tensors named " << in_quotes(record.name) << ": names must be unique");
        TESSERA_CHECK(record.value.is_defined(),
                      "cannot write tensor " << in_quotes(record.name) << ": it is undefined (no storage)");
        const std::uint64_t size = record.value.num_bytes();
        Json entry = Json::object();
        entry["dtype"] = std::string(safetensors_dtype_name(record.value.dtype()));
        entry["shape"] = record.value.shape();
        entry["data_offsets"] = Json::array({offset, offset + size});
        root[record.name] = std::move(entry);
        offset += size;
        plan.packed.push_back(record.value.contiguous());
    }
    // A CRC-32 of the data section, so that a flipped byte in a tensor is found when the file is read
    // (the header is covered by its own checks). Other readers ignore the extra metadata string.
    std::uint32_t checksum = 0;
    for (const Tensor& tensor : plan.packed) checksum = crc32_of(tensor.raw_data(), tensor.num_bytes(), checksum);
    std::map<std::string, std::string> metadata = file.metadata;
    metadata[std::string(k_checksum_key)] = checksum_text(checksum);
    root[std::string(k_metadata_key)] = metadata;
    try {
        plan.header = root.dump();  // compact; std::map keeps the keys sorted
    } catch (const Json::type_error& error) {
        // dump() refuses invalid UTF-8 in a name or a metadata string.
        TESSERA_REJECT("cannot write safetensors: a tensor name or metadata string is not valid UTF-8 (" << error.what()
                                                                                                         << ")");
    }
    // Spaces up to a multiple of 8 so that the data after the 8-byte length is 8-byte aligned.
    plan.header.append((8 - plan.header.size() % 8) % 8, ' ');
    return plan;
}

void write_plan(const Plan& plan, FileSink& sink) {
    const std::uint64_t header_length = plan.header.size();
    std::byte length_bytes[8];
    std::memcpy(length_bytes, &header_length, 8);
    sink.write(std::span<const std::byte>(length_bytes));
    sink.write(plan.header);
    for (const Tensor& tensor : plan.packed) {
        if (tensor.num_bytes() == 0) continue;
        sink.write(std::span(static_cast<const std::byte*>(tensor.raw_data()), tensor.num_bytes()));
    }
}

class VectorSink final : public FileSink {
public:
    explicit VectorSink(std::vector<std::byte>& out) : m_out(out) {}
    void write(std::span<const std::byte> bytes) override { m_out.insert(m_out.end(), bytes.begin(), bytes.end()); }
    using FileSink::write;
    std::uint64_t num_bytes_written() const override { return m_out.size(); }

private:
    std::vector<std::byte>& m_out;
};

// ---- reading ------------------------------------------------------------------------------------

struct Entry {
    std::string name;
    DType dtype = DType::F32;
    Shape shape;
    std::uint64_t begin = 0;  // bytes into the data buffer
    std::uint64_t end = 0;    // bytes, exclusive
};

std::string describe_range(std::uint64_t begin, std::uint64_t end) {
    std::ostringstream text;  // not "[" + std::to_string(...): GCC 12 warns falsely (-Wrestrict) on that
    text << '[' << begin << ", " << end << ')';
    return text.str();
}

// A JSON integer in [0, max], or nullopt.
std::optional<std::uint64_t> non_negative_integer(const Json& value, std::uint64_t max) {
    if (value.is_number_unsigned()) {
        const auto number = value.get<std::uint64_t>();
        return number <= max ? std::optional(number) : std::nullopt;
    }
    if (value.is_number_integer()) {
        const auto number = value.get<std::int64_t>();
        if (number < 0 || static_cast<std::uint64_t>(number) > max) return std::nullopt;
        return static_cast<std::uint64_t>(number);
    }
    return std::nullopt;
}

Entry parse_entry(const std::string& name, const Json& value, const std::string& origin, std::uint64_t data_size) {
    const std::string where = origin + ": tensor " + in_quotes(name);
    TESSERA_CHECK(value.is_object(),
                  where << ": expected an object with dtype, shape and data_offsets, got " << type_name(value));
    std::vector<std::string_view> present;
    for (const auto& item : value.items()) present.push_back(item.key());
    for (std::string_view key : {"dtype", "shape", "data_offsets"}) {
        if (value.contains(key)) continue;
        const json::Closest near = json::closest(key, present);
        TESSERA_REJECT(
              where << ": missing " << in_quotes(key)
                    << (near.is_close ? "; is " + in_quotes(near.name) + " a misspelling of it?" : std::string()));
    }

    Entry entry;
    entry.name = name;
    const Json& dtype = value["dtype"];
    TESSERA_CHECK(dtype.is_string(), where << ": dtype: expected a string such as \"F32\", got " << type_name(dtype));
    const std::optional<DType> parsed = dtype_from_safetensors_name(dtype.get<std::string>());
    TESSERA_CHECK(parsed.has_value(), where << ": unsupported dtype " << in_quotes(dtype.get<std::string>())
                                            << " (Tessera reads " << supported_dtype_names() << ")");
    entry.dtype = *parsed;

    const Json& shape = value["shape"];
    TESSERA_CHECK(shape.is_array(),
                  where << ": shape: expected an array of non-negative integers, got " << type_name(shape));
    std::uint64_t num_elements = 1;
    bool overflow = false;
    for (std::size_t axis = 0; axis < shape.size(); ++axis) {
        const auto extent = non_negative_integer(shape[axis], std::numeric_limits<std::int64_t>::max());
        TESSERA_CHECK(extent.has_value(), where << ": shape: expected non-negative integers, got "
                                                << json::shown(shape[axis]) << " on axis " << axis);
        entry.shape.push_back(static_cast<std::int64_t>(*extent));
        overflow = overflow || __builtin_mul_overflow(num_elements, *extent, &num_elements);
    }
    std::uint64_t expected_bytes = 0;
    overflow = overflow || __builtin_mul_overflow(num_elements, dtype_size(entry.dtype), &expected_bytes);

    const Json& offsets = value["data_offsets"];
    const bool is_pair = offsets.is_array() && offsets.size() == 2;
    const auto begin =
        is_pair ? non_negative_integer(offsets[0], std::numeric_limits<std::uint64_t>::max()) : std::nullopt;
    const auto end =
        is_pair ? non_negative_integer(offsets[1], std::numeric_limits<std::uint64_t>::max()) : std::nullopt;
    TESSERA_CHECK(begin && end, where << ": data_offsets: expected [begin, end], two non-negative integers, got "
                                      << json::shown(offsets));
    entry.begin = *begin;
    entry.end = *end;
    TESSERA_CHECK(entry.end >= entry.begin,
                  where << ": data_offsets [" << entry.begin << ", " << entry.end << "] end before they begin");
    TESSERA_CHECK(entry.end <= data_size, where << ": data_offsets [" << entry.begin << ", " << entry.end
                                                << "] run past the end of the data buffer (" << data_size
                                                << " bytes after the header)");
    TESSERA_CHECK(!overflow && entry.end - entry.begin == expected_bytes,
                  where << ": shape " << shape_to_string(entry.shape) << " of " << dtype.get<std::string>() << " needs "
                        << (overflow ? std::string("more than 2^64") : std::to_string(expected_bytes))
                        << " bytes, but data_offsets [" << entry.begin << ", " << entry.end << "] hold "
                        << entry.end - entry.begin);
    return entry;
}

// The tensors must tile the data buffer: sorted by offset, each begins where the previous ended.
void check_coverage(std::vector<Entry>& entries, const std::string& origin, std::uint64_t data_size) {
    std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    std::uint64_t covered = 0;  // bytes
    const Entry* previous = nullptr;
    for (const Entry& entry : entries) {
        TESSERA_CHECK(entry.begin >= covered, origin << ": tensors " << in_quotes(previous ? previous->name : "")
                                                     << " (bytes "
                                                     << describe_range(previous ? previous->begin : 0, covered)
                                                     << ") and " << in_quotes(entry.name) << " (bytes "
                                                     << describe_range(entry.begin, entry.end) << ") overlap");
        TESSERA_CHECK(entry.begin == covered, origin << ": the tensors do not cover the data buffer: bytes "
                                                     << describe_range(covered, entry.begin) << " belong to no tensor");
        covered = entry.end;
        if (entry.end > entry.begin) previous = &entry;
    }
    TESSERA_CHECK(covered == data_size, origin << ": the tensors do not cover the data buffer: bytes "
                                               << describe_range(covered, data_size) << " (of " << data_size
                                               << ") belong to no tensor");
}

std::vector<std::byte> read_whole_file(const fs::path& path) {
    require_regular_file(path, "safetensors file");  // before open(): opening a FIFO blocks
    int fd = -1;
    do {
        fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    const auto fail = [&]() {
        const int error = errno;
        if (fd >= 0) ::close(fd);
        TESSERA_REJECT("cannot read " << path << ": " << std::generic_category().message(error));
    };
    if (fd < 0) fail();
    struct stat info {};
    if (::fstat(fd, &info) != 0) fail();
    if (S_ISDIR(info.st_mode)) {
        errno = EISDIR;
        fail();
    }
    std::vector<std::byte> bytes(static_cast<std::size_t>(info.st_size));
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) fail();
        if (got == 0) break;  // shrank while we read: decode reports what is missing
        done += static_cast<std::size_t>(got);
    }
    ::close(fd);
    bytes.resize(done);
    return bytes;
}

}  // namespace

const TensorRecord* TensorFile::find(std::string_view name) const {
    for (const TensorRecord& record : tensors)
        if (record.name == name) return &record;
    return nullptr;
}

std::string_view safetensors_dtype_name(DType dtype) {
    switch (dtype) {
        case DType::F32: return "F32";
        case DType::BF16: return "BF16";
        case DType::F16: return "F16";
        case DType::I32: return "I32";
        case DType::U8: return "U8";
    }
    TESSERA_ASSERT(false, "unknown DType " << static_cast<int>(dtype));
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
    for (DType dtype : k_all_dtypes)
        if (safetensors_dtype_name(dtype) == name) return dtype;
    return std::nullopt;
}

std::vector<std::byte> encode_safetensors(const TensorFile& file) {
    const Plan plan = plan_file(file);
    std::vector<std::byte> bytes;
    std::size_t total = 8 + plan.header.size();
    for (const Tensor& tensor : plan.packed) total += tensor.num_bytes();
    bytes.reserve(total);
    VectorSink sink(bytes);
    write_plan(plan, sink);
    return bytes;
}

TensorFile decode_safetensors(std::span<const std::byte> bytes, const std::string& origin) {
    TESSERA_CHECK(bytes.size() >= 8, origin << ": not a safetensors file: it is " << bytes.size()
                                            << " bytes long, shorter than the 8-byte header length the format "
                                               "starts with");
    std::uint64_t header_length = 0;
    std::memcpy(&header_length, bytes.data(), 8);
    TESSERA_CHECK(header_length <= k_max_header_bytes,
                  origin << ": not a safetensors file: the header length in its first 8 bytes is " << header_length
                         << " bytes, more than the format's limit of " << k_max_header_bytes);
    TESSERA_CHECK(header_length <= bytes.size() - 8,
                  origin << ": truncated or not a safetensors file: the header length is " << header_length
                         << " bytes, but only " << bytes.size() - 8 << " bytes follow the 8-byte length");

    const std::string text(reinterpret_cast<const char*>(bytes.data() + 8), static_cast<std::size_t>(header_length));
    // Byte positions in parse errors count from the start of the header, not of the file.
    const Json root = json::parse_json_strictly(text, origin + ": JSON header (which starts at file byte 8)");
    TESSERA_CHECK(root.is_object(), origin << ": the JSON header is " << type_name(root)
                                           << ", expected an object mapping tensor names to "
                                              "{dtype, shape, data_offsets}");

    const std::span<const std::byte> data = bytes.subspan(8 + static_cast<std::size_t>(header_length));
    TensorFile file;
    std::vector<Entry> entries;
    for (const auto& item : root.items()) {
        if (item.key() == k_metadata_key) {
            const Json& metadata = item.value();
            TESSERA_CHECK(metadata.is_object(), origin << ": " << in_quotes(k_metadata_key)
                                                       << ": expected an object of strings, got "
                                                       << type_name(metadata));
            for (const auto& field : metadata.items()) {
                TESSERA_CHECK(field.value().is_string(), origin << ": " << in_quotes(k_metadata_key) << "."
                                                                << in_quotes(field.key()) << ": expected a string, got "
                                                                << type_name(field.value()));
                file.metadata.emplace(field.key(), field.value().get<std::string>());
            }
            continue;
        }
        entries.push_back(parse_entry(item.key(), item.value(), origin, data.size()));
    }
    check_coverage(entries, origin, data.size());
    if (const auto stored = file.metadata.find(std::string(k_checksum_key)); stored != file.metadata.end()) {
        const std::string computed = checksum_text(crc32_of(data.data(), data.size(), 0));
        TESSERA_CHECK(stored->second == computed,
                      origin << ": the tensor data is damaged: its CRC-32 is " << computed << " but the file was written with "
                             << stored->second << " (" << k_checksum_key << "). A byte changed on disk or in a copy; use another copy.");
        file.metadata.erase(stored);
    }

    file.tensors.reserve(entries.size());
    for (Entry& entry : entries) {
        Tensor tensor = Tensor::empty(std::move(entry.shape), entry.dtype);
        if (entry.end > entry.begin)
            std::memcpy(tensor.raw_data(), data.data() + entry.begin,
                        static_cast<std::size_t>(entry.end - entry.begin));
        file.tensors.push_back({std::move(entry.name), std::move(tensor)});
    }
    return file;
}

void write_safetensors(const fs::path& path, const TensorFile& file) {
    const Plan plan = plan_file(file);  // validates before the old file is touched
    write_file_atomically(path, [&](FileSink& sink) { write_plan(plan, sink); });
}

TensorFile read_safetensors(const fs::path& path) {
    const std::vector<std::byte> bytes = read_whole_file(path);
    return decode_safetensors(bytes, path.string());
}

}  // namespace tessera::io
