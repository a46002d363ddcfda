// ExpertStateStore: the optimizer states of one rank's experts (fp32 master, Adam m and v, 12 B
// per parameter, and the expert's step counters) in the crash-safe ExpertStore on SSD/PMem,
// behind the MoESys LFU CPU cache (storage/cache/expert_cache.h: Algorithm 2, counts decayed
// every decay_every steps, dirty entries written back every update cycle). The expert_store
// config block (train_options.h) turns it on; docs/training.md is the user's view.
//
// One extent of kind kTrainState per expert, keyed by (MoE layer, local expert), with the parts
//   master [n] f32 | m [n] f32 (when the optimizer keeps it) | v [n] f32 (likewise) | meta
// where n is the expert's parameter count (its tensors back to back, in registration order) and
// meta is {optimizer step count, last update} as two int64.
//
// Where the compute copy lives (ExpertStateStoreOptions::resident):
//   resident      the model keeps every expert's weights and gradients (ExpertPart::value, grad,
//                 fixed): the store writes the master into them whenever it changes, so on a
//                 host backend with f32 weights they are equal (8 B per expert parameter in
//                 memory). The trainer no longer trains this way (it binds a working set on
//                 every backend); the store's own tests still use it.
//   working set   the parts have no memory of their own: per step the caller binds the activated
//                 experts' parts to its working set (Bind, before Prepare), Prepare fills their
//                 values from the master, Update reads their gradients, UnbindAll ends it
//                 (launcher/training/expert_working_set.h). The initial states come from
//                 options.initial_master, and Export/Import carry the master too. Memory then
//                 holds only the cache and the step's activated experts.
//                 Each expert's state is read at most once per step (crc32c stores): Prepare
//                 reads only the master of an expert that is not cached and not behind
//                 (ExpertStore::ReadPrefixAsync, a third of the extent with Adam), straight into
//                 the bound values, and offers it to the cache (ExpertCache::OfferPrefix); its
//                 update, or the prefetch for it, then reads only m, v and the counts, taking the
//                 master from the bound values, and verifies the whole extent's crc32c (the
//                 master's CRC carries over). A master whose update never comes (a skipped step,
//                 an evaluation) is verified at EndStep or the next BeginStep. So every master
//                 the model computed with is checked before its expert is updated and before the
//                 next step; a corrupt one fails the step with DataLoss naming the expert (as a
//                 whole read would, one phase later: the forward ran on it).
//
// The update (Update) runs the trainer's Optimizer, so the arithmetic is the in-memory one, on the
// trainer's thread pool. An expert without tokens in a step has a zero gradient; in-memory AdamW
// still decays its moments and applies weight decay. Two modes:
//   exact (default)  the store counts updates (one per optimizer step that was not skipped) and
//                    records the learning rate of each; an expert remembers the last update its
//                    state includes. Before the model computes with an expert (Prepare), before it
//                    is updated, at a checkpoint (Consolidate) and at the end, the missing updates
//                    are replayed with a zero gradient and their learning rates. The result is
//                    bit-identical to in-memory training.
//   sparse_adam      experts without tokens are not touched, as MoESys does: their moments and
//                    step counts advance only when they are activated.
//
// Which experts a step activates comes from Prepare, which the trainer calls from the MoE layers'
// LocalExpertCompute hook (runtime/model/expert_compute.h) with the rows each local expert
// receives, after the expert-parallel exchange of the counts.
//
// The sparse axis of the 2D prefetch (the dense axis is ZeRO-3's gather of the next layer). The
// store reads states ahead of need through the two-priority storage::Prefetcher
// (storage/cache/prefetcher.h) on four threads, within a window of half the cache's slots (at
// least four, at most all but one: the trainer holds one entry at a time; the other half keeps
// the LFU's resident set, which prefetches into every slot would evict at every layer):
//   HIGH  the exact set the routing names: at Prepare, the layer's experts that need a replay
//         (needed now); then the experts activated so far, in the order Update takes them, read
//         during the rest of the forward and the backward pass (from the last MoE layer on, or
//         earlier while they fit the window: before that their pins would take the slots the
//         forward's own fills need); in Update and Consolidate, the next ones they take.
//   LOW   the look-ahead, by each expert's decayed activation count (the cache's lfu decay and
//         period): at Prepare, the next MoE layer's experts that would need a replay; at EndStep,
//         the next step's first layer's most active experts that are not cached.
// A prefetch (HIGH or LOW) evicts neither an expert the step has activated and not yet updated
// (ExpertCache::Protect) nor one whose LFU count is above a newcomer's (1), the resident set the
// LFU keeps (PrefetcherOptions::max_victim_count): prefetches into either turned hits into reads.
// One that finds no such slot is dropped; Update's read-ahead (the next window's entries in its
// order, rescanned after each) asks again once the newcomers it has updated make room, or the entry
// is read on demand. The working set's masters read at Prepare (above) are read then, a few in
// flight at once (as many as the prefetch's threads; one at a time without the prefetch), not
// ahead: the routing names them only there. stats() counts their time as read time, all of it
// waited for. A prefetched expert stays pinned in the cache until it is taken (or the step ends),
// so nothing evicts it before use. Update takes the cached experts first. The order changes no
// result: each expert's arithmetic is its own. stats() reports the read time the trainer did not
// wait through (Note [read overlap] in storage/cache/expert_cache.cc).
//
// Staged states (working set on a crc32c store, with the prefetch): the masters ReadMasters reads
// alone at the forward go into a staging extent of the store's own (not the cache), and the rest
// of each extent (m, v, the counts) is read into it behind the backward pass: the reads start at
// the last MoE layer's Prepare (issued with their masters, they queued before the next layers'
// masters, which the forward waits for); that read verifies the whole extent's crc32c. Update
// then runs AdamW on the staged states first, without waiting for a read or a cache slot, then
// the cache's experts; EndStep, once the cache's write-backs are durable, starts the staged
// states' writes straight to the store (ExpertStore::WriteAsync, from their staging extents;
// with them in flight, the publishes the write-backs wait for were slow). They are not waited
// for at EndStep: they overlap the next step's forward. An expert the next step activates again
// keeps its staging extent, which holds its newest state: it is not read at all (a hit), and its
// Update waits for the last write before changing the extent. The others' writes are waited for
// (and their extents freed) at the next Update or EndStep, Consolidate, Export, Import and the
// destructor. So after EndStep the store's durable generation may lack the step's staged states,
// but every checkpoint (Consolidate, Export) and every later read of such an expert waits for
// them; a SIGKILL meanwhile loses nothing a checkpoint holds (a resume rewrites every state from
// the checkpoint). A staged expert is never read into the cache while staged (it was Absent;
// nothing prefetches an activated or staged expert), so the store's copy and the staged one
// cannot diverge.
// Memory: options.staging_bytes (whole extents; 0 stages nothing) comes out of cache_bytes, which
// keeps at least one cache slot; the extents are allocated on first use and kept; the experts past
// them take the cache's path below.
// Errors: a failed rest read fails the Update (or EndStep, for a step without update), a failed
// write the call that waits for it (the next step, or the checkpoint), each naming the expert
// and the store file. The LFU policy does not count a staged expert's accesses (it never reaches
// the cache). The store has a spare extent per cache slot and staging extent (at least 16).
//
// Write-behind: as soon as Update (or Consolidate) is done with an expert, its new state starts
// on its way to the store (ExpertCache::WriteBack) while the next expert is read and updated;
// concurrent write-backs share one durable publish. EndStep waits for them and writes back the
// rest, so after it the store's durable generation holds the step's cached states.
//
// Errors (a store read or write that fails, EIO, ENOSPC, a torn extent) come back as a Status
// naming the expert and the store file; the store keeps its previous durable generation
// (storage/store/expert_store.h).
//
// Ownership: owns the ExpertStore and the ExpertCache; borrows the FileSystem, the Optimizer and
// the expert tensors (ExpertPart), which must outlive it.
// Thread-safety: none; the trainer's thread (the cache and the store run their own threads).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "runtime/core/buffer.h"
#include "runtime/core/status.h"
#include "storage/cache/cache_policy.h"
#include "storage/cache/expert_cache.h"
#include "storage/cache/prefetcher.h"
#include "storage/fs/file_system.h"
#include "storage/store/expert_store.h"

namespace sy::launcher {

// One tensor of an expert, as flat host f32 views.
struct ExpertPart {
  float* value = nullptr;       // what the model computes with; the store writes the master here
  const float* grad = nullptr;  // its gradient, read by Update (unscaled and clipped)
  size_t n = 0;
  // Working set: value and grad are null unless bound (Bind).
};

// One expert of this rank.
struct ExpertEntry {
  std::string name;       // for messages: "experts/layer1/expert3"
  int moe_layer = 0;      // index among the model's MoE layers
  int decoder_layer = 0;  // the decoder layer (Parameter::layer)
  int expert = 0;         // global expert id
  std::vector<ExpertPart> parts;
};

struct ExpertStateStoreOptions {
  std::string path;                   // Required. The store file (created when absent)
  storage::FileSystem* fs = nullptr;  // Required, borrowed
  size_t cache_bytes = 0;   // Required. CPU cache budget (staging_bytes included); >= 1 extent
  storage::LfuOptions lfu;  // MoESys Algorithm 2's threshold, decay and its period
  bool prefetch = true;     // Default: true. The sparse-axis prefetch (above)
  // Default: 0 (none). Bytes of cache_bytes given to staged states (above), in whole extents;
  // used with the prefetch.
  size_t staging_bytes = 0;
  bool sparse_adam = false;  // Default: false (exact)
  // Default: true (the parts are the model's tensors). false: the working set (above).
  bool resident = true;
  // Default: false: Create writes every entry's initial state. true (a resume, which Imports every
  // entry): Create writes none; Import writes an entry not yet written straight to the store
  // (without reading it, nor going through the cache), and the first call other than Import,
  // Bind, UnbindAll and Entry writes the initial state of every entry not imported (its parts'
  // values, or initial_master, at that time). So a resume writes each expert's state once.
  bool defer_initial = false;
  // Working set: fills an entry's initial master (its parts back to back). Required then.
  std::function<void(const ExpertEntry& entry, std::span<float> master)> initial_master;
};

// Counters since creation.
struct ExpertStoreStats {
  uint64_t hits = 0;        // cache accesses served without a store read
  uint64_t misses = 0;      // cache accesses that read the expert from the store (on demand or
                            // prefetched for them)
  uint64_t prefetched = 0;  // of the misses, reads started ahead by the prefetch
  uint64_t evictions = 0;
  uint64_t bytes_read = 0;        // by the store
  uint64_t bytes_written = 0;     // by the store
  uint64_t replayed_updates = 0;  // zero-gradient updates replayed (exact mode)
  double wait_seconds = 0;        // time the trainer waited for an expert's state
  // Store reads against the trainer's waits (storage::CacheStats::read_busy_ns, read_exposed_ns).
  double read_seconds = 0;          // wall time with a store read in flight
  double read_exposed_seconds = 0;  // of it, time the trainer waited for an expert
  double write_seconds = 0;         // wall time with a write-back in flight, until durable
  double update_seconds = 0;        // in Update: AdamW and its waits for states
  double end_step_seconds = 0;      // in EndStep: the rest of the step's write-back
  uint64_t prefetch_unused = 0;     // experts of the exact set prefetched and never taken
  uint64_t prefetch_failed = 0;     // prefetch reads that failed (each retried on demand)
  uint64_t staged = 0;              // experts whose state was staged (above) after a store read
  // Of them, those whose m and v had landed when Update took them (read during the backward).
  uint64_t staged_ready = 0;
  // Staged reads of m and v completed so far, each counted once Update can take it without a wait.
  uint64_t staged_reads_landed = 0;
};

// The fraction of `read_seconds` the trainer did not wait through (1 when nothing was read).
double HiddenFraction(double read_seconds, double read_exposed_seconds);

class ExpertStateStore {
 public:
  // Opens the store file at options.path (creating it, preallocated, when absent; an existing
  // file of these MoE layers and expert size but another number of experts per layer, written
  // at another world size or ep_size, is replaced by a new one, with a log line; one of other
  // layers or another expert size is FailedPrecondition naming it) and a cache of as many
  // experts as cache_bytes holds (ResourceExhausted naming expert_store.cache_mib when not one).
  // Every entry's state starts as its parts' current values with zero moments and step counts
  // (written to the store now, or with options.defer_initial at the first use of an entry not
  // imported by then); LoadCheckpoint-style callers then Import.
  // `entries` must share their part sizes per MoE layer.
  static Result<std::unique_ptr<ExpertStateStore>> Create(const ExpertStateStoreOptions& options,
                                                          Optimizer* optimizer,
                                                          std::vector<ExpertEntry> entries);
  ~ExpertStateStore();
  ExpertStateStore(const ExpertStateStore&) = delete;
  ExpertStateStore& operator=(const ExpertStateStore&) = delete;

  // A new step begins: no expert is activated yet. Verifies the masters an evaluation's forward
  // read without a later update (below); their error, naming the expert and the file.
  Status BeginStep();
  // Working set: the memory of `entry`'s parts until UnbindAll (values[k] and grads[k] hold
  // parts[k].n floats; grads may be null for a forward without a backward).
  void Bind(size_t entry, std::span<float* const> values, std::span<const float* const> grads);
  void UnbindAll();
  // The entry of global expert `expert` of decoder layer `decoder_layer` (checked).
  size_t Entry(int decoder_layer, int expert) const;
  // The model is about to compute the experts first_expert .. first_expert + rows.size() - 1 of
  // decoder layer `decoder_layer` with rows[i] rows each. Those with rows are activated for this
  // step's Update and, in exact mode, brought up to date (their values written) first; in the
  // working set their values are written whether or not they were behind.
  Status Prepare(int decoder_layer, int first_expert, std::span<const int64_t> rows);
  // One optimizer update at learning rate `lr` of every expert activated since BeginStep, from the
  // gradients in their parts. Call once per step that is not skipped.
  Status Update(double lr);
  // Ends a step (skipped or not): LFU bookkeeping and the write-back of every dirty entry, so the
  // store's durable generation holds the state after this step.
  Status EndStep();
  // Exact mode: replays every expert's missing updates, so that every part's value and every
  // state (Export) is the in-memory one; then writes back. Sparse mode: only the write-back.
  Status Consolidate();

  // The state of `entry` as the in-memory trainer keeps it, per part: the master (when `values`
  // is not null), m and v (empty when the optimizer keeps no such moment) and the step count.
  // Call Consolidate first for exact values.
  Status Export(size_t entry, std::vector<std::vector<float>>* values,
                std::vector<std::vector<float>>* m, std::vector<std::vector<float>>* v,
                int64_t* opt_step);
  // Replaces the state of `entry`: the master from `values` (per part; null: from its parts'
  // values, resident only), `m`, `v` (per part; empty when the optimizer keeps no such moment)
  // and the step count. `updates` is the number of updates the run has made (the in-memory
  // trainer's largest step count); every Import of one restore passes the same value.
  // An entry not yet written (options.defer_initial) is written straight to the store, a few in
  // flight at once: a failed write is returned by a later Import or the next other call, naming
  // its expert, and leaves that entry not written.
  Status Import(size_t entry, const std::vector<std::vector<float>>* values,
                const std::vector<std::vector<float>>& m, const std::vector<std::vector<float>>& v,
                int64_t opt_step, int64_t updates);

  const std::vector<ExpertEntry>& entries() const { return entries_; }
  size_t cache_slots() const;
  size_t extent_bytes() const;  // one expert's state on disk
  const std::string& path() const;
  ExpertStoreStats stats() const;

 private:
  struct Meta {
    int64_t opt_step = 0;
    int64_t last_update = 0;  // the update count this state includes
  };

  ExpertStateStore(const ExpertStateStoreOptions& options, Optimizer* optimizer,
                   std::vector<ExpertEntry> entries);
  Status Open();
  // Writes the initial state of every entry not yet written (unwritten_), a batch at a time.
  Status WriteInitialStates();
  // Waits for the imports in flight (imports_) down to `keep` of them; the first failure, as Fail.
  Status FinishImports(size_t keep);
  // Before any use of the store but Import: the imports finished, the rest of the initial states
  // written (defer_initial); then restoring_ ends.
  Status Settle() {
    if (!restoring_ && unwritten_count_ == 0) return Status::Ok();
    return SettleSlow();
  }
  Status SettleSlow();
  // Copies a state (as Import takes it) into `state` (the extent's payload layout).
  void FillState(size_t entry, const std::vector<std::vector<float>>* values,
                 const std::vector<std::vector<float>>& m, const std::vector<std::vector<float>>& v,
                 const Meta& meta, std::byte* state) const;
  storage::ExpertKey Key(size_t entry) const;
  // Acquires `entry` (kWrite marks it dirty); errors name the expert and the file.
  Result<storage::CacheHandle> AcquireEntry(size_t entry,
                                            storage::AccessMode mode = storage::AccessMode::kWrite);
  // The prefetch window: queues entries of `demand` from *cursor on (HIGH) while the window has
  // room, skipping those cached or already asked for.
  void TopUp(const std::vector<size_t>& demand, size_t* cursor);
  // The read-ahead of Update: queues (HIGH) the entries of order[from, from + window) not cached
  // nor asked for, while the window has room.
  void ReadAhead(const std::vector<size_t>& order, size_t from);
  // Queues `entry` (a hint: failures surface at its Acquire). False when the window is full.
  bool PrefetchEntry(size_t entry, storage::PrefetchPriority priority);
  // LOW: the entries of MoE layer `moe` by decayed activation count, most active first, that
  // `wanted` selects and that are not cached; up to half the window.
  void LookAhead(int moe, const std::function<bool(size_t)>& wanted);
  // Releases every prefetched entry's pin; counts those never taken.
  void ReleasePrefetched();
  // Working set, crc32c store: reads only the masters of `entries` (their state's first part,
  // none cached) into their bound values and offers each to the cache (ExpertCache::OfferPrefix),
  // so that their update reads only the rest and verifies the whole extent.
  Status ReadMasters(const std::vector<size_t>& entries);
  // Withdraws `entry`'s offered master; when no load used it, it is verified now (its rest read
  // into scratch, the extent's checksum checked) or, with `later`, at the next Verify.
  Status Withdraw(size_t entry, bool later = false);
  // Verifies the withdrawn masters not yet verified (Withdraw with `later`).
  Status VerifyWithdrawn();
  // Replays the updates after the state's last_update up to `target` with a zero gradient, then
  // optionally one update from the parts' gradients, then writes the master into the parts.
  // `state`: the entry's payload (a cache slot or a staging extent).
  void Advance(size_t entry, std::span<std::byte> state, int64_t target, const double* lr);
  // Copies the master of `state` into the entry's parts' values (those bound).
  void WriteValues(size_t entry, std::span<const std::byte> state) const;
  // Staging: a free staging extent for `entry` (allocated once, kept) and its index, or -1 when
  // the budget is used up or the entry has no gradient bound (an evaluation's forward).
  Result<int> StageEntry(size_t entry);
  // Update of a staged entry: waits for its rest and updates it; then WriteStaged starts its
  // write.
  Status UpdateStaged(size_t entry, double lr);
  void WriteStaged(size_t entry);
  // Starts the rest reads of the staged entries whose masters were read (of one of them).
  void IssueRests();
  struct Staged;
  void IssueRest(Staged& staged);
  // Waits for the reads and writes of the staged entries `which` selects and frees their
  // extents; the first failure, naming its expert.
  Status RetireStaged(const std::function<bool(const Staged&)>& which);
  Status DrainStaging();   // every staged entry
  Status RetireCarried();  // those of an earlier step (their writes)
  Status Fail(size_t entry, const Status& status) const;
  // A failed write-back of the cache entry `key` (ExpertCache::Flush), as Fail.
  Status WriteBackFailed(storage::ExpertKey key, const Status& status) const;
  size_t EntryIndex(int moe_layer, int local) const;

  ExpertStateStoreOptions options_;
  Optimizer* optimizer_;
  std::vector<ExpertEntry> entries_;
  std::vector<size_t> numel_;  // per entry: parameters
  int num_moe_layers_ = 0;
  int experts_per_layer_ = 0;        // local experts per MoE layer
  std::vector<int> first_expert_;    // per MoE layer: the first local global id
  std::vector<int> decoder_to_moe_;  // decoder layer -> MoE layer, or -1
  bool with_m_ = false, with_v_ = false;
  std::unique_ptr<storage::ExpertStore> store_;
  std::unique_ptr<storage::ExpertCache> cache_;
  std::vector<float> zeros_;          // the largest expert's zero gradient
  std::vector<int64_t> last_update_;  // per entry: its state's last_update (mirror of meta)
  // defer_initial: per entry, no state of this run written (nor submitted) yet; their count.
  std::vector<char> unwritten_;
  size_t unwritten_count_ = 0;
  // Imports written straight to the store, in flight: the entry, its state (borrowed by the
  // store until the write completes) and the write.
  struct DirectImport {
    size_t entry = 0;
    std::vector<std::byte> state;
    std::future<Result<uint64_t>> written;
  };
  std::deque<DirectImport> imports_;
  // defer_initial, until the first Settle that succeeds: the cache has not been used, so Import
  // writes straight to the store (the store publishes the writes of one expert in order).
  bool restoring_ = false;
  std::vector<char> activated_;  // per entry: activated since BeginStep
  std::vector<size_t> activated_order_;
  int64_t updates_ = 0;  // updates made by the run
  int64_t lr_base_ = 0;  // lrs_[i] is the learning rate of update lr_base_ + 1 + i
  std::vector<double> lrs_;
  uint64_t replayed_ = 0;
  double wait_seconds_ = 0;
  double update_seconds_ = 0, end_step_seconds_ = 0;

  // The sparse-axis prefetch (null when off).
  class PinHop;
  std::unique_ptr<PinHop> hop_;                      // holds the prefetched entries' pins
  std::unique_ptr<storage::Prefetcher> prefetcher_;  // borrows cache_ and hop_
  size_t window_ = 0;                                // most entries asked for and not yet taken
  std::vector<size_t> update_plan_;                  // activated entries, in activation order
  size_t update_cursor_ = 0;                         // of update_plan_, queued up to here
  std::vector<double> activity_;                     // per entry: decayed activation count
  // Split reads (ReadMasters): per entry, the master offered to the cache and not yet withdrawn;
  // the withdrawn ones never verified; the masters' read buffers; the time spent reading them.
  std::vector<std::optional<storage::ExpertStore::ExtentPrefix>> offered_;
  std::vector<std::pair<size_t, storage::ExpertStore::ExtentPrefix>> unverified_;
  std::vector<std::shared_ptr<Buffer>> master_buffers_;
  uint64_t master_reads_ = 0;
  double master_read_seconds_ = 0;
  int64_t steps_ = 0;
  uint64_t prefetch_unused_ = 0;
  // Staging (above): one extent each, allocated on first use and kept (at most staging_slots_).
  // staged_slot_[entry]: its extent, or -1.
  struct Staged {
    std::shared_ptr<Buffer> extent;  // one stride, 4 KiB aligned
    bool used = false;
    bool carried = false;       // staged in an earlier step: only its write is left
    bool rest_pending = false;  // its master read, its rest not yet asked for (IssueRests)
    size_t entry = 0;
    storage::ExpertStore::ExtentPrefix prefix;
    std::future<Status> rest;               // the read of m, v and the counts
    bool updated = false;                   // Update took it
    std::future<Result<uint64_t>> written;  // its new state's write (after Update)
  };
  std::vector<Staged> staging_;
  size_t staging_in_use_ = 0;
  size_t staging_slots_ = 0;  // options.staging_bytes in extents
  std::vector<int> staged_slot_;
  uint64_t staged_ = 0, staged_ready_ = 0, staged_hits_ = 0;
  double staged_wait_seconds_ = 0;  // Update's waits for staged reads
  // Wall time with a staged read (or write) in flight, from the store's completion threads.
  class BusyClock;
  std::unique_ptr<BusyClock> staged_reads_, staged_writes_;
  // Staged reads completed (stats().staged_reads_landed), from the store's completion threads.
  std::shared_ptr<std::atomic<uint64_t>> staged_reads_landed_ =
      std::make_shared<std::atomic<uint64_t>>(0);
};

}  // namespace sy::launcher
