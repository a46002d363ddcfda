// ExpertStore: expert states on SSD or PMem, one checksummed extent per (layer, expert, kind),
// updated crash-consistently. The format is in storage/store/store_format.h and docs/storage.md.
//
// Reads and writes are asynchronous and batched; they complete through callbacks or futures.
//
// Crash-consistent update (shadow paging with group commit):
//   1. WriteAsync takes a free extent (one the newest durable superblock does not reference),
//      writes the new version there and computes its checksum, seeded by (layer, expert, kind,
//      generation).
//   2. The committer thread collects every completed write, writes the new index to the index
//      area the newest durable publish does not use and the new superblock to the slot it does
//      not use, then fdatasyncs once: extents, index and superblock are durable together.
//   3. Only then are the writes acknowledged (callbacks and futures see their generation), and the
//      extents they replaced become free.
// On open, both superblock slots are parsed and the newest whose index validates is taken, unless
// an extent it added since the previous publish fails its checksum: then that publish was cut
// short by a crash (never acknowledged) and the previous one, untouched by it, is current.
// Every written extent is then read back and checked (StoreOptions::verify_on_open). A torn or
// corrupt extent is listed in corrupt_extents() with its (layer, expert) and every read of it
// fails with DataLoss: it is never silently used.
//
// A failed write or publish (EIO, ENOSPC) fails the affected writes with a Status naming the file
// and offset; the store keeps serving the previous generation of every expert, on disk and in
// memory, and later writes may succeed.
//
// Open takes an exclusive lock on the file (File::LockExclusive): one process writes a store at a
// time, and a store left by a killed process opens only once that process's I/O has drained.
//
// Ownership: the store borrows the FileSystem (which must outlive it) and owns its File, its
// committer thread and its worker threads. Buffers passed to ReadAsync/WriteAsync are borrowed
// until their callback runs. The destructor waits for all reads and writes to finish.
// Thread-safety: every method may be called from any thread. Callbacks run on a store thread
// (write callbacks on the committer, after the durable publish; read callbacks on a worker); they
// may start new requests but must not wait for them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/core/buffer.h"
#include "runtime/core/mutex.h"
#include "runtime/core/thread_pool.h"
#include "storage/fs/file_system.h"
#include "storage/store/expert_key.h"
#include "storage/store/store_format.h"

namespace sy::storage {

struct StoreOptions {
  // Read every written extent at open and check its checksum. Default: true.
  bool verify_on_open = true;
  // Check the checksum of every extent read. Default: true.
  bool verify_reads = true;
  // Threads that verify read checksums and run read callbacks. Default: 2.
  int worker_threads = 2;
  // Extents read at once while verifying at open. Default: 8.
  int verify_parallelism = 8;
  // How long Open waits for another process's lock on the store file. Default: 10000 ms.
  int64_t lock_timeout_ms = 10000;
};

// An extent that failed verification.
struct CorruptExtent {
  ExpertKey key;
  ExtentKind kind = ExtentKind::kWeights;
  uint64_t generation = 0;
  uint64_t offset = 0;
  std::string reason;
};

struct StoreStats {
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t extents_read = 0;
  uint64_t extents_written = 0;  // acknowledged (published) extents
  uint64_t publishes = 0;
  uint64_t failed_writes = 0;
  uint64_t failed_publishes = 0;
};

class ExpertStore {
 public:
  // Creates a new store file at `path` (AlreadyExists if it is there): preallocated in full
  // (fallocate, so ENOSPC comes now rather than mid-training), written to a new temporary
  // (TemporaryPathFor, created exclusively), synced, renamed into place without replacing
  // anything (AlreadyExists when a concurrent creator got there first) and the directory synced.
  // Every extent starts unwritten.
  static Result<std::unique_ptr<ExpertStore>> Create(FileSystem* fs, const std::string& path,
                                                     const StoreLayout& layout,
                                                     const StoreOptions& options = {});
  static Result<std::unique_ptr<ExpertStore>> Open(FileSystem* fs, const std::string& path,
                                                   const StoreOptions& options = {});
  ~ExpertStore();
  ExpertStore(const ExpertStore&) = delete;
  ExpertStore& operator=(const ExpertStore&) = delete;

  const std::string& path() const { return path_; }
  // The file system the store does its I/O through (for RegisterBuffers).
  FileSystem* file_system() const { return fs_; }
  uint32_t num_layers() const { return layout_.num_layers; }
  uint32_t num_experts() const { return layout_.num_experts; }
  ChecksumKind checksum_kind() const { return layout_.checksum; }
  // The kinds in the file, in index order.
  const std::vector<KindInfo>& kinds() const { return layout_.kinds; }
  // The layout info of `kind`, or NotFound when the store has no such kind.
  Result<KindInfo> Kind(ExtentKind kind) const;
  // Sequence number of the newest durable publish.
  uint64_t sequence() const SY_EXCLUDES(mutex_);
  // The acknowledged generation of an expert (0: never written).
  Result<uint64_t> Generation(ExpertKey key, ExtentKind kind) const SY_EXCLUDES(mutex_);
  std::vector<CorruptExtent> corrupt_extents() const SY_EXCLUDES(mutex_);
  // What Open noticed about the slot it did not choose ("" when nothing).
  const std::string& open_note() const { return open_note_; }
  StoreStats stats() const SY_EXCLUDES(mutex_);

  // ---- reads ----
  // Reads the current version of (key, kind) into `dst`, which must hold at least the kind's
  // payload bytes; when it holds the full stride (payload rounded up to 4 KiB) and is 4 KiB
  // aligned, the read is direct with no bounce. `done` gets DataLoss if the checksum fails,
  // NotFound if the expert was never written.
  // `io_done`, when given, runs first, as soon as the file system has finished the I/O (or the
  // request was rejected), on the completion thread and before the checksum check: the device is
  // free for the next read while this one is verified (a streaming reader counts its reads in
  // flight at the device with it, as fio's iodepth does). It must not block; `dst` stays borrowed
  // until `done`.
  using ReadDone = std::function<void(Status)>;
  using IoDone = std::function<void()>;
  void ReadAsync(ExpertKey key, ExtentKind kind, std::span<std::byte> dst, ReadDone done,
                 IoDone io_done = nullptr) SY_EXCLUDES(mutex_);
  std::future<Status> Read(ExpertKey key, ExtentKind kind, std::span<std::byte> dst)
      SY_EXCLUDES(mutex_);

  struct ReadRequest {
    ExpertKey key;
    ExtentKind kind = ExtentKind::kWeights;
    std::span<std::byte> dst;
  };
  // One file submission for the whole batch; `done(i, status)` once per request, each after
  // `io_done(i)` when that is given (as ReadAsync's io_done).
  void ReadBatch(std::span<const ReadRequest> requests, std::function<void(size_t, Status)> done,
                 std::function<void(size_t)> io_done = nullptr) SY_EXCLUDES(mutex_);

  // ---- split reads ----
  // An extent read in two parts: its first bytes (ReadPrefixAsync), and later the rest
  // (ReadRestAsync), each part read once. The prefix's CRC-32C, continued from the extent's seed,
  // travels in ExtentPrefix, so the rest's read verifies the whole extent as a single read does:
  // the prefix's bytes are verified when the rest is read, not before. Only for crc32c stores
  // (SplitReads()); xxh3 cannot be continued.
  struct ExtentPrefix {
    uint64_t bytes = 0;       // payload bytes [0, bytes) were read
    uint64_t generation = 0;  // of this version
    uint32_t crc = 0;         // their CRC-32C from the extent's seed
  };
  bool SplitReads() const { return layout_.checksum == ChecksumKind::kCrc32c; }
  using PrefixDone = std::function<void(Result<ExtentPrefix>)>;
  // Reads the first `bytes` (< the payload) of the current version of (key, kind) into `dst`
  // (at least `bytes`; with `bytes` rounded up to 4 KiB and 4 KiB aligned, the read is direct),
  // unverified. Callbacks as ReadAsync's.
  void ReadPrefixAsync(ExpertKey key, ExtentKind kind, uint64_t bytes, std::span<std::byte> dst,
                       PrefixDone done) SY_EXCLUDES(mutex_);
  // Reads the rest of the version `prefix` names, payload bytes [prefix.bytes, payload), into the
  // same offsets of `dst` (the payload or the stride; dst's first prefix.bytes are not touched)
  // and verifies the whole extent's checksum: DataLoss when it fails, FailedPrecondition when
  // the current version is no longer prefix.generation.
  void ReadRestAsync(ExpertKey key, ExtentKind kind, const ExtentPrefix& prefix,
                     std::span<std::byte> dst, ReadDone done, IoDone io_done = nullptr)
      SY_EXCLUDES(mutex_);

  // ---- writes ----
  // Writes a new version of (key, kind) from `data` (at least the payload bytes; with the full
  // stride, aligned, the write is direct). `done` runs after the version is durable and published,
  // with its generation, or with the error. Never blocks: a write waits in a queue while another
  // write of the same (key, kind) is unpublished or no free extent is available, and writes of
  // one (key, kind) publish in submission order.
  using WriteDone = std::function<void(Result<uint64_t> generation)>;
  void WriteAsync(ExpertKey key, ExtentKind kind, std::span<const std::byte> data, WriteDone done)
      SY_EXCLUDES(mutex_);
  std::future<Result<uint64_t>> Write(ExpertKey key, ExtentKind kind,
                                      std::span<const std::byte> data) SY_EXCLUDES(mutex_);

  struct WriteRequest {
    ExpertKey key;
    ExtentKind kind = ExtentKind::kWeights;
    std::span<const std::byte> data;
  };
  // Submits every write at once. They publish together, in one publish (one fdatasync), once
  // every one of them that has started is on the disk; a write that waits for a free extent or
  // for an unpublished write of its own (key, kind) starts, and publishes, after that.
  void WriteBatch(std::span<const WriteRequest> requests,
                  std::function<void(size_t, Result<uint64_t>)> done) SY_EXCLUDES(mutex_);

  // Waits until every write submitted before the call is published or failed.
  void Flush() SY_EXCLUDES(mutex_);

 private:
  // The writes of one WriteBatch call: what has started and is not yet on the disk, and what is,
  // held back from the committer until the rest is (so the batch publishes once). Guarded by
  // mutex_ (unchecked: an attribute here cannot name the store's mutex; StartQueuedLocked and
  // FinishWrite are its users).
  struct PendingWrite;
  struct WriteGroup {
    size_t started_unfinished = 0;
    std::vector<PendingWrite> held;
  };
  struct PendingWrite {
    std::shared_ptr<WriteGroup> group;
    uint32_t entry = 0;  // index position
    uint64_t offset = 0;
    uint64_t checksum = 0;
    uint64_t generation = 0;
    uint64_t bytes = 0;
    Status status;
    WriteDone done;
  };

  ExpertStore(FileSystem* fs, std::string path, std::unique_ptr<File> file,
              const StoreOptions& options);
  Status Load() SY_EXCLUDES(mutex_);
  Status VerifyAll() SY_EXCLUDES(mutex_);
  Result<uint32_t> EntryFor(ExpertKey key, ExtentKind kind) const;
  std::string EntryName(uint32_t entry) const;
  struct QueuedWrite {
    std::shared_ptr<WriteGroup> group;
    uint32_t entry = 0;
    std::span<const std::byte> data;
    WriteDone done;
  };
  struct StartedWrite {
    QueuedWrite write;
    uint64_t offset = 0;
    uint64_t generation = 0;
  };
  struct ReadContext {
    uint32_t entry = 0;
    uint64_t offset = 0;
    uint64_t generation = 0;
    uint64_t checksum = 0;
    std::span<std::byte> dst;
    uint64_t begin = 0;  // payload bytes [begin, end) are read
    uint64_t end = 0;
    // begin > 0: the CRC-32C of [0, begin) (ExtentPrefix); end < payload: a prefix read, whose
    // CRC FinishRead computes into `crc` instead of verifying.
    uint32_t crc = 0;
  };
  // One part of an extent to read: [begin, end) of the payload (end 0: to its end), the version's
  // prefix when begin > 0.
  struct PartRead {
    ReadRequest request;
    uint64_t begin = 0;
    uint64_t end = 0;
    const ExtentPrefix* prefix = nullptr;
  };
  // ReadBatch over parts; `done(i, status, context)` with the finished read's context.
  void ReadParts(std::span<const PartRead> parts,
                 std::function<void(size_t, Status, const ReadContext&)> done,
                 std::function<void(size_t)> io_done) SY_EXCLUDES(mutex_);

  void CommitLoop() SY_EXCLUDES(mutex_);
  void Publish(std::vector<PendingWrite> batch) SY_EXCLUDES(mutex_);
  // Starts the queued writes that can start (their expert idle, a free extent available).
  std::vector<StartedWrite> StartQueuedLocked() SY_REQUIRES(mutex_);
  void SubmitWrites(std::vector<StartedWrite> writes) SY_EXCLUDES(mutex_);
  // A write whose I/O and checksum are done: held with its group, or handed to the committer.
  void FinishWrite(PendingWrite write) SY_EXCLUDES(mutex_);
  void FinishRead(ReadContext read, Status status,
                  const std::function<void(Status, const ReadContext&)>& done) SY_EXCLUDES(mutex_);
  Status VerifyExtent(const IndexEntry& entry, const std::byte* data) const;
  Status VerifyExtentWith(const Superblock& layout, const IndexEntry& entry,
                          const std::byte* data) const;
  // The DataLoss of an extent that failed its checksum, naming it and what to do.
  Status ChecksumMismatch(const IndexEntry& entry) const;
  Status ChecksumMismatchWith(const Superblock& layout, const IndexEntry& entry) const;
  // DataLoss when an extent the newest publish added (against the previous one) fails to verify.
  Status VerifyNewExtents(const StoreMetadata& metadata);
  uint32_t KindOfOffset(uint64_t offset) const;
  void ReleaseReadRefLocked(uint64_t offset) SY_REQUIRES(mutex_);
  void FreeExtentLocked(uint64_t offset) SY_REQUIRES(mutex_);

  FileSystem* fs_;
  std::string path_;
  std::unique_ptr<File> file_;
  StoreOptions options_;
  Superblock layout_;  // immutable after Load (sequence and index checksum live in the state)
  std::string open_note_;

  mutable Mutex mutex_;
  CondVar cv_;  // state changes: writes published, extents freed
  uint64_t sequence_ SY_GUARDED_BY(mutex_) = 0;
  std::vector<IndexEntry> entries_ SY_GUARDED_BY(mutex_);  // the durable index
  std::vector<bool> corrupt_ SY_GUARDED_BY(mutex_);        // per entry
  std::vector<CorruptExtent> corrupt_list_ SY_GUARDED_BY(mutex_);
  std::vector<std::vector<uint64_t>> free_ SY_GUARDED_BY(mutex_);      // free extents per kind
  std::unordered_map<uint64_t, int> read_refs_ SY_GUARDED_BY(mutex_);  // extent -> reads in flight
  std::unordered_set<uint64_t> free_after_reads_ SY_GUARDED_BY(mutex_);
  std::vector<uint64_t> quarantined_ SY_GUARDED_BY(mutex_);     // extents of a failed publish
  std::vector<bool> writing_ SY_GUARDED_BY(mutex_);             // per entry: a write is unpublished
  std::vector<uint64_t> max_generation_ SY_GUARDED_BY(mutex_);  // per entry: highest ever assigned
  std::deque<QueuedWrite> queued_ SY_GUARDED_BY(mutex_);        // waiting for their turn
  size_t writes_in_flight_ SY_GUARDED_BY(mutex_) = 0;
  size_t reads_in_flight_ SY_GUARDED_BY(mutex_) = 0;
  // Read completions still inside workers_->Submit on a file system thread: the destructor waits
  // for them too, or it could destroy workers_ under a Submit that is returning.
  size_t read_handoffs_ SY_GUARDED_BY(mutex_) = 0;
  std::vector<PendingWrite> completed_ SY_GUARDED_BY(mutex_);  // written, awaiting publish
  bool stopping_ SY_GUARDED_BY(mutex_) = false;
  StoreStats stats_ SY_GUARDED_BY(mutex_);

  std::shared_ptr<Buffer> index_buffer_;       // committer only
  std::shared_ptr<Buffer> superblock_buffer_;  // committer only
  std::unique_ptr<ThreadPool> workers_;
  std::thread committer_;
};

}  // namespace sy::storage
