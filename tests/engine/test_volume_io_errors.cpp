// Bad input: every case throws tessera::Error whose message names the file and the problem, and
// nothing is printed (VTK's and MetaIO's own error output must not reach stderr).
#include "io/volume_io.hpp"

#include "volume_io_test_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace tessera;
using namespace tessera::test;

namespace {

constexpr const char* itk_package = "insighttoolkit5-examples";
constexpr const char* pydicom_package = "python3-pydicom";

// The message of the error `action` throws; also checks that nothing went to stderr.
std::string silent_error(const std::function<void()>& action) {
    ::testing::internal::CaptureStderr();
    const std::string message = error_message(action);
    const std::string printed = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(printed, "") << "printed to stderr while failing with: " << message;
    return message;
}

std::string read_error(const std::filesystem::path& path) {
    return silent_error([&] { read_volume(path); });
}

void truncate_file(const std::filesystem::path& path, std::uintmax_t size) {
    std::filesystem::resize_file(path, size);
}

}  // namespace

TEST(VolumeIoErrors, FileThatDoesNotExist) {
    ScratchDir scratch;
    const auto path = scratch / "missing.nii.gz";
    const std::string message = read_error(path);
    EXPECT_CONTAINS(message, path.string());
    EXPECT_CONTAINS(message, "no such file");
    EXPECT_CONTAINS(silent_error([&] { read_label_map(path); }), "no such file");
}

TEST(VolumeIoErrors, UnknownExtensionListsTheSupportedOnes) {
    ScratchDir scratch;
    write_text(scratch / "volume.vtk", "# vtk DataFile Version 3.0\n");
    const std::string message = read_error(scratch / "volume.vtk");
    EXPECT_CONTAINS(message, "unknown extension .vtk");
    for (const char* extension : {".nii.gz", ".mha", ".mhd", ".png", ".tiff", ".dcm"})
        EXPECT_CONTAINS(message, extension);
    EXPECT_CONTAINS(error_message([&] { detect_volume_format("no_extension"); }), "has no extension");
}

TEST(VolumeIoErrors, TruncatedNiftiGz) {
    ScratchDir scratch;
    ImageGeometry geometry;
    geometry.size = {64, 64, 32};
    const auto path = scratch / "cut.nii.gz";
    write_volume(ramp_volume(geometry), path);
    ASSERT_NO_THROW(read_volume(path));
    const auto full_size = std::filesystem::file_size(path);
    for (const double fraction : {0.6, 0.1}) {
        write_volume(ramp_volume(geometry), path);
        truncate_file(path, static_cast<std::uintmax_t>(static_cast<double>(full_size) * fraction));
        const std::string message = read_error(path);
        EXPECT_CONTAINS(message, path.string());
        EXPECT_CONTAINS(message, "truncated");
        EXPECT_CONTAINS(message, "64×64×32 float32 voxels");
    }
    // Cut inside the header itself.
    write_volume(ramp_volume(geometry), path);
    truncate_file(path, 40);
    EXPECT_CONTAINS(read_error(path), "truncated");
}

TEST(VolumeIoErrors, NiftiHeaderPromisesMoreVoxelsThanTheFileHolds) {
    ScratchDir scratch;
    const auto path = scratch / "short.nii";
    write_volume(ramp_volume(oblique_geometry()), path);  // 7×5×4 float32
    std::vector<unsigned char> bytes = read_bytes(path);
    put<std::int16_t>(bytes, 46, 40);  // dim[3]: 4 → 40 slices
    write_bytes(path, bytes);
    std::string message = read_error(path);
    EXPECT_CONTAINS(message, "truncated");
    EXPECT_CONTAINS(message, "promises 7×5×40 float32 voxels");
    EXPECT_CONTAINS(message, "5600 bytes");

    write_volume(ramp_volume(oblique_geometry()), path);
    truncate_file(path, 352 + 100);
    message = read_error(path);
    EXPECT_CONTAINS(message, "truncated");
    EXPECT_CONTAINS(message, "holds only 452 bytes");
}

TEST(VolumeIoErrors, UnsupportedNiftiVoxelTypes) {
    ScratchDir scratch;
    const struct {
        std::int16_t datatype, bitpix;
        const char* name;
        const char* fix;
    } cases[] = {
        {32, 64, "complex64", "magnitude"}, {128, 24, "RGB24", "grayscale"}, {1792, 128, "complex128", "magnitude"}};
    for (const auto& c : cases) {
        Nifti1Spec spec;
        spec.datatype = c.datatype;
        spec.bitpix = c.bitpix;
        const auto path = scratch / (std::string(c.name) + ".nii");
        write_bytes(path, nifti1_file(spec, std::vector<unsigned char>(12 * c.bitpix / 8, 0)));
        const std::string message = read_error(path);
        EXPECT_CONTAINS(message, "unsupported voxel type");
        EXPECT_CONTAINS(message, c.name);
        EXPECT_CONTAINS(message, c.fix);
    }
}

TEST(VolumeIoErrors, ComplexMetaImageFromItk) {
    const auto path = itk_data("itkBrainSliceComplex.mha");
    TESSERA_REQUIRE_DATA(path, itk_package);
    const std::string message = read_error(path);
    EXPECT_CONTAINS(message, path.string());
    EXPECT_CONTAINS(message, "unsupported voxel type");
    EXPECT_CONTAINS(message, "ElementNumberOfChannels = 2");
    EXPECT_CONTAINS(silent_error([&] { read_label_map(path); }), "unsupported voxel type");
}

TEST(VolumeIoErrors, ZeroOrNegativeDimension) {
    ScratchDir scratch;
    for (const std::int16_t bad : {0, -4}) {
        Nifti1Spec spec;
        spec.dim[3] = bad;
        const auto path = scratch / "flat.nii";
        write_bytes(path, nifti1_file(spec, index_coded_int16()));
        const std::string message = read_error(path);
        EXPECT_CONTAINS(message, "zero or negative dimension");
        EXPECT_CONTAINS(message, "dim[3] = " + std::to_string(bad));
    }
    write_text(scratch / "flat.mha",
               "ObjectType = Image\nNDims = 3\nDimSize = 4 0 2\nElementType = MET_UCHAR\n"
               "ElementDataFile = LOCAL\n");
    const std::string message = read_error(scratch / "flat.mha");
    EXPECT_CONTAINS(message, "zero or negative dimension");
    EXPECT_CONTAINS(message, "DimSize = 4 0 2");
}

TEST(VolumeIoErrors, LabelMapOnAnotherGrid) {
    const Volume image = ramp_volume(oblique_geometry());
    ImageGeometry other = image.geometry;
    other.spacing = {1.5, 2.5, 7};
    other.origin[2] += 10;
    const std::string message = error_message([&] { check_same_grid(image.geometry, other, "mask.nii.gz"); });
    EXPECT_CONTAINS(message, "mask.nii.gz is not on the image's grid");
    EXPECT_CONTAINS(message, "7×5×4 voxels, 0.75×1.25×3.5 mm");
    EXPECT_CONTAINS(message, "7×5×4 voxels, 1.5×2.5×7 mm");
    EXPECT_CONTAINS(message, "differ in spacing and origin");
    EXPECT_CONTAINS(message, "Resample");

    // Real files: the head MRI and a label map of another study.
    const auto mri_path = itk_data("KmeansTest_T1UCharRaw.nii.gz");
    const auto other_path = itk_data("BrainProtonDensity3Slices.mha");
    TESSERA_REQUIRE_DATA(mri_path, itk_package);
    TESSERA_REQUIRE_DATA(other_path, itk_package);
    const Volume mri = read_volume(mri_path);
    const LabelMap labels = read_label_map(other_path);
    const std::string real =
        error_message([&] { check_same_grid(mri.geometry, labels.geometry, other_path.string()); });
    EXPECT_CONTAINS(real, other_path.string());
    EXPECT_CONTAINS(real, "128×128×62 voxels, 2×2×3 mm");
    EXPECT_CONTAINS(real, "181×217×3 voxels, 1×1×1 mm");
    EXPECT_CONTAINS(real, "differ in size");
}

TEST(VolumeIoErrors, EmptyDicomFolder) {
    ScratchDir scratch;
    std::filesystem::create_directory(scratch / "series");
    std::string message = read_error(scratch / "series");
    EXPECT_CONTAINS(message, "DICOM folder");
    EXPECT_CONTAINS(message, "is empty");

    write_text(scratch / "series" / "notes.txt", "scanned on Tuesday");
    write_text(scratch / "series" / "slice.dcm", "not really DICOM");
    message = read_error(scratch / "series");
    EXPECT_CONTAINS(message, "holds no DICOM images");
    EXPECT_CONTAINS(message, "2 are not DICOM");
}

TEST(VolumeIoErrors, TextSavedWithAnImageExtension) {
    ScratchDir scratch;
    const std::string text = "patient,age\nA,42\nB,37\n" + std::string(600, 'x') + "\n";
    const struct {
        const char* name;
        const char* problem;
    } cases[] = {
        {"notes.png", "is not a PNG image"},      {"notes.jpg", "is not a JPEG image"},
        {"notes.tif", "is not a TIFF image"},     {"notes.nii", "is not a NIfTI image"},
        {"notes.nii.gz", "is not a NIfTI image"}, {"notes.mha", "is not a MetaImage file"},
        {"notes.mhd", "is not a MetaImage file"}, {"notes.dcm", "is not a DICOM file"},
    };
    for (const auto& c : cases) {
        write_text(scratch / c.name, text);
        const std::string message = read_error(scratch / c.name);
        EXPECT_CONTAINS(message, (scratch / c.name).string());
        EXPECT_CONTAINS(message, c.problem);
    }
    write_text(scratch / "tiny.nii.gz", "hi");
    EXPECT_CONTAINS(read_error(scratch / "tiny.nii.gz"), "is not a NIfTI image");
}

TEST(VolumeIoErrors, LabelMapWithFractionalValues) {
    ScratchDir scratch;
    write_volume(ramp_volume(oblique_geometry(), 0.25f), scratch / "probabilities.mha");
    const std::string message = silent_error([&] { read_label_map(scratch / "probabilities.mha"); });
    EXPECT_CONTAINS(message, "is not a label map");
    EXPECT_CONTAINS(message, "voxel (0, 0, 0) holds 0.25");
    EXPECT_CONTAINS(message, "whole numbers");
    EXPECT_CONTAINS(message, "float32");
}

TEST(VolumeIoErrors, NiftiWithSeveralVolumes) {
    ScratchDir scratch;
    Nifti1Spec spec;
    spec.dim = {4, 2, 2, 3, 2, 1, 1, 1};
    const std::vector<unsigned char> one = index_coded_int16();
    std::vector<unsigned char> data(one.size() * 2);
    std::memcpy(data.data(), one.data(), one.size());
    std::memcpy(data.data() + one.size(), one.data(), one.size());
    write_bytes(scratch / "fmri.nii", nifti1_file(spec, data));
    const std::string message = read_error(scratch / "fmri.nii");
    EXPECT_CONTAINS(message, "more than one volume");
    EXPECT_CONTAINS(message, "dim[4] = 2 time points");
}

TEST(VolumeIoErrors, NiftiHeaderPairAndBadMagic) {
    ScratchDir scratch;
    std::vector<unsigned char> bytes = nifti1_file(Nifti1Spec{}, index_coded_int16());
    std::memcpy(bytes.data() + 344, "ni1", 4);
    write_bytes(scratch / "pair.nii", bytes);
    EXPECT_CONTAINS(read_error(scratch / "pair.nii"), ".hdr/.img pair");
    std::memcpy(bytes.data() + 344, "\0\0\0", 4);
    write_bytes(scratch / "analyze.nii", bytes);
    EXPECT_CONTAINS(read_error(scratch / "analyze.nii"), "magic string");
}

TEST(VolumeIoErrors, TruncatedDicom) {
    const auto path = pydicom_data("MR_truncated.dcm");
    TESSERA_REQUIRE_DATA(path, pydicom_package);
    const std::string message = read_error(path);
    EXPECT_CONTAINS(message, "truncated");
    EXPECT_CONTAINS(message, "its pixel data (at byte 1488) declares 8192 bytes but only 8130 follow its header");
}

TEST(VolumeIoErrors, TwoDicomSeriesInOneFolder) {
    const auto ct = pydicom_data("CT_small.dcm");
    const auto mr = pydicom_data("MR_small.dcm");
    TESSERA_REQUIRE_DATA(ct, pydicom_package);
    TESSERA_REQUIRE_DATA(mr, pydicom_package);
    ScratchDir scratch;
    std::filesystem::copy_file(ct, scratch / "1.dcm");
    std::filesystem::copy_file(mr, scratch / "2.dcm");
    const std::string message = read_error(scratch.path());
    EXPECT_CONTAINS(message, "holds 2 DICOM series");
    EXPECT_CONTAINS(message, "1.3.6.1.4.1.5962.1.3.4.1.20040826185059.5457");
}

TEST(VolumeIoErrors, MetaImageWithMissingOrShortDataFile) {
    ScratchDir scratch;
    write_volume(ramp_volume(oblique_geometry()), scratch / "volume.mhd");
    truncate_file(scratch / "volume.raw", 100);
    std::string message = read_error(scratch / "volume.mhd");
    EXPECT_CONTAINS(message, "truncated");
    EXPECT_CONTAINS(message, "7×5×4 float32 voxels (560 bytes)");
    std::filesystem::remove(scratch / "volume.raw");
    message = read_error(scratch / "volume.mhd");
    EXPECT_CONTAINS(message, "volume.raw");
    EXPECT_CONTAINS(message, "does not exist");

    write_text(scratch / "headless.mha", "ObjectType = Image\nNDims = 3\n");
    EXPECT_CONTAINS(read_error(scratch / "headless.mha"), "no ElementDataFile");
}

// Headers that meant one thing to Tessera's checks and another to VTK's MetaIO reader behind them: each is
// refused before MetaIO sees it, naming the line. (A 300-character Comment overflowed MetaIO's 255-byte
// field: found by CI's fuzz smoke.)
TEST(VolumeIoErrors, MetaImageHeadersMetaIoWouldReadDifferently) {
    ScratchDir scratch;
    const std::string voxels(32 * 4, '\0');  // 4×4×2 float32
    const auto mha = [&](const std::string& name, const std::string& extra, const std::string& last = "") {
        write_text(scratch / name, "ObjectType = Image\nNDims = 3\n" + extra + "DimSize = 4 4 2\nElementType = MET_FLOAT\n" + last +
                                       "ElementDataFile = LOCAL\n" + voxels);
        return read_error(scratch / name);
    };
    std::string message = mha("comment.mha", "Comment = " + std::string(300, 'x') + "\n");
    EXPECT_CONTAINS(message, "line 3 (Comment) has 300 characters where they take at most 254 per value");
    message = mha("case.mha", "", "elementSpacing = 1 1 1\n");
    EXPECT_CONTAINS(message, "line 5 writes elementSpacing, but MetaImage keys are case-sensitive (readers know only ElementSpacing)");
    message = mha("empty.mha", "Comment =\n");
    EXPECT_CONTAINS(message, "line 3 gives Comment no value");
    message = mha("exponent.mha", "ElementNumberOfChannels = 1e1\n");
    EXPECT_CONTAINS(message, "line 3 (ElementNumberOfChannels = 1e1) should hold 1 whole number");
    message = mha("short_array.mha", "", "CenterOfRotation = 0 0\n");
    EXPECT_CONTAINS(message, "line 5 (CenterOfRotation = 0 0) should hold 3 numbers for NDims = 3");
    message = mha("long_line.mha", "Note = " + std::string(600, 'y') + "\n");
    EXPECT_CONTAINS(message, "at most 499 per line");
    write_text(scratch / "early.mha", "ObjectType = Image\nDimSize = 4 4 2\nNDims = 3\nElementType = MET_FLOAT\nElementDataFile = LOCAL\n" + voxels);
    EXPECT_CONTAINS(read_error(scratch / "early.mha"), "line 2 gives DimSize before NDims (line 3)");
    // What stays readable: a Comment of 254 characters, a user field MetaIO does not know, "True" as "1".
    write_text(scratch / "fine.mha", "ObjectType = Image\nNDims = 3\nComment = " + std::string(254, 'z') +
                                         "\nScanner = Example 3T\nBinaryData = 1\nDimSize = 4 4 2\nElementType = MET_FLOAT\n"
                                         "ElementDataFile = LOCAL\n" + voxels);
    EXPECT_EQ(read_volume(scratch / "fine.mha").geometry.size, (std::array<std::int64_t, 3>{4, 4, 2}));
}

// NRRD: each damage named by field, before the voxels are read.
TEST(VolumeIoErrors, NrrdDamageIsNamed) {
    ScratchDir scratch;
    const std::string float_data(7 * 5 * 4 * 4, '\0');
    const auto nrrd = [&](const std::string& name, const std::string& fields, const std::string& data) {
        write_text(scratch / name, "NRRD0004\n" + fields + "\n" + data);
        return read_error(scratch / name);
    };
    const std::string basics = "type: float\ndimension: 3\nsizes: 7 5 4\nendian: little\n";
    write_text(scratch / "text.nrrd", "hello\n");
    EXPECT_CONTAINS(read_error(scratch / "text.nrrd"), "does not start with the magic NRRD0001");
    EXPECT_CONTAINS(nrrd("empty.nrrd", "", ""), "no 'type:' field");
    EXPECT_CONTAINS(nrrd("type.nrrd", "type: block\ndimension: 3\nsizes: 7 5 4\nencoding: raw\n", float_data), "NRRD type 'block'");
    EXPECT_CONTAINS(nrrd("sizes.nrrd", "type: float\ndimension: 3\nsizes: 7 5\nendian: little\nencoding: raw\n", float_data),
                    "'sizes' lists 2 extents for dimension 3");
    EXPECT_CONTAINS(nrrd("short.nrrd", basics + "encoding: raw\n", float_data.substr(10)), "is truncated");
    EXPECT_CONTAINS(nrrd("bzip.nrrd", basics + "encoding: bzip2\n", float_data), "encoding 'bzip2'");
    EXPECT_CONTAINS(nrrd("endian.nrrd", "type: float\ndimension: 3\nsizes: 7 5 4\nencoding: raw\n", float_data),
                    "no 'endian:' field");
    EXPECT_CONTAINS(nrrd("again.nrrd", basics + "sizes: 7 5 4\nencoding: raw\n", float_data), "gives 'sizes' again");
    EXPECT_CONTAINS(nrrd("four.nrrd", "type: float\ndimension: 4\nsizes: 2 7 5 4\nendian: little\nencoding: raw\n", float_data),
                    "holds a 4D array (2×7×5×4)");
    EXPECT_CONTAINS(nrrd("space.nrrd", basics + "space: left-anterior-inferior\nencoding: raw\n", float_data),
                    "NRRD space 'left-anterior-inferior'");
    EXPECT_CONTAINS(nrrd("dirs.nrrd", basics + "space: LPS\nspace directions: (1,0,0) (0,1,0)\nencoding: raw\n", float_data),
                    "2 entries for 3 axes");
    EXPECT_CONTAINS(nrrd("outside.nhdr", basics + "encoding: raw\ndata file: ../elsewhere.raw\n", ""), "outside the header's folder");
    EXPECT_CONTAINS(nrrd("gz.nrrd", basics + "encoding: gzip\n", "not gzip at all"), "gz.nrrd");
    // Text voxels outside their type (the fuzzer's 1e84 as a short): named, not converted.
    EXPECT_CONTAINS(nrrd("text.nrrd", "type: short\ndimension: 2\nsizes: 2 2\nencoding: text\n", "1 2 1e84 4\n"),
                    "holds the text voxel 1e+84 (number 2), which a int16 cannot hold");
    EXPECT_CONTAINS(nrrd("half.nrrd", "type: uchar\ndimension: 2\nsizes: 2 2\nencoding: text\n", "1 2 3.5 4\n"),
                    "holds the text voxel 3.5");
}

// MGH: each damage named, before anything is allocated for the voxels.
TEST(VolumeIoErrors, MghDamageIsNamed) {
    ScratchDir scratch;
    write_volume(ramp_volume(oblique_geometry()), scratch / "volume.mgh");
    const std::vector<unsigned char> good = read_bytes(scratch / "volume.mgh");
    const auto with = [&](std::size_t offset, std::vector<unsigned char> bytes, std::size_t keep = 0) {
        std::vector<unsigned char> file(good.begin(), keep ? good.begin() + static_cast<std::ptrdiff_t>(keep) : good.end());
        std::copy(bytes.begin(), bytes.end(), file.begin() + static_cast<std::ptrdiff_t>(offset));
        write_bytes(scratch / "damaged.mgh", file);
        return read_error(scratch / "damaged.mgh");
    };
    EXPECT_CONTAINS(with(0, {}, 200), "less than the format's 284-byte header");
    EXPECT_CONTAINS(with(0, {0, 0, 0, 2}), "its first word (the format version) is 2");
    EXPECT_CONTAINS(with(16, {0, 0, 0, 3}), "holds 3 frames (a 4D volume)");
    EXPECT_CONTAINS(with(20, {0, 0, 0, 6}), "MGH type 6");
    EXPECT_CONTAINS(with(4, {0xff, 0xff, 0xff, 0xff}), "its size is -1×5×4");
    EXPECT_CONTAINS(with(30, {0, 0, 0, 0}), "voxel size 0 is 0 mm");
    EXPECT_CONTAINS(with(0, {}, good.size() - 8), "is truncated: its header promises 7×5×4 float32 voxels (560 bytes after the header)");
    // No RAS geometry (goodRASFlag 0): FreeSurfer's default, 1 mm LIA slices centred at 0 (mri.c's
    // ras_good_flag == 0 case), said in a warning.
    std::vector<unsigned char> flat = good;
    flat[28] = flat[29] = 0;
    write_bytes(scratch / "flat.mgh", flat);
    const Volume assumed = read_volume(scratch / "flat.mgh");
    ASSERT_EQ(assumed.warnings.size(), 1u);
    EXPECT_CONTAINS(assumed.warnings[0], "goodRASFlag 0");
    EXPECT_EQ(assumed.geometry.spacing, (std::array<double, 3>{1, 1, 1}));
    // LPS columns of x → left, y → inferior, z → anterior.
    EXPECT_EQ(assumed.geometry.direction, (std::array<double, 9>{1, 0, 0, 0, 0, -1, 0, -1, 0}));
    EXPECT_EQ(assumed.geometry.origin, (std::array<double, 3>{-3.5, 2.0, 2.5}));  // centre voxel (3.5, 2.5, 2) at 0
    // A gzip stream cut short.
    write_volume(ramp_volume(oblique_geometry()), scratch / "volume.mgz");
    std::vector<unsigned char> gz = read_bytes(scratch / "volume.mgz");
    gz.resize(gz.size() / 2);
    write_bytes(scratch / "cut.mgz", gz);
    EXPECT_CONTAINS(read_error(scratch / "cut.mgz"), "cut.mgz");
}

TEST(VolumeIoErrors, WritingFailuresSayWhy) {
    ScratchDir scratch;
    const Volume volume = ramp_volume(oblique_geometry());
    for (const char* name :
         {"missing_folder/out.nii.gz", "missing_folder/out.nii", "missing_folder/out.mha", "missing_folder/out.mhd"}) {
        const std::string message = silent_error([&] { write_volume(volume, scratch / name); });
        EXPECT_CONTAINS(message, "cannot write");
        EXPECT_CONTAINS(message, "missing_folder");
    }
    EXPECT_CONTAINS(error_message([&] { write_volume(volume, scratch / "out.png"); }),
                    "Tessera writes volumes as .nii, .nii.gz, .mha, .mhd");
    Volume wrong = volume;
    wrong.geometry.size[0] = 8;
    EXPECT_CONTAINS(error_message([&] { write_volume(wrong, scratch / "out.mha"); }),
                    "expected f32 voxels of shape [4, 5, 8]");
    Volume sheared = volume;
    sheared.geometry.direction = {1, 0.5, 0, 0, 1, 0, 0, 0, 1};
    EXPECT_CONTAINS(error_message([&] { write_volume(sheared, scratch / "out.nii"); }), "orthonormal");
    EXPECT_NO_THROW(write_volume(sheared, scratch / "out.mha"));
}
