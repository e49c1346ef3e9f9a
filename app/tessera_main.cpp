// tessera: the desktop studio. With no arguments it opens the example head MRI with its skull-strip
// mask (Debian's insighttoolkit5-examples), or a synthetic CT phantom when that package is missing.
#include "data/examples.hpp"
#include "widgets/main_window.hpp"
#include "widgets/planner_panel.hpp"
#include "widgets/timeline_chart.hpp"

#include <QApplication>
#include <QCommandLineParser>
#include <QScreen>
#include <QSurfaceFormat>
#include <QTimer>

#include <cstdio>

int main(int argc, char** argv) {
    // VTK's OpenGL needs a 3.2 core context, and the format must be set before the application exists.
    QSurfaceFormat format;
    format.setVersion(3, 2);
    format.setProfile(QSurfaceFormat::CoreProfile);
    format.setDepthBufferSize(24);
    format.setStencilBufferSize(8);
    QSurfaceFormat::setDefaultFormat(format);

    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("Tessera"));
    QApplication::setApplicationName(QStringLiteral("Tessera"));
    QApplication::setApplicationVersion(QStringLiteral(TESSERA_VERSION));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Tessera studio: view volumes and label maps."));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addPositionalArgument(QStringLiteral("image"), QStringLiteral("Image or DICOM folder to open."));
    const QCommandLineOption labels_option(QStringList{QStringLiteral("l"), QStringLiteral("labels")},
                                           QStringLiteral("Label map to overlay on the image."), QStringLiteral("file"));
    const QCommandLineOption phantom_option(QStringLiteral("phantom"),
                                            QStringLiteral("Open a synthetic CT phantom: 2d or 3d."), QStringLiteral("kind"));
    const QCommandLineOption screenshot_option(
        QStringLiteral("screenshot"), QStringLiteral("Save a screenshot of the window to <png> and quit."),
        QStringLiteral("png"));
    const QCommandLineOption size_option(QStringLiteral("size"), QStringLiteral("Window size WxH."),
                                         QStringLiteral("WxH"));
    const QCommandLineOption experiment_option(QStringList{QStringLiteral("e"), QStringLiteral("experiment")},
                                               QStringLiteral("Experiment file to design (opened over the image)."),
                                               QStringLiteral("json"));
    const QCommandLineOption grab_option(QStringLiteral("grab"),
                                         QStringLiteral("What --screenshot captures: window (default), planner or timeline."),
                                         QStringLiteral("part"), QStringLiteral("window"));
    parser.addOptions({labels_option, phantom_option, screenshot_option, size_option, experiment_option, grab_option});
    parser.process(app);

    tessera::ui::MainWindow window;
    if (parser.isSet(size_option)) {
        const QStringList parts = parser.value(size_option).split(QLatin1Char('x'));
        if (parts.size() == 2) window.resize(parts[0].toInt(), parts[1].toInt());
    }
    window.show();

    const QStringList positional = parser.positionalArguments();
    if (!positional.isEmpty()) {
        if (window.openImage(positional.front()) && parser.isSet(labels_option)) {
            window.openLabelMap(parser.value(labels_option));
        }
    } else if (parser.isSet(phantom_option)) {
        window.showPhantom(parser.value(phantom_option) == QStringLiteral("2d"));
    } else if (parser.isSet(experiment_option)) {
        // The experiment brings its own data to draw over (its example MRI, an EM section, a phantom).
    } else if (const auto example = tessera::find_example_mri()) {
        if (window.openImage(QString::fromStdString(example->image.string()))) {
            window.openLabelMap(QString::fromStdString(example->labels.string()));
        }
    } else {
        std::fprintf(stderr, "tessera: the example MRI (Debian package %s) is not installed; showing a phantom\n",
                     tessera::example_data_package);
        window.showPhantom(false);
    }

    if (parser.isSet(experiment_option)) window.openExperiment(parser.value(experiment_option));

    if (parser.isSet(screenshot_option)) {
        const QString path = parser.value(screenshot_option);
        // Give the GL views a few frames to render before grabbing.
        const QString part = parser.value(grab_option);
        QTimer::singleShot(2500, &window, [&window, path, part] {
            QWidget* target = &window;
            if (part == QStringLiteral("planner")) target = window.plannerPanel();
            if (part == QStringLiteral("timeline")) target = window.plannerPanel()->timeline();
            const bool saved = target->grab().save(path);
            std::fprintf(saved ? stdout : stderr, saved ? "screenshot: %s\n" : "could not save screenshot %s\n",
                         qPrintable(path));
            QApplication::exit(saved ? 0 : 1);
        });
    }
    return QApplication::exec();
}
