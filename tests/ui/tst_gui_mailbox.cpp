// GuiMailbox: deliveries posted from several threads run on the GUI thread, each thread's in the order
// posted, none lost; a mailbox destroyed first runs none of its pending deliveries. The hand-over is
// also what `make tsan` checks (this test is one of its targets).
#include "model/gui_mailbox.hpp"

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QThread>
#include <QtTest>

#include <atomic>
#include <thread>
#include <vector>

#ifdef __linux__
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

using tessera::ui::GuiMailbox;

class TestGuiMailbox : public QObject {
    Q_OBJECT
private slots:
    void deliversEverythingInOrderOnTheGuiThread() {
        constexpr int threads = 4;
        constexpr int posts_per_thread = 2000;
        GuiMailbox mailbox;
        std::vector<std::vector<int>> received(threads);  // touched on the GUI thread only
        int off_gui_thread = 0;
        QThread* const gui_thread = QThread::currentThread();
        std::vector<std::thread> workers;
        for (int t = 0; t < threads; ++t) {
            workers.emplace_back([&, t] {
                for (int i = 0; i < posts_per_thread; ++i) {
                    // Each delivery owns a copy of a growing value: what the worker wrote must arrive whole.
                    std::vector<int> payload(static_cast<std::size_t>(i % 7 + 1), i);
                    mailbox.post([&, t, payload] {
                        if (QThread::currentThread() != gui_thread) ++off_gui_thread;
                        for (int value : payload) QCOMPARE_EQ(value, payload.front());
                        received[static_cast<std::size_t>(t)].push_back(payload.front());
                    });
                }
            });
        }
        for (std::thread& worker : workers) worker.join();
        QTRY_COMPARE_WITH_TIMEOUT(received[threads - 1].size(), std::size_t{posts_per_thread}, 30000);
        QTRY_VERIFY_WITH_TIMEOUT(std::all_of(received.begin(), received.end(),
                                             [](const auto& r) { return r.size() == std::size_t{posts_per_thread}; }),
                                 30000);
        QCOMPARE(off_gui_thread, 0);
        for (const std::vector<int>& sequence : received) {
            for (int i = 0; i < posts_per_thread; ++i) QCOMPARE(sequence[static_cast<std::size_t>(i)], i);
        }
    }

    void dropsPendingDeliveriesWhenDestroyed() {
        auto* mailbox = new GuiMailbox;
        std::atomic<int> delivered = 0;
        std::thread worker([&] {
            for (int i = 0; i < 100; ++i) mailbox->post([&] { ++delivered; });
        });
        worker.join();
        delete mailbox;  // before the event loop ran
        QCoreApplication::processEvents();
        QTest::qWait(50);
        QCOMPARE(delivered.load(), 0);
    }

    void stopsWhenADeliveryDestroysTheMailbox() {
        auto* mailbox = new GuiMailbox;
        int delivered = 0;
        mailbox->post([&] {
            ++delivered;
            delete mailbox;  // a receiver closing the window that owns it
        });
        mailbox->post([&] { ++delivered; });
        QTRY_COMPARE(delivered, 1);
        QTest::qWait(50);
        QCOMPARE(delivered, 1);
    }

    // A background thread (a training run, its pool and prefetcher) keeps its share of the CPU: batch
    // scheduling at the default nice value, inherited by the threads it starts. A raised nice value
    // starved runs beside other processes (a tenth of a core at nice 10).
    void backgroundThreadsKeepTheirShareOfTheCpu() {
#ifdef __linux__
        struct Scheduling {
            int policy = -1;
            int nice = -100;
        };
        const auto current = [] {
            Scheduling scheduling;
            scheduling.policy = sched_getscheduler(0);
            errno = 0;
            scheduling.nice = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
            return scheduling;
        };
        const int nice_before = current().nice;
        Scheduling worker;
        Scheduling child;
        std::thread thread([&] {
            tessera::ui::scheduleThisThreadAsBatch();
            worker = current();
            std::thread inner([&] { child = current(); });
            inner.join();
        });
        thread.join();
        QCOMPARE(worker.policy, SCHED_BATCH);
        QCOMPARE(worker.nice, nice_before);
        QCOMPARE(child.policy, SCHED_BATCH);
        QCOMPARE(child.nice, nice_before);
        QCOMPARE(current().policy, SCHED_OTHER);  // the calling (GUI) thread is untouched
#else
        QSKIP("thread scheduling classes are checked on Linux");
#endif
    }
};

QTEST_MAIN(TestGuiMailbox)
#include "tst_gui_mailbox.moc"
