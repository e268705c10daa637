"""The ``webhooks`` bench scenario: signed deliveries to local receivers (:mod:`.receiver`,
which verify every signature, or the provider sandbox), 100 endpoints, 10 % of them down: deliveries/s,
the CPU per delivery of the workers, the database and the receivers, the statements per delivery
(where ``pg_stat_statements`` is loaded), and the attempts the circuit breaker lets through to a
down endpoint."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

from opsboard.tools.sandbox import Sandbox

ENDPOINTS = 100
DOWN_EVERY = 10          # every 10th endpoint answers 503: 10 %
#: The down endpoints stay down this long (seconds); OPSBOARD_BENCH_WINDOW shortens it for a quick check.
WINDOW = float(os.environ.get("OPSBOARD_BENCH_WINDOW", "60"))
#: Receiver processes (the endpoints spread over them); 0 runs one sandbox in the benchmark's process.
RECEIVERS = int(os.environ.get("OPSBOARD_BENCH_RECEIVERS", "2"))
#: ``lean`` (default): :mod:`.receiver`, asyncio, every signature verified; ``sandbox``: the
#: provider sandbox's ``http.server`` receivers (the figures before 2026-12-02, session 2).
RECEIVER = os.environ.get("OPSBOARD_BENCH_RECEIVER", "lean")
#: Signed deliveries per second the platform aims at with two worker processes (issue 27).
GOAL = 2000

_SERVE = ("import sys; from opsboard.tools.sandbox import Sandbox; "
          "sb = Sandbox('127.0.0.1', 0, 0, smtp=False).start(); print(sb.url, flush=True); "
          "sys.stdin.read(); sb.stop()")


class _Receiver:
    """A sandbox in a process of its own (so that the receivers do not share the benchmark's GIL),
    driven over its JSON API; it ends when its stdin closes."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            raise RuntimeError("a bench sandbox process did not start")

    def expect(self, route: str, secret: str, status: int = 200) -> None:
        if status != 200:
            self.fault(route, status=status)

    def attempts(self, route: str) -> int:
        return len(self.records("webhook", route))

    def verified(self) -> tuple[int, int] | None:
        return None   # the sandbox records signatures, it does not check them

    def fault(self, route: str, **kw) -> None:
        req = urllib.request.Request(f"{self.url}/_sandbox/faults", json.dumps({"route": route, **kw}).encode(),
                                     {"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).read()

    def records(self, kind: str, route: str) -> list[dict]:
        with urllib.request.urlopen(f"{self.url}/_sandbox/records?kind={kind}&route={route}", timeout=30) as r:
            return json.loads(r.read())["records"]

    def stop(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class _LeanReceiver:
    """:mod:`.receiver` in a process of its own: verifies every signature, answers at once."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "opsboard_bench.receiver"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            raise RuntimeError("a bench receiver process did not start")
        self._counts = None

    def expect(self, route: str, secret: str, status: int = 200) -> None:
        req = urllib.request.Request(f"{self.url}/_bench/routes",
                                     json.dumps({route: {"secret": secret, "status": status}}).encode())
        urllib.request.urlopen(req, timeout=10).read()

    def counts(self) -> dict:
        if self._counts is None:
            with urllib.request.urlopen(f"{self.url}/_bench/counts", timeout=30) as r:
                self._counts = json.loads(r.read())
        return self._counts

    def attempts(self, route: str) -> int:
        return self.counts().get(route, {}).get("requests", 0)

    def verified(self) -> tuple[int, int]:
        c = self.counts().values()
        return sum(x["verified"] for x in c), sum(x["bad"] for x in c)

    def stop(self) -> None:
        _Receiver.stop(self)


def _proc_cpu(pid: int) -> float | None:
    """User + system CPU seconds of one process (``/proc/PID/stat``), ``None`` when it is gone."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _CpuSampler:
    """CPU seconds spent from :meth:`begin` to :meth:`end` by the workers, by the scratch database's
    backends and by the receivers, read from ``/proc`` every half second (a backend that starts
    meanwhile counts from zero; one that exits between two samples loses what it spent since the
    last: the pools keep theirs open).  PostgreSQL on another machine: the backends read as 0."""

    def __init__(self, b, workers, receivers):
        self.b, self.groups = b, {"workers": [p.pid for p in workers],
                                  "receivers": [r.proc.pid for r in receivers if hasattr(r, "proc")]}
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.kind: dict[int, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.conn = b.conn()

    def _sample(self, initial: bool = False) -> None:
        pids = {pid: g for g, ps in self.groups.items() for pid in ps}
        for r in self.conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                                   " AND pid <> pg_backend_pid()").fetchall():
            pids.setdefault(r["pid"], "database")
        for pid, g in pids.items():
            cpu = _proc_cpu(pid)
            if cpu is None:
                continue
            if pid not in self.first:
                self.first[pid], self.kind[pid] = (cpu if initial or g != "database" else 0.0), g
            self.last[pid] = cpu

    def _loop(self) -> None:
        while not self.stop.wait(0.5):
            self._sample()

    def begin(self) -> "_CpuSampler":
        self._sample(initial=True)
        self.thread.start()
        return self

    def end(self) -> dict[str, float]:
        self.stop.set()
        self.thread.join()
        self._sample()
        self.conn.close()
        out = {"workers": 0.0, "database": 0.0, "receivers": 0.0}
        for pid, first in self.first.items():
            out[self.kind[pid]] += self.last[pid] - first
        return out


def _statements(b, reset: bool = False) -> list[dict] | None:
    """This database's statements from ``pg_stat_statements`` (calls per query), or ``None`` when the
    server does not load it (``shared_preload_libraries``); ``reset`` forgets them first."""
    try:
        with b.conn() as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            dbid = c.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()["oid"]
            if reset:
                c.execute("SELECT pg_stat_statements_reset(0, %s, 0)", (dbid,))
                return []
            return c.execute("SELECT calls, rows, total_exec_time AS ms, query FROM pg_stat_statements"
                             " WHERE dbid = %s ORDER BY calls DESC", (dbid,)).fetchall()
    except Exception:  # not loaded, or no right to create it: the figure is left out
        return None


#: The bench's own statements while it waits (left out of the statements per delivery).
_OWN = ("AS n FROM jobs", "pg_stat_activity", "pg_stat_statements", "pg_database")


def run(b, slots: str = "default=32", workers: int = 2) -> None:
    """Signed webhook deliveries, 100 endpoints (10% down for 60 s): deliveries/s, CPU and statements per
    delivery, attempts on a down endpoint."""
    from psycopg.types.json import Jsonb

    from opsboard import jobqueue
    from opsboard.deliveries import webhooks
    from opsboard.schema import new_id

    total = b.jobs or 5000
    tenants = b.tenants(10)
    kind = _LeanReceiver if RECEIVER == "lean" else _Receiver
    receivers = [kind() for _ in range(RECEIVERS)] or [Sandbox("127.0.0.1", 0, 0, smtp=False).start()]
    try:
        endpoints = []
        with b.conn() as c:
            for i in range(ENDPOINTS):
                t = tenants[i % len(tenants)]
                sb = receivers[i % len(receivers)]
                ep = webhooks.create_endpoint(c, t, f"{sb.url}/hooks/ep{i}")
                endpoints.append((t, ep["id"], i % DOWN_EVERY == 0))
                if hasattr(sb, "expect"):
                    sb.expect(f"/hooks/ep{i}", ep["secrets"][0], 503 if i % DOWN_EVERY == 0 else 200)
                elif i % DOWN_EVERY == 0:
                    sb.fault(f"/hooks/ep{i}", status=503)
            per_endpoint = max(1, total // ENDPOINTS)
            jobs = []
            for _ in range(per_endpoint):
                for t in tenants:
                    eid = new_id()
                    # Relayed already: the benchmark enqueues the deliveries itself (the relay's
                    # fan-out would add its own jobs and deliveries to the measurement).
                    c.execute("INSERT INTO outbox_events (id, type, version, aggregate_type, aggregate_id, tenant_id,"
                              " payload, relayed_at) VALUES (%s, 'order.paid', 1, 'order', 'o', %s, %s, now())",
                              (eid, t, Jsonb({"order_id": 1})))
                    jobs += [jobqueue.NewJob("webhook.deliver", {"endpoint_id": str(ep), "event_id": str(eid)}, t,
                                          idempotency_key=f"{eid}:{ep}", event_id=eid)
                             for (tt, ep, _) in endpoints if tt == t]
            for i in range(0, len(jobs), 5000):
                with c.transaction():
                    jobqueue.enqueue_many(c, jobs[i:i + 5000])
            c.execute("VACUUM ANALYZE jobs")
        healthy = sum(1 for (_, _, down) in endpoints if not down) * per_endpoint
        down_count = sum(1 for e in endpoints if e[2])
        start = time.monotonic()
        counting = _statements(b, reset=True) is not None
        procs = b.start_workers(workers, slots, OPSBOARD_WEBHOOK_ALLOW="127.0.0.1", OPSBOARD_BREAKER_COOLDOWN="30",
                                OPSBOARD_BREAKER_FAILURES="5")
        cpu = _CpuSampler(b, procs, receivers).begin()
        with b.conn() as c:
            done = "FROM jobs WHERE status = 'succeeded' AND type = 'webhook.deliver'"
            while c.execute(f"SELECT count(*) AS n {done}").fetchone()["n"] < healthy:
                if time.monotonic() - start > 600:
                    raise RuntimeError("webhook deliveries did not finish in 600 s")
                time.sleep(0.2)
            spent = cpu.end()
            stmts = _statements(b) if counting else None
            row = c.execute("SELECT count(*) AS n, extract(epoch FROM max(finished_at) - min(started_at)) AS secs "
                            + done).fetchone()
            time.sleep(max(0.0, WINDOW - (time.monotonic() - start)))
            snoozed = c.execute("SELECT count(*) AS n FROM job_attempts WHERE outcome = 'snoozed'").fetchone()["n"]
        b.stop_workers()
        down_attempts = [receivers[i % len(receivers)].attempts(f"/hooks/ep{i}") if hasattr(receivers[0], "attempts")
                         else len(receivers[i % len(receivers)].records("webhook", f"/hooks/ep{i}"))
                         for i in range(0, ENDPOINTS, DOWN_EVERY)]
        checked = [r.verified() for r in receivers if hasattr(r, "verified")]
        checked = [c for c in checked if c is not None]
        verified_note = (f"; signatures verified by the receivers: {sum(c[0] for c in checked):,}, "
                         f"bad: {sum(c[1] for c in checked)}" if checked else "; signatures not checked (sandbox)")
        b.add("webhooks", "signed deliveries, 100 endpoints, 10% down", row["n"] / float(row["secs"]),
              "deliv/s", f"{row['n']} delivered, {workers} worker processes --queues {slots}, "
              + (f"{RECEIVERS} {'lean receiver' if RECEIVER == 'lean' else 'sandbox'} processes" if RECEIVERS
                 else "sandbox in-process")
              + f"; goal {GOAL:,}/s with 2 workers" + verified_note)
        per = {k: v * 1000 / row["n"] for k, v in spent.items()}
        b.add("webhooks", "CPU per delivery: workers + db + receivers", sum(per.values()), "ms",
              f"workers {per['workers']:.3f}, database {per['database']:.3f}, receivers {per['receivers']:.3f} ms "
              "(/proc, while the healthy deliveries ran; snoozes and failed attempts included)")
        if stmts is not None:
            mine = [s for s in stmts if not any(o in s["query"] for o in _OWN)]
            calls = sum(s["calls"] for s in mine)
            top = "; ".join(f"{s['calls'] / row['n']:.3f} {' '.join(s['query'].split())[:60]}" for s in mine[:6])
            for s in sorted(mine, key=lambda s: -s["ms"])[:8]:   # where the server's time went
                print(f"    {s['ms'] * 1000 / row['n']:8.1f} µs/delivery {s['calls']:7d} calls  "
                      f"{' '.join(s['query'].split())[:110]}", flush=True)
            b.add("webhooks", "statements per delivery", calls / row["n"], "stmts",
                  f"{calls / row['n']:.3f}: pg_stat_statements, every statement of the workers (BEGIN/COMMIT and "
                  f"trigger statements too), per healthy delivery: {top}")
        b.add("webhooks", f"attempts on a down endpoint in {int(WINDOW)} s", max(down_attempts), "requests",
              f"{per_endpoint} deliveries queued for each of {down_count}; mean "
              f"{sum(down_attempts) / len(down_attempts):.1f}; {snoozed} snoozes by open breakers")
    finally:
        for sb in receivers:
            sb.stop()
        b.reset()
