// Training from the studio: 10 steps of the 2D preset on the simulated cores, stopped and resumed from
// the Run dock; the charts, the timeline of a real step and the prediction overlay follow; the finished
// run opens again from its model_dir and its loss chart exports to CSV. And a detector: the RetinaNet
// shapes preset previewed with its objects and tiles, trained two steps, its boxes drawn in the Detections
// tab, its AP table, precision–recall chart and AP and box curves filled, and shown again when reopened.
// And a run on 2 MPI ranks launched from the Run dock (mpirun), watched through its model_dir, stopped
// and resumed there.
#include "gl_test_main.hpp"
#include "ui_test_support.hpp"
#include "model/partition_design.hpp"
#include "model/run_controller.hpp"
#include "run/metrics_log.hpp"
#include "run/model_dir_lock.hpp"
#include "widgets/detection_view.hpp"
#include "widgets/main_window.hpp"
#include "widgets/precision_recall_chart.hpp"
#include "widgets/run_charts.hpp"
#include "widgets/run_panel.hpp"
#include "widgets/slice_view.hpp"
#include "widgets/timeline_chart.hpp"

#include <QChartView>
#include <QComboBox>
#include <QListWidget>
#include <QTabWidget>
#include <QXYSeries>
#include <QDir>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTreeWidget>

#include <numeric>

using namespace tessera;
using namespace tessera::ui;

namespace {

// An experiment written to a file in `scratch` (MPI ranks read it from there); empty if it could not be.
QString saveExperiment(const QTemporaryDir& scratch, const QString& name, const char* json) {
    const QString path = scratch.filePath(name);
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly) || file.write(json) < 0) return {};
    return path;
}

// The studio's window at a size its docks fit, shown, with `experiment` open.
bool showWithExperiment(MainWindow& window, const QString& experiment) {
    window.resize(1500, 950);
    window.show();
    return QTest::qWaitForWindowExposed(&window) && window.openExperiment(experiment);
}

}  // namespace

class tst_TrainingStudio : public QObject {
    Q_OBJECT
private slots:
    void init() { QSettings().clear(); }

    // A run resumed past a corrupt checkpoint says so in the Run dock (what the CLI prints at its start):
    // the checkpoint it skipped and the one it resumed from; the notes stay with the run when it is opened
    // again, and a run without any shows none.
    void saysWhatARunSaidAtItsStart() {
        QTemporaryDir scratch;
        const QString experiment = saveExperiment(scratch, QStringLiteral("notes_run.json"), R"({"version": 1, "name": "notes",
                "model": {"kind": "unet", "depth": 3, "base_width": 8, "num_classes": 2, "batch_norm": true},
                "input": {"channels": 1, "size": [64, 64]}, "global_batch": 2, "num_cores_per_replica": 2, "num_replicas": 1,
                "input_partition_dims": [[1, 2, 1, 1], null], "device": "tpu_v3", "precision": "f32", "optimizer": {"kind": "adam"},
                "data": {"source": "synthetic_em", "image_size": [64, 64], "num_train_images": 2, "num_eval_images": 1,
                         "normalization": "zscore"},
                "schedule": {"kind": "constant", "learning_rate": 0.002}, "steps": 2, "steps_per_checkpoint": 1, "seed": 3})");
        QVERIFY(!experiment.isEmpty());
        const QString model_dir = scratch.filePath(QStringLiteral("notes_dir"));
        MainWindow window;
        QVERIFY(showWithExperiment(window, experiment));
        RunPanel* panel = window.runPanel();
        RunController* controller = window.runController();
        panel->modelDirEdit()->setText(model_dir);
        QSignalSpy finished(controller, &RunController::finished);
        QSignalSpy failed(controller, &RunController::failed);
        QTest::mouseClick(panel->startButton(), Qt::LeftButton);
        // Counted, not waited for: a run this small can end before a wait() would start, and wait() only
        // sees a signal that comes while it waits (1 run in 3 timed out so under load).
        QTRY_VERIFY_WITH_TIMEOUT(finished.count() + failed.count() > 0, 120000);
        QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.front().front().toString()));
        QTRY_VERIFY_WITH_TIMEOUT(!controller->isRunning(), 60000);
        QVERIFY2(panel->notesLabel()->isHidden(), qPrintable(panel->notesLabel()->text()));  // nothing to say

        // Step 2's checkpoint damaged: two more steps resume from step 1's.
        const QString newest = QDir(model_dir).filePath(QStringLiteral("model.ckpt-000002.safetensors"));
        {
            QFile file(newest);
            QVERIFY2(file.open(QIODevice::ReadWrite), qPrintable(newest));
            file.seek(file.size() / 2);
            char byte = 0;
            QVERIFY(file.getChar(&byte));
            file.seek(file.size() / 2);
            QVERIFY(file.putChar(static_cast<char>(byte ^ 0x5a)));
        }
        panel->stepsBox()->setValue(4);
        finished.clear();
        QTest::mouseClick(panel->startButton(), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(finished.count() + failed.count() > 0, 120000);
        QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.front().front().toString()));
        QTRY_VERIFY_WITH_TIMEOUT(!controller->isRunning(), 60000);
        const QString notes = panel->notesLabel()->text();
        QVERIFY(!panel->notesLabel()->isHidden());
        QVERIFY2(notes.contains(QStringLiteral("skipped the checkpoint of")), qPrintable(notes));
        QVERIFY2(notes.contains(QStringLiteral("resumed from the checkpoint of step 1")), qPrintable(notes));
        if (const QByteArray keep = qgetenv("TESSERA_SCREENSHOT_DIR"); !keep.isEmpty())
            window.grab().save(QString::fromLocal8Bit(keep) + QStringLiteral("/run_notes.png"));

        // Opened in another window: its last session's notes, from the model_dir's metrics.
        MainWindow other;
        other.show();
        QVERIFY(QTest::qWaitForWindowExposed(&other));
        QVERIFY(other.runPanel()->notesLabel()->isHidden());
        QVERIFY(other.openRun(model_dir.toStdString()));
        QVERIFY(!other.runPanel()->notesLabel()->isHidden());
        QVERIFY2(other.runPanel()->notesLabel()->text().contains(QStringLiteral("resumed from the checkpoint of step 1")),
                 qPrintable(other.runPanel()->notesLabel()->text()));
    }

    void trainsOnMpiRanksFromTheRunDock() {
        // A small experiment saved to a file: every rank reads it from there.
        QTemporaryDir scratch;
        const QString experiment = saveExperiment(scratch, QStringLiteral("mpi_run.json"), R"({"version": 1, "name": "2D U-Net on 2 MPI ranks",
                "model": {"kind": "unet", "depth": 3, "base_width": 8, "num_classes": 2, "batch_norm": true},
                "input": {"channels": 1, "size": [96, 96]}, "global_batch": 2, "num_cores_per_replica": 4, "num_replicas": 1,
                "input_partition_dims": [[1, 2, 2, 1], null], "device": "tpu_v3", "precision": "f32", "optimizer": {"kind": "adam"},
                "data": {"source": "synthetic_em", "image_size": [128, 128], "num_train_images": 4, "num_eval_images": 1,
                         "normalization": "zscore"},
                "schedule": {"kind": "constant", "learning_rate": 0.002}, "steps": 6, "steps_per_checkpoint": 1, "seed": 2})");
        QVERIFY(!experiment.isEmpty());
        const QString model_dir = scratch.filePath(QStringLiteral("mpi_run_dir"));
        MainWindow window;
        QVERIFY(showWithExperiment(window, experiment));
        RunPanel* panel = window.runPanel();
        panel->modelDirEdit()->setText(model_dir);
        panel->ranksBox()->setValue(2);
        MpiLauncher* launcher = panel->mpiLauncher();
        QSignalSpy started(launcher, &MpiLauncher::runStarted);
        QSignalSpy finished(launcher, &MpiLauncher::finished);

        // Train: mpirun starts, the run list says where it trains, the charts follow the model_dir.
        QTest::mouseClick(panel->startButton(), Qt::LeftButton);
        QVERIFY2(launcher->isRunning(), qPrintable(panel->statusLabel()->text()));
        QVERIFY(!panel->startButton()->isEnabled());
        QVERIFY(started.wait(120000));
        if (launcher->isRunning()) QCOMPARE(panel->runList()->topLevelItem(0)->text(1), QStringLiteral("training on 2 ranks"));
        QVERIFY(finished.wait(300000));
        QCOMPARE(finished.front().front().toInt(), 0);
        QCOMPARE(panel->runList()->topLevelItem(0)->text(1), QStringLiteral("finished"));
        QCOMPARE(panel->runList()->topLevelItem(0)->text(2), QStringLiteral("6"));
        QVERIFY2(panel->statusLabel()->text().contains(QStringLiteral("Finished on 2 MPI ranks")), qPrintable(panel->statusLabel()->text()));
        RunCharts* charts = window.runCharts();
        QTRY_VERIFY_WITH_TIMEOUT(charts->runs().contains(QStringLiteral("mpi_run_dir")), 10000);
        charts->refresh();
        QTRY_COMPARE_WITH_TIMEOUT(charts->series(QStringLiteral("mpi_run_dir"), RunCharts::Curve::RawLoss)->count(), 6, 10000);
        // The Run dock's timeline shows the step the ranks recorded before their last checkpoint (step_trace.json,
        // every core's events gathered on rank 0): 4 lanes, one per simulated core over both ranks.
        QTRY_VERIFY_WITH_TIMEOUT(panel->timeline()->title().contains(QStringLiteral("Step 6 ")), 60000);
        QVERIFY(!panel->timeline()->bars().empty());
        QCOMPARE(panel->timeline()->lanes(), 4);

        // More steps, stopped from the dock: rank 0 stops after its step with a checkpoint.
        panel->stepsBox()->setValue(100000);
        finished.clear();
        started.clear();
        QTest::mouseClick(panel->startButton(), Qt::LeftButton);
        QVERIFY(started.wait(120000));
        QTRY_VERIFY_WITH_TIMEOUT(run::read_metrics(model_dir.toStdString()).steps.size() >= 8, 120000);
        QTest::mouseClick(panel->stopButton(), Qt::LeftButton);
        QVERIFY(finished.wait(120000));
        QCOMPARE(panel->runList()->topLevelItem(0)->text(1), QStringLiteral("stopped"));
        const std::int64_t stopped_at = run::read_metrics(model_dir.toStdString()).steps.back().step;
        QVERIFY(QFile::exists(QDir(model_dir).filePath(QStringLiteral("model.ckpt-%1.safetensors").arg(stopped_at, 6, 10, QLatin1Char('0')))));
        QVERIFY(panel->startButton()->isEnabled());

        // An unsaved edit is not what the ranks would read: refused with what to do.
        QVERIFY(window.design()->setReplicas(2));
        QTest::mouseClick(panel->startButton(), Qt::LeftButton);
        QVERIFY(!launcher->isRunning());
        QVERIFY2(panel->statusLabel()->text().contains(QStringLiteral("Save the experiment first")), qPrintable(panel->statusLabel()->text()));
    }

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
        QVERIFY(!window.runPanel()->overlayRow()->isHidden());
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
        QTRY_VERIFY_WITH_TIMEOUT(!controller->isRunning(), 60000);  // generous: CI machines are loaded
        QCOMPARE(panel->runList()->topLevelItem(0)->text(1), QStringLiteral("stopped"));

        // The charts and the timeline of a real step got points.
        RunCharts* charts = window.runCharts();
        QVERIFY(charts->runs().contains(QStringLiteral("em_run")));
        charts->refresh();
        QVERIFY(charts->series(QStringLiteral("em_run"), RunCharts::Curve::RawLoss)->count() >= 3);
        QVERIFY(charts->series(QStringLiteral("em_run"), RunCharts::Curve::HostSeconds)->count() >= 3);
        QVERIFY(charts->series(QStringLiteral("em_run"), RunCharts::Curve::PredictedSeconds)->count() >= 3);
        QTRY_VERIFY_WITH_TIMEOUT(!panel->timeline()->bars().empty(), 60000);
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
        window.runPanel()->modelDirEdit()->setText(scratch.filePath(QStringLiteral("another_run")));
        QVERIFY(window.openRun(model_dir.toStdString()));
        QVERIFY(charts->runs().contains(QStringLiteral("em_run")));
        // The model_dir field names the opened run: Train resumes it.
        QCOMPARE(QDir(window.runPanel()->modelDirEdit()->text()).canonicalPath(), QDir(model_dir).canonicalPath());
        // The Run dock says what the opened run holds: its last step and loss, in the list and the status line.
        const QString last_step = QString::number(history.steps.back().step);
        QVERIFY2(window.runPanel()->statusLabel()->text().contains(QStringLiteral("trained to step ") + last_step),
                 qPrintable(window.runPanel()->statusLabel()->text()));
        const QList<QTreeWidgetItem*> rows = window.runPanel()->runList()->findItems(QStringLiteral("em_run"), Qt::MatchExactly);
        QCOMPARE(rows.size(), 1);
        QCOMPARE(rows.front()->text(2), last_step);
        QCOMPARE(rows.front()->text(3), QString::number(history.steps.back().loss, 'f', 4));
        QVERIFY2(rows.front()->text(4).startsWith(QStringLiteral("Dice 0.")), qPrintable(rows.front()->text(4)));  // its last evaluation
        const QString csv = scratch.filePath(QStringLiteral("loss.csv"));
        QVERIFY(charts->exportChart(RunCharts::Chart::Loss, csv));
        QFile file(csv);
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QStringList lines = QString::fromUtf8(file.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
        QVERIFY(lines.size() >= total_steps + 1);  // a header and a row per step
        QVERIFY(lines.front().contains(QStringLiteral("step")));
        window.design()->setSaved();
    }

    void trainsADetectorAndDrawsItsBoxes() {
        QTemporaryDir scratch;
        const QString model_dir = scratch.filePath(QStringLiteral("shapes_run"));
        MainWindow window;
        window.resize(1500, 950);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(window.openExperiment(QStringLiteral(TESSERA_SOURCE_DIR "/resources/experiments/retinanet_shapes_4way.json")));
        QVERIFY(window.runPanel()->overlayRow()->isHidden());  // boxes are drawn in the Detections tab, not as a label overlay

        // Before training: the data's first held-out image with its objects, and the 2×2 tiles with the
        // level-3 anchor centres each core owns (512 / 8 = 64 cells a side, 32 × 32 per core).
        DetectionView* view = window.detectionView();
        QCOMPARE(window.centralTabs()->currentWidget(), static_cast<QWidget*>(view));
        QVERIFY(view->hasPreview());
        QVERIFY(!view->shown().ground_truth.empty());
        view->setTilesShown(true);
        view->setAnchorLevel(3);
        QCOMPARE(static_cast<int>(view->shownTiles().size()), 4);
        for (const TileAnchors& tile : view->shownTiles()) QCOMPARE(static_cast<int>(tile.centres.size()), 32 * 32);
        view->setTilesShown(false);

        RunPanel* panel = window.runPanel();
        RunController* controller = window.runController();
        panel->modelDirEdit()->setText(model_dir);
        panel->stepsBox()->setValue(2);  // the last step evaluates
        QSignalSpy finished(controller, &RunController::finished);
        QSignalSpy failed(controller, &RunController::failed);
        QTest::mouseClick(panel->startButton(), Qt::LeftButton);
        QVERIFY(finished.wait(600000));
        QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.front().front().toString()));
        // The worker lets go of the model_dir's lock just after `finished` arrives (the run object is destroyed
        // on its thread); reopening before that would watch the run as one still training.
        QTRY_VERIFY_WITH_TIMEOUT(!run::ModelDirLock::holder(model_dir.toStdString()).has_value(), 60000);

        // The evaluation's boxes, as its file has them.
        QTRY_VERIFY_WITH_TIMEOUT(view->hasEvaluation(), 60000);
        const run::DetectionsFile* file = view->detections();
        QCOMPARE(file->step, 2);
        QCOMPARE(static_cast<int>(file->images.size()), 16);  // the preset's num_eval_images
        QCOMPARE(view->classList()->count(), 4);
        QVERIFY(!view->image().isNull());
        view->setMinimumScore(0.0);
        const run::DetectionsFileImage& first = file->images[0];
        std::size_t above = 0;
        for (const run::DetectionsFileDetection& d : first.detections) above += d.score >= 0.0 ? 1 : 0;
        QCOMPARE(view->shown().detections.size(), above);
        QCOMPARE(view->shown().ground_truth.size(), first.ground_truth.size());

        // Drawn: every object's left edge in its class colour (dashed), with no detection over them...
        view->setMinimumScore(1.0);
        QImage drawn = view->render();
        for (const run::DetectionsFileTruth& truth : first.ground_truth) {
            if (truth.box.height() < 24) continue;  // too few rows on screen to count
            QVERIFY(test::pixelsOnLeftEdge(*view, drawn, truth.box, DetectionPainter::classColor(truth.class_id)) > 3);
        }
        // ...and the most confident detection's edge, drawn last, in its class colour.
        view->setMinimumScore(0.0);
        drawn = view->render();
        if (!view->shown().detections.empty()) {
            const auto best = std::max_element(view->shown().detections.begin(), view->shown().detections.end(),
                                               [](const run::ShownBox& a, const run::ShownBox& b) { return a.score < b.score; });
            if (best->box.height() >= 24) {
                QVERIFY(test::pixelsOnLeftEdge(*view, drawn, best->box, DetectionPainter::classColor(best->class_id)) > 5);
            }
        }

        // The Run dock: all classes and each of the four, and the precision–recall chart; the charts: AP and boxes.
        QCOMPARE(panel->classTable()->rowCount(), 5);
        QCOMPARE(panel->classTable()->item(0, 0)->text(), QStringLiteral("all classes"));
        QVERIFY(panel->precisionRecallChart()->isVisible());
        RunCharts* charts = window.runCharts();
        charts->refresh();
        QCOMPARE(charts->series(QStringLiteral("shapes_run"), RunCharts::Curve::EvalDetections)->count(), 1);
        QCOMPARE(charts->series(QStringLiteral("shapes_run"), RunCharts::Curve::EvalObjects)->at(0).y(),
                 static_cast<double>(std::accumulate(file->images.begin(), file->images.end(), std::size_t{0},
                                                     [](std::size_t sum, const run::DetectionsFileImage& i) { return sum + i.ground_truth.size(); })));
        QVERIFY(charts->isChartAvailable(RunCharts::Chart::Boxes));

        // Reopened from its model_dir: the same boxes and scores.
        view->clear();
        panel->classTable()->setRowCount(0);
        QVERIFY(window.openRun(model_dir.toStdString()));
        QVERIFY(view->hasEvaluation());
        QCOMPARE(view->detections()->step, 2);
        QCOMPARE(panel->classTable()->rowCount(), 5);
        window.design()->setSaved();
    }
};

TESSERA_GL_TEST_MAIN(tst_TrainingStudio)
#include "tst_training_studio.moc"
