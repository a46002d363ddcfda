#include "inference/offload/expert_predictor.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>

#include "runtime/core/check.h"
#include "runtime/core/hash.h"
#include "runtime/core/read_file.h"
#include "runtime/model/host_transfer.h"

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
  const std::string bytes = SerializeMlpPredictor(predictor);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("create", tmp, errno);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return ErrnoError("write", tmp, err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return ErrnoError("fsync", tmp, err);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoError("close", tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoError("rename to " + path, tmp, err);
  }
  return Status::Ok();
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

namespace {

struct AdamState {
  std::vector<float> m, v;
  explicit AdamState(size_t n) : m(n, 0.0f), v(n, 0.0f) {}
  void Step(std::vector<float>& w, const std::vector<float>& g, float lr, float wd, int64_t t) {
    constexpr float kB1 = 0.9f, kB2 = 0.999f, kEps = 1e-8f;
    const float c1 = 1.0f - std::pow(kB1, static_cast<float>(t));
    const float c2 = 1.0f - std::pow(kB2, static_cast<float>(t));
    for (size_t i = 0; i < w.size(); ++i) {
      m[i] = kB1 * m[i] + (1 - kB1) * g[i];
      v[i] = kB2 * v[i] + (1 - kB2) * g[i] * g[i];
      w[i] -= lr * ((m[i] / c1) / (std::sqrt(v[i] / c2) + kEps) + wd * w[i]);
    }
  }
};

// Trains layer `source` on rows `train` (indices into the traces), reports on `heldout`.
MlpLayerWeights TrainLayer(const PredictorTraces& traces, int source,
                           const std::vector<int64_t>& train, const std::vector<int64_t>& heldout,
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

  AdamState a_w1(w.w1.size()), a_b1(w.b1.size()), a_w2(w.w2.size()), a_b2(w.b2.size());
  std::vector<float> g_w1(w.w1.size()), g_b1(w.b1.size()), g_w2(w.w2.size()), g_b2(w.b2.size());
  std::vector<float> x(static_cast<size_t>(hd)), z(static_cast<size_t>(d)),
      act(static_cast<size_t>(d)), s(static_cast<size_t>(e)), ds(static_cast<size_t>(e)),
      da(static_cast<size_t>(d));

  // Forward of one row into x, z, act, s; returns the loss and leaves d loss / d scores in ds.
  auto forward = [&](int64_t r) {
    const float* in = hs.data() + r * hd;
    for (int64_t i = 0; i < hd; ++i) x[i] = (in[i] - w.in_mean[i]) * w.in_inv_std[i];
    MatVec(w.w1.data(), w.b1.data(), x.data(), d, hd, z.data());
    for (int64_t j = 0; j < d; ++j) act[j] = std::max(z[j], 0.0f);
    MatVec(w.w2.data(), w.b2.data(), act.data(), e, d, s.data());
    const float mx = *std::max_element(s.begin(), s.end());
    double total = 0;
    for (int64_t i = 0; i < e; ++i) total += std::exp(static_cast<double>(s[i] - mx));
    const double lse = mx + std::log(total);
    double loss = 0;
    for (int64_t i = 0; i < e; ++i) ds[i] = static_cast<float>(std::exp(s[i] - lse));
    for (int j = 0; j < k; ++j) {
      const int32_t t = ys[static_cast<size_t>(r * k + j)];
      loss -= (s[t] - lse) / k;
      ds[t] -= 1.0f / static_cast<float>(k);
    }
    return loss;
  };
  auto accuracy = [&](const std::vector<int64_t>& rows) {
    if (rows.empty()) return 0.0;
    std::vector<int32_t> targets, predicted;
    for (const int64_t r : rows) {
      forward(r);
      const std::vector<int32_t> top = TopKExperts(s, 1, static_cast<int>(e), k);
      predicted.insert(predicted.end(), top.begin(), top.end());
      targets.insert(targets.end(), ys.begin() + r * k, ys.begin() + (r + 1) * k);
    }
    return TopKAccuracy(targets, predicted, static_cast<int64_t>(rows.size()), k);
  };

  report->source = source;
  report->train_rows = static_cast<int64_t>(train.size());
  report->heldout_rows = static_cast<int64_t>(heldout.size());
  std::vector<int64_t> order = train;
  int64_t t = 0;
  const int batch = std::max(options.batch, 1);
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    double epoch_loss = 0;
    for (size_t begin = 0; begin < order.size(); begin += static_cast<size_t>(batch)) {
      const size_t end = std::min(order.size(), begin + static_cast<size_t>(batch));
      std::fill(g_w1.begin(), g_w1.end(), 0.0f);
      std::fill(g_b1.begin(), g_b1.end(), 0.0f);
      std::fill(g_w2.begin(), g_w2.end(), 0.0f);
      std::fill(g_b2.begin(), g_b2.end(), 0.0f);
      const float scale = 1.0f / static_cast<float>(end - begin);
      for (size_t b = begin; b < end; ++b) {
        epoch_loss += forward(order[b]);
        // Backward: ds -> w2, b2, act -> z (relu) -> w1, b1.
        std::fill(da.begin(), da.end(), 0.0f);
        for (int64_t i = 0; i < e; ++i) {
          const float g = ds[i] * scale;
          g_b2[i] += g;
          float* gw = g_w2.data() + i * d;
          const float* wr = w.w2.data() + i * d;
          for (int64_t j = 0; j < d; ++j) {
            gw[j] += g * act[j];
            da[j] += g * wr[j];
          }
        }
        for (int64_t j = 0; j < d; ++j) {
          if (z[j] <= 0.0f) continue;
          const float g = da[j];
          g_b1[j] += g;
          float* gw = g_w1.data() + j * hd;
          for (int64_t i = 0; i < hd; ++i) gw[i] += g * x[i];
        }
      }
      ++t;
      a_w1.Step(w.w1, g_w1, options.lr, options.weight_decay, t);
      a_b1.Step(w.b1, g_b1, options.lr, 0.0f, t);
      a_w2.Step(w.w2, g_w2, options.lr, options.weight_decay, t);
      a_b2.Step(w.b2, g_b2, options.lr, 0.0f, t);
    }
    epoch_loss /= std::max<double>(1.0, static_cast<double>(order.size()));
    if (epoch == 0) report->first_loss = epoch_loss;
    report->loss = epoch_loss;
    report->epoch = epoch + 1;
    if (progress) {
      const bool last = epoch + 1 == options.epochs;
      report->train_accuracy = last ? accuracy(train) : 0.0;
      report->heldout_accuracy = accuracy(heldout);
      progress(*report);
    }
  }
  report->train_accuracy = accuracy(train);
  report->heldout_accuracy = accuracy(heldout);
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

  std::vector<MlpLayerWeights> layers;
  for (int m = 0; m + options.stride < traces.num_layers; ++m) {
    MlpLayerReport report;
    layers.push_back(TrainLayer(traces, m, train, heldout, options, progress, &report));
    if (reports != nullptr) reports->push_back(report);
  }
  return std::make_unique<MlpPredictor>(options.stride, traces.num_layers, traces.num_experts,
                                        traces.top_k, traces.hidden, options.mlp_hidden,
                                        std::move(layers));
}

}  // namespace sy::offload
