// Browsing slices of a 256³ volume while a run trains on the simulated cores: the frame time of the
// studio's slice views with and without training in the background (the run lives on a worker
// thread; the GUI thread only receives copied records).
//
// Usage: bm_browse_while_training [--frames 150] [--min-steps 8]   (needs an X server: make bench runs
// it under Xvfb)
// Prints one line per condition: case=<idle|training> frames=<n> median_ms=<x> p95_ms=<x> max_ms=<x>
// gui_blocked_max_ms=<x>, and the steps the run made meanwhile. While training, browsing goes on in
// rounds of <frames> until the run has finished <min-steps> steps, so every step's records reach the
// GUI during the measurement. gui_blocked_max_ms is a watchdog's: the longest gap between two ticks of
// a 5 ms timer on the GUI thread, less the 5 ms (the longest the GUI thread was busy at a stretch).
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
#include <QTimer>

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
    int frames = 0;
};

FrameStats stats_of(std::vector<double> ms) {
    std::sort(ms.begin(), ms.end());
    return {ms[ms.size() / 2], ms[std::min(ms.size() - 1, ms.size() * 95 / 100)], ms.back(), static_cast<int>(ms.size())};
}

// Walks the axial view through `frames` slices, one event-loop pass per slice, as the wheel would;
// appends each frame's milliseconds to `ms`.
void browse(MainWindow& window, int frames, std::vector<double>& ms) {
    SliceView* axial = window.sliceView(SliceOrientation::Axial);
    for (int frame = 0; frame < frames; ++frame) {
        const auto start = Clock::now();
        axial->setSliceIndex(32 + (frame * 3) % 192);
        QApplication::processEvents();
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
}

// The longest time the GUI thread went without serving a 5 ms timer, while it runs.
class Watchdog {
public:
    Watchdog() {
        m_timer.setInterval(tick_ms);
        m_timer.setTimerType(Qt::PreciseTimer);
        QObject::connect(&m_timer, &QTimer::timeout, [this] {
            const auto now = Clock::now();
            const double gap = std::chrono::duration<double, std::milli>(now - m_last).count() - tick_ms;
            m_longest = std::max(m_longest, gap);
            m_last = now;
        });
    }
    void start() {
        m_longest = 0;
        m_last = Clock::now();
        m_timer.start();
    }
    double stop() {
        m_timer.stop();
        return m_longest;
    }

private:
    static constexpr int tick_ms = 5;
    QTimer m_timer;
    Clock::time_point m_last;
    double m_longest = 0;
};

}  // namespace

int main(int argc, char** argv) {
    bench::use_core_opengl();
    QApplication app(argc, argv);
    int frames = 150, min_steps = 8;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--frames")) frames = std::atoi(argv[i + 1]);
        if (!std::strcmp(argv[i], "--min-steps")) min_steps = std::atoi(argv[i + 1]);
    }
    MainWindow window;
    if (!bench::show_phantom_with_experiment(window, "unet2d_em_4way.json")) return 1;
    QTest::qWait(500);

    Watchdog watchdog;
    std::vector<double> idle_ms;
    browse(window, 5, idle_ms);  // the first frames pay for first-time paints; not counted
    idle_ms.clear();
    watchdog.start();
    browse(window, frames, idle_ms);
    const double idle_blocked = watchdog.stop();
    const FrameStats idle = stats_of(idle_ms);
    std::printf("case=idle frames=%d median_ms=%.2f p95_ms=%.2f max_ms=%.2f gui_blocked_max_ms=%.1f\n", idle.frames, idle.median,
                idle.p95, idle.max, idle_blocked);

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
    std::vector<double> training_ms;
    watchdog.start();
    do {
        browse(window, frames, training_ms);
    } while (static_cast<int>(steps.count()) - steps_before < min_steps &&
             std::chrono::duration<double>(Clock::now() - start).count() < 600);
    const double training_blocked = watchdog.stop();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const FrameStats training = stats_of(training_ms);
    std::printf("case=training frames=%d median_ms=%.2f p95_ms=%.2f max_ms=%.2f gui_blocked_max_ms=%.1f steps_meanwhile=%d over_s=%.1f\n",
                training.frames, training.median, training.p95, training.max, training_blocked,
                static_cast<int>(steps.count()) - steps_before, seconds);
    run->stopRun();
    QSignalSpy finished(window.runController(), &RunController::finished);
    finished.wait(120000);
    window.design()->setSaved();
    return 0;
}
