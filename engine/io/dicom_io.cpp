// DICOM: a folder holding one series of single-frame slices, or one file.
//
// Each file's header is scanned here first (a small walker over the data elements up to the pixel
// data). Only uncompressed little-endian grayscale pixels are read, and those are decoded here too:
// the walker already knows where the pixel data starts and how long it is, and VTK's DICOM reader,
// used until round 2, trusted its own parse of the header and read past its buffer on a malformed
// file that disagreed with ours (found by the fuzzer). Stored values become Rescale Slope × value +
// Rescale Intercept; slices are stacked in the order of their position along the slice normal.
//
// Geometry (LPS, as DICOM): i runs along the row direction (Image Orientation's first vector), j down
// the columns (its second), k along their cross product; the origin is the Image Position of the first
// slice. The slice spacing is the distance between consecutive positions (Slice Thickness for one slice).
#include "io/raw_image.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

namespace tessera::io_detail {

namespace {

constexpr std::string_view implicit_little_endian = "1.2.840.10008.1.2";
constexpr std::string_view explicit_little_endian = "1.2.840.10008.1.2.1";
constexpr std::string_view explicit_big_endian = "1.2.840.10008.1.2.2";

struct DicomFile {
    std::filesystem::path path;
    std::string transfer_syntax{implicit_little_endian};
    std::string series_uid;
    int rows = 0;
    int columns = 0;
    int samples_per_pixel = 1;
    int bits_allocated = 0;
    int pixel_representation = 0;
    std::int64_t number_of_frames = 1;
    std::optional<std::array<double, 3>> position;       // Image Position (Patient), mm
    std::optional<std::array<double, 6>> orientation;    // Image Orientation (Patient)
    std::optional<std::array<double, 2>> pixel_spacing;  // between rows, between columns (mm)
    double slice_thickness = 0;
    double rescale_slope = 1;      // value = slope × stored + intercept
    double rescale_intercept = 0;
    std::int64_t instance_number = 0;
    bool has_pixel_data = false;
    bool encapsulated = false;  // compressed pixel data
    std::uint64_t pixel_data_offset = 0;  // bytes from the file's start to the first pixel
    std::uint64_t pixel_data_bytes = 0;
    std::uint64_t pixel_data_available = 0;
};

std::vector<double> parse_decimals(const std::string& text) {
    std::vector<double> values;
    std::string item;
    std::istringstream in(text);
    while (std::getline(in, item, '\\')) {
        try {
            values.push_back(std::stod(item));
        } catch (const std::exception&) {
            return {};
        }
    }
    return values;
}

std::string trim_value(std::string text) {
    while (!text.empty() && (text.back() == '\0' || text.back() == ' ')) text.pop_back();
    while (!text.empty() && text.front() == ' ') text.erase(0, 1);
    return text;
}

// Walks the data elements of one file. Nested sequences are skipped; only top-level elements count.
class DicomScanner {
public:
    DicomScanner(const std::vector<unsigned char>& bytes, DicomFile& file) : m_bytes(bytes), m_file(file) {}

    // False if the bytes do not look like DICOM at all.
    bool scan() {
        std::size_t position = 0;
        if (m_bytes.size() >= 132 && std::memcmp(m_bytes.data() + 128, "DICM", 4) == 0) {
            position = 132;
        } else if (!looks_like_bare_dataset()) {
            return false;
        }
        // File meta information (group 0002) is always explicit VR little endian.
        m_explicit = true;
        m_big_endian = false;
        while (position + 8 <= m_bytes.size() && u16(position) == 0x0002) {
            if (!element(position, 0)) return true;
        }
        if (!m_meta_found && position + 6 <= m_bytes.size() && std::isupper(m_bytes[position + 4]) &&
            std::isupper(m_bytes[position + 5])) {
            m_file.transfer_syntax = explicit_little_endian;  // no meta header, but explicit VRs
        }
        m_explicit = m_file.transfer_syntax != implicit_little_endian;
        m_big_endian = m_file.transfer_syntax == explicit_big_endian;
        if (m_file.transfer_syntax == "1.2.840.10008.1.2.1.99") return true;  // deflated: cannot walk on
        while (position + 8 <= m_bytes.size() && !m_file.has_pixel_data) {
            if (!element(position, 0)) break;
        }
        return true;
    }

private:
    bool looks_like_bare_dataset() const {
        // No preamble: a dataset starting at group 0002 or 0008 with a short length.
        if (m_bytes.size() < 8) return false;
        const std::uint16_t group = static_cast<std::uint16_t>(m_bytes[0] | (m_bytes[1] << 8));
        return group == 0x0002 || group == 0x0008;
    }

    std::uint16_t u16(std::size_t at) const {
        return m_big_endian ? static_cast<std::uint16_t>((m_bytes[at] << 8) | m_bytes[at + 1])
                            : static_cast<std::uint16_t>(m_bytes[at] | (m_bytes[at + 1] << 8));
    }
    std::uint32_t u32(std::size_t at) const {
        const std::uint32_t low = u16(at), high = u16(at + 2);
        return m_big_endian ? (low << 16) | high : (high << 16) | low;
    }

    // Reads one element at `position` and moves past it; false at the end or on malformed data.
    bool element(std::size_t& position, int depth) {
        if (position + 8 > m_bytes.size()) return false;
        const std::uint16_t group = u16(position);
        const std::uint16_t number = u16(position + 2);
        const std::uint32_t tag = (static_cast<std::uint32_t>(group) << 16) | number;
        std::uint64_t length = 0;
        std::string vr;
        bool implicit_here = !m_explicit || group == 0xfffe;
        if (!implicit_here) {
            vr.assign(reinterpret_cast<const char*>(m_bytes.data() + position + 4), 2);
            static constexpr std::string_view long_vrs[] = {"OB", "OD", "OF", "OL", "OV", "OW", "SQ",
                                                            "SV", "UC", "UN", "UR", "UT", "UV"};
            if (std::find(std::begin(long_vrs), std::end(long_vrs), vr) != std::end(long_vrs)) {
                if (position + 12 > m_bytes.size()) return false;
                length = u32(position + 8);
                position += 12;
            } else {
                length = u16(position + 6);
                position += 8;
            }
        } else {
            length = u32(position + 4);
            position += 8;
        }
        constexpr std::uint64_t undefined = 0xffffffffu;
        if (tag == 0x7fe00010 && depth == 0) {
            m_file.has_pixel_data = true;
            m_file.encapsulated = length == undefined;
            m_file.pixel_data_bytes = length == undefined ? 0 : length;
            m_file.pixel_data_offset = position;
            m_file.pixel_data_available = m_bytes.size() - std::min<std::uint64_t>(position, m_bytes.size());
            return true;
        }
        if (length == undefined) return skip_undefined(position, depth, vr == "UN");
        if (position + length > m_bytes.size()) return false;
        if (depth == 0) record(tag, position, static_cast<std::size_t>(length));
        position += static_cast<std::size_t>(length);
        return true;
    }

    // A sequence (or item) of undefined length: walk its items to the delimiter.
    bool skip_undefined(std::size_t& position, int depth, bool implicit_inside) {
        if (depth > 16) return false;
        const bool saved_explicit = m_explicit;
        if (implicit_inside) m_explicit = false;
        bool ok = true;
        while (ok && position + 8 <= m_bytes.size()) {
            const std::uint32_t tag = (static_cast<std::uint32_t>(u16(position)) << 16) | u16(position + 2);
            const std::uint32_t length = u32(position + 4);
            if (tag == 0xfffee0dd || tag == 0xfffee00d) {  // sequence or item delimiter
                position += 8;
                break;
            }
            if (tag == 0xfffee000) {  // item
                position += 8;
                if (length == 0xffffffffu) {
                    ok = skip_undefined(position, depth + 1, false);
                } else {
                    position += length;
                }
                continue;
            }
            ok = element(position, depth + 1);
        }
        m_explicit = saved_explicit;
        return ok && position <= m_bytes.size();
    }

    void record(std::uint32_t tag, std::size_t at, std::size_t length) {
        auto text = [&] { return trim_value(std::string(reinterpret_cast<const char*>(m_bytes.data() + at), length)); };
        auto us = [&] { return length >= 2 ? static_cast<int>(u16(at)) : 0; };
        switch (tag) {
            case 0x00020010:
                m_file.transfer_syntax = text();
                m_meta_found = true;
                break;
            case 0x0020000e:
                m_file.series_uid = text();
                break;
            case 0x00200013: {
                const std::vector<double> values = parse_decimals(text());
                if (values.size() == 1) m_file.instance_number = static_cast<std::int64_t>(values[0]);
                break;
            }
            case 0x00200032: {
                const std::vector<double> values = parse_decimals(text());
                if (values.size() == 3) m_file.position = std::array<double, 3>{values[0], values[1], values[2]};
                break;
            }
            case 0x00200037: {
                const std::vector<double> values = parse_decimals(text());
                if (values.size() == 6) {
                    m_file.orientation =
                        std::array<double, 6>{values[0], values[1], values[2], values[3], values[4], values[5]};
                }
                break;
            }
            case 0x00280030: {
                const std::vector<double> values = parse_decimals(text());
                if (values.size() == 2) m_file.pixel_spacing = std::array<double, 2>{values[0], values[1]};
                break;
            }
            case 0x00180050: {
                const std::vector<double> values = parse_decimals(text());
                if (values.size() == 1) m_file.slice_thickness = values[0];
                break;
            }
            case 0x00281052: {
                const std::vector<double> values = parse_decimals(text());
                if (values.size() == 1) m_file.rescale_intercept = values[0];
                break;
            }
            case 0x00281053: {
                const std::vector<double> values = parse_decimals(text());
                if (values.size() == 1) m_file.rescale_slope = values[0];
                break;
            }
            case 0x00280008: {
                const std::vector<double> values = parse_decimals(text());
                if (values.size() == 1) m_file.number_of_frames = static_cast<std::int64_t>(values[0]);
                break;
            }
            case 0x00280002:
                m_file.samples_per_pixel = us();
                break;
            case 0x00280010:
                m_file.rows = us();
                break;
            case 0x00280011:
                m_file.columns = us();
                break;
            case 0x00280100:
                m_file.bits_allocated = us();
                break;
            case 0x00280103:
                m_file.pixel_representation = us();
                break;
            default:
                break;
        }
    }

    const std::vector<unsigned char>& m_bytes;
    DicomFile& m_file;
    bool m_explicit = true;
    bool m_big_endian = false;
    bool m_meta_found = false;
};

// Empty if the file is not DICOM.
std::optional<DicomFile> scan_dicom_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in.is_open()) return std::nullopt;
    std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    DicomFile file;
    file.path = path;
    DicomScanner scanner(bytes, file);
    if (!scanner.scan()) return std::nullopt;
    return file;
}

std::string_view transfer_syntax_name(const std::string& uid) {
    if (uid.rfind("1.2.840.10008.1.2.4.5", 0) == 0 || uid.rfind("1.2.840.10008.1.2.4.7", 0) == 0) return "JPEG";
    if (uid.rfind("1.2.840.10008.1.2.4.8", 0) == 0) return "JPEG-LS";
    if (uid.rfind("1.2.840.10008.1.2.4.9", 0) == 0) return "JPEG 2000";
    if (uid == "1.2.840.10008.1.2.5") return "RLE";
    if (uid == "1.2.840.10008.1.2.1.99") return "deflate";
    return "compressed";
}

// Throws unless decode_slice can read this file as one grayscale slice.
void check_readable(const DicomFile& file) {
    const std::string name = quoted(file.path);
    TESSERA_CHECK(file.transfer_syntax != explicit_big_endian,
                  name << " uses the retired big-endian transfer syntax (" << file.transfer_syntax
                       << "), which Tessera does not decode: convert it to little endian first "
                       << "(e.g. 'gdcmconv --explicit' or 'dcmconv +te').");
    const bool plain = file.transfer_syntax == implicit_little_endian || file.transfer_syntax == explicit_little_endian;
    TESSERA_CHECK(plain && !file.encapsulated,
                  name << " holds " << transfer_syntax_name(file.transfer_syntax) << "-compressed pixel data "
                       << "(transfer syntax " << file.transfer_syntax << "), which Tessera cannot decode: "
                       << "decompress the series first (e.g. 'gdcmconv --raw' or 'dcmdjpeg').");
    TESSERA_CHECK(file.number_of_frames <= 1,
                  name << " is a multi-frame DICOM (" << file.number_of_frames << " frames in one file), which "
                       << "Tessera does not read: split it into one file per slice or convert it to NIfTI "
                       << "(e.g. dcm2niix).");
    TESSERA_CHECK(file.samples_per_pixel == 1, name << " holds colour pixels (" << file.samples_per_pixel
                                                    << " samples per pixel), an "
                                                    << "unsupported voxel type: Tessera reads grayscale DICOM.");
    TESSERA_CHECK(file.bits_allocated == 8 || file.bits_allocated == 16,
                  name << " stores " << file.bits_allocated << " bits per pixel: Tessera reads 8- and 16-bit DICOM.");
    TESSERA_CHECK(file.rows > 0 && file.columns > 0,
                  name << " has a zero dimension (" << file.columns << "×" << file.rows << " pixels).");
    const std::uint64_t needed = static_cast<std::uint64_t>(file.rows) * static_cast<std::uint64_t>(file.columns) *
                                 static_cast<std::uint64_t>(file.bits_allocated / 8);
    TESSERA_CHECK(file.pixel_data_bytes >= needed && file.pixel_data_available >= needed,
                  name << " is truncated: its header promises " << file.columns << "×" << file.rows << " pixels ("
                       << needed << " bytes) but the file holds only "
                       << std::min(file.pixel_data_bytes, file.pixel_data_available) << " bytes of pixel data.");
    // The largest rescaled value must fit a float (stored values are at most 65535 in magnitude).
    const double largest = std::abs(file.rescale_slope) * 65535.0 + std::abs(file.rescale_intercept);
    TESSERA_CHECK(file.rescale_slope != 0 && std::isfinite(largest) && largest < 1e30,
                  name << " has an unusable Rescale Slope/Intercept (" << file.rescale_slope << ", "
                       << file.rescale_intercept << "): expected a non-zero slope and values that fit a float.");
}

std::array<double, 3> cross(const std::array<double, 3>& a, const std::array<double, 3>& b) {
    return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}

// Decodes one file's pixels into `slice` (rows top-down, as DICOM stores them), as float.
// check_readable has made sure the pixel data is little endian, uncompressed and long enough.
void decode_slice(const DicomFile& file, float* slice) {
    const std::size_t num_pixels = static_cast<std::size_t>(file.columns) * static_cast<std::size_t>(file.rows);
    const std::size_t bytes_per_pixel = static_cast<std::size_t>(file.bits_allocated / 8);
    std::vector<unsigned char> stored(num_pixels * bytes_per_pixel);
    std::ifstream in(file.path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(file.pixel_data_offset));
    TESSERA_CHECK(in && in.read(reinterpret_cast<char*>(stored.data()), static_cast<std::streamsize>(stored.size())),
                  quoted(file.path) << " could not be read back (" << stored.size() << " bytes of pixel data at byte "
                                    << file.pixel_data_offset << "): was it changed or removed while loading?");
    const bool is_signed = file.pixel_representation != 0;
    const double slope = file.rescale_slope, intercept = file.rescale_intercept;
    for (std::size_t index = 0; index < num_pixels; ++index) {
        double value = 0;
        if (bytes_per_pixel == 1) {
            const unsigned char byte = stored[index];
            value = is_signed ? static_cast<double>(static_cast<std::int8_t>(byte)) : static_cast<double>(byte);
        } else {
            const auto word = static_cast<std::uint16_t>(stored[2 * index] | (stored[2 * index + 1] << 8));
            value = is_signed ? static_cast<double>(static_cast<std::int16_t>(word)) : static_cast<double>(word);
        }
        slice[index] = static_cast<float>(slope * value + intercept);
    }
}

}  // namespace

bool has_dicom_preamble(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    char bytes[132] = {};
    if (!in.read(bytes, sizeof bytes)) return false;
    return std::memcmp(bytes + 128, "DICM", 4) == 0;
}

RawImage read_dicom(const std::filesystem::path& path) {
    // Gather candidate files.
    std::vector<std::filesystem::path> candidates;
    const bool folder = std::filesystem::is_directory(path);
    if (folder) {
        for (const auto& entry : std::filesystem::directory_iterator(path)) {
            const std::string name = entry.path().filename().string();
            if (entry.is_regular_file() && !name.starts_with(".") && name != "DICOMDIR")
                candidates.push_back(entry.path());
        }
        std::sort(candidates.begin(), candidates.end());
        TESSERA_CHECK(!candidates.empty(), "the DICOM folder " << quoted(path)
                                                               << " is empty: choose the folder that holds the "
                                                                  "series' .dcm files.");
    } else {
        candidates.push_back(path);
    }

    std::vector<DicomFile> images;
    std::size_t not_dicom = 0, without_pixels = 0;
    for (const std::filesystem::path& candidate : candidates) {
        std::optional<DicomFile> file = scan_dicom_file(candidate);
        if (!file) {
            ++not_dicom;
            continue;
        }
        if (!file->has_pixel_data) {
            ++without_pixels;
            continue;
        }
        images.push_back(std::move(*file));
    }
    if (!folder) {
        TESSERA_CHECK(not_dicom == 0, quoted(path) << " is not a DICOM file (no 'DICM' marker and no DICOM data "
                                                      "elements at its start).");
        TESSERA_CHECK(without_pixels == 0, quoted(path) << " is a DICOM file without pixel data (a report, "
                                                           "structure set or directory), not an image.");
    }
    TESSERA_CHECK(!images.empty(), "the folder " << quoted(path) << " holds no DICOM images: of its "
                                                 << candidates.size() << " files, " << not_dicom
                                                 << " are not DICOM and " << without_pixels
                                                 << " have no pixel data. Choose the folder of the image series.");

    // One series only.
    std::map<std::string, std::size_t> series;
    for (const DicomFile& file : images) ++series[file.series_uid];
    if (series.size() > 1) {
        std::ostringstream list;
        for (const auto& [uid, count] : series)
            list << "\n  " << (uid.empty() ? "(no UID)" : uid) << ": " << count << " files";
        TESSERA_REJECT("the folder " << quoted(path) << " holds " << series.size() << " DICOM series; put each in a "
                                     << "folder of its own:" << list.str());
    }
    for (const DicomFile& file : images) check_readable(file);
    const DicomFile& first = images.front();
    for (const DicomFile& file : images) {
        TESSERA_CHECK(file.rows == first.rows && file.columns == first.columns,
                      "the DICOM series in " << quoted(path) << " mixes slice sizes: " << quoted(first.path) << " is "
                                             << first.columns << "×" << first.rows << ", " << quoted(file.path)
                                             << " is " << file.columns << "×" << file.rows);
    }

    // Orientation and slice order.
    std::array<double, 3> row_direction{1, 0, 0}, column_direction{0, 1, 0};
    const bool positioned = std::all_of(images.begin(), images.end(), [](const DicomFile& file) {
        return file.position.has_value() && file.orientation.has_value();
    });
    if (positioned) {
        const auto& o = *first.orientation;
        row_direction = {o[0], o[1], o[2]};
        column_direction = {o[3], o[4], o[5]};
        for (const DicomFile& file : images) {
            for (int index = 0; index < 6; ++index) {
                TESSERA_CHECK(std::abs((*file.orientation)[index] - o[index]) < 1e-3,
                              "the DICOM series in " << quoted(path) << " mixes slice orientations ("
                                                     << quoted(first.path) << " and " << quoted(file.path)
                                                     << "): is it a localizer mixed with the axial series?");
            }
        }
    }
    const std::array<double, 3> normal = cross(row_direction, column_direction);
    auto along_normal = [&](const DicomFile& file) {
        const auto& p = *file.position;
        return p[0] * normal[0] + p[1] * normal[1] + p[2] * normal[2];
    };
    if (positioned) {
        std::stable_sort(images.begin(), images.end(),
                         [&](const DicomFile& a, const DicomFile& b) { return along_normal(a) < along_normal(b); });
    } else {
        std::stable_sort(images.begin(), images.end(),
                         [](const DicomFile& a, const DicomFile& b) { return a.instance_number < b.instance_number; });
    }

    RawImage raw;
    ImageGeometry& geometry = raw.geometry;
    const auto num_slices = static_cast<std::int64_t>(images.size());
    geometry.size = {first.columns, first.rows, num_slices};
    if (first.pixel_spacing) {
        geometry.spacing[0] = (*first.pixel_spacing)[1];  // between columns
        geometry.spacing[1] = (*first.pixel_spacing)[0];  // between rows
    }
    geometry.spacing[2] = first.slice_thickness > 0 ? first.slice_thickness : 1.0;
    if (positioned) {
        if (num_slices > 1) {
            const double extent = along_normal(images.back()) - along_normal(images.front());
            const double step = extent / static_cast<double>(num_slices - 1);
            for (std::int64_t index = 1; index < num_slices; ++index) {
                const double gap = along_normal(images[index]) - along_normal(images[index - 1]);
                TESSERA_CHECK(gap > 1e-3, "the DICOM series in " << quoted(path) << " has two slices at the same "
                                                                 << "position (" << quoted(images[index - 1].path)
                                                                 << " and " << quoted(images[index].path)
                                                                 << "): is a second series mixed in?");
                TESSERA_CHECK(std::abs(gap - step) < 0.01 * step + 1e-3,
                              "the DICOM series in " << quoted(path) << " has uneven slice spacing (" << gap
                                                     << " mm between " << quoted(images[index - 1].path) << " and "
                                                     << quoted(images[index].path) << ", " << step
                                                     << " mm on average): slices are missing.");
            }
            geometry.spacing[2] = step;
        }
        geometry.origin = *images.front().position;
        for (int row = 0; row < 3; ++row) {
            geometry.direction[row * 3 + 0] = row_direction[row];
            geometry.direction[row * 3 + 1] = column_direction[row];
            geometry.direction[row * 3 + 2] = normal[row];
        }
    }
    for (int axis = 0; axis < 3; ++axis) {
        TESSERA_CHECK(geometry.spacing[axis] > 0 && std::isfinite(geometry.spacing[axis]),
                      quoted(first.path) << " has a zero or negative pixel spacing (" << geometry.spacing[axis]
                                         << " mm along axis " << axis << ")");
    }

    // Voxels: each file decoded, stacked as float.
    const std::size_t slice_voxels = static_cast<std::size_t>(first.columns) * static_cast<std::size_t>(first.rows);
    check_volume_budget(path, std::to_string(first.columns) + "×" + std::to_string(first.rows) + "×" + std::to_string(images.size()),
                        slice_voxels * images.size(), sizeof(float));
    auto buffer = std::make_shared<std::vector<float>>(slice_voxels * images.size());
    for (std::size_t index = 0; index < images.size(); ++index) {
        decode_slice(images[index], buffer->data() + index * slice_voxels);
    }
    raw.scalar_type = ScalarType::F32;
    raw.voxels = buffer->data();
    raw.owner = buffer;
    raw.source_scalar_type = std::string(first.bits_allocated == 8 ? (first.pixel_representation ? "int8" : "uint8")
                                                                   : (first.pixel_representation ? "int16" : "uint16"));
    return raw;
}

}  // namespace tessera::io_detail
