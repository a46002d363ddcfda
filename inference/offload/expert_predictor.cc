#include "inference/offload/expert_predictor.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>

#include "optim/optimizer.h"
#include "runtime/core/check.h"
#include "runtime/core/file_creation.h"
#include "runtime/core/hash.h"
#include "runtime/core/read_file.h"
#include "runtime/model/host_transfer.h"
#include "runtime/model/linear.h"

namespace sy::offload {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the predictor file is little-endian; add byte swapping for this host");

constexpr char kMagic[8] = {'S', 'Y', 'P', 'R', 'E', 'D', 'M', 'P'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 40;
constexpr uint32_t kMaxLayers = 4096;
constexpr uint32_t kMaxExperts = 65536;
constexpr uint32_t kMaxMlpHidden = 65536;
constexpr uint64_t kMaxHidden = uint64_t{1} << 20;

// f32 elements of one source layer's weights.
uint64_t LayerFloats(uint64_t hidden, uint64_t d, uint64_t e) {
  return 2 * hidden + d * hidden + d + e * d + e;
}

// Row-major scores for one row: scores[e] = w[e, :] . x + (b ? b[e] : 0).
void MatVec(const float* w, const float* b, const float* x, int64_t out, int64_t in, float* y) {
  for (int64_t o = 0; o < out; ++o) {
    const float* row = w + o * in;
    float acc = 0;
    for (int64_t i = 0; i < in; ++i) acc += row[i] * x[i];
    y[o] = acc + (b ? b[o] : 0.0f);
  }
}

// The decoder layer of each MoE index.
std::vector<int> MoeDecoderLayers(const ModelConfig& config) {
  std::vector<int> layers;
  for (int l = 0; l < config.num_layers; ++l) {
    if (config.MoeIndex(l) >= 0) layers.push_back(l);
  }
  return layers;
}

}  // namespace

std::vector<int32_t> TopKExperts(std::span<const float> scores, int64_t rows, int num_experts,
                                 int k) {
  SY_CHECK(k >= 1 && k <= num_experts) << "k " << k << " of " << num_experts;
  SY_CHECK_EQ(static_cast<int64_t>(scores.size()), rows * num_experts) << "scores";
  std::vector<int32_t> out(static_cast<size_t>(rows * k));
  std::vector<int32_t> order(static_cast<size_t>(num_experts));
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = scores.data() + r * num_experts;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [s](int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
    std::copy(order.begin(), order.begin() + k, out.begin() + r * k);
  }
  return out;
}

std::vector<int32_t> PredictedSet(std::span<const int32_t> row_experts, int num_experts) {
  std::vector<int64_t> votes(static_cast<size_t>(num_experts), 0);
  for (const int32_t e : row_experts) {
    SY_CHECK(e >= 0 && e < num_experts) << "expert " << e;
    ++votes[static_cast<size_t>(e)];
  }
  std::vector<int32_t> set;
  for (int32_t e = 0; e < num_experts; ++e) {
    if (votes[static_cast<size_t>(e)] > 0) set.push_back(e);
  }
  std::stable_sort(set.begin(), set.end(), [&votes](int32_t a, int32_t b) {
    return votes[static_cast<size_t>(a)] > votes[static_cast<size_t>(b)];
  });
  return set;
}

Status CheckPredictorFits(const ExpertPredictor& p, const ModelConfig& config) {
  auto mismatch = [&p](const char* field, int64_t got, int64_t want) {
    return InvalidArgumentError("the " + p.name() + " predictor was made for a model with " +
                                field + " " + std::to_string(got) + ", this model has " +
                                std::to_string(want) +
                                "; train one for this model with `switchyard train-predictor`");
  };
  if (p.num_layers() != config.NumMoeLayers()) {
    return mismatch("MoE layers", p.num_layers(), config.NumMoeLayers());
  }
  if (p.num_experts() != config.num_experts) {
    return mismatch("num_experts", p.num_experts(), config.num_experts);
  }
  if (p.hidden() != config.hidden_size) return mismatch("hidden", p.hidden(), config.hidden_size);
  if (p.top_k() != config.top_k) return mismatch("top_k", p.top_k(), config.top_k);
  return Status::Ok();
}

void PredictorAccuracy::Add(std::span<const int32_t> gate_set, std::span<const int32_t> predicted) {
  for (const int32_t e : gate_set) {
    covered += std::find(predicted.begin(), predicted.end(), e) != predicted.end() ? 1 : 0;
  }
  gate += static_cast<int64_t>(gate_set.size());
  ++layers;
}

double TopKAccuracy(std::span<const int32_t> targets, std::span<const int32_t> predicted,
                    int64_t rows, int k) {
  SY_CHECK_EQ(static_cast<int64_t>(targets.size()), rows * k) << "targets";
  SY_CHECK_EQ(static_cast<int64_t>(predicted.size()), rows * k) << "predicted";
  if (rows == 0) return 0.0;
  int64_t hits = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const auto t = targets.subspan(static_cast<size_t>(r * k), static_cast<size_t>(k));
    for (int j = 0; j < k; ++j) {
      hits += std::find(t.begin(), t.end(), predicted[static_cast<size_t>(r * k + j)]) != t.end();
    }
  }
  return static_cast<double>(hits) / static_cast<double>(rows * k);
}

// ---- skip-gate ----

Result<std::unique_ptr<SkipGatePredictor>> SkipGatePredictor::Create(MoeModel& model, int stride) {
  const ModelConfig& config = model.config();
  const int layers = config.NumMoeLayers();
  if (stride != 1 && stride != 2) {
    return InvalidArgumentError("predictor stride " + std::to_string(stride) +
                                " is not supported; use 1 or 2");
  }
  if (layers <= stride) {
    return InvalidArgumentError("the model has " + std::to_string(layers) +
                                " MoE layers; a predictor of stride " + std::to_string(stride) +
                                " needs more");
  }
  std::unique_ptr<SkipGatePredictor> p(new SkipGatePredictor());
  p->stride_ = stride;
  p->num_layers_ = layers;
  p->num_experts_ = config.num_experts;
  p->top_k_ = config.top_k;
  p->hidden_ = config.hidden_size;
  const std::vector<int> decoder = MoeDecoderLayers(config);
  for (int m = 0; m + stride < layers; ++m) {
    const int t = m + stride;
    const std::string name =
        config.MoeLayerHasGate(t)
            ? "layers/" + std::to_string(decoder[static_cast<size_t>(t)]) + "/moe/gate"
            : "layers/" + std::to_string(decoder[static_cast<size_t>(t - 1)]) + "/moe/pregate";
    const Parameter* param = model.parameters().Find(name);
    if (param == nullptr) {
      return NotFoundError("skip-gate predictor: the model has no parameter " + name);
    }
    SY_ASSIGN_OR_RETURN(std::vector<float> w, DownloadF32(model.backend(), param->value));
    if (static_cast<int64_t>(w.size()) != config.num_experts * config.hidden_size) {
      return InvalidArgumentError("skip-gate predictor: " + name + " is not [experts, hidden]");
    }
    p->gates_.push_back(std::move(w));
  }
  return p;
}

void SkipGatePredictor::Scores(int source, std::span<const float> h, int64_t rows,
                               std::span<float> scores) const {
  SY_CHECK(source >= 0 && source < static_cast<int>(gates_.size())) << "source " << source;
  SY_CHECK_EQ(static_cast<int64_t>(h.size()), rows * hidden_) << "h";
  SY_CHECK_EQ(static_cast<int64_t>(scores.size()), rows * num_experts_) << "scores";
  const std::vector<float>& w = gates_[static_cast<size_t>(source)];
  for (int64_t r = 0; r < rows; ++r) {
    MatVec(w.data(), nullptr, h.data() + r * hidden_, num_experts_, hidden_,
           scores.data() + r * num_experts_);
  }
}

// ---- MLP ----

MlpPredictor::MlpPredictor(int stride, int num_layers, int num_experts, int top_k, int64_t hidden,
                           int mlp_hidden, std::vector<MlpLayerWeights> layers)
    : stride_(stride),
      num_layers_(num_layers),
      num_experts_(num_experts),
      top_k_(top_k),
      hidden_(hidden),
      mlp_hidden_(mlp_hidden),
      layers_(std::move(layers)) {
  SY_CHECK_EQ(static_cast<int>(layers_.size()), num_layers - stride) << "MLP layers";
  const size_t h = static_cast<size_t>(hidden), d = static_cast<size_t>(mlp_hidden),
               e = static_cast<size_t>(num_experts);
  for (const MlpLayerWeights& l : layers_) {
    SY_CHECK(l.in_mean.size() == h && l.in_inv_std.size() == h && l.w1.size() == d * h &&
             l.b1.size() == d && l.w2.size() == e * d && l.b2.size() == e)
        << "MLP weight shapes";
  }
}

void MlpPredictor::Scores(int source, std::span<const float> h, int64_t rows,
                          std::span<float> scores) const {
  SY_CHECK(source >= 0 && source < static_cast<int>(layers_.size())) << "source " << source;
  SY_CHECK_EQ(static_cast<int64_t>(h.size()), rows * hidden_) << "h";
  SY_CHECK_EQ(static_cast<int64_t>(scores.size()), rows * num_experts_) << "scores";
  const MlpLayerWeights& l = layers_[static_cast<size_t>(source)];
  std::vector<float> x(static_cast<size_t>(hidden_)), a(static_cast<size_t>(mlp_hidden_));
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = h.data() + r * hidden_;
    for (int64_t i = 0; i < hidden_; ++i) x[i] = (in[i] - l.in_mean[i]) * l.in_inv_std[i];
    MatVec(l.w1.data(), l.b1.data(), x.data(), mlp_hidden_, hidden_, a.data());
    for (float& v : a) v = std::max(v, 0.0f);
    MatVec(l.w2.data(), l.b2.data(), a.data(), num_experts_, mlp_hidden_,
           scores.data() + r * num_experts_);
  }
}

// ---- file format ----

std::string SerializeMlpPredictor(const MlpPredictor& p) {
  std::string out;
  auto put = [&out](const void* data, size_t n) { out.append(static_cast<const char*>(data), n); };
  auto put_u32 = [&put](uint32_t v) { put(&v, sizeof(v)); };
  auto put_floats = [&put](const std::vector<float>& v) {
    put(v.data(), v.size() * sizeof(float));
  };
  put(kMagic, sizeof(kMagic));
  put_u32(kVersion);
  put_u32(static_cast<uint32_t>(p.stride()));
  put_u32(static_cast<uint32_t>(p.num_layers()));
  put_u32(static_cast<uint32_t>(p.num_experts()));
  put_u32(static_cast<uint32_t>(p.top_k()));
  put_u32(static_cast<uint32_t>(p.mlp_hidden()));
  const uint64_t hidden = static_cast<uint64_t>(p.hidden());
  put(&hidden, sizeof(hidden));
  for (int m = 0; m + p.stride() < p.num_layers(); ++m) {
    const MlpLayerWeights& l = p.layer(m);
    for (const auto* v : {&l.in_mean, &l.in_inv_std, &l.w1, &l.b1, &l.w2, &l.b2}) put_floats(*v);
  }
  const uint64_t sum = Fnv1a64(out);
  put(&sum, sizeof(sum));
  return out;
}

Result<std::unique_ptr<MlpPredictor>> ParseMlpPredictor(std::string_view bytes,
                                                        const std::string& name) {
  auto loss = [&name](const std::string& what) {
    return DataLossError("predictor file " + name + ": " + what +
                         "; it is not a complete file written by `switchyard train-predictor`");
  };
  auto bad = [&name](const std::string& field, uint64_t value, const std::string& expected) {
    return InvalidArgumentError("predictor file " + name + ": field " + field + " is " +
                                std::to_string(value) + "; expected " + expected);
  };
  if (bytes.size() < kHeaderBytes + sizeof(uint64_t)) {
    return loss("truncated: " + std::to_string(bytes.size()) + " bytes, shorter than the " +
                std::to_string(kHeaderBytes + 8) + "-byte header and checksum");
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return loss("field magic is not \"SYPREDMP\"");
  }
  auto u32 = [&bytes](size_t at) {
    uint32_t v;
    std::memcpy(&v, bytes.data() + at, sizeof(v));
    return v;
  };
  const uint32_t version = u32(8), stride = u32(12), layers = u32(16), experts = u32(20),
                 top_k = u32(24), d = u32(28);
  uint64_t hidden;
  std::memcpy(&hidden, bytes.data() + 32, sizeof(hidden));
  if (version != kVersion) return bad("version", version, "1");
  if (stride != 1 && stride != 2) return bad("stride", stride, "1 or 2");
  if (layers <= stride || layers > kMaxLayers) {
    return bad("num_layers", layers, "stride + 1 .. " + std::to_string(kMaxLayers));
  }
  if (experts < 1 || experts > kMaxExperts) {
    return bad("num_experts", experts, "1 .. " + std::to_string(kMaxExperts));
  }
  if (top_k < 1 || top_k > experts) return bad("top_k", top_k, "1 .. num_experts");
  if (d < 1 || d > kMaxMlpHidden) {
    return bad("mlp_hidden", d, "1 .. " + std::to_string(kMaxMlpHidden));
  }
  if (hidden < 1 || hidden > kMaxHidden) {
    return bad("hidden", hidden, "1 .. " + std::to_string(kMaxHidden));
  }
  // Bounded above: at most 4096 * (2^20 * 65536 * ~3) floats < 2^63 bytes.
  const uint64_t per_layer = LayerFloats(hidden, d, experts);
  const uint64_t source_layers = layers - stride;
  const uint64_t expected = kHeaderBytes + source_layers * per_layer * sizeof(float) + 8;
  if (bytes.size() != expected) {
    return loss((bytes.size() < expected ? "truncated: " : "trailing bytes: ") +
                std::to_string(bytes.size()) + " bytes where the header's shape needs " +
                std::to_string(expected));
  }
  uint64_t sum;
  std::memcpy(&sum, bytes.data() + bytes.size() - 8, sizeof(sum));
  if (sum != Fnv1a64(bytes.substr(0, bytes.size() - 8))) {
    return loss("field checksum does not match the contents (corrupt)");
  }
  std::vector<MlpLayerWeights> weights(static_cast<size_t>(source_layers));
  size_t at = kHeaderBytes;
  for (uint64_t m = 0; m < source_layers; ++m) {
    MlpLayerWeights& l = weights[m];
    const std::pair<std::vector<float>*, uint64_t> fields[] = {
        {&l.in_mean, hidden}, {&l.in_inv_std, hidden}, {&l.w1, d * hidden},
        {&l.b1, d},           {&l.w2, experts * d},    {&l.b2, experts}};
    const char* names[] = {"in_mean", "in_inv_std", "w1", "b1", "w2", "b2"};
    for (size_t f = 0; f < 6; ++f) {
      std::vector<float>& v = *fields[f].first;
      v.resize(fields[f].second);
      std::memcpy(v.data(), bytes.data() + at, v.size() * sizeof(float));
      at += v.size() * sizeof(float);
      for (const float x : v) {
        if (!std::isfinite(x)) {
          return InvalidArgumentError("predictor file " + name + ": layer " + std::to_string(m) +
                                      " field " + names[f] + " holds a non-finite value");
        }
      }
    }
  }
  return std::make_unique<MlpPredictor>(static_cast<int>(stride), static_cast<int>(layers),
                                        static_cast<int>(experts), static_cast<int>(top_k),
                                        static_cast<int64_t>(hidden), static_cast<int>(d),
                                        std::move(weights));
}

Status SaveMlpPredictor(const MlpPredictor& predictor, const std::string& path) {
  return WriteFileReplacing(path, SerializeMlpPredictor(predictor))
      .WithContext("predictor file " + path);
}

Result<std::unique_ptr<MlpPredictor>> LoadMlpPredictor(const std::string& path) {
  Result<std::string> bytes = ReadFile(path);
  if (bytes.status().code() == StatusCode::kNotFound) {
    return NotFoundError("predictor file " + path +
                         " does not exist; write one with `switchyard train-predictor`");
  }
  if (!bytes.ok()) return bytes.status().WithContext("predictor file");
  return ParseMlpPredictor(*bytes, path);
}

// ---- training ----
//
// Training goes the way the model's training step goes (launcher/training/trainer_step.cc): the
// forward and backward of runtime layers on a backend (Linear, Relu, CrossEntropy), and the
// update by an optim/ optimizer. The MLP is small, so it trains on a CPU backend over host
// vectors: every tensor below is a view of a vector, and MlpLayerWeights owns the weights.

namespace {

// A host vector as an f32 tensor of `shape` on the CPU (a view: the vector keeps the data).
Tensor View(std::vector<float>& v, Shape shape) {
  SY_CHECK_LE(shape.numel(), static_cast<int64_t>(v.size())) << "view " << shape.ToString();
  return Tensor::Wrap(v.data(), DType::kF32, std::move(shape));
}

// One source layer's MLP, scores = W2 relu(W1 x + b1) + b2, with its gradients and the
// activations of one batch of up to `max_rows` rows.
class MlpLayerTrainer {
 public:
  MlpLayerTrainer(Backend& backend, MlpLayerWeights& w, int64_t hidden, int64_t d, int64_t e, int k,
                  int64_t max_rows)
      : backend_(backend), hidden_(hidden), d_(d), e_(e), k_(k) {
    const std::vector<float>* params[] = {&w.w1, &w.b1, &w.w2, &w.b2};
    for (size_t i = 0; i < grads_.size(); ++i) grads_[i].assign(params[i]->size(), 0.0f);
    l1_ = Linear(View(w.w1, {d, hidden}), View(grads_[0], {d, hidden}), View(w.b1, {d}),
                 View(grads_[1], {d}));
    l2_ =
        Linear(View(w.w2, {e, d}), View(grads_[2], {e, d}), View(w.b2, {e}), View(grads_[3], {e}));
    const auto n = [](int64_t v) { return static_cast<size_t>(v); };
    x_.resize(n(max_rows * hidden));
    for (std::vector<float>* v : {&z_, &act_, &dact_, &dz_}) v->resize(n(max_rows * d));
    for (std::vector<float>* v : {&scores_, &dscores_}) v->resize(n(max_rows * e));
    for (std::vector<float>* v : {&copies_, &dcopies_}) v->resize(n(k * max_rows * e));
    for (std::vector<float>* v : {&losses_, &lse_, &dlosses_}) v->resize(n(k * max_rows));
    targets_.resize(n(k * max_rows));
  }
  // The layers view the trainer's own vectors.
  MlpLayerTrainer(const MlpLayerTrainer&) = delete;
  MlpLayerTrainer& operator=(const MlpLayerTrainer&) = delete;

  // The input of the next Forward: standardised rows [rows, hidden], written by the caller.
  float* x() { return x_.data(); }
  // The gradients of w1, b1, w2 and b2, as the last Backward left them.
  const std::array<std::vector<float>, 4>& grads() const { return grads_; }

  // scores [rows, e] of the rows in x().
  Result<std::span<const float>> Forward(int64_t rows) {
    SY_RETURN_IF_ERROR(l1_.Forward(backend_, View(x_, {rows, hidden_}), View(z_, {rows, d_})));
    backend_.Relu(View(z_, {rows, d_}), View(act_, {rows, d_}));
    SY_RETURN_IF_ERROR(l2_.Forward(backend_, View(act_, {rows, d_}), View(scores_, {rows, e_})));
    backend_.SynchronizeStream(backend_.compute_stream());
    return std::span<const float>(scores_.data(), static_cast<size_t>(rows * e_));
  }

  // After Forward(rows), with targets [rows, k] the gate's choices: a row's loss is the softmax
  // cross-entropy of its scores against the distribution with 1/k on each choice, which is the
  // mean over its k choices of the cross-entropy against that one choice. Overwrites the
  // gradients with those of the batch's mean loss; returns the sum of the rows' losses.
  Result<double> Backward(int64_t rows, std::span<const int32_t> targets) {
    // Block j of `copies` holds every row's scores, scored against the row's j-th choice.
    const int64_t n = k_ * rows;
    const Tensor scores = View(scores_, {rows, e_});
    const Tensor copies = View(copies_, {n, e_});
    for (int j = 0; j < k_; ++j) {
      backend_.CopyAsync(scores, copies.Slice(j * rows, (j + 1) * rows), backend_.compute_stream());
      for (int64_t r = 0; r < rows; ++r) {
        targets_[static_cast<size_t>(j * rows + r)] = targets[static_cast<size_t>(r * k_ + j)];
      }
    }
    const Tensor target_ids = Tensor::Wrap(targets_.data(), DType::kI32, {n});
    const Tensor losses = View(losses_, {n}), lse = View(lse_, {n});
    const Tensor dlosses = View(dlosses_, {n}), dcopies = View(dcopies_, {n, e_});
    const Tensor dscores = View(dscores_, {rows, e_});
    backend_.CrossEntropy(copies, target_ids, losses, lse);
    backend_.Fill(dlosses, 1.0f / static_cast<float>(n));
    backend_.CrossEntropyBackward(copies, target_ids, lse, dlosses, dcopies);
    backend_.Reduce(dcopies.Reshape({k_, rows * e_}), dscores.Reshape({rows * e_}), ReduceOp::kSum,
                    ReduceAxis::kFirst);
    for (std::vector<float>& g : grads_) {
      backend_.Fill(View(g, {static_cast<int64_t>(g.size())}), 0.0f);  // Backward accumulates
    }
    SY_RETURN_IF_ERROR(
        l2_.Backward(backend_, View(act_, {rows, d_}), dscores, View(dact_, {rows, d_}), 0.0f));
    backend_.ReluBackward(View(z_, {rows, d_}), View(dact_, {rows, d_}), View(dz_, {rows, d_}));
    SY_RETURN_IF_ERROR(
        l1_.Backward(backend_, View(x_, {rows, hidden_}), View(dz_, {rows, d_}), Tensor(), 0.0f));
    backend_.SynchronizeStream(backend_.compute_stream());
    double total = 0;
    for (int64_t i = 0; i < n; ++i) total += losses_[static_cast<size_t>(i)];
    return total / k_;
  }

 private:
  Backend& backend_;
  int64_t hidden_, d_, e_;
  int k_;
  Linear l1_, l2_;
  std::array<std::vector<float>, 4> grads_;  // of w1, b1, w2, b2
  std::vector<float> x_, z_, act_, scores_, copies_, losses_, lse_, dlosses_, dcopies_, dscores_,
      dact_, dz_;
  std::vector<int32_t> targets_;
};

// Trains layer `source` on rows `train` (indices into the traces), reports on `heldout`.
Result<MlpLayerWeights> TrainLayer(Backend& backend, const PredictorTraces& traces, int source,
                                   const std::vector<int64_t>& train,
                                   const std::vector<int64_t>& heldout,
                                   const MlpTrainOptions& options,
                                   const std::function<void(const MlpLayerReport&)>& progress,
                                   MlpLayerReport* report) {
  const int64_t hd = traces.hidden;
  const int64_t d = options.mlp_hidden;
  const int64_t e = traces.num_experts;
  const int k = traces.top_k;
  const std::vector<float>& hs = traces.h[static_cast<size_t>(source)];
  const std::vector<int32_t>& ys = traces.experts[static_cast<size_t>(source + options.stride)];
  std::mt19937_64 rng(options.seed * 1000003ull + static_cast<uint64_t>(source));

  MlpLayerWeights w;
  // Input standardisation from the training rows (hidden states of real models have a few
  // large dimensions that would otherwise dominate the first layer).
  w.in_mean.assign(static_cast<size_t>(hd), 0.0f);
  w.in_inv_std.assign(static_cast<size_t>(hd), 1.0f);
  if (!train.empty()) {
    std::vector<double> sum(static_cast<size_t>(hd), 0), sq(static_cast<size_t>(hd), 0);
    for (const int64_t r : train) {
      for (int64_t i = 0; i < hd; ++i) {
        const double x = hs[static_cast<size_t>(r * hd + i)];
        sum[i] += x;
        sq[i] += x * x;
      }
    }
    const double n = static_cast<double>(train.size());
    for (int64_t i = 0; i < hd; ++i) {
      const double mean = sum[i] / n;
      const double var = std::max(sq[i] / n - mean * mean, 0.0);
      w.in_mean[i] = static_cast<float>(mean);
      w.in_inv_std[i] = static_cast<float>(1.0 / std::sqrt(var + 1e-6));
    }
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  w.w1.resize(static_cast<size_t>(d * hd));
  w.b1.assign(static_cast<size_t>(d), 0.0f);
  w.w2.resize(static_cast<size_t>(e * d));
  w.b2.assign(static_cast<size_t>(e), 0.0f);
  const float s1 = std::sqrt(2.0f / static_cast<float>(hd));
  const float s2 = std::sqrt(1.0f / static_cast<float>(d));
  for (float& v : w.w1) v = normal(rng) * s1;
  for (float& v : w.w2) v = normal(rng) * s2;

  const int64_t batch = std::max(options.batch, 1);
  MlpLayerTrainer mlp(backend, w, hd, d, e, k, batch);
  // Standardises rows [begin, end) of `rows` into the trainer's input; returns how many.
  auto load = [&](const std::vector<int64_t>& rows, size_t begin, size_t end) {
    float* x = mlp.x();
    for (size_t b = begin; b < end; ++b) {
      const float* in = hs.data() + rows[b] * hd;
      for (int64_t i = 0; i < hd; ++i) *x++ = (in[i] - w.in_mean[i]) * w.in_inv_std[i];
    }
    return static_cast<int64_t>(end - begin);
  };
  auto accuracy = [&](const std::vector<int64_t>& rows) -> Result<double> {
    if (rows.empty()) return 0.0;
    std::vector<int32_t> targets, predicted;
    for (size_t begin = 0; begin < rows.size(); begin += static_cast<size_t>(batch)) {
      const size_t end = std::min(rows.size(), begin + static_cast<size_t>(batch));
      const int64_t n = load(rows, begin, end);
      SY_ASSIGN_OR_RETURN(std::span<const float> scores, mlp.Forward(n));
      const std::vector<int32_t> top = TopKExperts(scores, n, static_cast<int>(e), k);
      predicted.insert(predicted.end(), top.begin(), top.end());
      for (size_t b = begin; b < end; ++b) {
        targets.insert(targets.end(), ys.begin() + rows[b] * k, ys.begin() + (rows[b] + 1) * k);
      }
    }
    return TopKAccuracy(targets, predicted, static_cast<int64_t>(rows.size()), k);
  };

  // Adam as torch.optim.AdamW, the weights decayed and the biases not.
  OptimizerOptions decayed;
  decayed.kind = OptimizerKind::kAdamW;
  decayed.weight_decay = options.weight_decay;
  OptimizerOptions undecayed = decayed;
  undecayed.weight_decay = 0.0;
  SY_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> weight_optimizer,
                      CreateOptimizer(decayed, nullptr));
  SY_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> bias_optimizer,
                      CreateOptimizer(undecayed, nullptr));
  std::vector<float>* params[4] = {&w.w1, &w.b1, &w.w2, &w.b2};
  std::vector<float> m[4], v[4];
  int64_t steps[4] = {0, 0, 0, 0};
  ParamGroup groups[4];
  for (int i = 0; i < 4; ++i) {
    m[i].assign(params[i]->size(), 0.0f);
    v[i].assign(params[i]->size(), 0.0f);
    groups[i] = ParamGroup{.param = params[i]->data(),
                           .grad = mlp.grads()[static_cast<size_t>(i)].data(),
                           .m = m[i].data(),
                           .v = v[i].data(),
                           .n = params[i]->size(),
                           .step = &steps[i],
                           .compute = ComputeCopy{}};
  }
  const ParamGroup weight_groups[2] = {groups[0], groups[2]};
  const ParamGroup bias_groups[2] = {groups[1], groups[3]};

  report->source = source;
  report->train_rows = static_cast<int64_t>(train.size());
  report->heldout_rows = static_cast<int64_t>(heldout.size());
  std::vector<int64_t> order = train;
  std::vector<int32_t> targets;
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    double epoch_loss = 0;
    for (size_t begin = 0; begin < order.size(); begin += static_cast<size_t>(batch)) {
      const size_t end = std::min(order.size(), begin + static_cast<size_t>(batch));
      const int64_t n = load(order, begin, end);
      targets.clear();
      for (size_t b = begin; b < end; ++b) {
        targets.insert(targets.end(), ys.begin() + order[b] * k, ys.begin() + (order[b] + 1) * k);
      }
      SY_RETURN_IF_ERROR(mlp.Forward(n).status());
      SY_ASSIGN_OR_RETURN(const double loss_sum, mlp.Backward(n, targets));
      epoch_loss += loss_sum;
      weight_optimizer->Step(weight_groups, options.lr);
      bias_optimizer->Step(bias_groups, options.lr);
    }
    epoch_loss /= std::max<double>(1.0, static_cast<double>(order.size()));
    if (epoch == 0) report->first_loss = epoch_loss;
    report->loss = epoch_loss;
    report->epoch = epoch + 1;
    if (progress) {
      const bool last = epoch + 1 == options.epochs;
      report->train_accuracy = 0.0;
      if (last) {
        SY_ASSIGN_OR_RETURN(report->train_accuracy, accuracy(train));
      }
      SY_ASSIGN_OR_RETURN(report->heldout_accuracy, accuracy(heldout));
      progress(*report);
    }
  }
  SY_ASSIGN_OR_RETURN(report->train_accuracy, accuracy(train));
  SY_ASSIGN_OR_RETURN(report->heldout_accuracy, accuracy(heldout));
  return w;
}

}  // namespace

Result<std::unique_ptr<MlpPredictor>> TrainMlpPredictor(
    const PredictorTraces& traces, const MlpTrainOptions& options,
    const std::function<void(const MlpLayerReport&)>& progress,
    std::vector<MlpLayerReport>* reports) {
  if (options.stride != 1 && options.stride != 2) {
    return InvalidArgumentError("--stride " + std::to_string(options.stride) + ": use 1 or 2");
  }
  if (options.mlp_hidden < 1 || options.mlp_hidden > static_cast<int>(kMaxMlpHidden)) {
    return InvalidArgumentError("--hidden " + std::to_string(options.mlp_hidden) +
                                ": use 1 .. 65536");
  }
  if (options.epochs < 1) return InvalidArgumentError("--epochs must be at least 1");
  if (!(options.holdout >= 0.0 && options.holdout < 1.0)) {
    return InvalidArgumentError("holdout must be in [0, 1)");
  }
  if (traces.num_layers <= options.stride) {
    return InvalidArgumentError("the traces have " + std::to_string(traces.num_layers) +
                                " MoE layers; stride " + std::to_string(options.stride) +
                                " needs more");
  }
  if (traces.hidden < 1 || traces.num_experts < 1 || traces.top_k < 1 ||
      traces.top_k > traces.num_experts || static_cast<int>(traces.h.size()) != traces.num_layers ||
      static_cast<int>(traces.experts.size()) != traces.num_layers) {
    return InvalidArgumentError("malformed predictor traces (shape fields)");
  }
  const int64_t rows = traces.rows();
  if (rows < 1) return InvalidArgumentError("no traces recorded: run the model over some prompts");
  for (int m = 0; m < traces.num_layers; ++m) {
    if (static_cast<int64_t>(traces.h[m].size()) != rows * traces.hidden ||
        static_cast<int64_t>(traces.experts[m].size()) != rows * traces.top_k) {
      return InvalidArgumentError("predictor traces: MoE layer " + std::to_string(m) + " has " +
                                  "a different number of rows than layer 0");
    }
    for (const int32_t e : traces.experts[m]) {
      if (e < 0 || e >= traces.num_experts) {
        return InvalidArgumentError("predictor traces: expert id " + std::to_string(e) +
                                    " out of range");
      }
    }
  }
  // One split for every layer: row r is the same token in every layer.
  std::vector<int64_t> all(static_cast<size_t>(rows));
  std::iota(all.begin(), all.end(), 0);
  std::mt19937_64 rng(options.seed);
  std::shuffle(all.begin(), all.end(), rng);
  const int64_t n_heldout =
      std::min(rows - 1, static_cast<int64_t>(std::floor(options.holdout * rows)));
  std::vector<int64_t> heldout(all.begin(), all.begin() + n_heldout);
  std::vector<int64_t> train(all.begin() + n_heldout, all.end());

  SY_ASSIGN_OR_RETURN(std::unique_ptr<Backend> cpu, CreateBackend(Device::Cpu()));
  std::vector<MlpLayerWeights> layers;
  for (int m = 0; m + options.stride < traces.num_layers; ++m) {
    MlpLayerReport report;
    SY_ASSIGN_OR_RETURN(MlpLayerWeights weights,
                        TrainLayer(*cpu, traces, m, train, heldout, options, progress, &report));
    layers.push_back(std::move(weights));
    if (reports != nullptr) reports->push_back(report);
  }
  return std::make_unique<MlpPredictor>(options.stride, traces.num_layers, traces.num_experts,
                                        traces.top_k, traces.hidden, options.mlp_hidden,
                                        std::move(layers));
}

}  // namespace sy::offload
