// The partition editor as a user drives it: a volume and an experiment open, a 2×2 split from the spin
// boxes, an uneven split by dragging a cut, the labels and input_partition_dims following, undo of
// both, a planner row applied to the editor, inline errors, saving, and both export snippets.
#include "gl_test_main.hpp"
#include "data/dataset.hpp"
#include "experiment/experiment.hpp"
#include "model/partition_design.hpp"
#include "widgets/experiment_panel.hpp"
#include "widgets/main_window.hpp"
#include "widgets/partition_panel.hpp"
#include "widgets/planner_panel.hpp"
#include "widgets/slice_view.hpp"
#include "widgets/volume_view.hpp"
#include "render/volume_scene.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QLabel>
#include <QTreeWidget>
#include <QLineEdit>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableView>
#include <QTemporaryDir>
#include <QUndoStack>

#include <fstream>
#include <sstream>

using namespace tessera;
using namespace tessera::ui;

namespace {

const QString presets = QStringLiteral(TESSERA_SOURCE_DIR "/resources/experiments/");

std::vector<std::int64_t> memories(const PartitionDesign& design) {
    std::vector<std::int64_t> bytes;
    for (const CoreCost& core : design.cores()) bytes.push_back(core.memory_bytes);
    return bytes;
}

// Pixels that differ between two grabs of the same size.
int differing_pixels(const QImage& a, const QImage& b) {
    int count = 0;
    for (int y = 0; y < a.height(); ++y) {
        for (int x = 0; x < a.width(); ++x) count += a.pixel(x, y) != b.pixel(x, y);
    }
    return count;
}

}  // namespace

class tst_PartitionEditor : public QObject {
    Q_OBJECT
private slots:
    void init() { QSettings().clear(); }

    void designsASplitByHandAndByPlanner() {
        MainWindow window;
        window.resize(1400, 950);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        window.showPhantom(true);  // a 256×256 CT section
        QVERIFY(window.openExperiment(presets + QStringLiteral("unet2d_em_4way.json")));
        PartitionDesign* design = window.design();
        PartitionPanel* panel = window.partitionPanel();
        QCOMPARE(design->pieces(), (std::vector<std::int64_t>{4, 1}));
        QCOMPARE(panel->dimsEdit()->text(), QStringLiteral("[[1, 4, 1, 1], null]"));
        const auto memory_4x1 = memories(*design);
        QCOMPARE(memory_4x1.size(), std::size_t{4});
        const int undo_base = design->undoStack()->index();

        // 2×2 with the spin boxes: two edits, the text and the labels follow.
        panel->piecesBox(0)->setValue(2);
        panel->piecesBox(1)->setValue(2);
        QCOMPARE(design->pieces(), (std::vector<std::int64_t>{2, 2}));
        QCOMPARE(panel->dimsEdit()->text(), QStringLiteral("[[1, 2, 2, 1], null]"));
        QCOMPARE(design->coresPerReplica(), 4);
        QVERIFY(memories(*design) != memory_4x1);  // halos along two axes instead of one
        QVERIFY(panel->summaryLabel()->text().contains(QStringLiteral("fits")));

        // The overlay is drawn: the axial view changes when it is hidden.
        SliceView* axial = window.sliceView(SliceOrientation::Axial);
        QTest::qWait(50);
        const QImage with_grid = axial->grab().toImage();
        axial->setPartitionVisible(false);
        const QImage without_grid = axial->grab().toImage();
        axial->setPartitionVisible(true);
        QVERIFY(differing_pixels(with_grid, without_grid) > 1000);

        // An uneven split: drag the H cut down in the axial view. One drag is one undo step.
        const auto cut = axial->cutPosition(0, 1);
        QVERIFY(cut.has_value());
        const std::int64_t before = design->grid().boundaries[0][1];
        QCOMPARE(before, 128);
        const QPoint start = cut->toPoint();
        QTest::mousePress(axial, Qt::LeftButton, Qt::NoModifier, start);
        for (int step = 1; step <= 6; ++step) {
            QMouseEvent move(QEvent::MouseMove, QPointF(start + QPoint(0, 8 * step)), axial->mapToGlobal(QPointF(start + QPoint(0, 8 * step))),
                             Qt::NoButton, Qt::LeftButton, Qt::NoModifier);
            QApplication::sendEvent(axial, &move);
        }
        QTest::mouseRelease(axial, Qt::LeftButton, Qt::NoModifier, start + QPoint(0, 48));
        const std::int64_t after = design->grid().boundaries[0][1];
        QVERIFY2(after != before, qPrintable(QStringLiteral("the cut stayed at %1").arg(after)));
        QCOMPARE(after % design->alignment()[0], 0);  // snapped to the U-Net's stride
        QCOMPARE(design->undoStack()->index(), undo_base + 3);
        QCOMPARE(design->cores()[0].owned[0].end, after);
        QVERIFY(QString::fromStdString(design->experimentText()).contains(QStringLiteral("tile_boundaries")));

        // Undo the drag and both spin-box edits: back to the file's 4×1.
        design->undoStack()->undo();
        QCOMPARE(design->grid().boundaries[0][1], before);
        design->undoStack()->undo();
        design->undoStack()->undo();
        QCOMPARE(design->pieces(), (std::vector<std::int64_t>{4, 1}));
        QCOMPARE(panel->piecesBox(0)->value(), 4);
        QCOMPARE(panel->dimsEdit()->text(), QStringLiteral("[[1, 4, 1, 1], null]"));
        QCOMPARE(memories(*design), memory_4x1);
        QVERIFY(!design->isModified());

        // A planner row applied to the editor.
        PlannerPanel* planner = window.plannerPanel();
        QSignalSpy planned(planner, &PlannerPanel::planned);
        QVERIFY(planned.wait(60000) || !planner->isBusy());
        QTableView* table = planner->table();
        QVERIFY(table->model()->rowCount() > 1);
        int other_row = -1;
        for (int row = 0; row < table->model()->rowCount() && other_row < 0; ++row) {
            const QString pieces = table->model()->index(row, PlannerPanel::PiecesColumn).data().toString();
            const QString replicas = table->model()->index(row, PlannerPanel::ReplicasColumn).data().toString();
            if (pieces == QStringLiteral("1×4") && replicas == QStringLiteral("1")) other_row = row;
        }
        QVERIFY2(other_row >= 0, "the planner lists the 1×4 layout");
        table->scrollTo(table->model()->index(other_row, 0));
        const QRect cell = table->visualRect(table->model()->index(other_row, PlannerPanel::LayoutColumn));
        QTest::mouseClick(table->viewport(), Qt::LeftButton, Qt::NoModifier, cell.center());
        QCOMPARE(design->pieces(), (std::vector<std::int64_t>{1, 4}));
        QCOMPARE(panel->dimsEdit()->text(), QStringLiteral("[[1, 1, 4, 1], null]"));

        // Both snippets carry the design.
        const QString tpu = window.exportSnippet(SnippetKind::TpuConfig);
        QVERIFY2(tpu.contains(QStringLiteral("num_cores_per_replica=4")), qPrintable(tpu));
        QVERIFY2(tpu.contains(QStringLiteral("input_partition_dims=[[1, 1, 4, 1], None]")), qPrintable(tpu));
        QVERIFY2(tpu.contains(QStringLiteral("PER_HOST_V2")), qPrintable(tpu));
        const QString jax = window.exportSnippet(SnippetKind::Jax);
        QVERIFY2(jax.contains(QStringLiteral("PartitionSpec")), qPrintable(jax));
        QVERIFY2(jax.contains(QStringLiteral("Mesh")), qPrintable(jax));

        // The 3D view draws one box per core.
        QCOMPARE(window.volumeView()->scene()->tileBoxCount(), std::size_t{4});

        // Saved: the file holds the design and opens again as it was.
        QTemporaryDir dir;
        const QString saved = dir.filePath(QStringLiteral("designed.json"));
        QVERIFY(window.saveExperiment(saved));
        QVERIFY(!design->isModified());
        const experiment::Experiment reread = experiment::load_experiment(saved.toStdString());
        QCOMPARE(experiment::spatial_pieces(reread), (std::vector<std::int64_t>{1, 4}));
        QVERIFY(reread.data.has_value());  // the data section kept
    }

    void refusesBadEditsInPlace() {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(window.openExperiment(presets + QStringLiteral("unet3d_ct_256_16cores.json")));
        PartitionDesign* design = window.design();
        const auto pieces = design->pieces();
        const int index = design->undoStack()->index();

        // input_partition_dims that do not fit the input: the engine's message, nothing changed.
        PartitionPanel* panel = window.partitionPanel();
        panel->dimsEdit()->setText(QStringLiteral("[1, 2, 2, 4]"));
        QTest::keyClick(panel->dimsEdit(), Qt::Key_Return);
        QVERIFY(panel->messageLabel()->isVisibleTo(panel));
        QVERIFY2(panel->messageLabel()->text().contains(QStringLiteral("NDHWC")), qPrintable(panel->messageLabel()->text()));
        QCOMPARE(design->pieces(), pieces);
        QCOMPARE(design->undoStack()->index(), index);

        // A U-Net input that its depth cannot halve: the message sits under the input size field.
        ExperimentPanel* fields = window.experimentPanel();
        QVERIFY(!fields->applyField(QStringLiteral("input.size"), QStringLiteral("[250, 256, 256]")));
        QVERIFY(fields->fieldMessage(QStringLiteral("input.size"))->isVisibleTo(fields));
        QVERIFY(!fields->fieldMessage(QStringLiteral("input.size"))->text().isEmpty());
        QCOMPARE(design->experiment().size, (std::vector<std::int64_t>{256, 256, 256}));

        // A good field edit is one undo step and changes the costs.
        const double step = design->predictedStepSeconds();
        QVERIFY(fields->applyField(QStringLiteral("model.base_width"), QStringLiteral("16")));
        QVERIFY(!fields->fieldMessage(QStringLiteral("input.size"))->isVisibleTo(fields));
        QCOMPARE(design->experiment().model.base_width, 16);
        QVERIFY(design->predictedStepSeconds() < step);
        QCOMPARE(design->pieces(), pieces);  // the design survives field edits
        design->undoStack()->undo();
        QCOMPARE(design->experiment().model.base_width, 32);
        QVERIFY(!design->isModified());
    }

    // ResNeXt from the fields: typing 32 groups into a ResNet-50 makes it ResNeXt50-32x4d in one edit
    // (groups alone would be refused: they need a width per group); RetinaNet's coarse levels by combo.
    void aResNeXtBackboneAndCoarseLevelsAreSetInTheFields() {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(window.openExperiment(presets + QStringLiteral("resnet50_fake_8replicas.json")));
        PartitionDesign* design = window.design();
        ExperimentPanel* fields = window.experimentPanel();
        auto* groups = qobject_cast<QSpinBox*>(fields->fieldEditor(QStringLiteral("model.groups")));
        QVERIFY(groups && groups->isEnabled());
        QVERIFY(!fields->fieldEditor(QStringLiteral("model.coarse_levels"))->isEnabled());  // no pyramid in a ResNet
        QCOMPARE(groups->value(), 1);
        const int index = design->undoStack()->index();
        groups->setFocus();
        groups->selectAll();
        QTest::keyClicks(groups, QStringLiteral("32"));
        QTest::keyClick(groups, Qt::Key_Return);
        QCOMPARE(design->experiment().model.groups, 32);
        QCOMPARE(design->experiment().model.width_per_group, 4);
        QCOMPARE(qobject_cast<QSpinBox*>(fields->fieldEditor(QStringLiteral("model.width_per_group")))->value(), 4);
        QCOMPARE(design->undoStack()->index(), index + 1);  // one edit
        QVERIFY(!fields->fieldMessage(QStringLiteral("model.groups"))->isVisibleTo(fields));
        design->undoStack()->undo();
        QCOMPARE(design->experiment().model.groups, 1);
        QCOMPARE(design->experiment().model.width_per_group, 0);
        QCOMPARE(groups->value(), 1);
        design->setSaved();

        QVERIFY(window.openExperiment(presets + QStringLiteral("retinanet_shapes_4way.json")));
        auto* coarse = qobject_cast<QComboBox*>(fields->fieldEditor(QStringLiteral("model.coarse_levels")));
        QVERIFY(coarse && coarse->isEnabled());
        QCOMPARE(coarse->currentText(), QStringLiteral("exact"));
        QVERIFY(fields->applyField(QStringLiteral("model.coarse_levels"), QStringLiteral("\"round_up\"")));
        QVERIFY(design->experiment().model.round_up_coarse_levels);
        QCOMPARE(coarse->currentText(), QStringLiteral("round_up"));
        // A detector's own fields are shown, a U-Net's hidden; the pyramid's batch norm is a click away.
        QVERIFY(fields->fieldEditor(QStringLiteral("model.fpn_channels"))->isVisibleTo(fields));
        QVERIFY(!fields->fieldEditor(QStringLiteral("model.max_width"))->isVisibleTo(fields));
        auto* pyramid_norm = qobject_cast<QCheckBox*>(fields->fieldEditor(QStringLiteral("model.fpn_batch_norm")));
        QVERIFY(pyramid_norm && pyramid_norm->isChecked());
        QTest::mouseClick(pyramid_norm, Qt::LeftButton, Qt::NoModifier, QPoint(8, pyramid_norm->height() / 2));
        QVERIFY(!design->experiment().model.fpn_batch_norm);
        design->setSaved();

        // A U-Net: its width cap and downsampling, no backbone or pyramid fields.
        QVERIFY(window.openExperiment(presets + QStringLiteral("unet2d_em_4way.json")));
        QVERIFY(fields->fieldEditor(QStringLiteral("model.max_width"))->isVisibleTo(fields));
        QVERIFY(!fields->fieldEditor(QStringLiteral("model.groups"))->isVisibleTo(fields));
        QVERIFY(!fields->fieldEditor(QStringLiteral("model.fpn_channels"))->isVisibleTo(fields));
        QVERIFY(fields->applyField(QStringLiteral("model.downsampling"), QStringLiteral("\"strided_conv\"")));
        QVERIFY(design->experiment().model.strided_downsampling);
        QCOMPARE(qobject_cast<QComboBox*>(fields->fieldEditor(QStringLiteral("model.downsampling")))->currentText(), QStringLiteral("strided_conv"));
        design->setSaved();
    }

    void tpuCompatibilityIsShownBesideTheExperiment() {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        ExperimentPanel* fields = window.experimentPanel();
        // A GPU-style detector config: the bipartite matcher fails its rule, with the seed's fix.
        // (A 128² RetinaNet on one core: the studio once refused it, looking for halos on a 2×2 split its
        // P7 cannot take.)
        QVERIFY2(window.openExperiment(QStringLiteral(TESSERA_SOURCE_DIR "/tests/app/retinanet_bipartite.json")), qPrintable(window.lastError()));
        QCOMPARE(fields->tpuRules()->topLevelItemCount(), 6);
        QTreeWidgetItem* matcher = nullptr;
        for (int row = 0; row < fields->tpuRules()->topLevelItemCount(); ++row) {
            QTreeWidgetItem* item = fields->tpuRules()->topLevelItem(row);
            if (item->toolTip(0).contains(QStringLiteral("argmax_matcher"))) matcher = item;
        }
        QVERIFY(matcher != nullptr);
        QCOMPARE(matcher->text(1), QStringLiteral("FAIL"));
        QVERIFY2(matcher->toolTip(0).contains(QStringLiteral("Fix:")), qPrintable(matcher->toolTip(0)));
        QVERIFY(fields->tpuSummary()->text().contains(QStringLiteral("1 fail")));
        window.design()->setSaved();
        // The shapes preset follows every rule that concerns it.
        QVERIFY(window.openExperiment(QStringLiteral(TESSERA_SOURCE_DIR "/resources/experiments/retinanet_shapes_4way.json")));
        QVERIFY2(!fields->tpuSummary()->text().contains(QStringLiteral("fail")), qPrintable(fields->tpuSummary()->text()));
        for (int row = 0; row < fields->tpuRules()->topLevelItemCount(); ++row) {
            QVERIFY(fields->tpuRules()->topLevelItem(row)->text(1) != QStringLiteral("FAIL"));
        }
        window.design()->setSaved();
    }

    // A detection experiment opened with nothing loaded draws its grid over its own data's first held-out
    // image (grey: the mean of its channels), not over a CT phantom.
    void aDetectionExperimentDrawsItsGridOverItsOwnImage() {
        MainWindow window;
        window.resize(1400, 900);
        window.show();
        QVERIFY(!window.model()->hasVolume());
        const QString path = QStringLiteral(TESSERA_SOURCE_DIR "/resources/experiments/retinanet_shapes_4way.json");
        QVERIFY2(window.openExperiment(path), qPrintable(window.lastError()));
        QVERIFY(window.model()->hasVolume());
        const tessera::Volume& volume = *window.model()->volume();
        QCOMPARE(QString::fromStdString(volume.source_path), QStringLiteral("shapes_eval_0"));
        QCOMPARE(volume.geometry.size, (std::array<std::int64_t, 3>{512, 512, 1}));
        // The same pixels as the data source's own example.
        const experiment::Experiment e = experiment::load_experiment(path.toStdString());
        const data::Example example =
            data::make_dataset(*e.data, experiment::global_input_shape(e), e.model.num_classes)->eval_example(0);
        const std::int64_t pixels = 512 * 512;
        for (const std::int64_t p : {std::int64_t{0}, std::int64_t{1000}, pixels / 2 + 77, pixels - 1}) {
            const float* rgb = example.image.data<float>();
            const float expected = (rgb[p] + rgb[pixels + p] + rgb[2 * pixels + p]) / 3.0f;
            QCOMPARE(volume.voxels.data<float>()[p], expected);
        }
        window.design()->setSaved();
    }
};

TESSERA_GL_TEST_MAIN(tst_PartitionEditor)
#include "tst_partition_editor.moc"
