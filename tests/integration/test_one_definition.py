"""Values defined once in opsboard.config, and the database's own copy kept equal to them."""
import re

from opsboard import alerts, dashboard
from opsboard.config import QUEUE_AGE_TARGETS, QUEUE_NAMES, WORKER_LIVE_SECONDS, queue_age_target


def test_the_databases_queue_check_names_the_configured_queues(conn):
    # The CHECK on jobs.queue (migration 0002) cannot import Python: this test is its link.
    definition = conn.execute(
        "SELECT pg_get_constraintdef(c.oid) AS d FROM pg_constraint c "
        "WHERE c.conrelid = 'jobs'::regclass AND c.contype = 'c' AND pg_get_constraintdef(c.oid) LIKE '%%queue%%'"
    ).fetchone()["d"]
    assert tuple(re.findall(r"'(\w+)'::text", definition)) == QUEUE_NAMES


def test_metrics_and_alerts_share_the_age_targets_and_the_live_window():
    config = alerts.AlertConfig()
    assert {q: config.age_target(q) for q in QUEUE_NAMES} == {q: queue_age_target(q) for q in QUEUE_NAMES}
    assert set(QUEUE_AGE_TARGETS) == set(QUEUE_NAMES)
    assert config.worker_silence == dashboard.WORKER_STALE_SECONDS == WORKER_LIVE_SECONDS
    assert config.queues == QUEUE_NAMES
