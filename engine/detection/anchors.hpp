// RetinaNet anchors, in the Cloud TPU reference's convention (tensorflow/tpu models/official/retinanet,
// anchors.py), generated once per input size.
//
// Levels min_level..max_level (default 3..7). Level l has stride 2^l pixels and a feature map of
// ceil(H / 2^l) × ceil(W / 2^l) cells (the input is divisible by 2^max_level in practice). Every cell
// holds A = num_scales × aspect_ratios.size() anchors. The anchor of cell (row i, column j) is centred
// at ((j + 0.5)·stride, (i + 0.5)·stride) in (x, y); its size is s = anchor_scale · stride · 2^(o / S)
// for octave o in 0..S−1 (S = num_scales), and for aspect ratio a (= width / height) it is
// s·sqrt(a) wide and s / sqrt(a) high. Defaults: S = 3, ratios {1, 2, 0.5}, anchor_scale 4: base sizes
// 32 (level 3) .. 512 (level 7). (The TPU config writes the ratios as rounded (w, h) multipliers,
// (1.4, 0.7) for 2; here they are exact square roots.)
//
// Order of the M anchors (the global anchor index): level, then row i, then column j, then octave o,
// then aspect ratio r; within a cell the anchor index is a = o·ratios + r. The heads' outputs follow it:
//   class logits of level l: [N, A·K, H_l, W_l], anchor a's class k at channel a·K + k;
//   box outputs of level l:  [N, A·4, H_l, W_l], anchor a's code c (dx, dy, dw, dh) at channel a·4 + c.
//
//   AnchorSet anchors = make_anchors(1280, 1280);                   // 306,900 anchors, P3..P7
//   anchors.boxes[anchors.levels[0].index_of(0, 0, 0)]              // {-12, -12, 20, 20}
//   CellRange owned = cells_in_region(anchors.levels[0], {0, 640, 0, 640});   // a tile's cells
//   std::vector<std::int64_t> mine = anchor_indices_in_region(anchors, {0, 640, 0, 640});
#pragma once

#include "detection/box.hpp"
#include "tensor/tensor.hpp"

#include <cstdint>
#include <vector>

namespace tessera::detection {

struct AnchorOptions {
    int min_level = 3;
    int max_level = 7;
    int num_scales = 3;                                // octaves per level: 2^(0/S) .. 2^((S−1)/S)
    std::vector<double> aspect_ratios{1.0, 2.0, 0.5};  // width / height
    double anchor_scale = 4.0;                         // base size = anchor_scale · stride
    // Optional explicit sizes (pixels), one list per level, replacing anchor_scale·stride·2^(o/S), e.g.
    // torchvision's {32, 40.3, 50.8}, {64, ...}. All lists have the same length, which then plays the
    // role of num_scales. Centres, order and the meaning of the ratios stay this convention's.
    std::vector<std::vector<double>> sizes_per_level;
};

struct LevelAnchors {
    int level = 0;
    std::int64_t stride = 0;             // pixels
    std::int64_t height = 0, width = 0;  // feature-map cells
    std::int64_t first_index = 0;        // global index of this level's first anchor
    std::vector<double> anchor_widths;   // [A] pixels, in anchor-index order
    std::vector<double> anchor_heights;  // [A] pixels

    std::int64_t anchors_per_cell() const { return static_cast<std::int64_t>(anchor_widths.size()); }
    std::int64_t count() const { return height * width * anchors_per_cell(); }
    std::int64_t index_of(std::int64_t row, std::int64_t column, std::int64_t anchor) const {
        return first_index + (row * width + column) * anchors_per_cell() + anchor;
    }
    Box box(std::int64_t row, std::int64_t column, std::int64_t anchor) const;
};

struct AnchorSet {
    std::int64_t image_height = 0, image_width = 0;  // pixels
    std::vector<LevelAnchors> levels;
    std::vector<Box> boxes;  // [M], global order, pixels

    std::int64_t count() const { return static_cast<std::int64_t>(boxes.size()); }
    std::int64_t anchors_per_cell() const { return levels.empty() ? 0 : levels.front().anchors_per_cell(); }
    Tensor box_tensor() const;  // [M, 4] f32, pixels
};

AnchorSet make_anchors(std::int64_t image_height, std::int64_t image_width, const AnchorOptions& options = {});

// A pixel region [y_begin, y_end) × [x_begin, x_end) of the input, e.g. a core's tile.
struct PixelRegion {
    std::int64_t y_begin = 0, y_end = 0, x_begin = 0, x_end = 0;
};

// The cells [row_begin, row_end) × [column_begin, column_end) of a level whose centres lie in a region:
// the cells (and so the anchors) a tile owns. Tiles that partition the image partition the anchors.
struct CellRange {
    std::int64_t row_begin = 0, row_end = 0, column_begin = 0, column_end = 0;

    std::int64_t num_cells() const { return (row_end - row_begin) * (column_end - column_begin); }
};
CellRange cells_in_region(const LevelAnchors& level, const PixelRegion& region);

// Global indices (ascending) of every anchor whose centre lies in the region, over all levels.
std::vector<std::int64_t> anchor_indices_in_region(const AnchorSet& anchors, const PixelRegion& region);

}  // namespace tessera::detection
