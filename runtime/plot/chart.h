// Charts of training runs and benchmarks: line charts (loss, tokens/s, accuracy against the step),
// heatmaps (expert load, layer x expert) and grouped bar charts (policies side by side). Each is a
// plain value; Draw lays it out on a Surface (runtime/plot/surface.h), and WriteChart renders it
// twice, to STEM.png (libpng) and STEM.svg, from the one layout.
//
//   plot::LineChart loss{.title = "loss", .x_label = "step", .y_label = "loss"};
//   loss.series.push_back({.name = "train", .x = steps, .y = losses});
//   SY_RETURN_IF_ERROR(plot::WriteChart(loss, "runs/tiny/plots/loss"));
//
// Values that are not finite (NaN for a missing value) are left out: a line skips the point, a
// bar or a heatmap cell is not drawn.
//
// Ownership: value types. Thread-safety: pure functions of their arguments (and the files they
// write).
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/plot/surface.h"

namespace sy::plot {

struct Series {
  std::string name = {};
  std::vector<double> x = {};
  std::vector<double> y = {};  // same length as x
};

struct LineChart {
  std::string title = {};
  std::string x_label = {};
  std::string y_label = {};
  std::vector<Series> series = {};  // each in its own colour, named in the legend
};

struct Heatmap {
  std::string title = {};
  std::string x_label = {};      // along the columns
  std::string y_label = {};      // along the rows
  std::string value_label = {};  // what the colour scale measures
  std::vector<std::string> row_labels = {};
  std::vector<std::string> column_labels = {};
  std::vector<std::vector<double>> values = {};  // [rows][columns]
};

struct BarGroup {
  std::string name = {};            // the legend entry
  std::vector<double> values = {};  // one per category
};

struct BarChart {
  std::string title = {};
  std::string y_label = {};
  std::vector<std::string> categories = {};  // along x
  std::vector<BarGroup> groups = {};         // side by side within each category
};

using Chart = std::variant<LineChart, Heatmap, BarChart>;

struct ChartSize {
  int width = 0;
  int height = 0;
};

// The size a chart is drawn at: 800 x 480 pixels, wider for a bar chart or heatmap with many
// categories or columns.
ChartSize SizeOf(const Chart& chart);

// Lays `chart` out over the whole of `surface`.
void Draw(const Chart& chart, Surface& surface);
void DrawLineChart(const LineChart& chart, Surface& surface);
void DrawHeatmap(const Heatmap& chart, Surface& surface);
void DrawBarChart(const BarChart& chart, Surface& surface);

// Writes `path_stem`.png and `path_stem`.svg at SizeOf(chart). InvalidArgument for a chart with
// nothing to draw (no finite value) or mismatched lengths; IOError naming a file that cannot be
// written.
[[nodiscard]] Status WriteChart(const Chart& chart, const std::string& path_stem);

}  // namespace sy::plot
