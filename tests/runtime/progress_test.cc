// ProgressLine (runtime/core/progress.h): what it prints as lines and as a bar, how often, and
// that nothing is printed for a load that never reported.
#include "runtime/core/progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace sy {
namespace {

std::string Contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

TEST(ProgressLine, DescribesCountsAndBytes) {
  EXPECT_EQ(ProgressLine::Describe(12, 40, ProgressUnit::kCount), "30% 12/40");
  EXPECT_EQ(ProgressLine::Describe(3 << 29, int64_t{3} << 30, ProgressUnit::kBytes),
            "50% 1.5/3.0 GiB");
  EXPECT_EQ(ProgressLine::Describe(512 << 10, 2 << 20, ProgressUnit::kBytes), "25% 0.5/2.0 MiB");
  EXPECT_EQ(ProgressLine::Describe(5, 0, ProgressUnit::kCount), "0% 5/0");
}

TEST(ProgressLine, LinesAreThrottledAndTheLastOneIsPrinted) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressLine p(f, "loading", ProgressUnit::kCount, ProgressStyle::kLines,
                   /*line_interval_s=*/3600);
    for (int i = 1; i <= 100; ++i) p.Update(i, 100);
    p.Finish();
  }
  const std::string out = Contents(f);
  // An hour between lines: only the final one.
  EXPECT_EQ(out.rfind("loading: 100% 100/100 ", 0), 0u) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  std::fclose(f);

  f = std::tmpfile();
  {
    ProgressLine p(f, "loading", ProgressUnit::kCount, ProgressStyle::kLines, 0);
    for (int i = 1; i <= 3; ++i) p.Update(i, 3);
  }  // the destructor finishes
  const std::string every = Contents(f);
  // No interval: a line per update, and the destructor's final one.
  EXPECT_EQ(std::count(every.begin(), every.end(), '\n'), 4) << every;
  std::fclose(f);
}

TEST(ProgressLine, ABarIsRewrittenInPlaceAndEndsWithANewline) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressLine p(f, "bench", ProgressUnit::kCount, ProgressStyle::kBar);
    p.Update(1, 2);
    p.Update(2, 2);
    p.Finish();
  }
  const std::string out = Contents(f);
  EXPECT_EQ(out.front(), '\r');
  EXPECT_NE(out.find("bench [####################] 100% 2/2"), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  std::fclose(f);
}

TEST(ProgressLine, PrintsNothingWithoutAnUpdate) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressLine p(f, "loading", ProgressUnit::kCount, ProgressStyle::kLines);
    p.Finish();
  }
  EXPECT_EQ(Contents(f), "");
  std::fclose(f);
}

}  // namespace
}  // namespace sy
