// MpiLauncher: a training run spread over MPI ranks on this machine, started from the studio — the same
// `mpirun -np K tessera-cli train <experiment> --backend mpi` a user would type — and followed through its
// model_dir (the studio watches runs trained by other processes: MainWindow::watchRun). Stopping asks
// rank 0 to stop after its step with a checkpoint (SIGINT to the lock's holder), as Ctrl-C does.
//
//   MpiLauncher launcher;
//   launcher.start({.experiment = "em.json", .model_dir = "runs/em", .steps = 300, .ranks = 4});
//   connect(&launcher, &MpiLauncher::runStarted, ...);   // the model_dir's lock is taken: watch it
#pragma once

#include <QObject>
#include <QProcess>
#include <QString>
#include <QStringList>

class QTimer;

namespace tessera::ui {

struct MpiLaunch {
    QString experiment;   // a file every rank reads (saved: the ranks do not see the studio's edits)
    QString model_dir;
    int steps = 1;
    int ranks = 2;
    int threads_per_rank = 1;
};

class MpiLauncher : public QObject {
    Q_OBJECT
public:
    explicit MpiLauncher(QObject* parent = nullptr);
    ~MpiLauncher() override;

    // mpirun's arguments for a launch: the ranks, no binding to one core (each rank runs its threads),
    // oversubscription allowed when the ranks' threads outnumber this machine's cores.
    static QStringList arguments(const MpiLaunch& launch, const QString& cli, int host_cores);
    // $TESSERA_CLI, else tessera-cli beside the studio's executable, else on PATH; empty when none.
    static QString findCli();

    // Starts mpirun; false (and lastError) when mpirun or tessera-cli cannot be found or run.
    bool start(const MpiLaunch& launch);
    // Rank 0 stops after its step with a checkpoint (the others follow it).
    void requestStop();
    bool isRunning() const;
    QString lastError() const { return m_error; }
    QString output() const { return m_output; }  // what mpirun and the ranks printed so far

signals:
    void runStarted(const QString& model_dir);   // rank 0 holds the model_dir: its files appear
    void finished(int exit_code, const QString& output);

private:
    void pollLock();

    QProcess* m_process = nullptr;
    QTimer* m_poll = nullptr;
    MpiLaunch m_launch;
    bool m_announced = false;
    QString m_error, m_output;
};

}  // namespace tessera::ui
