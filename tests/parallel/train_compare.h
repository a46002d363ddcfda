// Helpers of the MPI tests that train a sharded model against the one-process model: the plain
// optimizer path (one optimizer state per parameter) and the relative error of a tensor.
//
// Ownership: PlainState holds the moments; PlainStep keeps no pointers after it returns.
// Thread-safety: none (test code, one thread).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "runtime/core/tensor.h"
#include "runtime/model/moe_model.h"

namespace sy::testing {

// One optimizer state of one parameter (sized on first use).
struct PlainState {
  std::vector<float> m, v;
  int64_t step = 0;
};

// AdamW, torch defaults, weight decay 0.1.
inline OptimizerOptions AdamW() {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  o.weight_decay = 0.1;
  return o;
}

// Steps every parameter of `model` for which `select` is true with `opt` at learning rate `lr`.
template <typename Select>
void PlainStep(Optimizer& opt, MoeModel& model, std::map<std::string, PlainState>& states,
               double lr, Select select) {
  std::vector<ParamGroup> groups;
  for (Parameter& p : model.parameters()) {
    if (!select(p)) continue;
    PlainState& s = states[p.name];
    const size_t n = static_cast<size_t>(p.value.numel());
    if (s.m.empty()) s.m.assign(n, 0.0f);
    if (s.v.empty()) s.v.assign(n, 0.0f);
    ParamGroup g;
    g.param = p.value.data<float>();
    g.grad = p.grad.data<float>();
    g.m = s.m.data();
    g.v = s.v.data();
    g.n = n;
    g.step = &s.step;
    groups.push_back(g);
  }
  opt.Step(groups, lr);
}

// The values of an f32 tensor in host memory.
inline std::vector<float> Values(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

// Max |got - want| / max(1, max |want|); infinity when the sizes differ.
inline float RelError(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  float err = 0.0f, scale = 1.0f;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / scale;
}

}  // namespace sy::testing
