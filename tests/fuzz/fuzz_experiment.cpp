// Fuzz target: experiment files (engine/experiment). The input is the file's text, loaded from disk
// as `tessera-cli` does; an accepted experiment is then asked for what the CLI and the studio derive
// from it first (input shapes, the partition's pieces and tile grid, the trainer's settings).
#include "experiment/experiment.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tessera;
    using namespace tessera::fuzz;
    const std::filesystem::path path = input_file("fuzz_experiment.json", data, size);
    expect_success_or_error([&] {
        const experiment::Experiment loaded = experiment::load_experiment(path);
        expect_success_or_error([&] { (void)experiment::global_input_shape(loaded); });
        expect_success_or_error([&] { (void)experiment::replica_input_shape(loaded); });
        expect_success_or_error([&] { (void)experiment::spatial_pieces(loaded); });
        expect_success_or_error([&] { (void)experiment::tile_boundaries_text(experiment::tile_grid(loaded)); });
        expect_success_or_error([&] { (void)experiment::trainer_config(loaded); });
        expect_success_or_error([&] { experiment::check_trainable(loaded); });
    });
    return 0;
}
