// The placement rules of the CPU-side policies on hand-made numbers (Fiddler's test, MoNDE's H and
// its alpha tuning by replay), the expert profile file's parser and errors, and the
// MixedExpertRunner that executes a placement: every expert's output equals LocalExpertCompute's
// wherever it ran.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "inference/offload/cpu_expert_executor.h"
#include "inference/offload/expert_profile.h"
#include "inference/offload/latency_model.h"
#include "inference/offload/mixed_expert_runner.h"
#include "tests/inference/offload/offload_test_util.h"

namespace sy::offload {
namespace {

constexpr double kMs = 1e-3;

// cpu(s) = s ms; device(s) = 0.1 ms + 0.02 ms per row; one transfer 4 ms of a 4 MB expert.
ExpertLatencyModel HandMadeModel() {
  ExpertLatencyModel m;
  m.cpu = {{1, 1 * kMs}, {16, 16 * kMs}};
  m.device = {{1, 0.12 * kMs}, {16, 0.42 * kMs}};
  m.transfer_seconds = 4 * kMs;
  m.expert_bytes = 4'000'000;
  return m;
}

TEST(LatencyModelTest, InterpolatesAndExtrapolates) {
  const ExpertLatencyModel m = HandMadeModel();
  EXPECT_NEAR(m.CpuSeconds(1), 1 * kMs, 1e-12);
  EXPECT_NEAR(m.CpuSeconds(8), 8 * kMs, 1e-12);
  EXPECT_NEAR(m.CpuSeconds(64), 64 * kMs, 1e-12) << "the last slope continues";
  EXPECT_NEAR(m.DeviceSeconds(6), 0.22 * kMs, 1e-12);
  EXPECT_NEAR(m.LinkBytesPerSecond(), 1e9, 1);
  EXPECT_NEAR(m.CpuBytesPerSecond(), 4e9, 1);
  EXPECT_FALSE(m.ToString().empty());
}

TEST(LatencyModelTest, FiddlerRuleOnHandMadeLatencies) {
  const ExpertLatencyModel m = HandMadeModel();
  // cpu(s) > device(s) + transfer  <=>  s > 0.1 + 0.02 s + 4 (ms)  <=>  s > 4.18.
  for (int64_t s : {1, 2, 3, 4}) {
    EXPECT_EQ(FiddlerPlacement(m, s, false), ExpertPlacement::kCpu) << s;
  }
  for (int64_t s : {5, 8, 16, 100}) {
    EXPECT_EQ(FiddlerPlacement(m, s, false), ExpertPlacement::kFetch) << s;
  }
  for (int64_t s : {1, 5, 100}) {
    EXPECT_EQ(FiddlerPlacement(m, s, true), ExpertPlacement::kResident) << s;
  }
  // A slower link moves the threshold: transfer 10 ms -> s > 10.3.
  ExpertLatencyModel slow = m;
  slow.transfer_seconds = 10 * kMs;
  EXPECT_EQ(FiddlerPlacement(slow, 10, false), ExpertPlacement::kCpu);
  EXPECT_EQ(FiddlerPlacement(slow, 11, false), ExpertPlacement::kFetch);
}

TEST(LatencyModelTest, HotColdCountOnHandMadeBandwidths) {
  // BW_link / (BW_cpu + BW_link) = 10 / 40.
  EXPECT_EQ(HotColdCount(1.0, 10e9, 30e9, 8), 2);
  EXPECT_EQ(HotColdCount(2.0, 10e9, 30e9, 8), 4);
  EXPECT_EQ(HotColdCount(1.0, 10e9, 30e9, 6), 2) << "1.5 rounds to 2";
  EXPECT_EQ(HotColdCount(1.0, 10e9, 30e9, 5), 1) << "1.25 rounds to 1";
  EXPECT_EQ(HotColdCount(0.0, 10e9, 30e9, 8), 0);
  EXPECT_EQ(HotColdCount(100.0, 10e9, 30e9, 8), 8) << "at most every active expert";
  EXPECT_EQ(HotColdCount(1.0, 10e9, 30e9, 0), 0);
}

TEST(LatencyModelTest, AlphaTunedByReplayingBatches) {
  // cpu(s) = s ms, device(s) = 0.1 ms, transfer 2 ms: BW_link / (BW_cpu + BW_link) = 1 / 3.
  ExpertLatencyModel m;
  m.cpu = {{1, 1 * kMs}, {16, 16 * kMs}};
  m.device = {{1, 0.1 * kMs}, {16, 0.1 * kMs}};
  m.transfer_seconds = 2 * kMs;
  m.expert_bytes = 2'000'000;
  const std::vector<std::vector<int64_t>> batches = {{8, 4, 0, 2, 1, 1}};
  // 5 active. alpha 0: H 0, all CPU = 16 ms. 0.6: H 1: max(2.1, 8). 1.2: H 2: max(4.2, 4).
  // 1.8: H 3: max(6.3, 2). 3: H 5: 10.5.
  EXPECT_NEAR(ReplayHotCold(m, 0.0, batches), 16 * kMs, 1e-9);
  EXPECT_NEAR(ReplayHotCold(m, 0.6, batches), 8 * kMs, 1e-9);
  EXPECT_NEAR(ReplayHotCold(m, 1.2, batches), 4.2 * kMs, 1e-9);
  EXPECT_NEAR(ReplayHotCold(m, 1.8, batches), 6.3 * kMs, 1e-9);
  EXPECT_NEAR(ReplayHotCold(m, 3.0, batches), 10.5 * kMs, 1e-9);
  const std::vector<double> grid = {0.0, 0.6, 1.2, 1.8, 3.0};
  EXPECT_DOUBLE_EQ(TuneHotColdAlpha(m, batches, grid), 1.2);
  // Default grid: 1.0 and 1.25 both give H = 2 (4.2 ms); the tie goes to the one nearest 1.
  EXPECT_DOUBLE_EQ(TuneHotColdAlpha(m, batches), 1.0);
  EXPECT_DOUBLE_EQ(TuneHotColdAlpha(m, {}), 1.0) << "nothing recorded: the paper's alpha";
  // A link 100x faster: everything to the device is best.
  ExpertLatencyModel fast = m;
  fast.transfer_seconds = 0.02 * kMs;
  const double alpha = TuneHotColdAlpha(fast, batches);
  EXPECT_EQ(HotColdCount(alpha, fast.LinkBytesPerSecond(), fast.CpuBytesPerSecond(), 5), 5);
}

// ---- the expert profile ----

Status ParseError(const std::string& text) {
  Result<ExpertProfile> p = ParseExpertProfile(text, "prof.json");
  return p.ok() ? Status::Ok() : p.status();
}

void ExpectError(const std::string& text, const std::string& needle) {
  const Status s = ParseError(text);
  EXPECT_FALSE(s.ok()) << text;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("prof.json"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString() << " lacks " << needle;
}

TEST(ExpertProfileTest, ParsesAndOrdersByPopularity) {
  const std::string text =
      R"({"format": "switchyard-expert-profile", "num_moe_layers": 2, "num_experts": 3,
          "counts": [[5, 0, 9], [9, 1, 1e2]]})";
  Result<ExpertProfile> p = ParseExpertProfile(text, "prof.json");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->num_layers, 2);
  EXPECT_EQ(p->num_experts, 3);
  EXPECT_EQ(p->counts[1][2], 100);
  const std::vector<ExpertKey> order = p->Popular();
  ASSERT_EQ(order.size(), 6u);
  EXPECT_EQ(order[0], (ExpertKey{1, 2}));
  EXPECT_EQ(order[1], (ExpertKey{0, 2})) << "ties (9) by (layer, expert)";
  EXPECT_EQ(order[2], (ExpertKey{1, 0}));
  EXPECT_EQ(order[3], (ExpertKey{0, 0}));
  // Round trip, and "format" is optional.
  Result<ExpertProfile> again = ParseExpertProfile(p->ToJson(), "again.json");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->counts, p->counts);
  EXPECT_TRUE(ParseError(R"({"num_moe_layers": 1, "num_experts": 1, "counts": [[0]]})").ok());

  ExpertLayout layout{.num_layers = 2, .num_experts = 3, .hidden = 4, .intermediate = 4};
  EXPECT_TRUE(p->CheckMatches(layout, "prof.json").ok());
  layout.num_experts = 4;
  const Status mismatch = p->CheckMatches(layout, "prof.json");
  EXPECT_EQ(mismatch.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.message().find("num_experts"), std::string::npos) << mismatch.ToString();
  layout.num_experts = 3;
  layout.num_layers = 3;
  EXPECT_NE(p->CheckMatches(layout, "prof.json").message().find("num_moe_layers"),
            std::string::npos);
}

TEST(ExpertProfileTest, ErrorsNameTheFileAndField) {
  ExpectError("{not json", "prof.json");
  ExpectError("[1, 2]", "JSON object");
  ExpectError(R"({"num_experts": 1, "counts": [[0]]})", "num_moe_layers: is missing");
  ExpectError(R"({"num_moe_layers": 1, "counts": [[0]]})", "num_experts: is missing");
  ExpectError(R"({"num_moe_layers": 1, "num_experts": 1})", "counts: is missing");
  ExpectError(R"({"format": "other", "num_moe_layers": 1, "num_experts": 1, "counts": [[0]]})",
              "format");
  ExpectError(R"({"num_moe_layers": 1, "num_experts": 1, "counts": [[0]], "count": 1})",
              "unknown field");
  ExpectError(R"({"num_moe_layers": -1, "num_experts": 1, "counts": [[0]]})",
              "num_moe_layers: must be a non-negative integer");
  ExpectError(R"({"num_moe_layers": 0, "num_experts": 1, "counts": []})",
              "num_moe_layers: must be at least 1");
  ExpectError(R"({"num_moe_layers": 1, "num_experts": "8", "counts": [[0]]})", "num_experts");
  ExpectError(R"({"num_moe_layers": 2, "num_experts": 1, "counts": [[0]]})", "counts: must be");
  ExpectError(R"({"num_moe_layers": 1, "num_experts": 2, "counts": [[0]]})", "counts[0]: must");
  ExpectError(R"({"num_moe_layers": 1, "num_experts": 2, "counts": [[0, -3]]})",
              "counts[0][1]: must be a non-negative integer");
  ExpectError(R"({"num_moe_layers": 1, "num_experts": 2, "counts": [[0, 1.5]]})", "counts[0][1]");
  ExpectError(R"({"num_moe_layers": 1, "num_experts": 2, "counts": [[0, null]]})", "counts[0][1]");
  // Floats beyond int64 are refused before any conversion (the fuzzer found 2e35 converted).
  ExpectError(R"({"num_moe_layers": 1, "num_experts": 1, "counts": [[1e300]]})",
              "counts[0][0]: must be at most");
  ExpectError(R"({"num_moe_layers": 1, "num_experts": 1, "counts": [[2e35]]})",
              "counts[0][0]: must be at most");
  ExpectError(R"({"num_moe_layers": 1, "num_experts": 1, "counts": [[-1e300]]})",
              "counts[0][0]: must be a non-negative integer");
  ExpectError(R"({"num_moe_layers": 1, "num_moe_layers": 1, "num_experts": 1, "counts": [[0]]})",
              "prof.json");  // duplicate key
  ExpectError(R"({"num_moe_layers": 99999999999, "num_experts": 1, "counts": [[0]]})",
              "num_moe_layers: must be at most");

  Result<ExpertProfile> missing = LoadExpertProfile("/nonexistent/profile.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
  Result<std::vector<ExpertKey>> order = StaticPlacementOrder(
      ExpertLayout{.num_layers = 1, .num_experts = 1, .hidden = 1, .intermediate = 1},
      "/nonexistent/profile.json");
  EXPECT_FALSE(order.ok());
}

TEST(ExpertProfileTest, UniformFallbackInterleavesLayers) {
  const ExpertLayout layout{.num_layers = 2, .num_experts = 3, .hidden = 4, .intermediate = 4};
  const std::vector<ExpertKey> order = StaticPlacementOrder(layout, "").value();
  const std::vector<ExpertKey> expected = {{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 2}, {1, 2}};
  EXPECT_EQ(order, expected);
  ExpertProfile profile = ExpertProfile::Empty(layout);
  profile.Add(1, std::vector<int64_t>{0, 4, 1});
  profile.Add(1, std::vector<int64_t>{0, 1, 0});
  EXPECT_EQ(profile.counts[1][1], 5);
  EXPECT_EQ(profile.Popular()[0], (ExpertKey{1, 1}));
}

// ---- the runner ----

struct RunnerFixture {
  ExpertLayout layout{.num_layers = 2, .num_experts = 6, .hidden = 32, .intermediate = 16};
  std::unique_ptr<SimBackend> sim = MakeSim(/*gbps=*/2.0, size_t{64} << 20);
  ReferenceExperts reference{layout, 7};
  std::unique_ptr<HostExperts> host = reference.MakeHost(*sim);
  CpuExpertExecutor cpu{*host, CpuExpertExecutorOptions{.num_threads = 2}};
};

// Runs MoE layer `m` with `groups` and `placement` and checks every expert's rows against the
// reference.
void RunAndCheck(RunnerFixture& f, MixedExpertRunner& runner, int m,
                 const std::vector<int64_t>& groups, const std::vector<ExpertPlacement>& placement,
                 uint32_t seed) {
  int64_t rows = 0;
  for (int64_t g : groups) rows += g;
  const int64_t h = f.layout.hidden;
  std::vector<float> x = RandomRows(rows, h, seed);
  Tensor xd = f.sim->Allocate(DType::kF32, Shape{rows, h}).value();
  Tensor yd = f.sim->Allocate(DType::kF32, Shape{rows, h}).value();
  f.sim->CopyAsync(Tensor::Wrap(x.data(), DType::kF32, xd.shape()), xd, f.sim->compute_stream());
  ASSERT_TRUE(runner.Run(m, xd, groups, placement, yd).ok());
  std::vector<float> y(x.size());
  f.sim->CopyAsync(yd, Tensor::Wrap(y.data(), DType::kF32, yd.shape()), f.sim->compute_stream());
  f.sim->SynchronizeStream(f.sim->compute_stream());
  int64_t row = 0;
  for (size_t e = 0; e < groups.size(); ++e) {
    if (groups[e] == 0) continue;
    const std::vector<float> xe(x.begin() + row * h, x.begin() + (row + groups[e]) * h);
    const std::vector<float> ye(y.begin() + row * h, y.begin() + (row + groups[e]) * h);
    EXPECT_LE(MaxRelError(ye, f.reference.Forward(
                                  {static_cast<uint32_t>(m), static_cast<uint32_t>(e)}, xe)),
              1e-5)
        << "expert " << e << " placed " << ExpertPlacementName(placement[e]);
    row += groups[e];
  }
}

TEST(MixedExpertRunnerTest, EveryPlacementComputesTheSameExpert) {
  RunnerFixture f;
  auto cache =
      DeviceExpertCache::Create(*f.sim, f.layout, CacheOptions(3, DeviceCachePolicy::kLru)).value();
  PoisonSlots(*f.sim, *cache);
  TransferEngine engine(*f.sim, *f.host, *cache);
  MixedExpertRunner runner(*f.sim, cache.get(), &engine, f.cpu);
  EXPECT_EQ(runner.FetchSlots(), 3);
  using P = ExpertPlacement;
  const std::vector<int64_t> groups = {3, 0, 2, 1, 4, 1};
  const std::vector<P> placement = {P::kCpu, P::kCpu, P::kFetch, P::kResident, P::kCpu, P::kFetch};
  RunAndCheck(f, runner, 1, groups, placement, 1);
  PlacementStats s = runner.stats();
  EXPECT_EQ(s.cpu_experts, 2);
  EXPECT_EQ(s.fetched_experts, 3) << "kResident on an expert not in a slot is a fetch";
  EXPECT_EQ(s.resident_experts, 0);
  EXPECT_EQ(s.cpu_rows, 7);
  EXPECT_EQ(s.device_rows, 4);
  EXPECT_EQ(s.activation_bytes, 2 * 7 * 32 * 4);
  // Again: the three fetched experts are in the 3 LRU slots now; more rows to the CPU staging.
  const std::vector<int64_t> more = {20, 1, 2, 1, 30, 1};
  const std::vector<P> again = {P::kCpu, P::kCpu, P::kResident, P::kResident, P::kCpu, P::kFetch};
  RunAndCheck(f, runner, 1, more, again, 2);
  s = runner.stats();
  EXPECT_EQ(s.resident_experts, 3);
  EXPECT_EQ(s.fetched_experts, 3);
  EXPECT_EQ(s.cpu_experts, 5);
  EXPECT_EQ(engine.stats().tasks_completed, 3u);
  // Every expert on the device through 3 slots: fetches are pipelined through the free slots.
  RunAndCheck(f, runner, 0, more, std::vector<P>(6, P::kFetch), 3);
  EXPECT_EQ(runner.stats().fetched_experts, 9);
  std::printf("%s\n", runner.stats().ToString().c_str());
}

TEST(MixedExpertRunnerTest, CpuOnlyWithoutCacheAndNoScratchSlotIsAnError) {
  RunnerFixture f;
  MixedExpertRunner cpu_only(*f.sim, nullptr, nullptr, f.cpu);
  EXPECT_EQ(cpu_only.FetchSlots(), 0);
  RunAndCheck(f, cpu_only, 0, {1, 2, 0, 3, 0, 1},
              std::vector<ExpertPlacement>(6, ExpertPlacement::kCpu), 5);
  EXPECT_EQ(cpu_only.stats().cpu_experts, 4);

  DeviceExpertCacheOptions options = CacheOptions(2, DeviceCachePolicy::kStatic);
  options.static_experts = {{0, 0}, {0, 1}};
  auto cache = DeviceExpertCache::Create(*f.sim, f.layout, options).value();
  TransferEngine engine(*f.sim, *f.host, *cache);
  MixedExpertRunner runner(*f.sim, cache.get(), &engine, f.cpu);
  EXPECT_EQ(runner.FetchSlots(), 0);
  Tensor xd = f.sim->Allocate(DType::kF32, Shape{1, f.layout.hidden}).value();
  std::vector<int64_t> groups(6, 0);
  groups[3] = 1;
  const Status s =
      runner.Run(0, xd, groups, std::vector<ExpertPlacement>(6, ExpertPlacement::kFetch), xd);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
}

TEST(LatencyModelTest, CalibratesOnTheSimDevice) {
  RunnerFixture f;
  CalibrationOptions options;
  options.rows = {4, 1, 16};
  options.repeats = 1;
  Result<ExpertLatencyModel> m = CalibrateLatencyModel(*f.sim, *f.host, f.cpu, options);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->cpu.size(), 3u);
  ASSERT_EQ(m->device.size(), 3u);
  EXPECT_EQ(m->cpu[0].rows, 1);
  EXPECT_EQ(m->device[2].rows, 16);
  EXPECT_EQ(m->expert_bytes, f.layout.expert_bytes());
  // 3 chunks of 2 KiB over a 2 GB/s link with 10 us per copy: at least 30 us.
  EXPECT_GE(m->transfer_seconds, 30e-6);
  for (const LatencyPoint& p : m->cpu) EXPECT_GT(p.seconds, 0.0);
  for (const LatencyPoint& p : m->device) EXPECT_GT(p.seconds, 0.0);
  std::printf("calibrated: %s\n", m->ToString().c_str());
  options.key = {5, 0};
  EXPECT_EQ(CalibrateLatencyModel(*f.sim, *f.host, f.cpu, options).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sy::offload
