// A volume too large to hold, in the studio: opened by region, it shows a downsampled overview (the 3D
// view, and each slice until its full resolution is read) and full-resolution slices read on demand.
// The reference is the same file read whole (read_volume, another code path) and rendered by the
// renderer the whole-volume views use: every full-resolution slice must equal it pixel for pixel.
// The screenshot goes to streamed_volume_screens/ beside the binary (README:
// resources/screenshots/streamed_volume.png).
#include "data/phantom.hpp"
#include "gl_test_main.hpp"
#include "io/label_descriptions.hpp"
#include "io/volume_io.hpp"
#include "io/volume_overview.hpp"
#include "render/volume_scene.hpp"
#include "widgets/main_window.hpp"
#include "widgets/slice_view.hpp"
#include "widgets/volume_view.hpp"
#include "widgets/vtk_gl_widget.hpp"

#include <QDir>
#include <QFile>
#include <QStatusBar>
#include <QTemporaryDir>

#include <cmath>

using namespace tessera;
using namespace tessera::ui;

namespace {

constexpr std::array<SliceOrientation, 3> orientations{SliceOrientation::Axial, SliceOrientation::Coronal, SliceOrientation::Sagittal};

// Smooth bands plus a one-voxel checkerboard: the overview's block means lose the checkerboard, so a
// full-resolution slice and an overview slice never look alike.
Volume detailedVolume(std::array<std::int64_t, 3> size) {
    ImageGeometry geometry;
    geometry.size = size;
    geometry.spacing = {0.5, 0.5, 1.5};
    geometry.origin = {-20.0, 4.0, 7.5};
    Volume volume = make_volume(geometry);
    float* voxels = volume.voxels.data<float>();
    for (std::int64_t k = 0; k < size[2]; ++k)
        for (std::int64_t j = 0; j < size[1]; ++j)
            for (std::int64_t i = 0; i < size[0]; ++i)
                voxels[(k * size[1] + j) * size[0] + i] =
                    static_cast<float>(300.0 * std::sin(static_cast<double>(i) / 9.0) + 2.0 * static_cast<double>(j) + 10.0 * static_cast<double>(k) +
                                       ((i + j + k) % 2 == 0 ? 80.0 : -80.0));
    volume.source_scalar_type = "float32";
    return volume;
}

// The environment the studio reads its limits from, restored after each test.
// The overview cache goes to a scratch folder, never the user's.
struct Limits {
    Limits(const char* whole_bytes, const char* overview_voxels) {
        qputenv("TESSERA_STUDIO_VOLUME_BYTES", whole_bytes);
        qputenv("TESSERA_OVERVIEW_VOXELS", overview_voxels);
        qputenv("TESSERA_CACHE_DIR", cache.path().toUtf8());
    }
    ~Limits() {
        qunsetenv("TESSERA_STUDIO_VOLUME_BYTES");
        qunsetenv("TESSERA_OVERVIEW_VOXELS");
        qunsetenv("TESSERA_CACHE_DIR");
    }
    QTemporaryDir cache;
};

QImage wholeSlice(const Volume& whole, SliceOrientation orientation, const std::array<std::int64_t, 3>& cursor, WindowLevel window) {
    const SliceAxes axes = sliceAxes(whole.geometry, orientation);
    return SliceRenderer::renderIntensity(whole, axes, cursor[static_cast<std::size_t>(axes.axis_normal)], window);
}

}  // namespace

class tst_StreamedVolume : public QObject {
    Q_OBJECT
private slots:
    void aVolumeOverTheLimitOpensByRegionWithExactFullResolutionSlices() {
        QTemporaryDir scratch;
        const std::string path = (scratch.path() + QStringLiteral("/em.h5")).toStdString() + ":/volumes/raw";
        write_volume(detailedVolume({150, 120, 40}), path);
        const Volume whole = read_volume(path);
        // Labels beside the image in the same file (CREMI's layout), written before the studio opens it.
        LabelMap label_map = make_label_map(whole.geometry);
        std::int32_t* label_values = label_map.labels.data<std::int32_t>();
        for (std::int64_t k = 0; k < 40; ++k)
            for (std::int64_t j = 0; j < 120; ++j)
                for (std::int64_t i = 0; i < 150; ++i) {
                    // Two boxes and a ball; one voxel of label 7 that no overview block keeps.
                    const double r2 = (i - 100.0) * (i - 100.0) + (j - 40.0) * (j - 40.0) + 16.0 * (k - 20.0) * (k - 20.0);
                    label_values[(k * 120 + j) * 150 + i] = r2 < 900.0 ? 3 : (i < 50 && j > 70) ? 1 : (i > 60 && j > 90 && k < 25) ? 2 : 0;
                }
        label_values[(20 * 120 + 61) * 150 + 76] = 7;
        const std::string labels_path = (scratch.path() + QStringLiteral("/em.h5")).toStdString() + ":/volumes/labels/cells";
        write_label_map(label_map, labels_path);

        // 150×120×40 f32 = 2.9 MB, over a 100 kB limit; an overview of at most 20000 voxels: factor 4
        // (38×30×10 = 11400; factor 3 would give 50×40×14 = 28000).
        const Limits limits("100000", "20000");

        MainWindow window;
        window.resize(1200, 800);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY2(window.openImage(QString::fromStdString(path)), qPrintable(window.lastError()));
        ViewerModel* model = window.model();
        QVERIFY(model->isStreamed());
        QCOMPARE(model->geometry().size, (std::array<std::int64_t, 3>{150, 120, 40}));
        QCOMPARE(model->volume()->geometry.size, (std::array<std::int64_t, 3>{38, 30, 10}));
        QCOMPARE(model->streamed()->overviewFactor(), (std::array<std::int64_t, 3>{4, 4, 4}));
        QCOMPARE(model->cursor(), (std::array<std::int64_t, 3>{75, 60, 20}));
        // The value range is the full resolution's (the overview's means are narrower).
        const float* voxels = whole.voxels.data<float>();
        const auto [lowest, highest] = std::minmax_element(voxels, voxels + whole.geometry.num_voxels());
        QCOMPARE(model->minimumValue(), static_cast<double>(*lowest));
        QCOMPARE(model->maximumValue(), static_cast<double>(*highest));

        // Each view fills in its full-resolution slice: the whole read's slice, pixel for pixel.
        for (SliceOrientation orientation : orientations) {
            SliceView* view = window.sliceView(orientation);
            QTRY_VERIFY_WITH_TIMEOUT(view->showsFullResolution(), 20000);
            QCOMPARE(view->sliceImage(), wholeSlice(whole, orientation, model->cursor(), model->windowLevel()));
            QCOMPARE(view->numSlices(), whole.geometry.size[static_cast<std::size_t>(sliceAxes(whole.geometry, orientation).axis_normal)]);
        }
        // The 3D view shows the overview, its cursor on the overview's grid.
        QCOMPARE(window.volumeView()->scene()->cursor(), (std::array<std::int64_t, 3>{18, 15, 5}));
        QTRY_VERIFY_WITH_TIMEOUT(window.statusText().contains(QStringLiteral("value %1").arg(whole.value_at(75, 60, 20), 0, 'g', 6)), 60000);

        // A slice never read: first the overview's blocks (nearest block per voxel), then its own voxels.
        SliceView* axial = window.sliceView(SliceOrientation::Axial);
        axial->setSliceIndex(7);
        QVERIFY(!axial->showsFullResolution());
        const SliceAxes axes = sliceAxes(model->geometry(), SliceOrientation::Axial);
        const QImage overview_slice = SliceRenderer::renderOverview(*model->volume(), {4, 4, 4}, model->geometry().size, axes, 7, model->windowLevel());
        QCOMPARE(axial->sliceImage(), overview_slice);
        QVERIFY(axial->sliceImage() != wholeSlice(whole, SliceOrientation::Axial, model->cursor(), model->windowLevel()));
        QTRY_VERIFY_WITH_TIMEOUT(axial->showsFullResolution(), 20000);
        QCOMPARE(axial->sliceImage(), wholeSlice(whole, SliceOrientation::Axial, model->cursor(), model->windowLevel()));
        QCOMPARE(window.volumeView()->scene()->cursor(), (std::array<std::int64_t, 3>{18, 15, 1}));

        // The overview pixels: voxel (i, j) of slice 7 shows overview voxel (i / 4, j / 4, 1).
        const WindowLevel window_level = model->windowLevel();
        for (const auto& [i, j] : {std::pair<std::int64_t, std::int64_t>{0, 0}, {149, 119}, {77, 33}}) {
            const auto pixel = pixelOfVoxel(axes, model->geometry().size, {i, j, 7});
            const double value = model->volume()->value_at(i / 4, j / 4, 1);
            const int grey = static_cast<int>(std::clamp((value - window_level.lower()) * 255.0 / window_level.window, 0.0, 255.0) + 0.5);
            QVERIFY(std::abs(qRed(overview_slice.pixel(static_cast<int>(pixel[0]), static_cast<int>(pixel[1]))) - grey) <= 1);
        }

        // A label map held whole cannot go on it: refused with the reason, the image stays.
        const QString whole_labels = scratch.path() + QStringLiteral("/labels.nii.gz");
        write_label_map(label_map, whole_labels.toStdString());
        QVERIFY(!window.openLabelMap(whole_labels));
        QVERIFY2(window.lastError().contains(QStringLiteral("read by region too")), qPrintable(window.lastError()));
        QVERIFY(model->isStreamed() && !model->labelMap());

        // Labels read by region (a dataset beside the image in the same file): an overview on the
        // overview's grid for the 3D view, every label present, full-resolution label slices.
        QVERIFY2(window.openLabelMap(QString::fromStdString(labels_path)), qPrintable(window.lastError()));
        QVERIFY(model->labelMap() != nullptr);
        QCOMPARE(model->labelMap()->geometry.size, (std::array<std::int64_t, 3>{38, 30, 10}));
        QCOMPARE(model->presentLabels(), (std::vector<std::int32_t>{1, 2, 3, 7}));
        const LabelMap whole_read_labels = read_label_map(labels_path);
        for (SliceOrientation orientation : orientations) {
            SliceView* view = window.sliceView(orientation);
            QTRY_VERIFY_WITH_TIMEOUT(view->showsFullResolution(), 20000);
            QImage expected = wholeSlice(whole, orientation, model->cursor(), model->windowLevel());
            const SliceAxes whole_axes = sliceAxes(whole.geometry, orientation);
            SliceRenderer::blendLabels(expected, whole_read_labels, whole_axes, model->cursor()[static_cast<std::size_t>(whole_axes.axis_normal)], *model);
            QCOMPARE(view->sliceImage(), expected);
        }
        model->setCursor({76, 61, 20});
        QTRY_VERIFY_WITH_TIMEOUT(window.statusText().contains(QStringLiteral("label 7")), 20000);
        // Saving would write the overview: refused, nothing written.
        const QString saved = scratch.path() + QStringLiteral("/saved.nii.gz");
        QVERIFY(!window.saveLabelMap(saved));
        QVERIFY(!QFile::exists(saved));
        // Labels on another grid: refused naming both grids, the labels shown stay.
        const std::string other = (scratch.path() + QStringLiteral("/other.h5")).toStdString() + ":/labels";
        write_label_map(make_label_map(model->volume()->geometry), other);
        QVERIFY(!window.openLabelMap(QString::fromStdString(other)));
        QCOMPARE(model->presentLabels(), (std::vector<std::int32_t>{1, 2, 3, 7}));
        model->clearLabelMap();
        QVERIFY(!model->labelMap() && !model->streamed()->hasLabels());

        // Opened again: both overviews come from the cache, the same values as read.
        const std::vector<float> first_overview(model->volume()->voxels.data<float>(),
                                                model->volume()->voxels.data<float>() + model->volume()->geometry.num_voxels());
        QVERIFY(window.openImage(QString::fromStdString(path)));
        QVERIFY2(window.statusBar()->currentMessage().contains(QStringLiteral("overview from the cache")), qPrintable(window.statusBar()->currentMessage()));
        QVERIFY(std::equal(first_overview.begin(), first_overview.end(), model->volume()->voxels.data<float>()));
        QVERIFY(window.openLabelMap(QString::fromStdString(labels_path)));
        QVERIFY2(window.statusBar()->currentMessage().contains(QStringLiteral("label overview from the cache")),
                 qPrintable(window.statusBar()->currentMessage()));
        QCOMPARE(model->presentLabels(), (std::vector<std::int32_t>{1, 2, 3, 7}));
    }

    void aVolumeUnderTheLimitOpensWhole() {
        QTemporaryDir scratch;
        const std::string path = (scratch.path() + QStringLiteral("/small.nii")).toStdString();
        write_volume(detailedVolume({40, 30, 12}), path);
        const Limits limits("100000", "1000");  // 40×30×12 f32 = 57.6 kB; overview 14×10×4 (factor 3; 2 gives 1800 voxels)
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(window.openImage(QString::fromStdString(path)));
        QVERIFY(!window.model()->isStreamed());
        QCOMPARE(window.model()->volume()->geometry.size, (std::array<std::int64_t, 3>{40, 30, 12}));
        // File ▸ Open Image by Region opens it by region all the same (an uncompressed NIfTI).
        QVERIFY(window.openImageByRegion(QString::fromStdString(path)));
        QVERIFY(window.model()->isStreamed());
        QCOMPARE(window.model()->volume()->geometry.size, (std::array<std::int64_t, 3>{14, 10, 4}));
        // A compressed NIfTI cannot be read by region: the error names the formats that can.
        const std::string compressed = (scratch.path() + QStringLiteral("/small.nii.gz")).toStdString();
        write_volume(detailedVolume({40, 30, 12}), compressed);
        QVERIFY(!window.openImageByRegion(QString::fromStdString(compressed)));
        QVERIFY2(window.lastError().contains(QStringLiteral("HDF5")), qPrintable(window.lastError()));
        QVERIFY(window.model()->isStreamed());  // the open image stays
    }

    // The CT phantom read by region with a coarse overview (1:8): the 3D view and the status line show
    // the overview, the slice views full resolution.
    void screenshotOfAStreamedPhantom() {
        QTemporaryDir scratch;
        PhantomOptions options;
        options.size = {256, 256, 160};
        const Phantom phantom = make_ct_phantom(options);
        const std::string path = (scratch.path() + QStringLiteral("/phantom.h5")).toStdString() + ":/volumes/raw";
        write_volume(phantom.volume, path);
        const std::string labels_path = (scratch.path() + QStringLiteral("/phantom.h5")).toStdString() + ":/volumes/labels/tissues";
        write_label_map(phantom.labels, labels_path);
        // The tissues' names, as an ITK-SNAP label description file beside it.
        std::vector<LabelDescription> names;
        const auto& label_names = phantom_label_names();
        for (std::size_t label = 1; label < label_names.size(); ++label) names.push_back({static_cast<std::int32_t>(label), label_names[label], default_label_color(static_cast<std::int32_t>(label))});
        const QString descriptions = scratch.path() + QStringLiteral("/tissues.txt");
        write_itksnap_label_descriptions(names, descriptions.toStdString());
        const Limits limits("1000000", "25000");  // factor 8: 32×32×20 (7 gives 37×37×23 = 31487)
        MainWindow window;
        window.resize(1280, 800);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(window.openImage(QString::fromStdString(path)));
        QCOMPARE(window.model()->streamed()->overviewFactor(), (std::array<std::int64_t, 3>{8, 8, 8}));
        QVERIFY2(window.openLabelMap(QString::fromStdString(labels_path)), qPrintable(window.lastError()));
        QVERIFY(window.openLabelDescriptions(descriptions));
        for (SliceOrientation orientation : orientations) QTRY_VERIFY_WITH_TIMEOUT(window.sliceView(orientation)->showsFullResolution(), 20000);
        window.model()->setCursor({150, 110, 80});
        for (SliceOrientation orientation : orientations) QTRY_VERIFY_WITH_TIMEOUT(window.sliceView(orientation)->showsFullResolution(), 20000);
        QTRY_VERIFY_WITH_TIMEOUT(!window.volumeView()->scene()->shownSurfaceLabels().empty(), 20000);  // built from the overview's labels
        QTest::qWait(500);  // the 3D view draws once browsing pauses
        const QString screens = QCoreApplication::applicationDirPath() + QStringLiteral("/streamed_volume_screens");
        QDir().mkpath(screens);
        QVERIFY(grabWithGlViews(&window).save(screens + QStringLiteral("/streamed_volume.png")));
    }
};

TESSERA_GL_TEST_MAIN(tst_StreamedVolume)
#include "tst_streamed_volume.moc"
