// QTEST_MAIN for tests that show VTK views: the OpenGL 3.2 core format must be the default before
// the QApplication exists, and settings go to a scratch organisation so tests never touch a user's.
#pragma once

#include <QApplication>
#include <QSurfaceFormat>
#include <QTest>

#define TESSERA_GL_TEST_MAIN(TestClass) TESSERA_GL_TEST_MAIN_WITH(TestClass, QApplication)

// The same with another application class (the studio's own, StudioApplication).
#define TESSERA_GL_TEST_MAIN_WITH(TestClass, ApplicationClass)             \
    int main(int argc, char** argv) {                                      \
        QSurfaceFormat format;                                             \
        format.setVersion(3, 2);                                           \
        format.setProfile(QSurfaceFormat::CoreProfile);                    \
        format.setDepthBufferSize(24);                                     \
        format.setStencilBufferSize(8);                                    \
        QSurfaceFormat::setDefaultFormat(format);                          \
        ApplicationClass app(argc, argv);                                  \
        QApplication::setOrganizationName(QStringLiteral("TesseraTests")); \
        QApplication::setApplicationName(QStringLiteral(#TestClass));      \
        TestClass test;                                                    \
        return QTest::qExec(&test, argc, argv);                            \
    }
