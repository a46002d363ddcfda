#!/usr/bin/python3
"""Load benchmark of `switchyard serve`: CLIENTS concurrent streaming clients for SECONDS.

Usage:
  load_bench.py --switchyard build/switchyard --model DIR [--clients 64 --seconds 60
                --warmup 15 --max-tokens 16 --prompt-ids 8,19,23,16,27,1 | --prompt TEXT
                --parallel 8 --threads N --serve-arg=--policy=ondemand ...
                --hostile-every 300] [--json OUT.json]

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

Every answer's token ids are compared with the first (greedy) answer's: a different one counts as
a wrong answer. A client error that is a lost connection (reset, refused, closed without an
answer) is also counted apart, as a reset.

--hostile-every W (the soak of issue 46): the SECONDS are cut into windows of W seconds that
alternate, quiet first; in every second window a hostile mix attacks the server from 127.0.0.2
alongside the valid clients (hostile_mix.py: header floods, a slowloris, trickled bodies,
half-closed and idle connections, malformed bodies, reconnecting as the server cuts them), and in
the warm-up's second half, so that the starting memory holds what the attack costs. The
figures are reported for the requests sent in the quiet windows and in the hostile ones, side by
side, with the p99 of the whole request's latency too.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile_mix  # noqa: E402

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
    ap.add_argument("--hostile-every", type=float, default=0,
                    help="alternate quiet and hostile windows of this many seconds (0: quiet)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    args.serve_arg = [a for arg in args.serve_arg for a in arg.split("=", 1)]
    prompt = args.prompt if args.prompt is not None else [int(t) for t in
                                                          args.prompt_ids.split(",")]

    proc, port, log = start_server(args)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        warm = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=600)
        reference = list(warm.completions.create(model="bench", prompt=prompt,
                                                 max_tokens=args.max_tokens,
                                                 temperature=0).choices[0].token_ids)
        rss = []
        lock = threading.Lock()
        phases = ("quiet", "hostile") if args.hostile_every > 0 else ("quiet",)
        stats = {p: {"ttfts": [], "gaps": [], "latencies": [], "done": 0, "tokens": 0}
                 for p in phases}
        failures, resets, wrong = [], [0], [0]
        window_tokens, window_done = [0], [0]
        warm_end = time.time() + args.warmup
        stop_at = warm_end + args.seconds

        def phase_at(t):
            if args.hostile_every <= 0 or t < warm_end:
                return "quiet"
            return phases[int((t - warm_end) // args.hostile_every) % 2]

        def client():
            c = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=600)
            while time.time() < stop_at:
                sent = time.time()
                counted = sent >= warm_end
                first, last, finish, local_gaps, ids_seen = None, None, None, [], []
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
                            ids_seen += ids
                        finish = choice.finish_reason or finish
                except Exception as e:  # noqa: BLE001
                    with lock:
                        failures.append(f"{type(e).__name__}: {e}")
                        if isinstance(e, openai.APIConnectionError):
                            resets[0] += 1
                    continue
                ended = time.time()
                if warm_end <= ended < stop_at:
                    with lock:
                        window_done[0] += 1
                with lock:
                    if finish not in ("length", "stop") or first is None:
                        failures.append(f"finish {finish}, first token {first}")
                        continue
                    if ids_seen != reference:
                        wrong[0] += 1
                        failures.append(f"wrong tokens {ids_seen} (expected {reference})")
                        continue
                    if not counted:
                        continue
                    st = stats[phase_at(sent)]
                    st["ttfts"].append(first)
                    st["gaps"].extend(local_gaps)
                    st["latencies"].append(ended - sent)
                    st["tokens"] += len(ids_seen)
                    st["done"] += 1

        attack = hostile_mix.HostileMix("127.0.0.1", port, source="127.0.0.2")
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        while time.time() < warm_end:
            # The warm-up's second half runs the hostile mix too, so that the memory it holds
            # (a pool per connection) is in the starting figure, and the windows start quiet.
            if args.hostile_every > 0 and time.time() > warm_end - args.warmup / 2:
                attack.start()
            time.sleep(0.1)
        attack.stop()
        start = time.time()
        rss.append((0.0, rss_mib(proc.pid)))
        while any(t.is_alive() for t in threads):
            time.sleep(1.0)
            now = time.time()
            if args.hostile_every > 0 and now < stop_at and phase_at(now) == "hostile":
                attack.start()
            else:
                attack.stop()
            rss.append((now - start, rss_mib(proc.pid)))
        attack.stop()
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
    done = sum(st["done"] for st in stats.values())
    result = {
        "model": args.model, "clients": args.clients, "seconds": args.seconds,
        "max_tokens": args.max_tokens, "parallel": args.parallel, "serve_args": args.serve_arg,
        "hostile_every": args.hostile_every, "wall_seconds": wall, "requests": done,
        "failed": len(failures), "resets": resets[0], "wrong_answers": wrong[0],
        "requests_per_second": window_done[0] / args.seconds,
        "tokens_per_second": window_tokens[0] / args.seconds,
        "rss_start_mib": rss_values[0], "rss_end_mib": rss_values[-1],
        "rss_max_mib": max(rss_values), "rss_samples": rss, "server_exit": code,
        "warmup_seconds": args.warmup,
        "failures": failures[:10], "loadavg": open("/proc/loadavg").read().split()[:3],
        "nproc": os.cpu_count(), "phases": {},
    }
    if args.hostile_every > 0:
        result["attacks"] = attack.counts()
    for p, st in stats.items():
        result["phases"][p] = {
            "requests": st["done"], "tokens": st["tokens"],
            "ttft_p50_ms": 1e3 * percentile(st["ttfts"], 0.5),
            "ttft_p99_ms": 1e3 * percentile(st["ttfts"], 0.99),
            "inter_token_gap_p50_ms": 1e3 * percentile(st["gaps"], 0.5),
            "inter_token_gap_p99_ms": 1e3 * percentile(st["gaps"], 0.99),
            "latency_p50_ms": 1e3 * percentile(st["latencies"], 0.5),
            "latency_p99_ms": 1e3 * percentile(st["latencies"], 0.99),
        }
    # The figures of the quiet requests stay at the top level (as before the hostile mix).
    result.update({k: v for k, v in result["phases"]["quiet"].items()
                   if k not in ("requests", "tokens")})
    print("| model | clients | max_tokens | parallel | windows | requests/s | tokens/s | TTFT p50 / "
          "p99 (ms) | inter-token p99 (ms) | latency p99 (ms) | failed (resets, wrong) | "
          "RSS start / end / max (MiB) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for p, ph in result["phases"].items():
        print(f"| {os.path.basename(os.path.normpath(args.model))} | {args.clients} | "
              f"{args.max_tokens} | {args.parallel} | {p} | "
              f"{ph['requests'] / (args.seconds / len(phases)):.1f} | "
              f"{ph['tokens'] / (args.seconds / len(phases)):.0f} | {ph['ttft_p50_ms']:.0f} / "
              f"{ph['ttft_p99_ms']:.0f} | {ph['inter_token_gap_p99_ms']:.0f} | "
              f"{ph['latency_p99_ms']:.0f} | {len(failures)} of {done + len(failures)} "
              f"({resets[0]}, {wrong[0]}) | {result['rss_start_mib']:.0f} / "
              f"{result['rss_end_mib']:.0f} / {result['rss_max_mib']:.0f} |")
    if args.hostile_every > 0:
        print("attacks:", json.dumps(result["attacks"]))
    for f in failures[:5]:
        print("failure:", f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    flat = result["rss_end_mib"] <= 1.1 * result["rss_start_mib"]
    return 0 if not failures and code == 0 and flat else 1


if __name__ == "__main__":
    sys.exit(main())
