// MainWindow: the studio — three linked slice views and a 3D view of one volume with its label map,
// the overlay and window controls in a dock, the status bar reading out the voxel under the mouse, and
// the design of an experiment: its fields, its partition grid drawn over the slices, the planner, and
// the export of the design as TPUConfig or JAX code (main_window_design.cpp).
#pragma once

#include "model/partition_design.hpp"
#include "model/viewer_model.hpp"
#include "render/slice_renderer.hpp"
#include "run/run_records.hpp"

#include <QMainWindow>

#include <array>
#include <filesystem>

class QComboBox;
class QDockWidget;
class QDoubleSpinBox;
class QGridLayout;
class QLabel;
class QTimer;
class QMenu;
class QScrollBar;
class QTabWidget;

namespace tessera::ui {

class ExperimentPanel;
class LabelLegend;
class PartitionPanel;
class PlannerPanel;
class DetectionView;
class EquivalenceView;
class RunCharts;
class RunController;
class RunPanel;
class SliceView;
class VolumeView;

enum class SnippetKind { TpuConfig, Jax };

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    ViewerModel* model() const { return m_model; }
    SliceView* sliceView(SliceOrientation orientation) const;
    VolumeView* volumeView() const { return m_volume_view; }
    LabelLegend* legend() const { return m_legend; }
    QComboBox* presetBox() const { return m_preset_box; }
    QMenu* recentMenu() const { return m_recent_menu; }
    QString statusText() const;
    QString lastError() const { return m_last_error; }  // the message of the last error shown
    QString lastWarning() const { return m_last_warning; }  // what the last opened file's reader let through

    // Each returns false and shows the engine's message (non-modal) when the file cannot be used.
    // An image that can be read by region (HDF5, uncompressed .nii) and whose voxels would take more
    // than wholeVolumeLimitBytes() as f32 is opened by region: openImageByRegion.
    bool openImage(const QString& path);
    // Opens the image read by region whatever its size: one pass reads a downsampled overview (at most
    // overviewVoxelLimit() voxels: the 3D view and the slices until their full resolution is read), with
    // a progress dialog that can cancel; full-resolution slices are read when the views show them.
    bool openImageByRegion(const QString& path);
    // TESSERA_STUDIO_VOLUME_BYTES, else a quarter of the largest volume Tessera reads whole
    // (TESSERA_MAX_VOLUME_BYTES, else half of physical memory): the views and the 3D renderer hold copies.
    static std::uint64_t wholeVolumeLimitBytes();
    static std::int64_t overviewVoxelLimit();  // TESSERA_OVERVIEW_VOXELS, else 2^24 (256³)
    bool openLabelMap(const QString& path);
    // Names and colours for the open label map from an ITK-SNAP, 3D Slicer, FreeSurfer or MRIcron file
    // (io/label_descriptions.hpp); the legend saved as an ITK-SNAP label description file.
    bool openLabelDescriptions(const QString& path);
    bool saveLabelDescriptions(const QString& path);
    // The label map with the legend's names and colours (kept by NRRD and 3D Slicer's .seg.nrrd).
    bool saveLabelMap(const QString& path);
    void showPhantom(bool two_dimensional);
    void showVolume(std::shared_ptr<const tessera::Volume> volume, std::shared_ptr<const tessera::LabelMap> labels,
                    std::map<std::int32_t, QString> label_names = {});

    // ---- the experiment being designed ----
    PartitionDesign* design() const { return m_design; }
    ExperimentPanel* experimentPanel() const { return m_experiment_panel; }
    PartitionPanel* partitionPanel() const { return m_partition_panel; }
    PlannerPanel* plannerPanel() const { return m_planner_panel; }
    RunPanel* runPanel() const { return m_run_panel; }
    RunController* runController() const { return m_run_controller; }
    RunCharts* runCharts() const { return m_run_charts; }
    EquivalenceView* equivalenceView() const { return m_equivalence_view; }
    // Shows a run's last evaluation over its held-out image: the image, its truth and the prediction — or,
    // for a detector, its boxes in the Detections tab (the file looked up in model_dir when it moved).
    bool showEvaluation(const tessera::run::EvalRecord& eval, const std::filesystem::path& model_dir = {});
    // The central area's tabs: the slice and 3D views ("Slices"), a detector's boxes ("Detections").
    QTabWidget* centralTabs() const { return m_central_tabs; }
    DetectionView* detectionView() const { return m_detection_view; }
    // A finished run's charts and last evaluation, from its model_dir.
    bool openRun(const std::filesystem::path& model_dir);
    // Run ▸ Export Report…: asks where (default <model_dir>/report.html), then writes the run's HTML report
    // (report/run_report.hpp) off the GUI thread; reportExported or an error follows.
    void chooseReportFile(const std::filesystem::path& model_dir);
    void exportReport(const std::filesystem::path& model_dir, const std::filesystem::path& out);
    bool isExportingReport() const { return m_exporting_report; }
    // The run a model_dir's lock names when another process (or another run) is training in it: its
    // charts are reloaded every two seconds, read-only, until it ends. Empty when none is watched.
    const std::filesystem::path& watchedRun() const { return m_watched_run; }
    QMenu* recentExperimentsMenu() const { return m_recent_experiments_menu; }
    // Opens an experiment file; false (with the parser's message shown) when it cannot be used.
    bool openExperiment(const QString& path);
    // Writes the design into `path` (the experiment file with the edited fields replaced).
    bool saveExperiment(const QString& path);
    // The design as code for real hardware.
    QString exportSnippet(SnippetKind kind) const;
    // Shows the snippet in a dialog with Copy and Save buttons.
    void showExportDialog(SnippetKind kind);

signals:
    void reportExported(const QString& file, const QStringList& omissions);

protected:
    void closeEvent(QCloseEvent* event) override;
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private slots:
    void chooseImage();
    void chooseLabelMap();
    void saveImageAs();
    void saveLabelMapAs();
    void updateStatus();
    void applyLabelDescriptions(const std::vector<tessera::LabelDescription>& descriptions);
    void onHoveredVoxel(std::array<std::int64_t, 3> voxel);
    void onVolumeChanged();
    void onWindowLevelChanged();
    void onPresetChosen(int index);
    void rebuildRecentMenu();
    void rebuildRecentExperimentsMenu();
    void onDesignExperimentChanged();
    void onDesignChanged();
    void onPlannerLayoutChosen(std::int64_t replicas, std::vector<std::int64_t> pieces);
    void updateWindowTitle();

public slots:
    // View ▸ Reset Layout: the docks where a first start puts them (the arrangement is saved per user).
    void resetLayout();

private:
    void createRunActions();
    bool showStreamed(std::shared_ptr<const tessera::VolumeRegionReader> reader, const QString& path);
    bool openStreamedLabels(const QString& path);
    std::string runWithProgress(const QString& title, const QString& text,
                                const std::function<void(const std::function<bool(double)>&)>& pass);
    static std::shared_ptr<const tessera::VolumeRegionReader> reopenForViewing(std::shared_ptr<const tessera::VolumeRegionReader> pass_reader);
    // What the legend shows: every present label's name and colour.
    std::vector<tessera::LabelDescription> legendDescriptions() const;
    void sizeDocksByDefault();
    // Viewer first: with no experiment or run open, the design and run docks wait hidden (the views get
    // the window) and a line in the status bar says how to bring them; an experiment or a run brings
    // back those that were shown, where the user last put them.
    void waitWithDesignDocks();
    void bringBackDesignDocks();
    // A dock holding `content`; scroll: in a scroll area, so the panel's minimum size does not set the window's.
    QDockWidget* makeDock(const QString& title, const QString& object_name, QWidget* content, bool scroll);
    void createDesignDocks();
    void createRunDocks();
    void createDesignActions();
    bool confirmDiscardDesign();
    void createActions();
    void createDock();
    void showError(const QString& title, const QString& message);
    void showWarning(const QString& title, const QString& message);
    void showMessageBox(int icon, const QString& title, const QString& message);  // icon: QMessageBox::Icon
    void addRecentFile(const QString& path);
    void setLayoutFor2d(bool two_dimensional);
    // A RetinaNet design: the Detections tab previews the data's first held-out image with its objects
    // (new_experiment) and follows the partition grid with the anchors each tile owns.
    void updateDetectionDesign(bool new_experiment);

    ViewerModel* m_model;
    std::array<SliceView*, 3> m_slice_views{};
    std::array<QScrollBar*, 3> m_slice_bars{};
    std::array<QWidget*, 3> m_slice_panels{};
    QGridLayout* m_view_grid = nullptr;
    QTabWidget* m_central_tabs = nullptr;
    DetectionView* m_detection_view = nullptr;
    // A detection experiment's first held-out image, as its data made it for the Detections tab's preview
    // (the grid is drawn over it too when nothing else is open); empty for other experiments.
    std::shared_ptr<const tessera::Volume> m_detection_preview_image;
    VolumeView* m_volume_view = nullptr;
    LabelLegend* m_legend = nullptr;
    QLabel* m_status = nullptr;
    QLabel* m_image_info = nullptr;
    QComboBox* m_preset_box = nullptr;
    QDoubleSpinBox* m_window_box = nullptr;
    QDoubleSpinBox* m_level_box = nullptr;
    QMenu* m_recent_menu = nullptr;
    std::array<std::int64_t, 3> m_hovered{-1, -1, -1};
    QString m_last_error;
    QString m_last_warning;

    PartitionDesign* m_design = nullptr;
    ExperimentPanel* m_experiment_panel = nullptr;
    PartitionPanel* m_partition_panel = nullptr;
    PlannerPanel* m_planner_panel = nullptr;
    QMenu* m_recent_experiments_menu = nullptr;
    std::int64_t m_planned_cores = -1;  // the core budget the planner last swept
    RunController* m_run_controller = nullptr;
    RunPanel* m_run_panel = nullptr;
    RunCharts* m_run_charts = nullptr;
    QByteArray m_default_layout;  // saveState() of the docks as built
    QList<QDockWidget*> m_waiting_docks;  // hidden until an experiment or a run opens
    QLabel* m_waiting_hint = nullptr;
    QTimer* m_watch_timer = nullptr;
    std::filesystem::path m_watched_run;
    // The step trace last shown for a run trained elsewhere (its model_dir and the file's time).
    std::filesystem::path m_trace_dir;
    std::filesystem::file_time_type m_trace_written{};
    void showRecordedStep(const std::filesystem::path& model_dir);
    void watchRun(const std::filesystem::path& model_dir);
    void refreshWatchedRun();
    EquivalenceView* m_equivalence_view = nullptr;
    std::int64_t m_run_capacity = 0;     // the live run's core memory capacity
    QString m_current_run;               // the run the charts follow live
    bool m_overlay_chosen = false;       // the user picked an overlay source: keep it
    bool m_exporting_report = false;     // a report is being written (one at a time)
};

}  // namespace tessera::ui
