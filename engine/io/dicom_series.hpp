// DICOM series through GDCM: every transfer syntax GDCM decodes (uncompressed little and big endian,
// JPEG lossless and baseline, JPEG-LS, JPEG 2000, RLE, deflate), single-frame slices and multi-frame
// (enhanced) objects, several series in one folder told apart by Series Instance UID.
//
//   for (const DicomSeriesInfo& series : list_dicom_series("study/")) { ... series.description ... }
//   Volume ct = read_dicom_series("study/", "3");          // series number 3, or its UID
//   Volume only = read_volume("series_folder/");            // a folder holding one series (volume_io.hpp)
//
// Listing reads each file's header only (up to its pixel data). Reading stacks the series' slices (each
// file's frames) in the order of their position along the slice normal; geometry in LPS: i along Image
// Orientation's row vector, j along its column vector, k along their cross product, the origin the first
// slice's Image Position, the slice spacing the mean distance between consecutive positions. A gantry
// tilt (positions stepping off the normal) and uneven spacing are reported in Volume::warnings, not
// resampled; two slices at one position, mixed orientations or sizes are errors. Values are Rescale
// Slope × stored + Rescale Intercept, as f32.
#pragma once

#include "io/volume.hpp"

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera {

struct DicomSeriesInfo {
    std::string series_uid;           // Series Instance UID ("" when the files have none)
    std::int64_t series_number = 0;   // Series Number (0 when absent)
    std::string patient_name, patient_id;
    std::string study_description, study_date;  // study date as written, YYYYMMDD
    std::string description;          // Series Description
    std::string modality;             // CT, MR, PT, RTDOSE, …
    std::string transfer_syntax;      // of the first file, by name: "JPEG-LS lossless", "explicit little endian", …
    std::int64_t num_files = 0;
    std::int64_t num_slices = 0;      // frames of all its files
    std::array<std::int64_t, 2> size{};     // columns, rows
    std::array<double, 3> spacing{1, 1, 1};  // mm: between columns, between rows, between slices (mean)
    std::vector<std::filesystem::path> files;  // sorted by name
    std::vector<std::string> warnings;         // gantry tilt, uneven spacing
};

// The image series in `path` (a folder, or one file), ordered by series number then UID. Files that are
// not DICOM, or DICOM without pixels (reports, DICOMDIR), are skipped. Throws when there is none.
std::vector<DicomSeriesInfo> list_dicom_series(const std::filesystem::path& path);

// Series `series` of `path` — its number ("3") or UID — as a volume; "" reads the only series there is
// (several: an error listing them).
Volume read_dicom_series(const std::filesystem::path& path, const std::string& series);

}  // namespace tessera
