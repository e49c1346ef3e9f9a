// tessera-cli: the headless entry point. It links the engine alone (no Qt, no rendering).
//
//   tessera-cli                         the default job: describe the example MRI and its mask
//   tessera-cli info <image> [--labels <file>]
//   tessera-cli phantom <out.nii.gz> [--size 128,128,96] [--spacing 1,1,1] [--seed 1] [--labels <out>]
//   tessera-cli convert <in> <out>
//
// Exit codes: 0 success, 2 bad input (a file or an argument), 1 any other failure.
#include "core/error.hpp"
#include "data/examples.hpp"
#include "data/phantom.hpp"
#include "io/volume_io.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>

namespace {

constexpr int exit_bad_input = 2;
constexpr int exit_failure = 1;

void describe_volume(const tessera::Volume& volume) {
    const auto& g = volume.geometry;
    const float* voxels = volume.voxels.data<float>();
    const auto [lowest, highest] = std::minmax_element(voxels, voxels + g.num_voxels());
    std::printf("image    %s\n", volume.source_path.c_str());
    std::printf("grid     %s\n", tessera::describe(g).c_str());
    std::printf("origin   %.3f, %.3f, %.3f mm (LPS)\n", g.origin[0], g.origin[1], g.origin[2]);
    std::printf("direction %.3f %.3f %.3f | %.3f %.3f %.3f | %.3f %.3f %.3f\n", g.direction[0], g.direction[1],
                g.direction[2], g.direction[3], g.direction[4], g.direction[5], g.direction[6], g.direction[7],
                g.direction[8]);
    std::printf("voxels   %s in the file, values %g … %g\n", volume.source_scalar_type.c_str(),
                static_cast<double>(*lowest), static_cast<double>(*highest));
}

void describe_labels(const tessera::LabelMap& labels) {
    std::map<std::int32_t, std::int64_t> counts;
    const std::int32_t* values = labels.labels.data<std::int32_t>();
    for (std::int64_t v = 0; v < labels.geometry.num_voxels(); ++v) ++counts[values[v]];
    std::printf("labels   %s\n", labels.source_path.c_str());
    for (const auto& [label, count] : counts) {
        std::printf("  label %d: %lld voxels (%.1f%%)\n", label, static_cast<long long>(count),
                    100.0 * static_cast<double>(count) / static_cast<double>(labels.geometry.num_voxels()));
    }
}

std::array<double, 3> parse_triple(const std::string& text, const char* what) {
    std::array<double, 3> values{};
    char separator1 = 0, separator2 = 0;
    std::istringstream in(text);
    in >> values[0] >> separator1 >> values[1] >> separator2 >> values[2];
    TESSERA_CHECK(in && separator1 == ',' && separator2 == ',',
                  "expected " << what << " as three comma-separated numbers such as 128,128,96, got '" << text << "'");
    return values;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"tessera-cli: headless Tessera (volumes, phantoms; training and planning come later)"};
    app.set_version_flag("--version", TESSERA_VERSION);
    app.require_subcommand(0, 1);

    std::string info_image, info_labels;
    CLI::App* info = app.add_subcommand("info", "Describe an image (and a label map on its grid)");
    info->add_option("image", info_image, "Image file or DICOM folder")->required();
    info->add_option("--labels", info_labels, "Label map to check against the image's grid");

    std::string phantom_out, phantom_labels, phantom_size = "128,128,96", phantom_spacing = "1,1,1";
    std::uint64_t phantom_seed = 1;
    CLI::App* phantom = app.add_subcommand("phantom", "Write a seeded synthetic CT phantom");
    phantom->add_option("out", phantom_out, "Output image (.nii, .nii.gz, .mha, .mhd)")->required();
    phantom->add_option("--labels", phantom_labels, "Output label map");
    phantom->add_option("--size", phantom_size, "Voxels along x,y,z (z = 1 for 2D)")->capture_default_str();
    phantom->add_option("--spacing", phantom_spacing, "Voxel spacing x,y,z in mm")->capture_default_str();
    phantom->add_option("--seed", phantom_seed, "Random seed")->capture_default_str();

    std::string convert_in, convert_out;
    bool convert_as_labels = false;
    CLI::App* convert = app.add_subcommand("convert", "Convert an image between formats");
    convert->add_option("in", convert_in, "Input image or DICOM folder")->required();
    convert->add_option("out", convert_out, "Output image (.nii, .nii.gz, .mha, .mhd)")->required();
    convert->add_flag("--labels", convert_as_labels, "Treat the image as a label map (integer values)");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& error) {
        return app.exit(error) == 0 ? 0 : exit_bad_input;
    }

    try {
        if (*info) {
            const tessera::Volume volume = tessera::read_volume(info_image);
            describe_volume(volume);
            if (!info_labels.empty()) {
                const tessera::LabelMap labels = tessera::read_label_map(info_labels);
                tessera::check_same_grid(volume.geometry, labels.geometry, info_labels);
                describe_labels(labels);
            }
        } else if (*phantom) {
            tessera::PhantomOptions options;
            const auto size = parse_triple(phantom_size, "--size");
            for (std::size_t axis = 0; axis < 3; ++axis) options.size[axis] = static_cast<std::int64_t>(size[axis]);
            options.spacing = parse_triple(phantom_spacing, "--spacing");
            options.seed = phantom_seed;
            const tessera::Phantom generated = tessera::make_ct_phantom(options);
            tessera::write_volume(generated.volume, phantom_out);
            std::printf("wrote %s (%s)\n", phantom_out.c_str(), tessera::describe(generated.volume.geometry).c_str());
            if (!phantom_labels.empty()) {
                tessera::write_label_map(generated.labels, phantom_labels);
                std::printf("wrote %s\n", phantom_labels.c_str());
            }
        } else if (*convert) {
            if (convert_as_labels) {
                tessera::write_label_map(tessera::read_label_map(convert_in), convert_out);
            } else {
                tessera::write_volume(tessera::read_volume(convert_in), convert_out);
            }
            std::printf("wrote %s\n", convert_out.c_str());
        } else {
            // The default job: what `make run` does on a machine without a display.
            const auto example = tessera::find_example_mri();
            if (!example) {
                std::fprintf(stderr,
                             "tessera-cli: the example MRI is not installed (Debian package %s); "
                             "try `tessera-cli phantom phantom.nii.gz`\n",
                             tessera::example_data_package);
                return exit_bad_input;
            }
            const tessera::Volume volume = tessera::read_volume(example->image);
            const tessera::LabelMap labels = tessera::read_label_map(example->labels);
            tessera::check_same_grid(volume.geometry, labels.geometry, example->labels.string());
            describe_volume(volume);
            describe_labels(labels);
        }
    } catch (const tessera::Error& error) {
        std::fprintf(stderr, "tessera-cli: %s\n", error.what());
        return error.is_internal() ? exit_failure : exit_bad_input;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "tessera-cli: %s\n", error.what());
        return exit_failure;
    }
    return 0;
}
