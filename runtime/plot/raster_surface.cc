#include "runtime/plot/raster_surface.h"

#include <png.h>

#include <algorithm>
#include <cmath>

#include "runtime/core/check.h"
#include "runtime/plot/bitmap_font.h"

namespace sy::plot {

RasterSurface::RasterSurface(int width, int height, Rgb background)
    : width_(width), height_(height) {
  SY_CHECK(width >= 1 && width <= 16384 && height >= 1 && height <= 16384)
      << "raster size " << width << "x" << height;
  pixels_.resize(static_cast<size_t>(width) * static_cast<size_t>(height) * 3);
  for (size_t i = 0; i < pixels_.size(); i += 3) {
    pixels_[i] = background.r;
    pixels_[i + 1] = background.g;
    pixels_[i + 2] = background.b;
  }
}

void RasterSurface::Set(int x, int y, Rgb color) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  const size_t i =
      (static_cast<size_t>(y) * static_cast<size_t>(width_) + static_cast<size_t>(x)) * 3;
  pixels_[i] = color.r;
  pixels_[i + 1] = color.g;
  pixels_[i + 2] = color.b;
}

Rgb RasterSurface::pixel(int x, int y) const {
  SY_CHECK(x >= 0 && y >= 0 && x < width_ && y < height_) << "pixel " << x << "," << y;
  const size_t i =
      (static_cast<size_t>(y) * static_cast<size_t>(width_) + static_cast<size_t>(x)) * 3;
  return {pixels_[i], pixels_[i + 1], pixels_[i + 2]};
}

void RasterSurface::FillRect(double x, double y, double w, double h, Rgb color) {
  const int x0 = std::max(0, static_cast<int>(std::lround(x)));
  const int y0 = std::max(0, static_cast<int>(std::lround(y)));
  const int x1 = std::min(width_, static_cast<int>(std::lround(x + w)));
  const int y1 = std::min(height_, static_cast<int>(std::lround(y + h)));
  for (int yy = y0; yy < y1; ++yy) {
    for (int xx = x0; xx < x1; ++xx) Set(xx, yy, color);
  }
}

// A square pen of `pen` pixels walked along the segment one pixel step at a time.
void RasterSurface::Segment(Point a, Point b, Rgb color, int pen) {
  if (!std::isfinite(a.x) || !std::isfinite(a.y) || !std::isfinite(b.x) || !std::isfinite(b.y)) {
    return;
  }
  const double dx = b.x - a.x, dy = b.y - a.y;
  const int steps =
      std::min(1 << 16, static_cast<int>(std::ceil(std::max(std::fabs(dx), std::fabs(dy)))));
  const int lo = -(pen - 1) / 2, hi = pen / 2;
  for (int s = 0; s <= steps; ++s) {
    const double t = steps > 0 ? static_cast<double>(s) / steps : 0.0;
    const int cx = static_cast<int>(std::lround(a.x + t * dx));
    const int cy = static_cast<int>(std::lround(a.y + t * dy));
    for (int oy = lo; oy <= hi; ++oy) {
      for (int ox = lo; ox <= hi; ++ox) Set(cx + ox, cy + oy, color);
    }
  }
}

void RasterSurface::Polyline(std::span<const Point> points, Rgb color, double line_width) {
  const int pen = std::max(1, static_cast<int>(std::lround(line_width)));
  if (points.size() == 1) Segment(points[0], points[0], color, pen);
  for (size_t i = 1; i < points.size(); ++i) Segment(points[i - 1], points[i], color, pen);
}

void RasterSurface::Text(double x, double y, std::string_view text, Rgb color, TextAnchor anchor,
                         bool vertical) {
  const int n = static_cast<int>(text.size());
  const double w = TextWidth(n);
  double start = 0;  // along the text's direction
  switch (anchor) {
    case TextAnchor::kStart:
      start = 0;
      break;
    case TextAnchor::kMiddle:
      start = -w / 2;
      break;
    case TextAnchor::kEnd:
      start = -w;
      break;
  }
  const int top = static_cast<int>(std::lround((vertical ? x : y) - kTextHeight / 2.0));
  const int along0 =
      static_cast<int>(std::lround((vertical ? y : x) - (vertical ? start : -start)));
  for (int i = 0; i < n; ++i) {
    for (int col = 0; col < kGlyphWidth; ++col) {
      for (int row = 0; row < kGlyphHeight; ++row) {
        if (!GlyphPixel(text[static_cast<size_t>(i)], col, row)) continue;
        for (int sy = 0; sy < kFontScale; ++sy) {
          for (int sx = 0; sx < kFontScale; ++sx) {
            const int u = i * kCharAdvance + col * kFontScale + sx;  // along the text
            const int v = row * kFontScale + sy;                     // down the glyph
            if (vertical) {
              Set(top + v, along0 - u, color);  // reads bottom to top
            } else {
              Set(along0 + u, top + v, color);
            }
          }
        }
      }
    }
  }
}

Status RasterSurface::WritePng(const std::string& path) const {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width_);
  image.height = static_cast<png_uint_32>(height_);
  image.format = PNG_FORMAT_RGB;
  if (png_image_write_to_file(&image, path.c_str(), 0, pixels_.data(), width_ * 3, nullptr) == 0) {
    const std::string message = image.message;
    png_image_free(&image);
    return IOError("cannot write the PNG " + path + ": " + message);
  }
  return Status::Ok();
}

}  // namespace sy::plot
