#include "launcher/serving/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <thread>
#include <utility>

#include "launcher/serving/answer_stream.h"
#include "launcher/serving/client_connection.h"
#include "launcher/serving/openai_request.h"
#include "launcher/serving/openai_response.h"

namespace sy::serving {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kJson = "application/json";
// How long an HTTP thread waits for tokens before it looks at its connection again, and how long
// a streaming connection may stay silent before a comment line goes out (so that a client that
// left is noticed while its request waits for a slot).
constexpr milliseconds kPoll(250);
constexpr milliseconds kKeepAlive(1000);

int64_t UnixNow() { return static_cast<int64_t>(std::time(nullptr)); }

uint64_t RandomSeed() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

int HttpCode(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kAlreadyExists:
    case StatusCode::kResourceExhausted:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kUnimplemented:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    case StatusCode::kIOError:
    case StatusCode::kDataLoss:
    case StatusCode::kInternal:
      return 500;
  }
  return 500;
}

}  // namespace

struct Server::Prepared {
  Endpoint endpoint = Endpoint::kCompletion;
  GenerateRequest request;
  SamplingParams params;
  int64_t prompt_tokens = 0;
};

Server::Server(ServedModel model, EngineThread& engine, ServerOptions options)
    : model_(std::move(model)),
      engine_(engine),
      options_(std::move(options)),
      http_(std::make_unique<httplib::Server>()),
      started_(UnixNow()) {
  const int threads =
      options_.http_threads > 0 ? options_.http_threads : 4 * engine_.options().max_batch + 16;
  http_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  http_->set_payload_max_length(kMaxBodyBytes);
  // httplib's own options, and the listening socket noted for Bind (the last one made is the one
  // that bound).
  http_->set_socket_options([this](int sock) {
    httplib::default_socket_options(sock);
    listen_socket_ = sock;
  });
  http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Completions(req, res, /*chat=*/false);
  });
  http_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Completions(req, res, /*chat=*/true);
  });
  http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(ModelsResponse(model_.name, started_), kJson);
  });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining_.load()) {
      res.status = 503;
      res.set_content("{\"status\":\"shutting down\"}", kJson);
    } else {
      res.set_content("{\"status\":\"ok\"}", kJson);
    }
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    EngineSnapshot snapshot;
    const Status called = engine_.Call([&](GenerateEngine& e) { snapshot = Snapshot(e); });
    if (!called.ok()) {
      Error(res, 503, called.message());
      return;
    }
    snapshot.queued = engine_.queued();
    res.set_content(metrics_.Render(snapshot), "text/plain; version=0.0.4");
  });
  // Routes that do not exist, bodies over the limit: an OpenAI error body instead of an empty one,
  // and a count in /metrics (the handlers count their own answers).
  http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    // Every answer of a handler has a body and is counted already.
    if (!res.body.empty()) return;
    metrics_.RequestStarted();
    metrics_.RequestFinished(req.path == "/v1/completions"        ? "completions"
                             : req.path == "/v1/chat/completions" ? "chat_completions"
                                                                  : "other",
                             res.status, -1.0);
    const std::string message =
        res.status == 404 ? "no route " + req.method + " " + req.path
        : res.status == 413
            ? "the request body is larger than " + std::to_string(kMaxBodyBytes) + " bytes"
            : "the request failed (HTTP " + std::to_string(res.status) + ")";
    res.set_content(
        ErrorResponse(message, res.status >= 500 ? "server_error" : "invalid_request_error"),
        kJson);
  });
}

Server::~Server() = default;

Status Server::Bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
  } else {
    port_ = http_->bind_to_port(options_.host, options_.port) ? options_.port : -1;
  }
  // The kernel's queue of connections not yet accepted: cpp-httplib (Debian's, compiled) listens
  // with 5, which reset some of 64 clients' connections under load (issue 46, finding 5). A second
  // listen() on the socket raises it to SOMAXCONN (the kernel's net.core.somaxconn bounds it).
  if (port_ >= 0 && listen_socket_ >= 0) ::listen(listen_socket_, SOMAXCONN);
  if (port_ < 0) {
    return UnavailableError("cannot listen on " + options_.host + ":" +
                            std::to_string(options_.port) +
                            " (in use, or not an address of this machine); pick another --port "
                            "or --host");
  }
  return Status::Ok();
}

Status Server::Serve() {
  const bool listened = http_->listen_after_bind();
  served_ = true;
  if (!listened) {
    return IOError("the listening socket on " + options_.host + ":" + std::to_string(port_) +
                   " failed");
  }
  return Status::Ok();
}

void Server::Shutdown() {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(options_.drain_seconds * 1000));
  bool cut = false;
  {
    MutexLock lock(&mu_);
    draining_ = true;
    // The requests in flight run to their end, until the deadline.
    while (active_ != 0) {
      if (idle_.WaitUntil(&mu_, deadline)) {
        cut = active_ != 0;
        break;
      }
    }
  }
  http_->stop();  // no new connections
  // Every connection is closed, whatever its client does (a trickled header, an idle keep-alive,
  // an answer cut at the deadline): httplib's threads then end, and Serve returns. Repeated until
  // it does, for connections accepted just before the listener closed.
  int closed = 0;
  while (!served_.load()) {
    closed += ClientConnection::ShutdownAll(port_);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (cut || closed > 0) {
    std::fprintf(stderr, "drain: %s; closed %d connection%s that remained (--drain-seconds %g)\n",
                 cut ? "requests still running at the deadline were cut" : "every request done",
                 closed, closed == 1 ? "" : "s", options_.drain_seconds);
  }
  engine_.Drain();  // quick now: every handler has cancelled or finished its request
}

void Server::Leave() {
  MutexLock lock(&mu_);
  if (--active_ == 0) idle_.NotifyAll();
}

void Server::Error(httplib::Response& res, int code, const std::string& message) {
  res.status = code;
  const char* type = code >= 500 ? "server_error" : "invalid_request_error";
  res.set_content(ErrorResponse(message, type, code == 404 ? "model_not_found" : ""), kJson);
}

Result<Server::Prepared> Server::Prepare(const std::string& body, bool chat, int* code) {
  *code = 400;
  Prepared p;
  p.endpoint = chat ? Endpoint::kChat : Endpoint::kCompletion;
  std::string model_name;
  std::vector<int32_t> prompt;
  std::optional<std::string> text;
  std::vector<ChatMessageText> messages;
  if (chat) {
    SY_ASSIGN_OR_RETURN(ChatRequest r, ParseChatRequest(body));
    model_name = std::move(r.model);
    p.params = std::move(r.params);
    for (ChatMessage& m : r.messages) {
      messages.push_back(ChatMessageText{std::move(m.role), std::move(m.content)});
    }
  } else {
    SY_ASSIGN_OR_RETURN(CompletionRequest r, ParseCompletionRequest(body));
    model_name = std::move(r.model);
    p.params = std::move(r.params);
    text = std::move(r.prompt_text);
    prompt = std::move(r.prompt_ids);
  }
  if (!model_name.empty() && model_name != model_.name && model_name != model_.path) {
    *code = 404;
    return NotFoundError("the model '" + model_name + "' does not exist; this server serves '" +
                         model_.name + "'");
  }
  if (chat) {
    if (model_.chat_template == nullptr) return InvalidArgumentError(model_.no_chat_template);
    SY_ASSIGN_OR_RETURN(std::string rendered,
                        model_.chat_template->Render(messages, /*add_generation_prompt=*/true));
    text = std::move(rendered);
  }
  if (text.has_value()) {
    if (model_.tokenizer == nullptr) {
      return InvalidArgumentError("the model '" + model_.name +
                                  "' has no tokenizer; send 'prompt' as an array of token ids");
    }
    SY_ASSIGN_OR_RETURN(prompt, model_.tokenizer->Encode(*text));
  }
  if (!p.params.stop.empty() && model_.tokenizer == nullptr) {
    return InvalidArgumentError("'stop' strings need a tokenizer, which the model '" + model_.name +
                                "' lacks; use 'stop_token_ids'");
  }
  if (prompt.empty()) return InvalidArgumentError("the prompt is empty");
  const auto n = static_cast<int64_t>(prompt.size());
  if (n >= model_.context) {
    return InvalidArgumentError("the prompt has " + std::to_string(n) +
                                " tokens; this server's context is " +
                                std::to_string(model_.context) + " tokens per request (" +
                                model_.context_why + "), which leaves no room for an answer");
  }
  const int64_t room = model_.context - n;
  const int64_t max_tokens =
      p.params.max_tokens.value_or(chat ? room : std::min<int64_t>(16, room));
  if (max_tokens > room) {
    return InvalidArgumentError("this server's context is " + std::to_string(model_.context) +
                                " tokens per request (" + model_.context_why + "); you requested " +
                                std::to_string(n + max_tokens) + " tokens (" + std::to_string(n) +
                                " in the prompt, " + std::to_string(max_tokens) +
                                " for the answer); lower max_tokens or shorten the prompt");
  }
  p.prompt_tokens = n;
  p.request.prompt = std::move(prompt);
  SamplerOptions& s = p.request.sampling;
  s.temperature = p.params.temperature;
  s.top_k = p.params.top_k;
  s.top_p = p.params.top_p;
  s.seed = p.params.seed.value_or(RandomSeed());
  s.max_new_tokens = max_tokens;
  s.stop_tokens = p.params.stop_token_ids;
  if (!p.params.ignore_eos) {
    s.stop_tokens.insert(s.stop_tokens.end(), model_.eos_token_ids.begin(),
                         model_.eos_token_ids.end());
  }
  return p;
}

void Server::Completions(const httplib::Request& req, httplib::Response& res, bool chat) {
  const std::string endpoint = chat ? "chat_completions" : "completions";
  {
    MutexLock lock(&mu_);
    if (draining_.load()) {
      Error(res, 503, "the server is shutting down");
      return;
    }
    ++active_;
  }
  metrics_.RequestStarted();
  int code = 400;
  // The body is JSON: a Content-Type that says otherwise (text/plain, a form) is refused rather
  // than parsed anyway. A request without one is taken as JSON, as curl -d users expect.
  const std::string type = req.get_header_value("Content-Type");
  std::string media;
  for (char c : type.substr(0, type.find(';'))) {
    if (c != ' ' && c != '\t') {
      media += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  if (!type.empty() && media != "application/json") {
    code = 415;
    Error(res, code,
          "the request body must be JSON (Content-Type: application/json), not '" +
              media.substr(0, 80) + "'");
    metrics_.RequestFinished(endpoint, code, -1.0);
    Leave();
    return;
  }
  Result<Prepared> prepared = Prepare(req.body, chat, &code);
  if (!prepared.ok()) {
    Error(res, code, prepared.status().message());
    metrics_.RequestFinished(endpoint, code, -1.0);
    Leave();
    return;
  }
  Answer(std::move(prepared).value(), req, res);
}

void Server::Answer(Prepared p, const httplib::Request& req, httplib::Response& res) {
  const std::string endpoint = p.endpoint == Endpoint::kChat ? "chat_completions" : "completions";
  const int64_t prompt_tokens = p.prompt_tokens;
  std::vector<int32_t> stop_ids = p.request.sampling.stop_tokens;
  Result<std::shared_ptr<RequestHandle>> handle = engine_.Submit(std::move(p.request));
  if (!handle.ok()) {
    Error(res, HttpCode(handle.status()), handle.status().message());
    metrics_.RequestFinished(endpoint, res.status, -1.0);
    Leave();
    return;
  }
  ResponseHeader header;
  header.endpoint = p.endpoint;
  header.id = std::string(p.endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") +
              std::to_string(next_id_++);
  header.created = UnixNow();
  header.model = model_.name;
  auto stream = std::make_shared<AnswerStream>(std::move(handle).value(), model_.tokenizer,
                                               p.params.stop, std::move(stop_ids));
  if (!p.params.stream) {
    // Nothing is written before the end, so the socket tells whether the client left.
    const ClientConnection client =
        ClientConnection::Find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    std::string text;
    std::vector<int32_t> ids;
    AnswerPiece piece;
    bool left = false;
    do {
      piece = stream->Next(kPoll);
      text += piece.text;
      ids.insert(ids.end(), piece.token_ids.begin(), piece.token_ids.end());
      if (!piece.finished && !left && client.Gone()) {
        stream->Cancel();  // ends at the next token boundary; Next then finishes
        left = true;
      }
    } while (!piece.finished);
    if (left) {
      // Nobody reads it; the body marks it answered (the error handler counts bodiless ones).
      Error(res, 499, "the client closed the connection");
      metrics_.RequestFinished(endpoint, 499, -1.0);
      Leave();
      return;
    }
    if (!piece.status.ok()) {
      Error(res, 500, "generation failed: " + piece.status.ToString());
    } else {
      res.status = 200;
      res.set_content(FullResponse(header, text, ids, piece.finish_reason,
                                   Usage{prompt_tokens, stream->completion_tokens()}),
                      kJson);
    }
    metrics_.RequestFinished(endpoint, res.status, ids.empty() ? -1.0 : stream->ttft_seconds());
    Leave();
    return;
  }
  struct StreamState {
    std::shared_ptr<AnswerStream> stream;
    ResponseHeader header;
    bool include_usage = false;
    int64_t prompt_tokens = 0;
    bool first = true;
    bool done = false;
    Clock::time_point last_write = Clock::now();
  };
  auto state = std::make_shared<StreamState>();
  state->stream = stream;
  state->header = std::move(header);
  state->include_usage = p.params.include_usage;
  state->prompt_tokens = prompt_tokens;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state](size_t /*offset*/, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) {
          state->last_write = Clock::now();
          return sink.write(s.data(), s.size());
        };
        const ResponseHeader& h = state->header;
        if (state->first) {
          state->first = false;
          // A chat's first chunk names the role before any token, as OpenAI's does.
          if (h.endpoint == Endpoint::kChat &&
              !write(SseEvent(StreamChunk(h, "", {}, std::nullopt, /*first=*/true)))) {
            return false;
          }
        }
        AnswerPiece piece = state->stream->Next(kPoll);
        if (!piece.text.empty() || !piece.token_ids.empty()) {
          if (!write(SseEvent(StreamChunk(h, piece.text, piece.token_ids, std::nullopt, false)))) {
            return false;
          }
        } else if (!piece.finished && Clock::now() - state->last_write > kKeepAlive) {
          if (!write(": waiting\n\n")) return false;
        }
        if (!piece.finished) return true;
        if (!piece.status.ok()) {
          write(SseEvent(
              ErrorResponse("generation failed: " + piece.status.ToString(), "server_error")));
        } else {
          write(SseEvent(StreamChunk(h, "", {}, piece.finish_reason, false)));
          if (state->include_usage) {
            write(SseEvent(
                UsageChunk(h, Usage{state->prompt_tokens, state->stream->completion_tokens()})));
          }
        }
        write("data: [DONE]\n\n");
        state->done = true;
        sink.done();
        return true;
      },
      [this, state, endpoint](bool success) {
        // A client that left: its request ends at the next token boundary, freeing its slot.
        if (!state->done) state->stream->Cancel();
        metrics_.RequestFinished(endpoint, success && state->done ? 200 : 499,
                                 state->done && state->stream->completion_tokens() > 0
                                     ? state->stream->ttft_seconds()
                                     : -1.0);
        Leave();
      });
}

}  // namespace sy::serving
