// VolumeScene: the 3D view's VTK pipeline — volume rendering, label surfaces, the cursor's slice
// planes, the volume's outline and an orientation cube — with no widget. A widget shows it by
// adding renderer() and markerRenderer() to its render window (VtkGLWidget does).
//
//   VolumeScene scene;
//   scene.setVolume(volume);                                   // vtkImageData on the volume's grid
//   scene.setTransferFunction(builtinTransferFunctionPresets()[0]);
//   scene.setLabelMap(labels, display);                        // one smoothed surface per label
//   scene.setCursor({i, j, k});
//   scene.resetCamera();
//   gl_widget->addRenderer(scene.renderer());
//   gl_widget->addRenderer(scene.markerRenderer());
//
// Geometry: VTK sees the voxels on an axis-aligned grid (spacing, origin 0) and every prop carries
// the same user matrix [direction | origin], so oblique and flipped volumes, surfaces and planes all
// land in LPS world millimetres. (VTK 9.1's GPU ray caster honours vtkImageData's direction matrix
// when it is a rotation but draws nothing when it is left-handed, as flipped acquisitions are; a
// prop's user matrix works for both.)
#pragma once

#include "io/volume.hpp"
#include "render/transfer_function.hpp"

#include <QColor>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

class vtkRenderer;

namespace tessera::ui {

// How label surfaces look: the 2D overlay's colours and visibility, and one opacity.
struct LabelDisplay {
    std::map<std::int32_t, QColor> colors;  // labels absent here get defaultLabelColor
    std::map<std::int32_t, bool> visible;   // labels absent here are visible
    double opacity = 1.0;                   // 0..1, all surfaces

    QColor colorOf(std::int32_t label) const;
    bool isVisible(std::int32_t label) const;
};

// Smoothed surface meshes of every non-zero label of a label map. Extraction is the slow part of
// showing labels (about 0.3 s for a 256×256×192 map of 5 labels on two cores) and touches no
// renderer, so it may run on a worker thread; the result is an immutable value, cheap to copy.
// Labels whose box exceeds 128³ voxels are meshed from a majority-of-blocks coarser mask, so a big
// body gives ~200k triangles rather than a million.
class LabelSurfaces {
public:
    LabelSurfaces();
    ~LabelSurfaces();
    LabelSurfaces(const LabelSurfaces&);
    LabelSurfaces& operator=(const LabelSurfaces&);

    static LabelSurfaces extract(const tessera::LabelMap& labels);

    bool isEmpty() const;
    std::vector<std::int32_t> labels() const;             // sorted, without 0
    std::int64_t pointCount(std::int32_t label) const;    // 0 for absent labels
    std::int64_t triangleCount(std::int32_t label) const;
    // {x0, x1, y0, y1, z0, z1} in mm along the grid's axes from voxel (0, 0, 0); all 0 when absent.
    std::array<double, 6> bounds(std::int32_t label) const;
    const tessera::ImageGeometry& geometry() const;
    double extractionSeconds() const;  // wall time of extract()

private:
    friend class VolumeScene;
    struct Data;
    std::shared_ptr<const Data> m_data;
};

// One core's tile drawn as a wireframe box in the 3D view.
struct TileBox {
    std::array<double, 6> voxel_bounds{};  // {i0, i1, j0, j1, k0, k1}: voxel-edge coordinates (0 … size)
    QColor color;
};

class VolumeScene {
public:
    VolumeScene();
    ~VolumeScene();
    VolumeScene(const VolumeScene&) = delete;
    VolumeScene& operator=(const VolumeScene&) = delete;

    // The main renderer (layer 0) and the orientation cube's corner renderer (layer 1): add both to
    // one render window with at least two layers.
    vtkRenderer* renderer() const;
    vtkRenderer* markerRenderer() const;

    // Copies the voxels. The shared overload keeps the volume alive and lets VTK read it in place.
    void setVolume(const tessera::Volume& volume);
    void setVolume(std::shared_ptr<const tessera::Volume> volume);
    void clearVolume();
    bool hasVolume() const;
    const IntensityDistribution& intensities() const;  // of the current volume

    // Percentile presets are resolved against `intensities` (the overload without: the volume's).
    void setTransferFunction(const TransferFunctionPreset& preset);
    void setTransferFunction(const TransferFunctionPreset& preset, const IntensityDistribution& intensities);
    const TransferFunctionPreset& transferFunction() const;  // as given, unresolved

    // Extracts and shows one surface per label (synchronous: LabelSurfaces::extract).
    void setLabelMap(const tessera::LabelMap& labels, const LabelDisplay& display);
    void setLabelSurfaces(const LabelSurfaces& surfaces, const LabelDisplay& display);
    // Colours, visibility, opacity only. Opacity below 1 turns on depth peeling (translucent surfaces
    // inside the rendered volume), which renders the scene several times.
    void setLabelDisplay(const LabelDisplay& display);
    void clearLabelMap();
    const LabelSurfaces& labelSurfaces() const;
    std::vector<std::int32_t> shownSurfaceLabels() const;  // surfaces currently drawn

    // Voxel index (i, j, k): the three slice planes through it are drawn as outlines, coloured as
    // 3D Slicer's: axial red, coronal green, sagittal yellow.
    void setCursor(std::array<std::int64_t, 3> voxel);
    std::array<std::int64_t, 3> cursor() const;

    void setVolumeVisible(bool visible);
    bool isVolumeVisible() const;
    void setSurfacesVisible(bool visible);
    bool areSurfacesVisible() const;
    void setSlicePlanesVisible(bool visible);
    // A partition design's tiles as coloured wireframe boxes (empty: none).
    void setTileBoxes(const std::vector<TileBox>& boxes);
    std::size_t tileBoxCount() const;
    bool areSlicePlanesVisible() const;

    // Anterior view, slightly from the left and above, framing everything shown.
    void resetCamera();

private:
    struct Pipeline;
    std::unique_ptr<Pipeline> m_pipeline;
};

}  // namespace tessera::ui
