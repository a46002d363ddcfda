#include "runtime/core/statistics.h"

#include <gtest/gtest.h>

#include <vector>

namespace sy {
namespace {

TEST(Median, OddCountIsTheMiddleValue) {
  const std::vector<double> v = {5.0, 1.0, 4.0, 2.0, 3.0};
  EXPECT_EQ(Median(v), 3.0);
  EXPECT_EQ(Median(std::vector<double>{7.5}), 7.5);
}

TEST(Median, EvenCountIsTheMeanOfTheTwoMiddleValues) {
  EXPECT_EQ(Median(std::vector<double>{4.0, 1.0, 10.0, 2.0}), 3.0);  // (2 + 4) / 2
  EXPECT_EQ(Median(std::vector<double>{2.0, 1.0}), 1.5);
  EXPECT_EQ(Median(std::vector<double>{-1.0, -1.0, 6.0, 6.0}), 2.5);
}

TEST(Median, EmptyIsZero) { EXPECT_EQ(Median({}), 0.0); }

TEST(Median, LeavesTheInputAsItWas) {
  const std::vector<double> v = {3.0, 1.0, 2.0};
  EXPECT_EQ(Median(v), 2.0);
  EXPECT_EQ(v, (std::vector<double>{3.0, 1.0, 2.0}));
}

}  // namespace
}  // namespace sy
