#!/usr/bin/python3
"""`switchyard bench decode` on tiny models: it runs, it decodes what `switchyard generate` decodes,
and its weight bytes per decode token equal an independent count made here from the model files.

Usage: /usr/bin/python3 bench_decode_test.py SWITCHYARD_BINARY WORK_DIR

The models are hf_moe_oracle.py's tiny Mixtral (BF16, one file) and DeepSeek-MoE (BF16, three
shards with an index; a dense first layer and shared experts), written by its writer. The count
reads only the safetensors files and config.json: loaded as bf16, every value is 2 bytes; a
decode step at batch 1 reads every tensor that is not a routed expert's (attention, norms,
router, shared experts, dense FFN, lm_head), one row of model.embed_tokens, and the three
matrices of exactly top_k experts in each MoE layer (a token's k choices are distinct experts).
Every timed step must report exactly that many bytes and top_k x (MoE layers) experts, and the
achieved GB/s and the ratio must be the bytes, the time and the stream figure put together.
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_moe_oracle as oracle  # exits 77 (skipped) without numpy and torch

import numpy as np

BF16_BYTES = 2
EXPERT = re.compile(r"^model\.layers\.(\d+)\..*\.experts\.(\d+)\.")


def expected_bytes_per_token(model_dir, config):
    """(weight bytes one batch-1 decode step reads, number of MoE layers), from the files."""
    shapes = {}
    for name in sorted(os.listdir(model_dir)):
        if name.endswith(".safetensors"):
            for tensor, value in oracle.read_safetensors(os.path.join(model_dir, name)).items():
                shapes[tensor] = tuple(value.shape)
    non_expert, experts = 0, {}  # experts: layer -> {expert: bytes}
    for tensor, shape in shapes.items():
        size = int(np.prod(shape)) * BF16_BYTES
        m = EXPERT.match(tensor)
        if m:
            layer = experts.setdefault(int(m.group(1)), {})
            layer[int(m.group(2))] = layer.get(int(m.group(2)), 0) + size
        elif tensor == "model.embed_tokens.weight" and not config.get("tie_word_embeddings"):
            non_expert += shape[1] * BF16_BYTES
        else:
            non_expert += size
    k = config["num_experts_per_tok"]
    total = non_expert
    for layer in experts.values():
        sizes = set(layer.values())
        assert len(sizes) == 1, f"experts of one layer differ in size: {sizes}"
        total += k * sizes.pop()
    return total, len(experts)


def check_family(binary, work, fam):
    failures = []
    config, dtype, shards = oracle.CASES[fam]
    model_dir = os.path.join(work, fam)
    oracle.write_model(model_dir, config, oracle.make_tensors(fam, config,
                                                             np.random.default_rng(7)),
                       dtype, shards)
    out = os.path.join(work, fam + ".json")
    cmd = [binary, "bench", "decode", "--model", model_dir, "--prompt-len", "5", "--gen-len", "4",
           "--warmup", "1", "--threads", "2", "--dtype", "bf16", "--stream-mib", "8",
           "--stream-repeats", "1", "--seed", "3", "--json-out", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return [f"{fam}: bench decode failed ({r.returncode}): {r.stderr.strip()}"]
    print(r.stdout.strip())
    res = json.load(open(out))

    want, moe_layers = expected_bytes_per_token(model_dir, config)
    k = config["num_experts_per_tok"]
    got = [s["weight_bytes"] for s in res["steps"]]
    experts = [s["experts"] for s in res["steps"]]
    ok = len(got) == 4 and all(b == want for b in got) and all(e == k * moe_layers
                                                              for e in experts)
    print(f"{'ok  ' if ok else 'FAIL'} {fam}: weight bytes per step {got}, independent count "
          f"{want}; experts per step {experts}, want {k} x {moe_layers}")
    if not ok:
        failures.append(f"{fam}: bytes {got} != {want} or experts {experts} != {k * moe_layers}")

    achieved = res["weight_bytes_per_token"] * res["tokens_per_s"] * 1e-9
    seconds = sum(s["seconds"] for s in res["steps"])
    consistent = (res["tokens_per_s"] > 0 and res["stream_copy_gb_per_s"] > 0
                  and res["stream_read_gb_per_s"] > 0
                  and abs(res["tokens_per_s"] - 4 / seconds) <= 1e-9 * res["tokens_per_s"]
                  and abs(res["achieved_gb_per_s"] - achieved) <= 1e-9 * achieved
                  and abs(res["ratio_to_stream_copy"] * res["stream_copy_gb_per_s"] - achieved)
                  <= 1e-9 * achieved
                  and abs(res["median_ratio_to_stream_copy"] * res["stream_copy_median_gb_per_s"]
                          - res["median_step_gb_per_s"]) <= 1e-9 * res["median_step_gb_per_s"])
    print(f"{'ok  ' if consistent else 'FAIL'} {fam}: {res['tokens_per_s']:.1f} tokens/s, "
          f"{res['achieved_gb_per_s']:.3f} GB/s, stream copy {res['stream_copy_gb_per_s']:.2f} "
          f"GB/s, ratio {res['ratio_to_stream_copy']:.4f}")
    if not consistent:
        failures.append(f"{fam}: tokens/s, GB/s and ratio do not agree: {res}")

    # The bench decodes greedily from its prompt: the tokens must be `switchyard generate`'s.
    n = len(res["generated"])
    gen = subprocess.run([binary, "generate", "--model", model_dir, "--dtype", "bf16",
                          "--prompt-ids", ",".join(map(str, res["prompt"])),
                          "--max-tokens", str(n)], capture_output=True, text=True)
    tokens = ([int(x) for x in gen.stdout.strip().split(",")] if gen.returncode == 0 else None)
    same = tokens == res["generated"]
    print(f"{'ok  ' if same else 'FAIL'} {fam}: bench tokens {res['generated']}, "
          f"generate {tokens}")
    if not same:
        failures.append(f"{fam}: bench generated {res['generated']}, generate {tokens} "
                        f"({gen.stderr.strip()})")
    return failures


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    failures = []
    for fam in ("mixtral", "deepseek"):
        failures += check_family(binary, work, fam)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
