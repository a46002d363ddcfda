#include "storage/cache/access_trace.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "tests/storage/test_util.h"

namespace sy::storage {
namespace {

TEST(AccessTraceTest, ParsesTheDocumentedFormat) {
  std::string text =
      "# switchyard expert trace v1\n"
      "layers 2 experts 8\n"
      "# a comment\n"
      "0 0 1 5\n"
      "0 1 7\n"
      "\n"
      "3 0 2\n";
  Result<AccessTrace> trace = ParseTrace(text, "t.trace");
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->num_layers, 2u);
  EXPECT_EQ(trace->num_experts, 8u);
  ASSERT_EQ(trace->accesses.size(), 4u);
  EXPECT_EQ(trace->accesses[1].expert, 5u);
  EXPECT_EQ(trace->accesses[2].layer, 1u);
  EXPECT_EQ(trace->accesses[3].step, 3u);
  EXPECT_EQ(trace->num_steps(), 4u);
  Result<AccessTrace> again = ParseTrace(FormatTrace(*trace), "again");
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->accesses.size(), trace->accesses.size());
  for (size_t i = 0; i < trace->accesses.size(); ++i) {
    EXPECT_EQ(again->accesses[i].step, trace->accesses[i].step);
    EXPECT_EQ(again->accesses[i].layer, trace->accesses[i].layer);
    EXPECT_EQ(again->accesses[i].expert, trace->accesses[i].expert);
  }
}

TEST(AccessTraceTest, ErrorsNameTheLine) {
  std::string header = "# switchyard expert trace v1\nlayers 2 experts 8\n";
  Result<AccessTrace> bad = ParseTrace(header + "0 0 9\n", "x.trace");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("x.trace line 3"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(ParseTrace(header + "1 0 1\n0 0 1\n", "x").ok());  // steps go back
  EXPECT_FALSE(ParseTrace(header + "0 2 1\n", "x").ok());         // layer out of range
  EXPECT_FALSE(ParseTrace("layers 2 experts 8\n", "x").ok());     // no header
  EXPECT_FALSE(ParseTrace("# switchyard expert trace v1\n0 0 1\n", "x").ok());
}

TEST(AccessTraceTest, FileRoundTrip) {
  testing::TempDir dir;
  ZipfTraceOptions options;
  options.steps = 20;
  Result<AccessTrace> trace = GenerateZipfTrace(options);
  ASSERT_TRUE(trace.ok());
  ASSERT_TRUE(WriteTraceFile(dir.File("z.trace"), *trace).ok());
  Result<AccessTrace> back = ReadTraceFile(dir.File("z.trace"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->accesses.size(), trace->accesses.size());
  EXPECT_EQ(ReadTraceFile(dir.File("missing")).status().code(), StatusCode::kNotFound);
}

TEST(ZipfTraceTest, RankFrequenciesFollowZipf) {
  // One token, top-1: the accesses are plain Zipf draws over each layer's ranking.
  ZipfTraceOptions options;
  options.num_layers = 1;
  options.num_experts = 16;
  options.top_k = 1;
  options.tokens_per_step = 1;
  options.steps = 40000;
  options.zipf_s = 1.0;
  Result<AccessTrace> trace = GenerateZipfTrace(options);
  ASSERT_TRUE(trace.ok());
  std::map<uint32_t, double> counts;
  for (const Access& a : trace->accesses) counts[a.expert] += 1;
  std::vector<double> sorted;
  for (auto& [expert, count] : counts) sorted.push_back(count / options.steps);
  std::sort(sorted.rbegin(), sorted.rend());
  double harmonic = 0;
  for (int r = 1; r <= 16; ++r) harmonic += 1.0 / r;
  for (int r = 0; r < 4; ++r) {
    double expected = 1.0 / (r + 1) / harmonic;
    EXPECT_NEAR(sorted[r], expected, 0.01) << "rank " << r;
  }
}

TEST(ZipfTraceTest, TopKIsDistinctAndDriftMovesTheHotSet) {
  ZipfTraceOptions options;
  options.num_layers = 2;
  options.num_experts = 32;
  options.top_k = 4;
  options.tokens_per_step = 1;
  options.steps = 400;
  options.zipf_s = 1.5;
  options.drift_every = 200;
  options.drift_shift = 16;
  Result<AccessTrace> trace = GenerateZipfTrace(options);
  ASSERT_TRUE(trace.ok());
  EXPECT_EQ(trace->accesses.size(), 400u * 2 * 4);
  std::map<uint32_t, int> first;
  std::map<uint32_t, int> second;
  for (const Access& a : trace->accesses) {
    if (a.layer != 0) continue;
    (a.step < 200 ? first : second)[a.expert]++;
  }
  auto hottest = [](const std::map<uint32_t, int>& m) {
    return std::max_element(m.begin(), m.end(),
                            [](auto& a, auto& b) { return a.second < b.second; })
        ->first;
  };
  EXPECT_NE(hottest(first), hottest(second));
  EXPECT_FALSE(GenerateZipfTrace(ZipfTraceOptions{1, 4, 1, 5}).ok());  // top_k > experts
}

}  // namespace
}  // namespace sy::storage
