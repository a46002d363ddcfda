#include "runtime/model/parameter_store.h"

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/core/hash.h"
#include "runtime/model/host_transfer.h"

namespace sy {

Parameter& ParameterStore::Add(Parameter parameter) {
  SY_CHECK(!parameter.name.empty()) << "parameter without a name";
  SY_CHECK(index_.find(parameter.name) == index_.end())
      << "parameter " << parameter.name << " registered twice";
  SY_CHECK(!parameter.grad.defined() || parameter.grad.shape() == parameter.value.shape())
      << "parameter " << parameter.name << ": grad " << parameter.grad.ToString()
      << " does not match value " << parameter.value.ToString();
  index_.emplace(parameter.name, params_.size());
  params_.push_back(std::move(parameter));
  return params_.back();
}

Result<Parameter*> ParameterStore::Create(Backend& backend, std::string name, Shape shape,
                                          DType dtype, bool with_grad, int layer, ParamInit init) {
  Parameter p;
  p.name = std::move(name);
  if (auto it = dtype_overrides_.find(p.name); it != dtype_overrides_.end()) dtype = it->second;
  auto allocate = [&](DType type) {
    return releasable_ ? backend.AllocateReleasable(type, shape) : backend.Allocate(type, shape);
  };
  SY_ASSIGN_OR_RETURN(p.value, allocate(dtype));
  if (with_grad) {
    SY_ASSIGN_OR_RETURN(p.grad, allocate(DType::kF32));
  }
  p.layer = layer;
  p.init = init;
  return &Add(std::move(p));
}

Parameter* ParameterStore::Find(std::string_view name) {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &params_[it->second];
}

const Parameter* ParameterStore::Find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &params_[it->second];
}

int64_t ParameterStore::num_elements() const {
  int64_t n = 0;
  for (const Parameter& p : params_) n += p.value.numel();
  return n;
}

int64_t ParameterStore::num_expert_elements() const {
  int64_t n = 0;
  for (const Parameter& p : params_) n += p.is_expert ? p.value.numel() : 0;
  return n;
}

void ParameterStore::ZeroGrads(Backend& backend) {
  for (const Parameter& p : params_) {
    if (p.grad.defined() && p.grad.numel() > 0) backend.Fill(p.grad, 0.0f);
  }
}

void InitialValues(std::string_view name, ParamInit init, uint64_t seed, float stddev,
                   std::span<float> out) {
  switch (init) {
    case ParamInit::kNormal: {
      std::mt19937_64 rng(seed ^ NameSeed(name));
      std::normal_distribution<float> normal(0.0f, stddev);
      for (float& v : out) v = normal(rng);
      break;
    }
    case ParamInit::kOnes:
      std::fill(out.begin(), out.end(), 1.0f);
      break;
    case ParamInit::kZeros:
      std::fill(out.begin(), out.end(), 0.0f);
      break;
  }
}

std::vector<float> ParameterStore::InitialValuesOf(const Parameter& p, uint64_t seed,
                                                   float stddev) {
  std::vector<float> values(static_cast<size_t>(p.value.numel()));
  if (p.init == ParamInit::kNormal && p.is_column_shard()) {
    // The whole parameter's values in row-major order, keeping this shard's columns.
    std::mt19937_64 rng(seed ^ NameSeed(p.name));
    std::normal_distribution<float> normal(0.0f, stddev);
    const int64_t cols = p.value.dim(1);
    for (int64_t r = 0; r < p.value.dim(0); ++r) {
      for (int64_t c = 0; c < p.full_cols; ++c) {
        const float v = normal(rng);
        if (c >= p.col_begin && c < p.col_begin + cols) {
          values[static_cast<size_t>(r * cols + c - p.col_begin)] = v;
        }
      }
    }
  } else {
    InitialValues(p.name, p.init, seed, stddev, values);
  }
  return values;
}

Status ParameterStore::Initialize(Backend& backend, uint64_t seed, float stddev) {
  for (const Parameter& p : params_) {
    SY_RETURN_IF_ERROR(
        CopyFromHost(backend, InitialValuesOf(p, seed, stddev), p.value).WithContext(p.name));
  }
  return Status::Ok();
}

}  // namespace sy
