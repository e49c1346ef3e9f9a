// SliceView: one of the three linked 2D views (axial, coronal, sagittal) of the ViewerModel.
//
// Left click or drag moves the shared cursor; right drag changes window (x) and level (y); the wheel
// or Page Up/Down walks slices; Ctrl+wheel zooms, middle drag pans, Home resets the view. With a
// partition design attached, its tiles are drawn over the slice and a left drag on a cut moves it.
#pragma once

#include "render/partition_overlay.hpp"
#include "render/slice_renderer.hpp"

#include <QPointF>
#include <QWidget>

#include <array>
#include <optional>

namespace tessera::ui {

class SliceView : public QWidget {
    Q_OBJECT
public:
    SliceView(ViewerModel* model, SliceOrientation orientation, QWidget* parent = nullptr);

    SliceOrientation orientation() const { return m_orientation; }
    std::int64_t sliceIndex() const;
    std::int64_t numSlices() const;
    void setSliceIndex(std::int64_t slice_index);
    // Voxel under a widget position, if the position is over the image.
    std::optional<std::array<std::int64_t, 3>> voxelAt(QPointF position) const;
    // Widget position of a voxel's centre (the inverse, for tests and overlays).
    QPointF positionOfVoxel(const std::array<std::int64_t, 3>& voxel) const;
    const QImage& sliceImage() const { return m_image; }
    // Whether the image is the slice at full resolution (always, unless the volume is streamed and
    // its slice is still being read: the overview's blocks are shown meanwhile).
    bool showsFullResolution() const { return m_full_resolution; }
    void resetView();
    // Draws `design` over the slice and lets cuts be dragged (nullptr: no overlay).
    void setPartitionDesign(PartitionDesign* design);
    void setPartitionVisible(bool visible);
    bool isPartitionVisible() const { return m_partition_visible; }
    SliceFrame frame() const;
    // Widget position of the middle of a cut line, when the cut is drawn in this view.
    std::optional<QPointF> cutPosition(int input_axis, int index) const;

    QSize sizeHint() const override { return {400, 400}; }
    QSize minimumSizeHint() const override { return {120, 120}; }

signals:
    void hoveredVoxel(std::array<std::int64_t, 3> voxel);  // the voxel under the mouse
    void sliceChanged(std::int64_t slice_index);

protected:
    void paintEvent(QPaintEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void wheelEvent(QWheelEvent* event) override;
    void keyPressEvent(QKeyEvent* event) override;

private slots:
    void rebuildImage();
    void onVolumeChanged();

private:
    QRectF imageRect() const;  // where the slice image is drawn, in widget coordinates
    void moveCursorTo(QPointF position);

    ViewerModel* m_model;
    SliceOrientation m_orientation;
    SliceAxes m_axes;
    QImage m_image;
    std::int64_t m_shown_slice = -1;
    bool m_full_resolution = true;  // the slice m_image shows, to signal changes only
    double m_zoom = 1.0;
    QPointF m_pan{0, 0};  // widget pixels
    PartitionDesign* m_design = nullptr;
    bool m_partition_visible = true;
    std::optional<CutLine> m_hot_cut;  // hovered or dragged
    enum class Drag { None, Cursor, WindowLevel, Pan, Cut } m_drag = Drag::None;
    QPointF m_drag_start;
    WindowLevel m_window_at_drag_start;
    QPointF m_pan_at_drag_start;
};

}  // namespace tessera::ui
