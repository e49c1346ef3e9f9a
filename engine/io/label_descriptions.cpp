#include "io/label_descriptions.hpp"

#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "io/raw_image.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <span>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>

namespace tessera {

namespace {

constexpr std::uintmax_t kMaxDescriptionBytes = 16u << 20;  // FreeSurferColorLUT.txt is ~1 MB
constexpr std::uintmax_t kLutBytes = 768;                     // MRIcron / ImageJ: R[256] G[256] B[256]

// A whole number in [lowest, highest], or nothing.
std::optional<long long> whole_number(const std::string& text, long long lowest, long long highest) {
    if (text.empty()) return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const long long value = std::strtoll(text.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || value < lowest || value > highest) return std::nullopt;
    return value;
}

std::optional<std::array<float, 3>> rgb_255(const std::string& r, const std::string& g, const std::string& b) {
    std::array<float, 3> rgb{};
    const std::array<const std::string*, 3> parts{&r, &g, &b};
    for (std::size_t c = 0; c < 3; ++c) {
        const auto value = whole_number(*parts[c], 0, 255);
        if (!value) return std::nullopt;
        rgb[c] = static_cast<float>(*value) / 255.0f;
    }
    return rgb;
}

// The MRIcron / ImageJ binary colour table: entry v is (R[v], G[v], B[v]); entry 0 is the background.
std::vector<LabelDescription> read_lut(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    TESSERA_CHECK(in.is_open(), "cannot open " << io_detail::quoted(path));
    std::array<unsigned char, kLutBytes> bytes{};
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    TESSERA_CHECK(in.gcount() == static_cast<std::streamsize>(kLutBytes), "cannot read " << io_detail::quoted(path));
    std::vector<LabelDescription> descriptions;
    for (int value = 1; value < 256; ++value) {
        LabelDescription d;
        d.value = value;
        d.color = std::array<float, 3>{bytes[static_cast<std::size_t>(value)] / 255.0f, bytes[static_cast<std::size_t>(256 + value)] / 255.0f,
                                       bytes[static_cast<std::size_t>(512 + value)] / 255.0f};
        descriptions.push_back(d);
    }
    return descriptions;
}

// Splits on white space, keeping a "double-quoted" field (ITK-SNAP's label names) whole.
std::vector<std::string> fields_of(const std::string& line, bool& unterminated_quote) {
    std::vector<std::string> fields;
    unterminated_quote = false;
    std::size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
        if (i >= line.size()) break;
        if (line[i] == '"') {
            const std::size_t close = line.find('"', i + 1);
            if (close == std::string::npos) {
                unterminated_quote = true;
                return fields;
            }
            fields.push_back(line.substr(i + 1, close - i - 1));
            i = close + 1;
        } else {
            std::size_t end = i;
            while (end < line.size() && !std::isspace(static_cast<unsigned char>(line[end]))) ++end;
            fields.push_back(line.substr(i, end - i));
            i = end;
        }
    }
    return fields;
}

// One text line of any of the text formats, told apart by its fields:
//   ITK-SNAP     IDX R G B A VIS MSH "LABEL"   (8 fields, the name quoted)
//   colour table index name R G B [A]          (Slicer, FreeSurfer: 5 or 6 fields, numbers after the name)
//   MRIcron      index name [anything]         (names only)
LabelDescription parse_line(const std::filesystem::path& path, int line_number, const std::string& line) {
    bool unterminated = false;
    const std::vector<std::string> f = fields_of(line, unterminated);
    auto fail = [&](const std::string& why) {
        TESSERA_REJECT(io_detail::quoted(path) << " line " << line_number << " ('" << line.substr(0, 80) << "'): " << why
                                         << ". Expected a label description: ITK-SNAP's 'IDX R G B A VIS MSH \"LABEL\"', "
                                            "a colour table's 'index name R G B A' (3D Slicer, FreeSurfer) or MRIcron's "
                                            "'index name'");
    };
    if (unterminated) fail("a quoted name is not closed");
    if (f.size() < 2) fail("a label needs at least a value and a name");
    const auto value = whole_number(f[0], 0, std::numeric_limits<std::int32_t>::max());
    if (!value) fail("'" + f[0] + "' is not a label value (a whole number from 0)");
    LabelDescription d;
    d.value = static_cast<std::int32_t>(*value);
    const bool itksnap = f.size() == 8 && line.find('"') != std::string::npos;
    if (itksnap) {
        d.color = rgb_255(f[1], f[2], f[3]);
        if (!d.color) fail("R, G and B must be whole numbers from 0 to 255");
        d.name = f[7];
        return d;
    }
    d.name = f[1];
    const bool colour_table = (f.size() == 5 || f.size() == 6) &&
                              std::all_of(f.begin() + 2, f.end(), [](const std::string& x) { return whole_number(x, -1000000, 1000000).has_value(); });
    if (colour_table) {
        d.color = rgb_255(f[2], f[3], f[4]);
        if (!d.color) fail("R, G and B must be whole numbers from 0 to 255");
    }
    return d;
}

std::vector<LabelDescription> sorted_unique(std::vector<LabelDescription> descriptions, const std::filesystem::path& path) {
    std::stable_sort(descriptions.begin(), descriptions.end(), [](const LabelDescription& a, const LabelDescription& b) { return a.value < b.value; });
    for (std::size_t i = 1; i < descriptions.size(); ++i) {
        TESSERA_CHECK(descriptions[i].value != descriptions[i - 1].value,
                      io_detail::quoted(path) << " describes label " << descriptions[i].value << " twice ('" << descriptions[i - 1].name
                                        << "' and '" << descriptions[i].name << "'): keep one line per label");
    }
    return descriptions;
}

}  // namespace

std::vector<LabelDescription> read_label_descriptions(const std::filesystem::path& path) {
    std::error_code error;
    const std::uintmax_t size = std::filesystem::file_size(path, error);
    TESSERA_CHECK(!error, "cannot read label descriptions " << io_detail::quoted(path) << ": " << error.message());
    TESSERA_CHECK(size <= kMaxDescriptionBytes, io_detail::quoted(path) << " is " << size << " bytes, too large for a label description file "
                                                                  << "(at most " << kMaxDescriptionBytes << ")");
    std::string extension = path.extension().string();
    std::transform(extension.begin(), extension.end(), extension.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (extension == ".lut") {
        TESSERA_CHECK(size == kLutBytes, io_detail::quoted(path) << " is " << size << " bytes: an MRIcron colour table (.lut) holds "
                                                           << kLutBytes << " (256 red, 256 green, 256 blue)");
        return read_lut(path);
    }
    std::ifstream in(path, std::ios::binary);
    TESSERA_CHECK(in.is_open(), "cannot open " << io_detail::quoted(path));
    std::vector<LabelDescription> descriptions;
    std::string line;
    int line_number = 0;
    while (std::getline(in, line)) {
        ++line_number;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line_number == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a UTF-8 byte-order mark
        const std::size_t first = line.find_first_not_of(" \t");
        if (first == std::string::npos || line[first] == '#') continue;
        TESSERA_CHECK(std::none_of(line.begin(), line.end(), [](unsigned char c) { return c < 32 && c != '\t'; }),
                      io_detail::quoted(path) << " line " << line_number << " holds control characters: is it a text file?");
        LabelDescription d = parse_line(path, line_number, line);
        if (d.value != 0) descriptions.push_back(std::move(d));  // the background is not a label
    }
    return sorted_unique(std::move(descriptions), path);
}

std::vector<std::filesystem::path> label_description_sidecars(const std::filesystem::path& label_map) {
    std::filesystem::path name = label_map;
    if (name.extension() == ".gz") name.replace_extension();  // aal.nii.gz → aal.nii
    std::filesystem::path stem = name;
    stem.replace_extension();                                  // aal.nii → aal
    std::vector<std::filesystem::path> candidates;
    for (const std::filesystem::path& base : {name, stem}) {
        for (const char* extension : {".txt", ".lut", ".ctbl"}) candidates.push_back(std::filesystem::path(base.string() + extension));
    }
    std::vector<std::filesystem::path> found;
    for (const std::filesystem::path& candidate : candidates) {
        std::error_code error;
        if (candidate != label_map && std::filesystem::is_regular_file(candidate, error) &&
            std::find(found.begin(), found.end(), candidate) == found.end()) {
            found.push_back(candidate);
        }
    }
    return found;
}

void merge_label_descriptions(std::vector<LabelDescription>& into, const std::vector<LabelDescription>& more) {
    for (const LabelDescription& d : more) {
        const auto at = std::find_if(into.begin(), into.end(), [&](const LabelDescription& x) { return x.value == d.value; });
        if (at == into.end()) {
            into.push_back(d);
            continue;
        }
        if (at->name.empty()) at->name = d.name;
        if (!at->color) at->color = d.color;
    }
    std::stable_sort(into.begin(), into.end(), [](const LabelDescription& a, const LabelDescription& b) { return a.value < b.value; });
}

std::vector<LabelDescription> find_label_descriptions(const std::filesystem::path& label_map, std::vector<std::string>& warnings) {
    std::vector<LabelDescription> names, colours_only;
    for (const std::filesystem::path& sidecar : label_description_sidecars(label_map)) {
        try {
            std::vector<LabelDescription> read = read_label_descriptions(sidecar);
            const bool names_given = std::any_of(read.begin(), read.end(), [](const LabelDescription& d) { return !d.name.empty(); });
            // A .lut's 255 colours go to the labels a name file names (all of them when none does).
            merge_label_descriptions(names_given ? names : colours_only, read);
        } catch (const Error& error) {
            warnings.push_back(std::string("label names not read from ") + sidecar.filename().string() + ": " + error.what());
        }
    }
    if (names.empty()) return colours_only;  // colours without names (MRIcron's brodmann.nii.lut alone)
    for (LabelDescription& d : names) {
        if (d.color) continue;
        const auto colour = std::find_if(colours_only.begin(), colours_only.end(), [&](const LabelDescription& x) { return x.value == d.value; });
        if (colour != colours_only.end()) d.color = colour->color;
    }
    return names;
}

void write_itksnap_label_descriptions(const std::vector<LabelDescription>& descriptions, const std::filesystem::path& path) {
    std::ostringstream text;
    text << "################################################\n"
            "# ITK-SnAP Label Description File\n"
            "# File format:\n"
            "# IDX   -R-  -G-  -B-  -A--  VIS MSH  LABEL\n"
            "# Fields:\n"
            "#    IDX:   Zero-based index\n"
            "#    -R-:   Red color component (0..255)\n"
            "#    -G-:   Green color component (0..255)\n"
            "#    -B-:   Blue color component (0..255)\n"
            "#    -A-:   Label transparency (0.00 .. 1.00)\n"
            "#    VIS:   Label visibility (0 or 1)\n"
            "#    MSH:   Label mesh visibility (0 or 1)\n"
            "#  LABEL:   Label description\n"
            "# Written by Tessera\n"
            "################################################\n";
    auto line = [&](std::int32_t value, const std::array<int, 3>& rgb, double alpha, int visible, const std::string& name) {
        char buffer[96];
        std::snprintf(buffer, sizeof buffer, "%5d %5d %4d %4d %8.2f %2d %2d    ", value, rgb[0], rgb[1], rgb[2], alpha, visible, visible);
        std::string quoted_name = name;
        std::replace(quoted_name.begin(), quoted_name.end(), '"', '\'');  // ITK-SNAP's names cannot hold a double quote
        text << buffer << '"' << quoted_name << "\"\n";
    };
    line(0, {0, 0, 0}, 0.0, 0, "Clear Label");
    for (const LabelDescription& d : descriptions) {
        if (d.value == 0) continue;
        std::array<int, 3> rgb{128, 128, 128};
        if (d.color) {
            for (std::size_t c = 0; c < 3; ++c) rgb[c] = static_cast<int>(std::lround(std::clamp((*d.color)[c], 0.0f, 1.0f) * 255.0f));
        }
        line(d.value, rgb, 1.0, 1, d.name.empty() ? "Label " + std::to_string(d.value) : d.name);
    }
    const std::string bytes = text.str();
    io::write_file_atomically(path, std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
}

std::array<float, 3> default_label_color(std::int32_t label) {
    static constexpr std::array<std::array<int, 3>, 12> palette = {{{255, 0, 0},   {0, 255, 0},     {0, 0, 255},   {255, 255, 0},
                                                                   {0, 255, 255}, {255, 0, 255},   {255, 128, 0}, {128, 0, 255},
                                                                   {205, 133, 63}, {0, 160, 110}, {102, 205, 170}, {255, 80, 160}}};
    if (label <= 0) return {0.0f, 0.0f, 0.0f};
    if (label <= static_cast<std::int32_t>(palette.size())) {
        const auto& rgb = palette[static_cast<std::size_t>(label - 1)];
        return {rgb[0] / 255.0f, rgb[1] / 255.0f, rgb[2] / 255.0f};
    }
    // HSV with hue label × 137° (the golden angle, so neighbours differ), saturation 230/255, value 1.
    const double hue = static_cast<double>((static_cast<std::int64_t>(label) * 137) % 360) / 60.0;
    const double saturation = 230.0 / 255.0;
    const double chroma = saturation, x = chroma * (1 - std::fabs(std::fmod(hue, 2.0) - 1)), low = 1 - chroma;
    std::array<double, 3> rgb{};
    switch (static_cast<int>(hue)) {
        case 0: rgb = {chroma, x, 0}; break;
        case 1: rgb = {x, chroma, 0}; break;
        case 2: rgb = {0, chroma, x}; break;
        case 3: rgb = {0, x, chroma}; break;
        case 4: rgb = {x, 0, chroma}; break;
        default: rgb = {chroma, 0, x}; break;
    }
    // Quantised to 8 bits, as a display shows it.
    return {static_cast<float>(std::lround((rgb[0] + low) * 255) / 255.0), static_cast<float>(std::lround((rgb[1] + low) * 255) / 255.0),
            static_cast<float>(std::lround((rgb[2] + low) * 255) / 255.0)};
}

}  // namespace tessera
