// Browsing slices of a 256³ volume while a run trains on the simulated cores: the frame time of the
// studio's slice views with and without training in the background (the run lives on a worker
// thread; the GUI thread only receives copied records).
//
// Usage: bm_browse_while_training [--frames 150]   (needs an X server: make bench runs it under Xvfb)
// Prints one line per condition: case=<idle|training> frames=<n> median_ms=<x> p95_ms=<x> max_ms=<x>
// and the steps the run made meanwhile.
#include "studio_bench_support.hpp"
#include "model/partition_design.hpp"
#include "model/run_controller.hpp"
#include "widgets/main_window.hpp"
#include "widgets/run_panel.hpp"
#include "widgets/slice_view.hpp"

#include <QApplication>
#include <QDockWidget>
#include <QLineEdit>
#include <QSignalSpy>
#include <QSpinBox>
#include <QSurfaceFormat>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

using namespace tessera;
using namespace tessera::ui;
using Clock = std::chrono::steady_clock;

namespace {

struct FrameStats {
    double median = 0, p95 = 0, max = 0;
};

// Walks the axial view through `frames` slices, one event-loop pass per slice, as the wheel would.
FrameStats browse(MainWindow& window, int frames) {
    SliceView* axial = window.sliceView(SliceOrientation::Axial);
    std::vector<double> ms;
    for (int frame = 0; frame < frames; ++frame) {
        const auto start = Clock::now();
        axial->setSliceIndex(32 + (frame * 3) % 192);
        QApplication::processEvents();
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    std::sort(ms.begin(), ms.end());
    return {ms[ms.size() / 2], ms[std::min(ms.size() - 1, ms.size() * 95 / 100)], ms.back()};
}

}  // namespace

int main(int argc, char** argv) {
    bench::use_core_opengl();
    QApplication app(argc, argv);
    int frames = 150;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--frames")) frames = std::atoi(argv[i + 1]);
    }
    MainWindow window;
    if (!bench::show_phantom_with_experiment(window, "unet2d_em_4way.json")) return 1;
    QTest::qWait(500);

    const FrameStats idle = browse(window, frames);
    std::printf("case=idle frames=%d median_ms=%.2f p95_ms=%.2f max_ms=%.2f\n", frames, idle.median, idle.p95, idle.max);

    QTemporaryDir scratch;
    RunPanel* run = window.runPanel();
    run->modelDirEdit()->setText(scratch.filePath(QStringLiteral("run")));
    run->stepsBox()->setValue(100000);
    QSignalSpy steps(window.runController(), &RunController::stepFinished);
    run->startRun();
    if (std::getenv("TESSERA_BENCH_HIDE_CHARTS")) {  // to tell the charts' share of the frame time
        if (auto* dock = window.findChild<QDockWidget*>(QStringLiteral("trainingDock"))) dock->hide();
    }
    // Measure once the run is past building its cores and into its steps.
    for (int wait = 0; wait < 600 && steps.count() < 2; ++wait) QTest::qWait(100);
    const int steps_before = static_cast<int>(steps.count());
    const auto start = Clock::now();
    const FrameStats training = browse(window, frames);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("case=training frames=%d median_ms=%.2f p95_ms=%.2f max_ms=%.2f steps_meanwhile=%d over_s=%.1f\n", frames,
                training.median, training.p95, training.max, static_cast<int>(steps.count()) - steps_before, seconds);
    run->stopRun();
    QSignalSpy finished(window.runController(), &RunController::finished);
    finished.wait(120000);
    window.design()->setSaved();
    return 0;
}
