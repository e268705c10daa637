"""The ``noisy_neighbour`` bench scenario (issue 50): one tenant's hostile webhook endpoints beside another
tenant's healthy one, through two real worker processes with the product's default slots.

A healthy tenant publishes a steady stream (4 deliveries/s) to a healthy receiver, first alone (the quiet
phase), then beside a noisy tenant whose four endpoints answer 200 after 95 % of the webhook timeout, never
answer, trickle one byte a second, or flood ``100 Continue`` (the noisy phase, 8 deliveries/s spread over
them).  Printed and written (``--json FILE``): the healthy tenant's publish-to-receipt p50/p99 quiet and
beside the noisy tenant (and its ratio, the goal being at most 3), how many of its deliveries never
arrived, the jobs running per tenant (mean and peak, sampled twice a second, against the workers' slots),
and the workers' CPU per finished attempt in each phase.

The deliveries are enqueued as the relay's fan-out enqueues them (``webhook.deliver`` with the event's
key), the events inserted as relayed already, so that only the delivery path is measured.
``OPSBOARD_BENCH_WINDOW`` sets the noisy phase's seconds (default 30; the quiet one is a third of it),
``OPSBOARD_WEBHOOK_TIMEOUT`` the workers' timeout (default 10 s, the product's).
"""
from __future__ import annotations

import os
import socket
import threading
import time
import uuid

from .harness import percentile
from .webhooks import _proc_cpu

WINDOW = float(os.environ.get("OPSBOARD_BENCH_WINDOW", "30"))
TIMEOUT = float(os.environ.get("OPSBOARD_WEBHOOK_TIMEOUT", "10"))
HEALTHY_RATE = 4.0     # deliveries/s to the healthy endpoint
NOISY_RATE = 8.0       # deliveries/s over the noisy tenant's four endpoints
WORKERS = 2
SLOTS = "critical=2,default=8,bulk=2"   # the product's default


class _Server:
    """A raw HTTP/1.1 server on 127.0.0.1: ``behave(conn, request)`` answers each request of a connection;
    a thread per connection.  The healthy one records when each webhook-id arrived."""

    def __init__(self, behave):
        self.behave = behave
        self.received: dict[str, float] = {}
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.listen(256)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        buf = b""
        with conn:
            try:
                while not self.stopped.is_set():
                    while b"\r\n\r\n" not in buf:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        buf += chunk
                    head, _, rest = buf.partition(b"\r\n\r\n")
                    length = 0
                    msg_id = ""
                    for line in head.split(b"\r\n")[1:]:
                        name, _, value = line.partition(b":")
                        name = name.strip().lower()
                        if name == b"content-length":
                            length = int(value.strip() or 0)
                        elif name == b"webhook-id":
                            msg_id = value.strip().decode()
                    while len(rest) < length:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        rest += chunk
                    buf = rest[length:]
                    if not self.behave(self, conn, msg_id):
                        return
            except OSError:
                return

    def close(self):
        self.stopped.set()
        self.sock.close()


def _healthy(server, conn, msg_id) -> bool:
    server.received[msg_id] = time.monotonic()
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    return True


def _slow(server, conn, msg_id) -> bool:
    """200 after 95 % of the timeout: every attempt succeeds, the breaker never opens."""
    if server.stopped.wait(TIMEOUT * 0.95):
        return False
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    return True


def _never(server, conn, msg_id) -> bool:
    server.stopped.wait(TIMEOUT * 3)
    return False


def _trickle(server, conn, msg_id) -> bool:
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100:
        if server.stopped.wait(1.0):
            return False
        conn.sendall(bytes([byte]))
    return False


def _flood(server, conn, msg_id) -> bool:
    block = b"HTTP/1.1 100 Continue\r\n\r\n" * 256
    end = time.monotonic() + TIMEOUT * 3
    while time.monotonic() < end and not server.stopped.is_set():
        conn.sendall(block)
    return False


def _enqueue(b, c, tenant, endpoint, published: dict | None):
    from psycopg.types.json import Jsonb

    from opsboard import jobqueue
    from opsboard.schema import new_id

    eid = new_id()
    with c.transaction():
        c.execute("INSERT INTO outbox_events (id, type, version, aggregate_type, aggregate_id, tenant_id, payload,"
                  " relayed_at) VALUES (%s, 'order.paid', 1, 'order', 'o', %s, %s, now())",
                  (eid, tenant, Jsonb({"order_id": 1})))
        jobqueue.enqueue(c, "webhook.deliver", {"endpoint_id": str(endpoint), "event_id": str(eid)}, tenant=tenant,
                         idempotency_key=f"{eid}:{endpoint}", event_id=eid)
    if published is not None:
        published[f"msg_{uuid.UUID(str(eid)).hex}"] = time.monotonic()


class _Sampler:
    """Jobs running per tenant, twice a second, and the workers' CPU seconds."""

    def __init__(self, b, tenants: dict):
        self.conn, self.tenants = b.conn(), tenants
        self.samples: list[dict] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self.stop.wait(0.5):
            rows = self.conn.execute("SELECT tenant_id, count(*) AS n FROM jobs WHERE status = 'running'"
                                     " GROUP BY tenant_id").fetchall()
            by = {r["tenant_id"]: r["n"] for r in rows}
            self.samples.append({name: by.get(t, 0) for name, t in self.tenants.items()})

    def phase(self) -> list[dict]:
        taken, self.samples = self.samples, []
        return taken


def _attempts(c, since) -> int:
    return c.execute("SELECT count(*) AS n FROM job_attempts WHERE finished_at >= %s", (since,)).fetchone()["n"]


def _latencies(published: dict, received: dict) -> tuple[list[float], int]:
    lat = [(received[k] - t) * 1000 for k, t in published.items() if k in received]
    return lat, len(published) - len(lat)


def run(b) -> None:
    from opsboard.deliveries import webhooks

    healthy_t, noisy_t = b.tenants(2)
    servers = {"healthy": _Server(_healthy), "slow": _Server(_slow), "never": _Server(_never),
               "trickle": _Server(_trickle), "flood": _Server(_flood)}
    procs = []
    try:
        with b.conn() as c:
            eps = {name: webhooks.create_endpoint(c, healthy_t if name == "healthy" else noisy_t, s.url)["id"]
                   for name, s in servers.items()}
        procs = b.start_workers(WORKERS, SLOTS, OPSBOARD_WEBHOOK_ALLOW="127.0.0.1",
                                OPSBOARD_WEBHOOK_TIMEOUT=str(TIMEOUT))
        sampler = _Sampler(b, {"healthy": healthy_t, "noisy": noisy_t})
        sampler.thread.start()
        noisy_names = ["slow", "never", "trickle", "flood"]
        phases = {}
        with b.conn() as c:
            # Warm-up (not measured): the workers' first deliveries open connections and fill caches.
            warm: dict[str, float] = {}
            for _ in range(8):
                _enqueue(b, c, healthy_t, eps["healthy"], warm)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not all(m in servers["healthy"].received for m in warm):
                time.sleep(0.1)
            for phase, seconds, noisy in (("quiet", WINDOW / 3, False), ("noisy", WINDOW, True)):
                published: dict[str, float] = {}
                cpu0 = sum(_proc_cpu(p.pid) or 0.0 for p in procs)
                since = c.execute("SELECT now() AS n").fetchone()["n"]
                sampler.phase()
                start = time.monotonic()
                next_h, next_n, k = start, start, 0
                while (now := time.monotonic()) < start + seconds:
                    if now >= next_h:
                        _enqueue(b, c, healthy_t, eps["healthy"], published)
                        next_h += 1 / HEALTHY_RATE
                    if noisy and now >= next_n:
                        _enqueue(b, c, noisy_t, eps[noisy_names[k % 4]], None)
                        k += 1
                        next_n += 1 / NOISY_RATE
                    time.sleep(max(0.0, min(next_h, next_n if noisy else next_h) - time.monotonic()))
                samples = sampler.phase()
                # What was published arrives within the timeout or never (a grace of one timeout).
                deadline = time.monotonic() + TIMEOUT + 5
                while time.monotonic() < deadline and not all(m in servers["healthy"].received for m in published):
                    time.sleep(0.1)
                cpu = sum(_proc_cpu(p.pid) or 0.0 for p in procs) - cpu0
                attempts = _attempts(c, since)
                lat, missing = _latencies(published, servers["healthy"].received)
                phases[phase] = {
                    "healthy_published": len(published), "healthy_missing": missing,
                    "healthy_p50_ms": percentile(lat, 50) if lat else None,
                    "healthy_p99_ms": percentile(lat, 99) if lat else None,
                    "running_healthy_mean": sum(s["healthy"] for s in samples) / max(1, len(samples)),
                    "running_healthy_max": max((s["healthy"] for s in samples), default=0),
                    "running_noisy_mean": sum(s["noisy"] for s in samples) / max(1, len(samples)),
                    "running_noisy_max": max((s["noisy"] for s in samples), default=0),
                    "worker_cpu_ms_per_attempt": cpu * 1000 / attempts if attempts else None,
                    "attempts": attempts,
                }
        sampler.stop.set()
    finally:
        b.stop_workers()
        for s in servers.values():
            s.close()
    q, n = phases["quiet"], phases["noisy"]
    ratio = n["healthy_p99_ms"] / q["healthy_p99_ms"] if q["healthy_p99_ms"] and n["healthy_p99_ms"] else None
    slots = WORKERS * 8
    for name, p in phases.items():
        b.add("noisy_neighbour", f"healthy p50, {name}", p["healthy_p50_ms"] or 0, "ms",
              f"{p['healthy_published']} published, {p['healthy_missing']} missing")
        b.add("noisy_neighbour", f"healthy p99, {name}", p["healthy_p99_ms"] or 0, "ms")
        b.add("noisy_neighbour", f"running noisy mean/max, {name}", p["running_noisy_mean"], "jobs",
              f"max {p['running_noisy_max']} of {slots} default slots")
        b.add("noisy_neighbour", f"running healthy mean/max, {name}", p["running_healthy_mean"], "jobs",
              f"max {p['running_healthy_max']}")
        b.add("noisy_neighbour", f"worker CPU per attempt, {name}", p["worker_cpu_ms_per_attempt"] or 0, "ms",
              f"{p['attempts']} attempts")
    b.add("noisy_neighbour", "healthy p99 noisy / quiet", ratio or 0, "x", "goal: at most 3")
    b.document = {"scenario": "noisy_neighbour", "webhook_timeout_s": TIMEOUT, "window_s": WINDOW,
                  "workers": WORKERS, "slots": SLOTS, "healthy_rate": HEALTHY_RATE, "noisy_rate": NOISY_RATE,
                  "quiet": q, "noisy": n, "healthy_p99_ratio": ratio, "goal_ratio": 3.0,
                  "goal_met": ratio is not None and ratio <= 3.0 and n["healthy_missing"] == 0,
                  "results": [r.__dict__ for r in b.results]}
    b.reset()
