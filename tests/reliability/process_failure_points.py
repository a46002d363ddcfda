#!/usr/bin/python3
"""Every failure point of a checkpoint save by the real `switchyard train`, failed in turn.

The save runs in a real process with fault_shim.c preloaded. A first run journals every write,
fsync and rename under the checkpoint directory (HDF5's writes of the temporary file, its fsync,
the rename over the final name, the directory's fsync, and the run lock). Then, for each point
(every one with --stride 1; every STRIDE-th write and every other call otherwise) and each fault:
  - EIO, ENOSPC: the run must exit non-zero, not by a signal, with one "error:" line that names
    the checkpoint file or directory, and leave no temporary file behind;
  - crash (SIGKILL at that call) and torn (a write stores half its bytes, then SIGKILL): the
    process dies there, as a machine would.
After each, a restart (`--resume`, no faults) must load the previous checkpoint or the new one,
finish, and write a final checkpoint equal bit for bit (scripts/compare_checkpoints.py) to the one
an uninterrupted run writes.

    process_failure_points.py SWITCHYARD SHIM WORK [--stride N]
Prints the number of points and trials for docs/reliability.md.
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TINY = os.path.join(ROOT, "examples", "configs", "tiny.json")
COMPARE = os.path.join(ROOT, "scripts", "compare_checkpoints.py")
FAULTS = ("EIO", "ENOSPC", "crash", "torn")
TIMEOUT = 300


def train(binary, ckpt, steps, resume, env=None):
    args = [binary, "train", "--config", TINY, "--set", f"train.steps={steps}", "--set",
            "train.eval_every=0", "--set", "checkpoint.every=2", "--set", "checkpoint.keep=0",
            "--set", f"checkpoint.dir={ckpt}", "--set", "log.progress=lines"]
    if resume:
        args.append("--resume")
    return subprocess.run(args, capture_output=True, text=True, errors="replace",
                          timeout=TIMEOUT, env=dict(os.environ, **(env or {})))


def read_journal(journal):
    """The (n, op, path) of every call fault_shim journaled."""
    points = []
    for line in open(journal):
        n, op, path = line.rstrip("\n").split(" ", 2)
        points.append((int(n), op, path))
    return points


def choose_points(points, stride):
    """Every call but writes (and flushes), of which every stride-th."""
    writes_seen = 0
    chosen = []
    for n, op, path in points:
        if op in ("write", "flush"):
            writes_seen += 1
            if (writes_seen - 1) % stride != 0:
                continue
        chosen.append((n, op, path))
    return chosen


def describe_points(points):
    counts = {}
    for _, op, _ in points:
        counts[op] = counts.get(op, 0) + 1
    return (f"{len(points)} failure points "
            f"({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))})")


def faults_for(op):
    """The faults a call can meet: torn only for a write, ENOSPC not for a rename."""
    return [f for f in FAULTS
            if not (f == "torn" and op != "write") and not (f == "ENOSPC" and op == "rename")]


def argument_parser():
    """SWITCHYARD SHIM WORK [--stride N], as every fault_shim harness takes them."""
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("shim")
    parser.add_argument("work")
    parser.add_argument("--stride", type=int, default=1)
    return parser


def fresh_directory(path):
    """An empty directory at `path` (what was there is removed); its absolute path."""
    path = os.path.abspath(path)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def main():
    opts = argument_parser().parse_args()
    work = fresh_directory(opts.work)

    # The previous state (a checkpoint at step 2) and the reference end (step 4, uninterrupted).
    base = os.path.join(work, "base")
    r = train(opts.binary, base, 2, False)
    assert r.returncode == 0, r.stderr
    ref = os.path.join(work, "ref")
    r = train(opts.binary, ref, 4, False)
    assert r.returncode == 0, r.stderr
    reference = os.path.join(ref, "step-00000004.h5")

    ckpt = os.path.join(work, "ckpt")
    journal = os.path.join(work, "journal")
    shutil.copytree(base, ckpt)
    r = train(opts.binary, ckpt, 4, True, {"LD_PRELOAD": opts.shim, "SY_FAULT_PATH": ckpt,
                                           "SY_FAULT_JOURNAL": journal})
    assert r.returncode == 0, r.stderr
    points = read_journal(journal)
    chosen = choose_points(points, opts.stride)
    print(f"checkpoint save: {describe_points(points)}; trying {len(chosen)}")

    failures, trials = [], 0
    for n, op, path in chosen:
        for fault in faults_for(op):
            trials += 1
            where = f"point {n} ({op} {os.path.basename(path)}, {fault})"
            shutil.rmtree(ckpt)
            shutil.copytree(base, ckpt)
            r = train(opts.binary, ckpt, 4, True, {"LD_PRELOAD": opts.shim, "SY_FAULT_PATH": ckpt,
                                                   "SY_FAULT_AT": str(n), "SY_FAULT_KIND": fault})
            problems = []
            if fault in ("EIO", "ENOSPC"):
                errors = [l for l in r.stderr.splitlines() if l.startswith("error")]
                if r.returncode <= 0 or r.returncode >= 128:
                    problems.append(f"exit code {r.returncode}")
                if len(errors) != 1 or ckpt not in errors[0]:
                    problems.append(f"not one error line naming {ckpt}: {errors}")
                if glob.glob(os.path.join(ckpt, "*.tmp.*")):
                    problems.append("a temporary file was left behind")
            elif r.returncode != -9:
                problems.append(f"exit code {r.returncode}, expected death by SIGKILL")
            again = train(opts.binary, ckpt, 4, True)
            final = os.path.join(ckpt, "step-00000004.h5")
            if again.returncode != 0:
                problems.append(f"the restart failed: {again.stderr.strip()[-300:]}")
            elif "warning: skipping checkpoint" in again.stdout + again.stderr:
                problems.append("the restart skipped a damaged checkpoint")
            elif subprocess.run([sys.executable, COMPARE, reference, final],
                                capture_output=True).returncode != 0:
                problems.append("the final checkpoint differs from the uninterrupted run's")
            if problems:
                failures.append(f"{where}: {'; '.join(problems)}")
                print(f"FAIL {where}: {'; '.join(problems)}")
    print(f"checkpoint save: {trials} trials over {len(chosen)} of {len(points)} points, "
          f"{trials - len(failures)} held, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
