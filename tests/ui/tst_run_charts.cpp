// RunCharts: two synthetic runs overlaid (raw and smoothed loss, evaluations, step time, learning rate,
// throughput, per-core memory), the smoothing slider's extremes, the log scale, the wall-time axis, hiding
// a run, a finished run's model_dir, exports (CSV data read back, PNG, SVG), the coalesced redraw and
// 20 000 steps; and the data side (RunSeries, smoothEma, decimateMinMax) on its own.
#include "gl_test_main.hpp"
#include "run/metrics_log.hpp"
#include "widgets/run_charts.hpp"

#include <QAbstractAxis>
#include <QAreaSeries>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QImage>
#include <QLegend>
#include <QLegendMarker>
#include <QLineSeries>
#include <QListWidget>
#include <QLogValueAxis>
#include <QSignalSpy>
#include <QSlider>
#include <QTemporaryDir>
#include <QValueAxis>
#include <QXYSeries>

#include <cmath>
#include <map>
#include <random>

using namespace tessera;
using namespace tessera::ui;
using Chart = RunCharts::Chart;
using Curve = RunCharts::Curve;

namespace {

constexpr double gib = 1024.0 * 1024.0 * 1024.0;
constexpr double start_time = 1.7e9;  // Unix seconds of the runs' first step

// A loss that decays with noise, a warm-up learning rate, a host step ~100× the predicted one.
run::StepRecord syntheticStep(std::int64_t step, double speed, std::mt19937& rng) {
    std::normal_distribution<double> noise(0.0, 0.06);
    run::StepRecord s;
    s.step = step;
    s.loss = std::max(0.02, 1.8 * std::exp(-static_cast<double>(step) / (60.0 * speed)) + 0.15 + noise(rng));
    s.learning_rate = 1e-3 * std::min(1.0, static_cast<double>(step) / 20.0);
    s.loss_scale = step < 80 ? 32768.0 : 16384.0;
    s.host_seconds = 0.5 * speed * (1.0 + 0.1 * std::abs(noise(rng)));
    s.predicted_seconds = 0.004 * speed;
    s.images_per_second = 8.0 / s.host_seconds;
    s.core_peak_bytes = {static_cast<std::int64_t>(1.2 * gib), static_cast<std::int64_t>(1.6 * gib), static_cast<std::int64_t>(0.9 * gib),
                         static_cast<std::int64_t>(1.1 * gib)};
    s.wall_time = start_time + 0.5 * static_cast<double>(step - 1);
    return s;
}

run::EvalRecord syntheticEval(std::int64_t step) {
    run::EvalRecord e;
    e.step = step;
    e.loss = 0.3 + 1.5 * std::exp(-static_cast<double>(step) / 70.0);
    e.mean_dice = 0.9 - 0.8 * std::exp(-static_cast<double>(step) / 60.0);
    e.wall_time = start_time + 0.5 * static_cast<double>(step) + 0.1;
    return e;
}

struct Fed {
    std::vector<run::StepRecord> steps;
    std::vector<run::EvalRecord> evals;
};

// `count` steps of a run, an evaluation every 50.
Fed feed(RunCharts& charts, const QString& run, int count, double speed, unsigned seed) {
    std::mt19937 rng(seed);
    Fed fed;
    for (int step = 1; step <= count; ++step) {
        fed.steps.push_back(syntheticStep(step, speed, rng));
        charts.addStep(run, fed.steps.back());
        if (step % 50 == 0) {
            fed.evals.push_back(syntheticEval(step));
            charts.addEval(run, fed.evals.back());
        }
    }
    return fed;
}

// TensorBoard's smoothing, written out as its scalar dashboard does.
std::vector<double> tensorBoardSmoothing(const std::vector<double>& values, double weight) {
    std::vector<double> smoothed;
    double last = 0;
    int accumulated = 0;
    for (const double v : values) {
        last = last * weight + (1 - weight) * v;
        ++accumulated;
        smoothed.push_back(last / (1 - std::pow(weight, accumulated)));
    }
    return smoothed;
}

// Pixels that differ from the image's most common colour (its background).
double foregroundFraction(const QImage& grabbed) {
    const QImage image = grabbed.convertToFormat(QImage::Format_RGB32);
    std::map<QRgb, int> counts;
    int total = 0;
    for (int y = 0; y < image.height(); y += 2) {
        for (int x = 0; x < image.width(); x += 2) {
            ++counts[image.pixel(x, y)];
            ++total;
        }
    }
    int background = 0;
    for (const auto& entry : counts) background = std::max(background, entry.second);
    return total > 0 ? 1.0 - static_cast<double>(background) / total : 0.0;
}

QString screenshotDir() {
    const QString dir = QDir::temp().filePath(QStringLiteral("tst_run_charts"));
    QDir().mkpath(dir);
    return dir;
}

QBarSet* memoryBars(const RunCharts& charts) {
    for (QAbstractSeries* series : charts.chartView(Chart::Memory)->chart()->series()) {
        if (auto* bars = qobject_cast<QBarSeries*>(series); bars && !bars->barSets().isEmpty()) return bars->barSets().front();
    }
    return nullptr;
}

QAbstractAxis* verticalAxisOf(QXYSeries* series) {
    const QList<QAbstractAxis*> axes = series->attachedAxes();
    for (QAbstractAxis* axis : axes) {
        if (axis->orientation() == Qt::Vertical) return axis;
    }
    return nullptr;
}

QStringList readLines(const QString& path) {
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) return {};
    QStringList lines = QString::fromUtf8(file.readAll()).split(QLatin1Char('\n'));
    if (!lines.isEmpty() && lines.back().isEmpty()) lines.removeLast();
    return lines;
}

}  // namespace

class tst_RunCharts : public QObject {
    Q_OBJECT
private slots:
    void emptyStateSaysWhatToDo() {
        RunCharts charts;
        charts.resize(1000, 700);
        charts.show();
        QVERIFY(QTest::qWaitForWindowExposed(&charts));
        QVERIFY2(charts.emptyStateText().startsWith(QStringLiteral("No run yet — start one from the Run dock or open a finished run's model_dir")),
                 qPrintable(charts.emptyStateText()));
        QVERIFY(charts.runs().isEmpty());
        QVERIFY(!charts.chartView(Chart::Loss)->isVisible());
        // Every control explains itself.
        for (QWidget* control : {static_cast<QWidget*>(charts.findChild<QSlider*>()), static_cast<QWidget*>(charts.findChild<QCheckBox*>()),
                                 static_cast<QWidget*>(charts.findChild<QComboBox*>()), static_cast<QWidget*>(charts.runList())}) {
            QVERIFY(control);
            QVERIFY2(!control->toolTip().isEmpty(), qPrintable(control->objectName()));
        }
        for (int c = 0; c < RunCharts::chart_count; ++c) QVERIFY(!charts.chartView(static_cast<Chart>(c))->toolTip().isEmpty());
        const QImage image = charts.grab().toImage();
        QVERIFY(image.save(QDir(screenshotDir()).filePath(QStringLiteral("run_charts_empty.png"))));
    }

    void twoRunsOverlaid() {
        RunCharts charts;
        charts.resize(1400, 950);
        charts.show();
        QVERIFY(QTest::qWaitForWindowExposed(&charts));
        const Fed a = feed(charts, QStringLiteral("unet2d_em"), 200, 1.0, 1);
        const Fed b = feed(charts, QStringLiteral("unet2d_em_4way"), 150, 0.6, 2);
        charts.setCoreMemory(QStringLiteral("unet2d_em_4way"), b.steps.back().core_peak_bytes, static_cast<std::int64_t>(1.5 * gib));
        charts.refresh();
        QVERIFY(charts.emptyStateText().isEmpty());
        QCOMPARE(charts.runs(), (QStringList{QStringLiteral("unet2d_em"), QStringLiteral("unet2d_em_4way")}));
        QVERIFY(charts.runColor(QStringLiteral("unet2d_em")) != charts.runColor(QStringLiteral("unet2d_em_4way")));
        QCOMPARE(charts.runList()->count(), 2);

        // The loss chart: raw and smoothed per run, every step (200 < the display cap), evaluations as points.
        QCOMPARE(charts.series(QStringLiteral("unet2d_em"), Curve::RawLoss)->count(), 200);
        QCOMPARE(charts.series(QStringLiteral("unet2d_em"), Curve::SmoothedLoss)->count(), 200);
        QCOMPARE(charts.series(QStringLiteral("unet2d_em"), Curve::EvalLoss)->count(), 4);
        QCOMPARE(charts.series(QStringLiteral("unet2d_em"), Curve::EvalDice)->count(), 4);
        QCOMPARE(charts.series(QStringLiteral("unet2d_em_4way"), Curve::RawLoss)->count(), 150);
        QCOMPARE(charts.series(QStringLiteral("unet2d_em_4way"), Curve::SmoothedLoss)->count(), 150);
        QCOMPARE(charts.series(QStringLiteral("unet2d_em_4way"), Curve::EvalLoss)->count(), 3);
        // Six curves a run on the loss chart: raw, smoothed, eval loss, Dice, and a detector's mAP and AP50 (empty here).
        QCOMPARE(charts.chartView(Chart::Loss)->chart()->series().size(), 12);
        QCOMPARE(charts.series(QStringLiteral("unet2d_em"), Curve::EvalAp)->count(), 0);
        QVERIFY(!charts.isChartAvailable(Chart::Boxes));  // no detector among the runs: no boxes tab
        QVERIFY(charts.chartView(Chart::Loss)->chart()->series().contains(charts.series(QStringLiteral("unet2d_em"), Curve::RawLoss)));
        // The raw curve is the data; the smoothed one is TensorBoard's debiased average of it.
        const QList<QPointF> raw = charts.series(QStringLiteral("unet2d_em"), Curve::RawLoss)->points();
        const QList<QPointF> smoothed = charts.series(QStringLiteral("unet2d_em"), Curve::SmoothedLoss)->points();
        std::vector<double> losses;
        for (const run::StepRecord& s : a.steps) losses.push_back(s.loss);
        const std::vector<double> expected = tensorBoardSmoothing(losses, charts.smoothing());
        for (int i = 0; i < 200; ++i) {
            QCOMPARE(raw[i], QPointF(static_cast<double>(i + 1), losses[static_cast<std::size_t>(i)]));
            QVERIFY(std::abs(smoothed[i].y() - expected[static_cast<std::size_t>(i)]) < 1e-12);
        }
        QCOMPARE(smoothed[0].y(), losses[0]);  // debiased: the first point is not pulled towards 0
        QCOMPARE(charts.series(QStringLiteral("unet2d_em"), Curve::EvalLoss)->points().front(),
                 QPointF(50.0, a.evals.front().loss));
        // The raw curve is faint, the smoothed one bold, in the run's colour; the raw one has no legend entry.
        const QColor color = charts.runColor(QStringLiteral("unet2d_em"));
        QCOMPARE(charts.series(QStringLiteral("unet2d_em"), Curve::SmoothedLoss)->pen().color(), color);
        QVERIFY(charts.series(QStringLiteral("unet2d_em"), Curve::RawLoss)->pen().color().alpha() < 128);
        // In the dock the run list is the legend (a swatch in the run's colour); an exported image gets the
        // chart's own, naming each run once: the raw curve and the dashed prediction have no entry.
        QLegend* legend = charts.chartView(Chart::Loss)->chart()->legend();
        QVERIFY(!legend->isVisible());
        QCOMPARE(charts.runList()->item(0)->icon().pixmap(8, 8).toImage().pixelColor(4, 4), color);
        QLegend* time_legend = charts.chartView(Chart::StepTime)->chart()->legend();
        QVERIFY(!time_legend->isVisible());
        legend->show();  // as an export shows it
        time_legend->show();
        QTest::qWait(50);  // the legend lays its markers out when it is drawn
        QVERIFY(!legend->markers(charts.series(QStringLiteral("unet2d_em"), Curve::RawLoss)).front()->isVisible());
        QVERIFY(legend->markers(charts.series(QStringLiteral("unet2d_em"), Curve::SmoothedLoss)).front()->isVisible());
        QVERIFY(time_legend->markers(charts.series(QStringLiteral("unet2d_em"), Curve::HostSeconds)).front()->isVisible());
        QVERIFY(!time_legend->markers(charts.series(QStringLiteral("unet2d_em"), Curve::PredictedSeconds)).front()->isVisible());
        legend->hide();
        time_legend->hide();

        // Step time (log axis: host and predicted differ ~100×), learning rate and loss scale, throughput.
        QCOMPARE(charts.series(QStringLiteral("unet2d_em"), Curve::HostSeconds)->count(), 200);
        QCOMPARE(charts.series(QStringLiteral("unet2d_em"), Curve::PredictedSeconds)->count(), 200);
        QCOMPARE(verticalAxisOf(charts.series(QStringLiteral("unet2d_em"), Curve::HostSeconds))->type(), QAbstractAxis::AxisTypeLogValue);
        QCOMPARE(charts.series(QStringLiteral("unet2d_em"), Curve::LearningRate)->count(), 200);
        QCOMPARE(charts.series(QStringLiteral("unet2d_em"), Curve::LossScale)->count(), 200);
        QVERIFY(verticalAxisOf(charts.series(QStringLiteral("unet2d_em"), Curve::LossScale)) !=
                verticalAxisOf(charts.series(QStringLiteral("unet2d_em"), Curve::LearningRate)));  // a second axis
        QCOMPARE(charts.series(QStringLiteral("unet2d_em_4way"), Curve::Throughput)->count(), 150);
        QCOMPARE(charts.series(QStringLiteral("unet2d_em_4way"), Curve::Throughput)->points().back().y(), b.steps.back().images_per_second);

        // Memory: the last run that reported its cores, one bar per core, core 1 (1.6 GiB) over 1.5 GiB in red.
        QCOMPARE(charts.memoryRun(), QStringLiteral("unet2d_em_4way"));
        QBarSet* bars = memoryBars(charts);
        QVERIFY(bars);
        QCOMPARE(bars->count(), 4);
        QVERIFY(std::abs(bars->at(1) - 1.6) < 1e-9);  // GiB
        QVERIFY(bars->isBarSelected(1));
        QVERIFY(!bars->isBarSelected(0));
        QCOMPARE(charts.chartView(Chart::Memory)->chart()->series().size(), 2);  // bars and the capacity line
        // Selecting the other run in the list shows its memory (no capacity known: no line).
        charts.runList()->setCurrentRow(0);
        charts.refresh();
        QCOMPARE(charts.memoryRun(), QStringLiteral("unet2d_em"));
        QVERIFY(charts.chartView(Chart::Memory)->chart()->title().contains(QStringLiteral("unet2d_em (step 200)")));
        QCOMPARE(memoryBars(charts)->count(), 4);
        QCOMPARE(charts.chartView(Chart::Memory)->chart()->series().size(), 1);
        charts.runList()->setCurrentRow(1);
        charts.refresh();

        // Screenshots: the whole widget and each chart, none blank.
        QTest::qWait(50);
        const QDir dir(screenshotDir());
        const QImage whole = charts.grab().toImage();
        QVERIFY(whole.save(dir.filePath(QStringLiteral("run_charts.png"))));
        QVERIFY2(foregroundFraction(whole) > 0.03, qPrintable(QString::number(foregroundFraction(whole))));
        for (int c = 0; c < RunCharts::chart_count; ++c) {
            const QImage image = charts.chartView(static_cast<Chart>(c))->grab().toImage();
            QVERIFY2(foregroundFraction(image) > 0.02, qPrintable(RunCharts::chartName(static_cast<Chart>(c))));
        }
        charts.setLogScale(true);
        charts.setSmoothing(0.9);
        charts.refresh();
        QTest::qWait(50);
        QVERIFY(charts.grab().toImage().save(dir.filePath(QStringLiteral("run_charts_log.png"))));
        qInfo("screenshots in %s", qPrintable(dir.path()));
    }

    void smoothingZeroShowsTheRawLoss() {
        RunCharts charts;
        feed(charts, QStringLiteral("run"), 200, 1.0, 3);
        charts.refresh();
        QVERIFY(charts.series(QStringLiteral("run"), Curve::SmoothedLoss)->points() != charts.series(QStringLiteral("run"), Curve::RawLoss)->points());
        charts.findChild<QSlider*>()->setValue(0);  // as the user drags it
        QCOMPARE(charts.smoothing(), 0.0);
        charts.refresh();
        QCOMPARE(charts.series(QStringLiteral("run"), Curve::SmoothedLoss)->points(), charts.series(QStringLiteral("run"), Curve::RawLoss)->points());
        charts.setSmoothing(0.99);
        QCOMPARE(charts.findChild<QSlider*>()->value(), 99);
        charts.setSmoothing(5);  // clamped
        QCOMPARE(charts.smoothing(), 0.99);
    }

    void logScaleSwitchesTheLossAxis() {
        RunCharts charts;
        feed(charts, QStringLiteral("run"), 200, 1.0, 4);
        charts.refresh();
        QXYSeries* raw = charts.series(QStringLiteral("run"), Curve::RawLoss);
        QCOMPARE(verticalAxisOf(raw)->type(), QAbstractAxis::AxisTypeValue);
        charts.findChild<QCheckBox*>()->setChecked(true);
        QVERIFY(charts.logScale());
        charts.refresh();
        QCOMPARE(verticalAxisOf(raw)->type(), QAbstractAxis::AxisTypeLogValue);
        QCOMPARE(verticalAxisOf(charts.series(QStringLiteral("run"), Curve::SmoothedLoss)), verticalAxisOf(raw));
        QCOMPARE(verticalAxisOf(charts.series(QStringLiteral("run"), Curve::EvalLoss)), verticalAxisOf(raw));
        QCOMPARE(verticalAxisOf(charts.series(QStringLiteral("run"), Curve::EvalDice))->type(), QAbstractAxis::AxisTypeValue);
        QCOMPARE(raw->count(), 200);  // every loss is positive
        charts.setLogScale(false);
        QCOMPARE(verticalAxisOf(raw)->type(), QAbstractAxis::AxisTypeValue);
        QVERIFY(!charts.findChild<QCheckBox*>()->isChecked());
    }

    void wallTimeAxis() {
        RunCharts charts;
        feed(charts, QStringLiteral("run"), 200, 1.0, 5);
        charts.findChild<QComboBox*>()->setCurrentIndex(1);
        QCOMPARE(charts.xAxis(), RunCharts::XAxis::WallTime);
        charts.refresh();
        const QList<QPointF> raw = charts.series(QStringLiteral("run"), Curve::RawLoss)->points();
        QCOMPARE(raw.front().x(), 0.0);
        QCOMPARE(raw.back().x(), 99.5);  // 199 steps of 0.5 s
        QVERIFY(std::abs(charts.series(QStringLiteral("run"), Curve::EvalLoss)->points().front().x() - 25.1) < 1e-6);
        // Long runs count minutes.
        std::mt19937 rng(6);
        run::StepRecord late = syntheticStep(201, 1.0, rng);
        late.wall_time = start_time + 600;
        charts.addStep(QStringLiteral("run"), late);
        charts.refresh();
        QVERIFY(std::abs(charts.series(QStringLiteral("run"), Curve::RawLoss)->points().back().x() - 10.0) < 1e-9);  // minutes
        charts.setXAxis(RunCharts::XAxis::Step);
        charts.refresh();
        QCOMPARE(charts.series(QStringLiteral("run"), Curve::RawLoss)->points().back().x(), 201.0);
        QCOMPARE(charts.findChild<QComboBox*>()->currentIndex(), 0);
    }

    void hidingARunHidesItsSeries() {
        RunCharts charts;
        charts.resize(1200, 800);
        charts.show();
        feed(charts, QStringLiteral("a"), 120, 1.0, 7);
        feed(charts, QStringLiteral("b"), 80, 0.5, 8);
        charts.refresh();
        QListWidgetItem* item = charts.runList()->item(0);
        QCOMPARE(item->text(), QStringLiteral("a"));
        QCOMPARE(item->checkState(), Qt::Checked);
        item->setCheckState(Qt::Unchecked);  // as a click on the checkbox does
        QVERIFY(!charts.isRunVisible(QStringLiteral("a")));
        for (int c = 0; c <= static_cast<int>(Curve::HostPrediction); ++c) {
            QVERIFY(!charts.series(QStringLiteral("a"), static_cast<Curve>(c))->isVisible());
            QVERIFY(charts.series(QStringLiteral("b"), static_cast<Curve>(c))->isVisible());
        }
        // The axes follow the runs shown: b's 80 steps.
        charts.refresh();
        auto* x = qobject_cast<QValueAxis*>(charts.chartView(Chart::Loss)->chart()->axes(Qt::Horizontal).front());
        QVERIFY(x);
        QVERIFY2(x->max() < 120, qPrintable(QString::number(x->max())));
        // The CSV holds the runs shown.
        QTemporaryDir dir;
        QVERIFY(charts.exportChart(Chart::Throughput, dir.filePath(QStringLiteral("t.csv"))));
        QCOMPARE(readLines(dir.filePath(QStringLiteral("t.csv"))).size(), 1 + 80);
        charts.setRunVisible(QStringLiteral("a"), true);
        QTest::qWait(50);
        QCOMPARE(item->checkState(), Qt::Checked);
        QVERIFY(charts.series(QStringLiteral("a"), Curve::SmoothedLoss)->isVisible());
        QVERIFY(!charts.chartView(Chart::Loss)->chart()->legend()->markers(charts.series(QStringLiteral("a"), Curve::RawLoss)).front()->isVisible());
        // Removing a run takes its curves off the charts.
        charts.removeRun(QStringLiteral("a"));
        QCOMPARE(charts.runs(), QStringList{QStringLiteral("b")});
        QCOMPARE(charts.chartView(Chart::Loss)->chart()->series().size(), 6);
        QCOMPARE(charts.runList()->count(), 1);
        charts.chartView(Chart::Loss)->chart()->legend()->show();  // as an export shows it
        QTest::qWait(50);
        QVERIFY(!charts.chartView(Chart::Loss)->chart()->legend()->markers(charts.series(QStringLiteral("b"), Curve::RawLoss)).front()->isVisible());
        QVERIFY(charts.chartView(Chart::Loss)->chart()->legend()->markers(charts.series(QStringLiteral("b"), Curve::SmoothedLoss)).front()->isVisible());
        charts.chartView(Chart::Loss)->chart()->legend()->hide();
        charts.clear();
        QVERIFY(charts.runs().isEmpty());
        QVERIFY(!charts.emptyStateText().isEmpty());
    }

    void hostPredictionInItsBand() {
        RunCharts charts;
        charts.resize(1200, 800);
        charts.show();
        QVERIFY(QTest::qWaitForWindowExposed(&charts));
        feed(charts, QStringLiteral("a"), 100, 1.0, 7);  // host steps ≈ 0.5 s
        feed(charts, QStringLiteral("b"), 60, 0.5, 8);
        charts.setHostPrediction(QStringLiteral("a"), 0.6, 0.08);
        charts.refresh();
        // A dotted line at the prediction across a's steps, inside a band of ± 0.08 s.
        QXYSeries* centre = charts.series(QStringLiteral("a"), Curve::HostPrediction);
        QCOMPARE(centre->points(), (QList<QPointF>{QPointF(1, 0.6), QPointF(100, 0.6)}));
        QCOMPARE(centre->pen().style(), Qt::DotLine);
        QAreaSeries* band = charts.hostPredictionBand(QStringLiteral("a"));
        QVERIFY(band);
        QCOMPARE(band->upperSeries()->points(), (QList<QPointF>{QPointF(1, 0.68), QPointF(100, 0.68)}));
        QCOMPARE(band->lowerSeries()->points(), (QList<QPointF>{QPointF(1, 0.52), QPointF(100, 0.52)}));
        QVERIFY(band->brush().color().alpha() < 128);
        QVERIFY(charts.chartView(Chart::StepTime)->chart()->series().contains(band));
        QTest::qWait(50);
        QVERIFY(!charts.chartView(Chart::StepTime)->chart()->legend()->markers(band).front()->isVisible());
        // The log axis holds the band.
        auto* time_axis = qobject_cast<QLogValueAxis*>(verticalAxisOf(centre));
        QVERIFY(time_axis);
        QVERIFY(time_axis->min() <= 0.52 && time_axis->max() >= 0.68);
        // b is not calibrated: nothing drawn; its tooltip says nothing of a host prediction.
        QVERIFY(charts.series(QStringLiteral("b"), Curve::HostPrediction)->points().isEmpty());
        QVERIFY(charts.hostPredictionBand(QStringLiteral("b"))->upperSeries()->points().isEmpty());
        QVERIFY(charts.runList()->item(0)->toolTip().contains(QStringLiteral("Predicted on this host: 600.0 ms per step ± 80.0")));
        QVERIFY(!charts.runList()->item(1)->toolTip().contains(QStringLiteral("Predicted on this host")));
        const QImage image = charts.chartView(Chart::StepTime)->grab().toImage();
        QVERIFY(image.save(QDir(screenshotDir()).filePath(QStringLiteral("run_charts_host_band.png"))));
        // Hidden with its run.
        charts.setRunVisible(QStringLiteral("a"), false);
        QVERIFY(!band->isVisible());
        charts.setRunVisible(QStringLiteral("a"), true);
        QVERIFY(band->isVisible());
        // Unchecked by calibrate --check: the line without a band.
        charts.setHostPrediction(QStringLiteral("a"), 0.6, 0);
        charts.refresh();
        QCOMPARE(centre->count(), 2);
        QVERIFY(band->upperSeries()->points().isEmpty());
        QVERIFY(!charts.runList()->item(0)->toolTip().contains(QStringLiteral("±")));
    }

    void csvExportHoldsTheData() {
        RunCharts charts;
        const Fed a = feed(charts, QStringLiteral("a"), 200, 1.0, 9);
        const Fed b = feed(charts, QStringLiteral("b, the second"), 130, 0.7, 10);
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("loss.csv"));
        QVERIFY(charts.exportChart(Chart::Loss, path));
        const QStringList lines = readLines(path);
        QCOMPARE(lines.front(), QStringLiteral("run,step,wall_time,loss,smoothed_loss,eval_loss,eval_mean_dice"));
        QCOMPARE(lines.size(), 1 + 200 + 130);
        int evals = 0;
        for (int row = 1; row < lines.size(); ++row) {
            const bool first_run = row <= 200;
            const Fed& fed = first_run ? a : b;
            QString line = lines[row];
            if (!first_run) {
                QVERIFY(line.startsWith(QStringLiteral("\"b, the second\",")));  // quoted: it holds a comma
                line = line.mid(QStringLiteral("\"b, the second\",").size());
            } else {
                QVERIFY(line.startsWith(QStringLiteral("a,")));
                line = line.mid(2);
            }
            const QStringList fields = line.split(QLatin1Char(','));
            QCOMPARE(fields.size(), 6);
            const run::StepRecord& step = fed.steps[static_cast<std::size_t>(first_run ? row - 1 : row - 201)];
            QCOMPARE(fields[0].toLongLong(), step.step);
            QCOMPARE(fields[1].toDouble(), step.wall_time);  // exactly: the shortest text that reads back
            QCOMPARE(fields[2].toDouble(), step.loss);
            if (step.step % 50 == 0) {
                ++evals;
                QCOMPARE(fields[4].toDouble(), syntheticEval(step.step).loss);
                QCOMPARE(fields[5].toDouble(), syntheticEval(step.step).mean_dice);
            } else {
                QVERIFY(fields[4].isEmpty() && fields[5].isEmpty());
            }
        }
        QCOMPARE(evals, 4 + 2);
        // The other charts' columns.
        QVERIFY(charts.exportChart(Chart::StepTime, dir.filePath(QStringLiteral("time.csv"))));
        QCOMPARE(readLines(dir.filePath(QStringLiteral("time.csv"))).front(), QStringLiteral("run,step,wall_time,host_seconds,predicted_seconds"));
        QVERIFY(charts.exportChart(Chart::LearningRate, dir.filePath(QStringLiteral("lr.csv"))));
        QCOMPARE(readLines(dir.filePath(QStringLiteral("lr.csv"))).at(1).split(QLatin1Char(',')).at(4).toDouble(), a.steps[0].loss_scale);
        QVERIFY(charts.exportChart(Chart::Memory, dir.filePath(QStringLiteral("memory.csv"))));
        const QStringList memory = readLines(dir.filePath(QStringLiteral("memory.csv")));
        QCOMPARE(memory.front(), QStringLiteral("run,step,wall_time,capacity_bytes,core_0_peak_bytes,core_1_peak_bytes,core_2_peak_bytes,core_3_peak_bytes"));
        QCOMPARE(memory.size(), 3);
        QVERIFY(!charts.exportChart(Chart::Loss, dir.filePath(QStringLiteral("loss.txt"))));  // an unknown format
    }

    void detectorEvaluationsGiveApAndBoxCurves() {
        RunCharts charts;
        std::mt19937 rng(4);
        for (int step = 1; step <= 60; ++step) charts.addStep(QStringLiteral("shapes"), syntheticStep(step, 1.0, rng));
        // Three evaluations; the second has no AP (−1: no held-out objects of any class), which must not be drawn as 0.
        const double aps[3] = {0.05, -1, 0.42};
        for (int k = 0; k < 3; ++k) {
            run::EvalRecord eval;
            eval.step = 20 * (k + 1);
            eval.wall_time = 1.7e9 + eval.step;
            eval.loss = 2.0 - 0.5 * k;
            eval.is_detection = true;
            eval.detection.ap = aps[k];
            eval.detection.ap50 = aps[k] < 0 ? -1 : aps[k] + 0.2;
            eval.detection.num_detections = 100 - 30 * k;
            eval.detection.num_true_positives = 10 + 15 * k;
            eval.detection.num_ground_truth = 64;
            charts.addEval(QStringLiteral("shapes"), eval);
        }
        charts.show();
        charts.refresh();
        QXYSeries* ap = charts.series(QStringLiteral("shapes"), Curve::EvalAp);
        QCOMPARE(ap->count(), 2);
        QCOMPARE(ap->at(0), QPointF(20, 0.05));
        QCOMPARE(ap->at(1), QPointF(60, 0.42));
        QCOMPARE(charts.series(QStringLiteral("shapes"), Curve::EvalAp50)->at(1), QPointF(60, 0.62));
        QCOMPARE(charts.series(QStringLiteral("shapes"), Curve::EvalDice)->count(), 0);  // a detector has no Dice
        QXYSeries* detections = charts.series(QStringLiteral("shapes"), Curve::EvalDetections);
        QCOMPARE(detections->count(), 3);
        QCOMPARE(detections->at(2), QPointF(60, 40));
        QCOMPARE(charts.series(QStringLiteral("shapes"), Curve::EvalTruePositives)->at(1), QPointF(40, 25));
        QCOMPARE(charts.series(QStringLiteral("shapes"), Curve::EvalObjects)->at(0).y(), 64.0);
        QVERIFY(charts.isChartAvailable(Chart::Boxes));
        charts.showChart(Chart::Boxes);
        QVERIFY(charts.chartView(Chart::Boxes)->isVisible());

        QTemporaryDir dir;
        const QString loss_csv = dir.filePath(QStringLiteral("loss.csv")), boxes_csv = dir.filePath(QStringLiteral("boxes.csv"));
        QVERIFY(charts.exportChart(Chart::Loss, loss_csv));
        QVERIFY(charts.exportChart(Chart::Boxes, boxes_csv));
        const QStringList loss = readLines(loss_csv);
        QCOMPARE(loss.front(), QStringLiteral("run,step,wall_time,loss,smoothed_loss,eval_loss,eval_ap,eval_ap50"));
        QVERIFY(loss[20].startsWith(QStringLiteral("shapes,20,")));
        QVERIFY(loss[20].endsWith(QStringLiteral(",2,0.05,0.25")));
        QVERIFY(loss[40].endsWith(QStringLiteral(",1.5,,")));  // the undefined AP stays empty
        const QStringList boxes = readLines(boxes_csv);
        QCOMPARE(boxes.front(), QStringLiteral("run,step,wall_time,eval_detections,eval_true_positives,eval_objects"));
        QVERIFY(boxes[60].endsWith(QStringLiteral(",40,40,64")));
    }

    void pngAndSvgExports() {
        RunCharts charts;
        charts.resize(1300, 900);
        charts.show();
        QVERIFY(QTest::qWaitForWindowExposed(&charts));
        feed(charts, QStringLiteral("a"), 200, 1.0, 11);
        feed(charts, QStringLiteral("b"), 120, 0.5, 12);
        QTemporaryDir dir;
        for (int c = 0; c < RunCharts::chart_count; ++c) {
            const auto chart = static_cast<Chart>(c);
            const QString png = dir.filePath(RunCharts::chartName(chart) + QStringLiteral(".png"));
            QVERIFY(charts.exportChart(chart, png));
            const QImage image(png);
            QVERIFY(!image.isNull());
            QCOMPARE(image.size(), charts.chartView(chart)->size() * charts.chartView(chart)->devicePixelRatioF());
            QVERIFY2(foregroundFraction(image) > 0.02, qPrintable(png));
            const QString svg = dir.filePath(RunCharts::chartName(chart) + QStringLiteral(".svg"));
            QVERIFY(charts.exportChart(chart, svg));
            QFile file(svg);
            QVERIFY(file.open(QIODevice::ReadOnly));
            const QByteArray text = file.readAll();
            QVERIFY(text.contains("<svg"));
            QVERIFY(text.contains("</svg>"));
            QVERIFY2(text.size() > 600, text.constData());  // drawn, not an empty frame
        }
        QFile::remove(QDir(screenshotDir()).filePath(QStringLiteral("loss.svg")));
        QFile::copy(dir.filePath(QStringLiteral("loss.svg")), QDir(screenshotDir()).filePath(QStringLiteral("loss.svg")));
        QVERIFY(!charts.exportChart(Chart::Loss, QStringLiteral("/no/such/folder/loss.png")));
    }

    void loadsAFinishedRun() {
        QTemporaryDir model_dir;
        std::mt19937 rng(13);
        std::vector<run::StepRecord> steps;
        {
            run::MetricsLog log(model_dir.path().toStdString(), 0);
            for (int step = 1; step <= 60; ++step) {
                steps.push_back(syntheticStep(step, 1.0, rng));
                log.write(steps.back());
                if (step % 25 == 0) log.write(syntheticEval(step));
            }
            log.flush();
        }
        // The experiment the run was started with: its device gives a core's capacity.
        QVERIFY(QFile::copy(QStringLiteral(TESSERA_SOURCE_DIR "/resources/experiments/unet2d_em_4way.json"),
                            QDir(model_dir.path()).filePath(QStringLiteral("experiment.json"))));
        RunCharts charts;
        charts.resize(1200, 800);
        charts.show();
        QVERIFY(charts.loadRun(QStringLiteral("finished"), model_dir.path().toStdString()));
        charts.refresh();
        QCOMPARE(charts.runs(), QStringList{QStringLiteral("finished")});
        QXYSeries* raw = charts.series(QStringLiteral("finished"), Curve::RawLoss);
        QCOMPARE(raw->count(), 60);
        for (int i = 0; i < 60; ++i) QCOMPARE(raw->at(i), QPointF(static_cast<double>(i + 1), steps[static_cast<std::size_t>(i)].loss));
        QCOMPARE(charts.series(QStringLiteral("finished"), Curve::EvalLoss)->count(), 2);
        QCOMPARE(charts.series(QStringLiteral("finished"), Curve::EvalDice)->at(1), QPointF(50.0, syntheticEval(50).mean_dice));
        QCOMPARE(memoryBars(charts)->count(), 4);  // from the last step's per-core peaks
        QVERIFY(charts.runSeries(QStringLiteral("finished"))->coreCapacityBytes() > 0);
        QCOMPARE(charts.chartView(Chart::Memory)->chart()->series().size(), 2);  // and the capacity line
        QVERIFY(charts.emptyStateText().isEmpty());
        // Loading again under the same name replaces it; a folder without metrics is refused.
        QVERIFY(charts.loadRun(QStringLiteral("finished"), model_dir.path().toStdString()));
        QCOMPARE(charts.runs().size(), 1);
        QTemporaryDir empty;
        QVERIFY(!charts.loadRun(QStringLiteral("nothing"), empty.path().toStdString()));
        QCOMPARE(charts.runs().size(), 1);
    }

    void memoryBarsOnePerCore() {
        RunCharts charts;
        std::vector<std::int64_t> peaks;
        for (int core = 0; core < 16; ++core) peaks.push_back((300 + 10 * core) * 1024LL * 1024LL);
        charts.setCoreMemory(QStringLiteral("sixteen"), peaks, 400LL * 1024 * 1024);
        charts.refresh();
        QBarSet* bars = memoryBars(charts);
        QVERIFY(bars);
        QCOMPARE(bars->count(), 16);
        QCOMPARE(bars->at(0), 300.0);  // MiB
        QVERIFY(!bars->isBarSelected(10));  // 400 MiB: at capacity, not over
        QVERIFY(bars->isBarSelected(11));
        QVERIFY(charts.chartView(Chart::Memory)->chart()->title().contains(QStringLiteral("sixteen")));
    }

    void redrawsAreCoalesced() {
        RunCharts charts;
        QSignalSpy refreshed(&charts, &RunCharts::refreshed);
        std::mt19937 rng(14);
        for (int step = 1; step <= 500; ++step) charts.addStep(QStringLiteral("live"), syntheticStep(step, 1.0, rng));
        QCOMPARE(refreshed.size(), 0);  // nothing drawn per step
        QVERIFY(refreshed.wait(30000));  // a bound for a loaded machine, not a speed claim
        QCOMPARE(refreshed.size(), 1);  // one redraw for the 500 steps
        QCOMPARE(charts.series(QStringLiteral("live"), Curve::RawLoss)->count(), 500);
        // A resumed run (steps again from 301) drops what came after its checkpoint.
        charts.addStep(QStringLiteral("live"), syntheticStep(301, 1.0, rng));
        charts.refresh();
        QCOMPARE(charts.series(QStringLiteral("live"), Curve::RawLoss)->count(), 301);
    }

    void twentyThousandStepsAreDecimatedAndKeepTheirSpike() {
        RunCharts charts;
        charts.resize(1400, 950);
        charts.show();
        QVERIFY(QTest::qWaitForWindowExposed(&charts));
        std::mt19937 rng(15);
        for (int step = 1; step <= 20000; ++step) {
            run::StepRecord s = syntheticStep(step, 80.0, rng);
            if (step == 12345) s.loss = 50.0;  // one spike
            charts.addStep(QStringLiteral("long"), s);
            if (step % 500 == 0) charts.addEval(QStringLiteral("long"), syntheticEval(step));
        }
        charts.refresh();  // how fast: bench/bm_run_charts (a timed test on a shared machine proves nothing)
        QXYSeries* raw = charts.series(QStringLiteral("long"), Curve::RawLoss);
        QVERIFY2(raw->count() <= RunCharts::max_display_points && raw->count() >= RunCharts::max_display_points / 2,
                 qPrintable(QString::number(raw->count())));
        QVERIFY(charts.series(QStringLiteral("long"), Curve::SmoothedLoss)->count() <= RunCharts::max_display_points);
        double highest = 0;
        for (const QPointF& p : raw->points()) highest = std::max(highest, p.y());
        QCOMPARE(highest, 50.0);  // the spike survives the decimation
        QCOMPARE(raw->points().front().x(), 1.0);
        QCOMPARE(raw->points().back().x(), 20000.0);
        QCOMPARE(charts.runSeries(QStringLiteral("long"))->size(), std::size_t{20000});  // the data is all kept
        // A redraw of the whole run, as the smoothing slider moves.
        charts.setSmoothing(0.95);
        charts.refresh();
        QTest::qWait(20);
        QVERIFY(charts.grab().toImage().save(QDir(screenshotDir()).filePath(QStringLiteral("run_charts_20k.png"))));
    }

    // ---- the data side ----

    void emaAndDecimation() {
        const std::vector<double> values{1.0, 3.0, 2.0, std::nan(""), 4.0};
        QCOMPARE(smoothEma(values, 0.0)[2], 2.0);
        const std::vector<double> smoothed = smoothEma(values, 0.5);
        QCOMPARE(smoothed[0], 1.0);
        QCOMPARE(smoothed[1], (0.25 + 1.5) / 0.75);
        QVERIFY(std::isnan(smoothed[3]));  // kept, and left out of the average
        QCOMPARE(smoothEma(std::vector<double>(5, 0.3), 0.9), std::vector<double>(5, 0.3));

        std::vector<double> x(10000), y(10000);
        for (std::size_t i = 0; i < x.size(); ++i) {
            x[i] = static_cast<double>(i);
            y[i] = std::sin(static_cast<double>(i) * 0.01);
        }
        y[777] = -5.0;
        y[778] = 7.0;
        const QList<QPointF> points = decimateMinMax(x, y, 300, false);
        QVERIFY(points.size() <= 300);
        QCOMPARE(points.front(), QPointF(0, y[0]));
        QCOMPARE(points.back(), QPointF(9999, y[9999]));
        QVERIFY(points.contains(QPointF(777, -5.0)));
        QVERIFY(points.contains(QPointF(778, 7.0)));
        for (int i = 1; i < points.size(); ++i) QVERIFY(points[i].x() > points[i - 1].x());
        // Short series are kept whole; a log axis leaves out values ≤ 0.
        QCOMPARE(decimateMinMax(std::vector<double>{1, 2, 3}, std::vector<double>{1, -1, 2}, 300, true).size(), 2);
    }
};

TESSERA_GL_TEST_MAIN(tst_RunCharts)
#include "tst_run_charts.moc"
