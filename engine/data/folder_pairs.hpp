// Image/label pairs from folders, matched by name.
//
// An image and a label file pair up when their stems match after stripping the volume extension
// (".nii.gz", ".mha", ".png", ...) and, on the label side, one suffix _label, _labels, _mask or _seg
// (any case). Labels may sit in their own folder (where the suffix is optional) or beside the images
// (where the suffix is what tells them apart):
//
//   images/case01.nii.gz   labels/case01_seg.nii.gz      -> pair "case01"
//   images/case02.nii.gz   labels/case02.nii.gz          -> pair "case02"
//   both/slice7.png        both/slice7_mask.png          -> pair "slice7" (labels_dir empty or == images_dir)
//
// Files with other extensions (a .mhd's .raw, notes, hidden files) are ignored. Pairs come back sorted
// by name, so "the last quarter of the pairs" is the same set on every machine.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace tessera::data {

struct FilePair {
    std::string name;  // the shared stem: "case01"
    std::filesystem::path image;
    std::filesystem::path labels;
};

// Throws, naming the folder, the file and the fix, for a missing folder, a folder with no images, an
// image without a label, and two files that claim the same name.
std::vector<FilePair> match_folder_pairs(const std::filesystem::path& images_dir,
                                         const std::filesystem::path& labels_dir);

// The file name without its volume extension: "case01.nii.gz" -> "case01"; "" for an unsupported one.
std::string volume_file_stem(const std::filesystem::path& path);
// A label stem without its _label/_labels/_mask/_seg suffix: "case01_seg" -> "case01". `had_suffix`
// tells whether one was stripped.
std::string strip_label_suffix(const std::string& stem, bool& had_suffix);

}  // namespace tessera::data
