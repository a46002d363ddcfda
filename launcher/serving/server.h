// Server: the OpenAI-compatible HTTP server of `switchyard serve` (docs/serving.md), over one
// EngineThread (inference/engine_thread.h) that runs the generate engine's continuous batching.
//
//   POST /v1/completions       a completion: the prompt as text or token ids
//   POST /v1/chat/completions  a chat, through the model's chat template
//   GET  /v1/models            the model
//   GET  /health               200 {"status": "ok"}; 503 while shutting down
//   GET  /metrics              Prometheus text (launcher/serving/server_metrics.h)
//
// HTTP is cpp-httplib (Debian's libcpp-httplib-dev): a pool of HTTP threads, each answering one
// connection at a time. A generation request is parsed and checked on its HTTP thread (launcher/
// serving/openai_request.h; the prompt is tokenized or templated there too), submitted to the
// engine thread, and answered from its RequestHandle as the tokens arrive: as server-sent events
// when "stream" is true, else in one body at the end. The engine thread alone touches the engine,
// the model and the backend; an HTTP thread touches only its own request's handle, the (const,
// thread-safe) tokenizer and chat template, and the metrics.
//
// Answers: 400 for a request that is malformed or does not fit (wrong types, max_tokens past the
// context, a text prompt to a model without a tokenizer, a chat to a model without a template),
// 404 for another model's name or path, 503 while shutting down, 500 when the engine fails; each
// with an OpenAI error body. A streaming client that disconnects is noticed at the next write (a
// comment line goes out every second while a request waits); a non-streamed one by a look at its
// socket every 250 ms (launcher/serving/client_connection.h). Either way its request is cancelled,
// which frees its batch slot at the next token boundary, and is counted with code 499.
//
// Shutdown (from any thread, e.g. on SIGTERM): new requests get 503, the requests in flight run
// to their end and are answered, for at most ServerOptions::drain_seconds; then every connection
// is closed, whatever its client does (one trickling its headers, an idle keep-alive, an answer
// still running at the deadline), and Serve returns.
//
// Ownership: borrows the engine thread, the tokenizer and the chat template (all outlive the
// server). Thread-safety: Bind and Serve on one thread; Shutdown and port() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "inference/chat_template.h"
#include "inference/engine_thread.h"
#include "inference/tokenizer.h"
#include "launcher/serving/server_metrics.h"
#include "runtime/core/mutex.h"
#include "runtime/core/status.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace sy::serving {

// What the server knows of the model it serves.
struct ServedModel {
  std::string name;                      // the id /v1/models lists; requests may name it or omit it
  std::string path;                      // requests may name the model by its path too
  const Tokenizer* tokenizer = nullptr;  // null: prompts and answers are token ids
  const ChatTemplate* chat_template = nullptr;  // null: chat requests get 400 with...
  std::string no_chat_template;                 // ...this reason
  std::vector<int32_t> eos_token_ids;           // end an answer unless ignore_eos
  int64_t context = 0;                          // tokens one request may hold: prompt + answer
  std::string context_why;  // where `context` comes from, for the 400 that cites it
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;       // 0: any free port (port() says which)
  int http_threads = 0;  // connections answered at once; 0: 4 x the engine's batch + 16
  // Default: 30. How long Shutdown lets the requests in flight finish before it closes every
  // connection (`--drain-seconds`).
  double drain_seconds = 30;
};

class Server {
 public:
  Server(ServedModel model, EngineThread& engine, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port. Unavailable naming the address when it cannot (in use, no such host).
  Status Bind();
  // The bound port (after Bind).
  int port() const { return port_; }
  const ServedModel& model() const { return model_; }
  // Answers requests until Shutdown has drained them. IOError if the listening socket fails.
  Status Serve();
  // Stops taking requests (503), waits up to drain_seconds for those in flight to be answered,
  // closes every connection, makes Serve return. Call once; returns once Serve has returned.
  void Shutdown();

 private:
  struct Prepared;  // a checked generation request, ready for the engine (server.cc)

  void Completions(const httplib::Request& req, httplib::Response& res, bool chat);
  // Parses and checks a body into a request for the engine, or the HTTP error to answer.
  Result<Prepared> Prepare(const std::string& body, bool chat, int* code);
  // Submits the request and answers it (whole, or as a stream that outlives the handler); counts
  // its end in the metrics and calls Leave once it is answered.
  void Answer(Prepared prepared, const httplib::Request& req, httplib::Response& res);
  void Error(httplib::Response& res, int code, const std::string& message);
  // A generation request in flight is answered (for the drain).
  void Leave() SY_EXCLUDES(mu_);

  ServedModel model_;
  EngineThread& engine_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  int listen_socket_ = -1;  // httplib's listening socket, once Bind made it
  ServerMetrics metrics_;
  int port_ = 0;
  int64_t started_ = 0;  // Unix seconds
  std::atomic<bool> draining_{false};
  std::atomic<bool> served_{false};  // Serve has returned
  std::atomic<int64_t> next_id_{1};

  Mutex mu_;
  CondVar idle_;
  int active_ SY_GUARDED_BY(mu_) = 0;
};

}  // namespace sy::serving
