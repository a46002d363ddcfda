// Helpers shared by the model tests: backends, tiny configs, host tensors, and the directional
// finite-difference gradient check.
//
// Why directional central differences in f32, and why these tolerances. The backend computes in
// f32 (the double-precision reference operators check the operators themselves; here we check the
// model's composition of them). A check along a unit direction v compares <g, v> against
// (L(p + h v) - L(p - h v)) / 2h with h = 1e-2.
//   - Truncation error: h^2/6 * L''' along v, about 1e-5 at these sizes.
//   - Round-off: about eps_f32 * |L| * (a few) / h, which is 1e-5 for |L| ~ 1.
// CheckDirectionalGradient passes when |numeric - analytic| <= rtol * |analytic| + atol, with
// rtol = 5e-3 and atol = 2e-5 * max(1, |L|) + 1e-4 * |g| (|g| is the largest possible directional
// derivative). Measured errors on every layer and model test stay below 0.11 (layers) and 0.54
// (whole model) of that tolerance. One of the directions is g/|g| itself: there a wrong sign
// gives a 200% error, a missing factor of 2 gives 50%, and a 10% error in any block holding 5%
// of |g|^2 gives 0.5%. The random directions catch errors orthogonal to g. The test
// FdCanaryRejectsWrongGradients proves that the check rejects gradients that are 10% too large or
// have a quarter of their signs flipped.
//
// Routing is discrete: if a perturbation changes the routing, the loss is not differentiable
// along v there. Such directions are skipped and counted, and the caller asserts that most
// directions were usable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/core/tensor.h"
#include "runtime/model/model_config.h"

namespace sy::testing {

std::unique_ptr<Backend> MakeBackend(Device device);

// Host tensors (Tensor::Host) from values.
Tensor HostI32(const std::vector<int32_t>& values, Shape shape);
Tensor HostF32(const std::vector<float>& values, Shape shape);

std::vector<float> RandomNormal(size_t n, uint64_t seed, float stddev);
std::vector<int32_t> RandomTokens(size_t n, int64_t vocab, uint64_t seed);

// Reads a device tensor as f32 / i32 on the host (aborts on failure: tests only).
std::vector<float> ToHost(Backend& backend, const Tensor& t);
// Writes host values into a device tensor.
void FromHost(Backend& backend, const std::vector<float>& values, const Tensor& t);
// A new device tensor.
Tensor DeviceF32(Backend& backend, const std::vector<float>& values, Shape shape);
Tensor DeviceI32(Backend& backend, const std::vector<int32_t>& values, Shape shape);

double Dot(const std::vector<float>& a, const std::vector<float>& b);
double Norm(const std::vector<float>& a);

struct FdOptions {
  double step = 1e-2;       // h, along a unit direction
  double rtol = 5e-3;       // relative to the analytic directional derivative
  double atol_loss = 2e-5;  // times max(1, |L|): the f32 round-off floor
  double atol_grad = 1e-4;  // times |g|
  int random_directions = 2;
  uint64_t seed = 7;
};

struct FdResult {
  int checked = 0;
  int skipped = 0;  // the perturbation changed the routing
  int failed = 0;
  std::string report;  // one line per direction
};

// Runs a forward pass and returns the scalar loss.
using LossFn = std::function<double()>;
// A fingerprint of the discrete decisions of the last forward (routing); empty when there are
// none.
using RoutingFn = std::function<std::vector<int32_t>()>;

// Checks the analytic gradient `grad` of `value` (a device tensor the loss reads) along g/|g| and
// options.random_directions random unit directions. Restores `value` afterwards.
FdResult CheckDirectionalGradient(Backend& backend, const Tensor& value,
                                  const std::vector<float>& grad, const LossFn& loss,
                                  const RoutingFn& routing, const FdOptions& options = {});

// A tiny config with every optional feature off: 2 layers, hidden 16, 4 heads, 8 experts top-2.
ModelConfig TinyConfig();

}  // namespace sy::testing
