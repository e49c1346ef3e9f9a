// The sources: synthetic EM sections, folder pairing, and the example head MRI.
#include "data/dataset.hpp"
#include "data/examples.hpp"
#include "data/folder_pairs.hpp"
#include "data/synthetic_em.hpp"
#include "data_test_support.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <cstdlib>
#include <set>

using namespace tessera;
using namespace tessera::data;
using namespace tessera::data::test;

namespace {

// Connected regions of label 0 (4-neighbourhood): the cells of an EM section.
int count_cells(const Tensor& labels, std::int64_t height, std::int64_t width) {
    const std::int32_t* membrane = labels.data<std::int32_t>();
    std::vector<char> visited(static_cast<std::size_t>(height * width), 0);
    std::vector<std::int64_t> stack;
    int regions = 0;
    for (std::int64_t start = 0; start < height * width; ++start) {
        if (membrane[start] != 0 || visited[static_cast<std::size_t>(start)]) continue;
        ++regions;
        stack.push_back(start);
        visited[static_cast<std::size_t>(start)] = 1;
        while (!stack.empty()) {
            const std::int64_t p = stack.back();
            stack.pop_back();
            const std::int64_t y = p / width, x = p % width;
            const std::int64_t neighbours[4][2] = {{y - 1, x}, {y + 1, x}, {y, x - 1}, {y, x + 1}};
            for (const auto& [ny, nx] : neighbours) {
                if (ny < 0 || ny >= height || nx < 0 || nx >= width) continue;
                const std::int64_t q = ny * width + nx;
                if (membrane[q] == 0 && !visited[static_cast<std::size_t>(q)]) {
                    visited[static_cast<std::size_t>(q)] = 1;
                    stack.push_back(q);
                }
            }
        }
    }
    return regions;
}

}  // namespace

TEST(DataSyntheticEm, LooksLikeMembraneData) {
    const EmSection section = make_em_section(EmSectionOptions{});
    ASSERT_EQ(section.image.voxels.shape(), (Shape{1, 512, 512}));
    ASSERT_EQ(section.labels.labels.shape(), (Shape{1, 512, 512}));
    EXPECT_TRUE(same_grid(section.image.geometry, section.labels.geometry));

    const float* grey = section.image.voxels.data<float>();
    const std::int32_t* labels = section.labels.labels.data<std::int32_t>();
    double sums[2] = {0, 0};
    std::int64_t counts[2] = {0, 0};
    for (std::int64_t p = 0; p < 512 * 512; ++p) {
        ASSERT_TRUE(labels[p] == 0 || labels[p] == 1);
        sums[labels[p]] += grey[p];
        ++counts[labels[p]];
    }
    const double membrane_fraction = static_cast<double>(counts[1]) / (512.0 * 512.0);
    EXPECT_GT(membrane_fraction, 0.10);
    EXPECT_LT(membrane_fraction, 0.35);
    const double membrane_mean = sums[1] / static_cast<double>(counts[1]);
    const double cell_mean = sums[0] / static_cast<double>(counts[0]);
    EXPECT_LT(membrane_mean, cell_mean - 0.2) << "membranes are dark";
    // A few hundred cells (organelles are unlabelled, so they do not split cells).
    const int cells = count_cells(section.labels.labels, 512, 512);
    EXPECT_GT(cells, 150);
    EXPECT_LT(cells, 450);

    // Seeded: the same seed is bit-identical, another differs.
    const EmSection again = make_em_section(EmSectionOptions{});
    EXPECT_TRUE(same_bytes(section.image.voxels, again.image.voxels));
    EXPECT_TRUE(same_bytes(section.labels.labels, again.labels.labels));
    EXPECT_FALSE(same_bytes(section.labels.labels, make_em_section(EmSectionOptions{.seed = 2}).labels.labels));
}

TEST(DataSyntheticEm, NormalisedBatchesKeepMembranesDark) {
    DataConfig config;  // the defaults: 8 sections of 512×512, z-score
    const auto dataset = make_dataset(config, {8, 1, 64, 64}, 2);
    double sums[2] = {0, 0};
    std::int64_t counts[2] = {0, 0};
    for (int i = 0; i < 4; ++i) {
        const Batch batch = dataset->training_batch(i);
        for (std::int64_t v = 0; v < batch.labels.num_elements(); ++v) {
            const std::int32_t label = batch.labels.data<std::int32_t>()[v];
            sums[label] += batch.images.data<float>()[v];
            ++counts[label];
        }
    }
    // Half the patches are centred on membrane, so membranes are over-represented but not everything.
    const double fraction = static_cast<double>(counts[1]) / static_cast<double>(counts[0] + counts[1]);
    EXPECT_GT(fraction, 0.12);
    EXPECT_LT(fraction, 0.45);
    EXPECT_LT(sums[1] / static_cast<double>(counts[1]), sums[0] / static_cast<double>(counts[0]) - 1.0)
        << "in z-score units membranes are well over one sigma darker";
    const Example example = dataset->eval_example(1);
    EXPECT_EQ(example.name, "em_eval_1");
    EXPECT_EQ(example.image.shape(), (Shape{1, 512, 512}));
    EXPECT_NE(dataset->describe().find("membranes labelled"), std::string::npos);
}

TEST(DataFolderPairs, MatchesByStemWithLabelSuffixes) {
    ScratchDir scratch;
    for (const char* name : {"images/a.nii.gz", "images/b.mha", "images/c.nii", "images/notes.txt", "images/.hidden.nii",
                             "images/d.mhd", "images/d.raw", "labels/a_mask.nii.gz", "labels/b_SEG.mha", "labels/c.nii",
                             "labels/d_labels.mhd"}) {
        touch(scratch / name);
    }
    const std::vector<FilePair> pairs = match_folder_pairs(scratch / "images", scratch / "labels");
    ASSERT_EQ(pairs.size(), 4u);
    EXPECT_EQ(pairs[0].name, "a");
    EXPECT_EQ(pairs[0].image, scratch / "images/a.nii.gz");
    EXPECT_EQ(pairs[0].labels, scratch / "labels/a_mask.nii.gz");
    EXPECT_EQ(pairs[1].labels, scratch / "labels/b_SEG.mha");
    EXPECT_EQ(pairs[2].labels, scratch / "labels/c.nii");
    EXPECT_EQ(pairs[3].image, scratch / "images/d.mhd");
    EXPECT_EQ(pairs[3].labels, scratch / "labels/d_labels.mhd");

    // One folder: the suffix tells labels from images.
    for (const char* name : {"both/x.png", "both/x_label.png", "both/y.nii.gz", "both/y_seg.nii.gz"}) touch(scratch / name);
    const std::vector<FilePair> shared = match_folder_pairs(scratch / "both", "");
    ASSERT_EQ(shared.size(), 2u);
    EXPECT_EQ(shared[0].name, "x");
    EXPECT_EQ(shared[0].labels, scratch / "both/x_label.png");
    EXPECT_EQ(shared[1].image, scratch / "both/y.nii.gz");
    EXPECT_EQ(match_folder_pairs(scratch / "both", scratch / "both").size(), 2u);

    EXPECT_EQ(volume_file_stem("case.01.nii.gz"), "case.01");
    EXPECT_EQ(volume_file_stem("scan.MHA"), "scan");
    EXPECT_EQ(volume_file_stem("readme.txt"), "");
    bool had_suffix = false;
    EXPECT_EQ(strip_label_suffix("brain_Mask", had_suffix), "brain");
    EXPECT_TRUE(had_suffix);
    EXPECT_EQ(strip_label_suffix("_seg", had_suffix), "_seg");
    EXPECT_FALSE(had_suffix);
}

TEST(DataFolderPairs, ErrorsNameTheFolderTheFileAndTheFix) {
    ScratchDir scratch;
    for (const char* name : {"images/a.nii.gz", "images/d.nii.gz", "labels/a_mask.nii.gz", "labels/dd_mask.nii.gz"}) {
        touch(scratch / name);
    }
    const std::string missing = error_message([&] { match_folder_pairs(scratch / "images", scratch / "labels"); });
    EXPECT_NE(missing.find("no label file for the image d.nii.gz in '" + (scratch / "images").string() + "'"),
              std::string::npos)
        << missing;
    EXPECT_NE(missing.find("expected '" + (scratch / "labels/d_mask.nii.gz").string() + "'"), std::string::npos) << missing;
    EXPECT_NE(missing.find("labels without an image: dd_mask.nii.gz"), std::string::npos) << missing;

    std::filesystem::create_directories(scratch / "empty");
    touch(scratch / "empty/readme.txt");
    const std::string empty = error_message([&] { match_folder_pairs(scratch / "empty", scratch / "labels"); });
    EXPECT_NE(empty.find("no images found in '" + (scratch / "empty").string() + "'"), std::string::npos) << empty;
    EXPECT_NE(empty.find(".nii.gz"), std::string::npos) << empty;

    const std::string absent = error_message([&] { match_folder_pairs(scratch / "nowhere", scratch / "labels"); });
    EXPECT_NE(absent.find("does not exist: set data.images to the folder"), std::string::npos) << absent;

    touch(scratch / "labels/a_seg.nii.gz");
    const std::string twice = error_message([&] { match_folder_pairs(scratch / "images", scratch / "labels"); });
    EXPECT_NE(twice.find("two label files"), std::string::npos) << twice;
    EXPECT_NE(twice.find("a_mask.nii.gz and a_seg.nii.gz"), std::string::npos) << twice;
}

TEST(DataFolderPairs, DatasetHoldsOutTheLastPairsAndChecksDimensions) {
    ScratchDir scratch;
    for (const char* name : {"p1", "p2", "p3", "p4"}) {
        write_pair(scratch / "img" / (std::string(name) + ".nii.gz"), scratch / "seg" / (std::string(name) + "_seg.nii.gz"),
                   {12, 10, 6}, [](std::int64_t z, std::int64_t y, std::int64_t x) { return static_cast<float>(x + y + z); },
                   [&](std::int64_t, std::int64_t, std::int64_t) { return static_cast<std::int32_t>(name[1] - '0'); });
    }
    DataConfig config;
    config.source = SourceKind::Folder;
    config.images_dir = scratch / "img";
    config.labels_dir = scratch / "seg";
    const auto dataset = make_dataset(config, {4, 1, 6, 8, 8}, 5);
    ASSERT_EQ(dataset->num_eval_examples(), 1);
    const Example held_out = dataset->eval_example(0);
    EXPECT_EQ(held_out.name, "p4");
    EXPECT_EQ(held_out.image.shape(), (Shape{1, 6, 10, 12}));
    std::set<std::int32_t> seen;
    for (int i = 0; i < 10; ++i) {
        const Batch batch = dataset->training_batch(i);
        seen.insert(batch.labels.data<std::int32_t>(), batch.labels.data<std::int32_t>() + batch.labels.num_elements());
    }
    EXPECT_EQ(seen, (std::set<std::int32_t>{1, 2, 3})) << "p4 is never trained on";
    EXPECT_NE(dataset->describe().find("4 image/label pairs, 3 training + 1 held out, 3D"), std::string::npos)
        << dataset->describe();

    const std::string flat_model = error_message([&] { make_dataset(config, {1, 1, 8, 8}, 5); });
    EXPECT_NE(flat_model.find("'" + (scratch / "img/p1.nii.gz").string() + "' is a volume"), std::string::npos) << flat_model;
    EXPECT_NE(flat_model.find("use a 3D model"), std::string::npos) << flat_model;
    const std::string channels = error_message([&] { make_dataset(config, {1, 2, 4, 8, 8}, 5); });
    EXPECT_NE(channels.find("the model takes 2 input channels"), std::string::npos) << channels;

    write_pair(scratch / "flat/q.nii.gz", scratch / "flat/q_mask.nii.gz", {12, 10, 1}, [](auto, auto, auto) { return 1.0f; },
               [](auto, auto, auto) { return 0; });
    config.images_dir = scratch / "flat";
    config.labels_dir.clear();
    const std::string deep_model = error_message([&] { make_dataset(config, {1, 1, 4, 8, 8}, 5); });
    EXPECT_NE(deep_model.find("is a 2D image"), std::string::npos) << deep_model;
    EXPECT_NE(deep_model.find("use a 2D model"), std::string::npos) << deep_model;

    // A label file on another grid.
    ImageGeometry geometry;
    geometry.size = {12, 10, 1};
    std::filesystem::create_directories(scratch / "grid");
    write_volume(make_volume(geometry), scratch / "grid/r.nii.gz");
    geometry.size = {12, 11, 1};
    write_label_map(make_label_map(geometry), scratch / "grid/r_seg.nii.gz");
    config.images_dir = scratch / "grid";
    const std::string grid = error_message([&] { make_dataset(config, {1, 1, 8, 8}, 5); });
    EXPECT_NE(grid.find("r_seg.nii.gz' is not on the image's grid"), std::string::npos) << grid;
}

// What the label files name becomes the classes' names (the evaluation's Dice/IoU table): beside each
// label map an MRIcron name file; identity, then ranges mapping several labels to one class.
TEST(DataFolderPairs, ClassesAreNamedByTheLabelFilesDescriptions) {
    ScratchDir scratch;
    for (const char* name : {"p1", "p2", "p3"}) {
        const fs::path labels = scratch / "seg" / (std::string(name) + "_seg.nii.gz");
        write_pair(scratch / "img" / (std::string(name) + ".nii.gz"), labels, {12, 10, 6},
                   [](std::int64_t z, std::int64_t y, std::int64_t x) { return static_cast<float>(x + y + z); },
                   [&](std::int64_t, std::int64_t, std::int64_t x) { return static_cast<std::int32_t>(x % 4); });
        std::ofstream(scratch / "seg" / (std::string(name) + "_seg.txt")) << "1 Hippocampus\n2 Amygdala\n3 Thalamus\n7 Other\n";
    }
    DataConfig config;
    config.source = SourceKind::Folder;
    config.images_dir = scratch / "img";
    config.labels_dir = scratch / "seg";
    config.holdout_fraction = 0;
    EXPECT_EQ(make_dataset(config, {1, 1, 6, 8, 8}, 8)->class_names(),
              (std::vector<std::string>{"", "Hippocampus", "Amygdala", "Thalamus", "", "", "", "Other"}));
    // Ranges: two labels make one class; 7 falls to the background without naming it.
    config.label_mapping = {LabelRule::range(1, 2, 1), LabelRule(3, 2)};
    EXPECT_EQ(make_dataset(config, {1, 1, 6, 8, 8}, 3)->class_names(),
              (std::vector<std::string>{"", "Hippocampus + Amygdala", "Thalamus"}));
    // Label files that name nothing: no names (the run keeps "background", "class 1", ...).
    for (const char* name : {"p1", "p2", "p3"}) fs::remove(scratch / "seg" / (std::string(name) + "_seg.txt"));
    config.label_mapping.clear();
    EXPECT_TRUE(make_dataset(config, {1, 1, 6, 8, 8}, 4)->class_names().empty());
}

TEST(DataFolderPairs, PngImageAndMaskPairsFeedA2DModel) {
    ScratchDir scratch;
    for (int case_index = 0; case_index < 3; ++case_index) {
        cv::Mat image(30, 40, CV_8UC1), mask(30, 40, CV_8UC1);
        for (int y = 0; y < 30; ++y) {
            for (int x = 0; x < 40; ++x) {
                image.at<unsigned char>(y, x) = static_cast<unsigned char>(100 + 3 * x + case_index);
                mask.at<unsigned char>(y, x) = x >= 20 ? 255 : 0;  // masks are usually saved as 0/255
            }
        }
        const std::string stem = "slice" + std::to_string(case_index);
        ASSERT_TRUE(cv::imwrite((scratch / (stem + ".png")).string(), image));
        ASSERT_TRUE(cv::imwrite((scratch / (stem + "_mask.png")).string(), mask));
    }
    DataConfig config;
    config.source = SourceKind::Folder;
    config.images_dir = scratch.path();
    const std::string unmapped = error_message([&] { make_dataset(config, {2, 1, 16, 16}, 2); });
    EXPECT_NE(unmapped.find("label 255 in '" + (scratch / "slice0_mask.png").string() + "'"), std::string::npos) << unmapped;
    config.label_mapping = {{255, 1}};
    config.normalization = Normalization::None;
    const auto dataset = make_dataset(config, {2, 1, 16, 16}, 2);
    EXPECT_EQ(dataset->num_eval_examples(), 1);
    EXPECT_EQ(dataset->eval_example(0).name, "slice2");
    EXPECT_EQ(dataset->eval_example(0).image.shape(), (Shape{1, 30, 40}));
    for (int i = 0; i < 4; ++i) {
        const Batch batch = dataset->training_batch(i);
        for (std::int64_t v = 0; v < batch.labels.num_elements(); ++v) {
            // The mask is the right half, where the image is brightest: 100 + 3x ≥ 160.
            const bool bright = batch.images.data<float>()[v] >= 160.0f;
            ASSERT_EQ(batch.labels.data<std::int32_t>()[v], bright ? 1 : 0);
        }
    }
}

TEST(DataExampleMri, HeadMriTrainsOnTheFirstSlicesAndHoldsOutTheLast) {
    if (!find_example_mri()) GTEST_SKIP() << "the example MRI is missing: install the Debian package " << example_data_package;
    DataConfig config;
    config.source = SourceKind::ExampleMri;
    const auto dataset = make_dataset(config, {2, 1, 16, 64, 64}, 2);
    ASSERT_EQ(dataset->num_eval_examples(), 1);
    const Example held_out = dataset->eval_example(0);
    EXPECT_EQ(held_out.name, "head_mri slices 47-61");
    EXPECT_EQ(held_out.image.shape(), (Shape{1, 15, 128, 128}));
    EXPECT_EQ(held_out.geometry.size, (std::array<std::int64_t, 3>{128, 128, 15}));
    std::set<std::int32_t> seen;
    std::int64_t brain = 0;
    for (int i = 0; i < 4; ++i) {
        const Batch batch = dataset->training_batch(i);
        EXPECT_EQ(batch.images.shape(), (Shape{2, 1, 16, 64, 64}));
        for (std::int64_t v = 0; v < batch.labels.num_elements(); ++v) {
            seen.insert(batch.labels.data<std::int32_t>()[v]);
            brain += batch.labels.data<std::int32_t>()[v];
        }
    }
    EXPECT_EQ(seen, (std::set<std::int32_t>{0, 1})) << "the mask's 4/5/6 become brain = 1";
    EXPECT_GT(brain, 0);
    EXPECT_NE(dataset->describe().find("insighttoolkit5-examples"), std::string::npos) << dataset->describe();
    EXPECT_NE(dataset->describe().find("slices 0-46 training + 47-61 held out"), std::string::npos) << dataset->describe();

    const std::string flat = error_message([&] { make_dataset(config, {2, 1, 64, 64}, 2); });
    EXPECT_NE(flat.find("use a 3D model"), std::string::npos) << flat;
    const std::string classes = error_message([&] {
        make_dataset(DataConfig{.source = SourceKind::ExampleMri, .label_mapping = {{4, 1}, {5, 2}, {6, 3}}}, {1, 1, 8, 8, 8}, 3);
    });
    EXPECT_NE(classes.find("label 6 in '"), std::string::npos) << classes;
    EXPECT_NE(classes.find("maps to class 3"), std::string::npos) << classes;
}

TEST(DataExampleMri, MissingDataNamesThePackage) {
    ScratchDir scratch;  // an empty folder where the example files should be
    const char* previous = std::getenv("TESSERA_EXAMPLE_DATA");
    const std::string saved = previous ? previous : "";
    ::setenv("TESSERA_EXAMPLE_DATA", scratch.path().c_str(), 1);
    const std::string message =
        error_message([] { make_dataset(DataConfig{.source = SourceKind::ExampleMri}, {1, 1, 8, 8, 8}, 2); });
    if (previous) {
        ::setenv("TESSERA_EXAMPLE_DATA", saved.c_str(), 1);
    } else {
        ::unsetenv("TESSERA_EXAMPLE_DATA");
    }
    EXPECT_NE(message.find("the example head MRI is not installed"), std::string::npos) << message;
    EXPECT_NE(message.find("sudo apt install insighttoolkit5-examples"), std::string::npos) << message;
}
