#!/usr/bin/python3
"""Every failure point of `switchyard convert`'s outputs and of tune-io's file, failed in turn.

Each operation runs in a real process with fault_shim.c preloaded, watching one output directory:
  - convert to hf: a staging directory with two safetensors shards, their index, config.json and
    generation_config.json (each file through a temporary, fsync, rename), the directory's fsync,
    the staging directory renamed to the final name;
  - convert to gguf: the file through a temporary, fsync, rename, directory fsync;
  - convert to native: the HDF5 checkpoint through a temporary, fsync, rename, directory fsync;
  - convert to native with --ep-size 2: a staging directory with the two shard files (each through
    a temporary, fsync, rename), the directory's fsync, the staging directory renamed into place;
  - tune-io (--fs posix): the scratch file it lays out, writes and removes.
A first run journals every write, stdio write and flush, fsync and rename under the directory.
Then, for each point (every one with --stride 1; every STRIDE-th write otherwise) and each fault:
  - EIO, ENOSPC: the run exits 1, not by a signal, with one "error:" line naming the output; no
    temporary is left, and nothing stands under the final name (but after the final rename, when
    the directory's fsync fails: then the output stands complete, and the error says so);
  - crash (SIGKILL at that call), torn (a write stores half its bytes, then SIGKILL): whatever
    stands under the final name is the complete output, equal to an uninterrupted run's.
In every trial the directory also holds a previous output (the same conversion under another
name), which must be unchanged. Then a restart (the same command, no faults) must succeed, remove
the temporaries a killed run left, and leave the output equal byte for byte to an uninterrupted
run's (for a crash after the final
rename, the output is already there: the restart must then refuse to overwrite it). Convert
never overwrites: onto an existing output it must fail and leave that output as it was.

    output_failure_points.py SWITCHYARD SHIM WORK [--stride N] [--only NAME]
Prints the number of points and trials per operation for docs/reliability.md.
"""
import filecmp
import glob
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from process_failure_points import (TINY, TIMEOUT, argument_parser,  # noqa: E402
                                    choose_points, describe_points, faults_for,
                                    fresh_directory, read_journal)

# name: (convert arguments after --out, the output's name); tune-io is separate.
CONVERTS = {
    "convert hf": (["--to", "hf", "--shard-mib", "1"], "hf"),
    "convert gguf": (["--to", "gguf"], "model.gguf"),
    "convert native": (["--to", "native"], "model.h5"),
    "convert native ep2": (["--ep-size", "2"], "model-ep2"),
}
TUNE_IO = "tune-io"
SCRATCH = "switchyard-tune-io.dat"  # storage/tools/io_tune.cc


def same(a, b):
    """Whether two outputs (files, or directories of files) hold the same bytes."""
    if os.path.isdir(a) != os.path.isdir(b):
        return False
    if not os.path.isdir(a):
        return filecmp.cmp(a, b, shallow=False)
    names = sorted(os.listdir(a))
    return names == sorted(os.listdir(b)) and all(
        filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False) for n in names)


class Operation:
    def __init__(self, name, binary, source, out_dir):
        self.name, self.binary, self.source, self.out_dir = name, binary, source, out_dir
        if name == TUNE_IO:
            self.out = os.path.join(out_dir, SCRATCH)
        else:
            self.out = os.path.join(out_dir, CONVERTS[name][1])

    def command(self):
        if self.name == TUNE_IO:
            return [self.binary, "tune-io", "--path", self.out_dir, "--fs", "posix",
                    "--file-size", "1M", "--bytes-per-point", "1M", "--block-sizes", "256K",
                    "--queue-depths", "1,2"]
        args, _ = CONVERTS[self.name]
        return [self.binary, "convert", "--in", self.source, "--out", self.out] + args

    def run(self, env=None):
        return subprocess.run(self.command(), capture_output=True, text=True, errors="replace",
                              timeout=TIMEOUT, env=dict(os.environ, **(env or {})))


def temporaries(directory):
    return glob.glob(os.path.join(directory, "*.tmp.*"))


def try_operation(name, opts, source, work):
    """Runs every chosen point of one operation; returns (points, trials, failures)."""
    tag = name.replace(" ", "_")
    reference_dir = os.path.join(work, tag + "-reference")
    out_dir = os.path.join(work, tag)
    journal = os.path.join(work, tag + ".journal")
    os.makedirs(reference_dir)
    reference = Operation(name, opts.binary, source, reference_dir)
    r = reference.run()
    assert r.returncode == 0, f"{name}: {r.stderr}"
    # The previous output: the same result under another name, left there by an earlier run.
    previous_name = "previous-" + os.path.basename(reference.out)
    if name == TUNE_IO:
        with open(os.path.join(reference_dir, previous_name), "w") as f:
            f.write("notes an earlier run left\n")
    else:
        assert os.path.exists(reference.out), f"{name}: no {reference.out}"
        (shutil.copytree if os.path.isdir(reference.out) else shutil.copyfile)(
            reference.out, os.path.join(reference_dir, previous_name))

    def fresh():
        shutil.rmtree(out_dir, ignore_errors=True)
        os.makedirs(out_dir)
        src = os.path.join(reference_dir, previous_name)
        (shutil.copytree if os.path.isdir(src) else shutil.copyfile)(
            src, os.path.join(out_dir, previous_name))
        return Operation(name, opts.binary, source, out_dir)

    def complete(op):
        """Whether the final name holds exactly the uninterrupted output (tune-io: nothing)."""
        if name == TUNE_IO:
            return not os.path.exists(op.out)
        return os.path.exists(op.out) and same(op.out, reference.out)

    op = fresh()
    r = op.run({"LD_PRELOAD": opts.shim, "SY_FAULT_PATH": out_dir, "SY_FAULT_JOURNAL": journal})
    assert r.returncode == 0, f"{name} under the shim: {r.stderr}"
    points = read_journal(journal)
    chosen = choose_points(points, opts.stride)
    print(f"{name}: {describe_points(points)}; trying {len(chosen)}", flush=True)

    failures, trials = [], 0
    if name != TUNE_IO:
        # Convert never overwrites: onto an existing output it fails and leaves it as it was.
        r = op.run()
        if r.returncode != 1 or "exists" not in r.stderr or not complete(op):
            failures.append(f"{name}: onto an existing output: exit {r.returncode}, "
                            f"{r.stderr.strip()[-200:]}")
    for n, call, path in chosen:
        for fault in faults_for(call):
            trials += 1
            where = f"{name}, point {n} ({call} {os.path.basename(path)}, {fault})"
            op = fresh()
            r = op.run({"LD_PRELOAD": opts.shim, "SY_FAULT_PATH": out_dir, "SY_FAULT_AT": str(n),
                        "SY_FAULT_KIND": fault})
            problems = []
            if fault in ("EIO", "ENOSPC"):
                errors = [line for line in r.stderr.splitlines() if line.startswith("error")]
                if r.returncode != 1:
                    problems.append(f"exit code {r.returncode} (want 1)")
                if len(errors) != 1 or op.out not in errors[0]:
                    problems.append(f"not one error line naming {op.out}: {errors}")
                # Only the directory's fsync after the final rename may fail with the output in
                # place: complete, and the error says so.
                if os.path.exists(op.out) and not (
                        complete(op) and errors and "is complete under its name" in errors[0]):
                    problems.append(f"{op.out} exists after a failed run")
                if temporaries(out_dir):
                    problems.append(f"temporaries left: {temporaries(out_dir)}")
            elif r.returncode != -9:
                problems.append(f"exit code {r.returncode}, expected death by SIGKILL")
            elif name != TUNE_IO and os.path.exists(op.out) and not complete(op):
                problems.append(f"{op.out} stands incomplete or different after the crash")
            if not same(os.path.join(out_dir, previous_name),
                        os.path.join(reference_dir, previous_name)):
                problems.append("the previous output changed")
            # The restart. After a crash past the final rename the output is already complete,
            # and convert refuses to overwrite it.
            done_before = name != TUNE_IO and complete(op)
            again = op.run()
            if done_before:
                if again.returncode != 1 or "exists" not in again.stderr:
                    problems.append(f"the restart over the complete output: {again.stderr[-200:]}")
            elif again.returncode != 0:
                problems.append(f"the restart failed: {again.stderr.strip()[-300:]}")
            if not complete(op):
                problems.append("after the restart the output differs from an uninterrupted run's")
            if temporaries(out_dir):  # a killed run's, which the restart removes
                problems.append(f"temporaries left after the restart: {temporaries(out_dir)}")
            if problems:
                failures.append(f"{where}: {'; '.join(problems)}")
                print(f"FAIL {where}: {'; '.join(problems)}", flush=True)
    print(f"{name}: {trials} trials over {len(chosen)} of {len(points)} points, "
          f"{trials - len(failures)} held, {len(failures)} failed", flush=True)
    return len(points), trials, failures


def main():
    parser = argument_parser()
    parser.add_argument("--only", choices=list(CONVERTS) + [TUNE_IO])
    opts = parser.parse_args()
    work = fresh_directory(opts.work)

    # The source: a one-step training checkpoint with 8 experts (over 1 MiB of weights, so the
    # hf output has two shards and an index).
    r = subprocess.run([opts.binary, "train", "--config", TINY, "--set", "train.steps=1",
                        "--set", "train.eval_every=0", "--set", "model.num_experts=8", "--set",
                        f"checkpoint.dir={work}/source", "--set", "log.progress=lines"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    source = os.path.join(work, "source", "step-00000001.h5")

    failed = []
    for name in [opts.only] if opts.only else list(CONVERTS) + [TUNE_IO]:
        _, _, failures = try_operation(name, opts, source, work)
        failed += failures
    print(f"output failure points: {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
