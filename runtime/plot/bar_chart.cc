// BarChart drawing (runtime/plot/chart.h): for each category, one bar per group side by side,
// from zero, each with its value above it.
#include <algorithm>
#include <cmath>

#include "runtime/plot/axes.h"
#include "runtime/plot/bitmap_font.h"
#include "runtime/plot/chart.h"
#include "runtime/plot/palette.h"

namespace sy::plot {

void DrawBarChart(const BarChart& chart, Surface& s) {
  std::vector<std::string> names;
  std::vector<Rgb> colors;
  for (size_t g = 0; g < chart.groups.size(); ++g) {
    names.push_back(chart.groups[g].name);
    colors.push_back(SeriesColor(static_cast<int>(g)));
  }
  // A legend, right of the plot, unless the one group has no name.
  const bool legend = chart.groups.size() > 1 || (!names.empty() && !names[0].empty());
  const double legend_w = legend ? LegendWidth(names) + 16 : 0;
  const Area area{110, 44, s.width() - 30.0 - legend_w, s.height() - 64.0};
  double lo = 0, hi = 0;
  for (const BarGroup& g : chart.groups) {
    for (double v : g.values) {
      if (!std::isfinite(v)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (hi == lo) hi = lo + 1;
  const std::vector<double> ticks = NiceTicks(lo, hi + (hi - lo) * 0.08, 7);
  const Scale y{ticks.front(), ticks.back(), area.bottom, area.top};
  DrawLabels(s, area, chart.title, "", chart.y_label);
  DrawYTicks(s, area, y, ticks);

  const size_t categories = chart.categories.size();
  const size_t groups = std::max<size_t>(1, chart.groups.size());
  const double slot =
      (area.right - area.left) / static_cast<double>(std::max<size_t>(1, categories));
  const double bar_w = slot * 0.8 / static_cast<double>(groups);
  for (size_t c = 0; c < categories; ++c) {
    const double slot_left = area.left + slot * static_cast<double>(c);
    for (size_t g = 0; g < chart.groups.size(); ++g) {
      const double v = c < chart.groups[g].values.size() ? chart.groups[g].values[c] : NAN;
      if (!std::isfinite(v)) continue;
      const double px = slot_left + slot * 0.1 + bar_w * static_cast<double>(g);
      const double top = y(std::max(v, 0.0)), bottom = y(std::min(v, 0.0));
      s.FillRect(px, top, bar_w, std::max(1.0, bottom - top), colors[g]);
      if (bar_w >= TextWidth(4)) {
        s.Text(px + bar_w / 2, top - 4 - kTextHeight / 2.0, FormatValue(v), kInk,
               TextAnchor::kMiddle);
      }
    }
    s.Text(slot_left + slot / 2, area.bottom + 8 + kTextHeight / 2.0, chart.categories[c], kInk,
           TextAnchor::kMiddle);
  }
  const Point zero[] = {{area.left, y(0)}, {area.right, y(0)}};
  s.Polyline(zero, kFrame, 1);
  DrawFrame(s, area);
  if (legend) DrawLegend(s, area.right + 16, area.top, names, colors);
}

}  // namespace sy::plot
