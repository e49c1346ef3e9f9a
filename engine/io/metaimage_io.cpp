// MetaImage (.mha with its voxels inside, .mhd + a data file), the format of ITK's test data.
//
// The text header is parsed and checked here: VTK 9.1's vtkMetaImageReader ignores TransformMatrix
// (its images have no direction) and its MetaIO library prints to stderr on broken files. VTK then
// decodes the voxels (raw or zlib-compressed, either byte order). Writing is done here: VTK's writer
// drops the direction too.
//
// MetaImage coordinates are LPS, like ours. TransformMatrix lists the axis vectors one after the
// other (ITK's convention): for NDims = 2, "a b c d" means the i axis is (a, b) and the j axis (c, d).
#include "io/raw_image.hpp"
#include "io/vtk_support.hpp"


#include <vtkImageData.h>
#include <vtkMetaImageReader.h>
#include <vtkNew.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

namespace tessera::io_detail {

namespace {

constexpr NamedScalarType meta_element_types[] = {
    {"MET_UCHAR", ScalarType::U8},      {"MET_CHAR", ScalarType::I8},   {"MET_USHORT", ScalarType::U16},
    {"MET_SHORT", ScalarType::I16},     {"MET_UINT", ScalarType::U32},  {"MET_INT", ScalarType::I32},
    {"MET_ULONG", ScalarType::U32},     {"MET_LONG", ScalarType::I32},  {"MET_ULONG_LONG", ScalarType::U64},
    {"MET_LONG_LONG", ScalarType::I64}, {"MET_FLOAT", ScalarType::F32}, {"MET_DOUBLE", ScalarType::F64},
};

std::string_view meta_name_of(ScalarType type) {
    for (const NamedScalarType& element : meta_element_types) {
        // MET_ULONG / MET_LONG share their types with MET_UINT / MET_INT; the latter come first.
        if (element.scalar_type == type) return element.name;
    }
    TESSERA_ASSERT(false, "no MetaImage element type for " << scalar_type_name(type));
    return "";
}

// The header fields VTK's MetaIO (9.1) knows, by how it reads their values. MetaIO matches keys with
// their case, reads numbers as doubles ("3e1" is 30 to it), reads arrays across line ends, takes the
// next line as the value of a key with none, and strcpy's a string value into a 255-byte field: each of
// these let a header mean one thing to the checks here and another to the reader behind them (a
// 300-character Comment overflowed MetaIO's heap object; found by CI's fuzz smoke).
enum class MetaValue { Text, Integer, Number, PerAxis, PerAxisIntegers, Matrix, Four };
struct MetaField {
    std::string_view name;
    MetaValue value;
};
constexpr MetaField meta_fields[] = {
    {"ObjectType", MetaValue::Text},
    {"ObjectSubType", MetaValue::Text},
    {"FileFormatVersion", MetaValue::Integer},
    {"Comment", MetaValue::Text},
    {"AcquisitionDate", MetaValue::Text},
    {"NDims", MetaValue::Integer},
    {"Name", MetaValue::Text},
    {"ID", MetaValue::Integer},
    {"ParentID", MetaValue::Integer},
    {"CompressedData", MetaValue::Text},
    {"CompressedDataSize", MetaValue::Integer},
    {"BinaryData", MetaValue::Text},
    {"ElementByteOrderMSB", MetaValue::Text},
    {"BinaryDataByteOrderMSB", MetaValue::Text},
    {"Color", MetaValue::Four},
    {"Position", MetaValue::PerAxis},
    {"Origin", MetaValue::PerAxis},
    {"Offset", MetaValue::PerAxis},
    {"TransformMatrix", MetaValue::Matrix},
    {"Rotation", MetaValue::Matrix},
    {"Orientation", MetaValue::Matrix},
    {"CenterOfRotation", MetaValue::PerAxis},
    {"DistanceUnits", MetaValue::Text},
    {"AnatomicalOrientation", MetaValue::Text},
    {"ElementSpacing", MetaValue::PerAxis},
    {"DimSize", MetaValue::PerAxisIntegers},
    {"HeaderSize", MetaValue::Integer},
    {"Modality", MetaValue::Text},
    {"ImagePosition", MetaValue::PerAxis},
    {"ElementOrigin", MetaValue::PerAxis},
    {"ElementDirection", MetaValue::Matrix},
    {"SequenceID", MetaValue::PerAxisIntegers},
    {"ElementMin", MetaValue::Number},
    {"ElementMax", MetaValue::Number},
    {"ElementNumberOfChannels", MetaValue::Integer},
    {"ElementSize", MetaValue::PerAxis},
    {"ElementNBits", MetaValue::Integer},
    {"ElementToIntensityFunctionSlope", MetaValue::Number},
    {"ElementToIntensityFunctionOffset", MetaValue::Number},
    {"ElementType", MetaValue::Text},
    {"ElementDataFile", MetaValue::Text},
};
constexpr std::size_t meta_max_text = 254;   // MetaIO's string fields hold 255 bytes with the terminator
constexpr std::size_t meta_max_line = 499;   // MetaIO reads a header line in pieces of 500 bytes

std::string lower(std::string text) {
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return text;
}

std::string trim(const std::string& text) {
    const std::size_t begin = text.find_first_not_of(" \t\r\n");
    if (begin == std::string::npos) return "";
    const std::size_t end = text.find_last_not_of(" \t\r\n");
    return text.substr(begin, end - begin + 1);
}

struct MetaHeader {
    std::map<std::string, std::string> fields;  // lower-case key → value
    std::map<std::string, int> line_of;          // lower-case key → its line number
    std::uint64_t header_bytes = 0;             // where LOCAL data starts

    const std::string* find(std::initializer_list<const char*> keys) const {
        for (const char* key : keys) {
            const auto found = fields.find(key);
            if (found != fields.end()) return &found->second;
        }
        return nullptr;
    }
};

MetaHeader parse_meta_header(const std::filesystem::path& path) {
    // The header is text ending with the ElementDataFile line; read a bounded prefix so a large binary
    // file with a .mha name is not pulled into memory as one "line".
    constexpr std::size_t max_header_bytes = 1 << 20;
    std::ifstream in(path, std::ios::binary);
    TESSERA_CHECK(in.is_open(), "cannot open " << quoted(path) << ": " << std::strerror(errno));
    std::string prefix(max_header_bytes, '\0');
    in.read(prefix.data(), static_cast<std::streamsize>(prefix.size()));
    prefix.resize(static_cast<std::size_t>(in.gcount()));

    MetaHeader header;
    std::size_t begin = 0;
    int line_number = 0;
    while (begin < prefix.size()) {
        std::size_t end = prefix.find('\n', begin);
        const bool complete = end != std::string::npos;
        if (!complete) end = prefix.size();
        const std::string line = prefix.substr(begin, end - begin);
        const std::size_t next = complete ? end + 1 : end;
        ++line_number;
        begin = next;
        if (trim(line).empty()) continue;
        // A carriage return only ends a line (CRLF files): VTK's MetaIO reader ends a value at any '\r',
        // so "ElementDataFile =\r fuzz.raw" named a data file it could not open (and leaked a stream).
        const std::size_t text_end = !line.empty() && line.back() == '\r' ? line.size() - 1 : line.size();
        const bool printable = std::all_of(line.begin(), line.begin() + static_cast<std::ptrdiff_t>(text_end),
                                           [](unsigned char c) { return c >= 32 || c == '\t'; });
        const std::size_t equals = line.find('=');
        const std::string key = equals == std::string::npos ? "" : lower(trim(line.substr(0, equals)));
        // Keys are short names (VTK's MetaIO copies each into a 255-byte field without a bound check, so a
        // longer key overflowed it; found by fuzzing).
        const bool name_like = !key.empty() && key.size() <= 128 && std::all_of(key.begin(), key.end(), [](unsigned char c) {
            return std::isalnum(c) != 0 || c == '_' || c == '-' || c == '.';
        });
        TESSERA_CHECK(printable && name_like && line.size() < 4096,
                      quoted(path) << " is not a MetaImage file: line " << line_number
                                   << " of its header is not 'Key = Value' text. Is it another kind of file "
                                   << "saved with a " << full_extension(path) << " extension?");
        const std::string spelled = trim(line.substr(0, equals));
        const std::string value = trim(line.substr(equals + 1));
        const auto known = std::find_if(std::begin(meta_fields), std::end(meta_fields),
                                        [&](const MetaField& field) { return lower(std::string(field.name)) == key; });
        TESSERA_CHECK(known == std::end(meta_fields) || known->name == spelled,
                      quoted(path) << " has a damaged MetaImage header: line " << line_number << " writes " << spelled
                                   << ", but MetaImage keys are case-sensitive (readers know only " << known->name
                                   << "). Fix the spelling.");
        TESSERA_CHECK(!value.empty(), quoted(path) << " has a damaged MetaImage header: line " << line_number << " gives "
                                                   << spelled << " no value (MetaImage readers would take the next "
                                                   << "line for it). Remove the line or give it a value.");
        const bool text_fits = known == std::end(meta_fields) || known->value != MetaValue::Text || value.size() <= meta_max_text;
        TESSERA_CHECK(line.size() <= meta_max_line && text_fits,
                      quoted(path) << " has a MetaImage header line too long for MetaImage readers: line " << line_number
                                   << " (" << spelled << ") has " << (text_fits ? line.size() : value.size())
                                   << " characters where they take at most "
                                   << (text_fits ? meta_max_line : meta_max_text) << (text_fits ? " per line" : " per value")
                                   << ". Shorten it.");
        // Each key once: with repeats, this check and VTK's MetaIO could read different values (a header
        // giving NDims three times, once negative, hung MetaIO; found by fuzzing).
        TESSERA_CHECK(!header.fields.contains(key), quoted(path) << " has a damaged MetaImage header: line " << line_number
                                                                 << " gives " << trim(line.substr(0, equals))
                                                                 << " again (each key may appear once). Fix the header.");
        header.fields[key] = value;
        header.line_of[key] = line_number;
        if (key == "elementdatafile") {
            header.header_bytes = next;
            return header;
        }
    }
    TESSERA_CHECK(!header.fields.empty(),
                  quoted(path) << " is not a MetaImage file: it is empty or holds no 'Key = Value' header");
    TESSERA_REJECT(quoted(path) << " is not a complete MetaImage header: it has no ElementDataFile line (the last "
                                << "line of a MetaImage header, naming where the voxels are)");
}

template <class T>
std::vector<T> parse_list(const std::filesystem::path& path, const MetaHeader& header, const char* key,
                          std::size_t expected_count) {
    const std::string* text = header.find({key});
    if (text == nullptr) return {};
    std::istringstream in(*text);
    std::vector<T> values;
    T value{};
    while (in >> value) values.push_back(value);
    TESSERA_CHECK(in.eof() && values.size() == expected_count,
                  quoted(path) << " has a malformed MetaImage header: expected " << expected_count << " numbers in '"
                               << key << " = " << *text << "'");
    return values;
}

// MetaIO's reading of a flag: true when its first character is T, t or 1 ("Tru" and "1" included).
bool is_true(const std::string* text) {
    return text != nullptr && !text->empty() && (text->front() == 'T' || text->front() == 't' || text->front() == '1');
}

// Every number of a MetaImage value, each written so that MetaIO's double and the checks here agree:
// integers as digits ("3", not "3.0" or "3e0"), numbers as decimal or exponent notation.
bool is_meta_integer(const std::string& token) {
    const std::size_t digits = token.find_first_not_of("+-") == 1 ? 1 : 0;
    // At most 15 digits: MetaIO holds the value in a double, exact below 2^53.
    return token.size() > digits && token.size() - digits <= 15 &&
           std::all_of(token.begin() + static_cast<std::ptrdiff_t>(digits), token.end(),
                       [](unsigned char c) { return std::isdigit(c) != 0; });
}
bool is_meta_number(const std::string& token) {
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(token.c_str(), &end);
    const bool plain = token.find_first_of("xXpPnNiI") == std::string::npos;  // no hex, nan or inf
    return !token.empty() && end == token.c_str() + token.size() && errno == 0 && std::isfinite(value) && plain;
}

// Numeric fields hold as many numbers as MetaIO reads for them (it reads past the line end to find them,
// taking the next line's text for numbers), each written as checked above.
void check_meta_values(const std::filesystem::path& path, const MetaHeader& header, std::size_t num_dims) {
    for (const MetaField& field : meta_fields) {
        const std::string key = lower(std::string(field.name));
        const auto found = header.fields.find(key);
        if (found == header.fields.end() || field.value == MetaValue::Text) continue;
        std::istringstream in(found->second);
        std::vector<std::string> tokens;
        for (std::string token; in >> token;) tokens.push_back(token);
        std::size_t expected = 1;
        if (field.value == MetaValue::PerAxis || field.value == MetaValue::PerAxisIntegers) expected = num_dims;
        if (field.value == MetaValue::Matrix) expected = num_dims * num_dims;
        if (field.value == MetaValue::Four) expected = 4;
        const bool integers = field.value == MetaValue::Integer || field.value == MetaValue::PerAxisIntegers;
        const bool per_axis = field.value == MetaValue::PerAxis || field.value == MetaValue::PerAxisIntegers ||
                              field.value == MetaValue::Matrix;
        TESSERA_CHECK(!per_axis || header.line_of.at(key) > header.line_of.at("ndims"),
                      quoted(path) << " has a damaged MetaImage header: line " << header.line_of.at(key) << " gives "
                                   << field.name << " before NDims (line " << header.line_of.at("ndims")
                                   << "), which says how many values it holds. Move NDims up.");
        const bool well_formed = std::all_of(tokens.begin(), tokens.end(), [&](const std::string& token) {
            return integers ? is_meta_integer(token) : is_meta_number(token);
        });
        TESSERA_CHECK(tokens.size() == expected && well_formed,
                      quoted(path) << " has a malformed MetaImage header: line " << header.line_of.at(key) << " ("
                                   << field.name << " = " << found->second << ") should hold " << expected
                                   << (integers ? " whole number" : " number") << (expected == 1 ? "" : "s")
                                   << (per_axis ? " for NDims = " + std::to_string(num_dims) : "")
                                   << ", written plainly (like " << (integers ? "12" : "0.5") << "). Fix the header.");
    }
}

std::string format_number(double value) {
    if (value == 0.0) value = 0.0;
    char buffer[40];
    std::snprintf(buffer, sizeof buffer, "%.17g", value);
    return buffer;
}

}  // namespace

RawImage read_metaimage(const std::filesystem::path& path) {
    const MetaHeader header = parse_meta_header(path);

    // Dimensions.
    const std::string* ndims_text = header.find({"ndims"});
    TESSERA_CHECK(ndims_text != nullptr, quoted(path) << " has no NDims in its MetaImage header");
    int num_dims = 0;
    TESSERA_CHECK(std::istringstream(*ndims_text) >> num_dims,
                  quoted(path) << " has a malformed MetaImage header: NDims = " << *ndims_text);
    TESSERA_CHECK(num_dims >= 1 && num_dims <= 4,
                  quoted(path) << " has NDims = " << num_dims << ": Tessera reads 2D and 3D images");
    const auto count = static_cast<std::size_t>(num_dims);
    check_meta_values(path, header, count);
    const std::vector<std::int64_t> dim_size = parse_list<std::int64_t>(path, header, "dimsize", count);
    TESSERA_CHECK(!dim_size.empty(), quoted(path) << " has no DimSize in its MetaImage header");
    for (std::size_t axis = 0; axis < count; ++axis) {
        TESSERA_CHECK(dim_size[axis] >= 1, quoted(path)
                                               << " has a zero or negative dimension: DimSize = "
                                               << header.find({"dimsize"})->c_str() << ". The header is damaged.");
    }
    TESSERA_CHECK(num_dims < 4 || dim_size[3] == 1, quoted(path) << " holds " << dim_size[3]
                                                                 << " volumes (a 4D image): Tessera reads single 2D "
                                                                 << "or 3D images; extract one volume first.");

    // Voxel type.
    const std::string* type_text = header.find({"elementtype"});
    TESSERA_CHECK(type_text != nullptr, quoted(path) << " has no ElementType in its MetaImage header");
    const auto element = std::find_if(std::begin(meta_element_types), std::end(meta_element_types),
                                      [&](const NamedScalarType& e) { return e.name == *type_text; });
    TESSERA_CHECK(element != std::end(meta_element_types),
                  quoted(path) << " stores voxels as " << *type_text << ", an unsupported voxel type: Tessera "
                               << "reads one integer or floating-point value per voxel (MET_UCHAR ... MET_DOUBLE).");
    int channels = 1;
    if (const std::string* text = header.find({"elementnumberofchannels"})) {
        std::istringstream(*text) >> channels;
    }
    TESSERA_CHECK(channels == 1,
                  quoted(path) << " stores " << channels << " values per voxel (ElementNumberOfChannels = " << channels
                               << ": complex or vector data), an unsupported voxel type: Tessera reads "
                               << "one value per voxel. Save one channel (e.g. the magnitude) as its own image.");
    TESSERA_CHECK(!header.find({"binarydata"}) || is_true(header.find({"binarydata"})),
                  quoted(path) << " stores its voxels as ASCII text (BinaryData = False), which Tessera does "
                               << "not read: save it with binary data.");

    // Where the voxels are, and whether the file holds them all.
    const std::string& data_file = header.fields.at("elementdatafile");
    TESSERA_CHECK(lower(data_file).rfind("list", 0) != 0 && data_file.find('%') == std::string::npos,
                  quoted(path) << " spreads its voxels over several files (ElementDataFile = " << data_file
                               << "): Tessera reads one data file; save the image as a single .mha.");
    // MetaIO knows exactly three spellings of LOCAL; any other is a file name to it (found by fuzzing:
    // "LOcAL" passed as local here, and VTK's reader leaked the stream it opened for a file of that name).
    const bool local = data_file == "LOCAL" || data_file == "Local" || data_file == "local";
    TESSERA_CHECK(local || lower(data_file) != "local",
                  quoted(path) << " says ElementDataFile = " << data_file << ": MetaImage readers take LOCAL, Local or local "
                               << "for voxels in the same file; write one of those.");
    const std::filesystem::path data_path =
        local ? path : checked_data_file(path, data_file, "ElementDataFile = " + data_file);
    const std::uint64_t element_bytes = scalar_type_size(element->scalar_type);
    std::uint64_t num_voxels = 1;
    for (std::int64_t extent : dim_size) {
        TESSERA_CHECK(extent <= std::numeric_limits<std::int32_t>::max() &&
                          num_voxels <= (std::uint64_t{1} << 40) / static_cast<std::uint64_t>(extent),
                      quoted(path) << " claims DimSize = " << header.find({"dimsize"})->c_str()
                                   << ", which is not plausible: the header is damaged.");
        num_voxels *= static_cast<std::uint64_t>(extent);
    }
    std::string size_text;
    for (std::size_t axis = 0; axis < count; ++axis) size_text += (axis ? "×" : "") + std::to_string(dim_size[axis]);
    check_volume_budget(path, size_text, num_voxels, element_bytes);
    std::error_code error;
    const std::uint64_t file_bytes = std::filesystem::file_size(data_path, error);
    const std::uint64_t available = local ? file_bytes - std::min(file_bytes, header.header_bytes) : file_bytes;
    const bool compressed = is_true(header.find({"compresseddata"}));
    if (!compressed) {
        const std::uint64_t needed = num_voxels * element_bytes;
        TESSERA_CHECK(available >= needed,
                      quoted(path) << " is truncated: its header promises " << size_text << " "
                                   << scalar_type_name(element->scalar_type) << " voxels (" << needed << " bytes) but "
                                   << (local ? "the file holds only " : quoted(data_path) + " holds only ") << available
                                   << " bytes of voxel data. Get a complete copy.");
    } else if (const std::string* text = header.find({"compresseddatasize"})) {
        std::uint64_t compressed_bytes = 0;
        std::istringstream(*text) >> compressed_bytes;
        TESSERA_CHECK(available >= compressed_bytes, quoted(path)
                                                         << " is truncated: its header promises " << compressed_bytes
                                                         << " bytes of compressed voxels but only " << available
                                                         << " are there. Get a complete copy.");
    }

    // Geometry.
    RawImage raw;
    ImageGeometry& geometry = raw.geometry;
    for (std::size_t axis = 0; axis < std::min<std::size_t>(count, 3); ++axis) geometry.size[axis] = dim_size[axis];
    std::vector<double> spacing = parse_list<double>(path, header, "elementspacing", count);
    if (spacing.empty()) spacing = parse_list<double>(path, header, "elementsize", count);
    for (std::size_t axis = 0; axis < std::min<std::size_t>(spacing.size(), 3); ++axis) {
        TESSERA_CHECK(std::isfinite(spacing[axis]) && spacing[axis] > 0,
                      quoted(path) << " has a zero or negative voxel spacing (ElementSpacing axis " << axis << " = "
                                   << spacing[axis] << " mm). The header is damaged.");
        geometry.spacing[axis] = spacing[axis];
    }
    const char* origin_key = header.find({"offset"}) ? "offset" : header.find({"position"}) ? "position" : "origin";
    const std::vector<double> origin = parse_list<double>(path, header, origin_key, count);
    for (std::size_t axis = 0; axis < std::min<std::size_t>(origin.size(), 3); ++axis)
        geometry.origin[axis] = origin[axis];
    const char* matrix_key = header.find({"transformmatrix"}) ? "transformmatrix"
                             : header.find({"rotation"})      ? "rotation"
                                                              : "orientation";
    const std::vector<double> matrix = parse_list<double>(path, header, matrix_key, count * count);
    if (!matrix.empty()) {
        const std::size_t kept = std::min<std::size_t>(count, 3);
        for (std::size_t axis = 0; axis < kept; ++axis) {
            for (std::size_t component = 0; component < kept; ++component) {
                geometry.direction[component * 3 + axis] = matrix[axis * count + component];
            }
        }
    }

    // Voxels.
    vtkNew<vtkMetaImageReader> reader;
    VtkErrorCapture capture(reader);
    reader->SetFileName(path.c_str());
    reader->Update();
    TESSERA_CHECK(!capture.has_errors() && reader->GetErrorCode() == 0,
                  quoted(path) << " could not be read as MetaImage: "
                               << (capture.has_errors() ? capture.message() : "VTK's reader failed without saying why")
                               << (compressed ? " (is the compressed data complete?)" : ""));
    vtkImageData* image = reader->GetOutput();
    int dimensions[3] = {0, 0, 0};
    image->GetDimensions(dimensions);
    TESSERA_CHECK(dimensions[0] == geometry.size[0] && dimensions[1] == geometry.size[1] &&
                      dimensions[2] == geometry.size[2] && image->GetNumberOfScalarComponents() == 1,
                  quoted(path) << " could not be read as MetaImage: VTK decoded " << dimensions[0] << "×"
                               << dimensions[1] << "×" << dimensions[2] << " voxels, the header says " << size_text
                               << (compressed ? " (is the compressed data complete?)" : ""));
    attach_vtk_voxels(raw, image);
    TESSERA_CHECK(scalar_type_size(raw.scalar_type) == element_bytes,
                  quoted(path) << " could not be read: VTK decoded " << scalar_type_name(raw.scalar_type)
                               << " voxels for ElementType " << *type_text);
    raw.source_scalar_type = std::string(scalar_type_name(element->scalar_type));
    return raw;
}

void write_metaimage(const ImageGeometry& geometry, const EncodedVoxels& voxels, const std::filesystem::path& path) {
    static_assert(std::endian::native == std::endian::little, "the MetaImage writer assumes little-endian");
    const bool local = full_extension(path) == ".mha";
    std::filesystem::path data_path = path;
    data_path.replace_extension(".raw");

    std::ostringstream text;
    auto triple = [](const std::array<double, 3>& values) {
        return format_number(values[0]) + " " + format_number(values[1]) + " " + format_number(values[2]);
    };
    const auto& d = geometry.direction;
    text << "ObjectType = Image\n"
         << "NDims = 3\n"
         << "BinaryData = True\n"
         << "BinaryDataByteOrderMSB = False\n"
         << "CompressedData = False\n"
         // Axis vectors one after the other: the columns of our direction matrix.
         << "TransformMatrix = " << triple({d[0], d[3], d[6]}) << " " << triple({d[1], d[4], d[7]}) << " "
         << triple({d[2], d[5], d[8]}) << "\n"
         << "Offset = " << triple(geometry.origin) << "\n"
         << "CenterOfRotation = 0 0 0\n"
         << "ElementSpacing = " << triple(geometry.spacing) << "\n"
         << "DimSize = " << geometry.size[0] << " " << geometry.size[1] << " " << geometry.size[2] << "\n"
         << "ElementType = " << meta_name_of(voxels.scalar_type) << "\n"
         << "ElementDataFile = " << (local ? std::string("LOCAL") : data_path.filename().string()) << "\n";

    auto write_file = [&](const std::filesystem::path& target, const std::string& prefix, bool with_voxels) {
        std::ofstream out(target, std::ios::binary | std::ios::trunc);
        TESSERA_CHECK(out.is_open(), "cannot write " << quoted(target) << ": " << std::strerror(errno)
                                                     << ". Check that the folder exists and is writable.");
        out.write(prefix.data(), static_cast<std::streamsize>(prefix.size()));
        if (with_voxels) {
            out.write(reinterpret_cast<const char*>(voxels.bytes.data()),
                      static_cast<std::streamsize>(voxels.bytes.size()));
        }
        out.close();
        TESSERA_CHECK(!out.fail(),
                      "cannot write " << quoted(target) << ": " << std::strerror(errno) << " (is the disk full?)");
    };
    if (local) {
        write_file(path, text.str(), true);
    } else {
        write_file(data_path, "", true);
        write_file(path, text.str(), false);
    }
}

}  // namespace tessera::io_detail
