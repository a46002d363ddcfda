// LineChart drawing (runtime/plot/chart.h): y against x for every series over shared axes.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/plot/axes.h"
#include "runtime/plot/bitmap_font.h"
#include "runtime/plot/chart.h"
#include "runtime/plot/palette.h"

namespace sy::plot {

void DrawLineChart(const LineChart& chart, Surface& s) {
  std::vector<std::string> names;
  std::vector<Rgb> colors;
  for (size_t k = 0; k < chart.series.size(); ++k) {
    names.push_back(chart.series[k].name);
    colors.push_back(SeriesColor(static_cast<int>(k)));
  }
  // A legend, right of the plot, unless the one series has no name.
  const bool legend = chart.series.size() > 1 || (!names.empty() && !names[0].empty());
  const double legend_w = legend ? LegendWidth(names) + 16 : 0;
  const Area area{100, 44, s.width() - 24.0 - legend_w, s.height() - 64.0};
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo;
  double y_lo = x_lo, y_hi = -x_lo;
  for (const Series& series : chart.series) {
    for (size_t i = 0; i < series.x.size() && i < series.y.size(); ++i) {
      if (!std::isfinite(series.x[i]) || !std::isfinite(series.y[i])) continue;
      x_lo = std::min(x_lo, series.x[i]);
      x_hi = std::max(x_hi, series.x[i]);
      y_lo = std::min(y_lo, series.y[i]);
      y_hi = std::max(y_hi, series.y[i]);
    }
  }
  if (!std::isfinite(x_lo)) x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  const std::vector<double> y_ticks = NiceTicks(y_lo, y_hi, 7);
  const std::vector<double> x_ticks = NiceTicks(x_lo, x_hi, 9);
  const Scale y{y_ticks.front(), y_ticks.back(), area.bottom, area.top};
  const Scale x{x_ticks.front(), x_ticks.back(), area.left, area.right};

  DrawLabels(s, area, chart.title, chart.x_label, chart.y_label);
  DrawYTicks(s, area, y, y_ticks);
  const double x_spacing = x_ticks.size() > 1 ? x_ticks[1] - x_ticks[0] : 1.0;
  for (double t : x_ticks) {
    const double px = x(t);
    const Point grid[] = {{px, area.top}, {px, area.bottom}};
    s.Polyline(grid, kGrid, 1);
    const Point tick[] = {{px, area.bottom}, {px, area.bottom + 5}};
    s.Polyline(tick, kFrame, 1);
    s.Text(px, area.bottom + 8 + kTextHeight / 2.0, FormatTick(t, x_spacing), kInk,
           TextAnchor::kMiddle);
  }
  DrawFrame(s, area);

  for (size_t k = 0; k < chart.series.size(); ++k) {
    const Series& series = chart.series[k];
    const Rgb color = colors[k];
    std::vector<Point> run;  // the points since the last missing one
    size_t finite = 0;
    auto flush = [&] {
      if (run.size() > 1) s.Polyline(run, color, 2);
      run.clear();
    };
    for (size_t i = 0; i < series.x.size() && i < series.y.size(); ++i) {
      if (!std::isfinite(series.x[i]) || !std::isfinite(series.y[i])) {
        flush();
        continue;
      }
      run.push_back({x(series.x[i]), y(series.y[i])});
      ++finite;
    }
    flush();
    // Sparse series (evaluations) show their points.
    if (finite <= 40) {
      for (size_t i = 0; i < series.x.size() && i < series.y.size(); ++i) {
        if (!std::isfinite(series.x[i]) || !std::isfinite(series.y[i])) continue;
        s.FillRect(x(series.x[i]) - 3, y(series.y[i]) - 3, 7, 7, color);
      }
    }
  }
  if (legend) DrawLegend(s, area.right + 16, area.top, names, colors);
}

}  // namespace sy::plot
