// `switchyard train-predictor`: records (hidden, gate) traces of a model and trains the
// `predictive` policy's MLP expert predictor from them (ProMoE; inference/offload/
// expert_predictor.h, docs/offload.md "The predictive policy").
//
//   switchyard train-predictor --model DIR|CKPT (--prompt-ids 1,2,3 | --prompts FILE)
//                              --out FILE [--stride 1|2] [--hidden N] [--epochs N] [--batch N]
//                              [--lr X] [--seed S] [--holdout F] [--gen-tokens N]
//                              [--device cpu] [--dtype f32|bf16|f16]
//
// The model runs resident over each prompt (a KV-cache prefill, then --gen-tokens greedy decode
// steps); every MoE layer's input rows and the gate's top-k are recorded
// (PredictorTraceRecorder). One 2-layer MLP per MoE layer m < layers - stride learns the top-k of
// layer m + stride from layer m's input. Progress goes to stderr per epoch; at the end, each
// layer's train and held-out top-k accuracy, next to the skip-gate predictor's on the same rows.
// The file is written atomically (FILE.tmp, then renamed); `generate --policy predictive` and
// `bench infer` take it as the predictor.
//
// --prompts FILE: one prompt per line, token ids separated by commas or spaces; empty lines and
// lines starting with # are skipped.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "inference/offload/predictor_training.h"
#include "inference/token_ids.h"
#include "launcher/command.h"
#include "launcher/inference_session.h"
#include "runtime/core/read_file.h"

namespace sy::launcher {
namespace {

class TrainPredictorCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--model", session_options_.model_path,
                   "Hugging Face model directory, or a switchyard training checkpoint")
        ->required();
    auto* ids =
        app.add_option("--prompt-ids", prompt_ids_, "One prompt: token ids, comma-separated");
    auto* file = app.add_option("--prompts", prompts_file_,
                                "A file of prompts, one per line, token ids separated by commas "
                                "or spaces (# comments)");
    ids->excludes(file);
    file->excludes(ids);
    app.add_option("--out", out_, "Predictor file to write (atomically)")->required();
    app.add_option("--stride", options_.stride,
                   "Predict MoE layer m + stride from m: 1 or 2 "
                   "(default 1)")
        ->check(IntegerRange(1, 2));
    app.add_option("--hidden", options_.mlp_hidden, "MLP hidden width (default 128)")
        ->check(IntegerRange(1, 1 << 16));
    app.add_option("--epochs", options_.epochs, "Passes over the traces (default 20)")
        ->check(IntegerRange(1, 1 << 20));
    app.add_option("--batch", options_.batch, "Rows per Adam step (default 32)")
        ->check(IntegerRange(1, 1 << 20));
    app.add_option("--lr", options_.lr, "Adam learning rate (default 1e-3)")
        ->check(NumberRange(1e-9, 10));
    app.add_option("--seed", options_.seed, "Initialisation and shuffling seed (default 0)")
        ->check(IntegerRange(0, INT64_MAX));
    app.add_option("--holdout", options_.holdout,
                   "Fraction of rows held out for the accuracy check (default 0.1)")
        ->check(NumberRange(0, 0.9));
    app.add_option("--gen-tokens", gen_tokens_,
                   "Greedy decode steps after each prompt, recorded too (default 0)")
        ->check(IntegerRange(0, 1 << 20));
    app.add_option("--device", session_options_.device, "cpu, sim or cuda:N (default cpu)");
    AddThreadsOption(app, &session_options_.threads);
    app.add_option("--dtype", dtype_, "Weight dtype on the device: f32, bf16, f16 (default f32)");
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Result<std::vector<std::vector<int32_t>>> Prompts() const {
    std::vector<std::vector<int32_t>> prompts;
    if (!prompt_ids_.empty()) {
      SY_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseTokenIds(prompt_ids_, "--prompt-ids"));
      prompts.push_back(std::move(ids));
    } else if (!prompts_file_.empty()) {
      Result<std::string> text = ReadFile(prompts_file_);
      if (!text.ok()) return text.status().WithContext("--prompts");
      std::istringstream in(*text);
      std::string line;
      int number = 0;
      while (std::getline(in, line)) {
        ++number;
        if (line.empty() || line[0] == '#') continue;
        SY_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                            ParseTokenIds(line, prompts_file_ + ":" + std::to_string(number)));
        if (!ids.empty()) prompts.push_back(std::move(ids));
      }
    } else {
      return InvalidArgumentError("pass --prompt-ids 1,2,3 or --prompts FILE");
    }
    if (prompts.empty()) return InvalidArgumentError("no prompts: every line was empty");
    return prompts;
  }

  Status RunStatus() {
    if (options_.stride != 1 && options_.stride != 2) {
      return InvalidArgumentError("--stride " + std::to_string(options_.stride) + ": use 1 or 2");
    }
    SY_ASSIGN_OR_RETURN(const std::vector<std::vector<int32_t>> prompts, Prompts());
    SY_ASSIGN_OR_RETURN(session_options_.weight_dtype, ParseDType(dtype_));
    auto owned = std::make_unique<offload::PredictorTraceRecorder>();
    offload::PredictorTraceRecorder& recorder = *owned;
    SY_ASSIGN_OR_RETURN(std::unique_ptr<InferenceSession> session,
                        InferenceSession::Open(session_options_, std::move(owned)));
    std::fprintf(stderr, "loaded %s: %s\n", session->path().c_str(), session->Describe().c_str());
    SY_ASSIGN_OR_RETURN(
        offload::PredictorTrainingResult result,
        offload::TrainPredictorFromPrompts(
            session->model(), recorder, prompts, gen_tokens_, options_, out_,
            [this](const offload::MlpLayerReport& r) {
              std::fprintf(stderr,
                           "layer %d -> %d: epoch %d/%d, loss %.4f, held-out accuracy %.3f\n",
                           r.source, r.source + options_.stride, r.epoch, options_.epochs, r.loss,
                           r.heldout_accuracy);
            }));
    std::fprintf(stderr, "recorded %lld rows per MoE layer from %zu prompts (%d MoE layers)\n",
                 static_cast<long long>(result.rows), prompts.size(), result.num_layers);
    for (const offload::PredictorLayerResult& layer : result.layers) {
      const offload::MlpLayerReport& r = layer.report;
      std::printf(
          "layer %d -> %d: loss %.4f -> %.4f; top-%d accuracy train %.3f (%lld rows), held-out "
          "%.3f (%lld rows); skip-gate %.3f\n",
          r.source, r.source + options_.stride, r.first_loss, r.loss, result.top_k,
          r.train_accuracy, static_cast<long long>(r.train_rows), r.heldout_accuracy,
          static_cast<long long>(r.heldout_rows), layer.skip_gate_accuracy);
    }
    std::printf("mean top-%d accuracy: train %.3f, held-out %.3f, skip-gate %.3f (chance %.3f)\n",
                result.top_k, result.mean_train_accuracy, result.mean_heldout_accuracy,
                result.mean_skip_gate_accuracy, result.chance);
    std::printf("wrote %s (stride %d, %d MoE layers, MLP hidden %d)\n", out_.c_str(),
                options_.stride, result.num_layers, options_.mlp_hidden);
    return Status::Ok();
  }

  InferenceOptions session_options_;
  std::string prompt_ids_;
  std::string prompts_file_;
  std::string out_;
  std::string dtype_ = "f32";
  int gen_tokens_ = 0;
  offload::MlpTrainOptions options_;
};

}  // namespace

SY_REGISTER_COMMAND("train-predictor",
                    "Record (hidden, gate) traces and train the predictive policy's MLP predictor",
                    TrainPredictorCommand);

}  // namespace sy::launcher
