#include "widgets/equivalence_view.hpp"

#include "core/error.hpp"
#include "core/random.hpp"
#include "model/gui_mailbox.hpp"
#include "networks/models.hpp"

#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QCursor>
#include <QEvent>
#include <QFontMetricsF>
#include <QHBoxLayout>
#include <QHelpEvent>
#include <QLabel>
#include <QLineSeries>
#include <QLinearGradient>
#include <QLogValueAxis>
#include <QPainter>
#include <QProgressBar>
#include <QScatterSeries>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QSplitter>
#include <QToolTip>
#include <QVBoxLayout>
#include <QValueAxis>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

namespace tessera::ui {

namespace {

constexpr double tiny = std::numeric_limits<float>::min();
// An experiment's images above this many voxels are compared on a smaller input…
constexpr std::int64_t max_full_size_voxels = std::int64_t{1} << 20;
// …of about this many voxels per image.
constexpr double scaled_voxels = 16384.0;
constexpr std::int64_t max_batch = 2;
constexpr std::uint64_t batch_seed = 100;  // the images; the weights take the model's seed

// "3.6e-6": one significant decimal, the exponent without padding.
QString sci(double value, int decimals = 1) {
    if (value == 0) return QStringLiteral("0");
    if (std::isnan(value)) return QStringLiteral("NaN");
    if (std::isinf(value)) return QStringLiteral("∞");
    const QString text = QString::number(value, 'e', decimals);
    const auto e = text.indexOf(QLatin1Char('e'));
    return QStringLiteral("%1e%2").arg(text.left(e)).arg(text.mid(e + 1).toInt());
}

QString shapeText(const Shape& shape) {
    QStringList parts;
    for (std::int64_t extent : shape) parts << QString::number(extent);
    return QStringLiteral("[%1]").arg(parts.join(QStringLiteral(", ")));
}

QString extentsText(const Shape& shape, std::size_t from) {
    QStringList parts;
    for (std::size_t axis = from; axis < shape.size(); ++axis) parts << QString::number(shape[axis]);
    return parts.join(QStringLiteral("×"));
}

// Viridis, five stops: dark blue (small) → yellow (large).
QColor rampColor(double t) {
    static const QColor stops[] = {QColor(0x44, 0x01, 0x54), QColor(0x3b, 0x52, 0x8b), QColor(0x21, 0x91, 0x8c),
                                   QColor(0x5e, 0xc9, 0x62), QColor(0xfd, 0xe7, 0x25)};
    t = std::clamp(t, 0.0, 1.0) * 4.0;
    const int i = std::min(3, static_cast<int>(t));
    const double f = t - i;
    const QColor& a = stops[i];
    const QColor& b = stops[i + 1];
    return QColor::fromRgbF(static_cast<float>(a.redF() + (b.redF() - a.redF()) * f),
                            static_cast<float>(a.greenF() + (b.greenF() - a.greenF()) * f),
                            static_cast<float>(a.blueF() + (b.blueF() - a.blueF()) * f));
}

const QColor identical_color(0xd4, 0xd4, 0xd4);
const QColor activation_color(0x4a, 0x7e, 0xbb);
const QColor gradient_color(0xdd, 0x6b, 0x20);
const QColor tolerance_color(0xc6, 0x28, 0x28);

// What the worker compares: a built-in model or an experiment, and the layout chosen in the view.
struct ComparisonJob {
    quint64 request = 0;
    std::optional<experiment::Experiment> experiment;
    EquivalenceView::BuiltInModel built_in = EquivalenceView::BuiltInModel::UNet2D;
    std::vector<std::int64_t> pieces;
    graph::Precision precision = graph::Precision::F32;
    int steps = 2;
    bool baseline = false;
};

struct ComparisonSetup {
    graph::Graph model;
    mesh::MeshConfig mesh;
    train::TrainerConfig config;
    Tensor images;  // [N, C, (D,) H, W]
    Tensor labels;  // [N, (D,) H, W] or [N]
    std::uint64_t seed = 1;
    QString source;
    QStringList notes;
};

// Normal images and labels that follow them (segmentation), or a class per image (classification).
void makeBatch(ComparisonSetup& setup) {
    const Shape& input = setup.model.node(setup.model.input_node()).output_shape;
    const Shape& output = setup.model.node(setup.model.output_node()).output_shape;
    const std::int64_t classes = output[1];
    SeededRandom random(batch_seed);
    setup.images = Tensor::empty(input, DType::F32);
    float* pixels = setup.images.data<float>();
    for (std::int64_t i = 0; i < setup.images.num_elements(); ++i) pixels[i] = static_cast<float>(random.normal());
    Shape label_shape{input[0]};
    const bool segmentation = output.size() > 2;
    if (segmentation) label_shape.insert(label_shape.end(), input.begin() + 2, input.end());
    setup.labels = Tensor::empty(label_shape, DType::I32);
    std::int32_t* labels = setup.labels.data<std::int32_t>();
    const std::int64_t per_image = setup.labels.num_elements() / input[0];
    const std::int64_t pixels_per_image = setup.images.num_elements() / input[0];
    for (std::int64_t i = 0; i < setup.labels.num_elements(); ++i) {
        const float v = segmentation ? pixels[(i / per_image) * pixels_per_image + i % per_image] : pixels[i * pixels_per_image];
        const auto bucket = static_cast<std::int64_t>(std::floor((v + 2.0f) / 4.0f * static_cast<float>(classes)));
        labels[i] = static_cast<std::int32_t>(std::clamp<std::int64_t>(bucket, 0, classes - 1));
    }
}

ComparisonSetup prepareBuiltIn(const ComparisonJob& job) {
    ComparisonSetup setup;
    Shape input;
    if (job.built_in == EquivalenceView::BuiltInModel::UNet2D) {
        input = {2, 1, 64, 64};
        setup.model = networks::make_unet({.depth = 3, .base_width = 8, .num_classes = 3}, input);
        setup.source = QObject::tr("the built-in 2D U-Net (depth 3, width 8)");
    } else {
        input = {1, 1, 16, 16, 16};
        setup.model = networks::make_unet({.depth = 3, .base_width = 4, .num_classes = 2}, input);
        setup.source = QObject::tr("the built-in 3D U-Net (depth 3, width 4)");
    }
    const std::size_t rank = input.size() - 2;
    TESSERA_CHECK(job.pieces.size() == rank, "expected pieces for " << rank << " spatial axes, got " << job.pieces.size());
    setup.mesh.grid = partition::SpatialGrid::even(input, job.pieces);
    setup.config.optimizer = {.kind = train::OptimizerKind::Sgd, .momentum = 0.9};
    setup.config.schedule = {.kind = train::ScheduleKind::Constant, .learning_rate = 0.02};
    setup.config.loss = train::LossKind::CrossEntropyAndDice;
    setup.config.precision = job.precision;
    if (job.precision == graph::Precision::F16) setup.config.loss_scale.kind = train::LossScaleKind::Dynamic;
    setup.seed = 7;
    return setup;
}

ComparisonSetup prepareExperiment(const ComparisonJob& job) {
    const experiment::Experiment& e = *job.experiment;
    TESSERA_CHECK(e.model.kind != experiment::ModelKind::RetinaNet,
                  "this view compares segmentation and classification steps, which take label maps or labels; a RetinaNet "
                  "trains on boxes, and its partitioned steps are checked against one core by the engine's equivalence "
                  "suite (the retinanet layouts of test_engine_mesh)");
    ComparisonSetup setup;
    setup.source = QObject::tr("the experiment “%1”").arg(QString::fromStdString(e.name));
    const Shape replica = experiment::replica_input_shape(e);
    const std::size_t rank = replica.size() - 2;
    TESSERA_CHECK(job.pieces.size() == rank, "expected pieces for " << rank << " spatial axes, got " << job.pieces.size());
    if (e.partition.num_replicas > 1) {
        setup.notes << QObject::tr("one replica of %1 (a single core reproduces one replica's batch norm and update)")
                           .arg(e.partition.num_replicas);
    }
    Shape input = replica;
    input[0] = std::min(replica[0], max_batch);
    if (input[0] < replica[0]) setup.notes << QObject::tr("batch %1 of the replica's %2").arg(input[0]).arg(replica[0]);

    std::int64_t voxels = 1;
    for (std::size_t axis = 2; axis < replica.size(); ++axis) voxels *= replica[axis];
    const bool scaled = voxels > max_full_size_voxels;
    if (scaled) {
        // The same rank at about scaled_voxels, every extent a whole number of aligned pieces.
        Shape one = replica;
        one[0] = 1;
        const std::vector<std::int64_t> alignment = partition::boundary_alignment(experiment::build_model(e, one));
        const double factor = std::pow(scaled_voxels / static_cast<double>(voxels), 1.0 / static_cast<double>(rank));
        for (std::size_t axis = 0; axis < rank; ++axis) {
            const std::int64_t unit = job.pieces[axis] * alignment[axis];
            const auto wanted = static_cast<std::int64_t>(static_cast<double>(replica[axis + 2]) * factor);
            input[axis + 2] = std::min(replica[axis + 2], std::max(unit, wanted / unit * unit));
        }
        setup.notes << QObject::tr("scaled down: its %1 images (%2 M voxels) are compared at %3, cut evenly")
                           .arg(extentsText(replica, 2), QString::number(static_cast<double>(voxels) / 1e6, 'f', 1),
                                extentsText(input, 2));
    }
    setup.model = experiment::build_model(e, input);
    const bool own_layout = job.pieces == experiment::spatial_pieces(e);
    setup.mesh.grid = own_layout && !scaled ? experiment::tile_grid(e) : partition::SpatialGrid::even(input, job.pieces);
    setup.config = experiment::trainer_config(e);
    setup.config.precision = job.precision;
    if (job.precision == graph::Precision::F16 && setup.config.loss_scale.kind == train::LossScaleKind::None) {
        setup.config.loss_scale.kind = train::LossScaleKind::Dynamic;
    }
    setup.seed = e.training.seed;
    return setup;
}

}  // namespace

// ---- the worker ---------------------------------------------------------------------------------------------

// Runs comparisons off the GUI thread, as PlannerWorker runs sweeps: a job handed over under a mutex, a
// newer one stops the running comparison between its stages, destruction aborts and joins. The result
// waits in the worker until the GUI thread takes it (a copy leaves, nothing is shared); the signals are
// emitted on the GUI thread through a GuiMailbox.
class EquivalenceWorker : public QObject {
    Q_OBJECT
public:
    explicit EquivalenceWorker(QObject* parent) : QObject(parent), m_mailbox(new GuiMailbox(this)) {}
    ~EquivalenceWorker() override {
        {
            const std::lock_guard lock(m_mutex);
            m_abort = true;
            m_stop = true;
        }
        m_condition.notify_one();
        if (m_thread.joinable()) m_thread.join();
    }

    quint64 compare(ComparisonJob job) {
        const std::lock_guard lock(m_mutex);
        job.request = ++m_next_request;
        m_job = std::move(job);
        m_stop = true;  // the running comparison (if any) ends at its next stage
        if (!m_thread.joinable()) m_thread = std::thread([this] { run(); });
        else m_condition.notify_one();
        return m_next_request;
    }

    struct Result {
        mesh::EquivalenceReport report;
        QString source;
        QString note;
    };
    std::optional<Result> takeResult(quint64 request) {
        const std::lock_guard lock(m_mutex);
        if (m_result_request != request) return std::nullopt;
        std::optional<Result> result = std::move(m_result);
        m_result.reset();
        return result;
    }

signals:  // emitted on the GUI thread
    void progress(quint64 request, int done, int total);
    void compared(quint64 request);
    void failed(quint64 request, QString message);

private:
    void postProgress(quint64 request, int done, int total) {
        m_mailbox->post([this, request, done, total] { emit progress(request, done, total); });
    }

    void run() {
        scheduleThisThreadAsBatch();
        for (;;) {
            ComparisonJob job;
            {
                std::unique_lock lock(m_mutex);
                m_condition.wait(lock, [this] { return m_job || m_abort; });
                if (m_abort) return;
                job = std::move(*m_job);
                m_job.reset();
                m_stop = false;
            }
            try {
                ComparisonSetup setup = job.experiment ? prepareExperiment(job) : prepareBuiltIn(job);
                makeBatch(setup);
                mesh::EquivalenceOptions options;
                options.steps = job.steps;
                options.seed = setup.seed;
                options.one_tile_baseline = job.baseline;
                options.stop = &m_stop;
                const quint64 request = job.request;
                options.on_progress = [this, request](int done, int total) { postProgress(request, done, total); };
                postProgress(request, 0, (job.baseline ? 3 : 2) * job.steps + 1);
                Result result{mesh::compare_with_single_core(setup.model, setup.mesh, setup.config, setup.images, setup.labels, options),
                              setup.source, setup.notes.join(QStringLiteral("; "))};
                {
                    const std::lock_guard lock(m_mutex);
                    m_result = std::move(result);
                    m_result_request = request;
                }
                m_mailbox->post([this, request] { emit compared(request); });
            } catch (const std::exception& error) {
                m_mailbox->post([this, request = job.request, message = QString::fromUtf8(error.what())] {
                    emit failed(request, message);
                });
            }
        }
    }

    GuiMailbox* m_mailbox;
    std::mutex m_mutex;
    std::condition_variable m_condition;
    // Guarded by m_mutex:
    std::optional<ComparisonJob> m_job;
    std::optional<Result> m_result;
    quint64 m_result_request = 0;
    quint64 m_next_request = 0;
    bool m_abort = false;
    std::atomic<bool> m_stop{false};  // read by the comparison between its stages
    std::thread m_thread;
};

// ---- the tile map -------------------------------------------------------------------------------------------

EquivalenceTileMap::EquivalenceTileMap(QWidget* parent) : QWidget(parent) {
    setMouseTracking(true);
    setToolTip(tr("Each tile of the model input, coloured by the largest relative difference inside it; hover a tile for its numbers"));
}

QSize EquivalenceTileMap::sizeHint() const { return {460, 400}; }
QSize EquivalenceTileMap::minimumSizeHint() const { return {240, 200}; }

void EquivalenceTileMap::setReport(std::shared_ptr<const mesh::EquivalenceReport> report) {
    m_report = std::move(report);
    if (m_report && (m_layer < -1 || m_layer >= static_cast<int>(m_report->layers.size()))) m_layer = -1;
    m_slab = slabCount() / 2;
    updateScale();
    layoutTiles();
    update();
}

void EquivalenceTileMap::setQuantity(Quantity quantity) {
    m_quantity = quantity;
    updateScale();
    update();
}

void EquivalenceTileMap::setLayer(int layer) {
    m_layer = m_report && layer >= 0 && layer < static_cast<int>(m_report->layers.size()) ? layer : -1;
    updateScale();
    update();
}

void EquivalenceTileMap::setSlab(int slab) {
    m_slab = std::clamp(slab, 0, std::max(0, slabCount() - 1));
    layoutTiles();
    update();
}

int EquivalenceTileMap::slabCount() const {
    if (!m_report || m_report->input.size() != 5) return 1;
    std::set<std::int64_t> begins;
    for (const mesh::TileDifference& tile : m_report->tiles) begins.insert(tile.owned[0].begin);
    return static_cast<int>(begins.size());
}

std::int64_t EquivalenceTileMap::tileCore(int index) const { return m_drawn.at(static_cast<std::size_t>(index)); }
QRectF EquivalenceTileMap::tileRect(int index) const { return m_rects.at(static_cast<std::size_t>(index)); }

int EquivalenceTileMap::tileAt(QPointF position) const {
    for (std::size_t i = 0; i < m_rects.size(); ++i) {
        if (m_rects[i].contains(position)) return static_cast<int>(i);
    }
    return -1;
}

double EquivalenceTileMap::relativeOf(std::int64_t core, Quantity quantity, int layer) const {
    if (!m_report || core < 0 || core >= static_cast<std::int64_t>(m_report->tiles.size())) return 0;
    const auto c = static_cast<std::size_t>(core);
    const bool activation = quantity == Quantity::Activation;
    if (layer < 0) return activation ? m_report->tiles[c].max_rel_activation : m_report->tiles[c].max_rel_gradient;
    const mesh::LayerDifference& l = m_report->layers[static_cast<std::size_t>(layer)];
    if (l.replicated) return 0;
    const double abs = activation ? l.core_abs_activation[c] : l.core_abs_gradient[c];
    return abs == 0 ? 0.0 : abs / std::max(activation ? l.reference_scale : l.gradient_scale, tiny);
}

double EquivalenceTileMap::tileValue(std::int64_t core) const { return relativeOf(core, m_quantity, m_layer); }

std::int64_t EquivalenceTileMap::tileFlips(std::int64_t core) const {
    if (!m_report || core < 0 || core >= static_cast<std::int64_t>(m_report->tiles.size())) return 0;
    const auto c = static_cast<std::size_t>(core);
    if (m_layer < 0) return m_report->tiles[c].relu_flips;
    const mesh::LayerDifference& layer = m_report->layers[static_cast<std::size_t>(m_layer)];
    return layer.core_relu_flips.empty() ? 0 : layer.core_relu_flips[c];
}

void EquivalenceTileMap::updateScale() {
    double low = std::numeric_limits<double>::infinity(), high = 0;
    if (m_report) {
        for (const mesh::TileDifference& tile : m_report->tiles) {
            const double value = tileValue(tile.core);
            if (value > 0 && std::isfinite(value)) {
                low = std::min(low, value);
                high = std::max(high, value);
            }
        }
    }
    if (high <= 0) {
        m_low_decade = -8;
        m_high_decade = -4;
        return;
    }
    m_low_decade = std::floor(std::log10(low));
    m_high_decade = std::ceil(std::log10(high));
    if (m_high_decade - m_low_decade < 1) m_high_decade = m_low_decade + 1;
}

QColor EquivalenceTileMap::colorOf(double value) const {
    if (!(value > 0)) return identical_color;
    if (!std::isfinite(value)) return tolerance_color;
    return rampColor((std::log10(value) - m_low_decade) / (m_high_decade - m_low_decade));
}

void EquivalenceTileMap::resizeEvent(QResizeEvent* event) {
    QWidget::resizeEvent(event);
    layoutTiles();
}

void EquivalenceTileMap::layoutTiles() {
    m_drawn.clear();
    m_rects.clear();
    m_area = {};
    m_legend = {};
    if (!m_report || m_report->tiles.empty() || m_report->input.size() < 4) return;
    const Shape& input = m_report->input;
    const std::size_t rank = input.size() - 2;
    const double height = static_cast<double>(input[input.size() - 2]), width = static_cast<double>(input.back());
    const QFontMetricsF metrics(font());
    // Room for the caption, the boundary labels (W above, H left of the tiles) and the legend.
    const double margin = 10, caption = metrics.height() * 2 + 8, legend_width = 128;
    const double top_labels = metrics.height() + 4, left_labels = metrics.horizontalAdvance(QStringLiteral("0000")) + 8;
    const QRectF available(margin + left_labels, margin + caption + top_labels,
                           std::max(10.0, this->width() - 2 * margin - legend_width - left_labels),
                           std::max(10.0, this->height() - 2 * margin - caption - top_labels));
    const double scale = std::min(available.width() / width, available.height() / height);
    const double spare = std::max(0.0, available.width() - width * scale);
    m_area = QRectF(available.left() + spare / 2, available.top(), width * scale, height * scale);
    m_legend = QRectF(m_area.right() + 22, m_area.top() + metrics.height() / 2, 14,
                      std::max(40.0, std::min(m_area.height(), 260.0) - metrics.height() * 2.5));

    std::set<std::int64_t> slab_begins;
    if (rank == 3) {
        for (const mesh::TileDifference& tile : m_report->tiles) slab_begins.insert(tile.owned[0].begin);
    }
    const std::int64_t slab_begin = rank == 3 ? *std::next(slab_begins.begin(), std::clamp(m_slab, 0, static_cast<int>(slab_begins.size()) - 1)) : 0;
    for (const mesh::TileDifference& tile : m_report->tiles) {
        if (rank == 3 && tile.owned[0].begin != slab_begin) continue;
        const partition::Interval& rows = tile.owned[rank - 2];
        const partition::Interval& columns = tile.owned[rank - 1];
        m_drawn.push_back(tile.core);
        m_rects.emplace_back(m_area.left() + static_cast<double>(columns.begin) * scale, m_area.top() + static_cast<double>(rows.begin) * scale,
                             static_cast<double>(columns.size()) * scale, static_cast<double>(rows.size()) * scale);
    }
}

QString EquivalenceTileMap::caption() const {
    if (!m_report) return {};
    const QString what = m_quantity == Quantity::Activation ? tr("forward values") : tr("gradients");
    QString text = tr("Largest relative difference of the %1 per tile").arg(what);
    text += QLatin1Char('\n');
    if (m_layer < 0) {
        text += tr("over all layers");
    } else {
        const mesh::LayerDifference& layer = m_report->layers[static_cast<std::size_t>(m_layer)];
        text += tr("layer %1 (%2)").arg(QString::fromStdString(layer.name), QString::fromStdString(layer.op));
        if (layer.replicated) text += tr(" — replicated on every core, not tiled");
    }
    if (m_report->input.size() == 5 && !m_drawn.empty()) {
        const partition::Interval& depth = m_report->tiles[static_cast<std::size_t>(m_drawn.front())].owned[0];
        text += tr(" · D slab %1 of %2 (D %3–%4)").arg(m_slab + 1).arg(slabCount()).arg(depth.begin).arg(depth.end);
    }
    return text;
}

QString EquivalenceTileMap::toolTipForCore(std::int64_t core) const {
    if (!m_report || core < 0 || core >= static_cast<std::int64_t>(m_report->tiles.size())) return {};
    const mesh::TileDifference& tile = m_report->tiles[static_cast<std::size_t>(core)];
    static const char* const axis_names[] = {"D", "H", "W"};
    const std::size_t rank = tile.owned.size();
    QStringList region;
    for (std::size_t axis = 0; axis < rank; ++axis) {
        region << QStringLiteral("%1 %2–%3").arg(QLatin1String(axis_names[3 - rank + axis])).arg(tile.owned[axis].begin).arg(tile.owned[axis].end);
    }
    QString text = tr("<b>core %1</b>: %2 of the input").arg(core).arg(region.join(QStringLiteral(", ")));
    auto name_of = [this](int node) {
        for (const mesh::LayerDifference& layer : m_report->layers) {
            if (layer.node == node) return QString::fromStdString(layer.name);
        }
        return QString();
    };
    if (m_layer < 0) {
        text += tr("<br>forward values: %1 relative (%2 absolute)").arg(sci(tile.max_rel_activation), sci(tile.max_abs_activation));
        if (tile.worst_activation_node >= 0) text += tr(", worst in %1").arg(name_of(tile.worst_activation_node));
        text += tr("<br>gradients: %1 relative (%2 absolute)").arg(sci(tile.max_rel_gradient), sci(tile.max_abs_gradient));
        if (tile.worst_gradient_node >= 0) text += tr(", worst in %1").arg(name_of(tile.worst_gradient_node));
        if (tile.relu_flips > 0) {
            text += tr("<br><span style='color:#c62828'>%n ReLU flip(s) in this tile: inputs at the kink rounded to opposite sides</span>",
                       nullptr, static_cast<int>(tile.relu_flips));
        }
    } else {
        const mesh::LayerDifference& layer = m_report->layers[static_cast<std::size_t>(m_layer)];
        text += tr("<br>layer %1:").arg(QString::fromStdString(layer.name));
        if (layer.replicated) {
            text += tr(" replicated on every core");
        } else {
            const auto c = static_cast<std::size_t>(core);
            text += tr("<br>forward values: %1 relative (%2 absolute)")
                        .arg(sci(relativeOf(core, Quantity::Activation, m_layer)), sci(layer.core_abs_activation[c]));
            text += tr("<br>gradients: %1 relative (%2 absolute)")
                        .arg(sci(relativeOf(core, Quantity::Gradient, m_layer)), sci(layer.core_abs_gradient[c]));
            if (!layer.core_relu_flips.empty() && layer.core_relu_flips[c] > 0) {
                text += tr("<br><span style='color:#c62828'>%n ReLU flip(s) here</span>", nullptr, static_cast<int>(layer.core_relu_flips[c]));
            }
        }
    }
    return text;
}

QString EquivalenceTileMap::toolTipAt(QPointF position) const {
    const int index = tileAt(position);
    return index < 0 ? QString() : toolTipForCore(tileCore(index));
}

bool EquivalenceTileMap::event(QEvent* event) {
    if (event->type() == QEvent::ToolTip) {
        const auto* help = static_cast<QHelpEvent*>(event);
        const int index = tileAt(help->pos());
        if (index >= 0) {
            QToolTip::showText(help->globalPos(), toolTipForCore(tileCore(index)), this, tileRect(index).toAlignedRect());
        } else {
            QToolTip::showText(help->globalPos(), toolTip(), this);
        }
        return true;
    }
    return QWidget::event(event);
}

void EquivalenceTileMap::paintEvent(QPaintEvent* /*event*/) {
    QPainter painter(this);
    painter.setRenderHint(QPainter::Antialiasing);
    painter.fillRect(rect(), palette().base());
    if (!m_report || m_drawn.empty()) {
        painter.setPen(palette().color(QPalette::PlaceholderText));
        painter.drawText(rect().adjusted(16, 16, -16, -16), Qt::AlignCenter | Qt::TextWordWrap,
                         m_report ? tr("This comparison has no tiles to show")
                                  : tr("Press Compare: each tile of the input is coloured by the largest difference inside it"));
        return;
    }
    const QFontMetricsF metrics(font());
    painter.setPen(palette().color(QPalette::Text));
    painter.drawText(QRectF(10, 6, width() - 20, metrics.height() * 2 + 4), Qt::AlignLeft | Qt::AlignTop, caption());

    // The tiles.
    for (std::size_t i = 0; i < m_drawn.size(); ++i) {
        const double value = tileValue(m_drawn[i]);
        const QColor fill = colorOf(value);
        painter.setPen(QPen(QColor(0x30, 0x30, 0x30), 1.2));
        painter.setBrush(fill);
        painter.drawRect(m_rects[i]);
        if (const std::int64_t flips = tileFlips(m_drawn[i]); flips > 0) {
            // A red triangle in the corner: ReLU flips inside this tile (for the layer shown, or any).
            const QRectF& r = m_rects[i];
            const double size = std::min(14.0, std::min(r.width(), r.height()) / 3);
            const QPointF corner = r.topRight() + QPointF(-3, 3);
            const QPointF triangle[] = {corner, corner + QPointF(-size, 0), corner + QPointF(0, size)};
            painter.setPen(QPen(Qt::white, 1));
            painter.setBrush(tolerance_color);
            painter.drawPolygon(triangle, 3);
        }
        if (m_rects[i].width() < 44 || m_rects[i].height() < 2.2 * metrics.height()) continue;
        painter.setPen(fill.lightnessF() < 0.5 ? Qt::white : Qt::black);
        painter.drawText(m_rects[i], Qt::AlignCenter,
                         tr("core %1\n%2").arg(m_drawn[i]).arg(value > 0 ? sci(value) : tr("identical")));
    }

    // The cuts: W above the tiles, H left of them, at every tile boundary.
    {
        const Shape& input = m_report->input;
        const std::size_t rank = input.size() - 2;
        std::set<std::int64_t> columns, rows;
        for (const std::int64_t core : m_drawn) {
            const mesh::TileDifference& tile = m_report->tiles[static_cast<std::size_t>(core)];
            columns.insert({tile.owned[rank - 1].begin, tile.owned[rank - 1].end});
            rows.insert({tile.owned[rank - 2].begin, tile.owned[rank - 2].end});
        }
        const double scale = m_area.width() / static_cast<double>(input.back());
        painter.setPen(palette().color(QPalette::PlaceholderText));
        for (const std::int64_t column : columns) {
            const double x = m_area.left() + static_cast<double>(column) * scale;
            painter.drawText(QRectF(x - 30, m_area.top() - metrics.height() - 3, 60, metrics.height()), Qt::AlignCenter,
                             QString::number(column));
        }
        for (const std::int64_t row : rows) {
            const double y = m_area.top() + static_cast<double>(row) * scale;
            painter.drawText(QRectF(m_area.left() - 64, y - metrics.height() / 2, 60, metrics.height()), Qt::AlignRight | Qt::AlignVCenter,
                             QString::number(row));
        }
        painter.drawText(QRectF(m_area.right() + 18, m_area.top() - metrics.height() - 3, 30, metrics.height()),
                         Qt::AlignLeft | Qt::AlignVCenter, QStringLiteral("W"));
        painter.drawText(QRectF(m_area.left() - 64, m_area.bottom() + 2, 60, metrics.height()), Qt::AlignRight | Qt::AlignTop,
                         QStringLiteral("H"));
    }

    // The legend: a log colour bar, decades ticked, fp32's tolerance marked.
    const QRectF bar = m_legend;
    QLinearGradient gradient(bar.bottomLeft(), bar.topLeft());
    for (int stop = 0; stop <= 8; ++stop) gradient.setColorAt(stop / 8.0, rampColor(stop / 8.0));
    painter.setPen(QPen(QColor(0x60, 0x60, 0x60), 1));
    painter.setBrush(gradient);
    painter.drawRect(bar);
    auto y_of = [&](double decade) { return bar.bottom() - (decade - m_low_decade) / (m_high_decade - m_low_decade) * bar.height(); };
    painter.setPen(palette().color(QPalette::Text));
    const int decades = static_cast<int>(std::lround(m_high_decade - m_low_decade));
    const int step = std::max(1, decades / 6);
    for (int d = 0; d <= decades; d += step) {
        const double decade = m_low_decade + d;
        const double y = y_of(decade);
        painter.drawLine(QPointF(bar.right(), y), QPointF(bar.right() + 4, y));
        painter.drawText(QRectF(bar.right() + 6, y - metrics.height() / 2, 60, metrics.height()), Qt::AlignLeft | Qt::AlignVCenter,
                         QStringLiteral("1e%1").arg(static_cast<int>(decade)));
    }
    const double tolerance_decade = std::log10(EquivalenceView::fp32_tolerance);
    if (tolerance_decade >= m_low_decade && tolerance_decade <= m_high_decade) {
        QPen pen(tolerance_color, 2);
        pen.setStyle(Qt::DashLine);
        painter.setPen(pen);
        const double y = y_of(tolerance_decade);
        painter.drawLine(QPointF(bar.left() - 6, y), QPointF(bar.right(), y));
    }
    // Identical (zero) tiles, and what the bar measures.
    const QRectF swatch(bar.left(), bar.bottom() + metrics.height() * 0.6, bar.width(), metrics.height() * 0.8);
    painter.setPen(QPen(QColor(0x60, 0x60, 0x60), 1));
    painter.setBrush(identical_color);
    painter.drawRect(swatch);
    painter.setPen(palette().color(QPalette::Text));
    painter.drawText(QRectF(swatch.right() + 6, swatch.top() - 2, 70, metrics.height()), Qt::AlignLeft | Qt::AlignVCenter,
                     tr("identical"));
    // The tolerance's key: a dashed sample and its name.
    const double key_y = swatch.bottom() + metrics.height() * 1.1;
    QPen key_pen(tolerance_color, 2);
    key_pen.setStyle(Qt::DashLine);
    painter.setPen(key_pen);
    painter.drawLine(QPointF(bar.left() - 6, key_y), QPointF(bar.right(), key_y));
    painter.setPen(palette().color(QPalette::Text));
    painter.drawText(QRectF(swatch.right() + 6, key_y - metrics.height() / 2, 80, metrics.height()), Qt::AlignLeft | Qt::AlignVCenter,
                     tr("fp32 1e-5"));
    if (std::any_of(m_drawn.begin(), m_drawn.end(), [this](std::int64_t core) { return tileFlips(core) > 0; })) {
        const QPointF corner(bar.right(), key_y + metrics.height() * 0.7);
        const QPointF triangle[] = {corner, corner + QPointF(-12, 0), corner + QPointF(0, 12)};
        painter.setPen(QPen(Qt::white, 1));
        painter.setBrush(tolerance_color);
        painter.drawPolygon(triangle, 3);
        painter.setPen(palette().color(QPalette::Text));
        painter.drawText(QRectF(swatch.right() + 6, corner.y(), 80, metrics.height()), Qt::AlignLeft | Qt::AlignVCenter, tr("ReLU flip"));
    }
}

// ---- the view -----------------------------------------------------------------------------------------------

EquivalenceView::EquivalenceView(QWidget* parent) : QWidget(parent) {
    m_worker = new EquivalenceWorker(this);
    connect(m_worker, &EquivalenceWorker::progress, this, &EquivalenceView::onProgress);
    connect(m_worker, &EquivalenceWorker::compared, this, &EquivalenceView::onCompared);
    connect(m_worker, &EquivalenceWorker::failed, this, &EquivalenceView::onFailed);
    buildControls();
    buildChart();
    fillTileControls();
    showSummary();
}

EquivalenceView::~EquivalenceView() {
    delete m_worker;  // stops and joins the thread before the widgets it reports to go away
    m_worker = nullptr;
}

void EquivalenceView::buildControls() {
    auto* layout = new QVBoxLayout(this);
    auto* controls = new QHBoxLayout();
    layout->addLayout(controls);

    m_model = new QComboBox(this);
    m_model->addItem(tr("Built-in 2D U-Net (64×64)"), static_cast<int>(BuiltInModel::UNet2D));
    m_model->addItem(tr("Built-in 3D U-Net (16³)"), static_cast<int>(BuiltInModel::UNet3D));
    m_model->setToolTip(tr("The model compared: a small built-in U-Net, or the experiment being designed (scaled down when its "
                           "images exceed 2^20 voxels)"));
    m_model->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_model->setMinimumContentsLength(26);
    controls->addWidget(new QLabel(tr("Model"), this));
    controls->addWidget(m_model);

    static const char* const axis_names[] = {"D", "H", "W"};
    for (int axis = 0; axis < 3; ++axis) {
        auto* label = new QLabel(QString::fromLatin1(axis_names[axis]), this);
        auto* box = new QSpinBox(this);
        box->setRange(1, 64);
        box->setValue(axis == 0 ? 1 : 2);
        box->setToolTip(tr("Pieces along %1: the input's %1 axis is cut into this many tiles, one simulated core each")
                            .arg(QString::fromLatin1(axis_names[axis])));
        label->setToolTip(box->toolTip());
        controls->addWidget(label);
        controls->addWidget(box);
        m_piece_labels.push_back(label);
        m_pieces.push_back(box);
    }

    m_precision = new QComboBox(this);
    m_precision->addItem(QStringLiteral("fp32"), static_cast<int>(graph::Precision::F32));
    m_precision->addItem(QStringLiteral("bf16"), static_cast<int>(graph::Precision::BF16));
    m_precision->addItem(QStringLiteral("fp16"), static_cast<int>(graph::Precision::F16));
    m_precision->setToolTip(tr("Arithmetic of both runs. fp32 should agree to 1e-5 in every layer; bf16 and fp16 round to "
                               "fewer bits, so the partitioned run's different summation order shows more"));
    controls->addWidget(m_precision);

    m_steps = new QSpinBox(this);
    m_steps->setRange(1, 10);
    m_steps->setValue(2);
    m_steps->setSuffix(tr(" steps"));
    connect(m_steps, qOverload<int>(&QSpinBox::valueChanged), this, &EquivalenceView::onStepsChanged);
    m_steps->setToolTip(tr("Training steps of both runs before comparing; the last step's values and gradients are compared"));
    controls->addWidget(m_steps);

    m_baseline = new QCheckBox(tr("one-tile baseline"), this);
    m_baseline->setToolTip(tr("Also run the same mesh code with the whole input on one core: dotted lines show how far its "
                              "kernels alone are from the single-core trainer, so what partitioning adds stands out"));
    controls->addWidget(m_baseline);

    m_compare = new QPushButton(tr("Compare"), this);
    m_compare->setToolTip(tr("Train the model a few steps split over the cores and on one core from the same seed and batch, "
                             "then compare every layer (runs in the background; pressing again restarts it)"));
    controls->addWidget(m_compare);

    m_progress = new QProgressBar(this);
    m_progress->setToolTip(tr("Training steps of the partitioned and single-core runs, then the comparison"));
    m_progress->setMaximumWidth(160);
    m_progress->setFormat(tr("%v of %m"));
    m_progress->hide();
    controls->addWidget(m_progress);
    controls->addStretch(1);

    m_summary = new QLabel(this);
    m_summary->setWordWrap(true);
    m_summary->setTextFormat(Qt::RichText);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_summary->setToolTip(tr("The layout compared, both runs' losses per step, the largest weight difference and the worst layers"));
    layout->addWidget(m_summary);

    auto* splitter = new QSplitter(Qt::Horizontal, this);
    layout->addWidget(splitter, 1);
    m_chart_view = new QChartView(new QChart(), splitter);
    m_chart_view->setRenderHint(QPainter::Antialiasing);
    m_chart_view->setMinimumSize(360, 280);
    // No widget tooltip here: hovering a point shows that layer's (onPointHovered), which a widget
    // tooltip would replace.
    splitter->addWidget(m_chart_view);

    auto* tiles = new QWidget(splitter);
    auto* tiles_layout = new QVBoxLayout(tiles);
    tiles_layout->setContentsMargins(0, 0, 0, 0);
    auto* tile_controls = new QHBoxLayout();
    tiles_layout->addLayout(tile_controls);
    m_tile_quantity = new QComboBox(tiles);
    m_tile_quantity->addItem(tr("gradients"));
    m_tile_quantity->addItem(tr("forward values"));
    m_tile_quantity->setToolTip(tr("What the tiles are coloured by: differences of the gradients (d loss / d value) or of the forward values"));
    tile_controls->addWidget(m_tile_quantity);
    m_tile_layer = new QComboBox(tiles);
    m_tile_layer->setToolTip(tr("The layer shown on the tiles, or every layer (each tile's worst); clicking a point of the chart "
                                "picks its layer"));
    m_tile_layer->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    tile_controls->addWidget(m_tile_layer, 1);
    m_slab_label = new QLabel(tr("D slab"), tiles);
    m_slab = new QSpinBox(tiles);
    m_slab->setRange(1, 1);
    m_slab->setToolTip(tr("3D inputs: which slab of tiles along D the map shows (the middle one first)"));
    m_slab_label->setToolTip(m_slab->toolTip());
    tile_controls->addWidget(m_slab_label);
    tile_controls->addWidget(m_slab);
    m_tile_map = new EquivalenceTileMap(tiles);
    tiles_layout->addWidget(m_tile_map, 1);
    splitter->addWidget(tiles);
    splitter->setStretchFactor(0, 3);
    splitter->setStretchFactor(1, 2);
    splitter->setSizes({600, 400});

    connect(m_model, qOverload<int>(&QComboBox::currentIndexChanged), this, &EquivalenceView::onModelChanged);
    connect(m_precision, qOverload<int>(&QComboBox::currentIndexChanged), this, &EquivalenceView::onPrecisionChanged);
    connect(m_compare, &QPushButton::clicked, this, &EquivalenceView::compare);
    connect(m_tile_quantity, qOverload<int>(&QComboBox::currentIndexChanged), this, &EquivalenceView::onTileQuantityChanged);
    connect(m_tile_layer, qOverload<int>(&QComboBox::currentIndexChanged), this, &EquivalenceView::onTileLayerChanged);
    connect(m_slab, qOverload<int>(&QSpinBox::valueChanged), this, &EquivalenceView::onSlabChanged);
    updatePieceBoxes();
}

void EquivalenceView::buildChart() {
    QChart* chart = m_chart_view->chart();
    chart->setTitle(tr("Largest difference per layer, partitioned vs one core"));
    chart->legend()->setAlignment(Qt::AlignBottom);
    chart->setMargins(QMargins(4, 4, 4, 4));
}

int EquivalenceView::modelRank() const {
    const int kind = m_model->currentData().toInt();
    if (kind < 0 && m_experiment) return static_cast<int>(m_experiment->size.size());
    return kind == static_cast<int>(BuiltInModel::UNet3D) ? 3 : 2;
}

void EquivalenceView::updatePieceBoxes() {
    const bool three = modelRank() == 3;
    m_pieces[0]->setVisible(three);
    m_piece_labels[0]->setVisible(three);
}

void EquivalenceView::setExperiment(const experiment::Experiment& experiment) {
    m_experiment = experiment;
    const QString text = tr("Experiment: %1").arg(QString::fromStdString(experiment.name));
    int index = m_model->findData(-1);
    if (index < 0) {
        m_model->addItem(text, -1);
        index = m_model->count() - 1;
    } else {
        m_model->setItemText(index, text);
    }
    m_model->setItemData(index, QString::fromStdString(experiment.origin.empty() ? experiment.name : experiment.origin), Qt::ToolTipRole);
    m_model->setCurrentIndex(index);
    updatePieceBoxes();
    setPieces(experiment::spatial_pieces(experiment));
    setPrecision(experiment.precision);
    showSummary();
}

void EquivalenceView::setBuiltInModel(BuiltInModel model) {
    m_model->setCurrentIndex(m_model->findData(static_cast<int>(model)));
}

void EquivalenceView::setPieces(const std::vector<std::int64_t>& pieces) {
    const int rank = modelRank();
    for (int axis = 0; axis < rank && axis < static_cast<int>(pieces.size()); ++axis) {
        m_pieces[static_cast<std::size_t>(3 - rank + axis)]->setValue(static_cast<int>(pieces[static_cast<std::size_t>(axis)]));
    }
}

std::vector<std::int64_t> EquivalenceView::pieces() const {
    const int rank = modelRank();
    std::vector<std::int64_t> result;
    for (int axis = 3 - rank; axis < 3; ++axis) result.push_back(m_pieces[static_cast<std::size_t>(axis)]->value());
    return result;
}

void EquivalenceView::setPrecision(graph::Precision precision) {
    m_precision->setCurrentIndex(m_precision->findData(static_cast<int>(precision)));
}

void EquivalenceView::setSteps(int steps) { m_steps->setValue(steps); }
void EquivalenceView::setBaselineEnabled(bool enabled) { m_baseline->setChecked(enabled); }

void EquivalenceView::onModelChanged(int /*index*/) {
    updatePieceBoxes();
    if (m_model->currentData().toInt() < 0 && m_experiment) setPieces(experiment::spatial_pieces(*m_experiment));
}

void EquivalenceView::onStepsChanged(int steps) { m_steps->setSuffix(steps == 1 ? tr(" step") : tr(" steps")); }

void EquivalenceView::onPrecisionChanged(int /*index*/) {
    // Below fp32 most of the difference is the kernels' rounding: show it beside the partitioned run's.
    if (static_cast<graph::Precision>(m_precision->currentData().toInt()) != graph::Precision::F32) m_baseline->setChecked(true);
}

void EquivalenceView::compare() {
    ComparisonJob job;
    const int model = m_model->currentData().toInt();
    if (model < 0 && m_experiment) job.experiment = *m_experiment;
    else job.built_in = static_cast<BuiltInModel>(std::max(0, model));
    job.pieces = pieces();
    job.precision = static_cast<graph::Precision>(m_precision->currentData().toInt());
    job.steps = m_steps->value();
    job.baseline = m_baseline->isChecked();
    m_request = m_worker->compare(std::move(job));
    m_busy = true;
    m_error.clear();
    m_progress->setRange(0, 0);  // busy until the first stage reports
    m_progress->show();
    m_summary->setText(tr("Comparing %1 on %2 tiles: %3 steps split over the cores and on one core…")
                           .arg(m_model->currentText())
                           .arg(QString::fromStdString(mesh::pieces_text(pieces())))
                           .arg(m_steps->value()));
}

void EquivalenceView::onProgress(quint64 request, int done, int total) {
    if (request != m_request) return;
    m_progress->setRange(0, total);
    m_progress->setValue(done);
}

void EquivalenceView::onCompared(quint64 request) {
    if (request != m_request) return;
    std::optional<EquivalenceWorker::Result> result = m_worker->takeResult(request);
    if (!result) return;
    m_report = std::make_shared<const mesh::EquivalenceReport>(std::move(result->report));
    m_source = result->source;
    m_note = result->note;
    m_busy = false;
    m_progress->hide();
    m_tile_map->setReport(m_report);
    fillChart();
    fillTileControls();
    showSummary();
    emit finished();
}

void EquivalenceView::onFailed(quint64 request, const QString& message) {
    if (request != m_request) return;
    m_busy = false;
    m_progress->hide();
    m_report.reset();
    m_error = message;
    m_tile_map->setReport(nullptr);
    fillChart();
    fillTileControls();
    showSummary();
    emit finished();
}

QString EquivalenceView::summaryText() const { return m_summary->text(); }

void EquivalenceView::showSummary() {
    if (!m_error.isEmpty()) {
        m_summary->setText(tr("<b>The comparison could not run:</b> %1").arg(m_error.toHtmlEscaped()));
        return;
    }
    if (!m_report) {
        m_summary->setText(tr("Press <b>Compare</b> to train %1 a few steps split over the cores and on one core from the same "
                              "seed, and see every layer's difference.")
                               .arg(m_model->currentText().toHtmlEscaped()));
        return;
    }
    const mesh::EquivalenceReport& r = *m_report;
    QString text = tr("<b>%1</b>, %2").arg(QString::fromStdString(r.layout).toHtmlEscaped(), m_source.toHtmlEscaped());
    if (!m_note.isEmpty()) text += tr(" — %1").arg(m_note.toHtmlEscaped());
    if (r.tiles.size() == 1) {
        text += tr(" — one core per replica: nothing is partitioned, so this compares the mesh's kernels with the single-core "
                   "trainer's");
    }
    text += QStringLiteral("<br>");
    const double worst = std::max(r.worst_activation, r.worst_gradient);
    double baseline = 0, norm = 0, flip_value = 0;
    for (const mesh::LayerDifference& layer : r.layers) {
        baseline = std::max({baseline, layer.baseline_rel_activation, layer.baseline_rel_gradient});
        norm = std::max({norm, layer.norm_rel_activation, layer.norm_rel_gradient});
        flip_value = std::max(flip_value, layer.max_flip_value);
    }
    QString flips = r.relu_flips == 0 ? QString()
                                      : tr(" %n ReLU input(s) within %1 of zero (first in %2) were rounded to opposite sides of "
                                           "the kink, where the function jumps: that element's gradient changes by O(1).",
                                           nullptr, static_cast<int>(r.relu_flips))
                                            .arg(sci(flip_value), QString::fromStdString(r.first_flip_layer));
    if (r.pool_flips > 0) {
        flips += tr(" %n max-pool window(s) (first in %1) held two inputs within rounding of each other that the runs ordered "
                    "differently: the gradient went to the other one, an O(1) change there.",
                    nullptr, static_cast<int>(r.pool_flips))
                     .arg(QString::fromStdString(r.first_flip_layer));
    }
    if (worst <= fp32_tolerance) {
        text += tr("<span style='color:#2e7d32'>Every layer's values and gradients are within %1 of the single-core run: "
                   "the partitioned model is the same model.</span>")
                    .arg(sci(fp32_tolerance, 0));
    } else if (r.has_baseline && worst <= 1.5 * baseline) {
        text += tr("<span style='color:#8d6e00'>Differences up to %1 — beyond fp32's %2, but no larger than the same mesh code on "
                   "one tile (%3): they come from the kernels' rounding, not from the partitioning.%4</span>")
                    .arg(sci(worst), sci(fp32_tolerance, 0), sci(baseline), flips.toHtmlEscaped());
    } else if (r.relu_flips > 0 || r.pool_flips > 0) {
        text += tr("<span style='color:#8d6e00'>Differences up to %1 at single elements.%2 In norm every layer is within %3.</span>")
                    .arg(sci(worst), flips.toHtmlEscaped(), sci(norm));
    } else {
        text += tr("<span style='color:#c62828'>Differences up to %1, beyond fp32's %2%3; in norm %4.</span>")
                    .arg(sci(worst), sci(fp32_tolerance, 0),
                         r.layout.find("fp32") == std::string::npos ? tr(" (expected below fp32: fewer mantissa bits)") : QString(),
                         sci(norm));
    }
    text += tr(" Worst: values %1 (%2), gradients %3 (%4).")
                .arg(sci(r.worst_activation), QString::fromStdString(r.worst_activation_layer), sci(r.worst_gradient),
                     QString::fromStdString(r.worst_gradient_layer));
    text += QStringLiteral("<br>");
    QStringList losses;
    for (std::size_t step = 0; step < r.reference_losses.size(); ++step) {
        losses << tr("step %1: loss %2 vs %3")
                      .arg(step + 1)
                      .arg(QString::number(r.partitioned_losses[step], 'f', 6), QString::number(r.reference_losses[step], 'f', 6));
    }
    text += losses.join(QStringLiteral("; "));
    const double last = std::abs(r.partitioned_losses.back() - r.reference_losses.back());
    text += tr(" (partitioned vs one core; last Δ %1), max weight difference %2 · %3 s")
                .arg(sci(last), sci(r.max_weight_difference), QString::number(r.seconds, 'f', 1));
    m_summary->setText(text);
}

QString EquivalenceView::layerToolTip(int index) const {
    if (!m_report || index < 0 || index >= static_cast<int>(m_report->layers.size())) return {};
    const mesh::LayerDifference& layer = m_report->layers[static_cast<std::size_t>(index)];
    auto value = [](double relative, double absolute) {
        return relative == 0 ? tr("identical") : tr("%1 relative (%2 absolute)").arg(sci(relative), sci(absolute));
    };
    QString text = tr("<b>%1</b> — layer %2, %3, output %4")
                       .arg(QString::fromStdString(layer.name).toHtmlEscaped())
                       .arg(index)
                       .arg(QString::fromStdString(layer.op), shapeText(layer.shape));
    if (layer.replicated) text += tr(" (replicated on every core)");
    text += tr("<br>forward values: %1; largest |value| %2").arg(value(layer.max_rel_activation, layer.max_abs_activation), sci(layer.reference_scale, 2));
    text += tr("<br>gradients: %1; largest |gradient| %2").arg(value(layer.max_rel_gradient, layer.max_abs_gradient), sci(layer.gradient_scale, 2));
    text += tr("<br>in norm: values %1, gradients %2").arg(sci(layer.norm_rel_activation), sci(layer.norm_rel_gradient));
    if (layer.relu_flips > 0) {
        text += tr("<br><span style='color:#c62828'>%n ReLU flip(s): inputs within %1 of zero on opposite sides of the kink</span>",
                   nullptr, static_cast<int>(layer.relu_flips))
                    .arg(sci(layer.max_flip_value));
    }
    if (layer.pool_flips > 0) {
        text += tr("<br><span style='color:#c62828'>%n max-pool window(s) whose largest input differs between the runs</span>", nullptr,
                   static_cast<int>(layer.pool_flips));
    }
    if (m_report->has_baseline) {
        text += tr("<br>the mesh on one tile: values %1, gradients %2").arg(sci(layer.baseline_rel_activation), sci(layer.baseline_rel_gradient));
    }
    return text;
}

void EquivalenceView::fillChart() {
    QChart* chart = m_chart_view->chart();
    chart->removeAllSeries();
    for (QAbstractAxis* axis : chart->axes()) {
        chart->removeAxis(axis);
        delete axis;
    }
    m_activation_series = m_gradient_series = m_tolerance_series = nullptr;
    m_baseline_activation_series = m_baseline_gradient_series = nullptr;
    if (!m_report || m_report->layers.empty()) {
        chart->setTitle(tr("Largest difference per layer, partitioned vs one core"));
        return;
    }
    const mesh::EquivalenceReport& r = *m_report;
    chart->setTitle(tr("Largest difference per layer: %1 vs one core").arg(QString::fromStdString(r.layout)));

    // The log axis' range: every value and the tolerance; zeros sit a decade below the smallest.
    double low = fp32_tolerance, high = fp32_tolerance;
    bool zeros = false;
    for (const mesh::LayerDifference& layer : r.layers) {
        std::vector<double> values{layer.max_rel_activation, layer.max_rel_gradient};
        if (r.has_baseline) values.insert(values.end(), {layer.baseline_rel_activation, layer.baseline_rel_gradient});
        for (double v : values) {
            if (v > 0 && std::isfinite(v)) {
                low = std::min(low, v);
                high = std::max(high, v);
            } else if (v == 0) {
                zeros = true;
            }
        }
    }
    double low_decade = std::floor(std::log10(low)), high_decade = std::ceil(std::log10(high) + 1e-9);
    if (zeros) low_decade -= 1;
    if (high_decade - low_decade < 2) low_decade = high_decade - 2;
    m_chart_floor = std::pow(10.0, low_decade);

    auto make_series = [&](const QString& name, const QColor& color, Qt::PenStyle style, bool points) {
        auto* series = new QLineSeries();
        series->setName(name);
        QPen pen(color);
        pen.setWidthF(style == Qt::SolidLine ? 2.0 : 1.5);
        pen.setStyle(style);
        series->setPen(pen);
        series->setPointsVisible(points);
        return series;
    };
    m_activation_series = make_series(tr("forward values"), activation_color, Qt::SolidLine, true);
    m_gradient_series = make_series(tr("gradients"), gradient_color, Qt::SolidLine, true);
    auto plotted = [this](double v) { return v > 0 ? (std::isfinite(v) ? v : m_chart_floor * 1e30) : m_chart_floor; };
    for (std::size_t i = 0; i < r.layers.size(); ++i) {
        m_activation_series->append(static_cast<double>(i), plotted(r.layers[i].max_rel_activation));
        m_gradient_series->append(static_cast<double>(i), plotted(r.layers[i].max_rel_gradient));
    }
    if (r.has_baseline) {
        m_baseline_activation_series = make_series(tr("values, one tile"), activation_color.lighter(140), Qt::DotLine, false);
        m_baseline_gradient_series = make_series(tr("gradients, one tile"), gradient_color.lighter(140), Qt::DotLine, false);
        for (std::size_t i = 0; i < r.layers.size(); ++i) {
            m_baseline_activation_series->append(static_cast<double>(i), plotted(r.layers[i].baseline_rel_activation));
            m_baseline_gradient_series->append(static_cast<double>(i), plotted(r.layers[i].baseline_rel_gradient));
        }
    }
    m_tolerance_series = make_series(tr("tolerance %1").arg(sci(fp32_tolerance, 0)), tolerance_color, Qt::DashLine, false);
    m_tolerance_series->append(-0.5, fp32_tolerance);
    m_tolerance_series->append(static_cast<double>(r.layers.size()) - 0.5, fp32_tolerance);

    std::vector<QXYSeries*> all{m_activation_series, m_gradient_series};
    if (r.has_baseline) all.insert(all.end(), {m_baseline_activation_series, m_baseline_gradient_series});
    all.push_back(m_tolerance_series);
    // Layers with ReLU or max-pool flips: a marker on their gradient point.
    if (r.relu_flips > 0 || r.pool_flips > 0) {
        auto* flips = new QScatterSeries();
        flips->setName(r.pool_flips == 0 ? tr("ReLU flip") : r.relu_flips == 0 ? tr("max-pool flip") : tr("ReLU or max-pool flip"));
        flips->setMarkerShape(QScatterSeries::MarkerShapeTriangle);
        flips->setMarkerSize(13);
        flips->setColor(tolerance_color);
        flips->setBorderColor(Qt::white);
        for (std::size_t i = 0; i < r.layers.size(); ++i) {
            if (r.layers[i].relu_flips > 0 || r.layers[i].pool_flips > 0) flips->append(static_cast<double>(i), plotted(r.layers[i].max_rel_gradient));
        }
        connect(flips, &QScatterSeries::hovered, this, &EquivalenceView::onPointHovered);
        connect(flips, &QScatterSeries::clicked, this, &EquivalenceView::onPointClicked);
        all.push_back(flips);
    }
    for (QXYSeries* series : all) chart->addSeries(series);

    auto* x = new QValueAxis();
    x->setRange(-0.5, static_cast<double>(r.layers.size()) - 0.5);
    x->setLabelFormat(QStringLiteral("%d"));
    x->setTickType(QValueAxis::TicksDynamic);
    x->setTickAnchor(0);
    x->setTickInterval(r.layers.size() > 40 ? 10 : 5);
    x->setMinorTickCount(4);
    x->setTitleText(tr("layer (model order; hover for its name)"));
    auto* y = new QLogValueAxis();
    y->setBase(10);
    y->setLabelFormat(QStringLiteral("%.0e"));
    y->setRange(m_chart_floor, std::pow(10.0, high_decade));
    y->setMinorTickCount(-1);
    y->setTitleText(zeros ? tr("max |Δ| / max |reference| (bottom: identical)") : tr("max |Δ| / max |reference|"));
    chart->addAxis(x, Qt::AlignBottom);
    chart->addAxis(y, Qt::AlignLeft);
    for (QXYSeries* series : all) {
        series->attachAxis(x);
        series->attachAxis(y);
    }
    for (QLineSeries* series : {m_activation_series, m_gradient_series}) {
        connect(series, &QLineSeries::hovered, this, &EquivalenceView::onPointHovered);
        connect(series, &QLineSeries::clicked, this, &EquivalenceView::onPointClicked);
    }
}

void EquivalenceView::fillTileControls() {
    const QSignalBlocker block(m_tile_layer);
    const int previous = m_tile_layer->currentIndex();
    m_tile_layer->clear();
    m_tile_layer->addItem(tr("all layers (each tile's worst)"));
    m_tile_layer->setItemData(0, tr("Each tile shows its largest difference over every layer"), Qt::ToolTipRole);
    if (m_report) {
        for (std::size_t i = 0; i < m_report->layers.size(); ++i) {
            const mesh::LayerDifference& layer = m_report->layers[i];
            m_tile_layer->addItem(QStringLiteral("%1 %2").arg(i).arg(QString::fromStdString(layer.name)));
            m_tile_layer->setItemData(static_cast<int>(i) + 1, tr("%1, output %2").arg(QString::fromStdString(layer.op), shapeText(layer.shape)),
                                      Qt::ToolTipRole);
        }
    }
    m_tile_layer->setCurrentIndex(previous > 0 && previous < m_tile_layer->count() ? previous : 0);
    m_tile_map->setLayer(m_tile_layer->currentIndex() - 1);
    const bool three = m_report && m_report->input.size() == 5;
    m_slab_label->setVisible(three);
    m_slab->setVisible(three);
    const QSignalBlocker block_slab(m_slab);
    m_slab->setRange(1, m_tile_map->slabCount());
    m_slab->setValue(m_tile_map->slab() + 1);
}

void EquivalenceView::onTileQuantityChanged(int index) {
    m_tile_map->setQuantity(index == 0 ? EquivalenceTileMap::Quantity::Gradient : EquivalenceTileMap::Quantity::Activation);
}

void EquivalenceView::onTileLayerChanged(int index) { m_tile_map->setLayer(index - 1); }

void EquivalenceView::onSlabChanged(int value) { m_tile_map->setSlab(value - 1); }

void EquivalenceView::onPointHovered(const QPointF& point, bool state) {
    if (!state) {
        QToolTip::hideText();
        return;
    }
    QToolTip::showText(QCursor::pos(), layerToolTip(static_cast<int>(std::lround(point.x()))), m_chart_view);
}

void EquivalenceView::onPointClicked(const QPointF& point) {
    const int index = static_cast<int>(std::lround(point.x()));
    if (m_report && index >= 0 && index < static_cast<int>(m_report->layers.size())) m_tile_layer->setCurrentIndex(index + 1);
}

}  // namespace tessera::ui

#include "equivalence_view.moc"
