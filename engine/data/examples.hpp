// The example data Tessera opens by default: the real head MRI and its skull-strip mask that Debian's
// insighttoolkit5-examples package ships (128×128×62, 2×2×3 mm, int16; the mask's non-zero voxels are
// the brain, labelled 4/5/6 by tissue class).
#pragma once

#include <filesystem>
#include <optional>

namespace tessera {

struct ExampleFiles {
    std::filesystem::path image;
    std::filesystem::path labels;
};

inline constexpr const char* example_data_package = "insighttoolkit5-examples";

// The example MRI when the package is installed (and TESSERA_EXAMPLE_DATA, if set, names its folder).
std::optional<ExampleFiles> find_example_mri();

}  // namespace tessera
