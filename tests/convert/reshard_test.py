#!/usr/bin/python3
"""A checkpoint of an expert-parallel run is consolidated: it resumes under another ep_size, and
`switchyard convert` native -> native copies it bit for bit (issue 17, resharding).

Usage: /usr/bin/python3 reshard_test.py SWITCHYARD "MPIRUN ARGS" CONFIG COMPARE_CHECKPOINTS WORK

1. `MPIRUN -np 4 switchyard train` with parallel.ep_size 4 for STEPS steps writes one step-*.h5
   (no per-rank files) holding every expert of every layer and its AdamW moments.
2. `switchyard convert` of it native -> native: scripts/compare_checkpoints.py (h5py) finds every
   dataset and attribute equal, and `inspect --checksums` gives every tensor, the optimizer
   moments m and v included, the same CRC-32C.
3. The checkpoint resumes for MORE steps under ep_size 4 (mpirun -np 4, the reference), ep_size 2
   (mpirun -np 2) and ep_size 1 (one process): each resumed run's loss and ce_loss at every step
   after the checkpoint equal the reference's within 1e-4 relative (the tolerance of
   tests/train/distributed_equivalence.py), and each final checkpoint counts STEPS + MORE steps.
   The converted copy resumes under ep_size 2 with the same losses, bit for bit, as the original.
Prints "ok"/"FAIL" per check and exits 1 on any failure.
"""
import json
import os
import shlex
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from distributed_equivalence import losses  # noqa: E402 (the metrics file's losses by step)

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

STEPS, MORE, TOL = 4, 2, 1e-4
FAILURES = []


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        FAILURES.append(what)
    return ok


def run(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        check(False, f"{what}: exit {r.returncode}: {(r.stdout + r.stderr).strip()[-600:]}")
    return r.returncode == 0


def checksums(binary, path):
    r = subprocess.run([binary, "inspect", "--checksums", "--json", path], capture_output=True,
                       text=True)
    if r.returncode != 0:
        check(False, f"inspect {path}: {r.stderr.strip()}")
        return {}
    return {t["switchyard_name"]: (t["dtype"], t["shape"], t["crc32c"])
            for t in json.loads(r.stdout)["tensors"]}


def main():
    binary, mpirun, config, compare, work = sys.argv[1:6]
    mpirun = shlex.split(mpirun)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ckpt_name = f"step-{STEPS:08d}.h5"

    def train(tag, ep, steps, resume_from=None):
        cmd = ([] if ep == 1 else mpirun + ["-np", str(ep)]) + [
            binary, "train", "--config", config, "--set", f"train.steps={steps}",
            "--set", "train.eval_every=0", "--set", "train.threads=1", "--set", "log.every=1",
            "--set", "log.progress=none", "--set", f"parallel.ep_size={ep}",
            "--set", f"log.metrics={work}/{tag}.jsonl", "--set", f"checkpoint.dir={work}/{tag}"]
        if resume_from:
            os.makedirs(f"{work}/{tag}")
            shutil.copy(resume_from, f"{work}/{tag}/{ckpt_name}")
            cmd += ["--resume"]
        return run(cmd, f"train {tag} (ep_size {ep}, {'resumed, ' if resume_from else ''}"
                        f"{steps} steps)")

    if not train("ep4", 4, STEPS):
        return 1
    files = sorted(x for x in os.listdir(f"{work}/ep4") if x != "switchyard.lock")
    source = f"{work}/ep4/{ckpt_name}"
    check(files == [ckpt_name], f"mpirun -np 4 ep_size 4 writes one consolidated file {files}")
    with h5py.File(source, "r") as f:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    experts = [n for n in names if "/expert" in n and not n.startswith("optim/")]
    moments = [n for n in names if n.startswith("optim/m/") or n.startswith("optim/v/")]
    with open(config) as f:
        model = json.load(f)["model"]
    want_experts = model["num_layers"] * model["num_experts"] * 3
    check(len(experts) == want_experts and len(moments) > 2 * want_experts,
          f"the checkpoint holds all {len(experts)} expert matrices (want {want_experts}) and "
          f"{len(moments)} moments")

    copy = f"{work}/converted.h5"
    if run([binary, "convert", "--in", source, "--out", copy], "convert native -> native"):
        r = subprocess.run(["/usr/bin/python3", compare, source, copy], capture_output=True,
                           text=True)
        check(r.returncode == 0, f"compare_checkpoints.py: the converted copy equals the source "
                                 f"{r.stdout.strip()[:300]}")
        a, b = checksums(binary, source), checksums(binary, copy)
        m = [k for k in a if k.startswith("optim/m/") or k.startswith("optim/v/")]
        check(a == b and len(m) == len(moments),
              f"inspect --checksums: all {len(a)} tensors, {len(m)} optimizer moments among "
              f"them, have the same CRC-32C")

    total = STEPS + MORE
    after = range(STEPS + 1, total + 1)
    if not train("again4", 4, total, source):
        return 1
    reference = losses(f"{work}/again4.jsonl")
    check(all(s in reference for s in after), f"ep_size 4 resumes at step {STEPS + 1}")
    for tag, ep, src in (("ep2", 2, source), ("ep1", 1, source), ("conv2", 2, copy)):
        if not os.path.exists(src) or not train(tag, ep, total, src):
            continue
        got = losses(f"{work}/{tag}.jsonl")
        errs = [abs(got[s][i] - reference[s][i]) / max(1.0, abs(reference[s][i]))
                for s in after if s in got and s in reference for i in (0, 1)]
        check(len(errs) == 2 * MORE and max(errs) <= TOL,
              f"{tag}: resumed under ep_size {ep}, steps {list(after)} have the losses of the "
              f"ep_size 4 continuation (max rel err {max(errs, default=float('nan')):.3g})")
        with h5py.File(f"{work}/{tag}/step-{total:08d}.h5", "r") as f:
            steps = np.asarray(f["optim/steps"][()]).reshape(-1)
        check(steps.size > 0 and np.all(steps == total),
              f"{tag}: the final checkpoint counts {total} optimizer steps {steps[:4]}")
    if os.path.exists(f"{work}/conv2.jsonl") and os.path.exists(f"{work}/ep2.jsonl"):
        a, b = losses(f"{work}/conv2.jsonl"), losses(f"{work}/ep2.jsonl")
        check(all(a.get(s) == b.get(s) for s in after) and all(s in a for s in after),
              "the converted copy resumes with the original's losses bit for bit")
    if FAILURES:
        print("\nFAILED:\n  " + "\n  ".join(FAILURES))
        return 1
    print("\nresharding checks pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
