// Expert predictors for the `predictive` policy (ProMoE; docs/offload.md, "The predictive
// policy"): from MoE layer m's input hidden rows, guess which experts the gate of MoE layer
// m + stride will choose, so their copies can start early (as LOW transfers).
//
// - ExpertPredictor: the interface. Scores(m, h) gives [rows, E] scores for layer m + stride;
//   TopKExperts and PredictedSet turn them into per-row choices and the layer's set.
// - SkipGatePredictor: layer m's input fed to the gate of layer m + stride (ProMoE's skip-gate
//   baseline). Needs nothing but the model.
// - MlpPredictor: a 2-layer MLP per source layer, scores = W2 relu(W1 ((h - mean) * inv_std) + b1)
//   + b2, trained offline from recorded (hidden, gate) traces (TrainMlpPredictor; the traces come
//   from PredictorTraceRecorder, inference/offload/predictor_trace.h) and stored in a predictor
//   file (SaveMlpPredictor / LoadMlpPredictor; format below).
//
// Predictor file (all little-endian):
//   offset 0   8 bytes  magic "SYPREDMP"
//          8   u32      version (1)
//         12   u32      stride (1 or 2)
//         16   u32      num_layers: MoE layers of the model (> stride)
//         20   u32      num_experts (1 .. 65536)
//         24   u32      top_k (1 .. num_experts)
//         28   u32      mlp_hidden D (1 .. 65536)
//         32   u64      hidden H (1 .. 2^20)
//         40   per source layer m = 0 .. num_layers - stride - 1, f32:
//                in_mean [H], in_inv_std [H], w1 [D, H], b1 [D], w2 [E, D], b2 [E]
//        end-8 u64      FNV-1a 64 of every byte before it
// The parser checks every field's range, the exact size, the checksum and that every weight is
// finite, and names the file and the field in its error (DataLoss for a truncated or corrupt
// file, InvalidArgument for a well-formed file with values out of range).
//
// Ownership: predictors own their weights (host f32). Thread-safety: a predictor is immutable
// after construction; Scores may be called from any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/model/model_config.h"
#include "runtime/model/moe_model.h"

namespace sy::offload {

class ExpertPredictor {
 public:
  virtual ~ExpertPredictor() = default;
  virtual std::string name() const = 0;  // "skip-gate", "mlp"
  virtual int stride() const = 0;        // 1 or 2: layer m predicts layer m + stride
  virtual int num_layers() const = 0;    // MoE layers of the model it was made for
  virtual int num_experts() const = 0;
  virtual int64_t hidden() const = 0;
  virtual int top_k() const = 0;  // the model's top-k, the choices per row to predict
  // h: host f32 [rows, hidden()], MoE layer `source`'s input rows, source in
  // [0, num_layers() - stride()) (checked). scores: [rows, num_experts()] (overwritten): higher
  // means more likely chosen by the gate of MoE layer source + stride().
  virtual void Scores(int source, std::span<const float> h, int64_t rows,
                      std::span<float> scores) const = 0;
};

// Per row, the k highest-scoring experts in descending score, ties to the lower id (the
// router's order). scores [rows, num_experts] -> [rows, k].
std::vector<int32_t> TopKExperts(std::span<const float> scores, int64_t rows, int num_experts,
                                 int k);
// The union of `row_experts` ([rows, k] ids), most chosen first, ties to the lower id.
std::vector<int32_t> PredictedSet(std::span<const int32_t> row_experts, int num_experts);

// InvalidArgument when `predictor` was made for a model of another shape (MoE layers, experts,
// hidden size, top-k), naming the field.
Status CheckPredictorFits(const ExpertPredictor& predictor, const ModelConfig& config);

// How much of the gate's choice a prediction covered: `covered` of the gate's `gate` experts were
// in the predicted set. ProMoE's accuracy, per layer and step (a set, so batch > 1 counts the
// union of the rows' choices).
struct PredictorAccuracy {
  int64_t covered = 0;  // gate experts that were predicted
  int64_t gate = 0;     // gate experts of the layers that had a prediction
  int64_t layers = 0;   // (step, layer) pairs counted
  double fraction() const { return gate > 0 ? static_cast<double>(covered) / gate : 0.0; }
  // Adds one layer: the gate's set and the predicted set (expert ids, each without repeats).
  void Add(std::span<const int32_t> gate_set, std::span<const int32_t> predicted);
};

// Per-row top-k accuracy: mean over rows of |predicted top-k ∩ true top-k| / k, for `targets`
// [rows, k] the gate's choices and `predicted` [rows, k].
double TopKAccuracy(std::span<const int32_t> targets, std::span<const int32_t> predicted,
                    int64_t rows, int k);

class SkipGatePredictor final : public ExpertPredictor {
 public:
  // Copies (as f32, to the host) the gate of every MoE layer t >= stride: layers/{L}/moe/gate
  // [E, H], or for a pre-gated layer without its own gate the pre-gate of MoE layer t - 1 that
  // routes it. InvalidArgument for a stride other than 1 or 2 or a model with <= stride MoE
  // layers.
  static Result<std::unique_ptr<SkipGatePredictor>> Create(MoeModel& model, int stride);

  std::string name() const override { return "skip-gate"; }
  int stride() const override { return stride_; }
  int num_layers() const override { return num_layers_; }
  int num_experts() const override { return num_experts_; }
  int64_t hidden() const override { return hidden_; }
  int top_k() const override { return top_k_; }
  void Scores(int source, std::span<const float> h, int64_t rows,
              std::span<float> scores) const override;

 private:
  SkipGatePredictor() = default;
  int stride_ = 1, num_layers_ = 0, num_experts_ = 0, top_k_ = 1;
  int64_t hidden_ = 0;
  std::vector<std::vector<float>> gates_;  // per source layer m: gate of m + stride, [E, H]
};

// The weights of one source layer's MLP.
struct MlpLayerWeights {
  std::vector<float> in_mean;     // [H]
  std::vector<float> in_inv_std;  // [H]
  std::vector<float> w1;          // [D, H]
  std::vector<float> b1;          // [D]
  std::vector<float> w2;          // [E, D]
  std::vector<float> b2;          // [E]
};

class MlpPredictor final : public ExpertPredictor {
 public:
  // layers.size() == num_layers - stride, each sized as the shape says (checked).
  MlpPredictor(int stride, int num_layers, int num_experts, int top_k, int64_t hidden,
               int mlp_hidden, std::vector<MlpLayerWeights> layers);

  std::string name() const override { return "mlp"; }
  int stride() const override { return stride_; }
  int num_layers() const override { return num_layers_; }
  int num_experts() const override { return num_experts_; }
  int64_t hidden() const override { return hidden_; }
  int top_k() const override { return top_k_; }
  int mlp_hidden() const { return mlp_hidden_; }
  const MlpLayerWeights& layer(int source) const { return layers_.at(source); }
  void Scores(int source, std::span<const float> h, int64_t rows,
              std::span<float> scores) const override;

 private:
  int stride_, num_layers_, num_experts_, top_k_;
  int64_t hidden_;
  int mlp_hidden_;
  std::vector<MlpLayerWeights> layers_;
};

// The predictor file's bytes (format at the top).
std::string SerializeMlpPredictor(const MlpPredictor& predictor);
// Parses `bytes`; `name` (the file) is named in every error.
Result<std::unique_ptr<MlpPredictor>> ParseMlpPredictor(std::string_view bytes,
                                                        const std::string& name);
// Writes `path` atomically: `path`.tmp, flushed and fsynced, then renamed over `path`.
Status SaveMlpPredictor(const MlpPredictor& predictor, const std::string& path);
// NotFound / IOError when it cannot be read; else as ParseMlpPredictor.
Result<std::unique_ptr<MlpPredictor>> LoadMlpPredictor(const std::string& path);

// Recorded (hidden, gate) pairs. Row r of every layer is the same token of the same forward
// step, so layer m's h row r pairs with layer m + stride's experts row r.
struct PredictorTraces {
  int num_layers = 0;   // MoE layers
  int num_experts = 0;  // per MoE layer
  int top_k = 0;
  int64_t hidden = 0;
  std::vector<std::vector<float>> h;          // per MoE layer: [rows, hidden]
  std::vector<std::vector<int32_t>> experts;  // per MoE layer: [rows, top_k], the gate's choice
  int64_t rows() const {
    return h.empty() ? 0 : static_cast<int64_t>(h[0].size()) / std::max<int64_t>(hidden, 1);
  }
};

struct MlpTrainOptions {
  int stride = 1;          // 1 or 2. Default: 1
  int mlp_hidden = 128;    // D. Default: 128
  int epochs = 20;         // passes over the training rows. Default: 20
  int batch = 32;          // rows per Adam step. Default: 32
  float lr = 1e-3f;        // Adam learning rate. Default: 1e-3
  double holdout = 0.1;    // fraction of rows held out for the accuracy check. Default: 0.1
  uint64_t seed = 0;       // initialisation and row order. Default: 0
  float weight_decay = 0;  // decoupled (AdamW). Default: 0
};

// One source layer's training, as reported after each epoch and at the end.
struct MlpLayerReport {
  int source = 0;  // MoE layer m (predicting m + stride)
  int epoch = 0;   // epochs done
  int64_t train_rows = 0, heldout_rows = 0;
  double first_loss = 0;                            // mean loss of the first epoch
  double loss = 0;                                  // mean loss of the last epoch
  double train_accuracy = 0, heldout_accuracy = 0;  // TopKAccuracy; heldout 0 without rows
};

// Trains one MLP per source layer with softmax cross-entropy against the gate's top-k (each
// chosen expert 1/k), as the model trains: the runtime's Linear, Relu and CrossEntropy forward
// and backward on a CPU backend, and optim/'s AdamW (weight_decay on the weights, none on the
// biases). Deterministic for a seed. `progress` (optional) is called after every epoch of every
// layer; `reports` (optional) receives each layer's final report. InvalidArgument for malformed
// traces or options.
Result<std::unique_ptr<MlpPredictor>> TrainMlpPredictor(
    const PredictorTraces& traces, const MlpTrainOptions& options,
    const std::function<void(const MlpLayerReport&)>& progress = {},
    std::vector<MlpLayerReport>* reports = nullptr);

}  // namespace sy::offload
