// LabelLegend: the label overlay's legend and controls — one row per label present in the label map
// (colour swatch, name, value, visibility check box), sortable by name or value and filtered by a
// search field; double-click a row to show that label alone (again: all), right-click for its colour,
// show all / hide all; the overlay opacity slider and the outline-only switch.
#pragma once

#include "model/viewer_model.hpp"

#include <QWidget>

#include <map>

class QCheckBox;
class QLineEdit;
class QPushButton;
class QSlider;
class QTreeWidget;
class QTreeWidgetItem;

namespace tessera::ui {

class LabelLegend : public QWidget {
    Q_OBJECT
public:
    explicit LabelLegend(ViewerModel* model, QWidget* parent = nullptr);

    void setLabelNames(std::map<std::int32_t, QString> names);  // e.g. the phantom's structure names
    QString labelName(std::int32_t label) const;

    QSlider* opacitySlider() const { return m_opacity; }
    QCheckBox* outlineCheckBox() const { return m_outline; }
    QTreeWidget* labelList() const { return m_list; }
    QLineEdit* searchField() const { return m_search; }
    QPushButton* showAllButton() const { return m_show_all; }
    QPushButton* hideAllButton() const { return m_hide_all; }
    // Shows `label` alone; when it already is, shows every label again.
    void isolate(std::int32_t label);

private slots:
    void rebuild();
    void onItemChanged(QTreeWidgetItem* item, int column);
    void onItemDoubleClicked(QTreeWidgetItem* item, int column);
    void onContextMenu(const QPoint& position);
    void applyFilter();

private:
    ViewerModel* m_model;
    QTreeWidget* m_list;
    QSlider* m_opacity;
    QCheckBox* m_outline;
    QLineEdit* m_search;
    QPushButton* m_show_all;
    QPushButton* m_hide_all;
    std::map<std::int32_t, QString> m_names;
    bool m_rebuilding = false;
};

}  // namespace tessera::ui
