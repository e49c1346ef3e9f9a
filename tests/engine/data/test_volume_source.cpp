// The "volume" source: one image and its labels, read whole or region by region. Read by region (HDF5
// hyperslabs, pread of an uncompressed .nii), every batch and held-out example must equal what the same
// volume read whole (a .nii.gz through zlib, normalised and sampled in memory) gives: the same draws pick
// the same patches, the same foreground voxels. Tolerances: labels exact; images 1e-5 (the z-score
// statistics are accumulated block by block instead of in one pass).
#include "data_test_support.hpp"

#include "data/phantom.hpp"
#include "data/region_volume.hpp"
#include "io/volume_region.hpp"

#include <cmath>

namespace tessera::data::test {
namespace {

struct Files {
    fs::path whole_image, whole_labels;  // .nii.gz: read whole
    fs::path h5_image, h5_labels;        // one HDF5 file, two datasets
    fs::path nii_image, nii_labels;      // uncompressed .nii
};

Files write_phantom(const fs::path& folder, std::array<std::int64_t, 3> size) {
    PhantomOptions options;
    options.size = size;
    options.spacing = {1.5, 1.25, 2.0};
    options.seed = 3;
    Phantom phantom = make_ct_phantom(options);
    phantom.volume.voxels.data<float>()[7] = 3000.5f;  // a float voxel: the int16 type would not hold it
    Files files{folder / "ct.nii.gz", folder / "organs.nii.gz", fs::path(folder / "ct.h5").string() + ":/volumes/raw",
                fs::path(folder / "ct.h5").string() + ":/volumes/labels/organs", folder / "ct.nii", folder / "organs.nii"};
    write_volume(phantom.volume, files.whole_image);
    write_label_map(phantom.labels, files.whole_labels);
    write_volume(phantom.volume, files.h5_image);
    write_label_map(phantom.labels, files.h5_labels);
    write_volume(phantom.volume, files.nii_image);
    write_label_map(phantom.labels, files.nii_labels);
    return files;
}

DataConfig volume_config(const fs::path& image, const fs::path& labels, RegionReading reading) {
    DataConfig config;
    config.source = SourceKind::Volume;
    config.image_file = image;
    config.label_file = labels;
    config.read_by_region = reading;
    config.seed = 11;
    config.foreground_fraction = 0.6;
    config.holdout_fraction = 0.2;
    config.augment.flip_axes = {0, 2};
    config.label_mapping = {LabelRule(1, 1), LabelRule::range(2, 3, 2, "2-3")};  // the rest -> background
    return config;
}

void expect_same_batches(const Dataset& whole, const Dataset& by_region, int count) {
    for (std::int64_t index = 0; index < count; ++index) {
        const Batch a = whole.training_batch(index);
        const Batch b = by_region.training_batch(index);
        ASSERT_EQ(a.images.shape(), b.images.shape());
        ASSERT_EQ(a.labels.shape(), b.labels.shape());
        EXPECT_EQ(std::memcmp(a.labels.data<std::int32_t>(), b.labels.data<std::int32_t>(), a.labels.num_bytes()), 0) << "batch " << index;
        double largest = 0;
        for (std::int64_t v = 0; v < a.images.num_elements(); ++v) {
            largest = std::max(largest, std::abs(static_cast<double>(a.images.data<float>()[v]) - b.images.data<float>()[v]));
        }
        EXPECT_LE(largest, 1e-5) << "batch " << index;
    }
}

void expect_same_examples(const Dataset& whole, const Dataset& by_region) {
    ASSERT_EQ(whole.num_eval_examples(), by_region.num_eval_examples());
    for (std::int64_t i = 0; i < whole.num_eval_examples(); ++i) {
        const Example a = whole.eval_example(i);
        const Example b = by_region.eval_example(i);
        // Named after their files ("ct" and "ct_raw"), the same part of them.
        EXPECT_EQ(a.name.substr(a.name.find(' ')), b.name.substr(b.name.find(' ')));
        ASSERT_EQ(a.image.shape(), b.image.shape());
        EXPECT_EQ(std::memcmp(a.labels.data<std::int32_t>(), b.labels.data<std::int32_t>(), a.labels.num_bytes()), 0);
        double largest = 0;
        for (std::int64_t v = 0; v < a.image.num_elements(); ++v) {
            largest = std::max(largest, std::abs(static_cast<double>(a.image.data<float>()[v]) - b.image.data<float>()[v]));
        }
        EXPECT_LE(largest, 1e-5);
        EXPECT_TRUE(same_grid(a.geometry, b.geometry, 1e-9)) << describe(a.geometry) << " vs " << describe(b.geometry);
    }
}

TEST(VolumeSource, ReadByRegionGivesTheBatchesOfTheWholeRead) {
    ScratchDir scratch;
    // 150 voxels across: three 64-voxel segments per row, where the foreground voxels are looked up.
    const Files files = write_phantom(scratch.path(), {150, 36, 30});
    const Shape input{3, 1, 16, 24, 24};
    const auto whole = make_dataset(volume_config(files.whole_image, files.whole_labels, RegionReading::Auto), input, 3);
    EXPECT_NE(whole->describe().find("read whole, slices 0-23 training + 24-29 held out"), std::string::npos) << whole->describe();
    for (const auto& [image, labels] : {std::pair{files.h5_image, files.h5_labels}, std::pair{files.nii_image, files.nii_labels}}) {
        const auto by_region = make_dataset(volume_config(image, labels, RegionReading::Always), input, 3);
        EXPECT_NE(by_region->describe().find("read by region, slices 0-23 training + 24-29 held out"), std::string::npos)
            << by_region->describe();
        expect_same_batches(*whole, *by_region, 6);
        expect_same_examples(*whole, *by_region);
    }
    // Auto reads a volume this small whole, HDF5 or not.
    const auto automatic = make_dataset(volume_config(files.h5_image, files.h5_labels, RegionReading::Auto), input, 3);
    EXPECT_NE(automatic->describe().find("read whole"), std::string::npos) << automatic->describe();
}

// Every foreground rank against the whole label map, in its voxel order: rows of 150 voxels hold three
// 64-voxel segments, so ranks at segment edges are looked up in the right one.
TEST(VolumeSource, EveryForegroundRankIsTheWholeReadsVoxelOfThatRank) {
    ScratchDir scratch;
    const Files files = write_phantom(scratch.path(), {150, 20, 12});
    const DataConfig config = volume_config(files.h5_image, files.h5_labels, RegionReading::Always);
    const detail::LabelMapping mapping(config.label_mapping, false, 3);
    const std::int64_t training_slices = 9;
    detail::RegionVolume region("ct", open_region_reader(files.h5_image), open_region_reader(files.h5_labels), config, mapping, 3,
                                training_slices);
    const LabelMap labels = read_label_map(files.whole_labels);
    std::vector<std::array<std::int64_t, 3>> expected;  // [D, H, W] of each foreground voxel, in order
    for (std::int64_t k = 0; k < training_slices; ++k)
        for (std::int64_t j = 0; j < 20; ++j)
            for (std::int64_t i = 0; i < 150; ++i) {
                if (mapping(labels.label_at(i, j, k)) != 0) expected.push_back({k, j, i});
            }
    ASSERT_EQ(region.num_foreground(), static_cast<std::int64_t>(expected.size()));
    ASSERT_GT(expected.size(), 1000u);
    std::int64_t wrong = 0;
    for (std::int64_t rank = 0; rank < region.num_foreground(); ++rank) wrong += region.foreground_voxel(rank) != expected[static_cast<std::size_t>(rank)];
    EXPECT_EQ(wrong, 0);
}

TEST(VolumeSource, PatchesLargerThanTheVolumeArePaddedAlike) {
    ScratchDir scratch;
    const Files files = write_phantom(scratch.path(), {20, 18, 12});
    const Shape input{2, 1, 16, 24, 24};  // H and W larger than the volume: padded on both sides
    DataConfig whole_config = volume_config(files.whole_image, files.whole_labels, RegionReading::Never);
    DataConfig region_config = volume_config(files.h5_image, files.h5_labels, RegionReading::Always);
    whole_config.holdout_fraction = region_config.holdout_fraction = 0;
    whole_config.normalization = region_config.normalization = Normalization::Window;
    whole_config.window_low = region_config.window_low = -200;
    whole_config.window_high = region_config.window_high = 300;
    expect_same_batches(*make_dataset(whole_config, input, 3), *make_dataset(region_config, input, 3), 4);
}

TEST(VolumeSource, TwoDimensionalImagesSplitByRows) {
    ScratchDir scratch;
    const Files files = write_phantom(scratch.path(), {64, 50, 1});
    const Shape input{4, 1, 16, 32};
    DataConfig whole_config = volume_config(files.whole_image, files.whole_labels, RegionReading::Never);
    DataConfig region_config = volume_config(files.h5_image, files.h5_labels, RegionReading::Always);
    whole_config.augment.flip_axes = region_config.augment.flip_axes = {1};
    const auto whole = make_dataset(whole_config, input, 3);
    const auto by_region = make_dataset(region_config, input, 3);
    EXPECT_NE(by_region->describe().find("rows 0-39 training + 40-49 held out"), std::string::npos) << by_region->describe();
    expect_same_batches(*whole, *by_region, 5);
    expect_same_examples(*whole, *by_region);
}

TEST(VolumeSource, ErrorsNameTheFileAndTheFix) {
    ScratchDir scratch;
    const Files files = write_phantom(scratch.path(), {20, 18, 12});
    const Shape input{2, 1, 8, 8, 8};
    DataConfig config = volume_config(files.h5_image, files.h5_labels, RegionReading::Always);

    // A label with no class: found by the scan, before the first batch.
    config.label_mapping.clear();
    auto dataset = make_dataset(config, input, 2);
    const std::string unmapped = error_message([&] { dataset->training_batch(0); });
    EXPECT_NE(unmapped.find("organs"), std::string::npos) << unmapped;
    EXPECT_NE(unmapped.find("data.label_mapping"), std::string::npos) << unmapped;

    config = volume_config(files.h5_image, files.h5_labels, RegionReading::Always);
    config.static_shape = StaticShape::Resize;
    EXPECT_NE(error_message([&] { make_dataset(config, input, 3); }).find("use \"crop\""), std::string::npos);

    config = volume_config(files.whole_image, files.whole_labels, RegionReading::Always);
    EXPECT_NE(error_message([&] { make_dataset(config, input, 3); }).find("region by region"), std::string::npos);

    config = volume_config(files.h5_image, files.h5_labels, RegionReading::Always);
    config.augment.flip_axes = {0};
    EXPECT_NE(error_message([&] { make_dataset(config, Shape{2, 1, 8, 8}, 3); }).find("the model is 2D"), std::string::npos);

    // NaN voxels: refused unless data.non_finite is "zero", then read as 0 like the whole read does.
    Volume volume = read_volume(files.whole_image);
    volume.voxels.data<float>()[100] = std::nanf("");
    write_volume(volume, scratch / "nan.h5:/raw");
    write_volume(volume, scratch / "nan.nii.gz");
    config = volume_config(scratch / "nan.h5:/raw", files.h5_labels, RegionReading::Always);
    dataset = make_dataset(config, input, 3);
    const std::string nan = error_message([&] { dataset->training_batch(0); });
    EXPECT_NE(nan.find("NaN or infinite"), std::string::npos) << nan;
    EXPECT_NE(nan.find("i, j, k = 0, 5, 0"), std::string::npos) << nan;
    config.non_finite = NonFinitePolicy::Zero;
    DataConfig whole_config = volume_config(scratch / "nan.nii.gz", files.whole_labels, RegionReading::Never);
    whole_config.non_finite = NonFinitePolicy::Zero;
    expect_same_batches(*make_dataset(whole_config, input, 3), *make_dataset(config, input, 3), 3);
}

}  // namespace
}  // namespace tessera::data::test
