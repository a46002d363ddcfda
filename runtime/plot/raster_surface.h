// RasterSurface: a Surface (runtime/plot/surface.h) that draws into an 8-bit RGB raster in memory,
// and writes it as a PNG with libpng. Lines are stamped with a square pen (no anti-aliasing), text
// with the built-in bitmap font.
//
// Ownership: owns its pixels. Thread-safety: one thread at a time.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/plot/surface.h"

namespace sy::plot {

class RasterSurface : public Surface {
 public:
  // A width x height raster filled with `background`; both sizes must be in [1, 16384].
  RasterSurface(int width, int height, Rgb background = {255, 255, 255});

  int width() const override { return width_; }
  int height() const override { return height_; }
  void FillRect(double x, double y, double w, double h, Rgb color) override;
  void Polyline(std::span<const Point> points, Rgb color, double line_width) override;
  void Text(double x, double y, std::string_view text, Rgb color, TextAnchor anchor,
            bool vertical = false) override;

  Rgb pixel(int x, int y) const;
  // Row-major RGB bytes, 3 per pixel, no padding.
  const std::vector<uint8_t>& pixels() const { return pixels_; }

  // Writes the raster as an 8-bit RGB PNG; IOError naming the path when libpng cannot.
  [[nodiscard]] Status WritePng(const std::string& path) const;

 private:
  void Set(int x, int y, Rgb color);
  void Segment(Point a, Point b, Rgb color, int pen);

  int width_;
  int height_;
  std::vector<uint8_t> pixels_;
};

}  // namespace sy::plot
