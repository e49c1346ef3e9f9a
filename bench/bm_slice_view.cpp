// bm_slice_view: browsing slices of a 256³ volume with a label overlay (target ≥ 30 frames/s).
// bm_slice_render_*: the renderer alone (slice image with window and labels).
// bm_slice_view_frame: a whole frame as the user sees it — the cursor moves one slice, the view
//                      rebuilds its image and repaints the widget (synchronously, with repaint()).
#include "data/phantom.hpp"
#include "widgets/slice_view.hpp"

#include <QApplication>

#include <benchmark/benchmark.h>

#include <memory>

using namespace tessera;
using namespace tessera::ui;

namespace {

ViewerModel& model256() {
    static ViewerModel* model = [] {
        auto* created = new ViewerModel;
        PhantomOptions options;
        options.size = {256, 256, 256};
        Phantom phantom = make_ct_phantom(options);
        created->setVolume(std::make_shared<Volume>(std::move(phantom.volume)));
        created->setLabelMap(std::make_shared<LabelMap>(std::move(phantom.labels)));
        return created;
    }();
    return *model;
}

void bm_slice_render(benchmark::State& state, SliceOrientation orientation) {
    ViewerModel& model = model256();
    std::int64_t slice = 0;
    for (auto _ : state) {
        auto cursor = model.cursor();
        cursor[static_cast<std::size_t>(sliceAxes(model.volume()->geometry, orientation).axis_normal)] = 64 + (slice++ % 128);
        model.setCursor(cursor);
        QImage image = SliceRenderer::render(model, orientation);
        benchmark::DoNotOptimize(image.constBits());
    }
    state.counters["frames_per_s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(bm_slice_render, axial, SliceOrientation::Axial)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_slice_render, coronal, SliceOrientation::Coronal)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_slice_render, sagittal, SliceOrientation::Sagittal)->Unit(benchmark::kMillisecond);

void bm_slice_view_frame(benchmark::State& state, SliceOrientation orientation, bool outline) {
    ViewerModel& model = model256();
    model.setOutlineOnly(outline);
    SliceView view(&model, orientation);
    view.resize(600, 600);
    view.show();
    QApplication::processEvents();
    std::int64_t step = 0;
    for (auto _ : state) {
        view.setSliceIndex(64 + (step++ % 128));
        view.repaint();  // paints now, as a frame would
    }
    model.setOutlineOnly(false);
    state.counters["frames_per_s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(bm_slice_view_frame, axial, SliceOrientation::Axial, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_slice_view_frame, sagittal, SliceOrientation::Sagittal, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_slice_view_frame, axial_outline, SliceOrientation::Axial, true)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
    QApplication app(argc, argv);  // under Xvfb with `make bench`; any platform works for this widget
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
