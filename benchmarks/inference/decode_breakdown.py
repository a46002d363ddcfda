#!/usr/bin/env python3
"""Where a decode step's time goes, from a `perf record --call-graph dwarf` of `bench decode`.

  benchmarks/inference/profile_decode.sh BINARY OUT   (records OUT.data, then runs this)
  decode_breakdown.py OUT.data STEP_MS RECORD_SECONDS FREQUENCY

Each sample of the process is put in one bucket by its call stack (leaf first): the op kind the
stack runs under (attention projections, attention, experts, router, norms, LM head ...), the
thread pool's own code (a worker spinning for work, the caller waiting for the workers to leave a
region), the allocator, copies. The main thread drives the step, so its samples, scaled to the
median step, give microseconds per step per bucket; the worker's samples are shown beside them.
perf samples on-CPU time only: on a loaded machine time spent descheduled is not in the table, so
the microseconds are on-CPU microseconds of the main thread per step (samples / FREQUENCY, over
RECORD_SECONDS / STEP_MS steps), and the shares are the figures to compare.
"""
import collections
import subprocess
import sys

# (bucket, any frame that must be on the stack), first match wins; checked leaf-side rules first.
LEAF_RULES = [
    ("allocation (malloc/free)", ("malloc", "free", "cfree", "operator new", "operator delete",
                                  "_int_malloc", "_int_free", "aligned_alloc", "posix_memalign")),
    ("copies (memcpy/memset)", ("__memmove", "__memcpy", "__memset")),
]
OP_RULES = [
    ("pool: caller waits in a region", ("sy::ThreadPool::RunRegion",), True),
    ("pool: queued helpers (futures)", ("sy::ThreadPool::ParallelForQueued",), True),
    ("pool: caller waits (old ParallelFor)", ("sy::ThreadPool::ParallelFor",), True),
    ("pool: worker spins/sleeps", ("sy::ThreadPool::WorkerLoop",), True),
    ("expert GEMVs (gate/up, down)", ("GemvTransB", "GemvBf16", "GemvTransBBlock"),
     ("sy::LocalExpertCompute::Forward",)),
    ("expert SwiGLU", ("Swiglu",), ("sy::LocalExpertCompute::Forward",)),
    ("experts: other", None, ("sy::LocalExpertCompute::Forward",)),
    ("attention (over the KV cache)", None, ("sy::KvCache::Attend",)),
    ("q/k rope", None, ("sy::AttentionBlock::NormRope",)),
    ("attention projections (q, k, v, o)", None, ("sy::AttentionBlock::Forward",)),
    ("router (softmax, top-k, stats)", None, ("sy::Router::Forward",)),
    ("router GEMV", None, ("sy::MoeLayer::Forward",), ("sy::Linear::Forward",)),
    ("dispatch plan, permute/combine", None, ("sy::MoeLayer::Forward",)),
    ("norms", None, ("sy::RmsNormLayer::Forward",)),
    ("residual adds", None, ("sy::DecoderLayer::ForwardImpl",)),
    ("LM head", None, ("sy::Linear::Forward",)),
    ("embedding, step setup", None, ("sy::MoeModel::ForwardCached",)),
    ("engine: decoder, sampling", None, ("sy::GenerateEngine", "sy::KvCacheDecoder",
                                        "sy::Sampler", "sy::Workspace", "sy::KvCache::Begin")),
]


def bucket(frames, is_main):
    leaf = frames[0] if frames else "?"
    for name, pats in LEAF_RULES:
        if any(leaf.startswith(p) or leaf.startswith("__GI_" + p) for p in pats):
            return name
    stack = " | ".join(frames)
    for rule in OP_RULES:
        name, leaf_pats, *ancestors = rule
        if ancestors and ancestors[0] is True:
            # the pool's own code: the leaf frame itself (or a pause/yield syscall under it)
            target = leaf_pats[0]
            if leaf.startswith(target) or (len(frames) > 1 and frames[1].startswith(target)
                                           and "yield" in leaf):
                return name
            continue
        if leaf_pats is not None and not any(p in stack for p in leaf_pats):
            continue
        if all(any(a in f for f in frames for a in group) for group in ancestors):
            return name
    if not is_main:
        for f in frames:
            if "sy::ThreadPool::JoinRegion" in f or "ThreadPool::WorkerLoop" in f:
                return "worker: region bodies (GEMV and ops, any kind)"
    return "other"


def main():
    data, step_ms = sys.argv[1], float(sys.argv[2])
    seconds, freq = float(sys.argv[3]), float(sys.argv[4])
    out = subprocess.run(["perf", "script", "-i", data, "-F", "pid,tid,ip,sym", "--no-inline"],
                         capture_output=True, text=True, errors="replace").stdout
    counts = {True: collections.Counter(), False: collections.Counter()}
    other = collections.Counter()
    for block in out.split("\n\n"):
        lines = [l for l in block.splitlines() if l.strip()]
        if not lines:
            continue
        head = lines[0].split()
        pid_tid = head[0] if "/" in head[0] else None
        if pid_tid is None:
            continue
        pid, tid = pid_tid.split("/")
        frames = [l.strip() for l in lines[1:]]
        frames = [f.split(" ", 1)[1] if " " in f else f for f in frames]  # drop the address
        is_main = pid == tid
        b = bucket(frames, is_main)
        counts[is_main][b] += 1
        if b == "other" and is_main and frames:
            other[frames[0][:90]] += 1
    total_main = sum(counts[True].values()) or 1
    total_worker = sum(counts[False].values()) or 1
    steps = seconds * 1000 / step_ms
    us_per_sample = 1e6 / freq / steps
    print(f"| bucket | main thread share | on-CPU us per step (main) | worker thread share |")
    print("| --- | --- | --- | --- |")
    names = sorted(set(counts[True]) | set(counts[False]), key=lambda b: -counts[True][b])
    for b in names:
        m, w = counts[True][b], counts[False][b]
        print(f"| {b} | {100 * m / total_main:.1f}% | {m * us_per_sample:.0f} | "
              f"{100 * w / total_worker:.1f}% |")
    print(f"\nsamples: main {total_main}, worker {total_worker} at {freq:.0f} Hz over "
          f"{seconds:.0f} s;"
          f" median step {step_ms} ms, so about {steps:.0f} steps; main thread on-CPU "
          f"{total_main * us_per_sample / 1000:.1f} ms per step")
    if other:
        print("\nmain-thread 'other', top leaf frames: " +
              "; ".join(f"{k} ({v})" for k, v in other.most_common(8)))


if __name__ == "__main__":
    main()
