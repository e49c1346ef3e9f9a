#include "model/partition_design.hpp"

#include "core/error.hpp"
#include "cost/memory_model.hpp"
#include "cost/step_simulation.hpp"
#include "experiment/experiment_edit.hpp"

#include <QUndoCommand>
#include <QUndoStack>

#include <algorithm>
#include <optional>
#include <cmath>

namespace tessera::ui {

namespace {

// One edit of the grid: the whole grid before and after, so undo restores uneven cuts exactly.
class GridCommand final : public QUndoCommand {
public:
    GridCommand(PartitionDesign* design, partition::SpatialGrid before_grid, std::int64_t before_replicas,
                partition::SpatialGrid after_grid, std::int64_t after_replicas, const QString& text, int merge_id)
        : QUndoCommand(text), m_design(design), m_before(std::move(before_grid)), m_after(std::move(after_grid)),
          m_before_replicas(before_replicas), m_after_replicas(after_replicas), m_merge_id(merge_id) {}

    void undo() override { m_design->applyGrid(m_before, m_before_replicas); }
    void redo() override { m_design->applyGrid(m_after, m_after_replicas); }
    int id() const override { return m_merge_id; }
    // A drag of one grid line is one step, however many mouse moves it took.
    bool mergeWith(const QUndoCommand* other) override {
        const auto* next = static_cast<const GridCommand*>(other);
        if (next->m_merge_id != m_merge_id) return false;
        m_after = next->m_after;
        m_after_replicas = next->m_after_replicas;
        return true;
    }

private:
    PartitionDesign* m_design;
    partition::SpatialGrid m_before, m_after;
    std::int64_t m_before_replicas, m_after_replicas;
    int m_merge_id;
};

// An edit of the experiment's fields: the whole text before and after.
class ExperimentTextCommand final : public QUndoCommand {
public:
    ExperimentTextCommand(PartitionDesign* design, std::string before, std::string after, const QString& text)
        : QUndoCommand(text), m_design(design), m_before(std::move(before)), m_after(std::move(after)) {}
    void undo() override { m_design->applyExperimentText(m_before); }
    void redo() override { m_design->applyExperimentText(m_after); }

private:
    PartitionDesign* m_design;
    std::string m_before, m_after;
};

QString pieces_text(const std::vector<std::int64_t>& pieces) {
    QStringList parts;
    for (std::int64_t p : pieces) parts << QString::number(p);
    return parts.join(QStringLiteral("×"));
}

bool is_even(const partition::SpatialGrid& grid, const Shape& extent) {
    Shape input{1, 1};
    input.insert(input.end(), extent.begin(), extent.end());
    const partition::SpatialGrid even = partition::SpatialGrid::even(input, grid.pieces_per_axis());
    return even.boundaries == grid.boundaries;
}

}  // namespace

PartitionDesign::PartitionDesign(QObject* parent) : QObject(parent), m_undo(new QUndoStack(this)) {}

PartitionDesign::~PartitionDesign() = default;

void PartitionDesign::loadExperiment(const experiment::Experiment& e, const std::string& json_text) {
    adopt(e, json_text);
    m_undo->clear();
    m_undo->setClean();
}

void PartitionDesign::setSaved() {
    // What was saved is the design's text: later edits start from it.
    if (m_experiment) m_json_text = experimentText();
    m_undo->setClean();
}

bool PartitionDesign::setExperimentText(const std::string& json_text, const QString& description) {
    if (!m_experiment) {
        m_last_error = tr("Open or create an experiment first.");
        return false;
    }
    try {
        const experiment::Experiment parsed = experiment::parse_experiment(json_text, m_experiment->origin);
        experiment::build_model(parsed, experiment::replica_input_shape(parsed));
        cost::load_device_preset(parsed.device);
    } catch (const Error& error) {
        m_last_error = QString::fromUtf8(error.what());
        return false;
    }
    m_last_error.clear();
    const std::string before = experimentText();
    if (before == json_text) return true;
    m_undo->push(new ExperimentTextCommand(this, before, json_text, description));
    return true;
}

void PartitionDesign::applyExperimentText(const std::string& json_text) {
    experiment::Experiment parsed = experiment::parse_experiment(json_text, m_experiment ? m_experiment->origin : "experiment.json");
    if (m_experiment) experiment::place_in_directory(parsed, m_experiment->directory);
    adopt(parsed, json_text);
}

void PartitionDesign::adopt(const experiment::Experiment& e, const std::string& json_text) {
    auto model = std::make_unique<graph::Graph>(experiment::build_model(e, experiment::replica_input_shape(e)));
    m_device = cost::load_device_preset(e.device);
    m_experiment = e;
    m_json_text = json_text;
    m_model = std::move(model);
    m_alignment = partition::boundary_alignment(*m_model);
    m_replicas = e.partition.num_replicas;
    m_grid = experiment::tile_grid(e);

    // The layers whose inputs reach across tile borders, with the rows they read from a neighbour.
    const QString selected_name = m_selected_layer >= 0 ? m_layers[static_cast<std::size_t>(m_selected_layer)].name : QString();
    m_layers.clear();
    // Found on a split in two along every axis; a model too deep for that (a RetinaNet's P7 under 256²)
    // falls back to the experiment's own grid, and a single core has no halos to list.
    std::optional<partition::TilingPlan> plan;
    try {
        plan.emplace(*m_model, partition::SpatialGrid::even(experiment::replica_input_shape(e), std::vector<std::int64_t>(e.size.size(), 2)));
    } catch (const Error&) {
        if (m_grid.num_cores() > 1) plan.emplace(*m_model, m_grid);
    }
    const Shape input = inputExtent();
    for (const graph::Node& node : m_model->nodes()) {
        if (!plan) break;
        const partition::TilingPlan& widest = *plan;
        if (node.inputs.empty()) continue;
        const Shape& in_shape = m_model->node(node.inputs[0]).output_shape;
        if (in_shape.size() != input.size() + 2) continue;  // after global pooling
        std::vector<std::int64_t> halo(input.size(), 0);
        for (std::int64_t core = 0; core < widest.num_cores(); ++core) {
            const partition::NodeTile& tile = widest.tile(node.id, core);
            for (std::size_t a = 0; a < halo.size() && a < tile.halo_before.size(); ++a) {
                halo[a] = std::max({halo[a], tile.halo_before[a], tile.halo_after[a]});
            }
        }
        if (std::all_of(halo.begin(), halo.end(), [](std::int64_t h) { return h == 0; })) continue;
        LayerHalo layer;
        layer.node = node.id;
        layer.name = QString::fromStdString(node.name);
        layer.op = QString::fromUtf8(graph::op_name(node.kind).data(), static_cast<qsizetype>(graph::op_name(node.kind).size()));
        layer.extent.assign(in_shape.begin() + 2, in_shape.end());
        layer.halo_width = halo;
        layer.scale = static_cast<double>(input[0]) / static_cast<double>(layer.extent[0]);
        m_layers.push_back(std::move(layer));
    }
    m_selected_layer = m_layers.empty() ? -1 : 0;
    for (std::size_t i = 0; i < m_layers.size(); ++i) {
        if (m_layers[i].name == selected_name) m_selected_layer = static_cast<int>(i);
    }
    recompute();
    emit experimentChanged();
    emit designChanged();
    emit layerChanged();
}

Shape PartitionDesign::inputExtent() const {
    return m_experiment ? Shape(m_experiment->size.begin(), m_experiment->size.end()) : Shape{};
}

QString PartitionDesign::partitionDimsText() const {
    QStringList dims{QStringLiteral("1")};
    for (std::int64_t p : pieces()) dims << QString::number(p);
    dims << QStringLiteral("1");
    return QStringLiteral("[[%1], null]").arg(dims.join(QStringLiteral(", ")));
}

bool PartitionDesign::isModified() const { return !m_undo->isClean(); }

std::string PartitionDesign::experimentText() const {
    if (!m_experiment) return {};
    experiment::PartitionEdit edit = experiment::partition_edit_of(*m_experiment);
    edit.pieces = pieces();
    edit.num_cores_per_replica = m_grid.num_cores();
    edit.num_replicas = m_replicas;
    // Keep the per-replica batch: more replicas train a larger global batch, as TPUEstimator does.
    edit.global_batch = m_experiment->global_batch / m_experiment->partition.num_replicas * m_replicas;
    if (!is_even(m_grid, inputExtent())) edit.uneven = m_grid;
    else edit.uneven.reset();
    return experiment::apply_partition_edit(m_json_text, edit);
}

bool PartitionDesign::pushGrid(const partition::SpatialGrid& grid, std::int64_t replicas, const QString& text, int merge_id) {
    if (!m_experiment) {
        m_last_error = tr("Open or create an experiment first.");
        return false;
    }
    if (grid.boundaries == m_grid.boundaries && replicas == m_replicas) return true;
    // The engine's rules decide: the edited experiment must parse (partition dims, batch, alignment).
    const partition::SpatialGrid before = m_grid;
    const std::int64_t before_replicas = m_replicas;
    m_grid = grid;
    m_replicas = replicas;
    try {
        experiment::parse_experiment(experimentText(), m_experiment->origin);
    } catch (const Error& error) {
        m_grid = before;
        m_replicas = before_replicas;
        m_last_error = QString::fromUtf8(error.what());
        return false;
    }
    m_grid = before;
    m_replicas = before_replicas;
    m_last_error.clear();
    m_undo->push(new GridCommand(this, before, before_replicas, grid, replicas, text, merge_id));
    return true;
}

bool PartitionDesign::setPieces(const std::vector<std::int64_t>& pieces) { return setLayout(m_replicas, pieces); }

bool PartitionDesign::setLayout(std::int64_t replicas, const std::vector<std::int64_t>& pieces) {
    const Shape extent = inputExtent();
    if (pieces.size() != extent.size()) {
        m_last_error = tr("Expected %1 piece counts (one per spatial axis), got %2.").arg(extent.size()).arg(pieces.size());
        return false;
    }
    for (std::size_t a = 0; a < pieces.size(); ++a) {
        if (pieces[a] < 1 || pieces[a] > extent[a] / std::max<std::int64_t>(m_alignment[a], 1)) {
            m_last_error = tr("Axis %1 of %2 voxels can be cut into at most %3 pieces (boundaries on multiples of %4), got %5.")
                               .arg(a)
                               .arg(extent[a])
                               .arg(extent[a] / std::max<std::int64_t>(m_alignment[a], 1))
                               .arg(m_alignment[a])
                               .arg(pieces[a]);
            return false;
        }
    }
    partition::SpatialGrid grid;
    try {
        Shape input{1, 1};
        input.insert(input.end(), extent.begin(), extent.end());
        grid = partition::SpatialGrid::aligned(input, pieces, m_alignment);
    } catch (const Error& error) {
        m_last_error = QString::fromUtf8(error.what());
        return false;
    }
    if (replicas < 1) {
        m_last_error = tr("Expected at least one replica, got %1.").arg(replicas);
        return false;
    }
    const QString text = replicas == m_replicas ? tr("Split %1").arg(pieces_text(pieces))
                                                : tr("%1 replicas × split %2").arg(replicas).arg(pieces_text(pieces));
    return pushGrid(grid, replicas, text, -1);
}

bool PartitionDesign::setReplicas(std::int64_t replicas) {
    if (replicas < 1) {
        m_last_error = tr("Expected at least one replica, got %1.").arg(replicas);
        return false;
    }
    return pushGrid(m_grid, replicas, tr("%1 replicas").arg(replicas), -1);
}

bool PartitionDesign::moveBoundary(int axis, int index, std::int64_t position, bool merge) {
    if (axis < 0 || axis >= static_cast<int>(m_grid.boundaries.size())) return false;
    auto& cuts = m_grid.boundaries[static_cast<std::size_t>(axis)];
    if (index < 1 || index >= static_cast<int>(cuts.size()) - 1) return false;
    const std::int64_t step = std::max<std::int64_t>(m_alignment[static_cast<std::size_t>(axis)], 1);
    // Snap to the alignment and keep at least one aligned unit between neighbours.
    const std::int64_t low = cuts[static_cast<std::size_t>(index) - 1] + step;
    const std::int64_t high = cuts[static_cast<std::size_t>(index) + 1] - step;
    if (low > high) return false;
    const std::int64_t snapped = std::clamp(static_cast<std::int64_t>(std::llround(static_cast<double>(position) / static_cast<double>(step))) * step,
                                            low, high);
    partition::SpatialGrid grid = m_grid;
    grid.boundaries[static_cast<std::size_t>(axis)][static_cast<std::size_t>(index)] = snapped;
    const int merge_id = merge ? (1 << 20) + (m_drag_serial % 1000) * 1024 + axis * 64 + index : -1;
    m_dragging = merge;
    return pushGrid(grid, m_replicas, tr("Move cut %1 of axis %2 to %3").arg(index).arg(axis).arg(snapped), merge_id);
}

bool PartitionDesign::setPartitionText(const QString& text) {
    // The experiment file's JSON (null) and TPUConfig's Python (None) are both accepted.
    QString normalised = text.trimmed();
    normalised.replace(QStringLiteral("null"), QStringLiteral("None"));
    if (!normalised.startsWith(QStringLiteral("[["))) normalised = QStringLiteral("[%1, None]").arg(normalised);
    std::vector<std::int64_t> dims;
    try {
        const auto [features, labels] = partition::parse_input_partition_dims(normalised.toStdString());
        (void)labels;
        if (features.is_dict() || features.single().is_none()) {
            dims.assign(inputExtent().size() + 2, 1);
        } else {
            dims = *features.single().dims;
        }
    } catch (const Error& error) {
        m_last_error = QString::fromUtf8(error.what());
        return false;
    }
    const Shape extent = inputExtent();
    if (dims.size() != extent.size() + 2 || dims.front() != 1 || dims.back() != 1) {
        m_last_error = tr("Expected input_partition_dims over %1: [1, %2, 1] (batch and channels not split), got %3.")
                           .arg(extent.size() == 3 ? QStringLiteral("NDHWC") : QStringLiteral("NHWC"))
                           .arg(extent.size() == 3 ? QStringLiteral("d, h, w") : QStringLiteral("h, w"))
                           .arg(text.trimmed());
        return false;
    }
    return setPieces(std::vector<std::int64_t>(dims.begin() + 1, dims.end() - 1));
}

void PartitionDesign::finishDrag() {
    ++m_drag_serial;
    if (!m_dragging) return;
    m_dragging = false;
    emit dragFinished();
}

void PartitionDesign::applyGrid(const partition::SpatialGrid& grid, std::int64_t replicas) {
    m_grid = grid;
    m_replicas = replicas;
    recompute();
    emit designChanged();
}

void PartitionDesign::setSelectedLayer(int index) {
    if (index < -1 || index >= static_cast<int>(m_layers.size()) || index == m_selected_layer) return;
    m_selected_layer = index;
    emit layerChanged();
}

std::vector<partition::Interval> PartitionDesign::neededRegion(std::int64_t core) const {
    if (!m_plan || m_selected_layer < 0 || core >= m_plan->num_cores()) return {};
    const LayerHalo& layer = m_layers[static_cast<std::size_t>(m_selected_layer)];
    const partition::NodeTile& tile = m_plan->tile(layer.node, core);
    std::vector<partition::Interval> region;
    const Shape input = inputExtent();
    for (std::size_t a = 0; a < tile.needed.size(); ++a) {
        const double scale = static_cast<double>(input[a]) / static_cast<double>(layer.extent[a]);
        region.push_back({static_cast<std::int64_t>(std::floor(static_cast<double>(tile.needed[a].begin) * scale)),
                          static_cast<std::int64_t>(std::ceil(static_cast<double>(tile.needed[a].end) * scale))});
    }
    return region;
}

void PartitionDesign::recompute() {
    m_cores.clear();
    m_plan.reset();
    m_step_seconds = 0;
    if (!m_experiment || !m_model) return;
    m_plan = std::make_unique<partition::TilingPlan>(*m_model, m_grid);
    const cost::CostModel costs(m_device);
    cost::SimulationOptions options;
    options.precision = m_experiment->precision;
    options.optimizer_slots = experiment::optimizer_slots(*m_experiment);
    options.record_timeline = false;
    const cost::StepPrediction prediction = cost::predict_step(*m_model, *m_plan, m_replicas, costs, options);
    m_step_seconds = prediction.step_seconds;
    for (std::int64_t core = 0; core < m_plan->num_cores(); ++core) {
        CoreCost c;
        c.core = core;
        const auto index = m_plan->grid_index(core);
        for (std::size_t a = 0; a < index.size(); ++a) {
            const auto& cuts = m_grid.boundaries[a];
            c.owned.push_back({cuts[static_cast<std::size_t>(index[a])], cuts[static_cast<std::size_t>(index[a]) + 1]});
        }
        const cost::CoreMemory memory =
            core < static_cast<std::int64_t>(prediction.memory.size())
                ? prediction.memory[static_cast<std::size_t>(core)]
                : cost::estimate_core_memory(*m_model, *m_plan, core, options.precision, options.optimizer_slots);
        c.memory_bytes = memory.total();
        c.fits = c.memory_bytes <= m_device.memory_per_core;
        if (core < static_cast<std::int64_t>(prediction.cores.size())) c.compute_seconds = prediction.cores[static_cast<std::size_t>(core)].compute_seconds;
        m_cores.push_back(std::move(c));
    }
}

}  // namespace tessera::ui
