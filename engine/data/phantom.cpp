#include "data/phantom.hpp"

#include "core/error.hpp"
#include "core/random.hpp"

#include <cmath>

namespace tessera {
namespace {

struct Ellipsoid {
    std::array<double, 3> centre;  // normalised body coordinates, [-1, 1] per axis
    std::array<double, 3> radius;  // same units
    std::int32_t label;
    float hounsfield;
    bool contains(double x, double y, double z) const {
        const double dx = (x - centre[0]) / radius[0];
        const double dy = (y - centre[1]) / radius[1];
        const double dz = (z - centre[2]) / radius[2];
        return dx * dx + dy * dy + dz * dz <= 1.0;
    }
};

constexpr float air_hounsfield = -1000.0f;
constexpr float fat_hounsfield = -100.0f;

}  // namespace

const std::vector<std::string>& phantom_label_names() {
    static const std::vector<std::string> names{"background", "soft tissue", "lung", "bone", "organ", "lesion"};
    return names;
}

Phantom make_ct_phantom(const PhantomOptions& options) {
    for (int axis = 0; axis < 3; ++axis) {
        TESSERA_CHECK(options.size[static_cast<std::size_t>(axis)] > 0,
                      "phantom size must be positive on every axis, got "
                          << options.size[0] << "×" << options.size[1] << "×" << options.size[2]);
        TESSERA_CHECK(options.spacing[static_cast<std::size_t>(axis)] > 0,
                      "phantom spacing must be positive on every axis, got " << options.spacing[0] << "×"
                                                                             << options.spacing[1] << "×"
                                                                             << options.spacing[2] << " mm");
    }
    TESSERA_CHECK(options.noise_sigma >= 0, "noise_sigma must be ≥ 0 HU, got " << options.noise_sigma);

    SeededRandom random(options.seed);
    auto jittered = [&](double value) { return value + options.jitter * random.symmetric(); };

    // Later entries win: the body first, organs inside it, the lesion inside the organ.
    const std::vector<Ellipsoid> structures{
        {{0, 0, 0}, {0.92, 0.78, 0.95}, 1, 40.0f},                                   // soft tissue
        {{jittered(-0.42), jittered(-0.1), jittered(0.25)}, {0.3, 0.42, 0.5}, 2, -850.0f},  // right lung (−x is the patient's right in LPS)
        {{jittered(0.42), jittered(-0.1), jittered(0.25)}, {0.3, 0.42, 0.5}, 2, -850.0f},   // left lung
        {{0, jittered(0.55), 0}, {0.12, 0.12, 0.95}, 3, 700.0f},                     // spine
        {{jittered(0.3), jittered(0.05), jittered(-0.45)}, {0.38, 0.3, 0.32}, 4, 60.0f},   // organ
        {{jittered(0.32), jittered(0.05), jittered(-0.45)}, {0.1, 0.1, 0.1}, 5, 120.0f},   // lesion
    };
    const Ellipsoid fat_shell{{0, 0, 0}, {0.97, 0.84, 0.99}, 1, fat_hounsfield};

    ImageGeometry geometry;
    geometry.size = options.size;
    geometry.spacing = options.spacing;
    // Centre the volume on the world origin, as scanners roughly do.
    for (std::size_t axis = 0; axis < 3; ++axis) {
        geometry.origin[axis] = -0.5 * static_cast<double>(options.size[axis] - 1) * options.spacing[axis];
    }

    Phantom phantom{make_volume(geometry), make_label_map(geometry)};
    phantom.volume.source_scalar_type = "float32";
    phantom.volume.source_path = "phantom (seed " + std::to_string(options.seed) + ")";
    phantom.labels.source_path = phantom.volume.source_path;
    // Named, so a .seg.nrrd or .nrrd written from it carries the names (no colours: viewers choose).
    for (std::size_t label = 1; label < phantom_label_names().size(); ++label) {
        phantom.labels.descriptions.push_back({static_cast<std::int32_t>(label), phantom_label_names()[label], std::nullopt});
    }
    float* voxels = phantom.volume.voxels.data<float>();
    std::int32_t* labels = phantom.labels.labels.data<std::int32_t>();

    const auto normalised = [](std::int64_t index, std::int64_t extent) {
        return extent == 1 ? 0.0 : 2.0 * static_cast<double>(index) / static_cast<double>(extent - 1) - 1.0;
    };
    std::int64_t voxel = 0;
    for (std::int64_t k = 0; k < options.size[2]; ++k) {
        const double z = normalised(k, options.size[2]);
        for (std::int64_t j = 0; j < options.size[1]; ++j) {
            const double y = normalised(j, options.size[1]);
            for (std::int64_t i = 0; i < options.size[0]; ++i, ++voxel) {
                const double x = normalised(i, options.size[0]);
                float value = fat_shell.contains(x, y, z) ? fat_hounsfield : air_hounsfield;
                std::int32_t label = fat_shell.contains(x, y, z) ? 1 : 0;
                for (const Ellipsoid& structure : structures) {
                    if (structure.contains(x, y, z)) {
                        value = structure.hounsfield;
                        label = structure.label;
                    }
                }
                voxels[voxel] = value + static_cast<float>(options.noise_sigma * random.normal());
                labels[voxel] = label;
            }
        }
    }
    return phantom;
}

}  // namespace tessera
