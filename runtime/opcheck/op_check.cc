#include "runtime/opcheck/op_check.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <tuple>
#include <utility>

#include "runtime/core/check.h"
#include "runtime/core/hash.h"
#include "runtime/core/quant_blocks.h"
#include "runtime/reference/reference_ops.h"

namespace sy {
namespace {

using reference::Values;

// ---- thresholds (normalised MSE) ----
// The observed values are the worst case over all cases on the cpu backend (AVX-512 build); each
// threshold leaves a margin of about two orders of magnitude for other backends' summation
// orders, while an error of 1e-4 relative in every element (nmse 1e-8) still fails.
// Exact: copies, dtype conversions and widenings, top-k values; any difference is a bug.
constexpr double kExact = 0.0;
// One or two f32 roundings per element (add, scale, scatter-add). Observed <= 3e-15.
constexpr double kF32Simple = 1e-12;
// f32 transcendentals and row reductions (silu, gelu, softmax, cross-entropy, norms, rope,
// reduce). Observed <= 6e-13 (SoftmaxBackward on logits of +-2000).
constexpr double kF32Math = 1e-10;
// f32 dot products over up to ~2K terms (GEMM family, attention). Observed <= 1.4e-13.
constexpr double kF32Accumulate = 1e-10;
// Quantized GEMVs against the product with the activations NOT rounded to 8 bits: uniform
// activations in [-1, 1] rounded to a step d = amax / 127 per block of 32 (amax ~ 0.97) carry an
// error uniform in +-d/2, of variance d^2 / 12 ~ 5e-6 against the values' 1/3, so the products'
// nmse is about 1.5e-5 (weights independent of the errors; observed 1.2e-5 to 2.5e-5). ggml's
// test-backend-ops holds its quantized mul_mat to 5e-4.
constexpr double kInt8Activations = 1e-4;
// A 16-bit output (Note [16-bit operands] in runtime/backend/backend.h): its final rounding, at
// most half an ulp, a relative error of 2^-8 for bf16 (8 significant bits) and 2^-11 for f16 (11),
// so an nmse of at most 2^-16 and 2^-22, plus the f32 computation's (~1e-10). Truncating instead
// of rounding to nearest gives up to twice that error in every element, and fails.
constexpr double kBf16Output = 0x1p-16 + 1e-10;
constexpr double kF16Output = 0x1p-22 + 1e-10;

// The threshold of a case whose lowest-precision output has dtype `out`, computed with `f32`
// (the op's own f32 threshold) otherwise.
double OutputThreshold(DType out, double f32) {
  return out == DType::kBF16 ? kBf16Output : out == DType::kF16 ? kF16Output : f32;
}

// ---- seeded host data ----

// Stable across platforms and runs, so a failing case reproduces anywhere.
uint64_t SeedOf(const std::string& op, const std::string& case_name) {
  return NameSeed(op + "/" + case_name);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double Uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(gen_);
  }
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen_); }  // [lo, hi]
  Values Uniforms(int64_t n, double lo, double hi) {
    Values v(static_cast<size_t>(n));
    for (double& x : v) x = Uniform(lo, hi);
    return v;
  }

 private:
  std::mt19937_64 gen_;
};

Values RoundAll(DType dtype, Values v) {
  for (double& x : v) x = reference::RoundTo(dtype, x);
  return v;
}

Values NaNs(int64_t n) {
  return Values(static_cast<size_t>(n), std::numeric_limits<double>::quiet_NaN());
}

int64_t Sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

std::string Dims(std::initializer_list<int64_t> dims) {
  std::ostringstream os;
  bool first = true;
  for (int64_t d : dims) {
    os << (first ? "" : "x") << d;
    first = false;
  }
  return os.str();
}

// ---- moving data through the Backend interface only ----

class DeviceIo {
 public:
  explicit DeviceIo(Backend& backend) : backend_(backend) {}

  // A device tensor holding `values`, which must be representable in `dtype`.
  Tensor Up(DType dtype, Shape shape, const Values& values) {
    SY_CHECK_EQ(shape.numel(), static_cast<int64_t>(values.size())) << "op-check upload size";
    Tensor host = Tensor::Host(dtype, shape);
    for (size_t i = 0; i < values.size(); ++i) {
      const auto f = static_cast<float>(values[i]);
      switch (dtype) {
        case DType::kF32:
          host.data<float>()[i] = f;
          break;
        case DType::kBF16:
          host.data<BF16>()[i] = F32ToBF16(f);
          break;
        case DType::kF16:
          host.data<F16>()[i] = F32ToF16(f);
          break;
        case DType::kI32:
        case DType::kI64:
        case DType::kU8:
        case DType::kI8:
        case DType::kF64:
        case DType::kQ8_0:
        case DType::kQ4_0:
        case DType::kQ4_K:
        case DType::kQ5_K:
        case DType::kQ6_K:
        case DType::kQ2_K:
        case DType::kQ3_K:
          SY_CHECK(false) << "op-check: upload of " << DTypeName(dtype) << " as floats";
      }
    }
    return Copy(host);
  }

  // A device tensor of quantized `dtype` with seeded random blocks: q8_0 and q4_0 quantize
  // uniforms in [-1, 1] with the reference quantizers; the k-quants (which have none) get random
  // bytes with small positive f16 super-block scales (KQuantScaleOffsets). `values` receives the
  // blocks dequantized: what the reference multiplies with.
  Tensor UpQuantized(DType dtype, Shape shape, Rng& rng, Values& values) {
    const int64_t n = shape.numel();
    Tensor host = Tensor::Host(dtype, shape);
    auto* bytes = static_cast<uint8_t*>(host.data());
    if (DTypeBlockSize(dtype) == 256) {
      const size_t block_bytes = DTypeBlockBytes(dtype);
      const std::vector<size_t> scale_offsets = KQuantScaleOffsets(dtype);
      for (size_t i = 0; i < host.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(rng.Int(0, 255));
      for (int64_t b = 0; b < n / 256; ++b) {
        for (size_t offset : scale_offsets) {
          const F16 scale = F32ToF16(static_cast<float>(rng.Uniform(0.001, 0.02)));
          std::memcpy(bytes + static_cast<size_t>(b) * block_bytes + offset, &scale.bits, 2);
        }
      }
    } else {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = static_cast<float>(rng.Uniform(-1, 1));
      QuantizeBlocks(dtype, x.data(), bytes, n);
    }
    std::vector<float> f(static_cast<size_t>(n));
    DequantizeBlocks(dtype, bytes, f.data(), n);
    values.assign(f.begin(), f.end());
    return Copy(host);
  }

  Tensor UpI32(Shape shape, const std::vector<int32_t>& values) {
    SY_CHECK_EQ(shape.numel(), static_cast<int64_t>(values.size())) << "op-check upload size";
    Tensor host = Tensor::Host(DType::kI32, shape);
    std::copy(values.begin(), values.end(), host.data<int32_t>());
    return Copy(host);
  }

  Values Down(const Tensor& device) {
    Tensor host = ToHost(device);
    Values out(static_cast<size_t>(host.numel()));
    for (size_t i = 0; i < out.size(); ++i) out[i] = LoadAsF32(host.data(), host.dtype(), i);
    return out;
  }

  std::vector<int32_t> DownI32(const Tensor& device) {
    Tensor host = ToHost(device);
    const int32_t* p = host.data<int32_t>();
    return std::vector<int32_t>(p, p + host.numel());
  }

  Backend& backend() { return backend_; }

 private:
  Tensor Copy(const Tensor& host) {
    Result<Tensor> device = backend_.Allocate(host.dtype(), host.shape());
    SY_CHECK(device.ok()) << "op-check: " << device.status().ToString();
    backend_.CopyAsync(host, *device, backend_.compute_stream());
    backend_.SynchronizeStream(backend_.compute_stream());
    return std::move(device).value();
  }

  Tensor ToHost(const Tensor& device) {
    Tensor host = Tensor::Host(device.dtype(), device.shape());
    backend_.CopyAsync(device, host, backend_.compute_stream());
    backend_.SynchronizeStream(backend_.compute_stream());
    return host;
  }

  Backend& backend_;
};

// ---- comparison ----

double Nmse(const Values& out, const Values& ref) {
  if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double d = out[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return num / std::max(den, 1e-30);
}

class Checker {
 public:
  Checker(std::string op, std::string case_name, double threshold) {
    result_.op = std::move(op);
    result_.case_name = std::move(case_name);
    result_.threshold = threshold;
  }

  void Compare(const std::string& what, const Values& out, const Values& ref) {
    const double nmse = Nmse(out, ref);
    if (first_ || Key(nmse) > Key(result_.nmse)) {
      result_.nmse = nmse;
      worst_ = what;
    }
    first_ = false;
    if (!(nmse <= result_.threshold)) Note(what, out, ref, nmse);
  }

  void RequireEqual(const std::string& what, const std::vector<int32_t>& out,
                    const std::vector<int32_t>& ref) {
    if (out == ref) return;
    size_t at = 0;
    while (at < std::min(out.size(), ref.size()) && out[at] == ref[at]) ++at;
    std::ostringstream os;
    os << what << " differ at " << at << ": got "
       << (at < out.size() ? std::to_string(out[at]) : "<end>") << ", expected "
       << (at < ref.size() ? std::to_string(ref[at]) : "<end>") << "; ";
    detail_ += os.str();
    result_.nmse = std::numeric_limits<double>::infinity();
    worst_ = what;
    first_ = false;
  }

  OpCheckResult Finish() {
    result_.passed = !std::isnan(result_.nmse) && result_.nmse <= result_.threshold;
    std::ostringstream os;
    os << "worst output " << worst_ << " nmse " << result_.nmse << " (threshold "
       << result_.threshold << ")";
    if (!detail_.empty()) os << "; " << detail_;
    result_.detail = os.str();
    return result_;
  }

 private:
  // NaN ranks as the worst possible result.
  static double Key(double v) {
    return std::isnan(v) ? std::numeric_limits<double>::infinity() : v;
  }

  void Note(const std::string& what, const Values& out, const Values& ref, double nmse) {
    std::ostringstream os;
    os << what << " nmse " << nmse;
    if (out.size() != ref.size()) {
      os << " (size " << out.size() << " vs " << ref.size() << ")";
    } else {
      size_t worst = 0;
      double worst_err = -1.0;
      for (size_t i = 0; i < out.size(); ++i) {
        double err = std::fabs(out[i] - ref[i]);
        if (std::isnan(err)) err = std::numeric_limits<double>::infinity();
        if (err > worst_err) {
          worst_err = err;
          worst = i;
        }
      }
      if (!out.empty()) {
        os << ", worst element " << worst << ": got " << out[worst] << ", expected " << ref[worst];
      }
    }
    detail_ += os.str() + "; ";
  }

  OpCheckResult result_;
  std::string worst_;
  std::string detail_;
  bool first_ = true;
};

// A case: name, threshold and a body that fills the checker.
using CaseBody = std::function<void(DeviceIo&, Rng&, Checker&)>;

OpCheckCase MakeCase(std::string op, std::string case_name, double threshold, CaseBody body) {
  OpCheckCase c;
  c.op = op;
  c.case_name = case_name;
  c.run = [op, case_name, threshold, body = std::move(body)](Backend& backend) {
    DeviceIo device(backend);
    Rng rng(SeedOf(op, case_name));
    Checker checker(op, case_name, threshold);
    body(device, rng, checker);
    return checker.Finish();
  };
  return c;
}

// `c`, skipped on a backend without the capability `cap` (BackendCaps), which `what` names.
OpCheckCase RequireCap(OpCheckCase c, bool BackendCaps::*cap, std::string what) {
  c.run = [op = c.op, case_name = c.case_name, cap, what = std::move(what),
           run = std::move(c.run)](Backend& backend) {
    if (backend.caps().*cap) return run(backend);
    OpCheckResult skipped;
    skipped.op = op;
    skipped.case_name = case_name;
    skipped.passed = true;
    skipped.skipped = true;
    skipped.detail = backend.name() + " has no " + what + " (BackendCaps)";
    return skipped;
  };
  return c;
}

// MakeCase for quantized weights: skipped on a backend without them.
OpCheckCase MakeQuantizedCase(std::string op, std::string case_name, CaseBody body,
                              double threshold = kF32Accumulate) {
  return RequireCap(MakeCase(op, case_name, threshold, std::move(body)),
                    &BackendCaps::quantized_weights, "quantized weights");
}

std::string DTypeTag(DType dtype) { return std::string(DTypeName(dtype)); }

// ---- Fill / Convert ----

void AddFillCases(std::vector<OpCheckCase>& cases) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    cases.push_back(
        MakeCase("Fill", DTypeTag(dtype), kExact, [dtype](DeviceIo& d, Rng&, Checker& c) {
          const int64_t n = 1037;
          const float value = -1.3f;  // not representable in bf16/f16: exercises rounding
          Tensor out = d.Up(dtype, {n}, NaNs(n));
          d.backend().Fill(out, value);
          c.Compare("out", d.Down(out), Values(n, reference::RoundTo(dtype, value)));
        }));
  }
}

// Values spread over many binades, within the finite range of `dtype`, plus exact rounding ties
// of `target` when it is narrower.
Values ConvertInputs(Rng& rng, int64_t n, DType src, DType target) {
  const bool f16_range = src == DType::kF16 || target == DType::kF16;
  const double lo_exp = f16_range ? -26.0 : -40.0, hi_exp = f16_range ? 15.9 : 40.0;
  Values v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) {
    const double mag = std::exp2(rng.Uniform(lo_exp, hi_exp));
    v[i] = (rng.Int(0, 1) ? -1.0 : 1.0) * mag;
    if (i % 7 == 3 && target != DType::kF32 && mag > 1e-3 && mag < 1e4) {
      // Exactly halfway between two neighbours of `target`: r + ulp/2 (exact in f32).
      const double r = reference::RoundTo(target, v[i]);
      int e = 0;
      std::frexp(std::fabs(r), &e);
      const int bits = target == DType::kBF16 ? 8 : 11;
      v[i] = r + std::copysign(std::ldexp(1.0, e - 1 - bits), r);
    }
  }
  v[0] = 0.0;
  return RoundAll(src, std::move(v));
}

void AddConvertCases(std::vector<OpCheckCase>& cases) {
  const std::pair<DType, DType> pairs[] = {
      {DType::kF32, DType::kBF16}, {DType::kF32, DType::kF16},  {DType::kBF16, DType::kF32},
      {DType::kF16, DType::kF32},  {DType::kBF16, DType::kF16}, {DType::kF16, DType::kBF16},
      {DType::kF32, DType::kF32},
  };
  for (auto [src, dst] : pairs) {
    cases.push_back(MakeCase("Convert", DTypeTag(src) + "_to_" + DTypeTag(dst), kExact,
                             [src = src, dst = dst](DeviceIo& d, Rng& rng, Checker& c) {
                               const int64_t n = 4099;
                               Values x = ConvertInputs(rng, n, src, dst);
                               Tensor in = d.Up(src, {n}, x);
                               Tensor out = d.Up(dst, {n}, NaNs(n));
                               d.backend().Convert(in, out);
                               c.Compare("out", d.Down(out), RoundAll(dst, x));
                             }));
  }
}

// ---- GEMM family ----

struct GemmCase {
  std::string name;
  DType b_dtype;
  int64_t m, n, k;
  bool trans_a, trans_b;
  float alpha = 1.0f, beta = 0.0f;
};

void AddGemmCases(std::vector<OpCheckCase>& cases) {
  std::vector<GemmCase> specs = {
      {"f32_nn", DType::kF32, 7, 13, 29, false, false},
      {"f32_trans_b", DType::kF32, 7, 13, 29, false, true},
      {"f32_trans_a", DType::kF32, 7, 13, 29, true, false},
      {"f32_trans_a_trans_b", DType::kF32, 7, 13, 29, true, true},
      {"f32_alpha_beta", DType::kF32, 9, 11, 17, false, true, 0.5f, -1.5f},
      {"f32_k1", DType::kF32, 6, 5, 1, false, false},
      {"f32_k0_beta", DType::kF32, 3, 4, 0, false, true, 1.0f, 0.25f},
      {"f32_gemv_m1_trans_b", DType::kF32, 1, 301, 257, false, true},
      {"f32_gemv_m3_trans_a", DType::kF32, 3, 150, 70, true, false, 2.0f, 1.0f},
      {"f32_large", DType::kF32, 70, 130, 200, false, true},
  };
  for (DType w : {DType::kBF16, DType::kF16}) {
    const std::string t = DTypeTag(w);
    std::vector<GemmCase> ws = {
        {t + "_trans_b", w, 1, 37, 100, false, true},
        // A decode GEMV over several claimed ranges (cpu: a guided schedule, 4 ranges here on
        // 2 threads, the last one short), each range's rows read as 4, or 2, streams, with a
        // remainder.
        {t + "_gemv_ranges_trans_b", w, 1, 1031, 200, false, true},
        {t + "_m2_gemv_ranges_trans_b", w, 2, 1031, 200, false, true, 0.5f, -1.0f},
        {t, w, 1, 150, 100, false, false},
        {t + "_m2_trans_b", w, 2, 64, 48, false, true},
        {t + "_m3", w, 3, 37, 33, false, false},
        {t + "_m4_trans_b", w, 4, 129, 257, false, true},
        {t + "_m4", w, 4, 80, 19, false, false},
        {t + "_m2_alpha_beta_trans_b", w, 2, 33, 40, false, true, -0.75f, 0.5f},
        {t + "_m3_alpha_beta", w, 3, 70, 40, false, false, 1.25f, 2.0f},
        {t + "_trans_a_m2_trans_b", w, 2, 21, 35, true, true},
        {t + "_panel_m5_trans_b", w, 5, 37, 100, false, true},
        {t + "_panel_m9", w, 9, 70, 45, false, false},
        {t + "_panel_trans_a_m12", w, 12, 30, 50, true, false},
        {t + "_panel_alpha_beta_trans_b", w, 16, 40, 64, false, true, 0.5f, -1.0f},
        {t + "_panels_trans_b", w, 8, 1100, 2048, false, true, 1.0f, 0.5f},
        {t + "_panels", w, 6, 2048, 1100, false, false, 1.0f, 0.5f},
        // bf16 b [N,K] up to 64 rows (a short prefill): the GEMV kernel over tiles of 64 KiB of
        // weights (32 rows of K = 1000 here), each met by the rows 4 at a time, with a last
        // partial pass of 1 row; 65 rows go to the panels. f16 takes the panels throughout.
        {t + "_m37_tiles_alpha_beta_trans_b", w, 37, 70, 1000, false, true, 0.5f, -1.0f},
        {t + "_m64_trans_b", w, 64, 33, 70, false, true},
        {t + "_m65_trans_b", w, 65, 33, 70, false, true},
    };
    specs.insert(specs.end(), ws.begin(), ws.end());
  }
  for (const GemmCase& s : specs) {
    cases.push_back(
        MakeCase("Gemm", s.name, kF32Accumulate, [s](DeviceIo& d, Rng& rng, Checker& c) {
          Values a = RoundAll(DType::kF32, rng.Uniforms(s.m * s.k, -1, 1));
          Values b = RoundAll(s.b_dtype, rng.Uniforms(s.k * s.n, -1, 1));
          Values c0 = s.beta == 0.0f ? NaNs(s.m * s.n)
                                     : RoundAll(DType::kF32, rng.Uniforms(s.m * s.n, -1, 1));
          Shape a_shape = s.trans_a ? Shape{s.k, s.m} : Shape{s.m, s.k};
          Shape b_shape = s.trans_b ? Shape{s.n, s.k} : Shape{s.k, s.n};
          Tensor ta = d.Up(DType::kF32, a_shape, a);
          Tensor tb = d.Up(s.b_dtype, b_shape, b);
          Tensor tc = d.Up(DType::kF32, {s.m, s.n}, c0);
          GemmOptions o{s.trans_a, s.trans_b, s.alpha, s.beta};
          d.backend().Gemm(ta, tb, tc, o);
          c.Compare("c", d.Down(tc), reference::Gemm(s.m, s.n, s.k, a, b, c0, o));
        }));
  }
}

void AddBatchedGemmCases(std::vector<OpCheckCase>& cases) {
  struct Spec {
    std::string name;
    DType w;
    int64_t batch, m, n, k;
    bool ta, tb;
    float alpha, beta;
  };
  const Spec specs[] = {
      {"f32_nn", DType::kF32, 3, 5, 7, 9, false, false, 1.0f, 0.0f},
      {"f32_trans_a_trans_b", DType::kF32, 2, 6, 4, 11, true, true, 1.0f, 0.0f},
      {"f32_alpha_beta_trans_b", DType::kF32, 4, 3, 8, 5, false, true, -2.0f, 0.5f},
      {"bf16_trans_b", DType::kBF16, 2, 1, 33, 40, false, true, 1.0f, 0.0f},
      {"f16_m6", DType::kF16, 3, 6, 20, 17, false, false, 1.0f, 1.0f},
      {"bf16_empty_batch", DType::kBF16, 0, 3, 4, 5, false, false, 1.0f, 0.0f},
  };
  for (const Spec& s : specs) {
    cases.push_back(
        MakeCase("BatchedGemm", s.name, kF32Accumulate, [s](DeviceIo& d, Rng& rng, Checker& c) {
          Values a = RoundAll(DType::kF32, rng.Uniforms(s.batch * s.m * s.k, -1, 1));
          Values b = RoundAll(s.w, rng.Uniforms(s.batch * s.k * s.n, -1, 1));
          Values c0 = s.beta == 0.0f
                          ? NaNs(s.batch * s.m * s.n)
                          : RoundAll(DType::kF32, rng.Uniforms(s.batch * s.m * s.n, -1, 1));
          Tensor ta =
              d.Up(DType::kF32, s.ta ? Shape{s.batch, s.k, s.m} : Shape{s.batch, s.m, s.k}, a);
          Tensor tb = d.Up(s.w, s.tb ? Shape{s.batch, s.n, s.k} : Shape{s.batch, s.k, s.n}, b);
          Tensor tc = d.Up(DType::kF32, {s.batch, s.m, s.n}, c0);
          GemmOptions o{s.ta, s.tb, s.alpha, s.beta};
          d.backend().BatchedGemm(ta, tb, tc, o);
          c.Compare("c", d.Down(tc), reference::BatchedGemm(s.batch, s.m, s.n, s.k, a, b, c0, o));
        }));
  }
}

void AddGroupedGemmCases(std::vector<OpCheckCase>& cases) {
  struct Spec {
    std::string name;
    DType w;
    std::vector<int64_t> groups;
    int64_t n, k;
    bool tb;
    float alpha, beta;
  };
  const Spec specs[] = {
      {"f32_trans_b", DType::kF32, {3, 0, 5, 1}, 12, 20, true, 1.0f, 0.0f},
      {"f32", DType::kF32, {2, 6, 0, 1}, 9, 14, false, 1.0f, 0.0f},
      {"f32_alpha_beta", DType::kF32, {4, 0, 3}, 8, 10, false, 0.5f, 1.0f},
      {"bf16_trans_b", DType::kBF16, {1, 0, 2, 1}, 40, 64, true, 1.0f, 0.0f},
      {"bf16", DType::kBF16, {4, 0, 7}, 37, 30, false, 1.0f, 0.0f},
      {"bf16_alpha_beta_trans_b", DType::kBF16, {0, 6, 3, 0}, 25, 33, true, -1.5f, 0.5f},
      {"f16_trans_b", DType::kF16, {3, 1, 0, 5}, 24, 18, true, 1.0f, 0.0f},
      {"f16", DType::kF16, {2, 0, 9}, 19, 21, false, 1.0f, 1.0f},
      {"zero_rows_trans_b", DType::kBF16, {0, 0, 0}, 8, 16, true, 1.0f, 0.0f},
      {"zero_rows_f32", DType::kF32, {0, 0}, 5, 7, false, 1.0f, 0.0f},
      {"empty_first_last", DType::kF32, {0, 3, 0}, 6, 5, true, 1.0f, 0.0f},
      // Decode shapes (every group <= 4 rows): one parallel region over all groups' row blocks,
      // claimed in ranges of at least 64 KiB of weights that cross group boundaries; N = 10
      // leaves a partial block per group.
      {"bf16_decode_trans_b", DType::kBF16, {1, 2, 0, 3}, 10, 4096, true, 1.0f, 0.0f},
      {"f16_decode_alpha_beta_trans_b", DType::kF16, {2, 0, 1, 4}, 10, 4096, true, 0.5f, 1.0f},
      // Prefill shapes: bf16 groups of up to 64 rows share one region of tiled GEMVs; a group of
      // 65 sends every group through its own GEMM (GEMV or panels).
      {"bf16_prefill_alpha_beta_trans_b", DType::kBF16, {7, 0, 64, 5}, 40, 1100, true, 0.5f, 1.0f},
      {"bf16_prefill_panel_trans_b", DType::kBF16, {7, 65, 0, 2}, 40, 1100, true, 1.0f, 0.0f},
  };
  for (const Spec& s : specs) {
    cases.push_back(
        MakeCase("GroupedGemm", s.name, kF32Accumulate, [s](DeviceIo& d, Rng& rng, Checker& c) {
          const int64_t rows = Sum(s.groups), g = static_cast<int64_t>(s.groups.size());
          Values a = RoundAll(DType::kF32, rng.Uniforms(rows * s.k, -1, 1));
          Values b = RoundAll(s.w, rng.Uniforms(g * s.k * s.n, -1, 1));
          Values c0 = s.beta == 0.0f ? NaNs(rows * s.n)
                                     : RoundAll(DType::kF32, rng.Uniforms(rows * s.n, -1, 1));
          Tensor ta = d.Up(DType::kF32, {rows, s.k}, a);
          Tensor tb = d.Up(s.w, s.tb ? Shape{g, s.n, s.k} : Shape{g, s.k, s.n}, b);
          Tensor tc = d.Up(DType::kF32, {rows, s.n}, c0);
          GemmOptions o{false, s.tb, s.alpha, s.beta};
          d.backend().GroupedGemm(ta, tb, tc, s.groups, o);
          c.Compare("c", d.Down(tc), reference::GroupedGemm(s.groups, s.n, s.k, a, b, c0, o));
        }));
  }
  // GroupedGemmShared: one `a`, two weights (an expert layer's gate and up), each checked against
  // its own reference GroupedGemm. The decode shape runs both weights' row blocks in one region.
  const Spec shared_specs[] = {
      {"bf16_decode_trans_b", DType::kBF16, {1, 2, 0, 3}, 10, 4096, true, 1.0f, 0.0f},
      {"f32_prefill_trans_b", DType::kF32, {7, 0, 5}, 12, 20, true, 1.0f, 0.0f},
      {"bf16_prefill_trans_b", DType::kBF16, {9, 0, 5}, 40, 1100, true, 1.0f, 0.0f},
      {"f16_alpha_beta", DType::kF16, {2, 0, 3}, 9, 14, false, 0.5f, 1.0f},
  };
  for (const Spec& s : shared_specs) {
    cases.push_back(MakeCase(
        "GroupedGemmShared", s.name, kF32Accumulate, [s](DeviceIo& d, Rng& rng, Checker& c) {
          const int64_t rows = Sum(s.groups), g = static_cast<int64_t>(s.groups.size());
          Values a = RoundAll(DType::kF32, rng.Uniforms(rows * s.k, -1, 1));
          Values b0 = RoundAll(s.w, rng.Uniforms(g * s.k * s.n, -1, 1));
          Values b1 = RoundAll(s.w, rng.Uniforms(g * s.k * s.n, -1, 1));
          Values c0 = s.beta == 0.0f ? NaNs(rows * s.n)
                                     : RoundAll(DType::kF32, rng.Uniforms(rows * s.n, -1, 1));
          Values c1 = s.beta == 0.0f ? NaNs(rows * s.n)
                                     : RoundAll(DType::kF32, rng.Uniforms(rows * s.n, -1, 1));
          const Shape b_shape = s.tb ? Shape{g, s.n, s.k} : Shape{g, s.k, s.n};
          Tensor ta = d.Up(DType::kF32, {rows, s.k}, a);
          const Tensor bs[] = {d.Up(s.w, b_shape, b0), d.Up(s.w, b_shape, b1)};
          const Tensor cs[] = {d.Up(DType::kF32, {rows, s.n}, c0),
                               d.Up(DType::kF32, {rows, s.n}, c1)};
          GemmOptions o{false, s.tb, s.alpha, s.beta};
          d.backend().GroupedGemmShared(ta, bs, cs, s.groups, o);
          c.Compare("c0", d.Down(cs[0]), reference::GroupedGemm(s.groups, s.n, s.k, a, b0, c0, o));
          c.Compare("c1", d.Down(cs[1]), reference::GroupedGemm(s.groups, s.n, s.k, a, b1, c1, o));
        }));
  }
}

// The activations a GEMM with quantized weights `w` multiplies (Backend::Gemm): a ([rows, k], or
// [k, rows] when trans_a) rounded to 8 bits per block (RoundActivationBlocks) where rows <=
// kInt8ActivationMaxRows, else a itself.
Values ActivationsSeen(DType w, int64_t rows, int64_t k, bool trans_a, const Values& a) {
  if (!IsQuantized(w) || rows > kInt8ActivationMaxRows) return a;
  std::vector<float> x(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      x[static_cast<size_t>(r * k + i)] =
          static_cast<float>(a[static_cast<size_t>(trans_a ? i * rows + r : r * k + i)]);
    }
  }
  std::vector<int8_t> q(x.size());
  std::vector<float> d(x.size() / 32);
  RoundActivationBlocks(x.data(), rows * k, q.data(), d.data());
  Values out(a.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      const auto j = static_cast<size_t>(r * k + i);
      out[static_cast<size_t>(trans_a ? i * rows + r : r * k + i)] =
          static_cast<double>(d[j / 32]) * q[j];
    }
  }
  return out;
}

// ActivationsSeen of each group of a grouped GEMM's a [R, k].
Values GroupActivationsSeen(DType w, const std::vector<int64_t>& groups, int64_t k,
                            const Values& a) {
  Values out;
  out.reserve(a.size());
  size_t row = 0;
  for (int64_t rows : groups) {
    const Values part(a.begin() + static_cast<std::ptrdiff_t>(row * k),
                      a.begin() + static_cast<std::ptrdiff_t>((row + rows) * k));
    const Values seen = ActivationsSeen(w, rows, k, false, part);
    out.insert(out.end(), seen.begin(), seen.end());
    row += static_cast<size_t>(rows);
  }
  return out;
}

// Quantized weights (b [N,K], trans_b): the kernels against the reference GEMM of the dequantized
// blocks in double, with the activations the backend rounds (ActivationsSeen), so the only
// difference allowed is the order of the f32 sums. Groups up to kInt8ActivationMaxRows run the
// in-register kernels, larger M the dequantized panels; K = 4096 with N = 10 splits row ranges
// across groups as the decode step's experts do. The `_vs_f32` cases hold the rounding itself
// against the unrounded product (kInt8Activations).
void AddQuantizedGemmCases(std::vector<OpCheckCase>& cases) {
  struct Spec {
    std::string name;
    int64_t m, n, k;
    bool trans_a;
    float alpha, beta;
  };
  for (DType w : {DType::kQ8_0, DType::kQ4_0, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K}) {
    const std::string t = DTypeTag(w);
    const int64_t kb = DTypeBlockSize(w);  // K in whole blocks
    const Spec specs[] = {
        {t + "_m1", 1, 37, 8 * kb, false, 1.0f, 0.0f},
        {t + "_m2_alpha_beta", 2, 33, 3 * kb, false, -0.75f, 0.5f},
        {t + "_m3", 3, 64, 2 * kb, false, 1.0f, 0.0f},
        {t + "_m4_k4096", 4, 129, 4096, false, 1.0f, 0.0f},
        {t + "_trans_a_m2", 2, 21, 2 * kb, true, 1.0f, 0.0f},
        {t + "_m5", 5, 37, 4 * kb, false, 1.0f, 0.0f},
        {t + "_alpha_beta_m16", 16, 40, 2 * kb, false, 0.5f, -1.0f},
        {t + "_trans_a_m13", 13, 19, 2 * kb, true, 1.0f, 0.0f},
        {t + "_m64", 64, 9, 2 * kb, false, 1.0f, 0.0f},
        {t + "_panel_m65", 65, 9, 2 * kb, false, 1.0f, 0.0f},
    };
    for (const Spec& s : specs) {
      cases.push_back(MakeQuantizedCase("Gemm", s.name, [s, w](DeviceIo& d, Rng& rng, Checker& c) {
        Values a = RoundAll(DType::kF32, rng.Uniforms(s.m * s.k, -1, 1));
        Values b;
        Tensor tb = d.UpQuantized(w, {s.n, s.k}, rng, b);
        Values c0 = s.beta == 0.0f ? NaNs(s.m * s.n)
                                   : RoundAll(DType::kF32, rng.Uniforms(s.m * s.n, -1, 1));
        Tensor ta = d.Up(DType::kF32, s.trans_a ? Shape{s.k, s.m} : Shape{s.m, s.k}, a);
        Tensor tc = d.Up(DType::kF32, {s.m, s.n}, c0);
        GemmOptions o{s.trans_a, true, s.alpha, s.beta};
        d.backend().Gemm(ta, tb, tc, o);
        c.Compare(
            "c", d.Down(tc),
            reference::Gemm(s.m, s.n, s.k, ActivationsSeen(w, s.m, s.k, s.trans_a, a), b, c0, o));
      }));
    }
    for (const Spec& s : {specs[0], specs[3], specs[8]}) {
      cases.push_back(MakeQuantizedCase(
          "Gemm", s.name + "_vs_f32",
          [s, w](DeviceIo& d, Rng& rng, Checker& c) {
            Values a = RoundAll(DType::kF32, rng.Uniforms(s.m * s.k, -1, 1));
            Values b;
            Tensor tb = d.UpQuantized(w, {s.n, s.k}, rng, b);
            Values c0 = RoundAll(DType::kF32, rng.Uniforms(s.m * s.n, -1, 1));
            Tensor ta = d.Up(DType::kF32, {s.m, s.k}, a);
            Tensor tc = d.Up(DType::kF32, {s.m, s.n}, c0);
            GemmOptions o{false, true, 1.0f, 0.0f};
            d.backend().Gemm(ta, tb, tc, o);
            c.Compare("c", d.Down(tc), reference::Gemm(s.m, s.n, s.k, a, b, c0, o));
          },
          kInt8Activations));
    }
    struct GroupSpec {
      std::string name;
      std::vector<int64_t> groups;
      int64_t n, k;
      float alpha, beta;
    };
    const GroupSpec group_specs[] = {
        {t + "_decode", {1, 2, 0, 3}, 10, 4096, 1.0f, 0.0f},
        {t + "_decode_alpha_beta", {2, 0, 1, 4}, 10, 4096, 0.5f, 1.0f},
        {t + "_prefill", {7, 0, 5}, 12, 2 * kb, 1.0f, 0.0f},
        {t + "_prefill_panel", {3, 70, 0, 33}, 12, 2 * kb, 1.0f, 0.0f},
    };
    for (const GroupSpec& s : group_specs) {
      cases.push_back(
          MakeQuantizedCase("GroupedGemm", s.name, [s, w](DeviceIo& d, Rng& rng, Checker& c) {
            const int64_t rows = Sum(s.groups), g = static_cast<int64_t>(s.groups.size());
            Values a = RoundAll(DType::kF32, rng.Uniforms(rows * s.k, -1, 1));
            Values b;
            Tensor tb = d.UpQuantized(w, {g, s.n, s.k}, rng, b);
            Values c0 = s.beta == 0.0f ? NaNs(rows * s.n)
                                       : RoundAll(DType::kF32, rng.Uniforms(rows * s.n, -1, 1));
            Tensor ta = d.Up(DType::kF32, {rows, s.k}, a);
            Tensor tc = d.Up(DType::kF32, {rows, s.n}, c0);
            GemmOptions o{false, true, s.alpha, s.beta};
            d.backend().GroupedGemm(ta, tb, tc, s.groups, o);
            c.Compare("c", d.Down(tc),
                      reference::GroupedGemm(s.groups, s.n, s.k,
                                             GroupActivationsSeen(w, s.groups, s.k, a), b, c0, o));
          }));
    }
    // An expert layer's gate and up in one region, as the decode step runs them.
    const GroupSpec& s = group_specs[0];
    cases.push_back(
        MakeQuantizedCase("GroupedGemmShared", s.name, [s, w](DeviceIo& d, Rng& rng, Checker& c) {
          const int64_t rows = Sum(s.groups), g = static_cast<int64_t>(s.groups.size());
          Values a = RoundAll(DType::kF32, rng.Uniforms(rows * s.k, -1, 1));
          Values b0, b1;
          Tensor ta = d.Up(DType::kF32, {rows, s.k}, a);
          const Tensor bs[] = {d.UpQuantized(w, {g, s.n, s.k}, rng, b0),
                               d.UpQuantized(w, {g, s.n, s.k}, rng, b1)};
          const Tensor cs[] = {d.Up(DType::kF32, {rows, s.n}, NaNs(rows * s.n)),
                               d.Up(DType::kF32, {rows, s.n}, NaNs(rows * s.n))};
          GemmOptions o{false, true, 1.0f, 0.0f};
          d.backend().GroupedGemmShared(ta, bs, cs, s.groups, o);
          const Values seen = GroupActivationsSeen(w, s.groups, s.k, a);
          c.Compare("c0", d.Down(cs[0]),
                    reference::GroupedGemm(s.groups, s.n, s.k, seen, b0, NaNs(rows * s.n), o));
          c.Compare("c1", d.Down(cs[1]),
                    reference::GroupedGemm(s.groups, s.n, s.k, seen, b1, NaNs(rows * s.n), o));
        }));
  }
}

void AddGroupedGemmWeightGradCases(std::vector<OpCheckCase>& cases) {
  struct Spec {
    std::string name;
    std::vector<int64_t> groups;
    int64_t n, k;
    float beta;
  };
  const Spec specs[] = {
      {"beta0", {3, 0, 5, 1}, 12, 20, 0.0f},          {"beta1", {2, 0, 4}, 9, 7, 1.0f},
      {"beta_half_large", {40, 0, 70}, 33, 65, 0.5f}, {"zero_rows_beta_half", {0, 0}, 4, 6, 0.5f},
      {"zero_rows_beta0", {0, 0, 0}, 3, 5, 0.0f},
  };
  for (const Spec& s : specs) {
    cases.push_back(MakeCase(
        "GroupedGemmWeightGrad", s.name, kF32Accumulate, [s](DeviceIo& d, Rng& rng, Checker& c) {
          const int64_t rows = Sum(s.groups), g = static_cast<int64_t>(s.groups.size());
          Values x = RoundAll(DType::kF32, rng.Uniforms(rows * s.k, -1, 1));
          Values dy = RoundAll(DType::kF32, rng.Uniforms(rows * s.n, -1, 1));
          Values dw0 = s.beta == 0.0f ? NaNs(g * s.n * s.k)
                                      : RoundAll(DType::kF32, rng.Uniforms(g * s.n * s.k, -1, 1));
          Tensor tx = d.Up(DType::kF32, {rows, s.k}, x);
          Tensor tdy = d.Up(DType::kF32, {rows, s.n}, dy);
          Tensor tdw = d.Up(DType::kF32, {g, s.n, s.k}, dw0);
          d.backend().GroupedGemmWeightGrad(tx, tdy, tdw, s.groups, s.beta);
          c.Compare("dw", d.Down(tdw),
                    reference::GroupedGemmWeightGrad(s.groups, s.n, s.k, x, dy, dw0, s.beta));
        }));
  }
}

// ---- elementwise ----

void AddElementwiseCases(std::vector<OpCheckCase>& cases) {
  for (int64_t n : {int64_t{7}, int64_t{40000}}) {
    const std::string sz = "n" + std::to_string(n);
    cases.push_back(MakeCase("Add", sz, kF32Simple, [n = n](DeviceIo& d, Rng& rng, Checker& c) {
      Values a = RoundAll(DType::kF32, rng.Uniforms(n, -2, 2));
      Values b = RoundAll(DType::kF32, rng.Uniforms(n, -2, 2));
      Tensor ta = d.Up(DType::kF32, {n}, a), tb = d.Up(DType::kF32, {n}, b);
      Tensor out = d.Up(DType::kF32, {n}, NaNs(n));
      d.backend().Add(ta, tb, out);
      c.Compare("out", d.Down(out), reference::Add(a, b));
    }));
    cases.push_back(MakeCase("Mul", sz, kF32Simple, [n = n](DeviceIo& d, Rng& rng, Checker& c) {
      Values a = RoundAll(DType::kF32, rng.Uniforms(n, -2, 2));
      Values b = RoundAll(DType::kF32, rng.Uniforms(n, -2, 2));
      Tensor ta = d.Up(DType::kF32, {n}, a), tb = d.Up(DType::kF32, {n}, b);
      Tensor out = d.Up(DType::kF32, {n}, NaNs(n));
      d.backend().Mul(ta, tb, out);
      c.Compare("out", d.Down(out), reference::Mul(a, b));
    }));
    cases.push_back(MakeCase("Scale", sz, kF32Simple, [n = n](DeviceIo& d, Rng& rng, Checker& c) {
      Values x = RoundAll(DType::kF32, rng.Uniforms(n, -2, 2));
      Tensor tx = d.Up(DType::kF32, {n}, x), out = d.Up(DType::kF32, {n}, NaNs(n));
      d.backend().Scale(tx, -0.3f, out);
      c.Compare("out", d.Down(out), reference::Scale(x, -0.3f));
    }));
    cases.push_back(MakeCase("Axpy", sz, kF32Simple, [n = n](DeviceIo& d, Rng& rng, Checker& c) {
      Values x = RoundAll(DType::kF32, rng.Uniforms(n, -2, 2));
      Values y = RoundAll(DType::kF32, rng.Uniforms(n, -2, 2));
      Tensor tx = d.Up(DType::kF32, {n}, x), ty = d.Up(DType::kF32, {n}, y);
      d.backend().Axpy(1.75f, tx, ty);
      c.Compare("y", d.Down(ty), reference::Axpy(1.75f, x, y));
    }));
    struct Unary {
      const char* op;
      void (Backend::*fn)(const Tensor&, const Tensor&);
      Values (*ref)(reference::ConstValues);
    };
    for (Unary u : {Unary{"Silu", &Backend::Silu, &reference::Silu},
                    Unary{"Gelu", &Backend::Gelu, &reference::Gelu},
                    Unary{"Relu", &Backend::Relu, &reference::Relu}}) {
      cases.push_back(
          MakeCase(u.op, sz, kF32Math, [n = n, u = u](DeviceIo& d, Rng& rng, Checker& c) {
            Values x = RoundAll(DType::kF32, rng.Uniforms(n, -9, 9));
            Tensor tx = d.Up(DType::kF32, {n}, x), out = d.Up(DType::kF32, {n}, NaNs(n));
            (d.backend().*u.fn)(tx, out);
            c.Compare("out", d.Down(out), u.ref(x));
          }));
    }
    struct UnaryBackward {
      const char* op;
      void (Backend::*fn)(const Tensor&, const Tensor&, const Tensor&);
      Values (*ref)(reference::ConstValues, reference::ConstValues);
    };
    for (UnaryBackward u :
         {UnaryBackward{"SiluBackward", &Backend::SiluBackward, &reference::SiluBackward},
          UnaryBackward{"GeluBackward", &Backend::GeluBackward, &reference::GeluBackward},
          UnaryBackward{"ReluBackward", &Backend::ReluBackward, &reference::ReluBackward}}) {
      cases.push_back(
          MakeCase(u.op, sz, kF32Math, [n = n, u = u](DeviceIo& d, Rng& rng, Checker& c) {
            Values x = RoundAll(DType::kF32, rng.Uniforms(n, -9, 9));
            Values dout = RoundAll(DType::kF32, rng.Uniforms(n, -1, 1));
            Tensor tx = d.Up(DType::kF32, {n}, x), td = d.Up(DType::kF32, {n}, dout);
            Tensor dx = d.Up(DType::kF32, {n}, NaNs(n));
            (d.backend().*u.fn)(tx, td, dx);
            c.Compare("dx", d.Down(dx), u.ref(x, dout));
          }));
    }
    cases.push_back(MakeCase("Swiglu", sz, kF32Math, [n = n](DeviceIo& d, Rng& rng, Checker& c) {
      Values g = RoundAll(DType::kF32, rng.Uniforms(n, -8, 8));
      Values u = RoundAll(DType::kF32, rng.Uniforms(n, -2, 2));
      Tensor tg = d.Up(DType::kF32, {n}, g), tu = d.Up(DType::kF32, {n}, u);
      Tensor out = d.Up(DType::kF32, {n}, NaNs(n));
      d.backend().Swiglu(tg, tu, out);
      c.Compare("out", d.Down(out), reference::Swiglu(g, u));
    }));
    cases.push_back(
        MakeCase("SwigluBackward", sz, kF32Math, [n = n](DeviceIo& d, Rng& rng, Checker& c) {
          Values g = RoundAll(DType::kF32, rng.Uniforms(n, -8, 8));
          Values u = RoundAll(DType::kF32, rng.Uniforms(n, -2, 2));
          Values dout = RoundAll(DType::kF32, rng.Uniforms(n, -1, 1));
          Tensor tg = d.Up(DType::kF32, {n}, g), tu = d.Up(DType::kF32, {n}, u);
          Tensor td = d.Up(DType::kF32, {n}, dout);
          Tensor dg = d.Up(DType::kF32, {n}, NaNs(n)), du = d.Up(DType::kF32, {n}, NaNs(n));
          d.backend().SwigluBackward(tg, tu, td, dg, du);
          reference::SwigluGrads ref = reference::SwigluBackward(g, u, dout);
          c.Compare("dgate", d.Down(dg), ref.dgate);
          c.Compare("dup", d.Down(du), ref.dup);
        }));
  }
  // Outputs may alias inputs.
  cases.push_back(MakeCase("Add", "in_place", kF32Simple, [](DeviceIo& d, Rng& rng, Checker& c) {
    const int64_t n = 1000;
    Values a = RoundAll(DType::kF32, rng.Uniforms(n, -2, 2));
    Values b = RoundAll(DType::kF32, rng.Uniforms(n, -2, 2));
    Tensor ta = d.Up(DType::kF32, {10, 100}, a), tb = d.Up(DType::kF32, {10, 100}, b);
    d.backend().Add(ta, tb, ta);
    c.Compare("a", d.Down(ta), reference::Add(a, b));
  }));
  cases.push_back(MakeCase("Silu", "in_place", kF32Math, [](DeviceIo& d, Rng& rng, Checker& c) {
    const int64_t n = 999;
    Values x = RoundAll(DType::kF32, rng.Uniforms(n, -6, 6));
    Tensor tx = d.Up(DType::kF32, {n}, x);
    d.backend().Silu(tx, tx);
    c.Compare("x", d.Down(tx), reference::Silu(x));
  }));
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 5}, {37, 130}}) {
    cases.push_back(MakeCase("AddBias", "r" + Dims({rows, n}), kF32Simple,
                             [rows = rows, n = n](DeviceIo& d, Rng& rng, Checker& c) {
                               Values x = RoundAll(DType::kF32, rng.Uniforms(rows * n, -2, 2));
                               Values bias = RoundAll(DType::kF32, rng.Uniforms(n, -2, 2));
                               Tensor tx = d.Up(DType::kF32, {rows, n}, x);
                               Tensor tb = d.Up(DType::kF32, {n}, bias);
                               Tensor out = d.Up(DType::kF32, {rows, n}, NaNs(rows * n));
                               d.backend().AddBias(tx, tb, out);
                               c.Compare("out", d.Down(out), reference::AddBias(rows, n, x, bias));
                             }));
  }
}

// ---- reductions, softmax, top-k, cross-entropy ----

void AddReduceCases(std::vector<OpCheckCase>& cases) {
  struct OpName {
    ReduceOp op;
    const char* name;
  };
  const OpName ops[] = {{ReduceOp::kSum, "sum"},
                        {ReduceOp::kMean, "mean"},
                        {ReduceOp::kMax, "max"},
                        {ReduceOp::kSumSquares, "sum_squares"}};
  for (OpName o : ops) {
    for (ReduceAxis axis : {ReduceAxis::kLast, ReduceAxis::kFirst}) {
      if (o.op == ReduceOp::kMax && axis == ReduceAxis::kFirst) continue;
      const std::string an = axis == ReduceAxis::kLast ? "last" : "first";
      // Rank 2 and rank 3 inputs; the view is [R, N] with N the last dim (kLast) or R the first.
      for (int rank3 = 0; rank3 < 2; ++rank3) {
        const std::string name = std::string(o.name) + "_" + an + (rank3 ? "_rank3" : "");
        cases.push_back(
            MakeCase("Reduce", name, kF32Math, [o, axis, rank3](DeviceIo& d, Rng& rng, Checker& c) {
              Shape shape = rank3 ? Shape{6, 7, 45} : Shape{33, 1001};
              const int64_t rows =
                  axis == ReduceAxis::kLast ? shape.numel() / shape[shape.rank() - 1] : shape[0];
              const int64_t n = shape.numel() / rows;
              Values x = RoundAll(DType::kF32, rng.Uniforms(shape.numel(), -3, 3));
              Tensor tx = d.Up(DType::kF32, shape, x);
              const int64_t out_n = axis == ReduceAxis::kLast ? rows : n;
              Tensor out = d.Up(DType::kF32, {out_n}, NaNs(out_n));
              d.backend().Reduce(tx, out, o.op, axis);
              c.Compare("out", d.Down(out), reference::Reduce(rows, n, x, o.op, axis));
            }));
      }
    }
  }
}

void AddSoftmaxCases(std::vector<OpCheckCase>& cases) {
  struct Spec {
    std::string name;
    int64_t rows, n;
    double range;
  };
  const Spec specs[] = {
      {"r3x5", 3, 5, 3}, {"r17x1000", 17, 1000, 10}, {"large_logits", 4, 77, 2000}};
  for (const Spec& s : specs) {
    cases.push_back(MakeCase("Softmax", s.name, kF32Math, [s](DeviceIo& d, Rng& rng, Checker& c) {
      Values x = RoundAll(DType::kF32, rng.Uniforms(s.rows * s.n, -s.range, s.range));
      Tensor tx = d.Up(DType::kF32, {s.rows, s.n}, x);
      Tensor out = d.Up(DType::kF32, {s.rows, s.n}, NaNs(s.rows * s.n));
      d.backend().Softmax(tx, out);
      c.Compare("out", d.Down(out), reference::Softmax(s.rows, s.n, x));
    }));
    cases.push_back(
        MakeCase("SoftmaxBackward", s.name, kF32Math, [s](DeviceIo& d, Rng& rng, Checker& c) {
          Values x = rng.Uniforms(s.rows * s.n, -s.range, s.range);
          Values y = RoundAll(DType::kF32, reference::Softmax(s.rows, s.n, x));
          Values dy = RoundAll(DType::kF32, rng.Uniforms(s.rows * s.n, -1, 1));
          Tensor ty = d.Up(DType::kF32, {s.rows, s.n}, y);
          Tensor tdy = d.Up(DType::kF32, {s.rows, s.n}, dy);
          Tensor dx = d.Up(DType::kF32, {s.rows, s.n}, NaNs(s.rows * s.n));
          d.backend().SoftmaxBackward(ty, tdy, dx);
          c.Compare("dx", d.Down(dx), reference::SoftmaxBackward(s.rows, s.n, y, dy));
        }));
  }
}

void AddTopKCases(std::vector<OpCheckCase>& cases) {
  struct Spec {
    std::string name;
    int64_t rows, n;
    int k;
    bool ties;
  };
  const Spec specs[] = {
      {"k1", 9, 8, 1, false},
      {"k1_ties", 9, 8, 1, true},
      {"kN", 5, 8, 8, false},
      {"kN_ties", 5, 8, 8, true},
      {"k2_of_8_ties", 33, 8, 2, true},
      {"k8_of_64", 20, 64, 8, false},
      {"k6_of_160_ties", 7, 160, 6, true},
      {"k40_of_300_ties", 4, 300, 40, true},
      {"k300_of_300_ties", 3, 300, 300, true},
  };
  for (const Spec& s : specs) {
    cases.push_back(MakeCase("TopK", s.name, kExact, [s](DeviceIo& d, Rng& rng, Checker& c) {
      Values x(static_cast<size_t>(s.rows * s.n));
      for (double& v : x)
        v = s.ties ? static_cast<double>(rng.Int(-2, 2)) * 0.5 : rng.Uniform(-4, 4);
      x = RoundAll(DType::kF32, std::move(x));
      Tensor tx = d.Up(DType::kF32, {s.rows, s.n}, x);
      Tensor values = d.Up(DType::kF32, {s.rows, s.k}, NaNs(s.rows * s.k));
      Tensor indices = d.UpI32({s.rows, s.k}, std::vector<int32_t>(s.rows * s.k, -7));
      d.backend().TopK(tx, s.k, values, indices);
      reference::TopKResult ref = reference::TopK(s.rows, s.n, x, s.k);
      c.Compare("values", d.Down(values), ref.values);
      c.RequireEqual("indices", d.DownI32(indices), ref.indices);
    }));
  }
}

std::vector<int32_t> Targets(Rng& rng, int64_t rows, int64_t v, bool ignore) {
  std::vector<int32_t> t(static_cast<size_t>(rows));
  for (size_t i = 0; i < t.size(); ++i) {
    t[i] = (ignore && i % 3 == 1) ? -1 : rng.Int(0, static_cast<int>(v) - 1);
  }
  return t;
}

void AddCrossEntropyCases(std::vector<OpCheckCase>& cases) {
  struct Spec {
    std::string name;
    int64_t rows, v;
    double range;
    bool ignore;
  };
  const Spec specs[] = {{"r4x10", 4, 10, 3, false},
                        {"ignore_index", 12, 50, 5, true},
                        {"large_logits_vocab3000", 6, 3000, 300, true}};
  for (const Spec& s : specs) {
    cases.push_back(
        MakeCase("CrossEntropy", s.name, kF32Math, [s](DeviceIo& d, Rng& rng, Checker& c) {
          Values logits = RoundAll(DType::kF32, rng.Uniforms(s.rows * s.v, -s.range, s.range));
          std::vector<int32_t> targets = Targets(rng, s.rows, s.v, s.ignore);
          Tensor tl = d.Up(DType::kF32, {s.rows, s.v}, logits);
          Tensor tt = d.UpI32({s.rows}, targets);
          Tensor losses = d.Up(DType::kF32, {s.rows}, NaNs(s.rows));
          Tensor lse = d.Up(DType::kF32, {s.rows}, NaNs(s.rows));
          d.backend().CrossEntropy(tl, tt, losses, lse);
          reference::CrossEntropyResult ref = reference::CrossEntropy(s.rows, s.v, logits, targets);
          c.Compare("losses", d.Down(losses), ref.losses);
          c.Compare("lse", d.Down(lse), ref.lse);
        }));
    cases.push_back(
        MakeCase("CrossEntropyBackward", s.name, kF32Math, [s](DeviceIo& d, Rng& rng, Checker& c) {
          Values logits = RoundAll(DType::kF32, rng.Uniforms(s.rows * s.v, -s.range, s.range));
          std::vector<int32_t> targets = Targets(rng, s.rows, s.v, s.ignore);
          Values lse =
              RoundAll(DType::kF32, reference::CrossEntropy(s.rows, s.v, logits, targets).lse);
          Values dl = RoundAll(DType::kF32, rng.Uniforms(s.rows, 0.1, 2));
          Tensor tl = d.Up(DType::kF32, {s.rows, s.v}, logits);
          Tensor tt = d.UpI32({s.rows}, targets);
          Tensor tlse = d.Up(DType::kF32, {s.rows}, lse);
          Tensor tdl = d.Up(DType::kF32, {s.rows}, dl);
          Tensor dlogits = d.Up(DType::kF32, {s.rows, s.v}, NaNs(s.rows * s.v));
          d.backend().CrossEntropyBackward(tl, tt, tlse, tdl, dlogits);
          c.Compare("dlogits", d.Down(dlogits),
                    reference::CrossEntropyBackward(s.rows, s.v, logits, targets, lse, dl));
        }));
  }
}

// ---- normalisation and rotary embedding ----

void AddRmsNormCases(std::vector<OpCheckCase>& cases) {
  for (DType w : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 7}, {19, 1000}}) {
      const std::string name = DTypeTag(w) + "_r" + Dims({rows, n});
      cases.push_back(MakeCase("RmsNorm", name, kF32Math,
                               [w = w, rows = rows, n = n](DeviceIo& d, Rng& rng, Checker& c) {
                                 Values x = RoundAll(DType::kF32, rng.Uniforms(rows * n, -3, 3));
                                 Values weight = RoundAll(w, rng.Uniforms(n, 0.5, 1.5));
                                 const float eps = 1e-5f;
                                 Tensor tx = d.Up(DType::kF32, {rows, n}, x);
                                 Tensor tw = d.Up(w, {n}, weight);
                                 Tensor out = d.Up(DType::kF32, {rows, n}, NaNs(rows * n));
                                 Tensor rstd = d.Up(DType::kF32, {rows}, NaNs(rows));
                                 d.backend().RmsNorm(tx, tw, eps, out, rstd);
                                 reference::RmsNormResult ref =
                                     reference::RmsNorm(rows, n, x, weight, eps);
                                 c.Compare("out", d.Down(out), ref.out);
                                 c.Compare("rstd", d.Down(rstd), ref.rstd);
                                 // Without rstd (inference).
                                 Tensor out2 = d.Up(DType::kF32, {rows, n}, NaNs(rows * n));
                                 d.backend().RmsNorm(tx, tw, eps, out2, Tensor());
                                 c.Compare("out_without_rstd", d.Down(out2), ref.out);
                               }));
      cases.push_back(MakeCase(
          "RmsNormBackward", name, kF32Math,
          [w = w, rows = rows, n = n](DeviceIo& d, Rng& rng, Checker& c) {
            Values x = RoundAll(DType::kF32, rng.Uniforms(rows * n, -3, 3));
            Values weight = RoundAll(w, rng.Uniforms(n, 0.5, 1.5));
            Values rstd = RoundAll(DType::kF32, reference::RmsNorm(rows, n, x, weight, 1e-5).rstd);
            Values dout = RoundAll(DType::kF32, rng.Uniforms(rows * n, -1, 1));
            Tensor tx = d.Up(DType::kF32, {rows, n}, x);
            Tensor tw = d.Up(w, {n}, weight);
            Tensor tr = d.Up(DType::kF32, {rows}, rstd);
            Tensor td = d.Up(DType::kF32, {rows, n}, dout);
            Tensor dx = d.Up(DType::kF32, {rows, n}, NaNs(rows * n));
            Tensor dw = d.Up(DType::kF32, {n}, NaNs(n));
            d.backend().RmsNormBackward(tx, tw, tr, td, dx, dw);
            reference::RmsNormGrads ref =
                reference::RmsNormBackward(rows, n, x, weight, rstd, dout);
            c.Compare("dx", d.Down(dx), ref.dx);
            c.Compare("dweight", d.Down(dw), ref.dweight);
          }));
    }
  }
}

void AddRopeCases(std::vector<OpCheckCase>& cases) {
  struct Spec {
    std::string name;
    int64_t t, h, d;
    float theta;
    int max_pos;
    int64_t rotary_dim = 0;  // partial rotary (GLM-4.5's partial_rotary_factor)
  };
  const Spec specs[] = {{"t5_h2_d8", 5, 2, 8, 10000.0f, 16},
                        {"t33_h4_d64_long_positions", 33, 4, 64, 10000.0f, 32768},
                        {"t7_h3_d128_theta1e6", 7, 3, 128, 1e6f, 100000},
                        {"t9_h3_d64_rotary32", 9, 3, 64, 10000.0f, 4096, 32},
                        {"t4_h2_d20_rotary6", 4, 2, 20, 1e6f, 600, 6}};
  for (const Spec& s : specs) {
    auto positions = [s](Rng& rng) {
      std::vector<int32_t> p(static_cast<size_t>(s.t));
      for (int32_t& v : p) v = rng.Int(0, s.max_pos);
      return p;
    };
    cases.push_back(
        MakeCase("Rope", s.name, kF32Math, [s, positions](DeviceIo& d, Rng& rng, Checker& c) {
          const int64_t n = s.t * s.h * s.d;
          Values x = RoundAll(DType::kF32, rng.Uniforms(n, -2, 2));
          std::vector<int32_t> pos = positions(rng);
          Tensor tx = d.Up(DType::kF32, {s.t, s.h, s.d}, x);
          Tensor tp = d.UpI32({s.t}, pos);
          Tensor out = d.Up(DType::kF32, {s.t, s.h, s.d}, NaNs(n));
          d.backend().Rope(tx, tp, RopeOptions{s.theta, s.rotary_dim}, out);
          c.Compare("out", d.Down(out),
                    reference::Rope(s.t, s.h, s.d, x, pos, s.theta, s.rotary_dim));
        }));
    cases.push_back(MakeCase(
        "RopeBackward", s.name, kF32Math, [s, positions](DeviceIo& d, Rng& rng, Checker& c) {
          const int64_t n = s.t * s.h * s.d;
          Values dout = RoundAll(DType::kF32, rng.Uniforms(n, -2, 2));
          std::vector<int32_t> pos = positions(rng);
          Tensor td = d.Up(DType::kF32, {s.t, s.h, s.d}, dout);
          Tensor tp = d.UpI32({s.t}, pos);
          Tensor dx = d.Up(DType::kF32, {s.t, s.h, s.d}, NaNs(n));
          d.backend().RopeBackward(td, tp, RopeOptions{s.theta, s.rotary_dim}, dx);
          c.Compare("dx", d.Down(dx),
                    reference::RopeBackward(s.t, s.h, s.d, dout, pos, s.theta, s.rotary_dim));
        }));
  }
}

// ---- attention ----

struct AttentionSpec {
  std::string name;
  reference::AttentionShape shape;
  std::vector<int32_t> kv_lens;  // empty: all S
  bool with_lse = true;
};

std::vector<AttentionSpec> AttentionSpecs() {
  // {B, T, S, Hq, Hkv, D}
  return {
      {"prefill_gqa1", {2, 9, 9, 2, 2, 16}, {}},
      {"prefill_gqa2", {2, 12, 12, 4, 2, 8}, {}},
      {"prefill_gqa4", {1, 17, 17, 8, 2, 32}, {}},
      {"prefill_gqa4_no_lse", {1, 10, 10, 4, 1, 16}, {}, false},
      {"decode_gqa1_kv_lens", {3, 1, 40, 2, 2, 16}, {1, 23, 40}},
      {"decode_gqa2_kv_lens", {3, 1, 40, 4, 2, 64}, {40, 7, 19}},
      {"decode_gqa4_kv_lens", {2, 1, 300, 8, 2, 128}, {300, 131}},
      {"decode_gqa4_full_cache", {2, 1, 50, 4, 1, 16}, {}},
      // One row over a short cache: the cpu backend splits the kv heads between its threads
      // (evenly, then 1 + 2 of 3).
      {"decode_one_row_gqa4", {1, 1, 37, 8, 2, 32}, {}},
      {"decode_one_row_three_kv_heads", {1, 1, 70, 6, 3, 16}, {45}},
      // Long enough to chunk: the threads share the keys in equal chunks, merged afterwards.
      {"decode_one_row_long_gqa4", {1, 1, 300, 8, 2, 32}, {}},
      {"decode_one_row_long_one_kv_head", {1, 1, 700, 4, 1, 32}, {613}},
      {"decode_three_rows_long", {3, 1, 200, 4, 2, 16}, {200, 130, 77}},
      {"chunked_prefill_gqa2", {2, 4, 20, 4, 2, 16}, {9, 20}},
      {"chunked_prefill_no_kv_lens", {1, 3, 11, 2, 1, 8}, {}},
  };
}

// The attention cases in f32 (every spec), and with 16-bit q, k, v, out and their gradients
// (Note [16-bit operands]; three specs, named "act_<dtype>_<spec>", the output thresholds of
// OutputThreshold below).
void AddAttentionCases(std::vector<OpCheckCase>& cases) {
  for (DType h : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const AttentionSpec& spec : AttentionSpecs()) {
      const bool wide = h == DType::kF32;
      if (!wide && spec.name != "prefill_gqa2" && spec.name != "prefill_gqa4" &&
          spec.name != "decode_gqa2_kv_lens") {
        continue;
      }
      const std::string name = wide ? spec.name : "act_" + DTypeTag(h) + "_" + spec.name;
      const double threshold = OutputThreshold(h, kF32Accumulate);
      const auto add = [&cases, wide](OpCheckCase c) {
        cases.push_back(wide ? std::move(c)
                             : RequireCap(std::move(c), &BackendCaps::sixteen_bit_activations,
                                          "16-bit activations"));
      };
      add(MakeCase("Attention", name, threshold, [spec, h](DeviceIo& d, Rng& rng, Checker& c) {
        const reference::AttentionShape& s = spec.shape;
        const int64_t nq = s.batch * s.q_len * s.q_heads * s.head_dim;
        const int64_t nkv = s.batch * s.kv_len * s.kv_heads * s.head_dim;
        const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
        Values q = RoundAll(h, rng.Uniforms(nq, -2, 2));
        Values k = RoundAll(h, rng.Uniforms(nkv, -2, 2));
        Values v = RoundAll(h, rng.Uniforms(nkv, -2, 2));
        Tensor tq = d.Up(h, {s.batch, s.q_len, s.q_heads, s.head_dim}, q);
        Tensor tk = d.Up(h, {s.batch, s.kv_len, s.kv_heads, s.head_dim}, k);
        Tensor tv = d.Up(h, {s.batch, s.kv_len, s.kv_heads, s.head_dim}, v);
        Tensor out = d.Up(h, {s.batch, s.q_len, s.q_heads, s.head_dim}, NaNs(nq));
        const int64_t nl = s.batch * s.q_heads * s.q_len;
        Tensor lse =
            spec.with_lse ? d.Up(DType::kF32, {s.batch, s.q_heads, s.q_len}, NaNs(nl)) : Tensor();
        AttentionOptions o;
        o.scale = static_cast<float>(scale);
        o.kv_lens = spec.kv_lens;
        d.backend().Attention(tq, tk, tv, out, lse, o);
        reference::AttentionResult ref =
            reference::Attention(s, q, k, v, static_cast<float>(scale), spec.kv_lens);
        c.Compare("out", d.Down(out), ref.out);
        if (spec.with_lse) c.Compare("lse", d.Down(lse), ref.lse);
      }));
      if (!spec.with_lse) continue;
      add(MakeCase(
          "AttentionBackward", name, threshold, [spec, h](DeviceIo& d, Rng& rng, Checker& c) {
            const reference::AttentionShape& s = spec.shape;
            const int64_t nq = s.batch * s.q_len * s.q_heads * s.head_dim;
            const int64_t nkv = s.batch * s.kv_len * s.kv_heads * s.head_dim;
            const double scale =
                static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
            Values q = RoundAll(h, rng.Uniforms(nq, -2, 2));
            Values k = RoundAll(h, rng.Uniforms(nkv, -2, 2));
            Values v = RoundAll(h, rng.Uniforms(nkv, -2, 2));
            reference::AttentionResult fwd = reference::Attention(s, q, k, v, scale, spec.kv_lens);
            Values out = RoundAll(h, fwd.out);
            Values lse = RoundAll(DType::kF32, fwd.lse);
            Values dout = RoundAll(h, rng.Uniforms(nq, -1, 1));
            Shape qs{s.batch, s.q_len, s.q_heads, s.head_dim};
            Shape kvs{s.batch, s.kv_len, s.kv_heads, s.head_dim};
            Tensor tq = d.Up(h, qs, q), tk = d.Up(h, kvs, k);
            Tensor tv = d.Up(h, kvs, v), to = d.Up(h, qs, out);
            Tensor tl = d.Up(DType::kF32, {s.batch, s.q_heads, s.q_len}, lse);
            Tensor td = d.Up(h, qs, dout);
            Tensor dq = d.Up(h, qs, NaNs(nq));
            Tensor dk = d.Up(h, kvs, NaNs(nkv)), dv = d.Up(h, kvs, NaNs(nkv));
            AttentionOptions o;
            o.scale = static_cast<float>(scale);
            o.kv_lens = spec.kv_lens;
            d.backend().AttentionBackward(tq, tk, tv, to, tl, td, dq, dk, dv, o);
            reference::AttentionGrads ref =
                reference::AttentionBackward(s, q, k, v, out, lse, dout, scale, spec.kv_lens);
            c.Compare("dq", d.Down(dq), ref.dq);
            c.Compare("dk", d.Down(dk), ref.dk);
            c.Compare("dv", d.Down(dv), ref.dv);
          }));
    }
  }
}

// ---- indexing ----

std::vector<int32_t> Ids(Rng& rng, int64_t n, int64_t limit) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = rng.Int(0, static_cast<int>(limit) - 1);
  if (n >= 3) ids[2] = ids[0];  // always at least one repeat
  return ids;
}

void AddIndexCases(std::vector<OpCheckCase>& cases) {
  for (DType w : {DType::kF32, DType::kBF16, DType::kF16}) {
    cases.push_back(
        MakeCase("EmbeddingGather", DTypeTag(w), kExact, [w](DeviceIo& d, Rng& rng, Checker& c) {
          const int64_t vocab = 50, h = 67, n = 23;
          Values table = RoundAll(w, rng.Uniforms(vocab * h, -1, 1));
          std::vector<int32_t> ids = Ids(rng, n, vocab);
          Tensor tt = d.Up(w, {vocab, h}, table);
          Tensor ti = d.UpI32({n}, ids);
          Tensor out = d.Up(DType::kF32, {n, h}, NaNs(n * h));
          d.backend().EmbeddingGather(tt, ti, out);
          c.Compare("out", d.Down(out), reference::EmbeddingGather(vocab, h, table, ids));
        }));
  }
  // The last shape has more ids than a GPU scans per row (it sorts them: runtime/cuda/index.cuh).
  for (auto [vocab, h, n] :
       {std::tuple<int64_t, int64_t, int64_t>{10, 8, 40}, {300, 130, 77}, {50, 20, 700}}) {
    cases.push_back(
        MakeCase("EmbeddingScatterAdd", "repeated_ids_v" + Dims({vocab, h, n}), kF32Simple,
                 [vocab = vocab, h = h, n = n](DeviceIo& d, Rng& rng, Checker& c) {
                   Values dout = RoundAll(DType::kF32, rng.Uniforms(n * h, -1, 1));
                   Values dtable = RoundAll(DType::kF32, rng.Uniforms(vocab * h, -1, 1));
                   std::vector<int32_t> ids = Ids(rng, n, vocab);
                   Tensor td = d.Up(DType::kF32, {n, h}, dout);
                   Tensor ti = d.UpI32({n}, ids);
                   Tensor tt = d.Up(DType::kF32, {vocab, h}, dtable);
                   d.backend().EmbeddingScatterAdd(td, ti, tt);
                   c.Compare("dtable", d.Down(tt),
                             reference::EmbeddingScatterAdd(vocab, h, dout, ids, dtable));
                 }));
  }
  for (auto [rows, h, m] :
       {std::tuple<int64_t, int64_t, int64_t>{6, 5, 14}, {64, 96, 128}, {40, 33, 1000}}) {
    cases.push_back(MakeCase("GatherRows", "repeated_n" + Dims({rows, h, m}), kExact,
                             [rows = rows, h = h, m = m](DeviceIo& d, Rng& rng, Checker& c) {
                               Values src = RoundAll(DType::kF32, rng.Uniforms(rows * h, -1, 1));
                               std::vector<int32_t> idx = Ids(rng, m, rows);
                               Tensor ts = d.Up(DType::kF32, {rows, h}, src);
                               Tensor ti = d.UpI32({m}, idx);
                               Tensor out = d.Up(DType::kF32, {m, h}, NaNs(m * h));
                               d.backend().GatherRows(ts, ti, out);
                               c.Compare("out", d.Down(out),
                                         reference::GatherRows(rows, h, src, idx));
                             }));
    for (bool weighted : {false, true}) {
      cases.push_back(MakeCase(
          "ScatterAddRows",
          std::string(weighted ? "weighted" : "unweighted") + "_n" + Dims({rows, h, m}), kF32Simple,
          [rows = rows, h = h, m = m, weighted = weighted](DeviceIo& d, Rng& rng, Checker& c) {
            Values src = RoundAll(DType::kF32, rng.Uniforms(m * h, -1, 1));
            Values out0 = RoundAll(DType::kF32, rng.Uniforms(rows * h, -1, 1));
            Values w = weighted ? RoundAll(DType::kF32, rng.Uniforms(m, 0, 1)) : Values();
            std::vector<int32_t> idx = Ids(rng, m, rows);
            Tensor ts = d.Up(DType::kF32, {m, h}, src);
            Tensor ti = d.UpI32({m}, idx);
            Tensor tw = weighted ? d.Up(DType::kF32, {m}, w) : Tensor();
            Tensor out = d.Up(DType::kF32, {rows, h}, out0);
            d.backend().ScatterAddRows(ts, ti, tw, out);
            c.Compare("out", d.Down(out), reference::ScatterAddRows(rows, h, src, idx, w, out0));
          }));
    }
  }
}

// ---- 16-bit operands (Note [16-bit operands] in runtime/backend/backend.h) ----
//
// Every operator again with its floating-point operands in bf16 or f16, mixed with f32 where a
// mixed-precision model mixes them (an f32 residual stream normalised into a bf16 activation, a
// bf16 activation scattered into an f32 sum). The inputs are rounded to their dtype before the
// reference sees them, so the reference is exact; the one error allowed on a 16-bit output is its
// final rounding (kBf16Output, kF16Output). An f32 output of 16-bit inputs keeps its f32
// threshold: a product of two 16-bit values is exact in f32, so only the order of the f32 sums may
// differ.
// MakeCase for a case of this section: its name starts with "act_" (16-bit activations), and it is
// skipped on a backend without them.
OpCheckCase MakeActivationCase(std::string op, std::string case_name, double threshold,
                               CaseBody body) {
  return RequireCap(MakeCase(std::move(op), "act_" + case_name, threshold, std::move(body)),
                    &BackendCaps::sixteen_bit_activations, "16-bit activations");
}

// "bf16" or "f16", and "_to_f32" style suffixes for an f32 output.
std::string Tag(DType in, DType out) {
  return DTypeTag(in) + (out == in ? "" : "_to_" + DTypeTag(out));
}

void AddSixteenBitGemmCases(std::vector<OpCheckCase>& cases, DType h) {
  struct Spec {
    std::string name;
    DType a, b, c;
    int64_t m, n, k;
    bool ta, tb;
    float alpha, beta;
  };
  const DType f = DType::kF32;
  const std::string t = DTypeTag(h);
  const Spec specs[] = {
      // Training shapes: 16-bit activations times 16-bit weights, into f32 or 16-bit outputs.
      {t + "_trans_b_to_f32", h, h, f, 70, 130, 200, false, true, 1.0f, 0.0f},
      {t + "_trans_b", h, h, h, 70, 130, 200, false, true, 1.0f, 0.0f},
      {t + "_nn_alpha_beta", h, h, h, 33, 65, 47, false, false, 0.5f, -1.0f},
      {t + "_trans_a_to_f32_beta1", h, h, f, 40, 31, 90, true, false, 1.0f, 1.0f},
      {t + "_trans_a_trans_b", h, h, h, 17, 23, 29, true, true, 1.0f, 0.0f},
      {t + "_gemv_m1_trans_b", h, h, h, 1, 301, 257, false, true, 1.0f, 0.0f},
      {t + "_m3_nn_beta1", h, h, f, 3, 150, 70, false, false, 1.0f, 1.0f},
      {t + "_k1", h, h, h, 6, 5, 1, false, false, 1.0f, 0.0f},
      {t + "_k0_beta", h, h, h, 3, 4, 0, false, true, 1.0f, 0.25f},
      // Mixed: a 16-bit activation with f32 weights, an f32 activation into a 16-bit output.
      {t + "_a_f32_b", h, f, f, 9, 11, 17, false, true, 1.0f, 0.0f},
      {t + "_out_of_f32", f, f, h, 9, 11, 17, false, false, 1.0f, 0.0f},
      {t + "_out_of_f32_weight_" + t, f, h, h, 12, 40, 64, false, true, 1.0f, 0.5f},
  };
  for (const Spec& s : specs) {
    cases.push_back(MakeActivationCase(
        "Gemm", s.name, OutputThreshold(s.c, kF32Accumulate),
        [s](DeviceIo& d, Rng& rng, Checker& c) {
          Values a = RoundAll(s.a, rng.Uniforms(s.m * s.k, -1, 1));
          Values b = RoundAll(s.b, rng.Uniforms(s.k * s.n, -1, 1));
          Values c0 =
              s.beta == 0.0f ? NaNs(s.m * s.n) : RoundAll(s.c, rng.Uniforms(s.m * s.n, -1, 1));
          Tensor ta = d.Up(s.a, s.ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, a);
          Tensor tb = d.Up(s.b, s.tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, b);
          Tensor tc = d.Up(s.c, {s.m, s.n}, c0);
          GemmOptions o{s.ta, s.tb, s.alpha, s.beta};
          d.backend().Gemm(ta, tb, tc, o);
          c.Compare("c", d.Down(tc), reference::Gemm(s.m, s.n, s.k, a, b, c0, o));
        }));
  }
  cases.push_back(MakeActivationCase(
      "BatchedGemm", t + "_alpha_beta_trans_b", OutputThreshold(h, kF32Accumulate),
      [h](DeviceIo& d, Rng& rng, Checker& c) {
        const int64_t bt = 3, m = 6, n = 20, k = 17;
        Values a = RoundAll(h, rng.Uniforms(bt * m * k, -1, 1));
        Values b = RoundAll(h, rng.Uniforms(bt * k * n, -1, 1));
        Values c0 = RoundAll(h, rng.Uniforms(bt * m * n, -1, 1));
        Tensor ta = d.Up(h, {bt, m, k}, a), tb = d.Up(h, {bt, n, k}, b);
        Tensor tc = d.Up(h, {bt, m, n}, c0);
        GemmOptions o{false, true, -2.0f, 0.5f};
        d.backend().BatchedGemm(ta, tb, tc, o);
        c.Compare("c", d.Down(tc), reference::BatchedGemm(bt, m, n, k, a, b, c0, o));
      }));
  struct GroupSpec {
    std::string name;
    DType c;
    std::vector<int64_t> groups;
    int64_t n, k;
    bool tb;
    float alpha, beta;
  };
  const GroupSpec group_specs[] = {
      {t + "_trans_b", h, {3, 0, 50, 1}, 40, 64, true, 1.0f, 0.0f},
      {t + "_trans_b_to_f32", f, {70, 0, 5}, 33, 65, true, 1.0f, 0.0f},
      {t + "_beta1", h, {2, 6, 0, 9}, 19, 21, false, 1.0f, 1.0f},
      {t + "_to_f32_beta1", f, {4, 0, 7}, 37, 30, false, 1.0f, 1.0f},
      {t + "_decode_trans_b", h, {1, 2, 0, 3}, 10, 1024, true, 1.0f, 0.0f},
  };
  for (const GroupSpec& s : group_specs) {
    cases.push_back(MakeActivationCase(
        "GroupedGemm", s.name, OutputThreshold(s.c, kF32Accumulate),
        [s, h](DeviceIo& d, Rng& rng, Checker& c) {
          const int64_t rows = Sum(s.groups), g = static_cast<int64_t>(s.groups.size());
          Values a = RoundAll(h, rng.Uniforms(rows * s.k, -1, 1));
          Values b = RoundAll(h, rng.Uniforms(g * s.k * s.n, -1, 1));
          Values c0 =
              s.beta == 0.0f ? NaNs(rows * s.n) : RoundAll(s.c, rng.Uniforms(rows * s.n, -1, 1));
          Tensor ta = d.Up(h, {rows, s.k}, a);
          Tensor tb = d.Up(h, s.tb ? Shape{g, s.n, s.k} : Shape{g, s.k, s.n}, b);
          Tensor tc = d.Up(s.c, {rows, s.n}, c0);
          GemmOptions o{false, s.tb, s.alpha, s.beta};
          d.backend().GroupedGemm(ta, tb, tc, s.groups, o);
          c.Compare("c", d.Down(tc), reference::GroupedGemm(s.groups, s.n, s.k, a, b, c0, o));
        }));
  }
  cases.push_back(MakeActivationCase(
      "GroupedGemmShared", t + "_trans_b", OutputThreshold(h, kF32Accumulate),
      [h](DeviceIo& d, Rng& rng, Checker& c) {
        const std::vector<int64_t> groups = {9, 0, 40, 2};
        const int64_t rows = Sum(groups), g = 4, n = 48, k = 64;
        Values a = RoundAll(h, rng.Uniforms(rows * k, -1, 1));
        Values b0 = RoundAll(h, rng.Uniforms(g * k * n, -1, 1));
        Values b1 = RoundAll(h, rng.Uniforms(g * k * n, -1, 1));
        Tensor ta = d.Up(h, {rows, k}, a);
        const Tensor bs[] = {d.Up(h, {g, n, k}, b0), d.Up(h, {g, n, k}, b1)};
        const Tensor cs[] = {d.Up(h, {rows, n}, NaNs(rows * n)),
                             d.Up(h, {rows, n}, NaNs(rows * n))};
        GemmOptions o{false, true, 1.0f, 0.0f};
        d.backend().GroupedGemmShared(ta, bs, cs, groups, o);
        c.Compare("c0", d.Down(cs[0]),
                  reference::GroupedGemm(groups, n, k, a, b0, NaNs(rows * n), o));
        c.Compare("c1", d.Down(cs[1]),
                  reference::GroupedGemm(groups, n, k, a, b1, NaNs(rows * n), o));
      }));
  for (float beta : {0.0f, 1.0f}) {
    cases.push_back(MakeActivationCase(
        "GroupedGemmWeightGrad", t + (beta == 0.0f ? "_beta0" : "_beta1"), kF32Accumulate,
        [h, beta](DeviceIo& d, Rng& rng, Checker& c) {
          const std::vector<int64_t> groups = {40, 0, 70, 3};
          const int64_t rows = Sum(groups), g = 4, n = 33, k = 65;
          Values x = RoundAll(h, rng.Uniforms(rows * k, -1, 1));
          Values dy = RoundAll(h, rng.Uniforms(rows * n, -1, 1));
          Values dw0 = beta == 0.0f ? NaNs(g * n * k)
                                    : RoundAll(DType::kF32, rng.Uniforms(g * n * k, -1, 1));
          Tensor tx = d.Up(h, {rows, k}, x), tdy = d.Up(h, {rows, n}, dy);
          Tensor tdw = d.Up(DType::kF32, {g, n, k}, dw0);
          d.backend().GroupedGemmWeightGrad(tx, tdy, tdw, groups, beta);
          c.Compare("dw", d.Down(tdw),
                    reference::GroupedGemmWeightGrad(groups, n, k, x, dy, dw0, beta));
        }));
  }
}

void AddSixteenBitElementwiseCases(std::vector<OpCheckCase>& cases, DType h) {
  const DType f = DType::kF32;
  const int64_t n = 40000;
  // Add: the residual stream (f32) plus a 16-bit branch, and all 16-bit; in place.
  for (auto [a_dtype, b_dtype, o_dtype] :
       {std::tuple{f, h, f}, std::tuple{h, h, h}, std::tuple{h, h, f}}) {
    const std::string name =
        DTypeTag(a_dtype) + "_" + DTypeTag(b_dtype) + "_to_" + DTypeTag(o_dtype);
    cases.push_back(MakeActivationCase(
        "Add", name, OutputThreshold(o_dtype, kF32Simple),
        [a_t = a_dtype, b_t = b_dtype, o_t = o_dtype](DeviceIo& d, Rng& rng, Checker& c) {
          Values a = RoundAll(a_t, rng.Uniforms(n, -2, 2));
          Values b = RoundAll(b_t, rng.Uniforms(n, -2, 2));
          Tensor out = d.Up(o_t, {n}, NaNs(n));
          d.backend().Add(d.Up(a_t, {n}, a), d.Up(b_t, {n}, b), out);
          c.Compare("out", d.Down(out), reference::Add(a, b));
        }));
  }
  cases.push_back(MakeActivationCase("Add", DTypeTag(h) + "_in_place",
                                     OutputThreshold(h, kF32Simple),
                                     [h](DeviceIo& d, Rng& rng, Checker& c) {
                                       Values a = RoundAll(h, rng.Uniforms(1000, -2, 2));
                                       Values b = RoundAll(h, rng.Uniforms(1000, -2, 2));
                                       Tensor ta = d.Up(h, {10, 100}, a);
                                       d.backend().Add(ta, d.Up(h, {10, 100}, b), ta);
                                       c.Compare("a", d.Down(ta), reference::Add(a, b));
                                     }));
  cases.push_back(
      MakeActivationCase("Mul", Tag(h, f), kF32Simple, [h](DeviceIo& d, Rng& rng, Checker& c) {
        Values a = RoundAll(h, rng.Uniforms(n, -2, 2)), b = RoundAll(h, rng.Uniforms(n, -2, 2));
        Tensor out = d.Up(DType::kF32, {n}, NaNs(n));
        d.backend().Mul(d.Up(h, {n}, a), d.Up(h, {n}, b), out);
        c.Compare("out", d.Down(out), reference::Mul(a, b));
      }));
  cases.push_back(MakeActivationCase("Scale", Tag(h, h), OutputThreshold(h, kF32Simple),
                                     [h](DeviceIo& d, Rng& rng, Checker& c) {
                                       Values x = RoundAll(h, rng.Uniforms(n, -2, 2));
                                       Tensor out = d.Up(h, {n}, NaNs(n));
                                       d.backend().Scale(d.Up(h, {n}, x), -0.3f, out);
                                       c.Compare("out", d.Down(out), reference::Scale(x, -0.3f));
                                     }));
  for (DType y_t : {h, f}) {
    cases.push_back(MakeActivationCase("Axpy", Tag(h, y_t), OutputThreshold(y_t, kF32Simple),
                                       [h, y_t](DeviceIo& d, Rng& rng, Checker& c) {
                                         Values x = RoundAll(h, rng.Uniforms(n, -2, 2));
                                         Values y = RoundAll(y_t, rng.Uniforms(n, -2, 2));
                                         Tensor ty = d.Up(y_t, {n}, y);
                                         d.backend().Axpy(1.75f, d.Up(h, {n}, x), ty);
                                         c.Compare("y", d.Down(ty), reference::Axpy(1.75f, x, y));
                                       }));
  }
  cases.push_back(MakeActivationCase(
      "AddBias", Tag(h, h) + "_f32_bias", OutputThreshold(h, kF32Simple),
      [h](DeviceIo& d, Rng& rng, Checker& c) {
        const int64_t rows = 37, cols = 130;
        Values x = RoundAll(h, rng.Uniforms(rows * cols, -2, 2));
        Values bias = RoundAll(DType::kF32, rng.Uniforms(cols, -2, 2));
        Tensor out = d.Up(h, {rows, cols}, NaNs(rows * cols));
        d.backend().AddBias(d.Up(h, {rows, cols}, x), d.Up(DType::kF32, {cols}, bias), out);
        c.Compare("out", d.Down(out), reference::AddBias(rows, cols, x, bias));
      }));
  struct Unary {
    const char* op;
    void (Backend::*fn)(const Tensor&, const Tensor&);
    Values (*ref)(reference::ConstValues);
    void (Backend::*backward)(const Tensor&, const Tensor&, const Tensor&);
    Values (*backward_ref)(reference::ConstValues, reference::ConstValues);
  };
  for (Unary u : {Unary{"Silu", &Backend::Silu, &reference::Silu, &Backend::SiluBackward,
                        &reference::SiluBackward},
                  Unary{"Gelu", &Backend::Gelu, &reference::Gelu, &Backend::GeluBackward,
                        &reference::GeluBackward},
                  Unary{"Relu", &Backend::Relu, &reference::Relu, &Backend::ReluBackward,
                        &reference::ReluBackward}}) {
    cases.push_back(MakeActivationCase(u.op, Tag(h, h), OutputThreshold(h, kF32Math),
                                       [h, u](DeviceIo& d, Rng& rng, Checker& c) {
                                         Values x = RoundAll(h, rng.Uniforms(n, -9, 9));
                                         Tensor out = d.Up(h, {n}, NaNs(n));
                                         (d.backend().*u.fn)(d.Up(h, {n}, x), out);
                                         c.Compare("out", d.Down(out), u.ref(x));
                                       }));
    cases.push_back(
        MakeActivationCase(std::string(u.op) + "Backward", Tag(h, h), OutputThreshold(h, kF32Math),
                           [h, u](DeviceIo& d, Rng& rng, Checker& c) {
                             Values x = RoundAll(h, rng.Uniforms(n, -9, 9));
                             Values dout = RoundAll(h, rng.Uniforms(n, -1, 1));
                             Tensor dx = d.Up(h, {n}, NaNs(n));
                             (d.backend().*u.backward)(d.Up(h, {n}, x), d.Up(h, {n}, dout), dx);
                             c.Compare("dx", d.Down(dx), u.backward_ref(x, dout));
                           }));
  }
  cases.push_back(MakeActivationCase("Swiglu", Tag(h, h), OutputThreshold(h, kF32Math),
                                     [h](DeviceIo& d, Rng& rng, Checker& c) {
                                       Values g = RoundAll(h, rng.Uniforms(n, -8, 8));
                                       Values u = RoundAll(h, rng.Uniforms(n, -2, 2));
                                       Tensor out = d.Up(h, {n}, NaNs(n));
                                       d.backend().Swiglu(d.Up(h, {n}, g), d.Up(h, {n}, u), out);
                                       c.Compare("out", d.Down(out), reference::Swiglu(g, u));
                                     }));
  cases.push_back(MakeActivationCase(
      "SwigluBackward", Tag(h, h), OutputThreshold(h, kF32Math),
      [h](DeviceIo& d, Rng& rng, Checker& c) {
        Values g = RoundAll(h, rng.Uniforms(n, -8, 8));
        Values u = RoundAll(h, rng.Uniforms(n, -2, 2));
        Values dout = RoundAll(h, rng.Uniforms(n, -1, 1));
        Tensor dg = d.Up(h, {n}, NaNs(n)), du = d.Up(h, {n}, NaNs(n));
        d.backend().SwigluBackward(d.Up(h, {n}, g), d.Up(h, {n}, u), d.Up(h, {n}, dout), dg, du);
        reference::SwigluGrads ref = reference::SwigluBackward(g, u, dout);
        c.Compare("dgate", d.Down(dg), ref.dgate);
        c.Compare("dup", d.Down(du), ref.dup);
      }));
}

void AddSixteenBitRowCases(std::vector<OpCheckCase>& cases, DType h) {
  const DType f = DType::kF32;
  for (ReduceAxis axis : {ReduceAxis::kLast, ReduceAxis::kFirst}) {
    const std::string an = axis == ReduceAxis::kLast ? "_sum_last" : "_sum_first";
    cases.push_back(MakeActivationCase(
        "Reduce", Tag(h, f) + an, kF32Math, [h, axis](DeviceIo& d, Rng& rng, Checker& c) {
          const int64_t rows = 33, n = 1001;
          Values x = RoundAll(h, rng.Uniforms(rows * n, -3, 3));
          const int64_t out_n = axis == ReduceAxis::kLast ? rows : n;
          Tensor out = d.Up(DType::kF32, {out_n}, NaNs(out_n));
          d.backend().Reduce(d.Up(h, {rows, n}, x), out, ReduceOp::kSum, axis);
          c.Compare("out", d.Down(out), reference::Reduce(rows, n, x, ReduceOp::kSum, axis));
        }));
  }
  cases.push_back(MakeActivationCase(
      "Softmax", Tag(h, h), OutputThreshold(h, kF32Math), [h](DeviceIo& d, Rng& rng, Checker& c) {
        const int64_t rows = 17, n = 1000;
        Values x = RoundAll(h, rng.Uniforms(rows * n, -10, 10));
        Tensor out = d.Up(h, {rows, n}, NaNs(rows * n));
        d.backend().Softmax(d.Up(h, {rows, n}, x), out);
        c.Compare("out", d.Down(out), reference::Softmax(rows, n, x));
      }));
  cases.push_back(MakeActivationCase(
      "SoftmaxBackward", Tag(h, h), OutputThreshold(h, kF32Math),
      [h](DeviceIo& d, Rng& rng, Checker& c) {
        const int64_t rows = 17, n = 100;
        Values y = RoundAll(h, reference::Softmax(rows, n, rng.Uniforms(rows * n, -3, 3)));
        Values dy = RoundAll(h, rng.Uniforms(rows * n, -1, 1));
        Tensor dx = d.Up(h, {rows, n}, NaNs(rows * n));
        d.backend().SoftmaxBackward(d.Up(h, {rows, n}, y), d.Up(h, {rows, n}, dy), dx);
        c.Compare("dx", d.Down(dx), reference::SoftmaxBackward(rows, n, y, dy));
      }));
  cases.push_back(MakeActivationCase(
      "TopK", Tag(h, f) + "_ties", kExact, [h](DeviceIo& d, Rng& rng, Checker& c) {
        const int64_t rows = 33, n = 64;
        const int k = 6;
        Values x(static_cast<size_t>(rows * n));
        for (double& v : x) v = static_cast<double>(rng.Int(-8, 8)) * 0.25;
        Tensor values = d.Up(DType::kF32, {rows, k}, NaNs(rows * k));
        Tensor indices = d.UpI32({rows, k}, std::vector<int32_t>(rows * k, -7));
        d.backend().TopK(d.Up(h, {rows, n}, x), k, values, indices);
        reference::TopKResult ref = reference::TopK(rows, n, x, k);
        c.Compare("values", d.Down(values), ref.values);
        c.RequireEqual("indices", d.DownI32(indices), ref.indices);
      }));
  // The loss of 16-bit logits, and the gradient of f32 or 16-bit logits into a 16-bit dlogits (the
  // LM head's backward).
  const int64_t ce_rows = 12, ce_v = 300;
  cases.push_back(MakeActivationCase(
      "CrossEntropy", Tag(h, f), kF32Math, [h](DeviceIo& d, Rng& rng, Checker& c) {
        Values logits = RoundAll(h, rng.Uniforms(ce_rows * ce_v, -5, 5));
        std::vector<int32_t> targets = Targets(rng, ce_rows, ce_v, true);
        Tensor losses = d.Up(DType::kF32, {ce_rows}, NaNs(ce_rows));
        Tensor lse = d.Up(DType::kF32, {ce_rows}, NaNs(ce_rows));
        d.backend().CrossEntropy(d.Up(h, {ce_rows, ce_v}, logits), d.UpI32({ce_rows}, targets),
                                 losses, lse);
        reference::CrossEntropyResult ref = reference::CrossEntropy(ce_rows, ce_v, logits, targets);
        c.Compare("losses", d.Down(losses), ref.losses);
        c.Compare("lse", d.Down(lse), ref.lse);
      }));
  for (DType logits_t : {f, h}) {
    cases.push_back(MakeActivationCase(
        "CrossEntropyBackward", Tag(logits_t, h), OutputThreshold(h, kF32Math),
        [h, logits_t](DeviceIo& d, Rng& rng, Checker& c) {
          const int64_t rows = ce_rows, v = ce_v;
          Values logits = RoundAll(logits_t, rng.Uniforms(rows * v, -5, 5));
          std::vector<int32_t> targets = Targets(rng, rows, v, true);
          Values lse = RoundAll(DType::kF32, reference::CrossEntropy(rows, v, logits, targets).lse);
          Values dl = RoundAll(DType::kF32, rng.Uniforms(rows, 0.1, 2));
          Tensor dlogits = d.Up(h, {rows, v}, NaNs(rows * v));
          d.backend().CrossEntropyBackward(d.Up(logits_t, {rows, v}, logits),
                                           d.UpI32({rows}, targets), d.Up(DType::kF32, {rows}, lse),
                                           d.Up(DType::kF32, {rows}, dl), dlogits);
          c.Compare("dlogits", d.Down(dlogits),
                    reference::CrossEntropyBackward(rows, v, logits, targets, lse, dl));
        }));
  }
  // RMSNorm: the f32 residual normalised into a 16-bit activation (the decoder layer's norms), and
  // 16-bit to 16-bit (qk-norm); the backward likewise, dweight always f32.
  for (auto [x_dtype, o_dtype] : {std::pair{f, h}, std::pair{h, h}}) {
    const DType x_t = x_dtype, o_t = o_dtype;
    const int64_t rows = 19, n = 1000;
    cases.push_back(MakeActivationCase(
        "RmsNorm", Tag(x_t, o_t) + "_weight_" + DTypeTag(h), OutputThreshold(o_t, kF32Math),
        [=](DeviceIo& d, Rng& rng, Checker& c) {
          Values x = RoundAll(x_t, rng.Uniforms(rows * n, -3, 3));
          Values weight = RoundAll(h, rng.Uniforms(n, 0.5, 1.5));
          Tensor out = d.Up(o_t, {rows, n}, NaNs(rows * n));
          Tensor rstd = d.Up(DType::kF32, {rows}, NaNs(rows));
          d.backend().RmsNorm(d.Up(x_t, {rows, n}, x), d.Up(h, {n}, weight), 1e-5f, out, rstd);
          reference::RmsNormResult ref = reference::RmsNorm(rows, n, x, weight, 1e-5);
          c.Compare("out", d.Down(out), ref.out);
          c.Compare("rstd", d.Down(rstd), ref.rstd);
        }));
    // x_t is also the dx dtype: an f32 residual takes an f32 gradient from a 16-bit or f32 dout.
    for (DType dout_t : {h, f}) {
      if (x_t == h && dout_t == f) continue;
      cases.push_back(MakeActivationCase(
          "RmsNormBackward",
          "x_" + DTypeTag(x_t) + "_dout_" + DTypeTag(dout_t) + "_weight_" + DTypeTag(h),
          OutputThreshold(x_t, kF32Math), [=](DeviceIo& d, Rng& rng, Checker& c) {
            Values x = RoundAll(x_t, rng.Uniforms(rows * n, -3, 3));
            Values weight = RoundAll(h, rng.Uniforms(n, 0.5, 1.5));
            Values rstd = RoundAll(DType::kF32, reference::RmsNorm(rows, n, x, weight, 1e-5).rstd);
            Values dout = RoundAll(dout_t, rng.Uniforms(rows * n, -1, 1));
            Tensor dx = d.Up(x_t, {rows, n}, NaNs(rows * n));
            Tensor dw = d.Up(DType::kF32, {n}, NaNs(n));
            d.backend().RmsNormBackward(d.Up(x_t, {rows, n}, x), d.Up(h, {n}, weight),
                                        d.Up(DType::kF32, {rows}, rstd),
                                        d.Up(dout_t, {rows, n}, dout), dx, dw);
            reference::RmsNormGrads ref =
                reference::RmsNormBackward(rows, n, x, weight, rstd, dout);
            c.Compare("dx", d.Down(dx), ref.dx);
            c.Compare("dweight", d.Down(dw), ref.dweight);
          }));
    }
  }
  const int64_t t = 33, heads = 4, dim = 64;
  cases.push_back(MakeActivationCase(
      "Rope", Tag(h, h), OutputThreshold(h, kF32Math), [=](DeviceIo& d, Rng& rng, Checker& c) {
        Values x = RoundAll(h, rng.Uniforms(t * heads * dim, -2, 2));
        std::vector<int32_t> pos(static_cast<size_t>(t));
        for (int32_t& p : pos) p = rng.Int(0, 4096);
        Tensor out = d.Up(h, {t, heads, dim}, NaNs(t * heads * dim));
        d.backend().Rope(d.Up(h, {t, heads, dim}, x), d.UpI32({t}, pos), RopeOptions{}, out);
        c.Compare("out", d.Down(out), reference::Rope(t, heads, dim, x, pos, 10000.0f));
      }));
  cases.push_back(MakeActivationCase(
      "RopeBackward", Tag(h, h), OutputThreshold(h, kF32Math),
      [=](DeviceIo& d, Rng& rng, Checker& c) {
        Values dout = RoundAll(h, rng.Uniforms(t * heads * dim, -2, 2));
        std::vector<int32_t> pos(static_cast<size_t>(t));
        for (int32_t& p : pos) p = rng.Int(0, 4096);
        Tensor dx = d.Up(h, {t, heads, dim}, NaNs(t * heads * dim));
        d.backend().RopeBackward(d.Up(h, {t, heads, dim}, dout), d.UpI32({t}, pos), RopeOptions{},
                                 dx);
        c.Compare("dx", d.Down(dx), reference::RopeBackward(t, heads, dim, dout, pos, 10000.0f));
      }));
}

void AddSixteenBitIndexCases(std::vector<OpCheckCase>& cases, DType h) {
  const DType f = DType::kF32;
  const int64_t vocab = 50, width = 67, n = 23;
  for (DType out_t : {h, f}) {
    cases.push_back(MakeActivationCase(
        "EmbeddingGather", Tag(h, out_t), kExact, [=](DeviceIo& d, Rng& rng, Checker& c) {
          Values table = RoundAll(h, rng.Uniforms(vocab * width, -1, 1));
          std::vector<int32_t> ids = Ids(rng, n, vocab);
          Tensor out = d.Up(out_t, {n, width}, NaNs(n * width));
          d.backend().EmbeddingGather(d.Up(h, {vocab, width}, table), d.UpI32({n}, ids), out);
          c.Compare("out", d.Down(out), reference::EmbeddingGather(vocab, width, table, ids));
        }));
  }
  cases.push_back(MakeActivationCase(
      "EmbeddingScatterAdd", Tag(h, f), kF32Simple, [=](DeviceIo& d, Rng& rng, Checker& c) {
        const int64_t m = 700;
        Values dout = RoundAll(h, rng.Uniforms(m * width, -1, 1));
        Values dtable = RoundAll(DType::kF32, rng.Uniforms(vocab * width, -1, 1));
        std::vector<int32_t> ids = Ids(rng, m, vocab);
        Tensor tt = d.Up(DType::kF32, {vocab, width}, dtable);
        d.backend().EmbeddingScatterAdd(d.Up(h, {m, width}, dout), d.UpI32({m}, ids), tt);
        c.Compare("dtable", d.Down(tt),
                  reference::EmbeddingScatterAdd(vocab, width, dout, ids, dtable));
      }));
  cases.push_back(
      MakeActivationCase("GatherRows", Tag(h, h), kExact, [=](DeviceIo& d, Rng& rng, Checker& c) {
        const int64_t rows = 40, m = 1000;
        Values src = RoundAll(h, rng.Uniforms(rows * width, -1, 1));
        std::vector<int32_t> idx = Ids(rng, m, rows);
        Tensor out = d.Up(h, {m, width}, NaNs(m * width));
        d.backend().GatherRows(d.Up(h, {rows, width}, src), d.UpI32({m}, idx), out);
        c.Compare("out", d.Down(out), reference::GatherRows(rows, width, src, idx));
      }));
  // The MoE combine: 16-bit expert outputs weighted into the f32 residual branch, or into a 16-bit
  // gradient (each row added once to zeros: one rounding).
  for (DType out_t : {f, h}) {
    cases.push_back(MakeActivationCase(
        "ScatterAddRows", "weighted_" + Tag(h, out_t), OutputThreshold(out_t, kF32Simple),
        [=](DeviceIo& d, Rng& rng, Checker& c) {
          const int64_t rows = 64, m = 128;
          Values src = RoundAll(h, rng.Uniforms(m * width, -1, 1));
          Values out0 = RoundAll(out_t, rng.Uniforms(rows * width, -1, 1));
          Values w = RoundAll(DType::kF32, rng.Uniforms(m, 0, 1));
          std::vector<int32_t> idx = Ids(rng, m, rows);
          Tensor out = d.Up(out_t, {rows, width}, out0);
          d.backend().ScatterAddRows(d.Up(h, {m, width}, src), d.UpI32({m}, idx),
                                     d.Up(DType::kF32, {m}, w), out);
          c.Compare("out", d.Down(out), reference::ScatterAddRows(rows, width, src, idx, w, out0));
        }));
  }
}

void AddSixteenBitCases(std::vector<OpCheckCase>& cases) {
  for (DType h : {DType::kBF16, DType::kF16}) {
    AddSixteenBitGemmCases(cases, h);
    AddSixteenBitElementwiseCases(cases, h);
    AddSixteenBitRowCases(cases, h);
    AddSixteenBitIndexCases(cases, h);
  }
}

std::vector<OpCheckCase> BuildAllOpChecks() {
  std::vector<OpCheckCase> cases;
  AddFillCases(cases);
  AddConvertCases(cases);
  AddGemmCases(cases);
  AddBatchedGemmCases(cases);
  AddGroupedGemmCases(cases);
  AddGroupedGemmWeightGradCases(cases);
  AddQuantizedGemmCases(cases);
  AddElementwiseCases(cases);
  AddReduceCases(cases);
  AddSoftmaxCases(cases);
  AddTopKCases(cases);
  AddCrossEntropyCases(cases);
  AddRmsNormCases(cases);
  AddRopeCases(cases);
  AddAttentionCases(cases);
  AddIndexCases(cases);
  AddSixteenBitCases(cases);
  return cases;
}

// ---- finite-difference checks of the reference backwards ----

constexpr double kGradThreshold = 1e-6;
constexpr double kFdStep = 1e-5;

using Forward = std::function<Values(const Values&)>;
// The gradient of L = sum(r * f(x)) with respect to x, from the reference backward.
using Backward = std::function<Values(const Values& x, const Values& r)>;

GradCheckResult GradCheck(const std::string& op, const std::string& case_name, const Values& x,
                          const Forward& f, const Backward& grad) {
  Rng rng(SeedOf(op, case_name + "/projection"));
  const Values y = f(x);
  const Values r = rng.Uniforms(static_cast<int64_t>(y.size()), -1, 1);
  const Values analytic = grad(x, r);
  auto loss = [&](const Values& at) {
    const Values fy = f(at);
    double l = 0.0;
    for (size_t i = 0; i < fy.size(); ++i) l += r[i] * fy[i];
    return l;
  };
  double max_err = 0.0, scale = 1e-12;
  Values probe = x;
  for (size_t i = 0; i < x.size(); ++i) {
    probe[i] = x[i] + kFdStep;
    const double lp = loss(probe);
    probe[i] = x[i] - kFdStep;
    const double lm = loss(probe);
    probe[i] = x[i];
    const double fd = (lp - lm) / (2 * kFdStep);
    const double an = i < analytic.size() ? analytic[i] : std::numeric_limits<double>::quiet_NaN();
    max_err = std::max(
        max_err, std::isnan(an) ? std::numeric_limits<double>::infinity() : std::fabs(fd - an));
    scale = std::max({scale, std::fabs(fd), std::fabs(an)});
  }
  if (analytic.size() != x.size()) max_err = std::numeric_limits<double>::infinity();
  GradCheckResult result;
  result.op = op;
  result.case_name = case_name;
  result.max_rel_error = max_err / scale;
  result.threshold = kGradThreshold;
  result.passed = result.max_rel_error <= kGradThreshold;
  return result;
}

Values Zeros(int64_t n) { return Values(static_cast<size_t>(n), 0.0); }

void AddElementwiseGradChecks(std::vector<GradCheckResult>& out, Rng& rng) {
  const Values x = rng.Uniforms(23, -4, 4);
  out.push_back(GradCheck(
      "SiluBackward", "n23", x, [](const Values& v) { return reference::Silu(v); },
      [](const Values& v, const Values& r) { return reference::SiluBackward(v, r); }));
  out.push_back(GradCheck(
      "GeluBackward", "n23", x, [](const Values& v) { return reference::Gelu(v); },
      [](const Values& v, const Values& r) { return reference::GeluBackward(v, r); }));
  const Values up = rng.Uniforms(23, -2, 2);
  out.push_back(GradCheck(
      "SwigluBackward", "dgate", x, [&](const Values& g) { return reference::Swiglu(g, up); },
      [&](const Values& g, const Values& r) { return reference::SwigluBackward(g, up, r).dgate; }));
  out.push_back(GradCheck(
      "SwigluBackward", "dup", up, [&](const Values& u) { return reference::Swiglu(x, u); },
      [&](const Values& u, const Values& r) { return reference::SwigluBackward(x, u, r).dup; }));
  const int64_t rows = 3, n = 7;
  const Values s = rng.Uniforms(rows * n, -3, 3);
  out.push_back(GradCheck(
      "SoftmaxBackward", "r3x7", s, [&](const Values& v) { return reference::Softmax(rows, n, v); },
      [&](const Values& v, const Values& r) {
        return reference::SoftmaxBackward(rows, n, reference::Softmax(rows, n, v), r);
      }));
}

void AddGemmGradChecks(std::vector<GradCheckResult>& out, Rng& rng) {
  // Gemm backward as Gemm: c = a * b^T gives da = dc * b, db = dc^T * a.
  const int64_t m = 3, n = 4, k = 5;
  const Values a = rng.Uniforms(m * k, -1, 1), b = rng.Uniforms(n * k, -1, 1);
  const GemmOptions nt{false, true, 1.0f, 0.0f};
  out.push_back(GradCheck(
      "Gemm", "da_trans_b", a,
      [&](const Values& av) { return reference::Gemm(m, n, k, av, b, Zeros(m * n), nt); },
      [&](const Values&, const Values& r) {
        return reference::Gemm(m, k, n, r, b, Zeros(m * k), GemmOptions{false, false, 1.0f, 0.0f});
      }));
  out.push_back(GradCheck(
      "Gemm", "db_trans_b", b,
      [&](const Values& bv) { return reference::Gemm(m, n, k, a, bv, Zeros(m * n), nt); },
      [&](const Values&, const Values& r) {
        return reference::Gemm(n, k, m, r, a, Zeros(n * k), GemmOptions{true, false, 1.0f, 0.0f});
      }));
  // GroupedGemm with trans_b: dw from GroupedGemmWeightGrad, dx from GroupedGemm without trans_b.
  const std::vector<int64_t> groups = {2, 0, 3};
  const int64_t rows = 5, g = 3;
  const Values x = rng.Uniforms(rows * k, -1, 1), w = rng.Uniforms(g * n * k, -1, 1);
  out.push_back(GradCheck(
      "GroupedGemmWeightGrad", "dw", w,
      [&](const Values& wv) {
        return reference::GroupedGemm(groups, n, k, x, wv, Zeros(rows * n), nt);
      },
      [&](const Values&, const Values& r) {
        return reference::GroupedGemmWeightGrad(groups, n, k, x, r, Zeros(g * n * k), 0.0);
      }));
  out.push_back(GradCheck(
      "GroupedGemm", "dx_trans_b", x,
      [&](const Values& xv) {
        return reference::GroupedGemm(groups, n, k, xv, w, Zeros(rows * n), nt);
      },
      [&](const Values&, const Values& r) {
        // dx_g = dy_g * w_g with w_g [n,k]: GroupedGemm of dy with b = w untransposed.
        return reference::GroupedGemm(groups, k, n, r, w, Zeros(rows * k),
                                      GemmOptions{false, false, 1.0f, 0.0f});
      }));
}

void AddNormGradChecks(std::vector<GradCheckResult>& out, Rng& rng) {
  const int64_t rows = 3, n = 8;
  const double eps = 1e-5;
  const Values x = rng.Uniforms(rows * n, -2, 2), w = rng.Uniforms(n, 0.5, 1.5);
  out.push_back(GradCheck(
      "RmsNormBackward", "dx", x,
      [&](const Values& xv) { return reference::RmsNorm(rows, n, xv, w, eps).out; },
      [&](const Values& xv, const Values& r) {
        Values rstd = reference::RmsNorm(rows, n, xv, w, eps).rstd;
        return reference::RmsNormBackward(rows, n, xv, w, rstd, r).dx;
      }));
  out.push_back(GradCheck(
      "RmsNormBackward", "dweight", w,
      [&](const Values& wv) { return reference::RmsNorm(rows, n, x, wv, eps).out; },
      [&](const Values& wv, const Values& r) {
        Values rstd = reference::RmsNorm(rows, n, x, wv, eps).rstd;
        return reference::RmsNormBackward(rows, n, x, wv, rstd, r).dweight;
      }));
  const int64_t t = 3, h = 2, d = 6;
  const std::vector<int32_t> pos = {0, 5, 1234};
  const Values xr = rng.Uniforms(t * h * d, -2, 2);
  out.push_back(GradCheck(
      "RopeBackward", "t3_h2_d6", xr,
      [&](const Values& v) { return reference::Rope(t, h, d, v, pos, 10000.0); },
      [&](const Values&, const Values& r) {
        return reference::RopeBackward(t, h, d, r, pos, 10000.0);
      }));
  out.push_back(GradCheck(
      "RopeBackward", "t3_h2_d6_rotary4", xr,
      [&](const Values& v) { return reference::Rope(t, h, d, v, pos, 10000.0, 4); },
      [&](const Values&, const Values& r) {
        return reference::RopeBackward(t, h, d, r, pos, 10000.0, 4);
      }));
}

void AddAttentionGradChecks(std::vector<GradCheckResult>& out, Rng& rng) {
  struct Spec {
    std::string name;
    reference::AttentionShape shape;
    std::vector<int32_t> kv_lens;
  };
  const Spec specs[] = {
      {"prefill_gqa1", {1, 4, 4, 2, 2, 3}, {}},
      {"prefill_gqa2", {2, 3, 3, 2, 1, 4}, {}},
      {"decode_gqa4_kv_lens", {2, 1, 5, 4, 1, 3}, {5, 2}},
      {"chunked_gqa2_kv_lens", {2, 2, 5, 4, 2, 2}, {4, 5}},
  };
  for (const Spec& s : specs) {
    const reference::AttentionShape& sh = s.shape;
    const int64_t nq = sh.batch * sh.q_len * sh.q_heads * sh.head_dim;
    const int64_t nkv = sh.batch * sh.kv_len * sh.kv_heads * sh.head_dim;
    const double scale = 0.7;
    const Values q = rng.Uniforms(nq, -1.5, 1.5), k = rng.Uniforms(nkv, -1.5, 1.5),
                 v = rng.Uniforms(nkv, -1.5, 1.5);
    auto grads = [&, sh, kv = s.kv_lens](const Values& qv, const Values& kvv, const Values& vv,
                                         const Values& r) {
      reference::AttentionResult f = reference::Attention(sh, qv, kvv, vv, scale, kv);
      return reference::AttentionBackward(sh, qv, kvv, vv, f.out, f.lse, r, scale, kv);
    };
    auto fwd = [sh, scale, kv = s.kv_lens](const Values& qv, const Values& kvv, const Values& vv) {
      return reference::Attention(sh, qv, kvv, vv, scale, kv).out;
    };
    out.push_back(GradCheck(
        "AttentionBackward", s.name + "_dq", q, [&](const Values& x) { return fwd(x, k, v); },
        [&](const Values& x, const Values& r) { return grads(x, k, v, r).dq; }));
    out.push_back(GradCheck(
        "AttentionBackward", s.name + "_dk", k, [&](const Values& x) { return fwd(q, x, v); },
        [&](const Values& x, const Values& r) { return grads(q, x, v, r).dk; }));
    out.push_back(GradCheck(
        "AttentionBackward", s.name + "_dv", v, [&](const Values& x) { return fwd(q, k, x); },
        [&](const Values& x, const Values& r) { return grads(q, k, x, r).dv; }));
  }
}

void AddLossAndIndexGradChecks(std::vector<GradCheckResult>& out, Rng& rng) {
  const int64_t rows = 4, v = 6;
  const std::vector<int32_t> targets = {2, -1, 0, 5};
  const Values logits = rng.Uniforms(rows * v, -3, 3);
  out.push_back(GradCheck(
      "CrossEntropyBackward", "ignore_index", logits,
      [&](const Values& l) { return reference::CrossEntropy(rows, v, l, targets).losses; },
      [&](const Values& l, const Values& r) {
        Values lse = reference::CrossEntropy(rows, v, l, targets).lse;
        return reference::CrossEntropyBackward(rows, v, l, targets, lse, r);
      }));
  const int64_t vocab = 5, h = 3;
  const std::vector<int32_t> ids = {1, 4, 1, 0, 1};
  const Values table = rng.Uniforms(vocab * h, -1, 1);
  out.push_back(GradCheck(
      "EmbeddingScatterAdd", "repeated_ids", table,
      [&](const Values& t) { return reference::EmbeddingGather(vocab, h, t, ids); },
      [&](const Values&, const Values& r) {
        return reference::EmbeddingScatterAdd(vocab, h, r, ids, Zeros(vocab * h));
      }));
  out.push_back(GradCheck(
      "ScatterAddRows", "as_gather_rows_backward", table,
      [&](const Values& t) { return reference::GatherRows(vocab, h, t, ids); },
      [&](const Values&, const Values& r) {
        return reference::ScatterAddRows(vocab, h, r, ids, Values(), Zeros(vocab * h));
      }));
  const Values src = rng.Uniforms(static_cast<int64_t>(ids.size()) * h, -1, 1);
  out.push_back(GradCheck(
      "GatherRows", "as_scatter_add_rows_backward", src,
      [&](const Values& s) {
        return reference::ScatterAddRows(vocab, h, s, ids, Values(), Zeros(vocab * h));
      },
      [&](const Values&, const Values& r) { return reference::GatherRows(vocab, h, r, ids); }));
}

}  // namespace

const std::vector<OpCheckCase>& AllOpChecks() {
  static const std::vector<OpCheckCase> cases = BuildAllOpChecks();
  return cases;
}

std::vector<GradCheckResult> RunReferenceGradientChecks() {
  std::vector<GradCheckResult> out;
  Rng rng(SeedOf("gradcheck", "inputs"));
  AddElementwiseGradChecks(out, rng);
  AddGemmGradChecks(out, rng);
  AddNormGradChecks(out, rng);
  AddAttentionGradChecks(out, rng);
  AddLossAndIndexGradChecks(out, rng);
  return out;
}

}  // namespace sy
