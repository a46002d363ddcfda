#include "python/src/model.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "inference/generation_config.h"

namespace sy::python {

Result<std::unique_ptr<Model>> Model::Load(ModelOptions options) {
  if (options.max_batch < 1) {
    return InvalidArgumentError("max_batch=" + std::to_string(options.max_batch) +
                                ": at least 1 sequence");
  }
  if (options.ctx_size != 0 && options.ctx_size < 2) {
    return InvalidArgumentError("ctx_size=" + std::to_string(options.ctx_size) +
                                ": at least 2 tokens (0: the model's own context)");
  }
  SY_RETURN_IF_ERROR(launcher::ParseInferenceFlags(options.flags, &options.inference));
  options.inference.tokenizer = false;  // loaded below when the source has one
  std::unique_ptr<Model> model(new Model());
  SY_ASSIGN_OR_RETURN(model->session_, launcher::InferenceSession::Open(options.inference));
  const std::string& path = options.inference.model_path;
  Result<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(path);
  if (tokenizer.ok()) {
    model->tokenizer_ = std::move(tokenizer).value();
  } else if (tokenizer.status().code() != StatusCode::kNotFound) {
    return tokenizer.status();
  }
  Result<ChatTemplate> chat_template = ChatTemplate::Load(path);
  if (chat_template.ok()) {
    model->chat_template_.emplace(std::move(chat_template).value());
  } else if (chat_template.status().code() != StatusCode::kNotFound) {
    return chat_template.status();
  }
  SY_ASSIGN_OR_RETURN(model->eos_, LoadEosTokenIds(path, model->tokenizer_.get(),
                                                   model->session_->model().config().vocab_size));
  model->context_ =
      launcher::OpenEndedContext(options.ctx_size, model->session_->trained_context());
  SY_ASSIGN_OR_RETURN(std::unique_ptr<GenerateEngine> engine,
                      GenerateEngine::Create(model->session_->model(), &model->session_->provider(),
                                             EngineOptions{.max_batch = options.max_batch,
                                                           .max_context = model->context_}));
  model->engine_ = EngineThread::Start(std::move(engine));
  return model;
}

Model::~Model() { engine_.reset(); }

int64_t Model::vocab_size() const { return session_->model().config().vocab_size; }

std::string Model::Describe() const {
  return session_->Describe() + ", on " + session_->backend().name() + ", context " +
         std::to_string(context_);
}

Result<std::vector<int32_t>> Model::Tokenize(std::string_view text) const {
  if (tokenizer_ == nullptr) {
    return FailedPreconditionError(path() +
                                   " has no tokenizer (neither tokenizer.json nor tokenizer.model, "
                                   "nor a GGUF vocabulary): pass token ids, a list of ints");
  }
  return tokenizer_->Encode(text);
}

Result<std::string> Model::Detokenize(std::span<const int32_t> ids) const {
  if (tokenizer_ == nullptr) {
    return FailedPreconditionError(path() + " has no tokenizer to turn ids into text");
  }
  SY_RETURN_IF_ERROR(CheckIds(ids, "ids"));
  return tokenizer_->Decode(ids);
}

Result<std::string> Model::RenderChat(std::span<const ChatMessageText> messages,
                                      std::string_view kwargs_json) const {
  if (!chat_template_) {
    return FailedPreconditionError(
        path() +
        " has no chat template (tokenizer_config.json's chat_template, chat_template.jinja or a "
        "GGUF's tokenizer.chat_template): use generate() with the prompt text");
  }
  nlohmann::json kwargs = nullptr;
  if (!kwargs_json.empty()) {
    kwargs = nlohmann::json::parse(kwargs_json, nullptr, /*allow_exceptions=*/false);
    if (!kwargs.is_object()) {
      return InvalidArgumentError("chat_template_kwargs must be a dict of JSON values");
    }
  }
  return chat_template_->Render(messages, /*add_generation_prompt=*/true, kwargs);
}

Status Model::CheckIds(std::span<const int32_t> ids, const char* what) const {
  const int64_t vocab = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return InvalidArgumentError(std::string(what) + "[" + std::to_string(i) +
                                  "] = " + std::to_string(ids[i]) +
                                  " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<AnswerStream>> Model::Generate(std::vector<int32_t> prompt,
                                                      SamplerOptions sampling,
                                                      std::vector<std::string> stop,
                                                      bool ignore_eos,
                                                      std::string_view response_format) {
  if (prompt.empty()) return InvalidArgumentError("the prompt is empty");
  std::shared_ptr<GrammarConstraint> constraint;
  if (!response_format.empty()) {
    SY_ASSIGN_OR_RETURN(constraint, Constraint(response_format, ignore_eos));
  }
  SY_RETURN_IF_ERROR(CheckIds(prompt, "prompt"));
  const auto prompt_len = static_cast<int64_t>(prompt.size());
  if (prompt_len >= context_) {
    return InvalidArgumentError("the prompt holds " + std::to_string(prompt_len) +
                                " tokens, which fills the context of " + std::to_string(context_) +
                                ": load the model with a larger ctx_size");
  }
  if (sampling.max_new_tokens < 0) {
    sampling.max_new_tokens = context_ - prompt_len;
  } else if (prompt_len + sampling.max_new_tokens > context_) {
    return InvalidArgumentError("max_tokens=" + std::to_string(sampling.max_new_tokens) +
                                " and the prompt's " + std::to_string(prompt_len) +
                                " tokens exceed the context of " + std::to_string(context_) +
                                ": ask for at most " + std::to_string(context_ - prompt_len) +
                                ", or load the model with a larger ctx_size");
  }
  if (!ignore_eos) {
    sampling.stop_tokens.insert(sampling.stop_tokens.end(), eos_.begin(), eos_.end());
  }
  std::vector<int32_t> stop_tokens = sampling.stop_tokens;
  GenerateRequest request;
  request.prompt = std::move(prompt);
  request.sampling = std::move(sampling);
  request.constraint = std::move(constraint);
  SY_ASSIGN_OR_RETURN(std::shared_ptr<RequestHandle> handle, engine_->Submit(std::move(request)));
  return std::make_unique<AnswerStream>(std::move(handle), tokenizer_.get(), std::move(stop),
                                        std::move(stop_tokens));
}

Result<std::shared_ptr<GrammarConstraint>> Model::Constraint(std::string_view response_format,
                                                             bool ignore_eos) {
  const nlohmann::ordered_json format =
      nlohmann::ordered_json::parse(response_format, nullptr, /*allow_exceptions=*/false);
  SY_ASSIGN_OR_RETURN(std::shared_ptr<const Grammar> grammar, Grammar::ForResponseFormat(format));
  if (grammar == nullptr) return std::shared_ptr<GrammarConstraint>();
  if (tokenizer_ == nullptr) {
    return FailedPreconditionError("response_format constrains text, and " + path() +
                                   " has no tokenizer");
  }
  if (ignore_eos || eos_.empty()) {
    return InvalidArgumentError(
        "response_format ends the answer at the model's end-of-sequence token: " +
        std::string(ignore_eos ? "ignore_eos turns it off" : path() + " names none"));
  }
  SY_ASSIGN_OR_RETURN(std::shared_ptr<const ConstraintVocabulary> vocabulary,
                      vocabulary_.Get(*tokenizer_, vocab_size()));
  return std::make_shared<GrammarConstraint>(std::move(grammar), std::move(vocabulary), eos_);
}

Result<std::vector<float>> Model::Logits(std::vector<int32_t> ids) {
  if (ids.empty()) return InvalidArgumentError("no token ids");
  SY_RETURN_IF_ERROR(CheckIds(ids, "ids"));
  if (static_cast<int64_t>(ids.size()) > context_) {
    return InvalidArgumentError(std::to_string(ids.size()) + " ids exceed the context of " +
                                std::to_string(context_) +
                                ": load the model with a larger ctx_size");
  }
  std::vector<float> logits;
  GenerateRequest request;
  request.prompt = std::move(ids);
  request.sampling.temperature = 0.0f;
  request.sampling.max_new_tokens = 0;  // the prompt only
  request.prompt_logits = &logits;      // written on the engine thread, read after it finished
  SY_ASSIGN_OR_RETURN(std::shared_ptr<RequestHandle> handle, engine_->Submit(std::move(request)));
  RequestUpdate update;
  while (!update.finished) update = handle->Next(std::chrono::milliseconds(1000));
  SY_RETURN_IF_ERROR(update.status);
  return logits;
}

Result<QualityReport> Model::Perplexity(std::vector<int32_t> ids, const QualityOptions& options) {
  SY_RETURN_IF_ERROR(CheckIds(ids, "ids"));
  Result<QualityReport> report = InternalError("the engine thread did not run the measurement");
  SY_RETURN_IF_ERROR(engine_->Call(
      [&](GenerateEngine& engine) { report = MeasureQuality(engine, nullptr, ids, options); }));
  return report;
}

}  // namespace sy::python
