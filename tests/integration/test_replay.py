"""Replay of dead jobs: a new job, an audit row, idempotent on the request key."""
import uuid
from datetime import timedelta

import psycopg
import pytest

from opsboard import audit, auth, jobqueue
from opsboard.jobqueue import DeadFilter, OutcomeRecord, QueueError

OPS = audit.Actor(label="ops@example.test")


def make_dead(conn, tenant_id, t0, *, type="test.record", payload=None, code="http_410", **kw) -> dict:
    """Enqueue, claim and kill one job; returns the dead row."""
    j = jobqueue.enqueue(conn, type, payload or {"key": uuid.uuid4().hex}, tenant=tenant_id, **kw)
    rows = jobqueue.claim_batch(conn, j["queue"], "w", 1000, 30, now=t0 + timedelta(days=1))
    [row] = [r for r in rows if r["id"] == j["id"]]
    others = [OutcomeRecord(r["id"], r["attempts"], "released", t0) for r in rows if r["id"] != j["id"]]
    jobqueue.record_outcomes(conn, "w", [OutcomeRecord(j["id"], row["attempts"], "dead", t0, code=code)] + others, now=t0)
    dead = jobqueue.get_job(conn, j["id"])
    assert dead["status"] == "dead"
    return dead


def replays_of(conn, job_id) -> list[dict]:
    return conn.execute("SELECT * FROM jobs WHERE replay_of = %s", (job_id,)).fetchall()


def test_replay_creates_a_new_job_and_an_audit_row(conn, tenant, t0):
    dead = make_dead(conn, tenant["id"], t0, payload={"key": "k1"}, correlation_id="req-9", group_key="g1")
    new = jobqueue.replay(conn, dead["id"], OPS, "  provider fixed  ", "rk-1")
    assert new["id"] != dead["id"] and new["replay_of"] == dead["id"]
    assert (new["status"], new["attempts"], new["payload"]) == ("pending", 0, {"key": "k1"})
    assert (new["type"], new["tenant_id"], new["queue"], new["correlation_id"], new["group_key"]) == \
        (dead["type"], dead["tenant_id"], dead["queue"], "req-9", "g1")
    # The dead job is evidence: untouched.
    assert jobqueue.get_job(conn, dead["id"]) == dead
    rec = audit.find_by_request_key(conn, "job.replay", "rk-1")
    assert rec["actor_label"] == "ops@example.test" and rec["reason"] == "provider fixed"
    assert (rec["target_type"], rec["target_id"], rec["tenant_id"]) == ("job", str(dead["id"]), tenant["id"])
    assert rec["before"] == {"status": "dead", "last_error_code": "http_410"}
    assert rec["after"] == {"job_id": str(new["id"])}


def test_the_same_request_key_replays_once(conn, tenant, t0):
    dead = make_dead(conn, tenant["id"], t0)
    first = jobqueue.replay(conn, dead["id"], OPS, "retry", "double-click")
    second = jobqueue.replay(conn, dead["id"], OPS, "retry", "double-click")
    assert second["id"] == first["id"]
    assert len(replays_of(conn, dead["id"])) == 1
    assert conn.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'job.replay'").fetchone()["n"] == 1
    # Another request is another replay.
    third = jobqueue.replay(conn, dead["id"], OPS, "again", "another-click")
    assert third["id"] not in (first["id"], dead["id"])
    assert len(replays_of(conn, dead["id"])) == 2


def test_a_request_key_cannot_fetch_another_jobs_replay(conn, tenant, make_tenant, t0):
    dead = make_dead(conn, tenant["id"], t0)
    jobqueue.replay(conn, dead["id"], OPS, "retry", "shared-key")
    other = make_dead(conn, make_tenant(conn)["id"], t0)
    scope = auth.TenantScope(all=False, ids=(other["tenant_id"],))
    with pytest.raises(QueueError) as e:
        jobqueue.replay(conn, other["id"], OPS, "retry", "shared-key", scope=scope)
    assert e.value.code == "request_key_reused"
    assert replays_of(conn, other["id"]) == []


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_a_reason_is_required(conn, tenant, t0, reason):
    dead = make_dead(conn, tenant["id"], t0)
    with pytest.raises(QueueError) as e:
        jobqueue.replay(conn, dead["id"], OPS, reason, "rk")
    assert e.value.code == "reason_required"
    assert replays_of(conn, dead["id"]) == []


def test_only_dead_jobs_can_be_replayed(conn, tenant, make_tenant, t0):
    pending = jobqueue.enqueue(conn, "test.record", {"key": "p"}, tenant=tenant["id"])
    with pytest.raises(QueueError) as e:
        jobqueue.replay(conn, pending["id"], OPS, "why not", "rk-p")
    assert e.value.code == "invalid_status"
    for missing in (uuid.uuid4(), "not-a-uuid"):
        with pytest.raises(QueueError) as e:
            jobqueue.replay(conn, missing, OPS, "why not", None)
        assert e.value.code == "not_found"
    dead = make_dead(conn, tenant["id"], t0)
    other_scope = auth.TenantScope(all=False, ids=(make_tenant(conn)["id"],))
    with pytest.raises(QueueError) as e:
        jobqueue.replay(conn, dead["id"], OPS, "why not", "rk-x", scope=other_scope)
    assert e.value.code == "not_found"
    assert conn.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'job.replay'").fetchone()["n"] == 0


def test_replay_of_a_job_whose_key_is_live_again_returns_that_job(conn, tenant, t0):
    dead = make_dead(conn, tenant["id"], t0, idempotency_key="order-5")
    live = jobqueue.enqueue(conn, "test.record", {"key": "again"}, tenant=tenant["id"], idempotency_key="order-5")
    got = jobqueue.replay(conn, dead["id"], OPS, "retry", "rk-live")
    assert got["id"] == live["id"]
    # The audit row names the job that stands for the replay, so a repeat finds it.
    assert audit.find_by_request_key(conn, "job.replay", "rk-live")["after"] == {"job_id": str(live["id"])}
    assert jobqueue.replay(conn, dead["id"], OPS, "retry", "rk-live")["id"] == live["id"]


def test_replaying_a_keyed_job_twice_gives_one_live_job(conn, tenant, t0):
    dead = make_dead(conn, tenant["id"], t0, idempotency_key="order-6")
    a = jobqueue.replay(conn, dead["id"], OPS, "retry", "rk-a")
    b = jobqueue.replay(conn, dead["id"], OPS, "retry", "rk-b")
    assert a["id"] == b["id"]
    assert len(replays_of(conn, dead["id"])) == 1


def test_replay_many_by_filter_with_counts(conn, tenant, make_tenant, t0):
    other = make_tenant(conn)
    smtp = [make_dead(conn, tenant["id"], t0, code="smtp_timeout") for _ in range(3)]
    gone = [make_dead(conn, tenant["id"], t0, code="http_410") for _ in range(2)]
    theirs = make_dead(conn, other["id"], t0, code="smtp_timeout")
    slow = make_dead(conn, tenant["id"], t0, type="test.slow", payload={"key": "s", "ms": 1}, code="smtp_timeout")

    result = jobqueue.replay_many(conn, DeadFilter(type="test.record", error_code="smtp_timeout", tenant_id=tenant["id"]),
                               OPS, "smtp is back", "bulk-1")
    assert result.matched == 3 and len(result.replayed) == 3
    assert sorted(r["replay_of"] for r in result.replayed) == sorted(d["id"] for d in smtp)
    for d in gone + [theirs, slow]:
        assert replays_of(conn, d["id"]) == []
    assert conn.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'job.replay' AND reason = 'smtp is back'"
                        ).fetchone()["n"] == 3

    # The same request again replays nothing new.
    again = jobqueue.replay_many(conn, DeadFilter(type="test.record", error_code="smtp_timeout", tenant_id=tenant["id"]),
                              OPS, "smtp is back", "bulk-1")
    assert sorted(r["id"] for r in again.replayed) == sorted(r["id"] for r in result.replayed)
    # Only the open dead letters: the ones just replayed are done.
    open_only = jobqueue.replay_many(conn, DeadFilter(error_code="smtp_timeout", open_only=True), OPS, "rest", "bulk-2")
    assert open_only.matched == 2
    assert {r["replay_of"] for r in open_only.replayed} == {theirs["id"], slow["id"]}

    # A tenant scope limits what matches; a limit bounds it.
    scoped = jobqueue.replay_many(conn, DeadFilter(), OPS, "scoped", "bulk-3",
                               scope=auth.TenantScope(all=False, ids=(other["id"],)))
    assert scoped.matched == 1 and scoped.replayed[0]["tenant_id"] == other["id"]
    limited = jobqueue.replay_many(conn, DeadFilter(error_code="http_410"), OPS, "limited", "bulk-4", limit=1)
    # matched counts every matching dead job; the limit bounds what is replayed.
    assert limited.matched == 2 and len(limited.replayed) == 1
    none = jobqueue.replay_many(conn, DeadFilter(type="test.nothing"), OPS, "nothing", "bulk-5")
    assert (none.matched, none.replayed) == (0, [])


def test_replay_many_needs_a_reason_before_touching_anything(conn, tenant, t0):
    make_dead(conn, tenant["id"], t0)
    with pytest.raises(QueueError) as e:
        jobqueue.replay_many(conn, DeadFilter(), OPS, " ", "bulk-x")
    assert e.value.code == "reason_required"
    assert conn.execute("SELECT count(*) AS n FROM jobs WHERE replay_of IS NOT NULL").fetchone()["n"] == 0


def test_the_audit_log_cannot_be_edited(conn, tenant, t0):
    dead = make_dead(conn, tenant["id"], t0)
    jobqueue.replay(conn, dead["id"], OPS, "retry", "rk-audit")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        with conn.transaction():
            conn.execute("UPDATE audit_log SET reason = 'edited' WHERE request_key = 'rk-audit'")


def test_concurrent_identical_replays_make_one_job(db_url):
    import threading

    from tests.conftest import connect, wait_for

    with connect(db_url) as a, connect(db_url) as b:
        b_pid = b.info.backend_pid
        t = auth.ensure_tenant(a, "acme")
        t0 = a.execute("SELECT now() AS n").fetchone()["n"]
        dead = make_dead(a, t["id"], t0)
        result = {}
        with a.transaction():
            first = jobqueue.replay(a, dead["id"], OPS, "retry", "same-click")

            def second():
                result["job"] = jobqueue.replay(b, dead["id"], OPS, "retry", "same-click")

            th = threading.Thread(target=second)
            th.start()
            with connect(db_url) as watcher:
                wait_for(lambda: watcher.execute("SELECT count(*) AS n FROM pg_locks WHERE pid = %s AND NOT granted",
                                                 (b_pid,)).fetchone()["n"], timeout=10,
                         message="the second request to wait for the first one's commit")
        th.join(10)
        assert result["job"]["id"] == first["id"]
        assert len(replays_of(a, dead["id"])) == 1


def _dead_sharing_keys(conn, tenant_id, t0) -> list[dict]:
    """Dead jobs, two of each key ``shared-1`` and ``shared-2`` (each died before the next took the key),
    and three without a key: 7 dead jobs that replay as 5 jobs."""
    dead = []
    for key in ("shared-1", "shared-2"):
        for _ in range(2):
            dead.append(make_dead(conn, tenant_id, t0, idempotency_key=key))
    dead += [make_dead(conn, tenant_id, t0) for _ in range(3)]
    return dead


def test_bulk_replay_of_dead_jobs_sharing_a_key_counts_each_dead_job_once(conn, tenant, t0):
    from opsboard import dashboard

    dead = _dead_sharing_keys(conn, tenant["id"], t0)
    result = jobqueue.replay_many(conn, DeadFilter(type="test.record", open_only=True), OPS, "provider fixed", "bulk")
    assert result.matched == 7 and len(result.replayed) == 7
    # Five distinct replay jobs, all new; two dead jobs share one with the first of their key.
    assert len(result.jobs) == 5 and result.created == 5
    made = conn.execute("SELECT id FROM jobs WHERE replay_of = ANY(%s)", ([d["id"] for d in dead],)).fetchall()
    assert {r["id"] for r in made} == {r["id"] for r in result.jobs}
    # Every dead job reads as replayed (its job page), by the job its audit row names.
    rows = conn.execute("SELECT target_id, after FROM audit_log WHERE action = 'job.replay'").fetchall()
    assert sorted(r["target_id"] for r in rows) == sorted(str(d["id"]) for d in dead)
    named = {r["target_id"]: r["after"]["job_id"] for r in rows}
    for d in dead:
        replays = dashboard.job_detail(conn, auth.TenantScope(all=True, ids=()), d["id"]).replays
        assert [str(r["id"]) for r in replays] == [named[str(d["id"])]], d["idempotency_key"]
    # None is open any more: the groups say so, and another bulk replay finds nothing.
    groups = dashboard.dead_letter_groups(conn, auth.TenantScope(all=True, ids=()), tenant_id=tenant["id"],
                                          include_handled=True).groups
    assert [(g["total"], g["open"]) for g in groups] == [(7, 0)]
    again = jobqueue.replay_many(conn, DeadFilter(type="test.record", open_only=True), OPS, "again", "bulk-2")
    assert again.matched == 0 and again.replayed == []
    assert conn.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'job.replay'").fetchone()["n"] == 7


def test_a_replay_that_finds_its_key_held_is_recorded_and_says_so(conn, tenant, t0):
    dead = make_dead(conn, tenant["id"], t0, idempotency_key="order-7")
    live = jobqueue.enqueue(conn, "test.record", {"key": "again"}, tenant=tenant["id"], idempotency_key="order-7")
    got = jobqueue.replay(conn, dead["id"], OPS, "retry", "rk-held")
    assert got["id"] == live["id"] and got["created"] is False and got["repeated"] is False
    link = conn.execute("SELECT job_id FROM job_replay_links WHERE dead_job_id = %s", (dead["id"],)).fetchall()
    assert [r["job_id"] for r in link] == [live["id"]]
    # The same form again, with another reason: the first result, marked as such, and nothing recorded.
    again = jobqueue.replay(conn, dead["id"], OPS, "another reason", "rk-held")
    assert again["id"] == live["id"] and again["repeated"] is True and again["first_reason"] == "retry"
    assert conn.execute("SELECT count(*) AS n FROM audit_log WHERE action = 'job.replay'").fetchone()["n"] == 1


def test_migration_0033_backfills_replays_recorded_only_in_the_audit_log(conn, tenant, t0):
    from opsboard.config import ROOT

    dead = make_dead(conn, tenant["id"], t0, idempotency_key="order-8")
    other = make_dead(conn, tenant["id"], t0, idempotency_key="order-8")
    jobqueue.replay(conn, dead["id"], OPS, "retry", "rk-old")             # made a job: replay_of names it
    live = jobqueue.replay(conn, other["id"], OPS, "retry", "rk-old-2")   # found the key held: a link
    # As before 0033: the link of the second replay was not written.
    conn.execute("DELETE FROM job_replay_links")
    sql = (ROOT / "migrations" / "0033_job_replay_links.sql").read_text()
    conn.execute(sql[sql.index("INSERT INTO job_replay_links"):])
    links = conn.execute("SELECT dead_job_id, job_id FROM job_replay_links").fetchall()
    assert [(r["dead_job_id"], r["job_id"]) for r in links] == [(other["id"], live["id"])]


def _dead_with_expiry(conn, tenant_id, t0, expires_at) -> dict:
    """A job with a time to live, claimed while it was still live and made dead then."""
    j = jobqueue.enqueue(conn, "test.record", {"key": uuid.uuid4().hex}, tenant=tenant_id,
                         run_at=t0 - timedelta(minutes=2), expires_at=expires_at)
    at = t0 - timedelta(minutes=1)
    rows = jobqueue.claim_batch(conn, j["queue"], "w", 1000, 30, now=at)
    [row] = [r for r in rows if r["id"] == j["id"]]
    others = [OutcomeRecord(r["id"], r["attempts"], "released", at) for r in rows if r["id"] != j["id"]]
    jobqueue.record_outcomes(conn, "w", [OutcomeRecord(j["id"], row["attempts"], "dead", at, code="http_503")] + others,
                             now=at)
    dead = jobqueue.get_job(conn, j["id"])
    assert dead["status"] == "dead"
    return dead


def test_a_replay_keeps_the_time_to_live_and_none_is_made_past_it(conn, tenant, t0):
    """A stale one-time code is never sent: a dead job past its expires_at is not replayed (job_expired,
    nothing written), and a replay before it carries the same expires_at (before: none, so a replayed
    OTP could send a code long expired)."""
    live = _dead_with_expiry(conn, tenant["id"], t0, t0 + timedelta(hours=1))
    new = jobqueue.replay(conn, live["id"], OPS, "gateway is back", "rk-ttl")
    assert new["expires_at"] == t0 + timedelta(hours=1) == live["expires_at"]

    stale = _dead_with_expiry(conn, tenant["id"], t0, t0 - timedelta(seconds=1))
    with pytest.raises(QueueError) as e:
        jobqueue.replay(conn, stale["id"], OPS, "gateway is back", "rk-stale")
    assert (e.value.code, e.value.status) == ("job_expired", 409)
    assert replays_of(conn, stale["id"]) == []
    assert audit.find_by_request_key(conn, "job.replay", "rk-stale") is None

    # Replaying the group takes the one still worth sending; the stale one is not even counted.
    from opsboard import dashboard
    f = DeadFilter(type="test.record", error_code="http_503", open_only=True)
    other = _dead_with_expiry(conn, tenant["id"], t0, None)
    assert dashboard.replay_preview(conn, auth.TenantScope(all=True), f, cap=100)["matched"] == 1
    result = jobqueue.replay_many(conn, f, OPS, "gateway is back", "bulk-ttl")
    assert result.matched == 1 and [r["replay_of"] for r in result.replayed] == [other["id"]]
    assert replays_of(conn, stale["id"]) == []
