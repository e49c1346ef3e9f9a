// StudioApplication: a QApplication that never aborts on an exception.
//
// Qt does not let exceptions cross its event loop: one thrown by a slot or an event handler ends the
// process (and a studio holding hours of unsaved design work with it). Every handler that reads user
// input catches what it expects; this is the net under the rest: an exception reaching notify() is
// shown in a dialog (what happened, and that it is a bug to report when it is not bad input), the
// event is dropped, and the work stays open.
#pragma once

#include <QApplication>
#include <QList>
#include <QPointer>
#include <QString>

class QMessageBox;

namespace tessera::ui {

class StudioApplication : public QApplication {
    Q_OBJECT
public:
    StudioApplication(int& argc, char** argv);
    ~StudioApplication() override;  // closes the reports still open

    bool notify(QObject* receiver, QEvent* event) override;

    // The last message shown for an exception caught here (empty if none): for tests.
    const QString& lastCaught() const { return m_last_caught; }

    // The text shown for an exception: bad input says what to fix; anything else asks for a report.
    static QString describe(const std::exception* error, bool is_bad_input);

private:
    void report(const QString& text);
    QString m_last_caught;
    // Reports without a parent window (none was active) are top-level widgets Qt never deletes itself.
    QList<QPointer<QMessageBox>> m_open_reports;
};

}  // namespace tessera::ui
