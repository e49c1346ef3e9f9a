#include "report/svg_chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace tessera::report {

namespace {

constexpr double font_size = 11;          // px, ticks and legends
constexpr double char_width = 6.4;        // px per character at font_size (a sans-serif average)
constexpr const char* font_family = "system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif";
constexpr const char* axis_color = "#555";
constexpr const char* grid_color = "#e4e4e4";

std::string fixed(double value, int decimals) {
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
    return text;
}

// Coordinates with one decimal: enough for screens, short files.
std::string px(double value) { return fixed(value, 1); }

std::string svg_open(int width, int height) {
    return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) + "\" height=\"" + std::to_string(height) +
           "\" viewBox=\"0 0 " + std::to_string(width) + " " + std::to_string(height) + "\" font-family=\"" + font_family +
           "\" font-size=\"" + px(font_size) + "\" role=\"img\">";
}

std::string text_element(double x, double y, std::string_view text, std::string_view anchor, std::string_view extra = {}) {
    return "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\" text-anchor=\"" + std::string(anchor) + "\"" +
           (extra.empty() ? "" : " " + std::string(extra)) + ">" + escape_xml(text) + "</text>";
}

std::string line(double x1, double y1, double x2, double y2, std::string_view color, std::string_view extra = {}) {
    return "<line x1=\"" + px(x1) + "\" y1=\"" + px(y1) + "\" x2=\"" + px(x2) + "\" y2=\"" + px(y2) + "\" stroke=\"" +
           std::string(color) + "\"" + (extra.empty() ? "" : " " + std::string(extra)) + "/>";
}

double text_width(std::string_view text) {
    // UTF-8 continuation bytes take no width of their own.
    double count = 0;
    for (unsigned char c : text) count += (c & 0xC0) == 0x80 ? 0 : 1;
    return count * char_width;
}

// A legend as one row of swatches and names from (x, y), wrapping at max_x; returns the rows' height.
double legend_row(std::string& out, double x, double y, double max_x, const std::vector<std::pair<std::string, std::string>>& entries) {
    const double start_x = x;
    double row_y = y;
    for (const auto& [name, color] : entries) {
        const double width = 16 + text_width(name) + 14;
        if (x + width > max_x && x > start_x) {
            x = start_x;
            row_y += 16;
        }
        out += "<rect x=\"" + px(x) + "\" y=\"" + px(row_y - 8) + "\" width=\"10\" height=\"10\" fill=\"" + color + "\"/>";
        out += text_element(x + 14, row_y + 1, name, "start");
        x += width;
    }
    return row_y - y + 16;
}

struct Axis {
    double low = 0, high = 1;
    bool log = false;
    double from = 0, to = 1;  // pixels of low and high
    double map(double value) const {
        const double t = log ? (std::log10(value) - std::log10(low)) / (std::log10(high) - std::log10(low)) : (value - low) / (high - low);
        return from + t * (to - from);
    }
};

// Log ticks: each power of ten in range, and 2× and 5× between them when there are few decades.
std::vector<double> log_ticks(double low, double high) {
    std::vector<double> ticks;
    const int first = static_cast<int>(std::floor(std::log10(low))), last = static_cast<int>(std::ceil(std::log10(high)));
    const bool fill = last - first <= 2;
    for (int power = first; power <= last; ++power) {
        for (double mantissa : {1.0, 2.0, 5.0}) {
            if (mantissa != 1.0 && !fill) continue;
            const double value = mantissa * std::pow(10.0, power);
            if (value >= low * (1 - 1e-9) && value <= high * (1 + 1e-9)) ticks.push_back(value);
        }
    }
    return ticks;
}

}  // namespace

std::string escape_xml(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}

std::string compact_number(double value) {
    if (!std::isfinite(value)) return std::isnan(value) ? "NaN" : (value > 0 ? "∞" : "−∞");
    if (value == 0) return "0";
    const double magnitude = std::fabs(value);
    char text[64];
    if (magnitude >= 1e10) std::snprintf(text, sizeof text, "%.3gG", value / 1e9);
    else if (magnitude >= 1e7) std::snprintf(text, sizeof text, "%.3gM", value / 1e6);
    else if (magnitude >= 1e4) std::snprintf(text, sizeof text, "%.3gk", value / 1e3);
    else if (magnitude < 1e-3) std::snprintf(text, sizeof text, "%.2g", value);
    else std::snprintf(text, sizeof text, "%.3g", value);
    return text;
}

std::string format_bytes(double bytes) {
    constexpr double kib = 1024, mib = kib * 1024, gib = mib * 1024;
    if (std::fabs(bytes) >= gib) return fixed(bytes / gib, 2) + " GiB";
    if (std::fabs(bytes) >= mib) return fixed(bytes / mib, bytes >= 100 * mib ? 0 : 1) + " MiB";
    if (std::fabs(bytes) >= kib) return fixed(bytes / kib, 1) + " KiB";
    return fixed(bytes, 0) + " B";
}

std::vector<double> nice_ticks(double low, double high, int max_ticks) {
    if (!(high > low) || max_ticks < 2) return {low};
    const double rough = (high - low) / std::max(1, max_ticks - 1);
    const double power = std::pow(10.0, std::floor(std::log10(rough)));
    double step = power;
    for (double multiple : {1.0, 2.0, 2.5, 5.0, 10.0}) {
        step = multiple * power;
        if (step >= rough) break;
    }
    std::vector<double> ticks;
    for (double tick = std::ceil(low / step - 1e-9) * step; tick <= high + step * 1e-9; tick += step) {
        ticks.push_back(std::fabs(tick) < step * 1e-9 ? 0.0 : tick);
    }
    return ticks;
}

std::string render_line_chart(const LineChart& chart) {
    double x_low = std::numeric_limits<double>::infinity(), x_high = -x_low, y_low = x_low, y_high = -x_low;
    auto usable = [&](double x, double y) { return std::isfinite(x) && std::isfinite(y) && (!chart.log_y || y > 0); };
    for (const Series& series : chart.series) {
        for (std::size_t i = 0; i < series.x.size() && i < series.y.size(); ++i) {
            if (!usable(series.x[i], series.y[i])) continue;
            x_low = std::min(x_low, series.x[i]);
            x_high = std::max(x_high, series.x[i]);
            y_low = std::min(y_low, series.y[i]);
            y_high = std::max(y_high, series.y[i]);
        }
    }
    for (const Band& band : chart.bands) {
        if (chart.log_y && band.low <= 0) continue;
        y_low = std::min(y_low, band.low);
        y_high = std::max(y_high, band.high);
    }
    const bool empty = !std::isfinite(x_low) || !std::isfinite(y_low);
    if (empty) x_low = 0, x_high = 1, y_low = 0, y_high = 1;
    if (chart.x_min) x_low = *chart.x_min;
    if (chart.x_max) x_high = *chart.x_max;
    if (chart.y_min) y_low = *chart.y_min;
    if (chart.y_max) y_high = *chart.y_max;
    if (x_high <= x_low) x_high = x_low + 1;
    if (y_high <= y_low) {
        const double pad = y_low == 0 ? 1 : std::fabs(y_low) * 0.1;
        y_low -= chart.log_y ? 0 : pad, y_high += pad;
    }
    if (!chart.log_y && !chart.y_min) {
        // A little room, and 0 as the floor when the data are all positive and not far from it.
        const double span = y_high - y_low;
        y_low = (y_low >= 0 && y_low < span) ? 0 : y_low - 0.05 * span;
        if (!chart.y_max) y_high += 0.05 * span;
    }
    if (chart.log_y) {
        // Quarter decades, with room so that a flat series does not sit on the axis.
        y_low = std::pow(10.0, std::floor((std::log10(y_low) - 0.05) * 4) / 4);
        y_high = std::pow(10.0, std::ceil(std::log10(y_high) * 4) / 4);
    }

    std::string out = svg_open(chart.width, chart.height);
    out += text_element(chart.width / 2.0, 16, chart.title, "middle", "font-size=\"13\" font-weight=\"600\"");
    std::vector<std::pair<std::string, std::string>> legend;
    for (const Series& series : chart.series) legend.emplace_back(series.name, series.color);
    for (const Band& band : chart.bands) legend.emplace_back(band.name, band.color);
    const double legend_height = legend.size() > 1 || !chart.bands.empty() ? legend_row(out, 64, 34, chart.width - 12, legend) : 0;

    Axis y_axis{y_low, y_high, chart.log_y};
    const std::vector<double> y_ticks = chart.log_y ? log_ticks(y_low, y_high) : nice_ticks(y_low, y_high, 6);
    double label_width = 0;
    for (double tick : y_ticks) label_width = std::max(label_width, text_width(compact_number(tick)));
    const double left = 24 + label_width + 8, right = chart.width - 16.0;
    const double top = 28 + legend_height + 6, bottom = chart.height - 40.0;
    y_axis.from = bottom, y_axis.to = top;
    Axis x_axis{x_low, x_high, false, left, right};
    const int max_x_ticks = std::max(2, static_cast<int>((right - left) / 70));
    for (double tick : y_ticks) {
        const double y = y_axis.map(tick);
        out += line(left, y, right, y, grid_color);
        out += text_element(left - 6, y + 4, compact_number(tick), "end");
    }
    std::vector<double> x_ticks = nice_ticks(x_low, x_high, max_x_ticks);
    if (chart.integer_x) {
        std::erase_if(x_ticks, [](double tick) { return tick != std::floor(tick); });
        if (x_ticks.size() < 2) x_ticks = {std::ceil(x_low), std::floor(x_high)};
    }
    for (double tick : x_ticks) {
        const double x = x_axis.map(tick);
        out += line(x, bottom, x, bottom + 4, axis_color);
        out += text_element(x, bottom + 16, compact_number(tick), "middle");
    }
    out += line(left, bottom, right, bottom, axis_color) + line(left, top, left, bottom, axis_color);
    out += text_element((left + right) / 2, chart.height - 8.0, chart.x_title, "middle");
    out += text_element(12, (top + bottom) / 2, chart.y_title, "middle",
                        "transform=\"rotate(-90 12 " + px((top + bottom) / 2) + ")\"");
    for (const Band& band : chart.bands) {
        if (chart.log_y && band.low <= 0) continue;
        const double y1 = y_axis.map(std::min(band.high, y_high)), y2 = y_axis.map(std::max(band.low, y_low));
        out += "<rect x=\"" + px(left) + "\" y=\"" + px(y1) + "\" width=\"" + px(right - left) + "\" height=\"" + px(std::max(1.0, y2 - y1)) +
               "\" fill=\"" + band.color + "\" fill-opacity=\"0.25\"><title>" + escape_xml(band.name) + ": " + compact_number(band.low) +
               " – " + compact_number(band.high) + "</title></rect>";
    }
    for (const Series& series : chart.series) {
        std::string points;
        std::string markers;
        for (std::size_t i = 0; i < series.x.size() && i < series.y.size(); ++i) {
            if (!usable(series.x[i], series.y[i])) continue;
            const double y_value = std::clamp(series.y[i], y_low, y_high);
            const double x = x_axis.map(series.x[i]), y = y_axis.map(y_value);
            points += px(x) + "," + px(y) + " ";
            if (series.markers) {
                markers += "<circle cx=\"" + px(x) + "\" cy=\"" + px(y) + "\" r=\"3.5\" fill=\"" + series.color + "\"><title>" +
                           escape_xml(series.name) + " at " + compact_number(series.x[i]) + ": " + compact_number(series.y[i]) + "</title></circle>";
            }
        }
        if (!points.empty()) {
            out += "<polyline fill=\"none\" stroke=\"" + series.color + "\" stroke-width=\"1.6\"" +
                   (series.dashed ? " stroke-dasharray=\"6 4\"" : "") + " points=\"" + points + "\"><title>" + escape_xml(series.name) +
                   "</title></polyline>";
        }
        out += markers;
    }
    if (empty) out += text_element((left + right) / 2, (top + bottom) / 2, "no data", "middle", "fill=\"#888\"");
    out += "</svg>";
    return out;
}

std::string render_bar_chart(const BarChart& chart) {
    double high = 0;
    for (const Bar& bar : chart.bars) high = std::max(high, bar.value);
    if (chart.limit) high = std::max(high, *chart.limit);
    if (high <= 0) high = 1;
    double unit = 1;
    std::string unit_name;
    if (chart.values_are_bytes) {
        unit = high >= 1024.0 * 1024 * 1024 ? 1024.0 * 1024 * 1024 : 1024.0 * 1024;
        unit_name = unit > 1024.0 * 1024 ? "GiB" : "MiB";
    }
    const std::vector<double> ticks = nice_ticks(0, high / unit * 1.05, 6);
    const double top_value = std::max(ticks.back(), high / unit) * unit;
    double label_width = 0;
    for (double tick : ticks) label_width = std::max(label_width, text_width(compact_number(tick)));
    const double left = 24 + label_width + 8, right = chart.width - 16.0, top = 32, bottom = chart.height - 40.0;
    Axis y_axis{0, top_value, false, bottom, top};

    std::string out = svg_open(chart.width, chart.height);
    out += text_element(chart.width / 2.0, 16, chart.title, "middle", "font-size=\"13\" font-weight=\"600\"");
    for (double tick : ticks) {
        const double y = y_axis.map(tick * unit);
        out += line(left, y, right, y, grid_color);
        out += text_element(left - 6, y + 4, compact_number(tick), "end");
    }
    out += line(left, bottom, right, bottom, axis_color) + line(left, top, left, bottom, axis_color);
    const std::string y_title = unit_name.empty() ? chart.y_title : chart.y_title + " (" + unit_name + ")";
    out += text_element(12, (top + bottom) / 2, y_title, "middle", "transform=\"rotate(-90 12 " + px((top + bottom) / 2) + ")\"");
    const double slot = (right - left) / std::max<std::size_t>(1, chart.bars.size());
    const double bar_width = std::min(48.0, slot * 0.7);
    // Labels thin out when they would collide.
    double widest_label = 0;
    for (const Bar& bar : chart.bars) widest_label = std::max(widest_label, text_width(bar.label));
    const std::size_t label_every = static_cast<std::size_t>(std::max(1.0, std::ceil((widest_label + 6) / slot)));
    for (std::size_t i = 0; i < chart.bars.size(); ++i) {
        const Bar& bar = chart.bars[i];
        const double centre = left + slot * (static_cast<double>(i) + 0.5), y = y_axis.map(bar.value);
        out += "<rect x=\"" + px(centre - bar_width / 2) + "\" y=\"" + px(y) + "\" width=\"" + px(bar_width) + "\" height=\"" +
               px(bottom - y) + "\" fill=\"" + bar.color + "\"><title>" + escape_xml(bar.tooltip.empty() ? bar.label : bar.tooltip) +
               "</title></rect>";
        if (i % label_every == 0) out += text_element(centre, bottom + 16, bar.label, "middle");
    }
    if (chart.limit) {
        const double y = y_axis.map(*chart.limit);
        out += line(left, y, right, y, "#c0392b", "stroke-dasharray=\"6 4\" stroke-width=\"1.5\"");
        out += text_element(right - 4, y - 5, chart.limit_label, "end", "fill=\"#c0392b\"");
    }
    out += "</svg>";
    return out;
}

std::string render_timeline(const Timeline& timeline) {
    double end_ms = 0;
    for (const TimelineSpanMark& span : timeline.spans) end_ms = std::max(end_ms, span.end_ms);
    if (end_ms <= 0) end_ms = 1;
    double label_width = 0;
    for (const std::string& name : timeline.lane_names) label_width = std::max(label_width, text_width(name));
    const double lane_height = 18, lane_gap = 4;
    const double left = 12 + label_width + 8, right = timeline.width - 16.0, top = 52;
    const double lanes_bottom = top + static_cast<double>(timeline.lane_names.size()) * (lane_height + lane_gap);
    const int height = static_cast<int>(lanes_bottom + 40);
    Axis x_axis{0, end_ms, false, left, right};

    std::string out = svg_open(timeline.width, height);
    out += text_element(timeline.width / 2.0, 16, timeline.title, "middle", "font-size=\"13\" font-weight=\"600\"");
    std::vector<std::pair<std::string, std::string>> legend;
    for (const TimelineLegendEntry& entry : timeline.legend) legend.emplace_back(entry.name, entry.color);
    legend_row(out, left, 36, right, legend);
    for (std::size_t lane = 0; lane < timeline.lane_names.size(); ++lane) {
        const double y = top + static_cast<double>(lane) * (lane_height + lane_gap);
        if (lane % 2 == 0) {
            out += "<rect x=\"" + px(left) + "\" y=\"" + px(y - lane_gap / 2) + "\" width=\"" + px(right - left) + "\" height=\"" +
                   px(lane_height + lane_gap) + "\" fill=\"#f6f6f6\"/>";
        }
        out += text_element(left - 6, y + lane_height - 5, timeline.lane_names[lane], "end");
    }
    for (const TimelineSpanMark& span : timeline.spans) {
        const double y = top + static_cast<double>(span.lane) * (lane_height + lane_gap);
        const double x1 = x_axis.map(span.start_ms), x2 = x_axis.map(span.end_ms);
        // Sub-pixel events stay visible as hairlines.
        out += "<rect x=\"" + px(x1) + "\" y=\"" + px(y) + "\" width=\"" + fixed(std::max(0.6, x2 - x1), 2) + "\" height=\"" + px(lane_height) +
               "\" fill=\"" + span.color + "\"><title>" + escape_xml(span.tooltip) + "</title></rect>";
    }
    for (double tick : nice_ticks(0, end_ms, std::max(2, static_cast<int>((right - left) / 80)))) {
        const double x = x_axis.map(tick);
        out += line(x, lanes_bottom, x, lanes_bottom + 4, axis_color);
        out += text_element(x, lanes_bottom + 16, compact_number(tick), "middle");
    }
    out += line(left, lanes_bottom, right, lanes_bottom, axis_color);
    out += text_element((left + right) / 2, height - 6.0, "milliseconds from the step's start (this host)", "middle");
    out += "</svg>";
    return out;
}

}  // namespace tessera::report
