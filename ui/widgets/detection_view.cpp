#include "widgets/detection_view.hpp"

#include "core/error.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QMouseEvent>
#include <QPainter>
#include <QPixmap>
#include <QSlider>
#include <QSplitter>
#include <QToolButton>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

namespace tessera::ui {

namespace {

// A [C, H, W] f32 image (C = 1 or 3) as an RGB QImage, stretched from its minimum to its maximum — the
// rule the run's PNGs are written with, so a preview looks like the evaluation's image.
QImage toQImage(const Tensor& image) {
    const Tensor values = image.contiguous();
    const std::int64_t channels = values.dim(0), height = values.dim(1), width = values.dim(2);
    const float* data = values.data<float>();
    const std::int64_t count = values.num_elements();
    const auto [low, high] = std::minmax_element(data, data + count);
    const float lowest = *low, range = *high - *low;
    QImage result(static_cast<int>(width), static_cast<int>(height), QImage::Format_RGB32);
    const std::int64_t plane = height * width;
    for (std::int64_t y = 0; y < height; ++y) {
        auto* line = reinterpret_cast<QRgb*>(result.scanLine(static_cast<int>(y)));
        for (std::int64_t x = 0; x < width; ++x) {
            int rgb[3];
            for (int c = 0; c < 3; ++c) {
                const float v = data[(channels == 3 ? c : 0) * plane + y * width + x];
                rgb[c] = static_cast<int>(std::lround(range > 0 ? 255.0f * (v - lowest) / range : 0.0f));
            }
            line[x] = qRgb(rgb[0], rgb[1], rgb[2]);
        }
    }
    return result;
}

QIcon swatchIcon(const QColor& color) {
    QPixmap pixmap(12, 12);
    pixmap.fill(color);
    return QIcon(pixmap);
}

}  // namespace

// ---- DetectionView ------------------------------------------------------------------------------------------

DetectionView::DetectionView(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("detectionView"));
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(2, 2, 2, 2);

    auto* controls = new QHBoxLayout;
    m_previous = new QToolButton(this);
    m_previous->setArrowType(Qt::LeftArrow);
    m_previous->setToolTip(tr("Previous held-out image"));
    m_image_box = new QComboBox(this);
    m_image_box->setToolTip(tr("The held-out image shown"));
    m_image_box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_image_box->setMinimumContentsLength(14);  // "shapes_eval_12" whole
    m_next = new QToolButton(this);
    m_next->setArrowType(Qt::RightArrow);
    m_next->setToolTip(tr("Next held-out image"));
    controls->addWidget(m_previous);
    controls->addWidget(m_image_box);
    controls->addWidget(m_next);
    controls->addSpacing(12);
    controls->addWidget(new QLabel(tr("Score ≥"), this));
    m_score_slider = new QSlider(Qt::Horizontal, this);
    m_score_slider->setRange(0, 100);
    m_score_slider->setValue(30);
    m_score_slider->setMinimumWidth(120);
    m_score_slider->setToolTip(tr("Hide detections scoring below this. Matches stay as the evaluation made them (by score, per "
                                  "class); an object whose detection is hidden counts as missed."));
    m_score_value = new QLabel(QStringLiteral("0.30"), this);
    m_score_value->setMinimumWidth(32);
    controls->addWidget(m_score_slider);
    controls->addWidget(m_score_value);
    controls->addStretch(1);
    layout->addLayout(controls);
    // A second row: what is drawn and how, so the view stays narrow enough to share the window with docks.
    auto* drawing = new QHBoxLayout;
    m_truth_box = new QCheckBox(tr("Ground truth"), this);
    m_truth_box->setChecked(true);
    m_truth_box->setToolTip(tr("The objects, dashed"));
    m_detections_box = new QCheckBox(tr("Detections"), this);
    m_detections_box->setChecked(true);
    m_detections_box->setToolTip(tr("The detector's boxes after NMS, solid"));
    m_tags_box = new QCheckBox(tr("Scores"), this);
    m_tags_box->setChecked(true);
    m_tags_box->setToolTip(tr("Tag each detection with its class and score"));
    drawing->addWidget(m_truth_box);
    drawing->addWidget(m_detections_box);
    drawing->addWidget(m_tags_box);
    m_colouring_box = new QComboBox(this);
    m_colouring_box->addItem(tr("Colour by class"));
    m_colouring_box->addItem(tr("Colour by outcome"));
    m_colouring_box->setToolTip(tr("By outcome: green matched (IoU ≥ 0.5 with an object of its class), red false positive, orange "
                                   "a missed object"));
    drawing->addWidget(m_colouring_box);
    drawing->addSpacing(12);
    m_tiles_box = new QCheckBox(tr("Tiles"), this);
    m_tiles_box->setToolTip(tr("The partition grid: each core's tile of the input, and the anchor centres it owns at the level "
                               "chosen beside (the anchors whose targets and loss that core computes)"));
    m_level_box = new QComboBox(this);
    m_level_box->setToolTip(tr("The pyramid level whose anchor centres the tiles show"));
    m_level_box->setEnabled(false);
    m_level_box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_level_box->setMinimumContentsLength(12);  // "P3 (stride 8)"
    drawing->addWidget(m_tiles_box);
    drawing->addWidget(m_level_box);
    drawing->addStretch(1);
    layout->addLayout(drawing);

    auto* splitter = new QSplitter(Qt::Horizontal, this);
    m_canvas = new DetectionCanvas(this, splitter);
    auto* side = new QWidget(splitter);
    auto* side_layout = new QVBoxLayout(side);
    side_layout->setContentsMargins(0, 0, 0, 0);
    side_layout->addWidget(new QLabel(tr("Classes"), side));
    m_class_list = new QListWidget(side);
    m_class_list->setToolTip(tr("Untick a class to hide its objects and detections"));
    // Wide enough for a class's counts ("triangle — 12 objects, 100 detections") beside its check box.
    m_class_list->setMinimumWidth(m_class_list->fontMetrics().horizontalAdvance(tr("triangle — 12 objects, 100 detections")) + 48);
    side_layout->addWidget(m_class_list, 1);
    m_legend = new QLabel(side);
    m_legend->setWordWrap(true);
    side_layout->addWidget(m_legend);
    splitter->addWidget(m_canvas);
    splitter->addWidget(side);
    splitter->setStretchFactor(0, 1);
    splitter->setStretchFactor(1, 0);
    splitter->setSizes({800, 170});
    layout->addWidget(splitter, 1);
    m_summary = new QLabel(this);
    m_summary->setWordWrap(true);  // a long summary must not set the viewer's (and the window's) minimum width
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_summary);

    connect(m_image_box, &QComboBox::currentIndexChanged, this, &DetectionView::onImageChosen);
    connect(m_previous, &QToolButton::clicked, this, [this] { setImageIndex(m_image_index - 1); });
    connect(m_next, &QToolButton::clicked, this, [this] { setImageIndex(m_image_index + 1); });
    connect(m_score_slider, &QSlider::valueChanged, this, &DetectionView::onScoreMoved);
    connect(m_class_list, &QListWidget::itemChanged, this, &DetectionView::onClassItemChanged);
    for (QCheckBox* box : {m_truth_box, m_detections_box, m_tags_box, m_tiles_box}) {
        connect(box, &QCheckBox::toggled, this, &DetectionView::onControlsChanged);
    }
    connect(m_colouring_box, &QComboBox::currentIndexChanged, this, &DetectionView::onControlsChanged);
    connect(m_level_box, &QComboBox::currentIndexChanged, this, &DetectionView::onControlsChanged);
    clear();
}

bool DetectionView::showEvaluation(const std::filesystem::path& detections_file) {
    run::DetectionsFile file;
    try {
        file = run::read_detections_file(detections_file);
    } catch (const Error& error) {
        m_summary->setText(tr("Cannot show the detections: %1").arg(QString::fromUtf8(error.what())));
        return false;
    }
    const QString previous_name =
        m_file && m_image_index < static_cast<int>(m_file->images.size()) ? QString::fromStdString(m_file->images[static_cast<std::size_t>(m_image_index)].name)
                                                                           : QString();
    const bool first_evaluation = !hasEvaluation();
    m_file = std::move(file);
    m_is_preview = false;
    if (first_evaluation) {
        // Start at the post-processing's own threshold when it is visible on the slider, else at 0.3.
        const double start = m_file->score_threshold >= 0.1 ? m_file->score_threshold : 0.3;
        const QSignalBlocker block(m_score_slider);
        m_score_slider->setValue(static_cast<int>(std::lround(start * 100)));
        m_score_value->setText(QString::number(start, 'f', 2));
    }
    int index = 0;
    for (std::size_t i = 0; i < m_file->images.size(); ++i) {
        if (QString::fromStdString(m_file->images[i].name) == previous_name) index = static_cast<int>(i);
    }
    {
        const QSignalBlocker block(m_image_box);
        m_image_box->clear();
        for (const run::DetectionsFileImage& image : m_file->images) m_image_box->addItem(QString::fromStdString(image.name));
    }
    rebuildClassList();
    m_image_index = -1;
    setImageIndex(index);
    return true;
}

void DetectionView::showPreview(const data::Example& example, std::vector<std::string> class_names) {
    run::DetectionsFile file;
    file.classes = std::move(class_names);
    run::DetectionsFileImage image;
    image.name = example.name;
    image.height = example.image.dim(1);
    image.width = example.image.dim(2);
    for (const detection::LabeledBox& object : example.objects) image.ground_truth.push_back({object.box, object.class_id, false});
    file.images.push_back(std::move(image));
    m_preview = toQImage(example.image);
    m_file = std::move(file);
    m_is_preview = true;
    {
        const QSignalBlocker block(m_image_box);
        m_image_box->clear();
        m_image_box->addItem(tr("%1 (preview: no evaluation yet)").arg(QString::fromStdString(example.name)));
    }
    rebuildClassList();
    m_image_index = -1;
    setImageIndex(0);
}

void DetectionView::setPartition(const partition::SpatialGrid& grid, detection::AnchorSet anchors) {
    m_grid = grid;
    m_anchors = std::move(anchors);
    const int previous_level = m_level_box->currentData().toInt();
    {
        const QSignalBlocker block(m_level_box);
        m_level_box->clear();
        m_level_box->addItem(tr("tiles only"), 0);
        for (const detection::LevelAnchors& level : m_anchors.levels) {
            m_level_box->addItem(tr("P%1 (stride %2)").arg(level.level).arg(level.stride), level.level);
        }
        const int found = m_level_box->findData(previous_level);
        m_level_box->setCurrentIndex(found >= 0 ? found : std::min(1, m_level_box->count() - 1));
    }
    updateTiles();
}

void DetectionView::clear() {
    m_file.reset();
    m_is_preview = false;
    m_preview = QImage();
    m_image = QImage();
    m_image_index = 0;
    m_shown = {};
    {
        const QSignalBlocker block(m_image_box);
        m_image_box->clear();
    }
    m_class_list->clear();
    m_class_shown.clear();
    m_summary->setText(tr("No detections yet: open a RetinaNet experiment to preview its data, train it (Run dock) or open "
                          "a detector's run to see its boxes."));
    updateShown();
}

void DetectionView::setImageIndex(int index) {
    if (!m_file || m_file->images.empty()) return;
    index = std::clamp(index, 0, static_cast<int>(m_file->images.size()) - 1);
    if (index == m_image_index) return;
    m_image_index = index;
    {
        const QSignalBlocker block(m_image_box);
        m_image_box->setCurrentIndex(index);
    }
    m_previous->setEnabled(index > 0);
    m_next->setEnabled(index + 1 < static_cast<int>(m_file->images.size()));
    loadImage();
    updateShown();
    emit imageChanged(index);
}

double DetectionView::minimumScore() const { return m_score_slider->value() / 100.0; }

void DetectionView::setMinimumScore(double score) { m_score_slider->setValue(static_cast<int>(std::lround(std::clamp(score, 0.0, 1.0) * 100))); }

void DetectionView::setClassShown(std::int32_t class_id, bool shown) {
    if (class_id < 0 || class_id >= m_class_list->count()) return;
    m_class_list->item(class_id)->setCheckState(shown ? Qt::Checked : Qt::Unchecked);
}

void DetectionView::setColouring(BoxColouring colouring) { m_colouring_box->setCurrentIndex(colouring == BoxColouring::ByClass ? 0 : 1); }

void DetectionView::setTilesShown(bool shown) { m_tiles_box->setChecked(shown); }

void DetectionView::setAnchorLevel(int level) {
    const int found = m_level_box->findData(level);
    if (found >= 0) m_level_box->setCurrentIndex(found);
}

void DetectionView::onImageChosen(int index) { setImageIndex(index); }

void DetectionView::onScoreMoved(int value) {
    m_score_value->setText(QString::number(value / 100.0, 'f', 2));
    updateShown();
}

void DetectionView::onClassItemChanged(QListWidgetItem* item) {
    const int class_id = m_class_list->row(item);
    if (class_id < 0 || class_id >= static_cast<int>(m_class_shown.size())) return;
    m_class_shown[static_cast<std::size_t>(class_id)] = item->checkState() == Qt::Checked;
    updateShown();
}

void DetectionView::onControlsChanged() {
    m_level_box->setEnabled(m_tiles_box->isChecked());
    updateTiles();
    updateShown();
}

void DetectionView::loadImage() {
    m_image = QImage();
    if (!m_file) return;
    if (m_is_preview) {
        m_image = m_preview;
        return;
    }
    const run::DetectionsFileImage& image = m_file->images[static_cast<std::size_t>(m_image_index)];
    if (!m_image.load(QString::fromStdString(image.image_file.string()))) m_image = QImage();
    // A missing image (predictions not written, a file moved) leaves a grey canvas: the boxes still show.
}

void DetectionView::rebuildClassList() {
    const QSignalBlocker block(m_class_list);
    std::vector<bool> previous = m_class_shown;
    m_class_list->clear();
    m_class_shown.assign(m_file ? m_file->classes.size() : 0, true);
    for (std::size_t c = 0; c < m_class_shown.size(); ++c) {
        if (c < previous.size()) m_class_shown[c] = previous[c];
        auto* item = new QListWidgetItem(swatchIcon(DetectionPainter::classColor(static_cast<std::int32_t>(c))),
                                         QString::fromStdString(m_file->classes[c]), m_class_list);
        item->setFlags(Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemIsUserCheckable);
        item->setCheckState(m_class_shown[c] ? Qt::Checked : Qt::Unchecked);
    }
}

void DetectionView::updateTiles() {
    m_tiles.clear();
    if (m_tiles_box->isChecked() && !m_grid.boundaries.empty()) {
        // Level 0 ("tiles only") is no pyramid level: the tiles without centres.
        m_tiles = tileAnchors(m_grid, m_anchors, m_level_box->currentData().toInt());
    }
}

void DetectionView::updateShown() {
    m_style.show_ground_truth = m_truth_box->isChecked();
    m_style.show_detections = m_detections_box->isChecked();
    m_style.show_tags = m_tags_box->isChecked();
    m_style.colouring = m_colouring_box->currentIndex() == 1 ? BoxColouring::ByOutcome : BoxColouring::ByClass;
    m_style.class_names.clear();
    m_shown = {};
    if (m_file && !m_file->images.empty()) {
        for (const std::string& name : m_file->classes) m_style.class_names.push_back(QString::fromStdString(name));
        const run::DetectionsFileImage& image = m_file->images[static_cast<std::size_t>(std::max(m_image_index, 0))];
        m_shown = run::shown_detections(image, {.min_score = minimumScore(), .class_shown = m_class_shown});
        // Per class: objects and detections shown, beside its name.
        for (int c = 0; c < m_class_list->count(); ++c) {
            const auto count = [c](const std::vector<run::ShownBox>& boxes) {
                return std::count_if(boxes.begin(), boxes.end(), [c](const run::ShownBox& b) { return b.class_id == c; });
            };
            const std::int64_t objects = std::count_if(image.ground_truth.begin(), image.ground_truth.end(),
                                                       [c](const run::DetectionsFileTruth& t) { return t.class_id == c; });
            const QSignalBlocker block(m_class_list);
            const QString name = QString::fromStdString(m_file->classes[static_cast<std::size_t>(c)]);
            const auto detections = static_cast<std::int64_t>(count(m_shown.detections));
            const QString objects_text = objects == 1 ? tr("1 object") : tr("%1 objects").arg(objects);
            const QString detections_text = detections == 1 ? tr("1 detection") : tr("%1 detections").arg(detections);
            m_class_list->item(c)->setText(m_is_preview ? tr("%1 — %2").arg(name, objects_text)
                                                        : tr("%1 — %2, %3").arg(name, objects_text, detections_text));
        }
    }
    m_legend->setText(m_style.colouring == BoxColouring::ByOutcome
                          ? tr("<span style='color:#28c846'>■</span> matched / found<br><span style='color:#eb2828'>■</span> false "
                               "positive<br><span style='color:#ff9600'>■</span> missed<br>dashed: ground truth")
                          : tr("solid: detections<br>dashed: ground truth"));
    if (m_file) m_summary->setText(summaryText());
    m_canvas->update();
}

QString DetectionView::summaryText() const {
    if (!m_file || m_file->images.empty()) return {};
    const run::DetectionsFileImage& image = m_file->images[static_cast<std::size_t>(std::max(m_image_index, 0))];
    if (m_is_preview) {
        return tr("%1: %2 objects, %3×%4 pixels. The boxes are the data's ground truth; detections appear after the first "
                  "evaluation.")
            .arg(QString::fromStdString(image.name))
            .arg(m_shown.ground_truth.size())
            .arg(image.width)
            .arg(image.height);
    }
    const std::size_t detections = m_shown.detections.size();
    const auto false_positives = static_cast<std::int64_t>(m_shown.num_false_positives);
    return tr("Step %1 · image %2 of %3 · %4 with score ≥ %5: %6 matched, %7 · %8 of %9 objects missed")
        .arg(m_file->step)
        .arg(m_image_index + 1)
        .arg(m_file->images.size())
        .arg(detections == 1 ? tr("1 detection") : tr("%1 detections").arg(detections))
        .arg(minimumScore(), 0, 'f', 2)
        .arg(m_shown.num_matched)
        .arg(false_positives == 1 ? tr("1 false positive") : tr("%1 false positives").arg(false_positives))
        .arg(m_shown.num_missed)
        .arg(m_shown.ground_truth.size());
}

QString DetectionView::statusText() const { return m_summary->text(); }

QImage DetectionView::render() const {
    QImage result(m_canvas->size().expandedTo(QSize(64, 64)), QImage::Format_RGB32);
    result.fill(m_canvas->palette().color(QPalette::Window));
    QPainter painter(&result);
    m_canvas->paintInto(painter, m_style);
    return result;
}

// ---- DetectionCanvas ----------------------------------------------------------------------------------------

DetectionCanvas::DetectionCanvas(const DetectionView* view, QWidget* parent) : QWidget(parent), m_view(view) {
    setMouseTracking(true);
    setMinimumSize(200, 200);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
}

DetectionFrame DetectionCanvas::frame() const {
    const run::DetectionsFile* file = m_view->detections();
    DetectionFrame result;
    if (file && !file->images.empty()) {
        const run::DetectionsFileImage& image = file->images[static_cast<std::size_t>(std::max(m_view->imageIndex(), 0))];
        result.image_width = image.width;
        result.image_height = image.height;
    }
    // Fitted, aspect kept, centred, with a small margin.
    const QRectF area = QRectF(rect()).adjusted(4, 4, -4, -4);
    const double scale = std::min(area.width() / static_cast<double>(result.image_width), area.height() / static_cast<double>(result.image_height));
    const QSizeF size(scale * static_cast<double>(result.image_width), scale * static_cast<double>(result.image_height));
    result.image_rect = QRectF(area.center() - QPointF(size.width() / 2, size.height() / 2), size);
    return result;
}

void DetectionCanvas::paintInto(QPainter& painter, const DetectionStyle& style) const {
    const run::DetectionsFile* file = m_view->detections();
    if (!file || file->images.empty()) {
        painter.setPen(palette().color(QPalette::PlaceholderText));
        painter.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap, tr("No detections to show"));
        return;
    }
    const DetectionFrame where = frame();
    painter.setRenderHint(QPainter::SmoothPixmapTransform, true);
    if (m_view->image().isNull()) {
        painter.fillRect(where.image_rect, QColor(60, 60, 60));
    } else {
        painter.drawImage(where.image_rect, m_view->image());
    }
    DetectionPainter::paintTiles(painter, where, m_view->shownTiles());
    DetectionPainter::paintBoxes(painter, where, m_view->shown(), style);
}

void DetectionCanvas::paintEvent(QPaintEvent*) {
    QPainter painter(this);
    DetectionStyle style = m_view->style();
    style.highlighted_detection = m_hovered_detection;
    style.highlighted_truth = m_hovered_truth;
    paintInto(painter, style);
}

QString DetectionCanvas::describeAt(QPointF position, std::int32_t* detection, std::int32_t* truth) const {
    if (detection) *detection = -1;
    if (truth) *truth = -1;
    const run::DetectionsFile* file = m_view->detections();
    if (!file) return {};
    const QPointF point = frame().toImage(position);
    const auto smallest = [&](const std::vector<run::ShownBox>& boxes) {
        std::int32_t best = -1;
        double best_area = 0;
        for (std::size_t k = 0; k < boxes.size(); ++k) {
            const detection::Box& b = boxes[k].box;
            if (point.x() < b.x_min || point.x() > b.x_max || point.y() < b.y_min || point.y() > b.y_max) continue;
            if (best < 0 || b.area() < best_area) {
                best = static_cast<std::int32_t>(k);
                best_area = b.area();
            }
        }
        return best;
    };
    const run::ShownDetections& shown = m_view->shown();
    const DetectionStyle& style = m_view->style();
    const std::int32_t d = style.show_detections ? smallest(shown.detections) : -1;
    const auto size_text = [](const detection::Box& b) {
        return QStringLiteral("[%1, %2, %3, %4], %5×%6 px")
            .arg(b.x_min, 0, 'f', 1)
            .arg(b.y_min, 0, 'f', 1)
            .arg(b.x_max, 0, 'f', 1)
            .arg(b.y_max, 0, 'f', 1)
            .arg(b.width(), 0, 'f', 0)
            .arg(b.height(), 0, 'f', 0);
    };
    if (d >= 0) {
        if (detection) *detection = d;
        const run::ShownBox& box = shown.detections[static_cast<std::size_t>(d)];
        QString text = tr("<b>%1</b> detection, score %2<br>%3<br>")
                           .arg(QString::fromStdString(file->class_name(box.class_id)).toHtmlEscaped())
                           .arg(box.score, 0, 'f', 3)
                           .arg(size_text(box.box));
        return text + (box.outcome == run::BoxOutcome::Matched ? tr("matched an object at IoU %1").arg(box.iou, 0, 'f', 2)
                                                               : tr("false positive: no object of its class left at IoU ≥ %1")
                                                                     .arg(file->match_iou_threshold, 0, 'f', 2));
    }
    const std::int32_t g = style.show_ground_truth ? smallest(shown.ground_truth) : -1;
    if (g < 0) return {};
    if (truth) *truth = g;
    const run::ShownBox& box = shown.ground_truth[static_cast<std::size_t>(g)];
    return tr("<b>%1</b> object<br>%2<br>%3")
        .arg(QString::fromStdString(file->class_name(box.class_id)).toHtmlEscaped())
        .arg(size_text(box.box))
        .arg(m_view->hasEvaluation() ? (box.outcome == run::BoxOutcome::Found ? tr("found by a shown detection") : tr("missed"))
                                     : tr("ground truth"));
}

void DetectionCanvas::mouseMoveEvent(QMouseEvent* event) {
    std::int32_t detection = -1, truth = -1;
    const QString text = describeAt(event->position(), &detection, &truth);
    if (detection != m_hovered_detection || truth != m_hovered_truth) {
        m_hovered_detection = detection;
        m_hovered_truth = truth;
        update();
    }
    if (text.isEmpty()) {
        QToolTip::hideText();
    } else {
        QToolTip::showText(event->globalPosition().toPoint(), text, this);
    }
}

void DetectionCanvas::leaveEvent(QEvent*) {
    m_hovered_detection = -1;
    m_hovered_truth = -1;
    update();
}

}  // namespace tessera::ui
