// VolumeView, VolumeScene and transfer-function presets: presets load and fail with the field named,
// the 3D view renders real pixels under Xvfb, and label surfaces follow the model's labels.
#include "gl_test_main.hpp"
#include "model/viewer_model.hpp"
#include "render/transfer_function.hpp"
#include "render/volume_scene.hpp"
#include "widgets/volume_view.hpp"
#include "widgets/vtk_gl_widget.hpp"

#include <vtkCamera.h>
#include <vtkRenderer.h>

#include <QFile>
#include <QImage>
#include <QWindow>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QWheelEvent>

#include <algorithm>
#include <cmath>
#include <cstdlib>

using namespace tessera;
using namespace tessera::ui;

namespace {

// A 64³ volume: `background` outside, a bright ellipsoid of `inside` in the middle.
std::shared_ptr<Volume> ellipsoidVolume(float background, float inside) {
    ImageGeometry geometry;
    geometry.size = {64, 64, 64};
    geometry.spacing = {1.0, 1.0, 1.5};
    auto volume = std::make_shared<Volume>(make_volume(geometry));
    float* voxels = volume->voxels.data<float>();
    for (std::int64_t k = 0; k < 64; ++k) {
        for (std::int64_t j = 0; j < 64; ++j) {
            for (std::int64_t i = 0; i < 64; ++i) {
                const double x = (static_cast<double>(i) - 31.5) / 26.0;
                const double y = (static_cast<double>(j) - 31.5) / 20.0;
                const double z = (static_cast<double>(k) - 31.5) / 24.0;
                const bool in = x * x + y * y + z * z < 1.0;
                voxels[(k * 64 + j) * 64 + i] = in ? inside : background;
            }
        }
    }
    return volume;
}

// Label 1: a ball on the patient's right (low i); label 2: a box on the left (high i).
std::shared_ptr<LabelMap> twoLabels(const ImageGeometry& geometry) {
    auto labels = std::make_shared<LabelMap>(make_label_map(geometry));
    std::int32_t* voxels = labels->labels.data<std::int32_t>();
    for (std::int64_t k = 0; k < 64; ++k) {
        for (std::int64_t j = 0; j < 64; ++j) {
            for (std::int64_t i = 0; i < 64; ++i) {
                const double dx = static_cast<double>(i) - 20.0;
                const double dy = static_cast<double>(j) - 32.0;
                const double dz = static_cast<double>(k) - 32.0;
                std::int32_t label = 0;
                if (dx * dx + dy * dy + dz * dz < 8.0 * 8.0) label = 1;
                if (i >= 38 && i < 50 && j >= 26 && j < 38 && k >= 24 && k < 40) label = 2;
                voxels[(k * 64 + j) * 64 + i] = label;
            }
        }
    }
    return labels;
}

// Share of pixels in the centre half of the image that differ clearly from the background, taken
// as the pixel at the left edge of the same row (the background is a vertical gradient).
double centreCoverage(const QImage& image) {
    const int width = image.width();
    const int height = image.height();
    int differing = 0;
    int total = 0;
    for (int y = height / 4; y < 3 * height / 4; ++y) {
        const QColor background = image.pixelColor(1, y);
        for (int x = width / 4; x < 3 * width / 4; ++x) {
            const QColor pixel = image.pixelColor(x, y);
            const int distance = std::abs(pixel.red() - background.red()) +
                                 std::abs(pixel.green() - background.green()) +
                                 std::abs(pixel.blue() - background.blue());
            if (distance > 40) ++differing;
            ++total;
        }
    }
    return static_cast<double>(differing) / total;
}

// Pixels of the centre half whose colour is dominated by one channel (0 red, 1 green): the label
// surfaces (the orientation cube's coloured faces are in a corner).
int dominantPixels(const QImage& image, int channel) {
    int count = 0;
    for (int y = image.height() / 4; y < 3 * image.height() / 4; ++y) {
        for (int x = image.width() / 4; x < 3 * image.width() / 4; ++x) {
            const QColor pixel = image.pixelColor(x, y);
            const int value[3] = {pixel.red(), pixel.green(), pixel.blue()};
            const int other = std::max(value[(channel + 1) % 3], value[(channel + 2) % 3]);
            if (value[channel] > 80 && value[channel] > other + 50) ++count;
        }
    }
    return count;
}

const char* valid_preset = R"({
  "format": "tessera.transfer_function/1",
  "name": "Test",
  "range": { "mode": "percentile", "lower_percentile": 1, "upper_percentile": 99 },
  "color": [ { "value": 0, "rgb": [0, 0, 0] }, { "value": 1, "rgb": [1, 1, 1] } ],
  "opacity": [ { "value": 0, "opacity": 0 }, { "value": 1, "opacity": 0.5 } ]
})";

}  // namespace

class tst_VolumeView : public QObject {
    Q_OBJECT
private slots:
    void everyBuiltinPresetLoads() {
        const std::vector<TransferFunctionPreset> presets = builtinTransferFunctionPresets();
        QVERIFY(presets.size() >= 4);
        QCOMPARE(presets[0].id, QStringLiteral("ct_soft_tissue"));  // the usual choice first
        for (const char* id : {"ct_soft_tissue", "ct_bone", "mri_default", "mri_brain"}) {
            QVERIFY2(findTransferFunctionPreset(presets, id) >= 0, id);
        }
        const IntensityDistribution intensities = IntensityDistribution::fromVolume(*ellipsoidVolume(-1000, 300));
        for (const TransferFunctionPreset& preset : presets) {
            QVERIFY(!preset.name.isEmpty());
            QVERIFY(!preset.color.empty() && !preset.opacity.empty());
            const TransferFunctionPreset absolute = preset.resolved(intensities);
            QVERIFY(absolute.range == TransferFunctionRange::Absolute);
            for (std::size_t i = 1; i < absolute.opacity.size(); ++i) {
                QVERIFY(absolute.opacity[i].value > absolute.opacity[i - 1].value);
            }
            VolumeScene scene;  // VTK accepts it
            scene.setTransferFunction(preset, intensities);
        }
    }

    void ctPresetsAreAbsoluteAndMriPresetsRelative() {
        const auto presets = builtinTransferFunctionPresets();
        const TransferFunctionPreset& ct = presets[static_cast<std::size_t>(findTransferFunctionPreset(presets, "ct_bone"))];
        QVERIFY(ct.range == TransferFunctionRange::Absolute);
        QCOMPARE(ct.unit, QStringLiteral("HU"));
        const TransferFunctionPreset& mri =
            presets[static_cast<std::size_t>(findTransferFunctionPreset(presets, "mri_default"))];
        QVERIFY(mri.range == TransferFunctionRange::Percentile);

        // Values 0..1000 evenly: the 1st percentile is 10, the 99th 990.
        std::vector<float> values(100001);
        for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) / 100.0f;
        const IntensityDistribution intensities = IntensityDistribution::fromValues(values);
        QVERIFY(std::abs(intensities.percentile(1) - 10.0) < 0.01);
        QVERIFY(std::abs(intensities.percentile(99) - 990.0) < 0.01);
        const TransferFunctionPreset absolute = mri.resolved(intensities);
        QVERIFY(std::abs(absolute.color.front().value - 10.0) < 0.01);   // fraction 0
        QVERIFY(std::abs(absolute.color.back().value - 990.0) < 0.01);   // fraction 1
        QCOMPARE(ct.resolved(intensities).opacity[1].value, ct.opacity[1].value);  // HU stay HU
    }

    void malformedPresetNamesTheField_data() {
        QTest::addColumn<QByteArray>("json");
        QTest::addColumn<QString>("expected");
        const QByteArray valid(valid_preset);
        const auto replaced = [&](const char* from, const char* to) { return QByteArray(valid).replace(from, to); };
        QTest::newRow("missing opacity") << replaced(R"("opacity": [)", R"("opacities": [)")
                                         << QStringLiteral("'opacities' is not a known field");
        QTest::newRow("rgb of two") << replaced("[1, 1, 1]", "[1, 1]") << QStringLiteral("'color[1].rgb'");
        QTest::newRow("opacity above 1") << replaced(R"("opacity": 0.5)", R"("opacity": 1.5)")
                                         << QStringLiteral("'opacity[1].opacity' must be between 0 and 1");
        QTest::newRow("value a string") << replaced(R"({ "value": 1, "rgb")", R"({ "value": "one", "rgb")")
                                        << QStringLiteral("'color[1].value' must be a number");
        QTest::newRow("unordered") << replaced(R"({ "value": 1, "opacity")", R"({ "value": 0, "opacity")")
                                   << QStringLiteral("'opacity[1].value' must be greater");
        QTest::newRow("range mode") << replaced(R"("mode": "percentile")", R"("mode": "relative")")
                                    << QStringLiteral("'range.mode' must be \"absolute\" or \"percentile\"");
        QTest::newRow("percentile order") << replaced(R"("lower_percentile": 1)", R"("lower_percentile": 99.5)")
                                          << QStringLiteral("'range.upper_percentile'");
        QTest::newRow("no name") << replaced(R"("name": "Test",)", "") << QStringLiteral("'name' is missing");
        QTest::newRow("format") << replaced("transfer_function/1", "transfer_function/2")
                                << QStringLiteral("'format' must be");
        QTest::newRow("shading type") << replaced(R"("name": "Test",)", R"("name": "Test", "shading": {"enabled": 1},)")
                                      << QStringLiteral("'shading.enabled' must be true or false");
        QTest::newRow("not json") << replaced("\"color\": [", "\"color\" [") << QStringLiteral("not valid JSON at line 5");
    }

    void malformedPresetNamesTheField() {
        QFETCH(QByteArray, json);
        QFETCH(QString, expected);
        try {
            loadTransferFunctionPreset(json, QStringLiteral("broken.json"));
            QFAIL("expected tessera::Error");
        } catch (const Error& error) {
            const QString message = QString::fromStdString(error.what());
            QVERIFY2(message.startsWith(QStringLiteral("broken.json: ")), qPrintable(message));
            QVERIFY2(message.contains(expected), qPrintable(message));
            QVERIFY(!error.is_internal());
        }
    }

    void presetFilesLoadByPath() {
        QTemporaryDir directory;
        QVERIFY(directory.isValid());
        const QString path = directory.filePath(QStringLiteral("my_preset.json"));
        QFile file(path);
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write(valid_preset);
        file.close();
        const TransferFunctionPreset preset = loadTransferFunctionPreset(path);
        QCOMPARE(preset.id, QStringLiteral("my_preset"));
        QCOMPARE(preset.name, QStringLiteral("Test"));
        QCOMPARE(preset.opacity.size(), std::size_t{2});
        try {
            loadTransferFunctionPreset(directory.filePath(QStringLiteral("missing.json")));
            QFAIL("expected tessera::Error");
        } catch (const Error& error) {
            QVERIFY(QString::fromStdString(error.what()).contains(QStringLiteral("missing.json")));
        }
    }

    void labelSurfacesExistPerLabel() {
        const auto volume = ellipsoidVolume(-1000, 300);
        const auto labels = twoLabels(volume->geometry);
        const LabelSurfaces surfaces = LabelSurfaces::extract(*labels);
        QCOMPARE(surfaces.labels(), (std::vector<std::int32_t>{1, 2}));
        QVERIFY(surfaces.pointCount(1) > 100);
        QVERIFY(surfaces.triangleCount(2) > 100);
        QCOMPARE(surfaces.pointCount(3), std::int64_t{0});

        VolumeScene scene;
        LabelDisplay display;
        display.visible[2] = false;
        scene.setLabelSurfaces(surfaces, display);
        QCOMPARE(scene.shownSurfaceLabels(), (std::vector<std::int32_t>{1}));
        display.visible[2] = true;
        scene.setLabelDisplay(display);
        QCOMPARE(scene.shownSurfaceLabels(), (std::vector<std::int32_t>{1, 2}));
        scene.setSurfacesVisible(false);
        QVERIFY(scene.shownSurfaceLabels().empty());
    }

    void bigLabelsAreMeshedCoarserInPlace() {
        // A 160×160×100 box: above the mesh budget, so meshed from 2×2×2 blocks; a small cube: not.
        ImageGeometry geometry;
        geometry.size = {180, 180, 120};
        geometry.spacing = {0.5, 0.5, 2.0};
        LabelMap labels = make_label_map(geometry);
        std::int32_t* voxels = labels.labels.data<std::int32_t>();
        for (std::int64_t k = 0; k < 120; ++k) {
            for (std::int64_t j = 0; j < 180; ++j) {
                for (std::int64_t i = 0; i < 180; ++i) {
                    std::int32_t& voxel = voxels[(k * 180 + j) * 180 + i];
                    if (i >= 10 && i < 170 && j >= 10 && j < 170 && k >= 10 && k < 110) voxel = 1;
                    if (i >= 2 && i < 8 && j >= 2 && j < 8 && k >= 2 && k < 8) voxel = 2;
                }
            }
        }
        const LabelSurfaces surfaces = LabelSurfaces::extract(labels);
        // Surfaces lie half a voxel outside the labelled voxels' centres: x 9.5..169.5 voxels.
        const std::array<double, 6> expected{9.5 * 0.5, 169.5 * 0.5, 9.5 * 0.5, 169.5 * 0.5, 9.5 * 2.0, 109.5 * 2.0};
        const std::array<double, 6> big = surfaces.bounds(1);
        for (std::size_t side = 0; side < 6; ++side) {
            const double tolerance = 1.5 * geometry.spacing[side / 2];
            QVERIFY2(std::abs(big[side] - expected[side]) < tolerance,
                     qPrintable(QString("side %1: %2, expected %3").arg(side).arg(big[side]).arg(expected[side])));
        }
        const std::array<double, 6> small = surfaces.bounds(2);
        QVERIFY(std::abs(small[0] - 1.5 * 0.5) < 0.5 && std::abs(small[5] - 7.5 * 2.0) < 2.0);
        QVERIFY(surfaces.triangleCount(1) < 200000);  // a full-resolution box would have ~300k
    }

    void presetFollowsTheModality() {
        ViewerModel model;
        VolumeView view(&model);
        model.setVolume(ellipsoidVolume(-1000, 300));
        QCOMPARE(view.currentPresetId(), QStringLiteral("ct_soft_tissue"));
        model.setVolume(ellipsoidVolume(0, 800));
        QCOMPARE(view.currentPresetId(), QStringLiteral("mri_default"));
        QVERIFY(view.setCurrentPreset(QStringLiteral("mri_brain")));
        QCOMPARE(view.scene()->transferFunction().id, QStringLiteral("mri_brain"));
        QVERIFY(!view.setCurrentPreset(QStringLiteral("no_such_preset")));
    }

    void rendersVolumeAndSurfaces() {
        ViewerModel model;
        VolumeView view(&model);
        view.resize(640, 480);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));

        const auto volume = ellipsoidVolume(-1000, 300);
        model.setVolume(volume);
        model.setLabelMap(twoLabels(volume->geometry));
        QTRY_VERIFY_WITH_TIMEOUT(!view.isExtractingSurfaces() && view.scene()->labelSurfaces().labels().size() == 2,
                                 20000);
        QCOMPARE(view.scene()->shownSurfaceLabels(), (std::vector<std::int32_t>{1, 2}));
        QVERIFY(view.scene()->labelSurfaces().pointCount(1) > 0);
        QVERIFY(view.scene()->labelSurfaces().pointCount(2) > 0);

        // Volume rendering: real pixels in the centre, not a uniform or black image.
        const QImage both = view.glWidget()->grabFramebuffer();
        QVERIFY(!both.isNull());
        QCOMPARE(both.size(), view.glWidget()->size() * view.glWidget()->devicePixelRatioF());
        const double volume_coverage = centreCoverage(both);
        QVERIFY2(volume_coverage > 0.3, qPrintable(QString("centre coverage %1").arg(volume_coverage)));

        // Surfaces alone: label 1 red, label 2 green (the overlay's default colours). The axial plane's
        // outline is red too: hide the planes.
        view.setVolumeVisible(false);
        view.setSlicePlanesVisible(false);
        const QImage surfaces = view.glWidget()->grabFramebuffer();
        const int red = dominantPixels(surfaces, 0);
        const int green = dominantPixels(surfaces, 1);
        QVERIFY2(red > 500 && green > 500, qPrintable(QString("red %1 green %2").arg(red).arg(green)));

        // Hiding a label in the model hides its surface.
        model.setLabelVisible(1, false);
        QCOMPARE(view.scene()->shownSurfaceLabels(), (std::vector<std::int32_t>{2}));
        const QImage one_hidden = view.glWidget()->grabFramebuffer();
        QVERIFY2(dominantPixels(one_hidden, 0) < red / 10, "label 1's red surface is still drawn");
        QVERIFY(dominantPixels(one_hidden, 1) > 500);

        // Nothing but the outline and planes when both are off.
        view.setSurfacesVisible(false);
        QVERIFY(view.scene()->shownSurfaceLabels().empty());
        // Retried: on a loaded machine a quick (reduced) frame may still be pending when first grabbed.
        // (Once seen failing under heavy load, 2026-11-27: the message keeps the coverage for the next look.)
        QTRY_VERIFY2_WITH_TIMEOUT(centreCoverage(view.glWidget()->grabFramebuffer()) < 0.1,
                                  qPrintable(QStringLiteral("centre coverage %1 with volume, planes and surfaces hidden")
                                                 .arg(centreCoverage(view.glWidget()->grabFramebuffer()))),
                                  10000);

        // Clearing the label map removes the surfaces.
        QSignalSpy ready(&view, &VolumeView::surfacesReady);
        model.clearLabelMap();
        QCOMPARE(ready.count(), 1);
        QVERIFY(view.scene()->labelSurfaces().isEmpty());
    }

    void rendersAFlippedVolume() {
        // A left-handed grid (i runs to the patient's right), as flipped acquisitions have.
        auto volume = ellipsoidVolume(0, 800);
        volume->geometry.direction = {-1, 0, 0, 0, 1, 0, 0, 0, 1};
        ViewerModel model;
        VolumeView view(&model);
        view.resize(480, 400);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        model.setVolume(volume);
        view.setSlicePlanesVisible(false);
        const double coverage = centreCoverage(view.glWidget()->grabFramebuffer());
        QVERIFY2(coverage > 0.3, qPrintable(QString("centre coverage %1").arg(coverage)));
    }

    void mouseRotatesAndWheelZooms() {
        ViewerModel model;
        VolumeView view(&model);
        view.resize(480, 400);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        model.setVolume(ellipsoidVolume(0, 800));
        VtkGLWidget* gl = view.glWidget();
        gl->grabFramebuffer();
        vtkCamera* camera = view.scene()->renderer()->GetActiveCamera();
        const auto direction = [&] {
            std::array<double, 3> d{};
            camera->GetDirectionOfProjection(d.data());
            return d;
        };
        const std::array<double, 3> before = direction();
        const QPoint centre = gl->rect().center();
        // Input arrives at the native window VTK draws in, as from the X server.
        QWindow* window = gl->glWindow();
        QTest::mousePress(window, Qt::LeftButton, {}, centre);
        QVERIFY(gl->isInteracting());
        for (int step = 1; step <= 5; ++step) QTest::mouseMove(window, centre + QPoint(12 * step, 0));
        QTest::mouseRelease(window, Qt::LeftButton, {}, centre + QPoint(60, 0));
        const std::array<double, 3> after = direction();
        const double turned = std::acos(std::clamp(before[0] * after[0] + before[1] * after[1] + before[2] * after[2], -1.0, 1.0));
        QVERIFY2(turned > 0.2, qPrintable(QString("camera turned by %1 rad").arg(turned)));  // dragging a fifth of the view

        const double distance = camera->GetDistance();
        QWheelEvent wheel(QPointF(centre), gl->mapToGlobal(QPointF(centre)), QPoint(), QPoint(0, 120), Qt::NoButton,
                          Qt::NoModifier, Qt::NoScrollPhase, false);
        QApplication::sendEvent(window, &wheel);
        QVERIFY(camera->GetDistance() < distance);  // forward zooms in
        QVERIFY(gl->isInteracting());               // a quick frame now, a still one soon
        QTRY_VERIFY(!gl->isInteracting());
    }

    void cursorMovesThePlanes() {
        ViewerModel model;
        VolumeView view(&model);
        model.setVolume(ellipsoidVolume(0, 800));
        model.setCursor({3, 40, 60});
        const std::array<std::int64_t, 3> expected{3, 40, 60};
        QCOMPARE(view.scene()->cursor(), expected);
    }
};

TESSERA_GL_TEST_MAIN(tst_VolumeView)
#include "tst_volume_view.moc"
