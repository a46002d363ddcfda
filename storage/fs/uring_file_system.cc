#include "storage/fs/uring_file_system.h"

#include <liburing.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/core/env.h"
#include "runtime/core/mutex.h"
#include "storage/fs/file_descriptors.h"
#include "storage/fs/posix_file_system.h"

namespace sy::storage {

namespace internal {

UringStep ClassifyUringCompletion(int res, size_t remaining) {
  if (res == -EAGAIN || res == -EINTR) return UringStep::kRetry;
  if (res < 0) return UringStep::kError;
  if (static_cast<size_t>(res) >= remaining) return UringStep::kDone;
  if (res == 0) return UringStep::kEndOfFile;
  return UringStep::kContinue;
}

}  // namespace internal

namespace {

// The owner of one io_uring instance.
class UringRing {
 public:
  static Result<std::unique_ptr<UringRing>> Create(unsigned entries) {
    std::unique_ptr<UringRing> ring(new UringRing());
    io_uring_params params{};
    params.flags = IORING_SETUP_CQSIZE;
    params.cq_entries = entries * 2;
    int rc = io_uring_queue_init_params(entries, &ring->ring_, &params);
    if (rc < 0) {
      return UnavailableError("io_uring_queue_init(" + std::to_string(entries) +
                              " entries) failed: " + std::strerror(-rc));
    }
    ring->initialized_ = true;
    return ring;
  }
  ~UringRing() {
    if (initialized_) io_uring_queue_exit(&ring_);
  }
  UringRing(const UringRing&) = delete;
  UringRing& operator=(const UringRing&) = delete;

  io_uring* get() { return &ring_; }

 private:
  UringRing() = default;
  io_uring ring_{};
  bool initialized_ = false;
};

// One op of a batch; completes when its last block completes.
struct Request {
  const std::string* path = nullptr;  // owned by the File, which outlives its I/O
  IoKind kind = IoKind::kRead;
  uint64_t offset = 0;
  size_t length = 0;
  size_t index = 0;
  std::shared_ptr<IoDone> done;
  std::atomic<size_t> remaining{0};
  Mutex mutex;
  Status first_error SY_GUARDED_BY(mutex);
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// One block of a request: the unit that goes into the ring.
struct Block {
  std::shared_ptr<Request> request;
  int fd = -1;           // the descriptor in use (direct or buffered)
  int buffered_fd = -1;  // for finishing an unaligned remainder
  bool direct = false;
  uint64_t offset = 0;
  char* buf = nullptr;   // what the kernel reads into / writes from
  char* user = nullptr;  // the caller's memory when `buf` is a bounce buffer
  std::unique_ptr<void, FreeDeleter> bounce;
  size_t length = 0;
  size_t done = 0;
  int fixed_index = -1;
  int retries = 0;
};

constexpr int kMaxRetries = 10000;

}  // namespace

class UringEngine {
 public:
  static Result<std::unique_ptr<UringEngine>> Create(const IoOptions& options) {
    if (options.queue_depth < 1 || options.queue_depth > 4096) {
      return InvalidArgumentError("io_uring queue_depth " + std::to_string(options.queue_depth) +
                                  " is out of range: use 1..4096");
    }
    if (options.block_size == 0 || options.block_size % kDirectAlignment != 0) {
      return InvalidArgumentError("io_uring block_size " + std::to_string(options.block_size) +
                                  " must be a positive multiple of 4096");
    }
    SY_ASSIGN_OR_RETURN(std::unique_ptr<UringRing> ring,
                        UringRing::Create(static_cast<unsigned>(options.queue_depth)));
    return std::unique_ptr<UringEngine>(new UringEngine(options, std::move(ring)));
  }

  ~UringEngine() {
    MutexLock lock(&mutex_);
    while (in_flight_ != 0 || !pending_.empty()) idle_cv_.Wait(&mutex_);
    stopping_ = true;
    io_uring_sqe* sqe = io_uring_get_sqe(ring_->get());
    SY_CHECK(sqe != nullptr) << "io_uring submission queue full on an idle ring";
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data(sqe, nullptr);
    SubmitLocked();
    lock.Unlock();
    reaper_.join();
    if (registered_) io_uring_unregister_buffers(ring_->get());
  }

  UringEngine(const UringEngine&) = delete;
  UringEngine& operator=(const UringEngine&) = delete;

  const IoOptions& options() const { return options_; }

  void Enqueue(std::vector<Block*> blocks) SY_EXCLUDES(mutex_) {
    MutexLock lock(&mutex_);
    for (Block* block : blocks) {
      if (block->direct && block->user == nullptr) block->fixed_index = FindRegionLocked(*block);
      pending_.push_back(block);
    }
    FillLocked();
  }

  Status Register(std::span<const iovec> regions) SY_EXCLUDES(mutex_) {
    if (!options_.register_buffers) return Status::Ok();
    if (regions.size() > 1024) {
      return InvalidArgumentError("io_uring can register at most 1024 buffers, got " +
                                  std::to_string(regions.size()));
    }
    MutexLock lock(&mutex_);
    while (in_flight_ != 0 || !pending_.empty()) idle_cv_.Wait(&mutex_);
    if (registered_) {
      io_uring_unregister_buffers(ring_->get());
      registered_ = false;
      regions_.clear();
    }
    if (regions.empty()) return Status::Ok();
    int rc = io_uring_register_buffers(ring_->get(), regions.data(),
                                       static_cast<unsigned>(regions.size()));
    if (rc < 0) {
      return UnavailableError("io_uring_register_buffers(" + std::to_string(regions.size()) +
                              " regions) failed: " + std::strerror(-rc) +
                              "; I/O continues without fixed buffers (raise RLIMIT_MEMLOCK)");
    }
    registered_ = true;
    regions_.assign(regions.begin(), regions.end());
    return Status::Ok();
  }

  void Unregister() SY_EXCLUDES(mutex_) { Register({}).IgnoreError(); }

 private:
  UringEngine(const IoOptions& options, std::unique_ptr<UringRing> ring)
      : options_(options), ring_(std::move(ring)) {
    reaper_ = std::thread([this] { ReapLoop(); });
  }

  int FindRegionLocked(const Block& block) const SY_REQUIRES(mutex_) {
    auto begin = reinterpret_cast<uintptr_t>(block.buf);
    for (size_t i = 0; i < regions_.size(); ++i) {
      auto base = reinterpret_cast<uintptr_t>(regions_[i].iov_base);
      if (begin >= base && begin + block.length <= base + regions_[i].iov_len) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }

  void PrepLocked(io_uring_sqe* sqe, Block* block) SY_REQUIRES(mutex_) {
    char* buf = block->buf + block->done;
    auto length = static_cast<unsigned>(block->length - block->done);
    uint64_t offset = block->offset + block->done;
    bool read = block->request->kind == IoKind::kRead;
    if (block->fixed_index >= 0) {
      if (read) {
        io_uring_prep_read_fixed(sqe, block->fd, buf, length, offset, block->fixed_index);
      } else {
        io_uring_prep_write_fixed(sqe, block->fd, buf, length, offset, block->fixed_index);
      }
    } else if (read) {
      io_uring_prep_read(sqe, block->fd, buf, length, offset);
    } else {
      io_uring_prep_write(sqe, block->fd, buf, length, offset);
    }
    io_uring_sqe_set_data(sqe, block);
  }

  void FillLocked() SY_REQUIRES(mutex_) {
    bool any = false;
    while (!pending_.empty() && in_flight_ < options_.queue_depth) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring_->get());
      if (sqe == nullptr) break;
      PrepLocked(sqe, pending_.front());
      pending_.pop_front();
      ++in_flight_;
      any = true;
    }
    if (any) SubmitLocked();
  }

  void SubmitLocked() SY_REQUIRES(mutex_) {
    for (int attempt = 0;; ++attempt) {
      int rc = io_uring_submit(ring_->get());
      if (rc >= 0) return;
      // The ring refuses only transiently (interrupted, or the kernel briefly out of resources);
      // the queued entries stay in the ring and go with the next attempt.
      SY_CHECK((rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) && attempt < 100000)
          << "io_uring_submit failed: " << std::strerror(-rc);
      std::this_thread::yield();
    }
  }

  struct Finished {
    Block* block;
    Status status;
  };

  void ReapLoop() SY_EXCLUDES(mutex_) {
    std::vector<std::pair<Block*, int>> completions;
    std::vector<Block*> resubmit;
    std::vector<Finished> finished;
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      int rc = io_uring_wait_cqe(ring_->get(), &cqe);
      if (rc == -EINTR || rc == -EAGAIN) continue;
      SY_CHECK(rc == 0) << "io_uring_wait_cqe failed: " << std::strerror(-rc);
      completions.clear();
      bool stop = false;
      unsigned head = 0;
      unsigned seen = 0;
      io_uring_for_each_cqe(ring_->get(), head, cqe) {
        auto* block = static_cast<Block*>(io_uring_cqe_get_data(cqe));
        if (block == nullptr) {
          stop = true;
        } else {
          completions.emplace_back(block, cqe->res);
        }
        ++seen;
      }
      io_uring_cq_advance(ring_->get(), seen);
      // Every reaped block was prepared, and its SQE submitted, under mutex_ (SubmitBatch fills
      // the block before Enqueue). The kernel orders the CQE after that, but ThreadSanitizer
      // cannot see through the ring: taking mutex_ once here makes the order one it sees.
      { MutexLock order(&mutex_); }

      resubmit.clear();
      finished.clear();
      for (auto [block, res] : completions) Advance(block, res, resubmit, finished);
      {
        MutexLock lock(&mutex_);
        in_flight_ -= static_cast<int>(completions.size());
        for (auto it = resubmit.rbegin(); it != resubmit.rend(); ++it) pending_.push_front(*it);
        FillLocked();
        if (in_flight_ == 0 && pending_.empty()) idle_cv_.NotifyAll();
      }
      for (Finished& f : finished) Finish(f.block, std::move(f.status));
      if (stop) return;
    }
  }

  void Advance(Block* block, int res, std::vector<Block*>& resubmit,
               std::vector<Finished>& finished) {
    size_t remaining = block->length - block->done;
    const Request& request = *block->request;
    uint64_t at = block->offset + block->done;
    switch (internal::ClassifyUringCompletion(res, remaining)) {
      case internal::UringStep::kDone:
        if (request.kind == IoKind::kRead && block->user != nullptr) {
          std::memcpy(block->user, block->buf, block->length);
        }
        finished.push_back({block, Status::Ok()});
        return;
      case internal::UringStep::kContinue:
        block->done += static_cast<size_t>(res);
        if (block->direct &&
            !IsDirectEligible(block->offset + block->done, block->buf + block->done,
                              block->length - block->done)) {
          // O_DIRECT cannot continue at an unaligned point; the buffered descriptor of the same
          // file finishes the block.
          block->fd = block->buffered_fd;
          block->direct = false;
        }
        block->retries = 0;
        resubmit.push_back(block);
        return;
      case internal::UringStep::kRetry:
        if (++block->retries > kMaxRetries) {
          finished.push_back(
              {block,
               ErrnoError(std::string("io_uring ") +
                              (request.kind == IoKind::kRead ? "read" : "write") +
                              " (gave up after " + std::to_string(kMaxRetries) + " retries)",
                          internal::OpContext(request.kind, *request.path, at, remaining), -res)});
          return;
        }
        resubmit.push_back(block);
        return;
      case internal::UringStep::kEndOfFile:
        finished.push_back(
            {block, DataLossError(internal::OpContext(request.kind, *request.path, request.offset,
                                                      request.length) +
                                  " ran past end of file at offset " + std::to_string(at) +
                                  ": the file is truncated or the offset is wrong")});
        return;
      case internal::UringStep::kError:
        finished.push_back(
            {block,
             ErrnoError("io_uring", internal::OpContext(request.kind, *request.path, at, remaining),
                        -res)});
        return;
    }
  }

  static void Finish(Block* block, Status status) {
    std::shared_ptr<Request> request = std::move(block->request);
    delete block;
    if (!status.ok()) {
      MutexLock lock(&request->mutex);
      if (request->first_error.ok()) request->first_error = std::move(status);
    }
    if (request->remaining.fetch_sub(1) == 1) {
      Status result;
      {
        MutexLock lock(&request->mutex);
        result = request->first_error;
      }
      (*request->done)(request->index, std::move(result));
    }
  }

  IoOptions options_;
  std::unique_ptr<UringRing> ring_;
  Mutex mutex_;
  CondVar idle_cv_;
  std::deque<Block*> pending_ SY_GUARDED_BY(mutex_);
  int in_flight_ SY_GUARDED_BY(mutex_) = 0;
  std::vector<iovec> regions_ SY_GUARDED_BY(mutex_);
  bool registered_ SY_GUARDED_BY(mutex_) = false;
  bool stopping_ SY_GUARDED_BY(mutex_) = false;
  std::thread reaper_;
};

namespace {

class UringFile : public FilePairFile {
 public:
  UringFile(std::string path, FilePair fds, UringEngine* engine)
      : FilePairFile(std::move(path), std::move(fds)), engine_(engine) {}

  void SubmitBatch(std::span<const IoOp> ops, IoDone done) override {
    auto shared_done = std::make_shared<IoDone>(std::move(done));
    size_t block_size = engine_->options().block_size;
    std::vector<Block*> blocks;
    for (size_t i = 0; i < ops.size(); ++i) {
      const IoOp& op = ops[i];
      if (op.length == 0) {
        (*shared_done)(i, Status::Ok());
        continue;
      }
      auto request = std::make_shared<Request>();
      request->path = &path_;
      request->kind = op.kind;
      request->offset = op.offset;
      request->length = op.length;
      request->index = i;
      request->done = shared_done;
      request->remaining = (op.length + block_size - 1) / block_size;
      bool aligned_range = fds_.direct.valid() && IsAligned(op.offset, kDirectAlignment) &&
                           IsAligned(op.length, kDirectAlignment);
      bool aligned_address = IsAligned(reinterpret_cast<uintptr_t>(op.data), kDirectAlignment);
      for (size_t at = 0; at < op.length; at += block_size) {
        auto* block = new Block();
        block->request = request;
        block->offset = op.offset + at;
        block->length = std::min(block_size, op.length - at);
        block->buffered_fd = fds_.buffered.get();
        char* user = static_cast<char*>(op.data) + at;
        if (aligned_range) {
          block->fd = fds_.direct.get();
          block->direct = true;
          if (aligned_address) {
            block->buf = user;
          } else {
            block->bounce.reset(std::aligned_alloc(kDirectAlignment, block->length));
            SY_CHECK(block->bounce != nullptr) << "out of memory for an io_uring bounce buffer";
            block->buf = static_cast<char*>(block->bounce.get());
            block->user = user;
            if (op.kind == IoKind::kWrite) std::memcpy(block->buf, user, block->length);
          }
        } else {
          block->fd = fds_.buffered.get();
          block->buf = user;
        }
        blocks.push_back(block);
      }
    }
    if (!blocks.empty()) engine_->Enqueue(std::move(blocks));
  }

 private:
  UringEngine* engine_;
};

}  // namespace

Result<std::unique_ptr<FileSystem>> UringFileSystem::Create(const IoOptions& options) {
  if (EnvInt("SY_IO_URING_DISABLE", 0) != 0) {
    return UnavailableError("SY_IO_URING_DISABLE is set");
  }
  SY_ASSIGN_OR_RETURN(std::unique_ptr<UringEngine> engine, UringEngine::Create(options));
  return std::unique_ptr<FileSystem>(new UringFileSystem(options, std::move(engine)));
}

UringFileSystem::UringFileSystem(const IoOptions& options, std::unique_ptr<UringEngine> engine)
    : options_(options), engine_(std::move(engine)) {}

UringFileSystem::~UringFileSystem() = default;

Result<std::unique_ptr<File>> UringFileSystem::Open(const std::string& path,
                                                    const OpenOptions& options) {
  SY_ASSIGN_OR_RETURN(FilePair fds, OpenFilePair(path, options, options_.direct));
  return std::unique_ptr<File>(new UringFile(path, std::move(fds), engine_.get()));
}

Status UringFileSystem::Rename(const std::string& from, const std::string& to) {
  return PosixRename(from, to);
}
Status UringFileSystem::Remove(const std::string& path) { return PosixRemove(path); }
Result<bool> UringFileSystem::Exists(const std::string& path) { return PosixExists(path); }
Status UringFileSystem::SyncDir(const std::string& dir) { return PosixSyncDir(dir); }

Status UringFileSystem::RegisterBuffers(std::span<const iovec> regions) {
  return engine_->Register(regions);
}

void UringFileSystem::UnregisterBuffers() { engine_->Unregister(); }

}  // namespace sy::storage
