"""The ``scale`` bench scenario (issue 24): a ten-million-job database and what it costs to run it.

Size: ``--jobs N`` jobs in all (default 10,000,000): 80 % finished (succeeded, dead, cancelled, with
their attempt rows) over the last week, 20 % waiting (pending, a few retryable) from the last two
hours, over 10,000 tenants of very different sizes (the largest holds about 5 % of the jobs, the
smallest a few hundred at 10M); realistic types, queues, error codes, attempt details (some in
Persian) and payloads; 2 users per tenant, one audit row per 20 jobs, resolutions and replays of
some dead jobs (the dead-letter groups).

The jobs go in through ``COPY``: one server session generates the rows (``COPY (SELECT ...) TO
STDOUT``, everything derived from the row number, so any slice can be generated again) and another
loads them (``COPY jobs FROM STDIN``, ``FREEZE``, secondary indexes dropped for the load and built
after it, in the same transaction).  The triggers stay on: counts a trigger maintains are right.
With ``--database URL`` the scenario runs in that database and keeps it; a later run of the same
size reuses the seed (``bench_scale_seed`` records it; the pruner's slice is put back each time).
``OPSBOARD_BENCH_SCALE_PARTS`` (default ``claim,depth,pages,pruner``) runs only some of the measures.

Measured, each beside its goal (in the note): a claim of 64 (EXPLAIN ANALYZE of ``job_claim_many``
and the real :func:`opsboard.jobqueue.claim`, both rolled back), the depth and backlog figures the
dashboard and ``/metrics`` show (the real functions), every dashboard page's server time through the
real views (Flask test client) for operator staff and for one tenant's ops user, and the real pruner
(:class:`worker.services.pruner.Pruner`) on the oldest slice of finished jobs, with claims timed
meanwhile.
"""
from __future__ import annotations

import os
import statistics
import threading
import time
from datetime import datetime, timedelta

#: The seed's shape.
N_TENANTS = 10_000
FINISHED_SHARE = 0.8
#: Finished jobs spread over this span before ``base`` (seed time - 2 h); waiting ones over the 2 h after it.
FINISHED_SPAN = timedelta(days=6, hours=20)
WAITING_SPAN = timedelta(hours=2)

#: (type, queue) drawn uniformly from this list: the repeats are the weights.
_KINDS = ([("email.send", "default")] * 7 + [("webhook.deliver", "default")] * 5 + [("sms.send", "default")] * 2
          + [("sms.otp", "critical"), ("ticket.message_added", "default"), ("ticket.message_added", "default"),
             ("webhook.fanout", "default"), ("report.csv", "bulk"), ("diag.noop", "bulk")])
_TYPES = [k[0] for k in _KINDS]
_QUEUES = [k[1] for k in _KINDS]
#: A dead job's error code: u^2 over this list, so the first ones are the common ones.
_CODES = ["http_410", "smtp_550", "timeout", "http_503", "sms_invalid_number", "http_404", "smtp_552",
          "provider_rate_limited", "tls_handshake", "dns_nxdomain", "payload_invalid", "http_500"]

# u(k): a uniform [0, 1) number derived from the row number g (so a slice can be made again).
_U = "((hashint8extended(g, {k}) & 2147483647)::float8 / 2147483648)"

_JOBS_SQL = f"""
COPY (
SELECT (lpad(to_hex(floor(extract(epoch FROM ts) * 1000)::bigint), 12, '0') || '7' || lpad(to_hex(g %% 4096), 3, '0')
        || '8' || lpad(to_hex(g), 15, '0'))::uuid AS id,
       (%(types)s::text[])[k] AS type, 1::smallint AS version,
       (%(tenants)s::uuid[])[1 + least(%(n_tenants)s - 1, floor(%(n_tenants)s * power({_U.format(k=1)}, 3))::int)]
           AS tenant_id,
       (%(queues)s::text[])[k] AS queue, 100::smallint AS priority,
       CASE WHEN k BETWEEN 8 AND 12 THEN 'evt-' || g END AS idempotency_key,
       CASE WHEN st = 'pending' AND {_U.format(k=7)} < 0.01 THEN 'order-' || (g %% 2000) END AS group_key,
       CASE WHEN k <= 7 THEN jsonb_build_object(
                'to', 'user' || (g %% 1000003) || '@example.com',
                'template', (ARRAY['welcome', 'receipt', 'password_reset', 'weekly_digest'])[1 + g %% 4],
                'locale', CASE WHEN g %% 3 = 0 THEN 'fa' ELSE 'en' END,
                'vars', jsonb_build_object('name', CASE WHEN g %% 3 = 0 THEN 'مریم احمدی' ELSE 'Alex Doe' END,
                                           'order', 'A-' || (g %% 99991)))
            WHEN k <= 12 THEN jsonb_build_object(
                'endpoint', 'https://hooks.example.com/t/' || (g %% 5003), 'event', 'order.paid',
                'body', jsonb_build_object('order_id', g, 'amount', (g %% 9000) + 100, 'currency', 'IRR'))
            WHEN k <= 15 THEN jsonb_build_object('to', '+98912' || lpad((g %% 9999991)::text, 7, '0'),
                                                 'text', 'کد ورود شما: ' || (100000 + g %% 900000))
            ELSE jsonb_build_object('ticket', g %% 100003, 'n', g) END AS payload,
       st::job_status AS status,
       CASE st WHEN 'succeeded' THEN 1 + ({_U.format(k=4)} < 0.06)::int
               WHEN 'dead' THEN CASE WHEN {_U.format(k=4)} < 0.2 THEN 1 ELSE 3 END
               WHEN 'retryable' THEN 1 ELSE 0 END AS attempts,
       3 AS max_attempts,
       CASE WHEN st = 'retryable' THEN ts + interval '1 minute'
            WHEN st = 'pending' AND {_U.format(k=6)} < 0.03 THEN ts + interval '3 hours' ELSE ts END AS available_at,
       NULL::timestamptz AS expires_at, NULL::text AS locked_by, NULL::timestamptz AS locked_until,
       CASE st WHEN 'dead' THEN (%(codes)s::text[])[1 + floor({len(_CODES)} * power({_U.format(k=5)}, 2))::int]
               WHEN 'retryable' THEN CASE WHEN g %% 2 = 0 THEN 'http_503' ELSE 'timeout' END END AS last_error_code,
       CASE WHEN {_U.format(k=8)} < 0.3 THEN 'req-' || to_hex(hashint8extended(g, 9)) END AS correlation_id,
       CASE WHEN k BETWEEN 8 AND 12 THEN md5(g::text)::uuid END AS event_id,
       NULL::uuid AS replay_of,
       ts AS created_at,
       CASE WHEN st IN ('succeeded', 'dead', 'retryable') THEN ts + interval '40 ms' END AS started_at,
       CASE st WHEN 'cancelled' THEN ts + interval '5 minutes'
               WHEN 'succeeded' THEN ts + make_interval(secs => 0.05 + 2 * {_U.format(k=10)})
               WHEN 'dead' THEN ts + interval '90 seconds' END AS finished_at
FROM (SELECT g, ts, 1 + floor({len(_KINDS)} * {_U.format(k=2)})::int AS k,
             CASE WHEN g <= %(finished)s THEN
                      CASE WHEN {_U.format(k=3)} < 0.92 THEN 'succeeded' WHEN {_U.format(k=3)} < 0.95 THEN 'dead'
                           ELSE 'cancelled' END
                  ELSE CASE WHEN {_U.format(k=3)} < 0.95 THEN 'pending' ELSE 'retryable' END END AS st
      FROM (SELECT g, CASE WHEN g <= %(finished)s
                           THEN %(base)s::timestamptz - (%(finished)s - g) * %(finished_step)s::float8 * interval '1 s'
                           ELSE %(base)s::timestamptz + (g - %(finished)s) * %(waiting_step)s::float8 * interval '1 s'
                      END AS ts
            FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) g) s) r
WHERE %(only)s::text[] IS NULL OR st = ANY(%(only)s::text[])
) TO STDOUT (FORMAT binary)
"""

_JOB_COLUMNS = ("id, type, version, tenant_id, queue, priority, idempotency_key, group_key, payload, status, attempts, "
                "max_attempts, available_at, expires_at, locked_by, locked_until, last_error_code, correlation_id, "
                "event_id, replay_of, created_at, started_at, finished_at")

#: Attempt rows of the jobs in ``source`` (a table or temp table of jobs): earlier attempts failed.
_ATTEMPTS_SQL = """
INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error_code, detail, duration_ms,
                          tenant_id)
SELECT j.id, a, 'worker-' || (1 + (hashint8extended(a, 3) & 7)) || '.' || (1 + abs(hashtext(j.id::text)) % 4),
       j.started_at + (a - 1) * interval '30 s', j.started_at + (a - 1) * interval '30 s' + interval '35 ms',
       CASE WHEN a < j.attempts THEN 'retryable'
            ELSE CASE j.status WHEN 'succeeded' THEN 'succeeded' WHEN 'dead' THEN 'dead' ELSE 'retryable' END END,
       c.code,
       CASE c.code WHEN 'http_410' THEN 'receiver answered 410 Gone (endpoint removed)'
            WHEN 'http_404' THEN 'receiver answered 404 Not Found'
            WHEN 'http_503' THEN 'receiver answered 503 Service Unavailable; retry after 30 s'
            WHEN 'http_500' THEN 'receiver answered 500 Internal Server Error'
            WHEN 'smtp_550' THEN '550 5.1.1 recipient mailbox unavailable'
            WHEN 'smtp_552' THEN '552 5.2.2 mailbox full'
            WHEN 'sms_invalid_number' THEN 'شماره گیرنده نامعتبر است (کد خطای اپراتور ۲۱)'
            WHEN 'timeout' THEN 'no answer within 10 s'
            WHEN 'provider_rate_limited' THEN 'provider throttled the account: 429 Too Many Requests'
            WHEN 'tls_handshake' THEN 'TLS handshake failed: certificate has expired'
            WHEN 'dns_nxdomain' THEN 'DNS lookup failed: NXDOMAIN'
            WHEN 'payload_invalid' THEN 'payload rejected: field "to" is not an address' END,
       35, j.tenant_id
FROM {source} j
CROSS JOIN LATERAL generate_series(1, j.attempts) a
CROSS JOIN LATERAL (SELECT CASE WHEN a < j.attempts THEN coalesce(j.last_error_code, 'http_503')
                                WHEN j.status IN ('dead', 'retryable') THEN j.last_error_code END AS code) c
WHERE j.attempts > 0
"""

_TENANTS_SQL = """
INSERT INTO tenants (id, slug, name, weight)
SELECT (lpad(to_hex(1700000000000 + g), 12, '0') || '7000' || '8' || lpad(to_hex(g), 15, '0'))::uuid,
       'scale-' || g, CASE WHEN g %% 5 = 0 THEN 'شرکت نمونه ' || g ELSE 'Scale tenant ' || g END, 1 + (g %% 10 = 0)::int
FROM generate_series(1, %(n)s) g
ON CONFLICT (slug) DO NOTHING
"""

_USERS_SQL = """
WITH u AS (
    INSERT INTO users (id, email, display_name, password_hash)
    SELECT (lpad(to_hex(1700000000000 + g), 12, '0') || '7001' || '8' || lpad(to_hex(g), 15, '0'))::uuid,
           'staff' || g || '@scale.example.com', 'Staff ' || g, %(hash)s
    FROM generate_series(1, %(n)s * 2) g
    ON CONFLICT (email) DO NOTHING
    RETURNING id, email
)
INSERT INTO memberships (user_id, tenant_id, role)
SELECT u.id, t.id, CASE WHEN substring(u.email FROM 'staff(\\d+)@')::int %% 2 = 0 THEN 'ops' ELSE 'support_agent' END::user_role
FROM u JOIN tenants t ON t.slug = 'scale-' || (1 + (substring(u.email FROM 'staff(\\d+)@')::int - 1) / 2)
ON CONFLICT DO NOTHING
"""

_AUDIT_SQL = f"""
INSERT INTO audit_log (id, at, actor_label, action, target_type, target_id, tenant_id, reason, before, after, outcome)
SELECT (lpad(to_hex(floor(extract(epoch FROM at) * 1000)::bigint), 12, '0') || '7002' || '8' || lpad(to_hex(g), 15, '0'))::uuid,
       at, 'staff' || (1 + g %% 2000) || '@scale.example.com', a.action, a.target_type, md5(g::text)::uuid::text,
       CASE WHEN g %% 10 = 0 THEN NULL
            ELSE (%(tenants)s::uuid[])[1 + least(%(n_tenants)s - 1, floor(%(n_tenants)s * power({_U.format(k=11)}, 3))::int)] END,
       CASE WHEN g %% 4 = 0 THEN 'گیرنده دوباره فعال شد' ELSE 'receiver fixed, see INC-' || (g %% 977) END,
       '{{"status": "dead"}}'::jsonb, '{{"status": "pending"}}'::jsonb,
       CASE WHEN g %% 50 = 0 THEN 'denied' ELSE 'done' END
FROM (SELECT g, now() - (%(n)s - g) * (30 * 86400.0 / %(n)s) * interval '1 s' AS at,
             (ARRAY['job.replay', 'job.replay', 'job.replay', 'job.resolve', 'job.cancel', 'job.cancel_many',
                    'tenant.limits', 'pause', 'resume', 'webhook_endpoint.create', 'template.publish',
                    'alert.acknowledge'])[1 + g %% 12] AS action, 'job' AS target_type
      FROM generate_series(1, %(n)s) g) a
"""


def _secondary_indexes(c, tables: tuple[str, ...]) -> list[tuple[str, str]]:
    from .tickets import _secondary_indexes as same
    return same(c, tables)


def _uuid7_of(ts: datetime, g: int):
    """The id :data:`_JOBS_SQL` gives row ``g`` made at ``ts`` (for restoring a slice)."""
    import uuid
    ms = int(ts.timestamp() * 1000)
    return uuid.UUID(f"{ms:012x}7{g % 4096:03x}8{g:015x}")


def _shape(total: int, base: datetime) -> dict:
    finished = int(total * FINISHED_SHARE)
    waiting = total - finished
    return {"finished": finished, "waiting": waiting, "base": base,
            "finished_step": FINISHED_SPAN.total_seconds() / max(1, finished),
            "waiting_step": WAITING_SPAN.total_seconds() / max(1, waiting),
            "types": _TYPES, "queues": _QUEUES, "codes": _CODES, "n_tenants": N_TENANTS}


def _copy_jobs(src, dst, params: dict, table: str = "jobs", freeze: bool = False) -> int:
    """Pipe generated job rows from ``src`` into ``table`` on ``dst`` (both server-side; Python moves bytes)."""
    n = 0
    option = ", FREEZE" if freeze else ""
    with src.cursor() as out_cur, dst.cursor() as in_cur:
        with out_cur.copy(_JOBS_SQL, params) as out, \
                in_cur.copy(f"COPY {table} ({_JOB_COLUMNS}) FROM STDIN (FORMAT binary{option})") as into:
            for chunk in out:
                into.write(chunk)
                n += 1
    return n


def seed(b, total: int) -> tuple[dict, float | None]:
    """Fill the database (or find it filled at this size): the seed's shape, and the build time (None: reused)."""
    from opsboard import auth, metrics
    with b.conn() as c:
        c.execute("CREATE TABLE IF NOT EXISTS bench_scale_seed (total bigint NOT NULL, base timestamptz NOT NULL,"
                  " tenants uuid[] NOT NULL)")
        row = c.execute("SELECT total, base, tenants FROM bench_scale_seed").fetchone()
        if row and row["total"] == total:
            return {**_shape(total, row["base"]), "tenants": row["tenants"]}, None
    t0 = time.perf_counter()
    with b.conn() as c:
        c.execute(_TENANTS_SQL, {"n": N_TENANTS})
        tenants = [r["id"] for r in c.execute(
            "SELECT id FROM tenants WHERE slug LIKE 'scale-%%' ORDER BY substr(slug, 7)::int").fetchall()]
        auth.ensure_tenant(c, "operator", is_operator=True)
        staff = auth.create_user(c, "scale-ops@opsboard.local", "bench-password", "ops", "operator")
        auth.create_user(c, "scale-tenant-ops@opsboard.local", "bench-password", "ops", "scale-1")
        hash_ = c.execute("SELECT password_hash FROM users WHERE id = %s", (staff["id"],)).fetchone()["password_hash"]
        c.execute(_USERS_SQL, {"n": N_TENANTS, "hash": hash_})
        base = c.execute("SELECT date_trunc('second', now()) - %s::interval AS b", (WAITING_SPAN,)).fetchone()["b"]
    shape = {**_shape(total, base), "tenants": tenants}
    with b.conn() as src, b.conn() as dst:
        indexes = _secondary_indexes(dst, ("jobs", "job_attempts"))
        with dst.transaction():
            dst.execute("SET LOCAL maintenance_work_mem = '512MB'")
            # Emptied in this transaction: COPY ... FREEZE writes the rows frozen and all-visible (no
            # vacuum pass over 10M rows before index-only scans work).  Scratch tables only.
            dst.execute("TRUNCATE jobs, job_attempts CASCADE")
            for name, _ in indexes:
                dst.execute(f'DROP INDEX "{name}"')
            _copy_jobs(src, dst, {**shape, "lo": 1, "hi": total, "only": None}, freeze=True)
            t1 = time.perf_counter()
            dst.execute(_ATTEMPTS_SQL.format(source="jobs"))
            # Dead-letter groups in every state: some resolved or ignored, some replayed (a new job).
            dst.execute("""INSERT INTO job_resolutions (job_id, resolution, reason, actor)
                           SELECT id, CASE WHEN hashtext(id::text) % 2 = 0 THEN 'resolved' ELSE 'ignored' END,
                                  'receiver fixed; see INC-' || abs(hashtext(id::text) % 977), 'staff1@scale.example.com'
                           FROM jobs WHERE status = 'dead' AND abs(hashtext(id::text)) % 10 < 3""")
            dst.execute("""INSERT INTO jobs (id, type, tenant_id, queue, payload, status, attempts, max_attempts,
                                             available_at, replay_of, created_at, started_at, finished_at)
                           SELECT (left(id::text, 14) || 'f' || right(id::text, 21))::uuid, type, tenant_id, queue,
                                  payload, 'succeeded', 1, max_attempts, finished_at, id, finished_at,
                                  finished_at, finished_at
                           FROM jobs WHERE status = 'dead' AND abs(hashtext(id::text)) % 10 = 3""")
            print(f"  (jobs and attempts loaded in {time.perf_counter() - t0:.0f} s; "
                  f"attempts and dead letters {time.perf_counter() - t1:.0f} s; building indexes)", flush=True)
            for _, definition in indexes:
                dst.execute(definition)
        dst.execute(_AUDIT_SQL, {"n": max(1000, total // 20), "tenants": tenants, "n_tenants": N_TENANTS})
        for table in ("jobs", "job_attempts", "audit_log", "tenants", "users", "memberships", "job_resolutions"):
            dst.execute(f"VACUUM ANALYZE {table}")
        metrics.sample_depth(dst)  # what the leader's depth service keeps fresh
        dst.execute("DELETE FROM bench_scale_seed")
        dst.execute("INSERT INTO bench_scale_seed (total, base, tenants) VALUES (%s, %s, %s)", (total, base, tenants))
    return shape, time.perf_counter() - t0


def restore_slice(b, shape: dict, hi: int) -> int:
    """Put back the succeeded and cancelled jobs of rows 1..``hi`` the pruner deleted (with their attempts)."""
    with b.conn() as src, b.conn() as dst:
        with dst.transaction():
            dst.execute("CREATE TEMP TABLE scale_restore (LIKE jobs) ON COMMIT DROP")
            _copy_jobs(src, dst, {**shape, "lo": 1, "hi": hi, "only": ["succeeded", "cancelled"]},
                       table="scale_restore")
            dst.execute("CREATE TEMP TABLE scale_restored (id uuid) ON COMMIT DROP")
            dst.execute("""WITH ins AS (INSERT INTO jobs SELECT * FROM scale_restore ON CONFLICT (id) DO NOTHING
                                        RETURNING id)
                           INSERT INTO scale_restored SELECT id FROM ins""")
            dst.execute(_ATTEMPTS_SQL.format(source="(SELECT j.* FROM jobs j JOIN scale_restored USING (id))"))
            n = dst.execute("SELECT count(*) AS n FROM scale_restored").fetchone()["n"]
        dst.execute("VACUUM ANALYZE jobs")
        dst.execute("VACUUM ANALYZE job_attempts")
    return n


# ---------------------------------------------------------------- measures

def _ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t1 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t1) * 1000)
    return statistics.median(times)


#: Puts the jobs a measured claim took back as they were (pending or retryable, the attempt given back).
_UNCLAIM_SQL = """
UPDATE jobs SET status = CASE WHEN attempts > 1 THEN 'retryable' ELSE 'pending' END::job_status,
                attempts = attempts - 1, locked_by = NULL, locked_until = NULL, started_at = NULL
WHERE id = ANY(%s::uuid[]) AND locked_by = 'bench-scale'
"""


def _worker_claims(c, holds, runs: int, warm: int = 5, state: dict | None = None) -> list[float]:
    """Claims of 64 from the default queue as a worker makes them: ``jobqueue.claim`` on an autocommit
    connection (its own short transaction; prepared by psycopg after a few runs, as the worker's is),
    the round-robin cursor and ``locked_next`` carried from claim to claim; each claim's jobs are put back after it
    (``_UNCLAIM_SQL``, not timed), so the seed stays as it was.  Times in ms, the ``warm`` first left out;
    ``state`` carries the cursor and ``locked_next`` from one call to the next."""
    from opsboard import jobqueue
    state = {} if state is None else state
    times, after, locked_first = [], state.get("after"), state.get("locked_first", False)
    for i in range(warm + runs):
        t1 = time.perf_counter()
        got = jobqueue.claim(c, "default", "bench-scale", 64, 30, holds=holds, after_tenant=after,
                             locked_first=locked_first)
        ms = (time.perf_counter() - t1) * 1000
        c.execute(_UNCLAIM_SQL, ([r["id"] for r in got.rows],))
        if len(got.rows) != 64:
            raise RuntimeError(f"the claim took {len(got.rows)} jobs, not 64")
        after, locked_first = got.next_after_tenant, got.locked_next
        if i >= warm:
            times.append(ms)
    state.update(after=after, locked_first=locked_first)
    return times


def measure_claim(b, total: int, shape: dict) -> None:
    from opsboard import db as dbmod, jobqueue, pauses
    with b.conn() as c:
        holds = pauses.read_holds(c)
        params = jobqueue.claim_params("default", "bench-scale", 64, 30, holds=holds)
        times, buffers, planning = [], [], []
        for _ in range(5):
            with c.transaction(force_rollback=True):
                plan = c.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + dbmod.queries["job_claim_many"],
                                 params).fetchone()
                doc = (plan["QUERY PLAN"] if isinstance(plan, dict) else plan[0])[0]
                times.append(float(doc["Execution Time"]))
                planning.append(float(doc["Planning Time"]))
                top = doc["Plan"]
                buffers.append(int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0)))
        real = _worker_claims(c, holds, 20)
    note = f"{shape['waiting']:,} waiting over {N_TENANTS:,} tenants, {total:,} jobs"
    b.add("scale", "claim of 64: EXPLAIN ANALYZE (job_claim_many)", statistics.median(times), "ms",
          f"goal < 5 ms; median of 5, {statistics.median(buffers):,.0f} buffers, planning "
          f"{statistics.median(planning):.1f} ms apart; {note}")
    b.add("scale", "claim of 64: jobqueue.claim()", statistics.median(real), "ms",
          f"goal < 5 ms; median of 20 as a worker claims (autocommit, prepared, round-robin cursor; p90 "
          f"{sorted(real)[17]:.1f} ms), each put back after it; the round trip and the rows' decoding included")


#: Runs a leader service's ``run_once`` in a process of its own (the bench never imports the
#: worker: tests/unit/test_import_contract.py), as the leader does, and prints its timings.
_SERVICE_SCRIPT = """
import json, sys, time
from opsboard.db import connect
module, make, runs = sys.argv[2], sys.argv[3], int(sys.argv[4])
scope = {}
exec(f"from {module} import *", scope)
service = eval(make, scope)
idle = service.interval
out = []
with connect(sys.argv[1]) as conn:
    for _ in range(runs):
        # One run: run_once again after the interval it sets, as the leader does, until it is back at
        # its idle interval (a paced backlog service works in slices with rests between them).
        t, n, slices = time.perf_counter(), 0, 0
        while True:
            n += service.run_once(conn)
            slices += 1
            if service.interval >= idle:
                break
            time.sleep(service.interval)
        out.append({"ms": (time.perf_counter() - t) * 1000, "n": n, "slices": slices})
print(json.dumps(out))
"""


def run_service(b, module: str, make: str, runs: int = 1) -> list[dict]:
    """``runs`` runs of ``make``'s (an expression, e.g. ``DepthSampler()``) service in a child process: each
    calls ``run_once``, and again after the interval it set while that is shorter than its idle one (the
    slices and rests of a paced backlog, as the leader runs them)."""
    import json
    import os
    import subprocess
    import sys

    from opsboard.config import ROOT
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPSBOARD_ENV": "development"}
    done = subprocess.run([sys.executable, "-c", _SERVICE_SCRIPT, b.url, module, make, str(runs)], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{module} {make}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_depth(b, total: int, shape: dict | None = None) -> None:
    from opsboard import metrics
    from opsboard.auth import TenantScope
    from opsboard.db import Database
    note = f"goal < 50 ms; median of 3 at {total:,} jobs"
    everyone = TenantScope(all=True)
    runs = run_service(b, "worker.services.depth", "DepthSampler()", 3)
    b.add("scale", "depth service run_once (leader)", statistics.median(r["ms"] for r in runs), "ms", note)
    with b.conn() as c:
        b.add("scale", "metrics.queue_health (all tenants)", _ms(lambda: metrics.queue_health(c, everyone), 3), "ms",
              note)
        # What the dashboard shows: the tenants page reads its page of tenants from the maintained counts
        # (tenant_backlog_page); a tenant's own page counts that tenant's jobs live (tenant_backlog).
        b.add("scale", "metrics.tenant_backlog_page (tenants page)",
              _ms(lambda: metrics.tenant_backlog_page(c, everyone), 3), "ms", note)
        if shape:
            largest = shape["tenants"][0]
            b.add("scale", "metrics.tenant_backlog (largest tenant)",
                  _ms(lambda: metrics.tenant_backlog(c, everyone, tenant_id=largest), 3), "ms",
                  note + " (the tenant detail page's figures)")
    database = Database(b.url, min_size=1, max_size=2).open()
    try:
        b.add("scale", "metrics.prometheus_text (/metrics body)", _ms(lambda: metrics.prometheus_text(database), 3),
              "ms", note)
    finally:
        database.close()


def pages(c, shape: dict, *, tenant_scoped: bool) -> list[tuple[str, str]]:
    """The dashboard pages and realistic searches, as (label, path)."""
    heavy, light = shape["tenants"][0], shape["tenants"][N_TENANTS // 2]
    dead = c.execute("SELECT id FROM jobs WHERE status = 'dead' AND tenant_id = %s ORDER BY id DESC LIMIT 1",
                     (heavy,)).fetchone()["id"]
    mid = c.execute("SELECT id FROM jobs WHERE tenant_id = %s ORDER BY id DESC OFFSET 50 LIMIT 1",
                    (heavy,)).fetchone()["id"]
    deep = c.execute("SELECT id FROM jobs WHERE tenant_id = %s AND id < %s ORDER BY id DESC LIMIT 1",
                     (heavy, _uuid7_of(shape["base"] - FINISHED_SPAN / 2, 0))).fetchone()["id"]
    # The tenants page's keyset cursor after its first page (tenant_depth, migration 0049).
    cut = c.execute("SELECT waiting, tenant_id FROM tenant_depth ORDER BY waiting DESC, tenant_id DESC"
                    " OFFSET 99 LIMIT 1").fetchone()
    out = [("queue health, full page", "/queues/"), ("queue health (htmx)", "/queues/_health"),
           ("throughput charts", "/queues/_charts"),
           ("tenants, full page", "/tenants/"), ("tenants backlog (htmx)", "/tenants/_backlog"),
           ("tenants, page 2 (keyset)", f"/tenants/_backlog?after={cut['waiting']}.{cut['tenant_id']}" if cut
            else "/tenants/_backlog"),
           ("tenant detail, largest", f"/tenants/{heavy}"),
           ("job list, full page", "/jobs/"), ("job list, newest", "/jobs/_rows"),
           ("job list, page 2 (keyset)", f"/jobs/_rows?before={mid}"),
           ("job list, 3 days back (keyset)", f"/jobs/_rows?before={deep}"),
           ("job list, status=pending", "/jobs/_rows?status=pending"),
           ("job list, status=dead", "/jobs/_rows?status=dead"),
           ("job list, status=cancelled", "/jobs/_rows?status=cancelled"),
           ("job list, queue=bulk", "/jobs/_rows?queue=bulk"),
           ("search: type=sms.otp", "/jobs/_rows?type=sms.otp"),
           ("search: type + status=dead", "/jobs/_rows?type=webhook.deliver&status=dead"),
           ("search: error_code=smtp_550", "/jobs/_rows?error_code=smtp_550"),
           ("search: rare error_code", "/jobs/_rows?error_code=http_500"),
           ("search: q=tls_handshake (code)", "/jobs/_rows?q=tls_handshake"),
           ("search: q=410 Gone (detail)", "/jobs/_rows?q=410%20Gone"),
           ("search: q=Persian detail", "/jobs/_rows?q=" + "نامعتبر"),
           ("search: q=id prefix", f"/jobs/_rows?q={str(dead)[:13]}"),
           ("search: q=no match", "/jobs/_rows?q=zzqx-nothing"),
           # The detail window set by hand (24 hours instead of the default hour): the planner's choice.
           ("search: q=410 Gone, created from 24 h back", "/jobs/_rows?q=410%20Gone&since="
            + (shape["base"] + WAITING_SPAN - timedelta(hours=24)).isoformat()[:19]),
           ("search: last hour", "/jobs/_rows?since=" + (shape["base"] + WAITING_SPAN / 2).isoformat()[:19])]
    if not tenant_scoped:
        out += [("dead-letter groups, tenant=small", f"/dead/_groups?tenant_id={light}"),
                ("search: tenant=largest", f"/jobs/_rows?tenant_id={heavy}"),
                ("search: tenant=small", f"/jobs/_rows?tenant_id={light}"),
                ("search: tenant=small + status=dead", f"/jobs/_rows?tenant_id={light}&status=dead")]
    out += [("job detail (dead)", f"/jobs/{dead}"), ("job payload", f"/jobs/{dead}/payload"),
            ("cancel-many preview, type", "/jobs/cancel-many/confirm?type=email.send"),
            ("replay-many preview, group", "/jobs/replay-many/confirm?type=email.send&error_code=smtp_550"),
            ("dead letters, full page", "/dead/"), ("dead-letter groups (htmx)", "/dead/_groups"),
            ("dead-letter groups, all", "/dead/_groups?show=all"),
            ("dead-letter groups, queue=bulk", "/dead/_groups?queue=bulk"),
            ("audit, full page", "/audit/"), ("audit rows (htmx)", "/audit/_rows"),
            ("audit, action=job", "/audit/_rows?action=job"),
            ("alerts", "/alerts/")]
    if not tenant_scoped:  # operator staff only
        out += [("workers", "/workers/"), ("/metrics (signed-in staff)", "/metrics")]
    return out


#: ``OPSBOARD_BENCH_SCALE_CLOCK=seed``: the pages run with the database's clock set back to a minute
#: after the seed's newest attempt.  Those end at the time of the build, so every window of attempts
#: ("last hour", "24 hours") is full just after it and empty an hour later; this measures the pages
#: with the windows a steady load keeps full, whenever it runs.  A ``benchclock.now()`` first on the
#: database's search_path (the pool passes its own ``options``), removed at the end: a kept database only.
CLOCK_ENV = "OPSBOARD_BENCH_SCALE_CLOCK"


def _set_clock(b, on: bool) -> None:
    with b.conn() as c:
        name = c.execute("SELECT current_database() AS d").fetchone()["d"]
        if on:
            c.execute("CREATE SCHEMA IF NOT EXISTS benchclock")
            c.execute("CREATE OR REPLACE FUNCTION benchclock.now() RETURNS timestamptz LANGUAGE sql STABLE AS $$"
                      " SELECT pg_catalog.now() - (SELECT pg_catalog.now() - base - interval '2 hours'"
                      " - interval '1 minute' FROM bench_scale_seed) $$")
            c.execute(f'ALTER DATABASE "{name}" SET search_path = benchclock, pg_catalog, public')
        else:
            c.execute(f'ALTER DATABASE "{name}" RESET search_path')
            c.execute("DROP SCHEMA IF EXISTS benchclock CASCADE")


def measure_pages(b, total: int, shape: dict, only: str | None = None) -> None:
    from opsboard.db import Database
    from opsboard.web.app import create_app
    from .harness import median_get_ms, web_login
    clock = os.environ.get(CLOCK_ENV) == "seed"
    if clock:
        _set_clock(b, True)
    with b.conn() as c:
        views = {"staff": pages(c, shape, tenant_scoped=False), "tenant": pages(c, shape, tenant_scoped=True)}
    database = Database(b.url, min_size=1, max_size=2).open()
    try:
        app = create_app({"OPSBOARD": b.config.replace(database_url=b.url, mode="test",
                                                       secret_key="bench-" + "x" * 32), "DATABASE": database})
        for who, email in (("staff", "scale-ops@opsboard.local"), ("tenant", "scale-tenant-ops@opsboard.local")):
            client = web_login(app, email)
            for label, path in views[who]:
                if only and only not in label:
                    continue
                b.add("scale", f"{who}: {label}", median_get_ms(client, path, runs=3), "ms",
                      f"goal < 50 ms; median of 3 at {total:,} jobs"
                      + (" (largest tenant's ops user)" if who == "tenant" else "")
                      + ("; clock at the seed's" if clock else ""))
    finally:
        database.close()
        if clock:
            _set_clock(b, False)


#: The pruner's runs: the product's default pace, and flat out (no rest between batches) beside it.
PRUNER_PACES = (("paced", "PrunerConfig().pace"), ("flat out", "Pace(duty=1.0)"))


def measure_pruner(b, total: int, shape: dict) -> None:
    """The real pruner on the oldest slice of finished jobs, with claims timed before and meanwhile: at the
    product's default pace, then flat out (the slice put back between them)."""
    from opsboard import pauses
    slice_rows = max(10_000, min(200_000, shape["finished"] // 20))
    cutoff = shape["base"] - (shape["finished"] - slice_rows) * timedelta(seconds=shape["finished_step"])
    for label, pace in PRUNER_PACES:
        with b.conn() as c:
            holds = pauses.read_holds(c)
            before = _worker_claims(c, holds, 20)
            now = c.execute("SELECT now() AS n").fetchone()["n"]
        during: list[float] = []
        stop = threading.Event()

        def claimer():
            with b.conn() as c2:
                state: dict = {}
                _worker_claims(c2, holds, 0, state=state)  # the warm-up: prepared, as in a running worker
                while not stop.is_set():
                    during.extend(_worker_claims(c2, holds, 1, warm=0, state=state))
                    time.sleep(0.02)

        thread = threading.Thread(target=claimer, daemon=True)
        days = (now - cutoff).total_seconds() / 86400
        thread.start()
        try:
            [run] = run_service(b, "worker.services.pruner",
                                f"Pruner(PrunerConfig(retention_days={days!r}, pace={pace}))")
        finally:
            stop.set()
            thread.join()
        deleted, elapsed = run["n"], run["ms"] / 1000
        suffix = "" if label == "paced" else f" ({label})"
        b.add("scale", "pruner: finished jobs deleted per second" + suffix, deleted / elapsed, "jobs/s",
              f"goal >= 20,000 jobs/s; {deleted:,} jobs (with attempts) in {elapsed:.1f} s, {run['slices']} "
              + ("slice(s) of 1 s with their rests (the default pace: deleting half the time)" if label == "paced"
                 else "slice(s) without rests"))
        b.add("scale", "claim of 64 while the pruner runs" + suffix,
              statistics.median(during) if during else float("nan"), "ms",
              f"goal: not slower; {len(during)} claims, p90 "
              f"{sorted(during)[int(len(during) * 0.9)] if during else 0:.1f} ms; "
              f"before it: median {statistics.median(before):.1f} ms")
        t1 = time.perf_counter()
        n = restore_slice(b, shape, slice_rows + 10)
        print(f"  (put {n:,} pruned jobs back in {time.perf_counter() - t1:.0f} s)", flush=True)


def run(b) -> None:
    """A 10,000,000-job database (--jobs N): claim, depth, every dashboard page, the pruner, beside their goals."""
    total = b.jobs or 10_000_000
    if total < 10_000:
        from opsboard.errors import UsageError
        raise UsageError("the scale scenario needs --jobs 10000 or more")
    shape, built = seed(b, total)
    if built is None:
        print(f"  (reused the seed of {total:,} jobs already in the database)", flush=True)
    else:
        with b.conn() as c:
            size = c.execute("SELECT pg_size_pretty(pg_database_size(current_database())) AS s").fetchone()["s"]
        b.add("scale", "build: jobs, attempts, indexes (COPY)", built, "s", f"{total:,} jobs; database {size}")
    parts = os.environ.get("OPSBOARD_BENCH_SCALE_PARTS", "claim,depth,pages,pruner").split(",")
    for name, measure in (("claim", measure_claim), ("depth", measure_depth), ("pages", measure_pages),
                          ("pruner", measure_pruner)):
        if name in parts:
            measure(b, total, shape)
