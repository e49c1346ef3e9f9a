// The report's building blocks checked against values worked out by hand: base64 (RFC 4648's test
// vectors), nice ticks, compact numbers, XML escaping, RGBA PNGs read back by OpenCV, and SVG charts
// that place their marks where the axes say.
#include "io/color_image.hpp"
#include "report/run_report.hpp"
#include "report/svg_chart.hpp"

#include <gtest/gtest.h>
#include <opencv2/imgcodecs.hpp>

#include <cmath>
#include <regex>

namespace tessera {
namespace {

using namespace report;

std::vector<std::uint8_t> bytes_of(std::string_view text) { return {text.begin(), text.end()}; }

TEST(Base64, MatchesTheRfc4648TestVectors) {
    EXPECT_EQ(base64(bytes_of("")), "");
    EXPECT_EQ(base64(bytes_of("f")), "Zg==");
    EXPECT_EQ(base64(bytes_of("fo")), "Zm8=");
    EXPECT_EQ(base64(bytes_of("foo")), "Zm9v");
    EXPECT_EQ(base64(bytes_of("foob")), "Zm9vYg==");
    EXPECT_EQ(base64(bytes_of("fooba")), "Zm9vYmE=");
    EXPECT_EQ(base64(bytes_of("foobar")), "Zm9vYmFy");
    EXPECT_EQ(base64({0xFF, 0xFE, 0x00}), "//4A");
}

TEST(NiceTicks, CoverTheRangeInStepsOfOneTwoTwoAndAHalfOrFiveTimesAPowerOfTen) {
    EXPECT_EQ(nice_ticks(0, 1, 6), (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
    const std::vector<double> steps = nice_ticks(1, 20, 5);
    ASSERT_GE(steps.size(), 3u);
    EXPECT_DOUBLE_EQ(steps[1] - steps[0], 5);
    EXPECT_GE(steps.front(), 1);
    EXPECT_LE(steps.back(), 20);
    // 0.0101 in about 5 steps: 0.0025 apart, every tick a multiple of it.
    const std::vector<double> small = nice_ticks(-0.003, 0.0071, 6);
    ASSERT_GE(small.size(), 4u);
    for (double tick : small) EXPECT_NEAR(std::remainder(tick, 0.0025), 0, 1e-12) << tick;
    EXPECT_NEAR(small[1] - small[0], 0.0025, 1e-12);
    EXPECT_LE(nice_ticks(0, 1e6, 4).size(), 5u);
}

TEST(CompactNumber, KeepsThreeSignificantDigitsAndShortSuffixes) {
    EXPECT_EQ(compact_number(0), "0");
    EXPECT_EQ(compact_number(0.25), "0.25");
    EXPECT_EQ(compact_number(1234), "1.23e+03");
    EXPECT_EQ(compact_number(15000), "15k");
    EXPECT_EQ(compact_number(2.5e7), "25M");
    EXPECT_EQ(compact_number(3e10), "30G");
    EXPECT_EQ(compact_number(2e-5), "2e-05");
    EXPECT_EQ(compact_number(-0.5), "-0.5");
    EXPECT_EQ(format_bytes(1.5 * 1024 * 1024 * 1024), "1.50 GiB");
    EXPECT_EQ(format_bytes(157052960), "150 MiB");
    EXPECT_EQ(format_bytes(4096), "4.0 KiB");
}

TEST(EscapeXml, EscapesEveryCharacterThatEndsTextOrAnAttribute) {
    EXPECT_EQ(escape_xml(R"(a<b & "c" 'd'>)"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
}

TEST(EncodePng, WritesRgbaThatOpenCvReadsBack) {
    Tensor rgba = Tensor::zeros({4, 2, 3}, DType::F32);  // [C, H, W]
    float* v = rgba.data<float>();
    const std::int64_t plane = 6;
    v[0 * plane + 1] = 1.0f;   // pixel (0, 1): red, opaque
    v[3 * plane + 1] = 1.0f;
    v[2 * plane + 5] = 1.0f;   // pixel (1, 2): blue at half alpha
    v[3 * plane + 5] = 0.5f;
    const std::vector<std::uint8_t> png = encode_png(rgba);
    const cv::Mat decoded = cv::imdecode(png, cv::IMREAD_UNCHANGED);
    ASSERT_EQ(decoded.channels(), 4);
    ASSERT_EQ(decoded.rows, 2);
    ASSERT_EQ(decoded.cols, 3);
    const auto at = [&](int y, int x) { return decoded.at<cv::Vec4b>(y, x); };  // B, G, R, A
    EXPECT_EQ(at(0, 1), cv::Vec4b(0, 0, 255, 255));
    EXPECT_EQ(at(1, 2), cv::Vec4b(255, 0, 0, 128));
    EXPECT_EQ(at(0, 0), cv::Vec4b(0, 0, 0, 0));
    EXPECT_THROW(encode_png(Tensor::zeros({2, 2, 2}, DType::F32)), Error);
}

// The polyline's points, as numbers.
std::vector<std::pair<double, double>> polyline_points(const std::string& svg) {
    std::smatch match;
    EXPECT_TRUE(std::regex_search(svg, match, std::regex("points=\"([^\"]*)\"")));
    std::vector<std::pair<double, double>> points;
    const std::string text = match[1];
    const std::regex pair("([-0-9.]+),([-0-9.]+)");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), pair); it != std::sregex_iterator(); ++it) {
        points.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
    }
    return points;
}

TEST(LineChart, PlacesPointsProportionallyAndLogAxesByDecades) {
    LineChart chart{.title = "t", .x_title = "step", .y_title = "loss"};
    chart.series.push_back({.name = "a", .color = "#000", .x = {0, 5, 10}, .y = {0, 0.5, 1}});
    chart.y_min = 0, chart.y_max = 1;
    const auto linear = polyline_points(render_line_chart(chart));
    ASSERT_EQ(linear.size(), 3u);
    // Equal steps in x and y: the middle point halfway between the ends on both axes.
    EXPECT_NEAR(linear[1].first, (linear[0].first + linear[2].first) / 2, 0.11);
    EXPECT_NEAR(linear[1].second, (linear[0].second + linear[2].second) / 2, 0.11);
    EXPECT_LT(linear[2].second, linear[0].second);  // larger y is higher on screen

    LineChart log_chart{.title = "t", .x_title = "step", .y_title = "s"};
    log_chart.series.push_back({.name = "a", .color = "#000", .x = {0, 1, 2}, .y = {0.01, 0.1, 1}});
    log_chart.log_y = true;
    const std::string svg = render_line_chart(log_chart);
    const auto log_points = polyline_points(svg);
    ASSERT_EQ(log_points.size(), 3u);
    EXPECT_NEAR(log_points[0].second - log_points[1].second, log_points[1].second - log_points[2].second, 0.2);  // a decade each
    EXPECT_NE(svg.find(">0.1</text>"), std::string::npos);

    LineChart empty{.title = "nothing", .x_title = "x", .y_title = "y"};
    EXPECT_NE(render_line_chart(empty).find("no data"), std::string::npos);
}

TEST(BarChart, ScalesBytesAndDrawsTheLimit) {
    BarChart chart{.title = "memory", .y_title = "peak", .values_are_bytes = true};
    chart.bars = {{"0", 2.0 * 1024 * 1024 * 1024, "#111", ""}, {"1", 1.0 * 1024 * 1024 * 1024, "#222", ""}};
    chart.limit = 4.0 * 1024 * 1024 * 1024;
    chart.limit_label = "capacity";
    const std::string svg = render_bar_chart(chart);
    EXPECT_NE(svg.find("peak (GiB)"), std::string::npos);
    EXPECT_NE(svg.find("capacity"), std::string::npos);
    // Bar heights in proportion to their values.
    std::vector<double> heights;
    const std::regex bar("<rect x=\"[-0-9.]+\" y=\"[-0-9.]+\" width=\"[-0-9.]+\" height=\"([-0-9.]+)\" fill=\"#(111|222)\"");
    for (auto it = std::sregex_iterator(svg.begin(), svg.end(), bar); it != std::sregex_iterator(); ++it) heights.push_back(std::stod((*it)[1]));
    ASSERT_EQ(heights.size(), 2u);
    EXPECT_NEAR(heights[0] / heights[1], 2.0, 0.01);
}

}  // namespace
}  // namespace tessera
