// FreeSurfer's MGH (.mgh) and its gzipped form (.mgz), read and written with zlib here.
//
// The format (FreeSurfer's mghRead/mghWrite, as nibabel reads it): a big-endian header of 284 bytes —
// version 1, width, height, depth, nframes, type, dof (int32 each), goodRASFlag (int16), then the
// voxel sizes (3 × float32), the direction cosines x_ras, y_ras, z_ras (9 × float32: each the RAS
// direction of one voxel axis) and c_ras (3 × float32, the RAS point at voxel dims / 2) — followed by
// width × height × depth × nframes big-endian voxels, x fastest, and optional tags (ignored here).
// Types: 0 uint8, 1 int32, 3 float32, 4 int16.
//
// Geometry: vox2ras = [Mdc · diag(sizes) | c_ras − Mdc · diag(sizes) · dims / 2] (dims / 2, not
// (dims − 1) / 2: FreeSurfer's centre); RAS becomes LPS by flipping x and y. Without goodRASFlag
// FreeSurfer assumes 1 mm coronal slices, LIA (x_ras = (−1, 0, 0), y_ras = (0, 0, −1), z_ras = (0, 1, 0):
// mri.c's ras_good_flag == 0 case) centred at 0, and so does this reader, with a warning. (nibabel 5
// assumes another default there, y toward superior.)
#include "io/raw_image.hpp"

#include "core/error.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>

namespace tessera::io_detail {

namespace {

constexpr int mgh_header_bytes = 284;

struct MghType {
    std::int32_t code;
    ScalarType scalar_type;
};
constexpr MghType mgh_types[] = {
    {0, ScalarType::U8}, {1, ScalarType::I32}, {3, ScalarType::F32}, {4, ScalarType::I16}};

struct MghHeader {
    std::array<std::int32_t, 4> dims{};  // width, height, depth, frames
    std::int32_t type = 0;
    bool good_ras = false;
    std::array<float, 3> sizes{1, 1, 1};
    std::array<float, 9> mdc{};  // x_ras, y_ras, z_ras
    std::array<float, 3> c_ras{};
};

template <class T>
T big_endian(const unsigned char* bytes) {
    std::array<unsigned char, sizeof(T)> ordered;
    std::memcpy(ordered.data(), bytes, sizeof(T));
    if constexpr (std::endian::native == std::endian::little) std::reverse(ordered.begin(), ordered.end());
    T value;
    std::memcpy(&value, ordered.data(), sizeof(T));
    return value;
}

template <class T>
void put_big_endian(std::string& out, T value) {
    std::array<unsigned char, sizeof(T)> bytes;
    std::memcpy(bytes.data(), &value, sizeof(T));
    if constexpr (std::endian::native == std::endian::little) std::reverse(bytes.begin(), bytes.end());
    out.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::string size_text(const MghHeader& header) {
    return std::to_string(header.dims[0]) + "×" + std::to_string(header.dims[1]) + "×" + std::to_string(header.dims[2]);
}

// Reads what gzread gives (a plain .mgh reads through it unchanged) into `into`; the bytes read.
std::uint64_t read_bytes(gzFile file, std::byte* into, std::uint64_t count) {
    std::uint64_t done = 0;
    while (done < count) {
        const auto chunk = static_cast<unsigned>(std::min<std::uint64_t>(std::uint64_t{1} << 28, count - done));
        const int got = gzread(file, into + done, chunk);
        if (got <= 0) break;
        done += static_cast<std::uint64_t>(got);
    }
    return done;
}

void check_stream(gzFile file, const std::filesystem::path& path) {
    int status = Z_OK;
    const std::string message = gzerror(file, &status);
    TESSERA_CHECK(status != Z_DATA_ERROR && status != Z_ERRNO,
                  quoted(path) << " could not be read (" << (status == Z_ERRNO ? std::strerror(errno) : message)
                               << "): its compressed data is damaged. Get a fresh copy.");
}

MghHeader parse_header(const std::filesystem::path& path, const unsigned char* bytes, std::uint64_t count) {
    TESSERA_CHECK(count >= mgh_header_bytes, quoted(path) << " is not an MGH volume: it holds " << count
                                                          << " bytes, less than the format's 284-byte header. Is it "
                                                             "truncated, or another kind of file?");
    const auto version = big_endian<std::int32_t>(bytes);
    TESSERA_CHECK(version == 1, quoted(path) << " is not an MGH volume: its first word (the format version) is " << version
                                             << ", where FreeSurfer writes 1. Is it another kind of file saved as "
                                             << full_extension(path) << "?");
    MghHeader header;
    for (int i = 0; i < 4; ++i) header.dims[static_cast<std::size_t>(i)] = big_endian<std::int32_t>(bytes + 4 + 4 * i);
    header.type = big_endian<std::int32_t>(bytes + 20);
    header.good_ras = big_endian<std::int16_t>(bytes + 28) > 0;
    for (int i = 0; i < 3; ++i) header.sizes[static_cast<std::size_t>(i)] = big_endian<float>(bytes + 30 + 4 * i);
    for (int i = 0; i < 9; ++i) header.mdc[static_cast<std::size_t>(i)] = big_endian<float>(bytes + 42 + 4 * i);
    for (int i = 0; i < 3; ++i) header.c_ras[static_cast<std::size_t>(i)] = big_endian<float>(bytes + 78 + 4 * i);
    for (int axis = 0; axis < 3; ++axis) {
        TESSERA_CHECK(header.dims[static_cast<std::size_t>(axis)] >= 1,
                      quoted(path) << " has a damaged MGH header: its size is " << size_text(header)
                                   << " (every extent must be at least 1). Get a fresh copy.");
    }
    TESSERA_CHECK(header.dims[3] == 1, quoted(path) << " holds " << header.dims[3]
                                                    << " frames (a 4D volume): Tessera reads one 3D volume; extract "
                                                       "one frame first (e.g. mri_convert --frame 0).");
    const auto type = std::find_if(std::begin(mgh_types), std::end(mgh_types),
                                   [&](const MghType& t) { return t.code == header.type; });
    TESSERA_CHECK(type != std::end(mgh_types), quoted(path) << " stores voxels of MGH type " << header.type
                                                            << ", which Tessera does not read: it reads types 0 (uint8), "
                                                               "1 (int32), 3 (float32) and 4 (int16).");
    if (header.good_ras) {
        for (int i = 0; i < 3; ++i) {
            const float size = header.sizes[static_cast<std::size_t>(i)];
            TESSERA_CHECK(std::isfinite(size) && size > 0, quoted(path) << " has a damaged MGH header: voxel size "
                                                                        << i << " is " << size << " mm. Get a fresh copy.");
        }
        for (float value : header.mdc) {
            TESSERA_CHECK(std::isfinite(value), quoted(path) << " has a damaged MGH header: a direction cosine is " << value);
        }
        for (int axis = 0; axis < 3; ++axis) {
            double norm = 0;
            for (int c = 0; c < 3; ++c) norm += std::pow(header.mdc[static_cast<std::size_t>(3 * axis + c)], 2);
            TESSERA_CHECK(std::abs(std::sqrt(norm) - 1) < 1e-3, quoted(path) << " has a damaged MGH header: the direction of axis "
                                                                             << axis << " has length " << std::sqrt(norm)
                                                                             << " (direction cosines have length 1).");
        }
        for (float value : header.c_ras) {
            TESSERA_CHECK(std::isfinite(value), quoted(path) << " has a damaged MGH header: its centre c_ras holds " << value);
        }
    }
    return header;
}

ScalarType scalar_type_of(std::int32_t code) {
    for (const MghType& type : mgh_types) {
        if (type.code == code) return type.scalar_type;
    }
    return ScalarType::F32;
}

}  // namespace

RawImage read_mgh(const std::filesystem::path& path) {
    gzFile file = gzopen(path.c_str(), "rb");
    TESSERA_CHECK(file != nullptr, "cannot open " << quoted(path) << ": " << std::strerror(errno));
    struct Closer {
        gzFile file;
        ~Closer() { gzclose(file); }
    } closer{file};
    gzbuffer(file, 1 << 18);
    std::array<unsigned char, mgh_header_bytes> bytes{};
    const std::uint64_t header_read = read_bytes(file, reinterpret_cast<std::byte*>(bytes.data()), bytes.size());
    check_stream(file, path);
    const MghHeader header = parse_header(path, bytes.data(), header_read);

    const ScalarType scalar_type = scalar_type_of(header.type);
    const std::uint64_t element_bytes = scalar_type_size(scalar_type);
    std::uint64_t num_voxels = 1;
    for (int axis = 0; axis < 3; ++axis) num_voxels *= static_cast<std::uint64_t>(header.dims[static_cast<std::size_t>(axis)]);
    check_volume_budget(path, size_text(header), num_voxels, element_bytes);
    const std::uint64_t data_bytes = num_voxels * element_bytes;
    if (gzdirect(file) == 1) {  // uncompressed: the file's size says whether the voxels are all there
        std::error_code error;
        const std::uint64_t file_bytes = std::filesystem::file_size(path, error);
        TESSERA_CHECK(!error && file_bytes >= mgh_header_bytes + data_bytes,
                      quoted(path) << " is truncated: its header promises " << size_text(header) << " "
                                   << scalar_type_name(scalar_type) << " voxels (" << data_bytes << " bytes after the header) but "
                                   << "the file holds " << file_bytes << " bytes. Get a complete copy.");
    }
    auto voxels = std::make_shared_for_overwrite<std::byte[]>(static_cast<std::size_t>(data_bytes));
    const std::uint64_t done = read_bytes(file, voxels.get(), data_bytes);
    check_stream(file, path);
    TESSERA_CHECK(done == data_bytes, quoted(path) << " is truncated: its header promises " << size_text(header) << " "
                                                   << scalar_type_name(scalar_type) << " voxels (" << data_bytes
                                                   << " bytes) but the data ends after " << done << ". Get a complete copy.");
    if constexpr (std::endian::native == std::endian::little) swap_byte_order(voxels.get(), num_voxels, element_bytes);

    RawImage raw;
    ImageGeometry& geometry = raw.geometry;
    for (int axis = 0; axis < 3; ++axis) geometry.size[static_cast<std::size_t>(axis)] = header.dims[static_cast<std::size_t>(axis)];
    std::array<double, 9> mdc{-1, 0, 0, 0, 0, -1, 0, 1, 0};  // FreeSurfer's default: coronal slices
    std::array<double, 3> sizes{1, 1, 1}, c_ras{0, 0, 0};
    if (header.good_ras) {
        for (std::size_t i = 0; i < 9; ++i) mdc[i] = header.mdc[i];
        for (std::size_t i = 0; i < 3; ++i) {
            sizes[i] = header.sizes[i];
            c_ras[i] = header.c_ras[i];
        }
    } else {
        raw.warnings.push_back("the MGH header has no RAS geometry (goodRASFlag 0): FreeSurfer's default, 1 mm coronal "
                               "slices centred at 0, is assumed");
    }
    // vox2ras: column `axis` is mdc's axis row times its size; P0 = c_ras − Σ column · dims / 2.
    std::array<double, 3> origin_ras = c_ras;
    for (std::size_t axis = 0; axis < 3; ++axis) {
        for (std::size_t c = 0; c < 3; ++c) {
            origin_ras[c] -= mdc[3 * axis + c] * sizes[axis] * static_cast<double>(header.dims[axis]) / 2.0;
        }
    }
    const double flip[3] = {-1, -1, 1};  // RAS → LPS
    for (std::size_t axis = 0; axis < 3; ++axis) {
        geometry.spacing[axis] = sizes[axis];
        geometry.origin[axis] = flip[axis] * origin_ras[axis] + 0.0;  // + 0.0: no −0
        for (std::size_t c = 0; c < 3; ++c) geometry.direction[c * 3 + axis] = flip[c] * mdc[3 * axis + c] + 0.0;
    }
    raw.scalar_type = scalar_type;
    raw.source_scalar_type = std::string(scalar_type_name(scalar_type));
    raw.voxels = voxels.get();
    raw.owner = std::shared_ptr<const void>(voxels, voxels.get());
    return raw;
}

void write_mgh(const ImageGeometry& geometry, const EncodedVoxels& voxels, const std::filesystem::path& path) {
    // volume_io chose a type MGH stores (its stored_type): uint8, int16, int32 or float32.
    const auto type = std::find_if(std::begin(mgh_types), std::end(mgh_types),
                                   [&](const MghType& t) { return t.scalar_type == voxels.scalar_type; });
    TESSERA_ASSERT(type != std::end(mgh_types), "MGH cannot store " << scalar_type_name(voxels.scalar_type) << " voxels");
    const std::int32_t code = type->code;

    // The geometry in RAS: direction columns and origin with x and y flipped.
    const double flip[3] = {-1, -1, 1};
    std::string header;
    put_big_endian<std::int32_t>(header, 1);
    for (std::size_t axis = 0; axis < 3; ++axis) put_big_endian<std::int32_t>(header, static_cast<std::int32_t>(geometry.size[axis]));
    put_big_endian<std::int32_t>(header, 1);  // frames
    put_big_endian<std::int32_t>(header, code);
    put_big_endian<std::int32_t>(header, 0);  // dof
    put_big_endian<std::int16_t>(header, 1);  // goodRASFlag
    for (std::size_t axis = 0; axis < 3; ++axis) put_big_endian<float>(header, static_cast<float>(geometry.spacing[axis]));
    for (std::size_t axis = 0; axis < 3; ++axis) {
        for (std::size_t c = 0; c < 3; ++c) put_big_endian<float>(header, static_cast<float>(flip[c] * geometry.direction[c * 3 + axis]));
    }
    for (std::size_t c = 0; c < 3; ++c) {
        double centre = flip[c] * geometry.origin[c];
        for (std::size_t axis = 0; axis < 3; ++axis) {
            centre += flip[c] * geometry.direction[c * 3 + axis] * geometry.spacing[axis] * static_cast<double>(geometry.size[axis]) / 2.0;
        }
        put_big_endian<float>(header, static_cast<float>(centre));
    }
    header.resize(mgh_header_bytes, '\0');

    std::string data(reinterpret_cast<const char*>(voxels.bytes.data()), voxels.bytes.size());  // big-endian below
    swap_byte_order(reinterpret_cast<std::byte*>(data.data()), data.size() / scalar_type_size(voxels.scalar_type),
                    scalar_type_size(voxels.scalar_type));

    const bool compressed = full_extension(path) == ".mgz";
    gzFile file = gzopen(path.c_str(), compressed ? "wb6" : "wbT");
    TESSERA_CHECK(file != nullptr, "cannot write " << quoted(path) << ": " << std::strerror(errno)
                                                   << ". Check that the folder exists and is writable.");
    bool written = gzwrite(file, header.data(), static_cast<unsigned>(header.size())) == static_cast<int>(header.size());
    for (std::size_t done = 0; written && done < data.size();) {  // gzwrite takes at most 4 GiB at once
        const auto chunk = static_cast<unsigned>(std::min<std::size_t>(std::size_t{1} << 28, data.size() - done));
        written = gzwrite(file, data.data() + done, chunk) == static_cast<int>(chunk);
        done += chunk;
    }
    const bool closed = gzclose(file) == Z_OK;
    TESSERA_CHECK(written && closed, "cannot write " << quoted(path) << ": " << std::strerror(errno) << " (is the disk full?)");
}

}  // namespace tessera::io_detail
