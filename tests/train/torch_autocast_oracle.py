#!/usr/bin/python3
"""PyTorch training oracle for Switchyard's trainer (tests/train/torch_autocast_test.cc).

Usage: /usr/bin/python3 torch_autocast_oracle.py CASE_DIR

Trains the MoE decoder described in CASE_DIR for N steps as a PyTorch user would: float32 master
parameters (plain nn.Parameter tensors), the forward under torch.autocast("cpu", bfloat16) for
precision "bf16" (no autocast for "f32"), the LM head's logits cast to float32 before the
cross-entropy, backward, torch.nn.utils.clip_grad_norm_, torch.optim.AdamW over one parameter
group, and the learning rate of each step set from Switchyard's schedule (optim/lr_schedule.h).

Input, in CASE_DIR (written by the C++ test):
  manifest.json  {"config": {ModelConfig fields, vocab_size resolved},
                  "optim": {"kind", "lr", "min_lr", "warmup_steps", "schedule", "beta1", "beta2",
                            "eps", "weight_decay"},
                  "train": {"steps": total steps of the schedule, "grad_clip", "precision"},
                  "steps": N steps to run, "batch": B, "seq_len": T, "threads": torch threads,
                  "tensors": [{"name", "shape", "offset"}]}   offsets in bytes into params.bin
  params.bin     every initial parameter, float32 little-endian, row-major, at its offset
  batches.bin    per step s = 0..N-1: tokens int32 [B, T], then targets int32 [B, T] (-1 ignored)
Output, in CASE_DIR:
  oracle.json    {"loss": [N], "ce_loss": [N], "aux_loss": [N], "z_loss": [N], "grad_norm": [N],
                  "lr": [N], "seconds": wall time of the N steps}
  Each step's losses are those of its forward, before its update; grad_norm is the total norm
  before clipping.

The model is written here from the definitions, not translated from the C++:
  x_0 = embed_tokens[tokens]
  per layer l: x += Attn(RMSNorm(x)); x += MoE(RMSNorm(x))  (or a dense SwiGLU MLP)
    RMSNorm(x) = x * rsqrt(mean(x^2) + eps) * w
    Attn: q, k, v = x wq^T, x wk^T, x wv^T (GQA: kv head h // (Hq / Hkv)), optional q/k RMSNorm,
          rotate-half RoPE, causal softmax(q k^T / sqrt(D)) v, then wo
    MoE:  logits = x gate^T, probs = softmax(logits), top-k experts on the logits, weights =
          probs at the chosen experts (renormalised to sum 1 with norm_topk_prob), out = sum of
          weight * w_down(silu(w_gate x) * w_up x) over the chosen experts
          aux = E * sum_e f_e P_e (Switch: f_e the fraction of the N*k slots routed to e, a
          constant; P_e the mean probability of e), z = mean(logsumexp(logits)^2) (ST-MoE)
  logits = RMSNorm_final(x_L) lm_head^T (embed_tokens when tied)
  loss = mean CE over targets != -1 + aux_coef * sum aux + z_coef * sum z
Under bf16 autocast the router runs in float32 (ST-MoE's selective precision: the router's
logits feed a softmax and an exponentiated loss); everything else is left to autocast.
"""
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

SUPPORTED_FALSE = ["pregate", "attention_bias", "attention_out_bias"]


def fail(message):
    sys.stderr.write("torch_autocast_oracle: " + message + "\n")
    sys.exit(2)


def check_config(c):
    for key in SUPPORTED_FALSE:
        if c.get(key, False):
            fail(f"config field {key}=true is not supported by this oracle")
    if c.get("num_shared_experts", 0) != 0:
        fail("config field num_shared_experts > 0 is not supported by this oracle")
    if c.get("capacity_factor", 0.0) > 0.0:
        fail("config field capacity_factor > 0 (token dropping) is not supported by this oracle")
    if c["num_experts"] > 0 and c["top_k"] > c["num_experts"]:
        fail("top_k exceeds num_experts")


def rms_norm(x, w, eps):
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w


def rope_tables(t, d, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1).float()
    sin = torch.cat([angles.sin(), angles.sin()], dim=-1).float()
    return cos[None, :, None, :], sin[None, :, None, :]  # [1, T, 1, D]


def apply_rope(x, cos, sin):
    d = x.shape[-1]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def swiglu(x, w_gate, w_up, w_down):
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


class Model:
    def __init__(self, config, params):
        self.c = config
        self.p = params
        c = config
        self.hq = c["num_heads"]
        self.hkv = c.get("num_kv_heads") or self.hq
        self.d = c.get("head_dim") or c["hidden_size"] // self.hq
        self.eps = c["rms_norm_eps"]
        self.moe_ids = [
            l for l in range(c["num_layers"])
            if c["num_experts"] > 0 and l >= c.get("first_k_dense", 0)
            and (l - c.get("first_k_dense", 0)) % c.get("moe_every", 1) == 0
        ]

    def attention(self, l, x, cos, sin, causal):
        p, pre = self.p, f"layers/{l}/attn/"
        b, t, _ = x.shape
        q = F.linear(x, p[pre + "wq"]).view(b, t, self.hq, self.d)
        k = F.linear(x, p[pre + "wk"]).view(b, t, self.hkv, self.d)
        v = F.linear(x, p[pre + "wv"]).view(b, t, self.hkv, self.d)
        if self.c.get("qk_norm", False):
            if self.c.get("qk_norm_per_head", True):
                q = rms_norm(q, p[pre + "q_norm"], self.eps)
                k = rms_norm(k, p[pre + "k_norm"], self.eps)
            else:
                q = rms_norm(q.reshape(b, t, -1), p[pre + "q_norm"], self.eps).view(b, t, self.hq,
                                                                                    self.d)
                k = rms_norm(k.reshape(b, t, -1), p[pre + "k_norm"], self.eps).view(b, t, self.hkv,
                                                                                    self.d)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.hq // self.hkv
        q = q.transpose(1, 2)                                     # [B, Hq, T, D]
        k = k.repeat_interleave(rep, dim=2).transpose(1, 2)      # query head h reads kv h // rep
        v = v.repeat_interleave(rep, dim=2).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d)
        scores = scores.masked_fill(~causal, float("-inf"))
        out = torch.matmul(torch.softmax(scores, dim=-1), v)    # [B, Hq, T, D]
        return F.linear(out.transpose(1, 2).reshape(b, t, self.hq * self.d), p[pre + "wo"])

    def moe(self, l, h):
        """h [N, H] -> (out [N, H] float32, aux, z)."""
        c, p = self.c, self.p
        n = h.shape[0]
        e_count, k = c["num_experts"], c["top_k"]
        with torch.autocast("cpu", enabled=False):
            logits = F.linear(h.float(), p[f"layers/{l}/moe/gate"])   # [N, E] float32
            probs = torch.softmax(logits, dim=-1)
        chosen = torch.topk(logits.detach(), k, dim=-1).indices       # [N, k]
        weights = probs.gather(1, chosen)
        if c.get("norm_topk_prob", True):
            weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros(n, h.shape[1], dtype=torch.float32)
        for e in range(e_count):
            tok, slot = (chosen == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            pre = f"experts/layer{l}/expert{e}/"
            y = swiglu(h.index_select(0, tok), p[pre + "w_gate"], p[pre + "w_up"], p[pre + "w_down"])
            out = out.index_add(0, tok, y.float() * weights[tok, slot].unsqueeze(1))
        f = torch.bincount(chosen.reshape(-1), minlength=e_count).float() / (n * k)
        aux = e_count * (f * probs.mean(dim=0)).sum()
        z = torch.logsumexp(logits, dim=-1).pow(2).mean()
        return out, aux, z

    def forward(self, tokens, targets):
        c, p = self.c, self.p
        b, t = tokens.shape
        cos, sin = rope_tables(t, self.d, c["rope_theta"])
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        x = F.embedding(tokens, p["embed_tokens"])                      # [B, T, H] float32
        auxes, zs = [], []
        for l in range(c["num_layers"]):
            x = x + self.attention(l, rms_norm(x, p[f"layers/{l}/input_norm"], self.eps), cos, sin,
                                   causal)
            h = rms_norm(x, p[f"layers/{l}/post_attention_norm"], self.eps)
            if l in self.moe_ids:
                y, aux, z = self.moe(l, h.reshape(b * t, -1))
                auxes.append(aux)
                zs.append(z)
                x = x + y.view(b, t, -1)
            else:
                pre = f"layers/{l}/mlp/"
                x = x + swiglu(h, p[pre + "w_gate"], p[pre + "w_up"], p[pre + "w_down"])
        x = rms_norm(x, p["final_norm"], self.eps)
        head = p["embed_tokens"] if c.get("tie_word_embeddings", False) else p["lm_head"]
        logits = F.linear(x, head).float()
        ce = F.cross_entropy(logits.reshape(b * t, -1), targets.reshape(-1), ignore_index=-1)
        aux = sum(auxes) if auxes else torch.zeros(())
        z = sum(zs) if zs else torch.zeros(())
        loss = ce + c["router_aux_loss_coef"] * aux + c["router_z_loss_coef"] * z
        return loss, ce, aux, z


def learning_rate(o, total_steps, step):
    """Switchyard's LrSchedule::Lr(step): `step` updates already taken (optim/lr_schedule.cc)."""
    lr, min_lr, w = o["lr"], o["min_lr"], o["warmup_steps"]
    total = max(total_steps, w)  # TrainConfig::schedule_options
    if step < w:
        return lr * step / max(1, w)
    progress = min(max((step - w) / max(1, total - w), 0.0), 1.0)
    kind = o["schedule"]
    if kind == "constant":
        return lr
    if kind == "cosine":
        return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if kind == "linear":
        return min_lr + (lr - min_lr) * (1.0 - progress)
    fail(f"unknown optim.schedule {kind!r}")


def main():
    case_dir = sys.argv[1]
    with open(os.path.join(case_dir, "manifest.json")) as f:
        m = json.load(f)
    c, o, tr = m["config"], m["optim"], m["train"]
    check_config(c)
    if o["kind"] != "adamw":
        fail(f"optim.kind {o['kind']!r} is not supported (adamw only)")
    precision = tr["precision"]
    if precision not in ("f32", "bf16"):
        fail(f"train.precision {precision!r} is not supported (f32, bf16; torch 1.13's CPU "
             "autocast has no float16)")
    torch.manual_seed(0)
    torch.set_num_threads(int(m.get("threads", 1)))

    with open(os.path.join(case_dir, "params.bin"), "rb") as f:
        blob = f.read()
    params, order = {}, []
    for t in m["tensors"]:
        count = math.prod(t["shape"])
        raw = torch.frombuffer(bytearray(blob[t["offset"]:t["offset"] + 4 * count]),
                               dtype=torch.float32)
        params[t["name"]] = torch.nn.Parameter(raw.reshape(t["shape"]).clone())
        order.append(params[t["name"]])
    b, t, n = m["batch"], m["seq_len"], m["steps"]
    batches = torch.frombuffer(bytearray(open(os.path.join(case_dir, "batches.bin"), "rb").read()),
                               dtype=torch.int32)
    if batches.numel() != n * 2 * b * t:
        fail(f"batches.bin holds {batches.numel()} ints, expected {n * 2 * b * t}")
    batches = batches.view(n, 2, b, t).long()

    model = Model(c, params)
    opt = torch.optim.AdamW(order, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"],
                            weight_decay=o["weight_decay"])
    out = {k: [] for k in ("loss", "ce_loss", "aux_loss", "z_loss", "grad_norm", "lr")}
    start = time.time()
    for s in range(n):
        tokens, targets = batches[s, 0], batches[s, 1]
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss, ce, aux, z = model.forward(tokens, targets)
        loss.backward()
        for p in order:  # an expert without tokens still takes its (zero-gradient) AdamW step
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        norm = torch.nn.utils.clip_grad_norm_(order, tr["grad_clip"]) if tr["grad_clip"] > 0 \
            else torch.sqrt(sum((p.grad.double() ** 2).sum() for p in order))
        lr = learning_rate(o, tr["steps"], s)
        for g in opt.param_groups:
            g["lr"] = lr
        if math.isfinite(float(norm)):  # Switchyard skips a step whose gradient is not finite
            opt.step()
        out["loss"].append(float(loss))
        out["ce_loss"].append(float(ce))
        out["aux_loss"].append(float(aux))
        out["z_loss"].append(float(z))
        out["grad_norm"].append(float(norm))
        out["lr"].append(lr)
    out["seconds"] = time.time() - start
    with open(os.path.join(case_dir, "oracle.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
