// Heatmap drawing (runtime/plot/chart.h): one cell per (row, column) coloured by value on the
// viridis scale from the smallest to the largest value, the value written in the cell when it
// fits, and the colour scale on the right.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/plot/axes.h"
#include "runtime/plot/bitmap_font.h"
#include "runtime/plot/chart.h"
#include "runtime/plot/palette.h"

namespace sy::plot {

void DrawHeatmap(const Heatmap& chart, Surface& s) {
  size_t longest_row = 0;
  for (const std::string& l : chart.row_labels) longest_row = std::max(longest_row, l.size());
  const double left = 40 + TextWidth(static_cast<int>(longest_row)) + 10;
  const Area area{left, 44, s.width() - 130.0, s.height() - 64.0};
  const size_t rows = chart.values.size();
  const size_t columns = chart.column_labels.size();
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const std::vector<double>& row : chart.values) {
    for (double v : row) {
      if (!std::isfinite(v)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  auto norm = [&](double v) { return hi > lo ? (v - lo) / (hi - lo) : 0.5; };

  DrawLabels(s, area, chart.title, chart.x_label, chart.y_label);
  const double cw = (area.right - area.left) / static_cast<double>(std::max<size_t>(1, columns));
  const double ch = (area.bottom - area.top) / static_cast<double>(std::max<size_t>(1, rows));
  // Column labels every `stride` columns, so that they do not overlap.
  size_t longest_column = 1;
  for (const std::string& l : chart.column_labels)
    longest_column = std::max(longest_column, l.size());
  const auto stride = static_cast<size_t>(
      std::max(1.0, std::ceil((TextWidth(static_cast<int>(longest_column)) + 8) / cw)));
  const bool values_fit = cw >= TextWidth(5) + 4 && ch >= kTextHeight + 4;
  for (size_t r = 0; r < rows; ++r) {
    const double py = area.top + ch * static_cast<double>(r);
    s.Text(area.left - 8, py + ch / 2, chart.row_labels[r], kInk, TextAnchor::kEnd);
    for (size_t c = 0; c < columns && c < chart.values[r].size(); ++c) {
      const double v = chart.values[r][c];
      if (!std::isfinite(v)) continue;
      const double px = area.left + cw * static_cast<double>(c);
      const Rgb color = Viridis(norm(v));
      s.FillRect(px, py, cw, ch, color);
      if (values_fit) {
        s.Text(px + cw / 2, py + ch / 2, FormatValue(v), TextColorOn(color), TextAnchor::kMiddle);
      }
    }
  }
  for (size_t c = 0; c < columns; c += stride) {
    s.Text(area.left + cw * (static_cast<double>(c) + 0.5), area.bottom + 8 + kTextHeight / 2.0,
           chart.column_labels[c], kInk, TextAnchor::kMiddle);
  }
  DrawFrame(s, area);

  // The colour scale: a vertical gradient with its two ends labelled.
  const double bar_left = area.right + 20, bar_w = 18;
  const int steps = 64;
  const double step_h = (area.bottom - area.top) / steps;
  for (int i = 0; i < steps; ++i) {
    s.FillRect(bar_left, area.bottom - step_h * (i + 1), bar_w, step_h + 0.5,
               Viridis((i + 0.5) / steps));
  }
  const Area bar{bar_left, area.top, bar_left + bar_w, area.bottom};
  DrawFrame(s, bar);
  s.Text(bar_left + bar_w + 6, area.top, FormatValue(hi), kInk, TextAnchor::kStart);
  s.Text(bar_left + bar_w + 6, area.bottom, FormatValue(lo), kInk, TextAnchor::kStart);
  s.Text(bar_left + bar_w + 6 + kTextHeight, (area.top + area.bottom) / 2, chart.value_label, kInk,
         TextAnchor::kMiddle, true);
}

}  // namespace sy::plot
