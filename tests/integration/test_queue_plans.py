"""The hot statements stay linear in their batch, whatever the planner's statistics say.

Read from EXPLAIN ANALYZE of the very statements the worker runs: every plan
node's rows (per loop, times its loops) plus the rows its filters dropped.
A plan that walks every running job for every outcome touches the product of
the two; a plan driven by the batch touches a small multiple of it.  Which
plan the server picks depends on statistics these tests cannot fully stage
(the worker's run that showed 0.4 s per outcome batch had 1,500 jobs running
under statistics that counted none), so each test also pins the shape that
makes any plan linear: every row lock reads its job through the primary key.
"""
import json
from datetime import timedelta

import psycopg
from psycopg.rows import dict_row

from opsboard import db, jobqueue
from opsboard.db import SESSION_OPTIONS
from opsboard.jobqueue import NewJob, OutcomeRecord

N = 600


def rows_touched(node: dict) -> int:
    loops = node.get("Actual Loops", 1) or 1
    n = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
         + node.get("Rows Removed by Join Filter", 0)) * loops
    return n + sum(rows_touched(child) for child in node.get("Plans", []))


def ready_index_rows(node: dict) -> int:
    """Rows read through the ready indexes (returned or filtered out), times their loops."""
    n = 0
    if node.get("Index Name") in ("jobs_ready_idx", "jobs_ready_type_idx"):
        n = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * (node.get("Actual Loops", 1) or 1)
    return n + sum(ready_index_rows(child) for child in node.get("Plans", []))


def locked_scans(node: dict, under_lock: bool = False) -> list[str]:
    """The index (or scan type) each row lock of the plan reads its rows through."""
    found = []
    if under_lock and "Relation Name" in node:
        # A bitmap heap scan reads through the index of its bitmap index scan.
        bitmap = [c.get("Index Name") for c in node.get("Plans", []) if c["Node Type"] == "Bitmap Index Scan"]
        found.append(node.get("Index Name") or (bitmap[0] if len(bitmap) == 1 else node["Node Type"]))
    for child in node.get("Plans", []):
        found += locked_scans(child, under_lock or node["Node Type"] == "LockRows")
    return found


def explain(conn, name: str, params: dict) -> dict:
    """EXPLAIN ANALYZE with the generic plan: the worker's statements are prepared, and after five runs
    the server may keep a plan made without the parameters' values (the estimates that mislead)."""
    conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
    try:
        return conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + db.queries[name], params).fetchone()["QUERY PLAN"][0]
    finally:
        conn.execute("SET LOCAL plan_cache_mode = auto")


def explain_all(conn, name: str, params: dict) -> dict:
    """:func:`explain`, with the plans of the statements it runs inside functions (the claim locks and
    updates in opsboard_claim_locked, migration 0065) as the top plan's last children, so that every
    check below reads them too: auto_explain's plans (with their actual rows), sent back as notices.
    PL/pgSQL plans are cached plans: the generic one is forced for them as for the statement."""
    conn.execute("LOAD 'auto_explain'")
    for setting, value in (("auto_explain.log_nested_statements", "on"), ("auto_explain.log_level", "notice"),
                           ("auto_explain.log_format", "json"), ("auto_explain.log_analyze", "on"),
                           ("auto_explain.log_min_duration", "0")):
        conn.execute("SELECT set_config(%s, %s, true)", (setting, value))
    nested: list[dict] = []

    def keep(diag):
        text = diag.message_primary or ""
        if text.startswith("duration:") and "plan:" in text:
            doc = json.loads(text.split("plan:", 1)[1])
            if not doc["Query Text"].lstrip().upper().startswith(("EXPLAIN", "SELECT SET_CONFIG")):
                nested.append(doc["Plan"])

    conn.add_notice_handler(keep)
    try:
        plan = explain(conn, name, params)
    finally:
        conn.remove_notice_handler(keep)
        conn.execute("SELECT set_config('auto_explain.log_min_duration', '-1', true)")
    plan["Plan"].setdefault("Plans", []).extend(nested)
    return plan


def test_recording_a_batch_of_outcomes_reads_each_job_a_few_times_not_every_running_job(conn, tenant, t0):
    jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": str(i)}, tenant["id"]) for i in range(N)])
    # Statistics taken while nothing runs: the planner believes "running" is empty.
    conn.execute("ANALYZE jobs")
    claimed = []
    while len(claimed) < N:
        claimed += jobqueue.claim_batch(conn, "default", "w1", 200, 300, now=t0)
    records = [OutcomeRecord(r["id"], r["attempts"], "succeeded" if i % 3 else "retryable", t0,
                             code=None if i % 3 else "boom", delay=5.0) for i, r in enumerate(claimed)]
    params = {
        "worker": "w1", "now": t0 + timedelta(seconds=1),
        "ids": [o.job_id for o in records], "tokens": [o.token for o in records],
        "kinds": [o.kind for o in records], "delays": [o.delay for o in records],
        "codes": [o.code for o in records], "details": [o.detail for o in records],
        "started": [o.started_at for o in records], "durations": [o.duration_ms for o in records],
        "effect_job_ids": [],
    }
    plan = explain(conn, "job_record_outcomes", params)
    # Before: a nested loop of the running jobs (estimated at one row) over the batch, N * N rows.
    assert rows_touched(plan["Plan"]) < 40 * N, plan
    assert locked_scans(plan["Plan"]) == ["jobs_pkey"]
    # ...and the statement did its work: every outcome applied once, with its own values.
    rows = conn.execute("SELECT status, count(*) AS n, count(*) FILTER (WHERE last_error_code = 'boom') AS boom "
                        "FROM jobs GROUP BY status ORDER BY status").fetchall()
    assert {r["status"]: (r["n"], r["boom"]) for r in rows} == {"succeeded": (N - N // 3, 0),
                                                                  "retryable": (N // 3, N // 3)}
    assert conn.execute("SELECT count(*) AS n FROM job_attempts").fetchone()["n"] == N
    again = jobqueue.record_outcomes(conn, "w1", records[:5], now=t0)
    assert again == set()  # no longer held: nothing written twice


def test_a_claim_probes_its_candidates_by_primary_key_whatever_the_statistics(conn, make_tenant, t0):
    tenants = [make_tenant(conn)["id"] for _ in range(5)]
    # Statistics taken while nothing is pending: the planner believes the ready index is empty.
    jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": str(i)}, tenants[i % 5]) for i in range(N)])
    done = []
    while len(done) < N:
        done += jobqueue.claim_batch(conn, "default", "w0", 200, 300, now=t0)
    jobqueue.record_outcomes(conn, "w0", [OutcomeRecord(r["id"], r["attempts"], "succeeded", t0) for r in done], now=t0)
    conn.execute("ANALYZE jobs")
    jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": str(i)}, tenants[i % 5]) for i in range(N)])
    # The worker's claim, as it runs it (the limit locks first, when the queue has limits).
    params = jobqueue.claim_params("default", "w1", 200, 300, now=t0 + timedelta(seconds=1))
    plan = explain_all(conn, "job_claim_many", params)
    assert rows_touched(plan["Plan"]) < 40 * N, plan
    # Before: the lock step probed the ready partial index (a scan of all of it per candidate).
    assert locked_scans(plan["Plan"]) == ["jobs_pkey"]
    assert conn.execute("SELECT count(*) AS n FROM jobs WHERE status = 'running'").fetchone()["n"] == 200


def test_the_claim_stays_index_driven_with_pauses_and_a_tenant_limit_present(conn, make_tenant, t0):
    from opsboard import audit, pauses
    tenants = [make_tenant(conn) for _ in range(5)]
    jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": str(i)}, tenants[i % 5]["id"]) for i in range(N)])
    jobqueue.enqueue_many(conn, [NewJob("test.slow", {"key": str(i), "ms": 1}, tenants[i % 5]["id"])
                                 for i in range(N // 6)])
    ops = audit.Actor(label="ops")
    pauses.pause(conn, ops, "tenant", tenants[0]["slug"], "flood", now=t0)
    pauses.pause(conn, ops, "type", "test.slow", "failing", now=t0)
    pauses.pause(conn, ops, "provider", "test_sms_gateway", "outage", now=t0)
    pauses.pause(conn, ops, "queue", "bulk", "held", now=t0)
    pauses.set_tenant_limits(conn, ops, tenants[1]["slug"], "noisy", max_running=5)
    conn.execute("ANALYZE jobs")
    conn.execute("ANALYZE pauses")
    params = jobqueue.claim_params("default", "w1", 200, 300, now=t0 + timedelta(seconds=1),
                                   holds=pauses.read_holds(conn))
    assert params["held_types"] == ["test.slow", "test.sms_a", "test.sms_b"] and not params["queue_held"]
    plan = explain_all(conn, "job_claim_many", params)
    assert rows_touched(plan["Plan"]) < 40 * N, plan
    assert locked_scans(plan["Plan"]) == ["jobs_pkey"]
    text = repr(plan)
    assert "jobs_ready_idx" in text and "Seq Scan', 'Relation Name': 'jobs'" not in text, plan
    got = conn.execute("SELECT tenant_id, type FROM jobs WHERE status = 'running'").fetchall()
    assert len(got) == 200 and {r["type"] for r in got} == {"test.record"}
    assert tenants[0]["id"] not in {r["tenant_id"] for r in got}
    assert sum(r["tenant_id"] == tenants[1]["id"] for r in got) == 5


def tenant_rows_read(node: dict) -> int:
    """Rows the plan read from ``tenants`` (per loop, times its loops)."""
    n = 0
    if node.get("Relation Name") == "tenants":
        n += (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * (node.get("Actual Loops", 1) or 1)
    return n + sum(tenant_rows_read(child) for child in node.get("Plans", []))


def test_a_claim_reads_the_weights_of_the_tenants_it_picked_not_every_tenant(conn, make_tenant, t0):
    """At 10,000 tenants the claim hashed the whole tenants table for 64 picked ones (issue 24,
    `opsboard bench --scenario scale`): each picked tenant's weight is one primary-key probe."""
    tenants = [make_tenant(conn)["id"] for _ in range(400)]
    jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": str(i)}, tenants[i % 3]) for i in range(30)])
    conn.execute("ANALYZE tenants")
    conn.execute("ANALYZE jobs")
    params = jobqueue.claim_params("default", "w1", 30, 300, now=t0 + timedelta(seconds=1))
    plan = explain_all(conn, "job_claim_many", params)
    assert tenant_rows_read(plan["Plan"]) <= 3, plan
    assert conn.execute("SELECT count(*) AS n FROM jobs WHERE status = 'running'").fetchone()["n"] == 30


def test_a_claim_passes_over_a_held_types_jobs_without_reading_them(conn, make_tenant, t0):
    # A broadcast's email deliveries held by a pause (issue 27): its tenant's next page job sits behind
    # them in jobs_ready_idx's order.  The claim walks the tenant's ready types instead (migration 0039).
    from opsboard import audit, pauses
    t = make_tenant(conn)["id"]
    jobqueue.enqueue_many(conn, [NewJob("test.slow", {"key": str(i), "ms": 1}, t) for i in range(N)])
    jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": str(i)}, t) for i in range(3)])
    pauses.pause(conn, audit.Actor(label="ops"), "type", "test.slow", "failing", now=t0)
    conn.execute("ANALYZE jobs")
    params = jobqueue.claim_params("default", "w1", 10, 300, now=t0 + timedelta(seconds=1),
                                   holds=pauses.read_holds(conn))
    plan = explain_all(conn, "job_claim_many", params)
    # Before: every held job was read and filtered out (N rows removed by the tenant's range scan).
    assert ready_index_rows(plan["Plan"]) < N // 10, plan
    assert locked_scans(plan["Plan"]) == ["jobs_pkey"]
    got = conn.execute("SELECT type FROM jobs WHERE status = 'running'").fetchall()
    assert [r["type"] for r in got] == ["test.record"] * 3


def test_a_claim_passes_over_a_held_types_jobs_while_jobs_has_no_statistics(db_url):
    """A database loaded before autovacuum or ANALYZE reached jobs (the broadcast bench, a restore, a
    fresh install's first big send): the planner estimated one row for either ready index and walked
    the held tenant through jobs_ready_idx, which is one level less deep than jobs_ready_type_idx (its
    entries carry no type), reading and sorting every held job: 1.7 s per claim with 600,000 held
    deliveries.  opsboard_ready_jobs_held (migration 0066) takes the plan that needs no sort per step,
    whatever the estimates.  The held type's name is long here, so that the type index is the deeper
    one at a few thousand jobs, as it is at 600,000 with the deliveries' own name."""
    from opsboard import auth, pauses

    held = "test.held." + "x" * 190
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row, options=SESSION_OPTIONS) as conn:
        with conn.transaction(force_rollback=True):
            t = auth.ensure_tenant(conn, "plans-held")["id"]
            t0 = conn.execute("SELECT now() AS n").fetchone()["n"]
            assert conn.execute("SELECT count(*) AS n FROM pg_stats WHERE tablename = 'jobs'").fetchone()["n"] == 0
            conn.execute("INSERT INTO jobs (id, type, tenant_id, queue, payload, max_attempts, available_at) "
                         "SELECT gen_random_uuid(), %s, %s, 'default', '{}', 5, %s FROM generate_series(1, %s)",
                         (held, t, t0, 5 * N))
            jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": str(i)}, t) for i in range(3)])
            conn.execute("INSERT INTO pauses (kind, target, reason, paused_by) VALUES ('type', %s, 'held', 'test')",
                         (held,))
            holds = pauses.read_holds(conn)
            params = jobqueue.claim_params("default", "w1", 10, 300, now=t0 + timedelta(seconds=1), holds=holds)
            assert params["held_types"] == [held]
            plan = explain_all(conn, "job_claim_many", params)
            # Before: the type walk's first step read and sorted all 5 N held jobs, and the unheld
            # type's scan removed them by filter again (10 N rows through jobs_ready_idx).
            assert ready_index_rows(plan["Plan"]) < N // 10, plan
            assert locked_scans(plan["Plan"]) == ["jobs_pkey"]
            got = conn.execute("SELECT type FROM jobs WHERE status = 'running'").fetchall()
            assert [r["type"] for r in got] == ["test.record"] * 3


def test_a_workers_claim_without_holds_settles_on_its_generic_plan(db_url):
    """The held walk (opsboard_ready_jobs_held, migration 0066) is a PL/pgSQL function, estimated at
    1,000 rows a call unless told otherwise, and the estimate does not see the one-time filter that
    skips it without a hold.  The generic plan of the worker's prepared claim then looked dearer than a
    plan for the values at hand, so PostgreSQL planned the claim again at every run: 0.6 -> 1.7 ms per
    claim of 64, +1.3 ms of an idle worker's enqueue -> start (`opsboard bench --peers`)."""
    from opsboard import auth

    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row, options=SESSION_OPTIONS) as conn:
        tenant = auth.ensure_tenant(conn, "plans-generic")["id"]
        for i in range(15):
            jobqueue.enqueue(conn, "test.record", {"key": str(i)}, tenant=tenant)
            got = jobqueue.claim(conn, "default", "w1", 64, 300)
            assert len(got.rows) == 1
        [stmt] = conn.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                              "WHERE statement LIKE '%%tenants_ready%%'").fetchall()
        # PostgreSQL tries 5 custom plans, then keeps the generic one when it costs about as much.
        assert stmt["custom_plans"] <= 5 and stmt["generic_plans"] >= 10, stmt


def updates_of_jobs(node: dict) -> list[str]:
    """How each UPDATE of jobs in the plan finds its rows: the scan under each ModifyTable of jobs."""
    found = []
    if node["Node Type"] == "ModifyTable" and node.get("Relation Name") == "jobs":
        alias = node.get("Alias")

        def scans(n: dict) -> list[str]:
            own = [n["Node Type"]] if n.get("Relation Name") == "jobs" and n.get("Alias") == alias else []
            return own + [s for c in n.get("Plans", []) if c.get("Parent Relationship") != "InitPlan"
                          for s in scans(c)]
        found += [s for c in node.get("Plans", []) if c.get("Parent Relationship") != "InitPlan" for s in scans(c)]
    return found + [s for child in node.get("Plans", []) for s in updates_of_jobs(child)]


def test_the_claim_and_the_outcomes_update_jobs_by_key_in_a_plan_made_while_jobs_was_nearly_empty(db_url):
    """A worker's prepared statements keep the generic plan made at their first runs until jobs is
    analyzed or vacuumed again: one made while jobs held a few rows must still find the rows to
    update by key (migration 0051), not by a sequential scan that a broadcast's jobs then make read
    hundreds of thousands of rows per claim and per completion."""
    from opsboard import auth

    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row, options=SESSION_OPTIONS) as conn:
        with conn.transaction(force_rollback=True):
            tenant = auth.ensure_tenant(conn, "plans-empty")
            t0 = conn.execute("SELECT now() AS n").fetchone()["n"]
            jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": str(i)}, tenant["id"]) for i in range(3)])
            assert conn.execute("SELECT pg_relation_size('jobs') <= 8192 * 2 AS small").fetchone()["small"]
            claim = explain_all(conn, "job_claim_many", jobqueue.claim_params("default", "w1", 2, 300, now=t0))
            assert updates_of_jobs(claim["Plan"]) == ["Tid Scan"], claim
            # ...and the row locks probe the primary key (a sequential scan of jobs per candidate before).
            assert locked_scans(claim["Plan"]) == ["jobs_pkey"], claim
            claimed = conn.execute("SELECT id, attempts FROM jobs WHERE status = 'running'").fetchall()
            assert len(claimed) == 2
            records = [OutcomeRecord(claimed[0]["id"], claimed[0]["attempts"], "succeeded", t0),
                       OutcomeRecord(claimed[1]["id"], claimed[1]["attempts"], "retryable", t0, code="x", delay=1.0)]
            outcomes = explain(conn, "job_record_outcomes", {
                "worker": "w1", "now": t0, "ids": [o.job_id for o in records], "tokens": [o.token for o in records],
                "kinds": [o.kind for o in records], "delays": [o.delay for o in records],
                "codes": [o.code for o in records], "details": [o.detail for o in records],
                "started": [o.started_at for o in records], "durations": [o.duration_ms for o in records],
                "effect_job_ids": []})
            scans = updates_of_jobs(outcomes["Plan"])  # through jobs_pkey, as an index or a bitmap scan
            assert len(scans) == 2 and set(scans) <= {"Index Scan", "Bitmap Heap Scan"}, outcomes
            assert conn.execute("SELECT count(*) FILTER (WHERE status = 'succeeded') AS ok, "
                                "count(*) FILTER (WHERE status = 'retryable') AS retry FROM jobs").fetchone() \
                == {"ok": 1, "retry": 1}


def test_the_claim_locks_its_rows_in_a_statement_of_its_own(db_url):
    """With two workers, a job the other one claimed after this claim's snapshot was re-checked by
    EvalPlanQual, which rebuilt every subplan of the whole claim (the tenant walk, the limits) for
    each such row: 11 % of PostgreSQL's CPU in `opsboard bench --scenario process_2`.  The rows are
    locked and updated by opsboard_claim_locked (migration 0065), a statement of its own on a fresh
    snapshot, whose re-checks rebuild that small statement only.  Its plan, made (and kept by
    PL/pgSQL for the session) while jobs holds one page of analyzed rows, still probes the primary
    key per candidate (a sequential scan of jobs per candidate otherwise)."""
    from opsboard import auth

    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row, options=SESSION_OPTIONS) as conn:
        with conn.transaction(force_rollback=True):
            tenants = [auth.ensure_tenant(conn, f"plans-own-{i}")["id"] for i in range(3)]
            t0 = conn.execute("SELECT now() AS n").fetchone()["n"]
            jobqueue.enqueue_many(conn, [NewJob("test.record", {"key": str(i)}, tenants[i % 3]) for i in range(30)])
            conn.execute("ANALYZE jobs")
            outer = explain(conn, "job_claim_many", jobqueue.claim_params("default", "w1", 10, 300, now=t0))
            assert not locked_scans(outer["Plan"]) and not updates_of_jobs(outer["Plan"]), outer
            both = explain_all(conn, "job_claim_many", jobqueue.claim_params("default", "w1", 10, 300, now=t0))
            assert locked_scans(both["Plan"]) == ["jobs_pkey"], both
            assert updates_of_jobs(both["Plan"]) == ["Tid Scan"], both
            assert conn.execute("SELECT count(*) AS n FROM jobs WHERE status = 'running'").fetchone()["n"] == 20


def test_the_outbox_pruners_batches_read_what_they_delete_not_the_whole_table(conn, tenant, t0):
    """A batch of the outbox pruner (events, then Idempotency-Keys) reads rows in proportion to its batch,
    whatever the table holds: joined to their CTEs on the key, both deletes hashed the whole table for
    every batch (a sequential scan of 500,000 rows, 115-118 ms a batch of 5,000).  Here 3,000 old rows and
    3,000 younger ones of each, batches of 50; the old statements fail it (checked)."""
    import uuid as uuidmod

    from opsboard.schema import uuid7_floor
    old, young, cutoff = t0 - timedelta(days=10), t0 - timedelta(days=1), t0 - timedelta(days=7)
    ids = [uuidmod.UUID(int=uuid7_floor(at).int + i + 1) for at in (old, young) for i in range(3000)]
    conn.execute(
        "INSERT INTO outbox_events (id, type, version, aggregate_type, aggregate_id, tenant_id, occurred_at, "
        "payload, relayed_at) SELECT i, 'ticket.created', 1, 'ticket', i::text, %s, r, '{}', r "
        "FROM unnest(%s::uuid[], %s::timestamptz[]) AS x(i, r)",
        (tenant["id"], ids, [old] * 3000 + [young] * 3000))
    conn.execute(
        "INSERT INTO api_idempotency (tenant_id, key, request_hash, status, response, created_at) "
        "SELECT %s, 'k' || g, '\\x00', 202, '{}', CASE WHEN g <= 3000 THEN %s ELSE %s END::timestamptz "
        "FROM generate_series(1, 6000) g", (tenant["id"], t0 - timedelta(hours=30), t0))
    # With statistics, as a server with autovacuum has them (without any, the events' walk alone reads the
    # backlog's id range through a bitmap and sorts it: the pruners pin the walk's plan, see the next test).
    conn.execute("ANALYZE outbox_events")
    conn.execute("ANALYZE api_idempotency")
    events = explain(conn, "outbox_prune_relayed", {"cutoff": cutoff, "cutoff_id": uuid7_floor(cutoff),
                                                    "after_id": uuidmod.UUID(int=0), "limit": 50})
    keys = explain(conn, "api_idempotency_prune", {"now": t0, "keep": "24 hours", "limit": 50})
    assert events["Plan"]["Plans"], events
    for plan, table in ((events, "outbox_events"), (keys, "api_idempotency")):
        assert rows_touched(plan["Plan"]) < 1000, plan
        # No sequential scan of the pruned table.  (The events' batch may scan event_export_state, one row
        # per configured stream, to learn whether an export runs: issue 46.)
        assert table not in _seq_scanned(plan["Plan"]), plan


def _seq_scanned(node) -> set[str]:
    found = {node["Relation Name"]} if node.get("Node Type") == "Seq Scan" else set()
    for child in node.get("Plans", []):
        found |= _seq_scanned(child)
    return found


def _tuples_read(conn, table: str) -> int:
    """Rows this transaction has read from ``table`` so far, through indexes (bitmaps too) or sequentially."""
    row = conn.execute("SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0) AS n "
                       "FROM pg_stat_xact_user_tables WHERE relname = %s", (table,)).fetchone()
    return row["n"] if row else 0


def test_a_pruners_batch_reads_a_batch_of_the_key_while_the_table_has_no_statistics(db_url):
    """A restore (pg_restore brings no statistics), a bulk load before autovacuum's ANALYZE, a server
    without autovacuum: the planner believed the walk's key range small and read all of it through a
    bitmap, then sorted it, for every batch (EXPLAIN ANALYZE: 100,000 finished jobs read for a batch of
    50), so a backlog of N rows cost N x N / batch.  Each pruner's batch now walks the primary key in
    order (jobqueue.walk_in_index_order): 3,000 old rows of each table, one batch of 50 from each pruner,
    a few hundred rows read at most (without the rule: every row of the range, checked)."""
    import uuid as uuidmod

    from opsboard import auth
    from opsboard.schema import uuid7_floor
    from worker.services.outbox_pruner import OutboxPruner, OutboxPrunerConfig
    from worker.services.pace import Pace

    n = 5 * N
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row, options=SESSION_OPTIONS) as conn:
        t = auth.ensure_tenant(conn, "plans-prune")["id"]
        now = conn.execute("SELECT now() AS n").fetchone()["n"]
        old, cutoff = now - timedelta(days=10), now - timedelta(days=7)
        ids = [uuidmod.UUID(int=uuid7_floor(old).int + i + 1) for i in range(n)]
        for table in ("jobs", "outbox_events"):
            assert conn.execute("SELECT count(*) AS n FROM pg_stats WHERE tablename = %s",
                                (table,)).fetchone()["n"] == 0
        # One transaction per pruner: what one batch sets is local to its transaction, here the test's.
        with conn.transaction(force_rollback=True):
            conn.execute("INSERT INTO jobs (id, type, tenant_id, queue, payload, max_attempts, status, finished_at, "
                         "created_at) SELECT i, 'test.record', %s, 'default', '{}', 5, 'succeeded', %s, %s "
                         "FROM unnest(%s::uuid[]) AS i", (t, old, old, ids))
            before = _tuples_read(conn, "jobs")
            one = jobqueue.prune_finished_slice(conn, cutoff, 50, until=0.0, clock=lambda: 1.0)
            jobs_read = _tuples_read(conn, "jobs") - before
            assert (one.deleted, one.resume_after) == (50, ids[49])
            assert jobs_read < 500, f"{jobs_read} jobs read for a batch of 50"
        with conn.transaction(force_rollback=True):
            conn.execute("INSERT INTO outbox_events (id, type, version, aggregate_type, aggregate_id, tenant_id, "
                         "occurred_at, payload, relayed_at) SELECT i, 'ticket.created', 1, 'ticket', i::text, %s, "
                         "%s, '{}', %s FROM unnest(%s::uuid[]) AS i", (t, old, old, ids))
            ticks = iter(range(1, 100))
            pruner = OutboxPruner(OutboxPrunerConfig(batch=50, pace=Pace(slice_seconds=1.0, duty=0.5)),
                                  clock=lambda: float(next(ticks)))
            before = _tuples_read(conn, "outbox_events")
            assert pruner.run_once(conn, now=now) == 50 and pruner.resume_after == ids[49]
            events_read = _tuples_read(conn, "outbox_events") - before
            assert events_read < 500, f"{events_read} events read for a batch of 50"


def test_an_expiry_batch_reads_a_batch_of_the_oldest_expired_jobs_while_jobs_has_no_statistics(db_url):
    """The expiry takes the oldest expired jobs a batch at a time; without statistics (or with stale ones:
    a table of finished jobs when the statistics were taken) the planner read every expired job through
    a bitmap of jobs_expires_idx (or the ready index) and sorted them, for every batch: 100,000 expired
    jobs read for a batch of 500 (EXPLAIN ANALYZE).  With jobqueue.walk_in_index_order in the batch's
    transaction a wave of 3,000 expired jobs in batches of 50 reads each twice, the walk and the update by
    key: 6,000 rows (without the rule 33,250, checked)."""
    from opsboard import auth
    from worker.services.expiry import Expiry, ExpiryConfig

    n = 5 * N
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row, options=SESSION_OPTIONS) as conn:
        t = auth.ensure_tenant(conn, "plans-expiry")["id"]
        assert conn.execute("SELECT count(*) AS n FROM pg_stats WHERE tablename = 'jobs'").fetchone()["n"] == 0
        with conn.transaction(force_rollback=True):
            now = conn.execute("SELECT now() AS n").fetchone()["n"]
            conn.execute("INSERT INTO jobs (id, type, tenant_id, queue, payload, max_attempts, expires_at) "
                         "SELECT gen_random_uuid(), 'test.record', %s, 'default', '{}', 5, "
                         "%s - make_interval(secs => g) FROM generate_series(1, %s) g", (t, now, n))
            before = _tuples_read(conn, "jobs")
            assert Expiry(ExpiryConfig(batch=50)).run_once(conn, now=now) == n
            read = _tuples_read(conn, "jobs") - before
            assert read < 3 * n, f"{read} jobs read to expire {n} in batches of 50"
            assert conn.execute("SELECT count(*) AS n FROM jobs WHERE tenant_id = %s AND status = 'dead' "
                                "AND last_error_code = 'expired'", (t,)).fetchone()["n"] == n
