// consumer: a program built against an installed Switchyard (find_package(Switchyard)). It builds
// a tiny random MoE model on the CPU, runs one forward pass over a prompt, prints a checksum of
// the logits and checks that every one is finite, then generates greedily with the generate
// engine and checks that its first token is the argmax of the forward pass's last row.
//
//   consumer [device]      (default: cpu)
#include <cmath>
#include <cstdio>
#include <memory>
#include <span>
#include <vector>

#include "inference/generate_engine.h"
#include "inference/resident_expert_provider.h"
#include "inference/sampler.h"
#include "runtime/backend/backend.h"
#include "runtime/model/moe_model.h"

namespace {

int Fail(const sy::Status& status) {
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  sy::Result<sy::Device> device = sy::ParseDevice(argc > 1 ? argv[1] : "cpu");
  if (!device.ok()) return Fail(device.status());
  sy::Result<std::unique_ptr<sy::Backend>> backend = sy::CreateBackend(*device);
  if (!backend.ok()) return Fail(backend.status());

  sy::ModelConfig config;
  config.vocab_size = 64;
  config.hidden_size = 32;
  config.num_layers = 2;
  config.num_heads = 4;
  config.num_experts = 4;
  config.moe_intermediate_size = 16;
  config.top_k = 2;
  sy::ModelOptions options;
  options.with_grad = false;
  sy::Result<std::unique_ptr<sy::MoeModel>> made = sy::MoeModel::Create(**backend, config, options);
  if (!made.ok()) return Fail(made.status());
  sy::MoeModel& model = **made;
  if (sy::Status s = model.InitializeParameters(/*seed=*/7, /*stddev=*/0.3f); !s.ok())
    return Fail(s);

  // One forward pass over the whole prompt: logits f32 [T, vocab].
  std::vector<int32_t> prompt = {3, 14, 15, 9, 26, 5};
  const auto t = static_cast<int64_t>(prompt.size());
  sy::Result<sy::LossReport> forward = model.Forward(
      sy::Tensor::Wrap(prompt.data(), sy::DType::kI32, sy::Shape{1, t}), sy::Tensor());
  if (!forward.ok()) return Fail(forward.status());
  std::vector<float> logits(static_cast<size_t>(model.logits().numel()));
  (*backend)->CopyAsync(model.logits(),
                        sy::Tensor::Wrap(logits.data(), sy::DType::kF32, model.logits().shape()),
                        (*backend)->compute_stream());
  (*backend)->SynchronizeStream((*backend)->compute_stream());
  double sum = 0.0, sum_abs = 0.0;
  for (float v : logits) {
    if (!std::isfinite(v)) {
      std::fprintf(stderr, "error: a logit is not finite (%f)\n", static_cast<double>(v));
      return 1;
    }
    sum += v;
    sum_abs += std::fabs(v);
  }
  std::printf("device %s, logits [%lld, %lld]: sum %.6f, sum |x| %.6f, all finite\n",
              (*backend)->name().c_str(), static_cast<long long>(t),
              static_cast<long long>(config.vocab_size), sum, sum_abs);
  if (sum_abs == 0.0) {
    std::fprintf(stderr, "error: every logit is 0\n");
    return 1;
  }
  const auto vocab = static_cast<size_t>(config.vocab_size);
  const int32_t want_first =
      sy::GreedyArgmax(std::span<const float>(logits.data() + logits.size() - vocab, vocab));

  // Greedy generation over the KV cache.
  sy::ResidentExpertProvider provider;
  sy::Result<std::unique_ptr<sy::GenerateEngine>> engine =
      sy::GenerateEngine::Create(model, &provider, {.max_batch = 1, .max_context = 32});
  if (!engine.ok()) return Fail(engine.status());
  sy::GenerateRequest request;
  request.prompt = prompt;
  request.sampling.temperature = 0.0f;
  request.sampling.max_new_tokens = 8;
  sy::Result<sy::Generation> generation = (*engine)->Generate(request);
  if (!generation.ok()) return Fail(generation.status());
  std::printf("generated:");
  for (int32_t token : generation->tokens) std::printf(" %d", token);
  std::printf("\n");
  if (generation->tokens.empty() || generation->tokens[0] != want_first) {
    std::fprintf(stderr, "error: the first generated token is not the forward pass's argmax %d\n",
                 want_first);
    return 1;
  }
  std::printf("consumer: OK\n");
  return 0;
}
