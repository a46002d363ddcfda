#!/usr/bin/python3
"""Model FLOP utilisation of `switchyard train` on a GPU, from its metrics file, and the agreement
of a cuda:0 run with a cpu run of the same config (scripts/gpu/validate.sh, step train).

Usage: gpu_mfu.py CONFIG METRICS_CUDA METRICS_ZERO3 TINY_CPU_METRICS TINY_CUDA_METRICS

FLOPs per token = 6 x (parameters a token passes through: attention projections, the top_k routed
experts, the shared experts, the router and the LM head) + the causal attention products
(6 x layers x heads x head_dim x seq_len, half of the full square). The embedding lookup does no
arithmetic. Peaks: H100/H200 SXM dense FP32 67 TFLOP/s, TF32 tensor 494.7 TFLOP/s and BF16 tensor
989.4 TFLOP/s (an f32 run reports the first two, a train.precision bf16 or f16 run the last). A
metrics file that is missing counts as not run.
"""
import json
import statistics
import sys


def rows(path):
    try:
        return [json.loads(l) for l in open(path) if '"step_seconds"' in l]
    except OSError as e:
        print(f"{path}: {e}")
        return []


def flops_per_token(m, seq):
    h = m["hidden_size"]
    heads = m["num_heads"]
    kv = m.get("num_kv_heads") or heads
    hd = m.get("head_dim") or h // heads
    layers = m["num_layers"]
    attn = h * heads * hd * 2 + h * kv * hd * 2
    moe = m["top_k"] * 3 * h * m["moe_intermediate_size"] + h * m["num_experts"]
    moe += m.get("num_shared_experts", 0) * 3 * h * m.get("shared_expert_intermediate_size", 0)
    active = layers * (attn + moe) + h * m["vocab_size"]
    return 6 * active + 6 * layers * heads * hd * seq, active


def main():
    cfg = json.load(open(sys.argv[1]))
    seq = cfg["data"]["seq_len"]
    per_token, active = flops_per_token(cfg["model"], seq)
    print(f"model: {active / 1e6:.1f}M parameters active per token, {per_token / 1e9:.2f} GFLOP/token")
    for name, path in (("cuda:0", sys.argv[2]), ("cuda:0 zero3", sys.argv[3])):
        r = [x for x in rows(path) if x["step"] > 2]
        if not r:
            print(f"{name}: no timed steps")
            continue
        tok_s = statistics.median(x["tokens_per_s"] for x in r)
        step = statistics.median(x["step_seconds"] for x in r)
        phases = {k: statistics.median(x["phase_seconds"][k] for x in r)
                  for k in ("forward", "backward", "optimizer")}
        tflops = tok_s * per_token / 1e12
        precision = cfg.get("train", {}).get("precision", "f32")
        mfu = (f"MFU {tflops / 989.4:.1%} of BF16 ({precision})" if precision != "f32" else
               f"MFU {tflops / 67:.1%} of FP32, {tflops / 494.7:.1%} of TF32")
        print(f"{name}: {tok_s:.0f} tokens/s, step {step * 1e3:.1f} ms "
              f"(fwd {phases['forward'] * 1e3:.1f}, bwd {phases['backward'] * 1e3:.1f}, "
              f"opt {phases['optimizer'] * 1e3:.1f}), {tflops:.2f} TFLOP/s = {mfu}; "
              f"loss {r[0]['loss']:.4f} -> {r[-1]['loss']:.4f}")
    one, zero3 = rows(sys.argv[2]), rows(sys.argv[3])
    if one and zero3:
        diffs = [abs(a["loss"] - b["loss"]) for a, b in zip(one, zero3)]
        print(f"cuda:0 one rank vs ZeRO-3 on two ranks: max |loss difference| {max(diffs):.2e} "
              f"over {len(diffs)} steps")
    cpu, cuda = rows(sys.argv[4]), rows(sys.argv[5])
    if cpu and cuda:
        diffs = [abs(a["loss"] - b["loss"]) for a, b in zip(cpu, cuda)]
        print("tiny cpu  losses: " + " ".join(f"{x['loss']:.6f}" for x in cpu))
        print("tiny cuda losses: " + " ".join(f"{x['loss']:.6f}" for x in cuda))
        print(f"tiny cpu vs cuda: max |loss difference| {max(diffs):.2e} over {len(diffs)} steps")


if __name__ == "__main__":
    main()
