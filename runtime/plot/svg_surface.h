// SvgSurface: a Surface (runtime/plot/surface.h) that writes SVG 1.1 elements as text: rects,
// polylines and monospace text (sized to the bitmap font's metrics, so the layout matches the
// PNG). Text is XML-escaped.
//
// Ownership: owns the document text. Thread-safety: one thread at a time.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "runtime/core/status.h"
#include "runtime/plot/surface.h"

namespace sy::plot {

class SvgSurface : public Surface {
 public:
  SvgSurface(int width, int height, Rgb background = {255, 255, 255});

  int width() const override { return width_; }
  int height() const override { return height_; }
  void FillRect(double x, double y, double w, double h, Rgb color) override;
  void Polyline(std::span<const Point> points, Rgb color, double line_width) override;
  void Text(double x, double y, std::string_view text, Rgb color, TextAnchor anchor,
            bool vertical = false) override;

  // The whole document, closed.
  std::string Document() const;
  // Writes Document() to `path`; IOError naming the path.
  [[nodiscard]] Status Write(const std::string& path) const;

 private:
  int width_;
  int height_;
  std::string body_;
};

// `text` with &, <, >, " and ' escaped, and control characters dropped.
std::string XmlEscape(std::string_view text);

}  // namespace sy::plot
