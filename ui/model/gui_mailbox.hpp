// GuiMailbox: how the studio's worker threads hand results to the GUI thread.
//
// A worker posts a delivery (a function holding copied values); the mailbox runs it on the GUI thread
// the next time the event loop turns, and the delivery emits the owner's signals there. Only the C++
// library synchronises the hand-over (a std::mutex around the list), and the queued signal that wakes
// the GUI thread carries no arguments. Why not queued signals with arguments: Debian's Qt is not built
// for ThreadSanitizer, so its event queue's locking is invisible to it, and every value passed through
// it would be reported as a race that could neither be confirmed nor excluded. Here every hand-over is
// visible, so `make tsan` checks the studio's threads as it checks the engine's.
//
//   GuiMailbox* mailbox = new GuiMailbox(this);             // lives on the GUI thread
//   // on the worker thread:
//   mailbox->post([this, result] { emit planned(result); });
#pragma once

#include <QObject>

#include <functional>
#include <mutex>
#include <vector>

namespace tessera::ui {

class GuiMailbox : public QObject {
    Q_OBJECT
public:
    explicit GuiMailbox(QObject* parent = nullptr);

    // Any thread. `delivery` runs on the mailbox's thread, after every delivery posted before it;
    // never if the mailbox is destroyed first.
    void post(std::function<void()> delivery);

signals:
    void posted();  // queued to deliver(); no arguments cross the event queue

private slots:
    void deliver();

private:
    std::mutex m_mutex;
    std::vector<std::function<void()>> m_pending;  // guarded by m_mutex
};

// Marks the calling thread as CPU-bound background work (SCHED_BATCH on Linux, which the threads it
// creates inherit): the GUI thread, waking, runs ahead of it, while it keeps its share of the CPU.
void scheduleThisThreadAsBatch();

}  // namespace tessera::ui
