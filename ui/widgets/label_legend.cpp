#include "widgets/label_legend.hpp"

#include <QCheckBox>
#include <QColorDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPainter>
#include <QSlider>
#include <QTreeWidget>
#include <QVBoxLayout>

namespace tessera::ui {

namespace {
constexpr int label_role = Qt::UserRole + 1;

QIcon swatch(const QColor& color) {
    QPixmap pixmap(14, 14);
    pixmap.fill(color);
    QPainter painter(&pixmap);
    painter.setPen(Qt::black);
    painter.drawRect(0, 0, 13, 13);
    return QIcon(pixmap);
}
}  // namespace

LabelLegend::LabelLegend(ViewerModel* model, QWidget* parent) : QWidget(parent), m_model(model) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);

    m_list = new QTreeWidget(this);
    m_list->setHeaderLabels({tr("Label"), tr("Value")});
    m_list->setRootIsDecorated(false);
    m_list->header()->setSectionResizeMode(0, QHeaderView::Stretch);
    m_list->header()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
    m_list->setToolTip(tr("Labels in the label map: tick to show, double-click to change the colour"));
    layout->addWidget(m_list, 1);

    auto* opacity_row = new QHBoxLayout;
    auto* opacity_label = new QLabel(tr("Opacity"), this);
    m_opacity = new QSlider(Qt::Horizontal, this);
    m_opacity->setRange(0, 100);
    m_opacity->setValue(static_cast<int>(m_model->labelOpacity() * 100));
    m_opacity->setToolTip(tr("Opacity of the label overlay in the slice views"));
    opacity_label->setBuddy(m_opacity);
    opacity_row->addWidget(opacity_label);
    opacity_row->addWidget(m_opacity, 1);
    layout->addLayout(opacity_row);

    m_outline = new QCheckBox(tr("Outline only"), this);
    m_outline->setToolTip(tr("Draw only the borders of each label, leaving the image inside visible"));
    layout->addWidget(m_outline);

    connect(m_opacity, &QSlider::valueChanged, this, [this](int value) { m_model->setLabelOpacity(value / 100.0); });
    connect(m_outline, &QCheckBox::toggled, m_model, &ViewerModel::setOutlineOnly);
    connect(m_list, &QTreeWidget::itemChanged, this, &LabelLegend::onItemChanged);
    connect(m_list, &QTreeWidget::itemDoubleClicked, this, &LabelLegend::onItemDoubleClicked);
    connect(m_model, &ViewerModel::labelMapChanged, this, &LabelLegend::rebuild);
    // Queued: a check box toggled in the list must not see its own item deleted inside its signal.
    connect(m_model, &ViewerModel::labelDisplayChanged, this, &LabelLegend::rebuild, Qt::QueuedConnection);
    rebuild();
}

void LabelLegend::setLabelNames(std::map<std::int32_t, QString> names) {
    m_names = std::move(names);
    rebuild();
}

QString LabelLegend::labelName(std::int32_t label) const {
    const auto found = m_names.find(label);
    return found != m_names.end() ? found->second : tr("Label %1").arg(label);
}

void LabelLegend::rebuild() {
    m_rebuilding = true;
    m_list->clear();
    for (std::int32_t label : m_model->presentLabels()) {
        auto* item = new QTreeWidgetItem(m_list);
        item->setText(0, labelName(label));
        item->setText(1, QString::number(label));
        item->setIcon(0, swatch(m_model->labelColor(label)));
        item->setData(0, label_role, label);
        item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
        item->setCheckState(0, m_model->isLabelVisible(label) ? Qt::Checked : Qt::Unchecked);
    }
    const QSignalBlocker block_opacity(m_opacity);
    const QSignalBlocker block_outline(m_outline);
    m_opacity->setValue(static_cast<int>(std::lround(m_model->labelOpacity() * 100)));
    m_outline->setChecked(m_model->outlineOnly());
    setEnabled(m_model->labelMap() != nullptr);
    m_rebuilding = false;
}

void LabelLegend::onItemChanged(QTreeWidgetItem* item, int column) {
    if (m_rebuilding || column != 0) return;
    m_model->setLabelVisible(item->data(0, label_role).toInt(), item->checkState(0) == Qt::Checked);
}

void LabelLegend::onItemDoubleClicked(QTreeWidgetItem* item, int) {
    const std::int32_t label = item->data(0, label_role).toInt();
    const QColor chosen = QColorDialog::getColor(m_model->labelColor(label), this, tr("Colour of %1").arg(labelName(label)));
    if (chosen.isValid()) m_model->setLabelColor(label, chosen);
}

}  // namespace tessera::ui
