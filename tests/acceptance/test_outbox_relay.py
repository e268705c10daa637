"""The relay as real processes: exactly once under SIGKILL, per-aggregate order with 2 workers."""
import signal
import subprocess
import sys
import uuid

import pytest

from opsboard import auth, outbox
from opsboard.config import ROOT
from opsboard.deliveries import webhooks
from opsboard.tools import demo_domain
from tests.conftest import connect, wait_for, worker_env


def count(c, sql, *args):
    return c.execute(sql, args).fetchone()["n"]


@pytest.mark.chaos
def test_relay_killed_between_batches_yields_every_job_exactly_once(db_url, tmp_path):
    n = 1500
    with connect(db_url) as c:
        tenant = auth.ensure_tenant(c, "kill")["id"]
        # The "webhooks" subscriber is fanned out by the relay itself, in its transaction: one delivery each.
        webhooks.create_endpoint(c, tenant, "http://127.0.0.1:9/hook")
        with c.transaction():
            for i in range(n):
                demo_domain.pay_order(c, tenant, 100 + i, "EUR")
    relayed = "SELECT count(*) AS n FROM outbox_events WHERE relayed_at IS NOT NULL"
    kills_mid_way = 0
    for round_ in range(6):  # five kills after some progress, then one relay that finishes
        log = open(tmp_path / f"relay-{round_}.log", "wb")
        p = subprocess.Popen([sys.executable, "-m", "worker.services.relay", "--batch", "7", "--poll", "0.2"],
                             cwd=ROOT, env=worker_env(db_url), stdout=log, stderr=subprocess.STDOUT)
        try:
            with connect(db_url) as c:
                before = count(c, relayed)
                if round_ == 5:
                    wait_for(lambda: count(c, relayed) == n, timeout=60, message="every event relayed")
                else:
                    wait_for(lambda: count(c, relayed) > before, timeout=30, interval=0.005, message="progress")
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait(10)
        with connect(db_url) as c:
            if count(c, relayed) < n:
                kills_mid_way += 1
    assert kills_mid_way >= 1
    with connect(db_url) as c:
        assert count(c, "SELECT count(*) AS n FROM outbox_events WHERE relayed_at IS NULL") == 0
        # webhooks (its endpoint's delivery), partner_webhook, receipt_email, notify
        per_event = len(outbox.subscriptions("order.paid"))
        assert count(c, "SELECT count(*) AS n FROM jobs WHERE type = 'webhook.deliver'") == n
        assert count(c, "SELECT count(*) AS n FROM jobs") == per_event * n
        # Every event made exactly one job per subscriber, and every job points at a relayed event.
        assert count(c, "SELECT count(*) AS n FROM (SELECT event_id FROM jobs GROUP BY event_id "
                        "HAVING count(*) = %s AND count(DISTINCT idempotency_key) = %s) x", per_event, per_event) == n
        assert count(c, "SELECT count(*) AS n FROM jobs j LEFT JOIN outbox_events e ON e.id = j.event_id "
                        "WHERE e.relayed_at IS NULL") == 0


def test_200_events_on_5_aggregates_run_in_order_per_aggregate_with_2_workers(db_url, start_worker):
    with connect(db_url) as c:
        tenant = auth.ensure_tenant(c, "order")["id"]
    env = {"OPSBOARD_POLL_INTERVAL": "0.2", "OPSBOARD_WORKER_QUEUES": "critical=1,default=4,bulk=1"}
    workers = [start_worker(db_url, "--id", f"w{i}", **env) for i in range(2)]
    orders = [uuid.uuid4() for _ in range(5)]
    published: dict[str, list] = {str(o): [] for o in orders}
    with connect(db_url) as c:
        for i in range(200):
            order = orders[i % 5]
            # One aggregate, many events: orders here stand for accounts paid into repeatedly.
            with c.transaction():
                from opsboard import outbox
                e = outbox.publish(c, "order.paid", 1, aggregate=("order", order), tenant=tenant,
                                   payload={"order_id": str(order), "amount_cents": i, "currency": "EUR"})
            published[str(order)].append(e["id"])
        wait_for(lambda: count(c, "SELECT count(*) AS n FROM demo_effects WHERE subscriber = 'partner_webhook'")
                 == 200, timeout=90, message="200 partner webhooks")
        rows = c.execute("SELECT aggregate, event_id FROM demo_effects WHERE subscriber = 'partner_webhook' "
                         "ORDER BY seq").fetchall()
        ran: dict[str, list] = {}
        for r in rows:
            ran.setdefault(r["aggregate"].split(":", 1)[1], []).append(r["event_id"])
        assert ran == published
        workers_used = {r["worker"] for r in c.execute("SELECT DISTINCT worker FROM job_attempts").fetchall()}
        assert len(workers_used) == 2, workers_used
    for w in workers:
        assert w.poll() is None, w.log_path.read_text()
