// The built-in bitmap font of the plots: 5x7 pixel glyphs of printable ASCII (32..126), drawn at
// an integer scale. Charts need only labels and numbers, and a font of their own keeps the PNGs
// free of a font library and identical on every machine. Characters outside the range draw as '?'.
//
// Thread-safety: constant data.
#pragma once

#include <cstdint>
#include <string_view>

namespace sy::plot {

inline constexpr int kGlyphWidth = 5;   // pixels, before scaling
inline constexpr int kGlyphHeight = 7;  // pixels, before scaling
inline constexpr int kFontScale = 2;    // the charts' scale
// One character's advance and a line's height at kFontScale, in pixels.
inline constexpr int kCharAdvance = (kGlyphWidth + 1) * kFontScale;
inline constexpr int kTextHeight = kGlyphHeight * kFontScale;

// The width in pixels of `n` characters at kFontScale.
inline constexpr int TextWidth(int n) { return n > 0 ? n * kCharAdvance - kFontScale : 0; }

// Whether pixel (col, row) of character c's glyph is set; col in [0, 5), row in [0, 7) from the
// top.
bool GlyphPixel(char c, int col, int row);

}  // namespace sy::plot
