"""A hostile mix against `switchyard serve`, for load_bench.py's soak (issue 46): from one source
address, for as long as it runs,
  - 4 header floods (small headers without end, as fast as the server takes them),
  - a slowloris of 100 connections trickling a header byte a second,
  - 4 bodies trickled a byte a second,
  - 10 idle connections,
  - a half-closed request (sent, then the sending side shut) every half second,
  - a malformed or unsupported body every 0.2 s (invalid UTF-8, JSON nested 100000 deep,
    typical_p), each of which must get a 400,
each reconnecting as soon as the server cuts it. counts() says what happened.

    mix = HostileMix("127.0.0.1", port, source="127.0.0.2")
    mix.start(); ...; mix.stop()   # both idempotent
"""
import json
import socket
import threading
import time

MALFORMED = [
    b'{"prompt": "\xff\xfe\xc3", "max_tokens": 2}',
    b'{"prompt": ' + b"[" * 100000 + b"]" * 100000 + b"}",
    json.dumps({"prompt": [1, 2], "max_tokens": 2, "typical_p": 0.9}).encode(),
]


def _post(body):
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def _status(sock):
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return None
        data += chunk
    return int(data.split(b" ", 2)[1])


class HostileMix:
    def __init__(self, host, port, source="127.0.0.2"):
        self.address = (host, port)
        self.source = (source, 0)
        self.running = threading.Event()
        self.threads = []
        self.lock = threading.Lock()
        self.tally = {"floods": 0, "flood_max_kib": 0, "slowloris_cut": 0, "bodies_cut": 0,
                      "idle_cut": 0, "half_closed": 0, "malformed_400": 0,
                      "malformed_other": 0, "connect_errors": 0}

    def count(self, key, n=1):
        with self.lock:
            self.tally[key] += n

    def counts(self):
        with self.lock:
            return dict(self.tally)

    def connect(self, timeout=60):
        try:
            return socket.create_connection(self.address, timeout=timeout,
                                            source_address=self.source)
        except OSError:
            self.count("connect_errors")
            time.sleep(0.2)
            return None

    def start(self):
        if self.running.is_set():
            return
        self.running.set()
        jobs = ([self.flood] * 4 + [self.slowloris] * 100 + [self.slow_body] * 4 +
                [self.idle] * 10 + [self.half_closed, self.malformed])
        self.threads = [threading.Thread(target=self.loop, args=(job,), daemon=True)
                        for job in jobs]
        for t in self.threads:
            t.start()

    def stop(self):
        if not self.running.is_set():
            return
        self.running.clear()
        for t in self.threads:
            t.join(timeout=5)
        self.threads = []

    def loop(self, job):
        while self.running.is_set():
            sock = self.connect()
            if sock is None:
                continue
            with sock:
                try:
                    job(sock)
                except OSError:
                    pass

    def wait_cut(self, sock, drip, key, every=1.0):
        """Sends `drip` every `every` s until the server closes the connection (counted under
        `key`) or the mix stops."""
        sock.settimeout(every)
        while self.running.is_set():
            if drip:
                sock.sendall(drip)
            try:
                if not sock.recv(4096):
                    self.count(key)
                    return
            except socket.timeout:
                pass

    def flood(self, sock):
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        block = (b"X-Flood: " + b"a" * 32 + b"\r\n") * 2048
        sent = 0
        try:
            while self.running.is_set() and sent < (64 << 20):
                sock.sendall(block)
                sent += len(block)
        finally:
            self.count("floods")
            with self.lock:
                self.tally["flood_max_kib"] = max(self.tally["flood_max_kib"], sent >> 10)
        time.sleep(0.2)

    def slowloris(self, sock):
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        self.wait_cut(sock, b"X", "slowloris_cut")

    def slow_body(self, sock):
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 100000\r\n\r\n{")
        self.wait_cut(sock, b" ", "bodies_cut")

    def idle(self, sock):
        self.wait_cut(sock, b"", "idle_cut")

    def half_closed(self, sock):
        sock.sendall(_post(json.dumps({"prompt": [1, 2, 3], "max_tokens": 2}).encode()))
        sock.shutdown(socket.SHUT_WR)
        _status(sock)
        self.count("half_closed")
        time.sleep(0.5)

    def malformed(self, sock):
        with self.lock:
            self.sent_malformed = getattr(self, "sent_malformed", 0) + 1
            body = MALFORMED[self.sent_malformed % len(MALFORMED)]
        sock.sendall(_post(body))
        status = _status(sock)
        self.count("malformed_400" if status == 400 else "malformed_other")
        time.sleep(0.2)
