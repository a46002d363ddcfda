#!/usr/bin/python3
"""SIGTERM drains `switchyard serve` within --drain-seconds, whatever the clients do (issue 46,
finding 2's second half): connections trickling their headers a byte at a time (a slowloris), an
idle keep-alive connection and an answered request's connection are all open when SIGTERM comes;
the server must close them, exit 0, and take no longer than the drain deadline plus a margin.
Before the fix the trickling connections kept it running 40 s and more after SIGTERM.

    serve_drain_test.py SWITCHYARD WORK_DIR
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tiny_checkpoint import train_tiny  # noqa: E402

DRAIN = 2.0
MARGIN = 8.0
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def main():
    binary, work = sys.argv[1], os.path.abspath(sys.argv[2])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    train_tiny(binary, f"{work}/ckpt")
    server = subprocess.Popen([binary, "serve", "--model", f"{work}/ckpt", "--port", "0",
                               "--parallel", "1", "--http-threads", "8", "--drain-seconds",
                               str(DRAIN)], stderr=subprocess.PIPE, text=True)
    port = None
    log = []
    deadline = time.time() + 120
    while port is None and time.time() < deadline:
        line = server.stderr.readline()
        if not line:
            break
        log.append(line)
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
    if port is None:
        server.kill()
        print("FAIL: the server did not start:\n" + "".join(log))
        return 1
    rest = []
    reader = threading.Thread(target=lambda: rest.extend(server.stderr), daemon=True)
    reader.start()

    # An answered request on a keep-alive connection that stays open.
    body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 2}).encode()
    kept = socket.create_connection(("127.0.0.1", port))
    kept.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    kept.settimeout(30)
    answer = kept.recv(65536)
    check(answer.startswith(b"HTTP/1.1 200"), f"a request answered: {answer[:40]!r}")

    # A slowloris: 24 connections (more than --http-threads) trickling a header byte at a time.
    stop = threading.Event()
    trickling = []

    def trickle(sock):
        try:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            while not stop.is_set():
                sock.sendall(b"X")
                time.sleep(0.3)
        except OSError:
            pass  # the server closed it: what the drain must do

    for _ in range(24):
        s = socket.create_connection(("127.0.0.1", port))
        trickling.append(s)
        threading.Thread(target=trickle, args=(s,), daemon=True).start()
    time.sleep(1.0)

    start = time.time()
    server.send_signal(signal.SIGTERM)
    try:
        code = server.wait(timeout=DRAIN + MARGIN + 30)
    except subprocess.TimeoutExpired:
        server.kill()
        code = None
    took = time.time() - start
    stop.set()
    reader.join(timeout=5)
    check(code == 0, f"the server exits 0 after SIGTERM (exit {code})")
    check(took <= DRAIN + MARGIN,
          f"within --drain-seconds {DRAIN:g} + {MARGIN:g} s: took {took:.1f} s")
    closed = [line for line in rest if line.startswith("drain:")]
    check(len(closed) == 1 and "closed" in closed[0], f"it says what it closed: {closed}")
    for s in trickling + [kept]:
        s.close()
    if failures:
        print(f"FAIL: {len(failures)} checks failed")
        return 1
    print(f"PASS: SIGTERM with 24 trickling connections and a keep-alive one: exit 0 in "
          f"{took:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
