// The colours of the charts: a qualitative palette for series (matplotlib's tab10) and a
// sequential colour map for heatmaps (viridis, by its anchor points).
//
// Thread-safety: pure functions.
#pragma once

#include "runtime/plot/surface.h"

namespace sy::plot {

// The colour of series i (cycles after 10).
Rgb SeriesColor(int i);

// Viridis at t in [0, 1] (clamped), dark purple to yellow.
Rgb Viridis(double t);

// Black or white, whichever reads better on `background`.
Rgb TextColorOn(Rgb background);

}  // namespace sy::plot
