// Training from the studio: 10 steps of the 2D preset on the simulated cores, stopped and resumed from
// the Run dock; the charts, the timeline of a real step and the prediction overlay follow; the finished
// run opens again from its model_dir and its loss chart exports to CSV.
#include "gl_test_main.hpp"
#include "model/partition_design.hpp"
#include "model/run_controller.hpp"
#include "run/metrics_log.hpp"
#include "widgets/main_window.hpp"
#include "widgets/run_charts.hpp"
#include "widgets/run_panel.hpp"
#include "widgets/slice_view.hpp"
#include "widgets/timeline_chart.hpp"

#include <QComboBox>
#include <QXYSeries>
#include <QFile>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTreeWidget>

using namespace tessera;
using namespace tessera::ui;

class tst_TrainingStudio : public QObject {
    Q_OBJECT
private slots:
    void init() { QSettings().clear(); }

    void trainsStopsResumesAndReopensARun() {
        // Few steps: on a slow shared machine a step of this preset takes seconds.
        constexpr int total_steps = 10;
        QTemporaryDir scratch;
        const QString model_dir = scratch.filePath(QStringLiteral("em_run"));
        MainWindow window;
        window.resize(1500, 950);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(window.openExperiment(QStringLiteral(TESSERA_SOURCE_DIR "/resources/experiments/unet2d_em_4way.json")));
        RunPanel* panel = window.runPanel();
        RunController* controller = window.runController();
        QVERIFY(panel->startButton()->isEnabled());
        panel->modelDirEdit()->setText(model_dir);
        panel->stepsBox()->setValue(total_steps);

        // Start, and stop after a few steps: the run ends after its step with a checkpoint.
        QSignalSpy steps(controller, &RunController::stepFinished);
        QSignalSpy finished(controller, &RunController::finished);
        QSignalSpy failed(controller, &RunController::failed);
        QTest::mouseClick(panel->startButton(), Qt::LeftButton);
        QVERIFY(controller->isRunning());
        QVERIFY(!panel->startButton()->isEnabled());
        QTRY_VERIFY_WITH_TIMEOUT(steps.count() >= 3 || !failed.isEmpty(), 120000);
        QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.front().front().toString()));
        QTest::mouseClick(panel->stopButton(), Qt::LeftButton);
        QVERIFY(finished.wait(120000));
        const auto stopped = finished.front().front().value<run::RunSummary>();
        QVERIFY(stopped.stopped);
        QVERIFY(stopped.last_step >= 3 && stopped.last_step < total_steps);
        QTRY_VERIFY(!controller->isRunning());
        QCOMPARE(panel->runList()->topLevelItem(0)->text(1), QStringLiteral("stopped"));

        // The charts and the timeline of a real step got points.
        RunCharts* charts = window.runCharts();
        QVERIFY(charts->runs().contains(QStringLiteral("em_run")));
        charts->refresh();
        QVERIFY(charts->series(QStringLiteral("em_run"), RunCharts::Curve::RawLoss)->count() >= 3);
        QVERIFY(charts->series(QStringLiteral("em_run"), RunCharts::Curve::HostSeconds)->count() >= 3);
        QVERIFY(charts->series(QStringLiteral("em_run"), RunCharts::Curve::PredictedSeconds)->count() >= 3);
        QTRY_VERIFY(!panel->timeline()->bars().empty());
        QCOMPARE(panel->timeline()->lanes(), 4);
        // Any kept step's real events: step 2's.
        panel->timelineStepBox()->setValue(2);
        QVERIFY(panel->timeline()->title().contains(QStringLiteral("Step 2 ")));

        // Resume to the end: the rest of the steps, then the evaluation and its overlay.
        finished.clear();
        QTest::mouseClick(panel->startButton(), Qt::LeftButton);
        QVERIFY(finished.wait(300000));
        QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.front().front().toString()));
        const auto done = finished.front().front().value<run::RunSummary>();
        QVERIFY(!done.stopped);
        QCOMPARE(done.first_step, stopped.last_step);
        QCOMPARE(done.last_step, total_steps);
        QCOMPARE(panel->runList()->topLevelItem(0)->text(1), QStringLiteral("finished"));
        QVERIFY(panel->classTable()->rowCount() >= 2);
        ViewerModel* viewer = window.model();
        QVERIFY(viewer->prediction() != nullptr);
        QCOMPARE(viewer->overlaySource(), OverlaySource::Prediction);
        QVERIFY(viewer->shownLabels() != nullptr);
        // The overlay is drawn: switching to the error map changes the axial view.
        SliceView* axial = window.sliceView(SliceOrientation::Axial);
        const QImage prediction_image = axial->grab().toImage();
        viewer->setOverlaySource(OverlaySource::Errors);
        QTest::qWait(20);
        QVERIFY(axial->grab().toImage() != prediction_image);
        viewer->setOverlaySource(OverlaySource::Prediction);

        // Every step of both sessions is in the metrics, in order.
        const run::MetricsHistory history = run::read_metrics(model_dir.toStdString());
        QCOMPARE(static_cast<int>(history.steps.size()), total_steps);
        for (int i = 0; i < total_steps; ++i) QCOMPARE(history.steps[static_cast<std::size_t>(i)].step, i + 1);

        // Opened again from its model_dir: its charts, exported as CSV with one row per step.
        charts->clear();
        QVERIFY(window.openRun(model_dir.toStdString()));
        QVERIFY(charts->runs().contains(QStringLiteral("em_run")));
        const QString csv = scratch.filePath(QStringLiteral("loss.csv"));
        QVERIFY(charts->exportChart(RunCharts::Chart::Loss, csv));
        QFile file(csv);
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QStringList lines = QString::fromUtf8(file.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
        QVERIFY(lines.size() >= total_steps + 1);  // a header and a row per step
        QVERIFY(lines.front().contains(QStringLiteral("step")));
        window.design()->setSaved();
    }
};

TESSERA_GL_TEST_MAIN(tst_TrainingStudio)
#include "tst_training_studio.moc"
