#include "storage/fs/posix_file_system.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "runtime/core/file_creation.h"
#include "storage/fs/file_descriptors.h"

namespace sy::storage {
namespace {

class PosixFile : public FilePairFile {
 public:
  PosixFile(std::string path, FilePair fds, ThreadPool* pool)
      : FilePairFile(std::move(path), std::move(fds)), pool_(pool) {}

  void SubmitBatch(std::span<const IoOp> ops, IoDone done) override {
    internal::PoolSubmitFn submit;
    if (pool_ != nullptr) {
      submit = [this](std::function<void()> task) { (void)pool_->Submit(std::move(task)); };
    }
    internal::SubmitOnPool(
        ops, done, [this](const IoOp& op) { return RunOpOnPair(fds_, path_, op); }, submit);
  }

  Status Read(uint64_t offset, void* data, size_t length) override {
    return RunOpOnPair(fds_, path_, IoOp{IoKind::kRead, offset, data, length});
  }
  Status Write(uint64_t offset, const void* data, size_t length) override {
    return RunOpOnPair(fds_, path_, IoOp{IoKind::kWrite, offset, const_cast<void*>(data), length});
  }

 private:
  ThreadPool* pool_;
};

}  // namespace

PosixFileSystem::PosixFileSystem(const IoOptions& options) : options_(options) {
  if (options_.io_threads > 0) pool_ = std::make_unique<ThreadPool>(options_.io_threads + 1);
}

PosixFileSystem::~PosixFileSystem() = default;

Result<std::unique_ptr<File>> PosixFileSystem::Open(const std::string& path,
                                                    const OpenOptions& options) {
  SY_ASSIGN_OR_RETURN(FilePair fds, OpenFilePair(path, options, options_.direct));
  return std::unique_ptr<File>(new PosixFile(path, std::move(fds), pool_.get()));
}

Status PosixFileSystem::Rename(const std::string& from, const std::string& to) {
  return PosixRename(from, to);
}
Status PosixFileSystem::Remove(const std::string& path) { return PosixRemove(path); }
Result<bool> PosixFileSystem::Exists(const std::string& path) { return PosixExists(path); }
Status PosixFileSystem::SyncDir(const std::string& dir) { return PosixSyncDir(dir); }

Status PosixRename(const std::string& from, const std::string& to) {
  return RenameNoReplace(from, to);
}

Status PosixRemove(const std::string& path) {
  if (::unlink(path.c_str()) != 0) return ErrnoError("unlink", path, errno);
  return Status::Ok();
}

Result<bool> PosixExists(const std::string& path) {
  // lstat: a symbolic link is something there, even a dangling one (opening it then says so).
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT) return false;
  return ErrnoError("stat", path, errno);
}

Status PosixSyncDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError("open directory", dir, errno);
  if (::fsync(fd.get()) != 0) return ErrnoError("fsync directory", dir, errno);
  return Status::Ok();
}

}  // namespace sy::storage
