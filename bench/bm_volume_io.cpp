// bm_volume_io: loading a 256³ CT-like volume from .nii.gz (target < 1 s) and from .nii.
#include "data/phantom.hpp"
#include "io/volume_io.hpp"

#include <benchmark/benchmark.h>

#include <cmath>
#include <filesystem>

namespace {

// One 256³ int16 phantom written once per format into the temp folder.
std::filesystem::path phantom_file(const char* extension) {
    const auto path = std::filesystem::temp_directory_path() / (std::string("tessera_bm_phantom_256") + extension);
    if (!std::filesystem::exists(path)) {
        tessera::PhantomOptions options;
        options.size = {256, 256, 256};
        tessera::Phantom phantom = tessera::make_ct_phantom(options);
        // Round to integers so the writer can store int16, as CT scanners do.
        float* voxels = phantom.volume.voxels.data<float>();
        for (std::int64_t v = 0; v < phantom.volume.geometry.num_voxels(); ++v) voxels[v] = std::nearbyint(voxels[v]);
        phantom.volume.source_scalar_type = "int16";
        tessera::write_volume(phantom.volume, path);
    }
    return path;
}

void bm_volume_load_nifti_gz_256(benchmark::State& state) {
    const auto path = phantom_file(".nii.gz");
    for (auto _ : state) {
        tessera::Volume volume = tessera::read_volume(path);
        benchmark::DoNotOptimize(volume.voxels.raw_data());
    }
    state.counters["file_MB"] = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
    state.counters["voxels_per_s"] =
        benchmark::Counter(256.0 * 256 * 256, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(bm_volume_load_nifti_gz_256)->Unit(benchmark::kMillisecond)->MinTime(3.0);

void bm_volume_load_nifti_256(benchmark::State& state) {
    const auto path = phantom_file(".nii");
    for (auto _ : state) {
        tessera::Volume volume = tessera::read_volume(path);
        benchmark::DoNotOptimize(volume.voxels.raw_data());
    }
}
BENCHMARK(bm_volume_load_nifti_256)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void bm_label_map_load_nifti_gz_256(benchmark::State& state) {
    const auto path = std::filesystem::temp_directory_path() / "tessera_bm_labels_256.nii.gz";
    if (!std::filesystem::exists(path)) {
        tessera::PhantomOptions options;
        options.size = {256, 256, 256};
        tessera::write_label_map(tessera::make_ct_phantom(options).labels, path);
    }
    for (auto _ : state) {
        tessera::LabelMap labels = tessera::read_label_map(path);
        benchmark::DoNotOptimize(labels.labels.raw_data());
    }
}
BENCHMARK(bm_label_map_load_nifti_gz_256)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace
