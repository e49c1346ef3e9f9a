#include "widgets/volume_view.hpp"

#include <QTimer>

#include "model/gui_mailbox.hpp"
#include "model/partition_design.hpp"
#include "render/partition_overlay.hpp"

#include "model/viewer_model.hpp"
#include "render/volume_scene.hpp"
#include "widgets/vtk_gl_widget.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QToolButton>
#include <QVBoxLayout>
#include <QtDebug>

#include <exception>

namespace tessera::ui {

namespace {

// Below this a volume is taken for CT (air is −1000 HU); MRI and others start near 0.
constexpr double ct_minimum_threshold = -500.0;

}  // namespace

VolumeView::VolumeView(ViewerModel* model, QWidget* parent)
    : QWidget(parent), m_model(model), m_scene(std::make_unique<VolumeScene>()),
      m_presets(builtinTransferFunctionPresets()), m_mailbox(new GuiMailbox(this)) {
    m_gl = new VtkGLWidget(this);
    m_cursor_render = new QTimer(this);
    m_cursor_render->setSingleShot(true);
    m_cursor_render->setInterval(300);  // ms without a cursor change
    connect(m_cursor_render, &QTimer::timeout, this, &VolumeView::render);
    m_gl->addRenderer(m_scene->renderer());
    m_gl->addRenderer(m_scene->markerRenderer());
    // The GL view is a native window, which shows no tooltip: the controls row above it carries the hint.
    const QString navigation = tr("In the 3D view: left drag rotates, right drag or wheel zooms, middle or Shift+left drag "
                                  "pans; 'r' frames everything");
    setToolTip(navigation);

    m_preset_box = new QComboBox(this);
    // As narrow as a short preset name: the row must not set the viewer's (and so the window's) minimum width.
    m_preset_box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_preset_box->setMinimumContentsLength(12);
    for (std::size_t index = 0; index < m_presets.size(); ++index) {
        m_preset_box->addItem(m_presets[index].name, m_presets[index].id);
        m_preset_box->setItemData(static_cast<int>(index), m_presets[index].description, Qt::ToolTipRole);
    }
    m_preset_box->setToolTip(tr("Transfer function: how intensities map to colour and opacity in the volume "
                                "rendering. CT presets use Hounsfield units, MRI presets the scan's own "
                                "intensity percentiles."));
    m_volume_check = new QCheckBox(tr("Volume"), this);
    m_volume_check->setChecked(true);
    m_volume_check->setToolTip(tr("Show the volume rendering"));
    m_surfaces_check = new QCheckBox(tr("Surfaces"), this);
    m_surfaces_check->setChecked(true);
    m_surfaces_check->setToolTip(tr("Show a smoothed surface for each visible label, coloured as in the slices"));
    m_planes_check = new QCheckBox(tr("Planes"), this);
    m_planes_check->setChecked(true);
    m_planes_check->setToolTip(tr("Show the outlines of the three slice planes through the cursor"));
    m_reset_button = new QToolButton(this);
    m_reset_button->setText(tr("Reset camera"));
    m_reset_button->setToolTip(tr("Face the patient from the front and fit the volume in view.") + QStringLiteral("\n") + navigation);

    auto* controls = new QHBoxLayout;
    controls->setContentsMargins(4, 2, 4, 2);
    auto* preset_label = new QLabel(tr("Rendering:"), this);
    preset_label->setBuddy(m_preset_box);
    controls->addWidget(preset_label);
    controls->addWidget(m_preset_box);
    controls->addSpacing(8);
    controls->addWidget(m_volume_check);
    controls->addWidget(m_surfaces_check);
    controls->addWidget(m_planes_check);
    controls->addStretch(1);
    controls->addWidget(m_reset_button);

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(0);
    layout->addLayout(controls);
    layout->addWidget(m_gl, 1);

    connect(m_preset_box, &QComboBox::currentIndexChanged, this, &VolumeView::onPresetChosen);
    connect(m_volume_check, &QCheckBox::toggled, this, &VolumeView::setVolumeVisible);
    connect(m_surfaces_check, &QCheckBox::toggled, this, &VolumeView::setSurfacesVisible);
    connect(m_planes_check, &QCheckBox::toggled, this, &VolumeView::setSlicePlanesVisible);
    connect(m_reset_button, &QToolButton::clicked, this, &VolumeView::resetCamera);

    connect(m_model, &ViewerModel::volumeChanged, this, &VolumeView::onVolumeChanged);
    connect(m_model, &ViewerModel::labelMapChanged, this, &VolumeView::onLabelMapChanged);
    connect(m_model, &ViewerModel::labelDisplayChanged, this, &VolumeView::onLabelDisplayChanged);
    connect(m_model, &ViewerModel::cursorChanged, this, &VolumeView::onCursorChanged);

    if (m_model->hasVolume()) onVolumeChanged();
}

VolumeView::~VolumeView() {
    // Its delivery dies with the mailbox, a child of this view.
    if (m_extraction_thread.joinable()) m_extraction_thread.join();
}

QString VolumeView::currentPresetId() const { return m_preset_box->currentData().toString(); }

bool VolumeView::setCurrentPreset(const QString& id) {
    const int index = findTransferFunctionPreset(m_presets, id);
    if (index < 0) return false;
    if (index == m_preset_box->currentIndex()) {
        onPresetChosen(index);  // re-applies (a new volume resolves percentiles anew)
    } else {
        m_preset_box->setCurrentIndex(index);
    }
    return true;
}

void VolumeView::resetCamera() {
    m_scene->resetCamera();
    render();
}

void VolumeView::setVolumeVisible(bool visible) {
    if (m_volume_check->isChecked() != visible) m_volume_check->setChecked(visible);
    m_scene->setVolumeVisible(visible);
    render();
}

void VolumeView::setSurfacesVisible(bool visible) {
    if (m_surfaces_check->isChecked() != visible) m_surfaces_check->setChecked(visible);
    m_scene->setSurfacesVisible(visible);
    render();
}

void VolumeView::setSlicePlanesVisible(bool visible) {
    if (m_planes_check->isChecked() != visible) m_planes_check->setChecked(visible);
    m_scene->setSlicePlanesVisible(visible);
    render();
}

void VolumeView::onVolumeChanged() {
    const auto& volume = m_model->volume();
    try {
        if (!volume) {
            m_scene->clearVolume();
        } else {
            m_scene->setVolume(volume);
            const bool ct_like = m_scene->intensities().minimum() < ct_minimum_threshold;
            setCurrentPreset(ct_like ? "ct_soft_tissue" : "mri_default");
            m_scene->setCursor(m_model->overviewCursor());
        }
    } catch (const std::exception& error) {
        qWarning("3D view: cannot show the volume: %s", error.what());
        m_scene->clearVolume();
    }
    // The model drops its label map with a new volume; follow it even if it says so only once.
    if (m_model->shownLabels() != m_requested_labels) onLabelMapChanged();
    if (volume) m_scene->resetCamera();
    updateTileBoxes();  // the tiles stretch over the new volume
}

void VolumeView::onLabelMapChanged() {
    if (m_label_generation > 0 && m_model->shownLabels() == m_requested_labels) return;  // already followed
    m_requested_labels = m_model->shownLabels();
    ++m_label_generation;
    if (!m_requested_labels) {
        m_scene->clearLabelMap();
        render();
        emit surfacesReady();
        return;
    }
    startSurfaceExtraction();
}

void VolumeView::startSurfaceExtraction() {
    if (m_extraction_thread.joinable() || !m_requested_labels) return;  // the finished handler starts the next one
    const std::uint64_t generation = m_label_generation;
    const std::shared_ptr<const tessera::LabelMap> labels = m_requested_labels;
    // Extraction takes a noticeable time on big label maps (~0.3 s for 256³ here): off the GUI thread.
    m_extraction_thread = std::thread([this, labels, generation] {
        scheduleThisThreadAsBatch();
        LabelSurfaces surfaces;
        QString error;
        try {
            surfaces = LabelSurfaces::extract(*labels);
        } catch (const std::exception& exception) {
            error = QString::fromUtf8(exception.what());
        }
        m_mailbox->post([this, generation, surfaces = std::move(surfaces), error = std::move(error)] {
            m_extraction_thread.join();  // it has nothing left to do but return
            onExtractionFinished(generation, surfaces, error);
        });
    });
}

void VolumeView::onExtractionFinished(std::uint64_t generation, const LabelSurfaces& surfaces, const QString& error) {
    if (generation != m_label_generation) {  // superseded while running
        startSurfaceExtraction();
        return;
    }
    if (!error.isEmpty()) {
        qWarning("3D view: cannot build label surfaces: %s", qPrintable(error));
        m_scene->clearLabelMap();
        render();
        emit surfaceError(error);
        return;
    }
    m_scene->setLabelSurfaces(surfaces, labelDisplay());
    if (!m_model->hasVolume()) m_scene->resetCamera();
    render();
    emit surfacesReady();
}

void VolumeView::onLabelDisplayChanged() {
    m_scene->setLabelDisplay(labelDisplay());
    m_gl->requestQuickRender();  // an opacity slider sends many changes
}

void VolumeView::onCursorChanged() {
    m_scene->setCursor(m_model->overviewCursor());
    // Browsing slices sends a change per slice; a 3D frame can cost many slice frames (all of them on a
    // software renderer), so the planes are drawn once browsing pauses.
    m_cursor_render->start();
}

void VolumeView::onPresetChosen(int index) {
    if (index < 0 || index >= static_cast<int>(m_presets.size())) return;
    m_scene->setTransferFunction(m_presets[static_cast<std::size_t>(index)]);
    render();
}

LabelDisplay VolumeView::labelDisplay() const {
    LabelDisplay display;
    for (const std::int32_t label : m_model->presentLabels()) {
        display.colors[label] = m_model->labelColor(label);
        display.visible[label] = m_model->isLabelVisible(label);
    }
    display.opacity = m_model->labelOpacity();
    return display;
}

void VolumeView::render() { m_gl->requestRender(); }

void VolumeView::setPartitionDesign(PartitionDesign* design) {
    if (m_design) disconnect(m_design, nullptr, this, nullptr);
    m_design = design;
    if (m_design) {
        // A 3D render can take a frame's budget many times over on a software renderer: while a cut is
        // dragged only the slice views follow, and the boxes catch up when it is released.
        connect(m_design, &PartitionDesign::designChanged, this, [this] {
            if (!m_design->isDragging()) updateTileBoxes();
        });
        connect(m_design, &PartitionDesign::dragFinished, this, &VolumeView::updateTileBoxes);
        connect(m_design, &PartitionDesign::experimentChanged, this, &VolumeView::updateTileBoxes);
    }
    updateTileBoxes();
}

void VolumeView::setPartitionVisible(bool visible) {
    m_partition_visible = visible;
    updateTileBoxes();
}

// Each core's tile stretched over the volume, as the slice views draw it.
void VolumeView::updateTileBoxes() {
    std::vector<TileBox> boxes;
    if (m_design && m_design->hasExperiment() && m_partition_visible && m_model->hasVolume()) {
        const auto& size = m_model->volume()->geometry.size;
        const Shape input = m_design->inputExtent();
        const int rank = static_cast<int>(input.size());
        for (const CoreCost& core : m_design->cores()) {
            TileBox box;
            box.voxel_bounds = {0, static_cast<double>(size[0]), 0, static_cast<double>(size[1]), 0, static_cast<double>(size[2])};
            for (int a = 0; a < rank; ++a) {
                const int voxel_axis = PartitionOverlay::voxelAxisOf(a, rank);
                const double scale = static_cast<double>(size[static_cast<std::size_t>(voxel_axis)]) / static_cast<double>(input[static_cast<std::size_t>(a)]);
                box.voxel_bounds[static_cast<std::size_t>(2 * voxel_axis)] = static_cast<double>(core.owned[static_cast<std::size_t>(a)].begin) * scale;
                box.voxel_bounds[static_cast<std::size_t>(2 * voxel_axis + 1)] = static_cast<double>(core.owned[static_cast<std::size_t>(a)].end) * scale;
            }
            box.color = core.fits ? coreColor(core.core) : QColor(230, 40, 40);
            boxes.push_back(box);
        }
    }
    m_scene->setTileBoxes(boxes);
    render();
}

}  // namespace tessera::ui
