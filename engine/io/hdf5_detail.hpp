// Internal to engine/io: one HDF5 dataset open for reading by box, or for writing by box. No HDF5
// type appears here; hdf5_io.cpp holds the library's handles.
#pragma once

#include "io/hdf5_volume.hpp"
#include "io/raw_image.hpp"
#include "io/volume_region.hpp"

#include <memory>

namespace tessera::io_detail {

struct Hdf5Handles;

class Hdf5Dataset {
public:
    // `path`: "file.h5:/dataset" or "file.h5" (the file's default dataset). Throws for a missing or
    // damaged file, a missing dataset, or one Tessera cannot read (saying why).
    explicit Hdf5Dataset(const std::filesystem::path& path, std::size_t cache_bytes = std::size_t{64} << 20);
    ~Hdf5Dataset();
    Hdf5Dataset(const Hdf5Dataset&) = delete;
    Hdf5Dataset& operator=(const Hdf5Dataset&) = delete;

    const ImageGeometry& geometry() const { return m_geometry; }
    ScalarType scalar_type() const { return m_scalar_type; }   // as stored
    const std::string& storage() const { return m_storage; }   // "chunked 64×64×64, gzip level 4 + shuffle"
    const std::vector<std::string>& warnings() const { return m_warnings; }
    std::string display_name() const;                          // "file.h5:/volumes/raw"

    // The box's voxels converted by HDF5 to `memory_type`, [k, j, i] with i fastest.
    void read(const VoxelBox& box, ScalarType memory_type, void* out) const;

private:
    std::unique_ptr<Hdf5Handles> m_state;
    Hdf5DatasetName m_name;
    ImageGeometry m_geometry;
    int m_rank = 3;
    ScalarType m_scalar_type = ScalarType::F32;
    std::string m_storage;
    std::vector<std::string> m_warnings;
};

// A dataset created for `geometry` (chunked 64³, gzip level 4 with shuffle; CREMI's resolution and offset
// attributes) and written box by box: sliding-window prediction streams its output this way. An HDF5 file
// that exists keeps its other datasets; a dataset of the same name is replaced.
class Hdf5DatasetWriter {
public:
    // compress = false stores the chunks as they are (noise-like data gains little from gzip, and costs
    // its time on every read).
    Hdf5DatasetWriter(const std::filesystem::path& path, const ImageGeometry& geometry, ScalarType scalar_type, bool compress = true);
    ~Hdf5DatasetWriter();
    Hdf5DatasetWriter(const Hdf5DatasetWriter&) = delete;
    Hdf5DatasetWriter& operator=(const Hdf5DatasetWriter&) = delete;

    // `voxels`: the box's voxels in the writer's scalar type, [k, j, i] with i fastest.
    void write(const VoxelBox& box, const void* voxels);
    // Flushes and closes the file; throws when that fails (a full disk).
    void finish();

private:
    std::unique_ptr<Hdf5Handles> m_state;
    Hdf5DatasetName m_name;
    ImageGeometry m_geometry;
    ScalarType m_scalar_type;
};

RawImage read_hdf5(const std::filesystem::path& path);
void write_hdf5(const ImageGeometry& geometry, const EncodedVoxels& voxels, const std::filesystem::path& path);

}  // namespace tessera::io_detail
