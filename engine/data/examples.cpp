#include "data/examples.hpp"

#include <cstdlib>

namespace tessera {

std::optional<ExampleFiles> find_example_mri() {
    std::filesystem::path folder = "/usr/share/doc/insighttoolkit5-examples/examples/Data";
    if (const char* custom = std::getenv("TESSERA_EXAMPLE_DATA"); custom != nullptr && *custom != '\0') folder = custom;
    ExampleFiles files{folder / "KmeansTest_T1UCharRaw.nii.gz", folder / "KmeansTest_T1RawSkullStrip.nii.gz"};
    std::error_code error;
    if (!std::filesystem::is_regular_file(files.image, error) || !std::filesystem::is_regular_file(files.labels, error)) {
        return std::nullopt;
    }
    return files;
}

}  // namespace tessera
