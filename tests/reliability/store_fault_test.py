#!/usr/bin/python3
"""A store read or write error in the middle of a store-backed `switchyard train`, end to end.

fault_shim (LD_PRELOAD, fault_shim.c) fails one pread (EIO) or one pwrite (ENOSPC) on the store
file of the real process, about 60% of the way through its store I/O. Then, for each:
  - the run exits non-zero with an error that names an expert (experts/layerL/expertE) and the
    store file, and the errno's text
  - the last checkpoint it wrote is intact (h5py opens it and every tensor reads)
  - `--resume` without the fault finishes the run, and its final checkpoint equals, bit for bit,
    that of a run that never failed; so do the losses of the resumed steps
The store is on the posix file system (the shim sees libc's calls, not io_uring's), without the
prefetch: a failed prefetch is only a hint, and the read is retried on demand, so one failed read
of a prefetch does not end the run (the shim fails one call).
Prints "store fault ok".

    store_fault_test.py SWITCHYARD SHIM CONFIG WORKDIR
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from distributed_equivalence import compare_checkpoints, compare_losses, losses  # noqa: E402

import h5py  # noqa: E402

STEPS = 8
EVERY = 2


def train(switchyard, config, work, tag, env=None, resume=False):
    cmd = [switchyard, "train", "--config", config,
           "--set", f"train.steps={STEPS}", "--set", "train.eval_every=0",
           "--set", "train.eval_batches=1", "--set", "train.threads=1",
           "--set", "log.every=1", "--set", "log.progress=none",
           "--set", f"log.metrics={work}/{tag}.jsonl",
           "--set", f"checkpoint.dir={work}/{tag}-ckpt", "--set", f"checkpoint.every={EVERY}",
           "--set", f'expert_store.dir="{work}/{tag}-store"',
           "--set", "expert_store.filesystem=posix", "--set", "expert_store.prefetch=false"]
    if resume:
        cmd.append("--resume")
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=full_env)


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def checkpoints(d):
    return sorted(f for f in os.listdir(d) if f.startswith("step-") and f.endswith(".h5"))


def readable(path):
    with h5py.File(path, "r") as f:
        n = []
        f.visititems(lambda name, obj: n.append(obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return len(n)


def main():
    switchyard, shim, config, work = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ref = train(switchyard, config, work, "ref")
    if ref.returncode != 0:
        fail(f"the uninterrupted run failed:\n{ref.stdout}")
    final = f"step-{STEPS:08d}.h5"

    for op, kind, errno_text in (("read", "EIO", "Input/output error"),
                                 ("write", "ENOSPC", "No space left on device")):
        tag = f"fault-{op}"
        store = f"{work}/{tag}-store"
        # Count the store's calls of this kind in a run without the fault.
        journal = f"{work}/{tag}.journal"
        env = {"LD_PRELOAD": shim, "SY_FAULT_PATH": "rank-0.store", "SY_FAULT_OPS": op,
               "SY_FAULT_JOURNAL": journal}
        counted = train(switchyard, config, work, tag, env)
        if counted.returncode != 0:
            fail(f"the journal run failed:\n{counted.stdout}")
        with open(journal) as f:
            calls = sum(1 for line in f if f" {op} " in line)
        if calls < 10:
            fail(f"only {calls} store {op}s were seen: is the shim watching {store}?")
        for d in (f"{work}/{tag}-ckpt", store):
            shutil.rmtree(d, ignore_errors=True)
        os.remove(f"{work}/{tag}.jsonl")

        at = calls * 6 // 10
        env = {"LD_PRELOAD": shim, "SY_FAULT_PATH": "rank-0.store", "SY_FAULT_OPS": op,
               "SY_FAULT_AT": str(at), "SY_FAULT_KIND": kind}
        failed = train(switchyard, config, work, tag, env)
        out = failed.stdout
        if failed.returncode == 0:
            fail(f"{op} {at} of {calls} failed with {kind} and the run still succeeded:\n{out}")
        if "experts/layer" not in out or "rank-0.store" not in out or errno_text not in out:
            fail(f"the error does not name the expert, the store file and '{errno_text}':\n{out}")
        if kind == "ENOSPC" and ("point expert_store.dir at a larger disk" not in out or
                                 "data.batch_size" in out):
            fail(f"a full store disk must name its fix (expert_store.dir), not data.batch_size:\n"
                 f"{out}")
        error_lines = [line for line in out.splitlines() if "error" in line.lower()]
        done = checkpoints(f"{work}/{tag}-ckpt")
        if not done or final in done:
            fail(f"{op} fault at {at}/{calls}: checkpoints {done}; expected a failure mid-run")
        last = f"{work}/{tag}-ckpt/{done[-1]}"
        tensors = readable(last)
        print(f"{op} {at} of {calls} failed with {kind}: exit {failed.returncode}, "
              f"'{error_lines[-1].strip() if error_lines else out.strip().splitlines()[-1]}'; "
              f"last checkpoint {done[-1]} intact ({tensors} datasets)")

        resumed = train(switchyard, config, work, tag, resume=True)
        if resumed.returncode != 0:
            fail(f"the resume after the {op} fault failed:\n{resumed.stdout}")
        compare_checkpoints(f"{work}/{tag}-ckpt/{final}", f"{work}/ref-ckpt/{final}", 0.0)
        first = int(done[-1][5:13]) + 1
        compare_losses(losses(f"{work}/{tag}.jsonl"), losses(f"{work}/ref.jsonl"),
                       range(first, STEPS + 1), 0.0, "resumed losses")
        print(f"resumed from {done[-1]}: steps {first}-{STEPS} and the final checkpoint "
              f"bit-identical to the run that never failed")
    shutil.rmtree(work, ignore_errors=True)
    print("store fault ok")


if __name__ == "__main__":
    main()
