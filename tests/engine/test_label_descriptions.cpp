// Label descriptions in the files atlases and segmentations come with (engine/io/label_descriptions.hpp):
// each format written here as its documentation gives it, read back; MRIcron's sidecar pair found beside
// a label map; the ITK-SNAP writer read back; and the refusals, which name the file and the line.
#include "io/label_descriptions.hpp"
#include "io/volume_io.hpp"
#include "support/error_of.hpp"
#include "volume_io_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>

using namespace tessera;
using namespace tessera::test;

#define EXPECT_MESSAGE_HAS(message, part) \
    EXPECT_NE((message).find(part), std::string::npos) << "expected \"" << (part) << "\" in: " << (message)

namespace {

const LabelDescription& described(const std::vector<LabelDescription>& all, std::int32_t value) {
    for (const LabelDescription& d : all) {
        if (d.value == value) return d;
    }
    throw std::runtime_error("label " + std::to_string(value) + " not described");
}

std::array<float, 3> rgb(int r, int g, int b) { return {r / 255.0f, g / 255.0f, b / 255.0f}; }

// A label map on a 4×3×2 grid holding labels 0, 1, 2 and 45.
LabelMap small_labels() {
    ImageGeometry geometry;
    geometry.size = {4, 3, 2};
    LabelMap labels = make_label_map(geometry);
    std::int32_t* values = labels.labels.data<std::int32_t>();
    values[1] = 1;
    values[5] = 2;
    values[17] = 45;
    return labels;
}

}  // namespace

TEST(LabelDescriptions, ItkSnapFilesGiveNamesWithSpacesAndColours) {
    ScratchDir scratch;
    test::write_text(scratch / "labels.txt",
                     "################################################\n"
                     "# ITK-SnAP Label Description File\n"
                     "# IDX   -R-  -G-  -B-  -A--  VIS MSH  LABEL\n"
                     "################################################\n"
                     "    0     0    0    0        0  0  0    \"Clear Label\"\n"
                     "    1   255    0    0        1  1  1    \"Left hippocampus\"\n"
                     "   12     0  128  255     0.50  1  0    \"Right caudate (head)\"\r\n");
    const std::vector<LabelDescription> read = read_label_descriptions(scratch / "labels.txt");
    ASSERT_EQ(read.size(), 2u);  // the background is not a label
    EXPECT_EQ(read[0].value, 1);
    EXPECT_EQ(read[0].name, "Left hippocampus");
    EXPECT_EQ(read[0].color, rgb(255, 0, 0));
    EXPECT_EQ(read[1].value, 12);
    EXPECT_EQ(read[1].name, "Right caudate (head)");
    EXPECT_EQ(read[1].color, rgb(0, 128, 255));
}

TEST(LabelDescriptions, SlicerAndFreeSurferColourTablesGiveNamesAndColours) {
    ScratchDir scratch;
    // FreeSurferColorLUT.txt's layout (#No. Label Name: R G B A), values out of order, a blank line.
    test::write_text(scratch / "FreeSurferColorLUT.txt",
                     "#$Id: FreeSurferColorLUT.txt $\n"
                     "\n"
                     "#No. Label Name:                            R   G   B   A\n"
                     "0   Unknown                                 0   0   0   0\n"
                     "17  Left-Hippocampus                        220 216 20  0\n"
                     "2   Left-Cerebral-White-Matter              245 245 245 0\n");
    const std::vector<LabelDescription> fs = read_label_descriptions(scratch / "FreeSurferColorLUT.txt");
    ASSERT_EQ(fs.size(), 2u);
    EXPECT_EQ(fs[0].value, 2);
    EXPECT_EQ(fs[0].name, "Left-Cerebral-White-Matter");
    EXPECT_EQ(described(fs, 17).color, rgb(220, 216, 20));
    // 3D Slicer's colour table (.ctbl): the same fields, A 255.
    test::write_text(scratch / "organs.ctbl", "# Color table file organs.ctbl\n# 2 values\n1 liver 221 130 101 255\n2 spleen 157 108 162 255\n");
    const std::vector<LabelDescription> slicer = read_label_descriptions(scratch / "organs.ctbl");
    ASSERT_EQ(slicer.size(), 2u);
    EXPECT_EQ(slicer[1].name, "spleen");
    EXPECT_EQ(slicer[1].color, rgb(157, 108, 162));
}

// MRIcron keeps an atlas's names in <atlas>.nii.txt and its colours in <atlas>.nii.lut (768 bytes:
// 256 reds, 256 greens, 256 blues). read_label_map finds both beside the label map and merges them.
TEST(LabelDescriptions, MricronSidecarsBesideALabelMapNameAndColourIt) {
    ScratchDir scratch;
    write_label_map(small_labels(), scratch / "aal.nii.gz");
    test::write_text(scratch / "aal.nii.txt", "1\tPrecentral_L\t2001\n2\tPrecentral_R\t2002\n45\tCuneus_L\t5001\n");
    std::vector<unsigned char> lut(768, 0);
    lut[1] = 255;             // red of label 1
    lut[256 + 2] = 200;       // green of label 2
    lut[512 + 45] = 100;      // blue of label 45
    test::write_bytes(scratch / "aal.nii.lut", lut);
    EXPECT_EQ(label_description_sidecars(scratch / "aal.nii.gz"),
              (std::vector<std::filesystem::path>{scratch / "aal.nii.txt", scratch / "aal.nii.lut"}));
    const LabelMap read = read_label_map(scratch / "aal.nii.gz");
    EXPECT_TRUE(read.warnings.empty()) << read.warnings.front();
    ASSERT_EQ(read.descriptions.size(), 3u);  // the .lut's other 252 colours name nothing
    EXPECT_EQ(described(read.descriptions, 1).name, "Precentral_L");
    EXPECT_EQ(described(read.descriptions, 1).color, rgb(255, 0, 0));
    EXPECT_EQ(described(read.descriptions, 2).color, rgb(0, 200, 0));
    EXPECT_EQ(described(read.descriptions, 45).name, "Cuneus_L");
    EXPECT_EQ(described(read.descriptions, 45).color, rgb(0, 0, 100));
    // Without the names, the colour table alone colours every value (MRIcron's brodmann.nii.lut has no
    // .txt); without any sidecar, nothing is described.
    std::filesystem::remove(scratch / "aal.nii.txt");
    const LabelMap colours = read_label_map(scratch / "aal.nii.gz");
    ASSERT_EQ(colours.descriptions.size(), 255u);
    EXPECT_EQ(described(colours.descriptions, 2).color, rgb(0, 200, 0));
    EXPECT_TRUE(described(colours.descriptions, 2).name.empty());
    std::filesystem::remove(scratch / "aal.nii.lut");
    EXPECT_TRUE(read_label_map(scratch / "aal.nii.gz").descriptions.empty());
}

namespace {

// Sets a NIfTI-1 file's intent_code (byte 68) and aux_file (bytes 204–227) in place.
void set_nifti_intent(const std::filesystem::path& path, std::int16_t intent_code, const std::string& aux_file) {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file);
    file.seekp(68);
    file.write(reinterpret_cast<const char*>(&intent_code), sizeof intent_code);
    char aux[24] = {};
    std::memcpy(aux, aux_file.data(), std::min<std::size_t>(aux_file.size(), sizeof aux));
    file.seekp(204);
    file.write(aux, sizeof aux);
}

}  // namespace

TEST(LabelDescriptions, ANiftiLabelMapNamesItsLabelsFileInAuxFile) {
    // nifti1.h, NIFTI_INTENT_LABEL (1002): "the filename with the labels may be stored in the aux_file field".
    ScratchDir scratch;
    write_label_map(small_labels(), scratch / "atlas.nii");
    test::write_text(scratch / "regions.txt", "1 255 0 0 1 1 1 \"Left hippocampus\"\n45 0 0 255 1 1 1 \"Right amygdala\"\n");
    set_nifti_intent(scratch / "atlas.nii", 1002, "regions.txt");
    const LabelMap read = read_label_map(scratch / "atlas.nii");
    EXPECT_TRUE(read.warnings.empty()) << read.warnings.front();
    ASSERT_EQ(read.descriptions.size(), 2u);
    EXPECT_EQ(described(read.descriptions, 1).name, "Left hippocampus");
    EXPECT_EQ(described(read.descriptions, 45).color, rgb(0, 0, 255));
    // Another intent: aux_file is something else, not read.
    set_nifti_intent(scratch / "atlas.nii", 0, "regions.txt");
    EXPECT_TRUE(read_label_map(scratch / "atlas.nii").descriptions.empty());
    // Names are cosmetic: a missing file or one outside the image's folder only warns.
    set_nifti_intent(scratch / "atlas.nii", 1002, "gone.txt");
    const LabelMap missing = read_label_map(scratch / "atlas.nii");
    EXPECT_TRUE(missing.descriptions.empty());
    ASSERT_EQ(missing.warnings.size(), 1u);
    EXPECT_MESSAGE_HAS(missing.warnings.front(), "\"gone.txt\" (aux_file), which is not beside it");
    set_nifti_intent(scratch / "atlas.nii", 1002, "../regions.txt");
    const LabelMap outside = read_label_map(scratch / "atlas.nii");
    EXPECT_TRUE(outside.descriptions.empty());
    ASSERT_EQ(outside.warnings.size(), 1u);
    EXPECT_MESSAGE_HAS(outside.warnings.front(), "not a plain file name");
    // A damaged names file: the labels still open, with a warning naming it.
    test::write_text(scratch / "regions.txt", "1 liver\n1 spleen\n");
    set_nifti_intent(scratch / "atlas.nii", 1002, "regions.txt");
    const LabelMap damaged = read_label_map(scratch / "atlas.nii");
    EXPECT_TRUE(damaged.descriptions.empty());
    ASSERT_EQ(damaged.warnings.size(), 1u);
    EXPECT_MESSAGE_HAS(damaged.warnings.front(), "label names not read from regions.txt (the header's aux_file)");
}

TEST(LabelDescriptions, ItkSnapFilesWrittenHereReadBack) {
    ScratchDir scratch;
    std::vector<LabelDescription> legend{{3, "Tumour \"core\"", std::array<float, 3>{1.0f, 0.5f, 0.0f}}, {7, "Oedema", std::nullopt}};
    write_itksnap_label_descriptions(legend, scratch / "legend.txt");
    const std::vector<LabelDescription> read = read_label_descriptions(scratch / "legend.txt");
    ASSERT_EQ(read.size(), 2u);
    EXPECT_EQ(read[0].value, 3);
    EXPECT_EQ(read[0].name, "Tumour 'core'");  // ITK-SNAP names cannot hold a double quote
    EXPECT_EQ(read[0].color, rgb(255, 128, 0));
    EXPECT_EQ(read[1].name, "Oedema");
    EXPECT_EQ(read[1].color, rgb(128, 128, 128));  // no colour: grey
}

TEST(LabelDescriptions, MalformedFilesAreRefusedNamingTheFileAndLine) {
    ScratchDir scratch;
    test::write_text(scratch / "bad.txt", "1 liver 221 130 101 255\n2 spleen 300 0 0 255\n");
    EXPECT_MESSAGE_HAS(test::error_of([&] { read_label_descriptions(scratch / "bad.txt"); }),
                       "bad.txt' line 2 ('2 spleen 300 0 0 255'): R, G and B must be whole numbers from 0 to 255");
    test::write_text(scratch / "value.txt", "liver 1\n");
    EXPECT_MESSAGE_HAS(test::error_of([&] { read_label_descriptions(scratch / "value.txt"); }),
                       "value.txt' line 1 ('liver 1'): 'liver' is not a label value");
    test::write_text(scratch / "quote.txt", "    1   255 0 0   1 1 1   \"Left hippocampus\n");
    EXPECT_MESSAGE_HAS(test::error_of([&] { read_label_descriptions(scratch / "quote.txt"); }), "a quoted name is not closed");
    test::write_text(scratch / "twice.txt", "1 liver\n1 spleen\n");
    EXPECT_MESSAGE_HAS(test::error_of([&] { read_label_descriptions(scratch / "twice.txt"); }),
                       "describes label 1 twice ('liver' and 'spleen')");
    test::write_bytes(scratch / "short.lut", std::vector<unsigned char>(700, 0));
    EXPECT_MESSAGE_HAS(test::error_of([&] { read_label_descriptions(scratch / "short.lut"); }),
                       "is 700 bytes: an MRIcron colour table (.lut) holds 768");
    // A bad sidecar does not stop the label map: a warning says why it was not used.
    write_label_map(small_labels(), scratch / "atlas.nii");
    test::write_text(scratch / "atlas.txt", "one Precentral_L\n");
    const LabelMap read = read_label_map(scratch / "atlas.nii");
    EXPECT_TRUE(read.descriptions.empty());
    ASSERT_EQ(read.warnings.size(), 1u);
    EXPECT_NE(read.warnings[0].find("label names not read from atlas.txt"), std::string::npos) << read.warnings[0];
}
