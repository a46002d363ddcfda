#include "storage/store/expert_store.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include <spdlog/spdlog.h>

#include "runtime/core/check.h"
#include "runtime/core/file_creation.h"

namespace sy::storage {
namespace {

Result<std::shared_ptr<Buffer>> AlignedBuffer(size_t bytes) {
  return AllocateHostBuffer(std::max<size_t>(bytes, kStoreBlock));
}

}  // namespace

// ---- creation and opening ----

Result<std::unique_ptr<ExpertStore>> ExpertStore::Create(FileSystem* fs, const std::string& path,
                                                         const StoreLayout& layout,
                                                         const StoreOptions& options) {
  SY_ASSIGN_OR_RETURN(Superblock sb, PlanLayout(layout));
  SY_ASSIGN_OR_RETURN(bool exists, fs->Exists(path));
  if (exists) {
    return AlreadyExistsError("expert store " + path +
                              " already exists: open it, or remove it to start over");
  }
  // A new, unpredictable name, created exclusively: nothing planted can be followed or truncated,
  // and two creators never share it. Removed on every failure below.
  const std::string tmp = TemporaryPathFor(path);
  struct RemoveOnFailure {
    FileSystem* fs;
    const std::string& tmp;
    bool keep = false;
    ~RemoveOnFailure() {
      if (!keep) fs->Remove(tmp).IgnoreError();
    }
  } remove_on_failure{fs, tmp};
  {
    OpenOptions open_options;
    open_options.create = true;
    open_options.exclusive = true;
    SY_ASSIGN_OR_RETURN(std::unique_ptr<File> file, fs->Open(tmp, open_options));
    // Reserve every block now: a full disk shows up here, not in the middle of training.
    SY_RETURN_IF_ERROR(file->Preallocate(sb.file_bytes));
    std::vector<IndexEntry> entries(sb.num_entries());
    for (uint32_t l = 0; l < sb.num_layers; ++l) {
      for (uint32_t e = 0; e < sb.num_experts; ++e) {
        for (uint32_t k = 0; k < sb.kinds.size(); ++k) {
          IndexEntry& entry = entries[sb.EntryIndex(l, e, k)];
          entry.layer = l;
          entry.expert = e;
          entry.kind_index = k;
        }
      }
    }
    sb.sequence = 1;
    std::vector<uint8_t> index = EncodeIndex(sb, entries);
    sb.index_checksum = Crc32c(index.data(), sb.index_bytes);
    SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> index_buffer, AlignedBuffer(index.size()));
    std::memcpy(index_buffer->data(), index.data(), index.size());
    SY_RETURN_IF_ERROR(file->Write(sb.index_area_offset[1], index_buffer->data(), index.size()));
    std::array<uint8_t, kStoreBlock> super = EncodeSuperblock(sb);
    SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> super_buffer, AlignedBuffer(kStoreBlock));
    std::memcpy(super_buffer->data(), super.data(), super.size());
    SY_RETURN_IF_ERROR(file->Write(1 * kStoreBlock, super_buffer->data(), kStoreBlock));
    SY_RETURN_IF_ERROR(file->Sync());
  }
  // Never replaces: a store another process created meanwhile stays, and this one fails.
  if (Status placed = fs->Rename(tmp, path); !placed.ok()) {
    if (placed.code() == StatusCode::kAlreadyExists) {
      return AlreadyExistsError("expert store " + path +
                                " was created by another process meanwhile; open it instead");
    }
    return placed;
  }
  remove_on_failure.keep = true;
  // The store is in place; a failed directory sync may still lose the rename in a power cut.
  SY_RETURN_IF_ERROR(fs->SyncDir(DirName(path)).WithContext("create expert store " + path));
  return Open(fs, path, options);
}

Result<std::unique_ptr<ExpertStore>> ExpertStore::Open(FileSystem* fs, const std::string& path,
                                                       const StoreOptions& options) {
  SY_ASSIGN_OR_RETURN(std::unique_ptr<File> file, fs->Open(path, OpenOptions{}));
  SY_RETURN_IF_ERROR(
      file->LockExclusive(options.lock_timeout_ms).WithContext("open expert store " + path));
  std::unique_ptr<ExpertStore> store(new ExpertStore(fs, path, std::move(file), options));
  SY_RETURN_IF_ERROR(store->Load().WithContext("open expert store " + path));
  if (options.verify_on_open) {
    SY_RETURN_IF_ERROR(store->VerifyAll().WithContext("verify expert store " + path));
  }
  return store;
}

ExpertStore::ExpertStore(FileSystem* fs, std::string path, std::unique_ptr<File> file,
                         const StoreOptions& options)
    : fs_(fs), path_(std::move(path)), file_(std::move(file)), options_(options) {
  workers_ = std::make_unique<ThreadPool>(std::max(0, options_.worker_threads) + 1);
  committer_ = std::thread([this] { CommitLoop(); });
}

ExpertStore::~ExpertStore() {
  Flush();
  MutexLock lock(&mutex_);
  while (reads_in_flight_ != 0 || read_handoffs_ != 0) cv_.Wait(&mutex_);
  stopping_ = true;
  cv_.NotifyAll();
  lock.Unlock();
  committer_.join();
  workers_.reset();
}

Status ExpertStore::Load() {
  SY_ASSIGN_OR_RETURN(uint64_t size, file_->Size());
  SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> slots, AlignedBuffer(2 * kStoreBlock));
  std::memset(slots->data(), 0, 2 * kStoreBlock);
  size_t head = static_cast<size_t>(std::min<uint64_t>(size, 2 * kStoreBlock));
  SY_RETURN_IF_ERROR(file_->Read(0, slots->data(), head));
  const auto* bytes = static_cast<const uint8_t*>(slots->data());
  std::span<const uint8_t> slot0(bytes, std::min<size_t>(head, kStoreBlock));
  std::span<const uint8_t> slot1(bytes + kStoreBlock, head > kStoreBlock ? head - kStoreBlock : 0);
  auto read_index = [&](const Superblock& sb) -> Result<std::vector<uint8_t>> {
    uint64_t offset = sb.index_area_offset[sb.sequence % 2];
    if (offset + sb.index_bytes > size || offset + sb.index_bytes < offset) {
      return DataLossError("the index of sequence " + std::to_string(sb.sequence) + " at offset " +
                           std::to_string(offset) + " lies past the end of the file (" +
                           std::to_string(size) + " bytes): the file is truncated");
    }
    uint64_t bytes_to_read =
        offset + sb.index_area_bytes <= size ? sb.index_area_bytes : sb.index_bytes;
    SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer, AlignedBuffer(bytes_to_read));
    SY_RETURN_IF_ERROR(file_->Read(offset, buffer->data(), bytes_to_read));
    const auto* p = static_cast<const uint8_t*>(buffer->data());
    return std::vector<uint8_t>(p, p + bytes_to_read);
  };
  SY_ASSIGN_OR_RETURN(StoreMetadata metadata, SelectMetadata(slot0, slot1, size, read_index));
  if (!ChecksumAvailable(metadata.superblock.checksum)) {
    return UnavailableError("the store uses " +
                            std::string(ChecksumKindName(metadata.superblock.checksum)) +
                            " checksums, which this build cannot compute: rebuild with libxxhash");
  }
  if (!metadata.other_slot_note.empty()) {
    open_note_ = metadata.other_slot_note;
    spdlog::info("expert store {}: using sequence {} from slot {}; other slot: {}", path_,
                 metadata.superblock.sequence, metadata.slot, metadata.other_slot_note);
  }
  if (metadata.has_previous) {
    // One fdatasync makes a publish durable, so a crash during it can leave the newest superblock
    // on disk without all of its new extents. Every extent it added must verify; otherwise the
    // publish never completed (it was never acknowledged) and the previous one is current.
    Status interrupted = VerifyNewExtents(metadata);
    if (interrupted.code() == StatusCode::kDataLoss) {
      open_note_ = "publish " + std::to_string(metadata.superblock.sequence) +
                   " was interrupted, opened at publish " +
                   std::to_string(metadata.previous_superblock.sequence) + ": " +
                   interrupted.message();
      spdlog::warn("expert store {}: {}", path_, open_note_);
      metadata.superblock = metadata.previous_superblock;
      metadata.slot = metadata.previous_slot;
      metadata.entries = std::move(metadata.previous_entries);
    } else {
      SY_RETURN_IF_ERROR(interrupted);
    }
  }
  MutexLock lock(&mutex_);
  layout_ = metadata.superblock;
  sequence_ = layout_.sequence;
  entries_ = std::move(metadata.entries);
  size_t n = entries_.size();
  corrupt_.assign(n, false);
  writing_.assign(n, false);
  max_generation_.resize(n);
  for (size_t i = 0; i < n; ++i) max_generation_[i] = entries_[i].generation;
  free_.assign(layout_.kinds.size(), {});
  for (uint32_t k = 0; k < layout_.kinds.size(); ++k) {
    const KindInfo& kind = layout_.kinds[k];
    std::vector<bool> used(kind.pool_extents, false);
    for (const IndexEntry& entry : entries_) {
      if (entry.kind_index == k && entry.generation != 0) {
        used[(entry.offset - kind.pool_offset) / kind.stride] = true;
      }
    }
    // Highest offsets first in the vector, so pop_back hands out the lowest free extent.
    for (uint64_t i = kind.pool_extents; i-- > 0;) {
      if (!used[i]) free_[k].push_back(kind.pool_offset + i * kind.stride);
    }
  }
  SY_ASSIGN_OR_RETURN(index_buffer_, AlignedBuffer(layout_.index_area_bytes));
  SY_ASSIGN_OR_RETURN(superblock_buffer_, AlignedBuffer(kStoreBlock));
  return Status::Ok();
}

Status ExpertStore::VerifyExtent(const IndexEntry& entry, const std::byte* data) const {
  return VerifyExtentWith(layout_, entry, data);
}

Status ExpertStore::VerifyExtentWith(const Superblock& layout, const IndexEntry& entry,
                                     const std::byte* data) const {
  const KindInfo& kind = layout.kinds[entry.kind_index];
  uint64_t seed = ExtentSeed(entry.layer, entry.expert, entry.kind_index, entry.generation);
  uint64_t sum = ComputeChecksum(layout.checksum, seed, data, kind.payload_bytes);
  if (sum == entry.checksum) return Status::Ok();
  return ChecksumMismatchWith(layout, entry);
}

Status ExpertStore::ChecksumMismatch(const IndexEntry& entry) const {
  return ChecksumMismatchWith(layout_, entry);
}

Status ExpertStore::ChecksumMismatchWith(const Superblock& layout, const IndexEntry& entry) const {
  const KindInfo& kind = layout.kinds[entry.kind_index];
  return DataLossError(
      "expert store " + path_ + ": layer " + std::to_string(entry.layer) + " expert " +
      std::to_string(entry.expert) + " (" + ExtentKindName(kind.kind) + ", generation " +
      std::to_string(entry.generation) + ") extent at offset " + std::to_string(entry.offset) +
      " failed its " + std::string(ChecksumKindName(layout.checksum)) +
      " checksum: the extent is torn or corrupt and was not used; rewrite the "
      "expert or restore it from a checkpoint");
}

Status ExpertStore::VerifyNewExtents(const StoreMetadata& metadata) {
  const Superblock& sb = metadata.superblock;
  for (size_t i = 0; i < metadata.entries.size(); ++i) {
    const IndexEntry& entry = metadata.entries[i];
    if (entry.generation == 0) continue;
    if (i < metadata.previous_entries.size()) {
      const IndexEntry& before = metadata.previous_entries[i];
      if (before.offset == entry.offset && before.generation == entry.generation &&
          before.checksum == entry.checksum) {
        continue;
      }
    }
    const KindInfo& kind = sb.kinds[entry.kind_index];
    SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer, AlignedBuffer(kind.stride));
    SY_RETURN_IF_ERROR(file_->Read(entry.offset, buffer->data(), kind.stride));
    SY_RETURN_IF_ERROR(VerifyExtentWith(sb, entry, static_cast<const std::byte*>(buffer->data())));
  }
  return Status::Ok();
}

Status ExpertStore::VerifyAll() {
  std::vector<IndexEntry> written;
  {
    MutexLock lock(&mutex_);
    for (const IndexEntry& entry : entries_) {
      if (entry.generation != 0) written.push_back(entry);
    }
  }
  if (written.empty()) return Status::Ok();
  uint64_t max_stride = 0;
  for (const KindInfo& kind : layout_.kinds) max_stride = std::max(max_stride, kind.stride);
  // At most 256 MiB of buffers, and at least one extent.
  uint64_t parallel = std::clamp<uint64_t>((uint64_t{256} << 20) / max_stride, 1,
                                           std::max(1, options_.verify_parallelism));
  SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer, AlignedBuffer(parallel * max_stride));
  auto* base = static_cast<std::byte*>(buffer->data());
  for (size_t begin = 0; begin < written.size(); begin += parallel) {
    size_t end = std::min<size_t>(written.size(), begin + parallel);
    std::vector<IoOp> ops;
    for (size_t i = begin; i < end; ++i) {
      const KindInfo& kind = layout_.kinds[written[i].kind_index];
      ops.push_back(
          IoOp{IoKind::kRead, written[i].offset, base + (i - begin) * max_stride, kind.stride});
    }
    SY_RETURN_IF_ERROR(file_->RunBatch(ops));
    for (size_t i = begin; i < end; ++i) {
      Status status = VerifyExtent(written[i], base + (i - begin) * max_stride);
      if (status.ok()) continue;
      spdlog::error("{}", status.message());
      const IndexEntry& entry = written[i];
      MutexLock lock(&mutex_);
      uint64_t position = layout_.EntryIndex(entry.layer, entry.expert, entry.kind_index);
      corrupt_[position] = true;
      corrupt_list_.push_back(CorruptExtent{ExpertKey{entry.layer, entry.expert},
                                            layout_.kinds[entry.kind_index].kind, entry.generation,
                                            entry.offset, status.message()});
    }
  }
  return Status::Ok();
}

// ---- lookups ----

Result<KindInfo> ExpertStore::Kind(ExtentKind kind) const {
  for (const KindInfo& info : layout_.kinds) {
    if (info.kind == kind) return info;
  }
  return NotFoundError("expert store " + path_ + " has no " + ExtentKindName(kind) + " extents");
}

Result<uint32_t> ExpertStore::EntryFor(ExpertKey key, ExtentKind kind) const {
  if (key.layer >= layout_.num_layers || key.expert >= layout_.num_experts) {
    return InvalidArgumentError("expert store " + path_ + ": " + key.ToString() +
                                " is outside the store (" + std::to_string(layout_.num_layers) +
                                " layers x " + std::to_string(layout_.num_experts) + " experts)");
  }
  for (uint32_t k = 0; k < layout_.kinds.size(); ++k) {
    if (layout_.kinds[k].kind == kind) {
      return static_cast<uint32_t>(layout_.EntryIndex(key.layer, key.expert, k));
    }
  }
  return NotFoundError("expert store " + path_ + " has no " + ExtentKindName(kind) + " extents");
}

std::string ExpertStore::EntryName(uint32_t entry) const {
  uint64_t kinds = layout_.kinds.size();
  return "layer " + std::to_string(entry / kinds / layout_.num_experts) + " expert " +
         std::to_string(entry / kinds % layout_.num_experts) + " (" +
         ExtentKindName(layout_.kinds[entry % kinds].kind) + ")";
}

uint64_t ExpertStore::sequence() const {
  MutexLock lock(&mutex_);
  return sequence_;
}

Result<uint64_t> ExpertStore::Generation(ExpertKey key, ExtentKind kind) const {
  SY_ASSIGN_OR_RETURN(uint32_t entry, EntryFor(key, kind));
  MutexLock lock(&mutex_);
  return entries_[entry].generation;
}

std::vector<CorruptExtent> ExpertStore::corrupt_extents() const {
  MutexLock lock(&mutex_);
  return corrupt_list_;
}

StoreStats ExpertStore::stats() const {
  MutexLock lock(&mutex_);
  return stats_;
}

uint32_t ExpertStore::KindOfOffset(uint64_t offset) const {
  for (uint32_t k = 0; k < layout_.kinds.size(); ++k) {
    const KindInfo& kind = layout_.kinds[k];
    if (offset >= kind.pool_offset && offset < kind.pool_offset + kind.pool_extents * kind.stride) {
      return k;
    }
  }
  SY_CHECK(false) << "offset " << offset << " is in no extent pool of " << path_;
  return 0;
}

void ExpertStore::FreeExtentLocked(uint64_t offset) {
  if (read_refs_.count(offset) > 0) {
    free_after_reads_.insert(offset);
    return;
  }
  free_[KindOfOffset(offset)].push_back(offset);
}

void ExpertStore::ReleaseReadRefLocked(uint64_t offset) {
  auto it = read_refs_.find(offset);
  SY_CHECK(it != read_refs_.end()) << "read reference on " << offset << " was never taken";
  if (--it->second > 0) return;
  read_refs_.erase(it);
  if (free_after_reads_.erase(offset) > 0) free_[KindOfOffset(offset)].push_back(offset);
}

// ---- reads ----

void ExpertStore::ReadAsync(ExpertKey key, ExtentKind kind, std::span<std::byte> dst, ReadDone done,
                            IoDone io_done) {
  ReadRequest request{key, kind, dst};
  std::function<void(size_t)> batch_io_done;
  if (io_done) batch_io_done = [io_done = std::move(io_done)](size_t) { io_done(); };
  ReadBatch(
      std::span<const ReadRequest>(&request, 1),
      [done = std::move(done)](size_t, Status status) { done(std::move(status)); },
      std::move(batch_io_done));
}

std::future<Status> ExpertStore::Read(ExpertKey key, ExtentKind kind, std::span<std::byte> dst) {
  auto promise = std::make_shared<std::promise<Status>>();
  std::future<Status> future = promise->get_future();
  ReadAsync(key, kind, dst, [promise](Status status) { promise->set_value(std::move(status)); });
  return future;
}

void ExpertStore::ReadBatch(std::span<const ReadRequest> requests,
                            std::function<void(size_t, Status)> done,
                            std::function<void(size_t)> io_done) {
  std::vector<PartRead> parts;
  parts.reserve(requests.size());
  for (const ReadRequest& request : requests) parts.push_back(PartRead{request});
  ReadParts(
      parts,
      [done = std::move(done)](size_t i, Status status, const ReadContext&) {
        done(i, std::move(status));
      },
      std::move(io_done));
}

void ExpertStore::ReadPrefixAsync(ExpertKey key, ExtentKind kind, uint64_t bytes,
                                  std::span<std::byte> dst, PrefixDone done) {
  const PartRead part{ReadRequest{key, kind, dst}, 0, bytes, nullptr};
  ReadParts(
      std::span<const PartRead>(&part, 1),
      [done = std::move(done)](size_t, Status status, const ReadContext& read) {
        if (!status.ok()) {
          done(std::move(status));
          return;
        }
        done(ExtentPrefix{read.end, read.generation, read.crc});
      },
      nullptr);
}

void ExpertStore::ReadRestAsync(ExpertKey key, ExtentKind kind, const ExtentPrefix& prefix,
                                std::span<std::byte> dst, ReadDone done, IoDone io_done) {
  const PartRead part{ReadRequest{key, kind, dst}, prefix.bytes, 0, &prefix};
  std::function<void(size_t)> batch_io_done;
  if (io_done) batch_io_done = [io_done = std::move(io_done)](size_t) { io_done(); };
  ReadParts(
      std::span<const PartRead>(&part, 1),
      [done = std::move(done)](size_t, Status status, const ReadContext&) {
        done(std::move(status));
      },
      std::move(batch_io_done));
}

void ExpertStore::ReadParts(std::span<const PartRead> parts,
                            std::function<void(size_t, Status, const ReadContext&)> done,
                            std::function<void(size_t)> io_done) {
  auto contexts = std::make_shared<std::vector<ReadContext>>();
  auto indices = std::make_shared<std::vector<size_t>>();
  std::vector<IoOp> ops;
  std::vector<std::pair<size_t, Status>> rejected;
  {
    MutexLock lock(&mutex_);
    for (size_t i = 0; i < parts.size(); ++i) {
      const ReadRequest& request = parts[i].request;
      Result<uint32_t> entry = EntryFor(request.key, request.kind);
      if (!entry.ok()) {
        rejected.emplace_back(i, entry.status());
        continue;
      }
      const IndexEntry& e = entries_[*entry];
      const KindInfo& kind = layout_.kinds[e.kind_index];
      const uint64_t begin = parts[i].begin;
      const uint64_t end = parts[i].end == 0 ? kind.payload_bytes : parts[i].end;
      SY_CHECK(begin < end && end <= kind.payload_bytes)
          << "read of bytes [" << begin << ", " << end << ") of " << EntryName(*entry);
      SY_CHECK((begin > 0) == (parts[i].prefix != nullptr)) << "a rest read needs its prefix";
      SY_CHECK((begin == 0 && end == kind.payload_bytes) || SplitReads())
          << "split read of " << EntryName(*entry) << " from a store without crc32c";
      if (request.dst.size() < end) {
        rejected.emplace_back(
            i, InvalidArgumentError("read of " + EntryName(*entry) + " from " + path_ +
                                    ": the buffer holds " + std::to_string(request.dst.size()) +
                                    " bytes, the read " + std::to_string(end)));
        continue;
      }
      if (e.generation == 0) {
        rejected.emplace_back(i, NotFoundError("expert store " + path_ + ": " + EntryName(*entry) +
                                               " has never been written"));
        continue;
      }
      if (corrupt_[*entry]) {
        rejected.emplace_back(
            i,
            DataLossError("expert store " + path_ + ": " + EntryName(*entry) + " generation " +
                          std::to_string(e.generation) + " at offset " + std::to_string(e.offset) +
                          " failed its checksum: the extent is torn or corrupt; rewrite the "
                          "expert or restore it from a checkpoint"));
        continue;
      }
      if (parts[i].prefix != nullptr && parts[i].prefix->generation != e.generation) {
        rejected.emplace_back(
            i, FailedPreconditionError(
                   "expert store " + path_ + ": " + EntryName(*entry) + " is at generation " +
                   std::to_string(e.generation) + ", its first " + std::to_string(begin) +
                   " bytes were read at generation " + std::to_string(parts[i].prefix->generation) +
                   "; read it whole"));
        continue;
      }
      ++read_refs_[e.offset];
      ++reads_in_flight_;
      ++read_handoffs_;
      contexts->push_back(ReadContext{*entry, e.offset, e.generation, e.checksum, request.dst,
                                      begin, end,
                                      parts[i].prefix != nullptr ? parts[i].prefix->crc : 0u});
      indices->push_back(i);
      // Whole 4 KiB blocks when the buffer has them and the start is aligned (direct I/O, when
      // the buffer is aligned too); the exact bytes otherwise.
      const uint64_t block_end = std::min(AlignUp(end, kStoreBlock), kind.stride);
      const uint64_t length = begin % kStoreBlock == 0 && request.dst.size() >= block_end
                                  ? block_end - begin
                                  : end - begin;
      ops.push_back(IoOp{IoKind::kRead, e.offset + begin, request.dst.data() + begin, length});
    }
  }
  for (auto& [i, status] : rejected) {
    if (io_done) io_done(i);
    done(i, std::move(status), ReadContext{});
  }
  if (ops.empty()) return;
  auto shared_done =
      std::make_shared<std::function<void(size_t, Status, const ReadContext&)>>(std::move(done));
  auto shared_io_done = std::make_shared<std::function<void(size_t)>>(std::move(io_done));
  file_->SubmitBatch(ops, [this, contexts, indices, shared_done, shared_io_done](size_t j,
                                                                                 Status status) {
    if (*shared_io_done) (*shared_io_done)((*indices)[j]);
    (void)workers_->Submit([this, contexts, indices, shared_done, j, status] {
      size_t index = (*indices)[j];
      FinishRead((*contexts)[j], status, [shared_done, index](Status s, const ReadContext& read) {
        (*shared_done)(index, std::move(s), read);
      });
    });
    MutexLock lock(&mutex_);
    --read_handoffs_;
    cv_.NotifyAll();
  });
}

void ExpertStore::FinishRead(ReadContext read, Status status,
                             const std::function<void(Status, const ReadContext&)>& done) {
  IndexEntry entry;
  entry.layer = static_cast<uint32_t>(read.entry / layout_.kinds.size() / layout_.num_experts);
  entry.expert = static_cast<uint32_t>(read.entry / layout_.kinds.size() % layout_.num_experts);
  entry.kind_index = static_cast<uint32_t>(read.entry % layout_.kinds.size());
  entry.offset = read.offset;
  entry.generation = read.generation;
  entry.checksum = read.checksum;
  const KindInfo& kind = layout_.kinds[entry.kind_index];
  const uint64_t seed = ExtentSeed(entry.layer, entry.expert, entry.kind_index, entry.generation);
  if (!status.ok()) {
    status = status.WithContext("read " + EntryName(read.entry) + " from expert store " + path_);
  } else if (read.end < kind.payload_bytes) {
    // A prefix: its CRC travels to the rest's read, which verifies the whole.
    read.crc = Crc32c(read.dst.data(), read.end, static_cast<uint32_t>(seed));
  } else if (read.begin > 0) {
    const uint32_t crc = Crc32c(read.dst.data() + read.begin, read.end - read.begin, read.crc);
    if (options_.verify_reads && crc != entry.checksum) status = ChecksumMismatch(entry);
  } else if (options_.verify_reads) {
    status = VerifyExtent(entry, read.dst.data());
  }
  std::vector<StartedWrite> to_start;
  {
    MutexLock lock(&mutex_);
    if (status.code() == StatusCode::kDataLoss &&
        entries_[read.entry].generation == read.generation && !corrupt_[read.entry]) {
      corrupt_[read.entry] = true;
      corrupt_list_.push_back(CorruptExtent{ExpertKey{entry.layer, entry.expert}, kind.kind,
                                            read.generation, read.offset, status.message()});
    }
    ReleaseReadRefLocked(read.offset);
    --reads_in_flight_;
    if (status.ok()) {
      stats_.bytes_read += read.end - read.begin;
      if (read.end == kind.payload_bytes) ++stats_.extents_read;
    }
    to_start = StartQueuedLocked();
    cv_.NotifyAll();
  }
  SubmitWrites(std::move(to_start));
  done(std::move(status), read);
}

// ---- writes ----

void ExpertStore::WriteAsync(ExpertKey key, ExtentKind kind, std::span<const std::byte> data,
                             WriteDone done) {
  WriteRequest request{key, kind, data};
  WriteBatch(
      std::span<const WriteRequest>(&request, 1),
      [done = std::move(done)](size_t, Result<uint64_t> result) { done(std::move(result)); });
}

std::future<Result<uint64_t>> ExpertStore::Write(ExpertKey key, ExtentKind kind,
                                                 std::span<const std::byte> data) {
  auto promise = std::make_shared<std::promise<Result<uint64_t>>>();
  std::future<Result<uint64_t>> future = promise->get_future();
  WriteAsync(key, kind, data,
             [promise](Result<uint64_t> result) { promise->set_value(std::move(result)); });
  return future;
}

void ExpertStore::WriteBatch(std::span<const WriteRequest> requests,
                             std::function<void(size_t, Result<uint64_t>)> done) {
  auto shared_done =
      std::make_shared<std::function<void(size_t, Result<uint64_t>)>>(std::move(done));
  std::vector<std::pair<size_t, Status>> rejected;
  std::vector<StartedWrite> to_start;
  auto group = std::make_shared<WriteGroup>();
  {
    MutexLock lock(&mutex_);
    for (size_t i = 0; i < requests.size(); ++i) {
      const WriteRequest& request = requests[i];
      Result<uint32_t> entry = EntryFor(request.key, request.kind);
      if (!entry.ok()) {
        rejected.emplace_back(i, entry.status());
        continue;
      }
      const KindInfo& kind = layout_.kinds[*entry % layout_.kinds.size()];
      if (request.data.size() < kind.payload_bytes) {
        rejected.emplace_back(
            i, InvalidArgumentError("write of " + EntryName(*entry) + " to " + path_ +
                                    ": the buffer holds " + std::to_string(request.data.size()) +
                                    " bytes, the extent " + std::to_string(kind.payload_bytes)));
        continue;
      }
      if (kind.pool_extents <= uint64_t{layout_.num_layers} * layout_.num_experts) {
        rejected.emplace_back(
            i, FailedPreconditionError("expert store " + path_ + " has no spare " +
                                       ExtentKindName(kind.kind) +
                                       " extents, so it cannot update them out of place; "
                                       "recreate it with spare_extents > 0"));
        continue;
      }
      ++writes_in_flight_;
      queued_.push_back(QueuedWrite{
          group, *entry, request.data,
          [shared_done, i](Result<uint64_t> result) { (*shared_done)(i, std::move(result)); }});
    }
    to_start = StartQueuedLocked();
  }
  for (auto& [i, status] : rejected) (*shared_done)(i, std::move(status));
  SubmitWrites(std::move(to_start));
}

std::vector<ExpertStore::StartedWrite> ExpertStore::StartQueuedLocked() {
  std::vector<StartedWrite> started;
  for (auto it = queued_.begin(); it != queued_.end();) {
    uint32_t entry = it->entry;
    std::vector<uint64_t>& free = free_[entry % layout_.kinds.size()];
    if (writing_[entry] || free.empty()) {
      ++it;
      continue;
    }
    StartedWrite write;
    write.offset = free.back();
    free.pop_back();
    write.generation = ++max_generation_[entry];
    writing_[entry] = true;
    ++it->group->started_unfinished;
    write.write = std::move(*it);
    it = queued_.erase(it);
    started.push_back(std::move(write));
  }
  return started;
}

void ExpertStore::SubmitWrites(std::vector<StartedWrite> writes) {
  // Every write goes to the file first and its checksum is summed while the device writes (the
  // buffer is only read, by both): the sums of a large batch cost no device time. A write is
  // finished when both its I/O and its sum are done, whichever is last.
  struct InFlight {
    PendingWrite pending;
    std::atomic<int> remaining{2};
  };
  std::vector<std::shared_ptr<InFlight>> in_flight;
  in_flight.reserve(writes.size());
  for (StartedWrite& write : writes) {
    uint32_t entry = write.write.entry;
    const KindInfo& kind = layout_.kinds[entry % layout_.kinds.size()];
    auto flight = std::make_shared<InFlight>();
    PendingWrite& pending = flight->pending;
    pending.group = std::move(write.write.group);
    pending.entry = entry;
    pending.offset = write.offset;
    pending.generation = write.generation;
    pending.bytes = kind.payload_bytes;
    pending.done = std::move(write.write.done);
    in_flight.push_back(flight);
    size_t length = write.write.data.size() >= kind.stride ? kind.stride : kind.payload_bytes;
    IoOp op{IoKind::kWrite, write.offset, const_cast<std::byte*>(write.write.data.data()), length};
    file_->SubmitBatch(std::span<const IoOp>(&op, 1), [this, flight](size_t, Status status) {
      if (!status.ok()) {
        flight->pending.status = status.WithContext("write " + EntryName(flight->pending.entry) +
                                                    " to expert store " + path_);
      }
      if (flight->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        FinishWrite(std::move(flight->pending));
      }
    });
  }
  for (size_t i = 0; i < writes.size(); ++i) {
    InFlight& flight = *in_flight[i];
    uint32_t entry = flight.pending.entry;
    auto kind_index = static_cast<uint32_t>(entry % layout_.kinds.size());
    auto layer = static_cast<uint32_t>(entry / layout_.kinds.size() / layout_.num_experts);
    auto expert = static_cast<uint32_t>(entry / layout_.kinds.size() % layout_.num_experts);
    flight.pending.checksum = ComputeChecksum(
        layout_.checksum, ExtentSeed(layer, expert, kind_index, writes[i].generation),
        writes[i].write.data.data(), flight.pending.bytes);
    if (flight.remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      FinishWrite(std::move(flight.pending));
    }
  }
}

void ExpertStore::FinishWrite(PendingWrite write) {
  MutexLock lock(&mutex_);
  std::shared_ptr<WriteGroup> group = std::move(write.group);
  group->held.push_back(std::move(write));
  if (--group->started_unfinished > 0) return;
  for (PendingWrite& held : group->held) completed_.push_back(std::move(held));
  group->held.clear();
  cv_.NotifyAll();
}

void ExpertStore::Flush() {
  MutexLock lock(&mutex_);
  while (writes_in_flight_ != 0) cv_.Wait(&mutex_);
}

void ExpertStore::CommitLoop() {
  MutexLock lock(&mutex_);
  for (;;) {
    while (!stopping_ && completed_.empty()) cv_.Wait(&mutex_);
    if (completed_.empty()) return;  // stopping, and every write was published
    std::vector<PendingWrite> batch;
    batch.swap(completed_);
    lock.Unlock();
    Publish(std::move(batch));
    lock.Lock();
  }
}

void ExpertStore::Publish(std::vector<PendingWrite> batch) {
  std::vector<PendingWrite> good;
  std::vector<PendingWrite> failed;
  for (PendingWrite& p : batch) (p.status.ok() ? good : failed).push_back(std::move(p));

  std::vector<IndexEntry> next;
  uint64_t sequence = 0;
  {
    MutexLock lock(&mutex_);
    // A write that never reached the disk was never referenced by any superblock.
    for (PendingWrite& p : failed) {
      free_[p.entry % layout_.kinds.size()].push_back(p.offset);
      writing_[p.entry] = false;
      ++stats_.failed_writes;
    }
    if (!good.empty()) {
      next = entries_;  // only this thread changes entries_
      sequence = sequence_ + 1;
    }
  }

  Status status;
  bool superblock_written = false;
  if (!good.empty()) {
    for (const PendingWrite& p : good) {
      IndexEntry& e = next[p.entry];
      e.offset = p.offset;
      e.length = p.bytes;
      e.checksum = p.checksum;
      e.generation = p.generation;
    }
    Superblock sb = layout_;
    sb.sequence = sequence;
    std::vector<uint8_t> index = EncodeIndex(sb, next);
    sb.index_checksum = Crc32c(index.data(), sb.index_bytes);
    std::memcpy(index_buffer_->data(), index.data(), index.size());
    // Index and superblock go to the slot the newest durable publish does not use, then one
    // fdatasync makes extents, index and superblock durable together. Open verifies the extents
    // a publish added before trusting it (VerifyNewExtents), so no ordering among them is needed.
    status = file_->Write(sb.index_area_offset[sequence % 2], index_buffer_->data(), index.size());
    if (status.ok()) {
      std::array<uint8_t, kStoreBlock> super = EncodeSuperblock(sb);
      std::memcpy(superblock_buffer_->data(), super.data(), super.size());
      superblock_written = true;
      status = file_->Write((sequence % 2) * kStoreBlock, superblock_buffer_->data(), kStoreBlock);
    }
    if (status.ok()) status = file_->Sync();
    if (!status.ok()) {
      status = status.WithContext("publish " + std::to_string(good.size()) + " extents (sequence " +
                                  std::to_string(sequence) + ") in expert store " + path_ +
                                  "; the store stays at its previous generation");
      spdlog::error("{}", status.message());
    }
  }

  std::vector<StartedWrite> to_start;
  {
    MutexLock lock(&mutex_);
    if (!good.empty() && status.ok()) {
      for (const PendingWrite& p : good) {
        const IndexEntry& old = entries_[p.entry];
        if (old.generation != 0) FreeExtentLocked(old.offset);
        if (corrupt_[p.entry]) {
          corrupt_[p.entry] = false;
          ExpertKey key{next[p.entry].layer, next[p.entry].expert};
          ExtentKind kind = layout_.kinds[next[p.entry].kind_index].kind;
          std::erase_if(corrupt_list_,
                        [&](const CorruptExtent& c) { return c.key == key && c.kind == kind; });
        }
        writing_[p.entry] = false;
        stats_.bytes_written += p.bytes;
        ++stats_.extents_written;
      }
      entries_ = std::move(next);
      sequence_ = sequence;
      ++stats_.publishes;
      // The slot a failed publish may have written was overwritten durably just now.
      for (uint64_t offset : quarantined_) FreeExtentLocked(offset);
      quarantined_.clear();
    } else if (!good.empty()) {
      for (const PendingWrite& p : good) {
        // Once a superblock naming this extent may be on disk, reusing it before a later publish
        // overwrites that slot could make a crash recover into a corrupt extent.
        if (superblock_written) {
          quarantined_.push_back(p.offset);
        } else {
          free_[p.entry % layout_.kinds.size()].push_back(p.offset);
        }
        writing_[p.entry] = false;
        ++stats_.failed_writes;
      }
      ++stats_.failed_publishes;
    }
    writes_in_flight_ -= batch.size();
    to_start = StartQueuedLocked();
    cv_.NotifyAll();
  }
  SubmitWrites(std::move(to_start));
  for (PendingWrite& p : failed) p.done(p.status);
  for (PendingWrite& p : good) {
    if (status.ok()) {
      p.done(p.generation);
    } else {
      p.done(status);
    }
  }
}

}  // namespace sy::storage
