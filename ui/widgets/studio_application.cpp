#include "widgets/studio_application.hpp"

#include "core/error.hpp"

#include <QMessageBox>
#include <QWidget>

#include <cstdio>
#include <new>

namespace tessera::ui {

StudioApplication::StudioApplication(int& argc, char** argv) : QApplication(argc, argv) {}

StudioApplication::~StudioApplication() {
    for (const QPointer<QMessageBox>& box : std::as_const(m_open_reports)) delete box.data();
}

QString StudioApplication::describe(const std::exception* error, bool is_bad_input) {
    const QString what = error ? QString::fromUtf8(error->what()) : QStringLiteral("an exception of unknown kind");
    if (is_bad_input) return what;
    return tr("%1\n\nThis is a bug in Tessera: please report it with what you were doing. Your work is still open; "
              "save it before you go on.")
        .arg(what);
}

bool StudioApplication::notify(QObject* receiver, QEvent* event) {
    try {
        return QApplication::notify(receiver, event);
    } catch (const Error& error) {
        report(describe(&error, !error.is_internal()));
    } catch (const std::bad_alloc& error) {
        report(tr("Out of memory (%1). Close volumes or runs you do not need; your work is still open.").arg(QString::fromUtf8(error.what())));
    } catch (const std::exception& error) {
        report(describe(&error, false));
    } catch (...) {
        report(describe(nullptr, false));
    }
    return false;
}

void StudioApplication::report(const QString& text) {
    m_last_caught = text;
    std::fprintf(stderr, "tessera: %s\n", qPrintable(text));
    // Non-blocking: a modal exec() here would run a nested event loop inside notify().
    auto* box = new QMessageBox(QMessageBox::Critical, tr("Tessera"), text, QMessageBox::Ok, activeWindow());
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->open();
    m_open_reports.removeAll(nullptr);  // closed ones
    m_open_reports.append(box);
}

}  // namespace tessera::ui
