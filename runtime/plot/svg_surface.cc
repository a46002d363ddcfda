#include "runtime/plot/svg_surface.h"

#include <cmath>
#include <cstdio>

#include "runtime/core/file_creation.h"
#include "runtime/plot/bitmap_font.h"

namespace sy::plot {
namespace {

std::string Hex(Rgb c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", c.r, c.g, c.b);
  return buf;
}

// A coordinate with two decimals at most ("12.5", "3").
std::string Num(double v) {
  if (!std::isfinite(v)) v = 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

}  // namespace

std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
  }
  return out;
}

SvgSurface::SvgSurface(int width, int height, Rgb background) : width_(width), height_(height) {
  FillRect(0, 0, width, height, background);
}

void SvgSurface::FillRect(double x, double y, double w, double h, Rgb color) {
  body_ += "<rect x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" width=\"" + Num(w) + "\" height=\"" +
           Num(h) + "\" fill=\"" + Hex(color) + "\"/>\n";
}

void SvgSurface::Polyline(std::span<const Point> points, Rgb color, double line_width) {
  if (points.empty()) return;
  body_ += "<polyline fill=\"none\" stroke=\"" + Hex(color) + "\" stroke-width=\"" +
           Num(line_width) + "\" stroke-linejoin=\"round\" points=\"";
  for (size_t i = 0; i < points.size(); ++i) {
    if (i > 0) body_ += ' ';
    body_ += Num(points[i].x) + "," + Num(points[i].y);
  }
  body_ += "\"/>\n";
}

void SvgSurface::Text(double x, double y, std::string_view text, Rgb color, TextAnchor anchor,
                      bool vertical) {
  const char* a = "start";
  switch (anchor) {
    case TextAnchor::kStart:
      a = "start";
      break;
    case TextAnchor::kMiddle:
      a = "middle";
      break;
    case TextAnchor::kEnd:
      a = "end";
      break;
  }
  // Monospace at the size whose advance (0.6 em in common monospace fonts) is the bitmap font's.
  body_ += "<text x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" fill=\"" + Hex(color) +
           "\" font-family=\"monospace\" font-size=\"" + Num(kCharAdvance / 0.6) +
           "\" text-anchor=\"" + a + "\" dominant-baseline=\"central\"";
  if (vertical) body_ += " transform=\"rotate(-90 " + Num(x) + " " + Num(y) + ")\"";
  body_ += ">" + XmlEscape(text) + "</text>\n";
}

std::string SvgSurface::Document() const {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
         "version=\"1.1\" width=\"" +
         std::to_string(width_) + "\" height=\"" + std::to_string(height_) + "\" viewBox=\"0 0 " +
         std::to_string(width_) + " " + std::to_string(height_) + "\">\n" + body_ + "</svg>\n";
}

Status SvgSurface::Write(const std::string& path) const {
  return WriteFileReplacing(path, Document()).WithContext("the SVG chart");
}

}  // namespace sy::plot
