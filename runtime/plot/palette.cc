#include "runtime/plot/palette.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace sy::plot {

Rgb SeriesColor(int i) {
  static constexpr std::array<Rgb, 10> kTab10 = {{{31, 119, 180},
                                                  {255, 127, 14},
                                                  {44, 160, 44},
                                                  {214, 39, 40},
                                                  {148, 103, 189},
                                                  {140, 86, 75},
                                                  {227, 119, 194},
                                                  {127, 127, 127},
                                                  {188, 189, 34},
                                                  {23, 190, 207}}};
  return kTab10[static_cast<size_t>(((i % 10) + 10) % 10)];
}

Rgb Viridis(double t) {
  // viridis at t = 0, 0.125, ..., 1.
  static constexpr std::array<Rgb, 9> kAnchors = {{{68, 1, 84},
                                                   {71, 44, 122},
                                                   {59, 81, 139},
                                                   {44, 113, 142},
                                                   {33, 144, 141},
                                                   {39, 173, 129},
                                                   {92, 200, 99},
                                                   {170, 220, 50},
                                                   {253, 231, 37}}};
  if (!std::isfinite(t)) t = 0;
  t = std::clamp(t, 0.0, 1.0) * (kAnchors.size() - 1);
  const size_t i = std::min(kAnchors.size() - 2, static_cast<size_t>(t));
  const double f = t - static_cast<double>(i);
  auto mix = [f](uint8_t a, uint8_t b) {
    return static_cast<uint8_t>(std::lround(a + (b - a) * f));
  };
  return {mix(kAnchors[i].r, kAnchors[i + 1].r), mix(kAnchors[i].g, kAnchors[i + 1].g),
          mix(kAnchors[i].b, kAnchors[i + 1].b)};
}

Rgb TextColorOn(Rgb background) {
  const double luma = 0.299 * background.r + 0.587 * background.g + 0.114 * background.b;
  return luma > 140 ? Rgb{0, 0, 0} : Rgb{255, 255, 255};
}

}  // namespace sy::plot
