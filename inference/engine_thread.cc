#include "inference/engine_thread.h"

#include <utility>

namespace sy {

RequestUpdate RequestHandle::Next(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(&mu_);
  while (pending_.empty() && !finished_) {
    if (cv_.WaitUntil(&mu_, deadline)) break;
  }
  RequestUpdate update;
  update.tokens.swap(pending_);
  update.logprobs.swap(pending_logprobs_);
  if (finished_) {
    update.finished = true;
    update.finish = end_.finish;
    update.status = end_.status;
    update.ttft_seconds = end_.ttft_seconds;
  }
  return update;
}

void RequestHandle::SetNotify(std::function<void()> notify) {
  MutexLock lock(&mu_);
  notify_ = std::make_shared<const std::function<void()>>(std::move(notify));
}

void RequestHandle::Push(int32_t token, TokenLogprob* logprob) {
  std::shared_ptr<const std::function<void()>> notify;
  {
    MutexLock lock(&mu_);
    pending_.push_back(token);
    if (logprob != nullptr) pending_logprobs_.push_back(std::move(*logprob));
    notify = notify_;
  }
  cv_.NotifyAll();
  if (notify) (*notify)();
}

void RequestHandle::Finish(FinishReason finish, Status status, double ttft_seconds) {
  std::shared_ptr<const std::function<void()>> notify;
  {
    MutexLock lock(&mu_);
    finished_ = true;
    end_.finish = finish;
    end_.status = std::move(status);
    end_.ttft_seconds = ttft_seconds;
    notify = notify_;
  }
  cv_.NotifyAll();
  if (notify) (*notify)();
}

EngineThread::EngineThread(std::unique_ptr<GenerateEngine> engine) : engine_(std::move(engine)) {}

std::unique_ptr<EngineThread> EngineThread::Start(std::unique_ptr<GenerateEngine> engine) {
  std::unique_ptr<EngineThread> worker(new EngineThread(std::move(engine)));
  worker->thread_ = std::thread([w = worker.get()] { w->Loop(); });
  return worker;
}

EngineThread::~EngineThread() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

Result<std::shared_ptr<RequestHandle>> EngineThread::Submit(GenerateRequest request) {
  SY_RETURN_IF_ERROR(engine_->Check(request));
  auto handle = std::make_shared<RequestHandle>();
  {
    MutexLock lock(&mu_);
    if (draining_ || stopping_) {
      return UnavailableError("the engine is shutting down and takes no new requests");
    }
    inbox_.push_back(Pending{std::move(request), handle});
    ++in_flight_;
  }
  wake_.NotifyAll();
  return handle;
}

Status EngineThread::Call(const std::function<void(GenerateEngine&)>& fn) {
  bool done = false;
  MutexLock lock(&mu_);
  if (stopped_ || stopping_) return UnavailableError("the engine thread has stopped");
  calls_.emplace_back(&fn, &done);
  wake_.NotifyAll();
  while (!done && !stopped_) called_.Wait(&mu_);
  return done ? Status::Ok() : UnavailableError("the engine thread stopped before the call ran");
}

void EngineThread::Drain() {
  MutexLock lock(&mu_);
  draining_ = true;
  while (in_flight_ != 0) drained_.Wait(&mu_);
}

int EngineThread::in_flight() const {
  MutexLock lock(&mu_);
  return in_flight_;
}

int EngineThread::queued() const {
  MutexLock lock(&mu_);
  return static_cast<int>(inbox_.size());
}

void EngineThread::Loop() {
  std::deque<Pending> taken;
  std::deque<std::pair<const std::function<void(GenerateEngine&)>*, bool*>> calls;
  // A request leaves in_flight_ before its handle says it finished, so that a submitter that saw
  // its end never counts it as in flight.
  auto finished = [this](RequestHandle& handle, FinishReason finish, Status status, double ttft) {
    {
      MutexLock lock(&mu_);
      if (--in_flight_ == 0) drained_.NotifyAll();
    }
    handle.Finish(finish, std::move(status), ttft);
  };
  while (true) {
    {
      MutexLock lock(&mu_);
      // The engine is touched only by this thread, so reading idle() under mu_ is safe.
      while (!stopping_ && inbox_.empty() && calls_.empty() && engine_->idle()) wake_.Wait(&mu_);
      if (stopping_) break;
      taken.swap(inbox_);
      calls.swap(calls_);
    }
    for (const auto& [fn, done] : calls) {
      (*fn)(*engine_);
      MutexLock lock(&mu_);
      *done = true;
    }
    if (!calls.empty()) called_.NotifyAll();
    calls.clear();
    for (Pending& p : taken) {
      if (p.handle->cancelled()) {
        finished(*p.handle, FinishReason::kCancelled, Status::Ok(), 0.0);
        continue;
      }
      RequestHandle* handle = p.handle.get();  // the Active entry keeps it alive
      const int32_t logprobs = p.request.logprobs;
      Result<int64_t> id =
          engine_->Submit(std::move(p.request), [handle, logprobs](const TokenEvent& e) {
            if (logprobs < 0) {
              handle->Push(e.token, nullptr);
            } else {
              TokenLogprob logprob = ComputeTokenLogprob(e.logits, e.token, logprobs);
              handle->Push(e.token, &logprob);
            }
            return !handle->cancelled();
          });
      if (!id.ok()) {
        finished(*p.handle, FinishReason::kCancelled, id.status(), 0.0);
        continue;
      }
      active_.push_back(Active{*id, std::move(p.handle)});
    }
    taken.clear();
    for (Active& a : active_) {
      if (!a.cancel_sent && a.handle->cancelled()) {
        engine_->Cancel(a.id);
        a.cancel_sent = true;
      }
    }
    if (!engine_->idle()) {
      const Status step = engine_->Step();
      if (!step.ok()) FailAll(step);
    }
    CollectFinished();
  }
  // Stopping: whatever is in flight ends cancelled.
  for (Active& a : active_) engine_->Cancel(a.id);
  CollectFinished();
  std::deque<Pending> left;
  {
    MutexLock lock(&mu_);
    left.swap(inbox_);
    stopped_ = true;
    calls_.clear();
  }
  called_.NotifyAll();
  for (Pending& p : left) finished(*p.handle, FinishReason::kCancelled, Status::Ok(), 0.0);
}

void EngineThread::FailAll(const Status& status) {
  {
    MutexLock lock(&mu_);
    in_flight_ -= static_cast<int>(active_.size());
    if (in_flight_ == 0) drained_.NotifyAll();
  }
  for (Active& a : active_) {
    engine_->Cancel(a.id);
    std::optional<Generation> g = engine_->TakeResult(a.id);
    a.handle->Finish(FinishReason::kCancelled, status, g ? g->ttft_seconds : 0.0);
  }
  active_.clear();
}

void EngineThread::CollectFinished() {
  for (size_t i = 0; i < active_.size();) {
    std::optional<Generation> g = engine_->TakeResult(active_[i].id);
    if (!g.has_value()) {
      ++i;
      continue;
    }
    {
      MutexLock lock(&mu_);
      if (--in_flight_ == 0) drained_.NotifyAll();
    }
    active_[i].handle->Finish(g->finish, Status::Ok(), g->ttft_seconds);
    active_[i] = std::move(active_.back());
    active_.pop_back();
  }
}

}  // namespace sy
