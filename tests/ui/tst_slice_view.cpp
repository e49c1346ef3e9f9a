// SliceRenderer and SliceView: orientation, window/level, label blending, and mouse interaction.
#include "gl_test_main.hpp"
#include "render/slice_renderer.hpp"
#include "widgets/slice_view.hpp"

#include <QSignalSpy>

using namespace tessera;
using namespace tessera::ui;

namespace {

// A volume whose voxel value encodes its index: value = i + 100 j + 10000 k.
std::shared_ptr<Volume> indexVolume(std::array<std::int64_t, 3> size, std::array<double, 3> spacing = {1, 1, 1},
                                    std::array<double, 9> direction = {1, 0, 0, 0, 1, 0, 0, 0, 1}) {
    ImageGeometry geometry;
    geometry.size = size;
    geometry.spacing = spacing;
    geometry.direction = direction;
    auto volume = std::make_shared<Volume>(make_volume(geometry));
    for (std::int64_t k = 0; k < size[2]; ++k)
        for (std::int64_t j = 0; j < size[1]; ++j)
            for (std::int64_t i = 0; i < size[0]; ++i)
                volume->voxels.data<float>()[(k * size[1] + j) * size[0] + i] = static_cast<float>(i + 100 * j + 10000 * k);
    return volume;
}

}  // namespace

class tst_SliceView : public QObject {
    Q_OBJECT
private slots:
    void axesForAnIdentityGridFollowTheRadiologicalConvention() {
        ImageGeometry geometry;
        const SliceAxes axial = sliceAxes(geometry, SliceOrientation::Axial);
        QCOMPARE(axial.axis_x, 0);
        QCOMPARE(axial.axis_y, 1);
        QCOMPARE(axial.axis_normal, 2);
        QVERIFY(!axial.flip_x && !axial.flip_y);
        QCOMPARE(axial.edge_letters[0], QStringLiteral("R"));
        const SliceAxes coronal = sliceAxes(geometry, SliceOrientation::Coronal);
        QCOMPARE(coronal.axis_x, 0);
        QCOMPARE(coronal.axis_y, 2);
        QVERIFY(coronal.flip_y);  // superior at the top
        QCOMPARE(coronal.axis_normal, 1);
        const SliceAxes sagittal = sliceAxes(geometry, SliceOrientation::Sagittal);
        QCOMPARE(sagittal.axis_x, 1);
        QCOMPARE(sagittal.axis_y, 2);
        QVERIFY(sagittal.flip_y && !sagittal.flip_x);
        QCOMPARE(sagittal.axis_normal, 0);
    }

    void axesFollowTheDirectionMatrix() {
        // Stored RAS-first (as many NIfTI files are): i runs to the patient's right, j anterior.
        ImageGeometry ras;
        ras.direction = {-1, 0, 0, 0, -1, 0, 0, 0, 1};
        const SliceAxes axial = sliceAxes(ras, SliceOrientation::Axial);
        QVERIFY(axial.flip_x && axial.flip_y);
        // Stored sagittal-first: i runs along S, j along P, k along L.
        ImageGeometry permuted;
        permuted.direction = {0, 0, 1, 0, 1, 0, 1, 0, 0};  // rows: world L, P, S; columns: i, j, k
        const SliceAxes axial_permuted = sliceAxes(permuted, SliceOrientation::Axial);
        QCOMPARE(axial_permuted.axis_x, 2);
        QCOMPARE(axial_permuted.axis_y, 1);
        QCOMPARE(axial_permuted.axis_normal, 0);
    }

    void pixelAndVoxelMappingsAreInverse() {
        const std::array<std::int64_t, 3> size{5, 7, 9};
        for (SliceOrientation orientation : {SliceOrientation::Axial, SliceOrientation::Coronal, SliceOrientation::Sagittal}) {
            ImageGeometry geometry;
            geometry.size = size;
            geometry.direction = {-1, 0, 0, 0, 1, 0, 0, 0, -1};
            const SliceAxes axes = sliceAxes(geometry, orientation);
            for (std::int64_t u = 0; u < size[static_cast<std::size_t>(axes.axis_x)]; ++u) {
                for (std::int64_t v = 0; v < size[static_cast<std::size_t>(axes.axis_y)]; ++v) {
                    const auto voxel = voxelAtPixel(axes, size, 3, u, v);
                    const auto pixel = pixelOfVoxel(axes, size, voxel);
                    QCOMPARE(pixel[0], u);
                    QCOMPARE(pixel[1], v);
                }
            }
        }
    }

    void renderedPixelsShowTheRightVoxels() {
        auto volume = indexVolume({6, 5, 4});
        for (SliceOrientation orientation : {SliceOrientation::Axial, SliceOrientation::Coronal, SliceOrientation::Sagittal}) {
            const SliceAxes axes = sliceAxes(volume->geometry, orientation);
            // A window of width 1 around one voxel's value: that pixel alone is mid-grey or brighter.
            const std::array<std::int64_t, 3> probe{4, 3, 2};
            const float value = volume->value_at(4, 3, 2);
            const std::int64_t slice = probe[static_cast<std::size_t>(axes.axis_normal)];
            const QImage image = SliceRenderer::renderIntensity(*volume, axes, slice, {1.0, value});
            const auto pixel = pixelOfVoxel(axes, volume->geometry.size, probe);
            QCOMPARE(qRed(image.pixel(static_cast<int>(pixel[0]), static_cast<int>(pixel[1]))), 128);
            for (int y = 0; y < image.height(); ++y)
                for (int x = 0; x < image.width(); ++x)
                    if (x != pixel[0] || y != pixel[1]) QVERIFY(qRed(image.pixel(x, y)) == 0 || qRed(image.pixel(x, y)) == 255);
        }
    }

    void windowMapsLowerToBlackAndUpperToWhite() {
        auto volume = indexVolume({3, 1, 1});  // values 0, 1, 2
        const SliceAxes axes = sliceAxes(volume->geometry, SliceOrientation::Axial);
        const QImage image = SliceRenderer::renderIntensity(*volume, axes, 0, {2.0, 1.0});
        QCOMPARE(qRed(image.pixel(0, 0)), 0);
        QCOMPARE(qRed(image.pixel(1, 0)), 128);
        QCOMPARE(qRed(image.pixel(2, 0)), 255);
    }

    void labelsBlendHideAndOutline() {
        auto volume = indexVolume({8, 8, 1});
        ViewerModel model;
        model.setVolume(volume);
        model.setWindowLevel({1.0, 1e9});  // everything below the window: black underneath
        auto labels = std::make_shared<LabelMap>(make_label_map(volume->geometry));
        for (int j = 2; j < 6; ++j)
            for (int i = 2; i < 6; ++i) labels->labels.data<std::int32_t>()[j * 8 + i] = 3;
        model.setLabelMap(labels);
        QCOMPARE(model.presentLabels(), (std::vector<std::int32_t>{3}));
        model.setLabelOpacity(1.0);
        QImage image = SliceRenderer::render(model, SliceOrientation::Axial);
        QCOMPARE(QColor(image.pixel(3, 3)), model.labelColor(3));
        QCOMPARE(qRed(image.pixel(0, 0)), 0);
        model.setOutlineOnly(true);
        image = SliceRenderer::render(model, SliceOrientation::Axial);
        QCOMPARE(QColor(image.pixel(2, 3)), model.labelColor(3));  // border
        QCOMPARE(QColor(image.pixel(3, 3)), QColor(Qt::black));     // interior left clear
        model.setOutlineOnly(false);
        model.setLabelOpacity(0.5);
        image = SliceRenderer::render(model, SliceOrientation::Axial);
        QCOMPARE(qBlue(image.pixel(3, 3)), model.labelColor(3).blue() / 2);
        model.setLabelVisible(3, false);
        image = SliceRenderer::render(model, SliceOrientation::Axial);
        QCOMPARE(QColor(image.pixel(3, 3)), QColor(Qt::black));
    }

    void clickMovesTheSharedCursorAndWheelWalksSlices() {
        ViewerModel model;
        model.setVolume(indexVolume({32, 24, 16}, {1.0, 1.0, 2.5}));
        SliceView view(&model, SliceOrientation::Coronal);
        view.resize(300, 300);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        const std::array<std::int64_t, 3> target{5, model.cursor()[1], 3};
        QTest::mouseClick(&view, Qt::LeftButton, {}, view.positionOfVoxel(target).toPoint());
        QCOMPARE(model.cursor(), target);

        QSignalSpy slices(&view, &SliceView::sliceChanged);
        const std::int64_t before = view.sliceIndex();
        QWheelEvent wheel(QPointF(150, 150), view.mapToGlobal(QPointF(150, 150)), {}, QPoint(0, 240), Qt::NoButton,
                          Qt::NoModifier, Qt::NoScrollPhase, false);
        QApplication::sendEvent(&view, &wheel);
        QCOMPARE(view.sliceIndex(), before + 2);
        QCOMPARE(model.cursor()[1], before + 2);  // the coronal view walks along j
        QCOMPARE(slices.count(), 1);
    }

    void anisotropicVoxelsKeepTheirPhysicalAspect() {
        ViewerModel model;
        model.setVolume(indexVolume({40, 40, 10}, {1.0, 1.0, 4.0}));
        SliceView view(&model, SliceOrientation::Coronal);  // x: 40 × 1 mm, y: 10 × 4 mm — square
        view.resize(400, 200);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        const QPointF corner_a = view.positionOfVoxel({0, 0, 9});
        const QPointF corner_b = view.positionOfVoxel({39, 0, 0});
        const double drawn_width = corner_b.x() - corner_a.x();
        const double drawn_height = corner_b.y() - corner_a.y();
        QVERIFY2(std::abs(drawn_width / drawn_height - (39.0 / 36.0)) < 0.05,
                 qPrintable(QStringLiteral("%1 × %2").arg(drawn_width).arg(drawn_height)));
    }

    void rightDragChangesWindowAndLevel() {
        ViewerModel model;
        model.setVolume(indexVolume({16, 16, 4}));
        SliceView view(&model, SliceOrientation::Axial);
        view.resize(200, 200);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        const WindowLevel before = model.windowLevel();
        QTest::mousePress(&view, Qt::RightButton, {}, QPoint(100, 100));
        QMouseEvent move(QEvent::MouseMove, QPointF(150, 80), view.mapToGlobal(QPointF(150, 80)), Qt::NoButton,
                         Qt::RightButton, Qt::NoModifier);
        QApplication::sendEvent(&view, &move);
        QTest::mouseRelease(&view, Qt::RightButton, {}, QPoint(150, 80));
        QVERIFY(model.windowLevel().window > before.window);  // drag right widens
        QVERIFY(model.windowLevel().level > before.level);    // drag up raises the level
    }
};

TESSERA_GL_TEST_MAIN(tst_SliceView)
#include "tst_slice_view.moc"
