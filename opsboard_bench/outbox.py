"""Outbox and producer-API scenarios of ``opsboard bench`` (``relay``, ``api``).

``relay``: events relayed to jobs per second with one subscriber, and the
delay from an event's commit to its job.  ``api``: ``POST /api/v1/events``
through gunicorn with the README's deploy settings from a local load
generator (8 keep-alive clients), then 4x the tenant's admitted rate, where
every answer must be 202 or 429/503 with Retry-After, never a 5xx, and every
202's event must be stored.
"""
from __future__ import annotations

import json
import os
import time

from opsboard import auth

from . import api as api_worker
from .harness import Bench, percentile


def register(cat) -> None:
    """The relay scenario's event and its one subscriber, in this process and in its worker's
    (``OPSBOARD_JOB_MODULES``): the demo's ``order.paid`` it published is no product event."""
    from opsboard import outbox
    outbox.define_event(cat, "bench.happened", aggregate="thing", fields={"n": outbox.EventField(int)})
    outbox.subscribe(cat, "bench_noop", "bench.happened", "diag.noop")


def relay(b: Bench) -> None:
    """Outbox relay: events -> jobs per second with one subscriber (default 20,000 events); commit->job p99."""
    from opsboard import outbox
    from opsboard.catalogue import active
    register(active())
    n = b.jobs or 20_000
    (tenant,) = b.tenants(1)
    with b.conn() as c:
        for i in range(0, n, 1000):
            with c.transaction():
                for j in range(i, min(n, i + 1000)):
                    outbox.publish(c, "bench.happened", 1, aggregate=("thing", j % 100), tenant=tenant,
                                   payload={"n": j})
        # What the relay service's run_once does: batches of 1,000, one transaction each.
        relayed, t0 = 0, time.perf_counter()
        while True:
            done = outbox.relay_events(c, 1000).events
            relayed += done
            if not done:
                break
        elapsed = time.perf_counter() - t0
    b.add("relay", "events relayed to jobs, 1 relay", relayed / elapsed, "events/s", f"{relayed} events, batch 1000")
    with b.conn() as c:
        c.execute("TRUNCATE outbox_events, jobs CASCADE")
    commits = _publishers(b, tenant, 8, float(os.environ.get("OPSBOARD_BENCH_PUBLISH_SECONDS", "3")))
    b.add("relay", "8 publishers, 1 event per transaction", commits, "commits/s", "no relay running")
    with b.conn() as c:
        c.execute("TRUNCATE outbox_events, jobs CASCADE")
    # Commit -> job: a steady producer (~150 events/s, one per transaction) and one worker's relay (NOTIFY-woken).
    b.start_workers(1, "critical=1,default=4,bulk=1", OPSBOARD_JOB_MODULES=__name__)
    time.sleep(0.5)
    m = 1000
    with b.conn() as c:
        for j in range(m):
            with c.transaction():
                outbox.publish(c, "bench.happened", 1, aggregate=("thing", j % 100), tenant=tenant,
                               payload={"n": j})
            time.sleep(0.005)
        deadline = time.monotonic() + 30
        while (c.execute("SELECT count(*) AS n FROM outbox_events WHERE relayed_at IS NULL").fetchone()["n"]
               and time.monotonic() < deadline):
            time.sleep(0.05)
        lat = [float(r["ms"]) for r in c.execute(
            "SELECT extract(epoch FROM min(j.created_at) - e.occurred_at) * 1000 AS ms "
            "FROM outbox_events e JOIN jobs j ON j.event_id = e.id GROUP BY e.id, e.occurred_at")]
    b.stop_workers()
    b.add("relay", "commit->job created p50 (worker relay)", percentile(lat, 50), "ms", f"{len(lat)} events")
    b.add("relay", "commit->job created p99 (worker relay)", percentile(lat, 99), "ms", f"{len(lat)} events")
    with b.conn() as c:
        c.execute("TRUNCATE outbox_events, jobs, job_attempts CASCADE")
        if c.execute("SELECT to_regclass('demo_effects') IS NOT NULL AS demo").fetchone()["demo"]:
            c.execute("TRUNCATE demo_effects")  # the demo plug-in's tables, when its schema was applied


def _publishers(b: Bench, tenant, threads: int, seconds: float) -> float:
    """Commits per second of ``threads`` sessions each publishing one event per transaction (the notify lock)."""
    import threading
    from opsboard import outbox
    counts = [0] * threads
    go, end = threading.Barrier(threads + 1), [0.0]

    def publisher(k: int) -> None:
        with b.conn() as c:
            go.wait()
            while time.monotonic() < end[0]:
                with c.transaction():
                    outbox.publish(c, "bench.happened", 1, aggregate=("thing", k), tenant=tenant,
                                   payload={"n": counts[k]})
                counts[k] += 1

    workers = [threading.Thread(target=publisher, args=(k,)) for k in range(threads)]
    for t in workers:
        t.start()
    end[0] = time.monotonic() + seconds
    go.wait()
    for t in workers:
        t.join()
    return sum(counts) / seconds


def _load(url: str, secret: str, seconds: float, clients: int, rate: float | None = None) -> list[tuple]:
    """POST /api/v1/events from ``clients`` threads (keep-alive); open loop at ``rate`` req/s when given.

    Returns (status, latency ms, Retry-After, event id) per request.
    """
    import http.client
    import threading
    from urllib.parse import urlsplit
    host, port = urlsplit(url).hostname, urlsplit(url).port
    out: list[tuple] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def client(k: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=30)
        mine, i = [], 0
        interval = clients / rate if rate else 0.0
        next_at = time.monotonic() + (k * interval / clients if rate else 0)
        while time.monotonic() < end:
            if rate:
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                next_at += interval
            i += 1
            body = json.dumps({"type": api_worker.EVENT, "aggregate": {"type": "order", "id": f"o-{k}-{i % 50}"},
                               "payload": {"order_id": f"o-{k}-{i % 50}", "amount_cents": i, "currency": "EUR"}})
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/api/v1/events", body, {"Authorization": f"Bearer {secret}",
                                                             "Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                status, retry = resp.status, resp.getheader("Retry-After")
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=30)
                status, retry, data = 0, None, b"{}"
            ms = (time.perf_counter() - t0) * 1000
            event_id = json.loads(data or b"{}").get("id") if status == 202 else None
            mine.append((status, ms, retry, event_id))
        conn.close()
        with lock:
            out.extend(mine)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _cpu_seconds(parent: int) -> float:
    """User + system CPU of ``parent``'s children (gunicorn's workers), from /proc."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent:
                total += (int(fields[11]) + int(fields[12])) / tick
    return total


def api(b: Bench) -> None:
    """POST /api/v1/events through gunicorn (-w 4 --threads 4), 8 clients for 10 s; then 4x that rate."""
    from opsboard import apikeys, audit
    seconds = float(os.environ.get("OPSBOARD_BENCH_API_SECONDS", "10"))
    with b.conn() as c:
        tenant = auth.ensure_tenant(c, "bench-api")
        c.execute("UPDATE tenants SET enqueue_rate = 1000000, enqueue_burst = 1000000 WHERE id = %s", (tenant["id"],))
        secret, _ = apikeys.create(c, tenant["id"], "bench", audit.Actor("bench"))
    web, url = api_worker.start_web(b, ["-w", "4", "--threads", "4"], probe="/api/v1/openapi.json",
                                   timeout=120, OPSBOARD_JOB_MODULES=api_worker.MODULE)
    _load(url, secret, 2, 8)  # warm-up: pools, imports
    cpu0 = _cpu_seconds(web.pid)
    res = _load(url, secret, seconds, 8)
    cpu = _cpu_seconds(web.pid) - cpu0
    ok = [r for r in res if r[0] == 202]
    rate = len(ok) / seconds
    b.add("api", "POST /events, 8 clients: throughput", rate, "req/s", f"{len(res)} requests, "
          f"{len(res) - len(ok)} not 202")
    b.add("api", "POST /events, 8 clients: p50", percentile([r[1] for r in res], 50), "ms")
    b.add("api", "POST /events, 8 clients: p99", percentile([r[1] for r in res], 99), "ms")
    b.add("api", "POST /events: gunicorn CPU per request", cpu / max(1, len(res)) * 1000, "ms",
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    # Overload: the tenant may enqueue a quarter of what the server sustained (its admitted rate, burst 1 s);
    # it offers 4x that, open loop from 32 clients: three requests in four must be refused, quickly.
    admitted = max(1.0, rate / 4)
    with b.conn() as c:
        c.execute("UPDATE tenants SET enqueue_rate = %s, enqueue_burst = %s WHERE id = %s",
                  (admitted, max(1, int(admitted)), tenant["id"]))
    res = _load(url, secret, seconds, 32, rate=4 * admitted)
    codes: dict[int, int] = {}
    for r in res:
        codes[r[0]] = codes.get(r[0], 0) + 1
    refused = [r for r in res if r[0] in (429, 503)]
    ids = [r[3] for r in res if r[0] == 202]
    with b.conn() as c:
        present = c.execute("SELECT count(*) AS n FROM outbox_events WHERE id = ANY(%s::uuid[])", (ids,)).fetchone()["n"]
    note = ", ".join(f"{k or 'error'}: {v}" for k, v in sorted(codes.items()))
    b.add("api", "4x overload: admitted rate", admitted, "req/s", "the tenant's enqueue_rate")
    b.add("api", "4x overload: offered", len(res) / seconds, "req/s", note)
    b.add("api", "4x overload: p99 of 429/503", percentile([r[1] for r in refused], 99), "ms")
    b.add("api", "4x overload: p99 (all answers)", percentile([r[1] for r in res], 99), "ms")
    b.add("api", "4x overload: 5xx other than 503 / errors", sum(v for k, v in codes.items()
                                                                  if k == 0 or (k >= 500 and k != 503)), "answers")
    b.add("api", "4x overload: 429/503 without Retry-After", sum(1 for r in refused if not r[2]), "answers")
    b.add("api", "4x overload: 2xx whose event is missing", len(ids) - present, "events")
    web.terminate()
    web.wait(30)
