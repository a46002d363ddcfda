// Summary statistics of measured samples (bench timings, bandwidths, latency-model fits).
//
// Thread-safety: pure functions.
#pragma once

#include <span>

namespace sy {

// The median of `values`: the middle value of an odd count, the mean of the two middle values of
// an even count, and 0 for an empty sample (nothing measured). `values` is not modified and need
// not be sorted.
double Median(std::span<const double> values);

}  // namespace sy
