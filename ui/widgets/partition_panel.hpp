// PartitionPanel: the partition editor's controls — pieces per axis, replicas, input_partition_dims
// as text (live, editable), the layer whose halos are shaded, and what the design costs (predicted
// step time, the fullest core against the device's memory). Edits go to the PartitionDesign, which
// keeps them undoable; a refused edit shows the engine's message under the control.
#pragma once

#include "model/partition_design.hpp"

#include <QWidget>

#include <vector>

class QComboBox;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace tessera::ui {

class PartitionPanel : public QWidget {
    Q_OBJECT
public:
    explicit PartitionPanel(PartitionDesign* design, QWidget* parent = nullptr);

    QSpinBox* piecesBox(int axis) const { return m_pieces.at(static_cast<std::size_t>(axis)); }
    QSpinBox* replicasBox() const { return m_replicas; }
    QLineEdit* dimsEdit() const { return m_dims; }
    QComboBox* layerBox() const { return m_layer; }
    QLabel* messageLabel() const { return m_message; }
    QLabel* summaryLabel() const { return m_summary; }

private slots:
    void onExperimentChanged();
    void onDesignChanged();
    void onPiecesEdited();
    void onReplicasEdited();
    void onDimsEdited();
    void onLayerChosen(int index);

private:
    void showMessage(const QString& message);

    PartitionDesign* m_design;
    std::vector<QSpinBox*> m_pieces;    // D, H, W (unused ones hidden for 2D)
    std::vector<QLabel*> m_piece_labels;
    QSpinBox* m_replicas;
    QLineEdit* m_dims;
    QLabel* m_cores;
    QComboBox* m_layer;
    QLabel* m_summary;
    QLabel* m_message;
    bool m_updating = false;  // true while the panel shows the design (its own signals are not edits)
};

}  // namespace tessera::ui
