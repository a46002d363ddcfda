// `switchyard perplexity`: a model's perplexity on a text, and with --reference its agreement with
// another version of the same model (KL divergence, top-1 agreement), as llama.cpp's perplexity
// tool reports them (inference/perplexity.h). The way to judge a quantized or bf16 model against
// its f32 source:
//
//   switchyard perplexity --model model-q8_0.gguf --reference model-dir --text wiki.txt
//   switchyard perplexity --model DIR --dtype bf16 --reference DIR --ids ids.txt --context 256
//
// The model (and the reference) open as for `generate` (any source, device, policy, --threads);
// the reference is loaded in f32 unless --reference-dtype says otherwise. --text is encoded with
// the model's tokenizer; --ids reads token ids separated by commas or white space. Prints one
// line per figure on stdout (or one JSON object with --json) and progress on stderr.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "inference/generate_engine.h"
#include "inference/perplexity.h"
#include "inference/token_ids.h"
#include "launcher/command.h"
#include "launcher/inference_session.h"
#include "runtime/core/progress.h"
#include "runtime/core/read_file.h"

namespace sy::launcher {
namespace {

class PerplexityCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    AddInferenceOptions(app, &options_, &flags_);
    app.add_option("--reference", reference_path_,
                   "The model to compare against (another version of --model: its f32 source, "
                   "say): adds the KL divergence and the top-1 agreement");
    app.add_option("--reference-dtype", reference_dtype_,
                   "Weight dtype of the reference: f32, bf16, f16 (default f32)");
    auto* text =
        app.add_option("--text", text_path_, "A text file, encoded with the model's tokenizer");
    auto* ids = app.add_option("--ids", ids_path_,
                               "A file of token ids separated by commas or white space");
    text->excludes(ids);
    ids->excludes(text);
    app.add_option("--context", quality_.context,
                   "Tokens per chunk; the second half of each is scored (default 128)")
        ->check(IntegerRange(2, 1 << 20));
    app.add_option("--chunks", quality_.max_chunks,
                   "Score at most this many chunks (default 0: the whole text)")
        ->check(IntegerRange(0, 1 << 30));
    AddJsonOptions(app, &json_);
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Status RunStatus() {
    // Every flag first, before anything is loaded.
    SY_RETURN_IF_ERROR(ParseInferenceFlags(flags_, &options_));
    InferenceOptions reference_options = options_;
    SY_ASSIGN_OR_RETURN(reference_options.weight_dtype, ParseDType(reference_dtype_));
    reference_options.model_path = reference_path_;
    reference_options.expert_dtype.reset();  // the reference as its file stores it
    if (text_path_.empty() && ids_path_.empty()) {
      return InvalidArgumentError(
          "pass --text FILE (encoded with the model's tokenizer) or --ids "
          "FILE (token ids)");
    }
    std::vector<int32_t> tokens;
    if (!ids_path_.empty()) {
      SY_ASSIGN_OR_RETURN(std::string ids_text, ReadFile(ids_path_));
      SY_ASSIGN_OR_RETURN(tokens, ParseTokenIds(ids_text, "--ids " + ids_path_));
    }
    options_.tokenizer = !text_path_.empty();
    SY_ASSIGN_OR_RETURN(std::unique_ptr<InferenceSession> session,
                        InferenceSession::Open(options_));
    std::fprintf(stderr, "loaded %s: %s\n", session->path().c_str(), session->Describe().c_str());
    if (!text_path_.empty()) {
      SY_ASSIGN_OR_RETURN(tokens, session->EncodeTextFile(text_path_, "--text"));
    }
    const EngineOptions engine_options{.max_batch = 1, .max_context = quality_.context};
    SY_ASSIGN_OR_RETURN(
        std::unique_ptr<GenerateEngine> engine,
        GenerateEngine::Create(session->model(), &session->provider(), engine_options));
    std::unique_ptr<InferenceSession> reference_session;
    std::unique_ptr<GenerateEngine> reference;
    if (!reference_path_.empty()) {
      SY_ASSIGN_OR_RETURN(reference_session, InferenceSession::Open(reference_options));
      std::fprintf(stderr, "reference %s: %s\n", reference_session->path().c_str(),
                   reference_session->Describe().c_str());
      SY_ASSIGN_OR_RETURN(reference,
                          GenerateEngine::Create(reference_session->model(),
                                                 &reference_session->provider(), engine_options));
    }
    ProgressLine progress(stderr, "scoring chunks");
    Result<QualityReport> measured =
        MeasureQuality(*engine, reference.get(), tokens, quality_,
                       [&progress](int64_t done, int64_t n) { progress.Update(done, n); });
    progress.Finish();
    SY_ASSIGN_OR_RETURN(QualityReport report, std::move(measured));
    SY_ASSIGN_OR_RETURN(const bool printed, EmitJson(json_, Json(report).dump()));
    if (!printed) Print(report);
    return Status::Ok();
  }

  nlohmann::json Json(const QualityReport& r) const {
    nlohmann::json out = {
        {"chunks", r.chunks},
        {"context", quality_.context},
        {"scored_tokens", r.scored},
        {"perplexity", r.perplexity()},
        {"mean_nll", r.scored > 0 ? r.nll_sum / static_cast<double>(r.scored) : 0.0}};
    if (r.has_reference) {
      out["reference_perplexity"] = r.reference_perplexity();
      out["mean_kl"] = r.mean_kl();
      out["max_kl"] = r.kl_max;
      out["top1_agreement"] = r.top1_agreement();
    }
    return out;
  }

  void Print(const QualityReport& r) const {
    std::printf("perplexity %.6f over %lld tokens (%lld chunks of %lld, second halves scored)\n",
                r.perplexity(), static_cast<long long>(r.scored), static_cast<long long>(r.chunks),
                static_cast<long long>(quality_.context));
    if (r.has_reference) {
      std::printf("reference perplexity %.6f\n", r.reference_perplexity());
      std::printf("KL divergence from the reference: mean %.6g, max %.6g nats\n", r.mean_kl(),
                  r.kl_max);
      std::printf("top-1 agreement with the reference: %.2f%%\n", 100.0 * r.top1_agreement());
    }
  }

  InferenceOptions options_;
  InferenceFlags flags_;
  std::string reference_path_;
  std::string reference_dtype_ = "f32";
  std::string text_path_;
  std::string ids_path_;
  QualityOptions quality_;
  JsonOutput json_;
};

}  // namespace

SY_REGISTER_COMMAND("perplexity",
                    "Perplexity on a text, and KL divergence and top-1 agreement with a reference "
                    "model (llama.cpp's perplexity tool)",
                    PerplexityCommand);

}  // namespace sy::launcher
