// Reading and writing volumes and label maps.
//
// Formats read: NIfTI-1/2 (.nii, .nii.gz), MetaImage (.mha, .mhd + data file), NRRD (.nrrd, .nhdr + data
// file), FreeSurfer's MGH (.mgh, .mgz), DICOM through GDCM (a folder holding one series, or a single file; several
// series: dicom_series.hpp), HDF5 datasets ("file.h5:/volumes/raw", hdf5_volume.hpp), TIFF (.tif/.tiff: several pages are
// a stack of slices, one page a 2D image), PNG and JPEG (2D images, colour converted to luminance).
// Formats written: .nii, .nii.gz, .mha, .mhd (+ .raw beside it), .nrrd, .nhdr (+ .raw), .mgh, .mgz, and HDF5
// datasets ("out.h5:/volumes/labels/clefts": added to an HDF5 file that exists).
//
//   Volume ct = read_volume("case01/ct.nii.gz");        // voxels f32 [D, H, W], rescale applied
//   LabelMap organs = read_label_map("case01/organs.nii.gz");
//   check_same_grid(ct.geometry, organs.geometry, "organs.nii.gz");
//   write_volume(ct, "ct_copy.mha");
//
// Geometry is converted to LPS millimetres (see volume.hpp): NIfTI's RAS is flipped in x and y; voxel
// order is the file's. 2D images get size {w, h, 1}, 1 mm spacing and identity direction.
//
// Every failure throws tessera::Error naming the file, what is wrong and, when known, what to do.
// Nothing is printed: the toolkits' own error output is captured and folded into the message.
#pragma once

#include "io/volume.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace tessera {

enum class VolumeFormat { Nifti, MetaImage, Nrrd, Mgh, DicomSeries, TiffStack, Image2D, Hdf5 };

std::string_view volume_format_name(VolumeFormat format);  // "NIfTI", "MetaImage", ...

// By extension (case-insensitive); an HDF5 name ("file.h5", "file.h5:/dataset") is HDF5; a directory is a DICOM series, and so is a file starting with the
// DICOM preamble whatever its name. A TIFF with more than one page is a stack, else a 2D image (an
// existing file is opened to count its pages). Throws for an unknown extension, listing the supported
// ones.
VolumeFormat detect_volume_format(const std::filesystem::path& path);

// Extensions the readers accept, lower case with the dot (".nii.gz"), for file dialogs. DICOM is also
// read from a folder.
std::vector<std::string> supported_volume_extensions();
// Extensions write_volume and write_label_map accept.
std::vector<std::string> writable_volume_extensions();

// Reads any supported format; voxels become f32 after the file's rescale slope/intercept.
Volume read_volume(const std::filesystem::path& path);

// Reads any supported format; every voxel must hold a whole number in the int32 range (after any
// rescale), else the error names the first offending voxel.
LabelMap read_label_map(const std::filesystem::path& path);

// Writes .nii, .nii.gz, .mha, .mhd (the .mhd's data goes to a .raw of the same stem), .nrrd (gzip),
// .nhdr (its data to a .raw, like .mhd), an HDF5 dataset (chunked 64³, gzip; CREMI's resolution attribute), .mgh or .mgz (MGH
// stores uint8, int16, int32 or float32: other types become the nearest that holds every value). Volumes are
// stored in their source_scalar_type when every voxel fits it exactly, else float32; label maps as
// uint8, int16 or int32, the smallest that holds their range. NIfTI needs an orthonormal direction
// (a left-handed one is stored with qfac = -1).
void write_volume(const Volume& volume, const std::filesystem::path& path);
void write_label_map(const LabelMap& label_map, const std::filesystem::path& path);

}  // namespace tessera
