// runtime/plot: tick choice and labels, the raster's lines, rectangles and text, SVG escaping,
// the charts' content (bar heights in proportion to values, the heatmap's colour scale ends) and
// WriteChart's files and errors. The PNG is read back with libpng's reader here;
// tests/launcher/plot_run_test.py decodes the command's PNGs with a reader of its own.
#include <png.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/plot/axes.h"
#include "runtime/plot/bitmap_font.h"
#include "runtime/plot/chart.h"
#include "runtime/plot/palette.h"
#include "runtime/plot/raster_surface.h"
#include "runtime/plot/svg_surface.h"

namespace sy::plot {
namespace {

constexpr Rgb kWhite{255, 255, 255};
constexpr Rgb kRed{255, 0, 0};

int Count(const RasterSurface& r, Rgb color, int x0 = 0, int x1 = -1) {
  if (x1 < 0) x1 = r.width();
  int n = 0;
  for (int y = 0; y < r.height(); ++y) {
    for (int x = x0; x < x1; ++x) n += r.pixel(x, y) == color;
  }
  return n;
}

TEST(NiceTicks, CoverTheRangeAtRoundSteps) {
  for (auto [lo, hi] : std::vector<std::pair<double, double>>{
           {0, 1000}, {0.13, 3.37}, {-2.5, 7}, {17258, 21338}, {0.242, 0.259}, {5, 5}}) {
    const std::vector<double> t = NiceTicks(lo, hi, 7);
    ASSERT_GE(t.size(), 2u) << lo << " " << hi;
    EXPECT_LE(t.size(), 8u) << lo << " " << hi;
    EXPECT_LE(t.front(), lo);
    EXPECT_GE(t.back(), hi);
    const double step = t[1] - t[0];
    const double mantissa = step / std::pow(10.0, std::floor(std::log10(step)));
    EXPECT_TRUE(std::fabs(mantissa - 1) < 1e-9 || std::fabs(mantissa - 2) < 1e-9 ||
                std::fabs(mantissa - 5) < 1e-9)
        << "step " << step;
    for (size_t i = 1; i < t.size(); ++i) EXPECT_NEAR(t[i] - t[i - 1], step, step * 1e-9);
  }
  EXPECT_EQ(NiceTicks(0, 1000, 6), (std::vector<double>{0, 200, 400, 600, 800, 1000}));
}

TEST(Labels, HaveTheDigitsTheSpacingNeeds) {
  EXPECT_EQ(FormatTick(0.25, 0.05), "0.25");
  EXPECT_EQ(FormatTick(1500, 500), "1500");
  EXPECT_EQ(FormatTick(0.4, 0.2), "0.4");
  EXPECT_EQ(FormatValue(0.2734), "0.273");
  EXPECT_EQ(FormatValue(18234), "18.2k");
  EXPECT_EQ(FormatValue(4.1e6), "4.1M");
}

TEST(Raster, LinesAndRectanglesLandOnTheirPixels) {
  RasterSurface r(40, 30);
  const Point line[] = {{5, 10}, {25, 10}};
  r.Polyline(line, kRed, 1);
  for (int x = 5; x <= 25; ++x) EXPECT_EQ(r.pixel(x, 10), kRed) << x;
  EXPECT_EQ(r.pixel(4, 10), kWhite);
  EXPECT_EQ(r.pixel(26, 10), kWhite);
  EXPECT_EQ(r.pixel(15, 9), kWhite);
  EXPECT_EQ(Count(r, kRed), 21);
  const Point diagonal[] = {{0, 0}, {9, 9}};
  r.Polyline(diagonal, {0, 0, 255}, 1);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(r.pixel(i, i), (Rgb{0, 0, 255}));
  // Clipped at the edges.
  r.FillRect(35, 25, 100, 100, {0, 255, 0});
  EXPECT_EQ(Count(r, {0, 255, 0}), 5 * 5);
}

TEST(Raster, TextFitsItsBoxAndTurnsWhenVertical) {
  RasterSurface r(200, 200);
  r.Text(100, 50, "E8", kRed, TextAnchor::kMiddle);
  int x_lo = 200, x_hi = -1, y_lo = 200, y_hi = -1;
  for (int y = 0; y < 200; ++y) {
    for (int x = 0; x < 200; ++x) {
      if (r.pixel(x, y) != kRed) continue;
      x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
    }
  }
  // "E8": two full-height, full-width glyphs, centred on (100, 50).
  EXPECT_EQ(x_hi - x_lo + 1, TextWidth(2));
  EXPECT_EQ(y_hi - y_lo + 1, kTextHeight);
  EXPECT_NEAR((x_lo + x_hi) / 2.0, 100, 1);
  EXPECT_NEAR((y_lo + y_hi) / 2.0, 50, 1);

  RasterSurface v(200, 200);
  v.Text(50, 100, "E8", kRed, TextAnchor::kMiddle, /*vertical=*/true);
  x_lo = 200, x_hi = -1, y_lo = 200, y_hi = -1;
  for (int y = 0; y < 200; ++y) {
    for (int x = 0; x < 200; ++x) {
      if (v.pixel(x, y) != kRed) continue;
      x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
    }
  }
  EXPECT_EQ(x_hi - x_lo + 1, kTextHeight);
  EXPECT_EQ(y_hi - y_lo + 1, TextWidth(2));
  // Reading bottom to top: 'E' (its full-height stroke on the glyph's left) is at the bottom,
  // and the stroke faces down.
  for (int x = x_lo; x <= x_hi; ++x) EXPECT_EQ(v.pixel(x, y_hi), kRed) << x;
}

TEST(Font, GlyphsDifferAndUnknownCharactersAreQuestionMarks) {
  auto bits = [](char c) {
    std::string s;
    for (int row = 0; row < kGlyphHeight; ++row) {
      for (int col = 0; col < kGlyphWidth; ++col) s += GlyphPixel(c, col, row) ? '#' : '.';
    }
    return s;
  };
  EXPECT_NE(bits('0'), bits('O'));
  EXPECT_NE(bits('1'), bits('l'));
  EXPECT_EQ(bits('\x7f'), bits('?'));
  EXPECT_EQ(bits(' '), std::string(35, '.'));
  // 'T': the top row full, then the middle column only.
  EXPECT_EQ(bits('T').substr(0, 10), "#####..#..");
}

TEST(Svg, EscapesTextAndWritesADocument) {
  EXPECT_EQ(XmlEscape("a<b & \"c\" 'd'>\x01"), "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
  SvgSurface s(100, 50);
  s.Text(10, 10, "x < y", kRed, TextAnchor::kStart);
  const Point line[] = {{0, 0}, {10.5, 20.25}};
  s.Polyline(line, kRed, 2);
  const std::string doc = s.Document();
  EXPECT_NE(doc.find("width=\"100\" height=\"50\""), std::string::npos);
  EXPECT_NE(doc.find(">x &lt; y</text>"), std::string::npos);
  EXPECT_NE(doc.find("points=\"0,0 10.5,20.25\""), std::string::npos);
  EXPECT_EQ(doc.substr(doc.size() - 7), "</svg>\n");
}

TEST(Charts, BarHeightsFollowTheValues) {
  BarChart chart{.title = "t", .y_label = "y", .categories = {"a", "b"}, .groups = {{"g", {1, 3}}}};
  const ChartSize size = SizeOf(chart);
  RasterSurface r(size.width, size.height);
  Draw(chart, r);
  // Each column's count of bar pixels; the bars are the runs of columns taller than the legend's
  // swatch (6 pixels), left to right.
  const Rgb bar = SeriesColor(0);
  std::vector<int> heights;
  int run_height = 0;
  for (int x = 0; x < size.width; ++x) {
    int h = 0;
    for (int y = 0; y < size.height; ++y) h += r.pixel(x, y) == bar;
    if (h > 10) {
      run_height = std::max(run_height, h);
    } else if (run_height > 0) {
      heights.push_back(run_height);
      run_height = 0;
    }
  }
  ASSERT_EQ(heights.size(), 2u);
  EXPECT_NEAR(static_cast<double>(heights[1]) / heights[0], 3.0, 0.05);
}

TEST(Charts, HeatmapSpansTheColourScale) {
  Heatmap map{.title = "load",
              .x_label = "expert",
              .y_label = "layer",
              .value_label = "share",
              .row_labels = {"0", "1"},
              .column_labels = {"0", "1", "2"},
              .values = {{0.1, 0.5, NAN}, {0.2, 0.3, 0.9}}};
  const ChartSize size = SizeOf(map);
  RasterSurface r(size.width, size.height);
  Draw(map, r);
  // The smallest value is the darkest cell, the largest the brightest; the missing cell is blank.
  EXPECT_GT(Count(r, Viridis(0)), 2000);
  EXPECT_GT(Count(r, Viridis(1)), 2000);
}

class WriteChartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("sy_plot_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(WriteChartTest, WritesAPngAndAnSvgOfTheSameDrawing) {
  LineChart chart{.title = "loss", .x_label = "step", .y_label = "loss"};
  chart.series.push_back({.name = "train", .x = {1, 2, 3, 4}, .y = {3, 2, NAN, 0.5}});
  const std::string stem = (dir_ / "loss").string();
  ASSERT_TRUE(WriteChart(chart, stem).ok());

  RasterSurface want(SizeOf(chart).width, SizeOf(chart).height);
  Draw(chart, want);
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  ASSERT_NE(png_image_begin_read_from_file(&image, (stem + ".png").c_str()), 0) << image.message;
  image.format = PNG_FORMAT_RGB;
  std::vector<uint8_t> got(PNG_IMAGE_SIZE(image));
  ASSERT_NE(png_image_finish_read(&image, nullptr, got.data(), 0, nullptr), 0) << image.message;
  EXPECT_EQ(static_cast<int>(image.width), want.width());
  EXPECT_EQ(static_cast<int>(image.height), want.height());
  EXPECT_TRUE(got == want.pixels());

  std::ifstream svg(stem + ".svg");
  std::stringstream text;
  text << svg.rdbuf();
  EXPECT_NE(text.str().find("<svg"), std::string::npos);
  EXPECT_NE(text.str().find(">train</text>"), std::string::npos);
}

TEST_F(WriteChartTest, RefusesChartsWithNothingOrMismatchedData) {
  LineChart empty{
      .title = "e", .x_label = "", .y_label = "", .series = {{"s", {1, 2}, {NAN, NAN}}}};
  Status s = WriteChart(empty, (dir_ / "e").string());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no value to draw"), std::string::npos) << s.ToString();
  LineChart mismatched{.title = "m", .x_label = "", .y_label = "", .series = {{"s", {1, 2}, {1}}}};
  s = WriteChart(mismatched, (dir_ / "m").string());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("2 x values and 1 y values"), std::string::npos) << s.ToString();
  BarChart bars{.title = "b", .y_label = "", .categories = {"a"}, .groups = {{"g", {1, 2}}}};
  EXPECT_EQ(WriteChart(bars, (dir_ / "b").string()).code(), StatusCode::kInvalidArgument);
  Heatmap map{.title = "h",
              .x_label = "",
              .y_label = "",
              .value_label = "",
              .row_labels = {"0"},
              .column_labels = {"0", "1"},
              .values = {{1}}};
  EXPECT_EQ(WriteChart(map, (dir_ / "h").string()).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "e.png"));
}

TEST_F(WriteChartTest, NamesAFileItCannotWrite) {
  LineChart chart{.title = "t", .x_label = "", .y_label = "", .series = {{"s", {1, 2}, {1, 2}}}};
  const std::string stem = (dir_ / "no-such-dir" / "t").string();
  Status s = WriteChart(chart, stem);
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find(stem + ".png"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace sy::plot
