// Helpers shared by the decoder tests (tests/inference): a random forward-only model and the
// logits of a full MoeModel::Forward, the reference the KV-cache paths are checked against.
// Ownership: returns owned values. Thread-safety: drives the model's backend; one thread.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "inference/generate_engine.h"
#include "runtime/backend/backend.h"
#include "runtime/model/moe_model.h"

namespace sy::testing {

// A greedy request: temperature 0, at most `max_new_tokens` new tokens.
inline GenerateRequest GreedyRequest(std::vector<int32_t> prompt, int64_t max_new_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.sampling.max_new_tokens = max_new_tokens;
  return r;
}

// A forward-only model with weights ~ N(0, stddev^2) (0.3: O(1) activations, routing far from
// ties).
inline Result<std::unique_ptr<MoeModel>> RandomModel(Backend& backend, const ModelConfig& config,
                                                     uint64_t seed, float stddev = 0.3f) {
  ModelOptions options;
  options.with_grad = false;
  SY_ASSIGN_OR_RETURN(auto model, MoeModel::Create(backend, config, options));
  SY_RETURN_IF_ERROR(model->InitializeParameters(seed, stddev));
  return model;
}

inline std::vector<float> ToHost(Backend& backend, const Tensor& dev) {
  std::vector<float> out(static_cast<size_t>(dev.numel()));
  backend.CopyAsync(dev, Tensor::Wrap(out.data(), DType::kF32, dev.shape()),
                    backend.compute_stream());
  backend.SynchronizeStream(backend.compute_stream());
  return out;
}

// Logits of every position of `ids` from MoeModel::Forward, f32 [T, vocab].
inline std::vector<float> FullLogits(MoeModel& model, std::vector<int32_t> ids) {
  const int64_t t = static_cast<int64_t>(ids.size());
  Result<LossReport> r =
      model.Forward(Tensor::Wrap(ids.data(), DType::kI32, Shape{1, t}), Tensor());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return ToHost(model.backend(), model.logits());
}

// A test run once per device ("cpu", "sim", "cuda:0"); SetUp makes backend_, and skips, saying
// so, where the device is a GPU that is not present.
class BackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    Result<Device> device = ParseDevice(GetParam());
    ASSERT_TRUE(device.ok()) << device.status().ToString();
    Result<std::unique_ptr<Backend>> backend = CreateBackend(*device);
    if (!backend.ok() && device->type == DeviceType::kCuda) {
      GTEST_SKIP() << "no GPU here: " << backend.status().ToString();
    }
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    backend_ = std::move(backend).value();
  }
  std::unique_ptr<Backend> backend_;
};

// The devices BackendTest runs on, and their test-name suffixes.
inline auto BackendParams() { return ::testing::Values("cpu", "sim", "cuda:0"); }
inline std::string BackendParamName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param == "cuda:0" ? std::string("cuda") : info.param;
}

}  // namespace sy::testing
