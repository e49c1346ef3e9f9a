// PlannerPanel: the sweep of a real experiment off the GUI thread, its table, charts and predicted
// timeline, choosing rows by mouse and keyboard, restarts, errors, and screenshots that are not blank.
#include "ui_test_support.hpp"
#include "experiment/experiment.hpp"
#include "gl_test_main.hpp"
#include "widgets/planner_panel.hpp"
#include "widgets/timeline_chart.hpp"

#include <QAbstractSeries>
#include <QChart>
#include <QChartView>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QHeaderView>
#include <QProgressBar>
#include <QSignalSpy>
#include <QTableView>
#include <QWheelEvent>
#include <QXYSeries>

#include <set>

using namespace tessera;
using namespace tessera::ui;

namespace {

constexpr int plan_timeout_ms = 120000;

experiment::Experiment loadExample(const char* name) {
    return experiment::load_experiment(std::filesystem::path(TESSERA_SOURCE_DIR) / "resources" / "experiments" / name);
}

QString cell(const QTableView* table, int row, int column) {
    return table->model()->index(row, column).data(Qt::DisplayRole).toString();
}

// The proxy row showing this layout, or −1.
int findRow(const QTableView* table, std::int64_t replicas, const QString& pieces) {
    for (int row = 0; row < table->model()->rowCount(); ++row) {
        if (cell(table, row, PlannerPanel::ReplicasColumn) == QString::number(replicas) &&
            cell(table, row, PlannerPanel::PiecesColumn) == pieces) {
            return row;
        }
    }
    return -1;
}

std::vector<std::int64_t> parsePieces(const QString& text) {
    std::vector<std::int64_t> pieces;
    for (const QString& part : text.split(QStringLiteral("×"))) pieces.push_back(part.toLongLong());
    return pieces;
}

using tessera::ui::test::foregroundFraction;  // ui_test_support.hpp

QString screenshotDir() {
    const QString dir = QDir::temp().filePath(QStringLiteral("tst_planner_panel"));
    QDir().mkpath(dir);
    return dir;
}

}  // namespace

class tst_PlannerPanel : public QObject {
    Q_OBJECT
private slots:
    void emptyPanelSaysWhatToDo() {
        PlannerPanel panel;
        panel.resize(900, 600);
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        QVERIFY(!panel.isBusy());
        QVERIFY2(panel.emptyStateText().contains(QStringLiteral("Open or design an experiment to plan it")),
                 qPrintable(panel.emptyStateText()));
        QVERIFY(!panel.table()->isVisible());
        QVERIFY(panel.timeline()->placeholderText().size() > 0);
        const QImage image = panel.grab().toImage();
        QVERIFY(image.save(QDir(screenshotDir()).filePath(QStringLiteral("planner_empty.png"))));
        QVERIFY(foregroundFraction(image) > 0.002);
    }

    void plansTheSixteenCoreUnet() {
        PlannerPanel panel;
        panel.resize(1240, 900);
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        QSignalSpy planned(&panel, &PlannerPanel::planned);
        QElapsedTimer timer;
        timer.start();
        panel.setExperiment(loadExample("unet3d_ct_256_16cores.json"));
        QVERIFY(panel.isBusy());
        QVERIFY(panel.findChild<QProgressBar*>()->isVisible());
        QVERIFY(planned.wait(plan_timeout_ms));
        qInfo("planned in %lld ms", static_cast<long long>(timer.elapsed()));
        QVERIFY(!panel.isBusy());
        QVERIFY(!panel.findChild<QProgressBar*>()->isVisible());
        QVERIFY(panel.table()->isVisible());

        // The table: every layout of 16 cores, the experiment's own [1, 2, 2, 4, 1] among them, fitting.
        QTableView* table = panel.table();
        QVERIFY(table->model()->rowCount() >= 10);
        const int own = findRow(table, 1, QStringLiteral("2×2×4"));
        QVERIFY(own >= 0);
        QVERIFY2(cell(table, own, PlannerPanel::VerdictColumn).startsWith(QStringLiteral("fits")),
                 qPrintable(cell(table, own, PlannerPanel::VerdictColumn)));
        QVERIFY(cell(table, own, PlannerPanel::LayoutColumn).contains(QStringLiteral("[1, 2, 2, 4, 1]")));
        QVERIFY(cell(table, own, PlannerPanel::StepColumn).toDouble() > 0);
        QVERIFY(cell(table, own, PlannerPanel::MemoryColumn).toDouble() < 16.0);
        QVERIFY(!table->model()->index(own, PlannerPanel::MemoryColumn).data(Qt::ForegroundRole).isValid());  // not red
        QVERIFY(table->model()->index(own, PlannerPanel::VerdictColumn).data(Qt::ToolTipRole).toString().contains(
            QStringLiteral("fits")));
        // It is the row selected, as the experiment's layout.
        QCOMPARE(table->currentIndex().row(), own);
        QCOMPARE(panel.selectedLayout()->pieces, (std::vector<std::int64_t>{2, 2, 4}));
        // Planner order: fastest first.
        QVERIFY(cell(table, 0, PlannerPanel::StepColumn).toDouble() <= cell(table, 1, PlannerPanel::StepColumn).toDouble());
        for (int column = 0; column < PlannerPanel::ColumnCount; ++column) {
            QVERIFY(!table->model()->headerData(column, Qt::Horizontal, Qt::ToolTipRole).toString().isEmpty());
        }

        // The layout chart: bars of step time, memory points and the device's capacity line.
        QChart* layouts = panel.layoutChart()->chart();
        QCOMPARE(layouts->series().size(), 3);
        QCOMPARE(layouts->axes().size(), 3);

        // The scaling chart: strong and weak, with points.
        QChart* scaling = panel.scalingChart()->chart();
        QCOMPARE(scaling->series().size(), 2);
        for (QAbstractSeries* series : scaling->series()) {
            auto* xy = qobject_cast<QXYSeries*>(series);
            QVERIFY(xy);
            QVERIFY2(xy->count() >= 3, qPrintable(xy->name()));
        }

        // The timeline of the selected layout: 16 lanes, every one with bars; a bar's tooltip names its layer.
        TimelineChart* timeline = panel.timeline();
        QTRY_VERIFY_WITH_TIMEOUT(!timeline->bars().empty(), plan_timeout_ms);
        QCOMPARE(timeline->lanes(), 16);
        QVERIFY2(timeline->title().contains(QStringLiteral("[1, 2, 2, 4, 1]")), qPrintable(timeline->title()));
        std::set<int> lanes;
        std::set<TimelineBar::Kind> kinds;
        for (const TimelineBar& bar : timeline->bars()) {
            lanes.insert(bar.lane);
            kinds.insert(bar.kind);
        }
        QCOMPARE(static_cast<int>(lanes.size()), 16);
        QVERIFY(kinds.contains(TimelineBar::Kind::Compute));
        QVERIFY(kinds.contains(TimelineBar::Kind::Halo));
        QVERIFY(kinds.contains(TimelineBar::Kind::AllReduce));
        // The widest compute and halo bars: the easiest to point at.
        auto widest = [timeline](TimelineBar::Kind kind) {
            int best = -1;
            for (int i = 0; i < static_cast<int>(timeline->bars().size()); ++i) {
                if (timeline->bars()[static_cast<std::size_t>(i)].kind != kind) continue;
                if (best < 0 || timeline->barRect(i).width() > timeline->barRect(best).width()) best = i;
            }
            return best;
        };
        const int widest_compute = widest(TimelineBar::Kind::Compute), widest_halo = widest(TimelineBar::Kind::Halo);
        QVERIFY(widest_compute >= 0 && widest_halo >= 0);
        const TimelineBar& compute = timeline->bars()[static_cast<std::size_t>(widest_compute)];
        const QString compute_tip = timeline->toolTipAt(timeline->barRect(widest_compute).center().toPoint());
        QVERIFY2(compute_tip.contains(compute.label) && compute_tip.contains(QStringLiteral("compute")) &&
                     compute_tip.contains(QStringLiteral("ms")),
                 qPrintable(compute_tip));
        QVERIFY2(compute.label.contains(QLatin1Char('.')), qPrintable(compute.label));  // a model node: "down0.conv1"
        const QString halo_tip = timeline->toolTipAt(timeline->barRect(widest_halo).center().toPoint());
        QVERIFY2(halo_tip.contains(QStringLiteral("halo")) && halo_tip.contains(QStringLiteral("from core")), qPrintable(halo_tip));
        QVERIFY(timeline->toolTipAt(QPoint(1, 1)).isEmpty());

        // Screenshots of the whole panel and of each chart: none blank.
        const QDir dir(screenshotDir());
        const std::vector<std::pair<QWidget*, QString>> shots{{&panel, QStringLiteral("planner_panel.png")},
                                                              {table, QStringLiteral("planner_table.png")},
                                                              {panel.layoutChart(), QStringLiteral("planner_layout_chart.png")},
                                                              {panel.scalingChart(), QStringLiteral("planner_scaling_chart.png")},
                                                              {timeline, QStringLiteral("planner_timeline.png")}};
        for (const auto& [widget, name] : shots) {
            const QImage image = widget->grab().toImage();
            QVERIFY(!image.isNull());
            QVERIFY(image.save(dir.filePath(name)));
            const double fraction = foregroundFraction(image);
            QVERIFY2(fraction > 0.01, qPrintable(QStringLiteral("%1: %2 of the pixels differ from the background").arg(name).arg(fraction)));
        }
        // Zoomed into the turn from forward to backward.
        timeline->setVisibleRange(timeline->spanMs() * 0.3, timeline->spanMs() * 0.36);
        const QImage zoomed = timeline->grab().toImage();
        QVERIFY(zoomed.save(dir.filePath(QStringLiteral("planner_timeline_zoomed.png"))));
        QVERIFY(foregroundFraction(zoomed) > 0.01);
        qInfo("screenshots in %s", qPrintable(dir.path()));
    }

    void choosingRowsEmitsTheLayout() {
        PlannerPanel panel;
        panel.resize(1240, 900);
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        QSignalSpy planned(&panel, &PlannerPanel::planned);
        panel.setExperiment(loadExample("unet3d_ct_256_16cores.json"));
        QVERIFY(planned.wait(plan_timeout_ms));
        QTableView* table = panel.table();
        QSignalSpy chosen(&panel, &PlannerPanel::layoutChosen);

        // A click on the third row.
        const int row = 2;
        const QRect rect = table->visualRect(table->model()->index(row, PlannerPanel::PiecesColumn));
        QVERIFY(rect.isValid());
        QTest::mouseClick(table->viewport(), Qt::LeftButton, Qt::NoModifier, rect.center());
        QCOMPARE(chosen.size(), 1);
        QCOMPARE(chosen.at(0).at(0).value<std::int64_t>(), cell(table, row, PlannerPanel::ReplicasColumn).toLongLong());
        QCOMPARE(chosen.at(0).at(1).value<std::vector<std::int64_t>>(), parsePieces(cell(table, row, PlannerPanel::PiecesColumn)));
        // The timeline follows the row.
        const QString layout = cell(table, row, PlannerPanel::LayoutColumn);
        QTRY_VERIFY_WITH_TIMEOUT(panel.timeline()->title().contains(layout.mid(layout.indexOf(QLatin1Char('[')))), plan_timeout_ms);

        // The arrow keys move, Enter chooses.
        table->setFocus();
        QTest::keyClick(table, Qt::Key_Down);
        QCOMPARE(table->currentIndex().row(), row + 1);
        QCOMPARE(chosen.size(), 1);
        QTest::keyClick(table, Qt::Key_Return);
        QCOMPARE(chosen.size(), 2);
        QCOMPARE(chosen.at(1).at(1).value<std::vector<std::int64_t>>(), parsePieces(cell(table, row + 1, PlannerPanel::PiecesColumn)));

        // The editor's layout is shown without being "chosen" again.
        panel.showLayout(1, {16, 1, 1});
        QCOMPARE(table->currentIndex().row(), findRow(table, 1, QStringLiteral("16×1×1")));
        QCOMPARE(chosen.size(), 2);
        QTRY_VERIFY_WITH_TIMEOUT(panel.timeline()->title().contains(QStringLiteral("[1, 16, 1, 1, 1]")), plan_timeout_ms);
    }

    void aNewerExperimentRestartsTheSweep() {
        PlannerPanel panel;
        panel.resize(1000, 800);
        panel.show();
        QSignalSpy planned(&panel, &PlannerPanel::planned);
        panel.setExperiment(loadExample("unet3d_ct_256_16cores.json"));
        const experiment::Experiment second = loadExample("unet2d_em_4way.json");
        panel.setExperiment(second);
        QVERIFY(planned.wait(plan_timeout_ms));
        // Whatever the first sweep still reports is dropped.
        QTest::qWait(1500);
        QCOMPARE(planned.size(), 1);
        QVERIFY(!panel.isBusy());
        QCOMPARE(panel.result().experiment_name, QString::fromStdString(second.name));
        QCOMPARE(panel.result().core_budget, 4);
        QVERIFY(panel.table()->model()->rowCount() > 0);
        for (int row = 0; row < panel.table()->model()->rowCount(); ++row) {
            QCOMPARE(parsePieces(cell(panel.table(), row, PlannerPanel::PiecesColumn)).size(), std::size_t{2});  // 2D
        }
        QVERIFY(findRow(panel.table(), 1, QStringLiteral("4×1")) >= 0);
        QTRY_COMPARE_WITH_TIMEOUT(panel.timeline()->lanes(), 4, plan_timeout_ms);
    }

    void sortingKeepsInvalidLayoutsLast() {
        PlannerPanel panel;
        panel.resize(1000, 800);
        panel.show();
        QSignalSpy planned(&panel, &PlannerPanel::planned);
        panel.setExperiment(loadExample("resnet50_fake_8replicas.json"));
        QVERIFY(planned.wait(plan_timeout_ms));
        QTableView* table = panel.table();
        const int rows = table->model()->rowCount();
        QVERIFY(rows >= 3);
        QVERIFY(cell(table, rows - 1, PlannerPanel::VerdictColumn).startsWith(QStringLiteral("not possible")));
        QVERIFY(table->model()->index(rows - 1, PlannerPanel::LayoutColumn).data(Qt::ForegroundRole).isValid());  // greyed
        for (const Qt::SortOrder order : {Qt::DescendingOrder, Qt::AscendingOrder}) {
            table->sortByColumn(PlannerPanel::StepColumn, order);
            QVERIFY(cell(table, rows - 1, PlannerPanel::VerdictColumn).startsWith(QStringLiteral("not possible")));
            QVERIFY(cell(table, 0, PlannerPanel::VerdictColumn).startsWith(QStringLiteral("fits")));
            const double first = cell(table, 0, PlannerPanel::StepColumn).toDouble(), second = cell(table, 1, PlannerPanel::StepColumn).toDouble();
            QVERIFY(order == Qt::AscendingOrder ? first <= second : first >= second);
        }
    }

    void aLayoutThatDoesNotFitIsRed() {
        // The 256³ U-Net on one core: its only layout is valid but needs more than a core's 16 GiB.
        QFile file(QStringLiteral(TESSERA_SOURCE_DIR "/resources/experiments/unet3d_ct_256_16cores.json"));
        QVERIFY(file.open(QIODevice::ReadOnly));
        QString text = QString::fromUtf8(file.readAll());
        text.replace(QStringLiteral("\"num_cores_per_replica\": 16"), QStringLiteral("\"num_cores_per_replica\": 1"));
        text.replace(QStringLiteral("[[1, 2, 2, 4, 1], null]"), QStringLiteral("[[1, 1, 1, 1, 1], null]"));
        const experiment::Experiment one_core = experiment::parse_experiment(text.toStdString(), "one_core.json");
        PlannerPanel panel;
        panel.resize(1000, 800);
        panel.show();
        QSignalSpy planned(&panel, &PlannerPanel::planned);
        panel.setExperiment(one_core);
        QVERIFY(planned.wait(plan_timeout_ms));
        QTableView* table = panel.table();
        QCOMPARE(table->model()->rowCount(), 1);
        QVERIFY(cell(table, 0, PlannerPanel::VerdictColumn).startsWith(QStringLiteral("does not fit")));
        QCOMPARE(table->model()->index(0, PlannerPanel::MemoryColumn).data(Qt::ForegroundRole).value<QColor>(), QColor(0xc6, 0x28, 0x28));
        QVERIFY(cell(table, 0, PlannerPanel::MemoryColumn).toDouble() > 16.0);
        QVERIFY(panel.layoutChart()->chart()->title().contains(QStringLiteral("No layout fits")));
        // Its step is still predicted, and says it does not fit.
        QTRY_VERIFY_WITH_TIMEOUT(!panel.timeline()->bars().empty(), plan_timeout_ms);
        QCOMPARE(panel.timeline()->lanes(), 1);
        QVERIFY(panel.timeline()->title().contains(QStringLiteral("does not fit")));
    }

    void plannerErrorsAreShown() {
        experiment::Experiment broken = loadExample("unet2d_em_4way.json");
        broken.device = "no_such_device";
        PlannerPanel panel;
        panel.show();
        QSignalSpy planned(&panel, &PlannerPanel::planned);
        panel.setExperiment(broken);
        QVERIFY(planned.wait(plan_timeout_ms));
        QVERIFY(!panel.isBusy());
        QVERIFY2(panel.emptyStateText().contains(QStringLiteral("no_such_device")), qPrintable(panel.emptyStateText()));
        QCOMPARE(panel.table()->model()->rowCount(), 0);
    }

    void timelineChartStandsAlone() {
        // Fed plain bars (as the training view will feed measured events): lanes, hover and placeholder.
        TimelineChart chart;
        chart.resize(600, 200);
        chart.show();
        QVERIFY(QTest::qWaitForWindowExposed(&chart));
        QVERIFY(chart.toolTipAt(QPoint(300, 100)).isEmpty());
        std::vector<TimelineBar> bars{
            {0, 0.0, 4.0, TimelineBar::Kind::Compute, false, QStringLiteral("enc.conv"), QStringLiteral("conv")},
            {1, 1.0, 3.0, TimelineBar::Kind::Halo, false, QStringLiteral("enc.halo"), QStringLiteral("from core 0")},
            {1, 4.0, 8.0, TimelineBar::Kind::Compute, true, QStringLiteral("enc.conv"), {}},
            {5, 0.0, 1.0, TimelineBar::Kind::Compute, false, QStringLiteral("dropped"), {}}};
        chart.setTimeline(bars, 2, QStringLiteral("measured step"));
        QCOMPARE(chart.lanes(), 2);
        QCOMPARE(chart.bars().size(), std::size_t{3});  // lane 5 is outside
        QCOMPARE(chart.spanMs(), 8.0);
        const QString tip = chart.toolTipAt(chart.barRect(1).center().toPoint());
        QVERIFY2(tip.contains(QStringLiteral("enc.halo")) && tip.contains(QStringLiteral("from core 0")) &&
                     tip.contains(QStringLiteral("forward")),
                 qPrintable(tip));
        QVERIFY(chart.toolTipAt(chart.barRect(2).center().toPoint()).contains(QStringLiteral("backward")));
        QVERIFY(chart.barRect(0).bottom() <= chart.barRect(1).top());  // lane 0 above lane 1
        QVERIFY(foregroundFraction(chart.grab().toImage()) > 0.02);

        // Zoom: the wheel narrows the range around the pointer, a double click shows it all again.
        const double whole_width = chart.barRect(2).width();
        const QPointF middle = chart.barRect(2).center();
        QWheelEvent wheel(middle, chart.mapToGlobal(middle), QPoint(), QPoint(0, 240), Qt::NoButton, Qt::NoModifier,
                          Qt::NoScrollPhase, false);
        QApplication::sendEvent(&chart, &wheel);
        QVERIFY(chart.visibleEndMs() - chart.visibleStartMs() < 8.0 * 0.7);
        QVERIFY(chart.barRect(2).width() > whole_width * 1.4);
        chart.setVisibleRange(0.0, 2.0);
        QVERIFY(chart.barRect(2).isNull());  // 4–8 ms is out of view
        QVERIFY(chart.toolTipAt(chart.barRect(0).center().toPoint()).contains(QStringLiteral("enc.conv")));
        QTest::mouseDClick(&chart, Qt::LeftButton, Qt::NoModifier, chart.rect().center());
        QCOMPARE(chart.visibleStartMs(), 0.0);
        QCOMPARE(chart.visibleEndMs(), 8.0);
    }
};

TESSERA_GL_TEST_MAIN(tst_PlannerPanel)
#include "tst_planner_panel.moc"
