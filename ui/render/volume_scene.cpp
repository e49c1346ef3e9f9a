#include "render/volume_scene.hpp"

#include "core/error.hpp"
#include "model/viewer_model.hpp"

#include <vtkActor.h>
#include <vtkAnnotatedCubeActor.h>
#include <vtkCallbackCommand.h>
#include <vtkCamera.h>
#include <vtkCellArray.h>
#include <vtkCellData.h>
#include <vtkColorTransferFunction.h>
#include <vtkDiscreteFlyingEdges3D.h>
#include <vtkFloatArray.h>
#include <vtkImageData.h>
#include <vtkMatrix4x4.h>
#include <vtkNew.h>
#include <vtkPiecewiseFunction.h>
#include <vtkPointData.h>
#include <vtkPoints.h>
#include <vtkPolyData.h>
#include <vtkPolyDataMapper.h>
#include <vtkPolyDataNormals.h>
#include <vtkProperty.h>
#include <vtkRenderer.h>
#include <vtkSmartPointer.h>
#include <vtkGPUVolumeRayCastMapper.h>
#include <vtkUnsignedCharArray.h>
#include <vtkVolume.h>
#include <vtkVolumeProperty.h>
#include <vtkWindowedSincPolyDataFilter.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <unordered_map>

namespace tessera::ui {

// ---- LabelDisplay ------------------------------------------------------------------------------

QColor LabelDisplay::colorOf(std::int32_t label) const {
    const auto found = colors.find(label);
    return found != colors.end() ? found->second : defaultLabelColor(label);
}

bool LabelDisplay::isVisible(std::int32_t label) const {
    const auto found = visible.find(label);
    return found == visible.end() || found->second;
}

// ---- LabelSurfaces -----------------------------------------------------------------------------

struct LabelSurfaces::Data {
    tessera::ImageGeometry geometry;
    std::map<std::int32_t, vtkSmartPointer<vtkPolyData>> meshes;  // index-scaled frame: (i·sx, j·sy, k·sz)
    double seconds = 0.0;
};

namespace {

// Inclusive voxel box of one label.
struct VoxelBox {
    std::array<std::int64_t, 3> lower{0, 0, 0};
    std::array<std::int64_t, 3> upper{0, 0, 0};
    void include(std::int64_t i0, std::int64_t i1, std::int64_t j, std::int64_t k) {
        lower = {std::min(lower[0], i0), std::min(lower[1], j), std::min(lower[2], k)};
        upper = {std::max(upper[0], i1), std::max(upper[1], j), std::max(upper[2], k)};
    }
};

// One pass over the label map, by runs of equal labels along rows.
std::map<std::int32_t, VoxelBox> labelBoxes(const std::int32_t* labels, const std::array<std::int64_t, 3>& size) {
    std::unordered_map<std::int32_t, VoxelBox> boxes;
    for (std::int64_t k = 0; k < size[2]; ++k) {
        for (std::int64_t j = 0; j < size[1]; ++j) {
            const std::int32_t* row = labels + (k * size[1] + j) * size[0];
            std::int64_t i = 0;
            while (i < size[0]) {
                const std::int32_t label = row[i];
                const std::int64_t start = i;
                while (i < size[0] && row[i] == label) ++i;
                if (label == 0) continue;
                const auto [entry, inserted] = boxes.try_emplace(label);
                if (inserted) {
                    entry->second.lower = {start, j, k};
                    entry->second.upper = {i - 1, j, k};
                } else {
                    entry->second.include(start, i - 1, j, k);
                }
            }
        }
    }
    return {boxes.begin(), boxes.end()};
}

// Labels bigger than this many voxels (their box) are meshed from a coarser mask: a 256³ body would
// give a million triangles, slow to smooth and to draw, for detail the smoothing removes anyway.
constexpr std::int64_t max_mesh_voxels = std::int64_t{1} << 21;  // 128³

// The surface of one label: a 0/1 mask of its box plus one voxel of padding (so surfaces touching
// the border close), discrete flying edges, windowed-sinc smoothing, point normals. A big label's
// mask takes the majority of each stride³ block.
vtkSmartPointer<vtkPolyData> extractSurface(const std::int32_t* labels, const tessera::ImageGeometry& geometry,
                                            std::int32_t label, const VoxelBox& box) {
    const auto& size = geometry.size;
    std::array<std::int64_t, 3> fine{};
    for (std::size_t axis = 0; axis < 3; ++axis) fine[axis] = box.upper[axis] - box.lower[axis] + 1;
    std::int64_t stride = 1;
    while (fine[0] * fine[1] * fine[2] > max_mesh_voxels * stride * stride * stride) ++stride;
    std::array<std::int64_t, 3> coarse{};
    std::array<std::int64_t, 3> extent{};  // of the mask: coarse + padding
    for (std::size_t axis = 0; axis < 3; ++axis) {
        coarse[axis] = (fine[axis] + stride - 1) / stride;
        extent[axis] = coarse[axis] + 2;
    }

    // Voxels of the label in each coarse cell.
    std::vector<std::uint16_t> counts(static_cast<std::size_t>(coarse[0] * coarse[1] * coarse[2]), 0);
    for (std::int64_t k = box.lower[2]; k <= box.upper[2]; ++k) {
        for (std::int64_t j = box.lower[1]; j <= box.upper[1]; ++j) {
            const std::int32_t* row = labels + (k * size[1] + j) * size[0];
            std::uint16_t* count_row =
                counts.data() + (((k - box.lower[2]) / stride) * coarse[1] + (j - box.lower[1]) / stride) * coarse[0];
            for (std::int64_t i = box.lower[0]; i <= box.upper[0]; ++i) {
                if (row[i] == label) ++count_row[(i - box.lower[0]) / stride];
            }
        }
    }
    vtkNew<vtkUnsignedCharArray> mask;
    mask->SetNumberOfTuples(extent[0] * extent[1] * extent[2]);
    unsigned char* out = mask->GetPointer(0);
    std::fill(out, out + extent[0] * extent[1] * extent[2], static_cast<unsigned char>(0));
    const auto cells_in = [&](std::size_t axis, std::int64_t cell) {  // fine voxels of a (clipped) cell
        return std::min(stride, fine[axis] - cell * stride);
    };
    for (std::int64_t c = 0; c < coarse[2]; ++c) {
        for (std::int64_t b = 0; b < coarse[1]; ++b) {
            for (std::int64_t a = 0; a < coarse[0]; ++a) {
                const std::int64_t volume = cells_in(0, a) * cells_in(1, b) * cells_in(2, c);
                const std::int64_t count = counts[static_cast<std::size_t>((c * coarse[1] + b) * coarse[0] + a)];
                out[((c + 1) * extent[1] + (b + 1)) * extent[0] + (a + 1)] = 2 * count >= volume ? 1 : 0;
            }
        }
    }
    vtkNew<vtkImageData> image;
    image->SetDimensions(static_cast<int>(extent[0]), static_cast<int>(extent[1]), static_cast<int>(extent[2]));
    // Mask voxel (a, b, c) sits at the centre of its block, one block before the box for the padding.
    const double offset = static_cast<double>(stride - 1) / 2.0 - static_cast<double>(stride);
    image->SetSpacing(geometry.spacing[0] * static_cast<double>(stride), geometry.spacing[1] * static_cast<double>(stride),
                      geometry.spacing[2] * static_cast<double>(stride));
    image->SetOrigin((static_cast<double>(box.lower[0]) + offset) * geometry.spacing[0],
                     (static_cast<double>(box.lower[1]) + offset) * geometry.spacing[1],
                     (static_cast<double>(box.lower[2]) + offset) * geometry.spacing[2]);
    image->GetPointData()->SetScalars(mask);

    vtkNew<vtkDiscreteFlyingEdges3D> contour;
    contour->SetInputData(image);
    contour->SetValue(0, 1.0);
    contour->ComputeNormalsOff();
    contour->ComputeGradientsOff();
    contour->ComputeScalarsOff();

    // Pass band 0.01 and 20 iterations: staircase steps go, shapes of a few voxels stay.
    vtkNew<vtkWindowedSincPolyDataFilter> smoother;
    smoother->SetInputConnection(contour->GetOutputPort());
    smoother->SetNumberOfIterations(20);
    smoother->SetPassBand(0.01);
    smoother->NormalizeCoordinatesOn();
    smoother->BoundarySmoothingOff();
    smoother->FeatureEdgeSmoothingOff();
    smoother->NonManifoldSmoothingOn();

    vtkNew<vtkPolyDataNormals> normals;
    normals->SetInputConnection(smoother->GetOutputPort());
    normals->ComputePointNormalsOn();
    normals->ComputeCellNormalsOff();
    normals->SplittingOff();
    normals->ConsistencyOff();  // flying edges already orients triangles consistently
    normals->Update();

    auto mesh = vtkSmartPointer<vtkPolyData>::New();
    mesh->ShallowCopy(normals->GetOutput());
    return mesh;
}

}  // namespace

LabelSurfaces::LabelSurfaces() : m_data(std::make_shared<const Data>()) {}
LabelSurfaces::~LabelSurfaces() = default;
LabelSurfaces::LabelSurfaces(const LabelSurfaces&) = default;
LabelSurfaces& LabelSurfaces::operator=(const LabelSurfaces&) = default;

LabelSurfaces LabelSurfaces::extract(const tessera::LabelMap& label_map) {
    const auto start = std::chrono::steady_clock::now();
    auto data = std::make_shared<Data>();
    data->geometry = label_map.geometry;
    TESSERA_CHECK(label_map.labels.is_defined() && label_map.labels.num_elements() == label_map.geometry.num_voxels(),
                  "label map " << label_map.source_path << " has " << label_map.labels.num_elements()
                               << " voxels, its grid " << label_map.geometry.num_voxels());
    const tessera::Tensor labels = label_map.labels.contiguous();
    const std::int32_t* voxels = labels.data<std::int32_t>();
    const std::map<std::int32_t, VoxelBox> boxes = labelBoxes(voxels, label_map.geometry.size);

    // Labels are independent: extract them on all cores (flying edges threads inside each too).
    std::vector<std::pair<std::int32_t, VoxelBox>> work(boxes.begin(), boxes.end());
    std::vector<vtkSmartPointer<vtkPolyData>> meshes(work.size());
    std::atomic<std::size_t> next{0};
    const auto worker = [&] {
        for (std::size_t index = next++; index < work.size(); index = next++) {
            meshes[index] = extractSurface(voxels, label_map.geometry, work[index].first, work[index].second);
        }
    };
    const std::size_t num_threads =
        std::min<std::size_t>(work.size(), std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> threads;
    for (std::size_t t = 1; t < num_threads; ++t) threads.emplace_back(worker);
    worker();
    for (std::thread& thread : threads) thread.join();

    for (std::size_t index = 0; index < work.size(); ++index) data->meshes[work[index].first] = meshes[index];
    data->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    LabelSurfaces result;
    result.m_data = std::move(data);
    return result;
}

bool LabelSurfaces::isEmpty() const { return m_data->meshes.empty(); }

std::vector<std::int32_t> LabelSurfaces::labels() const {
    std::vector<std::int32_t> result;
    for (const auto& [label, mesh] : m_data->meshes) result.push_back(label);
    return result;
}

std::int64_t LabelSurfaces::pointCount(std::int32_t label) const {
    const auto found = m_data->meshes.find(label);
    return found == m_data->meshes.end() ? 0 : found->second->GetNumberOfPoints();
}

std::int64_t LabelSurfaces::triangleCount(std::int32_t label) const {
    const auto found = m_data->meshes.find(label);
    return found == m_data->meshes.end() ? 0 : found->second->GetNumberOfPolys();
}

std::array<double, 6> LabelSurfaces::bounds(std::int32_t label) const {
    std::array<double, 6> result{};
    const auto found = m_data->meshes.find(label);
    if (found != m_data->meshes.end() && found->second->GetNumberOfPoints() > 0) found->second->GetBounds(result.data());
    return result;
}

const tessera::ImageGeometry& LabelSurfaces::geometry() const { return m_data->geometry; }
double LabelSurfaces::extractionSeconds() const { return m_data->seconds; }

// ---- VolumeScene -------------------------------------------------------------------------------

namespace {

// Index-scaled frame (i·sx, j·sy, k·sz) → LPS world: [direction | origin].
vtkSmartPointer<vtkMatrix4x4> gridToWorld(const tessera::ImageGeometry& geometry) {
    auto matrix = vtkSmartPointer<vtkMatrix4x4>::New();
    for (int row = 0; row < 3; ++row) {
        for (int column = 0; column < 3; ++column) {
            matrix->SetElement(row, column, geometry.direction[static_cast<std::size_t>(row * 3 + column)]);
        }
        matrix->SetElement(row, 3, geometry.origin[static_cast<std::size_t>(row)]);
    }
    return matrix;
}

// Voxel-centre bounds in the index-scaled frame.
std::array<double, 6> gridBounds(const tessera::ImageGeometry& geometry) {
    std::array<double, 6> bounds{};
    for (std::size_t axis = 0; axis < 3; ++axis) {
        bounds[2 * axis] = 0.0;
        bounds[2 * axis + 1] = static_cast<double>(std::max<std::int64_t>(geometry.size[axis] - 1, 0)) *
                               geometry.spacing[axis];
    }
    return bounds;
}

// Slice-plane colours as 3D Slicer's: axial red, coronal green, sagittal yellow.
constexpr std::array<std::array<double, 3>, 3> plane_colors{{
    {0.95, 0.85, 0.30},  // i = const: sagittal
    {0.40, 0.85, 0.40},  // j = const: coronal
    {0.95, 0.35, 0.35},  // k = const: axial
}};

}  // namespace

struct VolumeScene::Pipeline {
    vtkNew<vtkRenderer> renderer;
    vtkNew<vtkRenderer> marker_renderer;
    vtkNew<vtkAnnotatedCubeActor> marker;
    vtkNew<vtkCallbackCommand> before_render;

    std::shared_ptr<const tessera::Volume> volume;  // keeps the voxels VTK reads alive
    tessera::ImageGeometry geometry;
    IntensityDistribution intensities;
    vtkNew<vtkImageData> image;
    vtkNew<vtkGPUVolumeRayCastMapper> volume_mapper;
    vtkNew<vtkVolumeProperty> volume_property;
    vtkNew<vtkColorTransferFunction> colors;
    vtkNew<vtkPiecewiseFunction> scalar_opacity;
    vtkNew<vtkPiecewiseFunction> gradient_opacity;
    vtkNew<vtkVolume> volume_prop;
    TransferFunctionPreset preset;
    bool has_preset = false;

    vtkNew<vtkPolyData> outline;  // the 12 edges of the voxel-centre box
    vtkNew<vtkActor> outline_actor;
    vtkNew<vtkPolyData> tiles;    // a partition design's tiles: 12 edges per box, coloured per cell
    vtkNew<vtkActor> tiles_actor;
    std::size_t tile_count = 0;
    std::array<vtkSmartPointer<vtkPolyData>, 3> planes;
    std::array<vtkSmartPointer<vtkActor>, 3> plane_actors;
    std::array<std::int64_t, 3> cursor{0, 0, 0};

    LabelSurfaces surfaces;
    LabelDisplay display;
    std::map<std::int32_t, vtkSmartPointer<vtkActor>> surface_actors;

    bool volume_visible = true;
    bool surfaces_visible = true;
    bool planes_visible = true;

    void applyTransferFunction(const IntensityDistribution& distribution);
    void updatePlanes();
    void updateOutline();
    void updateSurfaceActors();
    void updateVisibility();
    static void beforeRender(vtkObject* caller, unsigned long event, void* client_data, void* call_data);
};

// Keeps the orientation cube turned like the scene and the clipping range fitted to what is shown.
void VolumeScene::Pipeline::beforeRender(vtkObject*, unsigned long, void* client_data, void*) {
    auto* self = static_cast<Pipeline*>(client_data);
    self->renderer->ResetCameraClippingRange();
    vtkCamera* camera = self->renderer->GetActiveCamera();
    vtkCamera* marker_camera = self->marker_renderer->GetActiveCamera();
    std::array<double, 3> position{};
    std::array<double, 3> focal{};
    camera->GetPosition(position.data());
    camera->GetFocalPoint(focal.data());
    std::array<double, 3> direction{position[0] - focal[0], position[1] - focal[1], position[2] - focal[2]};
    const double length = std::hypot(direction[0], direction[1], direction[2]);
    if (length <= 0.0) return;
    constexpr double marker_distance = 3.2;  // frames the unit cube at VTK's 30° view angle
    marker_camera->SetFocalPoint(0.0, 0.0, 0.0);
    marker_camera->SetPosition(direction[0] / length * marker_distance, direction[1] / length * marker_distance,
                               direction[2] / length * marker_distance);
    marker_camera->SetViewUp(camera->GetViewUp());
    marker_camera->SetParallelProjection(camera->GetParallelProjection());
    self->marker_renderer->ResetCameraClippingRange();
}

void VolumeScene::Pipeline::applyTransferFunction(const IntensityDistribution& distribution) {
    const TransferFunctionPreset absolute = preset.resolved(distribution);
    colors->RemoveAllPoints();
    for (const ColorPoint& point : absolute.color) {
        colors->AddRGBPoint(point.value, point.rgb[0], point.rgb[1], point.rgb[2]);
    }
    scalar_opacity->RemoveAllPoints();
    for (const OpacityPoint& point : absolute.opacity) scalar_opacity->AddPoint(point.value, point.opacity);
    gradient_opacity->RemoveAllPoints();
    for (const OpacityPoint& point : absolute.gradient_opacity) gradient_opacity->AddPoint(point.value, point.opacity);
    // An empty gradient function would make everything transparent: switch it off instead.
    volume_property->SetDisableGradientOpacity(absolute.gradient_opacity.empty() ? 1 : 0);
    volume_property->SetShade(absolute.shading ? 1 : 0);
    volume_property->SetAmbient(absolute.ambient);
    volume_property->SetDiffuse(absolute.diffuse);
    volume_property->SetSpecular(absolute.specular);
    volume_property->SetSpecularPower(absolute.specular_power);
    volume_property->SetScalarOpacityUnitDistance(absolute.opacity_unit_distance);
}

void VolumeScene::Pipeline::updatePlanes() {
    const std::array<double, 6> bounds = gridBounds(geometry);
    std::array<double, 3> at{};
    for (std::size_t axis = 0; axis < 3; ++axis) {
        at[axis] = static_cast<double>(cursor[axis]) * geometry.spacing[axis];
    }
    for (std::size_t axis = 0; axis < 3; ++axis) {
        // The quad spans the two other axes at the cursor's position along `axis`.
        const std::size_t u = (axis + 1) % 3;
        const std::size_t v = (axis + 2) % 3;
        vtkPoints* points = planes[axis]->GetPoints();
        const std::array<std::array<double, 2>, 4> corners{{{bounds[2 * u], bounds[2 * v]},
                                                             {bounds[2 * u + 1], bounds[2 * v]},
                                                             {bounds[2 * u + 1], bounds[2 * v + 1]},
                                                             {bounds[2 * u], bounds[2 * v + 1]}}};
        for (vtkIdType corner = 0; corner < 4; ++corner) {
            std::array<double, 3> point{};
            point[axis] = at[axis];
            point[u] = corners[static_cast<std::size_t>(corner)][0];
            point[v] = corners[static_cast<std::size_t>(corner)][1];
            points->SetPoint(corner, point.data());
        }
        points->Modified();
        planes[axis]->Modified();
    }
}

void VolumeScene::Pipeline::updateOutline() {
    const std::array<double, 6> bounds = gridBounds(geometry);
    vtkNew<vtkPoints> points;
    for (int corner = 0; corner < 8; ++corner) {  // bit 0: x, bit 1: y, bit 2: z at the upper bound
        points->InsertNextPoint(bounds[(corner & 1) ? 1 : 0], bounds[(corner & 2) ? 3 : 2],
                                bounds[(corner & 4) ? 5 : 4]);
    }
    vtkNew<vtkCellArray> edges;
    for (vtkIdType corner = 0; corner < 8; ++corner) {
        for (vtkIdType bit : {1, 2, 4}) {
            if ((corner & bit) == 0) {
                const vtkIdType edge[2] = {corner, corner | bit};
                edges->InsertNextCell(2, edge);
            }
        }
    }
    outline->SetPoints(points);
    outline->SetLines(edges);
}

void VolumeScene::Pipeline::updateSurfaceActors() {
    for (auto& [label, actor] : surface_actors) renderer->RemoveActor(actor);
    surface_actors.clear();
    const vtkSmartPointer<vtkMatrix4x4> matrix = gridToWorld(surfaces.geometry());
    for (const auto& [label, mesh] : surfaces.m_data->meshes) {
        if (mesh->GetNumberOfPoints() == 0) continue;
        vtkNew<vtkPolyDataMapper> mapper;
        mapper->SetInputData(mesh);
        mapper->ScalarVisibilityOff();
        auto actor = vtkSmartPointer<vtkActor>::New();
        actor->SetMapper(mapper);
        actor->SetUserMatrix(matrix);
        actor->GetProperty()->SetSpecular(0.25);
        actor->GetProperty()->SetSpecularPower(20.0);
        renderer->AddActor(actor);
        surface_actors[label] = actor;
    }
}

void VolumeScene::Pipeline::updateVisibility() {
    const bool has_volume = volume != nullptr;
    // The ray caster needs a 3D texture: single slices show only their outline.
    const bool is_3d = has_volume && geometry.size[0] > 1 && geometry.size[1] > 1 && geometry.size[2] > 1;
    volume_prop->SetVisibility(is_3d && volume_visible && has_preset ? 1 : 0);
    outline_actor->SetVisibility(has_volume ? 1 : 0);
    for (const auto& actor : plane_actors) actor->SetVisibility(has_volume && planes_visible ? 1 : 0);
    const double opacity = std::clamp(display.opacity, 0.0, 1.0);
    bool translucent = false;
    for (const auto& [label, actor] : surface_actors) {
        const QColor color = display.colorOf(label);
        actor->GetProperty()->SetColor(color.redF(), color.greenF(), color.blueF());
        actor->GetProperty()->SetOpacity(opacity);
        const bool shown = surfaces_visible && display.isVisible(label);
        actor->SetVisibility(shown ? 1 : 0);
        translucent = translucent || (shown && opacity < 1.0);
    }
    // Translucent surfaces inside a rendered volume need depth peeling to composite in depth order;
    // it renders the scene several times, so only when something is translucent.
    renderer->SetUseDepthPeeling(translucent);
    renderer->SetUseDepthPeelingForVolumes(translucent);
}

VolumeScene::VolumeScene() : m_pipeline(std::make_unique<Pipeline>()) {
    Pipeline& p = *m_pipeline;
    p.renderer->SetBackground(0.10, 0.11, 0.13);
    p.renderer->SetBackground2(0.24, 0.26, 0.31);
    p.renderer->GradientBackgroundOn();
    p.renderer->SetLayer(0);
    p.renderer->SetMaximumNumberOfPeels(4);  // nested label surfaces rarely overlap more
    p.renderer->SetOcclusionRatio(0.05);

    p.volume_property->SetColor(p.colors);
    p.volume_property->SetScalarOpacity(p.scalar_opacity);
    p.volume_property->SetGradientOpacity(p.gradient_opacity);
    p.volume_property->SetInterpolationTypeToLinear();
    p.volume_mapper->SetBlendModeToComposite();
    // One ray per pixel always: VTK 9.1 composites a volume cast at reduced image resolution with
    // the wrong depth (it is drawn over nearer lines, translucent surfaces vanish). Views trade
    // detail for speed by rendering the whole window smaller instead (VtkGLWidget's render scale).
    p.volume_mapper->AutoAdjustSampleDistancesOff();
    p.volume_mapper->SetImageSampleDistance(1.0f);
    p.volume_mapper->SetInputData(p.image);
    p.volume_prop->SetMapper(p.volume_mapper);
    p.volume_prop->SetProperty(p.volume_property);
    p.volume_prop->VisibilityOff();
    p.renderer->AddVolume(p.volume_prop);

    vtkNew<vtkPolyDataMapper> outline_mapper;
    outline_mapper->SetInputData(p.outline);
    p.outline_actor->SetMapper(outline_mapper);
    p.outline_actor->GetProperty()->SetColor(0.75, 0.78, 0.82);
    p.outline_actor->GetProperty()->SetLighting(false);
    p.outline_actor->VisibilityOff();
    p.renderer->AddActor(p.outline_actor);
    vtkNew<vtkPolyDataMapper> tiles_mapper;
    tiles_mapper->SetInputData(p.tiles);
    tiles_mapper->SetScalarModeToUseCellData();
    p.tiles_actor->SetMapper(tiles_mapper);
    p.tiles_actor->GetProperty()->SetLineWidth(2.0f);
    p.tiles_actor->GetProperty()->SetLighting(false);
    p.tiles_actor->VisibilityOff();
    p.renderer->AddActor(p.tiles_actor);

    for (std::size_t axis = 0; axis < 3; ++axis) {
        p.planes[axis] = vtkSmartPointer<vtkPolyData>::New();
        vtkNew<vtkPoints> points;
        points->SetNumberOfPoints(4);
        vtkNew<vtkCellArray> loop;
        const vtkIdType ids[5] = {0, 1, 2, 3, 0};
        loop->InsertNextCell(5, ids);
        p.planes[axis]->SetPoints(points);
        p.planes[axis]->SetLines(loop);
        vtkNew<vtkPolyDataMapper> mapper;
        mapper->SetInputData(p.planes[axis]);
        p.plane_actors[axis] = vtkSmartPointer<vtkActor>::New();
        p.plane_actors[axis]->SetMapper(mapper);
        vtkProperty* property = p.plane_actors[axis]->GetProperty();
        property->SetColor(plane_colors[axis][0], plane_colors[axis][1], plane_colors[axis][2]);
        property->SetLineWidth(2.0f);
        property->SetLighting(false);
        p.plane_actors[axis]->VisibilityOff();
        p.renderer->AddActor(p.plane_actors[axis]);
    }

    // Orientation cube in the lower-left corner, faces named in LPS: +x Left, +y Posterior, +z Superior.
    p.marker->SetXPlusFaceText("L");
    p.marker->SetXMinusFaceText("R");
    p.marker->SetYPlusFaceText("P");
    p.marker->SetYMinusFaceText("A");
    p.marker->SetZPlusFaceText("S");
    p.marker->SetZMinusFaceText("I");
    p.marker->SetFaceTextScale(0.65);
    p.marker->GetCubeProperty()->SetColor(0.55, 0.60, 0.68);
    p.marker->GetTextEdgesProperty()->SetColor(0.9, 0.9, 0.9);
    p.marker->GetTextEdgesProperty()->SetLineWidth(1.0f);
    for (vtkProperty* face : {p.marker->GetXPlusFaceProperty(), p.marker->GetXMinusFaceProperty()}) {
        face->SetColor(0.95, 0.45, 0.45);
    }
    for (vtkProperty* face : {p.marker->GetYPlusFaceProperty(), p.marker->GetYMinusFaceProperty()}) {
        face->SetColor(0.45, 0.90, 0.45);
    }
    for (vtkProperty* face : {p.marker->GetZPlusFaceProperty(), p.marker->GetZMinusFaceProperty()}) {
        face->SetColor(0.50, 0.65, 1.00);
    }
    p.marker_renderer->AddViewProp(p.marker);
    p.marker_renderer->SetLayer(1);
    p.marker_renderer->SetViewport(0.0, 0.0, 0.16, 0.2);
    p.marker_renderer->InteractiveOff();

    p.before_render->SetClientData(&p);
    p.before_render->SetCallback(&Pipeline::beforeRender);
    p.renderer->AddObserver(vtkCommand::StartEvent, p.before_render);
}

VolumeScene::~VolumeScene() {
    m_pipeline->renderer->RemoveObserver(m_pipeline->before_render);
}

vtkRenderer* VolumeScene::renderer() const { return m_pipeline->renderer; }
vtkRenderer* VolumeScene::markerRenderer() const { return m_pipeline->marker_renderer; }

void VolumeScene::setVolume(const tessera::Volume& volume) {
    setVolume(std::make_shared<const tessera::Volume>(volume.geometry, volume.voxels.clone(),
                                                      volume.source_scalar_type, volume.source_path));
}

void VolumeScene::setVolume(std::shared_ptr<const tessera::Volume> volume) {
    if (!volume) {
        clearVolume();
        return;
    }
    const tessera::ImageGeometry& geometry = volume->geometry;
    TESSERA_CHECK(volume->voxels.is_defined() && volume->voxels.dtype() == tessera::DType::F32 &&
                      volume->voxels.num_elements() == geometry.num_voxels(),
                  "volume " << volume->source_path << " must hold " << geometry.num_voxels()
                            << " f32 voxels for its grid " << describe(geometry));
    // VTK reads the voxels in place: [D, H, W] contiguous is VTK's x-fastest point order.
    if (!volume->voxels.is_contiguous()) {
        volume = std::make_shared<const tessera::Volume>(volume->geometry, volume->voxels.contiguous(),
                                                         volume->source_scalar_type, volume->source_path);
    }
    Pipeline& p = *m_pipeline;
    p.volume = std::move(volume);
    p.geometry = geometry;
    p.intensities = IntensityDistribution::fromVolume(*p.volume);

    vtkNew<vtkFloatArray> scalars;
    scalars->SetName("intensity");
    // save = 1: VTK never frees nor writes these voxels; p.volume owns them.
    scalars->SetArray(const_cast<float*>(p.volume->voxels.data<float>()), p.volume->voxels.num_elements(), 1);
    p.image->Initialize();
    p.image->SetDimensions(static_cast<int>(geometry.size[0]), static_cast<int>(geometry.size[1]),
                           static_cast<int>(geometry.size[2]));
    p.image->SetSpacing(geometry.spacing.data());
    p.image->SetOrigin(0.0, 0.0, 0.0);
    p.image->GetPointData()->SetScalars(scalars);
    p.image->Modified();

    const vtkSmartPointer<vtkMatrix4x4> matrix = gridToWorld(geometry);
    p.volume_prop->SetUserMatrix(matrix);
    p.outline_actor->SetUserMatrix(matrix);
    p.tiles_actor->SetUserMatrix(matrix);
    for (const auto& actor : p.plane_actors) actor->SetUserMatrix(matrix);
    p.updateOutline();

    for (std::size_t axis = 0; axis < 3; ++axis) {
        p.cursor[axis] = std::clamp<std::int64_t>(p.cursor[axis], 0, geometry.size[axis] - 1);
    }
    p.updatePlanes();
    if (p.has_preset) p.applyTransferFunction(p.intensities);
    p.updateVisibility();
}

void VolumeScene::clearVolume() {
    Pipeline& p = *m_pipeline;
    p.volume.reset();
    p.intensities = {};
    p.image->Initialize();
    p.updateVisibility();
}

bool VolumeScene::hasVolume() const { return m_pipeline->volume != nullptr; }
const IntensityDistribution& VolumeScene::intensities() const { return m_pipeline->intensities; }

void VolumeScene::setTransferFunction(const TransferFunctionPreset& preset) {
    setTransferFunction(preset, m_pipeline->intensities);
}

void VolumeScene::setTransferFunction(const TransferFunctionPreset& preset, const IntensityDistribution& intensities) {
    Pipeline& p = *m_pipeline;
    TESSERA_CHECK(!preset.color.empty() && !preset.opacity.empty(),
                  "transfer function '" << preset.name.toStdString() << "' needs colour and opacity points");
    p.preset = preset;
    p.has_preset = true;
    p.applyTransferFunction(intensities);
    p.updateVisibility();
}

const TransferFunctionPreset& VolumeScene::transferFunction() const { return m_pipeline->preset; }

void VolumeScene::setLabelMap(const tessera::LabelMap& labels, const LabelDisplay& display) {
    setLabelSurfaces(LabelSurfaces::extract(labels), display);
}

void VolumeScene::setLabelSurfaces(const LabelSurfaces& surfaces, const LabelDisplay& display) {
    Pipeline& p = *m_pipeline;
    p.surfaces = surfaces;
    p.display = display;
    p.updateSurfaceActors();
    p.updateVisibility();
}

void VolumeScene::setLabelDisplay(const LabelDisplay& display) {
    m_pipeline->display = display;
    m_pipeline->updateVisibility();
}

void VolumeScene::clearLabelMap() { setLabelSurfaces(LabelSurfaces(), m_pipeline->display); }

const LabelSurfaces& VolumeScene::labelSurfaces() const { return m_pipeline->surfaces; }

std::vector<std::int32_t> VolumeScene::shownSurfaceLabels() const {
    std::vector<std::int32_t> shown;
    for (const auto& [label, actor] : m_pipeline->surface_actors) {
        if (actor->GetVisibility()) shown.push_back(label);
    }
    return shown;
}

void VolumeScene::setCursor(std::array<std::int64_t, 3> voxel) {
    Pipeline& p = *m_pipeline;
    for (std::size_t axis = 0; axis < 3; ++axis) {
        p.cursor[axis] = std::clamp<std::int64_t>(voxel[axis], 0, std::max<std::int64_t>(p.geometry.size[axis] - 1, 0));
    }
    p.updatePlanes();
}

std::array<std::int64_t, 3> VolumeScene::cursor() const { return m_pipeline->cursor; }

void VolumeScene::setVolumeVisible(bool visible) {
    m_pipeline->volume_visible = visible;
    m_pipeline->updateVisibility();
}

bool VolumeScene::isVolumeVisible() const { return m_pipeline->volume_visible; }

void VolumeScene::setSurfacesVisible(bool visible) {
    m_pipeline->surfaces_visible = visible;
    m_pipeline->updateVisibility();
}

bool VolumeScene::areSurfacesVisible() const { return m_pipeline->surfaces_visible; }

void VolumeScene::setTileBoxes(const std::vector<TileBox>& boxes) {
    Pipeline& p = *m_pipeline;
    vtkNew<vtkPoints> points;
    vtkNew<vtkCellArray> edges;
    vtkNew<vtkUnsignedCharArray> colors;
    colors->SetNumberOfComponents(3);
    colors->SetName("core");
    const std::array<double, 6> grid = gridBounds(p.geometry);
    for (const TileBox& box : boxes) {
        // Voxel edges in mm: voxel centres sit at index · spacing; keep the box inside the drawn volume.
        std::array<double, 6> mm{};
        for (std::size_t axis = 0; axis < 3; ++axis) {
            const double spacing = p.geometry.spacing[axis];
            mm[2 * axis] = std::clamp((box.voxel_bounds[2 * axis] - 0.5) * spacing, grid[2 * axis], grid[2 * axis + 1]);
            mm[2 * axis + 1] = std::clamp((box.voxel_bounds[2 * axis + 1] - 0.5) * spacing, grid[2 * axis], grid[2 * axis + 1]);
        }
        const vtkIdType first = points->GetNumberOfPoints();
        for (int corner = 0; corner < 8; ++corner) {
            points->InsertNextPoint(mm[(corner & 1) ? 1 : 0], mm[(corner & 2) ? 3 : 2], mm[(corner & 4) ? 5 : 4]);
        }
        for (vtkIdType corner = 0; corner < 8; ++corner) {
            for (vtkIdType bit : {1, 2, 4}) {
                if ((corner & bit) != 0) continue;
                const vtkIdType edge[2] = {first + corner, first + (corner | bit)};
                edges->InsertNextCell(2, edge);
                const unsigned char rgb[3] = {static_cast<unsigned char>(box.color.red()), static_cast<unsigned char>(box.color.green()),
                                              static_cast<unsigned char>(box.color.blue())};
                colors->InsertNextTypedTuple(rgb);
            }
        }
    }
    p.tiles->Initialize();
    p.tiles->SetPoints(points);
    p.tiles->SetLines(edges);
    p.tiles->GetCellData()->SetScalars(colors);
    p.tiles->Modified();
    p.tile_count = boxes.size();
    p.tiles_actor->SetVisibility(boxes.empty() || !hasVolume() ? 0 : 1);
}

std::size_t VolumeScene::tileBoxCount() const { return m_pipeline->tile_count; }

void VolumeScene::setSlicePlanesVisible(bool visible) {
    m_pipeline->planes_visible = visible;
    m_pipeline->updateVisibility();
}

bool VolumeScene::areSlicePlanesVisible() const { return m_pipeline->planes_visible; }

void VolumeScene::resetCamera() {
    Pipeline& p = *m_pipeline;
    vtkCamera* camera = p.renderer->GetActiveCamera();
    // World centre of the volume (or of the labels' grid when no volume is loaded).
    const tessera::ImageGeometry& geometry = p.volume ? p.geometry : p.surfaces.geometry();
    const auto& size = geometry.size;
    const std::array<double, 3> centre = geometry.world_of(static_cast<double>(size[0] - 1) / 2.0,
                                                           static_cast<double>(size[1] - 1) / 2.0,
                                                           static_cast<double>(size[2] - 1) / 2.0);
    // Facing the patient (from anterior, −y in LPS), head up, then a little from the left and above.
    camera->SetFocalPoint(centre.data());
    camera->SetPosition(centre[0], centre[1] - 1.0, centre[2]);
    camera->SetViewUp(0.0, 0.0, 1.0);
    camera->Azimuth(30.0);
    camera->Elevation(15.0);
    camera->OrthogonalizeViewUp();
    p.renderer->ResetCamera();
}

}  // namespace tessera::ui
