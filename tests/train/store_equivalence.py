#!/usr/bin/python3
"""Training on the expert store is bit-identical to in-memory training, under mpirun.

Runs `[MPIRUN -np NP] switchyard train` on CONFIG twice with the same settings (train.precision
bf16 or f16 too: the store keeps the f32 masters, and the working set's compute copy is their
rounding, as the in-memory model's is): once with the
expert states in memory (the oracle) and once with expert_store.dir set and a CPU cache of
FRACTION of each rank's expert states (at most 25%, so experts are evicted and written back every
step). Checks, exactly (no tolerance):
  - the loss and ce_loss of every step
  - every tensor of the final checkpoints (parameters, AdamW moments, optimizer step counts)
  - every step's metrics carry the store's counters, with misses and bytes written in every step
  - the compute copy: rank 0's model held only the step's activated experts (working_set_bytes
    > 0, and at most all of its experts' 8 B per parameter, 16 B on sim with the host copies),
    with one holder per expert (ep_size equal to NP, or one process) and with replicas (ep_size <
    NP: the experts any replica activated, those of the others with a gradient only)
  - with --expect-replica-gradients (replicas, and more experts than one replica's tokens
    activate): some step bound another replica's expert on rank 0 with a gradient only
    (replica_gradients > 0), so the union of the replicas' working sets was exercised
  - with --resume-check: both runs continue 2 steps from their checkpoints (the store run reopens
    its store files), again exactly equal
Prints "store equivalence ok".

    store_equivalence.py --switchyard BIN [--mpirun "mpirun ARGS" --np 4] --config CFG \
        [--set parallel.ep_size=4 ...] [--steps 12] [--fraction 0.25] [--resume-check]
        [--expect-replica-gradients]
"""
import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from distributed_equivalence import compare_checkpoints, compare_losses, losses, run  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--switchyard", required=True)
    ap.add_argument("--mpirun", default="")
    ap.add_argument("--np", type=int, default=1)
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--fraction", type=float, default=0.25)
    ap.add_argument("--resume-check", action="store_true")
    ap.add_argument("--expect-replica-gradients", action="store_true")
    args = ap.parse_args()

    with open(args.config) as f:
        cfg = json.load(f)
    sets = dict(s.split("=", 1) for s in args.sets)
    model = cfg["model"]
    hidden = int(sets.get("model.hidden_size", model["hidden_size"]))
    inter = int(sets.get("model.moe_intermediate_size", model["moe_intermediate_size"]))
    experts = int(sets.get("model.num_experts", model["num_experts"]))
    layers = int(sets.get("model.num_layers", model["num_layers"]))
    ep = int(sets.get("parallel.ep_size", cfg.get("parallel", {}).get("ep_size", 1)))
    # The working set's bytes per parameter (launcher/training/expert_working_set.h): the f32
    # weight and gradient, with the device's copies on sim; in bf16 / f16 also the 16-bit weights,
    # which the device holds instead of the f32 ones.
    device = sets.get("train.device", cfg.get("train", {}).get("device", "cpu"))
    precision = sets.get("train.precision", cfg.get("train", {}).get("precision", "f32"))
    narrow = 0 if precision == "f32" else 2
    ws_per_param = 8 + narrow + (0 if device == "cpu" else (narrow or 4) + 4)
    # One expert's extent: master, m, v (AdamW) and 16 bytes of step counts, in 4 KiB pages.
    extent = math.ceil((3 * hidden * inter * 12 + 16) / 4096) * 4096
    local = layers * experts // ep
    slots = max(1, int(local * args.fraction))
    if slots > local * 0.25:
        sys.exit(f"FAIL: {slots} of {local} experts is more than 25% of the expert states")
    cache_mib = slots * extent / (1 << 20) + 1e-6

    tmp = tempfile.mkdtemp(prefix="sy_train_store_")
    launcher = []
    if args.np > 1:
        launcher = shlex.split(args.mpirun) + ["-np", str(args.np)]

    def train(tag, store, steps=args.steps, resume=False):
        cmd = launcher + [args.switchyard, "train", "--config", args.config,
                          "--set", f"train.steps={steps}", "--set", "train.eval_every=0",
                          "--set", "train.eval_batches=1", "--set", "train.threads=1",
                          "--set", "log.every=1", "--set", "log.progress=lines",
                          "--set", f"log.metrics={tmp}/{tag}.jsonl",
                          "--set", f"checkpoint.dir={tmp}/{tag}-ckpt"]
        for s in args.sets:
            cmd += ["--set", s]
        if store:
            cmd += ["--set", f'expert_store.dir="{tmp}/store"', "--set",
                    "expert_store.filesystem=posix", "--set", f"expert_store.cache_mib={cache_mib}"]
        if resume:
            cmd += ["--resume"]
        run(cmd, f"{tag} (np {args.np}{', resumed' if resume else ''})")

    train("memory", store=False)
    train("store", store=True)
    steps = range(1, args.steps + 1)
    compare_losses(losses(f"{tmp}/store.jsonl"), losses(f"{tmp}/memory.jsonl"), steps, 0.0,
                   "losses")
    ckpt = f"step-{args.steps:08d}.h5"
    compare_checkpoints(f"{tmp}/store-ckpt/{ckpt}", f"{tmp}/memory-ckpt/{ckpt}", 0.0, 0.0)
    with open(f"{tmp}/store.jsonl") as f:
        records = [json.loads(line) for line in f if '"loss"' in line]
    if len(records) != args.steps:
        sys.exit(f"FAIL: {len(records)} step records, expected {args.steps}")
    for rec in records:
        st = rec.get("expert_store")
        if st is None:
            sys.exit(f"FAIL: step {rec['step']} has no expert_store metrics")
        if st["misses"] <= 0 or st["bytes_written"] <= 0:
            sys.exit(f"FAIL: step {rec['step']}: no eviction traffic with {slots} of {local} "
                     f"experts cached: {st}")
        ws = st.get("working_set_bytes", 0)
        resident = local * 3 * hidden * inter * ws_per_param
        if not 0 < ws <= resident:
            sys.exit(f"FAIL: step {rec['step']}: working set of {ws} bytes on rank 0 (ep_size "
                     f"{ep} of {args.np} ranks), expected the activated experts of its "
                     f"{resident} resident bytes")
    union = [rec["expert_store"].get("replica_gradients", 0) for rec in records]
    if ep == args.np and any(union):
        sys.exit(f"FAIL: replica gradients {union} without replicas (ep_size {ep})")
    if args.expect_replica_gradients and not any(union):
        sys.exit(f"FAIL: no step bound another replica's expert on rank 0 ({union}): the union "
                 f"of the replicas' working sets was not exercised")
    print(f"rank 0's experts bound for another replica, per step: {union}")
    ws = [rec["expert_store"].get("working_set_bytes", 0) for rec in records]
    every = local * 3 * hidden * inter * ws_per_param
    print(f"rank 0's working set: {min(ws)} to {max(ws)} bytes a step "
          f"(all its {local} experts at {ws_per_param} B/param: {every} bytes)")
    if args.resume_check:
        # Both continue from their checkpoints; the store run reopens its store files.
        more = args.steps + 2
        train("memory", store=False, steps=more, resume=True)
        train("store", store=True, steps=more, resume=True)
        compare_losses(losses(f"{tmp}/store.jsonl"), losses(f"{tmp}/memory.jsonl"),
                       range(args.steps + 1, more + 1), 0.0, "resumed losses")
        ckpt = f"step-{more:08d}.h5"
        compare_checkpoints(f"{tmp}/store-ckpt/{ckpt}", f"{tmp}/memory-ckpt/{ckpt}", 0.0, 0.0)
        print("resume: 2 more steps from both checkpoints, bit-identical")
    # Each rank's store file and its lock (launcher/training/directory_lock.h), nothing else.
    files = sorted(os.listdir(f"{tmp}/store"))
    expected = sorted([f"rank-{r}.store" for r in range(args.np)] +
                      [f"rank-{r}.lock" for r in range(args.np)])
    if files != expected:
        sys.exit(f"FAIL: store files {files}, expected {expected}")
    print(f"{args.steps} steps, {slots} of {local} experts cached per rank: losses, parameters, "
          f"moments and step counts bit-identical to in-memory training")
    subprocess.run(["rm", "-rf", tmp])
    print("store equivalence ok")


if __name__ == "__main__":
    main()
