// `switchyard serve`: an OpenAI-compatible HTTP server (launcher/serving/server.h,
// docs/serving.md) over the generate engine, on a model opened as `generate` opens it
// (launcher/inference_session.h: the same sources, devices and expert policies).
//
//   switchyard serve --model DIR|CKPT [--host 127.0.0.1 --port 8080 --parallel 4
//                    --kv-cache-mib 1024 --context N --model-name NAME --http-threads N
//                    --max-connections N --max-connections-per-client N --keep-alive-seconds S
//                    --request-seconds S --drain-seconds S --api-key KEY --cors-origin ORIGIN]
//                    [--device cpu --dtype bf16 --threads N --policy NAME ...]
//
// The KV cache holds --parallel requests of --context tokens each (prompt + answer); --context
// defaults to the model's own context, cut to what --kv-cache-mib holds for --parallel requests.
// A tokenizer (tokenizer.json / tokenizer.model), a chat template (tokenizer_config.json) and the
// end-of-sequence ids (generation_config.json) are used when the model directory has them.
//
// stderr gets the load line and "listening on http://HOST:PORT" once requests are taken. SIGINT
// or SIGTERM: no new requests, the ones in flight are finished and answered (for at most
// --drain-seconds; then every connection is closed, whatever its client does), then exit 0; a
// second signal ends the process at once.
#include <fcntl.h>
#include <fmt/printf.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "inference/chat_template.h"
#include "inference/engine_thread.h"
#include "inference/generate_engine.h"
#include "inference/generation_config.h"
#include "inference/gguf_model.h"
#include "inference/tokenizer.h"
#include "launcher/command.h"
#include "launcher/inference_session.h"
#include "launcher/serving/server.h"
#include "runtime/core/env.h"
#include "runtime/core/host_memory.h"
#include "runtime/core/progress.h"
#include "runtime/model/kv_cache.h"

namespace sy::launcher {
namespace {

// The first SIGINT/SIGTERM writes a byte to this pipe (the watcher thread then drains the
// server); a second one ends the process with the signal's default action.
int g_signal_pipe[2] = {-1, -1};
volatile sig_atomic_t g_signalled = 0;

void OnSignal(int sig) {
  if (g_signalled != 0) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  g_signalled = 1;
  const char byte = 's';
  const ssize_t ignored = write(g_signal_pipe[1], &byte, 1);
  (void)ignored;
}

// Installs the handlers for the life of the object and restores the defaults after.
class ShutdownSignals {
 public:
  ShutdownSignals() {
    if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) return;
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a signal
  }
  ~ShutdownSignals() {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    close(g_signal_pipe[0]);
    close(g_signal_pipe[1]);
  }
  bool ok() const { return g_signal_pipe[0] >= 0; }
  // Blocks until a signal arrives (true) or Wake() is called (false).
  bool Wait() {
    char byte = 0;
    while (read(g_signal_pipe[0], &byte, 1) < 0 && errno == EINTR) {
    }
    return byte == 's';
  }
  void Wake() {
    const char byte = 'w';
    const ssize_t ignored = write(g_signal_pipe[1], &byte, 1);
    (void)ignored;
  }
};

class ServeCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    AddInferenceOptions(app, &options_, &flags_);
    app.add_option("--host", server_.host, "Address to listen on (default 127.0.0.1)");
    app.add_option("--port", server_.port, "Port to listen on; 0 picks a free one (default 8080)")
        ->check(CLI::Range(0, 65535).description("an integer from 0 to 65535"));
    app.add_option("--parallel", parallel_,
                   "Requests decoded together (the batch's slots; more wait) (default 4)")
        ->check(CLI::Range(1, 1024).description("an integer from 1 to 1024"));
    app.add_option("--kv-cache-mib", kv_cache_mib_,
                   "KV-cache budget in MiB, shared by the --parallel slots (default 1024)")
        ->check(CLI::Range(1, 1 << 24).description("an integer from 1 to 16777216"));
    app.add_option("-c,--context,--ctx-size", context_,
                   "Tokens per request, prompt + answer (default: the model's context, cut to "
                   "what --kv-cache-mib holds)")
        ->check(CLI::Range(0, 1 << 24).description("an integer from 0 to 16777216"));
    app.add_option("--model-name", model_name_,
                   "The model's id in the API (default: the model directory's name)");
    app.add_option("--http-threads", server_.http_threads,
                   "Threads that run the connections' event loops, and as many that prepare "
                   "requests (parse, template, tokenize) (default 4)")
        ->check(CLI::Range(1, 256).description("an integer from 1 to 256"));
    app.add_option("--max-connections", server_.limits.max_connections,
                   "Connections open at once; the first request past it gets 503 (default 1024)")
        ->check(CLI::Range(1, 1 << 20).description("an integer from 1 to 1048576"));
    app.add_option("--max-connections-per-client", server_.limits.max_per_client,
                   "Connections open at once from one client address; past it, 503 (default 256)")
        ->check(CLI::Range(1, 1 << 20).description("an integer from 1 to 1048576"));
    app.add_option("--keep-alive-seconds", server_.limits.keep_alive_seconds,
                   "How long a connection may wait for its next request to begin, after it "
                   "opens or its previous answer (default 10)")
        ->check(CLI::Range(0.1, 86400.0).description("seconds from 0.1 to 86400"));
    app.add_option("--request-seconds", server_.limits.request_seconds,
                   "How long a request may take to arrive entirely, headers and body, once it "
                   "has begun (default 30)")
        ->check(CLI::Range(0.1, 86400.0).description("seconds from 0.1 to 86400"));
    app.add_option("--api-key", server_.api_key,
                   "Requests to /v1/* and /tokenize, /detokenize must carry 'Authorization: "
                   "Bearer KEY' (401 otherwise); default: $SWITCHYARD_API_KEY, else none. The "
                   "variable keeps the key out of `ps`");
    app.add_option("--cors-origin", server_.cors_origins,
                   "An origin whose web pages may call the API from a browser (CORS); repeat "
                   "for more, '*' for any (default: none)");
    app.add_option("--drain-seconds", server_.drain_seconds,
                   "On SIGTERM or SIGINT, how long the requests in flight may run before every "
                   "connection is closed (default 30)")
        ->check(CLI::Range(0.0, 86400.0).description("seconds from 0 to 86400"));
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Status RunStatus() {
    SY_RETURN_IF_ERROR(ParseInferenceFlags(flags_, &options_));
    if (server_.api_key.empty()) server_.api_key = EnvString("SWITCHYARD_API_KEY", "");
    // The weights' load, on stderr: a bar on a terminal, lines otherwise.
    ProgressLine loading(stderr, "loading " + options_.model_path);
    options_.load_progress = [&loading](int64_t done, int64_t total) {
      loading.Update(done, total);
    };
    Result<std::unique_ptr<InferenceSession>> opened = InferenceSession::Open(options_);
    loading.Finish();
    SY_ASSIGN_OR_RETURN(std::unique_ptr<InferenceSession> session, std::move(opened));
    std::fprintf(stderr, "loaded %s: %s\n", session->path().c_str(), session->Describe().c_str());
    const ModelConfig& config = session->model().config();

    serving::ServedModel served;
    // The name the user gave the model: its directory (or checkpoint file) without the path.
    std::filesystem::path given(options_.model_path);
    if (!given.has_filename()) given = given.parent_path();
    served.path = options_.model_path;
    served.name = !model_name_.empty() ? model_name_ : given.filename().string();
    std::unique_ptr<Tokenizer> tokenizer;
    std::optional<ChatTemplate> chat_template;
    std::error_code ec;
    // A GGUF's tokenizer, chat template and end-of-sequence id come from its tokenizer.ggml.*
    // metadata; one that cannot be read (another tokenizer model, malformed keys) leaves token ids.
    const bool gguf = IsGgufPath(options_.model_path);
    if (gguf || std::filesystem::is_directory(options_.model_path, ec)) {
      Result<std::unique_ptr<Tokenizer>> loaded = LoadTokenizer(options_.model_path);
      if (loaded.ok()) {
        tokenizer = std::move(loaded).value();
      } else if (loaded.status().code() == StatusCode::kNotFound) {
        std::fprintf(stderr,
                     "no tokenizer.json or tokenizer.model: prompts and answers are token ids\n");
      } else if (loaded.status().code() == StatusCode::kUnavailable || gguf) {
        spdlog::warn("{}", fmt::sprintf("%s; prompts and answers are token ids",
                                        loaded.status().message().c_str()));
      } else {
        return loaded.status();
      }
      Result<ChatTemplate> loaded_template = ChatTemplate::Load(options_.model_path);
      if (loaded_template.ok()) {
        chat_template.emplace(std::move(loaded_template).value());
      } else {
        served.no_chat_template =
            "the model '" + served.name + "' cannot chat: " + loaded_template.status().message();
        if (loaded_template.status().code() != StatusCode::kNotFound) {
          spdlog::warn("{}", served.no_chat_template);
        }
      }
      Result<std::vector<int32_t>> eos =
          LoadEosTokenIds(options_.model_path, tokenizer.get(), config.vocab_size);
      if (gguf && !eos.ok()) {
        spdlog::warn("{}", fmt::sprintf("%s; answers end at their length limit",
                                        eos.status().message().c_str()));
      } else {
        SY_ASSIGN_OR_RETURN(served.eos_token_ids, std::move(eos));
      }
    } else {
      served.no_chat_template = "the model '" + served.name +
                                "' is a training checkpoint, with no chat template; use "
                                "/v1/completions with token ids";
    }
    if (tokenizer != nullptr && chat_template.has_value()) {
      served.chat_template = &*chat_template;
    } else if (chat_template.has_value()) {
      served.no_chat_template = "the model '" + served.name +
                                "' has a chat template but no "
                                "tokenizer to encode it";
    }
    served.tokenizer = tokenizer.get();
    served.vocab_size = config.vocab_size;

    // Each slot gets its share of the KV budget; the context is what the share holds, or less.
    const int64_t per_token = KvCache::BytesPerToken(config);
    const int64_t budget = static_cast<int64_t>(kv_cache_mib_) << 20;
    const int64_t fits = budget / (per_token * parallel_);
    const int64_t wanted = context_ > 0                     ? context_
                           : session->trained_context() > 0 ? session->trained_context()
                                                            : 4096;
    served.context = std::min(wanted, fits);
    if (served.context < 2) {
      return InvalidArgumentError("--kv-cache-mib " + std::to_string(kv_cache_mib_) + " holds " +
                                  std::to_string(fits) + " tokens per request for --parallel " +
                                  std::to_string(parallel_) + " (" + std::to_string(per_token) +
                                  " bytes per token); raise it or lower --parallel");
    }
    // The KV cache is refused before it is allocated when the memory it goes to cannot hold it,
    // with the largest settings that fit: host memory on cpu and sim, the device's on cuda (free
    // on the device plus what its cache holds unused, after the weights were loaded).
    const bool on_host = options_.device == "cpu" || options_.device == "sim";
    const double available = on_host
                                 ? AvailableHostMemory()
                                 : static_cast<double>(session->backend().memory_stats().available);
    const double kv_bytes = static_cast<double>(per_token) * parallel_ * served.context;
    if (available > 0 && kv_bytes > available) {
      const auto most_context =
          static_cast<long long>(available / (static_cast<double>(per_token) * parallel_));
      return ResourceExhaustedError(
          "the KV cache of --parallel " + std::to_string(parallel_) + " requests of " +
          std::to_string(served.context) + " tokens needs " + FormatMemory(kv_bytes) + ", and " +
          (on_host ? std::string("this machine") : options_.device) + " has " +
          FormatMemory(available) + " available; lower --kv-cache-mib to at most " +
          std::to_string(static_cast<long long>(available / (1 << 20))) +
          ", or --context to at most " + std::to_string(most_context));
    }
    served.context_why = served.context < wanted
                             ? "--kv-cache-mib " + std::to_string(kv_cache_mib_) +
                                   " over --parallel " + std::to_string(parallel_) + " requests"
                             : (context_ > 0 ? "--context" : "the model's context");
    SY_ASSIGN_OR_RETURN(std::unique_ptr<GenerateEngine> engine,
                        GenerateEngine::Create(
                            session->model(), &session->provider(),
                            EngineOptions{.max_batch = parallel_, .max_context = served.context}));
    std::unique_ptr<EngineThread> worker = EngineThread::Start(std::move(engine));

    ShutdownSignals signals;
    if (!signals.ok()) return IOError("pipe2 for the signal handler failed");
    serving::Server server(std::move(served), *worker, server_);
    SY_RETURN_IF_ERROR(server.Bind());
    std::fprintf(stderr,
                 "listening on http://%s:%d: model '%s', %d requests at once of up to %lld tokens "
                 "(KV cache %.1f MiB), policy %s, %s, %s\n",
                 server_.host.c_str(), server.port(), server.model().name.c_str(), parallel_,
                 static_cast<long long>(server.model().context),
                 static_cast<double>(per_token * parallel_ * server.model().context) / (1 << 20),
                 session->provider().name().c_str(),
                 tokenizer != nullptr ? "text or token-id prompts" : "token-id prompts only",
                 chat_template.has_value() && tokenizer != nullptr ? "chat template" : "no chat");
    std::fflush(stderr);
    std::thread watcher([&] {
      if (!signals.Wait()) return;
      std::fprintf(stderr, "shutting down: finishing the requests in flight\n");
      server.Shutdown();
    });
    const Status served_status = server.Serve();
    signals.Wake();
    watcher.join();
    worker.reset();
    std::fprintf(stderr, "stopped\n");
    return served_status;
  }

  InferenceOptions options_;
  InferenceFlags flags_;
  serving::ServerOptions server_;
  int parallel_ = 4;
  int kv_cache_mib_ = 1024;
  int context_ = 0;
  std::string model_name_;
};

}  // namespace

SY_REGISTER_COMMAND("serve", "Serve a model over an OpenAI-compatible HTTP API", ServeCommand);

}  // namespace sy::launcher
