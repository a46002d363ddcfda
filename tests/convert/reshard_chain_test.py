#!/usr/bin/python3
"""Resharding ep_size 4 -> 2 -> 1 -> 4 preserves every tensor and optimizer moment bit for bit, and
training resumed from the resharded checkpoint continues the loss curve (issue 17, resharding).

Usage: /usr/bin/python3 reshard_chain_test.py SWITCHYARD "MPIRUN ARGS" CONFIG COMPARE_CHECKPOINTS WORK

1. The reference: `MPIRUN -np 4 switchyard train` (parallel.ep_size 4) for STEPS + MORE steps with
   checkpoint.every STEPS: step-STEPS.h5 (A) is the checkpoint to reshard, and the losses of steps
   STEPS+1 .. STEPS+MORE and step-(STEPS+MORE).h5 are the uninterrupted run's.
2. Through the trainer: A is resumed with nothing to train by `mpirun -np 2` (ep_size 2), which
   saves what it loaded (Trainer::LoadCheckpoint then SaveDistributedCheckpoint); that by one
   process (ep_size 1); that by `mpirun -np 4` (ep_size 4). Each save equals A bit for bit
   (scripts/compare_checkpoints.py, h5py: every tensor, every m and v, optim/steps, the metadata;
   of the config the model, data and optim blocks: the others record how the saving run was
   started, its ep_size, steps and metrics file).
3. Through `switchyard convert --ep-size`: A -> 2 shards -> 1 file -> 4 shards. Each equals A bit for
   bit, config included, and h5py finds in shard i of N exactly the experts (with their m and v)
   that EP rank i owns (global expert e on rank e // (E / N)) and the dense tensors in shard 0
   only, with the root attributes shard_index i and num_shards N. The 2-shard directory resumed
   by a store-backed `mpirun -np 2` run (expert states on the expert store, read from the shards)
   and saved at once equals A too.
4. Training resumes from the 4-shard directory and from the trainer's ep_size-4 save under
   `mpirun -np 4` for MORE steps: the losses equal the uninterrupted run's bit for bit, and so
   does the final checkpoint (same world, same reduction order, so the math is the same). From the
   2-shard directory under `mpirun -np 2` the losses agree within 1e-4 relative: another world sums
   the data-parallel gradients in another order (the tolerance of
   tests/train/distributed_equivalence.py).
5. Bad --ep-size values (0, 3 for 8 experts, with --to hf) fail naming the flag and the fix, and
   leave no output.
Prints "ok"/"FAIL" per check and exits 1 on any failure.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

# From reshard_test (same directory): check() prints ok/FAIL and records failures in FAILURES;
# run() runs a command, its failure checked; losses() reads a metrics file; the step counts and
# tolerance; h5py, whose absence makes the import exit 77 (skip).
from reshard_test import FAILURES, MORE, STEPS, TOL, check, h5py, losses, run
# The config blocks that record how a run was started (its layout, steps, metrics file, checkpoint
# cadence) rather than what it trains; a checkpoint resaved by another run differs there. The
# model, data and optim blocks must be equal (the trainer's resume requires model and data).
RUN_BLOCKS = [a for b in ("parallel", "train", "log", "checkpoint") for a in ("--ignore-config", b)]
EXPERT = re.compile(r"(?:optim/[mv]/)?experts/layer\d+/expert(\d+)/")


def main():
    binary, mpirun, config, compare, work = sys.argv[1:6]
    mpirun = shlex.split(mpirun)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    with open(config) as f:
        num_experts = json.load(f)["model"]["num_experts"]
    total = STEPS + MORE
    after = list(range(STEPS + 1, total + 1))

    def train(tag, np_, steps, resume_from=None, every=0, extra=()):
        cmd = ([] if np_ == 1 else mpirun + ["-np", str(np_)]) + [
            binary, "train", "--config", config, "--set", f"train.steps={steps}",
            "--set", "train.eval_every=0", "--set", "train.eval_batches=1",
            "--set", "train.threads=1", "--set", "log.every=1", "--set", "log.progress=none",
            "--set", f"parallel.ep_size={np_}", "--set", f"checkpoint.every={every}",
            "--set", f"log.metrics={work}/{tag}.jsonl", "--set", f"checkpoint.dir={work}/{tag}"]
        if resume_from:
            cmd += ["--resume-from", resume_from]
        cmd += list(extra)
        return run(cmd, f"train {tag} (np {np_}{', from ' + resume_from if resume_from else ''})")

    def same(a, b, what, *extra):
        r = subprocess.run(["/usr/bin/python3", compare, a, b, *extra], capture_output=True,
                           text=True)
        return check(r.returncode == 0, f"{what} {r.stdout.strip()[:400]}{r.stderr.strip()[-400:]}")

    def step_file(tag, step):
        return f"{work}/{tag}/step-{step:08d}.h5"

    # 1. The uninterrupted reference, with A at step STEPS on the way.
    if not train("straight", 4, total, every=STEPS):
        return 1
    source = step_file("straight", STEPS)
    reference = losses(f"{work}/straight.jsonl")
    check(os.path.exists(source) and all(s in reference for s in after),
          f"the ep_size 4 run wrote {os.path.basename(source)} and logged steps {after}")

    # 2. 4 -> 2 -> 1 -> 4 through the trainer: load, save, nothing trained.
    previous = source
    for tag, np_ in (("trainer2", 2), ("trainer1", 1), ("trainer4", 4)):
        if not train(tag, np_, STEPS, previous):
            return 1
        saved = step_file(tag, STEPS)
        if not check(os.path.exists(saved), f"{tag}: the resumed run with nothing to train saved "
                                            f"what it loaded at ep_size {np_}"):
            return 1
        same(source, saved, f"{tag}: the checkpoint resaved at ep_size {np_} equals the "
                            f"original bit for bit", *RUN_BLOCKS)
        previous = saved

    # 3. 4 -> 2 -> 1 -> 4 through convert --ep-size.
    outputs = {2: f"{work}/convert-ep2", 1: f"{work}/convert-ep1.h5", 4: f"{work}/convert-ep4"}
    previous = source
    for ep in (2, 1, 4):
        out = outputs[ep]
        if not run([binary, "convert", "--in", previous, "--out", out, "--ep-size", str(ep)],
                   f"convert --ep-size {ep}"):
            return 1
        same(source, out, f"convert --ep-size {ep}: every tensor and moment equals the original")
        if ep > 1:
            check_shards(out, ep, num_experts)
        previous = out

    # The 2-shard directory resumed by a store-backed run (the experts' states on the expert
    # store, streamed from the shards: RestoreWorkingSetExperts) that saves at once: A again.
    store = ["--set", f'expert_store.dir="{work}/store"', "--set", "expert_store.filesystem=posix",
             "--set", "expert_store.cache_mib=0.3"]
    if train("store2", 2, STEPS, outputs[2], extra=store):
        same(source, step_file("store2", STEPS), "store2: the 2-shard checkpoint resumed on the "
             "expert store and saved from it equals the original bit for bit", *RUN_BLOCKS,
             "--ignore-config", "expert_store")

    # 4. The loss curve continues.
    for tag, np_, src, exact in (("resume-convert4", 4, outputs[4], True),
                                 ("resume-trainer4", 4, step_file("trainer4", STEPS), True),
                                 ("resume-convert2", 2, outputs[2], False)):
        if not train(tag, np_, total, src, every=STEPS):
            continue
        got = losses(f"{work}/{tag}.jsonl")
        if exact:
            check([got.get(s) for s in after] == [reference[s] for s in after],
                  f"{tag}: steps {after} have the uninterrupted run's losses bit for bit "
                  f"{[got.get(s) for s in after]}")
            same(step_file("straight", total), step_file(tag, total),
                 f"{tag}: the step-{total} checkpoint equals the uninterrupted run's",
                 "--ignore-config", "log")
        else:
            errs = [abs(got[s][i] - reference[s][i]) / max(1.0, abs(reference[s][i]))
                    for s in after if s in got for i in (0, 1)]
            check(len(errs) == 2 * MORE and max(errs) <= TOL,
                  f"{tag}: under ep_size {np_}, steps {after} have the uninterrupted ep_size 4 "
                  f"run's losses within {TOL} (max rel err {max(errs, default=float('nan')):.3g})")

    # 5. Bad --ep-size values.
    for args, want in ((["--ep-size", "0"], "--ep-size 0 must be at least 1"),
                       (["--ep-size", "3"], f"--ep-size 3 does not divide the {num_experts} "
                                            "experts of each MoE layer"),
                       (["--ep-size", "2", "--to", "hf"], "--ep-size shards a native checkpoint")):
        out = f"{work}/bad-{'-'.join(args).replace('--', '')}"
        r = subprocess.run([binary, "convert", "--in", source, "--out", out, *args],
                           capture_output=True, text=True)
        check(r.returncode != 0 and want in r.stderr and not os.path.exists(out)
              and not any(n.startswith(os.path.basename(out) + ".tmp") for n in os.listdir(work)),
              f"convert {' '.join(args)} fails with '{want}' and leaves nothing: "
              f"{r.stderr.strip()[-300:]}")

    if FAILURES:
        print("\nFAILED:\n  " + "\n  ".join(FAILURES))
        return 1
    print("\nresharding chain checks pass")
    return 0


def check_shards(directory, ep, num_experts):
    """h5py's view of the shards: shard i holds EP rank i's experts, shard 0 the dense tensors."""
    names = sorted(os.listdir(directory))
    want_names = [f"shard-{i:05d}-of-{ep:05d}.h5" for i in range(ep)]
    if not check(names == want_names, f"{directory}: the files are {want_names} ({names})"):
        return
    per_rank = num_experts // ep
    bad = []
    experts_seen = set()
    for i, name in enumerate(names):
        with h5py.File(os.path.join(directory, name), "r") as f:
            if int(f.attrs["shard_index"]) != i or int(f.attrs["num_shards"]) != ep:
                bad.append(f"{name}: root attributes {dict(f.attrs)}")
            found = []
            f.visititems(lambda n, o: found.append(n)
                         if isinstance(o, h5py.Dataset) and not n.startswith("meta/") else None)
            for n in found:
                m = EXPERT.match(n)
                owner = int(m.group(1)) // per_rank if m else 0
                if owner != i:
                    bad.append(f"{n} in shard {i}, its owner is {owner}")
                if m:
                    experts_seen.add(int(m.group(1)))
            if "config" not in f["meta"]:
                bad.append(f"{name} has no meta/config")
    check(not bad and experts_seen == set(range(num_experts)),
          f"{directory}: shard i holds exactly EP rank i's experts and shard 0 the dense tensors "
          f"({len(experts_seen)} experts) {bad[:5]}")


if __name__ == "__main__":
    sys.exit(main())
