#!/usr/bin/python3
"""`switchyard serve`: a client that disconnects before its non-streamed answer is ready gets its
request cancelled (issue 19, "a client disconnecting ... frees its slot").

Usage: /usr/bin/python3 serve_disconnect_test.py SWITCHYARD_BINARY WORK_DIR

The model is hf_moe_oracle.py's Mixtral widened (hidden 256, 8 experts of 1024) so that a long
answer takes seconds on the CPU. With --parallel 1 (one slot):
  - a whole non-streamed answer of N tokens is timed (N grown until it takes at least 2 s);
  - the same request is sent on a raw socket that is closed 0.3 s later: /metrics must not count
    it as gone before the close, and must count it with code 499 well before the whole answer's
    time after it, and a short request sent then (which needs
    the one slot) must be answered well before it too;
  - the server still answers /health.
Skipped (77) without numpy and torch.
"""
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "inference"))
import hf_moe_oracle as oracle  # noqa: E402  exits 77 without numpy and torch

failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def post(port, body, timeout=120):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        return r.read().decode()


def count_499(port):
    m = re.search(r'switchyard_requests_total\{endpoint="completions",code="499"\} (\d+)',
                  get(port, "/metrics"))
    return int(m.group(1)) if m else 0


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    model_dir = os.path.join(work, "wide_mixtral")
    config = dict(oracle.CASES["mixtral"][0])
    config.update(hidden_size=256, intermediate_size=1024, num_local_experts=8,
                  max_position_embeddings=8192)
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        oracle.write_model(model_dir, config,
                           oracle.make_tensors("mixtral", config, oracle.np.random.default_rng(3)),
                           "F32")
    proc = subprocess.Popen([binary, "serve", "--model", model_dir, "--host", "127.0.0.1",
                             "--port", "0", "--threads", "2", "--parallel", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    for line in proc.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    if port is None:
        print("FAIL: the server did not start")
        return 1
    try:
        prompt = [5, 17, 2, 40, 9]
        n, full = 250, 0.0
        while True:
            body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True}
            start = time.time()
            answer = post(port, body)
            full = time.time() - start
            got = len(answer["choices"][0]["token_ids"])
            if full >= 2.0 or n >= 8000:
                break
            n = min(8000, n * 2)
        check(got == n and full >= 2.0, f"a whole answer of {got} tokens takes {full:.2f} s")

        before = count_499(port)
        raw = socket.create_connection(("127.0.0.1", port))
        payload = json.dumps(body).encode()
        raw.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Content-Type: application/json\r\nContent-Length: " +
                    str(len(payload)).encode() + b"\r\n\r\n" + payload)
        time.sleep(0.3)
        check(count_499(port) == before, "a client still connected is not counted as gone")
        raw.close()
        closed = time.time()
        while count_499(port) == before and time.time() - closed < full * 3:
            time.sleep(0.05)
        noticed = time.time() - closed
        check(count_499(port) == before + 1 and noticed < full / 2,
              f"the disconnect is counted with code 499 after {noticed:.2f} s "
              f"(the whole answer takes {full:.2f} s)")
        start = time.time()
        short = post(port, {"prompt": prompt, "max_tokens": 4, "temperature": 0})
        waited = time.time() - start
        check(len(short["choices"][0]["token_ids"]) >= 1 and waited < full / 2,
              f"the one slot is free again: a short request answered in {waited:.2f} s")
        check(json.loads(get(port, "/health")).get("status") == "ok", "/health answers ok")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    if failures:
        print(f"FAIL: {len(failures)} checks failed")
        return 1
    print("PASS: serve_disconnect_test")
    return 0


if __name__ == "__main__":
    sys.exit(main())
