// The axes shared by the charts (runtime/plot/chart.h): round tick values, their labels, the
// mapping of data to pixels, the frame (title, axis labels, ticks, grid) around a plot area, and
// the legend.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "runtime/plot/surface.h"

namespace sy::plot {

// Ticks at multiples of 1, 2 or 5 x 10^k covering [lo, hi], at most max_ticks of them (at least
// two when lo < hi). lo == hi gives ticks around the value.
std::vector<double> NiceTicks(double lo, double hi, int max_ticks);

// A tick label with as many decimals as the tick spacing needs ("0.25", "1500", "-2").
std::string FormatTick(double value, double spacing);

// A number for a label, 3 significant digits ("0.273", "18.2k", "4.1M").
std::string FormatValue(double value);

// A linear map from [lo, hi] to pixels [p0, p1].
struct Scale {
  double lo = 0, hi = 1, p0 = 0, p1 = 1;
  double operator()(double v) const {
    return hi == lo ? (p0 + p1) / 2 : p0 + (v - lo) / (hi - lo) * (p1 - p0);
  }
};

// The plot area of a chart, in pixels.
struct Area {
  double left = 0, top = 0, right = 0, bottom = 0;
};

inline constexpr Rgb kInk{34, 34, 34};
inline constexpr Rgb kGrid{225, 225, 225};
inline constexpr Rgb kFrame{120, 120, 120};

// The title above `area`, the x label below it and the y label (vertical) left of it.
void DrawLabels(Surface& s, const Area& area, const std::string& title, const std::string& x_label,
                const std::string& y_label);

// Horizontal grid lines and labels at `ticks` of the y scale, left of the area.
void DrawYTicks(Surface& s, const Area& area, const Scale& y, const std::vector<double>& ticks);

// The area's outline.
void DrawFrame(Surface& s, const Area& area);

// A legend, a colour swatch and a name per entry, with its top-left corner at (x, y); charts
// put it right of their plot area, LegendWidth(names) wide.
double LegendWidth(const std::vector<std::string>& names);
void DrawLegend(Surface& s, double x, double y, const std::vector<std::string>& names,
                const std::vector<Rgb>& colors);

}  // namespace sy::plot
