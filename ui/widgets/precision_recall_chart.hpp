// PrecisionRecallChart: a detector's precision–recall curves at IoU 0.5, one per class with held-out
// objects, as COCO evaluation interpolates them (precision made non-increasing, read at recall 0, 0.01,
// …, 1) — the curves whose area is each class's AP50. One class can be highlighted (the Run dock's table
// selects it); the others fade.
//
//   auto* chart = new PrecisionRecallChart(this);
//   chart->setEvaluation(eval.detection.classes, eval.step);
//   chart->highlightClass(2);
#pragma once

#include "run/run_records.hpp"

#include <QChartView>

#include <cstdint>
#include <vector>

class QLineSeries;

namespace tessera::ui {

class PrecisionRecallChart : public QChartView {
    Q_OBJECT
public:
    explicit PrecisionRecallChart(QWidget* parent = nullptr);

    void setEvaluation(const std::vector<tessera::run::DetectionClassRecord>& classes, std::int64_t step);
    void clear();
    void highlightClass(int class_index);  // −1: none
    // The curve of a class (nullptr: the class had no held-out objects or is out of range), for tests.
    QLineSeries* curve(int class_index) const;
    int curveCount() const;

private:
    std::vector<QLineSeries*> m_curves;  // by class index; nullptr where the class has no curve
    int m_highlighted = -1;
};

}  // namespace tessera::ui
