#include "storage/fs/fault_injection_file_system.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

namespace sy::storage {
namespace {

constexpr size_t kSector = 512;

// `what` names the operation and the file ("sync /x", "write /x at offset 4096 (512 bytes)").
Status CrashedError(const std::string& what) {
  return IOError(what +
                 ": the file system has crashed (simulated power loss); "
                 "call DropUnsyncedData() to reboot it");
}

class FaultFile : public File {
 public:
  FaultFile(FaultInjectionFileSystem* fs, std::unique_ptr<File> base)
      : fs_(fs), base_(std::move(base)) {}

  const std::string& path() const override { return base_->path(); }

  void SubmitBatch(std::span<const IoOp> ops, IoDone done) override {
    for (size_t i = 0; i < ops.size(); ++i) done(i, RunOne(ops[i]));
  }
  Status Read(uint64_t offset, void* data, size_t length) override {
    return RunOne(IoOp{IoKind::kRead, offset, data, length});
  }
  Status Write(uint64_t offset, const void* data, size_t length) override {
    return RunOne(IoOp{IoKind::kWrite, offset, const_cast<void*>(data), length});
  }

  Status Sync() override {
    if (fs_->crashed()) return CrashedError("sync " + path());
    FaultInjectionFileSystem::Decision decision = fs_->Check(FaultOp::kSync, path());
    if (decision.fire) {
      if (decision.rule.kind == FaultKind::kCrash) {
        fs_->Crash();
        return CrashedError("sync " + path());
      }
      return ErrnoError("injected error: fdatasync", path(), decision.rule.error);
    }
    SY_RETURN_IF_ERROR(base_->Sync());
    fs_->ForgetUndo(path());
    return Status::Ok();
  }

  Status Truncate(uint64_t size) override {
    if (fs_->crashed()) return CrashedError("truncate " + path());
    SY_ASSIGN_OR_RETURN(uint64_t old_size, base_->Size());
    FaultInjectionFileSystem::Undo undo;
    undo.old_size = old_size;
    if (size < old_size) {
      undo.offset = size;
      undo.length = old_size - size;
      undo.old_bytes.resize(old_size - size);
      SY_RETURN_IF_ERROR(base_->Read(size, undo.old_bytes.data(), undo.old_bytes.size()));
    }
    fs_->RecordUndo(path(), std::move(undo));
    return base_->Truncate(size);
  }

  Result<uint64_t> Size() override { return base_->Size(); }
  Status Preallocate(uint64_t size) override {
    if (fs_->crashed()) return CrashedError("preallocate " + path());
    SY_ASSIGN_OR_RETURN(uint64_t old_size, base_->Size());
    if (size > old_size) {
      FaultInjectionFileSystem::Undo undo;
      undo.old_size = old_size;
      fs_->RecordUndo(path(), std::move(undo));
    }
    return base_->Preallocate(size);
  }
  size_t alignment() const override { return base_->alignment(); }
  Status LockExclusive(int64_t timeout_ms) override { return base_->LockExclusive(timeout_ms); }

 private:
  Status RunOne(const IoOp& op) {
    std::string where = internal::OpContext(op.kind, path(), op.offset, op.length);
    if (fs_->crashed()) return CrashedError(where);
    FaultInjectionFileSystem::Decision decision =
        fs_->Check(op.kind == IoKind::kRead ? FaultOp::kRead : FaultOp::kWrite, path());
    if (op.kind == IoKind::kRead) {
      if (decision.fire) {
        if (decision.rule.kind == FaultKind::kCrash) {
          fs_->Crash();
          return CrashedError(where);
        }
        return ErrnoError("injected error:", where, decision.rule.error);
      }
      return base_->Read(op.offset, op.data, op.length);
    }
    if (decision.fire && decision.rule.kind == FaultKind::kCrash) {
      fs_->Crash();
      return CrashedError(where);
    }
    if (decision.fire && decision.rule.kind == FaultKind::kError) {
      return ErrnoError("injected error:", where, decision.rule.error);
    }
    SY_RETURN_IF_ERROR(CaptureUndo(op));
    const auto* bytes = static_cast<const uint8_t*>(op.data);
    if (decision.fire && decision.rule.kind == FaultKind::kShortWrite) {
      size_t stored = std::min(decision.rule.short_bytes, op.length);
      SY_RETURN_IF_ERROR(base_->Write(op.offset, bytes, stored));
      return IOError("short write (injected): " + where + " stored only " + std::to_string(stored) +
                     " bytes");
    }
    if (decision.fire && decision.rule.kind == FaultKind::kTornWrite) {
      for (size_t at = 0; at < op.length; at += kSector) {
        if (fs_->NextRandom() % 2 == 0) continue;
        SY_RETURN_IF_ERROR(
            base_->Write(op.offset + at, bytes + at, std::min(kSector, op.length - at)));
      }
      fs_->Crash();
      return CrashedError("torn write (injected) during " + where);
    }
    return base_->Write(op.offset, op.data, op.length);
  }

  Status CaptureUndo(const IoOp& op) {
    SY_ASSIGN_OR_RETURN(uint64_t old_size, base_->Size());
    FaultInjectionFileSystem::Undo undo;
    undo.offset = op.offset;
    undo.length = op.length;
    undo.old_size = old_size;
    if (op.offset < old_size) {
      undo.old_bytes.resize(std::min<uint64_t>(op.length, old_size - op.offset));
      SY_RETURN_IF_ERROR(base_->Read(op.offset, undo.old_bytes.data(), undo.old_bytes.size()));
    }
    fs_->RecordUndo(path(), std::move(undo));
    return Status::Ok();
  }

  FaultInjectionFileSystem* fs_;
  std::unique_ptr<File> base_;
};

}  // namespace

const char* FaultOpName(FaultOp op) {
  switch (op) {
    case FaultOp::kRead:
      return "read";
    case FaultOp::kWrite:
      return "write";
    case FaultOp::kSync:
      return "sync";
    case FaultOp::kRename:
      return "rename";
    case FaultOp::kSyncDir:
      return "sync directory";
  }
  return "?";
}

FaultInjectionFileSystem::FaultInjectionFileSystem(FileSystem* base, uint64_t seed)
    : base_(base), rng_(seed) {}

FaultInjectionFileSystem::~FaultInjectionFileSystem() = default;

std::string FaultInjectionFileSystem::name() const { return "fault(" + base_->name() + ")"; }

Result<std::unique_ptr<File>> FaultInjectionFileSystem::Open(const std::string& path,
                                                             const OpenOptions& options) {
  if (crashed()) return CrashedError("open " + path);
  SY_ASSIGN_OR_RETURN(std::unique_ptr<File> file, base_->Open(path, options));
  return std::unique_ptr<File>(new FaultFile(this, std::move(file)));
}

Status FaultInjectionFileSystem::Rename(const std::string& from, const std::string& to) {
  if (crashed()) return CrashedError("rename " + from);
  Decision decision = Check(FaultOp::kRename, from);
  if (decision.fire) {
    if (decision.rule.kind == FaultKind::kError) {
      return ErrnoError("injected error: rename", from + " to " + to, decision.rule.error);
    }
    Crash();
    return CrashedError("rename " + from);
  }
  SY_RETURN_IF_ERROR(base_->Rename(from, to));
  MutexLock lock(&mutex_);
  auto it = undo_.find(from);
  if (it != undo_.end()) {
    undo_[to] = std::move(it->second);
    undo_.erase(it);
  }
  return Status::Ok();
}

Status FaultInjectionFileSystem::Remove(const std::string& path) {
  if (crashed()) return CrashedError("remove " + path);
  SY_RETURN_IF_ERROR(base_->Remove(path));
  MutexLock lock(&mutex_);
  undo_.erase(path);
  return Status::Ok();
}

Result<bool> FaultInjectionFileSystem::Exists(const std::string& path) {
  return base_->Exists(path);
}

Status FaultInjectionFileSystem::SyncDir(const std::string& dir) {
  if (crashed()) return CrashedError("sync directory " + dir);
  Decision decision = Check(FaultOp::kSyncDir, dir);
  if (decision.fire) {
    if (decision.rule.kind == FaultKind::kError) {
      return ErrnoError("injected error: fsync directory", dir, decision.rule.error);
    }
    Crash();
    return CrashedError("sync directory " + dir);
  }
  return base_->SyncDir(dir);
}

void FaultInjectionFileSystem::AddRule(const FaultRule& rule) {
  MutexLock lock(&mutex_);
  rules_.push_back(RuleState{rule});
}

void FaultInjectionFileSystem::ClearRules() {
  MutexLock lock(&mutex_);
  rules_.clear();
}

int64_t FaultInjectionFileSystem::faults_fired() const {
  MutexLock lock(&mutex_);
  return fired_;
}

bool FaultInjectionFileSystem::crashed() const {
  MutexLock lock(&mutex_);
  return crashed_;
}

std::vector<FaultPoint> FaultInjectionFileSystem::journal() const {
  MutexLock lock(&mutex_);
  return journal_;
}

void FaultInjectionFileSystem::ClearJournal() {
  MutexLock lock(&mutex_);
  journal_.clear();
}

FaultInjectionFileSystem::Decision FaultInjectionFileSystem::Check(FaultOp op,
                                                                   const std::string& path) {
  MutexLock lock(&mutex_);
  journal_.push_back(FaultPoint{op, path});
  Decision decision;
  for (RuleState& state : rules_) {
    if (state.rule.op != op) continue;
    if (!state.rule.path_contains.empty() &&
        path.find(state.rule.path_contains) == std::string::npos) {
      continue;
    }
    int64_t index = state.seen++;
    bool active =
        index >= state.rule.skip && (state.rule.times < 0 || state.fired < state.rule.times);
    if (active && !decision.fire) {
      ++state.fired;
      ++fired_;
      decision.fire = true;
      decision.rule = state.rule;
    }
  }
  if (decision.fire && decision.rule.kind == FaultKind::kDelay) {
    lock.Unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(decision.rule.delay_us));
    return Decision{};
  }
  return decision;
}

void FaultInjectionFileSystem::RecordUndo(const std::string& path, Undo undo) {
  MutexLock lock(&mutex_);
  undo_[path].push_back(std::move(undo));
}

void FaultInjectionFileSystem::ForgetUndo(const std::string& path) {
  MutexLock lock(&mutex_);
  undo_.erase(path);
}

void FaultInjectionFileSystem::Crash() {
  MutexLock lock(&mutex_);
  crashed_ = true;
}

uint64_t FaultInjectionFileSystem::NextRandom() {
  MutexLock lock(&mutex_);
  return rng_();
}

Status FaultInjectionFileSystem::DropUnsyncedData(bool tear) {
  std::map<std::string, std::vector<Undo>> undo;
  {
    MutexLock lock(&mutex_);
    undo.swap(undo_);
  }
  for (auto& [path, records] : undo) {
    SY_ASSIGN_OR_RETURN(std::unique_ptr<File> file, base_->Open(path, OpenOptions{}));
    // Newest first, so each range ends up as it was before its oldest unsynced write.
    for (auto it = records.rbegin(); it != records.rend(); ++it) {
      const Undo& record = *it;
      for (uint64_t at = 0; at < record.length; at += kSector) {
        uint64_t n = std::min<uint64_t>(kSector, record.length - at);
        if (tear && NextRandom() % 2 == 0) continue;  // this sector reached the media
        std::vector<uint8_t> old(n, 0);
        if (at < record.old_bytes.size()) {
          uint64_t have = std::min<uint64_t>(n, record.old_bytes.size() - at);
          std::memcpy(old.data(), record.old_bytes.data() + at, have);
        }
        SY_ASSIGN_OR_RETURN(uint64_t size, file->Size());
        if (record.offset + at >= size) continue;  // beyond the end: nothing to restore
        n = std::min<uint64_t>(n, size - (record.offset + at));
        SY_RETURN_IF_ERROR(file->Write(record.offset + at, old.data(), n));
      }
      if (!tear) {
        SY_ASSIGN_OR_RETURN(uint64_t size, file->Size());
        if (size != record.old_size) SY_RETURN_IF_ERROR(file->Truncate(record.old_size));
      }
    }
    SY_RETURN_IF_ERROR(file->Sync());
  }
  MutexLock lock(&mutex_);
  crashed_ = false;
  return Status::Ok();
}

}  // namespace sy::storage
