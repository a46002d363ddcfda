#include "storage/fs/pmem_file_system.h"

#include <fcntl.h>
#include <libpmem2.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "runtime/core/mutex.h"
#include "runtime/core/unique_fd.h"
#include "storage/fs/file_descriptors.h"
#include "storage/fs/posix_file_system.h"

namespace sy::storage {
namespace {

Status PmemError(const std::string& what, const std::string& path) {
  return IOError(what + " " + path + ": " + pmem2_errormsg());
}

// The owner of one pmem2 mapping (and the config and source it was made from).
class PmemMapping {
 public:
  static Result<std::unique_ptr<PmemMapping>> Create(int fd, const std::string& path,
                                                     bool read_only) {
    std::unique_ptr<PmemMapping> mapping(new PmemMapping());
    if (pmem2_config_new(&mapping->config_) != 0) return PmemError("pmem2_config_new", path);
    if (pmem2_config_set_required_store_granularity(mapping->config_, PMEM2_GRANULARITY_PAGE) !=
        0) {
      return PmemError("pmem2_config_set_required_store_granularity(PAGE)", path);
    }
    if (read_only && pmem2_config_set_protection(mapping->config_, PMEM2_PROT_READ) != 0) {
      return PmemError("pmem2_config_set_protection(READ)", path);
    }
    if (pmem2_source_from_fd(&mapping->source_, fd) != 0) {
      return PmemError("pmem2_source_from_fd", path);
    }
    if (pmem2_map_new(&mapping->map_, mapping->config_, mapping->source_) != 0) {
      return PmemError("pmem2_map_new", path);
    }
    mapping->base_ = static_cast<char*>(pmem2_map_get_address(mapping->map_));
    mapping->size_ = pmem2_map_get_size(mapping->map_);
    mapping->persist_ = pmem2_get_persist_fn(mapping->map_);
    mapping->memcpy_ = pmem2_get_memcpy_fn(mapping->map_);
    return mapping;
  }

  ~PmemMapping() {
    if (map_ != nullptr) pmem2_map_delete(&map_);
    if (source_ != nullptr) pmem2_source_delete(&source_);
    if (config_ != nullptr) pmem2_config_delete(&config_);
  }
  PmemMapping(const PmemMapping&) = delete;
  PmemMapping& operator=(const PmemMapping&) = delete;

  char* base() const { return base_; }
  size_t size() const { return size_; }
  void Persist(size_t offset, size_t length) const { persist_(base_ + offset, length); }
  void CopyIn(size_t offset, const void* data, size_t length) const {
    memcpy_(base_ + offset, data, length, PMEM2_F_MEM_NOFLUSH);
  }

 private:
  PmemMapping() = default;
  pmem2_config* config_ = nullptr;
  pmem2_source* source_ = nullptr;
  pmem2_map* map_ = nullptr;
  char* base_ = nullptr;
  size_t size_ = 0;
  pmem2_persist_fn persist_ = nullptr;
  pmem2_memcpy_fn memcpy_ = nullptr;
};

class PmemFile : public File {
 public:
  PmemFile(std::string path, UniqueFd fd, bool read_only, ThreadPool* pool)
      : path_(std::move(path)), fd_(std::move(fd)), read_only_(read_only), pool_(pool) {}

  Status Init() {
    WriterMutexLock lock(&map_mutex_);
    return RemapLocked();
  }

  const std::string& path() const override { return path_; }

  void SubmitBatch(std::span<const IoOp> ops, IoDone done) override {
    internal::PoolSubmitFn submit;
    if (pool_ != nullptr) {
      submit = [this](std::function<void()> task) { (void)pool_->Submit(std::move(task)); };
    }
    internal::SubmitOnPool(
        ops, done, [this](const IoOp& op) { return RunOne(op); }, submit);
  }

  Status Read(uint64_t offset, void* data, size_t length) override {
    return RunOne(IoOp{IoKind::kRead, offset, data, length});
  }
  Status Write(uint64_t offset, const void* data, size_t length) override {
    return RunOne(IoOp{IoKind::kWrite, offset, const_cast<void*>(data), length});
  }

  Status Sync() override {
    ReaderMutexLock lock(&map_mutex_);
    SY_RETURN_IF_ERROR(PersistDirtyLocked());
    // Persisting the mapping covers the bytes; a changed size is file metadata.
    if (size_changed_.exchange(false)) return FdSync(fd_.get(), path_);
    return Status::Ok();
  }

  Status Truncate(uint64_t size) override {
    if (read_only_) return FailedPreconditionError("truncate " + path_ + ": opened read-only");
    WriterMutexLock lock(&map_mutex_);
    SY_RETURN_IF_ERROR(PersistDirtyLocked());
    SY_RETURN_IF_ERROR(FdTruncate(fd_.get(), path_, size));
    size_changed_ = true;
    return RemapLocked();
  }

  Result<uint64_t> Size() override { return FdSize(fd_.get(), path_); }
  Status LockExclusive(int64_t timeout_ms) override {
    return FdLockExclusive(fd_.get(), path_, timeout_ms);
  }

 private:
  Status RunOne(const IoOp& op) {
    if (op.length == 0) return Status::Ok();
    uint64_t end = op.offset + op.length;
    if (op.kind == IoKind::kWrite) {
      if (read_only_) return FailedPreconditionError("write " + path_ + ": opened read-only");
      ReaderMutexLock lock(&map_mutex_);
      while (mapping_ == nullptr || end > mapping_->size()) {
        lock.Unlock();
        SY_RETURN_IF_ERROR(Grow(end));
        lock.Lock();
      }
      mapping_->CopyIn(op.offset, op.data, op.length);
      MutexLock dirty_lock(&dirty_mutex_);
      dirty_.emplace_back(op.offset, op.length);
      return Status::Ok();
    }
    ReaderMutexLock lock(&map_mutex_);
    size_t mapped = mapping_ == nullptr ? 0 : mapping_->size();
    if (end > mapped) {
      return DataLossError(internal::OpContext(op.kind, path_, op.offset, op.length) +
                           " ran past end of file (" + std::to_string(mapped) +
                           " bytes): the file is truncated or the offset is wrong");
    }
    std::memcpy(op.data, mapping_->base() + op.offset, op.length);
    return Status::Ok();
  }

  Status Grow(uint64_t size) SY_EXCLUDES(map_mutex_) {
    WriterMutexLock lock(&map_mutex_);
    if (mapping_ != nullptr && mapping_->size() >= size) return Status::Ok();
    SY_RETURN_IF_ERROR(PersistDirtyLocked());
    SY_RETURN_IF_ERROR(FdTruncate(fd_.get(), path_, size));
    size_changed_ = true;
    return RemapLocked();
  }

  Status PersistDirtyLocked() SY_REQUIRES_SHARED(map_mutex_) SY_EXCLUDES(dirty_mutex_) {
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    {
      MutexLock dirty_lock(&dirty_mutex_);
      ranges.swap(dirty_);
    }
    if (ranges.empty() || mapping_ == nullptr) return Status::Ok();
    std::sort(ranges.begin(), ranges.end());
    uint64_t begin = ranges[0].first;
    uint64_t end = ranges[0].first + ranges[0].second;
    for (size_t i = 1; i <= ranges.size(); ++i) {
      if (i < ranges.size() && ranges[i].first <= end) {
        end = std::max(end, ranges[i].first + ranges[i].second);
        continue;
      }
      mapping_->Persist(begin, end - begin);
      if (i < ranges.size()) {
        begin = ranges[i].first;
        end = begin + ranges[i].second;
      }
    }
    return Status::Ok();
  }

  Status RemapLocked() SY_REQUIRES(map_mutex_) {
    mapping_.reset();
    SY_ASSIGN_OR_RETURN(uint64_t size, FdSize(fd_.get(), path_));
    if (size == 0) return Status::Ok();
    SY_ASSIGN_OR_RETURN(mapping_, PmemMapping::Create(fd_.get(), path_, read_only_));
    return Status::Ok();
  }

  std::string path_;
  UniqueFd fd_;
  bool read_only_;
  ThreadPool* pool_;
  SharedMutex map_mutex_;
  std::unique_ptr<PmemMapping> mapping_ SY_GUARDED_BY(map_mutex_);  // null for an empty file
  Mutex dirty_mutex_;
  std::vector<std::pair<uint64_t, uint64_t>> dirty_ SY_GUARDED_BY(dirty_mutex_);
  std::atomic<bool> size_changed_{false};
};

}  // namespace

PmemFileSystem::PmemFileSystem(const IoOptions& options) : options_(options) {
  if (options_.io_threads > 0) pool_ = std::make_unique<ThreadPool>(options_.io_threads + 1);
}

PmemFileSystem::~PmemFileSystem() = default;

Result<std::unique_ptr<File>> PmemFileSystem::Open(const std::string& path,
                                                   const OpenOptions& options) {
  // pmem2 maps need a descriptor opened for reading and writing unless mapped read-only.
  SY_ASSIGN_OR_RETURN(FilePair fds, OpenFilePair(path, options, /*direct=*/false));
  auto file =
      std::make_unique<PmemFile>(path, std::move(fds.buffered), options.read_only, pool_.get());
  SY_RETURN_IF_ERROR(file->Init());
  return std::unique_ptr<File>(std::move(file));
}

Status PmemFileSystem::Rename(const std::string& from, const std::string& to) {
  return PosixRename(from, to);
}
Status PmemFileSystem::Remove(const std::string& path) { return PosixRemove(path); }
Result<bool> PmemFileSystem::Exists(const std::string& path) { return PosixExists(path); }
Status PmemFileSystem::SyncDir(const std::string& dir) { return PosixSyncDir(dir); }

}  // namespace sy::storage
