// Synthetic CT-like phantoms: nested ellipsoids with CT intensities (HU), Gaussian noise and one
// label per structure. Seeded: the same options give bit-identical voxels on every machine.
//
//   PhantomOptions options;                 // 128×128×96 voxels, 1 mm, seed 1
//   Phantom phantom = make_ct_phantom(options);
//   phantom.volume.voxels   // [D, H, W] f32, HU
//   phantom.labels.labels   // [D, H, W] i32, 0 = air, see phantom_label_names()
//
// A 2D phantom is the same with size[2] == 1: the middle axial section of the 3D one.
#pragma once

#include "io/volume.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

struct PhantomOptions {
    std::array<std::int64_t, 3> size{128, 128, 96};  // voxels along i, j, k; k == 1 for a 2D phantom
    std::array<double, 3> spacing{1.0, 1.0, 1.0};     // mm
    double noise_sigma = 15.0;                        // HU, standard deviation of the added noise
    double jitter = 0.05;                             // fraction of the body size the organs move by seed
    std::uint64_t seed = 1;
};

struct Phantom {
    Volume volume;
    LabelMap labels;
};

// Label values and their names: 1 soft tissue, 2 lung, 3 bone, 4 organ, 5 lesion.
const std::vector<std::string>& phantom_label_names();  // index = label value; [0] = "background"

Phantom make_ct_phantom(const PhantomOptions& options);

}  // namespace tessera
