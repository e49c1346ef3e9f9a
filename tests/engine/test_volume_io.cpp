// Reading real files from Debian packages, and round trips through every format Tessera writes.
#include "io/volume_io.hpp"

#include "volume_io_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <numbers>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#if __has_include(<opencv2/imgcodecs.hpp>)
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#define TESSERA_TEST_HAS_OPENCV 1
#endif

using namespace tessera;
using namespace tessera::test;

namespace {

constexpr const char* itk_package = "insighttoolkit5-examples";
constexpr const char* pydicom_package = "python3-pydicom";

double voxel_sum(const Volume& volume) {
    double sum = 0;
    const float* values = volume.voxels.data<float>();
    for (std::int64_t index = 0; index < volume.voxels.num_elements(); ++index) sum += values[index];
    return sum;
}

bool same_voxels(const Volume& a, const Volume& b) {
    if (a.voxels.shape() != b.voxels.shape()) return false;
    return std::memcmp(a.voxels.raw_data(), b.voxels.raw_data(), a.voxels.num_bytes()) == 0;
}

// ---- DICOM patching: explicit VR little endian files only --------------------------------------

// Offset of the value of element (group, number) with the given VR, and its length.
std::pair<std::size_t, std::size_t> find_element(const std::vector<unsigned char>& bytes, std::uint16_t group,
                                                 std::uint16_t number, const char* vr) {
    const unsigned char tag[6] = {static_cast<unsigned char>(group & 0xff),  static_cast<unsigned char>(group >> 8),
                                  static_cast<unsigned char>(number & 0xff), static_cast<unsigned char>(number >> 8),
                                  static_cast<unsigned char>(vr[0]),         static_cast<unsigned char>(vr[1])};
    for (std::size_t at = 132; at + 12 <= bytes.size(); ++at) {
        if (std::memcmp(bytes.data() + at, tag, 6) != 0) continue;
        if (std::string(vr) == "OW" || std::string(vr) == "OB") return {at + 12, get<std::uint32_t>(bytes, at + 8)};
        return {at + 8, get<std::uint16_t>(bytes, at + 6)};
    }
    ADD_FAILURE() << "element not found";
    return {0, 0};
}

void replace_text(std::vector<unsigned char>& bytes, std::pair<std::size_t, std::size_t> element, std::string text) {
    ASSERT_LE(text.size(), element.second);
    text.resize(element.second, ' ');
    std::memcpy(bytes.data() + element.first, text.data(), text.size());
}

// ---- a baseline TIFF, written field by field -----------------------------------------------------

std::vector<unsigned char> tiff_uint16(int width, int height, const std::vector<std::vector<std::uint16_t>>& pages) {
    std::vector<unsigned char> bytes = {'I', 'I', 42, 0, 0, 0, 0, 0};
    std::size_t next_pointer = 4;  // where the offset of the next IFD goes
    for (const std::vector<std::uint16_t>& page : pages) {
        const auto data_offset = static_cast<std::uint32_t>(bytes.size());
        for (std::uint16_t value : page) {
            bytes.push_back(static_cast<unsigned char>(value & 0xff));
            bytes.push_back(static_cast<unsigned char>(value >> 8));
        }
        const auto ifd_offset = static_cast<std::uint32_t>(bytes.size());
        put<std::uint32_t>(bytes, next_pointer, ifd_offset);
        struct Entry {
            std::uint16_t tag, type;
            std::uint32_t value;
        };
        const auto data_bytes = static_cast<std::uint32_t>(page.size() * 2);
        const Entry entries[] = {
            {256, 3, static_cast<std::uint32_t>(width)},   // ImageWidth
            {257, 3, static_cast<std::uint32_t>(height)},  // ImageLength
            {258, 3, 16},                                  // BitsPerSample
            {259, 3, 1},                                   // Compression: none
            {262, 3, 1},                                   // PhotometricInterpretation: BlackIsZero
            {273, 4, data_offset},                         // StripOffsets
            {277, 3, 1},                                   // SamplesPerPixel
            {278, 3, static_cast<std::uint32_t>(height)},  // RowsPerStrip
            {279, 4, data_bytes},                          // StripByteCounts
        };
        const std::size_t start = bytes.size();
        bytes.resize(start + 2 + sizeof entries / sizeof entries[0] * 12 + 4, 0);
        put<std::uint16_t>(bytes, start, static_cast<std::uint16_t>(sizeof entries / sizeof entries[0]));
        std::size_t at = start + 2;
        for (const Entry& entry : entries) {
            put<std::uint16_t>(bytes, at, entry.tag);
            put<std::uint16_t>(bytes, at + 2, entry.type);
            put<std::uint32_t>(bytes, at + 4, 1);
            if (entry.type == 3) {
                put<std::uint16_t>(bytes, at + 8, static_cast<std::uint16_t>(entry.value));
            } else {
                put<std::uint32_t>(bytes, at + 8, entry.value);
            }
            at += 12;
        }
        next_pointer = at;  // stays 0 for the last page
    }
    return bytes;
}

// ---- a baseline grayscale JPEG of flat 8×8 blocks, written field by field --------------------------

// Each block holds one value, so only DC coefficients are coded: with a quantisation table of ones the
// decoder's inverse DCT gives back the value exactly.
std::vector<unsigned char> flat_block_jpeg(int blocks_wide, int blocks_high, const std::vector<int>& block_values) {
    std::vector<unsigned char> bytes = {0xff, 0xd8};  // SOI
    auto segment = [&](unsigned char marker, const std::vector<unsigned char>& body) {
        bytes.push_back(0xff);
        bytes.push_back(marker);
        const std::size_t length = body.size() + 2;
        bytes.push_back(static_cast<unsigned char>(length >> 8));
        bytes.push_back(static_cast<unsigned char>(length & 0xff));
        bytes.insert(bytes.end(), body.begin(), body.end());
    };
    std::vector<unsigned char> quantisation(65, 1);
    quantisation[0] = 0;  // 8-bit table 0
    segment(0xdb, quantisation);
    const int width = blocks_wide * 8, height = blocks_high * 8;
    segment(0xc0, {8, static_cast<unsigned char>(height >> 8), static_cast<unsigned char>(height & 0xff),
                   static_cast<unsigned char>(width >> 8), static_cast<unsigned char>(width & 0xff), 1, 1, 0x11, 0});
    // DC table: categories 0..11, all 4-bit codes (category c is code c). AC table: end-of-block only.
    std::vector<unsigned char> dc_table = {0x00, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    for (unsigned char category = 0; category < 12; ++category) dc_table.push_back(category);
    segment(0xc4, dc_table);
    segment(0xc4, {0x10, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00});
    segment(0xda, {1, 1, 0x00, 0, 63, 0});

    std::vector<unsigned char> scan;
    unsigned int accumulator = 0;
    int count = 0;
    auto put_bits = [&](unsigned int value, int bits) {
        for (int bit = bits - 1; bit >= 0; --bit) {
            accumulator = (accumulator << 1) | ((value >> bit) & 1u);
            if (++count == 8) {
                scan.push_back(static_cast<unsigned char>(accumulator));
                if (accumulator == 0xff) scan.push_back(0);  // byte stuffing
                accumulator = 0;
                count = 0;
            }
        }
    };
    int previous = 0;
    for (const int value : block_values) {
        const int dc = 8 * (value - 128);
        const int difference = dc - previous;
        previous = dc;
        int category = 0;
        while ((1 << category) <= std::abs(difference)) ++category;
        put_bits(static_cast<unsigned int>(category), 4);
        if (category > 0) {
            put_bits(static_cast<unsigned int>(difference >= 0 ? difference : difference + (1 << category) - 1),
                     category);
        }
        put_bits(0, 1);  // end of block
    }
    if (count > 0) put_bits(0x7f, 8 - count);  // pad with ones
    bytes.insert(bytes.end(), scan.begin(), scan.end());
    bytes.push_back(0xff);
    bytes.push_back(0xd9);  // EOI
    return bytes;
}

}  // namespace

// ---- geometry ----------------------------------------------------------------------------------

TEST(ImageGeometry, WorldAndContinuousIndexAreInverse) {
    const ImageGeometry geometry = oblique_geometry(true);
    const std::array<double, 3> world = geometry.world_of(2.5, -1.0, 3.25);
    const std::array<double, 3> index = geometry.continuous_index_of(world);
    EXPECT_NEAR(index[0], 2.5, 1e-12);
    EXPECT_NEAR(index[1], -1.0, 1e-12);
    EXPECT_NEAR(index[2], 3.25, 1e-12);
    const std::array<double, 3> origin = geometry.world_of(0, 0, 0);
    for (int axis = 0; axis < 3; ++axis) EXPECT_DOUBLE_EQ(origin[axis], geometry.origin[axis]);
}

TEST(ImageGeometry, DescribeAndSameGrid) {
    ImageGeometry a;
    a.size = {128, 128, 62};
    a.spacing = {2, 2, 3};
    EXPECT_EQ(describe(a), "128×128×62 voxels, 2×2×3 mm");
    ImageGeometry b = a;
    b.origin[0] += 1e-6;
    EXPECT_TRUE(same_grid(a, b));
    b.origin[0] += 0.5;
    EXPECT_FALSE(same_grid(a, b));
    EXPECT_NO_THROW(check_same_grid(a, a, "labels.nii.gz"));
}

TEST(LabelMap, PresentLabelsAreSortedAndUnique) {
    ImageGeometry geometry;
    geometry.size = {4, 3, 2};
    LabelMap labels = make_label_map(geometry);
    labels.labels.at<std::int32_t>({1, 2, 3}) = 7;
    labels.labels.at<std::int32_t>({0, 1, 1}) = -2;
    labels.labels.at<std::int32_t>({1, 0, 0}) = 7;
    EXPECT_EQ(labels.present_labels(), (std::vector<std::int32_t>{-2, 0, 7}));
}

// ---- format detection ------------------------------------------------------------------------

TEST(VolumeIo, DetectsFormatsByExtensionAndFolders) {
    ScratchDir scratch;
    EXPECT_EQ(detect_volume_format("a/b/head.nii"), VolumeFormat::Nifti);
    EXPECT_EQ(detect_volume_format("HEAD.NII.GZ"), VolumeFormat::Nifti);
    EXPECT_EQ(detect_volume_format("x.mha"), VolumeFormat::MetaImage);
    EXPECT_EQ(detect_volume_format("x.mhd"), VolumeFormat::MetaImage);
    EXPECT_EQ(detect_volume_format("x.dcm"), VolumeFormat::DicomSeries);
    EXPECT_EQ(detect_volume_format("x.png"), VolumeFormat::Image2D);
    EXPECT_EQ(detect_volume_format("x.JPEG"), VolumeFormat::Image2D);
    EXPECT_EQ(detect_volume_format(scratch.path()), VolumeFormat::DicomSeries);

    const std::vector<std::uint16_t> page(6, 1);
    write_bytes(scratch / "one.tif", tiff_uint16(3, 2, {page}));
    write_bytes(scratch / "three.tiff", tiff_uint16(3, 2, {page, page, page}));
    EXPECT_EQ(detect_volume_format(scratch / "one.tif"), VolumeFormat::Image2D);
    EXPECT_EQ(detect_volume_format(scratch / "three.tiff"), VolumeFormat::TiffStack);

    const std::vector<std::string> extensions = supported_volume_extensions();
    for (const char* extension :
         {".nii", ".nii.gz", ".mha", ".mhd", ".dcm", ".tif", ".tiff", ".png", ".jpg", ".jpeg"}) {
        EXPECT_NE(std::find(extensions.begin(), extensions.end(), extension), extensions.end()) << extension;
    }
}

// ---- real files ------------------------------------------------------------------------------

TEST(VolumeIoRealData, NiftiHeadMriHasItsGridAndValues) {
    const auto path = itk_data("KmeansTest_T1UCharRaw.nii.gz");
    TESSERA_REQUIRE_DATA(path, itk_package);
    const Volume mri = read_volume(path);
    EXPECT_EQ(mri.geometry.size, (std::array<std::int64_t, 3>{128, 128, 62}));
    EXPECT_EQ(mri.geometry.spacing, (std::array<double, 3>{2, 2, 3}));
    EXPECT_EQ(mri.source_scalar_type, "int16");
    EXPECT_EQ(mri.source_path, path.string());
    EXPECT_EQ(mri.voxels.shape(), (Shape{62, 128, 128}));
    // The file's affine (srow): x = -2 i, y = 3 k - 254, z = 2 j in RAS; in LPS i → +x, j → +z, k → -y.
    expect_same_geometry(ImageGeometry{{128, 128, 62}, {2, 2, 3}, {0, 254, 0}, {1, 0, 0, 0, 0, -1, 0, 1, 0}},
                         mri.geometry, 1e-9);
    // Values as decoded independently from the file's bytes.
    EXPECT_EQ(voxel_sum(mri), 19533798.0);
    EXPECT_EQ(mri.value_at(64, 64, 31), 97.0f);
    EXPECT_EQ(mri.value_at(10, 100, 5), 0.0f);
}

TEST(VolumeIoRealData, SkullStripLabelsLieOnTheMriGrid) {
    const auto image_path = itk_data("KmeansTest_T1UCharRaw.nii.gz");
    const auto labels_path = itk_data("KmeansTest_T1RawSkullStrip.nii.gz");
    TESSERA_REQUIRE_DATA(image_path, itk_package);
    TESSERA_REQUIRE_DATA(labels_path, itk_package);
    const Volume mri = read_volume(image_path);
    const LabelMap labels = read_label_map(labels_path);
    EXPECT_EQ(labels.present_labels(), (std::vector<std::int32_t>{0, 4, 5, 6}));
    EXPECT_TRUE(same_grid(mri.geometry, labels.geometry));
    EXPECT_NO_THROW(check_same_grid(mri.geometry, labels.geometry, labels_path.string()));
    EXPECT_EQ(labels.label_at(64, 64, 31), 6);
    std::int64_t brain = 0;
    for (std::int64_t index = 0; index < labels.labels.num_elements(); ++index) {
        brain += labels.labels.data<std::int32_t>()[index] != 0;
    }
    EXPECT_EQ(brain, 126 + 15667 + 112679);
}

TEST(VolumeIoRealData, NiftiQformOnlyMatchesTheAffine) {
    // The MRI's header with its sform dropped: the quaternion (0, √½, √½), stored as floats, alone
    // gives the same grid (a² = 1 - b² - c² - d² is rounding noise, taken as 0 as niftilib does).
    const auto path = itk_data("KmeansTest_T1UCharRaw.nii.gz");
    TESSERA_REQUIRE_DATA(path, itk_package);
    ScratchDir scratch;
    Nifti1Spec spec;
    spec.dim = {3, 4, 4, 3, 1, 1, 1, 1};
    spec.pixdim = {1, 2, 2, 3, 0, 0, 0, 0};
    spec.quatern = {0.0f, 0.70710677f, 0.70710677f};
    spec.qoffset = {0, -254, 0};
    write_bytes(scratch / "qform.nii", nifti1_file(spec, index_coded_int16(4, 4, 3)));
    const Volume volume = read_volume(scratch / "qform.nii");
    expect_same_geometry(ImageGeometry{{4, 4, 3}, {2, 2, 3}, {0, 254, 0}, {1, 0, 0, 0, 0, -1, 0, 1, 0}},
                         volume.geometry, 1e-6);
    EXPECT_EQ(volume.value_at(3, 2, 1), 123.0f);
}

TEST(VolumeIoRealData, MetaImageThreeSlices) {
    const auto path = itk_data("BrainProtonDensity3Slices.mha");
    TESSERA_REQUIRE_DATA(path, itk_package);
    const Volume volume = read_volume(path);
    expect_same_geometry(ImageGeometry{{181, 217, 3}, {1, 1, 1}, {0, 0, 0}, {1, 0, 0, 0, 1, 0, 0, 0, 1}},
                         volume.geometry, 0);
    EXPECT_EQ(volume.source_scalar_type, "uint8");
    EXPECT_EQ(voxel_sum(volume), 14725708.0);
    EXPECT_EQ(volume.value_at(90, 100, 1), 230.0f);
    EXPECT_EQ(volume.value_at(20, 10, 2), 6.0f);
}

TEST(VolumeIoRealData, MetaImageDirectionPlus30IsA30DegreeRotation) {
    const auto plain_path = itk_data("BrainProtonDensitySliceBorder20.mhd");
    const auto plus_path = itk_data("BrainProtonDensitySliceBorder20DirectionPlus30.mhd");
    const auto minus_path = itk_data("BrainProtonDensitySliceBorder20DirectionMinus30.mhd");
    for (const auto& path : {plain_path, plus_path, minus_path}) TESSERA_REQUIRE_DATA(path, itk_package);

    const Volume plain = read_volume(plain_path);
    EXPECT_EQ(plain.geometry.size, (std::array<std::int64_t, 3>{221, 257, 1}));
    EXPECT_EQ(plain.geometry.direction, (std::array<double, 9>{1, 0, 0, 0, 1, 0, 0, 0, 1}));
    EXPECT_EQ(voxel_sum(plain), 4861905.0);
    EXPECT_EQ(plain.value_at(110, 100, 0), 227.0f);

    // Same voxels (stored zlib-compressed), rotated by +30° about z: i → (cos, sin), j → (-sin, cos).
    const Volume plus = read_volume(plus_path);
    EXPECT_TRUE(same_voxels(plain, plus));
    const double c = std::cos(std::numbers::pi / 6), s = std::sin(std::numbers::pi / 6);
    expect_same_geometry(ImageGeometry{{221, 257, 1}, {1, 1, 1}, {0, 0, 0}, {c, -s, 0, s, c, 0, 0, 0, 1}},
                         plus.geometry, 1e-7);
    const double angle = std::atan2(plus.geometry.direction[3], plus.geometry.direction[0]) * 180 / std::numbers::pi;
    EXPECT_NEAR(angle, 30.0, 1e-5);

    const Volume minus = read_volume(minus_path);
    EXPECT_NEAR(std::atan2(minus.geometry.direction[3], minus.geometry.direction[0]) * 180 / std::numbers::pi, -30.0,
                1e-5);
}

TEST(VolumeIoRealData, PngSliceIsA2dImage) {
    const auto path = itk_data("BrainProtonDensitySlice.png");
    TESSERA_REQUIRE_DATA(path, itk_package);
    EXPECT_EQ(detect_volume_format(path), VolumeFormat::Image2D);
    const Volume slice = read_volume(path);
    expect_same_geometry(ImageGeometry{{181, 217, 1}, {1, 1, 1}, {0, 0, 0}, {1, 0, 0, 0, 1, 0, 0, 0, 1}},
                         slice.geometry, 0);
    EXPECT_TRUE(slice.geometry.is_2d());
    EXPECT_EQ(slice.source_scalar_type, "uint8");
    // A gray palette PNG: luminance is the palette value.
    EXPECT_EQ(voxel_sum(slice), 4860107.0);
    EXPECT_EQ(slice.value_at(90, 100, 0), 189.0f);
    EXPECT_EQ(slice.value_at(20, 10, 0), 5.0f);
}

TEST(VolumeIoRealData, DicomCtSliceAsAOneSliceSeries) {
    const auto source = pydicom_data("CT_small.dcm");
    TESSERA_REQUIRE_DATA(source, pydicom_package);
    ScratchDir scratch;
    std::filesystem::copy_file(source, scratch / "CT_small.dcm");
    write_text(scratch / "README.txt", "not DICOM, skipped");
    EXPECT_EQ(detect_volume_format(scratch.path()), VolumeFormat::DicomSeries);
    const Volume ct = read_volume(scratch.path());
    // Header: 128×128, Pixel Spacing 0.661468, Slice Thickness 5, Image Position
    // (-158.135803, -179.035797, -75.699997), axial orientation, Rescale Intercept -1024.
    expect_same_geometry(ImageGeometry{{128, 128, 1},
                                       {0.661468, 0.661468, 5},
                                       {-158.135803, -179.035797, -75.699997},
                                       {1, 0, 0, 0, 1, 0, 0, 0, 1}},
                         ct.geometry, 1e-6);
    EXPECT_EQ(ct.source_scalar_type, "int16");
    // Stored top-left 175, bottom-left 959, top-right 216; plus the intercept.
    EXPECT_EQ(ct.value_at(0, 0, 0), 175.0f - 1024.0f);
    EXPECT_EQ(ct.value_at(0, 127, 0), 959.0f - 1024.0f);
    EXPECT_EQ(ct.value_at(127, 0, 0), 216.0f - 1024.0f);
    // pydicom 2.3.1: the sum of PixelData read as int16, each value plus the intercept.
    EXPECT_EQ(voxel_sum(ct), -1950906.0);
}

TEST(VolumeIoRealData, DicomRescaleIsAppliedToEveryPixel) {
    // CT_small with Rescale Slope 2 and Intercept -10.25: every stored value v becomes 2 v - 10.25.
    // (The slope's value field holds two characters.)
    const auto source = pydicom_data("CT_small.dcm");
    TESSERA_REQUIRE_DATA(source, pydicom_package);
    ScratchDir scratch;
    std::vector<unsigned char> bytes = read_bytes(source);
    replace_text(bytes, find_element(bytes, 0x0028, 0x1053, "DS"), "2");
    replace_text(bytes, find_element(bytes, 0x0028, 0x1052, "DS"), "-10.25");
    write_bytes(scratch / "rescaled.dcm", bytes);
    const Volume ct = read_volume(scratch / "rescaled.dcm");
    EXPECT_EQ(ct.value_at(0, 0, 0), 2.0f * 175.0f - 10.25f);
    EXPECT_EQ(ct.value_at(0, 127, 0), 2.0f * 959.0f - 10.25f);
    // pydicom: the stored int16 values of CT_small sum to 14826310 over 128×128 pixels.
    EXPECT_EQ(voxel_sum(ct), 2.0 * 14826310.0 - 10.25 * 128 * 128);

    // A zero slope, or an intercept that overflows a float, is refused by name.
    const struct {
        std::uint16_t element;
        const char* value;
    } broken_values[] = {{0x1053, "0"}, {0x1052, "1e40"}};
    for (const auto& broken_value : broken_values) {
        std::vector<unsigned char> broken = read_bytes(source);
        replace_text(broken, find_element(broken, 0x0028, broken_value.element, "DS"), broken_value.value);
        write_bytes(scratch / "broken.dcm", broken);
        try {
            read_volume(scratch / "broken.dcm");
            ADD_FAILURE() << broken_value.value << " was accepted";
        } catch (const Error& error) {
            EXPECT_NE(std::string(error.what()).find("Rescale Slope/Intercept"), std::string::npos) << error.what();
        }
    }
}

TEST(VolumeIoRealData, DicomTransferSyntaxesDecodeAlike) {
    const auto explicit_le = pydicom_data("MR_small.dcm");
    TESSERA_REQUIRE_DATA(explicit_le, pydicom_package);
    const Volume mr = read_volume(explicit_le);
    expect_same_geometry(
        ImageGeometry{{64, 64, 1}, {0.3125, 0.3125, 0.8}, {-83.9063, -91.2, 6.6406}, {1, 0, 0, 0, 1, 0, 0, 0, 1}},
        mr.geometry, 1e-6);
    EXPECT_EQ(mr.value_at(0, 0, 0), 905.0f);
    EXPECT_EQ(mr.value_at(0, 63, 0), 378.0f);
    EXPECT_EQ(mr.value_at(63, 0, 0), 328.0f);
    EXPECT_EQ(voxel_sum(mr), 2125338.0);  // pydicom 2.3.1, as for CT_small
    const auto implicit_le = pydicom_data("MR_small_implicit.dcm");
    TESSERA_REQUIRE_DATA(implicit_le, pydicom_package);
    const Volume other = read_volume(implicit_le);
    EXPECT_TRUE(same_grid(mr.geometry, other.geometry));
    EXPECT_TRUE(same_voxels(mr, other));
}

TEST(VolumeIoRealData, DicomBigEndianReadsAsItsLittleEndianTwin) {
    const auto big = pydicom_data("MR_small_bigendian.dcm"), little = pydicom_data("MR_small.dcm");
    TESSERA_REQUIRE_DATA(big, pydicom_package);
    const Volume swapped = read_volume(big), plain = read_volume(little);
    EXPECT_TRUE(same_grid(swapped.geometry, plain.geometry));
    EXPECT_TRUE(same_voxels(swapped, plain));
    EXPECT_EQ(voxel_sum(swapped), 2125338.0);  // pydicom 2.3.1's pixel_array sum
}

TEST(VolumeIoRealData, DicomRtDoseFramesAreSlicesAtTheirGridOffsets) {
    // pydicom's rtdose.dcm: 10×10 pixels × 15 frames of uint32, Image Position (189.43125, 199.43125,
    // -761.87), axial, 10 mm pixels, Grid Frame Offset Vector 0, 5, …, 70 mm, Dose Grid Scaling 1e-6 Gy.
    const auto path = pydicom_data("rtdose.dcm");
    TESSERA_REQUIRE_DATA(path, pydicom_package);
    ::testing::internal::CaptureStderr();
    const Volume dose = read_volume(path);
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
    expect_same_geometry(ImageGeometry{{10, 10, 15}, {10, 10, 5}, {189.43125, 199.43125, -761.87}, {1, 0, 0, 0, 1, 0, 0, 0, 1}},
                         dose.geometry, 1e-9);
    EXPECT_EQ(dose.source_scalar_type, "uint32");
    // pydicom: pixel_array[0, 0, 0] = 1249000, [14, 9, 9] = 799000, [7, 3, 5] = 1073000 (frame, row, column);
    // the sum 1519910000. Times 1e-6 Gy, within f32 rounding.
    EXPECT_NEAR(dose.value_at(0, 0, 0), 1.249f, 1e-6f);
    EXPECT_NEAR(dose.value_at(9, 9, 14), 0.799f, 1e-6f);
    EXPECT_NEAR(dose.value_at(5, 3, 7), 1.073f, 1e-6f);
    EXPECT_NEAR(voxel_sum(dose), 1519.91, 1e-3);
}

TEST(VolumeIoRealData, DicomLossyTwelveBitJpegDecodesSilently) {
    // pydicom's JPEG-lossy.dcm: extended (12-bit) lossy JPEG, 256×1024. GDCM's 8-bit codec tries first and
    // libjpeg complains on stderr: the reader keeps that out of the user's terminal.
    const auto path = pydicom_data("JPEG-lossy.dcm");
    TESSERA_REQUIRE_DATA(path, pydicom_package);
    ::testing::internal::CaptureStderr();
    const Volume image = read_volume(path);
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
    EXPECT_EQ(image.geometry.size, (std::array<std::int64_t, 3>{256, 1024, 1}));
    float lowest = 1e9f, highest = -1e9f;
    for (std::int64_t index = 0; index < image.voxels.num_elements(); ++index) {
        lowest = std::min(lowest, image.voxels.data<float>()[index]);
        highest = std::max(highest, image.voxels.data<float>()[index]);
    }
    EXPECT_GE(lowest, 0.0f);
    EXPECT_LE(highest, 4095.0f) << "12 bits stored";
    EXPECT_GT(highest - lowest, 100.0f) << "an image, not a constant";
}

TEST(VolumeIoRealData, DicomSeriesIsStackedByPosition) {
    // Three copies of MR_small at z = 6.6406, 7.4406 and 8.2406 mm, named against that order, each
    // with its top-left pixel marked.
    const auto source = pydicom_data("MR_small.dcm");
    TESSERA_REQUIRE_DATA(source, pydicom_package);
    ScratchDir scratch;
    const std::vector<unsigned char> original = read_bytes(source);
    const struct {
        const char* name;
        const char* z;
        std::int16_t mark;
    } slices[] = {{"a.dcm", "8.2406", 1003}, {"b.dcm", "6.6406", 1001}, {"c.dcm", "7.4406", 1002}};
    for (const auto& slice : slices) {
        std::vector<unsigned char> bytes = original;
        replace_text(bytes, find_element(bytes, 0x0020, 0x0032, "DS"), std::string("-83.9063\\-91.2000\\") + slice.z);
        put<std::int16_t>(bytes, find_element(bytes, 0x7fe0, 0x0010, "OW").first, slice.mark);
        write_bytes(scratch / slice.name, bytes);
    }
    const Volume series = read_volume(scratch.path());
    expect_same_geometry(
        ImageGeometry{{64, 64, 3}, {0.3125, 0.3125, 0.8}, {-83.9063, -91.2, 6.6406}, {1, 0, 0, 0, 1, 0, 0, 0, 1}},
        series.geometry, 1e-6);
    EXPECT_EQ(series.value_at(0, 0, 0), 1001.0f);
    EXPECT_EQ(series.value_at(0, 0, 1), 1002.0f);
    EXPECT_EQ(series.value_at(0, 0, 2), 1003.0f);
    EXPECT_EQ(series.value_at(0, 63, 2), 378.0f);
}

// ---- stacks and 2D images written by the tests -----------------------------------------------

TEST(VolumeIo, TiffStackBecomesSlices) {
    ScratchDir scratch;
    const int width = 5, height = 4;
    std::vector<std::vector<std::uint16_t>> pages(3, std::vector<std::uint16_t>(width * height));
    for (int k = 0; k < 3; ++k)
        for (int j = 0; j < height; ++j)
            for (int i = 0; i < width; ++i)
                pages[k][j * width + i] = static_cast<std::uint16_t>(40000 + k * 100 + j * 10 + i);
    write_bytes(scratch / "stack.tif", tiff_uint16(width, height, pages));
    EXPECT_EQ(detect_volume_format(scratch / "stack.tif"), VolumeFormat::TiffStack);
    const Volume stack = read_volume(scratch / "stack.tif");
    expect_same_geometry(ImageGeometry{{5, 4, 3}, {1, 1, 1}, {0, 0, 0}, {1, 0, 0, 0, 1, 0, 0, 0, 1}}, stack.geometry,
                         0);
    EXPECT_EQ(stack.source_scalar_type, "uint16");
    for (int k = 0; k < 3; ++k)
        for (int j = 0; j < height; ++j)
            for (int i = 0; i < width; ++i) ASSERT_EQ(stack.value_at(i, j, k), 40000.0f + k * 100 + j * 10 + i);
    const LabelMap labels = read_label_map(scratch / "stack.tif");
    EXPECT_EQ(labels.label_at(4, 3, 2), 40234);
}

TEST(VolumeIo, JpegIsA2dImage) {
    ScratchDir scratch;
    // 3×2 blocks of 8×8 pixels, row by row.
    const std::vector<int> values = {160, 96, 200, 0, 255, 128};
    write_bytes(scratch / "blocks.jpg", flat_block_jpeg(3, 2, values));
    EXPECT_EQ(detect_volume_format(scratch / "blocks.jpg"), VolumeFormat::Image2D);
    const Volume image = read_volume(scratch / "blocks.jpg");
    expect_same_geometry(ImageGeometry{{24, 16, 1}, {1, 1, 1}, {0, 0, 0}, {1, 0, 0, 0, 1, 0, 0, 0, 1}}, image.geometry,
                         0);
    EXPECT_EQ(image.source_scalar_type, "uint8");
    for (int y = 0; y < 16; ++y)
        for (int x = 0; x < 24; ++x) ASSERT_EQ(image.value_at(x, y, 0), values[(y / 8) * 3 + x / 8]) << x << ", " << y;
}

#ifdef TESSERA_TEST_HAS_OPENCV
TEST(VolumeIo, JpegAndTiffWrittenWithOpenCv) {
    ScratchDir scratch;
    cv::Mat gray(48, 64, CV_8U);
    for (int y = 0; y < gray.rows; ++y)
        for (int x = 0; x < gray.cols; ++x) gray.at<std::uint8_t>(y, x) = static_cast<std::uint8_t>(2 * x + y);
    ASSERT_TRUE(cv::imwrite((scratch / "gray.jpg").string(), gray, {cv::IMWRITE_JPEG_QUALITY, 100}));
    const Volume image = read_volume(scratch / "gray.jpg");
    EXPECT_EQ(image.geometry.size, (std::array<std::int64_t, 3>{64, 48, 1}));
    EXPECT_EQ(image.source_scalar_type, "uint8");
    for (int y = 0; y < gray.rows; ++y)
        for (int x = 0; x < gray.cols; ++x) ASSERT_NEAR(image.value_at(x, y, 0), 2 * x + y, 3.0) << x << ", " << y;

    // Colour becomes luminance: pure red 200 → 0.299 × 200.
    cv::Mat red(8, 8, CV_8UC3, cv::Scalar(0, 0, 200));
    ASSERT_TRUE(cv::imwrite((scratch / "red.jpeg").string(), red, {cv::IMWRITE_JPEG_QUALITY, 100}));
    EXPECT_NEAR(read_volume(scratch / "red.jpeg").value_at(4, 4, 0), 0.299 * 200, 4.0);

    std::vector<cv::Mat> pages;
    for (int k = 0; k < 4; ++k) pages.emplace_back(6, 7, CV_16U, cv::Scalar(1000 * (k + 1)));
    ASSERT_TRUE(cv::imwritemulti((scratch / "stack.tiff").string(), pages));
    const Volume stack = read_volume(scratch / "stack.tiff");
    EXPECT_EQ(stack.geometry.size, (std::array<std::int64_t, 3>{7, 6, 4}));
    EXPECT_EQ(stack.value_at(3, 2, 3), 4000.0f);
}
#else
TEST(VolumeIo, JpegAndTiffWrittenWithOpenCv) {
    GTEST_SKIP() << "OpenCV's headers are not on this test's include path (tests/engine/CMakeLists.txt: "
                    "opencv_core opencv_imgcodecs in test_engine_io's LIBRARIES and "
                    "target_include_directories(test_engine_io SYSTEM PRIVATE ${OpenCV_INCLUDE_DIRS}))";
}
#endif

// ---- round trips -----------------------------------------------------------------------------

class VolumeRoundTrip : public ::testing::TestWithParam<std::string> {
protected:
    // NIfTI and MGH store geometry as float32 (MGH the centre, from which the origin is recomputed);
    // MetaImage as 17-digit text.
    double tolerance() const {
        if (GetParam().starts_with(".mg")) return 5e-5;  // NRRD: 17-digit text, like MetaImage
        return GetParam().starts_with(".nii") ? 2e-5 : 1e-12;
    }
};

TEST_P(VolumeRoundTrip, FloatVolumeWithObliqueGeometry) {
    ScratchDir scratch;
    for (bool left_handed : {false, true}) {
        const Volume original = ramp_volume(oblique_geometry(left_handed));
        const auto path = scratch / ("volume" + GetParam());
        write_volume(original, path);
        const Volume read = read_volume(path);
        expect_same_geometry(original.geometry, read.geometry, tolerance());
        EXPECT_EQ(read.source_scalar_type, "float32");
        EXPECT_TRUE(same_voxels(original, read)) << (left_handed ? "left-handed" : "right-handed");
        // The same physical point, voxel (6, 4, 3), in both.
        const auto a = original.geometry.world_of(6, 4, 3), b = read.geometry.world_of(6, 4, 3);
        for (int axis = 0; axis < 3; ++axis) EXPECT_NEAR(a[axis], b[axis], 1e-3);
    }
}

TEST_P(VolumeRoundTrip, IntegerVolumeKeepsItsSourceType) {
    ScratchDir scratch;
    Volume original = ramp_volume(oblique_geometry(), 0.0f);
    original.voxels.data<float>()[0] = -1024.0f;
    original.source_scalar_type = "int16";
    const auto path = scratch / ("ct" + GetParam());
    write_volume(original, path);
    const Volume read = read_volume(path);
    EXPECT_EQ(read.source_scalar_type, "int16");
    EXPECT_TRUE(same_voxels(original, read));

    original.voxels.data<float>()[1] = 0.5f;  // no longer fits int16
    write_volume(original, path);
    EXPECT_EQ(read_volume(path).source_scalar_type, "float32");
}

TEST_P(VolumeRoundTrip, LabelMapsUseTheSmallestIntegerType) {
    ScratchDir scratch;
    const struct {
        std::int32_t largest;
        std::int32_t smallest;
        const char* type;
    } cases[] = {{6, 0, "uint8"}, {1000, 0, "int16"}, {255, -3, "int16"}, {100000, 0, "int32"}};
    for (const auto& c : cases) {
        LabelMap original = make_label_map(oblique_geometry(true));
        original.labels.at<std::int32_t>({1, 2, 3}) = c.largest;
        original.labels.at<std::int32_t>({3, 4, 6}) = c.smallest;
        original.labels.at<std::int32_t>({0, 0, 1}) = 4;
        const auto path = scratch / ("labels" + GetParam());
        write_label_map(original, path);
        const LabelMap read = read_label_map(path);
        expect_same_geometry(original.geometry, read.geometry, tolerance());
        EXPECT_EQ(read.present_labels(), original.present_labels());
        EXPECT_EQ(std::memcmp(read.labels.raw_data(), original.labels.raw_data(), original.labels.num_bytes()), 0);
        EXPECT_EQ(read_volume(path).source_scalar_type, c.type) << c.largest;
        EXPECT_NO_THROW(check_same_grid(original.geometry, read.geometry, path.string()));
    }
}

INSTANTIATE_TEST_SUITE_P(Formats, VolumeRoundTrip,
                         ::testing::Values(".nii", ".nii.gz", ".mha", ".mhd", ".nrrd", ".nhdr", ".mgh", ".mgz"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                             std::string name = param_info.param.substr(1);
                             std::replace(name.begin(), name.end(), '.', '_');
                             return name;
                         });

// MGH against an independent reader and writer: nibabel (Debian's python3-nibabel, a test-only
// dependency; Debian's own python3, where apt installs it). Tessera's file read by nibabel gives the
// RAS affine of Tessera's LPS geometry and the voxels at their indices; nibabel's file read by Tessera
// gives the affine nibabel was given.
TEST(VolumeIo, MghAgreesWithNibabel) {
    constexpr const char* python = "/usr/bin/python3";
    if (std::system((std::string(python) + " -c 'import nibabel' > /dev/null 2>&1").c_str()) != 0) {
        GTEST_SKIP() << python << " cannot import nibabel: install the Debian package python3-nibabel (make deps does)";
    }
    ScratchDir scratch;
    const Volume volume = ramp_volume(oblique_geometry(true));
    write_volume(volume, scratch / "tessera.mgz");
    const std::string script =
        "import nibabel, numpy, sys\n"
        "image = nibabel.load(sys.argv[1])\n"
        "data = numpy.asarray(image.dataobj)\n"
        "values = list(image.affine[:3].ravel()) + [data[6, 4, 3], data[0, 0, 0], data.shape[0], data.shape[1], data.shape[2]]\n"
        "open(sys.argv[2], 'w').write(' '.join(repr(float(v)) for v in values))\n"
        "grid = numpy.arange(5 * 4 * 3, dtype=numpy.int16).reshape((5, 4, 3), order='F')\n"
        "affine = numpy.array([[0, -0.8, 0, 10.5], [0, 0, 2.5, -20.0], [-1.2, 0, 0, 33.25], [0, 0, 0, 1]])\n"
        "nibabel.save(nibabel.MGHImage(grid, affine), sys.argv[3])\n";
    write_text(scratch / "check.py", script);
    const std::string command = std::string(python) + " " + (scratch / "check.py").string() + " " +
                                (scratch / "tessera.mgz").string() + " " + (scratch / "nibabel.txt").string() + " " +
                                (scratch / "nibabel.mgz").string();
    ASSERT_EQ(std::system(command.c_str()), 0) << command;

    std::ifstream read_back(scratch / "nibabel.txt");
    std::vector<double> values;
    for (double value; read_back >> value;) values.push_back(value);
    ASSERT_EQ(values.size(), 17u);
    const ImageGeometry& g = volume.geometry;
    for (int row = 0; row < 3; ++row) {
        const double sign = row < 2 ? -1.0 : 1.0;  // LPS → RAS
        for (int column = 0; column < 3; ++column) {
            EXPECT_NEAR(values[static_cast<std::size_t>(4 * row + column)], sign * g.direction[row * 3 + column] * g.spacing[column], 1e-5)
                << "affine " << row << ", " << column;
        }
        EXPECT_NEAR(values[static_cast<std::size_t>(4 * row + 3)], sign * g.origin[row], 1e-4) << "affine " << row << ", 3";
    }
    EXPECT_EQ(values[12], volume.value_at(6, 4, 3));
    EXPECT_EQ(values[13], volume.value_at(0, 0, 0));
    EXPECT_EQ(values[14], 7.0);
    EXPECT_EQ(values[15], 5.0);
    EXPECT_EQ(values[16], 4.0);

    const Volume from_nibabel = read_volume(scratch / "nibabel.mgz");
    EXPECT_EQ(from_nibabel.geometry.size, (std::array<std::int64_t, 3>{5, 4, 3}));
    EXPECT_EQ(from_nibabel.source_scalar_type, "int16");
    // The affine's columns are the axes' RAS steps: spacing 1.2, 0.8, 2.5; LPS flips the first two rows.
    const std::array<double, 9> ras_columns{0, -0.8, 0, 0, 0, 2.5, -1.2, 0, 0};  // row-major, as written
    const std::array<double, 3> spacing{1.2, 0.8, 2.5}, origin_ras{10.5, -20.0, 33.25};
    for (int axis = 0; axis < 3; ++axis) {
        EXPECT_NEAR(from_nibabel.geometry.spacing[axis], spacing[axis], 1e-6) << axis;
        const double sign = axis < 2 ? -1.0 : 1.0;
        EXPECT_NEAR(from_nibabel.geometry.origin[axis], sign * origin_ras[axis], 1e-4) << axis;
        for (int row = 0; row < 3; ++row) {
            EXPECT_NEAR(from_nibabel.geometry.direction[row * 3 + axis],
                        (row < 2 ? -1.0 : 1.0) * ras_columns[row * 3 + axis] / spacing[axis], 1e-6) << row << ", " << axis;
        }
    }
    for (std::int64_t k = 0; k < 3; ++k)
        for (std::int64_t j = 0; j < 4; ++j)
            for (std::int64_t i = 0; i < 5; ++i) EXPECT_EQ(from_nibabel.value_at(i, j, k), static_cast<float>(i + 5 * j + 20 * k));
}

// NRRD against Teem, the format's reference implementation (Debian's teem-apps, a test-only dependency):
// teem-unu reads Tessera's .nrrd (gzip) and .nhdr (raw) and finds the voxels at their indices; Tessera
// reads what teem-unu makes (RAS space, a big-endian int16 raw file behind a detached header, and the
// same as gzip attached) with its geometry.
TEST(VolumeIo, NrrdAgreesWithTeem) {
    TESSERA_REQUIRE_DATA("/usr/bin/teem-unu", "teem-apps (make deps installs it)");
    ScratchDir scratch;
    const Volume volume = ramp_volume(oblique_geometry(true));
    write_volume(volume, scratch / "tessera.nrrd");
    write_volume(volume, scratch / "tessera.nhdr");
    const auto run = [&](const std::string& command) {
        const std::string full = "cd " + scratch.path().string() + " && " + command + " > out.txt 2>&1";
        EXPECT_EQ(std::system(full.c_str()), 0) << command;
        std::ifstream in(scratch / "out.txt");
        return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    };
    for (const char* name : {"tessera.nrrd", "tessera.nhdr"}) {
        // Voxel (i, j, k) = (6, 4, 3): slice the slowest axis first.
        const std::string value = run(std::string("teem-unu slice -a 2 -p 3 -i ") + name +
                                      " | teem-unu slice -a 1 -p 4 | teem-unu slice -a 0 -p 6 | teem-unu save -f text");
        EXPECT_FLOAT_EQ(std::stof(value), volume.value_at(6, 4, 3)) << name;
        const std::string header = run(std::string("teem-unu head ") + name);
        EXPECT_NE(header.find("space: left-posterior-superior"), std::string::npos) << header;
    }

    std::vector<unsigned char> big_endian;
    for (int value = 0; value < 60; ++value) {
        big_endian.push_back(static_cast<unsigned char>(value >> 8));
        big_endian.push_back(static_cast<unsigned char>(value & 0xff));
    }
    write_bytes(scratch / "data.raw", big_endian);
    run("teem-unu make -h -i data.raw -t short -s 5 4 3 -en big -e raw -spc RAS -orig '(10.5,-20,33.25)' "
        "-dirs '(0,-0.8,0) (0,0,2.5) (-1.2,0,0)' -o teem.nhdr");
    run("teem-unu save -f nrrd -e gzip -i teem.nhdr -o teem.nrrd");
    for (const char* name : {"teem.nhdr", "teem.nrrd"}) {
        const Volume read = read_volume(scratch / name);
        EXPECT_EQ(read.geometry.size, (std::array<std::int64_t, 3>{5, 4, 3})) << name;
        EXPECT_EQ(read.source_scalar_type, "int16");
        EXPECT_EQ(read.geometry.spacing, (std::array<double, 3>{0.8, 2.5, 1.2})) << name;
        EXPECT_EQ(read.geometry.origin, (std::array<double, 3>{-10.5, 20.0, 33.25})) << name;  // RAS → LPS
        // Columns: axis 0 along RAS −A = LPS +P; axis 1 along S; axis 2 along RAS −R = LPS +L.
        EXPECT_EQ(read.geometry.direction, (std::array<double, 9>{0, 0, 1, 1, 0, 0, 0, 1, 0})) << name;
        for (std::int64_t k = 0; k < 3; ++k)
            for (std::int64_t j = 0; j < 4; ++j)
                for (std::int64_t i = 0; i < 5; ++i) EXPECT_EQ(read.value_at(i, j, k), static_cast<float>(i + 5 * j + 20 * k));
    }
}

// 3D Slicer's .seg.nrrd names its segments in key/value pairs. Written here by Teem (teem-unu make -kv,
// an independent writer of the pairs), read back as label descriptions: names, values and colours, sorted
// by value, a name with spaces and a backslash kept as written.
TEST(VolumeIo, SlicerSegmentNamesAndColoursAreReadAsLabelDescriptions) {
    TESSERA_REQUIRE_DATA("/usr/bin/teem-unu", "teem-apps (make deps installs it)");
    ScratchDir scratch;
    std::vector<unsigned char> labels(5 * 4 * 3, 0);
    labels[7] = 1;
    labels[30] = 2;
    write_bytes(scratch / "labels.raw", labels);
    const std::string command = "cd " + scratch.path().string() +
                                " && teem-unu make -i labels.raw -t uchar -s 5 4 3 -e raw -spc LPS -dirs '(1,0,0) (0,1,0) (0,0,1)' -o teem.seg.nrrd"
                                " -kv 'Segment0_ID:=Segment_2' 'Segment0_Name:=Liver' 'Segment0_Color:=0.866667 0.509804 0.396078'"
                                " 'Segment0_LabelValue:=2' 'Segment0_Layer:=0'"
                                " 'Segment1_ID:=Segment_1' 'Segment1_Name:=Left kidney \\ cortex' 'Segment1_Color:=0.5 0.25 1'"
                                " 'Segment1_LabelValue:=1' 'Segment1_Layer:=0' 'Segmentation_MasterRepresentation:=Binary labelmap'"
                                " > out.txt 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    const LabelMap read = read_label_map(scratch / "teem.seg.nrrd");
    EXPECT_TRUE(read.warnings.empty()) << read.warnings.front();
    ASSERT_EQ(read.descriptions.size(), 2u);
    EXPECT_EQ(read.descriptions[0].value, 1);
    EXPECT_EQ(read.descriptions[0].name, "Left kidney \\ cortex");
    ASSERT_TRUE(read.descriptions[0].color.has_value());
    EXPECT_EQ(*read.descriptions[0].color, (std::array<float, 3>{0.5f, 0.25f, 1.0f}));
    EXPECT_EQ(read.descriptions[1].value, 2);
    EXPECT_EQ(read.descriptions[1].name, "Liver");
    ASSERT_TRUE(read.descriptions[1].color.has_value());
    EXPECT_FLOAT_EQ((*read.descriptions[1].color)[0], 0.866667f);
    EXPECT_EQ(read.label_at(2, 1, 0), 1);
    EXPECT_EQ(read.label_at(0, 2, 1), 2);
    // Written again as a plain NRRD, the names and colours stay (as Slicer's segment fields).
    write_label_map(read, scratch / "plain.nrrd");
    const LabelMap again = read_label_map(scratch / "plain.nrrd");
    ASSERT_EQ(again.descriptions.size(), 2u);
    EXPECT_EQ(again.descriptions[0].name, "Left kidney \\ cortex");
    EXPECT_EQ(again.descriptions[1].color, read.descriptions[1].color);
    // A label map that names nothing, written as plain NRRD, describes nothing.
    LabelMap unnamed = read;
    unnamed.descriptions.clear();
    write_label_map(unnamed, scratch / "unnamed.nrrd");
    EXPECT_TRUE(read_label_map(scratch / "unnamed.nrrd").descriptions.empty());
}

// Writing a .seg.nrrd: every label present becomes a segment with 3D Slicer's fields, named from the
// map's descriptions ("Label 5" for one it does not name). Teem reads the header back (an independent
// reader of the pairs), and read_label_map gives the same names, colours and voxels.
TEST(VolumeIo, LabelMapsAreWrittenAsSlicerSegmentations) {
    TESSERA_REQUIRE_DATA("/usr/bin/teem-unu", "teem-apps (make deps installs it)");
    ScratchDir scratch;
    LabelMap map;
    map.geometry.size = {4, 3, 2};
    map.labels = Tensor::zeros({2, 3, 4}, DType::I32);  // [D, H, W]
    std::int32_t* labels = map.labels.data<std::int32_t>();
    labels[1] = 1;
    labels[6] = 2;
    labels[20] = 5;
    map.descriptions = {{1, "Liver", std::array<float, 3>{0.8f, 0.4f, 0.2f}}, {2, "Left kidney \\ cortex\nouter", std::nullopt},
                        {9, "Absent", std::nullopt}};
    write_label_map(map, scratch / "organs.seg.nrrd");

    const std::string command = "cd " + scratch.path().string() + " && teem-unu head organs.seg.nrrd > header.txt 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0);
    std::ifstream in(scratch / "header.txt");
    const std::string header((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const char* field : {"Segment0_Name:=Liver", "Segment0_LabelValue:=1", "Segment0_Color:=0.8 0.4 0.2", "Segment0_Layer:=0",
                              "Segment1_Name:=Left kidney \\\\ cortex\\nouter", "Segment1_LabelValue:=2", "Segment2_Name:=Label 5",
                              "Segment2_LabelValue:=5", "Segment0_Extent:=0 3 0 2 0 1",
                              "Segmentation_MasterRepresentation:=Binary labelmap"}) {
        EXPECT_NE(header.find(field), std::string::npos) << field << "\n" << header;
    }
    EXPECT_EQ(header.find("Absent"), std::string::npos) << "a label with no voxels is no segment";

    const LabelMap read = read_label_map(scratch / "organs.seg.nrrd");
    ASSERT_EQ(read.descriptions.size(), 3u);
    EXPECT_EQ(read.descriptions[0].name, "Liver");
    EXPECT_EQ(read.descriptions[0].color, (std::array<float, 3>{0.8f, 0.4f, 0.2f}));
    EXPECT_EQ(read.descriptions[1].name, "Left kidney \\ cortex outer");  // one line in a legend
    EXPECT_EQ(read.descriptions[2].name, "Label 5");
    for (std::int64_t index = 0; index < 24; ++index) EXPECT_EQ(read.labels.data<std::int32_t>()[index], labels[index]) << index;
}

// Segment entries Tessera cannot use are left out with a warning naming the segment; the labels still
// open (names are cosmetic) and the good segments keep theirs.
TEST(VolumeIo, DamagedSegmentEntriesAreLeftOutWithAWarning) {
    ScratchDir scratch;
    std::string header =
        "NRRD0004\ntype: uint8\ndimension: 3\nsizes: 2 2 1\nencoding: raw\nspace: left-posterior-superior\n"
        "space directions: (1,0,0) (0,1,0) (0,0,1)\n"
        "Segment0_Name:=Good\nSegment0_LabelValue:=1\nSegment0_Color:=0 1 0\n"
        "Segment1_Name:=No value\n"
        "Segment2_Name:=Zero\nSegment2_LabelValue:=0\n"
        "Segment3_Name:=Other layer\nSegment3_LabelValue:=3\nSegment3_Layer:=1\n"
        "Segment4_Name:=Bad colour\nSegment4_LabelValue:=4\nSegment4_Color:=0.5 2 0\n"
        "Segment5_Name:=Same as good\nSegment5_LabelValue:=1\n"
        "Segment6_Name:=Two\\nlines\tand a tab\nSegment6_LabelValue:=6\n\n";
    std::vector<unsigned char> bytes(header.begin(), header.end());
    for (unsigned char voxel : {0, 1, 4, 1}) bytes.push_back(voxel);
    write_bytes(scratch / "damaged.seg.nrrd", bytes);
    const LabelMap read = read_label_map(scratch / "damaged.seg.nrrd");
    ASSERT_EQ(read.descriptions.size(), 3u);
    EXPECT_EQ(read.descriptions[0].name, "Good");
    EXPECT_EQ(read.descriptions[1].name, "Bad colour");
    EXPECT_EQ(read.descriptions[2].name, "Two lines and a tab");  // an escaped newline and a tab: one line
    EXPECT_FALSE(read.descriptions[1].color.has_value());
    const std::string all = [&] {
        std::string text;
        for (const std::string& warning : read.warnings) text += warning + "\n";
        return text;
    }();
    EXPECT_NE(all.find("segment 1 ('No value') has no Segment1_LabelValue"), std::string::npos) << all;
    EXPECT_NE(all.find("segment 2 ('Zero') has label value '0'"), std::string::npos) << all;
    EXPECT_NE(all.find("segment 3 ('Other layer') is on layer 1"), std::string::npos) << all;
    EXPECT_NE(all.find("segment 4 ('Bad colour') has colour '0.5 2 0'"), std::string::npos) << all;
    EXPECT_NE(all.find("'Good' and 'Same as good' both have label value 1"), std::string::npos) << all;
    EXPECT_EQ(read.label_at(0, 1, 0), 4);
}

// MGH stores uint8, int16, int32 and float32: a uint16 volume widens to int32, a uint32 one to float32,
// with every value kept.
TEST(VolumeIo, MghWidensTypesItCannotStore) {
    ScratchDir scratch;
    Volume original = ramp_volume(oblique_geometry(), 0.0f);
    original.voxels.data<float>()[0] = 60000.0f;
    for (const auto& [source, stored] : {std::pair{"uint16", "int32"}, std::pair{"uint32", "float32"}, std::pair{"int8", "float32"}}) {
        original.source_scalar_type = source;  // int8: 60000 does not fit, so float32 before MGH's choice
        write_volume(original, scratch / "widened.mgz");
        const Volume read = read_volume(scratch / "widened.mgz");
        EXPECT_EQ(read.source_scalar_type, stored) << source;
        EXPECT_TRUE(same_voxels(original, read)) << source;
    }
}

TEST(VolumeIo, MhdKeepsItsVoxelsInARawFile) {
    ScratchDir scratch;
    const Volume original = ramp_volume(oblique_geometry());
    write_volume(original, scratch / "volume.mhd");
    ASSERT_TRUE(std::filesystem::exists(scratch / "volume.raw"));
    EXPECT_EQ(std::filesystem::file_size(scratch / "volume.raw"), original.voxels.num_bytes());
    const std::vector<unsigned char> header = read_bytes(scratch / "volume.mhd");
    EXPECT_CONTAINS(std::string(header.begin(), header.end()), "ElementDataFile = volume.raw");
}

TEST(VolumeIo, MetaImageTransformMatrixListsAxisVectors) {
    // ITK's convention: a +30° rotation about z is written "cos sin 0 -sin cos 0 0 0 1".
    ScratchDir scratch;
    ImageGeometry geometry;
    geometry.size = {3, 2, 1};
    geometry.direction = rotation({0, 0, 1}, 30);
    write_volume(make_volume(geometry), scratch / "rotated.mha");
    const std::vector<unsigned char> bytes = read_bytes(scratch / "rotated.mha");
    const std::string text(bytes.begin(), bytes.end());
    const std::size_t at = text.find("TransformMatrix = ");
    ASSERT_NE(at, std::string::npos);
    std::istringstream values(text.substr(at + 18, text.find('\n', at) - at - 18));
    std::vector<double> matrix{std::istream_iterator<double>(values), std::istream_iterator<double>()};
    const double c = std::cos(std::numbers::pi / 6), s = std::sin(std::numbers::pi / 6);
    const std::vector<double> expected = {c, s, 0, -s, c, 0, 0, 0, 1};
    ASSERT_EQ(matrix.size(), 9u);
    for (int index = 0; index < 9; ++index) EXPECT_NEAR(matrix[index], expected[index], 1e-12) << index;
}

TEST(VolumeIo, NiftiWritesTheRasAffine) {
    // Our LPS geometry must land in the file as NIfTI's RAS affine: x and y rows negated.
    ScratchDir scratch;
    for (bool left_handed : {false, true}) {
        const Volume volume = ramp_volume(oblique_geometry(left_handed));
        const ImageGeometry& g = volume.geometry;
        write_volume(volume, scratch / "affine.nii");
        const std::vector<unsigned char> bytes = read_bytes(scratch / "affine.nii");
        ASSERT_EQ(get<std::int32_t>(bytes, 0), 348);
        EXPECT_EQ(std::memcmp(bytes.data() + 344, "n+1", 4), 0);
        EXPECT_EQ(get<std::int16_t>(bytes, 70), 16);  // float32
        EXPECT_EQ(get<std::int16_t>(bytes, 42), 7);
        EXPECT_EQ(get<std::int16_t>(bytes, 44), 5);
        EXPECT_EQ(get<std::int16_t>(bytes, 46), 4);
        EXPECT_EQ(get<float>(bytes, 76), left_handed ? -1.0f : 1.0f);  // qfac
        EXPECT_GT(get<std::int16_t>(bytes, 252), 0);                   // qform_code
        EXPECT_GT(get<std::int16_t>(bytes, 254), 0);                   // sform_code
        for (int row = 0; row < 3; ++row) {
            const double sign = row < 2 ? -1.0 : 1.0;
            for (int column = 0; column < 3; ++column) {
                EXPECT_NEAR(get<float>(bytes, 280 + 16 * row + 4 * column),
                            sign * g.direction[row * 3 + column] * g.spacing[column], 1e-5);
            }
            EXPECT_NEAR(get<float>(bytes, 280 + 16 * row + 12), sign * g.origin[row], 1e-4);
        }
        // Voxels in our order: first and last.
        const auto offset = static_cast<std::size_t>(get<float>(bytes, 108));
        EXPECT_EQ(get<float>(bytes, offset), volume.value_at(0, 0, 0));
        EXPECT_EQ(get<float>(bytes, bytes.size() - 4), volume.value_at(6, 4, 3));
    }
}

TEST(VolumeIo, NiftiQfacMinusOneKeepsTheFileOrderAndAppliesRescale) {
    // 2×2×3 int16 voxels k*100 + j*10 + i, qfac = -1, identity quaternion, offset (10, 20, 30):
    // NIfTI world (RAS) of voxel (i, j, k) is (10 + i, 20 + 2 j, 30 - 3 k). Slope 2, intercept 5.
    ScratchDir scratch;
    Nifti1Spec spec;
    spec.pixdim[0] = -1;
    spec.qoffset = {10, 20, 30};
    spec.scl_slope = 2;
    spec.scl_inter = 5;
    write_bytes(scratch / "qfac.nii", nifti1_file(spec, index_coded_int16()));
    const Volume volume = read_volume(scratch / "qfac.nii");
    expect_same_geometry(ImageGeometry{{2, 2, 3}, {1, 2, 3}, {-10, -20, 30}, {-1, 0, 0, 0, -1, 0, 0, 0, -1}},
                         volume.geometry, 1e-9);
    for (int k = 0; k < 3; ++k)
        for (int j = 0; j < 2; ++j)
            for (int i = 0; i < 2; ++i) EXPECT_EQ(volume.value_at(i, j, k), 2.0f * (k * 100 + j * 10 + i) + 5.0f);
    const auto world = volume.geometry.world_of(1, 1, 2);  // RAS (11, 22, 24)
    EXPECT_NEAR(world[0], -11, 1e-9);
    EXPECT_NEAR(world[1], -22, 1e-9);
    EXPECT_NEAR(world[2], 24, 1e-9);
    EXPECT_EQ(volume.source_scalar_type, "int16");
}

TEST(VolumeIo, Nifti2IsRead) {
    // A NIfTI-2 header (540 bytes, 64-bit fields), sform only: x = 2 i + 5, y = 3 j, z = 4 k.
    ScratchDir scratch;
    const std::vector<unsigned char> data = index_coded_int16();
    std::vector<unsigned char> bytes(544 + data.size(), 0);
    put<std::int32_t>(bytes, 0, 540);
    std::memcpy(bytes.data() + 4, "n+2\0\r\n\032\n", 8);
    put<std::int16_t>(bytes, 12, 4);
    put<std::int16_t>(bytes, 14, 16);
    const std::int64_t dim[8] = {3, 2, 2, 3, 1, 1, 1, 1};
    const double pixdim[8] = {1, 2, 3, 4, 0, 0, 0, 0};
    for (int index = 0; index < 8; ++index) {
        put<std::int64_t>(bytes, 16 + 8 * index, dim[index]);
        put<double>(bytes, 104 + 8 * index, pixdim[index]);
    }
    put<std::int64_t>(bytes, 168, 544);
    put<std::int32_t>(bytes, 348, 1);  // sform_code
    const double srow[12] = {2, 0, 0, 5, 0, 3, 0, 0, 0, 0, 4, 0};
    for (int index = 0; index < 12; ++index) put<double>(bytes, 400 + 8 * index, srow[index]);
    std::memcpy(bytes.data() + 544, data.data(), data.size());
    write_bytes(scratch / "two.nii", bytes);
    const Volume volume = read_volume(scratch / "two.nii");
    expect_same_geometry(ImageGeometry{{2, 2, 3}, {2, 3, 4}, {-5, 0, 0}, {-1, 0, 0, 0, -1, 0, 0, 0, 1}},
                         volume.geometry, 1e-12);
    EXPECT_EQ(volume.value_at(1, 0, 2), 201.0f);
}

TEST(VolumeIo, NiftiBigEndianHeaderIsRead) {
    // The qfac file above with every field and voxel byte-swapped, as a big-endian machine writes it.
    ScratchDir scratch;
    Nifti1Spec spec;
    spec.qoffset = {10, 20, 30};
    std::vector<unsigned char> bytes = nifti1_file(spec, index_coded_int16());
    auto swap = [&](std::size_t offset, std::size_t size) {
        std::reverse(bytes.begin() + offset, bytes.begin() + offset + size);
    };
    swap(0, 4);
    for (std::size_t at = 40; at < 56; at += 2) swap(at, 2);
    swap(70, 2);
    swap(72, 2);
    for (std::size_t at = 76; at < 120; at += 4) swap(at, 4);  // pixdim, vox_offset, scl_slope, scl_inter
    swap(252, 2);
    swap(254, 2);
    for (std::size_t at = 256; at < 328; at += 4) swap(at, 4);  // quatern, qoffset, srow
    for (std::size_t at = 352; at < bytes.size(); at += 2) swap(at, 2);
    write_bytes(scratch / "big.nii", bytes);
    const Volume volume = read_volume(scratch / "big.nii");
    expect_same_geometry(ImageGeometry{{2, 2, 3}, {1, 2, 3}, {-10, -20, 30}, {-1, 0, 0, 0, -1, 0, 0, 0, 1}},
                         volume.geometry, 1e-9);
    EXPECT_EQ(volume.value_at(1, 1, 2), 211.0f);
}

TEST(VolumeIo, NiftiTakesTheQformWhenTheSformDisagrees) {
    // qform: identity at (10, 20, 30); sform: another placement (a template space). Scanner space wins.
    ScratchDir scratch;
    Nifti1Spec spec;
    spec.qoffset = {10, 20, 30};
    spec.sform_code = 2;
    spec.srow = {0, -2, 0, 1, 1, 0, 0, 2, 0, 0, 3, 3};
    write_bytes(scratch / "both.nii", nifti1_file(spec, index_coded_int16()));
    expect_same_geometry(ImageGeometry{{2, 2, 3}, {1, 2, 3}, {-10, -20, 30}, {-1, 0, 0, 0, -1, 0, 0, 0, 1}},
                         read_volume(scratch / "both.nii").geometry, 1e-9);
    spec.qform_code = 0;  // sform alone: i → +y, j → -x (RAS)
    write_bytes(scratch / "sform.nii", nifti1_file(spec, index_coded_int16()));
    expect_same_geometry(ImageGeometry{{2, 2, 3}, {1, 2, 3}, {-1, -2, 3}, {0, 1, 0, -1, 0, 0, 0, 0, 1}},
                         read_volume(scratch / "sform.nii").geometry, 1e-9);
}
