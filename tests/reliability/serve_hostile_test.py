#!/usr/bin/python3
"""Hostile clients against a real `switchyard serve` (issue 46, findings 1 and 2 and its "Checked"
list). Attackers connect from 127.0.0.2 (and .3, .4), valid clients from 127.0.0.1; every attack
must leave the valid clients served with the right tokens, the server's memory bounded, and the
server exiting 0 on time when SIGTERM comes with every attack still open.

  - header floods: endless small headers (finding 1: 46 MB per connection cost 500 MB that was
    never returned), too many headers, one huge header: 431, the connection closed, memory flat
  - slowloris: 300 connections trickling their headers a byte at a time, more than the old
    thread-per-connection pool (finding 2: every valid request timed out): valid requests are
    answered at once, and the trickling connections are cut at --request-seconds
  - a body trickled a byte at a time, an idle connection: cut at their deadlines
  - half-closed sockets, invalid UTF-8, JSON nested 100000 deep, unsupported fields: 4xx, alive
  - the connection limits: past --max-connections-per-client and --max-connections, a 503 that
    names the flag, not a hang; served again once connections close
  - SIGTERM with all of it open: exit 0 within --drain-seconds and a margin

    serve_hostile_test.py SWITCHYARD WORK_DIR
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

REQUEST_SECONDS = 3.0
KEEP_ALIVE_SECONDS = 3.0
DRAIN = 2.0
MARGIN = 8.0
ATTACKER, ATTACKER2, ATTACKER3 = "127.0.0.2", "127.0.0.3", "127.0.0.4"
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


class Server:
    def __init__(self, binary, model, *extra):
        self.proc = subprocess.Popen(
            [binary, "serve", "--model", model, "--port", "0", "--parallel", "2", "--threads",
             "1", "--http-threads", "2", "--request-seconds", str(REQUEST_SECONDS),
             "--keep-alive-seconds", str(KEEP_ALIVE_SECONDS), "--drain-seconds", str(DRAIN),
             *extra], stderr=subprocess.PIPE, text=True)
        self.log = []
        self.port = None
        deadline = time.time() + 120
        while self.port is None and time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        if self.port is None:
            self.proc.kill()
            raise RuntimeError("the server did not start:\n" + "".join(self.log))
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()

    def rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
        return -1.0

    def connect(self, source="127.0.0.1", timeout=30):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout,
                                     source_address=(source, 0))
        return s


def read_response(sock, timeout=30):
    """(status, headers text, body bytes) of one HTTP/1.1 response, or (None, "", data) when the
    connection closes first."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None, "", data
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    head = head.decode("latin-1")
    status = int(head.split(" ", 2)[1])
    m = re.search(r"(?i)content-length:\s*(\d+)", head)
    if m:
        while len(body) < int(m.group(1)):
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    return status, head, body


def post(path, body, content_type="application/json"):
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload


VALID = {"prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0}


def valid_request(server, timeout=30):
    """A valid client's completion: (token ids or None, seconds)."""
    start = time.time()
    try:
        with server.connect(timeout=timeout) as s:
            s.sendall(post("/v1/completions", VALID))
            status, _, body = read_response(s, timeout)
        if status != 200:
            return None, time.time() - start
        return json.loads(body)["choices"][0]["token_ids"], time.time() - start
    except OSError:
        return None, time.time() - start


def closed_within(sock, seconds):
    """Seconds until the server closes `sock` (reads EOF or a reset), or None past `seconds`."""
    start = time.time()
    sock.settimeout(0.2)
    while time.time() - start < seconds:
        try:
            if not sock.recv(65536):
                return time.time() - start
        except socket.timeout:
            continue
        except OSError:
            return time.time() - start
    return None


def header_flood(server, source, results):
    """Small headers without end, as fast as the server takes them: how many bytes it took before
    it answered or closed."""
    sent = 0
    try:
        with server.connect(source) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            line = b"X-Flood: " + b"a" * 32 + b"\r\n"
            block = line * 2048
            while sent < (64 << 20):
                s.sendall(block)
                sent += len(block)
    except OSError:
        pass
    results.append(sent)


def main():
    binary, work = sys.argv[1], os.path.abspath(sys.argv[2])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model = train_tiny(binary, f"{work}/ckpt")
    server = Server(binary, model, "--max-connections-per-client", "400")
    reference, _ = valid_request(server)
    check(reference is not None and len(reference) == 4, f"a valid request: {reference}")
    for _ in range(5):
        valid_request(server)
    rss_start = server.rss_mib()

    # Finding 1: header floods from six connections at once.
    sent = []
    floods = [threading.Thread(target=header_flood, args=(server, ATTACKER, sent))
              for _ in range(6)]
    for t in floods:
        t.start()
    for t in floods:
        t.join(timeout=60)
    rss_flood = server.rss_mib()
    check(len(sent) == 6 and max(sent) < (4 << 20),
          f"six header floods are cut early: at most {max(sent or [0]) / 1024:.0f} KiB taken "
          "from one")
    check(rss_flood - rss_start < 32,
          f"memory after the floods: {rss_start:.0f} -> {rss_flood:.0f} MiB")
    with server.connect(ATTACKER) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n" +
                  b"".join(b"X-H%d: 1\r\n" % i for i in range(150)) + b"\r\n")
        status, _, body = read_response(s)
    check(status == 431 and b"headers" in body, f"150 headers: {status} {body[:100]!r}")
    with server.connect(ATTACKER) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * (200 << 10) + b"\r\n\r\n")
        status, _, _ = read_response(s)
    check(status == 431, f"a 200 KiB header: {status}")

    # Finding 2: a slowloris of 300 connections, each trickling its headers.
    stop = threading.Event()
    cut_after = []

    def trickle(sock, what):
        start = time.time()
        try:
            sock.sendall(what)
            sock.settimeout(0.5)
            while not stop.is_set():
                sock.sendall(b"X")
                try:
                    if not sock.recv(1):
                        break
                except socket.timeout:
                    pass
        except OSError:
            pass
        if not stop.is_set():
            cut_after.append(time.time() - start)

    loris = []
    for _ in range(300):
        s = server.connect(ATTACKER)
        loris.append(s)
        threading.Thread(target=trickle, args=(s, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"),
                         daemon=True).start()
    time.sleep(0.5)
    answers, times = [], []
    for _ in range(10):
        ids, took = valid_request(server, timeout=20)
        answers.append(ids)
        times.append(took)
    check(all(a == reference for a in answers) and max(times) < 5.0,
          f"10 valid requests during a 300-connection slowloris: all right tokens "
          f"({sum(a == reference for a in answers)}/10), slowest {max(times):.2f} s")
    time.sleep(REQUEST_SECONDS + 2.0)
    check(len(cut_after) >= 290 and max(cut_after) < REQUEST_SECONDS + 3.0,
          f"the trickling connections are cut at --request-seconds {REQUEST_SECONDS:g}: "
          f"{len(cut_after)}/300, the last after {max(cut_after or [0]):.1f} s")
    stop.set()
    for s in loris:
        s.close()

    # A body trickled a byte at a time, and an idle connection.
    with server.connect(ATTACKER) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100000\r\n\r\n{")
        stop_body = threading.Event()

        def body_drip():
            try:
                while not stop_body.is_set():
                    s.sendall(b" ")
                    time.sleep(0.2)
            except OSError:
                pass
        threading.Thread(target=body_drip, daemon=True).start()
        took = closed_within(s, REQUEST_SECONDS + 5)
        stop_body.set()
    check(took is not None and took < REQUEST_SECONDS + 3,
          f"a trickled body is cut at --request-seconds: after {took}")
    with server.connect(ATTACKER) as s:
        took = closed_within(s, KEEP_ALIVE_SECONDS + 5)
    check(took is not None and took < KEEP_ALIVE_SECONDS + 3,
          f"an idle connection is cut at --keep-alive-seconds: after {took}")

    # Half-closed sockets, malformed bodies, unsupported fields.
    with server.connect(ATTACKER) as s:
        s.sendall(post("/v1/completions", VALID))
        s.shutdown(socket.SHUT_WR)
        status, _, _ = read_response(s)
    check(status in (None, 200), f"a half-closed client: answered or closed ({status})")
    bad_bodies = [
        ("invalid UTF-8", b'{"prompt": "\xff\xfe\xc3", "max_tokens": 2}'),
        ("JSON nested 100000 deep", b'{"prompt": ' + b"[" * 100000 + b"]" * 100000 + b"}"),
        ("a truncated body", b'{"prompt": [1, 2'),
        ("best_of", json.dumps(dict(VALID, best_of=3)).encode()),
        ("typical_p", json.dumps(dict(VALID, typical_p=0.9)).encode()),
        ("mirostat", json.dumps(dict(VALID, mirostat=2)).encode()),
        ("guided_json", json.dumps(dict(VALID, guided_json={})).encode()),
    ]
    for what, body in bad_bodies:
        with server.connect(ATTACKER) as s:
            s.sendall(post("/v1/completions", body))
            status, _, text = read_response(s)
        check(status == 400 and b'"error"' in text, f"{what}: {status} {text[:90]!r}")
    ids, _ = valid_request(server)
    check(ids == reference, f"after them, a valid request: {ids}")

    # SIGTERM with a flood, a slowloris, a half-closed socket and an idle connection open.
    stop2 = threading.Event()
    open_socks = []
    for _ in range(50):
        s = server.connect(ATTACKER2)
        open_socks.append(s)
        threading.Thread(target=trickle, args=(s, b"GET /health HTTP/1.1\r\n"),
                         daemon=True).start()
    half = server.connect(ATTACKER3)
    half.sendall(b"GET /health HTTP/1.1\r\n")
    half.shutdown(socket.SHUT_WR)
    idle = server.connect(ATTACKER3)
    flood = threading.Thread(target=header_flood, args=(server, ATTACKER3, []), daemon=True)
    flood.start()
    time.sleep(0.5)
    rss_end = server.rss_mib()
    check(rss_end - rss_start < 64, f"memory through every attack: {rss_start:.0f} -> "
          f"{rss_end:.0f} MiB")
    start = time.time()
    server.proc.send_signal(signal.SIGTERM)
    try:
        code = server.proc.wait(timeout=DRAIN + MARGIN + 30)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        code = None
    took = time.time() - start
    stop.set()
    stop2.set()
    check(code == 0 and took <= DRAIN + MARGIN,
          f"SIGTERM with every attack open: exit {code} in {took:.1f} s")
    for s in open_socks + [half, idle]:
        s.close()

    # The connection limits: a 503 that names the flag, then served again.
    limited = Server(binary, model, "--max-connections-per-client", "4", "--max-connections", "8")
    held = [limited.connect(ATTACKER) for _ in range(4)]
    time.sleep(0.3)
    with limited.connect(ATTACKER) as s:
        s.sendall(post("/v1/completions", VALID))
        status, head, body = read_response(s)
    check(status == 503 and b"--max-connections-per-client" in body,
          f"a 5th connection from one address: {status} {body[:110]!r}")
    held += [limited.connect(ATTACKER2) for _ in range(4)]
    time.sleep(0.3)
    ids, _ = None, 0
    with limited.connect() as s:
        s.sendall(post("/v1/completions", VALID))
        status, head, body = read_response(s)
    check(status == 503 and b"--max-connections" in body and "close" in head.lower(),
          f"a 9th connection in all: {status}, closed, {body[:100]!r}")
    for s in held:
        s.close()
    time.sleep(0.3)
    ids, took = valid_request(limited)
    check(ids == reference, f"once they close, a valid request: {ids} in {took:.2f} s")
    limited.proc.send_signal(signal.SIGTERM)
    code = limited.proc.wait(timeout=60)
    check(code == 0, f"and it exits 0 ({code})")

    if failures:
        print(f"FAIL: {len(failures)} checks failed")
        return 1
    print("PASS: hostile clients: every attack bounded, valid clients served")
    return 0


if __name__ == "__main__":
    sys.exit(main())
