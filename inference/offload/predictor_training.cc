#include "inference/offload/predictor_training.h"

#include <algorithm>
#include <memory>

#include "inference/generate_engine.h"

namespace sy::offload {

Result<PredictorTrainingResult> TrainPredictorFromPrompts(
    MoeModel& model, PredictorTraceRecorder& recorder,
    const std::vector<std::vector<int32_t>>& prompts, int gen_tokens,
    const MlpTrainOptions& options, const std::string& out_path,
    const std::function<void(const MlpLayerReport&)>& progress) {
  if (prompts.empty()) return InvalidArgumentError("train-predictor: no prompts");
  if (options.stride != 1 && options.stride != 2) {
    return InvalidArgumentError("train-predictor: stride " + std::to_string(options.stride) +
                                ": use 1 or 2");
  }
  if (gen_tokens < 0) return InvalidArgumentError("train-predictor: gen_tokens must be >= 0");
  const ModelConfig& config = model.config();
  if (config.NumMoeLayers() <= options.stride) {
    return InvalidArgumentError("the model has " + std::to_string(config.NumMoeLayers()) +
                                " MoE layers: nothing to predict at stride " +
                                std::to_string(options.stride));
  }
  size_t longest = 0;
  for (const auto& prompt : prompts) longest = std::max(longest, prompt.size());
  // gen_tokens decode steps: the first token comes from the prefill, each further one from a step.
  const int64_t new_tokens = int64_t{gen_tokens} + 1;
  SY_ASSIGN_OR_RETURN(
      std::unique_ptr<GenerateEngine> engine,
      GenerateEngine::Create(
          model, &recorder,
          {.max_batch = 1, .max_context = static_cast<int64_t>(longest) + new_tokens}));
  for (const std::vector<int32_t>& prompt : prompts) {
    GenerateRequest request;
    request.prompt = prompt;
    request.sampling.temperature = 0.0f;
    request.sampling.max_new_tokens = new_tokens;
    SY_RETURN_IF_ERROR(engine->Generate(std::move(request)).status());
  }
  const PredictorTraces& traces = recorder.traces();
  PredictorTrainingResult result;
  result.rows = traces.rows();
  result.num_layers = traces.num_layers;
  result.top_k = traces.top_k;
  result.chance = static_cast<double>(traces.top_k) / traces.num_experts;

  std::vector<MlpLayerReport> reports;
  SY_ASSIGN_OR_RETURN(std::unique_ptr<MlpPredictor> mlp,
                      TrainMlpPredictor(traces, options, progress, &reports));
  // The skip-gate baseline on the same rows (all of them: it was not trained on any).
  SY_ASSIGN_OR_RETURN(auto skip, SkipGatePredictor::Create(model, options.stride));
  for (const MlpLayerReport& r : reports) {
    const int64_t rows = traces.rows();
    std::vector<float> scores(static_cast<size_t>(rows * traces.num_experts));
    skip->Scores(r.source, traces.h[static_cast<size_t>(r.source)], rows, scores);
    PredictorLayerResult layer;
    layer.report = r;
    layer.skip_gate_accuracy = TopKAccuracy(
        traces.experts[static_cast<size_t>(r.source + options.stride)],
        TopKExperts(scores, rows, traces.num_experts, traces.top_k), rows, traces.top_k);
    result.mean_train_accuracy += r.train_accuracy;
    result.mean_heldout_accuracy += r.heldout_accuracy;
    result.mean_skip_gate_accuracy += layer.skip_gate_accuracy;
    result.layers.push_back(layer);
  }
  const auto n = static_cast<double>(std::max<size_t>(1, result.layers.size()));
  result.mean_train_accuracy /= n;
  result.mean_heldout_accuracy /= n;
  result.mean_skip_gate_accuracy /= n;
  SY_RETURN_IF_ERROR(SaveMlpPredictor(*mlp, out_path));
  return result;
}

}  // namespace sy::offload
