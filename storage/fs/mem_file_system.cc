#include "storage/fs/mem_file_system.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace sy::storage {
namespace {

class MemFile : public File {
 public:
  MemFile(std::string path, std::shared_ptr<MemFileSystem::Data> data, bool read_only,
          ThreadPool* pool)
      : path_(std::move(path)), data_(std::move(data)), read_only_(read_only), pool_(pool) {}

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
  Status Sync() override { return Status::Ok(); }
  Status Truncate(uint64_t size) override {
    if (read_only_) return FailedPreconditionError("truncate " + path_ + ": opened read-only");
    MutexLock lock(&data_->mutex);
    data_->bytes.resize(size);
    return Status::Ok();
  }
  Result<uint64_t> Size() override {
    MutexLock lock(&data_->mutex);
    return static_cast<uint64_t>(data_->bytes.size());
  }

 private:
  Status RunOne(const IoOp& op) {
    MutexLock lock(&data_->mutex);
    std::vector<uint8_t>& bytes = data_->bytes;
    if (op.kind == IoKind::kRead) {
      if (op.offset + op.length > bytes.size()) {
        return DataLossError(internal::OpContext(op.kind, path_, op.offset, op.length) +
                             " ran past end of file (" + std::to_string(bytes.size()) +
                             " bytes): the file is truncated or the offset is wrong");
      }
      if (op.length > 0) std::memcpy(op.data, bytes.data() + op.offset, op.length);
      return Status::Ok();
    }
    if (read_only_) return FailedPreconditionError("write " + path_ + ": opened read-only");
    if (op.offset + op.length > bytes.size()) bytes.resize(op.offset + op.length);
    if (op.length > 0) std::memcpy(bytes.data() + op.offset, op.data, op.length);
    return Status::Ok();
  }

  std::string path_;
  std::shared_ptr<MemFileSystem::Data> data_;
  bool read_only_;
  ThreadPool* pool_;
};

}  // namespace

MemFileSystem::MemFileSystem(int io_threads) {
  if (io_threads > 0) pool_ = std::make_unique<ThreadPool>(io_threads + 1);
}

MemFileSystem::~MemFileSystem() = default;

Result<std::unique_ptr<File>> MemFileSystem::Open(const std::string& path,
                                                  const OpenOptions& options) {
  std::shared_ptr<Data> data;
  {
    MutexLock lock(&mutex_);
    auto it = files_.find(path);
    if (it == files_.end()) {
      if (!options.create) return NotFoundError("open " + path + ": no such file");
      it = files_.emplace(path, std::make_shared<Data>()).first;
    } else if (options.create && options.exclusive) {
      return AlreadyExistsError(path + " exists");
    }
    data = it->second;
  }
  if (options.truncate) {
    MutexLock lock(&data->mutex);
    data->bytes.clear();
  }
  return std::unique_ptr<File>(new MemFile(path, std::move(data), options.read_only, pool_.get()));
}

Status MemFileSystem::Rename(const std::string& from, const std::string& to) {
  MutexLock lock(&mutex_);
  auto it = files_.find(from);
  if (it == files_.end()) return NotFoundError("rename " + from + ": no such file");
  if (files_.count(to) != 0) return AlreadyExistsError(to + " exists");
  std::shared_ptr<Data> data = it->second;
  files_.erase(it);
  files_[to] = std::move(data);
  return Status::Ok();
}

Status MemFileSystem::Remove(const std::string& path) {
  MutexLock lock(&mutex_);
  if (files_.erase(path) == 0) return NotFoundError("remove " + path + ": no such file");
  return Status::Ok();
}

Result<bool> MemFileSystem::Exists(const std::string& path) {
  MutexLock lock(&mutex_);
  return files_.count(path) > 0;
}

Result<std::vector<uint8_t>> MemFileSystem::Contents(const std::string& path) {
  std::shared_ptr<Data> data;
  {
    MutexLock lock(&mutex_);
    auto it = files_.find(path);
    if (it == files_.end()) return NotFoundError(path + ": no such file");
    data = it->second;
  }
  MutexLock lock(&data->mutex);
  return data->bytes;
}

}  // namespace sy::storage
