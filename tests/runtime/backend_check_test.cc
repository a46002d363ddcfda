// SummarizeByOp: the per-operator verdict `switchyard selftest` prints.
#include "runtime/opcheck/backend_check.h"

#include <gtest/gtest.h>

#include <vector>

namespace sy {
namespace {

OpCheckResult Case(const char* op, double nmse, double threshold, bool passed) {
  OpCheckResult r;
  r.op = op;
  r.case_name = "c";
  r.nmse = nmse;
  r.threshold = threshold;
  r.passed = passed;
  return r;
}

TEST(BackendCheckTest, SummarizesPerOperatorInFirstSeenOrder) {
  const std::vector<OpCheckResult> results = {
      Case("Gemm", 1e-7, 1e-6, true),                                      // 10% of its threshold
      Case("Softmax", 3e-6, 1e-6, false), Case("Gemm", 5e-7, 1e-6, true),  // 50%: Gemm's worst
      Case("TopK", 0, 0, true),                                            // exact match: no ratio
  };
  const std::vector<OpCheckSummary> ops = SummarizeByOp(results);
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0].op, "Gemm");
  EXPECT_EQ(ops[0].cases, 2);
  EXPECT_EQ(ops[0].failed, 0);
  EXPECT_DOUBLE_EQ(ops[0].worst_ratio, 0.5);
  EXPECT_EQ(ops[1].op, "Softmax");
  EXPECT_EQ(ops[1].cases, 1);
  EXPECT_EQ(ops[1].failed, 1);
  EXPECT_DOUBLE_EQ(ops[1].worst_ratio, 3.0);
  EXPECT_EQ(ops[2].op, "TopK");
  EXPECT_EQ(ops[2].cases, 1);
  EXPECT_EQ(ops[2].worst_ratio, 0.0);
  EXPECT_TRUE(SummarizeByOp({}).empty());
}

}  // namespace
}  // namespace sy
