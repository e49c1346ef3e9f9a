// Every chart of the studio at the default window size (1240×760, what a first start opens with): no
// chart title, axis title, tick label or legend entry is cut. Qt Charts cuts a text that does not fit
// its place and ends it with "..."; the scene's text items hold what is drawn, so they tell.
#include "gl_test_main.hpp"
#include "widgets/main_window.hpp"
#include "widgets/equivalence_view.hpp"
#include "widgets/planner_panel.hpp"
#include "widgets/precision_recall_chart.hpp"
#include "widgets/run_panel.hpp"
#include "widgets/run_charts.hpp"

#include <QChart>
#include <QChartView>
#include <QDockWidget>
#include <QGraphicsScene>
#include <QGraphicsSimpleTextItem>
#include <QGraphicsTextItem>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>

#include <cmath>

using namespace tessera;
using namespace tessera::ui;

namespace {

// The visible texts of a chart that Qt Charts cut short.
QStringList cutTexts(QChartView* view) {
    QStringList cut;
    for (QGraphicsItem* item : view->scene()->items()) {
        if (!item->isVisible()) continue;
        QString text;
        if (auto* rich = dynamic_cast<QGraphicsTextItem*>(item)) text = rich->toPlainText();
        if (auto* simple = dynamic_cast<QGraphicsSimpleTextItem*>(item)) text = simple->text();
        if (text.contains(QStringLiteral("...")) || text.contains(QChar(0x2026))) cut << text;
    }
    return cut;
}

QString describe(QChartView* view) {
    return QStringLiteral("'%1' (%2×%3 px)").arg(view->chart()->title()).arg(view->width()).arg(view->height());
}

// Empty when every text of the chart is whole; else the chart and what it cut.
QString cutReport(QChartView* view) {
    const QStringList cut = cutTexts(view);
    return cut.isEmpty() ? QString() : describe(view) + QStringLiteral(" cuts: ") + cut.join(QStringLiteral(" | "));
}

// A dock in front (with no experiment open, the design and run docks wait hidden).
QDockWidget* bringDock(MainWindow& window, const char* name) {
    auto* dock = window.findChild<QDockWidget*>(QString::fromLatin1(name));
    if (!dock) return nullptr;
    dock->show();
    dock->raise();
    return dock;
}

run::StepRecord step(std::int64_t index) {
    run::StepRecord s;
    s.step = index;
    s.loss = 1.5 * std::exp(-static_cast<double>(index) / 300.0) + 0.1;
    s.learning_rate = 1e-3 * std::min(1.0, static_cast<double>(index) / 50.0);
    s.loss_scale = 32768.0;
    s.host_seconds = 0.42 + 0.01 * static_cast<double>(index % 7);
    s.predicted_seconds = 0.0046;
    s.images_per_second = 2.0 / s.host_seconds;
    s.core_peak_bytes = std::vector<std::int64_t>(8, std::int64_t{1} << 30);
    s.wall_time = 1.7e9 + 0.45 * static_cast<double>(index);
    return s;
}

}  // namespace

class tst_ChartLabels : public QObject {
    Q_OBJECT

private slots:
    void init() { QSettings().clear(); }  // the default layout, not a saved one

    void plannerChartsFitAtTheDefaultSize() {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY2(window.size() == QSize(1240, 760), qPrintable(QStringLiteral("window %1×%2").arg(window.width()).arg(window.height())));
        // 10 layouts (their pieces written under the bars) and 15 (too many: numbered as in the table).
        for (const char* name : {"unet3d_ct_8way.json", "unet3d_ct_256_16cores.json"}) {
            QSignalSpy planned(window.plannerPanel(), &PlannerPanel::planned);
            QVERIFY(window.openExperiment(QStringLiteral(TESSERA_SOURCE_DIR "/resources/experiments/") + QString::fromLatin1(name)));
            QVERIFY(planned.wait(120000));
            QTest::qWait(200);  // the charts lay out once shown
            for (QChartView* view : {window.plannerPanel()->layoutChart(), window.plannerPanel()->scalingChart()}) {
                QVERIFY2(view->isVisible(), qPrintable(describe(view)));
                const QString cut = cutReport(view);
                QVERIFY2(cut.isEmpty(), qPrintable(QString::fromLatin1(name) + QStringLiteral(": ") + cut));
            }
        }
    }

    void trainingChartsFitAtTheDefaultSize() {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(bringDock(window, "trainingDock"));
        RunCharts* charts = window.runCharts();
        const QString run = QStringLiteral("unet3d_ct_8way");
        for (std::int64_t index = 1; index <= 1200; ++index) charts->addStep(run, step(index));
        for (std::int64_t index = 200; index <= 1200; index += 200) {
            run::EvalRecord eval;
            eval.step = index;
            eval.loss = 0.4 + 40.0 / static_cast<double>(index);
            eval.mean_dice = 0.9 - 30.0 / static_cast<double>(index);
            charts->addEval(run, eval);
        }
        charts->setCoreMemory(run, std::vector<std::int64_t>(8, std::int64_t{3} << 29), std::int64_t{16} << 30);
        // A detector beside it, so the boxes chart shows too.
        const QString detector = QStringLiteral("retinanet_shapes_4way");
        for (std::int64_t index = 1; index <= 400; ++index) charts->addStep(detector, step(index));
        for (std::int64_t index = 100; index <= 400; index += 100) {
            run::EvalRecord eval;
            eval.step = index;
            eval.loss = 1.1 - static_cast<double>(index) / 1000.0;
            eval.is_detection = true;
            eval.detection.ap = 0.2 + static_cast<double>(index) / 1000.0;
            eval.detection.ap50 = 0.4 + static_cast<double>(index) / 1000.0;
            eval.detection.num_detections = 900 + index;
            eval.detection.num_true_positives = 300 + index / 2;
            eval.detection.num_ground_truth = 1200;
            charts->addEval(detector, eval);
        }
        charts->setHostPrediction(run, 0.44, 0.05);
        charts->refresh();
        QTest::qWait(200);
        for (int c = 0; c < RunCharts::chart_count; ++c) {
            const auto chart = static_cast<RunCharts::Chart>(c);
            QVERIFY(charts->isChartAvailable(chart));
            charts->showChart(chart);  // the charts beside the loss are tabs
            QTest::qWait(100);
            QChartView* view = charts->chartView(chart);
            QVERIFY2(view->isVisible(), qPrintable(describe(view)));
            const QString cut = cutReport(view);
            QVERIFY2(cut.isEmpty(), qPrintable(cut));
        }
    }

    void equivalenceChartFitsAtTheDefaultSize() {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(bringDock(window, "equivalenceDock"));
        EquivalenceView* view = window.equivalenceView();
        view->setBuiltInModel(EquivalenceView::BuiltInModel::UNet2D);
        view->setPieces({2, 2});
        QSignalSpy finished(view, &EquivalenceView::finished);
        QTest::mouseClick(view->compareButton(), Qt::LeftButton);
        QVERIFY(finished.wait(600000));
        QVERIFY2(view->errorText().isEmpty(), qPrintable(view->errorText()));
        QTest::qWait(200);
        QVERIFY2(view->chartView()->isVisible(), qPrintable(describe(view->chartView())));
        const QString cut = cutReport(view->chartView());
        QVERIFY2(cut.isEmpty(), qPrintable(cut));
    }

    void precisionRecallChartFitsAtTheDefaultSize() {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(bringDock(window, "runDock"));
        std::vector<run::DetectionClassRecord> classes;
        for (const char* name : {"disc", "square", "triangle"}) {
            run::DetectionClassRecord record;
            record.name = name;
            record.num_ground_truth = 40;
            record.ap = 0.41;
            record.ap50 = 0.72;
            for (int r = 0; r <= 100; ++r) record.precision_at_iou_50.push_back(r <= 80 ? 1.0 - 0.004 * r : -1.0);
            classes.push_back(record);
        }
        PrecisionRecallChart* chart = window.runPanel()->precisionRecallChart();
        chart->setEvaluation(classes, 400);
        chart->show();
        QTest::qWait(200);
        if (!chart->isVisible()) QSKIP("the precision-recall chart is not on screen in the default run dock");
        const QString cut = cutReport(chart);
        QVERIFY2(cut.isEmpty(), qPrintable(cut));
    }
};

TESSERA_GL_TEST_MAIN(tst_ChartLabels)
#include "tst_chart_labels.moc"
