#!/usr/bin/python3
"""Elastic multi-task training vs one task per rank (MoESys Table III), and rebalancing under drift.

Four synthetic tasks at workloads 4:2:1:1 (rows per step ROWS x 4/2/1/1; data.tasks.<t>.batch_size)
train on a shared MoE backbone under `mpirun` on the sim device, whose compute time is modelled
(train.sim_gflops: each rank sleeps 6 x active parameters x its tokens / rate after its backward)
and with MPI yielding when idle, so that oversubscribed ranks on few cores time the schedule and not
their contention. Configurations, run alternately REPEATS times each (A/B/C/D, A/B/C/D, ...):

  per_task-4   train.placement per_task on 4 ranks (one task per rank; MoESys's 1/1/1/1)
  elastic-8    train.placement elastic on 8 ranks (the planner: 4/2/1/1, MoESys's 8 GPUs)
  elastic-4    train.placement elastic on 4 ranks (the same resources as per_task-4)

Throughput = samples (rows of all tasks) per second per rank = rows per step / mean step time over
the steps after WARMUP / ranks, as MoESys Table III reports it.

Drift (--drift): on 4 ranks one task (sort) grows from 1 to 6 units mid-run. Runs:
  rebalancing          elastic, planned for the first rows, rebalance every REBALANCE steps; the
                       drift at step DRIFT_AT, just after a decision (DRIFT_AT - 1 a multiple of
                       REBALANCE), which plans for the next step's rows and so moves the tasks
                       for the first grown step: no lag
  rebalancing-between  the same with the drift one step later, at DRIFT_AT + 1: the decision
                       before it saw the old rows, so the grown task runs on the old placement
                       until the next decision, REBALANCE - 1 steps (the longest lag)
  static               elastic, planned for the first rows, never rebalanced
  best                 elastic planned for the grown rows from the start (grow_at_step 1)
The throughput of each over the steps from its drift to the end (the rebalancing runs' own lag
included; static and best from DRIFT_AT), the steps each rebalancing run ran on the old
placement after its drift (from its log's `rebalance at step N: ... moved` line), and the ratio
to best (target >= 0.8).

    elastic_bench.py --switchyard build/switchyard [--mpirun "mpirun --allow-run-as-root ..."]
        [--steps 40] [--repeats 2] [--rows 16] [--gflops 2] [--drift]
"""
import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                      "configs", "multitask.json")


def run(cmd, env):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout[-4000:])
        sys.exit(f"FAIL: exited {proc.returncode}: {' '.join(cmd)}")
    return proc.stdout


def step_seconds(path):
    out = {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "step_seconds" in rec:
                out[rec["step"]] = (rec["step_seconds"], sum(rec["task_rows"]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--switchyard", required=True)
    ap.add_argument("--mpirun", default="mpirun --allow-run-as-root --oversubscribe --bind-to none")
    ap.add_argument("--config", default=CONFIG)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--rows", type=int, default=16, help="rows per step of a 1-unit task")
    ap.add_argument("--gflops", type=float, default=2.0)
    ap.add_argument("--drift", action="store_true")
    ap.add_argument("--drift-at", type=int, default=16)
    ap.add_argument("--rebalance", type=int, default=4)
    args = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_mpi_yield_when_idle="1")
    tmp = tempfile.mkdtemp(prefix="sy_elastic_bench_")
    r = args.rows
    base = ["train", "--config", args.config, "--set", f"train.steps={args.steps}",
            "--set", "train.device=sim", "--set", f"train.sim_gflops={args.gflops}",
            "--set", "train.threads=1", "--set", "train.eval_every=0", "--set", "train.eval_batches=1",
            "--set", "log.every=1", "--set", "log.progress=none", "--set", "model.router_aux_loss_coef=0",
            "--set", f"data.tasks.copy.batch_size={4 * r}",
            "--set", f"data.tasks.reverse.batch_size={2 * r}",
            "--set", f"data.tasks.sort.batch_size={r}", "--set", f"data.tasks.modadd.batch_size={r}",
            "--set", "data.tasks.markov.weight=0"]

    def measure(tag, np, sets, first, last):
        metrics = f"{tmp}/{tag}.jsonl"
        if os.path.exists(metrics):
            os.remove(metrics)
        cmd = shlex.split(args.mpirun) + ["-np", str(np), args.switchyard] + base + sets + [
            "--set", f"log.metrics={metrics}", "--set", f"parallel.ep_size={np}"]
        out = run(cmd, env)
        s = step_seconds(metrics)
        steps = [k for k in s if first <= k <= last]
        secs = sum(s[k][0] for k in steps)
        rows = sum(s[k][1] for k in steps)
        return rows / secs / np, out

    print(f"date:     {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"machine:  {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"command:  {' '.join(sys.argv)}")
    print(f"model:    {args.config} on sim at {args.gflops} GFLOP/s modelled, "
          f"OMPI_MCA_mpi_yield_when_idle=1")
    if not args.drift:
        print(f"tasks:    copy/reverse/sort/modadd at {4 * r}/{2 * r}/{r}/{r} rows x seq_len 16; "
              f"steps {args.warmup + 1}..{args.steps} timed, {args.repeats} alternating repeats")
        configs = [("per_task-4", 4, ["--set", "train.placement=per_task"]),
                   ("elastic-8", 8, ["--set", "train.placement=elastic"]),
                   ("elastic-4", 4, ["--set", "train.placement=elastic"])]
        results = {name: [] for name, _, _ in configs}
        placements = {}
        for rep in range(args.repeats):
            for name, np, sets in configs:
                tput, out = measure(name, np, sets, args.warmup + 1, args.steps)
                results[name].append(tput)
                placements[name] = next(l for l in out.splitlines() if l.startswith("placement"))
                print(f"  repeat {rep + 1} {name}: {tput:.2f} samples/s per rank")
        print()
        print("| configuration | ranks | placement | samples/s per rank (median) | vs per_task-4 |")
        print("| --- | --- | --- | --- | --- |")
        ref = statistics.median(results["per_task-4"])
        for name, np, _ in configs:
            m = statistics.median(results[name])
            print(f"| {name} | {np} | {placements[name].split(': ', 1)[1]} | {m:.2f} | "
                  f"{(m / ref - 1) * 100:+.1f}% |")
        return
    # Drift: sort grows from r to 6r rows at drift_at (on a decision) or drift_at + 1 (between).
    on = args.drift_at
    if (on - 1) % args.rebalance != 0 or on + args.rebalance > args.steps:
        sys.exit(f"--drift-at {on}: needs drift_at - 1 a multiple of --rebalance {args.rebalance} "
                 f"(a decision at the step before it) and a later decision before --steps")
    grow = ["--set", "data.tasks.sort.grow_batch_size=" + str(6 * r)]

    def rebalancing(at):
        return grow + ["--set", f"data.tasks.sort.grow_at_step={at}",
                       "--set", "train.placement=elastic",
                       "--set", f"elastic.rebalance_every={args.rebalance}"]

    # (name, the step the workload grows, settings)
    configs = [("rebalancing", on, rebalancing(on)),
               ("rebalancing-between", on + 1, rebalancing(on + 1)),
               ("static", on, grow + ["--set", f"data.tasks.sort.grow_at_step={on}",
                                      "--set", "train.placement=elastic"]),
               ("best", on, grow + ["--set", "data.tasks.sort.grow_at_step=1",
                                    "--set", "train.placement=elastic"])]
    print(f"drift:    sort {r} -> {6 * r} rows at step {on} (on a decision) or {on + 1} (between "
          f"decisions), 4 ranks, timed from the drift to step {args.steps}, rebalance every "
          f"{args.rebalance}, {args.repeats} alternating repeats")
    results = {name: [] for name, _, _ in configs}
    lag = {}
    for rep in range(args.repeats):
        for name, at, sets in configs:
            tput, out = measure(name, 4, sets, at, args.steps)
            results[name].append(tput)
            print(f"  repeat {rep + 1} {name}: {tput:.2f} samples/s per rank")
            moves = [int(line.split()[3].rstrip(":")) for line in out.splitlines()
                     if line.startswith("rebalance at step") and "moved" in line]
            after = [m for m in moves if m >= at - 1]
            if name.startswith("rebalancing"):
                if not after:
                    sys.exit(f"FAIL: {name}: no rebalance after the drift at step {at}")
                # The decision at step m places step m + 1: steps at..m ran on the old placement.
                lag.setdefault(name, []).append(after[0] - at + 1)
                if rep == 0:
                    print("    " + next(line for line in out.splitlines()
                                        if line.startswith(f"rebalance at step {after[0]}:")))
    best = statistics.median(results["best"])
    print()
    print("| run | drift at step | timed steps | grown steps on the old placement | samples/s per "
          "rank (median) | of best-from-start |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, at, _ in configs:
        m = statistics.median(results[name])
        old = "all" if name == "static" else "none" if name == "best" else \
            ", ".join(str(x) for x in sorted(set(lag[name])))
        print(f"| {name} | {at if name != 'best' else 1} | {at}..{args.steps} | {old} | {m:.2f} | "
              f"{m / best * 100:.1f}% |")

if __name__ == "__main__":
    main()
