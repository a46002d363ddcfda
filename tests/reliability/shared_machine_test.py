#!/usr/bin/python3
"""Another user on a shared machine (issue 46), through the real `switchyard` commands:

  links    a symbolic link planted at every path the project creates (checkpoint.dir's lock,
           expert_store.dir's lock and store file, log.metrics, a convert --out, tune-io's
           scratch file) is never followed: the file it points to keeps its bytes, and the command
           either refuses with an error naming the link or replaces the link itself.
  readers  a FIFO, a directory and a device node at every path that is read (the config, a
           checkpoint, --resume-from, a GGUF, an HF directory's config.json, safetensors and
           tokenizer.json) gives one error naming it, at once: nothing hangs.
  races    two conversions to one --out, started together: exactly one writes it, the other says
           it exists, and the output is the uninterrupted one, byte for byte.
  signals  SIGINT or SIGTERM at random instants of a conversion and of tune-io: the process dies by
           the signal (or has finished), nothing is left behind, and the output is either absent
           or complete. The instants are drawn twice: in time, and among the calls that write the
           output (every write, sync and rename, counted by fault_shim, which sends the signal
           just before the chosen one), so that the signal lands mid-write even where the whole
           job takes a tenth of a second.
  budgets  a KV cache (serve --context x --parallel) or an expert-store cache larger than the
           machine is refused before it is allocated, with the largest value that fits.

    shared_machine_test.py SWITCHYARD FAULT_SHIM WORK_DIR [--trials N]
"""
import argparse
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from output_failure_points import same, temporaries  # noqa: E402
from process_failure_points import TINY, fresh_directory as fresh  # noqa: E402

TIMEOUT = 60  # any command here finishes in seconds; a hang is a failure, not a wait

failures = []


def fail(what):
    failures.append(what)
    print(f"FAIL {what}", flush=True)


def run(binary, args, timeout=TIMEOUT):
    try:
        return subprocess.run([binary] + args, capture_output=True, text=True, errors="replace",
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None


def train_args(work, *sets):
    args = ["train", "--config", TINY, "--set", "train.steps=1", "--set", "train.eval_every=0",
            "--set", "train.eval_batches=1", "--set", "log.progress=none"]
    for s in sets:
        args += ["--set", s]
    return args


def plant(link, target):
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(target, link)


def victim(work):
    path = os.path.join(work, "victim.txt")
    with open(path, "w") as f:
        f.write("precious\n")
    return path


def untouched(path):
    with open(path, "rb") as f:
        return f.read() == b"precious\n"


def check_links(binary, work, source):
    """A link planted where each file is created: refused by name, or replaced; never followed."""
    base = fresh(os.path.join(work, "links"))
    target = victim(base)

    def refused(name, r, link):
        if r is None:
            fail(f"links: {name}: hung")
        elif r.returncode != 1 or f"{link} is a symbolic link" not in r.stderr:
            fail(f"links: {name}: exit {r.returncode}, {r.stderr.strip()[-300:]}")
        if not untouched(target):
            fail(f"links: {name}: the link's target was written")

    ckpt = fresh(os.path.join(base, "ckpt"))
    plant(os.path.join(ckpt, "switchyard.lock"), target)
    refused("checkpoint.dir lock", run(binary, train_args(work, f"checkpoint.dir={ckpt}")),
            os.path.join(ckpt, "switchyard.lock"))

    store = fresh(os.path.join(base, "store"))
    plant(os.path.join(store, "rank-0.lock"), target)
    store_sets = [f"expert_store.dir={store}", "expert_store.filesystem=posix",
                  "expert_store.cache_mib=1"]
    refused("expert_store.dir lock", run(binary, train_args(work, *store_sets)),
            os.path.join(store, "rank-0.lock"))

    os.unlink(os.path.join(store, "rank-0.lock"))
    plant(os.path.join(store, "rank-0.store"), target)
    refused("expert store file", run(binary, train_args(work, *store_sets)),
            os.path.join(store, "rank-0.store"))

    metrics = os.path.join(base, "metrics.jsonl")
    plant(metrics, target)
    refused("log.metrics", run(binary, train_args(work, f"log.metrics={metrics}")), metrics)

    for name, args in (("convert --out (a link to a file)", ["--to", "native"]),
                       ("convert --out (a dangling link)", ["--to", "gguf"])):
        out = os.path.join(base, "out-" + args[1])
        plant(out, target if "dangling" not in name else os.path.join(base, "nowhere"))
        r = run(binary, ["convert", "--in", source, "--out", out] + args)
        if r is None or r.returncode != 1 or "exists" not in r.stderr:
            fail(f"links: {name}: {r and (r.returncode, r.stderr.strip()[-300:])}")
        if not untouched(target) or os.path.exists(os.path.join(base, "nowhere")):
            fail(f"links: {name}: written through the link")

    scratch = fresh(os.path.join(base, "tune"))
    plant(os.path.join(scratch, "switchyard-tune-io.dat"), target)
    r = run(binary, tune_io_args(scratch, "4M"))
    if r is None or r.returncode != 0:
        fail(f"links: tune-io: {r and r.stderr.strip()[-300:]}")
    if not untouched(target) or temporaries(scratch):
        fail("links: tune-io: the link was followed, or its scratch file left")
    print("links: every planted link refused or replaced, none followed", flush=True)


def check_readers(binary, work, source, gguf, hf):
    """A FIFO, a directory and a device node at every path that is read."""
    base = fresh(os.path.join(work, "readers"))
    kinds = {}

    def make(kind, path):
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "directory":
            os.mkdir(path)
        else:  # a device node: a real one where we may (root), else a link to /dev/zero
            try:
                os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))
            except OSError:
                os.symlink("/dev/zero", path)
        kinds[kind] = kinds.get(kind, 0) + 1

    def hf_copy(dest, replace):
        shutil.copytree(hf, dest)
        if os.path.exists(os.path.join(dest, replace)):
            os.unlink(os.path.join(dest, replace))
        return os.path.join(dest, replace)

    rows = 0
    for kind in ("fifo", "directory", "device"):
        d = fresh(os.path.join(base, kind))
        cases = []
        config = os.path.join(d, "config.json")
        make(kind, config)
        cases.append(("train --config", ["train", "--config", config], config))
        ckpt = os.path.join(d, "step-00000001.h5")
        make(kind, ckpt)
        cases.append(("train --resume-from", train_args(work) + ["--resume-from", ckpt], ckpt))
        cases.append(("inspect checkpoint", ["inspect", ckpt], ckpt))
        cases.append(("convert --in", ["convert", "--in", ckpt, "--to", "hf", "--out",
                                       os.path.join(d, "never")], ckpt))
        model = os.path.join(d, "model.gguf")
        make(kind, model)
        cases.append(("generate GGUF", ["generate", "--model", model, "--prompt-ids", "1,2",
                                        "--max-tokens", "1"], model))
        cases.append(("serve GGUF", ["serve", "--model", model, "--port", "0"], model))
        shard = sorted(n for n in os.listdir(hf) if n.endswith(".safetensors"))[0]
        for name in ("config.json", shard, "tokenizer.json"):
            path = hf_copy(os.path.join(d, "hf-" + name.split(".")[0]), name)
            make(kind, path)
            # A text prompt needs the tokenizer.
            prompt = ["--prompt", "hi"] if name == "tokenizer.json" else ["--prompt-ids", "1,2"]
            cases.append((f"HF {name}", ["generate", "--model", os.path.dirname(path)] + prompt +
                          ["--max-tokens", "1"], path))
        for what, args, path in cases:
            rows += 1
            start = time.monotonic()
            r = run(binary, args, timeout=30)
            where = f"readers: {what} on a {kind}"
            if r is None:
                fail(f"{where}: hung (killed after 30 s)")
                continue
            errors = [line for line in r.stderr.splitlines() if line.startswith("error")]
            # A directory where an HF file goes, or a checkpoint.dir file, may be named by its
            # parent; every error must name the path or its directory.
            named = any(path in e or os.path.dirname(path) in e for e in errors)
            if r.returncode != 1 or len(errors) != 1 or not named:
                fail(f"{where}: exit {r.returncode}, errors {errors or r.stderr.strip()[-300:]}")
            elif time.monotonic() - start > 20:
                fail(f"{where}: took {time.monotonic() - start:.0f} s")
    print(f"readers: {rows} reads of a FIFO, a directory or a device ended in an error naming "
          f"them", flush=True)


def convert_args(source, out, fmt):
    extra = {"native": ["--to", "native"], "native-ep2": ["--to", "native", "--ep-size", "2"],
             "hf": ["--to", "hf", "--shard-mib", "1"], "gguf": ["--to", "gguf"]}[fmt]
    return ["convert", "--in", source, "--out", out] + extra


def tune_io_args(directory, size):
    return ["tune-io", "--path", directory, "--fs", "posix", "--file-size", size,
            "--bytes-per-point", size, "--block-sizes", "64K,1M", "--queue-depths", "1", "4"]


def job(fmt, source, directory, tune_size):
    """A job writing into `directory`: its arguments, and its output (None for tune-io)."""
    if fmt == "tune-io":
        return tune_io_args(directory, tune_size), None
    out = os.path.join(directory, out_name(fmt))
    return convert_args(source, out, fmt), out


def out_name(fmt):
    return {"native": "model.h5", "native-ep2": "model-ep2", "hf": "hf",
            "gguf": "model.gguf"}[fmt]


def check_races(binary, work, source, references):
    base = fresh(os.path.join(work, "races"))
    for fmt, reference in references.items():
        for round_ in range(3):
            d = fresh(os.path.join(base, f"{fmt}-{round_}"))
            out = os.path.join(d, out_name(fmt))
            procs = [subprocess.Popen([binary] + convert_args(source, out, fmt),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True) for _ in range(2)]
            results = []
            for p in procs:
                try:
                    _, err = p.communicate(timeout=TIMEOUT)
                except subprocess.TimeoutExpired:
                    p.kill()
                    err = "hung"
                results.append((p.returncode, err))
            codes = sorted(code for code, _ in results)
            loser = [err for code, err in results if code != 0]
            if codes != [0, 1] or not loser or "AlreadyExists" not in loser[0]:
                fail(f"races: {fmt}: exits {codes}, {[e.strip()[-200:] for _, e in results]}")
            elif not same(out, reference):
                fail(f"races: {fmt}: the output differs from an uninterrupted conversion's")
            if temporaries(d):
                fail(f"races: {fmt}: temporaries left: {temporaries(d)}")
    print(f"races: {len(references)} formats x 3 rounds of two conversions to one --out: one "
          f"wrote it, the other said it exists", flush=True)


def check_nothing_left(where, directory, out, reference):
    """After a job was stopped: no temporary, and its output absent or complete."""
    if temporaries(directory):
        fail(f"{where}: left {temporaries(directory)}")
    if out is not None and os.path.exists(out) and not same(out, reference):
        fail(f"{where}: an incomplete output stands at {out}")


def check_signals_at_writes(binary, shim, work, source, references, trials, rng):
    """The signal sent just before a write, sync or rename of the output, drawn at random."""
    base = fresh(os.path.join(work, "signals-at-writes"))
    landed = 0
    for fmt in list(references) + ["tune-io"]:
        d = fresh(os.path.join(base, fmt + "-journal"))
        journal = os.path.join(base, fmt + ".journal")
        args, _ = job(fmt, source, d, "4M")
        env = dict(os.environ, LD_PRELOAD=shim, SY_FAULT_PATH=d, SY_FAULT_JOURNAL=journal)
        r = subprocess.run([binary] + args, capture_output=True, text=True, env=env,
                           timeout=TIMEOUT)
        with open(journal) as f:
            points = len(f.readlines())
        if r.returncode != 0 or points == 0:
            fail(f"signals at writes: {fmt}: the journal run: {points} points, "
                 f"{r.stderr.strip()[-300:]}")
            continue
        chosen = sorted({1, points} | set(rng.sample(range(1, points + 1), min(trials, points))))
        for n in chosen:
            for kind in ("SIGINT", "SIGTERM"):
                d = fresh(os.path.join(base, f"{fmt}-{n}-{kind}"))
                args, out = job(fmt, source, d, "4M")
                env = dict(os.environ, LD_PRELOAD=shim, SY_FAULT_PATH=d, SY_FAULT_AT=str(n),
                           SY_FAULT_KIND=kind)
                try:
                    r = subprocess.run([binary] + args, capture_output=True, text=True, env=env,
                                       timeout=TIMEOUT)
                except subprocess.TimeoutExpired:
                    fail(f"signals at writes: {fmt} point {n} {kind}: hung")
                    continue
                where = f"signals at writes: {fmt}, {kind} before call {n} of {points}"
                if r.returncode != -getattr(signal, kind):
                    fail(f"{where}: exit {r.returncode}, {r.stderr.strip()[-300:]}")
                landed += 1
                check_nothing_left(where, d, out, references.get(fmt))
    print(f"signals at writes: {landed} runs stopped by SIGINT/SIGTERM mid-write; none left "
          f"anything behind", flush=True)


def check_signals(binary, work, source, references, trials, rng):
    base = fresh(os.path.join(work, "signals"))
    stopped = finished = 0
    for fmt in list(references) + ["tune-io"]:
        # How long the job takes uninterrupted: the signals land anywhere in it.
        d = fresh(os.path.join(base, fmt + "-timing"))
        args, _ = job(fmt, source, d, "32M")
        start = time.monotonic()
        r = run(binary, args)
        duration = time.monotonic() - start
        if r is None or r.returncode != 0:
            fail(f"signals: {fmt} uninterrupted: {r and r.stderr.strip()[-300:]}")
            continue
        for trial in range(trials):
            d = fresh(os.path.join(base, f"{fmt}-{trial}"))
            args, out = job(fmt, source, d, "32M")
            sig = signal.SIGINT if trial % 2 == 0 else signal.SIGTERM
            p = subprocess.Popen([binary] + args, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
            time.sleep(rng.uniform(0, duration * 1.1))
            p.send_signal(sig)
            try:
                _, err = p.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                fail(f"signals: {fmt} trial {trial}: still running after {sig.name}")
                continue
            where = f"signals: {fmt} trial {trial} ({sig.name})"
            if p.returncode == -sig:
                stopped += 1
            elif p.returncode == 0:
                finished += 1
            else:
                fail(f"{where}: exit {p.returncode}, {err.strip()[-300:]}")
            check_nothing_left(where, d, out, references.get(fmt))
    print(f"signals: {stopped} runs stopped by SIGINT/SIGTERM and {finished} finished first; "
          f"none left anything behind", flush=True)


def check_budgets(binary, work, gguf):
    """Budgets past the machine's memory: refused at once, naming the key and what fits."""
    r = run(binary, ["serve", "--model", gguf, "--port", "0", "--context", "16777216",
                     "--kv-cache-mib", "16777216"])
    if r is None or r.returncode != 1 or "lower --kv-cache-mib to at most" not in r.stderr:
        fail(f"budgets: serve's KV cache: {r and (r.returncode, r.stderr.strip()[-300:])}")
    r = run(binary, train_args(work, f"expert_store.dir={work}/budget-store",
                               "expert_store.cache_mib=1e9"))
    if r is None or r.returncode != 1 or "lower expert_store.cache_mib to at most" not in r.stderr:
        fail(f"budgets: the store's cache: {r and (r.returncode, r.stderr.strip()[-300:])}")
    print("budgets: a KV cache and a store cache past the machine refused before allocation",
          flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("shim", help="fault_shim.so (with the sanitizer runtime before it)")
    parser.add_argument("work")
    parser.add_argument("--trials", type=int, default=6, help="signal trials per job")
    parser.add_argument("--seed", type=int, default=46)
    opts = parser.parse_args()
    work = fresh(os.path.abspath(opts.work))
    rng = random.Random(opts.seed)

    # The source: a one-step checkpoint with 8 experts (the hf output has two shards).
    r = run(opts.binary, train_args(work, "model.num_experts=8",
                                    f"checkpoint.dir={work}/source"))
    assert r is not None and r.returncode == 0, r and r.stderr
    source = os.path.join(work, "source", "step-00000001.h5")
    references = {}
    for fmt in ("native", "native-ep2", "hf", "gguf"):
        out = os.path.join(fresh(os.path.join(work, "reference-" + fmt)), out_name(fmt))
        r = run(opts.binary, convert_args(source, out, fmt))
        assert r is not None and r.returncode == 0, r and r.stderr
        references[fmt] = out

    check_links(opts.binary, work, source)
    check_readers(opts.binary, work, source, references["gguf"], references["hf"])
    check_races(opts.binary, work, source, references)
    check_signals(opts.binary, work, source, references, opts.trials, rng)
    check_signals_at_writes(opts.binary, opts.shim, work, source, references, opts.trials, rng)
    check_budgets(opts.binary, work, references["gguf"])
    print(f"shared machine: {len(failures)} failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
