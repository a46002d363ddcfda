// Every operator of every available backend against the double-precision reference
// (runtime/opcheck/op_check.h), plus finite-difference checks of the reference backwards.
// Test names read <device>/BackendOps.Matches/<Op>_<case>, e.g.
// cpu/BackendOps.Matches/Gemm_bf16_trans_b.
#include <gtest/gtest.h>

#include <cstring>
#include <iomanip>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/core/quant_blocks.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_quant.h"
#include "runtime/opcheck/op_check.h"
#include "runtime/reference/reference_ops.h"

namespace sy {
namespace {

struct OpParam {
  Device device;
  size_t case_index = 0;
};

// One backend per device for the whole binary: creating one starts a thread pool.
Backend& BackendFor(Device device) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Backend>> backends;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Backend>& slot = backends[device.ToString()];
  if (!slot) {
    Result<std::unique_ptr<Backend>> created = CreateBackend(device);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    slot = std::move(created).value();
  }
  return *slot;
}

std::vector<OpParam> ParamsFor(DeviceType type) {
  std::vector<OpParam> params;
  for (const Device& device : AvailableDevices()) {
    if (device.type != type) continue;
    for (size_t i = 0; i < AllOpChecks().size(); ++i) params.push_back({device, i});
  }
  return params;
}

std::string ParamName(const testing::TestParamInfo<OpParam>& info) {
  const OpCheckCase& c = AllOpChecks()[info.param.case_index];
  std::string prefix = info.param.device.type == DeviceType::kCuda && info.param.device.index > 0
                           ? "gpu" + std::to_string(info.param.device.index) + "_"
                           : "";
  return prefix + c.op + "_" + c.case_name;
}

void PrintTo(const OpParam& p, std::ostream* os) {
  const OpCheckCase& c = AllOpChecks()[p.case_index];
  *os << p.device.ToString() << " " << c.op << "/" << c.case_name;
}

class BackendOps : public testing::TestWithParam<OpParam> {};

TEST_P(BackendOps, Matches) {
  const OpCheckCase& c = AllOpChecks()[GetParam().case_index];
  Backend& backend = BackendFor(GetParam().device);
  OpCheckResult result = c.run(backend);
  EXPECT_EQ(result.op, c.op);
  if (result.skipped) GTEST_SKIP() << result.detail;
  EXPECT_TRUE(result.passed) << backend.name() << " " << c.op << "/" << c.case_name << ": "
                             << result.detail;
  std::ostringstream nmse;
  nmse << std::scientific << std::setprecision(3) << result.nmse;
  RecordProperty("nmse", nmse.str());
}

INSTANTIATE_TEST_SUITE_P(cpu, BackendOps, testing::ValuesIn(ParamsFor(DeviceType::kCpu)),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(sim, BackendOps, testing::ValuesIn(ParamsFor(DeviceType::kSim)),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(cuda, BackendOps, testing::ValuesIn(ParamsFor(DeviceType::kCuda)),
                         ParamName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BackendOps);

TEST(BackendOpsCuda, RunsWhereAGpuIsPresent) {
  if (!CudaBackendCompiled()) GTEST_SKIP() << "CUDA backend not compiled: CUDA op checks skipped";
  bool present = false;
  for (const Device& device : AvailableDevices()) present |= device.type == DeviceType::kCuda;
  if (!present) GTEST_SKIP() << "no CUDA device present: CUDA op checks skipped";
  EXPECT_FALSE(ParamsFor(DeviceType::kCuda).empty());
}

// Scatter-adds on a GPU add each output row's contributions in one fixed order (no atomics:
// runtime/cuda/index.cuh), so repeating one gives the same bits; many contributions per row make
// any other order show. Both of the kernel's paths: a few rows (scanned) and many (sorted).
TEST(BackendOpsCuda, ScatterAddsAreDeterministic) {
  Device cuda;
  bool present = false;
  for (const Device& device : AvailableDevices()) {
    if (device.type == DeviceType::kCuda && !present) {
      cuda = device;
      present = true;
    }
  }
  if (!present) GTEST_SKIP() << "no CUDA device present: the scatter-adds were not run";
  Backend& backend = BackendFor(cuda);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{200, 3}, {60000, 7}}) {
    SCOPED_TRACE("rows " + std::to_string(m) + " into " + std::to_string(n));
    const int64_t h = 64;
    std::vector<float> src(static_cast<size_t>(m * h)), weights(static_cast<size_t>(m));
    std::vector<int32_t> index(static_cast<size_t>(m));
    uint32_t state = 12345;
    auto next = [&state] { return state = state * 1664525u + 1013904223u; };
    for (float& x : src) x = static_cast<float>(next() >> 8) / 16777216.0f - 0.5f;
    for (float& x : weights) x = static_cast<float>(next() >> 8) / 16777216.0f;
    for (int32_t& i : index) i = static_cast<int32_t>(next() % static_cast<uint32_t>(n));
    auto up = [&backend](DType dtype, Shape shape, const void* data, size_t bytes) {
      Tensor host = Tensor::Host(dtype, shape);
      std::memcpy(host.data(), data, bytes);
      Result<Tensor> device = backend.Allocate(dtype, shape);
      EXPECT_TRUE(device.ok());
      backend.CopyAsync(host, *device, backend.compute_stream());
      backend.Synchronize();
      return *device;
    };
    Tensor ts = up(DType::kF32, Shape{m, h}, src.data(), src.size() * 4);
    Tensor tw = up(DType::kF32, Shape{m}, weights.data(), weights.size() * 4);
    Tensor ti = up(DType::kI32, Shape{m}, index.data(), index.size() * 4);
    std::vector<std::vector<float>> results;
    for (int run = 0; run < 4; ++run) {
      Result<Tensor> out = backend.Allocate(DType::kF32, Shape{n, h});
      ASSERT_TRUE(out.ok());
      backend.Fill(*out, 0.0f);
      backend.ScatterAddRows(ts, ti, tw, *out);
      Result<Tensor> table = backend.Allocate(DType::kF32, Shape{n, h});
      ASSERT_TRUE(table.ok());
      backend.Fill(*table, 0.0f);
      backend.EmbeddingScatterAdd(ts, ti, *table);
      Tensor host = Tensor::Host(DType::kF32, Shape{2 * n, h});
      backend.CopyAsync(*out, host.Slice(0, n), backend.compute_stream());
      backend.CopyAsync(*table, host.Slice(n, 2 * n), backend.compute_stream());
      backend.Synchronize();
      results.emplace_back(host.data<float>(), host.data<float>() + 2 * n * h);
    }
    for (int run = 1; run < 4; ++run) {
      EXPECT_EQ(std::memcmp(results[run].data(), results[0].data(), results[0].size() * 4), 0)
          << "run " << run << " differs from run 0";
    }
  }
}

TEST(OpChecks, CoverEveryOperator) {
  std::map<std::string, int> per_op;
  for (const OpCheckCase& c : AllOpChecks()) ++per_op[c.op];
  const char* kOps[] = {"Fill",
                        "Convert",
                        "Gemm",
                        "BatchedGemm",
                        "GroupedGemm",
                        "GroupedGemmWeightGrad",
                        "Add",
                        "Mul",
                        "Scale",
                        "Axpy",
                        "AddBias",
                        "Silu",
                        "SiluBackward",
                        "Gelu",
                        "GeluBackward",
                        "Relu",
                        "ReluBackward",
                        "Swiglu",
                        "SwigluBackward",
                        "Reduce",
                        "Softmax",
                        "SoftmaxBackward",
                        "TopK",
                        "RmsNorm",
                        "RmsNormBackward",
                        "Rope",
                        "RopeBackward",
                        "Attention",
                        "AttentionBackward",
                        "EmbeddingGather",
                        "EmbeddingScatterAdd",
                        "CrossEntropy",
                        "CrossEntropyBackward",
                        "GatherRows",
                        "ScatterAddRows"};
  for (const char* op : kOps) EXPECT_GE(per_op[op], 2) << op << " needs several cases";
  std::map<std::string, int> names;
  for (const OpCheckCase& c : AllOpChecks()) {
    EXPECT_EQ(++names[c.op + "_" + c.case_name], 1)
        << "duplicate case " << c.op << "_" << c.case_name;
  }
}

// A CPU backend with three planted bugs, to prove the harness can fail.
class BuggyCpuBackend : public CpuBackend {
 public:
  // Off by 1e-4 relative (nmse 1e-8): far above the f32 thresholds, far below what a glance sees.
  void Silu(const Tensor& x, const Tensor& out) override {
    CpuBackend::Silu(x, out);
    for (int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] *= 1.0001f;
  }
  // Breaks the tie order: equal values keep the higher index first.
  void TopK(const Tensor& x, int k, const Tensor& values, const Tensor& indices) override {
    CpuBackend::TopK(x, k, values, indices);
    int32_t* idx = indices.data<int32_t>();
    const float* val = values.data<float>();
    for (int64_t i = 0; i + 1 < indices.numel(); ++i) {
      if ((i + 1) % k != 0 && val[i] == val[i + 1]) std::swap(idx[i], idx[i + 1]);
    }
  }
  // Forgets beta; and reads q4_0's nibbles the wrong way round (high nibble first).
  void Gemm(const Tensor& a, const Tensor& b, const Tensor& c, GemmOptions options) override {
    options.beta = 0.0f;
    if (b.dtype() != DType::kQ4_0) return CpuBackend::Gemm(a, b, c, options);
    Tensor swapped = Tensor::Host(b.dtype(), b.shape());
    auto* bytes = static_cast<uint8_t*>(swapped.data());
    std::memcpy(bytes, b.data(), b.nbytes());
    for (size_t i = 0; i < b.nbytes(); ++i) {
      if (i % 18 >= 2) bytes[i] = static_cast<uint8_t>((bytes[i] << 4) | (bytes[i] >> 4));
    }
    CpuBackend::Gemm(a, swapped, c, options);
  }
  // Off by one block: the last block of every q8_0 row takes the scale of the block before it.
  void GroupedGemm(const Tensor& a, const Tensor& b, const Tensor& c,
                   std::span<const int64_t> group_rows, GemmOptions options) override {
    if (b.dtype() != DType::kQ8_0) return CpuBackend::GroupedGemm(a, b, c, group_rows, options);
    Tensor shifted = Tensor::Host(b.dtype(), b.shape());
    auto* bytes = static_cast<uint8_t*>(shifted.data());
    std::memcpy(bytes, b.data(), b.nbytes());
    const size_t row_bytes = DTypeBytes(b.dtype(), b.dim(2));
    for (size_t row = row_bytes; row <= b.nbytes(); row += row_bytes) {
      std::memcpy(bytes + row - 34, bytes + row - 68, 2);
    }
    CpuBackend::GroupedGemm(a, shifted, c, group_rows, options);
  }
};

OpCheckResult RunCase(Backend& backend, const std::string& op, const std::string& case_name) {
  for (const OpCheckCase& c : AllOpChecks()) {
    if (c.op == op && c.case_name == case_name) return c.run(backend);
  }
  ADD_FAILURE() << "no case " << op << "_" << case_name;
  return {};
}

TEST(OpChecks, CatchPlantedBugs) {
  BuggyCpuBackend buggy;
  CpuBackend good;
  for (auto [op, case_name] : {std::pair<std::string, std::string>{"Silu", "n7"},
                               {"TopK", "k2_of_8_ties"},
                               {"Gemm", "f32_alpha_beta"},
                               {"Gemm", "bf16_m3_alpha_beta"},
                               {"Gemm", "q4_0_m1"},
                               {"Gemm", "q4_0_m5"},
                               {"Gemm", "q4_0_panel_m65"},
                               {"GroupedGemm", "q8_0_decode"},
                               {"GroupedGemm", "q8_0_prefill"}}) {
    EXPECT_TRUE(RunCase(good, op, case_name).passed) << op << "_" << case_name;
    OpCheckResult bad = RunCase(buggy, op, case_name);
    EXPECT_FALSE(bad.passed) << op << "_" << case_name << " missed a planted bug";
    EXPECT_FALSE(bad.detail.empty());
  }
}

// The integer kernels' vectorized activation rounding gives the scalar reference's values
// exactly (runtime/core/quant_blocks.h, RoundActivationBlocks): random blocks, a block of exact
// halves (amax 127, so x * 127 / amax = x: round half to even), and a block of zeros; in the
// kernels' layout: each pair of blocks interleaved by halves (an odd last block in order), the
// scales repeated per lane, per 4 values that meet one 16-bit lane of the q4_0 kernel 8 times
// their sum, per block (q4_k's minimums) its scale times the sum of its values, and per 16 values
// their sum (the 16-value sub-block k-quants' offsets and minimums).
TEST(CpuQuant, QuantizeActivationsEqualsTheReference) {
  constexpr int64_t kRows = 3, kK = 224, kBlocks = kK / 32;  // 7 blocks: 3 pairs and one alone
  std::vector<float> x(kRows * kK);
  uint32_t state = 18;
  for (float& v : x) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 6.0f - 3.0f;
  }
  for (int i = 0; i < 32; ++i) x[32 + i] = i == 0 ? 127.0f : static_cast<float>(i - 16) + 0.5f;
  for (int i = 0; i < 32; ++i) x[64 + i] = 0.0f;
  std::vector<int8_t> q_ref(x.size());
  std::vector<float> d_ref(x.size() / 32);
  RoundActivationBlocks(x.data(), kRows * kK, q_ref.data(), d_ref.data());
  EXPECT_EQ(q_ref[32 + 1], -14);  // -14.5 rounds to even
  EXPECT_EQ(q_ref[32 + 2], -14);  // -13.5 too
  EXPECT_EQ(d_ref[2], 0.0f);

  std::vector<int8_t> q(x.size());
  std::vector<float> d(x.size() / 32), d4(x.size() / 8);
  std::vector<int16_t> offsets(x.size() / 4);
  std::vector<float> sums(x.size() / 32);
  std::vector<int16_t> sums16(x.size() / 16);
  cpu::QuantizeActivations(x.data(), kRows, kK, q.data(), d.data(), d4.data(), offsets.data(),
                           sums.data(), sums16.data());
  EXPECT_EQ(d, d_ref);
  for (size_t i = 0; i < d4.size(); ++i) EXPECT_EQ(d4[i], d_ref[i / 4]) << "d4 " << i;
  // Where each value goes, written out: [b0 0..15, b1 0..15, b0 16..31, b1 16..31], ...
  auto at = [](int64_t b, int64_t i) -> int64_t {
    if (b == kBlocks - 1) return b * 32 + i;
    const int64_t base = (b / 2) * 64;
    return base + (i < 16 ? 0 : 32) + (b % 2 == 0 ? 0 : 16) + i % 16;
  };
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t b = 0; b < kBlocks; ++b) {
      for (int64_t i = 0; i < 32; ++i) {
        EXPECT_EQ(cpu::Int8ActivationIndex(kBlocks, b, i), at(b, i));
        ASSERT_EQ(q[static_cast<size_t>(r * kK + at(b, i))],
                  q_ref[static_cast<size_t>(r * kK + b * 32 + i)])
            << "row " << r << " block " << b << " value " << i;
      }
      const int8_t* block = q_ref.data() + r * kK + b * 32;
      int block_sum = 0;
      for (int64_t i = 0; i < 32; ++i) block_sum += block[i];
      EXPECT_EQ(sums[static_cast<size_t>(r * kBlocks + b)],
                d_ref[static_cast<size_t>(r * kBlocks + b)] * static_cast<float>(block_sum))
          << "row " << r << " block " << b;
      for (int64_t h = 0; h < 2; ++h) {
        int half_sum = 0;
        for (int64_t i = 0; i < 16; ++i) half_sum += block[16 * h + i];
        EXPECT_EQ(sums16[static_cast<size_t>((r * kBlocks + b) * 2 + h)], half_sum)
            << "row " << r << " block " << b << " half " << h;
      }
      for (int64_t j = 0; j < 8; ++j) {
        const int8_t* y = q_ref.data() + r * kK + b * 32;
        const int sum = y[2 * j] + y[2 * j + 1] + y[16 + 2 * j] + y[17 + 2 * j];
        EXPECT_EQ(offsets[static_cast<size_t>((r * kBlocks + b) * 8 + j)], 8 * sum)
            << "row " << r << " block " << b << " lane " << j;
      }
    }
  }
}

// The cpu backend keeps the last rotation tables per thread (cpu_norm_rope.cc): calls that repeat
// (positions, D, theta) reuse them, and a call that changes any one of the three (or the number
// of positions) rotates by its own. Each call in turn against the double reference.
TEST(CpuRope, RepeatedAndChangedCallsMatchTheReference) {
  Backend& backend = BackendFor(Device::Cpu());
  struct Call {
    std::vector<int32_t> positions;
    int64_t d;
    float theta;
    bool backward;
  };
  const std::vector<int32_t> a = {3, 17, 40}, b = {4, 17, 40}, c = {3, 17, 40, 41};
  const Call calls[] = {
      {a, 64, 1e4f, false}, {a, 64, 1e4f, false},  // the same twice: the tables reused
      {b, 64, 1e4f, false},                        // one position differs
      {b, 64, 1e6f, false},                        // theta differs
      {b, 32, 1e6f, false},                        // D differs
      {c, 32, 1e6f, false},                        // one more position
      {c, 32, 1e6f, true},  {a, 32, 1e6f, true},   // backward: the same tables, then others
  };
  constexpr int64_t kHeads = 2;
  uint32_t state = 7;
  for (size_t i = 0; i < std::size(calls); ++i) {
    const Call& call = calls[i];
    const auto t = static_cast<int64_t>(call.positions.size());
    const int64_t n = t * kHeads * call.d;
    std::vector<double> x(static_cast<size_t>(n));
    Tensor tx = backend.Allocate(DType::kF32, Shape{t, kHeads, call.d}).value();
    Tensor out = backend.Allocate(DType::kF32, Shape{t, kHeads, call.d}).value();
    Tensor tp = backend.Allocate(DType::kI32, Shape{t}).value();
    for (int64_t j = 0; j < n; ++j) {
      state = state * 1664525u + 1013904223u;
      const float v = static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 4.0f - 2.0f;
      tx.data<float>()[j] = v;
      x[static_cast<size_t>(j)] = v;
    }
    std::memcpy(tp.data<int32_t>(), call.positions.data(), sizeof(int32_t) * t);
    std::vector<double> want;
    if (call.backward) {
      backend.RopeBackward(tx, tp, RopeOptions{call.theta}, out);
      want = reference::RopeBackward(t, kHeads, call.d, x, call.positions, call.theta);
    } else {
      backend.Rope(tx, tp, RopeOptions{call.theta}, out);
      want = reference::Rope(t, kHeads, call.d, x, call.positions, call.theta);
    }
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_NEAR(out.data<float>()[j], want[static_cast<size_t>(j)], 2e-5)
          << "call " << i << " value " << j;
    }
  }
}

TEST(ReferenceGradients, MatchFiniteDifferences) {
  std::vector<GradCheckResult> results = RunReferenceGradientChecks();
  EXPECT_GE(results.size(), 20u);
  for (const GradCheckResult& r : results) {
    EXPECT_TRUE(r.passed) << r.op << "/" << r.case_name << ": max relative error "
                          << r.max_rel_error << " (threshold " << r.threshold << ")";
  }
}

}  // namespace
}  // namespace sy
