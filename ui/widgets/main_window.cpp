#include "widgets/main_window.hpp"

#include "data/phantom.hpp"
#include "io/dicom_series.hpp"
#include "io/hdf5_volume.hpp"
#include "io/label_descriptions.hpp"
#include "core/memory_budget.hpp"
#include "io/volume_io.hpp"
#include "io/overview_cache.hpp"
#include "io/volume_overview.hpp"
#include "model/gui_mailbox.hpp"
#include "widgets/detection_view.hpp"
#include "widgets/dicom_series_browser.hpp"
#include "widgets/label_legend.hpp"
#include "widgets/slice_view.hpp"
#include "widgets/volume_view.hpp"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QEventLoop>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressDialog>
#include <QPushButton>
#include <QScrollBar>
#include <QSettings>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>
#include <QToolBar>
#include <QVBoxLayout>

#include <atomic>
#include <filesystem>
#include <thread>

namespace tessera::ui {

namespace {
constexpr int max_recent_files = 10;
const QString image_filter = QStringLiteral(
    "Images (*.nii *.nii.gz *.mha *.mhd *.nrrd *.nhdr *.mgh *.mgz *.png *.jpg *.jpeg *.tif *.tiff);;NIfTI (*.nii *.nii.gz);;"
    "MetaImage (*.mha *.mhd);;NRRD (*.nrrd *.nhdr);;FreeSurfer MGH (*.mgh *.mgz);;2D images and TIFF stacks (*.png *.jpg *.jpeg *.tif *.tiff);;"
    "All files (*)");

std::filesystem::path toPath(const QString& path) { return std::filesystem::path(path.toStdString()); }

QString formatTriple(const std::array<double, 3>& value, int decimals) {
    return QStringLiteral("%1, %2, %3")
        .arg(value[0], 0, 'f', decimals)
        .arg(value[1], 0, 'f', decimals)
        .arg(value[2], 0, 'f', decimals);
}
}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent), m_model(new ViewerModel(this)) {
    setWindowTitle(tr("Tessera"));
    setAcceptDrops(true);

    auto* central = new QWidget(this);
    auto* grid = new QGridLayout(central);
    m_view_grid = grid;
    grid->setContentsMargins(2, 2, 2, 2);
    grid->setSpacing(2);
    const std::array<SliceOrientation, 3> orientations{SliceOrientation::Axial, SliceOrientation::Coronal,
                                                       SliceOrientation::Sagittal};
    const std::array<std::pair<int, int>, 3> cells{{{0, 0}, {0, 1}, {1, 0}}};
    for (std::size_t v = 0; v < 3; ++v) {
        auto* panel = new QWidget(central);
        auto* row = new QHBoxLayout(panel);
        row->setContentsMargins(0, 0, 0, 0);
        row->setSpacing(0);
        m_slice_views[v] = new SliceView(m_model, orientations[v], panel);
        m_slice_bars[v] = new QScrollBar(Qt::Vertical, panel);
        m_slice_bars[v]->setInvertedAppearance(true);  // top of the bar = last slice, like the wheel
        m_slice_bars[v]->setToolTip(tr("%1 slice").arg(orientationName(orientations[v])));
        row->addWidget(m_slice_views[v], 1);
        row->addWidget(m_slice_bars[v]);
        grid->addWidget(panel, cells[v].first, cells[v].second);
        m_slice_panels[v] = panel;
        SliceView* view = m_slice_views[v];
        QScrollBar* bar = m_slice_bars[v];
        connect(bar, &QScrollBar::valueChanged, view, [view](int value) { view->setSliceIndex(value); });
        connect(view, &SliceView::sliceChanged, bar, [bar](std::int64_t slice) {
            const QSignalBlocker block(bar);
            bar->setValue(static_cast<int>(slice));
        });
        connect(view, &SliceView::hoveredVoxel, this, &MainWindow::onHoveredVoxel);
    }
    m_volume_view = new VolumeView(m_model, central);
    grid->addWidget(m_volume_view, 1, 1);
    grid->setRowStretch(0, 1);
    grid->setRowStretch(1, 1);
    grid->setColumnStretch(0, 1);
    grid->setColumnStretch(1, 1);
    // A detector's images and boxes are 2D colour pictures, not slices of a volume: their own tab.
    m_central_tabs = new QTabWidget(this);
    m_central_tabs->setObjectName(QStringLiteral("centralTabs"));
    m_central_tabs->setDocumentMode(true);
    m_central_tabs->addTab(central, tr("Slices"));
    m_detection_view = new DetectionView(m_central_tabs);
    m_central_tabs->addTab(m_detection_view, tr("Detections"));
    m_central_tabs->setTabToolTip(1, tr("A detector's held-out images with their ground truth and detections"));
    setCentralWidget(m_central_tabs);

    m_status = new QLabel(this);
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    statusBar()->addWidget(m_status, 1);

    createDock();
    createDesignDocks();
    createRunDocks();
    createActions();
    createDesignActions();
    createRunActions();  // the Run menu, after Experiment

    connect(m_model, &ViewerModel::volumeChanged, this, &MainWindow::onVolumeChanged);
    connect(m_model, &ViewerModel::cursorChanged, this, &MainWindow::updateStatus);
    connect(m_model, &ViewerModel::labelMapChanged, this, &MainWindow::updateStatus);
    connect(m_model, &ViewerModel::fullResolutionSliceLoaded, this, &MainWindow::updateStatus);  // "≈ overview" becomes the value
    connect(m_model, &ViewerModel::windowLevelChanged, this, &MainWindow::onWindowLevelChanged);

    m_default_layout = saveState();  // what View ▸ Reset Layout returns to
    QSettings settings;
    restoreGeometry(settings.value(QStringLiteral("mainWindow/geometry")).toByteArray());
    restoreState(settings.value(QStringLiteral("mainWindow/state")).toByteArray());
    if (!settings.contains(QStringLiteral("mainWindow/geometry"))) resize(1240, 760);
    if (!settings.contains(QStringLiteral("mainWindow/state"))) sizeDocksByDefault();
    m_waiting_hint = new QLabel(tr("Experiment ▸ Open (Ctrl+Shift+O) or Open Run… brings the design and training docks"), this);
    m_waiting_hint->setObjectName(QStringLiteral("waitingDocksHint"));
    statusBar()->addPermanentWidget(m_waiting_hint);
    waitWithDesignDocks();
    onVolumeChanged();
}

MainWindow::~MainWindow() = default;

// The docks scroll rather than grow the window, so a first start (or a reset) sizes them: readable side
// panels, a bottom row tall enough for its charts, the rest to the views; the design's tabs in front.
void MainWindow::sizeDocksByDefault() {
    const auto dock = [this](const char* name) { return findChild<QDockWidget*>(QString::fromLatin1(name)); };
    resizeDocks({dock("partitionDock"), dock("imageDock")}, {300, 260}, Qt::Horizontal);
    resizeDocks({dock("plannerDock")}, {300}, Qt::Vertical);
    dock("partitionDock")->raise();
    dock("plannerDock")->raise();
}

void MainWindow::waitWithDesignDocks() {
    for (const char* name : {"experimentDock", "partitionDock", "runDock", "plannerDock", "trainingDock", "equivalenceDock"}) {
        auto* dock = findChild<QDockWidget*>(QString::fromLatin1(name));
        if (!dock || dock->isHidden()) continue;  // one the user closed stays closed
        dock->hide();
        m_waiting_docks.append(dock);
    }
    m_waiting_hint->setVisible(!m_waiting_docks.isEmpty());
}

void MainWindow::bringBackDesignDocks() {
    for (QDockWidget* dock : std::as_const(m_waiting_docks)) dock->show();
    if (!m_waiting_docks.isEmpty()) {
        if (auto* partition = findChild<QDockWidget*>(QStringLiteral("partitionDock")); partition && m_waiting_docks.contains(partition))
            partition->raise();
        if (auto* planner = findChild<QDockWidget*>(QStringLiteral("plannerDock")); planner && m_waiting_docks.contains(planner))
            planner->raise();
    }
    m_waiting_docks.clear();
    m_waiting_hint->hide();
}

void MainWindow::resetLayout() {
    m_waiting_docks.clear();
    m_waiting_hint->hide();
    restoreState(m_default_layout);
    for (QDockWidget* dock : findChildren<QDockWidget*>()) dock->setFloating(false);
    if (!isMaximized() && !isFullScreen()) resize(1240, 760);
    sizeDocksByDefault();
}

SliceView* MainWindow::sliceView(SliceOrientation orientation) const {
    return m_slice_views[static_cast<std::size_t>(orientation)];
}

void MainWindow::createActions() {
    QMenu* file = menuBar()->addMenu(tr("&File"));
    QToolBar* toolbar = addToolBar(tr("Main"));
    toolbar->setObjectName(QStringLiteral("mainToolbar"));

    QAction* open = file->addAction(tr("&Open Image…"), this, &MainWindow::chooseImage);
    open->setShortcut(QKeySequence::Open);
    open->setToolTip(tr("Open a NIfTI, MetaImage, TIFF stack or 2D image (Ctrl+O)"));
    QAction* open_dicom = file->addAction(tr("Open &DICOM Folder…"), this, [this] {
        const QString folder = QFileDialog::getExistingDirectory(this, tr("Open DICOM folder"));
        if (!folder.isEmpty()) openImage(folder);
    });
    open_dicom->setToolTip(tr("Open a DICOM series from a folder; a folder holding several series shows them to choose from"));
    QAction* open_by_region = file->addAction(tr("Open Image by &Region…"), this, [this] {
        QSettings settings;
        const QString path = QFileDialog::getOpenFileName(this, tr("Open image by region"), settings.value(QStringLiteral("lastDirectory")).toString(),
                                                          tr("Readable by region (*.h5 *.hdf5 *.hdf *.nii)"));
        if (path.isEmpty()) return;
        settings.setValue(QStringLiteral("lastDirectory"), QFileInfo(path).absolutePath());
        openImageByRegion(path);
    });
    open_by_region->setToolTip(tr("Open an HDF5 dataset or an uncompressed NIfTI without holding it: a downsampled overview, "
                                  "full-resolution slices read as they are shown (larger images open this way by themselves)"));
    QAction* open_labels = file->addAction(tr("Open &Label Map…"), this, &MainWindow::chooseLabelMap);
    open_labels->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_L));
    open_labels->setToolTip(tr("Open a label map on the same grid as the image (Ctrl+L)"));
    m_recent_menu = file->addMenu(tr("Open &Recent"));
    file->addSeparator();
    QAction* phantom_3d = file->addAction(tr("New CT &Phantom (3D)"), this, [this] { showPhantom(false); });
    phantom_3d->setToolTip(tr("Generate a seeded synthetic CT volume with labelled structures"));
    QAction* phantom_2d = file->addAction(tr("New CT Phantom (&2D)"), this, [this] { showPhantom(true); });
    phantom_2d->setToolTip(tr("Generate one synthetic CT section with labelled structures"));
    file->addSeparator();
    QAction* save_image = file->addAction(tr("&Save Image As…"), this, &MainWindow::saveImageAs);
    save_image->setShortcut(QKeySequence::SaveAs);
    QAction* save_labels = file->addAction(tr("Save Label &Map As…"), this, &MainWindow::saveLabelMapAs);
    QAction* open_descriptions = file->addAction(tr("Open Label &Descriptions…"), this, [this] {
        const QString path = QFileDialog::getOpenFileName(
            this, tr("Open label descriptions"), QSettings().value(QStringLiteral("lastDirectory")).toString(),
            tr("Label descriptions (*.txt *.ctbl *.lut *.label);;All files (*)"));
        if (!path.isEmpty()) openLabelDescriptions(path);
    });
    open_descriptions->setToolTip(tr("Name and colour the labels from an ITK-SNAP label description file, a 3D Slicer or "
                                     "FreeSurfer colour table, or MRIcron's .txt / .lut"));
    QAction* save_descriptions = file->addAction(tr("Save Label D&escriptions As…"), this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, tr("Save label descriptions"), QString(),
                                                          tr("ITK-SNAP label descriptions (*.txt)"));
        if (!path.isEmpty()) saveLabelDescriptions(path);
    });
    save_descriptions->setToolTip(tr("Save the legend's names and colours as an ITK-SNAP label description file"));
    QAction* close_labels = file->addAction(tr("&Close Label Map"), this, [this] { m_model->clearLabelMap(); });
    file->addSeparator();
    QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);
    for (QAction* action : {save_image, save_labels, close_labels, open_descriptions, save_descriptions}) action->setEnabled(false);
    connect(m_model, &ViewerModel::volumeChanged, this, [this, save_image] { save_image->setEnabled(m_model->hasVolume() && !m_model->isStreamed()); });
    connect(m_model, &ViewerModel::labelMapChanged, this, [this, save_labels, close_labels, open_descriptions, save_descriptions] {
        for (QAction* action : {close_labels, open_descriptions, save_descriptions}) action->setEnabled(m_model->labelMap() != nullptr);
        save_labels->setEnabled(m_model->labelMap() != nullptr && !m_model->isStreamed());  // a streamed image's labels are never held whole
    });

    QMenu* view = menuBar()->addMenu(tr("&View"));
    QAction* toggle_labels = view->addAction(tr("Show &Label Overlay"));
    toggle_labels->setCheckable(true);
    toggle_labels->setChecked(true);
    toggle_labels->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_T));
    double remembered_opacity = 0.5;
    connect(toggle_labels, &QAction::toggled, this, [this, remembered_opacity](bool shown) mutable {
        if (!shown) remembered_opacity = m_model->labelOpacity();
        m_model->setLabelOpacity(shown ? remembered_opacity : 0.0);
    });
    QAction* outline = view->addAction(tr("&Outline Labels Only"));
    outline->setCheckable(true);
    outline->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_U));
    connect(outline, &QAction::toggled, m_model, &ViewerModel::setOutlineOnly);
    connect(m_model, &ViewerModel::labelDisplayChanged, outline, [this, outline] {
        const QSignalBlocker block(outline);
        outline->setChecked(m_model->outlineOnly());
    });
    QAction* reset = view->addAction(tr("&Reset Views"), this, [this] {
        for (SliceView* slice_view : m_slice_views) slice_view->resetView();
    });
    reset->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_0));
    QAction* reset_layout = view->addAction(tr("Reset &Layout"), this, &MainWindow::resetLayout);
    reset_layout->setObjectName(QStringLiteral("resetLayoutAction"));
    reset_layout->setToolTip(tr("Every dock back where a first start puts it, at its first size"));
    QMenu* presets = view->addMenu(tr("&Window Presets"));
    const auto preset_list = windowLevelPresets();
    for (std::size_t p = 0; p < preset_list.size(); ++p) {
        QAction* action = presets->addAction(preset_list[p].name, this, [this, p] { onPresetChosen(static_cast<int>(p)); });
        action->setShortcut(QKeySequence(Qt::ALT | static_cast<Qt::Key>(Qt::Key_1 + static_cast<int>(p))));
    }
    view->addSeparator();
    for (QDockWidget* dock : findChildren<QDockWidget*>()) view->addAction(dock->toggleViewAction());

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&About Tessera"), this, [this] {
        QMessageBox::about(this, tr("About Tessera"),
                           tr("<b>Tessera</b> %1<br>A studio for spatially partitioned training of convolutional "
                              "networks.<br><br>Slice views: left click moves the cursor, right drag sets "
                              "window/level, the wheel walks slices, Ctrl+wheel zooms, middle drag pans.")
                               .arg(QApplication::applicationVersion()));
    });

    toolbar->addAction(open);
    toolbar->addAction(open_labels);
    toolbar->addSeparator();
    toolbar->addAction(phantom_3d);
    rebuildRecentMenu();
}

void MainWindow::createDock() {
    auto* panel = new QWidget;
    auto* layout = new QVBoxLayout(panel);

    auto* image_group = new QGroupBox(tr("Image"), panel);
    auto* image_form = new QFormLayout(image_group);
    m_image_info = new QLabel(image_group);
    m_image_info->setWordWrap(true);
    m_image_info->setTextInteractionFlags(Qt::TextSelectableByMouse);
    image_form->addRow(m_image_info);
    m_preset_box = new QComboBox(image_group);
    for (const WindowLevelPreset& preset : windowLevelPresets()) m_preset_box->addItem(preset.name);
    m_preset_box->setToolTip(tr("Display window presets: CT soft tissue, bone, lung, brain, or MRI auto from "
                                "the 0.5–99.5 percentiles (Alt+1…5)"));
    connect(m_preset_box, &QComboBox::activated, this, &MainWindow::onPresetChosen);
    m_window_box = new QDoubleSpinBox(image_group);
    m_level_box = new QDoubleSpinBox(image_group);
    for (QDoubleSpinBox* box : {m_window_box, m_level_box}) {
        box->setRange(-1e7, 1e7);
        box->setDecimals(1);
        box->setKeyboardTracking(false);
    }
    m_window_box->setMinimum(0.1);
    m_window_box->setToolTip(tr("Window width: the range of values spread from black to white"));
    m_level_box->setToolTip(tr("Window level: the value shown mid-grey"));
    image_form->addRow(tr("&Preset"), m_preset_box);
    image_form->addRow(tr("&Window"), m_window_box);
    image_form->addRow(tr("&Level"), m_level_box);
    auto apply_window = [this] { m_model->setWindowLevel({m_window_box->value(), m_level_box->value()}); };
    connect(m_window_box, &QDoubleSpinBox::valueChanged, this, apply_window);
    connect(m_level_box, &QDoubleSpinBox::valueChanged, this, apply_window);
    layout->addWidget(image_group);

    auto* label_group = new QGroupBox(tr("Label overlay"), panel);
    auto* label_layout = new QVBoxLayout(label_group);
    m_legend = new LabelLegend(m_model, label_group);
    label_layout->addWidget(m_legend);
    layout->addWidget(label_group, 1);

    addDockWidget(Qt::RightDockWidgetArea, makeDock(tr("Image and Labels"), QStringLiteral("imageDock"), panel, true));
}

void MainWindow::showError(const QString& title, const QString& message) {
    m_last_error = message;
    showMessageBox(QMessageBox::Critical, title, message);
}

void MainWindow::showWarning(const QString& title, const QString& message) {
    m_last_warning = message;
    showMessageBox(QMessageBox::Warning, title, message);
}

void MainWindow::showMessageBox(int icon, const QString& title, const QString& message) {
    statusBar()->showMessage(title + QStringLiteral(": ") + message, 10000);
    // Window-modal and non-blocking: the user reads it, nothing waits on it.
    auto* box = new QMessageBox(static_cast<QMessageBox::Icon>(icon), title, message, QMessageBox::Ok, this);
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->open();
}

namespace {

// "file.nii.gz: 12 voxels are NaN or infinite …" — what a reader let through, one line each.
QString warningText(const QString& path, const std::vector<std::string>& warnings) {
    QStringList lines;
    for (const std::string& warning : warnings) lines << QString::fromStdString(warning);
    return QFileInfo(path).fileName() + QStringLiteral(": ") + lines.join(QStringLiteral("; "));
}

}  // namespace

std::uint64_t MainWindow::wholeVolumeLimitBytes() {
    bool ok = false;
    const qulonglong set = qEnvironmentVariable("TESSERA_STUDIO_VOLUME_BYTES").toULongLong(&ok);
    return ok && set > 0 ? set : tessera::max_volume_bytes() / 4;
}

std::int64_t MainWindow::overviewVoxelLimit() {
    bool ok = false;
    const qlonglong set = qEnvironmentVariable("TESSERA_OVERVIEW_VOXELS").toLongLong(&ok);
    return ok && set > 0 ? set : std::int64_t{1} << 24;
}

bool MainWindow::openImage(const QString& path) {
    QApplication::setOverrideCursor(Qt::WaitCursor);
    try {
        if (tessera::can_read_by_region(toPath(path))) {
            // Its header says how large it is: too large to hold, it is shown by region. A file the
            // region reader refuses goes on to the whole read, whose message is the one users know.
            std::shared_ptr<const tessera::VolumeRegionReader> reader;
            try {
                reader = tessera::open_region_reader(toPath(path), tessera::overview_pass_chunk_cache_bytes);
            } catch (const tessera::Error&) {
            }
            if (reader && static_cast<double>(reader->geometry().num_voxels()) * sizeof(float) > static_cast<double>(wholeVolumeLimitBytes())) {
                QApplication::restoreOverrideCursor();
                return showStreamed(std::move(reader), path);
            }
        }
        std::string series;  // a DICOM folder with several series: the one chosen in the browser
        if (tessera::detect_volume_format(toPath(path)) == tessera::VolumeFormat::DicomSeries) {
            std::vector<tessera::DicomSeriesInfo> found = tessera::list_dicom_series(toPath(path));
            if (found.size() > 1) {
                QApplication::restoreOverrideCursor();
                DicomSeriesBrowser browser(std::move(found), path, this);
                if (browser.exec() != QDialog::Accepted) return false;
                series = browser.chosenSeries();
                QApplication::setOverrideCursor(Qt::WaitCursor);
            }
        }
        auto volume = std::make_shared<tessera::Volume>(series.empty() ? tessera::read_volume(toPath(path))
                                                                        : tessera::read_dicom_series(toPath(path), series));
        QApplication::restoreOverrideCursor();
        m_last_warning.clear();
        const std::vector<std::string> warnings = volume->warnings;
        showVolume(std::move(volume), nullptr);
        addRecentFile(path);
        if (!warnings.empty()) showWarning(tr("Opened with warnings"), warningText(path, warnings));
        return true;
    } catch (const std::exception& error) {
        QApplication::restoreOverrideCursor();
        showError(tr("Cannot open image"), QString::fromStdString(error.what()));
        return false;
    }
}

bool MainWindow::openImageByRegion(const QString& path) {
    std::shared_ptr<const tessera::VolumeRegionReader> reader;
    try {
        reader = tessera::open_region_reader(toPath(path), tessera::overview_pass_chunk_cache_bytes);
    } catch (const std::exception& error) {
        showError(tr("Cannot open image by region"), QString::fromStdString(error.what()));
        return false;
    }
    return showStreamed(std::move(reader), path);
}

// A pass over a whole file (minutes for tens of gigabytes) runs on a worker thread behind a dialog
// that shows how far it is and can stop it. `pass` reports its fraction done through the function it is
// given and stops when that returns false (Cancel). Returns the error message ("" when none).
std::string MainWindow::runWithProgress(const QString& title, const QString& text,
                                        const std::function<void(const std::function<bool(double)>&)>& pass) {
    QProgressDialog progress(text, tr("Cancel"), 0, 1000, this);
    progress.setWindowTitle(title);
    progress.setWindowModality(Qt::WindowModal);
    progress.setMinimumDuration(300);
    std::atomic<int> permille{0};
    std::atomic<bool> stop{false};
    std::atomic<bool> finished{false};
    std::string error;
    std::thread worker([&] {
        scheduleThisThreadAsBatch();
        try {
            pass([&](double fraction) {
                permille = static_cast<int>(fraction * 1000.0);
                return !stop.load();
            });
        } catch (const std::exception& exception) {
            error = exception.what();
        }
        finished = true;
    });
    QEventLoop loop;
    QTimer poll;
    connect(&poll, &QTimer::timeout, &loop, [&] {
        if (progress.wasCanceled()) stop = true;
        if (finished) {
            loop.quit();
            return;
        }
        progress.setValue(permille.load());
    });
    poll.start(50);
    loop.exec();
    worker.join();
    progress.reset();
    return error;
}

// Slices are read through a reader with the viewer's chunk cache; the overview pass's reader is closed
// first (see overview_pass_chunk_cache_bytes).
std::shared_ptr<const tessera::VolumeRegionReader> MainWindow::reopenForViewing(std::shared_ptr<const tessera::VolumeRegionReader> pass_reader) {
    const std::filesystem::path source = pass_reader->source_path();
    pass_reader.reset();
    return tessera::open_region_reader(source, tessera::viewer_chunk_cache_bytes);
}

bool MainWindow::showStreamed(std::shared_ptr<const tessera::VolumeRegionReader> reader, const QString& path) {
    const QString name = QFileInfo(path).fileName();
    std::optional<tessera::VolumeOverview> overview;
    const std::int64_t limit = overviewVoxelLimit();
    // An overview read before from the same file comes from the cache; a new one goes there.
    const tessera::OverviewCache cache(tessera::OverviewCache::default_folder());
    overview = cache.find_image(*reader, limit);
    const bool from_cache = overview.has_value();
    const std::string error =
        from_cache ? std::string()
                   : runWithProgress(tr("Opening by region"),
                                     tr("Reading an overview of %1 (%2)…").arg(name, QString::fromStdString(tessera::describe(reader->geometry()))),
                                     [&](const std::function<bool(double)>& progress) {
                                         overview = tessera::read_overview(*reader, limit, progress);
                                         if (overview) cache.store_image(*reader, limit, *overview);
                                     });
    if (!error.empty()) {
        showError(tr("Cannot open image by region"), QString::fromStdString(error));
        return false;
    }
    if (!overview) {
        statusBar()->showMessage(tr("Opening %1 cancelled").arg(name), 5000);
        return false;
    }
    m_last_warning.clear();
    if (overview->num_non_finite > 0) {
        showWarning(tr("Opened with warnings"), tr("%1: %2 voxels are NaN or infinite (left out of the overview)").arg(name).arg(overview->num_non_finite));
    }
    try {
        reader = reopenForViewing(std::move(reader));
    } catch (const std::exception& reopen_error) {
        showError(tr("Cannot open image by region"), QString::fromStdString(reopen_error.what()));
        return false;
    }
    auto full = m_model->makeStreamedVolume(std::move(reader), *overview);
    m_model->setStreamedVolume(std::make_shared<tessera::Volume>(std::move(overview->volume)), std::move(full));
    m_legend->setLabelNames({});
    addRecentFile(path);
    if (from_cache) statusBar()->showMessage(tr("%1: overview from the cache (%2)").arg(name, QString::fromStdString(cache.folder().string())), 8000);
    return true;
}

// Labels of an image read by region are read by region too: one pass builds their overview (each
// block's most frequent label, for the 3D surfaces and the slices until their own labels are read) and
// lists every label present.
bool MainWindow::openStreamedLabels(const QString& path) {
    const QString name = QFileInfo(path).fileName();
    try {
        const auto& streamed = m_model->streamed();
        TESSERA_CHECK(tessera::can_read_by_region(toPath(path)),
                      "cannot show " << toPath(path) << " on " << streamed->sourcePath()
                                     << ": that image is read by region (too large to hold), so its label map must be read by region too — an HDF5 "
                                        "dataset (file.h5:/volumes/labels/…) or an uncompressed .nii on the same grid. tessera-cli convert writes either");
        std::shared_ptr<const tessera::VolumeRegionReader> reader = tessera::open_region_reader(toPath(path), tessera::overview_pass_chunk_cache_bytes);
        tessera::check_same_grid(streamed->geometry(), reader->geometry(), reader->source_path());  // before the pass
        const tessera::OverviewCache cache(tessera::OverviewCache::default_folder());
        const auto factor = streamed->overviewFactor();
        std::optional<tessera::LabelOverview> overview = cache.find_labels(*reader, factor);
        const bool from_cache = overview.has_value();
        const std::string error =
            from_cache ? std::string()
                       : runWithProgress(tr("Opening labels by region"),
                                         tr("Reading the labels of %1 (%2)…").arg(name, QString::fromStdString(tessera::describe(reader->geometry()))),
                                         [&](const std::function<bool(double)>& progress) {
                                             overview = tessera::read_label_overview(*reader, factor, progress);
                                             if (overview) cache.store_labels(*reader, factor, *overview);
                                         });
        if (!error.empty()) {
            showError(tr("Cannot open label map"), QString::fromStdString(error));
            return false;
        }
        if (!overview) {
            statusBar()->showMessage(tr("Opening %1 cancelled").arg(name), 5000);
            return false;
        }
        reader = reopenForViewing(std::move(reader));
        m_model->setStreamedLabels(std::make_shared<tessera::LabelMap>(std::move(overview->labels)), std::move(reader), overview->present_labels);
        m_legend->setLabelNames({});
        updateStatus();
        if (from_cache) statusBar()->showMessage(tr("%1: label overview from the cache (%2)").arg(name, QString::fromStdString(cache.folder().string())), 8000);
        return true;
    } catch (const std::exception& error) {
        showError(tr("Cannot open label map"), QString::fromStdString(error.what()));
        return false;
    }
}

bool MainWindow::openLabelMap(const QString& path) {
    if (!m_model->hasVolume()) {
        showError(tr("Cannot open label map"), tr("Open an image first: a label map is shown on the image's grid."));
        return false;
    }
    if (m_model->isStreamed()) return openStreamedLabels(path);
    QApplication::setOverrideCursor(Qt::WaitCursor);
    try {
        auto labels = std::make_shared<tessera::LabelMap>(tessera::read_label_map(toPath(path)));
        const std::vector<std::string> warnings = labels->warnings;
        // Names and colours the file gives its labels (a .seg.nrrd's segments) go to the legend and overlay.
        // Set after the label map, which refuses another grid: a refused file changes nothing.
        const std::vector<tessera::LabelDescription> descriptions = labels->descriptions;
        m_model->setLabelMap(std::move(labels));
        applyLabelDescriptions(descriptions);
        QApplication::restoreOverrideCursor();
        if (!warnings.empty()) showWarning(tr("Opened with warnings"), warningText(path, warnings));
        return true;
    } catch (const std::exception& error) {
        QApplication::restoreOverrideCursor();
        showError(tr("Cannot open label map"), QString::fromStdString(error.what()));
        return false;
    }
}

// Names and colours a file gives the labels (a .seg.nrrd's segments, an atlas's sidecars, a label
// description file) go to the legend, the overlay and the status bar; labels it does not name keep
// "Label N".
void MainWindow::applyLabelDescriptions(const std::vector<tessera::LabelDescription>& descriptions) {
    std::map<std::int32_t, QString> names;
    for (const tessera::LabelDescription& description : descriptions) {
        if (!description.name.empty()) names[description.value] = QString::fromStdString(description.name);
        if (const auto& rgb = description.color) m_model->setLabelColor(description.value, QColor::fromRgbF((*rgb)[0], (*rgb)[1], (*rgb)[2]));
    }
    m_legend->setLabelNames(std::move(names));
    updateStatus();  // the status bar names the label under the cursor
}

bool MainWindow::openLabelDescriptions(const QString& path) {
    if (!m_model->labelMap()) {
        showError(tr("Cannot open label descriptions"), tr("Open a label map first: the descriptions name its labels."));
        return false;
    }
    try {
        applyLabelDescriptions(tessera::read_label_descriptions(toPath(path)));
        return true;
    } catch (const std::exception& error) {
        showError(tr("Cannot open label descriptions"), QString::fromStdString(error.what()));
        return false;
    }
}

std::vector<tessera::LabelDescription> MainWindow::legendDescriptions() const {
    std::vector<tessera::LabelDescription> legend;
    for (std::int32_t label : m_model->presentLabels()) {
        const QColor color = m_model->labelColor(label);
        legend.push_back({label, m_legend->labelName(label).toStdString(),
                          std::array<float, 3>{static_cast<float>(color.redF()), static_cast<float>(color.greenF()), static_cast<float>(color.blueF())}});
    }
    return legend;
}

bool MainWindow::saveLabelDescriptions(const QString& path) {
    try {
        tessera::write_itksnap_label_descriptions(legendDescriptions(), toPath(path));
        return true;
    } catch (const std::exception& error) {
        showError(tr("Cannot save label descriptions"), QString::fromStdString(error.what()));
        return false;
    }
}

void MainWindow::showPhantom(bool two_dimensional) {
    tessera::PhantomOptions options;
    if (two_dimensional) options.size = {256, 256, 1};
    tessera::Phantom phantom = tessera::make_ct_phantom(options);
    std::map<std::int32_t, QString> names;
    const auto& label_names = tessera::phantom_label_names();
    for (std::size_t label = 1; label < label_names.size(); ++label) {
        names[static_cast<std::int32_t>(label)] = QString::fromStdString(label_names[label]);
    }
    showVolume(std::make_shared<tessera::Volume>(std::move(phantom.volume)),
               std::make_shared<tessera::LabelMap>(std::move(phantom.labels)), std::move(names));
}

void MainWindow::showVolume(std::shared_ptr<const tessera::Volume> volume,
                            std::shared_ptr<const tessera::LabelMap> labels, std::map<std::int32_t, QString> label_names) {
    m_model->setVolume(std::move(volume));
    m_legend->setLabelNames(std::move(label_names));
    if (labels) m_model->setLabelMap(std::move(labels));
}

void MainWindow::chooseImage() {
    QSettings settings;
    const QString path = QFileDialog::getOpenFileName(this, tr("Open image"),
                                                      settings.value(QStringLiteral("lastDirectory")).toString(), image_filter);
    if (path.isEmpty()) return;
    settings.setValue(QStringLiteral("lastDirectory"), QFileInfo(path).absolutePath());
    openImage(path);
}

void MainWindow::chooseLabelMap() {
    QSettings settings;
    const QString path = QFileDialog::getOpenFileName(this, tr("Open label map"),
                                                      settings.value(QStringLiteral("lastDirectory")).toString(), image_filter);
    if (!path.isEmpty()) openLabelMap(path);
}

void MainWindow::saveImageAs() {
    if (!m_model->hasVolume()) return;
    if (m_model->isStreamed()) {
        showError(tr("Cannot save image"), tr("This image is read by region (%1): it is never held whole, so the studio cannot write it "
                                              "in another format. Its file is unchanged.")
                                               .arg(QString::fromStdString(tessera::describe(m_model->geometry()))));
        return;
    }
    const QString path = QFileDialog::getSaveFileName(this, tr("Save image"), QString(),
                                                      tr("NIfTI (*.nii.gz *.nii);;MetaImage (*.mha *.mhd);;NRRD (*.nrrd *.nhdr);;FreeSurfer MGH (*.mgz *.mgh)"));
    if (path.isEmpty()) return;
    try {
        tessera::write_volume(*m_model->volume(), toPath(path));
        statusBar()->showMessage(tr("Saved %1").arg(path), 5000);
    } catch (const std::exception& error) {
        showError(tr("Cannot save image"), QString::fromStdString(error.what()));
    }
}

void MainWindow::saveLabelMapAs() {
    if (!m_model->labelMap()) return;
    const QString path = QFileDialog::getSaveFileName(
        this, tr("Save label map"), QString(),
        tr("NIfTI (*.nii.gz *.nii);;MetaImage (*.mha *.mhd);;3D Slicer segmentation (*.seg.nrrd);;NRRD (*.nrrd *.nhdr);;FreeSurfer MGH (*.mgz *.mgh)"));
    if (!path.isEmpty()) saveLabelMap(path);
}

bool MainWindow::saveLabelMap(const QString& path) {
    if (!m_model->labelMap()) return false;
    try {
        // labelMap() is the overview's then: writing it would pass a summary off as the labels.
        TESSERA_CHECK(!m_model->isStreamed(), "the label map is read by region (" << m_model->streamed()->sourcePath()
                                                                                   << "): the studio never holds it whole, so it cannot write it; its file is unchanged");
        // The legend's names and colours go with the labels where the format keeps them (NRRD, .seg.nrrd).
        tessera::LabelMap labels = *m_model->labelMap();
        labels.descriptions = legendDescriptions();
        tessera::write_label_map(labels, toPath(path));
        statusBar()->showMessage(tr("Saved %1").arg(path), 5000);
        return true;
    } catch (const std::exception& error) {
        showError(tr("Cannot save label map"), QString::fromStdString(error.what()));
        return false;
    }
}

void MainWindow::onVolumeChanged() {
    const bool has_volume = m_model->hasVolume();
    for (std::size_t v = 0; v < 3; ++v) {
        QScrollBar* bar = m_slice_bars[v];
        const QSignalBlocker block(bar);
        bar->setRange(0, static_cast<int>(std::max<std::int64_t>(m_slice_views[v]->numSlices() - 1, 0)));
        bar->setValue(static_cast<int>(m_slice_views[v]->sliceIndex()));
        bar->setEnabled(has_volume);
    }
    if (!has_volume) {
        m_image_info->setText(tr("No image. Open one with File ▸ Open Image, drop a file here, or generate a "
                                 "phantom."));
        setWindowTitle(tr("Tessera"));
        setLayoutFor2d(false);
        return;
    }
    const tessera::Volume& volume = *m_model->volume();
    const auto& geometry = m_model->geometry();
    // An HDF5 dataset is named by its file and its path inside ("em.h5:/volumes/raw"), not the path's last part.
    const auto hdf5 = tessera::parse_hdf5_name(volume.source_path);
    const QString name = hdf5 ? QString::fromStdString(hdf5->file.filename().string() + ":" + hdf5->dataset)
                              : QFileInfo(QString::fromStdString(volume.source_path)).fileName();
    setWindowTitle(tr("%1 — Tessera").arg(name.isEmpty() ? QString::fromStdString(volume.source_path) : name));
    m_image_info->setText(tr("<b>%1</b><br>%2 × %3 × %4 voxels<br>spacing %5 mm<br>origin %6 mm<br>%7, values %8 … %9")
                              .arg(name.toHtmlEscaped())
                              .arg(geometry.size[0])
                              .arg(geometry.size[1])
                              .arg(geometry.size[2])
                              .arg(formatTriple(geometry.spacing, 3))
                              .arg(formatTriple(geometry.origin, 1))
                              .arg(QString::fromStdString(volume.source_scalar_type))
                              .arg(m_model->minimumValue(), 0, 'g', 5)
                              .arg(m_model->maximumValue(), 0, 'g', 5));
    if (const auto& streamed = m_model->streamed()) {
        const auto factor = streamed->overviewFactor();
        const auto& overview = volume.geometry.size;
        m_image_info->setText(m_image_info->text() +
                              tr("<br><span style='color:#c87800'>read by region · overview %1 × %2 × %3 (1:%4)</span>")
                                  .arg(overview[0])
                                  .arg(overview[1])
                                  .arg(overview[2])
                                  .arg(*std::max_element(factor.begin(), factor.end())));
    }
    m_image_info->setToolTip(QString::fromStdString(volume.source_path) +
                             (m_model->isStreamed() ? tr("\nToo large to hold: the 3D view shows a downsampled overview; each slice view "
                                                         "shows the overview's blocks until its full-resolution slice has been read.")
                                                    : QString()));
    setLayoutFor2d(geometry.is_2d());
    m_preset_box->setCurrentIndex(static_cast<int>(m_model->defaultPresetIndex()));
    m_hovered = {-1, -1, -1};
    onWindowLevelChanged();
    updateStatus();
}

void MainWindow::setLayoutFor2d(bool two_dimensional) {
    // A 2D image is one axial slice: the other views would show a line of pixels, so the axial view
    // takes the whole grid.
    m_view_grid->removeWidget(m_slice_panels[0]);
    m_view_grid->addWidget(m_slice_panels[0], 0, 0, two_dimensional ? 2 : 1, two_dimensional ? 2 : 1);
    m_slice_panels[1]->setVisible(!two_dimensional);
    m_slice_panels[2]->setVisible(!two_dimensional);
    m_volume_view->setVisible(!two_dimensional);
    m_slice_bars[0]->setVisible(!two_dimensional);
}

void MainWindow::onWindowLevelChanged() {
    const WindowLevel window = m_model->windowLevel();
    const QSignalBlocker block_window(m_window_box);
    const QSignalBlocker block_level(m_level_box);
    m_window_box->setValue(window.window);
    m_level_box->setValue(window.level);
}

void MainWindow::onPresetChosen(int index) {
    const auto presets = windowLevelPresets();
    if (index < 0 || index >= static_cast<int>(presets.size())) return;
    m_preset_box->setCurrentIndex(index);
    m_model->applyPreset(presets[static_cast<std::size_t>(index)]);
}

void MainWindow::onHoveredVoxel(std::array<std::int64_t, 3> voxel) {
    m_hovered = voxel;
    updateStatus();
}

QString MainWindow::statusText() const { return m_status->text(); }

void MainWindow::updateStatus() {
    if (!m_model->hasVolume()) {
        m_status->setText(tr("Ready"));
        return;
    }
    const tessera::Volume& volume = *m_model->volume();
    // The voxel under the mouse when there is one, else the cursor.
    const bool hovering = m_hovered[0] >= 0;
    const auto voxel = hovering ? m_hovered : m_model->cursor();
    const auto world = m_model->geometry().world_of(static_cast<double>(voxel[0]), static_cast<double>(voxel[1]),
                                                    static_cast<double>(voxel[2]));
    QString value;
    if (const auto& streamed = m_model->streamed()) {
        // A slice already read has the voxel's own value; else the overview's block mean, marked so.
        if (const auto exact = streamed->cachedValue(voxel)) {
            value = QString::number(*exact, 'g', 6);
        } else {
            const auto block = tessera::overview_voxel_of(voxel, streamed->overviewFactor());
            value = tr("≈%1 (overview)").arg(volume.value_at(std::min(block[0], volume.geometry.size[0] - 1),
                                                             std::min(block[1], volume.geometry.size[1] - 1),
                                                             std::min(block[2], volume.geometry.size[2] - 1)),
                                             0, 'g', 6);
        }
    } else {
        value = QString::number(volume.value_at(voxel[0], voxel[1], voxel[2]), 'g', 6);
    }
    QString text = tr("%1 voxel (%2, %3, %4) · world (%5) mm · value %6")
                       .arg(hovering ? tr("mouse") : tr("cursor"))
                       .arg(voxel[0])
                       .arg(voxel[1])
                       .arg(voxel[2])
                       .arg(formatTriple(world, 1))
                       .arg(value);
    if (const auto& labels = m_model->labelMap()) {
        std::int32_t label = 0;
        if (const auto& streamed = m_model->streamed()) {
            // The voxel's own label from a slice read, else its block's in the overview.
            const auto block = tessera::overview_voxel_of(voxel, streamed->overviewFactor());
            const auto& size = labels->geometry.size;
            label = streamed->cachedLabel(voxel).value_or(
                labels->label_at(std::min(block[0], size[0] - 1), std::min(block[1], size[1] - 1), std::min(block[2], size[2] - 1)));
        } else {
            label = labels->label_at(voxel[0], voxel[1], voxel[2]);
        }
        text += tr(" · label %1").arg(label == 0 ? tr("0 (background)") : tr("%1 (%2)").arg(label).arg(m_legend->labelName(label)));
    }
    m_status->setText(text);
}

void MainWindow::addRecentFile(const QString& path) {
    QSettings settings;
    QStringList recent = settings.value(QStringLiteral("recentImages")).toStringList();
    const QString absolute = QFileInfo(path).absoluteFilePath();
    recent.removeAll(absolute);
    recent.prepend(absolute);
    while (recent.size() > max_recent_files) recent.removeLast();
    settings.setValue(QStringLiteral("recentImages"), recent);
    rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
    m_recent_menu->clear();
    const QStringList recent = QSettings().value(QStringLiteral("recentImages")).toStringList();
    for (int r = 0; r < recent.size(); ++r) {
        const QString path = recent[r];
        QAction* action = m_recent_menu->addAction(QStringLiteral("&%1 %2").arg(r + 1).arg(QFileInfo(path).fileName()),
                                                   this, [this, path] { openImage(path); });
        action->setToolTip(path);
    }
    if (!recent.isEmpty()) {
        m_recent_menu->addSeparator();
        m_recent_menu->addAction(tr("Clear List"), this, [this] {
            QSettings().remove(QStringLiteral("recentImages"));
            rebuildRecentMenu();
        });
    }
    m_recent_menu->setEnabled(!recent.isEmpty());
}

void MainWindow::closeEvent(QCloseEvent* event) {
    if (!confirmDiscardDesign()) {
        event->ignore();
        return;
    }
    QSettings settings;
    settings.setValue(QStringLiteral("mainWindow/geometry"), saveGeometry());
    settings.setValue(QStringLiteral("mainWindow/state"), saveState());
    event->accept();
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
    if (event->mimeData()->hasUrls()) event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
    const QList<QUrl> urls = event->mimeData()->urls();
    if (urls.isEmpty() || !urls.front().isLocalFile()) return;
    event->acceptProposedAction();
    const QString path = urls.front().toLocalFile();
    // Two files dropped together: the image and its label map.
    if (urls.size() >= 2 && urls[1].isLocalFile()) {
        if (openImage(path)) openLabelMap(urls[1].toLocalFile());
        return;
    }
    if (!m_model->hasVolume()) {
        openImage(path);
        return;
    }
    QMessageBox question(QMessageBox::Question, tr("Open dropped file"),
                         tr("Open %1 as a new image or as a label map on the current image?").arg(QFileInfo(path).fileName()),
                         QMessageBox::Cancel, this);
    QPushButton* as_image = question.addButton(tr("New &Image"), QMessageBox::AcceptRole);
    QPushButton* as_labels = question.addButton(tr("&Label Map"), QMessageBox::AcceptRole);
    question.exec();
    if (question.clickedButton() == as_image) openImage(path);
    if (question.clickedButton() == as_labels) openLabelMap(path);
}

}  // namespace tessera::ui
