// Setup shared by the studio's benchmarks: an OpenGL-ready application and a window showing a 256³ CT
// phantom with an experiment open over it.
#pragma once

#include "data/phantom.hpp"
#include "widgets/main_window.hpp"

#include <QApplication>
#include <QSurfaceFormat>
#include <QTest>

namespace tessera::bench {

// Before the QApplication exists: the 3D view needs an OpenGL 3.2 core context.
inline void use_core_opengl() {
    QSurfaceFormat format;
    format.setVersion(3, 2);
    format.setProfile(QSurfaceFormat::CoreProfile);
    format.setDepthBufferSize(24);
    QSurfaceFormat::setDefaultFormat(format);
}

// Shows `window` at 1600×1000 with a 256³ phantom and opens `experiment` (a preset's file name).
inline bool show_phantom_with_experiment(ui::MainWindow& window, const char* experiment) {
    QApplication::setOrganizationName(QStringLiteral("TesseraBench"));
    window.resize(1600, 1000);
    window.show();
    if (!QTest::qWaitForWindowExposed(&window)) return false;
    PhantomOptions options;
    options.size = {256, 256, 256};
    Phantom phantom = make_ct_phantom(options);
    window.showVolume(std::make_shared<Volume>(std::move(phantom.volume)), std::make_shared<LabelMap>(std::move(phantom.labels)));
    return window.openExperiment(QStringLiteral(TESSERA_SOURCE_DIR "/resources/experiments/") + QString::fromLatin1(experiment));
}

}  // namespace tessera::bench
