#!/usr/bin/python3
"""Writes the Mixtral-format bf16 model of benchmarks/inference/run_decode_bench.sh: random
weights, experts several times the size of the last-level cache.

Usage: write_decode_bench_model.py MODEL_DIR [--hidden H --intermediate I --experts E --layers L]

The tensors and their Hugging Face names come from tests/inference/hf_moe_oracle.py
(make_tensors), and so does the safetensors writer; this file only picks the sizes, draws the
values in float32 (the oracle's float64 would need 8 bytes per weight in memory) and writes one
shard per decoder layer, so a shard's float64 copy is all the writer holds at once. A model whose
config.json is already the one asked for, with its index written, is kept.

It also gets hf_moe_oracle's two-letter SentencePiece tokenizer (tokenizer.model and
tokenizer_config.json), which llama.cpp's convert_hf_to_gguf.py needs
(benchmarks/inference/vs_llamacpp.sh).
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "inference"))
import hf_moe_oracle as oracle  # noqa: E402

import numpy as np  # noqa: E402


class Float32Normal:
    """The generator interface make_tensors uses, drawing float32."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def standard_normal(self, shape):
        return self.rng.standard_normal(shape, dtype=np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--intermediate", type=int, default=2048)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=256)
    args = ap.parse_args()

    config, _, _ = oracle.CASES["mixtral"]
    config = dict(config, vocab_size=args.vocab, hidden_size=args.hidden,
                  intermediate_size=args.intermediate, num_hidden_layers=args.layers,
                  num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                  num_local_experts=args.experts, num_experts_per_tok=args.top_k,
                  max_position_embeddings=4096)
    index = os.path.join(args.model_dir, "model.safetensors.index.json")
    config_file = os.path.join(args.model_dir, "config.json")
    if os.path.exists(index) and os.path.exists(config_file):
        if json.load(open(config_file)) == config:
            if not os.path.exists(os.path.join(args.model_dir, "tokenizer.model")):
                oracle.write_spm_tokenizer(args.model_dir, args.vocab)
            print(f"{args.model_dir}: kept (same config)")
            return 0
    os.makedirs(args.model_dir, exist_ok=True)
    for name in os.listdir(args.model_dir):
        os.remove(os.path.join(args.model_dir, name))

    tensors = oracle.make_tensors("mixtral", config, Float32Normal(1))
    shards = {}  # "model.layers.L." prefix, or "other"
    for name, arr in tensors:
        m = re.match(r"model\.layers\.(\d+)\.", name)
        shards.setdefault(int(m.group(1)) if m else -1, []).append((name, arr))
    del tensors
    weight_map, total = {}, 0
    keys = sorted(shards)
    for i, key in enumerate(keys):
        fname = f"model-{i + 1:05d}-of-{len(keys):05d}.safetensors"
        part = shards.pop(key)
        oracle.write_safetensors(os.path.join(args.model_dir, fname), part, "BF16")
        for name, arr in part:
            weight_map[name] = fname
            total += arr.size * 2
    expert_bytes = 3 * args.hidden * args.intermediate * 2 * args.experts * args.layers
    with open(config_file, "w") as f:
        json.dump(config, f, indent=2)
    oracle.write_spm_tokenizer(args.model_dir, args.vocab)
    with open(index, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    print(f"{args.model_dir}: {total / 2**20:.0f} MiB of bf16 weights, experts "
          f"{expert_bytes / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
