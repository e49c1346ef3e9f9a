// ExperimentPanel: the experiment file's fields as a form — model, input, batch, device, precision,
// optimizer. Each edit rewrites that one JSON field and goes through the engine's parser, so the
// studio and the CLI accept exactly the same files; a refused edit shows the parser's message next to
// the field at fault (matched by its JSON path) and leaves the design as it was.
#pragma once

#include "model/partition_design.hpp"

#include <QWidget>

#include <map>

class QComboBox;
class QFormLayout;
class QLabel;
class QTreeWidget;
class QLineEdit;
class QSpinBox;

namespace tessera::ui {

class ExperimentPanel : public QWidget {
    Q_OBJECT
public:
    explicit ExperimentPanel(PartitionDesign* design, QWidget* parent = nullptr);

    // The editor of a field by JSON path ("model.depth", "input.size", "device", …) and the message
    // label under it.
    QWidget* fieldEditor(const QString& json_path) const;
    QLabel* fieldMessage(const QString& json_path) const;
    // Applies `value` (JSON text, e.g. "5", "\"tpu_v4\"", "[128, 128]") to a field, as an edit would.
    bool applyField(const QString& json_path, const QString& json_value);
    // Several fields as one edit (one undo step; checked together, so a pair that is only valid together
    // — ResNeXt's groups and width per group — can be set at once). Pairs of path and JSON text.
    bool applyFields(const QList<QPair<QString, QString>>& fields);
    // The TPU-compatibility check of the design as it stands (experiment/tpu_compatibility.hpp): one row a
    // rule with its result; the tooltip gives what was found, why the rule exists and the fix.
    QTreeWidget* tpuRules() const { return m_tpu_rules; }
    QLabel* tpuSummary() const { return m_tpu_summary; }

private slots:
    void refresh();

private:
    struct Field {
        QWidget* editor = nullptr;
        QLabel* message = nullptr;
    };
    void addField(const QString& label, const QString& json_path, QWidget* editor, const QString& tip);
    void clearMessages();
    void showError(const QString& message);
    void refreshTpuRules();

    PartitionDesign* m_design;
    QFormLayout* m_form;
    std::map<QString, Field> m_fields;
    QLabel* m_general_message;
    QLabel* m_tpu_summary = nullptr;
    QTreeWidget* m_tpu_rules = nullptr;
    bool m_updating = false;
};

}  // namespace tessera::ui
