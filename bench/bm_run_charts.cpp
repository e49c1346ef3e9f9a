// The training charts' cost per refresh: a run of <steps> steps is shown, then steps keep arriving and
// each refresh (the charts take new data at most every RunCharts::refresh_interval_ms) is timed from
// the data update to the painted widget, chart by chart.
//
// Usage: bm_run_charts [--steps 2000] [--refreshes 20]   (needs an X server: make bench runs it under Xvfb)
#include "widgets/run_charts.hpp"

#include <QApplication>
#include <QChartView>
#include <QTest>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

using namespace tessera;
using namespace tessera::ui;
using Clock = std::chrono::steady_clock;

namespace {

run::StepRecord step_record(std::int64_t step) {
    run::StepRecord s;
    s.step = step;
    s.loss = 1.5 * std::exp(-static_cast<double>(step) / 300.0) + 0.05 * std::sin(static_cast<double>(step));
    s.learning_rate = 1e-3;
    s.loss_scale = 1;
    s.host_seconds = 0.5 + 0.1 * std::sin(static_cast<double>(step) / 7.0);
    s.predicted_seconds = 0.035;
    s.images_per_second = 8;
    s.core_peak_bytes = {100 << 20, 110 << 20, 110 << 20, 100 << 20};
    s.wall_time = 1.8e9 + static_cast<double>(step);
    return s;
}

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    QApplication app(argc, argv);
    int steps = 2000, refreshes = 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--refreshes")) refreshes = std::atoi(argv[i + 1]);
    }
    RunCharts charts;
    charts.resize(1600, 330);
    charts.show();
    if (!QTest::qWaitForWindowExposed(&charts)) return 1;
    for (int s = 1; s <= steps; ++s) charts.addStep(QStringLiteral("run"), step_record(s));
    charts.refresh();
    QApplication::processEvents();

    std::vector<double> update_ms, paint_ms;
    std::vector<std::vector<double>> chart_ms(5);
    const RunCharts::Chart kinds[] = {RunCharts::Chart::Loss, RunCharts::Chart::StepTime, RunCharts::Chart::LearningRate,
                                      RunCharts::Chart::Throughput, RunCharts::Chart::Memory};
    for (int r = 0; r < refreshes; ++r) {
        charts.addStep(QStringLiteral("run"), step_record(steps + r + 1));
        const auto start = Clock::now();
        charts.refresh();
        const auto updated = Clock::now();
        for (std::size_t c = 0; c < 5; ++c) {
            const auto chart_start = Clock::now();
            charts.chartView(kinds[c])->viewport()->repaint();  // the scene is drawn in the viewport
            chart_ms[c].push_back(std::chrono::duration<double, std::milli>(Clock::now() - chart_start).count());
        }
        paint_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - updated).count());
        update_ms.push_back(std::chrono::duration<double, std::milli>(updated - start).count());
    }
    std::printf("case=charts_%d_steps refreshes=%d update_median_ms=%.2f paint_median_ms=%.2f loss_ms=%.2f step_time_ms=%.2f "
                "learning_rate_ms=%.2f throughput_ms=%.2f memory_ms=%.2f\n",
                steps, refreshes, median(update_ms), median(paint_ms), median(chart_ms[0]), median(chart_ms[1]), median(chart_ms[2]),
                median(chart_ms[3]), median(chart_ms[4]));
    return 0;
}
