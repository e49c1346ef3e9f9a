// VolumeView: the 3D view of the volume viewer — a VtkGLWidget showing a VolumeScene, under a row
// of controls (transfer-function preset, volume and surface toggles, reset camera).
//
// It follows a ViewerModel: a new volume is rendered with a preset picked from its intensities
// (CT-like → "CT soft tissue", otherwise "MRI default"), label maps become one smoothed surface per
// label (extracted on a worker thread; surfacesReady() tells when they are shown), the overlay's
// colours and visibility carry over, and the cursor's three slice planes follow the cursor.
//
//   VolumeView view(&model);
//   model.setVolume(volume);  // view renders it
#pragma once

#include "render/transfer_function.hpp"

#include <QWidget>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

class QCheckBox;
class QComboBox;
class QTimer;
class QToolButton;

namespace tessera {
struct LabelMap;
}

namespace tessera::ui {

class GuiMailbox;
class PartitionDesign;

class LabelSurfaces;
class ViewerModel;
class VolumeScene;
class VtkGLWidget;
struct LabelDisplay;

class VolumeView : public QWidget {
    Q_OBJECT
public:
    explicit VolumeView(ViewerModel* model, QWidget* parent = nullptr);
    ~VolumeView() override;

    VolumeScene* scene() const { return m_scene.get(); }
    VtkGLWidget* glWidget() const { return m_gl; }
    const std::vector<TransferFunctionPreset>& presets() const { return m_presets; }
    QString currentPresetId() const;
    // Selects a builtin preset by id ("ct_bone"); false when there is none with that id.
    bool setCurrentPreset(const QString& id);
    bool isExtractingSurfaces() const { return m_extraction_thread.joinable(); }

public slots:
    void resetCamera();
    void setVolumeVisible(bool visible);
    void setSurfacesVisible(bool visible);
    void setSlicePlanesVisible(bool visible);
    // Draws the design's tiles as coloured boxes (nullptr: none).
    void setPartitionDesign(PartitionDesign* design);
    void setPartitionVisible(bool visible);

signals:
    // The surfaces of the model's current label map are in the scene (or were cleared).
    void surfacesReady();
    // Surface extraction failed; the message says why.
    void surfaceError(const QString& message);

private slots:
    void onVolumeChanged();
    void onLabelMapChanged();
    void onLabelDisplayChanged();
    void onCursorChanged();
    void onPresetChosen(int index);

private:
    PartitionDesign* m_design = nullptr;
    QTimer* m_cursor_render = nullptr;  // coalesces the renders of a moving cursor
    bool m_partition_visible = true;
    LabelDisplay labelDisplay() const;
    void startSurfaceExtraction();
    void onExtractionFinished(std::uint64_t generation, const LabelSurfaces& surfaces, const QString& error);
    void render();
    void updateTileBoxes();

    ViewerModel* m_model = nullptr;
    std::unique_ptr<VolumeScene> m_scene;
    std::vector<TransferFunctionPreset> m_presets;
    VtkGLWidget* m_gl = nullptr;
    QComboBox* m_preset_box = nullptr;
    QCheckBox* m_volume_check = nullptr;
    QCheckBox* m_surfaces_check = nullptr;
    QCheckBox* m_planes_check = nullptr;
    QToolButton* m_reset_button = nullptr;

    // Label maps are extracted one at a time: a result for a superseded label map is dropped and the
    // current one extracted next.
    GuiMailbox* m_mailbox;
    std::thread m_extraction_thread;  // joined when its result is delivered (through m_mailbox)
    std::shared_ptr<const tessera::LabelMap> m_requested_labels;
    std::uint64_t m_label_generation = 0;  // counts label maps requested
};

}  // namespace tessera::ui
