// Internal to engine/io: voxels as a format reader found them, before they become a Volume or a
// LabelMap, and the per-format readers and writers behind volume_io.hpp. No toolkit types here.
//
// A reader hands back the toolkit's own buffer (VTK image, OpenCV matrix) with its element type and how
// its rows and slices are ordered; one conversion pass then writes the f32 or i32 tensor, so a volume
// is copied exactly once after decoding.
#pragma once

#include "io/volume.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::io_detail {

enum class ScalarType : std::uint8_t { U8, I8, U16, I16, U32, I32, U64, I64, F32, F64 };

std::string_view scalar_type_name(ScalarType type);  // "uint8", "int16", "float32", ...
std::size_t scalar_type_size(ScalarType type);       // bytes
bool is_integer(ScalarType type);
// Inverse of scalar_type_name; false for names it does not know.
bool scalar_type_from_name(std::string_view name, ScalarType& type);

// A format's name for an element type ("MET_SHORT", "unsigned short"): the formats' lookup tables.
struct NamedScalarType {
    std::string_view name;
    ScalarType scalar_type;
};

struct RawImage {
    ImageGeometry geometry;  // in the order of the file, LPS mm
    ScalarType scalar_type = ScalarType::F32;
    const void* voxels = nullptr;       // size[0] × size[1] × size[2] elements, i fastest
    std::shared_ptr<const void> owner;  // keeps `voxels` alive
    bool rows_reversed = false;         // stored row r is geometry row size[1] - 1 - r
    bool slices_reversed = false;       // stored slice s is geometry slice size[2] - 1 - s
    double slope = 1.0;                 // value = stored * slope + intercept
    double intercept = 0.0;
    std::string source_scalar_type;  // element type in the file, as scalar_type_name
    std::vector<std::string> warnings;  // what the reader let through (Volume::warnings)
    std::vector<LabelDescription> label_descriptions;  // segments a label file names (.seg.nrrd)
};

// f32 [D, H, W] with slope and intercept applied.
Tensor to_volume_voxels(const RawImage& image);
// The Volume read_volume returns for `raw` read from `path` (its non-finite voxels counted and reported).
Volume volume_from_raw(const RawImage& raw, const std::filesystem::path& path);
// i32 [D, H, W]; throws, naming `path` and the first offending voxel, if a value is not a whole number
// in the int32 range.
Tensor to_label_voxels(const RawImage& image, const std::filesystem::path& path);

// A dense buffer in the element type chosen for writing, i fastest.
struct EncodedVoxels {
    ScalarType scalar_type = ScalarType::F32;
    std::vector<std::byte> bytes;
};

// Throws unless reading `num_voxels` voxels of `stored_bytes_per_voxel` bytes each (plus the 4-byte
// f32 or i32 copy every volume becomes) fits max_volume_bytes(): called by every reader before it
// allocates. `size_text` is the grid as the header gives it ("512×512×1000").
void check_volume_budget(const std::filesystem::path& path, const std::string& size_text, std::uint64_t num_voxels,
                         std::uint64_t stored_bytes_per_voxel);

// Reverses the bytes of each of `count` elements of `element_bytes` (a file's other byte order).
void swap_byte_order(std::byte* elements, std::uint64_t count, std::size_t element_bytes);

// Whether `type` holds `value` exactly: a whole number in its range for the integer types (64-bit ones up
// to 2^53, where doubles stop counting every integer), a finite value in range for float32 and float64.
bool holds_exactly(ScalarType type, double value);

// The data file a header names (`field_text`: how the header writes it, "ElementDataFile = x.raw"), as
// MetaImage and NRRD headers do: a regular file beside the header. One outside the header's folder
// (ElementDataFile = /etc/passwd would read any file as voxels) only with
// TESSERA_ALLOW_EXTERNAL_DATA_FILES=1.
std::filesystem::path checked_data_file(const std::filesystem::path& header, const std::string& name,
                                        const std::string& field_text);

// "'dir/file.nii.gz'": how messages name a file.
std::string quoted(const std::filesystem::path& path);
// Lower-case extension including a ".gz" before it: ".nii.gz", ".mha", "" for none.
std::string full_extension(const std::filesystem::path& path);

// ---- per-format readers and writers ---------------------------------------------------------------

RawImage read_nifti(const std::filesystem::path& path);
// A NIfTI file's header, checked, for reading it by region: the RawImage without voxels, and where they lie.
struct NiftiLayout {
    RawImage description;          // voxels null
    std::uint64_t data_offset = 0;  // vox_offset: bytes before the first voxel
    bool swapped = false;           // stored in the other byte order
    bool compressed = false;        // .nii.gz: cannot be read by region
};
NiftiLayout read_nifti_layout(const std::filesystem::path& path);
void write_nifti(const ImageGeometry& geometry, const EncodedVoxels& voxels, const std::filesystem::path& path);

RawImage read_metaimage(const std::filesystem::path& path);
void write_metaimage(const ImageGeometry& geometry, const EncodedVoxels& voxels, const std::filesystem::path& path);

// NRRD: .nrrd (attached data), .nhdr (a detached data file beside it).
RawImage read_nrrd(const std::filesystem::path& path);
// `segments`: a label map's labels as 3D Slicer's segments (names, colours, label values), read back by
// Slicer and by read_label_map; empty for images.
void write_nrrd(const ImageGeometry& geometry, const EncodedVoxels& voxels, const std::filesystem::path& path,
                const std::vector<LabelDescription>& segments = {});

// FreeSurfer's .mgh and .mgz (gzipped).
RawImage read_mgh(const std::filesystem::path& path);
void write_mgh(const ImageGeometry& geometry, const EncodedVoxels& voxels, const std::filesystem::path& path);

// A folder holding one series, or a single file (dicom_series.hpp: several series, through GDCM).
RawImage read_dicom(const std::filesystem::path& path);
bool has_dicom_preamble(const std::filesystem::path& path);

// PNG, JPEG or TIFF; every page of a TIFF becomes a slice.
RawImage read_image2d(const std::filesystem::path& path);
std::size_t count_tiff_pages(const std::filesystem::path& path);

}  // namespace tessera::io_detail
