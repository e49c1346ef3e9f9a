#include "widgets/dicom_series_browser.hpp"

#include <QDialogButtonBox>
#include <QStyle>
#include <QDir>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTreeWidget>
#include <QVBoxLayout>

#include <algorithm>

namespace tessera::ui {

namespace {

enum Column { Patient, Study, Number, Description, Modality, Slices, Size, Spacing, Encoding, ColumnCount };

// "20261128" → "2026-11-28"; anything else as written.
QString studyDate(const std::string& date) {
    const QString text = QString::fromStdString(date);
    if (text.size() == 8 && text.toLongLong() > 0) return text.left(4) + '-' + text.mid(4, 2) + '-' + text.mid(6, 2);
    return text;
}

QString shown(const std::string& text) { return text.empty() ? QStringLiteral("—") : QString::fromStdString(text); }

}  // namespace

DicomSeriesBrowser::DicomSeriesBrowser(std::vector<DicomSeriesInfo> series, const QString& folder, QWidget* parent)
    : QDialog(parent), m_series(std::move(series)) {
    setWindowTitle(tr("DICOM Series in %1").arg(QDir::toNativeSeparators(folder)));
    setObjectName(QStringLiteral("dicomSeriesBrowser"));
    auto* layout = new QVBoxLayout(this);
    auto* heading = new QLabel(tr("%1 series in this folder. Choose the one to open:").arg(m_series.size()));
    layout->addWidget(heading);

    m_list = new QTreeWidget;
    m_list->setObjectName(QStringLiteral("dicomSeriesList"));
    m_list->setColumnCount(ColumnCount);
    m_list->setHeaderLabels({tr("Patient"), tr("Study"), tr("Series"), tr("Description"), tr("Modality"), tr("Slices"), tr("Size"),
                             tr("Spacing (mm)"), tr("Encoding")});
    m_list->setRootIsDecorated(false);
    m_list->setAlternatingRowColors(true);
    m_list->setUniformRowHeights(true);
    m_list->setSelectionMode(QAbstractItemView::SingleSelection);
    for (const DicomSeriesInfo& one : m_series) {
        auto* row = new QTreeWidgetItem(m_list);
        row->setText(Patient, shown(one.patient_name).replace('^', ' ') +
                                  (one.patient_id.empty() ? QString() : QStringLiteral(" (%1)").arg(QString::fromStdString(one.patient_id))));
        const QString study = QString::fromStdString(one.study_description);
        row->setText(Study, (study.isEmpty() ? QString() : study + QStringLiteral(", ")) + shown(one.study_date.empty() ? "" : studyDate(one.study_date).toStdString()));
        row->setText(Number, QString::number(one.series_number));
        row->setText(Description, shown(one.description));
        row->setText(Modality, shown(one.modality));
        row->setText(Slices, QString::number(one.num_slices));
        row->setText(Size, QStringLiteral("%1 × %2").arg(one.size[0]).arg(one.size[1]));
        row->setText(Spacing, QStringLiteral("%1 × %2 × %3")
                                  .arg(one.spacing[0], 0, 'g', 3)
                                  .arg(one.spacing[1], 0, 'g', 3)
                                  .arg(one.spacing[2], 0, 'g', 3));
        row->setText(Encoding, QString::fromStdString(one.transfer_syntax));
        for (int column : {Number, Slices}) row->setTextAlignment(column, Qt::AlignRight | Qt::AlignVCenter);
        if (!one.warnings.empty()) {
            row->setIcon(Description, style()->standardIcon(QStyle::SP_MessageBoxWarning));
            row->setToolTip(Description, QString::fromStdString(one.warnings.front()));
        }
    }
    for (int column = 0; column < ColumnCount; ++column) m_list->resizeColumnToContents(column);
    layout->addWidget(m_list, 1);

    m_details = new QLabel;
    m_details->setObjectName(QStringLiteral("dicomSeriesDetails"));
    m_details->setWordWrap(true);
    m_details->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_details);

    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Open | QDialogButtonBox::Cancel);
    m_open = buttons->button(QDialogButtonBox::Open);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    layout->addWidget(buttons);

    connect(m_list, &QTreeWidget::itemSelectionChanged, this, &DicomSeriesBrowser::showDetails);
    connect(m_list, &QTreeWidget::itemDoubleClicked, this, [this] { accept(); });
    if (m_list->topLevelItemCount() > 0) m_list->setCurrentItem(m_list->topLevelItem(0));
    showDetails();
    resize(std::max(760, m_list->header()->length() + 40), 380);
}

std::string DicomSeriesBrowser::chosenSeries() const {
    const int row = m_list->indexOfTopLevelItem(m_list->currentItem());
    if (row < 0) return {};
    const DicomSeriesInfo& one = m_series[static_cast<std::size_t>(row)];
    return one.series_uid.empty() ? std::to_string(one.series_number) : one.series_uid;
}

void DicomSeriesBrowser::showDetails() {
    const int row = m_list->indexOfTopLevelItem(m_list->currentItem());
    m_open->setEnabled(row >= 0);
    if (row < 0) {
        m_details->clear();
        return;
    }
    const DicomSeriesInfo& one = m_series[static_cast<std::size_t>(row)];
    QString text = (one.num_files == 1 ? tr("1 file") : tr("%1 files").arg(one.num_files)) +
                   tr(", series UID %1").arg(one.series_uid.empty() ? tr("(none)") : QString::fromStdString(one.series_uid));
    for (const std::string& warning : one.warnings) {
        text += QStringLiteral("<br><span style='color:#b35900'>⚠ %1</span>").arg(QString::fromStdString(warning).toHtmlEscaped());
    }
    m_details->setText(text);
}

}  // namespace tessera::ui
