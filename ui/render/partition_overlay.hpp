// PartitionOverlay: draws a partition design over one slice view — each core's tile coloured and
// numbered with its memory and predicted compute time, the selected layer's halos hatched, the cuts
// as lines. No widget: the slice view hands it a painter and where the slice sits on screen.
//
// The design's grid is in the model input's voxels; the overlay stretches each input axis over the
// volume's extent along the matching voxel axis (input D, H, W ↔ voxel k, j, i; 2D H, W ↔ j, i).
//
//   const SliceFrame frame{axes, image_rect, volume.geometry.size, slice_index};
//   PartitionOverlay::paint(painter, design, frame, /*highlighted cut*/ std::nullopt);
#pragma once

#include "model/partition_design.hpp"
#include "render/slice_renderer.hpp"

#include <QColor>
#include <QPainter>
#include <QRectF>

#include <array>
#include <optional>

namespace tessera::ui {

// Where a slice is on screen.
struct SliceFrame {
    SliceAxes axes;
    QRectF image_rect;                      // widget coordinates of the whole slice image
    std::array<std::int64_t, 3> volume_size{1, 1, 1};  // voxels along i, j, k
    std::int64_t slice_index = 0;           // along axes.axis_normal
};

struct CutLine {
    int input_axis = 0;  // spatial axis of the model input (0 = outermost)
    int index = 1;       // cut 1 … pieces − 1
    bool operator==(const CutLine&) const = default;
};

// A qualitative colour per core, distinct for neighbours.
QColor coreColor(std::int64_t core);

class PartitionOverlay {
public:
    static void paint(QPainter& painter, const PartitionDesign& design, const SliceFrame& frame,
                      std::optional<CutLine> highlighted);

    // The voxel axis (0 = i, 1 = j, 2 = k) input axis `input_axis` runs along, for an input of `rank` spatial axes.
    static int voxelAxisOf(int input_axis, int rank) { return rank - 1 - input_axis; }
    // Widget coordinate (x or y, whichever the input axis is drawn along) of input position `position`;
    // nullopt when the input axis is the slice's normal.
    static std::optional<double> screenCoordinate(const PartitionDesign& design, const SliceFrame& frame, int input_axis,
                                                  double position);
    // The inverse: the input position under a widget coordinate along that axis.
    static double inputPosition(const PartitionDesign& design, const SliceFrame& frame, int input_axis, double screen);
    // The cut line within `tolerance` pixels of `point`, if any (the nearest).
    static std::optional<CutLine> cutNear(const PartitionDesign& design, const SliceFrame& frame, QPointF point,
                                          double tolerance = 5.0);
    // True when the input axis runs along the screen's x (false: along y or the normal).
    static bool runsAlongX(const SliceFrame& frame, int input_axis, int rank);
};

}  // namespace tessera::ui
