#!/usr/bin/python3
"""`switchyard plot` end to end: a tiny training run, then the pictures of its run directory.

Usage: /usr/bin/python3 plot_run_test.py SWITCHYARD_BINARY WORK_DIR

- `switchyard train` (the tiny config, 60 steps, an evaluation every 20) writes metrics.jsonl;
  `switchyard plot RUN_DIR --out DIR` then writes loss, eval_accuracy, tokens_per_s and
  expert_load, each as PNG and SVG.
- Every PNG decodes with png_reader.py (zlib + struct, not libpng: signature, chunk CRCs, filters)
  at the size of its SVG, and has content: several colours, and no single colour covering more
  than 99% of it. Every SVG parses as XML with an <svg> root and draws something.
- The charts carry what the metrics hold: the per-task accuracy chart names every task of the
  run's eval lines, the heatmap has one row per MoE layer.
- With numpy and torch (hf_moe_oracle.py's tiny Mixtral): `bench infer --json-out FILE --plot DIR`
  writes its bar charts, and `switchyard plot` draws the JSON found in the run directory too.
- Errors: a missing directory, and a metrics file with a line that is not JSON, are refused with
  the path (and the line) named; a last line cut short is skipped with a note.
"""
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import png_reader  # noqa: E402

CONFIG = os.path.join(HERE, "..", "..", "examples", "configs", "tiny.json")
TRAINING_CHARTS = ["loss", "eval_accuracy", "tokens_per_s", "expert_load"]
failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r


def check_picture(stem):
    png, svg = stem + ".png", stem + ".svg"
    name = os.path.basename(stem)
    if not (os.path.isfile(png) and os.path.isfile(svg)):
        check(False, f"{name}: {png} and {svg} exist")
        return None
    try:
        width, height, channels, rows = png_reader.decode(open(png, "rb").read())
    except ValueError as e:
        check(False, f"{name}.png decodes ({e})")
        return None
    counts = {}
    for row in rows:
        for i in range(0, len(row), channels):
            px = row[i:i + channels]
            counts[px] = counts.get(px, 0) + 1
    top = max(counts.values()) / (width * height)
    check(len(counts) >= 4 and top < 0.99,
          f"{name}.png {width}x{height}: {len(counts)} colours, the commonest covers {top:.1%}")
    try:
        root = ET.parse(svg).getroot()
    except ET.ParseError as e:
        check(False, f"{name}.svg parses as XML ({e})")
        return None
    tag = root.tag.split("}")[-1]
    drawn = [e for e in root.iter() if e.tag.split("}")[-1] in ("rect", "polyline", "text")]
    check(tag == "svg" and root.get("width") == str(width) and root.get("height") == str(height)
          and len(drawn) > 10,
          f"{name}.svg: <{tag}> {root.get('width')}x{root.get('height')}, {len(drawn)} elements")
    return root


def svg_texts(root):
    return [e.text or "" for e in root.iter() if e.tag.split("}")[-1] == "text"]


def main():
    binary, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    run_dir = os.path.join(work, "run")
    r = run([binary, "train", "--config", CONFIG, "--set", "train.steps=60",
             "--set", "train.eval_every=20", "--set", "train.eval_batches=2",
             "--set", "log.every=10", "--set", "checkpoint.dir=" + run_dir,
             "--set", "log.metrics=" + os.path.join(run_dir, "metrics.jsonl")])
    check(r.returncode == 0, "switchyard train (60 steps) " + r.stderr[-500:])
    if r.returncode != 0:
        return 1
    evals = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if "eval_loss" in l]
    tasks = sorted(evals[-1].get("eval_tasks", {}))
    check(len(evals) >= 3 and len(tasks) == 5, f"{len(evals)} eval lines, tasks {tasks}")
    steps = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if "expert_load" in l]
    moe_layers = len(steps[-1]["expert_load"])

    out = os.path.join(work, "pictures")
    r = run([binary, "plot", run_dir, "--out", out])
    print(r.stdout.strip())
    check(r.returncode == 0, "switchyard plot exits 0 " + r.stderr.strip())
    roots = {name: check_picture(os.path.join(out, name)) for name in TRAINING_CHARTS}
    if roots["eval_accuracy"] is not None:
        texts = svg_texts(roots["eval_accuracy"])
        check(all(t in texts for t in tasks + ["all"]), f"eval_accuracy names {tasks} and all")
    if roots["expert_load"] is not None:
        texts = svg_texts(roots["expert_load"])
        check(all(str(l) in texts for l in range(moe_layers)),
              f"expert_load has a row label for each of the {moe_layers} MoE layers")
    if roots["loss"] is not None:
        texts = svg_texts(roots["loss"])
        check("train" in texts and "eval" in texts, "loss has train and eval in its legend")

    # bench infer's charts, with numpy and torch for the tiny Hugging Face model.
    sys.path.insert(0, os.path.join(HERE, "..", "inference"))
    try:
        import hf_moe_oracle as oracle  # exits 77 without numpy and torch
        import numpy as np
        have_oracle = True
    except SystemExit:
        have_oracle = False
    if have_oracle:
        config, dtype, shards = oracle.CASES["mixtral"]
        model_dir = os.path.join(work, "mixtral")
        oracle.write_model(model_dir, config,
                           oracle.make_tensors("mixtral", config, np.random.default_rng(7)),
                           dtype, shards)
        bench_plots = os.path.join(work, "bench_plots")
        r = run([binary, "bench", "infer", "--model", model_dir, "--policies", "resident,ondemand",
                 "--prompt-len", "4", "--gen-len", "3", "--device", "sim", "--device-slots", "2",
                 "--threads", "2", "--json-out", os.path.join(run_dir, "bench.json"),
                 "--plot", bench_plots])
        check(r.returncode == 0, "bench infer --json-out --plot " + r.stderr.strip()[-300:])
        for name in ["bench_infer_tokens_per_s", "cache_hit_rates"]:
            root = check_picture(os.path.join(bench_plots, name))
            if root is not None:
                texts = svg_texts(root)
                check("resident" in texts and "ondemand" in texts, f"{name} names both policies")
        r = run([binary, "plot", run_dir, "--out", out])
        check(r.returncode == 0, "switchyard plot with a bench infer JSON in the run")
        check_picture(os.path.join(out, "bench_cache_hit_rates"))
    else:
        print("note: no numpy/torch: the bench infer charts are not checked")

    # Errors.
    r = run([binary, "plot", os.path.join(work, "no-such-run")])
    check(r.returncode == 1 and "no-such-run is not a directory" in r.stderr,
          "a missing run directory is refused: " + r.stderr.strip())
    bad = os.path.join(work, "bad")
    os.makedirs(bad)
    lines = open(os.path.join(run_dir, "metrics.jsonl")).read().splitlines()
    with open(os.path.join(bad, "metrics.jsonl"), "w") as f:
        f.write("\n".join([lines[0], "{not json", lines[1]]) + "\n")
    r = run([binary, "plot", bad])
    check(r.returncode == 1 and "metrics.jsonl line 2" in r.stderr,
          "a line that is not JSON is named: " + r.stderr.strip())
    with open(os.path.join(bad, "metrics.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n" + lines[-1][: len(lines[-1]) // 2])
    r = run([binary, "plot", bad])
    check(r.returncode == 0 and "cut short" in r.stdout,
          "a last line cut short is skipped with a note: " + r.stdout.splitlines()[0])

    if failures:
        print(f"FAIL: {len(failures)} checks failed")
        return 1
    print("PASS: plot_run_test")
    return 0


if __name__ == "__main__":
    sys.exit(main())
