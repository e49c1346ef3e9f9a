// EquivalenceView: a 2×2 comparison of a small 2D U-Net off the GUI thread (chart with a point per
// layer, four tiles, tooltips naming layers and cores), a 3D one with its D slabs and the one-tile
// baseline, an experiment too large to compare at full size, restarts, errors, and screenshots.
#include "ui_test_support.hpp"
#include "experiment/experiment.hpp"
#include "gl_test_main.hpp"
#include "widgets/equivalence_view.hpp"

#include <QAbstractButton>
#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QDir>
#include <QElapsedTimer>
#include <QLineSeries>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>

#include <map>

using namespace tessera;
using namespace tessera::ui;

namespace {

constexpr int compare_timeout_ms = 600000;  // a slow shared machine (CI) takes minutes for the scaled-down 256³ case

QString screenshotDir() {
    const QString dir = QDir::temp().filePath(QStringLiteral("tst_equivalence_view"));
    QDir().mkpath(dir);
    return dir;
}

using tessera::ui::test::foregroundFraction;  // ui_test_support.hpp

void saveShot(QWidget* widget, const QString& name) {
    QTest::qWait(100);  // pending layouts (the summary's new lines, the chart's axes) first
    const QImage image = widget->grab().toImage();
    QVERIFY(!image.isNull());
    QVERIFY(image.save(QDir(screenshotDir()).filePath(name)));
    QVERIFY2(foregroundFraction(image) > 0.02, qPrintable(name));
}

}  // namespace

class tst_EquivalenceView : public QObject {
    Q_OBJECT
private slots:
    void emptyViewSaysWhatToDo() {
        EquivalenceView view;
        view.resize(1100, 700);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        QVERIFY(!view.isBusy());
        QVERIFY(view.report() == nullptr);
        QVERIFY2(view.summaryText().contains(QStringLiteral("Compare")), qPrintable(view.summaryText()));
        QCOMPARE(view.tileMap()->tileCount(), 0);
        QVERIFY(view.activationSeries() == nullptr);
        // Every control explains itself.
        for (QWidget* control : view.findChildren<QWidget*>()) {
            if (qobject_cast<QAbstractButton*>(control) || qobject_cast<QComboBox*>(control) || qobject_cast<QSpinBox*>(control)) {
                QVERIFY2(!control->toolTip().isEmpty(), qPrintable(control->metaObject()->className()));
            }
        }
        QVERIFY(!view.findChild<QProgressBar*>()->isVisible());
    }

    void comparesA2x2UNet() {
        EquivalenceView view;
        view.resize(1280, 760);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        view.setBuiltInModel(EquivalenceView::BuiltInModel::UNet2D);
        view.setPieces({2, 2});
        QCOMPARE(view.pieces(), (std::vector<std::int64_t>{2, 2}));
        QSignalSpy finished(&view, &EquivalenceView::finished);
        QElapsedTimer timer;
        timer.start();
        QTest::mouseClick(view.compareButton(), Qt::LeftButton);
        QVERIFY(view.isBusy());
        QVERIFY(view.findChild<QProgressBar*>()->isVisible());
        QVERIFY(finished.wait(compare_timeout_ms));
        qInfo("compared in %lld ms", static_cast<long long>(timer.elapsed()));
        QVERIFY(!view.isBusy());
        QVERIFY(!view.findChild<QProgressBar*>()->isVisible());
        QVERIFY2(view.errorText().isEmpty(), qPrintable(view.errorText()));
        const mesh::EquivalenceReport* report = view.report();
        QVERIFY(report);
        const int layers = static_cast<int>(report->layers.size());
        QCOMPARE(layers, 27);  // a depth-3 U-Net's nodes but the input
        QCOMPARE(report->tiles.size(), std::size_t{4});
        qInfo("%s: values %.2e (%s), gradients %.2e (%s)", report->layout.c_str(), report->worst_activation,
              report->worst_activation_layer.c_str(), report->worst_gradient, report->worst_gradient_layer.c_str());
        if (report->relu_flips == 0 && report->pool_flips == 0) {
            QVERIFY(report->worst_activation <= EquivalenceView::fp32_tolerance);
            QVERIFY(report->worst_gradient <= EquivalenceView::fp32_tolerance);
        } else {
            // Rounding put a ReLU input or a max-pool's two largest on other sides (it happens with some CPUs'
            // kernels): the view must say so rather than call the partitioning wrong.
            qInfo("%lld ReLU flips, %lld max-pool flips (first in %s)", static_cast<long long>(report->relu_flips),
                  static_cast<long long>(report->pool_flips), report->first_flip_layer.c_str());
            QVERIFY2(view.summaryText().contains(report->pool_flips > 0 ? "max-pool window" : "ReLU input"), qPrintable(view.summaryText()));
        }

        // The chart: values and gradients, one point per layer, and the dashed tolerance.
        QChart* chart = view.chartView()->chart();
        const bool flipped = report->relu_flips > 0 || report->pool_flips > 0;
        QCOMPARE(chart->series().size(), flipped ? 4 : 3);  // a marker series for the flips' layers
        QCOMPARE(view.activationSeries()->count(), layers);
        QCOMPARE(view.gradientSeries()->count(), layers);
        QCOMPARE(view.toleranceSeries()->at(0).y(), 1e-5);
        QCOMPARE(view.toleranceSeries()->pen().style(), Qt::DashLine);
        for (int i = 0; i < layers; ++i) {
            QCOMPARE(view.gradientSeries()->at(i).x(), static_cast<double>(i));
            const QString tip = view.layerToolTip(i);
            QVERIFY2(tip.contains(QString::fromStdString(report->layers[static_cast<std::size_t>(i)].name)), qPrintable(tip));
        }
        QVERIFY(view.layerToolTip(0).contains(QStringLiteral("down0.conv1")));
        QVERIFY(view.layerToolTip(layers - 1).contains(QStringLiteral("head")));

        // The summary: both losses per step and the weights.
        const QString summary = view.summaryText();
        QVERIFY2(summary.contains(QStringLiteral("step 2: loss")) && summary.contains(QStringLiteral(" vs ")), qPrintable(summary));
        QVERIFY2(summary.contains(QStringLiteral("max weight difference")), qPrintable(summary));
        QVERIFY2(summary.contains(flipped ? QStringLiteral("at single elements") : QStringLiteral("same model")), qPrintable(summary));

        // The tile map: four tiles, quarters of the input, each with a tooltip naming its core.
        EquivalenceTileMap* map = view.tileMap();
        QCOMPARE(map->tileCount(), 4);
        for (int i = 0; i < map->tileCount(); ++i) {
            const QString tip = map->toolTipAt(map->tileRect(i).center());
            QVERIFY2(tip.contains(QStringLiteral("core %1").arg(map->tileCore(i))) && tip.contains(QStringLiteral("gradients")),
                     qPrintable(tip));
            QVERIFY(map->tileValue(map->tileCore(i)) > 0);
        }
        QVERIFY(qAbs(map->tileRect(0).width() - map->tileRect(3).width()) < 1e-6);
        QVERIFY(map->tileRect(0).right() <= map->tileRect(1).left() + 1e-6);   // core 1 right of core 0
        QVERIFY(map->tileRect(0).bottom() <= map->tileRect(2).top() + 1e-6);   // core 2 below core 0
        QVERIFY(map->toolTipAt(QPointF(2, 2)).isEmpty());
        saveShot(&view, QStringLiteral("equivalence_view_2d.png"));

        // Clicking a chart point shows that layer on the tiles.
        const int pick = 12;
        const QPointF scene = chart->mapToPosition(view.gradientSeries()->at(pick), view.gradientSeries());
        const QPoint at = view.chartView()->mapFromScene(scene);
        QTest::mouseClick(view.chartView()->viewport(), Qt::LeftButton, Qt::NoModifier, at);
        QTRY_COMPARE(view.tileLayerBox()->currentIndex(), pick + 1);
        QCOMPARE(map->layer(), pick);
        QVERIFY(map->toolTipAt(map->tileRect(0).center()).contains(QString::fromStdString(report->layers[pick].name)));
        map->setQuantity(EquivalenceTileMap::Quantity::Activation);
        saveShot(map, QStringLiteral("equivalence_tiles_layer.png"));
        saveShot(view.chartView(), QStringLiteral("equivalence_chart.png"));
        qInfo("screenshots in %s", qPrintable(screenshotDir()));
    }

    void showsThe3DSlabsAndTheBaseline() {
        EquivalenceView view;
        view.resize(1280, 760);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        view.setBuiltInModel(EquivalenceView::BuiltInModel::UNet3D);
        view.setPieces({2, 2, 2});
        view.setPrecision(graph::Precision::BF16);  // turns the baseline on
        QSignalSpy finished(&view, &EquivalenceView::finished);
        view.compare();
        QVERIFY(finished.wait(compare_timeout_ms));
        const mesh::EquivalenceReport* report = view.report();
        QVERIFY(report);
        QVERIFY(report->has_baseline);
        QCOMPARE(report->tiles.size(), std::size_t{8});
        // Values, gradients, both on one tile, the tolerance; and markers on layers with ReLU flips.
        QCOMPARE(view.chartView()->chart()->series().size(), report->relu_flips > 0 ? 6 : 5);
        qInfo("%s: values %.2e, gradients %.2e, %lld ReLU flips", report->layout.c_str(), report->worst_activation,
              report->worst_gradient, static_cast<long long>(report->relu_flips));
        // bf16 tiles may round exactly as the single core does: this layout differed by 0.32 in gradients
        // (two ReLU inputs on the other side of zero) until batch norm's tile statistics took one pass, and
        // by 1.7e-6 since. What the bf16 view adds is the baseline and the precision named (checked here).
        QVERIFY(std::isfinite(report->worst_gradient) && std::isfinite(report->worst_activation));
        QVERIFY(view.layerToolTip(0).contains(QStringLiteral("one tile")));
        QVERIFY2(view.summaryText().contains(QStringLiteral("bf16")), qPrintable(view.summaryText()));

        EquivalenceTileMap* map = view.tileMap();
        QCOMPARE(map->slabCount(), 2);
        QCOMPARE(map->tileCount(), 4);  // one D slab of 2 × 2
        QCOMPARE(map->slab(), 1);       // the middle one first
        QList<QSpinBox*> boxes = view.findChildren<QSpinBox*>();
        QSpinBox* slab_box = nullptr;
        for (QSpinBox* box : boxes) {
            if (box->toolTip().contains(QStringLiteral("slab"))) slab_box = box;
        }
        QVERIFY(slab_box && slab_box->isVisible());
        std::vector<std::int64_t> second;
        for (int i = 0; i < map->tileCount(); ++i) second.push_back(map->tileCore(i));
        QCOMPARE(second, (std::vector<std::int64_t>{4, 5, 6, 7}));
        slab_box->setValue(1);
        QCOMPARE(map->slab(), 0);
        std::vector<std::int64_t> first;
        for (int i = 0; i < map->tileCount(); ++i) first.push_back(map->tileCore(i));
        QCOMPARE(first, (std::vector<std::int64_t>{0, 1, 2, 3}));
        QVERIFY(map->toolTipAt(map->tileRect(3).center()).contains(QStringLiteral("core 3")));
        saveShot(&view, QStringLiteral("equivalence_view_3d_bf16.png"));
    }

    void scalesALargeExperimentDown() {
        experiment::Experiment e =
            experiment::load_experiment(std::filesystem::path(TESSERA_SOURCE_DIR) / "resources" / "experiments" / "unet3d_ct_256_16cores.json");
        EquivalenceView view;
        view.resize(1280, 760);
        view.show();
        view.setExperiment(e);
        QCOMPARE(view.pieces(), (std::vector<std::int64_t>{2, 2, 4}));
        view.setPrecision(graph::Precision::F32);
        view.setBaselineEnabled(false);
        view.setSteps(1);
        QSignalSpy finished(&view, &EquivalenceView::finished);
        QElapsedTimer timer;
        timer.start();
        view.compare();
        QVERIFY(finished.wait(compare_timeout_ms));
        qInfo("the 256³ experiment, scaled down, compared in %lld ms", static_cast<long long>(timer.elapsed()));
        QVERIFY2(view.errorText().isEmpty(), qPrintable(view.errorText()));
        const mesh::EquivalenceReport* report = view.report();
        QVERIFY(report);
        QCOMPARE(report->tiles.size(), std::size_t{16});
        std::int64_t voxels = 1;
        for (std::size_t axis = 2; axis < report->input.size(); ++axis) voxels *= report->input[axis];
        QVERIFY(voxels <= (std::int64_t{1} << 20));
        QVERIFY2(view.summaryText().contains(QStringLiteral("scaled down")) && view.summaryText().contains(QStringLiteral("256×256×256")),
                 qPrintable(view.summaryText()));
        QVERIFY(report->worst_activation <= EquivalenceView::fp32_tolerance);
        QCOMPARE(view.tileMap()->tileCount(), 8);  // a D slab of 2 × 4
        saveShot(&view, QStringLiteral("equivalence_view_experiment.png"));
    }

    void aNewerComparisonReplacesTheOlder() {
        EquivalenceView view;
        view.show();
        QSignalSpy finished(&view, &EquivalenceView::finished);
        view.setBuiltInModel(EquivalenceView::BuiltInModel::UNet2D);
        view.setPieces({4, 1});
        view.compare();
        view.setPieces({1, 2});
        view.compare();
        QVERIFY(finished.wait(compare_timeout_ms));
        QTest::qWait(500);
        QCOMPARE(finished.size(), 1);
        QVERIFY(view.report());
        QCOMPARE(view.report()->pieces, (std::vector<std::int64_t>{1, 2}));
        QCOMPARE(view.tileMap()->tileCount(), 2);
    }

    void anImpossibleLayoutIsExplained() {
        EquivalenceView view;
        view.show();
        QSignalSpy finished(&view, &EquivalenceView::finished);
        view.setBuiltInModel(EquivalenceView::BuiltInModel::UNet2D);
        view.setPieces({64, 1});  // 1-row tiles: the pools need every cut on a multiple of 4
        view.compare();
        QVERIFY(finished.wait(compare_timeout_ms));
        QVERIFY(!view.isBusy());
        QVERIFY(view.report() == nullptr);
        QVERIFY(!view.errorText().isEmpty());
        QVERIFY2(view.summaryText().contains(QStringLiteral("could not run")), qPrintable(view.summaryText()));
        QCOMPARE(view.tileMap()->tileCount(), 0);
        QVERIFY(view.activationSeries() == nullptr);
    }

    void closingDuringAComparisonStopsIt() {
        QElapsedTimer timer;
        timer.start();
        {
            EquivalenceView view;
            view.setBuiltInModel(EquivalenceView::BuiltInModel::UNet3D);
            view.setPieces({2, 2, 2});
            view.setSteps(10);
            view.compare();
            QTest::qWait(50);
        }  // the destructor stops the worker between stages and waits for it
        QVERIFY(timer.elapsed() < 20000);
    }
};

TESSERA_GL_TEST_MAIN(tst_EquivalenceView)
#include "tst_equivalence_view.moc"
