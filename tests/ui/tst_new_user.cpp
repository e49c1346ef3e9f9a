// A new user's whole path through the studio, driven only by input events on the widgets (QTest mouse
// and key events; the file dialogs answered by typing a path): open an image and its labels, open a
// preset from the Experiment menu, drag a partition cut, pick a planner row, train, stop, resume to the
// end, switch the overlay to the error map and export the run's report. What each step should have
// done is checked on the widgets and files; a screenshot of each step goes to the test's output folder
// (new_user_screens/ beside the test binary).
#include "gl_test_main.hpp"
#include "data/phantom.hpp"
#include "io/volume_io.hpp"
#include "model/partition_design.hpp"
#include "model/run_controller.hpp"
#include "model/viewer_model.hpp"
#include "run/metrics_log.hpp"
#include "widgets/main_window.hpp"
#include "widgets/planner_panel.hpp"
#include "widgets/run_panel.hpp"
#include "widgets/slice_view.hpp"
#include "widgets/vtk_gl_widget.hpp"

#include <QAbstractItemView>
#include <QComboBox>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileDialog>
#include <QLineEdit>
#include <QMenu>
#include <QMenuBar>
#include <QPointer>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStatusBar>
#include <QTabBar>
#include <QTableView>
#include <QTemporaryDir>
#include <QTimer>
#include <QTreeWidget>

#include <memory>

using namespace tessera;
using namespace tessera::ui;

namespace {

QString plain(QString text) { return text.remove(QLatin1Char('&')); }

// Answers the next file dialog by typing `path` into its file name field and pressing Return, as a user
// would. Polls until a dialog is up (it opens inside a nested event loop; the first one can take long on
// a fresh machine building its font and icon caches) and types again while that dialog stays open. The
// poll keeps to the dialog it first typed into and ends when that one closes: on a loaded machine the next
// dialog can open before the poll ever sees the first one gone, and typing this path into it would answer
// the wrong question. A dialog still open two minutes after it appeared is rejected, so the test fails
// instead of hanging. A dialog that never comes leaves the poll running harmlessly until the application
// ends; the test fails at its next check.
void answerFileDialog(const QString& path) {
    auto* timer = new QTimer(qApp);
    timer->setInterval(100);
    auto seen_at = std::make_shared<QElapsedTimer>(), typed_at = std::make_shared<QElapsedTimer>();
    auto activation_asked_at = std::make_shared<QElapsedTimer>();
    auto answered = std::make_shared<QPointer<QFileDialog>>();
    QObject::connect(timer, &QTimer::timeout, [timer, path, seen_at, typed_at, activation_asked_at, answered] {
        if (typed_at->isValid()) {
            // Answered: done once that dialog has closed (or been destroyed), whatever else is open.
            if (answered->isNull() || !(*answered)->isVisible()) {
                timer->deleteLater();
                return;
            }
        }
        // Any visible file dialog (whether or not the window system made it the active window).
        QFileDialog* dialog = answered->data();
        if (!dialog) {
            for (QWidget* widget : QApplication::topLevelWidgets()) {
                if (auto* candidate = qobject_cast<QFileDialog*>(widget); candidate && candidate->isVisible()) dialog = candidate;
            }
        }
        if (!dialog) return;
        if (!seen_at->isValid()) seen_at->start();
        if (seen_at->elapsed() > 120000) {
            qWarning("the file dialog did not take %s: rejected", qPrintable(path));
            dialog->reject();
            timer->deleteLater();
            return;
        }
        // Shown for a moment first, and a second between attempts.
        if (seen_at->elapsed() < 200 || (typed_at->isValid() && typed_at->elapsed() < 1000)) return;
        auto* name = dialog->findChild<QLineEdit*>(QStringLiteral("fileNameEdit"));
        if (!name) return;
        // Keystrokes reach the field only while its dialog is the active window. Typed without focus, the
        // path still changes the field's text, but the dialog's completion never drops the rows it selected
        // for the path's prefixes (/tmp, the scratch folder), and Return then opens one of those folders
        // instead of taking the file, every time (CI, stop 36). A user would click on the dialog first: ask
        // the window system to activate it, and after 3 s make it the active window as that click would.
        if (QApplication::activeWindow() != dialog) {
            if (!activation_asked_at->isValid()) {
                activation_asked_at->start();
                dialog->raise();
                dialog->activateWindow();
                return;
            }
            if (activation_asked_at->elapsed() < 3000) return;
            QApplication::setActiveWindow(dialog);
        }
        name->setFocus(Qt::MouseFocusReason);
        if (!name->hasFocus()) return;
        *answered = dialog;
        name->selectAll();
        QTest::keyClick(name, Qt::Key_Backspace);
        QTest::keyClicks(name, path);
        QTest::keyClick(name, Qt::Key_Return);
        typed_at->start();
    });
    timer->start();
}

// Clicks through the menu bar: "E&xperiment" ▸ "&Presets" ▸ "unet2d_em_4way" (ampersands ignored).
void clickMenuPath(QMainWindow& window, const QStringList& path) {
    QMenuBar* bar = window.menuBar();
    QAction* top = nullptr;
    for (QAction* action : bar->actions()) {
        if (plain(action->text()) == plain(path.front())) top = action;
    }
    QVERIFY2(top && top->menu(), qPrintable(QStringLiteral("no menu %1").arg(path.front())));
    QTest::mouseClick(bar, Qt::LeftButton, Qt::NoModifier, bar->actionGeometry(top).center());
    QMenu* menu = top->menu();
    QTRY_VERIFY_WITH_TIMEOUT(menu->isVisible(), 30000);
    for (int i = 1; i < path.size(); ++i) {
        QAction* item = nullptr;
        for (QAction* action : menu->actions()) {
            if (plain(action->text()) == plain(path[i])) item = action;
        }
        QVERIFY2(item, qPrintable(QStringLiteral("no item %1 in %2").arg(path[i], menu->title())));
        const QPoint centre = menu->actionGeometry(item).center();
        QTest::mouseMove(menu, centre);
        QTest::mouseClick(menu, Qt::LeftButton, Qt::NoModifier, centre);
        if (item->menu()) {
            menu = item->menu();
            QTRY_VERIFY_WITH_TIMEOUT(menu->isVisible(), 30000);
        }
    }
}

// Brings a tabbed dock to the front by clicking its tab.
void clickDockTab(QMainWindow& window, const QString& title) {
    for (QTabBar* bar : window.findChildren<QTabBar*>()) {
        for (int i = 0; i < bar->count(); ++i) {
            if (bar->isVisible() && plain(bar->tabText(i)) == title) {
                QTest::mouseClick(bar, Qt::LeftButton, Qt::NoModifier, bar->tabRect(i).center());
                return;
            }
        }
    }
}

// Replaces a field's text by typing: select all, then the new text.
void typeInto(QWidget* field, const QString& text) {
    QTest::mouseClick(field, Qt::LeftButton);
    QTest::keyClick(field, Qt::Key_A, Qt::ControlModifier);
    QTest::keyClicks(field, text);
}

}  // namespace

class tst_NewUser : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() {
        // The studio's own file dialogs (no desktop portal under Xvfb), so the test can type into them.
        QCoreApplication::setAttribute(Qt::AA_DontUseNativeDialogs);
        QSettings().clear();
    }

    void walksTheWholePathWithRealInput() {
        QTemporaryDir scratch;
        QVERIFY(scratch.isValid());
        const QDir screens(QCoreApplication::applicationDirPath() + QStringLiteral("/new_user_screens"));
        QDir().mkpath(screens.path());
        int shot = 0;
        MainWindow window;
        const auto screenshot = [&](const QString& name) {
            QCoreApplication::processEvents();
            const QString file = screens.filePath(QStringLiteral("%1_%2.png").arg(++shot, 2, 10, QLatin1Char('0')).arg(name));
            QVERIFY2(grabWithGlViews(&window).save(file), qPrintable(file));
        };

        // A user's image and label map on disk (a 2D CT section and its organs).
        PhantomOptions options;
        options.size = {256, 256, 1};
        const Phantom phantom = make_ct_phantom(options);
        const QString image = scratch.filePath(QStringLiteral("section.nii.gz")), labels = scratch.filePath(QStringLiteral("organs.nii.gz"));
        write_volume(phantom.volume, image.toStdString());
        write_label_map(phantom.labels, labels.toStdString());

        window.resize(1240, 760);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        screenshot(QStringLiteral("start"));

        // 1. File ▸ Open Image… and File ▸ Open Label Map….
        answerFileDialog(image);
        clickMenuPath(window, {QStringLiteral("&File"), QStringLiteral("&Open Image…")});
        QTRY_VERIFY_WITH_TIMEOUT(window.model()->hasVolume(), 180000);
        answerFileDialog(labels);
        clickMenuPath(window, {QStringLiteral("&File"), QStringLiteral("Open &Label Map…")});
        QTRY_VERIFY_WITH_TIMEOUT(window.model()->labelMap() != nullptr, 180000);
        screenshot(QStringLiteral("image_and_labels"));

        // 2. Experiment ▸ Presets ▸ unet2d_em_4way: the design docks come back with its 4 × 1 split.
        clickMenuPath(window, {QStringLiteral("E&xperiment"), QStringLiteral("&Presets"), QStringLiteral("unet2d_em_4way")});
        QTRY_VERIFY_WITH_TIMEOUT(window.design()->hasExperiment(), 20000);
        PartitionDesign* design = window.design();
        QCOMPARE(design->pieces(), (std::vector<std::int64_t>{4, 1}));
        screenshot(QStringLiteral("preset"));

        // 3. Drag the first H cut down in the axial view: an uneven split, snapped to the U-Net's stride.
        SliceView* axial = window.sliceView(SliceOrientation::Axial);
        QTest::qWait(100);
        const auto cut = axial->cutPosition(0, 1);
        QVERIFY(cut.has_value());
        const std::int64_t before = design->grid().boundaries[0][1];
        const QPoint start = cut->toPoint();
        QTest::mousePress(axial, Qt::LeftButton, Qt::NoModifier, start);
        for (int step = 1; step <= 5; ++step) QTest::mouseMove(axial, start + QPoint(0, 6 * step));
        QTest::mouseRelease(axial, Qt::LeftButton, Qt::NoModifier, start + QPoint(0, 30));
        QVERIFY2(design->grid().boundaries[0][1] != before, "the dragged cut did not move");
        QCOMPARE(design->grid().boundaries[0][1] % design->alignment()[0], 0);
        screenshot(QStringLiteral("cut_dragged"));

        // 4. The planner's sweep: click the 2×2 row; the design takes it.
        PlannerPanel* planner = window.plannerPanel();
        clickDockTab(window, QStringLiteral("Planner"));
        QTRY_VERIFY_WITH_TIMEOUT(!planner->isBusy() && planner->table()->model()->rowCount() > 1, 120000);
        QTableView* table = planner->table();
        int row_2x2 = -1;
        for (int row = 0; row < table->model()->rowCount() && row_2x2 < 0; ++row) {
            if (table->model()->index(row, PlannerPanel::PiecesColumn).data().toString() == QStringLiteral("2×2") &&
                table->model()->index(row, PlannerPanel::ReplicasColumn).data().toString() == QStringLiteral("1")) {
                row_2x2 = row;
            }
        }
        QVERIFY2(row_2x2 >= 0, "the planner lists the 2×2 layout");
        table->scrollTo(table->model()->index(row_2x2, 0));
        QTest::mouseClick(table->viewport(), Qt::LeftButton, Qt::NoModifier,
                          table->visualRect(table->model()->index(row_2x2, PlannerPanel::LayoutColumn)).center());
        QCOMPARE(design->pieces(), (std::vector<std::int64_t>{2, 2}));
        screenshot(QStringLiteral("planner_row"));

        // 5. The Run dock: 20 steps into a scratch model_dir, started and stopped with its buttons.
        clickDockTab(window, QStringLiteral("Run"));
        RunPanel* panel = window.runPanel();
        RunController* controller = window.runController();
        const QString model_dir = scratch.filePath(QStringLiteral("first_run"));
        typeInto(panel->modelDirEdit(), model_dir);
        QTest::keyClick(panel->modelDirEdit(), Qt::Key_Return);
        typeInto(panel->stepsBox(), QStringLiteral("20"));
        QTest::keyClick(panel->stepsBox(), Qt::Key_Tab);
        QCOMPARE(panel->stepsBox()->value(), 20);
        QCOMPARE(panel->modelDirEdit()->text(), model_dir);
        QSignalSpy steps(controller, &RunController::stepFinished);
        QSignalSpy finished(controller, &RunController::finished);
        QSignalSpy failed(controller, &RunController::failed);
        QTest::mouseClick(panel->startButton(), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(steps.count() >= 4 || !failed.isEmpty(), 180000);
        QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.front().front().toString()));
        QTest::mouseClick(panel->stopButton(), Qt::LeftButton);
        QVERIFY(finished.wait(180000));
        const auto stopped = finished.front().front().value<run::RunSummary>();
        QVERIFY(stopped.stopped);
        QVERIFY(stopped.last_step >= 4 && stopped.last_step < 20);
        QTRY_COMPARE_WITH_TIMEOUT(panel->runList()->topLevelItem(0)->text(1), QStringLiteral("stopped"), 60000);
        screenshot(QStringLiteral("stopped"));

        // 6. Start again: it resumes from the checkpoint and runs to step 20, then evaluates.
        finished.clear();
        QTest::mouseClick(panel->startButton(), Qt::LeftButton);
        QVERIFY(finished.wait(600000));
        QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.front().front().toString()));
        const auto done = finished.front().front().value<run::RunSummary>();
        QCOMPARE(done.first_step, stopped.last_step);
        QCOMPARE(done.last_step, 20);
        QVERIFY(done.has_eval);
        const run::MetricsHistory history = run::read_metrics(model_dir.toStdString());
        QCOMPARE(history.steps.back().step, 20);
        QCOMPARE(history.starts.size(), std::size_t{2});
        screenshot(QStringLiteral("finished"));

        // 7. The overlay switched to the error map with the combo box's popup.
        QComboBox* overlay = panel->overlayBox();
        QTRY_VERIFY(overlay->isVisible() && overlay->isEnabled());
        QTest::mouseClick(overlay, Qt::LeftButton);
        QAbstractItemView* list = overlay->view();
        QTRY_VERIFY(list->isVisible());
        // The popup takes no click within a double-click interval of opening (QComboBox's guard).
        QTest::qWait(QApplication::doubleClickInterval() + 100);
        const QModelIndex errors = list->model()->index(2, 0);
        QVERIFY(errors.data().toString().startsWith(QStringLiteral("Errors")));
        QTest::mouseClick(list->viewport(), Qt::LeftButton, Qt::NoModifier, list->visualRect(errors).center());
        QTRY_COMPARE(window.model()->overlaySource(), OverlaySource::Errors);
        screenshot(QStringLiteral("error_map"));

        // 8. Export the run's report with the Report… button and a typed file name.
        QSignalSpy exported(&window, &MainWindow::reportExported);
        const QString report = scratch.filePath(QStringLiteral("first_run_report.html"));
        answerFileDialog(report);
        QTest::mouseClick(panel->exportReportButton(), Qt::LeftButton);
        QVERIFY(exported.wait(120000));
        QCOMPARE(exported.front().at(0).toString(), report);
        QVERIFY2(exported.front().at(1).toStringList().isEmpty(), qPrintable(exported.front().at(1).toStringList().join(QStringLiteral("; "))));
        QFile written(report);
        QVERIFY(written.open(QIODevice::ReadOnly));
        const QByteArray html = written.readAll();
        for (const char* section : {"partition", "curves", "step-time", "memory", "timeline", "evaluation"}) {
            QVERIFY2(html.contains(QByteArray("<section id=\"") + section + "\">"), section);
        }
        QVERIFY(html.contains("input_partition_dims [[1, 2, 2, 1], None]"));
        QVERIFY(window.statusBar()->currentMessage().contains(QStringLiteral("Report written")));
        screenshot(QStringLiteral("report_exported"));
    }
};

TESSERA_GL_TEST_MAIN(tst_NewUser)
#include "tst_new_user.moc"
