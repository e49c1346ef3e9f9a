// MainWindow's design half: the experiment, partition and planner docks, the Experiment and Edit
// menus, opening and saving experiment files, and exporting the design.
#include "widgets/main_window.hpp"

#include "data/examples.hpp"
#include "data/phantom.hpp"
#include "data/synthetic_em.hpp"
#include "experiment/export.hpp"
#include "io/volume_io.hpp"
#include "widgets/detection_view.hpp"
#include "widgets/experiment_panel.hpp"
#include "widgets/partition_panel.hpp"
#include "widgets/planner_panel.hpp"
#include "widgets/run_panel.hpp"
#include "widgets/slice_view.hpp"
#include "widgets/volume_view.hpp"

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDockWidget>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSaveFile>
#include <QScrollArea>
#include <QSettings>
#include <QTabWidget>
#include <QStatusBar>
#include <QToolBar>
#include <QUndoStack>
#include <QVBoxLayout>

#include <fstream>
#include <sstream>

namespace tessera::ui {

namespace {

constexpr int max_recent_experiments = 10;
const QString experiment_filter = QStringLiteral("Experiments (*.json);;All files (*)");

QString presets_directory() { return QStringLiteral(TESSERA_RESOURCE_DIR "/experiments"); }

}  // namespace

QDockWidget* MainWindow::makeDock(const QString& title, const QString& object_name, QWidget* content, bool scroll) {
    auto* dock = new QDockWidget(title, this);
    dock->setObjectName(object_name);
    if (scroll) {  // a panel taller or wider than its dock scrolls instead of growing the window
        auto* area = new QScrollArea(dock);
        area->setWidgetResizable(true);
        area->setFrameShape(QFrame::NoFrame);
        area->setWidget(content);
        dock->setWidget(area);
    } else {
        dock->setWidget(content);
    }
    return dock;
}

void MainWindow::createDesignDocks() {
    m_design = new PartitionDesign(this);
    for (SliceView* view : m_slice_views) view->setPartitionDesign(m_design);
    m_volume_view->setPartitionDesign(m_design);

    m_experiment_panel = new ExperimentPanel(m_design);
    m_partition_panel = new PartitionPanel(m_design);
    m_planner_panel = new PlannerPanel;
    QDockWidget* experiment_dock = makeDock(tr("Experiment"), QStringLiteral("experimentDock"), m_experiment_panel, true);
    QDockWidget* partition_dock = makeDock(tr("Partition"), QStringLiteral("partitionDock"), m_partition_panel, true);
    QDockWidget* planner_dock = makeDock(tr("Planner"), QStringLiteral("plannerDock"), m_planner_panel, true);
    // Designing needs the partition controls beside the views; the experiment's fields and the image
    // controls share the right column as tabs; the planner sits below.
    addDockWidget(Qt::LeftDockWidgetArea, partition_dock);
    QDockWidget* image_dock = findChild<QDockWidget*>(QStringLiteral("imageDock"));
    addDockWidget(Qt::RightDockWidgetArea, experiment_dock);
    if (image_dock) tabifyDockWidget(image_dock, experiment_dock);
    if (image_dock) image_dock->raise();
    addDockWidget(Qt::BottomDockWidgetArea, planner_dock);
    resizeDocks({partition_dock}, {300}, Qt::Horizontal);
    resizeDocks({planner_dock}, {320}, Qt::Vertical);

    connect(m_design, &PartitionDesign::experimentChanged, this, &MainWindow::onDesignExperimentChanged);
    connect(m_design, &PartitionDesign::designChanged, this, &MainWindow::onDesignChanged);
    connect(m_design->undoStack(), &QUndoStack::cleanChanged, this, &MainWindow::updateWindowTitle);
    connect(m_planner_panel, &PlannerPanel::layoutChosen, this, &MainWindow::onPlannerLayoutChosen);
}

void MainWindow::createDesignActions() {
    // Edit goes between File and View, where desktop users look for Undo.
    QMenu* edit = new QMenu(tr("&Edit"), this);
    const QList<QAction*> top = menuBar()->actions();
    menuBar()->insertMenu(top.size() > 1 ? top[1] : nullptr, edit);  // File, Edit, View, Help
    QAction* undo = m_design->undoStack()->createUndoAction(this, tr("&Undo"));
    undo->setShortcut(QKeySequence::Undo);
    undo->setToolTip(tr("Undo the last design edit (Ctrl+Z)"));
    QAction* redo = m_design->undoStack()->createRedoAction(this, tr("&Redo"));
    redo->setShortcut(QKeySequence::Redo);
    redo->setToolTip(tr("Redo the edit undone last (Ctrl+Shift+Z)"));
    edit->addAction(undo);
    edit->addAction(redo);

    QMenu* experiment = new QMenu(tr("E&xperiment"), this);
    menuBar()->insertMenu(edit->menuAction(), experiment);  // File, Experiment, Edit, View, Help
    QAction* open = experiment->addAction(tr("&Open Experiment…"), this, [this] {
        QSettings settings;
        const QString path = QFileDialog::getOpenFileName(this, tr("Open experiment"),
                                                          settings.value(QStringLiteral("lastExperimentDir"), presets_directory()).toString(),
                                                          experiment_filter);
        if (path.isEmpty()) return;
        settings.setValue(QStringLiteral("lastExperimentDir"), QFileInfo(path).absolutePath());
        openExperiment(path);
    });
    open->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
    open->setToolTip(tr("Open an experiment file: model, input, partition, device (Ctrl+Shift+O)"));
    // A run can be opened without an experiment (its docks wait for one or the other).
    QAction* open_run = experiment->addAction(tr("Open &Run…"), m_run_panel, &RunPanel::chooseRunToOpen);
    open_run->setToolTip(tr("Open a run's model_dir: its curves, evaluation and cores (a live one is followed)"));
    QMenu* presets = experiment->addMenu(tr("&Presets"));
    for (const QFileInfo& file : QDir(presets_directory()).entryInfoList({QStringLiteral("*.json")}, QDir::Files, QDir::Name)) {
        QAction* action = presets->addAction(file.completeBaseName(), this, [this, path = file.absoluteFilePath()] { openExperiment(path); });
        action->setToolTip(tr("Open the preset %1").arg(file.fileName()));
    }
    m_recent_experiments_menu = experiment->addMenu(tr("Open &Recent"));
    experiment->addSeparator();
    QAction* save = experiment->addAction(tr("&Save Experiment"), this, [this] {
        if (!m_design->hasExperiment()) return;
        if (m_design->path().isEmpty()) {
            const QString path = QFileDialog::getSaveFileName(this, tr("Save experiment"), QString(), experiment_filter);
            if (!path.isEmpty()) saveExperiment(path);
        } else {
            saveExperiment(m_design->path());
        }
    });
    save->setShortcut(QKeySequence::Save);
    save->setToolTip(tr("Write the design into the experiment file (Ctrl+S)"));
    QAction* save_as = experiment->addAction(tr("Save Experiment &As…"), this, [this] {
        if (!m_design->hasExperiment()) return;
        const QString path = QFileDialog::getSaveFileName(this, tr("Save experiment as"), m_design->path(), experiment_filter);
        if (!path.isEmpty()) saveExperiment(path);
    });
    save_as->setShortcut(QKeySequence(Qt::CTRL | Qt::ALT | Qt::Key_S));
    save_as->setToolTip(tr("Write the design into a new experiment file (Ctrl+Alt+S)"));
    experiment->addSeparator();
    QAction* export_tpu = experiment->addAction(tr("Export &TPUConfig…"), this, [this] { showExportDialog(SnippetKind::TpuConfig); });
    export_tpu->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
    export_tpu->setToolTip(tr("The design as TPUEstimator code: num_cores_per_replica, input_partition_dims, PER_HOST_V2 (Ctrl+E)"));
    QAction* export_jax = experiment->addAction(tr("Export &JAX Mesh…"), this, [this] { showExportDialog(SnippetKind::Jax); });
    export_jax->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_E));
    export_jax->setToolTip(tr("The design as a JAX device mesh and PartitionSpecs (Ctrl+Shift+E)"));
    for (QAction* action : {save, save_as, export_tpu, export_jax}) action->setEnabled(false);
    connect(m_design, &PartitionDesign::experimentChanged, this, [this, save, save_as, export_tpu, export_jax] {
        for (QAction* action : {save, save_as, export_tpu, export_jax}) action->setEnabled(m_design->hasExperiment());
    });

    // View ▸ Show Partition Grid
    QMenu* view = nullptr;
    for (QAction* action : menuBar()->actions()) {
        if (action->menu() && action->text() == tr("&View")) view = action->menu();
    }
    if (view) {
        QAction* grid = new QAction(tr("Show &Partition Grid"), this);
        grid->setCheckable(true);
        grid->setChecked(true);
        grid->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_G));
        grid->setToolTip(tr("Draw each core's tile, its halo and its costs over the slices (Ctrl+G)"));
        connect(grid, &QAction::toggled, this, [this](bool shown) {
            for (SliceView* slice_view : m_slice_views) slice_view->setPartitionVisible(shown);
            m_volume_view->setPartitionVisible(shown);
        });
        view->insertAction(view->actions().value(3), grid);
    }

    if (QToolBar* toolbar = findChild<QToolBar*>(QStringLiteral("mainToolbar"))) {
        toolbar->addSeparator();
        toolbar->addAction(open);
        toolbar->addAction(save);
        toolbar->addAction(undo);
        toolbar->addAction(redo);
    }
    rebuildRecentExperimentsMenu();
    updateWindowTitle();
}

bool MainWindow::confirmDiscardDesign() {
    if (!m_design || !m_design->hasExperiment() || !m_design->isModified()) return true;
    const auto answer = QMessageBox::question(this, tr("Unsaved design"),
                                              tr("The experiment \"%1\" has unsaved changes. Save them?")
                                                  .arg(QFileInfo(m_design->path()).fileName()),
                                              QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel, QMessageBox::Save);
    if (answer == QMessageBox::Cancel) return false;
    if (answer == QMessageBox::Save) return saveExperiment(m_design->path());
    return true;
}

bool MainWindow::openExperiment(const QString& path) {
    if (!confirmDiscardDesign()) return false;
    try {
        // Read once: the design keeps the text (to save edits in place) and the parsed experiment.
        std::ifstream in(path.toStdString(), std::ios::binary);
        TESSERA_CHECK(in, "cannot read the experiment file '" << path.toStdString() << "': no such file, or not readable");
        std::ostringstream text;
        text << in.rdbuf();
        const std::filesystem::path file = path.toStdString();
        experiment::Experiment e = experiment::parse_experiment(text.str(), file.filename().string());
        experiment::place_in_directory(e, file.has_parent_path() ? file.parent_path() : std::filesystem::path("."));
        m_design->loadExperiment(e, text.str());
        m_design->setPath(QFileInfo(path).absoluteFilePath());
    } catch (const std::exception& error) {
        showError(tr("Cannot open experiment"), QString::fromUtf8(error.what()));
        return false;
    }
    QSettings settings;
    QStringList recent = settings.value(QStringLiteral("recentExperiments")).toStringList();
    recent.removeAll(QFileInfo(path).absoluteFilePath());
    recent.prepend(QFileInfo(path).absoluteFilePath());
    while (recent.size() > max_recent_experiments) recent.removeLast();
    settings.setValue(QStringLiteral("recentExperiments"), recent);
    rebuildRecentExperimentsMenu();

    // Something to draw the grid over: the experiment's own data when it is at hand, else a phantom.
    if (!m_model->hasVolume()) {
        const experiment::Experiment& e = m_design->experiment();
        const bool volumetric = e.size.size() == 3;
        if (e.data && e.data->source == data::SourceKind::ExampleMri && find_example_mri()) {
            const auto files = find_example_mri();
            if (openImage(QString::fromStdString(files->image.string()))) openLabelMap(QString::fromStdString(files->labels.string()));
        } else if (e.data && e.data->source == data::SourceKind::SyntheticEm) {
            data::EmSectionOptions options;
            data::EmSection section = data::make_em_section(options);
            showVolume(std::make_shared<tessera::Volume>(std::move(section.image)),
                       std::make_shared<tessera::LabelMap>(std::move(section.labels)), {{1, tr("membrane")}});
        } else if (m_detection_preview_image) {
            showVolume(m_detection_preview_image, nullptr);  // the image the Detections tab previews
        } else {
            showPhantom(!volumetric);
        }
    }
    statusBar()->showMessage(tr("Opened %1").arg(QDir::toNativeSeparators(path)), 5000);
    return true;
}

bool MainWindow::saveExperiment(const QString& path) {
    if (!m_design->hasExperiment()) return false;
    try {
        const std::string text = m_design->experimentText();
        QSaveFile file(path);  // written aside and renamed: a failed save leaves the old file
        TESSERA_CHECK(file.open(QIODevice::WriteOnly), "cannot write '" << path.toStdString() << "': " << file.errorString().toStdString());
        file.write(text.data(), static_cast<qint64>(text.size()));
        TESSERA_CHECK(file.commit(), "cannot write '" << path.toStdString() << "': " << file.errorString().toStdString());
    } catch (const std::exception& error) {
        showError(tr("Cannot save experiment"), QString::fromUtf8(error.what()));
        return false;
    }
    m_design->setPath(QFileInfo(path).absoluteFilePath());
    m_design->setSaved();
    statusBar()->showMessage(tr("Saved %1").arg(QDir::toNativeSeparators(path)), 5000);
    updateWindowTitle();
    return true;
}

QString MainWindow::exportSnippet(SnippetKind kind) const {
    if (!m_design->hasExperiment()) return {};
    const experiment::Experiment current = experiment::parse_experiment(m_design->experimentText(), m_design->experiment().origin);
    return QString::fromStdString(kind == SnippetKind::TpuConfig ? experiment::tpu_config_snippet(current)
                                                                 : experiment::jax_snippet(current));
}

void MainWindow::showExportDialog(SnippetKind kind) {
    if (!m_design->hasExperiment()) return;
    auto* dialog = new QDialog(this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    dialog->setObjectName(QStringLiteral("exportDialog"));
    dialog->setWindowTitle(kind == SnippetKind::TpuConfig ? tr("Export TPUConfig") : tr("Export JAX mesh"));
    auto* layout = new QVBoxLayout(dialog);
    auto* text = new QPlainTextEdit(exportSnippet(kind), dialog);
    text->setReadOnly(true);
    text->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    text->setMinimumSize(640, 360);
    layout->addWidget(text);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, dialog);
    QPushButton* copy = buttons->addButton(tr("&Copy"), QDialogButtonBox::ActionRole);
    copy->setToolTip(tr("Copy the code to the clipboard"));
    QPushButton* save = buttons->addButton(tr("&Save As…"), QDialogButtonBox::ActionRole);
    save->setToolTip(tr("Write the code to a Python file"));
    connect(copy, &QPushButton::clicked, dialog, [text] { QApplication::clipboard()->setText(text->toPlainText()); });
    connect(save, &QPushButton::clicked, dialog, [dialog, text] {
        const QString path = QFileDialog::getSaveFileName(dialog, tr("Save code"), QString(), tr("Python (*.py);;All files (*)"));
        if (path.isEmpty()) return;
        QSaveFile file(path);
        if (!file.open(QIODevice::WriteOnly) || file.write(text->toPlainText().toUtf8()) < 0 || !file.commit()) {
            QMessageBox::warning(dialog, tr("Cannot save"), tr("Cannot write %1: %2").arg(path, file.errorString()));
        }
    });
    connect(buttons, &QDialogButtonBox::rejected, dialog, &QDialog::close);
    layout->addWidget(buttons);
    dialog->open();
}

void MainWindow::rebuildRecentExperimentsMenu() {
    if (!m_recent_experiments_menu) return;
    m_recent_experiments_menu->clear();
    const QStringList recent = QSettings().value(QStringLiteral("recentExperiments")).toStringList();
    for (const QString& path : recent) {
        m_recent_experiments_menu->addAction(QFileInfo(path).fileName(), this, [this, path] { openExperiment(path); })->setToolTip(path);
    }
    if (!recent.isEmpty()) {
        m_recent_experiments_menu->addSeparator();
        m_recent_experiments_menu->addAction(tr("Clear List"), this, [this] {
            QSettings().remove(QStringLiteral("recentExperiments"));
            rebuildRecentExperimentsMenu();
        });
    }
    m_recent_experiments_menu->setEnabled(!recent.isEmpty());
}

void MainWindow::onDesignExperimentChanged() {
    if (m_design->hasExperiment()) bringBackDesignDocks();
    m_planned_cores = -1;  // a new model or input: sweep again
    updateDetectionDesign(true);
    onDesignChanged();
}

void MainWindow::updateDetectionDesign(bool new_experiment) {
    if (!m_design->hasExperiment()) return;
    const experiment::Experiment& e = m_design->experiment();
    if (new_experiment) m_detection_preview_image.reset();
    if (e.model.kind != experiment::ModelKind::RetinaNet || e.size.size() != 2) {
        if (new_experiment) m_detection_view->clear();
        return;
    }
    try {
        m_detection_view->setPartition(m_design->grid(), detection::make_anchors(e.size[0], e.size[1], e.detection.detector.anchors));
        // A new experiment (or a new model or input) makes an earlier evaluation's boxes stale: preview its data.
        if (new_experiment && e.data) {
            const std::unique_ptr<data::Dataset> dataset =
                data::make_dataset(*e.data, experiment::global_input_shape(e), e.model.num_classes);
            if (dataset->num_eval_examples() > 0) {
                const data::Example example = dataset->eval_example(0);
                m_detection_view->showPreview(example, dataset->class_names());
                m_detection_preview_image = std::make_shared<tessera::Volume>(data::example_grey_volume(example));
            }
            m_central_tabs->setCurrentWidget(m_detection_view);
        }
    } catch (const std::exception& error) {
        statusBar()->showMessage(tr("Cannot preview the detection data: %1").arg(QString::fromUtf8(error.what())), 8000);
    }
}

void MainWindow::onDesignChanged() {
    updateWindowTitle();
    if (!m_design->hasExperiment()) return;
    updateDetectionDesign(false);
    // The sweep depends on the core budget; a moved cut or a different split of the same budget only
    // needs the table to follow.
    try {
        const std::int64_t cores = m_design->coresPerReplica() * m_design->replicas();
        if (cores != m_planned_cores) {
            m_planned_cores = cores;
            m_planner_panel->setExperiment(experiment::parse_experiment(m_design->experimentText(), m_design->experiment().origin));
        }
        m_planner_panel->showLayout(m_design->replicas(), m_design->pieces());
    } catch (const Error&) {
        // An invalid intermediate state cannot be planned; the panels say why.
    }
}

void MainWindow::onPlannerLayoutChosen(std::int64_t replicas, std::vector<std::int64_t> pieces) {
    if (!m_design->setLayout(replicas, pieces)) statusBar()->showMessage(m_design->lastError(), 8000);
}

void MainWindow::updateWindowTitle() {
    QString title = tr("Tessera");
    if (m_design && m_design->hasExperiment()) {
        const QString name = m_design->path().isEmpty() ? tr("untitled experiment") : QFileInfo(m_design->path()).fileName();
        title = QStringLiteral("%1[*] — %2").arg(name, tr("Tessera"));
    }
    setWindowTitle(title);
    setWindowModified(m_design && m_design->isModified());
}

}  // namespace tessera::ui
