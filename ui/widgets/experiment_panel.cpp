#include "widgets/experiment_panel.hpp"

#include "cost/device.hpp"
#include "experiment/experiment_edit.hpp"
#include "experiment/tpu_compatibility.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QHeaderView>
#include <QTreeWidget>

#include <nlohmann/json.hpp>

namespace tessera::ui {

namespace {

QString model_kind_name(experiment::ModelKind kind) {
    switch (kind) {
        case experiment::ModelKind::UNet: return QStringLiteral("unet");
        case experiment::ModelKind::ResNet: return QStringLiteral("resnet");
        case experiment::ModelKind::RetinaNet: return QStringLiteral("retinanet");
    }
    return {};
}

QString optimizer_name(train::OptimizerKind kind) {
    return QString::fromUtf8(train::to_string(kind).data(), static_cast<qsizetype>(train::to_string(kind).size()));
}

// "origin: model.depth: expected …" → "model.depth"; empty when the message names no path.
QString path_of(const QString& message) {
    const QStringList parts = message.split(QStringLiteral(": "));
    return parts.size() >= 3 ? parts[1] : QString();
}

}  // namespace

ExperimentPanel::ExperimentPanel(PartitionDesign* design, QWidget* parent) : QWidget(parent), m_design(design) {
    m_form = new QFormLayout(this);
    m_form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);

    auto* name = new QLineEdit(this);
    connect(name, &QLineEdit::editingFinished, this, [this, name] {
        if (!m_updating) applyField(QStringLiteral("name"), QString::fromStdString(nlohmann::json(name->text().toStdString()).dump()));
    });
    addField(tr("Name"), QStringLiteral("name"), name, tr("Shown in listings and in the run's summary"));

    const auto add_choice = [this](const QString& label, const QString& path, const QStringList& choices, const QString& tip) {
        auto* box = new QComboBox(this);
        box->addItems(choices);
        connect(box, &QComboBox::activated, this, [this, box, path] {
            // Numbers go in as numbers ("head_kernel": 3), words as strings.
            bool number = false;
            box->currentText().toInt(&number);
            applyField(path, number ? box->currentText() : QStringLiteral("\"%1\"").arg(box->currentText()));
        });
        addField(label, path, box, tip);
    };
    const auto add_switch = [this](const QString& label, const QString& path, const QString& tip) {
        auto* box = new QCheckBox(this);
        connect(box, &QCheckBox::toggled, this, [this, path](bool on) {
            if (!m_updating) applyField(path, on ? QStringLiteral("true") : QStringLiteral("false"));
        });
        addField(label, path, box, tip);
    };
    add_choice(tr("Model"), QStringLiteral("model.kind"), {QStringLiteral("unet"), QStringLiteral("resnet"), QStringLiteral("retinanet")},
               tr("U-Net (segmentation, 2D or 3D), ResNet or ResNeXt (classification), RetinaNet (detection)"));

    const auto add_number = [this](const QString& label, const QString& path, int low, int high, const QString& tip) {
        auto* box = new QSpinBox(this);
        box->setRange(low, high);
        box->setKeyboardTracking(false);  // one edit when typing "64", not "6" then "64"
        connect(box, &QSpinBox::valueChanged, this, [this, path](int value) {
            if (!m_updating) applyField(path, QString::number(value));
        });
        addField(label, path, box, tip);
    };
    add_number(tr("Depth"), QStringLiteral("model.depth"), 2, 200, tr("U-Net levels (2–7) or ResNet depth (18, 34, 50, 101, 152, 200)"));
    add_number(tr("Base width"), QStringLiteral("model.base_width"), 1, 1024, tr("Channels of the first level"));
    // ResNeXt (ResNet and RetinaNet backbones): groups > 1 needs a width per group, so a first choice of
    // groups sets both at once, with torchvision's resnext50_32x4d width.
    auto* groups = new QSpinBox(this);
    groups->setRange(1, 1024);
    groups->setKeyboardTracking(false);
    addField(tr("Groups"), QStringLiteral("model.groups"), groups,
             tr("ResNeXt's cardinality: each bottleneck's 3×3 convolution split into this many groups (1: ResNet)"));
    add_number(tr("Width per group"), QStringLiteral("model.width_per_group"), 0, 1024,
               tr("Channels per group in the first stage (ResNeXt50-32x4d: 4; 0: ResNet's own widths)"));
    connect(groups, &QSpinBox::valueChanged, this, [this](int value) {
        if (m_updating) return;
        if (value > 1 && m_design->experiment().model.width_per_group == 0) {
            applyFields({{QStringLiteral("model.groups"), QString::number(value)}, {QStringLiteral("model.width_per_group"), QStringLiteral("4")}});
        } else {
            applyField(QStringLiteral("model.groups"), QString::number(value));
        }
    });
    add_choice(tr("Coarse levels"), QStringLiteral("model.coarse_levels"), {QStringLiteral("exact"), QStringLiteral("round_up")},
               tr("RetinaNet's P6 and P7: exact (the input's extents divisible by 128, as the TPU model) or round_up "
                  "(extents divisible by 32, coarse levels padded as torchvision builds them)"));
    // U-Net only.
    add_number(tr("Max width"), QStringLiteral("model.max_width"), 0, 4096,
               tr("Channels capped at this width at every level (0: none; nnU-Net's 3D U-Net caps at 320)"));
    add_choice(tr("Downsampling"), QStringLiteral("model.downsampling"), {QStringLiteral("max_pool"), QStringLiteral("strided_conv")},
               tr("2×2 max pooling between levels, or a stride-2 first convolution per level (the 3D U-Nets of MLPerf and nnU-Net)"));
    add_choice(tr("Head kernel"), QStringLiteral("model.head_kernel"), {QStringLiteral("1"), QStringLiteral("3")},
               tr("The classifier's kernel: 1×1 (the original U-Net) or 3×3"));
    add_switch(tr("Batch norm"), QStringLiteral("model.batch_norm"), tr("Batch normalisation after every convolution"));
    // RetinaNet only.
    add_number(tr("FPN channels"), QStringLiteral("model.fpn_channels"), 1, 4096, tr("Channels of every pyramid level and head convolution"));
    add_number(tr("Anchors"), QStringLiteral("model.num_anchors"), 1, 100, tr("Anchors per position (scales × aspect ratios)"));
    add_switch(tr("Pyramid batch norm"), QStringLiteral("model.fpn_batch_norm"),
               tr("Batch norm on P3–P7 (the Cloud TPU model); off as torchvision builds it"));
    add_switch(tr("Head batch norm"), QStringLiteral("model.head_batch_norm"),
               tr("Batch norm after each head convolution, per level (the Cloud TPU model); off as torchvision builds it"));
    add_number(tr("Classes"), QStringLiteral("model.num_classes"), 1, 100000, tr("Output classes"));
    add_number(tr("Input channels"), QStringLiteral("input.channels"), 1, 4096, tr("Channels of the input image"));

    auto* size = new QLineEdit(this);
    size->setPlaceholderText(QStringLiteral("256, 256, 256"));
    connect(size, &QLineEdit::editingFinished, this, [this, size] {
        if (!m_updating) applyField(QStringLiteral("input.size"), QStringLiteral("[%1]").arg(size->text()));
    });
    addField(tr("Input size"), QStringLiteral("input.size"), size,
             tr("Spatial extents of the model input, [H, W] or [D, H, W] (the tensor the grid splits)"));

    add_number(tr("Global batch"), QStringLiteral("global_batch"), 1, 1 << 20, tr("Images per step over all replicas"));

    QStringList devices;
    try {
        for (const std::string& id : cost::device_preset_ids()) devices << QString::fromStdString(id);
    } catch (const Error&) {
        // No presets folder: the field shows what the experiment names.
    }
    add_choice(tr("Device"), QStringLiteral("device"), devices, tr("The device preset predictions and memory verdicts are for (resources/devices)"));

    add_choice(tr("Precision"), QStringLiteral("precision"), {QStringLiteral("f32"), QStringLiteral("bf16"), QStringLiteral("f16")},
               tr("What convolutions compute in"));
    add_choice(tr("Optimizer"), QStringLiteral("optimizer.kind"), {QStringLiteral("sgd"), QStringLiteral("adam"), QStringLiteral("adamw")},
               tr("SGD keeps one slot per weight (momentum), Adam two"));

    m_general_message = new QLabel(this);
    m_general_message->setWordWrap(true);
    m_general_message->setStyleSheet(QStringLiteral("color: #d23c3c;"));
    m_general_message->hide();
    m_form->addRow(m_general_message);

    // The detection seed's rules for real TPUs, beside the fields they are about.
    m_tpu_summary = new QLabel(this);
    m_tpu_summary->setWordWrap(true);
    m_form->addRow(m_tpu_summary);
    m_tpu_rules = new QTreeWidget(this);
    m_tpu_rules->setHeaderLabels({tr("TPU compatibility"), tr("Result")});
    m_tpu_rules->setRootIsDecorated(false);
    m_tpu_rules->setSelectionMode(QAbstractItemView::NoSelection);
    m_tpu_rules->header()->setStretchLastSection(false);
    m_tpu_rules->header()->setSectionResizeMode(0, QHeaderView::Stretch);
    m_tpu_rules->header()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
    m_tpu_rules->setMinimumHeight(150);
    m_tpu_rules->setToolTip(tr("Whether the experiment follows the TPU-compatible detection pipeline's rules (static shapes, "
                               "TPU-friendly ops, large-batch hyperparameters). Hover a rule for why and the fix. The "
                               "simulated cores may run a failing experiment; a real TPU may not."));
    m_form->addRow(m_tpu_rules);

    connect(m_design, &PartitionDesign::experimentChanged, this, &ExperimentPanel::refresh);
    connect(m_design, &PartitionDesign::designChanged, this, &ExperimentPanel::refresh);
    refresh();
}

void ExperimentPanel::addField(const QString& label, const QString& json_path, QWidget* editor, const QString& tip) {
    editor->setToolTip(tip);
    auto* message = new QLabel(this);
    message->setWordWrap(true);
    message->setStyleSheet(QStringLiteral("color: #d23c3c;"));
    message->hide();
    auto* column = new QWidget(this);
    auto* layout = new QVBoxLayout(column);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(2);
    layout->addWidget(editor);
    layout->addWidget(message);
    m_form->addRow(label, column);
    m_fields[json_path] = {editor, message};
}

QWidget* ExperimentPanel::fieldEditor(const QString& json_path) const {
    const auto it = m_fields.find(json_path);
    return it == m_fields.end() ? nullptr : it->second.editor;
}

QLabel* ExperimentPanel::fieldMessage(const QString& json_path) const {
    const auto it = m_fields.find(json_path);
    return it == m_fields.end() ? nullptr : it->second.message;
}

void ExperimentPanel::clearMessages() {
    for (auto& [path, field] : m_fields) field.message->hide();
    m_general_message->hide();
}

void ExperimentPanel::showError(const QString& message) {
    clearMessages();
    const QString path = path_of(message);
    // The field whose path the message names, or the closest enclosing one ("input.size[1]" → "input.size").
    for (auto& [field_path, field] : m_fields) {
        if (!path.isEmpty() && (path == field_path || path.startsWith(field_path + QLatin1Char('[')) ||
                                path.startsWith(field_path + QLatin1Char('.')))) {
            field.message->setText(message.section(QStringLiteral(": "), 2));
            field.message->show();
            return;
        }
    }
    m_general_message->setText(message);
    m_general_message->show();
}

bool ExperimentPanel::applyField(const QString& json_path, const QString& json_value) {
    return applyFields({{json_path, json_value}});
}

bool ExperimentPanel::applyFields(const QList<QPair<QString, QString>>& fields) {
    if (!m_design->hasExperiment() || fields.isEmpty()) return false;
    std::string text = m_design->experimentText();
    QStringList paths;
    for (const auto& [json_path, json_value] : fields) {
        nlohmann::json value;
        try {
            value = nlohmann::json::parse(json_value.toStdString());
        } catch (const nlohmann::json::exception&) {
            showError(tr("experiment: %1: expected a JSON value, got %2").arg(json_path, json_value));
            return false;
        }
        try {
            text = experiment::set_experiment_field(text, json_path.toStdString(), value);
        } catch (const Error& error) {
            showError(QString::fromUtf8(error.what()));
            return false;
        }
        paths << json_path;
    }
    if (!m_design->setExperimentText(text, tr("Set %1").arg(paths.join(QStringLiteral(", "))))) {
        showError(m_design->lastError());
        return false;
    }
    clearMessages();
    return true;
}

void ExperimentPanel::refresh() {
    setEnabled(m_design->hasExperiment());
    if (!m_design->hasExperiment()) return;
    m_updating = true;
    const experiment::Experiment& e = m_design->experiment();
    const auto set_spin = [this](const char* path, std::int64_t value) {
        auto* box = static_cast<QSpinBox*>(fieldEditor(QString::fromLatin1(path)));
        const QSignalBlocker blocker(box);
        box->setValue(static_cast<int>(value));
    };
    const auto set_combo = [this](const char* path, const QString& text) {
        auto* box = static_cast<QComboBox*>(fieldEditor(QString::fromLatin1(path)));
        const QSignalBlocker blocker(box);
        if (box->findText(text) < 0) box->addItem(text);
        box->setCurrentText(text);
    };
    static_cast<QLineEdit*>(fieldEditor(QStringLiteral("name")))->setText(QString::fromStdString(e.name));
    set_combo("model.kind", model_kind_name(e.model.kind));
    set_spin("model.depth", e.model.depth);
    set_spin("model.base_width", e.model.base_width);
    set_spin("model.num_classes", e.model.num_classes);
    set_spin("input.channels", e.channels);
    QStringList size;
    for (std::int64_t extent : e.size) size << QString::number(extent);
    static_cast<QLineEdit*>(fieldEditor(QStringLiteral("input.size")))->setText(size.join(QStringLiteral(", ")));
    set_spin("global_batch", e.global_batch / e.partition.num_replicas * m_design->replicas());
    set_combo("device", QString::fromStdString(e.device));
    set_combo("precision", QString::fromUtf8(experiment::precision_name(e.precision).data()));
    set_combo("optimizer.kind", optimizer_name(e.optimizer.kind));
    fieldEditor(QStringLiteral("model.base_width"))->setEnabled(e.model.kind != experiment::ModelKind::RetinaNet);
    const auto set_switch = [this](const char* path, bool on) {
        auto* box = static_cast<QCheckBox*>(fieldEditor(QString::fromLatin1(path)));
        const QSignalBlocker blocker(box);
        box->setChecked(on);
    };
    set_spin("model.groups", e.model.groups);
    set_spin("model.width_per_group", e.model.width_per_group);
    set_combo("model.coarse_levels", e.model.round_up_coarse_levels ? QStringLiteral("round_up") : QStringLiteral("exact"));
    set_spin("model.max_width", e.model.max_width);
    set_combo("model.downsampling", e.model.strided_downsampling ? QStringLiteral("strided_conv") : QStringLiteral("max_pool"));
    set_combo("model.head_kernel", QString::number(e.model.head_kernel));
    set_switch("model.batch_norm", e.model.batch_norm);
    set_spin("model.fpn_channels", e.model.fpn_channels);
    set_spin("model.num_anchors", e.model.num_anchors);
    set_switch("model.fpn_batch_norm", e.model.fpn_batch_norm);
    set_switch("model.head_batch_norm", e.model.head_batch_norm);
    // A model's own fields only: the others are hidden (and disabled).
    const bool unet = e.model.kind == experiment::ModelKind::UNet, retinanet = e.model.kind == experiment::ModelKind::RetinaNet;
    const std::pair<const char*, bool> shown[] = {
        {"model.groups", !unet},        {"model.width_per_group", !unet},  {"model.coarse_levels", retinanet},
        {"model.max_width", unet},      {"model.downsampling", unet},      {"model.head_kernel", unet},
        {"model.batch_norm", unet},     {"model.fpn_channels", retinanet}, {"model.num_anchors", retinanet},
        {"model.fpn_batch_norm", retinanet}, {"model.head_batch_norm", retinanet}};
    for (const auto& [path, applies] : shown) {
        QWidget* editor = fieldEditor(QString::fromLatin1(path));
        editor->setEnabled(applies);
        m_form->setRowVisible(editor->parentWidget(), applies);
    }
    m_updating = false;
    refreshTpuRules();
}

void ExperimentPanel::refreshTpuRules() {
    m_tpu_rules->clear();
    std::vector<experiment::CompatibilityRule> rules;
    try {
        // The design as it stands (replicas and grid included), as the planner reads it.
        rules = experiment::tpu_compatibility(experiment::parse_experiment(m_design->experimentText(), m_design->experiment().origin));
    } catch (const std::exception& error) {
        m_tpu_summary->setText(tr("TPU compatibility: cannot check this design (%1)").arg(QString::fromUtf8(error.what())));
        return;
    }
    int passed = 0, failed = 0, not_applicable = 0;
    for (const experiment::CompatibilityRule& rule : rules) {
        auto* item = new QTreeWidgetItem(m_tpu_rules);
        item->setText(0, QString::fromStdString(rule.title));
        QString tip = QStringLiteral("<b>%1</b> (%2)").arg(QString::fromStdString(rule.title).toHtmlEscaped(), QString::fromStdString(rule.id));
        if (!rule.detail.empty()) tip += QStringLiteral("<br>") + QString::fromStdString(rule.detail).toHtmlEscaped();
        if (!rule.reason.empty()) tip += tr("<br><i>Why:</i> %1").arg(QString::fromStdString(rule.reason).toHtmlEscaped());
        if (!rule.fix.empty()) tip += tr("<br><i>Fix:</i> %1").arg(QString::fromStdString(rule.fix).toHtmlEscaped());
        switch (rule.status) {
            case experiment::RuleStatus::Pass:
                item->setText(1, tr("pass"));
                item->setForeground(1, QColor(30, 140, 60));
                ++passed;
                break;
            case experiment::RuleStatus::Fail:
                item->setText(1, tr("FAIL"));
                item->setForeground(0, QColor(210, 60, 60));
                item->setForeground(1, QColor(210, 60, 60));
                ++failed;
                break;
            case experiment::RuleStatus::NotApplicable:
                item->setText(1, tr("n/a"));
                item->setForeground(0, palette().color(QPalette::PlaceholderText));
                item->setForeground(1, palette().color(QPalette::PlaceholderText));
                ++not_applicable;
                break;
        }
        item->setToolTip(0, tip);
        item->setToolTip(1, tip);
    }
    m_tpu_summary->setText(failed > 0 ? tr("<b>TPU compatibility:</b> %1 pass, <span style='color:#d23c3c'>%2 fail</span>, %3 not "
                                           "applicable — hover a rule for the fix")
                                            .arg(passed)
                                            .arg(failed)
                                            .arg(not_applicable)
                                      : tr("<b>TPU compatibility:</b> %1 pass, %2 not applicable").arg(passed).arg(not_applicable));
}

}  // namespace tessera::ui
