// Fuzz target: HDF5 files. The input becomes fuzz.h5; its datasets are listed, every one Tessera calls
// readable is read whole as a volume and as labels, and by region (two boxes: the first voxel and the
// far corner's 2×2×2), so the superblock, object headers, B-trees, attributes, chunk index and filter
// pipeline of the HDF5 library are all reached through Tessera's entry points.
#include "io/hdf5_volume.hpp"
#include "io/volume_region.hpp"
#include "volume_target.hpp"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tessera;
    fuzz::use_fuzzing_volume_budget();
    const std::filesystem::path file = fuzz::input_file("fuzz.h5", data, size);
    std::vector<Hdf5DatasetInfo> datasets;
    fuzz::expect_success_or_error([&] { datasets = list_hdf5_datasets(file); });
    for (const Hdf5DatasetInfo& dataset : datasets) {
        if (!dataset.readable) continue;
        const std::filesystem::path name = file.string() + ":" + dataset.name;
        fuzz::read_volume_and_labels(name);
        fuzz::expect_success_or_error([&] {
            const auto reader = open_region_reader(name, std::size_t{1} << 20);
            const ImageGeometry& geometry = reader->geometry();
            std::vector<float> voxels(8);
            reader->read(VoxelBox{{0, 0, 0}, {1, 1, 1}}, voxels.data());
            VoxelBox corner;
            for (int axis = 0; axis < 3; ++axis) {
                corner.extent[axis] = std::min<std::int64_t>(2, geometry.size[axis]);
                corner.begin[axis] = geometry.size[axis] - corner.extent[axis];
            }
            std::vector<std::int32_t> labels(8);
            reader->read_labels(corner, labels.data());
        });
    }
    return 0;
}
