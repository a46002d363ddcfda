// `switchyard generate`: opens a model (launcher/inference_session.h: a Hugging Face directory or
// a Switchyard training checkpoint) and runs one request through the generate engine
// (inference/generate_engine.h).
//
//   switchyard generate -m|--model DIR|CKPT --prompt-ids 1,2,3 | -p|--prompt "text" |
//                       -f|--file FILE|-
//                       [-n|--max-tokens N -c|--ctx-size N --temperature T --top-k K --top-p P
//                        -s|--seed S
//                        --stop-tokens 2,7 | --beam W] [--dump-logits FILE
//                        --dump-decode-logits FILE] [--device cpu --dtype bf16 -t|--threads N
//                        --policy NAME ...] [--verbose]
//
// Tokens go to stdout as they are drawn (ids, or text with --prompt), ending with a newline; the
// load line, warnings and the statistics go to stderr, after the token line is finished.
// Without -n/--max-tokens, generation runs until the model's end-of-sequence token
// (generation_config.json's eos_token_id, as `serve` reads it) or the context is full: the
// model's (max_position_embeddings, or the trained seq_len) up to 4096 tokens, or -c/--ctx-size.
// With -n it makes exactly that many tokens, unless --stop-tokens end it first, and stops at the
// context too: a larger --max-tokens is lowered to it, with a note, so the KV cache stays that
// size.
// --dump-logits writes the prompt's logits: FILE holds raw little-endian f32, row-major
// [prompt_len, vocab], and FILE.json holds {"shape": [prompt_len, vocab]}.
// --dump-decode-logits writes the logits each generated token was drawn from, likewise.
// Every flag is checked before the model is loaded.
#include <fmt/printf.h>
#include <spdlog/spdlog.h>
#include <algorithm>
#include <climits>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "inference/generate_engine.h"
#include "inference/generation_config.h"
#include "inference/token_ids.h"
#include "inference/tokenizer.h"
#include "launcher/command.h"
#include "launcher/inference_session.h"
#include "runtime/core/file_creation.h"
#include "runtime/core/read_file.h"
#include "storage/hdf5/hdf5_error_detail.h"

namespace sy::launcher {
namespace {

// FILE: raw little-endian f32 rows of `vocab`; FILE.json: {"shape": [rows, vocab]}.
Status WriteLogits(const std::string& file, const std::vector<float>& logits, int64_t vocab) {
  SY_RETURN_IF_ERROR(
      WriteFileReplacing(file, std::string_view(reinterpret_cast<const char*>(logits.data()),
                                                logits.size() * sizeof(float))));
  return WriteFileReplacing(
      file + ".json", "{\"shape\": [" + std::to_string(logits.size() / static_cast<size_t>(vocab)) +
                          ", " + std::to_string(vocab) + "]}\n");
}

class GenerateCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    AddInferenceOptions(app, &options_, &flags_);
    auto* ids = app.add_option("--prompt-ids", prompt_ids_, "Prompt token ids, comma-separated");
    auto* text = app.add_option("-p,--prompt", prompt_,
                                "Prompt text, encoded with the model directory's tokenizer.json "
                                "or tokenizer.model; the answer is streamed as text");
    auto* file = app.add_option("-f,--file", prompt_file_,
                                "Read the prompt text from this file (- for standard input)");
    ids->excludes(text)->excludes(file);
    text->excludes(ids)->excludes(file);
    file->excludes(ids)->excludes(text);
    app.add_option("--dump-logits", dump_logits_,
                   "Write the prompt's logits: FILE (raw f32 [prompt_len, vocab]) and FILE.json");
    app.add_option("--dump-decode-logits", dump_decode_logits_,
                   "Write the logits each generated token was chosen from: FILE (raw f32 "
                   "[generated, vocab]) and FILE.json");
    app.add_option("-n,--max-tokens", max_tokens_,
                   "Generate up to this many tokens; 0 runs the prompt only (default: until the "
                   "model's end-of-sequence token, or the context is full)")
        ->check(IntegerRange(0, 1 << 24));
    AddSamplingOptions(app, &sampler_);
    app.add_option("-c,--ctx-size", ctx_size_,
                   "Tokens of context, prompt + answer (default 0: the model's own context; "
                   "without --max-tokens, at most 4096 of it)")
        ->check(IntegerRange(0, 1 << 24));
    app.add_option("--beam", beam_,
                   "Beam search of this width instead of sampling: prints the best hypothesis, "
                   "and every hypothesis with its log-probability on stderr (default 0 = off)")
        ->check(IntegerRange(0, 1024));
    app.add_option("--stop-tokens", stop_tokens_, "Token ids that end generation, comma-separated");
    app.add_flag("--verbose", verbose_,
                 "Print the full model config and the device on load, and HDF5's whole error "
                 "report with an error from a checkpoint file");
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Status RunStatus() {
    SetHdf5VerboseErrors(verbose_);
    // Every flag first, before anything is loaded or computed (or the model even looked for).
    SamplerOptions check = sampler_;
    check.max_new_tokens = 1;
    SY_RETURN_IF_ERROR(ValidateSamplerOptions(check));
    SY_RETURN_IF_ERROR(ParseInferenceFlags(flags_, &options_));
    if (!prompt_file_.empty()) {
      if (prompt_file_ == "-") {
        prompt_.assign(std::istreambuf_iterator<char>(std::cin), {});
      } else {
        SY_ASSIGN_OR_RETURN(prompt_, ReadFile(prompt_file_, size_t{64} << 20, "a prompt"));
      }
      if (prompt_.empty()) return InvalidArgumentError("--file " + prompt_file_ + " is empty");
    }
    if (prompt_.empty() && prompt_ids_.empty()) {
      return InvalidArgumentError("pass --prompt \"text\", --file FILE or --prompt-ids 1,2,3");
    }
    std::vector<int32_t> ids;
    if (!prompt_ids_.empty()) {
      SY_ASSIGN_OR_RETURN(ids, ParseTokenIds(prompt_ids_, "--prompt-ids"));
    }
    GenerateRequest request;
    request.sampling = sampler_;
    request.sampling.max_new_tokens = max_tokens_;
    if (!stop_tokens_.empty()) {
      SY_ASSIGN_OR_RETURN(request.sampling.stop_tokens,
                          ParseTokenIds(stop_tokens_, "--stop-tokens"));
    }

    options_.tokenizer = !prompt_.empty();
    SY_ASSIGN_OR_RETURN(std::unique_ptr<InferenceSession> session,
                        InferenceSession::Open(options_));
    std::fprintf(stderr, "loaded %s: %s\n", session->path().c_str(), session->Describe().c_str());
    if (verbose_) {
      std::fprintf(stderr, "config: %s\ndevice: %s\n", session->model().config().ToString().c_str(),
                   session->backend().name().c_str());
    }
    const Tokenizer* tokenizer = session->tokenizer();
    if (tokenizer != nullptr) {
      Result<std::vector<int32_t>> encoded = tokenizer->Encode(prompt_);
      if (!encoded.ok()) return encoded.status().WithContext("--prompt");
      ids = std::move(encoded).value();
      if (ids.empty()) return InvalidArgumentError("--prompt encodes to no tokens");
    }
    const auto prompt_len = static_cast<int64_t>(ids.size());
    const int64_t trained = session->trained_context();
    if (trained > 0 && prompt_len > trained) {
      spdlog::warn(
          "{}", fmt::sprintf("the prompt holds %lld tokens, past the %lld the model was made for; "
                             "quality past it is not what the model was trained for",
                             static_cast<long long>(prompt_len), static_cast<long long>(trained)));
    }
    // --ctx-size: the context this run allows, in place of the model's own.
    if (ctx_size_ > 0) {
      if (prompt_len >= ctx_size_) {
        return InvalidArgumentError("the prompt holds " + std::to_string(prompt_len) +
                                    " tokens; --ctx-size " + std::to_string(ctx_size_) +
                                    " leaves no room to generate: raise --ctx-size");
      }
      if (trained > 0 && ctx_size_ > trained) {
        spdlog::warn("{}",
                     fmt::sprintf("--ctx-size %d is past the %lld tokens the model was made for; "
                                  "quality past it is not what the model was trained for",
                                  ctx_size_, static_cast<long long>(trained)));
      }
    }
    const int64_t limit = ctx_size_ > 0 ? ctx_size_ : trained;
    const std::string limit_name = ctx_size_ > 0 ? "--ctx-size" : "the model's context";
    if (max_tokens_ < 0) {
      // No --max-tokens: until the model's end of sequence, or the context is full.
      const int64_t context = OpenEndedContext(ctx_size_, trained);
      // A prompt that already fills it leaves nothing to generate: its logits only (a note).
      if (prompt_len >= context) {
        std::fprintf(stderr,
                     "note: the prompt holds %lld tokens and fills the context of %lld: nothing "
                     "to generate (-c/--ctx-size or -n/--max-tokens asks for more)\n",
                     static_cast<long long>(prompt_len), static_cast<long long>(context));
      }
      max_tokens_ = static_cast<int>(std::max<int64_t>(0, context - prompt_len));
      request.sampling.max_new_tokens = max_tokens_;
      Result<std::vector<int32_t>> eos =
          LoadEosTokenIds(options_.model_path, tokenizer, session->model().config().vocab_size);
      if (eos.ok()) {
        request.sampling.stop_tokens.insert(request.sampling.stop_tokens.end(), eos->begin(),
                                            eos->end());
      } else {
        spdlog::warn("{}", fmt::sprintf("%s; generating until the context is full",
                                        eos.status().message().c_str()));
      }
    }
    // The KV cache is sized for prompt + --max-tokens: bounded by the context (one token past a
    // prompt that already fills the model's).
    if (limit > 0 && prompt_len + max_tokens_ > limit) {
      const int64_t allowed = std::max<int64_t>(1, limit - prompt_len);
      if (allowed < max_tokens_) {
        std::fprintf(stderr,
                     "note: generating at most %lld %s, not --max-tokens %d: %s is %lld tokens "
                     "and the prompt holds %lld\n",
                     static_cast<long long>(allowed), allowed == 1 ? "token" : "tokens",
                     max_tokens_, limit_name.c_str(), static_cast<long long>(limit),
                     static_cast<long long>(prompt_len));
        max_tokens_ = static_cast<int>(allowed);
        request.sampling.max_new_tokens = max_tokens_;
      }
    }
    const int64_t context = prompt_len + max_tokens_;
    SY_ASSIGN_OR_RETURN(
        std::unique_ptr<GenerateEngine> engine,
        GenerateEngine::Create(session->model(), &session->provider(),
                               EngineOptions{.max_batch = 1, .max_context = context}));
    const Status status = beam_ > 0 ? RunBeam(*engine, ids, request, tokenizer)
                                    : RunGreedyOrSampled(*engine, ids, request, tokenizer);
    const ExpertProviderStats& stats = session->provider().stats();
    std::fprintf(stderr,
                 "experts (%s): %lld layer runs, %lld experts run, %lld rows, %.1f MiB host to "
                 "device, %.3f s stalled\n",
                 session->provider().name().c_str(), static_cast<long long>(stats.layer_runs),
                 static_cast<long long>(stats.experts_run), static_cast<long long>(stats.rows),
                 static_cast<double>(stats.bytes_host_to_device) / (1 << 20), stats.stall_seconds);
    return status;
  }

  Status RunGreedyOrSampled(GenerateEngine& engine, const std::vector<int32_t>& ids,
                            GenerateRequest request, const Tokenizer* tokenizer) {
    const int64_t vocab = engine.model().config().vocab_size;
    std::vector<float> prompt_logits, decode_logits;
    request.prompt = ids;
    if (!dump_logits_.empty()) request.prompt_logits = &prompt_logits;
    std::optional<TextStreamer> streamer;
    if (tokenizer != nullptr) streamer.emplace(*tokenizer);
    Status stream_status = Status::Ok();
    Result<Generation> generation = engine.Generate(request, [&](const TokenEvent& e) {
      if (!dump_decode_logits_.empty()) {
        decode_logits.insert(decode_logits.end(), e.logits.begin(), e.logits.end());
      }
      if (streamer) {
        Result<std::string> piece = streamer->Append(e.token);
        if (!piece.ok()) {
          stream_status = piece.status();
          return false;
        }
        std::fputs(piece->c_str(), stdout);
      } else {
        std::printf("%s%d", e.index > 0 ? "," : "", e.token);
      }
      std::fflush(stdout);
      return true;
    });
    // Finish the token line before anything else is printed.
    if (max_tokens_ > 0) {
      if (streamer) std::fputs(streamer->Finish().c_str(), stdout);
      std::fputs("\n", stdout);
      std::fflush(stdout);
    }
    SY_RETURN_IF_ERROR(generation.status());
    SY_RETURN_IF_ERROR(stream_status);
    if (!dump_logits_.empty()) SY_RETURN_IF_ERROR(WriteLogits(dump_logits_, prompt_logits, vocab));
    if (!dump_decode_logits_.empty()) {
      SY_RETURN_IF_ERROR(WriteLogits(dump_decode_logits_, decode_logits, vocab));
    }
    const GenerateStats& s = engine.stats();
    if (max_tokens_ > 0) {
      std::fprintf(
          stderr,
          "prefill: %lld tokens, %.1f tokens/s; decode: %lld tokens, %.1f tokens/s; "
          "TTFT %.1f ms\n",
          static_cast<long long>(s.prompt_tokens),
          static_cast<double>(s.prompt_tokens) / s.prefill_seconds,
          static_cast<long long>(s.decode_tokens),
          s.decode_seconds > 0 ? static_cast<double>(s.decode_tokens) / s.decode_seconds : 0.0,
          generation->ttft_seconds * 1e3);
    }
    return Status::Ok();
  }

  Status RunBeam(GenerateEngine& engine, const std::vector<int32_t>& ids,
                 const GenerateRequest& request, const Tokenizer* tokenizer) {
    if (!dump_logits_.empty()) {
      GenerateRequest prompt_only = request;
      prompt_only.prompt = ids;
      prompt_only.sampling.max_new_tokens = 0;
      std::vector<float> logits;
      prompt_only.prompt_logits = &logits;
      SY_RETURN_IF_ERROR(engine.Generate(prompt_only).status());
      SY_RETURN_IF_ERROR(WriteLogits(dump_logits_, logits, engine.model().config().vocab_size));
    }
    BeamSearchOptions options;
    options.width = beam_;
    options.max_new_tokens = max_tokens_;
    options.stop_tokens = request.sampling.stop_tokens;
    const auto start = std::chrono::steady_clock::now();
    SY_ASSIGN_OR_RETURN(std::vector<BeamHypothesis> beams, engine.Beam(ids, options));
    const double total_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::vector<std::string> texts;
    for (const BeamHypothesis& beam : beams) {
      std::string text;
      for (size_t k = 0; k < beam.tokens.size(); ++k) {
        text += (k > 0 ? "," : "") + std::to_string(beam.tokens[k]);
      }
      if (tokenizer != nullptr) {
        SY_ASSIGN_OR_RETURN(text, tokenizer->Decode(beam.tokens));
      }
      texts.push_back(text);
    }
    if (!texts.empty()) std::printf("%s\n", texts[0].c_str());
    std::fflush(stdout);
    for (size_t i = 0; i < beams.size(); ++i) {
      std::fprintf(stderr, "beam %zu: log_prob %.4f%s: %s\n", i, beams[i].log_prob,
                   beams[i].finished ? " (stopped)" : "", texts[i].c_str());
    }
    std::fprintf(stderr, "beam search: width %d, %d tokens max, %.1f ms\n", beam_, max_tokens_,
                 total_s * 1e3);
    return Status::Ok();
  }

  InferenceOptions options_;
  InferenceFlags flags_;
  std::string prompt_ids_;
  std::string prompt_;
  std::string prompt_file_;  // -f: the prompt text from a file, or - for stdin
  int ctx_size_ = 0;         // -c: prompt + answer at most; 0: the model's context
  std::string dump_logits_;
  std::string dump_decode_logits_;
  int max_tokens_ = -1;  // -1: until the end of sequence or the context is full
  int beam_ = 0;
  std::string stop_tokens_;
  bool verbose_ = false;
  SamplerOptions sampler_ = GreedySampling();
};

}  // namespace

SY_REGISTER_COMMAND("generate",
                    "Generate from a MoE model (Hugging Face or a switchyard checkpoint)",
                    GenerateCommand);

}  // namespace sy::launcher
