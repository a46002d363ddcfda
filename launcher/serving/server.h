// Server: the OpenAI-compatible HTTP server of `switchyard serve` (docs/serving.md), over one
// EngineThread (inference/engine_thread.h) that runs the generate engine's continuous batching.
//
//   POST /v1/completions       a completion: the prompt as text or token ids
//   POST /v1/chat/completions  a chat, through the model's chat template
//   GET  /v1/models            the model
//   POST /tokenize, /detokenize  text (or a chat) to token ids and back, as vLLM's
//   GET  /health               200 {"status": "ok"}; 503 while shutting down
//   GET  /metrics              Prometheus text (launcher/serving/server_metrics.h)
//
// HTTP is libmicrohttpd (Debian's libmicrohttpd-dev): --http-threads event loops (epoll) answer
// every connection, so a connection that is idle, trickling its headers or waiting for its tokens
// holds no thread. What a client may cost is bounded (docs/serving.md, "Limits"): its headers (the
// bytes, by the connection's memory pool, and their count), its body, the time its request may
// take to arrive and to begin on a keep-alive connection (launcher/serving/connection_table.h), and
// the connections open in all and per client address (past either, the first request is answered
// 503 and the connection closed). A request that needs work (parsing, the chat template and the
// tokenizer, or the engine for /metrics) is handed to as many preparing threads, its connection
// suspended meanwhile; it is then submitted to the engine thread, whose tokens wake the
// connection again (RequestHandle::SetNotify). The engine thread alone touches the engine, the
// model and the backend; the other threads touch only a request's own state (under its lock), the
// (const, thread-safe) tokenizer and chat template, and the metrics.
//
// Answers: 400 for a request that is malformed or does not fit (wrong types, max_tokens past the
// context, a text prompt to a model without a tokenizer, a chat to a model without a template),
// 404 for another model's name or path or an unknown route, 413 for a body over kMaxBodyBytes,
// 415 for a body that says it is not JSON, 431 for too many headers, 503 while shutting down or
// past a connection limit, 500 when the engine fails; each with an OpenAI error body. A client
// that disconnects is noticed by a look at its socket every 100 ms, and a streaming one also at
// its next write (a comment line goes out every second while a request waits). Either way its
// request is cancelled, which frees its batch slot at the next token boundary, and is counted
// with code 499.
//
// Shutdown (from any thread, e.g. on SIGTERM): new requests get 503, the requests in flight run
// to their end and are answered, for at most ServerOptions::drain_seconds; then the requests still
// running are cancelled, every connection is closed, whatever its client does (one trickling its
// headers, an idle keep-alive, an answer still running at the deadline), and Serve returns.
//
// Ownership: borrows the engine thread, the tokenizer and the chat template (all outlive the
// server). Thread-safety: Bind and Serve on one thread; Shutdown and port() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "inference/chat_template.h"
#include "inference/engine_thread.h"
#include "inference/token_constraint.h"
#include "inference/tokenizer.h"
#include "launcher/serving/connection_table.h"
#include "launcher/serving/openai_request.h"
#include "launcher/serving/server_metrics.h"
#include "runtime/core/mutex.h"
#include "runtime/core/status.h"
#include "runtime/core/thread_pool.h"

struct MHD_Daemon;

namespace sy::serving {

// What the server knows of the model it serves.
struct ServedModel {
  std::string name;                      // the id /v1/models lists; requests may name it or omit it
  std::string path;                      // requests may name the model by its path too
  const Tokenizer* tokenizer = nullptr;  // null: prompts and answers are token ids
  const ChatTemplate* chat_template = nullptr;  // null: chat requests get 400 with...
  std::string no_chat_template;                 // ...this reason
  std::vector<int32_t> eos_token_ids;           // end an answer unless ignore_eos
  int64_t vocab_size = 0;                       // the model's (logit rows)
  int64_t context = 0;                          // tokens one request may hold: prompt + answer
  std::string context_why;  // where `context` comes from, for the 400 that cites it
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (port() says which)
  // Event-loop threads, and as many threads that prepare requests (parse, template, tokenize).
  int http_threads = 4;
  ConnectionLimits limits;
  // Default: 30. How long Shutdown lets the requests in flight finish before it closes every
  // connection (`--drain-seconds`).
  double drain_seconds = 30;
  // When set, the API's routes (/v1/*, /tokenize, /detokenize) need "Authorization: Bearer KEY"
  // (401 otherwise); /health and /metrics stay open.
  std::string api_key;
  // Origins whose pages may call the API from a browser (CORS); "*" is any. Empty: no CORS.
  std::vector<std::string> cors_origins;
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
  struct Exchange;  // one request on its connection, from its request line to its end (server.cc)
  friend struct HttpCallbacks;  // libmicrohttpd's callbacks (server.cc)

  // Parses and checks a body into a request for the engine, or the HTTP error to answer.
  Result<Prepared> Prepare(const std::string& body, bool chat, int* code);
  // The answer body of POST /tokenize or /detokenize, or the error (with its HTTP code).
  Result<std::string> Tokenize(const std::string& body, int* code);
  Result<std::string> Detokenize(const std::string& body, int* code);
  // A request that names a model must name this one (or its path): 404 otherwise.
  Status CheckModelName(const std::string& name, int* code) const;
  // On a preparing thread: prepares and submits the exchange's request (or reads the metrics),
  // then wakes its connection to answer.
  void Work(const std::shared_ptr<Exchange>& x);
  // Every 100 ms until Serve ends: cuts connections past their deadline, cancels the requests of
  // clients that left, wakes streams that owe a keep-alive comment.
  void Tick();
  // Counts the exchange's end in the metrics, once; cancels its request if it is still running.
  void Finish(Exchange& x);
  // A chat with tools (tool_choice not none): refused when the model's template has no tool-call
  // format; marks the answers to be read for calls (all of them, or the first without
  // `parallel`); for "required" or a named function, constrains the answer to one call
  // (p->params.grammar).
  Status PrepareTools(const nlohmann::ordered_json& tools, const ToolChoice& choice, bool parallel,
                      Prepared* p);
  ServedModel model_;
  EngineThread& engine_;
  ServerOptions options_;
  ConnectionTable connections_;
  ServerMetrics metrics_;
  std::unique_ptr<ThreadPool> workers_;
  MHD_Daemon* daemon_ = nullptr;
  int listen_fd_ = -1;
  bool ipv6_ = false;
  int port_ = 0;
  int64_t started_ = 0;  // Unix seconds
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopping_{false};  // past the drain: nothing waits any more
  std::atomic<int64_t> next_id_{1};

  Mutex mu_;
  CondVar changed_;                       // active_, stop_ or served_ changed
  int active_ SY_GUARDED_BY(mu_) = 0;     // generation requests not yet answered (the drain waits)
  bool stop_ SY_GUARDED_BY(mu_) = false;  // Shutdown asks Serve to stop the daemon
  bool served_ SY_GUARDED_BY(mu_) = false;                            // Serve has returned
  std::set<std::shared_ptr<Exchange>> exchanges_ SY_GUARDED_BY(mu_);  // every one open

  ConstraintVocabularyCache vocabulary_;  // response_format's and tool_choice's token bytes
};

}  // namespace sy::serving
