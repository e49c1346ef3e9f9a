// MainWindow: opening real scans and label maps, errors that lose nothing, presets, 2D layout,
// recent files and drag-and-drop.
#include "data/examples.hpp"
#include "gl_test_main.hpp"
#include "io/label_descriptions.hpp"
#include "io/volume_io.hpp"
#include "widgets/label_legend.hpp"
#include "widgets/main_window.hpp"
#include "widgets/slice_view.hpp"

#include <QComboBox>
#include <QHeaderView>
#include <QLineEdit>
#include <QPushButton>
#include <QFile>
#include <QMenu>
#include <QMimeData>
#include <QAction>
#include <QLabel>
#include <QDockWidget>
#include <QSettings>
#include <QSlider>
#include <QTemporaryDir>
#include <QTreeWidget>
#include <QUrl>

#include <fstream>
#include <iterator>

using namespace tessera;
using namespace tessera::ui;

namespace {
const QString data_dir = QStringLiteral("/usr/share/doc/insighttoolkit5-examples/examples/Data/");
QString example(const char* name) { return data_dir + QLatin1String(name); }
}  // namespace

class tst_MainWindow : public QObject {
    Q_OBJECT
private slots:
    void init() {
        QSettings().clear();
        if (!find_example_mri()) QSKIP("the example MRI needs Debian's insighttoolkit5-examples");
    }

    void viewerFirstUntilAnExperimentOpens() {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        // No experiment, no run: the views get the window; the design and run docks wait, with a hint.
        const QStringList waiting{QStringLiteral("experimentDock"), QStringLiteral("partitionDock"), QStringLiteral("runDock"),
                                  QStringLiteral("plannerDock"), QStringLiteral("trainingDock"), QStringLiteral("equivalenceDock")};
        for (const QString& name : waiting) QVERIFY2(!window.findChild<QDockWidget*>(name)->isVisible(), qPrintable(name));
        QVERIFY(window.findChild<QDockWidget*>(QStringLiteral("imageDock"))->isVisible());
        auto* hint = window.findChild<QLabel*>(QStringLiteral("waitingDocksHint"));
        QVERIFY(hint && hint->isVisible());
        // A closed dock stays closed: the user's arrangement, not all of them, comes back.
        window.findChild<QDockWidget*>(QStringLiteral("equivalenceDock"))->close();
        QVERIFY(window.openExperiment(QStringLiteral(TESSERA_SOURCE_DIR "/resources/experiments/unet2d_em_4way.json")));
        QTest::qWait(50);
        QVERIFY(window.findChild<QDockWidget*>(QStringLiteral("partitionDock"))->isVisible());  // in front of Run
        QVERIFY(window.findChild<QDockWidget*>(QStringLiteral("plannerDock"))->isVisible());    // in front of Training
        QVERIFY(!hint->isVisible());
    }

    void resetLayoutPutsEveryDockBack() {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        auto* planner = window.findChild<QDockWidget*>(QStringLiteral("plannerDock"));
        auto* image = window.findChild<QDockWidget*>(QStringLiteral("imageDock"));
        auto* partition = window.findChild<QDockWidget*>(QStringLiteral("partitionDock"));
        QVERIFY(planner && image && partition);
        QCOMPARE(window.dockWidgetArea(image), Qt::RightDockWidgetArea);
        // A user's rearrangement: the image dock moved left, the planner closed, the partition floated.
        window.addDockWidget(Qt::LeftDockWidgetArea, image);
        planner->close();
        partition->setFloating(true);
        QTest::qWait(50);
        QVERIFY(!planner->isVisible());
        auto* reset = window.findChild<QAction*>(QStringLiteral("resetLayoutAction"));
        QVERIFY(reset);
        reset->trigger();
        QTest::qWait(100);
        QCOMPARE(window.dockWidgetArea(image), Qt::RightDockWidgetArea);
        QCOMPARE(window.dockWidgetArea(planner), Qt::BottomDockWidgetArea);
        QVERIFY(planner->isVisible());
        QVERIFY(!partition->isFloating());
        QCOMPARE(window.dockWidgetArea(partition), Qt::LeftDockWidgetArea);
        QVERIFY(partition->isVisible());  // the design's tab in front of the Run dock's
        QCOMPARE(window.size(), QSize(1240, 760));
        // Readable side panels after a reset, as at a first start.
        QVERIFY2(partition->width() >= 250, qPrintable(QString::number(partition->width())));
        QVERIFY2(planner->height() >= 250, qPrintable(QString::number(planner->height())));
    }

    void opensTheExampleMriWithItsMask() {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(window.openImage(example("KmeansTest_T1UCharRaw.nii.gz")));
        QVERIFY(window.openLabelMap(example("KmeansTest_T1RawSkullStrip.nii.gz")));
        QCOMPARE(window.model()->volume()->geometry.size, (std::array<std::int64_t, 3>{128, 128, 62}));
        QCOMPARE(window.model()->presentLabels(), (std::vector<std::int32_t>{4, 5, 6}));
        QCOMPARE(window.legend()->labelList()->topLevelItemCount(), 3);
        for (SliceOrientation orientation : {SliceOrientation::Axial, SliceOrientation::Coronal, SliceOrientation::Sagittal}) {
            QVERIFY(window.sliceView(orientation)->isVisible());
            QVERIFY(!window.sliceView(orientation)->sliceImage().isNull());
        }
        // The file is stored coronally (i: left, j: superior, k: anterior), so the axial view shows i × k,
        // the coronal view i × j and the sagittal view k × j.
        QCOMPARE(window.sliceView(SliceOrientation::Axial)->sliceImage().size(), QSize(128, 62));
        QCOMPARE(window.sliceView(SliceOrientation::Coronal)->sliceImage().size(), QSize(128, 128));
        QCOMPARE(window.sliceView(SliceOrientation::Sagittal)->sliceImage().size(), QSize(62, 128));
        QVERIFY(window.windowTitle().contains(QStringLiteral("KmeansTest_T1UCharRaw")));
        const QString status = window.statusText();
        QVERIFY2(status.contains(QStringLiteral("voxel (64, 64, 31)")) && status.contains(QStringLiteral("value")) &&
                     status.contains(QStringLiteral("world")) && status.contains(QStringLiteral("label")),
                 qPrintable(status));
    }

    void statusFollowsTheMouse() {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(window.openImage(example("KmeansTest_T1UCharRaw.nii.gz")));
        SliceView* axial = window.sliceView(SliceOrientation::Axial);
        // A voxel in the axial view's current slice: move the cursor's in-plane coordinates only.
        const SliceAxes axes = sliceAxes(window.model()->volume()->geometry, SliceOrientation::Axial);
        auto voxel = window.model()->cursor();
        voxel[static_cast<std::size_t>(axes.axis_x)] = 20;
        voxel[static_cast<std::size_t>(axes.axis_y)] = 25;
        // Sent to the widget directly: moving the X pointer is at the mercy of other windows.
        const QPointF position = axial->positionOfVoxel(voxel);
        QMouseEvent move(QEvent::MouseMove, position, axial->mapToGlobal(position), Qt::NoButton, Qt::NoButton,
                         Qt::NoModifier);
        QApplication::sendEvent(axial, &move);
        const QString expected = QStringLiteral("voxel (%1, %2, %3)").arg(voxel[0]).arg(voxel[1]).arg(voxel[2]);
        QTRY_VERIFY2(window.statusText().contains(expected), qPrintable(window.statusText()));
        const float value = window.model()->volume()->value_at(voxel[0], voxel[1], voxel[2]);
        QVERIFY2(window.statusText().contains(QStringLiteral("value %1").arg(static_cast<double>(value), 0, 'g', 6)),
                 qPrintable(window.statusText()));
    }

    void labelControlsChangeTheOverlay() {
        MainWindow window;
        window.show();
        QVERIFY(window.openImage(example("KmeansTest_T1UCharRaw.nii.gz")));
        QVERIFY(window.openLabelMap(example("KmeansTest_T1RawSkullStrip.nii.gz")));
        SliceView* axial = window.sliceView(SliceOrientation::Axial);
        const QImage with_labels = axial->sliceImage();
        window.legend()->opacitySlider()->setValue(0);
        QCOMPARE(window.model()->labelOpacity(), 0.0);
        const QImage without_labels = axial->sliceImage();
        QVERIFY(with_labels != without_labels);
        window.legend()->opacitySlider()->setValue(100);
        QTreeWidgetItem* first = window.legend()->labelList()->topLevelItem(0);
        first->setCheckState(0, Qt::Unchecked);
        QVERIFY(!window.model()->isLabelVisible(4));
        QTRY_COMPARE(window.legend()->labelList()->topLevelItem(0)->checkState(0), Qt::Unchecked);
    }

    // A .seg.nrrd's segment names and colours reach the legend and the overlay (3D Slicer's key/value
    // pairs, appended here to the detached header Tessera writes for the skull-strip labels).
    void segmentNamesAndColoursFromASlicerSegmentation() {
        QTemporaryDir scratch;
        const std::string header = scratch.filePath(QStringLiteral("skull.seg.nhdr")).toStdString();
        write_label_map(read_label_map(example("KmeansTest_T1RawSkullStrip.nii.gz").toStdString()), header);
        std::string text;
        {
            std::ifstream in(header);
            text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        }
        while (!text.empty() && text.back() == '\n') text.pop_back();
        text += "\nSegment0_Name:=White matter\nSegment0_LabelValue:=5\nSegment0_Color:=0 0 1\n"
                "Segment1_Name:=Grey matter\nSegment1_LabelValue:=4\n";
        std::ofstream(header, std::ios::trunc) << text;

        MainWindow window;
        window.show();
        QVERIFY(window.openImage(example("KmeansTest_T1UCharRaw.nii.gz")));
        // The cursor on white matter before the labels open: the status bar must name it once they do.
        const tessera::LabelMap opened = read_label_map(header);
        std::array<std::int64_t, 3> white{-1, -1, -1};
        for (std::int64_t k = 0; k < opened.geometry.size[2] && white[0] < 0; ++k)
            for (std::int64_t j = 0; j < opened.geometry.size[1] && white[0] < 0; ++j)
                for (std::int64_t i = 0; i < opened.geometry.size[0] && white[0] < 0; ++i)
                    if (opened.label_at(i, j, k) == 5) white = {i, j, k};
        window.model()->setCursor(white);
        QVERIFY2(window.openLabelMap(QString::fromStdString(header)), qPrintable(window.lastError()));
        QVERIFY2(window.statusText().contains(QStringLiteral("label 5 (White matter)")), qPrintable(window.statusText()));
        QCOMPARE(window.legend()->labelName(5), QStringLiteral("White matter"));
        QCOMPARE(window.legend()->labelName(4), QStringLiteral("Grey matter"));
        QCOMPARE(window.legend()->labelName(6), QStringLiteral("Label 6"));  // the file names no segment 6
        QCOMPARE(window.model()->labelColor(5), QColor(0, 0, 255));
        QTRY_COMPARE(window.legend()->labelList()->topLevelItem(1)->text(0), QStringLiteral("White matter"));
        // A plain label map opened after it names nothing.
        QVERIFY(window.openLabelMap(example("KmeansTest_T1RawSkullStrip.nii.gz")));
        QCOMPARE(window.legend()->labelName(5), QStringLiteral("Label 5"));
    }

    // An atlas's MRIcron sidecars beside it name the labels when it opens; a label description file
    // opened explicitly renames them; the legend saved as ITK-SNAP's file reads back the same; a bad file
    // is refused and the names stay.
    void labelDescriptionsFromSidecarsFilesAndBack() {
        QTemporaryDir scratch;
        const std::filesystem::path dir = scratch.path().toStdString();
        write_label_map(read_label_map(example("KmeansTest_T1RawSkullStrip.nii.gz").toStdString()), dir / "tissue.nii.gz");
        std::ofstream(dir / "tissue.nii.txt") << "4 Grey_matter\n5 White_matter\n6 CSF\n";
        MainWindow window;
        window.show();
        QVERIFY(window.openImage(example("KmeansTest_T1UCharRaw.nii.gz")));
        QVERIFY(window.openLabelMap(QString::fromStdString((dir / "tissue.nii.gz").string())));
        QCOMPARE(window.legend()->labelName(6), QStringLiteral("CSF"));

        std::ofstream(dir / "itksnap.txt") << "    5   10  20  30     1  1  1    \"Cerebral white matter\"\n";
        QVERIFY2(window.openLabelDescriptions(QString::fromStdString((dir / "itksnap.txt").string())), qPrintable(window.lastError()));
        QCOMPARE(window.legend()->labelName(5), QStringLiteral("Cerebral white matter"));
        QCOMPARE(window.legend()->labelName(6), QStringLiteral("Label 6"));  // that file names 5 only
        QCOMPARE(window.model()->labelColor(5), QColor(10, 20, 30));

        const QString saved = QString::fromStdString((dir / "legend.txt").string());
        QVERIFY(window.saveLabelDescriptions(saved));
        const std::vector<LabelDescription> back = read_label_descriptions(saved.toStdString());
        QCOMPARE(back.size(), std::size_t{3});  // every label the legend lists
        QCOMPARE(QString::fromStdString(back[1].name), QStringLiteral("Cerebral white matter"));
        QCOMPARE(back[1].value, 5);
        QVERIFY(back[1].color.has_value() && (*back[1].color)[0] == 10 / 255.0f);
        QCOMPARE(QString::fromStdString(back[2].name), QStringLiteral("Label 6"));

        // The label map saved as a 3D Slicer segmentation keeps the legend's names and colours, and opens
        // with them.
        const QString segmentation = QString::fromStdString((dir / "tissue.seg.nrrd").string());
        QVERIFY2(window.saveLabelMap(segmentation), qPrintable(window.lastError()));
        const LabelMap saved_map = read_label_map(segmentation.toStdString());
        QCOMPARE(saved_map.descriptions.size(), std::size_t{3});
        QCOMPARE(QString::fromStdString(saved_map.descriptions[1].name), QStringLiteral("Cerebral white matter"));
        QVERIFY(saved_map.descriptions[1].color.has_value() && std::abs((*saved_map.descriptions[1].color)[1] - 20 / 255.0f) < 1e-5f);
        QVERIFY(window.openLabelMap(example("KmeansTest_T1RawSkullStrip.nii.gz")));
        QCOMPARE(window.legend()->labelName(5), QStringLiteral("Label 5"));
        QVERIFY(window.openLabelMap(segmentation));
        QCOMPARE(window.legend()->labelName(5), QStringLiteral("Cerebral white matter"));
        QCOMPARE(window.model()->labelColor(5), QColor(10, 20, 30));

        std::ofstream(dir / "broken.txt") << "5 White 999 0 0 255\n";
        QVERIFY(!window.openLabelDescriptions(QString::fromStdString((dir / "broken.txt").string())));
        QVERIFY2(window.lastError().contains(QStringLiteral("broken.txt' line 1")), qPrintable(window.lastError()));
        QCOMPARE(window.legend()->labelName(5), QStringLiteral("Cerebral white matter"));
    }

    void badFilesAreReportedAndLoseNothing() {
        MainWindow window;
        window.show();
        QVERIFY(window.openImage(example("KmeansTest_T1UCharRaw.nii.gz")));
        QVERIFY(window.openLabelMap(example("KmeansTest_T1RawSkullStrip.nii.gz")));
        const auto volume_before = window.model()->volume();
        const auto labels_before = window.model()->labelMap();

        QTemporaryDir scratch;
        const QString notes = scratch.filePath(QStringLiteral("notes.nii.gz"));
        QFile file(notes);
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write("not an image at all\n");
        file.close();
        QVERIFY(!window.openImage(notes));
        QVERIFY2(window.lastError().contains(QStringLiteral("notes.nii.gz")), qPrintable(window.lastError()));
        QCOMPARE(window.model()->volume(), volume_before);

        // A label map on another grid: a 2D slice is not the MRI's grid.
        QVERIFY(!window.openLabelMap(example("BrainProtonDensitySlice.png")));
        QVERIFY2(window.lastError().contains(QStringLiteral("grid")), qPrintable(window.lastError()));
        QCOMPARE(window.model()->labelMap(), labels_before);
        QCOMPARE(window.model()->volume(), volume_before);
    }

    void windowPresets() {
        MainWindow window;
        window.show();
        window.showPhantom(false);
        // A CT phantom opens with the soft-tissue window.
        QCOMPARE(window.model()->windowLevel().window, 400.0);
        QCOMPARE(window.model()->windowLevel().level, 40.0);
        QComboBox* presets = window.presetBox();
        const int bone = presets->findText(QStringLiteral("CT bone"));
        QVERIFY(bone >= 0);
        presets->setCurrentIndex(bone);
        emit presets->activated(bone);
        QCOMPARE(window.model()->windowLevel().window, 1800.0);
        QCOMPARE(window.model()->windowLevel().level, 400.0);

        QVERIFY(window.openImage(example("KmeansTest_T1UCharRaw.nii.gz")));
        const int automatic = presets->count() - 1;
        emit presets->activated(automatic);
        const WindowLevel expected = window.model()->autoWindow();
        QCOMPARE(window.model()->windowLevel().window, expected.window);
        QVERIFY(expected.lower() >= window.model()->minimumValue() && expected.upper() <= window.model()->maximumValue());
    }

    void phantomHasNamedLabels() {
        MainWindow window;
        window.showPhantom(false);
        QCOMPARE(window.model()->presentLabels(), (std::vector<std::int32_t>{1, 2, 3, 4, 5}));
        QCOMPARE(window.legend()->labelName(2), QStringLiteral("lung"));
    }

    // The legend with real input: typing in the search field filters rows by name, a header click sorts
    // by name, a double-click shows one label alone and a second shows all again, the buttons show and
    // hide every label.
    void legendSearchSortIsolateAndShowHideAll() {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        window.showPhantom(false);
        LabelLegend* legend = window.legend();
        QTreeWidget* list = legend->labelList();
        QCOMPARE(list->topLevelItemCount(), 5);
        auto visible_rows = [&] {
            QStringList names;
            for (int row = 0; row < list->topLevelItemCount(); ++row) {
                if (!list->topLevelItem(row)->isHidden()) names << list->topLevelItem(row)->text(0);
            }
            return names;
        };
        QTest::keyClicks(legend->searchField(), QStringLiteral("LUN"));
        QCOMPARE(visible_rows(), QStringList{QStringLiteral("lung")});
        legend->searchField()->clear();
        QCOMPARE(visible_rows().size(), 5);

        // Sorted by value first; a click on the Label header sorts by name.
        QCOMPARE(list->topLevelItem(0)->text(1), QStringLiteral("1"));
        QTest::mouseClick(list->header()->viewport(), Qt::LeftButton, {},
                          QPoint(list->header()->sectionViewportPosition(0) + 5, list->header()->height() / 2));
        QStringList names = visible_rows();
        QStringList sorted = names;
        std::sort(sorted.begin(), sorted.end(), [](const QString& a, const QString& b) { return a.compare(b, Qt::CaseInsensitive) < 0; });
        QCOMPARE(names, sorted);

        auto row_of = [&](std::int32_t label) {
            for (int row = 0; row < list->topLevelItemCount(); ++row) {
                if (list->topLevelItem(row)->text(1) == QString::number(label)) return list->topLevelItem(row);
            }
            return static_cast<QTreeWidgetItem*>(nullptr);
        };
        // A double-click as a mouse makes it: press and release, then the second press that Qt reports as one.
        auto double_click = [&](std::int32_t label) {
            const QPoint at = list->visualItemRect(row_of(label)).center();
            QTest::mouseClick(list->viewport(), Qt::LeftButton, {}, at);
            QTest::mouseDClick(list->viewport(), Qt::LeftButton, {}, at);
        };
        double_click(2);
        QTRY_VERIFY(window.model()->isLabelVisible(2) && !window.model()->isLabelVisible(1) && !window.model()->isLabelVisible(5));
        QTRY_COMPARE(row_of(1)->checkState(0), Qt::Unchecked);
        double_click(2);
        QTRY_VERIFY(window.model()->isLabelVisible(1) && window.model()->isLabelVisible(5));

        QTest::mouseClick(legend->hideAllButton(), Qt::LeftButton);
        for (std::int32_t label : window.model()->presentLabels()) QVERIFY(!window.model()->isLabelVisible(label));
        QTest::mouseClick(legend->showAllButton(), Qt::LeftButton);
        for (std::int32_t label : window.model()->presentLabels()) QVERIFY(window.model()->isLabelVisible(label));
    }

    void twoDimensionalImagesShowOneView() {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(window.openImage(example("BrainProtonDensitySlice.png")));
        QVERIFY(window.model()->volume()->geometry.is_2d());
        QVERIFY(window.sliceView(SliceOrientation::Axial)->isVisible());
        QVERIFY(!window.sliceView(SliceOrientation::Coronal)->isVisible());
        QVERIFY(!window.sliceView(SliceOrientation::Sagittal)->isVisible());
        QVERIFY(window.openImage(example("KmeansTest_T1UCharRaw.nii.gz")));
        QVERIFY(window.sliceView(SliceOrientation::Coronal)->isVisible());
    }

    void recentFilesAreRemembered() {
        MainWindow window;
        QVERIFY(window.openImage(example("BrainProtonDensitySlice.png")));
        QVERIFY(window.openImage(example("KmeansTest_T1UCharRaw.nii.gz")));
        const QStringList recent = QSettings().value(QStringLiteral("recentImages")).toStringList();
        QCOMPARE(recent.size(), 2);
        QVERIFY(recent.front().endsWith(QStringLiteral("KmeansTest_T1UCharRaw.nii.gz")));
        QVERIFY(window.recentMenu()->isEnabled());
        QVERIFY(window.recentMenu()->actions().front()->text().contains(QStringLiteral("KmeansTest_T1UCharRaw")));
        // A second window (the next session) lists them too, and opens one.
        MainWindow next;
        next.recentMenu()->actions().at(1)->trigger();
        QVERIFY(next.model()->volume()->source_path.ends_with("BrainProtonDensitySlice.png"));
    }

    void droppingTwoFilesOpensImageAndLabels() {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QMimeData mime;
        mime.setUrls({QUrl::fromLocalFile(example("KmeansTest_T1UCharRaw.nii.gz")),
                      QUrl::fromLocalFile(example("KmeansTest_T1RawSkullStrip.nii.gz"))});
        const QPoint centre = window.rect().center();
        QDragEnterEvent enter(centre, Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QApplication::sendEvent(&window, &enter);
        QVERIFY(enter.isAccepted());
        QDropEvent drop(QPointF(centre), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QApplication::sendEvent(&window, &drop);
        QVERIFY(window.model()->hasVolume());
        QVERIFY(window.model()->labelMap() != nullptr);
    }
};

TESSERA_GL_TEST_MAIN(tst_MainWindow)
#include "tst_main_window.moc"
