#include "widgets/precision_recall_chart.hpp"

#include "detection/coco_evaluation.hpp"
#include "render/detection_painter.hpp"

#include <QChart>
#include <QLegend>
#include <QLineSeries>
#include <QValueAxis>

namespace tessera::ui {

PrecisionRecallChart::PrecisionRecallChart(QWidget* parent) : QChartView(new QChart(), parent) {
    setObjectName(QStringLiteral("precisionRecallChart"));
    chart()->setAnimationOptions(QChart::NoAnimation);
    chart()->legend()->setAlignment(Qt::AlignRight);
    chart()->setMargins(QMargins(2, 2, 2, 2));
    setRenderHint(QPainter::Antialiasing, true);
    setMinimumHeight(160);
    setToolTip(tr("Precision against recall at IoU 0.5 for each class, interpolated as COCO evaluation does; the area under a "
                  "curve is that class's AP50. Select a class in the table to highlight it."));
    clear();
}

void PrecisionRecallChart::clear() {
    chart()->removeAllSeries();
    for (QAbstractAxis* axis : chart()->axes()) {
        chart()->removeAxis(axis);
        delete axis;
    }
    m_curves.clear();
    m_highlighted = -1;
    chart()->setTitle(tr("Precision–recall at IoU 0.5: no evaluation yet"));
}

void PrecisionRecallChart::setEvaluation(const std::vector<tessera::run::DetectionClassRecord>& classes, std::int64_t step) {
    clear();
    auto* recall_axis = new QValueAxis();
    recall_axis->setRange(0, 1);
    recall_axis->setTitleText(tr("recall"));
    recall_axis->setLabelFormat(QStringLiteral("%.1f"));
    auto* precision_axis = new QValueAxis();
    precision_axis->setRange(0, 1.02);
    precision_axis->setTitleText(tr("precision"));
    precision_axis->setLabelFormat(QStringLiteral("%.1f"));
    chart()->addAxis(recall_axis, Qt::AlignBottom);
    chart()->addAxis(precision_axis, Qt::AlignLeft);
    const auto recall = detection::coco_recall_points();
    m_curves.assign(classes.size(), nullptr);
    for (std::size_t c = 0; c < classes.size(); ++c) {
        const run::DetectionClassRecord& record = classes[c];
        if (record.num_ground_truth <= 0 || record.precision_at_iou_50.size() != recall.size()) continue;
        auto* series = new QLineSeries();
        QList<QPointF> points;
        for (std::size_t r = 0; r < recall.size(); ++r) points.append(QPointF(recall[r], std::max(record.precision_at_iou_50[r], 0.0)));
        series->replace(points);
        // The class alone in the legend (the run dock's table beside it lists each class's AP50).
        series->setName(QString::fromStdString(record.name));
        QPen pen(DetectionPainter::classColor(static_cast<std::int32_t>(c)), 2.0);
        series->setPen(pen);
        chart()->addSeries(series);
        series->attachAxis(recall_axis);
        series->attachAxis(precision_axis);
        m_curves[c] = series;
    }
    chart()->setTitle(curveCount() > 0 ? tr("Precision–recall at IoU 0.5, step %1").arg(step)
                                       : tr("Precision–recall at IoU 0.5, step %1: no held-out objects").arg(step));
}

void PrecisionRecallChart::highlightClass(int class_index) {
    m_highlighted = class_index;
    for (std::size_t c = 0; c < m_curves.size(); ++c) {
        if (!m_curves[c]) continue;
        QColor color = DetectionPainter::classColor(static_cast<std::int32_t>(c));
        const bool faded = class_index >= 0 && static_cast<int>(c) != class_index;
        if (faded) color.setAlpha(60);
        m_curves[c]->setPen(QPen(color, static_cast<int>(c) == class_index ? 3.5 : 2.0));
    }
}

QLineSeries* PrecisionRecallChart::curve(int class_index) const {
    if (class_index < 0 || class_index >= static_cast<int>(m_curves.size())) return nullptr;
    return m_curves[static_cast<std::size_t>(class_index)];
}

int PrecisionRecallChart::curveCount() const {
    return static_cast<int>(std::count_if(m_curves.begin(), m_curves.end(), [](const QLineSeries* s) { return s != nullptr; }));
}

}  // namespace tessera::ui
