// The DICOM series browser: the series of a folder (patient, study, series description, modality, slices,
// spacing, encoding), one row each, for the user to pick the one to open — as 3D Slicer's DICOM
// browser and ITK-SNAP's series dialog do. It only shows what list_dicom_series found; the main window
// reads the series chosen.
//
//   DicomSeriesBrowser browser(tessera::list_dicom_series(folder), folder, this);
//   if (browser.exec() == QDialog::Accepted) read_dicom_series(folder, browser.chosenSeries());
#pragma once

#include "io/dicom_series.hpp"

#include <QDialog>

#include <vector>

class QLabel;
class QPushButton;
class QTreeWidget;

namespace tessera::ui {

class DicomSeriesBrowser : public QDialog {
    Q_OBJECT
public:
    DicomSeriesBrowser(std::vector<DicomSeriesInfo> series, const QString& folder, QWidget* parent = nullptr);

    // The chosen series as read_dicom_series takes it: its UID, or its number when it has no UID.
    std::string chosenSeries() const;
    QTreeWidget* seriesList() const { return m_list; }
    QPushButton* openButton() const { return m_open; }
    QLabel* detailsLabel() const { return m_details; }

private:
    void showDetails();

    std::vector<DicomSeriesInfo> m_series;
    QTreeWidget* m_list = nullptr;
    QLabel* m_details = nullptr;
    QPushButton* m_open = nullptr;
};

}  // namespace tessera::ui
