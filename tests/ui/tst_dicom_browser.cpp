// The DICOM series browser: a folder holding four series (pydicom's CT, MR, RT dose and a JPEG 2000 CT) opened
// through the main window shows one row per series with what a user picks by — patient, study, series,
// description, modality, slices, size, spacing, encoding — and opens the one chosen, by a click on its
// row and on Open. A folder with one series opens without asking. The browser's screenshot is written to
// dicom_browser_screens/ beside the test binary (README: resources/screenshots/dicom_series_browser.png).
#include "gl_test_main.hpp"
#include "widgets/dicom_series_browser.hpp"
#include "widgets/main_window.hpp"

#include <QDir>
#include <QFile>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSettings>
#include <QTemporaryDir>
#include <QTimer>
#include <QTreeWidget>
#include <QScopeGuard>

using namespace tessera;
using namespace tessera::ui;

namespace {

const QString pydicom_files = QStringLiteral("/usr/lib/python3/dist-packages/pydicom/data/test_files/");

// The row whose column `column` reads `text`, or null.
QTreeWidgetItem* rowWith(QTreeWidget* list, int column, const QString& text) {
    for (int row = 0; row < list->topLevelItemCount(); ++row) {
        if (list->topLevelItem(row)->text(column) == text) return list->topLevelItem(row);
    }
    return nullptr;
}

}  // namespace

class tst_DicomBrowser : public QObject {
    Q_OBJECT
private slots:
    void init() {
        QSettings().clear();
        if (!QFile::exists(pydicom_files + QStringLiteral("CT_small.dcm"))) QSKIP("the DICOM files need Debian's python3-pydicom");
    }

    void listsTheSeriesOfAFolderAndOpensTheOneChosen() {
        QTemporaryDir scratch;
        const QString folder = scratch.filePath(QStringLiteral("study"));
        QVERIFY(QDir().mkpath(folder));
        for (const char* name : {"CT_small.dcm", "MR_small.dcm", "rtdose.dcm", "693_J2KI.dcm"}) {
            QVERIFY(QFile::copy(pydicom_files + QLatin1String(name), folder + '/' + QLatin1String(name)));
        }
        MainWindow window;
        window.resize(1280, 800);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));

        bool seen = false;
        QTimer::singleShot(0, this, [&] {
            auto* browser = qobject_cast<DicomSeriesBrowser*>(QApplication::activeModalWidget());
            QVERIFY(browser);
            // A failed check returns from here: the browser is closed anyway, so openImage returns.
            const auto close_on_failure = qScopeGuard([&] { if (!seen) browser->reject(); });
            QVERIFY(QTest::qWaitForWindowExposed(browser));
            QTreeWidget* list = browser->seriesList();
            QCOMPARE(list->topLevelItemCount(), 4);
            // Columns: patient, study, series, description, modality, slices, size, spacing, encoding.
            QTreeWidgetItem* dose = rowWith(list, 4, QStringLiteral("RTDOSE"));
            QVERIFY(dose);
            QCOMPARE(dose->text(5), QStringLiteral("15"));
            QCOMPARE(dose->text(6), QStringLiteral("10 × 10"));
            QCOMPARE(dose->text(7), QStringLiteral("10 × 10 × 5"));
            QTreeWidgetItem* plain = rowWith(list, 3, QStringLiteral("5/5mm Plain"));
            QVERIFY(plain);
            QCOMPARE(plain->text(2), QStringLiteral("2"));
            QCOMPARE(plain->text(6), QStringLiteral("512 × 512"));
            QCOMPARE(plain->text(8), QStringLiteral("JPEG 2000"));
            QVERIFY(rowWith(list, 4, QStringLiteral("MR")) && rowWith(list, 4, QStringLiteral("CT")));
            QTreeWidgetItem* ct = rowWith(list, 0, QStringLiteral("CompressedSamples CT1 (1CT1)"));
            QVERIFY2(ct, qPrintable(list->topLevelItem(0)->text(0)));
            QCOMPARE(ct->text(1), QStringLiteral("e+1, 2004-01-19"));  // its Study Description is "e+1"
            // A click on the row shows its UID; Open reads it.
            const QRect place = list->visualItemRect(plain);
            QTest::mouseClick(list->viewport(), Qt::LeftButton, {}, place.center());
            QCOMPARE(list->currentItem(), plain);
            QVERIFY(browser->detailsLabel()->text().contains(QStringLiteral("1 file, series UID")));
            QTest::qWait(100);
            const QString screens = QCoreApplication::applicationDirPath() + QStringLiteral("/dicom_browser_screens");
            QDir().mkpath(screens);
            QVERIFY(browser->grab().save(screens + QStringLiteral("/dicom_series_browser.png")));
            seen = true;
            QTest::mouseClick(browser->openButton(), Qt::LeftButton);
        });
        QVERIFY(window.openImage(folder));
        QVERIFY(seen);
        QCOMPARE(window.model()->volume()->geometry.size, (std::array<std::int64_t, 3>{512, 512, 1}));

        // Cancel opens nothing and keeps what is shown.
        QTimer::singleShot(0, this, [&] {
            auto* browser = qobject_cast<DicomSeriesBrowser*>(QApplication::activeModalWidget());
            QVERIFY(browser);
            browser->reject();
        });
        QVERIFY(!window.openImage(folder));
        QCOMPARE(window.model()->volume()->geometry.size, (std::array<std::int64_t, 3>{512, 512, 1}));

        // One series: opened at once, no browser.
        const QString single = scratch.filePath(QStringLiteral("dose"));
        QVERIFY(QDir().mkpath(single));
        QVERIFY(QFile::copy(pydicom_files + QStringLiteral("rtdose.dcm"), single + QStringLiteral("/rtdose.dcm")));
        QVERIFY(window.openImage(single));
        QCOMPARE(window.model()->volume()->geometry.size, (std::array<std::int64_t, 3>{10, 10, 15}));
    }
};

TESSERA_GL_TEST_MAIN(tst_DicomBrowser)
#include "tst_dicom_browser.moc"
