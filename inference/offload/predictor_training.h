// TrainPredictorFromPrompts: what `switchyard train-predictor` does (ProMoE; docs/offload.md "The
// predictive policy"). The model runs resident over each prompt through the generate engine (a
// KV-cache prefill, then `gen_tokens` greedy decode steps) with a PredictorTraceRecorder as its
// expert provider, which records every MoE layer's input rows and the gate's top-k. One 2-layer
// MLP per MoE layer m < layers - stride then learns the top-k of layer m + stride from layer m's
// input (TrainMlpPredictor), and each layer's train and held-out top-k accuracy is reported next
// to the skip-gate predictor's on the same rows. The predictor file is written atomically.
//
// Thread-safety: drives the model's backend; the thread that owns its compute stream.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "inference/offload/expert_predictor.h"
#include "inference/offload/predictor_trace.h"
#include "runtime/core/status.h"
#include "runtime/model/moe_model.h"

namespace sy::offload {

struct PredictorLayerResult {
  MlpLayerReport report;
  double skip_gate_accuracy = 0;  // the skip-gate predictor's top-k accuracy on every row
};

struct PredictorTrainingResult {
  int64_t rows = 0;    // recorded rows per MoE layer
  int num_layers = 0;  // MoE layers
  int top_k = 0;
  std::vector<PredictorLayerResult> layers;
  double mean_train_accuracy = 0, mean_heldout_accuracy = 0, mean_skip_gate_accuracy = 0;
  double chance = 0;  // top_k / num_experts
};

// `recorder` must be installed on `model` (it is `model`'s expert provider). InvalidArgument for
// no prompts, a model with no MoE layer `stride` layers ahead, or bad options; the predictor's
// write errors name the file. `progress` (optional) sees every epoch of every layer.
Result<PredictorTrainingResult> TrainPredictorFromPrompts(
    MoeModel& model, PredictorTraceRecorder& recorder,
    const std::vector<std::vector<int32_t>>& prompts, int gen_tokens,
    const MlpTrainOptions& options, const std::string& out_path,
    const std::function<void(const MlpLayerReport&)>& progress = {});

}  // namespace sy::offload
