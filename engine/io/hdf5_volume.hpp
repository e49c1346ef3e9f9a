// HDF5 volumes: one dataset inside a file, named as CREMI and most EM tools do,
//
//   "sample_A.h5:/volumes/raw"                  the dataset /volumes/raw of sample_A.h5
//   "sample_A.h5:/volumes/labels/neuron_ids"    its labels
//   "sample_A.h5"                               the file's only 2D or 3D dataset, or /volumes/raw
//
// read_volume, read_label_map, write_volume, write_label_map and open_region_reader (volume_region.hpp)
// take such names wherever they take a path. Datasets are [z, y, x] (C order, x fastest) or [y, x], any
// integer or float type, contiguous or chunked with any filter this machine's HDF5 has (gzip, szip,
// shuffle, ...). Geometry: the `resolution` attribute ([z, y, x] in nm, CREMI) or `element_size_um`
// ([z, y, x] in µm, ilastik and Fiji) gives the spacing, `offset` ([z, y, x] in nm, CREMI) the origin,
// and `direction` (row-major 3×3, LPS, written by Tessera only when it is not the identity) the axes.
//
//   for (const Hdf5DatasetInfo& dataset : list_hdf5_datasets("sample_A.h5")) std::puts(dataset.name.c_str());
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

struct Hdf5DatasetName {
    std::filesystem::path file;
    std::string dataset;  // "/volumes/raw"; empty: the file's default (see above)
};

// Splits "file.h5:/volumes/raw" (extensions .h5, .hdf5, .hdf, .he5, any case); nothing when `text` names
// no HDF5 file (no such extension at its end or before ":").
std::optional<Hdf5DatasetName> parse_hdf5_name(std::string_view text);
bool is_hdf5_name(const std::filesystem::path& path);

struct Hdf5DatasetInfo {
    std::string name;                   // "/volumes/raw"
    std::vector<std::int64_t> shape;    // as stored: [z, y, x], [y, x], ...
    std::string scalar_type;            // "uint8", "float32", ...; "" for types Tessera cannot read
    std::string storage;                // "contiguous", "chunked 64×64×64, gzip level 4 + shuffle"
    std::optional<std::array<double, 3>> spacing_mm;  // [x, y, z] from resolution / element_size_um
    bool readable = false;  // 2D or 3D, an integer or float type, every filter available here
    std::string problem;    // why not, when !readable
};

// Every dataset of the file, in name order. Throws for a file HDF5 cannot open.
std::vector<Hdf5DatasetInfo> list_hdf5_datasets(const std::filesystem::path& file);

// The dataset an HDF5 name without one stands for: /volumes/raw when present, else the file's only
// readable dataset; throws listing the datasets when that leaves a choice.
std::string default_hdf5_dataset(const std::filesystem::path& file);

}  // namespace tessera
