#include "launcher/serving/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/printf.h>
#include <microhttpd.h>
#include <netdb.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <utility>
#include <vector>

#include "inference/answer_stream.h"
#include "inference/tool_calls.h"
#include "launcher/serving/openai_request.h"
#include "launcher/serving/openai_response.h"

namespace sy::serving {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kJson = "application/json";
// How long a streaming connection may stay silent before a comment line goes out, so that a
// client that left is noticed while its request waits for a slot.
constexpr milliseconds kKeepAlive(1000);
// How often the deadlines and the clients of running requests are looked at.
constexpr milliseconds kTick(100);
// Request headers: their bytes are bounded by each connection's memory pool (the request line,
// the headers and the read buffer live there: past it, 431), their number by kMaxHeaders.
constexpr size_t kConnectionMemory = 64 << 10;
constexpr unsigned kMaxHeaders = 100;
// Connections past the limits get a 503 up to this many more; past those, libmicrohttpd closes
// them as it accepts them, without a word.
constexpr int kLimitGrace = 16;
// A streamed answer goes out in blocks of at most this many bytes.
constexpr size_t kStreamBlock = 16 << 10;

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

// An OpenAI error body; `error_code` is the API's "code" field (empty: null).
std::string ErrorBody(int code, const std::string& message, const char* error_code = "") {
  return ErrorResponse(message, code >= 500 ? "server_error" : "invalid_request_error", error_code);
}

// The numeric address of a client (no port), the key of its connection count.
std::string ClientAddress(const sockaddr* addr) {
  if (addr == nullptr) return "?";
  char host[NI_MAXHOST];
  const socklen_t len = addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (getnameinfo(addr, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return host;
}

// The media type of a Content-Type value, lower case, without parameters or blanks.
std::string MediaType(const char* value) {
  std::string media;
  for (const char* c = value; *c != '\0' && *c != ';'; ++c) {
    if (*c != ' ' && *c != '\t') {
      media += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
    }
  }
  return media;
}

// The texts of generated tokens and their alternatives, for the API's logprobs: each id decoded
// alone (its bytes, maybe part of a character), or "token_id:N" without a tokenizer (vLLM's form).
std::vector<TokenLogprobText> LogprobTexts(const Tokenizer* tokenizer, std::span<const int32_t> ids,
                                           std::span<const TokenLogprob> logprobs) {
  auto text = [&](int32_t id) {
    if (tokenizer != nullptr) {
      const int32_t one[] = {id};
      Result<std::string> decoded = tokenizer->Decode(one);
      if (decoded.ok()) return std::move(decoded).value();
    }
    return "token_id:" + std::to_string(id);
  };
  std::vector<TokenLogprobText> out;
  for (size_t i = 0; i < ids.size() && i < logprobs.size(); ++i) {
    TokenLogprobText t{text(ids[i]), logprobs[i].logprob, {}};
    for (const auto& [id, lp] : logprobs[i].top) t.top.emplace_back(text(id), lp);
    out.push_back(std::move(t));
  }
  return out;
}

// "Bearer KEY" with the right key, compared in constant time.
bool Authorized(const char* header, const std::string& key) {
  const std::string want = "Bearer " + key;
  if (header == nullptr || std::strlen(header) != want.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff |= static_cast<unsigned char>(header[i] ^ want[i]);
  }
  return diff == 0;
}

}  // namespace

struct Server::Prepared {
  Endpoint endpoint = Endpoint::kCompletion;
  GenerateRequest request;
  SamplingParams params;
  int64_t prompt_tokens = 0;
  std::shared_ptr<const ConstraintVocabulary> vocabulary;  // with a response_format grammar
  bool tool_calls = false;          // the answers are read for <tool_call> blocks (PrepareTools)
  bool parallel_tool_calls = true;  // false: the first call only
};

// One request on its connection. libmicrohttpd calls back for it on its connection's event-loop
// thread, one call at a time; a preparing thread, the engine thread (through the handle's notify)
// and the tick thread reach it too. Everything below `mu` is read and written under it.
struct Server::Exchange {
  enum class Route : uint8_t {
    kNone,
    kCompletions,
    kChat,
    kModels,
    kHealth,
    kMetrics,
    kTokenize,
    kDetokenize,
    kPreflight,  // OPTIONS: a browser's CORS preflight
  };
  enum class Stage : uint8_t {
    kHeaders,    // the request line is in; the handler has not seen the headers yet
    kBody,       // receiving the body
    kPreparing,  // on a preparing thread
    kReady,      // prepared: an answer to queue (`code`, `body`) or a stream to answer from
    kWaiting,    // a non-streamed answer: collecting the tokens
    kStreaming,  // a streamed answer: the reader writes the tokens as they come
    kAnswered,   // a response is queued (or the connection is to be closed)
  };

  Mutex mu;
  MHD_Connection* connection = nullptr;  // null once the request has ended (it may be freed)
  ConnectionTable::Entry* entry = nullptr;
  int fd = -1;
  bool suspended = false;
  Stage stage = Stage::kHeaders;
  Route route = Route::kNone;
  std::string url;
  std::string method;
  std::string body;
  bool body_too_large = false;
  bool counted = false;   // RequestStarted was counted: RequestFinished is owed
  bool active = false;    // a generation request in Server::active_
  bool finished = false;  // Finish has run

  // One answer of the request ('n' of them).
  struct Choice {
    std::shared_ptr<AnswerStream> stream;
    std::string text;  // kWaiting: what has come so far
    std::vector<int32_t> ids;
    std::vector<TokenLogprobText> token_logprobs;
    size_t text_offset = 0;  // kStreaming: bytes of token text sent so far
    bool first_chunk = true;
    bool done = false;
    std::string finish_reason;
    Status status;
  };

  // The answer: a ready one (kReady without choices), or the tokens of the request.
  int code = 200;
  std::string answer;
  const char* answer_type = kJson;
  std::vector<Choice> choices;
  ResponseHeader header;
  bool streamed = false;
  bool include_usage = false;
  int64_t prompt_tokens = 0;
  int32_t logprobs = -1;            // the request's (SamplingParams::logprobs)
  bool tool_calls = false;          // Prepared::tool_calls
  bool parallel_tool_calls = true;  // Prepared::parallel_tool_calls
  // An answer read for tool calls: its blocks as calls (the first only without
  // parallel_tool_calls), the rest as content.
  ParsedToolCalls ReadToolCalls(const std::string& text) const {
    return ParseHermesToolCalls(text, parallel_tool_calls ? SIZE_MAX : 1);
  }
  const Tokenizer* tokenizer = nullptr;  // the served model's, for the logprobs' texts
  bool client_left = false;
  bool stopping = false;          // past the drain: answer or close now, never wait again
  MHD_Response* reply = nullptr;  // made under mu, queued by Request after it
  std::string cors_origin;        // Access-Control-Allow-Origin of the answers; empty: none

  // kStreaming: what the reader has yet to write, and when it last wrote.
  std::string out;
  bool stream_done = false;  // every choice's last event and [DONE] are in `out`
  Clock::time_point last_write = Clock::now();
  double ttft = -1.0;

  // Takes what choice `c` gained since the last look; its piece, for the caller's events.
  AnswerPiece Take(Choice& c) {
    AnswerPiece piece = c.stream->Next(milliseconds(0));
    c.ids.insert(c.ids.end(), piece.token_ids.begin(), piece.token_ids.end());
    if (piece.finished) {
      c.done = true;
      c.finish_reason = piece.finish_reason;
      c.status = piece.status;
    }
    return piece;
  }
  bool all_done() const {
    return std::all_of(choices.begin(), choices.end(), [](const Choice& c) { return c.done; });
  }
  int64_t completion_tokens() const {
    int64_t n = 0;
    for (const Choice& c : choices) n += c.stream->completion_tokens();
    return n;
  }
  void CancelAll() {
    for (Choice& c : choices) c.stream->Cancel();
  }
  // The first choice's time to first token, once the answer has tokens.
  void NoteTtft() {
    if (!choices.empty() && !choices[0].ids.empty()) ttft = choices[0].stream->ttft_seconds();
  }

  std::string endpoint() const {
    return route == Route::kCompletions  ? "completions"
           : route == Route::kChat       ? "chat_completions"
           : route == Route::kTokenize   ? "tokenize"
           : route == Route::kDetokenize ? "detokenize"
                                         : "other";
  }

  // Stops handling the connection until Wake (call under mu, on its event-loop thread).
  void Suspend() {
    suspended = true;
    MHD_suspend_connection(connection);
  }
  // Hands the connection back to its event loop, which calls the handler (or the reader) again.
  // Any thread, under mu.
  void Wake() {
    if (!suspended || connection == nullptr) return;
    suspended = false;
    MHD_resume_connection(connection);
  }
};

// libmicrohttpd's callbacks; `cls` is the Server.
struct HttpCallbacks {
  using Exchange = Server::Exchange;

  // A connection opens or closes: entered in, or left from, the connection table.
  static void Connection(void* cls, MHD_Connection* connection, void** socket_context,
                         MHD_ConnectionNotificationCode code) {
    auto* server = static_cast<Server*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      const MHD_ConnectionInfo* fd =
          MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
      const MHD_ConnectionInfo* addr =
          MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
      *socket_context =
          server->connections_.Open(fd != nullptr ? fd->connect_fd : -1,
                                    ClientAddress(addr != nullptr ? addr->client_addr : nullptr));
    } else if (*socket_context != nullptr) {
      server->connections_.Close(static_cast<ConnectionTable::Entry*>(*socket_context));
      *socket_context = nullptr;
    }
  }

  // A request line is in: its exchange begins (and its deadline for the rest of the request).
  static void* RequestLine(void* cls, const char* url, MHD_Connection* connection) {
    auto* server = static_cast<Server*>(cls);
    auto x = std::make_shared<Exchange>();
    x->connection = connection;
    x->url = url != nullptr ? url : "";
    const MHD_ConnectionInfo* context =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    x->entry = context != nullptr ? static_cast<ConnectionTable::Entry*>(context->socket_context)
                                  : nullptr;
    const MHD_ConnectionInfo* fd =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    x->fd = fd != nullptr ? fd->connect_fd : -1;
    if (x->entry != nullptr) server->connections_.RequestBegan(x->entry);
    {
      MutexLock lock(&server->mu_);
      server->exchanges_.insert(x);
      x->stopping = server->stopping_.load();
    }
    return new std::shared_ptr<Exchange>(std::move(x));
  }

  // Makes the answer that Request queues once it has let go of x.mu (libmicrohttpd holds its
  // response's lock when it calls the reader, which takes x.mu: queueing under x.mu would take
  // the two in the other order).
  static MHD_Result Queue(Exchange& x, int code, const std::string& body, const char* type,
                          bool close = false) {
    MHD_Response* response = MHD_create_response_from_buffer(
        body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
    if (response == nullptr) return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (close) MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
    AddCorsHeaders(x, response);
    x.reply = response;
    x.code = code;
    x.stage = Exchange::Stage::kAnswered;
    return MHD_YES;
  }

  static void AddCorsHeaders(const Exchange& x, MHD_Response* response) {
    if (x.cors_origin.empty()) return;
    MHD_add_response_header(response, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN,
                            x.cors_origin.c_str());
    if (x.cors_origin != "*") MHD_add_response_header(response, MHD_HTTP_HEADER_VARY, "Origin");
    if (x.route == Exchange::Route::kPreflight) {
      MHD_add_response_header(response, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      MHD_add_response_header(response, "Access-Control-Allow-Headers",
                              "Authorization, Content-Type");
      MHD_add_response_header(response, "Access-Control-Max-Age", "600");
    }
  }

  static MHD_Result QueueError(Server& server, Exchange& x, int code, const std::string& message,
                               bool close = false) {
    if (!x.counted) {
      server.metrics_.RequestStarted();
      x.counted = true;
    }
    return Queue(x, code, ErrorBody(code, message), kJson, close);
  }

  // The request's headers are in (first call), its body comes (more calls), it is all in (a call
  // with no data), and then again whenever its connection is woken, until it is answered.
  static MHD_Result Request(void* cls, MHD_Connection* connection, const char* url,
                            const char* method, const char* /*version*/, const char* upload_data,
                            size_t* upload_data_size, void** req_cls) {
    auto* server = static_cast<Server*>(cls);
    if (*req_cls == nullptr) *req_cls = RequestLine(cls, url, connection);
    const std::shared_ptr<Exchange> x = *static_cast<std::shared_ptr<Exchange>*>(*req_cls);
    MHD_Response* reply = nullptr;
    unsigned code = 0;
    MHD_Result result;
    {
      MutexLock lock(&x->mu);
      result = Step(server, x, connection, url, method, upload_data, upload_data_size);
      reply = std::exchange(x->reply, nullptr);
      code = static_cast<unsigned>(x->code);
    }
    if (reply != nullptr) {
      if (MHD_queue_response(connection, code, reply) != MHD_YES) result = MHD_NO;
      MHD_destroy_response(reply);
    }
    return result;
  }

  // Request's work, under x->mu.
  static MHD_Result Step(Server* server, const std::shared_ptr<Exchange>& x,
                         MHD_Connection* connection, const char* url, const char* method,
                         const char* upload_data, size_t* upload_data_size) {
    switch (x->stage) {
      case Exchange::Stage::kHeaders:
        return Headers(*server, *x, connection, url, method);
      case Exchange::Stage::kBody:
        if (*upload_data_size > 0) {
          if (x->body.size() + *upload_data_size > kMaxBodyBytes) {
            x->body_too_large = true;
          } else {
            x->body.append(upload_data, *upload_data_size);
          }
          *upload_data_size = 0;
          return MHD_YES;
        }
        return Received(*server, x);
      case Exchange::Stage::kPreparing:
        if (x->stopping) {
          return QueueError(*server, *x, 503, "the server is shutting down", true);
        }
        x->Suspend();  // woken early: the preparing thread wakes it again
        return MHD_YES;
      case Exchange::Stage::kReady:
        return Ready(*server, x);
      case Exchange::Stage::kWaiting:
        return Collect(*server, *x);
      case Exchange::Stage::kStreaming:
      case Exchange::Stage::kAnswered:
        return MHD_YES;
    }
    return MHD_NO;
  }

  static MHD_Result Headers(Server& server, Exchange& x, MHD_Connection* connection,
                            const char* url, const char* method) {
    x.method = method;
    x.url = url;  // the path, without the query
    const std::string& path = x.url;
    const bool post = x.method == "POST", get = x.method == "GET";
    x.route = post && path == "/v1/completions"        ? Exchange::Route::kCompletions
              : post && path == "/v1/chat/completions" ? Exchange::Route::kChat
              : get && path == "/v1/models"            ? Exchange::Route::kModels
              : get && path == "/health"               ? Exchange::Route::kHealth
              : get && path == "/metrics"              ? Exchange::Route::kMetrics
              : post && path == "/tokenize"            ? Exchange::Route::kTokenize
              : post && path == "/detokenize"          ? Exchange::Route::kDetokenize
              : x.method == "OPTIONS"                  ? Exchange::Route::kPreflight
                                                       : Exchange::Route::kNone;
    x.stage = Exchange::Stage::kBody;
    // CORS: answers name the request's origin when --cors-origin allows it.
    const std::vector<std::string>& origins = server.options_.cors_origins;
    if (const char* origin =
            MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN)) {
      for (const std::string& allowed : origins) {
        if (allowed == "*" || allowed == origin) x.cors_origin = allowed == "*" ? "*" : origin;
      }
    }
    if (x.entry != nullptr) {
      const std::string over = server.connections_.OverLimit(x.entry);
      if (!over.empty()) return QueueError(server, x, 503, over, /*close=*/true);
    }
    const int headers = MHD_get_connection_values(connection, MHD_HEADER_KIND, nullptr, nullptr);
    if (headers > static_cast<int>(kMaxHeaders)) {
      return QueueError(server, x, 431,
                        "the request has " + std::to_string(headers) + " headers; at most " +
                            std::to_string(kMaxHeaders) + " are taken",
                        true);
    }
    if (x.route == Exchange::Route::kPreflight) {
      if (origins.empty()) {
        return QueueError(server, x, 405,
                          "OPTIONS answers a browser's CORS preflight, and this server allows no "
                          "origin (--cors-origin)");
      }
      return Queue(x, 204, "", "text/plain");
    }
    if (x.route == Exchange::Route::kNone) {
      return QueueError(server, x, 404, "no route " + x.method + " " + path.substr(0, 200));
    }
    const bool api = x.route != Exchange::Route::kHealth && x.route != Exchange::Route::kMetrics;
    if (api && !server.options_.api_key.empty() &&
        !Authorized(
            MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
            server.options_.api_key)) {
      if (!x.counted) {
        server.metrics_.RequestStarted();
        x.counted = true;
      }
      return Queue(x, 401,
                   ErrorBody(401,
                             "a valid API key is required: send 'Authorization: Bearer KEY' with "
                             "the server's --api-key",
                             "invalid_api_key"),
                   kJson);
    }
    const char* length =
        MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (length != nullptr && std::strtoull(length, nullptr, 10) > kMaxBodyBytes) {
      return QueueError(
          server, x, 413,
          "the request body is larger than " + std::to_string(kMaxBodyBytes) + " bytes", true);
    }
    if (x.route == Exchange::Route::kTokenize || x.route == Exchange::Route::kDetokenize) {
      server.metrics_.RequestStarted();
      x.counted = true;
    }
    if (x.route != Exchange::Route::kCompletions && x.route != Exchange::Route::kChat) {
      return MHD_YES;
    }
    {
      MutexLock lock(&server.mu_);
      if (server.draining_.load()) return QueueError(server, x, 503, "the server is shutting down");
      ++server.active_;
      x.active = true;
    }
    server.metrics_.RequestStarted();
    x.counted = true;
    // The body is JSON: a Content-Type that says otherwise (text/plain, a form) is refused rather
    // than parsed anyway. A request without one is taken as JSON, as curl -d users expect.
    const char* type =
        MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (type != nullptr && MediaType(type) != "application/json") {
      return QueueError(server, x, 415,
                        "the request body must be JSON (Content-Type: application/json), not '" +
                            MediaType(type).substr(0, 80) + "'");
    }
    return MHD_YES;
  }

  // The whole request is in.
  static MHD_Result Received(Server& server, const std::shared_ptr<Exchange>& x) {
    if (x->entry != nullptr) server.connections_.RequestReceived(x->entry);
    if (x->body_too_large) {
      return QueueError(
          server, *x, 413,
          "the request body is larger than " + std::to_string(kMaxBodyBytes) + " bytes", true);
    }
    // The metrics count the API's requests, and the errors of every route.
    if (x->route == Exchange::Route::kModels) {
      return Queue(*x, 200, ModelsResponse(server.model_.name, server.started_), kJson);
    }
    if (x->route == Exchange::Route::kHealth) {
      return server.draining_.load() ? Queue(*x, 503, "{\"status\":\"shutting down\"}", kJson)
                                     : Queue(*x, 200, "{\"status\":\"ok\"}", kJson);
    }
    if (x->stopping) {
      return QueueError(server, *x, 503, "the server is shutting down", true);
    }
    // Parsing, the template and the tokenizer (or the engine, for the metrics) may take a while:
    // on a preparing thread, with this connection suspended meanwhile.
    x->stage = Exchange::Stage::kPreparing;
    x->Suspend();
    server.workers_->Submit([&server, x] { server.Work(x); });
    return MHD_YES;
  }

  static MHD_Result Ready(Server& server, const std::shared_ptr<Exchange>& x) {
    if (x->choices.empty()) return Queue(*x, x->code, x->answer, x->answer_type);
    if (!x->streamed) {
      x->stage = Exchange::Stage::kWaiting;
      return Collect(server, *x);
    }
    MHD_Response* response = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, kStreamBlock, &Stream, new std::shared_ptr<Exchange>(x), &FreeStream);
    if (response == nullptr) return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    AddCorsHeaders(*x, response);
    x->reply = response;
    x->code = 200;
    x->stage = Exchange::Stage::kStreaming;
    return MHD_YES;
  }

  // A non-streamed answer: takes what has come; answers at the end, else waits for more.
  static MHD_Result Collect(Server& server, Exchange& x) {
    for (Exchange::Choice& c : x.choices) {
      if (c.done) continue;
      AnswerPiece piece = x.Take(c);
      c.text += piece.text;
      if (x.logprobs >= 0) {
        std::vector<TokenLogprobText> more =
            LogprobTexts(x.tokenizer, piece.token_ids, piece.logprobs);
        c.token_logprobs.insert(c.token_logprobs.end(), std::make_move_iterator(more.begin()),
                                std::make_move_iterator(more.end()));
      }
    }
    if (!x.all_done()) {
      if (x.stopping) {
        return QueueError(server, x, 503, "the server is shutting down", true);
      }
      x.Suspend();
      return MHD_YES;
    }
    if (x.client_left) {
      x.code = 499;
      x.stage = Exchange::Stage::kAnswered;
      return MHD_NO;  // nobody to answer: the connection is closed
    }
    x.NoteTtft();
    std::vector<ChoiceText> choices;
    std::vector<ParsedToolCalls> calls(x.choices.size());
    for (size_t i = 0; i < x.choices.size(); ++i) {
      const Exchange::Choice& c = x.choices[i];
      if (!c.status.ok()) {
        return Queue(x, 500, ErrorBody(500, "generation failed: " + c.status.ToString()), kJson);
      }
      ChoiceText choice{c.text,
                        c.ids,
                        c.finish_reason,
                        Logprobs{x.logprobs >= 0 ? &c.token_logprobs : nullptr, 0},
                        {},
                        {}};
      if (x.tool_calls) {  // <tool_call> blocks become tool_calls; the rest is the content
        calls[i] = x.ReadToolCalls(c.text);
        if (!calls[i].calls.empty()) {
          choice.text = calls[i].content;
          choice.tool_calls = calls[i].calls;
          choice.tool_call_id_prefix = x.header.id + "-" + std::to_string(i);
          choice.finish_reason = "tool_calls";
        }
      }
      choices.push_back(choice);
    }
    return Queue(x, 200,
                 FullResponse(x.header, choices, Usage{x.prompt_tokens, x.completion_tokens()}),
                 kJson);
  }

  // A streamed answer's reader: the events of what has come, or a keep-alive comment after a
  // second of silence; with nothing to write, the connection waits (suspended) for the engine.
  static ssize_t Stream(void* cls, uint64_t /*pos*/, char* buf, size_t max) {
    Exchange& x = **static_cast<std::shared_ptr<Exchange>*>(cls);
    MutexLock lock(&x.mu);
    if (x.client_left) return MHD_CONTENT_READER_END_WITH_ERROR;  // nobody reads the rest
    if (x.out.empty() && !x.stream_done) Events(x);
    if (x.out.empty()) {
      if (x.stream_done) return MHD_CONTENT_READER_END_OF_STREAM;
      if (x.stopping) return MHD_CONTENT_READER_END_WITH_ERROR;  // cut at the drain's deadline
      if (Clock::now() - x.last_write > kKeepAlive) {
        x.out = ": waiting\n\n";
      } else {
        x.Suspend();
        return 0;
      }
    }
    const size_t n = std::min(max, x.out.size());
    std::memcpy(buf, x.out.data(), n);
    x.out.erase(0, n);
    x.last_write = Clock::now();
    return static_cast<ssize_t>(n);
  }

  // The server-sent events of what the answer's choices gained, into x.out.
  static void Events(Exchange& x) {
    const ResponseHeader& h = x.header;
    for (size_t i = 0; i < x.choices.size(); ++i) {
      Exchange::Choice& c = x.choices[i];
      const int index = static_cast<int>(i);
      if (c.first_chunk) {
        c.first_chunk = false;
        // A chat's first chunk names the role before any token, as OpenAI's does.
        if (h.endpoint == Endpoint::kChat) {
          x.out += SseEvent(StreamChunk(h, index, "", {}, std::nullopt, /*first=*/true));
        }
      }
      if (c.done) continue;
      AnswerPiece piece = x.Take(c);
      if (x.tool_calls) {  // held until the answer ends, then sent whole, its calls read
        c.text += piece.text;
        if (!piece.finished) continue;
        if (!piece.status.ok()) {
          x.out += SseEvent(
              ErrorResponse("generation failed: " + piece.status.ToString(), "server_error"));
          continue;
        }
        const ParsedToolCalls parsed = x.ReadToolCalls(c.text);
        const std::string prefix = h.id + "-" + std::to_string(i);
        const std::string_view content = parsed.calls.empty() ? c.text : parsed.content;
        if (!content.empty() || !c.ids.empty()) {
          x.out += SseEvent(StreamChunk(h, index, content, c.ids, std::nullopt, false));
        }
        if (!parsed.calls.empty()) {
          x.out += SseEvent(
              StreamChunk(h, index, "", {}, "tool_calls", false, {}, parsed.calls, prefix));
        } else {
          x.out += SseEvent(StreamChunk(h, index, "", {}, piece.finish_reason, false));
        }
        continue;
      }
      if (!piece.text.empty() || !piece.token_ids.empty()) {
        std::vector<TokenLogprobText> texts;
        if (x.logprobs >= 0) texts = LogprobTexts(x.tokenizer, piece.token_ids, piece.logprobs);
        x.out += SseEvent(StreamChunk(h, index, piece.text, piece.token_ids, std::nullopt, false,
                                      Logprobs{x.logprobs >= 0 ? &texts : nullptr, c.text_offset}));
        for (const TokenLogprobText& t : texts) c.text_offset += t.token.size();
      }
      if (!piece.finished) continue;
      if (!piece.status.ok()) {
        x.out += SseEvent(
            ErrorResponse("generation failed: " + piece.status.ToString(), "server_error"));
      } else {
        x.out += SseEvent(StreamChunk(h, index, "", {}, piece.finish_reason, false));
      }
    }
    if (!x.all_done()) return;
    if (x.include_usage) {
      x.out += SseEvent(UsageChunk(h, Usage{x.prompt_tokens, x.completion_tokens()}));
    }
    x.out += "data: [DONE]\n\n";
    x.NoteTtft();
    x.stream_done = true;
  }

  static void FreeStream(void* cls) { delete static_cast<std::shared_ptr<Exchange>*>(cls); }

  // The request has ended (answered, failed, or its connection closed): counted, cancelled if
  // still running, and its connection's keep-alive deadline starts.
  static void Completed(void* cls, MHD_Connection* /*connection*/, void** req_cls,
                        MHD_RequestTerminationCode toe) {
    auto* server = static_cast<Server*>(cls);
    if (*req_cls == nullptr) return;
    auto* held = static_cast<std::shared_ptr<Exchange>*>(*req_cls);
    const std::shared_ptr<Exchange> x = std::move(*held);
    delete held;
    *req_cls = nullptr;
    {
      MutexLock lock(&x->mu);
      // A stream counts as answered once its last event was handed out: a client may close the
      // connection after [DONE], before the chunked body's terminator.
      const bool answered = x->stage == Exchange::Stage::kAnswered ||
                            (x->stage == Exchange::Stage::kStreaming && x->stream_done &&
                             x->out.empty() && !x->client_left);
      if (!answered) x->code = 499;  // the client left (or the server cut it) before the end
      x->connection = nullptr;
      if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && x->entry != nullptr) {
        server->connections_.Answered(x->entry);
      }
      server->Finish(*x);
    }
    MutexLock lock(&server->mu_);
    server->exchanges_.erase(x);
  }
};

Server::Server(ServedModel model, EngineThread& engine, ServerOptions options)
    : model_(std::move(model)),
      engine_(engine),
      options_(std::move(options)),
      connections_(options_.limits),
      started_(UnixNow()) {}

Server::~Server() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

Status Server::Bind() {
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc =
      getaddrinfo(options_.host.c_str(), std::to_string(options_.port).c_str(), &hints, &found);
  if (rc != 0) {
    return UnavailableError("cannot listen on " + where + ": " + gai_strerror(rc) +
                            "; pick another --host");
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd =
        ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    // The kernel's queue of connections not yet accepted: SOMAXCONN (net.core.somaxconn bounds
    // it), so that a burst of clients is queued rather than reset (issue 46, finding 5).
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      sockaddr_storage bound{};
      socklen_t len = sizeof bound;
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
      port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
      ipv6_ = bound.ss_family == AF_INET6;
      listen_fd_ = fd;
      break;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) {
    return UnavailableError("cannot listen on " + where + " (" + why +
                            "); pick another --port or --host");
  }
  // Every connection is a descriptor: the soft limit is raised towards the hard one as far as
  // --max-connections needs (plus room for the model's files).
  const rlim_t needed = static_cast<rlim_t>(options_.limits.max_connections) + kLimitGrace + 256;
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < needed) {
    files.rlim_cur = std::min(needed, files.rlim_max);
    setrlimit(RLIMIT_NOFILE, &files);
    if (files.rlim_cur < needed) {
      spdlog::warn(
          "{}", fmt::sprintf("the open-file limit (ulimit -n) is %llu, which holds about %llu of "
                             "--max-connections %d; past those, connections wait to be accepted",
                             static_cast<unsigned long long>(files.rlim_cur),
                             static_cast<unsigned long long>(
                                 files.rlim_cur > 256 ? files.rlim_cur - 256 : 0),
                             options_.limits.max_connections));
    }
  }
  return Status::Ok();
}

Status Server::Serve() {
  const int threads = std::max(1, options_.http_threads);
  workers_ = std::make_unique<ThreadPool>(threads + 1);  // N workers: the pool counts a caller
  const ConnectionLimits& limits = connections_.limits();
  const unsigned idle =
      static_cast<unsigned>(std::ceil(std::max(limits.keep_alive_seconds, limits.request_seconds)));
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
  if (ipv6_) flags |= MHD_USE_IPv6;
  // clang-format off
  daemon_ = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &HttpCallbacks::Request, this,
      MHD_OPTION_LISTEN_SOCKET, listen_fd_,
      MHD_OPTION_THREAD_POOL_SIZE, static_cast<unsigned>(threads),
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, kConnectionMemory,
      // A client that stops reading its answer (or sending its request) is cut after this much
      // silence; the deadlines of connection_table.h come first.
      MHD_OPTION_CONNECTION_TIMEOUT, idle,
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned>(limits.max_connections + kLimitGrace),
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, static_cast<unsigned>(limits.max_per_client + kLimitGrace),
      MHD_OPTION_NOTIFY_CONNECTION, &HttpCallbacks::Connection, this,
      MHD_OPTION_URI_LOG_CALLBACK, &HttpCallbacks::RequestLine, this,
      MHD_OPTION_NOTIFY_COMPLETED, &HttpCallbacks::Completed, this,
      MHD_OPTION_END);
  // clang-format on
  if (daemon_ == nullptr) {
    MutexLock lock(&mu_);
    served_ = true;  // a Shutdown to come returns at once
    changed_.NotifyAll();
    return IOError("the HTTP server on " + options_.host + ":" + std::to_string(port_) +
                   " did not start (libmicrohttpd refused its options or its threads)");
  }
  {
    MutexLock lock(&mu_);
    while (!stop_) {
      const auto next = Clock::now() + kTick;
      lock.Unlock();
      Tick();
      lock.Lock();
      changed_.WaitUntil(&mu_, next);
    }
  }
  MHD_stop_daemon(daemon_);  // closes every connection, and the listening socket
  daemon_ = nullptr;
  listen_fd_ = -1;
  workers_.reset();  // what was still preparing finds its connection gone
  MutexLock lock(&mu_);
  served_ = true;
  changed_.NotifyAll();
  return Status::Ok();
}

void Server::Tick() {
  connections_.CloseOverdue();
  std::vector<std::shared_ptr<Exchange>> open;
  {
    MutexLock lock(&mu_);
    open.assign(exchanges_.begin(), exchanges_.end());
  }
  const auto now = Clock::now();
  for (const std::shared_ptr<Exchange>& x : open) {
    MutexLock lock(&x->mu);
    const bool running =
        x->stage == Exchange::Stage::kWaiting || x->stage == Exchange::Stage::kStreaming;
    if (!running || x->connection == nullptr) continue;
    // Nothing is written to a non-streamed answer before its end, and a suspended stream writes
    // nothing: the socket tells whether the client left.
    if (!x->client_left && PeerHasClosed(x->fd)) {
      x->client_left = true;
      x->CancelAll();  // each ends at its next token boundary, which wakes the connection
    }
    if (x->stage == Exchange::Stage::kStreaming && now - x->last_write > kKeepAlive) x->Wake();
  }
}

void Server::Work(const std::shared_ptr<Exchange>& x) {
  if (x->route == Exchange::Route::kMetrics) {
    EngineSnapshot snapshot;
    const Status called = engine_.Call([&](GenerateEngine& e) { snapshot = Snapshot(e); });
    snapshot.queued = engine_.queued();
    std::string text = called.ok() ? metrics_.Render(snapshot) : std::string();
    MutexLock lock(&x->mu);
    if (x->stage != Exchange::Stage::kPreparing) return;
    x->code = called.ok() ? 200 : 503;
    x->answer = called.ok() ? std::move(text) : ErrorBody(503, called.message());
    x->answer_type = called.ok() ? "text/plain; version=0.0.4" : kJson;
    x->stage = Exchange::Stage::kReady;
    x->Wake();
    return;
  }
  if (x->route == Exchange::Route::kTokenize || x->route == Exchange::Route::kDetokenize) {
    int code = 400;
    Result<std::string> answer = x->route == Exchange::Route::kTokenize
                                     ? Tokenize(x->body, &code)
                                     : Detokenize(x->body, &code);
    MutexLock lock(&x->mu);
    if (x->stage != Exchange::Stage::kPreparing) return;
    x->stage = Exchange::Stage::kReady;
    x->code = answer.ok() ? 200 : code;
    x->answer = answer.ok() ? std::move(answer).value()
                            : ErrorBody(code, answer.status().message(),
                                        code == 404 ? "model_not_found" : "");
    x->Wake();
    return;
  }
  const bool chat = x->route == Exchange::Route::kChat;
  int code = 400;
  Result<Prepared> prepared = Prepare(x->body, chat, &code);
  MutexLock lock(&x->mu);
  if (x->stage != Exchange::Stage::kPreparing) return;  // answered 503 meanwhile (stopping)
  x->stage = Exchange::Stage::kReady;
  if (!prepared.ok()) {
    x->code = code;
    x->answer = ErrorBody(code, prepared.status().message(), code == 404 ? "model_not_found" : "");
    x->Wake();
    return;
  }
  if (x->connection == nullptr || x->stopping) {
    x->Wake();  // the handler answers 503, or nobody is left to answer
    return;
  }
  Prepared& p = *prepared;
  // 'n' answers: as many engine requests, choice i drawing from seed + i (when a seed is given).
  const std::vector<int32_t> stop_ids = p.request.sampling.stop_tokens;
  for (int i = 0; i < p.params.n; ++i) {
    GenerateRequest request = p.request;
    if (p.params.grammar != nullptr) {  // each answer matches the grammar on its own
      request.constraint =
          std::make_shared<GrammarConstraint>(p.params.grammar, p.vocabulary, model_.eos_token_ids);
    }
    if (i > 0) {
      request.sampling.seed =
          p.params.seed ? *p.params.seed + static_cast<uint64_t>(i) : RandomSeed();
    }
    Result<std::shared_ptr<RequestHandle>> handle = engine_.Submit(std::move(request));
    if (!handle.ok()) {
      x->CancelAll();
      x->choices.clear();
      x->code = HttpCode(handle.status());
      x->answer = ErrorBody(x->code, handle.status().message());
      x->Wake();
      return;
    }
    Exchange::Choice choice;
    choice.stream = std::make_shared<AnswerStream>(std::move(handle).value(), model_.tokenizer,
                                                   p.params.stop, stop_ids);
    // Each token wakes the connection to take it (the exchange, not the handle, owns the link).
    choice.stream->SetNotify([weak = std::weak_ptr<Exchange>(x)] {
      if (std::shared_ptr<Exchange> woken = weak.lock()) {
        MutexLock lock(&woken->mu);
        woken->Wake();
      }
    });
    x->choices.push_back(std::move(choice));
  }
  x->header.endpoint = p.endpoint;
  x->header.id = std::string(p.endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") +
                 std::to_string(next_id_++);
  x->header.created = UnixNow();
  x->header.model = model_.name;
  x->streamed = p.params.stream;
  x->logprobs = p.params.logprobs;
  x->tool_calls = p.tool_calls;
  x->parallel_tool_calls = p.parallel_tool_calls;
  x->tokenizer = model_.tokenizer;
  x->include_usage = p.params.include_usage;
  x->prompt_tokens = p.prompt_tokens;
  x->Wake();
}

void Server::Finish(Exchange& x) {
  if (x.finished) return;
  x.finished = true;
  // A request still running (its client left, or the server stopped): its slot is freed at the
  // next token boundary.
  x.CancelAll();
  if (x.counted) metrics_.RequestFinished(x.endpoint(), x.code, x.code == 200 ? x.ttft : -1.0);
  if (x.active) {
    MutexLock lock(&mu_);
    if (--active_ == 0) changed_.NotifyAll();
  }
}

void Server::Shutdown() {
  const auto deadline =
      Clock::now() + milliseconds(static_cast<int64_t>(options_.drain_seconds * 1000));
  bool cut = false;
  std::vector<std::shared_ptr<Exchange>> open;
  {
    MutexLock lock(&mu_);
    draining_ = true;
    // The requests in flight run to their end, until the deadline.
    while (active_ != 0) {
      if (changed_.WaitUntil(&mu_, deadline)) {
        cut = active_ != 0;
        break;
      }
    }
    stopping_ = true;
    open.assign(exchanges_.begin(), exchanges_.end());
  }
  // Whatever still waits is cancelled and woken, to answer 503 or end its stream: nothing is
  // suspended when the daemon stops (libmicrohttpd requires it).
  for (const std::shared_ptr<Exchange>& x : open) {
    MutexLock lock(&x->mu);
    x->stopping = true;
    x->CancelAll();
    x->Wake();
  }
  const int remaining = connections_.open();
  MutexLock lock(&mu_);
  stop_ = true;
  changed_.NotifyAll();
  while (!served_) changed_.Wait(&mu_);
  lock.Unlock();
  if (cut || remaining > 0) {
    std::fprintf(stderr, "drain: %s; closed %d connection%s that remained (--drain-seconds %g)\n",
                 cut ? "requests still running at the deadline were cut" : "every request done",
                 remaining, remaining == 1 ? "" : "s", options_.drain_seconds);
  }
  engine_.Drain();  // quick now: every request has finished or been cancelled
}

Status Server::CheckModelName(const std::string& name, int* code) const {
  if (name.empty() || name == model_.name || name == model_.path) return Status::Ok();
  *code = 404;
  return NotFoundError("the model '" + name + "' does not exist; this server serves '" +
                       model_.name + "'");
}

Result<std::string> Server::Tokenize(const std::string& body, int* code) {
  *code = 400;
  SY_ASSIGN_OR_RETURN(TokenizeRequest r, ParseTokenizeRequest(body));
  SY_RETURN_IF_ERROR(CheckModelName(r.model, code));
  if (model_.tokenizer == nullptr) {
    return InvalidArgumentError("the model '" + model_.name + "' has no tokenizer");
  }
  std::string text;
  if (r.prompt.has_value()) {
    text = std::move(*r.prompt);
  } else {
    if (model_.chat_template == nullptr) return InvalidArgumentError(model_.no_chat_template);
    std::vector<ChatMessageText> messages;
    for (ChatMessage& m : r.messages) {
      messages.push_back(
          ChatMessageText{std::move(m.role), std::move(m.content), std::move(m.fields)});
    }
    SY_ASSIGN_OR_RETURN(text, model_.chat_template->Render(messages, r.add_generation_prompt,
                                                           r.chat_template_kwargs, r.tools));
  }
  SY_ASSIGN_OR_RETURN(std::vector<int32_t> ids, model_.tokenizer->Encode(text));
  return TokenizeResponse(ids, model_.context);
}

Result<std::string> Server::Detokenize(const std::string& body, int* code) {
  *code = 400;
  SY_ASSIGN_OR_RETURN(DetokenizeRequest r, ParseDetokenizeRequest(body));
  SY_RETURN_IF_ERROR(CheckModelName(r.model, code));
  if (model_.tokenizer == nullptr) {
    return InvalidArgumentError("the model '" + model_.name + "' has no tokenizer");
  }
  const int64_t vocab = model_.tokenizer->vocab_size();
  for (const int32_t id : r.tokens) {
    if (id >= vocab) {
      return InvalidArgumentError("'tokens' holds " + std::to_string(id) +
                                  ", outside the tokenizer's vocabulary of " +
                                  std::to_string(vocab));
    }
  }
  SY_ASSIGN_OR_RETURN(std::string text, model_.tokenizer->Decode(r.tokens));
  return DetokenizeResponse(text);
}

Status Server::PrepareTools(const nlohmann::ordered_json& tools, const ToolChoice& choice,
                            bool parallel, Prepared* p) {
  if (!model_.chat_template->uses_hermes_tool_calls()) {
    return InvalidArgumentError("the model '" + model_.name +
                                "' has a chat template that defines no tool-call format this "
                                "server reads (<tool_call> blocks, as Qwen's and Hermes' "
                                "templates ask for); send the request without 'tools'");
  }
  if (p->params.stream && p->params.logprobs >= 0) {
    return InvalidArgumentError(
        "'logprobs' with 'tools' and 'stream' is not supported: a "
        "streamed answer with tools is sent whole when it ends");
  }
  p->tool_calls = true;
  p->parallel_tool_calls = parallel;
  if (choice.kind == ToolChoice::kRequired || choice.kind == ToolChoice::kNamed) {
    if (p->params.grammar != nullptr) {
      return InvalidArgumentError(
          "'tool_choice' " +
          std::string(choice.kind == ToolChoice::kRequired ? "\"required\"" : "naming a function") +
          " and 'response_format' both constrain the answer: send one");
    }
    // The answer is one call, of the named function or of any: constrained as response_format
    // is, to the function's parameters schema.
    std::vector<std::pair<std::string, nlohmann::ordered_json>> functions;
    for (const auto& t : tools) {
      const std::string name = t["function"]["name"].get<std::string>();
      if (choice.kind == ToolChoice::kNamed && name != choice.name) continue;
      functions.emplace_back(name, t["function"].value("parameters", nlohmann::ordered_json()));
    }
    Result<Grammar> grammar = HermesToolCallGrammar(functions);
    if (!grammar.ok()) return grammar.status().WithContext("'tools'");
    p->params.grammar = std::make_shared<const Grammar>(std::move(grammar).value());
  }
  return Status::Ok();
}

Result<Server::Prepared> Server::Prepare(const std::string& body, bool chat, int* code) {
  *code = 400;
  Prepared p;
  p.endpoint = chat ? Endpoint::kChat : Endpoint::kCompletion;
  std::string model_name;
  std::vector<int32_t> prompt;
  std::optional<std::string> text;
  std::vector<ChatMessageText> messages;
  nlohmann::json template_kwargs;
  nlohmann::ordered_json tools;
  ToolChoice tool_choice;
  bool parallel_tool_calls = true;
  if (chat) {
    SY_ASSIGN_OR_RETURN(ChatRequest r, ParseChatRequest(body));
    model_name = std::move(r.model);
    p.params = std::move(r.params);
    template_kwargs = std::move(r.chat_template_kwargs);
    tool_choice = std::move(r.tool_choice);
    parallel_tool_calls = r.parallel_tool_calls;
    if (tool_choice.kind != ToolChoice::kNone) tools = std::move(r.tools);
    for (ChatMessage& m : r.messages) {
      messages.push_back(
          ChatMessageText{std::move(m.role), std::move(m.content), std::move(m.fields)});
    }
  } else {
    SY_ASSIGN_OR_RETURN(CompletionRequest r, ParseCompletionRequest(body));
    model_name = std::move(r.model);
    p.params = std::move(r.params);
    text = std::move(r.prompt_text);
    prompt = std::move(r.prompt_ids);
  }
  SY_RETURN_IF_ERROR(CheckModelName(model_name, code));
  if (chat) {
    if (model_.chat_template == nullptr) return InvalidArgumentError(model_.no_chat_template);
    if (!tools.is_null()) {
      SY_RETURN_IF_ERROR(PrepareTools(tools, tool_choice, parallel_tool_calls, &p));
    }
    SY_ASSIGN_OR_RETURN(std::string rendered,
                        model_.chat_template->Render(messages, /*add_generation_prompt=*/true,
                                                     template_kwargs, tools));
    text = std::move(rendered);
  }
  if (text.has_value()) {
    if (model_.tokenizer == nullptr) {
      return InvalidArgumentError("the model '" + model_.name +
                                  "' has no tokenizer; send 'prompt' as an array of token ids");
    }
    SY_ASSIGN_OR_RETURN(prompt, model_.tokenizer->Encode(*text));
  }
  if (p.params.grammar != nullptr) {
    if (model_.tokenizer == nullptr) {
      return InvalidArgumentError("'response_format' constrains text, and the model '" +
                                  model_.name + "' has no tokenizer");
    }
    if (p.params.ignore_eos) {
      return InvalidArgumentError(
          "'response_format' ends the answer at the model's end-of-sequence token, which "
          "'ignore_eos' turns off: send one of them");
    }
    if (model_.eos_token_ids.empty()) {
      return InvalidArgumentError(
          "'response_format' ends the answer at the model's "
          "end-of-sequence token, and the model '" +
          model_.name + "' names none (generation_config.json)");
    }
    SY_ASSIGN_OR_RETURN(p.vocabulary, vocabulary_.Get(*model_.tokenizer, model_.vocab_size));
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
  s.min_p = p.params.min_p;
  s.repetition_penalty = p.params.repetition_penalty;
  s.presence_penalty = p.params.presence_penalty;
  s.frequency_penalty = p.params.frequency_penalty;
  s.logit_bias = p.params.logit_bias;
  p.request.logprobs = p.params.logprobs;
  s.seed = p.params.seed.value_or(RandomSeed());
  s.max_new_tokens = max_tokens;
  s.stop_tokens = p.params.stop_token_ids;
  if (!p.params.ignore_eos) {
    s.stop_tokens.insert(s.stop_tokens.end(), model_.eos_token_ids.begin(),
                         model_.eos_token_ids.end());
  }
  return p;
}

}  // namespace sy::serving
