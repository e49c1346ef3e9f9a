// Dragging a grid line in the partition editor on a 256³ volume: how many frames a second the studio
// gets through — each frame moves the cut (the design re-validates, re-plans the tiles and re-predicts
// every core's memory and time) and repaints the three slice views with labels and halos.
//
// Usage: bm_partition_drag [--frames 120]   (needs an X server: make bench runs it under Xvfb)
// Prints: frames=<n> mean_ms=<x> median_ms=<x> p95_ms=<x> fps=<1000/median> (and the share spent
// in the design update vs the repaint).
#include "studio_bench_support.hpp"
#include "model/partition_design.hpp"
#include "widgets/main_window.hpp"
#include "widgets/slice_view.hpp"
#include "widgets/volume_view.hpp"

#include <QApplication>
#include <QSurfaceFormat>
#include <QTest>
#include <QUndoStack>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <vector>

using namespace tessera;
using namespace tessera::ui;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
    bench::use_core_opengl();
    QApplication app(argc, argv);
    int frames = 120;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--frames")) frames = std::atoi(argv[i + 1]);
    }
    MainWindow window;
    if (!bench::show_phantom_with_experiment(window, "unet3d_ct_256_16cores.json")) return 1;
    PartitionDesign* design = window.design();
    QApplication::processEvents();

    // Drag the first cut along W (input axis 2) back and forth across its range, as a hand would.
    const auto& cuts = design->grid().boundaries[2];
    const std::int64_t low = cuts[0] + design->alignment()[2], high = cuts[2] - design->alignment()[2];
    std::vector<double> frame_ms, update_ms;
    for (int frame = 0; frame < frames; ++frame) {
        const double phase = static_cast<double>(frame % 40) / 40.0;
        const double t = phase < 0.5 ? 2 * phase : 2 - 2 * phase;
        const auto position = static_cast<std::int64_t>(static_cast<double>(low) + t * static_cast<double>(high - low));
        const auto start = Clock::now();
        design->moveBoundary(2, 1, position, true);
        const auto updated = Clock::now();
        // The views asked for repaints; one pass of the event loop paints them and flushes the window,
        // as after a real mouse move.
        QApplication::processEvents();
        const auto end = Clock::now();
        frame_ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
        update_ms.push_back(std::chrono::duration<double, std::milli>(updated - start).count());
    }
    const auto release = Clock::now();
    design->finishDrag();  // the 3D view's boxes catch up
    QApplication::processEvents();
    const double release_ms = std::chrono::duration<double, std::milli>(Clock::now() - release).count();
    // The same repaints with the grid hidden: what the overlay itself costs.
    std::vector<double> plain_ms;
    for (SliceOrientation orientation : {SliceOrientation::Axial, SliceOrientation::Coronal, SliceOrientation::Sagittal}) {
        window.sliceView(orientation)->setPartitionVisible(false);
    }
    for (int frame = 0; frame < std::min(frames, 30); ++frame) {
        const auto start = Clock::now();
        for (SliceOrientation orientation : {SliceOrientation::Axial, SliceOrientation::Coronal, SliceOrientation::Sagittal}) {
            window.sliceView(orientation)->update();
        }
        QApplication::processEvents();
        plain_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    std::sort(plain_ms.begin(), plain_ms.end());
    std::printf("repaint without the grid: median_ms=%.2f; the 3D view's boxes after release: %.0f ms\n", plain_ms[plain_ms.size() / 2],
                release_ms);
    std::vector<double> sorted = frame_ms;
    std::sort(sorted.begin(), sorted.end());
    const double mean = std::accumulate(frame_ms.begin(), frame_ms.end(), 0.0) / static_cast<double>(frame_ms.size());
    const double median = sorted[sorted.size() / 2];
    const double p95 = sorted[std::min(sorted.size() - 1, sorted.size() * 95 / 100)];
    const double update_mean = std::accumulate(update_ms.begin(), update_ms.end(), 0.0) / static_cast<double>(update_ms.size());
    std::printf("case=drag_cut_256cubed_16cores frames=%d mean_ms=%.2f median_ms=%.2f p95_ms=%.2f fps=%.1f design_update_ms=%.2f "
                "repaint_ms=%.2f undo_steps=%d\n",
                frames, mean, median, p95, 1000.0 / median, update_mean, mean - update_mean, design->undoStack()->count());
    design->setSaved();  // no save prompt on exit
    return 0;
}
