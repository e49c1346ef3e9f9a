// PartitionDesign: the experiment being designed in the studio — its partition grid over the model
// input, what every core holds and costs under it, and the undo history of every edit. No widgets.
//
// The grid lives in the model input's coordinates (spatial axes outermost first: D, H, W or H, W).
// Views draw it over the loaded volume by scaling each axis to the volume's extent, so a 256³ input
// designed over a 512×512×300 scan shows where each core's share of the input falls.
//
//   PartitionDesign design;
//   design.loadExperiment(load_experiment("unet3d_ct_256_16cores.json"), text);
//   design.setPieces({2, 2, 4});                // even split: 16 cores, pushes an undo command
//   design.moveBoundary(0, 1, 96);              // uneven: the first D cut at 96
//   design.cores()[3].memory_bytes;             // per-core memory on the device (cost model)
//   design.undoStack()->undo();
#pragma once

#include "cost/device.hpp"
#include "experiment/experiment.hpp"
#include "partition/tiling.hpp"

#include <QObject>
#include <QString>

#include <memory>
#include <optional>
#include <vector>

class QUndoStack;

namespace tessera::ui {

struct CoreCost {
    std::int64_t core = 0;
    std::vector<partition::Interval> owned;  // per spatial axis, in input voxels
    std::int64_t memory_bytes = 0;           // on the device (XLA-like estimate)
    bool fits = true;
    double compute_seconds = 0;              // busy time of the predicted step
};

struct LayerHalo {
    int node = -1;
    QString name;                            // "enc1.conv2"
    QString op;                              // "Conv"
    std::vector<std::int64_t> extent;        // the layer input's spatial extents
    std::vector<std::int64_t> halo_width;    // rows it reads from each neighbour, per axis (at its own resolution)
    double scale = 1;                        // input voxels per voxel of this layer
};

class PartitionDesign : public QObject {
    Q_OBJECT
public:
    explicit PartitionDesign(QObject* parent = nullptr);
    ~PartitionDesign() override;

    // A parsed experiment and the JSON it came from (kept so saving changes only what was edited).
    // Clears the undo history and marks the design unmodified. Throws tessera::Error when the
    // experiment's model cannot be built.
    void loadExperiment(const experiment::Experiment& experiment, const std::string& json_text);
    // An edit of the experiment's fields (the experiment panel's): the whole new JSON text, one undo
    // step. Returns false with lastError() (the parser's message, with the JSON path) when invalid.
    bool setExperimentText(const std::string& json_text, const QString& description);
    // Marks the current state as saved.
    void setSaved();
    bool hasExperiment() const { return m_experiment.has_value(); }
    const experiment::Experiment& experiment() const { return *m_experiment; }
    // The experiment's JSON with the current design applied (what Save writes).
    std::string experimentText() const;
    const QString& path() const { return m_path; }
    void setPath(const QString& path) { m_path = path; }
    bool isModified() const;

    // ---- the design ----
    const partition::SpatialGrid& grid() const { return m_grid; }
    std::vector<std::int64_t> pieces() const { return m_grid.pieces_per_axis(); }
    std::int64_t replicas() const { return m_replicas; }
    const std::vector<std::int64_t>& alignment() const { return m_alignment; }  // per axis, input voxels
    Shape inputExtent() const;  // spatial extents of the model input
    // TPUConfig's view of the design: "[[1, 2, 2, 4, 1], null]" and the cores per replica.
    QString partitionDimsText() const;
    std::int64_t coresPerReplica() const { return m_grid.num_cores(); }

    // Edits. Each is one undo step; an edit that changes nothing pushes nothing. They return false
    // and set lastError() (the engine's message) when the design would be invalid, changing nothing.
    bool setPieces(const std::vector<std::int64_t>& pieces);
    bool setReplicas(std::int64_t replicas);
    // Both at once (a planner row): one undo step.
    bool setLayout(std::int64_t replicas, const std::vector<std::int64_t>& pieces);
    // Moves cut `index` (1 … pieces − 1) of `axis` to `position` (snapped to the alignment).
    // During a drag, pass merge = true: consecutive moves of one line become one undo step.
    bool moveBoundary(int axis, int index, std::int64_t position, bool merge = false);
    // Ends a drag: the next merged move starts a new undo step.
    void finishDrag();
    // True between a merged moveBoundary and finishDrag: views that are slow to redraw (the 3D view)
    // may wait for dragFinished().
    bool isDragging() const { return m_dragging; }
    // Parses "[1, 2, 2, 1]" or "[[1, 2, 2, 1], null]" (channels last, as TPUConfig).
    bool setPartitionText(const QString& text);
    const QString& lastError() const { return m_last_error; }
    QUndoStack* undoStack() const { return m_undo; }

    // ---- what the design costs (recomputed after every change) ----
    const std::vector<CoreCost>& cores() const { return m_cores; }
    double predictedStepSeconds() const { return m_step_seconds; }
    const cost::Device& device() const { return m_device; }
    const std::vector<LayerHalo>& layers() const { return m_layers; }  // layers with halos, in order
    int selectedLayer() const { return m_selected_layer; }              // index into layers(), −1 none
    void setSelectedLayer(int index);
    // Core `core`'s input region for the selected layer (owned tile plus halos), in input voxels.
    std::vector<partition::Interval> neededRegion(std::int64_t core) const;

    // Applied by undo commands (and setters): replace the grid / replicas, or the whole experiment,
    // without a new command.
    void applyGrid(const partition::SpatialGrid& grid, std::int64_t replicas);
    void applyExperimentText(const std::string& json_text);

signals:
    void experimentChanged();  // a new experiment (the model and input changed)
    void designChanged();      // the grid or replicas changed; costs are recomputed
    void layerChanged();
    void dragFinished();

private:
    void adopt(const experiment::Experiment& experiment, const std::string& json_text);
    void recompute();
    bool pushGrid(const partition::SpatialGrid& grid, std::int64_t replicas, const QString& text, int merge_id);

    std::optional<experiment::Experiment> m_experiment;
    std::string m_json_text;
    QString m_path;
    std::unique_ptr<graph::Graph> m_model;
    partition::SpatialGrid m_grid;
    std::int64_t m_replicas = 1;
    std::vector<std::int64_t> m_alignment;
    cost::Device m_device;
    std::vector<CoreCost> m_cores;
    std::unique_ptr<partition::TilingPlan> m_plan;
    double m_step_seconds = 0;
    std::vector<LayerHalo> m_layers;
    int m_selected_layer = -1;
    QString m_last_error;
    QUndoStack* m_undo;
    int m_drag_serial = 0;
    bool m_dragging = false;
};

}  // namespace tessera::ui
