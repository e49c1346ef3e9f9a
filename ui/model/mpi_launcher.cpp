#include "model/mpi_launcher.hpp"

#include "run/model_dir_lock.hpp"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QProcessEnvironment>
#include <QStandardPaths>
#include <QTimer>

#include <algorithm>
#include <csignal>
#include <unistd.h>

namespace tessera::ui {

MpiLauncher::MpiLauncher(QObject* parent) : QObject(parent) {
    m_poll = new QTimer(this);
    m_poll->setInterval(250);
    connect(m_poll, &QTimer::timeout, this, &MpiLauncher::pollLock);
}

MpiLauncher::~MpiLauncher() {
    // The studio closing stops a run it started as Stop does: after the step, with a checkpoint (the
    // same launch resumes it).
    if (!m_process) return;
    m_process->disconnect(this);
    requestStop();
    if (!m_process->waitForFinished(120000)) m_process->kill();
}

QStringList MpiLauncher::arguments(const MpiLaunch& launch, const QString& cli, int host_cores) {
    QStringList args{QStringLiteral("-np"), QString::number(launch.ranks), QStringLiteral("--bind-to"), QStringLiteral("none")};
    if (launch.ranks * launch.threads_per_rank > host_cores) args << QStringLiteral("--oversubscribe");
    args << cli << QStringLiteral("train") << launch.experiment << QStringLiteral("--backend") << QStringLiteral("mpi")
         << QStringLiteral("--threads") << QString::number(launch.threads_per_rank) << QStringLiteral("--steps")
         << QString::number(launch.steps) << QStringLiteral("--model-dir") << launch.model_dir << QStringLiteral("--plain");
    return args;
}

QString MpiLauncher::findCli() {
    // $TESSERA_CLI names it outright (the studio's tests: their executables live elsewhere in the build).
    const QString named = qEnvironmentVariable("TESSERA_CLI");
    if (!named.isEmpty() && QFileInfo(named).isExecutable()) return named;
    const QString beside = QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("tessera-cli"));
    if (QFileInfo(beside).isExecutable()) return beside;
    return QStandardPaths::findExecutable(QStringLiteral("tessera-cli"));
}

bool MpiLauncher::start(const MpiLaunch& launch) {
    m_error.clear();
    m_output.clear();
    if (isRunning()) {
        m_error = tr("A run on MPI ranks is already under way.");
        return false;
    }
    const QString mpirun = QStandardPaths::findExecutable(QStringLiteral("mpirun"));
    if (mpirun.isEmpty()) {
        m_error = tr("mpirun was not found on PATH: install OpenMPI (Debian's openmpi-bin; make deps installs it).");
        return false;
    }
    const QString cli = findCli();
    if (cli.isEmpty()) {
        m_error = tr("tessera-cli was not found beside the studio or on PATH: every MPI rank runs it.");
        return false;
    }
    m_launch = launch;
    m_announced = false;
    m_process = new QProcess(this);
    m_process->setProcessChannelMode(QProcess::MergedChannels);
    QProcessEnvironment environment = QProcessEnvironment::systemEnvironment();
    if (geteuid() == 0) {  // OpenMPI refuses root unless told (containers, CI)
        environment.insert(QStringLiteral("OMPI_ALLOW_RUN_AS_ROOT"), QStringLiteral("1"));
        environment.insert(QStringLiteral("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"), QStringLiteral("1"));
    }
    environment.insert(QStringLiteral("OMPI_MCA_mpi_yield_when_idle"), QStringLiteral("1"));  // idle ranks leave their core
    m_process->setProcessEnvironment(environment);
    connect(m_process, &QProcess::readyRead, this, [this] { m_output += QString::fromUtf8(m_process->readAll()); });
    connect(m_process, &QProcess::finished, this, [this](int exit_code, QProcess::ExitStatus) {
        m_output += QString::fromUtf8(m_process->readAll());
        m_poll->stop();
        // A short run can take and release the model_dir's lock between two polls: its metrics say it ran.
        if (!m_announced && QFileInfo::exists(QDir(m_launch.model_dir).filePath(QStringLiteral("metrics.jsonl")))) {
            m_announced = true;
            emit runStarted(m_launch.model_dir);
        }
        m_process->deleteLater();
        m_process = nullptr;
        emit finished(exit_code, m_output);
    });
    const int host_cores = static_cast<int>(std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN)));
    m_process->start(mpirun, arguments(launch, cli, host_cores));
    if (!m_process->waitForStarted(10000)) {
        m_error = tr("mpirun did not start: %1").arg(m_process->errorString());
        m_process->deleteLater();
        m_process = nullptr;
        return false;
    }
    m_poll->start();
    return true;
}

void MpiLauncher::pollLock() {
    if (m_announced) return;
    if (run::ModelDirLock::holder(m_launch.model_dir.toStdString())) {
        m_announced = true;
        m_poll->stop();
        emit runStarted(m_launch.model_dir);
    }
}

void MpiLauncher::requestStop() {
    if (!isRunning()) return;
    // Rank 0 holds the lock; it stops after the step and ends the other ranks. Before it took the lock
    // (still building its cores), mpirun itself is interrupted, which forwards the signal.
    const std::optional<run::LockHolder> holder = run::ModelDirLock::holder(m_launch.model_dir.toStdString());
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    if (holder && holder->host == host && holder->pid > 0) {
        ::kill(static_cast<pid_t>(holder->pid), SIGINT);
    } else {
        ::kill(static_cast<pid_t>(m_process->processId()), SIGINT);
    }
}

bool MpiLauncher::isRunning() const { return m_process != nullptr; }

}  // namespace tessera::ui
