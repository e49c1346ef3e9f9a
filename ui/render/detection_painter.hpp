// DetectionPainter: draws a detector's evaluation over its image — the ground truth and the detections as
// boxes, coloured by class or by outcome (matched, false positive, found, missed), each detection tagged
// with its class and score — and, on request, the partition grid with the anchor centres each tile owns.
// No widget: the detection view and the tests hand it a painter and where the image sits on screen.
//
//   const DetectionFrame frame{.image_rect = target, .image_width = 512, .image_height = 512};
//   DetectionPainter::paintBoxes(painter, frame, run::shown_detections(image, filter), style);
//   DetectionPainter::paintTiles(painter, frame, tileAnchors(grid, anchors, /*level*/ 3));
//
// Drawing conventions: a detection is a solid box with a filled tag (class, score) on its top edge; an
// object of the ground truth a dashed box without a tag. By outcome: matched detections and found objects
// green, false positives red, missed objects orange and thicker, so what went wrong stands out.
#pragma once

#include "detection/anchors.hpp"
#include "partition/tiling.hpp"
#include "run/detections_file.hpp"

#include <QColor>
#include <QPainter>
#include <QRectF>
#include <QString>

#include <cstdint>
#include <vector>

namespace tessera::ui {

// Where the image is on screen: pixel (x, y) of the image maps linearly into image_rect.
struct DetectionFrame {
    QRectF image_rect;                   // widget coordinates of the whole image
    std::int64_t image_width = 1;        // pixels
    std::int64_t image_height = 1;

    QPointF toScreen(double x, double y) const;
    QRectF toScreen(const detection::Box& box) const;
    QPointF toImage(QPointF screen) const;  // the inverse, in image pixels
};

enum class BoxColouring { ByClass, ByOutcome };

struct DetectionStyle {
    BoxColouring colouring = BoxColouring::ByClass;
    bool show_ground_truth = true;
    bool show_detections = true;
    bool show_tags = true;                 // class and score on each detection
    std::vector<QString> class_names{};    // by class id; missing ones are written "class k"
    std::int32_t highlighted_detection = -1;  // index into ShownDetections::detections drawn thicker
    std::int32_t highlighted_truth = -1;      // index into ShownDetections::ground_truth
};

// The anchors of one level a tile owns, for drawing: the tile's pixel region and its cells' centres.
struct TileAnchors {
    std::int64_t core = 0;
    QRectF region;                  // pixels of the model input
    std::vector<QPointF> centres;   // pixels, one per owned cell (all A anchors of a cell share it)
};

// Each core's tile of the input grid (2D: [H, W] boundaries) and the centres of the cells of `level` whose
// centres lie in it — the anchors the core labels and whose loss it computes (CoreMesh::train_step). The
// mesh takes the cells of its tiles of each head output; because every cut is a multiple of the largest
// stride (the tiling's alignment), the two agree. A level the anchors lack gives the tiles without centres.
std::vector<TileAnchors> tileAnchors(const partition::SpatialGrid& grid, const detection::AnchorSet& anchors, int level);

class DetectionPainter {
public:
    static QColor classColor(std::int32_t class_id);
    static QColor outcomeColor(run::BoxOutcome outcome);
    // The colour a box is drawn in under a style.
    static QColor boxColor(const run::ShownBox& box, const DetectionStyle& style);
    static QString tagText(const run::ShownBox& detection, const DetectionStyle& style);  // "disc 0.87"

    static void paintBoxes(QPainter& painter, const DetectionFrame& frame, const run::ShownDetections& shown,
                           const DetectionStyle& style);
    static void paintTiles(QPainter& painter, const DetectionFrame& frame, const std::vector<TileAnchors>& tiles);
};

}  // namespace tessera::ui
