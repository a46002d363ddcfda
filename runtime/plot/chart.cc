#include "runtime/plot/chart.h"

#include <algorithm>
#include <cmath>

#include "runtime/plot/axes.h"
#include "runtime/plot/bitmap_font.h"
#include "runtime/plot/raster_surface.h"
#include "runtime/plot/svg_surface.h"

namespace sy::plot {
namespace {

bool AnyFinite(const std::vector<double>& values) {
  return std::any_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); });
}

size_t Longest(const std::vector<std::string>& labels) {
  size_t n = 0;
  for (const std::string& l : labels) n = std::max(n, l.size());
  return n;
}

Status Check(const LineChart& c) {
  bool any = false;
  for (const Series& s : c.series) {
    if (s.x.size() != s.y.size()) {
      return InvalidArgumentError("chart '" + c.title + "': series '" + s.name + "' has " +
                                  std::to_string(s.x.size()) + " x values and " +
                                  std::to_string(s.y.size()) + " y values");
    }
    any = any || AnyFinite(s.y);
  }
  if (!any) return InvalidArgumentError("chart '" + c.title + "': no value to draw");
  return Status::Ok();
}

Status Check(const Heatmap& c) {
  if (c.values.size() != c.row_labels.size()) {
    return InvalidArgumentError("heatmap '" + c.title + "': " + std::to_string(c.values.size()) +
                                " rows of values and " + std::to_string(c.row_labels.size()) +
                                " row labels");
  }
  bool any = false;
  for (const std::vector<double>& row : c.values) {
    if (row.size() != c.column_labels.size()) {
      return InvalidArgumentError("heatmap '" + c.title + "': a row of " +
                                  std::to_string(row.size()) + " values and " +
                                  std::to_string(c.column_labels.size()) + " column labels");
    }
    any = any || AnyFinite(row);
  }
  if (!any) return InvalidArgumentError("heatmap '" + c.title + "': no value to draw");
  return Status::Ok();
}

Status Check(const BarChart& c) {
  bool any = false;
  for (const BarGroup& g : c.groups) {
    if (g.values.size() != c.categories.size()) {
      return InvalidArgumentError("bar chart '" + c.title + "': group '" + g.name + "' has " +
                                  std::to_string(g.values.size()) + " values for " +
                                  std::to_string(c.categories.size()) + " categories");
    }
    any = any || AnyFinite(g.values);
  }
  if (!any) return InvalidArgumentError("bar chart '" + c.title + "': no value to draw");
  return Status::Ok();
}

}  // namespace

ChartSize SizeOf(const Chart& chart) {
  constexpr int kWidth = 800, kHeight = 480;
  if (const auto* bars = std::get_if<BarChart>(&chart)) {
    // Every category label fits under its bars.
    const int slot = TextWidth(static_cast<int>(Longest(bars->categories))) + 16;
    std::vector<std::string> names;
    for (const BarGroup& g : bars->groups) names.push_back(g.name);
    const int width = 110 + slot * static_cast<int>(bars->categories.size()) + 30 +
                      static_cast<int>(LegendWidth(names)) + 16;
    return {std::clamp(width, kWidth, 4000), kHeight};
  }
  if (const auto* map = std::get_if<Heatmap>(&chart)) {
    const int columns = static_cast<int>(map->column_labels.size());
    const int rows = static_cast<int>(map->row_labels.size());
    return {std::clamp(40 * columns + 260, kWidth, 4000),
            std::clamp(28 * rows + 140, kHeight, 4000)};
  }
  return {kWidth, kHeight};
}

void Draw(const Chart& chart, Surface& surface) {
  std::visit(
      [&](const auto& c) {
        using T = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<T, LineChart>) {
          DrawLineChart(c, surface);
        } else if constexpr (std::is_same_v<T, Heatmap>) {
          DrawHeatmap(c, surface);
        } else {
          DrawBarChart(c, surface);
        }
      },
      chart);
}

Status WriteChart(const Chart& chart, const std::string& path_stem) {
  SY_RETURN_IF_ERROR(std::visit([](const auto& c) { return Check(c); }, chart));
  const ChartSize size = SizeOf(chart);
  RasterSurface raster(size.width, size.height);
  Draw(chart, raster);
  SY_RETURN_IF_ERROR(raster.WritePng(path_stem + ".png"));
  SvgSurface svg(size.width, size.height);
  Draw(chart, svg);
  return svg.Write(path_stem + ".svg");
}

}  // namespace sy::plot
