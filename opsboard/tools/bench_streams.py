"""``opsboard bench --scenario streams``: N inbox streams on the stream server, as the demo runs it.

Starts gunicorn and the stream server with the demo's launch code
(:func:`opsboard.tools.demo.start_web`: ``-w 2 --threads 4`` and ``opsboard
streams``), opens ``--streams N`` streams (default 2,000; the goal of issue 27
is 10,000) with an asyncio client straight to the stream server (one user
token each), then publishes ``ROUNDS`` notifications, each to every stream's
user (one event fanned out to all of them: one inbox row each, one ``*``
NOTIFY).  Meanwhile a thread asks the web for ``/healthz`` and the sign-in
page every 50 ms.

Figures: delivery p50/p99 from the fan-out's commit to each open stream's
receipt (every stream, every round), the stream server's RSS (and per
stream), /healthz and /login p99 during the rounds.  The client runs on the
same machine: its own CPU is in the figures.
"""
from __future__ import annotations

import asyncio
import json
import os
import resource
import socket
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from .. import outbox
from ..catalogue import active
from ..notifications import fanout as fanoutmod
from ..notifications import inbox, policy
from .bench_notifications import EVENT, _recipients, _rss_kib, seed_members

ROUNDS = 3
SECRET = "bench-" + "x" * 40


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))] if values else float("nan")


class _Client:
    """N raw SSE streams over asyncio: connected when the ``connected at cursor`` comment arrives;
    each ``event: notification`` line stamps the stream's receipt of the current round."""

    def __init__(self, port: int, tokens: list[str]):
        self.port, self.tokens = port, tokens
        self.connected = 0
        self.failed = 0
        self.received: list[list[float]] = [[] for _ in tokens]
        self.writers = []

    async def _one(self, i: int, token: str, ready: asyncio.Semaphore) -> None:
        async with ready:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port, limit=1 << 20)
            except OSError:
                self.failed += 1
                return
            self.writers.append(writer)
            writer.write(f"GET /api/v1/inbox/stream HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}\r\n"
                         "Accept: text/event-stream\r\n\r\n".encode())
            while True:
                line = await reader.readline()
                if not line:
                    self.failed += 1
                    return
                if b"connected at cursor" in line:
                    self.connected += 1
                    break
        got = self.received[i]
        while True:  # one call per event (a blank line ends it), not one per line
            try:
                block = await reader.readuntil(b"\n\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                return
            if b"event: notification" in block:
                got.append(time.perf_counter())

    def start(self, loop) -> list[asyncio.Task]:
        ready = asyncio.Semaphore(200)  # connects in flight at once
        return [loop.create_task(self._one(i, t, ready)) for i, t in enumerate(self.tokens)]

    def close(self) -> None:
        for w in self.writers:
            w.close()


def _probe(base: str, stop: threading.Event, out: dict[str, list[float]]) -> None:
    """Time /healthz and /login every 50 ms until ``stop`` (a page a person would be loading meanwhile)."""
    while not stop.wait(0.05):
        for path in ("/healthz", "/login"):
            t = time.perf_counter()
            try:
                urllib.request.urlopen(base + path, timeout=30).read()
                out[path].append(time.perf_counter() - t)
            except OSError:
                out.setdefault(path + " failed", []).append(time.perf_counter() - t)


def streams(b) -> None:
    """N streams (--streams, default 2,000) on the stream server beside the demo's gunicorn: delivery p50/p99
    to every stream, stream server RSS, /healthz and /login p99 meanwhile."""
    from ..config import ROOT
    from .demo import start_web, stop_children

    n = getattr(b, "streams", None) or 2000
    import gc
    gc.set_threshold(50_000, 50, 100)  # as the stream server: the client's 10,000 streams are a large heap too
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 2 * n + 1000))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # the client's sockets; children inherit it
    if want < n + 200:
        raise RuntimeError(f"open files limited to {want}: too few for {n} streams (raise ulimit -n)")

    outbox.define_event(active(), EVENT, 1, aggregate="notice", fields={}, description="Bench: a notice to every member.")
    policy.declare(active(), EVENT, category="system", channels=("inbox",), recipients=_recipients)
    tenant = b.tenants(3)[2]
    print(f"  streams: seeding {n} users and tokens", flush=True)
    with b.conn() as c:
        with c.transaction():
            ids = seed_members(c, tenant, n, "stream")
            tokens = [inbox.create_token(c, uid, "bench")[0] for uid in ids]
        c.execute("ANALYZE users; ANALYZE memberships; ANALYZE user_tokens")

    port, streams_port = _free_port(), _free_port()
    logs = Path(tempfile.mkdtemp(prefix="opsboard-bench-streams-"))
    env = dict(os.environ, DATABASE_URL=b.url, OPSBOARD_ENV="development", OPSBOARD_SECRET_KEY=SECRET,
               OPSBOARD_STREAMS_MAX=str(n + 100), OPSBOARD_LOG_FORMAT="text", PYTHONPATH=str(ROOT))
    children = start_web(env, "127.0.0.1", port, streams_port, logs)
    base = f"http://127.0.0.1:{port}"
    stop = threading.Event()
    probes: dict[str, list[float]] = {"/healthz": [], "/login": []}
    client = _Client(streams_port, tokens)
    loop = asyncio.new_event_loop()
    rounds: list[float] = []
    server_ms: list[float] = []  # per round: the stream server's notify -> its last write
    try:
        deadline = time.monotonic() + 60
        for url in (base + "/healthz", f"http://127.0.0.1:{streams_port}/healthz"):
            while True:
                try:
                    urllib.request.urlopen(url, timeout=2).read()
                    break
                except OSError:
                    if time.monotonic() > deadline or any(c.poll() is not None for c in children):
                        raise RuntimeError(f"the web or stream server did not start; see {logs}") from None
                    time.sleep(0.2)
        urllib.request.urlopen(base + "/login", timeout=10).read()  # both gunicorn workers warm (roughly)
        server_pid = children[0].pid
        rss_before = _rss_kib(server_pid)
        tasks = client.start(loop)
        started = time.perf_counter()
        while client.connected + client.failed < n and time.perf_counter() - started < 300:
            loop.run_until_complete(asyncio.sleep(0.2))
        connect_s = time.perf_counter() - started
        loop.run_until_complete(asyncio.sleep(1.0))
        rss_after = _rss_kib(server_pid)
        prober = threading.Thread(target=_probe, args=(base, stop, probes), daemon=True)
        prober.start()
        loop.run_until_complete(asyncio.sleep(1.0))  # the probe's quiet baseline
        with b.conn() as c:
            for r in range(ROUNDS):
                with c.transaction():
                    ev = outbox.publish(c, EVENT, 1, aggregate=("notice", f"streams-{r}"), tenant=tenant, payload={})
                fanoutmod.fan_out(c, ev["id"])  # commits: one row per user, one '*' NOTIFY
                rounds.append(time.perf_counter())
                wait_until = time.perf_counter() + 60
                while time.perf_counter() < wait_until and \
                        sum(len(g) > r for g in client.received) < client.connected:
                    loop.run_until_complete(asyncio.sleep(0.02))
                loop.run_until_complete(asyncio.sleep(0.5))
                health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{streams_port}/healthz",
                                                           timeout=30).read())
                server_ms.append(health["last_notify_to_last_write_ms"] or float("nan"))
        stop.set()
        prober.join(35)
        for t in tasks:
            t.cancel()
        client.close()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    finally:
        stop.set()
        loop.close()
        stop_children(children, grace=20)

    latencies = [got[r] - rounds[r] for got in client.received for r in range(min(len(got), len(rounds)))]
    expected = client.connected * len(rounds)
    b.add("streams", "streams open (one stream server process)", client.connected, "streams",
          f"of {n}, opened in {connect_s:.1f} s")
    b.add("streams", "deliveries received", len(latencies), "events", f"of {expected} ({ROUNDS} rounds)")
    b.add("streams", "commit -> every stream, p50", _percentile(latencies, 0.5) * 1000, "ms")
    b.add("streams", "commit -> every stream, p99", _percentile(latencies, 0.99) * 1000, "ms", "goal < 250")
    b.add("streams", "commit -> last stream (max)", max(latencies, default=float("nan")) * 1000, "ms")
    b.add("streams", "server: NOTIFY -> last stream written", _percentile(server_ms, 0.5), "ms",
          f"median of {len(server_ms)} rounds (the client's reading is not in it)")
    b.add("streams", "stream server RSS", rss_after / 1024, "MiB", "goal < 1,024 at 10,000 streams")
    b.add("streams", "stream server RSS per open stream", (rss_after - rss_before) / max(client.connected, 1),
          "KiB")
    for path in ("/healthz", "/login"):
        values = probes[path]
        b.add("streams", f"{path} p99 meanwhile", _percentile(values, 0.99) * 1000, "ms",
              f"{len(values)} requests, {len(probes.get(path + ' failed', []))} failed; goal < 100")
