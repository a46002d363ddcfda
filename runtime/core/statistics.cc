#include "runtime/core/statistics.h"

#include <algorithm>
#include <vector>

namespace sy {

double Median(std::span<const double> values) {
  if (values.empty()) return 0.0;
  std::vector<double> v(values.begin(), values.end());
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  // The lower middle value is the largest of the elements nth_element left before mid.
  const double lower = *std::max_element(v.begin(), v.begin() + mid);
  return 0.5 * (lower + upper);
}

}  // namespace sy
