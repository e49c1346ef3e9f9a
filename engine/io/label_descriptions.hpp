// Label descriptions — what each value of a label map stands for — in the files neuroimaging users
// already keep beside their atlases and segmentations:
//   ITK-SNAP label description files   IDX R G B A VIS MSH "LABEL"   (colours 0–255, alpha 0–1)
//   3D Slicer colour tables (.ctbl, .txt) and FreeSurfer's FreeSurferColorLUT.txt
//                                      index name R G B A            (colours 0–255; names without spaces)
//   MRIcron's sidecars                 .txt: index name [more]       .lut: 768 bytes, R[256] G[256] B[256]
// (a .seg.nrrd names its segments itself: nrrd_io.cpp). Descriptions are cosmetic, so a reader is strict
// about what it takes (a malformed line is an error naming the file and line) but a label map opens
// without them.
//
//   auto described = read_label_descriptions("aal.nii.txt");          // names
//   merge_label_descriptions(described, read_label_descriptions("aal.nii.lut"));  // + colours
//   for (auto& sidecar : label_description_sidecars("aal.nii.gz")) ...  // aal.nii.txt, aal.nii.lut, aal.txt, …
//   write_itksnap_label_descriptions(described, "legend.txt");
#pragma once

#include "io/volume.hpp"

#include <array>
#include <filesystem>
#include <vector>

namespace tessera {

// Reads any of the formats above (told apart by content: the .lut by its size); sorted by value, the
// background (value 0) left out. Throws, naming the file and line, on a line it cannot read.
std::vector<LabelDescription> read_label_descriptions(const std::filesystem::path& path);

// Files beside a label map that may describe it, in the order to read them: MRIcron's
// <name>.txt / <name>.lut with and without the image extension (aal.nii.gz: aal.nii.txt, aal.nii.lut,
// aal.txt, aal.lut) and Slicer's <name>.ctbl. Only those that exist.
std::vector<std::filesystem::path> label_description_sidecars(const std::filesystem::path& label_map);

// Adds what `more` says to `into`: a value `into` lacks is added, a name or colour it lacks is filled
// (MRIcron keeps names and colours in two files); what `into` already has is kept.
void merge_label_descriptions(std::vector<LabelDescription>& into, const std::vector<LabelDescription>& more);

// The sidecars' descriptions merged, for a label map that names nothing itself: the named labels with
// their colours, or a colour table's colours alone (empty names) when no sidecar names any. Unreadable
// sidecars are skipped with a warning added to `warnings`.
std::vector<LabelDescription> find_label_descriptions(const std::filesystem::path& label_map, std::vector<std::string>& warnings);

// The colour a label is shown in when nothing names one (RGB in [0, 1]): saturated colours that stay
// visible over grey (1 red, 2 green, 3 blue, 4 yellow, 5 cyan, …), then hues a golden angle apart. The
// studio's overlay, its 3D surfaces, the run report and written .seg.nrrd files share it.
std::array<float, 3> default_label_color(std::int32_t label);

// An ITK-SNAP label description file (opens in ITK-SNAP's Label Editor and here), background first.
// A label without a colour is written grey; the studio passes the colours it shows.
void write_itksnap_label_descriptions(const std::vector<LabelDescription>& descriptions, const std::filesystem::path& path);

}  // namespace tessera
