// Fuzz target: a model_dir's checkpoint index (engine/run/model_dir.cpp). The input is the folder's
// `checkpoint` file; opening the folder (which reads the index to clean up unlisted files) and
// listing its checkpoints must either work or refuse with a tessera::Error.
#include "fuzz_support.hpp"
#include "run/model_dir.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tessera;
    using namespace tessera::fuzz;
    const std::filesystem::path folder = scratch_dir() / "model_dir";
    std::filesystem::create_directories(folder);
    write_bytes(folder / "checkpoint", data, size);
    expect_success_or_error([&] {
        run::ModelDir dir(folder);
        const std::vector<run::CheckpointInfo> all = dir.checkpoints();
        const std::optional<run::CheckpointInfo> latest = dir.latest();
        require(latest.has_value() == !all.empty(), "latest() disagrees with checkpoints()");
    });
    return 0;
}
