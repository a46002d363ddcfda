#include "inference/generate_engine.h"

#include <algorithm>
#include <string>
#include <utility>

#include "runtime/core/check.h"

namespace sy {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

FinishReason FromStop(StopReason reason) {
  switch (reason) {
    case StopReason::kStopToken:
      return FinishReason::kStopToken;
    case StopReason::kMaxTokens:
      return FinishReason::kMaxTokens;
    case StopReason::kNone:
      break;
  }
  SY_CHECK(false) << "FromStop(kNone)";
  return FinishReason::kCancelled;
}

// max_new_tokens 0 (the prompt only) is ours; the sampler's rules want at least one.
SamplerOptions EngineSampling(SamplerOptions sampling) {
  sampling.max_new_tokens = std::max<int64_t>(1, sampling.max_new_tokens);
  return sampling;
}

}  // namespace

GenerateEngine::GenerateEngine(MoeModel& model, ExpertProvider* provider,
                               const EngineOptions& options,
                               std::unique_ptr<KvCacheDecoder> decoder)
    : model_(model),
      provider_(provider),
      options_(options),
      decoder_(std::move(decoder)),
      slots_(static_cast<size_t>(options.max_batch)) {}

Result<std::unique_ptr<GenerateEngine>> GenerateEngine::Create(MoeModel& model,
                                                               ExpertProvider* provider,
                                                               const EngineOptions& options) {
  if (options.max_batch < 1) {
    return InvalidArgumentError("generate: max_batch " + std::to_string(options.max_batch) +
                                " must be >= 1");
  }
  if (options.max_context < 1) {
    return InvalidArgumentError("generate: max_context " + std::to_string(options.max_context) +
                                " must be >= 1 (prompt + generated tokens)");
  }
  SY_ASSIGN_OR_RETURN(
      std::unique_ptr<KvCacheDecoder> decoder,
      KvCacheDecoder::Create(model, options.max_context, options.max_batch, provider));
  return std::unique_ptr<GenerateEngine>(
      new GenerateEngine(model, provider, options, std::move(decoder)));
}

Status GenerateEngine::Check(const GenerateRequest& request) const {
  const ModelConfig& c = model_.config();
  if (request.prompt.empty()) return InvalidArgumentError("generate: the prompt is empty");
  for (const int32_t id : request.prompt) {
    if (id < 0 || id >= c.vocab_size) {
      return InvalidArgumentError("generate: prompt token id " + std::to_string(id) +
                                  " outside [0, vocab_size = " + std::to_string(c.vocab_size) +
                                  ")");
    }
  }
  if (request.sampling.max_new_tokens < 0) {
    return InvalidArgumentError("generate: max_new_tokens " +
                                std::to_string(request.sampling.max_new_tokens) + " must be >= 0");
  }
  SY_RETURN_IF_ERROR(ValidateSamplerOptions(EngineSampling(request.sampling)));
  for (const auto& [id, bias] : request.sampling.logit_bias) {
    if (id >= c.vocab_size) {
      return InvalidArgumentError("generate: logit_bias token id " + std::to_string(id) +
                                  " outside [0, vocab_size = " + std::to_string(c.vocab_size) +
                                  ")");
    }
  }
  const auto prompt = static_cast<int64_t>(request.prompt.size());
  if (prompt + request.sampling.max_new_tokens > options_.max_context) {
    return InvalidArgumentError(
        "generate: the prompt (" + std::to_string(prompt) + " tokens) plus max_new_tokens (" +
        std::to_string(request.sampling.max_new_tokens) + ") exceeds the context of " +
        std::to_string(options_.max_context) + " tokens; shorten the prompt or lower the limit");
  }
  return Status::Ok();
}

Result<int64_t> GenerateEngine::Submit(GenerateRequest request, TokenCallback on_token) {
  SY_RETURN_IF_ERROR(Check(request));
  const SamplerOptions sampling = EngineSampling(request.sampling);
  auto r = std::make_unique<Request>();
  r->id = next_id_++;
  SY_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(sampling, 1));
  SY_ASSIGN_OR_RETURN(StopCondition stop, StopCondition::Create(sampling));
  r->sampler.emplace(std::move(sampler));
  r->sampler->StartSequence(0, request.prompt);  // the repetition penalty sees the prompt
  r->stop.emplace(std::move(stop));
  r->request = std::move(request);
  r->on_token = std::move(on_token);
  r->submitted = Clock::now();
  const int64_t id = r->id;
  waiting_.push_back(std::move(r));
  return id;
}

int64_t GenerateEngine::cached_tokens() const {
  int64_t tokens = 0;
  for (size_t slot = 0; slot < slots_.size(); ++slot) {
    if (slots_[slot] != nullptr) tokens += decoder_->length(static_cast<int>(slot));
  }
  return tokens;
}

int GenerateEngine::running() const {
  return static_cast<int>(
      std::count_if(slots_.begin(), slots_.end(), [](const auto& r) { return r != nullptr; }));
}

Status GenerateEngine::Prefill() {
  const auto vocab = static_cast<size_t>(model_.config().vocab_size);
  for (size_t slot = 0; slot < slots_.size() && !waiting_.empty(); ++slot) {
    if (slots_[slot] != nullptr) continue;
    slots_[slot] = std::move(waiting_.front());
    waiting_.pop_front();
    Request& r = *slots_[slot];
    const int s = static_cast<int>(slot);
    decoder_->ResetSequence(s);
    const auto start = Clock::now();
    Result<std::vector<float>> logits = decoder_->Prefill(s, r.request.prompt);
    stats_.prefill_seconds += SecondsSince(start);
    if (!logits.ok()) {
      Finish(s, FinishReason::kCancelled);
      return logits.status();
    }
    stats_.prompt_tokens += static_cast<int64_t>(r.request.prompt.size());
    if (r.request.prompt_logits != nullptr) *r.request.prompt_logits = *logits;
    if (r.request.sampling.max_new_tokens == 0) {
      r.result.ttft_seconds = SecondsSince(r.submitted);
      Finish(s, FinishReason::kPromptOnly);
      continue;
    }
    Draw(s, std::span<const float>(logits->data() + logits->size() - vocab, vocab));
  }
  return Status::Ok();
}

Status GenerateEngine::Decode() {
  step_slots_.clear();
  step_tokens_.clear();
  for (size_t slot = 0; slot < slots_.size(); ++slot) {
    if (slots_[slot] == nullptr) continue;
    step_slots_.push_back(static_cast<int>(slot));
    step_tokens_.push_back(slots_[slot]->last_token);
  }
  if (step_slots_.empty()) return Status::Ok();
  const auto start = Clock::now();
  Result<std::vector<float>> logits = decoder_->DecodeSequences(step_slots_, step_tokens_);
  stats_.decode_seconds += SecondsSince(start);
  SY_RETURN_IF_ERROR(logits.status());
  ++stats_.decode_steps;
  stats_.decode_tokens += static_cast<int64_t>(step_slots_.size());
  const auto vocab = static_cast<size_t>(model_.config().vocab_size);
  for (size_t i = 0; i < step_slots_.size(); ++i) {
    Draw(step_slots_[i], std::span<const float>(logits->data() + i * vocab, vocab));
  }
  return Status::Ok();
}

Status GenerateEngine::Step() {
  SY_RETURN_IF_ERROR(Prefill());
  return Decode();
}

void GenerateEngine::Draw(int slot, std::span<const float> logits) {
  Request& r = *slots_[static_cast<size_t>(slot)];
  if (r.request.constraint != nullptr) {
    r.masked.assign(logits.begin(), logits.end());
    r.request.constraint->Mask(r.masked);
    logits = r.masked;
  }
  const int32_t token = r.sampler->Sample(0, logits);
  if (r.request.constraint != nullptr) r.request.constraint->Accept(token);
  const StopReason stop = r.stop->Append(token);
  const auto index = static_cast<int64_t>(r.result.tokens.size());
  r.result.tokens.push_back(token);
  if (index == 0) r.result.ttft_seconds = SecondsSince(r.submitted);
  ++stats_.generated_tokens;
  if (r.on_token) {
    const TokenEvent event{
        .request = r.id, .token = token, .index = index, .stop = stop, .logits = logits};
    if (!r.on_token(event)) r.cancelled = true;
  }
  r.last_token = token;
  if (stop != StopReason::kNone) {
    Finish(slot, FromStop(stop));
  } else if (r.cancelled) {
    Finish(slot, FinishReason::kCancelled);
  }
}

void GenerateEngine::Finish(int slot, FinishReason reason) {
  std::unique_ptr<Request>& r = slots_[static_cast<size_t>(slot)];
  r->result.finish = reason;
  finished_.emplace_back(r->id, std::move(r->result));
  ++stats_.requests;
  r.reset();
}

bool GenerateEngine::Cancel(int64_t id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->id != id) continue;
    (*it)->result.finish = FinishReason::kCancelled;
    finished_.emplace_back(id, std::move((*it)->result));
    ++stats_.requests;
    waiting_.erase(it);
    return true;
  }
  for (size_t slot = 0; slot < slots_.size(); ++slot) {
    if (slots_[slot] != nullptr && slots_[slot]->id == id) {
      Finish(static_cast<int>(slot), FinishReason::kCancelled);
      return true;
    }
  }
  return false;
}

std::optional<Generation> GenerateEngine::TakeResult(int64_t id) {
  for (auto it = finished_.begin(); it != finished_.end(); ++it) {
    if (it->first != id) continue;
    Generation g = std::move(it->second);
    finished_.erase(it);
    return g;
  }
  return std::nullopt;
}

Result<Generation> GenerateEngine::Generate(GenerateRequest request, TokenCallback on_token) {
  SY_ASSIGN_OR_RETURN(int64_t id, Submit(std::move(request), std::move(on_token)));
  while (true) {
    if (std::optional<Generation> done = TakeResult(id)) return std::move(*done);
    SY_RETURN_IF_ERROR(Step());
  }
}

Result<std::vector<BeamHypothesis>> GenerateEngine::Beam(std::span<const int32_t> prompt,
                                                         const BeamSearchOptions& options) {
  return BeamSearch(model_, prompt, options, provider_);
}

}  // namespace sy
