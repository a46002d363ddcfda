// `switchyard generate`: loads a Hugging Face MoE model directory (inference/model_loader.h) or a
// Switchyard training checkpoint (launcher/training/trained_model.h: a step-*.h5 file, or the run's
// checkpoint.dir, whose latest step is taken) and runs it on token ids.
//
//   switchyard generate --model DIR|CKPT --prompt-ids 1,2,3 --dump-logits FILE [--device cpu]
//                       [--dtype f32|bf16|f16] [--max-tokens N] [--temperature T --top-k K
//                       --top-p P --seed S --stop-tokens 2,7] [--beam W] [--policy NAME]
//                       [--pregate] [--device-slots N --device-cache lru --profile F
//                       --predictor F --predictor-stride 1|2]
//
// --dump-logits writes the logits of every prompt position: FILE holds raw little-endian f32,
// row-major [prompt_len, vocab], and FILE.json holds {"shape": [prompt_len, vocab]}.
// --prompt "text" encodes the prompt with the directory's tokenizer (inference/tokenizer.h) and
// streams the answer as text; --prompt-ids takes ids and prints ids.
// --max-tokens N appends up to N tokens and prints their ids, greedy by default (--temperature 0),
// sampled with inference/sampler.h otherwise; a --stop-tokens id ends it early. Each step
// decodes one token over a KV cache (inference/kv_cache_decoder.h). Prints prefill and decode
// tokens/s and the time to the first token on stderr.
// --policy NAME picks the expert provider (inference/expert_policy.h; default resident): every
// forward, the prompt's logits included, computes its experts through it; its counters (experts
// run, rows, bytes moved host -> device, stall) go to stderr at the end. With a policy other than
// resident, a Hugging Face checkpoint's experts are loaded into pinned host memory, not onto the
// device (LoadOptions::experts_on_host).
// --pregate loads a Hugging Face checkpoint as a pre-gated model (LoadOptions::pregate), as the
// `pregated` policy needs.
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "inference/beam_search.h"
#include "inference/expert_policy.h"
#include "inference/kv_cache_decoder.h"
#include "inference/model_loader.h"
#include "inference/sampler.h"
#include "inference/tokenizer.h"
#include "launcher/command.h"
#include "launcher/training/trained_model.h"
#include "runtime/backend/backend.h"

namespace sy::launcher {
namespace {

Result<std::vector<int32_t>> ParseIds(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t comma = text.find(',', begin);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(begin, comma - begin);
    char* end = nullptr;
    errno = 0;
    const long v = item.empty() ? -1 : std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno != 0 || v < 0 || v > INT32_MAX) {
      return InvalidArgumentError(flag + ": \"" + item +
                                  "\" is not a token id; pass non-negative integers separated by "
                                  "commas, e.g. " +
                                  flag + " 1,2,3");
    }
    ids.push_back(static_cast<int32_t>(v));
    begin = comma + 1;
  }
  return ids;
}

class GenerateCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--model", model_dir_,
                   "Hugging Face model directory (config.json + safetensors), or a switchyard "
                   "training checkpoint: a step-*.h5 file or its checkpoint.dir (latest step)")
        ->required();
    auto* ids = app.add_option("--prompt-ids", prompt_ids_, "Prompt token ids, comma-separated");
    auto* text = app.add_option("--prompt", prompt_,
                                "Prompt text, encoded with the model directory's tokenizer.json "
                                "or tokenizer.model; the answer is streamed as text");
    ids->excludes(text);
    text->excludes(ids);
    app.add_option("--dump-logits", dump_logits_,
                   "Write the prompt's logits: FILE (raw f32 [prompt_len, vocab]) and FILE.json");
    app.add_option("--device", device_, "cpu, sim or cuda:N (default cpu)");
    app.add_option("--dtype", dtype_, "Weight dtype on the device: f32, bf16, f16 (default f32)");
    app.add_option("--dump-decode-logits", dump_decode_logits_,
                   "Write the logits each generated token was chosen from: FILE (raw f32 "
                   "[generated, vocab]) and FILE.json");
    app.add_option("--max-tokens", max_tokens_, "Generate up to this many tokens (default 0)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--temperature", sampler_.temperature, "0 = greedy (default 0)");
    app.add_option("--top-k", sampler_.top_k, "Keep the k most likely tokens (default 0 = off)");
    app.add_option("--top-p", sampler_.top_p, "Nucleus mass to keep (default 1 = off)");
    app.add_option("--seed", sampler_.seed, "Sampling seed (default 0)");
    app.add_option("--beam", beam_,
                   "Beam search of this width instead of sampling: prints the best hypothesis, "
                   "and every hypothesis with its log-probability on stderr (default 0 = off)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--stop-tokens", stop_tokens_, "Token ids that end generation, comma-separated");
    app.add_option("--policy", policy_,
                   "Expert policy: where the experts live and how they reach the compute (" +
                       ExpertPolicyList() + "; default resident)");
    app.add_option("--device-slots", policy_options_.device_slots,
                   "Device expert slots for an offload policy (default: the policy's own)");
    app.add_option("--device-cache", policy_options_.device_cache,
                   "Device cache of the slots: none, lru, lfu, static (default: the policy's)");
    app.add_option("--profile", policy_options_.profile,
                   "Expert popularity profile (JSON) for static placements");
    app.add_option("--predictor", policy_options_.predictor,
                   "predictive: a file from `switchyard train-predictor` (default: skip-gate)");
    app.add_option("--predictor-stride", policy_options_.predictor_stride,
                   "predictive: predict 1 or 2 MoE layers ahead (default 1)");
    app.add_flag("--pregate", pregate_,
                 "Load a Hugging Face checkpoint as a pre-gated model (MoE layer m's pre-gate = "
                 "layer m+1's gate), as the pregated policy needs");
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Status RunStatus() {
    std::unique_ptr<Tokenizer> tokenizer;
    std::vector<int32_t> ids;
    if (!prompt_.empty()) {
      SY_ASSIGN_OR_RETURN(tokenizer, LoadTokenizer(model_dir_));
      SY_ASSIGN_OR_RETURN(ids, tokenizer->Encode(prompt_));
      if (ids.empty()) return InvalidArgumentError("--prompt encodes to no tokens");
    } else if (!prompt_ids_.empty()) {
      SY_ASSIGN_OR_RETURN(ids, ParseIds(prompt_ids_, "--prompt-ids"));
    } else {
      return InvalidArgumentError("pass --prompt \"text\" or --prompt-ids 1,2,3");
    }
    SY_ASSIGN_OR_RETURN(Device device, ParseDevice(device_));
    SY_ASSIGN_OR_RETURN(DType dtype, ParseDType(dtype_));
    SY_ASSIGN_OR_RETURN(auto backend, CreateBackend(device));
    // After the backend, before the model: destroyed after the model, which points at it, and
    // before the backend, whose memory its expert weights hold.
    SY_ASSIGN_OR_RETURN(std::unique_ptr<ExpertProvider> provider,
                        MakeExpertProvider(policy_, policy_options_));
    std::unique_ptr<MoeModel> owned;
    if (IsTrainCheckpointPath(model_dir_)) {
      if (pregate_) {
        return InvalidArgumentError("--pregate converts a Hugging Face checkpoint; " + model_dir_ +
                                    " is a Switchyard checkpoint, whose model.pregate is set when "
                                    "it is trained");
      }
      SY_ASSIGN_OR_RETURN(TrainedModel trained, LoadTrainedModel(*backend, model_dir_, dtype));
      owned = std::move(trained.model);
      std::fprintf(stderr, "loaded switchyard checkpoint %s (step %lld): %s\n",
                   trained.path.c_str(), static_cast<long long>(trained.step),
                   owned->config().ToString().c_str());
    } else {
      LoadOptions options;
      options.weight_dtype = dtype;
      options.pregate = pregate_;
      // An offload policy gets the experts in pinned host memory; they never occupy the device
      // outside its slots.
      options.experts_on_host = policy_ != "resident";
      SY_ASSIGN_OR_RETURN(LoadedModel loaded, LoadHfModel(*backend, model_dir_, options));
      if (loaded.host_experts != nullptr) provider->set_host_experts(loaded.host_experts);
      owned = std::move(loaded.model);
      std::fprintf(stderr, "loaded %s: %s\n",
                   std::string(HfFamilyModelType(loaded.hf.family)).c_str(),
                   owned->config().ToString().c_str());
    }
    MoeModel& model = *owned;
    SY_RETURN_IF_ERROR(provider->Install(model));
    const Status status = Generate(model, *provider, ids, tokenizer.get());
    const ExpertProviderStats& stats = provider->stats();
    std::fprintf(stderr,
                 "experts (%s): %lld layer runs, %lld experts run, %lld rows, %.1f MiB host to "
                 "device, %.3f s stalled\n",
                 provider->name().c_str(), static_cast<long long>(stats.layer_runs),
                 static_cast<long long>(stats.experts_run), static_cast<long long>(stats.rows),
                 static_cast<double>(stats.bytes_host_to_device) / (1 << 20), stats.stall_seconds);
    return status;
  }

  Status Generate(MoeModel& model, ExpertProvider& provider, const std::vector<int32_t>& ids,
                  const Tokenizer* tokenizer) {
    const int64_t vocab = model.config().vocab_size;
    SY_ASSIGN_OR_RETURN(std::vector<float> logits, Logits(model, provider, ids));
    if (!dump_logits_.empty()) SY_RETURN_IF_ERROR(WriteLogits(dump_logits_, logits, vocab));
    if (max_tokens_ == 0) return Status::Ok();
    SamplerOptions sampling = sampler_;
    sampling.max_new_tokens = max_tokens_;
    if (!stop_tokens_.empty()) {
      SY_ASSIGN_OR_RETURN(sampling.stop_tokens, ParseIds(stop_tokens_, "--stop-tokens"));
    }
    if (beam_ > 0) return RunBeam(model, provider, ids, sampling.stop_tokens, tokenizer);
    SY_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(sampling, 1));
    SY_ASSIGN_OR_RETURN(StopCondition stop, StopCondition::Create(sampling));
    SY_ASSIGN_OR_RETURN(
        auto decoder, KvCacheDecoder::Create(model, static_cast<int64_t>(ids.size()) + max_tokens_,
                                             1, &provider));
    std::optional<TextStreamer> streamer;
    if (tokenizer) streamer.emplace(*tokenizer);
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    SY_ASSIGN_OR_RETURN(std::vector<float> step, decoder->Append(ids));
    const double prefill_s = std::chrono::duration<double>(Clock::now() - start).count();
    size_t row = ids.size() - 1;
    std::vector<float> decode_logits;
    int generated = 0;
    double ttft_s = 0;
    while (true) {
      const std::span<const float> last(step.data() + row * static_cast<size_t>(vocab),
                                        static_cast<size_t>(vocab));
      const int32_t token = sampler.Sample(0, last);
      decode_logits.insert(decode_logits.end(), last.begin(), last.end());
      if (generated == 0) ttft_s = std::chrono::duration<double>(Clock::now() - start).count();
      if (streamer) {
        SY_ASSIGN_OR_RETURN(std::string piece, streamer->Append(token));
        std::fputs(piece.c_str(), stdout);
      } else {
        std::printf("%s%d", generated > 0 ? "," : "", token);
      }
      std::fflush(stdout);
      ++generated;
      if (stop.Append(token) != StopReason::kNone) break;
      SY_ASSIGN_OR_RETURN(step, decoder->Append(std::span<const int32_t>(&token, 1)));
      row = 0;
    }
    const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (!dump_decode_logits_.empty()) {
      SY_RETURN_IF_ERROR(WriteLogits(dump_decode_logits_, decode_logits, vocab));
    }
    if (streamer) std::fputs(streamer->Finish().c_str(), stdout);
    std::printf("\n");
    std::fprintf(stderr,
                 "prefill: %zu tokens, %.1f tokens/s; decode: %d tokens, %.1f tokens/s; "
                 "TTFT %.1f ms\n",
                 ids.size(), static_cast<double>(ids.size()) / prefill_s, generated - 1,
                 generated > 1 ? (generated - 1) / (total_s - ttft_s) : 0.0, ttft_s * 1e3);
    return Status::Ok();
  }

  Status RunBeam(MoeModel& model, ExpertProvider& provider, const std::vector<int32_t>& ids,
                 const std::vector<int32_t>& stop_tokens, const Tokenizer* tokenizer) {
    BeamSearchOptions options;
    options.width = beam_;
    options.max_new_tokens = max_tokens_;
    options.stop_tokens = stop_tokens;
    const auto start = std::chrono::steady_clock::now();
    SY_ASSIGN_OR_RETURN(std::vector<BeamHypothesis> beams,
                        BeamSearch(model, ids, options, &provider));
    const double total_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (size_t i = 0; i < beams.size(); ++i) {
      std::string text;
      for (size_t k = 0; k < beams[i].tokens.size(); ++k) {
        text += (k > 0 ? "," : "") + std::to_string(beams[i].tokens[k]);
      }
      if (tokenizer != nullptr) {
        SY_ASSIGN_OR_RETURN(text, tokenizer->Decode(beams[i].tokens));
      }
      if (i == 0) std::printf("%s\n", text.c_str());
      std::fprintf(stderr, "beam %zu: log_prob %.4f%s: %s\n", i, beams[i].log_prob,
                   beams[i].finished ? " (stopped)" : "", text.c_str());
    }
    std::fprintf(stderr, "beam search: width %d, %d tokens max, %.1f ms\n", beam_, max_tokens_,
                 total_s * 1e3);
    return Status::Ok();
  }

  // FILE: raw little-endian f32 rows of `vocab`; FILE.json: {"shape": [rows, vocab]}.
  static Status WriteLogits(const std::string& file, const std::vector<float>& logits,
                            int64_t vocab) {
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(logits.data()),
              static_cast<std::streamsize>(logits.size() * sizeof(float)));
    out.close();
    if (!out) return IOError("write " + file + " failed");
    std::ofstream meta(file + ".json");
    meta << "{\"shape\": [" << logits.size() / static_cast<size_t>(vocab) << ", " << vocab
         << "]}\n";
    meta.close();
    if (!meta) return IOError("write " + file + ".json failed");
    return Status::Ok();
  }

  // Logits of every position, f32 [T, vocab] in host memory (one prefill step of `provider`).
  static Result<std::vector<float>> Logits(MoeModel& model, ExpertProvider& provider,
                                           const std::vector<int32_t>& ids) {
    std::vector<int32_t> tokens = ids;
    const int64_t t = static_cast<int64_t>(tokens.size());
    Tensor host_tokens = Tensor::Wrap(tokens.data(), DType::kI32, Shape{1, t});
    Backend& backend = model.backend();
    SY_RETURN_IF_ERROR(provider.BeginStep(backend, ExpertStep{.num_tokens = t, .prefill = true}));
    Result<LossReport> report = model.Forward(host_tokens, Tensor());
    SY_RETURN_IF_ERROR(provider.EndStep(backend));
    SY_RETURN_IF_ERROR(report.status());
    const Tensor& dev = model.logits();
    std::vector<float> out(static_cast<size_t>(dev.numel()));
    backend.CopyAsync(dev, Tensor::Wrap(out.data(), DType::kF32, dev.shape()),
                      backend.compute_stream());
    backend.SynchronizeStream(backend.compute_stream());
    return out;
  }

  std::string model_dir_;
  std::string prompt_ids_;
  std::string prompt_;
  std::string dump_logits_;
  std::string dump_decode_logits_;
  std::string device_ = "cpu";
  std::string dtype_ = "f32";
  int max_tokens_ = 0;
  int beam_ = 0;
  std::string stop_tokens_;
  std::string policy_ = "resident";
  bool pregate_ = false;
  ExpertPolicyOptions policy_options_;
  SamplerOptions sampler_ = [] {
    SamplerOptions o;
    o.temperature = 0.0f;  // greedy unless asked
    return o;
  }();
};

}  // namespace

SY_REGISTER_COMMAND("generate", "Run a Hugging Face MoE model on token ids (logits, greedy)",
                    GenerateCommand);

}  // namespace sy::launcher
