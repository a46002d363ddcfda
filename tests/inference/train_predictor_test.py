#!/usr/bin/python3
"""`switchyard train-predictor` end to end on a tiny Mixtral, then the predictor in use.

Usage: /usr/bin/python3 train_predictor_test.py SWITCHYARD_BINARY WORK_DIR

- train-predictor over a prompts file (ids, comments, blank lines) writes the predictor file
  atomically (no FILE.tmp left), prints each layer's train and held-out accuracy and the mean;
- `bench infer --policies resident,predictive --predictor FILE` gives resident's tokens with a
  predictor accuracy in [0, 1], as does the skip-gate (no --predictor);
- a truncated predictor file, a bad --stride and a prompts file with a non-id are refused with a
  nonzero exit and a message naming the problem.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_moe_oracle as oracle  # exits 77 (skipped) without numpy and torch

import numpy as np


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r


def bench(binary, model_dir, out, extra):
    return run([binary, "bench", "infer", "--model", model_dir, "--policies",
                "resident,predictive", "--prompt-len", "6", "--gen-len", "4", "--batch", "2",
                "--device", "sim", "--link-gbps", "2", "--device-slots", "4", "--dtype", "f32",
                "--threads", "2", "--seed", "3", "--json-out", out, *extra])


def check_bench(binary, model_dir, out, extra, what):
    r = bench(binary, model_dir, out, extra)
    if r.returncode != 0:
        return [f"{what}: bench infer failed ({r.returncode}): {r.stderr.strip()[-2000:]}"]
    rows = {row["policy"]: row for row in json.load(open(out))["policies"]}
    p = rows.get("predictive")
    if p is None or not p["ok"]:
        return [f"{what}: predictive missing or failed: {p}"]
    failures = []
    if not p["tokens_match_resident"] or p["tokens"] != rows["resident"]["tokens"]:
        failures.append(f"{what}: tokens {p['tokens']} vs resident {rows['resident']['tokens']}")
    acc = p["predictor_accuracy"]
    if acc is None or not 0.0 <= acc <= 1.0:
        failures.append(f"{what}: predictor accuracy {acc}")
    print(f"{'ok  ' if not failures else 'FAIL'} {what}: predictor accuracy {acc}, "
          f"{p['bytes_host_to_device']} bytes host to device, stall {p['stall_seconds']} s")
    return failures


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    failures = []
    config, dtype, shards = oracle.CASES["mixtral"]
    model_dir = os.path.join(work, "mixtral")
    oracle.write_model(model_dir, config,
                       oracle.make_tensors("mixtral", config, np.random.default_rng(7)), dtype,
                       shards)
    vocab = config["vocab_size"]
    rng = np.random.default_rng(1)
    prompts = os.path.join(work, "prompts.txt")
    with open(prompts, "w") as f:
        f.write("# training prompts\n\n")
        for i in range(6):
            ids = rng.integers(0, vocab, size=8)
            sep = "," if i % 2 else " "
            f.write(sep.join(str(int(t)) for t in ids) + "\n")
    out = os.path.join(work, "mixtral.pred")
    if os.path.exists(out):
        os.remove(out)
    r = run([binary, "train-predictor", "--model", model_dir, "--prompts", prompts, "--out", out,
             "--hidden", "16", "--epochs", "5", "--gen-tokens", "3", "--seed", "1"])
    print(r.stdout.strip())
    if r.returncode != 0:
        failures.append(f"train-predictor failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    else:
        if not os.path.exists(out) or os.path.exists(out + ".tmp"):
            failures.append(f"predictor file {out} missing or its .tmp left behind")
        if "mean top-" not in r.stdout or "held-out" not in r.stdout:
            failures.append(f"no accuracy summary in: {r.stdout}")
        if "epoch 5/5" not in r.stderr:
            failures.append(f"no per-epoch progress in: {r.stderr[-1000:]}")
        failures += check_bench(binary, model_dir, os.path.join(work, "mlp.json"),
                                ["--predictor", out], "mlp predictor")
    failures += check_bench(binary, model_dir, os.path.join(work, "skip.json"),
                            [], "skip-gate stride 1")

    if os.path.exists(out):
        data = open(out, "rb").read()
        bad = os.path.join(work, "truncated.pred")
        open(bad, "wb").write(data[: len(data) // 2])
        r = bench(binary, model_dir, os.path.join(work, "bad.json"), ["--predictor", bad])
        rows = {}
        if r.returncode == 0 and os.path.exists(os.path.join(work, "bad.json")):
            rows = {row["policy"]: row for row in
                    json.load(open(os.path.join(work, "bad.json")))["policies"]}
        refused = r.returncode != 0 or not rows.get("predictive", {}).get("ok", True)
        text = r.stderr + r.stdout + json.dumps(rows)
        if not refused or "truncated.pred" not in text:
            failures.append(f"a truncated predictor file was not refused: {r.returncode} {text}")
        else:
            print("ok   a truncated predictor file is refused")
    r = run([binary, "train-predictor", "--model", model_dir, "--prompt-ids", "1,2,3", "--out",
             os.path.join(work, "x.pred"), "--stride", "3"])
    if r.returncode == 0 or "stride" not in r.stderr:
        failures.append(f"--stride 3 was not refused: {r.returncode} {r.stderr}")
    bad_prompts = os.path.join(work, "bad_prompts.txt")
    open(bad_prompts, "w").write("1,2,x\n")
    r = run([binary, "train-predictor", "--model", model_dir, "--prompts", bad_prompts, "--out",
             os.path.join(work, "x.pred")])
    if r.returncode == 0 or "bad_prompts.txt:1" not in r.stderr:
        failures.append(f"a non-id prompt was not refused: {r.returncode} {r.stderr}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
