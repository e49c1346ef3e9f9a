#include "widgets/label_legend.hpp"

#include <QCheckBox>
#include <QColorDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QPainter>
#include <QPushButton>
#include <QSlider>
#include <QTreeWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <set>

namespace tessera::ui {

namespace {
constexpr int label_role = Qt::UserRole + 1;

// Rows sort by value as numbers (2 before 10) and by name without regard to case.
class LabelItem final : public QTreeWidgetItem {
public:
    using QTreeWidgetItem::QTreeWidgetItem;
    bool operator<(const QTreeWidgetItem& other) const override {
        const int column = treeWidget() ? treeWidget()->sortColumn() : 1;
        if (column == 1) return data(0, label_role).toInt() < other.data(0, label_role).toInt();
        const int order = text(0).compare(other.text(0), Qt::CaseInsensitive);
        return order != 0 ? order < 0 : data(0, label_role).toInt() < other.data(0, label_role).toInt();
    }
};

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

    m_search = new QLineEdit(this);
    m_search->setPlaceholderText(tr("Search labels by name or value"));
    m_search->setClearButtonEnabled(true);
    layout->addWidget(m_search);

    m_list = new QTreeWidget(this);
    m_list->setHeaderLabels({tr("Label"), tr("Value")});
    m_list->setRootIsDecorated(false);
    m_list->header()->setSectionResizeMode(0, QHeaderView::Stretch);
    m_list->header()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
    m_list->header()->setStretchLastSection(false);  // the names get the width, the values what they need
    m_list->setSortingEnabled(true);
    m_list->sortByColumn(1, Qt::AscendingOrder);
    m_list->setContextMenuPolicy(Qt::CustomContextMenu);
    m_list->setToolTip(tr("Labels in the label map: tick to show; double-click to show one alone (again: all); "
                          "right-click to change its colour; click a header to sort"));
    layout->addWidget(m_list, 1);

    auto* visibility_row = new QHBoxLayout;
    m_show_all = new QPushButton(tr("Show All"), this);
    m_hide_all = new QPushButton(tr("Hide All"), this);
    visibility_row->addWidget(m_show_all);
    visibility_row->addWidget(m_hide_all);
    visibility_row->addStretch(1);
    layout->addLayout(visibility_row);

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
    connect(m_list, &QTreeWidget::customContextMenuRequested, this, &LabelLegend::onContextMenu);
    connect(m_search, &QLineEdit::textChanged, this, &LabelLegend::applyFilter);
    connect(m_show_all, &QPushButton::clicked, this, [this] {
        m_model->setVisibleLabels({m_model->presentLabels().begin(), m_model->presentLabels().end()});
    });
    connect(m_hide_all, &QPushButton::clicked, this, [this] { m_model->setVisibleLabels({}); });
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
    m_list->setSortingEnabled(false);  // items sort once, after all are in
    for (std::int32_t label : m_model->presentLabels()) {
        auto* item = new LabelItem(m_list);
        item->setText(0, labelName(label));
        item->setText(1, QString::number(label));
        item->setIcon(0, swatch(m_model->labelColor(label)));
        item->setData(0, label_role, label);
        item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
        item->setCheckState(0, m_model->isLabelVisible(label) ? Qt::Checked : Qt::Unchecked);
    }
    m_list->setSortingEnabled(true);
    applyFilter();
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

void LabelLegend::applyFilter() {
    const QString wanted = m_search->text().trimmed();
    for (int row = 0; row < m_list->topLevelItemCount(); ++row) {
        QTreeWidgetItem* item = m_list->topLevelItem(row);
        const bool match = wanted.isEmpty() || item->text(0).contains(wanted, Qt::CaseInsensitive) || item->text(1) == wanted;
        item->setHidden(!match);
    }
}

void LabelLegend::isolate(std::int32_t label) {
    const auto& present = m_model->presentLabels();
    const bool alone = m_model->isLabelVisible(label) &&
                       std::none_of(present.begin(), present.end(), [&](std::int32_t other) { return other != label && m_model->isLabelVisible(other); });
    m_model->setVisibleLabels(alone ? std::set<std::int32_t>(present.begin(), present.end()) : std::set<std::int32_t>{label});
}

void LabelLegend::onItemDoubleClicked(QTreeWidgetItem* item, int) { isolate(item->data(0, label_role).toInt()); }

void LabelLegend::onContextMenu(const QPoint& position) {
    QTreeWidgetItem* item = m_list->itemAt(position);
    if (!item) return;
    const std::int32_t label = item->data(0, label_role).toInt();
    QMenu menu(this);
    menu.addAction(tr("Change Colour of %1…").arg(labelName(label)), this, [this, label] {
        const QColor chosen = QColorDialog::getColor(m_model->labelColor(label), this, tr("Colour of %1").arg(labelName(label)));
        if (chosen.isValid()) m_model->setLabelColor(label, chosen);
    });
    menu.addAction(tr("Show %1 Alone").arg(labelName(label)), this, [this, label] { isolate(label); });
    menu.addSeparator();
    menu.addAction(tr("Show All"), m_show_all, &QPushButton::click);
    menu.addAction(tr("Hide All"), m_hide_all, &QPushButton::click);
    menu.exec(m_list->viewport()->mapToGlobal(position));
}

}  // namespace tessera::ui
