"""Circuit breakers: open on consecutive failures or a failure rate, snooze without spending
attempts, one half-open probe, close on success, longer cool-down after a failed probe."""
from __future__ import annotations

from datetime import timedelta

from opsboard import auth
from opsboard.config import ProviderSettings
from opsboard.deliveries import breaker, webhooks
from tests.conftest import connect
from tests.support.delivery import insert_event, runner, sandbox_settings  # noqa: F401
from tests.support.sandbox import sandbox  # noqa: F401

CFG = ProviderSettings(breaker_failures=3, breaker_cooldown=30, breaker_cooldown_max=600, breaker_min_calls=20,
                       breaker_failure_rate=0.5, breaker_window=60)


def test_opens_after_consecutive_failures_probes_once_and_closes(conn, t0):
    name = "provider:test"
    for i in range(2):
        breaker.record(conn, name, False, code="http_503", now=t0, config=CFG)
        assert breaker.admit(conn, name, now=t0).allowed
    row = breaker.record(conn, name, False, code="http_503", now=t0, config=CFG)
    assert row["state"] == "open" and row["open_until"] == t0 + timedelta(seconds=30)
    shut = breaker.admit(conn, name, now=t0 + timedelta(seconds=10))
    assert not shut.allowed and shut.retry_at == t0 + timedelta(seconds=30)
    probe = breaker.admit(conn, name, now=t0 + timedelta(seconds=31))
    assert probe.allowed and probe.probe
    # Only one probe at a time, across every worker.
    assert not breaker.admit(conn, name, now=t0 + timedelta(seconds=32)).allowed
    breaker.record(conn, name, True, now=t0 + timedelta(seconds=33), config=CFG)
    after = breaker.admit(conn, name, now=t0 + timedelta(seconds=34))
    assert after.allowed and not after.probe
    assert conn.execute("SELECT state, consecutive_failures FROM circuit_breakers WHERE name = %s",
                        (name,)).fetchone() == {"state": "closed", "consecutive_failures": 0}


def test_a_failed_probe_reopens_for_longer(conn, t0):
    name = "endpoint:x"
    for _ in range(3):
        breaker.record(conn, name, False, now=t0, config=CFG)
    t1 = t0 + timedelta(seconds=31)
    assert breaker.admit(conn, name, now=t1).probe
    row = breaker.record(conn, name, False, now=t1, config=CFG)
    assert row["state"] == "open" and row["open_until"] == t1 + timedelta(seconds=60)


def test_opens_on_failure_rate(conn, t0):
    name = "provider:flaky"
    cfg = ProviderSettings(breaker_failures=100, breaker_min_calls=20, breaker_failure_rate=0.5, breaker_window=60)
    for i in range(19):
        breaker.record(conn, name, i % 2 == 1, now=t0 + timedelta(seconds=i), config=cfg)
    assert breaker.admit(conn, name, now=t0 + timedelta(seconds=20)).allowed
    row = breaker.record(conn, name, False, now=t0 + timedelta(seconds=20), config=cfg)
    assert (row["window_calls"], row["window_failures"], row["state"]) == (20, 11, "open")


def test_a_healthy_breaker_is_not_written_per_call(conn, t0):
    assert breaker.record(conn, "provider:ok", True, now=t0, config=CFG) is None
    assert conn.execute("SELECT count(*) AS n FROM circuit_breakers").fetchone()["n"] == 0


def test_open_breaker_snoozes_jobs_without_spending_attempts(db_url, sandbox, runner):
    runner.settings = sandbox_settings(sandbox, breaker_failures=3, breaker_cooldown=30)
    with connect(db_url) as c:
        t = auth.ensure_tenant(c, "acme")["id"]
        ep = webhooks.create_endpoint(c, t, f"{sandbox.url}/hooks/down")
        first = webhooks.fanout(c, insert_event(c, t))[0]
        queued = [webhooks.fanout(c, insert_event(c, t))[0] for _ in range(5)]
    sandbox.fault("/hooks/down", status=503)
    for _ in range(3):
        runner.make_due(first["id"])
        assert runner.run(first["id"])["status"] == "retryable"
    name = f"endpoint:{ep['id']}"
    with connect(db_url) as c:
        assert c.execute("SELECT state FROM circuit_breakers WHERE name = %s", (name,)).fetchone()["state"] == "open"
    for j in queued:
        done = runner.run(j["id"])
        assert (done["status"], done["attempts"], done["last_error_code"]) == ("pending", 0, "circuit_open")
    assert len(sandbox.records("webhook")) == 3  # nothing was sent while open
    # Cool-down over: one probe goes through; the receiver is back, so the breaker closes.
    sandbox.clear_faults()
    with connect(db_url) as c:
        c.execute("UPDATE circuit_breakers SET open_until = now() - interval '1 second' WHERE name = %s", (name,))
    runner.make_due(queued[0]["id"])
    assert runner.run(queued[0]["id"])["status"] == "succeeded"
    with connect(db_url) as c:
        assert c.execute("SELECT state FROM circuit_breakers WHERE name = %s", (name,)).fetchone()["state"] == "closed"
    runner.make_due(queued[1]["id"])
    assert runner.run(queued[1]["id"])["status"] == "succeeded"


def test_a_burst_of_failures_opens_the_breaker_once(db_url):
    """Workers failing at once (real connections, in threads): one opening per burst, and the
    cool-down doubles once when a failed probe and a late failure land together."""
    import threading
    import uuid
    from datetime import datetime, timezone

    workers, trials = 4, 200
    t = datetime(2030, 1, 1, tzinfo=timezone.utc)
    conns = [connect(db_url) for _ in range(workers)]
    barrier = threading.Barrier(workers)
    results: list[list] = [[] for _ in range(workers)]
    names = [f"provider:burst-{uuid.uuid4().hex[:8]}-{i}" for i in range(trials)]

    def fail_together(w, now):
        for name in names:
            barrier.wait()
            results[w].append(breaker.record(conns[w], name, False, code="http_503", now=now, config=CFG))

    try:
        for name in names:          # one failure short of the threshold
            for _ in range(CFG.breaker_failures - 1):
                breaker.record(conns[0], name, False, code="http_503", now=t, config=CFG)
        threads = [threading.Thread(target=fail_together, args=(w, t)) for w in range(workers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        rows = {r["name"]: r for r in conns[0].execute(
            "SELECT name, state, opens, open_until FROM circuit_breakers WHERE name = ANY(%s)", (names,))}
        assert all((rows[n]["state"], rows[n]["opens"], rows[n]["open_until"])
                   == ("open", 1, t + timedelta(seconds=CFG.breaker_cooldown)) for n in names)
        openings = [sum(1 for w in range(workers) if results[w][i]["opened"]) for i in range(trials)]
        assert openings == [1] * trials

        # The cool-down passed: one probe goes; it and late failures fail at once -> doubled once.
        later = t + timedelta(seconds=CFG.breaker_cooldown + 1)
        for name in names:
            assert breaker.admit(conns[0], name, now=later).probe
        results[:] = [[] for _ in range(workers)]
        threads = [threading.Thread(target=fail_together, args=(w, later)) for w in range(workers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        rows = {r["name"]: r for r in conns[0].execute(
            "SELECT name, state, opens, open_until FROM circuit_breakers WHERE name = ANY(%s)", (names,))}
        assert all((rows[n]["state"], rows[n]["opens"], rows[n]["open_until"])
                   == ("open", 2, later + timedelta(seconds=2 * CFG.breaker_cooldown)) for n in names)
    finally:
        for c in conns:
            c.close()
