// tessera: the desktop studio. With no arguments it opens the example head MRI with its skull-strip
// mask (Debian's insighttoolkit5-examples), or a synthetic CT phantom when that package is missing.
#include "core/allocator_policy.hpp"
#include "core/error.hpp"
#include "data/examples.hpp"
#include "widgets/main_window.hpp"
#include "widgets/vtk_gl_widget.hpp"
#include "model/run_controller.hpp"
#include "widgets/detection_view.hpp"
#include "widgets/equivalence_view.hpp"
#include "widgets/experiment_panel.hpp"
#include "widgets/planner_panel.hpp"
#include "widgets/run_charts.hpp"
#include "widgets/run_panel.hpp"
#include "widgets/studio_application.hpp"
#include "widgets/timeline_chart.hpp"

#include <QApplication>
#include <QCommandLineParser>
#include <QDockWidget>
#include <QLineEdit>
#include <QSpinBox>
#include <QScreen>
#include <QSurfaceFormat>
#include <QTimer>

#include <cstdio>

namespace {

int run_studio(int argc, char** argv) {
    // VTK's OpenGL needs a 3.2 core context, and the format must be set before the application exists.
    QSurfaceFormat format;
    format.setVersion(3, 2);
    format.setProfile(QSurfaceFormat::CoreProfile);
    format.setDepthBufferSize(24);
    format.setStencilBufferSize(8);
    QSurfaceFormat::setDefaultFormat(format);

    tessera::ui::StudioApplication app(argc, argv);
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
                                         QStringLiteral("What --screenshot captures: window (default), planner, timeline, charts, run, run-timeline, "
                                                        "equivalence, detections or experiment."),
                                         QStringLiteral("part"), QStringLiteral("window"));
    const QCommandLineOption train_option(QStringLiteral("train"),
                                          QStringLiteral("Train the experiment from the Run dock for <steps> steps (with --screenshot: "
                                                         "captured when the run ends)."),
                                          QStringLiteral("steps"));
    const QCommandLineOption model_dir_option(QStringLiteral("model-dir"), QStringLiteral("The run's model_dir (with --train)."),
                                              QStringLiteral("dir"));
    const QCommandLineOption ranks_option(QStringLiteral("ranks"),
                                          QStringLiteral("With --train: on this many MPI ranks (mpirun) rather than in the studio."),
                                          QStringLiteral("K"));
    const QCommandLineOption shot_at_option(QStringLiteral("shot-at-step"),
                                            QStringLiteral("With --train and --screenshot: capture the run in progress at this step."),
                                            QStringLiteral("step"));
    const QCommandLineOption check_open_option(
        QStringLiteral("check-open"),
        QStringLiteral("Open the image (and --labels) as File ▸ Open does, print what the studio showed (an error on stderr, "
                       "warnings on stdout) and quit: exit 2 if it could not be opened."));
    const QCommandLineOption open_run_option(QStringLiteral("open-run"),
                                             QStringLiteral("Open a run's model_dir: its charts, scores and last evaluation."),
                                             QStringLiteral("dir"));
    parser.addOptions({ranks_option});
    parser.addOptions({labels_option, phantom_option, screenshot_option, size_option, experiment_option, grab_option, train_option,
                       model_dir_option, shot_at_option, check_open_option, open_run_option});
    parser.process(app);

    tessera::ui::MainWindow window;
    if (parser.isSet(size_option)) {
        const QStringList parts = parser.value(size_option).split(QLatin1Char('x'));
        if (parts.size() == 2) window.resize(parts[0].toInt(), parts[1].toInt());
    }
    window.show();

    const QStringList positional = parser.positionalArguments();
    if (parser.isSet(check_open_option)) {
        // The studio's own open path, scripted: the bad-input catalogue runs every case through it.
        const bool opened = !positional.isEmpty() && window.openImage(positional.front()) &&
                            (!parser.isSet(labels_option) || window.openLabelMap(parser.value(labels_option)));
        if (!window.lastWarning().isEmpty()) std::printf("warning: %s\n", qPrintable(window.lastWarning()));
        if (!opened) std::fprintf(stderr, "error: %s\n", qPrintable(window.lastError()));
        return opened ? 0 : 2;
    }
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
    if (parser.isSet(open_run_option)) window.openRun(parser.value(open_run_option).toStdString());
    bool training = false;
    if (parser.isSet(train_option)) {
        tessera::ui::RunPanel* run = window.runPanel();
        if (parser.isSet(model_dir_option)) run->modelDirEdit()->setText(parser.value(model_dir_option));
        run->stepsBox()->setValue(parser.value(train_option).toInt());
        if (parser.isSet(ranks_option)) run->ranksBox()->setValue(parser.value(ranks_option).toInt());
        run->startRun();
        training = window.runController()->isRunning() || run->mpiLauncher()->isRunning();
    }

    if (parser.isSet(screenshot_option)) {
        const QString path = parser.value(screenshot_option);
        // Give the GL views a few frames to render before grabbing.
        const QString part = parser.value(grab_option);
        const auto capture = [&window, path, part] {
            QWidget* target = &window;
            if (part == QStringLiteral("planner")) target = window.plannerPanel();
            if (part == QStringLiteral("timeline")) target = window.plannerPanel()->timeline();
            if (part == QStringLiteral("run-timeline")) target = window.runPanel()->timeline();
            if (part == QStringLiteral("run")) target = window.runPanel();
            if (part == QStringLiteral("charts")) target = window.runCharts();
            if (part == QStringLiteral("equivalence")) target = window.equivalenceView();
            if (part == QStringLiteral("detections")) target = window.detectionView();
            if (part == QStringLiteral("experiment")) target = window.experimentPanel();
            const bool saved = tessera::ui::grabWithGlViews(target).save(path);  // the 3D view is a native GL window
            std::fprintf(saved ? stdout : stderr, saved ? "screenshot: %s\n" : "could not save screenshot %s\n",
                         qPrintable(path));
            QApplication::exit(saved ? 0 : 1);
        };
        if (part == QStringLiteral("equivalence")) {
            // The comparison of the designed layout with one core, captured when it is shown.
            QObject::connect(window.equivalenceView(), &tessera::ui::EquivalenceView::finished, &window,
                             [&window, capture] { QTimer::singleShot(1000, &window, capture); });
            QTimer::singleShot(500, window.equivalenceView(), &tessera::ui::EquivalenceView::compare);
        } else if (training && parser.isSet(shot_at_option)) {
            const std::int64_t at = parser.value(shot_at_option).toLongLong();
            QObject::connect(window.runController(), &tessera::ui::RunController::stepFinished, &window,
                             [&window, capture, at](const tessera::run::StepRecord& step) {
                                 if (step.step == at) QTimer::singleShot(1500, &window, capture);
                             });
        } else if (training) {
            // The run's end: its charts full, the last evaluation's overlay shown. The run's timeline is
            // captured from its dock floated at a readable size.
            QObject::connect(window.runController(), &tessera::ui::RunController::finished, &window, [&window, capture, part] {
                if (part == QStringLiteral("run-timeline")) {
                    if (auto* dock = window.findChild<QDockWidget*>(QStringLiteral("runDock"))) {
                        dock->setFloating(true);
                        dock->resize(1400, 900);
                        dock->raise();
                    }
                }
                QTimer::singleShot(2500, &window, capture);
            });
            QObject::connect(window.runController(), &tessera::ui::RunController::failed, &window,
                             [&window, capture] { QTimer::singleShot(500, &window, capture); });
            // On MPI ranks: when mpirun ends (the watched model_dir's charts refresh every 2 s).
            QObject::connect(window.runPanel()->mpiLauncher(), &tessera::ui::MpiLauncher::finished, &window,
                             [&window, capture] { QTimer::singleShot(3000, &window, capture); });
        } else {
            if (part == QStringLiteral("experiment")) {
                if (auto* dock = window.findChild<QDockWidget*>(QStringLiteral("experimentDock"))) dock->raise();
            }
            if (part == QStringLiteral("run")) {
                // The Run dock floated at a size where its class table and precision–recall legend are readable.
                if (auto* dock = window.findChild<QDockWidget*>(QStringLiteral("runDock"))) {
                    dock->setFloating(true);
                    dock->resize(760, 900);
                    dock->raise();
                }
            }
            QTimer::singleShot(2500, &window, capture);
        }
    }
    return QApplication::exec();
}

}  // namespace

// Exceptions inside the event loop are shown by StudioApplication::notify; one escaping the set-up
// (before the window exists) ends here, with a message instead of an abort.
int main(int argc, char** argv) {
    tessera::retain_freed_memory();
    try {
        return run_studio(argc, argv);
    } catch (const tessera::Error& error) {
        std::fprintf(stderr, "tessera: %s\n", error.what());
        return error.is_internal() ? 1 : 2;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "tessera: internal error: %s\nThis is a bug in Tessera: please report it.\n", error.what());
    } catch (...) {
        std::fprintf(stderr, "tessera: internal error of unknown kind\nThis is a bug in Tessera: please report it.\n");
    }
    return 1;
}
