// `switchyard profile`: how often each routed expert is chosen on a text, as the expert profile
// that the static placements read (inference/offload/expert_profile.h; Fiddler's placement by
// popularity, the `static` device cache, hot-cold's initial hot set: `--profile FILE` of
// `generate`, `serve` and `bench infer`).
//
//   switchyard profile --model DIR|GGUF|CKPT (--text FILE | --ids FILE | --prompt-ids 1,2,3)
//                      --out profile.json [--context N] [--device cpu] [--dtype auto]
//
// The model runs resident over the tokens, --context tokens at a time (each chunk a fresh
// prefill, as `perplexity` scores); every MoE layer's gate choices are counted
// (ExpertProfileRecorder). --text is encoded with the model's tokenizer; --ids reads token ids
// separated by commas or white space. Progress goes to stderr; at the end, per MoE layer, the
// share of the token-slots its busiest and idlest experts took. The file is written atomically.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "inference/generate_engine.h"
#include "inference/offload/expert_profile_recorder.h"
#include "inference/token_ids.h"
#include "launcher/command.h"
#include "launcher/inference_session.h"
#include "runtime/core/file_creation.h"
#include "runtime/core/progress.h"
#include "runtime/core/read_file.h"

namespace sy::launcher {
namespace {

class ProfileCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--model", options_.model_path,
                   "Hugging Face model directory, GGUF file or switchyard training checkpoint")
        ->required();
    auto* text =
        app.add_option("--text", text_path_, "A text file, encoded with the model's tokenizer");
    auto* ids = app.add_option("--ids", ids_path_,
                               "A file of token ids separated by commas or white space");
    auto* prompt = app.add_option("--prompt-ids", prompt_ids_, "Token ids, comma-separated");
    text->excludes(ids)->excludes(prompt);
    ids->excludes(text)->excludes(prompt);
    prompt->excludes(text)->excludes(ids);
    app.add_option("--out", out_, "Profile file to write (JSON, atomically)")->required();
    app.add_option("--context", context_,
                   "Tokens per prefill; longer inputs run in chunks of this many (default 512)")
        ->check(IntegerRange(1, 1 << 24));
    app.add_option("--device", options_.device, "cpu, sim or cuda:N (default cpu)");
    AddThreadsOption(app, &options_.threads);
    app.add_option("--dtype", dtype_,
                   "Weight dtype: auto (the model's own), f32, bf16 or f16 (default auto)");
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Result<std::vector<int32_t>> TokensWithoutTokenizer() const {
    if (!prompt_ids_.empty()) return ParseTokenIds(prompt_ids_, "--prompt-ids");
    SY_ASSIGN_OR_RETURN(std::string ids_text, ReadFile(ids_path_));
    return ParseTokenIds(ids_text, "--ids " + ids_path_);
  }

  Status RunStatus() {
    if (text_path_.empty() && ids_path_.empty() && prompt_ids_.empty()) {
      return InvalidArgumentError(
          "pass --text FILE (encoded with the model's tokenizer), --ids FILE or --prompt-ids "
          "1,2,3: the tokens to profile on");
    }
    std::vector<int32_t> tokens;
    if (text_path_.empty()) {
      SY_ASSIGN_OR_RETURN(tokens, TokensWithoutTokenizer());
    }
    SY_ASSIGN_OR_RETURN(options_.weight_dtype, WeightDTypeFlag(dtype_, options_.model_path));
    options_.tokenizer = !text_path_.empty();
    auto owned = std::make_unique<offload::ExpertProfileRecorder>();
    offload::ExpertProfileRecorder& recorder = *owned;
    SY_ASSIGN_OR_RETURN(std::unique_ptr<InferenceSession> session,
                        InferenceSession::Open(options_, std::move(owned)));
    std::fprintf(stderr, "loaded %s: %s\n", session->path().c_str(), session->Describe().c_str());
    if (!text_path_.empty()) {
      SY_ASSIGN_OR_RETURN(tokens, session->EncodeTextFile(text_path_, "--text"));
    }
    if (tokens.empty()) return InvalidArgumentError("no tokens to profile on: the input is empty");
    if (session->model().config().NumMoeLayers() == 0) {
      return InvalidArgumentError(session->path() + " has no MoE layer: no expert to profile");
    }
    SY_ASSIGN_OR_RETURN(std::unique_ptr<GenerateEngine> engine,
                        GenerateEngine::Create(session->model(), &recorder,
                                               {.max_batch = 1, .max_context = context_ + 1}));
    const int64_t n = static_cast<int64_t>(tokens.size());
    ProgressLine progress(stderr, "profiling tokens");
    for (int64_t begin = 0; begin < n; begin += context_) {
      GenerateRequest request;
      request.prompt.assign(tokens.begin() + begin,
                            tokens.begin() + std::min<int64_t>(n, begin + context_));
      request.sampling.temperature = 0.0f;
      request.sampling.max_new_tokens = 1;  // the prefill alone
      SY_RETURN_IF_ERROR(engine->Generate(std::move(request)).status());
      progress.Update(std::min<int64_t>(n, begin + context_), n);
    }
    progress.Finish();
    const offload::ExpertProfile& profile = recorder.profile();
    SY_RETURN_IF_ERROR(WriteFileReplacing(out_, profile.ToJson()).WithContext("--out"));
    for (int m = 0; m < profile.num_layers; ++m) {
      const std::vector<int64_t>& counts = profile.counts[static_cast<size_t>(m)];
      int64_t total = 0;
      for (const int64_t c : counts) total += c;
      const auto [idlest, busiest] = std::minmax_element(counts.begin(), counts.end());
      const double fair = 1.0 / static_cast<double>(counts.size());
      std::printf(
          "MoE layer %d: %lld token-slots; busiest expert %lld (%.1f%%), idlest %lld (%.1f%%); "
          "uniform %.1f%%\n",
          m, static_cast<long long>(total), static_cast<long long>(busiest - counts.begin()),
          100.0 * static_cast<double>(*busiest) / static_cast<double>(std::max<int64_t>(1, total)),
          static_cast<long long>(idlest - counts.begin()),
          100.0 * static_cast<double>(*idlest) / static_cast<double>(std::max<int64_t>(1, total)),
          100.0 * fair);
    }
    std::printf("wrote %s (%lld tokens, %d MoE layers x %d experts)\n", out_.c_str(),
                static_cast<long long>(n), profile.num_layers, profile.num_experts);
    return Status::Ok();
  }

  InferenceOptions options_;
  std::string dtype_ = "auto";
  std::string text_path_;
  std::string ids_path_;
  std::string prompt_ids_;
  std::string out_;
  int64_t context_ = 512;
};

}  // namespace

SY_REGISTER_COMMAND("profile",
                    "Count how often each expert is chosen on a text: the expert profile that "
                    "--profile places experts by",
                    ProfileCommand);

}  // namespace sy::launcher
