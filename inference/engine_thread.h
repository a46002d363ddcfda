// EngineThread: one GenerateEngine (inference/generate_engine.h) driven by a thread of its own and
// fed by any number of other threads: the shape of a server, whose request threads submit and read
// tokens while one engine thread runs the batch.
//
//   std::unique_ptr<EngineThread> worker = EngineThread::Start(std::move(engine));
//   SY_ASSIGN_OR_RETURN(std::shared_ptr<RequestHandle> h, worker->Submit(request));  // any thread
//   for (RequestUpdate u; !u.finished;) {
//     u = h->Next(std::chrono::milliseconds(100));   // the tokens drawn since the last call
//     ... if the client left: h->Cancel();
//   }
//
// The engine thread loops: it hands the requests queued since its last pass to the engine, tells
// the engine to cancel those whose handle was cancelled, runs the functions given to Call, then
// runs one GenerateEngine::Step (prefill of the requests that find a free slot, one decode step of
// the running batch), delivers every token to its request's handle as the engine draws it, and
// delivers the end of each request that finished. So requests join and leave the running batch at
// token boundaries, and a request thread never touches the engine. With nothing to do, it sleeps
// until a request, a cancellation or a Call arrives.
//
// A step that fails (an I/O error from an expert tier, say) ends every request in the engine with
// that Status; the thread keeps serving the requests that come after.
//
// Shutdown: Drain() refuses new requests (Submit: Unavailable) and waits for those in flight to
// finish; the destructor cancels whatever is still in flight (each handle ends as cancelled) and
// joins the thread.
//
// Ownership: owns the engine, which borrows its model and provider: both must outlive this object.
// A RequestHandle is shared by its submitter and the engine thread; it outlives either.
// Thread-safety: every public member of both classes may be called from any thread (the engine
// itself is touched only by the engine thread, and by Call's functions, which run there).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "inference/generate_engine.h"
#include "inference/token_logprobs.h"
#include "runtime/core/mutex.h"
#include "runtime/core/status.h"

namespace sy {

// What a request produced since the previous RequestHandle::Next.
struct RequestUpdate {
  std::vector<int32_t> tokens;  // drawn since the previous call, in order
  // Parallel to `tokens` when the request asked for logprobs (GenerateRequest::logprobs >= 0).
  std::vector<TokenLogprob> logprobs;
  bool finished = false;  // the request has ended; no update follows
  // When finished: why it ended, the engine's error (not OK when a step failed, the tokens drawn
  // before it still count) and the time from Submit to its first token.
  FinishReason finish = FinishReason::kMaxTokens;
  Status status;
  double ttft_seconds = 0.0;
};

// One submitted request, as its submitter sees it. Thread-safe.
class RequestHandle {
 public:
  // Blocks until the request has drawn a token or ended, or `timeout` has passed (then the update
  // is empty and not finished). After the finished update, returns finished updates at once.
  RequestUpdate Next(std::chrono::milliseconds timeout) SY_EXCLUDES(mu_);
  // Ends the request at its next token boundary, or before it starts if it waits; the update that
  // ends it says kCancelled (or how it ended, if it ended first). Idempotent.
  void Cancel() { cancel_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancel_.load(std::memory_order_relaxed); }
  // For a reader that cannot block in Next (an event loop): `notify` is called on the engine
  // thread after each token and at the end, outside the handle's lock. It must be quick and must
  // not wait on the engine thread. Replaces an earlier one; what arrived before it was set is not
  // notified, so call Next(0) after setting it.
  void SetNotify(std::function<void()> notify) SY_EXCLUDES(mu_);

 private:
  friend class EngineThread;
  void Push(int32_t token, TokenLogprob* logprob) SY_EXCLUDES(mu_);
  void Finish(FinishReason finish, Status status, double ttft_seconds) SY_EXCLUDES(mu_);

  std::atomic<bool> cancel_{false};
  Mutex mu_;
  CondVar cv_;
  std::vector<int32_t> pending_ SY_GUARDED_BY(mu_);
  std::vector<TokenLogprob> pending_logprobs_ SY_GUARDED_BY(mu_);
  bool finished_ SY_GUARDED_BY(mu_) = false;
  RequestUpdate end_ SY_GUARDED_BY(mu_);  // the finishing fields, once finished_
  std::shared_ptr<const std::function<void()>> notify_ SY_GUARDED_BY(mu_);
};

class EngineThread {
 public:
  // Starts the engine thread; it owns `engine` from now on.
  static std::unique_ptr<EngineThread> Start(std::unique_ptr<GenerateEngine> engine);
  // Cancels what is in flight, waits for the engine thread to finish its current step, joins it.
  ~EngineThread();
  EngineThread(const EngineThread&) = delete;
  EngineThread& operator=(const EngineThread&) = delete;

  // Queues `request` for the engine. The errors of GenerateEngine::Check, checked here, on the
  // calling thread; Unavailable once Drain has begun.
  Result<std::shared_ptr<RequestHandle>> Submit(GenerateRequest request) SY_EXCLUDES(mu_);

  // Runs `fn` on the engine thread between two steps and returns once it has run (metrics read the
  // engine, its decoder and its provider this way). Unavailable after the thread has stopped.
  Status Call(const std::function<void(GenerateEngine&)>& fn) SY_EXCLUDES(mu_);

  // Refuses new requests from now on and waits until every request in flight has finished.
  void Drain() SY_EXCLUDES(mu_);

  // Requests submitted and not finished yet (queued here, waiting in the engine, or running).
  int in_flight() const SY_EXCLUDES(mu_);
  // Requests queued here that the engine has not taken yet.
  int queued() const SY_EXCLUDES(mu_);
  // The engine's limits, fixed at Create (safe from any thread).
  const EngineOptions& options() const { return engine_->options(); }

 private:
  struct Pending {
    GenerateRequest request;
    std::shared_ptr<RequestHandle> handle;
  };
  struct Active {
    int64_t id = 0;  // the engine's
    std::shared_ptr<RequestHandle> handle;
    bool cancel_sent = false;
  };
  explicit EngineThread(std::unique_ptr<GenerateEngine> engine);
  void Loop() SY_EXCLUDES(mu_);
  // Engine thread: ends every active request with `status` (a failed step).
  void FailAll(const Status& status) SY_EXCLUDES(mu_);
  // Engine thread: delivers the end of every active request the engine has finished.
  void CollectFinished() SY_EXCLUDES(mu_);

  std::unique_ptr<GenerateEngine> engine_;
  std::thread thread_;

  mutable Mutex mu_;
  CondVar wake_;     // the engine thread waits here for work
  CondVar drained_;  // Drain waits here for in_flight_ to reach 0
  CondVar called_;   // Call waits here for its function to have run
  std::deque<Pending> inbox_ SY_GUARDED_BY(mu_);
  // Each call's function and its done flag (Call's, read and written under mu_).
  std::deque<std::pair<const std::function<void(GenerateEngine&)>*, bool*>> calls_
      SY_GUARDED_BY(mu_);
  int in_flight_ SY_GUARDED_BY(mu_) = 0;
  bool draining_ SY_GUARDED_BY(mu_) = false;
  bool stopping_ SY_GUARDED_BY(mu_) = false;
  bool stopped_ SY_GUARDED_BY(mu_) = false;

  // Engine thread only.
  std::vector<Active> active_;
};

}  // namespace sy
