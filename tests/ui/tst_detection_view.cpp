// The Detections tab's view on a hand-made evaluation: boxes drawn where the file puts them, in the
// colours the legend promises; the score slider, class filter and outcome colouring change what is drawn
// and counted; the tile overlay shows each core's owned anchor centres; the PR chart and the Run dock's
// table show a detector's scores; a corrupt file is refused with its name.
#include "gl_test_main.hpp"
#include "ui_test_support.hpp"
#include "detection/anchors.hpp"
#include "widgets/detection_view.hpp"
#include "widgets/precision_recall_chart.hpp"

#include <QComboBox>
#include <QLineSeries>
#include <QListWidget>
#include <QSlider>
#include <QTemporaryDir>

#include <fstream>

using namespace tessera;
using namespace tessera::ui;
using tessera::ui::test::pixelsOnLeftEdge;  // ui_test_support.hpp

namespace {

// A 200×100 grey image, classes "disc" (0) and "square" (1). Objects g0 disc [20,20,60,60], g1 square
// [120,30,180,90]. Detections: d0 disc 0.9 matched g0, d1 square 0.4 unmatched (a false positive at
// [100,10,140,50]); g1 has no detection and is missed.
void writeEvaluation(const QString& folder) {
    QImage image(200, 100, QImage::Format_RGB32);
    image.fill(QColor(128, 128, 128));
    QVERIFY(image.save(folder + QStringLiteral("/eval_0_image.png")));
    std::ofstream(QString(folder + QStringLiteral("/detections_step_7.json")).toStdString()) << R"({
 "step": 7, "classes": ["disc", "square"], "match_iou_threshold": 0.5, "score_threshold": 0.05,
 "images": [{"name": "eval 0", "image": "eval_0_image.png", "width": 200, "height": 100,
   "ground_truth": [{"box": [20, 20, 60, 60], "class": 0, "found": true},
                    {"box": [120, 30, 180, 90], "class": 1, "found": false}],
   "detections": [{"box": [20, 20, 60, 60], "class": 0, "score": 0.9, "ground_truth": 0, "iou": 1.0},
                  {"box": [100, 10, 140, 50], "class": 1, "score": 0.4, "ground_truth": -1, "iou": 0}]}]
})";
}

}  // namespace

class tst_DetectionView : public QObject {
    Q_OBJECT
private slots:
    void drawsBoxesAndFiltersThem() {
        QTemporaryDir folder;
        writeEvaluation(folder.path());
        DetectionView view;
        view.resize(900, 500);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        QVERIFY(view.showEvaluation((folder.path() + QStringLiteral("/detections_step_7.json")).toStdString()));
        QVERIFY(view.hasEvaluation());
        QCOMPARE(view.classList()->count(), 2);
        QVERIFY(!view.image().isNull());
        view.setMinimumScore(0.0);
        QCOMPARE(static_cast<int>(view.shown().detections.size()), 2);
        // Each class's counts beside its name, in words that agree with them.
        QCOMPARE(view.classList()->item(0)->text(), QStringLiteral("disc — 1 object, 1 detection"));
        QCOMPARE(view.classList()->item(1)->text(), QStringLiteral("square — 1 object, 1 detection"));
        QVERIFY2(view.summaryText().contains(QStringLiteral("2 detections with score ≥ 0.00: 1 matched, 1 false positive ·")),
                 qPrintable(view.summaryText()));
        QVERIFY(view.summaryText().contains(QStringLiteral("1 of 2 objects missed")));

        // By class: the disc detection's edge in the disc colour, the square's in the square colour.
        const detection::Box disc{20, 20, 60, 60}, false_positive{100, 10, 140, 50}, missed{120, 30, 180, 90};
        QImage drawn = view.render();
        QVERIFY(pixelsOnLeftEdge(view, drawn, disc, DetectionPainter::classColor(0)) > 10);
        QVERIFY(pixelsOnLeftEdge(view, drawn, false_positive, DetectionPainter::classColor(1)) > 10);
        // By outcome: matched green, the false positive red, the missed square orange (dashed: fewer pixels).
        view.setColouring(BoxColouring::ByOutcome);
        drawn = view.render();
        QVERIFY(pixelsOnLeftEdge(view, drawn, disc, DetectionPainter::outcomeColor(run::BoxOutcome::Matched)) > 10);
        QVERIFY(pixelsOnLeftEdge(view, drawn, false_positive, DetectionPainter::outcomeColor(run::BoxOutcome::FalsePositive)) > 10);
        QVERIFY(pixelsOnLeftEdge(view, drawn, missed, DetectionPainter::outcomeColor(run::BoxOutcome::Missed)) > 5);
        QCOMPARE(pixelsOnLeftEdge(view, drawn, false_positive, DetectionPainter::outcomeColor(run::BoxOutcome::Matched)), 0);

        // Above the false positive's score it goes, from the drawing and the counts.
        view.setMinimumScore(0.5);
        drawn = view.render();
        QCOMPARE(static_cast<int>(view.shown().detections.size()), 1);
        QCOMPARE(pixelsOnLeftEdge(view, drawn, false_positive, DetectionPainter::outcomeColor(run::BoxOutcome::FalsePositive)), 0);
        QVERIFY(view.summaryText().contains(QStringLiteral("0 false positives")));
        // Squares hidden: the missed square leaves too.
        view.setClassShown(1, false);
        drawn = view.render();
        QCOMPARE(static_cast<int>(view.shown().ground_truth.size()), 1);
        QCOMPARE(pixelsOnLeftEdge(view, drawn, missed, DetectionPainter::outcomeColor(run::BoxOutcome::Missed)), 0);
        QVERIFY(view.summaryText().contains(QStringLiteral("0 of 1 objects missed")));
        view.setClassShown(1, true);

        // Hovering a box names it.
        const QPointF inside = view.canvas()->frame().toScreen(40, 40);
        QVERIFY(view.canvas()->describeAt(inside).contains(QStringLiteral("disc")));
        QVERIFY(view.canvas()->describeAt(inside).contains(QStringLiteral("IoU 1.00")));
    }

    void showsEachTilesOwnedAnchors() {
        QTemporaryDir folder;
        writeEvaluation(folder.path());
        DetectionView view;
        view.resize(900, 500);
        QVERIFY(view.showEvaluation((folder.path() + QStringLiteral("/detections_step_7.json")).toStdString()));
        // 2 × 2 cores over 128 × 256: level 3 (stride 8) has 16 × 32 cells, each core owns 8 × 16 of them.
        const partition::SpatialGrid grid{{{0, 64, 128}, {0, 128, 256}}};
        view.setPartition(grid, detection::make_anchors(128, 256));
        view.setTilesShown(true);
        view.setAnchorLevel(3);
        QCOMPARE(static_cast<int>(view.shownTiles().size()), 4);
        std::size_t cells = 0;
        for (const TileAnchors& tile : view.shownTiles()) {
            QCOMPARE(static_cast<int>(tile.centres.size()), 8 * 16);
            for (const QPointF& centre : tile.centres) QVERIFY(tile.region.contains(centre));
            cells += tile.centres.size();
        }
        QCOMPARE(cells, std::size_t{16 * 32});
        QCOMPARE(view.shownTiles()[3].region, QRectF(128, 64, 128, 64));
        view.setAnchorLevel(7);  // stride 128: one cell per tile row, 1 × 2 cells over the input
        std::size_t coarse = 0;
        for (const TileAnchors& tile : view.shownTiles()) coarse += tile.centres.size();
        QCOMPARE(coarse, std::size_t{1 * 2});
        view.setAnchorLevel(0);  // tiles only: the four regions, no centres
        QCOMPARE(static_cast<int>(view.shownTiles().size()), 4);
        QCOMPARE(view.shownTiles()[3].region, QRectF(128, 64, 128, 64));
        for (const TileAnchors& tile : view.shownTiles()) QVERIFY(tile.centres.empty());
    }

    void refusesACorruptFileByName() {
        QTemporaryDir folder;
        const QString file = folder.filePath(QStringLiteral("detections_step_9.json"));
        std::ofstream(file.toStdString()) << R"({"step": 9, "classes": [)";
        DetectionView view;
        QVERIFY(!view.showEvaluation(file.toStdString()));
        QVERIFY(!view.hasEvaluation());
        QVERIFY(view.statusText().contains(QStringLiteral("detections_step_9.json")));
        QVERIFY(view.statusText().contains(QStringLiteral("not valid JSON")));
    }

    void precisionRecallCurvesFollowTheRecords() {
        PrecisionRecallChart chart;
        std::vector<run::DetectionClassRecord> classes(3);
        classes[0].name = "disc";
        classes[0].num_ground_truth = 4;
        classes[0].ap50 = 0.75;
        classes[0].precision_at_iou_50.assign(101, 1.0);
        for (std::size_t r = 76; r < 101; ++r) classes[0].precision_at_iou_50[r] = 0.0;  // recall stops at 0.75
        classes[1].name = "square";  // no held-out squares: no curve
        classes[2].name = "cross";
        classes[2].num_ground_truth = 2;
        classes[2].precision_at_iou_50.assign(101, 0.5);
        chart.setEvaluation(classes, 40);
        QCOMPARE(chart.curveCount(), 2);
        QVERIFY(chart.curve(1) == nullptr);
        QCOMPARE(chart.curve(0)->count(), 101);
        QCOMPARE(chart.curve(0)->at(75), QPointF(0.75, 1.0));
        QCOMPARE(chart.curve(0)->at(76).y(), 0.0);
        QCOMPARE(chart.curve(2)->at(50), QPointF(0.5, 0.5));
        QVERIFY(chart.chart()->title().contains(QStringLiteral("step 40")));
        chart.highlightClass(2);
        QVERIFY(chart.curve(2)->pen().widthF() > chart.curve(0)->pen().widthF());
    }
};

TESSERA_GL_TEST_MAIN(tst_DetectionView)
#include "tst_detection_view.moc"
