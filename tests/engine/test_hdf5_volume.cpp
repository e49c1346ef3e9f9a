// HDF5 datasets (round trips, CREMI naming, errors) and reading by region: every box of a region
// reader must hold what the whole read (a separate code path: zlib/VTK for NIfTI) puts there.
// Files written by an independent writer (h5py, nibabel) are checked in tests/app/hdf5_checks.py.
#include "volume_io_test_support.hpp"

#include "io/hdf5_volume.hpp"
#include "io/overview_cache.hpp"
#include "io/volume_overview.hpp"
#include "io/volume_region.hpp"

#include "core/random.hpp"

#include <chrono>
#include <cstring>
#include <map>

namespace tessera::test {
namespace {

Volume cremi_volume(std::array<std::int64_t, 3> size, const std::string& scalar_type) {
    ImageGeometry geometry;
    geometry.size = size;
    geometry.spacing = {0.004, 0.004, 0.04};  // CREMI: 4 × 4 × 40 nm
    geometry.origin = {1.5, -2.25, 10.0};
    Volume volume = make_volume(geometry);
    volume.source_scalar_type = scalar_type;
    float* voxels = volume.voxels.data<float>();
    for (std::int64_t index = 0; index < geometry.num_voxels(); ++index) voxels[index] = static_cast<float>((index * 37) % 251);
    return volume;
}

void expect_error_containing(const std::function<void()>& action, std::initializer_list<std::string> parts) {
    const std::string message = error_message(action);
    for (const std::string& part : parts) EXPECT_CONTAINS(message, part);
}

void expect_grid_equal(const ImageGeometry& read, const ImageGeometry& written) {
    EXPECT_EQ(read.size, written.size);
    for (int axis = 0; axis < 3; ++axis) {
        EXPECT_NEAR(read.spacing[axis], written.spacing[axis], 1e-12) << "axis " << axis;
        EXPECT_NEAR(read.origin[axis], written.origin[axis], 1e-9) << "axis " << axis;
    }
    for (int index = 0; index < 9; ++index) EXPECT_NEAR(read.direction[index], written.direction[index], 1e-12);
}

TEST(Hdf5Names, SplitFileAndDataset) {
    auto name = parse_hdf5_name("data/sample_A.h5:/volumes/raw");
    ASSERT_TRUE(name.has_value());
    EXPECT_EQ(name->file, fs::path("data/sample_A.h5"));
    EXPECT_EQ(name->dataset, "/volumes/raw");
    name = parse_hdf5_name("B.HDF5:volumes/labels/clefts");  // case and a missing leading slash
    ASSERT_TRUE(name.has_value());
    EXPECT_EQ(name->file, fs::path("B.HDF5"));
    EXPECT_EQ(name->dataset, "/volumes/labels/clefts");
    name = parse_hdf5_name("plain.h5");
    ASSERT_TRUE(name.has_value());
    EXPECT_EQ(name->dataset, "");
    EXPECT_FALSE(parse_hdf5_name("head.nii.gz").has_value());
    EXPECT_FALSE(parse_hdf5_name("archive.h5.tar").has_value());
    EXPECT_EQ(detect_volume_format("x.h5:/volumes/raw"), VolumeFormat::Hdf5);
}

TEST(Hdf5Volume, RoundTripKeepsVoxelsGeometryAndType) {
    ScratchDir scratch;
    for (const std::string type : {"uint8", "int16", "float32"}) {
        Volume volume = cremi_volume({23, 17, 9}, type);
        if (type == "float32") volume.voxels.data<float>()[5] = -0.125f;
        volume.geometry.direction = {0, -1, 0, 1, 0, 0, 0, 0, 1};  // rotated in-plane: kept in the direction attribute
        const fs::path path = scratch / ("volume_" + type + ".h5");
        write_volume(volume, path.string() + ":/volumes/raw");
        const Volume read = read_volume(path.string() + ":/volumes/raw");
        EXPECT_EQ(read.source_scalar_type, type);
        expect_grid_equal(read.geometry, volume.geometry);
        ASSERT_EQ(read.voxels.shape(), volume.voxels.shape());
        EXPECT_EQ(std::memcmp(read.voxels.data<float>(), volume.voxels.data<float>(), volume.voxels.num_bytes()), 0) << type;
        EXPECT_TRUE(read.warnings.empty()) << read.warnings.front();
    }
}

TEST(Hdf5Volume, ImageAndLabelsShareAFileAndTheFileNameAloneMeansVolumesRaw) {
    ScratchDir scratch;
    const fs::path file = scratch / "sample.h5";
    const Volume volume = cremi_volume({16, 12, 5}, "uint8");
    LabelMap labels = make_label_map(volume.geometry);
    for (std::int64_t index = 0; index < volume.geometry.num_voxels(); ++index) labels.labels.data<std::int32_t>()[index] = static_cast<std::int32_t>(index % 3) * 1000;
    write_volume(volume, file.string() + ":/volumes/raw");
    write_label_map(labels, file.string() + ":/volumes/labels/clefts");
    write_volume(volume, file.string() + ":/volumes/raw");  // replaced, the labels kept

    const std::vector<Hdf5DatasetInfo> datasets = list_hdf5_datasets(file);
    ASSERT_EQ(datasets.size(), 2u);
    EXPECT_EQ(datasets[0].name, "/volumes/labels/clefts");
    EXPECT_EQ(datasets[0].scalar_type, "int16");  // the smallest type that holds 0 … 2000
    EXPECT_EQ(datasets[1].name, "/volumes/raw");
    EXPECT_EQ(datasets[1].shape, (std::vector<std::int64_t>{5, 12, 16}));  // [z, y, x]
    EXPECT_NE(datasets[1].storage.find("gzip"), std::string::npos) << datasets[1].storage;
    ASSERT_TRUE(datasets[1].spacing_mm.has_value());
    EXPECT_NEAR((*datasets[1].spacing_mm)[2], 0.04, 1e-12);

    EXPECT_EQ(default_hdf5_dataset(file), "/volumes/raw");
    const Volume whole = read_volume(file);
    EXPECT_EQ(std::memcmp(whole.voxels.data<float>(), volume.voxels.data<float>(), volume.voxels.num_bytes()), 0);
    const LabelMap read_labels = read_label_map(file.string() + ":/volumes/labels/clefts");
    EXPECT_EQ(std::memcmp(read_labels.labels.data<std::int32_t>(), labels.labels.data<std::int32_t>(), labels.labels.num_bytes()), 0);
}

TEST(Hdf5Volume, TwoDimensionalImages) {
    ScratchDir scratch;
    Volume image = cremi_volume({31, 7, 1}, "uint16");
    const fs::path path = scratch / "section.hdf5";
    write_volume(image, path.string() + ":/section");
    EXPECT_EQ(list_hdf5_datasets(path).front().shape, (std::vector<std::int64_t>{7, 31}));
    const Volume read = read_volume(path);  // the only dataset
    EXPECT_EQ(read.geometry.size, image.geometry.size);
    EXPECT_EQ(std::memcmp(read.voxels.data<float>(), image.voxels.data<float>(), image.voxels.num_bytes()), 0);
}

TEST(Hdf5Volume, ErrorsNameTheFileTheDatasetAndTheFix) {
    ScratchDir scratch;
    const fs::path file = scratch / "two.h5";
    const Volume volume = cremi_volume({8, 8, 4}, "uint8");
    write_volume(volume, file.string() + ":/a/raw");
    write_volume(volume, file.string() + ":/b/raw");
    expect_error_containing([&] { read_volume(file); }, {"holds several datasets", "/a/raw", "/b/raw", "two.h5:/a/raw"});
    expect_error_containing([&] { read_volume(file.string() + ":/c/raw"); }, {"has no dataset /c/raw", "/a/raw, /b/raw"});
    expect_error_containing([&] { read_volume(scratch / "missing.h5:/raw"); }, {"missing.h5", "no such file"});
    write_text(scratch / "text.h5", "not hdf5 at all");
    expect_error_containing([&] { read_volume(scratch / "text.h5:/raw"); }, {"text.h5", "is not an HDF5 file"});
    expect_error_containing([&] { write_volume(volume, scratch / "text.h5:/raw"); }, {"exists and is not an HDF5 file"});

    // A truncated file: the signature is there, the rest is not.
    std::vector<unsigned char> bytes = read_bytes(file);
    bytes.resize(bytes.size() / 2);
    write_bytes(scratch / "cut.h5", bytes);
    expect_error_containing([&] { read_volume(scratch / "cut.h5:/a/raw"); }, {"cut.h5"});

    // Labels that are not whole numbers, read by region.
    Volume fractional = volume;
    fractional.source_scalar_type = "float32";
    fractional.voxels.data<float>()[9] = 2.5f;
    write_volume(fractional, scratch / "fraction.h5:/labels");
    const auto reader = open_region_reader(scratch / "fraction.h5:/labels");
    std::vector<std::int32_t> labels(static_cast<std::size_t>(volume.geometry.num_voxels()));
    expect_error_containing([&] { reader->read_labels(VoxelBox{{0, 0, 0}, volume.geometry.size}, labels.data()); },
                            {"(1, 1, 0)", "2.5", "not a whole number"});
}

// Random boxes (edges included) of a region reader against the same voxels of the whole read.
void expect_boxes_match(const VolumeRegionReader& reader, const Volume& whole, std::uint64_t seed) {
    expect_grid_equal(reader.geometry(), whole.geometry);
    EXPECT_EQ(reader.source_scalar_type(), whole.source_scalar_type);
    SeededRandom random(seed, 0);
    const auto& size = whole.geometry.size;
    for (int trial = 0; trial < 40; ++trial) {
        VoxelBox box;
        for (int axis = 0; axis < 3; ++axis) {
            box.begin[axis] = static_cast<std::int64_t>(random.uniform() * static_cast<double>(size[axis]));
            box.extent[axis] = 1 + static_cast<std::int64_t>(random.uniform() * static_cast<double>(size[axis] - box.begin[axis]));
        }
        if (trial == 0) box = VoxelBox{{0, 0, 0}, size};
        std::vector<float> values(static_cast<std::size_t>(box.num_voxels()));
        reader.read(box, values.data());
        std::int64_t index = 0, mismatches = 0;
        for (std::int64_t k = 0; k < box.extent[2]; ++k) {
            for (std::int64_t j = 0; j < box.extent[1]; ++j) {
                for (std::int64_t i = 0; i < box.extent[0]; ++i, ++index) {
                    mismatches += values[static_cast<std::size_t>(index)] != whole.value_at(box.begin[0] + i, box.begin[1] + j, box.begin[2] + k);
                }
            }
        }
        EXPECT_EQ(mismatches, 0) << "box from " << box.begin[0] << "," << box.begin[1] << "," << box.begin[2];
    }
}

TEST(RegionReader, Hdf5BoxesEqualTheWholeRead) {
    ScratchDir scratch;
    const Volume volume = cremi_volume({70, 66, 9}, "int16");  // more than one 64³ chunk across
    write_volume(volume, scratch / "big.h5:/volumes/raw");
    expect_boxes_match(*open_region_reader(scratch / "big.h5:/volumes/raw", 1 << 20), read_volume(scratch / "big.h5:/volumes/raw"), 1);
}

TEST(RegionReader, NiftiBoxesEqualTheWholeReadWithScalingAndEveryOrientation) {
    TESSERA_REQUIRE_DATA(itk_data("BrainProtonDensity3Slices.mha"), "insighttoolkit5-examples");
    ScratchDir scratch;
    // A real MRI written as NIfTI with a flipped, rotated direction (rows and slices stored reversed
    // relative to RAS), then a scaled int16 copy.
    Volume mri = read_volume(itk_data("BrainProtonDensity3Slices.mha"));
    mri.geometry.direction = {-1, 0, 0, 0, 0, 1, 0, -1, 0};
    write_volume(mri, scratch / "mri.nii");
    expect_boxes_match(*open_region_reader(scratch / "mri.nii"), read_volume(scratch / "mri.nii"), 2);

    // Scaled int16 (slope 2, intercept 5) with qfac = -1, and the same file big-endian.
    Nifti1Spec spec;
    spec.dim = {3, 9, 7, 5, 1, 1, 1, 1};
    spec.pixdim[0] = -1;
    spec.scl_slope = 2;
    spec.scl_inter = 5;
    std::vector<unsigned char> bytes = nifti1_file(spec, index_coded_int16(9, 7, 5));
    write_bytes(scratch / "scaled.nii", bytes);
    expect_boxes_match(*open_region_reader(scratch / "scaled.nii"), read_volume(scratch / "scaled.nii"), 3);
    auto swap = [&](std::size_t offset, std::size_t size) { std::reverse(bytes.begin() + offset, bytes.begin() + offset + size); };
    swap(0, 4);
    for (std::size_t at = 40; at < 56; at += 2) swap(at, 2);
    swap(70, 2);
    swap(72, 2);
    for (std::size_t at = 76; at < 120; at += 4) swap(at, 4);
    swap(252, 2);
    swap(254, 2);
    for (std::size_t at = 256; at < 328; at += 4) swap(at, 4);
    for (std::size_t at = 352; at < bytes.size(); at += 2) swap(at, 2);
    write_bytes(scratch / "big_endian.nii", bytes);
    const Volume big_endian = read_volume(scratch / "big_endian.nii");
    EXPECT_EQ(big_endian.value_at(8, 6, 4), 2.0f * 468 + 5);
    expect_boxes_match(*open_region_reader(scratch / "big_endian.nii"), big_endian, 4);

    EXPECT_TRUE(can_read_by_region(scratch / "mri.nii"));
    EXPECT_TRUE(can_read_by_region("x.h5:/raw"));
    EXPECT_FALSE(can_read_by_region(scratch / "mri.nii.gz"));
    write_volume(mri, scratch / "mri.nii.gz");
    expect_error_containing([&] { open_region_reader(scratch / "mri.nii.gz"); }, {"region by region", "HDF5", "tessera-cli convert"});
}


// The overview's voxels against block means computed here, voxel by voxel, from the whole read.
void expect_overview_of(const VolumeOverview& overview, const Volume& whole, std::array<std::int64_t, 3> factor) {
    EXPECT_EQ(overview.factor, factor);
    const auto& size = whole.geometry.size;
    const auto& grid = overview.volume.geometry;
    for (int axis = 0; axis < 3; ++axis) {
        EXPECT_EQ(grid.size[axis], (size[axis] + factor[axis] - 1) / factor[axis]) << "axis " << axis;
        EXPECT_NEAR(grid.spacing[axis], whole.geometry.spacing[axis] * static_cast<double>(factor[axis]), 1e-12);
    }
    // Overview voxel (0, 0, 0) sits at the centre of the first block.
    const auto centre = whole.geometry.world_of((factor[0] - 1) / 2.0, (factor[1] - 1) / 2.0, (factor[2] - 1) / 2.0);
    for (int axis = 0; axis < 3; ++axis) EXPECT_NEAR(grid.origin[axis], centre[axis], 1e-9) << "axis " << axis;
    for (int index = 0; index < 9; ++index) EXPECT_EQ(grid.direction[index], whole.geometry.direction[index]);

    double lowest = 1e300, highest = -1e300;
    std::int64_t non_finite = 0, mismatches = 0;
    for (std::int64_t ok = 0; ok < grid.size[2]; ++ok) {
        for (std::int64_t oj = 0; oj < grid.size[1]; ++oj) {
            for (std::int64_t oi = 0; oi < grid.size[0]; ++oi) {
                double sum = 0.0;
                std::int64_t count = 0;
                for (std::int64_t k = ok * factor[2]; k < std::min((ok + 1) * factor[2], size[2]); ++k) {
                    for (std::int64_t j = oj * factor[1]; j < std::min((oj + 1) * factor[1], size[1]); ++j) {
                        for (std::int64_t i = oi * factor[0]; i < std::min((oi + 1) * factor[0], size[0]); ++i) {
                            const float value = whole.value_at(i, j, k);
                            if (!std::isfinite(value)) {
                                ++non_finite;
                                continue;
                            }
                            sum += value;
                            ++count;
                            lowest = std::min(lowest, static_cast<double>(value));
                            highest = std::max(highest, static_cast<double>(value));
                        }
                    }
                }
                const double expected = count > 0 ? sum / static_cast<double>(count) : 0.0;
                // Tolerance: the mean rounded to f32, summed in another order (1e-6 relative).
                mismatches += std::abs(overview.volume.value_at(oi, oj, ok) - expected) > 1e-6 * std::max(1.0, std::abs(expected));
            }
        }
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_EQ(overview.num_non_finite, non_finite);
    EXPECT_EQ(overview.minimum, lowest);
    EXPECT_EQ(overview.maximum, highest);
}

TEST(VolumeOverviewTest, FactorIsTheSmallestThatFits) {
    ImageGeometry em;
    em.size = {2048, 2048, 1792};  // bm_large_volume's 30 GB volume
    EXPECT_EQ(overview_factor(em, std::int64_t{1} << 24), (std::array<std::int64_t, 3>{8, 8, 8}));  // 256²×224; 7 gives 293²×256
    ImageGeometry slice;
    slice.size = {1000, 600, 1};  // 2D: the single slice is not divided
    EXPECT_EQ(overview_factor(slice, 60000), (std::array<std::int64_t, 3>{4, 4, 1}));  // 250×150; 3 gives 334×200
    EXPECT_EQ(overview_factor(slice, 1000000), (std::array<std::int64_t, 3>{1, 1, 1}));
    EXPECT_EQ(overview_voxel_of({17, 8, 0}, {4, 4, 1}), (std::array<std::int64_t, 3>{4, 2, 0}));
}

TEST(VolumeOverviewTest, Hdf5OverviewIsTheBlockMeansOfTheWholeRead) {
    ScratchDir scratch;
    Volume volume = cremi_volume({70, 66, 9}, "float32");  // partial blocks along every axis for factor 3
    SeededRandom random(11, 0);
    float* voxels = volume.voxels.data<float>();
    for (std::int64_t index = 0; index < volume.geometry.num_voxels(); ++index) voxels[index] = static_cast<float>(random.uniform() * 2000.0 - 700.0);
    voxels[5] = std::numeric_limits<float>::quiet_NaN();  // left out of its block's mean and of the range
    voxels[4000] = std::numeric_limits<float>::infinity();
    write_volume(volume, scratch / "em.h5:/volumes/raw");
    const auto reader = open_region_reader(scratch / "em.h5:/volumes/raw", 1 << 20);
    std::vector<double> fractions;
    const std::optional<VolumeOverview> overview = read_overview(*reader, 2000, [&](double fraction) {
        fractions.push_back(fraction);
        return true;
    });
    ASSERT_TRUE(overview.has_value());
    expect_overview_of(*overview, read_volume(scratch / "em.h5:/volumes/raw"), {3, 3, 3});  // 24×22×3 = 1584 ≤ 2000 < 35×33×5
    EXPECT_EQ(overview->num_non_finite, 2);
    ASSERT_FALSE(fractions.empty());
    EXPECT_TRUE(std::is_sorted(fractions.begin(), fractions.end()));
    EXPECT_DOUBLE_EQ(fractions.back(), 1.0);

    // Stopped after the first band: no overview.
    int calls = 0;
    EXPECT_FALSE(read_overview(*reader, 2000, [&](double) { return ++calls < 1; }).has_value());
    EXPECT_EQ(calls, 1);
}

TEST(VolumeOverviewTest, NiftiOverviewKeepsAnObliqueGridAndReadsRegionsAsVolumes) {
    TESSERA_REQUIRE_DATA(itk_data("BrainProtonDensity3Slices.mha"), "insighttoolkit5-examples");
    ScratchDir scratch;
    Volume mri = read_volume(itk_data("BrainProtonDensity3Slices.mha"));
    mri.geometry.direction = {-1, 0, 0, 0, 0, 1, 0, -1, 0};
    write_volume(mri, scratch / "mri.nii");
    const Volume whole = read_volume(scratch / "mri.nii");
    const auto reader = open_region_reader(scratch / "mri.nii");
    const std::optional<VolumeOverview> overview = read_overview(*reader, 4000);
    ASSERT_TRUE(overview.has_value());
    const auto factor = overview_factor(whole.geometry, 4000);
    EXPECT_GT(factor[0], 1);
    expect_overview_of(*overview, whole, factor);

    // One sagittal slice (i = 100) as a volume: its grid starts at that slice's first voxel.
    const auto& size = whole.geometry.size;
    const Volume slice = read_region_volume(*reader, VoxelBox{{100, 0, 0}, {1, size[1], size[2]}});
    EXPECT_EQ(slice.geometry.size, (std::array<std::int64_t, 3>{1, size[1], size[2]}));
    const auto first = whole.geometry.world_of(100, 0, 0);
    for (int axis = 0; axis < 3; ++axis) EXPECT_NEAR(slice.geometry.origin[axis], first[axis], 1e-9);
    EXPECT_EQ(slice.geometry.spacing, whole.geometry.spacing);
    std::int64_t mismatches = 0;
    for (std::int64_t k = 0; k < size[2]; ++k) {
        for (std::int64_t j = 0; j < size[1]; ++j) mismatches += slice.value_at(0, j, k) != whole.value_at(100, j, k);
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_EQ(slice.source_path, reader->source_path());
}


TEST(VolumeOverviewTest, LabelOverviewIsEachBlocksMostFrequentLabel) {
    ScratchDir scratch;
    ImageGeometry geometry = cremi_volume({70, 66, 9}, "uint8").geometry;
    LabelMap labels = make_label_map(geometry);
    SeededRandom random(12, 0);
    std::int32_t* values = labels.labels.data<std::int32_t>();
    // Mostly the label of a coarse 5-voxel grid (so blocks have clear winners), a third of voxels random.
    for (std::int64_t k = 0; k < 9; ++k)
        for (std::int64_t j = 0; j < 66; ++j)
            for (std::int64_t i = 0; i < 70; ++i)
                values[(k * 66 + j) * 70 + i] = random.uniform() < 0.33 ? static_cast<std::int32_t>(random.uniform() * 4.0)
                                                                        : static_cast<std::int32_t>((i / 5 + j / 5) % 4);
    values[(4 * 66 + 30) * 70 + 40] = 9;  // one voxel: never a block's winner, still present
    write_label_map(labels, scratch / "seg.h5:/volumes/labels/cells");
    const auto reader = open_region_reader(scratch / "seg.h5:/volumes/labels/cells");
    const std::array<std::int64_t, 3> factor{3, 3, 3};
    const std::optional<LabelOverview> overview = read_label_overview(*reader, factor);
    ASSERT_TRUE(overview.has_value());
    EXPECT_EQ(overview->present_labels, (std::vector<std::int32_t>{0, 1, 2, 3, 9}));
    const ImageGeometry& grid = overview->labels.geometry;
    EXPECT_EQ(grid.size, (std::array<std::int64_t, 3>{24, 22, 3}));
    EXPECT_TRUE(same_grid(grid, overview_geometry(geometry, factor)));
    std::int64_t mismatches = 0;
    for (std::int64_t ok = 0; ok < grid.size[2]; ++ok) {
        for (std::int64_t oj = 0; oj < grid.size[1]; ++oj) {
            for (std::int64_t oi = 0; oi < grid.size[0]; ++oi) {
                std::map<std::int32_t, int> counts;
                for (std::int64_t k = ok * 3; k < std::min(ok * 3 + 3, std::int64_t{9}); ++k)
                    for (std::int64_t j = oj * 3; j < std::min(oj * 3 + 3, std::int64_t{66}); ++j)
                        for (std::int64_t i = oi * 3; i < std::min(oi * 3 + 3, std::int64_t{70}); ++i) ++counts[labels.label_at(i, j, k)];
                // Most frequent; on a tie the smaller label (the map iterates in increasing order).
                std::int32_t expected = 0;
                int best = -1;
                for (const auto& [label, count] : counts) {
                    if (count > best) expected = label, best = count;
                }
                mismatches += overview->labels.label_at(oi, oj, ok) != expected;
            }
        }
    }
    EXPECT_EQ(mismatches, 0);

    // A box of labels as a label map of its own.
    const LabelMap box = read_region_label_map(*reader, VoxelBox{{10, 20, 4}, {32, 15, 1}});
    EXPECT_EQ(box.geometry.size, (std::array<std::int64_t, 3>{32, 15, 1}));
    EXPECT_EQ(box.label_at(30, 10, 0), 9);
    EXPECT_EQ(box.label_at(0, 0, 0), labels.label_at(10, 20, 4));
}


TEST(OverviewCacheTest, KeepsOverviewsOfTheSameFileOnly) {
    ScratchDir scratch;
    Volume volume = cremi_volume({70, 66, 9}, "float32");
    write_volume(volume, scratch / "em.h5:/volumes/raw");
    LabelMap labels = make_label_map(volume.geometry);
    for (std::int64_t v = 0; v < labels.geometry.num_voxels(); ++v) labels.labels.data<std::int32_t>()[v] = static_cast<std::int32_t>(v % 7 == 0);
    write_label_map(labels, scratch / "em.h5:/volumes/labels/cells");
    const OverviewCache cache(scratch / "cache", 3);
    const auto reader = open_region_reader(scratch / "em.h5:/volumes/raw");
    EXPECT_FALSE(cache.find_image(*reader, 2000).has_value());  // nothing stored yet

    const VolumeOverview read = *read_overview(*reader, 2000);
    cache.store_image(*reader, 2000, read);
    const std::optional<VolumeOverview> found = cache.find_image(*reader, 2000);
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->factor, read.factor);
    EXPECT_EQ(found->minimum, read.minimum);
    EXPECT_EQ(found->maximum, read.maximum);
    EXPECT_TRUE(same_grid(found->volume.geometry, read.volume.geometry, 0.0));
    EXPECT_EQ(std::memcmp(found->volume.voxels.raw_data(), read.volume.voxels.raw_data(), read.volume.voxels.num_bytes()), 0);
    EXPECT_EQ(found->volume.source_path, reader->source_path());
    EXPECT_FALSE(cache.find_image(*reader, 1000).has_value());  // another limit: another overview

    const auto label_reader = open_region_reader(scratch / "em.h5:/volumes/labels/cells");
    const LabelOverview label_read = *read_label_overview(*label_reader, read.factor);
    cache.store_labels(*label_reader, read.factor, label_read);
    const std::optional<LabelOverview> labels_found = cache.find_labels(*label_reader, read.factor);
    ASSERT_TRUE(labels_found.has_value());
    EXPECT_EQ(labels_found->present_labels, label_read.present_labels);
    EXPECT_EQ(std::memcmp(labels_found->labels.labels.raw_data(), label_read.labels.labels.raw_data(), label_read.labels.labels.num_bytes()), 0);
    EXPECT_FALSE(cache.find_labels(*label_reader, {2, 2, 2}).has_value());

    // A damaged entry is a miss, not an error.
    for (const auto& file : std::filesystem::directory_iterator(scratch / "cache")) {
        if (file.path().extension() == ".raw") std::filesystem::resize_file(file.path(), 12);
    }
    EXPECT_FALSE(cache.find_image(*reader, 2000).has_value());
    cache.store_image(*reader, 2000, read);
    ASSERT_TRUE(cache.find_image(*reader, 2000).has_value());

    // The file changes (rewritten, a new modification time): its old overview is not found.
    std::filesystem::last_write_time(scratch / "em.h5", std::filesystem::last_write_time(scratch / "em.h5") + std::chrono::seconds(5));
    EXPECT_FALSE(cache.find_image(*open_region_reader(scratch / "em.h5:/volumes/raw"), 2000).has_value());

    // At most 3 entries: the oldest go.
    for (std::int64_t limit : {900, 800, 700, 600}) cache.store_image(*reader, limit, *read_overview(*reader, limit));
    std::int64_t entries = 0;
    for (const auto& file : std::filesystem::directory_iterator(scratch / "cache")) entries += file.path().extension() == ".json";
    EXPECT_EQ(entries, 3);
}

}  // namespace
}  // namespace tessera::test
