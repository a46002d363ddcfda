#include "inference/perplexity.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/core/check.h"

namespace sy {
namespace {

// log-softmax of one row, in double.
void LogSoftmax(std::span<const float> row, std::vector<double>* out) {
  out->resize(row.size());
  double max = -INFINITY;
  for (float v : row) max = std::max(max, static_cast<double>(v));
  double sum = 0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - max);
  const double log_sum = max + std::log(sum);
  for (size_t i = 0; i < row.size(); ++i) (*out)[i] = static_cast<double>(row[i]) - log_sum;
}

int64_t Argmax(std::span<const float> row) {
  return std::max_element(row.begin(), row.end()) - row.begin();
}

double Ratio(double a, int64_t b) { return b > 0 ? a / static_cast<double>(b) : 0.0; }

}  // namespace

double QualityReport::perplexity() const { return std::exp(Ratio(nll_sum, scored)); }
double QualityReport::reference_perplexity() const {
  return std::exp(Ratio(reference_nll_sum, scored));
}
double QualityReport::mean_kl() const { return Ratio(kl_sum, scored); }
double QualityReport::top1_agreement() const {
  return Ratio(static_cast<double>(top1_agree), scored);
}

void ScoreChunk(std::span<const float> logits, std::span<const float> reference_logits,
                int64_t vocab, std::span<const int32_t> chunk, int64_t first,
                QualityReport* report) {
  const auto n = static_cast<int64_t>(chunk.size());
  SY_CHECK(static_cast<int64_t>(logits.size()) == n * vocab) << "logits of another shape";
  SY_CHECK(reference_logits.empty() || reference_logits.size() == logits.size())
      << "reference logits of another shape";
  std::vector<double> log_p, log_q;
  for (int64_t j = std::max<int64_t>(0, first); j + 1 < n; ++j) {
    std::span<const float> row = logits.subspan(j * vocab, vocab);
    LogSoftmax(row, &log_p);
    const int32_t next = chunk[j + 1];
    report->nll_sum -= log_p[next];
    ++report->scored;
    if (reference_logits.empty()) continue;
    std::span<const float> reference_row = reference_logits.subspan(j * vocab, vocab);
    LogSoftmax(reference_row, &log_q);
    report->reference_nll_sum -= log_q[next];
    double kl = 0;
    for (int64_t v = 0; v < vocab; ++v) kl += std::exp(log_q[v]) * (log_q[v] - log_p[v]);
    kl = std::max(0.0, kl);  // rounding can take a zero divergence just below 0
    report->kl_sum += kl;
    report->kl_max = std::max(report->kl_max, kl);
    if (Argmax(row) == Argmax(reference_row)) ++report->top1_agree;
  }
}

Result<QualityReport> MeasureQuality(GenerateEngine& model, GenerateEngine* reference,
                                     std::span<const int32_t> tokens, const QualityOptions& options,
                                     const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t context = options.context;
  if (context < 2) {
    return InvalidArgumentError("perplexity: the context is " + std::to_string(context) +
                                " tokens; it must be at least 2");
  }
  for (GenerateEngine* engine : {&model, reference}) {
    if (engine != nullptr && context > engine->options().max_context) {
      return InvalidArgumentError("perplexity: the context (" + std::to_string(context) +
                                  " tokens) is longer than the engine's max_context (" +
                                  std::to_string(engine->options().max_context) + ")");
    }
  }
  const int64_t vocab = model.model().config().vocab_size;
  if (reference != nullptr && reference->model().config().vocab_size != vocab) {
    return InvalidArgumentError("perplexity: the model's vocabulary has " + std::to_string(vocab) +
                                " tokens, the reference's " +
                                std::to_string(reference->model().config().vocab_size) +
                                "; compare two versions of one model");
  }
  int64_t chunks = static_cast<int64_t>(tokens.size()) / context;
  if (chunks == 0) {
    return InvalidArgumentError("perplexity: the text holds " + std::to_string(tokens.size()) +
                                " tokens, less than one chunk of " + std::to_string(context) +
                                "; give a longer text or a smaller --context");
  }
  if (options.max_chunks > 0) chunks = std::min(chunks, options.max_chunks);
  QualityReport report;
  report.has_reference = reference != nullptr;
  std::vector<float> logits, reference_logits;
  for (int64_t c = 0; c < chunks; ++c) {
    std::span<const int32_t> chunk = tokens.subspan(c * context, context);
    GenerateRequest request;
    request.prompt.assign(chunk.begin(), chunk.end());
    request.sampling.max_new_tokens = 0;
    request.prompt_logits = &logits;
    SY_RETURN_IF_ERROR(model.Generate(request).status());
    if (reference != nullptr) {
      request.prompt_logits = &reference_logits;
      SY_RETURN_IF_ERROR(reference->Generate(request).status());
    }
    ScoreChunk(
        logits,
        reference != nullptr ? std::span<const float>(reference_logits) : std::span<const float>(),
        vocab, chunk, context / 2, &report);
    ++report.chunks;
    if (progress) progress(c + 1, chunks);
  }
  return report;
}

}  // namespace sy
