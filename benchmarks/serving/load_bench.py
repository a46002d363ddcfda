#!/usr/bin/python3
"""Load benchmark of `switchyard serve`: CLIENTS concurrent streaming clients for SECONDS.

Usage:
  load_bench.py --switchyard build/switchyard --model DIR [--clients 64 --seconds 60
                --warmup 15 --max-tokens 16 --prompt-ids 8,19,23,16,27,1 | --prompt TEXT
                --parallel 8 --threads N --serve-arg=--policy=ondemand ...] [--json OUT.json]

Starts the server on 127.0.0.1 (a free port), checks one answer, then runs CLIENTS threads, each
with its own official `openai` client, sending streamed completions (greedy, max_tokens) back to
back: WARMUP seconds that are not counted (every batch shape the server will see is seen, and its
memory grown to it), then SECONDS that are: the requests sent then, each finished even past the
deadline. Every second it reads the server's resident memory (VmRSS of /proc/PID/status).
Reports:
  requests/s and tokens/s: requests that completed, and tokens that arrived, within the SECONDS
  window (whenever they were sent), over SECONDS,
  time to first token p50 / p99 (from sending the request to the first chunk with a token) and
  inter-token gap p99 (between consecutive token chunks of one request), of the requests sent
  within the window,
  failed requests (any exception or a finish other than length/stop), and
  RSS at the end of the warm-up, at the end and its maximum (flat: the end within 10% of the
  start); --json has every sample.
Then SIGTERM, and the server's exit status. Prints a Markdown table row and, with --json, writes
every figure.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

try:
    import openai
except ImportError as e:
    print(f"error: the openai client is not installed ({e}); run scripts/install-deps.sh")
    sys.exit(2)


def percentile(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def start_server(args):
    cmd = [args.switchyard, "serve", "--model", args.model, "--host", "127.0.0.1", "--port", "0",
           "--parallel", str(args.parallel), "--model-name", "bench"]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    cmd += args.serve_arg
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = []
    deadline = time.time() + 300
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        log.append(line)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [log.append(l) for l in proc.stderr],
                             daemon=True).start()
            return proc, int(m.group(1)), log
    proc.kill()
    raise RuntimeError("the server did not start:\n" + "".join(log))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--switchyard", default="build/switchyard")
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--warmup", type=float, default=15)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--prompt-ids", default="8,19,23,16,27,1")
    ap.add_argument("--prompt", default=None, help="a text prompt (a model with a tokenizer)")
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="more `switchyard serve` flags, one per use: --serve-arg=--policy=ring")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    args.serve_arg = [a for arg in args.serve_arg for a in arg.split("=", 1)]
    prompt = args.prompt if args.prompt is not None else [int(t) for t in
                                                          args.prompt_ids.split(",")]

    proc, port, log = start_server(args)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        warm = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=600)
        warm.completions.create(model="bench", prompt=prompt, max_tokens=args.max_tokens,
                                temperature=0)
        rss = []
        lock = threading.Lock()
        ttfts, gaps, tokens, done, failures = [], [], [0], [0], []
        window_tokens, window_done = [0], [0]
        warm_end = time.time() + args.warmup
        stop_at = warm_end + args.seconds

        def client():
            c = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=600)
            while time.time() < stop_at:
                sent = time.time()
                counted = sent >= warm_end
                first, last, n, finish, local_gaps = None, None, 0, None, []
                try:
                    for chunk in c.completions.create(model="bench", prompt=prompt,
                                                      max_tokens=args.max_tokens, temperature=0,
                                                      stream=True):
                        choice = chunk.choices[0]
                        ids = getattr(choice, "token_ids", None) or []
                        now = time.time()
                        if ids:
                            if warm_end <= now < stop_at:
                                with lock:
                                    window_tokens[0] += len(ids)
                            if first is None:
                                first = now - sent
                            elif last is not None:
                                local_gaps.append(now - last)
                            last = now
                            n += len(ids)
                        finish = choice.finish_reason or finish
                except Exception as e:  # noqa: BLE001
                    with lock:
                        failures.append(f"{type(e).__name__}: {e}")
                    continue
                if warm_end <= time.time() < stop_at:
                    with lock:
                        window_done[0] += 1
                if not counted:
                    if finish not in ("length", "stop") or first is None:
                        with lock:
                            failures.append(f"warm-up: finish {finish}, first token {first}")
                    continue
                with lock:
                    if finish not in ("length", "stop") or first is None:
                        failures.append(f"finish {finish}, first token {first}")
                        continue
                    ttfts.append(first)
                    gaps.extend(local_gaps)
                    tokens[0] += n
                    done[0] += 1

        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        while time.time() < warm_end:
            time.sleep(0.1)
        start = time.time()
        rss.append((0.0, rss_mib(proc.pid)))
        while any(t.is_alive() for t in threads):
            time.sleep(1.0)
            rss.append((time.time() - start, rss_mib(proc.pid)))
        wall = time.time() - start
        for t in threads:
            t.join()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()

    rss_values = [r for _, r in rss]
    result = {
        "model": args.model, "clients": args.clients, "seconds": args.seconds,
        "max_tokens": args.max_tokens, "parallel": args.parallel, "serve_args": args.serve_arg,
        "wall_seconds": wall, "requests": done[0], "failed": len(failures),
        "requests_per_second": window_done[0] / args.seconds,
        "tokens_per_second": window_tokens[0] / args.seconds,
        "ttft_p50_ms": 1e3 * percentile(ttfts, 0.5), "ttft_p99_ms": 1e3 * percentile(ttfts, 0.99),
        "inter_token_gap_p99_ms": 1e3 * percentile(gaps, 0.99),
        "inter_token_gap_p50_ms": 1e3 * percentile(gaps, 0.5),
        "rss_start_mib": rss_values[0], "rss_end_mib": rss_values[-1],
        "rss_max_mib": max(rss_values), "rss_samples": rss, "server_exit": code,
        "warmup_seconds": args.warmup,
        "failures": failures[:10], "loadavg": open("/proc/loadavg").read().split()[:3],
        "nproc": os.cpu_count(),
    }
    print("| model | clients | max_tokens | parallel | requests/s | tokens/s | TTFT p50 / p99 (ms) "
          "| inter-token p99 (ms) | failed | RSS start / end / max (MiB) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print(f"| {os.path.basename(os.path.normpath(args.model))} | {args.clients} | "
          f"{args.max_tokens} | {args.parallel} | {result['requests_per_second']:.1f} | "
          f"{result['tokens_per_second']:.0f} | {result['ttft_p50_ms']:.0f} / "
          f"{result['ttft_p99_ms']:.0f} | {result['inter_token_gap_p99_ms']:.0f} | "
          f"{len(failures)} of {done[0] + len(failures)} | {result['rss_start_mib']:.0f} / "
          f"{result['rss_end_mib']:.0f} / {result['rss_max_mib']:.0f} |")
    for f in failures[:5]:
        print("failure:", f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    flat = result["rss_end_mib"] <= 1.1 * result["rss_start_mib"]
    return 0 if not failures and code == 0 and flat else 1


if __name__ == "__main__":
    sys.exit(main())
