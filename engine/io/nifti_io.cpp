// NIfTI-1 and NIfTI-2 (.nii, .nii.gz): read with zlib here, written through VTK's writer.
//
// The header is read and checked first (zlib reads .nii and .nii.gz alike), then the voxels are
// streamed into one buffer of exactly the size the header promises: never more (a gzip bomb past the
// promised size is not read), and the promise itself is checked before anything is allocated — against
// the file's size (uncompressed), against what a gzip stream of that size can expand to at most
// (compressed), and against the memory a volume may use (TESSERA_MAX_VOLUME_BYTES). Geometry comes
// from our reading of the header, in the file's voxel order.
#include "io/label_descriptions.hpp"
#include "io/raw_image.hpp"
#include "io/vtk_support.hpp"

#include <vtkImageData.h>
#include <vtkMatrix4x4.h>
#include <vtkNIFTIImageWriter.h>
#include <vtkNew.h>

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>

namespace tessera::io_detail {

namespace {

constexpr std::int32_t nifti1_header_bytes = 348;
constexpr std::int32_t nifti2_header_bytes = 540;

struct NiftiDatatype {
    int code;
    std::string_view name;
    int bits;
    std::optional<ScalarType> scalar_type;  // none: not readable
    std::string_view fix;                   // for the unreadable ones
};

constexpr NiftiDatatype nifti_datatypes[] = {
    {2, "uint8", 8, ScalarType::U8, ""},
    {4, "int16", 16, ScalarType::I16, ""},
    {8, "int32", 32, ScalarType::I32, ""},
    {16, "float32", 32, ScalarType::F32, ""},
    {64, "float64", 64, ScalarType::F64, ""},
    {256, "int8", 8, ScalarType::I8, ""},
    {512, "uint16", 16, ScalarType::U16, ""},
    {768, "uint32", 32, ScalarType::U32, ""},
    {1024, "int64", 64, ScalarType::I64, ""},
    {1280, "uint64", 64, ScalarType::U64, ""},
    {1, "binary (1 bit)", 1, std::nullopt, "save it as uint8"},
    {32, "complex64", 64, std::nullopt, "save its magnitude (or real part) as a float image"},
    {128, "RGB24", 24, std::nullopt, "convert it to grayscale"},
    {1536, "float128", 128, std::nullopt, "save it as float32 or float64"},
    {1792, "complex128", 128, std::nullopt, "save its magnitude (or real part) as a float image"},
    {2048, "complex256", 256, std::nullopt, "save its magnitude (or real part) as a float image"},
    {2304, "RGBA32", 32, std::nullopt, "convert it to grayscale"},
};

const NiftiDatatype* find_datatype(int code) {
    for (const NiftiDatatype& datatype : nifti_datatypes) {
        if (datatype.code == code) return &datatype;
    }
    return nullptr;
}

template <class T>
T load(const unsigned char* bytes, bool swapped) {
    static_assert(std::is_trivially_copyable_v<T>);
    unsigned char copy[sizeof(T)];
    std::memcpy(copy, bytes, sizeof(T));
    if (swapped) {
        for (std::size_t index = 0; index < sizeof(T) / 2; ++index) std::swap(copy[index], copy[sizeof(T) - 1 - index]);
    }
    T value;
    std::memcpy(&value, copy, sizeof(T));
    return value;
}

struct NiftiHeader {
    int version = 1;
    bool compressed = false;
    bool swapped = false;  // stored big-endian on this little-endian host (or the reverse)
    std::array<std::int64_t, 8> dim{};
    int datatype = 0;
    int bitpix = 0;
    std::array<double, 8> pixdim{};
    double vox_offset = 0;
    double scl_slope = 0;
    double scl_inter = 0;
    int qform_code = 0;
    int sform_code = 0;
    std::array<double, 3> quatern{};  // b, c, d
    std::array<double, 3> qoffset{};
    std::array<double, 12> srow{};  // srow_x, srow_y, srow_z
    int intent_code = 0;
    std::string aux_file;  // for NIFTI_INTENT_LABEL (1002): the file with the labels' names
};

constexpr int nifti_intent_label = 1002;  // nifti1.h: "the value at each voxel is an index into some set of labels"

// A fixed-size text field: up to its first NUL.
std::string text_field(const unsigned char* bytes, std::size_t size) {
    const char* text = reinterpret_cast<const char*>(bytes);
    return std::string(text, strnlen(text, size));
}

std::string size_text(const std::array<std::int64_t, 8>& dim) {
    return std::to_string(dim[1]) + "×" + std::to_string(dim[2]) + "×" + std::to_string(dim[3]);
}

// The NIfTI-1 header's fields (348 bytes), after its magic string is checked.
void decode_nifti1_fields(const std::filesystem::path& path, const unsigned char* bytes, NiftiHeader& header) {
    const bool swapped = header.swapped;
    const char* magic = reinterpret_cast<const char*>(bytes + 344);
    TESSERA_CHECK(std::memcmp(magic, "ni1", 4) != 0,
                  quoted(path) << " is the header of a .hdr/.img pair (magic 'ni1'), not a single-file "
                                  "NIfTI: convert the pair to .nii.gz (e.g. fslchfiletype NIFTI_GZ).");
    TESSERA_CHECK(std::memcmp(magic, "n+1", 4) == 0,
                  quoted(path) << " is not a NIfTI-1 image: the magic string at byte 344 is not 'n+1' "
                                  "(an Analyze 7.5 file?). Convert it to NIfTI.");
    for (int index = 0; index < 8; ++index) {
        header.dim[index] = load<std::int16_t>(bytes + 40 + 2 * index, swapped);
        header.pixdim[index] = load<float>(bytes + 76 + 4 * index, swapped);
    }
    header.datatype = load<std::int16_t>(bytes + 70, swapped);
    header.bitpix = load<std::int16_t>(bytes + 72, swapped);
    header.vox_offset = load<float>(bytes + 108, swapped);
    header.scl_slope = load<float>(bytes + 112, swapped);
    header.scl_inter = load<float>(bytes + 116, swapped);
    header.qform_code = load<std::int16_t>(bytes + 252, swapped);
    header.sform_code = load<std::int16_t>(bytes + 254, swapped);
    for (int index = 0; index < 3; ++index) {
        header.quatern[index] = load<float>(bytes + 256 + 4 * index, swapped);
        header.qoffset[index] = load<float>(bytes + 268 + 4 * index, swapped);
    }
    for (int index = 0; index < 12; ++index) header.srow[index] = load<float>(bytes + 280 + 4 * index, swapped);
    header.intent_code = load<std::int16_t>(bytes + 68, swapped);
    header.aux_file = text_field(bytes + 204, 24);
}

// The NIfTI-2 header's fields (540 bytes), after its magic string is checked.
void decode_nifti2_fields(const std::filesystem::path& path, const unsigned char* bytes, NiftiHeader& header) {
    const bool swapped = header.swapped;
    const char* magic = reinterpret_cast<const char*>(bytes + 4);
    TESSERA_CHECK(std::memcmp(magic, "ni2", 4) != 0,
                  quoted(path) << " is the header of a .hdr/.img pair (magic 'ni2'), not a single-file "
                                  "NIfTI: convert the pair to .nii.gz.");
    TESSERA_CHECK(std::memcmp(magic, "n+2", 4) == 0,
                  quoted(path) << " is not a NIfTI-2 image: the magic string at byte 4 is not 'n+2'.");
    header.datatype = load<std::int16_t>(bytes + 12, swapped);
    header.bitpix = load<std::int16_t>(bytes + 14, swapped);
    for (int index = 0; index < 8; ++index) {
        header.dim[index] = load<std::int64_t>(bytes + 16 + 8 * index, swapped);
        header.pixdim[index] = load<double>(bytes + 104 + 8 * index, swapped);
    }
    header.vox_offset = static_cast<double>(load<std::int64_t>(bytes + 168, swapped));
    header.scl_slope = load<double>(bytes + 176, swapped);
    header.scl_inter = load<double>(bytes + 184, swapped);
    header.qform_code = load<std::int32_t>(bytes + 344, swapped);
    header.sform_code = load<std::int32_t>(bytes + 348, swapped);
    for (int index = 0; index < 3; ++index) {
        header.quatern[index] = load<double>(bytes + 352 + 8 * index, swapped);
        header.qoffset[index] = load<double>(bytes + 376 + 8 * index, swapped);
    }
    for (int index = 0; index < 12; ++index) header.srow[index] = load<double>(bytes + 400 + 8 * index, swapped);
    header.intent_code = load<std::int32_t>(bytes + 504, swapped);
    header.aux_file = text_field(bytes + 320, 24);
}

// dim[0] axes, each at least one voxel; beyond three only 1 (one 3D volume); a plausible voxel count.
void check_dimensions(const std::filesystem::path& path, NiftiHeader& header) {
    const std::int64_t num_axes = header.dim[0];
    TESSERA_CHECK(num_axes >= 1 && num_axes <= 7, quoted(path)
                                                      << " has a damaged header: dim[0] (the number of axes) is "
                                                      << num_axes << ", it must be between 1 and 7");
    for (int axis = 1; axis <= num_axes; ++axis) {
        TESSERA_CHECK(header.dim[axis] >= 1, quoted(path) << " has a zero or negative dimension: dim[" << axis << "] = "
                                                          << header.dim[axis] << " voxels. The header is damaged.");
    }
    for (int axis = static_cast<int>(num_axes) + 1; axis < 8; ++axis) header.dim[axis] = 1;
    for (int axis = 4; axis <= num_axes; ++axis) {
        TESSERA_CHECK(header.dim[axis] == 1,
                      quoted(path) << " holds more than one volume: dim[" << axis << "] = " << header.dim[axis]
                                   << (axis == 4 ? " time points" : " components per voxel")
                                   << ". Tessera reads single 3D volumes: extract one (e.g. fslroi) first.");
    }
    constexpr std::int64_t max_voxels = std::int64_t{1} << 40;
    const bool plausible = header.dim[1] <= std::numeric_limits<std::int32_t>::max() &&
                           header.dim[2] <= std::numeric_limits<std::int32_t>::max() &&
                           header.dim[3] <= std::numeric_limits<std::int32_t>::max() &&
                           header.dim[1] * header.dim[2] <= max_voxels / header.dim[3];
    TESSERA_CHECK(plausible, quoted(path) << " claims " << size_text(header.dim)
                                          << " voxels, which is not plausible: the header is damaged.");
}

// The voxel type: known, one scalar per voxel, its bits as bitpix says.
const NiftiDatatype& check_voxel_type(const std::filesystem::path& path, const NiftiHeader& header) {
    const NiftiDatatype* datatype = find_datatype(header.datatype);
    TESSERA_CHECK(datatype != nullptr, quoted(path) << " has an unknown voxel type (NIfTI datatype " << header.datatype
                                                    << "): the header is damaged.");
    TESSERA_CHECK(datatype->scalar_type.has_value(),
                  quoted(path) << " stores voxels as " << datatype->name << " (NIfTI datatype " << datatype->code
                               << "), an unsupported voxel type: Tessera reads one integer or floating-point "
                               << "value per voxel. To use it, " << datatype->fix << " first.");
    TESSERA_CHECK(header.bitpix == datatype->bits, quoted(path) << " has a damaged header: bitpix is " << header.bitpix
                                                                << " but datatype " << datatype->name << " has "
                                                                << datatype->bits << " bits");
    return *datatype;
}

// Where the voxels start and how many bytes they take, against the file's size; whatever decides an
// allocation is checked before it.
void check_data_extent(const std::filesystem::path& path, const NiftiHeader& header, const NiftiDatatype& datatype, bool whole_read) {
    const double header_end = header.version == 1 ? 348 : 540;
    TESSERA_CHECK(std::isfinite(header.vox_offset) && header.vox_offset >= header_end,
                  quoted(path) << " has a damaged header: the voxels would start at byte " << header.vox_offset
                               << " (vox_offset), inside the " << header_end << "-byte header");

    const std::uint64_t num_voxels = static_cast<std::uint64_t>(header.dim[1] * header.dim[2] * header.dim[3]);
    const std::uint64_t data_bytes = num_voxels * static_cast<std::uint64_t>(datatype.bits / 8);
    std::error_code error;
    const std::uint64_t file_bytes = std::filesystem::file_size(path, error);
    TESSERA_CHECK(!error, "cannot read " << quoted(path) << ": " << error.message());
    if (!header.compressed) {
        TESSERA_CHECK(header.vox_offset <= static_cast<double>(file_bytes),
                      quoted(path) << " has a damaged header: the voxels would start at byte " << header.vox_offset
                                   << " (vox_offset), past the end of the file (" << file_bytes << " bytes)");
        const std::uint64_t needed_bytes = static_cast<std::uint64_t>(header.vox_offset) + data_bytes;
        TESSERA_CHECK(file_bytes >= needed_bytes,
                      quoted(path) << " is truncated: its header promises " << size_text(header.dim) << " "
                                   << datatype.name << " voxels (" << data_bytes << " bytes from byte "
                                   << static_cast<std::uint64_t>(header.vox_offset) << ") but the file holds only "
                                   << file_bytes << " bytes. Get a complete copy (or fix the header's dim).");
    } else {
        // Deflate expands 1,032:1 at the most; a stream of this size cannot hold more.
        constexpr double max_deflate_ratio = 1032;
        const double most = static_cast<double>(file_bytes) * max_deflate_ratio + 4096;
        const double promised = header.vox_offset + static_cast<double>(data_bytes);
        TESSERA_CHECK(promised <= most,
                      quoted(path) << " has a damaged header: it promises " << size_text(header.dim) << " " << datatype.name
                                   << " voxels from byte " << header.vox_offset << " (" << promised
                                   << " bytes uncompressed), but " << file_bytes << " bytes of gzip data expand to "
                                   << static_cast<std::uint64_t>(most) << " at the most. Get a complete copy (or fix the header's dim "
                                   << "and vox_offset).");
    }
    // Read by region, a volume never needs to fit memory.
    if (whole_read) check_volume_budget(path, size_text(header.dim), num_voxels, static_cast<std::uint64_t>(datatype.bits / 8));
}

// Voxel spacing and scaling the geometry and values are built from.
void check_spacing_and_scaling(const std::filesystem::path& path, const NiftiHeader& header) {
    for (int axis = 1; axis <= 3; ++axis) {
        TESSERA_CHECK(std::isfinite(header.pixdim[axis]),
                      quoted(path) << " has a damaged header: the voxel spacing pixdim[" << axis << "] is " << header.pixdim[axis]
                                   << ". Fix it (e.g. with nibabel or fslchpixdim) or get a fresh copy.");
    }
    if (std::isfinite(header.scl_slope) && header.scl_slope != 0) {
        TESSERA_CHECK(std::isfinite(header.scl_inter),
                      quoted(path) << " has a damaged header: scl_slope is " << header.scl_slope << " but scl_inter is "
                                   << header.scl_inter << ", so no voxel value can be computed. Fix scl_inter (0 for none).");
    } else {
        TESSERA_CHECK(!std::isinf(header.scl_slope),
                      quoted(path) << " has a damaged header: the value scaling scl_slope is " << header.scl_slope
                                   << ", which makes every voxel infinite. Fix it (0 or 1 for no scaling) or get a fresh copy.");
    }
}

// Reads and checks the header; `path` is .nii or .nii.gz.
NiftiHeader read_nifti_header(const std::filesystem::path& path, bool whole_read = true) {
    gzFile file = gzopen(path.c_str(), "rb");
    TESSERA_CHECK(file != nullptr, "cannot open " << quoted(path) << ": " << std::strerror(errno));
    unsigned char bytes[nifti2_header_bytes] = {};
    const int count = gzread(file, bytes, sizeof bytes);
    const bool direct = gzdirect(file) == 1;
    int zlib_status = Z_OK;
    const std::string zlib_message = gzerror(file, &zlib_status);
    gzclose(file);

    // A gzip stream cut short ends with Z_BUF_ERROR ("unexpected end of file").
    TESSERA_CHECK(direct || count >= nifti1_header_bytes || zlib_status != Z_BUF_ERROR,
                  quoted(path) << " is truncated: its compressed data ends after " << std::max(count, 0)
                               << " bytes, inside the NIfTI header. Get a complete copy.");
    TESSERA_CHECK(count >= 0 && zlib_status != Z_DATA_ERROR, quoted(path)
                                                                 << " is not a readable gzip file (" << zlib_message
                                                                 << "): it is damaged. Get a fresh copy.");
    TESSERA_CHECK(count >= 4, quoted(path) << " is not a NIfTI image: it holds only " << count
                                           << " bytes, a NIfTI-1 header alone has 348");

    NiftiHeader header;
    header.compressed = !direct;
    bool& swapped = header.swapped;
    const std::int32_t sizeof_hdr = load<std::int32_t>(bytes, false);
    if (sizeof_hdr == nifti1_header_bytes || sizeof_hdr == nifti2_header_bytes) {
        header.version = sizeof_hdr == nifti1_header_bytes ? 1 : 2;
    } else if (load<std::int32_t>(bytes, true) == nifti1_header_bytes ||
               load<std::int32_t>(bytes, true) == nifti2_header_bytes) {
        swapped = true;
        header.version = load<std::int32_t>(bytes, true) == nifti1_header_bytes ? 1 : 2;
    } else {
        TESSERA_REJECT(quoted(path) << " is not a NIfTI image: its first 4 bytes give a header size of " << sizeof_hdr
                                    << ", where NIfTI-1 has 348 and NIfTI-2 has 540. Is it "
                                    << "another kind of file saved with a " << full_extension(path) << " extension?");
    }
    const int needed = header.version == 1 ? nifti1_header_bytes : nifti2_header_bytes;
    TESSERA_CHECK(count >= needed, quoted(path)
                                       << " is truncated: it ends after " << count << " of the " << needed
                                       << " bytes of its NIfTI-" << header.version << " header. Get a complete copy.");

    if (header.version == 1) decode_nifti1_fields(path, bytes, header);
    else decode_nifti2_fields(path, bytes, header);
    check_dimensions(path, header);
    const NiftiDatatype& datatype = check_voxel_type(path, header);
    check_data_extent(path, header, datatype, whole_read);
    check_spacing_and_scaling(path, header);
    return header;
}

using Matrix3 = std::array<double, 9>;  // row-major
using Vector3 = std::array<double, 3>;

struct RasGeometry {
    Vector3 spacing{1, 1, 1};
    Vector3 origin{0, 0, 0};
    Matrix3 direction{1, 0, 0, 0, 1, 0, 0, 0, 1};  // columns: axis directions in RAS
};

double positive_spacing(double pixdim) {
    return pixdim != 0 ? std::abs(pixdim) : 1.0;  // finite: checked with the header
}

// NIfTI method 2: rotation from the quaternion, qfac flips the third axis.
RasGeometry qform_geometry(const NiftiHeader& header) {
    double b = header.quatern[0], c = header.quatern[1], d = header.quatern[2];
    double a_squared = 1.0 - (b * b + c * c + d * d);
    // As niftilib does: below 1e-7, a is rounding noise of a 180° rotation stored in floats; taken at
    // face value it tilts the axes by ~3e-4 (VTK's reader does that).
    if (a_squared < 1e-7) {
        const double norm = std::sqrt(b * b + c * c + d * d);
        b /= norm;
        c /= norm;
        d /= norm;
        a_squared = 0;
    }
    const double a = std::sqrt(a_squared);
    const double qfac = header.pixdim[0] < 0 ? -1.0 : 1.0;
    const Matrix3 rotation = {
        a * a + b * b - c * c - d * d, 2 * (b * c - a * d),           2 * (b * d + a * c),
        2 * (b * c + a * d),           a * a + c * c - b * b - d * d, 2 * (c * d - a * b),
        2 * (b * d - a * c),           2 * (c * d + a * b),           a * a + d * d - c * c - b * b};
    RasGeometry geometry;
    for (int axis = 0; axis < 3; ++axis) {
        geometry.spacing[axis] = positive_spacing(header.pixdim[axis + 1]);
        const double sign = (axis == 2 ? qfac : 1.0) * (header.pixdim[axis + 1] < 0 ? -1.0 : 1.0);
        for (int row = 0; row < 3; ++row) geometry.direction[row * 3 + axis] = rotation[row * 3 + axis] * sign;
        geometry.origin[axis] = header.qoffset[axis];
    }
    return geometry;
}

// NIfTI method 3: an affine; its column lengths are the spacing. Empty if a column is degenerate.
std::optional<RasGeometry> sform_geometry(const NiftiHeader& header) {
    RasGeometry geometry;
    for (int axis = 0; axis < 3; ++axis) {
        const Vector3 column = {header.srow[axis], header.srow[4 + axis], header.srow[8 + axis]};
        const double length = std::sqrt(column[0] * column[0] + column[1] * column[1] + column[2] * column[2]);
        if (!std::isfinite(length) || length == 0) return std::nullopt;
        geometry.spacing[axis] = length;
        for (int row = 0; row < 3; ++row) geometry.direction[row * 3 + axis] = column[row] / length;
        geometry.origin[axis] = header.srow[axis * 4 + 3];
    }
    return geometry;
}

bool agree(const RasGeometry& a, const RasGeometry& b) {
    for (int index = 0; index < 9; ++index) {
        if (std::abs(a.direction[index] - b.direction[index]) > 1e-3) return false;
    }
    for (int axis = 0; axis < 3; ++axis) {
        if (std::abs(a.spacing[axis] - b.spacing[axis]) > 1e-4 * a.spacing[axis]) return false;
        if (std::abs(a.origin[axis] - b.origin[axis]) > 1e-3) return false;
    }
    return true;
}

// The qform (scanner coordinates) when present, else the sform, else pixdim alone (Analyze's way).
// When both are present and agree the sform is taken: it is stored exactly, while a qform rebuilt from
// float quaternions is off by up to ~3e-4 for 180° rotations.
ImageGeometry nifti_geometry(const NiftiHeader& header) {
    RasGeometry ras;
    const std::optional<RasGeometry> sform = header.sform_code > 0 ? sform_geometry(header) : std::nullopt;
    if (header.qform_code > 0) {
        ras = qform_geometry(header);
        if (sform && agree(ras, *sform)) ras = *sform;
    } else if (sform) {
        ras = *sform;
    } else {
        for (int axis = 0; axis < 3; ++axis) ras.spacing[axis] = positive_spacing(header.pixdim[axis + 1]);
    }
    ImageGeometry geometry;
    for (int axis = 0; axis < 3; ++axis) geometry.size[axis] = header.dim[axis + 1];
    geometry.spacing = ras.spacing;
    // RAS → LPS: negate x and y.
    for (int row = 0; row < 3; ++row) {
        const double sign = row < 2 ? -1.0 : 1.0;
        geometry.origin[row] = sign * ras.origin[row];
        for (int column = 0; column < 3; ++column) {
            geometry.direction[row * 3 + column] = sign * ras.direction[row * 3 + column];
        }
    }
    for (double& value : geometry.origin) value = value == 0.0 ? 0.0 : value;  // no -0 from the flip
    for (double& value : geometry.direction) value = value == 0.0 ? 0.0 : value;
    return geometry;
}

// The voxels, exactly as many bytes as the header promises, from vox_offset; in host byte order.
std::shared_ptr<std::byte[]> read_nifti_voxels(const std::filesystem::path& path, const NiftiHeader& header, const NiftiDatatype& datatype) {
    const std::uint64_t element_bytes = static_cast<std::uint64_t>(datatype.bits / 8);
    const std::uint64_t num_voxels = static_cast<std::uint64_t>(header.dim[1] * header.dim[2] * header.dim[3]);
    const std::uint64_t data_bytes = num_voxels * element_bytes;
    auto voxels = std::make_shared_for_overwrite<std::byte[]>(static_cast<std::size_t>(data_bytes));

    gzFile file = gzopen(path.c_str(), "rb");
    TESSERA_CHECK(file != nullptr, "cannot open " << quoted(path) << ": " << std::strerror(errno));
    gzbuffer(file, 1 << 18);
    std::uint64_t done = 0;
    // Skip to vox_offset (reading: gzseek forward on a compressed stream decompresses anyway).
    const auto offset = static_cast<std::uint64_t>(header.vox_offset);
    std::uint64_t skipped = 0;
    std::byte scratch[4096];
    bool ended_early = false;
    while (skipped < offset) {
        const auto chunk = static_cast<unsigned>(std::min<std::uint64_t>(sizeof scratch, offset - skipped));
        const int count = gzread(file, scratch, chunk);
        if (count <= 0) { ended_early = true; break; }
        skipped += static_cast<std::uint64_t>(count);
    }
    while (!ended_early && done < data_bytes) {
        const auto chunk = static_cast<unsigned>(std::min<std::uint64_t>(std::uint64_t{1} << 28, data_bytes - done));
        const int count = gzread(file, voxels.get() + done, chunk);
        if (count <= 0) { ended_early = true; break; }
        done += static_cast<std::uint64_t>(count);
    }
    int zlib_status = Z_OK;
    const std::string zlib_message = gzerror(file, &zlib_status);
    gzclose(file);
    TESSERA_CHECK(zlib_status != Z_DATA_ERROR && zlib_status != Z_ERRNO,
                  quoted(path) << " could not be read (" << (zlib_status == Z_ERRNO ? std::strerror(errno) : zlib_message)
                               << "): " << (header.compressed ? "its compressed data is damaged" : "a read failed")
                               << " after " << (skipped + done) << " bytes. Get a fresh copy.");
    TESSERA_CHECK(!ended_early, quoted(path) << " is truncated: its header promises " << size_text(header.dim) << " " << datatype.name
                                             << " voxels (" << data_bytes << " bytes from byte " << offset << ") but the "
                                             << (header.compressed ? "compressed data ends" : "file ends") << " after "
                                             << done << " of them. Get a complete copy.");
    if (header.swapped) swap_byte_order(voxels.get(), num_voxels, element_bytes);
    return voxels;
}

}  // namespace

// A label map (intent NIFTI_INTENT_LABEL) may name the file holding its labels' names in aux_file, as
// nifti1.h says; any label description format Tessera reads will do. Looked for beside the image
// only (a name with a directory in it is not followed). Names are cosmetic: a problem only warns.
void read_intent_label_names(const NiftiHeader& header, const std::filesystem::path& path, RawImage& raw) {
    if (header.intent_code != nifti_intent_label || header.aux_file.empty()) return;
    const std::string& name = header.aux_file;
    if (name.find('/') != std::string::npos || name.find('\\') != std::string::npos || name == "." || name == "..") {
        raw.warnings.push_back("the header's aux_file \"" + name + "\" (its label names' file) is not a plain file name: not read");
        return;
    }
    const std::filesystem::path names = path.parent_path() / name;
    std::error_code error;
    if (!std::filesystem::is_regular_file(names, error)) {
        raw.warnings.push_back("the header names its labels' file \"" + name + "\" (aux_file), which is not beside it");
        return;
    }
    try {
        raw.label_descriptions = read_label_descriptions(names);
    } catch (const Error& failure) {
        raw.warnings.push_back("label names not read from " + name + " (the header's aux_file): " + failure.what());
    }
}

namespace {

// Everything read_nifti returns but the voxels.
RawImage describe_nifti(const NiftiHeader& header, const std::filesystem::path& path) {
    const NiftiDatatype& datatype = *find_datatype(header.datatype);
    RawImage raw;
    raw.geometry = nifti_geometry(header);
    raw.scalar_type = *datatype.scalar_type;
    raw.source_scalar_type = std::string(datatype.name);
    for (int axis = 1; axis <= 3; ++axis) {
        if (header.pixdim[axis] == 0 && header.qform_code <= 0 && header.sform_code <= 0) {
            raw.warnings.push_back("the header gives no voxel spacing along axis " + std::to_string(axis) +
                                   " (pixdim[" + std::to_string(axis) + "] = 0): 1 mm assumed");
        } else if (header.pixdim[axis] == 0 && header.qform_code > 0) {
            raw.warnings.push_back("the qform's voxel spacing pixdim[" + std::to_string(axis) + "] is 0: 1 mm assumed");
        }
    }
    if (std::isfinite(header.scl_slope) && header.scl_slope != 0.0) {
        raw.slope = header.scl_slope;
        raw.intercept = header.scl_inter;
    } else if (std::isnan(header.scl_slope)) {
        raw.warnings.push_back("scl_slope is NaN: read as no scaling (as nibabel does)");
    }
    read_intent_label_names(header, path, raw);
    return raw;
}

}  // namespace

RawImage read_nifti(const std::filesystem::path& path) {
    const NiftiHeader header = read_nifti_header(path);
    RawImage raw = describe_nifti(header, path);
    std::shared_ptr<std::byte[]> voxels = read_nifti_voxels(path, header, *find_datatype(header.datatype));
    raw.voxels = voxels.get();
    raw.owner = std::move(voxels);
    return raw;
}

NiftiLayout read_nifti_layout(const std::filesystem::path& path) {
    const NiftiHeader header = read_nifti_header(path, false);
    NiftiLayout layout;
    layout.description = describe_nifti(header, path);
    layout.data_offset = static_cast<std::uint64_t>(header.vox_offset);
    layout.swapped = header.swapped;
    layout.compressed = header.compressed;
    return layout;
}

void write_nifti(const ImageGeometry& geometry, const EncodedVoxels& voxels, const std::filesystem::path& path) {
    // NIfTI's qform holds a rotation: the direction must be orthonormal.
    const auto& d = geometry.direction;
    for (int a = 0; a < 3; ++a) {
        for (int b = a; b < 3; ++b) {
            const double dot = d[a] * d[b] + d[3 + a] * d[3 + b] + d[6 + a] * d[6 + b];
            TESSERA_CHECK(std::abs(dot - (a == b ? 1.0 : 0.0)) < 1e-4,
                          "cannot write " << quoted(path) << ": NIfTI needs an orthonormal direction matrix, "
                                          << "and this one's columns are not unit length and perpendicular. "
                                          << "Save as .mha or .mhd, which store any direction.");
        }
    }
    const double determinant =
        d[0] * (d[4] * d[8] - d[5] * d[7]) - d[1] * (d[3] * d[8] - d[5] * d[6]) + d[2] * (d[3] * d[7] - d[4] * d[6]);
    // A left-handed grid is stored with qfac = -1: VTK reverses the slices it is given, so hand it the
    // slices reversed and a right-handed matrix for that order.
    const bool left_handed = determinant < 0;

    const std::int64_t nx = geometry.size[0], ny = geometry.size[1], nz = geometry.size[2];
    vtkNew<vtkImageData> image;
    image->SetDimensions(static_cast<int>(nx), static_cast<int>(ny), static_cast<int>(nz));
    image->SetSpacing(geometry.spacing.data());
    image->SetOrigin(0, 0, 0);
    image->AllocateScalars(vtk_type_of(voxels.scalar_type), 1);
    const std::size_t slice_bytes = static_cast<std::size_t>(nx * ny) * scalar_type_size(voxels.scalar_type);
    TESSERA_ASSERT(voxels.bytes.size() == slice_bytes * static_cast<std::size_t>(nz), "voxel buffer size");
    auto* destination = static_cast<std::byte*>(image->GetScalarPointer());
    for (std::int64_t k = 0; k < nz; ++k) {
        const std::int64_t source_k = left_handed ? nz - 1 - k : k;
        std::memcpy(destination + static_cast<std::size_t>(k) * slice_bytes,
                    voxels.bytes.data() + static_cast<std::size_t>(source_k) * slice_bytes, slice_bytes);
    }

    // LPS → RAS (negate x and y), then the matrix VTK wants for the slices it was given.
    vtkNew<vtkMatrix4x4> matrix;
    std::array<double, 3> origin = geometry.origin;
    if (left_handed) {
        for (int row = 0; row < 3; ++row)
            origin[row] += d[row * 3 + 2] * geometry.spacing[2] * static_cast<double>(nz - 1);
    }
    for (int row = 0; row < 3; ++row) {
        const double sign = row < 2 ? -1.0 : 1.0;
        for (int column = 0; column < 3; ++column) {
            const double flip = (left_handed && column == 2) ? -1.0 : 1.0;
            matrix->SetElement(row, column, sign * flip * d[row * 3 + column]);
        }
        matrix->SetElement(row, 3, sign * origin[row]);
    }

    vtkNew<vtkNIFTIImageWriter> writer;
    VtkErrorCapture capture(writer);
    writer->SetInputData(image);
    writer->SetFileName(path.c_str());  // a .gz name makes VTK compress
    writer->SetDescription("Tessera");
    writer->SetQFac(left_handed ? -1.0 : 1.0);
    writer->SetQFormMatrix(matrix);
    writer->SetSFormMatrix(matrix);
    writer->Write();
    TESSERA_CHECK(!capture.has_errors() && writer->GetErrorCode() == 0,
                  "cannot write " << quoted(path) << ": " << capture.message()
                                  << ". Check that the folder exists and is writable and the disk is not full.");
}

}  // namespace tessera::io_detail
