// EquivalenceView: the evidence that the partitioned model is the same model, and where rounding
// differences sit.
//
// "Compare" runs a short training of a small model (a built-in 2D or 3D U-Net, or the studio's current
// design via setExperiment) twice from the same seed and batch — split over the simulated cores of the
// chosen layout, and on one core — off the GUI thread (mesh::compare_with_single_core), then shows:
//   a chart   per layer (model order), the largest relative difference of the forward values and of
//             the gradients, on a log scale, with fp32's tolerance 1e-5 dashed; hovering a point names
//             the layer, clicking it shows that layer on the tile map;
//   a map     the model input's tiles (3D: one D slab of them at a time), each coloured by the largest
//             difference inside it (log colour scale, legend), over all layers or the chosen one; a red
//             corner marks tiles where a ReLU input at the kink was rounded to opposite sides (a
//             "flip": the function jumps there, so one element's gradient moves by O(1));
//   a line    the losses of both runs per step and the largest weight difference after them.
// With "one-tile baseline" the same mesh code also runs with the whole input on one core: dotted lines
// show what the mesh's kernels alone differ by — in bf16 that is most of the difference.
// An experiment whose images exceed 2^20 voxels is compared on a smaller input of the same rank (its
// pieces even, its batch at most 2), and the summary says so; only one replica is compared.
//
//   auto* view = new EquivalenceView(this);
//   view->setExperiment(experiment);             // or keep the built-in 2D U-Net
//   view->setPieces({2, 2});
//   view->compare();                             // finished() when the result is shown
#pragma once

#include "mesh/equivalence.hpp"
#include "experiment/experiment.hpp"

#include <QString>
#include <QWidget>

#include <memory>
#include <optional>
#include <vector>

class QChartView;
class QCheckBox;
class QComboBox;
class QLabel;
class QLineSeries;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace tessera::ui {

class EquivalenceWorker;

// The model input's tiles coloured by their largest relative difference (log scale), with a legend.
// 2D inputs show the whole grid; 3D inputs one slab of tiles along D (setSlab), drawn over H × W.
class EquivalenceTileMap : public QWidget {
    Q_OBJECT
public:
    enum class Quantity { Activation, Gradient };

    explicit EquivalenceTileMap(QWidget* parent = nullptr);

    // Shares the report (null: nothing to show). Keeps quantity and layer; the slab goes to the middle.
    void setReport(std::shared_ptr<const mesh::EquivalenceReport> report);
    void setQuantity(Quantity quantity);
    // An index into report->layers, or −1 for every layer (each tile's worst).
    void setLayer(int layer);
    // The piece along D shown (3D only): 0 … slabCount() − 1.
    void setSlab(int slab);
    Quantity quantity() const { return m_quantity; }
    int layer() const { return m_layer; }
    int slab() const { return m_slab; }
    int slabCount() const;

    // The tiles drawn (one per core of the slab), each one's core and rectangle, and the tooltip at a
    // position (empty: no tile there).
    int tileCount() const { return static_cast<int>(m_drawn.size()); }
    std::int64_t tileCore(int index) const;
    QRectF tileRect(int index) const;
    int tileAt(QPointF position) const;
    QString toolTipAt(QPointF position) const;
    QString toolTipForCore(std::int64_t core) const;
    // The relative difference a core's tile is coloured by (quantity and layer as set).
    double tileValue(std::int64_t core) const;
    // ReLU flips inside a core's tile (the layer shown, or all); such tiles carry a red corner.
    std::int64_t tileFlips(std::int64_t core) const;
    // The colour of a relative difference on the current scale (0: the "identical" grey).
    QColor colorOf(double value) const;

    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

protected:
    bool event(QEvent* event) override;
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    void layoutTiles();
    void updateScale();
    double relativeOf(std::int64_t core, Quantity quantity, int layer) const;
    QString caption() const;

    std::shared_ptr<const mesh::EquivalenceReport> m_report;
    Quantity m_quantity = Quantity::Gradient;
    int m_layer = -1;
    int m_slab = 0;
    std::vector<std::int64_t> m_drawn;   // cores of the slab shown
    std::vector<QRectF> m_rects;         // their rectangles
    QRectF m_area;                       // the input's H × W extent on screen
    QRectF m_legend;                     // the colour bar
    double m_low_decade = -8;            // colour scale: log10 of its ends
    double m_high_decade = -4;
};

class EquivalenceView : public QWidget {
    Q_OBJECT
public:
    // The models "Compare" can use without an experiment.
    enum class BuiltInModel {
        UNet2D,  // depth 3, width 8, 3 classes on [2, 1, 64, 64]
        UNet3D,  // depth 3, width 4, 2 classes on [1, 1, 16, 16, 16]
    };
    static constexpr double fp32_tolerance = 1e-5;

    explicit EquivalenceView(QWidget* parent = nullptr);
    ~EquivalenceView() override;  // stops a comparison in progress and waits for its thread

    // Offers the experiment's model and layout (its spatial pieces, precision, optimizer, loss, seed)
    // and selects it. A RetinaNet experiment is refused in the summary (the cores train U-Nets and
    // ResNets only).
    void setExperiment(const tessera::experiment::Experiment& experiment);
    void setBuiltInModel(BuiltInModel model);
    // Pieces per spatial axis ((D,) H, W); entries beyond the model's rank are ignored.
    void setPieces(const std::vector<std::int64_t>& pieces);
    std::vector<std::int64_t> pieces() const;
    void setPrecision(tessera::graph::Precision precision);
    void setSteps(int steps);
    void setBaselineEnabled(bool enabled);

    bool isBusy() const { return m_busy; }
    // The last comparison shown (null before the first, and after one that failed).
    const mesh::EquivalenceReport* report() const { return m_report.get(); }
    QString errorText() const { return m_error; }
    QString summaryText() const;

    // For tests: the chart, its series, the tile map and the controls.
    QChartView* chartView() const { return m_chart_view; }
    QLineSeries* activationSeries() const { return m_activation_series; }
    QLineSeries* gradientSeries() const { return m_gradient_series; }
    QLineSeries* toleranceSeries() const { return m_tolerance_series; }
    EquivalenceTileMap* tileMap() const { return m_tile_map; }
    QPushButton* compareButton() const { return m_compare; }
    QComboBox* tileLayerBox() const { return m_tile_layer; }
    // What hovering layer `index` (into report()->layers) in the chart shows.
    QString layerToolTip(int index) const;

public slots:
    // Starts a comparison with the settings shown; a newer call restarts it.
    void compare();

signals:
    void finished();  // a comparison ended: its result (or its error) is shown

private slots:
    void onProgress(quint64 request, int done, int total);
    void onCompared(quint64 request);
    void onFailed(quint64 request, const QString& message);
    void onModelChanged(int index);
    void onPrecisionChanged(int index);
    void onStepsChanged(int steps);
    void onTileQuantityChanged(int index);
    void onTileLayerChanged(int index);
    void onSlabChanged(int value);
    void onPointHovered(const QPointF& point, bool state);
    void onPointClicked(const QPointF& point);

private:
    void buildControls();
    void buildChart();
    void fillChart();
    void fillTileControls();
    void showSummary();
    int modelRank() const;
    void updatePieceBoxes();

    EquivalenceWorker* m_worker = nullptr;
    std::optional<tessera::experiment::Experiment> m_experiment;
    std::shared_ptr<const mesh::EquivalenceReport> m_report;
    QString m_note;      // how the comparison was set up (scaled down, one replica, …)
    QString m_source;    // the model compared
    QString m_error;
    quint64 m_request = 0;
    bool m_busy = false;

    QComboBox* m_model = nullptr;
    std::vector<QSpinBox*> m_pieces;  // D, H, W
    std::vector<QLabel*> m_piece_labels;
    QComboBox* m_precision = nullptr;
    QSpinBox* m_steps = nullptr;
    QCheckBox* m_baseline = nullptr;
    QPushButton* m_compare = nullptr;
    QProgressBar* m_progress = nullptr;
    QLabel* m_summary = nullptr;
    QChartView* m_chart_view = nullptr;
    QLineSeries* m_activation_series = nullptr;
    QLineSeries* m_gradient_series = nullptr;
    QLineSeries* m_tolerance_series = nullptr;
    QLineSeries* m_baseline_activation_series = nullptr;
    QLineSeries* m_baseline_gradient_series = nullptr;
    EquivalenceTileMap* m_tile_map = nullptr;
    QComboBox* m_tile_quantity = nullptr;
    QComboBox* m_tile_layer = nullptr;
    QSpinBox* m_slab = nullptr;
    QLabel* m_slab_label = nullptr;
    double m_chart_floor = 1e-10;  // where zero differences are drawn on the log axis
};

}  // namespace tessera::ui
