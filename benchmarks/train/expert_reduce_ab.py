#!/usr/bin/python3
"""The cost of summing the expert gradients over the replicas one all-reduce per expert.

A/B, alternating: binary A and binary B (e.g. a build of main, whose expert gradients go in one
packed all-reduce, and a build with one all-reduce per expert) train the same in-memory config
under `mpirun -np NP` for STEPS steps, ROUNDS times each, in the order A B A B ... Per run: the
mean over steps 2.. of the step time and of the communication time (phase_seconds.communication,
every collective of the step: the all-to-alls, the dense and the expert all-reduces). Prints each
run, the medians and the ratios B / A.

    expert_reduce_ab.py --a BIN_A --b BIN_B --config CFG [--np 4] [--steps 20] [--rounds 3]
        [--set parallel.ep_size=1 ...]
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile


def run(binary, args, tmp, tag):
    metrics = os.path.join(tmp, f"{tag}.jsonl")
    cmd = shlex.split(args.mpirun) + ["-np", str(args.np), binary, "train", "--config",
                                      args.config, "--set", f"train.steps={args.steps}",
                                      "--set", "train.eval_every=0", "--set", "train.eval_batches=1",
                                      "--set", "train.threads=1", "--set", "log.every=1",
                                      "--set", "log.progress=lines", "--set",
                                      f"log.metrics={metrics}"]
    for s in args.sets:
        cmd += ["--set", s]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"FAIL: {tag} exited {done.returncode}: {' '.join(cmd)}\n{done.stderr[-2000:]}")
    with open(metrics) as f:
        records = [json.loads(line) for line in f if '"loss"' in line]
    timed = [r for r in records if r["step"] > 1]
    step = statistics.mean(r["step_seconds"] for r in timed)
    comm = statistics.mean(r["phase_seconds"]["communication"] for r in timed)
    return step, comm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--mpirun", default="/usr/bin/mpiexec --allow-run-as-root --oversubscribe "
                    "--bind-to none")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--set", action="append", default=[], dest="sets")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sy_expert_reduce_ab_")
    results = {"A": [], "B": []}
    for r in range(args.rounds):
        for tag, binary in (("A", args.a), ("B", args.b)):
            step, comm = run(binary, args, tmp, f"{tag}{r}")
            results[tag].append((step, comm))
            print(f"round {r} {tag}: step {step * 1e3:.1f} ms, communication {comm * 1e3:.1f} ms")
    med = {t: (statistics.median(s for s, _ in v), statistics.median(c for _, c in v))
           for t, v in results.items()}
    for t in ("A", "B"):
        print(f"median {t}: step {med[t][0] * 1e3:.1f} ms, communication {med[t][1] * 1e3:.1f} ms")
    print(f"B / A: step {med['B'][0] / med['A'][0]:.3f}, "
          f"communication {med['B'][1] / med['A'][1]:.3f}")


if __name__ == "__main__":
    main()
