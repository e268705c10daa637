"""``opsboard bench --scenario api_worker``: the producer API with a real worker draining it (issue 27).

``POST /api/v1/events`` through gunicorn (the README's worker class; ``OPSBOARD_BENCH_API_GUNICORN``
overrides its arguments) while one ``python -m worker`` process relays what is accepted, fans each
event out to the tenant's webhook endpoint (``webhook.fanout``) and delivers it, signed, to a
sandbox receiver in a process of its own.  The load generator is ``wrk`` (C, one thread, one Lua
script giving every request its own ``Idempotency-Key``): its CPU is measured and printed, so a
reader can see it was not the bottleneck.

Phases, each against a tenant of its own (so every count is that phase's):

1. warm-up, 2 s;
2. 8 keep-alive connections for ``OPSBOARD_BENCH_API_SECONDS`` (10): req/s, p50/p99, the client's
   and gunicorn's CPU; what the worker had relayed and delivered by the end, and how long the
   backlog took to drain after it;
3. 4x overload: the tenant may enqueue a quarter of the rate phase 2 sustained; 32 connections
   offer 4x that (each waits ``32 / rate`` between its requests): answers by status, 5xx and
   socket errors (must be 0), 429/503 without ``Retry-After`` (must be 0), and the 202s whose
   event is not stored (must be 0: every accepted id is looked up, and the tenant's rows counted).

Each figure is printed beside its goal (``note``).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

from opsboard import auth, outbox

EVENT = "bench_api.order_paid"
MODULE = __name__
GOAL_RATE, GOAL_P99_MS = 1000.0, 50.0
#: gunicorn's arguments (the README's deploy line, sized for this machine's cores).
GUNICORN = os.environ.get("OPSBOARD_BENCH_API_GUNICORN", "-k gthread -w 4 --threads 50")
WORKER_QUEUES = os.environ.get("OPSBOARD_BENCH_API_QUEUES", "critical=1,default=32,bulk=1")


def register(cat) -> None:
    """The bench's event (its gunicorn and worker load this module through OPSBOARD_JOB_MODULES): each one
    is fanned out to the tenant's webhook endpoints, as the demo's order.paid is."""
    outbox.define_event(cat, EVENT, 1, aggregate="order",
                        fields={"order_id": outbox.EventField(str, max_length=64),
                                "amount_cents": outbox.EventField(int),
                                "currency": outbox.EventField(str, max_length=3)},
                        description="Bench: an order was paid (fanned out to the tenant's webhooks).")
    outbox.subscribe(cat, "webhooks", EVENT, "webhook.fanout", payload=_fanout_payload)


def _fanout_payload(event: dict) -> dict:
    return {"event_id": str(event["id"])}


# One wrk thread's script: a body and an Idempotency-Key of its own per request; the answers counted by
# status (429/503 without Retry-After apart) and the ids of the 202s kept; done() writes it all as JSON.
_LUA = r"""
local secret = os.getenv("BENCH_SECRET")
local prefix = os.getenv("BENCH_PREFIX")
local out_path = os.getenv("BENCH_OUT")
local pause = tonumber(os.getenv("BENCH_DELAY_MS") or "0")
local threads = {}
local n = 0

function setup(thread)
  n = n + 1
  thread:set("tid", n)
  table.insert(threads, thread)
end

function init(args)
  counts = {}
  bare = 0
  ids = {}
  i = 0
  hdrs = {["Authorization"] = "Bearer " .. secret, ["Content-Type"] = "application/json"}
end

function delay()
  return pause
end

function request()
  i = i + 1
  local o = "o-" .. tid .. "-" .. (i % 50)
  hdrs["Idempotency-Key"] = prefix .. "-" .. tid .. "-" .. i
  local body = '{"type":"bench_api.order_paid","aggregate":{"type":"order","id":"' .. o ..
    '"},"payload":{"order_id":"' .. o .. '","amount_cents":' .. i .. ',"currency":"EUR"}}'
  return wrk.format("POST", "/api/v1/events", hdrs, body)
end

function response(status, headers, body)
  counts[status] = (counts[status] or 0) + 1
  if status == 202 then
    ids[#ids + 1] = string.match(body, '"id": *"([%x%-]+)"')
  elseif (status == 429 or status == 503) and headers["Retry-After"] == nil then
    bare = bare + 1
  end
end

function done(summary, latency, requests)
  local f = io.open(out_path, "w")
  f:write('{"requests":', summary.requests, ',"duration_us":', summary.duration,
          ',"p50_ms":', latency:percentile(50) / 1000, ',"p99_ms":', latency:percentile(99) / 1000,
          ',"max_ms":', latency.max / 1000,
          ',"errors":{"connect":', summary.errors.connect, ',"read":', summary.errors.read,
          ',"write":', summary.errors.write, ',"timeout":', summary.errors.timeout, '}')
  local all, bares, sep = {}, 0, ""
  f:write(',"ids":[')
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("counts")) do all[k] = (all[k] or 0) + v end
    bares = bares + t:get("bare")
    for _, id in ipairs(t:get("ids")) do
      f:write(sep, '"', id, '"')
      sep = ","
    end
  end
  f:write('],"bare_refusals":', bares, ',"statuses":{')
  sep = ""
  for k, v in pairs(all) do
    f:write(sep, '"', k, '":', v)
    sep = ","
  end
  f:write('}}')
  f:close()
end
"""


def wrk(url: str, secret: str, seconds: float, connections: int, script: str, *, delay_ms: float = 0) -> dict:
    """One wrk run (one thread): its JSON summary, with ``client_cpu_s`` (the wrk process's user + system CPU)."""
    out = tempfile.NamedTemporaryFile(prefix="bench-api-", suffix=".json", delete=False).name
    env = dict(os.environ, BENCH_SECRET=secret, BENCH_PREFIX=uuid.uuid4().hex[:12], BENCH_OUT=out,
               BENCH_DELAY_MS=str(int(delay_ms)))
    proc = subprocess.Popen(["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "30s", "-s", script,
                             url + "/api/v1/events"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    try:
        with open(out) as f:
            result = json.load(f)
    except (OSError, ValueError):
        raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stderr.read().decode()[-500:]}") from None
    finally:
        os.unlink(out)
    result["client_cpu_s"] = usage.ru_utime + usage.ru_stime
    result["statuses"] = {int(k): v for k, v in result["statuses"].items()}
    return result


def _tenant(b, slug: str, receiver_url: str, rate: float = 1_000_000) -> tuple[str, object]:
    """A tenant with a key, an enqueue rate and one webhook endpoint at the sandbox receiver."""
    from opsboard import apikeys, audit
    from opsboard.deliveries import webhooks
    with b.conn() as c:
        tenant = auth.ensure_tenant(c, slug)
        c.execute("UPDATE tenants SET enqueue_rate = %s, enqueue_burst = %s WHERE id = %s",
                  (rate, max(1, int(rate)), tenant["id"]))
        secret, _ = apikeys.create(c, tenant["id"], "bench", audit.Actor("bench"))
        webhooks.create_endpoint(c, tenant["id"], f"{receiver_url}/hooks/{slug}/ep")
    return secret, tenant["id"]


def _drain(b, tenant, accepted: int, timeout: float = 300) -> tuple[dict, float]:
    """Wait until the tenant's accepted events are relayed and their deliveries done; the state at the
    start and the seconds it took."""
    t0 = time.monotonic()
    first = None
    with b.conn() as c:
        while True:
            row = c.execute(
                "SELECT (SELECT count(*) FROM outbox_events WHERE tenant_id = %(t)s) AS events,"
                " (SELECT count(*) FROM outbox_events WHERE tenant_id = %(t)s AND relayed_at IS NOT NULL) AS relayed,"
                " (SELECT count(*) FROM jobs WHERE tenant_id = %(t)s AND type = 'webhook.deliver'"
                "    AND status = 'succeeded') AS delivered,"
                " (SELECT count(*) FROM jobs WHERE tenant_id = %(t)s AND status IN ('pending', 'retryable', 'running'))"
                "   AS waiting", {"t": tenant}).fetchone()
            first = first or dict(row)
            if row["relayed"] >= accepted and row["delivered"] >= accepted and row["waiting"] == 0:
                return first, time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                return first, float("nan")
            time.sleep(0.2)


def _cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its children still running (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(entry) == pid or int(fields[1]) == pid:
                total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _ports_of(root: int) -> set[int]:
    """The local TCP ports of the sockets ``root`` and its children hold (``/proc``: their fds' socket
    inodes looked up in ``/proc/net/tcp``): a backend whose ``client_port`` is one of them serves them."""
    inodes = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
            if int(entry) != root and ppid != root:
                continue
            for fd in os.listdir(f"/proc/{entry}/fd"):
                link = os.readlink(f"/proc/{entry}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            continue
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _pg_cpu_of(b, ports: set[int]) -> float:
    """CPU seconds of the bench database's backends whose client is on one of ``ports``."""
    tick = os.sysconf("SC_CLK_TCK")
    with b.conn() as c:
        pids = [r["pid"] for r in c.execute("SELECT pid, client_port FROM pg_stat_activity WHERE datname = "
                                            "current_database() AND client_port = ANY(%s)", (list(ports),)).fetchall()]
    total = 0.0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _pg_cpu(b) -> tuple[float, float]:
    """CPU seconds of the bench database's backends (``pg_stat_activity`` of this database, from /proc), and
    the machine's busy CPU seconds (``/proc/stat``: every process, other users' too).  A backend that exits
    between two readings loses what it spent since the first; the pools keep theirs open."""
    tick = os.sysconf("SC_CLK_TCK")
    with b.conn() as c:
        pids = [r["pid"] for r in c.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                                            " AND pid <> pg_backend_pid()").fetchall()]
    total = 0.0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # not on this machine (a remote server) or gone
        total += (int(fields[11]) + int(fields[12])) / tick
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    busy = (sum(cpu) - cpu[3] - cpu[4]) / tick  # all but idle and iowait
    return total, busy


def _statements_start(b) -> str | None:
    """The WAL position now, and ``pg_stat_statements`` reset when the server preloads it (a private
    cluster: the shared one does not); returns the LSN, or None when it cannot be read."""
    with b.conn() as c:
        if "pg_stat_statements" in c.execute("SHOW shared_preload_libraries").fetchone()["shared_preload_libraries"]:
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            c.execute("SELECT pg_stat_statements_reset()")
        return c.execute("SELECT pg_current_wal_lsn()::text AS lsn").fetchone()["lsn"]


def _statements_end(b, lsn: str, events: int, top: int = 15) -> None:
    """WAL bytes per accepted event since ``lsn`` (the whole server's: other databases' writes count
    too), and with ``pg_stat_statements`` the statements, their calls and time per event (this
    database's), the heaviest ``top`` printed one a line."""
    with b.conn() as c:
        wal = c.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)::float8 AS b",
                        (lsn,)).fetchone()["b"]
        b.add("api_worker", "WAL per accepted event", wal / max(1, events), "bytes",
              "the server's WAL from the load's start to the drain's end (other databases' too)")
        has = c.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'").fetchone()
        if not has:
            return
        rows = c.execute(
            "SELECT calls, total_exec_time, plans, total_plan_time, rows, wal_records, wal_bytes,"
            " left(regexp_replace(query, '\\s+', ' ', 'g'), 90)"
            " AS q FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND query NOT LIKE '%%pg_stat_statements%%' ORDER BY total_exec_time + total_plan_time DESC").fetchall()
    n = max(1, events)
    calls = sum(r["calls"] for r in rows)
    ms = sum(r["total_exec_time"] for r in rows)
    b.add("api_worker", "statements per accepted event", calls / n, "calls",
          f"{ms / n:.3f} ms of execution per event (pg_stat_statements, load and drain, polls included)")
    b.add("api_worker", "WAL records per accepted event", sum(r["wal_records"] for r in rows) / n, "records",
          "pg_stat_statements' wal_records (commits not included)")
    if any(r["plans"] for r in rows):  # pg_stat_statements.track_planning on
        b.add("api_worker", "plans per accepted event", sum(r["plans"] for r in rows) / n, "plans",
              f"{sum(r['total_plan_time'] for r in rows) / n:.3f} ms of planning per event")
    print(f"  {'calls/ev':>9} {'ms/ev':>7} {'ms/call':>8} {'plans/ev':>8} {'plan ms/ev':>10} {'WAL B/ev':>9}  statement",
          flush=True)
    for r in rows[:top]:
        print(f"  {r['calls'] / n:>9.3f} {r['total_exec_time'] / n:>7.3f} {r['total_exec_time'] / max(1, r['calls']):>8.3f}"
              f" {r['plans'] / n:>8.3f} {r['total_plan_time'] / n:>10.3f}"
              f" {float(r['wal_bytes']) / n:>9.0f}  {r['q']}", flush=True)


def start_web(b, gunicorn_args: list[str], probe: str = "/healthz", timeout: float = 120.0,
              **env: str) -> tuple[subprocess.Popen, str]:
    """gunicorn serving ``wsgi:app`` on a free loopback port over the bench's database, in production
    mode with JSON logs, started and answering ``probe`` (``timeout``: several workers importing the
    app on a loaded machine); returns the process (in ``b.procs``, stopped with the bench) and its URL."""
    from .harness import _stderr
    from opsboard.config import ROOT
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, DATABASE_URL=b.app_url or b.url, OPSBOARD_ENV="production", OPSBOARD_SECRET_KEY=uuid.uuid4().hex * 2,
               OPSBOARD_LOG_FORMAT="json", PYTHONPATH=str(ROOT), **env)
    web = subprocess.Popen([sys.executable, "-m", "gunicorn", *gunicorn_args, "-b", f"127.0.0.1:{port}",
                            "--log-level", "warning", "wsgi:app"], cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    b.procs.append(web)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url + probe, timeout=5).read()
            return web, url
        except OSError:
            if time.monotonic() > deadline or web.poll() is not None:
                raise RuntimeError("gunicorn did not start: " + _stderr([web]))
            time.sleep(0.2)


def api_worker(b) -> None:
    """POST /api/v1/events (wrk, Idempotency-Key per request) through gunicorn while a real worker relays,
    fans out and delivers each event to a sandbox receiver; then 4x the admitted rate."""
    from .harness import cpu_ceiling
    from .webhooks import _Receiver
    from opsboard.catalogue import active

    seconds = float(os.environ.get("OPSBOARD_BENCH_API_SECONDS", "10"))
    register(active())
    receiver = _Receiver()
    script = tempfile.NamedTemporaryFile("w", prefix="bench-api-", suffix=".lua", delete=False)
    script.write(_LUA)
    script.close()
    try:
        web, url = start_web(b, GUNICORN.split(), OPSBOARD_JOB_MODULES=MODULE)
        (worker,) = b.start_workers(1, WORKER_QUEUES, OPSBOARD_JOB_MODULES=MODULE, OPSBOARD_WEBHOOK_ALLOW="127.0.0.1")

        secret, warm = _tenant(b, "bench-apiw-warm", receiver.url)
        warmed = wrk(url, secret, 2, 8, script.name)  # warm-up: pools, imports, caches
        secret, tenant = _tenant(b, "bench-apiw", receiver.url)
        _drain(b, warm, warmed["statuses"].get(202, 0))  # the warm-up's backlog is not counted below
        lsn = _statements_start(b)
        (pg_cpu0, busy0), web_cpu0, worker_cpu0 = _pg_cpu(b), _cpu(web.pid), _cpu(worker.pid)
        sandbox_cpu0 = _cpu(receiver.proc.pid)
        web_ports, worker_ports = _ports_of(web.pid), _ports_of(worker.pid)
        web_pg0, worker_pg0 = _pg_cpu_of(b, web_ports), _pg_cpu_of(b, worker_ports)
        t0 = time.monotonic()
        res = wrk(url, secret, seconds, 8, script.name)
        wall = time.monotonic() - t0
        web_cpu, worker_cpu = _cpu(web.pid) - web_cpu0, _cpu(worker.pid) - worker_cpu0
        sandbox_cpu = _cpu(receiver.proc.pid) - sandbox_cpu0
        web_pg, worker_pg = _pg_cpu_of(b, web_ports) - web_pg0, _pg_cpu_of(b, worker_ports) - worker_pg0
        pg_cpu, busy = (a - z for a, z in zip(_pg_cpu(b), (pg_cpu0, busy0)))
        ok = res["statuses"].get(202, 0)
        rate = ok / seconds
        other = {k: v for k, v in res["statuses"].items() if k != 202}
        at_end, drained = _drain(b, tenant, ok)
        _statements_end(b, lsn, ok)
        b.add("api_worker", "POST /events, 8 conns: accepted", rate, "req/s",
              f"goal >= {GOAL_RATE:,.0f}; {res['requests']} requests, not 202: {other or 0}, "
              f"socket errors {res['errors']}; gunicorn {GUNICORN}")
        b.add("api_worker", "POST /events, 8 conns: p50", res["p50_ms"], "ms")
        b.add("api_worker", "POST /events, 8 conns: p99", res["p99_ms"], "ms", f"goal < {GOAL_P99_MS:g}")
        b.add("api_worker", "client (wrk) CPU", res["client_cpu_s"] / wall * 100, "% of 1", "one wrk thread")
        b.add("api_worker", "gunicorn CPU per request", web_cpu / max(1, res["requests"]) * 1000, "ms",
              f"{web_cpu / wall * 100:.0f} % of a core; load average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} CPUs")
        b.add("api_worker", "worker CPU per accepted event", worker_cpu / max(1, ok) * 1000, "ms",
              f"{worker_cpu / wall * 100:.0f} % of a core ({WORKER_QUEUES})")
        b.add("api_worker", "PostgreSQL CPU per accepted event", pg_cpu / max(1, ok) * 1000, "ms",
              f"{pg_cpu / wall * 100:.0f} % of a core (this database's backends, from /proc)")
        b.add("api_worker", "PostgreSQL CPU per event: gunicorn's backends", web_pg / max(1, ok) * 1000, "ms",
              "the backends of the web's pooled connections (matched by client port)")
        b.add("api_worker", "PostgreSQL CPU per event: the worker's backends", worker_pg / max(1, ok) * 1000, "ms",
              "the backends of the worker's connections (relay, claims, deliveries, completions)")
        b.add("api_worker", "sandbox receiver CPU per accepted event", sandbox_cpu / max(1, ok) * 1000, "ms",
              f"{sandbox_cpu / wall * 100:.0f} % of a core (the webhook receiver: not the product's)")
        b.add("api_worker", "machine CPU per accepted event", busy / max(1, ok) * 1000, "ms",
              f"{busy / wall * 100:.0f} % of {os.cpu_count()} cores busy (/proc/stat: other processes too); "
              f"{(busy - web_cpu - worker_cpu - pg_cpu - sandbox_cpu - res['client_cpu_s']) / max(1, ok) * 1000:.2f} ms "
              "outside gunicorn, the worker, the backends, the receiver and wrk")
        # What the cores carry at this cost, and what they would carry if the web tier cost nothing: a rate
        # goal above the second needs a cheaper delivery path (worker, its backends), whatever the web does.
        cores = os.cpu_count() or 1
        b.add("api_worker", "CPU ceiling at this cost", cpu_ceiling(cores, busy, ok), "req/s",
              f"{cores} cores / machine CPU per accepted event: the rate that keeps every core busy")
        b.add("api_worker", "CPU ceiling with a free web tier", cpu_ceiling(cores, busy - web_cpu - web_pg, ok),
              "req/s", "the same without gunicorn's and its backends' CPU: the worker, its backends, the "
              "receiver, wrk and the rest alone")
        b.add("api_worker", "relayed / delivered by the end of the load", at_end["relayed"] / max(1, ok) * 100, "%",
              f"{at_end['relayed']} relayed, {at_end['delivered']} delivered of {ok} accepted")
        b.add("api_worker", "backlog drained after the load", drained, "s",
              "every accepted event relayed, fanned out and delivered to the sandbox")
        # Each accepted event is one signed request at the tenant's endpoint (a retried one may be two).
        delivered = {r["webhook_id"] for r in receiver.records("webhook", "/hooks/bench-apiw/")}
        b.add("api_worker", "accepted events not delivered to the sandbox", max(0, ok - len(delivered)), "events",
              f"{len(delivered)} distinct webhook-ids received for {ok} accepted")
        stored = _stored(b, tenant, res)
        b.add("api_worker", "2xx whose event is missing", stored, "events", "goal 0")

        # Overload: the tenant may enqueue a quarter of what phase 2 sustained; 32 connections offer 4x that.
        admitted = max(1.0, rate / 4)
        secret, tenant = _tenant(b, "bench-apiw-over", receiver.url, rate=admitted)
        res = wrk(url, secret, seconds, 32, script.name, delay_ms=32 / (4 * admitted) * 1000)
        codes = res["statuses"]
        fivexx = sum(v for k, v in codes.items() if k >= 500 and k != 503)
        errors = sum(res["errors"].values())
        b.add("api_worker", "4x overload: admitted rate", admitted, "req/s", "the tenant's enqueue_rate")
        b.add("api_worker", "4x overload: offered", res["requests"] / seconds, "req/s",
              ", ".join(f"{k}: {v}" for k, v in sorted(codes.items())))
        b.add("api_worker", "4x overload: p99 (all answers)", res["p99_ms"], "ms")
        b.add("api_worker", "4x overload: 5xx (not 503) + socket errors", fivexx + errors, "answers",
              f"goal 0; socket errors {res['errors']}")
        b.add("api_worker", "4x overload: answers not 202/429/503", sum(v for k, v in codes.items()
                                                                        if k not in (202, 429, 503)), "answers",
              "goal 0")
        b.add("api_worker", "4x overload: 429/503 without Retry-After", res["bare_refusals"], "answers", "goal 0")
        b.add("api_worker", "4x overload: 2xx whose event is missing", _stored(b, tenant, res), "events", "goal 0")
    finally:
        receiver.stop()
        os.unlink(script.name)
        b.stop_workers()
        b.reset()


def _stored(b, tenant, res: dict) -> int:
    """Accepted answers without their stored event: ids looked up one by one, and the tenant's rows counted."""
    ids = res["ids"]
    with b.conn() as c:
        present = c.execute("SELECT count(*) AS n FROM outbox_events WHERE id = ANY(%s::uuid[])",
                            (ids,)).fetchone()["n"]
        rows = c.execute("SELECT count(*) AS n FROM outbox_events WHERE tenant_id = %s", (tenant,)).fetchone()["n"]
    accepted = res["statuses"].get(202, 0)
    if rows != accepted or len(ids) != accepted:
        print(f"  api_worker: {accepted} answers 202, {len(ids)} ids read, {rows} events stored", flush=True)
    return accepted - present
