#include "runtime/plot/axes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/plot/bitmap_font.h"

namespace sy::plot {

std::vector<double> NiceTicks(double lo, double hi, int max_ticks) {
  max_ticks = std::max(2, max_ticks);
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {0.0, 1.0};
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) {
    const double pad = lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / (max_ticks - 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude * 10;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  }
  std::vector<double> ticks;
  const double first = std::floor(lo / step) * step;
  for (double t = first; t <= hi + step * 1e-9; t += step) {
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  }
  if (ticks.back() < hi) ticks.push_back(ticks.back() + step);
  return ticks;
}

std::string FormatTick(double value, double spacing) {
  int decimals = 0;
  if (spacing > 0 && spacing < 1) {
    decimals = std::min(6, static_cast<int>(std::ceil(-std::log10(spacing) - 1e-9)));
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

std::string FormatValue(double value) {
  char buf[64];
  const double a = std::fabs(value);
  if (a >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.3gG", value / 1e9);
  } else if (a >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.3gM", value / 1e6);
  } else if (a >= 1e4) {
    std::snprintf(buf, sizeof buf, "%.3gk", value / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g", value);
  }
  return buf;
}

void DrawLabels(Surface& s, const Area& area, const std::string& title, const std::string& x_label,
                const std::string& y_label) {
  const double mid_x = (area.left + area.right) / 2;
  s.Text(mid_x, area.top / 2, title, kInk, TextAnchor::kMiddle);
  s.Text(mid_x, s.height() - kTextHeight, x_label, kInk, TextAnchor::kMiddle);
  s.Text(kTextHeight, (area.top + area.bottom) / 2, y_label, kInk, TextAnchor::kMiddle, true);
}

void DrawYTicks(Surface& s, const Area& area, const Scale& y, const std::vector<double>& ticks) {
  const double spacing = ticks.size() > 1 ? ticks[1] - ticks[0] : 1.0;
  for (double t : ticks) {
    const double py = y(t);
    const Point grid[] = {{area.left, py}, {area.right, py}};
    s.Polyline(grid, kGrid, 1);
    const Point tick[] = {{area.left - 5, py}, {area.left, py}};
    s.Polyline(tick, kFrame, 1);
    s.Text(area.left - 8, py, FormatTick(t, spacing), kInk, TextAnchor::kEnd);
  }
}

void DrawFrame(Surface& s, const Area& area) {
  const Point box[] = {{area.left, area.top},
                       {area.right, area.top},
                       {area.right, area.bottom},
                       {area.left, area.bottom},
                       {area.left, area.top}};
  s.Polyline(box, kFrame, 1);
}

namespace {
constexpr double kSwatch = 18, kPad = 8, kRow = kTextHeight + 8;
}  // namespace

double LegendWidth(const std::vector<std::string>& names) {
  size_t longest = 0;
  for (const std::string& n : names) longest = std::max(longest, n.size());
  return kPad + kSwatch + 6 + TextWidth(static_cast<int>(longest)) + kPad;
}

void DrawLegend(Surface& s, double x, double y, const std::vector<std::string>& names,
                const std::vector<Rgb>& colors) {
  if (names.empty() || colors.empty()) return;
  const double w = LegendWidth(names);
  const double h = kPad + kRow * static_cast<double>(names.size()) - 8 + kPad;
  const Point box[] = {{x, y}, {x + w, y}, {x + w, y + h}, {x, y + h}, {x, y}};
  s.Polyline(box, kGrid, 1);
  for (size_t i = 0; i < names.size(); ++i) {
    const double cy = y + kPad + kRow * static_cast<double>(i) + kTextHeight / 2.0;
    s.FillRect(x + kPad, cy - 3, kSwatch, 6, colors[i % colors.size()]);
    s.Text(x + kPad + kSwatch + 6, cy, names[i], kInk, TextAnchor::kStart);
  }
}

}  // namespace sy::plot
