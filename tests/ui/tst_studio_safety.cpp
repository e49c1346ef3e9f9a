// The studio never aborts and never writes into another process's run: an exception reaching the event
// loop is shown and the work goes on; a model_dir that another run holds is watched read-only; a volume
// that opens with NaN voxels says so.
#include "gl_test_main.hpp"
#include "io/volume_io.hpp"
#include "run/model_dir_lock.hpp"
#include "widgets/main_window.hpp"
#include "widgets/run_charts.hpp"
#include "widgets/run_panel.hpp"
#include "widgets/studio_application.hpp"

#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSurfaceFormat>
#include <QTemporaryDir>
#include <QTimer>
#include <QTest>
#include <QTreeWidget>

#include <cmath>
#include <fstream>
#include <sys/stat.h>

using namespace tessera;
using namespace tessera::ui;

namespace {

// Throws from its event handler, as a slot with a bug would.
class Thrower : public QObject {
public:
    explicit Thrower(bool internal) : m_internal(internal) {}
    bool event(QEvent* event) override {
        if (event->type() == QEvent::User) {
            if (m_internal) TESSERA_FAIL("a state the code never reaches");
            throw std::runtime_error("vector::at out of range");
        }
        return QObject::event(event);
    }

private:
    bool m_internal;
};

void write_metrics(const std::filesystem::path& model_dir, int steps) {
    std::filesystem::create_directories(model_dir);
    std::ofstream out(model_dir / "metrics.jsonl");
    for (int step = 1; step <= steps; ++step) {
        out << R"({"kind": "train", "step": )" << step << R"(, "loss": )" << 1.0 / step << R"(, "host_seconds": 0.01})" << "\n";
    }
}

}  // namespace

class tst_StudioSafety : public QObject {
    Q_OBJECT
private slots:
    void init() { QSettings().clear(); }

    void anExceptionInAHandlerIsShownAndTheStudioGoesOn() {
        auto* app = qobject_cast<StudioApplication*>(QCoreApplication::instance());
        QVERIFY(app != nullptr);
        Thrower internal(true), standard(false);
        QEvent first(QEvent::User);
        QCoreApplication::sendEvent(&internal, &first);  // through notify(): caught there
        QVERIFY(app->lastCaught().contains(QStringLiteral("a state the code never reaches")));
        QVERIFY(app->lastCaught().contains(QStringLiteral("please report")));
        QEvent second(QEvent::User);
        QCoreApplication::sendEvent(&standard, &second);
        QVERIFY(app->lastCaught().contains(QStringLiteral("vector::at out of range")));
        // Still alive and serving events.
        QTimer::singleShot(0, [] {});
        QTest::qWait(10);
    }

    void aRunHeldByAnotherProcessIsWatchedReadOnly() {
        QTemporaryDir scratch;
        const std::filesystem::path model_dir = scratch.filePath(QStringLiteral("elsewhere")).toStdString();
        write_metrics(model_dir, 3);
        auto lock = std::make_unique<run::ModelDirLock>(model_dir, "tessera-cli train other.json");

        MainWindow window;
        window.resize(1400, 900);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(window.openExperiment(QStringLiteral(TESSERA_SOURCE_DIR "/resources/experiments/unet2d_em_4way.json")));
        RunPanel* panel = window.runPanel();
        // Start on the held folder: nothing starts, the folder is watched instead.
        panel->modelDirEdit()->setText(QString::fromStdString(model_dir.string()));
        QTest::mouseClick(panel->startButton(), Qt::LeftButton);
        QVERIFY(!window.runController()->isRunning());
        QCOMPARE(window.watchedRun(), std::filesystem::absolute(model_dir));
        QVERIFY2(panel->statusLabel()->text().contains(QStringLiteral("tessera-cli train other.json")), qPrintable(panel->statusLabel()->text()));
        const QList<QTreeWidgetItem*> items = panel->runList()->findItems(QStringLiteral("elsewhere"), Qt::MatchExactly);
        QCOMPARE(items.size(), 1);
        QCOMPARE(items.front()->text(1), QStringLiteral("training elsewhere"));
        QVERIFY(window.runCharts()->runs().contains(QStringLiteral("elsewhere")));
        QVERIFY(!std::filesystem::exists(model_dir / "checkpoint"));  // nothing written into it

        // The other run writes on, then ends: the charts follow, and the run becomes an ended one.
        write_metrics(model_dir, 6);
        lock.reset();
        QTRY_VERIFY_WITH_TIMEOUT(window.watchedRun().empty(), 10000);
        QCOMPARE(items.front()->text(1), QStringLiteral("ended"));
        window.design()->setSaved();
    }

    void aVolumeWithNaNVoxelsOpensWithAWarning() {
        QTemporaryDir scratch;
        Volume volume = make_volume(ImageGeometry{{8, 8, 4}, {1, 1, 1}, {0, 0, 0}, {1, 0, 0, 0, 1, 0, 0, 0, 1}});
        float* voxels = volume.voxels.data<float>();
        for (std::int64_t v = 0; v < volume.voxels.num_elements(); ++v) voxels[v] = static_cast<float>(v);
        voxels[10] = std::nanf("");
        const QString path = scratch.filePath(QStringLiteral("nan.nii.gz"));
        write_volume(volume, path.toStdString());

        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(window.openImage(path));
        QVERIFY2(window.lastWarning().contains(QStringLiteral("1 voxel is NaN or infinite (the first at i, j, k = 2, 1, 0)")),
                 qPrintable(window.lastWarning()));
        // A FIFO is refused by name instead of hanging the studio.
        const QString pipe = scratch.filePath(QStringLiteral("pipe.nii.gz"));
        QCOMPARE(::mkfifo(pipe.toLocal8Bit().constData(), 0600), 0);
        QVERIFY(!window.openImage(pipe));
        QVERIFY2(window.lastError().contains(QStringLiteral("FIFO")), qPrintable(window.lastError()));
    }
};

TESSERA_GL_TEST_MAIN_WITH(tst_StudioSafety, StudioApplication)

#include "tst_studio_safety.moc"
