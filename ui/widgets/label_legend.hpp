// LabelLegend: the label overlay's legend and controls — one row per label present in the label map
// (colour swatch, name, visibility check box; double-click a row to pick its colour), the overlay
// opacity slider and the outline-only switch.
#pragma once

#include "model/viewer_model.hpp"

#include <QWidget>

#include <map>

class QCheckBox;
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

private slots:
    void rebuild();
    void onItemChanged(QTreeWidgetItem* item, int column);
    void onItemDoubleClicked(QTreeWidgetItem* item, int column);

private:
    ViewerModel* m_model;
    QTreeWidget* m_list;
    QSlider* m_opacity;
    QCheckBox* m_outline;
    std::map<std::int32_t, QString> m_names;
    bool m_rebuilding = false;
};

}  // namespace tessera::ui
