"""opsboard_jobs_completed is a Prometheus counter: pruning old statistics must never lower it."""
from contextlib import contextmanager
from datetime import timedelta

from prometheus_client.parser import text_string_to_metric_families

from opsboard import metrics
from worker.services.pruner import Pruner, PrunerConfig

HIST = [0] * 16


def _stat(conn, minute, worker, type_, succeeded, retried=0, dead=0, snoozed=0):
    conn.execute("INSERT INTO job_stats (minute, worker_id, queue, type, succeeded, retried, dead, snoozed, "
                 "duration_ms_sum, duration_hist) VALUES (%s, %s, 'default', %s, %s, %s, %s, %s, 0, %s)",
                 (minute, worker, type_, succeeded, retried, dead, snoozed, HIST))


class _OneConnection:
    """What QueueCollector reads through: here the test's own (rolled-back) connection."""

    def __init__(self, conn):
        self.conn = conn

    @contextmanager
    def connection(self):
        yield self.conn


def _exported(conn) -> dict[tuple[str, str, str], float]:
    text = metrics.prometheus_text(_OneConnection(conn)).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name == "opsboard_jobs_completed":
            for s in family.samples:
                if s.name == "opsboard_jobs_completed_total":
                    out[(s.labels["queue"], s.labels["type"], s.labels["outcome"])] = s.value
    return out


def _totals(conn) -> dict[tuple[str, str], dict]:
    return {(r["queue"], r["type"]): {o: int(r[o]) for o in metrics.OUTCOMES} for r in metrics.completed_totals(conn)}


def test_pruning_old_statistics_leaves_the_counter_unchanged(conn, t0):
    minute = t0.replace(second=0, microsecond=0)
    _stat(conn, minute - timedelta(days=20), "w1", "test.a", 40, retried=3, dead=1)
    _stat(conn, minute - timedelta(days=20), "w2", "test.a", 10, snoozed=2)
    _stat(conn, minute - timedelta(days=15), "w1", "test.b", 7)
    _stat(conn, minute - timedelta(minutes=5), "w1", "test.a", 5, dead=1)
    before_rows, before_text = _totals(conn), _exported(conn)
    assert before_rows[("default", "test.a")] == {"succeeded": 55, "retried": 3, "dead": 2, "snoozed": 2}
    assert before_text[("default", "test.a", "succeeded")] == 55.0

    pruner = Pruner(PrunerConfig(stats_retention_days=14))
    pruner.run_once(conn, now=t0)
    kept = conn.execute("SELECT count(*) AS n FROM job_stats WHERE type IN ('test.a', 'test.b')").fetchone()["n"]
    assert kept == 1  # the old rows are gone...
    assert _totals(conn) == before_rows  # ...and the lifetime totals are not
    assert _exported(conn) == before_text

    # Pruning again (folded rows are not folded twice), then new work: the counter only grows.
    pruner.run_once(conn, now=t0 + timedelta(days=30))
    assert conn.execute("SELECT count(*) AS n FROM job_stats WHERE type IN ('test.a', 'test.b')").fetchone()["n"] == 0
    assert _totals(conn) == before_rows
    _stat(conn, minute + timedelta(days=30), "w1", "test.a", 1)
    assert _exported(conn)[("default", "test.a", "succeeded")] == 56.0
