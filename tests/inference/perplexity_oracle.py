#!/usr/bin/python3
"""`switchyard perplexity` against independent arithmetic.

A tiny Mixtral checkpoint (written by the loader's oracle test, hf_moe_oracle.py) and a random id
stream of 3 chunks:
  - the perplexity of the f32 model equals the one computed from an independent float64 PyTorch
    forward of the same weights (within 1e-4 relative);
  - with `--dtype bf16 --reference DIR`, the KL divergence, top-1 agreement and both perplexities
    equal numpy's, computed from `generate --dump-logits` of each chunk under both dtypes;
  - a model against itself: KL 0, top-1 agreement 100%.

    perplexity_oracle.py SWITCHYARD WORK
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
    import torch
    import hf_moe_oracle as hf
except ImportError as e:  # ctest reads 77 as "skipped"
    print(f"SKIP: {e}; install Debian's python3-torch and python3-numpy")
    sys.exit(77)

CONTEXT, CHUNKS = 32, 3


def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def perplexity(binary, model, ids_file, *extra):
    dtype = [] if "--dtype" in extra else ["--dtype", "f32"]  # not auto: the config's bf16
    r = subprocess.run([binary, "perplexity", "--model", model, "--ids", ids_file, "--context",
                        str(CONTEXT), "--json", *dtype, *extra], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: switchyard perplexity {' '.join(extra)}: {r.stderr}")
    return json.loads(r.stdout)


def dumped_logits(binary, model, chunk, work, *extra):
    out = os.path.join(work, "chunk.logits")
    dtype = [] if "--dtype" in extra else ["--dtype", "f32"]
    r = subprocess.run([binary, "generate", "--model", model, "--prompt-ids",
                        ",".join(map(str, chunk)), "--dump-logits", out, *dtype, *extra],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: generate: {r.stderr}")
    return hf.read_logits(out).numpy()


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    config, dtype, _ = hf.CASES["mixtral"]
    values = hf.write_model(os.path.join(work, "model"), config,
                            hf.make_tensors("mixtral", config, np.random.default_rng(5)), "F32")
    model = os.path.join(work, "model")
    ids = np.random.default_rng(6).integers(0, config["vocab_size"], CONTEXT * CHUNKS + 5)
    ids_file = os.path.join(work, "ids.txt")
    with open(ids_file, "w") as f:
        f.write(",".join(map(str, ids)))
    chunks = [ids[c * CONTEXT:(c + 1) * CONTEXT].tolist() for c in range(CHUNKS)]
    first = CONTEXT // 2
    failures = []

    # 1. Perplexity against a float64 PyTorch forward.
    family = hf.Family("mixtral", config, values)
    nll, n = 0.0, 0
    for chunk in chunks:
        lp = log_softmax(family.forward(chunk).numpy())
        for j in range(first, CONTEXT - 1):
            nll -= lp[j, chunk[j + 1]]
            n += 1
    want = float(np.exp(nll / n))
    ours = perplexity(binary, model, ids_file)
    ok = ours["scored_tokens"] == n and ours["chunks"] == CHUNKS and \
        abs(ours["perplexity"] - want) <= 1e-4 * want
    print(f"{'ok  ' if ok else 'FAIL'} f32 perplexity {ours['perplexity']:.6f}, PyTorch float64 "
          f"{want:.6f}, {ours['scored_tokens']} tokens scored (want {n})")
    if not ok:
        failures.append("perplexity against PyTorch")

    # 2. bf16 against its f32 reference, against numpy on the dumped logits.
    kl, agree, nll_p, nll_q = [], 0, 0.0, 0.0
    for chunk in chunks:
        p = log_softmax(dumped_logits(binary, model, chunk, work, "--dtype", "bf16"))
        q = log_softmax(dumped_logits(binary, model, chunk, work))
        for j in range(first, CONTEXT - 1):
            kl.append(float((np.exp(q[j]) * (q[j] - p[j])).sum()))
            agree += int(p[j].argmax() == q[j].argmax())
            nll_p -= p[j, chunk[j + 1]]
            nll_q -= q[j, chunk[j + 1]]
    ours = perplexity(binary, model, ids_file, "--dtype", "bf16", "--reference", model)
    checks = {
        "mean_kl": (ours["mean_kl"], float(np.mean(kl))),
        "max_kl": (ours["max_kl"], float(np.max(kl))),
        "top1_agreement": (ours["top1_agreement"], agree / n),
        "perplexity": (ours["perplexity"], float(np.exp(nll_p / n))),
        "reference_perplexity": (ours["reference_perplexity"], float(np.exp(nll_q / n))),
    }
    for name, (got, want) in checks.items():
        ok = abs(got - want) <= 1e-6 * max(abs(want), 1e-3)
        print(f"{'ok  ' if ok else 'FAIL'} bf16 vs f32 {name}: {got:.9g}, numpy {want:.9g}")
        if not ok:
            failures.append(f"bf16 vs f32 {name}")
    if not ours["mean_kl"] > 0:
        failures.append("bf16 weights show no divergence from f32: the comparison is vacuous")

    # 3. A model against itself.
    same = perplexity(binary, model, ids_file, "--reference", model)
    ok = same["mean_kl"] == 0 and same["top1_agreement"] == 1.0
    print(f"{'ok  ' if ok else 'FAIL'} f32 against itself: KL {same['mean_kl']}, "
          f"top-1 {same['top1_agreement']}")
    if not ok:
        failures.append("a model against itself")

    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
