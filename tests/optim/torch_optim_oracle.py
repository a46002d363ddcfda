#!/usr/bin/python3
"""PyTorch oracle for tests/optim/optimizer_torch_test.cc.

Reads initial params and a sequence of gradients written by the C++ test, runs the same training
loop with torch.optim.{AdamW,Adam,SGD}, torch.nn.utils.clip_grad_norm_ and a LambdaLR that
implements Hugging Face's warmup + cosine (with min lr) schedule, and writes the final state.

Files (raw little-endian, groups concatenated in order):
  in --dir:  params.f32 (sum(sizes)), grads.f32 (steps * sum(sizes))
  out --out: params_out.f32, m_out.f32 (exp_avg or momentum_buffer), v_out.f32 (exp_avg_sq; Adam only),
       norms.f32 (clip_grad_norm_ result per step), lrs.f64 (lr used by each step),
       params_bf16.u16 / params_f16.u16 (final params rounded by torch's .to())

With --batch FILE, each line of FILE holds the arguments of one run, so that one Python process
(and one slow `import torch`) serves every case.
"""
import argparse
import math
import os
import shlex
import sys

# Exit status 77 (the automake "skip" code) tells the C++ test that torch is missing, so it skips
# instead of failing.
EXIT_NO_TORCH = 77
try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"cannot import torch/numpy: {e}", file=sys.stderr)
    sys.exit(EXIT_NO_TORCH)


def hf_cosine_with_min_lr(warmup, total, min_lr_rate):
    # transformers.optimization._get_cosine_schedule_with_warmup_lr_lambda with min_lr_rate
    # (get_cosine_with_min_lr_schedule_with_warmup), num_cycles = 0.5.
    def lr_lambda(step):
        if step < warmup:
            return float(step) / float(max(1, warmup))
        progress = float(step - warmup) / float(max(1, total - warmup))
        factor = 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress))
        factor = factor * (1 - min_lr_rate) + min_lr_rate
        return max(0.0, factor)
    return lr_lambda


def run(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--optimizer", choices=["adamw", "adam", "sgd"], required=True)
    ap.add_argument("--sizes", required=True, help="comma-separated group sizes")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--min-lr", type=float, required=True)
    ap.add_argument("--warmup", type=int, required=True)
    ap.add_argument("--total", type=int, required=True)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--dampening", type=float, default=0.0)
    ap.add_argument("--nesterov", type=int, default=0)
    ap.add_argument("--max-norm", type=float, required=True)
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)

    sizes = [int(s) for s in a.sizes.split(",")]
    total_n = sum(sizes)
    flat = np.fromfile(os.path.join(a.dir, "params.f32"), dtype=np.float32)
    grads = np.fromfile(os.path.join(a.dir, "grads.f32"), dtype=np.float32)
    assert flat.size == total_n and grads.size == a.steps * total_n, "input sizes do not match"
    grads = grads.reshape(a.steps, total_n)

    offsets = np.cumsum([0] + sizes)
    params = [torch.nn.Parameter(torch.from_numpy(flat[offsets[i]:offsets[i + 1]].copy()))
              for i in range(len(sizes))]
    if a.optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
                                weight_decay=a.weight_decay, foreach=False)
    elif a.optimizer == "adam":
        opt = torch.optim.Adam(params, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
                               weight_decay=a.weight_decay, foreach=False)
    else:
        opt = torch.optim.SGD(params, lr=a.lr, momentum=a.momentum, dampening=a.dampening,
                              weight_decay=a.weight_decay, nesterov=bool(a.nesterov),
                              foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, hf_cosine_with_min_lr(a.warmup, a.total, a.min_lr / a.lr))

    norms, lrs = [], []
    for s in range(a.steps):
        for i, p in enumerate(params):
            p.grad = torch.from_numpy(grads[s, offsets[i]:offsets[i + 1]].copy())
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, a.max_norm)))
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()

    def cat(tensors):
        return np.concatenate([t.detach().numpy().astype(np.float32) for t in tensors])

    cat(params).tofile(os.path.join(a.out, "params_out.f32"))
    if a.optimizer == "sgd":
        if a.momentum != 0:
            cat([opt.state[p]["momentum_buffer"] for p in params]).tofile(
                os.path.join(a.out, "m_out.f32"))
    else:
        cat([opt.state[p]["exp_avg"] for p in params]).tofile(os.path.join(a.out, "m_out.f32"))
        cat([opt.state[p]["exp_avg_sq"] for p in params]).tofile(
            os.path.join(a.out, "v_out.f32"))
    np.asarray(norms, dtype=np.float32).tofile(os.path.join(a.out, "norms.f32"))
    np.asarray(lrs, dtype=np.float64).tofile(os.path.join(a.out, "lrs.f64"))
    allp = torch.cat([p.detach() for p in params])
    allp.to(torch.bfloat16).view(torch.int16).numpy().astype(np.uint16).tofile(
        os.path.join(a.out, "params_bf16.u16"))
    allp.to(torch.float16).view(torch.int16).numpy().astype(np.uint16).tofile(
        os.path.join(a.out, "params_f16.u16"))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--batch":
        with open(sys.argv[2]) as f:
            for line in f:
                if line.strip():
                    run(shlex.split(line))
    else:
        run(sys.argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
