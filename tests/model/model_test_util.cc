#include "tests/model/model_test_util.h"

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "runtime/core/check.h"
#include "runtime/model/host_transfer.h"

namespace sy::testing {

std::unique_ptr<Backend> MakeBackend(Device device) {
  BackendOptions options;
  options.num_threads = 2;
  options.sim.link_gbps = 100.0;
  options.sim.link_latency_us = 0.0;
  auto backend = CreateBackend(device, options);
  SY_CHECK(backend.ok()) << backend.status().ToString();
  return std::move(backend).value();
}

Tensor HostI32(const std::vector<int32_t>& values, Shape shape) {
  Tensor t = Tensor::Host(DType::kI32, shape);
  SY_CHECK_EQ(t.numel(), static_cast<int64_t>(values.size()));
  std::memcpy(t.data(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

Tensor HostF32(const std::vector<float>& values, Shape shape) {
  Tensor t = Tensor::Host(DType::kF32, shape);
  SY_CHECK_EQ(t.numel(), static_cast<int64_t>(values.size()));
  std::memcpy(t.data(), values.data(), values.size() * sizeof(float));
  return t;
}

std::vector<float> RandomNormal(size_t n, uint64_t seed, float stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<int32_t> RandomTokens(size_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

std::vector<float> ToHost(Backend& backend, const Tensor& t) {
  auto r = DownloadF32(backend, t);
  SY_CHECK(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

void FromHost(Backend& backend, const std::vector<float>& values, const Tensor& t) {
  SY_CHECK_OK(CopyFromHost(backend, values, t));
}

Tensor DeviceF32(Backend& backend, const std::vector<float>& values, Shape shape) {
  auto r = UploadF32(backend, values, shape);
  SY_CHECK(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

Tensor DeviceI32(Backend& backend, const std::vector<int32_t>& values, Shape shape) {
  auto r = UploadI32(backend, values, shape);
  SY_CHECK(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  SY_CHECK_EQ(a.size(), b.size());
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

double Norm(const std::vector<float>& a) { return std::sqrt(Dot(a, a)); }

FdResult CheckDirectionalGradient(Backend& backend, const Tensor& value,
                                  const std::vector<float>& grad, const LossFn& loss,
                                  const RoutingFn& routing, const FdOptions& options) {
  FdResult result;
  const std::vector<float> original = ToHost(backend, value);
  SY_CHECK_EQ(original.size(), grad.size());
  const double gnorm = Norm(grad);
  const double base_loss = loss();
  const std::vector<int32_t> base_routing = routing ? routing() : std::vector<int32_t>();

  std::vector<std::vector<float>> directions;
  if (gnorm > 0.0) {
    std::vector<float> d(grad.size());
    for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<float>(grad[i] / gnorm);
    directions.push_back(std::move(d));
  }
  for (int i = 0; i < options.random_directions; ++i) {
    std::vector<float> d = RandomNormal(grad.size(), options.seed * 7919 + i, 1.0f);
    const double n = Norm(d);
    for (float& x : d) x = static_cast<float>(x / n);
    directions.push_back(std::move(d));
  }

  std::ostringstream report;
  for (size_t k = 0; k < directions.size(); ++k) {
    const std::vector<float>& d = directions[k];
    double l[2];
    bool routing_changed = false;
    for (int side = 0; side < 2; ++side) {
      const double sign = side == 0 ? 1.0 : -1.0;
      std::vector<float> p(original.size());
      for (size_t i = 0; i < p.size(); ++i) {
        p[i] = static_cast<float>(original[i] + sign * options.step * d[i]);
      }
      FromHost(backend, p, value);
      l[side] = loss();
      if (routing && routing() != base_routing) routing_changed = true;
    }
    FromHost(backend, original, value);
    const double numeric = (l[0] - l[1]) / (2.0 * options.step);
    const double analytic = Dot(grad, d);
    const double tol = options.rtol * std::abs(analytic) +
                       options.atol_loss * std::max(1.0, std::abs(base_loss)) +
                       options.atol_grad * gnorm;
    const double err = std::abs(numeric - analytic);
    report << (k == 0 && gnorm > 0.0 ? "  along g: " : "  random:  ") << "analytic " << analytic
           << " numeric " << numeric << " err " << err << " tol " << tol
           << (routing_changed ? " (routing changed: skipped)" : "") << "\n";
    if (routing_changed) {
      ++result.skipped;
      continue;
    }
    ++result.checked;
    if (!(err <= tol)) ++result.failed;
  }
  // Leave the forward state as it was for the original values.
  loss();
  result.report = report.str();
  return result;
}

ModelConfig TinyConfig() {
  ModelConfig c;
  c.vocab_size = 32;
  c.hidden_size = 16;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 4;
  c.head_dim = 4;
  c.intermediate_size = 24;
  c.num_experts = 8;
  c.moe_intermediate_size = 12;
  c.top_k = 2;
  c.norm_topk_prob = true;
  c.router_aux_loss_coef = 0.0;
  c.router_z_loss_coef = 0.0;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  return c;
}

}  // namespace sy::testing
