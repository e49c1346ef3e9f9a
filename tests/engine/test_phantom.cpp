#include "data/phantom.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

using namespace tessera;

namespace {
PhantomOptions small_options(std::uint64_t seed) {
    PhantomOptions options;
    options.size = {48, 40, 32};
    options.spacing = {1.5, 1.5, 2.0};
    options.seed = seed;
    return options;
}
}  // namespace

TEST(Phantom, SameSeedIsBitIdentical) {
    const Phantom a = make_ct_phantom(small_options(7));
    const Phantom b = make_ct_phantom(small_options(7));
    ASSERT_EQ(a.volume.voxels.num_bytes(), b.volume.voxels.num_bytes());
    EXPECT_EQ(std::memcmp(a.volume.voxels.raw_data(), b.volume.voxels.raw_data(), a.volume.voxels.num_bytes()), 0);
    EXPECT_EQ(std::memcmp(a.labels.labels.raw_data(), b.labels.labels.raw_data(), a.labels.labels.num_bytes()), 0);
}

TEST(Phantom, DifferentSeedsDiffer) {
    const Phantom a = make_ct_phantom(small_options(1));
    const Phantom b = make_ct_phantom(small_options(2));
    EXPECT_NE(std::memcmp(a.volume.voxels.raw_data(), b.volume.voxels.raw_data(), a.volume.voxels.num_bytes()), 0);
}

TEST(Phantom, EveryStructureIsPresentWithItsIntensity) {
    PhantomOptions options = small_options(3);
    options.noise_sigma = 0.0;
    const Phantom phantom = make_ct_phantom(options);
    EXPECT_EQ(phantom.volume.voxels.shape(), (Shape{32, 40, 48}));  // [D, H, W]
    EXPECT_TRUE(same_grid(phantom.volume.geometry, phantom.labels.geometry));
    std::map<std::int32_t, float> intensity_of_label;
    const float* voxels = phantom.volume.voxels.data<float>();
    const std::int32_t* labels = phantom.labels.labels.data<std::int32_t>();
    for (std::int64_t v = 0; v < phantom.volume.geometry.num_voxels(); ++v) {
        if (labels[v] != 1) intensity_of_label[labels[v]] = voxels[v];  // label 1 holds fat and tissue
    }
    EXPECT_EQ(intensity_of_label.at(0), -1000.0f);
    EXPECT_EQ(intensity_of_label.at(2), -850.0f);
    EXPECT_EQ(intensity_of_label.at(3), 700.0f);
    EXPECT_EQ(intensity_of_label.at(4), 60.0f);
    EXPECT_EQ(intensity_of_label.at(5), 120.0f);
    EXPECT_EQ(phantom_label_names().size(), 6u);
}

TEST(Phantom, NoiseHasTheRequestedSpread) {
    PhantomOptions options = small_options(4);
    options.noise_sigma = 20.0;
    const Phantom noisy = make_ct_phantom(options);
    options.noise_sigma = 0.0;
    const Phantom clean = make_ct_phantom(options);
    double sum = 0, sum_squares = 0;
    const std::int64_t count = noisy.volume.geometry.num_voxels();
    for (std::int64_t v = 0; v < count; ++v) {
        const double difference = noisy.volume.voxels.data<float>()[v] - clean.volume.voxels.data<float>()[v];
        sum += difference;
        sum_squares += difference * difference;
    }
    const double mean = sum / static_cast<double>(count);
    const double sigma = std::sqrt(sum_squares / static_cast<double>(count) - mean * mean);
    EXPECT_NEAR(mean, 0.0, 0.5);
    EXPECT_NEAR(sigma, 20.0, 0.5);
}

TEST(Phantom, TwoDimensionalPhantomIsOneSlice) {
    PhantomOptions options = small_options(5);
    options.size = {64, 64, 1};
    const Phantom phantom = make_ct_phantom(options);
    EXPECT_TRUE(phantom.volume.geometry.is_2d());
    EXPECT_EQ(phantom.volume.voxels.shape(), (Shape{1, 64, 64}));
    EXPECT_GT(phantom.labels.present_labels().size(), 3u);
}

TEST(Phantom, RejectsImpossibleOptions) {
    PhantomOptions options;
    options.size = {64, 0, 64};
    try {
        make_ct_phantom(options);
        FAIL();
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find("64×0×64"), std::string::npos) << error.what();
    }
}
