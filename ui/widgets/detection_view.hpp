// DetectionView: a detector's held-out images with their boxes — ground truth and detections from an
// evaluation's detections file (predictions/detections_step_<N>.json), or a design-time preview of the
// data source's first held-out image with its objects only — with the controls a reviewer needs: which
// image, a score threshold, the classes shown, colour by class or by outcome (matched, false positive,
// missed), and the partition grid with each tile's anchor centres at a chosen pyramid level. Hovering a
// box names it (class, score, IoU, outcome). Drawing is DetectionPainter's; this widget holds the state.
//
//   auto* view = new DetectionView(this);
//   view->showEvaluation("runs/shapes/predictions/detections_step_200.json");
//   view->setPartition(design->grid(), detection::make_anchors(512, 512, anchor_options));
//   view->setMinimumScore(0.5);
#pragma once

#include "data/dataset.hpp"
#include "detection/anchors.hpp"
#include "partition/tiling.hpp"
#include "render/detection_painter.hpp"
#include "run/detections_file.hpp"

#include <QImage>
#include <QWidget>

#include <filesystem>
#include <optional>

class QCheckBox;
class QComboBox;
class QLabel;
class QListWidget;
class QListWidgetItem;
class QSlider;
class QToolButton;

namespace tessera::ui {

class DetectionCanvas;

class DetectionView : public QWidget {
    Q_OBJECT
public:
    explicit DetectionView(QWidget* parent = nullptr);

    // An evaluation's boxes; false (and the status line says why) when the file cannot be read. The image
    // shown stays the same one (by name) when the new file has it, so successive evaluations compare.
    bool showEvaluation(const std::filesystem::path& detections_file);
    // Before any evaluation: one image of the data source with its objects (no detections); replaces an
    // evaluation shown.
    void showPreview(const data::Example& example, std::vector<std::string> class_names);
    // The input's split and the anchors, for the tile overlay; an empty grid hides it.
    void setPartition(const partition::SpatialGrid& grid, detection::AnchorSet anchors);
    void clear();

    bool hasEvaluation() const { return m_file.has_value() && !m_is_preview; }
    bool hasPreview() const { return m_file.has_value() && m_is_preview; }
    // The evaluation or preview shown (nullptr: nothing).
    const run::DetectionsFile* detections() const { return m_file ? &*m_file : nullptr; }
    int imageIndex() const { return m_image_index; }
    void setImageIndex(int index);
    double minimumScore() const;
    void setMinimumScore(double score);  // 0 … 1, in steps of 0.01
    void setClassShown(std::int32_t class_id, bool shown);
    void setColouring(BoxColouring colouring);
    void setTilesShown(bool shown);
    void setAnchorLevel(int level);  // the pyramid level whose anchor centres the tiles show; 0: none

    // What is drawn now (for tests and the status line).
    const run::ShownDetections& shown() const { return m_shown; }
    const DetectionStyle& style() const { return m_style; }
    const std::vector<TileAnchors>& shownTiles() const { return m_tiles; }
    const QImage& image() const { return m_image; }
    QString summaryText() const;
    QString statusText() const;  // the line under the image: the summary, or why a file could not be shown
    DetectionCanvas* canvas() const { return m_canvas; }
    QComboBox* imageBox() const { return m_image_box; }
    QSlider* scoreSlider() const { return m_score_slider; }
    QListWidget* classList() const { return m_class_list; }
    QComboBox* colouringBox() const { return m_colouring_box; }
    QCheckBox* tilesBox() const { return m_tiles_box; }
    QComboBox* anchorLevelBox() const { return m_level_box; }
    // The view as drawn, image and boxes, at the canvas's size (for screenshots and tests).
    QImage render() const;

signals:
    void imageChanged(int index);

private slots:
    void onImageChosen(int index);
    void onScoreMoved(int value);
    void onClassItemChanged(QListWidgetItem* item);
    void onControlsChanged();

private:
    void loadImage();
    void rebuildClassList();
    void updateShown();
    void updateTiles();

    // The evaluation, or the preview as a one-image file without detections (its image kept in m_preview).
    std::optional<run::DetectionsFile> m_file;
    bool m_is_preview = false;
    QImage m_preview;
    QImage m_image;  // the image shown
    int m_image_index = 0;
    run::ShownDetections m_shown;
    DetectionStyle m_style;
    std::vector<bool> m_class_shown;
    partition::SpatialGrid m_grid;
    detection::AnchorSet m_anchors;
    std::vector<TileAnchors> m_tiles;

    DetectionCanvas* m_canvas = nullptr;
    QComboBox* m_image_box = nullptr;
    QToolButton* m_previous = nullptr;
    QToolButton* m_next = nullptr;
    QSlider* m_score_slider = nullptr;
    QLabel* m_score_value = nullptr;
    QCheckBox* m_truth_box = nullptr;
    QCheckBox* m_detections_box = nullptr;
    QCheckBox* m_tags_box = nullptr;
    QComboBox* m_colouring_box = nullptr;
    QCheckBox* m_tiles_box = nullptr;
    QComboBox* m_level_box = nullptr;
    QListWidget* m_class_list = nullptr;
    QLabel* m_summary = nullptr;
    QLabel* m_legend = nullptr;
};

// The drawing surface: the image fitted into the widget (aspect kept), the boxes and tiles over it, and
// a tooltip for the box under the mouse.
class DetectionCanvas : public QWidget {
    Q_OBJECT
public:
    explicit DetectionCanvas(const DetectionView* view, QWidget* parent = nullptr);
    DetectionFrame frame() const;  // where the image is drawn now
    // The box under a widget position: the smallest shown detection containing it, else the smallest object.
    QString describeAt(QPointF position, std::int32_t* detection = nullptr, std::int32_t* truth = nullptr) const;
    void paintInto(QPainter& painter, const DetectionStyle& style) const;

protected:
    void paintEvent(QPaintEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void leaveEvent(QEvent* event) override;

private:
    const DetectionView* m_view;
    std::int32_t m_hovered_detection = -1;
    std::int32_t m_hovered_truth = -1;
};

}  // namespace tessera::ui
