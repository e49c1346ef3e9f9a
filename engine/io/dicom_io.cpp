// DICOM through GDCM (dicom_series.hpp): headers read up to the pixel data for listing and sorting,
// pixels decoded by GDCM's codecs in whatever transfer syntax the file uses.
//
// Per file: identity (series, study, patient), the pixel format, the frame count, and where each frame
// lies — Image Position (Patient) of a single-frame file; for an enhanced multi-frame object the Plane
// Position of each item of the Per-Frame Functional Groups, with orientation and pixel spacing from the
// shared groups (or the first frame's); for an RT dose grid the Image Position plus Grid Frame Offset
// Vector along the normal. GDCM's own messages are switched off: every failure is ours, naming the file.
#include "io/child_process.hpp"
#include "io/dicom_series.hpp"

#include "io/raw_image.hpp"

#include <gdcmDataSet.h>
#include <gdcmFile.h>
#include <gdcmImage.h>
#include <gdcmPhotometricInterpretation.h>
#include <gdcmPixelFormat.h>
#include <gdcmReader.h>
#include <gdcmSequenceOfItems.h>
#include <gdcmTrace.h>
#include <gdcmTransferSyntax.h>

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <functional>
#include <cmath>
#include <cstdio>
#include <csignal>
#include <cstring>
#include <iostream>
#include <mutex>
#include <fstream>
#include <map>
#include <numbers>
#include <optional>
#include <sstream>

namespace tessera {

namespace {

namespace fs = std::filesystem;
using io_detail::ChildOutcome;
using io_detail::run_in_child;
using io_detail::SharedMemory;
using io_detail::quoted;
using Vector3 = std::array<double, 3>;

constexpr std::string_view implicit_little_endian = "1.2.840.10008.1.2";

std::string trim_value(std::string text) {
    while (!text.empty() && (text.back() == '\0' || text.back() == ' ')) text.pop_back();
    while (!text.empty() && text.front() == ' ') text.erase(0, 1);
    return text;
}

// What GDCM says while it reads: its warnings and errors into a string, and fds 1 and 2 (where the C
// libraries under its codecs, libjpeg and pvrg-jpeg, print) into a temporary file, for the lifetime of the
// capture. It runs in the reader's child process (run_in_child), whose output is no one else's.
class GdcmOutputCapture {
public:
    GdcmOutputCapture() : m_lock(mutex()) {
        messages().str({});
        gdcm::Trace::DebugOff();
        gdcm::Trace::SetWarningStream(messages());
        gdcm::Trace::SetErrorStream(messages());
        gdcm::Trace::WarningOn();
        gdcm::Trace::ErrorOn();
        std::fflush(nullptr);
        std::cout.flush();
        m_file = std::tmpfile();
        m_saved_stdout = m_file ? ::dup(1) : -1;
        m_saved_stderr = m_file ? ::dup(2) : -1;
        if (m_saved_stdout >= 0) ::dup2(::fileno(m_file), 1);
        if (m_saved_stderr >= 0) ::dup2(::fileno(m_file), 2);
    }
    ~GdcmOutputCapture() { restore(); }
    GdcmOutputCapture(const GdcmOutputCapture&) = delete;
    GdcmOutputCapture& operator=(const GdcmOutputCapture&) = delete;

    // Everything said so far, trimmed; restores stderr first.
    std::string text() {
        restore();
        std::string said = messages().str();
        said += m_printed;
        return trim_value(said);
    }

private:
    static std::mutex& mutex() {
        static std::mutex instance;
        return instance;
    }
    static std::ostringstream& messages() {
        static std::ostringstream instance;
        return instance;
    }
    void restore() {
        if (m_restored) return;
        m_restored = true;
        std::fflush(nullptr);
        std::cout.flush();
        std::cerr.flush();
        if (m_saved_stdout >= 0) {
            ::dup2(m_saved_stdout, 1);
            ::close(m_saved_stdout);
        }
        if (m_saved_stderr >= 0) {
            ::dup2(m_saved_stderr, 2);
            ::close(m_saved_stderr);
        }
        if (m_file) {
            std::rewind(m_file);
            char chunk[4096];
            std::size_t count = 0;
            while ((count = std::fread(chunk, 1, sizeof chunk, m_file)) > 0 && m_printed.size() < 65536) m_printed.append(chunk, count);
            std::fclose(m_file);
        }
        gdcm::Trace::WarningOff();
        gdcm::Trace::ErrorOff();
        gdcm::Trace::SetWarningStream(std::cerr);
        gdcm::Trace::SetErrorStream(std::cerr);
    }

    std::lock_guard<std::mutex> m_lock;
    std::FILE* m_file = nullptr;
    int m_saved_stdout = -1, m_saved_stderr = -1;
    bool m_restored = false;
    std::string m_printed;
};

// The element's value as text (string VRs), trimmed; "" when absent or empty.
std::string text_of(const gdcm::DataSet& data, std::uint16_t group, std::uint16_t element) {
    const gdcm::Tag tag(group, element);
    if (!data.FindDataElement(tag)) return {};
    const gdcm::ByteValue* value = data.GetDataElement(tag).GetByteValue();
    if (!value || value->GetLength() == 0) return {};
    return trim_value(std::string(value->GetPointer(), value->GetLength()));
}

// A US element (rows, columns, bits): GDCM keeps values in the machine's order after reading.
std::optional<int> unsigned_short_of(const gdcm::DataSet& data, std::uint16_t group, std::uint16_t element) {
    const gdcm::Tag tag(group, element);
    if (!data.FindDataElement(tag)) return std::nullopt;
    const gdcm::ByteValue* value = data.GetDataElement(tag).GetByteValue();
    if (!value || value->GetLength() < 2) return std::nullopt;
    std::uint16_t number = 0;
    std::memcpy(&number, value->GetPointer(), 2);
    return number;
}

std::vector<double> decimals_of(const std::string& text) {
    std::vector<double> values;
    std::string item;
    std::istringstream in(text);
    while (std::getline(in, item, '\\')) {
        try {
            std::size_t used = 0;
            const double value = std::stod(item, &used);
            if (!std::isfinite(value)) return {};
            values.push_back(value);
        } catch (const std::exception&) {
            return {};
        }
    }
    return values;
}

template <std::size_t N>
std::optional<std::array<double, N>> decimals_of(const gdcm::DataSet& data, std::uint16_t group, std::uint16_t element) {
    const std::vector<double> values = decimals_of(text_of(data, group, element));
    if (values.size() != N) return std::nullopt;
    std::array<double, N> fixed{};
    std::copy(values.begin(), values.end(), fixed.begin());
    return fixed;
}

std::optional<double> decimal_of(const gdcm::DataSet& data, std::uint16_t group, std::uint16_t element) {
    const auto value = decimals_of<1>(data, group, element);
    return value ? std::optional<double>((*value)[0]) : std::nullopt;
}

// The nested data sets of sequence (group, element), copied; empty when absent or not a sequence.
std::vector<gdcm::DataSet> items_of(const gdcm::DataSet& data, std::uint16_t group, std::uint16_t element, std::size_t limit) {
    std::vector<gdcm::DataSet> items;
    const gdcm::Tag tag(group, element);
    if (!data.FindDataElement(tag)) return items;
    const gdcm::SmartPointer<gdcm::SequenceOfItems> sequence = data.GetDataElement(tag).GetValueAsSQ();
    if (!sequence) return items;
    const std::size_t count = std::min<std::size_t>(sequence->GetNumberOfItems(), limit);
    for (std::size_t index = 1; index <= count; ++index) items.push_back(sequence->GetItem(index).GetNestedDataSet());
    return items;
}

std::optional<gdcm::DataSet> first_item_of(const gdcm::DataSet& data, std::uint16_t group, std::uint16_t element) {
    std::vector<gdcm::DataSet> items = items_of(data, group, element, 1);
    if (items.empty()) return std::nullopt;
    return std::move(items.front());
}

// A functional group's item: (group sequence)[0].(macro sequence)[0].
std::optional<gdcm::DataSet> macro_of(const std::optional<gdcm::DataSet>& frame_group, std::uint16_t group, std::uint16_t element) {
    if (!frame_group) return std::nullopt;
    return first_item_of(*frame_group, group, element);
}

Vector3 cross(const Vector3& a, const Vector3& b) {
    return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
double dot(const Vector3& a, const Vector3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }

std::string transfer_syntax_name(const std::string& uid) {
    if (uid == implicit_little_endian) return "implicit little endian";
    if (uid == "1.2.840.10008.1.2.1") return "explicit little endian";
    if (uid == "1.2.840.10008.1.2.2") return "explicit big endian";
    if (uid == "1.2.840.10008.1.2.1.99") return "deflated explicit little endian";
    if (uid == "1.2.840.10008.1.2.4.50" || uid == "1.2.840.10008.1.2.4.51") return "JPEG baseline";
    if (uid == "1.2.840.10008.1.2.4.57" || uid == "1.2.840.10008.1.2.4.70") return "JPEG lossless";
    if (uid == "1.2.840.10008.1.2.4.80") return "JPEG-LS lossless";
    if (uid == "1.2.840.10008.1.2.4.81") return "JPEG-LS near-lossless";
    if (uid == "1.2.840.10008.1.2.4.90") return "JPEG 2000 lossless";
    if (uid == "1.2.840.10008.1.2.4.91") return "JPEG 2000";
    if (uid == "1.2.840.10008.1.2.5") return "RLE lossless";
    return uid.empty() ? "unknown" : uid;
}

struct DicomFile {
    fs::path path;
    std::string transfer_syntax;  // UID
    std::string series_uid, patient_name, patient_id, study_description, study_date, series_description, modality;
    std::int64_t series_number = 0, instance_number = 0;
    bool is_image = false;  // has rows and columns
    int rows = 0, columns = 0, samples_per_pixel = 1, bits_allocated = 0, bits_stored = 0, high_bit = 0, pixel_representation = 0;
    std::string photometric;  // MONOCHROME2, MONOCHROME1, RGB, …
    std::int64_t frames = 1;
    std::optional<std::array<double, 6>> orientation;  // row vector, column vector
    std::vector<Vector3> positions;                     // one per frame; empty when the file does not say
    std::optional<std::array<double, 2>> pixel_spacing; // between rows, between columns (mm)
    double slice_thickness = 0, spacing_between_slices = 0;
    double rescale_slope = 1, rescale_intercept = 0;
};

// Geometry of an enhanced multi-frame object, from its functional groups.
void read_functional_groups(const gdcm::DataSet& data, DicomFile& file) {
    const std::optional<gdcm::DataSet> shared = first_item_of(data, 0x5200, 0x9229);
    const std::vector<gdcm::DataSet> per_frame = items_of(data, 0x5200, 0x9230, static_cast<std::size_t>(file.frames));
    const std::optional<gdcm::DataSet> first_frame =
        per_frame.empty() ? std::nullopt : std::optional<gdcm::DataSet>(per_frame.front());
    // A macro from the shared groups, else from the first frame's.
    const auto macro = [&](std::uint16_t group, std::uint16_t element) {
        std::optional<gdcm::DataSet> found = macro_of(shared, group, element);
        return found ? found : macro_of(first_frame, group, element);
    };
    if (const auto orientation = macro(0x0020, 0x9116)) file.orientation = decimals_of<6>(*orientation, 0x0020, 0x0037);
    if (const auto measures = macro(0x0028, 0x9110)) {
        file.pixel_spacing = decimals_of<2>(*measures, 0x0028, 0x0030);
        file.slice_thickness = decimal_of(*measures, 0x0018, 0x0050).value_or(file.slice_thickness);
        file.spacing_between_slices = decimal_of(*measures, 0x0018, 0x0088).value_or(file.spacing_between_slices);
    }
    if (const auto rescale = macro(0x0028, 0x9145)) {
        file.rescale_intercept = decimal_of(*rescale, 0x0028, 0x1052).value_or(file.rescale_intercept);
        file.rescale_slope = decimal_of(*rescale, 0x0028, 0x1053).value_or(file.rescale_slope);
    }
    if (static_cast<std::int64_t>(per_frame.size()) != file.frames) return;
    std::vector<Vector3> positions;
    for (const gdcm::DataSet& frame : per_frame) {
        const std::optional<gdcm::DataSet> plane = first_item_of(frame, 0x0020, 0x9113);
        const auto position = plane ? decimals_of<3>(*plane, 0x0020, 0x0032) : std::nullopt;
        if (!position) return;
        positions.push_back(*position);
    }
    file.positions = std::move(positions);
}

// Before GDCM parses a file, every length it declares is checked against the bytes that remain: GDCM
// allocates an element's declared length before reading it, so one damaged length would make it try to
// allocate gigabytes. The walk reads element headers only (values are skipped by seeking), descends into
// sequences and items of defined and undefined length (and, in implicit VR, into any value that starts with
// an item tag, as GDCM does), and into encapsulated pixel data's fragments.
class LengthCheck {
public:
    explicit LengthCheck(const fs::path& path) : m_in(path, std::ios::binary) {
        std::error_code error;
        m_size = fs::file_size(path, error);
        if (error || !m_in) m_size = 0;
    }

    // Empty when GDCM may read the file, else what is wrong.
    std::string problem() {
        if (m_size < 8) return "it is too short to be DICOM";
        std::uint64_t position = 0;
        char preamble[132] = {};
        if (m_size >= 132 && read_at(0, preamble, 132) && std::memcmp(preamble + 128, "DICM", 4) == 0) position = 132;
        // File meta information (group 0002): explicit VR little endian.
        m_explicit = true;
        m_big_endian = false;
        std::string transfer_syntax;
        bool meta = false;
        while (position + 8 <= m_size && m_problem.empty() && group_at(position) == 0x0002) {
            const std::uint64_t start = position;
            if (!element(position, 0)) break;
            if (element_at(start) == 0x00020010) transfer_syntax = m_last_value;
            meta = true;
        }
        if (!m_problem.empty()) return m_problem;
        transfer_syntax = trim_value(transfer_syntax);
        if (transfer_syntax == "1.2.840.10008.1.2.1.99") {
            return "it uses the deflated transfer syntax, which Tessera does not read; 'gdcmconv --raw' converts it";
        }
        if (meta) {
            m_explicit = transfer_syntax != implicit_little_endian;
        } else {
            char vr[2] = {};
            m_explicit = read_at(position + 4, vr, 2) && std::isupper(static_cast<unsigned char>(vr[0])) &&
                         std::isupper(static_cast<unsigned char>(vr[1]));
        }
        m_big_endian = transfer_syntax == "1.2.840.10008.1.2.2";
        while (position + 8 <= m_size && m_problem.empty()) {
            if (!element(position, 0)) break;
        }
        return m_problem;
    }

private:
    static constexpr std::uint32_t undefined = 0xffffffffu;

    bool read_at(std::uint64_t at, char* bytes, std::size_t count) {
        if (at + count > m_size) return false;
        m_in.clear();
        m_in.seekg(static_cast<std::streamoff>(at));
        return static_cast<bool>(m_in.read(bytes, static_cast<std::streamsize>(count)));
    }
    std::uint16_t u16(const unsigned char* bytes) const {
        return m_big_endian ? static_cast<std::uint16_t>((bytes[0] << 8) | bytes[1]) : static_cast<std::uint16_t>(bytes[0] | (bytes[1] << 8));
    }
    std::uint32_t u32(const unsigned char* bytes) const {
        const std::uint32_t first = u16(bytes), second = u16(bytes + 2);
        return m_big_endian ? (first << 16) | second : (second << 16) | first;
    }
    std::uint16_t group_at(std::uint64_t at) {
        unsigned char bytes[2] = {};
        if (!read_at(at, reinterpret_cast<char*>(bytes), 2)) return 0;
        return m_big_endian ? static_cast<std::uint16_t>((bytes[0] << 8) | bytes[1]) : static_cast<std::uint16_t>(bytes[0] | (bytes[1] << 8));
    }
    std::uint32_t element_at(std::uint64_t at) {
        unsigned char bytes[4] = {};
        if (!read_at(at, reinterpret_cast<char*>(bytes), 4)) return 0;
        return (static_cast<std::uint32_t>(u16(bytes)) << 16) | u16(bytes + 2);
    }
    // An element (or item) whose header starts at `at` and whose value would start at `value_at` declares
    // more bytes than remain after its header.
    bool fail(std::uint64_t at, std::uint64_t value_at, std::uint32_t tag, std::uint64_t length) {
        const std::uint64_t remaining = m_size > value_at ? m_size - value_at : 0;
        std::ostringstream text;
        if (tag == 0x7fe00010) {
            text << "its pixel data (at byte " << at << ") declares " << length << " bytes but only " << remaining
                 << " follow its header: the file is truncated";
        } else {
            text << "its element (" << std::hex << (tag >> 16) << "," << (tag & 0xffff) << std::dec << ") at byte " << at << " declares "
                 << length << " bytes but only " << remaining << " follow its header: the file is damaged or truncated";
        }
        m_problem = text.str();
        return false;
    }

    // One element at `position`, moved past; false at the end or when something is wrong (m_problem).
    bool element(std::uint64_t& position, int depth) {
        if (depth > 32) {
            m_problem = "its sequences nest more than 32 deep: the file is damaged";
            return false;
        }
        unsigned char header[12] = {};
        if (!read_at(position, reinterpret_cast<char*>(header), 8)) return false;
        const std::uint32_t tag = (static_cast<std::uint32_t>(u16(header)) << 16) | u16(header + 2);
        const std::uint64_t start = position;
        std::uint64_t length = 0;
        std::string vr;
        if (m_explicit && (tag >> 16) != 0xfffe) {
            vr.assign(reinterpret_cast<const char*>(header + 4), 2);
            static constexpr std::string_view long_vrs[] = {"OB", "OD", "OF", "OL", "OV", "OW", "SQ", "SV", "UC", "UN", "UR", "UT", "UV"};
            if (std::find(std::begin(long_vrs), std::end(long_vrs), vr) != std::end(long_vrs)) {
                if (!read_at(position, reinterpret_cast<char*>(header), 12)) return fail(start, start + 12, tag, 12);
                length = u32(header + 8);
                position += 12;
            } else {
                length = u16(header + 6);
                position += 8;
            }
        } else {
            length = u32(header + 4);
            position += 8;
        }
        if (length == undefined) return undefined_contents(position, depth + 1, vr == "UN", tag == 0x7fe00010);
        if (length > m_size - std::min(position, m_size)) return fail(start, position, tag, length);
        m_last_value.clear();
        if (length <= 64) {
            m_last_value.resize(static_cast<std::size_t>(length));
            if (length > 0) read_at(position, m_last_value.data(), static_cast<std::size_t>(length));
        }
        // A sequence's value (explicit SQ, or any value starting with an item tag) holds items to check.
        if (length >= 8 && (vr == "SQ" || vr.empty() || vr == "UN") && tag != 0x7fe00010) {
            unsigned char first[4] = {};
            if (read_at(position, reinterpret_cast<char*>(first), 4) && u16(first) == 0xfffe && u16(first + 2) == 0xe000) {
                const std::uint64_t end = position + length;
                std::uint64_t inside = position;
                const bool saved_explicit = m_explicit;
                if (vr == "UN") m_explicit = false;
                while (inside + 8 <= end && m_problem.empty()) {
                    if (!item(inside, depth + 1, false)) break;
                }
                m_explicit = saved_explicit;
                if (!m_problem.empty()) return false;
            }
        }
        position += length;
        return true;
    }

    // An item (fffe,e000) at `position` and its contents (elements; a pixel data fragment's bytes are
    // skipped); delimiters end the enclosing walk (false).
    bool item(std::uint64_t& position, int depth, bool fragment) {
        unsigned char header[8] = {};
        if (!read_at(position, reinterpret_cast<char*>(header), 8)) return false;
        const std::uint32_t tag = (static_cast<std::uint32_t>(u16(header)) << 16) | u16(header + 2);
        const std::uint64_t length = u32(header + 4);
        if (tag != 0xfffee000) return false;
        const std::uint64_t start = position;
        position += 8;
        if (length == undefined) return !fragment && undefined_contents(position, depth + 1, false, false);
        if (length > m_size - std::min(position, m_size)) return fail(start, position, tag, length);
        const std::uint64_t end = position + length;
        std::uint64_t inside = position;
        while (!fragment && inside + 8 <= end && m_problem.empty()) {
            if (!element(inside, depth + 1)) break;
        }
        position = end;
        return m_problem.empty();
    }

    // Contents of undefined length (a sequence's items, an item's elements, pixel data fragments) up to
    // their delimiter.
    bool undefined_contents(std::uint64_t& position, int depth, bool implicit_inside, bool fragments) {
        if (depth > 32) {
            m_problem = "its sequences nest more than 32 deep: the file is damaged";
            return false;
        }
        const bool saved_explicit = m_explicit;
        if (implicit_inside) m_explicit = false;
        while (position + 8 <= m_size && m_problem.empty()) {
            unsigned char header[8] = {};
            if (!read_at(position, reinterpret_cast<char*>(header), 8)) break;
            const std::uint32_t tag = (static_cast<std::uint32_t>(u16(header)) << 16) | u16(header + 2);
            if (tag == 0xfffee0dd || tag == 0xfffee00d) {
                position += 8;
                break;
            }
            if (tag == 0xfffee000) {
                if (!item(position, depth, fragments)) break;
            } else if (fragments || !element(position, depth)) {
                break;
            }
        }
        m_explicit = saved_explicit;
        return m_problem.empty();
    }

    std::ifstream m_in;
    std::uint64_t m_size = 0;
    bool m_explicit = true, m_big_endian = false;
    std::string m_problem, m_last_value;
};

// The file's header (everything before the pixel data); nothing when it is not DICOM.
// Throws (damaged) or returns false (not DICOM) unless every length in the file fits: run in this process,
// before any child lets GDCM at the file.
bool lengths_fit(const fs::path& path) {
    if (const std::string problem = LengthCheck(path).problem(); !problem.empty()) {
        // Not DICOM at all is told apart from damaged DICOM by the preamble.
        if (!io_detail::has_dicom_preamble(path)) return false;
        TESSERA_REJECT(quoted(path) << " cannot be read: " << problem << ".");
    }
    return true;
}

// In the reader's child: the header of a file lengths_fit() passed.
std::optional<DicomFile> scan_file(const fs::path& path) {
    gdcm::Reader reader;
    reader.SetFileName(path.c_str());
    {
        GdcmOutputCapture quiet;  // what it says about a header is not kept: the checks below speak
        if (!reader.ReadUpToTag(gdcm::Tag(0x7fe0, 0x0010))) return std::nullopt;
    }
    const gdcm::File& parsed = reader.GetFile();
    const gdcm::DataSet& data = parsed.GetDataSet();
    if (data.IsEmpty()) return std::nullopt;
    DicomFile file;
    file.path = path;
    file.transfer_syntax = trim_value(parsed.GetHeader().GetDataSetTransferSyntax().GetString() ? parsed.GetHeader().GetDataSetTransferSyntax().GetString() : "");
    file.series_uid = text_of(data, 0x0020, 0x000e);
    file.patient_name = text_of(data, 0x0010, 0x0010);
    file.patient_id = text_of(data, 0x0010, 0x0020);
    file.study_date = text_of(data, 0x0008, 0x0020);
    file.study_description = text_of(data, 0x0008, 0x1030);
    file.series_description = text_of(data, 0x0008, 0x103e);
    file.modality = text_of(data, 0x0008, 0x0060);
    file.series_number = static_cast<std::int64_t>(decimal_of(data, 0x0020, 0x0011).value_or(0));
    file.instance_number = static_cast<std::int64_t>(decimal_of(data, 0x0020, 0x0013).value_or(0));
    const auto rows = unsigned_short_of(data, 0x0028, 0x0010), columns = unsigned_short_of(data, 0x0028, 0x0011);
    file.is_image = rows.has_value() && columns.has_value();
    if (!file.is_image) return file;
    file.rows = *rows;
    file.columns = *columns;
    file.samples_per_pixel = unsigned_short_of(data, 0x0028, 0x0002).value_or(1);
    file.bits_allocated = unsigned_short_of(data, 0x0028, 0x0100).value_or(0);
    file.bits_stored = unsigned_short_of(data, 0x0028, 0x0101).value_or(file.bits_allocated);
    file.high_bit = unsigned_short_of(data, 0x0028, 0x0102).value_or(file.bits_stored - 1);
    file.photometric = text_of(data, 0x0028, 0x0004);
    file.pixel_representation = unsigned_short_of(data, 0x0028, 0x0103).value_or(0);
    const double frames = decimal_of(data, 0x0028, 0x0008).value_or(1);
    file.frames = frames >= 1 && frames <= 1e6 ? static_cast<std::int64_t>(frames) : (frames > 1e6 ? -1 : 1);
    file.orientation = decimals_of<6>(data, 0x0020, 0x0037);
    if (const auto position = decimals_of<3>(data, 0x0020, 0x0032)) file.positions = {*position};
    file.pixel_spacing = decimals_of<2>(data, 0x0028, 0x0030);
    file.slice_thickness = decimal_of(data, 0x0018, 0x0050).value_or(0);
    file.spacing_between_slices = decimal_of(data, 0x0018, 0x0088).value_or(0);
    file.rescale_intercept = decimal_of(data, 0x0028, 0x1052).value_or(0);
    file.rescale_slope = decimal_of(data, 0x0028, 0x1053).value_or(1);
    // An RT dose grid's stored values times Dose Grid Scaling are the dose in Gy.
    if (file.modality == "RTDOSE" && !decimal_of(data, 0x0028, 0x1053)) {
        file.rescale_slope = decimal_of(data, 0x3004, 0x000e).value_or(file.rescale_slope);
    }
    if (file.frames > 1) {
        read_functional_groups(data, file);
        // An RT dose grid: frame f lies Grid Frame Offset Vector[f] mm along the normal from Image Position.
        const std::vector<double> offsets = decimals_of(text_of(data, 0x3004, 0x000c));
        if (file.positions.size() == 1 && static_cast<std::int64_t>(offsets.size()) == file.frames && file.orientation) {
            const auto& o = *file.orientation;
            const Vector3 normal = cross({o[0], o[1], o[2]}, {o[3], o[4], o[5]});
            const Vector3 origin = file.positions.front();
            file.positions.clear();
            for (double offset : offsets) {
                file.positions.push_back({origin[0] + offset * normal[0], origin[1] + offset * normal[1], origin[2] + offset * normal[2]});
            }
        }
        if (static_cast<std::int64_t>(file.positions.size()) != file.frames) file.positions.clear();
    }
    return file;
}

// Throws unless the file's pixels can become one grayscale slice per frame.
void check_readable(const DicomFile& file) {
    const std::string name = quoted(file.path);
    TESSERA_CHECK(file.frames >= 1, name << " declares more than a million frames (Number of Frames): its header is damaged");
    TESSERA_CHECK(file.samples_per_pixel == 1, name << " holds colour pixels (" << file.samples_per_pixel
                                                    << " samples per pixel), an unsupported voxel type: Tessera reads "
                                                       "grayscale DICOM.");
    TESSERA_CHECK(file.bits_allocated == 8 || file.bits_allocated == 16 || file.bits_allocated == 32,
                  name << " stores " << file.bits_allocated << " bits per pixel: Tessera reads 8-, 16- and 32-bit DICOM.");
    TESSERA_CHECK(file.rows > 0 && file.columns > 0, name << " has a zero dimension (" << file.columns << "×" << file.rows << " pixels).");
    const double largest = std::abs(file.rescale_slope) * std::pow(2.0, file.bits_allocated) + std::abs(file.rescale_intercept);
    TESSERA_CHECK(file.rescale_slope != 0 && std::isfinite(largest) && largest < 1e30,
                  name << " has an unusable Rescale Slope/Intercept (" << file.rescale_slope << ", " << file.rescale_intercept
                       << "): expected a non-zero slope and values that fit a float.");
}

// One slice of a series: frame `frame` of file `file`.
struct Slice {
    std::size_t file = 0;
    std::int64_t frame = 0;
};

// A series' files and slices in stacking order, with its geometry and what it noticed.
struct SeriesLayout {
    std::vector<DicomFile> files;
    std::vector<Slice> slices;
    ImageGeometry geometry;
    std::vector<std::string> warnings;
};

std::string millimetres(double value) {
    std::ostringstream text;
    text.precision(4);
    text << value << " mm";
    return text.str();
}

// Sorts the slices along the normal and derives the grid; throws for series that are not one volume.
SeriesLayout lay_out(std::vector<DicomFile> files, const fs::path& where) {
    SeriesLayout layout;
    layout.files = std::move(files);
    std::sort(layout.files.begin(), layout.files.end(), [](const DicomFile& a, const DicomFile& b) { return a.path < b.path; });
    for (const DicomFile& file : layout.files) check_readable(file);
    const DicomFile& first = layout.files.front();
    const std::string series_name = "the DICOM series in " + quoted(where);
    for (const DicomFile& file : layout.files) {
        TESSERA_CHECK(file.rows == first.rows && file.columns == first.columns,
                      series_name << " mixes slice sizes: " << quoted(first.path) << " is " << first.columns << "×" << first.rows
                                  << ", " << quoted(file.path) << " is " << file.columns << "×" << file.rows);
    }
    const bool positioned = std::all_of(layout.files.begin(), layout.files.end(), [](const DicomFile& file) {
        return file.orientation.has_value() && static_cast<std::int64_t>(file.positions.size()) == file.frames;
    });
    Vector3 row_direction{1, 0, 0}, column_direction{0, 1, 0};
    if (positioned) {
        const auto& o = *first.orientation;
        row_direction = {o[0], o[1], o[2]};
        column_direction = {o[3], o[4], o[5]};
        for (const DicomFile& file : layout.files) {
            for (int index = 0; index < 6; ++index) {
                TESSERA_CHECK(std::abs((*file.orientation)[static_cast<std::size_t>(index)] - o[static_cast<std::size_t>(index)]) < 1e-3,
                              series_name << " mixes slice orientations (" << quoted(first.path) << " and " << quoted(file.path)
                                          << "): is it a localizer mixed with the axial series?");
            }
        }
    }
    const Vector3 normal = cross(row_direction, column_direction);
    for (std::size_t file = 0; file < layout.files.size(); ++file) {
        for (std::int64_t frame = 0; frame < layout.files[file].frames; ++frame) layout.slices.push_back({file, frame});
    }
    const auto position = [&](const Slice& slice) { return layout.files[slice.file].positions[static_cast<std::size_t>(slice.frame)]; };
    const auto along_normal = [&](const Slice& slice) { return dot(position(slice), normal); };
    if (positioned) {
        std::stable_sort(layout.slices.begin(), layout.slices.end(),
                         [&](const Slice& a, const Slice& b) { return along_normal(a) < along_normal(b); });
    } else {
        std::stable_sort(layout.slices.begin(), layout.slices.end(), [&](const Slice& a, const Slice& b) {
            const std::int64_t instance_a = layout.files[a.file].instance_number, instance_b = layout.files[b.file].instance_number;
            return instance_a != instance_b ? instance_a < instance_b : a.frame < b.frame;
        });
    }

    ImageGeometry& geometry = layout.geometry;
    const auto num_slices = static_cast<std::int64_t>(layout.slices.size());
    geometry.size = {first.columns, first.rows, num_slices};
    if (first.pixel_spacing) {
        geometry.spacing[0] = (*first.pixel_spacing)[1];  // between columns
        geometry.spacing[1] = (*first.pixel_spacing)[0];  // between rows
    }
    geometry.spacing[2] = first.spacing_between_slices > 0 ? first.spacing_between_slices
                          : first.slice_thickness > 0     ? first.slice_thickness
                                                          : 1.0;
    if (positioned) {
        if (num_slices > 1) {
            const Slice& lowest = layout.slices.front();
            const Slice& highest = layout.slices.back();
            const double extent = along_normal(highest) - along_normal(lowest);
            const double step = extent / static_cast<double>(num_slices - 1);
            double smallest_gap = extent, largest_gap = 0;
            for (std::int64_t index = 1; index < num_slices; ++index) {
                const Slice& before = layout.slices[static_cast<std::size_t>(index - 1)];
                const Slice& after = layout.slices[static_cast<std::size_t>(index)];
                const double gap = along_normal(after) - along_normal(before);
                const auto slice_name = [&](const Slice& slice) {
                    return quoted(layout.files[slice.file].path) +
                           (layout.files[slice.file].frames > 1 ? " frame " + std::to_string(slice.frame + 1) : std::string());
                };
                TESSERA_CHECK(gap > 1e-3, series_name << " has two slices at the same position (" << slice_name(before) << " and "
                                                      << slice_name(after) << "): is a second series mixed in?");
                smallest_gap = std::min(smallest_gap, gap);
                largest_gap = std::max(largest_gap, gap);
            }
            geometry.spacing[2] = step;
            if (largest_gap - smallest_gap > 0.01 * step + 1e-3) {
                layout.warnings.push_back("uneven slice spacing: consecutive slices are " + millimetres(smallest_gap) + " to " +
                                          millimetres(largest_gap) + " apart (" + millimetres(step) +
                                          " on average, used as the spacing; not resampled): slices may be missing");
            }
            // Gantry tilt: the slices' positions step along a direction off their normal.
            const Vector3 first_position = position(lowest), last_position = position(highest);
            const Vector3 travel{last_position[0] - first_position[0], last_position[1] - first_position[1],
                                 last_position[2] - first_position[2]};
            const double length = std::sqrt(dot(travel, travel));
            if (length > 0) {
                const double angle = std::acos(std::clamp(dot(travel, normal) / length, -1.0, 1.0)) * 180.0 / std::numbers::pi;
                if (angle > 0.05) {
                    std::ostringstream text;
                    text.precision(3);
                    text << "gantry tilt: the slices step along a direction " << angle
                         << "° off their normal, so the volume (stacked along the normal, not resampled) is sheared by "
                         << millimetres(length * std::sin(angle * std::numbers::pi / 180.0)) << " from its first slice to its last";
                    layout.warnings.push_back(text.str());
                }
            }
        }
        geometry.origin = position(layout.slices.front());
        for (std::size_t row = 0; row < 3; ++row) {
            geometry.direction[row * 3 + 0] = row_direction[row];
            geometry.direction[row * 3 + 1] = column_direction[row];
            geometry.direction[row * 3 + 2] = normal[row];
        }
    } else if (num_slices > 1) {
        layout.warnings.push_back("the files give no Image Position/Orientation: slices stacked by Instance Number, " +
                                  millimetres(geometry.spacing[2]) + " apart, with an identity orientation");
    }
    for (int axis = 0; axis < 3; ++axis) {
        TESSERA_CHECK(geometry.spacing[axis] > 0 && std::isfinite(geometry.spacing[axis]),
                      quoted(first.path) << " has a zero or negative pixel spacing (" << geometry.spacing[axis] << " mm along axis "
                                         << axis << ")");
    }
    return layout;
}

// ---- GDCM in a child process --------------------------------------------------------------------
//
// Debian builds GDCM with its assertions on, and its parser asserts (aborts the process) on some damaged
// files where it cannot go on. So GDCM runs in a forked child: the child parses and decodes, sends what it
// found down a pipe and writes pixels into memory shared with the parent; a child that dies takes no one
// with it, and the parent names the file it was reading. A child that does not finish within its time is
// killed.

// Bytes written and read in order: the pipe's messages.
class Message {
public:
    void put(std::int64_t value) { m_bytes.append(reinterpret_cast<const char*>(&value), sizeof value); }
    void put(double value) { m_bytes.append(reinterpret_cast<const char*>(&value), sizeof value); }
    void put(const std::string& text) {
        put(static_cast<std::int64_t>(text.size()));
        m_bytes += text;
    }
    const std::string& bytes() const { return m_bytes; }

private:
    std::string m_bytes;
};

class MessageReader {
public:
    explicit MessageReader(std::string_view bytes) : m_bytes(bytes) {}
    std::int64_t integer() { return take<std::int64_t>(); }
    double decimal() { return take<double>(); }
    std::string text() {
        const std::int64_t length = integer();
        TESSERA_ASSERT(length >= 0 && static_cast<std::size_t>(length) <= m_bytes.size() - m_at, "a DICOM reader message is cut short");
        std::string value(m_bytes.substr(m_at, static_cast<std::size_t>(length)));
        m_at += static_cast<std::size_t>(length);
        return value;
    }
    bool done() const { return m_at == m_bytes.size(); }

private:
    template <class T>
    T take() {
        TESSERA_ASSERT(m_bytes.size() - m_at >= sizeof(T), "a DICOM reader message is cut short");
        T value;
        std::memcpy(&value, m_bytes.data() + m_at, sizeof(T));
        m_at += sizeof(T);
        return value;
    }
    std::string_view m_bytes;
    std::size_t m_at = 0;
};

void put_file(Message& out, const DicomFile& file) {
    for (const std::string* text : {&file.transfer_syntax, &file.series_uid, &file.patient_name, &file.patient_id, &file.study_description,
                                    &file.study_date, &file.series_description, &file.modality, &file.photometric}) {
        out.put(*text);
    }
    for (std::int64_t value : {file.series_number, file.instance_number, std::int64_t{file.is_image}, std::int64_t{file.rows},
                               std::int64_t{file.columns}, std::int64_t{file.samples_per_pixel}, std::int64_t{file.bits_allocated},
                               std::int64_t{file.bits_stored}, std::int64_t{file.high_bit}, std::int64_t{file.pixel_representation}, file.frames}) {
        out.put(value);
    }
    out.put(std::int64_t{file.orientation.has_value()});
    if (file.orientation) for (double value : *file.orientation) out.put(value);
    out.put(static_cast<std::int64_t>(file.positions.size()));
    for (const Vector3& position : file.positions) for (double value : position) out.put(value);
    out.put(std::int64_t{file.pixel_spacing.has_value()});
    if (file.pixel_spacing) for (double value : *file.pixel_spacing) out.put(value);
    for (double value : {file.slice_thickness, file.spacing_between_slices, file.rescale_slope, file.rescale_intercept}) out.put(value);
}

DicomFile take_file(MessageReader& in, const fs::path& path) {
    DicomFile file;
    file.path = path;
    for (std::string* text : {&file.transfer_syntax, &file.series_uid, &file.patient_name, &file.patient_id, &file.study_description,
                              &file.study_date, &file.series_description, &file.modality, &file.photometric}) {
        *text = in.text();
    }
    file.series_number = in.integer();
    file.instance_number = in.integer();
    file.is_image = in.integer() != 0;
    for (int* value : {&file.rows, &file.columns, &file.samples_per_pixel, &file.bits_allocated, &file.bits_stored, &file.high_bit,
                       &file.pixel_representation}) {
        *value = static_cast<int>(in.integer());
    }
    file.frames = in.integer();
    if (in.integer() != 0) {
        std::array<double, 6> orientation{};
        for (double& value : orientation) value = in.decimal();
        file.orientation = orientation;
    }
    const std::int64_t positions = in.integer();
    for (std::int64_t index = 0; index < positions; ++index) {
        Vector3 position{};
        for (double& value : position) value = in.decimal();
        file.positions.push_back(position);
    }
    if (in.integer() != 0) {
        std::array<double, 2> spacing{};
        for (double& value : spacing) value = in.decimal();
        file.pixel_spacing = spacing;
    }
    for (double* value : {&file.slice_thickness, &file.spacing_between_slices, &file.rescale_slope, &file.rescale_intercept}) *value = in.decimal();
    return file;
}

// Memory the child writes and the parent reads: MAP_SHARED, anonymous.
// A child's error frame, rethrown in the parent as what it was.
// `files` and the outcome's progress name the file an out-of-memory ('M') was met on.
void rethrow_child_error(const ChildOutcome& outcome, const std::vector<fs::path>& files) {
    for (const auto& [kind, bytes] : outcome.frames) {
        if (kind == 'E') throw Error(Error::Kind::InvalidInput, bytes);
        if (kind == 'I') throw Error(Error::Kind::Internal, bytes);
        if (kind == 'M') {
            const auto at = static_cast<std::size_t>(std::clamp<std::int64_t>(outcome.progress, 0, static_cast<std::int64_t>(files.size()) - 1));
            throw Error(Error::Kind::InvalidInput, quoted(files[at]) + " " + bytes);
        }
    }
}

// What a child may allocate beyond what it inherits: a few times the largest file, plus `extra`.
std::uint64_t memory_allowance(const std::vector<fs::path>& files, std::uint64_t extra) {
    std::uint64_t largest = 0;
    for (const fs::path& file : files) {
        std::error_code error;
        const std::uint64_t size = fs::file_size(file, error);
        if (!error) largest = std::max(largest, size);
    }
    return (std::uint64_t{256} << 20) + 4 * largest + extra;
}

// How long a child may take: generous for the files' bytes (a slow disk, a large JPEG 2000 series).
double child_seconds(const std::vector<fs::path>& files) {
    std::uint64_t bytes = 0;
    for (const fs::path& file : files) {
        std::error_code error;
        const std::uint64_t size = fs::file_size(file, error);
        if (!error) bytes += size;
    }
    return 60.0 + static_cast<double>(bytes) / (4.0 * 1024 * 1024);  // 4 MB/s at the slowest
}

std::string series_label(const DicomSeriesInfo& series) {
    std::ostringstream text;
    text << "series " << series.series_number;
    if (!series.description.empty()) text << " \"" << series.description << "\"";
    text << " (" << (series.modality.empty() ? "?" : series.modality) << ", " << series.num_slices << " slice"
         << (series.num_slices == 1 ? "" : "s") << ", UID " << (series.series_uid.empty() ? "none" : series.series_uid) << ")";
    return text.str();
}

// The image files of `path` (a folder or one file), grouped by Series Instance UID, and the count of
// files skipped (not DICOM; DICOM without pixels).
struct ScannedFolder {
    std::map<std::string, std::vector<DicomFile>> series;
    std::size_t num_candidates = 0, not_dicom = 0, without_pixels = 0;
    std::vector<std::string> damaged;  // files skipped, each with why
};

ScannedFolder scan(const fs::path& path) {
    ScannedFolder scanned;
    std::vector<fs::path> candidates;
    const bool folder = fs::is_directory(path);
    if (folder) {
        for (const auto& entry : fs::directory_iterator(path)) {
            const std::string name = entry.path().filename().string();
            if (entry.is_regular_file() && !name.starts_with(".") && name != "DICOMDIR") candidates.push_back(entry.path());
        }
        std::sort(candidates.begin(), candidates.end());
        TESSERA_CHECK(!candidates.empty(), "the DICOM folder " << quoted(path) << " is empty: choose the folder that holds the series' .dcm files.");
    } else {
        candidates.push_back(path);
    }
    scanned.num_candidates = candidates.size();
    // Lengths first, here; the files that pass go to GDCM.
    {
        std::vector<fs::path> passed;
        for (const fs::path& candidate : candidates) {
            try {
                if (lengths_fit(candidate)) {
                    passed.push_back(candidate);
                } else {
                    ++scanned.not_dicom;
                }
            } catch (const Error& error) {
                if (!folder) throw;
                scanned.damaged.emplace_back(error.what());
            }
        }
        candidates = std::move(passed);
    }
    // Headers are read in a child; one that GDCM stops on is skipped as damaged (a single file: an error),
    // and a new child goes on from the next file.
    std::size_t next = 0;
    while (next < candidates.size()) {
        const std::size_t first = next;
        const ChildOutcome outcome = run_in_child(
            [&](const auto& send, std::int64_t& progress) {
                for (std::size_t index = first; index < candidates.size(); ++index) {
                    progress = static_cast<std::int64_t>(index);
                    Message out;
                    out.put(static_cast<std::int64_t>(index));
                    std::string damage;
                    try {
                        const std::optional<DicomFile> file = scan_file(candidates[index]);
                        out.put(std::int64_t{file.has_value() ? 1 : 0});
                        if (file) put_file(out, *file);
                        send('F', out.bytes());
                        continue;
                    } catch (const Error& error) {
                        damage = error.what();
                    } catch (const std::bad_alloc&) {
                        damage = quoted(candidates[index]) + " cannot be read: GDCM asked for more memory than the file could need, so a "
                                                             "length in it is damaged";
                    }
                    TESSERA_CHECK(folder, damage << (damage.ends_with(".") ? "" : ". Replace it with an intact copy."));
                    out.put(std::int64_t{2});
                    out.put(damage);
                    send('F', out.bytes());
                }
            },
            child_seconds(std::vector<fs::path>(candidates.begin() + static_cast<std::ptrdiff_t>(first), candidates.end())),
            memory_allowance(candidates, 0), "GDCM");
        rethrow_child_error(outcome, candidates);
        for (const auto& [kind, bytes] : outcome.frames) {
            if (kind != 'F') continue;
            MessageReader in(bytes);
            const auto index = static_cast<std::size_t>(in.integer());
            const std::int64_t found = in.integer();
            next = index + 1;
            if (found == 0) {
                ++scanned.not_dicom;
            } else if (found == 2) {
                scanned.damaged.push_back(in.text());
            } else {
                DicomFile file = take_file(in, candidates[index]);
                if (!file.is_image) {
                    ++scanned.without_pixels;
                } else {
                    scanned.series[file.series_uid].push_back(std::move(file));
                }
            }
        }
        if (!outcome.finished) {
            const auto stopped_at = static_cast<std::size_t>(std::max<std::int64_t>(outcome.progress, static_cast<std::int64_t>(next)));
            TESSERA_CHECK(stopped_at < candidates.size(), "the DICOM reader stopped after the last file of " << quoted(path) << ": "
                                                                                                          << outcome.how_it_ended);
            const std::string problem = quoted(candidates[stopped_at]) + " cannot be read: " + outcome.how_it_ended + "; the file is damaged";
            TESSERA_CHECK(folder, problem << ". Replace it with an intact copy.");
            scanned.damaged.push_back(problem);
            next = stopped_at + 1;
        }
    }
    if (!folder) {
        TESSERA_CHECK(scanned.not_dicom == 0, quoted(path) << " is not a DICOM file (GDCM finds no DICOM data set in it).");
        TESSERA_CHECK(scanned.without_pixels == 0, quoted(path) << " is a DICOM file without pixel data (a report, structure set or "
                                                                   "directory), not an image.");
    }
    TESSERA_CHECK(!scanned.series.empty(), "the folder " << quoted(path) << " holds no DICOM images: of its " << candidates.size()
                                                         << " files, " << scanned.not_dicom << " are not DICOM, "
                                                         << scanned.without_pixels << " have no pixel data and " << scanned.damaged.size()
                                                         << " are damaged" << (scanned.damaged.empty() ? "" : " (" + scanned.damaged.front() + ")")
                                                         << ". Choose the folder of the image series.");
    return scanned;
}

DicomSeriesInfo describe_series(const std::vector<DicomFile>& files) {
    const DicomFile& first = files.front();
    DicomSeriesInfo info;
    info.series_uid = first.series_uid;
    info.series_number = first.series_number;
    info.patient_name = first.patient_name;
    info.patient_id = first.patient_id;
    info.study_description = first.study_description;
    info.study_date = first.study_date;
    info.description = first.series_description;
    info.modality = first.modality;
    info.transfer_syntax = transfer_syntax_name(first.transfer_syntax);
    info.num_files = static_cast<std::int64_t>(files.size());
    for (const DicomFile& file : files) {
        info.num_slices += std::max<std::int64_t>(file.frames, 1);
        info.files.push_back(file.path);
    }
    std::sort(info.files.begin(), info.files.end());
    info.size = {first.columns, first.rows};
    return info;
}

std::vector<DicomSeriesInfo> sorted_infos(const ScannedFolder& scanned, const fs::path& path) {
    std::vector<DicomSeriesInfo> infos;
    for (const auto& [uid, files] : scanned.series) {
        DicomSeriesInfo info = describe_series(files);
        try {
            const SeriesLayout layout = lay_out(files, path);
            info.spacing = layout.geometry.spacing;
            info.warnings = layout.warnings;
        } catch (const Error& error) {
            info.warnings.push_back(std::string("cannot be read as one volume: ") + error.what());
        }
        for (const std::string& damaged : scanned.damaged) info.warnings.push_back("skipped in the folder: " + damaged);
        infos.push_back(std::move(info));
    }
    std::sort(infos.begin(), infos.end(), [](const DicomSeriesInfo& a, const DicomSeriesInfo& b) {
        return a.series_number != b.series_number ? a.series_number < b.series_number : a.series_uid < b.series_uid;
    });
    return infos;
}

// Frame f of the decoded `buffer` (stored values of type Stored), rescaled, into targets[f]. Throws, naming
// the file, when the decoder gave fewer bytes than the frames need.
template <class Stored>
void convert_frames(const std::vector<char>& buffer, std::int64_t frame_pixels, std::int64_t frames, double slope, double intercept,
                    const std::vector<float*>& targets, const std::string& name) {
    TESSERA_CHECK(buffer.size() >= static_cast<std::size_t>(frame_pixels * frames) * sizeof(Stored),
                  name << " decoded to " << buffer.size() << " bytes, fewer than its " << frame_pixels * frames << " pixels need.");
    for (std::int64_t frame = 0; frame < frames; ++frame) {
        float* out = targets[static_cast<std::size_t>(frame)];
        const char* in = buffer.data() + frame * frame_pixels * static_cast<std::int64_t>(sizeof(Stored));
        for (std::int64_t pixel = 0; pixel < frame_pixels; ++pixel) {
            Stored value;
            std::memcpy(&value, in + pixel * static_cast<std::int64_t>(sizeof(Stored)), sizeof(Stored));
            out[pixel] = static_cast<float>(slope * static_cast<double>(value) + intercept);
        }
    }
}

// Decodes `file` with GDCM and writes frame f, rescaled, to targets[f].
std::string decode_file(const DicomFile& file, const std::vector<float*>& targets) {
    const std::string name = quoted(file.path);
    // What the header promises, for the messages when the pixels cannot be had.
    std::ostringstream promised_text;
    promised_text << file.columns << "×" << file.rows << (file.frames > 1 ? "×" + std::to_string(file.frames) : std::string())
                  << " pixels of " << file.bits_allocated << " bits";
    const std::string promised = promised_text.str();
    // The whole data set is parsed by GDCM, the pixels decoded by its codecs through an image described
    // from our own reading of the header: GDCM's ImageReader derives geometry itself and asserts
    // (aborts) on headers it does not expect, where ours refuses them by name.
    gdcm::Reader reader;
    reader.SetFileName(file.path.c_str());
    GdcmOutputCapture capture;
    const bool read = reader.Read();
    const gdcm::DataSet& data = reader.GetFile().GetDataSet();
    const gdcm::Tag pixel_data_tag(0x7fe0, 0x0010);
    const bool has_pixels = read && data.FindDataElement(pixel_data_tag) && !data.GetDataElement(pixel_data_tag).IsEmpty();
    gdcm::Image image;
    image.SetNumberOfDimensions(file.frames > 1 ? 3 : 2);
    image.SetDimension(0, static_cast<unsigned int>(file.columns));
    image.SetDimension(1, static_cast<unsigned int>(file.rows));
    if (file.frames > 1) image.SetDimension(2, static_cast<unsigned int>(file.frames));
    image.SetPixelFormat(gdcm::PixelFormat(static_cast<unsigned short>(file.samples_per_pixel), static_cast<unsigned short>(file.bits_allocated),
                                           static_cast<unsigned short>(file.bits_stored), static_cast<unsigned short>(file.high_bit),
                                           static_cast<unsigned short>(file.pixel_representation)));
    const gdcm::PhotometricInterpretation::PIType photometric =
        gdcm::PhotometricInterpretation::GetPIType(file.photometric.empty() ? "MONOCHROME2" : file.photometric.c_str());
    image.SetPhotometricInterpretation(photometric == gdcm::PhotometricInterpretation::UNKNOWN
                                           ? gdcm::PhotometricInterpretation(gdcm::PhotometricInterpretation::MONOCHROME2)
                                           : gdcm::PhotometricInterpretation(photometric));
    image.SetTransferSyntax(reader.GetFile().GetHeader().GetDataSetTransferSyntax());
    if (has_pixels) image.SetDataElement(data.GetDataElement(pixel_data_tag));
    const unsigned long length = has_pixels ? image.GetBufferLength() : 0;
    std::vector<char> buffer(length);
    const bool decoded = has_pixels && length > 0 && image.GetBuffer(buffer.data());
    const std::string said = capture.text();
    const std::string gdcm_said = said.empty() ? std::string() : " GDCM said: " + said.substr(0, 300);
    TESSERA_CHECK(read, name << " could not be parsed by GDCM: the file is damaged. Replace it with an intact copy." << gdcm_said);
    TESSERA_CHECK(has_pixels, name << " has no pixel data element although its header describes " << promised << ": the file is damaged.");
    TESSERA_CHECK(decoded, name << " is truncated or damaged: its header promises " << promised
                                << ", which GDCM could not decode (transfer syntax " << transfer_syntax_name(file.transfer_syntax)
                                << "). Replace the file with an intact copy." << gdcm_said);
    // GDCM pads a short uncompressed pixel data element with zeros and says so: that is not an image.
    TESSERA_CHECK(said.find("Incomplete Pixel Data") == std::string::npos,
                  name << " is truncated: its header promises " << promised << " but the file ends inside its pixel data. "
                       << "Replace the file with an intact copy.");
    const std::int64_t frames = file.frames;
    // Uncompressed pixels must all be there (GDCM would hand back zeros for the rest).
    if (const gdcm::ByteValue* stored = data.GetDataElement(pixel_data_tag).GetByteValue()) {
        const std::uint64_t needed = static_cast<std::uint64_t>(file.columns) * static_cast<std::uint64_t>(file.rows) *
                                     static_cast<std::uint64_t>(frames) * static_cast<std::uint64_t>(file.bits_allocated) / 8;
        TESSERA_CHECK(stored->GetLength() >= needed, name << " is damaged: its header promises " << promised << " (" << needed
                                                          << " bytes) but its pixel data holds " << stored->GetLength() << " bytes.");
    }
    const gdcm::PixelFormat& format = image.GetPixelFormat();
    TESSERA_CHECK(format.GetSamplesPerPixel() == 1, name << " holds colour pixels (" << format.GetSamplesPerPixel()
                                                         << " samples per pixel): Tessera reads grayscale DICOM.");
    const std::int64_t frame_pixels = static_cast<std::int64_t>(file.columns) * file.rows;
    const double slope = file.rescale_slope, intercept = file.rescale_intercept;
    switch (format.GetScalarType()) {
        case gdcm::PixelFormat::UINT8:
            convert_frames<std::uint8_t>(buffer, frame_pixels, frames, slope, intercept, targets, name);
            return "uint8";
        case gdcm::PixelFormat::INT8:
            convert_frames<std::int8_t>(buffer, frame_pixels, frames, slope, intercept, targets, name);
            return "int8";
        case gdcm::PixelFormat::UINT12:
        case gdcm::PixelFormat::UINT16:
            convert_frames<std::uint16_t>(buffer, frame_pixels, frames, slope, intercept, targets, name);
            return "uint16";
        case gdcm::PixelFormat::INT12:
        case gdcm::PixelFormat::INT16:
            convert_frames<std::int16_t>(buffer, frame_pixels, frames, slope, intercept, targets, name);
            return "int16";
        case gdcm::PixelFormat::UINT32:
            convert_frames<std::uint32_t>(buffer, frame_pixels, frames, slope, intercept, targets, name);
            return "uint32";
        case gdcm::PixelFormat::INT32:
            convert_frames<std::int32_t>(buffer, frame_pixels, frames, slope, intercept, targets, name);
            return "int32";
        default:
            TESSERA_REJECT(name << " stores pixels as " << format.GetScalarTypeAsString()
                                << ": Tessera reads 8-, 16- and 32-bit integer DICOM.");
    }
}

io_detail::RawImage read_series(const fs::path& path, const std::string& wanted) {
    const ScannedFolder scanned = scan(path);
    const std::vector<DicomFile>* chosen = nullptr;
    if (wanted.empty()) {
        if (scanned.series.size() > 1) {
            std::ostringstream list;
            for (const DicomSeriesInfo& info : sorted_infos(scanned, path)) list << "\n  " << series_label(info);
            TESSERA_REJECT("the folder " << quoted(path) << " holds " << scanned.series.size()
                                         << " DICOM series: choose one in the studio's series browser (File ▸ Open DICOM "
                                            "Folder…), or list them with `tessera-cli info "
                                         << path.string() << "` and read one with --series <number>:" << list.str());
        }
        chosen = &scanned.series.begin()->second;
    } else {
        for (const auto& [uid, files] : scanned.series) {
            if (uid == wanted || std::to_string(files.front().series_number) == wanted) {
                TESSERA_CHECK(chosen == nullptr, "series \"" << wanted << "\" names more than one series in " << quoted(path)
                                                             << ": give its UID instead of its number");
                chosen = &files;
            }
        }
        if (!chosen) {
            std::ostringstream list;
            for (const DicomSeriesInfo& info : sorted_infos(scanned, path)) list << "\n  " << series_label(info);
            TESSERA_REJECT(quoted(path) << " holds no DICOM series numbered or with UID \"" << wanted << "\"; it holds:" << list.str());
        }
    }
    SeriesLayout layout = lay_out(*chosen, path);
    io_detail::RawImage raw;
    raw.geometry = layout.geometry;
    raw.warnings = layout.warnings;
    const DicomFile& first = layout.files.front();
    const std::uint64_t slice_voxels = static_cast<std::uint64_t>(first.columns) * static_cast<std::uint64_t>(first.rows);
    const std::uint64_t num_slices = layout.slices.size();
    io_detail::check_volume_budget(path, std::to_string(first.columns) + "×" + std::to_string(first.rows) + "×" + std::to_string(num_slices),
                                   slice_voxels * num_slices, static_cast<std::uint64_t>(std::max(first.bits_allocated / 8, 1)));
    // Decoded in a child straight into memory shared with this process (see run_in_child).
    auto voxels = std::make_shared<SharedMemory>(slice_voxels * num_slices * sizeof(float));
    float* stack = static_cast<float*>(voxels->data());
    // Where each file's frames go in the stack.
    std::vector<std::vector<float*>> targets(layout.files.size());
    for (std::size_t file = 0; file < layout.files.size(); ++file) targets[file].resize(static_cast<std::size_t>(layout.files[file].frames));
    for (std::size_t index = 0; index < layout.slices.size(); ++index) {
        const Slice& slice = layout.slices[index];
        targets[slice.file][static_cast<std::size_t>(slice.frame)] = stack + index * slice_voxels;
    }
    std::vector<fs::path> paths;
    for (const DicomFile& file : layout.files) paths.push_back(file.path);
    const ChildOutcome outcome = run_in_child(
        [&](const auto& send, std::int64_t& progress) {
            std::string stored_type;
            for (std::size_t file = 0; file < layout.files.size(); ++file) {
                progress = static_cast<std::int64_t>(file);
                const std::string stored = decode_file(layout.files[file], targets[file]);
                if (stored_type.empty()) stored_type = stored;
            }
            send('T', stored_type);
        },
        child_seconds(paths), memory_allowance(paths, slice_voxels * num_slices * 4), "GDCM");
    rethrow_child_error(outcome, paths);
    if (!outcome.finished) {
        const auto stopped_at = static_cast<std::size_t>(std::clamp<std::int64_t>(outcome.progress, 0, static_cast<std::int64_t>(paths.size()) - 1));
        TESSERA_REJECT(quoted(paths[stopped_at]) << " cannot be decoded: " << outcome.how_it_ended
                                                 << "; the file is damaged. Replace it with an intact copy.");
    }
    for (const auto& [kind, bytes] : outcome.frames) {
        if (kind == 'T') raw.source_scalar_type = bytes;
    }
    if (!scanned.damaged.empty()) {
        raw.warnings.push_back(std::to_string(scanned.damaged.size()) + " damaged file" + (scanned.damaged.size() == 1 ? " was" : "s were") +
                               " skipped: " + scanned.damaged.front());
    }
    raw.scalar_type = io_detail::ScalarType::F32;
    raw.voxels = stack;
    raw.owner = voxels;
    return raw;
}

}  // namespace

namespace io_detail {

bool has_dicom_preamble(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    char bytes[132] = {};
    if (!in.read(bytes, sizeof bytes)) return false;
    return std::memcmp(bytes + 128, "DICM", 4) == 0;
}

RawImage read_dicom(const fs::path& path) { return read_series(path, ""); }

}  // namespace io_detail

std::vector<DicomSeriesInfo> list_dicom_series(const fs::path& path) {
    TESSERA_CHECK(fs::exists(path), quoted(path) << " does not exist: name a folder of DICOM files, or one DICOM file");
    return sorted_infos(scan(path), path);
}

Volume read_dicom_series(const fs::path& path, const std::string& series) {
    TESSERA_CHECK(fs::exists(path), quoted(path) << " does not exist: name a folder of DICOM files, or one DICOM file");
    return io_detail::volume_from_raw(read_series(path, series), path);
}

}  // namespace tessera
