// Helpers shared by test_volume_io.cpp and test_volume_io_errors.cpp: where the Debian packages put
// real data, scratch folders, byte patching, and message checks.
#pragma once

#include "support/scratch_dir.hpp"

#include "core/error.hpp"
#include "io/volume_io.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numbers>
#include <string>
#include <vector>

#include <unistd.h>

namespace tessera::test {

namespace fs = std::filesystem;

// insighttoolkit5-examples: real MRI volumes and slices (Apache-2.0).
inline fs::path itk_data(const std::string& name) {
    return fs::path("/usr/share/doc/insighttoolkit5-examples/examples/Data") / name;
}
// python3-pydicom: small DICOM files.
inline fs::path pydicom_data(const std::string& name) {
    return fs::path("/usr/lib/python3/dist-packages/pydicom/data/test_files") / name;
}

#define TESSERA_REQUIRE_DATA(path, package)                                                    \
    do {                                                                                       \
        if (!std::filesystem::exists(path)) {                                                  \
            GTEST_SKIP() << (path) << " is missing: install the Debian package " << (package); \
        }                                                                                      \
    } while (false)

// ScratchDir: tests/support/scratch_dir.hpp.

inline std::vector<unsigned char> read_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const fs::path& path, const std::vector<unsigned char>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_text(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
}

// Little-endian field access (the test machines are little-endian, like the files we write).
template <class T>
void put(std::vector<unsigned char>& bytes, std::size_t offset, T value) {
    std::memcpy(bytes.data() + offset, &value, sizeof(T));
}
template <class T>
T get(const std::vector<unsigned char>& bytes, std::size_t offset) {
    T value;
    std::memcpy(&value, bytes.data() + offset, sizeof(T));
    return value;
}

// The message of the tessera::Error `action` throws; records a failure if it throws nothing.
inline std::string error_message(const std::function<void()>& action) {
    try {
        action();
    } catch (const Error& error) {
        return error.what();
    }
    ADD_FAILURE() << "expected a tessera::Error, nothing was thrown";
    return "";
}

#define EXPECT_CONTAINS(text, part) \
    EXPECT_NE(std::string(text).find(part), std::string::npos) << "expected \"" << (part) << "\" in: " << (text)

// Rotation about a unit axis (Rodrigues), row-major.
inline std::array<double, 9> rotation(std::array<double, 3> axis, double degrees) {
    const double norm = std::sqrt(axis[0] * axis[0] + axis[1] * axis[1] + axis[2] * axis[2]);
    for (double& value : axis) value /= norm;
    const double angle = degrees * std::numbers::pi / 180.0, c = std::cos(angle), s = std::sin(angle), t = 1 - c;
    const double x = axis[0], y = axis[1], z = axis[2];
    return {t * x * x + c,     t * x * y - s * z, t * x * z + s * y, t * x * y + s * z, t * y * y + c,
            t * y * z - s * x, t * x * z - s * y, t * y * z + s * x, t * z * z + c};
}

// Anisotropic spacing, an origin away from zero and a direction that is no axis permutation.
inline ImageGeometry oblique_geometry(bool left_handed = false) {
    ImageGeometry geometry;
    geometry.size = {7, 5, 4};
    geometry.spacing = {0.75, 1.25, 3.5};
    geometry.origin = {-120.25, 33.5, 17.125};
    geometry.direction = rotation({1, 2, 3}, 20);
    if (left_handed) {
        for (int row = 0; row < 3; ++row) geometry.direction[row * 3 + 2] *= -1;
    }
    return geometry;
}

// Voxel values that identify their index: i + 10 j + 100 k + fraction.
inline Volume ramp_volume(const ImageGeometry& geometry, float fraction = 0.25f) {
    Volume volume = make_volume(geometry);
    float* values = volume.voxels.data<float>();
    for (std::int64_t k = 0; k < geometry.size[2]; ++k)
        for (std::int64_t j = 0; j < geometry.size[1]; ++j)
            for (std::int64_t i = 0; i < geometry.size[0]; ++i)
                values[(k * geometry.size[1] + j) * geometry.size[0] + i] =
                    static_cast<float>(i + 10 * j + 100 * k) + fraction;
    return volume;
}

inline void expect_same_geometry(const ImageGeometry& expected, const ImageGeometry& actual, double tolerance) {
    EXPECT_EQ(expected.size, actual.size);
    for (int axis = 0; axis < 3; ++axis) {
        EXPECT_NEAR(expected.spacing[axis], actual.spacing[axis], tolerance) << "spacing " << axis;
        EXPECT_NEAR(expected.origin[axis], actual.origin[axis], tolerance) << "origin " << axis;
    }
    for (int index = 0; index < 9; ++index) {
        EXPECT_NEAR(expected.direction[index], actual.direction[index], tolerance) << "direction " << index;
    }
}

// A NIfTI-1 single file written field by field, as the standard lays it out.
struct Nifti1Spec {
    std::array<std::int16_t, 8> dim{3, 2, 2, 3, 1, 1, 1, 1};
    std::int16_t datatype = 4;  // int16
    std::int16_t bitpix = 16;
    std::array<float, 8> pixdim{1, 1, 2, 3, 0, 0, 0, 0};  // pixdim[0] is qfac
    float vox_offset = 352;
    float scl_slope = 0;
    float scl_inter = 0;
    std::int16_t qform_code = 1;
    std::int16_t sform_code = 0;
    std::array<float, 3> quatern{0, 0, 0};
    std::array<float, 3> qoffset{0, 0, 0};
    std::array<float, 12> srow{};
};

inline std::vector<unsigned char> nifti1_file(const Nifti1Spec& spec, const std::vector<unsigned char>& data) {
    std::vector<unsigned char> bytes(352 + data.size(), 0);
    put<std::int32_t>(bytes, 0, 348);
    for (int index = 0; index < 8; ++index) {
        put<std::int16_t>(bytes, 40 + 2 * index, spec.dim[index]);
        put<float>(bytes, 76 + 4 * index, spec.pixdim[index]);
    }
    put<std::int16_t>(bytes, 70, spec.datatype);
    put<std::int16_t>(bytes, 72, spec.bitpix);
    put<float>(bytes, 108, spec.vox_offset);
    put<float>(bytes, 112, spec.scl_slope);
    put<float>(bytes, 116, spec.scl_inter);
    put<std::int16_t>(bytes, 252, spec.qform_code);
    put<std::int16_t>(bytes, 254, spec.sform_code);
    for (int index = 0; index < 3; ++index) {
        put<float>(bytes, 256 + 4 * index, spec.quatern[index]);
        put<float>(bytes, 268 + 4 * index, spec.qoffset[index]);
    }
    for (int index = 0; index < 12; ++index) put<float>(bytes, 280 + 4 * index, spec.srow[index]);
    std::memcpy(bytes.data() + 344, "n+1", 4);
    if (!data.empty()) std::memcpy(bytes.data() + 352, data.data(), data.size());
    return bytes;
}

// int16 voxels k*100 + j*10 + i for a [3][2][2] grid, little-endian.
inline std::vector<unsigned char> index_coded_int16(int nx = 2, int ny = 2, int nz = 3) {
    std::vector<unsigned char> data;
    for (int k = 0; k < nz; ++k)
        for (int j = 0; j < ny; ++j)
            for (int i = 0; i < nx; ++i) {
                const auto value = static_cast<std::int16_t>(k * 100 + j * 10 + i);
                data.push_back(static_cast<unsigned char>(value & 0xff));
                data.push_back(static_cast<unsigned char>((value >> 8) & 0xff));
            }
    return data;
}

}  // namespace tessera::test
