// Synthetic electron-microscopy sections, like the classic ssTEM / ISBI 2012 membrane data: cells as a
// jittered, gently warped Voronoi tessellation, their membranes (the pixels within membrane_width / 2 of
// a cell border) labelled 1 and dark, the cells 0 with smooth texture and a few dark organelles (not
// labelled); then Gaussian blur and Gaussian noise. Seeded: the same options give bit-identical pixels
// on every machine.
//
//   EmSectionOptions options;                 // 512×512 pixels, 4 nm, cells ~32 px across, seed 1
//   EmSection section = make_em_section(options);
//   section.image.voxels    // [1, H, W] f32, grey levels ~[0, 1] (membranes ~0.2, cytoplasm ~0.7)
//   section.labels.labels   // [1, H, W] i32, 1 = membrane
#pragma once

#include "io/volume.hpp"

#include <array>
#include <cstdint>

namespace tessera::data {

struct EmSectionOptions {
    std::array<std::int64_t, 2> size{512, 512};  // [H, W] pixels
    double cell_size = 32.0;                     // px, mean distance between neighbouring cell centres
    double membrane_width = 3.0;                 // px, labelled width across a border
    double blur_sigma = 1.0;                     // px
    double noise_sigma = 0.08;                   // grey levels, added after the blur
    std::uint64_t seed = 1;
};

struct EmSection {
    Volume image;     // voxels [1, H, W] f32; 4×4 nm pixels, 50 nm sections as ssTEM
    LabelMap labels;  // [1, H, W] i32: 0 cell, 1 membrane
};

EmSection make_em_section(const EmSectionOptions& options);

}  // namespace tessera::data
