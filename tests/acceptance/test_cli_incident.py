"""The incident commands of the CLI (issue 28): ``opsboard jobs cancel-many`` (the dashboard's
bulk cancel: the same filter, a count first, ``--yes`` to act, a reason, audited) and
``opsboard limits show|set|tenant``; bad arguments exit 2 with one line."""
from __future__ import annotations

from opsboard import auth, jobqueue
from opsboard.jobqueue import NewJob
from tests.acceptance.test_cli import assert_one_line_error, cli_env, run
from tests.conftest import TEST_MODULES, connect


def _env(db_url):
    return cli_env(db_url, OPSBOARD_JOB_MODULES=",".join(TEST_MODULES))


def test_cancel_many_counts_first_then_cancels_the_matching_waiting_jobs_audited(db_url):
    env = _env(db_url)
    with connect(db_url) as c:
        acme, other = auth.ensure_tenant(c, "acme")["id"], auth.ensure_tenant(c, "other")["id"]
        jobqueue.enqueue_many(c, [NewJob("test.record", {"key": f"a{i}"}, acme) for i in range(5)]
                              + [NewJob("test.slow", {"key": f"s{i}", "ms": 1}, acme) for i in range(2)]
                              + [NewJob("test.record", {"key": f"o{i}"}, other) for i in range(3)])
        c.execute("UPDATE jobs SET status = 'running', attempts = 1, locked_by = 'w', locked_until = now() + "
                  "interval '1 minute', started_at = now() WHERE payload->>'key' = 'a0'")
        r = run("jobs", "cancel-many", "--type", "test.record", "--tenant", "acme", "--reason", "bad import", env=env)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("4 waiting job(s) match") and "--yes" in r.stdout
        assert c.execute("SELECT count(*) AS n FROM jobs WHERE status = 'cancelled'").fetchone()["n"] == 0
        r = run("jobs", "cancel-many", "--type", "test.record", "--tenant", "acme", "--reason", "bad import",
                "--yes", env=env)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "cancelled 4 job(s) (type test.record, tenant acme)"
        rows = c.execute("SELECT payload->>'key' AS k, status FROM jobs ORDER BY 1").fetchall()
        states = {x["k"]: x["status"] for x in rows}
        assert [k for k, s in states.items() if s == "cancelled"] == ["a1", "a2", "a3", "a4"]
        assert states["a0"] == "running" and states["s0"] == states["o0"] == "pending"
        [row] = c.execute("SELECT actor_label, reason, after FROM audit_log WHERE action = 'job.cancel_many'").fetchall()
        assert row["actor_label"] == "cli" and row["reason"] == "bad import" and row["after"]["cancelled"] == 4
        cancelled_ids = {str(x["id"]) for x in c.execute("SELECT id FROM jobs WHERE status = 'cancelled'")}
        assert set(row["after"]["ids"]) == cancelled_ids


def test_cancel_many_bad_arguments_exit_2_with_one_line(db_url):
    env = _env(db_url)
    assert_one_line_error(run("jobs", "cancel-many", "--type", "test.record", env=env), "--reason")
    assert_one_line_error(run("jobs", "cancel-many", "--reason", "x", env=env), "at least one of")
    assert_one_line_error(run("jobs", "cancel-many", "--queue", "nope", "--reason", "x", env=env), "invalid choice")
    assert_one_line_error(run("jobs", "cancel-many", "--tenant", "nobody", "--reason", "x", env=env), "no tenant")
    assert_one_line_error(run("jobs", "cancel-many", "--queue", "bulk", "--reason", " ", "--yes", env=env), "reason")
    assert_one_line_error(run("jobs", "frobnicate", env=env), "invalid choice")


def test_limits_show_set_and_tenant_audited_with_the_old_value(db_url):
    env = _env(db_url)
    with connect(db_url) as c:
        auth.ensure_tenant(c, "acme")
        r = run("limits", "set", "queue", "bulk", "6", "--reason", "reports pile up", env=env)
        assert r.returncode == 0 and r.stdout.strip() == "queue bulk: default -> 6", r.stderr
        r = run("limits", "set", "type", "test.limited", "1", "--reason", "db hot", env=env)
        assert r.returncode == 0 and r.stdout.strip() == "type test.limited: 3 -> 1", r.stderr
        r = run("limits", "tenant", "acme", "--rate", "50", "--concurrency", "4", "--reason", "noisy", env=env)
        assert r.returncode == 0, r.stderr
        assert "max_running default" in r.stdout and "max_running 4" in r.stdout
        r = run("limits", "tenant", "acme", "--rate", "default", "--reason", "calm", env=env)
        assert r.returncode == 0 and "rate 50.0" in r.stdout and "rate default, burst default, max_running 4" in r.stdout
        shown = run("limits", "show", env=env)
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert any(x.split()[:3] == ["queue", "bulk", "6"] for x in lines), shown.stdout
        assert any(x.split()[:3] == ["type", "test.limited", "1"] for x in lines), shown.stdout
        assert any(x.startswith("tenant") and "acme" in x and "concurrency 4" in x for x in lines), shown.stdout
        assert c.execute("SELECT value FROM limit_overrides WHERE kind = 'queue'").fetchone()["value"] == 6
        t = c.execute("SELECT enqueue_rate, max_running FROM tenants WHERE slug = 'acme'").fetchone()
        assert t["enqueue_rate"] is None and t["max_running"] == 4
        audit = [(x["action"], x["actor_label"], x["before"]) for x in
                 c.execute("SELECT action, actor_label, before FROM audit_log ORDER BY at, id")]
        assert audit[0] == ("limit.set", "cli", {"value": None, "live": False})
        assert audit[1] == ("limit.set", "cli", {"value": 3, "live": False})
        assert [a[0] for a in audit[2:]] == ["tenant.limits", "tenant.limits"]
        assert audit[3][2] == {"rate": 50.0, "burst": None, "max_running": 4}
        r = run("limits", "set", "queue", "bulk", "default", "--reason", "done", env=env)
        assert r.returncode == 0 and r.stdout.strip() == "queue bulk: 6 -> default"


def test_limits_bad_arguments_exit_2_with_one_line(db_url):
    env = _env(db_url)
    with connect(db_url) as c:
        auth.ensure_tenant(c, "acme")
    assert_one_line_error(run("limits", "set", "queue", "bulk", "0", "--reason", "x", env=env), "whole number")
    assert_one_line_error(run("limits", "set", "queue", "bulk", "1001", "--reason", "x", env=env), "1 to 1000")
    assert_one_line_error(run("limits", "set", "queue", "nope", "2", "--reason", "x", env=env), "no queue nope")
    assert_one_line_error(run("limits", "set", "planet", "x", "2", "--reason", "x", env=env), "invalid choice")
    assert_one_line_error(run("limits", "set", "type", "test.limited", "2", env=env), "--reason")
    assert_one_line_error(run("limits", "tenant", "acme", "--rate", "0", "--reason", "x", env=env), "above 0")
    assert_one_line_error(run("limits", "tenant", "acme", "--rate", "nan", "--reason", "x", env=env), "above 0")
    assert_one_line_error(run("limits", "tenant", "acme", "--concurrency", "100001", "--reason", "x", env=env),
                          "100000")
    assert_one_line_error(run("limits", "tenant", "acme", "--reason", "x", env=env), "at least one of")
    assert_one_line_error(run("limits", "tenant", "nobody", "--burst", "3", "--reason", "x", env=env), "no tenant")
    assert_one_line_error(run("limits", "tenant", "acme", "--burst", "3", "--reason", "  ", env=env), "reason")
