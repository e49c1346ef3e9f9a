#include "widgets/partition_panel.hpp"

#include "core/units.hpp"

#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSignalBlocker>
#include <QSpinBox>

#include <algorithm>

namespace tessera::ui {

namespace {

QString gib(std::int64_t bytes) { return QString::fromStdString(format_gib(bytes)); }

QString axis_name(int axis, int rank) {
    static const char* names3[] = {"D", "H", "W"};
    static const char* names2[] = {"H", "W"};
    return QString::fromLatin1(rank == 3 ? names3[axis] : names2[axis]);
}

}  // namespace

PartitionPanel::PartitionPanel(PartitionDesign* design, QWidget* parent) : QWidget(parent), m_design(design) {
    auto* form = new QFormLayout(this);
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    for (int axis = 0; axis < 3; ++axis) {
        auto* label = new QLabel(this);
        auto* box = new QSpinBox(this);
        box->setRange(1, 64);
        box->setAccelerated(true);
        connect(box, &QSpinBox::valueChanged, this, &PartitionPanel::onPiecesEdited);
        label->setBuddy(box);
        form->addRow(label, box);
        m_piece_labels.push_back(label);
        m_pieces.push_back(box);
    }

    m_replicas = new QSpinBox(this);
    m_replicas->setRange(1, 4096);
    m_replicas->setToolTip(tr("Data-parallel replicas: each holds the whole model and its own share of the global batch "
                              "(num_replicas); gradients are all-reduced over them"));
    connect(m_replicas, &QSpinBox::valueChanged, this, &PartitionPanel::onReplicasEdited);
    form->addRow(tr("Replicas"), m_replicas);

    m_dims = new QLineEdit(this);
    m_dims->setToolTip(tr("TPUConfig's input_partition_dims over the channels-last input ([1, 4, 1, 1] over NHWC, "
                          "[1, 2, 2, 4, 1] over NDHWC); edit and press Enter to apply"));
    connect(m_dims, &QLineEdit::returnPressed, this, &PartitionPanel::onDimsEdited);
    form->addRow(tr("input_partition_dims"), m_dims);

    m_cores = new QLabel(this);
    m_cores->setToolTip(tr("num_cores_per_replica: the product of the pieces per axis"));
    form->addRow(tr("num_cores_per_replica"), m_cores);

    m_layer = new QComboBox(this);
    m_layer->setToolTip(tr("The layer whose halo is shaded on each tile: the rows it reads from neighbouring cores"));
    connect(m_layer, &QComboBox::activated, this, &PartitionPanel::onLayerChosen);
    form->addRow(tr("Halo of layer"), m_layer);

    m_summary = new QLabel(this);
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    form->addRow(m_summary);

    m_message = new QLabel(this);
    m_message->setWordWrap(true);
    m_message->setStyleSheet(QStringLiteral("color: #d23c3c;"));
    m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_message->hide();
    form->addRow(m_message);

    connect(m_design, &PartitionDesign::experimentChanged, this, &PartitionPanel::onExperimentChanged);
    connect(m_design, &PartitionDesign::designChanged, this, &PartitionPanel::onDesignChanged);
    onExperimentChanged();
}

void PartitionPanel::onExperimentChanged() {
    m_updating = true;
    const int rank = m_design->hasExperiment() ? static_cast<int>(m_design->inputExtent().size()) : 0;
    for (int axis = 0; axis < 3; ++axis) {
        const bool used = axis < rank;
        m_pieces[static_cast<std::size_t>(axis)]->setVisible(used);
        m_piece_labels[static_cast<std::size_t>(axis)]->setVisible(used);
        if (!used) continue;
        const Shape extent = m_design->inputExtent();
        const std::int64_t step = std::max<std::int64_t>(m_design->alignment()[static_cast<std::size_t>(axis)], 1);
        m_piece_labels[static_cast<std::size_t>(axis)]->setText(tr("Cores along &%1").arg(axis_name(axis, rank)));
        m_pieces[static_cast<std::size_t>(axis)]->setMaximum(static_cast<int>(std::max<std::int64_t>(1, extent[static_cast<std::size_t>(axis)] / step)));
        m_pieces[static_cast<std::size_t>(axis)]->setToolTip(
            tr("Cores along %1 (%2 voxels; cuts on multiples of %3 so every strided layer splits evenly). Drag a cut in a "
               "slice view for an uneven split")
                .arg(axis_name(axis, rank))
                .arg(extent[static_cast<std::size_t>(axis)])
                .arg(step));
    }
    {
        const QSignalBlocker blocker(m_layer);
        m_layer->clear();
        for (const LayerHalo& layer : m_design->layers()) {
            QStringList halo;
            for (std::int64_t h : layer.halo_width) halo << QString::number(h);
            QStringList extent;
            for (std::int64_t e : layer.extent) extent << QString::number(e);
            m_layer->addItem(tr("%1 (%2, halo %3 at %4)").arg(layer.name, layer.op, halo.join(QStringLiteral("×")),
                                                               extent.join(QStringLiteral("×"))));
        }
        m_layer->setCurrentIndex(m_design->selectedLayer());
    }
    setEnabled(m_design->hasExperiment());
    m_updating = false;
    onDesignChanged();
}

void PartitionPanel::onDesignChanged() {
    if (!m_design->hasExperiment()) {
        m_summary->setText(tr("Open an experiment (File ▸ Open Experiment) or a preset to design its partition."));
        return;
    }
    m_updating = true;
    const auto pieces = m_design->pieces();
    for (std::size_t axis = 0; axis < pieces.size(); ++axis) {
        const QSignalBlocker blocker(m_pieces[axis]);
        m_pieces[axis]->setValue(static_cast<int>(pieces[axis]));
    }
    {
        const QSignalBlocker blocker(m_replicas);
        m_replicas->setValue(static_cast<int>(m_design->replicas()));
    }
    if (!m_dims->hasFocus() || m_dims->text().isEmpty()) m_dims->setText(m_design->partitionDimsText());
    m_cores->setText(QString::number(m_design->coresPerReplica()));
    m_updating = false;

    const auto& cores = m_design->cores();
    const auto fullest = std::max_element(cores.begin(), cores.end(),
                                          [](const CoreCost& a, const CoreCost& b) { return a.memory_bytes < b.memory_bytes; });
    const std::int64_t capacity = m_design->device().memory_per_core;
    const bool fits = fullest == cores.end() || fullest->fits;
    QString summary = tr("<b>%1 ms</b> predicted per step on %2 · %3 cores × %4 replicas")
                          .arg(m_design->predictedStepSeconds() * 1e3, 0, 'f', 1)
                          .arg(QString::fromStdString(m_design->device().name))
                          .arg(m_design->coresPerReplica())
                          .arg(m_design->replicas());
    if (fullest != cores.end()) {
        summary += tr("<br>fullest core: core %1, %2 of %3 — %4")
                       .arg(fullest->core)
                       .arg(gib(fullest->memory_bytes), gib(capacity),
                            fits ? tr("fits") : tr("<span style='color:#d23c3c'><b>does not fit</b></span>"));
    }
    m_summary->setText(summary);
}

void PartitionPanel::showMessage(const QString& message) {
    m_message->setText(message);
    m_message->setVisible(!message.isEmpty());
}

void PartitionPanel::onPiecesEdited() {
    if (m_updating) return;
    std::vector<std::int64_t> pieces;
    for (std::size_t axis = 0; axis < m_design->inputExtent().size(); ++axis) pieces.push_back(m_pieces[axis]->value());
    if (m_design->setPieces(pieces)) {
        showMessage({});
    } else {
        showMessage(m_design->lastError());
        onDesignChanged();  // back to what the design holds
    }
}

void PartitionPanel::onReplicasEdited() {
    if (m_updating) return;
    if (m_design->setReplicas(m_replicas->value())) {
        showMessage({});
    } else {
        showMessage(m_design->lastError());
        onDesignChanged();
    }
}

void PartitionPanel::onDimsEdited() {
    if (m_design->setPartitionText(m_dims->text())) {
        showMessage({});
        m_dims->setText(m_design->partitionDimsText());
    } else {
        showMessage(m_design->lastError());  // the text stays as typed, to be corrected
    }
}

void PartitionPanel::onLayerChosen(int index) { m_design->setSelectedLayer(index); }

}  // namespace tessera::ui
