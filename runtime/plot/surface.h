// Surface: what a chart draws on. A chart is laid out once (runtime/plot/chart.h) against this
// interface and rendered twice: into an RGB raster that becomes a PNG (raster_surface.h) and into
// SVG text (svg_surface.h), so the two pictures are the same drawing.
//
// Coordinates are pixels, x to the right and y down from the top-left corner. Text is the built-in
// bitmap font's (runtime/plot/bitmap_font.h): every character advances TextWidth(1) pixels, and
// a line is kTextHeight high; layout uses these metrics for both renderings.
//
// Ownership: a surface owns what it has drawn. Thread-safety: one thread at a time.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace sy::plot {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

struct Point {
  double x = 0, y = 0;
};

// Where a text's x coordinate sits along it.
enum class TextAnchor : uint8_t { kStart, kMiddle, kEnd };

class Surface {
 public:
  virtual ~Surface() = default;
  virtual int width() const = 0;
  virtual int height() const = 0;
  // The rectangle [x, x + w) x [y, y + h), filled.
  virtual void FillRect(double x, double y, double w, double h, Rgb color) = 0;
  // Straight segments through `points`, `line_width` pixels wide.
  virtual void Polyline(std::span<const Point> points, Rgb color, double line_width) = 0;
  // One line of text whose vertical middle is at y; `vertical` turns it to read bottom to top
  // (x is then the middle of the line and y the anchor).
  virtual void Text(double x, double y, std::string_view text, Rgb color, TextAnchor anchor,
                    bool vertical = false) = 0;
};

}  // namespace sy::plot
