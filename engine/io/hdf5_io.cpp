// HDF5 volumes through the HDF5 C library: whole reads (read_volume), hyperslab reads (the region
// reader) and chunked, compressed writes. The library's own error printing is switched off; its error
// stack is folded into the message of the tessera::Error thrown instead. Every call into the library
// holds one process-wide mutex, so readers may be shared between threads.
#include "io/hdf5_volume.hpp"
#include "io/child_process.hpp"
#include "io/hdf5_detail.hpp"
#include "io/raw_image.hpp"
#include "io/volume_region.hpp"

#include "core/units.hpp"
#include "core/user_files.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

namespace tessera {

using io_detail::quoted;
using io_detail::ScalarType;

namespace {

std::recursive_mutex& library_mutex() {
    static std::recursive_mutex mutex;
    return mutex;
}

// Switches the library's error printing off, once: failures come back as negative ids and are
// reported with error_stack_text().
void quiet_library() {
    static const bool quiet = [] {
        H5open();
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
        return true;
    }();
    (void)quiet;
}

herr_t collect_error(unsigned depth, const H5E_error2_t* error, void* data) {
    auto& lines = *static_cast<std::vector<std::string>*>(data);
    if (depth < 4 && error->desc != nullptr && error->desc[0] != '\0') lines.emplace_back(error->desc);
    return 0;
}

// The library's explanation of its last failure ("can't open file; unable to open file: name = ..."),
// or "" when it left none; clears the stack.
std::string error_stack_text() {
    std::vector<std::string> lines;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &lines);
    H5Eclear2(H5E_DEFAULT);
    std::string text;
    for (const std::string& line : lines) {
        if (text.find(line) == std::string::npos) text += (text.empty() ? "" : "; ") + line;
    }
    return text.empty() ? "" : " (HDF5: " + text + ")";
}

// An HDF5 identifier closed by the function that matches its kind.
class Handle {
public:
    Handle() = default;
    Handle(hid_t id, herr_t (*close)(hid_t)) : m_id(id), m_close(close) {}
    Handle(Handle&& other) noexcept : m_id(std::exchange(other.m_id, H5I_INVALID_HID)), m_close(other.m_close) {}
    Handle& operator=(Handle&& other) noexcept {
        reset();
        m_id = std::exchange(other.m_id, H5I_INVALID_HID);
        m_close = other.m_close;
        return *this;
    }
    ~Handle() { reset(); }
    hid_t get() const { return m_id; }
    bool valid() const { return m_id >= 0; }

private:
    void reset() {
        if (m_id >= 0 && m_close != nullptr) m_close(m_id);
        m_id = H5I_INVALID_HID;
    }
    hid_t m_id = H5I_INVALID_HID;
    herr_t (*m_close)(hid_t) = nullptr;
};

std::string lower(std::string text) {
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return text;
}

constexpr std::string_view hdf5_extensions[] = {".h5", ".hdf5", ".hdf", ".he5"};

std::string name_text(const Hdf5DatasetName& name) {
    return quoted(std::filesystem::path(name.file.string() + (name.dataset.empty() ? "" : ":" + name.dataset)));
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
    std::string text;
    for (std::int64_t extent : shape) text += (text.empty() ? "" : "×") + std::to_string(extent);
    return text.empty() ? "a scalar" : text;
}

// The element type Tessera reads a dataset type as; nothing for strings, compounds, enums, ...
std::optional<ScalarType> scalar_type_of(hid_t type) {
    const H5T_class_t type_class = H5Tget_class(type);
    const std::size_t size = H5Tget_size(type);
    if (type_class == H5T_INTEGER) {
        const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
        switch (size) {
            case 1: return is_signed ? ScalarType::I8 : ScalarType::U8;
            case 2: return is_signed ? ScalarType::I16 : ScalarType::U16;
            case 4: return is_signed ? ScalarType::I32 : ScalarType::U32;
            case 8: return is_signed ? ScalarType::I64 : ScalarType::U64;
            default: return std::nullopt;
        }
    }
    if (type_class == H5T_FLOAT) {
        if (size == 4) return ScalarType::F32;
        if (size == 8) return ScalarType::F64;
    }
    return std::nullopt;
}

hid_t native_type_of(ScalarType type) {
    switch (type) {
        case ScalarType::U8: return H5T_NATIVE_UINT8;
        case ScalarType::I8: return H5T_NATIVE_INT8;
        case ScalarType::U16: return H5T_NATIVE_UINT16;
        case ScalarType::I16: return H5T_NATIVE_INT16;
        case ScalarType::U32: return H5T_NATIVE_UINT32;
        case ScalarType::I32: return H5T_NATIVE_INT32;
        case ScalarType::U64: return H5T_NATIVE_UINT64;
        case ScalarType::I64: return H5T_NATIVE_INT64;
        case ScalarType::F32: return H5T_NATIVE_FLOAT;
        case ScalarType::F64: return H5T_NATIVE_DOUBLE;
    }
    return H5T_NATIVE_FLOAT;
}

hid_t file_type_of(ScalarType type) {
    switch (type) {
        case ScalarType::U8: return H5T_STD_U8LE;
        case ScalarType::I8: return H5T_STD_I8LE;
        case ScalarType::U16: return H5T_STD_U16LE;
        case ScalarType::I16: return H5T_STD_I16LE;
        case ScalarType::U32: return H5T_STD_U32LE;
        case ScalarType::I32: return H5T_STD_I32LE;
        case ScalarType::U64: return H5T_STD_U64LE;
        case ScalarType::I64: return H5T_STD_I64LE;
        case ScalarType::F32: return H5T_IEEE_F32LE;
        case ScalarType::F64: return H5T_IEEE_F64LE;
    }
    return H5T_IEEE_F32LE;
}

std::string filter_name(H5Z_filter_t filter) {
    switch (filter) {
        case H5Z_FILTER_DEFLATE: return "gzip";
        case H5Z_FILTER_SHUFFLE: return "shuffle";
        case H5Z_FILTER_FLETCHER32: return "fletcher32";
        case H5Z_FILTER_SZIP: return "szip";
        case H5Z_FILTER_NBIT: return "nbit";
        case H5Z_FILTER_SCALEOFFSET: return "scaleoffset";
        case 32000: return "lzf";
        case 32001: return "blosc";
        case 32004: return "lz4";
        case 32008: return "bitshuffle";
        case 32015: return "zstd";
        default: return "filter " + std::to_string(filter);
    }
}

// What a dataset is: its shape, element type, storage and (when it cannot be read) why.
struct DatasetFacts {
    std::vector<std::int64_t> shape;
    std::optional<ScalarType> scalar_type;
    std::string storage = "contiguous";
    std::vector<std::int64_t> chunk;
    std::string problem;  // empty: readable
};

DatasetFacts facts_of(hid_t dataset) {
    DatasetFacts facts;
    const Handle space(H5Dget_space(dataset), H5Sclose);
    const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
    if (rank < 0 || rank > 32) {
        facts.problem = "its dataspace cannot be read";
        return facts;
    }
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
    if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    for (hsize_t extent : dims) facts.shape.push_back(static_cast<std::int64_t>(std::min<hsize_t>(extent, INT64_MAX)));
    const Handle type(H5Dget_type(dataset), H5Tclose);
    facts.scalar_type = type.valid() ? scalar_type_of(type.get()) : std::nullopt;

    const Handle creation(H5Dget_create_plist(dataset), H5Pclose);
    bool filters_missing = false;
    std::string missing;
    if (creation.valid() && H5Pget_layout(creation.get()) == H5D_CHUNKED) {
        std::vector<hsize_t> chunk(static_cast<std::size_t>(std::max(rank, 1)));
        const int chunk_rank = H5Pget_chunk(creation.get(), rank, chunk.data());
        facts.storage = "chunked";
        for (int axis = 0; axis < chunk_rank; ++axis) {
            facts.chunk.push_back(static_cast<std::int64_t>(chunk[static_cast<std::size_t>(axis)]));
            facts.storage += (axis == 0 ? " " : "×") + std::to_string(chunk[static_cast<std::size_t>(axis)]);
        }
        const int num_filters = H5Pget_nfilters(creation.get());
        for (int index = 0; index < num_filters; ++index) {
            unsigned flags = 0;
            std::size_t num_values = 4;
            unsigned values[4] = {};
            unsigned config = 0;
            char ignored_name[64] = {};
            const H5Z_filter_t filter =
                H5Pget_filter2(creation.get(), static_cast<unsigned>(index), &flags, &num_values, values, sizeof ignored_name, ignored_name, &config);
            if (filter < 0) continue;
            std::string text = filter_name(filter);
            if (filter == H5Z_FILTER_DEFLATE && num_values >= 1) text += " level " + std::to_string(values[0]);
            facts.storage += (index == 0 ? ", " : " + ") + text;
            if (H5Zfilter_avail(filter) <= 0) {
                filters_missing = true;
                missing = text;
            }
        }
    } else if (creation.valid() && H5Pget_layout(creation.get()) == H5D_COMPACT) {
        facts.storage = "compact";
    }
    H5Eclear2(H5E_DEFAULT);
    if (!facts.scalar_type) {
        facts.problem = "its elements are not integers or floats Tessera reads (uint8 to int64, float32, float64)";
    } else if (rank != 2 && rank != 3) {
        facts.problem = "it has " + std::to_string(rank) + " axes (" + shape_text(facts.shape) +
                        "); Tessera reads [z, y, x] volumes and [y, x] images with one channel";
    } else if (std::any_of(facts.shape.begin(), facts.shape.end(), [](std::int64_t extent) { return extent <= 0; })) {
        facts.problem = "it is empty (" + shape_text(facts.shape) + ")";
    } else if (filters_missing) {
        facts.problem = "it is compressed with " + missing +
                        ", which this machine's HDF5 library does not have: rewrite it with gzip "
                        "(h5repack -f GZIP=4 in.h5 out.h5)";
    }
    return facts;
}

// Reads a numeric attribute of up to `max_count` values; nothing when it is missing or not numeric.
std::optional<std::vector<double>> numeric_attribute(hid_t object, const char* name, std::size_t max_count) {
    if (H5Aexists(object, name) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return std::nullopt;
    }
    const Handle attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
    if (!attribute.valid()) return std::nullopt;
    const Handle type(H5Aget_type(attribute.get()), H5Tclose);
    const Handle space(H5Aget_space(attribute.get()), H5Sclose);
    if (!type.valid() || !space.valid()) return std::nullopt;
    const H5T_class_t type_class = H5Tget_class(type.get());
    const hssize_t count = H5Sget_simple_extent_npoints(space.get());
    if ((type_class != H5T_INTEGER && type_class != H5T_FLOAT) || count <= 0 || static_cast<std::size_t>(count) > max_count) {
        H5Eclear2(H5E_DEFAULT);
        return std::nullopt;
    }
    std::vector<double> values(static_cast<std::size_t>(count));
    if (H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, values.data()) < 0) {
        H5Eclear2(H5E_DEFAULT);
        return std::nullopt;
    }
    return values;
}

void write_attribute(hid_t object, const char* name, const std::vector<double>& values, const std::string& where) {
    if (H5Aexists(object, name) > 0) H5Adelete(object, name);
    const hsize_t count = values.size();
    const Handle space(H5Screate_simple(1, &count, nullptr), H5Sclose);
    const Handle attribute(H5Acreate2(object, name, H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    TESSERA_CHECK(attribute.valid() && H5Awrite(attribute.get(), H5T_NATIVE_DOUBLE, values.data()) >= 0,
                  "cannot write the attribute " << name << " of " << where << error_stack_text());
}

Handle open_file(const std::filesystem::path& file, bool writable) {
    require_plain_path(file.native(), "the HDF5 file");
    const FileKind kind = file_kind(file);
    TESSERA_CHECK(kind != FileKind::Missing, "cannot read " << quoted(file) << ": no such file. Check the path.");
    TESSERA_CHECK(kind == FileKind::Regular, "cannot read " << quoted(file) << ": it is " << file_kind_name(kind)
                                                            << ", not a regular file. Tessera reads HDF5 volumes from regular files.");
    const htri_t is_hdf5 = H5Fis_hdf5(file.c_str());
    H5Eclear2(H5E_DEFAULT);
    TESSERA_CHECK(is_hdf5 > 0, quoted(file) << " is not an HDF5 file (no HDF5 signature at its start or at 512, 1024, … "
                                               "bytes): check that it was written completely and by HDF5 (not netCDF-3, not Zarr or N5)");
    Handle handle(H5Fopen(file.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    TESSERA_CHECK(handle.valid(), "cannot open " << quoted(file) << " as HDF5" << error_stack_text()
                                                 << (writable ? ": is it open for writing elsewhere?" : ": the file may be damaged"));
    return handle;
}

herr_t collect_dataset_name(hid_t, const char* name, const H5O_info_t* info, void* data) {
    if (info->type == H5O_TYPE_DATASET && std::strcmp(name, ".") != 0) {
        static_cast<std::vector<std::string>*>(data)->push_back(std::string("/") + name);
    }
    return 0;
}

std::vector<std::string> dataset_names(hid_t file, const std::filesystem::path& path) {
    std::vector<std::string> names;
    TESSERA_CHECK(H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_INC, collect_dataset_name, &names, H5O_INFO_BASIC) >= 0,
                  "cannot list the datasets of " << quoted(path) << error_stack_text() << ": the file may be damaged");
    std::sort(names.begin(), names.end());
    return names;
}

std::array<double, 3> spacing_from(const std::vector<double>& zyx, double to_mm) {
    std::array<double, 3> spacing{1, 1, 1};
    // [z, y, x] (or [y, x]): reversed into (x, y, z).
    const std::size_t count = zyx.size();
    for (std::size_t index = 0; index < count && index < 3; ++index) spacing[index] = zyx[count - 1 - index] * to_mm;
    return spacing;
}

std::optional<std::array<double, 3>> spacing_attribute(hid_t dataset, int rank, std::string* which) {
    for (const auto& [name, to_mm] : {std::pair{"resolution", 1e-6}, std::pair{"element_size_um", 1e-3}}) {
        const auto values = numeric_attribute(dataset, name, 3);
        if (!values || (values->size() != 3 && static_cast<int>(values->size()) != rank)) continue;
        const std::array<double, 3> spacing = spacing_from(*values, to_mm);
        if (std::all_of(spacing.begin(), spacing.end(), [](double value) { return std::isfinite(value) && value > 0; })) {
            if (which != nullptr) *which = name;
            return spacing;
        }
    }
    return std::nullopt;
}

// Everything Tessera asks HDF5 about `file` (and about `dataset` alone, when named): the datasets' names,
// each one's type, shape, storage, filters and attributes, and its chunk index walked to the last chunk.
void inspect(const std::filesystem::path& file, const std::string& dataset) {
    quiet_library();
    const Handle handle = open_file(file, false);
    for (const std::string& name : dataset_names(handle.get(), file)) {
        if (!dataset.empty() && name != dataset) continue;
        const Handle opened(H5Dopen2(handle.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
        if (!opened.valid()) {
            H5Eclear2(H5E_DEFAULT);
            continue;
        }
        const DatasetFacts facts = facts_of(opened.get());
        (void)spacing_attribute(opened.get(), static_cast<int>(facts.shape.size()), nullptr);
        (void)numeric_attribute(opened.get(), "offset", 3);
        (void)numeric_attribute(opened.get(), "direction", 9);
        hsize_t num_chunks = 0;
        if (facts.storage != "contiguous" && H5Dget_num_chunks(opened.get(), H5S_ALL, &num_chunks) >= 0) {
            std::vector<hsize_t> offset(std::max<std::size_t>(facts.shape.size(), 1));
            for (hsize_t index = 0; index < num_chunks; ++index) {
                unsigned filter_mask = 0;
                haddr_t address = 0;
                hsize_t size = 0;
                if (H5Dget_chunk_info(opened.get(), H5S_ALL, index, offset.data(), &filter_mask, &address, &size) < 0) break;
            }
        }
        H5Eclear2(H5E_DEFAULT);
    }
}

// HDF5 1.10 can crash on a damaged file (fuzz_hdf5 found a null buffer written in H5F__accum_read, reached
// from a group's local heap): before this process opens a file, a child does everything this process will
// ask about it (inspect). A child that dies or runs out of its memory allowance means a damaged file; one
// that finishes (an error included) means the same calls are safe here, where they give the same answers.
// Files already checked, unchanged since (size and modification time), are not checked again.
void check_in_child(const std::filesystem::path& file, const std::string& dataset) {
    std::error_code error;
    const auto size = std::filesystem::file_size(file, error);
    const auto modified = std::filesystem::last_write_time(file, error);
    if (error) return;  // open_file names what is wrong with the path
    using Key = std::tuple<std::string, std::string, std::uintmax_t, std::filesystem::file_time_type::rep>;
    static std::set<Key> checked;
    const Key key{std::filesystem::absolute(file).lexically_normal().string(), dataset, size, modified.time_since_epoch().count()};
    if (checked.count(key) > 0) return;
    // What HDF5 needs for a file's metadata is small: a damaged size asking for more is refused there.
    constexpr std::uint64_t allowance = std::uint64_t{1} << 30;
    const io_detail::ChildOutcome outcome = io_detail::run_in_child(
        [&](const auto&, std::int64_t&) { inspect(file, dataset); }, 120, allowance, "HDF5");
    const bool out_of_memory = std::any_of(outcome.frames.begin(), outcome.frames.end(), [](const auto& frame) { return frame.first == 'M'; });
    TESSERA_CHECK(outcome.finished && !out_of_memory,
                  quoted(file) << " cannot be read: "
                               << (out_of_memory ? "HDF5 asked for more memory than its metadata could need, so a size in it is damaged"
                                                 : outcome.how_it_ended)
                               << ". The file is damaged: replace it with an intact copy (h5dump -H shows how far its structure reads).");
    checked.insert(key);
}

}  // namespace

// ---- names --------------------------------------------------------------------------------------------

std::optional<Hdf5DatasetName> parse_hdf5_name(std::string_view text) {
    const std::string lowered = lower(std::string(text));
    for (std::string_view extension : hdf5_extensions) {
        if (lowered.ends_with(extension)) return Hdf5DatasetName{std::filesystem::path(std::string(text)), ""};
        const std::string marker = std::string(extension) + ":";
        const std::size_t at = lowered.rfind(marker);
        if (at != std::string::npos) {
            std::string dataset(text.substr(at + marker.size()));
            if (!dataset.empty() && dataset.front() != '/') dataset.insert(dataset.begin(), '/');
            return Hdf5DatasetName{std::filesystem::path(std::string(text.substr(0, at + extension.size()))), dataset};
        }
    }
    return std::nullopt;
}

bool is_hdf5_name(const std::filesystem::path& path) { return parse_hdf5_name(path.string()).has_value(); }

std::vector<Hdf5DatasetInfo> list_hdf5_datasets(const std::filesystem::path& file) {
    std::lock_guard lock(library_mutex());
    quiet_library();
    check_in_child(file, "");
    const Handle handle = open_file(file, false);
    std::vector<Hdf5DatasetInfo> datasets;
    for (const std::string& name : dataset_names(handle.get(), file)) {
        Hdf5DatasetInfo info;
        info.name = name;
        const Handle dataset(H5Dopen2(handle.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
        if (!dataset.valid()) {
            info.problem = "it cannot be opened" + error_stack_text();
            datasets.push_back(info);
            continue;
        }
        const DatasetFacts facts = facts_of(dataset.get());
        info.shape = facts.shape;
        info.scalar_type = facts.scalar_type ? std::string(io_detail::scalar_type_name(*facts.scalar_type)) : "";
        info.storage = facts.storage;
        info.spacing_mm = spacing_attribute(dataset.get(), static_cast<int>(facts.shape.size()), nullptr);
        info.readable = facts.problem.empty();
        info.problem = facts.problem;
        datasets.push_back(info);
    }
    return datasets;
}

std::string default_hdf5_dataset(const std::filesystem::path& file) {
    const std::vector<Hdf5DatasetInfo> datasets = list_hdf5_datasets(file);
    std::vector<std::string> readable;
    for (const Hdf5DatasetInfo& dataset : datasets) {
        if (dataset.name == "/volumes/raw") return dataset.name;
        if (dataset.readable) readable.push_back(dataset.name);
    }
    if (readable.size() == 1) return readable.front();
    std::string listing;
    for (const Hdf5DatasetInfo& dataset : datasets) {
        listing += "\n  " + dataset.name + "  " + shape_text(dataset.shape) + " " +
                   (dataset.scalar_type.empty() ? "(not numeric)" : dataset.scalar_type) +
                   (dataset.readable ? "" : " — cannot be read: " + dataset.problem);
    }
    TESSERA_REJECT(quoted(file) << (readable.empty() ? " holds no 2D or 3D numeric dataset Tessera can read"
                                                     : " holds several datasets: name one, as in " +
                                                           quoted(std::filesystem::path(file.string() + ":" + readable.front())))
                                << (datasets.empty() ? " (it holds no dataset at all)." : ". Its datasets:" + listing));
}

// ---- one open dataset ---------------------------------------------------------------------------------

namespace io_detail {

struct Hdf5Handles {
    Handle file;
    Handle dataset;
};

Hdf5Dataset::Hdf5Dataset(const std::filesystem::path& path, std::size_t cache_bytes) : m_state(std::make_unique<Hdf5Handles>()) {
    std::lock_guard lock(library_mutex());
    quiet_library();
    const std::optional<Hdf5DatasetName> parsed = parse_hdf5_name(path.string());
    TESSERA_ASSERT(parsed.has_value(), quoted(path) << " names no HDF5 file");
    m_name = *parsed;
    check_in_child(m_name.file, m_name.dataset);
    m_state->file = open_file(m_name.file, false);
    if (m_name.dataset.empty()) m_name.dataset = default_hdf5_dataset(m_name.file);

    const std::vector<std::string> names = dataset_names(m_state->file.get(), m_name.file);
    if (std::find(names.begin(), names.end(), m_name.dataset) == names.end()) {
        std::string listing;
        for (const std::string& name : names) listing += (listing.empty() ? "" : ", ") + name;
        TESSERA_REJECT(quoted(m_name.file) << " has no dataset " << m_name.dataset << ". "
                                           << (names.empty() ? "It holds no dataset at all." : "Its datasets: " + listing + "."));
    }
    const Handle access(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
    // The chunk cache bounds what reading by region keeps: slots a prime well above the chunks it can hold.
    H5Pset_chunk_cache(access.get(), 12421, cache_bytes, 0.75);
    m_state->dataset = Handle(H5Dopen2(m_state->file.get(), m_name.dataset.c_str(), access.get()), H5Dclose);
    TESSERA_CHECK(m_state->dataset.valid(), "cannot open " << name_text(m_name) << error_stack_text() << ": the file may be damaged");

    const DatasetFacts facts = facts_of(m_state->dataset.get());
    TESSERA_CHECK(facts.problem.empty(), "cannot read " << name_text(m_name) << ": " << facts.problem << ".");
    m_scalar_type = *facts.scalar_type;
    m_storage = facts.storage;
    const int rank = static_cast<int>(facts.shape.size());
    // Checked in double before any product is taken in integers: a damaged dataspace can claim 2^60 × 2^60.
    double claimed = 1;
    for (std::int64_t extent : facts.shape) claimed *= static_cast<double>(extent);
    TESSERA_CHECK(claimed <= static_cast<double>(std::int64_t{1} << 44) &&
                      std::all_of(facts.shape.begin(), facts.shape.end(), [](std::int64_t extent) { return extent <= (std::int64_t{1} << 31); }),
                  quoted(std::filesystem::path(display_name())) << " claims " << shape_text(facts.shape)
                                                                << " voxels, which is not plausible (more than 2^44, or 2^31 along an axis): "
                                                                   "the file is damaged.");
    m_rank = rank;
    m_geometry.size = rank == 3 ? std::array<std::int64_t, 3>{facts.shape[2], facts.shape[1], facts.shape[0]}
                                : std::array<std::int64_t, 3>{facts.shape[1], facts.shape[0], 1};
    std::string spacing_source;
    if (const auto spacing = spacing_attribute(m_state->dataset.get(), rank, &spacing_source)) {
        m_geometry.spacing = *spacing;
    } else {
        m_warnings.push_back(m_name.dataset + " has no resolution attribute ([z, y, x] in nm): 1 mm spacing assumed");
    }
    if (const auto offset = numeric_attribute(m_state->dataset.get(), "offset", 3); offset && offset->size() == 3) {
        const std::array<double, 3> origin = {(*offset)[2] * 1e-6, (*offset)[1] * 1e-6, (*offset)[0] * 1e-6};
        if (std::all_of(origin.begin(), origin.end(), [](double value) { return std::isfinite(value); })) m_geometry.origin = origin;
    }
    if (const auto direction = numeric_attribute(m_state->dataset.get(), "direction", 9); direction && direction->size() == 9) {
        // Accepted only when its columns are unit vectors at right angles (a damaged attribute is reported).
        bool orthonormal = true;
        for (int a = 0; a < 3; ++a) {
            for (int b = 0; b < 3; ++b) {
                double dot = 0;
                for (int row = 0; row < 3; ++row) dot += (*direction)[static_cast<std::size_t>(row * 3 + a)] * (*direction)[static_cast<std::size_t>(row * 3 + b)];
                orthonormal = orthonormal && std::isfinite(dot) && std::abs(dot - (a == b ? 1.0 : 0.0)) < 1e-4;
            }
        }
        if (orthonormal) {
            std::copy(direction->begin(), direction->end(), m_geometry.direction.begin());
        } else {
            m_warnings.push_back(m_name.dataset + "'s direction attribute is not a rotation: identity axes assumed");
        }
    }
}

Hdf5Dataset::~Hdf5Dataset() {
    std::lock_guard lock(library_mutex());
    m_state.reset();
}

std::string Hdf5Dataset::display_name() const { return m_name.file.string() + ":" + m_name.dataset; }

void Hdf5Dataset::read(const VoxelBox& box, ScalarType memory_type, void* out) const {
    std::lock_guard lock(library_mutex());
    const int rank = m_rank;
    std::array<hsize_t, 3> start{}, count{};
    if (rank == 3) {
        start = {static_cast<hsize_t>(box.begin[2]), static_cast<hsize_t>(box.begin[1]), static_cast<hsize_t>(box.begin[0])};
        count = {static_cast<hsize_t>(box.extent[2]), static_cast<hsize_t>(box.extent[1]), static_cast<hsize_t>(box.extent[0])};
    } else {
        start = {static_cast<hsize_t>(box.begin[1]), static_cast<hsize_t>(box.begin[0]), 0};
        count = {static_cast<hsize_t>(box.extent[1]), static_cast<hsize_t>(box.extent[0]), 0};
    }
    const Handle file_space(H5Dget_space(m_state->dataset.get()), H5Sclose);
    const Handle memory_space(H5Screate_simple(rank, count.data(), nullptr), H5Sclose);
    const bool ok = file_space.valid() && memory_space.valid() &&
                    H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) >= 0 &&
                    H5Dread(m_state->dataset.get(), native_type_of(memory_type), memory_space.get(), file_space.get(), H5P_DEFAULT, out) >= 0;
    TESSERA_CHECK(ok, "cannot read voxels " << box.begin[0] << "–" << box.begin[0] + box.extent[0] - 1 << ", " << box.begin[1] << "–"
                                            << box.begin[1] + box.extent[1] - 1 << ", " << box.begin[2] << "–"
                                            << box.begin[2] + box.extent[2] - 1 << " (i, j, k) of " << quoted(std::filesystem::path(display_name()))
                                            << error_stack_text() << ": the file is damaged there (a truncated or corrupt chunk)");
}

// ---- whole reads and writes -------------------------------------------------------------------------

RawImage read_hdf5(const std::filesystem::path& path) {
    const Hdf5Dataset dataset(path);
    const ImageGeometry& geometry = dataset.geometry();
    const std::string size_text = std::to_string(geometry.size[0]) + "×" + std::to_string(geometry.size[1]) + "×" + std::to_string(geometry.size[2]);
    check_volume_budget(path, size_text, static_cast<std::uint64_t>(geometry.num_voxels()), scalar_type_size(dataset.scalar_type()));
    auto voxels = std::make_shared_for_overwrite<std::byte[]>(static_cast<std::size_t>(geometry.num_voxels()) * scalar_type_size(dataset.scalar_type()));
    dataset.read(VoxelBox{{0, 0, 0}, geometry.size}, dataset.scalar_type(), voxels.get());
    RawImage raw;
    raw.geometry = geometry;
    raw.scalar_type = dataset.scalar_type();
    raw.source_scalar_type = std::string(scalar_type_name(dataset.scalar_type()));
    raw.voxels = voxels.get();
    raw.owner = std::shared_ptr<const void>(voxels, voxels.get());
    raw.warnings = dataset.warnings();
    return raw;
}

namespace {

// Opens the file to write `name` into: an HDF5 file that exists is added to (its other datasets kept,
// a dataset of the same name replaced); a new one is created.
Handle file_for_writing(const Hdf5DatasetName& name) {
    const FileKind kind = file_kind(name.file);
    if (kind == FileKind::Missing) {
        Handle file(H5Fcreate(name.file.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
        TESSERA_CHECK(file.valid(), "cannot create " << quoted(name.file) << error_stack_text() << ": check that its folder exists and is writable");
        return file;
    }
    TESSERA_CHECK(kind == FileKind::Regular && H5Fis_hdf5(name.file.c_str()) > 0,
                  "cannot write " << name_text(name) << ": " << quoted(name.file)
                                  << " exists and is not an HDF5 file. Remove it or choose another name (Tessera adds datasets to HDF5 files, "
                                     "it does not overwrite other files).");
    check_in_child(name.file, "");
    return open_file(name.file, true);
}

}  // namespace

Hdf5DatasetWriter::Hdf5DatasetWriter(const std::filesystem::path& path, const ImageGeometry& geometry, ScalarType scalar_type, bool compress)
    : m_state(std::make_unique<Hdf5Handles>()), m_geometry(geometry), m_scalar_type(scalar_type) {
    std::lock_guard lock(library_mutex());
    quiet_library();
    const std::optional<Hdf5DatasetName> parsed = parse_hdf5_name(path.string());
    TESSERA_ASSERT(parsed.has_value(), quoted(path) << " names no HDF5 file");
    m_name = *parsed;
    if (m_name.dataset.empty()) m_name.dataset = "/volumes/raw";
    require_plain_path(m_name.file.native(), "the HDF5 file");
    m_state->file = file_for_writing(m_name);
    if (H5Lexists(m_state->file.get(), m_name.dataset.c_str(), H5P_DEFAULT) > 0) H5Ldelete(m_state->file.get(), m_name.dataset.c_str(), H5P_DEFAULT);
    H5Eclear2(H5E_DEFAULT);

    const bool volume = geometry.size[2] > 1;
    const int rank = volume ? 3 : 2;
    const std::array<hsize_t, 3> dims = volume ? std::array<hsize_t, 3>{hsize_t(geometry.size[2]), hsize_t(geometry.size[1]), hsize_t(geometry.size[0])}
                                               : std::array<hsize_t, 3>{hsize_t(geometry.size[1]), hsize_t(geometry.size[0]), 0};
    // Chunks of 64³ voxels (256² for images): a training patch touches a few, a slab of 64 slices whole rows of them.
    std::array<hsize_t, 3> chunk{};
    for (int axis = 0; axis < rank; ++axis) chunk[static_cast<std::size_t>(axis)] = std::min<hsize_t>(dims[static_cast<std::size_t>(axis)], volume ? 64 : 256);
    const Handle space(H5Screate_simple(rank, dims.data(), nullptr), H5Sclose);
    const Handle creation(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_chunk(creation.get(), rank, chunk.data());
    if (compress && H5Zfilter_avail(H5Z_FILTER_SHUFFLE) > 0) H5Pset_shuffle(creation.get());
    if (compress && H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) H5Pset_deflate(creation.get(), 4);
    const Handle link_creation(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
    H5Pset_create_intermediate_group(link_creation.get(), 1);
    // A cache that holds a whole layer of chunks: a slab thinner than a chunk (sliding-window prediction
    // writes a window's depth at a time) then completes each chunk in memory, and it is compressed and
    // written once, instead of read back, recompressed and written anew — in new space — for every slab.
    std::uint64_t layer_bytes = io_detail::scalar_type_size(scalar_type);
    for (int axis = 0; axis < rank; ++axis) {
        const hsize_t extent = dims[static_cast<std::size_t>(axis)], edge = chunk[static_cast<std::size_t>(axis)];
        layer_bytes *= axis == 0 ? edge : (extent + edge - 1) / edge * edge;
    }
    const Handle access(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
    H5Pset_chunk_cache(access.get(), 100003, static_cast<std::size_t>(std::min<std::uint64_t>(layer_bytes + (layer_bytes >> 3), std::uint64_t{1} << 30)), 1.0);
    m_state->dataset = Handle(H5Dcreate2(m_state->file.get(), m_name.dataset.c_str(), file_type_of(scalar_type), space.get(),
                                         link_creation.get(), creation.get(), access.get()),
                              H5Dclose);
    TESSERA_CHECK(m_state->dataset.valid(), "cannot create the dataset " << name_text(m_name) << error_stack_text());

    const std::string where = name_text(m_name);
    const auto& spacing = geometry.spacing;
    const auto& origin = geometry.origin;
    // CREMI's attributes: [z, y, x] in nm; an image's too (its z: the section's thickness).
    write_attribute(m_state->dataset.get(), "resolution", {spacing[2] * 1e6, spacing[1] * 1e6, spacing[0] * 1e6}, where);
    if (origin != std::array<double, 3>{0, 0, 0}) write_attribute(m_state->dataset.get(), "offset", {origin[2] * 1e6, origin[1] * 1e6, origin[0] * 1e6}, where);
    if (geometry.direction != ImageGeometry{}.direction) {
        write_attribute(m_state->dataset.get(), "direction", std::vector<double>(geometry.direction.begin(), geometry.direction.end()), where);
    }
}

Hdf5DatasetWriter::~Hdf5DatasetWriter() {
    std::lock_guard lock(library_mutex());
    m_state.reset();
}

void Hdf5DatasetWriter::write(const VoxelBox& box, const void* voxels) {
    std::lock_guard lock(library_mutex());
    const bool volume = m_geometry.size[2] > 1;
    const int rank = volume ? 3 : 2;
    const std::array<hsize_t, 3> start = volume ? std::array<hsize_t, 3>{hsize_t(box.begin[2]), hsize_t(box.begin[1]), hsize_t(box.begin[0])}
                                                : std::array<hsize_t, 3>{hsize_t(box.begin[1]), hsize_t(box.begin[0]), 0};
    const std::array<hsize_t, 3> count = volume ? std::array<hsize_t, 3>{hsize_t(box.extent[2]), hsize_t(box.extent[1]), hsize_t(box.extent[0])}
                                                : std::array<hsize_t, 3>{hsize_t(box.extent[1]), hsize_t(box.extent[0]), 0};
    const Handle file_space(H5Dget_space(m_state->dataset.get()), H5Sclose);
    const Handle memory_space(H5Screate_simple(rank, count.data(), nullptr), H5Sclose);
    const bool ok = H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) >= 0 &&
                    H5Dwrite(m_state->dataset.get(), native_type_of(m_scalar_type), memory_space.get(), file_space.get(), H5P_DEFAULT, voxels) >= 0;
    TESSERA_CHECK(ok, "cannot write to " << name_text(m_name) << error_stack_text() << ": is the disk full?");
}

void Hdf5DatasetWriter::finish() {
    std::lock_guard lock(library_mutex());
    const bool ok = H5Fflush(m_state->file.get(), H5F_SCOPE_GLOBAL) >= 0;
    const std::string errors = ok ? "" : error_stack_text();
    m_state.reset();
    TESSERA_CHECK(ok, "cannot finish writing " << name_text(m_name) << errors << ": is the disk full?");
}

void write_hdf5(const ImageGeometry& geometry, const EncodedVoxels& voxels, const std::filesystem::path& path) {
    Hdf5DatasetWriter writer(path, geometry, voxels.scalar_type);
    writer.write(VoxelBox{{0, 0, 0}, geometry.size}, voxels.bytes.data());
    writer.finish();
}

}  // namespace io_detail

}  // namespace tessera
