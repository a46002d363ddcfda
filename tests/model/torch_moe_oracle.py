#!/usr/bin/python3
"""PyTorch oracle for Switchyard's MoE model (tests/model/torch_oracle_test.cc).

Usage: /usr/bin/python3 torch_moe_oracle.py CASE_DIR

Input (written by the C++ test), in CASE_DIR:
  manifest.json  {"config": {ModelConfig fields}, "batch": B, "seq_len": T,
                  "tokens": [B*T ints], "targets": [B*T ints, -1 = ignored],
                  "tensors": [{"name", "shape", "offset"}]}   offsets in bytes into params.bin
  params.bin     every parameter, raw little-endian float32, row-major, at its offset
Output, in CASE_DIR:
  oracle.json    {"loss", "ce_loss", "aux_loss", "z_loss", "routing": [[[experts of token n]]
                  per MoE layer], "kept": [...], "tensors": [{"name", "shape", "offset"}]}
  oracle.bin     float64 little-endian: "logits" [B*T, vocab] and "grad/<param name>" for every
                 parameter, at the offsets in oracle.json

The model is written here from the definitions (Mixtral / Qwen2-MoE / DeepSeek-MoE style
decoder, Switch aux loss, ST-MoE z-loss, Pre-gated MoE wiring), in float64 with autograd, not
translated from the C++ implementation.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w


def apply_rope(x, positions, theta):
    """x [N, H, D]: Hugging Face rotate-half RoPE."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1)[:, None, :]
    sin = torch.cat([angles.sin(), angles.sin()], dim=-1)[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos + rotated * sin


def swiglu_mlp(x, w_gate, w_up, w_down):
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


class Oracle:
    def __init__(self, manifest, params):
        self.c = manifest["config"]
        self.b = manifest["batch"]
        self.t = manifest["seq_len"]
        self.p = params

    def moe_layer_ids(self):
        c = self.c
        ids = []
        for l in range(c["num_layers"]):
            if c["num_experts"] > 0 and l >= c["first_k_dense"] and \
                    (l - c["first_k_dense"]) % c["moe_every"] == 0:
                ids.append(l)
        return ids

    def attention(self, l, x, positions):
        c, p = self.c, self.p
        n = x.shape[0]
        hq = c["num_heads"]
        hkv = c["num_kv_heads"] or hq
        d = c["head_dim"] or c["hidden_size"] // hq
        pre = f"layers/{l}/attn/"
        q = F.linear(x, p[pre + "wq"], p.get(pre + "bq"))
        k = F.linear(x, p[pre + "wk"], p.get(pre + "bk"))
        v = F.linear(x, p[pre + "wv"], p.get(pre + "bv"))
        eps = c["rms_norm_eps"]
        if c["qk_norm"]:
            if c["qk_norm_per_head"]:
                q = rms_norm(q.view(n, hq, d), p[pre + "q_norm"], eps).reshape(n, hq * d)
                k = rms_norm(k.view(n, hkv, d), p[pre + "k_norm"], eps).reshape(n, hkv * d)
            else:
                q = rms_norm(q, p[pre + "q_norm"], eps)
                k = rms_norm(k, p[pre + "k_norm"], eps)
        q = apply_rope(q.view(n, hq, d), positions, c["rope_theta"])
        k = apply_rope(k.view(n, hkv, d), positions, c["rope_theta"])
        v = v.view(n, hkv, d)
        q = q.view(self.b, self.t, hq, d).permute(0, 2, 1, 3)              # [B, Hq, T, D]
        k = k.view(self.b, self.t, hkv, d).permute(0, 2, 1, 3)
        v = v.view(self.b, self.t, hkv, d).permute(0, 2, 1, 3)
        k = k.repeat_interleave(hq // hkv, dim=1)                           # head h -> h // group
        v = v.repeat_interleave(hq // hkv, dim=1)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)       # [B, Hq, T, T]
        causal = torch.ones(self.t, self.t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        out = torch.matmul(torch.softmax(scores, dim=-1), v)               # [B, Hq, T, D]
        out = out.permute(0, 2, 1, 3).reshape(n, hq * d)
        return F.linear(out, p[pre + "wo"])

    def moe(self, l, h, router_logits, stats):
        """Routed experts + shared experts of decoder layer l, routed by router_logits [N, E]."""
        c, p = self.c, self.p
        n = h.shape[0]
        e_count, k = c["num_experts"], c["top_k"]
        probs = torch.softmax(router_logits, dim=-1)
        _, chosen = torch.topk(router_logits.detach(), k, dim=-1)           # descending
        weights = probs.gather(1, chosen)
        if c["norm_topk_prob"]:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        capacity = None
        if c["capacity_factor"] > 0:
            capacity = math.ceil(c["capacity_factor"] * n * k / e_count - 1e-9)
        load = [0] * e_count
        kept = []
        out = torch.zeros_like(h)
        for tok in range(n):
            row = []
            for j in range(k):
                e = int(chosen[tok, j])
                keep = capacity is None or load[e] < capacity
                row.append(keep)
                if not keep:
                    continue
                load[e] += 1
                pre = f"experts/layer{l}/expert{e}/"
                y = swiglu_mlp(h[tok], p[pre + "w_gate"], p[pre + "w_up"], p[pre + "w_down"])
                out = out.index_add(0, torch.tensor([tok]), (weights[tok, j] * y)[None, :])
            kept.append(row)
        if c["num_shared_experts"] > 0:
            pre = f"layers/{l}/moe/shared_experts/"
            s = swiglu_mlp(h, p[pre + "w_gate"], p[pre + "w_up"], p[pre + "w_down"])
            if c["shared_expert_gate"]:
                s = torch.sigmoid(F.linear(h, p[f"layers/{l}/moe/shared_expert_gate"])) * s
            out = out + s
        # Switch load balancing: E * sum_e f_e P_e, f_e over the N*k slots before dropping.
        f = torch.zeros(e_count)
        for e in range(e_count):
            f[e] = float((chosen == e).sum()) / (n * k)
        aux = e_count * (f * probs.mean(dim=0)).sum()
        z = torch.logsumexp(router_logits, dim=-1).pow(2).mean()
        stats["aux"].append(aux)
        stats["z"].append(z)
        stats["routing"].append(chosen.tolist())
        stats["kept"].append(kept)
        return out

    def forward(self, tokens, targets):
        c, p = self.c, self.p
        n = self.b * self.t
        positions = torch.arange(self.t).repeat(self.b)
        x = p["embed_tokens"][tokens]
        eps = c["rms_norm_eps"]
        moe_ids = self.moe_layer_ids()
        stats = {"aux": [], "z": [], "routing": [], "kept": []}
        next_logits = None  # pre-gate logits for the next MoE layer
        for l in range(c["num_layers"]):
            x = x + self.attention(l, rms_norm(x, p[f"layers/{l}/input_norm"], eps), positions)
            h = rms_norm(x, p[f"layers/{l}/post_attention_norm"], eps)
            if l in moe_ids:
                m = moe_ids.index(l)
                if c["pregate"] and m > 0:
                    router_logits = next_logits          # chosen by the previous block's pre-gate
                else:
                    router_logits = F.linear(h, p[f"layers/{l}/moe/gate"])
                if c["pregate"] and m + 1 < len(moe_ids):
                    next_logits = F.linear(h, p[f"layers/{l}/moe/pregate"])
                x = x + self.moe(l, h, router_logits, stats)
            else:
                pre = f"layers/{l}/mlp/"
                x = x + swiglu_mlp(h, p[pre + "w_gate"], p[pre + "w_up"], p[pre + "w_down"])
        x = rms_norm(x, p["final_norm"], eps)
        head = p["embed_tokens"] if c["tie_word_embeddings"] else p["lm_head"]
        logits = F.linear(x, head)
        ce = F.cross_entropy(logits, targets, ignore_index=-1, reduction="mean")
        aux = sum(stats["aux"]) if stats["aux"] else torch.zeros(())
        z = sum(stats["z"]) if stats["z"] else torch.zeros(())
        loss = ce + c["router_aux_loss_coef"] * aux + c["router_z_loss_coef"] * z
        return logits, loss, ce, aux, z, stats


def main():
    case_dir = sys.argv[1]
    with open(os.path.join(case_dir, "manifest.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(case_dir, "params.bin"), "rb") as f:
        blob = f.read()
    params = {}
    for t in manifest["tensors"]:
        count = 1
        for s in t["shape"]:
            count *= s
        raw = torch.frombuffer(bytearray(blob[t["offset"]:t["offset"] + 4 * count]),
                               dtype=torch.float32)
        params[t["name"]] = raw.reshape(t["shape"]).to(torch.float64).requires_grad_(True)
    tokens = torch.tensor(manifest["tokens"], dtype=torch.long)
    targets = torch.tensor(manifest["targets"], dtype=torch.long)

    oracle = Oracle(manifest, params)
    logits, loss, ce, aux, z, stats = oracle.forward(tokens, targets)
    loss.backward()

    out_tensors, chunks, offset = [], [], 0

    def add(name, value):
        nonlocal offset
        data = value.detach().to(torch.float64).contiguous().numpy().tobytes()
        out_tensors.append({"name": name, "shape": list(value.shape), "offset": offset})
        chunks.append(data)
        offset += len(data)

    add("logits", logits)
    for t in manifest["tensors"]:
        g = params[t["name"]].grad
        add("grad/" + t["name"], g if g is not None else torch.zeros_like(params[t["name"]]))
    with open(os.path.join(case_dir, "oracle.bin"), "wb") as f:
        for c in chunks:
            f.write(c)
    with open(os.path.join(case_dir, "oracle.json"), "w") as f:
        json.dump({"loss": float(loss), "ce_loss": float(ce), "aux_loss": float(aux),
                   "z_loss": float(z), "routing": stats["routing"], "kept": stats["kept"],
                   "tensors": out_tensors}, f)


if __name__ == "__main__":
    main()
