// Format detection and the public read/write entry points; the formats live in <format>_io.cpp.
#include "io/volume_io.hpp"

#include "io/hdf5_detail.hpp"
#include "io/label_descriptions.hpp"

#include "io/raw_image.hpp"

#include "core/user_files.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tessera {

using io_detail::EncodedVoxels;
using io_detail::full_extension;
using io_detail::quoted;
using io_detail::RawImage;
using io_detail::ScalarType;

namespace {

std::string joined(const std::vector<std::string>& items) {
    std::string text;
    for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
    return text;
}

// A regular file, or a folder (a DICOM series); never a FIFO, a device or a socket (opening a FIFO
// blocks forever).
void check_exists(const std::filesystem::path& path) {
    require_plain_path(path.native(), "the image path");
    const FileKind kind = file_kind(path);
    TESSERA_CHECK(kind != FileKind::Missing, "cannot read " << quoted(path) << ": no such file or folder. Check the path.");
    TESSERA_CHECK(kind == FileKind::Regular || kind == FileKind::Folder,
                  "cannot read " << quoted(path) << ": it is " << file_kind_name(kind)
                                 << ", not a regular file. Tessera reads images only from regular files (or a folder of DICOM "
                                    "files): copy the data into a file.");
}

RawImage read_raw(const std::filesystem::path& path) {
    if (is_hdf5_name(path)) return io_detail::read_hdf5(path);  // "file.h5:/dataset" names no file itself
    check_exists(path);
    switch (detect_volume_format(path)) {
        case VolumeFormat::Nifti:
            return io_detail::read_nifti(path);
        case VolumeFormat::MetaImage:
            return io_detail::read_metaimage(path);
        case VolumeFormat::Mgh:
            return io_detail::read_mgh(path);
        case VolumeFormat::Nrrd:
            return io_detail::read_nrrd(path);
        case VolumeFormat::DicomSeries:
            return io_detail::read_dicom(path);
        case VolumeFormat::TiffStack:
        case VolumeFormat::Image2D:
            return io_detail::read_image2d(path);
        case VolumeFormat::Hdf5:
            return io_detail::read_hdf5(path);
    }
    TESSERA_ASSERT(false, "unhandled volume format");
    return {};
}

void check_writable_extension(const std::filesystem::path& path) {
    if (is_hdf5_name(path)) return;
    const std::vector<std::string> writable = writable_volume_extensions();
    const std::string extension = full_extension(path);
    TESSERA_CHECK(std::find(writable.begin(), writable.end(), extension) != writable.end(),
                  "cannot write " << quoted(path) << ": Tessera writes volumes as " << joined(writable)
                                  << (extension.empty() ? "; the name has no extension" : ", not " + extension) << ".");
}

void check_geometry_for_writing(const ImageGeometry& geometry, const Tensor& voxels, DType dtype,
                                const std::filesystem::path& path) {
    for (int axis = 0; axis < 3; ++axis) {
        TESSERA_CHECK(geometry.size[axis] > 0, "cannot write " << quoted(path) << ": grid size along axis " << axis
                                                               << " is " << geometry.size[axis]);
        TESSERA_CHECK(std::isfinite(geometry.spacing[axis]) && geometry.spacing[axis] > 0,
                      "cannot write " << quoted(path) << ": voxel spacing along axis " << axis << " is "
                                      << geometry.spacing[axis] << " mm, it must be positive");
    }
    const Shape expected = {geometry.size[2], geometry.size[1], geometry.size[0]};
    TESSERA_CHECK(voxels.is_defined() && voxels.shape() == expected && voxels.dtype() == dtype,
                  "cannot write " << quoted(path) << ": expected " << dtype_name(dtype) << " voxels of shape "
                                  << shape_to_string(expected) << " ([D, H, W] of the geometry), got "
                                  << (voxels.is_defined() ? dtype_name(voxels.dtype()) : "no") << " voxels of shape "
                                  << shape_to_string(voxels.shape()));
}

template <class Target, class Source>
EncodedVoxels encode(const Source* values, std::int64_t count, ScalarType type) {
    EncodedVoxels encoded;
    encoded.scalar_type = type;
    encoded.bytes.resize(static_cast<std::size_t>(count) * sizeof(Target));
    auto* out = reinterpret_cast<Target*>(encoded.bytes.data());
    for (std::int64_t index = 0; index < count; ++index) out[index] = static_cast<Target>(values[index]);
    return encoded;
}

template <class Source>
EncodedVoxels encode_as(const Source* values, std::int64_t count, ScalarType type) {
    switch (type) {
        case ScalarType::U8:
            return encode<std::uint8_t>(values, count, type);
        case ScalarType::I8:
            return encode<std::int8_t>(values, count, type);
        case ScalarType::U16:
            return encode<std::uint16_t>(values, count, type);
        case ScalarType::I16:
            return encode<std::int16_t>(values, count, type);
        case ScalarType::U32:
            return encode<std::uint32_t>(values, count, type);
        case ScalarType::I32:
            return encode<std::int32_t>(values, count, type);
        case ScalarType::U64:
            return encode<std::uint64_t>(values, count, type);
        case ScalarType::I64:
            return encode<std::int64_t>(values, count, type);
        case ScalarType::F32:
            return encode<float>(values, count, type);
        case ScalarType::F64:
            return encode<double>(values, count, type);
    }
    TESSERA_ASSERT(false, "unhandled scalar type");
    return {};
}

// The volume's source type when every voxel fits it exactly, else float32.
ScalarType volume_write_type(const Volume& volume, const float* values, std::int64_t count) {
    ScalarType source{};
    if (!io_detail::scalar_type_from_name(volume.source_scalar_type, source) || !io_detail::is_integer(source)) {
        return ScalarType::F32;
    }
    for (std::int64_t index = 0; index < count; ++index) {
        if (!io_detail::holds_exactly(source, values[index])) return ScalarType::F32;
    }
    return source;
}

ScalarType label_write_type(const std::int32_t* labels, std::int64_t count) {
    std::int32_t lowest = 0, highest = 0;
    if (count > 0) {
        const auto [minimum, maximum] = std::minmax_element(labels, labels + count);
        lowest = *minimum;
        highest = *maximum;
    }
    if (lowest >= 0 && highest <= 255) return ScalarType::U8;
    if (lowest >= -32768 && highest <= 32767) return ScalarType::I16;
    return ScalarType::I32;
}

// The type `path`'s format stores for voxels chosen as `type`. MGH stores uint8, int16, int32 and float32
// only: int8 and uint16 widen to the next that holds them, wider integers go to float32 (exact: every
// voxel written comes from an f32 or i32 tensor, and i32 label maps are never wider than int32).
ScalarType stored_type(ScalarType type, const std::filesystem::path& path) {
    const std::string extension = full_extension(path);
    if (extension != ".mgh" && extension != ".mgz") return type;
    switch (type) {
        case ScalarType::U8:
        case ScalarType::I16:
        case ScalarType::I32:
        case ScalarType::F32:
            return type;
        case ScalarType::I8:
            return ScalarType::I16;
        case ScalarType::U16:
            return ScalarType::I32;
        default:
            return ScalarType::F32;
    }
}

void write_encoded(const ImageGeometry& geometry, const EncodedVoxels& voxels, const std::filesystem::path& path,
                   const std::vector<LabelDescription>& segments = {}) {
    const std::string extension = full_extension(path);
    if (is_hdf5_name(path)) {
        io_detail::write_hdf5(geometry, voxels, path);
    } else if (extension == ".nii" || extension == ".nii.gz") {
        io_detail::write_nifti(geometry, voxels, path);
    } else if (extension == ".mgh" || extension == ".mgz") {
        io_detail::write_mgh(geometry, voxels, path);
    } else if (extension == ".nrrd" || extension == ".nhdr") {
        io_detail::write_nrrd(geometry, voxels, path, segments);
    } else {
        io_detail::write_metaimage(geometry, voxels, path);
    }
}

}  // namespace

std::string_view volume_format_name(VolumeFormat format) {
    switch (format) {
        case VolumeFormat::Nifti:
            return "NIfTI";
        case VolumeFormat::MetaImage:
            return "MetaImage";
        case VolumeFormat::Mgh:
            return "MGH";
        case VolumeFormat::Nrrd:
            return "NRRD";
        case VolumeFormat::DicomSeries:
            return "DICOM series";
        case VolumeFormat::TiffStack:
            return "TIFF stack";
        case VolumeFormat::Image2D:
            return "2D image";
        case VolumeFormat::Hdf5:
            return "HDF5";
    }
    return "?";
}

std::vector<std::string> supported_volume_extensions() {
    return {".nii", ".nii.gz", ".mha", ".mhd", ".nrrd", ".nhdr", ".mgh", ".mgz", ".h5", ".hdf5", ".dcm", ".tif", ".tiff", ".png", ".jpg", ".jpeg"};
}

std::vector<std::string> writable_volume_extensions() {
    return {".nii", ".nii.gz", ".mha", ".mhd", ".nrrd", ".nhdr", ".mgh", ".mgz", ".h5", ".hdf5"};
}

VolumeFormat detect_volume_format(const std::filesystem::path& path) {
    std::error_code error;
    if (is_hdf5_name(path)) return VolumeFormat::Hdf5;
    const FileKind kind = file_kind(path);
    if (kind == FileKind::Folder) return VolumeFormat::DicomSeries;
    // Nothing below opens a FIFO, a device or a socket (reading one can block forever).
    if (kind != FileKind::Regular && kind != FileKind::Missing) check_exists(path);
    const std::string extension = full_extension(path);
    if (extension == ".nii" || extension == ".nii.gz") return VolumeFormat::Nifti;
    if (extension == ".mha" || extension == ".mhd") return VolumeFormat::MetaImage;
    if (extension == ".mgh" || extension == ".mgz") return VolumeFormat::Mgh;
    if (extension == ".nrrd" || extension == ".nhdr") return VolumeFormat::Nrrd;
    if (extension == ".dcm") return VolumeFormat::DicomSeries;
    if (extension == ".png" || extension == ".jpg" || extension == ".jpeg") return VolumeFormat::Image2D;
    if (extension == ".tif" || extension == ".tiff") {
        if (!std::filesystem::is_regular_file(path, error)) return VolumeFormat::TiffStack;
        return io_detail::count_tiff_pages(path) > 1 ? VolumeFormat::TiffStack : VolumeFormat::Image2D;
    }
    if (std::filesystem::is_regular_file(path, error) && io_detail::has_dicom_preamble(path)) {
        return VolumeFormat::DicomSeries;
    }
    TESSERA_REJECT("cannot tell the format of "
                   << quoted(path) << ": "
                   << (extension.empty() ? "it has no extension" : "unknown extension " + extension)
                   << ". Supported: " << joined(supported_volume_extensions()) << ", or a folder of DICOM files.");
}

Volume read_volume(const std::filesystem::path& path) { return io_detail::volume_from_raw(read_raw(path), path); }

Volume io_detail::volume_from_raw(const RawImage& raw, const std::filesystem::path& path) {
    Volume volume;
    volume.geometry = raw.geometry;
    volume.voxels = io_detail::to_volume_voxels(raw);
    volume.source_scalar_type = raw.source_scalar_type;
    volume.source_path = path.string();
    volume.warnings = raw.warnings;
    // Non-finite voxels (NaN, ±Inf, or float64 values beyond f32) are counted here, once, for every
    // reader: a volume that holds them is reported, and refused for training unless asked.
    const float* values = volume.voxels.data<float>();
    const std::int64_t count = volume.voxels.num_elements();
    for (std::int64_t index = 0; index < count; ++index) {
        if (std::isfinite(values[index])) [[likely]] continue;
        if (volume.num_non_finite == 0) {
            const std::int64_t row_length = volume.geometry.size[0], slice_length = row_length * volume.geometry.size[1];
            volume.first_non_finite = {index % row_length, (index / row_length) % volume.geometry.size[1], index / slice_length};
        }
        ++volume.num_non_finite;
    }
    if (volume.num_non_finite > 0) {
        const auto& first = volume.first_non_finite;
        volume.warnings.push_back(std::to_string(volume.num_non_finite) + " voxel" + (volume.num_non_finite == 1 ? " is" : "s are") +
                                  " NaN or infinite (the first at i, j, k = " + std::to_string(first[0]) + ", " +
                                  std::to_string(first[1]) + ", " + std::to_string(first[2]) + ")");
    }
    return volume;
}

LabelMap read_label_map(const std::filesystem::path& path) {
    const RawImage raw = read_raw(path);
    LabelMap label_map;
    label_map.geometry = raw.geometry;
    label_map.labels = io_detail::to_label_voxels(raw, path);
    label_map.source_path = path.string();
    label_map.warnings = raw.warnings;
    label_map.descriptions = raw.label_descriptions;
    // A file that names nothing itself may have a sidecar that does (MRIcron's aal.nii.txt and .lut).
    if (label_map.descriptions.empty()) label_map.descriptions = find_label_descriptions(path, label_map.warnings);
    return label_map;
}

void write_volume(const Volume& volume, const std::filesystem::path& path) {
    check_writable_extension(path);
    check_geometry_for_writing(volume.geometry, volume.voxels, DType::F32, path);
    const Tensor dense = volume.voxels.contiguous();
    const float* values = dense.data<float>();
    const std::int64_t count = dense.num_elements();
    write_encoded(volume.geometry, encode_as(values, count, stored_type(volume_write_type(volume, values, count), path)), path);
}

void write_label_map(const LabelMap& label_map, const std::filesystem::path& path) {
    check_writable_extension(path);
    check_geometry_for_writing(label_map.geometry, label_map.labels, DType::I32, path);
    const Tensor dense = label_map.labels.contiguous();
    const std::int32_t* labels = dense.data<std::int32_t>();
    const std::int64_t count = dense.num_elements();
    // NRRD keeps the labels' names and colours as 3D Slicer's segments: every label present, named from the
    // map's descriptions ("Label 7" where it has none). A .seg.nrrd always gets them; a plain .nrrd when named.
    std::vector<LabelDescription> segments;
    const std::string extension = full_extension(path);
    std::string name = path.filename().string();
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const bool seg_nrrd = name.ends_with(".seg.nrrd");
    if ((extension == ".nrrd" || extension == ".nhdr") && (seg_nrrd || !label_map.descriptions.empty())) {
        for (std::int32_t value : label_map.present_labels()) {
            if (value == 0) continue;
            LabelDescription segment{value, "Label " + std::to_string(value), std::nullopt};
            for (const LabelDescription& d : label_map.descriptions) {
                if (d.value == value) segment = d;
            }
            segments.push_back(segment);
        }
    }
    write_encoded(label_map.geometry, encode_as(labels, count, stored_type(label_write_type(labels, count), path)), path, segments);
}

}  // namespace tessera
