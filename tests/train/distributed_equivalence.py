#!/usr/bin/python3
"""Distributed training equals single-process training.

Runs `switchyard train` on CONFIG twice from the same seed on the same global batches: once in one
process (the oracle: parallel.ep_size=1, no mpirun) and once as `MPIRUN -np NP switchyard train`
with the given parallel settings. Both run STEPS steps and write every step's metrics and the final
checkpoint. Checks, with err(a, b) = |a - b| / max(1, |b|) (b the single-process value):
  - the loss and ce_loss of every step:                     err <= TOL
  - every tensor of the final checkpoints, read with h5py: the same names and shapes, the optimizer
    step counts equal, parameters and AdamW moments        err <= TOL
  - with --resume-check: the distributed checkpoint resumes in one process, and the single-process
    checkpoint resumes under mpirun, for 2 more steps each, with losses within TOL of the
    single-process run resumed from its own checkpoint.
  - with --generate-check: `switchyard generate` loads both final checkpoints; the prompt logits
    agree within TOL.
  - with --resume-np M: the distributed checkpoint also resumes under `mpirun -np M` (with the
    --resume-set settings instead of the --set ones) for 2 more steps, losses within TOL of the
    single-process continuation: a run resumed at another world size continues the loss curve.
    Each --then-resume 'NP KEY=VALUE ...' resumes the checkpoint of the hop before it under
    `mpirun -np NP` with those settings for 2 more steps (4 -> 8 -> 4, say), losses likewise.
  - with --expect-output REGEX: the distributed run's output matches REGEX (say, that it
    rebalanced its tasks mid-way, so that the losses compared are those of a rebalanced run).
  - with --store CACHE_MIB: every run but the single-process oracle (and its continuation) keeps
    its expert states on the expert store (expert_store.dir, a CPU cache of CACHE_MIB per rank),
    one store directory for all of them, so that each resume at another world size finds the
    store files of the run before it, of another layout: each such run must say that it rebuilds
    them (and removes those of ranks it does not have), leave exactly its own ranks' store files,
    and log the store's metrics every step.
--common-set settings apply to both runs (the per-task batch sizes both compute); --set ones only
to the distributed run.
Prints the largest errors measured and "distributed equivalence ok".

    distributed_equivalence.py --switchyard BIN --mpirun "mpirun ARGS" --np 4 --config CFG \
        [--set parallel.ep_size=2 ...] [--steps 20] [--tol 1e-4] [--resume-check]
"""
import argparse
import json
import re
import os
import shlex
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np


def run(cmd, what):
    start = time.time()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    elapsed = time.time() - start
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout)
        sys.exit(f"FAIL: {what} exited {proc.returncode}: {' '.join(cmd)}")
    print(f"{what}: {elapsed:.1f}s, last line: {proc.stdout.strip().splitlines()[-1]}")
    return proc.stdout


def mpi_script_args(extra=None):
    """The arguments every mpirun training script takes, plus those `extra(parser)` adds."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--switchyard", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--config", required=True)
    if extra:
        extra(ap)
    return ap.parse_args()


def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "loss" in rec:
                out[rec["step"]] = (rec["loss"], rec["ce_loss"])
    return out


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b))))


def compare_losses(dist, single, steps, tol, what):
    worst = 0.0
    for step in steps:
        if step not in dist or step not in single:
            sys.exit(f"FAIL: {what}: step {step} missing from the metrics")
        for i, name in enumerate(("loss", "ce_loss")):
            e = rel_err(dist[step][i], single[step][i])
            worst = max(worst, e)
            if e > tol:
                sys.exit(f"FAIL: {what}: step {step} {name} {dist[step][i]} vs single-process "
                         f"{single[step][i]} (err {e:.3g} > {tol})")
    return worst


def tensors(f):
    names = []
    f.visititems(lambda name, obj: names.append(name)
                 if isinstance(obj, h5py.Dataset) and not name.startswith("meta/") else None)
    return sorted(names)


def compare_checkpoints(dist_path, single_path, tol, param_tol=None):
    """Every tensor within `tol` (the parameters within `param_tol` when given)."""
    param_tol = tol if param_tol is None else param_tol
    worst = {"params": 0.0, "optim": 0.0}
    with h5py.File(dist_path, "r") as d, h5py.File(single_path, "r") as s:
        dn, sn = tensors(d), tensors(s)
        if dn != sn:
            sys.exit(f"FAIL: checkpoint tensors differ: only distributed {sorted(set(dn) - set(sn))}, "
                     f"only single {sorted(set(sn) - set(dn))}")
        if int(d.attrs["step"]) != int(s.attrs["step"]):
            sys.exit("FAIL: checkpoint steps differ")
        for name in sn:
            a, b = d[name][()], s[name][()]
            if a.shape != b.shape:
                sys.exit(f"FAIL: {name}: shape {a.shape} vs {b.shape}")
            if name == "optim/steps":
                if not (a == b).all():
                    sys.exit(f"FAIL: optim/steps differ: {a} vs {b}")
                continue
            e = rel_err(a, b)
            key = "optim" if name.startswith("optim/") else "params"
            worst[key] = max(worst[key], e)
            limit = tol if key == "optim" else param_tol
            if e > limit:
                sys.exit(f"FAIL: {name}: err {e:.3g} > {limit}")
        # The runs moved the parameters: the comparison is not between two initialisations.
        if int(s.attrs["step"]) > 0 and not np.any(s["optim/m/embed_tokens"][()] != 0):
            sys.exit("FAIL: the single-process run did not train")
    return worst


def ep_size(config, sets):
    """parallel.ep_size in a list of key=value settings (the last one wins), else the config's."""
    ep = int(config.get("parallel", {}).get("ep_size", 1))
    for s in sets:
        key, _, value = s.partition("=")
        if key == "parallel.ep_size":
            ep = int(value)
    return ep


def check_store(store_dir, output, np_, experts_per_layer, before, metrics, what):
    """After a store-backed run of np_ ranks, each with experts_per_layer experts per layer: the
    store holds exactly its ranks' files; a run that found files of another layout (`before`: the
    experts per layer of the run before it, None for none) said it rebuilt them; its metrics carry
    the store's counters."""
    # Each rank's store file and its lock (launcher/training/directory_lock.h), nothing else.
    files = sorted(os.listdir(store_dir))
    expected = sorted([f"rank-{r}.store" for r in range(np_)] +
                      [f"rank-{r}.lock" for r in range(np_)])
    if files != expected:
        sys.exit(f"FAIL: {what}: store files {files}, expected {expected}")
    if before is not None and before != experts_per_layer:
        rebuilt = re.findall(r"expert_store: \S+/rank-0\.store holds (\d+) experts per layer, "
                             r"written by a run at another world size or parallel\.ep_size; this "
                             r"rank has (\d+): rebuilding it", output)
        if rebuilt != [(str(before), str(experts_per_layer))]:
            sys.stdout.write(output)
            sys.exit(f"FAIL: {what}: rank 0 did not say it rebuilds its store of {before} experts "
                     f"per layer for {experts_per_layer} (found {rebuilt})")
    with open(metrics) as f:
        records = [json.loads(line) for line in f if '"loss"' in line]
    if not records or any("expert_store" not in r for r in records):
        sys.exit(f"FAIL: {what}: a step without the store's metrics in {metrics}")
    return f"{np_} store files, {experts_per_layer} experts per layer each"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--switchyard", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--np", type=int, required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--param-tol", type=float, default=None,
                    help="the parameters' bound, when not --tol's")
    ap.add_argument("--resume-check", action="store_true")
    ap.add_argument("--generate-check", action="store_true")
    ap.add_argument("--common-set", action="append", default=[], dest="common_sets")
    ap.add_argument("--resume-np", type=int, default=0)
    ap.add_argument("--resume-set", action="append", default=[], dest="resume_sets")
    ap.add_argument("--then-resume", action="append", default=[], metavar="'NP KEY=VALUE ...'")
    ap.add_argument("--expect-output", default="")
    ap.add_argument("--store", type=float, default=0.0, metavar="CACHE_MIB")
    args = ap.parse_args()
    with open(args.config) as f:
        config = json.load(f)
    num_experts = int(config["model"]["num_experts"])

    tmp = tempfile.mkdtemp(prefix="sy_train_dist_")
    common = ["--set", f"train.steps={args.steps}", "--set", "train.eval_every=0",
              "--set", "train.eval_batches=1", "--set", "train.threads=1", "--set", "log.every=1",
              "--set", "log.progress=lines"]

    def train_args(tag, steps=None, resume=False, parallel=True, sets=None):
        out = ["train", "--config", args.config] + common
        for s in args.common_sets:
            out += ["--set", s]
        if parallel:
            for s in (args.sets if sets is None else sets):
                out += ["--set", s]
        else:
            out += ["--set", "parallel.ep_size=1", "--set", "parallel.hierarchical_a2a=false",
                    "--set", "parallel.ranks_per_node=0"]
        if args.store and tag not in ("single", "ref"):
            out += ["--set", f'expert_store.dir="{tmp}/store"',
                    "--set", "expert_store.filesystem=posix",
                    "--set", f"expert_store.cache_mib={args.store}"]
        out += ["--set", f"log.metrics={tmp}/{tag}.jsonl", "--set",
                f"checkpoint.dir={tmp}/{tag}-ckpt"]
        if steps is not None:
            out += ["--set", f"train.steps={steps}"]
        if resume:
            out += ["--resume"]
        return out

    mpirun = shlex.split(args.mpirun) + ["-np", str(args.np), args.switchyard]
    run([args.switchyard] + train_args("single", parallel=False), "single process")
    dist_output = run(mpirun + train_args("dist"), f"mpirun -np {args.np}")
    # The experts per layer of each rank's store file now in {tmp}/store (store runs only).
    stored = None

    def after_store_run(output, np_, sets, tag):
        nonlocal stored
        if not args.store:
            return
        now = num_experts // ep_size(config, sets)
        print("store: " + check_store(f"{tmp}/store", output, np_, now, stored,
                                      f"{tmp}/{tag}.jsonl", tag))
        stored = now

    after_store_run(dist_output, args.np, args.sets, "dist")
    steps = range(1, args.steps + 1)
    single = losses(f"{tmp}/single.jsonl")
    dist = losses(f"{tmp}/dist.jsonl")
    loss_err = compare_losses(dist, single, steps, args.tol, "losses")
    ckpt = f"step-{args.steps:08d}.h5"
    param_tol = args.tol if args.param_tol is None else args.param_tol
    worst = compare_checkpoints(f"{tmp}/dist-ckpt/{ckpt}", f"{tmp}/single-ckpt/{ckpt}", args.tol,
                                param_tol)
    print(f"max err: loss {loss_err:.3g} over {args.steps} steps, parameters {worst['params']:.3g}, "
          f"optimizer moments {worst['optim']:.3g} (tolerance {args.tol})")

    if args.generate_check:
        logits = {}
        for tag in ("single", "dist"):
            out = f"{tmp}/{tag}.logits"
            run([args.switchyard, "generate", "--model", f"{tmp}/{tag}-ckpt/{ckpt}",
                 "--prompt-ids", "1,2,3,4,5,6,7", "--dump-logits", out],
                f"generate from the {tag} checkpoint")
            logits[tag] = np.fromfile(out, dtype=np.float32)
        if logits["dist"].size == 0 or logits["dist"].size != logits["single"].size:
            sys.exit("FAIL: generate logits missing or of different sizes")
        e = rel_err(logits["dist"], logits["single"])
        if e > args.tol:
            sys.exit(f"FAIL: generate logits from the distributed checkpoint: err {e:.3g} > {args.tol}")
        print(f"generate: max prompt-logit err {e:.3g} over {logits['dist'].size} logits")

    if args.resume_np:
        # Each hop resumes the previous one's last checkpoint (the first, the distributed run's)
        # at its world size for 2 more steps; the metrics and checkpoints of all the hops go to
        # one file and one dir.
        hops = [(args.resume_np, args.resume_sets)]
        for hop in args.then_resume:
            words = hop.split()
            hops.append((int(words[0]), words[1:]))
        os.makedirs(f"{tmp}/resized-ckpt")
        os.link(f"{tmp}/dist-ckpt/{ckpt}", f"{tmp}/resized-ckpt/{ckpt}")
        at, sizes = args.steps, [args.np]
        for np_, sets in hops:
            resized = shlex.split(args.mpirun) + ["-np", str(np_), args.switchyard]
            out = run(resized + train_args("resized", steps=at + 2, resume=True, sets=sets),
                      f"mpirun -np {np_} resumed from the -np {sizes[-1]} checkpoint at step {at}")
            after_store_run(out, np_, sets, "resized")
            at += 2
            sizes.append(np_)
        after = range(args.steps + 1, at + 1)
        # The reference: one process continuing its own checkpoint (a copy, so that a
        # --resume-check below still finds the one at `steps`).
        os.makedirs(f"{tmp}/ref-ckpt")
        os.link(f"{tmp}/single-ckpt/{ckpt}", f"{tmp}/ref-ckpt/{ckpt}")
        run([args.switchyard] + train_args("ref", steps=at, resume=True, parallel=False),
            "single process resumed from its own checkpoint")
        path = " -> ".join(f"-np {n}" for n in sizes)
        e = compare_losses(losses(f"{tmp}/resized.jsonl"), losses(f"{tmp}/ref.jsonl"), after,
                           args.tol, f"resume at {path}")
        print(f"resume at another size: {path}, max loss err {e:.3g} over steps "
              f"{after.start}..{after.stop - 1}")

    if args.resume_check:
        more = args.steps + 2
        after = range(args.steps + 1, more + 1)
        # Single-process continuation of each checkpoint dir; metrics append to the same files.
        run([args.switchyard] + train_args("single", steps=more, resume=True, parallel=False),
            "single process resumed from its own checkpoint")
        out = run([args.switchyard] + train_args("dist", steps=more, resume=True, parallel=False),
                  "single process resumed from the distributed checkpoint")
        after_store_run(out, 1, ["parallel.ep_size=1"], "dist")
        reference = losses(f"{tmp}/single.jsonl")
        e1 = compare_losses(losses(f"{tmp}/dist.jsonl"), reference, after, args.tol,
                            "single process resumed from the distributed checkpoint")
        # Distributed resume from the single-process checkpoint (written at step `more` now, so
        # resume the one at `steps` through a fresh dir).
        os.makedirs(f"{tmp}/again-ckpt")
        os.link(f"{tmp}/single-ckpt/{ckpt}", f"{tmp}/again-ckpt/{ckpt}")
        out = run(mpirun + train_args("again", steps=more, resume=True),
                  f"mpirun -np {args.np} resumed from the single-process checkpoint")
        after_store_run(out, args.np, args.sets, "again")
        e2 = compare_losses(losses(f"{tmp}/again.jsonl"), reference, after, args.tol,
                            "distributed resume")
        print(f"resume: max loss err {e1:.3g} (one process from the distributed checkpoint), "
              f"{e2:.3g} (distributed from the single-process checkpoint)")
    subprocess.run(["rm", "-rf", tmp])
    print("distributed equivalence ok")


if __name__ == "__main__":
    main()
