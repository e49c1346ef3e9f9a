// SVG charts for reports that open anywhere: line charts (linear or log y), bar charts and a core
// timeline, each one self-contained <svg> element sized in CSS pixels, styled inline (no script, no
// external font or stylesheet), with a <title> on every mark so a browser shows its value on hover.
//
//   LineChart chart{.title = "Loss", .x_title = "step", .y_title = "loss"};
//   chart.series.push_back({.name = "training", .color = "#1f77b4", .x = steps, .y = losses});
//   std::string svg = render_line_chart(chart);
//
// Ticks are "nice" numbers (1, 2, 5 × 10^k) with compact labels ("1.5k", "0.002", "2e-05"), few enough
// that none overlaps at the chart's width.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::report {

// Text for XML content and attribute values (&, <, >, " and ' escaped).
std::string escape_xml(std::string_view text);
// A compact number for ticks and tables: 3 significant digits, k/M/G above 10⁴, exponent below 10⁻³.
std::string compact_number(double value);
// Bytes as "1.50 GiB", "312 MiB", "4.0 KiB".
std::string format_bytes(double bytes);
// At most about max_ticks nice values covering [low, high] (low < high).
std::vector<double> nice_ticks(double low, double high, int max_ticks);

struct Series {
    std::string name{};
    std::string color{};           // CSS colour
    std::vector<double> x{}, y{};  // same length; non-finite points are skipped
    bool dashed = false;
    bool markers = false;      // a dot per point (sparse series such as evaluations)
};

// A shaded horizontal band (a prediction's ± range).
struct Band {
    std::string name, color;
    double low = 0, high = 0;
};

struct LineChart {
    std::string title{}, x_title{}, y_title{};
    std::vector<Series> series{};
    std::vector<Band> bands{};
    bool log_y = false;                 // every y must then be > 0 (others are skipped)
    bool integer_x = true;              // x counts something (steps): ticks on whole numbers only
    std::optional<double> y_min{}, y_max{};  // fixed range (e.g. 0–1 for Dice)
    std::optional<double> x_min{}, x_max{};  // fixed range (evaluations over the training's steps)
    int width = 460, height = 280;           // CSS pixels: two side by side in a report
};
std::string render_line_chart(const LineChart& chart);

struct Bar {
    std::string label{};  // under the bar
    double value = 0;
    std::string color{};
    std::string tooltip{};
};

struct BarChart {
    std::string title{}, y_title{};
    std::vector<Bar> bars{};
    std::optional<double> limit{};  // a dashed line across (a core's capacity)
    std::string limit_label{};
    bool values_are_bytes = false;  // axis labels as GiB/MiB
    int width = 620, height = 280;
};
std::string render_bar_chart(const BarChart& chart);

// One lane per core, one rectangle per event, x in milliseconds from the step's start.
struct TimelineSpanMark {
    std::int64_t lane = 0;
    double start_ms = 0, end_ms = 0;
    std::string color;
    std::string tooltip;
};
struct TimelineLegendEntry {
    std::string name, color;
};
struct Timeline {
    std::string title{};
    std::vector<std::string> lane_names{};  // "core 0", …
    std::vector<TimelineSpanMark> spans{};
    std::vector<TimelineLegendEntry> legend{};
    int width = 900;                       // height follows the lanes
};
std::string render_timeline(const Timeline& timeline);

}  // namespace tessera::report
