#!/usr/bin/python3
"""PyTorch eager baseline for one training step of Switchyard's MoE decoder (benchmark only).

    torch_train_step.py CONFIG.json --threads T --steps N [--warmup W] [--precision f32|bf16]

Builds the model of CONFIG's "model" block in float32 as a PyTorch user would write it
(Mixtral-style: a loop over experts with index_select / index_add_, manual causal GQA attention
since torch 1.13 has no scaled_dot_product_attention), draws random token batches of the config's
data.batch_size x data.seq_len, and times forward, backward and torch.optim.AdamW (foreach) for N
steps after W warmup steps on T threads. With --precision bf16 the forward runs under
torch.autocast("cpu", dtype=torch.bfloat16) over the float32 parameters (mixed precision as PyTorch
users write it; the backward follows autocast's casts). Prints one JSON line:
  {"tokens_per_s", "step_seconds", "phase_seconds": {"forward", "backward", "optimizer"}, ...}
with medians over the timed steps.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.w = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w


def rope(x, cos, sin):
    d = x.shape[-1]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.nh = c["num_heads"]
        self.nkv = c.get("num_kv_heads") or self.nh
        self.hd = c.get("head_dim") or h // self.nh
        self.wq = nn.Linear(h, self.nh * self.hd, bias=False)
        self.wk = nn.Linear(h, self.nkv * self.hd, bias=False)
        self.wv = nn.Linear(h, self.nkv * self.hd, bias=False)
        self.wo = nn.Linear(self.nh * self.hd, h, bias=False)
        self.qk_norm = c.get("qk_norm", False)
        if self.qk_norm:
            self.q_norm = RMSNorm(self.hd, c.get("rms_norm_eps", 1e-6))
            self.k_norm = RMSNorm(self.hd, c.get("rms_norm_eps", 1e-6))

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.nh, self.hd)
        k = self.wk(x).view(b, t, self.nkv, self.hd)
        v = self.wv(x).view(b, t, self.nkv, self.hd)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        rep = self.nh // self.nkv
        q = q.transpose(1, 2)
        k = k.repeat_interleave(rep, dim=2).transpose(1, 2)
        v = v.repeat_interleave(rep, dim=2).transpose(1, 2)
        att = (q @ k.transpose(-1, -2)) / self.hd ** 0.5 + mask
        y = att.softmax(-1) @ v
        return self.wo(y.transpose(1, 2).reshape(b, t, self.nh * self.hd))


class SwiGLU(nn.Module):
    def __init__(self, h, i):
        super().__init__()
        self.w_gate = nn.Linear(h, i, bias=False)
        self.w_up = nn.Linear(h, i, bias=False)
        self.w_down = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class MoE(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.e = c["num_experts"]
        self.k = c.get("top_k", 2)
        self.norm_topk = c.get("norm_topk_prob", True)
        self.gate = nn.Linear(h, self.e, bias=False)
        self.experts = nn.ModuleList(SwiGLU(h, c["moe_intermediate_size"]) for _ in range(self.e))
        ns = c.get("num_shared_experts", 0)
        self.shared = None
        if ns:
            width = ns * (c.get("shared_expert_intermediate_size") or c["moe_intermediate_size"])
            self.shared = SwiGLU(h, width)

    def forward(self, x):
        logits = self.gate(x)
        probs = logits.softmax(-1)
        w, idx = probs.topk(self.k, dim=-1)
        if self.norm_topk:
            w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(self.e):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            y = self.experts[e](x.index_select(0, tok)) * w[tok, slot, None]
            out = out.index_add(0, tok, y.to(out.dtype))  # bf16 under autocast
        if self.shared is not None:
            out = out + self.shared(x)
        f = torch.zeros(self.e).index_add_(0, idx.reshape(-1), torch.ones(idx.numel())) / idx.numel()
        aux = self.e * (f * probs.mean(0)).sum()
        z = torch.logsumexp(logits, -1).pow(2).mean()
        return out, aux, z


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        eps = c.get("rms_norm_eps", 1e-6)
        self.n1, self.n2 = RMSNorm(c["hidden_size"], eps), RMSNorm(c["hidden_size"], eps)
        self.attn = Attention(c)
        self.moe = MoE(c)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.n1(x), cos, sin, mask)
        b, t, h = x.shape
        y, aux, z = self.moe(self.n2(x).reshape(b * t, h))
        return x + y.view(b, t, h), aux, z


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["num_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c.get("rms_norm_eps", 1e-6))
        self.head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)

    def forward(self, tokens, targets):
        b, t = tokens.shape
        hd = self.blocks[0].attn.hd
        inv = 1.0 / (self.c.get("rope_theta", 10000.0) ** (torch.arange(0, hd, 2) / hd))
        ang = torch.arange(t)[:, None] * inv[None, :]
        cos = torch.cat([ang.cos(), ang.cos()], -1)[None, :, None, :]
        sin = torch.cat([ang.sin(), ang.sin()], -1)[None, :, None, :]
        mask = torch.full((t, t), float("-inf")).triu(1)
        x = self.embed(tokens)
        aux_sum, z_sum = 0.0, 0.0
        for blk in self.blocks:
            x, aux, z = blk(x, cos, sin, mask)
            aux_sum, z_sum = aux_sum + aux, z_sum + z
        logits = self.head(self.norm(x))
        ce = F.cross_entropy(logits.view(b * t, -1), targets.view(-1))
        return (ce + self.c.get("router_aux_loss_coef", 0.01) * aux_sum
                + self.c.get("router_z_loss_coef", 0.0) * z_sum)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--precision", choices=("f32", "bf16"), default="f32")
    args = ap.parse_args()
    cfg = json.load(open(args.config))
    c, data, optim = cfg["model"], cfg["data"], cfg.get("optim", {})
    if not c.get("vocab_size"):
        raise SystemExit(f"{args.config}: model.vocab_size must be set for the baseline")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Model(c)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.normal_(p, std=0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=optim.get("lr", 1e-3),
                            betas=(optim.get("beta1", 0.9), optim.get("beta2", 0.95)),
                            weight_decay=optim.get("weight_decay", 0.0), foreach=True)
    b, t = data["batch_size"], data["seq_len"]
    phases = {"forward": [], "backward": [], "optimizer": []}
    steps = []
    for i in range(args.warmup + args.steps):
        tokens = torch.randint(0, c["vocab_size"], (b, t))
        targets = torch.randint(0, c["vocab_size"], (b, t))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = model(tokens, targets)
        t1 = time.perf_counter()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        if i >= args.warmup:
            phases["forward"].append(t1 - t0)
            phases["backward"].append(t2 - t1)
            phases["optimizer"].append(t3 - t2)
            steps.append(t3 - t0)
    med = statistics.median(steps)
    print(json.dumps({"impl": "pytorch-eager", "torch": torch.__version__, "threads": args.threads,
                      "precision": args.precision,
                      "batch": b, "seq_len": t, "tokens_per_s": b * t / med, "step_seconds": med,
                      "phase_seconds": {k: statistics.median(v) for k, v in phases.items()},
                      "parameters": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    main()
