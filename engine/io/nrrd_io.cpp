// NRRD (.nrrd with the data attached, .nhdr with a detached data file), as Teem defines it
// (teem.sourceforge.net/nrrd/format.html) and 3D Slicer writes it: read and written here with zlib.
//
// Read: NRRD0001–0005 headers; 2D and 3D scalar volumes (an axis of size 1 beyond them is dropped);
// every scalar type; encodings raw, gzip, text and hex, either endian; "space" (RAS, LAS, LPS and their
// long names; scanner-xyz and 3D-right-handed taken as LPS, with a warning), "space directions" and
// "space origin", or per-axis "spacings" without a space; "line skip" and "byte skip" (−1: the data
// ends the file). A detached data file must lie beside its header (as MetaImage's; the same opt-in).
// Written: space left-posterior-superior, space directions and origin, little-endian, gzip attached
// (.nrrd) or raw in a .raw beside the .nhdr.
#include "io/label_descriptions.hpp"
#include "io/raw_image.hpp"

#include "core/error.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

namespace tessera::io_detail {

namespace {

constexpr NamedScalarType nrrd_types[] = {
    {"signed char", ScalarType::I8},      {"int8", ScalarType::I8},        {"int8_t", ScalarType::I8},
    {"uchar", ScalarType::U8},            {"unsigned char", ScalarType::U8}, {"uint8", ScalarType::U8},
    {"uint8_t", ScalarType::U8},          {"short", ScalarType::I16},      {"short int", ScalarType::I16},
    {"signed short", ScalarType::I16},    {"signed short int", ScalarType::I16}, {"int16", ScalarType::I16},
    {"int16_t", ScalarType::I16},         {"ushort", ScalarType::U16},     {"unsigned short", ScalarType::U16},
    {"unsigned short int", ScalarType::U16}, {"uint16", ScalarType::U16},  {"uint16_t", ScalarType::U16},
    {"int", ScalarType::I32},             {"signed int", ScalarType::I32}, {"int32", ScalarType::I32},
    {"int32_t", ScalarType::I32},         {"uint", ScalarType::U32},       {"unsigned int", ScalarType::U32},
    {"uint32", ScalarType::U32},          {"uint32_t", ScalarType::U32},   {"longlong", ScalarType::I64},
    {"long long", ScalarType::I64},       {"long long int", ScalarType::I64}, {"signed long long", ScalarType::I64},
    {"signed long long int", ScalarType::I64}, {"int64", ScalarType::I64}, {"int64_t", ScalarType::I64},
    {"ulonglong", ScalarType::U64},       {"unsigned long long", ScalarType::U64},
    {"unsigned long long int", ScalarType::U64}, {"uint64", ScalarType::U64}, {"uint64_t", ScalarType::U64},
    {"float", ScalarType::F32},           {"double", ScalarType::F64},
};

std::string_view nrrd_name_of(ScalarType type) {
    switch (type) {
        case ScalarType::U8: return "uint8";
        case ScalarType::I8: return "int8";
        case ScalarType::U16: return "uint16";
        case ScalarType::I16: return "int16";
        case ScalarType::U32: return "uint32";
        case ScalarType::I32: return "int32";
        case ScalarType::U64: return "uint64";
        case ScalarType::I64: return "int64";
        case ScalarType::F32: return "float";
        case ScalarType::F64: return "double";
    }
    return "float";
}

std::string lower_trimmed(std::string text) {
    const std::size_t begin = text.find_first_not_of(" \t\r");
    if (begin == std::string::npos) return "";
    text = text.substr(begin, text.find_last_not_of(" \t\r") - begin + 1);
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return text;
}

std::string trimmed(const std::string& text) {
    const std::size_t begin = text.find_first_not_of(" \t\r");
    if (begin == std::string::npos) return "";
    return text.substr(begin, text.find_last_not_of(" \t\r") - begin + 1);
}

struct NrrdHeader {
    std::map<std::string, std::string> fields;  // lower-case field name → value
    std::map<std::string, std::string> key_values;  // 'key:=value' pairs, as written (escapes undone)
    std::map<std::string, int> line_of;
    std::uint64_t header_bytes = 0;             // where attached data starts
};

// A key/value pair's text with NRRD's escapes undone: \n is a newline, \\ a backslash.
std::string unescaped(const std::string& text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '\\' && i + 1 < text.size() && (text[i + 1] == 'n' || text[i + 1] == '\\')) {
            out += text[i + 1] == 'n' ? '\n' : '\\';
            ++i;
        } else {
            out += text[i];
        }
    }
    return out;
}

NrrdHeader parse_header(const std::filesystem::path& path) {
    constexpr std::size_t max_header_bytes = 1 << 20;
    std::ifstream in(path, std::ios::binary);
    TESSERA_CHECK(in.is_open(), "cannot open " << quoted(path) << ": " << std::strerror(errno));
    std::string prefix(max_header_bytes, '\0');
    in.read(prefix.data(), static_cast<std::streamsize>(prefix.size()));
    prefix.resize(static_cast<std::size_t>(in.gcount()));
    TESSERA_CHECK(prefix.size() >= 8 && prefix.compare(0, 7, "NRRD000") == 0 && prefix[7] >= '1' && prefix[7] <= '5',
                  quoted(path) << " is not a NRRD file: it does not start with the magic NRRD0001 … NRRD0005. Is it another "
                               << "kind of file saved as " << full_extension(path) << "?");
    NrrdHeader header;
    std::size_t begin = prefix.find('\n');
    int line_number = 1;
    bool ended = false;
    while (begin != std::string::npos && begin + 1 <= prefix.size()) {
        ++begin;
        if (begin >= prefix.size()) break;
        std::size_t end = prefix.find('\n', begin);
        if (end == std::string::npos) end = prefix.size();
        std::string line = prefix.substr(begin, end - begin);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        ++line_number;
        if (line.empty()) {  // the blank line ending the header
            header.header_bytes = std::min<std::uint64_t>(end + 1, prefix.size());
            ended = true;
            break;
        }
        begin = end;
        if (line[0] == '#') continue;
        const bool printable = std::all_of(line.begin(), line.end(), [](unsigned char c) { return c >= 32 || c == '\t'; });
        TESSERA_CHECK(printable && line.size() < 4096, quoted(path) << " has a damaged NRRD header: line " << line_number
                                                                    << " is not text. Get a fresh copy.");
        if (const std::size_t pair = line.find(":="); pair != std::string::npos) {
            header.key_values[unescaped(line.substr(0, pair))] = unescaped(line.substr(pair + 2));
            continue;
        }
        const std::size_t colon = line.find(": ");
        TESSERA_CHECK(colon != std::string::npos, quoted(path) << " has a damaged NRRD header: line " << line_number << " ('"
                                                               << line.substr(0, 60) << "') is neither 'field: value', "
                                                               << "'key:=value' nor a comment.");
        const std::string key = lower_trimmed(line.substr(0, colon));
        const std::string canonical = key == "datafile" ? "data file" : key == "lineskip" ? "line skip" : key == "byteskip" ? "byte skip" : key;
        TESSERA_CHECK(!header.fields.contains(canonical), quoted(path) << " has a damaged NRRD header: line " << line_number
                                                                       << " gives '" << key << "' again (each field may "
                                                                       << "appear once). Fix the header.");
        header.fields[canonical] = trimmed(line.substr(colon + 2));
        header.line_of[canonical] = line_number;
    }
    if (!ended) header.header_bytes = prefix.size();  // a detached header may end without a blank line
    return header;
}

const std::string* field(const NrrdHeader& header, const char* name) {
    const auto found = header.fields.find(name);
    return found == header.fields.end() ? nullptr : &found->second;
}

const std::string& required(const std::filesystem::path& path, const NrrdHeader& header, const char* name) {
    const std::string* value = field(header, name);
    TESSERA_CHECK(value != nullptr, quoted(path) << " has no '" << name << ":' field in its NRRD header (a required one)");
    return *value;
}

// "(1,0,0) (0,1.5,0) none": the vectors, an empty one for "none".
std::vector<std::vector<double>> parse_vectors(const std::filesystem::path& path, const std::string& text, const char* what) {
    std::vector<std::vector<double>> vectors;
    std::size_t at = 0;
    while (true) {
        at = text.find_first_not_of(" \t", at);
        if (at == std::string::npos) break;
        if (text.compare(at, 4, "none") == 0) {
            vectors.emplace_back();
            at += 4;
            continue;
        }
        TESSERA_CHECK(text[at] == '(', quoted(path) << " has a malformed NRRD '" << what << "': expected '(x,y,z)' or none, got '"
                                                    << text.substr(at, 30) << "'");
        const std::size_t close = text.find(')', at);
        TESSERA_CHECK(close != std::string::npos, quoted(path) << " has a malformed NRRD '" << what << "': a '(' is not closed");
        std::vector<double> vector;
        std::stringstream components(text.substr(at + 1, close - at - 1));
        for (std::string item; std::getline(components, item, ',');) {
            char* end = nullptr;
            const std::string token = trimmed(item);
            const double value = std::strtod(token.c_str(), &end);
            TESSERA_CHECK(!token.empty() && end == token.c_str() + token.size() && std::isfinite(value),
                          quoted(path) << " has a malformed NRRD '" << what << "': '" << token << "' is not a finite number");
            vector.push_back(value);
        }
        vectors.push_back(std::move(vector));
        at = close + 1;
    }
    return vectors;
}

std::vector<double> parse_numbers(const std::filesystem::path& path, const std::string& text, const char* what) {
    std::istringstream in(text);
    std::vector<double> values;
    for (std::string token; in >> token;) {
        if (lower_trimmed(token) == "nan") {
            values.push_back(std::nan(""));
            continue;
        }
        char* end = nullptr;
        const double value = std::strtod(token.c_str(), &end);
        TESSERA_CHECK(end == token.c_str() + token.size(), quoted(path) << " has a malformed NRRD '" << what << "': '" << token
                                                                        << "' is not a number");
        values.push_back(value);
    }
    return values;
}

// The voxel bytes after decoding the encoding (still in the file's byte order for raw and gzip).
std::vector<std::byte> read_data(const std::filesystem::path& path, const std::filesystem::path& data_path, bool detached,
                                 const NrrdHeader& header, const std::string& encoding, std::uint64_t data_bytes,
                                 ScalarType scalar_type, std::uint64_t num_voxels) {
    std::ifstream in(data_path, std::ios::binary);
    TESSERA_CHECK(in.is_open(), "cannot open " << quoted(data_path) << ": " << std::strerror(errno));
    std::error_code error;
    const std::uint64_t file_bytes = std::filesystem::file_size(data_path, error);
    std::uint64_t offset = detached ? 0 : header.header_bytes;
    if (const std::string* text = field(header, "line skip")) {
        const long long lines = std::atoll(text->c_str());
        std::string skipped;
        in.seekg(static_cast<std::streamoff>(offset));
        for (long long i = 0; i < lines && std::getline(in, skipped); ++i) {}
        TESSERA_CHECK(in.good(), quoted(path) << " says 'line skip: " << *text << "', more lines than the data file holds");
        offset = static_cast<std::uint64_t>(in.tellg());
    }
    long long byte_skip = 0;
    if (const std::string* text = field(header, "byte skip")) byte_skip = std::atoll(text->c_str());
    const bool raw = encoding == "raw";
    if (byte_skip == -1) {
        TESSERA_CHECK(raw, quoted(path) << " says 'byte skip: -1' (the data ends the file), which NRRD allows only with raw encoding");
        TESSERA_CHECK(file_bytes >= data_bytes, quoted(path) << " is truncated: its header promises " << data_bytes
                                                             << " bytes of voxels but " << quoted(data_path) << " holds "
                                                             << file_bytes);
        offset = file_bytes - data_bytes;
    } else {
        TESSERA_CHECK(byte_skip >= 0, quoted(path) << " says 'byte skip: " << byte_skip << "': only -1 or a count of bytes is valid");
        offset += static_cast<std::uint64_t>(byte_skip);
    }
    TESSERA_CHECK(offset <= file_bytes, quoted(path) << " is truncated: its voxels would start at byte " << offset << " of "
                                                     << quoted(data_path) << ", which holds " << file_bytes);
    const std::uint64_t available = file_bytes - offset;
    std::vector<std::byte> bytes;
    in.clear();
    in.seekg(static_cast<std::streamoff>(offset));
    if (raw) {
        TESSERA_CHECK(available >= data_bytes, quoted(path) << " is truncated: its header promises " << data_bytes
                                                            << " bytes of voxels but the data holds " << available
                                                            << ". Get a complete copy.");
        bytes.resize(static_cast<std::size_t>(data_bytes));
        in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(data_bytes));
        TESSERA_CHECK(static_cast<std::uint64_t>(in.gcount()) == data_bytes, "cannot read " << quoted(data_path) << ": a read failed");
        return bytes;
    }
    if (encoding == "gzip" || encoding == "gz") {
        constexpr double max_deflate_ratio = 1032;  // deflate expands 1,032:1 at the most
        TESSERA_CHECK(static_cast<double>(data_bytes) <= static_cast<double>(available) * max_deflate_ratio + 4096,
                      quoted(path) << " has a damaged header: " << available << " bytes of gzip data cannot expand to the "
                                   << data_bytes << " bytes of voxels it promises. Get a complete copy.");
        std::vector<unsigned char> compressed(static_cast<std::size_t>(available));
        in.read(reinterpret_cast<char*>(compressed.data()), static_cast<std::streamsize>(available));
        bytes.resize(static_cast<std::size_t>(data_bytes));
        z_stream stream{};
        TESSERA_CHECK(inflateInit2(&stream, 15 + 32) == Z_OK, "zlib could not start");
        std::uint64_t in_done = 0, out_done = 0;
        int status = Z_OK;
        while (status == Z_OK && out_done < data_bytes) {
            const auto in_chunk = static_cast<uInt>(std::min<std::uint64_t>(1u << 30, available - in_done));
            const auto out_chunk = static_cast<uInt>(std::min<std::uint64_t>(1u << 30, data_bytes - out_done));
            stream.next_in = compressed.data() + in_done;
            stream.avail_in = in_chunk;
            stream.next_out = reinterpret_cast<Bytef*>(bytes.data()) + out_done;
            stream.avail_out = out_chunk;
            status = inflate(&stream, Z_NO_FLUSH);
            in_done += in_chunk - stream.avail_in;
            out_done += out_chunk - stream.avail_out;
            if (status == Z_BUF_ERROR && in_done == available) break;  // the stream ended short
        }
        inflateEnd(&stream);
        TESSERA_CHECK(status == Z_OK || status == Z_STREAM_END || status == Z_BUF_ERROR,
                      quoted(path) << " could not be read: its gzip data is damaged (zlib: "
                                   << (stream.msg ? stream.msg : "error " + std::to_string(status)) << "). Get a fresh copy.");
        TESSERA_CHECK(out_done == data_bytes, quoted(path) << " is truncated: its header promises " << data_bytes
                                                           << " bytes of voxels but the gzip data holds " << out_done
                                                           << ". Get a complete copy.");
        return bytes;
    }
    TESSERA_CHECK(encoding == "text" || encoding == "txt" || encoding == "ascii" || encoding == "hex",
                  quoted(path) << " stores its voxels with encoding '" << encoding << "', which Tessera does not read: it reads "
                               << "raw, gzip, text and hex (convert bzip2 with 'unu save -e gzip').");
    // Text and hex: at most ~40 characters per voxel; bounded by the file anyway.
    std::string text(static_cast<std::size_t>(available), '\0');
    in.read(text.data(), static_cast<std::streamsize>(available));
    bytes.resize(static_cast<std::size_t>(data_bytes));
    if (encoding == "hex") {
        std::uint64_t done = 0;
        int high = -1;
        for (char c : text) {
            if (std::isspace(static_cast<unsigned char>(c))) continue;
            const int digit = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                              : (c >= 'a' && c <= 'f')                    ? c - 'a' + 10
                              : (c >= 'A' && c <= 'F')                    ? c - 'A' + 10
                                                                          : -1;
            TESSERA_CHECK(digit >= 0, quoted(path) << " has hex-encoded voxels with a '" << c << "' in them");
            if (high < 0) {
                high = digit;
                continue;
            }
            if (done == data_bytes) break;
            bytes[static_cast<std::size_t>(done++)] = static_cast<std::byte>(high * 16 + digit);
            high = -1;
        }
        TESSERA_CHECK(done == data_bytes, quoted(path) << " is truncated: its hex data holds " << done << " of the "
                                                       << data_bytes << " bytes its header promises");
        return bytes;
    }
    // Text: each number checked against the file's type and kept as float64 (the caller reads the buffer
    // as float64, with the file's type as the source type).
    std::istringstream numbers(text);
    bytes.resize(static_cast<std::size_t>(num_voxels * sizeof(double)));
    for (std::uint64_t index = 0; index < num_voxels; ++index) {
        double value = 0;
        TESSERA_CHECK(static_cast<bool>(numbers >> value), quoted(path) << " holds " << index << " of the " << num_voxels
                                                                        << " text voxels its header promises (or a non-number "
                                                                        << "among them)");
        TESSERA_CHECK(holds_exactly(scalar_type, value), quoted(path) << " holds the text voxel " << value << " (number " << index
                                                                      << "), which a " << scalar_type_name(scalar_type)
                                                                      << " cannot hold. The file is damaged, or its type is wrong.");
        std::memcpy(bytes.data() + index * sizeof(double), &value, sizeof(double));
    }
    return bytes;
}

}  // namespace

// 3D Slicer's segmentation file (.seg.nrrd) names its segments in key/value pairs: SegmentN_Name,
// SegmentN_LabelValue, SegmentN_Color ("r g b" in [0, 1]) and SegmentN_Layer. Names are cosmetic, so a
// segment that cannot be read is left out with a warning rather than refusing the labels.
std::vector<LabelDescription> slicer_segments(const NrrdHeader& header, std::vector<std::string>& warnings) {
    std::vector<LabelDescription> segments;
    for (int index = 0;; ++index) {
        const std::string prefix = "Segment" + std::to_string(index) + "_";
        const auto name = header.key_values.find(prefix + "Name");
        const auto value = header.key_values.find(prefix + "LabelValue");
        if (name == header.key_values.end() && value == header.key_values.end()) break;
        const std::string what = "segment " + std::to_string(index) + (name != header.key_values.end() ? " ('" + name->second + "')" : "");
        if (value == header.key_values.end()) {
            warnings.push_back(what + " has no " + prefix + "LabelValue: left out of the label names");
            continue;
        }
        char* end = nullptr;
        const long long label = std::strtoll(value->second.c_str(), &end, 10);
        if (end == value->second.c_str() || *end != '\0' || label < 1 || label > std::numeric_limits<std::int32_t>::max()) {
            warnings.push_back(what + " has label value '" + value->second + "', not a whole number from 1: left out of the label names");
            continue;
        }
        if (const auto layer = header.key_values.find(prefix + "Layer"); layer != header.key_values.end() && layer->second != "0") {
            warnings.push_back(what + " is on layer " + layer->second + " of a segmentation with overlapping segments; Tessera reads "
                               "layer 0 only: export the segmentation as a label map from 3D Slicer to keep every segment");
            continue;
        }
        LabelDescription description;
        description.value = static_cast<std::int32_t>(label);
        description.name = name != header.key_values.end() ? name->second : "Segment " + std::to_string(index);
        // One line in a legend or a status bar: control characters (an escaped newline) become spaces.
        std::replace_if(description.name.begin(), description.name.end(), [](unsigned char c) { return c < 32 || c == 127; }, ' ');
        if (const auto color = header.key_values.find(prefix + "Color"); color != header.key_values.end()) {
            std::istringstream in(color->second);
            std::array<float, 3> rgb{};
            if (in >> rgb[0] >> rgb[1] >> rgb[2] && (in >> std::ws).eof() &&
                std::all_of(rgb.begin(), rgb.end(), [](float c) { return c >= 0.0f && c <= 1.0f; })) {
                description.color = rgb;
            } else {
                warnings.push_back(what + " has colour '" + color->second + "', not three numbers from 0 to 1: default colour used");
            }
        }
        segments.push_back(std::move(description));
    }
    std::sort(segments.begin(), segments.end(), [](const LabelDescription& a, const LabelDescription& b) { return a.value < b.value; });
    for (std::size_t i = 1; i < segments.size(); ++i) {
        if (segments[i].value == segments[i - 1].value) {
            warnings.push_back("segments '" + segments[i - 1].name + "' and '" + segments[i].name + "' both have label value " +
                               std::to_string(segments[i].value) + ": the first is shown");
        }
    }
    segments.erase(std::unique(segments.begin(), segments.end(),
                               [](const LabelDescription& a, const LabelDescription& b) { return a.value == b.value; }),
                   segments.end());
    return segments;
}

RawImage read_nrrd(const std::filesystem::path& path) {
    const NrrdHeader header = parse_header(path);

    const std::string type_text = lower_trimmed(required(path, header, "type"));
    const auto type = std::find_if(std::begin(nrrd_types), std::end(nrrd_types), [&](const NamedScalarType& t) { return t.name == type_text; });
    TESSERA_CHECK(type != std::end(nrrd_types), quoted(path) << " stores voxels of NRRD type '" << type_text
                                                             << "', which Tessera does not read: it reads the integer types, "
                                                                "float and double.");
    const int dimension = std::atoi(required(path, header, "dimension").c_str());
    TESSERA_CHECK(dimension >= 1 && dimension <= 16, quoted(path) << " has a damaged NRRD header: dimension is '"
                                                                  << required(path, header, "dimension") << "'");
    const std::vector<double> size_values = parse_numbers(path, required(path, header, "sizes"), "sizes");
    TESSERA_CHECK(static_cast<int>(size_values.size()) == dimension,
                  quoted(path) << " has a damaged NRRD header: 'sizes' lists " << size_values.size() << " extents for dimension "
                               << dimension);
    std::vector<std::int64_t> sizes;
    std::string size_text;
    for (double value : size_values) {
        TESSERA_CHECK(value >= 1 && value <= 2147483647 && value == std::floor(value),
                      quoted(path) << " has a damaged NRRD header: 'sizes: " << required(path, header, "sizes")
                                   << "' (each a whole number of at least 1)");
        sizes.push_back(static_cast<std::int64_t>(value));
        size_text += (size_text.empty() ? "" : "×") + std::to_string(sizes.back());
    }
    // Axes beyond the third must be of size 1 (a single volume).
    for (int axis = 3; axis < dimension; ++axis) {
        TESSERA_CHECK(sizes[static_cast<std::size_t>(axis)] == 1,
                      quoted(path) << " holds a " << dimension << "D array (" << size_text << "): Tessera reads one 2D or 3D "
                                   << "scalar volume. Slice out one volume first (e.g. unu slice).");
    }
    TESSERA_CHECK(dimension >= 2, quoted(path) << " holds a 1D array (" << size_text << "): Tessera reads 2D and 3D images");

    const std::string encoding = lower_trimmed(required(path, header, "encoding"));
    const ScalarType scalar_type = type->scalar_type;
    const std::uint64_t element_bytes = scalar_type_size(scalar_type);
    const bool text_encoding = encoding == "text" || encoding == "txt" || encoding == "ascii";
    bool big_endian = false;
    if (element_bytes > 1 && !text_encoding) {
        const std::string* endian = field(header, "endian");
        TESSERA_CHECK(endian != nullptr, quoted(path) << " has no 'endian:' field, which NRRD requires for " << type_text
                                                      << " voxels in " << encoding << " encoding");
        const std::string value = lower_trimmed(*endian);
        TESSERA_CHECK(value == "little" || value == "big", quoted(path) << " says 'endian: " << *endian << "' (little or big)");
        big_endian = value == "big";
    }
    std::uint64_t num_voxels = 1;
    for (std::int64_t extent : sizes) {
        TESSERA_CHECK(num_voxels <= (std::uint64_t{1} << 40) / static_cast<std::uint64_t>(extent),
                      quoted(path) << " claims sizes " << size_text << ", which is not plausible: the header is damaged.");
        num_voxels *= static_cast<std::uint64_t>(extent);
    }
    check_volume_budget(path, size_text, num_voxels, text_encoding ? sizeof(double) : element_bytes);

    // Where the voxels are.
    std::filesystem::path data_path = path;
    bool detached = false;
    if (const std::string* data_file = field(header, "data file")) {
        TESSERA_CHECK(data_file->rfind("LIST", 0) != 0 && std::count(data_file->begin(), data_file->end(), ' ') == 0,
                      quoted(path) << " spreads its voxels over several files (data file: " << *data_file
                                   << "): Tessera reads one data file; save it as a single .nrrd.");
        data_path = checked_data_file(path, *data_file, "data file: " + *data_file);
        detached = true;
    }
    const std::uint64_t data_bytes = num_voxels * element_bytes;
    std::vector<std::byte> bytes = read_data(path, data_path, detached, header, encoding, data_bytes, scalar_type, num_voxels);
    if (!text_encoding && big_endian == (std::endian::native == std::endian::little)) {
        swap_byte_order(bytes.data(), num_voxels, element_bytes);
    }

    // Geometry.
    RawImage raw;
    ImageGeometry& geometry = raw.geometry;
    const std::size_t spatial = dimension >= 3 ? 3 : 2;
    for (std::size_t axis = 0; axis < spatial; ++axis) geometry.size[axis] = sizes[axis];
    std::array<double, 3> flip{1, 1, 1};  // the space's axes → LPS
    if (const std::string* space = field(header, "space")) {
        const std::string name = lower_trimmed(*space);
        if (name == "right-anterior-superior" || name == "ras") {
            flip = {-1, -1, 1};
        } else if (name == "left-anterior-superior" || name == "las") {
            flip = {1, -1, 1};
        } else if (name == "left-posterior-superior" || name == "lps") {
        } else if (name == "scanner-xyz" || name == "3d-right-handed") {
            raw.warnings.push_back("the NRRD space '" + *space + "' names no patient axes: taken as LPS");
        } else {
            TESSERA_REJECT(quoted(path) << " is in NRRD space '" << *space << "', which Tessera does not read: it reads RAS, LAS, "
                                        << "LPS (and scanner-xyz or 3D-right-handed, taken as LPS)");
        }
    }
    if (const std::string* directions_text = field(header, "space directions")) {
        const auto directions = parse_vectors(path, *directions_text, "space directions");
        TESSERA_CHECK(static_cast<int>(directions.size()) == dimension,
                      quoted(path) << " has a malformed NRRD 'space directions': " << directions.size() << " entries for "
                                   << dimension << " axes");
        std::array<std::array<double, 3>, 3> columns{};
        for (std::size_t axis = 0; axis < spatial; ++axis) {
            const std::vector<double>& d = directions[axis];
            TESSERA_CHECK(d.size() == 2 || d.size() == 3, quoted(path) << " has a malformed NRRD 'space directions': axis "
                                                                       << axis << " is not a 2 or 3 component vector");
            double norm = 0;
            for (std::size_t c = 0; c < d.size(); ++c) norm += d[c] * d[c];
            norm = std::sqrt(norm);
            TESSERA_CHECK(norm > 0, quoted(path) << " has a zero space direction for axis " << axis << ". The header is damaged.");
            geometry.spacing[axis] = norm;
            for (std::size_t c = 0; c < d.size(); ++c) columns[axis][c] = flip[c] * d[c] / norm + 0.0;  // no −0
        }
        if (spatial == 2) {  // the slice normal: the cross product of the two axes
            const auto& a = columns[0];
            const auto& b = columns[1];
            columns[2] = {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
            if (columns[2] == std::array<double, 3>{0, 0, 0}) columns[2] = {0, 0, 1};
        }
        for (std::size_t axis = 0; axis < 3; ++axis) {
            for (std::size_t c = 0; c < 3; ++c) geometry.direction[c * 3 + axis] = columns[axis][c];
        }
    } else if (const std::string* spacings_text = field(header, "spacings")) {
        const std::vector<double> spacings = parse_numbers(path, *spacings_text, "spacings");
        TESSERA_CHECK(static_cast<int>(spacings.size()) == dimension, quoted(path) << " has a malformed NRRD 'spacings': "
                                                                                   << spacings.size() << " values for "
                                                                                   << dimension << " axes");
        for (std::size_t axis = 0; axis < spatial; ++axis) {
            if (std::isnan(spacings[axis])) continue;
            TESSERA_CHECK(std::isfinite(spacings[axis]) && spacings[axis] != 0,
                          quoted(path) << " has a zero or infinite spacing for axis " << axis << ". The header is damaged.");
            geometry.spacing[axis] = std::abs(spacings[axis]);
        }
    }
    if (const std::string* origin_text = field(header, "space origin")) {
        const auto origin = parse_vectors(path, *origin_text, "space origin");
        TESSERA_CHECK(origin.size() == 1 && (origin[0].size() == 2 || origin[0].size() == 3),
                      quoted(path) << " has a malformed NRRD 'space origin': " << *origin_text);
        for (std::size_t c = 0; c < origin[0].size(); ++c) geometry.origin[c] = flip[c] * origin[0][c] + 0.0;
    }
    raw.scalar_type = text_encoding ? ScalarType::F64 : scalar_type;  // text voxels come back as float64
    raw.source_scalar_type = std::string(scalar_type_name(scalar_type));
    auto owner = std::make_shared<std::vector<std::byte>>(std::move(bytes));
    raw.voxels = owner->data();
    raw.owner = owner;
    raw.label_descriptions = slicer_segments(header, raw.warnings);
    return raw;
}

namespace {

// The reader's escapes (unescaped) done: a name may hold a backslash or a newline.
std::string escaped(const std::string& text) {
    std::string out;
    for (char c : text) {
        if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

// 3D Slicer's segment fields for each label (one segment per label value, all on layer 0), as Slicer
// writes them: what it needs to show the segments by name and colour.
std::string slicer_segment_fields(const ImageGeometry& geometry, const std::vector<LabelDescription>& segments) {
    std::ostringstream text;
    const std::string extent = "0 " + std::to_string(geometry.size[0] - 1) + " 0 " + std::to_string(geometry.size[1] - 1) + " 0 " +
                               std::to_string(geometry.size[2] - 1);
    for (std::size_t index = 0; index < segments.size(); ++index) {
        const LabelDescription& segment = segments[index];
        const std::string prefix = "Segment" + std::to_string(index) + "_";
        char color[96];
        const std::array<float, 3> rgb = segment.color.value_or(default_label_color(segment.value));
        std::snprintf(color, sizeof color, "%.6g %.6g %.6g", rgb[0], rgb[1], rgb[2]);
        text << prefix << "Color:=" << color << "\n"
             << prefix << "ColorAutoGenerated:=" << (segment.color ? 0 : 1) << "\n"
             << prefix << "Extent:=" << extent << "\n"
             << prefix << "ID:=Segment_" << segment.value << "\n"
             << prefix << "LabelValue:=" << segment.value << "\n"
             << prefix << "Layer:=0\n"
             << prefix << "Name:=" << escaped(segment.name) << "\n"
             << prefix << "NameAutoGenerated:=0\n"
             << prefix << "Tags:=|\n";
    }
    if (!segments.empty()) {
        text << "Segmentation_ContainedRepresentationNames:=Binary labelmap|\n"
             << "Segmentation_MasterRepresentation:=Binary labelmap\n"
             << "Segmentation_ReferenceImageExtentOffset:=0 0 0\n";
    }
    return text.str();
}

}  // namespace

void write_nrrd(const ImageGeometry& geometry, const EncodedVoxels& voxels, const std::filesystem::path& path,
                const std::vector<LabelDescription>& segments) {
    static_assert(std::endian::native == std::endian::little, "the NRRD writer assumes little-endian");
    const bool attached = full_extension(path) == ".nrrd";
    std::filesystem::path data_path = path;
    data_path.replace_extension(".raw");
    const auto vector = [](double x, double y, double z) {
        char buffer[96];
        std::snprintf(buffer, sizeof buffer, "(%.17g,%.17g,%.17g)", x == 0 ? 0.0 : x, y == 0 ? 0.0 : y, z == 0 ? 0.0 : z);
        return std::string(buffer);
    };
    std::ostringstream text;
    text << "NRRD0004\n"
         << "# written by Tessera\n"
         << "type: " << nrrd_name_of(voxels.scalar_type) << "\n"
         << "dimension: 3\n"
         << "space: left-posterior-superior\n"
         << "sizes: " << geometry.size[0] << " " << geometry.size[1] << " " << geometry.size[2] << "\n"
         << "space directions:";
    for (std::size_t axis = 0; axis < 3; ++axis) {
        text << " " << vector(geometry.direction[axis] * geometry.spacing[axis], geometry.direction[3 + axis] * geometry.spacing[axis],
                              geometry.direction[6 + axis] * geometry.spacing[axis]);
    }
    text << "\nkinds: domain domain domain\n"
         << "endian: little\n"
         << "encoding: " << (attached ? "gzip" : "raw") << "\n"
         << "space origin: " << vector(geometry.origin[0], geometry.origin[1], geometry.origin[2]) << "\n";
    if (!attached) text << "data file: " << data_path.filename().string() << "\n";
    text << slicer_segment_fields(geometry, segments) << "\n";
    const std::string header = text.str();

    const auto write_file = [&](const std::filesystem::path& target, const std::string& prefix, const std::string& payload) {
        std::ofstream out(target, std::ios::binary | std::ios::trunc);
        TESSERA_CHECK(out.is_open(), "cannot write " << quoted(target) << ": " << std::strerror(errno)
                                                     << ". Check that the folder exists and is writable.");
        out.write(prefix.data(), static_cast<std::streamsize>(prefix.size()));
        out.write(payload.data(), static_cast<std::streamsize>(payload.size()));
        out.close();
        TESSERA_CHECK(!out.fail(), "cannot write " << quoted(target) << ": " << std::strerror(errno) << " (is the disk full?)");
    };
    const std::string raw_bytes(reinterpret_cast<const char*>(voxels.bytes.data()), voxels.bytes.size());
    if (!attached) {
        write_file(data_path, "", raw_bytes);
        write_file(path, header, "");
        return;
    }
    // A gzip stream (deflate with the gzip wrapper), in pieces zlib's 32-bit counts can take.
    z_stream stream{};
    TESSERA_CHECK(deflateInit2(&stream, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK, "zlib could not start");
    std::string compressed;
    std::array<unsigned char, 1 << 16> out_buffer;
    std::size_t done = 0;
    int status = Z_OK;
    do {
        const auto chunk = static_cast<uInt>(std::min<std::size_t>(std::size_t{1} << 30, raw_bytes.size() - done));
        stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw_bytes.data() + done));
        stream.avail_in = chunk;
        done += chunk;
        const int flush = done == raw_bytes.size() ? Z_FINISH : Z_NO_FLUSH;
        do {
            stream.next_out = out_buffer.data();
            stream.avail_out = static_cast<uInt>(out_buffer.size());
            status = deflate(&stream, flush);
            compressed.append(reinterpret_cast<const char*>(out_buffer.data()), out_buffer.size() - stream.avail_out);
        } while (stream.avail_out == 0);
    } while (done < raw_bytes.size());
    deflateEnd(&stream);
    TESSERA_CHECK(status == Z_STREAM_END, "zlib could not compress the voxels of " << quoted(path));
    write_file(path, header, compressed);
}

}  // namespace tessera::io_detail
