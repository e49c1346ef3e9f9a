#include "model/gui_mailbox.hpp"

#include <QPointer>

#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

namespace tessera::ui {

GuiMailbox::GuiMailbox(QObject* parent) : QObject(parent) {
    connect(this, &GuiMailbox::posted, this, &GuiMailbox::deliver, Qt::QueuedConnection);
}

void GuiMailbox::post(std::function<void()> delivery) {
    bool was_empty = false;
    {
        const std::lock_guard lock(m_mutex);
        was_empty = m_pending.empty();
        m_pending.push_back(std::move(delivery));
    }
    // One wake-up per batch: deliver() takes everything posted until it runs.
    if (was_empty) emit posted();
}

void GuiMailbox::deliver() {
    std::vector<std::function<void()>> deliveries;
    {
        const std::lock_guard lock(m_mutex);
        deliveries.swap(m_pending);
    }
    // A receiver may destroy the mailbox's owner (closing a window): the deliveries after that one would
    // reach a dead object, so they are dropped, as Qt drops queued calls to a deleted receiver.
    const QPointer<GuiMailbox> alive(this);
    for (std::function<void()>& delivery : deliveries) {
        if (!alive) return;
        delivery();
    }
}

void scheduleThisThreadAsBatch() {
#ifdef __linux__
    // Not a higher nice value: that is a share against every process on the machine, and at nice 10
    // a run beside a compiler or a parallel test got a tenth of a core (a 10 s run took over 300 s).
    // SCHED_BATCH keeps the thread's fair share and only gives up waking ahead of interactive threads.
    sched_param parameters{};
    parameters.sched_priority = 0;
    pthread_setschedparam(pthread_self(), SCHED_BATCH, &parameters);
#endif
}

}  // namespace tessera::ui
